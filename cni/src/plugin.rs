//! ADD, DEL and CHECK: IPAM delegated, the pod's interface set up (a veth pair, or a
//! vhost-user socket), and the node end attached to `ferruled` as a pod port that
//! records the pod as `namespace/name`. A pod whose namespace has a primary
//! user-defined network gets, in the same ADD, a second interface (`ovn-udn1`) on that
//! network — its address from the network's IPAM in ferruled, the default route
//! through it — while the first one (the default network's) keeps only routes to the
//! Kubernetes API and DNS addresses, as OVN-Kubernetes attaches such pods.

use crate::ipam::Ipam;
use crate::link::{self, PodRouting, PodSide, GATEWAY_V4, GATEWAY_V6};
use crate::spec::{
    code, parse_cidr, CallEnv, CniError, CniResult, Interface, NetConf, ResultInterface, ResultIp,
    ResultRoute, VethDriver,
};
use ferrule_api::client::{Client, ClientError};
use ferrule_api::network::{NetworkLookup, NetworkLookupResult, PrimaryNetwork};
use ferrule_api::rpc::INVALID_PARAMS;
use ferrule_api::{
    method, network_method, port_method, PortAdd, PortDel, PortDevice, PortInfo, PortRole,
    PortsList,
};
use ferrule_dataplane::wire::IpCidr;
use serde_json::Value;
use std::net::IpAddr;
use std::time::Duration;

/// The interface a pod's primary user-defined network gets (OVN-Kubernetes' name).
pub const UDN_IFNAME: &str = "ovn-udn1";

/// How long one call to `ferruled` may take.
const FERRULED_TIMEOUT: Duration = Duration::from_secs(30);

/// 64-bit FNV-1a: stable names from a container ID and an interface name.
fn fnv64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            h = (h ^ u64::from(b'/')).wrapping_mul(0x0100_0000_01b3);
        }
        for b in part.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The Ferrule port of a container's interface: the container ID's first characters
/// (letters, digits, `-`, `_`, `.`) and a hash of the ID and the interface, so it is
/// unique, stable across calls and at most 29 characters.
pub fn port_name(container_id: &str, ifname: &str) -> String {
    let readable: String = container_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
        .take(20)
        .collect();
    let hash = fnv64(&[container_id, ifname]) as u32;
    if readable.is_empty() {
        format!("c-{hash:08x}")
    } else {
        format!("{readable}-{hash:08x}")
    }
}

/// The node end of a container's veth: `fr` and 12 hex digits (15 characters at most).
pub fn host_veth_name(container_id: &str, ifname: &str) -> String {
    format!(
        "fr{:012x}",
        fnv64(&[container_id, ifname]) & 0xffff_ffff_ffff
    )
}

/// A locally administered MAC for a vhost-user pod (its DPDK application uses it).
pub fn vhost_pod_mac(container_id: &str, ifname: &str) -> String {
    let b = fnv64(&[container_id, ifname, "mac"]).to_be_bytes();
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4]
    )
}

fn ferruled_err(what: &str, e: ClientError) -> CniError {
    let retry = matches!(e, ClientError::Connect { .. } | ClientError::Io(_));
    CniError::new(
        if retry {
            code::TRY_AGAIN_LATER
        } else {
            code::FERRULED
        },
        what.to_string(),
        e.to_string(),
    )
}

fn connect(conf: &NetConf) -> Result<Client, CniError> {
    let mut client =
        Client::connect(&conf.socket).map_err(|e| ferruled_err("cannot reach ferruled", e))?;
    client
        .set_read_timeout(Some(FERRULED_TIMEOUT))
        .map_err(|e| ferruled_err("cannot reach ferruled", e))?;
    Ok(client)
}

/// ADD: returns the result to print.
pub fn add(env: &CallEnv, conf: &NetConf, raw_conf: &[u8]) -> Result<CniResult, CniError> {
    let Some(ipam) = Ipam::from_conf(conf, env)? else {
        return Err(CniError::new(
            code::INVALID_NETWORK_CONFIG,
            "ipam is required",
            "name an IPAM plugin, e.g. {\"type\": \"host-local\", ...}",
        ));
    };
    let netns = env
        .netns
        .clone()
        .ok_or_else(|| CniError::new(code::INVALID_ENVIRONMENT, "CNI_NETNS is not set", ""))?;
    // A namespace asking for a primary network that does not exist yet gets no pod.
    let lookup = match env.pod() {
        Some(pod) => primary_network(conf, &pod)?,
        None => NetworkLookupResult::default(),
    };
    let allocated = ipam.add(env, raw_conf)?;
    let mut outcome = attach(env, conf, &netns, &allocated, &lookup);
    if let (Ok(result), Some(primary)) = (&mut outcome, &lookup.primary) {
        if let Err(e) = attach_primary(env, conf, &netns, primary, result) {
            let _ = detach(env, conf, &env.ifname);
            outcome = Err(e);
        }
    }
    if outcome.is_err() {
        // Give the addresses back: the container gets no network from this call.
        let _ = ipam.del(env, raw_conf);
    }
    outcome
}

