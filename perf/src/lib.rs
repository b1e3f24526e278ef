//! Ferrule benchmark helpers: route tables and traffic shared by the benchmarks, and
//! DPDK's `rte_lpm` (the baseline route table), which only the benchmarks run.

pub mod routes;
pub mod rte_lpm;
