//! The policy configurator: turns the policies applying to one pod into 6-tuple rules
//! for both sides (the seed's `generateRules`): `to_pod` (Contiv's *egress* side,
//! traffic the vswitch sends to the pod, from the pod's ingress policies; sources set,
//! destination any) and `from_pod` (Contiv's *ingress* side, traffic the vswitch
//! receives from the pod, from its egress policies; destinations set, source any).
//!
//! A side no policy isolates has no rules (everything passes). An isolated side is
//! permit-only rules — one per peer address or ipBlock piece and port — followed by
//! one `deny` of everything else, unless a rule permits everything (then it is that
//! single permit). Named ports resolve against the destination: the pod itself for
//! ingress, each peer pod for egress (an egress named port cannot match an ipBlock).
//! Every rule's `origin` is `namespace/policy`; the trailing deny names every policy
//! isolating the side. A CiliumNetworkPolicy's remote-identity peers (`toFQDNs`,
//! `toCIDR`, `toCIDRSet`) become permits whose `dst_selector` is the selector and whose
//! `dst` is any: such a rule matches the destinations of that identity only, so it
//! never turns a side into "permit everything".
//!
//! The rules depend on the pod only through the policies applying to it and its named
//! ports ([`configure_for`]), so pods of one app share them (see [`super::configs`]).

use super::cache::{Cache, Key, NamedPort, PortRef, PortSpec, L4};
use super::processor::{pods_with_named_port, Processor, ResolvedRule};
use super::subnet::host;
use ferrule_dataplane::acl::{Action, PortRange, Prefix, Proto, Rule};
use rustc_hash::FxHashSet;
use std::net::IpAddr;

/// The rules of one pod, both sides, as the configurator hands them to the renderer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PodRules {
    /// Rules for traffic towards the pod (Contiv's egress side); empty: not isolated.
    pub to_pod: Vec<Rule>,
    /// Rules for traffic from the pod (Contiv's ingress side); empty: not isolated.
    pub from_pod: Vec<Rule>,
}

/// One policy's share of one side of a pod's rules, before the policies applying to
/// the pod are merged: the permitted (protocol, address or ipBlock piece, ports), in
/// rule order, and whether a rule permits everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Share {
    pub entries: Vec<(Proto, Prefix, PortRange)>,
    /// Permitted (protocol, remote-identity selector, ports), in rule order; rendered
    /// after the entries.
    pub selectors: Vec<(Proto, String, PortRange)>,
    pub permit_all: bool,
}

/// One policy's shares of a pod's rules, per side (`None`: the policy does not
/// isolate the side).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyShare {
    pub to_pod: Option<Share>,
    pub from_pod: Option<Share>,
}

/// Accumulates a share (duplicates are left to the merge).
#[derive(Default)]
struct Side {
    share: Share,
}

impl Side {
    fn push(&mut self, addr: Prefix, proto: Proto, ports: PortRange) {
        if proto == Proto::Any && addr == Prefix::Any {
            self.share.permit_all = true;
        } else {
            self.share.entries.push((proto, addr, ports));
        }
    }

    /// A destination that is a remote-identity selector: never "everything".
    fn push_selector(&mut self, selector: &str, proto: Proto, ports: PortRange) {
        self.share
            .selectors
            .push((proto, selector.to_string(), ports));
    }
}

