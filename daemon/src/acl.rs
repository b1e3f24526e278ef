//! The daemon's ACL state: `acl.apply` input parsing and validation (every error names
//! the table, the rule index and the field), the change set against the tables in
//! force, compiling only changed tables, rule hit-counter slots that survive applies,
//! `acl.dump` (built whole, or streamed as it is sent) and `acl.clear-counters`.
//!
//! Counters: every rule (and every table's no-match case) owns a counter slot in each
//! worker's [`RuleCounters`]. A rule kept by an apply — same table name, same content —
//! keeps its slot, so its counts carry on. A slot given up by an apply is reused only
//! once no worker can still hold a generation that counts into it; a slot's count is
//! its workers' sum minus a baseline taken when it was (re)assigned or cleared.

use ferrule_api::acl::{invalid, AclApply, AclAttach, AttachTarget};
use ferrule_api::rpc::{ReplyStream, RpcError};
use ferrule_api::{self as api, AclAttachment, AclRuleDump, AclTableDump, Hits};
use ferrule_dataplane::acl::table::{AclTables, Direction, Table};
use ferrule_dataplane::acl::Rule;
use ferrule_dataplane::counters::{RuleCounters, WorkerCounters, MAX_PORTS};
use ferrule_dataplane::snapshot::PortRole;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

pub use ferrule_api::acl::MAX_TABLES;
use ferrule_dataplane::acl::identity::IdentityId;

/// A port as the ACL state names it: its name, role and the pod it records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclPort {
    /// Empty for a free slot.
    pub name: String,
    pub role: PortRole,
    /// `namespace/name` (`port.add --pod`, the CNI plugin).
    pub pod: Option<String>,
    /// A primary-network pod's default-network port: attachments by pod go to the
    /// pod's port on its primary network instead (policies act within the network
    /// the pod's namespace uses).
    pub locked: bool,
}

impl AclPort {
    /// Whether an attachment to `target` reaches this port.
    pub(crate) fn takes(&self, target: &AttachTarget) -> bool {
        !self.name.is_empty()
            && match target {
                AttachTarget::Port(name) => self.name == *name,
                AttachTarget::Pod(pod) => !self.locked && self.pod.as_deref() == Some(pod.as_str()),
            }
    }
}

/// The desired ACL state of one `acl.apply`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Tables in input order: name and rules.
    pub tables: Vec<(String, Vec<Rule>)>,
    /// Every attachment as given (by port or pod, and table name): resolved again
    /// whenever ports come or go.
    pub requested: Vec<AclAttach>,
    /// (port index, direction, table index): the attachments whose port exists now.
    pub attach: Vec<(u16, Direction, usize)>,
    /// Index of the global table.
    pub global: Option<usize>,
    /// The DNS policies (ports or pods whose DNS goes through the proxy).
    pub dns: Vec<ferrule_api::acl::DnsPolicy>,
    pub dry_run: bool,
}

/// Decodes and validates `acl.apply` params ([`AclApply::from_params`]) and resolves
/// attachments against the daemon's ports: by port name, or to every port that records
/// the pod named. An attachment whose port does not exist yet is kept, pending.
pub fn parse_apply(params: &Value, ports: &[AclPort]) -> Result<Desired, RpcError> {
    let apply = AclApply::from_params(params, None)?;
    let names: Vec<&str> = apply.tables.iter().map(|t| t.name.as_str()).collect();
    let attach = resolve(&apply.attach, &names, ports)?;
    let index = |name: &str| names.iter().position(|n| *n == name);
    let global = match apply.global.as_deref() {
        None => None,
        Some(g) => {
            Some(index(g).ok_or_else(|| RpcError::internal(format!("table {g:?} vanished")))?)
        }
    };
    Ok(Desired {
        tables: apply
            .tables
            .into_iter()
            .map(|t| (t.name, t.rules))
            .collect(),
        requested: apply.attach,
        attach,
        global,
        dns: apply.dns,
        dry_run: apply.dry_run,
    })
}

/// The attachments of `requested` whose port exists in `ports`, as (port index,
/// direction, table index into `tables`). Two attachments that reach the same port and
/// direction (a port named and a pod it records) are refused, naming the second.
fn resolve(
    requested: &[AclAttach],
    tables: &[&str],
    ports: &[AclPort],
) -> Result<Vec<(u16, Direction, usize)>, RpcError> {
    let mut out: Vec<(u16, Direction, usize)> = Vec::new();
    let mut from: Vec<usize> = Vec::new();
    for (k, a) in requested.iter().enumerate() {
        let table = tables
            .iter()
            .position(|t| *t == a.table)
            .ok_or_else(|| RpcError::internal(format!("table {:?} vanished", a.table)))?;
        for (i, p) in ports.iter().enumerate() {
            if !p.takes(&a.target) {
                continue;
            }
            if let Some(j) = out
                .iter()
                .position(|&(q, d, _)| usize::from(q) == i && d == a.direction)
            {
                return Err(invalid(
                    &format!("attach[{k}]"),
                    None,
                    None,
                    format!(
                        "{} reaches port {:?}, which attach[{}] gives an {} table already",
                        a.target,
                        p.name,
                        from[j],
                        a.direction.name()
                    ),
                ));
            }
            out.push((i as u16, a.direction, table));
            from.push(k);
        }
    }
    Ok(out)
}

/// The attachments of `requested` no port takes now.
fn pending(requested: &[AclAttach], ports: &[AclPort]) -> Vec<AclAttach> {
    requested
        .iter()
        .filter(|a| !ports.iter().any(|p| p.takes(&a.target)))
        .cloned()
        .collect()
}

/// Slots given up by an apply, reusable once `tables` (the generation's ACL state that
/// counted into them) is held by nobody else.
#[derive(Debug)]
struct Draining {
    tables: Arc<AclTables>,
    slots: Vec<u32>,
}

/// Counter-slot bookkeeping.
#[derive(Debug, Clone)]
struct Slots {
    free: Vec<u32>,
    next: u32,
    /// Slots there are: [`RuleCounters::CAPACITY`] (fewer in tests).
    capacity: usize,
}

impl Slots {
    fn new(capacity: usize) -> Self {
        Slots {
            free: Vec::new(),
            next: 0,
            capacity: capacity.min(RuleCounters::CAPACITY),
        }
    }

    fn take(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        if (self.next as usize) < self.capacity {
            self.next += 1;
            return Some(self.next - 1);
        }
        None
    }
}

/// What `apply` decided, before it is published.
#[derive(Debug)]
pub struct Applied {
    pub result: api::AclApplied,
    /// The new ACL state to publish; `None` for a dry run or when nothing changed.
    pub tables: Option<Arc<AclTables>>,
    /// Counter slots taken from rules this apply removes: once the workers run the new
    /// state, [`AclManager::rebase`] them.
    pub borrowed: Vec<u32>,
}

