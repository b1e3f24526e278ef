//! Policy verdicts from the rendered tables: a connection is sent, packet by packet,
//! through the tables each switch on its path would apply — compiled with the
//! dataplane's own [`Table::compile`] and classified as the workers do — with the
//! conntrack rule that a `reflect` permit on a switch lets that switch pass the
//! replies without ACLs.
//!
//! The path: on the source's node, the ingress table of the source pod's port; then,
//! when the destination is a pod of the same node, the egress table of its port;
//! otherwise the global table (egress of the uplink) and, on the destination's node,
//! the egress table of the destination pod's port. The reply goes back the same way
//! reversed, skipping every switch that tracked the connection. A connection is
//! allowed when its first packet and the reply both pass. Endpoints that are IP
//! addresses are outside the cluster: reached through the uplink, with no tables
//! of their own. A pod talking to itself is loopback: allowed.
//!
//! Rules whose destination is a remote-identity selector (`fqdn:…`, `cidr:…`: a
//! CiliumNetworkPolicy's `toFQDNs`, `toCIDR`, `toCIDRSet`) match by the identity the
//! dataplane learns for an address (from DNS answers, from CIDR policies), which an
//! offline verdict does not have: they never match here. A connection such a rule
//! would allow is denied offline; the trace names the selector rules that could
//! have matched.

use super::cache::{Cache, Key, L4};
use super::renderer::Rendered;
use super::subnet;
use super::{Engine, Local, PolicyError};
use ferrule_dataplane::acl::table::Table;
use ferrule_dataplane::acl::{Action, FlowKey};
use std::collections::HashMap;
use std::net::IpAddr;

/// Source port of the simulated connections.
pub const CLIENT_PORT: u16 = 40000;

/// One end of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A pod: `NAMESPACE/NAME`.
    Pod(Key),
    /// An address outside the cluster's pods.
    Ip(IpAddr),
}

impl Endpoint {
    /// Parses `NAMESPACE/NAME` or an IP address.
    pub fn parse(text: &str) -> Result<Endpoint, PolicyError> {
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Endpoint::Ip(ip));
        }
        Key::parse(text).map(Endpoint::Pod).ok_or_else(|| {
            PolicyError::Query(format!("{text:?}: expected NAMESPACE/POD or an IP address"))
        })
    }
}

/// A node's rendered tables, compiled.
struct Node {
    rendered: Rendered,
    tables: HashMap<String, Table>,
}

impl Node {
    fn new(rendered: Rendered) -> Result<Node, PolicyError> {
        let mut tables = HashMap::new();
        for (name, rules) in &rendered.tables {
            let slots = (0..rules.len() as u32).collect();
            let t = Table::compile(name.clone(), rules.clone(), slots, rules.len() as u32)
                .map_err(|e| PolicyError::Render(format!("table {name}: {e}")))?;
            tables.insert(name.clone(), t);
        }
        Ok(Node { rendered, tables })
    }

    /// Classifies `key` with table `name`: (passes, was a reflect).
    fn check(
        &self,
        name: Option<&String>,
        key: &FlowKey,
        trace: &mut Vec<String>,
        at: &str,
    ) -> (bool, bool) {
        let Some(name) = name else {
            return (true, false);
        };
        let Some(t) = self.tables.get(name) else {
            return (true, false);
        };
        let mut out = [0u32; 1];
        // Offline there are no DNS answers: selector rules match no address.
        let identities = ferrule_dataplane::acl::identity::Identities::default();
        t.classify(std::slice::from_ref(key), &mut out, &identities);
        let action = t.action(out[0]);
        let position = (out[0] != ferrule_dataplane::acl::NO_MATCH).then_some(out[0] as usize);
        trace.push(format!(
            "{at}: table {name} rule {}: {action}",
            position.map_or_else(|| "-".to_string(), |p| p.to_string())
        ));
        if action == Action::Deny {
            // The selector rules before the deciding one that match the rest of the key.
            let before = position.unwrap_or(t.rules.len());
            for (i, r) in t.rules[..before].iter().enumerate() {
                let Some(selector) = r.dst_selector.as_deref() else {
                    continue;
                };
                // A `cidr:` selector selects addresses inside its prefix only.
                let inside = selector
                    .strip_prefix("cidr:")
                    .and_then(|p| subnet::parse_cidr(p).ok())
                    .is_none_or(|p| p.matches(key.dst_ip()));
                let mut plain = r.clone();
                plain.dst_selector = None;
                if r.action != Action::Deny && inside && plain.matches(key) {
                    trace.push(format!(
                        "{at}: table {name} rule {i} ({} to {selector}) is not matched offline: \
                         the dataplane matches it by the destination's identity",
                        r.action
                    ));
                }
            }
        }
        (action != Action::Deny, action == Action::Reflect)
    }

