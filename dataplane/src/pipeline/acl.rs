//! The ACL stages: the input port's ingress table ([`ingress`], after local and ttl) and,
//! after routing, the output port's egress table then the global table on uplinks
//! ([`egress`]). Packets sharing a table are classified in one batch; every verdict is
//! recorded as a rule hit ([`AclHit`]) for the worker to count after the burst.

use super::burst::Burst;
use super::{trace, Action, Frames, Parsed, Stage, Tracer, MAX_BURST};
use crate::acl::identity::Identities;
use crate::acl::rule::Action as RuleAction;
use crate::acl::table::{Direction, Table};
use crate::acl::FlowKey;
use crate::counters::DropReason;
use crate::snapshot::PortRole;

/// One ACL rule hit of a burst: the rule's counter slot and the frame's length. The
/// worker adds them to its counters after the burst (a trace adds them nowhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AclHit {
    pub slot: u32,
    pub bytes: u32,
}

/// The ACL stages' working arrays.
#[derive(Debug)]
pub(super) struct AclScratch {
    keys: [FlowKey; MAX_BURST],
    results: [u32; MAX_BURST],
    /// Per packet, whether the last table it went through denied it.
    denied: [bool; MAX_BURST],
    /// Per packet, the table the current egress pass applies (`NO_TABLE`: none).
    table_of: [u16; MAX_BURST],
    /// Hits of the burst: at most ingress, egress and global per packet.
    hits: [AclHit; 3 * MAX_BURST],
    pub(super) n_hits: usize,
}

impl Default for AclScratch {
    fn default() -> Self {
        AclScratch {
            keys: [FlowKey::default(); MAX_BURST],
            results: [0; MAX_BURST],
            denied: [false; MAX_BURST],
            table_of: [NO_TABLE; MAX_BURST],
            hits: [AclHit::default(); 3 * MAX_BURST],
            n_hits: 0,
        }
    }
}

impl AclScratch {
    /// The rule hits of the last burst.
    pub(super) fn hits(&self) -> &[AclHit] {
        &self.hits[..self.n_hits]
    }
}

/// `AclScratch::table_of` for a packet no table of the pass applies to.
const NO_TABLE: u16 = u16::MAX;

/// The ingress stage: the input port's table, one batch (a burst has one input port),
/// over the packets `s.ok` lists; tracked packets that may skip it keep their place.
#[inline(always)]
pub fn ingress<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let Some(table) = b.snap.acl.attached(b.in_port, Direction::Ingress) else {
        return;
    };
    let s = &mut *b.s;
    let (mut kept, mut m) = (0usize, 0usize);
    for k in 0..b.n_ok {
        let i = s.ok[k];
        if s.ct[usize::from(i)].skips_acl() {
            s.ok[kept] = i;
            kept += 1;
        } else {
            s.members[m] = i;
            m += 1;
        }
    }
    let passed = filter(
        table,
        &b.snap.identities,
        "ingress",
        &mut s.members[..m],
        &s.parsed,
        &mut s.acl,
        &mut s.reflect,
        &*b.frames,
        b.actions,
        b.t,
    );
    s.ok[kept..kept + passed].copy_from_slice(&s.members[..passed]);
    b.n_ok = kept + passed;
}

/// The egress stage, over the routed packets: first every output port's own egress
/// table, then the global table for packets leaving through an uplink. Packets sharing
/// a table are classified in one batch; tracked packets that may skip the ACLs do.
/// Only the packets no table denied stay in `s.routed`.
#[inline(always)]
pub fn egress<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    if !b.snap.acl.any_egress {
        return;
    }
    let snap = b.snap;
    let s = &mut *b.s;
    let acl = &*snap.acl;
    let mut n = b.n_routed;
    for global in [false, true] {
        let mut pending = 0usize;
        for &i in &s.routed[..n] {
            s.acl.denied[usize::from(i)] = false;
            let out = s.out[usize::from(i)];
            let table = if global {
                let uplink = snap
                    .ports
                    .get(usize::from(out))
                    .is_some_and(|p| p.role == PortRole::Uplink);
                acl.global.filter(|_| uplink)
            } else {
                acl.egress.get(usize::from(out)).copied().flatten()
            };
            let table = table.filter(|_| !s.ct[usize::from(i)].skips_acl());
            s.acl.table_of[usize::from(i)] = table.unwrap_or(NO_TABLE);
            pending += usize::from(table.is_some());
        }
        let direction = if global { "global" } else { "egress" };
        while pending > 0 {
            // The next table still to run, and every packet for it.
            let Some(tid) = s.routed[..n]
                .iter()
                .map(|&i| s.acl.table_of[usize::from(i)])
                .find(|&tid| tid != NO_TABLE)
            else {
                break;
            };
            let mut m = 0usize;
            for &i in &s.routed[..n] {
                if s.acl.table_of[usize::from(i)] == tid {
                    s.members[m] = i;
                    s.acl.table_of[usize::from(i)] = NO_TABLE;
                    m += 1;
                }
            }
            pending -= m;
            let Some(table) = acl.tables.get(usize::from(tid)) else {
                continue;
            };
            filter(
                table,
                &snap.identities,
                direction,
                &mut s.members[..m],
                &s.parsed,
                &mut s.acl,
                &mut s.reflect,
                &*b.frames,
                b.actions,
                b.t,
            );
        }
        // Keep only the packets no table denied.
        let mut kept = 0usize;
        for k in 0..n {
            let i = s.routed[k];
            if !s.acl.denied[usize::from(i)] {
                s.routed[kept] = i;
                kept += 1;
            }
        }
        n = kept;
    }
    b.n_routed = n;
}

