//! The generator's poll loop on DPDK ports: builds and transmits stamped frames at a
//! rate (or as fast as the port takes them) on one port while receiving on others, in
//! one thread on one CPU, and turns a trial into a [`Trial`] report.

use super::flows::{FlowSpec, FlowWalk, FrameWriter, SizeMix};
use super::measure::{RxTracker, Trial, TxSequence};
use super::stamp::Stamp;
use anyhow::{bail, Context, Result};
use ferrule_dataplane::dpdk::{self, Burst, EthPort, Mempool, PortConf};
use std::time::Duration;

/// How long the generator waits before retrying a port that pushed back.
const BACKOFF_SECS: f64 = 1e-6;

/// Where and what to send.
#[derive(Debug, Clone)]
pub struct GeneratorConf {
    /// Devargs of the transmitting port (a vdev string or a PCI address).
    pub tx_port: String,
    /// Devargs of the receiving ports; the transmitting port may be one of them.
    pub rx_ports: Vec<String>,
    pub src_mac: Option<[u8; 6]>,
    pub dst_mac: [u8; 6],
    pub flows: FlowSpec,
    pub sizes: SizeMix,
    /// Packets per transmit burst (1 to `dpdk::MAX_BURST`).
    pub burst: u16,
    /// Mbufs in the pool shared by all ports.
    pub mbufs: u32,
    /// Record the latency of one received packet in this many.
    pub latency_sample: u64,
}

/// Ports, pool and per-flow state, kept across trials (sequence numbers keep counting,
/// and a trial number marks each trial's packets, so a straggler from an earlier trial
/// counts as late, never as one of this trial's).
pub struct Generator {
    // Ports before the pool: dropping a port stops it, which must precede freeing the
    // pool its queues hold mbufs of.
    tx: EthPort,
    rx: Vec<EthPort>,
    /// Receive port ids, the transmit port's included when it receives.
    rx_ids: Vec<u16>,
    pool: Mempool,
    writer: FrameWriter,
    walk: FlowWalk,
    seq: TxSequence,
    tracker: RxTracker,
    sizes: Vec<u16>,
    size_at: usize,
    burst: usize,
    hz: u64,
    /// The running trial's number, stamped on its packets.
    trial: u16,
}

impl Generator {
    /// Probes and starts the ports (the EAL must be up).
    pub fn new(conf: &GeneratorConf) -> Result<Generator> {
        conf.flows.validate()?;
        if conf.burst == 0 || usize::from(conf.burst) > dpdk::MAX_BURST {
            bail!("--burst must be 1 to {}", dpdk::MAX_BURST);
        }
        let largest = conf.sizes.pattern.iter().copied().max().unwrap_or(64);
        let data_room = (u32::from(largest) + 128).max(2176);
        let data_room = u16::try_from(data_room).context("frame size too large")?;
        let pool = Mempool::new("pktgen", conf.mbufs, 256, data_room)
            .context("creating the mbuf pool (more hugepages, or a smaller --mbufs)")?;
        let port_conf = PortConf {
            rx_desc: 1024,
            tx_desc: 1024,
            ..PortConf::default()
        };
        let open = |devargs: &str| -> Result<EthPort> {
            let mut p = EthPort::probe(devargs).with_context(|| format!("port {devargs:?}"))?;
            p.configure(&port_conf, &pool)
                .with_context(|| format!("configuring port {devargs:?}"))?;
            p.start()
                .with_context(|| format!("starting port {devargs:?}"))?;
            Ok(p)
        };
        let tx = open(&conf.tx_port)?;
        let mut rx = Vec::new();
        let mut rx_ids = Vec::new();
        for devargs in &conf.rx_ports {
            if dpdk::ethdev::ethdev_name(devargs) == tx.name() {
                rx_ids.push(tx.id());
            } else {
                let p = open(devargs)?;
                rx_ids.push(p.id());
                rx.push(p);
            }
        }
        let src_mac = conf.src_mac.unwrap_or_else(|| tx.mac());
        let writer = FrameWriter::new(src_mac, conf.dst_mac, conf.flows.src.v6, &conf.sizes)?;
        let hz = dpdk::tsc_hz();
        Ok(Generator {
            tx,
            rx,
            rx_ids,
            pool,
            writer,
            walk: FlowWalk::new(&conf.flows),
            seq: TxSequence::new(conf.flows.flows),
            // Latencies up to 10 s are told apart; longer ones count as 10 s.
            tracker: RxTracker::new(conf.flows.flows, hz.saturating_mul(10), conf.latency_sample),
            sizes: conf.sizes.pattern.clone(),
            size_at: 0,
            burst: usize::from(conf.burst),
            hz,
            trial: 0,
        })
    }

    /// The transmitting port's MAC.
    pub fn tx_mac(&self) -> [u8; 6] {
        self.tx.mac()
    }

