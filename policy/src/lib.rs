//! Kubernetes NetworkPolicy and CiliumNetworkPolicy → Ferrule ACL tables, in the
//! layers of Contiv/VPP's policy plugin: [`cache`] (Namespaces, Pods, NetworkPolicies
//! from YAML/JSON; CiliumNetworkPolicies through [`cilium`]) → [`processor`]
//! (selectors resolved, pods a change affects) → [`configurator`] (6-tuple rules per
//! pod and side) → [`renderer`] (combined local tables, reflective and global tables,
//! diffs) → the `acl.apply` input. [`Engine`] keeps the layers' state for one node
//! and re-renders incrementally: [`configs`] shares the configurator's rules between
//! pods with the same policies and named ports, [`tables`] re-combines only the
//! (pod, sender) pairs a change touches; [`verdict`] answers "would this connection pass" by
//! sending packets through the rendered tables with the dataplane's classifier. The
//! engine also keeps each local pod's DNS policy (its CiliumNetworkPolicies'
//! `rules.dns`). See docs/policy.md.

pub mod cache;
pub mod cilium;
pub mod configs;
pub mod configurator;
pub mod processor;
pub mod renderer;
pub mod selector;
pub mod subnet;
pub mod tables;
pub mod verdict;

use cache::{valid_port_name, Cache, Key, Kind, Object, PORT_ANNOTATION};
use configs::Configs;
use configurator::PodRules;
use ferrule_api::acl::{AttachTarget, DnsPolicy};
use processor::{Affected, Processor};
use renderer::{Diff, Rendered};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use tables::{PodInput, Tables};

/// Why the state could not be read or rendered.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A file or directory could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A document is not a Kubernetes object.
    #[error("{source_name}: document {doc}: {detail}")]
    Document {
        source_name: String,
        doc: usize,
        detail: String,
    },
    /// An object is invalid: `Pod x/a: spec.containers[0]...: detail (in FILE)`.
    #[error("{kind} {name}: {field}: {detail} (in {source_name})")]
    Invalid {
        kind: String,
        name: String,
        field: String,
        detail: String,
        source_name: String,
    },
    /// The objects are valid but cannot be rendered together (port names).
    #[error("{0}")]
    Render(String),
    /// A verdict query names something that is not there.
    #[error("{0}")]
    Query(String),
}

/// One change to the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Added or replaced.
    Upsert(Object),
    /// Removed.
    Delete(Kind, Key),
}

/// Which pods are local to the switch being rendered for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Local {
    /// Every pod (one switch for the whole state).
    All,
    /// Pods whose `spec.nodeName` is this (`""`: pods not scheduled).
    Node(String),
}

impl Local {
    /// `Some(node)` → that node, `None` → every pod.
    pub fn from_option(node: Option<&str>) -> Local {
        node.map_or(Local::All, |n| Local::Node(n.to_string()))
    }

    fn holds(&self, pod: &cache::Pod) -> bool {
        match self {
            Local::All => true,
            Local::Node(n) => pod.node.as_deref().unwrap_or("") == n,
        }
    }
}

/// The policy pipeline's state for one switch: the cache, resolved policies, the
/// configurator's rules of the local pods and the rendered tables.
#[derive(Debug, Clone)]
pub struct Engine {
    pub local: Local,
    pub cache: Cache,
    processor: Processor,
    configs: Configs,
    tables: Tables,
    /// The DNS policies lag the state (a render failed): recompute every pod's.
    dns_stale: bool,
}

impl Engine {
    /// Resolves, configures and renders `cache` for the pods of `local`.
    pub fn new(cache: Cache, local: Local) -> Result<Engine, PolicyError> {
        let processor = Processor::new(&cache);
        let mut e = Engine {
            local,
            cache,
            processor,
            configs: Configs::default(),
            tables: Tables::default(),
            dns_stale: false,
        };
        let all = Affected {
            pods: e.cache.pods.keys().cloned().collect(),
            ..Affected::default()
        };
        e.rerender(&all, &BTreeSet::new())?;
        Ok(e)
    }

    /// The tables rendered last.
    pub fn rendered(&self) -> &Rendered {
        self.tables.rendered()
    }

    /// The configurator's rules of a local pod.
    pub fn pod_rules(&self, key: &Key) -> Option<&PodRules> {
        self.configs.get(key).map(|c| &c.rules)
    }

    /// Applies `changes`, re-configures the pods they affect, re-renders and returns
    /// what changed. On a render error the previous tables stay current (and the
    /// changes stay applied to the cache).
    pub fn apply(&mut self, changes: Vec<Change>) -> Result<Diff, PolicyError> {
        let mut affected = Affected::default();
        // The policies changed themselves (their DNS rules may have).
        let mut edited = BTreeSet::new();
        for c in changes {
            let (kind, key, old) = match c {
                Change::Upsert(o) => {
                    let (kind, key) = o.id();
                    (kind, key, self.cache.insert(o))
                }
                Change::Delete(kind, key) => {
                    let old = self.cache.remove(kind, &key);
                    (kind, key, old)
                }
            };
            if matches!(kind, Kind::NetworkPolicy | Kind::CiliumNetworkPolicy) {
                edited.insert(key.clone());
            }
            affected.extend(self.processor.update(&self.cache, kind, &key, old.as_ref()));
        }
        self.rerender(&affected, &edited)
    }

    /// Replaces the whole state with `objects`, as a list of changes.
    pub fn reload(&mut self, objects: Vec<Object>) -> Result<Diff, PolicyError> {
        let next = Cache::from_objects(objects);
        self.apply(changes_between(&self.cache, &next))
    }

