//! The conntrack and NAT stages, over a burst's context: the lookup ([`lookup`], after
//! l2: which worker owns a packet's connection, the connection found and advanced,
//! replies and ICMP errors of masqueraded connections translated back before anything
//! else looks at them), whether a tracked packet may skip the ACLs
//! ([`CtMark::skips_acl`]), the commit ([`commit`], after mtu: connections created for
//! `reflect` permits and masqueraded pod traffic, original-direction packets
//! masqueraded, replies re-checked after an ACL change) and, last, the closing of the
//! connections the changed ACLs deny ([`close_denied`]). The per-worker state they
//! work on is [`Conntrack`].

use super::burst::{Burst, Scratch};
use super::{net_name, trace, Action, Frames, Parsed, Stage, Tracer};
use crate::acl::table::Direction;
use crate::conntrack::{
    ConnId, Conntrack, Dir, InsertError, KeyHash, L4Info, Nat, TrackVerdict, NAT_ZONE,
};
use crate::counters::DropReason;
use crate::flow::{Family, FlowKey};
use crate::nat::rewrite::{self, Endpoint};
use crate::nat::{port_owner, PortAllocator, SnatPolicy};
use crate::snapshot::{PortRole, PortState, Snapshot};
use crate::wire::{IpProtocol, TcpPacket};
use std::net::Ipv4Addr;

const ICMP: u8 = IpProtocol::ICMP.0;
const ICMPV6: u8 = IpProtocol::ICMPV6.0;
const TCP: u8 = IpProtocol::TCP.0;

/// What the lookup found for a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CtMark {
    /// Not tracked (yet).
    #[default]
    None,
    /// A packet of a tracked connection, in direction `dir`; `checked` when the
    /// connection was last checked against the ACL state in force; `nat`, the
    /// connection's source NAT (for the commit stage's masquerade).
    Tracked {
        id: ConnId,
        dir: Dir,
        checked: bool,
        nat: Option<Nat>,
    },
    /// An ICMP error about a tracked connection (netfilter's RELATED), travelling in
    /// direction `dir` of the connection.
    Related { id: ConnId, dir: Dir },
}

impl CtMark {
    /// Whether the ACLs are skipped: replies and errors of tracked connections, and
    /// original-direction packets of connections checked against the rules in force.
    #[inline]
    pub fn skips_acl(self) -> bool {
        match self {
            CtMark::None => false,
            CtMark::Tracked { dir, checked, .. } => dir == Dir::Reply || checked,
            CtMark::Related { .. } => true,
        }
    }
}

/// Whether `parsed` is an ICMP or ICMPv6 error message (which quotes a packet).
fn is_icmp_error(parsed: &Parsed, frame: &[u8]) -> bool {
    let v6 = parsed.key.family == Family::V6;
    let proto = parsed.key.proto;
    parsed.l4_offset != 0
        && ((proto == ICMP && !v6) || (proto == ICMPV6 && v6))
        && frame
            .get(parsed.l4_offset)
            .is_some_and(|&t| rewrite::is_icmp_error(t, v6))
}

fn quoted(parsed: &Parsed, frame: &[u8]) -> Option<FlowKey> {
    rewrite::quoted_key(
        frame,
        parsed.l4_offset,
        parsed.key.family == Family::V6,
        parsed.key.network,
    )
}

/// The worker that owns a packet's connection. Replies to masqueraded connections (and
/// errors about them) go to the worker whose SNAT port they carry; everything else to
/// the worker a symmetric hash of the flow picks, the same for both directions.
/// Anything addressed to a node IP is named by its port, in the SNAT range or not:
/// nothing but masqueraded connections' replies passes through a node IP (the rest is
/// local, answered or dropped by any worker), and a connection masqueraded before
/// `vpc.sync` narrowed the range keeps its port, and so its owner.
pub fn owner(parsed: &Parsed, frame: &[u8], snat: &SnatPolicy, workers: u16) -> u16 {
    if workers <= 1 {
        return 0;
    }
    let key = &parsed.key;
    let error = is_icmp_error(parsed, frame);
    let flow = if error {
        quoted(parsed, frame).unwrap_or(*key)
    } else {
        *key
    };
    owner_of(key, &flow, error, snat, workers)
}

/// [`owner`] of a packet with key `key`, of connection `flow` (the key itself, or for
/// an ICMP error, `error`, the key it quotes), among `workers` (0 for one worker).
#[inline(always)]
pub(super) fn owner_of(
    key: &FlowKey,
    flow: &FlowKey,
    error: bool,
    snat: &SnatPolicy,
    workers: u16,
) -> u16 {
    if workers <= 1 {
        return 0;
    }
    if key.family == Family::V4 && snat.is_node_ip(Ipv4Addr::from(key.dst_v4())) {
        // A reply arrives at NAT address:port; an error quotes NAT address:port → remote.
        let nat_port = if error { flow.src_port } else { key.dst_port };
        return port_owner(nat_port, workers);
    }
    (flow.symmetric_hash() % u64::from(workers)) as u16
}

/// The transport fields conntrack follows.
#[inline]
fn l4_info(parsed: &Parsed, frame: &[u8]) -> L4Info {
    if parsed.key.proto != TCP || parsed.l4_offset == 0 {
        return L4Info::NONE;
    }
    let ip_payload = parsed
        .l3_len
        .saturating_sub(parsed.l4_offset - parsed.l3_offset);
    tcp_info(frame, parsed.l4_offset, ip_payload)
}

/// [`l4_info`] of a TCP segment at `l4_offset` of `frame`, `ip_payload` bytes of IP
/// payload long.
#[inline(always)]
pub(super) fn tcp_info(frame: &[u8], l4_offset: usize, ip_payload: usize) -> L4Info {
    let Some(tcp) = frame
        .get(l4_offset..)
        .and_then(|b| TcpPacket::new_checked(b).ok())
    else {
        return L4Info::NONE;
    };
    L4Info::from_tcp(&tcp, ip_payload.saturating_sub(tcp.header_len()) as u32)
}

