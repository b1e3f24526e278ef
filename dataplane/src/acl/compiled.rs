//! [`Compiled`]: the classifier the data path uses. IPv4 keys go through RFC tables
//! ([`super::rfc`]) when the rule set's tables fit their budget, else through the
//! decision trees ([`super::tree`]); IPv6 keys always go through the trees.

use super::rfc::Rfc;
use super::tree::DecisionTreeClassifier;
use super::{Classifier, ClassifierError, FlowKey, Rule, NO_MATCH};
use crate::flow::Family;

/// IPv4 rule counts up to this are left to the trees: one leaf scanned in order is as
/// fast as RFC's table loads there, and far smaller.
pub const RFC_MIN_RULES: usize = 8;

/// Keys classified together.
const BURST: usize = 32;

/// The compiled classifier over one ordered rule table; first match wins.
#[derive(Debug)]
pub struct Compiled {
    /// The IPv4 lookup when RFC's tables fit; `None` leaves IPv4 to `tree`.
    rfc: Option<Rfc>,
    tree: DecisionTreeClassifier,
}

impl Compiled {
    /// Builds the classifier over `rules`, in priority order (index 0 first).
    pub fn new(rules: &[Rule]) -> Result<Self, ClassifierError> {
        let ipv4_rules = rules
            .iter()
            .filter(|rule| rule.src.is_v4() != Some(false) && rule.dst.is_v4() != Some(false))
            .count();
        let rfc = if ipv4_rules > RFC_MIN_RULES {
            Rfc::new(rules)
        } else {
            None
        };
        let tree = DecisionTreeClassifier::build(rules, rfc.is_none())?;
        Ok(Self { rfc, tree })
    }

    /// Which lookup serves IPv4 keys: `rfc` or `tree`.
    pub fn ipv4_lookup(&self) -> &'static str {
        if self.rfc.is_some() {
            "rfc"
        } else {
            "tree"
        }
    }

    /// The index of the first rule matching `key`, if any.
    pub fn classify(&self, key: &FlowKey) -> Option<usize> {
        match (&self.rfc, key.family) {
            (Some(rfc), Family::V4) => {
                let mut out = [NO_MATCH];
                rfc.classify_burst(std::slice::from_ref(key), &mut out);
                (out[0] != NO_MATCH).then_some(out[0] as usize)
            }
            _ => self.tree.classify(key),
        }
    }
}

impl Classifier for Compiled {
    fn classify_batch(&self, keys: &[FlowKey], out: &mut [u32]) {
        assert!(out.len() >= keys.len(), "output shorter than the burst");
        let Some(rfc) = &self.rfc else {
            return self.tree.classify_batch(keys, out);
        };
        if keys.iter().all(|key| key.family == Family::V4) {
            return rfc.classify_burst(keys, out);
        }
        // A mixed burst: IPv4 keys one by one, IPv6 keys gathered for the trees.
        let mut v6_keys = [FlowKey::default(); BURST];
        let mut v6_at = [0usize; BURST];
        let mut v6_out = [NO_MATCH; BURST];
        for (keys, out) in keys.chunks(BURST).zip(out.chunks_mut(BURST)) {
            let mut v6 = 0;
            for (index, key) in keys.iter().enumerate() {
                if key.family == Family::V4 {
                    rfc.classify_burst(std::slice::from_ref(key), &mut out[index..=index]);
                } else {
                    v6_keys[v6] = *key;
                    v6_at[v6] = index;
                    v6 += 1;
                }
            }
            self.tree.classify_batch(&v6_keys[..v6], &mut v6_out[..v6]);
            for (&index, &result) in v6_at[..v6].iter().zip(&v6_out) {
                out[index] = result;
            }
        }
    }

    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.rfc.as_ref().map_or(0, Rfc::memory_bytes)
            + self.tree.memory_bytes()
    }
}
