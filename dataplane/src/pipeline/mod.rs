//! The packet pipeline: the path every received packet takes, as pure functions over
//! a frame's bytes and the current [`Snapshot`]. The worker runs [`process_burst`] over
//! each received burst, stage by stage, then groups the results by action;
//! `ferrulectl trace` runs the same code on one synthetic packet ([`process`]) with a
//! recording [`Tracer`].
//!
//! Stages: parse → l2 (destination MAC) → ct (the connection: owner worker, lookup,
//! replies translated back) → local (ARP, ND, echo for Ferrule's own addresses) → ttl
//! → acl (the input port's ingress table) → route (per-network LPM) → acl (the output
//! port's egress table, then the global table on uplinks) → ct commit and nat (new
//! connections, masquerade) → mtu → neighbour → rewrite. The ct stages run when the
//! caller passes its [`Conntrack`](crate::conntrack::Conntrack) and there is something to track.

pub mod ct;
pub mod icmp_error;
pub mod local;
pub mod parse;
pub mod synth;

use crate::acl::rule::Action as RuleAction;
use crate::acl::table::{Direction, Table};
use crate::acl::FlowKey;
use crate::conntrack::{Conntrack, Dir, KeyHash};
use crate::counters::DropReason;
use crate::lpm;
use crate::snapshot::{NextHopEntry, PortRole, PortState, Snapshot};
use crate::wire::{EthernetAddress, EthernetFrame, Ipv4Packet, Ipv6Packet};
use ct::CtMark;
use std::fmt;
use std::net::IpAddr;

pub use parse::{parse, Parsed};

/// Why a packet goes to the control thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Punt {
    /// An ARP reply or neighbour advertisement to learn from.
    Learn,
    /// The next hop `ip` on `port` has no resolved MAC yet: hold the packet while the
    /// control thread resolves it, then send it.
    Resolve { network: u16, ip: IpAddr, port: u16 },
}

/// Which ICMP error to send back to a packet's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpErrorKind {
    /// TTL or hop limit exhausted (ICMP type 11 / ICMPv6 type 3).
    TimeExceeded,
    /// IPv4 with DF set, larger than the output MTU (type 3 code 4).
    FragNeeded { mtu: u16 },
    /// IPv6 larger than the output MTU (ICMPv6 type 2).
    PacketTooBig { mtu: u16 },
    /// No route to the destination (ICMP type 3 code 0 / ICMPv6 type 1 code 0).
    NoRoute,
}

/// What to do with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Rewritten in place; send out of this port (configuration index).
    Forward { port: u16 },
    /// Rewritten in place into a reply; send back out of the input port.
    Reply,
    /// Drop it for `reason` and send this ICMP error to its source.
    IcmpError {
        kind: IcmpErrorKind,
        reason: DropReason,
    },
    /// Hand it to the control thread.
    Punt(Punt),
    /// Hand it to the worker that owns its connection, to run the pipeline there.
    Handoff { worker: u16 },
    /// Drop it.
    Drop(DropReason),
}

/// A pipeline stage, for traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Parse,
    L2,
    Conntrack,
    Local,
    Ttl,
    Acl,
    Route,
    Nat,
    Mtu,
    Neighbor,
    Rewrite,
}

impl Stage {
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Parse => "parse",
            Stage::L2 => "l2",
            Stage::Conntrack => "ct",
            Stage::Local => "local",
            Stage::Ttl => "ttl",
            Stage::Acl => "acl",
            Stage::Route => "route",
            Stage::Nat => "nat",
            Stage::Mtu => "mtu",
            Stage::Neighbor => "neighbor",
            Stage::Rewrite => "rewrite",
        }
    }
}

