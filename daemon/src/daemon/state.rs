//! The forwarding state the control thread owns — the master FIB, the ACL state, the
//! neighbour resolver, the published generations, the workers' counters and the live
//! traces — and the request handlers that work on it alone. It needs no EAL: a test
//! builds one from a configuration ([`NodeState::for_tests`]) and calls the same
//! handlers `ferruled` serves; the [`super::Daemon`] adds ports, memory and workers.

use crate::acl::AclManager;
use crate::config::Config;
use crate::fib::Fib;
use crate::resolver::Resolver;
use ferrule_api::rpc::RpcError;
use ferrule_api::{self as api};
use ferrule_dataplane::counters::{PortTotals, WorkerCounters};
use ferrule_dataplane::punt::PuntQueues;
use ferrule_dataplane::snapshot::Snapshot;
use ferrule_dataplane::worker::{Shared, WorkerPlan};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A worker: what it polls and the counters it bumps.
pub(crate) struct WorkerRuntime {
    pub(crate) plan: WorkerPlan,
    pub(crate) counters: Arc<WorkerCounters>,
}

/// The control thread's forwarding state and the handlers of `route.*`, `neigh.*`,
/// `acl.*`, `vpc.*`, `trace.*`, `ct.*` and `nat.dump`.
pub struct NodeState {
    pub(crate) shared: Arc<Shared>,
    pub(crate) workers: Vec<WorkerRuntime>,
    pub(crate) fib: Fib,
    pub(crate) acl: AclManager,
    pub(crate) resolver: Resolver,
    /// Generations replaced but possibly still read by a worker; freed here once only
    /// this list holds them.
    retired: Vec<Arc<Snapshot>>,
    /// Drops and punts handled by the control thread itself.
    pub(crate) control_counters: WorkerCounters,
    pub(crate) traces: VecDeque<api::TracedPacket>,
    /// Learned neighbours are forgotten this long after their last answer...
    pub(crate) neighbor_max_age: Duration,
    /// ...and asked again (once a second) from this age on, so traffic to a live
    /// neighbour is never held for re-resolution.
    pub(crate) neighbor_refresh: Duration,
    pub(crate) last_aging: Instant,
    /// When each learned neighbour was last asked again (at most once a second).
    pub(crate) refreshed: HashMap<(u16, IpAddr), Instant>,
    /// The user-defined networks.
    pub(crate) udn: crate::networks::UdnState,
    /// The switched networks' MAC tables.
    pub(crate) fdb: crate::fdb::Fdb,
    /// FQDN policy: names, identities, the DNS proxy.
    pub(crate) fqdn: crate::fqdn::Fqdn,
}

impl NodeState {
    /// The state of a daemon whose forwarding state is `fib`, published through `shared`
    /// to the workers of `plans`.
    pub(crate) fn new(
        fib: Fib,
        shared: Arc<Shared>,
        plans: Vec<WorkerPlan>,
        neighbor_max_age: Duration,
        networks: &crate::config::NetworksSection,
        fqdn: &crate::config::FqdnSection,
    ) -> NodeState {
        let acl = AclManager::new(fib.acl_ports());
        NodeState {
            shared,
            workers: plans
                .into_iter()
                .map(|plan| WorkerRuntime {
                    plan,
                    counters: Arc::new(WorkerCounters::default()),
                })
                .collect(),
            fib,
            acl,
            resolver: Resolver::default(),
            retired: Vec::new(),
            control_counters: WorkerCounters::default(),
            traces: VecDeque::new(),
            neighbor_max_age,
            neighbor_refresh: neighbor_max_age * 4 / 5,
            last_aging: Instant::now(),
            refreshed: HashMap::new(),
            udn: crate::networks::UdnState::new(networks),
            fdb: crate::fdb::Fdb::new(
                Duration::from_secs(u64::from(networks.mac_ageing_s)),
                crate::fdb::DEFAULT_CAPACITY,
                Instant::now(),
            ),
            fqdn: crate::fqdn::Fqdn::new(fqdn.clone()),
        }
    }

    /// Rebuilds the switched networks' segments after networks or ports changed (the
    /// next publication carries them).
    pub(crate) fn sync_segments(&mut self) {
        let segments = self.udn.segments(&self.fib);
        self.fdb.set_segments(segments, self.fib.ports());
        self.fib.set_switching(Arc::new(self.fdb.switching()));
    }

