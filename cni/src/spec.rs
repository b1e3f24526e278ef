//! The CNI protocol as the specification (1.0.0, and 0.3.x/0.4.0 configurations) defines
//! it: the environment of a call, the network configuration Ferrule reads, the result
//! and the error object, written for the version the configuration asked for.

use ferrule_dataplane::wire::{IpCidr, Ipv4Cidr, Ipv6Cidr};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;

/// Versions whose configurations Ferrule accepts and whose results it writes.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"];

/// Well-known error codes of the specification.
pub mod code {
    /// Incompatible CNI version.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Unsupported field in the network configuration.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// The container is unknown or does not exist.
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// Invalid environment variables.
    pub const INVALID_ENVIRONMENT: u32 = 4;
    /// I/O failure.
    pub const IO_FAILURE: u32 = 5;
    /// Failed to decode content.
    pub const DECODE_FAILURE: u32 = 6;
    /// Invalid network configuration.
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    /// Try again later.
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// Ferrule's own: `ferruled` refused or could not be reached.
    pub const FERRULED: u32 = 100;
    /// Ferrule's own: the kernel refused a link, address or route change.
    pub const NETLINK: u32 = 101;
    /// Ferrule's own: the delegated IPAM plugin failed.
    pub const IPAM: u32 = 102;
    /// Ferrule's own: CHECK found the container's network not as ADD left it.
    pub const CHECK_FAILED: u32 = 103;
}

/// A CNI error object: printed on stdout, with exit status 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{msg}{}", if details.is_empty() { String::new() } else { format!(": {details}") })]
pub struct CniError {
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    pub code: u32,
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> Self {
        CniError {
            cni_version: "1.0.0".into(),
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// The same error, reported in the configuration's version.
    pub fn in_version(mut self, version: &str) -> Self {
        self.cni_version = version.to_string();
        self
    }
}

/// The operation, from `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
}

/// The environment of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallEnv {
    pub command: Command,
    pub container_id: String,
    /// The network namespace path; may be empty for DEL.
    pub netns: Option<PathBuf>,
    pub ifname: String,
    /// `CNI_ARGS` as key/value pairs (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, …).
    pub args: HashMap<String, String>,
    /// `CNI_PATH`: where plugins (the IPAM plugin) are looked up.
    pub path: Vec<PathBuf>,
}

impl CallEnv {
    /// Reads the environment through `get` (`std::env::var` in the binary).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<CallEnv, CniError> {
        let missing = |name: &str| {
            CniError::new(
                code::INVALID_ENVIRONMENT,
                format!("{name} is not set"),
                "the container runtime sets it for every call",
            )
        };
        let command = match get("CNI_COMMAND").as_deref() {
            Some("ADD") => Command::Add,
            Some("DEL") => Command::Del,
            Some("CHECK") => Command::Check,
            Some("VERSION") => Command::Version,
            Some(other) => {
                return Err(CniError::new(
                    code::INVALID_ENVIRONMENT,
                    format!("unknown CNI_COMMAND {other:?}"),
                    "ADD, DEL, CHECK or VERSION",
                ))
            }
            None => return Err(missing("CNI_COMMAND")),
        };
        if command == Command::Version {
            return Ok(CallEnv {
                command,
                container_id: String::new(),
                netns: None,
                ifname: String::new(),
                args: HashMap::new(),
                path: Vec::new(),
            });
        }
        let container_id = get("CNI_CONTAINERID")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| missing("CNI_CONTAINERID"))?;
        let netns = get("CNI_NETNS")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        if netns.is_none() && command != Command::Del {
            return Err(missing("CNI_NETNS"));
        }
        let ifname = get("CNI_IFNAME")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| missing("CNI_IFNAME"))?;
        if ifname.len() > 15 || ifname.contains(['/', ' ', ':']) || ifname == "." || ifname == ".."
        {
            return Err(CniError::new(
                code::INVALID_ENVIRONMENT,
                format!("CNI_IFNAME {ifname:?} is not an interface name"),
                "1-15 characters, no '/', ':' or spaces",
            ));
        }
        let args = get("CNI_ARGS")
            .unwrap_or_default()
            .split(';')
            .filter(|kv| !kv.is_empty())
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let path = get("CNI_PATH")
            .unwrap_or_default()
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
        Ok(CallEnv {
            command,
            container_id,
            netns,
            ifname,
            args,
            path,
        })
    }

    /// `namespace/name` of the Kubernetes pod, when the runtime says.
    pub fn pod(&self) -> Option<String> {
        let ns = self.args.get("K8S_POD_NAMESPACE")?;
        let name = self.args.get("K8S_POD_NAME")?;
        (!ns.is_empty() && !name.is_empty()).then(|| format!("{ns}/{name}"))
    }
}

/// How the pod's interface reaches Ferrule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interface {
    /// A veth pair; the node end is a Ferrule port (AF_XDP or AF_PACKET).
    #[default]
    Veth,
    /// A vhost-user socket Ferrule creates, for a DPDK application in the pod.
    VhostUser,
}

