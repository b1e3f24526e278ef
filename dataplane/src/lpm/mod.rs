//! Longest-prefix-match route tables for per-VRF routing: [`Lpm4`] (DIR-24-8) and
//! [`Lpm6`] (24-bit root, 8-bit strides to /64, exact-match tables beyond).
//!
//! Both are built by the control thread and read by the workers: a table is `Clone`,
//! `Send` and `Sync`, so the control thread clones the current table, applies a change
//! and publishes the new one inside the next snapshot; workers never write.
//!
//! Conventions shared by both tables:
//! - A route is `(prefix, len) → next hop`. Host bits beyond `len` are masked off
//!   silently: `10.1.2.3/8` is the route `10.0.0.0/8`.
//! - A next hop is an index into the snapshot's next-hop table, at most
//!   [`MAX_NEXT_HOP`]. Batch lookups write [`NO_ROUTE`] for an address no route covers.
//! - Inserting an existing `(prefix, len)` replaces its next hop and returns the old one.
//! - Updates are incremental, as in DPDK's `rte_lpm`: each table entry remembers the
//!   length of the route that wrote it, so an insert overwrites only shorter routes and a
//!   remove restores the next-longest covering route from the master route set.
//! - Routes shorter than /8 live in a 256-entry table indexed by the top address byte,
//!   consulted only when the main table has nothing: a VRF holding just a default route
//!   costs kilobytes, not the 64 MiB a filled DIR-24-8 root would.
//! - A clone is also where a table is placed in memory: the parts of the root table that
//!   the clone fills at least half of, and the groups, go on transparent huge pages
//!   (`placement`), so a full routing table's lookups do not miss the TLB on every
//!   4 KiB page. A table built by inserts and never cloned stays on 4 KiB pages (with
//!   THP in `madvise` mode; in `always` mode the kernel picks either way).

#![forbid(unsafe_code)]

mod entry;
mod lazy;
mod placement;
mod rules;
mod short;
mod trie;
mod v4;
mod v6;

pub use v4::Lpm4;
pub use v6::Lpm6;

/// Index into the snapshot's next-hop table; at most [`MAX_NEXT_HOP`] (2^24 - 1).
pub type NextHop = u32;

/// The largest next hop a table can hold (24 bits).
pub const MAX_NEXT_HOP: NextHop = (1 << 24) - 1;

/// The result a batch or `lookup_u32`/`lookup_u128` lookup gives an address no route
/// covers. Never a valid next hop.
pub const NO_ROUTE: u32 = u32::MAX;

/// Why a route could not be inserted. A failed insert leaves the table unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LpmError {
    /// The prefix length exceeds the address width.
    #[error("prefix length /{len} is longer than /{max}")]
    PrefixLength {
        /// The length asked for.
        len: u8,
        /// 32 for IPv4, 128 for IPv6.
        max: u8,
    },
    /// The next hop does not fit the 24 bits a table entry has for it.
    #[error("next hop {0} exceeds the maximum {MAX_NEXT_HOP}")]
    NextHopTooLarge(NextHop),
    /// The table ran out of 256-entry groups (2^24 of them, 4 GiB).
    #[error("LPM table full: no free tbl8 group")]
    Full,
}

/// Checks what every insert checks, before anything is changed.
fn check_route(len: u8, max: u8, nh: NextHop) -> Result<(), LpmError> {
    if len > max {
        return Err(LpmError::PrefixLength { len, max });
    }
    if nh > MAX_NEXT_HOP {
        return Err(LpmError::NextHopTooLarge(nh));
    }
    Ok(())
}
