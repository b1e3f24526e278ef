//! NAT rewrites against scapy: each fixture (scripts/gen-nat-fixtures.py) holds a frame
//! as it arrives and the frame scapy builds as it must leave, every checksum computed
//! from scratch; Ferrule's incremental rewrite of the first must give the second byte
//! for byte. The ICMP error fixtures also check that the quoted flow is recognised.

use ferrule_dataplane::flow::FlowKey;
use ferrule_dataplane::nat::rewrite::{self, Endpoint};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;

fn decode_hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn endpoint(s: &str) -> Endpoint {
    match s {
        "src" => Endpoint::Src,
        "dst" => Endpoint::Dst,
        other => panic!("bad endpoint {other}"),
    }
}

/// IHL-derived offsets of an untagged Ethernet/IPv4 frame: (l3, l4, proto).
fn offsets(frame: &[u8]) -> (usize, usize, u8) {
    let l3 = 14;
    (l3, l3 + usize::from(frame[l3] & 0x0F) * 4, frame[l3 + 9])
}

#[test]
fn rewrites_equal_scapy() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nat");
    let mut seen = 0;
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("read");
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let f: HashMap<&str, &str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(" = "))
            .collect();
        let mut frame = decode_hex(f["in"]);
        let want = decode_hex(f["out"]);
        let (l3, l4, proto) = offsets(&frame);
        match f["op"] {
            "rewrite" => {
                let addr: Ipv4Addr = f["addr"].parse().expect("addr");
                let port: u16 = f["port"].parse().expect("port");
                assert!(
                    rewrite::rewrite(&mut frame, l3, l4, proto, endpoint(f["which"]), addr, port),
                    "{name}"
                );
            }
            "icmp-error" => {
                let outer: Vec<&str> = f["outer"].split(' ').collect();
                let inner: Vec<&str> = f["inner"].split(' ').collect();
                let q: Vec<&str> = f["quoted"].split(' ').collect();
                let quoted = FlowKey::v4(
                    0,
                    q[0].parse().unwrap(),
                    q[1].parse().unwrap(),
                    q[3].parse().unwrap(),
                    q[2].parse().unwrap(),
                    q[4].parse().unwrap(),
                );
                assert_eq!(
                    rewrite::quoted_key(&frame, l4, false, 0),
                    Some(quoted),
                    "{name}: quoted flow"
                );
                assert!(
                    rewrite::rewrite_icmp_error(
                        &mut frame,
                        l3,
                        l4,
                        endpoint(outer[0]),
                        outer[1].parse().unwrap(),
                        endpoint(inner[0]),
                        inner[1].parse().unwrap(),
                        inner[2].parse().unwrap(),
                    ),
                    "{name}"
                );
            }
            other => panic!("{name}: unknown op {other}"),
        }
        assert_eq!(hex(&frame), hex(&want), "{name}");
        seen += 1;
    }
    assert!(seen >= 12, "only {seen} fixtures");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn short_headers_are_refused_untouched() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nat");
    let text = std::fs::read_to_string(dir.join("tcp_syn_snat.txt")).expect("read");
    let line = text.lines().find(|l| l.starts_with("in = ")).unwrap();
    let full = decode_hex(&line[5..]);
    let (l3, l4, proto) = offsets(&full);
    let mut cut = full[..l4 + 10].to_vec();
    let before = cut.clone();
    let node = Ipv4Addr::new(192, 0, 2, 10);
    assert!(!rewrite::rewrite(
        &mut cut,
        l3,
        l4,
        proto,
        Endpoint::Src,
        node,
        1
    ));
    assert_eq!(cut, before);
    let mut tiny = full[..30].to_vec();
    assert!(!rewrite::rewrite(
        &mut tiny,
        l3,
        l4,
        proto,
        Endpoint::Src,
        node,
        1
    ));
    // An error whose quote is shorter than an IP header plus 8 bytes.
    let path = dir.join("port_unreachable_udp.txt");
    let text = std::fs::read_to_string(path).expect("read");
    let line = text.lines().find(|l| l.starts_with("in = ")).unwrap();
    let full = decode_hex(&line[5..]);
    let (l3, l4, _) = offsets(&full);
    let mut cut = full[..l4 + 8 + 24].to_vec();
    let total = (cut.len() - l3) as u16;
    cut[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
    let before = cut.clone();
    assert!(!rewrite::rewrite_icmp_error(
        &mut cut,
        l3,
        l4,
        Endpoint::Dst,
        node,
        Endpoint::Src,
        node,
        1
    ));
    assert_eq!(cut, before);
    assert_eq!(rewrite::quoted_key(&full[..l4 + 4], l4, false, 0), None);
}