/// Receives each stage's decision. The fast path uses [`NoTrace`], which compiles to
/// nothing; traces use [`Recorder`].
pub trait Tracer {
    const ENABLED: bool;
    fn stage(&mut self, stage: Stage, detail: fmt::Arguments<'_>);
}

/// The fast path's tracer: records nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTrace;

impl Tracer for NoTrace {
    const ENABLED: bool = false;
    #[inline(always)]
    fn stage(&mut self, _: Stage, _: fmt::Arguments<'_>) {}
}

/// Records every stage's decision as text (control thread only: it allocates).
#[derive(Debug, Default, Clone)]
pub struct Recorder {
    pub stages: Vec<(Stage, String)>,
}

impl Tracer for Recorder {
    const ENABLED: bool = true;
    fn stage(&mut self, stage: Stage, detail: fmt::Arguments<'_>) {
        self.stages.push((stage, detail.to_string()));
    }
}

/// Records a stage's decision when tracing; costs nothing otherwise.
macro_rules! trace {
    ($t:expr, $stage:expr, $($arg:tt)*) => {
        if T::ENABLED {
            $t.stage($stage, format_args!($($arg)*));
        }
    };
}
pub(crate) use trace;

/// Most packets one call of [`process_burst`] handles.
pub const MAX_BURST: usize = 256;

/// A burst of frames the pipeline can read and rewrite in place: the worker's mbuf
/// burst, or plain buffers in tests, benchmarks and traces.
pub trait Frames {
    fn count(&self) -> usize;
    fn frame(&self, i: usize) -> &[u8];
    fn frame_mut(&mut self, i: usize) -> &mut [u8];
    /// Hints that frame `i` will be read soon (no-op by default and out of range).
    #[inline(always)]
    fn prefetch(&self, _i: usize) {}
}

/// How many packets ahead stage 1 prefetches.
const PREFETCH_AHEAD: usize = 4;

impl Frames for [Vec<u8>] {
    fn count(&self) -> usize {
        self.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        &self[i]
    }
    fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self[i]
    }
}

/// One frame as a burst of one (traces).
impl Frames for &mut [u8] {
    fn count(&self) -> usize {
        1
    }
    fn frame(&self, _: usize) -> &[u8] {
        self
    }
    fn frame_mut(&mut self, _: usize) -> &mut [u8] {
        self
    }
}

/// One ACL rule hit of a burst: the rule's counter slot and the frame's length. The
/// worker adds them to its counters after the burst (a trace adds them nowhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AclHit {
    pub slot: u32,
    pub bytes: u32,
}

/// The ACL stage's working arrays.
#[derive(Debug)]
struct AclScratch {
    keys: [FlowKey; MAX_BURST],
    results: [u32; MAX_BURST],
    /// Per packet, whether the last table it went through denied it.
    denied: [bool; MAX_BURST],
    /// Per packet, whether a `reflect` rule let it through.
    reflect: [bool; MAX_BURST],
    /// Per packet, the table the current egress pass applies (`NO_TABLE`: none).
    table_of: [u16; MAX_BURST],
    /// Hits of the burst: at most ingress, egress and global per packet.
    hits: [AclHit; 3 * MAX_BURST],
    n_hits: usize,
}

/// `AclScratch::table_of` for a packet no table of the pass applies to.
const NO_TABLE: u16 = u16::MAX;

/// Per-burst working arrays, allocated once per worker and reused.
#[derive(Debug)]
pub struct Scratch {
    parsed: [Parsed; MAX_BURST],
    /// Packets that passed the front stages, by index.
    ok: [u16; MAX_BURST],
    /// Packets still to be routed, by index; IPv4 destinations and their next hops.
    pending4: [u16; MAX_BURST],
    dst4: [u32; MAX_BURST],
    nh4: [u32; MAX_BURST],
    pending6: [u16; MAX_BURST],
    /// Packets routed to a port, by index, and per packet its output port and gateway.
    routed: [u16; MAX_BURST],
    hop: [(u16, Option<IpAddr>); MAX_BURST],
    /// Per packet, the next hop (route table value) it was routed by.
    nh: [u32; MAX_BURST],
    /// The packets an egress table classifies in one batch.
    members: [u16; MAX_BURST],
    /// Per packet, what conntrack found.
    ct: [CtMark; MAX_BURST],
    /// Per packet (indexed like `parsed`), its key's conntrack hash as the lookup made it.
    hash: [KeyHash; MAX_BURST],
    /// Per packet, what the SNAT prefetch worked out for the commit.
    snat: [ct::SnatHint; MAX_BURST],
    acl: AclScratch,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            parsed: [Parsed::EMPTY; MAX_BURST],
            ok: [0; MAX_BURST],
            pending4: [0; MAX_BURST],
            dst4: [0; MAX_BURST],
            nh4: [0; MAX_BURST],
            pending6: [0; MAX_BURST],
            routed: [0; MAX_BURST],
            hop: [(0, None); MAX_BURST],
            nh: [0; MAX_BURST],
            members: [0; MAX_BURST],
            ct: [CtMark::None; MAX_BURST],
            hash: [KeyHash::default(); MAX_BURST],
            snat: [ct::SnatHint::None; MAX_BURST],
            acl: AclScratch {
                keys: [FlowKey::default(); MAX_BURST],
                results: [0; MAX_BURST],
                denied: [false; MAX_BURST],
                reflect: [false; MAX_BURST],
                table_of: [NO_TABLE; MAX_BURST],
                hits: [AclHit::default(); 3 * MAX_BURST],
                n_hits: 0,
            },
        }
    }
}

