//! Local security identities: one numeric identity per unique label set, from the local
//! scope (`1<<24` upwards, like Cilium's), reference counted and released when unused;
//! and the allocator's checkpoint, so that after a restart the same label set gets the
//! same number.
//!
//! Numbers are handed out in increasing order, wrapping around the local range and
//! skipping numbers in use or restored, so a released number is not given to another
//! label set until the whole range has been used. Restored numbers stay reserved for
//! their label set until `release_unclaimed` (called once every source of labels has
//! synchronized after the restart).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::labels::{LabelSet, Source};

/// A numeric security identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Identity(pub u32);

impl Identity {
    /// The reserved identity of addresses nothing labels (`reserved:world` alone): what
    /// the dataplane's IP → identity lookup answers on a miss.
    pub const WORLD: Identity = Identity(2);
    /// The first local identity.
    pub const LOCAL_MIN: Identity = Identity(1 << 24);
    /// The last local identity.
    pub const LOCAL_MAX: Identity = Identity((1 << 25) - 1);
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The local range is used up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no local identity left for {0}")]
pub struct Exhausted(pub String);

#[derive(Debug, Clone)]
struct Entry {
    labels: LabelSet,
    refs: u32,
}

/// One identity in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedIdentity {
    pub id: Identity,
    pub labels: LabelSet,
}

/// The allocator's checkpoint: every identity in use or still reserved, and where the
/// numbering goes on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatorCheckpoint {
    pub next: u32,
    pub identities: Vec<SavedIdentity>,
}

/// The local identity allocator.
#[derive(Debug, Clone)]
pub struct Allocator {
    by_id: BTreeMap<Identity, Entry>,
    by_labels: HashMap<LabelSet, Identity>,
    /// Restored identities no label set has claimed yet.
    reserved: BTreeMap<Identity, LabelSet>,
    reserved_by_labels: HashMap<LabelSet, Identity>,
    next: u32,
    min: u32,
    max: u32,
}

impl Default for Allocator {
    fn default() -> Allocator {
        Allocator::new()
    }
}

impl Allocator {
    pub fn new() -> Allocator {
        Allocator::with_range(Identity::LOCAL_MIN, Identity::LOCAL_MAX)
    }

    /// An allocator over a smaller range (tests of exhaustion).
    pub fn with_range(min: Identity, max: Identity) -> Allocator {
        Allocator {
            by_id: BTreeMap::new(),
            by_labels: HashMap::new(),
            reserved: BTreeMap::new(),
            reserved_by_labels: HashMap::new(),
            next: min.0,
            min: min.0,
            max: max.0,
        }
    }

    /// The identity of a label set, if allocated.
    pub fn lookup(&self, labels: &LabelSet) -> Option<Identity> {
        self.by_labels.get(labels).copied()
    }

    /// The labels of an identity in use.
    pub fn labels(&self, id: Identity) -> Option<&LabelSet> {
        self.by_id.get(&id).map(|e| &e.labels)
    }

    /// References held on an identity.
    pub fn refs(&self, id: Identity) -> u32 {
        self.by_id.get(&id).map_or(0, |e| e.refs)
    }

    /// Takes a reference on the identity of `labels`, allocating it if needed (its
    /// restored number if it had one). Returns the identity and whether it is new.
    pub fn allocate(&mut self, labels: &LabelSet) -> Result<(Identity, bool), Exhausted> {
        if let Some(&id) = self.by_labels.get(labels) {
            self.by_id.get_mut(&id).expect("both maps agree").refs += 1;
            return Ok((id, false));
        }
        let id = match self.reserved_by_labels.remove(labels) {
            Some(id) => {
                self.reserved.remove(&id);
                id
            }
            None => self
                .next_free()
                .ok_or_else(|| Exhausted(labels.to_string()))?,
        };
        self.by_id.insert(
            id,
            Entry {
                labels: labels.clone(),
                refs: 1,
            },
        );
        self.by_labels.insert(labels.clone(), id);
        Ok((id, true))
    }

