//! The policy processor: resolves every policy's selectors against the cache (the pods
//! it applies to, the pods each rule's peers select, ipBlock pieces), keeps those
//! memberships up to date one change at a time, and says what a change may affect
//! ([`Affected`]): the pods whose set of policies changed (or that changed
//! themselves), and the policies whose resolution changed — a changed policy; for a
//! changed pod, every policy whose peers took it in or let it go, or hold it with a
//! new address or named ports; for a changed namespace, the policies whose namespace
//! selectors matched it. The policies applying
//! to each pod are indexed, so a pod's policies are found without a scan.
//! Pods without an IP address yet (and host-network or finished pods) are postponed:
//! they are neither targets nor peers until they have one.

use super::cache::{
    Cache, Key, Kind, NamedPort, NetworkPolicy, Object, Peer, Pod, PolicyRule, PortRef,
};
use super::selector::Labels;
use ferrule_dataplane::acl::Prefix;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

/// What the configurator needs of a pod a rule's peers select.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    pub ips: Vec<IpAddr>,
    pub named_ports: Vec<NamedPort>,
}

impl Member {
    fn of(p: &Pod) -> Member {
        Member {
            ips: p.ips.clone(),
            named_ports: p.named_ports.clone(),
        }
    }
}

/// One rule of a policy with its peers resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedRule {
    /// No `from`/`to`: every endpoint.
    pub all_peers: bool,
    /// Active pods the peers select, with their addresses and named ports.
    pub pods: BTreeMap<Key, Member>,
    /// ipBlock prefixes (after `except`).
    pub blocks: Vec<Prefix>,
    /// Remote-identity selectors (`fqdn:…`, `cidr:…`), in rule order.
    pub selectors: Vec<String>,
}

/// A policy with its selectors resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Active pods the policy applies to.
    pub targets: BTreeSet<Key>,
    /// Per `ingress[]` rule (only when the policy isolates for ingress).
    pub ingress: Vec<ResolvedRule>,
    /// Per `egress[]` rule (only when the policy isolates for egress).
    pub egress: Vec<ResolvedRule>,
}

/// Resolved memberships of every policy.
#[derive(Debug, Clone, Default)]
pub struct Processor {
    pub resolved: BTreeMap<Key, Resolved>,
    /// Per pod, the policies whose targets hold it.
    targeted_by: HashMap<Key, BTreeSet<Key>>,
    /// Per pod, the policies whose peers hold it.
    member_of: FxHashMap<Key, FxHashSet<Key>>,
}

/// What a change may affect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Affected {
    /// Pods that changed, or whose set of applying policies changed.
    pub pods: BTreeSet<Key>,
    /// Policies whose resolution (targets, peers, the peers' addresses or named
    /// ports) may have changed: the rules of every pod they apply to may change.
    pub policies: BTreeSet<Key>,
}

impl Affected {
    /// Adds what `other` affects.
    pub fn extend(&mut self, other: Affected) {
        self.pods.extend(other.pods);
        self.policies.extend(other.policies);
    }
}

fn rules_of(p: &NetworkPolicy) -> [(&[PolicyRule], bool); 2] {
    [
        (p.ingress.as_deref().unwrap_or(&[]), false),
        (p.egress.as_deref().unwrap_or(&[]), true),
    ]
}

/// Whether a rule names ports that depend on every pod (egress to all endpoints with
/// a named port: each destination pod resolves the name itself).
fn depends_on_all_pods(rule: &PolicyRule, egress: bool) -> bool {
    egress
        && rule.peers.is_none()
        && rule
            .ports
            .iter()
            .flatten()
            .any(|p| matches!(p.port, PortRef::Named(_)))
}

impl Processor {
    /// Resolves every policy of `cache`.
    pub fn new(cache: &Cache) -> Processor {
        let ns_names = cache.namespace_names();
        let resolved: BTreeMap<Key, Resolved> = cache
            .policies
            .values()
            .map(|p| (p.key.clone(), resolve_in(cache, p, &ns_names)))
            .collect();
        let mut targeted_by: HashMap<Key, BTreeSet<Key>> = HashMap::new();
        for (pk, r) in &resolved {
            for t in &r.targets {
                targeted_by.entry(t.clone()).or_default().insert(pk.clone());
            }
        }
        let mut p = Processor {
            resolved: BTreeMap::new(),
            targeted_by,
            member_of: FxHashMap::default(),
        };
        for (pk, r) in &resolved {
            p.set_members(pk, r, true);
        }
        p.resolved = resolved;
        p
    }