    /// Takes in the MACs the workers learned and ages the tables; publishes when they
    /// changed. Called at every tick.
    pub(crate) fn learn_and_age_macs(&mut self) {
        if self.fdb.segments().is_empty() {
            return;
        }
        let now = Instant::now();
        let shared = Arc::clone(&self.shared);
        let learned = self
            .fdb
            .learn_all(std::iter::from_fn(|| shared.pop_fdb_learn()), now);
        if learned | self.fdb.age(now) {
            self.fib.set_switching(Arc::new(self.fdb.switching()));
            self.publish();
        }
    }

    /// The state `ferruled` would start with on `cfg`, without the EAL: every configured
    /// port present with a zero MAC and its index as DPDK port id, one worker that never
    /// runs (so `ct.*` questions time out). For tests of the request handlers.
    pub fn for_tests(cfg: &Config) -> Result<NodeState, crate::fib::FibError> {
        let n = cfg.ports.len();
        let ids: Vec<u16> = (0..n as u16).collect();
        let mut fib = Fib::from_config(cfg, &vec![[0u8; 6]; n], &ids)?;
        let shared = Arc::new(Shared::new(
            fib.snapshot(),
            PuntQueues::new(super::PUNT_QUEUE, super::TRACE_QUEUE),
            1,
        ));
        let plans = super::plan_workers(cfg, &[1], &ids);
        Ok(NodeState::new(
            fib,
            shared,
            plans,
            Duration::from_secs(u64::from(cfg.dataplane.neighbor_max_age_s)),
            &cfg.udn,
            &cfg.fqdn,
        ))
    }

    /// Answers `method` if it is one of the state's; `None` for the daemon's own.
    pub fn call(&mut self, method: &str, params: &Value) -> Option<Result<Value, RpcError>> {
        Some(match method {
            api::route_method::ADD => self.route_add(params),
            api::route_method::DEL => self.route_del(params),
            api::route_method::DUMP => self.route_dump(params),
            api::neigh_method::ADD => self.neigh_add(params),
            api::neigh_method::DEL => self.neigh_del(params),
            api::neigh_method::DUMP => self.neigh_dump(params),
            api::trace_method::RUN => self.trace_run(params),
            api::trace_method::START => self.trace_start(params),
            api::trace_method::DUMP => self.trace_dump(params),
            api::acl_method::APPLY => self.acl_apply(params),
            api::acl_method::DUMP => self.acl_dump(params),
            api::acl_method::CLEAR_COUNTERS => self.acl_clear(params),
            api::vpc_method::SYNC => self.vpc_sync(params),
            api::vpc_method::SHOW => self.vpc_show(params),
            api::ct_method::DUMP => self.ct_dump(params),
            api::ct_method::FLUSH => self.ct_flush(params),
            api::ct_method::STATS => self.ct_stats(params),
            api::nat_method::DUMP => self.nat_dump(params),
            api::network_method::APPLY => self.network_apply(params),
            api::network_method::DEL => self.network_del(params),
            api::network_method::LIST => self.network_list(params),
            api::network_method::LOOKUP => self.network_lookup(params),
            api::network_method::FDB => self.network_fdb(params),
            api::fqdn_method::CACHE => self.fqdn_cache(params),
            api::fqdn_method::IDENTITIES => self.fqdn_identities(params),
            api::fqdn_method::SELECTORS => self.fqdn_selectors(params),
            _ => return None,
        })
    }

    /// The master forwarding state.
    pub fn fib(&self) -> &Fib {
        &self.fib
    }

    /// The master forwarding state, to change directly (as the punt path does when it
    /// learns a neighbour); [`NodeState::publish`] makes a change visible to the workers.
    pub fn fib_mut(&mut self) -> &mut Fib {
        &mut self.fib
    }

    /// Compiles the forwarding state into a new generation and publishes it. The
    /// replaced generation is kept until no worker can still be reading it.
    pub fn publish(&mut self) {
        let old = self.shared.snapshot.swap(Arc::new(self.fib.snapshot()));
        self.retired.push(old);
        self.free_retired();
    }

    /// Frees replaced generations no worker holds any more.
    pub(crate) fn free_retired(&mut self) {
        self.retired.retain(|s| Arc::strong_count(s) > 1);
        self.acl.reclaim();
    }

    /// The current generation.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.snapshot.load_full()
    }

    /// Port `index`'s counters summed over the workers and the control thread.
    pub(crate) fn port_totals(&self, index: usize) -> PortTotals {
        let mut t = PortTotals::default();
        for w in &self.workers {
            t.accumulate(&w.counters.ports[index]);
        }
        t.accumulate(&self.control_counters.ports[index]);
        t
    }
}
