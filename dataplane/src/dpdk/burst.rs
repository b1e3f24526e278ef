//! A fixed-size array of owned mbufs: what a worker receives, processes and transmits
//! in one go. No allocation per burst; mbufs still held when it drops are freed.

use super::mbuf::{raw_data, raw_data_mut};
use super::Mbuf;
use std::ptr::NonNull;

/// Largest burst a worker handles at once: the pipeline's.
pub use crate::pipeline::MAX_BURST;

/// Up to [`MAX_BURST`] owned mbufs, in arrival order.
pub struct Burst {
    len: usize,
    pkts: [*mut ferrule_ffi::rte_mbuf; MAX_BURST],
}

impl Default for Burst {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Burst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Burst").field("len", &self.len).finish()
    }
}

impl Burst {
    pub const fn new() -> Self {
        Burst {
            len: 0,
            pkts: [std::ptr::null_mut(); MAX_BURST],
        }
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Free slots.
    #[inline(always)]
    pub fn room(&self) -> usize {
        MAX_BURST - self.len
    }

    /// Receives up to `max` packets from `port`/`queue`, appended after those held.
    /// Returns how many arrived.
    #[inline(always)]
    pub fn rx(&mut self, port: u16, queue: u16, max: u16) -> usize {
        let want = usize::from(max).min(self.room()) as u16;
        // SAFETY: the destination has `want` free slots after len; rx_burst writes at
        // most `want` mbuf pointers there and hands their ownership to us.
        let n = unsafe {
            ferrule_ffi::ferrule_eth_rx_burst(
                port,
                queue,
                self.pkts.as_mut_ptr().add(self.len),
                want,
            )
        };
        self.len += usize::from(n);
        usize::from(n)
    }

    /// Transmits every held packet on `port`/`queue`. Packets the driver did not take
    /// stay in the burst, moved to the front. Returns how many were sent.
    #[inline(always)]
    pub fn tx(&mut self, port: u16, queue: u16) -> usize {
        if self.len == 0 {
            return 0;
        }
        // SAFETY: the first len slots hold owned mbufs; tx_burst takes ownership of the
        // first `sent` of them and leaves the rest to us.
        let sent = usize::from(unsafe {
            ferrule_ffi::ferrule_eth_tx_burst(port, queue, self.pkts.as_mut_ptr(), self.len as u16)
        });
        if sent < self.len {
            self.pkts.copy_within(sent..self.len, 0);
        }
        self.len -= sent;
        sent
    }

    /// Appends one fresh mbuf per entry of `lens` from `pool`, each holding that many
    /// (uninitialised) data bytes, for a generator to fill through [`Burst::data_mut`].
    /// All or nothing: `false` (and nothing added) when the pool has too few mbufs, the
    /// burst too little room, or a length does not fit one segment.
    pub fn alloc(&mut self, pool: &super::Mempool, lens: &[u16]) -> bool {
        let n = lens.len();
        if n == 0 {
            return true;
        }
        if n > self.room() {
            return false;
        }
        let start = self.len;
        // SAFETY: the n slots after len are free; alloc_bulk fills all n with fresh
        // mbufs nobody else owns, or none (non-zero return).
        let rc = unsafe {
            ferrule_ffi::ferrule_pktmbuf_alloc_bulk(
                pool.as_ptr(),
                self.pkts.as_mut_ptr().add(start),
                n as u32,
            )
        };
        if rc != 0 {
            return false;
        }
        let room = pool.data_room();
        if lens.iter().any(|&l| l > room) {
            // SAFETY: the n slots from start hold the fresh mbufs, freed once here.
            unsafe {
                ferrule_ffi::ferrule_pktmbuf_free_bulk(self.pkts.as_mut_ptr().add(start), n as u32)
            };
            return false;
        }
        for (i, &len) in lens.iter().enumerate() {
            let m = self.pkts[start + i];
            // SAFETY: m is a fresh, reset, single-segment mbuf we own; len fits its
            // tailroom (checked above against the pool's data room less headroom), so
            // data_len/pkt_len describe bytes inside its buffer.
            unsafe {
                (*m).data_len = len;
                (*m).pkt_len = u32::from(len);
            }
        }
        self.len += n;
        true
    }

    /// Frees every held packet.
    #[inline(always)]
    pub fn free_all(&mut self) {
        if self.len > 0 {
            debug_assert!(
                self.pkts[..self.len].iter().all(|p| !p.is_null()),
                "free_all after take"
            );
            // SAFETY: the first len slots hold owned mbufs, freed exactly once here.
            unsafe {
                ferrule_ffi::ferrule_pktmbuf_free_bulk(self.pkts.as_mut_ptr(), self.len as u32)
            };
            self.len = 0;
        }
    }

    /// Adds a packet at the end; gives it back when the burst is full.
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == MAX_BURST {
            return Err(m);
        }
        self.pkts[self.len] = m.into_raw().as_ptr();
        self.len += 1;
        Ok(())
    }

