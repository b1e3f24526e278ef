//! CiliumNetworkPolicy (`cilium.io/v2`) input: validates a policy's `spec` and `specs`
//! and turns each into the cache's policy model ([`NetworkPolicy`] with `cilium` set),
//! so that the processor, configurator and renderer treat it like a NetworkPolicy.
//!
//! What is read, and how it maps:
//!
//! - `endpointSelector` → the pods of the policy's namespace it selects (label keys may
//!   carry the source `k8s:` or `any:`; `io.kubernetes.pod.namespace` is compared with
//!   the policy's namespace).
//! - `egress[]` / `ingress[]`: a non-empty list isolates the side (an allow-list, the
//!   union with every other policy selecting the pod); an empty rule (`{}`) allows
//!   nothing; a rule with `toPorts` and no peer allows those ports to (from) anything.
//! - `toEndpoints` / `fromEndpoints` → pod peers, in the policy's namespace unless the
//!   selector names `io.kubernetes.pod.namespace`; `io.cilium.k8s.namespace.labels.K`
//!   selects by the namespace's label `K`.
//! - `toFQDNs` → one [`Peer::Selector`] `fqdn:<pattern>` each; `toCIDR` → `cidr:<prefix>`;
//!   `toCIDRSet` → `cidr:` selectors of the prefix minus its `except` prefixes.
//!   `fromCIDR` / `fromCIDRSet` → ipBlock peers (source prefixes).
//! - `toPorts[].ports[]` (`port` number, range with `endPort`, or name; `protocol` TCP,
//!   UDP, SCTP or ANY, the default) and, on egress, `toPorts[].rules.dns` → the
//!   policy's `dns` patterns.
//!
//! Everything else is refused with the field's path (`spec.egress[0].toServices: not
//! supported …`), so that a policy is never enforced partly.

use super::cache::NAME_LABEL;
use super::cache::{decode, Key, NetworkPolicy, Peer, PolicyRule, PortRef, PortSpec, L4};
use super::selector::{Labels, Requirement, Selector};
use super::subnet;
use ferrule_api::acl::{join, type_name};
use ferrule_dataplane::acl::{PortRange, Prefix};
use ferrule_fqdn::{FqdnSelector, Selector as RemoteSelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value};

/// The `apiVersion` read.
pub const API_VERSION: &str = "cilium.io/v2";

/// What a CiliumNetworkPolicy's cache key starts with (`namespace/cnp:name`): a
/// Kubernetes object name has no `:`, so it never meets a NetworkPolicy's.
pub const KEY_PREFIX: &str = "cnp:";

/// The label Cilium gives every endpoint with its pod's namespace.
pub const NAMESPACE_KEY: &str = "io.kubernetes.pod.namespace";

/// Cilium's endpoint labels carrying the labels of the pod's namespace.
pub const NAMESPACE_LABELS_PREFIX: &str = "io.cilium.k8s.namespace.labels.";

/// A field path and what is wrong with it.
type Error = (String, String);

/// The cache key of a CiliumNetworkPolicy's `spec` (`spec: None`) or of its `specs[i]`:
/// `namespace/cnp:name`, `namespace/cnp:name:specs[i]`. Rules carry it as their origin.
pub fn key(namespace: &str, name: &str, spec: Option<usize>) -> Key {
    match spec {
        None => Key::new(namespace, &format!("{KEY_PREFIX}{name}")),
        Some(i) => Key::new(namespace, &format!("{KEY_PREFIX}{name}:specs[{i}]")),
    }
}

fn object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, Error> {
    v.as_object().ok_or_else(|| {
        (
            at.to_string(),
            format!("expected a map, found {}", type_name(v)),
        )
    })
}

/// A list field (`None` and null: empty).
fn list<'a>(v: Option<&'a Value>, at: &str) -> Result<&'a [Value], Error> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err((
            at.to_string(),
            format!("expected a list, found {}", type_name(other)),
        )),
    }
}

fn string<'a>(v: &'a Value, at: &str) -> Result<&'a str, Error> {
    v.as_str().ok_or_else(|| {
        (
            at.to_string(),
            format!("expected a string, found {}", type_name(v)),
        )
    })
}

/// Refuses a key of `map` that is not in `supported`.
fn supported_only(map: &Map<String, Value>, supported: &[&str], at: &str) -> Result<(), Error> {
    match map.keys().find(|k| !supported.contains(&k.as_str())) {
        Some(k) => Err((
            join(at, k),
            if supported.is_empty() {
                "not supported".to_string()
            } else {
                format!("not supported (supported here: {})", supported.join(", "))
            },
        )),
        None => Ok(()),
    }
}

