//! The daemon: brings up the EAL, the mempool and the configured ports, assigns receive
//! queues to workers and launches them, answers the control API, publishes forwarding
//! snapshots, and tears everything down in order (workers, ports, memory, EAL) when it
//! ends. The forwarding state and the methods that need no EAL (route, neighbour, ACL,
//! VPC, conntrack, trace) are [`NodeState`]'s (`state.rs`, handlers in the submodules);
//! the [`Daemon`] adds the ports (`port.*`, `ports.list`), memory, stats and the EAL.

mod acl;
mod ct;
mod devices;
mod fqdn;
mod networks;
mod ports;
mod punt;
mod routes;
mod state;
mod trace;
mod vpc;

pub use state::NodeState;

use crate::config::{format_mac, Config, PortConfig};
use crate::fib::Fib;
use ferrule_api::rpc::{Reply, RpcError, Service};
use ferrule_api::{self as api, PortsList, Stats, VersionInfo};
use ferrule_dataplane::counters::PortTotals;
use ferrule_dataplane::dpdk::{
    self, ethdev, lcore, DpdkError, Eal, EalConfig, EthPort, Mempool, PortConf,
};
use ferrule_dataplane::punt::PuntQueues;
use ferrule_dataplane::snapshot::Snapshot;
use ferrule_dataplane::worker::{self, RxJob, Shared, TxTarget, WorkerPlan};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Packets the workers may have queued for the control thread.
const PUNT_QUEUE: usize = 4096;
/// Live-trace captures queued.
const TRACE_QUEUE: usize = 1024;
/// Captured packets kept for `trace.dump`.
const TRACE_KEEP: usize = 1000;

/// Whether devargs name a PCI device rather than a vdev.
pub fn is_pci(devargs: &str) -> bool {
    ethdev::is_pci_address(devargs)
}

/// Why the daemon could not start. Each says what failed and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "cannot start the DPDK EAL: {0}\n  hint: run as root; reserve hugepages with \
         scripts/setup.sh (or set eal.hugepages = false / pass --no-huge); make sure \
         eal.lcores lists cores this machine has and eal.file_prefix is not used by \
         another DPDK process"
    )]
    Eal(DpdkError),
    #[error("cannot create the mbuf pool ({mbufs} mbufs): {err}\n  hint: raise eal.memory_mb or lower dataplane.mbufs")]
    Mempool { mbufs: u32, err: DpdkError },
    #[error("the forwarding state of the configuration is invalid: `{field}`: {message}")]
    Fib {
        field: &'static str,
        message: String,
    },
    #[error("port {name:?} ({devargs}) failed to start: {err}")]
    Port {
        name: String,
        devargs: String,
        err: DpdkError,
    },
    #[error("cannot launch worker {worker} on lcore {lcore}: {err}")]
    Launch {
        worker: usize,
        lcore: u32,
        err: DpdkError,
    },
    #[error(
        "{0}\n  hint: fix or remove the file, or start with --discard-state to move it \
         aside and start without the run-time state it held"
    )]
    State(crate::persist::StateError),
}

/// How `Daemon::start_with` treats the state file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// An unreadable state file is moved aside instead of refusing to start.
    pub discard_state: bool,
}

struct PortRuntime {
    cfg: PortConfig,
    eth: EthPort,
    link_up: bool,
    /// Counters the port's slot had when it was added (slots are reused).
    baseline: PortTotals,
    /// For vhost-user ports added at run time: the socket and the mode.
    vhost: Option<(std::path::PathBuf, devices::VhostMode)>,
}

