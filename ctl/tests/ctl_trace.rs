//! `ferrulectl trace ...` against a fake daemon: the `trace.run` params of the
//! synthetic packet, the stage and verdict lines, `--json`, `trace start`, and
//! `trace dump` with the pcap file it writes (read back with a small pcap reader).

mod ctl_support;

use std::path::Path;
use std::process::Command;

use ctl_support::{empty, FakeDaemon};
use ferrule_api::rpc::{self, RpcError};
use ferrule_api::{
    trace_method, TraceDump, TraceResult, TraceRun, TraceStage, TraceStart, TraceVerdict,
    TracedPacket,
};
use serde_json::{json, Value};

fn stage(stage: &str, detail: &str) -> TraceStage {
    TraceStage {
        stage: stage.to_string(),
        detail: detail.to_string(),
    }
}

fn forwarded() -> TraceResult {
    TraceResult {
        stages: vec![
            stage(
                "parse",
                "ipv4 tcp 10.1.0.5:40000 -> 203.0.113.7:443 flags SYN len 40 ttl 64",
            ),
            stage("l2", "dst 02:fe:00:00:00:01 is the port's MAC"),
            stage("ttl", "64 -> 63"),
            stage(
                "route",
                "default: 0.0.0.0/0 via 192.0.2.1 out uplink0 (config)",
            ),
            stage("neighbor", "192.0.2.1 is 0a:1b:2c:3d:4e:5f (reachable)"),
            stage("mtu", "40 <= 9000"),
            stage("rewrite", "src 0a:1b:2c:3d:4e:00 dst 0a:1b:2c:3d:4e:5f"),
        ],
        verdict: TraceVerdict::Forward {
            port: "uplink0".to_string(),
        },
    }
}

fn dropped() -> TraceResult {
    TraceResult {
        stages: vec![
            stage("parse", "ipv6 udp [2001:db8::5]:5353 -> [2001:db8:9::1]:53"),
            stage("route", "blue: no route to 2001:db8:9::1"),
        ],
        verdict: TraceVerdict::Drop {
            reason: "no-route".to_string(),
        },
    }
}

const RUN: [&str; 9] = [
    "trace",
    "--in-port",
    "pod-web",
    "--proto",
    "tcp",
    "--src",
    "10.1.0.5:40000",
    "--dst",
    "203.0.113.7:443",
];

fn args<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra).copied().collect()
}

fn one_call(daemon: &FakeDaemon) -> (String, Value) {
    let mut calls = daemon.take_calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    calls.remove(0)
}

#[test]
fn trace_sends_the_synthetic_packet() {
    let daemon = FakeDaemon::start([(trace_method::RUN, Ok(json!(forwarded())))]);
    daemon.ctl(&RUN).ok();
    let (method, params) = one_call(&daemon);
    assert_eq!(method, trace_method::RUN);
    assert_eq!(
        params,
        json!({ "in_port": "pod-web", "proto": "tcp", "src": "10.1.0.5:40000",
                "dst": "203.0.113.7:443" })
    );
    let decoded: TraceRun = rpc::parse_params(&params).expect("decodes as TraceRun");
    assert_eq!(
        (decoded.tcp_flags, decoded.len, decoded.ttl),
        (None, None, None)
    );

    daemon
        .ctl(&args(
            &RUN,
            &["--tcp-flags", "SYN,ACK", "--len", "1500", "--ttl", "1"],
        ))
        .ok();
    let params = one_call(&daemon).1;
    assert_eq!(
        params,
        json!({ "in_port": "pod-web", "proto": "tcp", "src": "10.1.0.5:40000",
                "dst": "203.0.113.7:443", "tcp_flags": "SYN,ACK", "len": 1500, "ttl": 1 })
    );
    rpc::parse_params::<TraceRun>(&params).expect("decodes as TraceRun");

    // Every protocol name, IPv6 addresses with ports, the bounds of --len and --ttl.
    for proto in ["tcp", "udp", "sctp", "icmp", "icmpv6"] {
        daemon
            .ctl(&[
                "trace",
                "--proto",
                proto,
                "--in-port",
                "uplink0",
                "--src",
                "[2001:db8::1]:1",
                "--dst",
                "2001:db8::2",
                "--len",
                "20",
                "--ttl",
                "0",
            ])
            .ok();
        assert_eq!(
            one_call(&daemon).1,
            json!({ "in_port": "uplink0", "proto": proto, "src": "[2001:db8::1]:1",
                    "dst": "2001:db8::2", "len": 20, "ttl": 0 })
        );
    }
    daemon
        .ctl(&args(&RUN, &["--len", "9600", "--ttl", "255"]))
        .ok();
    assert_eq!(one_call(&daemon).1["len"], 9600);
}

