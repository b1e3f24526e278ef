//! `ferrule-api`: the versioned control API — method names and the request/response
//! types shared by `ferruled`, `ferrulectl`, `ferrule-agent` and any other client of the
//! control socket, the JSON-RPC 2.0 framing and error codes ([`rpc`]) and the blocking
//! client ([`client`]). No DPDK.
//!
//! Wire format and error codes: `docs/control-protocol.md`.

pub mod acl;
pub mod client;
pub mod fqdn;
pub mod ipam;
pub mod network;
pub mod rpc;

pub use acl::AclApply;
pub use network::network_method;

use serde::{Deserialize, Serialize};

/// Version of the control API. Bumped on any incompatible change to a method's
/// params or result; additions of optional fields do not bump it.
pub const API_VERSION: u32 = 1;

/// Default control socket path (the parent directory is created, the socket is 0600).
pub const DEFAULT_SOCKET: &str = "/run/ferrule/ferrule.sock";

/// Default largest request line, in bytes, the daemon accepts.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1 << 20;

/// Method names.
pub mod method {
    pub const VERSION: &str = "version";
    pub const PORTS_LIST: &str = "ports.list";
    pub const STATS_GET: &str = "stats.get";

    use super::{
        acl_method, ct_method, nat_method, neigh_method, network_method, port_method, route_method,
        trace_method, vpc_method,
    };

    /// Methods that change the daemon's state. The daemon logs each of these requests
    /// (who sent it, its outcome); every other method only reads.
    pub const CHANGES: &[&str] = &[
        port_method::ADD,
        port_method::DEL,
        route_method::ADD,
        route_method::DEL,
        neigh_method::ADD,
        neigh_method::DEL,
        trace_method::START,
        acl_method::APPLY,
        acl_method::CLEAR_COUNTERS,
        vpc_method::SYNC,
        ct_method::FLUSH,
        network_method::APPLY,
        network_method::DEL,
    ];

    /// Methods that only read.
    pub const READ_ONLY: &[&str] = &[
        VERSION,
        PORTS_LIST,
        STATS_GET,
        route_method::DUMP,
        neigh_method::DUMP,
        trace_method::RUN,
        trace_method::DUMP,
        acl_method::DUMP,
        vpc_method::SHOW,
        ct_method::DUMP,
        ct_method::STATS,
        nat_method::DUMP,
        network_method::LIST,
        network_method::LOOKUP,
        network_method::FDB,
    ];

    /// Whether `method` is one that changes the daemon's state ([`CHANGES`]).
    pub fn is_change(method: &str) -> bool {
        CHANGES.contains(&method)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn every_method_is_classified_once() {
            let all: std::collections::BTreeSet<&str> = super::CHANGES
                .iter()
                .chain(super::READ_ONLY)
                .copied()
                .collect();
            assert_eq!(all.len(), super::CHANGES.len() + super::READ_ONLY.len());
            assert_eq!(all.len(), 28);
            assert!(super::is_change("acl.apply") && !super::is_change("acl.dump"));
            assert!(!super::is_change("no.such.method"));
        }
    }
}

/// Result of `version`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct VersionInfo {
    /// [`API_VERSION`] of the daemon.
    pub api_version: u32,
    /// Crate version of the daemon build.
    pub version: String,
    /// Git commit of the build, or "unknown".
    pub git_commit: String,
    /// DPDK version (`rte_version()` without its "DPDK " prefix), e.g. "22.11.11".
    pub dpdk: String,
}

/// Port role, from the configuration (one type with the pipeline's).
pub use ferrule_dataplane::snapshot::PortRole;

/// Per-port counters. `rx_*`/`tx_*`/`drops` are counted by Ferrule's workers (summed
/// over workers); `hw_*` are the driver's own counters (`rte_eth_stats_get`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Packets received on this port that Ferrule dropped (any reason).
    pub drops: u64,
    /// Packets the NIC dropped because no receive descriptor was free.
    pub hw_rx_missed: u64,
    /// Receive errors reported by the driver.
    pub hw_rx_errors: u64,
    /// Transmit errors reported by the driver.
    pub hw_tx_errors: u64,
    /// Receive allocation failures (mempool empty).
    pub hw_rx_nombuf: u64,
}

