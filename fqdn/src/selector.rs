//! Selectors of remote destinations: FQDN selectors (`matchName`, `matchPattern`) with
//! their validation and name matching, CIDR selectors, and which label sets each selects.
//!
//! Names are compared in canonical form: ASCII lowercase, without the trailing dot.
//! `matchPattern` follows Cilium's semantics: `*` matches zero or more of the characters
//! `[-a-z0-9_]` **inside one DNS label** (it never matches a dot), so `*.example.com`
//! matches `a.example.com` but neither `a.b.example.com` nor `example.com`, and
//! `api-*.example.com` matches `api-eu.example.com`. A lone `*` matches every name.
//! `**` (Cilium's newer multi-label wildcard) is refused. A pattern without `*` is the
//! same selector as the `matchName` of the same text.

use std::fmt;

use ipnet::IpNet;
use serde::{Serialize, Serializer};

use crate::labels::{Label, LabelSet};

/// The longest DNS name in text form.
const MAX_NAME_LEN: usize = 253;

/// Why a FQDN selector was refused; each names its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{field}: empty")]
    Empty { field: &'static str },
    #[error("{field}: {value:?} is longer than {MAX_NAME_LEN} characters")]
    TooLong { field: &'static str, value: String },
    #[error("{field}: {value:?} has {ch:?}; allowed are letters, digits, '-', '_', '.'{star}")]
    BadChar {
        field: &'static str,
        value: String,
        ch: char,
        star: &'static str,
    },
    #[error("{field}: {value:?} has an empty label")]
    EmptyLabel { field: &'static str, value: String },
    #[error("{field}: {value:?}: '**' is not supported ('*' matches within one label)")]
    DoubleStar { field: &'static str, value: String },
    #[error("exactly one of matchName and matchPattern must be set")]
    NotExactlyOne,
}

/// A FQDN selector (`toFQDNs` or `rules.dns` entry), kept as its canonical pattern.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FqdnSelector {
    pattern: String,
}

/// A name in canonical form: ASCII lowercase, without the trailing dot.
pub fn normalize_name(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

fn is_dns_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

fn validate(field: &'static str, value: &str, allow_star: bool) -> Result<String, SelectorError> {
    let canonical = normalize_name(value.trim());
    if canonical.is_empty() {
        return Err(SelectorError::Empty { field });
    }
    if canonical.len() > MAX_NAME_LEN {
        return Err(SelectorError::TooLong {
            field,
            value: value.into(),
        });
    }
    if let Some(ch) = canonical
        .chars()
        .find(|&c| !(is_dns_char(c) || c == '.' || (allow_star && c == '*')))
    {
        let star = if allow_star { ", '*'" } else { "" };
        return Err(SelectorError::BadChar {
            field,
            value: value.into(),
            ch,
            star,
        });
    }
    if canonical.split('.').any(str::is_empty) {
        return Err(SelectorError::EmptyLabel {
            field,
            value: value.into(),
        });
    }
    if canonical.contains("**") {
        return Err(SelectorError::DoubleStar {
            field,
            value: value.into(),
        });
    }
    Ok(canonical)
}

/// Whether one label matches one pattern label, `*` matching `[-a-z0-9_]*`.
fn label_matches(pattern: &[u8], label: &[u8]) -> bool {
    let (mut p, mut l) = (0, 0);
    // The last `*` seen and the label position it was tried at.
    let mut star: Option<(usize, usize)> = None;
    while l < label.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, l));
            p += 1;
        } else if p < pattern.len() && pattern[p] == label[l] {
            p += 1;
            l += 1;
        } else if let Some((sp, sl)) = star {
            // Let the star take one more character, if it may.
            if !is_dns_char(label[sl] as char) {
                return false;
            }
            star = Some((sp, sl + 1));
            p = sp + 1;
            l = sl + 1;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

impl FqdnSelector {
    /// `matchName`: one exact name (case-insensitive, trailing dot optional).
    pub fn match_name(name: &str) -> Result<FqdnSelector, SelectorError> {
        Ok(FqdnSelector {
            pattern: validate("matchName", name, false)?,
        })
    }

    /// `matchPattern`: a name with `*` wildcards (see the module's documentation).
    pub fn match_pattern(pattern: &str) -> Result<FqdnSelector, SelectorError> {
        Ok(FqdnSelector {
            pattern: validate("matchPattern", pattern, true)?,
        })
    }

    /// A selector from a policy's two optional fields: exactly one must be set.
    pub fn from_fields(
        match_name: Option<&str>,
        match_pattern: Option<&str>,
    ) -> Result<FqdnSelector, SelectorError> {
        match (match_name, match_pattern) {
            (Some(n), None) => FqdnSelector::match_name(n),
            (None, Some(p)) => FqdnSelector::match_pattern(p),
            _ => Err(SelectorError::NotExactlyOne),
        }
    }

    /// The canonical pattern (also the key of the selector's `fqdn:` label).
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// The `fqdn:` label this selector puts on the addresses of the names it selects.
    pub fn label(&self) -> Label {
        Label::fqdn(&self.pattern)
    }

    /// Whether the selector selects this name (any case, trailing dot optional).
    pub fn matches(&self, name: &str) -> bool {
        let name = normalize_name(name);
        if self.pattern == "*" {
            return !name.is_empty();
        }
        if !self.pattern.contains('*') {
            return self.pattern == name;
        }
        let mut pattern_labels = self.pattern.split('.');
        let mut name_labels = name.split('.');
        loop {
            match (pattern_labels.next(), name_labels.next()) {
                (None, None) => return true,
                (Some(p), Some(n)) if label_matches(p.as_bytes(), n.as_bytes()) => {}
                _ => return false,
            }
        }
    }
}

impl fmt::Display for FqdnSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

/// A CIDR selector (`toCIDR`, `toCIDRSet` without `except`): selects every label set
/// with a `cidr:` label inside its prefix. Label sets keep only their longest `cidr:`
/// label (see `ipcache`), and that one is inside every shorter prefix that contains the
/// address, so this selects exactly the identities of addresses inside the prefix that
/// some CIDR selector labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CidrSelector {
    prefix: IpNet,
}

impl CidrSelector {
    pub fn new(prefix: IpNet) -> CidrSelector {
        CidrSelector {
            prefix: prefix.trunc(),
        }
    }

    pub fn prefix(&self) -> IpNet {
        self.prefix
    }

    /// The `cidr:` label the selector puts on its prefix in the ipcache.
    pub fn label(&self) -> Label {
        Label::cidr(self.prefix)
    }
}

/// Any selector the selector cache keeps.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Selector {
    Fqdn(FqdnSelector),
    Cidr(CidrSelector),
}

