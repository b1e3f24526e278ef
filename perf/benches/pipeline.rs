//! Criterion benchmark of the forwarding path in memory: Ferrule's pipeline (parse,
//! l2, local, ttl, batched route lookup, MTU, neighbour, rewrite) over 32-packet bursts
//! of 64-byte IPv4 UDP frames with a 1M-route table, side by side in the same run with
//! an l3fwd-style minimal path on DPDK's `rte_lpm` (check Ethernet type and IPv4
//! version/IHL, bulk lookup, TTL and checksum, MACs) on the same frames and routes,
//! Ferrule's pipeline again with a 1,000-rule ingress ACL table on the input port, and
//! again with the input port a pod port whose pod sends the frames (the routed pod
//! path: port security checks each frame's source MAC and address), and that pod's
//! address a secondary IP of a secondary ENI (the per-ENI egress path: the frames
//! leave by the ENI's table).
//!
//! The route table is measured as the daemon publishes it, a clone (every update clones
//! the current table: dense parts of a clone are on transparent huge pages), and once
//! as built by inserts (all on 4 KiB pages with THP in `madvise` mode; in `always` mode
//! the two do not differ). `rte_lpm` runs on DPDK's `--no-huge` memory, or on hugepages
//! with `FERRULE_BENCH_BASELINE_HUGE=1`.
//!
//! `cargo bench -p ferrule-perf --bench pipeline -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, Criterion, Throughput};
use ferrule_dataplane::acl::identity::{Identities, IdentityMap};
use ferrule_dataplane::acl::table::{AclTables, Table};
use ferrule_dataplane::acl::{Action as AclAction, PortRange, Prefix, Proto, Rule};
use ferrule_dataplane::counters::MAX_PORTS;
use ferrule_dataplane::dpdk::Eal;
use ferrule_dataplane::lpm::{Lpm4, Lpm6};
use ferrule_dataplane::pipeline::{self, Action, NoTrace, Scratch};
use ferrule_dataplane::snapshot::{
    Neighbor, Network, NextHopEntry, PodSources, PortRole, PortState, Snapshot, SourceRoutes,
    SourceTable,
};
use ferrule_dataplane::wire::{checksum, EthernetAddress};
use ferrule_perf::routes::{v4_addrs, v4_route_count, v4_routes};
use ferrule_perf::rte_lpm::{RteLpm, LOOKUP_SUCCESS};
use rand::prelude::*;
use rustc_hash::FxHashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const ROUTES: usize = 1_000_000;
/// Distinct next hops (neighbours on the uplink).
const NEXT_HOPS: u32 = 64;
const BURST: usize = 32;
/// Frames cycled through: far more destinations than the caches hold.
const FRAMES: usize = 1 << 16;
/// Frames in the arena the timed loop cycles through (512 KiB of packet data).
const ARENA: usize = 8192;
const SEED: u64 = 0x5eed_f10e;
const IN_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 1];
const OUT_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 2];
/// The frames' source: the pod of the pod-port case.
const SRC_MAC: [u8; 6] = [2, 0, 0, 0, 1, 2];
const SRC_IP: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);

fn neighbor_ip(k: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 255, 0, k as u8)
}

fn neighbor_mac(k: u32) -> [u8; 6] {
    [2, 0, 0, 0, 0xff, k as u8]
}

