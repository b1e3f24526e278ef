//! End-to-end user-defined networks with real kernel stacks: two Layer3 primary
//! networks (UserDefinedNetwork manifests applied with `ferrulectl network apply`) with
//! the same subnet, a pod in each with the same address handed out by each network's
//! IPAM; both pods fetch 2 MiB each way from one server outside the node from the same
//! source port at the same time: the server sees two distinct masqueraded tuples, every
//! byte arrives intact both ways, each reply reaches its own pod. A user-defined pod
//! cannot reach the default network's pods (dropped and counted); nothing outside can
//! open a connection to it; a network in use cannot be deleted, and can once its pod
//! is gone.

use ferrule_e2e::topology::*;
use ferrule_e2e::Ferruled;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// An address of the router's own, outside the VPC.
const INTERNET: &str = "203.0.113.1";

/// Serves two TCP connections at once: each receives until the client's shutdown,
/// then gets back `peer bytes sha256` followed by 2 MiB derived from its peer port.
const SERVER: &str = r#"
import socket, hashlib, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4)
print("listening", flush=True)
peers = []
def serve(c, peer):
    h = hashlib.sha256(); n = 0
    while True:
        b = c.recv(65536)
        if not b: break
        h.update(b); n += len(b)
    back = bytes(((i * 13) ^ (peer[1] & 0xff)) & 0xff for i in range(2 * 1024 * 1024))
    c.sendall(f"{peer[0]}:{peer[1]} {n} {h.hexdigest()} {hashlib.sha256(back).hexdigest()}\n".encode() + back)
    c.close()
ts = []
for _ in range(2):
    c, peer = s.accept(); peers.append(f"{peer[0]}:{peer[1]}")
    t = threading.Thread(target=serve, args=(c, peer)); t.start(); ts.append(t)
for t in ts: t.join()
print(" ".join(peers), flush=True)
"#;

/// Connects from source port argv[3], sends 2 MiB (seeded by argv[4]), reads the
/// answer line and 2 MiB back: prints `peer received-bytes hash-ok back-bytes back-ok`.
const CLIENT: &str = r#"
import socket, hashlib, sys, time
seed = int(sys.argv[4])
data = bytes((i * 7 + seed + (i >> 8)) & 0xff for i in range(2 * 1024 * 1024))
c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
c.bind(("0.0.0.0", int(sys.argv[3]))); c.settimeout(30)
c.connect((sys.argv[1], int(sys.argv[2])))
c.sendall(data); c.shutdown(socket.SHUT_WR)
buf = b""
while True:
    b = c.recv(65536)
    if not b: break
    buf += b
line, _, back = buf.partition(b"\n")
peer, n, h, hb = line.decode().split()
print(peer, n, h == hashlib.sha256(data).hexdigest(), len(back), hb == hashlib.sha256(back).hexdigest(), flush=True)
"#;

/// Two namespaces asking for a primary network, and a Layer3 primary network with the
/// same subnet in each.
const MANIFESTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: blue
  labels: {k8s.ovn.org/primary-user-defined-network: ""}
---
apiVersion: v1
kind: Namespace
metadata:
  name: red
  labels: {k8s.ovn.org/primary-user-defined-network: ""}
---
apiVersion: k8s.ovn.org/v1
kind: UserDefinedNetwork
metadata: {name: tenant, namespace: blue}
spec:
  topology: Layer3
  role: Primary
  subnets: ["10.128.0.0/16/24"]
---
apiVersion: k8s.ovn.org/v1
kind: UserDefinedNetwork
metadata: {name: tenant, namespace: red}
spec:
  topology: Layer3
  role: Primary
  subnets: ["10.128.0.0/16/24"]
"#;

/// The demo topology's configuration with the demo pods' subnet as the cluster
/// default network's.
fn udn_config(prefix: &str) -> String {
    format!(
        "{}\n[networks]\ncluster_subnets = [\"10.1.0.0/16\"]\n",
        config(prefix)
    )
}

fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", text(o));
    text(o)
}

fn diagnostics(d: &Ferruled) -> String {
    format!(
        "{}\n{}\n{}\n{}",
        text(&d.ctl(&["stats"])),
        text(&d.ctl(&["ct", "dump"])),
        text(&d.ctl(&["network", "list"])),
        d.log_text()
    )
}

