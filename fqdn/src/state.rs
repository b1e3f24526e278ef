//! The façade the proxy, the agent and the control socket call: the selectors in force,
//! DNS answers, garbage collection, checkpoints, and read-only views. It keeps the name
//! cache, the ipcache, the identities, the selector cache and the IP → identity map the
//! dataplane holds consistent, and returns each call's effect as `Changes`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, CheckpointError, VERSION};
use crate::identity::{Allocator, Identity};
use crate::ipcache::{IpCache, Owner};
use crate::labels::{Label, LabelSet, Source};
use crate::limits::{Counters, Limits, Refusal};
use crate::names::{NameCache, Timestamp};
use crate::selector::{normalize_name, FqdnSelector, Selector};
use crate::selectorcache::SelectorCache;

/// Settings of the FQDN state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FqdnConfig {
    /// The TTL (seconds) an answer's addresses are kept at least.
    pub min_ttl: u32,
    pub limits: Limits,
}

impl Default for FqdnConfig {
    fn default() -> FqdnConfig {
        FqdnConfig {
            min_ttl: 60,
            limits: Limits::default(),
        }
    }
}

/// What one call changed, for the dataplane and the rules. Apply in this order:
/// identities added, then selectors (the rules allow the new identities), then IP
/// upserts, then IP deletes, then identities removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// Identities that came into use, with their labels.
    pub identities_added: BTreeMap<Identity, LabelSet>,
    /// Identities no longer in use.
    pub identities_removed: BTreeSet<Identity>,
    /// Selectors whose identity sets changed (or that are new), with their new sets:
    /// the only changes that touch policy rules.
    pub selectors: BTreeMap<Selector, BTreeSet<Identity>>,
    /// Prefixes to put into (or change in) the IP → identity map.
    pub upserts: BTreeMap<IpNet, Identity>,
    /// Prefixes to take out of the IP → identity map.
    pub deletes: BTreeSet<IpNet>,
    /// What the circuit breaker refused.
    pub refused: Vec<Refusal>,
}

impl Changes {
    /// Whether the rules (identities or selector sets) change.
    pub fn touches_rules(&self) -> bool {
        !self.identities_added.is_empty()
            || !self.identities_removed.is_empty()
            || !self.selectors.is_empty()
    }

    pub fn is_empty(&self) -> bool {
        !self.touches_rules()
            && self.upserts.is_empty()
            && self.deletes.is_empty()
            && self.refused.is_empty()
    }
}

/// A call's changes as they are gathered.
#[derive(Default)]
struct Batch {
    changes: Changes,
    touched: BTreeSet<Selector>,
}

impl Batch {
    fn upsert(&mut self, p: IpNet, id: Identity) {
        self.changes.deletes.remove(&p);
        self.changes.upserts.insert(p, id);
    }

    fn delete(&mut self, p: IpNet) {
        self.changes.upserts.remove(&p);
        self.changes.deletes.insert(p);
    }
}

/// The identity a label set needs could not be had: past the breaker's limit, or the
/// local range is used up.
struct NoIdentity;

/// The host prefix of an address.
fn host(ip: IpAddr) -> IpNet {
    IpNet::from(ip)
}

/// One address of a name, for `ferrulectl fqdn cache`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CachedIp {
    pub ip: IpAddr,
    pub expires: Timestamp,
    /// The identity the dataplane maps the address to (none if no selector selects it).
    pub identity: Option<Identity>,
}

/// One name, for `ferrulectl fqdn cache`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CachedName {
    pub name: String,
    /// The `fqdn:` labels the name gives its addresses.
    pub labels: LabelSet,
    /// The endpoints that looked the name up.
    pub endpoints: Vec<String>,
    pub ips: Vec<CachedIp>,
}

/// One identity, for `ferrulectl fqdn identities`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IdentityView {
    pub id: Identity,
    pub labels: LabelSet,
    pub refs: u32,
    /// How many prefixes of the IP → identity map have it.
    pub prefixes: usize,
}

