//! The rendered tables kept up to date pod by pod (the seed's renderer cache): per
//! local pod its configuration, the parts of its local table due to each restricted
//! local sender, its table's name and its share of the global table; tables shared by
//! name with use counts; each generation's diff from what it touched. A change
//! re-combines only the (pod, sender) pairs whose inputs changed: the two addresses,
//! the rules of the pod that can match the sender's address, the rules of the sender
//! that can match the pod's (found from where the old and new rule lists differ). The
//! global table is patched where a pod's egress rules changed, not rebuilt. The
//! result is exactly [`super::renderer::render`]'s.

use super::cache::Key;
use super::configurator::dst_family;
use super::renderer::{
    assemble, global_part, global_rest, host_of, part, reflect_table, table_name, Diff, Indexed,
    Part, PodTables, Rendered, GLOBAL_TABLE, REFLECT_TABLE,
};
use super::PolicyError;
use ferrule_api::acl::{AttachTarget, DnsPolicy};
use ferrule_dataplane::acl::Rule;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

/// What the renderer needs of a local active pod.
#[derive(Debug, Clone)]
pub struct PodInput {
    pub ips: Vec<IpAddr>,
    pub port: AttachTarget,
    pub config: Arc<Indexed>,
}

#[derive(Debug, Clone)]
struct Slot {
    input: PodInput,
    /// Parts of the local table, by restricted sender.
    parts: BTreeMap<Key, Part>,
    /// The local table's name (`None`: no table).
    name: Option<String>,
    /// The length of the pod's share of the global table.
    global_len: usize,
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

/// Where two rule lists differ: `None` when equal, else the lengths of their common
/// prefix and suffix.
fn middle(old: &[Rule], new: &[Rule]) -> Option<(usize, usize)> {
    let p = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    if p == old.len() && p == new.len() {
        return None;
    }
    let room = old.len().min(new.len()) - p;
    let s = old
        .iter()
        .rev()
        .zip(new.iter().rev())
        .take(room)
        .take_while(|(a, b)| a == b)
        .count();
    Some((p, s))
}

/// How one side of a pod's rules changed, for the pairs it feeds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SideChange {
    Same,
    /// Only the rules that can match these host addresses (by the indexed field).
    Hosts(Vec<IpAddr>),
    /// The rules that can match any address.
    All,
}

/// How `old` became `new`, indexed by source (`by_src`) or destination: the rules
/// that can match an address are those for its host prefix and the wide ones, so
/// when the wide rules of the differing middles are the same, only the host
/// addresses named in the middles see different rules.
fn side_change(old: &[Rule], new: &[Rule], by_src: bool) -> SideChange {
    let Some((p, s)) = middle(old, new) else {
        return SideChange::Same;
    };
    let (om, nm) = (&old[p..old.len() - s], &new[p..new.len() - s]);
    let addr = |r: &Rule| host_of(if by_src { r.src } else { r.dst });
    let wide = |m: &'_ [Rule]| {
        m.iter()
            .filter(|r| addr(r).is_none())
            .cloned()
            .collect::<Vec<Rule>>()
    };
    if wide(om) != wide(nm) {
        return SideChange::All;
    }
    let mut hosts: Vec<IpAddr> = om.iter().chain(nm).filter_map(addr).collect();
    hosts.sort_unstable();
    hosts.dedup();
    SideChange::Hosts(hosts)
}

/// How a pod's configuration changed: `to_pod` by source, `from_pod` by destination
/// (`All` also when its last rule's origin, which the parts name, changed).
fn config_change(old: &Indexed, new: &Indexed) -> (SideChange, SideChange) {
    let (o, n) = (&old.rules, &new.rules);
    let to = side_change(&o.to_pod, &n.to_pod, true);
    let origin = |r: &[Rule]| r.last().map(|r| r.origin.clone());
    let from = if o.from_pod == n.from_pod {
        SideChange::Same
    } else if origin(&o.from_pod) != origin(&n.from_pod) {
        SideChange::All
    } else {
        side_change(&o.from_pod, &n.from_pod, false)
    };
    (to, from)
}

/// The new share of the global table of a pod whose egress rules or addresses
/// changed, patched from its old share `old` where the rules did not change; and
/// whether it differs from the old one.
fn patch_share(
    old: Vec<Rule>,
    old_ips: &[IpAddr],
    old_from: &[Rule],
    ips: &[IpAddr],
    from: &[Rule],
) -> (Vec<Rule>, bool) {
    if old_ips != ips {
        let new = global_part(ips, from);
        let changed = new != old;
        return (new, changed);
    }
    let Some((p, s)) = middle(old_from, from) else {
        return (old, false);
    };
    let count = |rules: &[Rule]| -> usize {
        rules
            .iter()
            .map(|r| ips.iter().filter(|ip| dst_family(r, **ip)).count())
            .sum()
    };
    let head = count(&old_from[..p]);
    let tail = count(&old_from[old_from.len() - s..]);
    let mid = global_part(ips, &from[p..from.len() - s]);
    let changed = old[head..old.len() - tail] != mid[..];
    let mut old = old;
    let rest = old.split_off(old.len() - tail);
    old.truncate(head);
    old.extend(mid);
    old.extend(rest);
    (old, changed)
}

