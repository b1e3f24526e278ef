//! The policy cache (the seed's top layer): Namespaces, Pods, NetworkPolicies and
//! CiliumNetworkPolicies read from standard Kubernetes YAML or JSON (`k8s-openapi`
//! types, [`super::cilium`] for `cilium.io/v2`; multi-document files, `kind: List`,
//! directories), validated into the small model the layers below use, and kept in
//! ordered maps with the lookups the processor needs.
//!
//! Every error names the object (`Pod x/a`) and the field (`spec.ingress[0].from[1]`).
//! Objects of other kinds are skipped with a warning.

use super::selector::{Labels, Selector};
use super::subnet;
use super::PolicyError;
use ferrule_api::acl::AttachTarget;
use ferrule_dataplane::acl::{PortRange, Prefix};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::networking::v1 as net;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// The annotation that names the Ferrule port of a pod; without it, the pod's name.
pub const PORT_ANNOTATION: &str = "ferrule.io/port";

/// The label Kubernetes puts on every namespace with the namespace's name.
pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A transport protocol a NetworkPolicy port can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum L4 {
    Tcp,
    Udp,
    Sctp,
}

impl L4 {
    /// Parses `TCP`, `UDP` or `SCTP` (the Kubernetes spelling; lower case accepted).
    pub fn parse(text: &str) -> Option<L4> {
        match text.to_ascii_uppercase().as_str() {
            "TCP" => Some(L4::Tcp),
            "UDP" => Some(L4::Udp),
            "SCTP" => Some(L4::Sctp),
            _ => None,
        }
    }

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            L4::Tcp => 6,
            L4::Udp => 17,
            L4::Sctp => 132,
        }
    }

    /// Every protocol, in rule order.
    pub const ALL: [L4; 3] = [L4::Tcp, L4::Udp, L4::Sctp];
}

impl fmt::Display for L4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            L4::Tcp => "TCP",
            L4::Udp => "UDP",
            L4::Sctp => "SCTP",
        })
    }
}