/// A running daemon. Dropping it stops the workers, then the ports, then frees the
/// memory and cleans up the EAL (field order matters: ports, pool, eal).
pub struct Daemon {
    /// The forwarding state and the handlers that need no EAL.
    state: NodeState,
    launched: bool,
    link_poll: Duration,
    last_link_poll: Instant,
    /// By port index; `None` for a slot whose port was removed.
    ports: Vec<Option<PortRuntime>>,
    /// `[dataplane]`, for ports added at run time.
    dataplane: crate::config::DataplaneSection,
    /// What `port.add` may open (`[control]`).
    devices: devices::DevicePolicy,
    /// The run-time state kept across restarts, and its file (`[state] path`).
    saved: crate::persist::SavedState,
    state_file: Option<crate::persist::StateFile>,
    /// The Prometheus endpoint (`[metrics] listen`), polled at each tick.
    metrics: Option<crate::metrics::MetricsServer>,
    pool: Arc<Mempool>,
    eal: Eal,
    started: Instant,
}

/// The EAL settings for a configuration: vdev ports are hot-plugged after start-up, so
/// only PCI ports go on the allow-list (and none means `--no-pci`). A `virtio_user`
/// port shares Ferrule's memory with its vhost-user backend, which needs
/// `--single-file-segments`; it is added when such a port is configured.
pub fn eal_config(cfg: &Config) -> EalConfig {
    let mut extra_args = cfg.eal.extra_args.clone();
    let shares_memory = cfg
        .ports
        .iter()
        .any(|p| ethdev::devargs_name(&p.devargs).starts_with("virtio_user"));
    if shares_memory && !extra_args.iter().any(|a| a == "--single-file-segments") {
        extra_args.push("--single-file-segments".into());
    }
    EalConfig {
        lcores: cfg.eal.lcores.clone(),
        cpus: cfg.eal.cpus.clone(),
        memory_mb: cfg.eal.memory_mb,
        hugepages: cfg.eal.hugepages,
        in_memory: cfg.eal.in_memory,
        file_prefix: cfg.eal.file_prefix.clone(),
        pci_allow: cfg
            .ports
            .iter()
            .filter(|p| is_pci(&p.devargs))
            .map(|p| p.devargs.clone())
            .collect(),
        vdevs: Vec::new(),
        log_level: cfg.eal.log_level.clone(),
        telemetry: cfg.eal.telemetry,
        extra_args,
    }
}

/// Bytes of buffer per mbuf: the default (2048 + headroom), or enough for the largest
/// configured MTU plus Ethernet header, two VLAN tags and FCS, so that every frame a
/// port may receive fits one segment.
pub fn mbuf_data_room(cfg: &Config) -> u16 {
    const L2_OVERHEAD: u32 = 14 + 8 + 4;
    let max_mtu = cfg
        .ports
        .iter()
        .map(|p| u32::from(p.mtu))
        .max()
        .unwrap_or(1500);
    let need = dpdk::mempool::HEADROOM + max_mtu + L2_OVERHEAD;
    let room = need.max(u32::from(dpdk::mempool::DEFAULT_DATA_ROOM));
    // Round up to a cache line; MTU is validated ≤ 9600, so this fits in u16.
    u16::try_from(room.div_ceil(64) * 64).unwrap_or(u16::MAX)
}

/// Probes (hot-plugs) a port's device, configures one receive queue per configured
/// queue and one transmit queue per worker (fewer when the device has fewer), and
/// starts it.
fn start_port(
    p: &PortConfig,
    n_workers: u16,
    dp: &crate::config::DataplaneSection,
    pool: &Mempool,
) -> Result<EthPort, DpdkError> {
    let mut eth = EthPort::probe(&p.devargs)?;
    // One transmit queue per worker (the control thread sends through worker 0); a
    // device with fewer has its queues shared by the workers (see `Shared`).
    let (_, max_txq) = eth.max_queues();
    let tx_queues = n_workers.min(max_txq.max(1));
    let conf = PortConf {
        rx_queues: p.rx_queues,
        tx_queues,
        rx_desc: dp.rx_desc,
        tx_desc: dp.tx_desc,
        mtu: Some(p.mtu),
        mac: p.mac,
        promiscuous: true,
    };
    eth.configure(&conf, pool)?;
    eth.start()?;
    let link = eth.link();
    tracing::info!(
        port = %p.name, devargs = %p.devargs, role = %p.role, id = eth.id(),
        driver = %eth.driver(), mac = %format_mac(&eth.mac()), link_up = link.up,
        "port started"
    );
    Ok(eth)
}

