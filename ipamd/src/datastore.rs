//! The datastore: the pod interfaces' addresses and the cooling addresses, checkpointed
//! to a JSON file after every change (written to a temporary file, fsynced, renamed
//! over the old one, and the directory fsynced) and read back at start.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pool::{Allocation, Pool};

/// Format version of the file.
const VERSION: u32 = 1;

/// Why the datastore could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DatastoreError {
    #[error("datastore {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("datastore {}: not a ferrule-ipamd datastore: {source}", path.display())]
    Format {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("datastore {}: version {found}, this daemon reads version {VERSION}", path.display())]
    Version { path: PathBuf, found: u32 },
}

/// A cooling address and when its cooling ends (ms since the Unix epoch).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CoolingEntry {
    pub ip: Ipv4Addr,
    pub until_ms: u64,
}

/// What the file holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Checkpoint {
    pub version: u32,
    pub allocations: Vec<Allocation>,
    pub cooling: Vec<CoolingEntry>,
}

impl Checkpoint {
    /// The checkpoint of `pool`.
    pub fn of(pool: &Pool) -> Checkpoint {
        Checkpoint {
            version: VERSION,
            allocations: pool.allocations().cloned().collect(),
            cooling: pool
                .cooling()
                .iter()
                .map(|(ip, until_ms)| CoolingEntry {
                    ip: *ip,
                    until_ms: *until_ms,
                })
                .collect(),
        }
    }

    /// A pool holding this checkpoint's allocations and cooling addresses.
    pub fn into_pool(self) -> Pool {
        let cooling: BTreeMap<Ipv4Addr, u64> = self
            .cooling
            .into_iter()
            .map(|c| (c.ip, c.until_ms))
            .collect();
        Pool::restore(self.allocations, cooling)
    }
}

/// Reads the checkpoint at `path`; `None` when there is no file yet.
pub fn load(path: &Path) -> Result<Option<Checkpoint>, DatastoreError> {
    let text = match fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(DatastoreError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let checkpoint: Checkpoint =
        serde_json::from_slice(&text).map_err(|source| DatastoreError::Format {
            path: path.to_path_buf(),
            source,
        })?;
    if checkpoint.version != VERSION {
        return Err(DatastoreError::Version {
            path: path.to_path_buf(),
            found: checkpoint.version,
        });
    }
    Ok(Some(checkpoint))
}

/// Replaces the file at `path` with `checkpoint` atomically.
pub fn save(path: &Path, checkpoint: &Checkpoint) -> Result<(), DatastoreError> {
    let io = |source| DatastoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io)?;
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let text = serde_json::to_vec_pretty(checkpoint).map_err(|e| io(std::io::Error::other(e)))?;
    let mut file = File::create(&tmp).map_err(io)?;
    file.write_all(&text).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    fs::rename(&tmp, path).map_err(io)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::PodKey;

    #[test]
    fn round_trip_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/ipamd.json");
        assert!(load(&path).unwrap().is_none());
        let mut pool = Pool::restore(
            vec![Allocation {
                container_id: "c1".into(),
                ifname: "eth0".into(),
                pod_namespace: "ns".into(),
                pod_name: "p".into(),
                ip: Ipv4Addr::new(10, 0, 0, 9),
                eni_id: "eni-1".into(),
            }],
            BTreeMap::from([(Ipv4Addr::new(10, 0, 0, 8), 1234)]),
        );
        let key = PodKey {
            container_id: "c1".into(),
            ifname: "eth0".into(),
        };
        assert!(pool.lookup(&key).is_some());
        save(&path, &Checkpoint::of(&pool)).unwrap();
        let back = load(&path).unwrap().unwrap();
        assert_eq!(back, Checkpoint::of(&pool));
        assert!(!dir.path().join("sub/ipamd.json.tmp").exists());
        pool.release(&key, 99);
        save(&path, &Checkpoint::of(&pool)).unwrap();
        assert!(load(&path).unwrap().unwrap().allocations.is_empty());
        fs::write(&path, b"{nope").unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("not a ferrule-ipamd datastore"), "{err}");
    }
}
