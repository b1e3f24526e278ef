//! End-to-end: the Ferrule CNI plugin. First called the way a runtime calls it (the
//! protocol: VERSION, ADD with the Kubernetes pod in CNI_ARGS, CHECK, DEL twice, errors,
//! vhost-user); then with a real runtime: containerd and runc run busybox containers
//! from a local root filesystem (`ctr run --rootfs --cni`), calling the plugin from
//! /opt/cni/bin with its configuration in /etc/cni/net.d and the reference host-local
//! plugin as IPAM. The containers ping each other and their gateway over IPv4 and IPv6,
//! fetch a file byte-exact from a server beyond the uplink through SNAT, a NetworkPolicy
//! rendered by ferrule-agent denies one direction, and removing them removes their
//! ports and releases their addresses. /etc/cni/net.d and /opt/cni/bin are restored and
//! containerd stopped even when a test fails.

use ferrule_e2e::*;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn must(args: &[&str]) -> String {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// One test of this file at a time: each runs a ferruled with AF_PACKET ports, and
/// DPDK's af_packet driver names its fanout group after the process ID and the
/// interface index, so two daemons side by side can pick the same group for different
/// interfaces and fail to open a port (EINVAL).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A network namespace with a veth to the root namespace: the "router" beyond the
/// uplink (192.0.2.1, and 203.0.113.1 on its loopback, with no route back to the pods),
/// or a bare namespace for a pod.
struct Netns {
    name: String,
    root_end: Option<String>,
    servers: Vec<Child>,
}

impl Netns {
    fn new(name: &str) -> Netns {
        let _ = sh(&["ip", "netns", "del", name]);
        must(&["ip", "netns", "add", name]);
        Netns {
            name: name.to_string(),
            root_end: None,
            servers: Vec::new(),
        }
    }

    fn router(name: &str, root_end: &str) -> Netns {
        let mut ns = Netns::new(name);
        let inner = format!("{root_end}r");
        let _ = sh(&["ip", "link", "del", root_end]);
        must(&[
            "ip", "link", "add", root_end, "type", "veth", "peer", "name", &inner,
        ]);
        ns.root_end = Some(root_end.to_string());
        must(&["ip", "link", "set", &inner, "netns", name]);
        must(&["ip", "link", "set", root_end, "up"]);
        let _ = sh(&[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{root_end}.disable_ipv6=1"),
        ]);
        for cmd in [
            vec!["ip", "link", "set", "lo", "up"],
            vec!["ip", "link", "set", &inner, "up"],
            vec!["ip", "addr", "add", "192.0.2.1/24", "dev", &inner],
            vec!["ip", "addr", "add", "203.0.113.1/32", "dev", "lo"],
            // What the router sends reaches Ferrule through AF_PACKET: finished checksums.
            vec!["ethtool", "-K", &inner, "tx", "off"],
        ] {
            ns.exec(&cmd);
        }
        ns
    }

    fn exec(&self, args: &[&str]) -> String {
        let mut argv = vec!["ip", "netns", "exec", &self.name];
        argv.extend_from_slice(args);
        must(&argv)
    }

    fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for s in &mut self.servers {
            stop_timeout_child(s);
        }
        if let Some(e) = &self.root_end {
            let _ = sh(&["ip", "link", "del", e]);
        }
        let _ = sh(&["ip", "netns", "del", &self.name]);
    }
}

/// ferruled in the root namespace (the CNI plugin creates the pods' veths there), with
/// its uplink on the router's veth, a default route through the router and SNAT to the
/// node IP for destinations outside 192.0.2.0/24 and the pod subnet.
fn ferruled_with_uplink(prefix: &str, uplink: &str, vhost_dir: &Path) -> Ferruled {
    ferruled_with_uplink_and(prefix, uplink, vhost_dir, "")
}

/// As `ferruled_with_uplink`, with more configuration (`extra`, TOML sections).
fn ferruled_with_uplink_and(prefix: &str, uplink: &str, vhost_dir: &Path, extra: &str) -> Ferruled {
    let cfg = format!(
        "{extra}\n{}[control]\nvhost_dirs = [\"{}\"]\n\n\
         [[port]]\nname = \"up\"\ndevargs = \"net_af_packet_{p},iface={uplink}\"\nrole = \"uplink\"\n\
         addresses = [\"192.0.2.10/24\"]\n\n\
         [[route]]\nprefix = \"0.0.0.0/0\"\nport = \"up\"\nvia = \"192.0.2.1\"\n\n\
         [vpc]\nnode_ips = [\"192.0.2.10\"]\nvpc_cidrs = [\"192.0.2.0/24\", \"10.1.0.0/16\"]\n",
        base_config(prefix),
        vhost_dir.display(),
        p = prefix.replace('-', "_")
    );
    Ferruled::start(&cfg, prefix).expect("start ferruled")
}

fn net_conf(socket: &Path, ipam_dir: &Path, vhost_dir: &Path, extra: Value) -> Value {
    let mut conf = json!({
        "cniVersion": "1.0.0",
        "name": "ferrule",
        "type": "ferrule",
        "socket": socket,
        "vhost_dir": vhost_dir,
        "ipam": {
            "type": "host-local",
            "dataDir": ipam_dir,
            "ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "fd00:1::/64"}]]
        }
    });
    if let (Some(c), Some(e)) = (conf.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            c.insert(k.clone(), v.clone());
        }
    }
    conf
}

/// Runs the plugin binary the way a runtime does, for pod `shop/web-ID`.
fn plugin(cmd: &str, id: &str, netns: Option<&Path>, ifname: &str, conf: &Value) -> (bool, Value) {
    let pod = format!("web-{id}");
    run_plugin(cmd, id, netns, ifname, ("shop", &pod), conf)
}

/// Runs the plugin binary for container `id` of pod `namespace/name`.
fn run_plugin(
    cmd: &str,
    id: &str,
    netns: Option<&Path>,
    ifname: &str,
    pod: (&str, &str),
    conf: &Value,
) -> (bool, Value) {
    let mut child = Command::new(cni_bin())
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", id)
        .env("CNI_NETNS", netns.map(Path::as_os_str).unwrap_or_default())
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", "/usr/lib/cni:/opt/cni/bin")
        .env(
            "CNI_ARGS",
            format!(
                "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={id}",
                pod.0, pod.1
            ),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the CNI plugin");
    // A plugin may exit without reading its configuration (VERSION, an early error):
    // like libcni, a closed pipe is not an error of the call.
    match child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("write stdin: {e}"),
        _ => {}
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let value = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    };
    (out.status.success(), value)
}

fn port<'a>(ports: &'a Value, name: &str) -> Option<&'a Value> {
    ports["ports"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
}

