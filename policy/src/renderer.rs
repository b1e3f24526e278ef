//! The renderer cache: turns the configurator's per-pod rules of a node's pods into
//! Ferrule ACL tables (the seed's ACL renderer) and diffs generations.
//!
//! - **Local table** (egress of each pod's port): the pod's `to_pod` rules combined
//!   with the `from_pod` rules of every other local pod (`CombineRules`): when what a
//!   local pod Q may send to the pod is less than what the pod accepts from Q, the
//!   rules from Q's address are replaced by their intersection and a deny from Q, put
//!   first. Permits are `reflect`, so a connection admitted to the pod is tracked and
//!   the pod's replies are not held against its own egress policy in the global table;
//!   a pod whose egress is restricted always gets a table (`reflect` everything when
//!   nothing else), for the same reason.
//! - **Reflective table** `reflect-all` on the ingress of every pod with a local
//!   table: the pod's own connections are tracked, so replies skip its local table.
//! - **Global table** `global` (egress of every uplink): the `from_pod` rules of every
//!   local pod with the pod's address as source, then permit everything; left out
//!   when no local pod's egress is restricted.
//!
//! Pods with identical local tables share one, named `pol-` and a hash of its rules,
//! so a table's name changes exactly when its content does.

use super::cache::{Key, Pod, L4};
use super::configurator::{dst_family, PodRules};
use super::subnet::host;
use ferrule_api::acl::AttachTarget;
use ferrule_api::acl::{AclApply, AclAttach, AclTable, DnsPolicy};
use ferrule_dataplane::acl::table::Direction;
use ferrule_dataplane::acl::{Action, PortRange, Prefix, Proto, Rule};
use rustc_hash::FxHashSet;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// Name of the reflective ingress table.
pub const REFLECT_TABLE: &str = "reflect-all";
/// Name of the global (uplink egress) table.
pub const GLOBAL_TABLE: &str = "global";
/// Origin of rules the renderer adds itself.
pub const RENDERER_ORIGIN: &str = "ferrule:renderer";

/// Inclusive port intervals, sorted and disjoint.
type Ranges = Vec<(u16, u16)>;

const FULL: (u16, u16) = (0, 65535);

