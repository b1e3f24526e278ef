//! End-to-end conntrack and SNAT with real kernel stacks: a Linux TCP client in pod
//! namespace `pa` sends a few MB through ferruled to a server on an "internet" address
//! of the router namespace, which must see the node IP as the source and receive every
//! byte; `ct dump` shows the connection ESTABLISHED, then closing; the same for UDP;
//! then `reflect` ACLs: a pod reaches another whose egress table denies everything,
//! but the other cannot open a connection to it.

use ferrule_e2e::topology::*;
use ferrule_e2e::Ferruled;
use serde_json::Value;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An address of the router's own, outside the VPC.
const INTERNET: &str = "203.0.113.1";

const TCP_SERVER: &str = r#"
import socket, hashlib, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("listening", flush=True)
c, peer = s.accept()
h = hashlib.sha256(); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    h.update(b); n += len(b)
c.sendall(f"{peer[0]} {n} {h.hexdigest()}\n".encode()); c.close()
"#;

/// Sends 4 MiB in two parts with a pause between (so the test can look at the
/// connection), then prints the server's answer and the hash it should have.
const TCP_CLIENT: &str = r#"
import socket, hashlib, sys, time
data = bytes((i * 7 + (i >> 8)) & 0xff for i in range(4 * 1024 * 1024))
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
c.sendall(data[:1 << 20]); time.sleep(2); c.sendall(data[1 << 20:]); c.shutdown(socket.SHUT_WR)
print(c.recv(1000).decode().strip(), hashlib.sha256(data).hexdigest(), flush=True)
"#;

const UDP_ECHO: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
for _ in range(3):
    b, peer = s.recvfrom(2048)
    s.sendto(f"{peer[0]}:{peer[1]} ".encode() + b, peer)
"#;

const UDP_CLIENT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
s.sendto(b"hello", (sys.argv[1], int(sys.argv[2])))
print(s.recv(2048).decode(), flush=True)
"#;

/// A python script run in a namespace, killed when dropped.
struct Script(Option<Child>);

