//! Every virtual-device PMD Ferrule relies on comes up under `ferruled` (net_null,
//! net_ring, net_pcap, net_memif, net_vhost, virtio_user, net_af_packet, net_tap), and
//! frames injected by the kernel cross the shared-memory pairs byte-for-byte:
//! tap → memif server ⇢ memif client → pcap, and af_packet → vhost-user ⇢ virtio_user
//! → pcap. Runs inside a network namespace the test creates.

use etherparse::PacketBuilder;
use ferrule_e2e::*;
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

fn frames(tag: u8) -> Vec<Vec<u8>> {
    (0u16..40)
        .map(|i| {
            let payload: Vec<u8> = (0..(i as usize * 37) % 1200 + 20)
                .map(|b| b as u8 ^ tag)
                .collect();
            let mut f = Vec::new();
            let eth = PacketBuilder::ethernet2([2, tag, 0, 0, 0, i as u8], [2, 0xee, 0, 0, 0, 1]);
            if i % 2 == 0 {
                eth.ipv4([10, tag, 0, 1], [10, 2, 0, i as u8], 64)
                    .udp(7000 + i, 9)
                    .write(&mut f, &payload)
            } else {
                eth.ipv6([tag; 16], [0xfd; 16], 64)
                    .tcp(9000 + i, 80, 1, 100)
                    .write(&mut f, &payload)
            }
            .expect("build frame");
            f
        })
        .collect()
}

/// Sends the frames of a pcap out of `iface` inside the namespace with an AF_PACKET
/// socket (the kernel transmits them, the PMD on the other side receives them).
fn inject(ns: &Netns, iface: &str, pcap: &std::path::Path) {
    let script = r#"
import socket, struct, sys
iface, path = sys.argv[1], sys.argv[2]
data = open(path, 'rb').read()
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
off = 24
while off + 16 <= len(data):
    incl = struct.unpack_from('<I', data, off + 8)[0]
    off += 16
    s.send(data[off:off + incl])
    off += incl
"#;
    let st = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c", script, iface])
        .arg(pcap)
        .status()
        .expect("run python3");
    assert!(st.success(), "injecting frames on {iface} failed");
}

fn port<'a>(ports: &'a Value, name: &str) -> &'a Value {
    ports["ports"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("port {name} missing from {ports:#}"))
}

#[test]
fn every_virtual_pmd_comes_up_and_shared_memory_pairs_forward_byte_for_byte() {
    let ns = Netns::new("vdev").expect("netns (root needed)");
    // No IPv6 autoconfiguration chatter on the test interfaces.
    ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
        .expect("sysctl");
    ns.exec(&["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"])
        .expect("sysctl");
    ns.exec(&[
        "ip", "link", "add", "fr-v0", "type", "veth", "peer", "name", "fr-v1",
    ])
    .expect("veth");
    ns.exec(&["ip", "link", "set", "fr-v0", "up"])
        .expect("veth up");
    ns.exec(&["ip", "link", "set", "fr-v1", "up"])
        .expect("veth up");

    let prefix = unique_prefix("vdev");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_path_buf();
    write_pcap(&d.join("empty.pcap"), &[]).expect("pcap");
    let cfg = format!(
        "{base}\
[[port]]\nname = \"tap\"\ndevargs = \"net_tap0,iface=fr-tap0\"\nrole = \"host\"\nxconnect = \"memif-s\"\n\
[[port]]\nname = \"memif-s\"\ndevargs = \"net_memif0,role=server,socket={d}/memif.sock\"\nrole = \"pod\"\n\
[[port]]\nname = \"memif-c\"\ndevargs = \"net_memif1,role=client,socket={d}/memif.sock\"\nrole = \"pod\"\nxconnect = \"out-a\"\n\
[[port]]\nname = \"out-a\"\ndevargs = \"net_pcap0,rx_pcap={d}/empty.pcap,tx_pcap={d}/out-a.pcap\"\nrole = \"host\"\n\
[[port]]\nname = \"afp\"\ndevargs = \"net_af_packet0,iface=fr-v0\"\nrole = \"uplink\"\nxconnect = \"vhost\"\n\
[[port]]\nname = \"vhost\"\ndevargs = \"net_vhost0,iface={d}/vhost.sock,queues=1\"\nrole = \"pod\"\n\
[[port]]\nname = \"virtio\"\ndevargs = \"virtio_user0,path={d}/vhost.sock,queues=1\"\nrole = \"pod\"\nxconnect = \"out-b\"\n\
[[port]]\nname = \"out-b\"\ndevargs = \"net_pcap1,rx_pcap={d}/empty.pcap,tx_pcap={d}/out-b.pcap\"\nrole = \"host\"\n\
[[port]]\nname = \"ring\"\ndevargs = \"net_ring0\"\nrole = \"host\"\n\
[[port]]\nname = \"null\"\ndevargs = \"net_null0,size=64\"\nrole = \"host\"\n",
        base = base_config(&prefix).replace("[dataplane]\n", "[dataplane]\nlink_poll_ms = 100\n"),
        d = d.display(),
    );
    let mut daemon =
        Ferruled::start_wrapped(dir, &cfg, &prefix, &ns.wrapper()).expect("start ferruled");

    // Every port is up (the shared-memory pairs once their peers connected).
    let deadline = Instant::now() + Duration::from_secs(15);
    let ports = loop {
        let ports = daemon.ctl_json(&["ports"]);
        let all_up = ports["ports"]
            .as_array()
            .is_some_and(|a| a.iter().all(|p| p["link"] == "up"));
        if all_up {
            break ports;
        }
        assert!(
            Instant::now() < deadline,
            "ports not all up: {ports:#}\n{}",
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(ports["ports"].as_array().map(Vec::len), Some(10));
    std::thread::sleep(Duration::from_millis(300)); // the control thread publishes link state

    let (fa, fb) = (frames(0xa), frames(0xb));
    let in_a = daemon.dir.path().join("in-a.pcap");
    let in_b = daemon.dir.path().join("in-b.pcap");
    write_pcap(&in_a, &fa).expect("pcap");
    write_pcap(&in_b, &fb).expect("pcap");
    inject(&ns, "fr-tap0", &in_a);
    inject(&ns, "fr-v1", &in_b);
    let want = (fa.len() + fb.len()) as u64;
    daemon.wait_stats("frames through both pairs", |s| {
        let tx = |name: &str| {
            s["ports"]
                .as_array()
                .and_then(|a| a.iter().find(|p| p["name"] == name))
                .and_then(|p| p["counters"]["tx_packets"].as_u64())
                .unwrap_or(0)
        };
        tx("out-a") + tx("out-b") >= want
    });
    let stats = daemon.ctl_json(&["stats"]);
    assert_eq!(
        port(&stats, "memif-c")["counters"]["rx_packets"],
        fa.len() as u64
    );
    assert_eq!(
        port(&stats, "virtio")["counters"]["rx_packets"],
        fb.len() as u64
    );
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log_text());

    let out_a = read_pcap(&daemon.dir.path().join("out-a.pcap")).expect("out-a");
    let out_b = read_pcap(&daemon.dir.path().join("out-b.pcap")).expect("out-b");
    assert_eq!(out_a, fa, "tap → memif → pcap changed frames");
    assert_eq!(
        out_b, fb,
        "af_packet → vhost-user → virtio_user → pcap changed frames"
    );
    assert!(leftovers(&prefix).is_empty(), "{:?}", leftovers(&prefix));
}
