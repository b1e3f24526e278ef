//! Kubernetes label selectors: `matchLabels` and `matchExpressions` (`In`, `NotIn`,
//! `Exists`, `DoesNotExist`), validated once and matched against a label map.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// Labels of a pod or namespace.
pub type Labels = BTreeMap<String, String>;

/// One `matchExpressions` requirement.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Requirement {
    /// The label is present with one of the values.
    In(String, Vec<String>),
    /// The label is absent, or present with none of the values.
    NotIn(String, Vec<String>),
    /// The label is present.
    Exists(String),
    /// The label is absent.
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &Labels) -> bool {
        match self {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => !labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A validated label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    /// `matchLabels`: every pair must be present.
    pub labels: Vec<(String, String)>,
    /// `matchExpressions`: every requirement must hold.
    pub requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector that matches every object.
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every pair and requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| labels.get(k).is_some_and(|l| l == v))
            && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Validates a Kubernetes selector; errors are `(field path below the selector,
    /// detail)`.
    pub fn parse(s: &LabelSelector) -> Result<Selector, (String, String)> {
        let labels = s
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut requirements = Vec::new();
        for (i, e) in s.match_expressions.iter().flatten().enumerate() {
            let path = |f: &str| format!("matchExpressions[{i}].{f}");
            if e.key.is_empty() {
                return Err((path("key"), "required".into()));
            }
            let values = e.values.clone().unwrap_or_default();
            let need_values = |r: Requirement| {
                if values.is_empty() {
                    Err((
                        path("values"),
                        format!("operator {} needs at least one value", e.operator),
                    ))
                } else {
                    Ok(r)
                }
            };
            let no_values = |r: Requirement| {
                if values.is_empty() {
                    Ok(r)
                } else {
                    Err((
                        path("values"),
                        format!("operator {} takes no values", e.operator),
                    ))
                }
            };
            requirements.push(match e.operator.as_str() {
                "In" => need_values(Requirement::In(e.key.clone(), values.clone()))?,
                "NotIn" => need_values(Requirement::NotIn(e.key.clone(), values.clone()))?,
                "Exists" => no_values(Requirement::Exists(e.key.clone()))?,
                "DoesNotExist" => no_values(Requirement::DoesNotExist(e.key.clone()))?,
                other => {
                    return Err((
                        path("operator"),
                        format!("{other:?}: expected In, NotIn, Exists or DoesNotExist"),
                    ))
                }
            });
        }
        Ok(Selector {
            labels,
            requirements,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn operators_and_match_labels_combine_with_and() {
        let s = Selector::parse(&LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![
                expr("tier", "In", &["a", "b"]),
                expr("env", "NotIn", &["prod"]),
                expr("team", "Exists", &[]),
                expr("legacy", "DoesNotExist", &[]),
            ]),
        })
        .unwrap();
        let ok = labels(&[("app", "web"), ("tier", "a"), ("team", "x")]);
        assert!(s.matches(&ok));
        let mut l = ok.clone();
        l.insert("env".into(), "prod".into());
        assert!(!s.matches(&l), "NotIn");
        let mut l = ok.clone();
        l.insert("env".into(), "dev".into());
        assert!(s.matches(&l), "NotIn other value");
        let mut l = ok.clone();
        l.insert("legacy".into(), "".into());
        assert!(!s.matches(&l), "DoesNotExist");
        let mut l = ok.clone();
        l.remove("team");
        assert!(!s.matches(&l), "Exists");
        let mut l = ok.clone();
        l.insert("tier".into(), "c".into());
        assert!(!s.matches(&l), "In");
        let mut l = ok;
        l.insert("app".into(), "db".into());
        assert!(!s.matches(&l), "matchLabels");
        assert!(Selector::everything().matches(&Labels::new()));
    }

    #[test]
    fn bad_expressions_name_the_field() {
        let bad = |e| {
            Selector::parse(&LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![e]),
            })
            .unwrap_err()
        };
        assert_eq!(
            bad(expr("a", "Equals", &["x"])).0,
            "matchExpressions[0].operator"
        );
        assert_eq!(bad(expr("a", "In", &[])).0, "matchExpressions[0].values");
        assert_eq!(
            bad(expr("a", "Exists", &["x"])).0,
            "matchExpressions[0].values"
        );
        assert_eq!(bad(expr("", "Exists", &[])).0, "matchExpressions[0].key");
    }
}