impl Script {
    fn start(
        topo: &Topology,
        ns: &str,
        dir: &std::path::Path,
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
    fn line(&mut self) -> String {
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

    fn finish(mut self) -> (bool, String) {
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
            ferrule_e2e::stop_timeout_child(child);
        }
    }
}

/// The tracked connection towards `dport`, if any.
fn conn(d: &Ferruled, proto: &str, dport: u16) -> Option<Value> {
    let dump = d.ctl_json(&["ct", "dump", "--proto", proto]);
    dump["entries"]
        .as_array()?
        .iter()
        .find(|e| e["original"]["dport"] == dport)
        .cloned()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn kernel_tcp_and_udp_are_masqueraded_byte_exact_and_tracked() {
    let topo = Topology::up("c");
    let o = topo.run(
        "rt",
        &["ip", "addr", "add", &format!("{INTERNET}/32"), "dev", "lo"],
    );
    assert!(o.status.success(), "{}", text(&o));
    // Without SNAT the router would answer the pods directly: take that route away.
    topo.run("rt", &["ip", "route", "del", "10.1.0.0/16"]);
    let mut d = topo.ferruled("ct");
    let dir = tempfile::tempdir().expect("tempdir");
    let o = d.ctl(&[
        "vpc",
        "set",
        "--node-ip",
        "192.0.2.10",
        "--vpc-cidr",
        "192.0.2.0/24",
        "--vpc-cidr",
        "10.1.0.0/16",
    ]);
    assert!(o.status.success(), "{}", text(&o));

    // TCP: 4 MiB from pod-a to the internet address.
    let mut server = Script::start(
        &topo,
        "rt",
        dir.path(),
        "srv.py",
        TCP_SERVER,
        &[INTERNET, "8080"],
    );
    assert_eq!(server.line(), "listening");
    let client = Script::start(
        &topo,
        "pa",
        dir.path(),
        "cli.py",
        TCP_CLIENT,
        &[INTERNET, "8080"],
    );
    wait_for("the TCP connection", || {
        conn(&d, "tcp", 8080).is_some_and(|c| c["state"] == "ESTABLISHED")
    });
    let c = conn(&d, "tcp", 8080).expect("tracked");
    assert_eq!(c["original"]["src"], "10.1.0.2", "{c:#}");
    assert_eq!(c["reply"]["dst"], "192.0.2.10", "{c:#}");
    let snat = c["snat"].as_str().expect("masqueraded").to_string();
    assert!(snat.starts_with("192.0.2.10:"), "{c:#}");
    let nat = d.ctl_json(&["nat", "dump"]);
    assert_eq!(nat["entries"][0]["outside"], snat.as_str(), "{nat:#}");
    assert_eq!(
        nat["entries"][0]["remote"],
        format!("{INTERNET}:8080"),
        "{nat:#}"
    );

    let (ok, out) = client.finish();
    if !ok {
        let stats = d.ctl(&["stats"]);
        let ct = d.ctl(&["ct", "dump"]);
        panic!(
            "client: {out}\n{}\n{}\n{}",
            text(&stats),
            text(&ct),
            d.log_text()
        );
    }
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{out}");
    assert_eq!(words[0], "192.0.2.10", "the server saw the node IP");
    assert_eq!(words[1], "4194304", "every byte arrived");
    assert_eq!(words[2], words[3], "byte-exact");
    drop(server);
    wait_for("the TCP connection to close", || {
        conn(&d, "tcp", 8080).is_some_and(|c| {
            ["FIN_WAIT", "CLOSE_WAIT", "LAST_ACK", "TIME_WAIT", "CLOSE"]
                .contains(&c["state"].as_str().unwrap_or(""))
        })
    });
    let closing = conn(&d, "tcp", 8080).expect("still tracked while closing");
    assert!(
        closing["original"]["bytes"].as_u64().unwrap() > 4_194_304,
        "{closing:#}"
    );

    // UDP: a datagram and its answer.
    let mut echo = Script::start(
        &topo,
        "rt",
        dir.path(),
        "echo.py",
        UDP_ECHO,
        &[INTERNET, "5300"],
    );
    assert_eq!(echo.line(), "listening");
    let (ok, out) = Script::start(
        &topo,
        "pa",
        dir.path(),
        "udp.py",
        UDP_CLIENT,
        &[INTERNET, "5300"],
    )
    .finish();
    assert!(ok, "udp client: {out}");
    assert!(
        out.starts_with("192.0.2.10:") && out.trim_end().ends_with(" hello"),
        "{out}"
    );
    let u = conn(&d, "udp", 5300).expect("UDP tracked");
    assert_eq!(u["state"], "ASSURED", "{u:#}");
    assert_eq!(u["original"]["packets"], 1);
    assert_eq!(u["reply"]["packets"], 1);

    // Ping out: the identifier is masqueraded and the reply comes back.
    let o = ping(&topo, "pa", &[INTERNET]);
    assert!(o.status.success(), "{}", text(&o));
    let icmp = d.ctl_json(&["ct", "dump", "--proto", "icmp"]);
    assert_eq!(icmp["entries"][0]["state"], "ECHO", "{icmp:#}");

    let stats = d.ctl_json(&["ct", "stats"]);
    assert!(
        stats["workers"][0]["inserts"].as_u64().unwrap() >= 3,
        "{stats:#}"
    );
    assert_eq!(stats["zones"][0]["network"], "default");
    let flushed = d.ctl_json(&["ct", "flush", "--proto", "udp"]);
    assert_eq!(flushed["removed"], 1, "{flushed:#}");
    assert!(conn(&d, "udp", 5300).is_none());
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

const REFLECT: &str = r#"
tables:
  - name: reflect-all
    rules:
      - {action: reflect, origin: "e2e/reflective"}
  - name: deny-all
    rules:
      - {action: deny, origin: "e2e/isolated"}
attach:
  - {port: pod-a, direction: ingress, table: reflect-all}
  - {port: pod-a, direction: egress, table: deny-all}
"#;

#[test]
fn reflect_lets_replies_in_and_keeps_unsolicited_traffic_out() {
    let topo = Topology::up("r");
    let mut d = topo.ferruled("rf");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("reflect.yaml");
    std::fs::write(&path, REFLECT).expect("write");
    let o = d.ctl(&["acl", "apply", "-f", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    // pod-a may talk to pod-b: its echo replies come back through deny-all.
    let o = ping(&topo, "pa", &["10.1.0.3"]);
    assert!(o.status.success(), "{}", text(&o));
    // pod-b may not start anything towards pod-a.
    let o = ping(&topo, "pb", &["10.1.0.2"]);
    assert!(!o.status.success(), "{}", text(&o));
    // TCP too: pod-b serves, pod-a connects and gets the answer.
    let mut server = Script::start(
        &topo,
        "pb",
        dir.path(),
        "srv.py",
        TCP_SERVER,
        &["10.1.0.3", "8080"],
    );
    assert_eq!(server.line(), "listening");
    let (ok, out) = Script::start(
        &topo,
        "pa",
        dir.path(),
        "cli.py",
        TCP_CLIENT,
        &["10.1.0.3", "8080"],
    )
    .finish();
    assert!(ok, "client: {out}");
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!((words[0], words[1]), ("10.1.0.2", "4194304"), "{out}");
    assert_eq!(words[2], words[3]);
    drop(server);
    let dump = d.ctl_json(&["acl", "dump"]);
    let isolated = &dump["tables"][1]["rules"][0]["hits"]["packets"];
    assert!(
        isolated.as_u64().unwrap() >= 2,
        "pod-b's pings were denied: {dump:#}"
    );
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}