#[test]
fn the_plugin_speaks_the_cni_protocol() {
    let _serial = serial();
    let prefix = unique_prefix("cni");
    let tag = std::process::id() % 100_000;
    let router = Netns::router(&format!("fcr{tag}"), &format!("fcu{tag}"));
    let vhost = tempfile::tempdir().unwrap();
    let d = ferruled_with_uplink(&prefix, router.root_end.as_deref().unwrap(), vhost.path());
    let ipam = d.dir.path().join("ipam");
    let pod = Netns::new(&format!("fcp{tag}"));
    let conf = net_conf(&d.socket, &ipam, vhost.path(), json!({}));

    let (ok, v) = plugin("VERSION", "", None, "", &Value::Null);
    assert!(ok, "{v}");
    assert!(v["supportedVersions"]
        .as_array()
        .unwrap()
        .contains(&json!("0.4.0")));

    // ADD: the pod's addresses as host addresses, routes through the gateway, and a
    // port that records the Kubernetes pod.
    let (ok, result) = plugin("ADD", "c1", Some(&pod.path()), "eth0", &conf);
    assert!(ok, "{result}");
    assert_eq!(result["cniVersion"], "1.0.0");
    let ips: Vec<&str> = result["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["address"].as_str().unwrap())
        .collect();
    assert!(
        ips[0].starts_with("10.1.0.") && ips[0].ends_with("/32"),
        "{ips:?}"
    );
    assert!(
        ips[1].starts_with("fd00:1::") && ips[1].ends_with("/128"),
        "{ips:?}"
    );
    assert_eq!(result["ips"][0]["gateway"], "169.254.1.1");
    assert_eq!(
        result["interfaces"][1]["sandbox"],
        pod.path().display().to_string()
    );
    let addr = pod.exec(&["ip", "-o", "addr", "show", "eth0"]);
    assert!(addr.contains(ips[0]) && addr.contains(ips[1]), "{addr}");
    let routes = pod.exec(&["ip", "route"]);
    assert!(
        routes.contains("default via 169.254.1.1 dev eth0"),
        "{routes}"
    );
    let routes6 = pod.exec(&["ip", "-6", "route"]);
    assert!(
        routes6.contains("default via fe80::1 dev eth0"),
        "{routes6}"
    );
    let offload = pod.exec(&["ethtool", "-k", "eth0"]);
    assert!(offload.contains("tx-checksumming: off"), "{offload}");
    let ports = d.ctl_json(&["ports"]);
    let p = ports["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pod"] == "shop/web-c1")
        .unwrap_or_else(|| panic!("no port records shop/web-c1: {ports}"));
    let name = p["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("c1-") && name.len() <= 32, "{name}");
    assert_eq!(p["role"], "pod");
    // The pod reaches its gateway, and through SNAT a server beyond the router.
    pod.exec(&["ping", "-c", "1", "-W", "2", "169.254.1.1"]);
    pod.exec(&["ping", "-c", "1", "-W", "2", "203.0.113.1"]);

    // CHECK passes, and fails naming what is wrong once an address is gone.
    let mut check_conf = conf.clone();
    check_conf["prevResult"] = result.clone();
    let (ok, v) = plugin("CHECK", "c1", Some(&pod.path()), "eth0", &check_conf);
    assert!(ok, "{v}");
    pod.exec(&["ip", "addr", "del", ips[0], "dev", "eth0"]);
    let (ok, v) = plugin("CHECK", "c1", Some(&pod.path()), "eth0", &check_conf);
    assert!(!ok);
    assert!(v["msg"].as_str().unwrap().contains("lost address"), "{v}");

    // Errors are CNI error objects: a bad configuration, an unknown IPAM plugin.
    let (ok, v) = plugin(
        "ADD",
        "c2",
        Some(&pod.path()),
        "eth1",
        &json!({"cniVersion": "9.9.9", "name": "x", "type": "ferrule"}),
    );
    assert!(!ok && v["code"] == 1, "{v}");
    let bad_ipam = net_conf(
        &d.socket,
        &ipam,
        vhost.path(),
        json!({"ipam": {"type": "no-such-ipam"}}),
    );
    let (ok, v) = plugin("ADD", "c2", Some(&pod.path()), "eth1", &bad_ipam);
    assert!(
        !ok && v["msg"].as_str().unwrap().contains("not found"),
        "{v}"
    );

    // vhost-user: the socket is created in the vhost directory and reported.
    let vconf = net_conf(
        &d.socket,
        &ipam,
        vhost.path(),
        json!({"interface": "vhost-user"}),
    );
    let (ok, v) = plugin("ADD", "v1", Some(&pod.path()), "net1", &vconf);
    assert!(ok, "{v}");
    let socket = v["interfaces"][0]["socketPath"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        socket.starts_with(&vhost.path().display().to_string()),
        "{socket}"
    );
    assert!(Path::new(&socket).exists());

    // DEL removes the port, the veth and the addresses; a second DEL succeeds too.
    for _ in 0..2 {
        let (ok, v) = plugin("DEL", "c1", Some(&pod.path()), "eth0", &conf);
        assert!(ok, "{v}");
        let (ok, v) = plugin("DEL", "v1", None, "net1", &vconf);
        assert!(ok, "{v}");
    }
    assert!(port(&d.ctl_json(&["ports"]), &name).is_none());
    assert!(!Path::new(&socket).exists());
    let links = pod.exec(&["ip", "-o", "link"]);
    assert!(!links.contains("eth0"), "{links}");
    let held: Vec<_> = std::fs::read_dir(ipam.join("ferrule"))
        .map(|r| r.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        held.iter().all(|f| {
            let f = f.to_string_lossy();
            f.starts_with("last_reserved") || f == "lock"
        }),
        "addresses still reserved: {held:?}"
    );
}

/// `/etc/cni/net.d` and `/opt/cni/bin/ferrule` for the test, restored on drop.
struct CniInstall {
    saved: Option<PathBuf>,
    created_bin: Vec<PathBuf>,
}

impl CniInstall {
    fn new(conflist: &Value, scratch: &Path) -> CniInstall {
        let netd = Path::new("/etc/cni/net.d");
        let saved = netd.exists().then(|| {
            let to = scratch.join("net.d.saved");
            must(&["cp", "-a", "/etc/cni/net.d", to.to_str().unwrap()]);
            to
        });
        let mut me = CniInstall {
            saved,
            created_bin: Vec::new(),
        };
        let _ = std::fs::remove_dir_all(netd);
        std::fs::create_dir_all(netd).unwrap();
        std::fs::write(netd.join("10-ferrule.conflist"), conflist.to_string()).unwrap();
        let bin = Path::new("/opt/cni/bin");
        let mut missing = Vec::new();
        let mut at = bin.to_path_buf();
        while !at.exists() {
            missing.push(at.clone());
            at.pop();
        }
        std::fs::create_dir_all(bin).unwrap();
        me.created_bin.extend(missing.into_iter().rev());
        let plugin = bin.join("ferrule");
        let previous = scratch.join("ferrule.saved");
        if plugin.exists() {
            std::fs::copy(&plugin, &previous).unwrap();
        }
        std::fs::copy(cni_bin(), &plugin).unwrap();
        me
    }
}

impl Drop for CniInstall {
    fn drop(&mut self) {
        let netd = Path::new("/etc/cni/net.d");
        let _ = std::fs::remove_dir_all(netd);
        if let Some(saved) = &self.saved {
            let _ = sh(&["cp", "-a", saved.to_str().unwrap(), "/etc/cni/net.d"]);
        }
        let plugin = Path::new("/opt/cni/bin/ferrule");
        let _ = std::fs::remove_file(plugin);
        if let Some(scratch) = self.saved.as_ref().and_then(|s| s.parent()) {
            let previous = scratch.join("ferrule.saved");
            if previous.exists() {
                let _ = std::fs::copy(previous, plugin);
            }
        }
        for dir in self.created_bin.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A containerd of the test's own (its own root, state and socket), and the containers
/// it runs; every container is killed (so the runtime calls CNI DEL) and containerd
/// stopped on drop.
struct Containerd {
    dir: PathBuf,
    daemon: Child,
    runs: Vec<(String, Child)>,
}

impl Containerd {
    fn start(dir: &Path) -> Containerd {
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let daemon = Command::new("containerd")
            .arg("--root")
            .arg(dir.join("root"))
            .arg("--state")
            .arg(dir.join("state"))
            .arg("--address")
            .arg(dir.join("containerd.sock"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("containerd (Debian package containerd; scripts/setup.sh installs it)");
        let c = Containerd {
            dir: dir.to_path_buf(),
            daemon,
            runs: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !c.ctr(&["version"]).status.success() {
            assert!(Instant::now() < deadline, "containerd did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    fn ctr(&self, args: &[&str]) -> Output {
        Command::new("ctr")
            .arg("--address")
            .arg(self.dir.join("containerd.sock"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr")
    }

    /// A busybox root filesystem of its own for container `id`.
    fn rootfs(&self, id: &str) -> PathBuf {
        let root = self.dir.join(format!("rootfs-{id}"));
        for d in ["bin", "proc", "sys", "dev", "etc", "tmp"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect("busybox-static");
        let list = must(&["/bin/busybox", "--list"]);
        for applet in list.lines().filter(|a| *a != "busybox") {
            let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
        }
        root
    }

    /// Runs container `id` (`sleep`) with CNI networking, in the foreground of a `ctr
    /// run --rm` kept as a child: when the container is killed, ctr removes its network
    /// (CNI DEL) and the container.
    fn run(&mut self, id: &str) {
        let rootfs = self.rootfs(id);
        let child = Command::new("ctr")
            .arg("--address")
            .arg(self.dir.join("containerd.sock"))
            .args(["run", "--rm", "--cni", "--rootfs"])
            .arg(&rootfs)
            .args([id, "/bin/sleep", "600"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join(format!("{id}.log"))).unwrap())
            .spawn()
            .expect("ctr run");
        self.runs.push((id.to_string(), child));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = self.exec(id, &["ip", "-o", "addr", "show", "eth0"]);
            if o.status.success() && String::from_utf8_lossy(&o.stdout).contains("10.1.0.") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "container {id} got no network: {}",
                std::fs::read_to_string(self.dir.join(format!("{id}.log"))).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn exec(&self, id: &str, cmd: &[&str]) -> Output {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let exec_id = format!("x{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        // Without an image there is no PATH: programs by their busybox path.
        let program = format!("/bin/{}", cmd[0]);
        let mut args = vec!["task", "exec", "--exec-id", &exec_id, id, &program];
        args.extend_from_slice(&cmd[1..]);
        self.ctr(&args)
    }

    fn exec_ok(&self, id: &str, cmd: &[&str]) -> String {
        let o = self.exec(id, cmd);
        assert!(
            o.status.success(),
            "{id}: {cmd:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Kills container `id` and waits until ctr has removed it (and its network).
    fn remove(&mut self, id: &str) {
        let _ = self.ctr(&["task", "kill", "-s", "SIGKILL", id]);
        if let Some(i) = self.runs.iter().position(|(n, _)| n == id) {
            let (_, mut child) = self.runs.remove(i);
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            stop_timeout_child(&mut child);
        }
    }

    /// The address of `id`'s eth0 of one family.
    fn address(&self, id: &str, v6: bool) -> String {
        let out = self.exec_ok(
            id,
            &[
                "ip",
                "-o",
                if v6 { "-6" } else { "-4" },
                "addr",
                "show",
                "eth0",
                "scope",
                "global",
            ],
        );
        out.split_whitespace()
            .skip_while(|w| *w != "inet" && *w != "inet6")
            .nth(1)
            .and_then(|a| a.split('/').next())
            .unwrap_or_else(|| panic!("no address on {id}: {out}"))
            .to_string()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let ids: Vec<String> = self.runs.iter().map(|(n, _)| n.clone()).collect();
        for id in ids {
            self.remove(&id);
        }
        let _ = Command::new("kill")
            .arg(self.daemon.id().to_string())
            .status();
        stop_timeout_child(&mut self.daemon);
        // Whatever containerd left mounted under its root.
        let root = self.dir.join("root");
        if let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") {
            let mut ours: Vec<&str> = mounts
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .filter(|m| Path::new(m).starts_with(&self.dir))
                .collect();
            ours.sort_by_key(|m| std::cmp::Reverse(m.len()));
            for m in ours {
                let _ = sh(&["umount", "-l", m]);
            }
        }
        let _ = std::fs::remove_dir_all(root);
    }
}

#[test]
fn containers_run_by_containerd_get_their_network_from_ferrule() {
    let _serial = serial();
    if sh(&["which", "containerd"]).status.code() != Some(0) {
        panic!("containerd is not installed: run scripts/setup.sh as root");
    }
    let prefix = unique_prefix("ctrd");
    let tag = std::process::id() % 100_000;
    let router = Netns::router(&format!("fdr{tag}"), &format!("fdu{tag}"));
    let scratch = tempfile::tempdir().unwrap();
    let vhost = scratch.path().join("vhost");
    let mut d = ferruled_with_uplink(&prefix, router.root_end.as_deref().unwrap(), &vhost);
    let ipam = scratch.path().join("ipam");
    // A 3 MB file beyond the uplink, reachable only through SNAT.
    let www = scratch.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    let blob: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(www.join("blob"), &blob).unwrap();
    let mut router = router;
    router.servers.push(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &router.name,
                "python3",
                "-m",
                "http.server",
                "8080",
                "--bind",
                "203.0.113.1",
                "--directory",
            ])
            .arg(&www)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let conflist = json!({
        "cniVersion": "1.0.0",
        "name": "ferrule",
        "plugins": [net_conf(&d.socket, &ipam, &vhost, json!({}))]
    });
    let _install = CniInstall::new(&conflist, scratch.path());
    let mut rt = Containerd::start(scratch.path());
    rt.run("alpha");
    rt.run("beta");
    let (a4, b4) = (rt.address("alpha", false), rt.address("beta", false));
    let (a6, b6) = (rt.address("alpha", true), rt.address("beta", true));
    assert_ne!(a4, b4);
    // Each container is a Ferrule pod port.
    let ports = d.ctl_json(&["ports"]);
    let pods: Vec<&Value> = ports["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["role"] == "pod")
        .collect();
    assert_eq!(pods.len(), 2, "{ports}");
    // ctr names a container's network `NAMESPACE-ID`.
    let port_of = |id: &str| -> String {
        let name = ferrule_cni::plugin::port_name(&format!("default-{id}"), "eth0");
        assert!(
            pods.iter().any(|p| p["name"] == name.as_str()),
            "no port {name}: {ports}"
        );
        name
    };
    let (pa, pb) = (port_of("alpha"), port_of("beta"));

    // Gateway, each other over IPv4 and IPv6.
    rt.exec_ok("alpha", &["ping", "-c", "2", "-W", "2", "169.254.1.1"]);
    rt.exec_ok("alpha", &["ping", "-c", "2", "-W", "2", &b4]);
    rt.exec_ok("beta", &["ping", "-c", "2", "-W", "2", &a4]);
    rt.exec_ok("alpha", &["ping", "-6", "-c", "2", "-W", "2", &b6]);
    rt.exec_ok("beta", &["ping", "-6", "-c", "2", "-W", "2", &a6]);
    // A few MB over TCP beyond the uplink, masqueraded, byte-exact.
    let sum = rt.exec_ok(
        "alpha",
        &[
            "sh",
            "-c",
            "wget -q -O - http://203.0.113.1:8080/blob | sha256sum",
        ],
    );
    let want = must(&["sha256sum", www.join("blob").to_str().unwrap()]);
    assert_eq!(
        sum.split_whitespace().next(),
        want.split_whitespace().next(),
        "the file arrived changed"
    );
    let nat = d.ctl(&["nat", "dump"]);
    assert!(nat.status.success());

    // A NetworkPolicy rendered by ferrule-agent: beta accepts nothing from alpha.
    let state = scratch.path().join("manifests");
    std::fs::create_dir_all(&state).unwrap();
    let node = "node-1";
    let manifests = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: alpha, namespace: default, labels: {{app: alpha}}, annotations: {{ferrule.io/port: {pa}}}}}\n\
         spec: {{nodeName: {node}, containers: [{{name: c}}]}}\nstatus: {{podIPs: [{{ip: \"{a4}\"}}, {{ip: \"{a6}\"}}]}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: beta, namespace: default, labels: {{app: beta}}, annotations: {{ferrule.io/port: {pb}}}}}\n\
         spec: {{nodeName: {node}, containers: [{{name: c}}]}}\nstatus: {{podIPs: [{{ip: \"{b4}\"}}, {{ip: \"{b6}\"}}]}}\n---\n\
         apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: beta-not-from-alpha, namespace: default}}\n\
         spec:\n  podSelector: {{matchLabels: {{app: beta}}}}\n  policyTypes: [Ingress]\n  ingress:\n    - from: [{{ipBlock: {{cidr: 0.0.0.0/0, except: [\"{a4}/32\"]}}}}]\n"
    );
    std::fs::write(state.join("cluster.yaml"), manifests).unwrap();
    let agent = ferrule_e2e::Stopped(
        Command::new(agent_bin())
            .args([
                "--state",
                state.to_str().unwrap(),
                "--node",
                node,
                "--interval-ms",
                "200",
            ])
            .arg("--socket")
            .arg(&d.socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(scratch.path().join("agent.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while rt
        .exec("alpha", &["ping", "-c", "1", "-W", "1", &b4])
        .status
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "the policy did not stop alpha -> beta: {}",
            std::fs::read_to_string(scratch.path().join("agent.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The other direction is untouched.
    rt.exec_ok("beta", &["ping", "-c", "2", "-W", "2", &a4]);
    drop(agent);
    // The tables go before the ports: a port with tables attached is not deleted.
    let mut clear = Command::new(ferrulectl_bin())
        .arg("--socket")
        .arg(&d.socket)
        .args(["acl", "apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    clear
        .stdin
        .take()
        .unwrap()
        .write_all(b"tables: []\n")
        .unwrap();
    assert!(clear.wait().unwrap().success());

    // Removing the containers removes their ports and releases their addresses.
    rt.remove("alpha");
    rt.remove("beta");
    let ports = d.ctl_json(&["ports"]);
    assert!(
        port(&ports, &pa).is_none() && port(&ports, &pb).is_none(),
        "{ports}"
    );
    let left: Vec<String> = std::fs::read_dir(ipam.join("ferrule"))
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        left.iter()
            .all(|f| f.starts_with("last_reserved") || f == "lock"),
        "addresses still reserved: {left:?}"
    );
    let links = must(&["ip", "-o", "link"]);
    for id in ["default-alpha", "default-beta"] {
        let veth = ferrule_cni::plugin::host_veth_name(id, "eth0");
        assert!(!links.contains(&veth), "{veth} left behind: {links}");
    }
    drop(rt);
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

#[test]
fn a_crash_loses_nothing_given_at_run_time() {
    let _serial = serial();
    let prefix = unique_prefix("crash");
    let tag = std::process::id() % 100_000;
    let router = Netns::router(&format!("fer{tag}"), &format!("feu{tag}"));
    let keep = tempfile::tempdir().unwrap();
    let state = keep.path().join("lib/state.json");
    let extra = format!("[state]\npath = \"{}\"\n", state.display());
    let mut d = ferruled_with_uplink_and(
        &prefix,
        router.root_end.as_deref().unwrap(),
        keep.path(),
        &extra,
    );
    let ipam = keep.path().join("ipam");
    let conf = net_conf(&d.socket, &ipam, keep.path(), json!({}));
    let (p1, p2) = (
        Netns::new(&format!("fe1p{tag}")),
        Netns::new(&format!("fe2p{tag}")),
    );
    let (ok, r1) = plugin("ADD", "k1", Some(&p1.path()), "eth0", &conf);
    assert!(ok, "{r1}");
    let (ok, r2) = plugin("ADD", "k2", Some(&p2.path()), "eth0", &conf);
    assert!(ok, "{r2}");
    let ip_of = |r: &Value| {
        r["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string()
    };
    let (a1, a2) = (ip_of(&r1), ip_of(&r2));
    // Run-time state of every kind: a route, an ACL table attached to k2's port, VPC.
    assert!(d
        .ctl(&["route", "add", "198.51.100.0/24", "--blackhole"])
        .status
        .success());
    let k2 = ferrule_cni::plugin::port_name("k2", "eth0");
    let acl = format!(
        "tables:\n  - name: k2-in\n    rules:\n      - {{action: deny, proto: udp, dst_port: 9}}\n      - {{action: permit}}\n\
         attach:\n  - {{port: {k2}, direction: egress, table: k2-in}}\n"
    );
    let acl_file = keep.path().join("acl.yaml");
    std::fs::write(&acl_file, acl).unwrap();
    assert!(d
        .ctl(&["acl", "apply", "-f", acl_file.to_str().unwrap()])
        .status
        .success());
    assert!(d
        .ctl(&[
            "vpc",
            "set",
            "--node-ip",
            "192.0.2.10",
            "--vpc-cidr",
            "192.0.2.0/24",
            "--vpc-cidr",
            "10.1.0.0/16"
        ])
        .status
        .success());
    p1.exec(&["ping", "-c", "1", "-W", "2", &a2]);
    let before_ports = d.ctl_json(&["ports"]);
    let before_routes = d.ctl_json(&["route", "dump"]);

    // Under traffic: kill -9, start again. No CNI call, no re-apply.
    let mut pinger = Command::new("ip")
        .args([
            "netns", "exec", &p1.name, "ping", "-i", "0.05", "-W", "1", &a2,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let crashed = Instant::now();
    d.crash_and_restart(&[]).expect("restart");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !sh(&[
        "ip", "netns", "exec", &p1.name, "ping", "-c", "1", "-W", "1", &a2,
    ])
    .status
    .success()
    {
        assert!(
            Instant::now() < deadline,
            "pods apart after the restart:\n{}",
            d.log_text()
        );
    }
    let back = crashed.elapsed();
    stop_timeout_child(&mut pinger);
    p2.exec(&["ping", "-c", "1", "-W", "2", &a1]);
    p1.exec(&["ping", "-c", "1", "-W", "2", "203.0.113.1"]);
    eprintln!(
        "pods reach each other again {:.1} s after the crash",
        back.as_secs_f64()
    );
    let ports = d.ctl_json(&["ports"]);
    for name in ["k1", "k2"] {
        let pname = ferrule_cni::plugin::port_name(name, "eth0");
        let before = port(&before_ports, &pname).cloned().unwrap();
        let after = port(&ports, &pname).unwrap_or_else(|| panic!("{pname} not restored: {ports}"));
        for key in ["pod", "role", "devargs", "gateway_ip"] {
            assert_eq!(before[key], after[key], "{pname}.{key}");
        }
    }
    assert_eq!(d.ctl_json(&["route", "dump"]), before_routes);
    let dump = d.ctl_json(&["acl", "dump"]);
    assert_eq!(dump["tables"][0]["name"], "k2-in", "{dump}");
    assert_eq!(
        dump["tables"][0]["attached"][0]["port"],
        k2.as_str(),
        "{dump}"
    );
    let vpc = d.ctl_json(&["vpc", "show"]);
    assert!(vpc.to_string().contains("192.0.2.10"), "{vpc}");

    // A corrupt state file stops the start, naming the file; --discard-state starts
    // without it.
    std::fs::write(&state, b"{\"version\": 1, \"ports\": [").unwrap();
    let e = d
        .crash_and_restart(&[])
        .expect_err("started on a corrupt state file");
    assert!(e.to_string().contains(&state.display().to_string()), "{e}");
    d.crash_and_restart(&["--discard-state"])
        .expect("restart with --discard-state");
    assert!(state.with_extension("discarded").exists());
    assert!(port(&d.ctl_json(&["ports"]), &k2).is_none());
    for (id, ns) in [("k1", &p1), ("k2", &p2)] {
        let (ok, v) = plugin("DEL", id, Some(&ns.path()), "eth0", &conf);
        assert!(ok, "{v}");
    }
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

/// A network configuration with the reference `static` IPAM: the pod gets `address`.
fn static_conf(socket: &Path, vhost_dir: &Path, address: &str) -> Value {
    net_conf(
        socket,
        Path::new("/nonexistent"),
        vhost_dir,
        json!({"ipam": {"type": "static", "addresses": [{"address": address}]}}),
    )
}

/// Runs the plugin for pod `ns/name` (container `id`) on `eth0`.
fn plugin_for(cmd: &str, id: &str, pod: (&str, &str), netns: &Path, conf: &Value) -> (bool, Value) {
    run_plugin(cmd, id, Some(netns), "eth0", pod, conf)
}

const SAME_NAMES: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec: {nodeName: node-1, containers: [{name: c}]}
status: {podIP: 10.1.0.21}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: blog, labels: {app: web}}
spec: {nodeName: node-1, containers: [{name: c}]}
status: {podIP: 10.1.0.22}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: shop, labels: {app: client}}
spec: {nodeName: node-1, containers: [{name: c}]}
status: {podIP: 10.1.0.23}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: closed, namespace: blog}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress: []
"#;

#[test]
fn pods_are_bound_by_namespace_and_name_and_policy_waits_for_them() {
    let _serial = serial();
    let prefix = unique_prefix("nsname");
    let tag = std::process::id() % 100_000;
    let router = Netns::router(&format!("fnr{tag}"), &format!("fnu{tag}"));
    let vhost = tempfile::tempdir().unwrap();
    let d = ferruled_with_uplink(&prefix, router.root_end.as_deref().unwrap(), vhost.path());
    let state = vhost.path().join("cluster.yaml");
    std::fs::write(&state, SAME_NAMES).unwrap();
    // `policy verdict` needs no daemon for a cluster with one pod name in two
    // namespaces.
    let v = d.ctl(&[
        "policy",
        "verdict",
        "--state",
        state.to_str().unwrap(),
        "--from",
        "shop/client",
        "--to",
        "blog/web",
        "--port",
        "80",
        "--protocol",
        "TCP",
    ]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
    assert!(v.status.success() && text.contains("deny"), "{text}");

    // Policy first: no pod has a port yet; the apply succeeds and its attachments wait.
    let o = d.ctl(&[
        "--json",
        "policy",
        "apply",
        "--state",
        state.to_str().unwrap(),
        "--node",
        "node-1",
    ]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    let dump = d.ctl_json(&["acl", "dump"]);
    let waiting = dump["pending"].to_string();
    assert!(waiting.contains("blog/web"), "{dump}");

    // Then the pods: the same name in two namespaces, and a client.
    let pods: Vec<(Netns, &str, (&str, &str), &str)> = vec![
        (
            Netns::new(&format!("fn1{tag}")),
            "s-web",
            ("shop", "web"),
            "10.1.0.21/24",
        ),
        (
            Netns::new(&format!("fn2{tag}")),
            "b-web",
            ("blog", "web"),
            "10.1.0.22/24",
        ),
        (
            Netns::new(&format!("fn3{tag}")),
            "s-cli",
            ("shop", "client"),
            "10.1.0.23/24",
        ),
    ];
    for (ns, id, pod, address) in &pods {
        let (ok, v) = plugin_for(
            "ADD",
            id,
            *pod,
            &ns.path(),
            &static_conf(&d.socket, vhost.path(), address),
        );
        assert!(ok, "{v}");
    }
    let dump = d.ctl_json(&["acl", "dump"]);
    assert!(
        dump["pending"].as_array().is_none_or(|p| p.is_empty()),
        "{dump}"
    );
    let client = &pods[2].0;
    // The first packet to blog/web is already denied; shop/web (same name) is open.
    assert!(!sh(&[
        "ip",
        "netns",
        "exec",
        &client.name,
        "ping",
        "-c",
        "1",
        "-W",
        "1",
        "10.1.0.22"
    ])
    .status
    .success());
    client.exec(&["ping", "-c", "1", "-W", "2", "10.1.0.21"]);

    // The pod restarts (a new container, a new port): the table follows it.
    let (ok, v) = plugin_for(
        "DEL",
        "b-web",
        ("blog", "web"),
        &pods[1].0.path(),
        &static_conf(&d.socket, vhost.path(), "10.1.0.22/24"),
    );
    assert!(ok, "{v}");
    assert!(d.ctl_json(&["acl", "dump"])["pending"]
        .to_string()
        .contains("blog/web"));
    let (ok, v) = plugin_for(
        "ADD",
        "b-web-2",
        ("blog", "web"),
        &pods[1].0.path(),
        &static_conf(&d.socket, vhost.path(), "10.1.0.22/24"),
    );
    assert!(ok, "{v}");
    assert!(!sh(&[
        "ip",
        "netns",
        "exec",
        &client.name,
        "ping",
        "-c",
        "1",
        "-W",
        "1",
        "10.1.0.22"
    ])
    .status
    .success());

    // Pod first, policy second: shop/web closes too.
    let closed_shop = format!(
        "{SAME_NAMES}---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: closed, namespace: shop}}\n\
         spec:\n  podSelector: {{matchLabels: {{app: web}}}}\n  policyTypes: [Ingress]\n  ingress: []\n"
    );
    std::fs::write(&state, closed_shop).unwrap();
    let o = d.ctl(&[
        "policy",
        "apply",
        "--state",
        state.to_str().unwrap(),
        "--node",
        "node-1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!sh(&[
        "ip",
        "netns",
        "exec",
        &client.name,
        "ping",
        "-c",
        "1",
        "-W",
        "1",
        "10.1.0.21"
    ])
    .status
    .success());
    for ((ns, _, pod, address), id) in pods.iter().zip(["s-web", "b-web-2", "s-cli"]) {
        let (ok, v) = plugin_for(
            "DEL",
            id,
            *pod,
            &ns.path(),
            &static_conf(&d.socket, vhost.path(), address),
        );
        assert!(ok, "{v}");
    }
}

const BLUE_NETWORK: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: blue
  labels: {k8s.ovn.org/primary-user-defined-network: ""}
---
apiVersion: v1
kind: Namespace
metadata:
  name: green
  labels: {k8s.ovn.org/primary-user-defined-network: ""}
---
apiVersion: k8s.ovn.org/v1
kind: UserDefinedNetwork
metadata: {name: tenant, namespace: blue}
spec: {topology: Layer3, role: Primary, subnets: ["10.128.0.0/16/24"], mtu: 1400}
"#;

#[test]
fn a_pod_of_a_primary_network_namespace_gets_both_interfaces_in_one_add() {
    let _serial = serial();
    let prefix = unique_prefix("cniudn");
    let tag = std::process::id() % 100_000;
    let router = Netns::router(&format!("fur{tag}"), &format!("fuu{tag}"));
    // "The internet" beyond the router, besides 203.0.113.1 (which stands for the
    // Kubernetes API here: the default network's interface still reaches it).
    router.exec(&["ip", "addr", "add", "198.51.100.1/32", "dev", "lo"]);
    let vhost = tempfile::tempdir().unwrap();
    let state = vhost.path().join("state.json");
    let mut d = ferruled_with_uplink_and(
        &prefix,
        router.root_end.as_deref().unwrap(),
        vhost.path(),
        &format!(
            "[state]\npath = \"{}\"\n\n[networks]\ncluster_subnets = [\"10.1.0.0/16\"]\n\
             default_network_allow = [\"203.0.113.1/32\"]\n",
            state.display()
        ),
    );
    let manifests = vhost.path().join("blue.yaml");
    std::fs::write(&manifests, BLUE_NETWORK).unwrap();
    let o = d.ctl(&["network", "apply", "-f", manifests.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // A namespace that asks for a primary network that does not exist gets no pod.
    let lost = Netns::new(&format!("fug{tag}"));
    let conf = static_conf(&d.socket, vhost.path(), "10.1.0.40/24");
    let (ok, v) = plugin_for("ADD", "g-1", ("green", "web"), &lost.path(), &conf);
    assert!(!ok, "{v}");
    assert!(v.to_string().contains("cannot be attached yet"), "{v}");
    assert!(d.ctl_json(&["ports"])["ports"].as_array().unwrap().len() == 1);

    let pod = Netns::new(&format!("fub{tag}"));
    let conf = static_conf(&d.socket, vhost.path(), "10.1.0.41/24");
    let (ok, result) = plugin_for("ADD", "b-1", ("blue", "web"), &pod.path(), &conf);
    assert!(ok, "{result}\n{}", d.log_text());
    let names: Vec<&str> = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert_eq!(names.len(), 4, "{result}");
    assert_eq!((names[1], names[3]), ("eth0", "ovn-udn1"), "{result}");
    let ips: Vec<(&str, u64)> = result["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["address"].as_str().unwrap(),
                i["interface"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ips, [("10.1.0.41/32", 1), ("10.128.0.2/32", 3)], "{result}");
    let routes = result["routes"].to_string();
    assert!(
        routes.contains(r#"{"dst":"0.0.0.0/0","gw":"10.128.0.1"}"#),
        "{result}"
    );
    assert!(
        routes.contains(r#"{"dst":"203.0.113.1/32","gw":"169.254.1.1"}"#),
        "{result}"
    );
    let table = pod.exec(&["ip", "route"]);
    assert!(
        table.contains("default via 10.128.0.1 dev ovn-udn1"),
        "{table}"
    );
    assert!(
        table.contains("203.0.113.1 via 169.254.1.1 dev eth0"),
        "{table}"
    );

    // The primary network carries the default route out, masqueraded; the default
    // network's interface still reaches "the Kubernetes API".
    pod.exec(&["ping", "-c", "1", "-W", "2", "198.51.100.1"]);
    pod.exec(&["ping", "-c", "1", "-W", "2", "203.0.113.1"]);
    let ports = d.ctl_json(&["ports"]);
    let locked: Vec<bool> = ports["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["pod"] == "blue/web")
        .map(|p| p["locked"].as_bool().unwrap_or(false))
        .collect();
    assert_eq!(locked.len(), 2, "{ports:#}");
    assert_eq!(locked.iter().filter(|l| **l).count(), 1, "{ports:#}");
    // Anything else on the default network's interface is dropped and counted.
    pod.exec(&[
        "ip",
        "route",
        "add",
        "198.51.100.1/32",
        "via",
        "169.254.1.1",
        "dev",
        "eth0",
    ]);
    assert!(!sh(&[
        "ip",
        "netns",
        "exec",
        &pod.name,
        "ping",
        "-c",
        "1",
        "-W",
        "1",
        "198.51.100.1"
    ])
    .status
    .success());
    let stats = d.ctl_json(&["stats"]);
    let locked_drops = stats["totals"]["drop_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["reason"] == "default-network-locked")
        .and_then(|r| r["packets"].as_u64())
        .unwrap_or(0);
    assert!(locked_drops >= 1, "{stats:#}");
    pod.exec(&["ip", "route", "del", "198.51.100.1/32"]);

    // A crash loses nothing: the network, both ports and the pod's address are back.
    d.crash_and_restart(&[]).expect("restart");
    let list = d.ctl_json(&["network", "list", "blue.tenant"]);
    assert_eq!(list["networks"][0]["allocated"], 1, "{list:#}");
    assert_eq!(
        list["networks"][0]["ports"].as_array().unwrap().len(),
        1,
        "{list:#}"
    );
    let ports = d.ctl_json(&["ports"]);
    assert!(ports.to_string().contains("10.128.0.2"), "{ports:#}");
    pod.exec(&["ping", "-c", "1", "-W", "2", "198.51.100.1"]);

    // CHECK knows both interfaces; DEL removes both and gives the address back.
    let mut check = conf.clone();
    check["prevResult"] = result.clone();
    let (ok, v) = plugin_for("CHECK", "b-1", ("blue", "web"), &pod.path(), &check);
    assert!(ok, "{v}");
    let (ok, v) = plugin_for("DEL", "b-1", ("blue", "web"), &pod.path(), &conf);
    assert!(ok, "{v}");
    assert_eq!(d.ctl_json(&["ports"])["ports"].as_array().unwrap().len(), 1);
    let list = d.ctl_json(&["network", "list", "blue.tenant"]);
    assert_eq!(list["networks"][0]["allocated"], 0, "{list:#}");
    // Now the network can go.
    let o = d.ctl(&["network", "del", "blue.tenant"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Creates the test's world in moto (argv[1]: the endpoint): a VPC 10.0.0.0/16, a
/// subnet 10.0.0.0/20, a security group and a t3.medium instance in it (3 ENIs × 6
/// addresses); prints the instance ID.
const MOTO_WORLD: &str = r#"
import boto3, sys
ec2 = boto3.client("ec2", endpoint_url=sys.argv[1], region_name="us-east-1",
                   aws_access_key_id="testing", aws_secret_access_key="testing")
vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/20")["Subnet"]["SubnetId"]
sg = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
i = ec2.run_instances(ImageId="ami-12c6146b", InstanceType="t3.medium", MinCount=1,
                      MaxCount=1, SubnetId=subnet, SecurityGroupIds=[sg])["Instances"][0]
print(i["InstanceId"])
"#;

/// Answers each TCP connection on port 8080 with the address it came from.
const PEER_SERVER: &str = r#"
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080)); s.listen(8)
print("listening", flush=True)
while True:
    c, peer = s.accept()
    c.sendall(peer[0].encode() + b"\n"); c.close()
"#;

/// Connects to argv[1]:8080 and prints the source address the server saw.
const PEER_CLIENT: &str = r#"
import socket, sys
c = socket.create_connection((sys.argv[1], 8080), timeout=10)
print(c.makefile().readline().strip(), flush=True)
"#;

/// A child process stopped by PID when dropped.
struct Guarded(Child);

impl Drop for Guarded {
    fn drop(&mut self) {
        stop_timeout_child(&mut self.0);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `ipam.show` of the ferrule-ipamd at `socket`.
fn ipam_show(socket: &Path) -> Value {
    let mut client = ferrule_api::client::Client::connect(socket).expect("connect to ipamd");
    client
        .call(ferrule_api::ipam::ipam_method::SHOW, Value::Null)
        .expect("ipam.show")
}

/// Waits up to `secs` for `cond`, panicking with `what` and the last value seen.
fn wait_for(
    what: &str,
    secs: u64,
    mut get: impl FnMut() -> Value,
    cond: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = get();
        if cond(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {v:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn tx_packets(d: &Ferruled, port: &str) -> u64 {
    let ports = d.ctl_json(&["ports"]);
    ports["ports"]
        .as_array()
        .and_then(|l| l.iter().find(|p| p["name"] == port))
        .and_then(|p| p["counters"]["tx_packets"].as_u64())
        .unwrap_or_else(|| panic!("no port {port}: {ports:#}"))
}

/// The AWS VPC CNI model end to end: EC2 is moto; `ferrule-ipamd` finds the instance,
/// grows its pool to MINIMUM_IP_TARGET (a second ENI) and pushes the ENIs to
/// `ferruled`, where a veth with each ENI's MAC is an uplink port (the VPC behind them
/// a bridge in a namespace: one subnet, one gateway, as on EC2); the CNI plugin gets
/// each pod's address from ipamd. A pod on ENI 1 and a pod on ENI 0 each reach a VPC
/// server through their own ENI's port with their own address; the pod on ENI 1
/// reaches a server outside the VPC through ENI 0, masqueraded to the primary IP; DEL
/// puts the address into cooling.
#[test]
fn pods_get_vpc_addresses_from_ipamd_and_leave_by_their_enis() {
    let _serial = serial();
    let python = venv().join("bin/python");
    let moto_server = venv().join("bin/moto_server");
    assert!(
        moto_server.exists(),
        "{} missing: run scripts/setup.sh (it installs moto[server] into the project venv)",
        moto_server.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let moto_port = free_port();
    let _moto = Guarded(
        Command::new(&moto_server)
            .args(["-H", "127.0.0.1", "-p", &moto_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server"),
    );
    let endpoint = format!("http://127.0.0.1:{moto_port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", moto_port)).is_err() {
        assert!(Instant::now() < deadline, "moto_server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let world = Command::new(&python)
        .args(["-c", MOTO_WORLD, &endpoint])
        .stdin(Stdio::null())
        .output()
        .expect("python");
    assert!(
        world.status.success(),
        "{}",
        String::from_utf8_lossy(&world.stderr)
    );
    let instance = String::from_utf8_lossy(&world.stdout).trim().to_string();

    let prefix = unique_prefix("ipamd");
    let d = Ferruled::start(&base_config(&prefix), &prefix).expect("start ferruled");
    let ipam_socket = dir.path().join("ipamd.sock");
    let ipamd_log = std::fs::File::create(dir.path().join("ipamd.log")).expect("log");
    let _ipamd = Guarded(
        Command::new(ipamd_bin())
            .args(["--instance-id", &instance, "--region", "us-east-1"])
            .args(["--ec2-endpoint", &endpoint, "--cluster", "e2e"])
            .arg("--socket")
            .arg(&ipam_socket)
            .arg("--datastore")
            .arg(dir.path().join("ipamd.json"))
            .args(["--introspection", &format!("127.0.0.1:{}", free_port())])
            .arg("--ferruled-socket")
            .arg(&d.socket)
            .args(["--reconcile-interval", "500ms", "--cooling", "2s"])
            .env("MINIMUM_IP_TARGET", "8")
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .stdin(Stdio::null())
            .stdout(ipamd_log.try_clone().expect("log"))
            .stderr(ipamd_log)
            .spawn()
            .expect("start ferrule-ipamd"),
    );
    let log = || std::fs::read_to_string(dir.path().join("ipamd.log")).unwrap_or_default();
    let pool = wait_for(
        "ipamd's pool never reached two ENIs and 8 addresses",
        90,
        || {
            if ipam_socket.exists() {
                ipam_show(&ipam_socket)
            } else {
                json!({"log": log()})
            }
        },
        |s| {
            s["enis"].as_array().is_some_and(|e| e.len() == 2) && s["available"].as_u64() >= Some(8)
        },
    );

    // The VPC: a bridge (10.0.0.1/20, the subnet's gateway) with one veth per ENI; the
    // ENI's end in the root namespace carries its MAC and is ferruled's uplink port.
    let vpc = Netns::new(&format!("{prefix}-vpc"));
    for cmd in [
        vec!["ip", "link", "set", "lo", "up"],
        vec!["ip", "link", "add", "br0", "type", "bridge"],
        vec!["ip", "link", "set", "br0", "up"],
        vec!["ip", "addr", "add", "10.0.0.1/20", "dev", "br0"],
        vec!["ip", "addr", "add", "10.0.200.9/32", "dev", "lo"],
        vec!["ip", "addr", "add", "203.0.113.1/32", "dev", "lo"],
    ] {
        vpc.exec(&cmd);
    }
    let mut enis: Vec<(u64, String, String, String)> = pool["enis"]
        .as_array()
        .expect("enis")
        .iter()
        .map(|e| {
            (
                e["device_index"].as_u64().expect("device_index"),
                e["id"].as_str().expect("id").to_string(),
                e["mac"].as_str().expect("mac").to_string(),
                e["primary_ip"].as_str().expect("primary_ip").to_string(),
            )
        })
        .collect();
    enis.sort();
    let mut eni_links = Vec::new();
    for (index, _, mac, _) in &enis {
        // Interface names: at most 15 characters, unique per test process.
        let tag = std::process::id() & 0xffff;
        let (root, inner) = (format!("fe{tag:x}e{index}"), format!("fe{tag:x}g{index}"));
        let _ = sh(&["ip", "link", "del", &root]);
        must(&[
            "ip", "link", "add", &root, "type", "veth", "peer", "name", &inner,
        ]);
        eni_links.push(root.clone());
        must(&["ip", "link", "set", &root, "address", mac]);
        must(&["ip", "link", "set", &inner, "netns", &vpc.name]);
        must(&["ip", "link", "set", &root, "up"]);
        let _ = sh(&[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{root}.disable_ipv6=1"),
        ]);
        vpc.exec(&["ip", "link", "set", &inner, "master", "br0"]);
        vpc.exec(&["ip", "link", "set", &inner, "up"]);
        vpc.exec(&["ethtool", "-K", &inner, "tx", "off"]);
        let o = d.ctl(&[
            "port",
            "add",
            &format!("eth{index}"),
            "--af-packet",
            &root,
            "--role",
            "uplink",
            "--mac",
            mac,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    struct Links(Vec<String>);
    impl Drop for Links {
        fn drop(&mut self) {
            for l in &self.0 {
                let _ = sh(&["ip", "link", "del", l]);
            }
        }
    }
    let _links = Links(eni_links);
    let o = d.ctl(&[
        "route",
        "add",
        "0.0.0.0/0",
        "--port",
        "eth0",
        "--via",
        "10.0.0.1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // ipamd pushes the ENIs at its next round; ferruled binds them by MAC.
    let vpc_state = wait_for(
        "ferruled never got the ENIs from ipamd",
        30,
        || d.ctl_json(&["vpc", "show"]),
        |v| v["enis"].as_array().is_some_and(|e| e.len() == 2),
    );
    assert_eq!(
        vpc_state["snat_address"].as_str(),
        Some(enis[0].3.as_str()),
        "the node IP is the primary ENI's primary IP: {vpc_state:#}"
    );

    // Pods through the CNI plugin, until one holds an address of each ENI.
    let vhost_dir = dir.path().join("vhost");
    let conf = net_conf(
        &d.socket,
        Path::new("/nonexistent"),
        &vhost_dir,
        json!({"ipam": {"type": "ferrule-ipamd", "socket": ipam_socket}}),
    );
    let mut pods: Vec<(Netns, String, String, String)> = Vec::new(); // (ns, id, ip, eni)
    for k in 0..10 {
        if [&enis[0].1, &enis[1].1]
            .iter()
            .all(|e| pods.iter().any(|p| &&p.3 == e))
        {
            break;
        }
        let ns = Netns::new(&format!("{prefix}-p{k}"));
        let id = format!("{prefix}-c{k}");
        let (ok, result) = plugin("ADD", &id, Some(&ns.path()), "eth0", &conf);
        assert!(ok, "ADD: {result:#}\n{}", log());
        let ip = result["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.strip_suffix("/32"))
            .unwrap_or_else(|| panic!("a /32: {result:#}"))
            .to_string();
        let held = ipam_show(&ipam_socket);
        let eni = held["allocations"]
            .as_array()
            .and_then(|l| l.iter().find(|a| a["ip"] == ip.as_str()))
            .and_then(|a| a["eni_id"].as_str())
            .unwrap_or_else(|| panic!("ipamd holds {ip}: {held:#}"))
            .to_string();
        // The gateway's MAC is permanent in the pod (the seed's static ARP entry).
        let neigh = ns.exec(&["ip", "neigh", "show", "169.254.1.1"]);
        assert!(neigh.contains("PERMANENT"), "{neigh}");
        pods.push((ns, id, ip, eni));
    }
    let on = |eni: &str| {
        pods.iter()
            .find(|p| p.3 == eni)
            .unwrap_or_else(|| panic!("no pod on {eni}"))
    };
    let (pod0, pod1) = (on(&enis[0].1), on(&enis[1].1));

    let mut server = vpc_server(&vpc, dir.path());
    let client = dir.path().join("client.py");
    std::fs::write(&client, PEER_CLIENT).expect("write");
    let connect = |pod: &Netns, to: &str| {
        pod.exec(&[
            python.to_str().expect("path"),
            client.to_str().expect("path"),
            to,
        ])
        .trim()
        .to_string()
    };
    for (pod, port) in [(pod1, "eth1"), (pod0, "eth0")] {
        let before = tx_packets(&d, port);
        assert_eq!(
            connect(&pod.0, "10.0.200.9"),
            pod.2,
            "the VPC server sees the pod's own address"
        );
        assert!(
            tx_packets(&d, port) >= before + 3,
            "{} left by {port}",
            pod.2
        );
    }
    // Outside the VPC: through the primary ENI, masqueraded to its primary IP.
    let before = (tx_packets(&d, "eth0"), tx_packets(&d, "eth1"));
    assert_eq!(connect(&pod1.0, "203.0.113.1"), enis[0].3);
    assert!(tx_packets(&d, "eth0") >= before.0 + 3);
    assert!(
        tx_packets(&d, "eth1") <= before.1 + 1,
        "masqueraded traffic left by ENI 1"
    );
    let _ = server.kill();
    let _ = server.wait();

    // CHECK holds; DEL gives the address back into cooling.
    let prev = json!({"cniVersion": "1.0.0", "ips": [{"address": format!("{}/32", pod1.2)}]});
    let mut check_conf = conf.clone();
    check_conf["prevResult"] = prev;
    let (ok, out) = plugin("CHECK", &pod1.1, Some(&pod1.0.path()), "eth0", &check_conf);
    assert!(ok, "CHECK: {out:#}");
    let (ok, out) = plugin("DEL", &pod1.1, Some(&pod1.0.path()), "eth0", &conf);
    assert!(ok, "DEL: {out:#}");
    let after = ipam_show(&ipam_socket);
    let state = after["enis"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["ips"].as_array().into_iter().flatten())
        .find(|i| i["ip"] == pod1.2.as_str())
        .map(|i| i["state"].clone());
    assert_eq!(state, Some(json!("cooling")), "{after:#}");
    for p in &pods {
        let (ok, out) = plugin("DEL", &p.1, Some(&p.0.path()), "eth0", &conf);
        assert!(ok, "DEL: {out:#}");
    }
}

/// The VPC server in `vpc`, listening.
fn vpc_server(vpc: &Netns, dir: &Path) -> Child {
    let script = dir.join("server.py");
    std::fs::write(&script, PEER_SERVER).expect("write");
    let python = venv().join("bin/python");
    let mut child = Command::new("ip")
        .args(["netns", "exec", &vpc.name])
        .arg(&python)
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("server");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().expect("stdout")),
        &mut line,
    )
    .expect("read");
    assert_eq!(line.trim(), "listening");
    child
}
