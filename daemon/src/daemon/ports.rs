//! `port.add` / `port.del`: attach a pod (vhost-user, server or client mode) or any
//! other DPDK device at run time — validate, hot-plug and start the device, give its
//! receive queues to the least busy workers, add its routes, publish — and detach one
//! while traffic flows: out of the job and link tables first, wait until no worker can
//! still be using it, then stop and unplug it, returning every mbuf it held.

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
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long `port.del` waits for the workers to move off a port.
const QUIESCE: Duration = Duration::from_secs(2);
/// Most queue pairs a pod port may have.
pub const MAX_QUEUES: u16 = 16;

/// Who creates a vhost-user socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VhostMode {
    /// Ferrule creates the socket; the pod connects.
    Server,
    /// The pod serves the socket; Ferrule connects, and reconnects when either side
    /// restarts.
    Client,
}

impl VhostMode {
    pub fn name(self) -> &'static str {
        match self {
            VhostMode::Server => "server",
            VhostMode::Client => "client",
        }
    }
}

fn bad(field: &str, detail: impl std::fmt::Display) -> RpcError {
    RpcError::invalid_params(field, detail)
}

/// The devargs of a vhost-user port: the vhost PMD with `queues` queue pairs.
pub fn vhost_devargs(vdev: &str, socket: &Path, mode: VhostMode, queues: u16) -> String {
    format!(
        "{vdev},iface={},queues={queues},client={}",
        socket.display(),
        u8::from(mode == VhostMode::Client)
    )
}