#[test]
fn trace_usage_errors_exit_2() {
    let daemon = FakeDaemon::start([(trace_method::RUN, Ok(json!(forwarded())))]);
    for extra in [
        &["--len", "19"][..],
        &["--len", "9601"],
        &["--ttl", "256"],
        &["--ttl", "-1"],
        &["--len", "big"],
        &["--proto", "gre"],
        &["--bogus"],
        // The synthetic run and a subcommand do not mix.
        &["start", "--port", "uplink0", "--count", "1"],
        &["dump"],
    ] {
        let out = daemon.ctl(&args(&RUN, extra));
        out.usage_error();
    }
    let stderr = daemon
        .ctl(&[
            "trace",
            "--in-port",
            "a",
            "--proto",
            "gre",
            "--src",
            "x",
            "--dst",
            "y",
        ])
        .usage_error()
        .to_string();
    assert!(
        stderr.contains("possible values: tcp, udp, sctp, icmp, icmpv6"),
        "{stderr}"
    );
    // Each of the four is required without a subcommand.
    for skip in [1, 3, 5, 7] {
        let partial: Vec<&str> = RUN
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != skip && i != skip + 1)
            .map(|(_, a)| *a)
            .collect();
        let stderr = daemon.ctl(&partial).usage_error().to_string();
        assert!(stderr.contains(RUN[skip]), "{partial:?}: {stderr}");
    }
    daemon.ctl(&["trace"]).usage_error();
    assert!(daemon.take_calls().is_empty(), "usage errors send nothing");
}

#[test]
fn trace_prints_stages_then_the_verdict() {
    let daemon = FakeDaemon::start([(trace_method::RUN, Ok(json!(forwarded())))]);
    let stdout = daemon.ctl(&RUN).ok().to_string();
    assert_eq!(
        stdout,
        "\
parse     ipv4 tcp 10.1.0.5:40000 -> 203.0.113.7:443 flags SYN len 40 ttl 64
l2        dst 02:fe:00:00:00:01 is the port's MAC
ttl       64 -> 63
route     default: 0.0.0.0/0 via 192.0.2.1 out uplink0 (config)
neighbor  192.0.2.1 is 0a:1b:2c:3d:4e:5f (reachable)
mtu       40 <= 9000
rewrite   src 0a:1b:2c:3d:4e:00 dst 0a:1b:2c:3d:4e:5f
verdict: forward uplink0
"
    );
    assert_eq!(stdout.lines().last(), Some("verdict: forward uplink0"));

    let daemon = FakeDaemon::start([(trace_method::RUN, Ok(json!(dropped())))]);
    let stdout = daemon.ctl(&RUN).ok().to_string();
    assert_eq!(
        stdout,
        "\
parse  ipv6 udp [2001:db8::5]:5353 -> [2001:db8:9::1]:53
route  blue: no route to 2001:db8:9::1
verdict: drop no-route
"
    );
    assert_eq!(stdout.lines().last(), Some("verdict: drop no-route"));
}

