//! The ACL state of one generation as the workers read it: compiled tables (rules, the
//! fast classifier, the counter slot of every rule) and which table is attached to
//! which port and direction, plus the global table every uplink applies on egress.
//!
//! Verdicts: the first matching rule's action; a packet no rule of an attached table
//! matches is denied (the implicit deny of VPP's acl-plugin), and counted on the
//! table's no-match slot. `reflect` permits (conntrack adds the reply state).

use super::identity::{identity_key, identity_prefix, Identities, IdentityId};
use super::rule::{Action, Rule};
use super::{Classifier, ClassifierError, Compiled, FlowKey, NO_MATCH};
use crate::counters::MAX_PORTS;
use crate::flow::Family;
use std::sync::Arc;

/// One compiled ACL table: first match wins, in rule order.
#[derive(Debug)]
pub struct Table {
    /// The operator's name for it (`acl.apply` `tables[].name`).
    pub name: String,
    /// The rules, in priority order (for traces and dumps).
    pub rules: Vec<Rule>,
    /// Each rule's action, by rule index (the fast path's copy).
    actions: Vec<Action>,
    /// Each rule's hit-counter slot, by rule index.
    pub slots: Vec<u32>,
    /// The counter slot of packets no rule matches (denied).
    pub no_match_slot: u32,
    classifier: Compiled,
    /// The rules matched by the destination's identity, if the table has any.
    selectors: Option<Box<SelectorRules>>,
}

/// A table's rules with a destination selector, compiled apart: one rule per identity
/// the selector selects, with the identity encoded as the destination
/// ([`identity_prefix`]), classified against keys whose destination is the packet's
/// remote identity ([`identity_key`]). The address classifier then holds only the
/// other rules; a packet's verdict is the earlier of the two first matches.
#[derive(Debug)]
struct SelectorRules {
    classifier: Compiled,
    /// The table's rule index of each identity rule.
    rule_of: Vec<u32>,
    /// The first table rule index among them ([`NO_MATCH`]: none): a packet whose
    /// address match comes before it needs no identity lookup.
    first_identity_rule: u32,
    /// The table's rule index of each rule of the address classifier.
    address_rule_of: Vec<u32>,
    /// How many identity rules each selector rule became, by table rule index.
    expanded: Vec<u32>,
    /// Each selector's identities as compiled, by selector (sorted).
    sets: Vec<(String, Vec<IdentityId>)>,
}

/// Keys a table with selector rules classifies at once.
const SELECTOR_BURST: usize = 64;

impl Table {
    /// Compiles `rules` (already validated) with their counter slots.
    ///
    /// # Panics
    /// If `slots` does not hold one slot per rule.
    pub fn compile(
        name: String,
        rules: Vec<Rule>,
        slots: Vec<u32>,
        no_match_slot: u32,
    ) -> Result<Table, ClassifierError> {
        Table::compile_with(name, rules, slots, no_match_slot, &|_| Vec::new())
    }