/// Pods whose share of the global table may have changed, with their addresses and
/// configuration before (`None`: new pods).
type Shares = HashMap<Key, Option<(Vec<IpAddr>, Arc<Indexed>)>>;

/// What happened to the global table in one generation.
#[derive(Default)]
struct GlobalChange {
    before: bool,
    after: bool,
    changed: bool,
}

impl Tables {
    /// The current rendering.
    pub fn rendered(&self) -> &Rendered {
        &self.out
    }

    /// The DNS policies of the current rendering, which the engine keeps.
    pub fn dns_mut(&mut self) -> &mut BTreeMap<Key, DnsPolicy> {
        &mut self.out.dns
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
        // Pods whose share of the global table may have changed, with their address
        // and rules before (`None`: new), and the old share lengths of pods gone.
        let mut shares = Shares::new();
        let mut gone: BTreeMap<Key, usize> = BTreeMap::new();
        // A pod's address changed, or a pod with a share left: patching could not
        // tell exactly whether the table changed.
        let mut moved = false;
        // How configurations changed, per pair of them (both kept alive meanwhile, so
        // that their addresses identify them).
        let mut memo: HashMap<(usize, usize), (SideChange, SideChange)> = HashMap::new();
        for (k, input) in changes {
            let old = self.slots.remove(&k);
            if let Some(s) = &old {
                self.unindex(&k, &s.input.ips);
            }
            let Some(new) = input else {
                if let Some(s) = old {
                    todo.cols.insert(k.clone());
                    gone.insert(k.clone(), s.global_len);
                    moved |= s.global_len > 0;
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
                shares.insert(k.clone(), None);
                self.slots.insert(
                    k,
                    Slot {
                        input: new,
                        parts: BTreeMap::new(),
                        name: None,
                        global_len: 0,
                    },
                );
                continue;
            };
            let (o, n) = (&old.input.config, &new.config);
            if old.input.ips != new.ips {
                todo.rows.insert(k.clone());
                todo.cols.insert(k.clone());
                dirty.insert(k.clone());
                shares.insert(k.clone(), Some((old.input.ips.clone(), o.clone())));
                moved = true;
            } else if !Arc::ptr_eq(o, n) {
                let ptrs = (Arc::as_ptr(o) as usize, Arc::as_ptr(n) as usize);
                let (to, from) = memo.entry(ptrs).or_insert_with(|| config_change(o, n));
                match to {
                    SideChange::Same => {}
                    SideChange::All => {
                        dirty.insert(k.clone());
                        todo.rows.insert(k.clone());
                    }
                    SideChange::Hosts(ips) => {
                        dirty.insert(k.clone());
                        let senders = ips.iter().filter_map(|ip| self.by_ip.get(ip));
                        let row = todo.pairs.entry(k.clone()).or_default();
                        row.extend(senders.flatten().cloned());
                    }
                }
                if o.rules.from_pod.is_empty() != n.rules.from_pod.is_empty() {
                    dirty.insert(k.clone());
                }
                match from {
                    SideChange::Same => {}
                    SideChange::All => {
                        todo.cols.insert(k.clone());
                    }
                    SideChange::Hosts(ips) => {
                        for pod in ips.iter().filter_map(|ip| self.by_ip.get(ip)).flatten() {
                            todo.pairs.entry(pod.clone()).or_default().insert(k.clone());
                        }
                    }
                }
                if *from != SideChange::Same {
                    shares.insert(k.clone(), Some((old.input.ips.clone(), o.clone())));
                }
            }
            if old.input.port != new.port {
                dirty.insert(k.clone());
            }
            self.slots.insert(k, Slot { input: new, ..old });
        }
        drop(memo);
        self.recombine(&todo, &mut dirty);
        if self.resync {
            dirty.extend(self.slots.keys().cloned());
            dirty.extend(self.out.pods.keys().cloned());
        }

        // Tables of the pods whose parts or rules changed.
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
        let mut log = Log::default();
        for k in dirty {
            let new = self.slots.get(&k).map(|s| PodTables {
                port: s.input.port.clone(),
                ingress: s.name.as_ref().map(|_| REFLECT_TABLE.to_string()),
                egress: s.name.clone(),
            });
            self.set_pod(&mut log, k, new, &mut fresh);
        }
        if let Err(e) = check(&self.out) {
            log.undo(&mut self.out);
            self.users.clear();
            for t in self.out.pods.values() {
                for name in t.egress.iter().chain(&t.ingress) {
                    *self.users.entry(name.clone()).or_default() += 1;
                }
            }
            self.resync = true;
            return Err(e);
        }
        // Each pod's share names its addresses as sources: when those of the pods
        // whose shares changed belong to no other pod, the table changed exactly
        // when one of their shares did.
        let own_ips = || {
            shares.keys().all(|k| {
                self.slots.get(k).is_none_or(|s| {
                    s.input
                        .ips
                        .iter()
                        .all(|ip| self.by_ip.get(ip).is_some_and(|p| p.len() == 1))
                })
            })
        };
        let global = if self.resync || moved || !own_ips() {
            self.rebuild_global()
        } else if shares.is_empty() && gone.is_empty() {
            GlobalChange::default()
        } else {
            self.patch_global(&shares, &gone)
        };
        self.resync = false;
        let mut d = log.diff(&self.out);
        let list = match (global.before, global.after) {
            (false, true) => Some(&mut d.added),
            (true, false) => Some(&mut d.removed),
            (true, true) if global.changed => Some(&mut d.changed),
            _ => None,
        };
        if let Some(list) = list {
            let at = list.partition_point(|n| n.as_str() < GLOBAL_TABLE);
            list.insert(at, GLOBAL_TABLE.to_string());
        }
        d.global = global.before != global.after;
        Ok(d)
    }

    /// Patches the global table: the shares of the pods in `shares` from their old
    /// addresses and rules, the shares of the pods `gone` removed, the others moved.
    fn patch_global(&mut self, shares: &Shares, gone: &BTreeMap<Key, usize>) -> GlobalChange {
        let mut old = self.out.tables.remove(GLOBAL_TABLE).unwrap_or_default();
        let before = old.pop().is_some();
        let mut changed = false;
        let mut new = Vec::with_capacity(old.len() + 16);
        let mut old = old.into_iter();
        let mut gone = gone.iter().peekable();
        for (k, s) in self.slots.iter_mut() {
            while let Some((_, len)) = gone.next_if(|(g, _)| *g < k) {
                changed |= *len > 0;
                old.by_ref().take(*len).for_each(drop);
            }
            let share: Vec<Rule> = old.by_ref().take(s.global_len).collect();
            let share = match shares.get(k) {
                None => share,
                Some(None) => {
                    let share = global_part(&s.input.ips, &s.input.config.rules.from_pod);
                    changed |= !share.is_empty();
                    share
                }
                Some(Some((ips, config))) => {
                    let (share, c) = patch_share(
                        share,
                        ips,
                        &config.rules.from_pod,
                        &s.input.ips,
                        &s.input.config.rules.from_pod,
                    );
                    changed |= c;
                    share
                }
            };
            s.global_len = share.len();
            new.extend(share);
        }
        for (_, len) in gone {
            changed |= *len > 0;
        }
        self.set_global_table(new, before, changed)
    }

    /// Rebuilds the global table from every pod.
    fn rebuild_global(&mut self) -> GlobalChange {
        let mut old = self.out.tables.remove(GLOBAL_TABLE).unwrap_or_default();
        let before = old.pop().is_some();
        let mut new = Vec::new();
        for s in self.slots.values_mut() {
            let share = global_part(&s.input.ips, &s.input.config.rules.from_pod);
            s.global_len = share.len();
            new.extend(share);
        }
        let changed = new != old;
        self.set_global_table(new, before, changed)
    }

    fn set_global_table(
        &mut self,
        mut rules: Vec<Rule>,
        before: bool,
        changed: bool,
    ) -> GlobalChange {
        let after = !rules.is_empty();
        if after {
            rules.push(global_rest());
            self.out.tables.insert(GLOBAL_TABLE.into(), rules);
            self.out.global = Some(GLOBAL_TABLE.into());
        } else {
            self.out.global = None;
        }
        GlobalChange {
            before,
            after,
            changed: changed && before && after,
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
                    // Assembled in this generation, or (when a pod left the table
                    // and another joined it) taken out of the output earlier.
                    fresh
                        .remove(name)
                        .or_else(|| log.tables.get(name).cloned().flatten())
                        .unwrap_or_default()
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
}

/// What one generation changed in the output: the previous value of every table and
/// pod it touched.
#[derive(Default)]
struct Log {
    tables: BTreeMap<String, Option<Vec<Rule>>>,
    pods: BTreeMap<Key, Option<PodTables>>,
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
    }
}
