//! IPAM from `ferrule-ipamd` (`"ipam": {"type": "ferrule-ipamd"}`): the pod's address is
//! a secondary IP of one of the node's ENIs, asked for over ipamd's socket
//! (`ipam.add`, released into cooling by `ipam.del`) with the blocking JSON-RPC client —
//! no plugin executed. Methods: `docs/ipam.md`.

use crate::spec::{code, CallEnv, CniError, CniResult, ResultIp};
use ferrule_api::client::{Client, ClientError};
use ferrule_api::ipam::{
    ipam_method, IpamAdd, IpamAddress, IpamDel, IpamReleased, IpamState, DEFAULT_IPAM_SOCKET,
    NO_FREE_IP,
};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// The `ipam.type` that selects ferrule-ipamd.
pub const IPAM_TYPE: &str = "ferrule-ipamd";

/// How long one call to ferrule-ipamd may take (an empty pool answers at once; EC2
/// work happens in the background).
const TIMEOUT: Duration = Duration::from_secs(15);

/// ferrule-ipamd, as the network configuration names it: `ipam.socket` or the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipamd {
    pub socket: PathBuf,
}

impl Ipamd {
    /// From the configuration's `ipam` object.
    pub fn from_conf(ipam: &Value) -> Result<Ipamd, CniError> {
        let socket = match ipam.get("socket") {
            None => PathBuf::from(DEFAULT_IPAM_SOCKET),
            Some(Value::String(s)) if s.starts_with('/') => PathBuf::from(s),
            Some(other) => {
                return Err(CniError::new(
                    code::INVALID_NETWORK_CONFIG,
                    format!("ipam.socket {other} is not an absolute path"),
                    "the path of ferrule-ipamd's socket, e.g. /run/ferrule/ipamd.sock",
                ))
            }
        };
        Ok(Ipamd { socket })
    }

    fn connect(&self) -> Result<Client, CniError> {
        let err = |e: ClientError| {
            CniError::new(
                code::TRY_AGAIN_LATER,
                format!("cannot reach ferrule-ipamd at {}", self.socket.display()),
                e.to_string(),
            )
        };
        let mut client = Client::connect(&self.socket).map_err(err)?;
        client.set_read_timeout(Some(TIMEOUT)).map_err(err)?;
        Ok(client)
    }

    fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: impl serde::Serialize,
    ) -> Result<T, CniError> {
        let params = serde_json::to_value(params).map_err(|e| {
            CniError::new(code::IPAM, format!("cannot encode {method}"), e.to_string())
        })?;
        self.connect()?
            .call_typed(method, params)
            .map_err(|e| match e {
                // An empty pool: the kubelet retries the ADD.
                ClientError::Rpc(r) if r.code == NO_FREE_IP => CniError::new(
                    code::TRY_AGAIN_LATER,
                    "ferrule-ipamd has no free address",
                    r.message,
                ),
                ClientError::Rpc(r) => CniError::new(
                    code::IPAM,
                    format!("ferrule-ipamd refused {method}"),
                    r.message,
                ),
                e => CniError::new(
                    code::TRY_AGAIN_LATER,
                    format!("{method} to ferrule-ipamd failed"),
                    e.to_string(),
                ),
            })
    }

    /// The pod's address (`ipam.add`, idempotent for the same container and interface).
    pub fn add(&self, env: &CallEnv) -> Result<(IpamAddress, CniResult), CniError> {
        let (pod_namespace, pod_name) = env
            .pod()
            .and_then(|p| {
                p.split_once('/')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
            })
            .unwrap_or_default();
        let address: IpamAddress = self.call(
            ipam_method::ADD,
            IpamAdd {
                container_id: env.container_id.clone(),
                ifname: env.ifname.clone(),
                pod_namespace,
                pod_name,
            },
        )?;
        let ip: std::net::Ipv4Addr = address.ip.parse().map_err(|_| {
            CniError::new(
                code::IPAM,
                format!("ferrule-ipamd gave {:?}, not an IPv4 address", address.ip),
                "",
            )
        })?;
        let result = CniResult {
            cni_version: "1.0.0".into(),
            interfaces: Vec::new(),
            ips: vec![ResultIp {
                version: None,
                address: format!("{ip}/32"),
                gateway: None,
                interface: None,
            }],
            routes: Vec::new(),
            dns: Default::default(),
        };
        Ok((address, result))
    }

    /// Releases the pod's address into cooling (`ipam.del`; none held is fine).
    pub fn del(&self, env: &CallEnv) -> Result<Option<String>, CniError> {
        let released: IpamReleased = self.call(
            ipam_method::DEL,
            IpamDel {
                container_id: env.container_id.clone(),
                ifname: env.ifname.clone(),
            },
        )?;
        Ok(released.released)
    }

    /// Whether ferrule-ipamd still holds `ip` for this container's interface.
    pub fn check(&self, env: &CallEnv, ips: &[std::net::IpAddr]) -> Result<(), CniError> {
        let state: IpamState = self.call(ipam_method::SHOW, Value::Null)?;
        let held = state
            .allocations
            .iter()
            .find(|a| a.container_id == env.container_id && a.ifname == env.ifname);
        match held {
            Some(a) if ips.iter().any(|ip| ip.to_string() == a.ip) => Ok(()),
            Some(a) => Err(CniError::new(
                code::CHECK_FAILED,
                format!("ferrule-ipamd holds {} for this pod, not {ips:?}", a.ip),
                "",
            )),
            None => Err(CniError::new(
                code::CHECK_FAILED,
                "ferrule-ipamd holds no address for this pod",
                "",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_socket_comes_from_the_configuration() {
        assert_eq!(
            Ipamd::from_conf(&json!({"type": IPAM_TYPE}))
                .unwrap()
                .socket,
            PathBuf::from(DEFAULT_IPAM_SOCKET)
        );
        assert_eq!(
            Ipamd::from_conf(&json!({"type": IPAM_TYPE, "socket": "/tmp/x.sock"}))
                .unwrap()
                .socket,
            PathBuf::from("/tmp/x.sock")
        );
        let e = Ipamd::from_conf(&json!({"socket": "relative"})).unwrap_err();
        assert_eq!(e.code, code::INVALID_NETWORK_CONFIG);
        assert!(e.msg.contains("ipam.socket"), "{e:?}");
    }
}
