//! `vpc.*`: replace the node's VPC state (the SNAT policy and the ENIs bound to uplink
//! ports) and publish it; show it.

use super::{no_params, to_value, NodeState};
use ferrule_api::rpc::{parse_params, RpcError};
use ferrule_api::VpcSync;
use serde_json::Value;
use std::sync::Arc;

impl NodeState {
    pub(super) fn vpc_sync(&mut self, params: &Value) -> Result<Value, RpcError> {
        let spec: VpcSync = parse_params(params)?;
        // Everything is validated before anything changes: a refused state leaves the
        // previous one in force.
        let (policy, enis) =
            crate::vpc::sync(&spec, self.fib.ports(), &self.fib.uplink_v4_without_enis())
                .map_err(|e| RpcError::invalid_params(&e.field, e.message))?;
        let workers = self.workers.len().max(1) as u16;
        let least = crate::vpc::check_port_shares(&policy.ports, workers)
            .map_err(|e| RpcError::invalid_params(&e.field, e.message))?;
        if least < crate::vpc::SHARE_WARN {
            tracing::warn!(
                workers,
                ports_per_worker = least,
                "the SNAT port range gives some workers fewer than {} ports",
                crate::vpc::SHARE_WARN
            );
        }
        let enis_changed = !self.fib.enis().eq(enis.iter());
        if *self.fib.snat() != policy || enis_changed {
            if enis_changed {
                self.fib
                    .set_enis(&enis)
                    .map_err(|e| RpcError::invalid_params(e.field, e.message))?;
            }
            tracing::info!(
                node_ips = ?policy.node_ips,
                vpc_cidrs = policy.vpc_cidrs.len(),
                exclude = policy.exclude.len(),
                ports = ?policy.ports,
                enis = enis.len(),
                "VPC state applied"
            );
            self.fib.set_snat(Arc::new(policy));
            self.publish();
        }
        to_value(self.vpc_state())
    }

    pub(super) fn vpc_show(&mut self, params: &Value) -> Result<Value, RpcError> {
        no_params(params)?;
        to_value(self.vpc_state())
    }

    fn vpc_state(&self) -> ferrule_api::VpcState {
        let enis: Vec<_> = self.fib.enis().cloned().collect();
        crate::vpc::state_with(self.fib.snat(), &enis, self.fib.ports())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, EMBEDDED_DEFAULT};
    use serde_json::json;
    use std::net::Ipv4Addr;

    /// The embedded configuration (uplink0: 192.0.2.10/24, MAC 02:fe:00:00:00:0c) and
    /// a second uplink `eth1` without addresses.
    fn state() -> NodeState {
        let text = format!(
            "{EMBEDDED_DEFAULT}\n[[port]]\nname = \"eth1\"\ndevargs = \"net_null9\"\n\
             role = \"uplink\"\nmac = \"02:0e:00:00:00:01\"\n"
        );
        let cfg = Config::parse(&text, "test").expect("valid configuration");
        NodeState::for_tests(&cfg).expect("state")
    }

    fn enis() -> Value {
        json!({"vpc_cidrs": ["10.0.0.0/16"], "enis": [
            {"id": "eni-0a", "mac": "02:fe:00:00:00:0c", "device_index": 0,
             "subnet_cidr": "192.0.2.0/24", "gateway": "192.0.2.1", "primary_ip": "192.0.2.10",
             "secondary_ips": ["192.0.2.20"]},
            {"id": "eni-1b", "mac": "02:0e:00:00:00:01", "device_index": 1,
             "subnet_cidr": "10.0.1.0/24", "gateway": "10.0.1.1", "primary_ip": "10.0.1.10",
             "secondary_ips": ["10.0.1.20", "10.0.1.21"]}]})
    }