impl Selector {
    /// Parses a selector's label text, as ACL rules carry it: `fqdn:<matchPattern>`
    /// (a pattern without `*` is a `matchName`) or `cidr:<prefix>`.
    pub fn parse(text: &str) -> Result<Selector, String> {
        if let Some(pattern) = text.strip_prefix("fqdn:") {
            return FqdnSelector::match_pattern(pattern)
                .map(Selector::Fqdn)
                .map_err(|e| e.to_string());
        }
        if let Some(prefix) = text.strip_prefix("cidr:") {
            return prefix
                .parse::<IpNet>()
                .map(|p| Selector::Cidr(CidrSelector::new(p)))
                .map_err(|_| format!("cidr: {prefix:?} is not an address prefix"));
        }
        Err(format!(
            "{text:?} is not a selector (fqdn:<matchPattern> or cidr:<prefix>)"
        ))
    }

    /// Whether the selector selects an identity with these labels.
    pub fn selects(&self, labels: &LabelSet) -> bool {
        match self {
            Selector::Fqdn(s) => labels.contains(&s.label()),
            Selector::Cidr(s) => labels.cidr_prefixes().any(|p| s.prefix.contains(&p)),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Fqdn(s) => write!(f, "fqdn:{s}"),
            Selector::Cidr(s) => write!(f, "cidr:{}", s.prefix),
        }
    }
}

