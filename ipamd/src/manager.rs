//! The daemon's core: discovery of the node at start, the pool under its lock, the
//! reconcile loop that brings the pool to its thresholds with EC2 (one action at a
//! time, each confirmed by DescribeNetworkInterfaces before its addresses count), the
//! IPAM operations (add, del, show), the datastore checkpoints and the pushes of the
//! ENIs to ferruled.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrule_api::ipam::{
    IpState, IpamAdd, IpamAddress, IpamAllocation, IpamDel, IpamEni, IpamIp, IpamSettings,
    IpamState,
};
use ferrule_api::{VpcEni, VpcSync};
use tokio::sync::Notify;

use crate::config::Settings;
use crate::datastore::{self, Checkpoint, DatastoreError};
use crate::discovery::{self, DiscoveryError};
use crate::ec2::{Ec2, Ec2Error, Ec2Options, EniDesc};
use crate::metrics::Metrics;
use crate::pool::{Eni, Exhausted, PodKey, Pool};
use crate::warm::{self, Action, Blocked, Limits, Plan};
use crate::{cidr, limits};

/// Most EC2 actions one reconcile round takes.
const MAX_ACTIONS_PER_ROUND: usize = 8;

/// How often a round looks for this instance's leaked ENIs (sooner after a failed
/// attach).
const LEAK_CHECK_EVERY: Duration = Duration::from_secs(60);

/// Another instance's unattached ENI younger than this is left alone at start: its
/// daemon may be between CreateNetworkInterface and AttachNetworkInterface.
const FOREIGN_LEAK_GRACE_SECS: u64 = 300;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Discovery(#[from] Box<DiscoveryError>),
    #[error(transparent)]
    Datastore(#[from] DatastoreError),
    #[error(
        "instance type {0:?}: DescribeInstanceTypes gives no ENI limits and the built-in \
         table does not know it"
    )]
    UnknownLimits(String),
    #[error("instance {0}: no primary ENI (device index 0) attached")]
    NoPrimaryEni(String),
}

