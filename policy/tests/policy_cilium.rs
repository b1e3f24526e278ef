//! CiliumNetworkPolicies through the whole pipeline: the seed's selectors rendered as
//! remote-identity rules in the global table (IPv4 and IPv6), `toCIDRSet` `except`
//! subtraction against a naive model, `toEndpoints` across namespaces, `toPorts` with
//! and without peers, `rules.dns` → one DNS policy per pod, a CiliumNetworkPolicy and a
//! NetworkPolicy on one pod unioned, a removed policy opening the pod again, incremental
//! changes against a full render, selector rules that never stand for "any
//! destination" when rules are combined or in verdicts, and the `acl.apply` round trip.

use ferrule_api::acl::{AclApply, AttachTarget, DnsPolicy};
use ferrule_dataplane::acl::{Prefix, RuleField};
use ferrule_policy::cache::{parse_text, Cache, Key, Kind, Object, Peer, L4};
use ferrule_policy::cilium;
use ferrule_policy::renderer::{Rendered, GLOBAL_TABLE};
use ferrule_policy::verdict::{Endpoint, Verdicts};
use ferrule_policy::{Change, Engine, Local};
use proptest::prelude::*;
use std::net::IpAddr;

const PODS: &str = "
apiVersion: v1
kind: Namespace
metadata: {name: app, labels: {team: red}}
---
apiVersion: v1
kind: Namespace
metadata: {name: kube-system}
---
apiVersion: v1
kind: Namespace
metadata: {name: other, labels: {team: blue}}
---
apiVersion: v1
kind: Pod
metadata: {name: crawler, namespace: app, labels: {app: crawler}}
spec: {nodeName: n1, containers: [{name: c}]}
status: {podIPs: [{ip: 10.0.0.1}, {ip: \"fd00::1\"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: app, labels: {app: web}}
spec: {nodeName: n1, containers: [{name: c, ports: [{name: http, containerPort: 8080}]}]}
status: {podIP: 10.0.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: fake-dns, namespace: app, labels: {k8s-app: kube-dns}}
spec: {nodeName: n2, containers: [{name: c}]}
status: {podIP: 10.0.0.3}
---
apiVersion: v1
kind: Pod
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec: {nodeName: n2, containers: [{name: c}]}
status: {podIPs: [{ip: 10.0.0.53}, {ip: \"fd00::53\"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: other, labels: {app: db}}
spec: {nodeName: n2, containers: [{name: c}]}
status: {podIP: 10.0.0.9}
";

/// The seed's selectors (issue 22): `*.cilium.io` and `www.cilium.io`, the CIDRs
/// 192.0.2.0/24 and 192.0.2.128/25, 52.58.254.0/24 overlapping the names, DNS through
/// kube-dns.
const SEED: &str = r#"
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: crawler, namespace: app}
spec:
  endpointSelector: {matchLabels: {k8s:app: crawler}}
  egress:
  - toEndpoints:
    - matchLabels: {k8s:io.kubernetes.pod.namespace: kube-system, k8s:k8s-app: kube-dns}
    toPorts:
    - ports: [{port: "53", protocol: UDP}]
      rules:
        dns:
        - matchPattern: "*.cilium.io"
        - matchName: www.cilium.io
        - matchName: One.One.One.One.
  - toFQDNs: [{matchPattern: "*.cilium.io"}, {matchName: www.cilium.io}]
    toPorts: [{ports: [{port: "443", protocol: TCP}]}]
  - toCIDR: [192.0.2.0/24, 192.0.2.128/25, 52.58.254.0/24]
  - toCIDRSet: [{cidr: 192.168.0.0/24, except: [192.168.0.128/25]}, {cidr: "2001:db8::/32", except: ["2001:db8::/33"]}]
"#;

fn objects(text: &str) -> Vec<Object> {
    parse_text(text, "t.yaml").expect("valid state").0
}

fn engine(text: &str, local: Local) -> Engine {
    Engine::new(Cache::from_objects(objects(text)), local).expect("renders")
}

/// A table's rules as text, without their origins.
fn table(r: &Rendered, name: &str) -> Vec<String> {
    r.tables[name]
        .iter()
        .map(|rule| {
            let mut rule = rule.clone();
            rule.origin = None;
            rule.to_string()
        })
        .collect()
}

fn local_table(r: &Rendered, pod: &Key) -> Vec<String> {
    match &r.pods[pod].egress {
        Some(name) => table(r, name),
        None => Vec::new(),
    }
}

fn key(text: &str) -> Key {
    Key::parse(text).unwrap()
}

fn verdict(state: &str, from: &str, to: &str, port: u16, proto: L4) -> (bool, Vec<String>) {
    let mut v = Verdicts::new(Cache::from_objects(objects(state)));
    let r = v
        .verdict(
            &Endpoint::parse(from).unwrap(),
            &Endpoint::parse(to).unwrap(),
            port,
            proto,
        )
        .unwrap();
    (r.allowed, r.trace)
}

#[test]
fn the_seeds_selectors_become_remote_identity_rules_in_the_global_table() {
    let state = format!("{PODS}---{SEED}");
    let e = engine(&state, Local::Node("n1".into()));
    let r = e.rendered();
    assert_eq!(
        table(r, GLOBAL_TABLE),
        [
            "permit proto udp src 10.0.0.1/32 dst 10.0.0.53/32 src_port any dst_port 53",
            "permit proto udp src fd00::1/128 dst fd00::53/128 src_port any dst_port 53",
            "permit proto tcp src 10.0.0.1/32 dst fqdn:*.cilium.io src_port any dst_port 443",
            "permit proto tcp src fd00::1/128 dst fqdn:*.cilium.io src_port any dst_port 443",
            "permit proto tcp src 10.0.0.1/32 dst fqdn:www.cilium.io src_port any dst_port 443",
            "permit proto tcp src fd00::1/128 dst fqdn:www.cilium.io src_port any dst_port 443",
            "permit proto any src 10.0.0.1/32 dst cidr:192.0.2.0/24 src_port any dst_port any",
            "permit proto any src 10.0.0.1/32 dst cidr:192.0.2.128/25 src_port any dst_port any",
            "permit proto any src 10.0.0.1/32 dst cidr:52.58.254.0/24 src_port any dst_port any",
            "permit proto any src 10.0.0.1/32 dst cidr:192.168.0.0/25 src_port any dst_port any",
            "permit proto any src fd00::1/128 dst cidr:2001:db8:8000::/33 src_port any dst_port any",
            "deny proto any src 10.0.0.1/32 dst any src_port any dst_port any",
            "deny proto any src fd00::1/128 dst any src_port any dst_port any",
            "permit proto any src any dst any src_port any dst_port any",
        ]
    );
    let origins: Vec<&str> = r.tables[GLOBAL_TABLE]
        .iter()
        .filter_map(|r| r.origin.as_deref())
        .collect();
    assert!(origins[..13].iter().all(|o| *o == "app/cnp:crawler"));
    for rule in &r.tables[GLOBAL_TABLE] {
        rule.validate().unwrap();
        if rule.dst_selector.is_some() {
            assert_eq!(rule.dst, Prefix::Any);
        }
    }
    // The crawler's egress is restricted: its replies are tracked (reflect all).
    let crawler = key("app/crawler");
    assert_eq!(
        local_table(r, &crawler),
        ["reflect proto any src any dst any src_port any dst_port any"]
    );
    // The web pod of the same node accepts everything, but the crawler may send it
    // nothing: none of the crawler's selector rules (one is `proto any` to
    // `cidr:…`, with `dst` any) stands for the web pod's address.
    assert_eq!(
        local_table(r, &key("app/web")),
        [
            "deny proto any src 10.0.0.1/32 dst any src_port any dst_port any",
            "reflect proto any src any dst any src_port any dst_port any",
        ]
    );
    assert_eq!(
        r.dns.values().cloned().collect::<Vec<_>>(),
        [DnsPolicy {
            target: AttachTarget::Pod("app/crawler".into()),
            allow: vec![
                "*.cilium.io".into(),
                "one.one.one.one".into(),
                "www.cilium.io".into()
            ],
        }]
    );
}

#[test]
fn verdicts_never_match_selector_rules_by_address() {
    let state = format!("{PODS}---{SEED}");
    let v = |to: &str, port, proto| verdict(&state, "app/crawler", to, port, proto);
    assert!(v("kube-system/coredns", 53, L4::Udp).0, "the DNS rule");
    assert!(!v("kube-system/coredns", 53, L4::Tcp).0, "UDP only");
    assert!(
        !v("app/fake-dns", 53, L4::Udp).0,
        "kube-dns labels in the wrong namespace"
    );
    assert!(!v("app/web", 80, L4::Tcp).0, "same node, combined rules");
    assert!(!v("other/db", 80, L4::Tcp).0, "other node, global table");
    // Allowed by `toCIDR: 192.0.2.0/24` in the dataplane, denied offline; the trace
    // says which rules the dataplane matches by identity.
    let (allowed, trace) = v("192.0.2.1", 443, L4::Tcp);
    assert!(!allowed);
    let notes: Vec<&String> = trace
        .iter()
        .filter(|l| l.contains("not matched offline"))
        .collect();
    assert_eq!(notes.len(), 3, "{trace:#?}");
    assert!(notes[0].contains("fqdn:*.cilium.io"), "{trace:#?}");
    assert!(notes[2].contains("cidr:192.0.2.0/24"), "{trace:#?}");
    assert!(
        !trace.iter().any(|l| l.contains("cidr:52.58.254.0/24")),
        "a CIDR selector not containing the address is not named: {trace:#?}"
    );
    assert!(
        verdict(&state, "app/web", "app/crawler", 80, L4::Tcp).0,
        "the crawler's ingress is open"
    );
}

/// The `cidr:` prefixes of a CNP's `toCIDRSet`.
fn cidr_set_pieces(cidr: &str, except: &[String]) -> Vec<Prefix> {
    let text = format!(
        "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {{name: p, namespace: x}}\nspec:\n  endpointSelector: {{}}\n  egress: [{{toCIDRSet: [{{cidr: \"{cidr}\", except: [{}]}}]}}]\n",
        except
            .iter()
            .map(|e| format!("\"{e}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let Object::Policy(p) = objects(&text).remove(0) else {
        panic!()
    };
    p.egress.unwrap()[0]
        .peers
        .iter()
        .flatten()
        .map(|peer| match peer {
            Peer::Selector(s) => {
                Prefix::parse(s.strip_prefix("cidr:").unwrap(), RuleField::Dst).unwrap()
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// `toCIDRSet` with `except` against a naive model: every address of the block
    /// is covered by exactly one piece unless an except holds it, then by none.
    #[test]
    fn cidr_set_except_covers_exactly_the_rest(
        v6 in any::<bool>(),
        len in 24u8..=28,
        holes in proptest::collection::vec((0u8..=255, 0u8..=8), 0..4),
    ) {
        let base: IpAddr = if v6 { "2001:db8::".parse().unwrap() } else { "198.51.100.0".parse().unwrap() };
        let max = if v6 { 128 } else { 32 };
        let plen = max - 32 + len;
        let addr = |last: u8| -> IpAddr {
            match base {
                IpAddr::V4(a) => {
                    let mut o = a.octets();
                    o[3] = last;
                    IpAddr::V4(o.into())
                }
                IpAddr::V6(a) => {
                    let mut o = a.octets();
                    o[15] = last;
                    IpAddr::V6(o.into())
                }
            }
        };
        let block_size = 1u16 << (32 - len);
        let block = format!("{base}/{plen}");
        // Holes strictly inside the block: a host offset and a length longer than it.
        let except: Vec<(IpAddr, u8)> = holes
            .iter()
            .map(|&(off, extra)| {
                let hl = (len + 1 + extra).min(32);
                let size = 1u16 << (32 - hl);
                let start = (u16::from(off) % block_size) / size * size;
                (addr(start as u8), max - 32 + hl)
            })
            .collect();
        let texts: Vec<String> = except.iter().map(|(a, l)| format!("{a}/{l}")).collect();
        let pieces = cidr_set_pieces(&block, &texts);
        let holes: Vec<Prefix> = texts
            .iter()
            .map(|t| Prefix::parse(t, RuleField::Dst).unwrap())
            .collect();
        for last in 0..block_size {
            let ip = addr(last as u8);
            let in_hole = holes.iter().any(|h| h.matches(ip));
            let covered = pieces.iter().filter(|p| p.matches(ip)).count();
            prop_assert_eq!(covered, usize::from(!in_hole), "{} in {} except {:?}: {:?}", ip, block, texts, pieces);
        }
        let outside = addr(0).to_string().replace(if v6 { "2001:db8::" } else { "198.51.100." }, if v6 { "2001:db9::" } else { "198.51.101." });
        let outside: IpAddr = outside.parse().unwrap();
        prop_assert!(pieces.iter().all(|p| !p.matches(outside)));
    }
}

#[test]
fn to_endpoints_stay_in_the_namespace_unless_they_name_one() {
    let policy = |peer: &str| {
        format!(
            "{PODS}---\napiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {{name: out, namespace: app}}\nspec:\n  endpointSelector: {{matchLabels: {{app: crawler}}}}\n  egress: [{{toEndpoints: [{peer}]}}]\n"
        )
    };
    let destinations = |peer: &str| -> Vec<String> {
        let e = engine(&policy(peer), Local::All);
        e.rendered().tables[GLOBAL_TABLE]
            .iter()
            .filter(|r| r.action.to_string() == "permit" && r.src.to_string() == "10.0.0.1/32")
            .map(|r| r.dst.to_string())
            .collect()
    };
    assert_eq!(
        destinations("{matchLabels: {k8s-app: kube-dns}}"),
        ["10.0.0.3/32"],
        "the policy's namespace"
    );
    assert_eq!(
        destinations("{matchLabels: {k8s:io.kubernetes.pod.namespace: kube-system}}"),
        ["10.0.0.53/32"]
    );
    assert_eq!(
        destinations(
            "{matchExpressions: [{key: io.kubernetes.pod.namespace, operator: In, values: [kube-system, other]}]}"
        ),
        ["10.0.0.53/32", "10.0.0.9/32"]
    );
    assert_eq!(
        destinations("{matchExpressions: [{key: k8s:io.kubernetes.pod.namespace, operator: Exists}, {key: k8s-app, operator: In, values: [kube-dns]}]}"),
        ["10.0.0.3/32", "10.0.0.53/32"],
        "every namespace"
    );
    assert_eq!(
        destinations("{matchLabels: {io.cilium.k8s.namespace.labels.team: blue}}"),
        Vec::<String>::new(),
        "a namespace label alone stays in the policy's namespace (team red)"
    );
    assert_eq!(
        destinations(
            "{matchLabels: {io.cilium.k8s.namespace.labels.team: blue, io.kubernetes.pod.namespace: other}}"
        ),
        ["10.0.0.9/32"]
    );
    assert_eq!(
        destinations("{}"),
        ["10.0.0.1/32", "10.0.0.3/32", "10.0.0.2/32"],
        "an empty selector: every pod of the namespace (in pod order)"
    );
}

#[test]
fn to_ports_with_and_without_peers() {
    let state = format!(
        "{PODS}---\napiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {{name: out, namespace: app}}\nspec:\n  endpointSelector: {{matchLabels: {{app: crawler}}}}\n  egress:\n  - {{}}\n  - toPorts: [{{ports: [{{port: \"80\", protocol: TCP}}, {{port: http}}]}}]\n  - toCIDR: [203.0.113.0/24]\n    toPorts: [{{ports: [{{port: \"8000\", endPort: 8100, protocol: UDP}}]}}]\n"
    );
    let e = engine(&state, Local::All);
    let g: Vec<String> = table(e.rendered(), GLOBAL_TABLE)
        .into_iter()
        .filter(|r| r.contains("src 10.0.0.1/32"))
        .collect();
    assert_eq!(
        g,
        [
            "permit proto tcp src 10.0.0.1/32 dst any src_port any dst_port 80",
            // `http` resolves on the one pod that has it (the web pod).
            "permit proto tcp src 10.0.0.1/32 dst 10.0.0.2/32 src_port any dst_port 8080",
            "permit proto udp src 10.0.0.1/32 dst cidr:203.0.113.0/24 src_port any dst_port 8000-8100",
            "deny proto any src 10.0.0.1/32 dst any src_port any dst_port any",
        ]
    );
    let v = |to: &str, port, proto| verdict(&state, "app/crawler", to, port, proto).0;
    assert!(v("other/db", 80, L4::Tcp), "ports alone: any peer");
    assert!(v("app/web", 8080, L4::Tcp), "the named port on the web pod");
    assert!(!v("other/db", 8080, L4::Tcp));
    assert!(!v("other/db", 81, L4::Tcp));
    assert!(
        !v("203.0.113.5", 8000, L4::Udp),
        "a selector rule: offline deny"
    );

    let only_empty = format!(
        "{PODS}---\napiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {{name: out, namespace: app}}\nspec:\n  endpointSelector: {{matchLabels: {{app: crawler}}}}\n  egress: [{{}}]\n"
    );
    let e = engine(&only_empty, Local::All);
    assert_eq!(
        table(e.rendered(), GLOBAL_TABLE),
        [
            "deny proto any src 10.0.0.1/32 dst any src_port any dst_port any",
            "deny proto any src fd00::1/128 dst any src_port any dst_port any",
            "permit proto any src any dst any src_port any dst_port any",
        ],
        "egress: [{{}}] isolates and allows nothing"
    );
}

#[test]
fn dns_rules_become_one_dns_policy_per_pod() {
    let state = format!(
        "{PODS}---{SEED}---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {{name: more-dns, namespace: app}}
specs:
- endpointSelector: {{}}
  egress:
  - toPorts: [{{ports: [{{port: \"53\", protocol: UDP}}], rules: {{dns: [{{matchName: api.example.com}}, {{matchPattern: \"*.cilium.io\"}}]}}}}]
- endpointSelector: {{matchLabels: {{app: web}}}}
  egress:
  - toPorts: [{{ports: [{{port: \"53\", protocol: UDP}}], rules: {{dns: [{{matchPattern: \"*\"}}]}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: tagged, namespace: app, annotations: {{ferrule.io/port: tap-7}}}}
spec: {{nodeName: n1, containers: [{{name: c}}]}}
status: {{podIP: 10.0.0.7}}
"
    );
    let e = engine(&state, Local::Node("n1".into()));
    let dns = &e.rendered().dns;
    let allow = |pod: &str| dns.get(&key(pod)).map(|d| d.allow.clone());
    assert_eq!(
        allow("app/crawler").unwrap(),
        [
            "*.cilium.io",
            "api.example.com",
            "one.one.one.one",
            "www.cilium.io"
        ],
        "the union of both policies, sorted, once each"
    );
    assert_eq!(allow("app/web").unwrap(), ["*"], "`*` allows every name");
    assert_eq!(
        dns[&key("app/tagged")].target,
        AttachTarget::Port("tap-7".into()),
        "where the pod's tables attach"
    );
    assert_eq!(
        allow("app/fake-dns"),
        None,
        "on another node: not rendered here"
    );
    assert_eq!(allow("kube-system/coredns"), None, "no CNP selects it");
    let apply = e.rendered().to_apply();
    assert_eq!(
        apply
            .dns
            .iter()
            .map(|d| d.target.to_string())
            .collect::<Vec<_>>(),
        ["pod app/crawler", "port tap-7", "pod app/web"]
    );
    // The DNS rules' ports are rendered as allows too.
    assert!(verdict(&state, "app/web", "kube-system/coredns", 53, L4::Udp).0);
    assert!(!verdict(&state, "app/web", "kube-system/coredns", 80, L4::Tcp).0);
}

#[test]
fn a_cnp_and_a_network_policy_on_one_pod_are_unioned() {
    let state = format!(
        "{PODS}---{SEED}---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: db-out, namespace: app}}
spec:
  podSelector: {{matchLabels: {{app: crawler}}}}
  policyTypes: [Egress, Ingress]
  egress: [{{to: [{{ipBlock: {{cidr: 10.1.0.0/16}}}}], ports: [{{port: 5432}}]}}]
  ingress: [{{from: [{{podSelector: {{matchLabels: {{app: web}}}}}}]}}]
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {{name: crawler-in, namespace: app}}
spec:
  endpointSelector: {{matchLabels: {{app: crawler}}}}
  ingress: [{{fromEndpoints: [{{matchLabels: {{io.kubernetes.pod.namespace: other}}}}], toPorts: [{{ports: [{{port: \"9090\", protocol: TCP}}]}}]}}]
"
    );
    let v = |from: &str, to: &str, port, proto| verdict(&state, from, to, port, proto).0;
    assert!(
        v("app/crawler", "10.1.2.3", 5432, L4::Tcp),
        "the NetworkPolicy's ipBlock"
    );
    assert!(!v("app/crawler", "10.2.0.1", 5432, L4::Tcp));
    assert!(
        v("app/crawler", "kube-system/coredns", 53, L4::Udp),
        "the CNP's peer"
    );
    assert!(!v("app/crawler", "kube-system/coredns", 5432, L4::Tcp));
    assert!(
        v("app/web", "app/crawler", 80, L4::Tcp),
        "ingress: the NetworkPolicy"
    );
    assert!(
        v("other/db", "app/crawler", 9090, L4::Tcp),
        "ingress: the CNP"
    );
    assert!(!v("other/db", "app/crawler", 9091, L4::Tcp));
    assert!(!v("app/fake-dns", "app/crawler", 9090, L4::Tcp));
    let e = engine(&state, Local::All);
    let deny = e.rendered().tables[GLOBAL_TABLE]
        .iter()
        .find(|r| r.action.to_string() == "deny")
        .unwrap();
    assert_eq!(deny.origin.as_deref(), Some("app/cnp:crawler,app/db-out"));
}

#[test]
fn removing_the_cnp_opens_the_pod_again() {
    let state = format!("{PODS}---{SEED}");
    let mut e = engine(&state, Local::Node("n1".into()));
    let crawler = key("app/crawler");
    assert!(e.rendered().pods[&crawler].egress.is_some());
    let d = e
        .apply(vec![Change::Delete(
            Kind::CiliumNetworkPolicy,
            cilium::key("app", "crawler", None),
        )])
        .unwrap();
    let r = e.rendered();
    assert_eq!(r.pods[&crawler].egress, None);
    assert_eq!(r.pods[&crawler].ingress, None);
    assert_eq!(r.global, None);
    assert!(r.dns.is_empty());
    assert_eq!(d.dns, std::slice::from_ref(&crawler));
    assert!(d.removed.contains(&GLOBAL_TABLE.to_string()), "{d}");
    assert!(
        d.to_string().contains("DNS policies changed app/crawler"),
        "{d}"
    );
    assert_eq!(r, engine(PODS, Local::Node("n1".into())).rendered());
    assert!(verdict(PODS, "app/crawler", "192.0.2.1", 443, L4::Tcp).0);

    // The same through a reload of the state without it, and back.
    let mut e = engine(&state, Local::Node("n1".into()));
    let d = e.reload(objects(PODS)).unwrap();
    assert_eq!(d.dns, std::slice::from_ref(&crawler));
    assert_eq!(
        e.rendered(),
        engine(PODS, Local::Node("n1".into())).rendered()
    );
    let d = e.reload(objects(&state)).unwrap();
    assert_eq!(d.dns, [crawler]);
    assert_eq!(
        e.rendered(),
        engine(&state, Local::Node("n1".into())).rendered()
    );
}

/// Applies `change` and checks the engine against a new one over the same cache.
fn step(e: &mut Engine, change: Change, what: &str) {
    let before = e.rendered().clone();
    let diff = e
        .apply(vec![change])
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    let full = Engine::new(e.cache.clone(), e.local.clone()).unwrap();
    assert_eq!(
        e.rendered(),
        full.rendered(),
        "{what}: engine vs new engine"
    );
    assert_eq!(
        diff,
        e.rendered().diff(&before),
        "{what}: diff vs full diff"
    );
    assert_eq!(
        diff.is_empty(),
        &before == e.rendered(),
        "{what}: empty diff"
    );
}

fn one(text: &str) -> Object {
    objects(text).remove(0)
}

#[test]
fn incremental_changes_match_a_full_render() {
    for local in [
        Local::All,
        Local::Node("n1".into()),
        Local::Node("n2".into()),
    ] {
        let mut e = engine(PODS, local.clone());
        let cnp = |dns: &str, selector: &str| {
            one(&format!(
                "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {{name: p, namespace: app}}\nspec:\n  endpointSelector: {selector}\n  egress:\n  - toEndpoints: [{{matchLabels: {{io.cilium.k8s.namespace.labels.team: red}}}}]\n  - toFQDNs: [{{matchPattern: \"*.example.com\"}}]\n    toPorts: [{{ports: [{{port: \"443\"}}], rules: {{dns: [{{matchPattern: \"{dns}\"}}]}}}}]\n"
            ))
        };
        step(
            &mut e,
            Change::Upsert(cnp("*.example.com", "{matchLabels: {app: crawler}}")),
            "CNP added",
        );
        step(
            &mut e,
            Change::Upsert(cnp("api.example.com", "{matchLabels: {app: crawler}}")),
            "its DNS rules changed",
        );
        step(
            &mut e,
            Change::Upsert(cnp("api.example.com", "{}")),
            "it selects every pod of the namespace",
        );
        step(
            &mut e,
            Change::Upsert(one(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: new, namespace: app, labels: {app: new}}\nspec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.0.0.10}\n",
            )),
            "a pod added",
        );
        step(
            &mut e,
            Change::Upsert(one(
                "apiVersion: v1\nkind: Namespace\nmetadata: {name: app, labels: {team: blue}}\n",
            )),
            "the namespace's label changed (toEndpoints by namespace label)",
        );
        step(
            &mut e,
            Change::Upsert(cnp("api.example.com", "{matchLabels: {app: new}}")),
            "it selects the new pod only",
        );
        step(
            &mut e,
            Change::Upsert(one(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: new, namespace: app, labels: {app: old}, annotations: {ferrule.io/port: p-new}}\nspec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.0.0.10}\n",
            )),
            "the pod leaves the selector",
        );
        step(
            &mut e,
            Change::Upsert(one(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: new, namespace: app, labels: {app: new}, annotations: {ferrule.io/port: p-new}}\nspec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.0.0.10}\n",
            )),
            "and comes back on its own port",
        );
        step(
            &mut e,
            Change::Delete(Kind::Pod, key("app/new")),
            "the pod removed",
        );
        step(&mut e, Change::Upsert(one(SEED)), "the seed's policy added");
        step(
            &mut e,
            Change::Delete(Kind::CiliumNetworkPolicy, cilium::key("app", "p", None)),
            "the first CNP removed",
        );
        step(
            &mut e,
            Change::Delete(
                Kind::CiliumNetworkPolicy,
                cilium::key("app", "crawler", None),
            ),
            "the seed's removed",
        );
        assert_eq!(e.rendered(), engine(PODS, local).rendered());
    }
}

#[test]
fn the_rendering_round_trips_through_acl_apply() {
    let state = format!("{PODS}---{SEED}");
    for local in [
        Local::All,
        Local::Node("n1".into()),
        Local::Node("n2".into()),
    ] {
        let apply = engine(&state, local).rendered().to_apply();
        let again = AclApply::from_params(&apply.to_value(), None).unwrap();
        assert_eq!(again, apply);
    }
    let apply = engine(&state, Local::All).rendered().to_apply();
    assert_eq!(apply.dns.len(), 1);
    assert!(apply.tables.iter().any(|t| t
        .rules
        .iter()
        .any(|r| r.dst_selector.as_deref() == Some("fqdn:www.cilium.io"))));
}

#[test]
fn random_changes_of_cilium_policies_match_a_full_render() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let cnps: Vec<Object> = [
        "{name: a, namespace: app}\nspec:\n  endpointSelector: {matchLabels: {app: crawler}}\n  egress: [{toFQDNs: [{matchName: a.example.com}], toPorts: [{ports: [{port: \"443\"}], rules: {dns: [{matchPattern: \"*.example.com\"}]}}]}]",
        "{name: a, namespace: app}\nspec:\n  endpointSelector: {}\n  egress: [{toEndpoints: [{matchLabels: {k8s:io.kubernetes.pod.namespace: kube-system}}], toPorts: [{ports: [{port: \"53\", protocol: UDP}], rules: {dns: [{matchPattern: \"*\"}]}}]}]",
        "{name: b, namespace: app}\nspec:\n  endpointSelector: {matchLabels: {app: web}}\n  egress: [{toCIDRSet: [{cidr: 10.0.0.0/24, except: [10.0.0.0/30]}]}, {toEndpoints: [{}]}]\n  ingress: [{fromEndpoints: [{matchLabels: {app: crawler}}]}]",
        "{name: b, namespace: app}\nspec:\n  endpointSelector: {matchLabels: {app: web}}\n  egress: [{toPorts: [{ports: [{port: http}], rules: {dns: [{matchName: web.example.com}]}}]}]",
        "{name: c, namespace: other}\nspecs:\n- endpointSelector: {}\n  egress: [{toEndpoints: [{matchLabels: {io.cilium.k8s.namespace.labels.team: red, io.kubernetes.pod.namespace: app}}]}]\n- endpointSelector: {matchLabels: {app: db}}\n  egress: [{toCIDR: [\"fd00::/8\"], toPorts: [{ports: [{port: \"53\"}], rules: {dns: [{matchName: db.example.com}]}}]}]",
    ]
    .iter()
    .flat_map(|m| objects(&format!("apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {m}\n")))
    .collect();
    let pods: Vec<Object> = [
        "{name: crawler, namespace: app, labels: {app: crawler}}\nspec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.0.0.1}",
        "{name: crawler, namespace: app, labels: {app: web}}\nspec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.0.0.1}",
        "{name: crawler, namespace: app, labels: {app: crawler}}\nspec: {nodeName: n2, containers: [{name: c}]}\nstatus: {podIPs: [{ip: 10.0.0.1}, {ip: \"fd00::1\"}]}",
        "{name: db, namespace: other, labels: {app: db}}\nspec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIPs: [{ip: 10.0.0.9}, {ip: \"fd00::9\"}]}",
        "{name: db, namespace: other, labels: {app: db}, annotations: {ferrule.io/port: db-0}}\nspec: {nodeName: n1, containers: [{name: c}]}\nstatus: {podIP: 10.0.0.9}",
    ]
    .iter()
    .flat_map(|m| objects(&format!("apiVersion: v1\nkind: Pod\nmetadata: {m}\n")))
    .collect();
    let namespaces = objects(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: app, labels: {team: red}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: app, labels: {team: blue}}\n",
    );
    let mut rng = StdRng::seed_from_u64(22);
    for local in [Local::Node("n1".into()), Local::All] {
        let mut e = engine(PODS, local.clone());
        for i in 0..150 {
            let pool = match rng.gen_range(0..3) {
                0 => &cnps,
                1 => &pods,
                _ => &namespaces,
            };
            let o = pool[rng.gen_range(0..pool.len())].clone();
            let change = if rng.gen_bool(0.25) && !matches!(o, Object::Namespace(_)) {
                let (kind, key) = o.id();
                Change::Delete(kind, key)
            } else {
                Change::Upsert(o)
            };
            step(&mut e, change, &format!("{local:?} change {i}"));
        }
    }
}