/// One entry of `ports.list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortInfo {
    /// Configured port name.
    pub name: String,
    /// DPDK port id.
    pub port_id: u16,
    /// DPDK devargs it was created from (vdev string or PCI address).
    pub devargs: String,
    pub role: PortRole,
    /// "up" or "down".
    pub link: String,
    /// Link speed in Mbit/s (0 when unknown).
    pub speed_mbps: u32,
    /// MAC address, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    pub mtu: u16,
    /// Receive queues of the port (spread round-robin over the workers; RSS when > 1).
    pub rx_queues: u16,
    /// Where the static cross-connect sends this port's traffic, if anywhere.
    pub xconnect: Option<String>,
    /// Pod ports: the pod behind the port, `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The network (VRF) the port is in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network: String,
    /// Pod ports: the pod's addresses (given, or handed out by the network's IPAM).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// A primary-network pod's default-network port: only kubelet probes and the
    /// Kubernetes API/DNS addresses pass.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub locked: bool,
    /// Pod ports: the gateway address the pod routes through (Ferrule's, IPv4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_ip: Option<String>,
    /// Pod ports: the MAC that gateway answers with (the port's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_mac: Option<String>,
    /// vhost-user ports: the socket and whether Ferrule serves it or connects to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vhost_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vhost_mode: Option<String>,
    /// Pod ports: the prefixes the pod may send from besides its own addresses
    /// (`allowed_addresses`), as `ADDR/LEN`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_addresses: Vec<String>,
    pub counters: PortCounters,
}

/// Whether `text` names a Kubernetes pod as `namespace/name` (DNS-1123 labels).
pub fn valid_pod_ref(text: &str) -> bool {
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    matches!(text.split_once('/'), Some((ns, name)) if label(ns) && label(name))
}

/// Port methods' names.
pub mod port_method {
    /// Attach a port at run time.
    pub const ADD: &str = "port.add";
    /// Detach a port at run time.
    pub const DEL: &str = "port.del";
}

/// A device `port.add` may create, by kind, with typed parameters. Ferrule builds the
/// DPDK devargs itself; paths must lie under the daemon's configured directories.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PortDevice {
    /// A kernel interface (a pod's veth, an uplink) through `net_af_packet`.
    AfPacket {
        /// Interface name, 1-15 characters.
        iface: String,
    },
    /// A kernel interface through `net_af_xdp` (needs kernel and driver support).
    AfXdp {
        iface: String,
        /// First queue of the interface to bind; default 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_queue: Option<u16>,
    },
    /// A TAP interface Ferrule creates, through `net_tap`.
    Tap { iface: String },
    /// A shared-memory packet interface, through `net_memif`; the socket lies under
    /// `[control] memif_dirs`.
    Memif {
        socket: String,
        /// `server` (default: Ferrule creates the socket) or `client`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<String>,
        /// Interface id on the socket; default 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u32>,
    },
    /// A device that drops what it is sent and receives nothing (`net_null`).
    Null,
    /// Packets read from and written to pcap files under `[control] pcap_dirs`
    /// (`net_pcap`; for tests). `tx_pcap` must not exist yet.
    Pcap {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rx_pcap: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tx_pcap: Option<String>,
    },
}

impl PortDevice {
    /// The kind as written on the wire (`af_packet`, `memif`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            PortDevice::AfPacket { .. } => "af_packet",
            PortDevice::AfXdp { .. } => "af_xdp",
            PortDevice::Tap { .. } => "tap",
            PortDevice::Memif { .. } => "memif",
            PortDevice::Null => "null",
            PortDevice::Pcap { .. } => "pcap",
        }
    }
}

/// Params of `port.add`: exactly one of `vhost_user`, `device` and `devargs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PortAdd {
    pub name: String,
    /// A vhost-user socket path under `[control] vhost_dirs`: the pod is a virtio
    /// device on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vhost_user: Option<String>,
    /// vhost-user: `server` (default: Ferrule creates the socket) or `client`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Queue pairs (vhost-user) or receive queues (other devices); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u16>,
    /// Any other supported device, by kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<PortDevice>,
    /// Raw DPDK devargs: refused unless the daemon sets `[control] allow_raw_devargs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devargs: Option<String>,
    /// Default `pod`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<PortRole>,
    /// Default `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Pod ports: the pod's addresses (`ADDR` or `ADDR/32`, `ADDR/128`); uplink and
    /// host ports: Ferrule's own addresses with their subnet (`ADDR/LEN`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// Pod ports: the pod's MAC (required); others: Ferrule's MAC on the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Pod ports: `namespace/name` of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Default 1500.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u16>,
    /// Pod ports: prefixes (`ADDR/LEN`, host bits clear, or a bare address) the pod may
    /// also send from besides `ips`; port security drops every other source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_addresses: Vec<String>,
}

