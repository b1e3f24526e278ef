//! The control thread's master copy of the forwarding state: every network's routes
//! (from the configuration, the API, ports' addresses and pods), the ENIs' source route
//! tables, the next-hop table, static and learned neighbours, and the ports —
//! validated here, compiled into an immutable dataplane [`Snapshot`] on every change.

use crate::config::{Config, IpCidr, PortConfig, RouteTarget};
use ferrule_dataplane::acl::table::AclTables;
use ferrule_dataplane::lpm::{Lpm4, Lpm6, NextHop};
use ferrule_dataplane::nat::SnatPolicy;
use ferrule_dataplane::snapshot::{
    Neighbor, Network, NextHopEntry, PodSources, PortRole, PortState, Snapshot, SourceRoutes,
    SourceTable,
};
use ferrule_dataplane::wire::EthernetAddress;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

/// Where a route came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RouteSource {
    /// `[[route]]` in the configuration.
    Config,
    /// `route.add`.
    Api,
    /// The subnet of a port address.
    Connected,
    /// A pod port's address.
    Pod,
    /// One of Ferrule's own addresses.
    Local,
    /// A user-defined network's plan: its egress through the uplink, its isolation
    /// from the other networks.
    Network,
    /// An ENI's primary IP (`vpc.sync`), an address of Ferrule's own on the ENI's port.
    Eni,
}

impl RouteSource {
    pub const fn name(self) -> &'static str {
        match self {
            RouteSource::Config => "config",
            RouteSource::Api => "api",
            RouteSource::Connected => "connected",
            RouteSource::Pod => "pod",
            RouteSource::Local => "local",
            RouteSource::Network => "network",
            RouteSource::Eni => "eni",
        }
    }

    /// Routes the API may replace or delete.
    pub const fn is_user(self) -> bool {
        matches!(self, RouteSource::Config | RouteSource::Api)
    }
}

/// A route as the control thread keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub entry: NextHopEntry,
    pub source: RouteSource,
}

/// Interned next hops: route tables store an index; entries never move while used.
#[derive(Debug, Default, Clone)]
struct NextHops {
    entries: Vec<NextHopEntry>,
    refs: Vec<u32>,
    index: HashMap<NextHopEntry, NextHop>,
    free: Vec<NextHop>,
}

impl NextHops {
    fn acquire(&mut self, e: NextHopEntry) -> NextHop {
        if let Some(&nh) = self.index.get(&e) {
            self.refs[nh as usize] += 1;
            return nh;
        }
        let nh = match self.free.pop() {
            Some(nh) => {
                self.entries[nh as usize] = e;
                self.refs[nh as usize] = 1;
                nh
            }
            None => {
                self.entries.push(e);
                self.refs.push(1);
                (self.entries.len() - 1) as NextHop
            }
        };
        self.index.insert(e, nh);
        nh
    }

    fn release(&mut self, nh: NextHop) {
        let i = nh as usize;
        if self.refs[i] > 0 {
            self.refs[i] -= 1;
            if self.refs[i] == 0 {
                self.index.remove(&self.entries[i]);
                self.entries[i] = NextHopEntry::Blackhole;
                self.free.push(nh);
            }
        }
    }
}

/// What makes a network a VRF besides its routes: its name, the gateway addresses pods
/// see, whether it is user-defined (isolated, masqueraded on egress).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VrfSpec {
    pub name: String,
    /// Unspecified (0.0.0.0) for a network whose pods have no IPv4 gateway (Localnet).
    pub gateway_v4: std::net::Ipv4Addr,
    pub gateway_v6: std::net::Ipv6Addr,
    pub user_defined: bool,
}

/// One network's routes.
#[derive(Debug, Clone)]
struct NetRoutes {
    name: String,
    gateway_v4: std::net::Ipv4Addr,
    gateway_v6: std::net::Ipv6Addr,
    /// A user-defined network (its egress follows the default network's default
    /// route, masqueraded).
    user_defined: bool,
    /// Deleted: kept as an empty slot so that its index (a conntrack zone) is never
    /// given to another network while connections of it may linger.
    removed: bool,
    routes: BTreeMap<(IpAddr, u8), (Route, NextHop)>,
    lpm4: Arc<Lpm4>,
    lpm6: Arc<Lpm6>,
}

/// A neighbour as the control thread keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighborRecord {
    pub mac: EthernetAddress,
    pub port: u16,
    /// Static (configuration / API) or learned.
    pub is_static: bool,
    /// When it was learned or last confirmed.
    pub updated: std::time::Instant,
}

