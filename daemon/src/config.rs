//! `ferruled`'s TOML configuration: parsing, defaults, validation with errors that name
//! the key and the line, and the embedded default (`configs/ferrule.toml`).
//!
//! Every key is documented in `configs/README.md`.

use ferrule_api::{PortRole, VpcSync, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_SOCKET};
use ferrule_dataplane::conntrack::{CtConfig, Timeouts, MAX_ENTRIES};
use ferrule_dataplane::nat::SnatPolicy;
use ferrule_dataplane::wire::EthernetAddress;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The repository's `configs/ferrule.toml`, compiled in: what `ferruled` runs when no
/// `--config` is given and `/etc/ferrule/ferrule.toml` does not exist.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../configs/ferrule.toml");

/// Where `ferruled` looks for its configuration by default.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/ferrule/ferrule.toml";

/// Largest burst a worker handles (the dataplane's `MAX_BURST`).
pub const MAX_BURST_SIZE: u16 = ferrule_dataplane::pipeline::MAX_BURST as u16;

/// Most ports one daemon drives.
pub const MAX_PORTS: usize = 32;

/// Most networks (VRFs) one daemon serves.
pub const MAX_NETWORKS: usize = 256;

/// Largest configuration file `ferruled` reads (the demo's is 3 KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads a regular file of at most `limit` bytes as UTF-8. The file is opened without
/// blocking (a FIFO would otherwise hang the open) and checked on the open descriptor,
/// so it cannot be swapped between the check and the read.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot read the configuration: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read the configuration: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file: the configuration must be a file".into());
    }
    if meta.len() > limit {
        return Err(format!(
            "{} bytes: a configuration is at most {limit} bytes",
            meta.len()
        ));
    }
    let mut text = String::new();
    // A file growing while read still stops at the limit.
    file.take(limit + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the configuration: {e}"))?;
    if text.len() as u64 > limit {
        return Err(format!("a configuration is at most {limit} bytes"));
    }
    Ok(text)
}

/// A configuration error: where (file, line, key) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ConfigError {
    /// File path, or `<embedded default>`.
    pub source_name: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The key at fault, e.g. `port[1].mac`, when known.
    pub key: Option<String>,
    pub message: String,
}

/// The whole configuration, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub eal: EalSection,
    pub control: ControlSection,
    /// `[state]`: where run-time changes are kept across restarts (none: not kept).
    pub state: Option<PathBuf>,
    /// `[metrics] listen`: the Prometheus endpoint's address (none: off).
    pub metrics: Option<std::net::SocketAddr>,
    pub dataplane: DataplaneSection,
    pub log: LogSection,
    pub ports: Vec<PortConfig>,
    /// Networks; index 0 is always the cluster default network.
    pub networks: Vec<NetworkConfig>,
    pub routes: Vec<RouteConfig>,
    pub neighbors: Vec<NeighborConfig>,
    /// `[vpc]`: the node's VPC state at start (SNAT off when it names no node IP);
    /// `vpc.sync` replaces it.
    pub snat: SnatPolicy,
    /// `[ct]`: connection tracking.
    pub ct: CtSection,
    /// `[networks]`: the cluster facts user-defined networks are checked and planned
    /// against.
    pub udn: NetworksSection,
    /// `[fqdn]`: FQDN policy and the DNS proxy.
    pub fqdn: FqdnSection,
}

/// `[fqdn]`: FQDN policy (`docs/fqdn.md`) and the DNS proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FqdnSection {
    /// The cluster DNS service addresses: UDP queries from ports under DNS policy to
    /// them go to the DNS proxy. None: no port can be under DNS policy.
    pub dns_servers: Vec<IpAddr>,
    /// Where the proxy forwards queries (none: the address the pod asked, port 53).
    pub upstream: Option<std::net::SocketAddr>,
    /// The name cache's minimum TTL and the circuit breaker's limits.
    pub config: ferrule_fqdn::FqdnConfig,
    /// How often expired addresses are collected.
    pub gc_interval_ms: u64,
    /// How long the proxy waits for the upstream server's answer.
    pub upstream_timeout_ms: u64,
    /// The name cache and identities' checkpoint (default: beside the state file).
    pub checkpoint: Option<PathBuf>,
    /// Whether `checkpoint` was configured (else it follows the state file, also one
    /// given with `--state`).
    pub checkpoint_configured: bool,
}

/// The FQDN checkpoint beside a state file: `state.json` → `state.json.fqdn`.
pub fn default_checkpoint(state: &Path) -> PathBuf {
    let mut name = state.as_os_str().to_owned();
    name.push(".fqdn");
    PathBuf::from(name)
}

impl Default for FqdnSection {
    fn default() -> Self {
        FqdnSection {
            dns_servers: Vec::new(),
            upstream: None,
            config: ferrule_fqdn::FqdnConfig::default(),
            gc_interval_ms: 1000,
            upstream_timeout_ms: 5000,
            checkpoint: None,
            checkpoint_configured: false,
        }
    }
}

/// `[networks]`: what user-defined networks are validated against and how this node
/// plans them (OVN-Kubernetes' cluster settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworksSection {
    /// This node's index in the cluster: which host subnet of a Layer3 network's
    /// per-node split (`10.128.0.0/16/24`) is this node's.
    pub node_index: u32,
    /// The cluster default network's pod subnets (no user-defined network may overlap).
    pub cluster_subnets: Vec<IpCidr>,
    /// The Kubernetes service subnets.
    pub service_subnets: Vec<IpCidr>,
    /// The default network's join subnets (user-defined join subnets must not overlap).
    pub join_subnets: Vec<IpCidr>,
    /// Where networks' masquerade addresses come from (two per network and family).
    pub masquerade_subnets: Vec<IpCidr>,
    /// Addresses a primary-network pod's default-network interface still reaches: the
    /// Kubernetes API and DNS service addresses.
    pub default_network_allow: Vec<IpCidr>,
    /// MTU of a network whose manifest gives none.
    pub mtu: u16,
    /// Seconds a learned MAC stays in a switched network's table without being seen.
    pub mac_ageing_s: u32,
    /// Localnet networks' physical networks (`physicalNetworkName`, else the network's
    /// name) → the port (an uplink) they are bridged to.
    pub physical_networks: std::collections::BTreeMap<String, String>,
}

impl Default for NetworksSection {
    fn default() -> Self {
        let c = |s: &str| parse_cidr(s).unwrap_or_else(|e| unreachable!("default {s}: {e}"));
        NetworksSection {
            node_index: 0,
            cluster_subnets: vec![c("10.244.0.0/16")],
            service_subnets: vec![c("10.96.0.0/16")],
            join_subnets: vec![c("100.64.0.0/16"), c("fd98::/64")],
            masquerade_subnets: vec![c("169.254.169.0/24"), c("fd69::/112")],
            default_network_allow: vec![c("10.96.0.1/32"), c("10.96.0.10/32")],
            mtu: 1400,
            mac_ageing_s: 300,
            physical_networks: std::collections::BTreeMap::new(),
        }
    }
}

/// `[ct]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtSection {
    /// Each worker's table (its size, `max-entries`) and timeouts; its `max_per_zone`
    /// is `max-per-zone` when set (no table can pass a node-wide limit), else its size.
    pub table: CtConfig,
    /// Most connections on the node, all workers together (`max-connections`; absent:
    /// `max-entries` × workers, i.e. only the tables' sizes).
    pub max_connections: Option<u32>,
    /// Most connections of one network on the node (`max-per-zone`; absent: the node's
    /// limit).
    pub max_per_zone: Option<u32>,
    /// Check tracked connections again when the ACL state changes, closing those the
    /// new rules deny (`policy-recheck`).
    pub policy_recheck: bool,
}

impl CtSection {
    /// The node-wide limits `workers` workers' tables count against: `max-connections`
    /// (default: every table full) and `max-per-zone` (default: `max-connections`).
    pub fn budget(&self, workers: u16) -> std::sync::Arc<ferrule_dataplane::conntrack::CtBudget> {
        let tables = u64::from(self.table.max_entries) * u64::from(workers.max(1));
        let total = self
            .max_connections
            .unwrap_or(tables.min(u64::from(u32::MAX)) as u32);
        let per_zone = self.max_per_zone.unwrap_or(total);
        ferrule_dataplane::conntrack::CtBudget::new(total, per_zone, workers)
    }
}

/// `[eal]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EalSection {
    /// First is the main (control) lcore, the rest run one worker each.
    pub lcores: Vec<u32>,
    /// The CPU each lcore runs on (`cpus`), or empty: each on the CPU of its number.
    pub cpus: Vec<u32>,
    pub memory_mb: u32,
    pub hugepages: bool,
    pub in_memory: bool,
    pub file_prefix: String,
    pub log_level: String,
    pub telemetry: bool,
    pub extra_args: Vec<String>,
}

/// `[control]`: the control socket, who may use it, what one client may hold, and
/// what `port.add` may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlSection {
    pub socket: PathBuf,
    /// Permission bits of the socket file (0600 unless a group or others are allowed).
    pub socket_mode: u32,
    /// Group of the socket file (a gid), for `allowed_gids` clients to reach it.
    pub socket_group: Option<u32>,
    /// Peers (SO_PEERCRED) whose uid is listed may use the socket.
    pub allowed_uids: Vec<u32>,
    /// Peers whose primary gid is listed may use the socket.
    pub allowed_gids: Vec<u32>,
    pub max_request_bytes: usize,
    pub max_clients: usize,
    /// Connections one peer process may hold.
    pub max_clients_per_peer: usize,
    /// Of `max_clients`, slots only root may take.
    pub root_reserved_clients: usize,
    /// Requests in one JSON-RPC batch.
    pub max_batch: usize,
    /// A connection with no request and no reply for this long is closed.
    pub idle_timeout_s: u64,
    /// A request line started and not finished within this is answered and dropped.
    pub request_timeout_s: u64,
    /// Directories vhost-user sockets of `port.add` may be created in.
    pub vhost_dirs: Vec<PathBuf>,
    /// Directories memif sockets of `port.add` may live in.
    pub memif_dirs: Vec<PathBuf>,
    /// Directories pcap files of `port.add` (tests) may be read from and written to.
    pub pcap_dirs: Vec<PathBuf>,
    /// Whether `port.add` accepts raw DPDK devargs (the configuration file always may).
    pub allow_raw_devargs: bool,
}

