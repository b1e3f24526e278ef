//! The linear reference classifier: scans the rules in order and returns the first that
//! matches. Slow and obviously correct; the oracle for compiled classifiers.

use super::rule::Rule;
use super::FlowKey;
use super::{Classifier, NO_MATCH};

/// An ordered rule table classified by scanning it; first match wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinearClassifier {
    rules: Vec<Rule>,
}

impl LinearClassifier {
    /// A classifier over `rules`, in priority order (index 0 first).
    pub fn new(rules: Vec<Rule>) -> Self {
        Self { rules }
    }

    /// The rules, in priority order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The index of the first rule matching `key`, if any.
    pub fn classify(&self, key: &FlowKey) -> Option<usize> {
        self.rules.iter().position(|rule| rule.matches(key))
    }
}

impl Classifier for LinearClassifier {
    fn classify_batch(&self, keys: &[FlowKey], out: &mut [u32]) {
        assert!(out.len() >= keys.len(), "output shorter than the burst");
        for (key, slot) in keys.iter().zip(out.iter_mut()) {
            *slot = self
                .classify(key)
                .map_or(NO_MATCH, |index| u32::try_from(index).unwrap_or(NO_MATCH));
        }
    }

    fn memory_bytes(&self) -> usize {
        let origins: usize = self
            .rules
            .iter()
            .filter_map(|rule| rule.origin.as_ref())
            .map(String::capacity)
            .sum();
        std::mem::size_of::<Self>() + self.rules.capacity() * std::mem::size_of::<Rule>() + origins
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::rule::{Action, PortRange, Prefix, Proto, RuleField};
    use std::net::Ipv4Addr;

    fn key(dst_port: u16) -> FlowKey {
        FlowKey::v4(
            0,
            6,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            1234,
            dst_port,
        )
    }

    #[test]
    fn first_match_wins_in_order() {
        let mut web = Rule::any(Action::Permit);
        web.proto = Proto::TCP;
        web.dst_port = PortRange::single(80);
        let mut net = Rule::any(Action::Deny);
        net.dst = Prefix::parse("10.0.0.0/8", RuleField::Dst).unwrap();
        let classifier = LinearClassifier::new(vec![web, net, Rule::any(Action::Permit)]);
        assert_eq!(classifier.classify(&key(80)), Some(0));
        assert_eq!(classifier.classify(&key(81)), Some(1));

        let mut out = [0u32; 2];
        classifier.classify_batch(&[key(80), key(443)], &mut out);
        assert_eq!(out, [0, 1]);
    }

    #[test]
    fn no_match_is_none_and_all_ones() {
        let classifier = LinearClassifier::new(Vec::new());
        assert_eq!(classifier.classify(&key(80)), None);
        let mut out = [0u32; 1];
        classifier.classify_batch(&[key(80)], &mut out);
        assert_eq!(out, [NO_MATCH]);
    }
}
