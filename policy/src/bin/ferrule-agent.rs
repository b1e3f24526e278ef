//! `ferrule-agent`: watches a directory of Kubernetes manifests, renders the node's
//! NetworkPolicies and CiliumNetworkPolicies into ACL tables (and DNS policies) on
//! every change and pushes them to ferruled.

use clap::Parser;
use ferrule_api::client::Client;
use ferrule_api::network::{NetworkApplied, NetworkApply, NetworkDel, NetworkList};
use ferrule_api::{acl_method, network_method, AclApplied};
use ferrule_policy::cache::{collect_files, load_path, network_objects};
use ferrule_policy::renderer::Rendered;
use ferrule_policy::{Engine, Local};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

#[derive(Parser, Debug)]
#[command(
    name = "ferrule-agent",
    version,
    about = "Render a node's Kubernetes NetworkPolicies and CiliumNetworkPolicies into Ferrule ACLs and keep ferruled in sync",
    long_about = "ferrule-agent watches --state, a directory (or file) of Kubernetes manifests — \
Namespaces, Pods, NetworkPolicies and CiliumNetworkPolicies in YAML or JSON, as `kubectl \
get -o yaml` writes them — and renders the policies of the pods of --node into ACL \
tables the way Contiv/VPP's policy renderer does: an egress table per pod (pods with \
identical rules share one), a reflective table on the ingress of those pods and a \
global table for the uplinks; CiliumNetworkPolicies' toFQDNs/toCIDR peers are rules \
matched by the destination's identity, and their rules.dns the pods' DNS policies. It \
then replaces ferruled's ACL state with one `acl.apply` over the control socket.\n\n\
The directory is checked every --interval-ms milliseconds (by file names, sizes and \
modification times). On a change the state is read again and re-rendered \
incrementally: only the pods a change affects are re-computed. Every render logs \
the tables added, changed and removed and the pods re-attached; nothing is sent when \
the rendering did not change. An invalid manifest is logged (naming the object and \
field) and the tables in force stay as they are until the state is valid again. When \
ferruled cannot be reached the apply is retried on every check.\n\n\
A pod's tables attach to the port that records the pod by namespace and name (the CNI \
plugin's ADD, `ferrulectl port add NAME --pod NS/NAME`), or to the port named by its \
annotation ferrule.io/port; tables of a pod whose port does not exist yet wait in \
ferruled and take effect when it is added.\n\n\
User-defined networks (UserDefinedNetwork, ClusterUserDefinedNetwork, k8s.ovn.org/v1) \
and the Namespaces they serve are taken from the same directory: on a change every \
one is sent with one `network.apply` (all or nothing: an invalid manifest is logged \
naming its field, and nothing changes until the state does), before the policies; a \
network this agent created whose manifest is removed is deleted with `network.del`, \
retried while pods still use it. See docs/networks.md. See docs/policy.md. Logging goes to stderr; RUST_LOG sets the level (default info).\n\n\
SIGINT or SIGTERM stops the agent (exit 0); the tables in force stay in ferruled.",
    after_help = "EXIT STATUS:\n  0  stopped by SIGINT/SIGTERM, or --once succeeded\n  \
1  --once failed: invalid state or ferruled unreachable\n  2  bad command line\n\n\
EXAMPLES:\n  ferrule-agent --state /etc/ferrule/k8s --node worker-1\n  \
ferrule-agent --state ./manifests --node worker-1 --socket /tmp/ferrule.sock --once"
)]
struct Args {
    /// Directory (or file) of Kubernetes manifests to watch.
    #[arg(long, value_name = "DIR")]
    state: PathBuf,

    /// The node whose pods (spec.nodeName) are rendered.
    #[arg(long, value_name = "NODE")]
    node: String,

    /// Control socket of ferruled.
    #[arg(long, value_name = "PATH", env = "FERRULE_SOCKET", default_value = ferrule_api::DEFAULT_SOCKET)]
    socket: PathBuf,

    /// How often to check the state for changes, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(10..=600_000))]
    interval_ms: u64,

    /// Render and apply once, then exit.
    #[arg(long)]
    once: bool,
}

/// File names, sizes and modification times: what changes when the state does.
fn fingerprint(path: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let mut files = Vec::new();
    if collect_files(path, &mut files).is_err() {
        return Vec::new();
    }
    files
        .into_iter()
        .map(|f| {
            let meta = std::fs::metadata(&f).ok();
            let len = meta.as_ref().map_or(0, std::fs::Metadata::len);
            let mtime = meta.and_then(|m| m.modified().ok());
            (f, len, mtime)
        })
        .collect()
}