impl Scratch {
    /// The ACL rule hits of the last burst.
    pub fn acl_hits(&self) -> &[AclHit] {
        &self.acl.hits[..self.acl.n_hits]
    }
}

/// Runs one received frame through the pipeline (a burst of one). `frame` is rewritten
/// in place for `Forward` and `Reply`; for every other action it is left as received
/// (so a punted or traced packet is still the original).
pub fn process<T: Tracer>(snap: &Snapshot, in_port: u16, frame: &mut [u8], t: &mut T) -> Action {
    process_ct(snap, in_port, frame, None, t)
}

/// [`process`] with connection tracking.
pub fn process_ct<T: Tracer>(
    snap: &Snapshot,
    in_port: u16,
    frame: &mut [u8],
    ct: Option<&mut Conntrack>,
    t: &mut T,
) -> Action {
    let mut scratch = Scratch::default();
    let mut actions = [Action::Drop(DropReason::Malformed)];
    let mut one: &mut [u8] = frame;
    process_burst(snap, in_port, &mut one, &mut actions, &mut scratch, ct, t);
    actions[0]
}

/// Runs a burst received on `in_port` through the pipeline, stage by stage: parse and
/// l2 for every packet; the conntrack lookup for the burst (keys hashed and table
/// lines prefetched first, then each packet in order); local and ttl; the ingress
/// ACL; one batched route lookup for all IPv4 packets left; the egress ACLs; then
/// MTU, conntrack commit and NAT, next hop, neighbour and rewrite. `actions[i]`
/// receives the verdict of frame `i`.
pub fn process_burst<F: Frames + ?Sized, T: Tracer>(
    snap: &Snapshot,
    in_port: u16,
    frames: &mut F,
    actions: &mut [Action],
    s: &mut Scratch,
    mut ct: Option<&mut Conntrack>,
    t: &mut T,
) {
    let n = frames.count().min(MAX_BURST).min(actions.len());
    s.acl.n_hits = 0;
    let Some(port) = snap.ports.get(usize::from(in_port)) else {
        actions[..n].fill(Action::Drop(DropReason::Malformed));
        return;
    };
    // Stage 1: parse and l2 (ARP answered here).
    for i in 0..PREFETCH_AHEAD.min(n) {
        frames.prefetch(i);
    }
    if !ct.as_deref().is_some_and(|c| c.active(snap)) {
        ct = None;
    }
    let mut n_ok = 0usize;
    for (i, action) in actions.iter_mut().enumerate().take(n) {
        frames.prefetch(i + PREFETCH_AHEAD);
        s.ct[i] = CtMark::None;
        s.snat[i] = ct::SnatHint::None;
        s.acl.reflect[i] = false;
        match front(snap, port, frames.frame_mut(i), t) {
            Ok(parsed) => {
                s.parsed[i] = parsed;
                s.ok[n_ok] = i as u16;
                n_ok += 1;
            }
            Err(a) => *action = a,
        }
    }
    // Stage 1b: conntrack, batched: hash every key, then packet by packet and in order
    // the lookup proper (owner, track, replies translated back), with the index buckets
    // and entries of the packets a few places on prefetched just before, so the burst's
    // table misses overlap.
    if let Some(ct) = ct.as_deref_mut() {
        n_ok = ct::lookup_burst(
            snap,
            ct,
            &mut s.parsed,
            &mut s.ok[..n_ok],
            &mut s.hash,
            &mut s.ct,
            frames,
            actions,
            t,
        );
    }
    // Stage 1c: local (echo and ND for Ferrule's own addresses) and ttl.
    let mut kept = 0usize;
    for k in 0..n_ok {
        let i = usize::from(s.ok[k]);
        match local_ttl(snap, port, &s.parsed[i], frames.frame_mut(i), t) {
            Ok(()) => {
                s.ok[kept] = i as u16;
                kept += 1;
            }
            Err(a) => actions[i] = a,
        }
    }
    n_ok = kept;
    // Stage 2: the input port's ingress ACL, one batch (a burst has one input port);
    // tracked packets that may skip it keep their place.
    if let Some(table) = snap.acl.attached(in_port, Direction::Ingress) {
        let (mut kept, mut m) = (0usize, 0usize);
        for k in 0..n_ok {
            let i = s.ok[k];
            if s.ct[usize::from(i)].skips_acl() {
                s.ok[kept] = i;
                kept += 1;
            } else {
                s.members[m] = i;
                m += 1;
            }
        }
        let passed = acl_filter(
            table,
            "ingress",
            &mut s.members[..m],
            &s.parsed,
            &mut s.acl,
            &*frames,
            actions,
            t,
        );
        s.ok[kept..kept + passed].copy_from_slice(&s.members[..passed]);
        n_ok = kept + passed;
    }
    let (mut n4, mut n6) = (0usize, 0usize);
    for &i in &s.ok[..n_ok] {
        let parsed = &s.parsed[usize::from(i)];
        if parsed.is_ipv6() {
            s.pending6[n6] = i;
            n6 += 1;
        } else {
            s.pending4[n4] = i;
            s.dst4[n4] = u32::from_be_bytes(v4_octets(&parsed.key.dst));
            n4 += 1;
        }
    }
    // Stage 3: route lookups, IPv4 batched (prefetching the table), then next hops.
    let net = snap.networks.get(usize::from(port.network));
    if let Some(net) = net {
        net.lpm4.lookup_batch(&s.dst4[..n4], &mut s.nh4[..n4]);
    }
    let mut n_routed = 0usize;
    for k in 0..n4 + n6 {
        let (i, nh) = if k < n4 {
            let nh = if net.is_some() {
                s.nh4[k]
            } else {
                lpm::NO_ROUTE
            };
            (usize::from(s.pending4[k]), nh)
        } else {
            let i = usize::from(s.pending6[k - n4]);
            let nh = match (net, s.parsed[i].key.dst_ip()) {
                (Some(net), IpAddr::V6(a)) => net.lpm6.lookup(a).unwrap_or(lpm::NO_ROUTE),
                _ => lpm::NO_ROUTE,
            };
            (i, nh)
        };
        match route(snap, port, &s.parsed[i], nh, frames.frame_mut(i), t) {
            Ok(hop) => {
                s.hop[i] = hop;
                s.nh[i] = nh;
                s.routed[n_routed] = i as u16;
                n_routed += 1;
            }
            Err(action) => actions[i] = action,
        }
    }
    // Stage 4: egress ACLs: the output port's table, then the global table on uplinks.
    if snap.acl.any_egress {
        n_routed = egress_acl(snap, s, n_routed, &*frames, actions, t);
    }
    // Stage 5: MTU, conntrack commit and NAT, neighbour, rewrite. First a hint: the
    // table buckets the burst's SNAT allocations will probe, prefetched together.
    if let Some(ct) = ct.as_deref() {
        if snap.snat.snat_addr().is_some() {
            let mut ahead = ct.alloc.clone();
            for &i in &s.routed[..n_routed] {
                let i = usize::from(i);
                // Tracked packets have nothing to prefetch and the commit reads no hint
                // for them: no call, and no hint copied through the stack.
                if s.ct[i] != CtMark::None {
                    continue;
                }
                if let Some(output) = snap.ports.get(usize::from(s.hop[i].0)) {
                    s.snat[i] = ct::prefetch_snat(
                        snap,
                        ct,
                        port,
                        output,
                        &s.parsed[i],
                        s.ct[i],
                        frames.frame(i),
                        &mut ahead,
                    );
                }
            }
        }
    }
    for &i in &s.routed[..n_routed] {
        let i = usize::from(i);
        let (out, via) = s.hop[i];
        let Some(output) = snap.ports.get(usize::from(out)) else {
            actions[i] = Action::Drop(DropReason::NoRoute);
            continue;
        };
        if let Err(a) = mtu(&s.parsed[i], output, t) {
            actions[i] = a;
            continue;
        }
        if let Some(ct) = ct.as_deref_mut() {
            if let CtMark::Tracked {
                id,
                dir: Dir::Reply,
                checked: false,
                ..
            } = s.ct[i]
            {
                if !ct::reply_recheck(snap, ct, in_port, out, id, t) {
                    actions[i] = Action::Drop(DropReason::AclDeny);
                    continue;
                }
            }
            let reflect = s.acl.reflect[i];
            let frame = frames.frame_mut(i);
            if let Err(a) = ct::commit(
                snap,
                ct,
                port,
                output,
                &s.parsed[i],
                s.ct[i],
                &s.hash[i],
                &s.snat[i],
                reflect,
                frame,
                t,
            ) {
                actions[i] = a;
                continue;
            }
        }
        actions[i] = finish(
            snap,
            port,
            &s.parsed[i],
            out,
            via,
            s.nh[i],
            frames.frame_mut(i),
            t,
        );
    }
    // Connections the changed ACLs now deny are closed.
    if let Some(ct) = ct {
        for (action, mark) in actions.iter().zip(&s.ct).take(n) {
            if *action == Action::Drop(DropReason::AclDeny) {
                ct::close_denied(ct, *mark, snap.acl.generation, t);
            }
        }
    }
}