/// Merges the shares of the policies applying to a pod (in key order) into one
/// side's rules: the entries without duplicates (the first policy naming one gives
/// its origin), then a deny naming every isolating policy; a single permit when a
/// policy permits everything; nothing when no policy isolates the side.
fn merge_side<'a>(
    shares: impl Iterator<Item = (&'a Key, &'a Share)> + Clone,
    to_pod: bool,
) -> Vec<Rule> {
    let mut isolating = Vec::new();
    let mut permit_all: Option<&Key> = None;
    let size = shares
        .clone()
        .map(|(_, s)| s.entries.len() + s.selectors.len())
        .sum::<usize>();
    let mut rules = Vec::with_capacity(size + 1);
    let mut seen: FxHashSet<(Proto, Prefix, PortRange)> =
        FxHashSet::with_capacity_and_hasher(size, Default::default());
    let mut seen_selectors: FxHashSet<(Proto, &str, PortRange)> = FxHashSet::default();
    for (pk, share) in shares {
        isolating.push(pk.to_string());
        if permit_all.is_some() {
            continue;
        }
        if share.permit_all {
            permit_all = Some(pk);
            continue;
        }
        let origin = isolating.last().cloned();
        for &(proto, addr, ports) in &share.entries {
            if !seen.insert((proto, addr, ports)) {
                continue;
            }
            let mut r = Rule::any(Action::Permit);
            r.proto = proto;
            r.dst_port = ports;
            if to_pod {
                r.src = addr;
            } else {
                r.dst = addr;
            }
            r.origin.clone_from(&origin);
            rules.push(r);
        }
        for (proto, selector, ports) in &share.selectors {
            if !seen_selectors.insert((*proto, selector, *ports)) {
                continue;
            }
            let mut r = Rule::any(Action::Permit);
            r.proto = *proto;
            r.dst_port = *ports;
            r.dst_selector = Some(selector.clone());
            r.origin.clone_from(&origin);
            rules.push(r);
        }
    }
    if isolating.is_empty() {
        return Vec::new();
    }
    if let Some(pk) = permit_all {
        let mut r = Rule::any(Action::Permit);
        r.origin = Some(pk.to_string());
        return vec![r];
    }
    let mut deny = Rule::any(Action::Deny);
    deny.origin = Some(isolating.join(","));
    rules.push(deny);
    rules
}

/// Merges the shares of the policies applying to a pod, in key order.
pub fn merge<'a>(shares: impl Iterator<Item = (&'a Key, &'a PolicyShare)> + Clone) -> PodRules {
    PodRules {
        to_pod: merge_side(
            shares
                .clone()
                .filter_map(|(k, s)| s.to_pod.as_ref().map(|s| (k, s))),
            true,
        ),
        from_pod: merge_side(
            shares.filter_map(|(k, s)| s.from_pod.as_ref().map(|s| (k, s))),
            false,
        ),
    }
}

/// The port range a spec stands for at a destination pod with named ports `dest`
/// (`None`: a name the pod does not have).
fn ports_at(spec: &PortSpec, dest: Option<&[NamedPort]>) -> Option<PortRange> {
    match &spec.port {
        PortRef::All => Some(PortRange::ANY),
        PortRef::Range(r) => Some(*r),
        PortRef::Named(name) => dest
            .and_then(|ports| {
                ports
                    .iter()
                    .find(|p| p.name == *name && p.proto == spec.proto)
            })
            .map(|p| PortRange::single(p.port)),
    }
}

fn proto(l4: L4) -> Proto {
    Proto::Number(l4.number())
}

/// The rules of pod `key` from the policies that apply to it.
pub fn configure(cache: &Cache, processor: &Processor, key: &Key) -> PodRules {
    let Some(pod) = cache.pods.get(key).filter(|p| p.is_active()) else {
        return PodRules::default();
    };
    configure_for(
        cache,
        processor,
        &processor.policy_keys_of(key),
        &pod.named_ports,
    )
}

/// The rules of an active pod with the named ports `ports` that the policies
/// `policies` (in key order) apply to.
pub fn configure_for(
    cache: &Cache,
    processor: &Processor,
    policies: &[Key],
    ports: &[NamedPort],
) -> PodRules {
    let shares: Vec<(&Key, PolicyShare)> = policies
        .iter()
        .filter_map(|pk| Some((pk, share(cache, processor, pk, ports)?)))
        .collect();
    merge(shares.iter().map(|(k, s)| (*k, s)))
}

