//! What the control thread asks the workers about their connection tables — dump,
//! flush, statistics — and what they answer. Each worker owns its table; it answers
//! between bursts, through bounded queues in [`crate::worker::Shared`].

use crate::conntrack::{ConnTable, ConnView, CtStats, Dir, Millis, Nat};
use crate::flow::FlowKey;
use std::net::IpAddr;

/// Which connections a request is about; every given field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CtFilter {
    /// Zone (network index).
    pub zone: Option<u16>,
    /// Source address of the original direction.
    pub src: Option<IpAddr>,
    /// Destination address of the original direction.
    pub dst: Option<IpAddr>,
    pub proto: Option<u8>,
    /// A port of either end, in either direction.
    pub port: Option<u16>,
    /// State name as dumps show it (`ESTABLISHED`, `ASSURED`, …), any case.
    pub state: Option<String>,
    /// Only masqueraded connections.
    pub nat_only: bool,
}

impl CtFilter {
    /// Whether `conn` matches.
    pub fn matches(&self, conn: &ConnView<'_>) -> bool {
        let key = conn.key();
        let reply = conn.reply_key();
        self.zone.is_none_or(|z| conn.zone() == z)
            && self.src.is_none_or(|a| key.src_ip() == a)
            && self.dst.is_none_or(|a| key.dst_ip() == a)
            && self.proto.is_none_or(|p| key.proto == p)
            && self.port.is_none_or(|p| {
                [key.src_port, key.dst_port, reply.src_port, reply.dst_port].contains(&p)
            })
            && self
                .state
                .as_ref()
                .is_none_or(|s| conn.state().name().eq_ignore_ascii_case(s))
            && (!self.nat_only || conn.nat().is_some())
    }
}

/// A request to one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtRequest {
    /// The matching connections, at most `limit`.
    Dump { filter: CtFilter, limit: usize },
    /// Remove the matching connections.
    Flush { filter: CtFilter },
    /// Counters and occupancy.
    Stats,
    /// Which of these addresses an end of some connection has (either direction, after
    /// NAT too): the FQDN garbage collection keeps an expired address while one does.
    InUse { addrs: Vec<IpAddr> },
}

/// One connection as a dump shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    pub zone: u16,
    /// The original direction's tuple, and the reply direction's (after NAT).
    pub key: FlowKey,
    pub reply_key: FlowKey,
    pub state: &'static str,
    /// Milliseconds before it expires unless a packet refreshes it.
    pub time_left_ms: u64,
    /// Packets and bytes, original then reply direction.
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
    pub nat: Option<Nat>,
}

impl ConnInfo {
    fn of(conn: &ConnView<'_>, now: Millis) -> ConnInfo {
        ConnInfo {
            zone: conn.zone(),
            key: conn.key(),
            reply_key: conn.reply_key(),
            state: conn.state().name(),
            time_left_ms: conn.time_left(now),
            packets: [conn.packets(Dir::Original), conn.packets(Dir::Reply)],
            bytes: [conn.bytes(Dir::Original), conn.bytes(Dir::Reply)],
            nat: conn.nat(),
        }
    }
}

/// A worker's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtReply {
    InUse {
        worker: u16,
        used: Vec<IpAddr>,
    },
    Dump {
        worker: u16,
        conns: Vec<ConnInfo>,
        /// More matched than `limit`.
        truncated: bool,
    },
    Flush {
        worker: u16,
        removed: usize,
    },
    Stats {
        worker: u16,
        stats: CtStats,
        entries: usize,
        capacity: usize,
        /// Entries per zone, zones with none left out.
        zones: Vec<(u16, usize)>,
    },
}

/// Answers `request` from `table` (on the worker that owns it).
pub fn answer(worker: u16, table: &mut ConnTable, request: &CtRequest, now: Millis) -> CtReply {
    match request {
        CtRequest::Dump { filter, limit } => {
            let mut conns = Vec::new();
            let mut truncated = false;
            for (_, conn) in table.iter() {
                if filter.matches(&conn) {
                    if conns.len() == *limit {
                        truncated = true;
                        break;
                    }
                    conns.push(ConnInfo::of(&conn, now));
                }
            }
            CtReply::Dump {
                worker,
                conns,
                truncated,
            }
        }
        CtRequest::InUse { addrs } => {
            let wanted: std::collections::HashSet<IpAddr> = addrs.iter().copied().collect();
            let mut used = std::collections::HashSet::new();
            if !wanted.is_empty() {
                for (_, conn) in table.iter() {
                    for key in [conn.key(), conn.reply_key()] {
                        for ip in [key.src_ip(), key.dst_ip()] {
                            if wanted.contains(&ip) {
                                used.insert(ip);
                            }
                        }
                    }
                }
            }
            CtReply::InUse {
                worker,
                used: used.into_iter().collect(),
            }
        }
        CtRequest::Flush { filter } => CtReply::Flush {
            worker,
            removed: table.remove_matching(|_, conn| filter.matches(&conn)),
        },
        CtRequest::Stats => {
            let mut zones: Vec<(u16, usize)> = Vec::new();
            for (_, conn) in table.iter() {
                match zones.iter_mut().find(|(z, _)| *z == conn.zone()) {
                    Some((_, n)) => *n += 1,
                    None => zones.push((conn.zone(), 1)),
                }
            }
            zones.sort_unstable();
            CtReply::Stats {
                worker,
                stats: *table.stats(),
                entries: table.len(),
                capacity: table.capacity(),
                zones,
            }
        }
    }
}
