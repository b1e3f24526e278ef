//! End-to-end conntrack and SNAT with real kernel stacks: a Linux TCP client in pod
//! namespace `pa` sends a few MB through ferruled to a server on an "internet" address
//! of the router namespace, which must see the node IP as the source and receive every
//! byte; `ct dump` shows the connection ESTABLISHED, then closing; a UDP datagram and
//! its answer; the same for UDP in bulk: 4 MiB of sequence-numbered datagrams that the
//! server echoes, with retransmission so that the check stays byte-exact in both
//! directions whatever the path drops, then the connection in `ct dump` (text and JSON)
//! and `nat dump` until a filtered `ct flush` removes it and nothing else; then
//! `reflect` ACLs: a pod reaches another whose egress table denies everything, but the
//! other cannot open a connection to it; and TCP and UDP in bulk with two workers, one
//! polling the pod and the other the uplink, so that one direction of every connection
//! is handed off to the worker that owns it.

use ferrule_e2e::topology::*;
use ferrule_e2e::Ferruled;
use serde_json::Value;
use std::path::Path;
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
c.sendall(f"{peer[0]}:{peer[1]} {n} {h.hexdigest()}\n".encode()); c.close()
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

/// Receives sequence-numbered datagrams (`D` seq:u32 payload) and echoes each one back
/// whole: the echo is the acknowledgement and carries every byte back through the
/// reverse translation. Keeps the first copy of each sequence number (a retransmitted
/// copy must be identical). On `E` total:u32 it answers `R peer bytes sha256 peers
/// mismatches` (or `M missing` while some datagram never arrived), for as long as the
/// client keeps asking, and exits 3 s after the last request.
const UDP_BULK_SERVER: &str = r#"
import socket, hashlib, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
s.bind((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
chunks, peers, mismatches = {}, set(), 0
while True:
    try:
        b, peer = s.recvfrom(2048)
    except socket.timeout:
        break
    peers.add(peer)
    if b[:1] == b"D" and len(b) >= 5:
        seq = int.from_bytes(b[1:5], "big")
        if chunks.setdefault(seq, b[5:]) != b[5:]:
            mismatches += 1
        s.sendto(b, peer)
    elif b[:1] == b"E" and len(b) == 5:
        total = int.from_bytes(b[1:5], "big")
        missing = [i for i in range(total) if i not in chunks]
        if missing or len(chunks) != total:
            reply = f"M {len(missing)} of {total} missing, {len(chunks)} received"
        else:
            data = b"".join(chunks[i] for i in range(total))
            reply = (f"R {peer[0]}:{peer[1]} {len(data)} {hashlib.sha256(data).hexdigest()}"
                     f" {len(peers)} {mismatches}")
        s.sendto(reply.encode(), peer)
        s.settimeout(3)
"#;

/// Sends 4 MiB in 1,200-byte datagrams, at most 64 unacknowledged at a time, resends a
/// datagram whose echo has not come back within 200 ms, and checks every echo against
/// what it sent. Then asks for the server's result until it comes and prints it,
/// followed by `bytes sha256 echoed-bytes retransmits bad-echoes`.
const UDP_BULK_CLIENT: &str = r#"
import socket, hashlib, sys, time, select
N, SZ, WINDOW, RTO = 4 * 1024 * 1024, 1200, 64, 0.2
data = bytes((i * 13 + (i >> 9)) & 0xff for i in range(N))
dgrams = [b"D" + (k // SZ).to_bytes(4, "big") + data[k:k + SZ] for k in range(0, N, SZ)]
total = len(dgrams)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
s.connect((sys.argv[1], int(sys.argv[2])))
s.setblocking(False)
acked, outstanding = [False] * total, {}
next_seq = base = echoed = retransmits = bad = 0
deadline = time.monotonic() + 40
def drain():
    global echoed, bad
    while True:
        try:
            b = s.recv(2048)
        except BlockingIOError:
            return None
        if b[:1] != b"D":
            return b
        seq = int.from_bytes(b[1:5], "big")
        if seq >= total or b != dgrams[seq]:
            bad += 1
        elif not acked[seq]:
            acked[seq] = True
            echoed += len(b) - 5
            outstanding.pop(seq, None)
while base < total:
    assert time.monotonic() < deadline, f"stuck at {base} of {total}"
    while next_seq < total and len(outstanding) < WINDOW:
        s.send(dgrams[next_seq]); outstanding[next_seq] = time.monotonic(); next_seq += 1
    select.select([s], [], [], RTO / 4)
    drain()
    while base < total and acked[base]:
        base += 1
    now = time.monotonic()
    for seq, t in list(outstanding.items()):
        if now - t > RTO:
            s.send(dgrams[seq]); outstanding[seq] = now; retransmits += 1
reply = None
while reply is None or not reply.startswith(b"R "):
    assert time.monotonic() < deadline, f"no result: {reply!r}"
    s.send(b"E" + total.to_bytes(4, "big"))
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        select.select([s], [], [], 0.05)
        r = drain()
        if r is not None:
            reply = r
            if reply.startswith(b"R "):
                break
print(reply.decode(), N, hashlib.sha256(data).hexdigest(), echoed, retransmits, bad, flush=True)
"#;

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

/// The daemon's counters, connections and log, for a failure message.
fn diagnostics(d: &Ferruled) -> String {
    format!(
        "{}\n{}\n{}",
        text(&d.ctl(&["stats"])),
        text(&d.ctl(&["ct", "dump"])),
        d.log_text()
    )
}

/// Starts TCP_SERVER on `addr`:`port` in namespace `server_ns` and, once it listens,
/// TCP_CLIENT towards it in `client_ns`. Returns (server, client).
fn start_tcp(
    topo: &Topology,
    dir: &Path,
    (server_ns, addr, port): (&str, &str, u16),
    client_ns: &str,
) -> (Script, Script) {
    let port = port.to_string();
    let mut server = Script::start(topo, server_ns, dir, "srv.py", TCP_SERVER, &[addr, &port]);
    assert_eq!(server.line(), "listening");
    let client = Script::start(topo, client_ns, dir, "cli.py", TCP_CLIENT, &[addr, &port]);
    (server, client)
}

/// Waits for a TCP_CLIENT and checks that its server received all 4 MiB intact.
/// Returns the source the server saw, `address:port`.
fn tcp_result(d: &Ferruled, client: Script) -> String {
    let (ok, out) = client.finish();
    assert!(ok, "client: {out}\n{}", diagnostics(d));
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{out}");
    assert_eq!(words[1], "4194304", "every byte arrived: {out}");
    assert_eq!(words[2], words[3], "byte-exact: {out}");
    words[0].to_string()
}

/// What [`udp_bulk`] saw.
struct Bulk {
    /// The source the server saw, `address:port`.
    peer: String,
    /// Datagrams the client sent again.
    retransmits: u64,
    elapsed: Duration,
}

/// 4 MiB of UDP from namespace `client_ns` to UDP_BULK_SERVER on INTERNET:`port`,
/// every datagram echoed back: checks that the server received every byte intact, all
/// from one source address and port, and that every byte came back intact.
fn udp_bulk(topo: &Topology, d: &Ferruled, dir: &Path, client_ns: &str, port: u16) -> Bulk {
    let port = port.to_string();
    let args = [INTERNET, port.as_str()];
    let mut server = Script::start(topo, "rt", dir, "bulk-srv.py", UDP_BULK_SERVER, &args);
    assert_eq!(server.line(), "listening");
    let started = Instant::now();
    let (ok, out) =
        Script::start(topo, client_ns, dir, "bulk-cli.py", UDP_BULK_CLIENT, &args).finish();
    let elapsed = started.elapsed();
    assert!(ok, "bulk client: {out}\n{}", diagnostics(d));
    // R peer bytes sha peers mismatches | bytes sha echoed retransmits bad
    let w: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(w.len(), 11, "{out}");
    assert_eq!(w[0], "R", "{out}");
    assert_eq!(w[2], "4194304", "the server received every byte: {out}");
    assert_eq!(w[6], "4194304", "{out}");
    assert_eq!(w[3], w[7], "byte-exact at the server: {out}");
    assert_eq!(
        w[4], "1",
        "one source address and port for the whole transfer: {out}"
    );
    assert_eq!(w[5], "0", "retransmitted copies identical: {out}");
    assert_eq!(w[8], "4194304", "every byte echoed back intact: {out}");
    assert_eq!(w[10], "0", "no echo differed from what was sent: {out}");
    Bulk {
        peer: w[1].to_string(),
        retransmits: w[9].parse().expect("retransmits"),
        elapsed,
    }
}

/// Checks that ferruled dropped nothing but what the pods' kernels say to the gateway
/// that nobody answers (`local-unhandled`: IPv6 router solicitations and multicast) and
/// TCP segments too big for the uplink's 1400-byte MTU (`mtu-exceeded`, each answered
/// with an ICMP "fragmentation needed": path MTU discovery) — in particular nothing as
/// `ct-table-full` or `handoff-full`.
fn assert_only_chatter_dropped(d: &Ferruled) {
    let s = d.ctl_json(&["stats"]);
    for r in s["totals"]["drop_reasons"]
        .as_array()
        .expect("drop reasons")
    {
        assert!(
            ["local-unhandled", "mtu-exceeded"].contains(&r["reason"].as_str().unwrap_or("")),
            "no other drop: {s:#}"
        );
    }
    let icmp_errors = icmp_errors(&s);
    assert_eq!(drops(&s, "mtu-exceeded"), icmp_errors, "{s:#}");
    assert_eq!(drops(&s, "ct-table-full"), 0, "{s:#}");
    assert_eq!(drops(&s, "handoff-full"), 0, "{s:#}");
}

/// Gives the router the internet address, takes away its route to the pods (without
/// SNAT it would answer them directly), starts ferruled in `topo` on
/// `config(file prefix)` and masquerades everything leaving the VPC to the node IP
/// 192.0.2.10.
fn masquerading(topo: &Topology, tag: &str, config: fn(&str) -> String) -> Ferruled {
    let o = topo.run(
        "rt",
        &["ip", "addr", "add", &format!("{INTERNET}/32"), "dev", "lo"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = topo.run("rt", &["ip", "route", "del", "10.1.0.0/16"]);
    assert!(o.status.success(), "{}", text(&o));
    let d = topo.ferruled_with(tag, config);
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
    d
}

#[test]
fn kernel_tcp_and_udp_are_masqueraded_byte_exact_and_tracked() {
    let topo = Topology::up("c");
    let mut d = masquerading(&topo, "ct", config);
    let dir = tempfile::tempdir().expect("tempdir");

    // TCP: 4 MiB from pod-a to the internet address.
    let (server, client) = start_tcp(&topo, dir.path(), ("rt", INTERNET, 8080), "pa");
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

    let peer = tcp_result(&d, client);
    assert_eq!(peer, snat, "the server saw the node IP and the SNAT port");
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
    let (_echo, out) = udp_hello(&topo, dir.path(), "pa");
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

/// A UDP echo server outside (port 5300) and one datagram from pod namespace `pod`
/// to it: the server (kept running while held) and what the client printed (the
/// source the server saw, then the answer).
fn udp_hello(topo: &Topology, dir: &std::path::Path, pod: &str) -> (Script, String) {
    let mut echo = Script::start(topo, "rt", dir, "echo.py", UDP_ECHO, &[INTERNET, "5300"]);
    assert_eq!(echo.line(), "listening");
    let (ok, out) =
        Script::start(topo, pod, dir, "udp.py", UDP_CLIENT, &[INTERNET, "5300"]).finish();
    assert!(ok, "udp client: {out}");
    (echo, out)
}

#[test]
fn kernel_udp_bulk_is_masqueraded_byte_exact_both_ways_and_flushed_by_filter() {
    let topo = Topology::up("u");
    let mut d = masquerading(&topo, "cu", config);
    let dir = tempfile::tempdir().expect("tempdir");

    // A second masqueraded UDP connection, from pod-b, that the filtered flush must keep.
    let (echo, out) = udp_hello(&topo, dir.path(), "pb");
    assert!(out.starts_with("192.0.2.10:"), "{out}");

    // 4 MiB from pod-a, every datagram echoed back.
    let bulk = udp_bulk(&topo, &d, dir.path(), "pa", 5301);
    // No loss in ferruled: the rest of a new connection's first burst joins the
    // connection its first packet opened (it used to be dropped as `ct-table-full`).
    assert_only_chatter_dropped(&d);
    eprintln!(
        "UDP 4 MiB echoed in {:.1} s, {} datagrams resent\n{}\n{}",
        bulk.elapsed.as_secs_f64(),
        bulk.retransmits,
        text(&d.ctl(&["stats"])),
        text(&d.ctl(&["ct", "stats"]))
    );

    // The connection: masqueraded to exactly what the server saw, assured, and counted.
    let u = conn(&d, "udp", 5301).expect("the bulk UDP connection is tracked");
    let snat = u["snat"].as_str().expect("masqueraded").to_string();
    assert_eq!(
        bulk.peer, snat,
        "the server saw the SNAT address and port: {u:#}"
    );
    let snat_port: u64 = snat
        .strip_prefix("192.0.2.10:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("SNAT to the node IP: {u:#}"));
    assert_eq!(u["state"], "ASSURED", "{u:#}");
    assert_eq!(u["network"], "default", "{u:#}");
    assert_eq!(u["original"]["src"], "10.1.0.2", "{u:#}");
    assert_eq!(u["original"]["dst"], INTERNET, "{u:#}");
    assert_eq!(u["reply"]["src"], INTERNET, "{u:#}");
    assert_eq!(u["reply"]["sport"], 5301, "{u:#}");
    assert_eq!(u["reply"]["dst"], "192.0.2.10", "{u:#}");
    assert_eq!(u["reply"]["dport"], snat_port, "{u:#}");
    let cport = u["original"]["sport"].as_u64().expect("sport");
    // 3,496 data datagrams (plus resends and the end requests) each way, each carrying
    // its share of 4 MiB plus 5 bytes of header, 8 of UDP and 20 of IP.
    let datagrams = 4_194_304u64.div_ceil(1200);
    let min_bytes = 4_194_304 + datagrams * (5 + 8 + 20);
    for dir in ["original", "reply"] {
        let packets = u[dir]["packets"].as_u64().expect("packets");
        let bytes = u[dir]["bytes"].as_u64().expect("bytes");
        assert!(packets > datagrams, "{dir} packets: {u:#}");
        assert!(bytes >= min_bytes, "{dir} bytes: {u:#}");
    }
    let nat = d.ctl_json(&["nat", "dump", "--proto", "udp", "--port", "5301"]);
    let entries = nat["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1, "{nat:#}");
    assert_eq!(entries[0]["inside"], format!("10.1.0.2:{cport}"), "{nat:#}");
    assert_eq!(entries[0]["outside"], snat.as_str(), "{nat:#}");
    assert_eq!(entries[0]["remote"], format!("{INTERNET}:5301"), "{nat:#}");
    assert_eq!(entries[0]["state"], "ASSURED", "{nat:#}");
    // The same entry in the text dump, as conntrack -L prints it.
    let o = d.ctl(&["ct", "dump", "--proto", "udp", "--port", "5301"]);
    assert!(o.status.success(), "{}", text(&o));
    let dump = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = dump.lines().collect();
    assert_eq!(lines.len(), 2, "{dump}");
    for part in [
        "udp ".to_string(),
        " ASSURED ".to_string(),
        format!("src=10.1.0.2 dst={INTERNET} sport={cport} dport=5301 "),
        format!("src={INTERNET} dst=192.0.2.10 sport=5301 dport={snat_port} "),
        format!(" snat={snat} "),
        " zone=default ".to_string(),
    ] {
        assert!(lines[0].contains(&part), "{part:?} in {dump}");
    }
    assert_eq!(lines[1], "1 connections", "{dump}");

    // A filtered flush removes the bulk connection and keeps pod-b's.
    let flushed = d.ctl_json(&["ct", "flush", "--proto", "udp", "--port", "5301"]);
    assert_eq!(flushed["removed"], 1, "{flushed:#}");
    assert!(conn(&d, "udp", 5301).is_none(), "flushed");
    let nat = d.ctl_json(&["nat", "dump", "--proto", "udp"]);
    let remotes: Vec<&str> = nat["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["remote"].as_str())
        .collect();
    assert_eq!(remotes, [format!("{INTERNET}:5300")], "{nat:#}");
    let kept = conn(&d, "udp", 5300).expect("pod-b's connection kept");
    assert_eq!(kept["original"]["src"], "10.1.0.3", "{kept:#}");
    let flushed = d.ctl_json(&["ct", "flush", "--proto", "udp", "--src", "10.1.0.3"]);
    assert_eq!(flushed["removed"], 1, "{flushed:#}");
    let left = d.ctl_json(&["ct", "dump", "--proto", "udp"]);
    assert_eq!(left["entries"], serde_json::json!([]), "{left:#}");

    drop(echo);
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

/// Per worker, packets it handed to the worker that owns their connection.
fn handoffs(stats: &Value, worker: u64) -> u64 {
    stats["workers"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| w["worker"] == worker))
        .and_then(|w| w["handoffs"].as_u64())
        .unwrap_or_else(|| panic!("worker {worker}: {stats:#}"))
}

/// The worker that polls receive queue `queue` (`port/queue`); only one may.
fn poller(stats: &Value, queue: &str) -> u64 {
    let found: Vec<u64> = stats["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter(|w| {
            w["queues"]
                .as_array()
                .is_some_and(|q| q.contains(&queue.into()))
        })
        .filter_map(|w| w["worker"].as_u64())
        .collect();
    assert_eq!(found.len(), 1, "one worker polls {queue}: {stats:#}");
    found[0]
}

/// The masqueraded connection towards `dport`, checked to be listed once in the dump
/// of every worker's table and to be held by the owner of its SNAT port (port % 2).
fn owned_once(d: &Ferruled, proto: &str, dport: u16) -> Value {
    let dump = d.ctl_json(&["ct", "dump"]);
    let found: Vec<&Value> = dump["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["proto"] == proto && e["original"]["dport"] == dport)
        .collect();
    assert_eq!(found.len(), 1, "{proto} to {dport} tracked once: {dump:#}");
    let c = found[0].clone();
    let port: u64 = c["snat"]
        .as_str()
        .and_then(|s| s.strip_prefix("192.0.2.10:"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("masqueraded to the node IP: {c:#}"));
    assert_eq!(c["worker"], port % 2, "owned by SNAT port % 2: {c:#}");
    c
}

/// Checks that connection `c` (see [`owned_once`]) crossed workers: every packet of
/// the direction that arrives on the port its owner does not poll was handed off to
/// it by the other worker, while the owner handed off (next to) nothing of what it
/// received. `before`: each worker's hand-offs before the connection's first packet.
fn assert_handed_off(d: &Ferruled, c: &Value, before: [u64; 2], pod: u64, uplink: u64) {
    let owner = c["worker"].as_u64().expect("worker");
    let (crossing, kept, other) = if owner == uplink {
        ("original", "reply", pod)
    } else {
        assert_eq!(owner, pod, "{c:#}");
        ("reply", "original", uplink)
    };
    let crossed = c[crossing]["packets"].as_u64().expect("packets");
    let stayed = c[kept]["packets"].as_u64().expect("packets");
    assert!(crossed > 0 && stayed > 0, "{c:#}");
    let by = |s: &Value, w: u64| handoffs(s, w) - before[w as usize];
    let s = d.wait_stats("the hand-offs", |s| by(s, other) >= crossed);
    assert!(
        by(&s, owner) < stayed / 4,
        "worker {owner} owns {c:#} but handed off {} packets: {s:#}",
        by(&s, owner)
    );
}

#[test]
fn two_workers_hand_off_kernel_tcp_and_udp_byte_exact() {
    let topo = Topology::up("w");
    let mut d = masquerading(&topo, "w2", two_worker_config);
    let dir = tempfile::tempdir().expect("tempdir");

    // Two workers (and the control thread's row): pod-b's queue and the uplink's are
    // polled by different ones.
    let s = d.ctl_json(&["stats"]);
    let rows = s["workers"].as_array().expect("workers");
    assert_eq!(rows.len(), 3, "{s:#}");
    assert_eq!(rows[2]["queues"], serde_json::json!(["control"]), "{s:#}");
    let pod = poller(&s, "pod-b/0");
    let uplink = poller(&s, "uplink0/0");
    assert_ne!(pod, uplink, "{s:#}");
    let before = |s: &Value| [handoffs(s, 0), handoffs(s, 1)];

    // TCP: 4 MiB from pod-b, masqueraded.
    let start = before(&d.ctl_json(&["stats"]));
    let started = Instant::now();
    let (server, client) = start_tcp(&topo, dir.path(), ("rt", INTERNET, 8081), "pb");
    let peer = tcp_result(&d, client);
    let tcp_time = started.elapsed();
    drop(server);
    let c = owned_once(&d, "tcp", 8081);
    assert_eq!(c["original"]["src"], "10.1.0.3", "{c:#}");
    assert_eq!(
        peer,
        c["snat"].as_str().unwrap(),
        "the server saw the SNAT address"
    );
    assert_handed_off(&d, &c, start, pod, uplink);

    // UDP: 4 MiB from pod-b and back.
    let start = before(&d.ctl_json(&["stats"]));
    let bulk = udp_bulk(&topo, &d, dir.path(), "pb", 5302);
    let u = owned_once(&d, "udp", 5302);
    assert_eq!(u["original"]["src"], "10.1.0.3", "{u:#}");
    assert_eq!(u["state"], "ASSURED", "{u:#}");
    assert_eq!(
        bulk.peer,
        u["snat"].as_str().unwrap(),
        "the server saw the SNAT address"
    );
    assert_handed_off(&d, &u, start, pod, uplink);

    assert_only_chatter_dropped(&d);
    eprintln!(
        "two workers: TCP 4 MiB in {:.1} s (owner {}), UDP 4 MiB echoed in {:.1} s \
         (owner {}, {} resent)\n{}\n{}",
        tcp_time.as_secs_f64(),
        c["worker"],
        bulk.elapsed.as_secs_f64(),
        u["worker"],
        bulk.retransmits,
        text(&d.ctl(&["stats"])),
        text(&d.ctl(&["ct", "dump"]))
    );
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
    let (server, client) = start_tcp(&topo, dir.path(), ("pb", "10.1.0.3", 8080), "pa");
    let peer = tcp_result(&d, client);
    assert!(peer.starts_with("10.1.0.2:"), "not translated: {peer}");
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
