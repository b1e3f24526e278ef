//! NetworkPolicy rendering end to end without a daemon: the upstream Kubernetes e2e
//! scenarios (fixtures/policy/upstream, truth tables written by hand in truth.py)
//! answered by `ferrulectl policy verdict --queries` from the rendered tables; the
//! rendered output accepted by the daemon's own `acl.apply` validation; incremental
//! re-rendering equal to a full render after every change; named ports, IPv6,
//! postponed and host-network pods; errors naming the object and field.

use ferrule_daemon::acl::{parse_apply, AclPort};
use ferrule_dataplane::snapshot::PortRole;
use ferrule_policy::cache::{load_path, parse_text, Cache, Key, Kind, Object, L4};
use ferrule_policy::verdict::{Endpoint, Verdicts};
use ferrule_policy::{Change, Engine, Local};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/policy")
}

fn ctl(args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrulectl"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ferrulectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let o = child.wait_with_output().expect("wait");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A state directory with the upstream cluster and one scenario's policies.
fn scenario_state(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = fixtures().join("upstream");
    std::fs::copy(up.join("cluster.yaml"), dir.path().join("0-cluster.yaml")).expect("copy");
    std::fs::copy(
        up.join(format!("{name}.yaml")),
        dir.path().join("1-policies.yaml"),
    )
    .expect("copy");
    dir
}

fn scenarios() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures().join("upstream"))
        .expect("fixtures")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".truth").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 20, "{names:?}");
    names
}

/// The ports a daemon would have for `rendered`: every attached port plus an uplink.
/// A port for every attachment of `apply`: the port it names, or a port that records
/// the pod it names; and an uplink.
fn ports_of(apply: &Value) -> Vec<AclPort> {
    let mut ports: Vec<AclPort> = apply["attach"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| match (a["port"].as_str(), a["pod"].as_str()) {
            (Some(port), _) => Some(AclPort {
                name: port.to_string(),
                role: PortRole::Pod,
                pod: None,
                locked: false,
            }),
            (None, Some(pod)) => Some(AclPort {
                name: pod.replace('/', "-"),
                role: PortRole::Pod,
                pod: Some(pod.to_string()),
                locked: false,
            }),
            _ => None,
        })
        .collect();
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    ports.dedup_by(|a, b| a.name == b.name);
    ports.push(AclPort {
        name: "uplink0".into(),
        role: PortRole::Uplink,
        pod: None,
        locked: false,
    });
    ports
}

fn check_apply(apply: &Value, what: &str) {
    let desired = parse_apply(apply, &ports_of(apply))
        .unwrap_or_else(|e| panic!("{what}: acl.apply refuses the rendering: {e:?}\n{apply:#}"));
    assert_eq!(
        desired.tables.len(),
        apply["tables"].as_array().map_or(0, Vec::len)
    );
    assert_eq!(
        desired.attach.len(),
        apply["attach"].as_array().map_or(0, Vec::len),
        "{what}: every attachment reaches a port"
    );
}

