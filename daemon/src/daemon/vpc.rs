//! `vpc.*`: replace the node's VPC state (the SNAT policy) and publish it; show it.

use super::{no_params, to_value, NodeState};
use ferrule_api::rpc::{parse_params, RpcError};
use ferrule_api::VpcSync;
use serde_json::Value;
use std::sync::Arc;

impl NodeState {
    pub(super) fn vpc_sync(&mut self, params: &Value) -> Result<Value, RpcError> {
        let spec: VpcSync = parse_params(params)?;
        let policy = crate::vpc::policy(&spec, &self.fib.uplink_v4())
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
        if *self.fib.snat() != policy {
            tracing::info!(
                node_ips = ?policy.node_ips,
                vpc_cidrs = policy.vpc_cidrs.len(),
                exclude = policy.exclude.len(),
                ports = ?policy.ports,
                "VPC state applied"
            );
            self.fib.set_snat(Arc::new(policy));
            self.publish();
        }
        to_value(crate::vpc::state(self.fib.snat()))
    }

    pub(super) fn vpc_show(&mut self, params: &Value) -> Result<Value, RpcError> {
        no_params(params)?;
        to_value(crate::vpc::state(self.fib.snat()))
    }
}
