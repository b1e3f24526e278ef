//! Ferrule benchmark helpers: route tables and traffic shared by the benchmarks, and
//! the code only the benchmarks run — DPDK's `rte_lpm` (the baseline route table) and
//! the aggregated bit-vector ACL classifier — and `ferrule-pktgen`'s traffic generator.

pub mod bitvector;
pub mod pktgen;
pub mod routes;
pub mod rte_lpm;
