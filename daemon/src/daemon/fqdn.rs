//! The control thread's side of FQDN policy: DNS queries (UDP datagrams and TCP
//! segments) punted by the workers go to the proxy ([`crate::fqdn`]), its answers and garbage collections are published
//! (identity map, recompiled tables) before the answers are handed to the pods, and
//! `fqdn.*` answers from its state.

use super::{to_value, NodeState};
use crate::fqdn::{ProxyReply, QueryOutcome};
use ferrule_api::rpc::RpcError;
use ferrule_dataplane::counters::DropReason;
use ferrule_dataplane::ct_requests::{CtReply, CtRequest};
use ferrule_dataplane::dpdk::{Mbuf, Mempool};
use ferrule_fqdn::Changes;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long the garbage collection waits for the workers' answer about addresses in
/// use (none: every expired address is kept until the next collection).
const IN_USE_ANSWER: Duration = Duration::from_millis(500);

impl NodeState {
    /// Publishes the identity maps and the DNS interception of the FQDN state in force.
    pub(crate) fn sync_fqdn(&mut self) {
        // Every network a node can have: one added later finds its map there.
        let identities = self.fqdn.identities(crate::config::MAX_NETWORKS);
        self.fib.set_identities(identities);
        let dns = self.fqdn.intercept(self.acl.ports());
        self.fib.set_dns(dns);
    }

    /// Puts changes of the FQDN state in force: tables whose selectors' identity sets
    /// changed are recompiled, the map is published.
    fn publish_fqdn_changes(&mut self, changes: &Changes) {
        if changes.is_empty() {
            return;
        }
        if changes.touches_rules() {
            let fqdn = &self.fqdn;
            if let Some(tables) = self.acl.refresh_selectors(&|s| fqdn.selected(s)) {
                self.fib.set_acl(tables);
            }
        }
        self.sync_fqdn();
        self.publish();
    }

    /// Learns a DNS answer (`name` looked up by `endpoint`) and publishes what changed,
    /// as the proxy does with each answer before handing it to the pod (its rule is in
    /// force when this returns). For benchmarks and tests.
    pub fn learn_dns_answer(
        &mut self,
        endpoint: &str,
        name: &str,
        records: &[(IpAddr, u32)],
    ) -> Changes {
        let changes = self.fqdn.learn(endpoint, name, records);
        self.publish_fqdn_changes(&changes);
        changes
    }

    /// A punted DNS query from port `in_port`.
    pub(super) fn dns_query(&mut self, mbuf: Mbuf, in_port: u16, pool: &Mempool) {
        let index = usize::from(in_port);
        let (Some(network), Some(acl_port)) = (
            self.fib.ports().get(index).map(|p| p.network),
            self.acl.ports().get(index).cloned(),
        ) else {
            return;
        };
        match self
            .fqdn
            .on_query(mbuf.as_ref(), in_port, network, &acl_port)
        {
            QueryOutcome::Forwarded => {}
            QueryOutcome::Reply(r) => self.send_proxy_replies(r, pool),
            QueryOutcome::Dropped => {
                self.control_counters
                    .drop_packets(DropReason::Malformed, index, 1)
            }
        }
    }

    fn send_proxy_replies(&mut self, replies: Vec<ProxyReply>, pool: &Mempool) {
        for r in replies {
            let Some(mut m) = Mbuf::alloc(pool) else {
                self.fqdn.counters.reply_errors += 1;
                continue;
            };
            match m.append(r.frame.len()) {
                Some(buf) => buf.copy_from_slice(&r.frame),
                None => {
                    self.fqdn.counters.reply_errors += 1;
                    continue;
                }
            }
            self.tx_control(usize::from(r.port), std::iter::once(m));
        }
    }

    /// Every tick: answers from upstream (learned and published, then handed to the
    /// pods), and when due the garbage collection and the checkpoint.
    pub(super) fn fqdn_tick(&mut self, pool: &Mempool) {
        let now = Instant::now();
        let answers = self.fqdn.poll_upstream(now);
        // The addresses are in force before the pod has the answer.
        self.publish_fqdn_changes(&answers.changes);
        self.send_proxy_replies(answers.udp, pool);
        let segments = self.fqdn.release_tcp(answers.tcp);
        self.send_proxy_replies(segments, pool);
        if let Some(expired) = self.fqdn.gc_due(now) {
            let in_use = self.addresses_in_use(expired);
            let changes = self.fqdn.gc(&in_use);
            self.publish_fqdn_changes(&changes);
            self.fqdn.checkpoint_if_dirty();
        } else if self.fqdn.pending() == 0 {
            self.fqdn.checkpoint_if_dirty();
        }
    }

    /// Which of `addrs` some tracked connection uses; all of them when the workers do
    /// not answer (an address is never forgotten under a live connection).
    fn addresses_in_use(&self, addrs: Vec<IpAddr>) -> BTreeSet<IpAddr> {
        let all: BTreeSet<IpAddr> = addrs.iter().copied().collect();
        match self
            .shared
            .ask_workers(&CtRequest::InUse { addrs }, IN_USE_ANSWER)
        {
            Some(replies) => replies
                .into_iter()
                .flat_map(|r| match r {
                    CtReply::InUse { used, .. } => used,
                    _ => Vec::new(),
                })
                .collect(),
            None => all,
        }
    }

