//! `ferrulectl fqdn`: the FQDN policy state of ferruled — the names its DNS proxy
//! learned, the identities their addresses map to, the selectors the ACL rules name,
//! the DNS policies and the proxy's counters — and the renderers of the replies.
//!
//! The replies are decoded into this module's own types (not `ferrule_fqdn`'s, which
//! the client does not link): every field ferrulectl prints is required, fields it does
//! not know are ignored, and counters it does not know are printed after the known
//! ones. A reply that does not decode is reported with the path of the first bad
//! element (`names[2].ips[0]: missing field `expires``).

use super::{CtlError, Ctx};
use crate::table::Table;
use clap::Subcommand;
use ferrule_api::client::ClientError;
use ferrule_api::fqdn::ProxyCounters;
use ferrule_api::fqdn_method;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use std::time::{SystemTime, UNIX_EPOCH};

pub const FQDN_LONG_ABOUT: &str = "\
Show the FQDN policy state of ferruled: the DNS names its DNS proxy learned, the
identities their addresses map to, and the selectors the ACL rules name.

FQDN policy allows egress by DNS name (Cilium's toFQDNs: `*.example.com`) although the
addresses behind a name change every few seconds. The pods under a DNS policy (the
`dns` section of `acl apply`) have their UDP queries to the cluster DNS servers
([fqdn] dns_servers) answered through ferruled's DNS proxy, which refuses (REFUSED) the
names the policy does not allow and learns the addresses of the answers it hands back.
Each learned address is labelled with the FQDN selectors that select its name
(`fqdn:*.example.com`), and with the CIDR selectors whose prefix covers it
(`cidr:203.0.113.0/24`); each distinct set of labels is one numeric identity. ACL rules
whose `dst` is a selector match the destination's identity, so a new address of an
allowed name changes one entry of the IP -> identity map and no rule. Addresses are
learned before the answer reaches the pod, and forgotten once their TTL (at least
[fqdn] min_ttl) ran out and no tracked connection uses them.

The views:
  cache       each (name, address): seconds until it expires, its identity, the
              endpoints (pods) that looked the name up, the name's labels
  identities  each identity in use: its labels, references and prefixes, then the
              circuit breaker's counters (what DNS answers were refused)
  selectors   each selector in force with the identities it selects, then the DNS
              policies (port or pod -> allowed names), the DNS servers, and the DNS
              proxy's counters

With --json the daemon's reply is printed as it is. See docs/fqdn.md and the fqdn.*
methods of docs/control-protocol.md.";

/// `ferrulectl fqdn` subcommands.
#[derive(Debug, Subcommand)]
pub enum FqdnCommand {
    /// Names the DNS proxy learned, one line per address.
    #[command(long_about = "\
List the DNS cache of the name manager, one line per (name, address): the name
(lower case, no trailing dot), the address, the seconds until it expires (`expired`:
its TTL ran out, and a tracked connection still uses it or the next garbage collection
has not run yet), the identity the dataplane maps it to (`-`: no selector selects the
name, so it is cached but not allowed), the endpoints (pods, `namespace/name`, or
`port/NAME`) whose lookups gave it, and the name's labels (the `fqdn:` selectors that
select it). Then the number of names and addresses.

Example:
  $ ferrulectl fqdn cache
  NAME             ADDRESS      TTL  IDENTITY  ENDPOINTS      LABELS
  api.example.com  203.0.113.7   58  16777217  default/pod-a  fqdn:*.example.com
  1 names, 1 addresses")]
    Cache,

    /// Identities in use and the circuit breaker's counters.
    #[command(long_about = "\
List the identities in use: the number, its label set (`fqdn:`, `cidr:` and
`reserved:world` labels), its references (prefixes of the IP -> identity map, and one
held by each FQDN selector for the label set of the names only it selects), and how
many prefixes of the map have it. Local identities are numbered from 16777216 up; an
address no prefix covers has identity 2 (world).

Then the circuit breaker, which bounds what untrusted DNS answers may allocate:
ips_evicted_over_limit (addresses evicted from a name past [fqdn] max_ips_per_name),
ips_refused_over_limit (addresses of one answer beyond it), identities_refused
(addresses not learned because their label set would pass [fqdn]
max_fqdn_identities).")]
    Identities,

    /// Selectors and their identities, DNS policies, DNS servers, proxy counters.
    #[command(long_about = "\
List the selectors the ACL rules name (`fqdn:<matchPattern>`, `cidr:<prefix>`) with the
identities each selects now: a rule with that `dst` matches a destination whose
identity is one of them. Then the DNS policies in force (each port or pod under one,
and the names it may look up), the DNS servers whose queries go to the proxy ([fqdn]
dns_servers), and the DNS proxy's counters since ferruled started: queries punted to
it, refused (answered REFUSED), forwarded upstream, answered, addresses_learned,
malformed_queries, malformed_answers, upstream_timeouts, upstream_errors, reply_errors,
tcp_connections (DNS-over-TCP connections accepted), tcp_refused (reset at the
connection limit), and the queries pending an upstream answer now.")]
    Selectors,
}

