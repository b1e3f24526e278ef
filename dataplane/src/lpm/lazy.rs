//! A large zero-initialised entry table that is backed lazily and clones only the pages
//! that were ever written.
//!
//! The table is allocated zeroed (`calloc`: fresh anonymous pages), so pages nobody
//! writes cost address space but no memory. A bitmap remembers which 4 KiB pages were
//! written; a clone allocates zeroed again and copies just those, so cloning a VRF that
//! holds a handful of routes stays cheap.

/// Entries per tracked page (4 KiB of `u32`).
const PAGE_ENTRIES: usize = 1024;

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

    /// Bytes of the pages written so far (what the table costs in memory).
    pub(crate) fn resident_bytes(&self) -> usize {
        let pages: usize = self.touched.iter().map(|w| w.count_ones() as usize).sum();
        (pages * PAGE_ENTRIES).min(N) * 4 + self.touched.len() * 8
    }
}

impl<const N: usize> Clone for LazyTable<N> {
    fn clone(&self) -> Self {
        let mut entries = zeroed::<N>();
        for (w, &word) in self.touched.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let page = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let start = page * PAGE_ENTRIES;
                let end = (start + PAGE_ENTRIES).min(N);
                entries[start..end].copy_from_slice(&self.entries[start..end]);
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
}