    /// Re-configures what `affected` names and re-renders the pods that changed;
    /// `edited`: the policies that were changed themselves.
    fn rerender(
        &mut self,
        affected: &Affected,
        edited: &BTreeSet<Key>,
    ) -> Result<Diff, PolicyError> {
        let changed = self
            .configs
            .update(&self.cache, &self.processor, &self.local, affected);
        let inputs = changed.into_iter().map(|k| {
            let input = match (self.configs.get(&k), self.cache.pods.get(&k)) {
                (Some(config), Some(pod)) => Some(PodInput {
                    ips: pod.ips.clone(),
                    port: pod.port.clone(),
                    config: config.clone(),
                }),
                _ => None,
            };
            (k, input)
        });
        let mut diff = match self.tables.update(inputs, check_ports) {
            Ok(d) => d,
            Err(e) => {
                self.dns_stale = true;
                return Err(e);
            }
        };
        // DNS policies: those of the pods that changed or whose set of policies did
        // (`affected.pods`), and of the targets of the policies whose DNS rules may
        // have changed (edited ones) or that have some (a target's DNS policy is the
        // union of its policies' rules, whatever their peers resolve to).
        let mut pods: BTreeSet<Key> = affected.pods.clone();
        for pk in &affected.policies {
            let has_dns = self
                .cache
                .policies
                .get(pk)
                .is_some_and(|p| !p.dns.is_empty());
            if !has_dns && !edited.contains(pk) {
                continue;
            }
            if let Some(r) = self.processor.resolved.get(pk) {
                pods.extend(r.targets.iter().cloned());
            }
        }
        if std::mem::take(&mut self.dns_stale) {
            pods.extend(self.cache.pods.keys().cloned());
            pods.extend(self.tables.rendered().dns.keys().cloned());
        }
        for k in pods {
            let new = self.dns_policy(&k);
            let dns = self.tables.dns_mut();
            if dns.get(&k) == new.as_ref() {
                continue;
            }
            match new {
                Some(d) => dns.insert(k.clone(), d),
                None => dns.remove(&k),
            };
            diff.dns.push(k);
        }
        Ok(diff)
    }

    /// The DNS policy of pod `k`: when it is local and active, the union of the
    /// `rules.dns` patterns of the policies applying to it (`*` alone when one of them
    /// is `*`), attached where its tables are; `None` when there are none.
    fn dns_policy(&self, k: &Key) -> Option<DnsPolicy> {
        let pod = self
            .cache
            .pods
            .get(k)
            .filter(|p| p.is_active() && self.local.holds(p))?;
        let mut allow: Vec<String> = self
            .processor
            .policy_keys_of(k)
            .iter()
            .filter_map(|pk| self.cache.policies.get(pk))
            .flat_map(|p| p.dns.iter().cloned())
            .collect();
        if allow.is_empty() {
            return None;
        }
        if allow.iter().any(|p| p == "*") {
            allow = vec!["*".to_string()];
        }
        allow.sort();
        allow.dedup();
        Some(DnsPolicy {
            target: pod.port.clone(),
            allow,
        })
    }
}

/// Checks that every pod with tables attaches to a port of its own: a port named by
/// the `ferrule.io/port` annotation is valid and no other pod's (a pod without the
/// annotation attaches to the port that records it, `namespace/name`, which is its own).
fn check_ports(rendered: &Rendered) -> Result<(), PolicyError> {
    let mut ports: BTreeMap<&str, &Key> = BTreeMap::new();
    for (k, t) in &rendered.pods {
        if t.egress.is_none() && t.ingress.is_none() {
            continue;
        }
        let AttachTarget::Port(port) = &t.port else {
            continue;
        };
        if !valid_port_name(port) {
            return Err(PolicyError::Render(format!(
                "Pod {k}: metadata.annotations[{PORT_ANNOTATION}]: {port:?} is not a Ferrule port name (1-32 of A-Z a-z 0-9 - _ .)"
            )));
        }
        if let Some(other) = ports.insert(port, k) {
            return Err(PolicyError::Render(format!(
                "Pod {k} and Pod {other} both name port {port:?} in the annotation {PORT_ANNOTATION}"
            )));
        }
    }
    Ok(())
}

/// The changes that turn `old` into `new`.
pub fn changes_between(old: &Cache, new: &Cache) -> Vec<Change> {
    let mut out = Vec::new();
    // Namespaces first, then pods, then policies: selectors see the new labels.
    for (k, n) in &new.namespaces {
        if old.namespaces.get(k) != Some(n) {
            out.push(Change::Upsert(Object::Namespace(n.clone())));
        }
    }
    for k in old
        .namespaces
        .keys()
        .filter(|k| !new.namespaces.contains_key(*k))
    {
        out.push(Change::Delete(Kind::Namespace, Key::new("", k)));
    }
    for (k, p) in &new.pods {
        if old.pods.get(k) != Some(p) {
            out.push(Change::Upsert(Object::Pod(p.clone())));
        }
    }
    for k in old.pods.keys().filter(|k| !new.pods.contains_key(*k)) {
        out.push(Change::Delete(Kind::Pod, k.clone()));
    }
    for (k, p) in &new.policies {
        if old.policies.get(k) != Some(p) {
            out.push(Change::Upsert(Object::Policy(p.clone())));
        }
    }
    for (k, p) in old
        .policies
        .iter()
        .filter(|(k, _)| !new.policies.contains_key(*k))
    {
        let kind = if p.cilium {
            Kind::CiliumNetworkPolicy
        } else {
            Kind::NetworkPolicy
        };
        out.push(Change::Delete(kind, k.clone()));
    }
    out
}
