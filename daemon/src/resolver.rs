//! Next-hop resolution on the control thread: packets whose next hop has no MAC yet
//! are held here (bounded per neighbour and in total) while ARP requests or neighbour
//! solicitations go out, retried every second; an answer releases them, three
//! unanswered tries drop them as `no-neighbour`.

use ferrule_dataplane::dpdk::Mbuf;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Packets held per unresolved neighbour.
pub const MAX_HELD_PER_NEIGHBOR: usize = 16;
/// Packets held in all.
pub const MAX_HELD_TOTAL: usize = 2048;
/// Interval between requests for one neighbour.
pub const RETRY: Duration = Duration::from_secs(1);
/// Requests sent before giving up.
pub const TRIES: u32 = 3;

/// A neighbour being resolved.
#[derive(Debug)]
pub struct Pending {
    /// Output port (configuration index).
    pub port: u16,
    pub held: Vec<Mbuf>,
    pub tries: u32,
    pub last_sent: Option<Instant>,
    pub since: Instant,
}

/// A neighbour due another request: its (network, address) and output port.
pub type Due = ((u16, IpAddr), u16);

/// Every neighbour under resolution, by (network, address).
#[derive(Debug, Default)]
pub struct Resolver {
    pending: HashMap<(u16, IpAddr), Pending>,
    held_total: usize,
}

/// What became of a packet offered to [`Resolver::hold`].
#[derive(Debug)]
pub enum Held {
    /// Held; `true` when a request should go out now (a new resolution).
    Yes(bool),
    /// Not held (limits reached): drop it.
    No(Mbuf),
}

impl Resolver {
    /// Holds `m` until `key` resolves on `port`.
    pub fn hold(&mut self, key: (u16, IpAddr), port: u16, m: Mbuf) -> Held {
        if self.held_total >= MAX_HELD_TOTAL {
            return Held::No(m);
        }
        let now = Instant::now();
        let p = self.pending.entry(key).or_insert_with(|| Pending {
            port,
            held: Vec::new(),
            tries: 0,
            last_sent: None,
            since: now,
        });
        if p.held.len() >= MAX_HELD_PER_NEIGHBOR {
            return Held::No(m);
        }
        p.held.push(m);
        self.held_total += 1;
        Held::Yes(p.last_sent.is_none())
    }

    /// Whether `key` is being resolved.
    /// Gives up every resolution out of `port` (the port is going away); returns the
    /// packets that were held for them.
    pub fn forget_port(&mut self, port: u16) -> Vec<Mbuf> {
        let keys: Vec<(u16, IpAddr)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.port == port)
            .map(|(k, _)| *k)
            .collect();
        let mut held = Vec::new();
        for k in keys {
            if let Some(p) = self.pending.remove(&k) {
                self.held_total -= p.held.len();
                held.extend(p.held);
            }
        }
        held
    }

    pub fn is_pending(&self, key: (u16, IpAddr)) -> bool {
        self.pending.contains_key(&key)
    }

    /// Marks a request for `key` as sent now.
    pub fn sent(&mut self, key: (u16, IpAddr)) {
        if let Some(p) = self.pending.get_mut(&key) {
            p.tries += 1;
            p.last_sent = Some(Instant::now());
        }
    }

    /// The neighbour answered: its held packets, to rewrite and send.
    pub fn resolved(&mut self, key: (u16, IpAddr)) -> Option<Pending> {
        let p = self.pending.remove(&key)?;
        self.held_total -= p.held.len();
        Some(p)
    }

    /// Neighbours due another request, and those that ran out of tries (whose held
    /// packets are returned, to be dropped).
    pub fn due(&mut self, now: Instant) -> (Vec<Due>, Vec<Mbuf>) {
        let mut resend = Vec::new();
        let mut expired = Vec::new();
        let mut gone = Vec::new();
        for (k, p) in &self.pending {
            let due = p.last_sent.is_none_or(|t| now.duration_since(t) >= RETRY);
            if !due {
                continue;
            }
            if p.tries >= TRIES {
                gone.push(*k);
            } else {
                resend.push((*k, p.port));
            }
        }
        for k in gone {
            if let Some(p) = self.pending.remove(&k) {
                self.held_total -= p.held.len();
                expired.extend(p.held);
            }
        }
        (resend, expired)
    }

    /// Neighbours under resolution: (key, port, packets held, seconds since started).
    pub fn pending(&self) -> impl Iterator<Item = ((u16, IpAddr), u16, usize, f64)> + '_ {
        self.pending
            .iter()
            .map(|(k, p)| (*k, p.port, p.held.len(), p.since.elapsed().as_secs_f64()))
    }

    pub fn held_total(&self) -> usize {
        self.held_total
    }
}
