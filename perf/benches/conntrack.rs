//! Criterion benchmark of the connection table alone (no packet I/O, no parsing, no
//! ACL or NAT rewrite): the established path (lookup + track of a pure ACK, both
//! directions, SNATed TCP connections) with 1k and 1M connections in the table, one
//! lookup at a time and by burst, and new connections (lookup miss + insert of a SNATed
//! SYN) into a table filling up to 1M, and at a steady 1M with one removal per insert.
//!
//! `cargo bench -p ferrule-perf --bench conntrack -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, Criterion, Throughput};
use ferrule_dataplane::conntrack::{
    tcp_flags as tf, ConnId, ConnTable, CtConfig, Dir, L4Info, Millis, Nat, TrackVerdict,
    BYTES_PER_CONNECTION,
};
use ferrule_dataplane::flow::FlowKey;
use rand::prelude::*;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const BURST: usize = 256;
/// Packets in the established-path stream (cycled through).
const STREAM: usize = 1 << 20;
const SEED: u64 = 0x5eed_c0de;
const NODE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const CISN: u32 = 1000;
const SISN: u32 = 500_000;
/// The fake clock advances as if packets arrived at 30 Mpps.
const PACKETS_PER_MS: u64 = 30_000;

/// Connection `i`: pod 10.x.y.z → one of 200 servers on 443, masqueraded to the node
/// IP on a port that is unique per server.
fn conn(i: u32) -> (FlowKey, Nat) {
    let pod = Ipv4Addr::from(0x0a00_0000 | (i & 0x00ff_ffff));
    let server = Ipv4Addr::new(198, 18, 0, (i % 200 + 1) as u8);
    let sport = 1024 + (i.wrapping_mul(7) % 60_000) as u16;
    let key = FlowKey::v4(1, 6, pod, server, sport, 443);
    let nat = Nat {
        addr: NODE,
        port: 1024 + ((i / 200) % 64_000) as u16,
    };
    (key, nat)
}

fn seg(flags: u8, seq: u32, ack: u32) -> L4Info {
    L4Info {
        tcp_flags: flags,
        seq,
        ack,
        window: 65_535,
        wscale: None,
        payload_len: 0,
    }
}

/// A table of `max` entries holding `n` established connections; returns it with a
/// stream of (key, direction) packets over random connections.
fn established(n: u32, max: u32, rng: &mut StdRng) -> (ConnTable, Vec<(FlowKey, Dir)>) {
    let cfg = CtConfig {
        max_entries: max,
        max_per_zone: max,
        ..CtConfig::default()
    };
    let mut t = ConnTable::with_seed(&cfg, SEED);
    let mut replies = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for i in 0..n {
        let (key, nat) = conn(i);
        let id = t
            .insert(&key, &seg(tf::SYN, CISN, 0), 60, Some(nat), 1, 0)
            .expect("room");
        assert_eq!(
            t.track(
                id,
                Dir::Reply,
                &seg(tf::SYN | tf::ACK, SISN, CISN + 1),
                60,
                0
            ),
            TrackVerdict::Accept
        );
        assert_eq!(
            t.track(id, Dir::Original, &seg(tf::ACK, CISN + 1, SISN + 1), 54, 0),
            TrackVerdict::Accept
        );
        replies.push(t.get(id).expect("live").reply_key());
    }
    println!(
        "conntrack: {n} established connections set up in {:.2?} (3 packets each); \
         table of {max}: {:.1} MiB, {BYTES_PER_CONNECTION} bytes per connection",
        start.elapsed(),
        t.memory_bytes() as f64 / (1 << 20) as f64
    );
    let stream = (0..STREAM)
        .map(|_| {
            let i = rng.gen_range(0..n);
            if rng.gen() {
                (conn(i).0, Dir::Original)
            } else {
                (replies[i as usize], Dir::Reply)
            }
        })
        .collect();
    (t, stream)
}

fn l4_of(dir: Dir) -> L4Info {
    match dir {
        Dir::Original => seg(tf::ACK, CISN + 1, SISN + 1),
        Dir::Reply => seg(tf::ACK, SISN + 1, CISN + 1),
    }
}

