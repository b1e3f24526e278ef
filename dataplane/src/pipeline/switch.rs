//! Switching on layer-2 segments ([`crate::switching`]): what the l2 stage does with a
//! frame received on a segment member that is not for Ferrule.
//!
//! - Untagged, on a port that is an untagged member ([`untagged`]): a frame to the
//!   port's own MAC never comes here (it is routed: Ferrule is the segment's gateway);
//!   a broadcast ARP request for one of the port's own addresses and a neighbour
//!   solicitation for one go back to the routed path (answered there); everything
//!   else that parsed is switched, after port security on pod ports.
//! - Tagged ([`tagged`]): an 802.1Q frame whose VLAN id the port has a segment for is
//!   switched in it (its tag removed on the way); any other tag stays `vlan-tagged`.
//!
//! The switching decision ([`decide`]): a unicast destination the segment's FDB knows
//! goes out of its member ([`Action::Switch`]), unless that is the member it came from
//! (`switch-no-output`); broadcast, multicast and unknown destinations are flooded to
//! every other member ([`Action::Flood`]). Then, in a pass of its own over the burst
//! ([`learn`]), the source MACs of switched frames refresh their FDB entries, and the
//! ones the FDB does not have on that member are reported for the control thread to
//! learn (`Scratch::learned`).
//!
//! Policy ([`policy`]): a switched IP packet between pods is subject to the same ACLs
//! and connection tracking as a routed one — the input port's ingress table, the
//! output port's egress table (a flood's copies: each target's, as the worker sends
//! them, [`flood_permits`]), the global table towards an uplink, `reflect`
//! connections whose replies skip the tables — run by the routed path's own stages
//! over the switched packets, before the routed ones. Neighbour discovery and MLD are
//! exempt, as ARP is; a switched packet larger than its output port's MTU is dropped
//! (`mtu-exceeded`: a switch sends no ICMP error). 802.1Q-tagged frames (Localnet
//! traffic from the uplink) are switched without it.

use super::burst::Burst;
use super::ct::CtMark;
use super::{acl, ct, port_security, trace, AclHit, Action, Frames, Parsed, Stage, Tracer};
use crate::acl::table::Direction;
use crate::counters::DropReason;
use crate::flow::Family;
use crate::snapshot::{PortState, Snapshot};
use crate::switching::{
    mac_number, LearnEvent, Member, PortSegments, MAX_LEARN_PER_BURST, NO_VLAN, TAG_LEN,
};
use crate::wire::{ArpOperation, ArpPacket, EtherType, EthernetAddress};

/// An untagged frame received on `port`, an untagged member of a segment (`sw`),
/// addressed to another MAC than the port's own, its headers parsed (`parsed`; a
/// broadcast ARP request for one of the port's addresses never comes here: the l2
/// stage answers it). `None`: the frame is for Ferrule after all (a neighbour
/// solicitation for one of the port's addresses): the l2 stage goes on with it.
/// Otherwise its action: dropped by port security (pod ports), switched or flooded.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub fn untagged<T: Tracer>(
    snap: &Snapshot,
    sw: &PortSegments,
    in_port: u16,
    port: &PortState,
    pod: bool,
    parsed: &Parsed,
    frame: &[u8],
    t: &mut T,
) -> Option<Action> {
    let segment = sw.untagged?;
    let dst = EthernetAddress::from_bytes(&frame[..6]).unwrap_or(EthernetAddress::BROADCAST);
    if parsed.is_arp() {
        if pod {
            if let Err(reason) = port_security::check_arp(port, frame, t) {
                return Some(Action::Drop(reason));
            }
        }
    } else {
        if dst.is_multicast() && parsed.is_ipv6() && ns_for(port, parsed, frame) {
            return None;
        }
        if pod {
            if let Err(reason) = port_security::check(port, parsed, frame, t) {
                return Some(Action::Drop(reason));
            }
        }
    }
    Some(decide(
        snap,
        segment,
        Member::untagged(in_port),
        false,
        frame,
        t,
    ))
}

/// A tagged frame (the parse stage's `vlan-tagged`) received on `port`, a member of
/// some segment (`sw`): switched in the segment of its VLAN id, if any.
#[inline(never)]
pub fn tagged<T: Tracer>(
    snap: &Snapshot,
    sw: &PortSegments,
    in_port: u16,
    port: &PortState,
    frame: &[u8],
    t: &mut T,
) -> Action {
    if frame.len() < 14 + TAG_LEN
        || EtherType(u16::from_be_bytes([frame[12], frame[13]])) != EtherType::VLAN
    {
        trace!(t, Stage::Switch, "not an 802.1Q tag (QinQ is not switched)");
        return Action::Drop(DropReason::VlanTagged);
    }
    let vid = u16::from_be_bytes([frame[14], frame[15]]) & 0x0fff;
    let inner = EtherType(u16::from_be_bytes([frame[16], frame[17]]));
    let segment = match sw.tagged.iter().find(|&&(v, _)| v == vid) {
        Some(&(_, s)) if vid != NO_VLAN && !inner.is_vlan() => s,
        _ => {
            trace!(
                t,
                Stage::Switch,
                "VLAN {} has no segment on port {}",
                vid,
                port.name
            );
            return Action::Drop(DropReason::VlanTagged);
        }
    };
    trace!(
        t,
        Stage::Switch,
        "VLAN {} tag removed: segment {}",
        vid,
        seg_name(snap, segment)
    );
    decide(
        snap,
        segment,
        Member {
            port: in_port,
            vlan: vid,
        },
        true,
        frame,
        t,
    )
}