/// Checks a vhost-user socket path and prepares its directory: an absolute path; in
/// server mode, the directory is created (mode 0700) when missing, and a stale socket
/// no one listens on is removed; a path that exists and is not a socket is refused.
fn prepare_socket(path: &Path, mode: VhostMode) -> Result<(), RpcError> {
    let field = "vhost_user";
    if !path.is_absolute() {
        return Err(bad(
            field,
            format!("{} is not an absolute path", path.display()),
        ));
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(bad(
                field,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Ok(_) if mode == VhostMode::Server => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(bad(
                    field,
                    format!("{} is in use: something listens on it", path.display()),
                ));
            }
            std::fs::remove_file(path).map_err(|e| {
                bad(
                    field,
                    format!("cannot remove the stale socket {}: {e}", path.display()),
                )
            })?;
        }
        _ => {}
    }
    if mode == VhostMode::Server {
        if let Some(dir) = path.parent().filter(|d| !d.exists()) {
            std::fs::create_dir_all(dir)
                .and_then(|()| {
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                })
                .map_err(|e| bad(field, format!("cannot create {}: {e}", dir.display())))?;
        }
    }
    Ok(())
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
    fn port_config(
        &self,
        p: &PortAdd,
    ) -> Result<(PortConfig, Option<(PathBuf, VhostMode)>), RpcError> {
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
        if self.state.fib.network_index(&network).is_none() {
            return Err(bad("network", format!("no network named {network:?}")));
        }
        let role = p.role.unwrap_or(PortRole::Pod);
        let queues = p.queues.unwrap_or(1);
        if !(1..=MAX_QUEUES).contains(&queues) {
            return Err(bad(
                "queues",
                format!("{queues} is outside 1..={MAX_QUEUES}"),
            ));
        }
        let mtu = p.mtu.unwrap_or(1500);
        if !(68..=9600).contains(&mtu) {
            return Err(bad("mtu", format!("{mtu} is outside 68..=9600")));
        }
        let (devargs, vhost) = match (&p.vhost_user, &p.devargs) {
            (Some(path), None) => {
                let mode = match p.mode.as_deref() {
                    None | Some("server") => VhostMode::Server,
                    Some("client") => VhostMode::Client,
                    Some(other) => return Err(bad("mode", format!("{other:?}: server or client"))),
                };
                let path = PathBuf::from(path);
                prepare_socket(&path, mode)?;
                let vdev = format!("net_vhost_{name}");
                (
                    vhost_devargs(&vdev, &path, mode, queues),
                    Some((path, mode)),
                )
            }
            (None, Some(devargs)) => {
                if p.mode.is_some() {
                    return Err(bad("mode", "only vhost-user ports have a mode"));
                }
                let dev = devargs.split(',').next().unwrap_or("").trim();
                if dev.is_empty() {
                    return Err(bad("devargs", "empty devargs"));
                }
                if self
                    .ports
                    .iter()
                    .flatten()
                    .any(|q| q.cfg.devargs.split(',').next() == Some(dev))
                {
                    return Err(bad(
                        "devargs",
                        format!("device {dev:?} is in use by another port"),
                    ));
                }
                (devargs.clone(), None)
            }
            (Some(_), Some(_)) => {
                return Err(bad(
                    "devargs",
                    "give either vhost_user or devargs, not both",
                ))
            }
            (None, None) => return Err(bad("vhost_user", "give vhost_user or devargs")),
        };
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
        Ok((
            PortConfig {
                name: name.to_string(),
                devargs,
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
            vhost,
        ))
    }

    /// Tells the ACL code which port names exist now (attachments name them).
    fn sync_acl_ports(&mut self) {
        let ports = self
            .state
            .fib
            .ports()
            .iter()
            .map(|p| (p.name.clone(), p.role))
            .collect();
        self.state.acl.set_ports(ports);
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
        let (cfg, vhost) = self.port_config(&p)?;
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
        let network = self.state.fib.network_index(&cfg.network).unwrap_or(0);
        let eth = start_port(
            &cfg,
            self.state.workers.len().max(1) as u16,
            &self.dataplane,
            &self.pool,
        )
        .map_err(|e| {
            bad(
                if vhost.is_some() {
                    "vhost_user"
                } else {
                    "devargs"
                },
                format!("port {:?} did not start: {e}", cfg.name),
            )
        })?;
        let mac = cfg.mac.unwrap_or_else(|| eth.mac());
        if let Err(e) = self
            .state
            .fib
            .add_port(index as u16, &cfg, network, mac, eth.id())
        {
            // Dropping `eth` stops and closes it again.
            let _ = eth.detach();
            return Err(bad(e.field, e.message));
        }
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
        self.sync_acl_ports();
        self.assign_queues(index, port_id, cfg.rx_queues);
        self.state.publish();
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
        if self.state.acl.current().ingress[index].is_some()
            || self.state.acl.current().egress[index].is_some()
        {
            return Err(bad(
                "name",
                format!(
                    "port {:?} has ACL tables attached: apply an ACL state without them first",
                    p.name
                ),
            ));
        }
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
        // 1. Out of the workers' hands: no queue polled, nothing sent to it, no route.
        let mut jobs = self.state.shared.jobs();
        for w in &mut jobs {
            w.retain(|j| j.index != index);
        }
        self.state.shared.set_jobs(jobs);
        self.state.shared.set_link(index, false);
        self.state.fib.remove_port(index as u16);
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
        if let Err(e) = runtime.eth.detach() {
            tracing::warn!(port = %name, error = %e, "unplugging the device");
        }
        if let Some((path, VhostMode::Server)) = &runtime.vhost {
            let _ = std::fs::remove_file(path);
        }
        self.sync_acl_ports();
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
    fn vhost_devargs_and_macs() {
        assert_eq!(
            vhost_devargs(
                "net_vhost_pod-c",
                Path::new("/run/ferrule/pod-c.sock"),
                VhostMode::Client,
                2
            ),
            "net_vhost_pod-c,iface=/run/ferrule/pod-c.sock,queues=2,client=1"
        );
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

    #[test]
    fn socket_paths_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-socket");
        std::fs::write(&file, b"x").unwrap();
        let e = prepare_socket(&file, VhostMode::Server).unwrap_err();
        assert!(e.message.contains("exists and is not a socket"), "{e:?}");
        assert!(prepare_socket(Path::new("relative.sock"), VhostMode::Server).is_err());
        let nested = dir.path().join("sub/dir/pod.sock");
        prepare_socket(&nested, VhostMode::Server).unwrap();
        let mode = std::fs::metadata(nested.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        // A stale socket (nobody listening) is cleared; a live one is refused.
        let live = dir.path().join("live.sock");
        let listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
        assert!(prepare_socket(&live, VhostMode::Server)
            .unwrap_err()
            .message
            .contains("in use"));
        drop(listener);
        prepare_socket(&live, VhostMode::Server).unwrap();
        assert!(!live.exists());
    }
}