    /// Removes the last packet.
    pub fn pop(&mut self) -> Option<Mbuf> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        let p = NonNull::new(self.pkts[self.len])?;
        // SAFETY: the slot held an owned mbuf, now moved out of the burst.
        Some(unsafe { Mbuf::from_raw(p) })
    }

    /// Moves packet `i` out, leaving a hole; `None` if it was taken already. After a
    /// dispatch loop has taken every packet, [`Burst::clear_taken`] resets the burst.
    #[inline(always)]
    pub fn take(&mut self, i: usize) -> Option<Mbuf> {
        let slot = self.pkts.get_mut(i).filter(|_| i < self.len)?;
        let p = NonNull::new(std::mem::replace(slot, std::ptr::null_mut()))?;
        // SAFETY: the slot held an owned mbuf; it is now moved out and the slot nulled.
        Some(unsafe { Mbuf::from_raw(p) })
    }

    /// Empties a burst whose packets were taken, freeing any that were not.
    #[inline(always)]
    pub fn clear_taken(&mut self) {
        for slot in &mut self.pkts[..self.len] {
            if let Some(p) = NonNull::new(std::mem::replace(slot, std::ptr::null_mut())) {
                // SAFETY: a non-null slot still owns its mbuf; it is freed once here.
                drop(unsafe { Mbuf::from_raw(p) });
            }
        }
        self.len = 0;
    }

    /// Prefetches the first cache line of packet `i`'s data (no-op out of range).
    #[inline(always)]
    pub fn prefetch(&self, i: usize) {
        if i < self.len {
            let m = self.pkts[i];
            if !m.is_null() {
                // SAFETY: m is a valid owned mbuf; computing its data address reads the
                // header only, and a prefetch never faults.
                unsafe {
                    let data = (*m).buf_addr.cast::<u8>().add(usize::from((*m).data_off));
                    ferrule_ffi::ferrule_prefetch0(data.cast());
                }
            }
        }
    }

    /// Sum of `pkt_len` over the held packets.
    #[inline(always)]
    pub fn total_bytes(&self) -> u64 {
        self.pkts[..self.len]
            .iter()
            .filter(|m| !m.is_null())
            // SAFETY: every held pointer is a valid owned mbuf.
            .map(|&m| u64::from(unsafe { (*m).pkt_len }))
            .sum()
    }

    /// Length of packet `i` (all segments).
    #[inline(always)]
    pub fn pkt_len(&self, i: usize) -> u32 {
        assert!(
            i < self.len && !self.pkts[i].is_null(),
            "burst slot {i} empty or out of range"
        );
        // SAFETY: i < len and the slot is not a hole left by `take`: a valid owned mbuf.
        unsafe { (*self.pkts[i]).pkt_len }
    }

    /// First-segment data of packet `i`.
    #[inline(always)]
    pub fn data(&self, i: usize) -> &[u8] {
        assert!(
            i < self.len && !self.pkts[i].is_null(),
            "burst slot {i} empty or out of range"
        );
        // SAFETY: i < len and not a hole: the mbuf is owned by the burst and the slice
        // borrows it.
        unsafe { raw_data(self.pkts[i]) }
    }

    /// Writable first-segment data of packet `i`.
    #[inline(always)]
    pub fn data_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(
            i < self.len && !self.pkts[i].is_null(),
            "burst slot {i} empty or out of range"
        );
        // SAFETY: i < len and not a hole; exclusive borrow of the burst gives exclusive
        // data access.
        unsafe { raw_data_mut(self.pkts[i]) }
    }
}

impl Drop for Burst {
    fn drop(&mut self) {
        self.free_all();
    }
}

impl crate::pipeline::Frames for Burst {
    #[inline(always)]
    fn count(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn frame(&self, i: usize) -> &[u8] {
        self.data(i)
    }

    #[inline(always)]
    fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        self.data_mut(i)
    }

    #[inline(always)]
    fn prefetch(&self, i: usize) {
        Burst::prefetch(self, i);
    }
}
