//! Where a table clone's memory goes: the parts of the big LPM tables that are dense
//! enough go on transparent huge pages, so that lookups spread over a full routing
//! table do not also miss the TLB on every 4 KiB page, while a sparse table keeps
//! costing only the pages it wrote.
//!
//! Advice is given only to fresh memory a clone is about to fill (pages already
//! written as 4 KiB pages would stay so) and only to a huge page at least half of whose
//! 4 KiB pages will be written: the huge page then costs at most twice what those pages
//! cost on their own. Without the `dpdk` feature (no `libc`), nothing is advised.

use std::ops::Range;

/// The x86-64 (and common aarch64) transparent huge page size.
pub(crate) const HUGE_PAGE: usize = 2 << 20;
/// The base page size the lazy tables track.
pub(crate) const PAGE: usize = 4096;

/// The whole huge pages of `len` elements of `size` bytes starting at address `base`,
/// as element ranges, in order. Elements of a huge page that straddles either end of the
/// allocation are left out.
pub(crate) fn huge_pages(
    base: usize,
    len: usize,
    size: usize,
) -> impl Iterator<Item = Range<usize>> {
    let end = base + len * size;
    let first = base.next_multiple_of(HUGE_PAGE);
    (first..end)
        .step_by(HUGE_PAGE)
        .take_while(move |h| h + HUGE_PAGE <= end)
        // A huge page boundary need not fall on an element boundary when `size` does
        // not divide it (all the tables here hold `u32`s, which do).
        .map(move |h| (h - base).div_ceil(size)..(h + HUGE_PAGE - base) / size)
}

/// Whether written base pages numbering `written` out of a huge page's make it dense
/// enough to advise.
pub(crate) fn dense(written: usize) -> bool {
    written * PAGE * 2 >= HUGE_PAGE
}

/// Asks for `mem` (fresh, not yet written) to be backed by transparent huge pages where
/// it covers whole ones. Advice only: returns whether the kernel took it, and nothing
/// changes for the caller either way.
pub(crate) fn advise<T>(mem: &mut [T]) -> bool {
    #[cfg(feature = "dpdk")]
    {
        crate::dpdk::memory::advise_huge_pages(mem)
    }
    #[cfg(not(feature = "dpdk"))]
    {
        let _ = mem;
        false
    }
}

/// A copy of `v` (a table nearly every element of which is in use, such as the tbl8
/// groups) in fresh memory advised onto huge pages before it is written, with room to
/// grow to the end of its last huge page: the next update that adds a group then writes
/// in place instead of moving the table to memory nobody advised.
///
/// The memory comes from the allocator: above its mmap threshold (32 MiB at most in
/// glibc) it is always fresh; a smaller table may reuse freed heap memory, whose pages
/// already written stay as they are (the advice then only marks the range).
pub(crate) fn clone_dense<T: Copy>(v: &[T]) -> Vec<T> {
    let size = std::mem::size_of::<T>().max(1);
    if v.len() * size < HUGE_PAGE {
        return v.to_vec();
    }
    // At least one element of room, to the end of the huge page that holds it.
    let mut out = Vec::with_capacity((v.len() * size + 1).next_multiple_of(HUGE_PAGE) / size);
    advise(out.spare_capacity_mut());
    out.extend_from_slice(v);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_are_the_whole_ones_inside() {
        let words = HUGE_PAGE / 4;
        // Aligned: every huge page, in element indexes.
        let all: Vec<_> = huge_pages(HUGE_PAGE * 8, 3 * words, 4).collect();
        assert_eq!(all, vec![0..words, words..2 * words, 2 * words..3 * words]);
        // 16 bytes past a boundary (a `calloc` chunk header): the first and last are
        // partial, and only the two between remain.
        let base = HUGE_PAGE * 8 + 16;
        let inside: Vec<_> = huge_pages(base, 3 * words, 4).collect();
        let first = (HUGE_PAGE - 16) / 4;
        assert_eq!(
            inside,
            vec![first..first + words, first + words..first + 2 * words]
        );
        assert_eq!(huge_pages(base, words, 4).count(), 0, "one straddling page");
        assert_eq!(huge_pages(base, 0, 4).count(), 0);
    }

    #[test]
    fn dense_means_half_written() {
        let per_huge = HUGE_PAGE / PAGE;
        assert!(!dense(0));
        assert!(!dense(per_huge / 2 - 1));
        assert!(dense(per_huge / 2));
        assert!(dense(per_huge));
    }

    #[test]
    fn clone_dense_copies() {
        let v: Vec<u32> = (0..(HUGE_PAGE / 4 * 2 + 5) as u32).collect();
        let c = clone_dense(&v);
        assert_eq!(c, v);
        assert!(
            c.capacity() >= 3 * HUGE_PAGE / 4,
            "room to the end of the huge page"
        );
        let small = vec![1u32, 2, 3];
        assert_eq!(clone_dense(&small), small);
    }
}