    /// Compiles `rules` (already validated) with their counter slots; a rule with a
    /// destination selector matches the identities `selected(selector)` gives.
    ///
    /// # Panics
    /// If `slots` does not hold one slot per rule.
    pub fn compile_with(
        name: String,
        rules: Vec<Rule>,
        slots: Vec<u32>,
        no_match_slot: u32,
        selected: &dyn Fn(&str) -> Vec<IdentityId>,
    ) -> Result<Table, ClassifierError> {
        assert_eq!(rules.len(), slots.len(), "one counter slot per rule");
        let (classifier, selectors) = if rules.iter().any(|r| r.dst_selector.is_some()) {
            let mut address = Vec::new();
            let mut address_rule_of = Vec::new();
            let mut identity = Vec::new();
            let mut rule_of = Vec::new();
            let mut expanded = vec![0u32; rules.len()];
            let mut sets: Vec<(String, Vec<IdentityId>)> = Vec::new();
            for (index, rule) in rules.iter().enumerate() {
                let Some(selector) = &rule.dst_selector else {
                    address.push(rule.clone());
                    address_rule_of.push(index as u32);
                    continue;
                };
                let ids = match sets.iter().find(|(s, _)| s == selector) {
                    Some((_, ids)) => ids.clone(),
                    None => {
                        let mut ids = selected(selector);
                        ids.sort_unstable();
                        ids.dedup();
                        sets.push((selector.clone(), ids.clone()));
                        ids
                    }
                };
                for id in ids {
                    for family in [Family::V4, Family::V6] {
                        if rule.src.is_v4() == Some(family == Family::V6) {
                            continue;
                        }
                        let mut r = rule.clone();
                        r.dst_selector = None;
                        r.dst = identity_prefix(id, family);
                        identity.push(r);
                        rule_of.push(index as u32);
                        expanded[index] += 1;
                    }
                }
            }
            sets.sort();
            let selectors = SelectorRules {
                classifier: Compiled::new(&identity)?,
                first_identity_rule: rule_of.iter().copied().min().unwrap_or(NO_MATCH),
                rule_of,
                address_rule_of,
                expanded,
                sets,
            };
            (Compiled::new(&address)?, Some(Box::new(selectors)))
        } else {
            (Compiled::new(&rules)?, None)
        };
        Ok(Table {
            name,
            actions: rules.iter().map(|r| r.action).collect(),
            rules,
            slots,
            no_match_slot,
            classifier,
            selectors,
        })
    }

    /// Whether some rule matches by the destination's identity.
    #[inline(always)]
    pub fn has_selectors(&self) -> bool {
        self.selectors.is_some()
    }

    /// Whether the table was compiled with the identity sets `selected` gives now (a
    /// table without selector rules always is).
    pub fn selectors_current(&self, selected: &dyn Fn(&str) -> Vec<IdentityId>) -> bool {
        let Some(s) = &self.selectors else {
            return true;
        };
        s.sets.iter().all(|(selector, ids)| {
            let mut now = selected(selector);
            now.sort_unstable();
            now.dedup();
            now == *ids
        })
    }

    /// Each selector of the table with the identities it was compiled with.
    pub fn selector_sets(&self) -> &[(String, Vec<IdentityId>)] {
        self.selectors.as_ref().map_or(&[], |s| &s.sets)
    }

    /// How many identities rule `index` (a selector rule) matches.
    pub fn selector_identities(&self, index: usize) -> Option<u32> {
        let s = self.selectors.as_ref()?;
        self.rules.get(index)?.dst_selector.as_ref()?;
        // Two identity rules per identity when the rule's source is of no family.
        let per = if self.rules[index].src.is_v4().is_none() {
            2
        } else {
            1
        };
        Some(s.expanded[index] / per)
    }

    /// Classifies a burst: `out[i]` is the first matching rule of `keys[i]` or
    /// [`NO_MATCH`]. The remote identities of selector rules are looked up in
    /// `identities`.
    #[inline]
    pub fn classify(&self, keys: &[FlowKey], out: &mut [u32], identities: &Identities) {
        self.classifier.classify_batch(keys, out);
        if let Some(s) = &self.selectors {
            s.classify(keys, out, identities);
        }
    }

    /// Whether a lookup result lets the packet through.
    #[inline(always)]
    pub fn permits(&self, result: u32) -> bool {
        match self.actions.get(result as usize) {
            Some(Action::Permit | Action::Reflect) => true,
            Some(Action::Deny) | None => false,
        }
    }

    /// The action of a lookup result ([`Action::Deny`] for no match).
    pub fn action(&self, result: u32) -> Action {
        self.actions
            .get(result as usize)
            .copied()
            .unwrap_or(Action::Deny)
    }

    /// The counter slot of a lookup result.
    #[inline(always)]
    pub fn slot(&self, result: u32) -> u32 {
        if result == NO_MATCH {
            return self.no_match_slot;
        }
        self.slots
            .get(result as usize)
            .copied()
            .unwrap_or(self.no_match_slot)
    }

