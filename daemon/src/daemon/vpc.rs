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