/// Params of `port.del`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PortDel {
    pub name: String,
}

/// Result of `port.del`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortDeleted {
    pub name: String,
    /// Mbufs out of the pool after the port's were released.
    pub mbufs_in_use: u32,
}

/// Result of `ports.list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortsList {
    pub ports: Vec<PortInfo>,
}

/// A named drop counter.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DropCount {
    /// Drop reason, e.g. `tx-full`, `port-down` (see `docs/control-protocol.md`).
    pub reason: String,
    pub packets: u64,
}

/// Counters of one worker lcore.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WorkerStats {
    /// Worker index (0-based); the control thread is listed last, after the workers,
    /// with `queues` = `["control"]`.
    pub worker: u32,
    /// EAL lcore the worker runs on.
    pub lcore: u32,
    /// Receive queues it polls, as `<port name>/<queue>`.
    pub queues: Vec<String>,
    /// Poll-loop iterations.
    pub polls: u64,
    /// Iterations in which at least one packet was received.
    pub busy_polls: u64,
    pub rx_packets: u64,
    pub tx_packets: u64,
    /// Replies Ferrule answered itself (ARP, neighbour advertisements, echo).
    #[serde(default)]
    pub local_replies: u64,
    /// ICMP errors sent (time exceeded, fragmentation needed, packet too big).
    #[serde(default)]
    pub icmp_errors: u64,
    /// Packets handed to the control thread.
    #[serde(default)]
    pub punts: u64,
    /// Packets handed to the worker that owns their connection.
    #[serde(default)]
    pub handoffs: u64,
    /// Frames switched to one port of a layer-2 segment (Layer2/Localnet networks).
    #[serde(default)]
    pub switched: u64,
    /// Frames flooded to a segment's other ports, and the copies sent for them.
    #[serde(default)]
    pub flooded: u64,
    #[serde(default)]
    pub flood_copies: u64,
    /// Total drops; by reason in `drop_reasons` (only non-zero reasons are listed).
    pub drops: u64,
    pub drop_reasons: Vec<DropCount>,
}

/// Result of `stats.get`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    /// Seconds since the daemon started forwarding.
    pub uptime_secs: f64,
    pub workers: Vec<WorkerStats>,
    /// Per-port counters, summed over workers.
    pub ports: Vec<PortStats>,
    /// Sums over all workers.
    pub totals: Totals,
    /// Mbufs in the packet pool.
    #[serde(default)]
    pub mbufs: u32,
    /// Mbufs out of the pool now (receive rings, in flight, held).
    #[serde(default)]
    pub mbufs_in_use: u32,
}

/// Per-port entry of `stats.get`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortStats {
    pub name: String,
    pub counters: PortCounters,
}

/// Sums over all workers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Totals {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub drops: u64,
    pub drop_reasons: Vec<DropCount>,
}

/// Route methods' names.
pub mod route_method {
    pub const ADD: &str = "route.add";
    pub const DEL: &str = "route.del";
    pub const DUMP: &str = "route.dump";
}

/// Neighbour methods' names.
pub mod neigh_method {
    pub const ADD: &str = "neigh.add";
    pub const DEL: &str = "neigh.del";
    pub const DUMP: &str = "neigh.dump";
}

/// Trace methods' names.
pub mod trace_method {
    /// Run a synthetic packet through the current pipeline.
    pub const RUN: &str = "trace.run";
    /// Capture the next packets received on a port, with their path.
    pub const START: &str = "trace.start";
    /// The packets captured so far.
    pub const DUMP: &str = "trace.dump";
}

/// Params of `route.add`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RouteAdd {
    /// Network (VRF); default `default`.
    #[serde(default)]
    pub network: Option<String>,
    /// `ADDR/LEN` (host bits must be clear), or a bare address for a host route.
    pub prefix: String,
    /// Output port (exclusive with `blackhole`).
    #[serde(default)]
    pub port: Option<String>,
    /// Next-hop address, resolved by ARP/ND on the port; absent means on-link.
    #[serde(default)]
    pub via: Option<String>,
    /// Drop matching packets.
    #[serde(default)]
    pub blackhole: bool,
}

