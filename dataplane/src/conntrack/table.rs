//! The per-worker connection table: preallocated entries (a 64-byte hot part, one cache
//! line per packet, and a 48-byte cold part) with a free list, the hash index over both
//! tuples of every entry, per-timeout-class aging lists (intrusive, doubly linked, in
//! expiry order), zone and table limits, counters.

use super::budget::{Allowance, CtBudget, Limit};
use super::index::{Index, KeyHash, CONNS_PER_BUCKET, IN_NEXT, NO_CANDIDATE};
use super::tcp::{self, Step, TcpState, TcpWindow, Window, NO_SCALES};
use super::{
    is_icmp, preallocated, prefetch, ConnId, ConnState, CtConfig, Dir, InsertError, L4Info,
    MemoryAdvice, Millis, Nat, NoAdvice, Timeouts, TrackVerdict, NAT_ZONE,
};
use crate::flow::{Family, FlowKey};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// Most entries one table holds (`max_entries` is clamped to it).
pub const MAX_ENTRIES: u32 = 1 << 26;

/// "No entry" in links and the free list.
const NIL: u32 = u32::MAX;

// State codes (low nibble of `Hot::state`): 0..=8 are `TcpState`s.
const S_UDP_UNREPLIED: u8 = 9;
const S_UDP_ASSURED: u8 = 10;
const S_ICMP: u8 = 11;
const S_OTHER: u8 = 12;
const S_FREE: u8 = 15;
const CODE: u8 = 0x0F;
/// A reply-direction packet was seen.
const REPLIED: u8 = 0x10;
/// The connection is source-NATed (`nat_addr`/`nat_port` are set).
const HAS_NAT: u8 = 0x20;
/// A TCP connection picked up mid-stream: no window checks.
const LIBERAL: u8 = 0x40;

/// Timeout classes: one aging list each.
const CLASSES: usize = 12;
/// The timeout class of each state code.
const CLASS: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 0, 8, 9, 10, 11, 0, 0, 0];

/// The part of a connection every packet of it reads and writes, in one cache line:
/// the tuple (the low 32 bits of each address: all of an IPv4 address), NAT, state,
/// deadline, ACL generation, TCP windows and the low bits of the counters. An
/// established packet touches this line and its index bucket, nothing else.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Hot {
    /// The original direction's source and destination addresses, last 4 bytes.
    src: [u8; 4],
    dst: [u8; 4],
    src_port: u16,
    dst_port: u16,
    /// The zone (the key's network).
    zone: u16,
    proto: u8,
    /// State code (low nibble) and flags.
    state: u8,
    nat_addr: [u8; 4],
    nat_port: u16,
    /// TCP window-scale shifts: original direction in the low nibble, reply in the
    /// high one (`0xF`: no option).
    scales: u8,
    /// The key's family (`Family as u8`), and `WIDE` when an address is not
    /// IPv4-mapped (its first 12 bytes are in the cold part); 0 in a free entry, so
    /// that no key matches one.
    addr: u8,
    /// Deadline, in whole seconds of the caller's clock.
    expires: u32,
    /// Low 32 bits of the ACL generation (the table keeps the high bits).
    acl_gen: u32,
    window: Window,
    /// Per direction: the low 7 bits of the packet count (bits 24-30) and the low 23
    /// bits of the byte count (bits 0-22), each under a guard bit (31, 23) that a
    /// carry out of it sets; the carries go to [`Cold`].
    counts: [u32; 2],
}

/// The rest of a connection, touched when it is created, relinked in its aging list,
/// freed, dumped, or when a counter carries: aging links (or the free list), the first
/// 12 bytes of each address, the high bits of the counters.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Cold {
    /// Aging-list links, or (`next`) the free list.
    prev: u32,
    next: u32,
    src_hi: [u8; 12],
    dst_hi: [u8; 12],
    /// Packet counts above the low 7 bits (39-bit counts).
    packets_hi: [u32; 2],
    /// Byte counts above the low 23 bits (55-bit counts).
    bytes_hi: [u32; 2],
}

/// `Hot::addr`: an address of the key is not IPv4-mapped.
const WIDE: u8 = 0x80;
/// The first 12 bytes of an IPv4-mapped address.
const MAPPED_HI: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF];
/// `Hot::counts`: the byte count's low bits, the packet count's, and the guard bits
/// above each.
const BYTES_BITS: u32 = 23;
const BYTES_LO: u32 = (1 << BYTES_BITS) - 1;
const PACKETS_SHIFT: u32 = 24;
const PACKETS_BITS: u32 = 7;
const PACKETS_LO: u32 = (1 << PACKETS_BITS) - 1;
const GUARDS: u32 = 1 << BYTES_BITS | 1 << 31;

/// Bytes one connection costs: its two parts plus its share of the hash index (the
/// aging links are inside the cold part).
pub const BYTES_PER_CONNECTION: usize = std::mem::size_of::<Hot>()
    + std::mem::size_of::<Cold>()
    + std::mem::size_of::<super::index::Bucket>() / CONNS_PER_BUCKET;

// One cache line per packet, and the budget: at most 128 bytes per connection.
const _: () = assert!(std::mem::size_of::<Hot>() == 64);
const _: () = assert!(BYTES_PER_CONNECTION <= 128);

const FREE_HOT: Hot = Hot {
    src: [0; 4],
    dst: [0; 4],
    src_port: 0,
    dst_port: 0,
    zone: 0,
    proto: 0,
    state: S_FREE,
    nat_addr: [0; 4],
    nat_port: 0,
    scales: NO_SCALES,
    addr: 0,
    expires: 0,
    acl_gen: 0,
    window: Window::ZERO,
    counts: [0; 2],
};

const FREE_COLD: Cold = Cold {
    prev: NIL,
    next: NIL,
    src_hi: MAPPED_HI,
    dst_hi: MAPPED_HI,
    packets_hi: [0; 2],
    bytes_hi: [0; 2],
};

// Addresses are compared as little-endian integers of their 16 bytes: the bytes as they
// lie in memory, so that a key's address is one plain load.

/// The first 12 bytes of an address, its last 4 zero (see [`addr128`]).
#[inline(always)]
const fn hi128(hi: &[u8; 12]) -> u128 {
    let [a, b, c, d, e, f, g, h, i, j, k, l] = *hi;
    u64::from_le_bytes([a, b, c, d, e, f, g, h]) as u128
        | (u32::from_le_bytes([i, j, k, l]) as u128) << 64
}

/// [`hi128`] of an IPv4-mapped address.
const MAPPED_HI128: u128 = hi128(&MAPPED_HI);

/// An address from its first 12 bytes (as [`hi128`]) and its last 4, as the
/// little-endian integer of its 16 bytes (`u128::from_le_bytes`).
#[inline(always)]
fn addr128(hi: u128, lo: [u8; 4]) -> u128 {
    hi | u128::from(u32::from_le_bytes(lo)) << 96
}

/// `a`'s last 4 bytes.
#[inline(always)]
fn lo(a: &[u8; 16]) -> [u8; 4] {
    [a[12], a[13], a[14], a[15]]
}

/// `a`'s first 12 bytes.
#[inline(always)]
fn hi(a: &[u8; 16]) -> [u8; 12] {
    let mut h = [0; 12];
    h.copy_from_slice(&a[..12]);
    h
}

impl Hot {
    #[inline(always)]
    fn code(&self) -> u8 {
        self.state & CODE
    }

    #[inline(always)]
    fn is_free(&self) -> bool {
        self.code() == S_FREE
    }

    #[inline(always)]
    fn family(&self) -> Family {
        if self.addr & !WIDE == Family::V6 as u8 {
            Family::V6
        } else {
            Family::V4
        }
    }

    #[inline(always)]
    fn nat(&self) -> Option<Nat> {
        (self.state & HAS_NAT != 0).then(|| Nat {
            addr: Ipv4Addr::from(self.nat_addr),
            port: self.nat_port,
        })
    }

    /// Counts a packet of `len` bytes in direction `d`; false (nothing counted) when a
    /// low count would carry: then [`ConnTable::count_carry`] counts it. One addition
    /// and one test: a carry out of either low count lands in its guard bit (`len`
    /// below 2^23 carries at most once).
    #[inline(always)]
    fn count(&mut self, d: usize, len: u32) -> bool {
        let n = self.counts[d]
            .wrapping_add(1 << PACKETS_SHIFT)
            .wrapping_add(len);
        if (n & GUARDS) | (len >> BYTES_BITS) != 0 {
            return false;
        }
        self.counts[d] = n;
        true
    }

    /// Sets the deadline; whether it moved.
    #[inline(always)]
    fn set_deadline(&mut self, expires: u32) -> bool {
        let moved = self.expires != expires;
        self.expires = expires;
        moved
    }

    /// [`ConnTable::track`] of a pure ACK on an ESTABLISHED connection: window
    /// tracking and the replied flag (not the counters or the deadline).
    #[inline(always)]
    fn established_ack(&mut self, dir: Dir, l4: &L4Info) {
        tcp::established_ack(dir, l4, &mut self.window, &mut self.scales);
        if dir == Dir::Reply {
            self.state |= REPLIED;
        }
    }