/// Reads one CiliumNetworkPolicy object (a map whose `kind` is `CiliumNetworkPolicy`):
/// one policy per `spec` and `specs[i]`. Errors are (field path, detail).
pub fn parse(value: &Value, namespace: &str, name: &str) -> Result<Vec<NetworkPolicy>, Error> {
    let top = object(value, "(object)")?;
    match top.get("apiVersion") {
        Some(Value::String(v)) if v == API_VERSION => {}
        other => {
            return Err((
                "apiVersion".into(),
                format!(
                    "{}: expected {API_VERSION}",
                    other.map_or("missing".to_string(), |v| v.to_string())
                ),
            ))
        }
    }
    supported_only(
        top,
        &["apiVersion", "kind", "metadata", "spec", "specs", "status"],
        "",
    )?;
    if name.is_empty() {
        return Err(("metadata.name".into(), "required".into()));
    }
    let mut out = Vec::new();
    if let Some(spec) = top.get("spec").filter(|v| !v.is_null()) {
        out.push(spec_of(
            spec,
            "spec",
            namespace,
            key(namespace, name, None),
        )?);
    }
    for (i, spec) in list(top.get("specs"), "specs")?.iter().enumerate() {
        let at = format!("specs[{i}]");
        out.push(spec_of(
            spec,
            &at,
            namespace,
            key(namespace, name, Some(i)),
        )?);
    }
    if out.is_empty() {
        return Err(("spec".into(), "required (spec or specs)".into()));
    }
    Ok(out)
}