/// The master forwarding state.
#[derive(Debug, Clone)]
pub struct Fib {
    ports: Vec<PortState>,
    /// Per port, the Kubernetes pod (`namespace/name`) it records, if any.
    pods: Vec<Option<String>>,
    nets: Vec<NetRoutes>,
    next_hops: NextHops,
    neighbors: BTreeMap<(u16, IpAddr), NeighborRecord>,
    /// The ACL tables in force, published with every generation.
    acl: Arc<AclTables>,
    /// The SNAT policy in force (the VPC state).
    snat: Arc<SnatPolicy>,
    /// Per port, whether it is locked (a primary-network pod's default-network port).
    locked: Vec<bool>,
    /// What a locked port still reaches (the Kubernetes API and DNS addresses).
    locked_allow: Arc<Vec<IpCidr>>,
    /// The switched networks' segments and MAC tables (built by `fdb::Fdb`).
    switching: Arc<ferrule_dataplane::switching::Switching>,
    /// The node's ENIs (`vpc.sync`) and what each added to the ports and tables.
    enis: Vec<EniRecord>,
    /// The IP → identity maps of FQDN policy (`crate::fqdn`), published as they are.
    identities: Arc<ferrule_dataplane::acl::identity::Identities>,
    /// Which ports' DNS queries go to the DNS proxy.
    dns: Option<Arc<ferrule_dataplane::snapshot::DnsIntercept>>,
    generation: u64,
}

/// An ENI in force and what it brought: its primary IP added to its port's own
/// addresses (unless the port had it) with a local route (unless one was there), and
/// for a secondary ENI its table's next hop (the default via its subnet gateway).
#[derive(Debug, Clone)]
struct EniRecord {
    eni: crate::vpc::Eni,
    added_local: bool,
    added_route: bool,
    nh: Option<NextHop>,
}

/// Why a route or neighbour change was refused; the field it is about and the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibError {
    pub field: &'static str,
    pub message: String,
}

fn err(field: &'static str, message: impl Into<String>) -> FibError {
    FibError {
        field,
        message: message.into(),
    }
}

impl Fib {
    /// Builds the state of a configuration. `macs[i]` and `dpdk_ids[i]` are port i's
    /// MAC and DPDK id as the driver reports them.
    pub fn from_config(cfg: &Config, macs: &[[u8; 6]], dpdk_ids: &[u16]) -> Result<Fib, FibError> {
        let net_of = |name: &str| {
            cfg.networks
                .iter()
                .position(|n| n.name == name)
                .unwrap_or(0)
        };
        let nets = cfg
            .networks
            .iter()
            .map(|n| NetRoutes {
                name: n.name.clone(),
                gateway_v4: n.gateway_v4,
                gateway_v6: n.gateway_v6,
                user_defined: false,
                removed: false,
                routes: BTreeMap::new(),
                lpm4: Arc::new(Lpm4::new()),
                lpm6: Arc::new(Lpm6::new()),
            })
            .collect();
        let mut fib = Fib {
            ports: Vec::with_capacity(cfg.ports.len()),
            pods: cfg.ports.iter().map(|p| p.pod.clone()).collect(),
            nets,
            next_hops: NextHops::default(),
            neighbors: BTreeMap::new(),
            acl: Arc::default(),
            snat: Arc::new(cfg.snat.clone()),
            locked: vec![false; cfg.ports.len()],
            locked_allow: Arc::new(cfg.udn.default_network_allow.clone()),
            switching: Arc::default(),
            enis: Vec::new(),
            identities: Arc::default(),
            dns: None,
            generation: 0,
        };
        for (i, p) in cfg.ports.iter().enumerate() {
            let xconnect = p
                .xconnect
                .as_deref()
                .and_then(|x| cfg.ports.iter().position(|q| q.name == x))
                .map(|x| x as u16);
            let mac = p.mac.or_else(|| macs.get(i).copied()).unwrap_or([0; 6]);
            let state = fib.port_state(
                p,
                net_of(&p.network) as u16,
                mac,
                dpdk_ids.get(i).copied().unwrap_or(i as u16),
                xconnect,
            );
            fib.ports.push(state);
            fib.add_port_routes(i as u16, p)?;
        }
        for r in &cfg.routes {
            let entry = match r.target {
                RouteTarget::Port { port, via } => NextHopEntry::Port {
                    port: port as u16,
                    via,
                },
                RouteTarget::Blackhole => NextHopEntry::Blackhole,
            };
            fib.insert(
                r.network as u16,
                r.prefix,
                Route {
                    entry,
                    source: RouteSource::Config,
                },
            )?;
        }
        for n in &cfg.neighbors {
            fib.set_neighbor(
                n.network as u16,
                n.ip,
                EthernetAddress(n.mac),
                n.port as u16,
                true,
            );
        }
        // Route tables are placed in memory by cloning (dense parts of tbl24 go on huge
        // pages, `lpm::placement`): an update clones a table the published snapshot
        // shares (`Arc::make_mut`), and the start-up set is placed here. (Updates to a
        // table not yet published since its last clone write in place, on the pages it
        // has.)
        for n in &mut fib.nets {
            n.lpm4 = Arc::new((*n.lpm4).clone());
            n.lpm6 = Arc::new((*n.lpm6).clone());
        }
        Ok(fib)
    }

