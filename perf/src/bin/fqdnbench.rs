//! `ferrule-fqdnbench`: how long a DNS answer takes to be in force in the data path.
//! A node state (ferruled's control-thread state, no EAL) gets a pod table allowing
//! `fqdn:*.example.test` and learns `--names` × `--ips` addresses; then each round
//! learns one new address of an existing name and publishes it
//! (`NodeState::learn_dns_answer`: the name manager, the ipcache, the identity map,
//! the snapshot swap — what the DNS proxy does before it releases an answer), timed
//! from the answer to the published generation. Side by side, in the same run, the
//! per-address alternative: the same pod table with one `/32` rule per learned
//! address, re-applied (`acl.apply`) with one more rule per new address.

use clap::Parser;
use ferrule_daemon::config::{Config, EMBEDDED_DEFAULT};
use ferrule_daemon::daemon::NodeState;
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "ferrule-fqdnbench",
    about = "Benchmark DNS-answer-to-rule-in-force latency of FQDN policy"
)]
struct Args {
    /// Names learned before measuring.
    #[arg(long, default_value_t = 10_000)]
    names: u32,
    /// Addresses per name learned before measuring.
    #[arg(long, default_value_t = 10)]
    ips: u32,
    /// Measured answers (each one new address of an existing name).
    #[arg(long, default_value_t = 10_000)]
    rounds: u32,
    /// Measured re-applies of the per-address baseline (0: skip it).
    #[arg(long, default_value_t = 20)]
    baseline_rounds: u32,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

/// The `i`-th address handed out (10.0.0.0/8 upwards, skipping nothing).
fn addr(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i))
}

fn state() -> NodeState {
    let text = format!("{EMBEDDED_DEFAULT}\n[fqdn]\ndns_servers = [\"10.96.0.10\"]\n");
    let cfg = Config::parse(&text, "fqdnbench").expect("configuration");
    NodeState::for_tests(&cfg).expect("node state")
}

fn apply(state: &mut NodeState, rules: Vec<Value>) -> Duration {
    let params = json!({
        "tables": [{"name": "pod-a-egress", "rules": rules}],
        "attach": [{"port": "pod-a", "direction": "ingress", "table": "pod-a-egress"}],
        "dns": [{"port": "pod-a", "allow": ["*.example.test"]}],
    });
    let t = Instant::now();
    state
        .call("acl.apply", &params)
        .expect("a state method")
        .expect("acl.apply");
    t.elapsed()
}

fn dns_rule() -> Value {
    json!({"action": "reflect", "proto": "udp", "dst": "10.96.0.10/32", "dst_port": 53})
}

/// Median, 99th percentile and maximum of `samples` (sorted here), in µs.
fn summary(samples: &mut [Duration]) -> Value {
    samples.sort_unstable();
    let at = |q: f64| {
        let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i].as_secs_f64() * 1e6
    };
    json!({"n": samples.len(), "median_us": at(0.5), "p99_us": at(0.99), "max_us": at(1.0)})
}

fn main() {
    let args = Args::parse();
    let endpoint = "bench/pod-a";
    let name = |n: u32| format!("n{n}.example.test");

    // Identities: one rule on the selector; addresses go to the identity map only.
    let mut s = state();
    apply(
        &mut s,
        vec![
            dns_rule(),
            json!({"action": "reflect", "proto": "tcp", "dst": "fqdn:*.example.test", "dst_port": 443}),
        ],
    );
    let fill = Instant::now();
    let mut next = 0u32;
    for n in 0..args.names {
        let records: Vec<(IpAddr, u32)> = (0..args.ips)
            .map(|_| {
                next += 1;
                (addr(next), 3600)
            })
            .collect();
        s.learn_dns_answer(endpoint, &name(n), &records);
    }
    let fill = fill.elapsed();
    let mut samples = Vec::with_capacity(args.rounds as usize);
    let mut rule_changes = 0u32;
    for r in 0..args.rounds {
        next += 1;
        let t = Instant::now();
        let changes = s.learn_dns_answer(endpoint, &name(r % args.names), &[(addr(next), 3600)]);
        samples.push(t.elapsed());
        rule_changes += u32::from(changes.touches_rules());
    }
    let identity = summary(&mut samples);

    // Per address: one /32 rule per learned address, the table applied again with one
    // more rule for each new address.
    let baseline = (args.baseline_rounds > 0).then(|| {
        let mut b = state();
        let learned = args.names * args.ips;
        let mut rules: Vec<Value> = vec![dns_rule()];
        rules.extend((1..=learned).map(|i| {
            json!({"action": "reflect", "proto": "tcp", "dst": format!("{}/32", addr(i)), "dst_port": 443})
        }));
        let first = apply(&mut b, rules.clone());
        let mut samples = Vec::new();
        for r in 0..args.baseline_rounds {
            rules.push(json!({"action": "reflect", "proto": "tcp", "dst": format!("{}/32", addr(learned + 1 + r)), "dst_port": 443}));
            samples.push(apply(&mut b, rules.clone()));
        }
        json!({"rules": rules.len(), "first_apply_ms": first.as_secs_f64() * 1e3, "reapply": summary(&mut samples)})
    });

    let out = json!({
        "names": args.names,
        "ips_per_name": args.ips,
        "fill_s": fill.as_secs_f64(),
        "identities": s.call("fqdn.identities", &Value::Null).and_then(Result::ok).map(|v| v["identities"].as_array().map_or(0, Vec::len)),
        "answer_to_rule_in_force": identity,
        "answers_that_changed_rules": rule_changes,
        "per_address_rules_baseline": baseline,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
        return;
    }
    println!(
        "{} names x {} addresses learned in {:.2} s; identities in use: {}",
        args.names,
        args.ips,
        out["fill_s"].as_f64().unwrap_or(0.0),
        out["identities"]
    );
    let a = &out["answer_to_rule_in_force"];
    println!(
        "new address of an existing name, answer to rule in force: median {:.1} µs, p99 {:.1} µs, max {:.1} µs ({} answers, {} changed a rule)",
        a["median_us"].as_f64().unwrap_or(0.0),
        a["p99_us"].as_f64().unwrap_or(0.0),
        a["max_us"].as_f64().unwrap_or(0.0),
        a["n"],
        rule_changes
    );
    if let Some(b) = out["per_address_rules_baseline"].as_object() {
        let r = &b["reapply"];
        println!(
            "baseline, one /32 rule per address ({} rules), acl.apply with one more: median {:.1} µs, p99 {:.1} µs ({} applies; first apply {:.0} ms)",
            b["rules"],
            r["median_us"].as_f64().unwrap_or(0.0),
            r["p99_us"].as_f64().unwrap_or(0.0),
            r["n"],
            b["first_apply_ms"].as_f64().unwrap_or(0.0)
        );
    }
}
