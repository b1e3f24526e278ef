//! The state `ferruled` receives at run time, kept in a versioned file so that a restart
//! loses none of it: ports added over the socket, routes, static neighbours, the ACL
//! state (tables and attachments), the VPC/SNAT settings and the user-defined networks
//! (their manifests and Namespaces). The file is rewritten
//! atomically (a new file synced, renamed over the old one, the directory synced) after
//! every change, and read back at start before the workers poll.
//!
//! What is kept is each change as it was accepted (the request's params), compacted:
//! a deleted port or route takes its add with it, an `acl.apply` or `vpc.sync` replaces
//! the previous one. Connection tracking and learned neighbours are not kept.

use crate::config::parse_cidr;
use crate::networks::{network_name_of, object_key};
use ferrule_api::network::{NetworkApply, NetworkDel};
use ferrule_api::network_method;
use ferrule_api::{
    acl_method, neigh_method, port_method, route_method, vpc_method, NeighAdd, NeighDel, PortAdd,
    PortDel, RouteAdd, RouteDel, VpcSync,
};
use ferrule_dataplane::wire::IpCidr;

/// The kinds `network.apply` keeps.
const KEPT_KINDS: [&str; 3] = [
    "UserDefinedNetwork",
    "ClusterUserDefinedNetwork",
    "Namespace",
];
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// The version this build writes and reads.
pub const STATE_VERSION: u32 = 1;

/// Largest state file read (a million-rule ACL written out is about 150 MB).
const MAX_STATE_BYTES: u64 = 1 << 30;

/// Why the state file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state file {}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("state file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a restart restores.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedState {
    pub version: u32,
    /// Ports added at run time, in the order they were added.
    #[serde(default)]
    pub ports: Vec<PortAdd>,
    #[serde(default)]
    pub routes: Vec<RouteAdd>,
    #[serde(default)]
    pub neighbors: Vec<NeighAdd>,
    /// The last `acl.apply` that changed the state (its params).
    #[serde(default)]
    pub acl: Option<Value>,
    /// The last `vpc.sync`.
    #[serde(default)]
    pub vpc: Option<VpcSync>,
    /// The user-defined networks and Namespaces applied (`network.apply`'s objects,
    /// the latest of each), in the order first applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Value>,
}

/// A route's identity: its network and prefix.
fn route_key(network: &Option<String>, prefix: &str) -> (String, Option<IpCidr>) {
    let net = network.clone().unwrap_or_else(|| "default".into());
    let cidr = if prefix.contains('/') {
        parse_cidr(prefix).ok()
    } else {
        prefix.parse::<IpAddr>().ok().map(IpCidr::host)
    };
    (net, cidr)
}

fn neigh_key(network: &Option<String>, ip: &str) -> (String, Option<IpAddr>) {
    (
        network.clone().unwrap_or_else(|| "default".into()),
        ip.parse().ok(),
    )
}