/// `namespace/name` of a namespaced object (the namespace alone for a Namespace).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(namespace: &str, name: &str) -> Key {
        Key {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// Parses `NAMESPACE/NAME`.
    pub fn parse(text: &str) -> Option<Key> {
        let (ns, name) = text.split_once('/')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then(|| Key::new(ns, name))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A namespace and its labels (always with `kubernetes.io/metadata.name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    pub name: String,
    pub labels: Labels,
}

/// A named container port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NamedPort {
    pub name: String,
    pub port: u16,
    pub proto: L4,
}

/// What the layers below need of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub key: Key,
    pub labels: Labels,
    /// `spec.nodeName`; `None` when not scheduled.
    pub node: Option<String>,
    /// `status.podIPs` (or `status.podIP`); empty until the pod has an address.
    pub ips: Vec<IpAddr>,
    /// `spec.hostNetwork`: such pods are neither targets nor peers.
    pub host_network: bool,
    /// Phase `Succeeded` or `Failed`: ignored like a deleted pod.
    pub terminated: bool,
    /// Container ports that have a name.
    pub named_ports: Vec<NamedPort>,
    /// Where the pod's tables attach: the port its `ferrule.io/port` annotation
    /// names, else the port that records the pod (`namespace/name`).
    pub port: AttachTarget,
}

impl Pod {
    /// Whether the pod takes part in policy: has an address, pod network, running.
    pub fn is_active(&self) -> bool {
        !self.ips.is_empty() && !self.host_network && !self.terminated
    }

    /// The port number `name` resolves to on this pod for `proto`.
    pub fn named_port(&self, name: &str, proto: L4) -> Option<u16> {
        self.named_ports
            .iter()
            .find(|p| p.name == name && p.proto == proto)
            .map(|p| p.port)
    }
}

/// One `ports[]` entry of a policy rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PortSpec {
    pub proto: L4,
    pub port: PortRef,
}

/// Which ports of the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PortRef {
    /// No `port`: every port.
    All,
    /// A number, or `port`..`endPort`.
    Range(PortRange),
    /// A container port name, resolved per destination pod.
    Named(String),
}

/// One `from`/`to` peer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Peer {
    /// Pods selected by `pods` in the namespaces selected by `namespaces` (`None`: the
    /// policy's own namespace).
    Pods {
        namespaces: Option<Selector>,
        pods: Selector,
    },
    /// An ipBlock, already cut into the prefixes left after `except`.
    Block { cidr: Prefix, pieces: Vec<Prefix> },
    /// A remote-identity selector in canonical text (`fqdn:*.example.com`,
    /// `cidr:192.0.2.0/24`; a CiliumNetworkPolicy's `toFQDNs`, `toCIDR`, `toCIDRSet`):
    /// rendered as a rule whose `dst_selector` it is, matched by the dataplane by the
    /// destination's identity — never by address, and never a pod.
    Selector(String),
}

/// One `ingress[]` or `egress[]` rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PolicyRule {
    /// `None`: every peer (no or empty `from`/`to`).
    pub peers: Option<Vec<Peer>>,
    /// `None`: every port of every protocol (no or empty `ports`).
    pub ports: Option<Vec<PortSpec>>,
}

/// A validated NetworkPolicy, or one `spec` of a CiliumNetworkPolicy (see
/// [`super::cilium`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkPolicy {
    /// `namespace/name`; a CiliumNetworkPolicy's is `namespace/cnp:name` (and
    /// `namespace/cnp:name:specs[i]` for its `specs`), see [`super::cilium::key`].
    pub key: Key,
    /// Read from a CiliumNetworkPolicy.
    pub cilium: bool,
    pub pod_selector: Selector,
    /// `Some` when the policy isolates the pods it selects for ingress (explicit
    /// `policyTypes`, or inferred: always); the rules that allow traffic.
    pub ingress: Option<Vec<PolicyRule>>,
    /// As `ingress`, for egress (inferred when `egress` has rules).
    pub egress: Option<Vec<PolicyRule>>,
    /// The names the selected pods may look up through the DNS proxy (a
    /// CiliumNetworkPolicy's `toPorts[].rules.dns`): canonical `matchPattern`s, sorted,
    /// without duplicates; empty: no DNS rules.
    pub dns: Vec<String>,
}

/// One object read from the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Object {
    Namespace(Namespace),
    Pod(Pod),
    Policy(NetworkPolicy),
}

/// The kind of a cached object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Namespace,
    Pod,
    NetworkPolicy,
    /// Kept with the NetworkPolicies (same map, keys `namespace/cnp:name`).
    CiliumNetworkPolicy,
}

impl Object {
    /// Kind and key (a Namespace's key has an empty namespace).
    pub fn id(&self) -> (Kind, Key) {
        match self {
            Object::Namespace(n) => (Kind::Namespace, Key::new("", &n.name)),
            Object::Pod(p) => (Kind::Pod, p.key.clone()),
            Object::Policy(p) if p.cilium => (Kind::CiliumNetworkPolicy, p.key.clone()),
            Object::Policy(p) => (Kind::NetworkPolicy, p.key.clone()),
        }
    }
}

/// The state: every namespace, pod and policy, ordered by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cache {
    pub namespaces: BTreeMap<String, Namespace>,
    pub pods: BTreeMap<Key, Pod>,
    pub policies: BTreeMap<Key, NetworkPolicy>,
}

impl Cache {
    /// A cache holding `objects`; a later object replaces an earlier one of the same
    /// kind and key.
    pub fn from_objects(objects: Vec<Object>) -> Cache {
        let mut c = Cache::default();
        for o in objects {
            c.insert(o);
        }
        c
    }

    /// Adds or replaces an object; returns the one it replaced.
    pub fn insert(&mut self, o: Object) -> Option<Object> {
        match o {
            Object::Namespace(n) => self
                .namespaces
                .insert(n.name.clone(), n)
                .map(Object::Namespace),
            Object::Pod(p) => self.pods.insert(p.key.clone(), p).map(Object::Pod),
            Object::Policy(p) => self.policies.insert(p.key.clone(), p).map(Object::Policy),
        }
    }

    /// Removes an object; returns it.
    pub fn remove(&mut self, kind: Kind, key: &Key) -> Option<Object> {
        match kind {
            Kind::Namespace => self.namespaces.remove(&key.name).map(Object::Namespace),
            Kind::Pod => self.pods.remove(key).map(Object::Pod),
            Kind::NetworkPolicy | Kind::CiliumNetworkPolicy => {
                self.policies.remove(key).map(Object::Policy)
            }
        }
    }

    /// The labels of namespace `name` (only the name label when it was not given).
    pub fn namespace_labels(&self, name: &str) -> Labels {
        match self.namespaces.get(name) {
            Some(n) => n.labels.clone(),
            None => Labels::from([(NAME_LABEL.to_string(), name.to_string())]),
        }
    }

    /// Every namespace that has a Namespace object or a pod.
    pub fn namespace_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.namespaces.keys().cloned().collect();
        for k in self.pods.keys() {
            if names.last() != Some(&k.namespace) && !names.contains(&k.namespace) {
                names.push(k.namespace.clone());
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// The pods of namespace `ns`.
    pub fn pods_in<'a>(&'a self, ns: &'a str) -> impl Iterator<Item = &'a Pod> + 'a {
        self.pods
            .range(Key::new(ns, "")..)
            .take_while(move |(k, _)| k.namespace == ns)
            .map(|(_, p)| p)
    }

    /// Whether `pod` (in namespace `pod_ns` with `ns_labels`) is a member of `peer` of a
    /// policy in namespace `policy_ns`.
    pub fn peer_selects(peer: &Peer, policy_ns: &str, pod: &Pod, ns_labels: &Labels) -> bool {
        match peer {
            Peer::Block { .. } | Peer::Selector(_) => false,
            Peer::Pods { namespaces, pods } => {
                let ns_ok = match namespaces {
                    None => pod.key.namespace == policy_ns,
                    Some(s) => s.matches(ns_labels),
                };
                ns_ok && pods.matches(&pod.labels)
            }
        }
    }
}

/// Reads every object of a file or directory (YAML or JSON, recursively, in name
/// order), with warnings for skipped objects.
pub fn load_path(path: &Path) -> Result<(Vec<Object>, Vec<String>), PolicyError> {
    let mut files = Vec::new();
    collect_files(path, &mut files)?;
    let mut objects = Vec::new();
    let mut warnings = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| PolicyError::Io {
            path: f.clone(),
            source,
        })?;
        let (o, w) = parse_text(&text, &f.display().to_string())?;
        objects.extend(o);
        warnings.extend(w);
    }
    Ok((objects, warnings))
}

/// The YAML and JSON files under `path` (or `path` itself), sorted.
pub fn collect_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), PolicyError> {
    let io = |source| PolicyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        let name = e.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        if e.is_dir() {
            collect_files(&e, out)?;
        } else if [".yaml", ".yml", ".json"].iter().any(|x| name.ends_with(x)) {
            out.push(e);
        }
    }
    Ok(())
}

/// Parses the documents of one file; `source` names it in errors and warnings.
pub fn parse_text(text: &str, source: &str) -> Result<(Vec<Object>, Vec<String>), PolicyError> {
    let mut objects = Vec::new();
    let mut warnings = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(doc).map_err(|e| PolicyError::Document {
            source_name: source.to_string(),
            doc: i + 1,
            detail: format!("invalid YAML: {e}"),
        })?;
        parse_value(value, source, i + 1, &mut objects, &mut warnings)?;
    }
    Ok((objects, warnings))
}

/// The kinds ferruled's `network.apply` takes.
pub const NETWORK_KINDS: [&str; 3] = [
    "Namespace",
    "UserDefinedNetwork",
    "ClusterUserDefinedNetwork",
];

/// The user-defined networks and Namespaces of the manifests under `path` (a file or
/// directory, as [`load_path`] reads it), as JSON objects for `network.apply`; `kind:
/// List` items flattened. Other kinds are left out.
pub fn network_objects(path: &Path) -> Result<Vec<Value>, PolicyError> {
    let mut files = Vec::new();
    collect_files(path, &mut files)?;
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| PolicyError::Io {
            path: f.clone(),
            source,
        })?;
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let value = Value::deserialize(doc).map_err(|e| PolicyError::Document {
                source_name: f.display().to_string(),
                doc: i + 1,
                detail: format!("invalid YAML: {e}"),
            })?;
            let items = match value.get("kind").and_then(Value::as_str) {
                Some(k) if k.ends_with("List") => value
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                _ => vec![value],
            };
            out.extend(items.into_iter().filter(|v| {
                v.get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| NETWORK_KINDS.contains(&k))
            }));
        }
    }
    Ok(out)
}

