//! The ipcache's metadata layer: prefix → labels, each contribution kept apart by its
//! owner (a DNS name of the name manager, the CIDR policy), and the resolution of a
//! prefix to its complete label set by down-propagation.
//!
//! The rule (issue 22's design: labels flow down): the labels of a prefix are the union of
//! the labels every owner gave to it and to every shorter prefix that contains it, plus
//! `reserved:world` (the root's label: everything outside the cluster); then, among the
//! `cidr:` labels, only the longest prefix's is kept: the CIDR selectors match every
//! `cidr:` label inside their prefix (`selector::CidrSelector`), so the shorter ones add
//! nothing but identities. Addresses of no prefix here are plain world.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Serialize, Serializer};

use crate::labels::{Label, LabelSet, Source};

/// Who gave labels to a prefix. Each owner's labels are added and removed on their own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    /// The name manager, for one DNS name that answered the prefix's address.
    Name(String),
    /// The CIDR selectors of the policies in force.
    CidrPolicy,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Name(n) => write!(f, "name-manager/{n}"),
            Owner::CidrPolicy => f.write_str("cidr-policy"),
        }
    }
}

impl Serialize for Owner {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Prefix → owner → labels.
#[derive(Debug, Clone, Default)]
pub struct IpCache {
    metadata: BTreeMap<IpNet, BTreeMap<Owner, LabelSet>>,
}

/// The largest prefix of the same family starting at `prefix`'s broadcast address: an
/// upper bound for the prefixes `prefix` contains in the map's order.
fn last_inside(prefix: IpNet) -> IpNet {
    match prefix {
        IpNet::V4(p) => IpNet::V4(Ipv4Net::new(p.broadcast(), 32).expect("32 is a valid length")),
        IpNet::V6(p) => IpNet::V6(Ipv6Net::new(p.broadcast(), 128).expect("128 is a valid length")),
    }
}

impl IpCache {
    pub fn new() -> IpCache {
        IpCache::default()
    }

    /// Sets `owner`'s labels on `prefix` (host bits cleared); an empty set removes them.
    /// Returns the prefixes whose resolved labels may have changed: `prefix` and every
    /// longer prefix here inside it.
    pub fn upsert(&mut self, prefix: IpNet, owner: Owner, labels: LabelSet) -> Vec<IpNet> {
        let prefix = prefix.trunc();
        if labels.is_empty() {
            return self.remove(prefix, &owner);
        }
        self.metadata
            .entry(prefix)
            .or_default()
            .insert(owner, labels);
        self.affected(prefix)
    }

    /// Removes `owner`'s labels from `prefix`; returns the prefixes affected, as `upsert`.
    pub fn remove(&mut self, prefix: IpNet, owner: &Owner) -> Vec<IpNet> {
        let prefix = prefix.trunc();
        let affected = self.affected(prefix);
        if let Some(owners) = self.metadata.get_mut(&prefix) {
            owners.remove(owner);
            if owners.is_empty() {
                self.metadata.remove(&prefix);
            }
        }
        affected
    }

    /// `prefix` and the longer prefixes here inside it.
    fn affected(&self, prefix: IpNet) -> Vec<IpNet> {
        let mut out = vec![prefix];
        if prefix.prefix_len() < prefix.max_prefix_len() {
            let range = (
                Bound::Excluded(prefix),
                Bound::Included(last_inside(prefix)),
            );
            out.extend(
                self.metadata
                    .range(range)
                    .map(|(p, _)| *p)
                    .filter(|p| prefix.contains(p)),
            );
        }
        out
    }

    /// Whether any owner labels `prefix` itself.
    pub fn contains(&self, prefix: &IpNet) -> bool {
        self.metadata.contains_key(&prefix.trunc())
    }

    /// The labels owners gave to `prefix` itself, by owner.
    pub fn owners(&self, prefix: &IpNet) -> Option<&BTreeMap<Owner, LabelSet>> {
        self.metadata.get(&prefix.trunc())
    }

    /// The prefixes some owner labels, in order.
    pub fn prefixes(&self) -> impl Iterator<Item = IpNet> + '_ {
        self.metadata.keys().copied()
    }

