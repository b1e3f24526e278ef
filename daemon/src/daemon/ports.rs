//! `port.add` / `port.del`: attach a pod (vhost-user, server or client mode) or any
//! other DPDK device at run time — validate, hot-plug and start the device, give its
//! receive queues to the least busy workers, add its routes, publish — and detach one
//! while traffic flows: out of the job and link tables first, wait until no worker can
//! still be using it, then stop and unplug it, returning every mbuf it held.

use super::devices::{self, Created, VhostMode};
use super::{start_port, to_value, Daemon, PortRuntime};
use crate::config::{
    format_mac, parse_allowed_address, parse_cidr, parse_mac, valid_pod_ref, IpCidr, PortConfig,
    MAX_ALLOWED_ADDRESSES,
};
use ferrule_api::rpc::{parse_params, RpcError};
use ferrule_api::{self as api, PortAdd, PortDel, PortInfo, PortRole};
use ferrule_dataplane::counters::MAX_PORTS;
use ferrule_dataplane::worker::RxJob;
use serde_json::Value;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How long `port.del` waits for the workers to move off a port.
const QUIESCE: Duration = Duration::from_secs(2);
/// Most queue pairs a pod port may have.
pub const MAX_QUEUES: u16 = 16;

fn bad(field: &str, detail: impl std::fmt::Display) -> RpcError {
    RpcError::invalid_params(field, detail)
}

/// Undoes what a failed add created: the socket DPDK may have bound in server mode, and
/// the directories and files made for it.
fn undo_device(created: Created, vhost: Option<&(PathBuf, VhostMode)>) {
    if let Some((path, VhostMode::Server)) = vhost {
        let _ = std::fs::remove_file(path);
    }
    created.undo();
}