impl SavedState {
    /// Takes in an accepted change; returns whether the saved state changed.
    pub fn record(&mut self, method: &str, params: &Value) -> bool {
        fn parse<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
            serde_json::from_value(v.clone()).ok()
        }
        match method {
            port_method::ADD => {
                let Some(p) = parse::<PortAdd>(params) else {
                    return false;
                };
                self.ports.retain(|q| q.name != p.name);
                self.ports.push(p);
            }
            port_method::DEL => {
                let Some(p) = parse::<PortDel>(params) else {
                    return false;
                };
                self.ports.retain(|q| q.name != p.name);
                self.neighbors.retain(|n| n.port != p.name);
            }
            route_method::ADD => {
                let Some(r) = parse::<RouteAdd>(params) else {
                    return false;
                };
                let key = route_key(&r.network, &r.prefix);
                self.routes
                    .retain(|q| route_key(&q.network, &q.prefix) != key);
                self.routes.push(r);
            }
            route_method::DEL => {
                let Some(r) = parse::<RouteDel>(params) else {
                    return false;
                };
                let key = route_key(&r.network, &r.prefix);
                self.routes
                    .retain(|q| route_key(&q.network, &q.prefix) != key);
            }
            neigh_method::ADD => {
                let Some(n) = parse::<NeighAdd>(params) else {
                    return false;
                };
                let key = neigh_key(&n.network, &n.ip);
                self.neighbors
                    .retain(|q| neigh_key(&q.network, &q.ip) != key);
                self.neighbors.push(n);
            }
            neigh_method::DEL => {
                let Some(n) = parse::<NeighDel>(params) else {
                    return false;
                };
                let key = neigh_key(&n.network, &n.ip);
                self.neighbors
                    .retain(|q| neigh_key(&q.network, &q.ip) != key);
            }
            acl_method::APPLY => {
                if params.get("dry_run").and_then(Value::as_bool) == Some(true) {
                    return false;
                }
                self.acl = Some(params.clone());
            }
            vpc_method::SYNC => {
                let Some(v) = parse::<VpcSync>(params) else {
                    return false;
                };
                self.vpc = Some(v);
            }
            network_method::APPLY => {
                let Some(a) = parse::<NetworkApply>(params) else {
                    return false;
                };
                if a.dry_run {
                    return false;
                }
                for o in a.objects {
                    let Some(key) = object_key(&o) else { continue };
                    if !KEPT_KINDS.contains(&key.0.as_str()) {
                        continue;
                    }
                    match self
                        .networks
                        .iter_mut()
                        .find(|v| object_key(v).as_ref() == Some(&key))
                    {
                        Some(slot) => *slot = o,
                        None => self.networks.push(o),
                    }
                }
            }
            network_method::DEL => {
                let Some(d) = parse::<NetworkDel>(params) else {
                    return false;
                };
                self.networks.retain(|v| {
                    object_key(v).and_then(|k| network_name_of(&k)).as_deref()
                        != Some(d.name.as_str())
                });
            }
            _ => return false,
        }
        true
    }

    /// The changes that rebuild this state, in order: networks (ports name them),
    /// ports, routes, neighbours, VPC, then the ACL state (its attachments name the
    /// ports).
    pub fn replay(&self) -> Vec<(&'static str, Value)> {
        fn value<T: Serialize>(v: &T) -> Value {
            serde_json::to_value(v).unwrap_or(Value::Null)
        }
        let mut out = Vec::new();
        if !self.networks.is_empty() {
            out.push((
                network_method::APPLY,
                value(&NetworkApply {
                    objects: self.networks.clone(),
                    dry_run: false,
                }),
            ));
        }
        for p in &self.ports {
            out.push((port_method::ADD, value(p)));
        }
        for r in &self.routes {
            out.push((route_method::ADD, value(r)));
        }
        for n in &self.neighbors {
            out.push((neigh_method::ADD, value(n)));
        }
        if let Some(v) = &self.vpc {
            out.push((vpc_method::SYNC, value(v)));
        }
        if let Some(a) = &self.acl {
            out.push((acl_method::APPLY, a.clone()));
        }
        out
    }

    /// Whether there is nothing to restore.
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
            && self.routes.is_empty()
            && self.neighbors.is_empty()
            && self.acl.is_none()
            && self.vpc.is_none()
            && self.networks.is_empty()
    }
}

