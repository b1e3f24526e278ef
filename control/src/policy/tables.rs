//! The rendered tables kept up to date pod by pod (the seed's renderer cache): per
//! local pod its configuration, the parts of its local table due to each restricted
//! local sender, its table's name and its share of the global table; tables shared by
//! name with use counts; each generation's diff from what it touched. A change
//! re-combines only the (pod, sender) pairs whose inputs changed: the two addresses,
//! the rules of the pod that can match the sender's address, the rules of the sender
//! that can match the pod's. The result is exactly [`super::renderer::render`]'s.

use super::cache::Key;
use super::renderer::{
    assemble, global_part, global_rest, part, reflect_table, table_name, Diff, Indexed, Part,
    PodTables, Rendered, GLOBAL_TABLE, REFLECT_TABLE,
};
use super::PolicyError;
use ferrule_dataplane::acl::Rule;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

/// What the renderer needs of a local active pod.
#[derive(Debug, Clone)]
pub struct PodInput {
    pub ips: Vec<IpAddr>,
    pub port: String,
    pub config: Arc<Indexed>,
}

#[derive(Debug, Clone)]
struct Slot {
    input: PodInput,
    /// Parts of the local table, by restricted sender.
    parts: BTreeMap<Key, Part>,
    /// The local table's name (`None`: no table).
    name: Option<String>,
    /// The pod's share of the global table.
    global: Vec<Rule>,
}

/// The renderer's state for the local pods.
#[derive(Debug, Clone, Default)]
pub struct Tables {
    slots: BTreeMap<Key, Slot>,
    /// Local pods by address.
    by_ip: HashMap<IpAddr, BTreeSet<Key>>,
    out: Rendered,
    /// Pods using each table of `out`.
    users: HashMap<String, usize>,
    /// `out` lags the slots (a failed check): refresh every pod next time.
    resync: bool,
}

/// Which (pod, sender) pairs to re-combine.
#[derive(Default)]
struct Todo {
    /// Pods whose every pair is re-combined.
    rows: BTreeSet<Key>,
    /// Senders whose every pair is re-combined.
    cols: BTreeSet<Key>,
    /// Single pairs: pod → senders.
    pairs: BTreeMap<Key, BTreeSet<Key>>,
}

/// The addresses whose matching rules differ between two rule lists (`None`: all).
fn changed_hosts(
    old: &[Rule],
    old_ix: &super::renderer::AddrIndex,
    new: &[Rule],
    new_ix: &super::renderer::AddrIndex,
) -> Option<Vec<IpAddr>> {
    if !old_ix.same_wide(old, new_ix, new) {
        return None;
    }
    Some(old_ix.changed_hosts(old, new_ix, new))
}

impl Tables {
    /// The current rendering.
    pub fn rendered(&self) -> &Rendered {
        &self.out
    }

