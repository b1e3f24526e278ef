//! The registry: immutability, one primary network per namespace, the namespace
//! label, deletion while in use, ids and masquerade addresses, conditions.

use ferrule_networks::manifest::{parse_text, Object};
use ferrule_networks::registry::{
    Kind, NetworkRef, Registry, CONDITION_ALLOCATED, CONDITION_CREATED, LABEL_IMMUTABLE,
    REASON_LABEL_MISSING, REASON_NAMESPACE_NOT_FOUND, REASON_PRIMARY_EXISTS,
};
use ferrule_networks::Settings;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

fn objects(text: &str) -> Vec<Object> {
    parse_text(text).unwrap()
}

fn ns(name: &str, labelled: bool) -> String {
    let mut labels = format!("kubernetes.io/metadata.name: {name}");
    if labelled {
        labels.push_str(", k8s.ovn.org/primary-user-defined-network: \"\"");
    }
    format!("---\nkind: Namespace\nmetadata: {{name: {name}, labels: {{{labels}}}}}\n")
}

fn udn(namespace: &str, name: &str, role: &str, subnet: &str) -> String {
    format!(
        "---\nkind: UserDefinedNetwork\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec: {{topology: Layer2, role: {role}, subnets: [{subnet}]}}\n"
    )
}

fn cudn(name: &str, namespaces: &[&str], subnet: &str) -> String {
    format!(
        "---\nkind: ClusterUserDefinedNetwork\nmetadata: {{name: {name}}}\nspec:\n  namespaceSelector:\n    matchExpressions: [{{key: kubernetes.io/metadata.name, operator: In, values: [{}]}}]\n  network: {{topology: Layer3, layer3: {{role: Primary, subnets: [{{cidr: {subnet}}}]}}}}\n",
        namespaces.join(", ")
    )
}

fn none(_: &str) -> usize {
    0
}

#[test]
fn specs_are_immutable_and_reapplying_is_a_noop() {
    let mut r = Registry::new(Settings::default());
    let first = ns("demo", true) + &udn("demo", "db", "Primary", "10.0.0.0/24");
    let applied = r.apply(&objects(&first)).unwrap();
    assert_eq!(
        applied.created,
        vec![NetworkRef {
            name: "demo.db".into(),
            id: 1
        }]
    );
    let before = r.status();
    let applied = r.apply(&objects(&first)).unwrap();
    assert!(applied.created.is_empty());
    assert_eq!(applied.unchanged, vec!["demo.db".to_string()]);
    assert_eq!(r.status(), before);

    let changed = udn("demo", "db", "Primary", "10.0.1.0/24");
    let e = r.apply(&objects(&changed)).unwrap_err();
    assert_eq!(
        (e.object.as_str(), e.field.as_str(), e.message.as_str()),
        ("UserDefinedNetwork demo/db", "spec", "Spec is immutable")
    );
    assert_eq!(r.status(), before);

    // The same network in the other shape is the same spec.
    let nested = "kind: UserDefinedNetwork\nmetadata: {name: db, namespace: demo}\nspec: {topology: Layer2, layer2: {role: Primary, subnets: [10.0.0.0/24]}}\n";
    assert_eq!(
        r.apply(&objects(nested)).unwrap().unchanged,
        vec!["demo.db".to_string()]
    );

    // A CUDN's selector may change; its network may not.
    r.apply(&objects(
        &(ns("a", true) + &ns("b", true) + &cudn("net", &["a"], "10.5.0.0/16")),
    ))
    .unwrap();
    let applied = r
        .apply(&objects(&cudn("net", &["b"], "10.5.0.0/16")))
        .unwrap();
    assert_eq!(applied.reselected, vec!["cluster.udn.net".to_string()]);
    let st = r
        .status()
        .into_iter()
        .find(|s| s.name == "cluster.udn.net")
        .unwrap();
    assert_eq!(st.active_namespaces, vec!["b".to_string()]);
    let e = r
        .apply(&objects(&cudn("net", &["b"], "10.6.0.0/16")))
        .unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.message.as_str()),
        ("spec.network.layer3", "Spec is immutable")
    );
}