    /// Whether `key` is the tuple of direction `dir & 1`, the first 12 bytes of the
    /// original source and destination addresses being `src_hi` and `dst_hi` (as
    /// [`hi128`]; the reply direction compared field by field, equal to building the
    /// reply tuple and comparing). The reply direction of a source-NATed connection is
    /// in [`NAT_ZONE`], not in the entry's zone.
    #[inline(always)]
    fn matches(&self, dir: u32, key: &FlowKey, src_hi: u128, dst_hi: u128) -> bool {
        let src = addr128(src_hi, self.src);
        let dst = addr128(dst_hi, self.dst);
        let same = (key.proto == self.proto) & (key.family as u8 == self.addr & !WIDE);
        if dir & 1 == 0 {
            return same
                & (key.network == self.zone)
                & (u128::from_le_bytes(key.src) == src)
                & (u128::from_le_bytes(key.dst) == dst)
                & (key.src_port == self.src_port)
                & (key.dst_port == self.dst_port);
        }
        let (zone, to, to_port, from_port) = if self.state & HAS_NAT != 0 {
            let mapped = addr128(MAPPED_HI128, self.nat_addr);
            let from_port = if is_icmp(self.proto) {
                self.nat_port
            } else {
                self.dst_port
            };
            (NAT_ZONE, mapped, self.nat_port, from_port)
        } else {
            (self.zone, src, self.src_port, self.dst_port)
        };
        same & (key.network == zone)
            & (u128::from_le_bytes(key.src) == dst)
            & (u128::from_le_bytes(key.dst) == to)
            & (key.src_port == from_port)
            & (key.dst_port == to_port)
    }
}

impl Cold {
    /// Direction `d`'s counts, given the hot part's low bits.
    #[inline]
    fn counts(&self, hot: &Hot, d: usize) -> (u64, u64) {
        let c = hot.counts[d];
        (
            u64::from(self.packets_hi[d]) << PACKETS_BITS
                | u64::from(c >> PACKETS_SHIFT & PACKETS_LO),
            u64::from(self.bytes_hi[d]) << BYTES_BITS | u64::from(c & BYTES_LO),
        )
    }
}

/// The original-direction tuple of a connection.
#[inline]
fn key_of(h: &Hot, c: &Cold) -> FlowKey {
    let (src, dst) = if h.addr & WIDE != 0 {
        (
            addr128(hi128(&c.src_hi), h.src),
            addr128(hi128(&c.dst_hi), h.dst),
        )
    } else {
        (addr128(MAPPED_HI128, h.src), addr128(MAPPED_HI128, h.dst))
    };
    FlowKey {
        src: src.to_le_bytes(),
        dst: dst.to_le_bytes(),
        src_port: h.src_port,
        dst_port: h.dst_port,
        network: h.zone,
        proto: h.proto,
        family: h.family(),
    }
}

/// Table counters (the owning worker copies them out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CtStats {
    /// Connections created.
    pub inserts: u64,
    /// Connections removed by [`ConnTable::remove`] (not by expiry).
    pub removals: u64,
    /// Connections that timed out.
    pub expirations: u64,
    /// Inserts refused: the table was full.
    pub table_full: u64,
    /// Inserts refused: the zone was full.
    pub zone_full: u64,
    /// Inserts refused: a tuple was already tracked.
    pub clashes: u64,
    /// Packets found invalid (bad flags or transition, RST out of window; also first
    /// packets that cannot open a connection).
    pub invalid: u64,
}

/// A read-only view of one connection.
#[derive(Clone, Copy)]
pub struct ConnView<'a> {
    h: &'a Hot,
    /// The table's cold parts and the entry's number: found only when asked for (the
    /// packet path reads the hot part alone).
    cold: &'a [Cold],
    i: usize,
    acl_latest: u64,
}

impl std::fmt::Debug for ConnView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnView")
            .field("key", &self.key())
            .field("state", &self.state())
            .field("nat", &self.nat())
            .field("expires_at", &self.expires_at())
            .finish_non_exhaustive()
    }
}

impl ConnView<'_> {
    fn c(&self) -> &Cold {
        &self.cold[self.i]
    }

    /// The original-direction tuple.
    pub fn key(&self) -> FlowKey {
        key_of(self.h, self.c())
    }

    /// The original direction's IPv4 source address and port (meaningful for IPv4
    /// connections, as every source-NATed one is), from the hot part alone — what
    /// translating a reply back needs.
    #[inline(always)]
    pub fn source_v4(&self) -> (Ipv4Addr, u16) {
        (Ipv4Addr::from(self.h.src), self.h.src_port)
    }

    /// The tuple reply packets carry (after SNAT: from the original destination to
    /// the NAT address and port).
    pub fn reply_key(&self) -> FlowKey {
        reply_tuple(&self.key(), self.nat())
    }

    /// The zone (network).
    pub fn zone(&self) -> u16 {
        self.h.zone
    }

    pub fn state(&self) -> ConnState {
        match self.h.code() {
            S_UDP_UNREPLIED => ConnState::UdpUnreplied,
            S_UDP_ASSURED => ConnState::UdpAssured,
            S_ICMP => ConnState::IcmpEcho,
            c => TcpState::from_code(c).map_or(ConnState::Other, ConnState::Tcp),
        }
    }

    /// Whether a reply-direction packet was seen.
    pub fn replied(&self) -> bool {
        self.h.state & REPLIED != 0
    }

    pub fn nat(&self) -> Option<Nat> {
        self.h.nat()
    }

    /// When the connection times out unless refreshed (whole seconds; for timeouts of
    /// 128 s or more, the end of a cell under 1/64 of the timeout).
    pub fn expires_at(&self) -> Millis {
        Millis::from(self.h.expires) * 1000
    }

    /// Time left at `now` (0 once due).
    pub fn time_left(&self, now: Millis) -> Millis {
        self.expires_at().saturating_sub(now)
    }

    /// Packets seen in a direction (modulo 2^39).
    pub fn packets(&self, dir: Dir) -> u64 {
        self.c().counts(self.h, dir as usize).0
    }

    /// Bytes seen in a direction (modulo 2^55).
    pub fn bytes(&self, dir: Dir) -> u64 {
        self.c().counts(self.h, dir as usize).1
    }

    /// The ACL generation the connection was last checked in. Exact as long as it is
    /// less than 2^32 generations older than the newest the table was given.
    pub fn acl_generation(&self) -> u64 {
        let back = (self.acl_latest as u32).wrapping_sub(self.h.acl_gen);
        self.acl_latest.wrapping_sub(u64::from(back))
    }

    /// TCP window tracking of a direction (`None` for other protocols).
    pub fn tcp_window(&self, dir: Dir) -> Option<TcpWindow> {
        matches!(self.state(), ConnState::Tcp(_))
            .then(|| self.h.window.view(self.h.scales, dir as usize))
    }
}

/// One worker's connections. All memory is allocated by [`ConnTable::new`].
pub struct ConnTable {
    /// The entries' hot and cold parts, by entry number.
    hot: Vec<Hot>,
    cold: Vec<Cold>,
    index: Index,
    free: u32,
    len: u32,
    max_per_zone: u32,
    zone_len: Vec<u32>,
    heads: [u32; CLASSES],
    tails: [u32; CLASSES],
    timeouts: [u32; CLASSES],
    /// Per class, the [`grid_mask`] its deadlines are rounded up with.
    grids: [u32; CLASSES],
    cfg_timeouts: Timeouts,
    /// Class `expire` starts with (rotates, so no class starves under a budget).
    cursor: usize,
    /// The newest ACL generation given (high bits of every entry's generation).
    acl_latest: u64,
    stats: CtStats,
    /// The worker's draw on node-wide limits shared with the other workers' tables.
    allowance: Option<Allowance>,
}

impl std::fmt::Debug for ConnTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnTable")
            .field("len", &self.len)
            .field("capacity", &self.hot.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// A random seed for the hash (a fresh `RandomState` per table).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x6665_7272_756c_6563);
    h.finish()
}

/// The reply-direction tuple of a connection with original tuple `k`: reversed, with
/// the NAT address (and port, or echo id in both port fields for ICMP) as destination
/// and in [`NAT_ZONE`] when source-NATed.
#[inline(always)]
fn reply_tuple(k: &FlowKey, nat: Option<Nat>) -> FlowKey {
    let mut r = k.reversed();
    if let Some(n) = nat {
        r.dst = n.addr.to_ipv6_mapped().octets();
        r.dst_port = n.port;
        r.network = NAT_ZONE;
        if is_icmp(k.proto) {
            r.src_port = n.port;
        }
    }
    r
}

/// An external tuple found free for a new connection by
/// [`free_nat`](ConnTable::free_nat): the NAT, the hash of the reply tuple it gives
/// the connection, and how many connections the table had inserted when it looked.
/// [`insert_hashed`](ConnTable::insert_hashed) skips looking again while no connection
/// was inserted since (removals never make a free tuple taken). Only meaningful for the
/// table and original tuple it was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeNat {
    pub nat: Nat,
    reply: u64,
    inserts: u64,
}

/// The reply-direction key of a masqueraded connection to `remote:remote_port` (in
/// [`NAT_ZONE`], whatever the connection's zone).
#[inline(always)]
fn nat_tuple(proto: u8, remote: &[u8; 16], remote_port: u16, nat: Nat) -> FlowKey {
    FlowKey {
        src: *remote,
        dst: nat.addr.to_ipv6_mapped().octets(),
        src_port: if is_icmp(proto) {
            nat.port
        } else {
            remote_port
        },
        dst_port: nat.port,
        network: NAT_ZONE,
        proto,
        family: Family::V4,
    }
}

