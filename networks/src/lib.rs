//! User-defined networks (OVN-Kubernetes UDN/CUDN): the manifests, their validation, the registry that resolves namespaces to networks with the seed's status conditions, and each network's per-node address plan.
//!
//! The flow: [`manifest::parse_text`] (or [`manifest::parse_value`]) reads
//! `UserDefinedNetwork`, `ClusterUserDefinedNetwork` and `Namespace` objects (the seed's
//! flat spec and the nested upstream spec both normalise into one
//! [`manifest::NetworkSpec`]); [`validate`] turns a spec into a [`validate::NetworkConfig`]
//! (parsed prefixes, defaults applied) or an [`Invalid`] naming the object and the field;
//! [`registry::Registry`] keeps the objects, gives each network a stable id and masquerade
//! pair, decides which network is the primary one of each namespace and reports the
//! seed's status conditions; [`plan`] is the node's share of a network's subnets and a
//! small IPAM over it.
//!
//! Every prefix is the project's one prefix type, [`ferrule_dataplane::wire::IpCidr`].

pub mod manifest;
pub mod plan;
pub mod registry;
pub mod validate;

use ferrule_dataplane::wire::{IpCidr, Ipv4Cidr, Ipv6Cidr};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

pub use manifest::{Object, Topology};
pub use registry::Registry;

/// The namespace label that a primary user-defined network requires: it must be set
/// when the namespace is created and can't be added or removed afterwards.
pub const PRIMARY_NETWORK_LABEL: &str = "k8s.ovn.org/primary-user-defined-network";

/// A manifest or spec that is refused: which object, which field, why.
///
/// Displayed as `{object}: {field}: {message}`, e.g.
/// `UserDefinedNetwork demo/db-network: spec.subnets[1]: "10.0.0.0/33" is not a valid CIDR`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {}{message}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct Invalid {
    /// `"UserDefinedNetwork demo/db-network"`, `"ClusterUserDefinedNetwork db"`,
    /// `"Namespace demo"`, or `"document 2"` when the object has no name yet.
    pub object: String,
    /// The field path, e.g. `spec.subnets[0]` (`spec` for a rule on the whole spec);
    /// empty for a document that isn't YAML (then Display omits it).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Invalid {
    pub(crate) fn new(
        object: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Invalid {
        Invalid {
            object: object.into(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The cluster's and this node's configuration that networks are validated and planned
/// against. [`Settings::default`] has OVN-Kubernetes' defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// This node's index in the cluster (configuration): a Layer3 network gives node
    /// `k` the `k`-th host subnet of each of its subnets.
    pub node_index: u32,
    /// The MTU of a network whose spec has none (1400).
    pub mtu: u32,
    /// The cluster default network's pod subnets (10.244.0.0/16).
    pub cluster_subnets: Vec<IpCidr>,
    /// The Kubernetes service subnets (10.96.0.0/16).
    pub service_subnets: Vec<IpCidr>,
    /// The cluster default network's join subnets (100.64.0.0/16 and fd98::/64): a
    /// user-defined network's join and pod subnets must not overlap them.
    pub default_join_subnets: Vec<IpCidr>,
    /// The join subnets of a primary network whose spec has none (100.65.0.0/16 and
    /// fd99::/64, like upstream); only the families of the network's subnets are used.
    pub udn_join_subnets: Vec<IpCidr>,
    /// The node-local IPv4 masquerade subnet (169.254.169.0/24): its first 8 addresses
    /// are the cluster default network's, then two per user-defined network (see
    /// [`registry::Masquerade`]).
    pub masquerade_subnet_v4: Ipv4Cidr,
    /// The node-local IPv6 masquerade subnet (fd69::/112), laid out like the IPv4 one.
    pub masquerade_subnet_v6: Ipv6Cidr,
}

impl Default for Settings {
    fn default() -> Settings {
        let v4 = |a: [u8; 4], len| IpCidr::V4(v4cidr(a, len));
        let v6 = |s: &str, len| IpCidr::V6(v6cidr(s, len));
        Settings {
            node_index: 0,
            mtu: 1400,
            cluster_subnets: vec![v4([10, 244, 0, 0], 16)],
            service_subnets: vec![v4([10, 96, 0, 0], 16)],
            default_join_subnets: vec![v4([100, 64, 0, 0], 16), v6("fd98::", 64)],
            udn_join_subnets: vec![v4([100, 65, 0, 0], 16), v6("fd99::", 64)],
            masquerade_subnet_v4: v4cidr([169, 254, 169, 0], 24),
            masquerade_subnet_v6: v6cidr("fd69::", 112),
        }
    }
}

fn v4cidr(a: [u8; 4], len: u8) -> Ipv4Cidr {
    Ipv4Cidr::new(Ipv4Addr::from(a), len).expect("a valid IPv4 prefix length")
}

fn v6cidr(s: &str, len: u8) -> Ipv6Cidr {
    let a: Ipv6Addr = s.parse().expect("a valid IPv6 address");
    Ipv6Cidr::new(a, len).expect("a valid IPv6 prefix length")
}

/// An IP family, for messages.
pub(crate) fn family(c: &IpCidr) -> &'static str {
    match c {
        IpCidr::V4(_) => "IPv4",
        IpCidr::V6(_) => "IPv6",
    }
}

/// Whether two prefixes share an address.
pub(crate) fn overlaps(a: &IpCidr, b: &IpCidr) -> bool {
    a.contains_cidr(b) || b.contains_cidr(a)
}

/// A list shown as `[a, b]`.
pub(crate) struct ListDisplay<'a, T>(pub &'a [T]);

impl<T: fmt::Display> fmt::Display for ListDisplay<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, x) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{x}")?;
        }
        f.write_str("]")
    }
}
