//! End-to-end: a real `ferruled` on virtual ports, queried with `ferrulectl`, stopped
//! with SIGTERM; it must forward byte-for-byte, report its counters, refuse bad
//! configuration precisely and leave no socket or hugepage file behind.

use etherparse::PacketBuilder;
use ferrule_e2e::*;
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

fn null_pair(prefix: &str) -> String {
    format!(
        "{}[[port]]\nname = \"pod0\"\ndevargs = \"net_null_{p}0,size=64\"\nrole = \"pod\"\n\
         mac = \"02:aa:00:00:00:01\"\nxconnect = \"uplink0\"\n\n\
         [[port]]\nname = \"uplink0\"\ndevargs = \"net_null_{p}1,size=64\"\nrole = \"uplink\"\n\
         xconnect = \"pod0\"\n",
        base_config(prefix),
        p = prefix.replace('-', "_")
    )
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("expected a number, got {v}"))
}

#[test]
fn forwards_reports_and_stops_cleanly_on_sigterm() {
    let prefix = unique_prefix("life");
    let mut d = Ferruled::start(&null_pair(&prefix), &prefix).expect("start ferruled");

    // ports: names, roles, link, configured MAC.
    let ports = d.ctl_json(&["ports"]);
    let list = ports["ports"].as_array().expect("ports array");
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["name"], "pod0");
    assert_eq!(list[0]["role"], "pod");
    assert_eq!(list[0]["link"], "up");
    assert_eq!(list[0]["mac"], "02:aa:00:00:00:01");
    assert_eq!(list[0]["xconnect"], "uplink0");
    assert_eq!(list[1]["role"], "uplink");

    // Traffic flows both ways and every received packet is sent or counted as a drop.
    let s = d.wait_stats("forwarding", |s| u(&s["totals"]["tx_packets"]) > 100_000);
    let w = &s["workers"][0];
    assert_eq!(u(&w["lcore"]), 1);
    assert!(u(&w["busy_polls"]) > 0 && u(&w["polls"]) >= u(&w["busy_polls"]));
    for p in s["ports"].as_array().expect("ports") {
        let c = &p["counters"];
        assert!(u(&c["rx_packets"]) > 0, "{p}");
        assert_eq!(u(&c["rx_bytes"]) % 64, 0, "64-byte frames: {p}");
    }
    assert!(u(&s["uptime_secs"].as_f64().map(|f| f as u64).into()) < 3600);

    // Human output: aligned tables with the port names and a drop summary.
    let out = d.ctl(&["ports"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("pod0") && text.contains("uplink0") && text.contains("02:aa:00:00:00:01"),
        "{text}"
    );
    let out = d.ctl(&["stats"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("WORKER") && text.contains("pod0/0"), "{text}");

    let v = d.ctl_json(&["version"]);
    assert_eq!(
        v["daemon"]["api_version"]
            .as_u64()
            .or(v["api_version"].as_u64()),
        Some(1),
        "{v}"
    );

    let status = d.terminate();
    assert_eq!(
        status.code(),
        Some(0),
        "exit status; log:\n{}",
        d.log_text()
    );
    assert!(!d.socket.exists(), "control socket removed");
    assert!(
        leftovers(&prefix).is_empty(),
        "hugepage/runtime files left: {:?}",
        leftovers(&prefix)
    );
    assert!(d.log_text().contains("ferruled stopped"));
}

/// Frames of many shapes, built by etherparse.
fn crafted_frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for i in 0u16..120 {
        let payload: Vec<u8> = (0..(i as usize * 11) % 1400)
            .map(|b| (b as u8).wrapping_mul(7) ^ i as u8)
            .collect();
        let mut f = Vec::new();
        let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 1, i as u8], [2, 0, 0, 0, 2, 1]);
        match i % 4 {
            0 => eth
                .ipv4([10, 0, 0, 1], [10, 0, 1, i as u8], 64)
                .udp(1000 + i, 53)
                .write(&mut f, &payload),
            1 => eth
                .ipv4([10, 0, 0, 2], [192, 0, 2, 1], 3)
                .tcp(40000 + i, 443, u32::from(i), 1024)
                .write(&mut f, &payload),
            2 => eth
                .single_vlan(etherparse::VlanId::try_new(100 + i).expect("vlan id"))
                .ipv4([10, 0, 0, 3], [10, 9, 9, 9], 64)
                .udp(53, 5353)
                .write(&mut f, &payload),
            _ => eth
                .ipv6([0xfd; 16], [0xfe; 16], 64)
                .tcp(443, 50000 + i, 7, 512)
                .write(&mut f, &payload),
        }
        .expect("build frame");
        frames.push(f);
    }
    frames
}