/// The ACL state in force and its counters' bookkeeping.
#[derive(Debug)]
pub struct AclManager {
    /// The ports by index: name, role, pod.
    ports: Vec<AclPort>,
    /// The attachments of the state in force as applied (by port or pod): resolved
    /// again when ports come or go.
    requested: Vec<AclAttach>,
    current: Arc<AclTables>,
    slots: Slots,
    draining: Vec<Draining>,
    /// Per slot: the summed count it had when assigned or last cleared.
    baseline: Baselines,
}

/// The per-slot baselines, copied on write: a streamed `acl.dump` keeps reading the
/// ones it started with while applies and clears go on.
#[derive(Debug, Clone, Default)]
struct Baselines(Arc<Vec<Hits>>);

impl Baselines {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn resize(&mut self, len: usize, value: Hits) {
        Arc::make_mut(&mut self.0).resize(len, value);
    }

    fn get_mut(&mut self, slot: usize) -> Option<&mut Hits> {
        if slot < self.0.len() {
            Some(&mut Arc::make_mut(&mut self.0)[slot])
        } else {
            None
        }
    }

    /// A slot's count: every worker's sum minus the baseline.
    fn hits(&self, counters: &[&RuleCounters], slot: u32) -> Hits {
        let now = raw(counters, slot);
        let base = self.0.get(slot as usize).copied().unwrap_or_default();
        Hits {
            packets: now.packets.wrapping_sub(base.packets),
            bytes: now.bytes.wrapping_sub(base.bytes),
        }
    }
}

impl std::ops::Index<usize> for Baselines {
    type Output = Hits;
    fn index(&self, slot: usize) -> &Hits {
        &self.0[slot]
    }
}

impl std::ops::IndexMut<usize> for Baselines {
    fn index_mut(&mut self, slot: usize) -> &mut Hits {
        &mut Arc::make_mut(&mut self.0)[slot]
    }
}

/// Sums a slot over every worker's counters.
fn raw(counters: &[&RuleCounters], slot: u32) -> Hits {
    counters.iter().fold(Hits::default(), |acc, c| {
        let (p, b) = c.get(slot);
        Hits {
            packets: acc.packets.wrapping_add(p),
            bytes: acc.bytes.wrapping_add(b),
        }
    })
}

impl AclManager {
    /// No tables, for a daemon with these ports (name, role) by index.
    pub fn new(ports: Vec<AclPort>) -> AclManager {
        AclManager::with_capacity(ports, RuleCounters::CAPACITY)
    }

    /// As [`AclManager::new`], with at most `capacity` counter slots (for tests of the
    /// limits; the workers' counters hold [`RuleCounters::CAPACITY`]).
    pub fn with_capacity(ports: Vec<AclPort>, capacity: usize) -> AclManager {
        AclManager {
            ports,
            requested: Vec::new(),
            current: Arc::default(),
            slots: Slots::new(capacity),
            draining: Vec::new(),
            baseline: Baselines::default(),
        }
    }

    /// The ACL state in force.
    pub fn current(&self) -> Arc<AclTables> {
        Arc::clone(&self.current)
    }

    /// The ports by index.
    pub fn ports(&self) -> &[AclPort] {
        &self.ports
    }

