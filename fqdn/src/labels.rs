//! Labels and label sets: what an identity is made of (`fqdn:<selector>`, `cidr:<prefix>`,
//! `reserved:world`, `k8s:<key>=<value>`), their canonical sorted set and its text form.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where a label comes from. Declared in alphabetical order so that the derived order
/// is the order of the text form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// An external prefix selected by a CIDR policy: the key is the prefix.
    Cidr,
    /// An address learned from a DNS answer for a name a FQDN selector selects: the key
    /// is the selector.
    Fqdn,
    /// A Kubernetes label of an endpoint: the key is `name=value`.
    K8s,
    /// A label the system defines (`world`: outside the cluster).
    Reserved,
}

impl Source {
    /// The source's name in the text form.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Cidr => "cidr",
            Source::Fqdn => "fqdn",
            Source::K8s => "k8s",
            Source::Reserved => "reserved",
        }
    }
}

/// A label: a source and a key, written `source:key`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label {
    source: Source,
    key: String,
}

/// Why a label's text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label {0:?}: expected source:key")]
    NoSource(String),
    #[error("label {label:?}: unknown source {source_name:?} (cidr, fqdn, k8s, reserved)")]
    UnknownSource { label: String, source_name: String },
    #[error("label {0:?}: empty key")]
    EmptyKey(String),
    #[error("label {label:?}: {reason}")]
    BadCidr { label: String, reason: String },
}

impl Label {
    /// `reserved:world`: everything outside the cluster that nothing else labels.
    pub fn world() -> Label {
        Label {
            source: Source::Reserved,
            key: "world".into(),
        }
    }

    /// `cidr:<prefix>`, the prefix with its host bits cleared.
    pub fn cidr(prefix: IpNet) -> Label {
        Label {
            source: Source::Cidr,
            key: prefix.trunc().to_string(),
        }
    }

    /// `fqdn:<selector>` for a FQDN selector's canonical text.
    pub fn fqdn(selector: &str) -> Label {
        Label {
            source: Source::Fqdn,
            key: selector.to_string(),
        }
    }

    /// `k8s:<name>=<value>` for an endpoint's Kubernetes label.
    pub fn k8s(name: &str, value: &str) -> Label {
        Label {
            source: Source::K8s,
            key: format!("{name}={value}"),
        }
    }

    pub fn source(&self) -> Source {
        self.source
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The prefix of a `cidr:` label.
    pub fn cidr_prefix(&self) -> Option<IpNet> {
        match self.source {
            Source::Cidr => self.key.parse().ok(),
            _ => None,
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.source.as_str(), self.key)
    }
}

impl FromStr for Label {
    type Err = LabelError;

    fn from_str(s: &str) -> Result<Label, LabelError> {
        let (source, key) = s
            .split_once(':')
            .ok_or_else(|| LabelError::NoSource(s.into()))?;
        let source = match source {
            "cidr" => Source::Cidr,
            "fqdn" => Source::Fqdn,
            "k8s" => Source::K8s,
            "reserved" => Source::Reserved,
            other => {
                return Err(LabelError::UnknownSource {
                    label: s.into(),
                    source_name: other.into(),
                })
            }
        };
        if key.is_empty() {
            return Err(LabelError::EmptyKey(s.into()));
        }
        if source == Source::Cidr {
            let prefix: IpNet =
                key.parse()
                    .map_err(|e: ipnet::AddrParseError| LabelError::BadCidr {
                        label: s.into(),
                        reason: e.to_string(),
                    })?;
            if prefix.trunc() != prefix {
                return Err(LabelError::BadCidr {
                    label: s.into(),
                    reason: "host bits set".into(),
                });
            }
            return Ok(Label::cidr(prefix));
        }
        Ok(Label {
            source,
            key: key.into(),
        })
    }
}

impl Serialize for Label {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Label, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A set of labels kept sorted, so that equal sets compare, hash and print the same.
/// Its text form is the labels' text joined by `,` in sorted order.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LabelSet(BTreeSet<Label>);

impl LabelSet {
    pub fn new() -> LabelSet {
        LabelSet::default()
    }

