//! Runs the built `ferrule-aclbench`: `--print-results` on the shared acl1_1k set equals
//! `rte_acl`'s results, and bad input exits 2 naming the file and line.

use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_ferrule-aclbench");

/// The shared ClassBench directory beside the repository; fails loudly when missing.
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

/// A fresh scratch directory for this test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrule-aclbench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn print_results_equals_rte_acl_on_acl1_1k() {
    let dir = data_dir();
    let output = Command::new(BIN)
        .arg("--rules")
        .arg(dir.join("acl1_1k"))
        .arg("--trace")
        .arg(dir.join("acl1_1k_trace"))
        .arg("--print-results")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("lookups/s") && stderr.contains("build time"),
        "{stderr}"
    );
    let expected = std::fs::read_to_string(dir.join("acl1_1k_expected")).unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(stdout.lines().count(), expected.lines().count());
    for (index, (got, want)) in stdout.lines().zip(expected.lines()).enumerate() {
        assert_eq!(got, want.trim(), "trace line {}", index + 1);
    }
}

#[test]
fn report_goes_to_stdout_without_print_results() {
    let dir = data_dir();
    let output = Command::new(BIN)
        .arg("--rules")
        .arg(dir.join("acl1_1k"))
        .arg("--trace")
        .arg(dir.join("acl1_1k_trace"))
        .args(["--iter", "2"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    for field in [
        "rules:         921",
        "lookups/s:",
        "ns/lookup:",
        "build time:",
        "memory:",
    ] {
        assert!(stdout.contains(field), "{field} missing in:\n{stdout}");
    }
}

#[test]
fn bad_rule_file_exits_2_naming_the_line() {
    let dir = scratch("bad-rules");
    let rules = dir.join("rules");
    std::fs::write(
        &rules,
        "@1.2.3.4/32\t5.6.7.8/32\t0 : 65535\t80 : 80\t0x06/0xFF\n\
         # a comment\n\
         @1.2.3.4/32\t5.6.7.300/32\t0 : 65535\t80 : 80\t0x06/0xFF\n",
    )
    .unwrap();
    let trace = dir.join("trace");
    std::fs::write(&trace, "1 2 3 4 6\n").unwrap();
    let output = Command::new(BIN)
        .arg("--rules")
        .arg(&rules)
        .arg("--trace")
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{}:3: dst: bad CIDR", rules.display())),
        "{stderr}"
    );

    std::fs::write(&trace, "1 2 3 4 6\n1 2 3 4\n").unwrap();
    std::fs::write(
        &rules,
        "@1.2.3.4/32\t5.6.7.8/32\t0 : 65535\t80 : 80\t0x06/0xFF\n",
    )
    .unwrap();
    let output = Command::new(BIN)
        .arg("--rules")
        .arg(&rules)
        .arg("--trace")
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{}:2:", trace.display())),
        "{stderr}"
    );

    let output = Command::new(BIN)
        .arg("--rules")
        .arg(dir.join("missing"))
        .arg("--trace")
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    std::fs::remove_dir_all(dir).unwrap();
}
