//! One worker's connection tracking state ([`Conntrack`]): its connection table, its
//! SNAT port allocator and the clock of the current burst, which the pipeline's
//! conntrack stages (`pipeline::ct`) read and update.

use super::{ConnTable, CtConfig, MemoryAdvice, Millis};
use crate::nat::PortAllocator;
use crate::snapshot::Snapshot;

/// One worker's connection tracking: its table, its SNAT port allocator, and the
/// clock of the current burst.
#[derive(Debug)]
pub struct Conntrack {
    pub table: ConnTable,
    pub alloc: PortAllocator,
    /// This worker (0-based) and how many there are.
    pub worker: u16,
    pub workers: u16,
    /// Check existing connections again when the ACL state changes.
    pub recheck: bool,
    /// Monotonic milliseconds, set by the worker before each burst.
    pub now: Millis,
    /// Set while the worker runs packets another worker handed to it: they are not
    /// handed on again.
    pub no_handoff: bool,
}

/// How [`Conntrack::new`] backs its table: on transparent huge pages with the DPDK
/// layer (the worker's case), on ordinary pages without it.
#[cfg(feature = "dpdk")]
type TableMemory = crate::dpdk::memory::HugePages;
#[cfg(not(feature = "dpdk"))]
type TableMemory = crate::conntrack::NoAdvice;

impl Conntrack {
    /// Worker `worker` of `workers`, with its table preallocated (on transparent huge
    /// pages when the DPDK layer is built).
    pub fn new(cfg: &CtConfig, worker: u16, workers: u16, recheck: bool) -> Conntrack {
        Self::new_in(cfg, worker, workers, recheck, &TableMemory::default())
    }

    /// [`new`](Self::new) with the table's memory backed as `advice` says.
    pub fn new_in(
        cfg: &CtConfig,
        worker: u16,
        workers: u16,
        recheck: bool,
        advice: &impl MemoryAdvice,
    ) -> Conntrack {
        let seed = 0x9E37_79B9_7F4A_7C15u64 ^ (u64::from(worker) << 32) ^ std::process::id() as u64;
        Conntrack {
            table: ConnTable::with_seed_in(cfg, seed, advice),
            alloc: PortAllocator::new(worker, workers, seed.rotate_left(17)),
            worker,
            workers: workers.max(1),
            recheck,
            now: 0,
            no_handoff: false,
        }
    }

    /// Whether the stages have anything to do for this generation: SNAT is on, a
    /// `reflect` rule exists, or connections are still tracked.
    #[inline]
    pub fn active(&self, snap: &Snapshot) -> bool {
        snap.snat.snat_addr().is_some() || snap.acl.has_reflect || !self.table.is_empty()
    }
}
