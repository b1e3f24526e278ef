//! `ferrule-pktgen` on real DPDK ports: a ring port looping back to itself (every packet
//! sent comes back: the counts, bytes and flows must agree exactly), IPv6 over the
//! kernel's veth pair through af_packet ports, and pod to pod
//! through a running ferruled over vhost-user, where the generator's receive count must
//! equal what ferruled says it transmitted to the receiving pod, and an NDR search must
//! find a rate with no loss.

use ferrule_e2e::*;
use serde_json::Value;
use std::process::{Command, Stdio};

/// Runs the generator with `args` (plus its own file prefix and a small footprint) and
/// returns its JSON report.
fn pktgen(tag: &str, args: &[&str]) -> Value {
    pktgen_in(&[], tag, args)
}

/// As [`pktgen`], run under `wrapper` (e.g. `ip netns exec NS`).
fn pktgen_in(wrapper: &[String], tag: &str, args: &[&str]) -> Value {
    let prefix = unique_prefix(tag);
    let mut cmd = wrapped(wrapper, pktgen_bin());
    cmd.args([
        "--file-prefix",
        &prefix,
        "--memory",
        "256",
        "--mbufs",
        "8191",
    ])
    .args(["--lcore", "0", "--json"])
    .args(args)
    .stdin(Stdio::null());
    if !hugepages_free(256) {
        cmd.arg("--no-huge");
    }
    let out = cmd.output().expect("run ferrule-pktgen");
    for p in leftovers(&prefix) {
        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
    }
    assert!(
        out.status.success(),
        "ferrule-pktgen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("pktgen JSON")
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v:#}"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v:#}"))
}

#[test]
fn a_ring_port_returns_every_packet_at_the_rate_asked() {
    let r = pktgen(
        "pg-ring",
        &[
            "--tx-port",
            "net_ring0",
            "--rate",
            "100k",
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--flows",
            "1000",
            "--src-port",
            "1000-1999",
            "--size",
            "imix",
            "--trials",
            "2",
        ],
    );
    let trials = r["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 2, "{r:#}");
    for t in trials {
        let sent = u(t, "tx_packets");
        // The rate limit holds (one second at 100 kpps), whatever the machine's speed.
        assert!((95_000..=105_000).contains(&sent), "{t:#}");
        assert_eq!(u(t, "rx_packets"), sent, "a loopback loses nothing: {t:#}");
        assert_eq!(u(t, "rx_bytes"), u(t, "tx_bytes"));
        assert_eq!(
            (u(t, "lost"), u(t, "reordered"), u(t, "foreign")),
            (0, 0, 0)
        );
        // IMIX: 64, 594 and 1518 bytes 7:4:1, a mean of 361.8 bytes.
        let mean = u(t, "tx_bytes") as f64 / sent as f64;
        assert!((mean - 4342.0 / 12.0).abs() < 1.0, "{mean}");
        let lat = &t["latency"];
        assert!(
            f(lat, "min_ns") > 0.0 && f(lat, "p50_ns") <= f(lat, "p99_ns"),
            "{lat:#}"
        );
        assert!(f(lat, "p99_ns") <= f(lat, "max_ns"));
    }
    assert_eq!(r["size"], "imix");
    assert_eq!(u(&r, "flows"), 1000);
}

#[test]
fn ipv6_flows_cross_a_veth_pair_through_af_packet_ports() {
    let ns = Netns::new("pg-veth").expect("netns");
    ns.exec(&[
        "ip", "link", "add", "pga", "type", "veth", "peer", "name", "pgb",
    ])
    .unwrap();
    for dev in ["pga", "pgb"] {
        ns.exec(&["ip", "link", "set", dev, "up"]).unwrap();
        // The kernel's own IPv6 chatter (router solicitations) would be foreign frames.
        ns.exec(&[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{dev}.disable_ipv6=1"),
        ])
        .unwrap();
    }
    let r = pktgen_in(
        &ns.wrapper(),
        "pg-veth",
        &[
            "--tx-port",
            "net_af_packet0,iface=pga",
            "--rx-port",
            "net_af_packet1,iface=pgb",
            "--src-ip",
            "fd00::1-fd00::ff",
            "--dst-ip",
            "fd00:1::1",
            "--flows",
            "255",
            "--size",
            "84,1518",
            "--rate",
            "20k",
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--latency-sample",
            "1",
        ],
    );
    let t = &r["trials"][0];
    let sent = u(t, "tx_packets");
    assert!((19_000..=21_000).contains(&sent), "{t:#}");
    assert_eq!(
        u(t, "rx_packets"),
        sent,
        "the veth pair loses nothing at 20 kpps: {t:#}"
    );
    assert_eq!(u(t, "rx_bytes"), u(t, "tx_bytes"));
    assert_eq!((u(t, "reordered"), u(t, "late")), (0, 0), "{t:#}");
    // Every packet timed; the kernel's path takes microseconds, not nothing.
    assert!(f(&t["latency"], "min_ns") > 100.0, "{t:#}");
}

#[test]
fn bad_options_are_refused_before_dpdk_starts() {
    for (args, says) in [
        (
            vec!["--tx-port", "net_ring0", "--flows", "5"],
            "only 1 combinations",
        ),
        (
            vec!["--tx-port", "net_ring0", "--size", "40"],
            "--size: frame size 40 is too small",
        ),
        (vec!["--tx-port", "net_ring0", "--burst", "300"], "--burst"),
        (vec!["--tx-port", "net_ring0", "--rate", "fast"], "--rate"),
        (
            vec!["--tx-port", "net_ring0", "--dst-mac", "02:00"],
            "--dst-mac",
        ),
        (
            vec![
                "--tx-port",
                "net_ring0",
                "--src-ip",
                "10.0.0.1",
                "--dst-ip",
                "fd00::1",
            ],
            "same address family",
        ),
        (
            vec!["--tx-port", "net_ring0", "--search", "ndr", "--rate", "1M"],
            "exclude each other",
        ),
    ] {
        let out = Command::new(pktgen_bin())
            .args(&args)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn pod_to_pod_through_ferruled_counts_agree_and_the_ndr_loses_nothing() {
    let prefix = unique_prefix("pg-fr");
    let base = base_config(&prefix).replace("memory_mb = 128", "memory_mb = 256");
    let d = Ferruled::start(&base, &prefix).expect("ferruled");
    let sock = |n: &str| d.dir.path().join(format!("{n}.sock"));
    for (name, ip, mac) in [
        ("pod-a", "10.1.0.4", "02:00:00:0a:01:04"),
        ("pod-b", "10.1.0.5", "02:00:00:0a:01:05"),
    ] {
        let o = d.ctl(&[
            "port",
            "add",
            name,
            "--vhost-user",
            sock(name).to_str().unwrap(),
            "--ip",
            ip,
            "--mac",
            mac,
        ]);
        assert!(
            o.status.success(),
            "port add: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let ports = d.ctl_json(&["ports"]);
    let find = |name: &str| -> Value {
        ports["ports"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {ports:#}"))
    };
    let gateway = find("pod-a")["gateway_mac"].as_str().unwrap().to_string();
    let pod_b_tx = || -> u64 {
        d.ctl_json(&["ports"])["ports"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["name"] == "pod-b"))
            .and_then(|p| p["counters"]["tx_packets"].as_u64())
            .unwrap_or(0)
    };
    let tx = format!(
        "virtio_user0,path={},mac=02:00:00:0a:01:04",
        sock("pod-a").display()
    );
    let rx = format!(
        "virtio_user1,path={},mac=02:00:00:0a:01:05",
        sock("pod-b").display()
    );
    let common = [
        "--tx-port",
        &tx,
        "--rx-port",
        &rx,
        "--dst-mac",
        &gateway,
        "--src-ip",
        "10.1.0.4",
        "--dst-ip",
        "10.1.0.5",
        "--src-port",
        "1024-2047",
        "--flows",
        "1024",
        // ferruled sees the links come up a moment after the generator does.
        "--warmup",
        "1",
    ];

    // A fixed, modest rate: everything arrives, and ferruled agrees on the count.
    let before = pod_b_tx();
    let mut args = common.to_vec();
    args.extend(["--rate", "50k", "--duration", "1"]);
    let r = pktgen("pg-fixed", &args);
    let t = &r["trials"][0];
    let sent = u(t, "tx_packets");
    assert!(sent >= 45_000, "{t:#}");
    assert_eq!(
        u(t, "rx_packets"),
        sent,
        "nothing lost at 50 kpps: {t:#}\n{:#}",
        d.ctl_json(&["stats"])
    );
    assert_eq!(u(t, "reordered"), 0);
    // ferruled publishes its counters periodically: wait for them to settle.
    let w = &r["warmup"];
    let received = u(w, "rx_packets") + u(w, "foreign") + sent + u(t, "foreign");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while pod_b_tx() - before < received && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        pod_b_tx() - before,
        received,
        "ferruled transmitted to pod B exactly what the generator received"
    );

    // An NDR search with short trials: a rate is found, and its trial lost nothing.
    let mut args = common.to_vec();
    args.extend([
        "--search",
        "ndr",
        "--duration",
        "0.5",
        "--resolution",
        "10",
        "--max-trials",
        "6",
    ]);
    let r = pktgen("pg-ndr", &args);
    let s = &r["search"];
    assert_eq!(s["kind"], "ndr");
    assert!(f(s, "rate_pps") > 0.0, "{s:#}");
    assert!(f(s, "ceiling_pps") >= f(s, "rate_pps"));
    assert_eq!(u(&s["at_rate"], "lost"), 0, "{s:#}");
    let steps = s["steps"].as_array().unwrap();
    assert!(!steps.is_empty() && steps.len() <= 6, "{s:#}");
    assert_eq!(r["trials"].as_array().unwrap().len(), steps.len());
}