#[test]
fn upstream_scenarios_match_their_truth_tables() {
    let mut failures = Vec::new();
    for name in scenarios() {
        let state = scenario_state(&name);
        let truth = std::fs::read_to_string(fixtures().join(format!("upstream/{name}.truth")))
            .expect("truth");
        let queries: String = truth
            .lines()
            .map(|l| format!("{}\n", l.rsplit_once(' ').expect("verdict").0))
            .collect();
        let state_arg = state.path().to_string_lossy().into_owned();
        let (ok, out, err) = ctl(
            &["policy", "verdict", "--state", &state_arg, "--queries", "-"],
            &queries,
        );
        assert!(ok, "{name}: {err}");
        for (want, got) in truth.lines().zip(out.lines()) {
            if want != got {
                failures.push(format!("{name}: expected `{want}`, got `{got}`"));
            }
        }
        assert_eq!(truth.lines().count(), out.lines().count(), "{name}");
    }
    assert!(
        failures.is_empty(),
        "{} wrong verdicts:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_rendering_passes_the_daemons_acl_apply_validation() {
    for name in scenarios() {
        let state = scenario_state(&name);
        let (objects, _) = load_path(state.path()).expect("load");
        let cache = Cache::from_objects(objects);
        for node in [None, Some("node-1"), Some("node-2")] {
            let e = Engine::new(cache.clone(), Local::from_option(node)).expect("render");
            check_apply(
                &e.rendered().to_apply().to_value(),
                &format!("{name} {node:?}"),
            );
            for rules in e.rendered().tables.values() {
                assert!(
                    rules.iter().all(|r| r.origin.is_some()),
                    "{name}: every rule has an origin"
                );
            }
        }
    }
    // The CLI's YAML and JSON are the same request, and pass too.
    let state = scenario_state("deny_all_with_exceptions_both_directions");
    let s = state.path().to_string_lossy().into_owned();
    let (ok, json, err) = ctl(
        &[
            "policy", "render", "--state", &s, "--node", "node-1", "--json",
        ],
        "",
    );
    assert!(ok, "{err}");
    let json: Value = serde_json::from_str(&json).expect("JSON");
    let (ok, yaml, err) = ctl(&["policy", "render", "--state", &s, "--node", "node-1"], "");
    assert!(ok, "{err}");
    assert!(yaml.starts_with("# ferrulectl policy render: "), "{yaml}");
    let yaml = ferrule_ctl::acl::parse(&yaml, false).expect("YAML");
    assert_eq!(json, yaml);
    check_apply(&json, "CLI");
    let origins: Vec<&str> = json["tables"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["rules"].as_array().unwrap())
        .filter_map(|r| r["origin"].as_str())
        .collect();
    assert!(origins.contains(&"x/a-to-y-80"), "{origins:?}");
    assert!(origins.contains(&"x/deny-all"), "{origins:?}");
    assert!(
        !origins.contains(&"x/b-from-z"),
        "x/b is on node-2: {origins:?}"
    );
    // node-1 holds x/a and x/c, whose egress is restricted: a global table.
    assert_eq!(json["global"], "global");
    let attach = json["attach"].as_array().unwrap();
    assert!(attach
        .iter()
        .any(|a| a["port"] == "x-a" && a["direction"] == "ingress" && a["table"] == "reflect-all"));
    assert!(
        !attach.iter().any(|a| a["port"] == "x-b"),
        "x/b is on node-2"
    );
}

#[test]
fn pods_with_identical_rules_share_one_table() {
    let state = scenario_state("default_deny_ingress");
    let (objects, _) = load_path(state.path()).unwrap();
    let e = Engine::new(Cache::from_objects(objects), Local::All).unwrap();
    let r = e.rendered();
    let egress: Vec<&String> = ["a", "b", "c"]
        .iter()
        .filter_map(|p| r.pods[&Key::new("x", p)].egress.as_ref())
        .collect();
    assert_eq!(egress.len(), 3);
    assert!(egress.iter().all(|t| *t == egress[0]), "{egress:?}");
    assert_eq!(r.tables[egress[0]].len(), 1, "just the deny");
    assert_eq!(
        r.tables.len(),
        2,
        "the shared table and reflect-all: {:?}",
        r.tables.keys()
    );
    assert!(r.pods[&Key::new("y", "a")].egress.is_none());
}

fn state(text: &str) -> Cache {
    let (objects, _) = parse_text(text, "test").expect("parse");
    Cache::from_objects(objects)
}

fn pod(ns: &str, name: &str, labels: &str, node: &str, ips: &[&str], ports: &str) -> String {
    let ips: Vec<String> = ips.iter().map(|i| format!("{{ip: \"{i}\"}}")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {{{labels}}}}}\n\
         spec: {{nodeName: {node}, containers: [{{name: c, ports: [{ports}]}}]}}\n\
         status: {{podIPs: [{}]}}\n---\n",
        ips.join(", ")
    )
}

fn verdict(v: &mut Verdicts, from: &str, to: &str, port: u16, proto: L4) -> bool {
    let r = v
        .verdict(
            &Endpoint::parse(from).unwrap(),
            &Endpoint::parse(to).unwrap(),
            port,
            proto,
        )
        .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
    r.allowed
}