/// Spreads every port's receive queues over the workers, round-robin in configuration
/// order. Each worker transmits on its own queue (its index) of every port.
pub fn plan_workers(cfg: &Config, worker_lcores: &[u32], port_ids: &[u16]) -> Vec<WorkerPlan> {
    let mut plans: Vec<WorkerPlan> = worker_lcores
        .iter()
        .enumerate()
        .map(|(worker, &lcore)| WorkerPlan {
            worker,
            lcore,
            burst_size: cfg.dataplane.burst_size,
            workers: worker_lcores.len().max(1) as u16,
            ct: cfg.ct.table,
            ct_recheck: cfg.ct.policy_recheck,
            idle_sleep_us: cfg.dataplane.idle_sleep_us,
            jobs: Vec::new(),
        })
        .collect();
    if plans.is_empty() {
        return plans;
    }
    let index_of = |name: &str| cfg.ports.iter().position(|p| p.name == name);
    let mut next = 0usize;
    for (index, port) in cfg.ports.iter().enumerate() {
        for queue in 0..port.rx_queues {
            let w = next % plans.len();
            next += 1;
            let out = port
                .xconnect
                .as_deref()
                .and_then(index_of)
                .map(|o| TxTarget {
                    port: port_ids[o],
                    queue: w as u16,
                    index: o,
                });
            plans[w].jobs.push(RxJob {
                port: port_ids[index],
                queue,
                index,
                out,
            });
        }
    }
    plans
}

impl Daemon {
    /// Starts the EAL, creates the pool, brings up every port and launches the workers.
    pub fn start(cfg: &Config) -> Result<Daemon, StartError> {
        Daemon::start_with(cfg, StartOptions::default())
    }

