//! `trace.*`: synthetic traces (through [`crate::trace`]) on the current generation, and
//! live captures of real packets, armed here and rendered from the copy the worker took.

use super::{to_value, NodeState, TRACE_KEEP};
use crate::trace::{icmp_would_be_sent, render};
use ferrule_api::rpc::{parse_params, RpcError};
use ferrule_api::{self as api, TraceRun, TraceStage, TraceStart};
use ferrule_dataplane::pipeline::{self, Recorder};
use serde_json::Value;

impl NodeState {
    pub(super) fn trace_run(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: TraceRun = parse_params(params)?;
        let mut result = crate::trace::run(&self.snapshot(), &p)?;
        // The pipeline knows identities by number; the FQDN state knows their labels.
        for stage in &mut result.stages {
            let Some(id) = stage
                .detail
                .split_once(" has identity ")
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let labels = self
                .fqdn
                .state()
                .identity_labels(ferrule_fqdn::Identity(id))
                .map(|l| l.to_string())
                .unwrap_or_else(|| "reserved:world".into());
            stage.detail.push_str(&format!(" ({labels})"));
        }
        to_value(result)
    }

    pub(super) fn trace_start(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: TraceStart = parse_params(params)?;
        let index = self.fib.port_index(&p.port).ok_or_else(|| {
            RpcError::invalid_params("port", format!("no port named {:?}", p.port))
        })?;
        if !(1..=1000).contains(&p.count) {
            return Err(RpcError::invalid_params(
                "count",
                format!("{} is outside 1..=1000", p.count),
            ));
        }
        self.collect_traces();
        self.traces.clear();
        self.shared.arm_trace(usize::from(index), p.count);
        tracing::info!(port = %p.port, count = p.count, "live trace armed");
        Ok(serde_json::json!({}))
    }

    /// Moves the workers' captures into the kept list, rendering their stages.
    fn collect_traces(&mut self) {
        let snap = self.snapshot();
        let started = self.shared.started_ns();
        while let Some(cap) = self.shared.punt.traces.pop() {
            let mut data = cap.data[..usize::from(cap.caplen)].to_vec();
            let original = data.clone();
            let mut rec = Recorder::default();
            let replayed = pipeline::process(&snap, cap.in_port, &mut data, &mut rec);
            let sent = icmp_would_be_sent(&snap, cap.in_port, &original, cap.action);
            let (mut stages, verdict) = render(&snap, cap.in_port, rec, cap.action, sent);
            if usize::from(cap.caplen) < cap.len as usize {
                stages.push(TraceStage {
                    stage: "note".into(),
                    detail: format!(
                        "captured {} of {} bytes; stages replayed on the truncated copy",
                        cap.caplen, cap.len
                    ),
                });
            } else if replayed != cap.action || snap.generation != cap.generation {
                stages.push(TraceStage {
                    stage: "note".into(),
                    detail: format!(
                        "stages replayed on generation {} (the worker used {})",
                        snap.generation, cap.generation
                    ),
                });
            }
            if self.traces.len() >= TRACE_KEEP {
                self.traces.pop_front();
            }
            self.traces.push_back(api::TracedPacket {
                port: snap
                    .ports
                    .get(usize::from(cap.in_port))
                    .map(|p| p.name.clone())
                    .unwrap_or_default(),
                time_secs: cap.time_ns.saturating_sub(started) as f64 / 1e9,
                len: cap.len,
                data_hex: original.iter().map(|b| format!("{b:02x}")).collect(),
                stages,
                verdict,
            });
        }
    }

    pub(super) fn trace_dump(&mut self, params: &Value) -> Result<Value, RpcError> {
        super::no_params(params)?;
        self.collect_traces();
        to_value(api::TraceDump {
            remaining: self.shared.trace_remaining(),
            packets: self.traces.iter().cloned().collect(),
        })
    }
}
