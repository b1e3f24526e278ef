//! The checkpoint file: the name cache and the identity allocator together, as versioned
//! JSON, written atomically (a temporary file in the same directory, fsync, rename over
//! the old file, fsync of the directory) so that a crash leaves the old file or the new
//! one, never a torn one.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::identity::AllocatorCheckpoint;
use crate::names::NameCache;

/// The format's version; a file of another version is refused.
pub const VERSION: u32 = 1;

/// What a checkpoint holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub version: u32,
    pub names: NameCache,
    pub identities: AllocatorCheckpoint,
}

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: version {found}, expected {VERSION}")]
    Version { path: PathBuf, found: u32 },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `path` atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(io(path))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

impl Checkpoint {
    /// Writes the checkpoint to `path` atomically.
    pub fn save(&self, path: &Path) -> Result<(), CheckpointError> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|source| CheckpointError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        write_atomic(path, &bytes)
    }

    /// Reads a checkpoint written by `save`.
    pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
        let bytes = fs::read(path).map_err(io(path))?;
        let cp: Checkpoint =
            serde_json::from_slice(&bytes).map_err(|source| CheckpointError::Json {
                path: path.to_path_buf(),
                source,
            })?;
        if cp.version != VERSION {
            return Err(CheckpointError::Version {
                path: path.to_path_buf(),
                found: cp.version,
            });
        }
        Ok(cp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Allocator;

    #[test]
    fn round_trips_and_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fqdn.json");
        let mut names = NameCache::new();
        names.learn(
            "a.com",
            Some("ns/pod"),
            &[("192.0.2.1".parse().unwrap(), 30)],
            100,
            0,
            10,
        );
        let mut alloc = Allocator::new();
        alloc
            .allocate(&"fqdn:a.com,reserved:world".parse().unwrap())
            .unwrap();
        let cp = Checkpoint {
            version: VERSION,
            names,
            identities: alloc.checkpoint(),
        };
        cp.save(&path).unwrap();
        assert_eq!(Checkpoint::load(&path).unwrap(), cp);
        let empty = Checkpoint {
            version: VERSION,
            ..Default::default()
        };
        empty.save(&path).unwrap();
        assert_eq!(Checkpoint::load(&path).unwrap(), empty);
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("fqdn.json")],
            "no temporary file left"
        );
    }

    #[test]
    fn refuses_other_versions_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fqdn.json");
        Checkpoint {
            version: 9,
            ..Default::default()
        }
        .save(&path)
        .unwrap();
        assert!(matches!(
            Checkpoint::load(&path),
            Err(CheckpointError::Version { found: 9, .. })
        ));
        fs::write(&path, b"{\"version\":1").unwrap();
        assert!(matches!(
            Checkpoint::load(&path),
            Err(CheckpointError::Json { .. })
        ));
        let missing = dir.path().join("none.json");
        let e = Checkpoint::load(&missing).unwrap_err();
        assert!(e.to_string().contains("none.json"), "{e}");
    }
}