    /// Bytes of the compiled classifier.
    pub fn memory_bytes(&self) -> usize {
        self.classifier.memory_bytes()
    }
}

impl SelectorRules {
    /// `out` holds the address classifier's results; maps them to table rule indexes
    /// and takes the identity classifier's earlier matches. Only packets whose address
    /// match (if any) comes after the first identity rule are looked up by identity.
    fn classify(&self, keys: &[FlowKey], out: &mut [u32], identities: &Identities) {
        let mut id_keys = [FlowKey::default(); SELECTOR_BURST];
        let mut id_out = [NO_MATCH; SELECTOR_BURST];
        let mut at = [0usize; SELECTOR_BURST];
        for (keys, out) in keys
            .chunks(SELECTOR_BURST)
            .zip(out.chunks_mut(SELECTOR_BURST))
        {
            let mut n = 0;
            for (j, (key, o)) in keys.iter().zip(out.iter_mut()).enumerate() {
                *o = self
                    .address_rule_of
                    .get(*o as usize)
                    .copied()
                    .unwrap_or(NO_MATCH);
                if *o > self.first_identity_rule {
                    id_keys[n] = identity_key(key, identities.dst_identity(key));
                    at[n] = j;
                    n += 1;
                }
            }
            if n == 0 {
                continue;
            }
            self.classifier
                .classify_batch(&id_keys[..n], &mut id_out[..n]);
            for (&j, &i) in at[..n].iter().zip(&id_out[..n]) {
                let b = self.rule_of.get(i as usize).copied().unwrap_or(NO_MATCH);
                out[j] = out[j].min(b);
            }
        }
    }
}

/// Which packets a table applies to at a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Traffic entering the switch from the port.
    Ingress,
    /// Traffic leaving the switch through the port.
    Egress,
}

impl Direction {
    /// `ingress` or `egress`.
    pub const fn name(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
}

/// Every table of a generation and where each is attached.
#[derive(Debug, Clone)]
pub struct AclTables {
    /// The tables; attachments refer to them by index.
    pub tables: Vec<Arc<Table>>,
    /// Per port index, the table applied to traffic entering from it.
    pub ingress: [Option<u16>; MAX_PORTS],
    /// Per port index, the table applied to traffic leaving through it.
    pub egress: [Option<u16>; MAX_PORTS],
    /// The table applied on egress of every uplink port, after the port's own.
    pub global: Option<u16>,
    /// Whether any egress table or the global table is attached (skips the egress
    /// stage entirely when not).
    pub any_egress: bool,
    /// Whether any table holds a `reflect` rule (conntrack then tracks what they let
    /// through).
    pub has_reflect: bool,
    /// Numbers the ACL states published; a tracked connection remembers the one it
    /// was checked against and is checked again when it changes.
    pub generation: u64,
}

impl Default for AclTables {
    fn default() -> Self {
        AclTables {
            tables: Vec::new(),
            ingress: [None; MAX_PORTS],
            egress: [None; MAX_PORTS],
            global: None,
            any_egress: false,
            has_reflect: false,
            generation: 0,
        }
    }
}

impl AclTables {
    /// Tables and attachments of ACL state number `generation`; `any_egress` and
    /// `has_reflect` are derived.
    pub fn new(
        tables: Vec<Arc<Table>>,
        ingress: [Option<u16>; MAX_PORTS],
        egress: [Option<u16>; MAX_PORTS],
        global: Option<u16>,
        generation: u64,
    ) -> AclTables {
        let any_egress = global.is_some() || egress.iter().any(Option::is_some);
        let has_reflect = tables.iter().any(|t| t.actions.contains(&Action::Reflect));
        AclTables {
            tables,
            ingress,
            egress,
            global,
            any_egress,
            has_reflect,
            generation,
        }
    }

    /// The table attached to `port` in `direction`.
    #[inline(always)]
    pub fn attached(&self, port: u16, direction: Direction) -> Option<&Table> {
        let at = match direction {
            Direction::Ingress => &self.ingress,
            Direction::Egress => &self.egress,
        };
        let index = (*at.get(usize::from(port))?)?;
        self.tables.get(usize::from(index)).map(Arc::as_ref)
    }

