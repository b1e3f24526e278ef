//! Connection tracking: the per-worker connection table (zones, the netfilter TCP state
//! machine with window tracking, UDP and ICMP echo, timeouts, limits, SNAT reply tuples)
//! as pure logic, and one worker's conntrack state ([`Conntrack`]: the table, the SNAT
//! port allocator, the burst's clock) — the pipeline stages that use it live in
//! `pipeline::ct`.
//!
//! One [`ConnTable`] per worker, owned and updated through `&mut`; nothing is shared and
//! nothing is allocated after [`ConnTable::new`]. Time is injected by the caller as
//! [`Millis`] from a monotonic clock with (at least) seconds resolution.

#![forbid(unsafe_code)]

mod budget;
mod index;
mod table;
mod tcp;
mod worker;

pub use budget::{Allowance, CtBudget, Limit};
pub use index::KeyHash;
pub use table::{ConnTable, ConnView, CtStats, FreeNat, BYTES_PER_CONNECTION, MAX_ENTRIES};
pub use tcp::{tcp_wscale, TcpState, TcpWindow};
pub use worker::Conntrack;

use crate::wire::TcpPacket;
use serde::{Deserialize, Serialize};
use std::mem::MaybeUninit;
use std::net::Ipv4Addr;

/// Advice on how to back the big arrays a table preallocates, given each array's fresh
/// (not yet written) memory before it is filled — e.g. `dpdk::memory::HugePages`
/// (transparent huge pages). It must not write the memory.
pub trait MemoryAdvice {
    fn advise<T>(&self, fresh: &mut [MaybeUninit<T>]);
}

/// No advice: ordinary pages.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoAdvice;

impl MemoryAdvice for NoAdvice {
    #[inline]
    fn advise<T>(&self, _: &mut [MaybeUninit<T>]) {}
}

/// A vector of `n` copies of `fill`, its memory advised before it is written.
pub(crate) fn preallocated<T: Copy>(n: usize, fill: T, advice: &impl MemoryAdvice) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advice.advise(&mut v.spare_capacity_mut()[..n]);
    v.resize(n, fill);
    v
}

/// Hints that the cache line holding `r` will be read soon (a no-op without the DPDK
/// layer, which holds the instruction).
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    #[cfg(feature = "dpdk")]
    crate::dpdk::memory::prefetch(r);
    #[cfg(not(feature = "dpdk"))]
    let _ = r;
}

/// Monotonic time in milliseconds, injected by the caller (tests use a fake clock).
/// Seconds resolution is enough: timeouts are whole seconds and deadlines are kept
/// in whole seconds, rounded up (an entry never expires early), and for timeouts of
/// 128 s or more to a grid under 1/64 of the timeout.
pub type Millis = u64;

/// Timeouts per state, in seconds. The defaults are netfilter's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    pub tcp_syn_sent: u32,
    pub tcp_syn_recv: u32,
    pub tcp_established: u32,
    pub tcp_fin_wait: u32,
    pub tcp_close_wait: u32,
    pub tcp_last_ack: u32,
    pub tcp_time_wait: u32,
    pub tcp_close: u32,
    pub udp_unreplied: u32,
    pub udp_assured: u32,
    pub icmp: u32,
    /// Any other protocol (netfilter's `nf_conntrack_generic_timeout`).
    pub generic: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_syn_sent: 120,
            tcp_syn_recv: 60,
            tcp_established: 432_000,
            tcp_fin_wait: 120,
            tcp_close_wait: 60,
            tcp_last_ack: 30,
            tcp_time_wait: 120,
            tcp_close: 10,
            udp_unreplied: 30,
            udp_assured: 120,
            icmp: 30,
            generic: 600,
        }
    }
}

/// Connection-table limits and timeouts (one table per worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CtConfig {
    /// Most connections in one table (one worker); memory is preallocated for all of
    /// them. Clamped to [`MAX_ENTRIES`].
    pub max_entries: u32,
    /// Most connections of one zone (network) in one table.
    pub max_per_zone: u32,
    pub timeouts: Timeouts,
}

impl Default for CtConfig {
    fn default() -> Self {
        CtConfig {
            max_entries: 262_144,
            max_per_zone: 262_144,
            timeouts: Timeouts::default(),
        }
    }
}

/// The state of a tracked connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnState {
    Tcp(TcpState),
    /// UDP, no reply seen yet.
    UdpUnreplied,
    /// UDP, a reply was seen.
    UdpAssured,
    /// ICMP or ICMPv6 echo, by identifier ([`ConnView::replied`] tells if a reply was seen).
    IcmpEcho,
    /// Any other protocol, tracked by addresses (and ports when the key has them).
    Other,
}

impl ConnState {
    /// The name shown in dumps: netfilter's TCP state names, `UNREPLIED`/`ASSURED` for
    /// UDP, `ECHO` and `OTHER`.
    pub const fn name(self) -> &'static str {
        match self {
            ConnState::Tcp(s) => s.name(),
            ConnState::UdpUnreplied => "UNREPLIED",
            ConnState::UdpAssured => "ASSURED",
            ConnState::IcmpEcho => "ECHO",
            ConnState::Other => "OTHER",
        }
    }
}

/// Every name [`ConnState::name`] gives, in the order dumps document them (what a
/// state filter may name).
pub const STATE_NAMES: [&str; 13] = [
    "SYN_SENT",
    "SYN_RECV",
    "ESTABLISHED",
    "FIN_WAIT",
    "CLOSE_WAIT",
    "LAST_ACK",
    "TIME_WAIT",
    "CLOSE",
    "SYN_SENT2",
    "UNREPLIED",
    "ASSURED",
    "ECHO",
    "OTHER",
];

