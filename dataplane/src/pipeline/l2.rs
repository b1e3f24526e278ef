//! The first stage: each frame of the burst parsed ([`parse`](super::parse)), checked
//! at layer 2 (addressed to the input port's MAC, broadcast ARP, or IPv6 multicast for
//! neighbour discovery) and, on a pod port, by [`port_security`](super::port_security)
//! (sent by the pod as itself); ARP is answered here. The packets that go on are listed
//! in `s.ok`.

use super::burst::Burst;
use super::ct::{CtMark, SnatHint};
use super::{
    local, net_name, parse, port_security, switch, trace, Action, Frames, Parsed, Stage, Tracer,
};
use crate::counters::DropReason;
use crate::snapshot::{PortRole, PortState, Snapshot};
use crate::switching::PortSegments;
use crate::wire::{EthernetAddress, EthernetFrame};
use std::net::IpAddr;

/// How many packets ahead the stage prefetches.
pub(super) const PREFETCH_AHEAD: usize = 4;

/// The stage: parse, l2 and (pod ports) port security for every frame of the burst,
/// which also clears each packet's per-burst marks (conntrack, SNAT hint, `reflect`).
///
/// On a port that is a member of a layer-2 segment, frames not for the port's MAC (or
/// tagged with a VLAN it switches) are switched ([`switch`]) and their sources learned;
/// that variant of the loop is a function of its own ([`switched`]), and a routed port's
/// burst runs [`routed`], the loop as it was before switching, untouched: sharing the
/// loop's source (with the switching part compiled out by a constant) made the routed
/// path about 12% more expensive in the benchmark binary (code generation of the
/// stored headers), see `perf/RESULTS.md`.
#[inline(always)]
pub fn stage<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    match b.snap.switching.port(b.in_port) {
        None => routed(b),
        Some(sw) => switched(b, sw),
    }
}

/// [`stage`] on a port in no segment.
#[inline(always)]
fn routed<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let (snap, port, s) = (b.snap, b.port, &mut *b.s);
    let pod = port.role == PortRole::Pod;
    for i in 0..PREFETCH_AHEAD.min(b.n) {
        b.frames.prefetch(i);
    }
    let mut n_ok = 0usize;
    for (i, action) in b.actions.iter_mut().enumerate().take(b.n) {
        b.frames.prefetch(i + PREFETCH_AHEAD);
        s.ct[i] = CtMark::None;
        s.snat[i] = SnatHint::None;
        s.reflect[i] = false;
        let frame = b.frames.frame_mut(i);
        if routed_frame(snap, port, pod, frame, &mut s.parsed[i], action, b.t) {
            s.ok[n_ok] = i as u16;
            n_ok += 1;
        }
    }
    b.n_ok = n_ok;
}

/// Parse, l2 and (on a pod port, `pod`) port security of one frame on a routed port:
/// whether it goes on, its headers in `parsed`; else its verdict is in `action`.
#[inline(always)]
pub(super) fn routed_frame<T: Tracer>(
    snap: &Snapshot,
    port: &PortState,
    pod: bool,
    frame: &mut [u8],
    parsed: &mut Parsed,
    action: &mut Action,
    t: &mut T,
) -> bool {
    if let Err(a) = front(snap, port, pod, frame, parsed, t) {
        *action = a;
        return false;
    }
    // Port security: from a pod port, only what the pod sends as itself goes on
    // (checked on the stored headers, which keeps `front` as lean as without it).
    if pod {
        if let Err(reason) = port_security::check(port, parsed, frame, t) {
            *action = Action::Drop(reason);
            return false;
        }
    }
    true
}

/// Parse (into `parsed`) and l2 on a routed port: `Ok` when the packet goes on (to
/// port security on a pod port, `pod`, then conntrack, local and ttl), else the action
/// that ends its path here (ARP is answered here, from a pod port once port security
/// accepts it).
#[inline(always)]
fn front<T: Tracer>(
    snap: &Snapshot,
    port: &PortState,
    pod: bool,
    frame: &mut [u8],
    parsed: &mut Parsed,
    t: &mut T,
) -> Result<(), Action> {
    if let Err(reason) = parse::parse_into(frame, port.network, parsed) {
        trace!(
            t,
            Stage::Parse,
            "{} byte frame: {}",
            frame.len(),
            reason.name()
        );
        return Err(Action::Drop(reason));
    }
    trace!(t, Stage::Parse, "{}", parsed);

    // l2: frames must be for us: our MAC, broadcast (ARP), or IPv6 multicast (ND).
    let dst_mac = EthernetFrame::new_unchecked(&*frame).dst_addr();
    if !(dst_mac == port.mac || routed_accepts(dst_mac, parsed)) {
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
        // From a pod, answered only if port security accepts it.
        if pod {
            port_security::check_arp(port, frame, t).map_err(Action::Drop)?;
        }
        return Err(local::arp(port, frame, t));
    }
    Ok(())
}