/// A deadline `timeout` seconds after `now`, in whole seconds rounded up. (Rounded up
/// by adding 999 and dividing once — `div_ceil` also computes the remainder, and this
/// runs for every packet.)
#[inline(always)]
fn deadline(now: Millis, timeout: u32) -> u32 {
    let s = (now.saturating_add(999) / 1000).min(u64::from(u32::MAX)) as u32;
    s.saturating_add(timeout)
}

/// A class's deadlines are rounded up to a grid of about 1/`GRID_STEPS` of its
/// timeout (see [`grid_mask`]).
const GRID_STEPS: u32 = 64;

/// The mask a deadline of a class with `timeout` seconds is OR-ed with: the largest
/// power of two of seconds at most `timeout / GRID_STEPS`, minus one (0 below 128 s).
/// A connection moves in its class's aging list whenever its deadline moves, i.e. on
/// its first packet in each grid cell: with whole seconds that was once a second for a
/// connection with a packet every second — each move rewrites three other
/// connections' links, random cache lines at a million connections — and with the
/// grid it is once per cell (an hour and eight minutes for the 5-day ESTABLISHED
/// timeout, 8 s for the 10-minute generic one). The lists stay in deadline order (all
/// of a class's deadlines are cell ends) and a connection lives at most a cell, under
/// 1/64 of its timeout, past it; timeouts up to 127 s keep whole seconds.
fn grid_mask(timeout: u32) -> u32 {
    match timeout / GRID_STEPS {
        0 | 1 => 0,
        step => (1u32 << step.ilog2()) - 1,
    }
}

/// The deadline of a connection of `class` refreshed at `now`, given the table's
/// per-class timeouts and [`grid_mask`]s: its timeout on, rounded up to whole seconds
/// and to the class's grid. (A free function so that the established fast path can
/// call it with the entry borrowed.)
#[inline(always)]
fn class_deadline(
    timeouts: &[u32; CLASSES],
    grids: &[u32; CLASSES],
    class: u8,
    now: Millis,
) -> u32 {
    let c = usize::from(class);
    deadline(now, timeouts[c]) | grids[c]
}

/// How many keys ahead of the one being looked up a burst lookup prefetches the index
/// bucket, and (with [`ENTRY_AHEAD`]) the entry that bucket points to
/// ([`ConnTable::prefetch_ahead`]). The distances that hid the most of the
/// misses at a million connections: all of a burst's prefetches at once overflow the
/// core's outstanding-miss slots and the later ones wait; one at a time leaves each
/// miss exposed. (With one cache line per entry, 16/8 beat 8/4, 12/6 and 24/12.)
pub const BUCKET_AHEAD: usize = 16;
/// See [`BUCKET_AHEAD`].
pub const ENTRY_AHEAD: usize = 8;
/// How many keys ahead the entry of a key stored past its home bucket is prefetched
/// (its next bucket was prefetched at [`ENTRY_AHEAD`]).
pub const OVERFLOW_AHEAD: usize = 4;

impl ConnTable {
    /// A table with room for `cfg.max_entries` connections, hash seeded at random.
    pub fn new(cfg: &CtConfig) -> ConnTable {
        Self::with_seed(cfg, random_seed())
    }

    /// A table whose hash is seeded with `seed` (tests and benchmarks).
    pub fn with_seed(cfg: &CtConfig, seed: u64) -> ConnTable {
        Self::with_seed_in(cfg, seed, &NoAdvice)
    }

    /// [`with_seed`](Self::with_seed), the entries and the index backed as `advice`
    /// says (e.g. on transparent huge pages: at a million connections most lookups
    /// would otherwise also miss the TLB).
    pub fn with_seed_in(cfg: &CtConfig, seed: u64, advice: &impl MemoryAdvice) -> ConnTable {
        let max = cfg.max_entries.min(MAX_ENTRIES);
        let hot = preallocated(max as usize, FREE_HOT, advice);
        let mut cold = preallocated(max as usize, FREE_COLD, advice);
        for (i, e) in cold.iter_mut().enumerate() {
            e.next = if i + 1 < max as usize {
                i as u32 + 1
            } else {
                NIL
            };
        }
        let t = &cfg.timeouts;
        let timeouts = [
            t.tcp_syn_sent,
            t.tcp_syn_recv,
            t.tcp_established,
            t.tcp_fin_wait,
            t.tcp_close_wait,
            t.tcp_last_ack,
            t.tcp_time_wait,
            t.tcp_close,
            t.udp_unreplied,
            t.udp_assured,
            t.icmp,
            t.generic,
        ];
        ConnTable {
            hot,
            cold,
            index: Index::new(max as usize, seed, advice),
            free: if max == 0 { NIL } else { 0 },
            len: 0,
            max_per_zone: cfg.max_per_zone,
            zone_len: vec![0; 1 << 16],
            heads: [NIL; CLASSES],
            tails: [NIL; CLASSES],
            timeouts,
            grids: timeouts.map(grid_mask),
            cfg_timeouts: *t,
            cursor: 0,
            acl_latest: 0,
            stats: CtStats::default(),
            allowance: None,
        }
    }

    /// Counts this table's connections against node-wide limits shared with other
    /// tables (each worker's), on top of its own capacity and per-zone limit. Call it
    /// before the first insert.
    pub fn set_budget(&mut self, budget: Arc<CtBudget>) {
        assert!(
            self.is_empty() && self.allowance.is_none(),
            "a table's budget is set once, before its first insert"
        );
        self.allowance = Some(Allowance::new(budget));
    }

    /// The timeouts the table was built with.
    pub fn timeouts(&self) -> &Timeouts {
        &self.cfg_timeouts
    }

    /// Connections it can hold.
    pub fn capacity(&self) -> usize {
        self.hot.len()
    }

    /// Bytes allocated for entries and the index (without the per-zone counts).
    pub fn memory_bytes(&self) -> usize {
        self.hot.len() * (std::mem::size_of::<Hot>() + std::mem::size_of::<Cold>())
            + self.index.memory_bytes()
    }

    /// Connections tracked.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Connections tracked in `zone`.
    pub fn zone_len(&self, zone: u16) -> usize {
        self.zone_len[usize::from(zone)] as usize
    }

    pub fn stats(&self) -> &CtStats {
        &self.stats
    }

    /// Finds the connection a packet belongs to, in either direction. `key.network` is
    /// the zone. A source-NATed connection's reply tuple is (original destination →
    /// NAT address:port); for ICMP echo the identifier is in both port fields, so the
    /// reply to echo id X masqueraded to Y carries Y in both.
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> Option<(ConnId, Dir)> {
        self.lookup_hashed(key, self.hash(key))
    }

    /// The hash of `key` for [`lookup_hashed`](Self::lookup_hashed), prefetching the
    /// index bucket its lookup starts at: hash a whole burst first, then
    /// [`prefetch_entry`](Self::prefetch_entry) each, then look each up, and the cache
    /// misses of the burst overlap instead of following one another.
    #[inline(always)]
    pub fn hash(&self, key: &FlowKey) -> KeyHash {
        let h = self.key_hash(key);
        self.prefetch_bucket(&h);
        h
    }

    /// [`hash`](Self::hash) without the prefetch (for a lookup that prefetches a few
    /// keys ahead: [`prefetch_bucket`](Self::prefetch_bucket)).
    #[inline(always)]
    pub fn key_hash(&self, key: &FlowKey) -> KeyHash {
        KeyHash::new(self.index.hash(key))
    }

    /// Prefetches the index bucket a lookup of hash `h` starts at.
    #[inline(always)]
    pub fn prefetch_bucket(&self, h: &KeyHash) {
        self.index.prefetch(h.h);
    }

    /// The prefetches before the lookup of the `k`-th key of a burst, whose
    /// [`key_hash`](Self::key_hash)es are `hashes[at(0)]`, `hashes[at(1)]`, … (`at`
    /// maps a position in the burst to an index of `hashes`, `None` past the end): the
    /// index bucket of the key `BUCKET_AHEAD` places on, the entry of the key
    /// `ENTRY_AHEAD` places on (from its bucket, prefetched earlier) and, for the key
    /// `OVERFLOW_AHEAD` places on if stored past its home bucket, its entry from the
    /// next bucket; before the first key those of the first keys. Call it for
    /// `k = 0, 1, …` in turn, each just before looking that key up with its hash (which
    /// then carries its candidate entry). The table may change between calls:
    /// candidates are hints, checked before use.
    #[inline(always)]
    pub fn prefetch_ahead(
        &self,
        hashes: &mut [KeyHash],
        k: usize,
        at: impl Fn(usize) -> Option<usize>,
    ) {
        if k == 0 {
            for j in 0..BUCKET_AHEAD {
                if let Some(h) = at(j).and_then(|x| hashes.get(x)) {
                    self.prefetch_bucket(h);
                }
            }
            for j in 0..ENTRY_AHEAD {
                if let Some(h) = at(j).and_then(|x| hashes.get_mut(x)) {
                    self.prefetch_entry(h);
                }
            }
            for j in 0..OVERFLOW_AHEAD {
                if let Some(h) = at(j).and_then(|x| hashes.get_mut(x)) {
                    self.prefetch_overflow_entry(h);
                }
            }
        }
        if let Some(h) = at(k + BUCKET_AHEAD).and_then(|x| hashes.get(x)) {
            self.prefetch_bucket(h);
        }
        if let Some(h) = at(k + ENTRY_AHEAD).and_then(|x| hashes.get_mut(x)) {
            self.prefetch_entry(h);
        }
        if let Some(h) = at(k + OVERFLOW_AHEAD).and_then(|x| hashes.get_mut(x)) {
            self.prefetch_overflow_entry(h);
        }
    }

