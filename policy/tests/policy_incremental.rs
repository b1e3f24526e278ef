//! The policy engine's incremental caches against a render from scratch: after every
//! change of a scripted and of a random sequence — named ports of targets and peers,
//! namespace labels, policy edits and removals, pod addresses, pods moving nodes,
//! pods sharing a configuration then diverging, pods leaving and coming back, a
//! rejected state and its repair — the engine's tables equal those rendered directly
//! by the configurator and renderer (no cache) and those of a new engine, and its
//! diff is empty exactly when nothing changed.

use ferrule_policy::cache::{parse_text, Cache, Key, Kind, NamedPort, Object, L4};
use ferrule_policy::configurator::configure;
use ferrule_policy::processor::Processor;
use ferrule_policy::renderer::{render, LocalPod, Rendered};
use ferrule_policy::{Change, Engine, Local};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::net::IpAddr;

/// The tables of `local` rendered from scratch, without the engine's caches.
fn reference(cache: &Cache, local: &Local) -> Rendered {
    let processor = Processor::new(cache);
    let pods: Vec<_> = cache
        .pods
        .values()
        .filter(|p| {
            p.is_active()
                && match local {
                    Local::All => true,
                    Local::Node(n) => p.node.as_deref().unwrap_or("") == n,
                }
        })
        .map(|p| (p, configure(cache, &processor, &p.key)))
        .collect();
    let local_pods: Vec<LocalPod<'_>> = pods
        .iter()
        .map(|(pod, rules)| LocalPod { pod, rules })
        .collect();
    render(&local_pods)
}

/// Applies `change` and checks the engine against a render from scratch; whether the
/// change was accepted.
fn step(e: &mut Engine, change: Change, what: &str) -> bool {
    let before = e.rendered().clone();
    let result = e.apply(vec![change]);
    let full = Engine::new(e.cache.clone(), e.local.clone());
    match result {
        Ok(diff) => {
            let full = full.unwrap_or_else(|err| panic!("{what}: the full render fails: {err}"));
            assert_eq!(
                e.rendered(),
                full.rendered(),
                "{what}: engine vs new engine"
            );
            assert_eq!(
                e.rendered(),
                &reference(&e.cache, &e.local),
                "{what}: engine vs reference"
            );
            assert_eq!(diff.is_empty(), &before == e.rendered(), "{what}: diff");
            assert_eq!(
                diff,
                e.rendered().diff(&before),
                "{what}: diff vs full diff"
            );
            true
        }
        Err(err) => {
            assert!(full.is_err(), "{what}: only the engine fails: {err}");
            assert_eq!(e.rendered(), &before, "{what}: the tables in force stay");
            false
        }
    }
}

const STATE: &str = "
apiVersion: v1
kind: Namespace
metadata: {name: a, labels: {team: red}}
---
apiVersion: v1
kind: Namespace
metadata: {name: b, labels: {team: blue}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-in, namespace: a}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{port: http}]
  - from: [{namespaceSelector: {matchLabels: {team: blue}}}]
    ports: [{port: 9000, endPort: 9010}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: client-out, namespace: a}
spec:
  podSelector: {matchLabels: {app: client}}
  policyTypes: [Egress]
  egress:
  - to: [{podSelector: {matchLabels: {app: web}}}]
    ports: [{port: http}]
  - to: [{namespaceSelector: {matchLabels: {team: blue}}, podSelector: {matchLabels: {app: dns}}}]
    ports: [{port: 53, protocol: UDP}]
  - to: [{ipBlock: {cidr: 10.200.0.0/16, except: [10.200.1.0/24]}}]
    ports: [{port: 443}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: any-metrics, namespace: a}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Egress]
  egress:
  - ports: [{port: metrics}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: b}
spec: {podSelector: {}, policyTypes: [Ingress]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: dns-in, namespace: b}
spec:
  podSelector: {matchLabels: {app: dns}}
  ingress: [{from: [{namespaceSelector: {}}], ports: [{port: 53, protocol: UDP}]}]
";

fn pod(ns: &str, name: &str, app: &str, node: &str, ip: &str, http: u16) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {{app: {app}}}}}\n\
         spec: {{nodeName: {node}, containers: [{{name: c, ports: [{{name: http, containerPort: {http}}}, {{name: metrics, containerPort: 9090}}]}}]}}\n\
         status: {{podIP: {ip}}}\n"
    )
}