/// Runs an `fqdn` subcommand.
pub fn run(ctx: &mut Ctx<'_>, command: &FqdnCommand) -> Result<(), CtlError> {
    match command {
        FqdnCommand::Cache => show(ctx, fqdn_method::CACHE, |c: &FqdnCache| {
            render_cache(c, now_secs())
        }),
        FqdnCommand::Identities => show(ctx, fqdn_method::IDENTITIES, render_identities),
        FqdnCommand::Selectors => show(ctx, fqdn_method::SELECTORS, render_selectors),
    }
}

/// Seconds since the Unix epoch (the clock of `expires`).
fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Calls `method` (no params) and prints the reply: as it is with `--json`, else
/// decoded and rendered.
fn show<T: Reply>(
    ctx: &mut Ctx<'_>,
    method: &str,
    render: impl FnOnce(&T) -> String,
) -> Result<(), CtlError> {
    let result = ctx.client()?.call(method, Value::Null)?;
    if ctx.json {
        return ctx.print_json(&result);
    }
    let reply = decode::<T>(&result)
        .map_err(|e| ClientError::Protocol(format!("result of `{method}`: {e}")))?;
    ctx.print(&render(&reply))
}

/// A reply of an `fqdn.*` method.
pub trait Reply: DeserializeOwned {
    /// Where in `v` the first element that does not decode is, with why.
    fn locate(v: &Value) -> Option<String>;
}

/// Decodes a reply; the error names the first bad element when it can.
pub fn decode<T: Reply>(v: &Value) -> Result<T, String> {
    serde_json::from_value(v.clone()).map_err(|e| T::locate(v).unwrap_or_else(|| e.to_string()))
}

/// The first element of the list `v[field]` that does not decode as `E`:
/// `field[i]: why`.
fn bad_item<E: DeserializeOwned>(v: &Value, field: &str) -> Option<String> {
    let items = v.get(field)?.as_array()?;
    items.iter().enumerate().find_map(|(i, item)| {
        serde_json::from_value::<E>(item.clone())
            .err()
            .map(|e| format!("{field}[{i}]: {e}"))
    })
}

/// `v[field]` if it does not decode as `F`: `field: why`.
fn bad_field<F: DeserializeOwned>(v: &Value, field: &str) -> Option<String> {
    let value = v.get(field)?;
    serde_json::from_value::<F>(value.clone())
        .err()
        .map(|e| format!("{field}: {e}"))
}

/// A label set: a list of `source:key` labels (a comma-separated string is accepted
/// too: the text form of a label set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(pub Vec<String>);

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            List(Vec<String>),
            Text(String),
        }
        match Form::deserialize(d) {
            Ok(Form::List(labels)) => Ok(Labels(labels)),
            Ok(Form::Text(text)) => Ok(Labels(
                text.split(',')
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect(),
            )),
            Err(_) => Err(serde::de::Error::custom(
                "labels: expected a list of labels (\"source:key\")",
            )),
        }
    }
}

impl Labels {
    /// The labels joined by `,` (the text form of a label set), `-` when none.
    fn text(&self) -> String {
        if self.0.is_empty() {
            "-".into()
        } else {
            self.0.join(",")
        }
    }
}

/// Result of `fqdn.cache`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FqdnCache {
    pub names: Vec<CachedName>,
}