    /// Replaces the ports (added or removed at run time; an empty name is a free slot)
    /// and resolves the attachments again: one waiting for a port that now exists
    /// takes effect, one whose port is gone waits. Returns the new ACL state to
    /// publish when the attachments changed. An attachment that would give a port a
    /// second table in one direction (a pod's and its port's) is left waiting, logged.
    pub fn set_ports(&mut self, ports: Vec<AclPort>) -> Option<Arc<AclTables>> {
        self.ports = ports;
        let names: Vec<&str> = self
            .current
            .tables
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        let mut resolved: Vec<(u16, Direction, usize)> = Vec::new();
        for (k, a) in self.requested.iter().enumerate() {
            match resolve(std::slice::from_ref(a), &names, &self.ports) {
                Ok(found) => {
                    for f in found {
                        if resolved.iter().any(|&(p, d, _)| p == f.0 && d == f.1) {
                            tracing::warn!(attachment = k, target = %a.target, "the port has a table in this direction already; left waiting");
                        } else {
                            resolved.push(f);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(attachment = k, error = %e.message, "attachment left waiting")
                }
            }
        }
        let mut ingress = [None; MAX_PORTS];
        let mut egress = [None; MAX_PORTS];
        for &(port, direction, table) in &resolved {
            let at = match direction {
                Direction::Ingress => &mut ingress,
                Direction::Egress => &mut egress,
            };
            if let Some(slot) = at.get_mut(usize::from(port)) {
                *slot = Some(table as u16);
            }
        }
        if ingress == self.current.ingress && egress == self.current.egress {
            return None;
        }
        let next = Arc::new(AclTables::new(
            self.current.tables.clone(),
            ingress,
            egress,
            self.current.global,
            self.current.generation + 1,
        ));
        self.current = Arc::clone(&next);
        Some(next)
    }

    /// Recompiles the tables whose selector rules' identity sets changed (`selected`
    /// gives them now), keeping their rules, slots and attachments. Returns the new
    /// state to publish, if a table changed. A table that fails to compile keeps its
    /// old identity sets (logged).
    pub fn refresh_selectors(
        &mut self,
        selected: &dyn Fn(&str) -> Vec<IdentityId>,
    ) -> Option<Arc<AclTables>> {
        let mut changed = false;
        let tables: Vec<Arc<Table>> = self
            .current
            .tables
            .iter()
            .map(|t| {
                if t.selectors_current(selected) {
                    return Arc::clone(t);
                }
                match Table::compile_with(
                    t.name.clone(),
                    t.rules.clone(),
                    t.slots.clone(),
                    t.no_match_slot,
                    selected,
                ) {
                    Ok(table) => {
                        changed = true;
                        Arc::new(table)
                    }
                    Err(e) => {
                        tracing::warn!(table = %t.name, error = %e, "cannot recompile the table with its selectors' new identities; it keeps the old ones");
                        Arc::clone(t)
                    }
                }
            })
            .collect();
        if !changed {
            return None;
        }
        let next = Arc::new(AclTables::new(
            tables,
            self.current.ingress,
            self.current.egress,
            self.current.global,
            self.current.generation + 1,
        ));
        self.current = Arc::clone(&next);
        Some(next)
    }

    /// Per table of the state in force: its rule count, the packets its rules matched
    /// and the packets none did (metrics).
    pub fn table_counts(&self, counters: &[&RuleCounters]) -> Vec<crate::metrics::AclTableCounts> {
        self.current
            .tables
            .iter()
            .map(|t| crate::metrics::AclTableCounts {
                name: t.name.clone(),
                rules: t.rules.len(),
                matched: t
                    .slots
                    .iter()
                    .map(|&s| self.hits(counters, s).packets)
                    .fold(0u64, u64::wrapping_add),
                no_match: self.hits(counters, t.no_match_slot).packets,
            })
            .collect()
    }

    /// The attachments of the state in force that wait for their port.
    pub fn pending(&self) -> Vec<AclAttach> {
        pending(&self.requested, &self.ports)
    }

    /// What `acl.dump` lists as waiting: every waiting attachment when the dump is not
    /// filtered by table or port.
    fn pending_for(&self, params: &api::AclDumpParams) -> Vec<api::AclPending> {
        if params.table.is_some() || params.port.is_some() {
            return Vec::new();
        }
        self.pending().iter().map(api::AclPending::from).collect()
    }

    /// Returns slots of generations nobody holds any more to the free list, oldest
    /// first (a slot given up later may still be counted by an older generation).
    pub fn reclaim(&mut self) {
        let done = self
            .draining
            .iter()
            .take_while(|d| Arc::strong_count(&d.tables) == 1)
            .count();
        for d in self.draining.drain(..done) {
            self.slots.free.extend(d.slots);
        }
    }

    /// Slots in use or waiting to be reusable (for tests and reports).
    pub fn slots_held(&self) -> usize {
        self.slots.next as usize - self.slots.free.len()
    }

    /// Computes and compiles the new state and makes it the one in force; the caller
    /// must publish the returned `tables`. On error, for a dry run, or when nothing
    /// changed, nothing changes.
    pub fn apply(
        &mut self,
        desired: &Desired,
        counters: &[&RuleCounters],
        selected: &dyn Fn(&str) -> Vec<IdentityId>,
    ) -> Result<Applied, RpcError> {
        self.reclaim();
        let started = Instant::now();
        let old: HashMap<&str, &Arc<Table>> = self
            .current
            .tables
            .iter()
            .map(|t| (t.name.as_str(), t))
            .collect();
        let mut slots = self.slots.clone();
        let mut fresh: Vec<u32> = Vec::new();
        let mut kept_slots: std::collections::HashSet<u32> = std::collections::HashSet::new();
        let mut tables: Vec<Arc<Table>> = Vec::with_capacity(desired.tables.len());
        let (mut added, mut changed) = (Vec::new(), Vec::new());
        let mut unchanged = 0usize;
        // The limit is on what is held after the apply: the new state's rules, whatever
        // the state in force holds now.
        let total_rules: usize = desired.tables.iter().map(|(_, r)| r.len() + 1).sum();
        if total_rules > slots.capacity {
            return Err(invalid(
                "tables",
                None,
                None,
                format!(
                    "{total_rules} rules and tables need counters; at most {} can be held \
                     (one per rule and one per table)",
                    slots.capacity
                ),
            ));
        }
        // When free slots run out, slots of tables this apply removes (and of older
        // generations still draining) are borrowed: the caller re-bases their counts
        // once the workers have moved to the new state.
        let mut spare: Vec<u32> = self
            .current
            .tables
            .iter()
            .filter(|t| !desired.tables.iter().any(|(n, _)| *n == t.name))
            .flat_map(|t| {
                t.slots
                    .iter()
                    .copied()
                    .chain(std::iter::once(t.no_match_slot))
            })
            .chain(self.draining.iter().flat_map(|d| d.slots.iter().copied()))
            .collect();
        let mut borrowed: Vec<u32> = Vec::new();
        let mut take = |slots: &mut Slots, fresh: &mut Vec<u32>| -> Result<u32, RpcError> {
            let s = match slots.take() {
                Some(s) => s,
                None => {
                    let s = spare.pop().ok_or_else(|| {
                        invalid(
                            "tables",
                            None,
                            None,
                            format!(
                                "out of rule counter slots: the changed tables need more \
                                 than the {} slots not kept by unchanged rules",
                                slots.capacity
                            ),
                        )
                    })?;
                    borrowed.push(s);
                    s
                }
            };
            fresh.push(s);
            Ok(s)
        };
        for (t, (name, rules)) in desired.tables.iter().enumerate() {
            let previous = old.get(name.as_str());
            if let Some(prev) =
                previous.filter(|p| p.rules == *rules && p.selectors_current(selected))
            {
                unchanged += 1;
                kept_slots.extend(prev.slots.iter().copied());
                kept_slots.insert(prev.no_match_slot);
                tables.push(Arc::clone(prev));
                continue;
            }
            // Rules equal to one of the previous table's keep its slot, in order.
            let mut by_rule: HashMap<&Rule, std::collections::VecDeque<u32>> = HashMap::new();
            if let Some(prev) = previous {
                for (rule, &slot) in prev.rules.iter().zip(&prev.slots) {
                    by_rule.entry(rule).or_default().push_back(slot);
                }
            }
            let mut table_slots = Vec::with_capacity(rules.len());
            for rule in rules {
                let slot = match by_rule.get_mut(rule).and_then(|q| q.pop_front()) {
                    Some(slot) => {
                        kept_slots.insert(slot);
                        slot
                    }
                    None => take(&mut slots, &mut fresh)?,
                };
                table_slots.push(slot);
            }
            let no_match = match previous {
                Some(prev) => {
                    kept_slots.insert(prev.no_match_slot);
                    prev.no_match_slot
                }
                None => take(&mut slots, &mut fresh)?,
            };
            let table =
                Table::compile_with(name.clone(), rules.clone(), table_slots, no_match, selected)
                    .map_err(|e| {
                    invalid(
                        &format!("tables[{t}]"),
                        Some(name),
                        None,
                        format!("table {name:?}: {e}"),
                    )
                })?;
            if previous.is_some() {
                changed.push(name.clone());
            } else {
                added.push(name.clone());
            }
            tables.push(Arc::new(table));
        }
        let removed: Vec<String> = self
            .current
            .tables
            .iter()
            .filter(|t| !desired.tables.iter().any(|(n, _)| *n == t.name))
            .map(|t| t.name.clone())
            .collect();
        let mut ingress = [None; MAX_PORTS];
        let mut egress = [None; MAX_PORTS];
        for &(port, direction, table) in &desired.attach {
            let at = match direction {
                Direction::Ingress => &mut ingress,
                Direction::Egress => &mut egress,
            };
            if let Some(slot) = at.get_mut(usize::from(port)) {
                *slot = Some(table as u16);
            }
        }
        let global = desired.global.map(|g| g as u16);
        let new_state =
            AclTables::new(tables, ingress, egress, global, self.current.generation + 1);
        let attachments_changed = self.attachments(&self.current) != self.attachments(&new_state)
            || self
                .current
                .global
                .map(|g| &self.current.tables[usize::from(g)].name)
                != new_state
                    .global
                    .map(|g| &new_state.tables[usize::from(g)].name);
        let result = api::AclApplied {
            generation: 0,
            dry_run: desired.dry_run,
            tables: new_state.tables.len(),
            rules: new_state.tables.iter().map(|t| t.rules.len()).sum(),
            unchanged,
            attachments_changed,
            compile_ms: started.elapsed().as_secs_f64() * 1e3,
            added,
            changed,
            removed,
            pending: pending(&desired.requested, &self.ports)
                .iter()
                .map(api::AclPending::from)
                .collect(),
        };
        let nothing_changed = result.added.is_empty()
            && result.changed.is_empty()
            && result.removed.is_empty()
            && !attachments_changed
            && new_state.tables.len() == self.current.tables.len()
            && new_state
                .tables
                .iter()
                .zip(&self.current.tables)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if !desired.dry_run {
            // Waiting attachments are part of the state even when nothing in force
            // changes now.
            self.requested = desired.requested.clone();
        }
        if desired.dry_run || nothing_changed {
            return Ok(Applied {
                result,
                tables: None,
                borrowed: Vec::new(),
            });
        }
        // Commit the bookkeeping: fresh slots start from their current sums; slots no
        // longer used drain with the state that used them.
        for &slot in &fresh {
            for c in counters {
                c.reserve(slot);
            }
            let i = slot as usize;
            if self.baseline.len() <= i {
                self.baseline.resize(i + 1, Hits::default());
            }
            self.baseline[i] = raw(counters, slot);
        }
        let borrowed_set: std::collections::HashSet<u32> = borrowed.iter().copied().collect();
        let given_up: Vec<u32> = self
            .current
            .tables
            .iter()
            .flat_map(|t| {
                t.slots
                    .iter()
                    .copied()
                    .chain(std::iter::once(t.no_match_slot))
            })
            .filter(|s| !kept_slots.contains(s) && !borrowed_set.contains(s))
            .collect();
        for d in &mut self.draining {
            d.slots.retain(|s| !borrowed_set.contains(s));
        }
        self.slots = slots;
        let new_state = Arc::new(new_state);
        let old_state = std::mem::replace(&mut self.current, Arc::clone(&new_state));
        self.draining.push(Draining {
            tables: old_state,
            slots: given_up,
        });
        Ok(Applied {
            result,
            tables: Some(new_state),
            borrowed,
        })
    }

    /// Re-bases the counts of slots an apply borrowed, once no worker counts into them
    /// for the rules they had before: from now on they count only their new rules.
    pub fn rebase(&mut self, slots: &[u32], counters: &[&RuleCounters]) {
        for &slot in slots {
            if let Some(b) = self.baseline.get_mut(slot as usize) {
                *b = raw(counters, slot);
            }
        }
    }

    /// Attachments of a state as (port, direction, table name), sorted.
    fn attachments<'a>(&self, state: &'a AclTables) -> Vec<(usize, &'static str, &'a str)> {
        let mut v = Vec::new();
        for (direction, at) in [
            (Direction::Ingress, &state.ingress),
            (Direction::Egress, &state.egress),
        ] {
            for (port, t) in at.iter().enumerate() {
                if let Some(t) = t.and_then(|t| state.tables.get(usize::from(t))) {
                    v.push((port, direction.name(), t.name.as_str()));
                }
            }
        }
        v.sort_unstable();
        v
    }

    fn hits(&self, counters: &[&RuleCounters], slot: u32) -> Hits {
        self.baseline.hits(counters, slot)
    }

    fn table_index(&self, name: &str, field: &str) -> Result<usize, RpcError> {
        self.current
            .tables
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| invalid(field, Some(name), None, format!("no table named {name:?}")))
    }

