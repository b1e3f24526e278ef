//! End-to-end port security (issue 18, finding 9: a pod sending from 32 addresses that
//! were not its own had all 32 masqueraded). Kernel pods in network namespaces send
//! through a real ferruled that masquerades what leaves the VPC: pod-a, with 32 extra
//! addresses 198.51.x.2 on its interface, sends a UDP datagram from each of them and
//! from its own address to a server behind the router; the server must receive only
//! the pod's own, `ferrulectl stats` must count the 32 as `spoofed-src-ip`, and no
//! connection or SNAT mapping may exist for them. A frame from another MAC, an ARP
//! reply and a neighbour advertisement claiming pod-b's addresses are dropped and
//! counted; `ferrulectl trace` shows the drop; the pod's own ping and TCP still work. A
//! third pod, added at run time with `ferrulectl port add --allowed-address`, sends from
//! its allowed prefix but not from another.

use ferrule_e2e::topology::*;
use ferrule_e2e::{Ferruled, Netns};
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An address of the router's own, outside the VPC.
const INTERNET: &str = "203.0.113.1";
/// pod-a's MAC and the gateway MAC its port has (configs/ferrule.toml).
const POD_A_MAC: [u8; 6] = [2, 0, 0, 0x0a, 1, 2];
const GW_A_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 0x0a];

/// Prints `listening`, then one line `PEER PAYLOAD` per datagram received on
/// ADDR:PORT until the payload `END` (or 20 s of silence), then `done`.
const UDP_SINK: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(20)
print("listening", flush=True)
while True:
    try:
        b, peer = s.recvfrom(2048)
    except socket.timeout:
        break
    if b == b"END":
        break
    print(f"{peer[0]} {b.decode()}", flush=True)
print("done", flush=True)
"#;

/// Sends one datagram to HOST:PORT from each SOURCE given, carrying the source address,
/// 20 ms apart; then `END` from the last one.
const UDP_FROM: &str = r#"
import socket, sys, time
host, port, sources = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for src in sources:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((src, 0))
    s.sendto(src.encode(), (host, port)); s.close(); time.sleep(0.02)
time.sleep(0.5)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sources[-1], 0))
s.sendto(b"END", (host, port))
"#;

/// Accepts one TCP connection on ADDR:PORT and answers `PEER DATA`.
const TCP_ECHO: &str = r#"
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("listening", flush=True)
c, peer = s.accept()
c.sendall(f"{peer[0]}:{peer[1]} ".encode() + c.recv(100)); c.close()
"#;

const TCP_CLIENT: &str = r#"
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
c.sendall(b"hello"); print(c.recv(200).decode(), flush=True)
"#;

/// Sends raw Ethernet frames (hex arguments) out of eth0.
const RAW_SEND: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(("eth0", 0))
for h in sys.argv[1:]:
    s.send(bytes.fromhex(h)); time.sleep(0.02)
"#;

/// A python script run in a namespace (`ip netns exec NS timeout 60 python3 …`),
/// stopped if still running when dropped.
struct Script(Option<Child>);

impl Script {
    fn start(ns: &str, dir: &Path, name: &str, code: &str, args: &[&str]) -> Script {
        let path = dir.join(name);
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(code.as_bytes()))
            .expect("write script");
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "timeout", "60", "python3"])
            .arg(&path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3");
        Script(Some(child))
    }

    /// The next line it prints (waits for it).
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

    /// Waits for it to exit: whether it succeeded, and what it printed.
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

/// Runs a command in namespace `ns`; panics if it fails.
fn run_in(ns: &str, args: &[&str]) {
    let o = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .expect("ip netns exec");
    assert!(o.status.success(), "in {ns}: {args:?}: {}", text(&o));
}

/// Sends one datagram from each of `sources` (the last one the sender's own, which
/// also ends the run) from namespace `from` to the router's internet address; the
/// `PEER PAYLOAD` lines the router received.
fn udp_round(topo: &Topology, dir: &Path, from: &str, sources: &[String]) -> Vec<String> {
    let port = "9999";
    let mut sink = Script::start(&topo.ns("rt"), dir, "sink.py", UDP_SINK, &[INTERNET, port]);
    assert_eq!(sink.line(), "listening");
    let mut args = vec![INTERNET, port];
    args.extend(sources.iter().map(String::as_str));
    let (ok, out) = Script::start(from, dir, "from.py", UDP_FROM, &args).finish();
    assert!(ok, "sender: {out}");
    let (ok, out) = sink.finish();
    assert!(ok, "sink: {out}");
    let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
    assert_eq!(lines.pop().as_deref(), Some("done"), "{out}");
    lines
}

fn drop_count(d: &Ferruled, reason: &str) -> u64 {
    drops(&d.ctl_json(&["stats"]), reason)
}

