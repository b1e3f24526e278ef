//! The IPAM socket protocol between `ferrule-ipamd` and its clients (the CNI plugin,
//! `ferrulectl ipam`): the method names, their params and results, and the state that
//! `ipam.show` and the daemon's `GET /ip-manager` return. The framing is the control
//! socket's JSON-RPC 2.0, one request per line ([`crate::rpc`]), so the blocking
//! [`crate::client::Client`] calls it. Methods and examples: `docs/ipam.md`.

use serde::{Deserialize, Serialize};

/// Default path of the IPAM socket (mode 0600).
pub const DEFAULT_IPAM_SOCKET: &str = "/run/ferrule/ipamd.sock";

/// Method names of the IPAM socket.
pub mod ipam_method {
    /// Give a pod's interface an address (idempotent per container ID and ifname).
    pub const ADD: &str = "ipam.add";
    /// Release a pod's interface's address into cooling (idempotent).
    pub const DEL: &str = "ipam.del";
    /// The pool's state: the same document as `GET /ip-manager`.
    pub const SHOW: &str = "ipam.show";
}

/// Params of `ipam.add`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IpamAdd {
    /// The container runtime's ID of the pod sandbox (CNI_CONTAINERID).
    pub container_id: String,
    /// The interface name inside the pod (CNI_IFNAME), for example `eth0`.
    pub ifname: String,
    /// The pod's namespace (K8S_POD_NAMESPACE).
    pub pod_namespace: String,
    /// The pod's name (K8S_POD_NAME).
    pub pod_name: String,
}

/// Result of `ipam.add`: the pod's address and where it lives.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IpamAddress {
    /// The pod's IPv4 address: a secondary private IP of `eni_id`.
    pub ip: String,
    /// Always 32: the pod reaches everything through its gateway.
    pub prefix_len: u8,
    /// The ENI the address belongs to.
    pub eni_id: String,
    /// The ENI's device index on the instance (0: the primary ENI).
    pub device_index: u32,
    /// The CIDR of the ENI's subnet.
    pub subnet_cidr: String,
    /// The subnet's gateway (its first host address, as in EC2).
    pub gateway: String,
    /// The VPC's IPv4 CIDRs.
    pub vpc_cidrs: Vec<String>,
}

/// Params of `ipam.del`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IpamDel {
    pub container_id: String,
    pub ifname: String,
}

/// Result of `ipam.del`: the address released into cooling, or `null` when the
/// interface held none (already released, or never added).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IpamReleased {
    pub released: Option<String>,
}

/// What an address of the pool is doing.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum IpState {
    /// Free and ready for a pod.
    Available,
    /// A pod's.
    Assigned,
    /// Released by a pod less than the cooling period ago; not handed out yet.
    Cooling,
}

/// One pod interface's address (`ipam.show`, `GET /ip-manager`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IpamAllocation {
    pub pod_namespace: String,
    pub pod_name: String,
    pub container_id: String,
    pub ifname: String,
    pub ip: String,
    pub eni_id: String,
}

/// One secondary address of an ENI and its state.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IpamIp {
    pub ip: String,
    pub state: IpState,
    /// Milliseconds of cooling left (only when cooling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooling_ms_left: Option<u64>,
}

/// One ENI of the node as the pool knows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IpamEni {
    pub id: String,
    pub mac: String,
    pub device_index: u32,
    pub subnet_cidr: String,
    pub primary_ip: String,
    /// Its secondary addresses (pods' addresses), each with its state.
    pub ips: Vec<IpamIp>,
}

/// The settings in force.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IpamSettings {
    pub cluster: String,
    pub instance_id: String,
    pub instance_type: String,
    pub warm_eni_target: u32,
    pub warm_ip_target: Option<u32>,
    pub minimum_ip_target: Option<u32>,
    /// Which thresholds apply: `ip` (WARM_IP_TARGET / MINIMUM_IP_TARGET) or `eni`.
    pub mode: String,
    /// ENIs the instance type allows (N), after the `--max-eni` cap.
    pub max_enis: u32,
    /// IPv4 addresses per ENI (M), the primary included.
    pub ips_per_eni: u32,
    pub cooling_secs: u64,
    pub reconcile_interval_ms: u64,
    pub subnet_id: String,
    pub security_groups: Vec<String>,
}

/// The pool's state: `ipam.show` and `GET /ip-manager`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IpamState {
    /// Addresses held by pods.
    pub allocated: u32,
    /// Addresses ready for a pod now.
    pub available: u32,
    /// Addresses released less than the cooling period ago.
    pub cooling: u32,
    /// Secondary addresses on the node's ENIs (allocated + available + cooling).
    pub total: u32,
    /// The most addresses pods can have on this node: min(N·M − N, the subnet's free
    /// addresses + those already held).
    pub max_pod_ips: u32,
    pub allocations: Vec<IpamAllocation>,
    pub enis: Vec<IpamEni>,
    pub settings: IpamSettings,
}

/// Error code of `ipam.add` when the pool has no address for the pod; the message says
/// why (for example `no free IP: 0 available, 3 cooling, ENI limit 3 reached`). The
/// CNI plugin fails the ADD; the kubelet retries it.
pub const NO_FREE_IP: i64 = -32010;
