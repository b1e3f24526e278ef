//! The multibit trie both LPM tables are built on: a root table indexed by the top
//! `ROOT_BITS` address bits, then 256-entry groups (DPDK's tbl8), each splitting one
//! entry on the next 8 bits, down to `max_len`. Routes are leaf-pushed: every entry holds
//! the longest route covering it, with that route's length, so lookups stop at the first
//! non-extension entry. Updates are incremental, as in `rte_lpm`: an insert overwrites
//! only entries of shorter routes; a remove writes the caller's replacement (the
//! next-longest covering route) over the entries of the removed length, then folds groups
//! whose entries became equal back into their parent entry and recycles them.
//!
//! Prefixes are `u128`, left-aligned (an IPv4 address is shifted up by 96 bits). Routes
//! handled here have lengths 8..=`max_len`.

use super::entry::{depth, ext, is_ext, leaf, FLAG, PAYLOAD};
use super::lazy::LazyTable;
use super::LpmError;

/// Entries in a group.
pub(crate) const GROUP_ENTRIES: usize = 256;
/// Groups addressable by the 24-bit payload of an extension entry.
const MAX_GROUPS: usize = 1 << 24;
/// Root plus groups: enough for IPv6 to /64 with a 16-bit root (7 levels).
const MAX_LEVELS: usize = 8;

#[derive(Clone, Copy)]
enum Table {
    Root,
    Group(usize),
}

pub(crate) struct Trie<const ROOT_BITS: u32, const ROOT_ENTRIES: usize> {
    /// Indexed by the top `ROOT_BITS` bits.
    pub(crate) root: LazyTable<ROOT_ENTRIES>,
    /// All groups, `GROUP_ENTRIES` entries each, indexed by extension payloads.
    pub(crate) groups: Vec<u32>,
    /// Groups not in use.
    free: Vec<u32>,
    /// Longest route length the trie holds; the deepest level ends there.
    max_len: u8,
}

/// A clone places the root's dense parts and the groups on huge pages
/// ([`super::placement`]).
impl<const ROOT_BITS: u32, const ROOT_ENTRIES: usize> Clone for Trie<ROOT_BITS, ROOT_ENTRIES> {
    fn clone(&self) -> Self {
        Trie {
            root: self.root.clone(),
            groups: super::placement::clone_dense(&self.groups),
            free: self.free.clone(),
            max_len: self.max_len,
        }
    }
}

impl<const ROOT_BITS: u32, const ROOT_ENTRIES: usize> Trie<ROOT_BITS, ROOT_ENTRIES> {
    pub(crate) fn new(max_len: u8) -> Self {
        assert_eq!(
            ROOT_ENTRIES,
            1 << ROOT_BITS,
            "root size must match ROOT_BITS"
        );
        assert!(ROOT_BITS >= 8 && u32::from(max_len) >= ROOT_BITS);
        assert_eq!((u32::from(max_len) - ROOT_BITS) % 8, 0, "levels are 8 bits");
        assert!((usize::from(max_len) - ROOT_BITS as usize) / 8 < MAX_LEVELS);
        Trie {
            root: LazyTable::new(),
            groups: Vec::new(),
            free: Vec::new(),
            max_len,
        }
    }

    fn levels(&self) -> usize {
        1 + (u32::from(self.max_len) - ROOT_BITS) as usize / 8
    }

    /// The prefix length at which level `k` ends.
    fn level_end(k: usize) -> u32 {
        ROOT_BITS + 8 * k as u32
    }

    /// The level that holds routes of length `len`.
    fn level_of(len: u8) -> usize {
        (u32::from(len).saturating_sub(ROOT_BITS) as usize).div_ceil(8)
    }

    /// The index of `prefix` in a table of level `k`.
    fn index(prefix: u128, k: usize) -> usize {
        let end = Self::level_end(k);
        let width = if k == 0 { ROOT_BITS } else { 8 };
        ((prefix >> (128 - end)) & ((1u128 << width) - 1)) as usize
    }

    fn get(&self, t: Table, i: usize) -> u32 {
        match t {
            Table::Root => self.root.get(i),
            Table::Group(g) => self.groups[g * GROUP_ENTRIES + i],
        }
    }

    fn set(&mut self, t: Table, i: usize, value: u32) {
        match t {
            Table::Root => self.root.set(i, value),
            Table::Group(g) => self.groups[g * GROUP_ENTRIES + i] = value,
        }
    }

    pub(crate) fn groups_in_use(&self) -> usize {
        self.groups.len() / GROUP_ENTRIES - self.free.len()
    }

    /// Fails unless a change that may allocate one group per level can go through.
    fn reserve(&self) -> Result<(), LpmError> {
        if self.groups_in_use() + self.levels() > MAX_GROUPS {
            return Err(LpmError::Full);
        }
        Ok(())
    }

    /// A group whose entries all hold `init` (the entry it splits, pushed down).
    fn alloc(&mut self, init: u32) -> usize {
        let init = init & !FLAG;
        match self.free.pop() {
            Some(g) => {
                let g = g as usize;
                self.groups[g * GROUP_ENTRIES..][..GROUP_ENTRIES].fill(init);
                g
            }
            None => {
                let g = self.groups.len() / GROUP_ENTRIES;
                self.groups.resize(self.groups.len() + GROUP_ENTRIES, init);
                g
            }
        }
    }

