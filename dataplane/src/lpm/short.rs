//! The table of routes shorter than /8: 256 resolved next hops indexed by the top address
//! byte, consulted only when the main table has no route for an address. It keeps a
//! default route from filling every entry of the main table.

use super::rules::{PrefixBits, RuleSet};
use super::NO_ROUTE;

#[derive(Clone)]
pub(crate) struct ShortTable {
    /// The next hop of the longest route /0../7 covering each top byte, or `NO_ROUTE`.
    pub(crate) next_hop: [u32; 256],
    /// Indexed by the depth bits of an entry: all ones for depth 0 (empty, use the short
    /// table), zero otherwise. Lookups combine with it instead of branching.
    pub(crate) empty_mask: [u32; 128],
    /// The one value of `next_hop` when all 256 are the same (no short route, or only a
    /// default route), for the vectorised path of batch lookups.
    pub(crate) uniform: Option<u32>,
}

impl ShortTable {
    pub(crate) fn new() -> Self {
        ShortTable {
            next_hop: [NO_ROUTE; 256],
            empty_mask: std::array::from_fn(|depth| if depth == 0 { u32::MAX } else { 0 }),
            uniform: Some(NO_ROUTE),
        }
    }

    /// Recomputes the entries under `prefix/len` (masked, `len` < 8) after that route
    /// changed in `rules`.
    pub(crate) fn refresh<K: PrefixBits>(&mut self, rules: &RuleSet<K>, prefix: K, len: u8) {
        debug_assert!(len < 8);
        let first = usize::from(prefix.top_byte());
        let count = 1usize << (8 - len);
        for (byte, slot) in (first..first + count).zip(&mut self.next_hop[first..first + count]) {
            // `byte` < 256: the range stays inside the 256-entry table.
            *slot = rules.best_short(byte as u8).unwrap_or(NO_ROUTE);
        }
        let first = self.next_hop[0];
        self.uniform = self.next_hop.iter().all(|&nh| nh == first).then_some(first);
    }
}
