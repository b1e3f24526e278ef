//! One immutable generation of forwarding state — ports, networks (VRFs) with their
//! route tables, source route tables (ENIs), next hops, neighbours, ACL tables and the
//! SNAT policy — built by the control thread and read by
//! every worker once per poll round. A new generation is published as a whole; workers
//! never see a half-applied change.

use crate::acl::identity::Identities;
use crate::acl::table::AclTables;
use crate::lpm::{Lpm4, Lpm6, NextHop};
use crate::nat::SnatPolicy;
use crate::switching::Switching;
use crate::wire::{EthernetAddress, IpCidr};
use rustc_hash::FxHashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// What a port is for: the one port-role type of the configuration, the control API
/// and the pipeline (lowercase names on the wire and in TOML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PortRole {
    /// Towards the node's network (the VPC): Ferrule owns the node IPs here.
    Uplink,
    /// A pod's interface.
    Pod,
    /// The node's own network stack.
    Host,
}

impl PortRole {
    pub const fn name(self) -> &'static str {
        match self {
            PortRole::Uplink => "uplink",
            PortRole::Pod => "pod",
            PortRole::Host => "host",
        }
    }

    /// The same as [`PortRole::name`].
    pub const fn as_str(self) -> &'static str {
        self.name()
    }
}

impl std::fmt::Display for PortRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A port as the pipeline sees it. Indexed by the port's configuration index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    pub name: String,
    /// DPDK port id.
    pub dpdk_id: u16,
    pub role: PortRole,
    /// Network (VRF) index.
    pub network: u16,
    /// Ferrule's MAC on this port: the gateway MAC pods see, the source MAC of
    /// everything sent out of it.
    pub mac: EthernetAddress,
    pub mtu: u16,
    /// Pod ports: the pod interface's MAC (destination of frames to the pod; the only
    /// source MAC port security accepts, through its copy in `pod_sources`).
    pub pod_mac: Option<EthernetAddress>,
    /// Addresses Ferrule owns on this port: it answers ARP and ICMP echo for them
    /// (the network's gateway on pod ports, the node IPs on uplinks).
    pub local_v4: Vec<Ipv4Addr>,
    /// IPv6 addresses Ferrule owns on this port (NS/NA and ICMPv6 echo).
    pub local_v6: Vec<Ipv6Addr>,
    /// Addresses Ferrule answers ARP requests for on this port without owning them
    /// (proxy ARP): an ENI's secondary IPs on the ENI's port, which the VPC delivers to
    /// the ENI and Ferrule routes on to the pods. Nothing else is done for them here.
    pub proxy_arp_v4: Vec<Ipv4Addr>,
    /// Cross-connect peer: packets skip the pipeline and go straight there.
    pub xconnect: Option<u16>,
    /// Pod ports: the MAC and the source addresses the pod may send from (`pod_mac`, its
    /// pod IPs and `allowed_addresses`), as port security checks them. Nothing elsewhere.
    pub pod_sources: PodSources,
    /// The default-network interface of a pod whose namespace has a primary
    /// user-defined network: only kubelet probes from the host and the Kubernetes
    /// API/DNS addresses pass. A packet from it passes only to a `Host` port or to an
    /// address of [`Snapshot::locked_allow`]; a packet to it only from a `Host` port or
    /// from such an address; anything else is dropped as `default-network-locked`.
    /// Set [`Snapshot::any_locked`] when a port has it.
    pub locked: bool,
}

impl PortState {
    pub fn owns_v4(&self, a: Ipv4Addr) -> bool {
        self.local_v4.contains(&a)
    }

    pub fn owns_v6(&self, a: Ipv6Addr) -> bool {
        self.local_v6.contains(&a)
    }

    /// Whether Ferrule answers ARP for `a` on this port: one of its own addresses or a
    /// proxied one.
    pub fn answers_arp(&self, a: Ipv4Addr) -> bool {
        self.owns_v4(a) || self.proxy_arp_v4.contains(&a)
    }
}