/// One selector, for `ferrulectl fqdn selectors`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SelectorView {
    pub selector: Selector,
    pub identities: Vec<Identity>,
}

/// The FQDN policy state of a node.
#[derive(Debug, Clone)]
pub struct FqdnState {
    config: FqdnConfig,
    selectors: BTreeSet<Selector>,
    /// The identity of `fqdn:<selector>,reserved:world`, held for each FQDN selector
    /// so that the first address of a name the selector alone selects needs no new one.
    preallocated: BTreeMap<FqdnSelector, Identity>,
    names: NameCache,
    /// The labels each name currently gives its addresses in the ipcache.
    name_labels: BTreeMap<String, LabelSet>,
    ipcache: IpCache,
    identities: Allocator,
    selector_cache: SelectorCache,
    /// What the dataplane's IP → identity map holds.
    ip_identity: BTreeMap<IpNet, Identity>,
    counters: Counters,
    /// Checkpointed identities `restore` skipped (outside the local range, or repeating
    /// a number or a label set).
    restore_skipped: usize,
}

impl FqdnState {
    pub fn new(config: FqdnConfig) -> FqdnState {
        FqdnState::with_parts(config, NameCache::new(), Allocator::new())
    }

    /// A state drawing identities from a smaller range (tests of exhaustion).
    #[cfg(test)]
    fn with_identity_range(config: FqdnConfig, min: Identity, max: Identity) -> FqdnState {
        FqdnState::with_parts(config, NameCache::new(), Allocator::with_range(min, max))
    }

    fn with_parts(config: FqdnConfig, names: NameCache, identities: Allocator) -> FqdnState {
        FqdnState {
            config,
            selectors: BTreeSet::new(),
            preallocated: BTreeMap::new(),
            names,
            name_labels: BTreeMap::new(),
            ipcache: IpCache::new(),
            identities,
            selector_cache: SelectorCache::new(),
            ip_identity: BTreeMap::new(),
            counters: Counters::default(),
            restore_skipped: 0,
        }
    }

    /// The `fqdn:` labels the selectors in force give a name's addresses.
    fn labels_for(&self, name: &str) -> LabelSet {
        self.selectors
            .iter()
            .filter_map(|s| match s {
                Selector::Fqdn(f) if f.matches(name) => Some(f.label()),
                _ => None,
            })
            .collect()
    }

    /// Takes a reference on the identity of `labels`. With `limited` (the DNS answer
    /// path), refuses a new identity with an `fqdn:` label past the limit.
    fn take(
        &mut self,
        labels: &LabelSet,
        b: &mut Batch,
        limited: bool,
    ) -> Result<Identity, NoIdentity> {
        if limited
            && self.identities.lookup(labels).is_none()
            && labels.has_source(Source::Fqdn)
            && self.identities.fqdn_count() >= self.config.limits.max_fqdn_identities
        {
            return Err(NoIdentity);
        }
        let (id, new) = self.identities.allocate(labels).map_err(|_| NoIdentity)?;
        if new {
            b.changes.identities_removed.remove(&id);
            b.changes.identities_added.insert(id, labels.clone());
            b.touched
                .extend(self.selector_cache.identity_added(id, labels));
        }
        Ok(id)
    }

    fn drop_ref(&mut self, id: Identity, b: &mut Batch) {
        if self.identities.release(id).is_some() {
            if b.changes.identities_added.remove(&id).is_none() {
                b.changes.identities_removed.insert(id);
            }
            b.touched.extend(self.selector_cache.identity_removed(id));
        }
    }

