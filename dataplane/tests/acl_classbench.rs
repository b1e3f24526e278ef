//! The ClassBench loader, the linear reference classifier, the compiled classifier
//! (`acl::Compiled`) and the decision trees alone against `rte_acl`'s own results on the
//! shared ClassBench sets (`../shared/data/classbench/`, beside the repo); the
//! bit-vector classifier's moved with it to `ferrule-perf`'s tests.

#[path = "common/classbench_check.rs"]
mod classbench_check;

use ferrule_dataplane::acl::classbench::{self, LoadError};
use ferrule_dataplane::acl::{Compiled, DecisionTreeClassifier, LinearClassifier};
use std::path::PathBuf;

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
}

/// Checks a classifier on `set` against `set_expected`, on the first `limit` trace
/// lines.
fn check_set(set: &str, limit: usize, under: Under) {
    classbench_check::check_set(set, limit, &under, |rules| match under {
        Under::Linear => Box::new(LinearClassifier::new(rules)),
        Under::Compiled { ipv4 } => {
            let compiled = Compiled::new(&rules).unwrap();
            assert_eq!(compiled.ipv4_lookup(), ipv4, "{set}: IPv4 lookup");
            Box::new(compiled)
        }
        Under::Tree => Box::new(DecisionTreeClassifier::new(&rules).unwrap()),
    });
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