/// Waits (5 s at most) until drop reason `reason` has counted `n` more than `base`.
fn wait_drops(d: &Ferruled, reason: &str, base: u64, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = drop_count(d, reason);
        if now >= base + n || Instant::now() > deadline {
            return now - base;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The original source addresses of the connections ferruled tracks.
fn tracked_sources(d: &Ferruled) -> Vec<String> {
    d.ctl_json(&["ct", "dump"])["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["original"]["src"].as_str().map(str::to_string))
        .collect()
}

/// The Internet checksum of `data`.
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn hex(frame: &[u8]) -> String {
    frame.iter().map(|b| format!("{b:02x}")).collect()
}

/// An ARP reply from pod-a's MAC, to the gateway, claiming `ip` is at pod-a's MAC.
fn arp_reply_claiming(ip: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&GW_A_MAC);
    f.extend_from_slice(&POD_A_MAC);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 2]);
    f.extend_from_slice(&POD_A_MAC);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&GW_A_MAC);
    f.extend_from_slice(&[169, 254, 1, 1]);
    f.resize(60, 0);
    f
}

/// An unsolicited neighbour advertisement from pod-a's link-local address to all
/// nodes, claiming `target` is at pod-a's MAC.
fn na_claiming(target: std::net::Ipv6Addr) -> Vec<u8> {
    let src: std::net::Ipv6Addr = "fe80::ff:fe0a:102".parse().expect("v6");
    let dst: std::net::Ipv6Addr = "ff02::1".parse().expect("v6");
    let mut icmp = vec![136, 0, 0, 0, 0x20, 0, 0, 0];
    icmp.extend_from_slice(&target.octets());
    icmp.extend_from_slice(&[2, 1]);
    icmp.extend_from_slice(&POD_A_MAC);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&(icmp.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(&icmp);
    let c = checksum(&pseudo);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = vec![0x33, 0x33, 0, 0, 0, 1];
    f.extend_from_slice(&POD_A_MAC);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 255]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&icmp);
    f
}

