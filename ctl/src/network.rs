//! `ferrulectl network`: create, delete and list user-defined networks (OVN-Kubernetes
//! `UserDefinedNetwork` / `ClusterUserDefinedNetwork` manifests and the Namespaces
//! they serve), show the MAC tables of switched networks, and render the replies.

use super::table::Table;
use super::{CtlError, Ctx};
use clap::{Args, Subcommand};
use ferrule_api::network::{
    FdbDump, FdbParams, NetworkApplied, NetworkApply, NetworkDel, NetworkInfo, NetworkList,
    NetworkListParams,
};
use ferrule_api::network_method;
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

pub const NETWORK_LONG_ABOUT: &str = "\
Create, delete and list networks. Besides the cluster default network (and any
[[network]] of the configuration), ferruled runs user-defined networks as OVN-Kubernetes
defines them: each a VRF with its own routes, neighbours, conntrack zone, MTU and gateway
router on the network's subnet, isolated from every other network; pods of different
networks may have the same addresses. Pods of a network reach the outside through the
node's uplink, masqueraded to the node IP; nothing outside can open a connection to them.

Networks come from UserDefinedNetwork (namespaced; network name `NAMESPACE.NAME`) and
ClusterUserDefinedNetwork (cluster-wide, for the namespaces its namespaceSelector picks;
network name `cluster.udn.NAME`) manifests, k8s.ovn.org/v1. A namespace takes a primary
network only when it carries the label k8s.ovn.org/primary-user-defined-network, so the
Namespaces travel with the networks (`network apply` accepts both). A spec is immutable:
re-applying a changed one is refused; delete the network (refused while pods use it)
and apply it again. See docs/networks.md.";

