//! The plain IPv4 lane: on a routed port with nothing to apply but routing — no
//! conntrack this burst, no ACL table on the port or on any output, no DNS policy, one
//! network without locked ports or source route tables ([`applies`]) — an IPv4 UDP or
//! TCP packet for the port's MAC that needs nothing but a route and a rewrite (no
//! options, no fragment, TTL left, not for Ferrule, from a pod as itself: [`plain`])
//! is checked on its fixed headers, looked up in one batch with the others and
//! rewritten to its resolved next hop, without the stages' per-packet headers and
//! lists: the fast path VPP takes with no feature on an interface's arc. Every other
//! packet of the burst — and a lane packet whose next hop needs more than a rewrite
//! (no route, a blackhole, an unresolved neighbour, too big for the output) — goes
//! through the stages as if the lane did not exist; the verdicts and rewritten bytes
//! are the stages' (the differential test below runs both over random bursts). A node
//! that masquerades (an SNAT policy) or has `reflect` rules has conntrack active and
//! never takes this lane: it is the route-only configuration's path. (A node that
//! masquerades and needs nothing else has its own, [`established`](super::established).)

use super::burst::Burst;
use super::l2::{routed_frame, PREFETCH_AHEAD};
use super::neighbor::rewrite_v4;
use super::{Action, Frames, Tracer};
use crate::acl::table::Direction;
use crate::snapshot::{NextHopEntry, PodSources, PortRole, PortState, Snapshot};
use crate::wire::{checksum, EthernetAddress, IpProtocol};
use std::net::Ipv4Addr;

/// Length of the headers the lane reads: Ethernet and an IPv4 header without options.
const HEADERS: usize = 14 + 20;

/// Where a lane packet's transport header starts.
pub(super) const L4_OFFSET: usize = HEADERS;

/// Whether the lane applies to burst `b`: nothing but routing to apply on its port and
/// outputs — no conntrack, no ACL table on the port or on any output — and a port the
/// lanes can take ([`lane_port`]).
#[inline(always)]
pub fn applies<F: Frames + ?Sized, T: Tracer>(b: &Burst<'_, F, T>) -> bool {
    b.ct.is_none()
        && !b.snap.acl.any_egress
        && b.snap.acl.attached(b.in_port, Direction::Ingress).is_none()
        && lane_port(b)
}

/// Whether burst `b` arrived where a lane can take its plain packets, ACLs and
/// conntrack aside: one network without locked ports or source route tables, no DNS
/// policy on the port, not a switched port. Traces always take the stages (they record
/// each stage's decision). The plain lane ([`applies`]) and the established-connection
/// lane ([`established`](super::established)) both ask it.
#[inline(always)]
pub(super) fn lane_port<F: Frames + ?Sized, T: Tracer>(b: &Burst<'_, F, T>) -> bool {
    let snap = b.snap;
    !T::ENABLED
        && snap.networks.len() == 1
        && !snap.any_locked
        && snap.source_routes.is_none()
        && usize::from(b.port.network) < snap.networks.len()
        && snap.switching.port(b.in_port).is_none()
        && snap
            .dns
            .as_deref()
            .is_none_or(|d| d.ports.get(usize::from(b.in_port)) != Some(&true))
}

