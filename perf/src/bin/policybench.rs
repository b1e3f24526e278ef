//! `ferrule-policybench`: generates a cluster of Kubernetes manifests (namespaces, pods
//! spread over nodes, NetworkPolicies of the usual shapes) and measures the policy
//! renderer: parsing, a full render of one node and of every node, and incremental
//! re-renders with diffs after a pod add, a local label change, a remote label change
//! and a policy edit. Prints table and rule counts.

use clap::Parser;
use ferrule_policy::cache::{parse_text, Cache, Key, Kind, Object, PortRef};
use ferrule_policy::{Change, Engine, Local};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "ferrule-policybench",
    about = "Benchmark the NetworkPolicy renderer"
)]
struct Args {
    /// Pods in the cluster.
    #[arg(long, default_value_t = 5000)]
    pods: usize,
    /// NetworkPolicies in the cluster (spread evenly over the namespaces).
    #[arg(long, default_value_t = 1000)]
    policies: usize,
    /// Namespaces.
    #[arg(long, default_value_t = 20)]
    namespaces: usize,
    /// Nodes the pods are spread over.
    #[arg(long, default_value_t = 50)]
    nodes: usize,
    /// Apps (label values) per namespace; pods of one app share their policies.
    #[arg(long, default_value_t = 25)]
    apps: usize,
    /// Repetitions of each incremental measurement.
    #[arg(long, default_value_t = 50)]
    rounds: usize,
    /// Skip the full render of every node (for profiling the incremental cases).
    #[arg(long)]
    skip_all_nodes: bool,
    /// Write the generated manifests to this file too.
    #[arg(long)]
    write: Option<std::path::PathBuf>,
}

/// The manifests: namespace `ns-I` (team label), pods `p-N` with app/tier labels and
/// named ports, and per namespace a default-deny, per-app ingress policies (from the
/// next app on the named port `http`, from web tiers of a team's namespaces on a port
/// range) and per-app egress policies (to the app after next on `http`, DNS to
/// kube-system's app-0, an ipBlock with an except on 443).
fn generate(a: &Args) -> String {
    let mut s = String::with_capacity(a.pods * 700);
    for n in 0..a.namespaces {
        let _ = write!(
            s,
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: ns-{n:02}, labels: {{team: t{}}}}}\n---\n",
            n % 5
        );
    }
    for p in 0..a.pods {
        let ns = p % a.namespaces;
        let app = (p / 7) % a.apps;
        let tier = ["web", "api", "db"][app % 3];
        let node = (p / 3) % a.nodes;
        let ip = format!("10.{}.{}.{}", 16 + ns, (p / 250) % 256, p % 250 + 1);
        let _ = write!(
            s,
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p-{p:05}, namespace: ns-{ns:02}, labels: {{app: app-{app}, tier: {tier}}}}}\n\
             spec: {{nodeName: node-{node:02}, containers: [{{name: c, ports: [{{name: http, containerPort: {}}}, {{name: metrics, containerPort: 9090}}]}}]}}\n\
             status: {{podIP: {ip}}}\n---\n",
            8080 + app % 3
        );
    }
    let per_ns = a.policies / a.namespaces.max(1);
    let mut made = 0;
    for n in 0..a.namespaces {
        for k in 0..per_ns {
            if made == a.policies {
                break;
            }
            made += 1;
            let head = format!(
                "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: pol-{k}, namespace: ns-{n:02}}}\nspec:\n"
            );
            if k == 0 {
                let _ = write!(
                    s,
                    "{head}  podSelector: {{}}\n  policyTypes: [Ingress]\n---\n"
                );
            } else if k <= a.apps {
                let app = k - 1;
                let _ = write!(
                    s,
                    "{head}  podSelector: {{matchLabels: {{app: app-{app}}}}}\n  ingress:\n\
                     \x20   - from: [{{podSelector: {{matchLabels: {{app: app-{}}}}}}}]\n      ports: [{{port: http}}]\n\
                     \x20   - from: [{{namespaceSelector: {{matchLabels: {{team: t{}}}}}, podSelector: {{matchExpressions: [{{key: tier, operator: In, values: [web]}}]}}}}]\n\
                     \x20     ports: [{{port: 9000, endPort: 9010}}]\n---\n",
                    (app + 1) % a.apps,
                    (n + app) % 5
                );
            } else {
                let app = (k - 1 - a.apps) % a.apps;
                let _ = write!(
                    s,
                    "{head}  podSelector: {{matchLabels: {{app: app-{app}}}}}\n  policyTypes: [Egress]\n  egress:\n\
                     \x20   - to: [{{podSelector: {{matchLabels: {{app: app-{}}}}}}}]\n      ports: [{{port: http}}]\n\
                     \x20   - to: [{{namespaceSelector: {{matchLabels: {{team: t0}}}}, podSelector: {{matchLabels: {{app: app-0}}}}}}]\n      ports: [{{port: 53, protocol: UDP}}]\n\
                     \x20   - to: [{{ipBlock: {{cidr: 10.200.0.0/16, except: [10.200.1.0/24]}}}}]\n      ports: [{{port: 443}}]\n---\n",
                    (app + 2) % a.apps
                );
            }
        }
    }
    s
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    (ms(v[v.len() / 2]), ms(v[v.len() - 1]))
}