/// Attaches pod namespace `n` (veth `fr_if`, MAC `mac`) to network `net` as pod
/// `pod`, with the address the network's IPAM gives and the network's MTU (as the CNI
/// plugin sets a pod up): the address as a host address, `on_link` (a switched
/// network's subnet) on the link, else a link route to the gateway, and the default
/// route through the gateway when the network has one. Returns the address and the
/// gateway.
fn attach_pod(
    topo: &Topology,
    d: &Ferruled,
    (n, fr_if, mac): (&str, &str, &str),
    (net, pod): (&str, &str),
    on_link: Option<&str>,
) -> (String, Option<String>) {
    topo.add_pod(n, fr_if, mac);
    let port = d.ctl_json(&[
        "port",
        "add",
        n,
        "--af-packet",
        fr_if,
        "--network",
        net,
        "--mac",
        mac,
        "--pod",
        pod,
    ]);
    let ip = port["ips"][0]
        .as_str()
        .unwrap_or_else(|| panic!("an address from IPAM: {port:#}"))
        .to_string();
    let gw = port["gateway_ip"].as_str().map(String::from);
    let mtu = port["mtu"].as_u64().expect("mtu").to_string();
    ok(&topo.run(n, &["ip", "link", "set", "eth0", "mtu", &mtu]));
    match (on_link, &gw) {
        (None, Some(gw)) => topo.address_pod(n, &ip, gw),
        (None, None) => panic!("a routed network without a gateway: {port:#}"),
        (Some(subnet), _) => {
            let host = format!("{ip}/32");
            ok(&topo.run(n, &["ip", "addr", "add", &host, "dev", "eth0"]));
            ok(&topo.run(
                n,
                &["ip", "route", "add", subnet, "dev", "eth0", "scope", "link"],
            ));
            if let Some(gw) = &gw {
                ok(&topo.run(
                    n,
                    &["ip", "route", "add", "default", "via", gw, "dev", "eth0"],
                ));
            }
        }
    }
    (ip, gw)
}

/// [`attach_pod`] to a routed network: the address and the gateway.
fn attach(
    topo: &Topology,
    d: &Ferruled,
    n: &str,
    fr_if: &str,
    mac: &str,
    net: &str,
    pod: &str,
) -> (String, String) {
    let (ip, gw) = attach_pod(topo, d, (n, fr_if, mac), (net, pod), None);
    (ip, gw.expect("a gateway"))
}

