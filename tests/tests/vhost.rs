//! vhost-user pods with real peers: `dpdk-testpmd` processes with a `virtio_user`
//! device act as pods. Ports are added and removed over the control socket while
//! ferruled runs; pod A's traffic to pod B's IP crosses Ferrule's pipeline; an ACL stops
//! it; pod B disconnects and reconnects; deleting ports under traffic returns every
//! mbuf; a client-mode port reconnects to its pod across a ferruled restart.
//! On 2 cores the pods and ferruled share CPUs: the test asserts on packet counts, and
//! the tests take turns (each runs busy-polling DPDK processes; two at once starved the
//! client-mode test's pod past its timeout).

use ferrule_e2e::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Held by each test for its whole run, so the tests' DPDK processes never share the
/// 2 CPUs with another test's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// This test's turn (a test that failed while holding it does not block the others).
fn turn() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A dpdk-testpmd pod, killed and waited for when dropped.
struct Pod {
    child: Child,
    prefix: String,
}

impl Pod {
    /// A testpmd pod on `vdev` (a virtio_user device) in forwarding `mode`.
    fn start(tag: &str, vdev: &str, app_args: &[&str], log: &Path) -> Pod {
        let prefix = unique_prefix(tag);
        let log = std::fs::File::create(log).expect("log");
        let child = Command::new("dpdk-testpmd")
            .args([
                "-l",
                "0,1",
                "--no-pci",
                "--in-memory",
                "--single-file-segments",
                "-m",
                "256",
            ])
            .args([
                "--file-prefix",
                &prefix,
                "--log-level",
                "error",
                "--vdev",
                vdev,
                "--",
            ])
            .args(app_args)
            .arg("--stats-period=1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("dpdk-testpmd (Debian package dpdk)");
        Pod { child, prefix }
    }

    fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SIGINT lets testpmd close its ports cleanly.
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        for p in leftovers(&self.prefix) {
            let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.kill();
    }
}

fn port<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["ports"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no port {name}: {list:#}"))
}

fn counter(d: &Ferruled, name: &str, what: &str) -> u64 {
    port(&d.ctl_json(&["ports"]), name)["counters"][what]
        .as_u64()
        .unwrap_or(0)
}

fn drops(d: &Ferruled, reason: &str) -> u64 {
    d.ctl_json(&["stats"])["totals"]["drop_reasons"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["reason"] == reason))
        .and_then(|r| r["packets"].as_u64())
        .unwrap_or(0)
}

fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether a counter grows over `secs` seconds.
fn grows(secs: u64, mut read: impl FnMut() -> u64) -> bool {
    let before = read();
    std::thread::sleep(Duration::from_secs(secs));
    read() > before
}

fn config(prefix: &str, ports: &str) -> String {
    // Room for four test hugepage users (ferruled and up to three pods of 256 MiB).
    let base = base_config(prefix).replace("memory_mb = 128", "memory_mb = 256");
    format!("{base}{ports}")
}

fn ok(o: &std::process::Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{what}: {text}");
    text
}

fn fails(o: &std::process::Output, field: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "should fail: {text}");
    assert!(
        text.contains(&format!("`{field}`")),
        "names {field}: {text}"
    );
    text
}

