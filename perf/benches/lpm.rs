//! Criterion benchmark of the LPM route tables: `Lpm4` with a BGP-sized table (1M routes)
//! side by side with DPDK's `rte_lpm` on the same routes and addresses in the same run,
//! and `Lpm6` with 100k routes. Build time and memory are printed before the timings.
//! Both are timed as workers read them, a clone (every update publishes one: a clone puts
//! the dense parts of the table on transparent huge pages), and as built by inserts (on
//! 4 KiB pages with THP in `madvise` mode). `FERRULE_BENCH_ROUTES=N` sets the IPv4
//! table's size (1M by default).
//!
//! `cargo bench -p ferrule-perf --bench lpm -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, Criterion, Throughput};
use ferrule_dataplane::dpdk::Eal;
use ferrule_dataplane::lpm::{Lpm4, Lpm6, NO_ROUTE};
use ferrule_perf::routes::{v4_addrs, v4_route_count, v4_routes, Route4};
use ferrule_perf::rte_lpm::{RteLpm, LOOKUP_SUCCESS};
use rand::prelude::*;
use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

const ROUTES4: usize = 1_000_000;
const ROUTES6: usize = 100_000;
/// Addresses per lookup batch (one burst).
const BATCH: usize = 256;
/// Batches cycled through, 1M addresses in all: they touch far more tbl24 cache lines
/// than the caches hold, as a real mix of flows does.
const BATCHES: usize = 4096;
const SEED: u64 = 0x5eed_1a9e;

type Route6 = (u128, u8, u32);

fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// `ROUTES6` routes clustered like real allocations: /48s numbered from the start of
/// 4,000 /32s under 2000::/3, /49-/63 and /64 subnets inside those /48s, /128 hosts
/// inside the /64s.
fn v6_routes(rng: &mut StdRng) -> Vec<Route6> {
    let allocs: Vec<u128> = (0..4000)
        .map(|_| (0x2000_0000u128 | rng.gen_range(0..0x2000_0000u128)) << 96)
        .collect();
    let mut seen = HashSet::with_capacity(ROUTES6);
    let mut routes: Vec<Route6> = Vec::with_capacity(ROUTES6);
    let mut slash48s = Vec::new();
    let mut slash64s = Vec::new();
    while routes.len() < ROUTES6 {
        let kind = rng.gen_range(0..100);
        let route = if kind < 50 || slash48s.is_empty() {
            let p = allocs[rng.gen_range(0..allocs.len())] | (rng.gen_range(0..1024u128) << 80);
            slash48s.push(p);
            (p, 48)
        } else if kind < 60 {
            let len = rng.gen_range(49..=63);
            let p = slash48s[rng.gen_range(0..slash48s.len())] | (rng.gen::<u128>() >> 48);
            (p & mask128(len), len)
        } else if kind < 85 || slash64s.is_empty() {
            let p = slash48s[rng.gen_range(0..slash48s.len())] | (rng.gen_range(0..256u128) << 64);
            slash64s.push(p);
            (p, 64)
        } else {
            let p = slash64s[rng.gen_range(0..slash64s.len())] | u128::from(rng.gen::<u64>());
            (p, 128)
        };
        if seen.insert(route) {
            routes.push((route.0, route.1, routes.len() as u32));
        }
    }
    routes
}

fn v6_addrs(rng: &mut StdRng, routes: &[Route6]) -> Vec<u128> {
    (0..BATCH * BATCHES)
        .map(|_| {
            if rng.gen() {
                let (p, len, _) = routes[rng.gen_range(0..routes.len())];
                p | (rng.gen::<u128>() & !mask128(len))
            } else {
                (0x2u128 << 124) | (rng.gen::<u128>() >> 3)
            }
        })
        .collect()
}

/// DPDK's `rte_lpm` filled with the same routes.
fn rte_lpm(routes: &[Route4]) -> RteLpm {
    let mut lpm = RteLpm::new("ferrule_bench_lpm", 1 << 21, 1 << 16).expect("rte_lpm_create");
    for &(p, len, nh) in routes {
        lpm.add(p, len, nh)
            .unwrap_or_else(|e| panic!("rte_lpm_add {}/{len}: {e}", Ipv4Addr::from(p)));
    }
    lpm
}