fn parse_value(
    value: Value,
    source: &str,
    doc: usize,
    objects: &mut Vec<Object>,
    warnings: &mut Vec<String>,
) -> Result<(), PolicyError> {
    let map = match &value {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        _ => {
            return Err(PolicyError::Document {
                source_name: source.to_string(),
                doc,
                detail: "expected a Kubernetes object (a map with apiVersion and kind)".into(),
            })
        }
    };
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    let meta = map.get("metadata");
    let text_of = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let name = text_of("name");
    let namespace = match text_of("namespace") {
        ns if ns.is_empty() => "default".to_string(),
        ns => ns,
    };
    let invalid = |kind: &str, shown: String, field: String, detail: String| PolicyError::Invalid {
        kind: kind.to_string(),
        name: shown,
        field,
        detail,
        source_name: source.to_string(),
    };
    match kind {
        "List" | "NamespaceList" | "PodList" | "NetworkPolicyList" | "CiliumNetworkPolicyList" => {
            if let Some(Value::Array(items)) = map.get("items") {
                for item in items.clone() {
                    parse_value(item, source, doc, objects, warnings)?;
                }
            }
            Ok(())
        }
        "Namespace" => {
            let ns: core::Namespace =
                decode(value.clone()).map_err(|(f, d)| invalid("Namespace", name.clone(), f, d))?;
            objects.push(Object::Namespace(namespace_of(ns, &name)));
            Ok(())
        }
        "Pod" => {
            let shown = format!("{namespace}/{name}");
            let pod: core::Pod =
                decode(value.clone()).map_err(|(f, d)| invalid("Pod", shown.clone(), f, d))?;
            let pod =
                pod_of(pod, &namespace, &name).map_err(|(f, d)| invalid("Pod", shown, f, d))?;
            objects.push(Object::Pod(pod));
            Ok(())
        }
        "NetworkPolicy" => {
            let shown = format!("{namespace}/{name}");
            let np: net::NetworkPolicy = decode(value.clone())
                .map_err(|(f, d)| invalid("NetworkPolicy", shown.clone(), f, d))?;
            let np = policy_of(np, &namespace, &name)
                .map_err(|(f, d)| invalid("NetworkPolicy", shown, f, d))?;
            objects.push(Object::Policy(np));
            Ok(())
        }
        "CiliumNetworkPolicy" => {
            let shown = format!("{namespace}/{name}");
            let specs = super::cilium::parse(&value, &namespace, &name)
                .map_err(|(f, d)| invalid("CiliumNetworkPolicy", shown, f, d))?;
            objects.extend(specs.into_iter().map(Object::Policy));
            Ok(())
        }
        "" => Err(PolicyError::Document {
            source_name: source.to_string(),
            doc,
            detail: "kind: required".into(),
        }),
        // Read by the agent's network sync (`network_objects`), not by the renderer.
        "UserDefinedNetwork" | "ClusterUserDefinedNetwork" => Ok(()),
        other => {
            warnings.push(format!(
                "{source}: document {doc}: skipping {other} {}{name} (only Namespace, Pod, NetworkPolicy and CiliumNetworkPolicy are read)",
                if map.contains_key("metadata") && !text_of("namespace").is_empty() {
                    format!("{namespace}/")
                } else {
                    String::new()
                }
            ));
            Ok(())
        }
    }
}