    /// The global (uplink egress) table.
    #[inline(always)]
    pub fn global(&self) -> Option<&Table> {
        self.tables.get(usize::from(self.global?)).map(Arc::as_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{PortRange, Proto};
    use std::net::Ipv4Addr;

    fn key(dst_port: u16) -> FlowKey {
        FlowKey::v4(
            0,
            6,
            Ipv4Addr::new(10, 1, 0, 2),
            Ipv4Addr::new(10, 1, 0, 3),
            40000,
            dst_port,
        )
    }

    #[test]
    fn first_match_action_slot_and_implicit_deny() {
        let mut web = Rule::any(Action::Permit);
        web.proto = Proto::TCP;
        web.dst_port = PortRange::single(80);
        let mut ssh = Rule::any(Action::Deny);
        ssh.proto = Proto::TCP;
        ssh.dst_port = PortRange::single(22);
        let t = Table::compile("t".into(), vec![web, ssh], vec![7, 9], 11).unwrap();
        let mut out = [0u32; 3];
        t.classify(
            &[key(80), key(22), key(443)],
            &mut out,
            &Identities::default(),
        );
        assert_eq!(out, [0, 1, NO_MATCH]);
        assert!(t.permits(out[0]) && !t.permits(out[1]) && !t.permits(out[2]));
        assert_eq!([t.slot(out[0]), t.slot(out[1]), t.slot(out[2])], [7, 9, 11]);
        assert_eq!(t.action(NO_MATCH), Action::Deny);
    }

    #[test]
    fn attachments_resolve_by_port_and_direction() {
        let t = Arc::new(Table::compile("t".into(), Vec::new(), Vec::new(), 0).unwrap());
        let mut ingress = [None; MAX_PORTS];
        ingress[2] = Some(0);
        let acl = AclTables::new(vec![t], ingress, [None; MAX_PORTS], None, 1);
        assert!(acl.attached(2, Direction::Ingress).is_some());
        assert!(acl.attached(2, Direction::Egress).is_none());
        assert!(acl.attached(99, Direction::Ingress).is_none());
        assert!(!acl.any_egress && acl.global().is_none());
    }
}

#[cfg(test)]
mod selector_tests {
    use super::*;
    use crate::acl::identity::{IdentityMap, WORLD};
    use crate::acl::{PortRange, Prefix, Proto};
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    const SELECTORS: [&str; 3] = ["fqdn:*.a.test", "fqdn:b.test", "cidr:192.0.2.0/24"];

    fn random_rule(rng: &mut rand::rngs::StdRng) -> Rule {
        let mut r = Rule::any(match rng.gen_range(0..3) {
            0 => Action::Deny,
            1 => Action::Permit,
            _ => Action::Reflect,
        });
        if rng.gen_bool(0.5) {
            r.proto = if rng.gen_bool(0.5) {
                Proto::TCP
            } else {
                Proto::UDP
            };
            if rng.gen_bool(0.5) {
                let lo = rng.gen_range(1..100u16);
                r.dst_port = PortRange {
                    lo,
                    hi: lo + rng.gen_range(0..20),
                };
            }
        }
        match rng.gen_range(0..4) {
            0 | 1 => r.dst_selector = Some(SELECTORS[rng.gen_range(0..3)].to_string()),
            2 => r.dst = Prefix::v4(Ipv4Addr::new(198, 51, 100, rng.gen_range(0..8)), 30),
            _ => {}
        }
        if rng.gen_bool(0.2) {
            r.src = if rng.gen_bool(0.5) {
                Prefix::v4(Ipv4Addr::new(10, 0, 0, 0), 8)
            } else {
                Prefix::v6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0), 16)
            };
        }
        r
    }