fn cluster() -> Cache {
    let mut text = STATE.to_string();
    for i in 0..4 {
        text += &pod(
            "a",
            &format!("web{i}"),
            "web",
            ["n1", "n2"][i % 2],
            &format!("10.1.0.{}", 10 + i),
            80,
        );
        text += &pod(
            "a",
            &format!("client{i}"),
            "client",
            ["n1", "n2"][i % 2],
            &format!("10.1.0.{}", 20 + i),
            80,
        );
        text += &pod(
            "b",
            &format!("dns{i}"),
            "dns",
            ["n1", "n2"][i % 2],
            &format!("10.2.0.{}", 10 + i),
            80,
        );
        text += &pod(
            "b",
            &format!("other{i}"),
            "other",
            "n1",
            &format!("10.2.0.{}", 20 + i),
            80,
        );
    }
    let (objects, warnings) = parse_text(&text, "test").expect("parse");
    assert!(warnings.is_empty(), "{warnings:?}");
    Cache::from_objects(objects)
}

fn get_pod(e: &Engine, ns: &str, name: &str) -> ferrule_policy::cache::Pod {
    e.cache.pods[&Key::new(ns, name)].clone()
}

fn upsert_pod(p: ferrule_policy::cache::Pod) -> Change {
    Change::Upsert(Object::Pod(p))
}

fn set_http(p: &mut ferrule_policy::cache::Pod, port: u16) {
    p.named_ports.retain(|n| n.name != "http");
    p.named_ports.push(NamedPort {
        name: "http".into(),
        port,
        proto: L4::Tcp,
    });
}

#[test]
fn scripted_changes_keep_the_caches_exact() {
    for local in [Local::Node("n1".into()), Local::All] {
        let mut e = Engine::new(cluster(), local.clone()).unwrap();
        assert_eq!(e.rendered(), &reference(&e.cache, &local));

        // Two web pods share a configuration; one's named port diverges, comes back.
        let mut w = get_pod(&e, "a", "web0");
        set_http(&mut w, 8080);
        step(&mut e, upsert_pod(w.clone()), "target's named port");
        set_http(&mut w, 80);
        step(&mut e, upsert_pod(w), "target's named port back");

        // A peer's named port (egress named ports resolve on the peer; the all-peers
        // egress rule on every pod).
        let mut w = get_pod(&e, "a", "web1");
        set_http(&mut w, 8081);
        step(&mut e, upsert_pod(w), "peer's named port");
        let mut c = get_pod(&e, "a", "client1");
        c.named_ports.retain(|n| n.name != "metrics");
        step(
            &mut e,
            upsert_pod(c),
            "a pod loses the all-peers named port",
        );

        // Sharing, then diverging by a label.
        let mut c = get_pod(&e, "a", "client0");
        c.labels.insert("app".into(), "web".into());
        step(&mut e, upsert_pod(c.clone()), "client0 becomes a web pod");
        c.labels.insert("app".into(), "client".into());
        step(&mut e, upsert_pod(c), "client0 back");

        // Namespace labels.
        let mut ns = e.cache.namespaces["a"].clone();
        ns.labels.insert("team".into(), "blue".into());
        step(
            &mut e,
            Change::Upsert(Object::Namespace(ns)),
            "namespace a joins blue",
        );
        let mut ns = e.cache.namespaces["b"].clone();
        ns.labels.insert("team".into(), "green".into());
        step(
            &mut e,
            Change::Upsert(Object::Namespace(ns)),
            "namespace b leaves blue",
        );

        // Policy edits and removals.
        let key = Key::new("a", "client-out");
        let mut p = e.cache.policies[&key].clone();
        if let Some(rules) = p.egress.as_mut() {
            rules.truncate(1);
        }
        step(&mut e, Change::Upsert(Object::Policy(p)), "policy edit");
        step(
            &mut e,
            Change::Delete(Kind::NetworkPolicy, key),
            "policy removed",
        );
        step(
            &mut e,
            Change::Delete(Kind::NetworkPolicy, Key::new("a", "web-in")),
            "ingress policy removed",
        );

        // Addresses, nodes, phases.
        let mut d = get_pod(&e, "b", "dns0");
        d.ips = vec!["10.2.9.9".parse::<IpAddr>().unwrap()];
        step(&mut e, upsert_pod(d.clone()), "peer's address");
        d.ips.push("fd00::9".parse().unwrap());
        step(&mut e, upsert_pod(d.clone()), "dual stack");
        d.node = Some("n2".into());
        step(&mut e, upsert_pod(d.clone()), "pod moves to n2");
        d.node = Some("n1".into());
        step(&mut e, upsert_pod(d.clone()), "pod moves back");
        d.terminated = true;
        step(&mut e, upsert_pod(d.clone()), "pod finished");
        d.terminated = false;
        d.ips.clear();
        step(&mut e, upsert_pod(d.clone()), "pod without address");
        d.ips = vec!["10.2.0.10".parse().unwrap()];
        step(&mut e, upsert_pod(d), "address back");
        step(
            &mut e,
            Change::Delete(Kind::Pod, Key::new("a", "web2")),
            "pod deleted",
        );

        // A rejected state (two pods naming one port in their annotation), then
        // repaired.
        let mut w = get_pod(&e, "a", "web0");
        w.port = ferrule_api::acl::AttachTarget::Port("shared".into());
        assert!(step(&mut e, upsert_pod(w), "an annotated port"));
        let mut o = get_pod(&e, "b", "other1");
        o.port = ferrule_api::acl::AttachTarget::Port("shared".into());
        assert!(!step(&mut e, upsert_pod(o.clone()), "port clash"));
        o.labels.insert("app".into(), "dns".into());
        assert!(!step(&mut e, upsert_pod(o.clone()), "still clashing"));
        o.port = ferrule_api::acl::AttachTarget::Port("other1".into());
        assert!(step(&mut e, upsert_pod(o), "repaired"));
    }
}

