//! The `k8s.ovn.org/v1` manifests: `UserDefinedNetwork` (namespaced),
//! `ClusterUserDefinedNetwork` (cluster-scoped) and `v1` `Namespace`s (their labels).
//!
//! A network spec is accepted in two shapes that normalise into one [`NetworkSpec`]:
//!
//! * the seed's flat one: `spec: {topology, role, mtu, subnets, excludeSubnets,
//!   joinSubnets, ipam: {mode, lifecycle}, ipamLifecycle}` (a Localnet may also carry
//!   `physicalNetworkName` and `vlan`);
//! * upstream's nested one: `spec: {topology: Layer3, layer3: {role, subnets: [{cidr,
//!   hostSubnet}], mtu, joinSubnets}}`, `layer2: {role, subnets, excludeSubnets,
//!   joinSubnets, mtu, ipam}`, `localnet: {role, physicalNetworkName, subnets,
//!   excludeSubnets, vlan: {mode: Access, access: {id}}, mtu, ipam}`.
//!
//! A CUDN's network is `spec.network` (upstream), or the seed's `spec.template`, either
//! `template: {spec: {...}}` or the spec's fields directly under `template`.
//!
//! Parsing checks the shape (unknown fields are refused with their path, mixed shapes,
//! a missing name); the values are checked by [`crate::validate`].

use crate::Invalid;
use ferrule_policy::selector::Labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The API group and version of the network kinds.
pub const API_VERSION: &str = "k8s.ovn.org/v1";

/// How a network is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Topology {
    /// Routed: every node gets a host subnet of each subnet.
    Layer3,
    /// One switch across the cluster: every node shares the whole subnet.
    Layer2,
    /// A switch bridged to a physical network (secondary only).
    Localnet,
}

/// The network's role in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// The pod's primary interface (replaces the cluster default network for it).
    Primary,
    /// An additional interface.
    Secondary,
}

/// How much of the IP configuration OVN-Kubernetes (here: Ferrule) manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IpamMode {
    /// Addresses are assigned from the subnets (the default).
    Enabled,
    /// Layer 2 only; users configure addresses (Layer2/Localnet secondary networks).
    Disabled,
}

/// The IPAM lifecycle; the only value is `Persistent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IpamLifecycle {
    /// Workloads (VMs) keep their addresses across restarts and migrations.
    Persistent,
}

/// One entry of `subnets`: the text as written (the seed's flat form may be
/// `10.128.0.0/16/24`), and upstream's nested Layer3 `hostSubnet` if given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetSpec {
    pub cidr: String,
    pub host_subnet: Option<i64>,
}

/// A Localnet's `vlan`, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VlanSpec {
    /// `Access` (the only mode).
    pub mode: String,
    /// `access.id`.
    pub access_id: Option<i64>,
}

/// Where the spec's fields were written, so that errors name them as the user wrote
/// them (`spec.subnets[0]`, `spec.network.layer3.subnets[0].cidr`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecPaths {
    /// The object holding the fields: `spec`, `spec.template`, `spec.template.spec`,
    /// `spec.layer3`, `spec.network.localnet`, …
    pub base: String,
    /// Layer3 subnets written as upstream's `{cidr, hostSubnet}` objects.
    pub subnet_objects: bool,
    /// `ipamLifecycle` (the seed's older field) rather than `ipam.lifecycle`.
    pub old_ipam_lifecycle: bool,
}

impl SpecPaths {
    /// `{base}.{name}`.
    pub fn field(&self, name: &str) -> String {
        format!("{}.{name}", self.base)
    }

    /// The path of `subnets[i]` (its `cidr` in the nested Layer3 form).
    pub fn subnet(&self, i: usize) -> String {
        if self.subnet_objects {
            format!("{}.subnets[{i}].cidr", self.base)
        } else {
            format!("{}.subnets[{i}]", self.base)
        }
    }

    /// The path of the lifecycle field as written.
    pub fn ipam_lifecycle(&self) -> String {
        if self.old_ipam_lifecycle {
            self.field("ipamLifecycle")
        } else {
            self.field("ipam.lifecycle")
        }
    }
}