#[test]
fn pcap_frames_come_out_byte_for_byte() {
    let prefix = unique_prefix("pcap");
    let dir = tempfile::tempdir().expect("tempdir");
    let frames = crafted_frames();
    let input = dir.path().join("in.pcap");
    let empty = dir.path().join("empty.pcap");
    let output = dir.path().join("out.pcap");
    write_pcap(&input, &frames).expect("write pcap");
    write_pcap(&empty, &[]).expect("write pcap");
    let p = prefix.replace('-', "_");
    let cfg = format!(
        "{}[[port]]\nname = \"in\"\ndevargs = \"net_pcap_{p}0,rx_pcap={},tx_pcap={}\"\nrole = \"pod\"\nxconnect = \"out\"\n\n\
         [[port]]\nname = \"out\"\ndevargs = \"net_pcap_{p}1,rx_pcap={},tx_pcap={}\"\nrole = \"uplink\"\n",
        base_config(&prefix),
        input.display(),
        dir.path().join("in-tx.pcap").display(),
        empty.display(),
        output.display(),
    );
    let mut d = Ferruled::start_in(dir, &cfg, &prefix).expect("start ferruled");
    let n = frames.len() as u64;
    let s = d.wait_stats("all frames forwarded", |s| {
        u(&s["totals"]["tx_packets"]) == n
    });
    assert_eq!(u(&s["totals"]["rx_packets"]), n);
    assert_eq!(u(&s["totals"]["drops"]), 0);
    let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
    assert_eq!(u(&s["ports"][0]["counters"]["rx_bytes"]), bytes);
    assert_eq!(u(&s["ports"][1]["counters"]["tx_bytes"]), bytes);
    assert_eq!(d.terminate().code(), Some(0), "{}", d.log_text());
    let out = read_pcap(&output).expect("read output pcap");
    assert_eq!(out.len(), frames.len(), "frame count");
    for (i, (a, b)) in frames.iter().zip(&out).enumerate() {
        assert_eq!(a, b, "frame {i} differs");
    }
}

#[test]
fn control_socket_survives_bad_requests() {
    let prefix = unique_prefix("rpc");
    let mut d = Ferruled::start(&null_pair(&prefix), &prefix).expect("start ferruled");
    let r: Value =
        serde_json::from_str(&d.raw_request(b"{not json").expect("reply")).expect("json reply");
    assert_eq!(r["error"]["code"], -32700);
    let r: Value = serde_json::from_str(
        &d.raw_request(br#"{"jsonrpc":"2.0","id":7,"method":"ports.frobnicate"}"#)
            .expect("reply"),
    )
    .expect("json");
    assert_eq!(
        (r["id"].as_u64(), r["error"]["code"].as_i64()),
        (Some(7), Some(-32601))
    );
    let r: Value = serde_json::from_str(
        &d.raw_request(
            br#"{"jsonrpc":"2.0","id":8,"method":"stats.get","params":{"verbose":true}}"#,
        )
        .expect("reply"),
    )
    .expect("json");
    assert_eq!(r["error"]["code"], -32602);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("verbose"),
        "{r}"
    );
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"version","params":{{"x":"{}"}}}}"#,
        "a".repeat(2 << 20)
    );
    let r: Value =
        serde_json::from_str(&d.raw_request(big.as_bytes()).expect("reply")).expect("json");
    assert_eq!(r["error"]["code"], -32600);
    // Still alive and answering.
    assert!(d.ctl(&["version"]).status.success());
    assert_eq!(d.terminate().code(), Some(0));
}