/// 64-byte IPv4/UDP frame (14 + 20 + 8 + 22) to `dst`, TTL 64, checksums valid.
fn frame(dst: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[0..6].copy_from_slice(&IN_MAC);
    f[6..12].copy_from_slice(&SRC_MAC);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip.copy_from_slice(&[
        0x45, 0, 0, 50, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 2, 0, 0, 0, 0,
    ]);
    ip[16..20].copy_from_slice(&dst.to_be_bytes());
    let c = !checksum::data(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&5000u16.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

fn snapshot(routes: &[(u32, u8, u32)]) -> Snapshot {
    let mut lpm = Lpm4::new();
    for &(p, len, i) in routes {
        lpm.insert(Ipv4Addr::from(p), len, i % NEXT_HOPS)
            .expect("route");
    }
    let next_hops = (0..NEXT_HOPS)
        .map(|k| NextHopEntry::Port {
            port: 1,
            via: Some(IpAddr::V4(neighbor_ip(k))),
        })
        .collect();
    let mut neighbors = FxHashMap::default();
    for k in 0..NEXT_HOPS {
        neighbors.insert(
            (0, IpAddr::V4(neighbor_ip(k))),
            Neighbor {
                mac: EthernetAddress(neighbor_mac(k)),
                port: 1,
            },
        );
    }
    let port = |name: &str, role, mac| PortState {
        name: name.into(),
        dpdk_id: 0,
        role,
        network: 0,
        mac: EthernetAddress(mac),
        mtu: 1500,
        pod_mac: None,
        local_v4: vec![Ipv4Addr::new(169, 254, 1, 1)],
        local_v6: Vec::new(),
        proxy_arp_v4: Vec::new(),
        xconnect: None,
        pod_sources: PodSources::default(),
        locked: false,
    };
    let mut snap = Snapshot {
        generation: 1,
        ports: vec![
            port("in", PortRole::Host, IN_MAC),
            port("uplink", PortRole::Uplink, OUT_MAC),
        ],
        networks: vec![Network {
            name: "default".into(),
            lpm4: Arc::new(lpm),
            lpm6: Arc::new(Lpm6::new()),
            gateway_v4: Ipv4Addr::new(169, 254, 1, 1),
            gateway_v6: "fe80::1".parse().expect("v6"),
            user_defined: false,
        }],
        next_hops: Arc::new(next_hops),
        neighbors: Arc::new(neighbors),
        nh_mac: Default::default(),
        acl: Default::default(),
        snat: Default::default(),
        locked_allow: Default::default(),
        any_locked: false,
        switching: Default::default(),
        source_routes: None,
        identities: Default::default(),
        dns: None,
    };
    snap.resolve_gateways();
    snap
}

/// The l3fwd-style baseline: returns the number of frames forwarded.
fn l3fwd<F: pipeline::Frames + ?Sized>(lpm: &RteLpm, frames: &mut F, macs: &[[u8; 6]]) -> usize {
    let mut ips = [0u32; BURST];
    let mut hops = [0u32; BURST];
    let mut ok = [false; BURST];
    let n = frames.count().min(BURST);
    for i in 0..n {
        let f = frames.frame(i);
        ok[i] = f.len() >= 34 && f[12..14] == [0x08, 0x00] && f[14] == 0x45;
        if ok[i] {
            ips[i] = u32::from_be_bytes([f[30], f[31], f[32], f[33]]);
        }
    }
    lpm.lookup_bulk(&ips[..n], &mut hops[..n]);
    let mut sent = 0;
    for i in 0..n {
        let f = frames.frame_mut(i);
        if !ok[i] || hops[i] & LOOKUP_SUCCESS == 0 || f[22] <= 1 {
            continue;
        }
        let nh = (hops[i] & 0x00ff_ffff) as usize;
        let old = u16::from_be_bytes([f[22], f[23]]);
        f[22] -= 1;
        let new = u16::from_be_bytes([f[22], f[23]]);
        let c = checksum::update16(u16::from_be_bytes([f[24], f[25]]), old, new);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f[0..6].copy_from_slice(&macs[nh]);
        f[6..12].copy_from_slice(&OUT_MAC);
        sent += 1;
    }
    sent
}

fn bench(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(SEED);
    let routes = v4_routes(&mut rng, v4_route_count(ROUTES));
    let addrs = v4_addrs(&mut rng, &routes, FRAMES, 1.0);
    let frames: Vec<Vec<u8>> = addrs.iter().map(|&a| frame(a)).collect();
    let built = snapshot(&routes);
    // What a worker reads: the daemon publishes a clone of the table it updated.
    let snap = published(&built);
    // FERRULE_BENCH_NO_BASELINE=1 skips building rte_lpm (slow to fill: ~1 minute for
    // 1M routes) when profiling Ferrule's side alone.
    let baseline = std::env::var_os("FERRULE_BENCH_NO_BASELINE").is_none();
    let mut rte = RteLpm::new("ferrule_bench_pipe", 1 << 21, 1 << 16).expect("rte_lpm_create");
    for &(p, len, i) in routes.iter().filter(|_| baseline) {
        rte.add(p, len, i % NEXT_HOPS).expect("rte_lpm_add");
    }
    let macs: Vec<[u8; 6]> = (0..NEXT_HOPS).map(neighbor_mac).collect();

    // Both paths agree on every frame before anything is timed.
    let mut scratch = Box::<Scratch>::default();
    let mut actions = [Action::Drop(ferrule_dataplane::counters::DropReason::Malformed); BURST];
    for chunk in frames.chunks(BURST).filter(|_| baseline) {
        let (mut a, mut b) = (chunk.to_vec(), chunk.to_vec());
        pipeline::process_burst(
            &snap,
            0,
            a.as_mut_slice(),
            &mut actions[..chunk.len()],
            &mut scratch,
            None,
            &mut NoTrace,
        );
        let sent = l3fwd(&rte, b.as_mut_slice(), &macs);
        assert_eq!(sent, chunk.len(), "every frame hits a route");
        assert!(
            actions[..chunk.len()]
                .iter()
                .all(|x| *x == Action::Forward { port: 1 }),
            "{actions:?}"
        );
        assert_eq!(a, b, "Ferrule and the baseline rewrite identically");
    }

    let mut g = c.benchmark_group("forward_64B_ipv4_1M_routes");
    g.throughput(Throughput::Elements(BURST as u64));
    // Frames live in one contiguous arena (like mbufs in a pool) and are processed in
    // place, burst after burst; the arena is restored from the pristine copy (untimed)
    // before every pass over it.
    let pristine: Vec<[u8; 64]> = frames[..ARENA]
        .iter()
        .map(|f| f[..64].try_into().expect("64 B"))
        .collect();
    let mut arena = pristine.clone();
    let mut pos = 0usize;
    let mut run = |iters: u64, f: &mut dyn FnMut(&mut [[u8; 64]])| {
        let mut total = std::time::Duration::ZERO;
        let mut left = iters as usize;
        while left > 0 {
            if pos == 0 {
                // Untimed: every pass starts from the frames as received (the pipeline
                // rewrote MACs and TTLs in place; left so, the next pass would only
                // measure the drops of frames no longer addressed to the port).
                arena.copy_from_slice(&pristine);
            }
            let bursts = left.min((ARENA - pos) / BURST);
            let start = std::time::Instant::now();
            for b in 0..bursts {
                let at = pos + b * BURST;
                f(&mut arena[at..at + BURST]);
            }
            total += start.elapsed();
            left -= bursts;
            pos = (pos + bursts * BURST) % ARENA;
        }
        total
    };
    // The same path with an ingress ACL table of 1,000 rules on the input port that no
    // frame matches before the last rule (permit all): every packet is classified
    // through the whole table.
    let acl_snap = with_ingress_acl(&snap, &mut rng, 1000);
    // The same path from a pod port (its pod's MAC and address are the frames' source):
    // the routed pod path, with the pod port's checks.
    let pod_snap = as_pod(&snap);
    // The pod's source a secondary IP of a secondary ENI (port 2): every frame leaves
    // by the ENI's table (its port, its gateway) instead of the main table's uplink.
    let eni_snap = with_eni(&pod_snap);
    // FQDN policy: the pod's ingress table permits by the destination's identity
    // (`fqdn:*.bench.test`, a 100,000-address identity map holding every frame's
    // destination), against the same table permitting by address (any) in the same
    // run: the difference is the identity lookup and the second classifier.
    // A third case puts an address rule permitting UDP before the selector rule:
    // every frame matches it, and none needs the identity lookup.
    let acl1_snap = with_pod_permit(&pod_snap, None, &[], false);
    let fqdn_snap = with_pod_permit(&pod_snap, Some("fqdn:*.bench.test"), &addrs[..ARENA], false);
    let fqdn_after_snap =
        with_pod_permit(&pod_snap, Some("fqdn:*.bench.test"), &addrs[..ARENA], true);
    // Each case: its name, its snapshot and the port every frame leaves by.
    let cases: [(&str, &Snapshot, u16); 8] = [
        ("ferrule_pipeline_burst32", &snap, 1),
        // The table as built by inserts, never cloned: tbl24 and the tbl8 groups on
        // 4 KiB pages (THP in `madvise` mode).
        ("ferrule_pipeline_as_built_burst32", &built, 1),
        ("ferrule_pipeline_acl1000_burst32", &acl_snap, 1),
        ("ferrule_pipeline_pod_burst32", &pod_snap, 1),
        ("ferrule_pipeline_eni_burst32", &eni_snap, 2),
        ("ferrule_pipeline_pod_acl1_burst32", &acl1_snap, 1),
        ("ferrule_pipeline_pod_fqdn_burst32", &fqdn_snap, 1),
        (
            "ferrule_pipeline_pod_fqdn_after_udp_burst32",
            &fqdn_after_snap,
            1,
        ),
    ];
    for (name, s, port) in cases {
        for chunk in frames.chunks(BURST).take(64) {
            let mut a = chunk.to_vec();
            pipeline::process_burst(
                s,
                0,
                a.as_mut_slice(),
                &mut actions[..chunk.len()],
                &mut scratch,
                None,
                &mut NoTrace,
            );
            assert!(
                actions[..chunk.len()]
                    .iter()
                    .all(|x| *x == Action::Forward { port }),
                "{name}: every frame leaves by port {port}: {actions:?}"
            );
        }
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                run(iters, &mut |burst| {
                    let mut slots = Slots(burst);
                    pipeline::process_burst(
                        s,
                        0,
                        &mut slots,
                        &mut actions,
                        &mut scratch,
                        None,
                        &mut NoTrace,
                    );
                    black_box(&actions);
                })
            })
        });
    }
    if baseline {
        g.bench_function("l3fwd_rte_lpm_burst32", |b| {
            b.iter_custom(|iters| {
                run(iters, &mut |burst| {
                    black_box(l3fwd(&rte, &mut Slots(burst), &macs));
                })
            })
        });
    }
    g.finish();
}

