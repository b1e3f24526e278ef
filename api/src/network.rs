//! The user-defined network methods (`network.apply`, `network.del`, `network.list`,
//! `network.lookup`): their params and results. The manifests themselves
//! (`UserDefinedNetwork`, `ClusterUserDefinedNetwork`, `Namespace`) travel as the
//! Kubernetes objects they are; `ferrule-networks` validates them in the daemon.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Method names.
pub mod network_method {
    /// Create networks (and record namespaces) from manifests.
    pub const APPLY: &str = "network.apply";
    /// Delete a network (refused while pods use it).
    pub const DEL: &str = "network.del";
    /// Every network with its status, plan and counters.
    pub const LIST: &str = "network.list";
    /// The networks a pod of a namespace attaches to (for the CNI plugin).
    pub const LOOKUP: &str = "network.lookup";
    /// The MAC tables of switched (Layer2/Localnet) networks.
    pub const FDB: &str = "network.fdb";
}

/// Params of `network.apply`: Kubernetes objects, each a `UserDefinedNetwork`,
/// `ClusterUserDefinedNetwork` or `Namespace` (JSON, as `kubectl get -o json` writes
/// them). All are validated before any takes effect.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetworkApply {
    pub objects: Vec<Value>,
    /// Validate only; change nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// Result of `network.apply`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkApplied {
    /// Networks created (their generated names, `namespace.name` or
    /// `cluster.udn.name`).
    pub created: Vec<String>,
    /// Objects accepted unchanged (an identical re-apply).
    pub unchanged: Vec<String>,
    /// Namespaces recorded or updated.
    pub namespaces: Vec<String>,
    /// Objects of other kinds, skipped (`Kind namespace/name`).
    pub ignored: Vec<String>,
    pub dry_run: bool,
}

/// Params of `network.del`: the network's name as `network.list` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NetworkDel {
    pub name: String,
}

/// Params of `network.list`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NetworkListParams {
    /// Only this network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A status condition, shaped like the Kubernetes `metav1.Condition` the seed's
/// status shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    /// `True` or `False`.
    pub status: String,
    pub reason: String,
    pub message: String,
    /// RFC 3339.
    pub last_transition_time: String,
}

/// Traffic counters of a network, summed over its ports.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Packets received on the network's ports and dropped.
    pub drops: u64,
}

/// One network of `network.list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkInfo {
    /// `default`, a `[[network]]` name, `namespace.name` (UDN) or `cluster.udn.name`
    /// (CUDN).
    pub name: String,
    /// `default`, `config`, `UserDefinedNetwork` or `ClusterUserDefinedNetwork`.
    pub kind: String,
    /// The manifest, `namespace/name` or `name`; empty for the others.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub object: String,
    /// The VRF index and conntrack zone; absent while the network is not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<u16>,
    /// `Layer3`, `Layer2` or `Localnet` (`Layer3` for the default network).
    pub topology: String,
    /// `Primary` or `Secondary` (`Primary` for the default network).
    pub role: String,
    pub mtu: u16,
    /// The network's subnets as written (`10.128.0.0/16/24`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<String>,
    /// This node's part of them (the per-node split of Layer3; the whole subnet
    /// otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_subnets: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_subnets: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub join_subnets: Vec<String>,
    /// The pods' gateway addresses on the network.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
    /// The network's masquerade addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub masquerade: Vec<String>,
    /// Localnet: the 802.1Q VLAN on the uplink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// Namespaces the network serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Ports attached to the network.
    pub ports: Vec<String>,
    /// Addresses its IPAM has handed out.
    #[serde(default)]
    pub allocated: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    pub counters: NetworkCounters,
}

/// Result of `network.list`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkList {
    pub networks: Vec<NetworkInfo>,
}

/// Params of `network.lookup`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NetworkLookup {
    pub namespace: String,
}

/// Result of `network.lookup`: the namespace's primary user-defined network, if it
/// has one. An error (code invalid params) says why pods of the namespace cannot be
/// attached yet (the namespace asks for a primary network that does not exist, or two
/// claim it).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkLookupResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<PrimaryNetwork>,
    /// Addresses the pod's default-network interface still reaches (the Kubernetes
    /// API and DNS), routed there by the plugin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_network_routes: Vec<String>,
}

/// What the CNI plugin needs to attach a pod to its primary network.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PrimaryNetwork {
    pub name: String,
    pub topology: String,
    pub mtu: u16,
    /// The gateway addresses (one per family).
    pub gateways: Vec<String>,
    /// This node's subnets of the network.
    pub node_subnets: Vec<String>,
    /// Prefixes routed through the network's interface besides the default route
    /// (the network's subnets and join subnets).
    pub routes: Vec<String>,
    /// Whether Ferrule assigns the pod's addresses (`ipam.mode: Enabled`).
    pub ipam: bool,
}

/// Params of `network.fdb`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FdbParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
}

/// One MAC table entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FdbEntry {
    pub network: String,
    pub mac: String,
    pub port: String,
    /// The VLAN it is on behind that port (a Localnet uplink's); absent: untagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// `static` (a pod port's MAC) or `learned`.
    pub kind: String,
    /// Seconds since the entry was learned or last seen (learned entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_s: Option<u64>,
}

/// Result of `network.fdb`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FdbDump {
    pub entries: Vec<FdbEntry>,
}