struct Agent {
    args: Args,
    engine: Option<Engine>,
    /// The rendering ferruled has, if the last apply succeeded.
    applied: Option<Rendered>,
    /// The user-defined networks and Namespaces of the state, as read last.
    networks: Vec<serde_json::Value>,
    /// Those ferruled has, if the last sync succeeded.
    networks_applied: Option<Vec<serde_json::Value>>,
    /// The networks (kind, object) this agent created: the ones it deletes when their
    /// manifests go.
    created: std::collections::BTreeSet<(String, String)>,
    /// Pods' addresses on their primary user-defined network, as last read from
    /// ferruled.
    udn_ips: UdnAddresses,
}

/// `namespace/name` → the pod's addresses on its primary user-defined network.
type UdnAddresses = std::collections::BTreeMap<String, Vec<std::net::IpAddr>>;

/// A network manifest's (kind, object) as `network.list` names it: `namespace/name`
/// for a UserDefinedNetwork, `name` for a ClusterUserDefinedNetwork.
fn network_identity(v: &serde_json::Value) -> Option<(String, String)> {
    let kind = v.get("kind")?.as_str()?;
    let meta = v.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    match kind {
        "UserDefinedNetwork" => Some((
            kind.to_string(),
            format!("{}/{name}", meta.get("namespace")?.as_str()?),
        )),
        "ClusterUserDefinedNetwork" => Some((kind.to_string(), name.to_string())),
        _ => None,
    }
}

impl Agent {
    /// Reads the state's networks and Namespaces; false (and the networks in force
    /// kept) when it cannot be read.
    fn read_networks(&mut self) -> bool {
        match network_objects(&self.args.state) {
            Ok(objects) => {
                self.networks = objects;
                true
            }
            Err(e) => {
                tracing::error!("networks not read, those in force kept: {e}");
                false
            }
        }
    }