    /// Walks to the table of level `level` on the path of `prefix`, splitting entries
    /// into groups where there are none yet. The caller has called `reserve`.
    fn descend_create(&mut self, prefix: u128, level: usize) -> Table {
        let mut t = Table::Root;
        for k in 0..level {
            let i = Self::index(prefix, k);
            let e = self.get(t, i);
            let g = if is_ext(e) {
                (e & PAYLOAD) as usize
            } else {
                let g = self.alloc(e);
                self.set(t, i, ext(g as u32));
                g
            };
            t = Table::Group(g);
        }
        t
    }

    /// Walks to the table of level `level` on the path of `prefix`, recording the
    /// (table, index) of every extension passed. `None` if the path ends early.
    fn descend(&self, prefix: u128, level: usize, path: &mut [(Table, usize)]) -> Option<Table> {
        let mut t = Table::Root;
        for (k, step) in path.iter_mut().enumerate().take(level) {
            let i = Self::index(prefix, k);
            *step = (t, i);
            let e = self.get(t, i);
            if !is_ext(e) {
                return None;
            }
            t = Table::Group((e & PAYLOAD) as usize);
        }
        Some(t)
    }

    /// Writes the route `prefix/len → nh` (`prefix` masked, 8 <= `len` <= `max_len`)
    /// over every entry it covers whose route is not longer.
    pub(crate) fn insert(&mut self, prefix: u128, len: u8, nh: u32) -> Result<(), LpmError> {
        self.reserve()?;
        let k = Self::level_of(len);
        let t = self.descend_create(prefix, k);
        let new = leaf(len, nh);
        let start = Self::index(prefix, k);
        for i in start..start + (1 << (Self::level_end(k) - u32::from(len))) {
            self.fill(t, i, len, new);
        }
        Ok(())
    }

    fn fill(&mut self, t: Table, i: usize, len: u8, new: u32) {
        let e = self.get(t, i);
        if is_ext(e) {
            let g = (e & PAYLOAD) as usize;
            for j in 0..GROUP_ENTRIES {
                self.fill(Table::Group(g), j, len, new);
            }
        } else if depth(e) <= len {
            self.set(t, i, new | (e & FLAG));
        }
    }

    /// Takes the route `prefix/len` out: its entries get `replacement` (the leaf of the
    /// next-longest covering route, or empty), then groups that became uniform fold.
    pub(crate) fn remove(&mut self, prefix: u128, len: u8, replacement: u32) {
        let k = Self::level_of(len);
        let mut path = [(Table::Root, 0); MAX_LEVELS];
        let Some(t) = self.descend(prefix, k, &mut path) else {
            debug_assert!(false, "route /{len} without its groups");
            return;
        };
        let start = Self::index(prefix, k);
        for i in start..start + (1 << (Self::level_end(k) - u32::from(len))) {
            self.clear(t, i, len, replacement);
        }
        self.collapse(&path[..k]);
    }

    fn clear(&mut self, t: Table, i: usize, len: u8, replacement: u32) {
        let e = self.get(t, i);
        if is_ext(e) {
            let g = (e & PAYLOAD) as usize;
            for j in 0..GROUP_ENTRIES {
                self.clear(Table::Group(g), j, len, replacement);
            }
        } else if depth(e) == len {
            self.set(t, i, replacement | (e & FLAG));
        }
    }

    /// Sets or clears the flag of the deepest-level entry of `prefix` (its /`max_len`),
    /// creating or folding the groups on its path.
    pub(crate) fn set_flag(&mut self, prefix: u128, on: bool) -> Result<(), LpmError> {
        let k = self.levels() - 1;
        let i = Self::index(prefix, k);
        if on {
            self.reserve()?;
            let t = self.descend_create(prefix, k);
            let e = self.get(t, i);
            self.set(t, i, e | FLAG);
        } else {
            let mut path = [(Table::Root, 0); MAX_LEVELS];
            if let Some(t) = self.descend(prefix, k, &mut path) {
                let e = self.get(t, i);
                self.set(t, i, e & !FLAG);
                self.collapse(&path[..k]);
            }
        }
        Ok(())
    }

    /// Bottom-up along `path`: a group whose entries are all the same unflagged leaf of a
    /// route short enough for the parent entry replaces that entry and is recycled.
    fn collapse(&mut self, path: &[(Table, usize)]) {
        for (k, &(t, i)) in path.iter().enumerate().rev() {
            let e = self.get(t, i);
            if !is_ext(e) {
                break;
            }
            let g = (e & PAYLOAD) as usize;
            let entries = &self.groups[g * GROUP_ENTRIES..][..GROUP_ENTRIES];
            let first = entries[0];
            if is_ext(first)
                || first & FLAG != 0
                || u32::from(depth(first)) > Self::level_end(k)
                || entries.iter().any(|&x| x != first)
            {
                break;
            }
            self.set(t, i, first);
            self.free.push(g as u32);
        }
    }

    /// Bytes the trie occupies: written root pages (in 4 KiB pages) plus all groups.
    /// (The group vector's spare capacity is left out: it is never written, so never
    /// backed by memory, except in a clone, where it lies in advised memory and the rest
    /// of the last huge page the groups reach is backed too: up to 2 MiB more.)
    pub(crate) fn memory_bytes(&self) -> usize {
        self.root.resident_bytes() + self.groups.len() * 4 + self.free.capacity() * 4
    }
}