/// `[dataplane]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataplaneSection {
    pub burst_size: u16,
    pub mbufs: u32,
    pub mbuf_cache: u32,
    pub rx_desc: u16,
    pub tx_desc: u16,
    pub idle_sleep_us: u32,
    pub link_poll_ms: u64,
    /// Learned neighbours are forgotten this long after their last answer; they are
    /// asked again from four fifths of it on.
    pub neighbor_max_age_s: u32,
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSection {
    /// A `tracing` filter, e.g. `info` or `ferrule_daemon=debug,info`.
    pub level: String,
}

/// One `[[port]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    pub name: String,
    /// DPDK devargs: a vdev string (`net_null0,size=64`) or a PCI address.
    pub devargs: String,
    pub role: PortRole,
    pub mac: Option<[u8; 6]>,
    pub mtu: u16,
    pub rx_queues: u16,
    /// Name of the port this one's traffic is cross-connected to (bypasses the
    /// pipeline).
    pub xconnect: Option<String>,
    /// The network (VRF) the port belongs to.
    pub network: String,
    /// Pod ports: the pod's addresses (each gets a /32 or /128 route to the port).
    pub pod_ips: Vec<IpAddr>,
    /// Pod ports: the pod interface's MAC, the destination MAC of frames to the pod.
    pub pod_mac: Option<[u8; 6]>,
    /// Uplink and host ports: Ferrule's own addresses on the port (the node IPs) with
    /// their subnets; each subnet is a connected route and Ferrule answers ARP/ND for
    /// the address.
    pub addresses: Vec<IpCidr>,
    /// Pod ports: the Kubernetes pod behind the port, `namespace/name`.
    pub pod: Option<String>,
    /// Pod ports: prefixes the pod may also send from, besides its `pod_ips` (a VM
    /// behind vhost-user, a router pod); everything else is dropped by port security.
    pub allowed_addresses: Vec<IpCidr>,
}

/// Whether `text` names a pod as `namespace/name` (DNS-1123 labels).
pub use ferrule_api::valid_pod_ref;

/// An address with a prefix length, e.g. `192.0.2.10/24`: the wire's one prefix type.
pub use ferrule_dataplane::wire::IpCidr;

/// Parses `ADDR/LEN`, or a bare address (a host route: /32 or /128).
pub fn parse_cidr(s: &str) -> Result<IpCidr, String> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a
        .trim()
        .parse()
        .map_err(|_| format!("{a:?} is not an IP address"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        None => max,
        Some(l) => l
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("{l:?} is not a prefix length 0..={max}"))?,
    };
    IpCidr::new(addr, len).map_err(|_| format!("{l:?} is not a prefix length 0..={max}"))
}

/// Parses one of a pod port's `allowed_addresses`: `ADDR/LEN` with the host bits clear,
/// or a bare address (/32, /128).
pub fn parse_allowed_address(s: &str) -> Result<IpCidr, String> {
    let prefix = parse_cidr(s)?;
    if prefix.network() != prefix.address() {
        return Err(format!(
            "{prefix} has host bits set (the prefix is {}/{})",
            prefix.network(),
            prefix.prefix_len()
        ));
    }
    Ok(prefix)
}

/// Most `allowed_addresses` a pod port may have (each is compared in turn with the
/// source of the pod's packets that are not from its own addresses).
pub const MAX_ALLOWED_ADDRESSES: usize = ferrule_dataplane::snapshot::PodSources::MAX_ALLOWED;

/// Name of the cluster default network, which always exists.
pub const DEFAULT_NETWORK: &str = "default";

/// Default IPv4 gateway address pods see (as the AWS VPC CNI gives pods).
pub const DEFAULT_GATEWAY_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);

/// Default IPv6 gateway address pods see (link-local).
pub const DEFAULT_GATEWAY_V6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

/// One network (VRF): the default network is id 0, then `[[network]]`s in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    pub name: String,
    /// The pods' IPv4 gateway (answered on every pod port of the network).
    pub gateway_v4: Ipv4Addr,
    /// The pods' IPv6 gateway.
    pub gateway_v6: Ipv6Addr,
}

/// What a route does with matching packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteTarget {
    /// Out of `port`, to the next hop `via`, or straight to the destination (on-link).
    Port { port: usize, via: Option<IpAddr> },
    /// Dropped (`blackhole`).
    Blackhole,
}

/// A `[[route]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    /// Network index (into `Config::networks`).
    pub network: usize,
    pub prefix: IpCidr,
    pub target: RouteTarget,
}

/// A static `[[neighbor]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighborConfig {
    pub network: usize,
    pub ip: IpAddr,
    pub mac: [u8; 6],
    pub port: usize,
}

// ---- raw (as written) ----

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    eal: RawEal,
    #[serde(default)]
    control: RawControl,
    #[serde(default)]
    dataplane: RawDataplane,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    port: Vec<RawPort>,
    #[serde(default)]
    network: Vec<RawNetwork>,
    #[serde(default)]
    route: Vec<RawRoute>,
    #[serde(default)]
    neighbor: Vec<RawNeighbor>,
    #[serde(default)]
    vpc: RawVpc,
    #[serde(default)]
    ct: RawCt,
    #[serde(default)]
    state: RawState,
    #[serde(default)]
    metrics: RawMetrics,
    #[serde(default)]
    networks: RawNetworks,
    #[serde(default)]
    fqdn: RawFqdn,
}

/// `[fqdn]`, as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawFqdn {
    dns_servers: Option<Spanned<Vec<String>>>,
    upstream: Option<Spanned<String>>,
    min_ttl: Option<Spanned<u32>>,
    max_ips_per_name: Option<Spanned<usize>>,
    max_fqdn_identities: Option<Spanned<usize>>,
    gc_interval_ms: Option<Spanned<u64>>,
    upstream_timeout_ms: Option<Spanned<u64>>,
    checkpoint: Option<Spanned<PathBuf>>,
}

impl RawFqdn {
    fn validate(&self, ctx: &Ctx, state: Option<&Path>) -> Result<FqdnSection, ConfigError> {
        let mut out = FqdnSection::default();
        if let Some(v) = &self.dns_servers {
            for (i, text) in v.get_ref().iter().enumerate() {
                let ip: IpAddr = text.parse().map_err(|_| {
                    ctx.err(
                        v.span(),
                        &format!("fqdn.dns_servers[{i}]"),
                        format!("{text:?} is not an IP address"),
                    )
                })?;
                out.dns_servers.push(ip);
            }
        }
        if let Some(u) = &self.upstream {
            let text = u.get_ref();
            out.upstream = Some(text.parse().map_err(|_| {
                ctx.err(
                    u.span(),
                    "fqdn.upstream",
                    format!("{text:?}: ADDRESS:PORT of the DNS server queries are forwarded to"),
                )
            })?);
        }
        if let Some(t) = &self.min_ttl {
            out.config.min_ttl = *t.get_ref();
        }
        let positive = |v: &Option<Spanned<usize>>, key: &str, into: &mut usize| {
            if let Some(v) = v {
                if *v.get_ref() == 0 {
                    return Err(ctx.err(v.span(), key, "at least 1"));
                }
                *into = *v.get_ref();
            }
            Ok(())
        };
        positive(
            &self.max_ips_per_name,
            "fqdn.max_ips_per_name",
            &mut out.config.limits.max_ips_per_name,
        )?;
        positive(
            &self.max_fqdn_identities,
            "fqdn.max_fqdn_identities",
            &mut out.config.limits.max_fqdn_identities,
        )?;
        for (v, key, into) in [
            (
                &self.gc_interval_ms,
                "fqdn.gc_interval_ms",
                &mut out.gc_interval_ms,
            ),
            (
                &self.upstream_timeout_ms,
                "fqdn.upstream_timeout_ms",
                &mut out.upstream_timeout_ms,
            ),
        ] {
            if let Some(v) = v {
                let ms = *v.get_ref();
                if !(10..=3_600_000).contains(&ms) {
                    return Err(ctx.err(v.span(), key, format!("{ms}: 10..=3600000 ms")));
                }
                *into = ms;
            }
        }
        out.checkpoint = match &self.checkpoint {
            Some(p) => {
                let path = p.get_ref();
                if !path.is_absolute() || path.file_name().is_none() {
                    return Err(ctx.err(
                        p.span(),
                        "fqdn.checkpoint",
                        format!("{}: an absolute file path", path.display()),
                    ));
                }
                Some(path.clone())
            }
            None => state.map(default_checkpoint),
        };
        out.checkpoint_configured = self.checkpoint.is_some();
        Ok(out)
    }
}

/// `[networks]`, as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawNetworks {
    node_index: Option<Spanned<u32>>,
    cluster_subnets: Option<Spanned<Vec<String>>>,
    service_subnets: Option<Spanned<Vec<String>>>,
    join_subnets: Option<Spanned<Vec<String>>>,
    masquerade_subnets: Option<Spanned<Vec<String>>>,
    default_network_allow: Option<Spanned<Vec<String>>>,
    mtu: Option<Spanned<u16>>,
    mac_ageing_s: Option<Spanned<u32>>,
    physical_networks: Option<Spanned<std::collections::BTreeMap<String, String>>>,
}

