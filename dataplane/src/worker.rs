//! The worker poll loop: each worker owns a set of receive queues and a connection
//! table, loads the current snapshot once per round, runs every received burst through
//! the pipeline (or the static cross-connect of its input port), hands packets whose
//! connection another worker owns to that worker, and transmits per output port. One
//! burst at a time, counters once per burst, no locks, no heap allocation on the
//! packet path.

use crate::conntrack::Conntrack;
use crate::conntrack::{CtBudget, CtConfig};
use crate::counters::{DropReason, WorkerCounters, MAX_PORTS};
use crate::ct_requests::{self, CtReply, CtRequest};
use crate::dpdk::{Burst, Mbuf, Mempool, MAX_BURST};
use crate::pipeline::{self, icmp_error, switch, Action, NoTrace, Scratch};
use crate::punt::{InjectItem, PuntItem, PuntQueues, TraceCapture, TRACE_SNAPLEN};
use crossbeam_queue::ArrayQueue;

/// Packets the control thread may have waiting for worker 0 to send.
const INJECT_QUEUE: usize = 1024;
/// Packets waiting for the worker that owns their connection, per worker.
const HANDOFF_QUEUE: usize = 4096;
/// Transmit queues a port shared by workers may have (more are not used).
const MAX_SHARED_TXQ: usize = 16;
/// Connection-table expirations per poll round at most.
const EXPIRE_BUDGET: usize = 64;
/// Learn events (layer-2 switching) waiting for the control thread.
const FDB_LEARN_QUEUE: usize = 1024;
use crate::snapshot::Snapshot;
use crate::switching::{self, LearnEvent, Member, NO_VLAN, TAG_LEN};
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
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
    /// Cross-connect peer: the burst bypasses the pipeline. `None`: the pipeline.
    pub out: Option<TxTarget>,
}

/// What one worker does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPlan {
    /// Worker index (0-based); also its transmit queue on every port.
    pub worker: usize,
    /// EAL lcore it runs on.
    pub lcore: u32,
    /// Packets per receive call (≤ [`MAX_BURST`]).
    pub burst_size: u16,
    /// How many workers there are (connections are spread over them).
    pub workers: u16,
    /// The worker's connection table.
    pub ct: CtConfig,
    /// Check tracked connections again when the ACL state changes.
    pub ct_recheck: bool,
    /// After this many consecutive empty polls, sleep `idle_sleep_us` between polls
    /// (0 = never sleep: pure poll mode).
    pub idle_sleep_us: u32,
    pub jobs: Vec<RxJob>,
}

/// Polls before an idle worker starts sleeping.
const IDLE_POLLS_BEFORE_SLEEP: u32 = 1024;

/// State the control thread shares with every worker: the stop flag, per-port link
/// state, the current snapshot, the queues to the control thread and the live-trace
/// arm. Workers only read it (and push to the queues).
#[derive(Debug)]
pub struct Shared {
    running: AtomicBool,
    link_up: [AtomicBool; MAX_PORTS],
    /// The current generation; workers load it once per poll round.
    pub snapshot: ArcSwap<Snapshot>,
    pub punt: PuntQueues,
    /// Packets from the control thread for worker 0 to send.
    pub inject: ArrayQueue<InjectItem>,
    /// Per worker, packets of connections it owns that another worker received.
    handoff: Vec<ArrayQueue<HandoffItem>>,
    /// Per worker, the receive queues it polls (empty until the control thread sets
    /// them: then each worker polls its plan's). Replaced as a whole when ports are
    /// added or removed.
    jobs: ArcSwap<Vec<Vec<RxJob>>>,
    /// Per worker, poll rounds completed: the control thread waits for every worker
    /// to move on before it tears down a port the workers may still be using.
    epochs: Vec<AtomicU64>,
    /// Per worker, requests about its connection table, and all the answers.
    ct_requests: Vec<ArrayQueue<CtRequest>>,
    ct_replies: ArrayQueue<CtReply>,
    /// Port index + 1 whose received packets are being traced (0: none).
    trace_port: AtomicU32,
    /// Captures still wanted.
    trace_remaining: AtomicU32,
    /// DPDK port id of every configured port, for transmit (index → id).
    dpdk_ids: [AtomicU32; MAX_PORTS],
    /// Per port, its transmit queues when it has fewer than there are workers (0: one
    /// per worker, the worker's own); then workers share them under `tx_locks`.
    tx_queues: [AtomicU32; MAX_PORTS],
    tx_locks: [[AtomicBool; MAX_SHARED_TXQ]; MAX_PORTS],
    started_ns: AtomicU64,
    /// The node-wide connection limits every worker's table counts against.
    ct_budget: Option<Arc<CtBudget>>,
    /// Source MACs the workers saw on layer-2 segment members and the FDB does not
    /// have there, for the control thread to learn (at most
    /// [`MAX_LEARN_PER_BURST`](crate::switching::MAX_LEARN_PER_BURST) per burst; a full
    /// queue loses the event, a later frame reports it again).
    fdb_learn: ArrayQueue<LearnEvent>,
}

