//! The user-defined networks on this node: the registry of `UserDefinedNetwork` /
//! `ClusterUserDefinedNetwork` manifests and the Namespaces they serve
//! (`ferrule-networks`), each ready network's VRF in the FIB (its gateway router's
//! addresses, its isolation and egress routes), its IPAM, and the applied objects the
//! state file keeps.

use crate::config::NetworksSection;
use crate::fib::{Fib, FibError, VrfSpec};
use ferrule_api::network::{
    Condition, NetworkApplied, NetworkCounters, NetworkInfo, NetworkList, NetworkLookupResult,
    PrimaryNetwork,
};
use ferrule_dataplane::snapshot::NextHopEntry;
use ferrule_dataplane::wire::IpCidr;
use ferrule_networks::manifest::{self, Object};
use ferrule_networks::plan::Ipam;
use ferrule_networks::registry::Network;
use ferrule_networks::validate::NetworkConfig;
use ferrule_networks::{Invalid, Registry, Settings, Topology};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

/// A ready network's place in the FIB.
#[derive(Debug)]
pub struct Vrf {
    /// Its index in the FIB: the VRF and conntrack zone.
    pub index: u16,
    pub network: Network,
    /// `None` when the network's IPAM is disabled.
    pub ipam: Option<Ipam>,
}

/// Why a network request is refused: the field and the text (JSON-RPC invalid params).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub message: String,
}

impl From<Invalid> for Refusal {
    fn from(e: Invalid) -> Refusal {
        Refusal {
            field: "objects".into(),
            message: e.to_string(),
        }
    }
}

fn refusal(field: &str, message: impl Into<String>) -> Refusal {
    Refusal {
        field: field.into(),
        message: message.into(),
    }
}

/// The identity of an applied object: kind and `namespace/name` (or `name`).
pub type ObjectKey = (String, String);

/// The identity of a manifest object, as the state file keys it.
pub fn object_key(v: &Value) -> Option<ObjectKey> {
    let kind = v.get("kind")?.as_str()?.to_string();
    let meta = v.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    Some(match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if kind == "UserDefinedNetwork" => (kind, format!("{ns}/{name}")),
        _ => (kind, name.to_string()),
    })
}

/// The network name an object of `key` creates (none for a Namespace).
pub fn network_name_of(key: &ObjectKey) -> Option<String> {
    match key.0.as_str() {
        "UserDefinedNetwork" => {
            let (ns, n) = key.1.split_once('/')?;
            Some(ferrule_networks::registry::udn_network_name(ns, n))
        }
        "ClusterUserDefinedNetwork" => Some(ferrule_networks::registry::cudn_network_name(&key.1)),
        _ => None,
    }
}

/// The settings `ferrule-networks` validates and plans with, from `[networks]`.
pub fn settings(s: &NetworksSection) -> Settings {
    let mut out = Settings {
        node_index: s.node_index,
        mtu: u32::from(s.mtu),
        cluster_subnets: s.cluster_subnets.clone(),
        service_subnets: s.service_subnets.clone(),
        default_join_subnets: s.join_subnets.clone(),
        ..Settings::default()
    };
    for c in &s.masquerade_subnets {
        match c {
            IpCidr::V4(c) => out.masquerade_subnet_v4 = *c,
            IpCidr::V6(c) => out.masquerade_subnet_v6 = *c,
        }
    }
    out
}

/// The networks' state on the node.
pub struct UdnState {
    registry: Registry,
    section: NetworksSection,
    vrfs: BTreeMap<String, Vrf>,
    /// What was applied, by identity, in the order first applied (for the state file
    /// and dry runs).
    objects: Vec<(ObjectKey, Value)>,
}

impl std::fmt::Debug for UdnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdnState")
            .field("vrfs", &self.vrfs.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The parsed objects of `network.apply`'s params.
fn parse_objects(values: &[Value]) -> Result<Vec<Object>, Refusal> {
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        out.extend(manifest::parse_value(v, &format!("objects[{i}]"))?);
    }
    Ok(out)
}

