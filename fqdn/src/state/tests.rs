//! Tests of the façade: issue 22's design examples end to end, the circuit breaker, GC and
//! restarts.

use super::*;
use crate::selector::CidrSelector;
use rand::{Rng, SeedableRng};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn set(s: &str) -> LabelSet {
    s.parse().unwrap()
}

fn name(s: &str) -> Selector {
    Selector::Fqdn(FqdnSelector::match_name(s).unwrap())
}

fn pattern(s: &str) -> Selector {
    Selector::Fqdn(FqdnSelector::match_pattern(s).unwrap())
}

fn cidr(s: &str) -> Selector {
    Selector::Cidr(CidrSelector::new(net(s)))
}

fn labels_of(st: &FqdnState, a: &str) -> LabelSet {
    st.identity_labels(st.lookup(ip(a)))
        .cloned()
        .unwrap_or_else(|| set("reserved:world"))
}

fn selected(st: &FqdnState, s: &Selector) -> Vec<Identity> {
    st.selected(s).unwrap().iter().copied().collect()
}

#[test]
fn a_new_ip_for_an_existing_selector_changes_only_the_ip_map() {
    let mut st = FqdnState::new(FqdnConfig::default());
    let star = pattern("*.example.com");
    let ch = st.apply_policy_selectors([star.clone()]);
    // The selector's identity is allocated up front.
    assert_eq!(ch.identities_added.len(), 1);
    let id = *ch.identities_added.keys().next().unwrap();
    assert_eq!(
        ch.identities_added[&id],
        set("fqdn:*.example.com,reserved:world")
    );
    assert_eq!(
        ch.selectors[&star].iter().copied().collect::<Vec<_>>(),
        vec![id]
    );

    let ch = st.on_dns_answer("A.example.com.", &[(ip("192.0.2.1"), 30)], 100);
    assert!(!ch.touches_rules(), "{ch:?}");
    assert_eq!(ch.upserts, BTreeMap::from([(net("192.0.2.1/32"), id)]));
    let ch = st.on_dns_answer(
        "b.example.com",
        &[(ip("192.0.2.1"), 30), (ip("2001:db8::2"), 30)],
        101,
    );
    assert!(!ch.touches_rules(), "{ch:?}");
    assert_eq!(ch.upserts, BTreeMap::from([(net("2001:db8::2/128"), id)]));
    assert_eq!(st.lookup(ip("2001:db8::2")), id);
    // A name no selector selects is cached but labels nothing.
    let ch = st.on_dns_answer("example.org", &[(ip("198.51.100.1"), 30)], 102);
    assert!(ch.is_empty());
    assert_eq!(st.lookup(ip("198.51.100.1")), Identity::WORLD);
    assert_eq!(st.cache_view().len(), 3);
}

#[test]
fn cfp_overlapping_selectors() {
    // *.cilium.io and www.cilium.io; www: IP1, IP2; dev: IP2, IP3.
    let mut st = FqdnState::new(FqdnConfig::default());
    let (star, www) = (pattern("*.cilium.io"), name("www.cilium.io"));
    st.apply_policy_selectors([star.clone(), www.clone()]);
    st.on_dns_answer(
        "www.cilium.io",
        &[(ip("10.0.0.1"), 60), (ip("10.0.0.2"), 60)],
        0,
    );
    st.on_dns_answer(
        "dev.cilium.io",
        &[(ip("10.0.0.2"), 60), (ip("10.0.0.3"), 60)],
        0,
    );
    let both = set("fqdn:*.cilium.io,fqdn:www.cilium.io,reserved:world");
    assert_eq!(labels_of(&st, "10.0.0.1"), both);
    assert_eq!(labels_of(&st, "10.0.0.2"), both);
    assert_eq!(
        labels_of(&st, "10.0.0.3"),
        set("fqdn:*.cilium.io,reserved:world")
    );
    let id1 = st.lookup(ip("10.0.0.1"));
    let id2 = st.lookup(ip("10.0.0.3"));
    assert_eq!(st.lookup(ip("10.0.0.2")), id1);
    assert!(selected(&st, &star).contains(&id1) && selected(&st, &star).contains(&id2));
    assert!(selected(&st, &www).contains(&id1) && !selected(&st, &www).contains(&id2));
}