#[test]
fn trace_json_is_the_trace_result() {
    for result in [forwarded(), dropped()] {
        let daemon = FakeDaemon::start([(trace_method::RUN, Ok(json!(result)))]);
        for position in [0, 1] {
            // --json before or after the subcommand.
            let argv = if position == 0 {
                args(&["--json"], &RUN)
            } else {
                args(&RUN, &["--json"])
            };
            let printed = daemon.ctl(&argv).json();
            assert_eq!(printed, json!(result));
            let back: TraceResult = serde_json::from_value(printed).expect("a TraceResult");
            assert_eq!(back, result);
        }
    }
    let daemon = FakeDaemon::start([(trace_method::RUN, Ok(json!(dropped())))]);
    assert_eq!(
        daemon.ctl(&args(&["--json"], &RUN)).json()["verdict"],
        json!({ "action": "drop", "reason": "no-route" })
    );
}

#[test]
fn trace_errors_and_bad_replies() {
    let daemon = FakeDaemon::start([(
        trace_method::RUN,
        Err(RpcError::invalid_params(
            "in_port",
            "no port named \"pod-nope\"",
        )),
    )]);
    let out = daemon.ctl(&[
        "trace",
        "--in-port",
        "pod-nope",
        "--proto",
        "udp",
        "--src",
        "10.1.0.5",
        "--dst",
        "10.1.0.6",
    ]);
    assert_eq!(
        out.failed(),
        "ferrulectl: ferruled: invalid params: `in_port`: no port named \"pod-nope\" \
         (code -32602)\n"
    );

    let daemon = FakeDaemon::start([(
        trace_method::RUN,
        Ok(json!({ "stages": [], "verdict": { "action": "teleport" } })),
    )]);
    let out = daemon.ctl(&RUN);
    assert!(
        out.failed()
            .starts_with("ferrulectl: unexpected reply from ferruled: "),
        "{out:?}"
    );
}

#[test]
fn trace_start_asks_for_the_next_packets() {
    let daemon = FakeDaemon::start([(trace_method::START, empty())]);
    let out = daemon.ctl(&["trace", "start", "--port", "uplink0", "--count", "10"]);
    assert_eq!(
        out.ok(),
        "tracing the next 10 packets received on uplink0\n"
    );
    let (method, params) = one_call(&daemon);
    assert_eq!(method, trace_method::START);
    assert_eq!(params, json!({ "port": "uplink0", "count": 10 }));
    let decoded: TraceStart = rpc::parse_params(&params).expect("decodes");
    assert_eq!(decoded.count, 10);

    let out = daemon.ctl(&["trace", "start", "--count", "1", "--port", "pod-web"]);
    assert_eq!(out.ok(), "tracing the next packet received on pod-web\n");
    one_call(&daemon);
    daemon
        .ctl(&["trace", "start", "--port", "p", "--count", "1000"])
        .ok();
    assert_eq!(one_call(&daemon).1["count"], 1000);

    let out = daemon.ctl(&["--json", "trace", "start", "--port", "p", "--count", "5"]);
    assert_eq!(out.json(), json!({}));
    one_call(&daemon);
    // Global options between `trace` and `start`.
    let out = daemon.ctl(&[
        "trace",
        "--json",
        "--timeout",
        "5",
        "start",
        "--port",
        "p",
        "--count",
        "5",
    ]);
    assert_eq!(out.json(), json!({}));
    assert_eq!(one_call(&daemon).1, json!({ "port": "p", "count": 5 }));

    // The synthetic packet's options do not go with a subcommand, even partially.
    for bad in [
        &[
            "trace",
            "--in-port",
            "a",
            "start",
            "--port",
            "p",
            "--count",
            "1",
        ][..],
        &["trace", "--ttl", "3", "dump"],
    ] {
        let stderr = daemon.ctl(bad).usage_error().to_string();
        assert!(
            stderr.contains("cannot be used with `trace start`"),
            "{stderr}"
        );
    }

    for bad in [
        &["trace", "start", "--port", "p", "--count", "0"][..],
        &["trace", "start", "--port", "p", "--count", "1001"],
        &["trace", "start", "--port", "p"],
        &["trace", "start", "--count", "5"],
    ] {
        daemon.ctl(bad).usage_error();
    }
    assert!(daemon.take_calls().is_empty());

    let daemon = FakeDaemon::start([(
        trace_method::START,
        Err(RpcError::invalid_params("port", "no port named \"x\"")),
    )]);
    let out = daemon.ctl(&["trace", "start", "--port", "x", "--count", "5"]);
    assert!(out.failed().contains("`port`: no port named"), "{out:?}");
}

