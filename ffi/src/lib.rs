//! Raw bindings to the system DPDK: bindgen output over `shim/shim.h` (allowlist
//! `rte_*`/`RTE_*`) and the `ferrule_*` wrappers for DPDK's `static inline` functions.
//! Everything here is `unsafe` to call; the safe layer is `ferrule_dataplane::dpdk`.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code
)]
#![allow(clippy::all, clippy::undocumented_unsafe_blocks)]
#![allow(unsafe_op_in_unsafe_fn)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