impl RawNetworks {
    fn validate(&self, ctx: &Ctx) -> Result<NetworksSection, ConfigError> {
        let mut out = NetworksSection::default();
        let cidrs = |v: &Option<Spanned<Vec<String>>>,
                     key: &str,
                     into: &mut Vec<IpCidr>|
         -> Result<(), ConfigError> {
            let Some(v) = v else { return Ok(()) };
            let mut list = Vec::new();
            for (i, s) in v.get_ref().iter().enumerate() {
                let c = parse_cidr(s).map_err(|e| ctx.err(v.span(), &format!("{key}[{i}]"), e))?;
                if c.network() != c.address() {
                    return Err(ctx.err(
                        v.span(),
                        &format!("{key}[{i}]"),
                        format!("{s:?} has host bits set"),
                    ));
                }
                list.push(c);
            }
            *into = list;
            Ok(())
        };
        cidrs(
            &self.cluster_subnets,
            "networks.cluster_subnets",
            &mut out.cluster_subnets,
        )?;
        cidrs(
            &self.service_subnets,
            "networks.service_subnets",
            &mut out.service_subnets,
        )?;
        cidrs(
            &self.join_subnets,
            "networks.join_subnets",
            &mut out.join_subnets,
        )?;
        cidrs(
            &self.masquerade_subnets,
            "networks.masquerade_subnets",
            &mut out.masquerade_subnets,
        )?;
        cidrs(
            &self.default_network_allow,
            "networks.default_network_allow",
            &mut out.default_network_allow,
        )?;
        for family in [true, false] {
            if out
                .masquerade_subnets
                .iter()
                .filter(|c| c.address().is_ipv4() == family)
                .count()
                > 1
            {
                return Err(ctx.err(
                    self.masquerade_subnets.as_ref().map_or(0..0, Spanned::span),
                    "networks.masquerade_subnets",
                    "at most one subnet per IP family",
                ));
            }
        }
        if let Some(n) = &self.node_index {
            out.node_index = *n.get_ref();
        }
        if let Some(m) = &self.mtu {
            let mtu = *m.get_ref();
            if !(576..=9216).contains(&mtu) {
                return Err(ctx.err(m.span(), "networks.mtu", format!("{mtu}: 576..=9216")));
            }
            out.mtu = mtu;
        }
        if let Some(a) = &self.mac_ageing_s {
            let s = *a.get_ref();
            if !(10..=1_000_000).contains(&s) {
                return Err(ctx.err(
                    a.span(),
                    "networks.mac_ageing_s",
                    format!("{s}: 10..=1000000 seconds"),
                ));
            }
            out.mac_ageing_s = s;
        }
        if let Some(m) = &self.physical_networks {
            for (name, port) in m.get_ref() {
                let ok = |t: &str| {
                    (1..=64).contains(&t.len())
                        && t.chars()
                            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                };
                if !ok(name) || !ok(port) {
                    return Err(ctx.err(
                        m.span(),
                        &format!("networks.physical_networks.{name}"),
                        format!("{name:?} = {port:?}: a physical network name and a port name (1-64 letters, digits, '-', '_', '.')"),
                    ));
                }
            }
            out.physical_networks = m.get_ref().clone();
        }
        Ok(out)
    }
}

/// `[metrics]`, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawMetrics {
    listen: Spanned<String>,
}

/// Where the metrics endpoint listens by default (local only).
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9469";

impl Default for RawMetrics {
    fn default() -> Self {
        RawMetrics {
            listen: Spanned::new(0..0, DEFAULT_METRICS_LISTEN.to_string()),
        }
    }
}

/// `[state]`, as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawState {
    path: Option<Spanned<PathBuf>>,
}

/// `[ct]`, as written (keys in kebab-case, `[ct.timeouts]` in seconds).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
struct RawCt {
    max_entries: Spanned<u32>,
    max_connections: Option<Spanned<u32>>,
    max_per_zone: Option<Spanned<u32>>,
    policy_recheck: bool,
    timeouts: RawCtTimeouts,
}

impl Default for RawCt {
    fn default() -> Self {
        let d = CtConfig::default();
        RawCt {
            max_entries: Spanned::new(0..0, d.max_entries),
            max_connections: None,
            max_per_zone: None,
            policy_recheck: true,
            timeouts: RawCtTimeouts::default(),
        }
    }
}

/// `[ct.timeouts]`: seconds per state (netfilter's defaults).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
struct RawCtTimeouts {
    tcp_syn_sent: Spanned<u32>,
    tcp_syn_recv: Spanned<u32>,
    tcp_established: Spanned<u32>,
    tcp_fin_wait: Spanned<u32>,
    tcp_close_wait: Spanned<u32>,
    tcp_last_ack: Spanned<u32>,
    tcp_time_wait: Spanned<u32>,
    tcp_close: Spanned<u32>,
    udp_unreplied: Spanned<u32>,
    udp_assured: Spanned<u32>,
    icmp: Spanned<u32>,
    generic: Spanned<u32>,
}

impl Default for RawCtTimeouts {
    fn default() -> Self {
        let d = Timeouts::default();
        let s = |v| Spanned::new(0..0, v);
        RawCtTimeouts {
            tcp_syn_sent: s(d.tcp_syn_sent),
            tcp_syn_recv: s(d.tcp_syn_recv),
            tcp_established: s(d.tcp_established),
            tcp_fin_wait: s(d.tcp_fin_wait),
            tcp_close_wait: s(d.tcp_close_wait),
            tcp_last_ack: s(d.tcp_last_ack),
            tcp_time_wait: s(d.tcp_time_wait),
            tcp_close: s(d.tcp_close),
            udp_unreplied: s(d.udp_unreplied),
            udp_assured: s(d.udp_assured),
            icmp: s(d.icmp),
            generic: s(d.generic),
        }
    }
}

impl RawCt {
    fn validate(&self, ctx: &Ctx) -> Result<CtSection, ConfigError> {
        let max = ctx.in_range(&self.max_entries, "ct.max-entries", 1..=MAX_ENTRIES)?;
        let max_per_zone = self
            .max_per_zone
            .as_ref()
            .map(|m| ctx.in_range(m, "ct.max-per-zone", 1..=u32::MAX))
            .transpose()?;
        let max_connections = self
            .max_connections
            .as_ref()
            .map(|m| ctx.in_range(m, "ct.max-connections", 1..=u32::MAX))
            .transpose()?;
        let t = &self.timeouts;
        let secs = |v: &Spanned<u32>, key: &str| {
            ctx.in_range(v, &format!("ct.timeouts.{key}"), 1..=31_536_000)
        };
        let timeouts = Timeouts {
            tcp_syn_sent: secs(&t.tcp_syn_sent, "tcp-syn-sent")?,
            tcp_syn_recv: secs(&t.tcp_syn_recv, "tcp-syn-recv")?,
            tcp_established: secs(&t.tcp_established, "tcp-established")?,
            tcp_fin_wait: secs(&t.tcp_fin_wait, "tcp-fin-wait")?,
            tcp_close_wait: secs(&t.tcp_close_wait, "tcp-close-wait")?,
            tcp_last_ack: secs(&t.tcp_last_ack, "tcp-last-ack")?,
            tcp_time_wait: secs(&t.tcp_time_wait, "tcp-time-wait")?,
            tcp_close: secs(&t.tcp_close, "tcp-close")?,
            udp_unreplied: secs(&t.udp_unreplied, "udp-unreplied")?,
            udp_assured: secs(&t.udp_assured, "udp-assured")?,
            icmp: secs(&t.icmp, "icmp")?,
            generic: secs(&t.generic, "generic")?,
        };
        Ok(CtSection {
            table: CtConfig {
                max_entries: max,
                // Each table on its own: only its size (the node-wide per-zone limit is
                // the budget's).
                max_per_zone: max_per_zone.unwrap_or(max),
                timeouts,
            },
            max_connections,
            max_per_zone,
            policy_recheck: self.policy_recheck,
        })
    }
}