/// The lookup stage, after l2 and before local, over the packets `s.ok` lists: each
/// packet is handed to its owner, its connection found and advanced, and replies and
/// ICMP errors of masqueraded connections translated back to the pod (updating its
/// parse). The keys are hashed first (`s.hash`, which the commit stage reuses); then
/// each packet, in order, is looked up with the index buckets and entries of the
/// packets a few places on prefetched just before ([`ConnTable::prefetch_ahead`]), so
/// that the burst's table misses overlap with the work on the packets before them. The
/// packets that go on stay in `s.ok` with their mark in `s.ct`; the others get their
/// action. Nothing to do without conntrack.
///
/// [`ConnTable::prefetch_ahead`]: crate::conntrack::ConnTable::prefetch_ahead
#[inline(always)]
pub fn lookup<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let Some(ct) = b.ct.as_deref_mut() else {
        return;
    };
    let (snap, s) = (b.snap, &mut *b.s);
    let n = b.n_ok;
    let ok = &mut s.ok[..n];
    for &i in ok.iter() {
        let i = usize::from(i);
        s.hash[i] = ct.table.key_hash(&s.parsed[i].key);
    }
    let mut kept = 0usize;
    for k in 0..n {
        ct.table
            .prefetch_ahead(&mut s.hash, k, |j| ok.get(j).map(|&i| usize::from(i)));
        let i = usize::from(ok[k]);
        let (p, frame) = (&mut s.parsed[i], b.frames.frame_mut(i));
        match lookup_into(snap, ct, p, s.hash[i], frame, &mut s.ct[i], b.t) {
            Ok(()) => {
                ok[kept] = i as u16;
                kept += 1;
            }
            Err(a) => b.actions[i] = a,
        }
    }
    b.n_ok = kept;
}

/// The lookup of one packet, whose key hashes to `hash`, writing the mark to `mark` (the
/// burst's array) field by field: a mark returned by value went through the stack in
/// narrow stores and came back in one wide load, which waited for them (a
/// store-forwarding stall per packet).
#[inline(always)]
fn lookup_into<T: Tracer>(
    snap: &Snapshot,
    ct: &mut Conntrack,
    parsed: &mut Parsed,
    hash: KeyHash,
    frame: &mut [u8],
    mark: &mut CtMark,
    t: &mut T,
) -> Result<(), Action> {
    // (`owner` is 0 for a single worker.)
    if ct.workers > 1 || ct.worker != 0 {
        let owner = owner(parsed, frame, &snap.snat, ct.workers);
        if owner != ct.worker && !ct.no_handoff {
            trace!(t, Stage::Conntrack, "owned by worker {}: handed off", owner);
            return Err(Action::Handoff { worker: owner });
        }
    }
    if parsed.later_fragment {
        trace!(t, Stage::Conntrack, "later fragment: not tracked");
        *mark = CtMark::None;
        return Ok(());
    }
    let len = parsed.l3_len as u32;
    if let Some((id, dir)) = ct
        .table
        .lookup_hashed(&parsed.key, hash)
        .filter(|&(_, dir)| !echo_against(parsed, frame, dir))
    {
        let l4 = l4_info(parsed, frame);
        match ct.table.track(id, dir, &l4, len, ct.now) {
            TrackVerdict::Invalid => {
                trace!(
                    t,
                    Stage::Conntrack,
                    "connection {}: invalid in its state: drop",
                    id.index()
                );
                return Err(Action::Drop(DropReason::CtInvalid));
            }
            TrackVerdict::Reopen => {
                trace!(
                    t,
                    Stage::Conntrack,
                    "connection {} closing: a new SYN opens it again",
                    id.index()
                );
                ct.table.remove(id);
                *mark = CtMark::None;
                return Ok(());
            }
            TrackVerdict::Accept => {}
        }
        let Some(conn) = ct.table.get(id) else {
            *mark = CtMark::None;
            return Ok(());
        };
        let checked = !ct.recheck || conn.acl_generation() == snap.acl.generation;
        trace!(
            t,
            Stage::Conntrack,
            "connection {} of network {} {} ({}), {}",
            id.index(),
            net_name(snap, conn.zone()),
            conn.state(),
            if dir == Dir::Original {
                "original"
            } else {
                "reply"
            },
            if dir == Dir::Reply {
                "reply: ACLs skipped"
            } else if checked {
                "checked against the ACLs in force: skipped"
            } else {
                "ACLs changed: checked again"
            }
        );
        let nat = conn.nat();
        if let (Dir::Reply, Some(nat)) = (dir, nat) {
            let (addr, port) = conn.source_v4();
            if !rewrite::rewrite(
                frame,
                parsed.l3_offset,
                parsed.l4_offset,
                parsed.key.proto,
                Endpoint::Dst,
                addr,
                port,
            ) {
                return Err(Action::Drop(DropReason::Malformed));
            }
            trace!(
                t,
                Stage::Nat,
                "reply to {}:{} translated back to {}:{} (reply in zone {} → network {})",
                nat.addr,
                nat.port,
                addr,
                port,
                NAT_ZONE,
                net_name(snap, conn.zone())
            );
            set_endpoint(&mut parsed.key, Endpoint::Dst, addr, port);
            // The reply goes on in the pod's network: routed there, not in zone 0.
            parsed.key.network = conn.zone();
        }
        *mark = CtMark::Tracked {
            id,
            dir,
            checked,
            nat,
        };
        return Ok(());
    }
    *mark = untracked(snap, ct, parsed, frame, t)?;
    Ok(())
}

/// Whether the packet is an ICMP or ICMPv6 echo going against the way its
/// connection's echoes of direction `dir` go: a request in the reply direction or a
/// reply in the original one. A request and its reply have the same key (the id is
/// both "ports"), so without this an echo request from outside to the node address
/// and a masqueraded ping's id would be taken for the ping's reply and translated to
/// the pod, past the ACLs. Such a packet is not the connection's.
#[inline(always)]
fn echo_against(parsed: &Parsed, frame: &[u8], dir: Dir) -> bool {
    let (request, reply) = match parsed.key.proto {
        ICMP => (8, 0),
        ICMPV6 => (128, 129),
        _ => return false,
    };
    let against = if dir == Dir::Original { reply } else { request };
    parsed.l4_offset != 0 && frame.get(parsed.l4_offset) == Some(&against)
}

/// The end of [`lookup_into`] for a packet of no connection: an ICMP error about a
/// tracked connection is related to it (and translated back when it is about a
/// masqueraded packet); anything else is not tracked (yet).
#[inline(never)]
fn untracked<T: Tracer>(
    snap: &Snapshot,
    ct: &mut Conntrack,
    parsed: &mut Parsed,
    frame: &mut [u8],
    t: &mut T,
) -> Result<CtMark, Action> {
    if is_icmp_error(parsed, frame) {
        return icmp_error(snap, ct, parsed, frame, t);
    }
    trace!(
        t,
        Stage::Conntrack,
        "no connection in network {}",
        net_name(snap, parsed.key.network)
    );
    Ok(CtMark::None)
}

