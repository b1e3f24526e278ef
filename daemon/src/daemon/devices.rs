//! What `port.add` may open: device kinds turned into DPDK devargs by Ferrule itself,
//! interface names checked, every path confined to the directories `[control]` allows
//! and checked before DPDK sees it, and what an add created on disk undone when the add
//! fails. Raw devargs come from the configuration file, or from the socket only when
//! `[control] allow_raw_devargs` says so.

use crate::config::ControlSection;
use ferrule_api::rpc::RpcError;
use ferrule_api::{PortAdd, PortDevice};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::{Component, Path, PathBuf};

/// Longest path a Unix socket address holds (`sun_path` without its NUL).
const MAX_SOCKET_PATH: usize = 107;
/// Longest DPDK device name (`RTE_DEV_NAME_MAX_LEN` less the NUL).
const MAX_DEVICE_NAME: usize = 63;

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

    fn parse(field: &str, text: Option<&str>) -> Result<VhostMode, RpcError> {
        match text {
            None | Some("server") => Ok(VhostMode::Server),
            Some("client") => Ok(VhostMode::Client),
            Some(other) => Err(bad(field, format!("{other:?}: server or client"))),
        }
    }
}

/// The `[control]` settings that bound what `port.add` may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePolicy {
    pub vhost_dirs: Vec<PathBuf>,
    pub memif_dirs: Vec<PathBuf>,
    pub pcap_dirs: Vec<PathBuf>,
    pub allow_raw_devargs: bool,
}

impl DevicePolicy {
    pub fn from_control(c: &ControlSection) -> Self {
        DevicePolicy {
            vhost_dirs: c.vhost_dirs.clone(),
            memif_dirs: c.memif_dirs.clone(),
            pcap_dirs: c.pcap_dirs.clone(),
            allow_raw_devargs: c.allow_raw_devargs,
        }
    }
}

/// Directories and files an add created, removed again when it fails.
#[derive(Debug, Default)]
#[must_use = "undo what was created when the add fails"]
pub struct Created {
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
}

impl Created {
    /// The add succeeded: what was created stays (the port uses it).
    pub fn keep(self) {}

    /// Removes what was created, files first, then directories deepest first (a
    /// directory someone else has put something in since is left).
    pub fn undo(self) {
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// A device ready to be probed: its devargs, its vhost-user socket, what was created.
#[derive(Debug)]
pub struct Prepared {
    pub devargs: String,
    pub vhost: Option<(PathBuf, VhostMode)>,
    pub created: Created,
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

/// A DPDK device name for port `name` on `driver`: `DRIVER_NAME`, or `DRIVER_` and a
/// hash of the name when that would be too long for DPDK.
fn device_name(driver: &str, name: &str) -> String {
    if driver.len() + 1 + name.len() <= MAX_DEVICE_NAME {
        return format!("{driver}_{name}");
    }
    let mut h: u32 = 0x811C_9DC5;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    format!("{driver}_{h:08x}")
}

/// A kernel interface name: 1-15 letters, digits, `-`, `_` or `.`.
fn check_iface(field: &str, iface: &str) -> Result<(), RpcError> {
    let ok = (1..=15).contains(&iface.len())
        && iface
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && iface != "."
        && iface != "..";
    if ok {
        Ok(())
    } else {
        Err(bad(
            field,
            format!("{iface:?}: an interface name is 1-15 letters, digits, '-', '_' or '.'"),
        ))
    }
}

/// An existing kernel interface (af_packet and af_xdp bind to one).
fn check_iface_exists(field: &str, iface: &str) -> Result<(), RpcError> {
    check_iface(field, iface)?;
    if Path::new("/sys/class/net").join(iface).exists() {
        Ok(())
    } else {
        Err(bad(field, format!("no interface named {iface:?}")))
    }
}

/// Checks that `text` names a path inside one of `dirs` (the `[control]` key `key`):
/// absolute, without `.` or `..`, without characters that mean something in devargs,
/// and with no symbolic link below the configured directory. Nothing is created.
fn confined(field: &str, text: &str, dirs: &[PathBuf], key: &str) -> Result<PathBuf, RpcError> {
    if dirs.is_empty() {
        return Err(bad(
            field,
            format!("no directory is allowed for these files: set [control] {key}"),
        ));
    }
    if text.is_empty()
        || text.len() > MAX_SOCKET_PATH
        || !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+@".contains(c))
    {
        return Err(bad(
            field,
            format!(
                "{text:?}: a path of at most {MAX_SOCKET_PATH} letters, digits and \
                 '/', '.', '_', '-', '+', '@'"
            ),
        ));
    }
    let path = PathBuf::from(text);
    let clean = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !clean {
        return Err(bad(
            field,
            format!("{text:?} is not an absolute path without '.' or '..'"),
        ));
    }
    let Some(dir) = dirs.iter().find(|d| path.starts_with(d) && path != **d) else {
        let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(bad(
            field,
            format!(
                "{text} is outside the allowed directories ({}): [control] {key}",
                list.join(", ")
            ),
        ));
    };
    let below: Vec<Component<'_>> = path
        .strip_prefix(dir)
        .unwrap_or(&path)
        .components()
        .collect();
    let mut at = dir.clone();
    for (i, part) in below.iter().enumerate() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(bad(field, format!("{} is a symbolic link", at.display())))
            }
            Ok(m) if i + 1 < below.len() && !m.is_dir() => {
                return Err(bad(field, format!("{} is not a directory", at.display())))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(bad(field, format!("{}: {e}", at.display()))),
        }
    }
    Ok(path)
}

/// Creates the missing directories above `path` (mode 0700), recording each.
fn make_parents(field: &str, path: &Path, created: &mut Created) -> Result<(), RpcError> {
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    let mut missing = Vec::new();
    let mut at = parent;
    while !at.exists() {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    for dir in missing.into_iter().rev() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| bad(field, format!("cannot create {}: {e}", dir.display())))?;
        created.dirs.push(dir);
    }
    Ok(())
}

