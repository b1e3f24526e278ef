//! A large zero-initialised entry table that is backed lazily and clones only what was
//! written.
//!
//! The table is allocated zeroed (`calloc`: fresh anonymous pages), so pages nobody
//! writes cost address space but no memory. A bitmap remembers which 4 KiB pages were
//! written; a clone allocates zeroed again and copies, of the pages that still hold
//! something, the cache lines that do, so cloning a VRF that holds a handful of routes
//! stays cheap. Before copying, a clone advises the huge pages of its fresh table that
//! the copy will fill at least half of onto transparent huge pages
//! ([`super::placement`]): a full routing table then costs its lookups no TLB miss per
//! 4 KiB page, and a sparse one stays as small as before (a dense stretch costs at most
//! twice its written pages).

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

    /// The pages of bitmap `pages`, in order.
    fn pages(pages: &[u64]) -> impl Iterator<Item = usize> + '_ {
        pages.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let page = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    page
                })
            })
        })
    }

    /// The entries of page `page`.
    fn page_entries(page: usize) -> std::ops::Range<usize> {
        let start = page * PAGE_ENTRIES;
        start..(start + PAGE_ENTRIES).min(N)
    }

    /// The written pages that still hold an entry other than zero: a page whose entries
    /// were all reset (its routes removed) costs a clone nothing and does not count
    /// towards a huge page.
    fn live_pages(&self) -> Vec<u64> {
        let mut live = vec![0; self.touched.len()];
        for page in Self::pages(&self.touched) {
            if self.entries[Self::page_entries(page)]
                .iter()
                .any(|&e| e != 0)
            {
                live[page / 64] |= 1 << (page % 64);
            }
        }
        live
    }

    /// Pages of bitmap `pages` among the tracked pages that hold entries `range`.
    fn pages_within(pages: &[u64], range: std::ops::Range<usize>) -> usize {
        if range.is_empty() {
            return 0;
        }
        (range.start / PAGE_ENTRIES..=(range.end - 1) / PAGE_ENTRIES)
            .filter(|&p| pages[p / 64] & (1 << (p % 64)) != 0)
            .count()
    }

    /// Entry ranges of the whole huge pages of a table at `base` that the pages of bitmap
    /// `pages` would make dense: what a clone at `base` advises.
    fn dense_huge_pages(pages: &[u64], base: usize) -> Vec<std::ops::Range<usize>> {
        placement::huge_pages(base, N, 4)
            .filter(|r| placement::dense(Self::pages_within(pages, r.clone())))
            .collect()
    }

    /// Bytes of the pages written so far: what the table costs in memory on 4 KiB pages
    /// (a clone's dense stretches on huge pages cost up to twice that).
    pub(crate) fn resident_bytes(&self) -> usize {
        let pages: usize = self.touched.iter().map(|w| w.count_ones() as usize).sum();
        (pages * PAGE_ENTRIES).min(N) * 4 + self.touched.len() * 8
    }
}

impl<const N: usize> Clone for LazyTable<N> {
    fn clone(&self) -> Self {
        let live = self.live_pages();
        let mut entries = zeroed::<N>();
        for r in Self::dense_huge_pages(&live, entries.as_ptr() as usize) {
            placement::advise(&mut entries[r]);
        }
        for page in Self::pages(&live) {
            let r = Self::page_entries(page);
            // Only the cache lines holding something: the fresh table is zero, and a
            // tracked page need not sit on a memory page (the allocation starts a few
            // bytes in), so copying all of it would dirty the memory pages on both sides
            // of the entries that were written.
            let (to, from) = (&mut entries[r.clone()], &self.entries[r]);
            for (d, s) in to.chunks_mut(LINE_ENTRIES).zip(from.chunks(LINE_ENTRIES)) {
                if s.iter().any(|&e| e != 0) {
                    d.copy_from_slice(s);
                }
            }
        }
        LazyTable {
            entries,
            touched: live,
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
        assert_eq!(
            LazyTable::<{ 4 * HUGE }>::dense_huge_pages(&t.touched, base),
            vec![0..HUGE, 3 * HUGE..4 * HUGE]
        );
        // 16 bytes past a boundary (a `calloc` chunk header): the huge pages start four
        // entries early and the first is cut off; only the one within the full quarter
        // is dense.
        let shifted = LazyTable::<{ 4 * HUGE }>::dense_huge_pages(&t.live_pages(), base + 16);
        assert_eq!(shifted, vec![3 * HUGE - 4..4 * HUGE - 4]);
        // The clone holds the same entries whatever it advised.
        let c = t.clone();
        assert!((0..4 * HUGE).all(|i| c.get(i) == t.get(i)));
    }

    #[test]
    fn pages_reset_to_zero_are_not_cloned_or_counted() {
        const HUGE: usize = placement::HUGE_PAGE / 4;
        let mut t = LazyTable::<{ 2 * HUGE }>::new();
        // Huge page 0 all written, then all but two pages reset (its routes removed).
        for i in (0..HUGE).step_by(PAGE_ENTRIES) {
            t.set(i + 3, 9);
        }
        for i in (2 * PAGE_ENTRIES..HUGE).step_by(PAGE_ENTRIES) {
            t.set(i + 3, 0);
        }
        let written = t.resident_bytes();
        let base = placement::HUGE_PAGE * 16;
        assert_eq!(
            LazyTable::<{ 2 * HUGE }>::dense_huge_pages(&t.touched, base).len(),
            1
        );
        assert!(LazyTable::<{ 2 * HUGE }>::dense_huge_pages(&t.live_pages(), base).is_empty());
        let c = t.clone();
        assert_eq!(
            (
                c.get(3),
                c.get(PAGE_ENTRIES + 3),
                c.get(2 * PAGE_ENTRIES + 3)
            ),
            (9, 9, 0)
        );
        assert!(
            c.resident_bytes() < written,
            "the clone forgets the reset pages"
        );
        assert_eq!(c.resident_bytes(), 2 * 4096 + c.touched.len() * 8);
    }
}