    /// Prefetches the entry a lookup of hash `h` most likely finds (reading the index
    /// bucket, which [`hash`](Self::hash) prefetched), and keeps its reference in `h`
    /// for [`lookup_hashed`](Self::lookup_hashed) to check first.
    /// A key whose home bucket holds no matching tag but overflowed is likely in the
    /// next bucket: that bucket is prefetched, and
    /// [`prefetch_overflow_entry`](Self::prefetch_overflow_entry) takes it from there.
    #[inline(always)]
    pub fn prefetch_entry(&self, h: &mut KeyHash) {
        let r = self.index.first_candidate(h.h);
        h.cand = r;
        self.prefetch_ref(r);
    }

    /// For a key [`prefetch_entry`](Self::prefetch_entry) found no candidate for in its
    /// home bucket but sent to the next one: reads that bucket and prefetches the
    /// entry its matching tag points to (a few percent of keys in a full table).
    #[inline(always)]
    pub fn prefetch_overflow_entry(&self, h: &mut KeyHash) {
        if h.cand == IN_NEXT {
            h.cand = self.index.next_candidate(h.h).unwrap_or(NO_CANDIDATE);
            self.prefetch_ref(h.cand);
        }
    }

    #[inline(always)]
    fn prefetch_ref(&self, r: u32) {
        if let Some(e) = self.hot.get((r >> 1) as usize) {
            prefetch(e);
        }
    }

    /// [`lookup`](Self::lookup) of a key hashed by [`hash`](Self::hash) on this table.
    /// The entry [`prefetch_entry`](Self::prefetch_entry) found is checked first: when
    /// it is live and holds `key` in its direction it is the answer (a tuple belongs to
    /// at most one connection); otherwise the index is probed.
    #[inline]
    pub fn lookup_hashed(&self, key: &FlowKey, h: KeyHash) -> Option<(ConnId, Dir)> {
        if let Some(e) = self.hot.get((h.cand >> 1) as usize) {
            // (A free entry matches no key.)
            if self.matches_at(e, h.cand, key) {
                return Some((ConnId(h.cand >> 1), Dir::from_bit(h.cand)));
            }
        }
        self.index
            .find(h.h, |r| self.matches(r, key))
            .map(|r| (ConnId(r >> 1), Dir::from_bit(r)))
    }