#[test]
fn a_second_daemon_on_the_same_socket_is_refused() {
    let prefix = unique_prefix("dup");
    let d = Ferruled::start(&null_pair(&prefix), &prefix).expect("start ferruled");
    let cfg = d.dir.path().join("ferrule.toml");
    let out = Command::new(ferruled_bin())
        .args(["--config"])
        .arg(&cfg)
        .arg("--socket")
        .arg(&d.socket)
        .args(["--file-prefix", &format!("{prefix}-second")])
        .stdin(Stdio::null())
        .output()
        .expect("run ferruled");
    // It took its own prefix's lock before it found the socket's taken; it is gone.
    let _ = std::fs::remove_file(eal_lock(&format!("{prefix}-second")));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        d.ctl(&["version"]).status.success(),
        "the first daemon is untouched"
    );
    assert!(d.socket.exists());
}

fn run_ferruled(cfg_text: &str, extra: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ferrule.toml");
    std::fs::write(&cfg, cfg_text).expect("write config");
    let out = Command::new(ferruled_bin())
        .arg("--config")
        .arg(&cfg)
        .arg("--socket")
        .arg(dir.path().join("s.sock"))
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("run ferruled");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_configuration_names_key_and_line_and_exits_2() {
    let prefix = unique_prefix("badcfg");
    let good = null_pair(&prefix);
    let line_of = |text: &str, needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .map(|i| i + 1)
            .expect("needle in config")
    };
    let bad = good.replace("role = \"uplink\"", "role = \"uplink\"\nspeed = 10");
    let (code, err) = run_ferruled(&bad, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("speed") && err.contains(&format!(":{}:", line_of(&bad, "speed"))),
        "{err}"
    );
    let bad = good.replace("02:aa:00:00:00:01", "02:aa:00:00:01");
    let (code, err) = run_ferruled(&bad, &[]);
    assert_eq!(code, Some(2), "{err}");
    let want = format!(":{}:", line_of(&bad, "02:aa:00:00:01"));
    assert!(err.contains("port[0].mac") && err.contains(&want), "{err}");
    let (code, err) = run_ferruled(
        &good.replace("xconnect = \"pod0\"", "xconnect = \"pod9\""),
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("port[1].xconnect") && err.contains("pod9"),
        "{err}"
    );
    let (code, out) = run_ferruled(&good, &["--check"]);
    assert_eq!(code, Some(0), "{out}");
    // Routes that clash with a pod's own address are refused before anything starts.
    let clash = good.replace(
        "role = \"pod\"\n",
        "role = \"pod\"\npod_ips = [\"10.1.0.2\"]\npod_mac = \"02:00:00:00:01:02\"\n",
    ) + "\n[[route]]\nprefix = \"10.1.0.2/32\"\nblackhole = true\n";
    let (code, err) = run_ferruled(&clash, &["--check"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("10.1.0.2/32") && err.contains("pod route"),
        "{err}"
    );
}

#[test]
fn a_port_that_fails_to_start_is_named() {
    let prefix = unique_prefix("badport");
    let cfg = null_pair(&prefix).replace(
        &format!("net_null_{}1", prefix.replace('-', "_")),
        "net_nosuchdriver0",
    );
    let (code, err) = run_ferruled(&cfg, &[]);
    // The daemon that held its prefix's lock has exited.
    let _ = std::fs::remove_file(eal_lock(&prefix));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("port \"uplink0\"") && err.contains("net_nosuchdriver0"),
        "{err}"
    );
    assert!(leftovers(&prefix).is_empty());
}