impl Serialize for Selector {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl From<FqdnSelector> for Selector {
    fn from(s: FqdnSelector) -> Selector {
        Selector::Fqdn(s)
    }
}

impl From<CidrSelector> for Selector {
    fn from(s: CidrSelector) -> Selector {
        Selector::Cidr(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pat(p: &str) -> FqdnSelector {
        FqdnSelector::match_pattern(p).unwrap()
    }

    #[test]
    fn selector_text_round_trips_and_bad_text_is_named() {
        for text in [
            "fqdn:*.example.com",
            "fqdn:api.example.com",
            "cidr:10.0.0.0/8",
            "cidr:2001:db8::/32",
        ] {
            assert_eq!(Selector::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            Selector::parse("fqdn:API.Example.com.")
                .unwrap()
                .to_string(),
            "fqdn:api.example.com"
        );
        assert_eq!(
            Selector::parse("cidr:10.1.2.3/8").unwrap().to_string(),
            "cidr:10.0.0.0/8"
        );
        assert!(Selector::parse("fqdn:a..b")
            .unwrap_err()
            .contains("empty label"));
        assert!(Selector::parse("cidr:10.0.0.0/33")
            .unwrap_err()
            .starts_with("cidr:"));
        assert!(Selector::parse("k8s:app=web")
            .unwrap_err()
            .contains("not a selector"));
    }

    #[test]
    fn match_name_is_exact_case_insensitive_and_dot_normalized() {
        let s = FqdnSelector::match_name("WWW.Cilium.IO.").unwrap();
        assert_eq!(s.as_str(), "www.cilium.io");
        assert!(s.matches("www.cilium.io"));
        assert!(s.matches("www.CILIUM.io."));
        assert!(!s.matches("cilium.io"));
        assert!(!s.matches("a.www.cilium.io"));
        assert_eq!(s.label().to_string(), "fqdn:www.cilium.io");
    }

    #[test]
    fn star_matches_within_one_label() {
        let s = pat("*.example.com");
        assert!(s.matches("a.example.com"));
        assert!(s.matches("A-b_9.Example.com."));
        assert!(!s.matches("a.b.example.com"));
        assert!(!s.matches("example.com"));
        assert!(!s.matches("a.example.org"));
        let s = pat("api-*.example.com");
        assert!(s.matches("api-eu.example.com"));
        assert!(s.matches("api-.example.com"));
        assert!(!s.matches("api.example.com"));
        let s = pat("*cilium.io");
        assert!(s.matches("cilium.io"));
        assert!(s.matches("subcilium.io"));
        assert!(!s.matches("sub.cilium.io"));
        let s = pat("a*b*c.io");
        assert!(s.matches("abc.io"));
        assert!(s.matches("axxbyyc.io"));
        assert!(s.matches("abcbc.io"));
        assert!(!s.matches("axxbyy.io"));
    }

    #[test]
    fn lone_star_matches_every_name() {
        let s = pat("*");
        assert!(s.matches("com"));
        assert!(s.matches("a.b.c.example.com."));
    }

    #[test]
    fn pattern_without_star_equals_match_name() {
        assert_eq!(
            pat("Example.com."),
            FqdnSelector::match_name("example.com").unwrap()
        );
    }

    #[test]
    fn validation_names_the_field() {
        let e = FqdnSelector::match_name("*.a.com").unwrap_err();
        assert!(
            matches!(
                e,
                SelectorError::BadChar {
                    field: "matchName",
                    ch: '*',
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().starts_with("matchName: "));
        let e = FqdnSelector::match_pattern("a..com").unwrap_err();
        assert!(matches!(
            e,
            SelectorError::EmptyLabel {
                field: "matchPattern",
                ..
            }
        ));
        let e = FqdnSelector::match_pattern("**.a.com").unwrap_err();
        assert!(matches!(
            e,
            SelectorError::DoubleStar {
                field: "matchPattern",
                ..
            }
        ));
        let e = FqdnSelector::match_pattern("a b.com").unwrap_err();
        assert!(
            e.to_string().contains("matchPattern: \"a b.com\" has ' '"),
            "{e}"
        );
        assert!(matches!(
            FqdnSelector::match_name(" ."),
            Err(SelectorError::Empty { field: "matchName" })
        ));
        let long = format!("{}.com", "a".repeat(260));
        assert!(matches!(
            FqdnSelector::match_name(&long),
            Err(SelectorError::TooLong { .. })
        ));
        assert_eq!(
            FqdnSelector::from_fields(None, None),
            Err(SelectorError::NotExactlyOne)
        );
        assert_eq!(
            FqdnSelector::from_fields(Some("a.com"), Some("*.a.com")),
            Err(SelectorError::NotExactlyOne)
        );
        assert_eq!(
            FqdnSelector::from_fields(None, Some("*.a.com"))
                .unwrap()
                .as_str(),
            "*.a.com"
        );
    }

    #[test]
    fn cidr_selector_is_cidr_aware() {
        let s24 = Selector::Cidr(CidrSelector::new("52.58.254.9/24".parse().unwrap()));
        let s25 = Selector::Cidr(CidrSelector::new("52.58.254.0/25".parse().unwrap()));
        let in24: LabelSet = "cidr:52.58.254.0/24,reserved:world".parse().unwrap();
        let in25: LabelSet = "cidr:52.58.254.0/25,fqdn:*.cilium.io,reserved:world"
            .parse()
            .unwrap();
        let fqdn_only: LabelSet = "fqdn:*.cilium.io,reserved:world".parse().unwrap();
        assert!(s24.selects(&in24) && s24.selects(&in25));
        assert!(!s25.selects(&in24) && s25.selects(&in25));
        assert!(!s24.selects(&fqdn_only));
        let f = Selector::Fqdn(pat("*.cilium.io"));
        assert!(f.selects(&in25) && f.selects(&fqdn_only) && !f.selects(&in24));
        assert_eq!(s24.to_string(), "cidr:52.58.254.0/24");
        assert_eq!(f.to_string(), "fqdn:*.cilium.io");
    }

    /// The obvious recursive model of one label's match.
    fn model(p: &[u8], l: &[u8]) -> bool {
        match p.split_first() {
            None => l.is_empty(),
            Some((b'*', rest)) => {
                model(rest, l) || (!l.is_empty() && is_dns_char(l[0] as char) && model(p, &l[1..]))
            }
            Some((c, rest)) => l.first() == Some(c) && model(rest, &l[1..]),
        }
    }

    #[test]
    fn label_matching_agrees_with_a_recursive_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(53);
        let pick = |rng: &mut rand::rngs::StdRng, alphabet: &[u8], max: usize| -> Vec<u8> {
            let n = rng.gen_range(0..=max);
            (0..n)
                .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
                .collect()
        };
        let mut matched = 0;
        for _ in 0..20_000 {
            let p = pick(&mut rng, b"ab*", 6);
            let l = pick(&mut rng, b"ab+", 7);
            let expected = model(&p, &l);
            matched += usize::from(expected);
            assert_eq!(label_matches(&p, &l), expected, "{:?} vs {:?}", p, l);
        }
        assert!(
            matched > 1000,
            "the sample exercises matches too: {matched}"
        );
    }
}