/// How the node end of a veth is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VethDriver {
    /// AF_XDP where the daemon can open it, else AF_PACKET.
    #[default]
    Auto,
    AfXdp,
    AfPacket,
}

/// The network configuration Ferrule's plugin reads from stdin.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NetConf {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    pub name: String,
    #[serde(rename = "type")]
    pub plugin_type: String,
    /// `ferruled`'s control socket.
    #[serde(default = "default_socket")]
    pub socket: PathBuf,
    /// The Ferrule network (VRF) the pod joins.
    #[serde(default = "default_network")]
    pub network: String,
    #[serde(default)]
    pub interface: Interface,
    #[serde(default)]
    pub veth_driver: VethDriver,
    /// Pod interface MTU; default 1500.
    #[serde(default)]
    pub mtu: Option<u16>,
    /// Where `ferruled` creates vhost-user sockets (one of its `[control] vhost_dirs`).
    #[serde(default = "default_vhost_dir")]
    pub vhost_dir: PathBuf,
    /// The IPAM plugin's configuration; `type` names the plugin.
    #[serde(default)]
    pub ipam: Option<Value>,
    /// Set by the runtime for CHECK and DEL (and by chained plugins).
    #[serde(rename = "prevResult", default)]
    pub prev_result: Option<Value>,
    /// The runtime's extra arguments (`args.cni`), kept for IPAM plugins.
    #[serde(default)]
    pub args: Option<Value>,
}

fn default_socket() -> PathBuf {
    PathBuf::from(ferrule_api::DEFAULT_SOCKET)
}

fn default_network() -> String {
    "default".into()
}

fn default_vhost_dir() -> PathBuf {
    PathBuf::from("/run/ferrule/vhost")
}

impl NetConf {
    /// Parses and checks the configuration.
    pub fn parse(bytes: &[u8]) -> Result<NetConf, CniError> {
        let conf: NetConf = serde_json::from_slice(bytes).map_err(|e| {
            CniError::new(
                code::DECODE_FAILURE,
                "cannot decode the network configuration",
                e.to_string(),
            )
        })?;
        if !SUPPORTED_VERSIONS.contains(&conf.cni_version.as_str()) {
            return Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!("cniVersion {:?} is not supported", conf.cni_version),
                format!("supported: {}", SUPPORTED_VERSIONS.join(", ")),
            ));
        }
        if conf.mtu.is_some_and(|m| !(68..=9600).contains(&m)) {
            return Err(CniError::new(
                code::INVALID_NETWORK_CONFIG,
                "mtu must be within 68..=9600",
                "",
            )
            .in_version(&conf.cni_version));
        }
        Ok(conf)
    }

    /// The IPAM plugin's name (`ipam.type`), when IPAM is configured.
    pub fn ipam_type(&self) -> Result<Option<String>, CniError> {
        let Some(ipam) = &self.ipam else {
            return Ok(None);
        };
        match ipam.get("type").and_then(Value::as_str) {
            Some(t) if valid_plugin_name(t) => Ok(Some(t.to_string())),
            Some(t) => Err(CniError::new(
                code::INVALID_NETWORK_CONFIG,
                format!("ipam.type {t:?} is not a plugin name"),
                "letters, digits, '-', '_' and '.'",
            )),
            None => Err(CniError::new(
                code::INVALID_NETWORK_CONFIG,
                "ipam has no type",
                "name the IPAM plugin, e.g. \"host-local\"",
            )),
        }
    }
}

/// A plugin name that is a file name in `CNI_PATH`, never a path.
pub fn valid_plugin_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// An interface in a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultInterface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    /// vhost-user: the socket the pod's DPDK application opens (1.0.0 `socketPath`).
    #[serde(
        rename = "socketPath",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub socket_path: String,
}

/// An address in a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultIp {
    /// `4` or `6` in 0.3.x/0.4.0 results; absent in 1.0.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

impl ResultIp {
    /// The address with its prefix length.
    pub fn cidr(&self) -> Result<IpCidr, CniError> {
        parse_cidr(&self.address).ok_or_else(|| {
            CniError::new(
                code::DECODE_FAILURE,
                format!("{:?} is not an address with a prefix length", self.address),
                "",
            )
        })
    }
}

/// A route in a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultRoute {
    pub dst: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<String>,
}

/// DNS settings in a result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    fn is_empty(&self) -> bool {
        self == &Dns::default()
    }
}

/// The result of ADD (and of an IPAM plugin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniResult {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<ResultInterface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<ResultIp>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<ResultRoute>,
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    pub dns: Dns,
}

impl CniResult {
    /// Parses a result of any supported version (an IPAM plugin's, or `prevResult`).
    pub fn parse(value: &Value) -> Result<CniResult, CniError> {
        serde_json::from_value(value.clone()).map_err(|e| {
            CniError::new(
                code::DECODE_FAILURE,
                "cannot decode a CNI result",
                e.to_string(),
            )
        })
    }

