//! What a trial measured: per-flow sequence state on both sides, loss, reordering,
//! latency percentiles (an HDR histogram of transmit-to-receive TSC cycles) and rates.

use super::flows::WIRE_OVERHEAD;
use super::stamp::{Stamp, TSC_MASK};
use hdrhistogram::Histogram;
use serde::Serialize;

/// The transmit side's per-flow sequence numbers.
#[derive(Debug, Clone)]
pub struct TxSequence {
    next: Vec<u32>,
}

impl TxSequence {
    pub fn new(flows: u64) -> Self {
        TxSequence {
            next: vec![0; flows as usize],
        }
    }

    /// The next sequence number of `flow`.
    #[inline]
    pub fn take(&mut self, flow: u32) -> u32 {
        let s = &mut self.next[flow as usize];
        let seq = *s;
        *s = seq.wrapping_add(1);
        seq
    }
}

/// The receive side: what arrived, per flow in order or not, and how late.
#[derive(Debug, Clone)]
pub struct RxTracker {
    expected: Vec<u32>,
    pub packets: u64,
    /// Frame bytes with FCS.
    pub bytes: u64,
    /// Packets whose sequence number is below one already seen on their flow.
    pub reordered: u64,
    /// Frames without the generator's stamp, or with a flow it never sent.
    pub foreign: u64,
    /// Stamped packets of an earlier trial that arrived during this one (not counted in
    /// `packets`: they were sent, and lost or not, in their own trial).
    pub late: u64,
    /// The trial whose packets count.
    trial: u16,
    latency: Histogram<u64>,
    /// Latency is recorded for one received packet in this many.
    sample: u64,
}

impl RxTracker {
    /// `max_cycles`: the longest latency the histogram holds (longer ones count as it);
    /// `sample`: record the latency of one packet in this many (1: every packet).
    pub fn new(flows: u64, max_cycles: u64, sample: u64) -> Self {
        RxTracker {
            expected: vec![0; flows as usize],
            packets: 0,
            bytes: 0,
            reordered: 0,
            foreign: 0,
            late: 0,
            trial: 0,
            // Three significant digits: 0.1% resolution at every magnitude.
            latency: Histogram::new_with_bounds(1, max_cycles.max(2), 3)
                .expect("valid histogram bounds"),
            sample: sample.max(1),
        }
    }

    /// Accounts one received frame of `frame_len` bytes (without FCS) at TSC `now`.
    #[inline]
    pub fn record(&mut self, frame: &[u8], now: u64) {
        let Some(stamp) = Stamp::find(frame).filter(|s| (s.flow as usize) < self.expected.len())
        else {
            self.foreign += 1;
            return;
        };
        if stamp.trial != self.trial {
            self.late += 1;
            return;
        }
        self.packets += 1;
        self.bytes += frame.len() as u64 + super::flows::FCS_LEN as u64;
        let expected = &mut self.expected[stamp.flow as usize];
        // Serial-number comparison: sequence numbers wrap after 2^32 packets a flow.
        if (stamp.seq.wrapping_sub(*expected) as i32) < 0 {
            self.reordered += 1;
        } else {
            *expected = stamp.seq.wrapping_add(1);
        }
        // Latency of every `sample`-th packet: recording costs as much as the rest of
        // the receive path, and a sample of a million a second still resolves p99.9.
        if self.packets.is_multiple_of(self.sample) {
            let d = now.wrapping_sub(stamp.tsc) & TSC_MASK;
            self.latency.saturating_record(d.max(1));
        }
    }

    /// Starts counting trial `trial`: forgets counts and latencies (not the per-flow
    /// sequence state).
    pub fn start_trial(&mut self, trial: u16) {
        self.trial = trial;
        self.late = 0;
        self.packets = 0;
        self.bytes = 0;
        self.reordered = 0;
        self.foreign = 0;
        self.latency.reset();
    }