/// What a pod may send from, as the port-security check
/// ([`pipeline::port_security`](crate::pipeline::port_security)) compares it: its MAC
/// (a copy of [`PortState::pod_mac`]) and its source prefixes — the pod's own addresses
/// first (host prefixes), then its `allowed_addresses` — each as a (network, mask) pair
/// in host order. Laid out for the fast path: the MAC as one number, the first IPv4
/// and IPv6 prefix (usually the pod's address) inline, the rest in a list scanned in
/// order (kept short: the configuration and `port.add` take at most
/// [`PodSources::MAX_ALLOWED`] allowed prefixes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSources {
    /// The pod's MAC, its six bytes in a little-endian number (as
    /// [`PodSources::mac_of`] reads them from a frame); [`PodSources::NO_MAC`] when the
    /// port has no `pod_mac`.
    pub mac: u64,
    v4_first: (u32, u32),
    v4_rest: Vec<(u32, u32)>,
    v6_first: (u128, u128),
    v6_rest: Vec<(u128, u128)>,
}

/// A (network, mask) pair no address matches.
const NOTHING4: (u32, u32) = (1, 0);
const NOTHING6: (u128, u128) = (1, 0);

impl Default for PodSources {
    /// No MAC and no address: nothing is accepted.
    fn default() -> Self {
        PodSources {
            mac: Self::NO_MAC,
            v4_first: NOTHING4,
            v4_rest: Vec::new(),
            v6_first: NOTHING6,
            v6_rest: Vec::new(),
        }
    }
}

impl PodSources {
    /// Most `allowed_addresses` one port may have.
    pub const MAX_ALLOWED: usize = 64;

    /// [`PodSources::mac`] of a port without `pod_mac`: no frame's MAC reads as it.
    pub const NO_MAC: u64 = u64::MAX;

    /// A pod with MAC `pod_mac`, addresses `pod_ips`, and the prefixes it may also send
    /// from.
    pub fn new(
        pod_mac: Option<EthernetAddress>,
        pod_ips: &[IpAddr],
        allowed: &[IpCidr],
    ) -> PodSources {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        let prefixes = pod_ips
            .iter()
            .map(|&a| IpCidr::host(a))
            .chain(allowed.iter().copied());
        for c in prefixes {
            match (c.network(), c.prefix_len()) {
                (IpAddr::V4(a), len) => {
                    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                    let entry = (u32::from(a) & mask, mask);
                    if !v4.contains(&entry) {
                        v4.push(entry);
                    }
                }
                (IpAddr::V6(a), len) => {
                    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                    let entry = (u128::from(a) & mask, mask);
                    if !v6.contains(&entry) {
                        v6.push(entry);
                    }
                }
            }
        }
        fn split<T>(mut list: Vec<T>, nothing: T) -> (T, Vec<T>) {
            if list.is_empty() {
                (nothing, list)
            } else {
                let first = list.remove(0);
                (first, list)
            }
        }
        let (v4_first, v4_rest) = split(v4, NOTHING4);
        let (v6_first, v6_rest) = split(v6, NOTHING6);
        PodSources {
            mac: pod_mac.map_or(Self::NO_MAC, Self::mac_number),
            v4_first,
            v4_rest,
            v6_first,
            v6_rest,
        }
    }

    /// A MAC as [`PodSources::mac`] holds it.
    #[inline]
    pub fn mac_number(m: EthernetAddress) -> u64 {
        let mut b = [0u8; 8];
        b[..6].copy_from_slice(&m.0);
        u64::from_le_bytes(b)
    }

    /// Whether `m` is the pod's MAC.
    #[inline]
    pub fn is_mac(&self, m: EthernetAddress) -> bool {
        Self::mac_number(m) == self.mac
    }

    /// The source MAC of an Ethernet frame (at least 14 bytes), as [`PodSources::mac`]
    /// holds the pod's; `None` for a shorter frame.
    #[inline(always)]
    pub fn mac_of(frame: &[u8]) -> Option<u64> {
        let b: [u8; 8] = frame.get(6..14)?.try_into().ok()?;
        Some(u64::from_le_bytes(b) & 0xffff_ffff_ffff)
    }

    /// Whether the pod may send from IPv4 address `a` (host order).
    #[inline(always)]
    pub fn allows_v4(&self, a: u32) -> bool {
        let (net, mask) = self.v4_first;
        a & mask == net || self.v4_rest.iter().any(|&(net, mask)| a & mask == net)
    }

    /// Whether the pod may send from IPv6 address `a`.
    #[inline(always)]
    pub fn allows_v6(&self, a: u128) -> bool {
        let (net, mask) = self.v6_first;
        a & mask == net || self.v6_rest.iter().any(|&(net, mask)| a & mask == net)
    }
}

