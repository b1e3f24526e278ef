//! `ferrule-dataplane`: everything a packet touches. Pure packet logic that unit-tests
//! on byte slices without the EAL, plus the DPDK I/O layer (feature `dpdk`).

pub mod acl;
pub mod conntrack;
pub mod counters;
pub mod ct_requests;
pub mod flow;
pub mod lpm;
pub mod nat;
pub mod pipeline;
pub mod snapshot;
pub mod switching;
pub mod wire;

#[cfg(feature = "dpdk")]
pub mod dpdk;
#[cfg(feature = "dpdk")]
pub mod punt;
#[cfg(feature = "dpdk")]
pub mod worker;
