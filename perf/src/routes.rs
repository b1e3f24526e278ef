//! Route tables and traffic for benchmarks: a BGP-sized IPv4 table with a realistic
//! prefix-length mix, and destination addresses spread over it.

use rand::distributions::WeightedIndex;
use rand::prelude::*;
use std::collections::HashSet;

/// (prefix, length, next hop).
pub type Route4 = (u32, u8, u32);

/// IPv4 prefix lengths of a BGP full table, in relative weights: mostly /24, then
/// /22-/23, /16-/21, a few shorter, and some /25-/32.
pub const V4_LENGTHS: [(u8, u32); 25] = [
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

/// The network mask of a prefix length.
pub fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

/// The IPv4 table size a benchmark uses: `FERRULE_BENCH_ROUTES` when set (to separate
/// memory from compute), else `default`.
pub fn v4_route_count(default: usize) -> usize {
    std::env::var("FERRULE_BENCH_ROUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `count` distinct routes in 1.0.0.0-223.255.255.255; route i has next hop i.
pub fn v4_routes(rng: &mut StdRng, count: usize) -> Vec<Route4> {
    let lens = WeightedIndex::new(V4_LENGTHS.iter().map(|l| l.1)).expect("weights");
    let mut seen = HashSet::with_capacity(count);
    let mut routes = Vec::with_capacity(count);
    while routes.len() < count {
        let len = V4_LENGTHS[lens.sample(rng)].0;
        let p = rng.gen_range(0x0100_0000..0xE000_0000u32) & mask32(len);
        if seen.insert((p, len)) {
            routes.push((p, len, routes.len() as u32));
        }
    }
    routes
}

/// `count` addresses: with probability `hit_ratio` inside a random route (random host
/// bits), else uniformly random (misses, or hits of the short routes).
pub fn v4_addrs(rng: &mut StdRng, routes: &[Route4], count: usize, hit_ratio: f64) -> Vec<u32> {
    (0..count)
        .map(|_| {
            if rng.gen_bool(hit_ratio) {
                let (p, len, _) = routes[rng.gen_range(0..routes.len())];
                p | (rng.gen::<u32>() & !mask32(len))
            } else {
                rng.gen()
            }
        })
        .collect()
}