/// Where a route sends packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NextHopEntry {
    /// Out of `port`: to neighbour `via`, or on-link (the destination itself) when
    /// `via` is `None`. On a pod port on-link means the pod's MAC.
    Port { port: u16, via: Option<IpAddr> },
    /// Dropped as `blackhole`.
    Blackhole,
    /// An address of Ferrule's own.
    Local,
    /// In another network: dropped as `network-isolation` (what a user-defined
    /// network's table holds for the default network's cluster, service and join
    /// subnets).
    Isolated,
}

/// A resolved neighbour: the MAC to send to and the port it was learned on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbor {
    pub mac: EthernetAddress,
    pub port: u16,
}

/// One network (VRF). Its index is the [`PortState::network`] of its ports and the
/// conntrack zone of its connections (`FlowKey::network`); 0 is the cluster's default
/// network, where the uplinks and the node IPs are.
#[derive(Debug, Clone)]
pub struct Network {
    pub name: String,
    pub lpm4: Arc<Lpm4>,
    pub lpm6: Arc<Lpm6>,
    pub gateway_v4: Ipv4Addr,
    pub gateway_v6: Ipv6Addr,
    /// A user-defined network (OVN-Kubernetes' UDN): isolated from the other networks
    /// (a route into another network is dropped as `network-crossing`), except that
    /// its pods' traffic leaving through an uplink of the default network is allowed
    /// and always masqueraded to the node IP, whatever the SNAT policy's `vpc_cidrs`
    /// and `exclude` say; the replies come back in zone 0
    /// ([`NAT_ZONE`](crate::conntrack::NAT_ZONE)) and are translated back into this
    /// network.
    pub user_defined: bool,
}

impl Network {
    /// A network without routes, not user-defined.
    pub fn new(name: impl Into<String>, gateway_v4: Ipv4Addr, gateway_v6: Ipv6Addr) -> Network {
        Network {
            name: name.into(),
            lpm4: Arc::new(Lpm4::new()),
            lpm6: Arc::new(Lpm6::new()),
            gateway_v4,
            gateway_v6,
            user_defined: false,
        }
    }
}

/// A whole generation of forwarding state.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Increases with every publication.
    pub generation: u64,
    pub ports: Vec<PortState>,
    pub networks: Vec<Network>,
    /// Next hops, indexed by the values stored in the route tables.
    pub next_hops: Arc<Vec<NextHopEntry>>,
    /// Resolved neighbours by (network, address).
    pub neighbors: Arc<FxHashMap<(u16, IpAddr), Neighbor>>,
    /// Per next hop (as indexed in `next_hops`), the MAC of its gateway when the route
    /// has one and it is resolved: the neighbour stage's answer without a hash lookup.
    /// Empty or `None`: look `neighbors` up. Built only by [`Snapshot::resolve_gateways`]:
    /// `Some` only for a `Port` next hop with a gateway (`via`), which the neighbour
    /// stage and the plain lane rely on (an on-link next hop to a pod takes the pod's
    /// MAC, never an entry of this table).
    pub nh_mac: Arc<Vec<Option<EthernetAddress>>>,
    /// ACL tables and their attachments.
    pub acl: Arc<AclTables>,
    /// When and to what pod traffic is masqueraded.
    pub snat: Arc<SnatPolicy>,
    /// The addresses a locked port ([`PortState::locked`]) may talk to besides a
    /// `Host` port: the Kubernetes API and DNS service addresses.
    pub locked_allow: Arc<Vec<IpCidr>>,
    /// Whether any port is [`locked`](PortState::locked): the route stage checks
    /// locked ports only then (see [`Snapshot::update_locked`]).
    pub any_locked: bool,
    /// Layer-2 segments (switched networks) and their MAC tables; empty when every
    /// network is routed only.
    pub switching: Arc<Switching>,
    /// Source routing (the ENIs' route tables); `None` when there is none, and then the
    /// route stage never looks at a packet's source.
    pub source_routes: Option<Arc<SourceRoutes>>,
    /// Each network's IP → identity map, which ACL rules with a destination selector
    /// (FQDN and CIDR policy) match against.
    pub identities: Arc<Identities>,
    /// Which ports' DNS queries go to the DNS proxy, and to which addresses; `None`
    /// when no port is under DNS policy.
    pub dns: Option<Arc<DnsIntercept>>,
}