/// `snap` as the daemon publishes it after an update: its route tables cloned.
fn published(snap: &Snapshot) -> Snapshot {
    let mut out = snap.clone();
    for n in &mut out.networks {
        n.lpm4 = Arc::new((*n.lpm4).clone());
        n.lpm6 = Arc::new((*n.lpm6).clone());
    }
    out
}

/// `snap` with port 0 a pod port whose pod is the frames' source (MAC and address).
fn as_pod(snap: &Snapshot) -> Snapshot {
    let mut out = snap.clone();
    let p = &mut out.ports[0];
    p.role = PortRole::Pod;
    p.pod_mac = Some(EthernetAddress(SRC_MAC));
    p.pod_sources = PodSources::new(p.pod_mac, &[IpAddr::V4(SRC_IP)], &[]);
    out
}

/// `snap` (from [`as_pod`]) with port 2 a secondary ENI's uplink, its gateway resolved,
/// and the pod's address one of its secondary IPs: table `eni-1` (the default via the
/// gateway out of port 2) is chosen by the frames' source.
fn with_eni(snap: &Snapshot) -> Snapshot {
    const ENI_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 3];
    let gw = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1));
    let mut out = snap.clone();
    let mut eni = out.ports[1].clone();
    eni.name = "eni1".into();
    eni.mac = EthernetAddress(ENI_MAC);
    eni.local_v4 = vec![Ipv4Addr::new(10, 0, 1, 10)];
    eni.proxy_arp_v4 = vec![SRC_IP];
    out.ports.push(eni);
    let mut hops = (*out.next_hops).clone();
    hops.push(NextHopEntry::Port {
        port: 2,
        via: Some(gw),
    });
    let nh = (hops.len() - 1) as u32;
    out.next_hops = Arc::new(hops);
    let mut neighbors = (*out.neighbors).clone();
    neighbors.insert(
        (0, gw),
        Neighbor {
            mac: EthernetAddress([2, 0, 0, 0, 0xe1, 1]),
            port: 2,
        },
    );
    out.neighbors = Arc::new(neighbors);
    out.resolve_gateways();
    let mut routes = SourceRoutes::default();
    routes.tables.push(SourceTable {
        name: "eni-1".into(),
        owner: "eni-0b1 (device 1)".into(),
        nh,
    });
    routes.v4.insert((0, u32::from(SRC_IP)), 0);
    out.source_routes = Some(Arc::new(routes));
    out
}