/// Params of `route.del`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RouteDel {
    #[serde(default)]
    pub network: Option<String>,
    pub prefix: String,
}

/// Params of `route.dump` and `neigh.dump`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NetworkFilter {
    #[serde(default)]
    pub network: Option<String>,
}

/// One route of `route.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RouteEntry {
    pub network: String,
    pub prefix: String,
    /// `port`, `blackhole` or `local` (an address of Ferrule's own).
    pub kind: String,
    #[serde(default)]
    pub port: Option<String>,
    #[serde(default)]
    pub via: Option<String>,
    /// Where it comes from: `config`, `api`, `connected` (a port address's subnet),
    /// `pod` (a pod port's address), `local`, `network` (a user-defined network's
    /// plan) or `eni` (an ENI: its primary IP in `main`, its table's default route).
    pub source: String,
    /// The route table: absent for the network's main table, `eni-<device index>` for
    /// a secondary ENI's table (chosen by the packet's source, see `rules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

/// Result of `route.dump`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RouteDump {
    pub routes: Vec<RouteEntry>,
    /// Which sources select a table other than `main` (the ENIs' `ip rule from <pod IP>
    /// lookup eni-N`); absent without secondary ENIs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<SourceRule>,
}

/// The sources that select a route table (`route.dump`): a pod's packet from one of
/// them uses the table when the main table would send it out of an uplink and it is
/// not masqueraded; traffic to pods and masqueraded traffic stay on `main`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SourceRule {
    pub network: String,
    /// The table (`eni-1`).
    pub table: String,
    /// The ENI it belongs to (`eni-0abc`) and its device index.
    pub eni: String,
    pub device_index: u32,
    /// The source IPv4 addresses (the ENI's secondary IPs).
    pub sources: Vec<String>,
}

/// Params of `neigh.add`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NeighAdd {
    #[serde(default)]
    pub network: Option<String>,
    pub ip: String,
    pub mac: String,
    pub port: String,
}

/// Params of `neigh.del`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NeighDel {
    #[serde(default)]
    pub network: Option<String>,
    pub ip: String,
}

/// One neighbour of `neigh.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NeighEntry {
    pub network: String,
    pub ip: String,
    /// Empty while `incomplete`.
    pub mac: String,
    pub port: String,
    /// `static`, `reachable`, `stale` or `incomplete` (resolution under way).
    pub state: String,
    /// Seconds since it was learned or last confirmed (0 for static entries).
    pub age_secs: f64,
    /// Packets held waiting for this neighbour (incomplete entries).
    #[serde(default)]
    pub held_packets: u32,
}

/// Result of `neigh.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NeighDump {
    pub neighbors: Vec<NeighEntry>,
}

/// Params of `trace.run`: a synthetic packet, as if received on `in_port`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TraceRun {
    pub in_port: String,
    /// tcp, udp, sctp, icmp or icmpv6.
    pub proto: String,
    /// `IP` or `IP:PORT` (`[IPv6]:PORT`).
    pub src: String,
    pub dst: String,
    /// e.g. `SYN,ACK` (tcp only; default SYN).
    #[serde(default)]
    pub tcp_flags: Option<String>,
    /// Total IP length in bytes (default: the smallest packet of the protocol).
    #[serde(default)]
    pub len: Option<u16>,
    /// IPv4 TTL / IPv6 hop limit (default 64).
    #[serde(default)]
    pub ttl: Option<u8>,
    /// Source MAC (default: the pod's MAC on pod ports, else a fixed local MAC).
    #[serde(default)]
    pub src_mac: Option<String>,
    /// Destination MAC (default: the port's own MAC).
    #[serde(default)]
    pub dst_mac: Option<String>,
}

/// One stage of a trace.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TraceStage {
    /// Stage name: `parse`, `l2`, `local`, `ttl`, `route`, `neighbor`, `mtu`, `rewrite`, …
    pub stage: String,
    /// What it looked at and what it decided.
    pub detail: String,
}

/// The verdict of a trace.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum TraceVerdict {
    /// Sent out of `port`.
    Forward { port: String },
    /// Dropped for `reason` (a drop-reason name).
    Drop { reason: String },
    /// Handed to worker `worker`, which owns the packet's connection and runs the
    /// pipeline for it (live traces only).
    Handoff { worker: u16 },
    /// A DNS query handed to the DNS proxy, which answers the pod itself (or refuses
    /// the name) after asking the upstream server.
    #[serde(rename = "dns-proxy")]
    DnsProxy,
}