/// The next hop `rte_lpm_lookup_bulk` reported, in `Lpm4`'s terms.
fn rte_result(raw: u32) -> u32 {
    if raw & LOOKUP_SUCCESS != 0 {
        raw & 0x00FF_FFFF
    } else {
        NO_ROUTE
    }
}

/// A `kB` field of this process's `/proc/self/smaps_rollup`, in bytes.
fn memory_field(name: &str) -> usize {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").expect("smaps_rollup");
    let kib: usize = rollup
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("smaps_rollup field");
    kib << 10
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn bench_v4(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(SEED);
    let n_routes = v4_route_count(ROUTES4);
    let routes = v4_routes(&mut rng, n_routes);
    let addrs = v4_addrs(&mut rng, &routes, BATCH * BATCHES, 0.5);

    let rss_start = memory_field("Rss:");
    let start = Instant::now();
    let mut lpm = Lpm4::new();
    for &(p, len, nh) in &routes {
        lpm.insert(Ipv4Addr::from(p), len, nh).expect("route fits");
    }
    let build = start.elapsed();
    let (rss_built, huge_built) = (memory_field("Rss:"), memory_field("AnonHugePages:"));
    let start = Instant::now();
    let published = lpm.clone();
    let clone = start.elapsed();
    let (rss_cloned, huge_cloned) = (memory_field("Rss:"), memory_field("AnonHugePages:"));
    let start = Instant::now();
    let rte = rte_lpm(&routes);
    let rte_build = start.elapsed();
    println!(
        "lpm4: {} routes, build {:.2?} (rte_lpm_add: {:.2?}), clone {:.2?}, \
         memory_bytes {:.1} MiB, {} tbl8 groups; resident: built {:.1} MiB, \
         clone {:.1} MiB ({:.1} MiB of it on huge pages)",
        lpm.len(),
        build,
        rte_build,
        clone,
        mib(lpm.memory_bytes()),
        lpm.tbl8_groups(),
        mib(rss_built - rss_start),
        mib(rss_cloned - rss_built),
        mib(huge_cloned.saturating_sub(huge_built)),
    );

    // Outside the timings: both tables agree on every benchmark address.
    let mut ours = vec![0; addrs.len()];
    let mut theirs = vec![0; addrs.len()];
    lpm.lookup_batch(&addrs, &mut ours);
    rte.lookup_bulk(&addrs, &mut theirs);
    let mut hits = 0;
    for ((&a, &o), &t) in addrs.iter().zip(&ours).zip(&theirs) {
        assert_eq!(
            o,
            rte_result(t),
            "Lpm4 and rte_lpm differ on {}",
            Ipv4Addr::from(a)
        );
        assert_eq!(o, lpm.lookup_u32(a));
        assert_eq!(o, published.lookup_u32(a));
        hits += usize::from(o != NO_ROUTE);
    }
    println!(
        "lpm4: Lpm4 == rte_lpm on all {} addresses ({:.1}% hits)",
        addrs.len(),
        100.0 * hits as f64 / addrs.len() as f64
    );

    let batches: Vec<&[u32]> = addrs.chunks(BATCH).collect();
    let size = match n_routes {
        n if n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    };
    let mut g = c.benchmark_group(format!("lpm4_{size}_routes"));
    g.throughput(Throughput::Elements(BATCH as u64));
    let mut out = [0u32; BATCH];
    let mut k = 0;
    g.bench_function("ferrule_lookup_batch", |b| {
        b.iter(|| {
            k = (k + 1) % BATCHES;
            published.lookup_batch(black_box(batches[k]), &mut out);
            black_box(&out);
        })
    });
    g.bench_function("ferrule_lookup_batch_as_built", |b| {
        b.iter(|| {
            k = (k + 1) % BATCHES;
            lpm.lookup_batch(black_box(batches[k]), &mut out);
            black_box(&out);
        })
    });
    g.bench_function("ferrule_lookup_u32", |b| {
        b.iter(|| {
            k = (k + 1) % BATCHES;
            for (&a, o) in black_box(batches[k]).iter().zip(out.iter_mut()) {
                *o = published.lookup_u32(a);
            }
            black_box(&out);
        })
    });
    g.bench_function("rte_lpm_lookup_bulk", |b| {
        b.iter(|| {
            k = (k + 1) % BATCHES;
            rte.lookup_bulk(black_box(batches[k]), &mut out);
            black_box(&out);
        })
    });
    g.bench_function("rte_lpm_lookup", |b| {
        b.iter(|| {
            k = (k + 1) % BATCHES;
            for (&a, o) in black_box(batches[k]).iter().zip(out.iter_mut()) {
                *o = rte.lookup(a).unwrap_or(NO_ROUTE);
            }
            black_box(&out);
        })
    });
    g.finish();
}

fn bench_v6(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(SEED ^ 6);
    let routes = v6_routes(&mut rng);
    let addrs = v6_addrs(&mut rng, &routes);
    let start = Instant::now();
    let mut lpm = Lpm6::new();
    for &(p, len, nh) in &routes {
        lpm.insert(Ipv6Addr::from(p), len, nh).expect("route fits");
    }
    let build = start.elapsed();
    let published = lpm.clone();
    let mut out = vec![0; addrs.len()];
    lpm.lookup_batch(&addrs, &mut out);
    let hits = out.iter().filter(|&&nh| nh != NO_ROUTE).count();
    assert!(addrs
        .iter()
        .zip(&out)
        .all(|(&a, &o)| lpm.lookup_u128(a) == o && published.lookup_u128(a) == o));
    println!(
        "lpm6: {} routes, build {:.2?}, memory_bytes {:.1} MiB, {} groups, {:.1}% hits",
        lpm.len(),
        build,
        mib(lpm.memory_bytes()),
        lpm.groups(),
        100.0 * hits as f64 / addrs.len() as f64
    );

    let batches: Vec<&[u128]> = addrs.chunks(BATCH).collect();
    let mut g = c.benchmark_group("lpm6_100k_routes");
    g.throughput(Throughput::Elements(BATCH as u64));
    let mut out = [0u32; BATCH];
    let mut k = 0;
    g.bench_function("ferrule_lookup_batch", |b| {
        b.iter(|| {
            k = (k + 1) % BATCHES;
            published.lookup_batch(black_box(batches[k]), &mut out);
            black_box(&out);
        })
    });
    g.bench_function("ferrule_lookup_batch_as_built", |b| {
        b.iter(|| {
            k = (k + 1) % BATCHES;
            lpm.lookup_batch(black_box(batches[k]), &mut out);
            black_box(&out);
        })
    });
    g.bench_function("ferrule_lookup_u128", |b| {
        b.iter(|| {
            k = (k + 1) % BATCHES;
            for (&a, o) in black_box(batches[k]).iter().zip(out.iter_mut()) {
                *o = published.lookup_u128(a);
            }
            black_box(&out);
        })
    });
    g.finish();
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` does not. Building the
    // rte_lpm table alone takes minutes, so this benchmark never runs as a test.
    if !std::env::args().any(|a| a == "--bench") {
        println!("lpm: a benchmark; run it with `cargo bench -p ferrule-perf --bench lpm`");
        return;
    }
    let args = vec![
        "ferrule-bench-lpm".to_string(),
        // DPDK 22.11 rejects --in-memory with --no-huge (which implies --legacy-mem);
        // --no-shconf likewise keeps no files in /run/dpdk, and --no-telemetry no socket
        // (whose file outlived the EAL and kept its runtime directory from being removed).
        "--no-huge".into(),
        "--no-shconf".into(),
        "--no-telemetry".into(),
        "--no-pci".into(),
        "--file-prefix".into(),
        format!("ferrule-bench-lpm-{}", std::process::id()),
        "-l".into(),
        "0".into(),
        "--log-level".into(),
        "error".into(),
        // rte_lpm needs ~150 MiB (tbl24, 2^16 tbl8s, 2^21 rules); without hugepages the
        // EAL reserves only 64 MiB unless told.
        "-m".into(),
        "512".into(),
    ];
    let eal = Eal::init_args(args).expect("EAL init");
    let mut c = Criterion::default().configure_from_args();
    bench_v4(&mut c);
    bench_v6(&mut c);
    c.final_summary();
    drop(eal);
}