#[test]
fn vhost_user_pods_come_and_go_under_traffic() {
    let _turn = turn();
    let prefix = unique_prefix("vh");
    let mut d = Ferruled::start(&config(&prefix, ""), &prefix).expect("ferruled");
    let dir = d.dir.path().to_path_buf();
    let sock = |n: &str| dir.join("vhost").join(format!("{n}.sock"));
    let baseline = d.ctl_json(&["stats"])["mbufs_in_use"]
        .as_u64()
        .expect("mbufs_in_use");

    for (name, ip, mac) in [
        ("pod-a", "10.1.0.4", "02:00:00:0a:01:04"),
        ("pod-b", "10.1.0.5", "02:00:00:0a:01:05"),
    ] {
        let s = sock(name);
        ok(
            &d.ctl(&[
                "port",
                "add",
                name,
                "--vhost-user",
                s.to_str().unwrap(),
                "--ip",
                ip,
                "--mac",
                mac,
                "--pod",
                &format!("default/{name}"),
            ]),
            "port add",
        );
    }
    let list = d.ctl_json(&["ports"]);
    let a = port(&list, "pod-a");
    assert_eq!(a["link"], "down", "no pod connected yet");
    assert_eq!(a["gateway_ip"], "169.254.1.1");
    assert_eq!(a["pod"], "default/pod-a");
    assert_eq!(a["vhost_mode"], "server");
    let gateway_mac = a["gateway_mac"].as_str().expect("gateway_mac").to_string();
    let mode = std::fs::metadata(sock("pod-a").parent().unwrap()).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o700
    );

    // Refusals name the field and change nothing.
    let not_socket = dir.join("plain-file");
    std::fs::write(&not_socket, b"x").unwrap();
    fails(
        &d.ctl(&[
            "port",
            "add",
            "pod-x",
            "--vhost-user",
            not_socket.to_str().unwrap(),
            "--ip",
            "10.1.0.9",
            "--mac",
            "02:00:00:0a:01:09",
        ]),
        "vhost_user",
    );
    fails(
        &d.ctl(&[
            "port",
            "add",
            "pod-a",
            "--vhost-user",
            "/tmp/other.sock",
            "--mac",
            "02:00:00:0a:01:09",
        ]),
        "name",
    );
    fails(
        &d.ctl(&[
            "port",
            "add",
            "pod-x",
            "--vhost-user",
            "/tmp/x.sock",
            "--network",
            "red",
            "--mac",
            "02:00:00:0a:01:09",
        ]),
        "network",
    );
    fails(
        &d.ctl(&[
            "port",
            "add",
            "pod-x",
            "--vhost-user",
            "/tmp/x.sock",
            "--ip",
            "10.1.0.300",
            "--mac",
            "02:00:00:0a:01:09",
        ]),
        "ips[0]",
    );
    assert_eq!(d.ctl_json(&["ports"])["ports"].as_array().unwrap().len(), 2);

    // Pod B counts what arrives; pod A sends UDP to pod B's IP through its gateway.
    let vdev =
        |name: &str, mac: &str| format!("virtio_user0,path={},mac={mac}", sock(name).display());
    let mut pod_b = Pod::start(
        "pb",
        &vdev("pod-b", "02:00:00:0a:01:05"),
        &["--forward-mode=rxonly"],
        &dir.join("pod-b.log"),
    );
    let peer = format!("--eth-peer=0,{gateway_mac}");
    let pod_a = Pod::start(
        "pa",
        &vdev("pod-a", "02:00:00:0a:01:04"),
        &["--forward-mode=txonly", "--tx-ip=10.1.0.4,10.1.0.5", &peer],
        &dir.join("pod-a.log"),
    );
    wait_for("both pods connected", 30, || {
        let l = d.ctl_json(&["ports"]);
        port(&l, "pod-a")["link"] == "up" && port(&l, "pod-b")["link"] == "up"
    });
    wait_for("traffic to pod B", 30, || {
        counter(&d, "pod-b", "tx_packets") > 1000
    });

    // A deny ACL on pod B's egress stops it; removing it lets it through again.
    let acl = dir.join("deny.yaml");
    std::fs::write(&acl, "tables:\n  - name: b-in\n    rules:\n      - {action: deny, proto: udp, origin: e2e/deny}\nattach:\n  - {port: pod-b, direction: egress, table: b-in}\n").unwrap();
    ok(
        &d.ctl(&["acl", "apply", "-f", acl.to_str().unwrap()]),
        "acl apply",
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !grows(1, || counter(&d, "pod-b", "tx_packets")),
        "the deny rule stops pod A's traffic"
    );
    assert!(grows(1, || drops(&d, "acl-deny")));
    std::fs::write(&acl, "tables: []\n").unwrap();
    ok(
        &d.ctl(&["acl", "apply", "-f", acl.to_str().unwrap()]),
        "acl apply",
    );
    assert!(
        grows(2, || counter(&d, "pod-b", "tx_packets")),
        "flows again"
    );

    // Pod B goes away: its link goes down and what is sent to it is port-down.
    pod_b.kill();
    wait_for("pod B's link down", 15, || {
        port(&d.ctl_json(&["ports"]), "pod-b")["link"] == "down"
    });
    assert!(
        grows(2, || drops(&d, "port-down")),
        "traffic to a disconnected pod is port-down"
    );
    // It comes back and reconnects.
    pod_b = Pod::start(
        "pb2",
        &vdev("pod-b", "02:00:00:0a:01:05"),
        &["--forward-mode=rxonly"],
        &dir.join("pod-b2.log"),
    );
    wait_for("pod B back", 30, || {
        port(&d.ctl_json(&["ports"]), "pod-b")["link"] == "up"
    });
    assert!(
        grows(2, || counter(&d, "pod-b", "tx_packets")),
        "flows to the restarted pod"
    );

    // Delete pod B's port while pod A keeps sending: pod A is untouched, the traffic
    // has no route any more.
    let out = ok(&d.ctl(&["port", "del", "pod-b"]), "port del pod-b");
    assert!(out.contains("port pod-b deleted"), "{out}");
    let list = d.ctl_json(&["ports"]);
    assert_eq!(list["ports"].as_array().unwrap().len(), 1);
    assert!(grows(2, || drops(&d, "no-route")));
    assert!(
        grows(1, || counter(&d, "pod-a", "rx_packets")),
        "pod A untouched"
    );
    assert!(!sock("pod-b").exists(), "its socket is gone");
    drop(pod_b);
    pod_a.stop();
    ok(&d.ctl(&["port", "del", "pod-a"]), "port del pod-a");
    wait_for("every mbuf back", 10, || {
        d.ctl_json(&["stats"])["mbufs_in_use"].as_u64() == Some(baseline)
    });
    // The slot is reused by a new port, with counters from zero.
    let s = sock("pod-c");
    ok(
        &d.ctl(&[
            "port",
            "add",
            "pod-c",
            "--vhost-user",
            s.to_str().unwrap(),
            "--mac",
            "02:00:00:0a:01:06",
        ]),
        "port add pod-c",
    );
    assert_eq!(counter(&d, "pod-c", "rx_packets"), 0);
    // Multiqueue: every queue pair's receive queue is polled by a worker.
    let q = sock("pod-q");
    ok(
        &d.ctl(&[
            "port",
            "add",
            "pod-q",
            "--vhost-user",
            q.to_str().unwrap(),
            "--queues",
            "2",
            "--mac",
            "02:00:00:0a:01:08",
        ]),
        "port add pod-q",
    );
    let stats = d.ctl_json(&["stats"]);
    let polled: Vec<String> = stats["workers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["queues"].as_array().cloned().unwrap_or_default())
        .filter_map(|q| q.as_str().map(str::to_string))
        .collect();
    assert!(
        polled.contains(&"pod-q/0".to_string()) && polled.contains(&"pod-q/1".to_string()),
        "{polled:?}"
    );
    assert_eq!(port(&d.ctl_json(&["ports"]), "pod-q")["rx_queues"], 2);
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
    assert!(leftovers(&prefix).is_empty());
}

