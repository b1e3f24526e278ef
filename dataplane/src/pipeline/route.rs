//! The route stage: one batched lookup in the input network's IPv4 table for every IPv4
//! packet left (prefetching the table), IPv6 packets one by one, then each packet's
//! next hop — a port (listed in `s.routed` with its output port and gateway in `s.hop`
//! and the next hop in `s.nh`), a blackhole, one of Ferrule's addresses (answered
//! here), or no route (an ICMP error).

use super::burst::Burst;
use super::{local, net_name, trace, Action, Frames, IcmpErrorKind, Parsed, Stage, Tracer};
use crate::counters::DropReason;
use crate::lpm;
use crate::snapshot::{NextHopEntry, PortState, Snapshot};
use std::net::IpAddr;

/// The stage, over the packets `s.ok` lists.
#[inline(always)]
pub fn stage<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let (snap, port, s) = (b.snap, b.port, &mut *b.s);
    let (mut n4, mut n6) = (0usize, 0usize);
    for &i in &s.ok[..b.n_ok] {
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
        match route(snap, port, &s.parsed[i], nh, b.frames.frame_mut(i), b.t) {
            Ok(hop) => {
                s.hop[i] = hop;
                s.nh[i] = nh;
                s.routed[n_routed] = i as u16;
                n_routed += 1;
            }
            Err(action) => b.actions[i] = action,
        }
    }
    b.n_routed = n_routed;
}

/// The IPv4 address inside an IPv4-mapped key address.
#[inline(always)]
fn v4_octets(mapped: &[u8; 16]) -> [u8; 4] {
    [mapped[12], mapped[13], mapped[14], mapped[15]]
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
        NextHopEntry::Blackhole | NextHopEntry::Isolated => {
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

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{self, GW_MAC, POD, ROUTER, UPLINK};
    use super::*;

    #[test]
    fn routes_a_batch_to_ports_and_ends_the_rest() {
        let mut snap = testing::snapshot();
        let mut frames = vec![
            testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10),
            testing::udp4(GW_MAC, [203, 0, 113, 5], 64, 10),
            testing::udp4(GW_MAC, [10, 1, 0, 2], 64, 10),
        ];
        let run = |snap: &Snapshot, frames: &mut [Vec<u8>]| {
            testing::with_burst(snap, frames, |b| {
                testing::parse_all(b);
                stage(b);
                let routed = b.s.routed[..b.n_routed].to_vec();
                let hops: Vec<_> = routed.iter().map(|&i| b.s.hop[usize::from(i)]).collect();
                (routed, hops)
            })
        };
        let ((routed, hops), actions) = run(&snap, &mut frames);
        assert_eq!(routed, [0, 2]);
        assert_eq!(hops, [(UPLINK, Some(IpAddr::V4(ROUTER))), (POD, None)]);
        assert_eq!(actions[1], Action::Drop(DropReason::Blackhole));

        // Without a route: an ICMP error to the sender.
        let mut lpm = crate::lpm::Lpm4::new();
        lpm.insert(std::net::Ipv4Addr::new(10, 1, 0, 2), 32, 0)
            .expect("route");
        snap.networks[0].lpm4 = std::sync::Arc::new(lpm);
        let ((routed, _), actions) = run(&snap, &mut frames);
        assert_eq!(routed, [2]);
        assert_eq!(
            actions[0],
            Action::IcmpError {
                kind: IcmpErrorKind::NoRoute,
                reason: DropReason::NoRoute
            }
        );
    }
}