/// Classifies the packets listed in `list` against `table`. Denied packets get their
/// drop action; the permitted ones stay in `list`, compacted, and their count is
/// returned. Every verdict is recorded as a hit.
#[allow(clippy::too_many_arguments)]
#[inline]
fn filter<F: Frames + ?Sized, T: Tracer>(
    table: &Table,
    identities: &Identities,
    direction: &str,
    list: &mut [u16],
    parsed: &[Parsed; MAX_BURST],
    a: &mut AclScratch,
    reflect: &mut [bool; MAX_BURST],
    frames: &F,
    actions: &mut [Action],
    t: &mut T,
) -> usize {
    let n = list.len();
    for (key, &i) in a.keys.iter_mut().zip(list.iter()) {
        *key = parsed[usize::from(i)].key;
    }
    table.classify(&a.keys[..n], &mut a.results[..n], identities);
    let mut kept = 0usize;
    for k in 0..n {
        let i = usize::from(list[k]);
        let result = a.results[k];
        record_hit(a, table.slot(result), frames.frame(i).len());
        trace_verdict(t, table, direction, result);
        if T::ENABLED && table.has_selectors() {
            let key = &parsed[i].key;
            trace!(
                t,
                Stage::Acl,
                "{} has identity {} in network {}",
                key.dst_ip(),
                identities.dst_identity(key),
                key.network
            );
        }
        let permitted = table.permits(result);
        a.denied[i] = !permitted;
        reflect[i] |= permitted && table.action(result) == RuleAction::Reflect;
        if permitted {
            list[kept] = list[k];
            kept += 1;
        } else {
            actions[i] = Action::Drop(DropReason::AclDeny);
        }
    }
    kept
}

#[inline(always)]
fn record_hit(a: &mut AclScratch, slot: u32, len: usize) {
    if let Some(hit) = a.hits.get_mut(a.n_hits) {
        *hit = AclHit {
            slot,
            bytes: len as u32,
        };
        a.n_hits += 1;
    }
}

#[inline(always)]
fn trace_verdict<T: Tracer>(t: &mut T, table: &Table, direction: &str, result: u32) {
    if !T::ENABLED {
        return;
    }
    match table.rules.get(result as usize) {
        Some(rule) => trace!(
            t,
            Stage::Acl,
            "{} table {} rule {}: {}{}{}",
            direction,
            table.name,
            result,
            rule.action,
            rule.dst_selector
                .as_deref()
                .map(|s| format!(" (dst {s})"))
                .unwrap_or_default(),
            rule.origin
                .as_deref()
                .map(|o| format!(" (origin {o})"))
                .unwrap_or_default()
        ),
        None => trace!(
            t,
            Stage::Acl,
            "{} table {}: no rule matches: deny",
            direction,
            table.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{self, GW_MAC, UPLINK};
    use super::*;
    use crate::acl::table::AclTables;
    use crate::acl::{Prefix, Rule};
    use crate::counters::MAX_PORTS;
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    /// The test snapshot with `deny 8.8.8.8` then `permit all` as the pod port's
    /// ingress table or as the uplink's egress table.
    fn with_table(ingress: bool) -> crate::snapshot::Snapshot {
        let mut deny = Rule::any(RuleAction::Deny);
        deny.dst = Prefix::v4(Ipv4Addr::new(8, 8, 8, 8), 32);
        let table = Table::compile(
            "t".into(),
            vec![deny, Rule::any(RuleAction::Permit)],
            vec![7, 8],
            9,
        )
        .expect("compile");
        let mut snap = testing::snapshot();
        let mut attach_in = [None; MAX_PORTS];
        let mut attach_out = [None; MAX_PORTS];
        if ingress {
            attach_in[0] = Some(0);
        } else {
            attach_out[usize::from(UPLINK)] = Some(0);
        }
        snap.acl = Arc::new(AclTables::new(
            vec![Arc::new(table)],
            attach_in,
            attach_out,
            None,
            1,
        ));
        snap
    }

    fn frames() -> Vec<Vec<u8>> {
        vec![
            testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10),
            testing::udp4(GW_MAC, [8, 8, 4, 4], 64, 10),
        ]
    }

    #[test]
    fn ingress_drops_denied_packets_and_records_every_hit() {
        let snap = with_table(true);
        let mut frames = frames();
        let ((ok, hits), actions) = testing::with_burst(&snap, &mut frames, |b| {
            testing::parse_all(b);
            ingress(b);
            (b.s.ok[..b.n_ok].to_vec(), b.s.acl_hits().to_vec())
        });
        assert_eq!(ok, [1]);
        assert_eq!(actions[0], Action::Drop(DropReason::AclDeny));
        let bytes = frames[0].len() as u32;
        assert_eq!(hits, [AclHit { slot: 7, bytes }, AclHit { slot: 8, bytes }]);
    }

    #[test]
    fn egress_filters_by_output_port() {
        let snap = with_table(false);
        let mut frames = frames();
        let (routed, actions) = testing::with_burst(&snap, &mut frames, |b| {
            testing::route_all_to(b, UPLINK);
            egress(b);
            b.s.routed[..b.n_routed].to_vec()
        });
        assert_eq!(routed, [1]);
        assert_eq!(actions[0], Action::Drop(DropReason::AclDeny));
    }
}