#[test]
fn apply_is_all_or_nothing() {
    let mut r = Registry::new(Settings::default());
    let text = ns("demo", true)
        + &udn("demo", "good", "Secondary", "10.0.0.0/24")
        + &udn("demo", "bad", "Secondary", "10.0.0.0/33");
    let e = r.apply(&objects(&text)).unwrap_err();
    assert_eq!(e.field, "spec.subnets[0]");
    assert!(r.status().is_empty());
    assert!(r.namespace("demo").is_none());
    // The ids of a refused batch were never handed out.
    let applied = r
        .apply(&objects(
            &(ns("demo", true) + &udn("demo", "good", "Secondary", "10.0.0.0/24")),
        ))
        .unwrap();
    assert_eq!(applied.created[0].id, 1);
}

#[test]
fn one_primary_network_per_namespace_udn_and_udn() {
    let mut r = Registry::new(Settings::default());
    let text = ns("a", true)
        + &udn("a", "first", "Primary", "10.0.0.0/24")
        + &udn("a", "second", "Primary", "10.1.0.0/24")
        + &udn("a", "extra", "Secondary", "10.2.0.0/24");
    r.apply(&objects(&text)).unwrap();
    let st = r.status();
    assert_eq!(st[0].name, "a.first");
    assert_eq!(st[0].conditions[0].status, "True");
    assert_eq!(st[1].name, "a.second");
    let c = &st[1].conditions[0];
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        (CONDITION_CREATED, "False", REASON_PRIMARY_EXISTS)
    );
    assert_eq!(
        c.message,
        r#"primary network already exist in namespace "a": "a.first""#
    );
    assert!(st[1].active_namespaces.is_empty());
    // A secondary network doesn't compete.
    assert_eq!(st[2].active_namespaces, vec!["a".to_string()]);
    assert_eq!(r.primary_network("a").unwrap().unwrap().name, "a.first");
    let ready: Vec<String> = r.networks().into_iter().map(|n| n.name).collect();
    assert_eq!(ready, vec!["a.first".to_string(), "a.extra".to_string()]);
}

#[test]
fn cudn_net2_is_not_ready_where_net1_was_first() {
    let mut r = Registry::new(Settings::default());
    let mut text = String::new();
    for n in ["a", "b", "c", "d", "e"] {
        text += &ns(n, true);
    }
    text += &cudn("net1", &["a", "b", "c"], "10.10.0.0/16");
    text += &cudn("net2", &["c", "d", "e"], "10.20.0.0/16");
    r.apply(&objects(&text)).unwrap();
    let st = r.status();
    assert_eq!(st[0].name, "cluster.udn.net1");
    assert_eq!(st[0].active_namespaces, ["a", "b", "c"]);
    assert_eq!(st[0].conditions[0].status, "True");
    assert_eq!(
        st[0].conditions[0].message,
        r#"network "cluster.udn.net1" has been created in following namespaces: [a, b, c]"#
    );
    assert_eq!(st[1].name, "cluster.udn.net2");
    assert_eq!(st[1].active_namespaces, ["d", "e"]);
    let c = &st[1].conditions[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", REASON_PRIMARY_EXISTS)
    );
    assert_eq!(
        c.message,
        r#"primary network already exist in namespace "c": "cluster.udn.net1""#
    );
    assert_eq!(
        r.primary_network("c").unwrap().unwrap().name,
        "cluster.udn.net1"
    );
    assert_eq!(
        r.primary_network("d").unwrap().unwrap().name,
        "cluster.udn.net2"
    );
    // net2 is ready (in d and e).
    let nets = r.networks();
    assert_eq!(nets.len(), 2);
    assert_eq!(nets[1].namespaces, ["d", "e"]);

    // A UDN in c comes after both.
    r.apply(&objects(&udn("c", "mine", "Primary", "10.30.0.0/24")))
        .unwrap();
    let st = r.status();
    assert_eq!(
        st[2].conditions[0].message,
        r#"primary network already exist in namespace "c": "cluster.udn.net1""#
    );

    // The JSON shape of a status.
    let json = serde_json::to_value(&st[1]).unwrap();
    assert_eq!(json["activeNamespaces"], serde_json::json!(["d", "e"]));
    assert_eq!(json["conditions"][0]["type"], "NetworkCreated");
    assert!(json["conditions"][0]["lastTransitionTime"].is_string());
    assert_eq!(json["kind"], "ClusterUserDefinedNetwork");
}