/// A network's topology and role as `network.list` writes them.
fn topology_name(t: Topology) -> &'static str {
    match t {
        Topology::Layer3 => "Layer3",
        Topology::Layer2 => "Layer2",
        Topology::Localnet => "Localnet",
    }
}

fn role_name(c: &NetworkConfig) -> String {
    format!("{:?}", c.role)
}

/// Whether a network's pods are routed by its gateway router (Layer3, Layer2 with
/// subnets); a Localnet network is bridged only.
fn is_routed(c: &NetworkConfig) -> bool {
    c.topology != Topology::Localnet
}

impl UdnState {
    pub fn new(section: &NetworksSection) -> UdnState {
        UdnState {
            registry: Registry::new(settings(section)),
            section: section.clone(),
            vrfs: BTreeMap::new(),
            objects: Vec::new(),
        }
    }

    /// The `[networks]` section in force.
    pub fn section(&self) -> &NetworksSection {
        &self.section
    }

    /// A ready network by name.
    pub fn vrf(&self, name: &str) -> Option<&Vrf> {
        self.vrfs.get(name)
    }

    /// The ready network with FIB index `index`.
    pub fn vrf_at(&self, index: u16) -> Option<&Vrf> {
        self.vrfs.values().find(|v| v.index == index)
    }

    fn vrf_at_mut(&mut self, index: u16) -> Option<&mut Vrf> {
        self.vrfs.values_mut().find(|v| v.index == index)
    }

    /// The applied objects (for the state file).
    pub fn objects(&self) -> impl Iterator<Item = &Value> {
        self.objects.iter().map(|(_, v)| v)
    }

