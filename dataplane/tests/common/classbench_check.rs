//! Checking a classifier against `rte_acl`'s own results on the shared ClassBench sets
//! (`../shared/data/classbench/`, beside the repo). Shared by `acl_classbench.rs` and
//! the bit-vector classifier's tests in `ferrule-perf`.

#![allow(dead_code)]

use ferrule_dataplane::acl::classbench;
use ferrule_dataplane::acl::{Classifier, FlowKey, Rule, NO_MATCH};
use std::path::PathBuf;

/// The shared ClassBench directory; fails loudly when it is missing.
pub fn data_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/classbench"
    ));
    assert!(
        dir.is_dir(),
        "ClassBench data missing: expected {} (the shared/ directory beside the repository)",
        dir.display()
    );
    dir
}

/// Checks a classifier on `set` against `set_expected`, on the first `limit` trace
/// lines.
pub fn check_set(
    set: &str,
    limit: usize,
    under: &dyn std::fmt::Debug,
    build: impl FnOnce(Vec<Rule>) -> Box<dyn Classifier>,
) {
    let dir = data_dir();
    let rules = classbench::load_rules(&dir.join(set)).unwrap();
    let trace = classbench::load_trace(&dir.join(format!("{set}_trace"))).unwrap();
    let expected_text = std::fs::read_to_string(dir.join(format!("{set}_expected"))).unwrap();
    let expected: Vec<u32> = expected_text
        .lines()
        .map(|line| line.trim().parse().unwrap())
        .collect();
    assert_eq!(
        trace.len(),
        expected.len(),
        "{set}: trace and expected lengths"
    );
    let trace: &[FlowKey] = &trace[..limit.min(trace.len())];

    let classifier = build(rules);
    let mut out = vec![0u32; trace.len()];
    for (keys, out) in trace.chunks(32).zip(out.chunks_mut(32)) {
        classifier.classify_batch(keys, out);
    }
    let mut matched = 0;
    for (index, (got, want)) in out.iter().zip(&expected).enumerate() {
        assert_eq!(
            got,
            want,
            "{set} ({under:?}): trace line {} ({:?})",
            index + 1,
            trace[index]
        );
        matched += usize::from(*got != NO_MATCH);
    }
    assert!(matched > 0, "{set}: nothing matched");
}
