//! The ClassBench loader, the linear reference classifier, the compiled classifier
//! (`acl::Compiled`), the decision trees alone and the bit-vector one against `rte_acl`'s own results on the
//! shared ClassBench sets (`../shared/data/classbench/`, beside the repo).

use ferrule_dataplane::acl::classbench::{self, LoadError};
use ferrule_dataplane::acl::{
    BitVectorClassifier, Classifier, Compiled, DecisionTreeClassifier, FlowKey, LinearClassifier,
    NO_MATCH,
};
use std::path::PathBuf;

/// The shared ClassBench directory; fails loudly when it is missing.
fn data_dir() -> PathBuf {
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

/// Which classifier a check builds.
#[derive(Debug, Clone, Copy)]
enum Under {
    Linear,
    /// What the data path uses; `ipv4` is the IPv4 lookup it is expected to pick.
    Compiled {
        ipv4: &'static str,
    },
    /// The decision trees alone (`ferrule-aclbench --alg tree`).
    Tree,
    /// The aggregated bit vectors (`ferrule-aclbench --alg abv`).
    Abv,
}

/// Checks a classifier on `set` against `set_expected`, on the first `limit` trace
/// lines.
fn check_set(set: &str, limit: usize, under: Under) {
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

    let classifier: Box<dyn Classifier> = match under {
        Under::Linear => Box::new(LinearClassifier::new(rules)),
        Under::Compiled { ipv4 } => {
            let compiled = Compiled::new(&rules).unwrap();
            assert_eq!(compiled.ipv4_lookup(), ipv4, "{set}: IPv4 lookup");
            Box::new(compiled)
        }
        Under::Tree => Box::new(DecisionTreeClassifier::new(&rules).unwrap()),
        Under::Abv => Box::new(BitVectorClassifier::new(&rules).unwrap()),
    };
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

#[test]
fn acl1_1k_matches_rte_acl() {
    check_set("acl1_1k", usize::MAX, Under::Linear);
}

/// The whole trace: about 17 s in a debug build, under the 20 s budget that would call
/// for a shorter prefix of it.
#[test]
fn acl1_10k_matches_rte_acl() {
    check_set("acl1_10k", usize::MAX, Under::Linear);
}

#[test]
fn compiled_acl1_1k_matches_rte_acl() {
    check_set("acl1_1k", usize::MAX, Under::Compiled { ipv4: "rfc" });
}

#[test]
fn tree_acl1_1k_matches_rte_acl() {
    check_set("acl1_1k", usize::MAX, Under::Tree);
}

/// The whole trace, every line; the build and lookups take well under a second even
/// in a debug build.
#[test]
fn compiled_acl1_10k_matches_rte_acl() {
    check_set("acl1_10k", usize::MAX, Under::Compiled { ipv4: "rfc" });
}

#[test]
fn tree_acl1_10k_matches_rte_acl() {
    check_set("acl1_10k", usize::MAX, Under::Tree);
}

#[test]
fn abv_acl1_1k_matches_rte_acl() {
    check_set("acl1_1k", usize::MAX, Under::Abv);
}

#[test]
fn abv_acl1_10k_matches_rte_acl() {
    check_set("acl1_10k", usize::MAX, Under::Abv);
}

#[test]
fn load_errors_name_file_and_line() {
    let dir = tempdir();
    let path = dir.join("rules");
    std::fs::write(
        &path,
        "@1.2.3.4/32\t5.6.7.8/32\t0 : 65535\t80 : 80\t0x06/0xFF\n\
         @1.2.3.4/32\t5.6.7.8/32\t0 : 65535\t80 : 70000\t0x06/0xFF\n",
    )
    .unwrap();
    let err = classbench::load_rules(&path).unwrap_err();
    assert!(matches!(&err, LoadError::Parse { source, .. } if source.line == 2));
    let text = err.to_string();
    assert!(
        text.contains("rules:2:") && text.contains("dst_port"),
        "{text}"
    );

    std::fs::write(&path, "1 2 3 4 6\n1 2 3 4 256\n").unwrap();
    let err = classbench::load_trace(&path).unwrap_err();
    assert!(err.to_string().contains("rules:2: proto"), "{err}");

    let missing = classbench::load_rules(&dir.join("missing")).unwrap_err();
    assert!(matches!(missing, LoadError::Io { .. }));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A fresh scratch directory under the system temporary directory.
fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrule-acl-classbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
