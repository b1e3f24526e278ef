//! Criterion benchmark of the whole conntrack and SNAT path in memory (issue 5): frames
//! built once, run through `pipeline::process_burst` in bursts of 32 with a worker's
//! `Conntrack` and a snapshot that masquerades pod traffic leaving the VPC to the node
//! IP and attaches a `reflect`-everything ingress table to the pod port.
//!
//! - `established_<n>`: `n` masqueraded TCP connections (1k and 1M), a stream of pure
//!   ACKs over random connections, bursts alternating between the original direction
//!   (pod port: parse, l2, ct lookup + track, ACL skipped, route, SNAT rewrite with
//!   incremental checksums, neighbour, MAC rewrite) and the reply direction (uplink:
//!   lookup + track, un-SNAT rewrite, route to the pod, MAC rewrite);
//! - `new_connections`: SYNs of distinct tuples from the pod port (ct miss, ingress ACL
//!   with the reflect rule, route, SNAT port allocation, insert, SNAT rewrite) into a
//!   table filling from empty to 1M (flushed, untimed, when full);
//! - `*/ct_nat_only`: the conntrack and NAT stages alone — the pipeline's own stage
//!   functions, `pipeline::ct::lookup` (hash, prefetch, lookup, `track`, reply
//!   translated back), `ct::commit` (the SNAT prefetch hints; the reply re-check after
//!   an ACL change; SNAT allocation and insert for new connections, masquerade rewrite
//!   with incremental checksums) and `ct::close_denied` — on a burst's context as the
//!   stages before them leave it: the same streams already parsed (untimed) with their
//!   route known, and for new connections the ingress ACL's `reflect` verdict given;
//! - `*_ct_off`: the same frames (replies addressed to the pods) with conntrack off (no
//!   SNAT, no ACL, no `Conntrack`): the in-run baseline.
//!
//! A summary at the end prints each case's median rate and its ratio to the baseline.
//!
//! `cargo bench -p ferrule-perf --bench conntrack_path -- --warm-up-time 1 --measurement-time 3`
//!
//! Environment: `FERRULE_BENCH_CONNS` (comma-separated connection counts, default
//! `1000,1000000`), `FERRULE_BENCH_NO_BASELINE=1` (skip the conntrack-off runs),
//! `FERRULE_BENCH_NO_NEW=1` (skip the new-connection case), `FERRULE_BENCH_NO_HUGE=1`
//! (the table on ordinary 4 KiB pages instead of transparent huge pages),
//! `FERRULE_BENCH_BURST=<n>` (packets per burst, default 32),
//! `FERRULE_BENCH_CPU_TIME=1` (time with the thread's CPU time instead of wall time, on
//! a machine shared with other work), `FERRULE_BENCH_PACKETS_PER_MS=<n>` (how fast the
//! worker's clock runs, default 30,000 packets per ms; 30 makes every connection of a
//! million a slow one), `FERRULE_BENCH_TABLE_SCALE=<n>` (the established cases'
//! table `n` times larger than the connection count rounded up to a power of two,
//! default 1; 1 to 16), `FERRULE_BENCH_WORKERS=<w>` (default 1; 1 to 16: the
//! established cases as worker 0 of `w`, polling a queue that carries every worker's
//! connections — its own `n` and `w - 1` in `w` packets of the others', which it hands
//! off; the stages-alone and new-connection cases are then not run),
//! `FERRULE_BENCH_DENIED=<k>` (default 0: in each of the established stream's
//! original-direction bursts, `k` packets at random places are from a pod to
//! 203.0.113.0/24, which the pod's ingress table then denies — no connection, dropped
//! by the stages; the case is named `…_denied_<k>`),
//! `FERRULE_BENCH_COUNT=<bursts>` (no criterion: each
//! case runs once for that many bursts, for `valgrind --tool=callgrind
//! --toggle-collect='*counted*'`: the inclusive cost of `Worker::burst` (the whole
//! pipeline) and of the `stage_ct_*` functions (the conntrack and NAT stages) is then
//! the timed bursts' cost; `--toggle-collect='*stage_ct_*'` counts the stages alone).

