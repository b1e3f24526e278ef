//! End-to-end ACLs: kernel network stacks in namespaces talk through ferruled while
//! `ferrulectl acl apply` installs, replaces and removes tables. A deny rule must stop
//! traffic between two pod ports and show its hits in `acl dump`; a refused apply must
//! leave the rules in force; removing the tables must restore traffic.

use ferrule_e2e::topology::*;
use serde_json::Value;
use std::io::Write;

const DENY_PA_TO_PB: &str = r#"
tables:
  - name: pod-b-egress
    rules:                       # first match wins
      - {action: deny, proto: icmp, src: 10.1.0.2/32, origin: "e2e/deny-pa"}
      - {action: deny, proto: icmpv6, src: "fd00:1::2/128", origin: "e2e/deny-pa-v6"}
      - {action: permit}
  - name: uplink-global
    rules:
      - {action: deny, proto: icmp, dst: 192.0.2.1/32, origin: "e2e/no-router"}
      - {action: permit}
attach:
  - {port: pod-b, direction: egress, table: pod-b-egress}
global: uplink-global
"#;

fn write_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("create");
    f.write_all(text.as_bytes()).expect("write");
    path.to_string_lossy().into_owned()
}

fn rule<'a>(dump: &'a Value, table: &str, origin: &str) -> &'a Value {
    dump["tables"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == table))
        .and_then(|t| t["rules"].as_array())
        .and_then(|r| r.iter().find(|r| r["origin"] == origin))
        .unwrap_or_else(|| panic!("no rule {origin} in {table}: {dump:#}"))
}