#[test]
fn primary_network_needs_the_namespace_label() {
    let mut r = Registry::new(Settings::default());
    let text = ns("plain", false)
        + &udn("plain", "p", "Primary", "10.0.0.0/24")
        + &udn("plain", "s", "Secondary", "10.1.0.0/24")
        + &ns("labelled", true)
        + &udn("ghost", "g", "Primary", "10.2.0.0/24");
    r.apply(&objects(&text)).unwrap();
    let st = r.status();
    let c = &st[0].conditions[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", REASON_LABEL_MISSING)
    );
    assert!(
        c.message
            .contains("k8s.ovn.org/primary-user-defined-network"),
        "{}",
        c.message
    );
    // Pods of an unlabelled namespace attach to the default network.
    assert_eq!(r.primary_network("plain"), Ok(None));
    // A secondary network is fine without the label.
    assert_eq!(st[1].conditions[0].status, "True");
    // A labelled namespace without its network: pods must fail.
    let e = r.primary_network("labelled").unwrap_err();
    assert!(e.contains("pod creation fails until one is created"), "{e}");
    // Unknown namespace of a UDN.
    assert_eq!(st[2].conditions[0].reason, REASON_NAMESPACE_NOT_FOUND);
    assert_eq!(r.primary_network("nowhere"), Ok(None));
    let ready: Vec<String> = r.networks().into_iter().map(|n| n.name).collect();
    assert_eq!(ready, vec!["plain.s".to_string()]);
}

#[test]
fn the_label_cannot_change_once_a_network_selects_the_namespace() {
    let mut r = Registry::new(Settings::default());
    r.apply(&objects(
        &(ns("a", true) + &ns("free", false) + &cudn("net", &["a"], "10.5.0.0/16")),
    ))
    .unwrap();
    let e = r.apply(&objects(&ns("a", false))).unwrap_err();
    assert_eq!(e.object, "Namespace a");
    assert!(e.message.starts_with(LABEL_IMMUTABLE), "{}", e.message);
    // Other labels may change; a namespace no network targets may gain the label.
    let relabelled = "kind: Namespace\nmetadata: {name: a, labels: {kubernetes.io/metadata.name: a, k8s.ovn.org/primary-user-defined-network: '', team: x}}\n";
    r.apply(&objects(relabelled)).unwrap();
    assert_eq!(r.namespace("a").unwrap()["team"], "x");
    r.apply(&objects(&ns("free", true))).unwrap();
    r.apply(&objects(&ns("free", false))).unwrap();
    r.apply(&objects(&cudn("net2", &["free"], "10.6.0.0/16")))
        .unwrap();
    let e = r.apply(&objects(&ns("free", true))).unwrap_err();
    assert!(e.message.starts_with(LABEL_IMMUTABLE));
}

