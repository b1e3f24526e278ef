//! End-to-end: the packet pipeline with real kernel network stacks as the independent
//! implementation. Pods and a router live in network namespaces (scripts/netns-
//! topology.sh); ferruled runs in its own namespace on af_packet ports. The kernels'
//! pings must be answered by the gateway, forwarded between pods and to the router
//! (resolved by ARP/ND), and get ICMP time exceeded / fragmentation needed / packet
//! too big from the gateway; routes and neighbours change over the control socket.

use ferrule_e2e::topology::*;
use ferrule_e2e::*;
use serde_json::Value;

#[test]
fn kernel_stacks_reach_the_gateway_each_other_and_the_router() {
    let topo = Topology::up("p");
    let prefix = unique_prefix("pipe");
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = vec!["ip".into(), "netns".into(), "exec".into(), topo.ns("fr")];
    let mut d =
        Ferruled::start_wrapped(dir, &config(&prefix), &prefix, &wrapper).expect("start ferruled");

    // The gateway answers ARP/ND and echo; pods reach each other and the router.
    for (from, args) in [
        ("pa", vec!["169.254.1.1"]),
        ("pb", vec!["-6", "fe80::1%eth0"]),
        ("pa", vec!["10.1.0.3"]),
        ("pb", vec!["-6", "fd00:1::2"]),
        ("pa", vec!["192.0.2.1"]),
        ("pa", vec!["-6", "2001:db8::1"]),
    ] {
        let o = ping(&topo, from, &args);
        assert!(
            o.status.success(),
            "ping {args:?} from {from} failed:\n{}\n{}",
            text(&o),
            d.log_text()
        );
        if args.contains(&"10.1.0.3") || args.contains(&"fd00:1::2") {
            assert!(
                text(&o).contains("ttl=63"),
                "one hop: TTL decremented once: {}",
                text(&o)
            );
        }
    }
    let n = d.ctl_json(&["neigh", "dump"]);
    let learned: Vec<(&str, &str)> = n["neighbors"]
        .as_array()
        .expect("neighbors")
        .iter()
        .filter_map(|e| Some((e["ip"].as_str()?, e["mac"].as_str()?)))
        .collect();
    assert!(
        learned.contains(&("192.0.2.1", "02:00:00:c0:00:01")),
        "{n:#}"
    );
    assert!(
        learned.contains(&("2001:db8::1", "02:00:00:c0:00:01")),
        "{n:#}"
    );

    // TTL 1: time exceeded from the gateway.
    let o = topo.run("pa", &["ping", "-c", "1", "-W", "2", "-t", "1", "10.1.0.3"]);
    assert!(
        text(&o).contains("From 169.254.1.1") && text(&o).contains("Time to live exceeded"),
        "{}",
        text(&o)
    );
    // Hop limit 1 over IPv6.
    let o = topo.run(
        "pa",
        &["ping", "-6", "-c", "1", "-W", "2", "-t", "1", "fd00:1::3"],
    );
    assert!(text(&o).contains("Time exceeded"), "{}", text(&o));
    // Larger than the uplink MTU with DF: fragmentation needed (mtu 1400); IPv6: too big.
    let o = topo.run(
        "pa",
        &[
            "ping",
            "-c",
            "1",
            "-W",
            "2",
            "-M",
            "do",
            "-s",
            "1400",
            "192.0.2.1",
        ],
    );
    assert!(text(&o).contains("mtu = 1400"), "{}", text(&o));
    let o = topo.run(
        "pa",
        &[
            "ping",
            "-6",
            "-c",
            "1",
            "-W",
            "2",
            "-M",
            "do",
            "-s",
            "1400",
            "2001:db8::1",
        ],
    );
    assert!(
        text(&o).contains("mtu=1400") || text(&o).contains("Packet too big"),
        "{}",
        text(&o)
    );
    let s = d.ctl_json(&["stats"]);
    assert!(drops(&s, "ttl-exceeded") >= 2, "{s:#}");
    assert!(drops(&s, "mtu-exceeded") >= 2, "{s:#}");
    let icmp_errors = icmp_errors(&s);
    assert!(icmp_errors >= 4, "{s:#}");

    // Routes over the control socket: a blackhole stops traffic, a trace shows why.
    let o = d.ctl(&["route", "add", "203.0.113.0/24", "--blackhole"]);
    assert!(o.status.success(), "{}", text(&o));
    let before = drops(&d.ctl_json(&["stats"]), "blackhole");
    let o = ping(&topo, "pa", &["203.0.113.9"]);
    assert!(!o.status.success());
    assert!(drops(&d.ctl_json(&["stats"]), "blackhole") >= before + 2);
    let t = d.ctl_json(&[
        "trace",
        "--in-port",
        "pod-a",
        "--proto",
        "udp",
        "--src",
        "10.1.0.2:5",
        "--dst",
        "203.0.113.9:53",
    ]);
    assert_eq!(
        t["verdict"],
        serde_json::json!({"action": "drop", "reason": "blackhole"})
    );
    let o = d.ctl(&[
        "trace",
        "--in-port",
        "pod-a",
        "--proto",
        "tcp",
        "--src",
        "10.1.0.2:4000",
        "--dst",
        "10.1.0.3:80",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().last(), Some("verdict: forward pod-b"), "{out}");
    let o = d.ctl(&["route", "del", "203.0.113.0/24"]);
    assert!(o.status.success(), "{}", text(&o));
    // With the blackhole gone, the default route takes it to the router.
    let t = d.ctl_json(&[
        "trace",
        "--in-port",
        "pod-a",
        "--proto",
        "icmp",
        "--src",
        "10.1.0.2",
        "--dst",
        "203.0.113.9",
    ]);
    assert_eq!(
        t["verdict"],
        serde_json::json!({"action": "forward", "port": "uplink0"})
    );
    // Bad requests name the field and change nothing.
    let o = d.ctl(&["route", "add", "10.9.0.1/16", "--port", "uplink0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("prefix") && text(&o).contains("host bits"),
        "{}",
        text(&o)
    );
    let o = d.ctl(&["route", "del", "10.1.0.2/32"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "pod routes belong to their port: {}",
        text(&o)
    );

    // Live trace of real packets.
    let o = d.ctl(&["trace", "start", "--port", "pod-b", "--count", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = ping(&topo, "pb", &["10.1.0.2"]);
    assert!(o.status.success());
    let dump = d.ctl_json(&["trace", "dump"]);
    let pkts = dump["packets"].as_array().expect("packets");
    assert_eq!(pkts.len(), 2, "{dump:#}");
    assert_eq!(
        pkts[0]["verdict"],
        serde_json::json!({"action": "forward", "port": "pod-a"})
    );
    assert_eq!(dump["remaining"], 0);

    assert_eq!(d.terminate().code(), Some(0), "{}", d.log_text());
    assert!(leftovers(&prefix).is_empty(), "{:?}", leftovers(&prefix));
}

fn neighbor(d: &Ferruled, ip: &str) -> Option<Value> {
    let n = d.ctl_json(&["neigh", "dump"]);
    n["neighbors"]
        .as_array()?
        .iter()
        .find(|e| e["ip"] == ip)
        .cloned()
}

#[test]
fn live_neighbours_are_refreshed_and_dead_ones_expire() {
    let topo = Topology::up("n");
    let prefix = unique_prefix("neigh");
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = vec!["ip".into(), "netns".into(), "exec".into(), topo.ns("fr")];
    let cfg = config(&prefix).replacen("[dataplane]\n", "[dataplane]\nneighbor_max_age_s = 3\n", 1);
    let mut d = Ferruled::start_wrapped(dir, &cfg, &prefix, &wrapper).expect("start ferruled");
    let o = ping(&topo, "pa", &["-c", "1", "192.0.2.1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(neighbor(&d, "192.0.2.1").is_some());
    // No traffic for twice the maximum age: the router answers the refreshes.
    std::thread::sleep(std::time::Duration::from_secs(6));
    let n = neighbor(&d, "192.0.2.1").expect("still known");
    assert!(n["age_secs"].as_f64().unwrap_or(99.0) < 3.0, "{n}");
    // The router goes away: its entry expires.
    let o = topo.run("rt", &["ip", "link", "set", "eth0", "down"]);
    assert!(o.status.success());
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert!(
        neighbor(&d, "192.0.2.1").is_none(),
        "a dead neighbour expires"
    );
    assert_eq!(d.terminate().code(), Some(0), "{}", d.log_text());
}