    /// As [`Daemon::start`]; with `[state] path` set, the run-time state saved there is
    /// restored before the workers start polling.
    pub fn start_with(cfg: &Config, options: StartOptions) -> Result<Daemon, StartError> {
        let eal = Eal::init(&eal_config(cfg), "ferruled").map_err(StartError::Eal)?;
        tracing::info!(dpdk = %dpdk::version(), args = ?eal.args(), "EAL started");
        let pool = Mempool::new(
            "ferrule_mbufs",
            cfg.dataplane.mbufs,
            cfg.dataplane.mbuf_cache,
            mbuf_data_room(cfg),
        )
        .map(Arc::new)
        .map_err(|err| StartError::Mempool {
            mbufs: cfg.dataplane.mbufs,
            err,
        })?;

        // Mbufs the receive rings keep filled, plus what the punt, hold and inject
        // queues may hold at once: fewer than that and receive can run dry under a
        // resolution storm.
        let rx_held: u32 = cfg
            .ports
            .iter()
            .map(|p| u32::from(p.rx_queues) * u32::from(cfg.dataplane.rx_desc))
            .sum();
        let queued = (PUNT_QUEUE + crate::resolver::MAX_HELD_TOTAL + 1024) as u32;
        if cfg.dataplane.mbufs < rx_held + queued {
            tracing::warn!(
                mbufs = cfg.dataplane.mbufs,
                needed = rx_held + queued,
                "dataplane.mbufs is below what receive rings and control queues may hold at once"
            );
        }
        let worker_lcores = lcore::worker_lcores();
        let n_workers = worker_lcores.len().max(1) as u16;
        match crate::vpc::check_port_shares(&cfg.snat.ports, n_workers) {
            Err(e) => {
                return Err(StartError::Fib {
                    field: "vpc.snat_ports",
                    message: e.message,
                })
            }
            Ok(least) if least < crate::vpc::SHARE_WARN => tracing::warn!(
                workers = n_workers,
                ports_per_worker = least,
                "vpc.snat_ports gives some workers fewer than {} ports",
                crate::vpc::SHARE_WARN
            ),
            Ok(_) => {}
        }
        let mut ports = Vec::with_capacity(cfg.ports.len());
        for p in &cfg.ports {
            let eth = start_port(p, n_workers, &cfg.dataplane, &pool).map_err(|err| {
                StartError::Port {
                    name: p.name.clone(),
                    devargs: p.devargs.clone(),
                    err,
                }
            })?;
            let link = eth.link();
            ports.push(PortRuntime {
                cfg: p.clone(),
                link_up: link.up,
                eth,
                baseline: PortTotals::default(),
                vhost: None,
            });
        }

        let port_ids: Vec<u16> = ports.iter().map(|p| p.eth.id()).collect();
        let macs: Vec<[u8; 6]> = ports.iter().map(|p| p.eth.mac()).collect();
        let mut fib = Fib::from_config(cfg, &macs, &port_ids).map_err(|e| StartError::Fib {
            field: e.field,
            message: e.message,
        })?;
        let shared = Arc::new(
            Shared::new(
                fib.snapshot(),
                PuntQueues::new(PUNT_QUEUE, TRACE_QUEUE),
                worker_lcores.len(),
            )
            .with_ct_budget(cfg.ct.budget(n_workers)),
        );
        for (i, p) in ports.iter().enumerate() {
            shared.set_link(i, p.link_up);
            shared.set_dpdk_id(i, p.eth.id());
            shared.set_tx_queues(i, p.eth.tx_queues(), worker_lcores.len().max(1));
        }
        let plans = plan_workers(cfg, &worker_lcores, &port_ids);
        // The control thread owns the job table from now on (ports come and go).
        shared.set_jobs(plans.iter().map(|p| p.jobs.clone()).collect());
        let state = NodeState::new(
            fib,
            shared,
            plans,
            Duration::from_secs(u64::from(cfg.dataplane.neighbor_max_age_s)),
            &cfg.udn,
            &cfg.fqdn,
        );
        let mut daemon = Daemon {
            state,
            launched: false,
            link_poll: Duration::from_millis(cfg.dataplane.link_poll_ms),
            last_link_poll: Instant::now(),
            ports: ports.into_iter().map(Some).collect(),
            dataplane: cfg.dataplane.clone(),
            devices: devices::DevicePolicy::from_control(&cfg.control),
            saved: crate::persist::SavedState::default(),
            state_file: None,
            metrics: cfg.metrics.and_then(|addr| {
                match crate::metrics::MetricsServer::bind(addr) {
                    Ok(m) => {
                        tracing::info!(listen = %addr, "metrics at http://{addr}/metrics");
                        Some(m)
                    }
                    Err(e) => {
                        tracing::error!(listen = %addr, error = %e, "metrics endpoint not started: cannot listen (another ferruled? set [metrics] listen)");
                        None
                    }
                }
            }),
            pool,
            eal,
            started: Instant::now(),
        };
        if let Some(path) = &cfg.state {
            daemon.restore(crate::persist::StateFile::new(path), options)?;
        }
        daemon.launch()?;
        Ok(daemon)
    }