use criterion::{black_box, Criterion, Throughput};
use ferrule_dataplane::acl::table::{AclTables, Table};
use ferrule_dataplane::acl::{Action as AclAction, Prefix, Rule, RuleField};
use ferrule_dataplane::conntrack::{Conntrack, CtBudget, CtConfig, NoAdvice, BYTES_PER_CONNECTION};
use ferrule_dataplane::counters::{DropReason, MAX_PORTS};
use ferrule_dataplane::dpdk::memory::HugePages;
use ferrule_dataplane::dpdk::thread_cpu_time;
use ferrule_dataplane::lpm::{Lpm4, Lpm6};
use ferrule_dataplane::nat::{SnatPolicy, DEFAULT_PORTS};
use ferrule_dataplane::pipeline::ct::{self, CtMark, SnatHint};
use ferrule_dataplane::pipeline::{self, Action, Burst, NoTrace, Parsed, Scratch};
use ferrule_dataplane::snapshot::{
    Neighbor, Network, NextHopEntry, PodSources, PortRole, PortState, Snapshot,
};
use ferrule_dataplane::wire::{checksum, EthernetAddress};
use ferrule_dataplane::wire::{IpCidr, Ipv4Cidr};
use rand::prelude::*;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Packets per burst: 32, or `FERRULE_BENCH_BURST` (a power of two, at most
/// `pipeline::MAX_BURST`).
fn burst_size() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        let n = std::env::var("FERRULE_BENCH_BURST")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(32usize);
        assert!(
            n.is_power_of_two() && n <= pipeline::MAX_BURST,
            "FERRULE_BENCH_BURST: a power of two up to {}",
            pipeline::MAX_BURST
        );
        n
    })
}
/// Frames in the arena the timed loop runs over (512 KiB); it is refilled, untimed,
/// from the stream after every pass (the pipeline rewrites frames in place).
const ARENA: usize = 8192;
const SEED: u64 = 0x5eed_c7a7;
const FRAME: usize = 64;
const POD_PORT: u16 = 0;
const UPLINK: u16 = 1;
const GW_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xa];
const UPLINK_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xc];
const POD_MAC: [u8; 6] = [2, 0, 0, 0, 1, 2];
const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 9, 1];
const NODE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const ROUTER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const CISN: u32 = 1000;
const SISN: u32 = 500_000;
/// Packets per millisecond of the worker's clock: 30,000 (as if packets arrived at
/// 30 Mpps), or `FERRULE_BENCH_PACKETS_PER_MS` — e.g. 30, for a million connections that
/// each see a packet about every 33 s rather than every 33 ms (slow, long-lived
/// connections, whose deadlines move between any two of their packets).
fn packets_per_ms() -> u64 {
    static N: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("FERRULE_BENCH_PACKETS_PER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(30_000)
    })
}
/// How many times the established cases' table is larger than the connection count
/// rounded up to a power of two: 1, or `FERRULE_BENCH_TABLE_SCALE` (a less loaded
/// index: fewer keys stored past their home bucket, more memory per connection).
fn table_scale() -> u32 {
    std::env::var("FERRULE_BENCH_TABLE_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &u32| (1..=16).contains(&n))
        .unwrap_or(1)
}
/// New-connection case: distinct SYNs (999,424: a whole number of arenas), and the
/// table size they fill.
const NEW_CONNS: u32 = 122 * ARENA as u32;
const NEW_TABLE: u32 = 1 << 20;

type Frame = [u8; FRAME];

use ferrule_dataplane::conntrack::tcp_flags::{ACK, SYN};

/// Connection `i`: one of 250 pods (10.0.0.1-250) to one of 200 servers (198.18.0.x)
/// on 443, from a source port unique per pod.
fn conn(i: u32) -> (Ipv4Addr, u16, Ipv4Addr, u16) {
    let pod = Ipv4Addr::new(10, 0, 0, (i % 250 + 1) as u8);
    let sport = 1024 + ((i / 250) % 64_000) as u16;
    let server = Ipv4Addr::new(198, 18, (i / 250 / 64_000) as u8, (i % 200 + 1) as u8);
    (pod, sport, server, 443)
}

/// A 64-byte Ethernet/IPv4/TCP frame (40-byte IP packet, Ethernet padding after it),
/// TTL 64, checksums valid.
#[allow(clippy::too_many_arguments)]
fn tcp_frame(
    macs: ([u8; 6], [u8; 6]),
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
) -> Frame {
    let mut f = [0u8; FRAME];
    f[0..6].copy_from_slice(&macs.1);
    f[6..12].copy_from_slice(&macs.0);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    {
        let ip = &mut f[14..34];
        ip[..12].copy_from_slice(&[0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0]);
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        let c = !checksum::data(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }
    {
        let tcp = &mut f[34..54];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[8..12].copy_from_slice(&ack.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = flags;
        tcp[14..16].copy_from_slice(&65_535u16.to_be_bytes());
    }
    let c = tcp_checksum(&f);
    f[50..52].copy_from_slice(&c.to_be_bytes());
    f
}

/// The TCP checksum a 64-byte frame built by [`tcp_frame`] should carry.
fn tcp_checksum(f: &Frame) -> u16 {
    let src = Ipv4Addr::new(f[26], f[27], f[28], f[29]);
    let dst = Ipv4Addr::new(f[30], f[31], f[32], f[33]);
    let mut seg = [0u8; 20];
    seg.copy_from_slice(&f[34..54]);
    seg[16..18].fill(0);
    let ph = checksum::pseudo_header_v4(src, dst, ferrule_dataplane::wire::IpProtocol(6), 20);
    !checksum::combine(&[ph, checksum::data(&seg)])
}

/// Whether a frame's IPv4 and TCP checksums verify.
fn checksums_ok(f: &Frame) -> bool {
    checksum::data(&f[14..34]) == 0xFFFF && u16::from_be_bytes([f[50], f[51]]) == tcp_checksum(f)
}

/// Pod port 0 and uplink 1 in one network: 10.0.0.0/8 on the pod port, 192.0.2.0/24
/// on-link on the uplink with the node IP local, a default route via 192.0.2.1.
/// `ct_on`: SNAT to the node IP outside 10.0.0.0/8 and 192.0.2.0/24, and a `reflect`
/// ingress table on the pod port.
fn snapshot(ct_on: bool) -> Snapshot {
    let port = |name: &str, role, mac, pod_mac, local| PortState {
        name: name.into(),
        dpdk_id: 0,
        role,
        network: 0,
        mac: EthernetAddress(mac),
        mtu: 1500,
        pod_mac,
        local_v4: vec![local],
        local_v6: Vec::new(),
        proxy_arp_v4: Vec::new(),
        xconnect: None,
        pod_sources: PodSources::default(),
        locked: false,
    };
    let gw4 = Ipv4Addr::new(169, 254, 1, 1);
    let mut lpm = Lpm4::new();
    lpm.insert(Ipv4Addr::new(10, 0, 0, 0), 8, 0).expect("route");
    lpm.insert(Ipv4Addr::UNSPECIFIED, 0, 1).expect("route");
    lpm.insert(NODE, 32, 2).expect("route");
    lpm.insert(Ipv4Addr::new(192, 0, 2, 0), 24, 3)
        .expect("route");
    let next_hops = vec![
        NextHopEntry::Port {
            port: POD_PORT,
            via: None,
        },
        NextHopEntry::Port {
            port: UPLINK,
            via: Some(IpAddr::V4(ROUTER)),
        },
        NextHopEntry::Local,
        NextHopEntry::Port {
            port: UPLINK,
            via: None,
        },
    ];
    let mut neighbors = FxHashMap::default();
    neighbors.insert(
        (0u16, IpAddr::V4(ROUTER)),
        Neighbor {
            mac: EthernetAddress(ROUTER_MAC),
            port: UPLINK,
        },
    );
    let mut snap = Snapshot {
        generation: 1,
        ports: vec![
            port(
                "pod",
                PortRole::Pod,
                GW_MAC,
                Some(EthernetAddress(POD_MAC)),
                gw4,
            ),
            port("uplink", PortRole::Uplink, UPLINK_MAC, None, NODE),
        ],
        networks: vec![Network {
            name: "default".into(),
            lpm4: Arc::new(lpm),
            lpm6: Arc::new(Lpm6::new()),
            gateway_v4: gw4,
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
    // The pod port stands for the 250 pods (10.0.0.1-250): they send from 10.0.0.0/24
    // (`allowed_addresses`), through port security like any pod.
    snap.ports[usize::from(POD_PORT)].pod_sources = PodSources::new(
        Some(EthernetAddress(POD_MAC)),
        &[],
        &[IpCidr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 24).expect("valid")],
    );
    snap.resolve_gateways();
    if ct_on {
        snap.snat = Arc::new(SnatPolicy {
            node_ips: vec![NODE],
            vpc_cidrs: vec![
                Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 0), 8).expect("valid"),
                Ipv4Cidr::new(Ipv4Addr::new(192, 0, 2, 0), 24).expect("valid"),
            ],
            exclude: Vec::new(),
            ports: DEFAULT_PORTS.to_vec(),
        });
        let mut rules = vec![Rule::any(AclAction::Reflect)];
        if denied() > 0 {
            let mut deny = Rule::any(AclAction::Deny);
            deny.dst = Prefix::parse(&format!("{DENIED_NET}/24"), RuleField::Dst).expect("prefix");
            rules.insert(0, deny);
        }
        let slots = (0..rules.len() as u32).collect();
        let reflect = Table::compile("pod-reflect".into(), rules, slots, 1).expect("compile");
        let mut ingress = [None; MAX_PORTS];
        ingress[usize::from(POD_PORT)] = Some(0);
        snap.acl = Arc::new(AclTables::new(
            vec![Arc::new(reflect)],
            ingress,
            [None; MAX_PORTS],
            None,
            1,
        ));
    }
    snap
}

fn huge_pages() -> bool {
    std::env::var_os("FERRULE_BENCH_NO_HUGE").is_none()
}

/// Denied packets per original-direction burst of the established stream:
/// `FERRULE_BENCH_DENIED`, default 0.
fn denied() -> usize {
    std::env::var("FERRULE_BENCH_DENIED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
        .min(burst_size())
}

/// The network the pods' ingress table denies with [`denied`] packets.
const DENIED_NET: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 0);

/// Workers on the node: `FERRULE_BENCH_WORKERS`, default 1 (the bench runs worker 0).
fn workers() -> u16 {
    std::env::var("FERRULE_BENCH_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .clamp(1, 16)
}

/// Worker 0's conntrack, of [`workers`], its table of `max` connections.
fn conntrack(max: u32) -> Conntrack {
    let cfg = CtConfig {
        max_entries: max,
        max_per_zone: max,
        ..CtConfig::default()
    };
    let w = workers();
    let mut ct = if huge_pages() {
        Conntrack::new_in(&cfg, 0, w, true, &HugePages)
    } else {
        Conntrack::new_in(&cfg, 0, w, true, &NoAdvice)
    };
    // Node-wide limits as the daemon sets them (every worker's table full).
    let node = max * u32::from(w);
    ct.table.set_budget(CtBudget::new(node, node, w));
    ct.now = 1_000;
    ct
}

/// A burst of 64-byte frames, as the pipeline sees frames.
struct Slots<'a>(&'a mut [Frame]);

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

/// The per-burst state of a pipeline under test.
struct Worker {
    snap: Snapshot,
    ct: Option<Conntrack>,
    scratch: Box<Scratch>,
    actions: [Action; pipeline::MAX_BURST],
    packets: u64,
}

impl Worker {
    fn new(snap: Snapshot, ct: Option<Conntrack>) -> Worker {
        Worker {
            snap,
            ct,
            scratch: Box::default(),
            actions: [Action::Drop(DropReason::Malformed); pipeline::MAX_BURST],
            packets: 0,
        }
    }

    /// One burst received on `port`.
    #[inline(never)]
    fn burst(&mut self, port: u16, frames: &mut [Frame]) {
        if let Some(ct) = self.ct.as_mut() {
            ct.now = 1_000 + self.packets / packets_per_ms();
        }
        let n = frames.len();
        self.packets += n as u64;
        pipeline::process_burst(
            &self.snap,
            port,
            &mut Slots(frames),
            &mut self.actions[..n],
            &mut self.scratch,
            self.ct.as_mut(),
            &mut NoTrace,
        );
    }

    /// Runs `frames` (bursts received on the port `port_of(burst index)`) and checks
    /// that every packet is forwarded to the port `expect(burst index)`.
    fn run_checked(
        &mut self,
        frames: &mut [Frame],
        port_of: impl Fn(usize) -> u16,
        expect: impl Fn(usize) -> u16,
    ) {
        for (b, burst) in frames.chunks_mut(burst_size()).enumerate() {
            self.burst(port_of(b), burst);
            for a in &self.actions[..burst.len()] {
                assert_eq!(*a, Action::Forward { port: expect(b) }, "burst {b}");
            }
        }
    }
}

/// Ports of a stream's bursts: even bursts come from the pods, odd ones from the uplink.
fn alternating(b: usize) -> u16 {
    if b.is_multiple_of(2) {
        POD_PORT
    } else {
        UPLINK
    }
}

fn other_side(b: usize) -> u16 {
    if b.is_multiple_of(2) {
        UPLINK
    } else {
        POD_PORT
    }
}

/// Times `iters` bursts of `stream`, cycling through it: each pass over the arena is
/// timed, the arena refilled (untimed) from the stream between passes. With `parsed`
/// (the conntrack-and-NAT cases) each frame's parse result is refilled alongside.
struct Runner {
    stream: Vec<Frame>,
    arena: Vec<Frame>,
    parsed_stream: Vec<Parsed>,
    parsed: Vec<Parsed>,
    /// Next stream position to refill from, and the position in the arena.
    next: usize,
    pos: usize,
}

impl Runner {
    fn new(stream: Vec<Frame>) -> Runner {
        let arena = stream[..ARENA.min(stream.len())].to_vec();
        Runner {
            next: arena.len() % stream.len(),
            stream,
            arena,
            parsed_stream: Vec::new(),
            parsed: Vec::new(),
            pos: 0,
        }
    }

    /// A runner that also hands out each frame's parse result (parsed here, untimed).
    fn parsed(stream: Vec<Frame>) -> Runner {
        let mut r = Runner::new(stream);
        r.parsed_stream = r
            .stream
            .iter()
            .map(|f| pipeline::parse(f, 0).expect("parses"))
            .collect();
        r.parsed = r.parsed_stream[..r.arena.len()].to_vec();
        r
    }

    /// Returns the time taken; `burst(index in stream order, frames, parsed)` runs one
    /// burst (`parsed` is empty unless the runner was made by [`Runner::parsed`]).
    fn run(
        &mut self,
        iters: u64,
        mut burst: impl FnMut(usize, &mut [Frame], &mut [Parsed]),
    ) -> Duration {
        let mut total = Duration::ZERO;
        let mut left = iters as usize;
        let n = self.arena.len();
        let with_parsed = !self.parsed.is_empty();
        while left > 0 {
            if self.pos == n {
                let end = self.next + n;
                self.arena.copy_from_slice(&self.stream[self.next..end]);
                if with_parsed {
                    self.parsed
                        .copy_from_slice(&self.parsed_stream[self.next..end]);
                }
                self.next = end % self.stream.len();
                self.pos = 0;
            }
            let bursts = left.min((n - self.pos) / burst_size());
            let start = Clock::now();
            for b in 0..bursts {
                let at = self.pos + b * burst_size();
                let parsed = if with_parsed {
                    &mut self.parsed[at..at + burst_size()]
                } else {
                    &mut []
                };
                burst(
                    at / burst_size(),
                    &mut self.arena[at..at + burst_size()],
                    parsed,
                );
            }
            total += start.elapsed();
            left -= bursts;
            self.pos += bursts * burst_size();
        }
        total
    }
}

/// The conntrack and NAT stages alone: the pipeline's own stage functions
/// (`pipeline::ct::lookup`, `ct::commit`, `ct::close_denied`) on a burst's context as
/// the stages before them leave it — every packet parsed (untimed, by the runner) and
/// going on, routed to the other port (original direction: pod port to the uplink;
/// replies: uplink to the pod port), and for new connections the ingress ACL's
/// `reflect` verdict given. The packets the stages let through are counted forwarded.
struct CtPart {
    snap: Snapshot,
    ct: Conntrack,
    /// What the ingress ACL said of a first packet (the reflect rule).
    reflect: bool,
    scratch: Box<Scratch>,
    actions: [Action; pipeline::MAX_BURST],
    packets: u64,
}

impl CtPart {
    fn new(snap: Snapshot, ct: Conntrack, reflect: bool) -> CtPart {
        CtPart {
            snap,
            ct,
            reflect,
            scratch: Box::default(),
            actions: [Action::Drop(DropReason::Malformed); pipeline::MAX_BURST],
            packets: 0,
        }
    }

    /// One burst received on `port`, going out of the other port.
    #[inline(never)]
    fn ct_nat_burst(&mut self, port: u16, frames: &mut [Frame], parsed: &[Parsed]) {
        let n = frames.len();
        self.ct.now = 1_000 + self.packets / packets_per_ms();
        self.packets += n as u64;
        let out = if port == POD_PORT { UPLINK } else { POD_PORT };
        let mut frames = Slots(frames);
        let mut t = NoTrace;
        let Some(mut b) = Burst::new(
            &self.snap,
            port,
            &mut frames,
            &mut self.actions[..n],
            &mut self.scratch,
            Some(&mut self.ct),
            &mut t,
        ) else {
            unreachable!("the bench's ports exist");
        };
        // As l2 leaves the burst: every packet parsed, going on, its marks cleared; and
        // as the ACL and route stages will: the reflect verdict, the output port.
        let s = &mut *b.s;
        for (i, p) in parsed.iter().enumerate().take(b.n) {
            s.parsed[i] = *p;
            s.ok[i] = i as u16;
            s.ct[i] = CtMark::None;
            s.snat[i] = SnatHint::None;
            s.reflect[i] = self.reflect;
            s.out[i] = out;
        }
        b.n_ok = b.n;
        stage_ct_lookup(&mut b);
        let s = &mut *b.s;
        s.routed[..b.n_ok].copy_from_slice(&s.ok[..b.n_ok]);
        b.n_routed = b.n_ok;
        stage_ct_commit(&mut b);
        for &i in &b.s.routed[..b.n_routed] {
            b.actions[usize::from(i)] = Action::Forward { port: out };
        }
        stage_ct_close(&mut b);
    }
}

/// The production stages the conntrack-and-NAT cases time, each called out of line so
/// that `valgrind --tool=callgrind --toggle-collect='*stage_ct_*'` counts exactly them.
#[inline(never)]
fn stage_ct_lookup(b: &mut Burst<'_, Slots<'_>, NoTrace>) {
    ct::lookup(b);
}

#[inline(never)]
fn stage_ct_commit(b: &mut Burst<'_, Slots<'_>, NoTrace>) {
    ct::commit(b);
}

#[inline(never)]
fn stage_ct_close(b: &mut Burst<'_, Slots<'_>, NoTrace>) {
    ct::close_denied(b);
}

/// The timer: wall time, or with `FERRULE_BENCH_CPU_TIME=1` the thread's CPU time (on
/// a shared machine wall time also counts the time other processes had the CPU).
enum Clock {
    Wall(Instant),
    Cpu(Duration),
}

impl Clock {
    #[inline(always)]
    fn now() -> Clock {
        if cpu_time() {
            Clock::Cpu(thread_cpu_time())
        } else {
            Clock::Wall(Instant::now())
        }
    }

    #[inline(always)]
    fn elapsed(&self) -> Duration {
        match self {
            Clock::Wall(t) => t.elapsed(),
            Clock::Cpu(t) => thread_cpu_time().saturating_sub(*t),
        }
    }
}

fn cpu_time() -> bool {
    static CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CPU.get_or_init(|| std::env::var_os("FERRULE_BENCH_CPU_TIME").is_some())
}

/// Per-case samples (ns per packet) for the summary.
type Samples = RefCell<BTreeMap<String, Vec<f64>>>;

fn record(samples: &Samples, name: &str, iters: u64, t: Duration) {
    samples
        .borrow_mut()
        .entry(name.to_string())
        .or_default()
        .push(t.as_nanos() as f64 / (iters as f64 * burst_size() as f64));
}

/// The established cases' worker and streams.
struct Established {
    /// Worker 0, holding its `n` connections.
    w: Worker,
    /// The stream of established packets.
    on: Vec<Frame>,
    /// The same stream for the conntrack-off baseline (replies addressed to the pods).
    off: Vec<Frame>,
    /// Each packet's action in `on`: forwarded out of the other side, or handed off to
    /// the worker owning its connection.
    expect: Vec<Action>,
}

/// Sets up `n` masqueraded connections of worker 0 through the pipeline (SYN, SYN-ACK,
/// ACK) and returns the worker with the stream of established packets. With
/// [`workers`] `w` > 1, `w - 1` in `w` packets of the stream are other workers'
/// (connections worker 0 handed off at their SYN, and replies to SNAT ports it does not
/// hand out).
fn established(n: u32, stream_len: usize) -> Established {
    let max = n.next_power_of_two().max(262_144) * table_scale();
    let workers = workers();
    let mut w = Worker::new(snapshot(true), Some(conntrack(max)));
    let start = Instant::now();
    // SYNs: worker 0's connections (`own`) learn their SNAT port from the masqueraded
    // frame; the others' (`foreign`, with their owner) are handed off.
    let (mut own, mut nat_ports, mut foreign) = (Vec::new(), Vec::new(), Vec::new());
    let mut frames: Vec<Frame> = Vec::with_capacity(burst_size());
    let mut next = 0u32;
    while own.len() < n as usize {
        frames.clear();
        let first = next;
        // (No more SYNs than connections still wanted: the table holds exactly `n`.)
        for _ in 0..burst_size().min(n as usize - own.len()) {
            let (pod, sport, server, dport) = conn(next);
            frames.push(tcp_frame(
                (POD_MAC, GW_MAC),
                pod,
                server,
                sport,
                dport,
                CISN,
                0,
                SYN,
            ));
            next += 1;
        }
        w.burst(POD_PORT, &mut frames);
        for (k, f) in frames.iter().enumerate() {
            let j = first + k as u32;
            match w.actions[k] {
                Action::Forward { port: UPLINK } => {
                    assert_eq!(f[26..30], NODE.octets());
                    assert!(checksums_ok(f), "SNAT keeps checksums valid");
                    own.push(j);
                    nat_ports.push(u16::from_be_bytes([f[34], f[35]]));
                }
                Action::Handoff { worker } if workers > 1 && worker != 0 => {
                    foreign.push((j, worker));
                }
                a => panic!("SYN of connection {j}: {a:?}"),
            }
        }
    }
    let synack = |k: usize| {
        let (_, _, server, dport) = conn(own[k]);
        tcp_frame(
            (ROUTER_MAC, UPLINK_MAC),
            server,
            NODE,
            dport,
            nat_ports[k],
            SISN,
            CISN + 1,
            SYN | ACK,
        )
    };
    let ack = |j: u32| {
        let (pod, sport, server, dport) = conn(j);
        tcp_frame(
            (POD_MAC, GW_MAC),
            pod,
            server,
            sport,
            dport,
            CISN + 1,
            SISN + 1,
            ACK,
        )
    };
    let mut handshake: Vec<Frame> = (0..own.len()).map(synack).collect();
    w.run_checked(&mut handshake, |_| UPLINK, |_| POD_PORT);
    let mut handshake: Vec<Frame> = own.iter().map(|&j| ack(j)).collect();
    w.run_checked(&mut handshake, |_| POD_PORT, |_| UPLINK);
    let ct = w.ct.as_ref().expect("ct");
    assert_eq!(ct.table.len(), n as usize);
    println!(
        "conntrack_path: {n} connections of worker 0 of {workers} set up through the \
         pipeline in {:.2?}; table of {max}: {:.1} MiB, {BYTES_PER_CONNECTION} bytes per \
         connection",
        start.elapsed(),
        ct.table.memory_bytes() as f64 / f64::from(1 << 20),
    );

    // The stream: even bursts original-direction ACKs, odd bursts reply ACKs, each of
    // a random connection (with several workers, of a random worker's).
    let mut rng = StdRng::seed_from_u64(SEED ^ u64::from(n));
    let mut on = Vec::with_capacity(stream_len);
    let mut off = Vec::with_capacity(stream_len);
    let mut expect = Vec::with_capacity(stream_len);
    for k in 0..stream_len {
        let original = (k / burst_size()).is_multiple_of(2);
        // (No draw for one worker: its stream is the one the bench always had.)
        let theirs = workers > 1 && rng.gen_range(0..workers) != 0;
        let i = rng.gen_range(0..n as usize);
        let (pod, sport, server, dport) = conn(own[i]);
        let reply = |dst, port| {
            tcp_frame(
                (ROUTER_MAC, UPLINK_MAC),
                server,
                dst,
                dport,
                port,
                SISN + 1,
                CISN + 1,
                ACK,
            )
        };
        match (original, theirs) {
            (true, false) => {
                let f = ack(own[i]);
                on.push(f);
                off.push(f);
                expect.push(Action::Forward { port: UPLINK });
            }
            (false, false) => {
                on.push(reply(NODE, nat_ports[i]));
                off.push(reply(pod, sport));
                expect.push(Action::Forward { port: POD_PORT });
            }
            (true, true) => {
                let (j, worker) = foreign[rng.gen_range(0..foreign.len())];
                let f = ack(j);
                on.push(f);
                off.push(f);
                expect.push(Action::Handoff { worker });
            }
            (false, true) => {
                // A reply to a SNAT port another worker hands out.
                let port = nat_ports[i].wrapping_add(rng.gen_range(1..workers));
                on.push(reply(NODE, port));
                off.push(reply(pod, sport));
                expect.push(Action::Handoff {
                    worker: port % workers,
                });
            }
        }
    }
    // Denied packets in place of `denied()` random packets of each original burst.
    let k = denied();
    if k > 0 {
        for (b, at) in (0..stream_len).step_by(burst_size()).enumerate() {
            if !b.is_multiple_of(2) {
                continue;
            }
            let end = (at + burst_size()).min(stream_len);
            for i in rand::seq::index::sample(&mut rng, end - at, k.min(end - at)) {
                let (pod, sport, _, _) = conn(own[rng.gen_range(0..n as usize)]);
                let server = Ipv4Addr::from(u32::from(DENIED_NET) | rng.gen_range(1..255));
                let f = tcp_frame((POD_MAC, GW_MAC), pod, server, sport, 443, CISN, 0, SYN);
                on[at + i] = f;
                off[at + i] = f;
                expect[at + i] = Action::Drop(DropReason::AclDeny);
            }
        }
    }
    Established { w, on, off, expect }
}

/// `FERRULE_BENCH_COUNT=<bursts>`: run each case once for that many bursts instead of
/// under criterion (for `valgrind --tool=callgrind`: the per-burst functions are
/// `Worker::burst` and the `stage_ct_*` functions).
fn count() -> Option<u64> {
    std::env::var("FERRULE_BENCH_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// Count mode's run of a case: collect only in here
/// (`valgrind --tool=callgrind --toggle-collect='*counted*'`), then read the inclusive
/// cost of the per-burst functions.
#[inline(never)]
fn counted(f: &mut dyn FnMut(u64) -> Duration, bursts: u64) -> Duration {
    f(bursts)
}

/// Runs one case, `f(bursts)` returning the time they took: under criterion, or once
/// in count mode.
fn case(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    samples: &Samples,
    group: &str,
    id: &str,
    mut f: impl FnMut(u64) -> Duration,
) {
    let key = format!("{group}/{id}");
    if let Some(n) = count() {
        let t = counted(&mut f, n);
        record(samples, &key, n, t);
        return;
    }
    g.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let t = f(iters);
            record(samples, &key, iters, t);
            t
        })
    });
}

fn bench_established(c: &mut Criterion, n: u32, samples: &Samples, baseline: bool) {
    // 1M frames for the large table (64 MiB: connections far apart), 64k for the small.
    let stream_len = if n > 100_000 { 1 << 20 } else { 1 << 16 };
    let Established {
        mut w,
        on,
        off,
        expect,
    } = established(n, stream_len);
    // Outside the timings: a full pass, every packet forwarded the right way (or handed
    // off, untouched), and the rewrites right (masqueraded to the node IP, a reply
    // translated back to its pod, checksums valid).
    let mut check = on[..ARENA].to_vec();
    for (b, burst) in check.chunks_mut(burst_size()).enumerate() {
        w.burst(alternating(b), burst);
        let at = b * burst_size();
        assert_eq!(
            w.actions[..burst.len()],
            expect[at..at + burst.len()],
            "burst {b}"
        );
    }
    for (i, f) in check.iter().enumerate() {
        assert!(checksums_ok(f), "packet {i}");
        match expect[i] {
            Action::Forward { port: UPLINK } => assert_eq!(f[26..30], NODE.octets()),
            Action::Forward { .. } => assert_eq!(f[30..34], conn_pod_of(&off[i]).octets()),
            Action::Handoff { .. } => assert_eq!(*f, on[i], "packet {i}: handed off as received"),
            _ => {}
        }
    }

    let workers = workers();
    let mut name = format!("conntrack_path_established_{}", label(n));
    if workers > 1 {
        name += &format!("_of_{workers}");
    }
    if denied() > 0 {
        name += &format!("_denied_{}", denied());
    }
    let mut g = c.benchmark_group(&name);
    g.throughput(Throughput::Elements(burst_size() as u64));
    let mut runner = Runner::new(on.clone());
    case(&mut g, samples, &name, "ct_snat", |iters| {
        runner.run(iters, |k, burst, _| {
            w.burst(alternating(k), burst);
            black_box(&w.actions);
        })
    });
    let stats = *w.ct.as_ref().expect("ct").table.stats();
    assert_eq!(stats.invalid, 0, "{stats:?}");
    drop(runner);

    // The conntrack and NAT stages alone, on the same table and stream (one worker, no
    // denied packets: they are checked to forward every packet).
    if workers == 1 && denied() == 0 {
        let mut part = CtPart::new(w.snap.clone(), w.ct.take().expect("ct"), false);
        part.packets = w.packets;
        drop(w);
        let mut runner = Runner::parsed(on);
        {
            let mut check = runner.arena.clone();
            let mut parsed = runner.parsed.clone();
            for (b, (f, p)) in check
                .chunks_mut(burst_size())
                .zip(parsed.chunks_mut(burst_size()))
                .enumerate()
            {
                part.ct_nat_burst(alternating(b), f, p);
                for a in &part.actions[..f.len()] {
                    assert_eq!(
                        *a,
                        Action::Forward {
                            port: other_side(b)
                        }
                    );
                }
            }
            assert!(check.iter().all(checksums_ok));
            assert_eq!(check[0][26..30], NODE.octets());
            assert_eq!(
                check[burst_size()][30..34],
                conn_pod_of(&off[burst_size()]).octets()
            );
        }
        case(&mut g, samples, &name, "ct_nat_only", |iters| {
            runner.run(iters, |k, burst, parsed| {
                part.ct_nat_burst(alternating(k), burst, parsed);
                black_box(&part.actions);
            })
        });
        assert_eq!(part.ct.table.stats().invalid, 0);
        drop(runner);
        drop(part);
    }

    if baseline {
        let mut w = Worker::new(snapshot(false), None);
        let mut check = off[..ARENA].to_vec();
        w.run_checked(&mut check, alternating, other_side);
        let mut runner = Runner::new(off);
        case(&mut g, samples, &name, "ct_off", |iters| {
            runner.run(iters, |k, burst, _| {
                w.burst(alternating(k), burst);
                black_box(&w.actions);
            })
        });
    }
    g.finish();
}

/// The destination of a baseline reply frame (a pod).
fn conn_pod_of(f: &Frame) -> Ipv4Addr {
    Ipv4Addr::new(f[30], f[31], f[32], f[33])
}

fn label(n: u32) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// What the new-connection cases run: its connection table (flushed between runs)
/// and one burst of SYNs from the pod port.
trait NewConns {
    fn table(&mut self) -> &mut Conntrack;
    fn syn_burst(&mut self, frames: &mut [Frame], parsed: &[Parsed]);
}

impl NewConns for Worker {
    fn table(&mut self) -> &mut Conntrack {
        self.ct.as_mut().expect("ct")
    }
    fn syn_burst(&mut self, frames: &mut [Frame], _: &[Parsed]) {
        self.burst(POD_PORT, frames);
        black_box(&self.actions);
    }
}

impl NewConns for CtPart {
    fn table(&mut self) -> &mut Conntrack {
        &mut self.ct
    }
    fn syn_burst(&mut self, frames: &mut [Frame], parsed: &[Parsed]) {
        self.ct_nat_burst(POD_PORT, frames, parsed);
        black_box(&self.actions);
    }
}

/// Times `iters` bursts of new connections, flushing the table (untimed) whenever the
/// stream starts over (its tuples are new again).
fn run_new(
    runner: &mut Runner,
    w: &mut impl NewConns,
    inserted: &mut usize,
    iters: u64,
) -> Duration {
    let len = runner.stream.len();
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let until_wrap = ((len - *inserted) / burst_size()) as u64;
        if until_wrap == 0 {
            let ct = w.table();
            assert_eq!(ct.table.len(), len);
            ct.table.remove_matching(|_, _| true);
            *inserted = 0;
            continue;
        }
        let now = left.min(until_wrap);
        total += runner.run(now, |_, f, p| w.syn_burst(f, p));
        *inserted += now as usize * burst_size();
        left -= now;
    }
    total
}