/// An Ethernet/IPv4/UDP frame, 60 bytes on the wire; the daemon keeps its first 42.
const FRAME_1: &str = "02fe00000001\
                       0a1b2c3d4e5f\
                       0800\
                       4500002e12340000401100000a0100050a010006\
                       14e90035001a0000";
/// An ARP request, 42 bytes, all of it captured.
const FRAME_2: &str = "ffffffffffff0a1b2c3d4e5f08060001080006040001\
                       0a1b2c3d4e5fc0000201000000000000c0000277";

fn captured() -> TraceDump {
    TraceDump {
        remaining: 8,
        packets: vec![
            TracedPacket {
                port: "pod-web".to_string(),
                time_secs: 12.345_678,
                len: 60,
                data_hex: FRAME_1.to_string(),
                stages: vec![
                    stage("parse", "ipv4 udp 10.1.0.5:5353 -> 10.1.0.6:53"),
                    stage("route", "default: 10.1.0.6/32 out pod-db (pod)"),
                ],
                verdict: TraceVerdict::Forward {
                    port: "pod-db".to_string(),
                },
            },
            TracedPacket {
                port: "uplink0".to_string(),
                time_secs: 13.5,
                len: 42,
                data_hex: FRAME_2.to_uppercase(),
                stages: vec![stage("parse", "arp who-has 192.0.2.119")],
                verdict: TraceVerdict::Drop {
                    reason: "not-ip".to_string(),
                },
            },
        ],
    }
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

const TRACE_DUMP_TEXT: &str = "\
#1  port pod-web  t=12.346s  len 60
  parse  ipv4 udp 10.1.0.5:5353 -> 10.1.0.6:53
  route  default: 10.1.0.6/32 out pod-db (pod)
  verdict: forward pod-db

#2  port uplink0  t=13.500s  len 42
  parse  arp who-has 192.0.2.119
  verdict: drop not-ip

remaining: 8
";

#[test]
fn trace_dump_prints_each_packet() {
    let daemon = FakeDaemon::start([(trace_method::DUMP, Ok(json!(captured())))]);
    assert_eq!(daemon.ctl(&["trace", "dump"]).ok(), TRACE_DUMP_TEXT);
    assert_eq!(
        one_call(&daemon),
        (trace_method::DUMP.to_string(), Value::Null)
    );

    assert_eq!(
        daemon.ctl(&["trace", "dump", "--json"]).json(),
        json!(captured())
    );

    let none = FakeDaemon::start([(
        trace_method::DUMP,
        Ok(json!({ "remaining": 0, "packets": [] })),
    )]);
    assert_eq!(
        none.ctl(&["trace", "dump"]).ok(),
        "no packets captured\nremaining: 0\n"
    );
}

/// One record of a classic pcap file.
#[derive(Debug, PartialEq)]
struct Record {
    ts_sec: u32,
    ts_usec: u32,
    orig_len: u32,
    data: Vec<u8>,
}

/// Reads a little-endian classic pcap file, checking its header; returns the
/// link type and the records.
fn read_pcap(bytes: &[u8]) -> (u32, Vec<Record>) {
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    assert!(bytes.len() >= 24, "no pcap header");
    assert_eq!(u32_at(0), 0xa1b2_c3d4, "magic");
    assert_eq!((u16_at(4), u16_at(6)), (2, 4), "version");
    assert_eq!((u32_at(8), u32_at(12)), (0, 0), "thiszone, sigfigs");
    assert_eq!(u32_at(16), 65_535, "snaplen");
    let linktype = u32_at(20);
    let mut records = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        assert!(at + 16 <= bytes.len(), "truncated record header");
        let caplen = u32_at(at + 8) as usize;
        let record = Record {
            ts_sec: u32_at(at),
            ts_usec: u32_at(at + 4),
            orig_len: u32_at(at + 12),
            data: bytes[at + 16..at + 16 + caplen].to_vec(),
        };
        assert!(record.ts_usec < 1_000_000);
        assert!(record.orig_len as usize >= caplen);
        records.push(record);
        at += 16 + caplen;
    }
    (linktype, records)
}