    /// The forwarding view of a port: Ferrule's own addresses on it (the network's
    /// gateway on pod ports, plus the configured ones), its MAC and MTU, and on a pod
    /// port the sources its pod may send from (pod IPs, `allowed_addresses`).
    fn port_state(
        &self,
        p: &PortConfig,
        network: u16,
        mac: [u8; 6],
        dpdk_id: u16,
        xconnect: Option<u16>,
    ) -> PortState {
        let role = p.role;
        let (mut local_v4, mut local_v6) = (Vec::new(), Vec::new());
        if let (PortRole::Pod, Some(net)) = (role, self.nets.get(usize::from(network))) {
            if !net.gateway_v4.is_unspecified() {
                local_v4.push(net.gateway_v4);
            }
            local_v6.push(net.gateway_v6);
        }
        for a in &p.addresses {
            match a.address() {
                IpAddr::V4(x) => local_v4.push(x),
                IpAddr::V6(x) => local_v6.push(x),
            }
        }
        PortState {
            name: p.name.clone(),
            dpdk_id,
            role,
            network,
            mac: EthernetAddress(mac),
            mtu: p.mtu,
            pod_mac: p.pod_mac.map(EthernetAddress),
            local_v4,
            local_v6,
            proxy_arp_v4: Vec::new(),
            xconnect,
            pod_sources: match role {
                PortRole::Pod => PodSources::new(
                    p.pod_mac.map(EthernetAddress),
                    &p.pod_ips,
                    &p.allowed_addresses,
                ),
                _ => PodSources::default(),
            },
            locked: false,
        }
    }

    /// The routes a port brings: a host route per pod address, and per own address
    /// its subnet (connected) and itself (local).
    fn add_port_routes(&mut self, port: u16, p: &PortConfig) -> Result<(), FibError> {
        let net = self.ports[usize::from(port)].network;
        for ip in &p.pod_ips {
            let host = IpCidr::host(*ip);
            let entry = NextHopEntry::Port { port, via: None };
            self.insert(
                net,
                host,
                Route {
                    entry,
                    source: RouteSource::Pod,
                },
            )?;
        }
        for a in &p.addresses {
            let subnet = a.trunc();
            let entry = NextHopEntry::Port { port, via: None };
            self.insert(
                net,
                subnet,
                Route {
                    entry,
                    source: RouteSource::Connected,
                },
            )?;
            let host = IpCidr::host(a.address());
            self.insert(
                net,
                host,
                Route {
                    entry: NextHopEntry::Local,
                    source: RouteSource::Local,
                },
            )?;
        }
        Ok(())
    }

    /// Adds a port at run time in slot `index` (a free one, or the next), with its
    /// routes. On error nothing changes.
    pub fn add_port(
        &mut self,
        index: u16,
        p: &PortConfig,
        network: u16,
        mac: [u8; 6],
        dpdk_id: u16,
    ) -> Result<(), FibError> {
        let i = usize::from(index);
        if i > self.ports.len() || (i < self.ports.len() && !self.ports[i].name.is_empty()) {
            return Err(err("name", format!("port slot {index} is taken")));
        }
        let saved = self.clone();
        let state = self.port_state(p, network, mac, dpdk_id, None);
        if i == self.ports.len() {
            self.ports.push(state);
            self.pods.push(p.pod.clone());
            self.locked.push(false);
        } else {
            self.ports[i] = state;
            self.pods[i] = p.pod.clone();
            self.locked[i] = false;
        }
        if let Err(e) = self.add_port_routes(index, p) {
            *self = saved;
            return Err(e);
        }
        Ok(())
    }