/// [`untracked`] of an ICMP error (out of line: the common case stays small).
#[inline(never)]
fn icmp_error<T: Tracer>(
    snap: &Snapshot,
    ct: &mut Conntrack,
    parsed: &mut Parsed,
    frame: &mut [u8],
    t: &mut T,
) -> Result<CtMark, Action> {
    if let Some((id, quoted_dir)) = quoted(parsed, frame).and_then(|q| ct.table.related(&q)) {
        // The error travels against the packet it quotes.
        let dir = quoted_dir.opposite();
        let Some(conn) = ct.table.get(id) else {
            return Ok(CtMark::None);
        };
        trace!(
            t,
            Stage::Conntrack,
            "ICMP error about connection {} of network {}: related",
            id.index(),
            net_name(snap, conn.zone())
        );
        if let (Dir::Reply, Some(_)) = (dir, conn.nat()) {
            // From the remote side about a masqueraded packet: back to the pod.
            let (pod, pod_port) = conn.source_v4();
            if !rewrite::rewrite_icmp_error(
                frame,
                parsed.l3_offset,
                parsed.l4_offset,
                Endpoint::Dst,
                pod,
                Endpoint::Src,
                pod,
                pod_port,
            ) {
                return Err(Action::Drop(DropReason::Malformed));
            }
            trace!(
                t,
                Stage::Nat,
                "ICMP error translated back to {} (zone {} → network {})",
                pod,
                NAT_ZONE,
                net_name(snap, conn.zone())
            );
            let port = parsed.key.dst_port;
            set_endpoint(&mut parsed.key, Endpoint::Dst, pod, port);
            parsed.key.network = conn.zone();
        }
        return Ok(CtMark::Related { id, dir });
    }
    trace!(
        t,
        Stage::Conntrack,
        "no connection in network {}",
        net_name(snap, parsed.key.network)
    );
    Ok(CtMark::None)
}

fn set_endpoint(key: &mut FlowKey, which: Endpoint, addr: Ipv4Addr, port: u16) {
    let mapped = addr.to_ipv6_mapped().octets();
    let echo = key.proto == ICMP;
    match which {
        Endpoint::Src => {
            key.src = mapped;
            key.src_port = port;
        }
        Endpoint::Dst => {
            key.dst = mapped;
            key.dst_port = port;
        }
    }
    if echo && key.src_port != 0 && key.dst_port != 0 {
        // An echo's identifier is both of its "ports".
        key.src_port = port;
        key.dst_port = port;
    }
}

/// Whether a first packet from `input` leaving through `output` is masqueraded: pod
/// traffic (IPv4 TCP, UDP, ICMP echo requests) leaving through an uplink, to a
/// destination the SNAT policy masquerades — or, from a user-defined network through
/// an uplink of the default network, to any destination (while SNAT is on).
fn masquerades(
    snap: &Snapshot,
    input: &PortState,
    output: &PortState,
    parsed: &Parsed,
    frame: &[u8],
) -> bool {
    let key = &parsed.key;
    input.role == PortRole::Pod
        && output.role == PortRole::Uplink
        && key.family == Family::V4
        && !parsed.later_fragment
        && parsed.l4_offset != 0
        && match key.proto {
            ICMP => frame.get(parsed.l4_offset) == Some(&8),
            TCP | 17 => true,
            _ => false,
        }
        && (snap.snat.applies(Ipv4Addr::from(key.dst_v4()))
            || (key.network != output.network
                && output.network == NAT_ZONE
                && !snap.snat.node_ips.is_empty()
                && snap.user_defined(key.network)))
}

/// Whether a packet about to leave through `output` (an uplink of the default network,
/// from a user-defined network: a crossing the route stage checks) leaves masqueraded:
/// the original direction of a masqueraded connection, a pod's ICMP error about one of
/// its replies, or the first packet of a connection the commit will masquerade
/// ([`masquerades`]). `mark` is what the lookup found for it this burst.
pub(super) fn masqueraded_egress(
    snap: &Snapshot,
    ct: &Conntrack,
    input: &PortState,
    output: &PortState,
    parsed: &Parsed,
    mark: CtMark,
    frame: &[u8],
) -> bool {
    match mark {
        CtMark::Tracked {
            dir: Dir::Original,
            nat,
            ..
        } => nat.is_some(),
        CtMark::Tracked { .. } => false,
        CtMark::Related {
            id,
            dir: Dir::Original,
        } => ct.table.get(id).is_some_and(|c| c.nat().is_some()),
        CtMark::Related { .. } => false,
        CtMark::None => masquerades(snap, input, output, parsed, frame),
    }
}

/// What [`prefetch_snat`] worked out for a packet that the commit would otherwise
/// work out again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SnatHint {
    /// Nothing: the commit works it out.
    #[default]
    None,
    /// Not the first packet of a masqueraded connection.
    NoSnat,
    /// The first packet of a masqueraded connection, with the SNAT port the allocator
    /// would try first (when there is one) and the hash of the external tuple it makes.
    Snat(Option<(u16, KeyHash)>),
}

/// A hint before the commit stage, for each packet of a burst in commit order: when
/// the packet is the first of a masqueraded connection, prefetches the index bucket of
/// the external tuple the SNAT allocator will try first (`ahead` is a copy of the
/// worker's allocator, advanced as the commits will advance it), so that the burst's
/// allocation probes do not each wait for memory. Changes nothing but the caches; what
/// it worked out is returned for the commit (for the packet as it is now, in the same
/// snapshot, between the same ports).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn prefetch_snat(
    snap: &Snapshot,
    ct: &Conntrack,
    input: &PortState,
    output: &PortState,
    parsed: &Parsed,
    mark: CtMark,
    frame: &[u8],
    ahead: &mut PortAllocator,
) -> SnatHint {
    if mark != CtMark::None {
        return SnatHint::None;
    }
    snat_hint(snap, ct, input, output, parsed, frame, ahead)
}

/// [`prefetch_snat`] of an untracked packet.
#[inline(never)]
fn snat_hint(
    snap: &Snapshot,
    ct: &Conntrack,
    input: &PortState,
    output: &PortState,
    parsed: &Parsed,
    frame: &[u8],
    ahead: &mut PortAllocator,
) -> SnatHint {
    if !masquerades(snap, input, output, parsed, frame) {
        return SnatHint::NoSnat;
    }
    let (Some(addr), Some(port)) = (
        snap.snat.snat_addr(),
        ahead.allocate(&snap.snat.ports, |_| false),
    ) else {
        return SnatHint::Snat(None);
    };
    SnatHint::Snat(Some((
        port,
        ct.table.hash_nat(&parsed.key, Nat { addr, port }),
    )))
}