    /// The tables `acl.dump` with `params` shows, in order, with their attachments.
    fn dump_selection(&self, params: &api::AclDumpParams) -> Result<Vec<DumpTable>, RpcError> {
        let state = &*self.current;
        let only_table = params
            .table
            .as_deref()
            .map(|t| self.table_index(t, "table"))
            .transpose()?;
        let only_port = match params.port.as_deref() {
            None => None,
            Some(p) => Some(
                self.ports
                    .iter()
                    .position(|q| q.name == p)
                    .ok_or_else(|| invalid("port", None, None, format!("no port named {p:?}")))?,
            ),
        };
        let mut tables = Vec::new();
        for index in 0..state.tables.len() {
            let mut attached = Vec::new();
            for (direction, at) in [
                (Direction::Ingress, &state.ingress),
                (Direction::Egress, &state.egress),
            ] {
                for (port, t) in at.iter().enumerate().take(self.ports.len()) {
                    if *t == Some(index as u16) {
                        attached.push((port, direction));
                    }
                }
            }
            attached.sort_unstable_by_key(|&(p, d)| (p, d.name()));
            let global = state.global == Some(index as u16);
            if only_table.is_some_and(|t| t != index) {
                continue;
            }
            if let Some(port) = only_port {
                let uplink = self.ports[port].role == PortRole::Uplink;
                let applies = attached.iter().any(|&(p, _)| p == port) || (global && uplink);
                if !applies {
                    continue;
                }
            }
            tables.push(DumpTable {
                index,
                attached: attached
                    .into_iter()
                    .map(|(p, d)| AclAttachment {
                        port: self.ports[p].name.clone(),
                        direction: d.name().to_string(),
                    })
                    .collect(),
                global,
            });
        }
        Ok(tables)
    }

    /// `acl.dump`, built whole.
    pub fn dump(
        &self,
        params: &api::AclDumpParams,
        generation: u64,
        counters: &[&RuleCounters],
    ) -> Result<api::AclDump, RpcError> {
        let state = &*self.current;
        let tables = self
            .dump_selection(params)?
            .into_iter()
            .map(|sel| {
                let table = &state.tables[sel.index];
                AclTableDump {
                    name: table.name.clone(),
                    rules: table
                        .rules
                        .iter()
                        .zip(&table.slots)
                        .enumerate()
                        .map(|(i, (r, &slot))| rule_dump(i, r, self.hits(counters, slot)))
                        .collect(),
                    no_match: self.hits(counters, table.no_match_slot),
                    attached: sel.attached,
                    global: sel.global,
                    memory_bytes: table.memory_bytes(),
                }
            })
            .collect();
        Ok(api::AclDump {
            generation,
            tables,
            pending: self.pending_for(params),
        })
    }

    /// `acl.dump`, written as it is sent: the same JSON text as [`AclManager::dump`]'s
    /// result, produced a piece at a time. It holds the ACL state in force now (whose
    /// counter slots are not reused while it lives) and the baselines as they are now,
    /// and reads each rule's counters when it writes the rule.
    pub fn dump_stream(
        &self,
        params: &api::AclDumpParams,
        generation: u64,
        workers: Vec<Arc<WorkerCounters>>,
    ) -> Result<AclDumpStream, RpcError> {
        Ok(AclDumpStream {
            generation,
            tables: self.dump_selection(params)?,
            pending: self.pending_for(params),
            state: Arc::clone(&self.current),
            baseline: self.baseline.clone(),
            workers,
            pos: DumpPos::Start,
        })
    }

