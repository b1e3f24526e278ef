//! End-to-end per-ENI egress with real kernel stacks: ferruled with two uplink ports
//! standing for a node's ENIs 0 and 1 (veths into a namespace `vpc` that is both
//! subnets' gateway, a server in the VPC at 10.0.9.9 and one outside it at
//! 203.0.113.1), and two kernel pods whose addresses are secondary IPs of ENI 0 and
//! ENI 1. The `vpc` namespace filters by reverse path (strict `rp_filter`), as EC2's
//! source/destination check does: a packet whose source belongs to the other ENI's
//! subnet is dropped when it arrives on the wrong link. The ENIs come with `ferrulectl
//! vpc set --enis FILE`; then the pod on ENI 1 reaches the VPC server through ENI 1's
//! port with its own address, the pod on ENI 0 through ENI 0's, and the pod on ENI 1
//! reaches the server outside the VPC through ENI 0, masqueraded to the primary IP;
//! the gateway's ARP for the pod on ENI 1's link is answered by ferruled.

use ferrule_e2e::topology::*;
use ferrule_e2e::Ferruled;
use serde_json::Value;

/// Answers each TCP connection with the address it came from, then closes it.
const SERVER: &str = r#"
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080)); s.listen(8)
print("listening", flush=True)
while True:
    c, peer = s.accept()
    c.sendall(peer[0].encode() + b"\n"); c.close()
"#;

/// Connects to argv[1]:8080 and prints what the server says (the source it saw).
const CLIENT: &str = r#"
import socket, sys
c = socket.create_connection((sys.argv[1], 8080), timeout=10)
print(c.makefile().readline().strip(), flush=True)
"#;

const ENI0_MAC: &str = "02:0e:00:00:00:00";
const ENI1_MAC: &str = "02:0e:00:00:00:01";
const VPC_SERVER: &str = "10.0.9.9";
const INTERNET: &str = "203.0.113.1";

/// ENI 0 bound by name, ENI 1 found by its MAC.
const ENIS: &str = r#"[
  {"id": "eni-0a0", "mac": "02:0e:00:00:00:00", "device_index": 0, "port": "eth0",
   "subnet_cidr": "10.0.0.0/24", "gateway": "10.0.0.1", "primary_ip": "10.0.0.10",
   "secondary_ips": ["10.0.0.20", "10.0.0.21"]},
  {"id": "eni-0b1", "mac": "02:0e:00:00:00:01", "device_index": 1,
   "subnet_cidr": "10.0.1.0/24", "gateway": "10.0.1.1", "primary_ip": "10.0.1.10",
   "secondary_ips": ["10.0.1.20", "10.0.1.21"]}
]"#;

/// Pod ports `pod-0` (10.0.0.20) and `pod-1` (10.0.1.20), uplinks `eth0` (ENI 0's
/// interface, the node's primary address 10.0.0.10 configured, the default route via
/// 10.0.0.1) and `eth1` (ENI 1's, no address until the ENIs come).
fn eni_config(prefix: &str) -> String {
    let base = ferrule_e2e::base_config(prefix);
    let port = |name: &str, i: u32, iface: &str, rest: &str| {
        format!(
            "[[port]]\nname = \"{name}\"\ndevargs = \"net_af_packet{i},iface={iface}\"\n{rest}\n"
        )
    };
    format!(
        "{base}{}{}{}{}[[route]]\nprefix = \"0.0.0.0/0\"\nport = \"eth0\"\nvia = \"10.0.0.1\"\n",
        port(
            "pod-0",
            0,
            "vp0",
            "role = \"pod\"\nmac = \"02:fe:00:00:00:a0\"\npod_ips = [\"10.0.0.20\"]\npod_mac = \"02:00:00:00:00:20\"\n"
        ),
        port(
            "pod-1",
            1,
            "vp1",
            "role = \"pod\"\nmac = \"02:fe:00:00:00:a1\"\npod_ips = [\"10.0.1.20\"]\npod_mac = \"02:00:00:00:01:20\"\n"
        ),
        port(
            "eth0",
            2,
            "ve0",
            &format!("role = \"uplink\"\nmac = \"{ENI0_MAC}\"\naddresses = [\"10.0.0.10/24\"]\n")
        ),
        port(
            "eth1",
            3,
            "ve1",
            &format!("role = \"uplink\"\nmac = \"{ENI1_MAC}\"\n")
        ),
    )
}

fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", text(o));
    text(o)
}

fn sh(args: &[&str]) {
    let o = std::process::Command::new(args[0])
        .args(&args[1..])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    assert!(o.status.success(), "{args:?}: {}", text(&o));
}