/// The stage in place of [`l2::stage`](super::l2::stage) when the lane [`applies`]:
/// lane packets whose next hop is resolved get their verdict here; every other packet
/// is parsed and checked as the l2 stage does and listed in `s.ok` for the stages
/// after it. (`s.ok` is then not in burst order — the lane's packets that fall back
/// come last —, which no stage minds without conntrack: its commit goes in order.)
#[inline(always)]
pub fn stage<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let (snap, port, s) = (b.snap, b.port, &mut *b.s);
    let pod = port.role == PortRole::Pod;
    let lpm4 = &*snap.networks[usize::from(port.network)].lpm4;
    // The lane's packets by index, their destinations and next hops: the route
    // stage's arrays, free until it runs.
    let mut n_lane = 0usize;
    s.ct[..b.n].fill(super::ct::CtMark::None);
    s.snat[..b.n].fill(super::ct::SnatHint::None);
    s.reflect[..b.n].fill(false);
    let mut n_ok = 0usize;
    for i in 0..PREFETCH_AHEAD.min(b.n) {
        b.frames.prefetch(i);
    }
    for i in 0..b.n {
        b.frames.prefetch(i + PREFETCH_AHEAD);
        let frame = b.frames.frame_mut(i);
        if let Some(dst) = plain(port, pod, frame) {
            lpm4.prefetch(dst);
            s.pending4[n_lane] = i as u16;
            s.dst4[n_lane] = dst;
            n_lane += 1;
        } else if routed_frame(
            snap,
            port,
            pod,
            frame,
            &mut s.parsed[i],
            &mut b.actions[i],
            b.t,
        ) {
            s.ok[n_ok] = i as u16;
            n_ok += 1;
        }
    }
    lpm4.lookup_batch(&s.dst4[..n_lane], &mut s.nh4[..n_lane]);
    let hops = Hops::of(snap);
    for k in 0..n_lane {
        let i = usize::from(s.pending4[k]);
        let frame = b.frames.frame_mut(i);
        // The IP length, checked against the output's MTU (the frame may be padded).
        let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
        match hops.resolved(s.nh4[k], total) {
            Some((out, src, dst)) => {
                rewrite_v4(frame, 14, src, dst);
                b.actions[i] = Action::Forward { port: out };
            }
            // Anything else the next hop needs is the stages' to do: the packet goes
            // on as any other (it passes the l2 checks the lane made).
            None => {
                if routed_frame(
                    snap,
                    port,
                    pod,
                    frame,
                    &mut s.parsed[i],
                    &mut b.actions[i],
                    b.t,
                ) {
                    s.ok[n_ok] = i as u16;
                    n_ok += 1;
                }
            }
        }
    }
    b.n_ok = n_ok;
}

/// The destination of a frame that can take the lane on `port` (`pod`: a pod port):
/// [`headers`] valid, and not for one of the port's addresses.
#[inline(always)]
fn plain(port: &PortState, pod: bool, frame: &[u8]) -> Option<u32> {
    let h = headers(port, pod, frame)?;
    (!port.owns_v4(Ipv4Addr::from(h.dst))).then_some(h.dst)
}

/// The IPv4 addresses of a frame whose headers need nothing but a route and a rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PlainV4 {
    pub src: u32,
    pub dst: u32,
}

/// The addresses of an IPv4 UDP or TCP packet with valid headers (as the parse stage
/// checks them), for `port`'s MAC, no options, not a fragment, TTL above 1, and — from
/// a pod port (`pod`) — sent by the pod as itself. Its transport header starts at
/// [`L4_OFFSET`].
#[inline(always)]
pub(super) fn headers(port: &PortState, pod: bool, frame: &[u8]) -> Option<PlainV4> {
    let h: &[u8; HEADERS] = frame.first_chunk()?;
    if h[12..14] != [0x08, 0x00] || h[14] != 0x45 || h[..6] != port.mac.0 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
    // Flags and fragment offset: neither more fragments nor an offset (DF and the
    // reserved bit are left alone, as the parse stage leaves them).
    let fragment = u16::from_be_bytes([h[20], h[21]]) & 0x3fff != 0;
    if 14 + total > frame.len() || fragment || h[22] <= 1 {
        return None;
    }
    // The transport header as the parse stage checks it, within the IP payload.
    let payload = total.checked_sub(20)?;
    let l4_ok = match IpProtocol(h[23]) {
        IpProtocol::UDP => {
            let len = frame.get(38..40)?;
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            payload >= 8 && (8..=payload).contains(&len)
        }
        IpProtocol::TCP => {
            let header = usize::from(*frame.get(46)? >> 4) * 4;
            payload >= 20 && (20..=payload).contains(&header)
        }
        _ => false,
    };
    let ip: &[u8; 20] = h[14..].first_chunk()?;
    if !l4_ok || checksum::fold(checksum::sum(ip)) != 0xffff {
        return None;
    }
    let dst = u32::from_be_bytes([h[30], h[31], h[32], h[33]]);
    let src = u32::from_be_bytes([h[26], h[27], h[28], h[29]]);
    if pod {
        let sources = &port.pod_sources;
        if PodSources::mac_of(frame) != Some(sources.mac) || !sources.allows_v4(src) {
            return None;
        }
    }
    Some(PlainV4 { src, dst })
}

/// The snapshot's next hops as the lanes read them (loaded once per burst).
pub(super) struct Hops<'a> {
    entries: &'a [NextHopEntry],
    macs: &'a [Option<EthernetAddress>],
    ports: &'a [PortState],
}

impl<'a> Hops<'a> {
    /// The next hops of `snap`.
    #[inline(always)]
    pub(super) fn of(snap: &'a Snapshot) -> Self {
        Hops {
            entries: &snap.next_hops,
            macs: &snap.nh_mac,
            ports: &snap.ports,
        }
    }