/// A network spec in one shape, not yet validated (see [`crate::validate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkSpec {
    pub topology: Topology,
    pub role: Role,
    pub mtu: Option<i64>,
    pub subnets: Vec<SubnetSpec>,
    pub exclude_subnets: Vec<String>,
    /// `None` when omitted (the platform's default), `Some` (maybe empty) when written.
    pub join_subnets: Option<Vec<String>>,
    pub ipam_mode: Option<IpamMode>,
    pub ipam_lifecycle: Option<IpamLifecycle>,
    /// Localnet: the physical network (bridge mapping) name.
    pub physical_network_name: Option<String>,
    /// Localnet: the access VLAN.
    pub vlan: Option<VlanSpec>,
    pub paths: SpecPaths,
}

/// A `UserDefinedNetwork`: a network for the namespace it lives in.
#[derive(Debug, Clone, PartialEq)]
pub struct UserDefinedNetwork {
    pub name: String,
    pub namespace: String,
    pub spec: NetworkSpec,
}

/// A `ClusterUserDefinedNetwork`: a network for the namespaces its selector matches.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterUserDefinedNetwork {
    pub name: String,
    pub namespace_selector: LabelSelector,
    pub spec: NetworkSpec,
}

/// A `Namespace`: its name and labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    pub name: String,
    pub labels: Labels,
}

/// One object of a manifest.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    UserDefinedNetwork(UserDefinedNetwork),
    ClusterUserDefinedNetwork(ClusterUserDefinedNetwork),
    Namespace(Namespace),
    /// An object of another kind (the agent's directory holds policies too); `name` is
    /// `namespace/name` for a namespaced object.
    Ignored {
        kind: String,
        name: String,
    },
}

impl UserDefinedNetwork {
    /// `UserDefinedNetwork {namespace}/{name}`, as errors name it.
    pub fn object(&self) -> String {
        format!("UserDefinedNetwork {}/{}", self.namespace, self.name)
    }
}

impl ClusterUserDefinedNetwork {
    /// `ClusterUserDefinedNetwork {name}`, as errors name it.
    pub fn object(&self) -> String {
        format!("ClusterUserDefinedNetwork {}", self.name)
    }
}