    /// Brings one prefix's identity in line with its resolved labels. On `Err` nothing
    /// changed.
    fn sync(&mut self, p: IpNet, b: &mut Batch, limited: bool) -> Result<(), NoIdentity> {
        let old = self.ip_identity.get(&p).copied();
        if !self.ipcache.contains(&p) {
            if let Some(old) = self.ip_identity.remove(&p) {
                b.delete(p);
                self.drop_ref(old, b);
            }
            return Ok(());
        }
        let labels = self.ipcache.resolve(p);
        if old.is_some_and(|o| self.identities.labels(o) == Some(&labels)) {
            return Ok(());
        }
        let new = self.take(&labels, b, limited)?;
        self.ip_identity.insert(p, new);
        b.upsert(p, new);
        if let Some(old) = old {
            self.drop_ref(old, b);
        }
        Ok(())
    }

    /// `sync` outside the DNS answer path. Should the local range be used up, the prefix
    /// leaves the map (its addresses fall back to world: denied, not wrongly allowed)
    /// and the refusal is counted.
    fn sync_or_drop(&mut self, p: IpNet, b: &mut Batch) {
        if self.sync(p, b, false).is_ok() {
            return;
        }
        let labels = self.ipcache.resolve(p).to_string();
        if let Some(old) = self.ip_identity.remove(&p) {
            b.delete(p);
            self.drop_ref(old, b);
        }
        self.refuse(b, Refusal::IdentitiesExhausted { prefix: p, labels });
    }

    fn finish(&self, mut b: Batch) -> Changes {
        for s in b.touched {
            if let Some(set) = self.selector_cache.selected(&s) {
                b.changes.selectors.insert(s, set.clone());
            }
        }
        b.changes
    }

    fn refuse(&mut self, b: &mut Batch, r: Refusal) {
        self.counters.count(&r);
        b.changes.refused.push(r);
    }

    /// Replaces the selectors in force (every FQDN and CIDR selector of the policies).
    /// Never refused by the circuit breaker: policy is trusted input.
    pub fn apply_policy_selectors(
        &mut self,
        selectors: impl IntoIterator<Item = Selector>,
    ) -> Changes {
        let new: BTreeSet<Selector> = selectors.into_iter().collect();
        let old = std::mem::replace(&mut self.selectors, new.clone());
        let mut b = Batch::default();
        let added = self
            .selector_cache
            .set_selectors(&new, self.identities.iter().map(|(id, l, _)| (id, l)));
        b.touched.extend(added);

        for s in new.difference(&old) {
            if let Selector::Fqdn(f) = s {
                let labels = LabelSet::from_iter([f.label(), Label::world()]);
                if let Ok(id) = self.take(&labels, &mut b, false) {
                    self.preallocated.insert(f.clone(), id);
                }
            }
        }

        let mut affected: BTreeSet<IpNet> = BTreeSet::new();
        for s in old.difference(&new) {
            if let Selector::Cidr(c) = s {
                affected.extend(self.ipcache.remove(c.prefix(), &Owner::CidrPolicy));
            }
        }
        for s in new.difference(&old) {
            if let Selector::Cidr(c) = s {
                affected.extend(self.ipcache.upsert(
                    c.prefix(),
                    Owner::CidrPolicy,
                    LabelSet::from_iter([c.label()]),
                ));
            }
        }

        let names: Vec<String> = self.names.iter().map(|(n, _)| n.to_string()).collect();
        for name in names {
            let labels = self.labels_for(&name);
            if self.name_labels.get(&name).unwrap_or(&LabelSet::new()) == &labels {
                continue;
            }
            let ips: Vec<IpAddr> = self.names.ips(&name).map(|e| e.ip).collect();
            for ip in ips {
                affected.extend(self.ipcache.upsert(
                    host(ip),
                    Owner::Name(name.clone()),
                    labels.clone(),
                ));
            }
            if labels.is_empty() {
                self.name_labels.remove(&name);
            } else {
                self.name_labels.insert(name, labels);
            }
        }
        for p in affected {
            self.sync_or_drop(p, &mut b);
        }

        for s in old.difference(&new) {
            if let Selector::Fqdn(f) = s {
                if let Some(id) = self.preallocated.remove(f) {
                    self.drop_ref(id, &mut b);
                }
            }
        }
        self.finish(b)
    }

