//! The kernel-stack test topology: network namespaces for two pods, a router and
//! ferruled (af_packet ports), with the demo configuration.

use crate::base_config;
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// The demo topology (scripts/netns-topology.sh): pods `pa`, `pb`, router `rt`, and
/// `fr` where ferruled runs; torn down on drop.
pub struct Topology(String);

/// ICMP errors the workers sent, summed, in a `stats.get` reply.
pub fn icmp_errors(stats: &Value) -> u64 {
    stats["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter_map(|w| w["icmp_errors"].as_u64())
        .sum()
}

impl Topology {
    /// Creates the namespaces and links (root needed).
    pub fn up(tag: &str) -> Topology {
        let name = format!("fe{tag}{}", std::process::id() % 100_000);
        let t = Topology(name);
        let st = Command::new(script())
            .args(["up", &t.0])
            .status()
            .expect("run netns-topology.sh");
        assert!(st.success(), "netns-topology.sh up failed (root needed)");
        t
    }

    /// The full name of namespace `n` (pa, pb, rt, fr).
    pub fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.0)
    }

    /// Adds a pod namespace `n` joined to ferruled's namespace by a veth pair: `eth0`
    /// (MAC `mac`, transmit checksumming off) in the pod, `fr_if` on ferruled's side;
    /// both up, no address (the test gives them). Deleted with the topology.
    pub fn add_pod(&self, n: &str, fr_if: &str, mac: &str) {
        let sh = |args: &[&str]| {
            let o = Command::new(args[0])
                .args(&args[1..])
                .stdin(Stdio::null())
                .output()
                .expect("run");
            assert!(o.status.success(), "{args:?}: {}", text(&o));
        };
        let (pod, fr) = (self.ns(n), self.ns("fr"));
        sh(&["ip", "netns", "add", &pod]);
        sh(&["ip", "-n", &pod, "link", "set", "lo", "up"]);
        sh(&[
            "ip", "link", "add", fr_if, "netns", &fr, "type", "veth", "peer", "name", "eth0",
            "netns", &pod,
        ]);
        sh(&["ip", "-n", &pod, "link", "set", "eth0", "address", mac]);
        sh(&[
            "ip", "netns", "exec", &pod, "ethtool", "-K", "eth0", "tx", "off",
        ]);
        sh(&[
            "ip",
            "netns",
            "exec",
            &pod,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
        ]);
        sh(&["ip", "-n", &fr, "link", "set", fr_if, "up"]);
        sh(&["ip", "-n", &pod, "link", "set", "eth0", "up"]);
    }

    /// Addresses pod namespace `n`'s `eth0` with `addr`/32, a link route to `gateway`
    /// and the default route through it.
    pub fn address_pod(&self, n: &str, addr: &str, gateway: &str) {
        let host = format!("{addr}/32");
        for args in [
            vec!["ip", "addr", "add", &host, "dev", "eth0"],
            vec![
                "ip", "route", "add", gateway, "dev", "eth0", "scope", "link",
            ],
            vec![
                "ip", "route", "add", "default", "via", gateway, "dev", "eth0",
            ],
        ] {
            let o = self.run(n, &args);
            assert!(o.status.success(), "{args:?}: {}", text(&o));
        }
    }

    /// Runs a command inside namespace `n`.
    pub fn run(&self, n: &str, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns(n)])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ip netns exec")
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["down", &self.0]).status();
    }
}

/// scripts/netns-topology.sh.
pub fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns-topology.sh")
}

/// configs/ferrule.toml (the demo topology) with this test's EAL settings and a
/// 1400-byte MTU on the uplink.
pub fn config(prefix: &str) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/ferrule.toml"),
    )
    .expect("read configs/ferrule.toml");
    let tail = &text[text.find("[log]").expect("[log] section")..];
    let base = base_config(prefix);
    let base = &base[..base.find("[log]").expect("[log]")];
    let tail = tail.replace("role = \"uplink\"\n", "role = \"uplink\"\nmtu = 1400\n");
    format!("{base}{tail}")
}

/// [`config`] with two workers on a machine of two CPUs (`[eal] cpus`): the control
/// thread on CPU 0, both workers on CPU 1. Receive queues go to the workers round-robin
/// in port order, so worker 0 polls `pod-a/0` and `uplink0/0`, worker 1 `pod-b/0`.
pub fn two_worker_config(prefix: &str) -> String {
    let one = config(prefix);
    let lcores = "lcores = [0, 1]\n";
    assert!(one.contains(lcores), "one worker in {one}");
    one.replacen(lcores, "lcores = [0, 1, 2]\ncpus = [0, 1, 1]\n", 1)
}

/// stdout and stderr of a finished command.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Two pings from namespace `from`, 2 s timeout each.
pub fn ping(t: &Topology, from: &str, args: &[&str]) -> Output {
    let mut a = vec!["ping", "-c", "2", "-W", "2"];
    a.extend_from_slice(args);
    t.run(from, &a)
}

/// Drops of `reason` in a `stats.get` reply.
pub fn drops(stats: &Value, reason: &str) -> u64 {
    stats["totals"]["drop_reasons"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["reason"] == reason))
        .and_then(|d| d["packets"].as_u64())
        .unwrap_or(0)
}

impl Topology {
    /// Starts ferruled in the `fr` namespace on the demo configuration.
    pub fn ferruled(&self, tag: &str) -> crate::Ferruled {
        self.ferruled_with(tag, config)
    }

    /// Starts ferruled in the `fr` namespace on `config(file prefix)` ([`config`],
    /// [`two_worker_config`], …).
    pub fn ferruled_with(&self, tag: &str, config: impl FnOnce(&str) -> String) -> crate::Ferruled {
        let prefix = crate::unique_prefix(tag);
        let dir = tempfile::tempdir().expect("tempdir");
        let wrapper = vec!["ip".into(), "netns".into(), "exec".into(), self.ns("fr")];
        crate::Ferruled::start_wrapped(dir, &config(&prefix), &prefix, &wrapper)
            .expect("start ferruled")
    }
}

/// A python script run in a namespace, killed when dropped.
pub struct Script(Option<Child>);

impl Script {
    /// Writes `code` to `dir/name` and runs it with python3 in namespace `ns` of
    /// `topo` (for at most 60 s), stdout and stderr piped.
    pub fn start(
        topo: &Topology,
        ns: &str,
        dir: &Path,
        name: &str,
        code: &str,
        args: &[&str],
    ) -> Script {
        let path = dir.join(name);
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(code.as_bytes()))
            .expect("write script");
        let child = Command::new("ip")
            .args(["netns", "exec", &topo.ns(ns), "timeout", "60", "python3"])
            .arg(&path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3");
        Script(Some(child))
    }

    /// The first line it prints (waits for it).
    pub fn line(&mut self) -> String {
        use std::io::BufRead;
        let out = self
            .0
            .as_mut()
            .and_then(|c| c.stdout.as_mut())
            .expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .expect("read");
        line.trim().to_string()
    }

    /// Waits for it: whether it succeeded, and its stdout and stderr.
    pub fn finish(mut self) -> (bool, String) {
        let out = self
            .0
            .take()
            .expect("running")
            .wait_with_output()
            .expect("wait");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            crate::stop_timeout_child(child);
        }
    }
}