    /// Waits up to `timeout` for every port's link to come up (a vhost-user peer has
    /// to connect first); returns whether they all did.
    pub fn wait_links(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let up = self.tx.link().up && self.rx.iter().all(|p| p.link().up);
            if up || std::time::Instant::now() >= deadline {
                return up;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends for `seconds` at `rate` packets/s (`None`: as fast as the port takes
    /// them), receiving all the while, then receives for up to `drain` more (until
    /// nothing has arrived for a tenth of it). Returns the trial's report.
    pub fn trial(
        &mut self,
        rate: Option<f64>,
        seconds: f64,
        drain: Duration,
        with_cdf: bool,
    ) -> Trial {
        self.trial = self.trial.wrapping_add(1);
        self.tracker.start_trial(self.trial);
        let pool = &self.pool;
        let hz = self.hz as f64;
        let start = dpdk::rdtsc();
        let end = start + (seconds * hz) as u64;
        let (mut built, mut tx_packets, mut tx_bytes, mut backpressure) = (0u64, 0u64, 0u64, 0u64);
        let mut pending = Burst::new();
        // A port that pushed back is given a moment before the next try: retrying a full
        // virtio ring at once keeps its cache lines bouncing between the generator and
        // the switch draining it, and slows both.
        let backoff = (hz * BACKOFF_SECS) as u64;
        let mut retry_at = 0u64;
        let mut rx = Burst::new();
        let mut lens = [0u16; dpdk::MAX_BURST];
        let mut sizes = [0u16; dpdk::MAX_BURST];
        loop {
            let now = dpdk::rdtsc();
            if now >= end {
                break;
            }
            receive(&self.rx_ids, &mut rx, &mut self.tracker, now);
            if pending.is_empty() {
                let want = match rate {
                    None => self.burst as u64,
                    Some(r) => {
                        let due = ((now - start) as f64 * r / hz) as u64;
                        due.saturating_sub(built).min(self.burst as u64)
                    }
                };
                let n = want as usize;
                if n == 0 {
                    continue;
                }
                let size_at = self.size_at;
                for i in 0..n {
                    let size = self.sizes[self.size_at];
                    self.size_at = (self.size_at + 1) % self.sizes.len();
                    sizes[i] = size;
                    lens[i] = FrameWriter::data_len(size);
                }
                if !pending.alloc(pool, &lens[..n]) {
                    // Pool empty: the ports hold every mbuf; receive and try again, with
                    // the same sizes (the mix stays what was asked).
                    self.size_at = size_at;
                    continue;
                }
                let tsc = dpdk::rdtsc();
                for (i, &size) in sizes[..n].iter().enumerate() {
                    let (flow, tuple) = self.walk.next_flow();
                    let stamp = Stamp {
                        flow,
                        seq: self.seq.take(flow),
                        tsc,
                        trial: self.trial,
                    };
                    self.writer.write(size, &tuple, &stamp, pending.data_mut(i));
                    tx_bytes += u64::from(size);
                }
                built += n as u64;
                let sent = pending.tx(self.tx.id(), 0);
                tx_packets += sent as u64;
                backpressure += pending.len() as u64;
                if !pending.is_empty() {
                    retry_at = now + backoff;
                }
            } else if now >= retry_at {
                let sent = pending.tx(self.tx.id(), 0);
                tx_packets += sent as u64;
                if !pending.is_empty() {
                    retry_at = now + backoff;
                }
            }
        }
        let measured = (dpdk::rdtsc() - start) as f64 / hz;
        // What the port never took is not sent: not counted, freed with `pending`.
        for i in 0..pending.len() {
            tx_bytes -= u64::from(pending.pkt_len(i)) + super::flows::FCS_LEN as u64;
        }
        drop(pending);
        let drain_end = dpdk::rdtsc() + (drain.as_secs_f64() * hz) as u64;
        let quiet = (drain.as_secs_f64() * hz / 10.0) as u64;
        let mut last = dpdk::rdtsc();
        loop {
            let now = dpdk::rdtsc();
            if now >= drain_end || now - last > quiet {
                break;
            }
            if receive(&self.rx_ids, &mut rx, &mut self.tracker, now) > 0 {
                last = now;
            }
        }
        Trial::new(
            rate,
            measured,
            tx_packets,
            tx_bytes,
            backpressure,
            &self.tracker,
            self.hz,
            with_cdf,
        )
    }
}

/// One receive burst from each port, accounted and freed. Returns packets received.
#[inline]
fn receive(ports: &[u16], rx: &mut Burst, tracker: &mut RxTracker, now: u64) -> usize {
    let mut total = 0;
    for &port in ports {
        let n = rx.rx(port, 0, dpdk::MAX_BURST as u16);
        for i in 0..n.min(4) {
            rx.prefetch(i);
        }
        for i in 0..n {
            rx.prefetch(i + 4);
            tracker.record(rx.data(i), now);
        }
        rx.free_all();
        total += n;
    }
    total
}
