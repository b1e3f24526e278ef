//! The name manager's DNS cache: each name → the addresses its answers gave, each with its
//! expiry (the answer's TTL raised to the minimum TTL), and the endpoints (pods,
//! `namespace/name`) that looked the name up; the per-name address limit; and the
//! garbage collection that forgets an address once it has expired and no tracked
//! connection uses it. When every endpoint that looked a name up is gone, the name's
//! addresses expire at once.
//!
//! Each name owns the ipcache labels its addresses get (`ipcache::Owner::Name`), so two
//! names answering one address label it independently. Which labels is the façade's
//! business (those of the selectors that select the name); this cache only says which
//! (name, address) pairs appear and disappear.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Seconds since the Unix epoch; the caller's clock (the crate reads none).
pub type Timestamp = u64;

/// One address of a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpEntry {
    pub ip: IpAddr,
    /// When the address was last seen in an answer.
    pub seen: Timestamp,
    /// When its TTL (raised to the minimum TTL) runs out.
    pub expires: Timestamp,
}

/// What one answer did to a name's addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Learned {
    /// Addresses new for this name.
    pub added: Vec<IpAddr>,
    /// Addresses already known, their expiry pushed out.
    pub refreshed: Vec<IpAddr>,
    /// Older addresses of the name evicted to stay within the per-name limit.
    pub evicted: Vec<IpAddr>,
    /// Addresses of this answer beyond the per-name limit, not kept.
    pub refused: Vec<IpAddr>,
}

/// One name's addresses and who asked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameEntry {
    pub ips: BTreeMap<IpAddr, IpEntry>,
    /// The endpoints whose lookups gave these addresses (none: node-wide lookups only).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub endpoints: BTreeSet<String>,
}

/// The DNS cache of the name manager.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameCache {
    names: BTreeMap<String, NameEntry>,
}

impl NameCache {
    pub fn new() -> NameCache {
        NameCache::default()
    }

    /// Records an answer for `name` (canonical form) to `endpoint`'s lookup (`None`: a
    /// lookup of no particular endpoint). Each TTL is raised to `min_ttl`.
    /// At most `max_ips` addresses are kept for a name: past it, the name's addresses
    /// that expire soonest (not those of this answer) are evicted first; if the answer
    /// alone has more than `max_ips` addresses, its first `max_ips` are kept and the
    /// rest refused.
    pub fn learn(
        &mut self,
        name: &str,
        endpoint: Option<&str>,
        records: &[(IpAddr, u32)],
        now: Timestamp,
        min_ttl: u32,
        max_ips: usize,
    ) -> Learned {
        let mut learned = Learned::default();
        let entry = self.names.entry(name.to_string()).or_default();
        if let Some(ep) = endpoint {
            entry.endpoints.insert(ep.to_string());
        }
        let entries = &mut entry.ips;
        let mut in_answer: Vec<IpAddr> = Vec::new();
        for &(ip, ttl) in records {
            if in_answer.contains(&ip) {
                continue;
            }
            if in_answer.len() >= max_ips {
                learned.refused.push(ip);
                continue;
            }
            in_answer.push(ip);
            let expires = now.saturating_add(u64::from(ttl.max(min_ttl)));
            match entries.get_mut(&ip) {
                Some(e) => {
                    e.seen = now;
                    e.expires = e.expires.max(expires);
                    learned.refreshed.push(ip);
                }
                None => {
                    entries.insert(
                        ip,
                        IpEntry {
                            ip,
                            seen: now,
                            expires,
                        },
                    );
                    learned.added.push(ip);
                }
            }
        }
        if entries.len() > max_ips {
            let mut older: Vec<IpEntry> = entries
                .values()
                .filter(|e| !in_answer.contains(&e.ip))
                .copied()
                .collect();
            older.sort_by_key(|e| (e.expires, e.ip));
            for e in older.into_iter().take(entries.len() - max_ips) {
                entries.remove(&e.ip);
                learned.evicted.push(e.ip);
            }
        }
        if entries.is_empty() {
            self.names.remove(name);
        }
        learned
    }

    /// An endpoint is gone: it no longer counts as having looked any name up. The
    /// addresses of a name no remaining endpoint looked up expire at `now` (the next
    /// `gc` forgets those no connection uses). Returns those names.
    pub fn endpoint_gone(&mut self, endpoint: &str, now: Timestamp) -> Vec<String> {
        let mut expired = Vec::new();
        for (name, entry) in &mut self.names {
            if entry.endpoints.remove(endpoint) && entry.endpoints.is_empty() {
                for e in entry.ips.values_mut() {
                    e.expires = e.expires.min(now);
                }
                expired.push(name.clone());
            }
        }
        expired
    }

    /// Forgets one (name, address) pair (an answer the circuit breaker refused).
    pub fn forget(&mut self, name: &str, ip: IpAddr) -> bool {
        let Some(entry) = self.names.get_mut(name) else {
            return false;
        };
        let removed = entry.ips.remove(&ip).is_some();
        if entry.ips.is_empty() {
            self.names.remove(name);
        }
        removed
    }

    /// Forgets the addresses that have expired at `now` and that `in_use` (the
    /// connection tracker) says no connection uses. Returns the (name, address) pairs
    /// forgotten; a name left without addresses is forgotten too.
    pub fn gc(&mut self, now: Timestamp, in_use: &dyn Fn(IpAddr) -> bool) -> Vec<(String, IpAddr)> {
        let mut gone = Vec::new();
        self.names.retain(|name, entry| {
            entry.ips.retain(|ip, e| {
                let keep = e.expires > now || in_use(*ip);
                if !keep {
                    gone.push((name.clone(), *ip));
                }
                keep
            });
            !entry.ips.is_empty()
        });
        gone
    }