#[test]
fn a_named_port_resolves_per_destination_pod() {
    let mut text = String::new();
    text += &pod("p", "client", "app: client", "n1", &["10.2.0.1"], "");
    text += &pod(
        "p",
        "web1",
        "app: web",
        "n1",
        &["10.2.0.2"],
        "{name: web, containerPort: 80}",
    );
    text += &pod(
        "p",
        "web2",
        "app: web",
        "n2",
        &["10.2.0.3"],
        "{name: web, containerPort: 8080}, {name: dns, containerPort: 53, protocol: UDP}",
    );
    text += "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: client-web, namespace: p}\n\
             spec: {podSelector: {matchLabels: {app: client}}, policyTypes: [Egress], egress: [{ports: [{port: web}, {port: dns, protocol: UDP}]}]}\n---\n";
    text += "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: web-in, namespace: p}\n\
             spec: {podSelector: {matchLabels: {app: web}}, ingress: [{ports: [{port: web}]}]}\n";
    let mut v = Verdicts::new(state(&text));
    assert!(verdict(&mut v, "p/client", "p/web1", 80, L4::Tcp));
    assert!(!verdict(&mut v, "p/client", "p/web1", 8080, L4::Tcp));
    assert!(verdict(&mut v, "p/client", "p/web2", 8080, L4::Tcp));
    assert!(!verdict(&mut v, "p/client", "p/web2", 80, L4::Tcp));
    assert!(
        !verdict(&mut v, "p/client", "p/web2", 53, L4::Udp),
        "web2's ingress: web only"
    );
    assert!(!verdict(&mut v, "p/web1", "p/web2", 80, L4::Tcp));
    assert!(verdict(&mut v, "p/web1", "p/web2", 8080, L4::Tcp));
}

#[test]
fn ipv6_blocks_postponed_and_host_network_pods() {
    let mut text = String::new();
    text += &pod("v6", "a", "app: a", "n1", &["fd00:2::1"], "");
    text += &pod("v6", "b", "app: b", "n1", &["fd00:2::2"], "");
    text += &pod("v6", "c", "app: c", "n2", &["fd00:3::3"], "");
    text += "apiVersion: v1\nkind: Pod\nmetadata: {name: pending, namespace: v6, labels: {app: a}}\nspec: {nodeName: n1, containers: [{name: c}]}\n---\n";
    text += "apiVersion: v1\nkind: Pod\nmetadata: {name: host, namespace: v6, labels: {app: a}}\nspec: {nodeName: n1, hostNetwork: true, containers: [{name: c}]}\nstatus: {podIP: 192.0.2.10}\n---\n";
    text += "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: a-in, namespace: v6}\n\
             spec: {podSelector: {matchLabels: {app: a}}, ingress: [{from: [{ipBlock: {cidr: \"fd00:2::/64\", except: [\"fd00:2::2/128\"]}}]}]}\n";
    let cache = state(&text);
    let e = Engine::new(cache.clone(), Local::Node("n1".into())).unwrap();
    let r = e.rendered();
    assert!(r.pods.contains_key(&Key::new("v6", "a")));
    assert!(
        !r.pods.contains_key(&Key::new("v6", "pending")),
        "no IP yet: postponed"
    );
    assert!(
        !r.pods.contains_key(&Key::new("v6", "host")),
        "host network: not a target"
    );
    check_apply(&r.to_apply().to_value(), "v6");
    let mut v = Verdicts::new(cache);
    assert!(!verdict(&mut v, "v6/b", "v6/a", 80, L4::Tcp), "excepted");
    assert!(
        !verdict(&mut v, "v6/c", "v6/a", 80, L4::Tcp),
        "outside the block"
    );
    assert!(
        verdict(&mut v, "fd00:2::9", "v6/a", 80, L4::Tcp),
        "inside the block"
    );
    assert!(verdict(&mut v, "v6/a", "v6/c", 80, L4::Sctp));
    assert!(v
        .verdict(
            &Endpoint::parse("v6/pending").unwrap(),
            &Endpoint::parse("v6/a").unwrap(),
            80,
            L4::Tcp
        )
        .is_err());
    assert!(v
        .verdict(
            &Endpoint::parse("v6/host").unwrap(),
            &Endpoint::parse("v6/a").unwrap(),
            80,
            L4::Tcp
        )
        .is_err());
}