/// Deserializes a Kubernetes object, naming the field that failed.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "(object)".into() } else { path };
        (field, e.into_inner().to_string())
    })
}

fn namespace_of(ns: core::Namespace, name: &str) -> Namespace {
    let mut labels = ns.metadata.labels.unwrap_or_default();
    labels.insert(NAME_LABEL.into(), name.into());
    Namespace {
        name: name.to_string(),
        labels,
    }
}

fn pod_of(pod: core::Pod, namespace: &str, name: &str) -> Result<Pod, (String, String)> {
    if name.is_empty() {
        return Err(("metadata.name".into(), "required".into()));
    }
    let spec = pod.spec.unwrap_or_default();
    let status = pod.status.unwrap_or_default();
    let mut ips = Vec::new();
    match &status.pod_ips {
        Some(list) if !list.is_empty() => {
            for (i, a) in list.iter().enumerate() {
                ips.push(a.ip.trim().parse::<IpAddr>().map_err(|_| {
                    (
                        format!("status.podIPs[{i}].ip"),
                        format!("{:?} is not an IP address", a.ip),
                    )
                })?);
            }
        }
        _ => {
            if let Some(ip) = status.pod_ip.as_deref().filter(|s| !s.is_empty()) {
                ips.push(ip.trim().parse::<IpAddr>().map_err(|_| {
                    (
                        "status.podIP".to_string(),
                        format!("{ip:?} is not an IP address"),
                    )
                })?);
            }
        }
    }
    let mut named_ports = Vec::new();
    for (c, container) in spec.containers.iter().enumerate() {
        for (p, port) in container.ports.iter().flatten().enumerate() {
            let path = |f: &str| format!("spec.containers[{c}].ports[{p}].{f}");
            let number = u16::try_from(port.container_port)
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    (
                        path("containerPort"),
                        format!("{} is not a port 1-65535", port.container_port),
                    )
                })?;
            let proto = match port.protocol.as_deref() {
                None | Some("") => L4::Tcp,
                Some(t) => L4::parse(t).ok_or_else(|| {
                    (
                        path("protocol"),
                        format!("{t:?}: expected TCP, UDP or SCTP"),
                    )
                })?,
            };
            if let Some(n) = port.name.as_deref().filter(|n| !n.is_empty()) {
                named_ports.push(NamedPort {
                    name: n.to_string(),
                    port: number,
                    proto,
                });
            }
        }
    }
    let annotations = pod.metadata.annotations.unwrap_or_default();
    let port = match annotations.get(PORT_ANNOTATION) {
        Some(p) => {
            if !valid_port_name(p) {
                return Err((
                    format!("metadata.annotations[{PORT_ANNOTATION}]"),
                    format!("{p:?} is not a Ferrule port name (1-32 of A-Z a-z 0-9 - _ .)"),
                ));
            }
            AttachTarget::Port(p.clone())
        }
        None => AttachTarget::Pod(format!("{namespace}/{name}")),
    };
    let phase = status.phase.as_deref().unwrap_or("");
    Ok(Pod {
        key: Key::new(namespace, name),
        labels: pod.metadata.labels.unwrap_or_default(),
        node: spec.node_name.filter(|n| !n.is_empty()),
        ips,
        host_network: spec.host_network.unwrap_or(false),
        terminated: phase == "Succeeded" || phase == "Failed",
        named_ports,
        port,
    })
}