    /// Records a DNS answer: `name` (any case, trailing dot optional) resolved to these
    /// addresses with these TTLs at `now`. Returns what the dataplane must apply before
    /// the answer is released to the pod.
    pub fn on_dns_answer(
        &mut self,
        name: &str,
        records: &[(IpAddr, u32)],
        now: Timestamp,
    ) -> Changes {
        self.answer(None, name, records, now)
    }

    /// `on_dns_answer` for the lookup of one endpoint (a pod, `namespace/name`): the
    /// name is kept while some endpoint that looked it up remains (`endpoint_removed`).
    pub fn on_dns_answer_for(
        &mut self,
        endpoint: &str,
        name: &str,
        records: &[(IpAddr, u32)],
        now: Timestamp,
    ) -> Changes {
        self.answer(Some(endpoint), name, records, now)
    }

    /// An endpoint is gone: the addresses of the names no remaining endpoint looked up
    /// expire at `now`, and the next `gc` forgets those no connection uses. Returns
    /// those names.
    pub fn endpoint_removed(&mut self, endpoint: &str, now: Timestamp) -> Vec<String> {
        self.names.endpoint_gone(endpoint, now)
    }

    fn answer(
        &mut self,
        endpoint: Option<&str>,
        name: &str,
        records: &[(IpAddr, u32)],
        now: Timestamp,
    ) -> Changes {
        let name = normalize_name(name);
        let mut b = Batch::default();
        let limits = self.config.limits;
        let learned = self.names.learn(
            &name,
            endpoint,
            records,
            now,
            self.config.min_ttl,
            limits.max_ips_per_name,
        );
        for ip in learned.refused {
            self.refuse(
                &mut b,
                Refusal::IpsPerName {
                    name: name.clone(),
                    ip,
                },
            );
        }
        let owner = Owner::Name(name.clone());
        for ip in learned.evicted {
            self.refuse(
                &mut b,
                Refusal::IpEvicted {
                    name: name.clone(),
                    ip,
                },
            );
            let affected = self.ipcache.remove(host(ip), &owner);
            for p in affected {
                self.sync_or_drop(p, &mut b);
            }
        }
        let labels = self.labels_for(&name);
        if labels.is_empty() {
            return self.finish(b);
        }
        self.name_labels.insert(name.clone(), labels.clone());
        for ip in learned.added {
            let p = host(ip);
            self.ipcache.upsert(p, owner.clone(), labels.clone());
            if self.sync(p, &mut b, true).is_err() {
                let refused = self.ipcache.resolve(p);
                self.ipcache.remove(p, &owner);
                self.names.forget(&name, ip);
                self.refuse(
                    &mut b,
                    Refusal::IdentityLimit {
                        name: name.clone(),
                        ip,
                        labels: refused.to_string(),
                    },
                );
            }
        }
        if self.names.ips(&name).next().is_none() {
            self.name_labels.remove(&name);
        }
        self.finish(b)
    }

    /// Names in the name cache.
    pub fn name_count(&self) -> usize {
        self.names.len()
    }

    /// Local identities in use.
    pub fn identity_count(&self) -> usize {
        self.identities.len()
    }

    /// The addresses whose TTL ran out at `now`: what `gc` asks the connection tracker
    /// about.
    pub fn expired(&self, now: Timestamp) -> BTreeSet<IpAddr> {
        self.names
            .iter()
            .flat_map(|(_, e)| e.ips.iter())
            .filter(|(_, e)| e.expires <= now)
            .map(|(ip, _)| *ip)
            .collect()
    }

    /// Forgets the addresses whose TTL ran out at `now` and that no tracked connection
    /// uses (`in_use`, from the connection tracker).
    pub fn gc(&mut self, now: Timestamp, in_use: &dyn Fn(IpAddr) -> bool) -> Changes {
        let mut b = Batch::default();
        for (name, ip) in self.names.gc(now, in_use) {
            let affected = self.ipcache.remove(host(ip), &Owner::Name(name.clone()));
            for p in affected {
                self.sync_or_drop(p, &mut b);
            }
            if self.names.ips(&name).next().is_none() {
                self.name_labels.remove(&name);
            }
        }
        self.finish(b)
    }