/// The commit and NAT stage, after mtu, over the packets `s.routed` lists (each about to
/// leave through the port `s.out` names): first the SNAT hint of every first packet of
/// a masqueraded connection ([`prefetch_snat`]), so that the burst's allocation probes
/// overlap; then, packet by packet and in order, a reply of a connection the changed
/// ACLs have not checked yet is re-checked ([`reply_recheck`]; denied: dropped as
/// `acl-deny`, the connection closed by [`close_denied`]) and the packet committed
/// ([`commit_one`]). The packets that go on stay in `s.routed`. Nothing to do without
/// conntrack.
#[inline(always)]
pub fn commit<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let Some(ct) = b.ct.as_deref_mut() else {
        return;
    };
    let (snap, input, s) = (b.snap, b.port, &mut *b.s);
    // The table buckets the burst's SNAT allocations will probe, prefetched together.
    if snap.snat.snat_addr().is_some() {
        let mut ahead = ct.alloc.clone();
        for &i in &s.routed[..b.n_routed] {
            let i = usize::from(i);
            // Tracked packets have nothing to prefetch and the commit reads no hint for
            // them: no call, and no hint copied through the stack.
            if s.ct[i] != CtMark::None {
                continue;
            }
            if let Some(output) = snap.ports.get(usize::from(s.out[i])) {
                s.snat[i] = prefetch_snat(
                    snap,
                    ct,
                    input,
                    output,
                    &s.parsed[i],
                    s.ct[i],
                    b.frames.frame(i),
                    &mut ahead,
                );
            }
        }
    }
    let mut kept = 0usize;
    for k in 0..b.n_routed {
        let i = usize::from(s.routed[k]);
        let out = s.out[i];
        let Some(output) = snap.ports.get(usize::from(out)) else {
            b.actions[i] = Action::Drop(DropReason::NoRoute);
            continue;
        };
        if let CtMark::Tracked {
            id,
            dir: Dir::Reply,
            checked: false,
            ..
        } = s.ct[i]
        {
            if !reply_recheck(snap, ct, b.in_port, out, id, b.t) {
                b.actions[i] = Action::Drop(DropReason::AclDeny);
                continue;
            }
        }
        match commit_one(snap, ct, input, output, s, i, b.frames.frame_mut(i), b.t) {
            Ok(()) => {
                s.routed[kept] = i as u16;
                kept += 1;
            }
            Err(a) => b.actions[i] = a,
        }
    }
    b.n_routed = kept;
}

/// [`commit`] for switched frames ([`switch::policy`](super::switch::policy)), listed
/// in `s.routed` with their output port in `s.out` (`u16::MAX` for a flood): replies
/// of connections the ACLs changed under re-checked, connections opened for `reflect`
/// permits — never a masquerade: a switched frame stays as it was sent.
#[inline(never)]
pub(super) fn commit_switched<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let Some(ct) = b.ct.as_deref_mut() else {
        return;
    };
    let (snap, input, s) = (b.snap, b.port, &mut *b.s);
    let mut kept = 0usize;
    for k in 0..b.n_routed {
        let i = usize::from(s.routed[k]);
        if let CtMark::Tracked {
            id,
            dir: Dir::Reply,
            checked: false,
            ..
        } = s.ct[i]
        {
            if !reply_recheck(snap, ct, b.in_port, s.out[i], id, b.t) {
                b.actions[i] = Action::Drop(DropReason::AclDeny);
                continue;
            }
        }
        s.snat[i] = SnatHint::NoSnat;
        match commit_one(snap, ct, input, input, s, i, b.frames.frame_mut(i), b.t) {
            Ok(()) => {
                s.routed[kept] = i as u16;
                kept += 1;
            }
            Err(a) => b.actions[i] = a,
        }
    }
    b.n_routed = kept;
}

/// The commit of packet `i` (of `s`), about to leave through `output`: records the ACL
/// state a re-checked connection passed, creates the connection of a first packet
/// that a `reflect` rule let through or that is masqueraded, and masquerades
/// original-direction packets (and ICMP errors) of masqueraded connections. It reads
/// the packet's parse, its mark, the hash of its key [`lookup`] left, the hint
/// [`prefetch_snat`] left (or [`SnatHint::None`]) and whether a `reflect` rule let it
/// through.
#[allow(clippy::too_many_arguments)]
#[inline]
fn commit_one<T: Tracer>(
    snap: &Snapshot,
    ct: &mut Conntrack,
    input: &PortState,
    output: &PortState,
    s: &Scratch,
    i: usize,
    frame: &mut [u8],
    t: &mut T,
) -> Result<(), Action> {
    // The common case inline: a packet of a tracked connection.
    if let CtMark::Tracked {
        id,
        dir,
        checked,
        nat,
    } = s.ct[i]
    {
        if !checked {
            ct.table.set_acl_generation(id, snap.acl.generation);
        }
        if let (Dir::Original, Some(nat)) = (dir, nat) {
            masquerade(snap, &s.parsed[i], frame, nat, t)?;
        }
        return Ok(());
    }
    commit_untracked(
        snap,
        ct,
        input,
        output,
        &s.parsed[i],
        s.ct[i],
        &s.hash[i],
        &s.snat[i],
        s.reflect[i],
        frame,
        t,
    )
}