    /// Applies `changes` (per pod its new input, `None`: not a local active pod any
    /// more), re-renders what they affect and returns the diff, unless `check` rejects
    /// the new rendering: then the previous one stays current.
    pub fn update(
        &mut self,
        changes: impl IntoIterator<Item = (Key, Option<PodInput>)>,
        check: impl FnOnce(&Rendered) -> Result<(), PolicyError>,
    ) -> Result<Diff, PolicyError> {
        let mut todo = Todo::default();
        let mut dirty: BTreeSet<Key> = BTreeSet::new();
        // Pods whose share of the global table may have changed.
        let mut shares: BTreeSet<Key> = BTreeSet::new();
        let mut global_changed = false;
        // Memo of the address comparisons, per pair of configurations (both kept
        // alive meanwhile, so that their addresses identify them).
        let mut memo: HashMap<(usize, usize, bool), Option<Vec<IpAddr>>> = HashMap::new();
        let mut keep: Vec<Arc<Indexed>> = Vec::new();
        for (k, input) in changes {
            let old = self.slots.remove(&k);
            if let Some(s) = &old {
                self.unindex(&k, &s.input.ips);
            }
            let Some(new) = input else {
                if let Some(s) = old {
                    todo.cols.insert(k.clone());
                    global_changed |= !s.global.is_empty();
                    dirty.insert(k);
                }
                continue;
            };
            for ip in &new.ips {
                self.by_ip.entry(*ip).or_default().insert(k.clone());
            }
            let Some(old) = old else {
                todo.rows.insert(k.clone());
                todo.cols.insert(k.clone());
                dirty.insert(k.clone());
                shares.insert(k.clone());
                self.slots.insert(
                    k,
                    Slot {
                        input: new,
                        parts: BTreeMap::new(),
                        name: None,
                        global: Vec::new(),
                    },
                );
                continue;
            };
            let (o, n) = (&old.input.config, &new.config);
            let same_config = Arc::ptr_eq(o, n);
            keep.push(o.clone());
            if old.input.ips != new.ips {
                todo.rows.insert(k.clone());
                todo.cols.insert(k.clone());
                dirty.insert(k.clone());
                shares.insert(k.clone());
            } else if !same_config {
                let (or, nr) = (&o.rules, &n.rules);
                if or.to_pod != nr.to_pod {
                    dirty.insert(k.clone());
                    let ptrs = (Arc::as_ptr(o) as usize, Arc::as_ptr(n) as usize, true);
                    let hosts = memo.entry(ptrs).or_insert_with(|| {
                        changed_hosts(&or.to_pod, &o.accepts, &nr.to_pod, &n.accepts)
                    });
                    match hosts {
                        None => {
                            todo.rows.insert(k.clone());
                        }
                        Some(ips) => {
                            let senders = ips.iter().filter_map(|ip| self.by_ip.get(ip));
                            let row = todo.pairs.entry(k.clone()).or_default();
                            row.extend(senders.flatten().cloned());
                        }
                    }
                }
                if or.from_pod != nr.from_pod {
                    shares.insert(k.clone());
                    let origin = |r: &[Rule]| r.last().map(|r| r.origin.clone());
                    if or.from_pod.is_empty() != nr.from_pod.is_empty() {
                        dirty.insert(k.clone());
                    }
                    let ptrs = (Arc::as_ptr(o) as usize, Arc::as_ptr(n) as usize, false);
                    let hosts = if origin(&or.from_pod) != origin(&nr.from_pod)
                        || or.from_pod.is_empty()
                        || nr.from_pod.is_empty()
                    {
                        &None
                    } else {
                        memo.entry(ptrs).or_insert_with(|| {
                            changed_hosts(&or.from_pod, &o.sends, &nr.from_pod, &n.sends)
                        })
                    };
                    match hosts {
                        None => {
                            todo.cols.insert(k.clone());
                        }
                        Some(ips) => {
                            for pod in ips.iter().filter_map(|ip| self.by_ip.get(ip)).flatten() {
                                todo.pairs.entry(pod.clone()).or_default().insert(k.clone());
                            }
                        }
                    }
                }
            }
            if old.input.port != new.port {
                dirty.insert(k.clone());
            }
            self.slots.insert(k, Slot { input: new, ..old });
        }
        self.recombine(&todo, &mut dirty);
        if self.resync {
            dirty.extend(self.slots.keys().cloned());
            dirty.extend(self.out.pods.keys().cloned());
            global_changed = true;
        }

        // Tables of the pods whose parts or rules changed, and the pods to refresh.
        let mut fresh: HashMap<String, Vec<Rule>> = HashMap::new();
        for k in &dirty {
            let Some(s) = self.slots.get_mut(k) else {
                continue;
            };
            let table = assemble(&s.input.config.rules, s.parts.values());
            s.name = if table.is_empty() {
                None
            } else {
                let name = table_name(&table);
                fresh.entry(name.clone()).or_insert(table);
                Some(name)
            };
        }
        for k in &shares {
            let Some(s) = self.slots.get_mut(k) else {
                continue;
            };
            let g = global_part(&s.input.ips, &s.input.config.rules);
            if g != s.global {
                s.global = g;
                global_changed = true;
            }
        }
        drop(keep);
        let mut log = Log::default();
        for k in dirty {
            let new = self.slots.get(&k).map(|s| PodTables {
                port: s.input.port.clone(),
                ingress: s.name.as_ref().map(|_| REFLECT_TABLE.to_string()),
                egress: s.name.clone(),
            });
            self.set_pod(&mut log, k, new, &mut fresh);
        }
        if global_changed {
            self.set_global(&mut log);
        }
        match check(&self.out) {
            Ok(()) => {
                self.resync = false;
                Ok(log.diff(&self.out))
            }
            Err(e) => {
                log.undo(&mut self.out);
                self.users.clear();
                for t in self.out.pods.values() {
                    for name in t.egress.iter().chain(&t.ingress) {
                        *self.users.entry(name.clone()).or_default() += 1;
                    }
                }
                self.resync = true;
                Err(e)
            }
        }
    }

    fn unindex(&mut self, k: &Key, ips: &[IpAddr]) {
        for ip in ips {
            if let Some(s) = self.by_ip.get_mut(ip) {
                s.remove(k);
                if s.is_empty() {
                    self.by_ip.remove(ip);
                }
            }
        }
    }