/// Where a frame of `segment` received on member `from` goes, by its destination MAC.
fn decide<T: Tracer>(
    snap: &Snapshot,
    segment: u16,
    from: Member,
    untag: bool,
    frame: &[u8],
    t: &mut T,
) -> Action {
    let sw = &*snap.switching;
    let dst = &frame[..6];
    if dst[0] & 1 != 0 {
        let a = flood(snap, segment, from, untag, t);
        if let Action::Flood { .. } = a {
            trace!(
                t,
                Stage::Switch,
                "{} {}: flooded to {} ports of segment {}",
                if dst == [0xff; 6] {
                    "broadcast"
                } else {
                    "multicast"
                },
                mac(dst),
                sw.flood_targets(segment, from).count(),
                seg_name(snap, segment)
            );
        }
        return a;
    }
    match sw.lookup(segment, mac_number(dst)) {
        Some(hit) if hit.member == from => {
            trace!(
                t,
                Stage::Switch,
                "{} is behind the input port {}: not sent back",
                mac(dst),
                port_name(snap, from.port)
            );
            Action::Drop(DropReason::SwitchNoOutput)
        }
        Some(hit) => {
            trace!(
                t,
                Stage::Switch,
                "{} is behind {}: switched to port {}{}",
                mac(dst),
                member_text(snap, hit.member),
                port_name(snap, hit.member.port),
                tag_text(hit.member.vlan)
            );
            Action::Switch {
                port: hit.member.port,
                vlan: hit.member.vlan,
                untag,
            }
        }
        None => {
            let a = flood(snap, segment, from, untag, t);
            if let Action::Flood { .. } = a {
                trace!(
                    t,
                    Stage::Switch,
                    "unknown unicast {}: flooded to {} ports of segment {}",
                    mac(dst),
                    sw.flood_targets(segment, from).count(),
                    seg_name(snap, segment)
                );
            }
            a
        }
    }
}

/// A flood of a frame of `segment` from member `from`, or `switch-no-output` when the
/// segment has no other member.
fn flood<T: Tracer>(snap: &Snapshot, segment: u16, from: Member, untag: bool, t: &mut T) -> Action {
    if snap.switching.flood_targets(segment, from).next().is_none() {
        trace!(
            t,
            Stage::Switch,
            "segment {} has no other port to flood to",
            seg_name(snap, segment)
        );
        return Action::Drop(DropReason::SwitchNoOutput);
    }
    Action::Flood {
        segment,
        in_vlan: from.vlan,
        untag,
        acl: false,
    }
}

/// The learning pass, after the l2 stage, on a port that is a segment member: the
/// source MAC of every switched frame refreshes its FDB entry when the FDB has it on
/// the member it came from; otherwise (unknown, or behind another member and not
/// static) it is reported in `Scratch::learned`, at most [`MAX_LEARN_PER_BURST`]
/// different MACs per burst.
#[inline(never)]
pub fn learn<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>, sw: &PortSegments) {
    let switching = &*b.snap.switching;
    let in_port = b.in_port;
    for i in 0..b.n {
        let (untag, flood_vlan) = match b.actions[i] {
            Action::Switch { untag, .. } => (untag, None),
            Action::Flood { in_vlan, untag, .. } => (untag, Some(in_vlan)),
            _ => continue,
        };
        let frame = b.frames.frame(i);
        let vlan = match flood_vlan {
            Some(v) => v,
            None if untag => u16::from_be_bytes([frame[14], frame[15]]) & 0x0fff,
            None => NO_VLAN,
        };
        let Some(segment) = sw.segment(vlan) else {
            continue;
        };
        let src = &frame[6..12];
        if src[0] & 1 != 0 {
            continue; // a multicast source is never learned
        }
        let member = Member {
            port: in_port,
            vlan,
        };
        match switching.lookup(segment, mac_number(src)) {
            Some(hit) if hit.member == member => {
                switching.ages().touch(hit.slot);
                continue;
            }
            // A static entry (a pod's own MAC) does not move.
            Some(hit) if hit.is_static() => continue,
            _ => {}
        }
        let mac = EthernetAddress([src[0], src[1], src[2], src[3], src[4], src[5]]);
        let event = LearnEvent {
            segment,
            mac,
            member,
        };
        let s = &mut *b.s;
        if s.learned[..s.n_learned].contains(&event) || s.n_learned == MAX_LEARN_PER_BURST {
            continue;
        }
        s.learned[s.n_learned] = event;
        s.n_learned += 1;
        trace!(
            b.t,
            Stage::Switch,
            "learn {} behind {} in segment {}",
            mac,
            member_text(b.snap, member),
            seg_name(b.snap, segment)
        );
    }
}

/// Whether a switched frame (its action `a`) goes through [`policy`]: an IPv4 or IPv6
/// packet, switched or flooded, but neighbour discovery and MLD (ICMPv6 130–137 and
/// 143), which keep a segment working whatever the policy says, as ARP does.
#[inline(always)]
pub(super) fn policy_applies(a: Action, parsed: &Parsed, frame: &[u8]) -> bool {
    if !matches!(a, Action::Switch { .. } | Action::Flood { .. }) || parsed.is_arp() {
        return false;
    }
    !(parsed.key.family == Family::V6
        && parsed.key.proto == 58
        && parsed.l4_offset != 0
        && frame
            .get(parsed.l4_offset)
            .is_some_and(|&t| (130..=137).contains(&t) || t == 143))
}

/// The policy pass over the burst's switched IP packets (`s.switched`, filled by the
/// l2 loop): conntrack lookup (a packet owned by another worker is handed off),
/// the input port's ingress table, the output port's egress table and the global
/// table towards an uplink (a flood: none here, each copy's target in
/// [`flood_permits`]), the MTU, and the commit of `reflect` connections. A packet
/// the pass drops gets its drop action; the others keep theirs (switch or flood).
/// The routed stages' lists are set aside meanwhile and put back after.
#[inline(never)]
pub fn policy<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    // The switched packets take the place of the routed ones for the pass.
    std::mem::swap(&mut b.s.ok, &mut b.s.switched);
    let n_routed_bound = b.n_ok;
    b.n_ok = b.s.n_switched;
    ct::lookup(b);
    acl::ingress(b);
    // Each survivor with its output port as the routed stages see it.
    let (snap, s) = (b.snap, &mut *b.s);
    let mut n = 0usize;
    for k in 0..b.n_ok {
        let i = s.ok[k];
        let out = match b.actions[usize::from(i)] {
            Action::Switch { port, .. } => {
                let len = s.parsed[usize::from(i)].l3_len;
                match snap.ports.get(usize::from(port)) {
                    Some(p) if len > usize::from(p.mtu) => {
                        trace!(
                            b.t,
                            Stage::Mtu,
                            "{} bytes over the MTU {} of port {}: drop",
                            len,
                            p.mtu,
                            p.name
                        );
                        b.actions[usize::from(i)] = Action::Drop(DropReason::MtuExceeded);
                        continue;
                    }
                    _ => port,
                }
            }
            Action::Flood {
                segment,
                in_vlan,
                untag,
                ..
            } => {
                if snap.acl.any_egress {
                    trace!(
                        b.t,
                        Stage::Acl,
                        "flooded: each copy's output port's egress table applies as it is sent"
                    );
                    b.actions[usize::from(i)] = Action::Flood {
                        segment,
                        in_vlan,
                        untag,
                        acl: true,
                    };
                }
                u16::MAX
            }
            _ => continue,
        };
        s.out[usize::from(i)] = out;
        s.nh[usize::from(i)] = super::burst::NO_NEXT_HOP;
        s.routed[n] = i;
        n += 1;
    }
    b.n_routed = n;
    acl::egress(b);
    ct::commit_switched(b);
    std::mem::swap(&mut b.s.ok, &mut b.s.switched);
    b.n_ok = n_routed_bound;
    b.n_routed = 0;
}