/// Classifies the packets listed in `list` against `table`. Denied packets get their
/// drop action; the permitted ones stay in `list`, compacted, and their count is
/// returned. Every verdict is recorded as a hit.
#[allow(clippy::too_many_arguments)]
#[inline]
fn acl_filter<F: Frames + ?Sized, T: Tracer>(
    table: &Table,
    direction: &str,
    list: &mut [u16],
    parsed: &[Parsed; MAX_BURST],
    a: &mut AclScratch,
    frames: &F,
    actions: &mut [Action],
    t: &mut T,
) -> usize {
    let n = list.len();
    for (key, &i) in a.keys.iter_mut().zip(list.iter()) {
        *key = parsed[usize::from(i)].key;
    }
    table.classify(&a.keys[..n], &mut a.results[..n]);
    let mut kept = 0usize;
    for k in 0..n {
        let i = usize::from(list[k]);
        let result = a.results[k];
        record_hit(a, table.slot(result), frames.frame(i).len());
        trace_verdict(t, table, direction, result);
        let permitted = table.permits(result);
        a.denied[i] = !permitted;
        a.reflect[i] |= permitted && table.action(result) == RuleAction::Reflect;
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
            "{} table {} rule {}: {}{}",
            direction,
            table.name,
            result,
            rule.action,
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

/// The egress ACL passes over the routed packets: first every output port's own
/// egress table, then the global table for packets leaving through an uplink. Packets
/// sharing a table are classified in one batch. Returns how many stay routed.
fn egress_acl<F: Frames + ?Sized, T: Tracer>(
    snap: &Snapshot,
    s: &mut Scratch,
    n_routed: usize,
    frames: &F,
    actions: &mut [Action],
    t: &mut T,
) -> usize {
    let acl = &*snap.acl;
    let mut n = n_routed;
    for global in [false, true] {
        let mut pending = 0usize;
        for &i in &s.routed[..n] {
            s.acl.denied[usize::from(i)] = false;
            let out = s.hop[usize::from(i)].0;
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
            acl_filter(
                table,
                direction,
                &mut s.members[..m],
                &s.parsed,
                &mut s.acl,
                frames,
                actions,
                t,
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
    n
}

/// The IPv4 address inside an IPv4-mapped key address.
#[inline(always)]
fn v4_octets(mapped: &[u8; 16]) -> [u8; 4] {
    [mapped[12], mapped[13], mapped[14], mapped[15]]
}

/// Parse and l2: `Ok(parsed)` when the packet goes on to conntrack, local and ttl,
/// else the action that ends its path here (ARP is answered here).
#[inline(always)]
fn front<T: Tracer>(
    snap: &Snapshot,
    port: &PortState,
    frame: &mut [u8],
    t: &mut T,
) -> Result<Parsed, Action> {
    let parsed = match parse::parse(frame, port.network) {
        Ok(p) => p,
        Err(reason) => {
            trace!(
                t,
                Stage::Parse,
                "{} byte frame: {}",
                frame.len(),
                reason.name()
            );
            return Err(Action::Drop(reason));
        }
    };
    trace!(t, Stage::Parse, "{}", parsed);

    // l2: frames must be for us: our MAC, broadcast (ARP), or IPv6 multicast (ND).
    let dst_mac = EthernetFrame::new_unchecked(&*frame).dst_addr();
    // A multicast frame is taken only for an IPv6 multicast destination (ND): a
    // unicast packet in a multicast frame was not sent to us to route.
    let l2_ok = dst_mac == port.mac
        || (dst_mac.is_broadcast() && parsed.is_arp())
        || (dst_mac.is_multicast()
            && parsed.is_ipv6()
            && matches!(parsed.key.dst_ip(), IpAddr::V6(a) if a.is_multicast()));
    if !l2_ok {
        trace!(
            t,
            Stage::L2,
            "destination {} is not {} of port {}",
            dst_mac,
            port.mac,
            port.name
        );
        return Err(Action::Drop(DropReason::DstMacMismatch));
    }
    trace!(
        t,
        Stage::L2,
        "destination {} accepted on port {} (network {})",
        dst_mac,
        port.name,
        net_name(snap, port.network)
    );

    if parsed.is_arp() {
        return Err(local::arp(port, frame, t));
    }
    Ok(parsed)
}

/// Local and ttl, after conntrack: `Ok` when the packet goes on to routing, else the
/// action that ends its path here.
#[inline(always)]
fn local_ttl<T: Tracer>(
    snap: &Snapshot,
    port: &PortState,
    parsed: &Parsed,
    frame: &mut [u8],
    t: &mut T,
) -> Result<(), Action> {
    if let Some(action) = local::input(port, parsed, frame, t) {
        return Err(action);
    }
    if parsed.ttl <= 1 {
        // Rare: only here is it worth a route lookup to see whether the packet is for
        // one of Ferrule's addresses on another port, which takes it whatever its TTL.
        if let Some((_, NextHopEntry::Local)) = snap.route(port.network, parsed.key.dst_ip()) {
            trace!(
                t,
                Stage::Route,
                "{} is one of Ferrule's addresses",
                parsed.key.dst_ip()
            );
            return Err(local::answer(port, parsed, frame, t));
        }
        trace!(
            t,
            Stage::Ttl,
            "ttl {} expires here: ICMP time exceeded to {}",
            parsed.ttl,
            parsed.key.src_ip()
        );
        return Err(Action::IcmpError {
            kind: IcmpErrorKind::TimeExceeded,
            reason: DropReason::TtlExceeded,
        });
    }
    trace!(t, Stage::Ttl, "ttl {} -> {}", parsed.ttl, parsed.ttl - 1);
    Ok(())
}

/// Route, given the looked-up next hop: `Ok((output port, gateway))` for a packet to
/// send on, else the action that ends its path here.
#[inline(always)]
fn route<T: Tracer>(
    snap: &Snapshot,
    port: &PortState,
    parsed: &Parsed,
    nh: u32,
    frame: &mut [u8],
    t: &mut T,
) -> Result<(u16, Option<IpAddr>), Action> {
    let dst = parsed.key.dst_ip();
    let Some(entry) = (nh != lpm::NO_ROUTE).then(|| snap.next_hop(nh)).flatten() else {
        trace!(
            t,
            Stage::Route,
            "no route to {} in network {}",
            dst,
            net_name(snap, port.network)
        );
        return Err(Action::IcmpError {
            kind: IcmpErrorKind::NoRoute,
            reason: DropReason::NoRoute,
        });
    };
    let (out, via) = match *entry {
        NextHopEntry::Port { port, via } => (port, via),
        NextHopEntry::Blackhole => {
            trace!(
                t,
                Stage::Route,
                "{} matches a blackhole route (next hop {})",
                dst,
                nh
            );
            return Err(Action::Drop(DropReason::Blackhole));
        }
        NextHopEntry::Local => {
            // An address Ferrule owns on another port (a node IP seen from a pod).
            trace!(t, Stage::Route, "{} is one of Ferrule's addresses", dst);
            return Err(local::answer(port, parsed, frame, t));
        }
    };
    let Some(out_port) = snap.ports.get(usize::from(out)) else {
        return Err(Action::Drop(DropReason::NoRoute));
    };
    trace!(
        t,
        Stage::Route,
        "{} in network {} -> port {}{}",
        dst,
        net_name(snap, port.network),
        out_port.name,
        via.map(|v| format!(" via {v}"))
            .unwrap_or_else(|| " (on-link)".into())
    );
    Ok((out, via))
}

/// MTU: whether a packet fits the output port, else the ICMP error or drop (checked
/// before NAT, so that an ICMP error quotes the packet as its sender sent it).
#[inline(always)]
fn mtu<T: Tracer>(parsed: &Parsed, out_port: &PortState, t: &mut T) -> Result<(), Action> {
    if parsed.l3_len > usize::from(out_port.mtu) {
        let mtu = out_port.mtu;
        if parsed.is_ipv6() {
            trace!(
                t,
                Stage::Mtu,
                "{} bytes > mtu {} of {}: packet too big",
                parsed.l3_len,
                mtu,
                out_port.name
            );
            return Err(Action::IcmpError {
                kind: IcmpErrorKind::PacketTooBig { mtu },
                reason: DropReason::MtuExceeded,
            });
        }
        if parsed.dont_frag {
            trace!(
                t,
                Stage::Mtu,
                "{} bytes > mtu {} of {} with DF: fragmentation needed",
                parsed.l3_len,
                mtu,
                out_port.name
            );
            return Err(Action::IcmpError {
                kind: IcmpErrorKind::FragNeeded { mtu },
                reason: DropReason::MtuExceeded,
            });
        }
        trace!(
            t,
            Stage::Mtu,
            "{} bytes > mtu {} of {} (no fragmentation)",
            parsed.l3_len,
            mtu,
            out_port.name
        );
        return Err(Action::Drop(DropReason::MtuExceeded));
    }
    trace!(
        t,
        Stage::Mtu,
        "{} bytes fit mtu {}",
        parsed.l3_len,
        out_port.mtu
    );
    Ok(())
}

/// Neighbour and rewrite of a packet routed to port `out`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn finish<T: Tracer>(
    snap: &Snapshot,
    port: &PortState,
    parsed: &Parsed,
    out: u16,
    via: Option<IpAddr>,
    nh: u32,
    frame: &mut [u8],
    t: &mut T,
) -> Action {
    let Some(out_port) = snap.ports.get(usize::from(out)) else {
        return Action::Drop(DropReason::NoRoute);
    };
    // neighbour
    let next_mac: EthernetAddress = match (out_port.role, via) {
        (PortRole::Pod, None) => match out_port.pod_mac {
            Some(mac) => {
                trace!(t, Stage::Neighbor, "pod {} at {}", out_port.name, mac);
                mac
            }
            None => {
                trace!(
                    t,
                    Stage::Neighbor,
                    "pod port {} has no pod MAC",
                    out_port.name
                );
                return Action::Drop(DropReason::NoNeighbour);
            }
        },
        (_, Some(gw)) if matches!(snap.nh_mac.get(nh as usize), Some(Some(_))) => {
            // The route's gateway, resolved when the generation was built.
            let mac = snap.nh_mac[nh as usize].unwrap_or(EthernetAddress([0; 6]));
            trace!(t, Stage::Neighbor, "{} is {}", gw, mac);
            mac
        }
        (_, via) => {
            let target = via.unwrap_or_else(|| parsed.key.dst_ip());
            match snap.neighbor(port.network, target) {
                Some(n) => {
                    trace!(t, Stage::Neighbor, "{} is {}", target, n.mac);
                    n.mac
                }
                None => {
                    trace!(
                        t,
                        Stage::Neighbor,
                        "{} unresolved on {}: held while it is resolved",
                        target,
                        out_port.name
                    );
                    return Action::Punt(Punt::Resolve {
                        network: port.network,
                        ip: target,
                        port: out,
                    });
                }
            }
        }
    };

    // rewrite
    rewrite(frame, parsed, out_port.mac, next_mac);
    trace!(
        t,
        Stage::Rewrite,
        "src mac {}, dst mac {}, ttl {}",
        out_port.mac,
        next_mac,
        parsed.ttl - 1
    );
    Action::Forward { port: out }
}

/// Decrements TTL / hop limit (IPv4 checksum updated incrementally) and sets the MACs.
#[inline]
pub fn rewrite(frame: &mut [u8], parsed: &Parsed, src: EthernetAddress, dst: EthernetAddress) {
    let l3 = parsed.l3_offset;
    if parsed.is_ipv6() {
        let mut ip = Ipv6Packet::new_unchecked(&mut frame[l3..]);
        let hl = ip.hop_limit();
        ip.set_hop_limit(hl.saturating_sub(1));
    } else {
        Ipv4Packet::new_unchecked(&mut frame[l3..]).decrement_ttl();
    }
    let mut eth = EthernetFrame::new_unchecked(frame);
    eth.set_src_addr(src);
    eth.set_dst_addr(dst);
}

fn net_name(snap: &Snapshot, network: u16) -> &str {
    snap.networks
        .get(usize::from(network))
        .map(|n| n.name.as_str())
        .unwrap_or("?")
}
