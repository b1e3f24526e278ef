//! ADD, DEL and CHECK: IPAM delegated, the pod's interface set up (a veth pair, or a
//! vhost-user socket), and the node end attached to `ferruled` as a pod port that
//! records the pod as `namespace/name`.

use crate::ipam;
use crate::link::{self, PodRouting, PodSide, GATEWAY_V4, GATEWAY_V6};
use crate::spec::{
    code, CallEnv, CniError, CniResult, Interface, NetConf, ResultInterface, ResultIp, ResultRoute,
    VethDriver,
};
use ferrule_api::client::{Client, ClientError};
use ferrule_api::rpc::INVALID_PARAMS;
use ferrule_api::{
    method, port_method, PortAdd, PortDel, PortDevice, PortInfo, PortRole, PortsList,
};
use serde_json::Value;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

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

/// IPAM's plugin, when the configuration names one.
fn ipam_plugin(conf: &NetConf, env: &CallEnv) -> Result<Option<PathBuf>, CniError> {
    conf.ipam_type()?
        .map(|t| ipam::find_plugin(&t, &env.path))
        .transpose()
}

/// ADD: returns the result to print.
pub fn add(env: &CallEnv, conf: &NetConf, raw_conf: &[u8]) -> Result<CniResult, CniError> {
    let Some(plugin) = ipam_plugin(conf, env)? else {
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
    let allocated = ipam::add(&plugin, env, raw_conf)?;
    let outcome = attach(env, conf, &netns, &allocated);
    if outcome.is_err() {
        // Give the addresses back: the container gets no network from this call.
        let _ = ipam::del(&plugin, env, raw_conf);
    }
    outcome
}

fn attach(
    env: &CallEnv,
    conf: &NetConf,
    netns: &std::path::Path,
    allocated: &CniResult,
) -> Result<CniResult, CniError> {
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
                    routing: PodRouting::default(),
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
        let route = ResultRoute {
            dst: default.to_string(),
            gw: Some(gateway.to_string()),
        };
        if !routes.contains(&route) {
            routes.push(route);
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
    let name = port_name(&env.container_id, &env.ifname);
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
        link::del_veth(&host_veth_name(&env.container_id, &env.ifname))?;
    }
    if let Some(plugin) = ipam_plugin(conf, env)? {
        ipam::del(&plugin, env, raw_conf)?;
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
    let addresses: Vec<IpAddr> = prev
        .ips
        .iter()
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
        link::check_pod(&PodSide {
            netns,
            ifname: env.ifname.clone(),
            addresses,
            mtu: conf.mtu.unwrap_or(1500),
            routing: PodRouting::default(),
        })?;
    }
    if let Some(plugin) = ipam_plugin(conf, env)? {
        ipam::check(&plugin, env, raw_conf)?;
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