/// Why an IPAM request failed.
#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    #[error("`{0}` must not be empty")]
    Empty(&'static str),
    #[error("{0}")]
    NoFreeIp(String),
    #[error(transparent)]
    Datastore(#[from] DatastoreError),
}

/// The node as discovered at start.
#[derive(Debug, Clone)]
pub struct Node {
    pub instance_id: String,
    pub instance_type: String,
    pub vpc_id: String,
    /// Subnet and security groups of new ENIs.
    pub subnet_id: String,
    pub security_groups: Vec<String>,
    /// N after the --max-eni cap, and M.
    pub max_enis: u32,
    pub ips_per_eni: u32,
}

struct Inner {
    pool: Pool,
    vpc_cidrs: Vec<String>,
    subnet_cidrs: HashMap<String, String>,
    max_pod_ips: u32,
    blocked: Option<Blocked>,
    last_pushed: Option<VpcSync>,
    /// When the last leak check ran; whether an ENI may have been left unattached since.
    last_leak_check: Option<std::time::Instant>,
    leak_suspected: bool,
}

/// The running daemon.
pub struct Ipamd {
    settings: Settings,
    node: Node,
    ec2: Ec2,
    metrics: Arc<Metrics>,
    inner: Mutex<Inner>,
    reconciling: tokio::sync::Mutex<()>,
    wake: Notify,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Ipamd {
    /// Finds the instance and its ENIs, deletes leaked ENIs of the cluster, restores
    /// the datastore and reconciles it with EC2. EC2 errors are retried (with backoff)
    /// until EC2 answers: the daemon never gives up on them.
    pub async fn start(
        settings: Settings,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Ipamd>, StartError> {
        let (instance_id, region) =
            discovery::instance_and_region(settings.instance_id.clone(), settings.region.clone())
                .await
                .map_err(Box::new)?;
        let ec2 = Ec2::connect(
            Ec2Options {
                region,
                endpoint: settings.ec2_endpoint.clone(),
                static_credentials: settings.static_credentials.clone(),
                max_attempts: settings.ec2_attempts,
                backoff_base: settings.ec2_backoff,
                backoff_max: Duration::from_secs(20),
                attempt_timeout: settings.ec2_timeout,
            },
            metrics.clone(),
        )
        .await;
        let mut wait = settings.ec2_backoff.max(Duration::from_millis(100));
        let (node, vpc_cidrs) = loop {
            match discover(&ec2, &settings, &instance_id).await {
                Ok(Ok(found)) => break found,
                Ok(Err(fatal)) => return Err(fatal),
                Err(e) => {
                    tracing::error!("discovery: {e}; retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(30));
                }
            }
        };
        tracing::info!(
            instance = %node.instance_id, instance_type = %node.instance_type,
            max_enis = node.max_enis, ips_per_eni = node.ips_per_eni,
            subnet = %node.subnet_id, security_groups = ?node.security_groups,
            "discovered the node"
        );
        let pool = match datastore::load(&settings.datastore)? {
            Some(checkpoint) => {
                tracing::info!(
                    allocations = checkpoint.allocations.len(),
                    "restored the datastore {}",
                    settings.datastore.display()
                );
                checkpoint.into_pool()
            }
            None => Pool::default(),
        };
        let ipamd = Arc::new(Ipamd {
            settings,
            node,
            ec2,
            metrics,
            inner: Mutex::new(Inner {
                pool,
                vpc_cidrs,
                subnet_cidrs: HashMap::new(),
                max_pod_ips: 0,
                blocked: None,
                last_pushed: None,
                last_leak_check: None,
                leak_suspected: false,
            }),
            reconciling: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
        });
        // Leaked ENIs of the cluster (any instance's), then EC2's view of ours.
        loop {
            let cleaned = ipamd.delete_leaked(None).await;
            let refreshed = match cleaned {
                Ok(()) => ipamd.refresh().await,
                Err(e) => Err(e),
            };
            match refreshed {
                Ok(()) => break,
                Err(e) => {
                    tracing::error!("start-up reconciliation: {e}; retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(30));
                }
            }
        }
        {
            let inner = ipamd.lock();
            ipamd.checkpoint(&inner)?;
        }
        ipamd.update_metrics();
        Ok(ipamd)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the pool as it was between two
        // statements of pure code: keep going with it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn checkpoint(&self, inner: &Inner) -> Result<(), DatastoreError> {
        datastore::save(&self.settings.datastore, &Checkpoint::of(&inner.pool))
    }

    fn limits(&self, inner: &Inner) -> Limits {
        Limits {
            max_enis: self.node.max_enis,
            ips_per_eni: self.node.ips_per_eni,
            max_pod_ips: inner.max_pod_ips,
        }
    }

    /// Asks the reconcile loop for a round now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Reconciles every `--reconcile-interval` and whenever woken; never returns.
    pub async fn run(self: Arc<Self>) {
        loop {
            if let Err(e) = self.reconcile_once().await {
                tracing::warn!("reconcile: {e}; trying again at the next round");
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.reconcile_interval) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// One reconcile round: EC2's view of the ENIs, leaked ENIs of this instance
    /// deleted, then actions until the pool is within its thresholds (or blocked by the
    /// limits), then the push to ferruled.
    pub async fn reconcile_once(&self) -> Result<(), Ec2Error> {
        let _round = self.reconciling.lock().await;
        self.metrics.reconciles.inc();
        let result = self.reconcile_actions().await;
        self.push_if_changed().await;
        self.update_metrics();
        result
    }

    async fn reconcile_actions(&self) -> Result<(), Ec2Error> {
        self.refresh().await?;
        let leak_check_due = {
            let inner = self.lock();
            inner.leak_suspected
                || inner
                    .last_leak_check
                    .is_none_or(|t| t.elapsed() >= LEAK_CHECK_EVERY)
        };
        if leak_check_due {
            match self.delete_leaked(Some(&self.node.instance_id)).await {
                Ok(()) => {
                    let mut inner = self.lock();
                    inner.leak_suspected = false;
                    inner.last_leak_check = Some(std::time::Instant::now());
                }
                Err(e) => tracing::warn!("cleaning up leaked ENIs: {e}"),
            }
        }
        for _ in 0..MAX_ACTIONS_PER_ROUND {
            let plan = {
                let mut inner = self.lock();
                let now = now_ms();
                inner.pool.expire_cooling(now);
                let limits = self.limits(&inner);
                let plan = warm::plan(&inner.pool, &self.settings.targets, &limits, now);
                inner.blocked = match &plan {
                    Plan::Blocked(b) => Some(*b),
                    _ => None,
                };
                plan
            };
            match plan {
                Plan::Act(action) => {
                    tracing::info!(?action, "warm pool");
                    self.execute(action).await?;
                }
                Plan::Blocked(_) | Plan::Steady => break,
            }
        }
        Ok(())
    }

    /// Reads the instance's ENIs from EC2 into the pool: addresses count only once EC2
    /// reports them; allocations of addresses EC2 no longer has are dropped and logged.
    async fn refresh(&self) -> Result<(), Ec2Error> {
        let descs = self.ec2.instance_enis(&self.node.instance_id).await?;
        let subnet = self.ec2.describe_subnet(&self.node.subnet_id).await?;
        let mut unknown: Vec<String> = {
            let inner = self.lock();
            descs
                .iter()
                .map(|d| d.subnet_id.clone())
                .filter(|s| *s != self.node.subnet_id && !inner.subnet_cidrs.contains_key(s))
                .collect()
        };
        unknown.sort();
        unknown.dedup();
        let mut found = vec![(self.node.subnet_id.clone(), subnet.cidr.clone())];
        for subnet_id in unknown {
            let desc = self.ec2.describe_subnet(&subnet_id).await?;
            found.push((subnet_id, desc.cidr));
        }
        let enis: Vec<Eni> = descs.iter().filter_map(attached_eni).collect();
        let mut inner = self.lock();
        inner.subnet_cidrs.extend(found);
        let dropped = inner.pool.set_enis(enis);
        let held = inner.pool.stats(now_ms()).total;
        inner.max_pod_ips = limits::max_pod_ips(
            self.node.max_enis,
            self.node.ips_per_eni,
            subnet.available_ips,
            held,
        );
        if !dropped.is_empty() {
            for a in &dropped {
                tracing::warn!(
                    pod = %format!("{}/{}", a.pod_namespace, a.pod_name),
                    container = %a.container_id, ifname = %a.ifname, ip = %a.ip, eni = %a.eni_id,
                    "EC2 no longer has this pod's address: entry dropped"
                );
                self.metrics.dropped_allocations.inc();
            }
            if let Err(e) = self.checkpoint(&inner) {
                tracing::error!("{e}");
            }
        }
        Ok(())
    }

    /// Deletes the cluster's ENIs that are attached nowhere: this instance's only, if
    /// `instance_id` is given; else every instance's, except another instance's ENI
    /// created less than 5 minutes ago (its daemon may be about to attach it).
    async fn delete_leaked(&self, instance_id: Option<&str>) -> Result<(), Ec2Error> {
        let now_secs = now_ms() / 1000;
        for eni in self
            .ec2
            .leaked_enis(&self.settings.cluster, instance_id)
            .await?
        {
            let ours = eni.tag(crate::ec2::INSTANCE_TAG) == Some(self.node.instance_id.as_str());
            let young = eni
                .tag(crate::ec2::CREATED_TAG)
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|created| now_secs.saturating_sub(created) < FOREIGN_LEAK_GRACE_SECS);
            if !ours && young {
                tracing::info!(eni = %eni.id, "an unattached ENI of another instance, created moments ago: left alone");
                continue;
            }
            tracing::warn!(eni = %eni.id, "deleting an unattached ENI of cluster {}", self.settings.cluster);
            self.ec2.delete_eni(&eni.id).await?;
        }
        Ok(())
    }

    /// Polls EC2 until `eni_id`'s description satisfies `done` (`None`: EC2 no longer
    /// knows it), or `--ec2-settle` passes; whether it did.
    async fn settle(&self, eni_id: &str, done: impl Fn(Option<&EniDesc>) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + self.settings.ec2_settle;
        loop {
            match self.ec2.eni(eni_id).await {
                Ok(desc) if done(desc.as_ref()) => return true,
                Ok(_) => {}
                Err(e) => tracing::warn!("waiting for {eni_id}: {e}"),
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    "{eni_id}: EC2 has not settled after {:?}; leaving it to the next round",
                    self.settings.ec2_settle
                );
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn execute(&self, action: Action) -> Result<(), Ec2Error> {
        match action {
            Action::AssignIps { eni_id, count } => {
                let before = self
                    .lock()
                    .pool
                    .eni(&eni_id)
                    .map_or(0, |e| e.secondary_ips.len());
                self.ec2.assign_ips(&eni_id, count).await?;
                let want = before + count as usize;
                self.settle(&eni_id, |d| {
                    d.is_some_and(|d| d.secondary_ips.len() >= want)
                })
                .await;
                self.refresh().await
            }
            Action::AttachEni { ips } => self.attach_new_eni(ips).await,
            Action::UnassignIps { eni_id, ips } => {
                let ips: Vec<Ipv4Addr> = {
                    let mut inner = self.lock();
                    let now = now_ms();
                    let ips: Vec<_> = ips
                        .into_iter()
                        .filter(|ip| inner.pool.is_available(*ip, now))
                        .collect();
                    inner.pool.drain(&ips);
                    ips
                };
                if ips.is_empty() {
                    return Ok(());
                }
                let result = self.ec2.unassign_ips(&eni_id, &ips).await;
                if result.is_ok() {
                    self.settle(&eni_id, |d| {
                        d.is_none_or(|d| ips.iter().all(|ip| !d.secondary_ips.contains(ip)))
                    })
                    .await;
                }
                let refreshed = self.refresh().await;
                self.lock().pool.undrain(&ips);
                result.and(refreshed)
            }
            Action::FreeEni { eni_id } => self.free_eni(&eni_id).await,
        }
    }

    async fn attach_new_eni(&self, ips: u32) -> Result<(), Ec2Error> {
        // Device indexes in use, attaching ENIs included.
        let current = self.ec2.instance_enis(&self.node.instance_id).await?;
        if let Some(busy) = current.iter().find(|d| {
            matches!(
                d.attachment_status.as_deref(),
                Some("attaching" | "detaching")
            )
        }) {
            // Its addresses are not in the pool yet (or any more): another ENI now could
            // be one too many. The next round sees it settled.
            tracing::info!(eni = %busy.id, "an ENI is still attaching or detaching: not adding one now");
            return Ok(());
        }
        let used: Vec<u32> = current.iter().filter_map(|d| d.device_index).collect();
        let index = (1..).find(|i| !used.contains(i)).unwrap_or(1);
        let eni_id = self
            .ec2
            .create_eni(
                &self.node.subnet_id,
                &self.node.security_groups,
                &self.settings.cluster,
                &self.node.instance_id,
            )
            .await?;
        tracing::info!(eni = %eni_id, device_index = index, "created an ENI; attaching it");
        let attachment = match self
            .ec2
            .attach_eni(&eni_id, &self.node.instance_id, index)
            .await
        {
            Ok(a) => a,
            Err(e) => {
                self.lock().leak_suspected = true;
                if let Err(d) = self.ec2.delete_eni(&eni_id).await {
                    tracing::warn!(eni = %eni_id, "cannot delete the unattached ENI ({d}); a later round deletes it");
                }
                return Err(e);
            }
        };
        if let Err(e) = self
            .ec2
            .set_delete_on_termination(&eni_id, &attachment)
            .await
        {
            tracing::warn!(eni = %eni_id, "delete-on-termination not set: {e}");
        }
        // Without its addresses the ENI still counts; the next plan fills it.
        self.ec2.assign_ips(&eni_id, ips).await?;
        self.settle(&eni_id, |d| {
            d.is_some_and(|d| {
                d.attachment_status.as_deref() == Some("attached")
                    && d.secondary_ips.len() >= ips as usize
            })
        })
        .await;
        self.refresh().await
    }

    async fn free_eni(&self, eni_id: &str) -> Result<(), Ec2Error> {
        let (ips, attachment) = {
            let mut inner = self.lock();
            let now = now_ms();
            let Some(eni) = inner.pool.eni(eni_id).cloned() else {
                return Ok(());
            };
            if eni.device_index == 0
                || !eni
                    .secondary_ips
                    .iter()
                    .all(|ip| inner.pool.is_available(*ip, now))
            {
                return Ok(());
            }
            inner.pool.drain(&eni.secondary_ips);
            (eni.secondary_ips, eni.attachment_id)
        };
        let result = async {
            let attachment = attachment.ok_or_else(|| Ec2Error {
                operation: "DetachNetworkInterface",
                code: "NoAttachment".into(),
                message: format!("{eni_id} has no attachment ID"),
                retryable: false,
                attempts: 0,
            })?;
            tracing::info!(eni = %eni_id, "freeing an unused ENI: detaching");
            self.ec2.detach_eni(&attachment).await?;
            let detached = self
                .settle(eni_id, |d| d.is_none_or(|d| d.status == "available"))
                .await;
            if detached {
                self.ec2.delete_eni(eni_id).await?;
                tracing::info!(eni = %eni_id, "ENI deleted");
            }
            Ok(())
        }
        .await;
        let refreshed = self.refresh().await;
        self.lock().pool.undrain(&ips);
        result.and(refreshed)
    }

    /// Gives a pod interface its address (the one it has, if any).
    pub fn add(&self, req: &IpamAdd) -> Result<IpamAddress, IpamError> {
        if req.container_id.is_empty() {
            return Err(IpamError::Empty("container_id"));
        }
        if req.ifname.is_empty() {
            return Err(IpamError::Empty("ifname"));
        }
        let key = PodKey {
            container_id: req.container_id.clone(),
            ifname: req.ifname.clone(),
        };
        let now = now_ms();
        let mut inner = self.lock();
        inner.pool.expire_cooling(now);
        let outcome = inner
            .pool
            .assign(&key, &req.pod_namespace, &req.pod_name, now);
        let (allocation, new) = match outcome {
            Ok(found) => found,
            Err(Exhausted { stats }) => {
                let reason = self.why_exhausted(&inner, stats.total);
                drop(inner);
                self.wake();
                return Err(IpamError::NoFreeIp(format!(
                    "no free IP: {} available, {} cooling, {reason}",
                    stats.available, stats.cooling
                )));
            }
        };
        if new {
            if let Err(e) = self.checkpoint(&inner) {
                inner.pool.release(&key, 0);
                return Err(e.into());
            }
            tracing::info!(
                pod = %format!("{}/{}", req.pod_namespace, req.pod_name),
                container = %req.container_id, ip = %allocation.ip, eni = %allocation.eni_id,
                "address assigned"
            );
        }
        let eni = inner.pool.eni(&allocation.eni_id);
        let subnet_cidr = eni
            .and_then(|e| inner.subnet_cidrs.get(&e.subnet_id))
            .cloned()
            .unwrap_or_default();
        let address = IpamAddress {
            ip: allocation.ip.to_string(),
            prefix_len: 32,
            eni_id: allocation.eni_id.clone(),
            device_index: eni.map_or(0, |e| e.device_index),
            gateway: cidr::gateway(&subnet_cidr),
            subnet_cidr,
            vpc_cidrs: inner.vpc_cidrs.clone(),
        };
        drop(inner);
        if new {
            self.update_metrics();
            self.wake();
        }
        Ok(address)
    }

    fn why_exhausted(&self, inner: &Inner, total: u32) -> String {
        if let Some(blocked) = inner.blocked {
            return blocked.to_string();
        }
        if total >= inner.max_pod_ips {
            return Blocked::MaxPodIps(inner.max_pod_ips).to_string();
        }
        let per_eni = self.node.ips_per_eni.saturating_sub(1) as usize;
        let enis: Vec<_> = inner.pool.enis().collect();
        if enis.len() as u32 >= self.node.max_enis
            && enis.iter().all(|e| e.secondary_ips.len() >= per_eni)
        {
            return Blocked::EniLimit(self.node.max_enis).to_string();
        }
        "the pool is being refilled from EC2, try again shortly".to_string()
    }

    /// Releases a pod interface's address into cooling; the address, or `None` when it
    /// held none.
    pub fn del(&self, req: &IpamDel) -> Result<Option<Ipv4Addr>, IpamError> {
        let key = PodKey {
            container_id: req.container_id.clone(),
            ifname: req.ifname.clone(),
        };
        let until = now_ms() + self.settings.cooling.as_millis() as u64;
        let mut inner = self.lock();
        let Some(allocation) = inner.pool.release(&key, until) else {
            return Ok(None);
        };
        if let Err(e) = self.checkpoint(&inner) {
            // Keep the datastore and the pool in step: the pod still holds it.
            let _ = inner
                .pool
                .assign(&key, &allocation.pod_namespace, &allocation.pod_name, 0);
            return Err(e.into());
        }
        tracing::info!(container = %req.container_id, ip = %allocation.ip, "address released into cooling");
        drop(inner);
        self.update_metrics();
        self.wake();
        Ok(Some(allocation.ip))
    }

    /// The pool's state (`ipam.show`, `GET /ip-manager`).
    pub fn show(&self) -> IpamState {
        let now = now_ms();
        let inner = self.lock();
        let stats = inner.pool.stats(now);
        let t = &self.settings.targets;
        let mut enis: Vec<IpamEni> = inner
            .pool
            .enis()
            .map(|e| IpamEni {
                id: e.id.clone(),
                mac: e.mac.clone(),
                device_index: e.device_index,
                subnet_cidr: inner
                    .subnet_cidrs
                    .get(&e.subnet_id)
                    .cloned()
                    .unwrap_or_default(),
                primary_ip: e.primary_ip.to_string(),
                ips: e
                    .secondary_ips
                    .iter()
                    .map(|ip| {
                        let (state, left) = if inner.pool.holder(*ip).is_some() {
                            (IpState::Assigned, None)
                        } else if inner.pool.is_cooling(*ip, now) {
                            let until = inner.pool.cooling_until(*ip).unwrap_or(now);
                            (IpState::Cooling, Some(until.saturating_sub(now)))
                        } else {
                            (IpState::Available, None)
                        };
                        IpamIp {
                            ip: ip.to_string(),
                            state,
                            cooling_ms_left: left,
                        }
                    })
                    .collect(),
            })
            .collect();
        enis.sort_by_key(|e| e.device_index);
        IpamState {
            allocated: stats.assigned,
            available: stats.available,
            cooling: stats.cooling,
            total: stats.total,
            max_pod_ips: inner.max_pod_ips,
            blocked: inner.blocked.map(|b| b.to_string()),
            allocations: inner
                .pool
                .allocations()
                .map(|a| IpamAllocation {
                    pod_namespace: a.pod_namespace.clone(),
                    pod_name: a.pod_name.clone(),
                    container_id: a.container_id.clone(),
                    ifname: a.ifname.clone(),
                    ip: a.ip.to_string(),
                    eni_id: a.eni_id.clone(),
                })
                .collect(),
            enis,
            settings: IpamSettings {
                cluster: self.settings.cluster.clone(),
                instance_id: self.node.instance_id.clone(),
                instance_type: self.node.instance_type.clone(),
                warm_eni_target: t.warm_eni,
                warm_ip_target: t.warm_ip,
                minimum_ip_target: t.minimum_ip,
                mode: if t.ip_mode() { "ip" } else { "eni" }.to_string(),
                max_enis: self.node.max_enis,
                ips_per_eni: self.node.ips_per_eni,
                cooling_secs: self.settings.cooling.as_secs(),
                reconcile_interval_ms: self.settings.reconcile_interval.as_millis() as u64,
                subnet_id: self.node.subnet_id.clone(),
                security_groups: self.node.security_groups.clone(),
            },
        }
    }

    fn update_metrics(&self) {
        let inner = self.lock();
        let stats = inner.pool.stats(now_ms());
        self.metrics
            .set_pool(inner.pool.enis().count(), &stats, inner.max_pod_ips);
    }

    /// The `vpc.sync` params of the ENIs in the pool.
    pub fn vpc_sync(&self) -> VpcSync {
        let inner = self.lock();
        let mut enis: Vec<VpcEni> = inner
            .pool
            .enis()
            .map(|e| {
                let subnet_cidr = inner
                    .subnet_cidrs
                    .get(&e.subnet_id)
                    .cloned()
                    .unwrap_or_default();
                VpcEni {
                    id: e.id.clone(),
                    mac: e.mac.clone(),
                    device_index: e.device_index,
                    gateway: cidr::gateway(&subnet_cidr),
                    subnet_cidr,
                    primary_ip: e.primary_ip.to_string(),
                    secondary_ips: e.secondary_ips.iter().map(ToString::to_string).collect(),
                    port: None,
                }
            })
            .collect();
        enis.sort_by_key(|e| e.device_index);
        VpcSync {
            node_ips: Vec::new(),
            vpc_cidrs: inner.vpc_cidrs.clone(),
            snat_exclude: Vec::new(),
            snat_ports: None,
            enis,
        }
    }

    /// Pushes the ENIs to ferruled when they changed since the last successful push
    /// (or it failed).
    async fn push_if_changed(&self) {
        let Some(socket) = self.settings.ferruled_socket.clone() else {
            return;
        };
        let sync = self.vpc_sync();
        if self.lock().last_pushed.as_ref() == Some(&sync) {
            return;
        }
        let params = match serde_json::to_value(&sync) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("vpc.sync params: {e}");
                return;
            }
        };
        let result = tokio::task::spawn_blocking(move || {
            let mut client = ferrule_api::client::Client::connect(&socket)?;
            client.set_read_timeout(Some(Duration::from_secs(5)))?;
            client.call(ferrule_api::vpc_method::SYNC, params)
        })
        .await;
        match result {
            Ok(Ok(_)) => {
                self.metrics.push(true);
                tracing::info!(enis = sync.enis.len(), "pushed the ENIs to ferruled");
                self.lock().last_pushed = Some(sync);
            }
            Ok(Err(e)) => {
                self.metrics.push(false);
                tracing::warn!("vpc.sync to ferruled: {e}; retrying at the next round");
            }
            Err(e) => {
                self.metrics.push(false);
                tracing::warn!("vpc.sync to ferruled: {e}; retrying at the next round");
            }
        }
    }
}

/// An attached ENI of the instance as the pool keeps it.
fn attached_eni(d: &EniDesc) -> Option<Eni> {
    if d.attachment_status
        .as_deref()
        .is_some_and(|s| s != "attached")
    {
        return None;
    }
    Some(Eni {
        id: d.id.clone(),
        mac: d.mac.clone(),
        device_index: d.device_index?,
        attachment_id: d.attachment_id.clone(),
        subnet_id: d.subnet_id.clone(),
        primary_ip: d.primary_ip?,
        secondary_ips: d.secondary_ips.clone(),
    })
}

/// Discovery: `Err` for EC2 errors (retried), `Ok(Err)` for what retrying cannot fix.
async fn discover(
    ec2: &Ec2,
    settings: &Settings,
    instance_id: &str,
) -> Result<Result<(Node, Vec<String>), StartError>, Ec2Error> {
    let instance = ec2.describe_instance(instance_id).await?;
    let enis = ec2.instance_enis(instance_id).await?;
    let Some(primary) = enis.iter().find(|e| e.device_index == Some(0)) else {
        return Ok(Err(StartError::NoPrimaryEni(instance_id.to_string())));
    };
    let (n, m) = match ec2.instance_type_limits(&instance.instance_type).await? {
        Some(found) => found,
        None => match limits::built_in(&instance.instance_type) {
            Some(found) => found,
            None => return Ok(Err(StartError::UnknownLimits(instance.instance_type))),
        },
    };
    let subnet_id = settings
        .subnet_id
        .clone()
        .unwrap_or_else(|| primary.subnet_id.clone());
    let security_groups = if settings.security_groups.is_empty() {
        primary.security_groups.clone()
    } else {
        settings.security_groups.clone()
    };
    let vpc_id = if instance.vpc_id.is_empty() {
        primary.vpc_id.clone()
    } else {
        instance.vpc_id.clone()
    };
    let vpc_cidrs = ec2.vpc_cidrs(&vpc_id).await?;
    Ok(Ok((
        Node {
            instance_id: instance_id.to_string(),
            instance_type: instance.instance_type,
            vpc_id,
            subnet_id,
            security_groups,
            max_enis: settings.max_eni.map_or(n, |cap| cap.min(n)),
            ips_per_eni: m,
        },
        vpc_cidrs,
    )))
}