#[test]
fn incremental_renders_equal_full_renders_after_every_change() {
    let state = scenario_state("deny_all_with_exceptions_both_directions");
    let mut extra =
        std::fs::read_to_string(fixtures().join("upstream/egress_and_ingress_intersect.yaml"))
            .unwrap();
    extra = extra.replace("name: x-egress-80", "name: x-egress-80-b");
    std::fs::write(state.path().join("2-more.yaml"), extra).unwrap();
    let (objects, _) = load_path(state.path()).unwrap();
    let cache = Cache::from_objects(objects);
    for local in [Local::All, Local::Node("node-1".into())] {
        let mut e = Engine::new(cache.clone(), local.clone()).unwrap();
        let mut rng = StdRng::seed_from_u64(7);
        for step in 0..120 {
            let c = &e.cache;
            let change = match rng.gen_range(0..5) {
                0 | 1 => {
                    // Relabel a pod.
                    let keys: Vec<&Key> = c.pods.keys().collect();
                    let k = keys[rng.gen_range(0..keys.len())].clone();
                    let mut p = c.pods[&k].clone();
                    let v = ["a", "b", "c"][rng.gen_range(0..3)];
                    p.labels.insert("pod".into(), v.into());
                    Change::Upsert(Object::Pod(p))
                }
                2 => {
                    let names: Vec<&String> = c.namespaces.keys().collect();
                    let n = names[rng.gen_range(0..names.len())].clone();
                    let mut ns = c.namespaces[&n].clone();
                    let v = ["x", "y", "z"][rng.gen_range(0..3)];
                    ns.labels.insert("ns".into(), v.into());
                    Change::Upsert(Object::Namespace(ns))
                }
                3 => {
                    // Remove a pod or bring one back with a new address.
                    let keys: Vec<&Key> = cache.pods.keys().collect();
                    let k = keys[rng.gen_range(0..keys.len())].clone();
                    if c.pods.contains_key(&k) && rng.gen_range(0..2) == 0 {
                        Change::Delete(Kind::Pod, k)
                    } else {
                        let mut p = cache.pods[&k].clone();
                        if let std::net::IpAddr::V4(a) = p.ips[0] {
                            p.ips[0] =
                                std::net::IpAddr::V4(std::net::Ipv4Addr::from(u32::from(a) + 100));
                        }
                        Change::Upsert(Object::Pod(p))
                    }
                }
                _ => {
                    let keys: Vec<&Key> = cache.policies.keys().collect();
                    let k = keys[rng.gen_range(0..keys.len())].clone();
                    if c.policies.contains_key(&k) {
                        Change::Delete(Kind::NetworkPolicy, k)
                    } else {
                        Change::Upsert(Object::Policy(cache.policies[&k].clone()))
                    }
                }
            };
            let before = e.rendered().clone();
            let diff = e.apply(vec![change.clone()]).unwrap();
            let full = Engine::new(e.cache.clone(), local.clone()).unwrap();
            assert_eq!(
                e.rendered(),
                full.rendered(),
                "step {step} {local:?}: {change:?}"
            );
            assert_eq!(diff.is_empty(), &before == e.rendered(), "step {step}");
        }
    }
}