    /// Records (`is`) or forgets the pods that the peers of policy `pk` hold.
    fn set_members(&mut self, pk: &Key, r: &Resolved, is: bool) {
        for rr in r.ingress.iter().chain(&r.egress) {
            for m in rr.pods.keys() {
                if is {
                    self.member_of
                        .entry(m.clone())
                        .or_default()
                        .insert(pk.clone());
                } else if let Some(s) = self.member_of.get_mut(m) {
                    s.remove(pk);
                    if s.is_empty() {
                        self.member_of.remove(m);
                    }
                }
            }
        }
    }

    /// The policies applying to `pod`, in key order.
    pub fn policies_of<'a>(
        &'a self,
        pod: &'a Key,
    ) -> impl Iterator<Item = (&'a Key, &'a Resolved)> {
        self.targeted_by
            .get(pod)
            .into_iter()
            .flatten()
            .filter_map(|pk| self.resolved.get_key_value(pk))
    }

    /// The keys of the policies applying to `pod`, in key order.
    pub fn policy_keys_of(&self, pod: &Key) -> Vec<Key> {
        self.targeted_by
            .get(pod)
            .map_or_else(Vec::new, |s| s.iter().cloned().collect())
    }

    fn set_target(&mut self, policy: &Key, pod: &Key, is: bool) {
        if is {
            self.targeted_by
                .entry(pod.clone())
                .or_default()
                .insert(policy.clone());
        } else if let Some(s) = self.targeted_by.get_mut(pod) {
            s.remove(policy);
            if s.is_empty() {
                self.targeted_by.remove(pod);
            }
        }
    }

    /// Resolves policy `key` again (gone when not in `cache`).
    fn update_policy(&mut self, cache: &Cache, key: &Key, ns_names: &[String]) -> Affected {
        let mut affected = Affected::default();
        affected.policies.insert(key.clone());
        let before = match self.resolved.remove(key) {
            Some(r) => {
                self.set_members(key, &r, false);
                r.targets
            }
            None => BTreeSet::new(),
        };
        let after = match cache.policies.get(key) {
            Some(p) => {
                let r = resolve_in(cache, p, ns_names);
                let t = r.targets.clone();
                self.set_members(key, &r, true);
                self.resolved.insert(key.clone(), r);
                t
            }
            None => BTreeSet::new(),
        };
        for pod in before.symmetric_difference(&after) {
            self.set_target(key, pod, after.contains(pod));
            affected.pods.insert(pod.clone());
        }
        affected
    }

    /// Brings the memberships up to date after `cache` changed from `old` (the object
    /// before, `None` when added) to the object now in `cache` under `(kind, key)`;
    /// returns what the change may affect.
    pub fn update(
        &mut self,
        cache: &Cache,
        kind: Kind,
        key: &Key,
        old: Option<&Object>,
    ) -> Affected {
        let mut affected = Affected::default();
        match kind {
            Kind::NetworkPolicy | Kind::CiliumNetworkPolicy => {
                affected = self.update_policy(cache, key, &cache.namespace_names());
            }
            Kind::Pod => {
                let old_pod = match old {
                    Some(Object::Pod(p)) => Some(p),
                    _ => None,
                };
                let new_pod = cache.pods.get(key);
                if old_pod.is_some() || new_pod.is_some() {
                    affected.pods.insert(key.clone());
                }
                let ns_labels = cache.namespace_labels(&key.namespace);
                let info = new_pod.map(Member::of);
                let mut target_changes = Vec::new();
                let mut member_changes = Vec::new();
                let mut held = self.member_of.remove(key).unwrap_or_default();
                // Both maps are in key order: walk them together.
                let mut policies = cache.policies.iter().peekable();
                for (pk, r) in self.resolved.iter_mut() {
                    while policies.next_if(|(k, _)| *k < pk).is_some() {}
                    let Some((_, policy)) = policies.next_if(|(k, _)| *k == pk) else {
                        continue;
                    };
                    let mut touched = false;
                    let is_target = new_pod.is_some_and(|p| {
                        p.is_active()
                            && p.key.namespace == policy.key.namespace
                            && policy.pod_selector.matches(&p.labels)
                    });
                    let was_target = r.targets.contains(key);
                    if is_target != was_target {
                        if is_target {
                            r.targets.insert(key.clone());
                        } else {
                            r.targets.remove(key);
                        }
                        target_changes.push((pk.clone(), is_target));
                    }
                    let was_member = held.contains(pk);
                    let mut is_member = false;
                    for (rules, egress) in rules_of(policy) {
                        let resolved = if egress {
                            &mut r.egress
                        } else {
                            &mut r.ingress
                        };
                        for (rule, rr) in rules.iter().zip(resolved.iter_mut()) {
                            if depends_on_all_pods(rule, egress) {
                                touched = true;
                            }
                            // Peers without a namespace selector hold pods of the
                            // policy's namespace only.
                            let elsewhere = rule.peers.iter().flatten().any(|peer| {
                                matches!(
                                    peer,
                                    Peer::Pods {
                                        namespaces: Some(_),
                                        ..
                                    }
                                )
                            });
                            if !elsewhere && key.namespace != policy.key.namespace {
                                continue;
                            }
                            let member = new_pod.is_some_and(|p| {
                                p.is_active()
                                    && rule.peers.iter().flatten().any(|peer| {
                                        Cache::peer_selects(
                                            peer,
                                            &policy.key.namespace,
                                            p,
                                            &ns_labels,
                                        )
                                    })
                            });
                            is_member |= member;
                            if !member && !was_member {
                                continue;
                            }
                            // The rules depend on the members' addresses and named
                            // ports only.
                            touched |= match (member, &info) {
                                (true, Some(info)) => match rr.pods.get_mut(key) {
                                    Some(m) if m == info => false,
                                    Some(m) => {
                                        *m = info.clone();
                                        true
                                    }
                                    None => {
                                        rr.pods.insert(key.clone(), info.clone());
                                        true
                                    }
                                },
                                _ => rr.pods.remove(key).is_some(),
                            };
                        }
                    }
                    if is_member != was_member {
                        member_changes.push((pk.clone(), is_member));
                    }
                    if touched {
                        affected.policies.insert(pk.clone());
                    }
                }
                for (pk, is) in target_changes {
                    self.set_target(&pk, key, is);
                }
                for (pk, is) in member_changes {
                    if is {
                        held.insert(pk);
                    } else {
                        held.remove(&pk);
                    }
                }
                if !held.is_empty() {
                    self.member_of.insert(key.clone(), held);
                }
            }
            Kind::Namespace => {
                let old_labels = match old {
                    Some(Object::Namespace(n)) => n.labels.clone(),
                    _ => Labels::new(),
                };
                let new_labels = cache.namespace_labels(&key.name);
                let keys: Vec<Key> = cache
                    .policies
                    .values()
                    .filter(|p| {
                        rules_of(p).iter().any(|(rules, _)| {
                            rules
                                .iter()
                                .flat_map(|r| r.peers.iter().flatten())
                                .any(|peer| {
                                    matches!(peer, Peer::Pods { namespaces: Some(s), .. }
                                    if s.matches(&old_labels) || s.matches(&new_labels))
                                })
                        })
                    })
                    .map(|p| p.key.clone())
                    .collect();
                let ns_names = cache.namespace_names();
                for k in keys {
                    affected.extend(self.update_policy(cache, &k, &ns_names));
                }
            }
        }
        affected
    }
}

