//! `rte_ring`s of mbufs: worker-to-worker handoff and the test harness's view of a
//! ring-backed port.

use super::{DpdkError, Mbuf};
use std::ffi::{c_void, CString};
use std::ptr::NonNull;

/// A ring of mbuf pointers. Mbufs enqueued are owned by the ring until dequeued; any
/// left when it drops are freed.
#[derive(Debug)]
pub struct Ring {
    ptr: NonNull<ferrule_ffi::rte_ring>,
}

// SAFETY: every Ring is created multi-producer/multi-consumer (`new`), a lockless
// queue built for use from several threads.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    /// Creates a multi-producer/multi-consumer ring holding up to `size - 1` mbufs
    /// (`size` a power of two).
    pub fn new(name: &str, size: u32) -> Result<Ring, DpdkError> {
        let cname = CString::new(name)
            .map_err(|_| DpdkError::new(format!("ring {name:?}: NUL in name"), 22))?;
        let flags = 0; // MP/MC: safe to share, which `Sync` promises
                       // SAFETY: cname is valid for the call; SOCKET_ID_ANY is -1.
        let ptr = unsafe { ferrule_ffi::rte_ring_create(cname.as_ptr(), size, -1, flags) };
        NonNull::new(ptr)
            .map(|ptr| Ring { ptr })
            .ok_or_else(|| DpdkError::last(format!("rte_ring_create({name}, {size})")))
    }

    pub fn as_ptr(&self) -> *mut ferrule_ffi::rte_ring {
        self.ptr.as_ptr()
    }

    /// Enqueues one mbuf; gives it back when the ring is full.
    pub fn enqueue(&self, m: Mbuf) -> Result<(), Mbuf> {
        let raw = m.into_raw();
        let obj = raw.as_ptr().cast::<c_void>();
        // SAFETY: the ring is valid; one object pointer is passed; on success the ring
        // owns the mbuf.
        let n = unsafe { ferrule_ffi::ferrule_ring_enqueue_burst(self.ptr.as_ptr(), &obj, 1) };
        if n == 1 {
            Ok(())
        } else {
            // SAFETY: not enqueued, so ownership is still ours.
            Err(unsafe { Mbuf::from_raw(raw) })
        }
    }

    /// Dequeues one mbuf.
    pub fn dequeue(&self) -> Option<Mbuf> {
        let mut obj: *mut c_void = std::ptr::null_mut();
        // SAFETY: the ring is valid; room for one object pointer.
        let n = unsafe { ferrule_ffi::ferrule_ring_dequeue_burst(self.ptr.as_ptr(), &mut obj, 1) };
        if n == 1 {
            // SAFETY: the ring only holds owned mbuf pointers; dequeuing moves one to us.
            NonNull::new(obj.cast()).map(|p| unsafe { Mbuf::from_raw(p) })
        } else {
            None
        }
    }

    /// Objects currently in the ring.
    pub fn count(&self) -> u32 {
        // SAFETY: the ring is valid; reads its head/tail.
        unsafe { ferrule_ffi::ferrule_ring_count(self.ptr.as_ptr()) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        while self.dequeue().is_some() {}
        // SAFETY: created by `new`, freed once, now empty.
        unsafe { ferrule_ffi::rte_ring_free(self.ptr.as_ptr()) }
    }
}
