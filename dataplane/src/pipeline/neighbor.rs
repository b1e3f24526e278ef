//! The neighbour and rewrite stage, last: each packet still routed gets its next hop's
//! MAC (the pod's, the route gateway's resolved when the snapshot was built, or the
//! snapshot's neighbour table; unresolved: punted to the control thread to resolve),
//! then its TTL or hop limit decremented and its MACs set ([`rewrite`]), and its
//! verdict: forward out of its output port.

use super::burst::Burst;
use super::{trace, Action, Frames, Parsed, Punt, Stage, Tracer};
use crate::counters::DropReason;
use crate::snapshot::{NextHopEntry, PortRole, Snapshot};
use crate::wire::{EthernetAddress, EthernetFrame, Ipv4Packet, Ipv6Packet};
use std::net::IpAddr;

/// The stage, over the packets `s.routed` lists: each gets its verdict.
#[inline(always)]
pub fn stage<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let (snap, s) = (b.snap, &*b.s);
    for &i in &s.routed[..b.n_routed] {
        let i = usize::from(i);
        b.actions[i] = finish(
            snap,
            &s.parsed[i],
            s.out[i],
            s.nh[i],
            b.frames.frame_mut(i),
            b.t,
        );
    }
}

/// Neighbour and rewrite of a packet routed to port `out` by next hop `nh`
/// ([`NO_NEXT_HOP`](super::burst::NO_NEXT_HOP): none).
#[inline(always)]
fn finish<T: Tracer>(
    snap: &Snapshot,
    parsed: &Parsed,
    out: u16,
    nh: u32,
    frame: &mut [u8],
    t: &mut T,
) -> Action {
    let Some(out_port) = snap.ports.get(usize::from(out)) else {
        return Action::Drop(DropReason::NoRoute);
    };
    // neighbour: first the route's gateway resolved when the generation was built (the
    // common case: no look at the next hop entry itself; `nh_mac` holds MACs of
    // gateways only, so an on-link pod is never answered from it).
    if let Some(Some(mac)) = snap.nh_mac.get(nh as usize) {
        trace!(
            t,
            Stage::Neighbor,
            "{} is {}",
            gateway(snap, nh).map_or_else(|| "?".into(), |g| g.to_string()),
            mac
        );
        rewrite(frame, parsed, out_port.mac, *mac);
        trace_rewrite(t, out_port.mac, *mac, parsed);
        return Action::Forward { port: out };
    }
    let via = gateway(snap, nh);
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
        (_, via) => {
            let target = via.unwrap_or_else(|| parsed.key.dst_ip());
            // The neighbour is in the output port's network (the packet's, except for a
            // user-defined network's egress through an uplink of the default network).
            match snap.neighbor(out_port.network, target) {
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
                        network: out_port.network,
                        ip: target,
                        port: out,
                    });
                }
            }
        }
    };

    rewrite(frame, parsed, out_port.mac, next_mac);
    trace_rewrite(t, out_port.mac, next_mac, parsed);
    Action::Forward { port: out }
}

/// The gateway of next hop `nh`: `None` when it is on-link or there is none.
#[inline(always)]
fn gateway(snap: &Snapshot, nh: u32) -> Option<IpAddr> {
    match snap.next_hop(nh) {
        Some(&NextHopEntry::Port { via, .. }) => via,
        _ => None,
    }
}

#[inline(always)]
fn trace_rewrite<T: Tracer>(
    t: &mut T,
    src: EthernetAddress,
    dst: EthernetAddress,
    parsed: &Parsed,
) {
    trace!(
        t,
        Stage::Rewrite,
        "src mac {}, dst mac {}, ttl {}",
        src,
        dst,
        parsed.ttl - 1
    );
}

/// Decrements TTL / hop limit (IPv4 checksum updated incrementally) and sets the MACs.
/// Inlined, on views of a known length (the first 20 bytes of the IPv4 header hold
/// TTL, protocol and checksum whatever its options): no bounds check per field.
#[inline(always)]
pub fn rewrite(frame: &mut [u8], parsed: &Parsed, src: EthernetAddress, dst: EthernetAddress) {
    let l3 = parsed.l3_offset;
    if !parsed.is_ipv6() {
        return rewrite_v4(frame, l3, src, dst);
    }
    let mut ip = Ipv6Packet::new_unchecked(&mut frame[l3..]);
    let hl = ip.hop_limit();
    ip.set_hop_limit(hl.saturating_sub(1));
    set_macs(frame, src, dst);
}

/// [`rewrite`] of an IPv4 packet whose header is at `l3`.
#[inline(always)]
pub(super) fn rewrite_v4(frame: &mut [u8], l3: usize, src: EthernetAddress, dst: EthernetAddress) {
    debug_assert!(frame.len() >= l3 + 20, "a parsed IPv4 frame");
    if let Some(header) = frame.get_mut(l3..).and_then(|h| h.first_chunk_mut::<20>()) {
        Ipv4Packet::new_unchecked(header).decrement_ttl();
    }
    set_macs(frame, src, dst);
}

#[inline(always)]
fn set_macs(frame: &mut [u8], src: EthernetAddress, dst: EthernetAddress) {
    if let Some(macs) = frame.first_chunk_mut::<12>() {
        let mut eth = EthernetFrame::new_unchecked(macs);
        eth.set_src_addr(src);
        eth.set_dst_addr(dst);
    }
}

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{
        self, GW_MAC, POD, POD_MAC, ROUTER_MAC, UPLINK, UPLINK_MAC,
    };
    use super::super::burst::NO_NEXT_HOP;
    use super::*;
    use crate::wire::checksum;
    use std::net::Ipv4Addr;

    #[test]
    fn forwards_with_the_next_hops_mac_and_punts_the_unresolved() {
        let snap = testing::snapshot();
        let mut frames = vec![
            testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10),
            testing::udp4(GW_MAC, [10, 1, 0, 2], 64, 10),
            testing::udp4(GW_MAC, [192, 0, 2, 77], 64, 10),
        ];
        let ((), actions) = testing::with_burst(&snap, &mut frames, |b| {
            // Via the router (next hop 1), to the pod (0), out of the uplink with no
            // next hop (on-link).
            let hops = [(UPLINK, 1), (POD, 0), (UPLINK, NO_NEXT_HOP)];
            for (i, (out, nh)) in hops.into_iter().enumerate() {
                b.s.parsed[i] = super::super::parse(b.frames.frame(i), 0).expect("parses");
                b.s.routed[i] = i as u16;
                b.s.out[i] = out;
                b.s.nh[i] = nh;
            }
            b.n_routed = b.n;
            stage(b);
        });
        assert_eq!(actions[0], Action::Forward { port: UPLINK });
        assert_eq!(actions[1], Action::Forward { port: POD });
        assert_eq!(
            actions[2],
            Action::Punt(Punt::Resolve {
                network: 0,
                ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 77)),
                port: UPLINK
            })
        );
        assert_eq!(frames[0][0..6], ROUTER_MAC);
        assert_eq!(frames[0][6..12], UPLINK_MAC);
        assert_eq!(frames[0][22], 63, "TTL decremented");
        assert_eq!(
            checksum::data(&frames[0][14..34]),
            0xFFFF,
            "checksum updated"
        );
        assert_eq!(frames[1][0..6], POD_MAC);
        assert_eq!(frames[2][22], 64, "a punted packet is left as received");
    }
}