/// Whether `name` is a valid Ferrule port name (as ferruled's configuration requires).
pub fn valid_port_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn policy_of(
    np: net::NetworkPolicy,
    namespace: &str,
    name: &str,
) -> Result<NetworkPolicy, (String, String)> {
    if name.is_empty() {
        return Err(("metadata.name".into(), "required".into()));
    }
    let spec = np.spec.unwrap_or_default();
    let sel = |s: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
               path: &str| match s {
        None => Ok(Selector::everything()),
        Some(s) => Selector::parse(s).map_err(|(f, d)| (format!("{path}.{f}"), d)),
    };
    let pod_selector = sel(spec.pod_selector.as_ref(), "spec.podSelector")?;
    let has_egress = spec.egress.as_ref().is_some_and(|e| !e.is_empty());
    let (mut want_in, mut want_eg) = (true, has_egress);
    if let Some(types) = spec.policy_types.as_ref().filter(|t| !t.is_empty()) {
        want_in = false;
        want_eg = false;
        for (i, t) in types.iter().enumerate() {
            match t.as_str() {
                "Ingress" => want_in = true,
                "Egress" => want_eg = true,
                other => {
                    return Err((
                        format!("spec.policyTypes[{i}]"),
                        format!("{other:?}: expected Ingress or Egress"),
                    ))
                }
            }
        }
    }
    let mut ingress = Vec::new();
    for (i, r) in spec.ingress.iter().flatten().enumerate() {
        ingress.push(rule_of(
            namespace,
            r.from.as_deref(),
            r.ports.as_deref(),
            &format!("spec.ingress[{i}]"),
            "from",
        )?);
    }
    let mut egress = Vec::new();
    for (i, r) in spec.egress.iter().flatten().enumerate() {
        egress.push(rule_of(
            namespace,
            r.to.as_deref(),
            r.ports.as_deref(),
            &format!("spec.egress[{i}]"),
            "to",
        )?);
    }
    Ok(NetworkPolicy {
        key: Key::new(namespace, name),
        cilium: false,
        pod_selector,
        ingress: want_in.then_some(ingress),
        egress: want_eg.then_some(egress),
        dns: Vec::new(),
    })
}

