//! Node-wide connection limits over every worker's table: a total and a per-zone
//! maximum, counted in shared atomics that each worker draws from in chunks, so that a
//! connection's insert and removal touch only the worker's own counts and the shared
//! counters move once per chunk.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// Zones (networks) a budget counts: every value of a key's 16-bit network.
const ZONES: usize = 1 << 16;
/// Largest chunk a worker draws at once.
const MAX_CHUNK: u32 = 64;

/// The shared counts: room reserved by the workers (connections plus what they hold
/// unused, at most `2 × chunk − 1` of each count per worker, none with chunks of one)
/// against the limits.
#[derive(Debug)]
pub struct CtBudget {
    max_total: u32,
    max_per_zone: u32,
    /// On a cache line of its own: every worker writes it.
    total: Padded,
    zones: Box<[AtomicU32]>,
    chunk_total: u32,
    chunk_zone: u32,
}

/// An atomic count alone on its cache line.
#[derive(Debug)]
#[repr(align(64))]
struct Padded(AtomicU32);

/// Which node-wide limit refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `max_total` connections on the node.
    Total,
    /// `max_per_zone` connections of the zone on the node.
    Zone,
}

/// The chunk a worker draws of a limit shared by `workers`: small enough that what the
/// workers hold unused stays a small part of the limit.
fn chunk(limit: u32, workers: u16) -> u32 {
    (limit / (16 * u32::from(workers.max(1)))).clamp(1, MAX_CHUNK)
}

/// How much unused room a worker holds before it gives a chunk back: two chunks, or
/// with chunks of one, one (given back at once).
fn keep(chunk: u32) -> u32 {
    if chunk == 1 {
        1
    } else {
        2 * chunk
    }
}

/// Reserves up to `want` of `counter` without passing `max`; returns how many.
fn reserve(counter: &AtomicU32, max: u32, want: u32) -> u32 {
    let mut cur = counter.load(Relaxed);
    loop {
        let n = want.min(max.saturating_sub(cur));
        if n == 0 {
            return 0;
        }
        match counter.compare_exchange_weak(cur, cur + n, Relaxed, Relaxed) {
            Ok(_) => return n,
            Err(now) => cur = now,
        }
    }
}

impl CtBudget {
    /// Limits of `max_total` connections on the node and `max_per_zone` of one zone,
    /// shared by `workers` workers.
    pub fn new(max_total: u32, max_per_zone: u32, workers: u16) -> Arc<CtBudget> {
        Arc::new(CtBudget {
            max_total,
            max_per_zone,
            total: Padded(AtomicU32::new(0)),
            zones: (0..ZONES).map(|_| AtomicU32::new(0)).collect(),
            chunk_total: chunk(max_total, workers),
            chunk_zone: chunk(max_per_zone, workers),
        })
    }

    /// The node-wide maximum of connections.
    pub fn max_total(&self) -> u32 {
        self.max_total
    }

    /// The node-wide maximum of connections per zone.
    pub fn max_per_zone(&self) -> u32 {
        self.max_per_zone
    }

    /// Room the workers have reserved in all (connections and unused allowances).
    pub fn reserved(&self) -> u32 {
        self.total.0.load(Relaxed)
    }
}

/// One worker's draw on a [`CtBudget`]: what it reserved and has not used yet, in all
/// and per zone. Returned to the budget when dropped.
#[derive(Debug)]
pub struct Allowance {
    budget: Arc<CtBudget>,
    total: u32,
    zones: Box<[u32]>,
    /// The budget's chunks and hold thresholds, copied (not read from the shared
    /// lines on every insert and removal).
    chunk_total: u32,
    chunk_zone: u32,
    keep_total: u32,
    keep_zone: u32,
}

impl Allowance {
    /// A worker's allowance, empty.
    pub fn new(budget: Arc<CtBudget>) -> Allowance {
        let (chunk_total, chunk_zone) = (budget.chunk_total, budget.chunk_zone);
        Allowance {
            budget,
            total: 0,
            zones: vec![0; ZONES].into_boxed_slice(),
            chunk_total,
            chunk_zone,
            keep_total: keep(chunk_total),
            keep_zone: keep(chunk_zone),
        }
    }

    /// Room for one more connection of `zone`, or the limit that refuses it (and then
    /// nothing reserved for it is kept).
    #[inline]
    pub fn take(&mut self, zone: u16) -> Result<(), Limit> {
        let b = &*self.budget;
        let z = usize::from(zone);
        let mut fresh = 0;
        if self.total == 0 {
            fresh = reserve(&b.total.0, b.max_total, self.chunk_total);
            if fresh == 0 {
                return Err(Limit::Total);
            }
            self.total = fresh;
        }
        if self.zones[z] == 0 {
            self.zones[z] = reserve(&b.zones[z], b.max_per_zone, self.chunk_zone);
            if self.zones[z] == 0 {
                // What was just reserved for the total goes back: another worker's
                // connection in another zone may need it.
                if fresh != 0 {
                    b.total.0.fetch_sub(fresh, Relaxed);
                    self.total = 0;
                }
                return Err(Limit::Zone);
            }
        }
        self.total -= 1;
        self.zones[z] -= 1;
        Ok(())
    }