#[test]
fn cfp_overlapping_ips() {
    // foo.com: IP1, IP2; bar.com: IP2, IP3; A selects foo.com, B bar.com.
    let mut st = FqdnState::new(FqdnConfig::default());
    st.apply_policy_selectors([name("foo.com"), name("bar.com")]);
    st.on_dns_answer("foo.com", &[(ip("10.0.0.1"), 60), (ip("10.0.0.2"), 60)], 0);
    st.on_dns_answer("bar.com", &[(ip("10.0.0.2"), 60), (ip("10.0.0.3"), 60)], 0);
    let ids: BTreeSet<Identity> = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
        .iter()
        .map(|a| st.lookup(ip(a)))
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(
        labels_of(&st, "10.0.0.2"),
        set("fqdn:bar.com,fqdn:foo.com,reserved:world")
    );
    assert_eq!(selected(&st, &name("foo.com")).len(), 2);
    assert_eq!(selected(&st, &name("bar.com")).len(), 2);
}

#[test]
fn cfp_overlapping_fqdn_and_cidr() {
    let mut st = FqdnState::new(FqdnConfig::default());
    let (star, c24) = (pattern("*.cilium.io"), cidr("52.58.254.0/24"));
    st.apply_policy_selectors([star.clone()]);
    st.on_dns_answer("www.cilium.io", &[(ip("52.58.254.253"), 60)], 0);
    let fqdn_only = st.lookup(ip("52.58.254.253"));
    let ch = st.apply_policy_selectors([star.clone(), c24.clone()]);
    let fqdn_cidr = st.lookup(ip("52.58.254.253"));
    let block = st.lookup(ip("52.58.254.1"));
    assert_eq!(
        labels_of(&st, "52.58.254.253"),
        set("cidr:52.58.254.0/24,fqdn:*.cilium.io,reserved:world")
    );
    assert_eq!(
        labels_of(&st, "52.58.254.1"),
        set("cidr:52.58.254.0/24,reserved:world")
    );
    assert_ne!(fqdn_cidr, fqdn_only, "identity churn for the /32");
    assert_eq!(
        ch.upserts.keys().copied().collect::<Vec<_>>(),
        vec![net("52.58.254.0/24"), net("52.58.254.253/32")]
    );
    assert_eq!(
        selected(&st, &c24),
        vec![block, fqdn_cidr]
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    assert!(selected(&st, &star).contains(&fqdn_cidr));
    assert!(!selected(&st, &star).contains(&block));
    assert_eq!(st.lookup(ip("8.8.8.8")), Identity::WORLD);
    // Removing the CIDR selector brings the /32 back to the FQDN-only label set.
    let ch = st.apply_policy_selectors([star.clone()]);
    assert_eq!(st.lookup(ip("52.58.254.253")), fqdn_only);
    assert!(ch.deletes.contains(&net("52.58.254.0/24")));
    assert!(ch.identities_removed.contains(&block) && ch.identities_removed.contains(&fqdn_cidr));
    assert_eq!(st.lookup(ip("52.58.254.1")), Identity::WORLD);
}

#[test]
fn removing_a_selector_relabels_shared_ips() {
    // ebpf.com and cilium.io both answer 1.2.3.4; selectors *.com and *.io.
    let mut st = FqdnState::new(FqdnConfig::default());
    st.apply_policy_selectors([pattern("*.com"), pattern("*.io")]);
    st.on_dns_answer("ebpf.com", &[(ip("1.2.3.4"), 60)], 0);
    st.on_dns_answer("cilium.io", &[(ip("1.2.3.4"), 60)], 0);
    assert_eq!(
        labels_of(&st, "1.2.3.4"),
        set("fqdn:*.com,fqdn:*.io,reserved:world")
    );
    let ch = st.apply_policy_selectors([pattern("*.com")]);
    assert_eq!(labels_of(&st, "1.2.3.4"), set("fqdn:*.com,reserved:world"));
    assert_eq!(ch.upserts.len(), 1);
    assert!(ch.deletes.is_empty());
    let ch = st.apply_policy_selectors([]);
    assert_eq!(ch.deletes, BTreeSet::from([net("1.2.3.4/32")]));
    assert!(
        st.identities_view().is_empty(),
        "{:?}",
        st.identities_view()
    );
    // The names stay cached: a selector added later labels their addresses at once.
    let ch = st.apply_policy_selectors([name("cilium.io")]);
    assert_eq!(ch.upserts.len(), 1);
    assert_eq!(
        labels_of(&st, "1.2.3.4"),
        set("fqdn:cilium.io,reserved:world")
    );
}

#[test]
fn gc_waits_for_ttl_and_connections() {
    let mut st = FqdnState::new(FqdnConfig {
        min_ttl: 10,
        ..FqdnConfig::default()
    });
    st.apply_policy_selectors([pattern("*.example.test")]);
    st.on_dns_answer(
        "a.example.test",
        &[(ip("192.0.2.1"), 1), (ip("192.0.2.2"), 100)],
        1000,
    );
    let id = st.lookup(ip("192.0.2.1"));
    assert!(st.gc(1009, &|_| false).is_empty(), "TTL raised to 10 s");
    let busy = ip("192.0.2.1");
    assert!(
        st.gc(1010, &|i| i == busy).is_empty(),
        "a connection still uses it"
    );
    let ch = st.gc(1011, &|_| false);
    assert_eq!(ch.deletes, BTreeSet::from([net("192.0.2.1/32")]));
    assert!(!ch.touches_rules());
    assert_eq!(st.lookup(ip("192.0.2.1")), Identity::WORLD);
    assert_eq!(st.lookup(ip("192.0.2.2")), id);
    st.gc(1100, &|_| false);
    assert!(st.cache_view().is_empty());
    assert!(st.ip_identity().is_empty());
}

#[test]
fn rotating_addresses_stay_at_one_identity() {
    let limits = Limits {
        max_ips_per_name: 500,
        max_fqdn_identities: 16,
    };
    let mut st = FqdnState::new(FqdnConfig { min_ttl: 5, limits });
    let s3 = pattern("*.amazonaws.com");
    st.apply_policy_selectors([s3.clone()]);
    let mut rng = rand::rngs::StdRng::seed_from_u64(5000);
    let mut learned = 0usize;
    for i in 0..5000u64 {
        let records: Vec<(IpAddr, u32)> = (0..8)
            .map(|_| (IpAddr::from(rng.gen::<[u8; 4]>()), 5))
            .collect();
        let ch = st.on_dns_answer("s3.amazonaws.com", &records, 1_000_000 + i / 4);
        assert!(!ch.touches_rules(), "answer {i} touched the rules: {ch:?}");
        learned += ch.upserts.len();
        if i % 100 == 99 {
            let ch = st.gc(1_000_000 + i / 4, &|_| false);
            assert!(!ch.touches_rules());
        }
    }
    let fqdn_ids = st
        .identities_view()
        .iter()
        .filter(|v| v.labels.has_source(Source::Fqdn))
        .count();
    assert_eq!(fqdn_ids, 1);
    assert!(learned > 39_000, "{learned}");
    assert!(st.ip_identity().len() <= 500, "{}", st.ip_identity().len());
    let c = st.counters();
    assert!(c.ips_evicted_over_limit > 0, "{c:?}");
    assert_eq!(c.identities_refused, 0);
    assert_eq!(selected(&st, &s3).len(), 1);
}

#[test]
fn identity_limit_refuses_and_counts() {
    let limits = Limits {
        max_ips_per_name: 100,
        max_fqdn_identities: 3,
    };
    let mut st = FqdnState::new(FqdnConfig { min_ttl: 0, limits });
    st.apply_policy_selectors([pattern("*.com"), name("x.com")]);
    // {*.com,x.com}: the third fqdn identity.
    let ch = st.on_dns_answer("x.com", &[(ip("10.0.0.1"), 60)], 0);
    assert!(ch.refused.is_empty());
    // The policy path is never refused: a fourth.
    st.apply_policy_selectors([pattern("*.com"), name("x.com"), name("y.com")]);
    // {*.com,y.com} would be a fifth: refused, counted, not allowed, not cached.
    let ch = st.on_dns_answer("y.com", &[(ip("10.0.0.2"), 60)], 0);
    assert_eq!(
        ch.refused,
        vec![Refusal::IdentityLimit {
            name: "y.com".into(),
            ip: ip("10.0.0.2"),
            labels: "fqdn:*.com,fqdn:y.com,reserved:world".into()
        }]
    );
    assert!(ch.upserts.is_empty() && !ch.touches_rules());
    assert_eq!(st.lookup(ip("10.0.0.2")), Identity::WORLD);
    assert!(st.cache_view().iter().all(|n| n.name != "y.com"));
    assert_eq!(st.counters().identities_refused, 1);
    // An address whose label set already has an identity still passes.
    let ch = st.on_dns_answer("z.com", &[(ip("10.0.0.3"), 60)], 0);
    assert!(ch.refused.is_empty());
    assert_eq!(labels_of(&st, "10.0.0.3"), set("fqdn:*.com,reserved:world"));
}

#[test]
fn ips_per_name_limit_is_counted() {
    let limits = Limits {
        max_ips_per_name: 2,
        max_fqdn_identities: 16,
    };
    let mut st = FqdnState::new(FqdnConfig { min_ttl: 0, limits });
    st.apply_policy_selectors([name("a.com")]);
    let ch = st.on_dns_answer(
        "a.com",
        &[
            (ip("10.0.0.1"), 60),
            (ip("10.0.0.2"), 60),
            (ip("10.0.0.3"), 60),
        ],
        0,
    );
    assert_eq!(
        ch.refused,
        vec![Refusal::IpsPerName {
            name: "a.com".into(),
            ip: ip("10.0.0.3")
        }]
    );
    let ch = st.on_dns_answer("a.com", &[(ip("10.0.0.4"), 60)], 1);
    assert_eq!(ch.deletes, BTreeSet::from([net("10.0.0.1/32")]));
    assert_eq!(
        ch.upserts.keys().copied().collect::<Vec<_>>(),
        vec![net("10.0.0.4/32")]
    );
    assert_eq!(
        st.counters(),
        Counters {
            ips_evicted_over_limit: 1,
            ips_refused_over_limit: 1,
            identities_refused: 0
        }
    );
}

#[test]
fn restart_keeps_identities_stable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fqdn.json");
    let selectors = [
        pattern("*.cilium.io"),
        name("www.cilium.io"),
        cidr("52.58.254.0/24"),
    ];
    let mut a = FqdnState::new(FqdnConfig::default());
    // Some churn first, so that numbers are not simply allocated in order.
    a.apply_policy_selectors([name("gone.io")]);
    a.apply_policy_selectors(selectors.clone());
    a.on_dns_answer(
        "www.cilium.io",
        &[(ip("52.58.254.253"), 600), (ip("10.0.0.1"), 600)],
        0,
    );
    a.on_dns_answer("dev.cilium.io", &[(ip("10.0.0.3"), 600)], 0);
    a.checkpoint(&path).unwrap();

    let mut b = FqdnState::restore(FqdnConfig::default(), &path).unwrap();
    // A label set that did not exist before the restart gets a number of its own.
    let ch = b.apply_policy_selectors(selectors.iter().cloned().chain([name("new.io")]));
    let new_id = ch
        .identities_added
        .iter()
        .find(|(_, l)| l.contains(&Label::fqdn("new.io")))
        .unwrap()
        .0;
    assert!(a.identities_view().iter().all(|v| v.id != *new_id));
    let b_map: BTreeMap<_, _> = b.ip_identity().clone();
    assert_eq!(&b_map, a.ip_identity());
    for s in &selectors {
        assert_eq!(
            b.selected(s)
                .unwrap()
                .iter()
                .filter(|i| *i != new_id)
                .collect::<Vec<_>>(),
            a.selected(s).unwrap().iter().collect::<Vec<_>>(),
            "{s}"
        );
    }
    assert_eq!(b.cache_view().len(), 2);
    assert_eq!(b.finish_restore(), 0, "every restored identity was claimed");
    assert_eq!(b.restore_skipped(), 0);
}