/// The pod's namespace's primary user-defined network, if any (`network.lookup`).
fn primary_network(conf: &NetConf, pod: &str) -> Result<NetworkLookupResult, CniError> {
    let namespace = pod.split_once('/').map_or(pod, |(ns, _)| ns).to_string();
    let mut client = connect(conf)?;
    let params = serde_json::to_value(NetworkLookup { namespace }).map_err(|e| {
        CniError::new(
            code::FERRULED,
            "cannot encode network.lookup",
            e.to_string(),
        )
    })?;
    match client.call_typed(network_method::LOOKUP, params) {
        Ok(r) => Ok(r),
        // An older ferruled: no user-defined networks.
        Err(ClientError::Rpc(e)) if e.code == ferrule_api::rpc::METHOD_NOT_FOUND => {
            Ok(NetworkLookupResult::default())
        }
        Err(ClientError::Rpc(e)) if e.code == INVALID_PARAMS => Err(CniError::new(
            code::FERRULED,
            format!("pod {pod} cannot be attached yet"),
            e.message,
        )),
        Err(e) => Err(ferruled_err("cannot look the pod's networks up", e)),
    }
}

/// The second interface of a pod whose namespace has a primary network: a veth to a
/// port on that network, addressed by the network's IPAM, carrying the default route.
fn attach_primary(
    env: &CallEnv,
    conf: &NetConf,
    netns: &std::path::Path,
    primary: &PrimaryNetwork,
    result: &mut CniResult,
) -> Result<(), CniError> {
    if conf.interface != Interface::Veth {
        return Err(CniError::new(
            code::INVALID_NETWORK_CONFIG,
            format!(
                "the pod's namespace has the primary network {}, which needs \"interface\": \"veth\"",
                primary.name
            ),
            "",
        ));
    }
    let ifname = UDN_IFNAME;
    let host = host_veth_name(&env.container_id, ifname);
    let name = port_name(&env.container_id, ifname);
    let mut gateway_v4 = GATEWAY_V4;
    let mut gateway_v6 = GATEWAY_V6;
    for g in &primary.gateways {
        match g.parse::<IpAddr>() {
            Ok(IpAddr::V4(a)) => gateway_v4 = a,
            Ok(IpAddr::V6(a)) => gateway_v6 = a,
            Err(_) => {}
        }
    }
    let routes: Vec<IpCidr> = primary
        .routes
        .iter()
        .filter_map(|r| parse_cidr(r))
        .collect();
    let mut side = PodSide {
        netns: netns.to_path_buf(),
        ifname: ifname.to_string(),
        addresses: Vec::new(),
        mtu: primary.mtu,
        routing: PodRouting {
            gateway_v4,
            gateway_v6,
            default_route: true,
            routes,
            // A Layer2 network's pods share its subnet on the link.
            on_link: if primary.topology == "Layer2" {
                primary
                    .node_subnets
                    .iter()
                    .filter_map(|r| parse_cidr(r))
                    .collect()
            } else {
                Vec::new()
            },
        },
    };
    let veth = link::add_veth(&host, &side)?;
    let mut client = connect(conf)?;
    let mut request_conf = conf.clone();
    request_conf.network = primary.name.clone();
    let added = add_veth_port(
        &mut client,
        &request_conf,
        env,
        &name,
        &host,
        &veth.pod_mac,
        &[],
        primary.mtu,
    );
    let info = match added {
        Ok(info) => info,
        Err(e) => {
            let _ = link::del_veth(&host);
            return Err(e);
        }
    };
    side.addresses = info.ips.iter().filter_map(|a| a.parse().ok()).collect();
    if let Err(e) = link::address_pod(&side) {
        let _ = detach(env, conf, ifname);
        return Err(e);
    }
    let host_index = result.interfaces.len();
    result.interfaces.push(ResultInterface {
        name: host,
        mac: info.mac.clone(),
        sandbox: String::new(),
        socket_path: String::new(),
    });
    result.interfaces.push(ResultInterface {
        name: ifname.to_string(),
        mac: veth.pod_mac,
        sandbox: netns.display().to_string(),
        socket_path: String::new(),
    });
    // The default route is the primary network's now.
    result
        .routes
        .retain(|r| r.dst != "0.0.0.0/0" && r.dst != "::/0");
    for a in &side.addresses {
        let (gateway, default, len) = match a {
            IpAddr::V4(_) => (IpAddr::V4(gateway_v4), "0.0.0.0/0", 32),
            IpAddr::V6(_) => (IpAddr::V6(gateway_v6), "::/0", 128),
        };
        result.ips.push(ResultIp {
            version: None,
            address: format!("{a}/{len}"),
            gateway: Some(gateway.to_string()),
            interface: Some(host_index + 1),
        });
        result.routes.push(ResultRoute {
            dst: default.to_string(),
            gw: Some(gateway.to_string()),
        });
    }
    Ok(())
}