    /// Re-combines the pairs of `todo`; adds the pods whose parts changed to `dirty`.
    fn recombine(&mut self, todo: &Todo, dirty: &mut BTreeSet<Key>) {
        let none = BTreeSet::new();
        let senders: Vec<&Key> = self
            .slots
            .iter()
            .filter(|(_, s)| !s.input.config.rules.from_pod.is_empty())
            .map(|(k, _)| k)
            .collect();
        let mut updates: Vec<(Key, Key, Option<Part>)> = Vec::new();
        for (pk, p) in &self.slots {
            let one = |qk: &Key| -> Option<Part> {
                if qk == pk {
                    return None;
                }
                let q = self.slots.get(qk)?;
                part(&p.input.ips, &p.input.config, &q.input.ips, &q.input.config)
            };
            let mut set = |qk: &Key, new: Option<Part>| {
                if p.parts.get(qk) != new.as_ref() {
                    updates.push((pk.clone(), qk.clone(), new));
                }
            };
            if todo.rows.contains(pk) {
                // Every restricted sender, and no part from anyone else.
                for qk in p.parts.keys() {
                    if senders.binary_search(&qk).is_err() {
                        set(qk, None);
                    }
                }
                for qk in &senders {
                    set(qk, one(qk));
                }
                continue;
            }
            for qk in todo.cols.iter().chain(todo.pairs.get(pk).unwrap_or(&none)) {
                set(qk, one(qk));
            }
        }
        for (pk, qk, new) in updates {
            if let Some(s) = self.slots.get_mut(&pk) {
                match new {
                    Some(part) => s.parts.insert(qk, part),
                    None => s.parts.remove(&qk),
                };
                dirty.insert(pk);
            }
        }
    }

    /// Sets the tables of pod `k` in the output.
    fn set_pod(
        &mut self,
        log: &mut Log,
        k: Key,
        new: Option<PodTables>,
        fresh: &mut HashMap<String, Vec<Rule>>,
    ) {
        let old = self.out.pods.get(&k);
        if old == new.as_ref() {
            return;
        }
        let old = old.cloned();
        for name in old.iter().flat_map(|t| t.egress.iter().chain(&t.ingress)) {
            let n = self.users.entry(name.clone()).or_default();
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.users.remove(name);
                let rules = self.out.tables.remove(name);
                log.table(name, rules);
            }
        }
        for name in new.iter().flat_map(|t| t.egress.iter().chain(&t.ingress)) {
            let n = self.users.entry(name.clone()).or_default();
            *n += 1;
            if *n == 1 {
                let rules = if name == REFLECT_TABLE {
                    reflect_table()
                } else {
                    fresh.get(name).cloned().unwrap_or_default()
                };
                log.table(name, None);
                self.out.tables.insert(name.clone(), rules);
            }
        }
        log.pods.entry(k.clone()).or_insert(old);
        match new {
            Some(t) => self.out.pods.insert(k, t),
            None => self.out.pods.remove(&k),
        };
    }

    /// Rebuilds the global table from the pods' shares.
    fn set_global(&mut self, log: &mut Log) {
        let mut g: Vec<Rule> = self
            .slots
            .values()
            .flat_map(|s| s.global.iter().cloned())
            .collect();
        if !g.is_empty() {
            g.push(global_rest());
        }
        let old = self.out.tables.get(GLOBAL_TABLE);
        if old.map_or(g.is_empty(), |o| *o == g) {
            return;
        }
        let old = self.out.tables.remove(GLOBAL_TABLE);
        log.table(GLOBAL_TABLE, old);
        log.global.get_or_insert(self.out.global.take());
        if !g.is_empty() {
            self.out.tables.insert(GLOBAL_TABLE.into(), g);
            self.out.global = Some(GLOBAL_TABLE.into());
        }
    }
}

/// What one generation changed in the output: the previous value of every table and
/// pod it touched.
#[derive(Default)]
struct Log {
    tables: BTreeMap<String, Option<Vec<Rule>>>,
    pods: BTreeMap<Key, Option<PodTables>>,
    global: Option<Option<String>>,
}

impl Log {
    /// Records the previous content of table `name` (the first time it is touched).
    fn table(&mut self, name: &str, old: Option<Vec<Rule>>) {
        if !self.tables.contains_key(name) {
            self.tables.insert(name.to_string(), old);
        }
    }

    fn diff(self, now: &Rendered) -> Diff {
        let mut d = Diff::default();
        for (name, old) in self.tables {
            match (old, now.tables.get(&name)) {
                (None, Some(_)) => d.added.push(name),
                (Some(_), None) => d.removed.push(name),
                (Some(o), Some(n)) if o != *n => d.changed.push(name),
                _ => {}
            }
        }
        for (k, old) in self.pods {
            if old.as_ref() != now.pods.get(&k) {
                d.pods.push(k);
            }
        }
        d.global = self.global.is_some_and(|g| g != now.global);
        d
    }

    fn undo(self, out: &mut Rendered) {
        for (name, old) in self.tables {
            match old {
                Some(rules) => out.tables.insert(name, rules),
                None => out.tables.remove(&name),
            };
        }
        for (k, old) in self.pods {
            match old {
                Some(t) => out.pods.insert(k, t),
                None => out.pods.remove(&k),
            };
        }
        if let Some(g) = self.global {
            out.global = g;
        }
    }
}