fn bench_new(c: &mut Criterion, samples: &Samples, baseline: bool) {
    let syns: Vec<Frame> = (0..NEW_CONNS)
        .map(|j| {
            let (pod, sport, server, dport) = conn(j);
            tcp_frame((POD_MAC, GW_MAC), pod, server, sport, dport, CISN, 0, SYN)
        })
        .collect();
    let name = "conntrack_path_new_connections".to_string();
    let mut g = c.benchmark_group(&name);
    g.throughput(Throughput::Elements(burst_size() as u64));
    let mut w = Worker::new(snapshot(true), Some(conntrack(NEW_TABLE)));
    {
        let mut check = syns[..ARENA].to_vec();
        w.run_checked(&mut check, |_| POD_PORT, |_| UPLINK);
        assert!(check.iter().all(checksums_ok));
        let ct = w.table();
        assert_eq!(ct.table.len(), ARENA);
        ct.table.remove_matching(|_, _| true);
    }
    let mut runner = Runner::new(syns.clone());
    let mut inserted = 0usize;
    case(&mut g, samples, &name, "ct_snat", |iters| {
        run_new(&mut runner, &mut w, &mut inserted, iters)
    });
    let stats = *w.table().table.stats();
    assert_eq!(
        stats.clashes + stats.table_full + stats.invalid,
        0,
        "{stats:?}"
    );
    drop(runner);
    drop(w);

    // The conntrack and NAT stages alone (the ingress ACL's reflect verdict given).
    let mut part = CtPart::new(snapshot(true), conntrack(NEW_TABLE), true);
    let mut runner = Runner::parsed(syns.clone());
    {
        let mut check = runner.arena.clone();
        let mut parsed = runner.parsed.clone();
        for (f, p) in check
            .chunks_mut(burst_size())
            .zip(parsed.chunks_mut(burst_size()))
        {
            part.ct_nat_burst(POD_PORT, f, p);
            for a in &part.actions[..f.len()] {
                assert_eq!(*a, Action::Forward { port: UPLINK });
            }
        }
        assert!(check.iter().all(checksums_ok));
        assert_eq!(part.ct.table.len(), ARENA);
        part.ct.table.remove_matching(|_, _| true);
    }
    let mut inserted = 0usize;
    case(&mut g, samples, &name, "ct_nat_only", |iters| {
        run_new(&mut runner, &mut part, &mut inserted, iters)
    });
    let stats = *part.ct.table.stats();
    assert_eq!(
        stats.clashes + stats.table_full + stats.invalid,
        0,
        "{stats:?}"
    );
    drop(runner);
    drop(part);

    if baseline {
        let mut w = Worker::new(snapshot(false), None);
        let mut runner = Runner::new(syns);
        case(&mut g, samples, &name, "ct_off", |iters| {
            runner.run(iters, |_, burst, _| {
                w.burst(POD_PORT, burst);
                black_box(&w.actions);
            })
        });
    }
    g.finish();
}

