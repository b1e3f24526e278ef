//! An owning handle to one packet buffer: freed on `Drop`, its first segment's data
//! readable and writable as a byte slice.

use super::Mempool;
use std::ptr::NonNull;

/// One mbuf, owned. Dropping it returns it to its pool.
#[derive(Debug)]
pub struct Mbuf {
    ptr: NonNull<ferrule_ffi::rte_mbuf>,
}

// SAFETY: an mbuf is owned by exactly one handle; moving that handle between threads
// moves the ownership, and mempools accept frees from any thread.
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Takes a fresh, empty mbuf from `pool`; `None` when the pool is empty.
    pub fn alloc(pool: &Mempool) -> Option<Mbuf> {
        // SAFETY: the pool is valid while borrowed; the result is NULL or a fresh mbuf
        // that nobody else owns.
        let ptr = unsafe { ferrule_ffi::ferrule_pktmbuf_alloc(pool.as_ptr()) };
        NonNull::new(ptr).map(|ptr| Mbuf { ptr })
    }

    /// An mbuf holding a copy of `frame`; `None` when the pool is empty or the frame is
    /// longer than one segment's room.
    pub fn from_bytes(pool: &Mempool, frame: &[u8]) -> Option<Mbuf> {
        let mut m = Mbuf::alloc(pool)?;
        m.append(frame.len())?.copy_from_slice(frame);
        Some(m)
    }

    /// A copy of the whole packet (all its segments) in fresh mbufs from `pool`, with
    /// the pool's usual headroom; `None` when the pool is empty.
    pub fn copy(&self, pool: &Mempool) -> Option<Mbuf> {
        // SAFETY: self owns a valid mbuf, only read here; the pool is valid while
        // borrowed; rte_pktmbuf_copy returns NULL or a new mbuf chain nobody else owns.
        let ptr =
            unsafe { ferrule_ffi::rte_pktmbuf_copy(self.ptr.as_ptr(), pool.as_ptr(), 0, u32::MAX) };
        NonNull::new(ptr).map(|ptr| Mbuf { ptr })
    }

    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `ptr` must be a valid mbuf that no one else owns or will free.
    pub unsafe fn from_raw(ptr: NonNull<ferrule_ffi::rte_mbuf>) -> Mbuf {
        Mbuf { ptr }
    }

    /// Gives up ownership without freeing.
    pub fn into_raw(self) -> NonNull<ferrule_ffi::rte_mbuf> {
        let ptr = self.ptr;
        std::mem::forget(self);
        ptr
    }

    /// Length of the whole packet (all segments).
    pub fn pkt_len(&self) -> u32 {
        // SAFETY: self owns a valid mbuf; reading a header field.
        unsafe { (*self.ptr.as_ptr()).pkt_len }
    }

    /// Number of segments.
    pub fn nb_segs(&self) -> u16 {
        // SAFETY: as above.
        unsafe { (*self.ptr.as_ptr()).nb_segs }
    }

    /// DPDK port the mbuf was received on.
    pub fn port(&self) -> u16 {
        // SAFETY: as above.
        unsafe { (*self.ptr.as_ptr()).port }
    }

    /// Free bytes after the data in the first segment.
    pub fn tailroom(&self) -> u16 {
        // SAFETY: as above.
        unsafe { ferrule_ffi::ferrule_pktmbuf_tailroom(self.ptr.as_ptr()) }
    }

    /// Free bytes before the data.
    pub fn headroom(&self) -> u16 {
        // SAFETY: as above.
        unsafe { ferrule_ffi::ferrule_pktmbuf_headroom(self.ptr.as_ptr()) }
    }

    /// Grows the packet by `len` bytes at the end and returns them; `None` when the
    /// segment has too little tailroom.
    pub fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        let len16 = u16::try_from(len).ok()?;
        // SAFETY: self owns the mbuf exclusively (&mut self); append returns NULL or a
        // pointer to `len` bytes inside the segment's buffer.
        let p = unsafe { ferrule_ffi::ferrule_pktmbuf_append(self.ptr.as_ptr(), len16) };
        let p = NonNull::new(p.cast::<u8>())?;
        // SAFETY: p points to len writable bytes owned by this mbuf, borrowed mutably.
        Some(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) })
    }

    /// Prepends `len` bytes of headroom to the data and returns them; `None` when
    /// there is too little headroom.
    pub fn prepend(&mut self, len: usize) -> Option<&mut [u8]> {
        let len16 = u16::try_from(len).ok()?;
        // SAFETY: as for append; prepend returns NULL or the new start of data.
        let p = unsafe { ferrule_ffi::ferrule_pktmbuf_prepend(self.ptr.as_ptr(), len16) };
        let p = NonNull::new(p.cast::<u8>())?;
        // SAFETY: p points to len writable bytes at the new start of data.
        Some(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) })
    }

    /// Removes `len` bytes from the front of the data; false when shorter.
    pub fn adj(&mut self, len: usize) -> bool {
        let Ok(len16) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: exclusive ownership; adj returns NULL without changing the mbuf when
        // the first segment is shorter than len.
        !unsafe { ferrule_ffi::ferrule_pktmbuf_adj(self.ptr.as_ptr(), len16) }.is_null()
    }

    /// Removes `len` bytes from the end; false when shorter.
    pub fn trim(&mut self, len: usize) -> bool {
        let Ok(len16) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: exclusive ownership; trim fails without changing the mbuf.
        unsafe { ferrule_ffi::ferrule_pktmbuf_trim(self.ptr.as_ptr(), len16) == 0 }
    }

    /// The raw pointer, still owned by self.
    pub fn as_ptr(&self) -> *mut ferrule_ffi::rte_mbuf {
        self.ptr.as_ptr()
    }
}

/// Data of the first segment of a raw mbuf.
///
/// # Safety
/// `m` must be a valid mbuf that outlives `'a` and is not written during it.
#[inline(always)]
pub(crate) unsafe fn raw_data<'a>(m: *const ferrule_ffi::rte_mbuf) -> &'a [u8] {
    // SAFETY: the caller guarantees m is valid; buf_addr + data_off is the start of
    // data_len initialised bytes in the first segment.
    unsafe {
        let base = (*m).buf_addr.cast::<u8>().add(usize::from((*m).data_off));
        std::slice::from_raw_parts(base, usize::from((*m).data_len))
    }
}

/// Mutable data of the first segment of a raw mbuf.
///
/// # Safety
/// `m` must be a valid mbuf that outlives `'a`, borrowed by nobody else during it.
#[inline(always)]
pub(crate) unsafe fn raw_data_mut<'a>(m: *mut ferrule_ffi::rte_mbuf) -> &'a mut [u8] {
    // SAFETY: as for raw_data, with exclusive access guaranteed by the caller.
    unsafe {
        let base = (*m).buf_addr.cast::<u8>().add(usize::from((*m).data_off));
        std::slice::from_raw_parts_mut(base, usize::from((*m).data_len))
    }
}

impl AsRef<[u8]> for Mbuf {
    /// The first segment's data.
    fn as_ref(&self) -> &[u8] {
        // SAFETY: self owns the mbuf; the slice borrows self.
        unsafe { raw_data(self.ptr.as_ptr()) }
    }
}

impl AsMut<[u8]> for Mbuf {
    /// The first segment's data, writable.
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: self owns the mbuf exclusively; the slice borrows self mutably.
        unsafe { raw_data_mut(self.ptr.as_ptr()) }
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: self owns the mbuf and frees it exactly once.
        unsafe { ferrule_ffi::ferrule_pktmbuf_free(self.ptr.as_ptr()) }
    }
}