    /// Removes a port at run time: every route through it (whatever their source), its
    /// local addresses and the neighbours learned on it go; its slot is left empty
    /// (an empty name) for a later port.
    pub fn remove_port(&mut self, index: u16) {
        let Some(state) = self.ports.get(usize::from(index)).cloned() else {
            return;
        };
        let net = state.network;
        let own: Vec<IpAddr> = state
            .local_v4
            .iter()
            .map(|a| IpAddr::V4(*a))
            .chain(state.local_v6.iter().map(|a| IpAddr::V6(*a)))
            .collect();
        for n in 0..self.nets.len() {
            let doomed: Vec<(IpAddr, u8)> = self.nets[n]
                .routes
                .iter()
                .filter(|(key, (route, _))| match route.entry {
                    NextHopEntry::Port { port, .. } => port == index,
                    NextHopEntry::Local => {
                        n == usize::from(net) && own.contains(&key.0) && state.role != PortRole::Pod
                    }
                    NextHopEntry::Blackhole | NextHopEntry::Isolated => false,
                })
                .map(|(key, _)| *key)
                .collect();
            for (addr, len) in doomed {
                self.remove_route_key(n as u16, (addr, len));
            }
        }
        self.neighbors.retain(|_, nb| nb.port != index);
        let placeholder = PortState {
            name: String::new(),
            dpdk_id: 0,
            role: PortRole::Host,
            network: 0,
            mac: EthernetAddress([0; 6]),
            mtu: 0,
            pod_mac: None,
            local_v4: Vec::new(),
            local_v6: Vec::new(),
            proxy_arp_v4: Vec::new(),
            xconnect: None,
            pod_sources: PodSources::default(),
            locked: false,
        };
        self.ports[usize::from(index)] = placeholder;
        if let Some(pod) = self.pods.get_mut(usize::from(index)) {
            *pod = None;
        }
        if let Some(l) = self.locked.get_mut(usize::from(index)) {
            *l = false;
        }
    }

    fn insert(&mut self, net: u16, prefix: IpCidr, route: Route) -> Result<(), FibError> {
        let n = self
            .nets
            .get_mut(usize::from(net))
            .ok_or_else(|| err("network", "no such network"))?;
        let key = (prefix.network(), prefix.prefix_len());
        if let Some((old, _)) = n.routes.get(&key) {
            if !old.source.is_user() || !route.source.is_user() {
                return Err(err(
                    "prefix",
                    format!(
                        "{}/{} in network {:?} is already a {} route",
                        key.0,
                        key.1,
                        n.name,
                        old.source.name()
                    ),
                ));
            }
        }
        let nh = self.next_hops.acquire(route.entry);
        let result = match key.0 {
            IpAddr::V4(a) => Arc::make_mut(&mut n.lpm4).insert(a, key.1, nh),
            IpAddr::V6(a) => Arc::make_mut(&mut n.lpm6).insert(a, key.1, nh),
        };
        match result {
            Ok(_) => {
                if let Some((_, old_nh)) = n.routes.insert(key, (route, nh)) {
                    self.next_hops.release(old_nh);
                }
                Ok(())
            }
            Err(e) => {
                self.next_hops.release(nh);
                Err(err("prefix", e.to_string()))
            }
        }
    }

    /// Adds or replaces a user route (`route.add`).
    pub fn add_route(
        &mut self,
        net: u16,
        prefix: IpCidr,
        entry: NextHopEntry,
    ) -> Result<(), FibError> {
        if prefix.network() != prefix.address() {
            return Err(err(
                "prefix",
                format!(
                    "{prefix} has host bits set (the prefix is {}/{})",
                    prefix.network(),
                    prefix.prefix_len()
                ),
            ));
        }
        if let NextHopEntry::Port { port, via } = entry {
            let p = self
                .ports
                .get(usize::from(port))
                .ok_or_else(|| err("port", "no such port"))?;
            if p.network != net {
                return Err(err(
                    "port",
                    format!(
                        "port {:?} is in network {:?}",
                        p.name,
                        self.nets[usize::from(p.network)].name
                    ),
                ));
            }
            if via.is_some_and(|v| v.is_ipv4() != prefix.address().is_ipv4()) {
                return Err(err("via", "next hop and prefix differ in IP version"));
            }
        }
        self.insert(
            net,
            prefix,
            Route {
                entry,
                source: RouteSource::Api,
            },
        )
    }