/// A packet handed to the worker that owns its connection.
#[derive(Debug)]
struct HandoffItem {
    mbuf: Mbuf,
    /// Input port (configuration index).
    in_port: u16,
}

impl Shared {
    /// The state shared with `workers` workers.
    pub fn new(snapshot: Snapshot, punt: PuntQueues, workers: usize) -> Shared {
        let workers = workers.max(1);
        Shared {
            running: AtomicBool::new(true),
            link_up: std::array::from_fn(|_| AtomicBool::new(true)),
            snapshot: ArcSwap::from_pointee(snapshot),
            punt,
            inject: ArrayQueue::new(INJECT_QUEUE),
            handoff: (0..workers)
                .map(|_| ArrayQueue::new(HANDOFF_QUEUE))
                .collect(),
            jobs: ArcSwap::from_pointee(Vec::new()),
            epochs: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            ct_requests: (0..workers).map(|_| ArrayQueue::new(4)).collect(),
            ct_replies: ArrayQueue::new(workers * 4),
            trace_port: AtomicU32::new(0),
            trace_remaining: AtomicU32::new(0),
            dpdk_ids: std::array::from_fn(|i| AtomicU32::new(i as u32)),
            tx_queues: std::array::from_fn(|_| AtomicU32::new(0)),
            tx_locks: std::array::from_fn(|_| std::array::from_fn(|_| AtomicBool::new(false))),
            started_ns: AtomicU64::new(0),
            ct_budget: None,
            fdb_learn: ArrayQueue::new(FDB_LEARN_QUEUE),
        }
    }

    /// The state shared with the workers, their connection tables counting against
    /// `budget`'s node-wide limits.
    pub fn with_ct_budget(mut self, budget: Arc<CtBudget>) -> Shared {
        self.ct_budget = Some(budget);
        self
    }

    /// The node-wide connection limits, if set.
    pub fn ct_budget(&self) -> Option<&Arc<CtBudget>> {
        self.ct_budget.as_ref()
    }