#[test]
fn overlapping_layer3_networks_egress_masqueraded_isolated_and_deletable_when_unused() {
    let topo = Topology::up("u");
    ok(&topo.run(
        "rt",
        &["ip", "addr", "add", &format!("{INTERNET}/32"), "dev", "lo"],
    ));
    ok(&topo.run("rt", &["ip", "route", "del", "10.1.0.0/16"]));
    let mut d = topo.ferruled_with("udn", udn_config);
    ok(&d.ctl(&[
        "vpc",
        "set",
        "--node-ip",
        "192.0.2.10",
        "--vpc-cidr",
        "192.0.2.0/24",
        "--vpc-cidr",
        "10.1.0.0/16",
    ]));
    let dir = tempfile::tempdir().expect("tempdir");
    let manifests = dir.path().join("udn.yaml");
    std::fs::write(&manifests, MANIFESTS).expect("write manifests");
    let applied = ok(&d.ctl(&["network", "apply", "-f", manifests.to_str().expect("path")]));
    assert!(applied.contains("network blue.tenant created"), "{applied}");
    assert!(applied.contains("network red.tenant created"), "{applied}");

    let list = d.ctl_json(&["network", "list"]);
    let net = |name: &str| -> Value {
        list["networks"]
            .as_array()
            .expect("networks")
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name}: {list:#}"))
    };
    let (blue, red) = (net("blue.tenant"), net("red.tenant"));
    assert_ne!(blue["zone"], red["zone"], "a zone each: {list:#}");
    for n in [&blue, &red] {
        assert_eq!(n["node_subnets"][0], "10.128.0.0/24", "{n:#}");
        assert_eq!(n["gateways"][0], "10.128.0.1", "{n:#}");
        assert!(
            n["conditions"]
                .as_array()
                .expect("conditions")
                .iter()
                .all(|c| c["status"] == "True"),
            "{n:#}"
        );
    }

    let (ip_a, gw_a) = attach(
        &topo,
        &d,
        "ua",
        "vua",
        "02:00:00:80:00:0a",
        "blue.tenant",
        "blue/a",
    );
    let (ip_b, _) = attach(
        &topo,
        &d,
        "ub",
        "vub",
        "02:00:00:80:00:0b",
        "red.tenant",
        "red/b",
    );
    assert_eq!(
        ip_a, ip_b,
        "each network's IPAM hands out the same first address"
    );
    assert_eq!((ip_a.as_str(), gw_a.as_str()), ("10.128.0.2", "10.128.0.1"));
    // The gateway router answers on each network.
    ok(&ping(&topo, "ua", &["10.128.0.1"]));
    ok(&ping(&topo, "ub", &["10.128.0.1"]));

    // Both pods, same address, same source port, same server, at the same time.
    let mut server = Script::start(
        &topo,
        "rt",
        dir.path(),
        "srv.py",
        SERVER,
        &[INTERNET, "8080"],
    );
    assert_eq!(server.line(), "listening");
    let ca = Script::start(
        &topo,
        "ua",
        dir.path(),
        "cli.py",
        CLIENT,
        &[INTERNET, "8080", "40000", "1"],
    );
    let cb = Script::start(
        &topo,
        "ub",
        dir.path(),
        "cli.py",
        CLIENT,
        &[INTERNET, "8080", "40000", "2"],
    );
    let (ok_a, out_a) = ca.finish();
    let (ok_b, out_b) = cb.finish();
    assert!(
        ok_a && ok_b,
        "clients: {out_a} / {out_b}\n{}",
        diagnostics(&d)
    );
    let (_, peers) = server.finish();
    let mut seen = Vec::new();
    for out in [&out_a, &out_b] {
        let w: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(w.len(), 5, "{out}");
        assert!(
            w[0].starts_with("192.0.2.10:"),
            "masqueraded to the node IP: {out}"
        );
        assert_eq!(
            (w[1], w[2], w[3], w[4]),
            ("2097152", "True", "2097152", "True"),
            "byte-exact both ways: {out}"
        );
        seen.push(w[0].to_string());
    }
    assert_ne!(seen[0], seen[1], "distinct external tuples: {seen:?}");
    for s in &seen {
        assert!(peers.contains(s.as_str()), "the server saw {s}: {peers}");
    }
    // Each network tracks its own connection, in its own zone.
    let ct = d.ctl_json(&["ct", "dump", "--proto", "tcp"]);
    let zones: Vec<&str> = ct["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["original"]["sport"] == 40000)
        .filter_map(|e| e["network"].as_str())
        .collect();
    assert!(
        zones.contains(&"blue.tenant") && zones.contains(&"red.tenant"),
        "{ct:#}"
    );

    // A NetworkPolicy acts within the pod's network: a second pod of blue reaches the
    // first until a policy of blue closes the first's ingress to all but app=other.
    // The manifests show the pods' default-network addresses; the agent renders them
    // with their addresses on blue.tenant (from ferruled's ports).
    let (ip_c, _) = attach(
        &topo,
        &d,
        "uc",
        "vuc",
        "02:00:00:80:00:0c",
        "blue.tenant",
        "blue/c",
    );
    assert_eq!(ip_c, "10.128.0.3");
    ok(&ping(&topo, "uc", &[&ip_a]));
    let state = dir.path().join("cluster");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::write(
        state.join("pods.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: blue, labels: {app: a}}\n\
         spec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.244.0.10}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: c, namespace: blue, labels: {app: client}}\n\
         spec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.244.0.11}\n---\n\
         apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: a-from-other, namespace: blue}\n\
         spec:\n  podSelector: {matchLabels: {app: a}}\n  policyTypes: [Ingress]\n  \
         ingress: [{from: [{podSelector: {matchLabels: {app: other}}}]}]\n",
    )
    .expect("write");
    let run_agent = || run_agent_once(&state, &d);
    run_agent();
    let o = ping(&topo, "uc", &[&ip_a]);
    assert!(
        !o.status.success(),
        "the policy lets blue/c in: {}",
        text(&o)
    );
    ok(&ping(&topo, "ua", &[&ip_c]));
    // Allowing app=client lets blue/c in: the rule holds its address on blue.tenant
    // (10.128.0.3), not the one its manifest shows.
    let pods = std::fs::read_to_string(state.join("pods.yaml")).expect("read");
    std::fs::write(
        state.join("pods.yaml"),
        pods.replace("app: other", "app: client"),
    )
    .expect("write");
    run_agent();
    let dump = d.ctl_json(&["acl", "dump"]);
    assert!(dump.to_string().contains("10.128.0.3"), "{dump:#}");
    ok(&ping(&topo, "uc", &[&ip_a]));
    let empty = dir.path().join("no-acl.yaml");
    std::fs::write(&empty, "{}\n").expect("write");
    ok(&d.ctl(&["acl", "apply", "-f", empty.to_str().expect("path")]));
    ok(&d.ctl(&["port", "del", "uc"]));

    // Isolation: the default network's pods are another network.
    let stats = d.ctl_json(&["stats"]);
    let before = drops(&stats, "network-isolation");
    let o = ping(&topo, "ua", &["10.1.0.2"]);
    assert!(
        !o.status.success(),
        "a user-defined pod reaches a default-network pod: {}",
        text(&o)
    );
    let stats = d.ctl_json(&["stats"]);
    assert!(
        drops(&stats, "network-isolation") >= before + 2,
        "{stats:#}"
    );
    // Nothing outside opens a connection to a pod of the network: the router routes
    // 10.128.0.0/16 to the node, which has no such route in the default network.
    ok(&topo.run(
        "rt",
        &["ip", "route", "add", "10.128.0.0/16", "via", "192.0.2.10"],
    ));
    let o = ping(&topo, "rt", &["-I", INTERNET, &ip_a]);
    assert!(
        !o.status.success(),
        "unsolicited traffic reached a user-defined pod: {}",
        text(&o)
    );

    // Deleting a network in use is refused; once its pod is gone it is deleted.
    let o = d.ctl(&["network", "del", "blue.tenant"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("in use by 1 pod"), "{}", text(&o));
    ok(&d.ctl(&["port", "del", "ua"]));
    ok(&d.ctl(&["network", "del", "blue.tenant"]));
    let list = d.ctl_json(&["network", "list"]);
    assert!(!list.to_string().contains("blue.tenant"), "{list:#}");
    assert!(list.to_string().contains("red.tenant"), "{list:#}");
    // Re-applying a changed spec is refused.
    let changed = MANIFESTS.replace("10.128.0.0/16/24", "10.129.0.0/16/24");
    std::fs::write(&manifests, changed).expect("write");
    let o = d.ctl(&["network", "apply", "-f", manifests.to_str().expect("path")]);
    assert!(
        !o.status.success() && text(&o).contains("Spec is immutable"),
        "{}",
        text(&o)
    );

    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

/// Runs `ferrule-agent --once` over the manifests in `state` against `d`.
fn run_agent_once(state: &Path, d: &Ferruled) {
    let agent = Command::new(ferrule_e2e::agent_bin())
        .args([
            "--state",
            state.to_str().expect("path"),
            "--node",
            "n1",
            "--once",
        ])
        .arg("--socket")
        .arg(&d.socket)
        .stdin(Stdio::null())
        .output()
        .expect("ferrule-agent");
    ok(&agent);
}

/// Waits up to 20 s for `cond`.
fn wait_until(what: &str, log: &Path, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn the_agent_creates_and_deletes_networks_from_its_manifest_directory() {
    let prefix = ferrule_e2e::unique_prefix("udnagent");
    let d = Ferruled::start(&ferrule_e2e::base_config(&prefix), &prefix).expect("start ferruled");
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    let (namespaces, udns) = MANIFESTS.split_at(
        MANIFESTS
            .find("---\napiVersion: k8s.ovn.org")
            .expect("split"),
    );
    std::fs::write(state.join("namespaces.yaml"), namespaces).expect("write");
    std::fs::write(
        state.join("networks.yaml"),
        udns.trim_start_matches("---\n"),
    )
    .expect("write");
    let log = dir.path().join("agent.log");
    let _agent = ferrule_e2e::Stopped(
        Command::new(ferrule_e2e::agent_bin())
            .args([
                "--state",
                state.to_str().expect("path"),
                "--node",
                "n1",
                "--interval-ms",
                "100",
            ])
            .arg("--socket")
            .arg(&d.socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("ferrule-agent"),
    );
    let names = || -> Vec<String> {
        d.ctl_json(&["network", "list"])["networks"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|n| n["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    wait_until("both networks", &log, || {
        let n = names();
        n.contains(&"blue.tenant".to_string()) && n.contains(&"red.tenant".to_string())
    });
    // An invalid manifest changes nothing and is logged with its field.
    std::fs::write(state.join("bad.yaml"), "apiVersion: k8s.ovn.org/v1\nkind: UserDefinedNetwork\nmetadata: {name: bad, namespace: blue}\nspec: {topology: Layer3, role: Secondary}\n").expect("write");
    wait_until("the invalid manifest logged", &log, || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("Subnets is required for Layer3 topology")
    });
    assert_eq!(names().len(), 3, "default, blue, red");
    std::fs::remove_file(state.join("bad.yaml")).expect("rm");
    // The red network's manifest goes: the agent deletes it (it has no pods).
    let only_blue = udns
        .split("---")
        .filter(|d| !d.contains("namespace: red"))
        .collect::<Vec<_>>()
        .join("---");
    std::fs::write(
        state.join("networks.yaml"),
        only_blue.trim_start_matches("---\n"),
    )
    .expect("write");
    wait_until("red deleted", &log, || {
        !names().contains(&"red.tenant".to_string())
    });
    assert!(names().contains(&"blue.tenant".to_string()));
}

/// A host on VLAN `argv[2]` of interface `argv[1]` at address `argv[3]` (MAC
/// `argv[4]`) for a kernel without 802.1Q support: answers ARP and ICMP echo for its
/// address, only in frames of that VLAN (tagged on the wire: the kernel reports a
/// stripped tag in the packet socket's auxiliary data), always tagged. Prints
/// `listening`, then a line per answer.
const VLAN_PEER: &str = r#"
import socket, struct, sys
ifname, vid, me, mac = sys.argv[1], int(sys.argv[2]), socket.inet_aton(sys.argv[3]), bytes.fromhex(sys.argv[4].replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); s.bind((ifname, 0))
s.setsockopt(263, 8, 1)  # SOL_PACKET, PACKET_AUXDATA
print("listening", flush=True)
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b)); t = (t >> 16) + (t & 0xffff); t += t >> 16
    return (~t) & 0xffff
def send(dst, etype, payload):
    s.send(dst + mac + struct.pack("!HHH", 0x8100, vid, etype) + payload)
while True:
    data, anc, _, addr = s.recvmsg(65535, 256)
    if addr[2] == socket.PACKET_OUTGOING: continue
    tag = None
    for lvl, typ, val in anc:
        if lvl == 263 and typ == 8:
            status, _, _, _, _, tci = struct.unpack_from("IIIHHH", val)
            if status & 0x10: tag = tci & 0xfff
    etype = struct.unpack("!H", data[12:14])[0]; body = data[14:]
    if tag is None and etype == 0x8100:
        tag = struct.unpack("!H", data[14:16])[0] & 0xfff; etype = struct.unpack("!H", data[16:18])[0]; body = data[18:]
    if tag != vid: continue
    src = data[6:12]
    if etype == 0x0806 and body[6:8] == b"\0\1" and body[24:28] == me:
        send(src, 0x0806, body[:6] + b"\0\2" + mac + me + body[8:14] + body[14:18])
        print("arp", flush=True)
    elif etype == 0x0800 and body[9] == 1 and body[16:20] == me and body[20] == 8:
        ihl = (body[0] & 15) * 4; ip = bytearray(body[:ihl]); icmp = bytearray(body[ihl:struct.unpack("!H", body[2:4])[0]])
        ip[12:16], ip[16:20] = body[16:20], body[12:16]; ip[8] = 64; ip[10:12] = b"\0\0"; ip[10:12] = struct.pack("!H", csum(bytes(ip)))
        icmp[0] = 0; icmp[2:4] = b"\0\0"; icmp[2:4] = struct.pack("!H", csum(bytes(icmp)))
        send(src, 0x0800, bytes(ip) + bytes(icmp))
        print("echo", flush=True)
"#;

/// A Layer2 primary network and a Localnet secondary network on VLAN 100 of the uplink.
const SWITCHED: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: green
  labels: {k8s.ovn.org/primary-user-defined-network: ""}
---
apiVersion: v1
kind: Namespace
metadata: {name: lab}
---
apiVersion: k8s.ovn.org/v1
kind: UserDefinedNetwork
metadata: {name: l2, namespace: green}
spec: {topology: Layer2, role: Primary, subnets: ["10.50.0.0/24"], mtu: 1400}
---
apiVersion: k8s.ovn.org/v1
kind: UserDefinedNetwork
metadata: {name: vlan, namespace: lab}
spec:
  topology: Localnet
  localnet:
    role: Secondary
    physicalNetworkName: physnet
    subnets: ["192.168.100.0/24"]
    excludeSubnets: ["192.168.100.48/28"]
    vlan: {mode: Access, access: {id: 100}}
"#;

/// [`attach_pod`] to a switched network whose pods share `subnet` on the link: the
/// address.
fn attach_switched(
    topo: &Topology,
    d: &Ferruled,
    pod_if: (&str, &str, &str),
    net_pod: (&str, &str),
    subnet: &str,
) -> String {
    attach_pod(topo, d, pod_if, net_pod, Some(subnet)).0
}

#[test]
fn layer2_pods_are_switched_and_localnet_pods_bridged_to_a_vlan() {
    let topo = Topology::up("l");
    let mut d = topo.ferruled_with("udnl2", |p| {
        format!(
            "{}physical_networks = {{ physnet = \"uplink0\" }}\n",
            udn_config(p)
        )
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let manifests = dir.path().join("switched.yaml");
    std::fs::write(&manifests, SWITCHED).expect("write");
    ok(&d.ctl(&["network", "apply", "-f", manifests.to_str().expect("path")]));

    // Layer2: three pods on one segment, the gateway on it.
    let pods = [
        ("g1", "vg1", "02:00:00:32:00:01"),
        ("g2", "vg2", "02:00:00:32:00:02"),
        ("g3", "vg3", "02:00:00:32:00:03"),
    ];
    let ips: Vec<String> = pods
        .iter()
        .map(|&p| {
            attach_switched(
                &topo,
                &d,
                p,
                ("green.l2", &format!("green/{}", p.0)),
                "10.50.0.0/24",
            )
        })
        .collect();
    assert_eq!(ips, ["10.50.0.2", "10.50.0.3", "10.50.0.4"]);
    let switched_before: u64 = d.ctl_json(&["stats"])["workers"][0]["rx_packets"]
        .as_u64()
        .unwrap_or(0);
    for (i, (from, _, _)) in pods.iter().enumerate() {
        ok(&ping(&topo, from, &["10.50.0.1"]));
        for (j, ip) in ips.iter().enumerate() {
            if i != j {
                ok(&ping(&topo, from, &[ip]));
            }
        }
    }
    // The pods found each other by ARP (flooded, then answered unicast) and talk
    // directly: the neighbour entry is the peer pod's own MAC, not the gateway's.
    let neigh = text(&topo.run("g1", &["ip", "neigh", "show", "10.50.0.3"]));
    assert!(neigh.contains("02:00:00:32:00:02"), "{neigh}");
    assert!(
        d.ctl_json(&["stats"])["workers"][0]["rx_packets"]
            .as_u64()
            .unwrap_or(0)
            > switched_before
    );
    let fdb = d.ctl_json(&["network", "fdb", "--network", "green.l2"]);
    for (_, _, mac) in &pods {
        assert!(fdb.to_string().contains(mac), "{mac} in {fdb:#}");
    }
    let table = ok(&d.ctl(&["network", "fdb"]));
    assert!(
        table.contains("green.l2") && table.contains("static"),
        "{table}"
    );

    // A NetworkPolicy holds between pods of the segment, though their packets are
    // switched, not routed: g1 takes only app=client (g2) in; g3 is dropped as
    // `acl-deny`; g1's own pings to g3 get their replies (its connection).
    let state = dir.path().join("cluster");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::write(
        state.join("pods.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: g1, namespace: green, labels: {app: server}}\n\
         spec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.244.0.21}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: g2, namespace: green, labels: {app: client}}\n\
         spec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.244.0.22}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: g3, namespace: green, labels: {app: other}}\n\
         spec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.244.0.23}\n---\n\
         apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: g1-from-client, namespace: green}\n\
         spec:\n  podSelector: {matchLabels: {app: server}}\n  policyTypes: [Ingress]\n  \
         ingress: [{from: [{podSelector: {matchLabels: {app: client}}}]}]\n",
    )
    .expect("write");
    run_agent_once(&state, &d);
    let dump = d.ctl_json(&["acl", "dump"]);
    assert!(dump.to_string().contains("10.50.0.3"), "{dump:#}");
    let before = drops(&d.ctl_json(&["stats"]), "acl-deny");
    ok(&ping(&topo, "g2", &[&ips[0]]));
    let o = ping(&topo, "g3", &[&ips[0]]);
    assert!(
        !o.status.success(),
        "the policy lets green/g3 in: {}",
        text(&o)
    );
    assert!(
        drops(&d.ctl_json(&["stats"]), "acl-deny") >= before + 2,
        "{}",
        diagnostics(&d)
    );
    ok(&ping(&topo, "g1", &[&ips[2]]));
    // g3 still reaches g2, which no policy selects.
    ok(&ping(&topo, "g3", &[&ips[1]]));
    let empty = dir.path().join("no-acl.yaml");
    std::fs::write(&empty, "{}\n").expect("write");
    ok(&d.ctl(&["acl", "apply", "-f", empty.to_str().expect("path")]));
    ok(&ping(&topo, "g3", &[&ips[0]]));

    // Localnet: two pods bridged to VLAN 100 of the uplink, where a host answers on
    // that VLAN only; Ferrule tags what leaves and untags what comes in.
    let mut peer = Script::start(
        &topo,
        "rt",
        dir.path(),
        "vlan-peer.py",
        VLAN_PEER,
        &["eth0", "100", "192.168.100.50", "02:00:00:64:00:32"],
    );
    assert_eq!(peer.line(), "listening");
    let v1 = attach_switched(
        &topo,
        &d,
        ("v1", "vv1", "02:00:00:64:00:01"),
        ("lab.vlan", "lab/v1"),
        "192.168.100.0/24",
    );
    let v2 = attach_switched(
        &topo,
        &d,
        ("v2", "vv2", "02:00:00:64:00:02"),
        ("lab.vlan", "lab/v2"),
        "192.168.100.0/24",
    );
    assert_eq!(
        (v1.as_str(), v2.as_str()),
        ("192.168.100.1", "192.168.100.2")
    );
    let o = ping(&topo, "v1", &["192.168.100.50"]);
    assert!(
        o.status.success(),
        "{}\n{}\n{}",
        text(&o),
        text(&d.ctl(&["network", "fdb"])),
        diagnostics(&d)
    );
    ok(&ping(&topo, "v2", &["192.168.100.50"]));
    ok(&ping(&topo, "v1", &[&v2]));
    assert_eq!(peer.line(), "arp", "the peer saw a tagged ARP request");
    // The router's VLAN interface was learned behind the uplink on VLAN 100.
    let fdb = d.ctl_json(&["network", "fdb", "--network", "lab.vlan"]);
    let learned = fdb["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["kind"] == "learned")
        .cloned()
        .unwrap_or_else(|| panic!("a learned entry: {fdb:#}"));
    assert_eq!(
        (learned["port"].as_str(), learned["vlan"].as_u64()),
        (Some("uplink0"), Some(100)),
        "{fdb:#}"
    );
    // The Layer2 network's pods are not on the VLAN: nothing of theirs was learned there.
    assert!(!fdb.to_string().contains("02:00:00:32:00"), "{fdb:#}");

    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}