#[test]
fn delete_is_refused_while_in_use() {
    let mut r = Registry::new(Settings::default());
    r.apply(&objects(
        &(ns("demo", true)
            + &udn("demo", "db", "Primary", "10.0.0.0/24")
            + &cudn("c", &["x"], "10.5.0.0/16")),
    ))
    .unwrap();
    let in_use = |n: &str| if n == "demo.db" { 3 } else { 0 };
    let e = r
        .delete(Kind::UserDefinedNetwork, "demo/db", &in_use)
        .unwrap_err();
    assert_eq!(e.object, "UserDefinedNetwork demo/db");
    assert_eq!(
        e.message,
        r#"network "demo.db" cannot be deleted because it is in use by 3 pods"#
    );
    assert_eq!(r.status().len(), 2);
    r.delete(Kind::UserDefinedNetwork, "demo/db", &none)
        .unwrap();
    assert_eq!(r.status().len(), 1);
    assert_eq!(
        r.delete(Kind::UserDefinedNetwork, "demo/db", &none)
            .unwrap_err()
            .message,
        "not found"
    );
    // A CUDN by its name; a kind mismatch is not found.
    assert!(r
        .delete(Kind::UserDefinedNetwork, "cluster/c", &none)
        .is_err());
    r.delete(Kind::ClusterUserDefinedNetwork, "c", &none)
        .unwrap();
    r.delete(Kind::Namespace, "demo", &none).unwrap();
    assert!(r.status().is_empty());
    assert_eq!("cudn".parse::<Kind>(), Ok(Kind::ClusterUserDefinedNetwork));
}