fn rule_of(
    _namespace: &str,
    peers: Option<&[net::NetworkPolicyPeer]>,
    ports: Option<&[net::NetworkPolicyPort]>,
    path: &str,
    peer_field: &str,
) -> Result<PolicyRule, (String, String)> {
    let peers = match peers {
        None | Some([]) => None,
        Some(list) => {
            let mut out = Vec::new();
            for (j, p) in list.iter().enumerate() {
                let at = format!("{path}.{peer_field}[{j}]");
                out.push(peer_of(p, &at)?);
            }
            Some(out)
        }
    };
    let ports = match ports {
        None | Some([]) => None,
        Some(list) => {
            let mut out = Vec::new();
            for (k, p) in list.iter().enumerate() {
                out.push(port_of(p, &format!("{path}.ports[{k}]"))?);
            }
            Some(out)
        }
    };
    Ok(PolicyRule { peers, ports })
}

fn peer_of(p: &net::NetworkPolicyPeer, at: &str) -> Result<Peer, (String, String)> {
    if let Some(b) = &p.ip_block {
        if p.pod_selector.is_some() || p.namespace_selector.is_some() {
            return Err((
                at.to_string(),
                "ipBlock cannot be combined with podSelector or namespaceSelector in one peer"
                    .into(),
            ));
        }
        let cidr = subnet::parse_cidr(&b.cidr).map_err(|d| (format!("{at}.ipBlock.cidr"), d))?;
        let mut except = Vec::new();
        for (x, e) in b.except.iter().flatten().enumerate() {
            let field = format!("{at}.ipBlock.except[{x}]");
            let hole = subnet::parse_cidr(e).map_err(|d| (field.clone(), d))?;
            if !subnet::contains(cidr, hole) || hole == cidr {
                return Err((field, format!("{e} is not strictly inside cidr {cidr}")));
            }
            except.push(hole);
        }
        let pieces = subnet::subtract(cidr, &except);
        return Ok(Peer::Block { cidr, pieces });
    }
    if p.pod_selector.is_none() && p.namespace_selector.is_none() {
        return Err((
            at.to_string(),
            "a peer needs podSelector, namespaceSelector or ipBlock".into(),
        ));
    }
    let pods = match &p.pod_selector {
        None => Selector::everything(),
        Some(s) => Selector::parse(s).map_err(|(f, d)| (format!("{at}.podSelector.{f}"), d))?,
    };
    let namespaces = match &p.namespace_selector {
        None => None,
        Some(s) => {
            Some(Selector::parse(s).map_err(|(f, d)| (format!("{at}.namespaceSelector.{f}"), d))?)
        }
    };
    Ok(Peer::Pods { namespaces, pods })
}

