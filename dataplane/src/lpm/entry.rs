//! The 32-bit table entry both LPM tables are made of, and its encoding.
//!
//! ```text
//!  31   30..24   23..0
//! flag  depth    payload
//! ```
//! - `0`: empty, no route of length >= 8 covers the entry.
//! - depth 8..=64, flag clear: a leaf; the payload is the next hop of the route of that
//!   length that covers the entry (the longest one: leaf pushing).
//! - depth 8..=64, flag set (IPv6 only): a leaf of a /64 that also holds routes longer
//!   than /64, which the lookup then probes first. Depth 0 with the flag: no route <= /64.
//! - `0xFF` in the top byte ([`EXT`]): the payload is the index of a 256-entry child group
//!   that splits the entry on the next 8 address bits.

/// The low 24 bits: next hop of a leaf, group index of an extension.
pub(crate) const PAYLOAD: u32 = 0x00FF_FFFF;
/// Where the depth starts.
pub(crate) const DEPTH_SHIFT: u32 = 24;
/// The depth bits; zero for an empty entry.
pub(crate) const DEPTH_MASK: u32 = 0x7F00_0000;
/// Longer routes exist under this /64 (IPv6).
pub(crate) const FLAG: u32 = 0x8000_0000;
/// Every entry at or above this value points at a child group.
pub(crate) const EXT: u32 = 0xFF00_0000;
/// No route.
pub(crate) const EMPTY: u32 = 0;

/// A leaf for a route of length `depth` (8..=64) with next hop `nh` (24 bits).
#[inline]
pub(crate) const fn leaf(depth: u8, nh: u32) -> u32 {
    ((depth as u32) << DEPTH_SHIFT) | (nh & PAYLOAD)
}

/// An extension entry pointing at group `group`.
#[inline]
pub(crate) const fn ext(group: u32) -> u32 {
    EXT | group
}

/// Whether the entry points at a child group.
#[inline]
pub(crate) const fn is_ext(e: u32) -> bool {
    e >= EXT
}

/// The length of the route a non-extension entry holds (0: none).
#[inline]
pub(crate) const fn depth(e: u32) -> u8 {
    ((e & DEPTH_MASK) >> DEPTH_SHIFT) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips() {
        let e = leaf(24, 0x12_3456);
        assert!(!is_ext(e));
        assert_eq!(depth(e), 24);
        assert_eq!(e & PAYLOAD, 0x12_3456);
        let e = leaf(64, PAYLOAD) | FLAG;
        assert!(!is_ext(e));
        assert_eq!(depth(e), 64);
        assert!(is_ext(ext(PAYLOAD)));
        assert_eq!(ext(7) & PAYLOAD, 7);
        assert_eq!(depth(EMPTY), 0);
        assert!(!is_ext(FLAG));
    }
}