/// One rule (`spec` or an element of `specs`).
fn spec_of(v: &Value, at: &str, namespace: &str, key: Key) -> Result<NetworkPolicy, Error> {
    let m = object(v, at)?;
    supported_only(
        m,
        &[
            "endpointSelector",
            "ingress",
            "egress",
            "description",
            "labels",
        ],
        at,
    )?;
    let sel_at = join(at, "endpointSelector");
    let selector = m
        .get("endpointSelector")
        .filter(|v| !v.is_null())
        .ok_or_else(|| {
            (
                sel_at.clone(),
                "required (nodeSelector is not supported)".to_string(),
            )
        })?;
    let pod_selector = endpoint_selector(selector, &sel_at, namespace)?;
    let mut dns = Vec::new();
    let mut side = |field: &str, egress: bool| -> Result<Option<Vec<PolicyRule>>, Error> {
        let field_at = join(at, field);
        let rules = list(m.get(field), &field_at)?;
        if rules.is_empty() {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(rules.len());
        for (i, r) in rules.iter().enumerate() {
            out.push(rule_of(
                r,
                &format!("{field_at}[{i}]"),
                namespace,
                egress,
                &mut dns,
            )?);
        }
        Ok(Some(out))
    };
    let ingress = side("ingress", false)?;
    let egress = side("egress", true)?;
    dns.sort();
    dns.dedup();
    Ok(NetworkPolicy {
        key,
        cilium: true,
        pod_selector,
        ingress,
        egress,
        dns,
    })
}

/// One `ingress[]` or `egress[]` rule; `rules.dns` patterns are added to `dns`.
fn rule_of(
    v: &Value,
    at: &str,
    namespace: &str,
    egress: bool,
    dns: &mut Vec<String>,
) -> Result<PolicyRule, Error> {
    let m = object(v, at)?;
    let (endpoints, cidr, cidr_set) = if egress {
        ("toEndpoints", "toCIDR", "toCIDRSet")
    } else {
        ("fromEndpoints", "fromCIDR", "fromCIDRSet")
    };
    let supported: &[&str] = if egress {
        &["toEndpoints", "toCIDR", "toCIDRSet", "toFQDNs", "toPorts"]
    } else {
        &["fromEndpoints", "fromCIDR", "fromCIDRSet", "toPorts"]
    };
    supported_only(m, supported, at)?;
    let mut peers = Vec::new();
    let mut l3 = false;
    let field = |f: &str| join(at, f);

    let items = list(m.get(endpoints), &field(endpoints))?;
    l3 |= !items.is_empty();
    for (j, s) in items.iter().enumerate() {
        peers.push(endpoints_peer(
            s,
            &format!("{}[{j}]", field(endpoints)),
            namespace,
        )?);
    }

    let items = list(m.get(cidr), &field(cidr))?;
    l3 |= !items.is_empty();
    for (j, c) in items.iter().enumerate() {
        let item_at = format!("{}[{j}]", field(cidr));
        let prefix = subnet::parse_cidr(string(c, &item_at)?).map_err(|d| (item_at, d))?;
        peers.push(if egress {
            Peer::Selector(cidr_selector(prefix))
        } else {
            Peer::Block {
                cidr: prefix,
                pieces: vec![prefix],
            }
        });
    }

    let items = list(m.get(cidr_set), &field(cidr_set))?;
    l3 |= !items.is_empty();
    for (j, s) in items.iter().enumerate() {
        let item_at = format!("{}[{j}]", field(cidr_set));
        let (prefix, pieces) = cidr_set_of(s, &item_at)?;
        if egress {
            peers.extend(pieces.into_iter().map(|p| Peer::Selector(cidr_selector(p))));
        } else {
            peers.push(Peer::Block {
                cidr: prefix,
                pieces,
            });
        }
    }

    if egress {
        let items = list(m.get("toFQDNs"), &field("toFQDNs"))?;
        l3 |= !items.is_empty();
        for (j, f) in items.iter().enumerate() {
            let item_at = format!("{}[{j}]", field("toFQDNs"));
            let selector = fqdn_selector(f, &item_at)?;
            peers.push(Peer::Selector(RemoteSelector::Fqdn(selector).to_string()));
        }
    }

    let to_ports = list(m.get("toPorts"), &field("toPorts"))?;
    let mut ports = Vec::new();
    for (k, tp) in to_ports.iter().enumerate() {
        let tp_at = format!("{}[{k}]", field("toPorts"));
        let tm = object(tp, &tp_at)?;
        supported_only(tm, &["ports", "rules"], &tp_at)?;
        let list_at = join(&tp_at, "ports");
        let specs = list(tm.get("ports"), &list_at)?;
        if specs.is_empty() {
            return Err((list_at, "required: at least one port".into()));
        }
        for (n, p) in specs.iter().enumerate() {
            ports.extend(port_specs(p, &format!("{list_at}[{n}]"))?);
        }
        if let Some(rules) = tm.get("rules").filter(|v| !v.is_null()) {
            let rules_at = join(&tp_at, "rules");
            let rm = object(rules, &rules_at)?;
            supported_only(rm, if egress { &["dns"] } else { &[] }, &rules_at)?;
            let dns_at = join(&rules_at, "dns");
            for (n, d) in list(rm.get("dns"), &dns_at)?.iter().enumerate() {
                let selector = fqdn_selector(d, &format!("{dns_at}[{n}]"))?;
                dns.push(selector.as_str().to_string());
            }
        }
    }

    // No peer field: every peer if the rule names ports, else nothing (an empty rule
    // selects nothing). A peer field whose entries come to nothing (a `toCIDRSet`
    // whose `except` covers it) allows nothing either.
    let peers = match (l3, to_ports.is_empty()) {
        (true, _) => Some(peers),
        (false, false) => None,
        (false, true) => Some(Vec::new()),
    };
    Ok(PolicyRule {
        peers,
        ports: (!to_ports.is_empty()).then_some(ports),
    })
}

/// The canonical `cidr:` selector of a prefix.
fn cidr_selector(prefix: Prefix) -> String {
    // `Prefix`'s text is a valid prefix: parsing it again cannot fail.
    RemoteSelector::parse(&format!("cidr:{prefix}"))
        .map_or_else(|_| format!("cidr:{prefix}"), |s| s.to_string())
}

/// A `toCIDRSet` / `fromCIDRSet` entry: its prefix and the pieces left after `except`.
fn cidr_set_of(v: &Value, at: &str) -> Result<(Prefix, Vec<Prefix>), Error> {
    let m = object(v, at)?;
    supported_only(m, &["cidr", "except"], at)?;
    let cidr_at = join(at, "cidr");
    let text = m.get("cidr").ok_or_else(|| {
        (
            cidr_at.clone(),
            "required (cidrGroupRef is not supported)".into(),
        )
    })?;
    let prefix = subnet::parse_cidr(string(text, &cidr_at)?).map_err(|d| (cidr_at, d))?;
    let except_at = join(at, "except");
    let mut holes = Vec::new();
    for (x, e) in list(m.get("except"), &except_at)?.iter().enumerate() {
        let field = format!("{except_at}[{x}]");
        let text = string(e, &field)?;
        let hole = subnet::parse_cidr(text).map_err(|d| (field.clone(), d))?;
        if !subnet::contains(prefix, hole) || hole == prefix {
            return Err((
                field,
                format!("{text} is not strictly inside cidr {prefix}"),
            ));
        }
        holes.push(hole);
    }
    Ok((prefix, subnet::subtract(prefix, &holes)))
}

/// A `{matchName | matchPattern}` map (`toFQDNs[]`, `rules.dns[]`).
fn fqdn_selector(v: &Value, at: &str) -> Result<FqdnSelector, Error> {
    let m = object(v, at)?;
    supported_only(m, &["matchName", "matchPattern"], at)?;
    let text = |f: &str| -> Result<Option<&str>, Error> {
        m.get(f)
            .filter(|v| !v.is_null())
            .map(|v| string(v, &join(at, f)))
            .transpose()
    };
    let (name, pattern) = (text("matchName")?, text("matchPattern")?);
    FqdnSelector::from_fields(name, pattern).map_err(|e| {
        let message = e.to_string();
        match (name, pattern) {
            (Some(_), None) | (None, Some(_)) => {
                let f = if name.is_some() {
                    "matchName"
                } else {
                    "matchPattern"
                };
                let detail = message
                    .strip_prefix(&format!("{f}: "))
                    .unwrap_or(&message)
                    .to_string();
                (join(at, f), detail)
            }
            _ => (at.to_string(), message),
        }
    })
}

/// A `toPorts[].ports[]` entry: one spec per protocol (`ANY`, the default: TCP, UDP
/// and SCTP).
fn port_specs(v: &Value, at: &str) -> Result<Vec<PortSpec>, Error> {
    let m = object(v, at)?;
    supported_only(m, &["port", "protocol", "endPort"], at)?;
    let protos: Vec<L4> = match m.get("protocol").filter(|v| !v.is_null()) {
        None => L4::ALL.to_vec(),
        Some(p) => {
            let proto_at = join(at, "protocol");
            let text = string(p, &proto_at)?;
            if text.eq_ignore_ascii_case("ANY") {
                L4::ALL.to_vec()
            } else {
                vec![L4::parse(text).ok_or_else(|| {
                    (
                        proto_at,
                        format!("{text:?}: expected TCP, UDP, SCTP or ANY"),
                    )
                })?]
            }
        }
    };
    let port_at = join(at, "port");
    let number = |n: i64, field: &str| -> Result<u16, Error> {
        u16::try_from(n).map_err(|_| (join(at, field), format!("{n} is not a port 0-65535")))
    };
    // `None`: every port (no port, or 0); a number; or a name.
    let port: Option<Result<u16, String>> = match m.get("port").filter(|v| !v.is_null()) {
        None => None,
        Some(Value::Number(n)) => {
            let n = n
                .as_i64()
                .ok_or_else(|| (port_at.clone(), format!("{n} is not a port 0-65535")))?;
            Some(Ok(number(n, "port")?)).filter(|p| *p != Ok(0))
        }
        Some(Value::String(s)) => match s.trim().parse::<i64>() {
            Ok(n) => Some(Ok(number(n, "port")?)).filter(|p| *p != Ok(0)),
            Err(_) => {
                let valid = !s.is_empty()
                    && s.len() <= 15
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && s.chars().any(|c| c.is_ascii_lowercase());
                if !valid {
                    return Err((
                        port_at,
                        format!(
                            "{s:?} is neither a port number nor a port name (1-15 of a-z 0-9 -)"
                        ),
                    ));
                }
                Some(Err(s.clone()))
            }
        },
        Some(other) => {
            return Err((
                port_at,
                format!("expected a number or a name, found {}", type_name(other)),
            ))
        }
    };
    let end = match m.get("endPort").filter(|v| !v.is_null()) {
        None => None,
        Some(Value::Number(n)) => Some(number(n.as_i64().unwrap_or(-1), "endPort")?),
        Some(other) => {
            return Err((
                join(at, "endPort"),
                format!("expected a number, found {}", type_name(other)),
            ))
        }
    };
    let port = match (port, end) {
        (None, None) => PortRef::All,
        (None, Some(_)) => {
            return Err((
                join(at, "endPort"),
                "endPort needs a port number 1-65535".into(),
            ))
        }
        (Some(Err(_)), Some(_)) => {
            return Err((
                join(at, "endPort"),
                "endPort cannot be used with a named port".into(),
            ))
        }
        (Some(Err(name)), None) => PortRef::Named(name),
        (Some(Ok(lo)), end) => {
            let hi = end.unwrap_or(lo);
            if hi < lo {
                return Err((
                    join(at, "endPort"),
                    format!("endPort {hi} is below port {lo}"),
                ));
            }
            PortRef::Range(PortRange { lo, hi })
        }
    };
    Ok(protos
        .into_iter()
        .map(|proto| PortSpec {
            proto,
            port: port.clone(),
        })
        .collect())
}

/// A Cilium endpoint selector split by what its keys are about.
#[derive(Debug, Default)]
struct Split {
    /// Requirements on the pod's own labels.
    pods: Selector,
    /// Requirements on the pod's namespace: its name as [`NAME_LABEL`], its labels.
    namespaces: Selector,
    /// Whether a key was `io.kubernetes.pod.namespace`.
    names_namespace: bool,
    /// Whether a key was `io.cilium.k8s.namespace.labels.*`.
    namespace_labels: bool,
}

/// Where a selector key points.
enum Target {
    Pod(String),
    NamespaceName,
    NamespaceLabel(String),
}

/// The meaning of a Cilium label key: an optional source `k8s:` / `any:`, then a pod
/// label, the namespace key, or a namespace label.
fn target_of(key: &str) -> Result<Target, String> {
    let bare = key
        .strip_prefix("k8s:")
        .or_else(|| key.strip_prefix("any:"))
        .unwrap_or(key);
    if let Some((source, _)) = bare.split_once(':') {
        return Err(format!(
            "{key:?}: label source {source:?} is not supported (k8s: or any:)"
        ));
    }
    if bare == NAMESPACE_KEY {
        return Ok(Target::NamespaceName);
    }
    if let Some(label) = bare.strip_prefix(NAMESPACE_LABELS_PREFIX) {
        return Ok(Target::NamespaceLabel(label.to_string()));
    }
    if bare.starts_with("io.cilium.") {
        return Err(format!("{key:?}: Cilium's own labels are not supported"));
    }
    Ok(Target::Pod(bare.to_string()))
}

fn requirement_key(r: &Requirement) -> &str {
    match r {
        Requirement::In(k, _)
        | Requirement::NotIn(k, _)
        | Requirement::Exists(k)
        | Requirement::DoesNotExist(k) => k,
    }
}

fn with_key(r: Requirement, key: String) -> Requirement {
    match r {
        Requirement::In(_, v) => Requirement::In(key, v),
        Requirement::NotIn(_, v) => Requirement::NotIn(key, v),
        Requirement::Exists(_) => Requirement::Exists(key),
        Requirement::DoesNotExist(_) => Requirement::DoesNotExist(key),
    }
}

/// Validates a Cilium label selector and splits it ([`Split`]).
fn split_selector(v: &Value, at: &str) -> Result<Split, Error> {
    let m = object(v, at)?;
    supported_only(m, &["matchLabels", "matchExpressions"], at)?;
    let ls: LabelSelector = decode(v.clone()).map_err(|(f, d)| (join(at, &f), d))?;
    let parsed = Selector::parse(&ls).map_err(|(f, d)| (join(at, &f), d))?;
    let mut out = Split::default();
    for (k, value) in parsed.labels {
        let target = target_of(&k).map_err(|d| (join(at, &format!("matchLabels.{k}")), d))?;
        match target {
            Target::Pod(key) => out.pods.labels.push((key, value)),
            Target::NamespaceName => {
                out.names_namespace = true;
                out.namespaces.labels.push((NAME_LABEL.to_string(), value));
            }
            Target::NamespaceLabel(key) => {
                out.namespace_labels = true;
                out.namespaces.labels.push((key, value));
            }
        }
    }
    for (i, r) in parsed.requirements.into_iter().enumerate() {
        let target = target_of(requirement_key(&r))
            .map_err(|d| (join(at, &format!("matchExpressions[{i}].key")), d))?;
        match target {
            Target::Pod(key) => out.pods.requirements.push(with_key(r, key)),
            Target::NamespaceName => {
                out.names_namespace = true;
                out.namespaces
                    .requirements
                    .push(with_key(r, NAME_LABEL.to_string()));
            }
            Target::NamespaceLabel(key) => {
                out.namespace_labels = true;
                out.namespaces.requirements.push(with_key(r, key));
            }
        }
    }
    Ok(out)
}

/// `endpointSelector`: the pods of the policy's namespace it selects. A requirement
/// on the namespace key is decided here, against the policy's namespace.
fn endpoint_selector(v: &Value, at: &str, namespace: &str) -> Result<Selector, Error> {
    let split = split_selector(v, at)?;
    if split.namespace_labels {
        return Err((
            at.to_string(),
            format!("{NAMESPACE_LABELS_PREFIX}* keys are not supported in endpointSelector"),
        ));
    }
    let own = Labels::from([(NAME_LABEL.to_string(), namespace.to_string())]);
    let mut pods = split.pods;
    if !split.namespaces.matches(&own) {
        // Selects nothing: no value is in an empty list.
        pods.requirements
            .push(Requirement::In(NAME_LABEL.to_string(), Vec::new()));
    }
    Ok(pods)
}

/// A `toEndpoints[]` / `fromEndpoints[]` selector: pods of the policy's namespace
/// unless it names the namespace key.
fn endpoints_peer(v: &Value, at: &str, namespace: &str) -> Result<Peer, Error> {
    let split = split_selector(v, at)?;
    let namespaces = if split.names_namespace {
        Some(split.namespaces)
    } else if split.namespaces.is_empty() {
        None
    } else {
        let mut ns = split.namespaces;
        ns.labels
            .push((NAME_LABEL.to_string(), namespace.to_string()));
        Some(ns)
    };
    Ok(Peer::Pods {
        namespaces,
        pods: split.pods,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{parse_text, Object};

    fn policies(text: &str) -> Result<Vec<NetworkPolicy>, String> {
        let (objects, _) = parse_text(text, "t.yaml").map_err(|e| e.to_string())?;
        Ok(objects
            .into_iter()
            .filter_map(|o| match o {
                Object::Policy(p) => Some(p),
                _ => None,
            })
            .collect())
    }

    fn cnp(spec: &str) -> String {
        format!("apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {{name: p, namespace: x}}\nspec:\n{spec}")
    }

    /// The seed's selectors (issue 22's design notes): `*.cilium.io` and
    /// `www.cilium.io`, the CIDRs 192.0.2.0/24 and 192.0.2.128/25, 52.58.254.0/24
    /// overlapping the names, and DNS through kube-dns.
    pub(crate) const SEED: &str = r#"
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: crawler, namespace: app}
spec:
  endpointSelector: {matchLabels: {k8s:app: crawler}}
  egress:
  - toEndpoints:
    - matchLabels: {k8s:io.kubernetes.pod.namespace: kube-system, k8s:k8s-app: kube-dns}
    toPorts:
    - ports: [{port: "53", protocol: ANY}]
      rules:
        dns:
        - matchPattern: "*.cilium.io"
        - matchName: www.cilium.io
        - matchName: One.One.One.One.
  - toFQDNs: [{matchPattern: "*.cilium.io"}, {matchName: www.cilium.io}]
    toPorts: [{ports: [{port: "443", protocol: TCP}]}]
  - toCIDR: [192.0.2.0/24, 192.0.2.128/25, 52.58.254.0/24]
  - toCIDRSet: [{cidr: 192.168.0.0/24, except: [192.168.0.128/25]}]
"#;

    #[test]
    fn the_seeds_selectors_parse_into_one_policy() {
        let p = policies(SEED).unwrap();
        assert_eq!(p.len(), 1);
        let p = &p[0];
        assert_eq!(p.key, Key::new("app", "cnp:crawler"));
        assert!(p.cilium);
        assert!(p.ingress.is_none(), "no ingress section: not isolated");
        assert_eq!(p.pod_selector.labels, [("app".into(), "crawler".into())]);
        assert_eq!(
            p.dns,
            ["*.cilium.io", "one.one.one.one", "www.cilium.io"],
            "canonical, sorted"
        );
        let eg = p.egress.as_ref().unwrap();
        assert_eq!(eg.len(), 4);
        let Some(peers) = &eg[0].peers else { panic!() };
        let Peer::Pods { namespaces, pods } = &peers[0] else {
            panic!()
        };
        assert_eq!(
            namespaces.as_ref().unwrap().labels,
            [(NAME_LABEL.to_string(), "kube-system".to_string())]
        );
        assert_eq!(pods.labels, [("k8s-app".into(), "kube-dns".into())]);
        let ports = eg[0].ports.as_ref().unwrap();
        assert_eq!(
            ports.iter().map(|p| p.proto).collect::<Vec<_>>(),
            L4::ALL,
            "ANY is TCP, UDP and SCTP"
        );
        let selectors = |i: usize| -> Vec<String> {
            eg[i]
                .peers
                .iter()
                .flatten()
                .map(|p| match p {
                    Peer::Selector(s) => s.clone(),
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        assert_eq!(selectors(1), ["fqdn:*.cilium.io", "fqdn:www.cilium.io"]);
        assert_eq!(
            selectors(2),
            [
                "cidr:192.0.2.0/24",
                "cidr:192.0.2.128/25",
                "cidr:52.58.254.0/24"
            ]
        );
        assert_eq!(selectors(3), ["cidr:192.168.0.0/25"]);
        assert!(eg[2].ports.is_none(), "no toPorts: every port");
    }

    #[test]
    fn the_seeds_match_name_with_a_star_is_a_pattern_not_a_name() {
        // The design notes write `matchName: *.com`; a name has no wildcard.
        let e = policies(&cnp(
            "  endpointSelector: {}\n  egress: [{toFQDNs: [{matchName: \"*.com\"}]}]\n",
        ))
        .unwrap_err();
        assert!(e.contains("spec.egress[0].toFQDNs[0].matchName: "), "{e}");
        let p = policies(&cnp(
            "  endpointSelector: {}\n  egress: [{toFQDNs: [{matchPattern: \"*.com\"}, {matchPattern: \"*.io\"}]}]\n",
        ))
        .unwrap();
        let peers = p[0].egress.as_ref().unwrap()[0].peers.clone().unwrap();
        assert_eq!(
            peers,
            [
                Peer::Selector("fqdn:*.com".into()),
                Peer::Selector("fqdn:*.io".into())
            ]
        );
    }

    #[test]
    fn refused_policies_name_the_object_and_the_field() {
        let cases: &[(&str, &str)] = &[
            ("  endpointSelector: {}\n  egress: [{toServices: [{k8sService: {serviceName: a}}]}]\n", "spec.egress[0].toServices: not supported"),
            ("  endpointSelector: {}\n  egress: [{toEntities: [world]}]\n", "spec.egress[0].toEntities: not supported"),
            ("  endpointSelector: {}\n  egress: [{toGroups: [{aws: {}}]}]\n", "spec.egress[0].toGroups: not supported"),
            ("  endpointSelector: {}\n  egress: [{icmps: [{fields: [{type: 8}]}]}]\n", "spec.egress[0].icmps: not supported"),
            ("  endpointSelector: {}\n  egressDeny: [{toCIDR: [10.0.0.0/8]}]\n", "spec.egressDeny: not supported"),
            ("  endpointSelector: {}\n  ingressDeny: [{}]\n", "spec.ingressDeny: not supported"),
            ("  endpointSelector: {}\n  enableDefaultDeny: {egress: false}\n", "spec.enableDefaultDeny: not supported"),
            ("  nodeSelector: {}\n", "spec.nodeSelector: not supported"),
            ("  description: no selector\n", "spec.endpointSelector: required"),
            ("  endpointSelector: {}\n  ingress: [{fromEntities: [cluster]}]\n", "spec.ingress[0].fromEntities: not supported"),
            ("  endpointSelector: {}\n  ingress: [{toPorts: [{ports: [{port: \"53\"}], rules: {dns: [{matchName: a.b}]}}]}]\n", "spec.ingress[0].toPorts[0].rules.dns: not supported"),
            ("  endpointSelector: {}\n  egress: [{toPorts: [{ports: [{port: \"80\"}], rules: {http: [{method: GET}]}}]}]\n", "spec.egress[0].toPorts[0].rules.http: not supported"),
            ("  endpointSelector: {}\n  egress: [{toPorts: [{ports: [{port: \"443\"}], serverNames: [a.b]}]}]\n", "spec.egress[0].toPorts[0].serverNames: not supported"),
            ("  endpointSelector: {}\n  egress: [{toPorts: [{rules: {dns: [{matchPattern: \"*\"}]}}]}]\n", "spec.egress[0].toPorts[0].ports: required"),
            ("  endpointSelector: {}\n  egress: [{toFQDNs: [{matchName: a.example.com}, {matchPattern: \"a..com\"}]}]\n", "spec.egress[0].toFQDNs[1].matchPattern: \"a..com\" has an empty label"),
            ("  endpointSelector: {}\n  egress: [{toFQDNs: [{matchPattern: \"**.example.com\"}]}]\n", "spec.egress[0].toFQDNs[0].matchPattern: "),
            ("  endpointSelector: {}\n  egress: [{toFQDNs: [{matchPattern: \"a b.com\"}]}]\n", "spec.egress[0].toFQDNs[0].matchPattern: "),
            ("  endpointSelector: {}\n  egress: [{toFQDNs: [{matchName: a.com, matchPattern: \"*.com\"}]}]\n", "spec.egress[0].toFQDNs[0]: exactly one of matchName and matchPattern"),
            ("  endpointSelector: {}\n  egress: [{toFQDNs: [{}]}]\n", "spec.egress[0].toFQDNs[0]: exactly one of matchName and matchPattern"),
            ("  endpointSelector: {}\n  egress: [{toFQDNs: [{matchName: 7}]}]\n", "spec.egress[0].toFQDNs[0].matchName: expected a string"),
            ("  endpointSelector: {}\n  egress: [{toCIDR: [10.0.0.0/33]}]\n", "spec.egress[0].toCIDR[0]: "),
            ("  endpointSelector: {}\n  egress: [{toCIDRSet: [{cidr: 10.0.0.0/24, except: [10.1.0.0/26]}]}]\n", "spec.egress[0].toCIDRSet[0].except[0]: 10.1.0.0/26 is not strictly inside cidr 10.0.0.0/24"),
            ("  endpointSelector: {}\n  egress: [{toCIDRSet: [{cidrGroupRef: g}]}]\n", "spec.egress[0].toCIDRSet[0].cidrGroupRef: not supported"),
            ("  endpointSelector: {}\n  ingress: [{fromCIDRSet: [{cidr: nonsense}]}]\n", "spec.ingress[0].fromCIDRSet[0].cidr: "),
            ("  endpointSelector: {}\n  egress: [{toPorts: [{ports: [{port: \"53\", protocol: ICMP}]}]}]\n", "spec.egress[0].toPorts[0].ports[0].protocol: \"ICMP\": expected TCP, UDP, SCTP or ANY"),
            ("  endpointSelector: {}\n  egress: [{toPorts: [{ports: [{port: \"70000\"}]}]}]\n", "spec.egress[0].toPorts[0].ports[0].port: 70000 is not a port"),
            ("  endpointSelector: {}\n  egress: [{toPorts: [{ports: [{port: \"90\", endPort: 80}]}]}]\n", "spec.egress[0].toPorts[0].ports[0].endPort: endPort 80 is below port 90"),
            ("  endpointSelector: {}\n  egress: [{toPorts: [{ports: [{port: \"Not_A_Name\"}]}]}]\n", "spec.egress[0].toPorts[0].ports[0].port: "),
            ("  endpointSelector: {}\n  egress: [{toPorts: [{ports: [{port: \"53\"}], rules: {dns: [{matchPattern: \"a..b\"}]}}]}]\n", "spec.egress[0].toPorts[0].rules.dns[0].matchPattern: "),
            ("  endpointSelector: {}\n  egress: [{toEndpoints: [{matchLabels: {reserved:host: \"\"}}]}]\n", "spec.egress[0].toEndpoints[0].matchLabels.reserved:host: "),
            ("  endpointSelector: {}\n  egress: [{toEndpoints: [{matchExpressions: [{key: io.cilium.k8s.policy.serviceaccount, operator: Exists}]}]}]\n", "spec.egress[0].toEndpoints[0].matchExpressions[0].key: "),
            ("  endpointSelector: {matchExpressions: [{key: app, operator: Has}]}\n", "spec.endpointSelector.matchExpressions[0].operator: "),
            ("  endpointSelector: {matchLabels: {io.cilium.k8s.namespace.labels.team: red}}\n", "spec.endpointSelector: "),
            ("  endpointSelector: {matchName: x}\n", "spec.endpointSelector.matchName: not supported"),
            ("  endpointSelector: {}\n  egress: {toCIDR: [10.0.0.0/8]}\n", "spec.egress: expected a list"),
        ];
        for (spec, want) in cases {
            let e = policies(&cnp(spec)).unwrap_err();
            assert!(
                e.starts_with("CiliumNetworkPolicy x/p: ") && e.contains(want),
                "{spec}\n  wants {want}\n  got {e}"
            );
        }
        let e = policies("apiVersion: cilium.io/v1\nkind: CiliumNetworkPolicy\nmetadata: {name: p, namespace: x}\nspec: {endpointSelector: {}}\n").unwrap_err();
        assert!(e.contains("CiliumNetworkPolicy x/p: apiVersion: "), "{e}");
        let e = policies("apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: p, namespace: x}\nspecs:\n- {endpointSelector: {}}\n- {endpointSelector: {}, egress: [{toRequires: [{}]}]}\n").unwrap_err();
        assert!(
            e.contains("specs[1].egress[0].toRequires: not supported"),
            "{e}"
        );
        let e = policies("apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: p, namespace: x}\n").unwrap_err();
        assert!(e.contains("x/p: spec: required"), "{e}");
    }

    #[test]
    fn rules_ports_and_isolation_follow_cilium() {
        let p = policies(&cnp(
            "  endpointSelector: {matchExpressions: [{key: k8s:io.kubernetes.pod.namespace, operator: In, values: [y]}]}\n  egress:\n  - {}\n  - toPorts: [{ports: [{port: \"80\"}, {port: 8000, endPort: 8080, protocol: UDP}, {port: http, protocol: TCP}, {port: \"0\", protocol: SCTP}]}]\n  ingress: []\n",
        ))
        .unwrap();
        let p = &p[0];
        assert!(p.ingress.is_none(), "ingress: [] does not isolate");
        assert!(
            !p.pod_selector.matches(&Labels::new()),
            "a namespace requirement other than the policy's own selects nothing"
        );
        let eg = p.egress.as_ref().unwrap();
        assert_eq!(
            eg[0].peers,
            Some(Vec::new()),
            "an empty rule allows nothing"
        );
        assert_eq!(eg[0].ports, None);
        assert_eq!(eg[1].peers, None, "ports alone: every peer");
        let ports = eg[1].ports.as_ref().unwrap();
        let want = [
            (L4::Tcp, PortRef::Range(PortRange::single(80))),
            (L4::Udp, PortRef::Range(PortRange::single(80))),
            (L4::Sctp, PortRef::Range(PortRange::single(80))),
            (L4::Udp, PortRef::Range(PortRange { lo: 8000, hi: 8080 })),
            (L4::Tcp, PortRef::Named("http".into())),
            (L4::Sctp, PortRef::All),
        ];
        assert_eq!(
            ports
                .iter()
                .map(|s| (s.proto, s.port.clone()))
                .collect::<Vec<_>>(),
            want
        );
        let own = policies(&cnp(
            "  endpointSelector: {matchLabels: {io.kubernetes.pod.namespace: x, any:app: a}}\n  ingress: [{fromCIDRSet: [{cidr: 10.0.0.0/24, except: [10.0.0.0/25]}], fromCIDR: [\"fd00::/64\"]}]\n",
        ))
        .unwrap();
        let app_a = Labels::from([("app".to_string(), "a".to_string())]);
        assert!(own[0].pod_selector.matches(&app_a));
        let peers = own[0].ingress.as_ref().unwrap()[0].peers.clone().unwrap();
        assert!(
            matches!(&peers[..], [Peer::Block { .. }, Peer::Block { .. }]),
            "fromCIDR and fromCIDRSet are source prefixes: {peers:?}"
        );
    }

    #[test]
    fn specs_are_one_policy_each_and_lists_are_read() {
        let text = "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicyList\nitems:\n- apiVersion: cilium.io/v2\n  kind: CiliumNetworkPolicy\n  metadata: {name: p, namespace: x}\n  spec: {endpointSelector: {}}\n  specs:\n  - {endpointSelector: {matchLabels: {a: b}}, egress: [{toCIDR: [10.0.0.0/8]}]}\n";
        let p = policies(text).unwrap();
        let keys: Vec<String> = p.iter().map(|p| p.key.to_string()).collect();
        assert_eq!(keys, ["x/cnp:p", "x/cnp:p:specs[0]"]);
        assert!(p[0].egress.is_none() && p[1].egress.is_some());
    }
}