#[test]
fn restore_of_a_missing_file_fails_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let e = FqdnState::restore(FqdnConfig::default(), &dir.path().join("none.json")).unwrap_err();
    assert!(e.to_string().contains("none.json"));
}

#[test]
fn views_serialize() {
    let mut st = FqdnState::new(FqdnConfig::default());
    let ch = st.apply_policy_selectors([pattern("*.example.com")]);
    let ch = serde_json::to_value(ch).unwrap();
    assert_eq!(
        ch["selectors"]["fqdn:*.example.com"],
        serde_json::json!([1 << 24])
    );
    assert_eq!(
        ch["identities_added"][(1u32 << 24).to_string()],
        serde_json::json!(["fqdn:*.example.com", "reserved:world"])
    );
    st.on_dns_answer("a.example.com", &[(ip("192.0.2.1"), 30)], 100);
    let cache = serde_json::to_value(st.cache_view()).unwrap();
    assert_eq!(cache[0]["name"], "a.example.com");
    assert_eq!(cache[0]["labels"][0], "fqdn:*.example.com");
    assert_eq!(cache[0]["ips"][0]["ip"], "192.0.2.1");
    assert_eq!(cache[0]["ips"][0]["expires"], 160);
    assert_eq!(cache[0]["ips"][0]["identity"], 1 << 24);
    let ids = serde_json::to_value(st.identities_view()).unwrap();
    assert_eq!(
        ids[0]["labels"],
        serde_json::json!(["fqdn:*.example.com", "reserved:world"])
    );
    assert_eq!(ids[0]["prefixes"], 1);
    assert_eq!(ids[0]["refs"], 2);
    let sels = serde_json::to_value(st.selectors_view()).unwrap();
    assert_eq!(
        sels,
        serde_json::json!([{"selector": "fqdn:*.example.com", "identities": [1 << 24]}])
    );
    let ch = serde_json::to_value(st.on_dns_answer("b.example.com", &[(ip("192.0.2.9"), 30)], 100))
        .unwrap();
    assert_eq!(ch["upserts"]["192.0.2.9/32"], 1 << 24);
}