/// Validates `port.add`'s `allowed_addresses`: pod ports only, at most
/// [`MAX_ALLOWED_ADDRESSES`] prefixes, each `ADDR/LEN` with the host bits clear or a
/// bare address. Errors name the entry (`allowed_addresses[i]`).
fn allowed_addresses(role: PortRole, list: &[String]) -> Result<Vec<IpCidr>, RpcError> {
    let field = "allowed_addresses";
    if list.is_empty() {
        return Ok(Vec::new());
    }
    if role != PortRole::Pod {
        return Err(bad(field, "only pod ports have allowed_addresses"));
    }
    if list.len() > MAX_ALLOWED_ADDRESSES {
        return Err(bad(
            field,
            format!("at most {MAX_ALLOWED_ADDRESSES} prefixes (aggregate them)"),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, text)| parse_allowed_address(text).map_err(|e| bad(&format!("{field}[{i}]"), e)))
        .collect()
}

/// A stable, locally administered MAC for a port added at run time, from its name.
fn port_mac(name: &str) -> [u8; 6] {
    let mut h: u32 = 0x811C_9DC5;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    let b = h.to_be_bytes();
    [0x02, 0xfe, b[0], b[1], b[2], b[3]]
}

impl Daemon {
    /// What `ports.list` shows of a port.
    pub(super) fn port_info(&self, index: usize, p: &PortRuntime) -> PortInfo {
        let link = p.eth.link();
        let state = self.state.fib.ports().get(index);
        let pod = p.cfg.role == PortRole::Pod;
        PortInfo {
            name: p.cfg.name.clone(),
            port_id: p.eth.id(),
            devargs: p.cfg.devargs.clone(),
            role: p.cfg.role,
            link: if link.up { "up" } else { "down" }.to_string(),
            speed_mbps: link.speed_mbps,
            // What Ferrule uses (a driver that cannot set its MAC keeps another).
            mac: state.map_or_else(|| format_mac(&p.eth.mac()), |s| s.mac.to_string()),
            mtu: p.eth.mtu(),
            rx_queues: p.cfg.rx_queues,
            xconnect: p.cfg.xconnect.clone(),
            pod: p.cfg.pod.clone(),
            network: p.cfg.network.clone(),
            ips: p.cfg.pod_ips.iter().map(ToString::to_string).collect(),
            locked: self.state.fib.is_locked(index as u16),
            gateway_ip: state
                .filter(|_| pod)
                .and_then(|s| s.local_v4.first())
                .map(|a| a.to_string()),
            gateway_mac: state.filter(|_| pod).map(|s| s.mac.to_string()),
            vhost_user: p.vhost.as_ref().map(|(path, _)| path.display().to_string()),
            vhost_mode: p.vhost.as_ref().map(|(_, m)| m.name().to_string()),
            allowed_addresses: p
                .cfg
                .allowed_addresses
                .iter()
                .map(ToString::to_string)
                .collect(),
            counters: self.port_counters(index),
        }
    }

    fn port_index(&self, name: &str) -> Option<usize> {
        self.ports
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.cfg.name == name))
    }

    /// Validates `port.add` params into a port configuration (and the vhost socket).
    fn port_config(&self, p: &PortAdd) -> Result<(PortConfig, devices::Prepared), RpcError> {
        let name = p.name.trim();
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad(
                "name",
                format!("{:?}: 1-64 letters, digits, '-', '_' or '.'", p.name),
            ));
        }
        if self.port_index(name).is_some() {
            return Err(bad("name", format!("a port named {name:?} exists")));
        }
        let network = p.network.clone().unwrap_or_else(|| "default".into());
        let Some(net_index) = self.state.fib.network_index(&network) else {
            return Err(bad("network", format!("no network named {network:?}")));
        };
        let role = p.role.unwrap_or(PortRole::Pod);
        let queues = p.queues.unwrap_or(1);
        if !(1..=MAX_QUEUES).contains(&queues) {
            return Err(bad(
                "queues",
                format!("{queues} is outside 1..={MAX_QUEUES}"),
            ));
        }
        let mtu = p
            .mtu
            .or_else(|| self.state.udn.mtu(net_index))
            .unwrap_or(1500);
        if !(68..=9600).contains(&mtu) {
            return Err(bad("mtu", format!("{mtu} is outside 68..=9600")));
        }
        let mac = match &p.mac {
            None => None,
            Some(m) => match parse_mac(m) {
                Some(mac) if mac[0] & 1 == 0 => Some(mac),
                Some(_) => return Err(bad("mac", format!("{m} is a multicast MAC"))),
                None => return Err(bad("mac", format!("{m:?} is not a MAC address"))),
            },
        };
        let (mut pod_ips, mut addresses) = (Vec::new(), Vec::new());
        for (i, text) in p.ips.iter().enumerate() {
            let field = format!("ips[{i}]");
            let cidr: IpCidr = if text.contains('/') {
                parse_cidr(text).map_err(|e| bad(&field, e))?
            } else {
                let addr: IpAddr = text
                    .parse()
                    .map_err(|_| bad(&field, format!("{text:?} is not an IP address")))?;
                IpCidr::host(addr)
            };
            let host = if cidr.address().is_ipv4() { 32 } else { 128 };
            if role == PortRole::Pod {
                if cidr.prefix_len() != host {
                    return Err(bad(
                        &field,
                        format!("{text}: a pod address is a host address (/{host})"),
                    ));
                }
                pod_ips.push(cidr.address());
            } else {
                if cidr.prefix_len() == host || cidr.network() == cidr.address() {
                    return Err(bad(
                        &field,
                        format!("{text}: an address on a subnet, e.g. 192.0.2.10/24"),
                    ));
                }
                addresses.push(cidr);
            }
        }
        if let Some(pod) = &p.pod {
            if !valid_pod_ref(pod) {
                return Err(bad("pod", format!("{pod:?} is not NAMESPACE/NAME")));
            }
        }
        let allowed_addresses = allowed_addresses(role, &p.allowed_addresses)?;
        let (port_mac_opt, pod_mac) = if role == PortRole::Pod {
            if mac.is_none() {
                return Err(bad(
                    "mac",
                    "a pod port needs the pod's MAC (frames to the pod are sent to it)",
                ));
            }
            (Some(port_mac(name)), mac)
        } else {
            (mac.or(Some(port_mac(name))), None)
        };
        // Last, once everything else holds: this may create directories.
        let in_use: Vec<&str> = self
            .ports
            .iter()
            .flatten()
            .map(|q| q.cfg.devargs.as_str())
            .collect();
        let device = devices::prepare(&self.devices, name, p, queues, &in_use)?;
        Ok((
            PortConfig {
                name: name.to_string(),
                devargs: device.devargs.clone(),
                role,
                mac: port_mac_opt,
                mtu,
                rx_queues: queues,
                xconnect: None,
                network,
                pod_ips,
                pod_mac,
                addresses,
                pod: p.pod.clone(),
                allowed_addresses,
            },
            device,
        ))
    }

    /// Tells the ACL code which ports exist now and the pods they record: attachments
    /// waiting for one of them take effect, attachments of a port gone wait again.
    fn sync_acl_ports(&mut self) {
        if let Some(tables) = self.state.acl.set_ports(self.state.fib.acl_ports()) {
            self.state.fib.set_acl(tables);
        }
        // Ports under DNS policy follow the pods they record.
        self.state.sync_fqdn();
    }

    /// Gives each receive queue of port `index` to the worker with the fewest queues.
    fn assign_queues(&self, index: usize, port_id: u16, queues: u16) {
        let mut jobs = self.state.shared.jobs();
        jobs.resize(self.state.workers.len().max(1), Vec::new());
        for queue in 0..queues {
            let w = (0..jobs.len())
                .min_by_key(|&w| (jobs[w].len(), w))
                .unwrap_or(0);
            jobs[w].push(RxJob {
                port: port_id,
                queue,
                index,
                out: None,
            });
        }
        self.state.shared.set_jobs(jobs);
    }

    pub(super) fn port_add(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: PortAdd = parse_params(params)?;
        let index = match self.ports.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.ports.len() < MAX_PORTS => self.ports.len(),
            None => {
                return Err(bad(
                    "name",
                    format!("{MAX_PORTS} ports are attached: delete one first"),
                ))
            }
        };
        let (mut cfg, device) = self.port_config(&p)?;
        let devices::Prepared { vhost, created, .. } = device;
        let network = self.state.fib.network_index(&cfg.network).unwrap_or(0);
        // A pod of a user-defined network gets its addresses from the network's IPAM
        // (or has the ones given recorded there): given back if the add fails.
        if cfg.role == PortRole::Pod {
            let owner = cfg.pod.clone().unwrap_or_else(|| cfg.name.clone());
            match self.state.udn.assign(network, &owner, &cfg.pod_ips) {
                Ok(ips) => cfg.pod_ips = ips,
                Err(e) => {
                    undo_device(created, vhost.as_ref());
                    return Err(bad(&e.field, e.message));
                }
            }
        }
        let release = |d: &mut Daemon, cfg: &PortConfig| {
            if cfg.role == PortRole::Pod {
                d.state.udn.release(network, &cfg.pod_ips);
            }
        };
        let eth = match start_port(
            &cfg,
            self.state.workers.len().max(1) as u16,
            &self.dataplane,
            &self.pool,
        ) {
            Ok(eth) => eth,
            Err(e) => {
                release(self, &cfg);
                undo_device(created, vhost.as_ref());
                let field = if vhost.is_some() {
                    "vhost_user"
                } else if p.device.is_some() {
                    "device"
                } else {
                    "devargs"
                };
                return Err(bad(
                    field,
                    format!("port {:?} did not start: {e}", cfg.name),
                ));
            }
        };
        let mac = cfg.mac.unwrap_or_else(|| eth.mac());
        if let Err(e) = self
            .state
            .fib
            .add_port(index as u16, &cfg, network, mac, eth.id())
        {
            let _ = eth.detach();
            release(self, &cfg);
            undo_device(created, vhost.as_ref());
            return Err(bad(e.field, e.message));
        }
        let locked = cfg.role == PortRole::Pod && self.state.udn.locks(network, cfg.pod.as_deref());
        self.state.fib.set_locked(index as u16, locked);
        // Kept: the port owns what was created for it from now on.
        created.keep();
        let link = eth.link();
        self.state.shared.set_dpdk_id(index, eth.id());
        self.state
            .shared
            .set_tx_queues(index, eth.tx_queues(), self.state.workers.len().max(1));
        self.state.shared.set_link(index, link.up);
        let runtime = PortRuntime {
            cfg: cfg.clone(),
            link_up: link.up,
            baseline: self.state.port_totals(index),
            vhost,
            eth,
        };
        let port_id = runtime.eth.id();
        if index == self.ports.len() {
            self.ports.push(Some(runtime));
        } else {
            self.ports[index] = Some(runtime);
        }
        // The port's ACL tables (attachments waiting for it) are in force before a
        // worker polls it: its first packet is filtered; a switched network's segment
        // has it before its first frame.
        self.sync_acl_ports();
        self.state.sync_segments();
        self.state.publish();
        self.assign_queues(index, port_id, cfg.rx_queues);
        tracing::info!(port = %cfg.name, index, devargs = %cfg.devargs, pod = ?cfg.pod, "port added");
        let Some(p) = self.ports[index].as_ref() else {
            return Err(RpcError::internal("the port vanished"));
        };
        to_value(self.port_info(index, p))
    }

    pub(super) fn port_del(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: PortDel = parse_params(params)?;
        let index = self
            .port_index(&p.name)
            .ok_or_else(|| bad("name", format!("no port named {:?}", p.name)))?;
        if self
            .state
            .fib
            .ports()
            .iter()
            .any(|s| s.xconnect == Some(index as u16))
        {
            return Err(bad(
                "name",
                format!("port {:?} is another port's cross-connect", p.name),
            ));
        }
        if let Some(eni) = self.state.fib.eni_port(index as u16) {
            return Err(bad(
                "name",
                format!(
                    "port {:?} is ENI {}'s interface: send vpc.sync without it first",
                    p.name, eni.spec.id
                ),
            ));
        }
        // 1. Out of the workers' hands: no queue polled, nothing sent to it, no route.
        let mut jobs = self.state.shared.jobs();
        for w in &mut jobs {
            w.retain(|j| j.index != index);
        }
        self.state.shared.set_jobs(jobs);
        self.state.shared.set_link(index, false);
        // The names its pod looked up expire now (kept while a connection uses them).
        let endpoint = self
            .state
            .acl
            .ports()
            .get(index)
            .map(|p| p.pod.clone().unwrap_or_else(|| format!("port/{}", p.name)));
        if let Some(endpoint) = endpoint {
            self.state.fqdn.endpoint_removed(&endpoint);
        }
        self.state.fib.remove_port(index as u16);
        // Its attachments wait for the port (or the pod) to come back.
        self.sync_acl_ports();
        self.state.sync_segments();
        self.state.publish();
        // 2. Packets the control thread holds for it are dropped.
        let held = self.state.resolver.forget_port(index as u16);
        drop(held);
        // 3. Once no worker can be in a round that still uses it, unplug it.
        if !self.state.shared.wait_quiescent(QUIESCE) {
            tracing::warn!(port = %p.name, "workers did not move on within 2 s; unplugging anyway");
        }
        self.state.free_retired();
        let Some(runtime) = self.ports[index].take() else {
            return Err(RpcError::internal("the port vanished"));
        };
        let name = runtime.cfg.name.clone();
        if runtime.cfg.role == PortRole::Pod {
            if let Some(net) = self.state.fib.network_index(&runtime.cfg.network) {
                self.state.udn.release(net, &runtime.cfg.pod_ips);
            }
        }
        if let Err(e) = runtime.eth.detach() {
            tracing::warn!(port = %name, error = %e, "unplugging the device");
        }
        if let Some((path, VhostMode::Server)) = &runtime.vhost {
            let _ = std::fs::remove_file(path);
        }
        tracing::info!(port = %name, index, "port deleted");
        to_value(api::PortDeleted {
            name,
            mbufs_in_use: self.pool.in_use(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_macs_are_stable_and_local() {
        let m = port_mac("pod-c");
        assert_eq!(m[..2], [0x02, 0xfe]);
        assert_eq!(m, port_mac("pod-c"));
        assert_ne!(m, port_mac("pod-d"));
    }

    #[test]
    fn allowed_addresses_are_checked() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = allowed_addresses(PortRole::Pod, &list(&["10.9.0.0/16", "fd00:9::1"])).unwrap();
        let shown: Vec<String> = ok.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["10.9.0.0/16", "fd00:9::1/128"]);
        assert!(allowed_addresses(PortRole::Uplink, &[]).unwrap().is_empty());
        let e =
            allowed_addresses(PortRole::Pod, &list(&["10.9.0.0/16", "10.9.0.1/16"])).unwrap_err();
        assert!(e.message.contains("host bits"), "{e:?}");
        assert_eq!(
            e.data.as_ref().and_then(|d| d["field"].as_str()),
            Some("allowed_addresses[1]")
        );
        let e = allowed_addresses(PortRole::Pod, &list(&["nope"])).unwrap_err();
        assert!(e.message.contains("not an IP address"), "{e:?}");
        let e = allowed_addresses(PortRole::Host, &list(&["10.0.0.0/8"])).unwrap_err();
        assert!(e.message.contains("only pod ports"), "{e:?}");
        let many: Vec<String> = (0..=MAX_ALLOWED_ADDRESSES)
            .map(|n| format!("10.9.{n}.0/24"))
            .collect();
        let e = allowed_addresses(PortRole::Pod, &many).unwrap_err();
        assert!(e.message.contains("at most"), "{e:?}");
    }
}