    /// `network.apply`: validates every object (all or nothing), then creates the
    /// networks that became ready in the FIB.
    pub fn apply(
        &mut self,
        fib: &mut Fib,
        values: &[Value],
        dry_run: bool,
    ) -> Result<NetworkApplied, Refusal> {
        let objects = parse_objects(values)?;
        if dry_run {
            // A registry with what is applied now, then these.
            let mut trial = Registry::new(settings(&self.section));
            let current: Vec<Value> = self.objects().cloned().collect();
            trial.apply(&parse_objects(&current)?)?;
            let applied = trial.apply(&objects)?;
            return Ok(Self::applied(applied, true));
        }
        let applied = self.registry.apply(&objects)?;
        for v in values {
            let Some(key) = object_key(v) else { continue };
            if !matches!(
                key.0.as_str(),
                "UserDefinedNetwork" | "ClusterUserDefinedNetwork" | "Namespace"
            ) {
                continue;
            }
            match self.objects.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = v.clone(),
                None => self.objects.push((key, v.clone())),
            }
        }
        self.sync(fib).map_err(|e| {
            refusal(
                e.field,
                format!("the network could not be set up: {}", e.message),
            )
        })?;
        Ok(Self::applied(applied, false))
    }

    fn applied(a: ferrule_networks::registry::Applied, dry_run: bool) -> NetworkApplied {
        NetworkApplied {
            created: a.created.into_iter().map(|r| r.name).collect(),
            unchanged: a.unchanged,
            namespaces: a.namespaces,
            ignored: a.ignored,
            dry_run,
        }
    }

    /// `network.del`: deletes the network `name` (refused while ports use it).
    pub fn delete(&mut self, fib: &mut Fib, name: &str) -> Result<(), Refusal> {
        let Some(status) = self.registry.status().into_iter().find(|s| s.name == name) else {
            return Err(refusal(
                "name",
                format!("no user-defined network named {name:?}"),
            ));
        };
        let in_use = |n: &str| self.vrfs.get(n).map_or(0, |v| fib.ports_in(v.index).len());
        self.registry
            .delete(status.kind, &status.object, &in_use)
            .map_err(|e| refusal("name", e.to_string()))?;
        self.objects
            .retain(|(k, _)| network_name_of(k).as_deref() != Some(name));
        self.sync(fib).map_err(|e| refusal(e.field, e.message))
    }

    /// Brings the FIB in line with the registry: a VRF for each network that became
    /// ready, none for a network that is gone (one that still has ports stays until
    /// they leave).
    pub fn sync(&mut self, fib: &mut Fib) -> Result<(), FibError> {
        let ready = self.registry.networks();
        let all_subnets: Vec<(String, IpCidr)> = ready
            .iter()
            .flat_map(|n| n.config.subnets.iter().map(|s| (n.name.clone(), s.cidr)))
            .collect();
        for n in &ready {
            if let Some(v) = self.vrfs.get_mut(&n.name) {
                v.network = n.clone();
                continue;
            }
            let gw = |v6: bool| {
                n.plan
                    .subnets
                    .iter()
                    .filter_map(|s| s.gateway)
                    .find(|g| g.is_ipv6() == v6)
            };
            let spec = VrfSpec {
                name: n.name.clone(),
                gateway_v4: match gw(false) {
                    Some(IpAddr::V4(a)) => a,
                    _ => Ipv4Addr::UNSPECIFIED,
                },
                gateway_v6: match gw(true) {
                    Some(IpAddr::V6(a)) => a,
                    _ => crate::config::DEFAULT_GATEWAY_V6,
                },
                user_defined: is_routed(&n.config),
            };
            let index = fib.add_network(&spec)?;
            let routes = self.plan_routes(n, &all_subnets);
            if let Err(e) = fib.set_network_routes(index, &routes) {
                let _ = fib.remove_network(index);
                return Err(e);
            }
            tracing::info!(network = %n.name, zone = index, object = %n.object, "network created");
            self.vrfs.insert(
                n.name.clone(),
                Vrf {
                    index,
                    ipam: Ipam::new(&n.config, &n.plan),
                    network: n.clone(),
                },
            );
        }
        let gone: Vec<String> = self
            .vrfs
            .keys()
            .filter(|k| !ready.iter().any(|n| &n.name == *k))
            .cloned()
            .collect();
        for name in gone {
            let index = self.vrfs[&name].index;
            if fib.ports_in(index).is_empty() {
                fib.remove_network(index)?;
                self.vrfs.remove(&name);
                tracing::info!(network = %name, zone = index, "network deleted");
            } else {
                tracing::warn!(network = %name, zone = index, "network no longer ready but ports use it: kept until they leave");
            }
        }
        Ok(())
    }

    /// The routes a network's plan puts in its VRF: the default network's subnets
    /// (cluster, service, join) and the other networks' subnets are another network
    /// (`Isolated`); its own subnets off this node are not reachable from here (no
    /// transit between nodes: `Blackhole`; its pods have host routes).
    fn plan_routes(&self, n: &Network, all: &[(String, IpCidr)]) -> Vec<(IpCidr, NextHopEntry)> {
        let s = &self.section;
        let own: Vec<IpCidr> = n.config.subnets.iter().map(|x| x.cidr).collect();
        let overlaps_own =
            |c: &IpCidr| own.iter().any(|o| o.contains_cidr(c) || c.contains_cidr(o));
        let mut out: Vec<(IpCidr, NextHopEntry)> = Vec::new();
        for c in s
            .cluster_subnets
            .iter()
            .chain(&s.service_subnets)
            .chain(&s.join_subnets)
            .chain(
                all.iter()
                    .filter(|(name, _)| *name != n.name)
                    .map(|(_, c)| c),
            )
        {
            if !overlaps_own(c) && !out.iter().any(|(o, _)| o == c) {
                out.push((*c, NextHopEntry::Isolated));
            }
        }
        for c in &own {
            out.push((*c, NextHopEntry::Blackhole));
        }
        out
    }

    /// The addresses a pod port of network `index` gets: `given` ones are recorded
    /// (a restart replays them; they must be assignable here and free), none given are
    /// allocated. Other networks' ports keep what they were given.
    pub fn assign(
        &mut self,
        index: u16,
        owner: &str,
        given: &[IpAddr],
    ) -> Result<Vec<IpAddr>, Refusal> {
        let Some(vrf) = self.vrf_at_mut(index) else {
            return Ok(given.to_vec());
        };
        let Some(ipam) = vrf.ipam.as_mut() else {
            return Ok(given.to_vec());
        };
        if given.is_empty() {
            return ipam.allocate(owner).ok_or_else(|| {
                refusal(
                    "ips",
                    format!(
                        "network {:?} has no free address left on this node",
                        vrf.network.name
                    ),
                )
            });
        }
        let mut done = Vec::new();
        for (i, ip) in given.iter().enumerate() {
            if let Err(e) = ipam.restore(*ip, owner) {
                for d in done {
                    ipam.release(d);
                }
                return Err(refusal(&format!("ips[{i}]"), e));
            }
            done.push(*ip);
        }
        Ok(given.to_vec())
    }

    /// Gives a port's addresses back to its network's IPAM.
    pub fn release(&mut self, index: u16, ips: &[IpAddr]) {
        if let Some(ipam) = self.vrf_at_mut(index).and_then(|v| v.ipam.as_mut()) {
            for ip in ips {
                ipam.release(*ip);
            }
        }
    }

    /// The layer-2 segments of the switched networks (Layer2, Localnet) over the ports
    /// in `fib`: each network's pod ports, and a Localnet network's uplink (the port
    /// `[networks] physical_networks` names for its physical network) on its VLAN.
    pub fn segments(&self, fib: &Fib) -> Vec<ferrule_dataplane::switching::Segment> {
        let mut out = Vec::new();
        for (name, v) in &self.vrfs {
            let c = &v.network.config;
            let uplink = match c.topology {
                Topology::Layer3 => continue,
                Topology::Layer2 => None,
                Topology::Localnet => {
                    let physnet = c.physical_network.as_deref().unwrap_or(name);
                    match self
                        .section
                        .physical_networks
                        .get(physnet)
                        .and_then(|p| fib.port_index(p))
                    {
                        Some(port) => Some((port, c.vlan)),
                        None => {
                            tracing::warn!(network = %name, physical_network = physnet, "no port for the Localnet network's physical network ([networks] physical_networks): its pods are switched among themselves only");
                            None
                        }
                    }
                }
            };
            out.push(crate::fdb::network_segment(
                name,
                v.index,
                fib.ports(),
                uplink,
            ));
        }
        out
    }

    /// The MTU of network `index`'s ports when `port.add` gives none.
    pub fn mtu(&self, index: u16) -> Option<u16> {
        self.vrf_at(index)
            .map(|v| u16::try_from(v.network.config.mtu).unwrap_or(u16::MAX))
    }

    /// Whether a pod port in network `index` recording `pod` is locked: the
    /// default-network port of a pod whose namespace has a primary network.
    pub fn locks(&self, index: u16, pod: Option<&str>) -> bool {
        let Some(ns) = pod.and_then(|p| p.split_once('/')).map(|(ns, _)| ns) else {
            return false;
        };
        index == 0 && matches!(self.registry.primary_network(ns), Ok(Some(_)))
    }

    /// `network.lookup`: what the CNI plugin needs for a pod of `namespace`.
    pub fn lookup(&self, namespace: &str) -> Result<NetworkLookupResult, Refusal> {
        let primary = self
            .registry
            .primary_network(namespace)
            .map_err(|e| refusal("namespace", e))?;
        let Some(primary) = primary else {
            return Ok(NetworkLookupResult::default());
        };
        let Some(vrf) = self.vrfs.get(&primary.name) else {
            return Err(refusal(
                "namespace",
                format!(
                    "the primary network {:?} is not set up on this node",
                    primary.name
                ),
            ));
        };
        let c = &vrf.network.config;
        let routes = c
            .subnets
            .iter()
            .map(|s| s.cidr)
            .chain(c.join_subnets.iter().copied())
            .map(|x| x.to_string())
            .collect();
        Ok(NetworkLookupResult {
            primary: Some(PrimaryNetwork {
                name: primary.name.clone(),
                topology: topology_name(c.topology).into(),
                mtu: u16::try_from(c.mtu).unwrap_or(u16::MAX),
                gateways: vrf
                    .network
                    .plan
                    .subnets
                    .iter()
                    .filter_map(|s| s.gateway)
                    .map(|g| g.to_string())
                    .collect(),
                node_subnets: vrf
                    .network
                    .plan
                    .subnets
                    .iter()
                    .map(|s| s.node_subnet.to_string())
                    .collect(),
                routes,
                ipam: vrf.ipam.is_some(),
            }),
            default_network_routes: self
                .section
                .default_network_allow
                .iter()
                .map(ToString::to_string)
                .collect(),
        })
    }

    /// `network.list`: the default and configured networks, then every user-defined
    /// one (ready or not) with its status. `counters(index)` sums a network's ports.
    pub fn list(
        &self,
        fib: &Fib,
        only: Option<&str>,
        counters: &dyn Fn(u16) -> NetworkCounters,
    ) -> Result<NetworkList, Refusal> {
        let ports_of = |index: u16| -> Vec<String> {
            fib.ports_in(index)
                .into_iter()
                .map(|p| fib.ports()[usize::from(p)].name.clone())
                .collect()
        };
        let mut out = Vec::new();
        for index in fib.network_indices() {
            let name = fib.network_name(index);
            if self.vrfs.contains_key(name) {
                continue;
            }
            out.push(NetworkInfo {
                name: name.to_string(),
                kind: if index == 0 { "default" } else { "config" }.into(),
                object: String::new(),
                zone: Some(index),
                topology: "Layer3".into(),
                role: "Primary".into(),
                mtu: 1500,
                subnets: if index == 0 {
                    self.section
                        .cluster_subnets
                        .iter()
                        .map(ToString::to_string)
                        .collect()
                } else {
                    Vec::new()
                },
                node_subnets: Vec::new(),
                exclude_subnets: Vec::new(),
                join_subnets: if index == 0 {
                    self.section
                        .join_subnets
                        .iter()
                        .map(ToString::to_string)
                        .collect()
                } else {
                    Vec::new()
                },
                gateways: fib
                    .gateways(index)
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                masquerade: Vec::new(),
                vlan: None,
                namespaces: Vec::new(),
                ports: ports_of(index),
                allocated: 0,
                conditions: Vec::new(),
                counters: counters(index),
            });
        }
        let ready = self.registry.networks();
        for st in self.registry.status() {
            let vrf = self.vrfs.get(&st.name);
            let network = vrf
                .map(|v| &v.network)
                .or_else(|| ready.iter().find(|n| n.name == st.name));
            let config = network.map(|n| n.config.clone()).or_else(|| {
                // Not ready: its spec from the applied object.
                self.objects
                    .iter()
                    .find(|(k, _)| network_name_of(k).as_deref() == Some(st.name.as_str()))
                    .and_then(|(_, v)| parse_objects(std::slice::from_ref(v)).ok())
                    .and_then(|objs| match objs.into_iter().next() {
                        Some(Object::UserDefinedNetwork(u)) => {
                            ferrule_networks::validate::validate_spec(
                                &u.spec,
                                &u.object(),
                                self.registry.settings(),
                            )
                            .ok()
                        }
                        Some(Object::ClusterUserDefinedNetwork(c)) => {
                            ferrule_networks::validate::validate_spec(
                                &c.spec,
                                &c.object(),
                                self.registry.settings(),
                            )
                            .ok()
                        }
                        _ => None,
                    })
            });
            let Some(config) = config else { continue };
            let masq = self
                .registry
                .network_ids()
                .into_iter()
                .find(|(r, _)| r.name == st.name)
                .map(|(_, m)| m);
            out.push(NetworkInfo {
                name: st.name.clone(),
                kind: st.kind.to_string(),
                object: st.object.clone(),
                zone: vrf.map(|v| v.index),
                topology: topology_name(config.topology).into(),
                role: role_name(&config),
                mtu: u16::try_from(config.mtu).unwrap_or(u16::MAX),
                subnets: config.subnets.iter().map(ToString::to_string).collect(),
                node_subnets: network
                    .map(|n| {
                        n.plan
                            .subnets
                            .iter()
                            .map(|s| s.node_subnet.to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
                exclude_subnets: config
                    .exclude_subnets
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                join_subnets: config
                    .join_subnets
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                gateways: network
                    .map(|n| {
                        n.plan
                            .subnets
                            .iter()
                            .filter_map(|s| s.gateway)
                            .map(|g| g.to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
                masquerade: masq
                    .map(|m| {
                        m.v4.iter()
                            .map(ToString::to_string)
                            .chain(m.v6.iter().map(ToString::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
                vlan: config.vlan,
                namespaces: st.active_namespaces.clone(),
                ports: vrf.map(|v| ports_of(v.index)).unwrap_or_default(),
                allocated: vrf
                    .and_then(|v| v.ipam.as_ref())
                    .map_or(0, |i| i.len() as u32),
                conditions: st
                    .conditions
                    .iter()
                    .map(|c| Condition {
                        kind: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        last_transition_time: c.last_transition_time.clone(),
                    })
                    .collect(),
                counters: vrf.map(|v| counters(v.index)).unwrap_or_default(),
            });
        }
        if let Some(name) = only {
            out.retain(|n| n.name == name);
            if out.is_empty() {
                return Err(refusal("name", format!("no network named {name:?}")));
            }
        }
        Ok(NetworkList { networks: out })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, EMBEDDED_DEFAULT};
    use serde_json::json;

    fn fib_and_state() -> (Fib, UdnState) {
        let text = format!("{EMBEDDED_DEFAULT}\n[networks]\ncluster_subnets = [\"10.1.0.0/16\"]\n");
        let cfg = Config::parse(&text, "test").expect("config");
        let n = cfg.ports.len();
        let ids: Vec<u16> = (0..n as u16).collect();
        let fib = Fib::from_config(&cfg, &vec![[0u8; 6]; n], &ids).expect("fib");
        (fib, UdnState::new(&cfg.udn))
    }

    fn objects(udn_subnet: &str) -> Vec<Value> {
        vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "blue",
                "labels": {"k8s.ovn.org/primary-user-defined-network": ""}}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "red",
                "labels": {"k8s.ovn.org/primary-user-defined-network": ""}}}),
            json!({"apiVersion": "k8s.ovn.org/v1", "kind": "UserDefinedNetwork",
                "metadata": {"name": "t", "namespace": "blue"},
                "spec": {"topology": "Layer3", "role": "Primary", "subnets": [udn_subnet]}}),
            json!({"apiVersion": "k8s.ovn.org/v1", "kind": "UserDefinedNetwork",
                "metadata": {"name": "t", "namespace": "red"},
                "spec": {"topology": "Layer3", "role": "Primary", "subnets": ["10.200.0.0/16/24"]}}),
        ]
    }

    #[test]
    fn a_ready_network_gets_a_vrf_with_isolation_blackhole_and_egress_routes() {
        let (mut fib, mut udn) = fib_and_state();
        let applied = udn
            .apply(&mut fib, &objects("10.128.0.0/16/24"), false)
            .expect("apply");
        assert_eq!(applied.created, ["blue.t", "red.t"]);
        let blue = udn.vrf("blue.t").expect("ready").index;
        let routes: Vec<(String, String)> = fib
            .routes(blue)
            .map(|(p, r)| (p.to_string(), format!("{:?}", r.entry)))
            .collect();
        let entry = |p: &str| routes.iter().find(|(q, _)| q == p).map(|(_, e)| e.as_str());
        assert_eq!(entry("10.1.0.0/16"), Some("Isolated"), "{routes:?}");
        assert_eq!(entry("10.96.0.0/16"), Some("Isolated"), "{routes:?}");
        assert_eq!(entry("100.64.0.0/16"), Some("Isolated"), "{routes:?}");
        assert_eq!(
            entry("10.200.0.0/16"),
            Some("Isolated"),
            "red's subnet: {routes:?}"
        );
        assert_eq!(
            entry("10.128.0.0/16"),
            Some("Blackhole"),
            "own, off the node: {routes:?}"
        );
        // The demo configuration's default route leaves through the uplink: the
        // network's default route follows it.
        let default = fib
            .routes(0)
            .find(|(p, _)| p.prefix_len() == 0 && p.address().is_ipv4());
        let own = entry("0.0.0.0/0");
        assert_eq!(own.is_some(), default.is_some(), "{routes:?}");
        assert_eq!(fib.gateways(blue)[0].to_string(), "10.128.0.1");
    }

    #[test]
    fn ipam_assigns_restores_and_releases_per_network() {
        let (mut fib, mut udn) = fib_and_state();
        udn.apply(&mut fib, &objects("10.128.0.0/16/24"), false)
            .expect("apply");
        let (blue, red) = (
            udn.vrf("blue.t").unwrap().index,
            udn.vrf("red.t").unwrap().index,
        );
        let a = udn.assign(blue, "blue/a", &[]).expect("blue/a");
        let b = udn.assign(red, "red/b", &[]).expect("red/b");
        assert_eq!(a[0].to_string(), "10.128.0.2");
        assert_eq!(b[0].to_string(), "10.200.0.2");
        // Given addresses are recorded; one another pod has is refused, naming it.
        let e = udn.assign(blue, "blue/c", &a).expect_err("taken");
        assert_eq!(e.field, "ips[0]");
        assert!(e.message.contains("blue/a"), "{e:?}");
        udn.release(blue, &a);
        assert_eq!(udn.assign(blue, "blue/c", &a).expect("free again"), a);
        // The default network's ports keep what they were given.
        let given: Vec<IpAddr> = vec!["10.1.0.9".parse().unwrap()];
        assert_eq!(udn.assign(0, "x/y", &given).unwrap(), given);
        // Primary-network pods' default-network ports are locked; others are not.
        assert!(udn.locks(0, Some("blue/a")));
        assert!(!udn.locks(blue, Some("blue/a")));
        assert!(!udn.locks(0, Some("shop/web")));
        assert!(!udn.locks(0, None));
    }

    #[test]
    fn dry_runs_change_nothing_and_deletion_waits_for_ports() {
        let (mut fib, mut udn) = fib_and_state();
        let dry = udn
            .apply(&mut fib, &objects("10.128.0.0/16/24"), true)
            .expect("dry run");
        assert!(dry.dry_run && dry.created.len() == 2);
        assert!(udn.vrf("blue.t").is_none() && fib.network_index("blue.t").is_none());
        udn.apply(&mut fib, &objects("10.128.0.0/16/24"), false)
            .expect("apply");
        // A changed spec is refused whole, and a dry run says so too.
        for dry_run in [true, false] {
            let e = udn
                .apply(&mut fib, &objects("10.129.0.0/16/24"), dry_run)
                .expect_err("immutable");
            assert!(e.message.contains("Spec is immutable"), "{e:?}");
        }
        let index = udn.vrf("blue.t").unwrap().index;
        udn.delete(&mut fib, "blue.t").expect("no ports: deleted");
        assert!(fib.network_index("blue.t").is_none() && !fib.network_exists(index));
        assert_eq!(fib.routes(index).count(), 0);
        // A zone is never given again.
        udn.apply(&mut fib, &objects("10.128.0.0/16/24"), false)
            .expect("again");
        assert!(udn.vrf("blue.t").unwrap().index > index);
        let e = udn.delete(&mut fib, "nope").expect_err("unknown");
        assert_eq!(e.field, "name");
    }

    #[test]
    fn lookup_says_what_the_cni_plugin_needs() {
        let (mut fib, mut udn) = fib_and_state();
        let mut objs = objects("10.128.0.0/16/24");
        objs.push(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lost",
            "labels": {"k8s.ovn.org/primary-user-defined-network": ""}}}),
        );
        udn.apply(&mut fib, &objs, false).expect("apply");
        let r = udn.lookup("blue").expect("blue");
        let p = r.primary.expect("a primary network");
        assert_eq!(p.name, "blue.t");
        assert_eq!(p.gateways, ["10.128.0.1"]);
        assert_eq!(p.node_subnets, ["10.128.0.0/24"]);
        assert!(p.routes.contains(&"10.128.0.0/16".to_string()) && p.ipam);
        assert_eq!(r.default_network_routes, ["10.96.0.1/32", "10.96.0.10/32"]);
        assert_eq!(
            udn.lookup("shop").expect("unlabelled"),
            NetworkLookupResult::default()
        );
        let e = udn.lookup("lost").expect_err("labelled, no network");
        assert!(e.message.contains("pod creation fails"), "{e:?}");
    }
}
