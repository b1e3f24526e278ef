//! Packet-buffer pools (`rte_pktmbuf_pool_create`), freed when dropped.

use super::DpdkError;
use std::ffi::CString;
use std::ptr::NonNull;

/// Default data room of an mbuf: 2048 bytes of packet plus the standard headroom.
pub const DEFAULT_DATA_ROOM: u16 = ferrule_ffi::RTE_MBUF_DEFAULT_BUF_SIZE as u16;

/// Headroom DPDK reserves in front of the packet data of every mbuf.
pub const HEADROOM: u32 = ferrule_ffi::RTE_PKTMBUF_HEADROOM;

/// A pool of mbufs. Every port and ring that hands out its mbufs, and every `Mbuf`
/// taken from it, must be gone before the pool is dropped.
#[derive(Debug)]
pub struct Mempool {
    ptr: NonNull<ferrule_ffi::rte_mempool>,
    name: String,
    /// Bytes of packet data one segment holds after the headroom.
    data_room: u16,
}

// SAFETY: an rte_mempool is built for concurrent use from any thread (lockless ring,
// per-lcore caches); the handle is just a pointer to it.
unsafe impl Send for Mempool {}
// SAFETY: as above; all operations through &Mempool are thread-safe in DPDK.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Creates a pool of `count` mbufs with a per-lcore cache of `cache` mbufs and
    /// `data_room` bytes of buffer each (headroom included).
    pub fn new(name: &str, count: u32, cache: u32, data_room: u16) -> Result<Mempool, DpdkError> {
        let cname = CString::new(name)
            .map_err(|_| DpdkError::new(format!("mempool {name:?}: name contains NUL"), 22))?;
        let cache = cache
            .min(ferrule_ffi::RTE_MEMPOOL_CACHE_MAX_SIZE)
            .min(count / 2);
        // SAFETY: cname is a valid C string for the duration of the call; the other
        // arguments are plain integers. SOCKET_ID_ANY is -1.
        let ptr = unsafe {
            ferrule_ffi::rte_pktmbuf_pool_create(cname.as_ptr(), count, cache, 0, data_room, -1)
        };
        NonNull::new(ptr)
            .map(|ptr| Mempool {
                ptr,
                name: name.to_string(),
                data_room: data_room.saturating_sub(HEADROOM as u16),
            })
            .ok_or_else(|| {
                DpdkError::last(format!("rte_pktmbuf_pool_create({name}, {count} mbufs)"))
            })
    }

    /// Bytes of packet data one fresh mbuf holds (its data room less the headroom).
    pub fn data_room(&self) -> u16 {
        self.data_room
    }

    /// The raw pool, for the DPDK calls that take one.
    pub fn as_ptr(&self) -> *mut ferrule_ffi::rte_mempool {
        self.ptr.as_ptr()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Mbufs currently free in the pool (including per-lcore caches).
    pub fn available(&self) -> u32 {
        // SAFETY: the pool is valid while self lives; the call only reads counters.
        unsafe { ferrule_ffi::rte_mempool_avail_count(self.ptr.as_ptr()) }
    }

    /// Mbufs in the pool, free or taken.
    pub fn size(&self) -> u32 {
        self.available() + self.in_use()
    }

    /// Mbufs currently taken from the pool.
    pub fn in_use(&self) -> u32 {
        // SAFETY: as for `available`.
        unsafe { ferrule_ffi::rte_mempool_in_use_count(self.ptr.as_ptr()) }
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        // SAFETY: the pool was created by `new` and is freed exactly once; the type's
        // contract requires every user of its mbufs to be gone.
        unsafe { ferrule_ffi::rte_mempool_free(self.ptr.as_ptr()) }
    }
}
