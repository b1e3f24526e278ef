//! `acl.*`: apply a whole ACL state (validated and compiled on the control thread, then
//! published as one generation), dump tables with their hit counters (streamed on the
//! socket), clear counters.

use super::state::WorkerRuntime;
use super::{to_value, NodeState};
use crate::fqdn::{selected_in, selectors_of};
use ferrule_api::rpc::{parse_params, ReplyStream, RpcError};
use ferrule_api::{AclClearParams, AclDumpParams};
use ferrule_dataplane::counters::RuleCounters;
use serde_json::Value;
use std::sync::Arc;

/// Every worker's ACL hit counters.
fn rule_counters(workers: &[WorkerRuntime]) -> Vec<&RuleCounters> {
    workers.iter().map(|w| &w.counters.acl).collect()
}

impl NodeState {
    pub(super) fn acl_apply(&mut self, params: &Value) -> Result<Value, RpcError> {
        let desired = crate::acl::parse_apply(params, self.acl.ports())?;
        self.fqdn
            .check_policies(&desired.dns)
            .map_err(|e| RpcError::invalid_params("dns", e))?;
        // The tables compile against the FQDN state with their selectors in force; both
        // are committed only when the apply succeeds.
        let selectors = selectors_of(desired.tables.iter().map(|(_, r)| r.as_slice()));
        let (next, _changes) = self.fqdn.with_selectors(&selectors);
        let applied = self
            .acl
            .apply(&desired, &rule_counters(&self.workers), &|s| {
                selected_in(&next, s)
            })?;
        let mut result = applied.result;
        if !desired.dry_run {
            self.fqdn.commit(next, desired.dns.clone());
            self.sync_fqdn();
            if applied.tables.is_none() {
                self.publish();
            }
        }
        if let Some(tables) = applied.tables {
            self.fib.set_acl(tables);
            self.publish();
            if !applied.borrowed.is_empty() {
                // Slots of removed rules now count new ones: once every worker has
                // moved to the new state, their old counts are set aside.
                if !self
                    .shared
                    .wait_quiescent(std::time::Duration::from_secs(2))
                {
                    tracing::warn!("workers did not move to the new ACL state within 2 s");
                }
                self.acl
                    .rebase(&applied.borrowed, &rule_counters(&self.workers));
            }
            tracing::info!(
                tables = result.tables,
                rules = result.rules,
                added = result.added.len(),
                changed = result.changed.len(),
                removed = result.removed.len(),
                compile_ms = result.compile_ms,
                "ACL applied"
            );
        }
        result.generation = self.snapshot().generation;
        to_value(result)
    }

    pub(super) fn acl_dump(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: AclDumpParams = parse_params(params)?;
        let generation = self.snapshot().generation;
        to_value(
            self.acl
                .dump(&p, generation, &rule_counters(&self.workers))?,
        )
    }

    /// `acl.dump` written as it is sent ([`crate::acl::AclManager::dump_stream`]):
    /// what the control socket serves, so that a dump of many rules is never held whole.
    pub(super) fn acl_dump_stream(
        &mut self,
        params: &Value,
    ) -> Result<Box<dyn ReplyStream>, RpcError> {
        let p: AclDumpParams = parse_params(params)?;
        let generation = self.snapshot().generation;
        let workers = self
            .workers
            .iter()
            .map(|w| Arc::clone(&w.counters))
            .collect();
        Ok(Box::new(self.acl.dump_stream(&p, generation, workers)?))
    }

    pub(super) fn acl_clear(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: AclClearParams = parse_params(params)?;
        to_value(self.acl.clear(&p, &rule_counters(&self.workers))?)
    }
}
