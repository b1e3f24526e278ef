//! The local and ttl stage, after conntrack: a packet for one of Ferrule's own addresses
//! is answered in place ([`local`](super::local)), and a packet whose TTL or hop limit
//! runs out here gets an ICMP time exceeded. The packets that go on to the ACLs and
//! routing stay in `s.ok`.

use super::burst::Burst;
use super::{local, trace, Action, Frames, IcmpErrorKind, Parsed, Stage, Tracer};
use crate::counters::DropReason;
use crate::snapshot::{NextHopEntry, PortState, Snapshot};

/// The stage, over the packets `s.ok` lists.
#[inline(always)]
pub fn stage<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let (snap, port, s) = (b.snap, b.port, &mut *b.s);
    let mut kept = 0usize;
    for k in 0..b.n_ok {
        let i = usize::from(s.ok[k]);
        match local_ttl(snap, port, &s.parsed[i], b.frames.frame_mut(i), b.t) {
            Ok(()) => {
                s.ok[kept] = i as u16;
                kept += 1;
            }
            Err(a) => b.actions[i] = a,
        }
    }
    b.n_ok = kept;
}

/// Local and ttl of one packet: `Ok` when the packet goes on to routing, else the
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
        if let Some((_, NextHopEntry::Local)) = snap.route(parsed.key.network, parsed.key.dst_ip())
        {
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

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{self, GW_MAC};
    use super::*;

    #[test]
    fn expiring_packets_get_time_exceeded_and_the_rest_go_on() {
        let snap = testing::snapshot();
        let mut frames = vec![
            testing::udp4(GW_MAC, [8, 8, 8, 8], 1, 10),
            testing::udp4(GW_MAC, [8, 8, 8, 8], 2, 10),
            testing::udp4(GW_MAC, [169, 254, 1, 1], 64, 10),
        ];
        let (ok, actions) = testing::with_burst(&snap, &mut frames, |b| {
            testing::parse_all(b);
            stage(b);
            b.s.ok[..b.n_ok].to_vec()
        });
        assert_eq!(ok, [1]);
        assert_eq!(
            actions[0],
            Action::IcmpError {
                kind: IcmpErrorKind::TimeExceeded,
                reason: DropReason::TtlExceeded
            }
        );
        assert!(
            !matches!(actions[2], Action::Forward { .. }),
            "UDP to the gateway address is Ferrule's: {:?}",
            actions[2]
        );
    }
}
