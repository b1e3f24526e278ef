//! `ferrulectl policy`: render Kubernetes NetworkPolicies and CiliumNetworkPolicies
//! into the `acl.apply` file format, answer allow/deny for connections from the rendered tables (both offline),
//! and apply the rendered tables to ferruled once.

use super::{acl, CtlError, Ctx};
use clap::{Args, Subcommand};
use ferrule_api::{acl_method, AclApplied};
use ferrule_policy::cache::{load_path, Cache, L4};
use ferrule_policy::verdict::{Endpoint, Verdicts};
use ferrule_policy::{Engine, Local, PolicyError};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

pub const POLICY_LONG_ABOUT: &str = "\
Render Kubernetes NetworkPolicies and CiliumNetworkPolicies into Ferrule ACL tables,
the way Contiv/VPP's policy renderer does, and ask what the rendered tables do to a
connection.

The state (--state) is a YAML or JSON file, or a directory of them (read recursively
in name order; multi-document files and `kind: List` are fine): Namespaces (labels),
Pods (labels, spec.nodeName, spec.hostNetwork, containers' named ports, status.podIP /
podIPs), NetworkPolicies (networking.k8s.io/v1) and CiliumNetworkPolicies (cilium.io/v2:
endpointSelector; toEndpoints, toFQDNs, toCIDR, toCIDRSet, toPorts with rules.dns;
fromEndpoints, fromCIDR, fromCIDRSet). Other kinds are skipped with a warning on
stderr; an invalid object, or a CiliumNetworkPolicy field that is not supported, is an
error naming it and its field.

A pod's tables attach to the port that records the pod (`port add --pod NS/NAME`, the
CNI plugin), or to the port its annotation ferrule.io/port names; an attachment whose
port does not exist yet waits in ferruled until the port is added. `render` and
`verdict` need no daemon; `apply` sends the rendered tables to ferruled. See
docs/policy.md.";

/// `ferrulectl policy` subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Print the ACL tables and attachments rendered for a node's pods.
    #[command(long_about = "\
Print the tables and attachments rendered for the pods of --node (every pod when
omitted: the whole state as one switch) in the `ferrulectl acl apply` file format:
YAML, or JSON with --json. Per pod with restrictions: an egress table (the pod's
ingress policies combined with the egress policies of the other local pods; pods with
identical rules share one table) and the reflective table `reflect-all` on its
ingress; and the `global` table for uplink egress (the local pods' egress policies,
then permit). Every rule's origin names the policy it came from (NAMESPACE/NAME;
NAMESPACE/cnp:NAME for a CiliumNetworkPolicy). A CiliumNetworkPolicy's toFQDNs, toCIDR
and toCIDRSet peers are rules whose dst is a selector (fqdn:PATTERN, cidr:PREFIX),
matched by ferruled by the destination's identity; its rules.dns become the `dns`
section (per pod, the names it may look up through the DNS proxy).

Examples:
  ferrulectl policy render --state manifests/ --node worker-1 > acl.yaml
  ferrulectl policy render --state cluster.yaml --json | jq '.tables | length'")]
    Render(RenderArgs),

    /// Say whether the rendered tables allow a connection: `allow` or `deny`.
    #[command(long_about = "\
Print `allow` or `deny` for a connection from --from to port --port of --to: the first
packet and its reply are sent through the tables rendered for the nodes of both pods,
with the dataplane's own classifier and Ferrule's reflect (conntrack) rules — the
source pod's ingress table; then the destination pod's egress table when both pods are
on one node, or else the source node's global table and the destination pod's egress
table on its node; replies skip the tables of every switch that tracked the
connection. An end can also be an IP address outside the pods (reached through the
uplink). With --queries, each line `FROM TO PORT PROTOCOL` of FILE (`-`: standard
input; blank lines and # comments skipped) is printed followed by a space and the
verdict. --explain prints the tables consulted on standard error.

Rules whose destination is a selector (fqdn:…, cidr:…: a CiliumNetworkPolicy's
toFQDNs, toCIDR, toCIDRSet) never match here: the identity they match is what
ferruled learns from DNS answers and CIDR policies, which an offline verdict does not
have. A connection only such a rule allows is `deny` offline; --explain names those
rules.

Examples:
  ferrulectl policy verdict --state s/ --from x/a --to y/b --port 80 --protocol TCP
  printf 'x/a y/b 80 TCP\\nx/a y/b 81 UDP\\n' | ferrulectl policy verdict --state s/ --queries -")]
    Verdict(VerdictArgs),

    /// Render the tables for a node's pods and apply them to ferruled once.
    #[command(long_about = "\
Render as `policy render` does and send the result to ferruled as one `acl.apply`
(replacing the whole ACL state: tables not in the rendering are removed). Prints what
the daemon changed. ferrule-agent does this on every change of a state directory.")]
    Apply(ApplyArgs),
}

/// Arguments of `policy render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// File or directory of Kubernetes manifests.
    #[arg(long, value_name = "PATH")]
    pub state: PathBuf,

    /// Render for the pods of this node (spec.nodeName); all pods when omitted.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
}

/// Arguments of `policy verdict`.
#[derive(Debug, Args)]
pub struct VerdictArgs {
    /// File or directory of Kubernetes manifests.
    #[arg(long, value_name = "PATH")]
    pub state: PathBuf,

    /// Client: NAMESPACE/POD or an IP address.
    #[arg(long, value_name = "NS/POD", required_unless_present = "queries")]
    pub from: Option<String>,