    /// `acl.clear-counters`: resets the counters of every rule, or of one table's.
    pub fn clear(
        &mut self,
        params: &api::AclClearParams,
        counters: &[&RuleCounters],
    ) -> Result<api::AclCleared, RpcError> {
        let only = params
            .table
            .as_deref()
            .map(|t| self.table_index(t, "table"))
            .transpose()?;
        let slots: Vec<u32> = self
            .current
            .tables
            .iter()
            .enumerate()
            .filter(|(i, _)| only.is_none_or(|o| o == *i))
            .flat_map(|(_, t)| {
                t.slots
                    .iter()
                    .copied()
                    .chain(std::iter::once(t.no_match_slot))
            })
            .collect();
        for &slot in &slots {
            let i = slot as usize;
            if self.baseline.len() <= i {
                self.baseline.resize(i + 1, Hits::default());
            }
            self.baseline[i] = raw(counters, slot);
        }
        Ok(api::AclCleared {
            counters: slots.len(),
        })
    }
}

/// One table `acl.dump` shows: its index in the state, where it applies.
#[derive(Debug, Clone)]
struct DumpTable {
    index: usize,
    attached: Vec<AclAttachment>,
    global: bool,
}

/// Rule `index` of a dump.
fn rule_dump(index: usize, r: &Rule, hits: Hits) -> AclRuleDump {
    AclRuleDump {
        index,
        action: r.action.to_string(),
        proto: r.proto.to_string(),
        src: r.src.to_string(),
        dst: r.dst_selector.clone().unwrap_or_else(|| r.dst.to_string()),
        src_port: r.src_port.to_string(),
        dst_port: r.dst_port.to_string(),
        origin: r.origin.clone(),
        hits,
    }
}

/// Where a streamed dump is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DumpPos {
    /// Nothing written yet.
    Start,
    /// Table `table` of the selection is open; `rule` is the next rule to write.
    Rule {
        table: usize,
        rule: usize,
    },
    Done,
}

/// A streamed `acl.dump` ([`AclManager::dump_stream`]).
pub struct AclDumpStream {
    generation: u64,
    tables: Vec<DumpTable>,
    pending: Vec<api::AclPending>,
    state: Arc<AclTables>,
    baseline: Baselines,
    workers: Vec<Arc<WorkerCounters>>,
    pos: DumpPos,
}

fn encode_into<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), RpcError> {
    serde_json::to_writer(out, value)
        .map_err(|e| RpcError::internal(format!("cannot encode acl.dump: {e}")))
}

impl AclDumpStream {
    /// Opens table `next` of the selection, or closes the dump after the last.
    fn open_table(&mut self, out: &mut Vec<u8>, next: usize) -> Result<(), RpcError> {
        let Some(sel) = self.tables.get(next) else {
            out.push(b']');
            if !self.pending.is_empty() {
                out.extend_from_slice(b",\"pending\":");
                encode_into(out, &self.pending)?;
            }
            out.push(b'}');
            self.pos = DumpPos::Done;
            return Ok(());
        };
        if next > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        encode_into(out, &self.state.tables[sel.index].name)?;
        out.extend_from_slice(b",\"rules\":[");
        self.pos = DumpPos::Rule {
            table: next,
            rule: 0,
        };
        Ok(())
    }

    /// Writes the next element: the head, a rule, or a table's tail.
    fn write_one(&mut self, out: &mut Vec<u8>, counters: &[&RuleCounters]) -> Result<(), RpcError> {
        match self.pos {
            DumpPos::Start => {
                out.extend_from_slice(b"{\"generation\":");
                encode_into(out, &self.generation)?;
                out.extend_from_slice(b",\"tables\":[");
                self.open_table(out, 0)
            }
            DumpPos::Rule { table, rule } => {
                let sel = &self.tables[table];
                let t = &self.state.tables[sel.index];
                if let Some(r) = t.rules.get(rule) {
                    if rule > 0 {
                        out.push(b',');
                    }
                    let hits = self.baseline.hits(counters, t.slots[rule]);
                    encode_into(out, &rule_dump(rule, r, hits))?;
                    self.pos = DumpPos::Rule {
                        table,
                        rule: rule + 1,
                    };
                    return Ok(());
                }
                out.extend_from_slice(b"],\"no_match\":");
                encode_into(out, &self.baseline.hits(counters, t.no_match_slot))?;
                out.extend_from_slice(b",\"attached\":");
                encode_into(out, &sel.attached)?;
                out.extend_from_slice(b",\"global\":");
                encode_into(out, &sel.global)?;
                out.extend_from_slice(b",\"memory_bytes\":");
                encode_into(out, &t.memory_bytes())?;
                out.push(b'}');
                self.open_table(out, table + 1)
            }
            DumpPos::Done => Ok(()),
        }
    }
}