fn union(a: &Ranges, b: &Ranges) -> Ranges {
    let mut all: Ranges = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Ranges = Vec::with_capacity(all.len());
    for (lo, hi) in all {
        match out.last_mut() {
            Some(last) if u32::from(lo) <= u32::from(last.1) + 1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

fn intersect(a: &Ranges, b: &Ranges) -> Ranges {
    let mut out = Vec::new();
    for &(alo, ahi) in a {
        for &(blo, bhi) in b {
            let (lo, hi) = (alo.max(blo), ahi.min(bhi));
            if lo <= hi {
                out.push((lo, hi));
            }
        }
    }
    union(&out, &Vec::new())
}

fn minus(a: &Ranges, b: &Ranges) -> Ranges {
    let mut out = a.clone();
    for &(blo, bhi) in b {
        let mut next = Vec::new();
        for (lo, hi) in out {
            if bhi < lo || blo > hi {
                next.push((lo, hi));
                continue;
            }
            if blo > lo {
                next.push((lo, blo - 1));
            }
            if bhi < hi {
                next.push((bhi + 1, hi));
            }
        }
        out = next;
    }
    out
}

/// The traffic a rule list lets through between two addresses: per transport
/// protocol (TCP, UDP, SCTP) the destination ports, and whether every other protocol
/// passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// Destination ports per protocol, indexed like [`L4::ALL`].
    pub ports: [Ranges; 3],
    /// Whether protocols other than TCP, UDP and SCTP pass.
    pub other: bool,
}

impl Allowed {
    /// Everything.
    pub fn all() -> Allowed {
        Allowed {
            ports: [vec![FULL], vec![FULL], vec![FULL]],
            other: true,
        }
    }

    /// Nothing.
    pub fn none() -> Allowed {
        Allowed {
            ports: [Vec::new(), Vec::new(), Vec::new()],
            other: false,
        }
    }

    /// Whether everything in `self` is in `other`.
    pub fn subset_of(&self, other: &Allowed) -> bool {
        (!self.other || other.other)
            && (0..3).all(|i| minus(&self.ports[i], &other.ports[i]).is_empty())
    }

    /// What both let through.
    pub fn intersect(&self, other: &Allowed) -> Allowed {
        Allowed {
            ports: [0, 1, 2].map(|i| intersect(&self.ports[i], &other.ports[i])),
            other: self.other && other.other,
        }
    }

    /// What `rules` (first match wins, no match denies; an empty list passes
    /// everything) let through from `src` to `dst`. Rules with a `dst_selector` never
    /// match (remote identities are not pod addresses).
    pub fn of(rules: &[Rule], src: IpAddr, dst: IpAddr) -> Allowed {
        if rules.is_empty() {
            return Allowed::all();
        }
        Allowed::of_some(rules.iter(), src, dst)
    }

    /// As [`Allowed::of`] over a non-empty list, given (in order) the rules of it that
    /// can match the two addresses.
    fn of_some<'a>(rules: impl Iterator<Item = &'a Rule>, src: IpAddr, dst: IpAddr) -> Allowed {
        let mut allowed = Allowed::none();
        let mut left = Allowed::all();
        for r in rules {
            // A rule with a remote-identity selector matches no address here: its
            // `dst` is any, but it matches only destinations of that identity, and
            // those are never pods (what this combines).
            if r.dst_selector.is_some()
                || !r.src.matches(src)
                || !r.dst.matches(dst)
                || !r.src_port.is_any()
            {
                continue;
            }
            let range: Ranges = vec![(r.dst_port.lo, r.dst_port.hi)];
            let mut region = Allowed::none();
            match r.proto {
                Proto::Any => region = Allowed::all(),
                p => {
                    if let Some(i) = L4::ALL.iter().position(|l| Proto::Number(l.number()) == p) {
                        region.ports[i] = range;
                    } else {
                        // Other single protocols are not tracked per protocol.
                        continue;
                    }
                }
            }
            let region = region.intersect(&left);
            if r.action != Action::Deny {
                for i in 0..3 {
                    allowed.ports[i] = union(&allowed.ports[i], &region.ports[i]);
                }
                allowed.other |= region.other;
            }
            for i in 0..3 {
                left.ports[i] = minus(&left.ports[i], &region.ports[i]);
            }
            left.other &= !region.other;
        }
        allowed
    }

    /// Rules from `src` letting exactly `self` through, then denying the rest from
    /// `src`.
    fn rules_from(&self, src: Prefix, origin: &str) -> Vec<Rule> {
        let mut out = Vec::new();
        let rule = |action, proto, ports: (u16, u16)| {
            let mut r = Rule::any(action);
            r.src = src;
            r.proto = proto;
            r.dst_port = PortRange {
                lo: ports.0,
                hi: ports.1,
            };
            r.origin = Some(origin.to_string());
            r
        };
        for (i, l4) in L4::ALL.iter().enumerate() {
            for &range in &self.ports[i] {
                out.push(rule(Action::Reflect, Proto::Number(l4.number()), range));
            }
        }
        if self.other {
            for (i, l4) in L4::ALL.iter().enumerate() {
                if self.ports[i] != vec![FULL] {
                    out.push(rule(Action::Deny, Proto::Number(l4.number()), FULL));
                }
            }
            out.push(rule(Action::Reflect, Proto::Any, FULL));
        } else {
            out.push(rule(Action::Deny, Proto::Any, FULL));
        }
        out
    }
}

/// A local pod as the renderer sees it.
#[derive(Debug, Clone, Copy)]
pub struct LocalPod<'a> {
    pub pod: &'a Pod,
    pub rules: &'a PodRules,
}

/// A rule list indexed by one address field: the positions of the rules whose prefix
/// there is a host address, sorted by address (then position), and of the others
/// (wider prefixes, any), so that the rules that can match one address are found
/// without scanning the list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddrIndex {
    hosts: Vec<(IpAddr, usize)>,
    wide: Vec<usize>,
}