    /// Removes a user route (`route.del`).
    pub fn del_route(&mut self, net: u16, prefix: IpCidr) -> Result<(), FibError> {
        let n = self
            .nets
            .get_mut(usize::from(net))
            .ok_or_else(|| err("network", "no such network"))?;
        let key = (prefix.network(), prefix.prefix_len());
        match n.routes.get(&key) {
            None => Err(err(
                "prefix",
                format!("no route {}/{} in network {:?}", key.0, key.1, n.name),
            )),
            Some((r, _)) if !r.source.is_user() => Err(err(
                "prefix",
                format!(
                    "{}/{} is a {} route; change the port instead",
                    key.0,
                    key.1,
                    r.source.name()
                ),
            )),
            Some(_) => {
                self.remove_route_key(net, key);
                Ok(())
            }
        }
    }

    /// Removes the route with exactly this key, whatever its source.
    fn remove_route_key(&mut self, net: u16, key: (IpAddr, u8)) {
        let Some(n) = self.nets.get_mut(usize::from(net)) else {
            return;
        };
        match key.0 {
            IpAddr::V4(a) => Arc::make_mut(&mut n.lpm4).remove(a, key.1),
            IpAddr::V6(a) => Arc::make_mut(&mut n.lpm6).remove(a, key.1),
        };
        if let Some((_, nh)) = n.routes.remove(&key) {
            self.next_hops.release(nh);
        }
    }

    /// Sets a neighbour. A learned entry never replaces a static one.
    pub fn set_neighbor(
        &mut self,
        net: u16,
        ip: IpAddr,
        mac: EthernetAddress,
        port: u16,
        is_static: bool,
    ) -> bool {
        let key = (net, ip);
        if !is_static && self.neighbors.get(&key).is_some_and(|n| n.is_static) {
            return false;
        }
        let rec = NeighborRecord {
            mac,
            port,
            is_static,
            updated: std::time::Instant::now(),
        };
        let changed = self
            .neighbors
            .get(&key)
            .is_none_or(|n| n.mac != mac || n.port != port || n.is_static != is_static);
        self.neighbors.insert(key, rec);
        changed
    }

    /// Removes a neighbour; false if there was none.
    pub fn del_neighbor(&mut self, net: u16, ip: IpAddr) -> bool {
        self.neighbors.remove(&(net, ip)).is_some()
    }

    /// Learned neighbours older than `max_age` are forgotten; returns how many.
    pub fn age_neighbors(&mut self, max_age: std::time::Duration) -> usize {
        let before = self.neighbors.len();
        self.neighbors
            .retain(|_, n| n.is_static || n.updated.elapsed() < max_age);
        before - self.neighbors.len()
    }

    /// One neighbour.
    pub fn neighbor(&self, key: (u16, IpAddr)) -> Option<&NeighborRecord> {
        self.neighbors.get(&key)
    }

    pub fn neighbors(&self) -> impl Iterator<Item = (&(u16, IpAddr), &NeighborRecord)> {
        self.neighbors.iter()
    }

    pub fn ports(&self) -> &[PortState] {
        &self.ports
    }

    /// The ports as the ACL state names them: name, role and the pod each records.
    pub fn acl_ports(&self) -> Vec<crate::acl::AclPort> {
        self.ports
            .iter()
            .enumerate()
            .map(|(i, p)| crate::acl::AclPort {
                name: p.name.clone(),
                role: p.role,
                pod: self.pods.get(i).cloned().flatten(),
                locked: self.is_locked(i as u16),
            })
            .collect()
    }

    /// Index of a network by name.
    pub fn network_index(&self, name: &str) -> Option<u16> {
        self.nets
            .iter()
            .position(|n| n.name == name && !n.removed)
            .map(|i| i as u16)
    }

    /// Whether network `net` exists (not deleted).
    pub fn network_exists(&self, net: u16) -> bool {
        self.nets.get(usize::from(net)).is_some_and(|n| !n.removed)
    }

    /// Adds a network (VRF) at run time, without routes; its index is new (never one
    /// of a deleted network: indices are conntrack zones).
    pub fn add_network(&mut self, spec: &VrfSpec) -> Result<u16, FibError> {
        if self.network_index(&spec.name).is_some() {
            return Err(err(
                "name",
                format!("a network named {:?} exists", spec.name),
            ));
        }
        if self.nets.len() > usize::from(u16::MAX) {
            return Err(err(
                "name",
                "65535 networks were created: restart to reuse zones",
            ));
        }
        self.nets.push(NetRoutes {
            name: spec.name.clone(),
            gateway_v4: spec.gateway_v4,
            gateway_v6: spec.gateway_v6,
            user_defined: spec.user_defined,
            removed: false,
            routes: BTreeMap::new(),
            lpm4: Arc::new(Lpm4::new()),
            lpm6: Arc::new(Lpm6::new()),
        });
        Ok((self.nets.len() - 1) as u16)
    }

