//! Criterion benchmark of the LPM route tables: `Lpm4` with a BGP-sized table (1M routes)
//! side by side with DPDK's `rte_lpm` on the same routes and addresses in the same run,
//! and `Lpm6` with 100k routes. Build time and memory are printed before the timings.
//!
//! `cargo bench -p ferrule-perf --bench lpm -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, Criterion, Throughput};
use ferrule_dataplane::dpdk::Eal;
use ferrule_dataplane::lpm::{Lpm4, Lpm6, NO_ROUTE};
use rand::distributions::WeightedIndex;
use rand::prelude::*;
use std::collections::HashSet;
use std::ffi::CString;
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

/// IPv4 prefix lengths of a BGP full table, in permille-ish weights: mostly /24, then
/// /22-/23, /16-/21, a few shorter, and some /25-/32.
const V4_LENGTHS: [(u8, u32); 25] = [
    (8, 1),
    (9, 1),
    (10, 2),
    (11, 5),
    (12, 12),
    (13, 25),
    (14, 45),
    (15, 80),
    (16, 1300),
    (17, 700),
    (18, 1200),
    (19, 2500),
    (20, 4000),
    (21, 4500),
    (22, 10500),
    (23, 10000),
    (24, 58000),
    (25, 300),
    (26, 300),
    (27, 250),
    (28, 250),
    (29, 350),
    (30, 300),
    (31, 100),
    (32, 1400),
];

type Route4 = (u32, u8, u32);
type Route6 = (u128, u8, u32);

fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// `ROUTES4` distinct routes in 1.0.0.0-223.255.255.255; route i has next hop i.
fn v4_routes(rng: &mut StdRng) -> Vec<Route4> {
    let lens = WeightedIndex::new(V4_LENGTHS.iter().map(|l| l.1)).expect("weights");
    let mut seen = HashSet::with_capacity(ROUTES4);
    let mut routes = Vec::with_capacity(ROUTES4);
    while routes.len() < ROUTES4 {
        let len = V4_LENGTHS[lens.sample(rng)].0;
        let p = rng.gen_range(0x0100_0000..0xE000_0000u32) & mask32(len);
        if seen.insert((p, len)) {
            routes.push((p, len, routes.len() as u32));
        }
    }
    routes
}