/// The CPU time this thread has run, in nanoseconds (`/proc/thread-self/schedstat`),
/// where the kernel provides it: on a shared machine it shows the work the wall clock
/// hides under other processes' time slices.
fn cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// CPU time summed over the rounds of one case.
#[derive(Default)]
struct Cpu {
    total: u64,
    rounds: u64,
    missing: bool,
}

impl Cpu {
    fn add(&mut self, before: Option<u64>, after: Option<u64>) {
        match (before, after) {
            (Some(b), Some(a)) => {
                self.total += a.saturating_sub(b);
                self.rounds += 1;
            }
            _ => self.missing = true,
        }
    }
}

impl std::fmt::Display for Cpu {
    /// `, CPU mean X ms` (the kernel updates the count at scheduler ticks, so single
    /// rounds are coarse but the mean is not).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.missing || self.rounds == 0 {
            return Ok(());
        }
        write!(
            f,
            ", CPU mean {:.2} ms",
            self.total as f64 / self.rounds as f64 / 1e6
        )
    }
}

/// The wall-clock and CPU times of one incremental case's changes.
#[derive(Default)]
struct Timings {
    wall: Vec<Duration>,
    cpu: Cpu,
}

impl Timings {
    /// Applies `change` to `engine`, timed; returns the diff as text.
    fn apply(&mut self, engine: &mut Engine, change: Change) -> anyhow::Result<String> {
        let cpu0 = cpu_ns();
        let t = Instant::now();
        let diff = engine
            .apply(vec![change])
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        self.wall.push(t.elapsed());
        self.cpu.add(cpu0, cpu_ns());
        Ok(diff.to_string())
    }
}

impl std::fmt::Display for Timings {
    /// `median X ms (max Y)` and the CPU mean.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (m, max) = median(self.wall.clone());
        write!(f, "median {m:.2} ms (max {max:.2}){}", self.cpu)
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let text = generate(&a);
    if let Some(path) = &a.write {
        std::fs::write(path, &text)?;
    }
    let t = Instant::now();
    let (objects, warnings) = parse_text(&text, "generated").map_err(|e| anyhow::anyhow!("{e}"))?;
    let parse = t.elapsed();
    anyhow::ensure!(warnings.is_empty(), "{warnings:?}");
    let cache = Cache::from_objects(objects);
    println!(
        "cluster: {} namespaces, {} pods on {} nodes, {} policies ({} KiB of YAML, parsed in {:.0} ms)",
        cache.namespace_names().len(),
        cache.pods.len(),
        a.nodes,
        cache.policies.len(),
        text.len() / 1024,
        ms(parse)
    );