    /// Replays the saved run-time state (ports, routes, neighbours, VPC, ACL); a change
    /// that no longer applies (a pod's veth gone while the daemon was down) is logged
    /// and, for a port, dropped from the state.
    fn restore(
        &mut self,
        file: crate::persist::StateFile,
        options: StartOptions,
    ) -> Result<(), StartError> {
        let loaded = match file.load() {
            Ok(s) => s,
            Err(e) if options.discard_state => {
                let aside = file.discard().map_err(StartError::State)?;
                tracing::warn!(error = %e, moved_to = ?aside, "state file discarded");
                file.load().map_err(StartError::State)?
            }
            Err(e) => return Err(StartError::State(e)),
        };
        let mut kept = loaded.clone();
        let mut failed = 0usize;
        for (method, params) in loaded.replay() {
            if let Err(e) = self.dispatch(method, &params) {
                failed += 1;
                tracing::warn!(method, error = %e, "saved change not restored");
                if method == api::port_method::ADD {
                    if let Some(name) = params.get("name").and_then(Value::as_str) {
                        kept.ports.retain(|p| p.name != name);
                    }
                }
            }
        }
        if !loaded.is_empty() {
            tracing::info!(
                file = %file.path().display(),
                ports = kept.ports.len(),
                routes = kept.routes.len(),
                neighbors = kept.neighbors.len(),
                acl = kept.acl.is_some(),
                vpc = kept.vpc.is_some(),
                networks = kept.networks.len(),
                failed,
                "run-time state restored"
            );
        }
        if kept != loaded {
            file.save(&kept).map_err(StartError::State)?;
        }
        self.saved = kept;
        self.state_file = Some(file);
        Ok(())
    }

    /// Keeps an accepted change in the state file.
    fn persist(&mut self, method: &str, params: &Value) {
        let Some(file) = &self.state_file else {
            return;
        };
        if self.saved.record(method, params) {
            if let Err(e) = file.save(&self.saved) {
                tracing::error!(error = %e, method, "the change is in force but not saved: a restart loses it");
            }
        }
    }

    fn launch(&mut self) -> Result<(), StartError> {
        self.launched = true;
        for w in &self.state.workers {
            let (plan, shared, counters) = (
                w.plan.clone(),
                Arc::clone(&self.state.shared),
                Arc::clone(&w.counters),
            );
            let pool = Arc::clone(&self.pool);
            let lcore = plan.lcore;
            let worker = plan.worker;
            lcore::launch(lcore, move || worker::run(&plan, &shared, &counters, &pool))
                .map_err(|err| StartError::Launch { worker, lcore, err })?;
        }
        self.started = Instant::now();
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        self.state.shared.set_started_ns(now_ns);
        Ok(())
    }

    /// Stops the workers and waits for them (idempotent; also done on drop).
    pub fn stop_workers(&mut self) {
        if self.launched {
            self.state.shared.stop();
            lcore::wait_all();
            self.launched = false;
            tracing::info!("workers stopped");
        }
    }

    /// Mbufs currently out of the pool (a leak check for shutdown).
    pub fn mbufs_in_use(&self) -> u32 {
        self.pool.in_use()
    }

    /// The EAL arguments in force.
    pub fn eal_args(&self) -> &[String] {
        self.eal.args()
    }

    fn port_counters(&self, index: usize) -> api::PortCounters {
        let Some(p) = self.ports.get(index).and_then(Option::as_ref) else {
            return api::PortCounters::default();
        };
        let t = self.state.port_totals(index).since(&p.baseline);
        let hw = p.eth.stats();
        api::PortCounters {
            rx_packets: t.rx_packets,
            rx_bytes: t.rx_bytes,
            tx_packets: t.tx_packets,
            tx_bytes: t.tx_bytes,
            drops: t.drops,
            hw_rx_missed: hw.imissed,
            hw_rx_errors: hw.ierrors,
            hw_tx_errors: hw.oerrors,
            hw_rx_nombuf: hw.rx_nombuf,
        }
    }

    /// `version`.
    pub fn version_info() -> VersionInfo {
        VersionInfo {
            api_version: api::API_VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: env!("FERRULE_GIT_COMMIT").to_string(),
            dpdk: dpdk::version().trim_start_matches("DPDK ").to_string(),
        }
    }