/// Result of `trace.run`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TraceResult {
    pub stages: Vec<TraceStage>,
    pub verdict: TraceVerdict,
}

/// Params of `trace.start`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TraceStart {
    pub port: String,
    /// How many packets to capture (1..=1000).
    pub count: u32,
}

/// A captured packet of `trace.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TracedPacket {
    pub port: String,
    /// Seconds since the daemon started.
    pub time_secs: f64,
    /// Original length on the wire.
    pub len: u32,
    /// The first bytes of the packet as received, hex.
    pub data_hex: String,
    pub stages: Vec<TraceStage>,
    pub verdict: TraceVerdict,
}

/// Result of `trace.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TraceDump {
    /// Packets still to capture.
    pub remaining: u32,
    pub packets: Vec<TracedPacket>,
}

/// ACL methods' names.
pub mod acl_method {
    /// Replace the whole ACL state (tables, attachments, global table).
    pub const APPLY: &str = "acl.apply";
    /// Tables with their rules, hit counters and attachments.
    pub const DUMP: &str = "acl.dump";
    /// Reset hit counters.
    pub const CLEAR_COUNTERS: &str = "acl.clear-counters";
}

/// Result of `acl.apply`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AclApplied {
    /// The generation now in force (the previous one when nothing changed or for a
    /// dry run).
    pub generation: u64,
    /// Whether this was a dry run (validated and compiled, not published).
    pub dry_run: bool,
    pub tables: usize,
    pub rules: usize,
    /// Tables new in this apply, by name.
    pub added: Vec<String>,
    /// Tables whose rules changed (recompiled).
    pub changed: Vec<String>,
    /// Tables no longer present.
    pub removed: Vec<String>,
    /// Tables kept as they were (not recompiled; counters kept).
    pub unchanged: usize,
    /// Whether attachments or the global table changed.
    pub attachments_changed: bool,
    /// Time spent compiling changed tables, in milliseconds.
    pub compile_ms: f64,
    /// Attachments whose port does not exist yet (a port name, or a pod no port records
    /// yet): they take effect when that port is added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<AclPending>,
}

/// An attachment waiting for its port.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AclPending {
    /// The port named, or
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// the pod (`namespace/name`) whose port the table goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// `ingress` or `egress`.
    pub direction: String,
    pub table: String,
}

impl From<&acl::AclAttach> for AclPending {
    fn from(a: &acl::AclAttach) -> Self {
        let (port, pod) = match &a.target {
            acl::AttachTarget::Port(p) => (Some(p.clone()), None),
            acl::AttachTarget::Pod(p) => (None, Some(p.clone())),
        };
        AclPending {
            port,
            pod,
            direction: a.direction.name().to_string(),
            table: a.table.clone(),
        }
    }
}

impl AclApplied {
    /// One line saying what an apply did, as `ferrulectl acl apply` prints it and
    /// `ferrule-agent` logs it.
    pub fn summary(&self) -> String {
        fn names(list: &[String]) -> String {
            if list.is_empty() {
                "-".into()
            } else {
                list.join(", ")
            }
        }
        let head = if self.dry_run {
            "dry run: valid, nothing applied".to_string()
        } else {
            format!("generation {}", self.generation)
        };
        let waiting = if self.pending.is_empty() {
            String::new()
        } else {
            format!("; {} attachments wait for their port", self.pending.len())
        };
        format!(
            "{head}: {} tables, {} rules; added {}; changed {}; removed {}; unchanged {}; \
             attachments {}; compiled in {:.1} ms{waiting}",
            self.tables,
            self.rules,
            names(&self.added),
            names(&self.changed),
            names(&self.removed),
            self.unchanged,
            if self.attachments_changed {
                "changed"
            } else {
                "unchanged"
            },
            self.compile_ms
        )
    }
}

/// Params of `acl.dump`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AclDumpParams {
    /// Only the tables applying at this port (its own and, on uplinks, the global one).
    #[serde(default)]
    pub port: Option<String>,
    /// Only this table.
    #[serde(default)]
    pub table: Option<String>,
}

/// Packets and bytes.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Hits {
    pub packets: u64,
    pub bytes: u64,
}