/// [`commit_one`] of a related or untracked packet.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn commit_untracked<T: Tracer>(
    snap: &Snapshot,
    ct: &mut Conntrack,
    input: &PortState,
    output: &PortState,
    parsed: &Parsed,
    mark: CtMark,
    hash: &KeyHash,
    hint: &SnatHint,
    reflect: bool,
    frame: &mut [u8],
    t: &mut T,
) -> Result<(), Action> {
    match mark {
        CtMark::Tracked { .. } => Ok(()),
        CtMark::Related { id, dir } => {
            let Some(conn) = ct.table.get(id) else {
                return Ok(());
            };
            if let (Dir::Original, Some(nat)) = (dir, conn.nat()) {
                // A pod's error about a translated reply: leaves as the node, quoting
                // the packet as it arrived.
                if !rewrite::rewrite_icmp_error(
                    frame,
                    parsed.l3_offset,
                    parsed.l4_offset,
                    Endpoint::Src,
                    nat.addr,
                    Endpoint::Dst,
                    nat.addr,
                    nat.port,
                ) {
                    return Err(Action::Drop(DropReason::Malformed));
                }
                trace!(t, Stage::Nat, "ICMP error masqueraded to {}", nat.addr);
            }
            Ok(())
        }
        CtMark::None => {
            let (snat, first) = match *hint {
                SnatHint::None => (masquerades(snap, input, output, parsed, frame), None),
                SnatHint::NoSnat => (false, None),
                SnatHint::Snat(first) => (true, first),
            };
            if !reflect && !snat {
                return Ok(());
            }
            if parsed.later_fragment {
                return Ok(());
            }
            let key = parsed.key;
            let nat = if snat {
                let Some(addr) = snap.snat.snat_addr() else {
                    return Ok(());
                };
                let table = &ct.table;
                let mut free = None;
                let port = ct.alloc.allocate(&snap.snat.ports, |port| {
                    let nat = Nat { addr, port };
                    let h = match first {
                        Some((p, h)) if p == port => h,
                        _ => table.hash_nat(&key, nat),
                    };
                    free = table.free_nat(&key, nat, h);
                    free.is_none()
                });
                // `free` is the tuple of the last port tried: the one allocated.
                match port.and(free) {
                    Some(free) => Some(free),
                    None => {
                        trace!(
                            t,
                            Stage::Nat,
                            "no free SNAT port towards {}: drop",
                            key.dst_ip()
                        );
                        return Err(Action::Drop(DropReason::SnatPortsExhausted));
                    }
                }
            } else {
                None
            };
            let l4 = l4_info(parsed, frame);
            match ct.table.insert_hashed(
                &key,
                *hash,
                &l4,
                parsed.l3_len as u32,
                nat,
                snap.acl.generation,
                ct.now,
            ) {
                Ok(id) => {
                    trace!(
                        t,
                        Stage::Conntrack,
                        "new connection {} in network {}{}",
                        id.index(),
                        net_name(snap, key.network),
                        if reflect { " (reflect)" } else { "" }
                    );
                }
                Err(InsertError::Invalid) => {
                    trace!(t, Stage::Conntrack, "cannot open a connection: drop");
                    return Err(Action::Drop(DropReason::CtInvalid));
                }
                Err(InsertError::Exists) => {
                    return join_burst_connection(snap, ct, parsed, frame, hash, &l4, t);
                }
                Err(e @ (InsertError::TableFull | InsertError::ZoneFull)) => {
                    trace!(t, Stage::Conntrack, "not tracked ({}): drop", e);
                    return Err(Action::Drop(DropReason::CtTableFull));
                }
            }
            if let Some(free) = nat {
                masquerade(snap, parsed, frame, free.nat, t)?;
            }
            Ok(())
        }
    }
}

/// A first packet whose tuple an earlier packet of the same burst opened a connection
/// for, after the burst's lookups (a resolver's A and AAAA queries from one socket, a
/// retransmitted SYN): the packet is that connection's, as if it had been looked up
/// after the insert — tracked, and masqueraded with the connection's mapping — rather
/// than dropped (netfilter resolves the same race at confirmation).
#[inline(never)]
fn join_burst_connection<T: Tracer>(
    snap: &Snapshot,
    ct: &mut Conntrack,
    parsed: &Parsed,
    frame: &mut [u8],
    hash: &KeyHash,
    l4: &L4Info,
    t: &mut T,
) -> Result<(), Action> {
    let Some((id, dir)) = ct.table.lookup_hashed(&parsed.key, *hash) else {
        // Only the reply tuple clashed: the SNAT allocator checks its tuples against the
        // table as it is, so this is a connection whose reply tuple is another's.
        trace!(t, Stage::Conntrack, "reply tuple already tracked: drop");
        return Err(Action::Drop(DropReason::CtInvalid));
    };
    if echo_against(parsed, frame, dir) {
        // An echo whose tuple is a ping's going the other way (a pod's echo reply with
        // the id of its own ping): not the ping's, and it cannot have a connection.
        trace!(
            t,
            Stage::Conntrack,
            "echo against its ping's direction: drop"
        );
        return Err(Action::Drop(DropReason::CtInvalid));
    }
    match ct.table.track(id, dir, l4, parsed.l3_len as u32, ct.now) {
        TrackVerdict::Accept => {}
        TrackVerdict::Invalid | TrackVerdict::Reopen => {
            trace!(
                t,
                Stage::Conntrack,
                "connection {} opened earlier in the burst: invalid in its state: drop",
                id.index()
            );
            return Err(Action::Drop(DropReason::CtInvalid));
        }
    }
    let nat = ct.table.get(id).and_then(|c| c.nat());
    trace!(
        t,
        Stage::Conntrack,
        "connection {} opened earlier in the burst: joined",
        id.index()
    );
    match (dir, nat) {
        (Dir::Original, Some(nat)) => masquerade(snap, parsed, frame, nat, t),
        // A reply to a masqueraded connection in the burst that opened it would have
        // been routed to the node address: it cannot be translated back here.
        (Dir::Reply, Some(_)) => Err(Action::Drop(DropReason::CtInvalid)),
        (_, None) => Ok(()),
    }
}

#[inline]
fn masquerade<T: Tracer>(
    snap: &Snapshot,
    parsed: &Parsed,
    frame: &mut [u8],
    nat: Nat,
    t: &mut T,
) -> Result<(), Action> {
    if !rewrite::rewrite(
        frame,
        parsed.l3_offset,
        parsed.l4_offset,
        parsed.key.proto,
        Endpoint::Src,
        nat.addr,
        nat.port,
    ) {
        return Err(Action::Drop(DropReason::Malformed));
    }
    trace!(
        t,
        Stage::Nat,
        "source {}:{} masqueraded to {}:{} (network {} → zone {})",
        parsed.key.src_ip(),
        parsed.key.src_port,
        nat.addr,
        nat.port,
        net_name(snap, parsed.key.network),
        NAT_ZONE
    );
    Ok(())
}