/// One name of the cache.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CachedName {
    pub name: String,
    /// The `fqdn:` labels the name gives its addresses (none: no selector selects it).
    pub labels: Labels,
    /// The endpoints whose lookups gave the addresses.
    pub endpoints: Vec<String>,
    pub ips: Vec<CachedIp>,
}

/// One address of a name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CachedIp {
    pub ip: String,
    /// When its TTL runs out, in seconds since the Unix epoch.
    pub expires: u64,
    /// The identity the dataplane maps it to, if any.
    #[serde(default)]
    pub identity: Option<u32>,
}

impl Reply for FqdnCache {
    fn locate(v: &Value) -> Option<String> {
        bad_item::<CachedName>(v, "names").map(|e| {
            // One level deeper for the addresses: `names[i].ips[j]: why`.
            let items = v.get("names").and_then(Value::as_array);
            items
                .into_iter()
                .flatten()
                .enumerate()
                .find_map(|(i, n)| {
                    bad_item::<CachedIp>(n, "ips").map(|e| format!("names[{i}].{e}"))
                })
                .unwrap_or(e)
        })
    }
}

/// Result of `fqdn.identities`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FqdnIdentities {
    pub identities: Vec<IdentityRow>,
    pub breaker: BreakerCounters,
}

/// One identity in use.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct IdentityRow {
    pub id: u32,
    pub labels: Labels,
    pub refs: u64,
    /// Prefixes of the IP -> identity map that have it.
    pub prefixes: u64,
}

/// The circuit breaker's counters.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BreakerCounters {
    pub ips_evicted_over_limit: u64,
    pub ips_refused_over_limit: u64,
    pub identities_refused: u64,
    /// Counters this ferrulectl does not know (printed after the others).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Reply for FqdnIdentities {
    fn locate(v: &Value) -> Option<String> {
        bad_item::<IdentityRow>(v, "identities")
            .or_else(|| bad_field::<BreakerCounters>(v, "breaker"))
    }
}

/// Result of `fqdn.selectors`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FqdnSelectors {
    pub selectors: Vec<SelectorRow>,
    /// The DNS policies in force.
    pub dns: Vec<DnsPolicyRow>,
    /// `[fqdn] dns_servers`.
    pub dns_servers: Vec<String>,
    pub proxy: ProxyView,
    /// Queries waiting for an upstream answer.
    pub pending: u64,
}

/// One selector in force.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SelectorRow {
    /// `fqdn:<matchPattern>` or `cidr:<prefix>`.
    pub selector: String,
    pub identities: Vec<u32>,
}

/// The DNS policy of a port or a pod.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DnsPolicyRow {
    #[serde(default)]
    pub port: Option<String>,
    #[serde(default)]
    pub pod: Option<String>,
    /// The patterns of the names it may look up.
    pub allow: Vec<String>,
}

impl DnsPolicyRow {
    fn target(&self) -> String {
        match (&self.port, &self.pod) {
            (Some(port), _) => format!("port {port}"),
            (None, Some(pod)) => format!("pod {pod}"),
            (None, None) => "-".into(),
        }
    }
}

/// The DNS proxy's counters, and those this ferrulectl does not know.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ProxyView {
    #[serde(flatten)]
    pub counters: ProxyCounters,
    /// Counters this ferrulectl does not know (printed after the others).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Reply for FqdnSelectors {
    fn locate(v: &Value) -> Option<String> {
        bad_item::<SelectorRow>(v, "selectors")
            .or_else(|| bad_item::<DnsPolicyRow>(v, "dns"))
            .or_else(|| bad_field::<Vec<String>>(v, "dns_servers"))
            .or_else(|| bad_field::<ProxyView>(v, "proxy"))
    }
}

/// `-` for an empty list, else its items joined by `sep`.
fn list<T: ToString>(items: &[T], sep: &str) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(sep)
    }
}

/// A `COUNTER  COUNT` table: the known counters in order, then any other numeric
/// member of `other`.
fn counters_table(header: &str, known: &[(&str, u64)], other: &Map<String, Value>) -> Table {
    let mut t = Table::new([header, "COUNT"]);
    for (name, n) in known {
        t.row([name.to_string(), n.to_string()]);
    }
    for (name, v) in other {
        if let Some(n) = v.as_u64() {
            t.row([name.clone(), n.to_string()]);
        }
    }
    t
}