/// Whether the copy of a flooded packet (its parse `parsed`, conntrack mark `mark`,
/// frame length `len`) may go to `target`: the target port's egress table permits it
/// (or it has none, or the packet's connection skips the ACLs). The verdict's rule hit,
/// if a table was consulted, is returned for the worker to count.
pub fn flood_permits(
    snap: &Snapshot,
    target: u16,
    parsed: &Parsed,
    mark: CtMark,
    len: usize,
) -> (bool, Option<AclHit>) {
    let Some(table) = snap.acl.attached(target, Direction::Egress) else {
        return (true, None);
    };
    if mark.skips_acl() {
        return (true, None);
    }
    let mut result = [0u32];
    table.classify(
        std::slice::from_ref(&parsed.key),
        &mut result,
        &snap.identities,
    );
    let hit = AclHit {
        slot: table.slot(result[0]),
        bytes: len as u32,
    };
    (table.permits(result[0]), Some(hit))
}

/// Whether an ARP frame is a request for one of the port's own addresses.
#[inline(never)]
pub(super) fn arp_request_for(port: &PortState, frame: &[u8]) -> bool {
    frame.get(14..).is_some_and(|l3| {
        ArpPacket::new_checked(l3).is_ok_and(|a| {
            a.operation() == ArpOperation::Request && port.owns_v4(a.target_protocol_addr())
        })
    })
}

/// Whether an IPv6 packet is a neighbour solicitation for one of the port's own
/// addresses (answered by the routed path).
fn ns_for(port: &PortState, parsed: &Parsed, frame: &[u8]) -> bool {
    const ICMPV6_NS: u8 = 135;
    let l4 = parsed.l4_offset;
    if parsed.key.proto != 58 || l4 == 0 || frame.get(l4) != Some(&ICMPV6_NS) {
        return false;
    }
    frame
        .get(l4 + 8..l4 + 24)
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
        .is_some_and(|b| port.owns_v6(std::net::Ipv6Addr::from(b)))
}

fn tag_text(vlan: u16) -> String {
    if vlan == NO_VLAN {
        String::new()
    } else {
        format!(" (VLAN {vlan} tag added)")
    }
}

fn mac(m: &[u8]) -> EthernetAddress {
    EthernetAddress::from_bytes(m).unwrap_or(EthernetAddress::UNSPECIFIED)
}

fn seg_name(snap: &Snapshot, segment: u16) -> &str {
    snap.switching
        .segment(segment)
        .map(|s| s.name.as_str())
        .unwrap_or("?")
}

fn port_name(snap: &Snapshot, port: u16) -> &str {
    snap.ports
        .get(usize::from(port))
        .map(|p| p.name.as_str())
        .unwrap_or("?")
}