#[test]
fn ids_are_never_reused_and_masquerade_pairs_are_distinct() {
    let mut r = Registry::new(Settings::default());
    let mut text = ns("a", false);
    for i in 0..5 {
        text += &udn(
            "a",
            &format!("n{i}"),
            "Secondary",
            &format!("10.{i}.0.0/24"),
        );
    }
    r.apply(&objects(&text)).unwrap();
    let ids = r.network_ids();
    assert_eq!(
        ids.iter().map(|(r, _)| r.id).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    let first = ids[0].1;
    assert_eq!(
        first.v4,
        [
            "169.254.169.8".parse::<std::net::Ipv4Addr>().unwrap(),
            "169.254.169.9".parse().unwrap()
        ]
    );
    assert_eq!(
        first.v6,
        [
            "fd69::8".parse::<std::net::Ipv6Addr>().unwrap(),
            "fd69::9".parse().unwrap()
        ]
    );
    let mut seen = BTreeSet::new();
    for (_, m) in &ids {
        for a in m.v4 {
            assert!(seen.insert(IpAddr::V4(a)), "{a} twice");
            assert_ne!(a, "169.254.169.1".parse::<std::net::Ipv4Addr>().unwrap());
        }
        for a in m.v6 {
            assert!(seen.insert(IpAddr::V6(a)), "{a} twice");
        }
    }
    r.delete(Kind::UserDefinedNetwork, "a/n0", &none).unwrap();
    r.delete(Kind::UserDefinedNetwork, "a/n3", &none).unwrap();
    let applied = r
        .apply(&objects(
            &(udn("a", "n0", "Secondary", "10.0.0.0/24")
                + &udn("a", "n9", "Secondary", "10.9.0.0/24")),
        ))
        .unwrap();
    assert_eq!(
        applied.created.iter().map(|c| c.id).collect::<Vec<_>>(),
        [6, 7]
    );
    let ids = r.network_ids();
    // The recreated network got a new id but the freed masquerade slot.
    let n0 = ids.iter().find(|(r, _)| r.name == "a.n0").unwrap();
    assert_eq!(n0.0.id, 6);
    assert_eq!(n0.1, first);
    let all: BTreeSet<_> = ids.iter().flat_map(|(_, m)| m.v4).collect();
    assert_eq!(all.len(), 2 * ids.len());
}

#[test]
fn a_full_masquerade_subnet_refuses_the_network() {
    let settings = Settings {
        masquerade_subnet_v4: "169.254.169.0/28".parse().unwrap(),
        ..Settings::default()
    };
    let mut r = Registry::new(settings);
    let mut text = ns("a", false);
    for i in 0..3 {
        text += &udn(
            "a",
            &format!("n{i}"),
            "Secondary",
            &format!("10.{i}.0.0/24"),
        );
    }
    r.apply(&objects(&text)).unwrap();
    let e = r
        .apply(&objects(&udn("a", "n3", "Secondary", "10.3.0.0/24")))
        .unwrap_err();
    assert_eq!(e.field, "settings.masquerade_subnet_v4");
    assert!(e.message.contains("no addresses left"), "{}", e.message);
}

#[test]
fn conditions_keep_their_transition_time_until_the_status_changes() {
    let now = Arc::new(AtomicU64::new(1_747_159_265));
    let clock = now.clone();
    let mut r = Registry::new(Settings::default()).with_clock(Box::new(move || {
        UNIX_EPOCH + Duration::from_secs(clock.load(Ordering::SeqCst))
    }));
    let mut text = String::new();
    for n in ["a", "b", "c"] {
        text += &ns(n, true);
    }
    text += &cudn("net1", &["a", "b"], "10.10.0.0/16");
    text += &cudn("net2", &["b", "c"], "10.20.0.0/16");
    r.apply(&objects(&text)).unwrap();
    let st = r.status();
    assert_eq!(st[1].conditions[0].status, "False");
    assert_eq!(
        st[1].conditions[0].last_transition_time,
        "2025-05-13T18:01:05Z"
    );
    assert_eq!(st[1].conditions[1].type_, CONDITION_ALLOCATED);
    assert_eq!(st[1].conditions[1].status, "True");

    now.store(1_747_159_265 + 60, Ordering::SeqCst);
    r.apply(&objects(&ns("d", true))).unwrap();
    assert_eq!(
        r.status()[1].conditions[0].last_transition_time,
        "2025-05-13T18:01:05Z"
    );

    now.store(1_747_159_265 + 120, Ordering::SeqCst);
    r.delete(Kind::ClusterUserDefinedNetwork, "net1", &none)
        .unwrap();
    let st = r.status();
    assert_eq!(st[0].name, "cluster.udn.net2");
    assert_eq!(st[0].conditions[0].status, "True");
    assert_eq!(st[0].active_namespaces, ["b", "c"]);
    assert_eq!(
        st[0].conditions[0].last_transition_time,
        "2025-05-13T18:03:05Z"
    );
    // Allocation did not change.
    assert_eq!(
        st[0].conditions[1].last_transition_time,
        "2025-05-13T18:01:05Z"
    );
}

#[test]
fn a_node_beyond_the_split_is_not_allocated() {
    let settings = Settings {
        node_index: 256,
        ..Settings::default()
    };
    let mut r = Registry::new(settings);
    r.apply(&objects(
        &(ns("a", true) + &cudn("net", &["a"], "10.10.0.0/16")),
    ))
    .unwrap();
    let st = r.status();
    let c = &st[0].conditions[1];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NetworkAllocationFailed")
    );
    assert!(
        c.message
            .contains("node index 256 is beyond the 256 host subnets /24 of 10.10.0.0/16"),
        "{}",
        c.message
    );
    assert!(r.networks().is_empty());
    assert!(r.primary_network("a").is_err());
}

#[test]
fn ready_networks_carry_their_plan() {
    let settings = Settings {
        node_index: 2,
        ..Settings::default()
    };
    let mut r = Registry::new(settings);
    r.apply(&objects(
        &(ns("a", true) + &cudn("net", &["a"], "10.10.0.0/16")),
    ))
    .unwrap();
    let n = &r.networks()[0];
    assert_eq!(n.id, 1);
    assert_eq!(n.object, "ClusterUserDefinedNetwork net");
    assert_eq!(n.plan.subnets[0].node_subnet.to_string(), "10.10.2.0/24");
    assert_eq!(
        n.plan.subnets[0].gateway,
        Some("10.10.2.1".parse().unwrap())
    );
    assert_eq!(n.config.join_subnets[0].to_string(), "100.65.0.0/16");
}