    fn pod_table(&self, pod: &Key, ingress: bool) -> Option<&String> {
        let t = self.rendered.pods.get(pod)?;
        if ingress {
            t.ingress.as_ref()
        } else {
            t.egress.as_ref()
        }
    }
}

/// The answer for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// Each table consulted and its decision, in path order.
    pub trace: Vec<String>,
}

/// Answers connection queries against a state, rendering each node once.
pub struct Verdicts {
    cache: Cache,
    nodes: HashMap<String, Node>,
}

impl Verdicts {
    pub fn new(cache: Cache) -> Verdicts {
        Verdicts {
            cache,
            nodes: HashMap::new(),
        }
    }

    fn node(&mut self, name: &str) -> Result<&Node, PolicyError> {
        if !self.nodes.contains_key(name) {
            let e = Engine::new(self.cache.clone(), Local::Node(name.to_string()))?;
            self.nodes
                .insert(name.to_string(), Node::new(e.rendered().clone())?);
        }
        self.nodes
            .get(name)
            .ok_or_else(|| PolicyError::Query(format!("node {name:?} not rendered")))
    }

    /// (node, key, addresses) of a pod endpoint.
    fn pod(&self, key: &Key) -> Result<(String, Vec<IpAddr>), PolicyError> {
        let p = self
            .cache
            .pods
            .get(key)
            .ok_or_else(|| PolicyError::Query(format!("no Pod {key} in the state")))?;
        if p.host_network {
            return Err(PolicyError::Query(format!(
                "Pod {key} uses the host network: policies do not apply to it"
            )));
        }
        if !p.is_active() {
            return Err(PolicyError::Query(format!(
                "Pod {key} has no IP address yet (or has finished)"
            )));
        }
        Ok((p.node.clone().unwrap_or_default(), p.ips.clone()))
    }

