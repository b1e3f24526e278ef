//! Kubernetes NetworkPolicy → Ferrule ACL tables, in the layers of Contiv/VPP's policy
//! plugin: [`cache`] (Namespaces, Pods, NetworkPolicies from YAML/JSON) → [`processor`]
//! (selectors resolved, pods a change affects) → [`configurator`] (6-tuple rules per
//! pod and side) → [`renderer`] (combined local tables, reflective and global tables,
//! diffs) → the `acl.apply` input. [`Engine`] keeps the layers' state for one node
//! and re-renders incrementally; [`verdict`] answers "would this connection pass" by
//! sending packets through the rendered tables with the dataplane's classifier.
//! See docs/policy.md.

pub mod cache;
pub mod configurator;
pub mod processor;
pub mod renderer;
pub mod selector;
pub mod subnet;
pub mod verdict;

use cache::{valid_port_name, Cache, Key, Kind, Object, PORT_ANNOTATION};
use configurator::{configure, PodRules};
use processor::Processor;
use renderer::{Diff, LocalPod, Rendered};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

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
/// configurator's rules of each local pod and the last rendered tables.
#[derive(Debug, Clone)]
pub struct Engine {
    pub local: Local,
    pub cache: Cache,
    processor: Processor,
    rules: BTreeMap<Key, PodRules>,
    rendered: Rendered,
}

impl Engine {
    /// Resolves, configures and renders `cache` for the pods of `local`.
    pub fn new(cache: Cache, local: Local) -> Result<Engine, PolicyError> {
        let processor = Processor::new(&cache);
        let mut e = Engine {
            local,
            cache,
            processor,
            rules: BTreeMap::new(),
            rendered: Rendered::default(),
        };
        let keys: Vec<Key> = e.cache.pods.keys().cloned().collect();
        e.reconfigure(keys);
        e.rendered = e.render()?;
        Ok(e)
    }

    /// The tables rendered last.
    pub fn rendered(&self) -> &Rendered {
        &self.rendered
    }

    /// The configurator's rules of a local pod.
    pub fn pod_rules(&self, key: &Key) -> Option<&PodRules> {
        self.rules.get(key)
    }

    /// Applies `changes`, re-configures the pods they affect, re-renders and returns
    /// what changed. On a render error the previous tables stay current (and the
    /// changes stay applied to the cache).
    pub fn apply(&mut self, changes: Vec<Change>) -> Result<Diff, PolicyError> {
        let mut affected = BTreeSet::new();
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
            affected.extend(self.processor.update(&self.cache, kind, &key, old.as_ref()));
        }
        self.reconfigure(affected);
        let new = self.render()?;
        let diff = new.diff(&self.rendered);
        self.rendered = new;
        Ok(diff)
    }

    /// Replaces the whole state with `objects`, as a list of changes.
    pub fn reload(&mut self, objects: Vec<Object>) -> Result<Diff, PolicyError> {
        let next = Cache::from_objects(objects);
        self.apply(changes_between(&self.cache, &next))
    }

    fn reconfigure(&mut self, keys: impl IntoIterator<Item = Key>) {
        for k in keys {
            match self.cache.pods.get(&k) {
                Some(p) if p.is_active() && self.local.holds(p) => {
                    let r = configure(&self.cache, &self.processor, &k);
                    self.rules.insert(k, r);
                }
                _ => {
                    self.rules.remove(&k);
                }
            }
        }
    }

    fn render(&self) -> Result<Rendered, PolicyError> {
        let pods: Vec<LocalPod<'_>> = self
            .rules
            .iter()
            .filter_map(|(k, rules)| {
                Some(LocalPod {
                    pod: self.cache.pods.get(k)?,
                    rules,
                })
            })
            .collect();
        let rendered = renderer::render(&pods);
        let mut ports: BTreeMap<&str, &Key> = BTreeMap::new();
        for (k, t) in &rendered.pods {
            if t.egress.is_none() && t.ingress.is_none() {
                continue;
            }
            if !valid_port_name(&t.port) {
                return Err(PolicyError::Render(format!(
                    "Pod {k}: metadata.name: {:?} is not a Ferrule port name (1-32 of A-Z a-z 0-9 - _ .); \
                     set the annotation {PORT_ANNOTATION} to the pod's port",
                    t.port
                )));
            }
            if let Some(other) = ports.insert(&t.port, k) {
                return Err(PolicyError::Render(format!(
                    "Pod {k} and Pod {other} both map to port {:?}; set the annotation {PORT_ANNOTATION} on one of them",
                    t.port
                )));
            }
        }
        Ok(rendered)
    }
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
    for k in old
        .policies
        .keys()
        .filter(|k| !new.policies.contains_key(*k))
    {
        out.push(Change::Delete(Kind::NetworkPolicy, k.clone()));
    }
    out
}