    /// `ports.list`.
    pub fn ports_list(&self) -> PortsList {
        let ports = self
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, p.as_ref()?)))
            .map(|(i, p)| self.port_info(i, p))
            .collect();
        PortsList { ports }
    }

    /// `stats.get`.
    pub fn stats(&self) -> Stats {
        let names: Vec<&str> = self
            .ports
            .iter()
            .map(|p| p.as_ref().map_or("", |p| p.cfg.name.as_str()))
            .collect();
        let jobs = self.state.shared.jobs();
        let mut totals = api::Totals::default();
        let mut reasons: Vec<(String, u64)> = Vec::new();
        let control = (
            self.state.workers.len() as u32,
            lcore::main_lcore(),
            vec!["control".to_string()],
            &self.state.control_counters,
        );
        let workers = self
            .state
            .workers
            .iter()
            .map(|w| {
                let queues = jobs
                    .get(w.plan.worker)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|j| format!("{}/{}", names.get(j.index).copied().unwrap_or("?"), j.queue))
                    .collect();
                (w.plan.worker as u32, w.plan.lcore, queues, &*w.counters)
            })
            .chain(std::iter::once(control))
            .map(|(worker, lcore, queues, c)| {
                let drop_reasons: Vec<api::DropCount> = c
                    .drop_reasons()
                    .map(|(r, n)| api::DropCount {
                        reason: r.name().to_string(),
                        packets: n,
                    })
                    .collect();
                for d in &drop_reasons {
                    match reasons.iter_mut().find(|(r, _)| *r == d.reason) {
                        Some((_, n)) => *n += d.packets,
                        None => reasons.push((d.reason.clone(), d.packets)),
                    }
                }
                let s = api::WorkerStats {
                    worker,
                    lcore,
                    queues,
                    polls: c.polls.get(),
                    busy_polls: c.busy_polls.get(),
                    rx_packets: c.rx_packets.get(),
                    tx_packets: c.tx_packets.get(),
                    local_replies: c.local_replies.get(),
                    icmp_errors: c.icmp_errors.get(),
                    punts: c.punts.get(),
                    handoffs: c.handoffs.get(),
                    switched: c.switched.get(),
                    flooded: c.flooded.get(),
                    flood_copies: c.flood_copies.get(),
                    drops: c.total_drops(),
                    drop_reasons,
                };
                totals.rx_packets += s.rx_packets;
                totals.tx_packets += s.tx_packets;
                totals.drops += s.drops;
                s
            })
            .collect();
        totals.drop_reasons = reasons
            .into_iter()
            .map(|(reason, packets)| api::DropCount { reason, packets })
            .collect();
        let ports = (0..self.ports.len())
            .filter(|&i| self.ports[i].is_some())
            .map(|i| api::PortStats {
                name: names[i].to_string(),
                counters: self.port_counters(i),
            })
            .collect();
        Stats {
            uptime_secs: self.started.elapsed().as_secs_f64(),
            workers,
            ports,
            totals,
            mbufs: self.pool.size(),
            mbufs_in_use: self.pool.in_use(),
        }
    }

    /// Reads every port's link and publishes changes to the workers.
    pub fn poll_links(&mut self) {
        for (i, p) in self.ports.iter_mut().enumerate() {
            let Some(p) = p else { continue };
            let up = p.eth.link().up;
            if up != p.link_up {
                p.link_up = up;
                self.state.shared.set_link(i, up);
                tracing::info!(port = %p.cfg.name, "link {}", if up { "up" } else { "down" });
            }
        }
    }
}

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, RpcError> {
    serde_json::to_value(v).map_err(RpcError::internal)
}

/// Methods that take no params reject any they are given, naming the first one.
fn no_params(params: &Value) -> Result<(), RpcError> {
    match params {
        Value::Null => Ok(()),
        Value::Object(m) if m.is_empty() => Ok(()),
        Value::Array(a) if a.is_empty() => Ok(()),
        Value::Object(m) => {
            let field = m.keys().next().map(String::as_str).unwrap_or("params");
            Err(RpcError::invalid_params(
                field,
                "this method takes no params",
            ))
        }
        _ => Err(RpcError::invalid_params(
            "params",
            "this method takes no params",
        )),
    }
}