/// The state file at a path.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    pub fn new(path: impl Into<PathBuf>) -> StateFile {
        StateFile { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the saved state: empty when there is no file; an error for a file that is
    /// not a regular file, too large, not the format, or of another version.
    pub fn load(&self) -> Result<SavedState, StateError> {
        let invalid = |message: String| StateError::Invalid {
            path: self.path.clone(),
            message,
        };
        let meta = match std::fs::symlink_metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(SavedState {
                    version: STATE_VERSION,
                    ..SavedState::default()
                })
            }
            Err(source) => {
                return Err(StateError::Io {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        if !meta.is_file() {
            return Err(invalid("not a regular file".into()));
        }
        if meta.len() > MAX_STATE_BYTES {
            return Err(invalid(format!(
                "{} bytes: larger than {MAX_STATE_BYTES}",
                meta.len()
            )));
        }
        let bytes = std::fs::read(&self.path).map_err(|source| StateError::Io {
            path: self.path.clone(),
            source,
        })?;
        let probe: Value = serde_json::from_slice(&bytes)
            .map_err(|e| invalid(format!("not a Ferrule state file (corrupt?): {e}")))?;
        match probe.get("version").and_then(Value::as_u64) {
            Some(v) if v == u64::from(STATE_VERSION) => {}
            Some(v) => {
                return Err(invalid(format!(
                    "version {v}; this ferruled reads version {STATE_VERSION}"
                )))
            }
            None => return Err(invalid("no version: not a Ferrule state file".into())),
        }
        serde_json::from_value(probe).map_err(|e| invalid(format!("{e}")))
    }

    /// Writes `state` atomically: a temporary file beside the target, synced, renamed
    /// over it, and the directory synced, so a crash leaves the old or the new file.
    pub fn save(&self, state: &SavedState) -> Result<(), StateError> {
        let io = |source: std::io::Error| StateError::Io {
            path: self.path.clone(),
            source,
        };
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io)?;
        let tmp = dir.join(format!(
            ".{}.tmp",
            self.path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "state".into())
        ));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            serde_json::to_writer(std::io::BufWriter::new(&mut f), state)?;
            f.flush()?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            std::fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }

    /// Moves an unusable file aside (`PATH.discarded`) so a fresh state starts.
    pub fn discard(&self) -> Result<Option<PathBuf>, StateError> {
        if std::fs::symlink_metadata(&self.path).is_err() {
            return Ok(None);
        }
        let aside = self.path.with_extension("discarded");
        std::fs::rename(&self.path, &aside).map_err(|source| StateError::Io {
            path: self.path.clone(),
            source,
        })?;
        Ok(Some(aside))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_are_compacted_and_replayed_in_order() {
        let mut s = SavedState {
            version: STATE_VERSION,
            ..SavedState::default()
        };
        assert!(s.record("port.add", &json!({"name": "a", "vhost_user": "/run/ferrule/vhost/a.sock", "mac": "02:00:00:00:00:01"})));
        assert!(s.record(
            "port.add",
            &json!({"name": "b", "device": {"kind": "null"}, "role": "host"})
        ));
        assert!(s.record("route.add", &json!({"prefix": "10.9.0.0/16", "port": "b"})));
        assert!(s.record("route.add", &json!({"prefix": "192.0.2.7", "port": "b"})));
        assert!(s.record(
            "neigh.add",
            &json!({"ip": "192.0.2.7", "mac": "02:00:00:00:00:07", "port": "b"})
        ));
        assert!(s.record("vpc.sync", &json!({"node_ips": ["192.0.2.10"]})));
        assert!(s.record("acl.apply", &json!({"tables": []})));
        assert!(!s.record("acl.apply", &json!({"tables": [], "dry_run": true})));
        assert!(!s.record("stats.get", &Value::Null));
        // A route deleted by its host prefix written another way, and a port deleted.
        assert!(s.record("route.del", &json!({"prefix": "192.0.2.7/32"})));
        assert!(s.record("port.del", &json!({"name": "a"})));
        let methods: Vec<&str> = s.replay().iter().map(|(m, _)| *m).collect();
        assert_eq!(
            methods,
            [
                "port.add",
                "route.add",
                "neigh.add",
                "vpc.sync",
                "acl.apply"
            ]
        );
        assert_eq!(s.routes[0].prefix, "10.9.0.0/16");
        // Deleting b takes its static neighbour with it.
        s.record("port.del", &json!({"name": "b"}));
        assert!(s.neighbors.is_empty());
    }

    #[test]
    fn the_file_round_trips_and_refuses_what_it_cannot_read() {
        let dir = tempfile::tempdir().unwrap();
        let f = StateFile::new(dir.path().join("sub/state.json"));
        assert!(f.load().unwrap().is_empty(), "no file: nothing to restore");
        let mut s = f.load().unwrap();
        s.record(
            "port.add",
            &json!({"name": "b", "device": {"kind": "null"}}),
        );
        f.save(&s).unwrap();
        assert_eq!(f.load().unwrap(), s);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("sub")).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left");
        std::fs::write(f.path(), b"{\"version\": 1, \"ports\": [").unwrap();
        let e = f.load().unwrap_err().to_string();
        assert!(e.contains("state.json") && e.contains("corrupt"), "{e}");
        std::fs::write(f.path(), b"{\"version\": 7}").unwrap();
        let e = f.load().unwrap_err().to_string();
        assert!(e.contains("version 7"), "{e}");
        std::fs::write(f.path(), b"{\"version\": 1, \"extra\": 1}").unwrap();
        assert!(f.load().is_err());
        let aside = f.discard().unwrap().unwrap();
        assert!(aside.exists() && !f.path().exists());
        assert!(f.load().unwrap().is_empty());
    }
}