    /// Tells every worker to leave its loop after the current round.
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
        self.link_up
            .get(index)
            .is_some_and(|l| l.load(Ordering::Relaxed))
    }

    /// Records the DPDK port id of configuration index `index`.
    pub fn set_dpdk_id(&self, index: usize, id: u16) {
        if let Some(x) = self.dpdk_ids.get(index) {
            x.store(u32::from(id), Ordering::Relaxed);
        }
    }

    #[inline(always)]
    fn dpdk_id(&self, index: usize) -> u16 {
        self.dpdk_ids[index].load(Ordering::Relaxed) as u16
    }

    /// Records that port `index` has `queues` transmit queues for `workers` workers:
    /// with fewer queues than workers, workers share them (worker `w` uses queue
    /// `w % queues`, one worker at a time).
    pub fn set_tx_queues(&self, index: usize, queues: u16, workers: usize) {
        if let Some(q) = self.tx_queues.get(index) {
            let shared = usize::from(queues) < workers;
            let n = if shared {
                u32::from(queues.clamp(1, MAX_SHARED_TXQ as u16))
            } else {
                0
            };
            q.store(n, Ordering::Release);
        }
    }

    /// Sends a burst out of port `index` on `worker`'s transmit queue, or on the
    /// shared queue it maps to (taking its lock). Returns how many were sent.
    #[inline(always)]
    fn transmit(&self, index: usize, worker: usize, burst: &mut Burst) -> usize {
        let port = self.dpdk_id(index);
        let shared = self.tx_queues[index].load(Ordering::Acquire) as usize;
        if shared == 0 {
            return burst.tx(port, worker as u16);
        }
        let queue = worker % shared;
        let lock = &self.tx_locks[index][queue];
        while lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        let sent = burst.tx(port, queue as u16);
        lock.store(false, Ordering::Release);
        sent
    }

    /// Arms live tracing of the next `count` packets received on port `index`.
    pub fn arm_trace(&self, index: usize, count: u32) {
        self.trace_remaining.store(count, Ordering::Relaxed);
        self.trace_port.store(index as u32 + 1, Ordering::Release);
    }

    /// Captures still wanted.
    pub fn trace_remaining(&self) -> u32 {
        self.trace_remaining.load(Ordering::Relaxed)
    }

    /// Whether packets received on `index` are being traced.
    #[inline(always)]
    fn trace_armed(&self, index: usize) -> bool {
        self.trace_port.load(Ordering::Relaxed) == index as u32 + 1
            && self.trace_remaining.load(Ordering::Relaxed) > 0
    }

    /// Claims one capture slot for a packet received on `index`.
    #[inline(always)]
    fn claim_trace(&self, index: usize) -> bool {
        if self.trace_port.load(Ordering::Relaxed) != index as u32 + 1 {
            return false;
        }
        self.trace_remaining
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Replaces every worker's receive queues (index = worker).
    pub fn set_jobs(&self, jobs: Vec<Vec<RxJob>>) {
        self.jobs.store(std::sync::Arc::new(jobs));
    }

    /// The receive queues each worker polls, as last set.
    pub fn jobs(&self) -> Vec<Vec<RxJob>> {
        self.jobs.load().as_ref().clone()
    }

    /// Waits until every worker has finished two poll rounds since the call (so none
    /// still uses a queue or a port the caller just took out of the job table and the
    /// link table), or `timeout`. False on timeout.
    pub fn wait_quiescent(&self, timeout: Duration) -> bool {
        let start: Vec<u64> = self
            .epochs
            .iter()
            .map(|e| e.load(Ordering::Acquire))
            .collect();
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let done = self
                .epochs
                .iter()
                .zip(&start)
                .all(|(e, s)| e.load(Ordering::Acquire) >= s + 2);
            if done || !self.is_running() {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Sends `request` to every worker and collects their answers, waiting up to
    /// `timeout` (control thread). `None` when a worker did not answer in time.
    pub fn ask_workers(&self, request: &CtRequest, timeout: Duration) -> Option<Vec<CtReply>> {
        while self.ct_replies.pop().is_some() {}
        for q in &self.ct_requests {
            if q.push(request.clone()).is_err() {
                return None;
            }
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut replies = Vec::with_capacity(self.ct_requests.len());
        while replies.len() < self.ct_requests.len() {
            match self.ct_replies.pop() {
                Some(r) => replies.push(r),
                None if std::time::Instant::now() > deadline => {
                    for q in &self.ct_requests {
                        while q.pop().is_some() {}
                    }
                    return None;
                }
                None => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        Some(replies)
    }

    /// The next learn event the workers reported (control thread, at every tick, until
    /// `None`; see the daemon's `fdb`).
    pub fn pop_fdb_learn(&self) -> Option<LearnEvent> {
        self.fdb_learn.pop()
    }

    /// Reports a learn event as a worker does (tests).
    pub fn push_fdb_learn(&self, event: LearnEvent) -> bool {
        self.fdb_learn.push(event).is_ok()
    }

    pub fn set_started_ns(&self, ns: u64) {
        self.started_ns.store(ns, Ordering::Relaxed);
    }

    pub fn started_ns(&self) -> u64 {
        self.started_ns.load(Ordering::Relaxed)
    }
}

/// A worker's private state: its staging bursts and scratch arrays, allocated once.
struct Ctx<'a> {
    plan: &'a WorkerPlan,
    shared: &'a Shared,
    counters: &'a WorkerCounters,
    pool: &'a Mempool,
    actions: [Action; MAX_BURST],
    scratch: Box<Scratch>,
    /// Live-trace captures of the current burst (capacity fixed at start).
    captures: Vec<(usize, TraceCapture)>,
    /// Per output port (configuration index), packets to send.
    out: Box<[Burst]>,
    /// Output ports with packets staged, in order of first use.
    touched: [u16; MAX_PORTS],
    n_touched: usize,
    drops: Burst,
    /// ICMP errors sent in the current one-second window, and when it started.
    icmp_sent: u32,
    icmp_window: std::time::Instant,
    ct: Conntrack,
    /// When the worker started (the connection table's clock counts from here).
    started: std::time::Instant,
    /// Handed-off packets of the current round, for one input port.
    handed: Burst,
}

/// Runs the poll loop until `shared.stop()`; returns 0.
pub fn run(plan: &WorkerPlan, shared: &Shared, counters: &WorkerCounters, pool: &Mempool) -> i32 {
    let burst_size = plan.burst_size.clamp(1, MAX_BURST as u16);
    let mut ctx = Ctx {
        plan,
        shared,
        counters,
        pool,
        actions: [Action::Drop(DropReason::Malformed); MAX_BURST],
        scratch: Box::default(),
        captures: Vec::with_capacity(MAX_CAPTURES_PER_BURST),
        out: (0..MAX_PORTS).map(|_| Burst::new()).collect(),
        touched: [0; MAX_PORTS],
        n_touched: 0,
        drops: Burst::new(),
        icmp_sent: 0,
        icmp_window: std::time::Instant::now(),
        ct: Conntrack::new(&plan.ct, plan.worker as u16, plan.workers, plan.ct_recheck),
        started: std::time::Instant::now(),
        handed: Burst::new(),
    };
    if let Some(budget) = &shared.ct_budget {
        ctx.ct.table.set_budget(Arc::clone(budget));
    }
    let mut burst = Burst::new();
    let mut idle_polls = 0u32;
    tracing::info!(worker = plan.worker, lcore = plan.lcore, "worker polling");
    while shared.is_running() {
        // The snapshot is loaded once per round, and only when a packet needs it.
        let mut snap = None;
        let mut rx_total = 0u64;
        let mut tx_total = 0u64;
        // The queues to poll: the control thread's table once it set one (ports come
        // and go at run time), the plan's until then.
        let table = shared.jobs.load();
        let jobs: &[RxJob] = if table.is_empty() {
            &plan.jobs
        } else {
            table.get(plan.worker).map_or(&[], Vec::as_slice)
        };
        for job in jobs {
            let n = burst.rx(job.port, job.queue, burst_size) as u64;
            if n == 0 {
                continue;
            }
            rx_total += n;
            let bytes = burst.total_bytes();
            let rxc = &counters.ports[job.index];
            rxc.rx_packets.add(n);
            rxc.rx_bytes.add(bytes);
            tx_total += match job.out {
                Some(out) => cross_connect(&mut burst, job, out, bytes, shared, counters),
                None => {
                    let snap = snap.get_or_insert_with(|| {
                        // The clock is read once per round, and only when needed.
                        ctx.ct.now = ctx.started.elapsed().as_millis() as u64;
                        shared.snapshot.load()
                    });
                    ctx.pipeline(&mut burst, job.index, snap)
                }
            };
        }
        if !shared.handoff[plan.worker].is_empty() {
            let snap = snap.get_or_insert_with(|| {
                ctx.ct.now = ctx.started.elapsed().as_millis() as u64;
                shared.snapshot.load()
            });
            tx_total += ctx.handed_off(snap);
        }
        if !ctx.ct.table.is_empty() {
            if snap.is_none() {
                ctx.ct.now = ctx.started.elapsed().as_millis() as u64;
            }
            ctx.ct.table.expire(ctx.ct.now, EXPIRE_BUDGET);
        }
        if !shared.ct_requests[plan.worker].is_empty() {
            ctx.answer_ct();
        }
        if plan.worker == 0 && !shared.inject.is_empty() {
            tx_total += ctx.inject();
        }
        counters.polls.add(1);
        // Single writer: a load and a store, no locked instruction.
        let epoch = &shared.epochs[plan.worker];
        epoch.store(
            epoch.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Release,
        );
        if jobs.is_empty() && shared.handoff[plan.worker].is_empty() {
            // Nothing to poll (yet): do not spin a core for it.
            std::thread::sleep(Duration::from_micros(200));
        }
        if tx_total > 0 {
            counters.tx_packets.add(tx_total);
        }
        if rx_total > 0 {
            counters.busy_polls.add(1);
            counters.rx_packets.add(rx_total);
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
fn cross_connect(
    burst: &mut Burst,
    job: &RxJob,
    out: TxTarget,
    bytes: u64,
    shared: &Shared,
    c: &WorkerCounters,
) -> u64 {
    if !shared.link_up(out.index) {
        c.drop_packets(DropReason::PortDown, job.index, burst.len() as u64);
        burst.free_all();
        return 0;
    }
    let sent = shared.transmit(out.index, usize::from(out.queue), burst) as u64;
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

/// ICMP errors one worker sends per second at most (RFC 1812 4.3.2.8 rate limiting);
/// beyond it the offending packets are still dropped, silently.
const ICMP_ERRORS_PER_SECOND: u32 = 1000;

/// Live-trace captures taken from one burst at most (the rest wait for later bursts).
const MAX_CAPTURES_PER_BURST: usize = 8;

impl Ctx<'_> {
    /// Runs the packets other workers handed to this one (the owner of their
    /// connections) through the pipeline, a run of one input port at a time. Returns
    /// the number of packets sent.
    fn handed_off(&mut self, snap: &Snapshot) -> u64 {
        let queue = &self.shared.handoff[self.plan.worker];
        let mut sent = 0u64;
        let mut port = None;
        let mut handed = std::mem::take(&mut self.handed);
        // A packet is handed off once: here it stays, whatever the owner says now.
        self.ct.no_handoff = true;
        for _ in 0..MAX_BURST {
            let Some(item) = queue.pop() else { break };
            if port.is_some_and(|p| p != item.in_port) {
                sent += self.pipeline(&mut handed, usize::from(port.unwrap_or(0)), snap);
            }
            port = Some(item.in_port);
            if let Err(m) = handed.push(item.mbuf) {
                drop(m);
            }
        }
        if let Some(p) = port.filter(|_| !handed.is_empty()) {
            sent += self.pipeline(&mut handed, usize::from(p), snap);
        }
        self.ct.no_handoff = false;
        self.handed = handed;
        sent
    }

    /// Answers the control thread's requests about the connection table.
    fn answer_ct(&mut self) {
        self.ct.now = self.started.elapsed().as_millis() as u64;
        while let Some(request) = self.shared.ct_requests[self.plan.worker].pop() {
            let reply = ct_requests::answer(
                self.plan.worker as u16,
                &mut self.ct.table,
                &request,
                self.ct.now,
            );
            // The control thread drains the answers; a full queue loses this one and
            // the request times out there.
            let _ = self.shared.ct_replies.push(reply);
        }
    }

    /// Runs a burst received on port `in_index` through the pipeline and transmits
    /// the results. Returns the number of packets sent.
    fn pipeline(&mut self, burst: &mut Burst, in_index: usize, snap: &Snapshot) -> u64 {
        let n = burst.len();
        let in_port = in_index as u16;
        if self.shared.trace_armed(in_index) {
            for i in 0..n {
                if self.captures.len() == self.captures.capacity()
                    || !self.shared.claim_trace(in_index)
                {
                    break;
                }
                self.captures
                    .push((i, capture_start(burst, i, in_port, snap)));
            }
        }
        pipeline::process_burst(
            snap,
            in_port,
            burst,
            &mut self.actions[..n],
            &mut self.scratch,
            Some(&mut self.ct),
            &mut NoTrace,
        );
        for hit in self.scratch.acl_hits() {
            self.counters.acl.hit(hit.slot, u64::from(hit.bytes));
        }
        for &event in self.scratch.learned() {
            // A full queue loses the event; the source's next frames report it again.
            let _ = self.shared.fdb_learn.push(event);
        }
        for (i, mut cap) in self.captures.drain(..) {
            cap.action = self.actions[i];
            // A full trace queue loses the capture, never the packet.
            let _ = self.shared.punt.traces.push(cap);
        }
        for i in 0..n {
            let Some(m) = burst.take(i) else { continue };
            match self.actions[i] {
                Action::Forward { port } => self.stage(port, m),
                Action::Reply => {
                    self.counters.local_replies.add(1);
                    self.stage(in_port, m);
                }
                Action::IcmpError { kind, reason } => {
                    self.drop(m, reason, in_index);
                    if let Some(err) = self.icmp_error(snap, in_port, i, kind) {
                        self.counters.icmp_errors.add(1);
                        self.stage(in_port, err);
                    }
                }
                Action::Punt(punt) => {
                    let item = PuntItem {
                        mbuf: m,
                        in_port,
                        punt,
                        generation: snap.generation,
                    };
                    match self.shared.punt.packets.push(item) {
                        Ok(()) => self.counters.punts.add(1),
                        Err(item) => self.drop(item.mbuf, DropReason::PuntFull, in_index),
                    }
                }
                Action::Handoff { worker } => {
                    let item = HandoffItem { mbuf: m, in_port };
                    match self
                        .shared
                        .handoff
                        .get(usize::from(worker))
                        .map(|q| q.push(item))
                    {
                        Some(Ok(())) => self.counters.handoffs.add(1),
                        Some(Err(item)) => self.drop(item.mbuf, DropReason::HandoffFull, in_index),
                        None => {}
                    }
                }
                Action::Drop(reason) => self.drop(m, reason, in_index),
                Action::Switch { port, vlan, untag } => {
                    let mut m = m;
                    if untag && !untag_mbuf(&mut m) {
                        self.drop(m, DropReason::Malformed, in_index);
                    } else if vlan != NO_VLAN && !tag_mbuf(&mut m, vlan) {
                        // No headroom for the tag.
                        self.drop(m, DropReason::TxFull, in_index);
                    } else {
                        self.counters.switched.add(1);
                        self.stage(port, m);
                    }
                }
                Action::Flood {
                    segment,
                    in_vlan,
                    untag,
                    acl,
                } => {
                    let policy = acl.then_some(i);
                    self.flood(snap, m, in_index, segment, in_vlan, untag, policy)
                }
            }
        }
        burst.clear_taken();
        if !self.drops.is_empty() {
            self.drops.free_all();
        }
        self.flush(Some(in_index))
    }

    /// Floods frame `m` of `segment`, received on port `in_index` with VLAN `in_vlan`
    /// (its tag removed first when `untag`), to every other member of the segment: a
    /// copy for each but the last, which gets the original; each tagged as its member
    /// wants. A copy the pool has no mbuf for is dropped as `tx-full`. With `policy`
    /// (the frame's place in the burst), only to the members whose port's egress table
    /// permits it (the others counted as `acl-deny`).
    #[allow(clippy::too_many_arguments)]
    fn flood(
        &mut self,
        snap: &Snapshot,
        mut m: Mbuf,
        in_index: usize,
        segment: u16,
        in_vlan: u16,
        untag: bool,
        policy: Option<usize>,
    ) {
        if untag && !untag_mbuf(&mut m) {
            self.drop(m, DropReason::Malformed, in_index);
            return;
        }
        let from = Member {
            port: in_index as u16,
            vlan: in_vlan,
        };
        let sw = &*snap.switching;
        let len = m.pkt_len() as usize;
        let packet = policy.map(|i| (self.scratch.parsed[i], self.scratch.ct[i]));
        let permits = |port: u16| match &packet {
            None => (true, None),
            Some((parsed, mark)) => switch::flood_permits(snap, port, parsed, *mark, len),
        };
        let n = sw
            .flood_targets(segment, from)
            .filter(|t| permits(t.port).0)
            .count();
        for target in sw.flood_targets(segment, from) {
            let (permitted, hit) = permits(target.port);
            if let Some(hit) = hit {
                self.counters.acl.hit(hit.slot, u64::from(hit.bytes));
            }
            if !permitted {
                self.counters.drop_packets(DropReason::AclDeny, in_index, 1);
            }
        }
        if n == 0 {
            let reason = if policy.is_some() && sw.flood_targets(segment, from).next().is_some() {
                DropReason::AclDeny
            } else {
                DropReason::SwitchNoOutput
            };
            self.drop(m, reason, in_index);
            return;
        }
        self.counters.flooded.add(1);
        let mut original = Some(m);
        let targets = sw
            .flood_targets(segment, from)
            .filter(|t| permits(t.port).0);
        for (k, target) in targets.enumerate() {
            let copy = if k + 1 == n {
                original.take()
            } else {
                original.as_ref().and_then(|o| o.copy(self.pool))
            };
            let Some(mut c) = copy else {
                self.counters.drop_packets(DropReason::TxFull, in_index, 1);
                continue;
            };
            if target.vlan != NO_VLAN && !tag_mbuf(&mut c, target.vlan) {
                self.drop(c, DropReason::TxFull, in_index);
                continue;
            }
            self.counters.flood_copies.add(1);
            self.stage(target.port, c);
        }
    }

    /// Sends what the control thread queued (at most a burst's worth per round).
    fn inject(&mut self) -> u64 {
        for _ in 0..MAX_BURST {
            let Some(item) = self.shared.inject.pop() else {
                break;
            };
            self.stage(item.port, item.mbuf);
        }
        self.flush(None)
    }

    /// The ICMP error for packet `i` — built from the still-held copy in `drops`.
    fn icmp_error(
        &mut self,
        snap: &Snapshot,
        in_port: u16,
        _i: usize,
        kind: pipeline::IcmpErrorKind,
    ) -> Option<Mbuf> {
        let port = snap.ports.get(usize::from(in_port))?;
        if self.icmp_sent >= ICMP_ERRORS_PER_SECOND {
            // Only now look at the clock: the rate limit costs nothing below it.
            let now = std::time::Instant::now();
            if now.duration_since(self.icmp_window).as_secs() < 1 {
                return None;
            }
            self.icmp_window = now;
            self.icmp_sent = 0;
        }
        self.icmp_sent += 1;
        // The original was just moved to the drop burst; it is its last packet.
        let last = self.drops.len().checked_sub(1)?;
        let original = self.drops.data(last);
        let parsed = pipeline::parse(original, port.network).ok()?;
        let mut m = Mbuf::alloc(self.pool)?;
        let room = icmp_error::MAX_ERROR_FRAME.min(usize::from(m.tailroom()));
        let buf = m.append(room)?;
        let len = icmp_error::build(port, &parsed, original, kind, buf)?;
        m.trim(room - len).then_some(m)
    }

    #[inline(always)]
    fn drop(&mut self, m: Mbuf, reason: DropReason, rx_index: usize) {
        self.counters.drop_packets(reason, rx_index, 1);
        if let Err(m) = self.drops.push(m) {
            drop(m); // the drop burst is as large as a receive burst; cannot happen
        }
    }

    #[inline(always)]
    fn stage(&mut self, port: u16, m: Mbuf) {
        let idx = usize::from(port);
        let Some(out) = self.out.get_mut(idx) else {
            return;
        };
        if out.is_empty() {
            self.touched[self.n_touched] = port;
            self.n_touched += 1;
        }
        if let Err(m) = out.push(m) {
            drop(m);
        }
    }

    /// Transmits every staged burst on the worker's own queue of each port. Packets the
    /// output cannot take are dropped and counted against the port they were received
    /// on (`rx_index`), or the output port for packets the control thread injected.
    fn flush(&mut self, rx_index: Option<usize>) -> u64 {
        let mut sent_total = 0u64;
        for k in 0..self.n_touched {
            let idx = usize::from(self.touched[k]);
            let out = &mut self.out[idx];
            let txc = &self.counters.ports[idx];
            let drop_port = rx_index.unwrap_or(idx);
            if !self.shared.link_up(idx) {
                self.counters
                    .drop_packets(DropReason::PortDown, drop_port, out.len() as u64);
                out.free_all();
                continue;
            }
            let bytes = out.total_bytes();
            let sent = self.shared.transmit(idx, self.plan.worker, out) as u64;
            let mut sent_bytes = bytes;
            if !out.is_empty() {
                sent_bytes -= out.total_bytes();
                self.counters
                    .drop_packets(DropReason::TxFull, drop_port, out.len() as u64);
                out.free_all();
            }
            txc.tx_packets.add(sent);
            txc.tx_bytes.add(sent_bytes);
            sent_total += sent;
        }
        self.n_touched = 0;
        sent_total
    }
}

/// Removes a frame's 802.1Q tag (the switch stage checked it has one). False when the
/// first segment is too short.
#[inline]
fn untag_mbuf(m: &mut Mbuf) -> bool {
    if m.as_ref().len() < 14 + TAG_LEN {
        return false;
    }
    switching::untag_in_place(m.as_mut());
    m.adj(TAG_LEN)
}

/// Adds an 802.1Q tag with VLAN `vid` to an untagged frame. False when the mbuf has too
/// little headroom.
#[inline]
fn tag_mbuf(m: &mut Mbuf, vid: u16) -> bool {
    if m.as_ref().len() < 12 || m.prepend(TAG_LEN).is_none() {
        return false;
    }
    switching::tag_in_place(m.as_mut(), vid);
    true
}

/// Copies packet `i` as received, before the pipeline rewrites it.
fn capture_start(burst: &Burst, i: usize, in_port: u16, snap: &Snapshot) -> TraceCapture {
    let data = burst.data(i);
    let caplen = data.len().min(TRACE_SNAPLEN);
    let mut cap = TraceCapture {
        in_port,
        time_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        len: burst.pkt_len(i),
        caplen: caplen as u16,
        data: [0; TRACE_SNAPLEN],
        action: Action::Drop(DropReason::Malformed),
        generation: snap.generation,
    };
    cap.data[..caplen].copy_from_slice(&data[..caplen]);
    cap
}