impl Service for Daemon {
    fn call(&mut self, method: &str, params: &Value) -> Result<Value, RpcError> {
        let out = self.dispatch(method, params);
        if let Ok(result) = &out {
            // A pod port whose addresses its network's IPAM handed out is kept with
            // them, so that a restart gives the pod the same ones.
            let ips = result
                .get("ips")
                .filter(|ips| ips.as_array().is_some_and(|a| !a.is_empty()));
            match (method, ips, params.get("ips")) {
                (api::port_method::ADD, Some(ips), None) => {
                    let mut kept = params.clone();
                    if let Some(o) = kept.as_object_mut() {
                        o.insert("ips".into(), ips.clone());
                    }
                    self.persist(method, &kept);
                }
                _ => self.persist(method, params),
            }
        }
        out
    }

    fn call_reply(&mut self, method: &str, params: &Value) -> Result<Reply, RpcError> {
        match method {
            // Written as it is sent: a dump of many rules is never held whole.
            api::acl_method::DUMP => self.state.acl_dump_stream(params).map(Reply::Stream),
            _ => self.call(method, params).map(Reply::Value),
        }
    }

    fn tick(&mut self) {
        self.tick_housekeeping();
    }
}

impl Daemon {
    fn dispatch(&mut self, method: &str, params: &Value) -> Result<Value, RpcError> {
        match method {
            api::method::VERSION => {
                no_params(params)?;
                to_value(Daemon::version_info())
            }
            api::method::PORTS_LIST => {
                no_params(params)?;
                to_value(self.ports_list())
            }
            api::method::STATS_GET => {
                no_params(params)?;
                to_value(self.stats())
            }
            api::port_method::ADD => self.port_add(params),
            api::port_method::DEL => self.port_del(params),
            other => self
                .state
                .call(other, params)
                .unwrap_or_else(|| Err(RpcError::method_not_found(other))),
        }
    }

    /// What one metrics scrape reports.
    fn node_metrics(&mut self) -> crate::metrics::NodeMetrics {
        let ct = self
            .state
            .call(api::ct_method::STATS, &Value::Null)
            .and_then(Result::ok)
            .and_then(|v| serde_json::from_value(v).ok());
        let counters: Vec<_> = self.state.workers.iter().map(|w| &w.counters.acl).collect();
        crate::metrics::NodeMetrics {
            stats: Some(self.stats()),
            ports: self.ports_list().ports,
            ct,
            acl_generation: self.state.acl.current().generation,
            acl: self.state.acl.table_counts(&counters),
            networks: self
                .state
                .call(api::network_method::LIST, &Value::Null)
                .and_then(Result::ok)
                .and_then(|v| serde_json::from_value::<api::network::NetworkList>(v).ok())
                .map(|l| l.networks)
                .unwrap_or_default(),
            fqdn: crate::metrics::FqdnMetrics {
                proxy: self.state.fqdn.proxy_counters(),
                breaker: self.state.fqdn.state().counters(),
                names: self.state.fqdn.state().name_count(),
                identities: self.state.fqdn.state().identity_count(),
                pending: self.state.fqdn.pending(),
            },
        }
    }

    fn tick_housekeeping(&mut self) {
        if let Some(mut m) = self.metrics.take() {
            m.poll(|| self.node_metrics());
            self.metrics = Some(m);
        }
        self.state.drain_punts(&self.pool);
        self.state.fqdn_tick(&self.pool);
        self.state.resolve_due(&self.pool);
        self.state.learn_and_age_macs();
        let now = Instant::now();
        if now.duration_since(self.last_link_poll) >= self.link_poll {
            self.last_link_poll = now;
            self.poll_links();
        }
        let state = &mut self.state;
        if now.duration_since(state.last_aging) >= Duration::from_millis(100) {
            state.last_aging = now;
            state.refresh_neighbors(state.neighbor_refresh, &self.pool);
            if state.fib.age_neighbors(state.neighbor_max_age) > 0 {
                state.publish();
            }
        }
        state.free_retired();
    }
}