    /// Server: NAMESPACE/POD or an IP address.
    #[arg(long, value_name = "NS/POD", required_unless_present = "queries")]
    pub to: Option<String>,

    /// Destination port.
    #[arg(long, value_name = "N", required_unless_present = "queries",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,

    /// TCP, UDP or SCTP.
    #[arg(long, value_name = "PROTOCOL", required_unless_present = "queries")]
    pub protocol: Option<String>,

    /// Answer every line `FROM TO PORT PROTOCOL` of FILE (`-`: standard input).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["from", "to", "port", "protocol"])]
    pub queries: Option<PathBuf>,

    /// Print the tables each packet met on standard error.
    #[arg(long)]
    pub explain: bool,
}

/// Arguments of `policy apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// File or directory of Kubernetes manifests.
    #[arg(long, value_name = "PATH")]
    pub state: PathBuf,

    /// Render for the pods of this node; all pods when omitted.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,

    /// Validate and compile on the daemon, but do not apply.
    #[arg(long)]
    pub dry_run: bool,
}

fn usage(e: PolicyError) -> CtlError {
    CtlError::Usage(e.to_string())
}

/// Reads the state, printing the loader's warnings on stderr.
pub fn load_state(path: &Path) -> Result<Cache, PolicyError> {
    let (objects, warnings) = load_path(path)?;
    for w in warnings {
        eprintln!("ferrulectl: warning: {w}");
    }
    Ok(Cache::from_objects(objects))
}

/// Renders the `acl.apply` params for `node` (every pod when `None`).
pub fn render_state(path: &Path, node: Option<&str>) -> Result<(Engine, Value), PolicyError> {
    let engine = Engine::new(load_state(path)?, Local::from_option(node))?;
    let value = engine.rendered().to_apply().to_value();
    Ok((engine, value))
}

/// Parses `TCP`, `UDP` or `SCTP`.
fn protocol(text: &str) -> Result<L4, CtlError> {
    L4::parse(text).ok_or_else(|| CtlError::Usage(format!("{text:?}: expected TCP, UDP or SCTP")))
}

/// Runs a `policy` subcommand.
pub fn run(ctx: &mut Ctx<'_>, command: &PolicyCommand) -> Result<(), CtlError> {
    match command {
        PolicyCommand::Render(a) => {
            let (engine, value) = render_state(&a.state, a.node.as_deref()).map_err(usage)?;
            if ctx.json {
                return ctx.print_json(&value);
            }
            let r = engine.rendered();
            let yaml = serde_yaml::to_string(&value)
                .map_err(|e| CtlError::Usage(format!("cannot encode YAML: {e}")))?;
            ctx.print(&format!(
                "# ferrulectl policy render: {} pods{}, {} tables, {} rules\n{yaml}",
                r.pods.len(),
                a.node
                    .as_deref()
                    .map(|n| format!(" on node {n}"))
                    .unwrap_or_default(),
                r.tables.len(),
                r.rule_count()
            ))
        }
        PolicyCommand::Verdict(a) => verdict(ctx, a),
        PolicyCommand::Apply(a) => {
            let (_, mut value) = render_state(&a.state, a.node.as_deref()).map_err(usage)?;
            if a.dry_run {
                if let Value::Object(map) = &mut value {
                    map.insert("dry_run".into(), Value::Bool(true));
                }
            }
            ctx.query(acl_method::APPLY, value, |r: &AclApplied| {
                acl::render_applied(r)
            })
        }
    }
}

fn verdict(ctx: &mut Ctx<'_>, a: &VerdictArgs) -> Result<(), CtlError> {
    let mut v = Verdicts::new(load_state(&a.state).map_err(usage)?);
    let mut answer =
        |from: &str, to: &str, port: u16, proto: L4| -> Result<&'static str, CtlError> {
            let from = Endpoint::parse(from).map_err(usage)?;
            let to = Endpoint::parse(to).map_err(usage)?;
            let r = v.verdict(&from, &to, port, proto).map_err(usage)?;
            if a.explain {
                for line in &r.trace {
                    eprintln!("{line}");
                }
            }
            Ok(if r.allowed { "allow" } else { "deny" })
        };
    let Some(queries) = &a.queries else {
        let (Some(from), Some(to), Some(port), Some(proto)) = (&a.from, &a.to, a.port, &a.protocol)
        else {
            return Err(CtlError::Usage(
                "--from, --to, --port and --protocol are required without --queries".into(),
            ));
        };
        let verdict = answer(from, to, port, protocol(proto)?)?;
        return ctx.print(&format!("{verdict}\n"));
    };
    let file_err = |source| CtlError::File {
        path: queries.clone(),
        source,
    };
    let reader: Box<dyn Read> = if queries == Path::new("-") {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(queries).map_err(file_err)?)
    };
    for (n, line) in BufReader::new(reader).lines().enumerate() {
        let line = line.map_err(file_err)?;
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = text.split_whitespace().collect();
        let bad = |what: &str| {
            CtlError::Usage(format!(
                "{} line {}: {what} (expected FROM TO PORT PROTOCOL)",
                queries.display(),
                n + 1
            ))
        };
        let [from, to, port, proto] = fields[..] else {
            return Err(bad(&format!("{} fields", fields.len())));
        };
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| bad(&format!("{port:?} is not a port 1-65535")))?;
        let proto =
            L4::parse(proto).ok_or_else(|| bad(&format!("{proto:?} is not TCP, UDP or SCTP")))?;
        let verdict = answer(from, to, port, proto).map_err(|e| bad(&e.to_string()))?;
        ctx.print(&format!("{text} {verdict}\n"))?;
    }
    Ok(())
}
