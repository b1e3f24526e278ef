//! The safe layer over DPDK: EAL start-up, mempools, owning mbufs, fixed-size bursts,
//! ethdev ports, rings and lcore launching. With `ferrule-ffi`, this module is the only
//! place in the dataplane that holds `unsafe` code; each block says why it is sound.

pub mod burst;
pub mod eal;
pub mod ethdev;
pub mod lcore;
pub mod mbuf;
pub mod memory;
pub mod mempool;
pub mod ring;

pub use burst::{Burst, MAX_BURST};
pub use eal::{Eal, EalConfig};
pub use ethdev::{EthPort, EthStats, Link, PortConf};
pub use mbuf::Mbuf;
pub use mempool::Mempool;
pub use ring::Ring;

use std::ffi::CStr;

/// A failed DPDK call: what was attempted and DPDK's own error text.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op}: {message} (errno {errno})")]
pub struct DpdkError {
    /// What was attempted, e.g. `rte_eth_dev_configure(port uplink0)`.
    pub op: String,
    /// Positive errno value.
    pub errno: i32,
    /// `rte_strerror(errno)`.
    pub message: String,
}

impl DpdkError {
    /// Builds an error from a negative return code or a positive errno.
    pub fn new(op: impl Into<String>, code: i32) -> Self {
        let errno = code.abs();
        // SAFETY: rte_strerror accepts any int and returns a pointer to a static or
        // thread-local NUL-terminated string.
        let message = unsafe { CStr::from_ptr(ferrule_ffi::rte_strerror(errno)) }
            .to_string_lossy()
            .into_owned();
        DpdkError {
            op: op.into(),
            errno,
            message,
        }
    }

    /// Builds an error from the current `rte_errno`.
    pub fn last(op: impl Into<String>) -> Self {
        // SAFETY: reads the calling thread's rte_errno; no preconditions.
        let errno = unsafe { ferrule_ffi::ferrule_errno() };
        Self::new(op, errno)
    }
}

/// Turns a DPDK return code (negative errno on failure) into a `Result`.
pub(crate) fn check(op: impl FnOnce() -> String, rc: i32) -> Result<i32, DpdkError> {
    if rc < 0 {
        Err(DpdkError::new(op(), rc))
    } else {
        Ok(rc)
    }
}

/// DPDK's version string, e.g. `DPDK 22.11.11`.
pub fn version() -> String {
    // SAFETY: rte_version returns a pointer to a static NUL-terminated string.
    unsafe { CStr::from_ptr(ferrule_ffi::rte_version()) }
        .to_string_lossy()
        .into_owned()
}

/// TSC cycles since an arbitrary start, for timing in the poll loop.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: reads the time-stamp counter; no preconditions.
    unsafe { ferrule_ffi::ferrule_rdtsc() }
}

/// TSC frequency in Hz (valid after EAL init).
pub fn tsc_hz() -> u64 {
    // SAFETY: plain getter; returns 0 before EAL init.
    unsafe { ferrule_ffi::rte_get_tsc_hz() }
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): for benchmarks on
/// shared machines, where wall time also counts the time other processes had the CPU.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux
    // supports. On failure `ts` stays zero.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