#[test]
fn a_label_change_changes_verdicts_and_the_diff_names_the_tables() {
    let state = scenario_state("pod_selector_same_namespace");
    let (objects, _) = load_path(state.path()).unwrap();
    let cache = Cache::from_objects(objects);
    let mut v = Verdicts::new(cache.clone());
    assert!(!verdict(&mut v, "x/c", "x/a", 80, L4::Tcp));
    let mut e = Engine::new(cache.clone(), Local::Node("node-1".into())).unwrap();
    let old_table = e.rendered().pods[&Key::new("x", "a")]
        .egress
        .clone()
        .unwrap();
    let mut c = cache.pods[&Key::new("x", "c")].clone();
    c.labels.insert("pod".into(), "b".into());
    let diff = e.apply(vec![Change::Upsert(Object::Pod(c))]).unwrap();
    let new_table = e.rendered().pods[&Key::new("x", "a")]
        .egress
        .clone()
        .unwrap();
    assert_ne!(old_table, new_table);
    assert_eq!(diff.added, vec![new_table]);
    assert_eq!(diff.removed, vec![old_table]);
    assert_eq!(diff.pods, vec![Key::new("x", "a")]);
    let mut v = Verdicts::new(e.cache.clone());
    assert!(verdict(&mut v, "x/c", "x/a", 80, L4::Tcp));
    assert!(!verdict(&mut v, "y/b", "x/a", 80, L4::Tcp));
}

#[test]
fn bad_input_names_the_object_and_field_and_unknown_kinds_warn() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\n\
         spec: {ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]}\n",
    )
    .unwrap();
    let s = dir.path().to_string_lossy().into_owned();
    let (ok, _, err) = ctl(&["policy", "render", "--state", &s], "");
    assert!(!ok);
    assert!(
        err.contains("NetworkPolicy x/p") && err.contains("spec.ingress[0].from[0].ipBlock.cidr"),
        "{err}"
    );
    std::fs::remove_file(dir.path().join("bad.yaml")).unwrap();
    std::fs::write(
        dir.path().join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: x}\n",
    )
    .unwrap();
    let (ok, out, err) = ctl(&["policy", "render", "--state", &s], "");
    assert!(ok, "{err}");
    assert!(
        err.contains("warning") && err.contains("skipping ConfigMap x/cm"),
        "{err}"
    );
    assert!(out.contains("tables: []"), "{out}");
    // Two local pods of one name in two namespaces: each attaches to the port that
    // records it, no annotation needed.
    let mut text = pod("x", "web", "", "n", &["10.0.0.1"], "");
    text += &pod("y", "web", "", "n", &["10.0.0.2"], "");
    text += "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: d, namespace: x}\nspec: {podSelector: {}}\n---\n";
    text += "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: d, namespace: y}\nspec: {podSelector: {}}\n";
    let engine = Engine::new(state(&text), Local::All).expect("one pod name in two namespaces");
    let apply = serde_json::to_value(engine.rendered().to_apply()).unwrap();
    let targets: Vec<&str> = apply["attach"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["pod"].as_str())
        .collect();
    assert!(
        targets.contains(&"x/web") && targets.contains(&"y/web"),
        "{apply}"
    );
    // Two pods naming one port in their annotation are still an error.
    let annotated = |ns: &str, ip: &str| {
        pod(ns, "web", "", "n", &[ip], "").replace(
            "labels: {}}",
            "labels: {}, annotations: {ferrule.io/port: shared}}",
        )
    };
    let mut text = annotated("x", "10.0.0.1");
    text += &annotated("y", "10.0.0.2");
    text += "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: d, namespace: x}\nspec: {podSelector: {}}\n---\n";
    text += "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: d, namespace: y}\nspec: {podSelector: {}}\n";
    let e = Engine::new(state(&text), Local::All)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("x/web") && e.contains("y/web") && e.contains("ferrule.io/port"),
        "{e}"
    );
    // A bad query line.
    let cluster = fixtures().join("upstream/cluster.yaml");
    let c = cluster.to_string_lossy().into_owned();
    let (ok, _, err) = ctl(
        &["policy", "verdict", "--state", &c, "--queries", "-"],
        "x/a y/b 80 TCP\nx/a y/b 99999 TCP\n",
    );
    assert!(!ok && err.contains("line 2"), "{err}");
    let (ok, out, _) = ctl(
        &[
            "policy",
            "verdict",
            "--state",
            &c,
            "--from",
            "x/a",
            "--to",
            "y/b",
            "--port",
            "80",
            "--protocol",
            "SCTP",
        ],
        "",
    );
    assert!(ok);
    assert_eq!(out, "allow\n");
}