    fn next_free(&mut self) -> Option<Identity> {
        let span = u64::from(self.max - self.min) + 1;
        for _ in 0..span {
            let id = Identity(self.next);
            self.next = if self.next == self.max {
                self.min
            } else {
                self.next + 1
            };
            if !self.by_id.contains_key(&id) && !self.reserved.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// Drops one reference; returns the identity's labels when that was the last one
    /// (the identity is released).
    pub fn release(&mut self, id: Identity) -> Option<LabelSet> {
        let entry = self.by_id.get_mut(&id)?;
        entry.refs -= 1;
        if entry.refs > 0 {
            return None;
        }
        let entry = self.by_id.remove(&id).expect("just seen");
        self.by_labels.remove(&entry.labels);
        Some(entry.labels)
    }

    /// Identities in use, in numeric order.
    pub fn iter(&self) -> impl Iterator<Item = (Identity, &LabelSet, u32)> + Clone {
        self.by_id.iter().map(|(id, e)| (*id, &e.labels, e.refs))
    }

    /// Identities in use whose labels include an `fqdn:` label.
    pub fn fqdn_count(&self) -> usize {
        self.by_id
            .values()
            .filter(|e| e.labels.has_source(Source::Fqdn))
            .count()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Restored identities still waiting for their label set.
    pub fn reserved(&self) -> impl Iterator<Item = (Identity, &LabelSet)> {
        self.reserved.iter().map(|(id, l)| (*id, l))
    }

    /// Frees the restored numbers no label set claimed; returns how many.
    pub fn release_unclaimed(&mut self) -> usize {
        let n = self.reserved.len();
        self.reserved.clear();
        self.reserved_by_labels.clear();
        n
    }

    /// The checkpoint: identities in use and those still reserved.
    pub fn checkpoint(&self) -> AllocatorCheckpoint {
        let mut identities: Vec<SavedIdentity> = self
            .by_id
            .iter()
            .map(|(id, e)| SavedIdentity {
                id: *id,
                labels: e.labels.clone(),
            })
            .collect();
        identities.extend(self.reserved.iter().map(|(id, l)| SavedIdentity {
            id: *id,
            labels: l.clone(),
        }));
        identities.sort_by_key(|s| s.id);
        AllocatorCheckpoint {
            next: self.next,
            identities,
        }
    }

    /// A fresh allocator whose checkpointed identities are reserved for their label
    /// sets. Entries outside the local range, or repeating a number or a label set, are
    /// skipped and counted in the second value.
    pub fn restore(cp: &AllocatorCheckpoint) -> (Allocator, usize) {
        let mut a = Allocator::new();
        let mut skipped = 0;
        for s in &cp.identities {
            let ok = (a.min..=a.max).contains(&s.id.0)
                && !a.reserved.contains_key(&s.id)
                && !a.reserved_by_labels.contains_key(&s.labels);
            if !ok {
                skipped += 1;
                continue;
            }
            a.reserved.insert(s.id, s.labels.clone());
            a.reserved_by_labels.insert(s.labels.clone(), s.id);
        }
        if (a.min..=a.max).contains(&cp.next) {
            a.next = cp.next;
        }
        (a, skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> LabelSet {
        s.parse().unwrap()
    }

    #[test]
    fn one_identity_per_label_set_refcounted() {
        let mut a = Allocator::new();
        let (x, new) = a.allocate(&set("fqdn:a.com,reserved:world")).unwrap();
        assert!(new);
        assert_eq!(x, Identity::LOCAL_MIN);
        let (y, new) = a.allocate(&set("reserved:world,fqdn:a.com")).unwrap();
        assert_eq!((y, new), (x, false));
        let (z, _) = a.allocate(&set("fqdn:b.com,reserved:world")).unwrap();
        assert_ne!(z, x);
        assert_eq!(a.refs(x), 2);
        assert_eq!(a.release(x), None);
        assert_eq!(a.release(x), Some(set("fqdn:a.com,reserved:world")));
        assert_eq!(a.lookup(&set("fqdn:a.com,reserved:world")), None);
        // A released number is not handed out again straight away.
        let (w, _) = a.allocate(&set("fqdn:a.com,reserved:world")).unwrap();
        assert_ne!(w, x);
        assert_eq!(a.fqdn_count(), 2);
    }

    #[test]
    fn wraps_and_reports_exhaustion() {
        let mut a = Allocator::with_range(Identity(100), Identity(101));
        let (x, _) = a.allocate(&set("fqdn:a")).unwrap();
        a.allocate(&set("fqdn:b")).unwrap();
        assert!(a.allocate(&set("fqdn:c")).is_err());
        a.release(x);
        assert_eq!(a.allocate(&set("fqdn:c")).unwrap().0, x);
    }

    #[test]
    fn restore_gives_the_same_number_to_the_same_labels_only() {
        let mut a = Allocator::new();
        let (x, _) = a.allocate(&set("fqdn:a.com")).unwrap();
        let (y, _) = a.allocate(&set("fqdn:b.com")).unwrap();
        let cp = a.checkpoint();
        let json = serde_json::to_string(&cp).unwrap();
        let (mut b, skipped) = Allocator::restore(&serde_json::from_str(&json).unwrap());
        assert_eq!(skipped, 0);
        // A new label set never takes a restored number.
        let (z, _) = b.allocate(&set("fqdn:c.com")).unwrap();
        assert!(z != x && z != y);
        assert_eq!(b.allocate(&set("fqdn:b.com")).unwrap(), (y, true));
        assert_eq!(b.reserved().count(), 1);
        assert_eq!(b.release_unclaimed(), 1);
        assert_ne!(
            b.allocate(&set("fqdn:a.com")).unwrap().0,
            x,
            "released reservations are gone"
        );
    }

    #[test]
    fn restore_skips_bad_entries() {
        let cp = AllocatorCheckpoint {
            next: 5,
            identities: vec![
                SavedIdentity {
                    id: Identity(7),
                    labels: set("fqdn:a"),
                },
                SavedIdentity {
                    id: Identity::LOCAL_MIN,
                    labels: set("fqdn:a"),
                },
                SavedIdentity {
                    id: Identity::LOCAL_MIN,
                    labels: set("fqdn:b"),
                },
                SavedIdentity {
                    id: Identity(Identity::LOCAL_MIN.0 + 1),
                    labels: set("fqdn:a"),
                },
            ],
        };
        let (a, skipped) = Allocator::restore(&cp);
        assert_eq!(skipped, 3);
        assert_eq!(
            a.reserved().collect::<Vec<_>>(),
            vec![(Identity::LOCAL_MIN, &set("fqdn:a"))]
        );
    }
}