impl ReplyStream for AclDumpStream {
    fn write_next(&mut self, out: &mut Vec<u8>, chunk: usize) -> Result<bool, RpcError> {
        let start = out.len();
        let workers = std::mem::take(&mut self.workers);
        let counters: Vec<&RuleCounters> = workers.iter().map(|w| &w.acl).collect();
        let mut result = Ok(false);
        while self.pos != DumpPos::Done && out.len() - start < chunk {
            if let Err(e) = self.write_one(out, &counters) {
                result = Err(e);
                break;
            }
        }
        drop(counters);
        self.workers = workers;
        result.map(|_| self.pos == DumpPos::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrule_dataplane::acl::{Action, PortRange, Proto};
    use serde_json::json;

    fn ports() -> Vec<AclPort> {
        let port = |name: &str, role, pod: Option<&str>| AclPort {
            name: name.into(),
            role,
            pod: pod.map(str::to_string),
            locked: false,
        };
        vec![
            port("pod-a", PortRole::Pod, Some("shop/a")),
            port("pod-b", PortRole::Pod, None),
            port("uplink0", PortRole::Uplink, None),
        ]
    }

    fn web_table(extra_first: bool) -> Value {
        let mut rules = vec![
            json!({"action": "permit", "proto": "tcp", "src": "10.1.0.0/16", "dst_port": 80, "origin": "x/allow-web"}),
            json!({"action": "permit", "proto": "udp", "dst_port": "5000-5010"}),
            json!({"action": "deny"}),
        ];
        if extra_first {
            rules.insert(0, json!({"action": "deny", "proto": "tcp", "dst_port": 22}));
        }
        json!({
            "tables": [{"name": "web", "rules": rules}, {"name": "all", "rules": [{"action": "permit"}]}],
            "attach": [{"port": "pod-a", "direction": "egress", "table": "web"}],
            "global": "all",
        })
    }

    /// The error of applying `params`: its field path and message.
    fn error_of(params: Value) -> (String, String) {
        let e = parse_apply(&params, &ports()).expect_err("must be refused");
        assert_eq!(e.code, ferrule_api::rpc::INVALID_PARAMS);
        let field = e.data.as_ref().unwrap()["field"]
            .as_str()
            .unwrap()
            .to_string();
        (field, e.message)
    }

    fn one_rule(rule: Value) -> Value {
        json!({"tables": [{"name": "t", "rules": [{"action": "permit"}, rule]}]})
    }

    #[test]
    fn invalid_input_names_table_rule_and_field() {
        let cases = [
            (
                one_rule(json!({"action": "deny", "src": "10.0.0.0/33"})),
                "tables[0].rules[1].src",
                "prefix length above 32",
            ),
            (
                one_rule(json!({"action": "deny", "dst": "10.0.0.300/8"})),
                "tables[0].rules[1].dst",
                "bad address",
            ),
            (
                one_rule(json!({"action": "deny", "proto": "tcp", "dst_port": 70000})),
                "tables[0].rules[1].dst_port",
                "70000 > 65535",
            ),
            (
                one_rule(json!({"action": "deny", "proto": "udp", "src_port": "90-80"})),
                "tables[0].rules[1].src_port",
                "low port 90 > high port 80",
            ),
            (
                one_rule(json!({"action": "deny", "proto": "icmp", "dst_port": 80})),
                "tables[0].rules[1].dst_port",
                "ports need proto tcp, udp or sctp",
            ),
            (
                one_rule(json!({"action": "deny", "dst_port": 80})),
                "tables[0].rules[1].dst_port",
                "ports need proto",
            ),
            (
                one_rule(json!({"action": "allow"})),
                "tables[0].rules[1].action",
                "unknown action",
            ),
            (
                one_rule(json!({"proto": "tcp"})),
                "tables[0].rules[1].action",
                "required",
            ),
            (
                one_rule(json!({"action": "deny", "proto": "tcpp"})),
                "tables[0].rules[1].proto",
                "unknown protocol",
            ),
            (
                one_rule(json!({"action": "deny", "proto": 300})),
                "tables[0].rules[1].proto",
                "0-255",
            ),
            (
                one_rule(json!({"action": "deny", "dport": 80})),
                "tables[0].rules[1].dport",
                "unknown field",
            ),
            (
                one_rule(json!({"action": "deny", "src": "10.0.0.0/8", "dst": "2001:db8::/32"})),
                "tables[0].rules[1].dst",
                "family",
            ),
            (
                one_rule(json!({"action": "deny", "src": 10})),
                "tables[0].rules[1].src",
                "expected a string",
            ),
        ];
        for (params, field, text) in cases {
            let (got_field, message) = error_of(params);
            assert_eq!(got_field, field, "{message}");
            assert!(message.contains(text), "{message} lacks {text:?}");
            assert!(message.contains("table \"t\" rule 1"), "{message}");
        }
        let table_level = [
            (
                json!({"tables": [{"name": "t"}, {"name": "t"}]}),
                "tables[1].name",
                "duplicate table name \"t\"",
            ),
            (
                json!({"tables": [{"rules": []}]}),
                "tables[0].name",
                "required",
            ),
            (
                json!({"tables": [{"name": "a b"}]}),
                "tables[0].name",
                "without spaces",
            ),
            (
                json!({"tables": [{"name": "t", "rule": []}]}),
                "tables[0].rule",
                "unknown field",
            ),
            // A port that does not exist yet is not an error: the attachment waits.
            (
                json!({"tables": [{"name": "t"}], "attach": [{"pod": "Shop/x", "direction": "egress", "table": "t"}]}),
                "attach[0].pod",
                "is not NAMESPACE/NAME",
            ),
            (
                json!({"tables": [{"name": "t"}], "attach": [{"port": "pod-a", "pod": "shop/a", "direction": "egress", "table": "t"}]}),
                "attach[0].port",
                "not both",
            ),
            (
                json!({"tables": [{"name": "t"}], "attach": [{"port": "pod-a", "direction": "in", "table": "t"}]}),
                "attach[0].direction",
                "ingress or egress",
            ),
            (
                json!({"tables": [{"name": "t"}], "attach": [{"port": "pod-a", "direction": "egress", "table": "u"}]}),
                "attach[0].table",
                "no table named \"u\"",
            ),
            (
                json!({"tables": [{"name": "t"}], "attach": [{"port": "pod-a", "direction": "egress", "table": "t"}, {"port": "pod-a", "direction": "egress", "table": "t"}]}),
                "attach[1].port",
                "already has an egress table",
            ),
            (
                json!({"tables": [{"name": "t"}], "global": "u"}),
                "global",
                "no table named \"u\"",
            ),
            (json!({"tables": {}}), "tables", "expected a list"),
            (json!({"table": []}), "table", "unknown field"),
        ];
        for (params, field, text) in table_level {
            let (got_field, message) = error_of(params);
            assert_eq!(got_field, field, "{message}");
            assert!(message.contains(text), "{message} lacks {text:?}");
        }
    }

    #[test]
    fn valid_input_parses_every_field() {
        let d = parse_apply(&web_table(false), &ports()).unwrap();
        assert_eq!(d.tables.len(), 2);
        let web = &d.tables[0].1;
        assert_eq!(web[0].proto, Proto::TCP);
        assert_eq!(web[0].dst_port, PortRange::single(80));
        assert_eq!(web[0].src.to_string(), "10.1.0.0/16");
        assert_eq!(web[0].origin.as_deref(), Some("x/allow-web"));
        assert_eq!(web[1].dst_port, PortRange { lo: 5000, hi: 5010 });
        assert_eq!(web[2], Rule::any(Action::Deny));
        assert_eq!(d.attach, vec![(0, Direction::Egress, 0)]);
        assert_eq!(d.global, Some(1));
        assert!(!d.dry_run);
        assert_eq!(parse_apply(&Value::Null, &ports()).unwrap().tables.len(), 0);
    }

    /// Two workers' counters.
    fn workers() -> [RuleCounters; 2] {
        [RuleCounters::default(), RuleCounters::default()]
    }

    fn apply(
        m: &mut AclManager,
        params: &Value,
        w: &[RuleCounters; 2],
    ) -> Result<Applied, RpcError> {
        let d = parse_apply(params, m.ports())?;
        m.apply(&d, &[&w[0], &w[1]], &|_| Vec::new())
    }

    fn hits_of(m: &AclManager, w: &[RuleCounters; 2], table: &str) -> Vec<u64> {
        let dump = m
            .dump(
                &api::AclDumpParams {
                    table: Some(table.into()),
                    port: None,
                },
                0,
                &[&w[0], &w[1]],
            )
            .unwrap();
        let t = &dump.tables[0];
        t.rules
            .iter()
            .map(|r| r.hits.packets)
            .chain(std::iter::once(t.no_match.packets))
            .collect()
    }

    #[test]
    fn counters_of_unchanged_rules_survive_an_apply() {
        let w = workers();
        let mut m = AclManager::new(ports());
        let first = apply(&mut m, &web_table(false), &w).unwrap();
        assert_eq!(first.result.added, vec!["web", "all"]);
        let state = first.tables.unwrap();
        let web = state.tables[0].clone();
        // Worker 0 hits rule 0 three times, worker 1 rule 2 once and no-match twice.
        for _ in 0..3 {
            w[0].hit(web.slots[0], 100);
        }
        w[1].hit(web.slots[2], 60);
        w[1].hit(web.no_match_slot, 1);
        w[1].hit(web.no_match_slot, 1);
        assert_eq!(hits_of(&m, &w, "web"), vec![3, 0, 1, 2]);

        // A rule inserted first: the old rules keep their counts at their new index.
        let second = apply(&mut m, &web_table(true), &w).unwrap();
        assert_eq!(second.result.changed, vec!["web"]);
        assert_eq!(second.result.unchanged, 1);
        assert!(second.tables.is_some());
        assert_eq!(hits_of(&m, &w, "web"), vec![0, 3, 0, 1, 2]);
        let all = hits_of(&m, &w, "all");
        assert_eq!(all, vec![0, 0]);

        // The same state again changes nothing and publishes nothing.
        let again = apply(&mut m, &web_table(true), &w).unwrap();
        assert!(again.tables.is_none());
        assert_eq!(again.result.unchanged, 2);

        // Clearing one table resets only its counters.
        let cleared = m
            .clear(
                &api::AclClearParams {
                    table: Some("web".into()),
                },
                &[&w[0], &w[1]],
            )
            .unwrap();
        assert_eq!(cleared.counters, 5);
        assert_eq!(hits_of(&m, &w, "web"), vec![0, 0, 0, 0, 0]);
    }

    #[test]
    fn refused_and_dry_run_applies_change_nothing() {
        let w = workers();
        let mut m = AclManager::new(ports());
        apply(&mut m, &web_table(false), &w).unwrap();
        let before = m.current();
        let held = m.slots_held();
        let mut bad = web_table(true);
        bad["tables"][0]["rules"][0]["dst_port"] = json!(99999);
        assert!(apply(&mut m, &bad, &w).is_err());
        let mut dry = web_table(true);
        dry["dry_run"] = json!(true);
        let dry = apply(&mut m, &dry, &w).unwrap();
        assert!(dry.result.dry_run && dry.tables.is_none());
        assert_eq!(dry.result.changed, vec!["web"]);
        assert!(Arc::ptr_eq(&before, &m.current()));
        assert_eq!(m.slots_held(), held);
    }

    #[test]
    fn given_up_slots_are_reused_only_after_the_old_state_is_freed() {
        let w = workers();
        let mut m = AclManager::new(ports());
        let first = apply(&mut m, &web_table(false), &w)
            .unwrap()
            .tables
            .unwrap();
        assert_eq!(
            m.slots_held(),
            6,
            "4 for web (3 rules + no match), 2 for all"
        );
        let old_slot = first.tables[0].slots[1];
        w[0].hit(old_slot, 10);
        // Remove `web`: its 4 slots drain while a worker still holds `first`.
        let only_all = json!({"tables": [{"name": "all", "rules": [{"action": "permit"}]}]});
        drop(apply(&mut m, &only_all, &w).unwrap());
        m.reclaim();
        assert_eq!(m.slots_held(), 6, "still held by a generation in use");
        let renamed = json!({"tables": [
            {"name": "all", "rules": [{"action": "permit"}]},
            {"name": "web2", "rules": [{"action": "deny"}, {"action": "deny", "proto": 6}, {"action": "permit"}]},
        ]});
        let second = apply(&mut m, &renamed, &w).unwrap().tables.unwrap();
        assert!(
            !second.tables[1].slots.contains(&old_slot),
            "reused while held"
        );
        drop(second);
        drop(first);
        // Every older state is gone: removing web2 then adding web3 reuses slots,
        // old_slot among them, counting from zero.
        // web3 needs 8 slots: exactly the 8 free ones (web's and web2's).
        let web3_rules: Vec<Value> = (0..7)
            .map(|p| json!({"action": "deny", "proto": p}))
            .collect();
        let web3 = json!({"tables": [
            {"name": "all", "rules": [{"action": "permit"}]},
            {"name": "web3", "rules": web3_rules},
        ]});
        drop(apply(&mut m, &only_all, &w).unwrap());
        m.reclaim();
        assert_eq!(m.slots_held(), 2);
        let third = apply(&mut m, &web3, &w).unwrap().tables.unwrap();
        let reused = &third.tables[1];
        assert!(
            reused.slots.contains(&old_slot) || reused.no_match_slot == old_slot,
            "{:?} / {}",
            reused.slots,
            reused.no_match_slot
        );
        assert_eq!(hits_of(&m, &w, "web3"), vec![0; 8]);
    }

    /// The streamed dump writes exactly the text of the whole one, whatever the
    /// piece size, for every filter.
    #[test]
    fn streamed_dump_is_the_dump() {
        let w: Vec<Arc<WorkerCounters>> = (0..2).map(|_| Arc::default()).collect();
        let c = [&w[0].acl, &w[1].acl];
        let mut m = AclManager::new(ports());
        let mut big = web_table(false);
        big["tables"][1]["rules"] = json!((0..700)
            .map(|i| json!({"action": "deny", "proto": "udp", "dst_port": i + 1, "origin": format!("ns/p{i}")}))
            .collect::<Vec<_>>());
        big["attach"]
            .as_array_mut()
            .unwrap()
            .push(json!({"port": "pod-b", "direction": "ingress", "table": "all"}));
        // One attachment waits for its pod: the dump lists it.
        big["attach"]
            .as_array_mut()
            .unwrap()
            .push(json!({"pod": "shop/later", "direction": "ingress", "table": "all"}));
        let d = parse_apply(&big, m.ports()).unwrap();
        let state = m.apply(&d, &c, &|_| Vec::new()).unwrap().tables.unwrap();
        for (i, t) in state.tables.iter().enumerate() {
            for (j, &slot) in t.slots.iter().enumerate().step_by(3) {
                w[i % 2].acl.hit(slot, 60 + j as u64);
            }
            w[1].acl.hit(t.no_match_slot, 1500);
        }
        // Counters cleared for one table: its baselines count.
        m.clear(
            &api::AclClearParams {
                table: Some("web".into()),
            },
            &c,
        )
        .unwrap();
        w[0].acl.hit(state.tables[0].slots[1], 99);
        let filters = [
            (None, None),
            (Some("pod-a"), None),
            (Some("pod-b"), None),
            (Some("uplink0"), None),
            (None, Some("all")),
            (Some("pod-a"), Some("all")),
        ];
        for (port, table) in filters {
            let p = api::AclDumpParams {
                port: port.map(Into::into),
                table: table.map(Into::into),
            };
            let whole = m.dump(&p, 42, &c).unwrap();
            for chunk in [1, 100, ferrule_api::rpc::STREAM_CHUNK] {
                let mut stream = m.dump_stream(&p, 42, w.clone()).unwrap();
                let mut text = Vec::new();
                let mut pieces = 0;
                while !stream.write_next(&mut text, chunk).unwrap() {
                    pieces += 1;
                }
                assert_eq!(
                    serde_json::from_slice::<Value>(&text).unwrap(),
                    serde_json::to_value(&whole).unwrap(),
                    "{port:?} {table:?} in pieces of {chunk}"
                );
                assert_eq!(text, serde_json::to_vec(&whole).unwrap());
                if chunk == 1 {
                    assert!(pieces >= whole.tables.iter().map(|t| t.rules.len()).sum::<usize>());
                }
            }
        }
        // Errors come before anything is written.
        let e = m
            .dump_stream(
                &api::AclDumpParams {
                    port: Some("nope".into()),
                    table: None,
                },
                1,
                w.clone(),
            )
            .err()
            .unwrap();
        assert!(e.message.contains("no port named"), "{e}");
        // A stream keeps its generation's slots from being reused, and reads the
        // baselines it started with.
        let stream = m
            .dump_stream(&api::AclDumpParams::default(), 1, w.clone())
            .unwrap();
        let held = m.slots_held();
        let d = parse_apply(&json!({"tables": []}), m.ports()).unwrap();
        drop(m.apply(&d, &c, &|_| Vec::new()).unwrap());
        drop(state);
        m.reclaim();
        assert_eq!(
            m.slots_held(),
            held,
            "slots held by the stream's generation"
        );
        drop(stream);
        m.reclaim();
        assert_eq!(m.slots_held(), 0);
    }

    #[test]
    fn dump_filters_by_port_and_table() {
        let w = workers();
        let mut m = AclManager::new(ports());
        apply(&mut m, &web_table(false), &w).unwrap();
        let dump = |port: Option<&str>, table: Option<&str>| {
            m.dump(
                &api::AclDumpParams {
                    port: port.map(Into::into),
                    table: table.map(Into::into),
                },
                7,
                &[&w[0], &w[1]],
            )
        };
        let all = dump(None, None).unwrap();
        assert_eq!(all.generation, 7);
        assert_eq!(all.tables.len(), 2);
        assert_eq!(all.tables[0].attached[0].port, "pod-a");
        assert!(all.tables[1].global);
        let names = |d: api::AclDump| d.tables.into_iter().map(|t| t.name).collect::<Vec<_>>();
        assert_eq!(names(dump(Some("pod-a"), None).unwrap()), vec!["web"]);
        assert_eq!(names(dump(Some("uplink0"), None).unwrap()), vec!["all"]);
        assert!(names(dump(Some("pod-b"), None).unwrap()).is_empty());
        assert_eq!(names(dump(None, Some("all")).unwrap()), vec!["all"]);
        assert!(dump(Some("nope"), None)
            .unwrap_err()
            .message
            .contains("no port named"));
        assert!(dump(None, Some("nope"))
            .unwrap_err()
            .message
            .contains("no table named"));
    }

    /// A table of `n` rules (`n + 1` counter slots).
    fn table_of(name: &str, n: usize) -> Value {
        let rules: Vec<Value> = (0..n)
            .map(|p| json!({"action": "deny", "proto": "tcp", "dst_port": p + 1}))
            .collect();
        json!({"tables": [{"name": name, "rules": rules}]})
    }

    #[test]
    fn limits_measure_what_is_held_after_the_apply() {
        let w = workers();
        let mut m = AclManager::with_capacity(ports(), 16);
        let big = apply(&mut m, &table_of("a", 9), &w)
            .unwrap()
            .tables
            .unwrap();
        let slot = big.tables[0].slots[0];
        w[0].hit(slot, 7);
        assert_eq!(hits_of(&m, &w, "a")[0], 1, "one packet");
        // Replacing 10 slots by 12 under another name fits in 16 (what is held after),
        // although 22 would be held if the old table's slots were kept: slots of the
        // removed table are borrowed.
        let applied = apply(&mut m, &table_of("b", 11), &w).unwrap();
        assert!(!applied.borrowed.is_empty());
        m.rebase(&applied.borrowed, &[&w[0], &w[1]]);
        assert!(
            hits_of(&m, &w, "b").iter().all(|&h| h == 0),
            "borrowed slots count from zero"
        );
        w[1].hit(slot, 3);
        let b = applied.tables.unwrap();
        let counted: u64 = hits_of(&m, &w, "b").iter().sum();
        assert_eq!(counted, u64::from(b.tables[0].slots.contains(&slot)));
        drop(big);
        // More than the capacity is refused whatever is held, naming the limit.
        let e = apply(&mut m, &table_of("c", 16), &w).unwrap_err();
        assert!(
            e.message
                .contains("17 rules and tables need counters; at most 16"),
            "{e:?}"
        );
        assert_eq!(
            m.current().tables[0].name,
            "b",
            "a refused apply changes nothing"
        );
        // Exactly the capacity is accepted.
        apply(&mut m, &table_of("d", 15), &w).unwrap();
    }

    #[test]
    fn attachments_wait_for_their_port_and_follow_pods() {
        let w = workers();
        let mut m = AclManager::new(ports());
        let params = json!({
            "tables": [{"name": "t", "rules": [{"action": "deny", "proto": "udp"}, {"action": "permit"}]}],
            "attach": [
                {"pod": "shop/new", "direction": "egress", "table": "t"},
                {"pod": "shop/a", "direction": "ingress", "table": "t"},
                {"port": "later", "direction": "ingress", "table": "t"},
            ]
        });
        let applied = apply(&mut m, &params, &w).unwrap();
        let state = applied.tables.unwrap();
        assert_eq!(state.ingress[0], Some(0), "pod-a records shop/a");
        assert_eq!(
            applied.result.pending.len(),
            2,
            "{:?}",
            applied.result.pending
        );
        assert_eq!(m.pending().len(), 2);
        // A port recording shop/new arrives: its egress table is in force at once.
        let mut now = ports();
        now.push(AclPort {
            name: "new-1".into(),
            role: PortRole::Pod,
            pod: Some("shop/new".into()),
            locked: false,
        });
        let next = m
            .set_ports(now.clone())
            .expect("the attachment takes effect");
        assert_eq!(next.egress[3], Some(0));
        assert!(next.generation > state.generation);
        assert_eq!(m.pending().len(), 1, "only `later` still waits");
        assert!(m.set_ports(now.clone()).is_none(), "nothing changed");
        // The pod's port goes: its attachment waits again, the tables stay.
        now[3] = AclPort {
            name: String::new(),
            role: PortRole::Host,
            pod: None,
            locked: false,
        };
        let after = m.set_ports(now).expect("detached");
        assert_eq!(after.egress[3], None);
        assert_eq!(after.tables.len(), 1);
        assert_eq!(m.pending().len(), 2);
        // Shown in the dump.
        let dump = m
            .dump(&api::AclDumpParams::default(), 0, &[&w[0], &w[1]])
            .unwrap();
        assert_eq!(dump.pending.len(), 2);
        // A port named and a pod it records, one direction: refused, naming the second.
        let clash = json!({
            "tables": [{"name": "t", "rules": [{"action": "permit"}]}],
            "attach": [
                {"port": "pod-a", "direction": "egress", "table": "t"},
                {"pod": "shop/a", "direction": "egress", "table": "t"},
            ]
        });
        let e = parse_apply(&clash, m.ports()).unwrap_err();
        assert_eq!(e.data.as_ref().unwrap()["field"], "attach[1]", "{e:?}");
        assert!(e.message.contains("attach[0]"), "{e:?}");
    }
}
