//! A large zero-initialised entry table that is backed lazily and clones only the pages
//! that were ever written.
//!
//! The table is allocated zeroed (`calloc`: fresh anonymous pages), so pages nobody
//! writes cost address space but no memory. A bitmap remembers which 4 KiB pages were
//! written; a clone allocates zeroed again and copies just those, so cloning a VRF that
//! holds a handful of routes stays cheap. Before copying, a clone advises the huge
//! pages of its fresh table that the copy will fill at least half of onto transparent
//! huge pages ([`super::placement`]): a full routing table then costs its lookups no
//! TLB miss per 4 KiB page, and a sparse one stays as small as before.

use super::placement;

/// Entries per tracked page (4 KiB of `u32`).
const PAGE_ENTRIES: usize = 1024;
/// Entries per 64-byte cache line.
const LINE_ENTRIES: usize = 16;

pub(crate) struct LazyTable<const N: usize> {
    /// The entries. Readers index it directly.
    pub(crate) entries: Box<[u32; N]>,
    /// One bit per page of `entries` that was written at least once.
    touched: Vec<u64>,
}

impl<const N: usize> LazyTable<N> {
    const PAGES: usize = N.div_ceil(PAGE_ENTRIES);

    pub(crate) fn new() -> Self {
        LazyTable {
            entries: zeroed(),
            touched: vec![0; Self::PAGES.div_ceil(64)],
        }
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> u32 {
        self.entries[i]
    }

    #[inline]
    pub(crate) fn set(&mut self, i: usize, value: u32) {
        self.entries[i] = value;
        let page = i / PAGE_ENTRIES;
        self.touched[page / 64] |= 1 << (page % 64);
    }

    /// Pages written among the tracked pages that hold entries `range`.
    fn written_pages(&self, range: std::ops::Range<usize>) -> usize {
        if range.is_empty() {
            return 0;
        }
        (range.start / PAGE_ENTRIES..=(range.end - 1) / PAGE_ENTRIES)
            .filter(|&p| self.touched[p / 64] & (1 << (p % 64)) != 0)
            .count()
    }

    /// Entry ranges of the whole huge pages of a table at `base` that would be dense
    /// with this table's written pages: what a clone at `base` advises.
    fn dense_huge_pages(&self, base: usize) -> Vec<std::ops::Range<usize>> {
        placement::huge_pages(base, N, 4)
            .filter(|r| placement::dense(self.written_pages(r.clone())))
            .collect()
    }

    /// Bytes of the pages written so far (what the table costs in memory).
    pub(crate) fn resident_bytes(&self) -> usize {
        let pages: usize = self.touched.iter().map(|w| w.count_ones() as usize).sum();
        (pages * PAGE_ENTRIES).min(N) * 4 + self.touched.len() * 8
    }
}

impl<const N: usize> Clone for LazyTable<N> {
    fn clone(&self) -> Self {
        let mut entries = zeroed::<N>();
        for r in self.dense_huge_pages(entries.as_ptr() as usize) {
            placement::advise(&mut entries[r]);
        }
        for (w, &word) in self.touched.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let page = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let start = page * PAGE_ENTRIES;
                let end = (start + PAGE_ENTRIES).min(N);
                // Only the cache lines holding something: the fresh table is zero, and
                // a tracked page need not sit on a memory page (the allocation starts a
                // few bytes in), so copying all of it would dirty the memory pages on
                // both sides of the entries that were written.
                let (to, from) = (&mut entries[start..end], &self.entries[start..end]);
                for (d, s) in to.chunks_mut(LINE_ENTRIES).zip(from.chunks(LINE_ENTRIES)) {
                    if s.iter().any(|&e| e != 0) {
                        d.copy_from_slice(s);
                    }
                }
            }
        }
        LazyTable {
            entries,
            touched: self.touched.clone(),
        }
    }
}

/// A zeroed boxed array, allocated without building it on the stack: `vec![0; N]` uses
/// the zeroing allocator (`calloc`), which maps fresh zero pages for large sizes.
fn zeroed<const N: usize>() -> Box<[u32; N]> {
    match vec![0u32; N].into_boxed_slice().try_into() {
        Ok(array) => array,
        Err(_) => unreachable!("a Vec of N entries converts to [u32; N]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_copies_only_written_pages_and_is_independent() {
        let mut t = LazyTable::<{ 1 << 16 }>::new();
        let bitmap = t.resident_bytes();
        assert!(bitmap <= 64);
        t.set(5, 1);
        t.set(40_000, 2);
        t.set(40_001, 3);
        assert_eq!(t.resident_bytes(), 2 * 4096 + bitmap);
        let mut c = t.clone();
        assert_eq!(
            (c.get(5), c.get(40_000), c.get(40_001), c.get(6)),
            (1, 2, 3, 0)
        );
        c.set(5, 9);
        assert_eq!(t.get(5), 1);
        assert_eq!(c.resident_bytes(), t.resident_bytes());
    }

    #[test]
    fn only_huge_pages_half_written_are_dense() {
        // Four huge pages of entries, the table aligned on a huge page.
        const HUGE: usize = placement::HUGE_PAGE / 4;
        const PAGES: usize = HUGE / PAGE_ENTRIES;
        let mut t = LazyTable::<{ 4 * HUGE }>::new();
        let base = placement::HUGE_PAGE * 16;
        // Huge page 0: exactly half of its pages; 1: one page short of half; 2: none;
        // 3: every page.
        for p in 0..PAGES / 2 {
            t.set(p * PAGE_ENTRIES, 1);
        }
        for p in 0..PAGES / 2 - 1 {
            t.set(HUGE + p * PAGE_ENTRIES + 7, 1);
        }
        for p in 0..PAGES {
            t.set(3 * HUGE + p * PAGE_ENTRIES, 1);
        }
        assert_eq!(t.dense_huge_pages(base), vec![0..HUGE, 3 * HUGE..4 * HUGE]);
        // 16 bytes past a boundary (a `calloc` chunk header): the huge pages start four
        // entries early and the first is cut off; only the one within the full quarter
        // is dense.
        let shifted = t.dense_huge_pages(base + 16);
        assert_eq!(shifted, vec![3 * HUGE - 4..4 * HUGE - 4]);
        // The clone holds the same entries whatever it advised.
        let c = t.clone();
        assert!((0..4 * HUGE).all(|i| c.get(i) == t.get(i)));
    }
}