/// One rule of `acl.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AclRuleDump {
    /// Position in the table (0 = first match).
    pub index: usize,
    pub action: String,
    pub proto: String,
    pub src: String,
    pub dst: String,
    pub src_port: String,
    pub dst_port: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    pub hits: Hits,
}

/// Where a table applies.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AclAttachment {
    pub port: String,
    /// `ingress` or `egress`.
    pub direction: String,
}

/// One table of `acl.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AclTableDump {
    pub name: String,
    pub rules: Vec<AclRuleDump>,
    /// Packets no rule matched (denied).
    pub no_match: Hits,
    pub attached: Vec<AclAttachment>,
    /// Whether this is the global table (egress of every uplink port).
    pub global: bool,
    /// Bytes of the compiled classifier.
    pub memory_bytes: usize,
}

/// Result of `acl.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AclDump {
    pub generation: u64,
    pub tables: Vec<AclTableDump>,
    /// Attachments waiting for their port (see `AclApplied::pending`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<AclPending>,
}

/// Params of `acl.clear-counters`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AclClearParams {
    /// Only this table's counters; all when absent.
    #[serde(default)]
    pub table: Option<String>,
}

/// Result of `acl.clear-counters`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AclCleared {
    /// Rules (and no-match counters) reset.
    pub counters: usize,
}

/// VPC methods' names.
pub mod vpc_method {
    /// Replace the node's VPC state (node IPs, VPC CIDRs, SNAT exclusions and ports).
    pub const SYNC: &str = "vpc.sync";
    /// The VPC state in force.
    pub const SHOW: &str = "vpc.show";
}

/// Params of `vpc.sync`: the whole VPC state of the node.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct VpcSync {
    /// The node's primary IPv4 address(es), each an address Ferrule owns on an uplink
    /// port; pods are masqueraded to the first. Empty: SNAT off.
    #[serde(default)]
    pub node_ips: Vec<String>,
    /// IPv4 CIDRs of the VPC: destinations inside are not masqueraded.
    #[serde(default)]
    pub vpc_cidrs: Vec<String>,
    /// Further IPv4 CIDRs that are not masqueraded.
    #[serde(default)]
    pub snat_exclude: Vec<String>,
    /// SNAT source ports `LO-HI` (the NodePort range 30000-32767 is always left out);
    /// absent: 1024-65535.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snat_ports: Option<String>,
    /// The node's ENIs (`ferrule-ipamd` pushes them): each is an uplink port of
    /// `ferruled`; a pod whose address is a secondary IP of ENI k leaves through ENI k
    /// (its own route table, `eni-<device index>`). When `node_ips` is empty and ENIs
    /// are given, the node IP is the primary ENI's (device index 0) primary IP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enis: Vec<VpcEni>,
}

/// One ENI of the node, as EC2 describes it, and the `ferruled` port that is its
/// interface on this node.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct VpcEni {
    /// The ENI's ID, `eni-` and hex digits.
    pub id: String,
    /// Its MAC address.
    pub mac: String,
    /// Its device index on the instance: 0 is the primary ENI.
    pub device_index: u32,
    /// The CIDR of its subnet.
    pub subnet_cidr: String,
    /// Its subnet's gateway (the subnet's first address, as in EC2).
    pub gateway: String,
    /// Its primary private IPv4 address (never a pod's).
    pub primary_ip: String,
    /// Its secondary private IPv4 addresses (pods' addresses).
    #[serde(default)]
    pub secondary_ips: Vec<String>,
    /// The `ferruled` uplink port that is the ENI's interface; absent: the uplink port
    /// whose MAC is the ENI's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
}

/// Result of `vpc.show` and `vpc.sync`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct VpcState {
    pub node_ips: Vec<String>,
    pub vpc_cidrs: Vec<String>,
    pub snat_exclude: Vec<String>,
    /// The port ranges SNAT hands out, `LO-HI`.
    pub snat_ports: Vec<String>,
    /// The address pods are masqueraded to; `null` when SNAT is off.
    pub snat_address: Option<String>,
    /// The ENIs in force, each with the port it was bound to and its route table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enis: Vec<VpcEniState>,
}

/// An ENI in force (`vpc.show`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct VpcEniState {
    #[serde(flatten)]
    pub eni: VpcEni,
    /// The port it is bound to (`port` of [`VpcEni`], or found by MAC).
    pub bound_port: String,
    /// Its route table's name: `main` for the primary ENI, else `eni-<device index>`.
    pub table: String,
}