    pub(super) fn fqdn_cache(&mut self, params: &Value) -> Result<Value, RpcError> {
        no_fqdn_params(params)?;
        to_value(json!({ "names": self.fqdn.state().cache_view() }))
    }

    pub(super) fn fqdn_identities(&mut self, params: &Value) -> Result<Value, RpcError> {
        no_fqdn_params(params)?;
        to_value(json!({
            "identities": self.fqdn.state().identities_view(),
            "breaker": self.fqdn.state().counters(),
        }))
    }

    pub(super) fn fqdn_selectors(&mut self, params: &Value) -> Result<Value, RpcError> {
        no_fqdn_params(params)?;
        let fqdn = &self.fqdn;
        to_value(json!({
            "selectors": fqdn.state().selectors_view(),
            "dns": fqdn.policies(),
            "dns_servers": fqdn.section().dns_servers,
            "proxy": fqdn.proxy_counters(),
            "pending": fqdn.pending(),
        }))
    }
}

fn no_fqdn_params(params: &Value) -> Result<(), RpcError> {
    match params {
        Value::Null => Ok(()),
        Value::Object(m) if m.is_empty() => Ok(()),
        _ => Err(RpcError::invalid_params("params", "fqdn.* takes no params")),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, EMBEDDED_DEFAULT};
    use crate::daemon::NodeState;
    use serde_json::{json, Value};
    use std::net::IpAddr;

    fn state() -> NodeState {
        let text = format!("{EMBEDDED_DEFAULT}\n[fqdn]\ndns_servers = [\"10.96.0.10\"]\n");
        NodeState::for_tests(&Config::parse(&text, "test").unwrap()).unwrap()
    }

    fn call(s: &mut NodeState, method: &str, params: Value) -> Result<Value, String> {
        s.call(method, &params)
            .expect("a state method")
            .map_err(|e| e.message)
    }

    fn trace(s: &mut NodeState, dst: &str) -> Value {
        call(
            s,
            "trace.run",
            json!({"in_port": "pod-a", "proto": "tcp", "src": "10.1.0.2:40000", "dst": dst}),
        )
        .unwrap()
    }

    #[test]
    fn a_learned_address_passes_the_selector_rule_and_traces_show_its_labels() {
        let mut s = state();
        let apply = json!({
            "tables": [{"name": "a-out", "rules": [
                {"action": "permit", "proto": "tcp", "dst": "fqdn:*.example.test", "dst_port": 443}
            ]}],
            "attach": [{"port": "pod-a", "direction": "ingress", "table": "a-out"}],
            "dns": [{"port": "pod-a", "allow": ["*.example.test"]}],
        });
        call(&mut s, "acl.apply", apply.clone()).unwrap();
        assert!(
            s.snapshot().dns.as_ref().unwrap().ports[0],
            "pod-a's DNS goes to the proxy"
        );
        let before = trace(&mut s, "198.51.100.7:443");
        assert_eq!(before["verdict"]["reason"], "acl-deny", "{before}");

        let ip: IpAddr = "198.51.100.7".parse().unwrap();
        let changes = s.learn_dns_answer("default/pod-a", "www.example.test", &[(ip, 300)]);
        assert!(!changes.touches_rules());
        // Permitted (then held for the router's MAC, which nobody resolves here).
        let after = trace(&mut s, "198.51.100.7:443");
        assert_eq!(after["verdict"]["reason"], "no-neighbour", "{after}");
        let text = after.to_string();
        assert!(
            text.contains("rule 0: permit (dst fqdn:*.example.test)"),
            "{text}"
        );
        assert!(
            text.contains("fqdn:*.example.test,reserved:world"),
            "{text}"
        );

        let cache = call(&mut s, "fqdn.cache", Value::Null).unwrap();
        assert_eq!(cache["names"][0]["name"], "www.example.test");
        // Same apply again: nothing to recompile, the address stays allowed.
        call(&mut s, "acl.apply", apply).unwrap();
        assert_eq!(
            trace(&mut s, "198.51.100.7:443")["verdict"]["reason"],
            "no-neighbour"
        );
        // A failed apply changes nothing.
        let bad = json!({"tables": [{"name": "a-out", "rules": [{"action": "permit", "dst": "fqdn:a..b"}]}]});
        assert!(call(&mut s, "acl.apply", bad)
            .unwrap_err()
            .contains("empty label"));
        assert_eq!(
            trace(&mut s, "198.51.100.7:443")["verdict"]["reason"],
            "no-neighbour"
        );
        assert!(call(&mut s, "fqdn.cache", json!({"x": 1})).is_err());
    }

    #[test]
    fn dns_policies_need_dns_servers() {
        let cfg = Config::parse(EMBEDDED_DEFAULT, "test").unwrap();
        let mut s = NodeState::for_tests(&cfg).unwrap();
        let e = call(
            &mut s,
            "acl.apply",
            json!({"dns": [{"port": "pod-a", "allow": ["*"]}]}),
        )
        .unwrap_err();
        assert!(e.contains("dns_servers"), "{e}");
    }
}