    /// Deletes a run-time network: refused while a port is in it. Its routes and
    /// neighbours go; its slot stays, empty.
    pub fn remove_network(&mut self, net: u16) -> Result<(), FibError> {
        if net == 0 || !self.network_exists(net) {
            return Err(err("name", "no such network"));
        }
        let ports = self.ports_in(net);
        if !ports.is_empty() {
            return Err(err(
                "name",
                format!(
                    "network {:?} has {} port(s) attached",
                    self.network_name(net),
                    ports.len()
                ),
            ));
        }
        let keys: Vec<(IpAddr, u8)> = self.nets[usize::from(net)].routes.keys().copied().collect();
        for key in keys {
            self.remove_route_key(net, key);
        }
        self.neighbors.retain(|&(n, _), _| n != net);
        let n = &mut self.nets[usize::from(net)];
        n.removed = true;
        n.user_defined = false;
        Ok(())
    }

    /// The ports in network `net` (by index).
    pub fn ports_in(&self, net: u16) -> Vec<u16> {
        self.ports
            .iter()
            .enumerate()
            .filter(|(_, p)| p.network == net && !p.name.is_empty())
            .map(|(i, _)| i as u16)
            .collect()
    }

    /// Replaces the routes of `net` that come from its plan ([`RouteSource::Network`]):
    /// its isolation and off-node prefixes. A prefix another source holds is left to
    /// it. Then refreshes its egress.
    pub fn set_network_routes(
        &mut self,
        net: u16,
        routes: &[(IpCidr, NextHopEntry)],
    ) -> Result<(), FibError> {
        let Some(n) = self.nets.get(usize::from(net)) else {
            return Err(err("network", "no such network"));
        };
        let old: Vec<(IpAddr, u8)> = n
            .routes
            .iter()
            .filter(|(_, (r, _))| r.source == RouteSource::Network)
            .map(|(k, _)| *k)
            .collect();
        for key in old {
            self.remove_route_key(net, key);
        }
        for &(prefix, entry) in routes {
            let key = (prefix.network(), prefix.prefix_len());
            if self.nets[usize::from(net)].routes.contains_key(&key) {
                continue;
            }
            self.insert(
                net,
                prefix,
                Route {
                    entry,
                    source: RouteSource::Network,
                },
            )?;
        }
        self.refresh_egress();
        Ok(())
    }