/// Removes a container interface's port and veth; each gone already is fine.
fn detach(env: &CallEnv, conf: &NetConf, ifname: &str) -> Result<(), CniError> {
    let name = port_name(&env.container_id, ifname);
    let mut client = connect(conf)?;
    let params = serde_json::to_value(PortDel { name: name.clone() })
        .map_err(|e| CniError::new(code::FERRULED, "cannot encode port.del", e.to_string()))?;
    match client.call(port_method::DEL, params) {
        Ok(_) => {}
        Err(ClientError::Rpc(e))
            if e.code == INVALID_PARAMS && e.message.contains("no port named") => {}
        Err(e) => return Err(ferruled_err(&format!("cannot delete port {name}"), e)),
    }
    if conf.interface == Interface::Veth {
        link::del_veth(&host_veth_name(&env.container_id, ifname))?;
    }
    Ok(())
}

fn attach(
    env: &CallEnv,
    conf: &NetConf,
    netns: &std::path::Path,
    allocated: &CniResult,
    lookup: &NetworkLookupResult,
) -> Result<CniResult, CniError> {
    // With a primary network, the default network's interface routes only the
    // Kubernetes API and DNS addresses (ferruled drops everything else on it).
    let routing = match lookup.primary {
        None => PodRouting::default(),
        Some(_) => PodRouting {
            default_route: false,
            routes: lookup
                .default_network_routes
                .iter()
                .filter_map(|r| parse_cidr(r))
                .collect(),
            ..PodRouting::default()
        },
    };
    let cidrs = allocated
        .ips
        .iter()
        .map(ResultIp::cidr)
        .collect::<Result<Vec<_>, _>>()?;
    let addresses = link::pod_addresses(&cidrs);
    let name = port_name(&env.container_id, &env.ifname);
    let mtu = conf.mtu.unwrap_or(1500);
    let mut client = connect(conf)?;
    let (interfaces, pod_index) = match conf.interface {
        Interface::Veth => {
            let host = host_veth_name(&env.container_id, &env.ifname);
            let veth = link::add_veth(
                &host,
                &PodSide {
                    netns: netns.to_path_buf(),
                    ifname: env.ifname.clone(),
                    addresses: addresses.clone(),
                    mtu,
                    routing: routing.clone(),
                },
            )?;
            let added = add_veth_port(
                &mut client,
                conf,
                env,
                &name,
                &host,
                &veth.pod_mac,
                &addresses,
                mtu,
            );
            let info = match added {
                Ok(info) => info,
                Err(e) => {
                    let _ = link::del_veth(&host);
                    return Err(e);
                }
            };
            // The gateway's MAC is the port's, for good: a static ARP entry, as the
            // AWS VPC CNI sets pods up (no ARP before the first packet).
            if addresses.iter().any(IpAddr::is_ipv4) {
                let gateway = link::StaticNeighbour {
                    netns: netns.to_path_buf(),
                    ifname: env.ifname.clone(),
                    ip: IpAddr::V4(GATEWAY_V4),
                    mac: info.mac.clone(),
                };
                if let Err(e) = link::add_static_neighbour(&gateway) {
                    let _ = detach(env, conf, &env.ifname);
                    return Err(e);
                }
            }
            (
                vec![
                    ResultInterface {
                        name: host,
                        mac: info.mac,
                        sandbox: String::new(),
                        socket_path: String::new(),
                    },
                    ResultInterface {
                        name: env.ifname.clone(),
                        mac: veth.pod_mac,
                        sandbox: netns.display().to_string(),
                        socket_path: String::new(),
                    },
                ],
                1,
            )
        }
        Interface::VhostUser => {
            let socket = conf.vhost_dir.join(format!("{name}.sock"));
            let mac = vhost_pod_mac(&env.container_id, &env.ifname);
            let request = PortAdd {
                name: name.clone(),
                vhost_user: Some(socket.display().to_string()),
                role: Some(PortRole::Pod),
                network: Some(conf.network.clone()),
                ips: addresses.iter().map(IpAddr::to_string).collect(),
                mac: Some(mac.clone()),
                pod: env.pod(),
                mtu: Some(mtu),
                ..PortAdd::default()
            };
            call_port_add(&mut client, &request)?;
            (
                vec![ResultInterface {
                    name: env.ifname.clone(),
                    mac,
                    sandbox: netns.display().to_string(),
                    socket_path: socket.display().to_string(),
                }],
                0,
            )
        }
    };
    let mut ips = Vec::new();
    let mut routes = Vec::new();
    for cidr in &cidrs {
        let (gateway, default) = match cidr.address() {
            IpAddr::V4(_) => (IpAddr::V4(GATEWAY_V4), "0.0.0.0/0"),
            IpAddr::V6(_) => (IpAddr::V6(GATEWAY_V6), "::/0"),
        };
        let host_len = if cidr.address().is_ipv4() { 32 } else { 128 };
        ips.push(ResultIp {
            version: None,
            address: format!("{}/{host_len}", cidr.address()),
            gateway: Some(gateway.to_string()),
            interface: Some(pod_index),
        });
        if lookup.primary.is_some() {
            continue;
        }
        let route = ResultRoute {
            dst: default.to_string(),
            gw: Some(gateway.to_string()),
        };
        if !routes.contains(&route) {
            routes.push(route);
        }
    }
    if lookup.primary.is_some() {
        for r in &routing.routes {
            let gw = match r.address() {
                IpAddr::V4(_) => IpAddr::V4(GATEWAY_V4),
                IpAddr::V6(_) => IpAddr::V6(GATEWAY_V6),
            };
            routes.push(ResultRoute {
                dst: r.to_string(),
                gw: Some(gw.to_string()),
            });
        }
    }
    Ok(CniResult {
        cni_version: conf.cni_version.clone(),
        interfaces,
        ips,
        routes,
        dns: allocated.dns.clone(),
    }
    .for_version(&conf.cni_version))
}

