//! The bit-vector classifier (`ferrule_perf::bitvector`, `ferrule-aclbench --alg abv`)
//! against the linear oracle — random IPv4, IPv6 and mixed rule sets with keys at rule
//! boundaries, batches against single keys, edge cases — and against `rte_acl`'s own
//! results on the shared ClassBench sets. The rule and key generators and the
//! ClassBench check are the dataplane's tests' own.

#[path = "../../dataplane/tests/common/acl_gen.rs"]
mod acl_gen;
#[path = "../../dataplane/tests/common/classbench_check.rs"]
mod classbench_check;

use acl_gen::{boundary_keys, random_keys, random_raw, rule, Families};
use ferrule_dataplane::acl::{Classifier, FlowKey, LinearClassifier, Rule};
use ferrule_perf::bitvector::BitVectorClassifier;
use proptest::prelude::*;

/// Classifies `keys` with the bit vectors and the oracle: batches of several odd sizes
/// and single keys must all agree.
fn check(rules: Vec<Rule>, keys: &[FlowKey]) -> Result<(), TestCaseError> {
    let abv = BitVectorClassifier::new(&rules).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let linear = LinearClassifier::new(rules);
    let mut want = vec![0u32; keys.len()];
    linear.classify_batch(keys, &mut want);
    for batch in [1, 7, 32, 33, 37] {
        let mut got = vec![0u32; keys.len()];
        for (keys, out) in keys.chunks(batch).zip(got.chunks_mut(batch)) {
            abv.classify_batch(keys, out);
        }
        for (index, key) in keys.iter().enumerate() {
            prop_assert_eq!(
                got[index],
                want[index],
                "{} batch {} key {:?}",
                "abv",
                batch,
                key
            );
        }
    }
    for key in keys {
        prop_assert_eq!(
            abv.classify(key),
            linear.classify(key),
            "abv single key {:?}",
            key
        );
    }
    Ok(())
}

acl_gen::linear_oracle_properties!();

#[test]
fn wide_and_exact_rules_at_the_edges() {
    let (rules, cases) = acl_gen::edge_rules();
    let abv = BitVectorClassifier::new(&rules).unwrap();
    for (key, want) in cases {
        assert_eq!(abv.classify(&key), want, "abv {key:?}");
    }
}

fn abv(rules: Vec<Rule>) -> Box<dyn Classifier> {
    Box::new(BitVectorClassifier::new(&rules).unwrap())
}

#[test]
fn abv_acl1_1k_matches_rte_acl() {
    classbench_check::check_set("acl1_1k", usize::MAX, &"Abv", abv);
}

#[test]
fn abv_acl1_10k_matches_rte_acl() {
    classbench_check::check_set("acl1_10k", usize::MAX, &"Abv", abv);
}