    /// Latency percentiles in nanoseconds, given the TSC frequency; `None` when nothing
    /// arrived.
    pub fn latency(&self, tsc_hz: u64) -> Option<Latency> {
        if self.latency.is_empty() || tsc_hz == 0 {
            return None;
        }
        let ns = |cycles: u64| cycles as f64 * 1e9 / tsc_hz as f64;
        let q = |q: f64| ns(self.latency.value_at_quantile(q));
        Some(Latency {
            min_ns: ns(self.latency.min()),
            mean_ns: self.latency.mean() * 1e9 / tsc_hz as f64,
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: ns(self.latency.max()),
        })
    }

    /// The latency distribution as (nanoseconds, fraction of packets at or below) points
    /// for a CDF plot, one per histogram step.
    pub fn latency_cdf(&self, tsc_hz: u64) -> Vec<(f64, f64)> {
        if self.latency.is_empty() || tsc_hz == 0 {
            return Vec::new();
        }
        let total = self.latency.len() as f64;
        self.latency
            .iter_quantiles(2)
            .map(|v| {
                (
                    v.value_iterated_to() as f64 * 1e9 / tsc_hz as f64,
                    v.count_since_last_iteration() as f64 / total,
                )
            })
            .scan(0.0, |acc, (ns, frac)| {
                *acc += frac;
                Some((ns, acc.min(1.0)))
            })
            .collect()
    }
}

/// Latency percentiles, nanoseconds from transmit burst to receive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub min_ns: f64,
    pub mean_ns: f64,
    pub p50_ns: f64,
    pub p90_ns: f64,
    pub p99_ns: f64,
    pub p999_ns: f64,
    pub max_ns: f64,
}

/// One trial's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trial {
    /// Rate asked for (packets/s); `None`: as fast as the generator could.
    pub target_pps: Option<f64>,
    /// Seconds of transmission measured.
    pub seconds: f64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Sent and never received (by the end of the drain time). Negative would mean
    /// duplicates.
    pub lost: i64,
    /// `lost / tx_packets`.
    pub loss_ratio: f64,
    pub reordered: u64,
    pub foreign: u64,
    /// Packets of an earlier trial (or the warm-up) received during this one: not
    /// counted above.
    pub late: u64,
    /// Packets the generator's own transmit queue did not take at once (sent later:
    /// back-pressure from the port, e.g. a full virtio ring).
    pub tx_backpressure: u64,
    pub tx_pps: f64,
    pub rx_pps: f64,
    /// Received rate in Gbit/s on the wire (frame, FCS, preamble and gap).
    pub rx_gbps: f64,
    pub latency: Option<Latency>,
    /// The latency CDF (ns, fraction), when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub latency_cdf: Vec<(f64, f64)>,
}

impl Trial {
    /// Builds the report from the two sides' counts.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        target_pps: Option<f64>,
        seconds: f64,
        tx_packets: u64,
        tx_bytes: u64,
        tx_backpressure: u64,
        rx: &RxTracker,
        tsc_hz: u64,
        with_cdf: bool,
    ) -> Trial {
        let lost = tx_packets as i64 - rx.packets as i64;
        let secs = seconds.max(1e-9);
        Trial {
            target_pps,
            seconds,
            tx_packets,
            tx_bytes,
            rx_packets: rx.packets,
            rx_bytes: rx.bytes,
            lost,
            loss_ratio: if tx_packets == 0 {
                0.0
            } else {
                lost as f64 / tx_packets as f64
            },
            reordered: rx.reordered,
            foreign: rx.foreign,
            late: rx.late,
            tx_backpressure,
            tx_pps: tx_packets as f64 / secs,
            rx_pps: rx.packets as f64 / secs,
            rx_gbps: (rx.bytes + WIRE_OVERHEAD * rx.packets) as f64 * 8.0 / secs / 1e9,
            latency: rx.latency(tsc_hz),
            latency_cdf: if with_cdf {
                rx.latency_cdf(tsc_hz)
            } else {
                Vec::new()
            },
        }
    }
}