// ---------------------------------------------------------------------------------
// The shapes as serde reads them.

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawIpam {
    mode: Option<IpamMode>,
    lifecycle: Option<IpamLifecycle>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccess {
    id: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVlan {
    mode: String,
    access: Option<RawAccess>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawFlat {
    topology: Topology,
    role: Option<Role>,
    mtu: Option<i64>,
    subnets: Option<Vec<String>>,
    exclude_subnets: Option<Vec<String>>,
    join_subnets: Option<Vec<String>>,
    ipam: Option<RawIpam>,
    ipam_lifecycle: Option<IpamLifecycle>,
    physical_network_name: Option<String>,
    vlan: Option<RawVlan>,
    layer3: Option<Value>,
    layer2: Option<Value>,
    localnet: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLayer3Subnet {
    cidr: String,
    host_subnet: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLayer3 {
    role: Role,
    mtu: Option<i64>,
    subnets: Option<Vec<RawLayer3Subnet>>,
    join_subnets: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLayer2 {
    role: Role,
    mtu: Option<i64>,
    subnets: Option<Vec<String>>,
    exclude_subnets: Option<Vec<String>>,
    join_subnets: Option<Vec<String>>,
    ipam: Option<RawIpam>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLocalnet {
    role: Role,
    physical_network_name: String,
    mtu: Option<i64>,
    subnets: Option<Vec<String>>,
    exclude_subnets: Option<Vec<String>>,
    ipam: Option<RawIpam>,
    vlan: Option<RawVlan>,
}

/// Decodes `value` (found at `path`) naming the failing field with its full path.
fn decode<T: DeserializeOwned>(value: &Value, path: &str, object: &str) -> Result<T, Invalid> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        // The path names an unknown field too.
        let field = join_path(path, &e.path().to_string());
        Invalid::new(object, field, e.into_inner().to_string())
    })
}

fn join_path(base: &str, inner: &str) -> String {
    if inner.is_empty() || inner == "." {
        base.to_string()
    } else if base.is_empty() {
        inner.to_string()
    } else if inner.starts_with('[') {
        format!("{base}{inner}")
    } else {
        format!("{base}.{inner}")
    }
}

fn lifecycle_of(
    ipam: &Option<RawIpam>,
    old: Option<IpamLifecycle>,
) -> (Option<IpamLifecycle>, bool) {
    match (ipam.as_ref().and_then(|i| i.lifecycle), old) {
        (Some(l), _) => (Some(l), false),
        (None, Some(l)) => (Some(l), true),
        (None, None) => (None, false),
    }
}

fn vlan_of(v: Option<RawVlan>) -> Option<VlanSpec> {
    v.map(|v| VlanSpec {
        mode: v.mode,
        access_id: v.access.map(|a| a.id),
    })
}

fn strings(v: Option<Vec<String>>) -> Vec<SubnetSpec> {
    v.unwrap_or_default()
        .into_iter()
        .map(|cidr| SubnetSpec {
            cidr,
            host_subnet: None,
        })
        .collect()
}

/// Reads a network spec (flat or nested) found at `path`.
pub fn parse_spec(value: &Value, path: &str, object: &str) -> Result<NetworkSpec, Invalid> {
    if !value.is_object() {
        return Err(Invalid::new(object, path, "expected an object"));
    }
    let flat: RawFlat = decode(value, path, object)?;
    let nested = [
        ("layer3", &flat.layer3, Topology::Layer3),
        ("layer2", &flat.layer2, Topology::Layer2),
        ("localnet", &flat.localnet, Topology::Localnet),
    ];
    let present: Vec<_> = nested.iter().filter(|(_, v, _)| v.is_some()).collect();
    if present.is_empty() {
        // The seed's flat form.
        let role = flat.role.ok_or_else(|| {
            Invalid::new(
                object,
                format!("{path}.role"),
                "required (Primary or Secondary)",
            )
        })?;
        let (ipam_lifecycle, old) = lifecycle_of(&flat.ipam, flat.ipam_lifecycle);
        return Ok(NetworkSpec {
            topology: flat.topology,
            role,
            mtu: flat.mtu,
            subnets: strings(flat.subnets),
            exclude_subnets: flat.exclude_subnets.unwrap_or_default(),
            join_subnets: flat.join_subnets,
            ipam_mode: flat.ipam.as_ref().and_then(|i| i.mode),
            ipam_lifecycle,
            physical_network_name: flat.physical_network_name,
            vlan: vlan_of(flat.vlan),
            paths: SpecPaths {
                base: path.to_string(),
                subnet_objects: false,
                old_ipam_lifecycle: old,
            },
        });
    }
    // Upstream's nested form: exactly the block of the topology, nothing flat.
    let flat_fields = [
        ("role", flat.role.is_some()),
        ("mtu", flat.mtu.is_some()),
        ("subnets", flat.subnets.is_some()),
        ("excludeSubnets", flat.exclude_subnets.is_some()),
        ("joinSubnets", flat.join_subnets.is_some()),
        ("ipam", flat.ipam.is_some()),
        ("ipamLifecycle", flat.ipam_lifecycle.is_some()),
        ("physicalNetworkName", flat.physical_network_name.is_some()),
        ("vlan", flat.vlan.is_some()),
    ];
    if let Some((name, _)) = flat_fields.iter().find(|(_, set)| *set) {
        return Err(Invalid::new(
            object,
            format!("{path}.{name}"),
            format!(
                "not allowed next to {path}.{}: write it inside that block (or use the flat form without it)",
                present[0].0
            ),
        ));
    }
    for (block, _, topology) in &present {
        if *topology != flat.topology {
            return Err(Invalid::new(
                object,
                format!("{path}.{block}"),
                format!(
                    "spec.{block} is required when topology is {topology:?} and not allowed otherwise (topology is {:?})",
                    flat.topology
                ),
            ));
        }
    }
    let (block, value, _) = present[0];
    let value = value.as_ref().expect("present");
    let base = format!("{path}.{block}");
    let spec = match flat.topology {
        Topology::Layer3 => {
            let l3: RawLayer3 = decode(value, &base, object)?;
            NetworkSpec {
                topology: Topology::Layer3,
                role: l3.role,
                mtu: l3.mtu,
                subnets: l3
                    .subnets
                    .unwrap_or_default()
                    .into_iter()
                    .map(|s| SubnetSpec {
                        cidr: s.cidr,
                        host_subnet: s.host_subnet,
                    })
                    .collect(),
                exclude_subnets: Vec::new(),
                join_subnets: l3.join_subnets,
                ipam_mode: None,
                ipam_lifecycle: None,
                physical_network_name: None,
                vlan: None,
                paths: SpecPaths {
                    base,
                    subnet_objects: true,
                    old_ipam_lifecycle: false,
                },
            }
        }
        Topology::Layer2 => {
            let l2: RawLayer2 = decode(value, &base, object)?;
            let (ipam_lifecycle, _) = lifecycle_of(&l2.ipam, None);
            NetworkSpec {
                topology: Topology::Layer2,
                role: l2.role,
                mtu: l2.mtu,
                subnets: strings(l2.subnets),
                exclude_subnets: l2.exclude_subnets.unwrap_or_default(),
                join_subnets: l2.join_subnets,
                ipam_mode: l2.ipam.as_ref().and_then(|i| i.mode),
                ipam_lifecycle,
                physical_network_name: None,
                vlan: None,
                paths: SpecPaths {
                    base,
                    subnet_objects: false,
                    old_ipam_lifecycle: false,
                },
            }
        }
        Topology::Localnet => {
            let ln: RawLocalnet = decode(value, &base, object)?;
            let (ipam_lifecycle, _) = lifecycle_of(&ln.ipam, None);
            NetworkSpec {
                topology: Topology::Localnet,
                role: ln.role,
                mtu: ln.mtu,
                subnets: strings(ln.subnets),
                exclude_subnets: ln.exclude_subnets.unwrap_or_default(),
                join_subnets: None,
                ipam_mode: ln.ipam.as_ref().and_then(|i| i.mode),
                ipam_lifecycle,
                physical_network_name: Some(ln.physical_network_name),
                vlan: vlan_of(ln.vlan),
                paths: SpecPaths {
                    base,
                    subnet_objects: false,
                    old_ipam_lifecycle: false,
                },
            }
        }
    };
    Ok(spec)
}

/// The top-level fields a manifest object may have.
const TOP_FIELDS: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "status"];

fn check_top(
    map: &serde_json::Map<String, Value>,
    object: &str,
    kind: &str,
    api_version: &str,
) -> Result<(), Invalid> {
    if let Some(k) = map.keys().find(|k| !TOP_FIELDS.contains(&k.as_str())) {
        return Err(Invalid::new(
            object,
            k.as_str(),
            format!("unknown field `{k}` of a {kind}"),
        ));
    }
    match map.get("apiVersion") {
        None => Ok(()),
        Some(Value::String(v)) if v == api_version => Ok(()),
        Some(v) => Err(Invalid::new(
            object,
            "apiVersion",
            format!("{v} is not supported for {kind}: expected {api_version}"),
        )),
    }
}

/// Parses one object (a `kind: List` gives its items). `place` names the object in
/// errors until its name is known (`"document 2"`).
pub fn parse_value(value: &Value, place: &str) -> Result<Vec<Object>, Invalid> {
    let Some(map) = value.as_object() else {
        return Err(Invalid::new(place, "", "expected an object"));
    };
    let kind = match map.get("kind") {
        Some(Value::String(k)) => k.as_str(),
        Some(_) => return Err(Invalid::new(place, "kind", "expected a string")),
        None => return Err(Invalid::new(place, "kind", "required")),
    };
    let metadata: ObjectMeta = match map.get("metadata") {
        Some(m) => decode(m, "metadata", place)?,
        None => ObjectMeta::default(),
    };
    let name = metadata.name.clone().unwrap_or_default();
    match kind {
        "List" => {
            let items = match map.get("items") {
                Some(Value::Array(items)) => items,
                Some(_) => return Err(Invalid::new(place, "items", "expected a list")),
                None => return Ok(Vec::new()),
            };
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                out.extend(parse_value(item, &format!("{place} items[{i}]"))?);
            }
            Ok(out)
        }
        "UserDefinedNetwork" => {
            let object = format!(
                "UserDefinedNetwork {}/{}",
                metadata.namespace.as_deref().unwrap_or("?"),
                if name.is_empty() { "?" } else { &name }
            );
            check_top(map, &object, kind, API_VERSION)?;
            if name.is_empty() {
                return Err(Invalid::new(object, "metadata.name", "required"));
            }
            let Some(namespace) = metadata.namespace.filter(|n| !n.is_empty()) else {
                return Err(Invalid::new(
                    object,
                    "metadata.namespace",
                    "required (a UserDefinedNetwork is namespaced)",
                ));
            };
            let spec = map
                .get("spec")
                .ok_or_else(|| Invalid::new(&object, "spec", "required"))?;
            let spec = parse_spec(spec, "spec", &object)?;
            Ok(vec![Object::UserDefinedNetwork(UserDefinedNetwork {
                name,
                namespace,
                spec,
            })])
        }
        "ClusterUserDefinedNetwork" => {
            let object = format!(
                "ClusterUserDefinedNetwork {}",
                if name.is_empty() { "?" } else { &name }
            );
            check_top(map, &object, kind, API_VERSION)?;
            if name.is_empty() {
                return Err(Invalid::new(object, "metadata.name", "required"));
            }
            if metadata.namespace.as_deref().is_some_and(|n| !n.is_empty()) {
                return Err(Invalid::new(
                    object,
                    "metadata.namespace",
                    "must not be set: a ClusterUserDefinedNetwork is cluster-scoped",
                ));
            }
            let spec = match map.get("spec") {
                Some(Value::Object(s)) => s,
                Some(_) => return Err(Invalid::new(object, "spec", "expected an object")),
                None => return Err(Invalid::new(object, "spec", "required")),
            };
            if let Some(k) = spec
                .keys()
                .find(|k| !["namespaceSelector", "network", "template"].contains(&k.as_str()))
            {
                return Err(Invalid::new(
                    object,
                    format!("spec.{k}"),
                    format!(
                        "unknown field `{k}`, expected `namespaceSelector`, `network` or `template`"
                    ),
                ));
            }
            let namespace_selector: LabelSelector = match spec.get("namespaceSelector") {
                Some(s) => decode(s, "spec.namespaceSelector", &object)?,
                None => {
                    return Err(Invalid::new(object, "spec.namespaceSelector", "required"));
                }
            };
            let spec = match (spec.get("network"), spec.get("template")) {
                (Some(_), Some(_)) => {
                    return Err(Invalid::new(
                        object,
                        "spec.template",
                        "spec.network and spec.template are the same thing: give only one",
                    ))
                }
                (None, None) => {
                    return Err(Invalid::new(
                        object,
                        "spec.network",
                        "required (or the older spec.template)",
                    ))
                }
                (Some(n), None) => parse_spec(n, "spec.network", &object)?,
                (None, Some(t)) => match t.get("spec") {
                    Some(s) if t.as_object().is_some_and(|t| t.len() == 1) => {
                        parse_spec(s, "spec.template.spec", &object)?
                    }
                    _ => parse_spec(t, "spec.template", &object)?,
                },
            };
            Ok(vec![Object::ClusterUserDefinedNetwork(
                ClusterUserDefinedNetwork {
                    name,
                    namespace_selector,
                    spec,
                },
            )])
        }
        "Namespace" => {
            let object = format!("Namespace {}", if name.is_empty() { "?" } else { &name });
            match map.get("apiVersion") {
                None => {}
                Some(Value::String(v)) if v == "v1" => {}
                Some(v) => {
                    return Err(Invalid::new(
                        object,
                        "apiVersion",
                        format!("{v} is not supported for Namespace: expected v1"),
                    ))
                }
            }
            if name.is_empty() {
                return Err(Invalid::new(object, "metadata.name", "required"));
            }
            Ok(vec![Object::Namespace(Namespace {
                name,
                labels: metadata.labels.unwrap_or_default(),
            })])
        }
        other => Ok(vec![Object::Ignored {
            kind: other.to_string(),
            name: match metadata.namespace.filter(|n| !n.is_empty()) {
                Some(ns) => format!("{ns}/{name}"),
                None => name,
            },
        }]),
    }
}

/// Parses a YAML (or JSON) text with one or more documents separated by `---`; empty
/// documents are skipped, `kind: List` gives its items.
pub fn parse_text(text: &str) -> Result<Vec<Object>, Invalid> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let place = format!("document {}", i + 1);
        let value = Value::deserialize(doc).map_err(|e| Invalid::new(&place, "", e.to_string()))?;
        if value.is_null() {
            continue;
        }
        out.extend(parse_value(&value, &place)?);
    }
    Ok(out)
}