#[test]
fn pods_send_only_as_themselves_through_the_daemon() {
    let topo = Topology::up("ps");
    let o = topo.run(
        "rt",
        &["ip", "addr", "add", &format!("{INTERNET}/32"), "dev", "lo"],
    );
    assert!(o.status.success(), "{}", text(&o));
    // Without SNAT the router would answer the pods directly: only through it.
    let o = topo.run("rt", &["ip", "route", "del", "10.1.0.0/16"]);
    assert!(o.status.success(), "{}", text(&o));
    let mut d = topo.ferruled("ps");
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
    let dir = tempfile::tempdir().expect("tempdir");
    let pa = topo.ns("pa");

    // The pod's own traffic goes through, and its ARP cache has the gateway (asked for
    // from its own address: an ARP request from an address it may not use would be
    // dropped as spoofed-arp, and the kernel would hold the packets waiting for it).
    let o = ping(&topo, "pa", &[INTERNET]);
    assert!(o.status.success(), "{}\n{}", text(&o), d.log_text());

    // The finding: 32 more addresses on the pod's interface, one datagram from each.
    let spoofed: Vec<String> = (0..32).map(|x| format!("198.51.{x}.2")).collect();
    for a in &spoofed {
        run_in(
            &pa,
            &["ip", "addr", "add", &format!("{a}/32"), "dev", "eth0"],
        );
    }
    let base = drop_count(&d, "spoofed-src-ip");
    let mut sources = spoofed.clone();
    sources.push("10.1.0.2".into());
    let got = udp_round(&topo, dir.path(), &pa, &sources);
    assert_eq!(
        got.len(),
        1,
        "only the pod's own datagram reached the server: {got:?}"
    );
    assert_eq!(got[0], "192.0.2.10 10.1.0.2", "masqueraded to the node IP");
    assert_eq!(
        wait_drops(&d, "spoofed-src-ip", base, 32),
        32,
        "each spoofed datagram dropped and counted"
    );
    let tracked = tracked_sources(&d);
    assert!(
        tracked.iter().all(|s| !s.starts_with("198.51.")),
        "no connection for a spoofed source: {tracked:?}"
    );
    assert!(tracked.iter().any(|s| s == "10.1.0.2"), "{tracked:?}");
    let nat = d.ctl_json(&["nat", "dump"]);
    assert!(
        !nat.to_string().contains("198.51."),
        "no SNAT mapping for a spoofed source: {nat:#}"
    );

    // A synthetic trace of the same packet names the stage and the drop.
    let t = d.ctl_json(&[
        "trace",
        "--in-port",
        "pod-a",
        "--proto",
        "udp",
        "--src",
        "198.51.0.2:5000",
        "--dst",
        &format!("{INTERNET}:9999"),
    ]);
    assert_eq!(
        t["verdict"],
        serde_json::json!({"action": "drop", "reason": "spoofed-src-ip"}),
        "{t:#}"
    );
    let stages: Vec<&str> = t["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .filter_map(|s| s["stage"].as_str())
        .collect();
    assert_eq!(stages, ["parse", "l2", "port-security"], "{t:#}");

    // ARP and neighbour discovery claiming pod-b's addresses.
    let (arp_base, nd_base) = (drop_count(&d, "spoofed-arp"), drop_count(&d, "spoofed-nd"));
    let frames = [
        hex(&arp_reply_claiming([10, 1, 0, 3])),
        hex(&na_claiming("fd00:1::3".parse().expect("v6"))),
    ];
    let args: Vec<&str> = frames.iter().map(String::as_str).collect();
    let (ok, out) = Script::start(&pa, dir.path(), "raw.py", RAW_SEND, &args).finish();
    assert!(ok, "raw sender: {out}");
    assert_eq!(wait_drops(&d, "spoofed-arp", arp_base, 1), 1);
    assert_eq!(wait_drops(&d, "spoofed-nd", nd_base, 1), 1);

    // Another MAC: nothing from it gets through, not even ARP; its own MAC back, it
    // works again.
    let mac_base = drop_count(&d, "spoofed-src-mac");
    run_in(
        &pa,
        &["ip", "link", "set", "eth0", "address", "02:00:00:0a:01:99"],
    );
    run_in(&pa, &["ip", "neigh", "flush", "dev", "eth0"]);
    let o = ping(&topo, "pa", &["-W", "1", INTERNET]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        wait_drops(&d, "spoofed-src-mac", mac_base, 1) >= 1,
        "{}",
        text(&d.ctl(&["stats"]))
    );
    run_in(
        &pa,
        &["ip", "link", "set", "eth0", "address", "02:00:00:0a:01:02"],
    );

    // The pod's own ping and TCP still work, masqueraded.
    let o = ping(&topo, "pa", &[INTERNET]);
    assert!(o.status.success(), "{}\n{}", text(&o), d.log_text());
    let mut server = Script::start(
        &topo.ns("rt"),
        dir.path(),
        "tcp-srv.py",
        TCP_ECHO,
        &[INTERNET, "8080"],
    );
    assert_eq!(server.line(), "listening");
    let (ok, out) = Script::start(
        &pa,
        dir.path(),
        "tcp-cli.py",
        TCP_CLIENT,
        &[INTERNET, "8080"],
    )
    .finish();
    assert!(ok, "TCP client: {out}\n{}", text(&d.ctl(&["stats"])));
    assert!(
        out.starts_with("192.0.2.10:") && out.trim_end().ends_with(" hello"),
        "{out}"
    );
    drop(server);

    // A pod added at run time that may also send from 198.51.100.0/24.
    let pc = Netns::new("psc").expect("netns");
    let o = Command::new("ip")
        .args(["link", "add", "vc", "netns", &topo.ns("fr"), "type", "veth"])
        .args(["peer", "name", "eth0", "netns", &pc.name])
        .output()
        .expect("ip link add");
    assert!(o.status.success(), "{}", text(&o));
    run_in(&topo.ns("fr"), &["ip", "link", "set", "vc", "up"]);
    for args in [
        "ip link set eth0 address 02:00:00:0a:01:04",
        "ethtool -K eth0 tx off",
        "ip link set eth0 up",
        "ip addr add 10.1.0.4/32 dev eth0",
        "ip addr add 198.51.100.2/32 dev eth0",
        "ip addr add 198.51.101.2/32 dev eth0",
        "ip route add 169.254.1.1 dev eth0 scope link",
        "ip route add default via 169.254.1.1 dev eth0",
    ] {
        run_in(&pc.name, &args.split(' ').collect::<Vec<_>>());
    }
    let o = d.ctl(&[
        "port",
        "add",
        "pod-c",
        "--af-packet",
        "vc",
        "--ip",
        "10.1.0.4",
        "--mac",
        "02:00:00:0a:01:04",
        "--allowed-address",
        "198.51.100.0/24",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("198.51.100.0/24"), "{}", text(&o));
    let ports = d.ctl_json(&["ports"]);
    let pod_c: &Value = ports["ports"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "pod-c"))
        .expect("pod-c listed");
    assert_eq!(
        pod_c["allowed_addresses"],
        serde_json::json!(["198.51.100.0/24"])
    );
    let pod_a = ports["ports"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "pod-a"))
        .expect("pod-a listed");
    assert!(pod_a.get("allowed_addresses").is_none(), "{pod_a:#}");
    // Its own address resolves the gateway (an ARP request from a source it may not
    // use would be dropped as spoofed-arp, and the kernel would hold its packets).
    run_in(&pc.name, &["ping", "-c", "1", "-W", "2", "169.254.1.1"]);
    let base = drop_count(&d, "spoofed-src-ip");
    let got = udp_round(
        &topo,
        dir.path(),
        &pc.name,
        &[
            "198.51.101.2".into(),
            "198.51.100.2".into(),
            "10.1.0.4".into(),
        ],
    );
    assert_eq!(
        got,
        ["192.0.2.10 198.51.100.2", "192.0.2.10 10.1.0.4"],
        "its allowed prefix and its own address, not the other prefix"
    );
    assert_eq!(wait_drops(&d, "spoofed-src-ip", base, 1), 1);

    let o = d.ctl(&["port", "del", "pod-c"]);
    assert!(o.status.success(), "{}", text(&o));
    drop(pc);
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}
