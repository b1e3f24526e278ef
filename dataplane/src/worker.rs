//! The worker poll loop: each worker owns a set of receive queues and, until the
//! pipeline lands, forwards every burst by the static cross-connect of its input port.
//! One burst at a time, counters once per burst, no locks, no allocation.

use crate::counters::{DropReason, WorkerCounters, MAX_PORTS};
use crate::dpdk::{Burst, MAX_BURST};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Where a cross-connected queue sends its packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxTarget {
    /// DPDK port id.
    pub port: u16,
    /// The worker's own transmit queue on that port.
    pub queue: u16,
    /// Port index in the configuration (for counters and link state).
    pub index: usize,
}

/// One receive queue a worker polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxJob {
    /// DPDK port id.
    pub port: u16,
    pub queue: u16,
    /// Port index in the configuration.
    pub index: usize,
    /// Cross-connect peer; `None` drops as `no-xconnect`.
    pub out: Option<TxTarget>,
}

/// What one worker does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPlan {
    /// Worker index (0-based).
    pub worker: usize,
    /// EAL lcore it runs on.
    pub lcore: u32,
    /// Packets per receive call (≤ [`MAX_BURST`]).
    pub burst_size: u16,
    /// After this many consecutive empty polls, sleep `idle_sleep_us` between polls
    /// (0 = never sleep: pure poll mode).
    pub idle_sleep_us: u32,
    pub jobs: Vec<RxJob>,
}

/// Polls before an idle worker starts sleeping.
const IDLE_POLLS_BEFORE_SLEEP: u32 = 1024;

/// State the control thread shares with every worker: a stop flag and per-port link
/// state, both read with relaxed loads once per burst.
#[derive(Debug)]
pub struct Shared {
    running: AtomicBool,
    link_up: [AtomicBool; MAX_PORTS],
    /// Monotonic start time of forwarding, TSC-free (nanoseconds since UNIX epoch).
    started_ns: AtomicU64,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            running: AtomicBool::new(true),
            link_up: std::array::from_fn(|_| AtomicBool::new(true)),
            started_ns: AtomicU64::new(0),
        }
    }
}

impl Shared {
    /// Tells every worker to leave its loop after the current burst.
    pub fn stop(&self) {
        self.running.store(false, Ordering::Release);
    }

    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// Publishes a port's link state (control thread).
    pub fn set_link(&self, index: usize, up: bool) {
        if let Some(l) = self.link_up.get(index) {
            l.store(up, Ordering::Relaxed);
        }
    }

    #[inline(always)]
    pub fn link_up(&self, index: usize) -> bool {
        self.link_up[index].load(Ordering::Relaxed)
    }

    pub fn set_started_ns(&self, ns: u64) {
        self.started_ns.store(ns, Ordering::Relaxed);
    }

    pub fn started_ns(&self) -> u64 {
        self.started_ns.load(Ordering::Relaxed)
    }
}

/// Runs the poll loop until `shared.stop()`; returns 0.
pub fn run(plan: &WorkerPlan, shared: &Shared, counters: &WorkerCounters) -> i32 {
    if plan.jobs.is_empty() {
        tracing::info!(
            worker = plan.worker,
            lcore = plan.lcore,
            "worker has no receive queues; idle"
        );
        return 0;
    }
    let burst_size = plan.burst_size.clamp(1, MAX_BURST as u16);
    let mut burst = Burst::new();
    let mut idle_polls = 0u32;
    tracing::info!(
        worker = plan.worker,
        lcore = plan.lcore,
        queues = plan.jobs.len(),
        "worker polling"
    );
    while shared.is_running() {
        let mut rx_total = 0u64;
        let mut tx_total = 0u64;
        for job in &plan.jobs {
            let n = burst.rx(job.port, job.queue, burst_size) as u64;
            if n == 0 {
                continue;
            }
            rx_total += n;
            let bytes = burst.total_bytes();
            let rxc = &counters.ports[job.index];
            rxc.rx_packets.add(n);
            rxc.rx_bytes.add(bytes);
            tx_total += forward(&mut burst, job, bytes, shared, counters);
        }
        counters.polls.add(1);
        if rx_total > 0 {
            counters.busy_polls.add(1);
            counters.rx_packets.add(rx_total);
            counters.tx_packets.add(tx_total);
            idle_polls = 0;
        } else if plan.idle_sleep_us > 0 {
            idle_polls = idle_polls.saturating_add(1);
            if idle_polls > IDLE_POLLS_BEFORE_SLEEP {
                std::thread::sleep(Duration::from_micros(u64::from(plan.idle_sleep_us)));
            }
        }
    }
    tracing::info!(worker = plan.worker, "worker stopped");
    0
}

/// Sends a received burst to the input port's cross-connect peer; anything not sent is
/// freed and counted. Returns the number sent.
#[inline(always)]
fn forward(burst: &mut Burst, job: &RxJob, bytes: u64, shared: &Shared, c: &WorkerCounters) -> u64 {
    let Some(out) = job.out else {
        c.drop_packets(DropReason::NoXconnect, job.index, burst.len() as u64);
        burst.free_all();
        return 0;
    };
    if !shared.link_up(out.index) {
        c.drop_packets(DropReason::PortDown, job.index, burst.len() as u64);
        burst.free_all();
        return 0;
    }
    let sent = burst.tx(out.port, out.queue) as u64;
    let mut sent_bytes = bytes;
    if !burst.is_empty() {
        sent_bytes -= burst.total_bytes();
        c.drop_packets(DropReason::TxFull, job.index, burst.len() as u64);
        burst.free_all();
    }
    let txc = &c.ports[out.index];
    txc.tx_packets.add(sent);
    txc.tx_bytes.add(sent_bytes);
    sent
}