    /// The complete label set of `prefix` by the down-propagation rule (module docs).
    pub fn resolve(&self, prefix: IpNet) -> LabelSet {
        let prefix = prefix.trunc();
        let mut labels = LabelSet::new();
        for len in 0..=prefix.prefix_len() {
            let outer = IpNet::new(prefix.addr(), len)
                .expect("a length up to the prefix's")
                .trunc();
            if let Some(owners) = self.metadata.get(&outer) {
                for set in owners.values() {
                    labels.extend(set);
                }
            }
        }
        let longest = labels.cidr_prefixes().max_by_key(IpNet::prefix_len);
        let shorter: Vec<Label> = labels
            .iter()
            .filter(|l| l.source() == Source::Cidr && l.cidr_prefix() != longest)
            .cloned()
            .collect();
        for l in &shorter {
            labels.remove(l);
        }
        labels.insert(Label::world());
        labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn set(s: &str) -> LabelSet {
        s.parse().unwrap()
    }

    #[test]
    fn cfp_overlapping_fqdn_and_cidr() {
        let mut c = IpCache::new();
        c.upsert(
            net("52.58.254.253/32"),
            Owner::Name("www.cilium.io".into()),
            set("fqdn:*.cilium.io"),
        );
        let affected = c.upsert(
            net("52.58.254.0/24"),
            Owner::CidrPolicy,
            set("cidr:52.58.254.0/24"),
        );
        assert_eq!(
            affected,
            vec![net("52.58.254.0/24"), net("52.58.254.253/32")]
        );
        assert_eq!(
            c.resolve(net("52.58.254.253/32")),
            set("cidr:52.58.254.0/24,fqdn:*.cilium.io,reserved:world")
        );
        assert_eq!(
            c.resolve(net("52.58.254.0/24")),
            set("cidr:52.58.254.0/24,reserved:world")
        );
        // An FQDN-learned /32 gets no cidr: label of its own.
        assert_eq!(c.resolve(net("18.192.231.252/32")), set("reserved:world"));
    }

    #[test]
    fn only_the_longest_cidr_label_is_kept() {
        let mut c = IpCache::new();
        c.upsert(
            net("192.168.0.0/24"),
            Owner::CidrPolicy,
            set("cidr:192.168.0.0/24"),
        );
        c.upsert(
            net("192.168.0.0/25"),
            Owner::CidrPolicy,
            set("cidr:192.168.0.0/25"),
        );
        c.upsert(
            net("192.168.0.7/32"),
            Owner::Name("a.com".into()),
            set("fqdn:a.com"),
        );
        assert_eq!(
            c.resolve(net("192.168.0.7/32")),
            set("cidr:192.168.0.0/25,fqdn:a.com,reserved:world")
        );
        assert_eq!(
            c.resolve(net("192.168.0.200/32")),
            set("cidr:192.168.0.0/24,reserved:world")
        );
        let affected = c.remove(net("192.168.0.0/25"), &Owner::CidrPolicy);
        assert_eq!(affected, vec![net("192.168.0.0/25"), net("192.168.0.7/32")]);
        assert_eq!(
            c.resolve(net("192.168.0.7/32")),
            set("cidr:192.168.0.0/24,fqdn:a.com,reserved:world")
        );
    }

    #[test]
    fn owners_are_independent() {
        let mut c = IpCache::new();
        let p = net("1.2.3.4/32");
        c.upsert(p, Owner::Name("ebpf.com".into()), set("fqdn:*.com"));
        c.upsert(p, Owner::Name("cilium.io".into()), set("fqdn:*.io"));
        assert_eq!(c.resolve(p), set("fqdn:*.com,fqdn:*.io,reserved:world"));
        c.remove(p, &Owner::Name("cilium.io".into()));
        assert_eq!(c.resolve(p), set("fqdn:*.com,reserved:world"));
        c.upsert(p, Owner::Name("ebpf.com".into()), LabelSet::new());
        assert!(!c.contains(&p));
    }

    #[test]
    fn families_do_not_mix() {
        let mut c = IpCache::new();
        c.upsert(net("0.0.0.0/0"), Owner::CidrPolicy, set("cidr:0.0.0.0/0"));
        c.upsert(
            net("2001:db8::1/128"),
            Owner::Name("a.com".into()),
            set("fqdn:a.com"),
        );
        c.upsert(
            net("192.0.2.1/32"),
            Owner::Name("a.com".into()),
            set("fqdn:a.com"),
        );
        assert_eq!(
            c.resolve(net("2001:db8::1/128")),
            set("fqdn:a.com,reserved:world")
        );
        assert_eq!(
            c.resolve(net("192.0.2.1/32")),
            set("cidr:0.0.0.0/0,fqdn:a.com,reserved:world")
        );
    }

    /// The naive model: for every prefix of the map containing the query, union the
    /// labels, keep the cidr: label of the longest containing prefix that has one.
    fn naive(entries: &[(IpNet, LabelSet)], q: IpNet) -> LabelSet {
        let mut out = LabelSet::new();
        let mut best: Option<IpNet> = None;
        for (p, labels) in entries {
            if p.contains(&q) {
                for l in labels.iter() {
                    match l.cidr_prefix() {
                        Some(c) if best.map_or(true, |b| c.prefix_len() > b.prefix_len()) => {
                            best = Some(c)
                        }
                        Some(_) => {}
                        None => {
                            out.insert(l.clone());
                        }
                    }
                }
            }
        }
        if let Some(b) = best {
            out.insert(Label::cidr(b));
        }
        out.insert(Label::world());
        out
    }

    #[test]
    fn resolution_matches_a_naive_model() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(22);
        for _ in 0..200 {
            let mut c = IpCache::new();
            let mut entries = Vec::new();
            for i in 0..12 {
                let len = rng.gen_range(20..=32u8);
                let addr = std::net::Ipv4Addr::from(0x0a00_0000 | rng.gen_range(0..1u32 << 12));
                let p = IpNet::new(addr.into(), len).unwrap().trunc();
                let labels = if rng.gen_bool(0.5) {
                    LabelSet::from_iter([Label::cidr(p)])
                } else {
                    LabelSet::from_iter([Label::fqdn(&format!("n{i}.com"))])
                };
                let owner = if labels.has_source(Source::Cidr) {
                    Owner::CidrPolicy
                } else {
                    Owner::Name(format!("n{i}"))
                };
                c.upsert(p, owner, labels.clone());
                entries.push((p, labels));
            }
            for _ in 0..20 {
                let addr = std::net::Ipv4Addr::from(0x0a00_0000 | rng.gen_range(0..1u32 << 12));
                let q = IpNet::new(addr.into(), 32).unwrap();
                assert_eq!(c.resolve(q), naive(&entries, q), "query {q}");
            }
        }
    }
}