/// The re-check of a connection after an ACL change when a packet of it to arrive is
/// a reply: the ACLs judge a connection by its original direction, so the
/// connection's original tuple goes through the tables its original packets meet —
/// the ingress table of `out_port` (the port the reply leaves by, which the original
/// packets came in by), the egress table of `in_port` and, when `in_port` is an
/// uplink, the global table. Returns whether they all permit it. A denied reply is
/// dropped as `acl-deny` and its connection closed at the end of the burst by
/// [`close_denied`] (not here: the burst's later packets still carry marks naming
/// it); a permitted connection is marked checked by [`commit_one`]. A connection gone
/// since the lookup (closed by a SYN that reopened its tuple) is not permitted.
#[inline(never)]
fn reply_recheck<T: Tracer>(
    snap: &Snapshot,
    ct: &Conntrack,
    in_port: u16,
    out_port: u16,
    id: ConnId,
    t: &mut T,
) -> bool {
    let Some(key) = ct.table.get(id).map(|c| c.key()) else {
        return false;
    };
    let acl = &*snap.acl;
    let uplink = snap
        .ports
        .get(usize::from(in_port))
        .is_some_and(|p| p.role == PortRole::Uplink);
    let tables = [
        ("ingress", acl.attached(out_port, Direction::Ingress)),
        ("egress", acl.attached(in_port, Direction::Egress)),
        ("global", acl.global().filter(|_| uplink)),
    ];
    for (direction, table) in tables {
        let Some(table) = table else { continue };
        let mut result = [0u32];
        table.classify(std::slice::from_ref(&key), &mut result, &snap.identities);
        if !table.permits(result[0]) {
            trace!(
                t,
                Stage::Conntrack,
                "connection {}: its original direction is denied by the changed {} table {}",
                id.index(),
                direction,
                table.name
            );
            return false;
        }
    }
    trace!(
        t,
        Stage::Conntrack,
        "connection {}: its original direction is still permitted by the changed ACLs",
        id.index()
    );
    true
}

/// The last stage: closes the connections of the burst's packets the changed ACLs now
/// deny (of either direction: dropped as `acl-deny` by the ACL stages or by
/// [`reply_recheck`]), at the end of the burst because its later packets still carry
/// marks naming them. Nothing to do without conntrack.
#[inline(always)]
pub fn close_denied<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let Some(ct) = b.ct.as_deref_mut() else {
        return;
    };
    let generation = b.snap.acl.generation;
    for (action, mark) in b.actions.iter().zip(&b.s.ct).take(b.n) {
        if *action == Action::Drop(DropReason::AclDeny) {
            close(ct, *mark, generation, b.t);
        }
    }
}