/// A socket path Ferrule will create (a server): it must not exist, or be a socket no
/// one listens on (a peer that died), which is removed.
fn free_socket_path(field: &str, path: &Path) -> Result<(), RpcError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => Err(bad(
            field,
            format!("{} exists and is not a socket", path.display()),
        )),
        Ok(_) => {
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
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(bad(field, format!("{}: {e}", path.display()))),
    }
}

/// A socket path Ferrule connects to (a client): a socket, or nothing yet.
fn client_socket_path(field: &str, path: &Path) -> Result<(), RpcError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => Err(bad(
            field,
            format!("{} exists and is not a socket", path.display()),
        )),
        _ => Ok(()),
    }
}

/// Turns `port.add`'s device (`vhost_user`, `device` or `devargs`) into devargs for the
/// port `name`, checking every name and path first. `in_use` holds the devargs of the
/// ports attached now. On error nothing on disk has changed.
pub fn prepare(
    policy: &DevicePolicy,
    name: &str,
    p: &PortAdd,
    queues: u16,
    in_use: &[&str],
) -> Result<Prepared, RpcError> {
    let mut created = Created::default();
    match prepare_into(policy, name, p, queues, in_use, &mut created) {
        Ok((devargs, vhost)) => Ok(Prepared {
            devargs,
            vhost,
            created,
        }),
        Err(e) => {
            created.undo();
            Err(e)
        }
    }
}