/// The DNS queries the pipeline hands to the DNS proxy (`pipeline::dns`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsIntercept {
    /// By port index: whether the port is under DNS policy.
    pub ports: Vec<bool>,
    /// The DNS service addresses (the cluster DNS) queries are intercepted to.
    pub servers: Vec<IpAddr>,
}

/// A route table chosen by a packet's source address rather than the network's main
/// table: ENI k's (`eni-<k>`, the AWS VPC CNI's `ip rule from <pod IP> lookup eni-k`),
/// with one route, the default via the ENI's subnet gateway out of the ENI's port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTable {
    /// The table's name (`eni-1`).
    pub name: String,
    /// What it belongs to, for traces (`eni-0abc (device 1)`).
    pub owner: String,
    /// Its default route's next hop (an index into [`Snapshot::next_hops`]: a port
    /// and a gateway).
    pub nh: NextHop,
}

/// The source route tables of a generation and the IPv4 sources that select them, per
/// network. A packet from a listed source in that network uses the table instead of
/// the main one when the main table would send it out of an uplink and it does not
/// leave masqueraded (see `pipeline::route`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceRoutes {
    pub tables: Vec<SourceTable>,
    /// (network, IPv4 source in host order) → index in `tables`.
    pub v4: FxHashMap<(u16, u32), u16>,
}

impl SourceRoutes {
    /// The table a packet of `network` from IPv4 source `src` (host order) selects.
    #[inline]
    pub fn table_v4(&self, network: u16, src: u32) -> Option<&SourceTable> {
        let &t = self.v4.get(&(network, src))?;
        self.tables.get(usize::from(t))
    }
}

impl Snapshot {
    /// An empty generation 0 (no ports, the default network without routes).
    pub fn empty() -> Snapshot {
        Snapshot {
            generation: 0,
            ports: Vec::new(),
            networks: vec![Network::new(
                "default",
                Ipv4Addr::new(169, 254, 1, 1),
                Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
            )],
            next_hops: Arc::new(Vec::new()),
            neighbors: Arc::new(FxHashMap::default()),
            nh_mac: Arc::new(Vec::new()),
            acl: Arc::new(AclTables::default()),
            snat: Arc::new(SnatPolicy::default()),
            locked_allow: Arc::new(Vec::new()),
            any_locked: false,
            switching: Arc::default(),
            source_routes: None,
            identities: Arc::default(),
            dns: None,
        }
    }

    /// Sets [`any_locked`](Snapshot::any_locked) from the ports (after they changed).
    pub fn update_locked(&mut self) {
        self.any_locked = self.ports.iter().any(|p| p.locked);
    }

    /// Whether network `network` is user-defined.
    #[inline]
    pub fn user_defined(&self, network: u16) -> bool {
        self.networks
            .get(usize::from(network))
            .is_some_and(|n| n.user_defined)
    }

    /// Whether `a` is one of the [`locked_allow`](Snapshot::locked_allow) addresses.
    #[inline]
    pub fn locked_allows(&self, a: IpAddr) -> bool {
        self.locked_allow.iter().any(|c| c.contains(a))
    }

    /// The next hop a route table value points to.
    #[inline]
    pub fn next_hop(&self, nh: NextHop) -> Option<&NextHopEntry> {
        self.next_hops.get(nh as usize)
    }

    /// Longest-prefix match in a network.
    #[inline]
    pub fn route(&self, network: u16, dst: IpAddr) -> Option<(NextHop, &NextHopEntry)> {
        let net = self.networks.get(usize::from(network))?;
        let nh = match dst {
            IpAddr::V4(a) => net.lpm4.lookup(a)?,
            IpAddr::V6(a) => net.lpm6.lookup(a)?,
        };
        self.next_hop(nh).map(|e| (nh, e))
    }

    /// Fills `nh_mac` from the next hops and the neighbours (after either changed).
    pub fn resolve_gateways(&mut self) {
        let macs = self
            .next_hops
            .iter()
            .map(|e| match *e {
                NextHopEntry::Port {
                    port,
                    via: Some(ip),
                } => {
                    let net = self.ports.get(usize::from(port))?.network;
                    self.neighbors.get(&(net, ip)).map(|n| n.mac)
                }
                _ => None,
            })
            .collect();
        self.nh_mac = Arc::new(macs);
    }

    /// A resolved neighbour.
    #[inline]
    pub fn neighbor(&self, network: u16, ip: IpAddr) -> Option<&Neighbor> {
        self.neighbors.get(&(network, ip))
    }
}