    /// Writes the name cache and the identities to `path` (atomically).
    pub fn checkpoint(&self, path: &Path) -> Result<(), CheckpointError> {
        Checkpoint {
            version: VERSION,
            names: self.names.clone(),
            identities: self.identities.checkpoint(),
        }
        .save(path)
    }

    /// A state from a checkpoint: the name cache as it was, and every checkpointed
    /// identity reserved for its label set. Then apply the policies' selectors (the
    /// same label sets get the same numbers) and, once every source has synchronized,
    /// call `finish_restore`.
    pub fn restore(config: FqdnConfig, path: &Path) -> Result<FqdnState, CheckpointError> {
        let cp = Checkpoint::load(path)?;
        let (identities, skipped) = Allocator::restore(&cp.identities);
        let mut state = FqdnState::with_parts(config, cp.names, identities);
        state.restore_skipped = skipped;
        Ok(state)
    }

    /// How many checkpointed identities `restore` skipped as invalid.
    pub fn restore_skipped(&self) -> usize {
        self.restore_skipped
    }

    /// Frees the restored identity numbers no label set claimed; returns how many.
    pub fn finish_restore(&mut self) -> usize {
        self.identities.release_unclaimed()
    }

    /// The identity of an address: the longest prefix of the IP → identity map that
    /// contains it, `Identity::WORLD` if none (what the dataplane's lookup answers).
    pub fn lookup(&self, ip: IpAddr) -> Identity {
        let full = host(ip);
        (0..=full.max_prefix_len())
            .rev()
            .find_map(|len| {
                let p = IpNet::new(ip, len).expect("a valid length").trunc();
                self.ip_identity.get(&p).copied()
            })
            .unwrap_or(Identity::WORLD)
    }

    /// The whole IP → identity map (a full resynchronization of the dataplane).
    pub fn ip_identity(&self) -> &BTreeMap<IpNet, Identity> {
        &self.ip_identity
    }

    /// The labels of an identity in use (`trace`).
    pub fn identity_labels(&self, id: Identity) -> Option<&LabelSet> {
        if id == Identity::WORLD {
            return None;
        }
        self.identities.labels(id)
    }

    /// The identities a selector selects, if it is in force.
    pub fn selected(&self, selector: &Selector) -> Option<&BTreeSet<Identity>> {
        self.selector_cache.selected(selector)
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn config(&self) -> &FqdnConfig {
        &self.config
    }

    /// `ferrulectl fqdn cache`.
    pub fn cache_view(&self) -> Vec<CachedName> {
        self.names
            .iter()
            .map(|(name, entry)| CachedName {
                name: name.to_string(),
                labels: self.name_labels.get(name).cloned().unwrap_or_default(),
                endpoints: entry.endpoints.iter().cloned().collect(),
                ips: entry
                    .ips
                    .values()
                    .map(|e| CachedIp {
                        ip: e.ip,
                        expires: e.expires,
                        identity: self.ip_identity.get(&host(e.ip)).copied(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// `ferrulectl fqdn identities`.
    pub fn identities_view(&self) -> Vec<IdentityView> {
        let mut prefixes: BTreeMap<Identity, usize> = BTreeMap::new();
        for id in self.ip_identity.values() {
            *prefixes.entry(*id).or_default() += 1;
        }
        self.identities
            .iter()
            .map(|(id, labels, refs)| IdentityView {
                id,
                labels: labels.clone(),
                refs,
                prefixes: prefixes.get(&id).copied().unwrap_or(0),
            })
            .collect()
    }

    /// `ferrulectl fqdn selectors`.
    pub fn selectors_view(&self) -> Vec<SelectorView> {
        self.selector_cache
            .iter()
            .map(|(s, ids)| SelectorView {
                selector: s.clone(),
                identities: ids.iter().copied().collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