#[test]
fn a_deny_rule_stops_traffic_between_pods_and_the_dump_shows_the_hit() {
    let topo = Topology::up("a");
    let mut d = topo.ferruled("acl");
    let files = tempfile::tempdir().expect("tempdir");
    let ok = |o: &std::process::Output, what: &str| {
        assert!(o.status.success(), "{what}:\n{}", text(o));
    };
    let fails = |o: &std::process::Output, what: &str| {
        assert!(!o.status.success(), "{what} should fail:\n{}", text(o));
    };

    // Without ACLs the pods and the router are reachable.
    ok(&ping(&topo, "pa", &["10.1.0.3"]), "pa -> pb before");
    ok(&ping(&topo, "pa", &["192.0.2.1"]), "pa -> router before");

    let policy = write_file(files.path(), "deny.yaml", DENY_PA_TO_PB);
    let o = d.ctl(&["acl", "apply", "-f", &policy]);
    ok(&o, "acl apply");
    assert!(
        text(&o).contains("added pod-b-egress, uplink-global"),
        "{}",
        text(&o)
    );

    fails(
        &ping(&topo, "pa", &["10.1.0.3"]),
        "pa -> pb with the deny rule",
    );
    fails(
        &ping(&topo, "pa", &["-6", "fd00:1::3"]),
        "pa -> pb over IPv6",
    );
    fails(
        &ping(&topo, "pa", &["192.0.2.1"]),
        "pa -> router with the global deny",
    );
    // Neither pod-b's ingress nor pod-a's egress has a table: pb still reaches the
    // gateway, and the router's other addresses are still permitted by the global table.
    ok(&ping(&topo, "pb", &["169.254.1.1"]), "pb -> gateway");

    let dump = d.ctl_json(&["acl", "dump"]);
    let deny = rule(&dump, "pod-b-egress", "e2e/deny-pa");
    assert_eq!(deny["hits"]["packets"], 2, "{dump:#}");
    assert_eq!(
        deny["hits"]["bytes"],
        2 * 98,
        "two 98-byte echo requests: {dump:#}"
    );
    assert_eq!(
        rule(&dump, "pod-b-egress", "e2e/deny-pa-v6")["hits"]["packets"],
        2
    );
    assert_eq!(
        rule(&dump, "uplink-global", "e2e/no-router")["hits"]["packets"],
        2
    );
    let attached = &dump["tables"][0]["attached"][0];
    assert_eq!(
        (attached["port"].as_str(), attached["direction"].as_str()),
        (Some("pod-b"), Some("egress"))
    );
    assert_eq!(dump["tables"][1]["global"], true);
    let human = d.ctl(&["acl", "dump", "--port", "pod-b"]);
    ok(&human, "acl dump --port pod-b");
    let human = text(&human);
    assert!(
        human.starts_with("acl pod-b-egress: 3 rules, applied pod-b egress"),
        "{human}"
    );
    assert!(
        human.contains("e2e/deny-pa") && !human.contains("uplink-global"),
        "{human}"
    );
    let stats = d.ctl_json(&["stats"]);
    assert!(drops(&stats, "acl-deny") >= 6, "{stats:#}");

    // The trace names the table, the rule and the action.
    let trace = d.ctl(&[
        "trace",
        "--in-port",
        "pod-a",
        "--proto",
        "icmp",
        "--src",
        "10.1.0.2",
        "--dst",
        "10.1.0.3",
    ]);
    let trace = text(&trace);
    assert!(
        trace.contains("egress table pod-b-egress rule 0: deny (origin e2e/deny-pa)"),
        "{trace}"
    );
    assert!(trace.contains("verdict: drop acl-deny"), "{trace}");

    // A refused apply names the table, rule and field, and changes nothing.
    let bad = DENY_PA_TO_PB.replace(
        "{action: permit}\n  - name: uplink",
        "{action: permit, proto: udp, dst_port: 70000}\n  - name: uplink",
    );
    let bad = write_file(files.path(), "bad.yaml", &bad);
    let o = d.ctl(&["acl", "apply", "-f", &bad]);
    fails(&o, "apply with port 70000");
    assert!(
        text(&o).contains("tables[0].rules[2].dst_port")
            && text(&o).contains("table \"pod-b-egress\" rule 2"),
        "{}",
        text(&o)
    );
    // A port that does not exist yet is not an error (its attachment waits: a dry
    // run shows it); a malformed pod reference is, and changes nothing.
    let unknown = write_file(
        files.path(),
        "unknown.json",
        r#"{"tables": [{"name": "t"}], "attach": [{"port": "pod-z", "direction": "egress", "table": "t"}]}"#,
    );
    let o = d.ctl(&["acl", "apply", "--dry-run", "-f", &unknown]);
    ok(&o, "dry run naming a port that does not exist yet");
    assert!(
        text(&o).contains("1 attachments wait for their port"),
        "{}",
        text(&o)
    );
    let bad_pod = write_file(
        files.path(),
        "bad-pod.json",
        r#"{"tables": [{"name": "t"}], "attach": [{"pod": "Not/A-Pod", "direction": "egress", "table": "t"}]}"#,
    );
    let o = d.ctl(&["acl", "apply", "-f", &bad_pod]);
    fails(&o, "apply to a malformed pod reference");
    assert!(
        text(&o).contains("attach[0].pod") && text(&o).contains("Not/A-Pod"),
        "{}",
        text(&o)
    );
    fails(
        &ping(&topo, "pa", &["10.1.0.3"]),
        "the deny rule is still in force",
    );
    let after = d.ctl_json(&["acl", "dump"]);
    assert_eq!(
        rule(&after, "pod-b-egress", "e2e/deny-pa")["hits"]["packets"],
        4,
        "counted on: {after:#}"
    );

    // Re-applying with one rule changed keeps the unchanged rules' counters.
    let changed = DENY_PA_TO_PB.replace("e2e/no-router", "e2e/no-router-2");
    let changed = write_file(files.path(), "changed.yaml", &changed);
    let o = d.ctl(&["acl", "apply", "-f", &changed]);
    ok(&o, "apply a changed global table");
    assert!(
        text(&o).contains("changed uplink-global") && text(&o).contains("unchanged 1"),
        "{}",
        text(&o)
    );
    let after = d.ctl_json(&["acl", "dump"]);
    assert_eq!(
        rule(&after, "pod-b-egress", "e2e/deny-pa")["hits"]["packets"],
        4
    );
    assert_eq!(
        rule(&after, "uplink-global", "e2e/no-router-2")["hits"]["packets"],
        0
    );
    ok(&d.ctl(&["acl", "clear-counters"]), "clear-counters");
    let cleared = d.ctl_json(&["acl", "dump"]);
    assert_eq!(
        rule(&cleared, "pod-b-egress", "e2e/deny-pa")["hits"]["packets"],
        0
    );

    // An empty state removes every table: traffic flows again.
    let empty = write_file(files.path(), "empty.yaml", "tables: []\n");
    let o = d.ctl(&["acl", "apply", "-f", &empty]);
    ok(&o, "apply nothing");
    assert!(
        text(&o).contains("removed pod-b-egress, uplink-global"),
        "{}",
        text(&o)
    );
    ok(&ping(&topo, "pa", &["10.1.0.3"]), "pa -> pb after removal");
    ok(
        &ping(&topo, "pa", &["192.0.2.1"]),
        "pa -> router after removal",
    );
    assert_eq!(d.ctl(&["acl", "dump"]).stdout, b"no ACL tables\n");
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}