#[test]
fn trace_dump_writes_a_pcap_file() {
    let daemon = FakeDaemon::start([(trace_method::DUMP, Ok(json!(captured())))]);
    let file = daemon.dir().join("trace.pcap");
    let file_arg = file.to_str().expect("utf-8 path");

    let out = daemon.ctl(&["trace", "dump", "--pcap", file_arg]);
    assert_eq!(
        out.ok(),
        format!("{TRACE_DUMP_TEXT}wrote 2 packets to {file_arg}\n")
    );
    let bytes = std::fs::read(&file).expect("pcap written");
    let (linktype, records) = read_pcap(&bytes);
    assert_eq!(linktype, 1, "Ethernet");
    assert_eq!(
        records,
        [
            Record {
                ts_sec: 12,
                ts_usec: 345_678,
                orig_len: 60,
                data: unhex(FRAME_1),
            },
            Record {
                ts_sec: 13,
                ts_usec: 500_000,
                orig_len: 42,
                data: unhex(FRAME_2),
            },
        ]
    );
    assert_eq!(records[0].data.len(), 42);
    tshark_reads(&file, 2);

    // With --json, stdout stays pure JSON; the note goes to stderr. The file is
    // replaced.
    let out = daemon.ctl(&["--json", "trace", "dump", "--pcap", file_arg]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let printed: Value = serde_json::from_str(&out.stdout).expect("stdout is JSON");
    assert_eq!(printed, json!(captured()));
    assert_eq!(out.stderr, format!("wrote 2 packets to {file_arg}\n"));
    assert_eq!(std::fs::read(&file).expect("pcap"), bytes);

    // No packets: a valid, empty capture.
    let none = FakeDaemon::start([(
        trace_method::DUMP,
        Ok(json!({ "remaining": 5, "packets": [] })),
    )]);
    let empty_file = none.dir().join("empty.pcap");
    let empty_arg = empty_file.to_str().expect("utf-8 path");
    let out = none.ctl(&["trace", "dump", "--pcap", empty_arg]);
    assert!(out
        .ok()
        .ends_with(&format!("wrote 0 packets to {empty_arg}\n")));
    let (_, records) = read_pcap(&std::fs::read(&empty_file).expect("pcap"));
    assert!(records.is_empty());
}

/// When tshark is installed, checks it opens the file and sees `packets` frames.
fn tshark_reads(file: &Path, packets: usize) {
    let Ok(out) = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(file)
        .args(["-T", "fields", "-e", "frame.len", "-e", "frame.cap_len"])
        .output()
    else {
        eprintln!("tshark is not installed; not checking the pcap file with it");
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), packets, "{stdout}");
    assert_eq!(stdout.lines().next(), Some("60\t42"), "{stdout}");
}

#[test]
fn trace_dump_rejects_bad_hex_and_unwritable_files() {
    let mut bad = captured();
    bad.packets[1].data_hex = "0a1b2".to_string();
    let daemon = FakeDaemon::start([(trace_method::DUMP, Ok(json!(bad)))]);
    let file = daemon.dir().join("bad.pcap");
    let out = daemon.ctl(&["trace", "dump", "--pcap", file.to_str().expect("utf-8")]);
    let stderr = out.failed();
    assert!(
        stderr.starts_with("ferrulectl: unexpected reply from ferruled: "),
        "{stderr}"
    );
    assert!(stderr.contains("packets[1].data_hex"), "{stderr}");
    assert!(!file.exists(), "nothing written from a bad reply");

    let daemon = FakeDaemon::start([(trace_method::DUMP, Ok(json!(captured())))]);
    let file = daemon.dir().join("no-such-dir").join("t.pcap");
    let out = daemon.ctl(&["trace", "dump", "--pcap", file.to_str().expect("utf-8")]);
    let stderr = out.failed();
    assert!(
        stderr.starts_with("ferrulectl: cannot write ") && stderr.contains("t.pcap"),
        "{stderr}"
    );
}