/// [`stage`] on a segment member: the loop, then the learning pass.
#[inline(never)]
fn switched<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>, sw: &PortSegments) {
    let (snap, port, s) = (b.snap, b.port, &mut *b.s);
    let pod = port.role == PortRole::Pod;
    let in_port = b.in_port;
    for i in 0..PREFETCH_AHEAD.min(b.n) {
        b.frames.prefetch(i);
    }
    let mut n_ok = 0usize;
    for (i, action) in b.actions.iter_mut().enumerate().take(b.n) {
        b.frames.prefetch(i + PREFETCH_AHEAD);
        s.ct[i] = CtMark::None;
        s.snat[i] = SnatHint::None;
        s.reflect[i] = false;
        match switched_front(snap, in_port, port, sw, pod, b.frames.frame_mut(i), b.t) {
            Ok(parsed) => {
                s.parsed[i] = parsed;
                // On an untagged segment member, what is not for the port's MAC is
                // switched (decided on the stored headers, as port security is).
                if sw.untagged.is_some() {
                    let frame = b.frames.frame(i);
                    if frame[..6] != port.mac.0 {
                        let parsed = &s.parsed[i];
                        if let Some(a) =
                            switch::untagged(snap, sw, in_port, port, pod, parsed, frame, b.t)
                        {
                            *action = a;
                            // Switched IP goes through the policy pass.
                            if switch::policy_applies(a, parsed, frame) {
                                s.switched[s.n_switched] = i as u16;
                                s.n_switched += 1;
                            }
                            continue;
                        }
                    }
                }
                // Port security, as on a routed port.
                if pod {
                    let frame = b.frames.frame(i);
                    if let Err(reason) = port_security::check(port, &s.parsed[i], frame, b.t) {
                        *action = Action::Drop(reason);
                        continue;
                    }
                }
                s.ok[n_ok] = i as u16;
                n_ok += 1;
            }
            Err(a) => *action = a,
        }
    }
    b.n_ok = n_ok;
    switch::learn(b, sw);
    if b.s.n_switched > 0 {
        switch::policy(b);
    }
}

/// [`front`] on a segment member (`sw`): a tagged frame is switched
/// ([`switch::tagged`]); on an untagged member, a frame not for the port's MAC goes on
/// (`Ok`) to be switched by the loop, but for a broadcast ARP request for one of the
/// port's addresses, answered here.
#[inline(always)]
fn switched_front<T: Tracer>(
    snap: &Snapshot,
    in_port: u16,
    port: &PortState,
    sw: &PortSegments,
    pod: bool,
    frame: &mut [u8],
    t: &mut T,
) -> Result<Parsed, Action> {
    let parsed = match parse::parse(frame, port.network) {
        Ok(p) => p,
        Err(DropReason::VlanTagged) => {
            trace!(t, Stage::Parse, "{} byte frame: 802.1Q tagged", frame.len());
            return Err(switch::tagged(snap, sw, in_port, port, frame, t));
        }
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

    let dst_mac = EthernetFrame::new_unchecked(&*frame).dst_addr();
    if dst_mac != port.mac {
        if sw.untagged.is_some() {
            if !(parsed.is_arp() && dst_mac.is_broadcast() && switch::arp_request_for(port, frame))
            {
                return Ok(parsed);
            }
        } else if !routed_accepts(dst_mac, &parsed) {
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
        // From a pod, answered only if port security accepts it.
        if pod {
            port_security::check_arp(port, frame, t).map_err(Action::Drop)?;
        }
        return Err(local::arp(port, frame, t));
    }
    Ok(parsed)
}

/// Whether a routed port takes a frame that is not for its MAC: broadcast ARP, or an
/// IPv6 multicast destination (ND). A multicast frame is taken only for an IPv6
/// multicast destination: a unicast packet in a multicast frame was not sent to us to
/// route.
#[inline(always)]
pub(super) fn routed_accepts(dst_mac: EthernetAddress, parsed: &Parsed) -> bool {
    (dst_mac.is_broadcast() && parsed.is_arp())
        || (dst_mac.is_multicast()
            && parsed.is_ipv6()
            && matches!(parsed.key.dst_ip(), IpAddr::V6(a) if a.is_multicast()))
}

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{self, GW_MAC, UPLINK_MAC};
    use super::*;

    #[test]
    fn keeps_frames_for_the_port_and_drops_the_rest() {
        let snap = testing::snapshot();
        let mut frames = vec![
            testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10),
            testing::udp4(UPLINK_MAC, [8, 8, 8, 8], 64, 10),
            vec![0u8; 10],
            testing::udp4(GW_MAC, [1, 1, 1, 1], 64, 10),
        ];
        let ((ok, dst), actions) = testing::with_burst(&snap, &mut frames, |b| {
            stage(b);
            (
                b.s.ok[..b.n_ok].to_vec(),
                b.s.parsed[3].key.dst_ip().to_string(),
            )
        });
        assert_eq!(ok, [0, 3]);
        assert_eq!(dst, "1.1.1.1");
        assert_eq!(actions[1], Action::Drop(DropReason::DstMacMismatch));
        assert!(matches!(actions[2], Action::Drop(_)), "{:?}", actions[2]);
    }

    #[test]
    fn clears_the_marks_of_the_last_burst() {
        let snap = testing::snapshot();
        let mut frames = vec![testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10)];
        let ((hint, reflect), _) = testing::with_burst(&snap, &mut frames, |b| {
            b.s.snat[0] = SnatHint::NoSnat;
            b.s.reflect[0] = true;
            stage(b);
            (b.s.snat[0], b.s.reflect[0])
        });
        assert_eq!(hint, SnatHint::None);
        assert!(!reflect);
    }
}