    /// Whether a `proto` connection from `from` to port `port` of `to` is allowed.
    pub fn verdict(
        &mut self,
        from: &Endpoint,
        to: &Endpoint,
        port: u16,
        proto: L4,
    ) -> Result<Verdict, PolicyError> {
        if from == to {
            // Loopback: the packets never leave the pod.
            return Ok(Verdict {
                allowed: true,
                trace: vec!["loopback: the pod talks to itself".into()],
            });
        }
        let src = match from {
            Endpoint::Pod(k) => Some(self.pod(k)?),
            Endpoint::Ip(_) => None,
        };
        let dst = match to {
            Endpoint::Pod(k) => Some(self.pod(k)?),
            Endpoint::Ip(_) => None,
        };
        // The addresses: the source's first, and the destination's of that family.
        let (src_ip, dst_ip) = match (from, to, &src, &dst) {
            (_, _, Some((_, s)), Some((_, d))) => {
                let s = s[0];
                let d = d
                    .iter()
                    .copied()
                    .find(|d| d.is_ipv4() == s.is_ipv4())
                    .ok_or_else(|| {
                        PolicyError::Query("the pods have no address of one family".into())
                    })?;
                (s, d)
            }
            (Endpoint::Ip(s), _, None, Some((_, d))) => {
                let d = d.iter().copied().find(|d| d.is_ipv4() == s.is_ipv4());
                (
                    *s,
                    d.ok_or_else(|| PolicyError::Query(format!("no address of {s}'s family")))?,
                )
            }
            (_, Endpoint::Ip(d), Some((_, s)), None) => {
                let s = s.iter().copied().find(|s| s.is_ipv4() == d.is_ipv4());
                (
                    s.ok_or_else(|| PolicyError::Query(format!("no address of {d}'s family")))?,
                    *d,
                )
            }
            _ => return Err(PolicyError::Query("at least one end must be a pod".into())),
        };
        let key = FlowKey::from_ips(0, proto.number(), src_ip, dst_ip, CLIENT_PORT, port)
            .ok_or_else(|| PolicyError::Query("address families differ".into()))?;
        let reply = key.reversed();
        let src_node = src.as_ref().map(|(n, _)| n.clone());
        let dst_node = dst.as_ref().map(|(n, _)| n.clone());
        let same = src_node.is_some() && src_node == dst_node;
        let (from_pod, to_pod) = (
            match from {
                Endpoint::Pod(k) => Some(k),
                _ => None,
            },
            match to {
                Endpoint::Pod(k) => Some(k),
                _ => None,
            },
        );
        let mut trace = Vec::new();
        let deny = |trace: Vec<String>| {
            Ok(Verdict {
                allowed: false,
                trace,
            })
        };

        // The first packet.
        let (mut tracked_src, mut tracked_dst) = (false, false);
        if let (Some(n), Some(p)) = (&src_node, from_pod) {
            let node = self.node(n)?;
            let (ok, r) = node.check(
                node.pod_table(p, true),
                &key,
                &mut trace,
                &format!("node {n:?} {p} ingress"),
            );
            if !ok {
                return deny(trace);
            }
            tracked_src |= r;
            if !same {
                let (ok, r) = node.check(
                    node.rendered.global.as_ref(),
                    &key,
                    &mut trace,
                    &format!("node {n:?} uplink egress"),
                );
                if !ok {
                    return deny(trace);
                }
                tracked_src |= r;
            }
        }
        if let (Some(n), Some(p)) = (&dst_node, to_pod) {
            let node = self.node(n)?;
            let (ok, r) = node.check(
                node.pod_table(p, false),
                &key,
                &mut trace,
                &format!("node {n:?} {p} egress"),
            );
            if !ok {
                return deny(trace);
            }
            if same {
                tracked_src |= r;
            } else {
                tracked_dst |= r;
            }
        }

        // The reply.
        if let (Some(n), Some(p)) = (&dst_node, to_pod) {
            if tracked_dst || (same && tracked_src) {
                trace.push(format!("node {n:?}: reply tracked, no ACLs"));
            } else {
                let node = self.node(n)?;
                let (ok, _) = node.check(
                    node.pod_table(p, true),
                    &reply,
                    &mut trace,
                    &format!("node {n:?} {p} ingress (reply)"),
                );
                if !ok {
                    return deny(trace);
                }
                if !same {
                    let (ok, _) = node.check(
                        node.rendered.global.as_ref(),
                        &reply,
                        &mut trace,
                        &format!("node {n:?} uplink egress (reply)"),
                    );
                    if !ok {
                        return deny(trace);
                    }
                }
            }
        }
        if let (Some(n), Some(p)) = (&src_node, from_pod) {
            if tracked_src {
                trace.push(format!("node {n:?}: reply tracked, no ACLs"));
            } else {
                let node = self.node(n)?;
                let (ok, _) = node.check(
                    node.pod_table(p, false),
                    &reply,
                    &mut trace,
                    &format!("node {n:?} {p} egress (reply)"),
                );
                if !ok {
                    return deny(trace);
                }
            }
        }
        Ok(Verdict {
            allowed: true,
            trace,
        })
    }
}