    // Full render of one node, as the agent does at start.
    let node = Local::Node("node-00".into());
    let mut full = Vec::new();
    let mut engine = None;
    for _ in 0..5 {
        let t = Instant::now();
        let e = Engine::new(cache.clone(), node.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
        full.push(t.elapsed());
        engine = Some(e);
    }
    let Some(mut engine) = engine else {
        anyhow::bail!("no render");
    };
    let (full_ms, full_max) = median(full);
    let r = engine.rendered();
    let with_tables = r.pods.values().filter(|t| t.egress.is_some()).count();
    let egress_tables: std::collections::BTreeSet<&String> =
        r.pods.values().filter_map(|t| t.egress.as_ref()).collect();
    println!(
        "full render node-00 ({} local pods): median {full_ms:.1} ms (max {full_max:.1}) — \
         {} tables ({} egress tables for {} pods with tables, reflect-all, global), {} rules (global {} rules)",
        r.pods.len(),
        r.tables.len(),
        egress_tables.len(),
        with_tables,
        r.rule_count(),
        r.tables.get("global").map_or(0, Vec::len)
    );
    println!(
        "acl.apply size node-00: {} KiB of JSON",
        serde_json::to_vec(&r.to_apply())?.len() / 1024
    );

    // Every node, one after the other (the whole cluster's tables).
    let t = Instant::now();
    let mut tables = 0;
    let mut rules = 0;
    for n in (0..a.nodes).filter(|_| !a.skip_all_nodes) {
        let e = Engine::new(cache.clone(), Local::Node(format!("node-{n:02}")))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        tables += e.rendered().tables.len();
        rules += e.rendered().rule_count();
    }
    println!(
        "full render of all {} nodes: {:.0} ms — {tables} tables, {rules} rules in all",
        a.nodes,
        ms(t.elapsed())
    );

    // Incremental: a pod added on node-00 and removed again.
    let template = cache
        .pods
        .values()
        .find(|p| p.node.as_deref() == Some("node-00"))
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no pod on node-00"))?;
    let mut added = Timings::default();
    let mut last_diff = String::new();
    for i in 0..a.rounds {
        let mut p = template.clone();
        p.key = Key::new(&template.key.namespace, &format!("new-{i}"));
        p.port = ferrule_api::acl::AttachTarget::Pod(format!("{}/new-{i}", template.key.namespace));
        p.ips = vec![format!("10.250.{}.{}", i / 200, i % 200 + 1).parse()?];
        let key = p.key.clone();
        last_diff = added.apply(&mut engine, Change::Upsert(Object::Pod(p)))?;
        engine
            .apply(vec![Change::Delete(Kind::Pod, key)])
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    println!("pod add on node-00 + re-render + diff: {added}; {last_diff}");

    // Incremental: label changes (app label flips) of a local and of a remote pod.
    for (what, pod) in [
        ("local", template.key.clone()),
        (
            "remote",
            cache
                .pods
                .values()
                .find(|p| p.node.as_deref() == Some("node-01"))
                .map(|p| p.key.clone())
                .ok_or_else(|| anyhow::anyhow!("no pod on node-01"))?,
        ),
    ] {
        let original = engine.cache.pods[&pod].clone();
        let mut times = Timings::default();
        for i in 0..a.rounds {
            let mut p = original.clone();
            if i % 2 == 0 {
                p.labels.insert("app".into(), "app-7".into());
            }
            let diff = times.apply(&mut engine, Change::Upsert(Object::Pod(p)))?;
            if i == 0 {
                last_diff = diff;
            }
        }
        println!("label change of a {what} pod + re-render + diff: {times}; first: {last_diff}");
    }

    // Incremental: a policy edit (the port range of the per-app ingress policy of the
    // template pod's app widens and narrows again).
    let app = template.labels.get("app").cloned().unwrap_or_default();
    let policy = engine
        .cache
        .policies
        .values()
        .find(|p| {
            p.key.namespace == template.key.namespace
                && p.ingress.as_ref().is_some_and(|r| r.len() == 2)
                && p.pod_selector
                    .labels
                    .iter()
                    .any(|(k, v)| k == "app" && *v == app)
        })
        .cloned();
    if let Some(original) = policy {
        let mut times = Timings::default();
        for i in 0..a.rounds {
            let mut p = original.clone();
            if i % 2 == 0 {
                for rule in p.ingress.iter_mut().flatten() {
                    for spec in rule.ports.iter_mut().flatten() {
                        if let PortRef::Range(r) = &mut spec.port {
                            r.hi = r.hi.saturating_add(10);
                        }
                    }
                }
            }
            let diff = times.apply(&mut engine, Change::Upsert(Object::Policy(p)))?;
            if i == 0 {
                last_diff = diff;
            }
        }
        println!("edit of a policy applying to node-00 pods + re-render + diff: {times}; first: {last_diff}");
    }
    Ok(())
}