    /// The addresses of a name.
    pub fn ips(&self, name: &str) -> impl Iterator<Item = &IpEntry> {
        self.names
            .get(name)
            .into_iter()
            .flat_map(|m| m.ips.values())
    }

    /// Every name with its entry, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &NameEntry)> {
        self.names.iter().map(|(n, e)| (n.as_str(), e))
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ttl_is_raised_to_the_minimum_and_refreshed() {
        let mut c = NameCache::new();
        let l = c.learn(
            "a.com",
            None,
            &[
                (ip("192.0.2.1"), 5),
                (ip("192.0.2.2"), 600),
                (ip("192.0.2.1"), 5),
            ],
            1000,
            60,
            10,
        );
        assert_eq!(l.added, vec![ip("192.0.2.1"), ip("192.0.2.2")]);
        let exp: Vec<_> = c.ips("a.com").map(|e| (e.ip, e.expires)).collect();
        assert_eq!(exp, vec![(ip("192.0.2.1"), 1060), (ip("192.0.2.2"), 1600)]);
        let l = c.learn("a.com", None, &[(ip("192.0.2.1"), 100)], 1010, 60, 10);
        assert_eq!(l.refreshed, vec![ip("192.0.2.1")]);
        assert!(l.added.is_empty());
        assert_eq!(c.ips("a.com").next().unwrap().expires, 1110);
        // A shorter TTL never pulls an expiry in.
        c.learn("a.com", None, &[(ip("192.0.2.2"), 1)], 1020, 0, 10);
        assert_eq!(c.ips("a.com").nth(1).unwrap().expires, 1600);
    }

    #[test]
    fn gc_keeps_unexpired_and_in_use_addresses() {
        let mut c = NameCache::new();
        c.learn(
            "a.com",
            None,
            &[
                (ip("192.0.2.1"), 10),
                (ip("192.0.2.2"), 10),
                (ip("192.0.2.3"), 100),
            ],
            0,
            0,
            10,
        );
        c.learn("b.com", None, &[(ip("192.0.2.1"), 10)], 0, 0, 10);
        assert!(c.gc(9, &|_| false).is_empty());
        let busy = ip("192.0.2.2");
        let gone = c.gc(10, &|i| i == busy);
        assert_eq!(
            gone,
            vec![
                ("a.com".to_string(), ip("192.0.2.1")),
                ("b.com".to_string(), ip("192.0.2.1"))
            ]
        );
        assert_eq!(c.len(), 1, "b.com has no address left");
        let gone = c.gc(10, &|_| false);
        assert_eq!(gone, vec![("a.com".to_string(), busy)]);
        assert_eq!(c.ips("a.com").count(), 1);
    }

    #[test]
    fn limit_evicts_soonest_expiring_then_refuses_beyond_one_answer() {
        let mut c = NameCache::new();
        c.learn(
            "s3.com",
            None,
            &[
                (ip("10.0.0.1"), 50),
                (ip("10.0.0.2"), 10),
                (ip("10.0.0.3"), 30),
            ],
            0,
            0,
            3,
        );
        let l = c.learn(
            "s3.com",
            None,
            &[(ip("10.0.0.4"), 5), (ip("10.0.0.5"), 5)],
            1,
            0,
            3,
        );
        assert_eq!(l.added.len(), 2);
        assert_eq!(l.evicted, vec![ip("10.0.0.2"), ip("10.0.0.3")]);
        assert_eq!(c.ips("s3.com").count(), 3);
        let l = c.learn(
            "s3.com",
            None,
            &[
                (ip("10.0.1.1"), 5),
                (ip("10.0.1.2"), 5),
                (ip("10.0.1.3"), 5),
                (ip("10.0.1.4"), 5),
            ],
            2,
            0,
            3,
        );
        assert_eq!(l.refused, vec![ip("10.0.1.4")]);
        assert_eq!(l.evicted.len(), 3);
        let kept: Vec<_> = c.ips("s3.com").map(|e| e.ip).collect();
        assert_eq!(kept, vec![ip("10.0.1.1"), ip("10.0.1.2"), ip("10.0.1.3")]);
    }

    #[test]
    fn forget_removes_one_pair() {
        let mut c = NameCache::new();
        c.learn("a.com", None, &[(ip("192.0.2.1"), 10)], 0, 0, 10);
        assert!(c.forget("a.com", ip("192.0.2.1")));
        assert!(!c.forget("a.com", ip("192.0.2.1")));
        assert!(c.is_empty());
    }

    #[test]
    fn addresses_expire_when_every_asker_is_gone() {
        let mut c = NameCache::new();
        c.learn("a.com", Some("ns/p1"), &[(ip("192.0.2.1"), 600)], 0, 0, 10);
        c.learn("a.com", Some("ns/p2"), &[(ip("192.0.2.2"), 600)], 0, 0, 10);
        c.learn("b.com", None, &[(ip("192.0.2.3"), 600)], 0, 0, 10);
        assert!(
            c.endpoint_gone("ns/p1", 10).is_empty(),
            "p2 still asked a.com"
        );
        assert!(c.gc(10, &|_| false).is_empty());
        assert_eq!(c.endpoint_gone("ns/p2", 20), vec!["a.com".to_string()]);
        let busy = ip("192.0.2.2");
        let gone = c.gc(20, &|i| i == busy);
        assert_eq!(gone, vec![("a.com".to_string(), ip("192.0.2.1"))]);
        assert!(c.endpoint_gone("ns/p3", 20).is_empty());
        assert_eq!(
            c.ips("b.com").count(),
            1,
            "node-wide lookups are not expired"
        );
    }
}