/// `snap` with an ingress table on port 0: `rules - 1` deny rules on random source
/// prefixes inside 172.16.0.0/12 with random protocols and port ranges (the frames come
/// from 10.1.0.2, so none matches), then permit all.
fn with_ingress_acl(snap: &Snapshot, rng: &mut StdRng, rules: usize) -> Snapshot {
    let mut list = Vec::with_capacity(rules);
    for _ in 1..rules {
        let mut r = Rule::any(AclAction::Deny);
        let len = rng.gen_range(16..=32u8);
        let addr = 0xAC10_0000u32 | (rng.gen::<u32>() & 0x000F_FFFF);
        r.src = Prefix::v4(Ipv4Addr::from(addr), len);
        r.proto = if rng.gen_bool(0.5) {
            Proto::TCP
        } else {
            Proto::UDP
        };
        let lo: u16 = rng.gen_range(0..60000);
        r.dst_port = PortRange {
            lo,
            hi: lo + rng.gen_range(0..1000),
        };
        list.push(r);
    }
    list.push(Rule::any(AclAction::Permit));
    let slots = (0..list.len() as u32).collect();
    let table = Table::compile("bench".into(), list, slots, rules as u32).expect("compile");
    let mut ingress = [None; MAX_PORTS];
    ingress[0] = Some(0);
    let mut out = snap.clone();
    out.acl = Arc::new(AclTables::new(
        vec![Arc::new(table)],
        ingress,
        [None; MAX_PORTS],
        None,
        1,
    ));
    out
}

