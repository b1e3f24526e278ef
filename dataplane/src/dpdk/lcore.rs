//! Lcores: which ones the EAL gave us and launching a worker function on one.

use super::{check, DpdkError};
use std::ffi::c_void;

type Job = Box<dyn FnOnce() -> i32 + Send + 'static>;

extern "C" fn trampoline(arg: *mut c_void) -> i32 {
    // SAFETY: `arg` is the Box<Job> leaked by `launch` for exactly this call.
    let job: Box<Job> = unsafe { Box::from_raw(arg.cast::<Job>()) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
        Ok(rc) => rc,
        Err(_) => {
            tracing::error!("worker panicked");
            -1
        }
    }
}

/// The main lcore (the thread that started the EAL).
pub fn main_lcore() -> u32 {
    // SAFETY: plain getter, valid after EAL init.
    unsafe { ferrule_ffi::rte_get_main_lcore() }
}

/// Lcore of the calling thread (`u32::MAX` for a thread the EAL does not know).
pub fn current() -> u32 {
    // SAFETY: reads a thread-local.
    unsafe { ferrule_ffi::ferrule_lcore_id() }
}

/// The enabled lcores other than the main one, ascending.
pub fn worker_lcores() -> Vec<u32> {
    let mut out = Vec::new();
    let mut i = u32::MAX; // -1: start before the first lcore
    loop {
        // SAFETY: plain iteration over the EAL's lcore table; skip main, no wrap.
        i = unsafe { ferrule_ffi::rte_get_next_lcore(i, 1, 0) };
        if i >= ferrule_ffi::RTE_MAX_LCORE {
            break;
        }
        out.push(i);
    }
    out
}

/// Runs `job` on worker lcore `lcore`. The lcore must be idle.
pub fn launch<F>(lcore: u32, job: F) -> Result<(), DpdkError>
where
    F: FnOnce() -> i32 + Send + 'static,
{
    let boxed: Box<Job> = Box::new(Box::new(job));
    let arg = Box::into_raw(boxed).cast::<c_void>();
    // SAFETY: trampoline matches lcore_function_t; arg is a leaked Box<Job> that the
    // trampoline takes back exactly once, or we take it back below on failure.
    let rc = unsafe { ferrule_ffi::rte_eal_remote_launch(Some(trampoline), arg, lcore) };
    if rc < 0 {
        // SAFETY: the launch failed, so the trampoline will never run with arg.
        drop(unsafe { Box::from_raw(arg.cast::<Job>()) });
    }
    check(|| format!("rte_eal_remote_launch(lcore {lcore})"), rc).map(|_| ())
}

/// Waits for lcore `lcore` to finish its job; returns the job's return value.
pub fn wait(lcore: u32) -> i32 {
    // SAFETY: plain wait on an lcore id.
    unsafe { ferrule_ffi::rte_eal_wait_lcore(lcore) }
}

/// Waits for every worker lcore to finish.
pub fn wait_all() {
    // SAFETY: no preconditions; blocks until all workers are idle.
    unsafe { ferrule_ffi::rte_eal_mp_wait_lcore() }
}