fn member_text(snap: &Snapshot, m: Member) -> String {
    if m.vlan == NO_VLAN {
        port_name(snap, m.port).to_string()
    } else {
        format!("{} VLAN {}", port_name(snap, m.port), m.vlan)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{parse, process_burst, NoTrace, Recorder, Scratch};
    use super::*;
    use crate::lpm::Lpm4;
    use crate::snapshot::{Network, NextHopEntry, PortRole};
    use crate::switching::{FdbAges, FdbHit, Segment, Switching, NO_SLOT};
    use crate::wire::checksum;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::sync::Arc;

    // Ports: 0, 1, 2 pods A, B, C of Layer2 network "blue" (segment 0); 3 a pod of the
    // routed network "default"; 4 the uplink, in "default" untagged and a member of
    // Localnet "red" (segment 1) on VLAN 100; 5 pod D of "red".
    const A: u16 = 0;
    const B: u16 = 1;
    const C: u16 = 2;
    const OTHER: u16 = 3;
    const UPLINK: u16 = 4;
    const D: u16 = 5;
    const VLAN: u16 = 100;
    const BLUE: u16 = 0;
    const RED: u16 = 1;

    fn pod_mac(port: u16) -> [u8; 6] {
        [2, 0, 0, 0, 5, 2 + port as u8]
    }
    fn gw_mac(port: u16) -> [u8; 6] {
        [2, 0xfe, 0, 0, 1, port as u8]
    }
    fn pod_ip(port: u16) -> [u8; 4] {
        match port {
            D => [10, 6, 0, 2],
            OTHER => [10, 1, 0, 2],
            p => [10, 5, 0, 2 + p as u8],
        }
    }
    const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0x77, 1];
    const HOST_IP: [u8; 4] = [10, 6, 0, 77];
    const UPLINK_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xc];

    /// The topology above; the pods' MACs seeded static when `seeded`, the host behind
    /// the uplink on VLAN 100 learned (slot 0) when `host_learned`.
    fn snapshot(seeded: bool, host_learned: bool) -> Snapshot {
        let mut snap = Snapshot::empty();
        snap.networks.push(Network {
            name: "blue".into(),
            ..snap.networks[0].clone()
        });
        snap.networks.push(Network {
            name: "red".into(),
            ..snap.networks[0].clone()
        });
        let pod = |name: &str, i: u16, network: u16, gw: [u8; 4]| {
            let ip = Ipv4Addr::from(pod_ip(i)).to_string();
            PortState {
                name: name.into(),
                dpdk_id: i,
                role: PortRole::Pod,
                network,
                mac: EthernetAddress(gw_mac(i)),
                mtu: 1500,
                pod_mac: Some(EthernetAddress(pod_mac(i))),
                local_v4: vec![Ipv4Addr::from(gw)],
                local_v6: vec![Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)],
                proxy_arp_v4: Vec::new(),
                xconnect: None,
                pod_sources: super::super::port_security::sources(
                    Some(pod_mac(i)),
                    &[ip.as_str()],
                    &[],
                ),
                locked: false,
            }
        };
        snap.ports = vec![
            pod("a", A, 1, [10, 5, 0, 1]),
            pod("b", B, 1, [10, 5, 0, 1]),
            pod("c", C, 1, [10, 5, 0, 1]),
            pod("other", OTHER, 0, [169, 254, 1, 1]),
            PortState {
                name: "uplink".into(),
                dpdk_id: 4,
                role: PortRole::Uplink,
                network: 0,
                mac: EthernetAddress(UPLINK_MAC),
                mtu: 1500,
                pod_mac: None,
                local_v4: vec![Ipv4Addr::new(192, 0, 2, 10)],
                local_v6: Vec::new(),
                proxy_arp_v4: Vec::new(),
                xconnect: None,
                pod_sources: Default::default(),
                locked: false,
            },
            pod("d", D, 2, [10, 6, 0, 1]),
        ];
        // Routes: default 10.1.0.2 → other; blue 10.5.0.3 → b (on-link).
        let mut l0 = Lpm4::new();
        l0.insert(Ipv4Addr::from(pod_ip(OTHER)), 32, 0)
            .expect("route");
        snap.networks[0].lpm4 = Arc::new(l0);
        let mut l1 = Lpm4::new();
        l1.insert(Ipv4Addr::from(pod_ip(B)), 32, 1).expect("route");
        snap.networks[1].lpm4 = Arc::new(l1);
        snap.next_hops = Arc::new(vec![
            NextHopEntry::Port {
                port: OTHER,
                via: None,
            },
            NextHopEntry::Port { port: B, via: None },
        ]);
        let ages = Arc::new(FdbAges::new(8));
        let mut sw = Switching::new(
            vec![
                Segment {
                    name: "blue".into(),
                    network: 1,
                    members: vec![
                        Member::untagged(A),
                        Member::untagged(B),
                        Member::untagged(C),
                    ],
                },
                Segment {
                    name: "red".into(),
                    network: 2,
                    members: vec![
                        Member::untagged(D),
                        Member {
                            port: UPLINK,
                            vlan: VLAN,
                        },
                    ],
                },
            ],
            ages,
        );
        if seeded {
            for (seg, p) in [(BLUE, A), (BLUE, B), (BLUE, C), (RED, D)] {
                let hit = FdbHit {
                    member: Member::untagged(p),
                    slot: NO_SLOT,
                };
                sw.insert(seg, EthernetAddress(pod_mac(p)), hit);
            }
        }
        if host_learned {
            let hit = FdbHit {
                member: Member {
                    port: UPLINK,
                    vlan: VLAN,
                },
                slot: 0,
            };
            sw.insert(RED, EthernetAddress(HOST_MAC), hit);
        }
        snap.switching = Arc::new(sw);
        snap
    }

    /// Runs `frames` as one burst received on `port`: the verdicts and learn events.
    fn run(snap: &Snapshot, port: u16, frames: &mut [Vec<u8>]) -> (Vec<Action>, Vec<LearnEvent>) {
        let mut actions = vec![Action::Drop(DropReason::Malformed); frames.len()];
        let mut s = Box::<Scratch>::default();
        process_burst(snap, port, frames, &mut actions, &mut s, None, &mut NoTrace);
        (actions, s.learned().to_vec())
    }

    fn run1(snap: &Snapshot, port: u16, frame: &[u8]) -> (Action, Vec<LearnEvent>) {
        let (a, l) = run(snap, port, &mut [frame.to_vec()]);
        (a[0], l)
    }

    fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(14 + payload.len());
        f.extend_from_slice(&dst);
        f.extend_from_slice(&src);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn arp(
        op: u16,
        dst: [u8; 6],
        src: [u8; 6],
        sip: [u8; 4],
        tmac: [u8; 6],
        tip: [u8; 4],
    ) -> Vec<u8> {
        let mut p = vec![0, 1, 8, 0, 6, 4];
        p.extend_from_slice(&op.to_be_bytes());
        p.extend_from_slice(&src);
        p.extend_from_slice(&sip);
        p.extend_from_slice(&tmac);
        p.extend_from_slice(&tip);
        eth(dst, src, 0x0806, &p)
    }

    fn who_has(from: u16, target: [u8; 4]) -> Vec<u8> {
        arp(1, [0xff; 6], pod_mac(from), pod_ip(from), [0; 6], target)
    }

    fn ipv4(
        dst_mac: [u8; 6],
        src_mac: [u8; 6],
        src: [u8; 4],
        dst: [u8; 4],
        proto: u8,
        l4: &[u8],
    ) -> Vec<u8> {
        let len = (20 + l4.len()) as u16;
        let mut ip = vec![
            0x45,
            0,
            (len >> 8) as u8,
            len as u8,
            0,
            1,
            0x40,
            0,
            64,
            proto,
            0,
            0,
        ];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        let c = !checksum::data(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip.extend_from_slice(l4);
        eth(dst_mac, src_mac, 0x0800, &ip)
    }

    fn echo(dst_mac: [u8; 6], src_mac: [u8; 6], src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut icmp = vec![8, 0, 0, 0, 0x12, 0x34, 0, 1, b'p', b'i', b'n', b'g'];
        let c = !checksum::data(&icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        ipv4(dst_mac, src_mac, src, dst, 1, &icmp)
    }

    fn tag(frame: &[u8], vid: u16) -> Vec<u8> {
        let mut f = frame.to_vec();
        crate::switching::retag_vec(&mut f, false, vid);
        f
    }

    fn outputs(snap: &Snapshot, port: u16, frame: &[u8], a: Action) -> Vec<(u16, Vec<u8>)> {
        crate::switching::outputs_vec(&snap.switching, port, frame, a)
    }

    fn icmp4(dst_mac: [u8; 6], src_mac: [u8; 6], src: [u8; 4], dst: [u8; 4], ty: u8) -> Vec<u8> {
        let mut icmp = vec![ty, 0, 0, 0, 0x12, 0x34, 0, 1, b'p', b'i', b'n', b'g'];
        let c = !checksum::data(&icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        ipv4(dst_mac, src_mac, src, dst, 1, &icmp)
    }

    /// [`snapshot`] with B's policies as the renderer makes them: its egress table (what
    /// B receives) reflects what A sends and denies the rest; its ingress table (what B
    /// sends) denies everything.
    fn with_b_policy() -> Snapshot {
        use crate::acl::table::{AclTables, Table};
        use crate::acl::{Action as RuleAction, Prefix, Rule};
        use crate::counters::MAX_PORTS;
        let mut from_a = Rule::any(RuleAction::Reflect);
        from_a.src = Prefix::v4(Ipv4Addr::from(pod_ip(A)), 32);
        let b_in = Table::compile("b-in".into(), vec![from_a], vec![1], 2).expect("compile");
        let b_out = Table::compile("b-out".into(), Vec::new(), Vec::new(), 3).expect("compile");
        let mut ingress = [None; MAX_PORTS];
        let mut egress = [None; MAX_PORTS];
        egress[usize::from(B)] = Some(0);
        ingress[usize::from(B)] = Some(1);
        let mut snap = snapshot(true, false);
        snap.acl = Arc::new(AclTables::new(
            vec![Arc::new(b_in), Arc::new(b_out)],
            ingress,
            egress,
            None,
            1,
        ));
        snap
    }

    fn conntrack() -> crate::conntrack::Conntrack {
        use crate::conntrack::{Conntrack, CtConfig, NoAdvice};
        let cfg = CtConfig {
            max_entries: 64,
            max_per_zone: 64,
            ..CtConfig::default()
        };
        let mut ct = Conntrack::new_in(&cfg, 0, 1, true, &NoAdvice);
        ct.now = 1_000;
        ct
    }

    fn run_ct(
        snap: &Snapshot,
        ct: &mut crate::conntrack::Conntrack,
        port: u16,
        frame: &[u8],
    ) -> (Action, super::super::ct::CtMark, Parsed) {
        let mut frames = [frame.to_vec()];
        let mut actions = [Action::Drop(DropReason::Malformed)];
        let mut s = Box::<Scratch>::default();
        process_burst(
            snap,
            port,
            &mut frames[..],
            &mut actions,
            &mut s,
            Some(ct),
            &mut NoTrace,
        );
        assert_eq!(frames[0], frame, "a switched frame is never rewritten");
        (actions[0], s.ct[0], s.parsed[0])
    }

    #[test]
    fn switched_packets_pass_the_pods_policies_with_connection_tracking() {
        let snap = with_b_policy();
        let mut ct = conntrack();
        let to_b = Action::Switch {
            port: B,
            vlan: NO_VLAN,
            untag: false,
        };
        // A → B: B's egress table reflects it; the connection is opened.
        let request = icmp4(pod_mac(B), pod_mac(A), pod_ip(A), pod_ip(B), 8);
        assert_eq!(run_ct(&snap, &mut ct, A, &request).0, to_b);
        assert_eq!(ct.table.len(), 1, "reflect opened the connection");
        // C → B: no rule of B's egress table: denied.
        let from_c = icmp4(pod_mac(B), pod_mac(C), pod_ip(C), pod_ip(B), 8);
        assert_eq!(
            run_ct(&snap, &mut ct, C, &from_c).0,
            Action::Drop(DropReason::AclDeny)
        );
        // B → A, the reply: B's ingress table denies everything, the connection lets
        // it through.
        let reply = icmp4(pod_mac(A), pod_mac(B), pod_ip(B), pod_ip(A), 0);
        let (a, mark, _) = run_ct(&snap, &mut ct, B, &reply);
        assert_eq!(
            a,
            Action::Switch {
                port: A,
                vlan: NO_VLAN,
                untag: false
            }
        );
        assert!(mark.skips_acl(), "{mark:?}");
        // B → C, a new packet: denied by B's ingress table.
        let to_c = icmp4(pod_mac(C), pod_mac(B), pod_ip(B), pod_ip(C), 8);
        assert_eq!(
            run_ct(&snap, &mut ct, B, &to_c).0,
            Action::Drop(DropReason::AclDeny)
        );
        // ARP and neighbour discovery pass whatever the tables say.
        assert!(matches!(
            run_ct(&snap, &mut ct, B, &who_has(B, pod_ip(C))).0,
            Action::Flood { acl: false, .. }
        ));
    }

    #[test]
    fn flooded_packets_reach_only_the_ports_whose_tables_permit_them() {
        let snap = with_b_policy();
        let mut ct = conntrack();
        // An IP broadcast from C: flooded, each copy checked against its target's table.
        let bcast = icmp4([0xff; 6], pod_mac(C), pod_ip(C), [10, 5, 0, 255], 8);
        let (a, mark, parsed) = run_ct(&snap, &mut ct, C, &bcast);
        assert_eq!(
            a,
            Action::Flood {
                segment: BLUE,
                in_vlan: NO_VLAN,
                untag: false,
                acl: true
            }
        );
        let len = bcast.len();
        let (to_a, hit_a) = flood_permits(&snap, A, &parsed, mark, len);
        let (to_b, hit_b) = flood_permits(&snap, B, &parsed, mark, len);
        assert!(to_a && hit_a.is_none(), "A has no table");
        assert!(!to_b, "B's table has no rule for C");
        assert_eq!(hit_b.map(|h| h.slot), Some(2), "the default verdict's slot");
        // From A, B's copy is permitted (its reflect rule).
        let from_a = icmp4([0xff; 6], pod_mac(A), pod_ip(A), [10, 5, 0, 255], 8);
        let (_, mark, parsed) = run_ct(&snap, &mut ct, A, &from_a);
        assert!(flood_permits(&snap, B, &parsed, mark, len).0);
    }

    #[test]
    fn a_switched_packet_over_the_output_mtu_is_dropped() {
        let mut snap = snapshot(true, false);
        snap.ports[usize::from(B)].mtu = 30;
        let f = echo(pod_mac(B), pod_mac(A), pod_ip(A), pod_ip(B));
        assert_eq!(run1(&snap, A, &f).0, Action::Drop(DropReason::MtuExceeded));
        snap.ports[usize::from(B)].mtu = 32;
        assert!(matches!(
            run1(&snap, A, &f).0,
            Action::Switch { port: B, .. }
        ));
    }

    #[test]
    fn neighbour_discovery_is_exempt_from_policy() {
        let snap = snapshot(true, false);
        let parsed = |f: &[u8]| parse::parse(f, 1).expect("parses");
        let echo4 = echo(pod_mac(B), pod_mac(A), pod_ip(A), pod_ip(B));
        let switch = Action::Switch {
            port: B,
            vlan: NO_VLAN,
            untag: false,
        };
        assert!(policy_applies(switch, &parsed(&echo4), &echo4));
        let arp = who_has(A, pod_ip(B));
        assert!(!policy_applies(switch, &parsed(&arp), &arp));
        let _ = snap;
        // ICMPv6: an NS (135) is exempt, an echo request (128) is not.
        let icmp6 = |ty: u8| {
            let src = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0xa);
            let dst = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0xb);
            let mut icmp = vec![ty, 0, 0, 0, 0, 0, 0, 0];
            icmp.extend_from_slice(&dst.octets());
            let mut pseudo = Vec::new();
            pseudo.extend_from_slice(&src.octets());
            pseudo.extend_from_slice(&dst.octets());
            pseudo.extend_from_slice(&(icmp.len() as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 58]);
            pseudo.extend_from_slice(&icmp);
            let c = !checksum::data(&pseudo);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            let mut ip = vec![0x60, 0, 0, 0, 0, icmp.len() as u8, 58, 255];
            ip.extend_from_slice(&src.octets());
            ip.extend_from_slice(&dst.octets());
            ip.extend_from_slice(&icmp);
            eth(pod_mac(B), pod_mac(A), 0x86dd, &ip)
        };
        let ns = icmp6(135);
        assert!(!policy_applies(switch, &parsed(&ns), &ns));
        let echo6 = icmp6(128);
        assert!(policy_applies(switch, &parsed(&echo6), &echo6));
    }

    #[test]
    fn arp_request_is_flooded_to_the_other_pods_of_the_segment_only() {
        let snap = snapshot(true, false);
        let f = who_has(A, pod_ip(B));
        let (a, learned) = run1(&snap, A, &f);
        assert_eq!(
            a,
            Action::Flood {
                segment: BLUE,
                in_vlan: NO_VLAN,
                untag: false,
                acl: false
            }
        );
        let out = outputs(&snap, A, &f, a);
        let ports: Vec<u16> = out.iter().map(|o| o.0).collect();
        assert_eq!(
            ports,
            [B, C],
            "never to port 3 (default) nor to red's ports"
        );
        assert!(out.iter().all(|o| o.1 == f), "flooded unchanged");
        assert!(learned.is_empty(), "A's MAC is static: nothing to learn");
    }

    #[test]
    fn the_reply_is_switched_unicast_once_learned() {
        // No static entries: A's MAC is learned from its request.
        let snap = snapshot(false, false);
        let req = who_has(A, pod_ip(B));
        let (a, learned) = run1(&snap, A, &req);
        assert!(matches!(a, Action::Flood { segment: BLUE, .. }), "{a:?}");
        let event = LearnEvent {
            segment: BLUE,
            mac: EthernetAddress(pod_mac(A)),
            member: Member::untagged(A),
        };
        assert_eq!(learned, [event]);
        // Before the control thread learned it the reply is flooded too; after, it
        // goes to A only.
        let reply = arp(2, pod_mac(A), pod_mac(B), pod_ip(B), pod_mac(A), pod_ip(A));
        assert!(matches!(run1(&snap, B, &reply).0, Action::Flood { .. }));
        let mut learned_snap = snap.clone();
        let mut sw = (*snap.switching).clone();
        sw.insert(
            BLUE,
            event.mac,
            FdbHit {
                member: event.member,
                slot: 3,
            },
        );
        learned_snap.switching = Arc::new(sw);
        learned_snap.switching.ages().set_now(42);
        let (a, learned) = run1(&learned_snap, B, &reply);
        assert_eq!(
            a,
            Action::Switch {
                port: A,
                vlan: NO_VLAN,
                untag: false
            }
        );
        assert_eq!(learned.len(), 1, "B's MAC is learned in turn");
        assert_eq!(outputs(&learned_snap, B, &reply, a), [(A, reply.clone())]);
        // A frame from A now refreshes its entry's stamp.
        run1(&learned_snap, A, &req);
        assert_eq!(learned_snap.switching.ages().stamp(3), 42);
    }

    #[test]
    fn unknown_unicast_is_flooded() {
        let snap = snapshot(true, false);
        let f = echo([2, 0, 0, 0, 5, 0x99], pod_mac(A), pod_ip(A), [10, 5, 0, 99]);
        let (a, _) = run1(&snap, A, &f);
        let ports: Vec<u16> = outputs(&snap, A, &f, a).iter().map(|o| o.0).collect();
        assert_eq!(ports, [B, C]);
        // A segment where D is alone with the uplink: D's frame for an unknown MAC
        // goes to the uplink only.
        let f = echo([2, 0, 0, 0, 5, 0x99], pod_mac(D), pod_ip(D), [10, 6, 0, 99]);
        let (a, _) = run1(&snap, D, &f);
        let ports: Vec<u16> = outputs(&snap, D, &f, a).iter().map(|o| o.0).collect();
        assert_eq!(ports, [UPLINK]);
    }

    #[test]
    fn echo_between_pods_is_switched_unchanged() {
        let snap = snapshot(true, false);
        let f = echo(pod_mac(B), pod_mac(A), pod_ip(A), pod_ip(B));
        let mut frames = vec![f.clone()];
        let (a, _) = run(&snap, A, &mut frames);
        assert_eq!(
            a[0],
            Action::Switch {
                port: B,
                vlan: NO_VLAN,
                untag: false
            }
        );
        assert_eq!(frames[0], f, "not rewritten: no TTL change, same MACs");
        assert_eq!(outputs(&snap, A, &f, a[0]), [(B, f.clone())]);
        // And the answer back.
        let back = echo(pod_mac(A), pod_mac(B), pod_ip(B), pod_ip(A));
        assert_eq!(
            run1(&snap, B, &back).0,
            Action::Switch {
                port: A,
                vlan: NO_VLAN,
                untag: false
            }
        );
    }

    #[test]
    fn a_frame_for_the_input_port_itself_goes_nowhere() {
        let snap = snapshot(true, false);
        let f = echo(pod_mac(A), pod_mac(A), pod_ip(A), pod_ip(A));
        assert_eq!(
            run1(&snap, A, &f).0,
            Action::Drop(DropReason::SwitchNoOutput)
        );
    }

    #[test]
    fn arp_for_the_gateway_is_answered_and_frames_to_it_routed() {
        let snap = snapshot(true, false);
        let mut f = who_has(A, [10, 5, 0, 1]);
        let mut one: &mut [u8] = &mut f;
        let mut s = Box::<Scratch>::default();
        let mut actions = [Action::Drop(DropReason::Malformed)];
        process_burst(&snap, A, &mut one, &mut actions, &mut s, None, &mut NoTrace);
        assert_eq!(actions[0], Action::Reply);
        assert_eq!(&f[6..12], &gw_mac(A), "answered by the gateway");
        // To the gateway's MAC: routed (TTL decremented, MACs rewritten).
        let mut frames = vec![echo(gw_mac(A), pod_mac(A), pod_ip(A), pod_ip(B))];
        let (a, _) = run(&snap, A, &mut frames);
        assert_eq!(a[0], Action::Forward { port: B });
        assert_eq!(frames[0][22], 63, "TTL decremented");
        assert_eq!(&frames[0][..6], &pod_mac(B));
        assert_eq!(&frames[0][6..12], &gw_mac(B));
    }

    #[test]
    fn neighbour_solicitation_for_the_gateway_is_answered_others_flooded() {
        let snap = snapshot(true, false);
        let ns = |target: Ipv6Addr| {
            let src = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0xa);
            let t = target.octets();
            let group = Ipv6Addr::new(
                0xff02,
                0,
                0,
                0,
                0,
                1,
                0xff00 | u16::from(t[13]),
                u16::from_be_bytes([t[14], t[15]]),
            );
            let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
            icmp.extend_from_slice(&t);
            icmp.extend_from_slice(&[1, 1]);
            icmp.extend_from_slice(&pod_mac(A));
            let mut ip = vec![0x60, 0, 0, 0, 0, icmp.len() as u8, 58, 255];
            ip.extend_from_slice(&src.octets());
            ip.extend_from_slice(&group.octets());
            let mut pseudo = Vec::new();
            pseudo.extend_from_slice(&src.octets());
            pseudo.extend_from_slice(&group.octets());
            pseudo.extend_from_slice(&(icmp.len() as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 58]);
            pseudo.extend_from_slice(&icmp);
            let c = !checksum::data(&pseudo);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            ip.extend_from_slice(&icmp);
            eth(
                EthernetAddress::ipv6_multicast(&group).0,
                pod_mac(A),
                0x86dd,
                &ip,
            )
        };
        let gw = ns(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1));
        assert_eq!(run1(&snap, A, &gw).0, Action::Reply);
        let other = ns(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0xb));
        assert!(matches!(
            run1(&snap, A, &other).0,
            Action::Flood { segment: BLUE, .. }
        ));
    }

    #[test]
    fn port_security_applies_before_switching() {
        let snap = snapshot(true, false);
        let spoofed_mac = echo(pod_mac(B), [2, 0, 0, 0, 5, 0x55], pod_ip(A), pod_ip(B));
        assert_eq!(
            run1(&snap, A, &spoofed_mac).0,
            Action::Drop(DropReason::SpoofedSrcMac)
        );
        let spoofed_ip = echo(pod_mac(B), pod_mac(A), [10, 5, 0, 55], pod_ip(B));
        assert_eq!(
            run1(&snap, A, &spoofed_ip).0,
            Action::Drop(DropReason::SpoofedSrcIp)
        );
        let spoofed_arp = arp(1, [0xff; 6], pod_mac(A), pod_ip(C), [0; 6], pod_ip(B));
        assert_eq!(
            run1(&snap, A, &spoofed_arp).0,
            Action::Drop(DropReason::SpoofedArp)
        );
    }

    #[test]
    fn localnet_frames_leave_the_uplink_tagged() {
        let snap = snapshot(true, true);
        let f = echo(HOST_MAC, pod_mac(D), pod_ip(D), HOST_IP);
        let (a, _) = run1(&snap, D, &f);
        assert_eq!(
            a,
            Action::Switch {
                port: UPLINK,
                vlan: VLAN,
                untag: false
            }
        );
        let out = outputs(&snap, D, &f, a);
        assert_eq!(out.len(), 1);
        let (port, tagged) = &out[0];
        assert_eq!(*port, UPLINK);
        let p = etherparse::SlicedPacket::from_ethernet(tagged).expect("parses");
        let Some(etherparse::VlanSlice::SingleVlan(v)) = p.vlan else {
            panic!("no single 802.1Q tag: {:?}", p.vlan);
        };
        assert_eq!(v.vlan_identifier().value(), VLAN);
        assert_eq!(v.ether_type(), etherparse::EtherType::IPV4);
        let Some(etherparse::LinkSlice::Ethernet2(e)) = p.link else {
            panic!("not Ethernet II");
        };
        assert_eq!(e.ether_type(), etherparse::EtherType::VLAN_TAGGED_FRAME);
        assert_eq!((e.source(), e.destination()), (pod_mac(D), HOST_MAC));
        assert_eq!(&tagged[18..], &f[14..], "the payload is unchanged");
        // A broadcast from D is flooded to the uplink only, tagged.
        let bcast = who_has(D, HOST_IP);
        let (a, _) = run1(&snap, D, &bcast);
        let out = outputs(&snap, D, &bcast, a);
        assert_eq!(out, [(UPLINK, tag(&bcast, VLAN))]);
    }

    #[test]
    fn tagged_frames_in_are_untagged_and_delivered_and_learned() {
        let snap = snapshot(true, false);
        let untagged = echo(pod_mac(D), HOST_MAC, HOST_IP, pod_ip(D));
        let f = tag(&untagged, VLAN);
        let (a, learned) = run1(&snap, UPLINK, &f);
        assert_eq!(
            a,
            Action::Switch {
                port: D,
                vlan: NO_VLAN,
                untag: true
            }
        );
        assert_eq!(outputs(&snap, UPLINK, &f, a), [(D, untagged.clone())]);
        assert_eq!(
            learned,
            [LearnEvent {
                segment: RED,
                mac: EthernetAddress(HOST_MAC),
                member: Member {
                    port: UPLINK,
                    vlan: VLAN
                },
            }]
        );
        // A tagged broadcast is flooded untagged to the segment's pod.
        let bcast = tag(
            &arp(1, [0xff; 6], HOST_MAC, HOST_IP, [0; 6], pod_ip(D)),
            VLAN,
        );
        let (a, _) = run1(&snap, UPLINK, &bcast);
        assert_eq!(
            a,
            Action::Flood {
                segment: RED,
                in_vlan: VLAN,
                untag: true,
                acl: false
            }
        );
        let out = outputs(&snap, UPLINK, &bcast, a);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, D);
        assert_eq!(out[0].1.len(), bcast.len() - TAG_LEN);
        assert_eq!(&out[0].1[12..14], &[8, 6], "untagged ARP");
    }

    #[test]
    fn unknown_vlans_stay_dropped_and_untagged_uplink_traffic_is_routed() {
        let snap = snapshot(true, false);
        let untagged = echo(pod_mac(D), HOST_MAC, HOST_IP, pod_ip(D));
        assert_eq!(
            run1(&snap, UPLINK, &tag(&untagged, 200)).0,
            Action::Drop(DropReason::VlanTagged)
        );
        // QinQ is not switched either.
        let mut qinq = tag(&untagged, VLAN);
        qinq[12..14].copy_from_slice(&0x88a8u16.to_be_bytes());
        assert_eq!(
            run1(&snap, UPLINK, &qinq).0,
            Action::Drop(DropReason::VlanTagged)
        );
        // Tagged frames on a pod port: dropped as before.
        assert_eq!(
            run1(
                &snap,
                D,
                &tag(&echo(HOST_MAC, pod_mac(D), pod_ip(D), HOST_IP), VLAN)
            )
            .0,
            Action::Drop(DropReason::VlanTagged)
        );
        // Untagged on the same uplink, for its MAC: the default network's route.
        let routed = echo(
            UPLINK_MAC,
            [2, 0, 0, 0, 9, 1],
            [198, 51, 100, 7],
            pod_ip(OTHER),
        );
        assert_eq!(
            run1(&snap, UPLINK, &routed).0,
            Action::Forward { port: OTHER }
        );
        // Untagged, for another MAC: the uplink has no untagged segment.
        let stray = echo(
            HOST_MAC,
            [2, 0, 0, 0, 9, 1],
            [198, 51, 100, 7],
            pod_ip(OTHER),
        );
        assert_eq!(
            run1(&snap, UPLINK, &stray).0,
            Action::Drop(DropReason::DstMacMismatch)
        );
        // A port of a routed network still drops frames not for it.
        let f = echo(pod_mac(A), pod_mac(OTHER), pod_ip(OTHER), pod_ip(A));
        assert_eq!(
            run1(&snap, OTHER, &f).0,
            Action::Drop(DropReason::DstMacMismatch)
        );
    }

    #[test]
    fn learning_is_bounded_per_burst() {
        let snap = snapshot(true, false);
        let mut frames: Vec<Vec<u8>> = (0..8u8)
            .map(|k| {
                let src = [2, 0, 0, 0, 0x66, k % 6];
                tag(&echo(pod_mac(D), src, HOST_IP, pod_ip(D)), VLAN)
            })
            .collect();
        let (actions, learned) = run(&snap, UPLINK, &mut frames);
        assert!(actions
            .iter()
            .all(|a| matches!(a, Action::Switch { port: D, .. })));
        assert_eq!(learned.len(), MAX_LEARN_PER_BURST);
        let macs: Vec<u8> = learned.iter().map(|e| e.mac.0[5]).collect();
        assert_eq!(macs, [0, 1, 2, 3], "each MAC once");
    }

    #[test]
    fn traces_say_what_the_switch_did() {
        let snap = snapshot(true, true);
        let mut f = echo(HOST_MAC, pod_mac(D), pod_ip(D), HOST_IP);
        let mut t = Recorder::default();
        let a = super::super::process(&snap, D, &mut f, &mut t);
        assert!(matches!(a, Action::Switch { .. }));
        let lines: Vec<String> = t
            .stages
            .iter()
            .map(|(s, d)| format!("{} {d}", s.name()))
            .collect();
        assert!(
            lines.iter().any(|l| l
                == "switch 02:00:00:00:77:01 is behind uplink VLAN 100: switched to port uplink (VLAN 100 tag added)"),
            "{lines:#?}"
        );
        let mut b = who_has(A, pod_ip(B));
        let mut t = Recorder::default();
        super::super::process(&snap, A, &mut b, &mut t);
        let lines: Vec<String> = t
            .stages
            .iter()
            .map(|(s, d)| format!("{} {d}", s.name()))
            .collect();
        assert!(
            lines
                .iter()
                .any(|l| l
                    == "switch broadcast ff:ff:ff:ff:ff:ff: flooded to 2 ports of segment blue"),
            "{lines:#?}"
        );
        let _ = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    }
}