    /// The first rule of `rules` matching `key` as the table's semantics say, the
    /// slow way: a selector rule matches when its other fields do and the destination's
    /// identity is one the selector selects.
    fn reference(
        rules: &[Rule],
        key: &FlowKey,
        identity: IdentityId,
        selected: &HashMap<String, Vec<IdentityId>>,
    ) -> u32 {
        for (i, r) in rules.iter().enumerate() {
            let hit = match &r.dst_selector {
                None => r.matches(key),
                Some(s) => {
                    let mut plain = r.clone();
                    plain.dst_selector = None;
                    plain.matches(key) && selected[s].contains(&identity)
                }
            };
            if hit {
                return i as u32;
            }
        }
        NO_MATCH
    }

    #[test]
    fn selector_rules_match_by_identity_like_a_linear_reference() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(22);
        let dsts: Vec<IpAddr> = (0..12)
            .map(|i| {
                if i < 8 {
                    IpAddr::V4(Ipv4Addr::new(198, 51, 100, i))
                } else {
                    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i.into()))
                }
            })
            .collect();
        for round in 0..200 {
            let rules: Vec<Rule> = (0..rng.gen_range(1..30))
                .map(|_| random_rule(&mut rng))
                .collect();
            let selected: HashMap<String, Vec<IdentityId>> = SELECTORS
                .iter()
                .map(|s| {
                    let ids = (0..rng.gen_range(0..4))
                        .map(|_| rng.gen_range(100..106))
                        .collect();
                    (s.to_string(), ids)
                })
                .collect();
            let mut map = IdentityMap::default();
            for ip in &dsts {
                if rng.gen_bool(0.7) {
                    let len = if ip.is_ipv4() { 32 } else { 128 };
                    map.set(*ip, len, rng.gen_range(100..106)).unwrap();
                }
            }
            let identities = Identities {
                maps: vec![None, Some(Arc::new(map.clone()))],
            };
            let slots = (0..rules.len() as u32).collect();
            let table = Table::compile_with("t".into(), rules.clone(), slots, 999, &|s| {
                selected[s].clone()
            })
            .unwrap();
            let keys: Vec<FlowKey> = (0..64)
                .map(|_| {
                    let dst = dsts[rng.gen_range(0..dsts.len())];
                    let (proto, dport) = (
                        if rng.gen_bool(0.5) { 6 } else { 17 },
                        rng.gen_range(0..120),
                    );
                    match dst {
                        IpAddr::V4(d) => {
                            FlowKey::v4(1, proto, Ipv4Addr::new(10, 1, 2, 3), d, 40000, dport)
                        }
                        IpAddr::V6(d) => FlowKey::v6(
                            1,
                            proto,
                            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9),
                            d,
                            40000,
                            dport,
                        ),
                    }
                })
                .collect();
            let mut out = vec![0u32; keys.len()];
            table.classify(&keys, &mut out, &identities);
            for (key, got) in keys.iter().zip(&out) {
                let id = map.lookup(key.dst_ip());
                let want = reference(&rules, key, id, &selected);
                assert_eq!(*got, want, "round {round} key {key:?} identity {id}");
            }
            // No map for the network: every destination is world, which no selector
            // selects here.
            let mut other = keys[0];
            other.network = 0;
            let mut one = [0u32];
            table.classify(std::slice::from_ref(&other), &mut one, &identities);
            assert_eq!(one[0], reference(&rules, &other, WORLD, &selected));
            assert!(table.selectors_current(&|s| selected[s].clone()));
        }
    }

    #[test]
    fn a_changed_identity_set_makes_the_table_stale() {
        let mut r = Rule::any(Action::Permit);
        r.dst_selector = Some("fqdn:b.test".into());
        let t = Table::compile_with("t".into(), vec![r], vec![0], 1, &|_| vec![7]).unwrap();
        assert!(t.has_selectors());
        assert!(t.selectors_current(&|_| vec![7]));
        assert!(!t.selectors_current(&|_| vec![7, 8]));
        assert_eq!(t.selector_identities(0), Some(1));
        assert_eq!(t.selector_sets(), [("fqdn:b.test".to_string(), vec![7])]);
    }
}