    /// Brings ferruled's user-defined networks in line with the state: one
    /// `network.apply` of every network and Namespace (all or nothing; an invalid one
    /// is logged and retried on the next change), then `network.del` of the networks
    /// this agent created whose manifests are gone (refused while pods use them:
    /// retried on every check).
    fn push_networks(&mut self) -> bool {
        if self.networks_applied.as_ref() == Some(&self.networks) {
            return self.delete_gone();
        }
        let has_networks = self.networks.iter().any(|v| network_identity(v).is_some());
        if !has_networks && self.created.is_empty() {
            self.networks_applied = Some(self.networks.clone());
            return true;
        }
        let request = NetworkApply {
            objects: self.networks.clone(),
            dry_run: false,
        };
        let reply = Client::connect(&self.args.socket).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(30)))?;
            let params = serde_json::to_value(&request).unwrap_or_default();
            c.call_typed::<NetworkApplied>(network_method::APPLY, params)
        });
        match reply {
            Ok(a) => {
                if !a.created.is_empty() {
                    tracing::info!("networks created: {}", a.created.join(", "));
                }
                for v in &self.networks {
                    if let Some(id) = network_identity(v) {
                        self.created.insert(id);
                    }
                }
                self.networks_applied = Some(self.networks.clone());
                self.delete_gone()
            }
            Err(e) => {
                tracing::error!("network.apply failed (retrying on the next change): {e}");
                // An invalid manifest is not sent again until the state changes.
                self.networks_applied = Some(self.networks.clone());
                false
            }
        }
    }

    fn delete_gone(&mut self) -> bool {
        let wanted: std::collections::BTreeSet<(String, String)> =
            self.networks.iter().filter_map(network_identity).collect();
        let gone: Vec<(String, String)> = self.created.difference(&wanted).cloned().collect();
        if gone.is_empty() {
            return true;
        }
        let result = Client::connect(&self.args.socket).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(30)))?;
            let list: NetworkList = c.call_typed(network_method::LIST, serde_json::Value::Null)?;
            let mut all = true;
            for (kind, object) in &gone {
                let Some(n) = list
                    .networks
                    .iter()
                    .find(|n| &n.kind == kind && &n.object == object)
                else {
                    self.created.remove(&(kind.clone(), object.clone()));
                    continue;
                };
                let params = serde_json::to_value(NetworkDel {
                    name: n.name.clone(),
                })
                .unwrap_or_default();
                match c.call(network_method::DEL, params) {
                    Ok(_) => {
                        tracing::info!("network {} deleted: its manifest is gone", n.name);
                        self.created.remove(&(kind.clone(), object.clone()));
                    }
                    Err(e) => {
                        tracing::warn!("network {} not deleted yet: {e}", n.name);
                        all = false;
                    }
                }
            }
            Ok(all)
        });
        result.unwrap_or_else(|e| {
            tracing::error!("cannot delete networks whose manifests are gone: {e}");
            false
        })
    }

    /// The addresses pods have on their primary user-defined networks: ferruled's pod
    /// ports on a network other than the default one that record a pod and are not
    /// locked. Policies act within the network a pod's namespace uses, so these stand
    /// for the pod's addresses (its manifest shows the default network's). Empty when
    /// ferruled cannot be asked.
    fn read_udn_addresses(&self) -> UdnAddresses {
        let list = Client::connect(&self.args.socket).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(30)))?;
            c.call_typed::<ferrule_api::PortsList>(
                ferrule_api::method::PORTS_LIST,
                serde_json::Value::Null,
            )
        });
        let mut out = UdnAddresses::new();
        for p in list.map(|l| l.ports).unwrap_or_default() {
            let Some(pod) = p.pod else { continue };
            if p.network.is_empty() || p.network == "default" || p.locked || p.ips.is_empty() {
                continue;
            }
            out.insert(pod, p.ips.iter().filter_map(|a| a.parse().ok()).collect());
        }
        out
    }

    /// Reads and renders the state; returns whether it succeeded.
    fn render(&mut self) -> bool {
        let started = Instant::now();
        let objects = match load_path(&self.args.state) {
            Ok((mut objects, warnings)) => {
                for w in warnings {
                    tracing::warn!("{w}");
                }
                for o in &mut objects {
                    if let ferrule_policy::cache::Object::Pod(p) = o {
                        let key = format!("{}/{}", p.key.namespace, p.key.name);
                        if let Some(ips) = self.udn_ips.get(&key) {
                            p.ips = ips.clone();
                        }
                    }
                }
                objects
            }
            Err(e) => {
                tracing::error!("state not rendered, tables in force kept: {e}");
                return false;
            }
        };
        let result = match &mut self.engine {
            Some(engine) => engine.reload(objects).map(Some),
            None => {
                let cache = ferrule_policy::cache::Cache::from_objects(objects);
                Engine::new(cache, Local::Node(self.args.node.clone())).map(|e| {
                    self.engine = Some(e);
                    None
                })
            }
        };
        match result {
            Ok(diff) => {
                if let Some(e) = &self.engine {
                    let r = e.rendered();
                    let what = match diff {
                        Some(d) if d.is_empty() => "no change".to_string(),
                        Some(d) => d.to_string(),
                        None => format!(
                            "tables added {}",
                            r.tables.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    };
                    tracing::info!(
                        "rendered {} pods of node {}: {} tables, {} rules in {:.1} ms; {what}",
                        r.pods.len(),
                        self.args.node,
                        r.tables.len(),
                        r.rule_count(),
                        started.elapsed().as_secs_f64() * 1e3
                    );
                }
                true
            }
            Err(e) => {
                tracing::error!("state not rendered, tables in force kept: {e}");
                false
            }
        }
    }

    /// Sends the rendering to ferruled unless it already has it.
    fn push(&mut self) -> bool {
        let Some(engine) = &self.engine else {
            return false;
        };
        let rendered = engine.rendered();
        if self.applied.as_ref() == Some(rendered) {
            return true;
        }
        let reply = Client::connect(&self.args.socket).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(30)))?;
            c.call_typed::<AclApplied>(acl_method::APPLY, rendered.to_apply().to_value())
        });
        match reply {
            Ok(a) => {
                tracing::info!("applied: {}", a.summary());
                self.applied = Some(rendered.clone());
                true
            }
            Err(e) => {
                tracing::error!("acl.apply failed (retrying on the next check): {e}");
                false
            }
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("ferrule-agent: cannot handle signal {sig}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let interval = Duration::from_millis(args.interval_ms);
    let once = args.once;
    tracing::info!(
        "watching {} for node {}, applying to {}",
        args.state.display(),
        args.node,
        args.socket.display()
    );
    let mut agent = Agent {
        args,
        engine: None,
        applied: None,
        networks: Vec::new(),
        networks_applied: None,
        created: Default::default(),
        udn_ips: Default::default(),
    };
    if once {
        // Networks first: the policies' pods may be attached to them.
        let ok = agent.read_networks()
            && agent.push_networks()
            && {
                agent.udn_ips = agent.read_udn_addresses();
                agent.render()
            }
            && agent.push();
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let mut seen = None;
    while !stop.load(Ordering::Relaxed) {
        let now = fingerprint(&agent.args.state);
        let changed = seen.as_ref() != Some(&now);
        if changed {
            seen = Some(now);
            agent.read_networks();
        }
        agent.push_networks();
        // Pods coming and going on user-defined networks change their addresses.
        let udn_ips = agent.read_udn_addresses();
        if changed || udn_ips != agent.udn_ips {
            agent.udn_ips = udn_ips;
            agent.render();
        }
        agent.push();
        let until = Instant::now() + interval;
        while !stop.load(Ordering::Relaxed) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20).min(interval));
        }
    }
    tracing::info!("stopping: the tables in force stay in ferruled");
    ExitCode::SUCCESS
}