/// `ferrulectl network` subcommands.
#[derive(Debug, Subcommand)]
pub enum NetworkCommand {
    /// Create networks and record namespaces from manifests (YAML or JSON).
    #[command(long_about = "\
Create networks from UserDefinedNetwork and ClusterUserDefinedNetwork manifests and
record the Namespaces they serve (their labels decide which namespace takes which
primary network). FILE holds one or more objects: YAML documents separated by `---`,
a JSON object, or a `kind: List`; `-` reads standard input. Objects of other kinds are
skipped and listed. Everything is validated before anything changes: one invalid
object refuses the whole apply, naming the object, the field and the rule (the seed's
messages: \"Subnets is required for Layer3 topology\", \"Spec is immutable\", …).

Examples:
  ferrulectl network apply -f tenant-blue.yaml
  kubectl get udn,cudn,ns -A -o yaml | ferrulectl network apply -f -
  ferrulectl network apply -f net.yaml --dry-run")]
    Apply(NetworkApplyArgs),

    /// Delete a network (refused while pods use it).
    #[command(long_about = "\
Delete the network NAME (as `network list` shows it: NAMESPACE.NAME for a
UserDefinedNetwork, cluster.udn.NAME for a ClusterUserDefinedNetwork). Refused while a
port is attached to it, naming how many; the network keeps running then.

Example:
  ferrulectl network del blue.tenant")]
    Del(NetworkDelArgs),

    /// List networks: topology, role, subnets, zone, ports and status conditions.
    #[command(long_about = "\
List every network: its name, topology (Layer3, Layer2, Localnet), role, conntrack zone
(absent while not ready), MTU, this node's subnets and gateway, the number of ports and
pods' addresses it has handed out, its traffic counters, and whether it is ready. With
NAME, one network in detail: its namespaces, join and masquerade addresses and the
status conditions the way the UDN status shows them (type, status, reason, message).")]
    List(NetworkListArgs),

    /// Show the MAC tables of switched (Layer2, Localnet) networks.
    #[command(long_about = "\
Show the MAC address table of each switched network (or of --network): the MAC, the
port it is on, whether it is static (a pod port's own MAC) or learned, and the seconds
since it was last seen. Learned entries age out after [networks] mac_ageing_s.")]
    Fdb(NetworkFdbArgs),
}

/// Arguments of `network apply`.
#[derive(Debug, Args)]
pub struct NetworkApplyArgs {
    /// Manifest file (YAML or JSON), or `-` for standard input.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,
    /// Validate only; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `network del`.
#[derive(Debug, Args)]
pub struct NetworkDelArgs {
    /// The network's name.
    pub name: String,
}

/// Arguments of `network list`.
#[derive(Debug, Args)]
pub struct NetworkListArgs {
    /// Only this network, in detail.
    pub name: Option<String>,
}

/// Arguments of `network fdb`.
#[derive(Debug, Args)]
pub struct NetworkFdbArgs {
    /// Only this network.
    #[arg(long, value_name = "NAME")]
    pub network: Option<String>,
}

/// Runs a `network` subcommand.
pub fn run(ctx: &mut Ctx<'_>, command: &NetworkCommand) -> Result<(), CtlError> {
    match command {
        NetworkCommand::Apply(a) => {
            let request = NetworkApply {
                objects: load(&a.file)?,
                dry_run: a.dry_run,
            };
            ctx.query(
                network_method::APPLY,
                super::params(&request)?,
                render_applied,
            )
        }
        NetworkCommand::Del(a) => {
            let request = NetworkDel {
                name: a.name.clone(),
            };
            ctx.query(
                network_method::DEL,
                super::params(&request)?,
                |_: &Value| format!("network {} deleted\n", a.name),
            )
        }
        NetworkCommand::List(a) => {
            let request = NetworkListParams {
                name: a.name.clone(),
            };
            let detail = a.name.is_some();
            ctx.query(
                network_method::LIST,
                super::params(&request)?,
                |l: &NetworkList| {
                    if detail {
                        l.networks.iter().map(render_detail).collect()
                    } else {
                        render_list(l)
                    }
                },
            )
        }
        NetworkCommand::Fdb(a) => {
            let request = FdbParams {
                network: a.network.clone(),
            };
            ctx.query(network_method::FDB, super::params(&request)?, render_fdb)
        }
    }
}

/// Reads the objects of a manifest file (`-`: standard input).
pub fn load(path: &Path) -> Result<Vec<Value>, CtlError> {
    let file_err = |source| CtlError::File {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    if path == Path::new("-") {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(file_err)?;
    } else {
        text = std::fs::read_to_string(path).map_err(file_err)?;
    }
    parse(&text).map_err(|e| CtlError::Usage(format!("{}: {e}", path.display())))
}

/// The objects of manifest text: YAML documents (JSON is YAML), `kind: List` items
/// flattened, empty documents skipped.
pub fn parse(text: &str) -> Result<Vec<Value>, String> {
    use serde::Deserialize;
    let mut objects = Vec::new();
    for (n, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(doc).map_err(|e| format!("document {}: {e}", n + 1))?;
        match value {
            Value::Null => {}
            Value::Object(ref o) if o.get("kind").and_then(Value::as_str) == Some("List") => {
                match o.get("items") {
                    Some(Value::Array(items)) => objects.extend(items.iter().cloned()),
                    _ => return Err(format!("document {}: a List without items", n + 1)),
                }
            }
            Value::Object(_) => objects.push(value),
            _ => return Err(format!("document {}: not a Kubernetes object", n + 1)),
        }
    }
    if objects.is_empty() {
        return Err("no objects".into());
    }
    Ok(objects)
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

/// Human output of `network apply`.
pub fn render_applied(a: &NetworkApplied) -> String {
    let mut out = String::new();
    let verb = if a.dry_run { "would create" } else { "created" };
    for n in &a.created {
        out.push_str(&format!("network {n} {verb}\n"));
    }
    for n in &a.unchanged {
        out.push_str(&format!("{n} unchanged\n"));
    }
    for n in &a.namespaces {
        out.push_str(&format!("namespace {n} recorded\n"));
    }
    for n in &a.ignored {
        out.push_str(&format!("{n} skipped (not a network or namespace)\n"));
    }
    out
}

/// Whether a network is ready: every condition true (the built-in ones have none).
fn ready(n: &NetworkInfo) -> &'static str {
    if n.conditions.iter().all(|c| c.status == "True") {
        "yes"
    } else {
        "no"
    }
}

/// Human output of `network list`.
pub fn render_list(l: &NetworkList) -> String {
    let mut t = Table::new([
        "NAME", "TOPOLOGY", "ROLE", "ZONE", "MTU", "SUBNETS", "GATEWAY", "PORTS", "IPS", "RX",
        "TX", "DROPS", "READY",
    ]);
    for n in &l.networks {
        t.row([
            n.name.clone(),
            n.topology.clone(),
            n.role.clone(),
            n.zone.map_or("-".into(), |z| z.to_string()),
            n.mtu.to_string(),
            list(if n.node_subnets.is_empty() {
                &n.subnets
            } else {
                &n.node_subnets
            }),
            list(&n.gateways),
            n.ports.len().to_string(),
            n.allocated.to_string(),
            n.counters.rx_packets.to_string(),
            n.counters.tx_packets.to_string(),
            n.counters.drops.to_string(),
            ready(n).into(),
        ]);
    }
    t.to_string()
}

/// Human output of `network list NAME`.
pub fn render_detail(n: &NetworkInfo) -> String {
    let mut out = format!("network {} ({})\n", n.name, n.kind);
    let mut line = |k: &str, v: String| out.push_str(&format!("  {k:<16}{v}\n"));
    if !n.object.is_empty() {
        line("object:", n.object.clone());
    }
    line("topology:", format!("{} {}", n.topology, n.role));
    line(
        "zone:",
        n.zone.map_or("- (not ready)".into(), |z| z.to_string()),
    );
    line("mtu:", n.mtu.to_string());
    line("subnets:", list(&n.subnets));
    line("node subnets:", list(&n.node_subnets));
    line("exclude:", list(&n.exclude_subnets));
    line("join subnets:", list(&n.join_subnets));
    line("gateways:", list(&n.gateways));
    line("masquerade:", list(&n.masquerade));
    if let Some(v) = n.vlan {
        line("vlan:", v.to_string());
    }
    line("namespaces:", list(&n.namespaces));
    line("ports:", list(&n.ports));
    line("allocated:", n.allocated.to_string());
    line(
        "counters:",
        format!(
            "rx {} pkts {} bytes, tx {} pkts {} bytes, drops {}",
            n.counters.rx_packets,
            n.counters.rx_bytes,
            n.counters.tx_packets,
            n.counters.tx_bytes,
            n.counters.drops
        ),
    );
    if !n.conditions.is_empty() {
        out.push_str("  conditions:\n");
        for c in &n.conditions {
            out.push_str(&format!(
                "    {} {} ({}) since {}: {}\n",
                c.kind, c.status, c.reason, c.last_transition_time, c.message
            ));
        }
    }
    out
}

/// Human output of `network fdb`.
pub fn render_fdb(d: &FdbDump) -> String {
    let mut t = Table::new(["NETWORK", "MAC", "PORT", "VLAN", "TYPE", "AGE(s)"]);
    for e in &d.entries {
        t.row([
            e.network.clone(),
            e.mac.clone(),
            e.port.clone(),
            e.vlan.map_or("-".into(), |v| v.to_string()),
            e.kind.clone(),
            e.age_s.map_or("-".into(), |a| a.to_string()),
        ]);
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_documents_lists_and_json() {
        let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\n\
                    kind: List\nitems:\n- {kind: Namespace, metadata: {name: b}}\n\
                    - {kind: Namespace, metadata: {name: c}}\n";
        let objs = parse(text).unwrap();
        let names: Vec<&str> = objs
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(parse(r#"{"kind":"Namespace"}"#).unwrap().len(), 1);
        assert!(parse("").unwrap_err().contains("no objects"));
        assert!(parse("- 1\n- 2\n")
            .unwrap_err()
            .contains("not a Kubernetes object"));
        assert!(parse("kind: List\n").unwrap_err().contains("without items"));
    }
}
