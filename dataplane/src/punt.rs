//! Queues from the workers to the control thread: punted packets (to learn neighbours
//! from, or to hold while a next hop is resolved) and live-trace captures. Bounded,
//! lock-free, allocation-free on push; a full queue drops (`punt-full`).

use crate::dpdk::Mbuf;
use crate::pipeline::{Action, Punt};
use crossbeam_queue::ArrayQueue;

/// A packet handed to the control thread.
#[derive(Debug)]
pub struct PuntItem {
    pub mbuf: Mbuf,
    /// Input port (configuration index).
    pub in_port: u16,
    pub punt: Punt,
    /// Snapshot generation the worker used.
    pub generation: u64,
}

/// Bytes of a traced packet kept.
pub const TRACE_SNAPLEN: usize = 2048;

/// One live-trace capture: the packet as received, and what the worker did with it.
#[derive(Debug, Clone, Copy)]
pub struct TraceCapture {
    pub in_port: u16,
    /// Nanoseconds since the UNIX epoch.
    pub time_ns: u64,
    /// Length on the wire.
    pub len: u32,
    pub caplen: u16,
    pub data: [u8; TRACE_SNAPLEN],
    pub action: Action,
    pub generation: u64,
}

/// A packet the control thread wants sent (ARP requests, released held packets):
/// worker 0 transmits it on its own queue of `port`.
#[derive(Debug)]
pub struct InjectItem {
    /// Output port (configuration index).
    pub port: u16,
    pub mbuf: Mbuf,
}

/// The worker-to-control queues of one daemon.
#[derive(Debug)]
pub struct PuntQueues {
    pub packets: ArrayQueue<PuntItem>,
    pub traces: ArrayQueue<TraceCapture>,
}

impl PuntQueues {
    pub fn new(packets: usize, traces: usize) -> Self {
        PuntQueues {
            packets: ArrayQueue::new(packets.max(1)),
            traces: ArrayQueue::new(traces.max(1)),
        }
    }
}
