//! The selector cache: each selector in force (FQDN and CIDR) → the identities it
//! selects, kept up to date as identities appear and disappear, telling which selectors'
//! sets changed (the only changes that touch policy rules).

use std::collections::{BTreeMap, BTreeSet};

use crate::identity::Identity;
use crate::labels::LabelSet;
use crate::selector::Selector;

/// Selector → selected identities.
#[derive(Debug, Clone, Default)]
pub struct SelectorCache {
    selections: BTreeMap<Selector, BTreeSet<Identity>>,
}

impl SelectorCache {
    pub fn new() -> SelectorCache {
        SelectorCache::default()
    }

    /// Replaces the selectors in force. A new selector's selection is computed from
    /// `identities` (every identity in use with its labels); removed selectors are
    /// dropped. Returns the new selectors (their sets are new).
    pub fn set_selectors<'a>(
        &mut self,
        selectors: &BTreeSet<Selector>,
        identities: impl Iterator<Item = (Identity, &'a LabelSet)> + Clone,
    ) -> Vec<Selector> {
        self.selections.retain(|s, _| selectors.contains(s));
        let mut added = Vec::new();
        for s in selectors {
            if self.selections.contains_key(s) {
                continue;
            }
            let selected = identities
                .clone()
                .filter(|(_, l)| s.selects(l))
                .map(|(id, _)| id)
                .collect();
            self.selections.insert(s.clone(), selected);
            added.push(s.clone());
        }
        added
    }

    /// A new identity: adds it to every selector that selects its labels; returns those.
    pub fn identity_added(&mut self, id: Identity, labels: &LabelSet) -> Vec<Selector> {
        let mut changed = Vec::new();
        for (s, set) in &mut self.selections {
            if s.selects(labels) && set.insert(id) {
                changed.push(s.clone());
            }
        }
        changed
    }

    /// A released identity: removes it everywhere; returns the selectors that had it.
    pub fn identity_removed(&mut self, id: Identity) -> Vec<Selector> {
        let mut changed = Vec::new();
        for (s, set) in &mut self.selections {
            if set.remove(&id) {
                changed.push(s.clone());
            }
        }
        changed
    }

    /// The identities a selector selects, if it is in force.
    pub fn selected(&self, selector: &Selector) -> Option<&BTreeSet<Identity>> {
        self.selections.get(selector)
    }

    /// Every selector with its identities, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Selector, &BTreeSet<Identity>)> {
        self.selections.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::{CidrSelector, FqdnSelector};

    fn set(s: &str) -> LabelSet {
        s.parse().unwrap()
    }

    #[test]
    fn incremental_updates_name_the_changed_selectors() {
        let star = Selector::Fqdn(FqdnSelector::match_pattern("*.cilium.io").unwrap());
        let www = Selector::Fqdn(FqdnSelector::match_name("www.cilium.io").unwrap());
        let cidr = Selector::Cidr(CidrSelector::new("52.58.254.0/24".parse().unwrap()));
        let l1 = set("fqdn:*.cilium.io,fqdn:www.cilium.io,reserved:world");
        let l2 = set("cidr:52.58.254.0/24,fqdn:*.cilium.io,reserved:world");
        let mut c = SelectorCache::new();
        let existing = [(Identity(1 << 24), &l1)];
        let added = c.set_selectors(
            &[star.clone(), www.clone()].into(),
            existing.iter().map(|(i, l)| (*i, *l)),
        );
        assert_eq!(added, vec![star.clone(), www.clone()]);
        assert_eq!(c.selected(&www).unwrap().len(), 1);
        assert_eq!(c.identity_added(Identity(5 << 22), &l2), vec![star.clone()]);
        let all = [star.clone(), www.clone(), cidr.clone()].into();
        let ids = [(Identity(1 << 24), &l1), (Identity(5 << 22), &l2)];
        assert_eq!(
            c.set_selectors(&all, ids.iter().map(|(i, l)| (*i, *l))),
            vec![cidr.clone()]
        );
        assert_eq!(
            c.selected(&cidr)
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            vec![Identity(5 << 22)]
        );
        assert_eq!(
            c.identity_removed(Identity(5 << 22)),
            vec![star.clone(), cidr.clone()]
        );
        assert!(c.identity_removed(Identity(5 << 22)).is_empty());
        c.set_selectors(&[cidr.clone()].into(), std::iter::empty());
        assert!(c.selected(&star).is_none());
        assert!(c.selected(&cidr).unwrap().is_empty());
    }
}