#[test]
fn multi_queue_ports_are_polled_on_every_queue() {
    let prefix = unique_prefix("mq");
    let cfg = null_pair(&prefix).replace(
        "xconnect = \"uplink0\"\n",
        "xconnect = \"uplink0\"\nrx_queues = 2\n",
    );
    let mut d = Ferruled::start(&cfg, &prefix).expect("start ferruled");
    let s = d.wait_stats("forwarding", |s| u(&s["totals"]["tx_packets"]) > 10_000);
    let queues: Vec<&str> = s["workers"][0]["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(queues, vec!["pod0/0", "pod0/1", "uplink0/0"]);
    let ports = d.ctl_json(&["ports"]);
    assert_eq!(ports["ports"][0]["rx_queues"], 2);
    assert_eq!(d.terminate().code(), Some(0), "{}", d.log_text());
}

#[test]
fn port_add_opens_only_allowed_devices_and_files() {
    let prefix = unique_prefix("devs");
    let mut d = Ferruled::start(&null_pair(&prefix), &prefix).expect("start ferruled");
    let dir = d.dir.path().to_path_buf();
    let outside = tempfile::tempdir().expect("tempdir");
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    let inside = dir.join("existing.pcap");
    std::fs::write(&inside, b"keep me too").unwrap();
    let v = victim.display().to_string();
    let before = d.ctl_json(&["ports"]);
    let refused = |args: &[&str], words: &str| {
        let mut argv = vec!["port", "add", "vv", "--role", "host"];
        argv.extend_from_slice(args);
        let o = d.ctl(&argv);
        let text = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{argv:?} was accepted");
        assert!(text.contains(words), "{argv:?}: {text}");
    };
    // Raw devargs (vhost's unlink, pcap's truncate and read, rx_iface sniffing).
    for devargs in [
        format!("net_vhost7,iface={v}"),
        format!("net_pcap5,tx_pcap={v}"),
        format!("net_pcap6,rx_pcap={v}"),
        "net_pcap7,rx_iface_in=lo".to_string(),
    ] {
        refused(&["--devargs", &devargs], "allow_raw_devargs");
    }
    // Paths outside the allowed directories, or with devargs syntax in them.
    refused(&["--vhost-user", &v], "outside the allowed directories");
    let comma = format!("{}/x.sock,client=1", dir.display());
    refused(&["--vhost-user", &comma], "a path of at most");
    let dotdot = format!("{}/../victim", dir.display());
    refused(&["--vhost-user", &dotdot], "without '.' or '..'");
    refused(&["--rx-pcap", &v], "outside the allowed directories");
    let pcap_in = dir.join("in.pcap");
    write_pcap(&pcap_in, &[]).unwrap();
    let pin = pcap_in.display().to_string();
    refused(
        &[
            "--rx-pcap",
            &pin,
            "--tx-pcap",
            &inside.display().to_string(),
        ],
        "tx_pcap names a new file",
    );
    refused(&["--af-packet", "nosuchif0"], "no interface named");
    refused(&["--tap", "lo,iface=x"], "interface name");
    // A failed add (a pod address another port holds) leaves no directory behind.
    ok(
        &d,
        &[
            "port",
            "add",
            "p1",
            "--null",
            "--ip",
            "10.9.0.5",
            "--mac",
            "02:00:00:00:09:05",
        ],
    );
    let nested = dir.join("vh").join("deep").join("x.sock");
    let o = d.ctl(&[
        "port",
        "add",
        "p2",
        "--vhost-user",
        &nested.display().to_string(),
        "--ip",
        "10.9.0.5",
        "--mac",
        "02:00:00:00:09:06",
    ]);
    let text = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "a second pod with 10.9.0.5 was accepted"
    );
    assert!(
        text.contains("10.9.0.5"),
        "refused for another reason: {text}"
    );
    assert!(
        !dir.join("vh").exists(),
        "the add left its directories behind"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert_eq!(std::fs::read(&inside).unwrap(), b"keep me too");
    // Device kinds that are allowed work.
    let pout = dir.join("out.pcap");
    ok(
        &d,
        &[
            "port",
            "add",
            "cap",
            "--role",
            "host",
            "--rx-pcap",
            &pin,
            "--tx-pcap",
            &pout.display().to_string(),
        ],
    );
    let list = d.ctl_json(&["ports"]);
    let cap = list["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "cap")
        .expect("cap listed");
    assert!(
        cap["devargs"]
            .as_str()
            .unwrap()
            .starts_with("net_pcap_cap,rx_pcap="),
        "{cap}"
    );
    assert!(pout.exists());
    ok(&d, &["port", "del", "cap"]);
    ok(&d, &["port", "del", "p1"]);
    assert_eq!(
        d.ctl_json(&["ports"])["ports"].as_array().unwrap().len(),
        before["ports"].as_array().unwrap().len()
    );
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
    assert!(leftovers(&prefix).is_empty());
}

fn ok(d: &Ferruled, args: &[&str]) {
    let o = d.ctl(args);
    assert!(
        o.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A free local TCP port (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to metrics");
    c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).expect("read the answer");
    out
}

#[test]
fn metrics_are_served_in_the_prometheus_text_format() {
    let prefix = unique_prefix("metrics");
    let port = free_port();
    let cfg = format!(
        "{}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n",
        null_pair(&prefix)
    );
    let mut d = Ferruled::start(&cfg, &prefix).expect("start ferruled");
    d.wait_stats("forwarding", |s| u(&s["totals"]["tx_packets"]) > 10_000);
    let answer = http_get(port, "/metrics");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    // Parsed by the Prometheus client library's own parser.
    // Debian's Python, where python3-prometheus-client is installed.
    let mut py = Command::new("/usr/bin/python3")
        .args([
            "-c",
            concat!(
                "import sys, json\n",
                "from prometheus_client.parser import text_string_to_metric_families\n",
                "out = {}\n",
                "for f in text_string_to_metric_families(sys.stdin.read()):\n",
                "    for s in f.samples:\n",
                "        out.setdefault(s.name, []).append([s.labels, s.value, f.type])\n",
                "print(json.dumps(out))\n",
            ),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/setup.sh installs python3-prometheus-client)");
    py.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the exposition does not parse: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: Value = serde_json::from_slice(&out.stdout).unwrap();
    let value = |name: &str, label: &str, want: &str| -> f64 {
        samples[name]
            .as_array()
            .unwrap_or_else(|| panic!("no {name} in {body}"))
            .iter()
            .find(|s| label.is_empty() || s[0][label] == want)
            .and_then(|s| s[1].as_f64())
            .unwrap_or_else(|| panic!("no {name}{{{label}={want}}} in {body}"))
    };
    assert_eq!(samples["ferrule_port_rx_packets_total"][0][2], "counter");
    let rx = value("ferrule_port_rx_packets_total", "port", "pod0");
    assert!(rx > 0.0, "{body}");
    assert_eq!(value("ferrule_port_up", "port", "uplink0"), 1.0);
    assert_eq!(value("ferrule_build_info", "", ""), 1.0);
    for name in [
        "ferrule_worker_rx_packets_total",
        "ferrule_mbufs_in_use",
        "ferrule_acl_generation",
        "ferrule_conntrack_max_entries",
        "ferrule_snat_ports_exhausted_total",
    ] {
        assert!(samples.get(name).is_some(), "no {name} in {body}");
    }
    // Counters only grow, and agree with stats.get.
    let later = http_get(port, "/metrics");
    let stats = d.ctl_json(&["stats"]);
    let line = later
        .lines()
        .find(|l| l.starts_with("ferrule_port_rx_packets_total{port=\"pod0\"}"))
        .expect("pod0 rx");
    let rx2: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(rx2 >= rx, "{rx2} < {rx}");
    let now = stats["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "pod0")
        .map(|p| u(&p["counters"]["rx_packets"]))
        .unwrap();
    assert!(rx2 <= now as f64, "metrics {rx2} ahead of stats {now}");
    assert!(http_get(port, "/nope").starts_with("HTTP/1.1 404"));
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}