/// The share of policy `pk` in the rules of a pod with the named ports `ports` (`None`:
/// no such policy).
pub fn share(
    cache: &Cache,
    processor: &Processor,
    pk: &Key,
    ports: &[NamedPort],
) -> Option<PolicyShare> {
    let policy = cache.policies.get(pk)?;
    let resolved = processor.resolved.get(pk)?;
    let side = |rules: Option<&[super::cache::PolicyRule]>, resolved: &[ResolvedRule], egress| {
        let rules = rules?;
        let mut side = Side::default();
        let size: usize = rules
            .iter()
            .zip(resolved)
            .map(|(rule, rr)| {
                let addrs = rr.blocks.len() + rr.pods.values().map(|m| m.ips.len()).sum::<usize>();
                addrs * rule.ports.as_ref().map_or(1, Vec::len)
            })
            .sum();
        side.share.entries.reserve(size);
        for (rule, rr) in rules.iter().zip(resolved) {
            side_rules(cache, &mut side, ports, rule.ports.as_deref(), rr, egress);
        }
        Some(side.share)
    };
    Some(PolicyShare {
        to_pod: side(policy.ingress.as_deref(), &resolved.ingress, false),
        from_pod: side(policy.egress.as_deref(), &resolved.egress, true),
    })
}

fn side_rules(
    cache: &Cache,
    side: &mut Side,
    pod: &[NamedPort],
    ports: Option<&[PortSpec]>,
    rr: &ResolvedRule,
    egress: bool,
) {
    // The destination a named port resolves on: the target for ingress.
    let addr_rules = |side: &mut Side, addr: Prefix, dest: Option<&[NamedPort]>| match ports {
        None => side.push(addr, Proto::Any, PortRange::ANY),
        Some(specs) => {
            for spec in specs {
                if let Some(range) = ports_at(spec, dest) {
                    side.push(addr, proto(spec.proto), range);
                }
            }
        }
    };
    if rr.all_peers {
        match ports {
            None => side.push(Prefix::Any, Proto::Any, PortRange::ANY),
            Some(specs) => {
                for spec in specs {
                    match (&spec.port, egress) {
                        (PortRef::Named(name), true) => {
                            for (q, n) in pods_with_named_port(cache, name, spec.proto) {
                                for ip in &q.ips {
                                    side.push(host(*ip), proto(spec.proto), PortRange::single(n));
                                }
                            }
                        }
                        _ => {
                            if let Some(range) = ports_at(spec, Some(pod)) {
                                side.push(Prefix::Any, proto(spec.proto), range);
                            }
                        }
                    }
                }
            }
        }
        return;
    }
    for q in rr.pods.values() {
        let dest = if egress { &q.named_ports[..] } else { pod };
        for ip in &q.ips {
            addr_rules(side, host(*ip), Some(dest));
        }
    }
    for block in &rr.blocks {
        addr_rules(side, *block, if egress { None } else { Some(pod) });
    }
    // Remote identities are not pods: a named port resolves on none of them.
    for selector in &rr.selectors {
        match ports {
            None => side.push_selector(selector, Proto::Any, PortRange::ANY),
            Some(specs) => {
                for spec in specs {
                    if let Some(range) = ports_at(spec, None) {
                        side.push_selector(selector, proto(spec.proto), range);
                    }
                }
            }
        }
    }
}

/// Whether `ip` belongs to the family of `p` (any matches both).
pub fn same_family(p: Prefix, ip: IpAddr) -> bool {
    p.is_v4().is_none_or(|v4| v4 == ip.is_ipv4())
}

/// Whether a rule's destination can be of the family of `ip`: its `dst` prefix's, a
/// `cidr:` selector's prefix's; an `fqdn:` selector's names have addresses of both.
pub fn dst_family(r: &Rule, ip: IpAddr) -> bool {
    match r
        .dst_selector
        .as_deref()
        .and_then(|s| s.strip_prefix("cidr:"))
    {
        Some(prefix) => prefix.contains(':') != ip.is_ipv4(),
        None => same_family(r.dst, ip),
    }
}
