//! The MTU stage, after the egress ACLs and before NAT (so that an ICMP error quotes the
//! packet as its sender sent it): a routed packet larger than its output port's MTU
//! gets fragmentation needed (IPv4 with DF), packet too big (IPv6) or is dropped.

use super::burst::Burst;
use super::{trace, Action, Frames, IcmpErrorKind, Parsed, Stage, Tracer};
use crate::counters::DropReason;
use crate::snapshot::PortState;

/// The stage, over the packets `s.routed` lists; those that fit stay in it.
#[inline(always)]
pub fn stage<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let (snap, s) = (b.snap, &mut *b.s);
    let mut kept = 0usize;
    for k in 0..b.n_routed {
        let i = s.routed[k];
        let Some(output) = snap.ports.get(usize::from(s.out[usize::from(i)])) else {
            b.actions[usize::from(i)] = Action::Drop(DropReason::NoRoute);
            continue;
        };
        match fits(&s.parsed[usize::from(i)], output, b.t) {
            Ok(()) => {
                s.routed[kept] = i;
                kept += 1;
            }
            Err(a) => b.actions[usize::from(i)] = a,
        }
    }
    b.n_routed = kept;
}

/// Whether a packet fits the output port, else the ICMP error or drop.
#[inline(always)]
fn fits<T: Tracer>(parsed: &Parsed, out_port: &PortState, t: &mut T) -> Result<(), Action> {
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

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{self, GW_MAC, UPLINK};
    use super::*;

    #[test]
    fn keeps_what_fits_and_answers_the_rest() {
        let snap = testing::snapshot();
        // The uplink's MTU is 1400: 1400 bytes of IP fit, 1401 do not (DF set).
        let mut frames = vec![
            testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 1400 - 28),
            testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 1401 - 28),
        ];
        let (routed, actions) = testing::with_burst(&snap, &mut frames, |b| {
            testing::route_all_to(b, UPLINK);
            stage(b);
            b.s.routed[..b.n_routed].to_vec()
        });
        assert_eq!(routed, [0]);
        assert_eq!(
            actions[1],
            Action::IcmpError {
                kind: IcmpErrorKind::FragNeeded { mtu: 1400 },
                reason: DropReason::MtuExceeded
            }
        );
    }

    #[test]
    fn drops_an_oversized_packet_without_df() {
        let snap = testing::snapshot();
        let mut frame = testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 1500);
        let mut parsed = super::super::parse(&frame, 0).expect("parses");
        parsed.dont_frag = false;
        frame.clear();
        assert_eq!(
            fits(
                &parsed,
                &snap.ports[usize::from(UPLINK)],
                &mut super::super::NoTrace
            ),
            Err(Action::Drop(DropReason::MtuExceeded))
        );
    }
}