impl AddrIndex {
    /// Indexes `rules` by source (`by_src`) or destination.
    pub fn new(rules: &[Rule], by_src: bool) -> AddrIndex {
        let mut hosts = Vec::new();
        let mut wide = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            match host_of(if by_src { r.src } else { r.dst }) {
                Some(ip) => hosts.push((ip, i)),
                None => wide.push(i),
            }
        }
        hosts.sort_unstable();
        AddrIndex { hosts, wide }
    }

    /// What `rules` (the indexed list) let through from `src` to `dst`; `key` is the
    /// indexed one.
    pub fn allowed(&self, rules: &[Rule], key: IpAddr, src: IpAddr, dst: IpAddr) -> Allowed {
        if rules.is_empty() {
            return Allowed::all();
        }
        let from = self.hosts.partition_point(|&(ip, _)| ip < key);
        let to = from + self.hosts[from..].partition_point(|&(ip, _)| ip == key);
        let hosts = &self.hosts[from..to];
        // Both index lists are ascending: merge them to keep the rule order.
        let (mut h, mut w) = (0, 0);
        let order = std::iter::from_fn(|| {
            let next = match (hosts.get(h), self.wide.get(w)) {
                (Some(&(_, a)), Some(&b)) if a < b => {
                    h += 1;
                    a
                }
                (_, Some(&b)) => {
                    w += 1;
                    b
                }
                (Some(&(_, a)), None) => {
                    h += 1;
                    a
                }
                (None, None) => return None,
            };
            rules.get(next)
        });
        Allowed::of_some(order, src, dst)
    }
}

/// The address of a host prefix (/32, /128).
pub fn host_of(p: Prefix) -> Option<IpAddr> {
    p.cidr()
        .filter(|cidr| cidr.prefix_len() == cidr.max_len())
        .map(|cidr| cidr.address())
}

/// A pod's rules with the indexes the renderer combines them by: `to_pod` by source
/// (what the pod accepts from an address), `from_pod` by destination (what it may
/// send to one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Indexed {
    pub rules: PodRules,
    pub accepts: AddrIndex,
    pub sends: AddrIndex,
}

impl Indexed {
    pub fn new(rules: PodRules) -> Indexed {
        Indexed {
            accepts: AddrIndex::new(&rules.to_pod, true),
            sends: AddrIndex::new(&rules.from_pod, false),
            rules,
        }
    }
}

/// What one local sender contributes to a pod's local table: the sources whose rules
/// are taken out of the pod's own, and the rules put first in their place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Part {
    pub srcs: Vec<Prefix>,
    pub rules: Vec<Rule>,
}

/// The part of the local table of a pod (addresses `pod_ips`, rules `pod`) due to
/// the local sender `q` (addresses `q_ips`); `None` when `q` is not restricted or
/// may send everything the pod accepts from it.
pub fn part(pod_ips: &[IpAddr], pod: &Indexed, q_ips: &[IpAddr], q: &Indexed) -> Option<Part> {
    let from_q = &q.rules.from_pod;
    if from_q.is_empty() {
        return None;
    }
    let mut out = Part::default();
    for &qip in q_ips {
        for &pip in pod_ips.iter().filter(|p| p.is_ipv4() == qip.is_ipv4()) {
            let sends = q.sends.allowed(from_q, pip, qip, pip);
            if sends == Allowed::all() {
                continue;
            }
            let accepts = pod.accepts.allowed(&pod.rules.to_pod, qip, qip, pip);
            if accepts.subset_of(&sends) {
                continue;
            }
            let src = host(qip);
            out.srcs.push(src);
            let origin = from_q.last().and_then(|r| r.origin.as_deref());
            out.rules.extend(
                accepts
                    .intersect(&sends)
                    .rules_from(src, origin.unwrap_or(RENDERER_ORIGIN)),
            );
        }
    }
    (!out.srcs.is_empty()).then_some(out)
}