    pub fn insert(&mut self, label: Label) -> bool {
        self.0.insert(label)
    }

    pub fn remove(&mut self, label: &Label) -> bool {
        self.0.remove(label)
    }

    pub fn contains(&self, label: &Label) -> bool {
        self.0.contains(label)
    }

    pub fn extend(&mut self, other: &LabelSet) {
        self.0.extend(other.0.iter().cloned());
    }

    pub fn iter(&self) -> impl Iterator<Item = &Label> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any label has this source.
    pub fn has_source(&self, source: Source) -> bool {
        self.0.iter().any(|l| l.source == source)
    }

    /// The prefixes of the set's `cidr:` labels.
    pub fn cidr_prefixes(&self) -> impl Iterator<Item = IpNet> + '_ {
        self.0.iter().filter_map(Label::cidr_prefix)
    }
}

impl FromIterator<Label> for LabelSet {
    fn from_iter<I: IntoIterator<Item = Label>>(iter: I) -> LabelSet {
        LabelSet(iter.into_iter().collect())
    }
}

impl fmt::Display for LabelSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, label) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{label}")?;
        }
        Ok(())
    }
}

impl FromStr for LabelSet {
    type Err = LabelError;

    fn from_str(s: &str) -> Result<LabelSet, LabelError> {
        if s.is_empty() {
            return Ok(LabelSet::new());
        }
        s.split(',').map(str::parse).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_is_sorted_and_stable() {
        let a: LabelSet = [
            Label::world(),
            Label::fqdn("*.cilium.io"),
            Label::cidr("192.0.2.7/24".parse().unwrap()),
        ]
        .into_iter()
        .collect();
        let b: LabelSet = [
            Label::cidr("192.0.2.0/24".parse().unwrap()),
            Label::world(),
            Label::fqdn("*.cilium.io"),
        ]
        .into_iter()
        .collect();
        assert_eq!(a, b);
        assert_eq!(
            a.to_string(),
            "cidr:192.0.2.0/24,fqdn:*.cilium.io,reserved:world"
        );
        assert_eq!(a.to_string().parse::<LabelSet>().unwrap(), a);
    }

    #[test]
    fn parse_round_trips_and_refuses() {
        for text in [
            "reserved:world",
            "cidr:2001:db8::/32",
            "fqdn:www.cilium.io",
            "k8s:app=db",
        ] {
            assert_eq!(text.parse::<Label>().unwrap().to_string(), text);
        }
        assert_eq!(
            "cidr:2001:db8::/32".parse::<Label>().unwrap().cidr_prefix(),
            Some("2001:db8::/32".parse().unwrap())
        );
        assert!(matches!(
            "world".parse::<Label>(),
            Err(LabelError::NoSource(_))
        ));
        assert!(matches!(
            "dns:x".parse::<Label>(),
            Err(LabelError::UnknownSource { .. })
        ));
        assert!(matches!(
            "fqdn:".parse::<Label>(),
            Err(LabelError::EmptyKey(_))
        ));
        assert!(matches!(
            "cidr:10.0.0.1/8".parse::<Label>(),
            Err(LabelError::BadCidr { .. })
        ));
        assert!(matches!(
            "cidr:10.0.0.0/33".parse::<Label>(),
            Err(LabelError::BadCidr { .. })
        ));
    }

    #[test]
    fn serde_uses_the_text_form() {
        let set: LabelSet = "fqdn:a.com,reserved:world".parse().unwrap();
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(json, r#"["fqdn:a.com","reserved:world"]"#);
        assert_eq!(serde_json::from_str::<LabelSet>(&json).unwrap(), set);
        assert!(serde_json::from_str::<LabelSet>(r#"["nope"]"#).is_err());
    }

    #[test]
    fn has_source_and_prefixes() {
        let set: LabelSet = "cidr:10.0.0.0/8,fqdn:a.com".parse().unwrap();
        assert!(set.has_source(Source::Fqdn));
        assert!(!set.has_source(Source::K8s));
        assert_eq!(
            set.cidr_prefixes().collect::<Vec<_>>(),
            vec!["10.0.0.0/8".parse::<IpNet>().unwrap()]
        );
    }
}