#[allow(clippy::too_many_arguments)]
fn add_veth_port(
    client: &mut Client,
    conf: &NetConf,
    env: &CallEnv,
    name: &str,
    host: &str,
    pod_mac: &str,
    addresses: &[IpAddr],
    mtu: u16,
) -> Result<PortInfo, CniError> {
    let request = |device: PortDevice| PortAdd {
        name: name.to_string(),
        device: Some(device),
        role: Some(PortRole::Pod),
        network: Some(conf.network.clone()),
        ips: addresses.iter().map(IpAddr::to_string).collect(),
        mac: Some(pod_mac.to_string()),
        pod: env.pod(),
        mtu: Some(mtu),
        ..PortAdd::default()
    };
    let af_xdp = PortDevice::AfXdp {
        iface: host.to_string(),
        start_queue: None,
    };
    let af_packet = PortDevice::AfPacket {
        iface: host.to_string(),
    };
    match conf.veth_driver {
        VethDriver::AfXdp => call_port_add(client, &request(af_xdp)),
        VethDriver::AfPacket => call_port_add(client, &request(af_packet)),
        VethDriver::Auto => match call_port_add(client, &request(af_xdp)) {
            Ok(info) => Ok(info),
            // The device did not start (no AF_XDP for this kernel or driver).
            Err(e) if e.code == code::FERRULED && e.details.contains("did not start") => {
                call_port_add(client, &request(af_packet))
            }
            Err(e) => Err(e),
        },
    }
}

fn call_port_add(client: &mut Client, request: &PortAdd) -> Result<PortInfo, CniError> {
    let params = serde_json::to_value(request)
        .map_err(|e| CniError::new(code::FERRULED, "cannot encode port.add", e.to_string()))?;
    client
        .call_typed(port_method::ADD, params)
        .map_err(|e| ferruled_err(&format!("ferruled refused port {}", request.name), e))
}