/// `[vpc]`, as written: the fields of `vpc.sync`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawVpc {
    #[serde(default)]
    node_ips: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    vpc_cidrs: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    snat_exclude: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    snat_ports: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    name: Spanned<String>,
    #[serde(default)]
    gateway_v4: Option<Spanned<String>>,
    #[serde(default)]
    gateway_v6: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    #[serde(default)]
    network: Option<Spanned<String>>,
    prefix: Spanned<String>,
    #[serde(default)]
    port: Option<Spanned<String>>,
    #[serde(default)]
    via: Option<Spanned<String>>,
    #[serde(default)]
    blackhole: Option<Spanned<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNeighbor {
    #[serde(default)]
    network: Option<Spanned<String>>,
    ip: Spanned<String>,
    mac: Spanned<String>,
    port: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawEal {
    lcores: Spanned<Vec<u32>>,
    cpus: Option<Spanned<Vec<u32>>>,
    memory_mb: Spanned<u32>,
    hugepages: bool,
    in_memory: bool,
    file_prefix: Spanned<String>,
    log_level: Spanned<String>,
    telemetry: bool,
    extra_args: Vec<String>,
}

impl Default for RawEal {
    fn default() -> Self {
        RawEal {
            lcores: Spanned::new(0..0, vec![0, 1]),
            cpus: None,
            memory_mb: Spanned::new(0..0, 256),
            hugepages: true,
            in_memory: true,
            file_prefix: Spanned::new(0..0, "ferrule".into()),
            log_level: Spanned::new(0..0, "notice".into()),
            telemetry: false,
            extra_args: Vec::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawControl {
    socket: PathBuf,
    socket_mode: Spanned<u32>,
    socket_group: Option<u32>,
    allowed_uids: Vec<u32>,
    allowed_gids: Vec<u32>,
    max_request_bytes: Spanned<usize>,
    max_clients: Spanned<usize>,
    max_clients_per_peer: Spanned<usize>,
    root_reserved_clients: Spanned<usize>,
    max_batch: Spanned<usize>,
    idle_timeout_s: Spanned<u64>,
    request_timeout_s: Spanned<u64>,
    vhost_dirs: Spanned<Vec<PathBuf>>,
    memif_dirs: Spanned<Vec<PathBuf>>,
    pcap_dirs: Spanned<Vec<PathBuf>>,
    allow_raw_devargs: bool,
}

/// Where `port.add` creates vhost-user sockets by default (mounted into pods).
pub const DEFAULT_VHOST_DIR: &str = "/run/ferrule/vhost";
/// Where memif sockets of `port.add` live by default.
pub const DEFAULT_MEMIF_DIR: &str = "/run/ferrule/memif";

impl Default for RawControl {
    fn default() -> Self {
        RawControl {
            socket: PathBuf::from(DEFAULT_SOCKET),
            socket_mode: Spanned::new(0..0, 0o600),
            socket_group: None,
            allowed_uids: vec![0],
            allowed_gids: Vec::new(),
            max_request_bytes: Spanned::new(0..0, DEFAULT_MAX_REQUEST_BYTES),
            max_clients: Spanned::new(0..0, 256),
            max_clients_per_peer: Spanned::new(0..0, 32),
            root_reserved_clients: Spanned::new(0..0, 8),
            max_batch: Spanned::new(0..0, 1024),
            idle_timeout_s: Spanned::new(0..0, 300),
            request_timeout_s: Spanned::new(0..0, 10),
            vhost_dirs: Spanned::new(0..0, vec![PathBuf::from(DEFAULT_VHOST_DIR)]),
            memif_dirs: Spanned::new(0..0, vec![PathBuf::from(DEFAULT_MEMIF_DIR)]),
            pcap_dirs: Spanned::new(0..0, Vec::new()),
            allow_raw_devargs: false,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDataplane {
    burst_size: Spanned<u16>,
    mbufs: Spanned<u32>,
    mbuf_cache: Spanned<u32>,
    rx_desc: Spanned<u16>,
    tx_desc: Spanned<u16>,
    idle_sleep_us: Spanned<u32>,
    link_poll_ms: Spanned<u64>,
    neighbor_max_age_s: Spanned<u32>,
}

impl Default for RawDataplane {
    fn default() -> Self {
        RawDataplane {
            burst_size: Spanned::new(0..0, 32),
            mbufs: Spanned::new(0..0, 16383),
            mbuf_cache: Spanned::new(0..0, 256),
            rx_desc: Spanned::new(0..0, 1024),
            tx_desc: Spanned::new(0..0, 1024),
            idle_sleep_us: Spanned::new(0..0, 0),
            link_poll_ms: Spanned::new(0..0, 1000),
            neighbor_max_age_s: Spanned::new(0..0, 300),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLog {
    level: Spanned<String>,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            level: Spanned::new(0..0, "info".into()),
        }
    }
}

/// A `[log] level` value: `LEVEL` or `TARGET=LEVEL` directives, comma-separated.
fn valid_log_filter(s: &str) -> bool {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let directive_ok = |d: &str| {
        let level = d
            .rsplit('=')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        LEVELS.contains(&level.as_str())
    };
    !s.trim().is_empty()
        && s.split(',').all(directive_ok)
        && tracing_subscriber::EnvFilter::try_new(s).is_ok()
}

/// An EAL `--log-level` value: `LEVEL` or `PATTERN:LEVEL`.
fn valid_eal_log_level(s: &str) -> bool {
    const NAMES: [&str; 8] = [
        "emergency",
        "alert",
        "critical",
        "error",
        "warning",
        "notice",
        "info",
        "debug",
    ];
    let level = s.rsplit(':').next().unwrap_or("");
    NAMES.contains(&level) || level.parse::<u8>().is_ok_and(|n| (1..=8).contains(&n))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPort {
    name: Spanned<String>,
    devargs: Spanned<String>,
    role: PortRole,
    #[serde(default)]
    mac: Option<Spanned<String>>,
    #[serde(default = "default_mtu")]
    mtu: Spanned<u16>,
    #[serde(default = "default_rx_queues")]
    rx_queues: Spanned<u16>,
    #[serde(default)]
    xconnect: Option<Spanned<String>>,
    #[serde(default)]
    network: Option<Spanned<String>>,
    #[serde(default)]
    pod_ips: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    pod_mac: Option<Spanned<String>>,
    #[serde(default)]
    addresses: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    pod: Option<Spanned<String>>,
    #[serde(default)]
    allowed_addresses: Option<Spanned<Vec<String>>>,
}

fn default_mtu() -> Spanned<u16> {
    Spanned::new(0..0, 1500)
}

fn default_rx_queues() -> Spanned<u16> {
    Spanned::new(0..0, 1)
}

/// Parses a MAC address `aa:bb:cc:dd:ee:ff` (or with `-`), as the wire's
/// [`EthernetAddress`] does.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    s.parse::<EthernetAddress>().ok().map(|m| m.0)
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    EthernetAddress(*mac).to_string()
}

struct Ctx<'a> {
    text: &'a str,
    source_name: &'a str,
}

impl Ctx<'_> {
    fn line_of(&self, span: &Range<usize>) -> Option<usize> {
        if span.start == 0 && span.end == 0 {
            return None; // a default value: no line
        }
        Some(
            self.text[..span.start.min(self.text.len())]
                .matches('\n')
                .count()
                + 1,
        )
    }

    /// The value of a numeric key, or an error naming the key, its line and the range.
    fn in_range<T>(
        &self,
        v: &Spanned<T>,
        key: &str,
        range: std::ops::RangeInclusive<T>,
    ) -> Result<T, ConfigError>
    where
        T: Copy + PartialOrd + std::fmt::Display,
    {
        let x = *v.get_ref();
        if range.contains(&x) {
            Ok(x)
        } else {
            Err(self.err(
                v.span(),
                key,
                format!("{x} is outside {}..={}", range.start(), range.end()),
            ))
        }
    }

    fn err(&self, span: Range<usize>, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            source_name: self.source_name.to_string(),
            line: self.line_of(&span),
            key: Some(key.to_string()),
            message: format!("`{key}`: {}", message.into()),
        }
    }
}

impl Config {
    /// Reads and validates a configuration file.
    /// Only a regular file of at most [`MAX_CONFIG_BYTES`] is read: a device, a FIFO or
    /// a directory is refused before anything is read from it.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let fail = |message: String| ConfigError {
            source_name: path.display().to_string(),
            line: None,
            key: None,
            message,
        };
        let text = read_bounded(path, MAX_CONFIG_BYTES).map_err(fail)?;
        Config::parse(&text, &path.display().to_string())
    }

    /// The embedded default configuration.
    pub fn embedded_default() -> Result<Config, ConfigError> {
        Config::parse(EMBEDDED_DEFAULT, "<embedded default>")
    }

    /// Parses and validates configuration text; `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Config, ConfigError> {
        let ctx = Ctx { text, source_name };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let line = ctx
                .line_of(&span)
                .or(Some(1))
                .filter(|_| e.span().is_some());
            // Name the key written on that line when the message does not.
            let key = line
                .and_then(|l| text.lines().nth(l - 1))
                .and_then(key_on_line);
            let msg = e.message().trim().to_string();
            let message = match &key {
                Some(k) if !msg.contains('`') => format!("`{k}`: {msg}"),
                _ => msg,
            };
            ConfigError {
                source_name: source_name.to_string(),
                line,
                key,
                message,
            }
        })?;
        raw.validate(&ctx)
    }
}

/// The key of a `key = value` line.
fn key_on_line(line: &str) -> Option<String> {
    let (k, _) = line.split_once('=')?;
    let k = k.trim();
    (!k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.\"".contains(c)))
    .then(|| k.trim_matches('"').to_string())
}