#[test]
fn an_unclaimed_restored_identity_keeps_its_number_until_finish_restore() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fqdn.json");
    let mut a = FqdnState::new(FqdnConfig::default());
    let ch = a.apply_policy_selectors([name("x.com")]);
    let x = *ch.identities_added.keys().next().unwrap();
    a.checkpoint(&path).unwrap();
    // The file on disk is the one `restore` reads, and it says what it holds.
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        json["identities"]["identities"][0]["labels"],
        serde_json::json!(["fqdn:x.com", "reserved:world"])
    );

    let mut b = FqdnState::restore(FqdnConfig::default(), &path).unwrap();
    let ch = b.apply_policy_selectors([name("y.com")]);
    let y = *ch.identities_added.keys().next().unwrap();
    assert_ne!(y, x, "a reserved number is not given to another label set");
    assert_eq!(b.finish_restore(), 1);
    // Claimed later, the label set gets a fresh number.
    let ch = b.apply_policy_selectors([name("y.com"), name("x.com")]);
    assert!(ch.identities_added.keys().all(|id| *id != x && *id != y));
}

#[test]
fn a_removed_endpoint_lets_its_names_go() {
    let mut st = FqdnState::new(FqdnConfig::default());
    st.apply_policy_selectors([pattern("*.example.com")]);
    st.on_dns_answer_for("ns/a", "x.example.com", &[(ip("192.0.2.1"), 600)], 0);
    st.on_dns_answer_for("ns/b", "y.example.com", &[(ip("192.0.2.2"), 600)], 0);
    assert_eq!(st.cache_view()[0].endpoints, vec!["ns/a".to_string()]);
    assert_eq!(
        st.endpoint_removed("ns/a", 10),
        vec!["x.example.com".to_string()]
    );
    let ch = st.gc(10, &|_| false);
    assert_eq!(ch.deletes, BTreeSet::from([net("192.0.2.1/32")]));
    assert_eq!(st.lookup(ip("192.0.2.1")), Identity::WORLD);
    assert_ne!(st.lookup(ip("192.0.2.2")), Identity::WORLD);
}