/// Closes the connection of a packet the changed ACLs now deny, unless the entry its
/// mark names is no longer the connection that was checked: a connection created or
/// checked under the rules in force (the slot of one closed earlier in the burst,
/// reused by a new connection) is left alone.
fn close<T: Tracer>(ct: &mut Conntrack, mark: CtMark, generation: u64, t: &mut T) {
    if let CtMark::Tracked {
        id, checked: false, ..
    } = mark
    {
        if ct
            .table
            .get(id)
            .is_some_and(|c| c.acl_generation() != generation)
        {
            trace!(
                t,
                Stage::Conntrack,
                "connection {} denied by the changed ACLs: closed",
                id.index()
            );
            ct.table.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{self, GW_MAC, POD, UPLINK, UPLINK_MAC};
    use super::super::{l2, NoTrace};
    use super::*;
    use crate::acl::table::{AclTables, Table};
    use crate::acl::{Action as RuleAction, Rule};
    use crate::conntrack::{CtConfig, NoAdvice};
    use crate::counters::MAX_PORTS;
    use std::sync::Arc;

    /// The test snapshot with a `reflect` table on the pod port (which makes conntrack
    /// active; the ACL stage itself does not run here).
    fn snapshot() -> Snapshot {
        let mut snap = testing::snapshot();
        let table = Table::compile(
            "reflect".into(),
            vec![Rule::any(RuleAction::Reflect)],
            vec![0],
            1,
        )
        .expect("compile");
        let mut ingress = [None; MAX_PORTS];
        ingress[usize::from(POD)] = Some(0);
        snap.acl = Arc::new(AclTables::new(
            vec![Arc::new(table)],
            ingress,
            [None; MAX_PORTS],
            None,
            1,
        ));
        snap
    }

    fn conntrack() -> Conntrack {
        let cfg = CtConfig {
            max_entries: 1024,
            max_per_zone: 1024,
            ..CtConfig::default()
        };
        let mut ct = Conntrack::new_in(&cfg, 0, 1, true, &NoAdvice);
        ct.now = 1_000;
        ct
    }

    /// One burst received on `port` through l2 and the lookup, then (every packet
    /// `reflect`ed, routed out of the other port) the commit and the close: each
    /// packet's mark after the lookup, and the verdicts (`Forward` for the packets the
    /// stages let through).
    fn burst(
        snap: &Snapshot,
        ct: &mut Conntrack,
        port: u16,
        frames: &mut [Vec<u8>],
    ) -> (Vec<CtMark>, Vec<Action>) {
        let out = if port == POD { UPLINK } else { POD };
        let mut actions = vec![Action::Drop(DropReason::Malformed); frames.len()];
        let mut s = Box::<Scratch>::default();
        let mut t = NoTrace;
        let mut b = Burst::new(snap, port, frames, &mut actions, &mut s, Some(ct), &mut t)
            .expect("the port exists");
        assert!(b.ct.is_some(), "conntrack is active");
        l2::stage(&mut b);
        lookup(&mut b);
        let marks = b.s.ct[..b.n].to_vec();
        for k in 0..b.n_ok {
            let i = b.s.ok[k];
            b.s.routed[k] = i;
            b.s.out[usize::from(i)] = out;
            b.s.nh[usize::from(i)] = crate::pipeline::burst::NO_NEXT_HOP;
            b.s.reflect[usize::from(i)] = true;
        }
        b.n_routed = b.n_ok;
        commit(&mut b);
        for k in 0..b.n_routed {
            b.actions[usize::from(b.s.routed[k])] = Action::Forward { port: out };
        }
        close_denied(&mut b);
        (marks, actions)
    }

    #[test]
    fn a_reflected_first_packet_opens_a_connection_its_reply_finds() {
        let snap = snapshot();
        let mut ct = conntrack();
        let request = testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10);
        let (marks, actions) = burst(&snap, &mut ct, POD, &mut [request.clone()]);
        assert_eq!(marks, [CtMark::None]);
        assert_eq!(actions, [Action::Forward { port: UPLINK }]);
        assert_eq!(ct.table.len(), 1, "the commit opened the connection");

        // The next packet of the connection is tracked, in the original direction.
        let (marks, _) = burst(&snap, &mut ct, POD, &mut [request.clone()]);
        assert!(
            matches!(
                marks[0],
                CtMark::Tracked {
                    dir: Dir::Original,
                    ..
                }
            ),
            "{marks:?}"
        );
        assert_eq!(ct.table.len(), 1);

        // The reply (addresses and ports swapped, to the uplink's MAC) is its reply and
        // skips the ACLs.
        let mut reply = request;
        reply[0..6].copy_from_slice(&UPLINK_MAC);
        let (src, dst) = (reply[26..30].to_vec(), reply[30..34].to_vec());
        reply[26..30].copy_from_slice(&dst);
        reply[30..34].copy_from_slice(&src);
        let (sport, dport) = (reply[34..36].to_vec(), reply[36..38].to_vec());
        reply[34..36].copy_from_slice(&dport);
        reply[36..38].copy_from_slice(&sport);
        let (marks, actions) = burst(&snap, &mut ct, UPLINK, &mut [reply]);
        assert!(
            matches!(
                marks[0],
                CtMark::Tracked {
                    dir: Dir::Reply,
                    ..
                }
            ),
            "{marks:?}"
        );
        assert!(marks[0].skips_acl());
        assert_eq!(actions, [Action::Forward { port: POD }]);
    }

    #[test]
    fn without_conntrack_the_stages_do_nothing() {
        let snap = testing::snapshot();
        let mut frames = vec![testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10)];
        let ((ok, mark), _) = testing::with_burst(&snap, &mut frames, |b| {
            l2::stage(b);
            lookup(b);
            (b.n_ok, b.s.ct[0])
        });
        assert_eq!(ok, 1);
        assert_eq!(mark, CtMark::None);
    }

    // User-defined networks: overlapping pods egressing through the default network's
    // uplink, masqueraded, their replies back in zone 0 and into the right network.

    use super::super::burst::testing::{
        udn_snapshot, GW_MAC_A, GW_MAC_B, NODE, POD_A, POD_B, POD_MAC, POD_MAC_A, POD_MAC_B,
        ROUTER_MAC, UDN_POD,
    };
    use super::super::{process_burst, Recorder};
    use crate::conntrack::tcp_flags::{ACK, SYN};

    /// In the SNAT policy's VPC: not masqueraded from the default network, always from a
    /// user-defined one.
    const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);

    fn run_burst(
        snap: &Snapshot,
        ct: &mut Conntrack,
        port: u16,
        frames: &mut [Vec<u8>],
    ) -> Vec<Action> {
        let mut actions = vec![Action::Drop(DropReason::Malformed); frames.len()];
        let mut s = Box::<Scratch>::default();
        process_burst(
            snap,
            port,
            frames,
            &mut actions,
            &mut s,
            Some(ct),
            &mut NoTrace,
        );
        actions
    }

    /// Source, destination, source port, destination port and destination MAC of an
    /// IPv4 TCP/UDP frame.
    fn tuple(f: &[u8]) -> (Ipv4Addr, Ipv4Addr, u16, u16, [u8; 6]) {
        let at = |i: usize| Ipv4Addr::new(f[i], f[i + 1], f[i + 2], f[i + 3]);
        let port = |i: usize| u16::from_be_bytes([f[i], f[i + 1]]);
        let mut mac = [0; 6];
        mac.copy_from_slice(&f[0..6]);
        (at(26), at(30), port(34), port(36), mac)
    }

    fn syn_from(port: u16) -> Vec<u8> {
        let (mac, gw) = if port == POD_A {
            (POD_MAC_A, GW_MAC_A)
        } else {
            (POD_MAC_B, GW_MAC_B)
        };
        testing::tcp4(mac, gw, UDN_POD, SERVER, 40000, 80, SYN, 1, 0)
    }

    fn from_server(dport: u16, flags: u8) -> Vec<u8> {
        testing::tcp4(ROUTER_MAC, UPLINK_MAC, SERVER, NODE, 80, dport, flags, 9, 2)
    }

    /// A destination unreachable from the router to the node about a packet of
    /// `NODE:nat_port -> SERVER:80` (its IP header and first 8 bytes).
    fn unreachable_about(nat_port: u16) -> Vec<u8> {
        let mut icmp = vec![3, 1, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&testing::ipv4_header(NODE, SERVER, 6, 20));
        icmp.extend_from_slice(&nat_port.to_be_bytes());
        icmp.extend_from_slice(&80u16.to_be_bytes());
        icmp.extend_from_slice(&2u32.to_be_bytes());
        let c = !crate::wire::checksum::data(&icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        testing::ipv4(ROUTER_MAC, UPLINK_MAC, testing::ROUTER, NODE, 1, &icmp)
    }

    /// Two pods with the same address in two user-defined networks open connections
    /// from the same port to the same server at the same time: two connections, each
    /// masqueraded to its own node port; the server's replies (and an ICMP error) to
    /// each node port come back translated to 10.128.0.5:40000 and leave through the
    /// pod port of the right network; a reply to a node port nobody has is not
    /// delivered.
    #[test]
    fn overlapping_pods_of_two_networks_egress_and_get_their_own_replies() {
        let mut snap = udn_snapshot();
        Arc::make_mut(&mut snap.snat).ports = vec![(61000, 61001)];
        let mut ct = conntrack();
        let mut out = [0u16; 2];
        for (k, port) in [POD_A, POD_B].into_iter().enumerate() {
            let mut f = [syn_from(port)];
            assert_eq!(
                run_burst(&snap, &mut ct, port, &mut f),
                [Action::Forward { port: UPLINK }]
            );
            let (src, dst, sport, dport, _) = tuple(&f[0]);
            assert_eq!((src, dst, dport), (NODE, SERVER, 80), "masqueraded");
            out[k] = sport;
        }
        assert_ne!(out[0], out[1], "one node port per connection, across zones");
        assert_eq!(ct.table.len(), 2);
        let zones: Vec<u16> = ct.table.iter().map(|(_, c)| c.zone()).collect();
        assert!(zones.contains(&1) && zones.contains(&2), "{zones:?}");

        // Both replies in one burst, with a plain routed packet of the default network
        // between them (the batched lookup and the one-by-one lookups mixed).
        let mut frames = vec![
            from_server(out[1], SYN | ACK),
            testing::tcp4(
                ROUTER_MAC,
                UPLINK_MAC,
                SERVER,
                Ipv4Addr::new(10, 1, 0, 2),
                80,
                5555,
                ACK,
                1,
                1,
            ),
            from_server(out[0], SYN | ACK),
        ];
        let actions = run_burst(&snap, &mut ct, UPLINK, &mut frames);
        assert_eq!(
            actions,
            [
                Action::Forward { port: POD_B },
                Action::Forward { port: POD },
                Action::Forward { port: POD_A },
            ]
        );
        assert_eq!(
            tuple(&frames[0]),
            (SERVER, UDN_POD, 80, 40000, POD_MAC_B),
            "translated back to pod-b"
        );
        assert_eq!(tuple(&frames[1]).4, POD_MAC, "the default network's pod");
        assert_eq!(
            tuple(&frames[2]),
            (SERVER, UDN_POD, 80, 40000, POD_MAC_A),
            "translated back to pod-a"
        );

        // An ICMP error about each connection's masqueraded packet (RELATED) goes to
        // its pod, the quoted packet translated back too.
        for (nat_port, port, mac) in [(out[0], POD_A, POD_MAC_A), (out[1], POD_B, POD_MAC_B)] {
            let mut f = [unreachable_about(nat_port)];
            assert_eq!(
                run_burst(&snap, &mut ct, UPLINK, &mut f),
                [Action::Forward { port }]
            );
            let (_, dst, ..) = tuple(&f[0]);
            assert_eq!((dst, &f[0][0..6]), (UDN_POD, &mac[..]));
            let quoted = &f[0][42..];
            assert_eq!(&quoted[12..16], &UDN_POD.octets(), "quoted source");
            assert_eq!(&quoted[20..22], &40000u16.to_be_bytes(), "quoted port");
        }

        // A node port no connection has: not delivered (it is the node's own address).
        let mut f = [from_server(61005, ACK)];
        let actions = run_burst(&snap, &mut ct, UPLINK, &mut f);
        assert!(!matches!(actions[0], Action::Forward { .. }), "{actions:?}");
        let mut f = [unreachable_about(61005)];
        let actions = run_burst(&snap, &mut ct, UPLINK, &mut f);
        assert!(!matches!(actions[0], Action::Forward { .. }), "{actions:?}");

        // The pods' next packets are their connections', still masqueraded the same.
        for (k, port) in [POD_A, POD_B].into_iter().enumerate() {
            let (mac, gw) = if port == POD_A {
                (POD_MAC_A, GW_MAC_A)
            } else {
                (POD_MAC_B, GW_MAC_B)
            };
            let mut f = [testing::tcp4(
                mac, gw, UDN_POD, SERVER, 40000, 80, ACK, 2, 10,
            )];
            assert_eq!(
                run_burst(&snap, &mut ct, port, &mut f),
                [Action::Forward { port: UPLINK }]
            );
            assert_eq!(tuple(&f[0]).2, out[k]);
        }
        assert_eq!(ct.table.len(), 2);
    }

    /// The external tuple is unique node-wide: with one SNAT port, the second network's
    /// pod finds it taken (the first connection's reply tuple is in zone 0 too).
    #[test]
    fn one_snat_port_is_not_handed_out_to_two_networks() {
        let mut snap = udn_snapshot();
        Arc::make_mut(&mut snap.snat).ports = vec![(61000, 61000)];
        let mut ct = conntrack();
        let mut f = [syn_from(POD_A)];
        assert_eq!(
            run_burst(&snap, &mut ct, POD_A, &mut f),
            [Action::Forward { port: UPLINK }]
        );
        let mut f = [syn_from(POD_B)];
        assert_eq!(
            run_burst(&snap, &mut ct, POD_B, &mut f),
            [Action::Drop(DropReason::SnatPortsExhausted)]
        );
    }

    /// The default network keeps its SNAT policy: its pod's traffic to the VPC is not
    /// masqueraded (and not tracked), while a user-defined network's to the same
    /// address is.
    #[test]
    fn the_default_network_keeps_its_snat_policy() {
        let snap = udn_snapshot();
        let mut ct = conntrack();
        let mut f = [testing::tcp4(
            POD_MAC,
            GW_MAC,
            Ipv4Addr::new(10, 1, 0, 2),
            SERVER,
            40000,
            80,
            SYN,
            1,
            0,
        )];
        assert_eq!(
            run_burst(&snap, &mut ct, POD, &mut f),
            [Action::Forward { port: UPLINK }]
        );
        assert_eq!(
            tuple(&f[0]).0,
            Ipv4Addr::new(10, 1, 0, 2),
            "not masqueraded"
        );
        assert!(ct.table.is_empty());
        let mut f = [syn_from(POD_A)];
        run_burst(&snap, &mut ct, POD_A, &mut f);
        assert_eq!(tuple(&f[0]).0, NODE);
    }

    /// The trace names the network at each stage: the masquerade from udn-a, the reply
    /// found in zone 0 and translated back into udn-a, routed there.
    #[test]
    fn trace_names_the_networks() {
        let snap = udn_snapshot();
        let mut ct = conntrack();
        let mut rec = Recorder::default();
        let mut syn = syn_from(POD_A);
        let action = super::super::process_ct(&snap, POD_A, &mut syn, Some(&mut ct), &mut rec);
        assert_eq!(action, Action::Forward { port: UPLINK });
        let lines: Vec<String> = rec
            .stages
            .iter()
            .map(|(s, d)| format!("{} {}", s.name(), d))
            .collect();
        let has = |lines: &[String], want: &str| lines.iter().any(|l| l.contains(want));
        assert!(
            has(&lines, "ct no connection in network udn-a"),
            "{lines:#?}"
        );
        assert!(
            has(
                &lines,
                "leaves through uplink uplink of network default, masqueraded"
            ),
            "{lines:#?}"
        );
        assert!(
            has(&lines, "ct new connection 0 in network udn-a"),
            "{lines:#?}"
        );
        assert!(has(&lines, "(network udn-a → zone 0)"), "{lines:#?}");
        let port = tuple(&syn).2;
        let mut rec = Recorder::default();
        let mut reply = from_server(port, SYN | ACK);
        let action = super::super::process_ct(&snap, UPLINK, &mut reply, Some(&mut ct), &mut rec);
        assert_eq!(action, Action::Forward { port: POD_A });
        let lines: Vec<String> = rec
            .stages
            .iter()
            .map(|(s, d)| format!("{} {}", s.name(), d))
            .collect();
        assert!(
            has(&lines, "ct connection 0 of network udn-a"),
            "{lines:#?}"
        );
        assert!(
            has(
                &lines,
                "translated back to 10.128.0.5:40000 (reply in zone 0 → network udn-a)"
            ),
            "{lines:#?}"
        );
        assert!(
            has(&lines, "route 10.128.0.5 in network udn-a -> port pod-a"),
            "{lines:#?}"
        );
    }
}