/// The namespace `vpc`: links `g0` (10.0.0.1/24) and `g1` (10.0.1.1/24) to ferruled's
/// `ve0` and `ve1`, the two servers' addresses on its loopback, strict reverse-path
/// filtering. Deleted with the topology (its name has the topology's prefix).
fn vpc_namespace(topo: &Topology) {
    let (vpc, fr) = (topo.ns("vpc"), topo.ns("fr"));
    sh(&["ip", "netns", "add", &vpc]);
    for args in [
        vec!["ip", "link", "set", "lo", "up"],
        vec!["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1"],
        vec!["sysctl", "-qw", "net.ipv4.conf.default.rp_filter=1"],
        vec!["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
        vec!["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
        vec!["ip", "addr", "add", "10.0.9.9/32", "dev", "lo"],
        vec!["ip", "addr", "add", "203.0.113.1/32", "dev", "lo"],
    ] {
        ok(&topo.run("vpc", &args));
    }
    for (i, (fr_if, gw)) in [("ve0", "10.0.0.1/24"), ("ve1", "10.0.1.1/24")]
        .into_iter()
        .enumerate()
    {
        let g = format!("g{i}");
        sh(&[
            "ip", "link", "add", fr_if, "netns", &fr, "type", "veth", "peer", "name", &g, "netns",
            &vpc,
        ]);
        ok(&topo.run("vpc", &["ethtool", "-K", &g, "tx", "off"]));
        ok(&topo.run("vpc", &["ip", "addr", "add", gw, "dev", &g]));
        ok(&topo.run("vpc", &["ip", "link", "set", &g, "up"]));
        sh(&["ip", "-n", &fr, "link", "set", fr_if, "up"]);
    }
}

/// Packets ferruled sent out of `port` so far.
fn tx(d: &Ferruled, port: &str) -> u64 {
    let s = d.ctl_json(&["stats"]);
    s["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == port)
        .and_then(|p| p["counters"]["tx_packets"].as_u64())
        .unwrap_or_else(|| panic!("no port {port}: {s:#}"))
}

/// Runs the client in pod namespace `pod` against `dst`: the source the server saw,
/// and the packets each ENI port sent meanwhile.
fn connect(
    topo: &Topology,
    d: &Ferruled,
    dir: &std::path::Path,
    pod: &str,
    dst: &str,
) -> (String, u64, u64) {
    let before = (tx(d, "eth0"), tx(d, "eth1"));
    let client = Script::start(topo, pod, dir, &format!("cli-{pod}.py"), CLIENT, &[dst]);
    let (success, out) = client.finish();
    assert!(
        success,
        "{pod} -> {dst}: {out}\n{}\n{}\n{}",
        text(&d.ctl(&["stats"])),
        text(&d.ctl(&["neigh", "dump"])),
        d.log_text()
    );
    let after = (tx(d, "eth0"), tx(d, "eth1"));
    (
        out.trim().to_string(),
        after.0 - before.0,
        after.1 - before.1,
    )
}

#[test]
fn pods_leave_through_their_own_enis_and_masqueraded_through_the_primary() {
    let topo = Topology::up("e");
    vpc_namespace(&topo);
    topo.add_pod("p0", "vp0", "02:00:00:00:00:20");
    topo.add_pod("p1", "vp1", "02:00:00:00:01:20");
    topo.address_pod("p0", "10.0.0.20", "169.254.1.1");
    topo.address_pod("p1", "10.0.1.20", "169.254.1.1");
    let mut d = topo.ferruled_with("eni", eni_config);
    let dir = tempfile::tempdir().expect("tempdir");

    // A refused state changes nothing.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, ENIS.replace("\"10.0.1.1\"", "\"10.0.2.1\"")).expect("write");
    let o = d.ctl(&["vpc", "set", "--enis", bad.to_str().expect("path")]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("enis[1].gateway") && text(&o).contains("outside the ENI's subnet"),
        "{}",
        text(&o)
    );
    assert_eq!(d.ctl_json(&["vpc", "show"])["snat_address"], Value::Null);

    let enis = dir.path().join("enis.json");
    std::fs::write(&enis, ENIS).expect("write");
    let shown = ok(&d.ctl(&[
        "vpc",
        "set",
        "--vpc-cidr",
        "10.0.0.0/16",
        "--enis",
        enis.to_str().expect("path"),
    ]));
    assert!(shown.contains("masqueraded to 10.0.0.10"), "{shown}");
    let vpc = d.ctl_json(&["vpc", "show"]);
    assert_eq!(vpc["node_ips"][0], "10.0.0.10", "{vpc:#}");
    assert_eq!(vpc["enis"][0]["bound_port"], "eth0", "{vpc:#}");
    assert_eq!(vpc["enis"][0]["table"], "main", "{vpc:#}");
    assert_eq!(vpc["enis"][1]["bound_port"], "eth1", "by its MAC: {vpc:#}");
    assert_eq!(vpc["enis"][1]["table"], "eni-1", "{vpc:#}");

    let routes = d.ctl_json(&["route", "dump"]);
    let eni1: Vec<&Value> = routes["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .filter(|r| r["table"] == "eni-1")
        .collect();
    assert_eq!(eni1.len(), 1, "{routes:#}");
    assert_eq!(
        (&eni1[0]["prefix"], &eni1[0]["port"], &eni1[0]["via"]),
        (&"0.0.0.0/0".into(), &"eth1".into(), &"10.0.1.1".into()),
        "{routes:#}"
    );
    assert_eq!(
        routes["rules"][0]["sources"],
        serde_json::json!(["10.0.1.20", "10.0.1.21"]),
        "{routes:#}"
    );
    let text_dump = ok(&d.ctl(&["route", "dump"]));
    assert!(
        text_dump.contains("from 10.0.1.20, 10.0.1.21 lookup eni-1 (eni-0b1 device 1"),
        "{text_dump}"
    );
    let trace = ok(&d.ctl(&[
        "trace",
        "--in-port",
        "pod-1",
        "--proto",
        "tcp",
        "--src",
        "10.0.1.20:40000",
        "--dst",
        "10.0.9.9:8080",
        "--tcp-flags",
        "SYN",
    ]));
    assert!(
        trace.contains("source 10.0.1.20 is a secondary IP of eni-0b1 (device 1): table eni-1 -> port eth1 via 10.0.1.1"),
        "{trace}"
    );

    let mut server = Script::start(&topo, "vpc", dir.path(), "srv.py", SERVER, &[]);
    assert_eq!(server.line(), "listening");

    // The pod on ENI 1 to the VPC: through eth1 (strict rp_filter drops it on g0), as
    // itself.
    let (seen, eth0, eth1) = connect(&topo, &d, dir.path(), "p1", VPC_SERVER);
    assert_eq!(seen, "10.0.1.20");
    assert!(eth1 >= 4 && eth0 <= 1, "eth0 sent {eth0}, eth1 {eth1}");
    // The pod on ENI 0: through eth0, as itself.
    let (seen, eth0, eth1) = connect(&topo, &d, dir.path(), "p0", VPC_SERVER);
    assert_eq!(seen, "10.0.0.20");
    assert!(eth0 >= 4 && eth1 <= 1, "eth0 sent {eth0}, eth1 {eth1}");
    // The pod on ENI 1 outside the VPC: through eth0, masqueraded to the primary IP.
    let (seen, eth0, eth1) = connect(&topo, &d, dir.path(), "p1", INTERNET);
    assert_eq!(seen, "10.0.0.10");
    assert!(eth0 >= 4 && eth1 <= 1, "eth0 sent {eth0}, eth1 {eth1}");

    // The gateway's ARP for the pod on ENI 1's link: answered with eth1's MAC.
    ok(&topo.run("vpc", &["ip", "neigh", "flush", "dev", "g1"]));
    ok(&topo.run(
        "vpc",
        &["ping", "-c", "2", "-W", "2", "-I", "g1", "10.0.1.20"],
    ));
    let neigh = ok(&topo.run("vpc", &["ip", "neigh", "show", "10.0.1.20", "dev", "g1"]));
    assert!(neigh.contains(ENI1_MAC), "{neigh}");
    // And on ENI 0's link for its own secondary IP.
    ok(&topo.run("vpc", &["ping", "-c", "1", "-W", "2", "10.0.0.20"]));
    let neigh = ok(&topo.run("vpc", &["ip", "neigh", "show", "10.0.0.20", "dev", "g0"]));
    assert!(neigh.contains(ENI0_MAC), "{neigh}");

    // A port bound to an ENI cannot be deleted.
    let o = d.ctl(&["port", "del", "eth1"]);
    assert!(
        !o.status.success() && text(&o).contains("ENI eni-0b1"),
        "{}",
        text(&o)
    );
    // Without the ENIs, the pod on ENI 1 leaves by the main table again (and the
    // gateway namespace drops it: its source belongs to the other link).
    ok(&d.ctl(&[
        "vpc",
        "set",
        "--node-ip",
        "10.0.0.10",
        "--vpc-cidr",
        "10.0.0.0/16",
    ]));
    let routes = d.ctl_json(&["route", "dump"]);
    assert!(routes.get("rules").is_none(), "{routes:#}");
    let before = tx(&d, "eth1");
    let client = Script::start(
        &topo,
        "p1",
        dir.path(),
        "cli-late.py",
        CLIENT,
        &[VPC_SERVER],
    );
    let (success, out) = client.finish();
    assert!(
        !success,
        "reached the VPC through ENI 0 with ENI 1's address: {out}"
    );
    assert_eq!(
        tx(&d, "eth1"),
        before,
        "nothing leaves by eth1 without its ENI"
    );

    drop(server);
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}
