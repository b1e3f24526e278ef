//! The `network.*` handlers: user-defined networks from UDN/CUDN manifests and the
//! Namespaces they serve, their status and counters, and the CNI plugin's lookup.

use super::NodeState;
use crate::networks::Refusal;
use ferrule_api::network::{
    FdbDump, FdbEntry, FdbParams, NetworkApply, NetworkCounters, NetworkDel, NetworkListParams,
    NetworkLookup,
};
use ferrule_api::rpc::{parse_params, RpcError};
use serde_json::Value;

fn refused(e: Refusal) -> RpcError {
    RpcError::invalid_params(&e.field, e.message)
}

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, RpcError> {
    serde_json::to_value(v).map_err(|e| RpcError::internal(e.to_string()))
}

impl NodeState {
    pub(super) fn network_apply(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: NetworkApply = parse_params(params)?;
        let applied = self
            .udn
            .apply(&mut self.fib, &p.objects, p.dry_run)
            .map_err(refused)?;
        if !p.dry_run {
            self.sync_segments();
            self.publish();
            tracing::info!(created = ?applied.created, namespaces = ?applied.namespaces, "networks applied");
        }
        to_value(applied)
    }

    pub(super) fn network_del(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: NetworkDel = parse_params(params)?;
        self.udn.delete(&mut self.fib, &p.name).map_err(refused)?;
        self.sync_segments();
        self.publish();
        tracing::info!(network = %p.name, "network deleted");
        Ok(serde_json::json!({}))
    }

    pub(super) fn network_list(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: NetworkListParams = if params.is_null() {
            NetworkListParams::default()
        } else {
            parse_params(params)?
        };
        let counters = |net: u16| {
            let mut c = NetworkCounters::default();
            for port in self.fib.ports_in(net) {
                let t = self.port_totals(usize::from(port));
                c.rx_packets += t.rx_packets;
                c.rx_bytes += t.rx_bytes;
                c.tx_packets += t.tx_packets;
                c.tx_bytes += t.tx_bytes;
                c.drops += t.drops;
            }
            c
        };
        let list = self
            .udn
            .list(&self.fib, p.name.as_deref(), &counters)
            .map_err(refused)?;
        to_value(list)
    }

    pub(super) fn network_fdb(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: FdbParams = if params.is_null() {
            FdbParams::default()
        } else {
            parse_params(params)?
        };
        if let Some(n) = &p.network {
            if self.fib.network_index(n).is_none() {
                return Err(RpcError::invalid_params(
                    "network",
                    format!("no network named {n:?}"),
                ));
            }
        }
        let snap = self.snapshot();
        let entries = self
            .fdb
            .dump(&snap, std::time::Instant::now())
            .into_iter()
            .filter(|r| p.network.as_ref().is_none_or(|n| *n == r.network))
            .map(|r| FdbEntry {
                network: r.network,
                mac: r.mac,
                port: r.port,
                vlan: r.vlan,
                kind: match r.kind {
                    crate::fdb::EntryKind::Static => "static",
                    crate::fdb::EntryKind::Learned => "learned",
                }
                .into(),
                age_s: r.age,
            })
            .collect();
        to_value(FdbDump { entries })
    }

    pub(super) fn network_lookup(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: NetworkLookup = parse_params(params)?;
        to_value(self.udn.lookup(&p.namespace).map_err(refused)?)
    }
}