#[test]
fn random_changes_keep_the_caches_exact() {
    let start = cluster();
    for (local, seed) in [
        (Local::Node("n1".into()), 3),
        (Local::Node("n2".into()), 11),
        (Local::All, 5),
    ] {
        let mut e = Engine::new(start.clone(), local.clone()).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        for i in 0..200 {
            let keys: Vec<Key> = start.pods.keys().cloned().collect();
            let k = keys[rng.gen_range(0..keys.len())].clone();
            let mut p = e
                .cache
                .pods
                .get(&k)
                .cloned()
                .unwrap_or_else(|| start.pods[&k].clone());
            let change = match rng.gen_range(0..8) {
                0 => {
                    let app = ["web", "client", "dns", "other"][rng.gen_range(0..4)];
                    p.labels.insert("app".into(), app.into());
                    upsert_pod(p)
                }
                1 => {
                    set_http(&mut p, [80, 8080, 8081][rng.gen_range(0..3)]);
                    upsert_pod(p)
                }
                2 => {
                    p.node = Some(["n1", "n2", "n3"][rng.gen_range(0..3)].into());
                    upsert_pod(p)
                }
                3 => {
                    p.ips = vec![format!("10.3.0.{}", rng.gen_range(0..40) + 1)
                        .parse()
                        .unwrap()];
                    upsert_pod(p)
                }
                4 => {
                    if e.cache.pods.contains_key(&k) {
                        Change::Delete(Kind::Pod, k)
                    } else {
                        upsert_pod(p)
                    }
                }
                5 => {
                    let ns = ["a", "b"][rng.gen_range(0..2)];
                    let mut n = e.cache.namespaces[ns].clone();
                    n.labels
                        .insert("team".into(), ["red", "blue"][rng.gen_range(0..2)].into());
                    Change::Upsert(Object::Namespace(n))
                }
                _ => {
                    let pk: Vec<Key> = start.policies.keys().cloned().collect();
                    let pk = pk[rng.gen_range(0..pk.len())].clone();
                    match (e.cache.policies.get(&pk), rng.gen_range(0..3)) {
                        (Some(_), 0) => Change::Delete(Kind::NetworkPolicy, pk),
                        (Some(p), _) => {
                            let mut p = p.clone();
                            if let Some(rules) = p.ingress.as_mut().or(p.egress.as_mut()) {
                                if rules.len() > 1 {
                                    rules.rotate_left(1);
                                } else {
                                    rules.clear();
                                }
                            }
                            Change::Upsert(Object::Policy(p))
                        }
                        (None, _) => Change::Upsert(Object::Policy(start.policies[&pk].clone())),
                    }
                }
            };
            step(
                &mut e,
                change.clone(),
                &format!("{local:?} step {i}: {change:?}"),
            );
        }
    }
}