/// Resolves one policy against the cache.
pub fn resolve(cache: &Cache, p: &NetworkPolicy) -> Resolved {
    resolve_in(cache, p, &cache.namespace_names())
}

/// [`resolve`], given the cache's namespace names.
fn resolve_in(cache: &Cache, p: &NetworkPolicy, ns_names: &[String]) -> Resolved {
    let targets = cache
        .pods_in(&p.key.namespace)
        .filter(|pod| pod.is_active() && p.pod_selector.matches(&pod.labels))
        .map(|pod| pod.key.clone())
        .collect();
    let resolve_rules = |rules: &[PolicyRule]| -> Vec<ResolvedRule> {
        rules
            .iter()
            .map(|rule| {
                let mut rr = ResolvedRule::default();
                let Some(peers) = &rule.peers else {
                    rr.all_peers = true;
                    return rr;
                };
                for peer in peers {
                    match peer {
                        Peer::Block { pieces, .. } => rr.blocks.extend(pieces.iter().copied()),
                        Peer::Selector(s) => rr.selectors.push(s.clone()),
                        Peer::Pods { namespaces, pods } => {
                            let in_ns = |ns: &str| {
                                cache
                                    .pods_in(ns)
                                    .filter(|q| q.is_active() && pods.matches(&q.labels))
                                    .map(|q| (q.key.clone(), Member::of(q)))
                                    .collect::<Vec<(Key, Member)>>()
                            };
                            match namespaces {
                                None => rr.pods.extend(in_ns(&p.key.namespace)),
                                Some(sel) => {
                                    for ns in ns_names {
                                        if sel.matches(&cache.namespace_labels(ns)) {
                                            rr.pods.extend(in_ns(ns));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                rr
            })
            .collect()
    };
    Resolved {
        targets,
        ingress: resolve_rules(p.ingress.as_deref().unwrap_or(&[])),
        egress: resolve_rules(p.egress.as_deref().unwrap_or(&[])),
    }
}

/// The active pods of `cache` that have the named port `name`, for the configurator.
pub fn pods_with_named_port<'a>(
    cache: &'a Cache,
    name: &'a str,
    proto: super::cache::L4,
) -> impl Iterator<Item = (&'a Pod, u16)> + 'a {
    cache
        .pods
        .values()
        .filter(|p| p.is_active())
        .filter_map(move |p| p.named_port(name, proto).map(|n| (p, n)))
}