impl RawConfig {
    fn validate(self, ctx: &Ctx) -> Result<Config, ConfigError> {
        let eal = self.eal.validate(ctx)?;
        let control = self.control.validate(ctx)?;
        let dataplane = self.dataplane.validate(ctx)?;
        if self.port.len() > MAX_PORTS {
            return Err(ctx.err(0..0, "port", format!("at most {MAX_PORTS} ports")));
        }
        let networks = validate_networks(&self.network, ctx)?;
        let net_index = |n: &Option<Spanned<String>>, key: &str| -> Result<usize, ConfigError> {
            match n {
                None => Ok(0),
                Some(n) => networks
                    .iter()
                    .position(|x| x.name == *n.get_ref())
                    .ok_or_else(|| {
                        ctx.err(n.span(), key, format!("no network named {:?}", n.get_ref()))
                    }),
            }
        };
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        let mut devargs_seen: HashMap<&str, usize> = HashMap::new();
        let mut ports = Vec::with_capacity(self.port.len());
        for (i, p) in self.port.iter().enumerate() {
            let key = |f: &str| format!("port[{i}].{f}");
            let name = p.name.get_ref();
            if name.is_empty()
                || name.len() > 32
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(ctx.err(
                    p.name.span(),
                    &key("name"),
                    format!("{name:?} is not a port name (1-32 of A-Z a-z 0-9 - _ .)"),
                ));
            }
            if let Some(j) = by_name.insert(name, i) {
                return Err(ctx.err(
                    p.name.span(),
                    &key("name"),
                    format!("{name:?} is also port[{j}]"),
                ));
            }
            let devargs = p.devargs.get_ref().trim();
            let dev_name = devargs.split(',').next().unwrap_or("").trim();
            if dev_name.is_empty() {
                return Err(ctx.err(p.devargs.span(), &key("devargs"), "empty devargs"));
            }
            if let Some(j) = devargs_seen.insert(dev_name, i) {
                return Err(ctx.err(
                    p.devargs.span(),
                    &key("devargs"),
                    format!("device {dev_name:?} is also used by port[{j}]"),
                ));
            }
            let pod = match &p.pod {
                None => None,
                Some(v) if valid_pod_ref(v.get_ref()) => Some(v.get_ref().clone()),
                Some(v) => {
                    return Err(ctx.err(
                        v.span(),
                        &key("pod"),
                        format!("{:?} is not NAMESPACE/NAME", v.get_ref()),
                    ))
                }
            };
            let mac = match &p.mac {
                None => None,
                Some(m) => match parse_mac(m.get_ref()) {
                    Some(mac) if mac[0] & 1 == 1 => {
                        return Err(ctx.err(
                            m.span(),
                            &key("mac"),
                            "a multicast MAC cannot be a port's",
                        ))
                    }
                    Some(mac) => Some(mac),
                    None => {
                        return Err(ctx.err(
                            m.span(),
                            &key("mac"),
                            format!("{:?} is not a MAC address (aa:bb:cc:dd:ee:ff)", m.get_ref()),
                        ))
                    }
                },
            };
            let mtu = ctx.in_range(&p.mtu, &key("mtu"), 68..=9600)?;
            let rxq = ctx.in_range(&p.rx_queues, &key("rx_queues"), 1..=16)?;
            let network = net_index(&p.network, &key("network"))?;
            let (pod_ips, pod_mac, addresses) = validate_port_addressing(p, i, ctx)?;
            let allowed_addresses = validate_allowed_addresses(p, i, pod_mac.is_some(), ctx)?;
            ports.push(PortConfig {
                name: name.clone(),
                devargs: devargs.to_string(),
                role: p.role,
                mac,
                mtu,
                rx_queues: rxq,
                xconnect: p.xconnect.as_ref().map(|x| x.get_ref().clone()),
                network: networks[network].name.clone(),
                pod_ips,
                pod_mac,
                addresses,
                pod,
                allowed_addresses,
            });
        }
        for (i, p) in self.port.iter().enumerate() {
            if let Some(x) = &p.xconnect {
                let key = format!("port[{i}].xconnect");
                match by_name.get(x.get_ref().as_str()) {
                    None => {
                        return Err(ctx.err(
                            x.span(),
                            &key,
                            format!("no port named {:?}", x.get_ref()),
                        ))
                    }
                    Some(&j) if j == i => {
                        return Err(ctx.err(
                            x.span(),
                            &key,
                            "a port cannot be cross-connected to itself",
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        let level = self.log.level.get_ref();
        if !valid_log_filter(level) {
            return Err(ctx.err(
                self.log.level.span(),
                "log.level",
                format!(
                    "{level:?} is not a log filter: LEVEL or TARGET=LEVEL, comma-separated, \
                     LEVEL one of off, error, warn, info, debug, trace \
                     (e.g. info or ferrule_daemon=debug,info)"
                ),
            ));
        }
        let log = LogSection {
            level: level.clone(),
        };
        let port_index = |n: &Spanned<String>, key: &str| -> Result<usize, ConfigError> {
            by_name
                .get(n.get_ref().as_str())
                .copied()
                .ok_or_else(|| ctx.err(n.span(), key, format!("no port named {:?}", n.get_ref())))
        };
        let port_network =
            |port: usize| networks.iter().position(|n| n.name == ports[port].network);
        let mut routes: Vec<RouteConfig> = Vec::with_capacity(self.route.len());
        for (i, r) in self.route.iter().enumerate() {
            let key = |f: &str| format!("route[{i}].{f}");
            let network = net_index(&r.network, &key("network"))?;
            let prefix = parse_cidr(r.prefix.get_ref())
                .map_err(|e| ctx.err(r.prefix.span(), &key("prefix"), e))?;
            if prefix.network() != prefix.address() {
                return Err(ctx.err(
                    r.prefix.span(),
                    &key("prefix"),
                    format!(
                        "{prefix} has host bits set (the prefix is {}/{})",
                        prefix.network(),
                        prefix.prefix_len()
                    ),
                ));
            }
            let blackhole = r.blackhole.as_ref().is_some_and(|b| *b.get_ref());
            let target = match (&r.port, blackhole) {
                (Some(p), false) => {
                    let port = port_index(p, &key("port"))?;
                    if port_network(port) != Some(network) {
                        return Err(ctx.err(
                            p.span(),
                            &key("port"),
                            format!(
                                "port {:?} is in network {:?}",
                                p.get_ref(),
                                ports[port].network
                            ),
                        ));
                    }
                    let via = match &r.via {
                        None => None,
                        Some(v) => {
                            let ip: IpAddr = v.get_ref().parse().map_err(|_| {
                                ctx.err(
                                    v.span(),
                                    &key("via"),
                                    format!("{:?} is not an IP address", v.get_ref()),
                                )
                            })?;
                            if ip.is_ipv4() != prefix.address().is_ipv4() {
                                return Err(ctx.err(
                                    v.span(),
                                    &key("via"),
                                    "next hop and prefix differ in IP version",
                                ));
                            }
                            Some(ip)
                        }
                    };
                    RouteTarget::Port { port, via }
                }
                (None, true) => {
                    if let Some(v) = &r.via {
                        return Err(ctx.err(
                            v.span(),
                            &key("via"),
                            "a blackhole route has no next hop",
                        ));
                    }
                    RouteTarget::Blackhole
                }
                (Some(p), true) => {
                    return Err(ctx.err(
                        p.span(),
                        &key("port"),
                        "give either port or blackhole = true, not both",
                    ))
                }
                (None, false) => {
                    return Err(ctx.err(
                        r.prefix.span(),
                        &key("port"),
                        "needs port = \"NAME\" or blackhole = true",
                    ))
                }
            };
            if routes
                .iter()
                .any(|x| x.network == network && x.prefix == prefix)
            {
                return Err(ctx.err(
                    r.prefix.span(),
                    &key("prefix"),
                    format!("{prefix} is routed twice"),
                ));
            }
            routes.push(RouteConfig {
                network,
                prefix,
                target,
            });
        }
        let mut neighbors = Vec::with_capacity(self.neighbor.len());
        for (i, n) in self.neighbor.iter().enumerate() {
            let key = |f: &str| format!("neighbor[{i}].{f}");
            let network = net_index(&n.network, &key("network"))?;
            let ip: IpAddr = n.ip.get_ref().parse().map_err(|_| {
                ctx.err(
                    n.ip.span(),
                    &key("ip"),
                    format!("{:?} is not an IP address", n.ip.get_ref()),
                )
            })?;
            let mac = parse_mac(n.mac.get_ref())
                .filter(|m| m[0] & 1 == 0)
                .ok_or_else(|| {
                    ctx.err(
                        n.mac.span(),
                        &key("mac"),
                        format!("{:?} is not a unicast MAC address", n.mac.get_ref()),
                    )
                })?;
            let port = port_index(&n.port, &key("port"))?;
            if port_network(port) != Some(network) {
                return Err(ctx.err(
                    n.port.span(),
                    &key("port"),
                    format!(
                        "port {:?} is in network {:?}",
                        n.port.get_ref(),
                        ports[port].network
                    ),
                ));
            }
            neighbors.push(NeighborConfig {
                network,
                ip,
                mac,
                port,
            });
        }
        let snat = self.vpc.validate(&ports, ctx)?;
        let ct = self.ct.validate(ctx)?;
        let udn = self.networks.validate(ctx)?;
        let state = match &self.state.path {
            None => None,
            Some(p) => {
                let path = p.get_ref();
                if !path.is_absolute() || path.file_name().is_none() {
                    return Err(ctx.err(
                        p.span(),
                        "state.path",
                        format!("{}: an absolute file path", path.display()),
                    ));
                }
                Some(path.clone())
            }
        };
        let listen = self.metrics.listen.get_ref();
        let metrics = if listen.is_empty() {
            None
        } else {
            Some(listen.parse().map_err(|_| {
                ctx.err(
                    self.metrics.listen.span(),
                    "metrics.listen",
                    format!(
                        "{listen:?}: ADDRESS:PORT, e.g. 127.0.0.1:9469 (\"\" turns metrics off)"
                    ),
                )
            })?)
        };
        let fqdn = self.fqdn.validate(ctx, state.as_deref())?;
        Ok(Config {
            fqdn,
            eal,
            control,
            state,
            metrics,
            dataplane,
            log,
            ports,
            networks,
            routes,
            neighbors,
            snat,
            ct,
            udn,
        })
    }
}

impl RawVpc {
    fn validate(&self, ports: &[PortConfig], ctx: &Ctx) -> Result<SnatPolicy, ConfigError> {
        let list = |v: &Option<Spanned<Vec<String>>>| {
            v.as_ref().map(|l| l.get_ref().clone()).unwrap_or_default()
        };
        let spec = VpcSync {
            node_ips: list(&self.node_ips),
            vpc_cidrs: list(&self.vpc_cidrs),
            snat_exclude: list(&self.snat_exclude),
            snat_ports: self.snat_ports.as_ref().map(|p| p.get_ref().clone()),
            enis: Vec::new(),
        };
        let uplink: Vec<Ipv4Addr> = ports
            .iter()
            .filter(|p| p.role == PortRole::Uplink)
            .flat_map(|p| p.addresses.iter())
            .filter_map(|c| match c.address() {
                IpAddr::V4(a) => Some(a),
                IpAddr::V6(_) => None,
            })
            .collect();
        crate::vpc::policy(&spec, &uplink).map_err(|e| {
            let name = e.field.split('[').next().unwrap_or("vpc").to_string();
            let span = match name.as_str() {
                "node_ips" => self.node_ips.as_ref().map(Spanned::span),
                "vpc_cidrs" => self.vpc_cidrs.as_ref().map(Spanned::span),
                "snat_exclude" => self.snat_exclude.as_ref().map(Spanned::span),
                _ => self.snat_ports.as_ref().map(Spanned::span),
            };
            ctx.err(span.unwrap_or(0..0), &format!("vpc.{}", e.field), e.message)
        })
    }
}

fn validate_networks(raw: &[RawNetwork], ctx: &Ctx) -> Result<Vec<NetworkConfig>, ConfigError> {
    let mut networks = vec![NetworkConfig {
        name: DEFAULT_NETWORK.to_string(),
        gateway_v4: DEFAULT_GATEWAY_V4,
        gateway_v6: DEFAULT_GATEWAY_V6,
    }];
    let mut seen_default = false;
    for (i, n) in raw.iter().enumerate() {
        let key = |f: &str| format!("network[{i}].{f}");
        let name = n.name.get_ref();
        if name.is_empty()
            || name.len() > 32
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(ctx.err(
                n.name.span(),
                &key("name"),
                format!("{name:?} is not a network name"),
            ));
        }
        let mut net = NetworkConfig {
            name: name.clone(),
            gateway_v4: DEFAULT_GATEWAY_V4,
            gateway_v6: DEFAULT_GATEWAY_V6,
        };
        if let Some(g) = &n.gateway_v4 {
            net.gateway_v4 = g.get_ref().parse().map_err(|_| {
                ctx.err(
                    g.span(),
                    &key("gateway_v4"),
                    format!("{:?} is not an IPv4 address", g.get_ref()),
                )
            })?;
        }
        if let Some(g) = &n.gateway_v6 {
            net.gateway_v6 = g.get_ref().parse().map_err(|_| {
                ctx.err(
                    g.span(),
                    &key("gateway_v6"),
                    format!("{:?} is not an IPv6 address", g.get_ref()),
                )
            })?;
        }
        if name == DEFAULT_NETWORK {
            if seen_default {
                return Err(ctx.err(
                    n.name.span(),
                    &key("name"),
                    "network \"default\" is defined twice",
                ));
            }
            seen_default = true;
            networks[0] = net; // settings of the default network
        } else if networks.iter().any(|x| x.name == *name) {
            return Err(ctx.err(
                n.name.span(),
                &key("name"),
                format!("network {name:?} is defined twice"),
            ));
        } else {
            networks.push(net);
        }
    }
    if networks.len() > MAX_NETWORKS {
        return Err(ctx.err(0..0, "network", format!("at most {MAX_NETWORKS} networks")));
    }
    Ok(networks)
}

type PortAddressing = (Vec<IpAddr>, Option<[u8; 6]>, Vec<IpCidr>);

fn validate_port_addressing(
    p: &RawPort,
    i: usize,
    ctx: &Ctx,
) -> Result<PortAddressing, ConfigError> {
    let key = |f: &str| format!("port[{i}].{f}");
    let mut pod_ips = Vec::new();
    if let Some(ips) = &p.pod_ips {
        if p.role != PortRole::Pod {
            return Err(ctx.err(ips.span(), &key("pod_ips"), "only pod ports have pod_ips"));
        }
        for ip in ips.get_ref() {
            let addr: IpAddr = ip.parse().map_err(|_| {
                ctx.err(
                    ips.span(),
                    &key("pod_ips"),
                    format!("{ip:?} is not an IP address"),
                )
            })?;
            pod_ips.push(addr);
        }
    }
    let pod_mac = match &p.pod_mac {
        None => None,
        Some(m) => {
            if p.role != PortRole::Pod {
                return Err(ctx.err(m.span(), &key("pod_mac"), "only pod ports have a pod_mac"));
            }
            Some(
                parse_mac(m.get_ref())
                    .filter(|mac| mac[0] & 1 == 0)
                    .ok_or_else(|| {
                        ctx.err(
                            m.span(),
                            &key("pod_mac"),
                            format!("{:?} is not a unicast MAC address", m.get_ref()),
                        )
                    })?,
            )
        }
    };
    if !pod_ips.is_empty() && pod_mac.is_none() {
        return Err(ctx.err(
            p.name.span(),
            &key("pod_mac"),
            "a pod port with pod_ips needs pod_mac (the pod interface's MAC)",
        ));
    }
    let mut addresses = Vec::new();
    if let Some(list) = &p.addresses {
        if p.role == PortRole::Pod {
            return Err(ctx.err(
                list.span(),
                &key("addresses"),
                "pod ports have pod_ips, not addresses",
            ));
        }
        for a in list.get_ref() {
            if !a.contains('/') {
                return Err(ctx.err(
                    list.span(),
                    &key("addresses"),
                    format!("{a:?} needs its subnet's prefix length, e.g. 192.0.2.10/24"),
                ));
            }
            let cidr = parse_cidr(a).map_err(|e| ctx.err(list.span(), &key("addresses"), e))?;
            let max = if cidr.address().is_ipv4() { 32 } else { 128 };
            if cidr.prefix_len() == max || cidr.network() == cidr.address() {
                return Err(ctx.err(
                    list.span(),
                    &key("addresses"),
                    format!("{a:?}: an address on a subnet, not the subnet or a host route"),
                ));
            }
            addresses.push(cidr);
        }
    }
    Ok((pod_ips, pod_mac, addresses))
}

/// A pod port's `allowed_addresses`: prefixes with their host bits clear, at most
/// [`MAX_ALLOWED_ADDRESSES`], on a pod port that has a `pod_mac`.
fn validate_allowed_addresses(
    p: &RawPort,
    i: usize,
    has_pod_mac: bool,
    ctx: &Ctx,
) -> Result<Vec<IpCidr>, ConfigError> {
    let key = format!("port[{i}].allowed_addresses");
    let Some(list) = &p.allowed_addresses else {
        return Ok(Vec::new());
    };
    if p.role != PortRole::Pod {
        return Err(ctx.err(list.span(), &key, "only pod ports have allowed_addresses"));
    }
    if !list.get_ref().is_empty() && !has_pod_mac {
        return Err(ctx.err(
            list.span(),
            &key,
            "a pod port with allowed_addresses needs pod_mac (the pod interface's MAC)",
        ));
    }
    if list.get_ref().len() > MAX_ALLOWED_ADDRESSES {
        return Err(ctx.err(
            list.span(),
            &key,
            format!("at most {MAX_ALLOWED_ADDRESSES} prefixes (aggregate them)"),
        ));
    }
    list.get_ref()
        .iter()
        .map(|a| parse_allowed_address(a).map_err(|e| ctx.err(list.span(), &key, e)))
        .collect()
}

impl RawEal {
    fn validate(self, ctx: &Ctx) -> Result<EalSection, ConfigError> {
        let lcores = self.lcores.get_ref();
        if lcores.len() < 2 {
            return Err(ctx.err(
                self.lcores.span(),
                "eal.lcores",
                "needs at least two lcores: the main (control) lcore, then one per worker",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for l in lcores {
            if *l >= 128 || !seen.insert(*l) {
                return Err(ctx.err(
                    self.lcores.span(),
                    "eal.lcores",
                    format!("lcore {l} is repeated or out of range 0..128"),
                ));
            }
        }
        let cpus = match &self.cpus {
            None => Vec::new(),
            Some(c) => {
                if c.get_ref().len() != lcores.len() {
                    return Err(ctx.err(
                        c.span(),
                        "eal.cpus",
                        format!(
                            "{} CPUs for {} lcores: give one CPU per lcore, in the order of \
                             `lcores`",
                            c.get_ref().len(),
                            lcores.len()
                        ),
                    ));
                }
                if let Some(bad) = c.get_ref().iter().find(|&&cpu| cpu >= 1024) {
                    return Err(ctx.err(
                        c.span(),
                        "eal.cpus",
                        format!("CPU {bad} is out of range 0..1024"),
                    ));
                }
                c.get_ref().clone()
            }
        };
        let mem = *self.memory_mb.get_ref();
        if mem < 64 {
            return Err(ctx.err(
                self.memory_mb.span(),
                "eal.memory_mb",
                format!("{mem} MiB is below 64"),
            ));
        }
        let prefix = self.file_prefix.get_ref();
        if prefix.is_empty()
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(ctx.err(
                self.file_prefix.span(),
                "eal.file_prefix",
                format!("{prefix:?} must be non-empty and use only A-Z a-z 0-9 - _ ."),
            ));
        }
        let level = self.log_level.get_ref();
        if !valid_eal_log_level(level) {
            return Err(ctx.err(
                self.log_level.span(),
                "eal.log_level",
                format!(
                    "{level:?} is not an EAL log level: one of emergency, alert, critical, \
                     error, warning, notice, info, debug or 1-8, optionally after PATTERN:"
                ),
            ));
        }
        Ok(EalSection {
            lcores: lcores.clone(),
            cpus,
            memory_mb: mem,
            hugepages: self.hugepages,
            in_memory: self.in_memory,
            file_prefix: prefix.clone(),
            log_level: self.log_level.into_inner(),
            telemetry: self.telemetry,
            extra_args: self.extra_args,
        })
    }
}

impl RawControl {
    fn validate(self, ctx: &Ctx) -> Result<ControlSection, ConfigError> {
        let max = ctx.in_range(
            &self.max_request_bytes,
            "control.max_request_bytes",
            1024..=64 << 20,
        )?;
        let clients = ctx.in_range(&self.max_clients, "control.max_clients", 1..=65536)?;
        let per_peer = ctx.in_range(
            &self.max_clients_per_peer,
            "control.max_clients_per_peer",
            1..=clients,
        )?;
        let reserved = ctx.in_range(
            &self.root_reserved_clients,
            "control.root_reserved_clients",
            0..=clients - 1,
        )?;
        let mode = *self.socket_mode.get_ref();
        if mode & !0o666 != 0 || mode & 0o600 != 0o600 {
            return Err(ctx.err(
                self.socket_mode.span(),
                "control.socket_mode",
                format!(
                    "{mode:#o}: read and write for the owner (0o600), optionally for the \
                     group (0o660) or others (0o666); no execute or special bits"
                ),
            ));
        }
        if self.allowed_uids.is_empty() && self.allowed_gids.is_empty() {
            return Err(ctx.err(
                0..0,
                "control.allowed_uids",
                "no uid and no gid may use the socket: list at least one (0 is root)",
            ));
        }
        let dirs = |v: &Spanned<Vec<PathBuf>>, key: &str| -> Result<Vec<PathBuf>, ConfigError> {
            for d in v.get_ref() {
                let clean = d.is_absolute()
                    && d.components().all(|c| {
                        matches!(
                            c,
                            std::path::Component::RootDir | std::path::Component::Normal(_)
                        )
                    });
                if !clean || d.parent().is_none() {
                    return Err(ctx.err(
                        v.span(),
                        key,
                        format!(
                            "{}: an absolute directory other than /, without . or ..",
                            d.display()
                        ),
                    ));
                }
            }
            Ok(v.get_ref().clone())
        };
        Ok(ControlSection {
            socket: self.socket,
            socket_mode: mode,
            socket_group: self.socket_group,
            allowed_uids: self.allowed_uids,
            allowed_gids: self.allowed_gids,
            max_request_bytes: max,
            max_clients: clients,
            max_clients_per_peer: per_peer,
            root_reserved_clients: reserved,
            max_batch: ctx.in_range(&self.max_batch, "control.max_batch", 1..=100_000)?,
            idle_timeout_s: ctx.in_range(
                &self.idle_timeout_s,
                "control.idle_timeout_s",
                1..=86_400,
            )?,
            request_timeout_s: ctx.in_range(
                &self.request_timeout_s,
                "control.request_timeout_s",
                1..=3_600,
            )?,
            vhost_dirs: dirs(&self.vhost_dirs, "control.vhost_dirs")?,
            memif_dirs: dirs(&self.memif_dirs, "control.memif_dirs")?,
            pcap_dirs: dirs(&self.pcap_dirs, "control.pcap_dirs")?,
            allow_raw_devargs: self.allow_raw_devargs,
        })
    }
}

impl RawDataplane {
    fn validate(self, ctx: &Ctx) -> Result<DataplaneSection, ConfigError> {
        let burst = ctx.in_range(&self.burst_size, "dataplane.burst_size", 1..=MAX_BURST_SIZE)?;
        let mbufs = *self.mbufs.get_ref();
        if mbufs < 1024 {
            return Err(ctx.err(
                self.mbufs.span(),
                "dataplane.mbufs",
                format!("{mbufs} is below 1024"),
            ));
        }
        let rx_desc = ctx.in_range(&self.rx_desc, "dataplane.rx_desc", 64..=16384)?;
        let tx_desc = ctx.in_range(&self.tx_desc, "dataplane.tx_desc", 64..=16384)?;
        let cache = *self.mbuf_cache.get_ref();
        // DPDK's limits: at most 512 per lcore, and the pool at least 1.5 times the cache.
        if cache > 512 || u64::from(cache) * 3 > u64::from(mbufs) * 2 {
            return Err(ctx.err(
                self.mbuf_cache.span(),
                "dataplane.mbuf_cache",
                format!(
                    "{cache} must be at most 512 and at most dataplane.mbufs / 1.5 ({mbufs} mbufs)"
                ),
            ));
        }
        let idle = *self.idle_sleep_us.get_ref();
        if idle > 100_000 {
            return Err(ctx.err(
                self.idle_sleep_us.span(),
                "dataplane.idle_sleep_us",
                format!("{idle} is above 100000 (100 ms)"),
            ));
        }
        let poll = *self.link_poll_ms.get_ref();
        if poll == 0 {
            return Err(ctx.err(
                self.link_poll_ms.span(),
                "dataplane.link_poll_ms",
                "must be at least 1",
            ));
        }
        let age = ctx.in_range(
            &self.neighbor_max_age_s,
            "dataplane.neighbor_max_age_s",
            2..=86_400,
        )?;
        Ok(DataplaneSection {
            burst_size: burst,
            mbufs,
            mbuf_cache: cache,
            rx_desc,
            tx_desc,
            idle_sleep_us: idle,
            link_poll_ms: poll,
            neighbor_max_age_s: age,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, "test.toml")
    }

    /// 1-based line of the first line containing `needle`.
    fn line_of(text: &str, needle: &str) -> Option<usize> {
        text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
    }

    const TWO_PORTS: &str = r#"
[[port]]
name = "a"
devargs = "net_null0"
role = "pod"
xconnect = "b"

[[port]]
name = "b"
devargs = "net_null1"
role = "uplink"
mac = "02:00:00:00:00:0b"
"#;

    #[test]
    fn embedded_default_is_valid() {
        let cfg = Config::embedded_default().expect("embedded default parses");
        assert!(cfg.ports.len() >= 2);
        assert!(
            cfg.ports.iter().all(|p| !crate::daemon::is_pci(&p.devargs)),
            "virtual ports only"
        );
    }

    #[test]
    fn defaults_apply() {
        let cfg = parse(TWO_PORTS).expect("valid");
        assert_eq!(cfg.eal.lcores, vec![0, 1]);
        assert_eq!(cfg.dataplane.burst_size, 32);
        assert_eq!(cfg.control.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(cfg.ports[0].mtu, 1500);
        assert_eq!(cfg.ports[0].xconnect.as_deref(), Some("b"));
        assert_eq!(cfg.ports[1].mac, Some([2, 0, 0, 0, 0, 0x0b]));
        assert_eq!(cfg.ports[1].role, PortRole::Uplink);
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let e = parse("[eal]\nlcores = [0, 1]\nhugepage = true\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("hugepage"), "{e}");
        assert!(e.to_string().starts_with("test.toml:3:"), "{e}");
    }

    #[test]
    fn vpc_section_sets_the_snat_policy() {
        let with_uplink = TWO_PORTS.replace(
            "mac = \"02:00:00:00:00:0b\"",
            "mac = \"02:00:00:00:00:0b\"\naddresses = [\"192.0.2.10/24\"]",
        );
        let ok = format!(
            "{with_uplink}\n[vpc]\nnode_ips = [\"192.0.2.10\"]\nvpc_cidrs = [\"10.0.0.0/16\"]\nsnat_ports = \"61000-61999\"\n"
        );
        let cfg = parse(&ok).expect("valid");
        assert_eq!(cfg.snat.snat_addr(), Some(Ipv4Addr::new(192, 0, 2, 10)));
        assert_eq!(cfg.snat.ports, vec![(61000, 61999)]);
        assert!(parse(TWO_PORTS).expect("valid").snat.node_ips.is_empty());
        let bad = ok.replace("[\"192.0.2.10\"]", "[\"192.0.2.99\"]");
        let e = parse(&bad).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("vpc.node_ips[0]"));
        assert_eq!(e.line, line_of(&bad, "node_ips ="));
        assert!(
            e.message.contains("not an address of an uplink port"),
            "{e}"
        );
        let bad = ok.replace("61000-61999", "61999-61000");
        let e = parse(&bad).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("vpc.snat_ports"));
        assert_eq!(e.line, line_of(&bad, "snat_ports ="));
    }

    #[test]
    fn lcores_may_share_cpus() {
        let text = format!("[eal]\nlcores = [0, 1, 2]\ncpus = [0, 1, 1]\n{TWO_PORTS}");
        let cfg = parse(&text).expect("valid");
        assert_eq!(cfg.eal.cpus, vec![0, 1, 1]);
        let args = crate::daemon::eal_config(&cfg).args("ferruled");
        assert!(
            args.windows(2).any(|w| w == ["--lcores", "0@0,1@1,2@1"]),
            "{args:?}"
        );
        let bad = text.replace("cpus = [0, 1, 1]", "cpus = [0, 1]");
        let e = parse(&bad).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("eal.cpus"));
        assert_eq!(e.line, line_of(&bad, "cpus ="));
        assert!(e.message.contains("2 CPUs for 3 lcores"), "{e}");
    }

    #[test]
    fn ct_limits_are_node_wide() {
        let cfg = parse(TWO_PORTS).expect("valid");
        assert_eq!(cfg.ct.max_connections, None);
        let b = cfg.ct.budget(2);
        assert_eq!(
            (b.max_total(), b.max_per_zone()),
            (2 * 262_144, 2 * 262_144)
        );
        assert_eq!(cfg.ct.table.max_per_zone, 262_144, "a table: its size");
        let text = format!(
            "{TWO_PORTS}\n[ct]\nmax-entries = 1000\nmax-connections = 1500\nmax-per-zone = 300\n"
        );
        let cfg = parse(&text).expect("valid");
        assert_eq!(cfg.ct.table.max_entries, 1000);
        let b = cfg.ct.budget(2);
        assert_eq!((b.max_total(), b.max_per_zone()), (1500, 300));
        assert_eq!(cfg.ct.table.max_per_zone, 300);
        let no_zone = text.replace("max-per-zone = 300\n", "");
        let b = parse(&no_zone).expect("valid").ct.budget(2);
        assert_eq!((b.max_total(), b.max_per_zone()), (1500, 1500));
        let bad = text.replace("max-connections = 1500", "max-connections = 0");
        let e = parse(&bad).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("ct.max-connections"));
        assert_eq!(e.line, line_of(&bad, "max-connections ="));
    }

    #[test]
    fn bad_values_are_named_with_their_line() {
        let bad_mac = TWO_PORTS.replace("02:00:00:00:00:0b", "02:00:00:00:0b");
        let e = parse(&bad_mac).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("port[1].mac"));
        assert_eq!(e.line, line_of(&bad_mac, "02:00:00:00:0b"));

        let bad_role = TWO_PORTS.replace("\"uplink\"", "\"spine\"");
        let e = parse(&bad_role).unwrap_err();
        assert_eq!(e.line, line_of(&bad_role, "spine"), "{e}");
        assert!(
            e.message.contains("spine") || e.message.contains("role"),
            "{e}"
        );

        let bad_type = "[dataplane]\nburst_size = \"lots\"\n";
        let e = parse(bad_type).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("burst_size"), "{e}");

        let e = parse("[dataplane]\nburst_size = 1000\n").unwrap_err();
        assert_eq!(
            (e.key.as_deref(), e.line),
            (Some("dataplane.burst_size"), Some(2))
        );

        let e = parse("[eal]\nlcores = [3]\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("eal.lcores"), Some(2)));

        // [fqdn]
        let c = parse(
            "[state]\npath = \"/var/lib/ferrule/state.json\"\n[fqdn]\ndns_servers = [\"10.96.0.10\", \"fd00::a\"]\nupstream = \"127.0.0.1:5353\"\nmin_ttl = 5\nmax_ips_per_name = 50\n",
        )
        .unwrap();
        assert_eq!(c.fqdn.dns_servers.len(), 2);
        assert_eq!(c.fqdn.upstream, Some("127.0.0.1:5353".parse().unwrap()));
        assert_eq!(
            (c.fqdn.config.min_ttl, c.fqdn.config.limits.max_ips_per_name),
            (5, 50)
        );
        assert_eq!(
            c.fqdn.checkpoint.as_deref(),
            Some(Path::new("/var/lib/ferrule/state.json.fqdn"))
        );
        assert_eq!(parse("").unwrap().fqdn, FqdnSection::default());
        for (text, key) in [
            ("[fqdn]\ndns_servers = [\"dns\"]\n", "fqdn.dns_servers[0]"),
            ("[fqdn]\nupstream = \"127.0.0.1\"\n", "fqdn.upstream"),
            (
                "[fqdn]\nmax_fqdn_identities = 0\n",
                "fqdn.max_fqdn_identities",
            ),
            ("[fqdn]\ngc_interval_ms = 1\n", "fqdn.gc_interval_ms"),
            ("[fqdn]\ncheckpoint = \"fqdn.json\"\n", "fqdn.checkpoint"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!((e.key.as_deref(), e.line), (Some(key), Some(2)), "{e}");
        }
    }

    #[test]
    fn log_levels_and_pool_limits_are_checked() {
        let e = parse("[log]\nlevel = \"loud\"\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("log.level"), Some(2)));
        assert!(parse("[log]\nlevel = \"ferrule_daemon=debug,warn\"\n").is_ok());
        let e = parse("[eal]\nlog_level = \"chatty\"\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("eal.log_level"), Some(2)));
        assert!(parse("[eal]\nlog_level = \"pmd.net.*:debug\"\n").is_ok());
        assert!(parse("[eal]\nlog_level = \"7\"\n").is_ok());
        let e = parse("[dataplane]\nmbufs = 1024\nmbuf_cache = 700\n").unwrap_err();
        assert_eq!(
            (e.key.as_deref(), e.line),
            (Some("dataplane.mbuf_cache"), Some(3))
        );
        let e = parse("[dataplane]\nidle_sleep_us = 5000000\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("dataplane.idle_sleep_us"));
    }

    #[test]
    fn cross_references_are_checked() {
        let text = TWO_PORTS.replace("xconnect = \"b\"", "xconnect = \"c\"");
        let e = parse(&text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("port[0].xconnect"));
        assert_eq!(e.line, line_of(&text, "\"c\""));
        let e = parse(&TWO_PORTS.replace("xconnect = \"b\"", "xconnect = \"a\"")).unwrap_err();
        assert!(e.message.contains("itself"));
        let e = parse(&TWO_PORTS.replace("name = \"b\"", "name = \"a\"")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("port[1].name"));
        let e = parse(&TWO_PORTS.replace("net_null1", "net_null0")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("port[1].devargs"));
    }

    #[test]
    fn missing_required_key_is_reported() {
        let e = parse("[[port]]\nname = \"a\"\nrole = \"pod\"\n").unwrap_err();
        assert!(e.message.contains("devargs"), "{e}");
    }

    #[test]
    fn mac_parsing() {
        assert_eq!(
            parse_mac("02:AB:cd:00:00:01"),
            Some([2, 0xab, 0xcd, 0, 0, 1])
        );
        assert_eq!(
            parse_mac("02-ab-cd-00-00-01"),
            Some([2, 0xab, 0xcd, 0, 0, 1])
        );
        assert_eq!(parse_mac("2:ab:cd:0:0:1"), None);
        assert_eq!(format_mac(&[2, 0xab, 0, 0, 0, 1]), "02:ab:00:00:00:01");
    }

    const ROUTED: &str = r#"
[[network]]
name = "blue"
gateway_v4 = "169.254.9.1"

[[port]]
name = "pod-a"
devargs = "net_null0"
role = "pod"
pod_ips = ["10.1.0.2", "fd00::2"]
pod_mac = "02:00:00:00:01:02"

[[port]]
name = "up"
devargs = "net_null1"
role = "uplink"
addresses = ["192.0.2.10/24"]

[[port]]
name = "blue-pod"
devargs = "net_null2"
role = "pod"
network = "blue"

[[route]]
prefix = "0.0.0.0/0"
port = "up"
via = "192.0.2.1"

[[route]]
prefix = "203.0.113.0/24"
blackhole = true

[[neighbor]]
ip = "192.0.2.1"
mac = "02:00:00:00:09:01"
port = "up"
"#;

    #[test]
    fn networks_routes_and_neighbors_parse() {
        let c = parse(ROUTED).expect("valid");
        assert_eq!(c.networks.len(), 2);
        assert_eq!(c.networks[0].name, "default");
        assert_eq!(c.networks[1].gateway_v4, Ipv4Addr::new(169, 254, 9, 1));
        assert_eq!(c.networks[1].gateway_v6, DEFAULT_GATEWAY_V6);
        assert_eq!(c.ports[0].pod_ips.len(), 2);
        assert_eq!(c.ports[2].network, "blue");
        assert_eq!(c.ports[1].addresses[0].to_string(), "192.0.2.10/24");
        assert_eq!(c.routes.len(), 2);
        assert_eq!(
            c.routes[0].target,
            RouteTarget::Port {
                port: 1,
                via: Some("192.0.2.1".parse().expect("ip"))
            }
        );
        assert_eq!(c.routes[1].target, RouteTarget::Blackhole);
        assert_eq!(c.neighbors[0].port, 1);
    }

    #[test]
    fn the_networks_section_parses_and_mistakes_are_named() {
        let c = parse(ROUTED).expect("valid");
        assert_eq!(c.udn, NetworksSection::default());
        let c = parse(&format!(
            "{ROUTED}\n[networks]\nnode_index = 3\ncluster_subnets = [\"10.1.0.0/16\"]\n\
             default_network_allow = [\"10.96.0.1/32\"]\nmtu = 9000\n"
        ))
        .expect("valid");
        assert_eq!(c.udn.node_index, 3);
        assert_eq!(c.udn.cluster_subnets[0].to_string(), "10.1.0.0/16");
        assert_eq!(c.udn.default_network_allow.len(), 1);
        assert_eq!((c.udn.mtu, c.udn.mac_ageing_s), (9000, 300));
        for (line, key) in [
            (
                "cluster_subnets = [\"10.1.0.1/16\"]",
                "networks.cluster_subnets[0]",
            ),
            (
                "service_subnets = [\"nope\"]",
                "networks.service_subnets[0]",
            ),
            (
                "masquerade_subnets = [\"169.254.0.0/24\", \"169.254.1.0/24\"]",
                "networks.masquerade_subnets",
            ),
            ("mtu = 100", "networks.mtu"),
            ("mac_ageing_s = 1", "networks.mac_ageing_s"),
        ] {
            let e = parse(&format!("{ROUTED}\n[networks]\n{line}\n")).expect_err(line);
            assert!(e.to_string().contains(&format!("`{key}`")), "{line}: {e}");
        }
    }

    #[test]
    fn allowed_addresses_parse_and_mistakes_are_named() {
        let with = |list: &str| {
            ROUTED.replacen(
                "pod_mac = \"02:00:00:00:01:02\"\n",
                &format!("pod_mac = \"02:00:00:00:01:02\"\nallowed_addresses = {list}\n"),
                1,
            )
        };
        let c = parse(&with(r#"["10.9.0.0/16", "fd00:9::/64", "192.0.2.77"]"#)).expect("valid");
        let allowed: Vec<String> = c.ports[0]
            .allowed_addresses
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(allowed, ["10.9.0.0/16", "fd00:9::/64", "192.0.2.77/32"]);
        assert!(c.ports[1].allowed_addresses.is_empty());
        let too_many = format!(
            "[{}]",
            (0..=MAX_ALLOWED_ADDRESSES)
                .map(|n| format!("\"10.9.{n}.0/24\""))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let cases = [
            (with(r#"["10.9.0.1/16"]"#), "host bits"),
            (with(r#"["10.9.0.0/33"]"#), "prefix length"),
            (with(r#"["pod-b"]"#), "not an IP address"),
            (with(&too_many), "at most 64"),
            (
                ROUTED.replacen(
                    "addresses = [\"192.0.2.10/24\"]",
                    "addresses = [\"192.0.2.10/24\"]\nallowed_addresses = [\"10.0.0.0/8\"]",
                    1,
                ),
                "only pod ports",
            ),
            (
                ROUTED.replacen(
                    "network = \"blue\"\n",
                    "network = \"blue\"\nallowed_addresses = [\"10.0.0.0/8\"]\n",
                    1,
                ),
                "needs pod_mac",
            ),
        ];
        for (text, words) in cases {
            let e = parse(&text).expect_err(words);
            assert!(
                e.key
                    .as_deref()
                    .unwrap_or("")
                    .ends_with(".allowed_addresses"),
                "{words}: {e}"
            );
            assert!(e.message.contains(words), "{words}: {e}");
            assert!(e.line.is_some(), "{words}: {e}");
        }
    }

    #[test]
    fn routing_mistakes_are_named() {
        let cases = [
            ("prefix = \"0.0.0.0/0\"", "prefix = \"10.0.0.1/8\"", "route[0].prefix", "host bits"),
            ("via = \"192.0.2.1\"", "via = \"fe80::1\"", "route[0].via", "IP version"),
            ("blackhole = true", "port = \"blue-pod\"", "route[1].port", "network"),
            ("blackhole = true", "blackhole = true\nport = \"up\"", "route[1].port", "not both"),
            ("mac = \"02:00:00:00:09:01\"", "mac = \"01:00:5e:00:00:01\"", "neighbor[0].mac", "unicast"),
            ("192.0.2.10/24", "192.0.2.10", "port[1].addresses", "prefix length"),
            ("192.0.2.10/24", "192.0.2.0/24", "port[1].addresses", "subnet"),
            ("pod_mac = \"02:00:00:00:01:02\"\n", "", "port[0].pod_mac", "needs pod_mac"),
            ("network = \"blue\"", "network = \"green\"", "port[2].network", "green"),
            ("[[route]]\nprefix = \"0.0.0.0/0\"", "[[route]]\nprefix = \"0.0.0.0/0\"\nport = \"up\"\n[[route]]\nprefix = \"0.0.0.0/0\"", "route", "twice"),
        ];
        for (from, to, key, words) in cases {
            let text = ROUTED.replacen(from, to, 1);
            assert_ne!(text, ROUTED, "case {key} did not apply");
            let e = parse(&text).expect_err(key);
            assert!(
                e.key.as_deref().unwrap_or("").starts_with(key),
                "{key}: {e}"
            );
            assert!(e.message.contains(words), "{key}: {e}");
            assert!(e.line.is_some(), "{key}: {e}");
        }
    }

    #[test]
    fn control_defaults_and_limits() {
        let c = Config::embedded_default().unwrap().control;
        assert_eq!(c.socket_mode, 0o600);
        assert_eq!(c.allowed_uids, vec![0]);
        assert!(c.allowed_gids.is_empty());
        assert_eq!(c.vhost_dirs, vec![PathBuf::from(DEFAULT_VHOST_DIR)]);
        assert!(c.pcap_dirs.is_empty() && !c.allow_raw_devargs);
        assert!(c.root_reserved_clients < c.max_clients);
        let base = EMBEDDED_DEFAULT.replacen(
            "[control]\n",
            "[control]\nsocket_mode = 0o660\nsocket_group = 120\nallowed_gids = [120]\n\
             vhost_dirs = [\"/srv/vhost\"]\npcap_dirs = [\"/srv/pcap\"]\n",
            1,
        );
        let c = parse(&base).unwrap().control;
        assert_eq!((c.socket_mode, c.socket_group), (0o660, Some(120)));
        assert_eq!(c.pcap_dirs, vec![PathBuf::from("/srv/pcap")]);
        for (line, key, words) in [
            ("socket_mode = 0o755", "control.socket_mode", "execute"),
            ("socket_mode = 0o066", "control.socket_mode", "owner"),
            ("allowed_uids = []", "control.allowed_uids", "at least one"),
            ("vhost_dirs = [\"run/x\"]", "control.vhost_dirs", "absolute"),
            (
                "vhost_dirs = [\"/run/../etc\"]",
                "control.vhost_dirs",
                "absolute",
            ),
            ("pcap_dirs = [\"/\"]", "control.pcap_dirs", "other than /"),
            ("max_batch = 0", "control.max_batch", "outside"),
            (
                "max_clients_per_peer = 300",
                "control.max_clients_per_peer",
                "outside",
            ),
            (
                "root_reserved_clients = 256",
                "control.root_reserved_clients",
                "outside",
            ),
            ("idle_timeout_s = 0", "control.idle_timeout_s", "outside"),
        ] {
            let text = EMBEDDED_DEFAULT.replacen("[control]\n", &format!("[control]\n{line}\n"), 1);
            let e = parse(&text).expect_err(line);
            assert_eq!(e.key.as_deref(), Some(key), "{line}: {e}");
            assert!(e.message.contains(words), "{line}: {e}");
        }
    }

    #[test]
    fn only_small_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let e = Config::load(Path::new("/dev/zero")).unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
        let e = Config::load(dir.path()).unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = Config::load(&fifo).unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
        let big = dir.path().join("big.toml");
        let mut text = EMBEDDED_DEFAULT.to_string();
        while (text.len() as u64) <= MAX_CONFIG_BYTES {
            text.push_str("# padding padding padding padding padding padding padding\n");
        }
        std::fs::write(&big, &text).unwrap();
        let e = Config::load(&big).unwrap_err();
        assert!(e.message.contains("at most 1048576 bytes"), "{e}");
        let ok = dir.path().join("ok.toml");
        std::fs::write(&ok, EMBEDDED_DEFAULT).unwrap();
        Config::load(&ok).unwrap();
    }
}