/// The local (egress) table of a pod with `rules`, given the parts of its restricted
/// local senders in sender order; empty when the pod needs no table.
pub fn assemble<'a>(rules: &PodRules, parts: impl IntoIterator<Item = &'a Part>) -> Vec<Rule> {
    let mut front = Vec::new();
    let mut taken: FxHashSet<Prefix> = FxHashSet::default();
    for p in parts {
        taken.extend(&p.srcs);
        front.extend(p.rules.iter().cloned());
    }
    let open = rules.to_pod.is_empty();
    let had_front = !front.is_empty();
    front.extend(
        rules
            .to_pod
            .iter()
            .filter(|r| !taken.contains(&r.src))
            .cloned(),
    );
    if open && had_front {
        let mut rest = Rule::any(Action::Reflect);
        rest.origin = Some(RENDERER_ORIGIN.into());
        front.push(rest);
    }
    for r in &mut front {
        if r.action == Action::Permit {
            r.action = Action::Reflect;
        }
    }
    if front.is_empty() && !rules.from_pod.is_empty() {
        let mut all = Rule::any(Action::Reflect);
        all.origin = Some(RENDERER_ORIGIN.into());
        front.push(all);
    }
    front
}

/// The local (egress) table of `pod`, combined with the other local pods' `from_pod`
/// rules; empty when the pod needs no table.
pub fn local_table(pod: LocalPod<'_>, others: &[LocalPod<'_>]) -> Vec<Rule> {
    let senders: Vec<(LocalPod<'_>, Indexed)> = others
        .iter()
        .filter(|q| !q.rules.from_pod.is_empty())
        .map(|q| (*q, Indexed::new(q.rules.clone())))
        .collect();
    combined(pod, &Indexed::new(pod.rules.clone()), &senders)
}

/// [`local_table`] with the pod's and the restricted senders' rules indexed.
fn combined(
    pod: LocalPod<'_>,
    indexed: &Indexed,
    senders: &[(LocalPod<'_>, Indexed)],
) -> Vec<Rule> {
    let parts: Vec<Part> = senders
        .iter()
        .filter(|(q, _)| q.pod.key != pod.pod.key)
        .filter_map(|(q, qi)| part(&pod.pod.ips, indexed, &q.pod.ips, qi))
        .collect();
    assemble(pod.rules, &parts)
}

/// A local pod's share of the global table: its `from_pod` rules (or some of them)
/// with each of its addresses as source.
pub fn global_part(ips: &[IpAddr], from_pod: &[Rule]) -> Vec<Rule> {
    let mut out = Vec::new();
    for r in from_pod {
        for &ip in ips {
            if dst_family(r, ip) {
                let mut g = r.clone();
                g.src = host(ip);
                out.push(g);
            }
        }
    }
    out
}

/// The global table: every local pod's `from_pod` rules with the pod's address as
/// source, then permit all; empty when no local pod's egress is restricted.
pub fn global_table(pods: &[LocalPod<'_>]) -> Vec<Rule> {
    let mut out = Vec::new();
    for p in pods {
        out.extend(global_part(&p.pod.ips, &p.rules.from_pod));
    }
    if !out.is_empty() {
        out.push(global_rest());
    }
    out
}

/// The global table's last rule.
pub fn global_rest() -> Rule {
    let mut rest = Rule::any(Action::Permit);
    rest.origin = Some(RENDERER_ORIGIN.into());
    rest
}

/// The tables of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTables {
    /// Where the tables attach: a port, or the port that records the pod.
    pub port: AttachTarget,
    pub ingress: Option<String>,
    pub egress: Option<String>,
}

/// A rendered ACL state: exactly what `acl.apply` takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    /// Tables by name.
    pub tables: BTreeMap<String, Vec<Rule>>,
    /// Per local pod, its port and tables.
    pub pods: BTreeMap<Key, PodTables>,
    /// The global table's name, if any.
    pub global: Option<String>,
    /// Per local pod whose CiliumNetworkPolicies have `rules.dns`, its DNS policy
    /// (target: where its tables attach); [`render`] leaves it empty, the engine
    /// fills it.
    pub dns: BTreeMap<Key, DnsPolicy>,
}

/// FNV-1a: a hasher whose result does not depend on the process (unlike std's).
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// A table name that changes with the content: `pol-` and a hash of the rules.
pub fn table_name(rules: &[Rule]) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    rules.hash(&mut h);
    format!("pol-{:016x}", h.finish())
}

/// The reflective table.
pub fn reflect_table() -> Vec<Rule> {
    let mut r = Rule::any(Action::Reflect);
    r.origin = Some(RENDERER_ORIGIN.into());
    vec![r]
}

/// Renders the tables of `pods` (the node's active pods with their rules) at once;
/// [`super::tables::Tables`] keeps the same result up to date pod by pod.
pub fn render(pods: &[LocalPod<'_>]) -> Rendered {
    let mut out = Rendered::default();
    let indexed: Vec<Indexed> = pods.iter().map(|p| Indexed::new(p.rules.clone())).collect();
    let senders: Vec<(LocalPod<'_>, Indexed)> = pods
        .iter()
        .zip(&indexed)
        .filter(|(q, _)| !q.rules.from_pod.is_empty())
        .map(|(q, i)| (*q, i.clone()))
        .collect();
    for (p, pi) in pods.iter().zip(&indexed) {
        let rules = combined(*p, pi, &senders);
        let mut t = PodTables {
            port: p.pod.port.clone(),
            ingress: None,
            egress: None,
        };
        if !rules.is_empty() {
            let name = table_name(&rules);
            out.tables.entry(name.clone()).or_insert(rules);
            t.egress = Some(name);
            t.ingress = Some(REFLECT_TABLE.to_string());
        }
        out.pods.insert(p.pod.key.clone(), t);
    }
    if out.pods.values().any(|t| t.ingress.is_some()) {
        out.tables.insert(REFLECT_TABLE.into(), reflect_table());
    }
    let global = global_table(pods);
    if !global.is_empty() {
        out.tables.insert(GLOBAL_TABLE.into(), global);
        out.global = Some(GLOBAL_TABLE.into());
    }
    out
}

impl Rendered {
    /// The `acl.apply` params: tables in name order, attachments and DNS policies in
    /// pod order.
    pub fn to_apply(&self) -> AclApply {
        let tables = self
            .tables
            .iter()
            .map(|(name, rules)| AclTable {
                name: name.clone(),
                rules: rules.clone(),
            })
            .collect();
        let mut attach = Vec::new();
        for t in self.pods.values() {
            for (direction, table) in [
                (Direction::Ingress, &t.ingress),
                (Direction::Egress, &t.egress),
            ] {
                if let Some(table) = table {
                    attach.push(AclAttach {
                        target: t.port.clone(),
                        direction,
                        table: table.clone(),
                    });
                }
            }
        }
        AclApply {
            tables,
            attach,
            global: self.global.clone(),
            dns: self.dns.values().cloned().collect(),
            dry_run: false,
        }
    }

    /// Number of rules over all tables.
    pub fn rule_count(&self) -> usize {
        self.tables.values().map(Vec::len).sum()
    }

    /// What changed from `old` to `self`.
    pub fn diff(&self, old: &Rendered) -> Diff {
        let mut d = Diff::default();
        for (name, rules) in &self.tables {
            match old.tables.get(name) {
                None => d.added.push(name.clone()),
                Some(o) if o != rules => d.changed.push(name.clone()),
                Some(_) => {}
            }
        }
        d.removed = old
            .tables
            .keys()
            .filter(|n| !self.tables.contains_key(*n))
            .cloned()
            .collect();
        let keys: BTreeSet<&Key> = self.pods.keys().chain(old.pods.keys()).collect();
        for k in keys {
            if self.pods.get(k) != old.pods.get(k) {
                d.pods.push(k.clone());
            }
        }
        d.global = self.global != old.global;
        let keys: BTreeSet<&Key> = self.dns.keys().chain(old.dns.keys()).collect();
        for k in keys {
            if self.dns.get(k) != old.dns.get(k) {
                d.dns.push(k.clone());
            }
        }
        d
    }
}

/// The difference between two rendered generations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
    /// Pods whose tables or port changed (or that came or went).
    pub pods: Vec<Key>,
    /// Whether the global table was added or removed.
    pub global: bool,
    /// Pods whose DNS policy changed (or came or went).
    pub dns: Vec<Key>,
}

impl Diff {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.changed.is_empty()
            && self.removed.is_empty()
            && self.pods.is_empty()
            && !self.global
            && self.dns.is_empty()
    }
}

impl std::fmt::Display for Diff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[String]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(", ")
            }
        };
        let keys = |v: &[Key]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        write!(
            f,
            "tables added {}; changed {}; removed {}; pods re-attached {}",
            list(&self.added),
            list(&self.changed),
            list(&self.removed),
            keys(&self.pods)
        )?;
        if !self.dns.is_empty() {
            write!(f, "; DNS policies changed {}", keys(&self.dns))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Key;
    use ferrule_dataplane::acl::RuleField;

    fn pod(name: &str, ips: &[&str]) -> Pod {
        Pod {
            key: Key::new("n", name),
            labels: Default::default(),
            node: None,
            ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
            host_network: false,
            terminated: false,
            named_ports: Vec::new(),
            port: AttachTarget::Port(name.to_string()),
        }
    }

    fn rule(action: Action, proto: Proto, src: &str, dst: &str, port: Option<u16>) -> Rule {
        let mut r = Rule::any(action);
        r.proto = proto;
        r.src = Prefix::parse(src, RuleField::Src).unwrap();
        r.dst = Prefix::parse(dst, RuleField::Dst).unwrap();
        if let Some(p) = port {
            r.dst_port = PortRange::single(p);
        }
        r.origin = Some("n/p".into());
        r
    }

    fn text(rules: &[Rule]) -> Vec<String> {
        rules
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.origin = None;
                r.to_string()
            })
            .collect()
    }

    #[test]
    fn combine_puts_the_intersection_with_a_sender_first() {
        let p = pod("p", &["10.0.0.1"]);
        let q = pod("q", &["10.0.0.2"]);
        let r = pod("r", &["10.0.0.3"]);
        // p accepts TCP 80 and 81 from anyone.
        let p_rules = PodRules {
            to_pod: vec![
                rule(Action::Permit, Proto::TCP, "any", "any", Some(80)),
                rule(Action::Permit, Proto::TCP, "any", "any", Some(81)),
                rule(Action::Deny, Proto::Any, "any", "any", None),
            ],
            from_pod: Vec::new(),
        };
        // q may only send TCP 80 (anywhere); r may send anything to 10.0.0.0/24.
        let q_rules = PodRules {
            to_pod: Vec::new(),
            from_pod: vec![
                rule(Action::Permit, Proto::TCP, "any", "any", Some(80)),
                rule(Action::Deny, Proto::Any, "any", "any", None),
            ],
        };
        let r_rules = PodRules {
            to_pod: Vec::new(),
            from_pod: vec![
                rule(Action::Permit, Proto::Any, "any", "10.0.0.0/24", None),
                rule(Action::Deny, Proto::Any, "any", "any", None),
            ],
        };
        let pods = [
            LocalPod {
                pod: &p,
                rules: &p_rules,
            },
            LocalPod {
                pod: &q,
                rules: &q_rules,
            },
            LocalPod {
                pod: &r,
                rules: &r_rules,
            },
        ];
        let t = local_table(pods[0], &pods);
        assert_eq!(
            text(&t),
            [
                "reflect proto tcp src 10.0.0.2/32 dst any src_port any dst_port 80",
                "deny proto any src 10.0.0.2/32 dst any src_port any dst_port any",
                "reflect proto tcp src any dst any src_port any dst_port 80",
                "reflect proto tcp src any dst any src_port any dst_port 81",
                "deny proto any src any dst any src_port any dst_port any",
            ],
            "r sends a superset of what p accepts: nothing for r"
        );
        // q accepts everything and r may send it everything: q's table is only there
        // because q's own egress is restricted (replies must be tracked).
        let tq = local_table(pods[1], &pods);
        assert_eq!(
            text(&tq),
            ["reflect proto any src any dst any src_port any dst_port any"]
        );
        let tr = local_table(pods[2], &pods);
        assert_eq!(
            text(&tr),
            [
                "reflect proto tcp src 10.0.0.2/32 dst any src_port any dst_port 80",
                "deny proto any src 10.0.0.2/32 dst any src_port any dst_port any",
                "reflect proto any src any dst any src_port any dst_port any",
            ],
            "an open pod gets q's restriction, then everything else"
        );
    }

    #[test]
    fn allowed_sets_follow_first_match() {
        let rules = vec![
            rule(Action::Deny, Proto::TCP, "10.0.0.2", "any", Some(80)),
            rule(Action::Permit, Proto::TCP, "10.0.0.0/24", "any", None),
            rule(Action::Permit, Proto::UDP, "any", "any", Some(53)),
            rule(Action::Deny, Proto::Any, "any", "any", None),
        ];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let a = Allowed::of(&rules, ip("10.0.0.2"), ip("10.0.0.1"));
        assert_eq!(a.ports[0], vec![(0, 79), (81, 65535)]);
        assert_eq!(a.ports[1], vec![(53, 53)]);
        assert!(a.ports[2].is_empty() && !a.other);
        let b = Allowed::of(&rules, ip("10.0.1.2"), ip("10.0.0.1"));
        assert!(b.ports[0].is_empty());
        assert!(b.subset_of(&a) && !a.subset_of(&b));
        assert_eq!(
            Allowed::of(&[], ip("1.1.1.1"), ip("2.2.2.2")),
            Allowed::all()
        );
        assert_eq!(a.intersect(&Allowed::all()), a);
    }

    #[test]
    fn the_global_table_holds_local_pods_egress_rules_with_their_address() {
        let p = pod("p", &["10.0.0.1", "fd00::1"]);
        let q = pod("q", &["10.0.0.2"]);
        let p_rules = PodRules {
            to_pod: Vec::new(),
            from_pod: vec![
                rule(Action::Permit, Proto::UDP, "any", "10.0.0.0/8", Some(53)),
                rule(Action::Deny, Proto::Any, "any", "any", None),
            ],
        };
        let q_rules = PodRules::default();
        let pods = [
            LocalPod {
                pod: &p,
                rules: &p_rules,
            },
            LocalPod {
                pod: &q,
                rules: &q_rules,
            },
        ];
        assert_eq!(
            text(&global_table(&pods)),
            [
                "permit proto udp src 10.0.0.1/32 dst 10.0.0.0/8 src_port any dst_port 53",
                "deny proto any src 10.0.0.1/32 dst any src_port any dst_port any",
                "deny proto any src fd00::1/128 dst any src_port any dst_port any",
                "permit proto any src any dst any src_port any dst_port any",
            ]
        );
        assert!(
            global_table(&pods[1..]).is_empty(),
            "no restricted pod: no table"
        );
        let r = render(&pods);
        assert_eq!(r.global.as_deref(), Some(GLOBAL_TABLE));
        // p's egress is restricted: it gets a table (reflect all) and reflect-all.
        let t = &r.pods[&p.key];
        assert_eq!(t.ingress.as_deref(), Some(REFLECT_TABLE));
        assert_eq!(
            text(&r.tables[t.egress.as_ref().unwrap()]),
            ["reflect proto any src any dst any src_port any dst_port any"]
        );
        // q accepts everything, p may only send it DNS: q's table restricts p.
        let tq = &r.pods[&q.key];
        assert_eq!(
            text(&r.tables[tq.egress.as_ref().unwrap()]),
            [
                "reflect proto udp src 10.0.0.1/32 dst any src_port any dst_port 53",
                "deny proto any src 10.0.0.1/32 dst any src_port any dst_port any",
                "reflect proto any src any dst any src_port any dst_port any",
            ]
        );
        let mut r2 = r.clone();
        r2.tables.remove(GLOBAL_TABLE);
        r2.global = None;
        let d = r2.diff(&r);
        assert_eq!(d.removed, vec![GLOBAL_TABLE.to_string()]);
        assert!(d.global && d.added.is_empty());
    }
}