    /// Where next hop `nh` sends a lane packet of `ip_len` bytes of IP, when it is a
    /// port whose MTU the packet fits and the MAC to send to is known: `(output port,
    /// source MAC, destination MAC)`.
    #[inline(always)]
    pub(super) fn resolved(
        &self,
        nh: u32,
        ip_len: usize,
    ) -> Option<(u16, EthernetAddress, EthernetAddress)> {
        let Some(&NextHopEntry::Port { port: out, via }) = self.entries.get(nh as usize) else {
            return None;
        };
        let output = self.ports.get(usize::from(out))?;
        if ip_len > usize::from(output.mtu) {
            return None;
        }
        let mac = match self.macs.get(nh as usize) {
            Some(&Some(mac)) => mac,
            _ if output.role == PortRole::Pod && via.is_none() => output.pod_mac?,
            _ => return None,
        };
        Some((out, output.mac, mac))
    }
}

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{self, GW_MAC, POD, POD_MAC, UPLINK, UPLINK_MAC};
    use super::super::{process_burst, NoTrace, Recorder, Scratch};
    use super::*;
    use crate::acl::rule::Action as RuleAction;
    use crate::acl::table::{AclTables, Table};
    use crate::acl::Rule;
    use crate::counters::{DropReason, MAX_PORTS};
    use crate::lpm;
    use crate::snapshot::DnsIntercept;
    use crate::snapshot::Snapshot;
    use rand::prelude::*;
    use std::net::IpAddr;
    use std::sync::Arc;

    /// A random frame as pods and uplinks send them (mostly to the input port's MAC,
    /// `port_mac`): mostly plain UDP and TCP to
    /// routed, blackholed, unresolved, local and pod destinations, with expiring TTLs,
    /// other MACs and sources, ICMP, options, fragments, ARP and IPv6, oversize
    /// packets, padding, truncation and corrupted bytes.
    fn frame(rng: &mut StdRng, port_mac: [u8; 6]) -> Vec<u8> {
        const DSTS: [[u8; 4]; 8] = [
            [8, 8, 8, 8],
            [10, 1, 0, 2],
            [10, 1, 0, 7],
            [203, 0, 113, 5],
            [169, 254, 1, 1],
            [192, 0, 2, 10],
            [192, 0, 2, 77],
            [192, 0, 2, 1],
        ];
        let dst = Ipv4Addr::from(DSTS[rng.gen_range(0..DSTS.len())]);
        let dst_mac = if rng.gen_bool(0.6) {
            port_mac
        } else {
            *[GW_MAC, UPLINK_MAC, [0xff; 6], [2, 0, 0, 0, 0, 9]]
                .choose(rng)
                .expect("macs")
        };
        let src_mac = if rng.gen_bool(0.9) {
            POD_MAC
        } else {
            [2, 0, 0, 0, 7, 7]
        };
        let src = if rng.gen_bool(0.9) {
            Ipv4Addr::new(10, 1, 0, 2)
        } else {
            Ipv4Addr::new(10, 9, 9, 9)
        };
        let payload = *[0usize, 10, 18, 1300, 1372, 1373, 1400]
            .choose(rng)
            .expect("sizes");
        let mut f = match rng.gen_range(0..10) {
            0..=3 => testing::udp4(dst_mac, dst.octets(), 64, payload),
            4..=6 => testing::tcp4(src_mac, dst_mac, src, dst, 40000, 443, 0x10, 1, 2),
            7 => {
                let echo = [8, 0, 0xf7, 0xff, 0, 0, 0, 0];
                testing::ipv4(src_mac, dst_mac, src, dst, 1, &echo)
            }
            8 => {
                let mut f = testing::udp4(dst_mac, dst.octets(), 64, 4);
                f[12..14].copy_from_slice(&[0x08, 0x06]);
                f
            }
            _ => {
                let mut f = testing::udp4(dst_mac, dst.octets(), 64, 20);
                f[12..14].copy_from_slice(&[0x86, 0xdd]);
                f
            }
        };
        f[6..12].copy_from_slice(&src_mac);
        let ip = |f: &mut Vec<u8>| {
            f[24..26].fill(0);
            let c = !checksum::data(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
        };
        if f.len() >= 34 && f[12..14] == [0x08, 0x00] {
            f[26..30].copy_from_slice(&src.octets());
            match rng.gen_range(0..12) {
                0 => f[22] = rng.gen_range(0..3),
                1 => f[20] |= 0x20,
                2 => f[21] = 1,
                3 => f[20] &= !0x40,
                _ => {}
            }
            ip(&mut f);
        }
        match rng.gen_range(0..17) {
            0 => f.extend_from_slice(&[0; 12]),
            // Lengths near their limits: IP total length, UDP length, TCP data offset.
            14 if f.len() >= 34 => {
                let total = u16::from_be_bytes([f[16], f[17]]);
                let total = total.wrapping_add(rng.gen_range(0..4)).wrapping_sub(2);
                f[16..18].copy_from_slice(&total.to_be_bytes());
                ip(&mut f);
            }
            15 if f.len() >= 40 => {
                let len = u16::from_be_bytes([f[38], f[39]]);
                let len = len.wrapping_add(rng.gen_range(0..4)).wrapping_sub(2);
                f[38..40].copy_from_slice(&len.to_be_bytes());
            }
            16 if f.len() >= 47 => f[46] = rng.gen_range(0..16) << 4,
            1 => {
                let at = rng.gen_range(0..f.len());
                f.truncate(at);
            }
            2 | 3 => {
                let at = rng.gen_range(0..f.len().min(60));
                f[at] = rng.gen();
            }
            4 => {
                // A field changed and the header checksum made valid again.
                let at = rng.gen_range(14..f.len().min(60));
                f[at] = rng.gen();
                if f.len() >= 34 {
                    ip(&mut f);
                }
            }
            _ => {}
        }
        f
    }

    /// Random bursts through the lane and through the stages alone (a tracer turns the
    /// lane off) give the same verdicts and the same bytes.
    #[test]
    fn the_lane_gives_the_stages_verdicts_and_bytes() {
        let snap = testing::on_link_snapshot();
        let mut rng = StdRng::seed_from_u64(0xfa57);
        let mut scratch = Box::<Scratch>::default();
        let (mut laned, mut packets) = (0usize, 0usize);
        for case in 0..3000 {
            let port = if case % 2 == 0 { POD } else { UPLINK };
            let n = rng.gen_range(1..=40);
            packets += n;
            let mac = snap.ports[usize::from(port)].mac.0;
            let mut fast: Vec<Vec<u8>> = (0..n).map(|_| frame(&mut rng, mac)).collect();
            let mut staged = fast.clone();
            let p = &snap.ports[usize::from(port)];
            laned += fast
                .iter()
                .filter(|f| plain(p, p.role == PortRole::Pod, f).is_some())
                .count();
            let mut a = vec![Action::Drop(DropReason::Malformed); n];
            let mut b = a.clone();
            process_burst(
                &snap,
                port,
                fast.as_mut_slice(),
                &mut a,
                &mut scratch,
                None,
                &mut NoTrace,
            );
            let mut rec = Recorder::default();
            process_burst(
                &snap,
                port,
                staged.as_mut_slice(),
                &mut b,
                &mut scratch,
                None,
                &mut rec,
            );
            assert_eq!(a, b, "case {case} on port {port}");
            assert_eq!(fast, staged, "case {case} on port {port}");
        }
        assert!(
            laned * 5 > packets,
            "the bursts exercise the lane: {laned} of {packets} packets"
        );
    }

    #[test]
    fn takes_plain_packets_and_leaves_the_rest() {
        let snap = testing::on_link_snapshot();
        let port = &snap.ports[usize::from(POD)];
        let plain_udp = testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10);
        assert_eq!(plain(port, true, &plain_udp), Some(0x0808_0808));
        let mut expiring = testing::udp4(GW_MAC, [8, 8, 8, 8], 1, 10);
        assert_eq!(plain(port, true, &expiring), None);
        expiring[22] = 64;
        assert_eq!(
            plain(port, true, &expiring),
            None,
            "its checksum is now wrong"
        );
        let local = testing::udp4(GW_MAC, [169, 254, 1, 1], 64, 10);
        assert_eq!(plain(port, true, &local), None);
        let spoofed = testing::tcp4(
            POD_MAC,
            GW_MAC,
            Ipv4Addr::new(10, 9, 9, 9),
            Ipv4Addr::new(8, 8, 8, 8),
            1,
            2,
            0x02,
            0,
            0,
        );
        assert_eq!(plain(port, true, &spoofed), None);
        assert!(
            plain(port, false, &spoofed).is_some(),
            "from a host port it is plain"
        );
        let echo = testing::ipv4(
            POD_MAC,
            GW_MAC,
            Ipv4Addr::new(10, 1, 0, 2),
            Ipv4Addr::new(8, 8, 8, 8),
            1,
            &[8, 0, 0xf7, 0xff, 0, 0, 0, 0],
        );
        assert_eq!(plain(port, true, &echo), None, "ICMP takes the stages");
        // A resolved gateway, the pod on-link, a blackhole, an unresolved neighbour.
        let hops = Hops {
            entries: &snap.next_hops,
            macs: &snap.nh_mac,
            ports: &snap.ports,
        };
        assert_eq!(
            hops.resolved(1, 100),
            Some((
                UPLINK,
                EthernetAddress(UPLINK_MAC),
                EthernetAddress(testing::ROUTER_MAC)
            ))
        );
        assert_eq!(
            hops.resolved(0, 100),
            Some((POD, EthernetAddress(GW_MAC), EthernetAddress(POD_MAC)))
        );
        assert_eq!(hops.resolved(1, 1401), None, "over the uplink's MTU");
        assert_eq!(hops.resolved(2, 100), None);
        assert_eq!(hops.resolved(3, 100), None);
        assert_eq!(hops.resolved(lpm::NO_ROUTE, 100), None);
    }

    #[test]
    fn applies_only_with_nothing_but_routing() {
        let check = |snap: &Snapshot| {
            let mut frames = vec![testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10)];
            testing::with_burst(snap, &mut frames, |b| applies(b)).0
        };
        let mut snap = testing::on_link_snapshot();
        assert!(check(&snap));
        snap.dns = Some(Arc::new(DnsIntercept {
            ports: vec![true, false],
            servers: vec![IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10))],
        }));
        assert!(!check(&snap), "DNS policy on the port");
        snap.dns = None;
        snap.any_locked = true;
        assert!(!check(&snap), "a locked port");
        snap.any_locked = false;
        snap.source_routes = Some(Default::default());
        assert!(!check(&snap), "source route tables");
        snap.source_routes = None;
        let mut two = snap.clone();
        two.networks.push(two.networks[0].clone());
        assert!(!check(&two), "two networks");
        let table = |rules| {
            let t = Table::compile("t".into(), rules, vec![0], 1).expect("compile");
            vec![Arc::new(t)]
        };
        // One permit-all table, attached on input to `ingress` and on output to `egress`.
        let attached = |ingress: Option<u16>, egress: Option<u16>| {
            let (mut on_input, mut on_output) = ([None; MAX_PORTS], [None; MAX_PORTS]);
            if let Some(port) = ingress {
                on_input[usize::from(port)] = Some(0);
            }
            if let Some(port) = egress {
                on_output[usize::from(port)] = Some(0);
            }
            let permit = vec![Rule::any(RuleAction::Permit)];
            Arc::new(AclTables::new(table(permit), on_input, on_output, None, 1))
        };
        snap.acl = attached(Some(POD), None);
        assert!(!check(&snap), "an ingress table on the port");
        snap.acl = attached(None, Some(UPLINK));
        assert!(!check(&snap), "an egress table on an output");
        snap.acl = attached(None, None);
        assert!(check(&snap), "a table attached nowhere");
        // A tracer takes the stages.
        let mut frames = vec![testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10)];
        let mut actions = vec![Action::Drop(DropReason::Malformed)];
        let mut s = Box::<Scratch>::default();
        let mut rec = Recorder::default();
        let b = Burst::new(
            &snap,
            POD,
            frames.as_mut_slice(),
            &mut actions,
            &mut s,
            None,
            &mut rec,
        )
        .expect("the port exists");
        assert!(!applies(&b), "tracing");
    }

    /// With conntrack active (an SNAT policy) the lane is off.
    #[test]
    fn conntrack_takes_the_stages() {
        let snap = testing::udn_snapshot();
        let cfg = crate::conntrack::CtConfig {
            max_entries: 1024,
            max_per_zone: 1024,
            ..Default::default()
        };
        let mut ct =
            crate::conntrack::Conntrack::new_in(&cfg, 0, 1, true, &crate::conntrack::NoAdvice);
        let mut frames = vec![testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10)];
        let mut actions = vec![Action::Drop(DropReason::Malformed)];
        let mut s = Box::<Scratch>::default();
        let mut t = NoTrace;
        let b = Burst::new(
            &snap,
            POD,
            frames.as_mut_slice(),
            &mut actions,
            &mut s,
            Some(&mut ct),
            &mut t,
        )
        .expect("the port exists");
        assert!(b.ct.is_some(), "SNAT makes conntrack active");
        assert!(!applies(&b));
    }
}