    /// The result as `version` writes it: 0.3.x and 0.4.0 carry each address's IP
    /// version, 1.0.0 does not.
    pub fn for_version(mut self, version: &str) -> CniResult {
        let legacy = version != "1.0.0";
        for ip in &mut self.ips {
            ip.version = if legacy {
                ip.cidr().ok().map(|c| match c {
                    IpCidr::V4(_) => "4".to_string(),
                    IpCidr::V6(_) => "6".to_string(),
                })
            } else {
                None
            };
        }
        self.cni_version = version.to_string();
        self
    }
}

/// Parses `ADDR/LEN` of either family (host bits kept: a pod's address).
pub fn parse_cidr(text: &str) -> Option<IpCidr> {
    if let Ok(c) = text.parse::<Ipv4Cidr>() {
        return Some(IpCidr::V4(c));
    }
    if let Ok(c) = text.parse::<Ipv6Cidr>() {
        return Some(IpCidr::V6(c));
    }
    None
}

/// Parses an address of either family.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(pairs: &[(&str, &str)]) -> Result<CallEnv, CniError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        CallEnv::from_env(|k| map.get(k).cloned())
    }

    #[test]
    fn the_environment_is_read_and_checked() {
        let e = env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "abc"),
            ("CNI_NETNS", "/var/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            (
                "CNI_ARGS",
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=web;K8S_POD_NAME=api-0;K8S_POD_INFRA_CONTAINER_ID=abc",
            ),
            ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
        ])
        .unwrap();
        assert_eq!(e.command, Command::Add);
        assert_eq!(e.pod().as_deref(), Some("web/api-0"));
        assert_eq!(e.path.len(), 2);
        let err = env(&[("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "abc")]).unwrap_err();
        assert_eq!(err.code, code::INVALID_ENVIRONMENT);
        assert!(err.msg.contains("CNI_NETNS"), "{err}");
        // DEL may come without a namespace (it is gone).
        env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "a"),
            ("CNI_IFNAME", "eth0"),
        ])
        .unwrap();
        let err = env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "a"),
            ("CNI_NETNS", "/x"),
            ("CNI_IFNAME", "../../etc"),
        ])
        .unwrap_err();
        assert!(err.msg.contains("CNI_IFNAME"), "{err}");
        assert_eq!(
            env(&[("CNI_COMMAND", "VERSION")]).unwrap().command,
            Command::Version
        );
        assert!(env(&[("CNI_COMMAND", "UPGRADE")]).is_err());
    }

    #[test]
    fn configurations_of_supported_versions_parse() {
        let conf = json!({
            "cniVersion": "0.4.0", "name": "pods", "type": "ferrule",
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}
        });
        let c = NetConf::parse(conf.to_string().as_bytes()).unwrap();
        assert_eq!(c.interface, Interface::Veth);
        assert_eq!(c.network, "default");
        assert_eq!(c.ipam_type().unwrap().as_deref(), Some("host-local"));
        let bad = json!({"cniVersion": "2.0.0", "name": "x", "type": "ferrule"});
        let e = NetConf::parse(bad.to_string().as_bytes()).unwrap_err();
        assert_eq!(e.code, code::INCOMPATIBLE_VERSION);
        let path = json!({"cniVersion": "1.0.0", "name": "x", "type": "ferrule",
            "ipam": {"type": "../../bin/sh"}});
        let c = NetConf::parse(path.to_string().as_bytes()).unwrap();
        assert_eq!(
            c.ipam_type().unwrap_err().code,
            code::INVALID_NETWORK_CONFIG
        );
        let vhost = json!({"cniVersion": "1.0.0", "name": "x", "type": "ferrule",
            "interface": "vhost-user", "mtu": 9000});
        let c = NetConf::parse(vhost.to_string().as_bytes()).unwrap();
        assert_eq!((c.interface, c.mtu), (Interface::VhostUser, Some(9000)));
        assert!(NetConf::parse(b"{").is_err());
    }

    #[test]
    fn results_are_written_for_the_configured_version() {
        let ipam = json!({
            "cniVersion": "0.4.0",
            "ips": [{"version": "4", "address": "10.1.0.5/24", "gateway": "10.1.0.1"},
                    {"version": "6", "address": "fd00::5/64"}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {}
        });
        let r = CniResult::parse(&ipam).unwrap();
        let v1 = serde_json::to_value(r.clone().for_version("1.0.0")).unwrap();
        assert_eq!(v1["cniVersion"], "1.0.0");
        assert!(v1["ips"][0].get("version").is_none());
        assert!(v1.get("dns").is_none());
        let v04 = serde_json::to_value(r.for_version("0.4.0")).unwrap();
        assert_eq!(v04["ips"][1]["version"], "6");
        let err = serde_json::to_value(CniError::new(7, "bad", "").in_version("0.4.0")).unwrap();
        assert_eq!(err, json!({"cniVersion": "0.4.0", "code": 7, "msg": "bad"}));
    }
}