/// Conntrack methods' names.
/// `fqdn.*`: the FQDN policy state (`docs/fqdn.md`); no params.
pub mod fqdn_method {
    /// The names the DNS proxy learned: `{"names": [{name, labels, endpoints, ips:
    /// [{ip, expires, identity}]}]}`.
    pub const CACHE: &str = "fqdn.cache";
    /// The identities in use: `{"identities": [{id, labels, refs, prefixes}],
    /// "breaker": {…counters}}`.
    pub const IDENTITIES: &str = "fqdn.identities";
    /// The selectors in force and their identities, the DNS policies, and the proxy's
    /// counters: `{"selectors": [{selector, identities}], "dns": [...], "proxy": {…},
    /// "pending": N}`.
    pub const SELECTORS: &str = "fqdn.selectors";
}

pub mod ct_method {
    /// Tracked connections, filtered.
    pub const DUMP: &str = "ct.dump";
    /// Remove tracked connections, filtered.
    pub const FLUSH: &str = "ct.flush";
    /// Occupancy and counters per worker and zone.
    pub const STATS: &str = "ct.stats";
}

/// NAT methods' names.
pub mod nat_method {
    /// Masqueraded connections with their mappings.
    pub const DUMP: &str = "nat.dump";
}

/// Params of `ct.dump`, `ct.flush` and `nat.dump`: every given field must match.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CtFilterParams {
    /// Zone: the network's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Source address of the original direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
    /// Destination address of the original direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// `tcp`, `udp`, `sctp`, `icmp`, `icmpv6` or a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<String>,
    /// A port of either end, in either direction (ICMP echo: the identifier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// A state as dumps show it (`ESTABLISHED`, `TIME_WAIT`, `ASSURED`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Dumps: at most this many entries (default 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// One direction of a connection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CtTuple {
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dport: u16,
    pub packets: u64,
    pub bytes: u64,
}

/// One tracked connection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CtEntry {
    /// Worker whose table holds it.
    pub worker: u16,
    pub network: String,
    pub proto: String,
    pub state: String,
    /// Seconds before it expires unless a packet refreshes it.
    pub time_left_secs: f64,
    /// The first packet's direction.
    pub original: CtTuple,
    /// The reply direction, as it travels on the wire (after NAT).
    pub reply: CtTuple,
    /// Source NAT: the original source became this address and port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snat: Option<String>,
}

/// Result of `ct.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CtDump {
    pub entries: Vec<CtEntry>,
    /// Some worker had more matching entries than `limit`.
    pub truncated: bool,
}

/// Result of `ct.flush`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CtFlushed {
    pub removed: usize,
}

/// One worker's table in `ct.stats`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CtWorkerStats {
    pub worker: u16,
    pub entries: usize,
    pub capacity: usize,
    pub inserts: u64,
    pub removals: u64,
    pub expirations: u64,
    /// New connections refused: table full, zone full, tuple clash.
    pub table_full: u64,
    pub zone_full: u64,
    pub clashes: u64,
    /// Packets invalid in their connection's state.
    pub invalid: u64,
}

/// Entries of one zone, over all workers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CtZone {
    pub network: String,
    pub entries: usize,
}

/// Result of `ct.stats`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CtStatsResult {
    pub workers: Vec<CtWorkerStats>,
    /// The node-wide limits, over all workers: most connections (`[ct]
    /// max-connections`, by default every table full) and most of one network
    /// (`max-per-zone`); 0 when the workers do not share limits.
    #[serde(default)]
    pub max_connections: u32,
    #[serde(default)]
    pub max_per_zone: u32,
    pub zones: Vec<CtZone>,
    /// The conntrack and NAT drop reasons with their counts, summed over workers
    /// (`ct-invalid`, `ct-table-full`, `snat-ports-exhausted`, `handoff-full`).
    pub drops: Vec<DropCount>,
}

/// One masqueraded connection in `nat.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NatEntry {
    pub worker: u16,
    pub proto: String,
    /// The pod's address and port (ICMP echo: identifier).
    pub inside: String,
    /// What the pod's address and port became.
    pub outside: String,
    /// The remote end.
    pub remote: String,
    pub state: String,
    pub time_left_secs: f64,
}

/// Result of `nat.dump`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NatDump {
    pub entries: Vec<NatEntry>,
    pub truncated: bool,
}