fn prepare_into(
    policy: &DevicePolicy,
    name: &str,
    p: &PortAdd,
    queues: u16,
    in_use: &[&str],
    created: &mut Created,
) -> Result<(String, Option<(PathBuf, VhostMode)>), RpcError> {
    let given = [
        p.vhost_user.is_some(),
        p.device.is_some(),
        p.devargs.is_some(),
    ];
    match given.iter().filter(|&&g| g).count() {
        0 => return Err(bad("device", "give vhost_user, device or devargs")),
        1 => {}
        _ => {
            return Err(bad(
                "device",
                "give only one of vhost_user, device and devargs",
            ))
        }
    }
    if p.mode.is_some() && p.vhost_user.is_none() {
        return Err(bad("mode", "only vhost-user ports have a mode"));
    }
    let iface_in_use = |field: &str, iface: &str| -> Result<(), RpcError> {
        let key = format!("iface={iface}");
        if in_use
            .iter()
            .any(|d| d.split(',').skip(1).any(|kv| kv == key))
        {
            return Err(bad(
                field,
                format!("interface {iface:?} is in use by another port"),
            ));
        }
        Ok(())
    };
    if let Some(text) = &p.vhost_user {
        let mode = VhostMode::parse("mode", p.mode.as_deref())?;
        let path = confined("vhost_user", text, &policy.vhost_dirs, "vhost_dirs")?;
        match mode {
            VhostMode::Server => {
                free_socket_path("vhost_user", &path)?;
                make_parents("vhost_user", &path, created)?;
            }
            VhostMode::Client => client_socket_path("vhost_user", &path)?,
        }
        let vdev = device_name("net_vhost", name);
        return Ok((
            vhost_devargs(&vdev, &path, mode, queues),
            Some((path, mode)),
        ));
    }
    if let Some(devargs) = &p.devargs {
        if !policy.allow_raw_devargs {
            return Err(bad(
                "devargs",
                "raw DPDK devargs are refused on the control socket: give a device kind \
                 (af_packet, af_xdp, tap, memif, null, pcap) or vhost_user, or set \
                 [control] allow_raw_devargs = true",
            ));
        }
        let dev = devargs.split(',').next().unwrap_or("").trim();
        if dev.is_empty() {
            return Err(bad("devargs", "empty devargs"));
        }
        if in_use.iter().any(|d| d.split(',').next() == Some(dev)) {
            return Err(bad(
                "devargs",
                format!("device {dev:?} is in use by another port"),
            ));
        }
        return Ok((devargs.clone(), None));
    }
    let Some(device) = &p.device else {
        return Err(bad("device", "give vhost_user, device or devargs"));
    };
    let devargs = match device {
        PortDevice::AfPacket { iface } => {
            check_iface_exists("device.iface", iface)?;
            iface_in_use("device.iface", iface)?;
            format!(
                "{},iface={iface},qpairs={queues}",
                device_name("net_af_packet", name)
            )
        }
        PortDevice::AfXdp { iface, start_queue } => {
            check_iface_exists("device.iface", iface)?;
            iface_in_use("device.iface", iface)?;
            format!(
                "{},iface={iface},start_queue={},queue_count={queues}",
                device_name("net_af_xdp", name),
                start_queue.unwrap_or(0)
            )
        }
        PortDevice::Tap { iface } => {
            check_iface("device.iface", iface)?;
            iface_in_use("device.iface", iface)?;
            format!("{},iface={iface}", device_name("net_tap", name))
        }
        PortDevice::Memif { socket, role, id } => {
            let mode = VhostMode::parse("device.role", role.as_deref())?;
            let path = confined("device.socket", socket, &policy.memif_dirs, "memif_dirs")?;
            match mode {
                VhostMode::Server => {
                    free_socket_path("device.socket", &path)?;
                    make_parents("device.socket", &path, created)?;
                }
                VhostMode::Client => client_socket_path("device.socket", &path)?,
            }
            format!(
                "{},role={},socket={},id={}",
                device_name("net_memif", name),
                mode.name(),
                path.display(),
                id.unwrap_or(0)
            )
        }
        PortDevice::Null => device_name("net_null", name),
        PortDevice::Pcap { rx_pcap, tx_pcap } => {
            if rx_pcap.is_none() && tx_pcap.is_none() {
                return Err(bad("device.rx_pcap", "give rx_pcap, tx_pcap or both"));
            }
            let mut devargs = device_name("net_pcap", name);
            if let Some(rx) = rx_pcap {
                let path = confined("device.rx_pcap", rx, &policy.pcap_dirs, "pcap_dirs")?;
                match std::fs::symlink_metadata(&path) {
                    Ok(m) if m.is_file() => {}
                    _ => {
                        return Err(bad(
                            "device.rx_pcap",
                            format!("{} is not an existing regular file", path.display()),
                        ))
                    }
                }
                devargs.push_str(&format!(",rx_pcap={}", path.display()));
            }
            if let Some(tx) = tx_pcap {
                let path = confined("device.tx_pcap", tx, &policy.pcap_dirs, "pcap_dirs")?;
                if std::fs::symlink_metadata(&path).is_ok() {
                    return Err(bad(
                        "device.tx_pcap",
                        format!("{} exists: tx_pcap names a new file", path.display()),
                    ));
                }
                if !path.parent().is_some_and(Path::is_dir) {
                    return Err(bad(
                        "device.tx_pcap",
                        format!("the directory of {} does not exist", path.display()),
                    ));
                }
                // DPDK creates it when the port starts; a failed add removes it.
                created.files.push(path.clone());
                devargs.push_str(&format!(",tx_pcap={}", path.display()));
            }
            devargs
        }
    };
    Ok((devargs, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn policy(dir: &Path) -> DevicePolicy {
        DevicePolicy {
            vhost_dirs: vec![dir.join("vhost")],
            memif_dirs: vec![dir.join("memif")],
            pcap_dirs: vec![dir.join("pcap")],
            allow_raw_devargs: false,
        }
    }

    fn add(device: Option<PortDevice>, vhost: Option<&str>, devargs: Option<&str>) -> PortAdd {
        PortAdd {
            name: "p".into(),
            device,
            vhost_user: vhost.map(str::to_string),
            devargs: devargs.map(str::to_string),
            ..PortAdd::default()
        }
    }

    fn err(r: Result<Prepared, RpcError>) -> String {
        let e = r.expect_err("refused");
        e.message
    }

    #[test]
    fn vhost_devargs_and_names() {
        assert_eq!(
            vhost_devargs(
                "net_vhost_pod-c",
                Path::new("/run/ferrule/vhost/pod-c.sock"),
                VhostMode::Client,
                2
            ),
            "net_vhost_pod-c,iface=/run/ferrule/vhost/pod-c.sock,queues=2,client=1"
        );
        assert_eq!(device_name("net_null", "a"), "net_null_a");
        let long = "x".repeat(64);
        let n = device_name("net_af_packet", &long);
        assert!(n.len() <= MAX_DEVICE_NAME, "{n}");
        assert_eq!(n, device_name("net_af_packet", &long));
    }

    #[test]
    fn kinds_become_devargs() {
        let dir = tempfile::tempdir().unwrap();
        let pol = policy(dir.path());
        let d = |dev: PortDevice| prepare(&pol, "p", &add(Some(dev), None, None), 2, &[]);
        assert_eq!(
            d(PortDevice::AfPacket { iface: "lo".into() })
                .unwrap()
                .devargs,
            "net_af_packet_p,iface=lo,qpairs=2"
        );
        assert_eq!(
            d(PortDevice::AfXdp {
                iface: "lo".into(),
                start_queue: Some(1)
            })
            .unwrap()
            .devargs,
            "net_af_xdp_p,iface=lo,start_queue=1,queue_count=2"
        );
        assert_eq!(
            d(PortDevice::Tap {
                iface: "ftap0".into()
            })
            .unwrap()
            .devargs,
            "net_tap_p,iface=ftap0"
        );
        assert_eq!(d(PortDevice::Null).unwrap().devargs, "net_null_p");
        let memif = dir.path().join("memif/a/m.sock");
        let p = d(PortDevice::Memif {
            socket: memif.display().to_string(),
            role: None,
            id: Some(3),
        })
        .unwrap();
        assert_eq!(
            p.devargs,
            format!("net_memif_p,role=server,socket={},id=3", memif.display())
        );
        // The directories it made are recorded and removed by undo.
        assert!(memif.parent().unwrap().is_dir());
        let mode = std::fs::metadata(memif.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        p.created.undo();
        assert!(!dir.path().join("memif").exists());
    }

    #[test]
    fn interfaces_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let pol = policy(dir.path());
        let d = |dev: PortDevice| prepare(&pol, "p", &add(Some(dev), None, None), 1, &[]);
        assert!(err(d(PortDevice::AfPacket {
            iface: "no-such-if0".into()
        }))
        .contains("no interface"));
        assert!(err(d(PortDevice::AfPacket {
            iface: "lo,x=1".into()
        }))
        .contains("interface name"));
        assert!(err(d(PortDevice::Tap {
            iface: "a".repeat(16)
        }))
        .contains("interface name"));
        let r = prepare(
            &pol,
            "p",
            &add(
                Some(PortDevice::AfPacket { iface: "lo".into() }),
                None,
                None,
            ),
            1,
            &["net_af_packet_q,iface=lo,qpairs=1"],
        );
        assert!(err(r).contains("in use"));
    }

    #[test]
    fn paths_stay_in_their_directories_and_change_nothing_when_refused() {
        let dir = tempfile::tempdir().unwrap();
        let pol = policy(dir.path());
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let v = |path: &str| prepare(&pol, "p", &add(None, Some(path), None), 1, &[]);
        let vhost = dir.path().join("vhost");
        let outside = victim.display().to_string();
        assert!(err(v(&outside)).contains("outside the allowed directories"));
        let dotdot = format!("{}/../victim", vhost.display());
        assert!(err(v(&dotdot)).contains("without '.' or '..'"));
        let comma = format!("{}/a.sock,client=1", vhost.display());
        assert!(err(v(&comma)).contains("a path of at most"));
        assert!(err(v("relative.sock")).contains("absolute"));
        // A symbolic link inside the directory does not lead out of it.
        std::fs::create_dir(&vhost).unwrap();
        std::os::unix::fs::symlink(dir.path(), vhost.join("link")).unwrap();
        let via_link = format!("{}/link/victim", vhost.display());
        assert!(err(v(&via_link)).contains("symbolic link"));
        // A regular file is not replaced.
        let file = vhost.join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(err(v(&file.display().to_string())).contains("not a socket"));
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
        // Raw devargs are refused unless allowed.
        let raw = format!("net_vhost9,iface={}", victim.display());
        assert!(
            err(prepare(&pol, "p", &add(None, None, Some(&raw)), 1, &[]))
                .contains("allow_raw_devargs")
        );
        let allowed = DevicePolicy {
            allow_raw_devargs: true,
            ..pol.clone()
        };
        assert_eq!(
            prepare(&allowed, "p", &add(None, None, Some("net_null7")), 1, &[])
                .unwrap()
                .devargs,
            "net_null7"
        );
        // pcap: no directory configured means no pcap; rx must exist, tx must not.
        let none = DevicePolicy {
            pcap_dirs: Vec::new(),
            ..pol.clone()
        };
        let pcap = |pol: &DevicePolicy, rx: Option<&Path>, tx: Option<&Path>| {
            let dev = PortDevice::Pcap {
                rx_pcap: rx.map(|p| p.display().to_string()),
                tx_pcap: tx.map(|p| p.display().to_string()),
            };
            prepare(pol, "p", &add(Some(dev), None, None), 1, &[])
        };
        let pdir = dir.path().join("pcap");
        std::fs::create_dir(&pdir).unwrap();
        let existing = pdir.join("in.pcap");
        std::fs::write(&existing, b"pcap").unwrap();
        assert!(err(pcap(&none, Some(&existing), None)).contains("pcap_dirs"));
        assert!(err(pcap(&pol, None, Some(&existing))).contains("exists"));
        assert!(err(pcap(&pol, Some(&pdir.join("missing")), None)).contains("regular file"));
        let ok = pcap(&pol, Some(&existing), Some(&pdir.join("out.pcap"))).unwrap();
        assert!(ok
            .devargs
            .ends_with(&format!("tx_pcap={}", pdir.join("out.pcap").display())));
        assert_eq!(std::fs::read(&existing).unwrap(), b"pcap");
    }

    #[test]
    fn stale_sockets_are_cleared_and_live_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let pol = policy(dir.path());
        std::fs::create_dir(dir.path().join("vhost")).unwrap();
        let live = dir.path().join("vhost/live.sock");
        let listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
        let v = || {
            prepare(
                &pol,
                "p",
                &add(None, Some(&live.display().to_string()), None),
                1,
                &[],
            )
        };
        assert!(err(v()).contains("in use"));
        drop(listener);
        v().unwrap();
        assert!(!live.exists());
    }
}