fn port_of(p: &net::NetworkPolicyPort, at: &str) -> Result<PortSpec, (String, String)> {
    let proto = match p.protocol.as_deref() {
        None | Some("") => L4::Tcp,
        Some(t) => L4::parse(t).ok_or_else(|| {
            (
                format!("{at}.protocol"),
                format!("{t:?}: expected TCP, UDP or SCTP"),
            )
        })?,
    };
    let number = |n: i32, f: &str| {
        u16::try_from(n)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| (format!("{at}.{f}"), format!("{n} is not a port 1-65535")))
    };
    let port = match (&p.port, p.end_port) {
        (None, None) => PortRef::All,
        (None, Some(_)) => {
            return Err((
                format!("{at}.endPort"),
                "endPort needs a numeric port".into(),
            ))
        }
        (Some(IntOrString::String(name)), end) => {
            if end.is_some() {
                return Err((
                    format!("{at}.endPort"),
                    "endPort cannot be used with a named port".into(),
                ));
            }
            if let Ok(n) = name.parse::<i32>() {
                PortRef::Range(PortRange::single(number(n, "port")?))
            } else if name.is_empty() || name.len() > 15 {
                return Err((
                    format!("{at}.port"),
                    format!("{name:?} is not a port name (1-15 characters)"),
                ));
            } else {
                PortRef::Named(name.clone())
            }
        }
        (Some(IntOrString::Int(n)), end) => {
            let lo = number(*n, "port")?;
            let hi = match end {
                None => lo,
                Some(e) => {
                    let hi = number(e, "endPort")?;
                    if hi < lo {
                        return Err((
                            format!("{at}.endPort"),
                            format!("endPort {hi} is below port {lo}"),
                        ));
                    }
                    hi
                }
            };
            PortRef::Range(PortRange { lo, hi })
        }
    };
    Ok(PortSpec { proto, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Result<Object, PolicyError> {
        let (mut o, _) = parse_text(text, "t.yaml")?;
        assert_eq!(o.len(), 1, "{o:?}");
        Ok(o.remove(0))
    }

    #[test]
    fn pods_namespaces_and_policies_parse_from_multi_document_yaml() {
        let text = r#"
apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {team: red}}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x, labels: {pod: a}, annotations: {ferrule.io/port: x-a}}
spec:
  nodeName: n1
  containers:
    - name: c
      ports: [{name: serve-80, containerPort: 80}, {name: dns, containerPort: 53, protocol: UDP}]
status: {podIPs: [{ip: 10.0.0.1}, {ip: "fd00::1"}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: x}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: x}
spec:
  podSelector: {}
  egress: [{to: [{ipBlock: {cidr: 10.0.0.0/24, except: [10.0.0.0/26]}}], ports: [{port: 80, endPort: 90}]}]
"#;
        let (objects, warnings) = parse_text(text, "t.yaml").unwrap();
        assert_eq!(objects.len(), 3);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("skipping ConfigMap x/cm"),
            "{warnings:?}"
        );
        let Object::Namespace(ns) = &objects[0] else {
            panic!()
        };
        assert_eq!(ns.labels.get(NAME_LABEL).map(String::as_str), Some("x"));
        let Object::Pod(pod) = &objects[1] else {
            panic!()
        };
        assert_eq!(pod.port, AttachTarget::Port("x-a".into()));
        assert_eq!(pod.ips.len(), 2);
        assert_eq!(pod.named_port("dns", L4::Udp), Some(53));
        assert_eq!(pod.named_port("dns", L4::Tcp), None);
        let Object::Policy(p) = &objects[2] else {
            panic!()
        };
        assert!(p.ingress.is_some(), "ingress is always inferred");
        let eg = p.egress.as_ref().unwrap();
        assert_eq!(
            eg[0].ports.as_ref().unwrap()[0].port,
            PortRef::Range(PortRange { lo: 80, hi: 90 })
        );
        let Some(peers) = &eg[0].peers else { panic!() };
        let Peer::Block { pieces, .. } = &peers[0] else {
            panic!()
        };
        assert_eq!(pieces.len(), 2);
    }

    #[test]
    fn errors_name_the_object_and_the_field() {
        let err = |text: &str| one(text).unwrap_err().to_string();
        let e = err("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  ingress: [{from: [{podSelector: {}}], ports: [{port: 80, protocol: ICMP}]}]\n");
        assert!(
            e.contains("NetworkPolicy x/p") && e.contains("spec.ingress[0].ports[0].protocol"),
            "{e}"
        );
        let e = err("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p}\nspec:\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/24, except: [10.1.0.0/26]}}]}]\n");
        assert!(
            e.contains("NetworkPolicy default/p")
                && e.contains("spec.ingress[0].from[0].ipBlock.except[0]"),
            "{e}"
        );
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: y}\nspec: {containers: [{name: c, ports: [{containerPort: notanumber}]}]}\n");
        assert!(
            e.contains("Pod y/a") && e.contains("spec.containers[0].ports[0].containerPort"),
            "{e}"
        );
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: []}\nstatus: {podIP: 10.0.0.300}\n");
        assert!(e.contains("status.podIP"), "{e}");
        let e = err("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p}\nspec:\n  policyTypes: [Sideways]\n");
        assert!(e.contains("spec.policyTypes[0]"), "{e}");
        let e = err("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p}\nspec:\n  podSelector: {matchExpressions: [{key: a, operator: Has}]}\n");
        assert!(
            e.contains("spec.podSelector.matchExpressions[0].operator"),
            "{e}"
        );
        let e = err("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p}\nspec:\n  egress: [{ports: [{port: 90, endPort: 80}]}]\n");
        assert!(e.contains("spec.egress[0].ports[0].endPort"), "{e}");
        assert!(one("- 1\n- 2\n")
            .unwrap_err()
            .to_string()
            .contains("document 1"));
    }

    #[test]
    fn policy_types_are_explicit_or_inferred() {
        let p = |spec: &str| {
            match one(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: p}}\nspec: {spec}\n"
        ))
        .unwrap()
        {
            Object::Policy(p) => (p.ingress.is_some(), p.egress.is_some()),
            _ => panic!(),
        }
        };
        assert_eq!(p("{}"), (true, false));
        assert_eq!(p("{egress: [{}]}"), (true, true));
        assert_eq!(p("{egress: []}"), (true, false));
        assert_eq!(p("{policyTypes: [Egress]}"), (false, true));
        assert_eq!(p("{policyTypes: [Ingress, Egress]}"), (true, true));
    }
}