impl Daemon {
    /// The current generation.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.state.snapshot()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop_workers();
        for p in self.ports.iter_mut().flatten() {
            if let Err(e) = p.eth.stop() {
                tracing::warn!(port = %p.cfg.name, error = %e, "stopping port");
            }
        }
        tracing::info!("ports stopped");
        // Fields drop next, in order: ports (closed), pool (freed), eal (cleaned up).
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra_lcores: &[u32], ports: &str) -> Config {
        let l: Vec<String> = extra_lcores.iter().map(u32::to_string).collect();
        Config::parse(
            &format!("[eal]\nlcores = [0, {}]\n{ports}", l.join(", ")),
            "t",
        )
        .expect("valid")
    }

    const PORTS: &str = r#"
[[port]]
name = "a"
devargs = "net_null0"
role = "pod"
rx_queues = 2
xconnect = "b"
[[port]]
name = "b"
devargs = "net_null1"
role = "uplink"
[[port]]
name = "c"
devargs = "0000:01:00.0"
role = "host"
xconnect = "a"
"#;

    #[test]
    fn queues_are_spread_round_robin_and_tx_queue_is_the_worker() {
        let c = cfg(&[1, 2], PORTS);
        let plans = plan_workers(&c, &[1, 2], &[10, 11, 12]);
        assert_eq!(plans.len(), 2);
        // a/0 -> w0, a/1 -> w1, b/0 -> w0, c/0 -> w1
        let q = |w: usize| {
            plans[w]
                .jobs
                .iter()
                .map(|j| (j.port, j.queue))
                .collect::<Vec<_>>()
        };
        assert_eq!(q(0), vec![(10, 0), (11, 0)]);
        assert_eq!(q(1), vec![(10, 1), (12, 0)]);
        assert_eq!(
            plans[0].jobs[0].out,
            Some(TxTarget {
                port: 11,
                queue: 0,
                index: 1
            })
        );
        assert_eq!(
            plans[1].jobs[0].out,
            Some(TxTarget {
                port: 11,
                queue: 1,
                index: 1
            })
        );
        assert_eq!(plans[0].jobs[1].out, None, "b has no cross-connect");
        assert_eq!(
            plans[1].jobs[1].out,
            Some(TxTarget {
                port: 10,
                queue: 1,
                index: 0
            })
        );
    }

    #[test]
    fn mbufs_hold_the_largest_frame() {
        let c = cfg(&[1], PORTS);
        assert_eq!(mbuf_data_room(&c), dpdk::mempool::DEFAULT_DATA_ROOM);
        let jumbo = cfg(
            &[1],
            &PORTS.replace("role = \"uplink\"", "role = \"uplink\"\nmtu = 9000"),
        );
        let room = u32::from(mbuf_data_room(&jumbo));
        assert!(
            room >= dpdk::mempool::HEADROOM + 9000 + 26 && room % 64 == 0,
            "{room}"
        );
    }

    #[test]
    fn virtio_user_ports_get_single_file_segments() {
        let c = cfg(
            &[1],
            &PORTS.replace("net_null1", "virtio_user0,path=/tmp/v.sock"),
        );
        assert!(eal_config(&c)
            .extra_args
            .contains(&"--single-file-segments".to_string()));
        assert!(!eal_config(&cfg(&[1], PORTS))
            .extra_args
            .iter()
            .any(|a| a == "--single-file-segments"));
    }

    #[test]
    fn only_pci_ports_are_allow_listed() {
        let c = cfg(&[1], PORTS);
        let e = eal_config(&c);
        assert_eq!(e.pci_allow, vec!["0000:01:00.0".to_string()]);
        let c2 = Config::embedded_default().expect("default");
        assert!(eal_config(&c2).args("x").contains(&"--no-pci".to_string()));
    }

    #[test]
    fn no_params_names_the_unexpected_field() {
        assert!(no_params(&Value::Null).is_ok());
        let e = no_params(&serde_json::json!({"verbose": true})).unwrap_err();
        assert_eq!(e.code, ferrule_api::rpc::INVALID_PARAMS);
        assert!(e.message.contains("verbose"));
    }
}