impl std::fmt::Display for ConnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Direction of a packet relative to the connection's first packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Dir {
    Original = 0,
    Reply = 1,
}

impl Dir {
    /// The other direction.
    #[inline]
    pub const fn opposite(self) -> Dir {
        match self {
            Dir::Original => Dir::Reply,
            Dir::Reply => Dir::Original,
        }
    }

    #[inline]
    pub(crate) const fn from_bit(bit: u32) -> Dir {
        if bit & 1 == 0 {
            Dir::Original
        } else {
            Dir::Reply
        }
    }
}

/// TCP flag bits of [`L4Info::tcp_flags`]: the low byte of the wire's
/// [`TcpFlags`](crate::wire::TcpFlags), as the tracker keeps it.
pub mod tcp_flags {
    use crate::wire::TcpFlags;

    const fn low(f: TcpFlags) -> u8 {
        (f.0 & 0xff) as u8
    }

    pub const FIN: u8 = low(TcpFlags::FIN);
    pub const SYN: u8 = low(TcpFlags::SYN);
    pub const RST: u8 = low(TcpFlags::RST);
    pub const PSH: u8 = low(TcpFlags::PSH);
    pub const ACK: u8 = low(TcpFlags::ACK);
    pub const URG: u8 = low(TcpFlags::URG);
    pub const ECE: u8 = low(TcpFlags::ECE);
    pub const CWR: u8 = low(TcpFlags::CWR);
}

/// What the tracker needs from a packet, filled by the caller from the parsed headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct L4Info {
    /// Raw TCP flags byte; 0 for non-TCP.
    pub tcp_flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// The TCP window field as sent (unscaled).
    pub window: u16,
    /// The window-scale option of a SYN or SYN-ACK ([`tcp_wscale`] reads it). Leaving
    /// it `None` on a SYN that carried it makes window tracking assume no scaling,
    /// which under-estimates windows and can make legitimate RSTs look out of window.
    pub wscale: Option<u8>,
    /// Transport payload bytes (TCP: after the header and options).
    pub payload_len: u32,
}

impl L4Info {
    /// For a packet without a TCP header (UDP, ICMP, others).
    pub const NONE: L4Info = L4Info {
        tcp_flags: 0,
        seq: 0,
        ack: 0,
        window: 0,
        wscale: None,
        payload_len: 0,
    };

    /// From a TCP header; `payload_len` is the IP payload length minus the TCP header
    /// length (the buffer may hold Ethernet padding, so it is not taken from it). The
    /// window-scale option is read on SYNs.
    #[inline]
    pub fn from_tcp<T: AsRef<[u8]>>(tcp: &TcpPacket<T>, payload_len: u32) -> L4Info {
        let flags = tcp.flags().bits() as u8;
        L4Info {
            tcp_flags: flags,
            seq: tcp.seq_number(),
            ack: tcp.ack_number(),
            window: tcp.window_len(),
            wscale: if flags & tcp_flags::SYN != 0 {
                tcp_wscale(tcp.options())
            } else {
                None
            },
            payload_len,
        }
    }
}

/// Source NAT of a connection: the original source address/port (or ICMP echo id)
/// became `addr:port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nat {
    pub addr: Ipv4Addr,
    pub port: u16,
}

/// The zone the reply direction of every source-NATed connection is tracked in: the
/// default network's (0), where the node IPs and the uplinks are. A masqueraded
/// connection's original tuple stays in its own zone (the pod's network); its reply
/// tuple (remote → node IP:SNAT port) is in this one, so that the replies of pods of
/// different networks with the same address are told apart by their SNAT port alone,
/// and the SNAT allocator, which checks reply tuples against the table, never hands
/// out one external tuple to two zones (as OVN-Kubernetes' "SNAT to the node IP in
/// zone 0").
pub const NAT_ZONE: u16 = 0;

/// A connection's slot in its table. Valid until the connection is removed or expires;
/// the slot is then reused, so do not keep ids across bursts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(u32);

impl ConnId {
    /// The slot number (for dumps and traces).
    #[inline]
    pub const fn index(self) -> u32 {
        self.0
    }
}

/// What [`ConnTable::track`] decided about a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackVerdict {
    /// Part of the connection; state, timeout and counters were updated.
    Accept,
    /// E.g. an out-of-window RST or a bad transition: drop the packet, count it
    /// `ct-invalid`. The entry is unchanged.
    Invalid,
    /// A new SYN on a closing entry (TIME_WAIT or CLOSE): remove the entry and treat
    /// the packet as the first of a new connection.
    Reopen,
}

/// Why [`ConnTable::insert`] refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum InsertError {
    /// The table holds `max_entries` connections (count it `ct-table-full`).
    #[error("ct-table-full")]
    TableFull,
    /// The zone holds `max_per_zone` connections (count it `ct-table-full`).
    #[error("ct-zone-full")]
    ZoneFull,
    /// The original or the reply tuple already belongs to a tracked connection (a
    /// clash, e.g. a SNAT tuple in use): nothing was inserted.
    #[error("ct-exists")]
    Exists,
    /// The packet cannot open a connection (a TCP packet that is neither a SYN nor a
    /// plain ACK, or has an invalid flag combination): count it `ct-invalid`.
    #[error("ct-invalid")]
    Invalid,
}

/// Whether `proto` is ICMP or ICMPv6 (echo keys carry the identifier in both ports).
#[inline]
pub(crate) const fn is_icmp(proto: u8) -> bool {
    proto == 1 || proto == 58
}