    /// Points every user-defined network's default routes at the default network's,
    /// when that is a route out of an uplink (the node's way out; traffic leaving
    /// through it from a user-defined network is masqueraded). Without one they have
    /// no default route. Called whenever the default network's routes change.
    pub fn refresh_egress(&mut self) {
        let uplink_default = |fib: &Fib, v4: bool| {
            let key = if v4 {
                (IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0)
            } else {
                (IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), 0)
            };
            match fib.nets.first()?.routes.get(&key)?.0.entry {
                e @ NextHopEntry::Port { port, .. }
                    if fib.ports.get(usize::from(port))?.role == PortRole::Uplink =>
                {
                    Some(e)
                }
                _ => None,
            }
        };
        let defaults = [
            (true, uplink_default(self, true)),
            (false, uplink_default(self, false)),
        ];
        for net in 1..self.nets.len() {
            if !self.nets[net].user_defined {
                continue;
            }
            for &(v4, entry) in &defaults {
                let key = if v4 {
                    (IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0)
                } else {
                    (IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), 0)
                };
                let current = self.nets[net].routes.get(&key).map(|(r, _)| *r);
                match (current, entry) {
                    (Some(r), _) if r.source != RouteSource::Network => {}
                    (Some(r), Some(e)) if r.entry == e => {}
                    (Some(_), None) => self.remove_route_key(net as u16, key),
                    (_, Some(e)) => {
                        if current.is_some() {
                            self.remove_route_key(net as u16, key);
                        }
                        if let Ok(prefix) = IpCidr::new(key.0, 0) {
                            let _ = self.insert(
                                net as u16,
                                prefix,
                                Route {
                                    entry: e,
                                    source: RouteSource::Network,
                                },
                            );
                        }
                    }
                    (None, None) => {}
                }
            }
        }
    }

    /// Locks or unlocks a port (a primary-network pod's default-network interface).
    pub fn set_locked(&mut self, port: u16, locked: bool) {
        if let Some(l) = self.locked.get_mut(usize::from(port)) {
            *l = locked;
        }
    }

    /// Whether a port is locked.
    pub fn is_locked(&self, port: u16) -> bool {
        self.locked.get(usize::from(port)).copied().unwrap_or(false)
    }

    pub fn network_name(&self, net: u16) -> &str {
        self.nets
            .get(usize::from(net))
            .map(|n| n.name.as_str())
            .unwrap_or("?")
    }

    pub fn network_count(&self) -> usize {
        self.nets.len()
    }

    /// The gateway addresses pods of network `net` see.
    pub fn gateways(&self, net: u16) -> Vec<IpAddr> {
        self.nets
            .get(usize::from(net))
            .map(|n| {
                let mut v = Vec::new();
                if !n.gateway_v4.is_unspecified() {
                    v.push(IpAddr::V4(n.gateway_v4));
                }
                v.push(IpAddr::V6(n.gateway_v6));
                v
            })
            .unwrap_or_default()
    }

    /// The indices of the networks that exist (deleted ones left out).
    pub fn network_indices(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.nets.len())
            .filter(|&i| !self.nets[i].removed)
            .map(|i| i as u16)
    }

    /// Index of a port by name.
    pub fn port_index(&self, name: &str) -> Option<u16> {
        self.ports
            .iter()
            .position(|p| p.name == name)
            .map(|i| i as u16)
    }

    /// Every route of a network, in prefix order.
    pub fn routes(&self, net: u16) -> impl Iterator<Item = (IpCidr, Route)> + '_ {
        self.nets.get(usize::from(net)).into_iter().flat_map(|n| {
            n.routes
                .iter()
                .filter_map(|(&(addr, len), &(r, _))| Some((IpCidr::new(addr, len).ok()?, r)))
        })
    }

    /// Replaces the SNAT policy the next generation carries.
    pub fn set_snat(&mut self, snat: Arc<SnatPolicy>) {
        self.snat = snat;
    }

    /// The SNAT policy in force.
    pub fn snat(&self) -> &SnatPolicy {
        &self.snat
    }

    /// The IPv4 addresses Ferrule owns on uplink ports (the node IPs SNAT may use).
    pub fn uplink_v4(&self) -> Vec<std::net::Ipv4Addr> {
        self.ports
            .iter()
            .filter(|p| p.role == PortRole::Uplink)
            .flat_map(|p| p.local_v4.iter().copied())
            .collect()
    }

    /// [`Fib::uplink_v4`] without the addresses the ENIs in force added.
    pub fn uplink_v4_without_enis(&self) -> Vec<std::net::Ipv4Addr> {
        let added: Vec<_> = self
            .enis
            .iter()
            .filter(|r| r.added_local)
            .map(|r| r.eni.primary_ip)
            .collect();
        self.uplink_v4()
            .into_iter()
            .filter(|a| !added.contains(a))
            .collect()
    }

    /// The ENIs in force.
    pub fn enis(&self) -> impl Iterator<Item = &crate::vpc::Eni> {
        self.enis.iter().map(|r| &r.eni)
    }

    /// Whether a port is bound to an ENI.
    pub fn eni_port(&self, port: u16) -> Option<&crate::vpc::Eni> {
        self.enis().find(|e| e.port == port)
    }

    /// Replaces the ENIs (validated by [`crate::vpc::enis`] against these ports): each
    /// ENI's primary IP becomes an address of its port (ARP, echo, a local route), its
    /// secondary IPs are answered by proxy ARP on its port, and a secondary ENI's
    /// table gets its next hop. On error nothing changes.
    pub fn set_enis(&mut self, enis: &[crate::vpc::Eni]) -> Result<(), FibError> {
        let saved = self.clone();
        let result = self.replace_enis(enis);
        if result.is_err() {
            *self = saved;
        }
        result
    }

    fn replace_enis(&mut self, enis: &[crate::vpc::Eni]) -> Result<(), FibError> {
        for old in std::mem::take(&mut self.enis) {
            let port = usize::from(old.eni.port);
            let primary = old.eni.primary_ip;
            if old.added_local {
                if let Some(p) = self.ports.get_mut(port) {
                    p.local_v4.retain(|a| *a != primary);
                }
            }
            if old.added_route {
                self.remove_route_key(0, (IpAddr::V4(primary), 32));
            }
            if let Some(nh) = old.nh {
                self.next_hops.release(nh);
            }
        }
        for p in &mut self.ports {
            p.proxy_arp_v4.clear();
        }
        for eni in enis {
            let port = usize::from(eni.port);
            let Some(state) = self.ports.get_mut(port) else {
                return Err(err("port", format!("no port {port}")));
            };
            state.proxy_arp_v4.extend(eni.secondary_ips.iter().copied());
            let added_local = !state.local_v4.contains(&eni.primary_ip);
            if added_local {
                state.local_v4.push(eni.primary_ip);
            }
            let net = state.network;
            let key = (IpAddr::V4(eni.primary_ip), 32);
            let added_route = !self.nets[usize::from(net)].routes.contains_key(&key);
            if added_route {
                self.insert(
                    net,
                    IpCidr::host(key.0),
                    Route {
                        entry: NextHopEntry::Local,
                        source: RouteSource::Eni,
                    },
                )?;
            }
            let nh = (eni.device_index != 0).then(|| {
                self.next_hops.acquire(NextHopEntry::Port {
                    port: eni.port,
                    via: Some(IpAddr::V4(eni.gateway)),
                })
            });
            self.enis.push(EniRecord {
                eni: eni.clone(),
                added_local,
                added_route,
                nh,
            });
        }
        Ok(())
    }

    /// The source route tables of the ENIs in force (none without a secondary ENI).
    fn source_routes(&self) -> Option<Arc<SourceRoutes>> {
        let mut routes = SourceRoutes::default();
        for r in &self.enis {
            let Some(nh) = r.nh else { continue };
            let net = self.ports.get(usize::from(r.eni.port))?.network;
            let t = routes.tables.len() as u16;
            routes.tables.push(SourceTable {
                name: r.eni.table(),
                owner: format!("{} (device {})", r.eni.spec.id, r.eni.device_index),
                nh,
            });
            for a in &r.eni.secondary_ips {
                routes.v4.insert((net, u32::from(*a)), t);
            }
        }
        (!routes.tables.is_empty()).then(|| Arc::new(routes))
    }

    /// Replaces the segments and MAC tables the next generation carries.
    pub fn set_switching(&mut self, switching: Arc<ferrule_dataplane::switching::Switching>) {
        self.switching = switching;
    }

    /// Replaces the ACL tables the next generation carries.
    /// Sets the IP → identity maps the next generations carry.
    pub fn set_identities(
        &mut self,
        identities: Arc<ferrule_dataplane::acl::identity::Identities>,
    ) {
        self.identities = identities;
    }

    /// Sets which ports' DNS queries go to the DNS proxy (`None`: none).
    pub fn set_dns(&mut self, dns: Option<Arc<ferrule_dataplane::snapshot::DnsIntercept>>) {
        self.dns = dns;
    }

    pub fn set_acl(&mut self, acl: Arc<AclTables>) {
        self.acl = acl;
    }

    /// Compiles the current state into a new generation.
    pub fn snapshot(&mut self) -> Snapshot {
        self.generation += 1;
        let mut neighbors: FxHashMap<(u16, IpAddr), Neighbor> = FxHashMap::default();
        for (&k, n) in &self.neighbors {
            neighbors.insert(
                k,
                Neighbor {
                    mac: n.mac,
                    port: n.port,
                },
            );
        }
        let mut snap = Snapshot {
            generation: self.generation,
            ports: self
                .ports
                .iter()
                .zip(self.locked.iter().chain(std::iter::repeat(&false)))
                .map(|(p, &locked)| PortState {
                    locked,
                    ..p.clone()
                })
                .collect(),
            networks: self
                .nets
                .iter()
                .map(|n| Network {
                    name: n.name.clone(),
                    lpm4: Arc::clone(&n.lpm4),
                    lpm6: Arc::clone(&n.lpm6),
                    gateway_v4: n.gateway_v4,
                    gateway_v6: n.gateway_v6,
                    user_defined: n.user_defined,
                })
                .collect(),
            locked_allow: Arc::clone(&self.locked_allow),
            nh_mac: Arc::default(),
            next_hops: Arc::new(self.next_hops.entries.clone()),
            neighbors: Arc::new(neighbors),
            acl: Arc::clone(&self.acl),
            snat: Arc::clone(&self.snat),
            any_locked: self.locked.iter().any(|&l| l),
            switching: Arc::clone(&self.switching),
            source_routes: self.source_routes(),
            identities: Arc::clone(&self.identities),
            dns: self.dns.clone(),
        };
        snap.resolve_gateways();
        snap.update_locked();
        snap
    }
}