/// The `q`-quantile of `v` (0.5: the median).
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

fn main() {
    // `cargo test --all-targets` runs benches without --bench: skip the slow set-up.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "conntrack_path: a benchmark; run it with \
             `cargo bench -p ferrule-perf --bench conntrack_path`"
        );
        return;
    }
    let conns: Vec<u32> = std::env::var("FERRULE_BENCH_CONNS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 1_000_000]);
    let baseline = std::env::var_os("FERRULE_BENCH_NO_BASELINE").is_none();
    println!(
        "conntrack_path: table memory on {}, timed with {}",
        if huge_pages() {
            "transparent huge pages (madvise)"
        } else {
            "4 KiB pages"
        },
        if cpu_time() {
            "thread CPU time"
        } else {
            "wall time"
        }
    );
    let samples = Samples::default();
    let mut c = Criterion::default().configure_from_args();
    for &n in &conns {
        bench_established(&mut c, n, &samples, baseline);
    }
    if std::env::var_os("FERRULE_BENCH_NO_NEW").is_none() && workers() == 1 {
        bench_new(&mut c, &samples, baseline);
    }
    c.final_summary();

    println!(
        "\nconntrack_path summary (median of criterion's samples, per packet; p10: their \
         10th percentile, the run's quieter moments on a shared machine):"
    );
    let samples = samples.into_inner();
    for (name, v) in &samples {
        let Some((group, id)) = name.rsplit_once('/') else {
            continue;
        };
        let ns = median(v);
        let off = samples.get(&format!("{group}/ct_off")).map(|o| median(o));
        print!(
            "  {group}/{id}: {ns:.1} ns, {:.2} Mpps (p10 {:.1} ns)",
            1e3 / ns,
            quantile(v, 0.1)
        );
        match off {
            Some(o) if id == "ct_snat" => println!(" | ct on / ct off = {:.2}", o / ns),
            _ if id == "ct_nat_only" => println!(" (the conntrack and NAT stages alone)"),
            _ => println!(),
        }
    }
}