/// DEL: removes the port, the veth and the addresses; each gone already is fine.
pub fn del(env: &CallEnv, conf: &NetConf, raw_conf: &[u8]) -> Result<(), CniError> {
    // The primary network's interface, if the ADD made one (its address goes back to
    // the network's IPAM with the port), then the default network's.
    detach(env, conf, UDN_IFNAME)?;
    detach(env, conf, &env.ifname)?;
    if let Some(ipam) = Ipam::from_conf(conf, env)? {
        ipam.del(env, raw_conf)?;
    }
    Ok(())
}

/// CHECK: the port is attached for this pod, the container's interface has its
/// addresses and routes, and IPAM still holds them.
pub fn check(env: &CallEnv, conf: &NetConf, raw_conf: &[u8]) -> Result<(), CniError> {
    let prev = conf
        .prev_result
        .as_ref()
        .ok_or_else(|| CniError::new(code::INVALID_NETWORK_CONFIG, "CHECK needs prevResult", ""))?;
    let prev = CniResult::parse(prev)?;
    let name = port_name(&env.container_id, &env.ifname);
    let mut client = connect(conf)?;
    let list: PortsList = client
        .call_typed(method::PORTS_LIST, Value::Null)
        .map_err(|e| ferruled_err("cannot list ports", e))?;
    let fail = |what: String| CniError::new(code::CHECK_FAILED, what, "");
    let port = list
        .ports
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| fail(format!("ferruled has no port {name}")))?;
    if port.pod != env.pod() {
        return Err(fail(format!(
            "port {name} records pod {:?}, not {:?}",
            port.pod,
            env.pod()
        )));
    }
    // The default network's interface's addresses (the primary network's interface,
    // if any, is checked against ferruled's port below).
    let udn_if = prev.interfaces.iter().position(|i| i.name == UDN_IFNAME);
    let addresses: Vec<IpAddr> = prev
        .ips
        .iter()
        .filter(|ip| udn_if.is_none() || ip.interface != udn_if)
        .map(|ip| ip.cidr().map(|c| c.address()))
        .collect::<Result<_, _>>()?;
    if conf.interface == Interface::Veth {
        let host = host_veth_name(&env.container_id, &env.ifname);
        if !link::host_veth_exists(&host)? {
            return Err(fail(format!("the node end {host} of the veth is gone")));
        }
        let netns = env
            .netns
            .clone()
            .ok_or_else(|| CniError::new(code::INVALID_ENVIRONMENT, "CNI_NETNS is not set", ""))?;
        let primary = match env.pod() {
            Some(pod) => primary_network(conf, &pod)?.primary,
            None => None,
        };
        let default_route = primary.is_none();
        link::check_pod(&PodSide {
            netns: netns.clone(),
            ifname: env.ifname.clone(),
            addresses: addresses.clone(),
            mtu: conf.mtu.unwrap_or(1500),
            routing: PodRouting {
                default_route,
                ..PodRouting::default()
            },
        })?;
        if let Some(primary) = primary {
            let name = port_name(&env.container_id, UDN_IFNAME);
            let udn =
                list.ports.iter().find(|p| p.name == name).ok_or_else(|| {
                    fail(format!("ferruled has no port {name} on {}", primary.name))
                })?;
            link::check_pod(&PodSide {
                netns,
                ifname: UDN_IFNAME.to_string(),
                addresses: udn.ips.iter().filter_map(|a| a.parse().ok()).collect(),
                mtu: primary.mtu,
                routing: PodRouting {
                    gateway_v4: primary
                        .gateways
                        .iter()
                        .find_map(|g| match g.parse() {
                            Ok(IpAddr::V4(a)) => Some(a),
                            _ => None,
                        })
                        .unwrap_or(GATEWAY_V4),
                    ..PodRouting::default()
                },
            })?;
        }
    }
    if let Some(ipam) = Ipam::from_conf(conf, env)? {
        ipam.check(env, raw_conf, &addresses)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_stable_and_short() {
        let id = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let p = port_name(id, "eth0");
        assert!(
            p.len() <= 29 && p.starts_with("9f86d081884c7d659a2f-"),
            "{p}"
        );
        assert_eq!(p, port_name(id, "eth0"));
        assert_ne!(p, port_name(id, "net1"));
        assert_eq!(port_name("!!", "eth0").len(), 10);
        let h = host_veth_name(id, "eth0");
        assert_eq!(h.len(), 14);
        assert_ne!(h, host_veth_name(id, "net1"));
        let mac = vhost_pod_mac(id, "eth0");
        assert!(mac.starts_with("02:") && mac.len() == 17, "{mac}");
    }
}
