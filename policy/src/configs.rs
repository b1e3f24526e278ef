//! Shared configurations: the configurator's rules of the local pods, computed once
//! per (policies applying, named ports of the pod) — pods of one app share them —
//! indexed for the renderer, and recomputed only when the resolution of one of their
//! policies changed. Each policy's share of those rules is cached too (per named
//! ports of the pod), so a recomputation re-derives only the changed policies'
//! shares and merges.

use super::cache::{Cache, Key, NamedPort};
use super::configurator::{merge, share, PodRules, PolicyShare};
use super::processor::{Affected, Processor};
use super::renderer::Indexed;
use super::Local;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;
use std::sync::Arc;

/// What a pod's rules depend on besides the policies' resolution.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ConfigKey {
    /// The policies applying to the pod, in key order.
    policies: Vec<Key>,
    /// The pod's named ports (ingress named ports resolve on them).
    ports: Vec<NamedPort>,
}

#[derive(Debug, Clone)]
struct Entry {
    key: ConfigKey,
    config: Arc<Indexed>,
    /// The local pods that have this configuration.
    users: BTreeSet<Key>,
}

/// The configurations of the local active pods.
#[derive(Debug, Clone, Default)]
pub struct Configs {
    next: u64,
    entries: HashMap<u64, Entry>,
    ids: HashMap<ConfigKey, u64>,
    by_policy: HashMap<Key, BTreeSet<u64>>,
    of_pod: HashMap<Key, u64>,
    shares: Shares,
}

/// Each policy's share of the rules, per named ports of the pod (`None`: the policy
/// is gone).
type Shares = HashMap<Key, HashMap<Vec<NamedPort>, Option<PolicyShare>>>;

/// The rules for `key`, from the cached shares (computed where missing).
fn rules_for(
    shares: &mut Shares,
    cache: &Cache,
    processor: &Processor,
    key: &ConfigKey,
) -> PodRules {
    for pk in &key.policies {
        let per_ports = shares.entry(pk.clone()).or_default();
        if !per_ports.contains_key(&key.ports[..]) {
            per_ports.insert(key.ports.clone(), share(cache, processor, pk, &key.ports));
        }
    }
    let shares = &*shares;
    merge(key.policies.iter().filter_map(|pk| {
        let s = shares.get(pk)?.get(&key.ports[..])?.as_ref()?;
        Some((pk, s))
    }))
}

impl Configs {
    /// The configuration of a local active pod.
    pub fn get(&self, pod: &Key) -> Option<&Arc<Indexed>> {
        self.of_pod
            .get(pod)
            .and_then(|id| self.entries.get(id))
            .map(|e| &e.config)
    }

    /// Number of distinct configurations.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no configuration.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Brings the configurations up to date after a change that `affected` describes
    /// (the processor already up to date); returns the pods whose configuration,
    /// address or port may have changed, or that came or went.
    pub fn update(
        &mut self,
        cache: &Cache,
        processor: &Processor,
        local: &Local,
        affected: &Affected,
    ) -> BTreeSet<Key> {
        let stale: BTreeSet<u64> = affected
            .policies
            .iter()
            .filter_map(|p| self.by_policy.get(p))
            .flatten()
            .copied()
            .collect();
        for p in &affected.policies {
            self.shares.remove(p);
        }
        let mut out = BTreeSet::new();
        for k in &affected.pods {
            let key = cache
                .pods
                .get(k)
                .filter(|p| p.is_active() && local.holds(p))
                .map(|p| ConfigKey {
                    policies: processor.policy_keys_of(k),
                    ports: p.named_ports.clone(),
                });
            let old = self.of_pod.get(k).copied();
            let same = match (old, &key) {
                (Some(id), Some(key)) => self.entries.get(&id).is_some_and(|e| e.key == *key),
                _ => false,
            };
            if !same {
                if let Some(id) = old {
                    self.leave(k, id);
                }
                if let Some(key) = key {
                    let id = self.entry(cache, processor, key);
                    if let Some(e) = self.entries.get_mut(&id) {
                        e.users.insert(k.clone());
                    }
                    self.of_pod.insert(k.clone(), id);
                }
            }
            if old.is_some() || self.of_pod.contains_key(k) {
                out.insert(k.clone());
            }
        }
        for id in stale {
            let Some(e) = self.entries.get_mut(&id) else {
                continue;
            };
            let rules = rules_for(&mut self.shares, cache, processor, &e.key);
            if rules != e.config.rules {
                e.config = Arc::new(Indexed::new(rules));
                out.extend(e.users.iter().cloned());
            }
        }
        out
    }

    /// The id of the entry for `key`, computed when there is none.
    fn entry(&mut self, cache: &Cache, processor: &Processor, key: ConfigKey) -> u64 {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.next;
        self.next += 1;
        let rules = rules_for(&mut self.shares, cache, processor, &key);
        for p in &key.policies {
            self.by_policy.entry(p.clone()).or_default().insert(id);
        }
        self.ids.insert(key.clone(), id);
        self.entries.insert(
            id,
            Entry {
                key,
                config: Arc::new(Indexed::new(rules)),
                users: BTreeSet::new(),
            },
        );
        id
    }

    /// Takes pod `k` out of entry `id`, dropping the entry when nobody is left.
    fn leave(&mut self, k: &Key, id: u64) {
        self.of_pod.remove(k);
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        e.users.remove(k);
        if !e.users.is_empty() {
            return;
        }
        if let Some(e) = self.entries.remove(&id) {
            self.ids.remove(&e.key);
            for p in &e.key.policies {
                if let Some(s) = self.by_policy.get_mut(p) {
                    s.remove(&id);
                    if s.is_empty() {
                        self.by_policy.remove(p);
                        self.shares.remove(p);
                    }
                }
            }
        }
    }
}