/// Half inside random routes (random host bits), half uniformly random (misses and
/// hits of the short routes).
fn v4_addrs(rng: &mut StdRng, routes: &[Route4]) -> Vec<u32> {
    (0..BATCH * BATCHES)
        .map(|_| {
            if rng.gen() {
                let (p, len, _) = routes[rng.gen_range(0..routes.len())];
                p | (rng.gen::<u32>() & !mask32(len))
            } else {
                rng.gen()
            }
        })
        .collect()
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

/// DPDK's `rte_lpm`, owned: freed on drop (before the EAL).
struct RteLpm(*mut ferrule_ffi::rte_lpm);

impl RteLpm {
    fn new(routes: &[Route4]) -> Self {
        let name = CString::new("ferrule_bench_lpm").expect("no NUL");
        let cfg = ferrule_ffi::rte_lpm_config {
            max_rules: 1 << 21,
            number_tbl8s: 1 << 16,
            flags: 0,
        };
        // SAFETY: the EAL is running; name and cfg are valid for the call; -1 is
        // SOCKET_ID_ANY.
        let lpm = unsafe { ferrule_ffi::rte_lpm_create(name.as_ptr(), -1, &cfg) };
        assert!(!lpm.is_null(), "rte_lpm_create failed");
        for &(p, len, nh) in routes {
            // SAFETY: lpm is a live table from rte_lpm_create.
            let rc = unsafe { ferrule_ffi::rte_lpm_add(lpm, p, len, nh) };
            assert_eq!(rc, 0, "rte_lpm_add {}/{len}", Ipv4Addr::from(p));
        }
        RteLpm(lpm)
    }

    /// Raw entries: next hop in the low 24 bits, `RTE_LPM_LOOKUP_SUCCESS` on a hit.
    #[inline]
    fn lookup_bulk(&self, ips: &[u32], out: &mut [u32]) {
        assert!(out.len() >= ips.len());
        // SAFETY: lpm is live; ips has ips.len() readable and out at least as many
        // writable u32s.
        unsafe {
            ferrule_ffi::ferrule_lpm_lookup_bulk(
                self.0,
                ips.as_ptr(),
                out.as_mut_ptr(),
                ips.len() as u32,
            )
        };
    }

    #[inline]
    fn lookup(&self, ip: u32) -> u32 {
        let mut nh = 0;
        // SAFETY: lpm is live; nh is a valid out pointer.
        let rc = unsafe { ferrule_ffi::ferrule_lpm_lookup(self.0, ip, &mut nh) };
        if rc == 0 {
            nh
        } else {
            NO_ROUTE
        }
    }
}

impl Drop for RteLpm {
    fn drop(&mut self) {
        // SAFETY: lpm came from rte_lpm_create and is freed once.
        unsafe { ferrule_ffi::rte_lpm_free(self.0) };
    }
}

/// The next hop `rte_lpm_lookup_bulk` reported, in `Lpm4`'s terms.
fn rte_result(raw: u32) -> u32 {
    if raw & ferrule_ffi::RTE_LPM_LOOKUP_SUCCESS != 0 {
        raw & 0x00FF_FFFF
    } else {
        NO_ROUTE
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn bench_v4(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(SEED);
    let routes = v4_routes(&mut rng);
    let addrs = v4_addrs(&mut rng, &routes);

    let start = Instant::now();
    let mut lpm = Lpm4::new();
    for &(p, len, nh) in &routes {
        lpm.insert(Ipv4Addr::from(p), len, nh).expect("route fits");
    }
    let build = start.elapsed();
    let start = Instant::now();
    let rte = RteLpm::new(&routes);
    let rte_build = start.elapsed();
    let start = Instant::now();
    let snapshot = lpm.clone();
    let clone = start.elapsed();
    drop(snapshot);
    println!(
        "lpm4: {} routes, build {:.2?} (rte_lpm_add: {:.2?}), clone {:.2?}, \
         memory_bytes {:.1} MiB, {} tbl8 groups",
        lpm.len(),
        build,
        rte_build,
        clone,
        mib(lpm.memory_bytes()),
        lpm.tbl8_groups()
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
        hits += usize::from(o != NO_ROUTE);
    }
    println!(
        "lpm4: Lpm4 == rte_lpm on all {} addresses ({:.1}% hits)",
        addrs.len(),
        100.0 * hits as f64 / addrs.len() as f64
    );

    let batches: Vec<&[u32]> = addrs.chunks(BATCH).collect();
    let mut g = c.benchmark_group("lpm4_1M_routes");
    g.throughput(Throughput::Elements(BATCH as u64));
    let mut out = [0u32; BATCH];
    let mut k = 0;
    g.bench_function("ferrule_lookup_batch", |b| {
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
                *o = lpm.lookup_u32(a);
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
                *o = rte.lookup(a);
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
    let mut out = vec![0; addrs.len()];
    lpm.lookup_batch(&addrs, &mut out);
    let hits = out.iter().filter(|&&nh| nh != NO_ROUTE).count();
    assert!(addrs
        .iter()
        .zip(&out)
        .all(|(&a, &o)| lpm.lookup_u128(a) == o));
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
            lpm.lookup_batch(black_box(batches[k]), &mut out);
            black_box(&out);
        })
    });
    g.bench_function("ferrule_lookup_u128", |b| {
        b.iter(|| {
            k = (k + 1) % BATCHES;
            for (&a, o) in black_box(batches[k]).iter().zip(out.iter_mut()) {
                *o = lpm.lookup_u128(a);
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
        // --no-shconf likewise keeps no files in /run/dpdk.
        "--no-huge".into(),
        "--no-shconf".into(),
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