/// Seconds until `expires` (Unix seconds) at `now`; `expired` once it has passed.
pub fn format_ttl(expires: u64, now: u64) -> String {
    if expires > now {
        (expires - now).to_string()
    } else {
        "expired".into()
    }
}

/// Human output of `fqdn cache` at `now` (Unix seconds).
pub fn render_cache(c: &FqdnCache, now: u64) -> String {
    if c.names.is_empty() {
        return "no names cached\n".into();
    }
    let mut t = Table::new(["NAME", "ADDRESS", "TTL", "IDENTITY", "ENDPOINTS", "LABELS"]);
    let mut addresses = 0;
    for n in &c.names {
        let endpoints = list(&n.endpoints, ",");
        let labels = n.labels.text();
        if n.ips.is_empty() {
            t.row([n.name.as_str(), "-", "-", "-", &endpoints, &labels]);
        }
        for ip in &n.ips {
            addresses += 1;
            t.row([
                n.name.clone(),
                ip.ip.clone(),
                format_ttl(ip.expires, now),
                ip.identity.map_or_else(|| "-".into(), |id| id.to_string()),
                endpoints.clone(),
                labels.clone(),
            ]);
        }
    }
    format!("{t}{} names, {addresses} addresses\n", c.names.len())
}

/// Human output of `fqdn identities`.
pub fn render_identities(r: &FqdnIdentities) -> String {
    let mut out = if r.identities.is_empty() {
        "no identities\n".to_string()
    } else {
        let mut t = Table::new(["ID", "LABELS", "REFS", "PREFIXES"]);
        for i in &r.identities {
            t.row([
                i.id.to_string(),
                i.labels.text(),
                i.refs.to_string(),
                i.prefixes.to_string(),
            ]);
        }
        t.to_string()
    };
    let b = &r.breaker;
    out.push('\n');
    out.push_str(
        &counters_table(
            "BREAKER",
            &[
                ("ips_evicted_over_limit", b.ips_evicted_over_limit),
                ("ips_refused_over_limit", b.ips_refused_over_limit),
                ("identities_refused", b.identities_refused),
            ],
            &b.other,
        )
        .to_string(),
    );
    out
}

/// Human output of `fqdn selectors`.
pub fn render_selectors(r: &FqdnSelectors) -> String {
    let mut out = if r.selectors.is_empty() {
        "no selectors\n".to_string()
    } else {
        let mut t = Table::new(["SELECTOR", "IDENTITIES"]);
        for s in &r.selectors {
            t.row([s.selector.clone(), list(&s.identities, ",")]);
        }
        t.to_string()
    };
    out.push('\n');
    if r.dns.is_empty() {
        out.push_str("no DNS policies\n");
    } else {
        let mut t = Table::new(["DNS POLICY", "ALLOWED NAMES"]);
        for d in &r.dns {
            t.row([d.target(), list(&d.allow, ", ")]);
        }
        out.push_str(&t.to_string());
    }
    out.push_str(&format!(
        "DNS servers: {}\n\n",
        if r.dns_servers.is_empty() {
            "none ([fqdn] dns_servers is empty: no port can be under DNS policy)".to_string()
        } else {
            r.dns_servers.join(", ")
        }
    ));
    let p = &r.proxy.counters;
    let mut known = vec![
        ("queries", p.queries),
        ("refused", p.refused),
        ("forwarded", p.forwarded),
        ("answered", p.answered),
        ("addresses_learned", p.addresses_learned),
        ("malformed_queries", p.malformed_queries),
        ("malformed_answers", p.malformed_answers),
        ("upstream_timeouts", p.upstream_timeouts),
        ("upstream_errors", p.upstream_errors),
        ("reply_errors", p.reply_errors),
        ("tcp_connections", p.tcp_connections),
        ("tcp_refused", p.tcp_refused),
    ];
    known.push(("pending", r.pending));
    out.push_str(&counters_table("PROXY", &known, &r.proxy.other).to_string());
    out
}