    #[test]
    fn enis_are_applied_whole_and_removed_whole() {
        let mut s = state();
        let eth1 = s.fib.port_index("eth1").expect("eth1");
        let before = s.snapshot();
        assert!(before.source_routes.is_none());
        // Refused (ENI 1's gateway outside its subnet): nothing published.
        let mut bad = enis();
        bad["enis"][1]["gateway"] = json!("10.0.2.1");
        let e = s
            .call("vpc.sync", &bad)
            .expect("a state method")
            .unwrap_err();
        assert_eq!(
            serde_json::to_value(&e).expect("json")["data"]["field"],
            "enis[1].gateway"
        );
        assert_eq!(s.snapshot().generation, before.generation);

        let shown = s.call("vpc.sync", &enis()).expect("method").expect("valid");
        assert_eq!(shown["node_ips"], json!(["192.0.2.10"]));
        assert_eq!(shown["enis"][1]["bound_port"], "eth1");
        let snap = s.snapshot();
        let port = &snap.ports[usize::from(eth1)];
        assert_eq!(port.local_v4, vec![Ipv4Addr::new(10, 0, 1, 10)]);
        assert_eq!(
            port.proxy_arp_v4,
            vec![Ipv4Addr::new(10, 0, 1, 20), Ipv4Addr::new(10, 0, 1, 21)]
        );
        let uplink0 = &snap.ports[usize::from(s.fib.port_index("uplink0").expect("uplink0"))];
        assert_eq!(
            uplink0
                .local_v4
                .iter()
                .filter(|a| a.octets()[3] == 10)
                .count(),
            1
        );
        assert_eq!(uplink0.proxy_arp_v4, vec![Ipv4Addr::new(192, 0, 2, 20)]);
        let routes = snap.source_routes.as_deref().expect("an ENI table");
        assert_eq!(routes.tables.len(), 1, "only the secondary ENI has a table");
        let table = routes
            .table_v4(0, u32::from(Ipv4Addr::new(10, 0, 1, 21)))
            .expect("selected by a secondary IP");
        assert_eq!(table.name, "eni-1");
        assert_eq!(
            snap.next_hop(table.nh),
            Some(&ferrule_dataplane::snapshot::NextHopEntry::Port {
                port: eth1,
                via: Some("10.0.1.1".parse().expect("ip"))
            })
        );
        assert!(routes
            .table_v4(0, u32::from(Ipv4Addr::new(192, 0, 2, 20)))
            .is_none());
        // ENI 1's primary IP is a local route of source `eni`; route.dump shows the
        // table and the rule.
        let dump = s
            .call("route.dump", &Value::Null)
            .expect("method")
            .expect("ok");
        let text = dump.to_string();
        assert!(
            text.contains(r#"{"kind":"local","network":"default","port":null,"prefix":"10.0.1.10/32","source":"eni","via":null}"#),
            "{dump:#}"
        );
        assert!(
            text.contains(r#"{"kind":"port","network":"default","port":"eth1","prefix":"0.0.0.0/0","source":"eni","table":"eni-1","via":"10.0.1.1"}"#),
            "{dump:#}"
        );
        assert_eq!(
            dump["rules"][0]["sources"],
            json!(["10.0.1.20", "10.0.1.21"])
        );
        // The same state again publishes nothing.
        let generation = s.snapshot().generation;
        s.call("vpc.sync", &enis()).expect("method").expect("valid");
        assert_eq!(s.snapshot().generation, generation);

        // Without ENIs: everything they brought is gone, the configured address stays.
        s.call("vpc.sync", &json!({"node_ips": ["192.0.2.10"]}))
            .expect("method")
            .expect("valid");
        let snap = s.snapshot();
        assert!(snap.source_routes.is_none());
        assert!(snap.ports[usize::from(eth1)].local_v4.is_empty());
        assert!(snap.ports.iter().all(|p| p.proxy_arp_v4.is_empty()));
        let dump = s
            .call("route.dump", &Value::Null)
            .expect("method")
            .expect("ok");
        assert!(!dump.to_string().contains("10.0.1.10"), "{dump:#}");
        assert!(dump.get("rules").is_none(), "{dump:#}");
        assert!(dump.to_string().contains("192.0.2.10/32"), "{dump:#}");
    }
}