    /// A connection of `zone` is gone: its room comes back, and a chunk goes back to
    /// the budget when the worker holds two (with chunks of one, at once: small
    /// limits stay exact).
    #[inline]
    pub fn give(&mut self, zone: u16) {
        let b = &*self.budget;
        let z = usize::from(zone);
        self.total += 1;
        if self.total >= self.keep_total {
            b.total.0.fetch_sub(self.chunk_total, Relaxed);
            self.total -= self.chunk_total;
        }
        self.zones[z] += 1;
        if self.zones[z] >= self.keep_zone {
            b.zones[z].fetch_sub(self.chunk_zone, Relaxed);
            self.zones[z] -= self.chunk_zone;
        }
    }
}

impl Drop for Allowance {
    fn drop(&mut self) {
        let b = &*self.budget;
        b.total.0.fetch_sub(self.total, Relaxed);
        for (z, &n) in self.zones.iter().enumerate() {
            if n != 0 {
                b.zones[z].fetch_sub(n, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_hold_over_workers_within_what_they_hold_unused() {
        let budget = CtBudget::new(100, 30, 2);
        let mut w = [
            Allowance::new(Arc::clone(&budget)),
            Allowance::new(Arc::clone(&budget)),
        ];
        // Zone 7 fills at 30 whichever worker inserts, give or take the other
        // worker's unused chunk.
        let mut taken = 0;
        for i in 0..100 {
            if w[i % 2].take(7).is_ok() {
                taken += 1;
            }
        }
        assert_eq!(taken, 30);
        assert_eq!(w[0].take(7), Err(Limit::Zone));
        // Other zones fill the total.
        let mut more = 0;
        for i in 0..200u16 {
            if w[usize::from(i % 2)].take(100 + i).is_ok() {
                more += 1;
            }
        }
        // (Each worker uses up what it holds before it is refused.)
        assert_eq!(more, 70);
        assert_eq!(w[1].take(1000), Err(Limit::Total));
        // Removals give the room back, to either worker.
        for _ in 0..10 {
            w[0].give(7);
        }
        assert!(w[1].take(7).is_ok());
        // Stopped workers give back what they held unused: the connections remain.
        drop(w);
        assert_eq!(budget.reserved(), taken + more - 10 + 1);
    }

    #[test]
    fn workers_racing_never_pass_the_limits() {
        let budget = CtBudget::new(5000, 900, 4);
        let in_use: Vec<AtomicU32> = (0..8).map(|_| AtomicU32::new(0)).collect();
        let all = AtomicU32::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (budget, in_use, all) = (Arc::clone(&budget), &in_use, &all);
                s.spawn(move || {
                    let mut a = Allowance::new(budget);
                    let mut mine: Vec<u16> = Vec::new();
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                    for _ in 0..200_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if !x.is_multiple_of(3) || mine.is_empty() {
                            let zone = (x >> 8) as u16 % 8;
                            if a.take(zone).is_ok() {
                                let n = in_use[usize::from(zone)].fetch_add(1, Relaxed) + 1;
                                assert!(n <= 900, "zone {zone}: {n}");
                                let n = all.fetch_add(1, Relaxed) + 1;
                                assert!(n <= 5000, "{n} in all");
                                mine.push(zone);
                            }
                        } else {
                            let zone = mine.swap_remove((x >> 8) as usize % mine.len());
                            in_use[usize::from(zone)].fetch_sub(1, Relaxed);
                            all.fetch_sub(1, Relaxed);
                            a.give(zone);
                        }
                    }
                    for zone in mine {
                        in_use[usize::from(zone)].fetch_sub(1, Relaxed);
                        all.fetch_sub(1, Relaxed);
                        a.give(zone);
                    }
                });
            }
        });
        assert_eq!(budget.reserved(), 0);
        assert!(in_use.iter().all(|z| z.load(Relaxed) == 0));
    }

    #[test]
    fn a_zone_refusal_keeps_no_room_of_the_total() {
        // Small limits use chunks of one and are exact: zone 1 full on worker 1's
        // connection, worker 0 refused there, and the total's last three still go.
        let budget = CtBudget::new(4, 1, 2);
        let mut w = [
            Allowance::new(Arc::clone(&budget)),
            Allowance::new(Arc::clone(&budget)),
        ];
        w[1].take(1).expect("room");
        assert_eq!(w[0].take(1), Err(Limit::Zone));
        assert_eq!(budget.reserved(), 1);
        for z in 2..5 {
            w[1].take(z).expect("room");
        }
        assert_eq!(w[0].take(9), Err(Limit::Total));
    }

    #[test]
    fn everything_comes_back_when_workers_stop() {
        let budget = CtBudget::new(1000, 1000, 4);
        {
            let mut a = Allowance::new(Arc::clone(&budget));
            for z in 0..50 {
                a.take(z).expect("room");
            }
            assert!(budget.reserved() >= 50);
            for z in 0..50 {
                a.give(z);
            }
        }
        assert_eq!(budget.reserved(), 0);
        assert!(budget.zones.iter().all(|z| z.load(Relaxed) == 0));
    }
}
