//! Memory helpers for the fast path's big tables (the connection table, the dense parts
//! of the LPM route tables):
//! transparent-huge-page advice for fresh memory, so that random accesses into
//! hundreds of MiB do not also miss the TLB on every 4 KiB page, and a cache prefetch
//! hint, so that a burst's table misses overlap.

use crate::conntrack::MemoryAdvice;
use std::mem::MaybeUninit;

/// The x86-64 (and common aarch64) transparent huge page size.
pub const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the whole 2 MiB pages inside `mem` with transparent huge
/// pages (`madvise(MADV_HUGEPAGE)`; THP in `madvise` mode honours it, `always` does it
/// anyway, `never` ignores it). Call it before the memory is first written: pages
/// already faulted in as 4 KiB stay so until khugepaged collapses them. Returns false
/// when `mem` spans no whole huge page or the kernel refused (advice only: nothing
/// changes for the caller either way).
pub fn advise_huge_pages<T>(mem: &mut [T]) -> bool {
    let start = mem.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(mem);
    let lo = start.next_multiple_of(HUGE_PAGE);
    let hi = end / HUGE_PAGE * HUGE_PAGE;
    if hi <= lo {
        return false;
    }
    // SAFETY: [lo, hi) is page-aligned and lies inside `mem`, an allocation borrowed
    // exclusively for the call. MADV_HUGEPAGE only changes how the kernel backs the
    // range's anonymous pages: contents, permissions and the mapping stay as they are,
    // so no Rust value is affected.
    let rc = unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
    rc == 0
}

/// [`MemoryAdvice`] that puts a table's big arrays on transparent huge pages.
#[derive(Debug, Default, Clone, Copy)]
pub struct HugePages;

impl MemoryAdvice for HugePages {
    fn advise<T>(&self, fresh: &mut [MaybeUninit<T>]) {
        advise_huge_pages(fresh);
    }
}

/// Bit `i` set when `v[i] == x`, for the eight 16-bit values at once (one SSE2 compare:
/// the connection table's bucket probe).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn eq_mask_u16x8(v: &[u16; 8], x: u16) -> u32 {
    use std::arch::x86_64::{
        _mm_cmpeq_epi16, _mm_loadu_si128, _mm_movemask_epi8, _mm_packs_epi16, _mm_set1_epi16,
    };
    // SAFETY: SSE2 is part of the x86-64 baseline, so the instructions exist; the
    // unaligned load reads exactly the 16 bytes of `v`, a valid reference.
    unsafe {
        let eq = _mm_cmpeq_epi16(_mm_loadu_si128(v.as_ptr().cast()), _mm_set1_epi16(x as i16));
        // 0xFFFF/0 per value, packed to 0xFF/0 bytes: one mask bit per value.
        _mm_movemask_epi8(_mm_packs_epi16(eq, eq)) as u32 & 0xFF
    }
}

/// Hints that the cache line holding `r` will be read soon (all cache levels). Never
/// faults and changes nothing observable.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86-64 baseline, so the instruction exists; a prefetch
    // of a valid reference's address reads nothing into the program and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (r as *const T).cast(),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: rte_prefetch0 is a prefetch hint: it never faults and reads nothing into
    // the program; `r` is a valid address anyway.
    unsafe {
        ferrule_ffi::ferrule_prefetch0((r as *const T).cast())
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_covers_only_whole_huge_pages() {
        let mut small = vec![0u8; 4096];
        assert!(!advise_huge_pages(&mut small), "no whole huge page inside");
        let mut big: Vec<MaybeUninit<u64>> = Vec::with_capacity(3 * HUGE_PAGE / 8);
        let fresh = big.spare_capacity_mut();
        // THP may be disabled (`never`), which still accepts the advice.
        let _ = advise_huge_pages(fresh);
        big.resize(3 * HUGE_PAGE / 8, MaybeUninit::new(7));
        prefetch(&big[12]);
        assert_eq!(big.len(), 3 * HUGE_PAGE / 8);
    }
}