#[test]
fn an_exhausted_identity_range_fails_closed() {
    let cfg = FqdnConfig::default();
    let mut st = FqdnState::with_identity_range(cfg, Identity(100), Identity(102));
    st.apply_policy_selectors([name("a.com"), name("b.com")]);
    st.on_dns_answer("a.com", &[(ip("10.0.0.1"), 60)], 0);
    st.on_dns_answer("a.com", &[(ip("10.0.1.1"), 60)], 0);
    // {a.com,b.com}: the third and last number.
    assert!(st
        .on_dns_answer("b.com", &[(ip("10.0.0.1"), 60)], 0)
        .refused
        .is_empty());
    // An address whose label set has an identity still passes.
    let ch = st.on_dns_answer("a.com", &[(ip("10.0.0.2"), 60)], 0);
    assert!(ch.refused.is_empty(), "{ch:?}");
    // c.com's selector got no identity up front; its first address needs one: refused.
    st.apply_policy_selectors([name("a.com"), name("b.com"), name("c.com")]);
    let ch = st.on_dns_answer("c.com", &[(ip("10.0.0.9"), 60)], 0);
    assert!(
        matches!(&ch.refused[..], [Refusal::IdentityLimit { .. }]),
        "{ch:?}"
    );
    assert_eq!(st.lookup(ip("10.0.0.9")), Identity::WORLD);
    // A CIDR selector over 10.0.1.0/24 needs two new label sets: none can be had, so
    // its prefixes leave the map instead of keeping a stale identity.
    let ch = st.apply_policy_selectors([
        name("a.com"),
        name("b.com"),
        name("c.com"),
        cidr("10.0.1.0/24"),
    ]);
    assert_eq!(ch.refused.len(), 2, "{ch:?}");
    assert!(ch.deletes.contains(&net("10.0.1.1/32")));
    assert_eq!(st.lookup(ip("10.0.1.1")), Identity::WORLD);
    assert_eq!(st.lookup(ip("10.0.1.9")), Identity::WORLD);
    assert_eq!(st.counters().identities_refused, 3);
    assert_ne!(st.lookup(ip("10.0.0.1")), Identity::WORLD);
}
