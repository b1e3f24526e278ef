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
//! isolating the side.

use super::cache::{Cache, Key, PortRef, PortSpec, L4};
use super::processor::{pods_with_named_port, Processor, ResolvedRule};
use super::subnet::host;
use ferrule_dataplane::acl::{Action, PortRange, Prefix, Proto, Rule};
use std::collections::HashSet;
use std::net::IpAddr;

/// The rules of one pod, both sides, as the configurator hands them to the renderer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PodRules {
    /// Rules for traffic towards the pod (Contiv's egress side); empty: not isolated.
    pub to_pod: Vec<Rule>,
    /// Rules for traffic from the pod (Contiv's ingress side); empty: not isolated.
    pub from_pod: Vec<Rule>,
}

/// Accumulates one side's rules, without duplicates.
struct Side {
    to_pod: bool,
    isolating: Vec<String>,
    rules: Vec<Rule>,
    seen: HashSet<(Proto, Prefix, PortRange)>,
    permit_all: Option<String>,
}

impl Side {
    fn new(to_pod: bool) -> Side {
        Side {
            to_pod,
            isolating: Vec::new(),
            rules: Vec::new(),
            seen: HashSet::new(),
            permit_all: None,
        }
    }

    fn push(&mut self, addr: Prefix, proto: Proto, ports: PortRange, origin: &str) {
        if proto == Proto::Any && addr == Prefix::Any {
            if self.permit_all.is_none() {
                self.permit_all = Some(origin.to_string());
            }
            return;
        }
        if !self.seen.insert((proto, addr, ports)) {
            return;
        }
        let mut r = Rule::any(Action::Permit);
        r.proto = proto;
        r.dst_port = ports;
        if self.to_pod {
            r.src = addr;
        } else {
            r.dst = addr;
        }
        r.origin = Some(origin.to_string());
        self.rules.push(r);
    }

    fn finish(self) -> Vec<Rule> {
        if self.isolating.is_empty() {
            return Vec::new();
        }
        if let Some(origin) = self.permit_all {
            let mut r = Rule::any(Action::Permit);
            r.origin = Some(origin);
            return vec![r];
        }
        let mut rules = self.rules;
        let mut deny = Rule::any(Action::Deny);
        deny.origin = Some(self.isolating.join(","));
        rules.push(deny);
        rules
    }
}

/// The port range a spec stands for at a destination pod (`None`: a name the pod does
/// not have).
fn ports_at(spec: &PortSpec, dest: Option<&super::cache::Pod>) -> Option<PortRange> {
    match &spec.port {
        PortRef::All => Some(PortRange::ANY),
        PortRef::Range(r) => Some(*r),
        PortRef::Named(name) => dest
            .and_then(|p| p.named_port(name, spec.proto))
            .map(PortRange::single),
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
    let mut to_pod = Side::new(true);
    let mut from_pod = Side::new(false);
    for (pk, resolved) in processor.policies_of(key) {
        let Some(policy) = cache.policies.get(pk) else {
            continue;
        };
        let origin = pk.to_string();
        for (side, rules, resolved_rules, egress) in [
            (
                &mut to_pod,
                policy.ingress.as_deref(),
                &resolved.ingress,
                false,
            ),
            (
                &mut from_pod,
                policy.egress.as_deref(),
                &resolved.egress,
                true,
            ),
        ] {
            let Some(rules) = rules else { continue };
            side.isolating.push(origin.clone());
            for (rule, rr) in rules.iter().zip(resolved_rules) {
                side_rules(cache, side, pod, rule.ports.as_deref(), rr, egress, &origin);
            }
        }
    }
    PodRules {
        to_pod: to_pod.finish(),
        from_pod: from_pod.finish(),
    }
}

fn side_rules(
    cache: &Cache,
    side: &mut Side,
    pod: &super::cache::Pod,
    ports: Option<&[PortSpec]>,
    rr: &ResolvedRule,
    egress: bool,
    origin: &str,
) {
    // The destination a named port resolves on: the target for ingress.
    let addr_rules = |side: &mut Side, addr: Prefix, dest: Option<&super::cache::Pod>| match ports {
        None => side.push(addr, Proto::Any, PortRange::ANY, origin),
        Some(specs) => {
            for spec in specs {
                if let Some(range) = ports_at(spec, dest) {
                    side.push(addr, proto(spec.proto), range, origin);
                }
            }
        }
    };
    if rr.all_peers {
        match ports {
            None => side.push(Prefix::Any, Proto::Any, PortRange::ANY, origin),
            Some(specs) => {
                for spec in specs {
                    match (&spec.port, egress) {
                        (PortRef::Named(name), true) => {
                            for (q, n) in pods_with_named_port(cache, name, spec.proto) {
                                for ip in &q.ips {
                                    side.push(
                                        host(*ip),
                                        proto(spec.proto),
                                        PortRange::single(n),
                                        origin,
                                    );
                                }
                            }
                        }
                        _ => {
                            if let Some(range) = ports_at(spec, Some(pod)) {
                                side.push(Prefix::Any, proto(spec.proto), range, origin);
                            }
                        }
                    }
                }
            }
        }
        return;
    }
    for q in rr.pods.iter().filter_map(|k| cache.pods.get(k)) {
        let dest = if egress { q } else { pod };
        for ip in &q.ips {
            addr_rules(side, host(*ip), Some(dest));
        }
    }
    for block in &rr.blocks {
        addr_rules(side, *block, if egress { None } else { Some(pod) });
    }
}

/// Whether `ip` belongs to the family of `p` (any matches both).
pub fn same_family(p: Prefix, ip: IpAddr) -> bool {
    matches!(
        (p, ip),
        (Prefix::Any, _) | (Prefix::V4 { .. }, IpAddr::V4(_)) | (Prefix::V6 { .. }, IpAddr::V6(_))
    )
}