fn bench_established(c: &mut Criterion, n: u32, max: u32, name: &str) {
    let mut rng = StdRng::seed_from_u64(SEED ^ u64::from(n));
    let (mut t, stream) = established(n, max, &mut rng);
    let keys: Vec<FlowKey> = stream.iter().map(|s| s.0).collect();
    let l4 = [l4_of(Dir::Original), l4_of(Dir::Reply)];
    // Outside the timings: every packet finds its connection in its direction.
    for (k, d) in stream.iter().take(100_000) {
        assert_eq!(t.lookup(k).map(|r| r.1), Some(*d));
    }
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(BURST as u64));
    let bursts = STREAM / BURST;
    let mut k = 0;
    let mut packets: u64 = 0;
    g.bench_function("lookup_track", |b| {
        b.iter(|| {
            k = (k + 1) % bursts;
            let now: Millis = 1000 + packets / PACKETS_PER_MS;
            packets += BURST as u64;
            let mut accepted = 0u32;
            for key in black_box(&keys[k * BURST..(k + 1) * BURST]) {
                if let Some((id, dir)) = t.lookup(key) {
                    accepted += u32::from(
                        t.track(id, dir, &l4[dir as usize], 64, now) == TrackVerdict::Accept,
                    );
                }
            }
            assert_eq!(accepted, BURST as u32);
        })
    });
    let mut out = [None; BURST];
    g.bench_function("lookup_burst_track", |b| {
        b.iter(|| {
            k = (k + 1) % bursts;
            let now: Millis = 1000 + packets / PACKETS_PER_MS;
            packets += BURST as u64;
            t.lookup_burst(black_box(&keys[k * BURST..(k + 1) * BURST]), &mut out);
            let mut accepted = 0u32;
            for (id, dir) in out.iter().flatten() {
                accepted += u32::from(
                    t.track(*id, *dir, &l4[*dir as usize], 64, now) == TrackVerdict::Accept,
                );
            }
            assert_eq!(accepted, BURST as u32);
        })
    });
    g.finish();
}

fn bench_new(c: &mut Criterion) {
    const MAX: u32 = 1 << 20;
    const FILL: u32 = 1_000_000;
    let cfg = CtConfig {
        max_entries: MAX,
        max_per_zone: MAX,
        ..CtConfig::default()
    };
    let keys: Vec<(FlowKey, Nat)> = (0..FILL).map(conn).collect();
    let syn = seg(tf::SYN, CISN, 0);
    let mut g = c.benchmark_group("conntrack_new");
    g.throughput(Throughput::Elements(1));

    // Into a table filling from empty to 1M (cleared, untimed, when it gets there).
    let mut t = ConnTable::with_seed(&cfg, SEED);
    let mut next = 0usize;
    g.bench_function("miss_insert_fill_to_1M", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                if next == keys.len() {
                    t.remove_matching(|_, _| true);
                    next = 0;
                }
                let n = left.min((keys.len() - next) as u64) as usize;
                let start = Instant::now();
                for (key, nat) in &keys[next..next + n] {
                    if t.lookup(black_box(key)).is_none() {
                        black_box(t.insert(key, &syn, 60, Some(*nat), 1, 0).ok());
                    }
                }
                total += start.elapsed();
                next += n;
                left -= n as u64;
            }
            total
        })
    });
    drop(t);

    // At a steady 1M: each new connection also removes the oldest one.
    let mut t = ConnTable::with_seed(&cfg, SEED);
    let mut ring: Vec<ConnId> = keys
        .iter()
        .map(|(key, nat)| t.insert(key, &syn, 60, Some(*nat), 1, 0).expect("room"))
        .collect();
    let fresh: Vec<(FlowKey, Nat)> = (FILL..2 * FILL).map(conn).collect();
    let mut pos = 0usize;
    let mut use_fresh = true;
    g.bench_function("miss_insert_remove_at_1M", |b| {
        b.iter(|| {
            let slot = pos;
            let (key, nat) = if use_fresh { &fresh[slot] } else { &keys[slot] };
            t.remove(ring[slot]);
            debug_assert!(t.lookup(key).is_none());
            if t.lookup(black_box(key)).is_none() {
                ring[slot] = t.insert(key, &syn, 60, Some(*nat), 1, 0).expect("room");
            }
            pos += 1;
            if pos == ring.len() {
                pos = 0;
                use_fresh = !use_fresh;
            }
        })
    });
    g.finish();
}

fn main() {
    // `cargo test --all-targets` runs benches without --bench: skip the slow set-up.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "conntrack: a benchmark; run it with `cargo bench -p ferrule-perf --bench conntrack`"
        );
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench_established(&mut c, 1_000, 262_144, "conntrack_established_1k");
    bench_established(&mut c, 1_000_000, 1 << 20, "conntrack_established_1M");
    bench_new(&mut c);
    c.final_summary();
}