#[test]
fn client_mode_ports_reconnect_across_a_ferruled_restart() {
    let _turn = turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let sock: PathBuf = dir.path().join("pod-c.sock");
    // The pod serves the socket (virtio_user in server mode) and sends all the time.
    let vdev = format!(
        "virtio_user0,path={},server=1,mac=02:00:00:0a:01:07",
        sock.display()
    );
    let pod = Pod::start(
        "pc",
        &vdev,
        &["--forward-mode=txonly", "--tx-ip=10.1.0.7,10.1.0.99"],
        &dir.path().join("pod-c.log"),
    );
    wait_for("the pod's socket", 30, || sock.exists());
    let ports = format!(
        "[[port]]\nname = \"pod-c\"\ndevargs = \"net_vhost_c,iface={},queues=1,client=1\"\nrole = \"pod\"\npod_ips = [\"10.1.0.7\"]\npod_mac = \"02:00:00:0a:01:07\"\npod = \"default/c\"\n",
        sock.display()
    );
    for round in 0..2 {
        let prefix = unique_prefix("vhc");
        let mut d = Ferruled::start(&config(&prefix, &ports), &prefix).expect("ferruled");
        wait_for("the port connected to the pod", 30, || {
            port(&d.ctl_json(&["ports"]), "pod-c")["link"] == "up"
        });
        wait_for("the pod's packets", 30, || {
            counter(&d, "pod-c", "rx_packets") > 100
        });
        let status = d.terminate();
        assert!(status.success(), "round {round}: {}", d.log_text());
    }
    drop(pod);
}