    /// [`lookup`](Self::lookup) for a burst: `out[i]` is the result for `keys[i]`
    /// (`out` must be at least as long as `keys`). Software-pipelined with
    /// [`prefetch_ahead`](Self::prefetch_ahead): a few misses are in flight at any time.
    pub fn lookup_burst(&self, keys: &[FlowKey], out: &mut [Option<(ConnId, Dir)>]) {
        const CHUNK: usize = 32;
        let mut hashes = [KeyHash::default(); CHUNK];
        for (keys, out) in keys.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            let hashes = &mut hashes[..keys.len()];
            for (h, k) in hashes.iter_mut().zip(keys) {
                *h = self.key_hash(k);
            }
            for i in 0..keys.len() {
                self.prefetch_ahead(hashes, i, Some);
                out[i] = self.lookup_hashed(&keys[i], hashes[i]);
            }
        }
    }

    /// Finds the connection an ICMP/ICMPv6 error quotes, from the quoted packet's key
    /// (as parsed from the error's payload, in the direction the quoted packet
    /// travelled, before or after translation); returns the connection and the
    /// direction of the quoted packet.
    pub fn related(&self, quoted: &FlowKey) -> Option<(ConnId, Dir)> {
        self.lookup(quoted).or_else(|| {
            self.lookup(&quoted.reversed())
                .map(|(id, dir)| (id, dir.opposite()))
        })
    }

    /// Whether the external tuple (proto, remote addr:port → NAT addr:port, in
    /// [`NAT_ZONE`]) is a tuple of any tracked connection, of whatever zone — the SNAT
    /// allocator asks so as never to hand out a tuple twice. For ICMP the NAT port is
    /// the echo id and `remote_port` is ignored.
    pub fn nat_tuple_in_use(
        &self,
        proto: u8,
        remote: &[u8; 16],
        remote_port: u16,
        nat: Nat,
    ) -> bool {
        self.lookup(&nat_tuple(proto, remote, remote_port, nat))
            .is_some()
    }

    /// The [`hash`](Self::hash) of the reply tuple a connection with original tuple
    /// `key` has when source-NATed to `nat`, prefetching its bucket (for
    /// [`free_nat`](Self::free_nat)).
    #[inline]
    pub fn hash_nat(&self, key: &FlowKey, nat: Nat) -> KeyHash {
        self.hash(&reply_tuple(key, Some(nat)))
    }

    /// Whether a connection with original tuple `key` may be source-NATed to `nat`
    /// (its reply tuple is no tuple of any tracked connection): then the tuple, for
    /// [`insert_hashed`](Self::insert_hashed). `h` is
    /// [`hash_nat(key, nat)`](Self::hash_nat).
    #[inline]
    pub fn free_nat(&self, key: &FlowKey, nat: Nat, h: KeyHash) -> Option<FreeNat> {
        debug_assert_eq!(
            h.h,
            self.index.hash(&reply_tuple(key, Some(nat))),
            "hash_nat of this tuple"
        );
        // The tuple is only built when a tag matches (the probe proper).
        self.index
            .find(h.h, |r| self.matches(r, &reply_tuple(key, Some(nat))))
            .is_none()
            .then_some(FreeNat {
                nat,
                reply: h.h,
                inserts: self.stats.inserts,
            })
    }

    /// Creates an entry for the first packet of a connection (original direction),
    /// with its state from `l4` (TCP: a SYN opens SYN_SENT, a plain ACK picks the
    /// connection up ESTABLISHED), counting the packet. Refused when the table or the
    /// zone is full, when either tuple is already tracked, or when the packet cannot
    /// open a TCP connection. `acl_generation` is stored with the entry.
    pub fn insert(
        &mut self,
        key: &FlowKey,
        l4: &L4Info,
        len: u32,
        nat: Option<Nat>,
        acl_generation: u64,
        now: Millis,
    ) -> Result<ConnId, InsertError> {
        let h = self.index.hash(key);
        let reply = self.index.hash(&reply_tuple(key, nat));
        let nat = nat.map(|nat| FreeNat {
            nat,
            reply,
            // Not looked at: never the table's count.
            inserts: self.stats.inserts.wrapping_sub(1),
        });
        self.insert_inner(key, h, reply, nat, l4, len, acl_generation, now)
    }

    /// [`insert`](Self::insert) of a key hashed by [`hash`](Self::hash) on this table,
    /// source-NATed as `nat` says (from [`free_nat`](Self::free_nat)). The original
    /// tuple is always checked (two first packets of one connection can be in one
    /// burst); the reply tuple only when a connection was inserted since `nat` was
    /// found free.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn insert_hashed(
        &mut self,
        key: &FlowKey,
        h: KeyHash,
        l4: &L4Info,
        len: u32,
        nat: Option<FreeNat>,
        acl_generation: u64,
        now: Millis,
    ) -> Result<ConnId, InsertError> {
        debug_assert_eq!(h.h, self.index.hash(key), "hash of this key");
        let reply = match nat {
            Some(n) => n.reply,
            None => self.index.hash(&key.reversed()),
        };
        self.insert_inner(key, h.h, reply, nat, l4, len, acl_generation, now)
    }

    /// [`insert`](Self::insert) with the hashes of both tuples given (`h`: the
    /// original, `reply`: the reply tuple's).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn insert_inner(
        &mut self,
        key: &FlowKey,
        h: u64,
        reply: u64,
        nat: Option<FreeNat>,
        l4: &L4Info,
        len: u32,
        acl_generation: u64,
        now: Millis,
    ) -> Result<ConnId, InsertError> {
        if self.free == NIL {
            self.stats.table_full += 1;
            return Err(InsertError::TableFull);
        }
        let zone = usize::from(key.network);
        if self.zone_len[zone] >= self.max_per_zone {
            self.stats.zone_full += 1;
            return Err(InsertError::ZoneFull);
        }
        let mut window = Window::ZERO;
        let mut scales = NO_SCALES;
        let mut flags = 0;
        let code = match key.proto {
            6 => match tcp::first(l4, &mut window, &mut scales) {
                Some((s, liberal)) => {
                    if liberal {
                        flags |= LIBERAL;
                    }
                    s as u8
                }
                None => {
                    self.stats.invalid += 1;
                    return Err(InsertError::Invalid);
                }
            },
            17 => S_UDP_UNREPLIED,
            p if is_icmp(p) => S_ICMP,
            _ => S_OTHER,
        };

        let clash = self.index.find(h, |r| self.matches(r, key)).is_some()
            || match nat {
                Some(n) if n.inserts == self.stats.inserts => false,
                _ => {
                    let reply_key = reply_tuple(key, nat.map(|n| n.nat));
                    self.index
                        .find(reply, |r| self.matches(r, &reply_key))
                        .is_some()
                }
            };
        if clash {
            self.stats.clashes += 1;
            return Err(InsertError::Exists);
        }
        if let Some(a) = self.allowance.as_mut() {
            match a.take(key.network) {
                Ok(()) => {}
                Err(Limit::Total) => {
                    self.stats.table_full += 1;
                    return Err(InsertError::TableFull);
                }
                Err(Limit::Zone) => {
                    self.stats.zone_full += 1;
                    return Err(InsertError::ZoneFull);
                }
            }
        }

        let id = self.free;
        let class = CLASS[usize::from(code)];
        let expires = self.deadline(class, now);
        let cold = &mut self.cold[id as usize];
        self.free = cold.next;
        let (src_hi, dst_hi) = (hi(&key.src), hi(&key.dst));
        cold.src_hi = src_hi;
        cold.dst_hi = dst_hi;
        cold.packets_hi = [0; 2];
        cold.bytes_hi = [0; 2];
        let wide = src_hi != MAPPED_HI || dst_hi != MAPPED_HI;
        let slot = &mut self.hot[id as usize];
        slot.src = lo(&key.src);
        slot.dst = lo(&key.dst);
        slot.src_port = key.src_port;
        slot.dst_port = key.dst_port;
        slot.zone = key.network;
        slot.proto = key.proto;
        slot.addr = key.family as u8 | if wide { WIDE } else { 0 };
        match nat {
            Some(n) => {
                slot.nat_addr = n.nat.addr.octets();
                slot.nat_port = n.nat.port;
                flags |= HAS_NAT;
            }
            None => {
                slot.nat_addr = [0; 4];
                slot.nat_port = 0;
            }
        }
        slot.state = code | flags;
        slot.scales = scales;
        slot.expires = expires;
        slot.acl_gen = acl_generation as u32;
        slot.counts = [0; 2];
        slot.window = window;
        self.count(id as usize, 0, len);
        let placed = self.index.insert(h, id << 1) && self.index.insert(reply, id << 1 | 1);
        debug_assert!(placed, "the index has room for every entry's two keys");
        self.push_tail(id, class);
        self.zone_len[zone] += 1;
        self.len += 1;
        self.acl_latest = self.acl_latest.max(acl_generation);
        self.stats.inserts += 1;
        Ok(ConnId(id))
    }

    /// Advances state and timeout with one packet of direction `dir` and counts it.
    /// An [`TrackVerdict::Invalid`] or [`TrackVerdict::Reopen`] packet changes nothing
    /// (invalid ones are counted in [`CtStats::invalid`]).
    #[inline]
    pub fn track(
        &mut self,
        id: ConnId,
        dir: Dir,
        l4: &L4Info,
        len: u32,
        now: Millis,
    ) -> TrackVerdict {
        let i = id.0 as usize;
        let Some(e) = self.hot.get_mut(i) else {
            self.stats.invalid += 1;
            return TrackVerdict::Invalid;
        };
        let old = e.code();
        let d = dir as usize;
        if old == TcpState::Established as u8 && tcp::pure_ack(l4.tcp_flags) {
            // The common case, taken straight: valid, still ESTABLISHED, refreshed. One
            // copy per direction, so that the window's fields are at fixed offsets.
            match dir {
                Dir::Original => e.established_ack(Dir::Original, l4),
                Dir::Reply => e.established_ack(Dir::Reply, l4),
            }
            let counted = e.count(d, len);
            // `retime`, with the entry at hand.
            let class = CLASS[usize::from(old)];
            let moved = e.set_deadline(class_deadline(&self.timeouts, &self.grids, class, now));
            if !counted {
                self.count_carry(i, d, len);
            }
            self.requeue(id.0, class, class, moved);
            return TrackVerdict::Accept;
        }
        let mut refresh = true;
        let new = match old {
            S_FREE => {
                self.stats.invalid += 1;
                return TrackVerdict::Invalid;
            }
            S_UDP_UNREPLIED if dir == Dir::Reply => S_UDP_ASSURED,
            S_UDP_UNREPLIED | S_UDP_ASSURED | S_ICMP | S_OTHER => old,
            tcp_code => {
                let state = TcpState::from_code(tcp_code).unwrap_or(TcpState::Close);
                let liberal = e.state & LIBERAL != 0;
                match tcp::step(state, dir, l4, &mut e.window, &mut e.scales, liberal) {
                    Step::Invalid => {
                        self.stats.invalid += 1;
                        return TrackVerdict::Invalid;
                    }
                    Step::Reopen => return TrackVerdict::Reopen,
                    Step::Ignore => {
                        refresh = false;
                        old
                    }
                    Step::To(s) => s as u8,
                }
            }
        };
        e.state = (e.state & !CODE) | new;
        if dir == Dir::Reply {
            e.state |= REPLIED;
        }
        self.count(i, d, len);
        if refresh {
            self.retime(id.0, CLASS[usize::from(old)], CLASS[usize::from(new)], now);
        }
        TrackVerdict::Accept
    }

    /// Counts a packet of `len` bytes in direction `d` of entry `i`: in its hot part,
    /// carrying into the cold part once in 128 packets (or 8 MiB).
    #[inline(always)]
    fn count(&mut self, i: usize, d: usize, len: u32) {
        if !self.hot[i].count(d, len) {
            self.count_carry(i, d, len);
        }
    }

    #[cold]
    #[inline(never)]
    fn count_carry(&mut self, i: usize, d: usize, len: u32) {
        let (h, c) = (&mut self.hot[i], &mut self.cold[i]);
        let (packets, bytes) = c.counts(h, d);
        let (packets, bytes) = (packets.wrapping_add(1), bytes.wrapping_add(u64::from(len)));
        c.packets_hi[d] = (packets >> PACKETS_BITS) as u32;
        c.bytes_hi[d] = (bytes >> BYTES_BITS) as u32;
        h.counts[d] = (packets as u32 & PACKETS_LO) << PACKETS_SHIFT | (bytes as u32 & BYTES_LO);
    }

    /// Whether entry `r >> 1` holds `key` in direction `r & 1`.
    #[inline(always)]
    fn matches(&self, r: u32, key: &FlowKey) -> bool {
        self.matches_at(&self.hot[(r >> 1) as usize], r, key)
    }

    /// [`matches`](Self::matches) with the entry's hot part at hand: the cold part is
    /// only read for addresses that are not IPv4-mapped.
    #[inline(always)]
    fn matches_at(&self, e: &Hot, r: u32, key: &FlowKey) -> bool {
        if e.addr & WIDE == 0 {
            e.matches(r, key, MAPPED_HI128, MAPPED_HI128)
        } else {
            let c = &self.cold[(r >> 1) as usize];
            e.matches(r, key, hi128(&c.src_hi), hi128(&c.dst_hi))
        }
    }

    /// [`class_deadline`] with this table's timeouts.
    #[inline(always)]
    fn deadline(&self, class: u8, now: Millis) -> u32 {
        class_deadline(&self.timeouts, &self.grids, class, now)
    }

    /// Sets entry `i`'s deadline for its (new) class and [`requeue`](Self::requeue)s it.
    #[inline(always)]
    fn retime(&mut self, i: u32, old_class: u8, class: u8, now: Millis) {
        let exp = self.deadline(class, now);
        let moved = self.hot[i as usize].set_deadline(exp);
        self.requeue(i, old_class, class, moved);
    }

    /// Moves entry `i` from its class's aging list to the tail of `class`'s, unless
    /// the class is the same and the deadline did not move (whole seconds on a grid,
    /// [`grid_mask`], make that the common case) or it is the tail already.
    #[inline(always)]
    fn requeue(&mut self, i: u32, old_class: u8, class: u8, moved: bool) {
        if old_class == class && (!moved || self.tails[usize::from(class)] == i) {
            return;
        }
        self.unlink(i, old_class);
        self.push_tail(i, class);
    }

    #[inline(always)]
    fn unlink(&mut self, i: u32, class: u8) {
        let c = usize::from(class);
        let (p, n) = {
            let e = &self.cold[i as usize];
            (e.prev, e.next)
        };
        if p == NIL {
            self.heads[c] = n;
        } else {
            self.cold[p as usize].next = n;
        }
        if n == NIL {
            self.tails[c] = p;
        } else {
            self.cold[n as usize].prev = p;
        }
    }

    #[inline(always)]
    fn push_tail(&mut self, i: u32, class: u8) {
        let c = usize::from(class);
        let t = self.tails[c];
        {
            let e = &mut self.cold[i as usize];
            e.prev = t;
            e.next = NIL;
        }
        if t == NIL {
            self.heads[c] = i;
        } else {
            self.cold[t as usize].next = i;
        }
        self.tails[c] = i;
    }

    /// Frees a live entry: aging list, index, counts, free list.
    fn release(&mut self, i: u32) {
        let (h, c) = (self.hot[i as usize], self.cold[i as usize]);
        self.unlink(i, CLASS[usize::from(h.code())]);
        let key = key_of(&h, &c);
        let found = self.index.remove(self.index.hash(&key), i << 1)
            && self
                .index
                .remove(self.index.hash(&reply_tuple(&key, h.nat())), i << 1 | 1);
        debug_assert!(found, "a live entry is indexed under both tuples");
        self.zone_len[usize::from(h.zone)] -= 1;
        if let Some(a) = self.allowance.as_mut() {
            a.give(h.zone);
        }
        self.len -= 1;
        self.hot[i as usize] = FREE_HOT;
        self.cold[i as usize] = Cold {
            next: self.free,
            ..FREE_COLD
        };
        self.free = i;
    }

    /// Removes a connection (no-op for a free slot).
    pub fn remove(&mut self, id: ConnId) {
        if self.hot.get(id.0 as usize).is_some_and(|e| !e.is_free()) {
            self.release(id.0);
            self.stats.removals += 1;
        }
    }

    /// Removes the connections for which `f` is true; returns how many (for flushes).
    pub fn remove_matching(&mut self, mut f: impl FnMut(ConnId, ConnView<'_>) -> bool) -> usize {
        let mut n = 0;
        for i in 0..self.hot.len() as u32 {
            let h = &self.hot[i as usize];
            if !h.is_free()
                && f(
                    ConnId(i),
                    ConnView {
                        h,
                        cold: &self.cold,
                        i: i as usize,
                        acl_latest: self.acl_latest,
                    },
                )
            {
                self.release(i);
                self.stats.removals += 1;
                n += 1;
            }
        }
        n
    }

    /// Expires connections whose deadline is at or before `now`, at most `budget` of
    /// them; returns how many. Each class's list is in deadline order, so this only
    /// looks at list heads.
    pub fn expire(&mut self, now: Millis, budget: usize) -> usize {
        let mut done = 0;
        for step in 0..CLASSES {
            let c = (self.cursor + step) % CLASSES;
            loop {
                if done == budget {
                    self.cursor = (c + 1) % CLASSES;
                    return done;
                }
                let h = self.heads[c];
                if h == NIL || Millis::from(self.hot[h as usize].expires) * 1000 > now {
                    break;
                }
                self.release(h);
                self.stats.expirations += 1;
                done += 1;
            }
        }
        done
    }

    /// A connection, or `None` for a free slot.
    pub fn get(&self, id: ConnId) -> Option<ConnView<'_>> {
        let i = id.0 as usize;
        self.hot.get(i).filter(|h| !h.is_free()).map(|h| ConnView {
            h,
            cold: &self.cold,
            i,
            acl_latest: self.acl_latest,
        })
    }

    /// Records the ACL generation a connection was (re-)checked in.
    pub fn set_acl_generation(&mut self, id: ConnId, generation: u64) {
        if let Some(e) = self.hot.get_mut(id.0 as usize).filter(|e| !e.is_free()) {
            e.acl_gen = generation as u32;
            self.acl_latest = self.acl_latest.max(generation);
        }
    }

    /// All connections, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (ConnId, ConnView<'_>)> {
        let acl_latest = self.acl_latest;
        let cold = &self.cold;
        self.hot
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.is_free())
            .map(move |(i, h)| {
                let view = ConnView {
                    h,
                    cold,
                    i,
                    acl_latest,
                };
                (ConnId(i as u32), view)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removals, flushes and expiry give a table's room in node-wide limits back: two
    /// tables sharing a limit of 40, one fills it, frees it by each way, and the other
    /// then takes all of it.
    #[test]
    fn removed_connections_give_node_wide_room_back() {
        let cfg = CtConfig {
            max_entries: 64,
            max_per_zone: 64,
            ..CtConfig::default()
        };
        let budget = CtBudget::new(40, 40, 2);
        let (mut a, mut b) = (ConnTable::with_seed(&cfg, 1), ConnTable::with_seed(&cfg, 2));
        a.set_budget(Arc::clone(&budget));
        b.set_budget(Arc::clone(&budget));
        let key = |i: u16| {
            FlowKey::v4(
                0,
                17,
                Ipv4Addr::new(10, 1, 0, 2),
                Ipv4Addr::new(8, 8, 8, 8),
                10_000 + i,
                53,
            )
        };
        let fill = |t: &mut ConnTable, now: Millis| {
            (0..64u16)
                .filter(|&i| t.insert(&key(i), &L4Info::NONE, 60, None, 0, now).is_ok())
                .count()
        };
        let now = 1_000;
        assert_eq!(fill(&mut a, now), 40);
        assert_eq!(fill(&mut b, now), 0);
        // One way each: ten removed, the rest flushed or expired.
        for i in 0..10 {
            let (id, _) = a.lookup(&key(i)).expect("tracked");
            a.remove(id);
        }
        assert_eq!(a.remove_matching(|_, v| v.key().src_port < 10_030), 20);
        let later = now + 1000 * Millis::from(a.timeouts().udp_unreplied + 1);
        assert_eq!(a.expire(later, usize::MAX), 10);
        assert!(a.is_empty());
        assert_eq!(fill(&mut b, later), 40);
        assert_eq!(b.stats().table_full, 64 + 24, "refused both times");
    }

    #[test]
    fn bytes_per_connection() {
        assert_eq!(std::mem::size_of::<Hot>(), 64);
        assert_eq!(std::mem::align_of::<Hot>(), 64);
        assert_eq!(std::mem::size_of::<Cold>(), 48);
        assert_eq!(BYTES_PER_CONNECTION, 128);
        let cfg = CtConfig {
            max_entries: 1 << 16,
            ..CtConfig::default()
        };
        let t = ConnTable::with_seed(&cfg, 1);
        assert_eq!(t.memory_bytes() / t.capacity(), BYTES_PER_CONNECTION);
    }

    /// `matches` compares field by field, the reply direction without building the
    /// reply tuple: the same answer as comparing with the entry's tuples, for NATed or
    /// not, TCP/UDP/ICMP/other, IPv4, IPv6 (IPv4-mapped or not, so with the addresses'
    /// first bytes in the cold part or not), and keys that differ from a tuple in any one
    /// field.
    #[test]
    fn match_equals_tuples() {
        let cfg = CtConfig {
            max_entries: 4,
            ..CtConfig::default()
        };
        let mut t = ConnTable::with_seed(&cfg, 11);
        let mut seed = 0x1234_5678_9abc_def0_u64;
        let mut rnd = move || splitmix_test(&mut seed);
        let syn = L4Info {
            tcp_flags: super::super::tcp_flags::SYN,
            ..L4Info::NONE
        };
        let mut wide = 0;
        for _ in 0..20_000 {
            let r = rnd();
            let proto = [6u8, 17, 1, 58, 47][(r % 5) as usize];
            let key = if r & 0x100 != 0 {
                let mut addr = || {
                    let a = rnd() as u128 | u128::from(rnd()) << 64;
                    // Some IPv6 addresses in the IPv4-mapped range.
                    if rnd() % 4 == 0 {
                        (0xFFFF_u128 << 32 | a & 0xFFFF_FFFF).to_be_bytes()
                    } else {
                        a.to_be_bytes()
                    }
                };
                FlowKey {
                    src: addr(),
                    dst: addr(),
                    src_port: rnd() as u16,
                    dst_port: rnd() as u16,
                    network: (rnd() % 3) as u16,
                    proto,
                    family: Family::V6,
                }
            } else {
                FlowKey::v4(
                    (rnd() % 3) as u16,
                    proto,
                    Ipv4Addr::from(rnd() as u32),
                    Ipv4Addr::from(rnd() as u32),
                    rnd() as u16 % 4,
                    rnd() as u16 % 4,
                )
            };
            let nat = (r & 0x200 != 0).then(|| Nat {
                addr: Ipv4Addr::from(rnd() as u32 % 4),
                port: rnd() as u16 % 4,
            });
            let id = t.insert(&key, &syn, 60, nat, 0, 0).expect("room").0;
            let e = t.get(ConnId(id)).expect("live");
            assert_eq!((e.key(), e.nat()), (key, nat));
            let reply = reply_tuple(&key, nat);
            wide += usize::from(t.hot[id as usize].addr & WIDE != 0);
            assert!(t.matches(id << 1 | 1, &reply));
            assert!(t.matches(id << 1, &key));
            // A tuple with one field changed (often to another plausible one).
            for field in 0..16 {
                let mut k = if field < 8 { reply } else { key };
                let x = rnd();
                match field % 8 {
                    0 => k.src[(x % 16) as usize] ^= 1 << ((x >> 8) % 8),
                    1 => k.dst[(x % 16) as usize] ^= 1 << ((x >> 8) % 8),
                    2 => k.src_port = x as u16 % 4,
                    3 => k.dst_port = x as u16 % 4,
                    4 => k.network = (x % 3) as u16,
                    5 => k.proto = [6u8, 17, 1, 58][(x % 4) as usize],
                    6 => k.family = if x & 1 == 0 { Family::V4 } else { Family::V6 },
                    _ => k = if field < 8 { key } else { reply },
                }
                assert_eq!(
                    t.matches(id << 1 | 1, &k),
                    reply == k,
                    "{key:?} {nat:?} {k:?}"
                );
                assert_eq!(t.matches(id << 1, &k), key == k, "{key:?} {k:?}");
            }
            t.remove(ConnId(id));
            // A freed entry matches nothing (the lookup checks a candidate entry that
            // may have been freed since), not even the all-zero key of a fresh slot.
            let zero = FlowKey::v4(0, 0, Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED, 0, 0);
            for k in [key, reply, zero, FlowKey::default()] {
                assert!(!t.matches(id << 1, &k) && !t.matches(id << 1 | 1, &k));
            }
        }
        assert!(wide > 5_000, "{wide}");
    }

    fn splitmix_test(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Every field of two tables' entries, counters and lists.
    fn same_tables(a: &ConnTable, b: &ConnTable) {
        assert_eq!(a.stats, b.stats);
        assert_eq!(
            (a.len, a.free, a.heads, a.tails),
            (b.len, b.free, b.heads, b.tails)
        );
        assert_eq!(a.acl_latest, b.acl_latest);
        assert_eq!(a.zone_len, b.zone_len);
        for (x, y) in a.hot.iter().zip(&b.hot) {
            assert_eq!(format!("{x:?}"), format!("{y:?}"));
        }
        for (x, y) in a.cold.iter().zip(&b.cold) {
            assert_eq!(format!("{x:?}"), format!("{y:?}"));
        }
        assert_eq!(format!("{:?}", a.index), format!("{:?}", b.index));
    }

    /// `insert_hashed` (with the original tuple's hash and a tuple `free_nat` found
    /// free) leaves the table exactly as `insert` does, for NATed and plain TCP, UDP,
    /// ICMP echo and IPv6 first packets, clashes and refusals included.
    #[test]
    fn insert_hashed_equals_insert() {
        let cfg = CtConfig {
            max_entries: 256,
            max_per_zone: 100,
            ..CtConfig::default()
        };
        let (mut a, mut b) = (ConnTable::with_seed(&cfg, 5), ConnTable::with_seed(&cfg, 5));
        let mut seed = 77_u64;
        let mut rnd = move || splitmix_test(&mut seed);
        let node = Ipv4Addr::new(192, 0, 2, 10);
        for round in 0..600u64 {
            let r = rnd();
            let proto = [6u8, 17, 1, 47][(r % 4) as usize];
            let v6 = r & 0x30 == 0x30;
            let key = if v6 {
                FlowKey {
                    src: (u128::from(rnd() % 4)).to_be_bytes(),
                    dst: (u128::from(rnd() % 4) | 1 << 100).to_be_bytes(),
                    src_port: rnd() as u16 % 8,
                    dst_port: 443,
                    network: (rnd() % 2) as u16,
                    proto,
                    family: Family::V6,
                }
            } else {
                let id = rnd() as u16 % 8;
                let (sp, dp) = if proto == 1 { (id, id) } else { (id, 443) };
                FlowKey::v4(
                    (rnd() % 2) as u16,
                    proto,
                    Ipv4Addr::new(10, 0, 0, (rnd() % 4) as u8),
                    Ipv4Addr::new(8, 8, 8, (rnd() % 2) as u8),
                    sp,
                    dp,
                )
            };
            // Few ports, so that NAT tuples clash with replies of other connections.
            let nat = (!v6 && r & 0x40 != 0).then(|| Nat {
                addr: node,
                port: (rnd() % 6) as u16,
            });
            let flags = [
                super::super::tcp_flags::SYN,
                super::super::tcp_flags::ACK,
                0,
            ][(rnd() % 3) as usize];
            let l4 = L4Info {
                tcp_flags: flags,
                seq: rnd() as u32,
                ack: 0,
                window: 1000,
                wscale: None,
                payload_len: 0,
            };
            let want = a.insert(&key, &l4, 60, nat, round, round * 100);
            let h = b.hash(&key);
            let free = nat.and_then(|n| b.free_nat(&key, n, b.hash_nat(&key, n)));
            let got = if nat.is_some() && free.is_none() {
                // The allocator would try another port; the table refuses this one.
                assert!(want.is_err(), "{key:?} {nat:?}");
                b.insert(&key, &l4, 60, nat, round, round * 100)
            } else {
                b.insert_hashed(&key, h, &l4, 60, free, round, round * 100)
            };
            assert_eq!(got, want, "{key:?} {nat:?}");
            same_tables(&a, &b);
            if r % 7 == 0 {
                let first = a.iter().next().map(|(id, _)| id);
                if let Some(id) = first {
                    a.remove(id);
                    b.remove(id);
                }
            }
        }
        assert!(
            a.stats.clashes > 20 && a.stats.inserts > 100,
            "{:?}",
            a.stats
        );
    }

    /// A tuple found free before another connection took it is still refused:
    /// `insert_hashed` looks again once a connection was inserted since.
    #[test]
    fn insert_hashed_checks_a_stale_free_tuple() {
        let cfg = CtConfig {
            max_entries: 64,
            ..CtConfig::default()
        };
        let mut t = ConnTable::with_seed(&cfg, 9);
        let nat = Nat {
            addr: Ipv4Addr::new(192, 0, 2, 10),
            port: 40_000,
        };
        let k1 = FlowKey::v4(
            0,
            17,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(8, 8, 8, 8),
            1,
            53,
        );
        let k2 = FlowKey::v4(
            0,
            17,
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(8, 8, 8, 8),
            1,
            53,
        );
        let f1 = t.free_nat(&k1, nat, t.hash_nat(&k1, nat)).expect("free");
        let f2 = t.free_nat(&k2, nat, t.hash_nat(&k2, nat)).expect("free");
        t.insert_hashed(&k1, t.hash(&k1), &L4Info::NONE, 60, Some(f1), 0, 0)
            .expect("inserted");
        assert!(t.free_nat(&k2, nat, t.hash_nat(&k2, nat)).is_none());
        assert_eq!(
            t.insert_hashed(&k2, t.hash(&k2), &L4Info::NONE, 60, Some(f2), 0, 0),
            Err(InsertError::Exists)
        );
        // The original tuple is always checked, even with a fresh free tuple.
        let other = Nat {
            port: 40_001,
            ..nat
        };
        let f = t
            .free_nat(&k1, other, t.hash_nat(&k1, other))
            .expect("free");
        assert_eq!(
            t.insert_hashed(&k1, t.hash(&k1), &L4Info::NONE, 60, Some(f), 0, 0),
            Err(InsertError::Exists)
        );
        assert_eq!((t.len(), t.stats.clashes), (1, 2));
    }

    /// A differential test across zones: random NATed and plain connections of zones
    /// 0-3 (NATed ones' replies all in zone 0) against a map of every tracked tuple.
    /// Every inserted connection is found under both tuples in the right direction;
    /// an insert is refused exactly when a tuple is taken (so one external tuple is
    /// never given to two zones); a reply tuple moved to another zone is not found
    /// (unless the map has that tuple too); and after removals the same holds.
    #[test]
    fn zones_and_the_nat_zone_against_a_model() {
        use std::collections::HashMap;
        let cfg = CtConfig {
            max_entries: 512,
            max_per_zone: 512,
            ..CtConfig::default()
        };
        for seed in 0..8u64 {
            let mut t = ConnTable::with_seed(&cfg, seed);
            let mut s = seed.wrapping_mul(0x9E37);
            let mut rnd = move || splitmix_test(&mut s);
            let mut model: HashMap<FlowKey, (ConnId, Dir)> = HashMap::new();
            let mut conns: Vec<(ConnId, FlowKey, FlowKey)> = Vec::new();
            for _ in 0..1_500 {
                if rnd() % 5 == 0 && !conns.is_empty() {
                    let (id, k, r) = conns.swap_remove((rnd() % conns.len() as u64) as usize);
                    t.remove(id);
                    model.remove(&k);
                    model.remove(&r);
                    continue;
                }
                let proto = [6u8, 17, 1][(rnd() % 3) as usize];
                // Few addresses and ports, the same in every zone: overlapping pods.
                let sport = 40_000 + (rnd() % 3) as u16;
                let (sp, dp) = if proto == 1 {
                    (sport, sport)
                } else {
                    (sport, 80)
                };
                let key = FlowKey::v4(
                    (rnd() % 4) as u16,
                    proto,
                    Ipv4Addr::new(10, 128, 0, 5 + (rnd() % 2) as u8),
                    Ipv4Addr::new(198, 51, 100, 10),
                    sp,
                    dp,
                );
                let nat = (rnd() % 3 != 0).then(|| Nat {
                    addr: Ipv4Addr::new(192, 0, 2, 10),
                    port: 61_000 + (rnd() % 16) as u16,
                });
                let reply = reply_tuple(&key, nat);
                let taken = model.contains_key(&key) || model.contains_key(&reply);
                let syn = L4Info {
                    tcp_flags: super::super::tcp_flags::SYN,
                    ..L4Info::NONE
                };
                match t.insert(&key, &syn, 60, nat, 0, 0) {
                    Ok(id) => {
                        assert!(!taken, "{key:?} {nat:?}: a taken tuple given out");
                        model.insert(key, (id, Dir::Original));
                        model.insert(reply, (id, Dir::Reply));
                        conns.push((id, key, reply));
                    }
                    Err(InsertError::Exists) => assert!(taken, "{key:?} {nat:?}"),
                    Err(e) => panic!("{e:?}"),
                }
            }
            assert!(conns.len() > 20, "{}", conns.len());
            for &(id, key, reply) in &conns {
                let v = t.get(id).expect("live");
                assert_eq!(v.reply_key(), reply);
                let zone = if v.nat().is_some() {
                    NAT_ZONE
                } else {
                    key.network
                };
                assert_eq!((v.zone(), reply.network), (key.network, zone));
                assert_eq!(t.lookup(&key), Some((id, Dir::Original)));
                assert_eq!(t.lookup(&reply), Some((id, Dir::Reply)));
                for zone in 0..5u16 {
                    let mut moved = reply;
                    moved.network = zone;
                    assert_eq!(t.lookup(&moved), model.get(&moved).copied(), "{moved:?}");
                }
            }
            assert_eq!(t.len(), conns.len());
        }
    }

    /// For an IPv4 key the reply tuple of a NAT is the external tuple the allocator
    /// asks about.
    #[test]
    fn reply_tuple_is_the_nat_tuple() {
        let nat = Nat {
            addr: Ipv4Addr::new(192, 0, 2, 10),
            port: 41_000,
        };
        for proto in [6u8, 17, 1] {
            let (sp, dp) = if proto == 1 { (7, 7) } else { (1234, 443) };
            let k = FlowKey::v4(
                3,
                proto,
                Ipv4Addr::new(10, 0, 0, 1),
                Ipv4Addr::new(8, 8, 8, 8),
                sp,
                dp,
            );
            assert_eq!(
                reply_tuple(&k, Some(nat)),
                nat_tuple(proto, &k.dst, k.dst_port, nat)
            );
            assert_eq!(reply_tuple(&k, Some(nat)).network, NAT_ZONE);
            assert_eq!(reply_tuple(&k, None).network, 3);
        }
    }

    /// The deadline rounds up to whole seconds like `div_ceil`, and saturates.
    #[test]
    fn deadline_rounds_up() {
        let mut seed = 8_u64;
        for now in (0..5_000).chain([u64::MAX - 999, u64::MAX - 1000, u64::MAX]) {
            let t = (splitmix_test(&mut seed) % 500_000) as u32;
            let want = now.div_ceil(1000).min(u64::from(u32::MAX)) as u32;
            assert_eq!(deadline(now, t), want.saturating_add(t), "{now} {t}");
        }
        assert_eq!(deadline(1_000, 30), 31);
        assert_eq!(deadline(1_001, 30), 32);
        assert_eq!(deadline(u64::MAX, 1), u32::MAX);
    }

    /// The counters' low bits live in the hot part and carry into the cold part: the
    /// counts stay exact across carries of either (every 128 packets, every 8 MiB),
    /// in both directions, for packets of any length.
    #[test]
    fn counters_carry_exactly() {
        let cfg = CtConfig {
            max_entries: 4,
            ..CtConfig::default()
        };
        let mut t = ConnTable::with_seed(&cfg, 2);
        let k = FlowKey::v4(
            1,
            17,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(8, 8, 8, 8),
            5353,
            53,
        );
        let id = t.insert(&k, &L4Info::NONE, 60, None, 0, 0).expect("room");
        let mut want = [(1_u64, 60_u64), (0, 0)];
        let mut seed = 3_u64;
        for n in 0..5_000u64 {
            let r = splitmix_test(&mut seed);
            let len = match r % 10 {
                0 => (1 << 23) - 1,
                1 => 1 << 23,
                2 => (1 << 24) + (r >> 40) as u32,
                3 => u32::MAX,
                _ => (r >> 48) as u32,
            };
            let dir = if r & 0x100 == 0 {
                Dir::Original
            } else {
                Dir::Reply
            };
            let w = &mut want[dir as usize];
            *w = (w.0 + 1, w.1 + u64::from(len));
            assert_eq!(
                t.track(id, dir, &L4Info::NONE, len, n),
                TrackVerdict::Accept
            );
            let v = t.get(id).expect("live");
            for d in [Dir::Original, Dir::Reply] {
                assert_eq!((v.packets(d), v.bytes(d)), want[d as usize], "after {n}");
            }
        }
        assert!(want[0].1 > 1 << 39 && want[1].0 > 2_000, "{want:?}");
    }

    #[test]
    fn aging_lists_stay_in_deadline_order() {
        let cfg = CtConfig {
            max_entries: 64,
            ..CtConfig::default()
        };
        let mut t = ConnTable::with_seed(&cfg, 3);
        let ids: Vec<ConnId> = (0..40u16)
            .map(|p| {
                let k = FlowKey::v4(
                    0,
                    17,
                    Ipv4Addr::new(10, 0, 0, 1),
                    Ipv4Addr::LOCALHOST,
                    p,
                    53,
                );
                t.insert(&k, &L4Info::NONE, 60, None, 0, u64::from(p) * 700)
                    .expect("room")
            })
            .collect();
        for (n, id) in ids.iter().enumerate().step_by(3) {
            let dir = if n % 2 == 0 {
                Dir::Reply
            } else {
                Dir::Original
            };
            t.track(*id, dir, &L4Info::NONE, 60, 40_000 + n as u64 * 10);
        }
        assert_lists_in_order(&t);
    }

    /// Every class's aging list is linked both ways, holds only that class and is in
    /// deadline order.
    fn assert_lists_in_order(t: &ConnTable) {
        for c in 0..CLASSES {
            let mut i = t.heads[c];
            let mut prev = NIL;
            let mut last = 0;
            while i != NIL {
                let (e, l) = (&t.hot[i as usize], &t.cold[i as usize]);
                assert_eq!(l.prev, prev);
                assert!(e.expires >= last, "class {c} out of order");
                assert_eq!(usize::from(CLASS[usize::from(e.code())]), c);
                last = e.expires;
                prev = i;
                i = l.next;
            }
            assert_eq!(t.tails[c], prev);
        }
    }

    /// Deadlines of long timeouts sit on a grid under 1/64 of the timeout: never
    /// early, at most a cell late, the aging lists still in order, and a connection
    /// refreshed every second moves in its list once per cell, not once a second.
    #[test]
    fn deadlines_sit_on_a_grid() {
        assert_eq!(grid_mask(432_000), 4095);
        assert_eq!(grid_mask(600), 7);
        assert_eq!(grid_mask(128), 1);
        for short in [0, 1, 30, 120, 127] {
            assert_eq!(grid_mask(short), 0, "{short}");
        }
        let mut seed = 0xd1ce_u64;
        let mut rnd = move || splitmix_test(&mut seed);
        for _ in 0..20_000 {
            let timeout = (rnd() >> (rnd() % 64)) as u32;
            let now = rnd() >> (rnd() % 64);
            let exact = deadline(now, timeout);
            let d = exact | grid_mask(timeout);
            assert!(d >= exact, "{now} {timeout}");
            if exact < u32::MAX {
                assert!(
                    d - exact <= timeout / GRID_STEPS,
                    "{now} {timeout}: {d} {exact}"
                );
            }
            let later = now.saturating_add(rnd() % 10_000_000);
            assert!(deadline(later, timeout) | grid_mask(timeout) >= d);
        }

        // UDP with long timeouts: unreplied 1,000 s (cells of 8 s), assured
        // 100,000 s (cells of 1,024 s).
        let cfg = CtConfig {
            max_entries: 64,
            timeouts: Timeouts {
                udp_unreplied: 1_000,
                udp_assured: 100_000,
                ..Timeouts::default()
            },
            ..CtConfig::default()
        };
        let mut t = ConnTable::with_seed(&cfg, 21);
        let key = |p: u16| {
            FlowKey::v4(
                0,
                17,
                Ipv4Addr::new(10, 0, 0, 1),
                Ipv4Addr::LOCALHOST,
                p,
                53,
            )
        };
        let mut last_refresh = std::collections::HashMap::new();
        let mut now = 1_000u64;
        let ids: Vec<ConnId> = (0..40u16)
            .map(|p| {
                now += rnd() % 3_000;
                let id = t
                    .insert(&key(p), &L4Info::NONE, 60, None, 0, now)
                    .expect("room");
                last_refresh.insert(id, (now, 1_000u32));
                id
            })
            .collect();
        for _ in 0..2_000 {
            now += rnd() % 5_000;
            let id = ids[(rnd() % 40) as usize];
            let dir = if rnd() % 3 == 0 {
                Dir::Reply
            } else {
                Dir::Original
            };
            assert_eq!(
                t.track(id, dir, &L4Info::NONE, 60, now),
                TrackVerdict::Accept
            );
            let assured = t.get(id).expect("live").replied();
            last_refresh.insert(id, (now, if assured { 100_000 } else { 1_000 }));
            assert_lists_in_order(&t);
        }
        for (id, (at, timeout)) in &last_refresh {
            let exact = Millis::from(deadline(*at, *timeout)) * 1000;
            let expires = t.get(*id).expect("live").expires_at();
            assert!(expires >= exact, "expires early");
            assert!(expires - exact <= Millis::from(timeout / GRID_STEPS) * 1000);
        }

        // One connection, assured, refreshed every second for 5,000 s: its deadline
        // (and so its place in the list) moves once per 1,024-second cell.
        let id = ids[0];
        let mut moves = 0;
        let mut expires = t.get(id).expect("live").expires_at();
        for _ in 0..5_000 {
            now += 1_000;
            t.track(id, Dir::Reply, &L4Info::NONE, 60, now);
            let e = t.get(id).expect("live").expires_at();
            moves += usize::from(e != expires);
            expires = e;
        }
        assert!((4..=6).contains(&moves), "{moves} moves");
        assert_lists_in_order(&t);
    }
}