/// `snap` with one ingress table on port 0: a deny of TCP port 22, with `udp_first` a
/// permit of UDP by address, then a permit of everything to `selector` (or to anything
/// without one). With a selector, the
/// identity map holds each of `dsts` and 99,000 other random addresses (10,000 names ×
/// 10 addresses) under the one identity the selector selects, and 1,000 more under
/// another.
fn with_pod_permit(
    snap: &Snapshot,
    selector: Option<&str>,
    dsts: &[u32],
    udp_first: bool,
) -> Snapshot {
    const ID: u32 = (1 << 24) + 1;
    let mut ssh = Rule::any(AclAction::Deny);
    ssh.proto = Proto::TCP;
    ssh.dst_port = PortRange::single(22);
    let mut permit = Rule::any(AclAction::Permit);
    permit.dst_selector = selector.map(str::to_string);
    let mut rules = vec![ssh];
    if udp_first {
        let mut udp = Rule::any(AclAction::Permit);
        udp.proto = Proto::UDP;
        rules.push(udp);
    }
    rules.push(permit);
    let n = rules.len() as u32;
    let table = Table::compile_with("bench".into(), rules, (0..n).collect(), n, &|_| vec![ID])
        .expect("compile");
    let mut ingress = [None; MAX_PORTS];
    ingress[0] = Some(0);
    let mut out = snap.clone();
    out.acl = Arc::new(AclTables::new(
        vec![Arc::new(table)],
        ingress,
        [None; MAX_PORTS],
        None,
        1,
    ));
    if selector.is_some() {
        let mut rng = StdRng::seed_from_u64(SEED ^ 0xf9d);
        let mut map = IdentityMap::default();
        for &d in dsts {
            map.set(IpAddr::V4(Ipv4Addr::from(d)), 32, ID)
                .expect("host prefix");
        }
        while map.len() < 100_000 {
            let id = if map.len() % 100 == 0 { ID + 1 } else { ID };
            map.set(IpAddr::V4(Ipv4Addr::from(rng.gen::<u32>())), 32, id)
                .expect("host prefix");
        }
        out.identities = Arc::new(Identities {
            maps: vec![Some(Arc::new(map))],
        });
    }
    out
}

/// A burst of 64-byte frames in the arena, as the pipeline sees frames.
struct Slots<'a>(&'a mut [[u8; 64]]);

impl pipeline::Frames for Slots<'_> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        &self.0[i]
    }
    fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.0[i]
    }
}

fn main() {
    // `cargo test --all-targets` runs benches without --bench: skip the slow set-up.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // The baseline's memory: DPDK's own hugepages, or anonymous 4 KiB pages.
    let memory = if std::env::var_os("FERRULE_BENCH_BASELINE_HUGE").is_some() {
        "--in-memory"
    } else {
        "--no-huge"
    };
    let args: Vec<String> = [
        "pipeline-bench",
        "-l",
        "0",
        memory,
        "--no-shconf",
        "--no-pci",
        "--no-telemetry",
        "-m",
        "512",
        "--log-level",
        "error",
        "--file-prefix",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(std::iter::once(format!(
        "ferrule-bench-pipe-{}",
        std::process::id()
    )))
    .collect();
    let eal = Eal::init_args(args).expect("EAL init");
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    drop(eal);
}
