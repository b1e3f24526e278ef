//! Port security on pod ports, in the l2 stage: a pod may send only as itself — from
//! its MAC (`pod_mac`), from its addresses (its pod IPs and `allowed_addresses`; for
//! IPv6 also a link-local address, to the link only), and ARP and neighbour discovery
//! only about itself. Everything else is dropped as `spoofed-src-mac`,
//! `spoofed-src-ip`, `spoofed-arp` or `spoofed-nd`. Uplink and host ports are not
//! checked.
//!
//! What is accepted, in order (the first failing check names the drop):
//!
//! 1. The Ethernet source is the pod's MAC. A pod port without `pod_mac` accepts none.
//! 2. ARP: the sender hardware address is the pod's MAC and the sender IP one the pod
//!    may send from, or 0.0.0.0 in a request (an RFC 5227 probe).
//! 3. IPv4: the source is one of the pod's addresses ([`PodSources`]).
//! 4. IPv6: the source is one of the pod's addresses; or a link-local address
//!    (fe80::/64, any interface ID: pods may use RFC 7217 or random ones, not only
//!    EUI-64; not one of Ferrule's own) to a link-local or multicast destination —
//!    Ferrule never forwards such a packet, and a router must not forward a link-local
//!    source; or the unspecified address `::` in ICMPv6 to a multicast destination
//!    (duplicate address detection, MLD reports and router solicitations of a pod that
//!    has no address yet).
//! 5. Neighbour discovery: a source link-layer address option (NS) or target
//!    link-layer address option (NA) carries the pod's MAC; an NA advertises, and a
//!    duplicate address detection NS probes, an address the pod may send from (its
//!    addresses or link-local, never one of Ferrule's own); a DAD NS carries no source
//!    link-layer option (RFC 4861 7.1.1).
//!
//! The l2 stage runs [`check`] on every IP packet a pod port receives, in its pass over
//! the burst, right after parsing it and accepting its destination MAC, and
//! [`check_arp`] on ARP before it answers it: nothing a pod spoofs is answered,
//! tracked, masqueraded or routed. The cost on the fast path is one compare of the
//! source MAC and one of the source address with the pod's first prefix (more only
//! when the pod has more, or the packet is not from its first address). A pass of its
//! own after l2 cost 14% more instructions per routed packet (`perf/RESULTS.md`, issue
//! 18).

use super::{trace, Parsed, Stage, Tracer};
use crate::counters::DropReason;
use crate::snapshot::{PodSources, PortState};
use crate::wire::{
    icmpv6::ndp_option, ArpOperation, ArpPacket, EtherType, EthernetAddress, EthernetFrame,
    Icmpv6Message, Icmpv6Packet, IpProtocol,
};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Whether a frame received on pod port `port` comes from its pod: `Err` names the
/// drop. `parsed` is what the parse stage found in `frame`. The l2 stage calls it for
/// every IP packet of a pod port that passed the destination check, once it has
/// stored `parsed` ([`check_arp`] for ARP, before answering it).
///
/// The common case stays inline and small: the MAC compare, then the IPv4 or IPv6
/// source against the pod's addresses; ARP, neighbour discovery, link-local and
/// unspecified sources and every refusal are out of line.
#[inline(always)]
pub fn check<T: Tracer>(
    port: &PortState,
    parsed: &Parsed,
    frame: &[u8],
    t: &mut T,
) -> Result<(), DropReason> {
    let sources = &port.pod_sources;
    if PodSources::mac_of(frame) != Some(sources.mac) {
        return Err(spoofed_mac(port, frame, t));
    }
    if parsed.ethertype == EtherType::IPV4 {
        let src = parsed.key.src_v4();
        if sources.allows_v4(src) {
            trace!(
                t,
                Stage::PortSecurity,
                "source {} from {} is {}'s",
                Ipv4Addr::from(src),
                EthernetFrame::new_unchecked(frame).src_addr(),
                port.name
            );
            return Ok(());
        }
        return Err(spoofed_v4(port, src, t));
    }
    if parsed.is_ipv6() {
        let src = u128::from_be_bytes(parsed.key.src);
        // ICMPv6 goes out of line (neighbour discovery is checked there).
        let icmp_l4 = if parsed.key.proto == IpProtocol::ICMPV6.0 {
            parsed.l4_offset
        } else {
            0
        };
        if icmp_l4 == 0 && sources.allows_v6(src) {
            trace!(
                t,
                Stage::PortSecurity,
                "source {} is {}'s",
                Ipv6Addr::from(src),
                port.name
            );
            return Ok(());
        }
        let l3 = parsed.l3_offset;
        return ipv6(port, frame, l3, icmp_l4, l3 + parsed.l3_len, t);
    }
    check_arp(port, frame, t)
}

/// `N` bytes of `frame` from `at`.
#[inline(always)]
fn bytes<const N: usize>(frame: &[u8], at: usize) -> Option<[u8; N]> {
    frame.get(at..at + N).and_then(|b| b.try_into().ok())
}

#[cold]
#[inline(never)]
fn spoofed_mac<T: Tracer>(port: &PortState, frame: &[u8], t: &mut T) -> DropReason {
    let Some(src_mac) = frame.get(6..12).and_then(EthernetAddress::from_bytes) else {
        return DropReason::Malformed;
    };
    match port.pod_mac {
        Some(pod) => trace!(
            t,
            Stage::PortSecurity,
            "source MAC {} is not {}'s ({})",
            src_mac,
            port.name,
            pod
        ),
        None => trace!(
            t,
            Stage::PortSecurity,
            "{} has no pod_mac: source MAC {} is not accepted",
            port.name,
            src_mac
        ),
    }
    DropReason::SpoofedSrcMac
}

#[cold]
#[inline(never)]
fn spoofed_v4<T: Tracer>(port: &PortState, src: u32, t: &mut T) -> DropReason {
    trace!(
        t,
        Stage::PortSecurity,
        "source {} is not an address of {} (pod IPs, allowed addresses)",
        Ipv4Addr::from(src),
        port.name
    );
    DropReason::SpoofedSrcIp
}

/// [`check`] of an ARP frame (the l2 stage checks ARP before it answers it): from the
/// pod's MAC, about the pod only.
#[inline(never)]
pub fn check_arp<T: Tracer>(port: &PortState, frame: &[u8], t: &mut T) -> Result<(), DropReason> {
    if PodSources::mac_of(frame) != Some(port.pod_sources.mac) {
        return Err(spoofed_mac(port, frame, t));
    }
    let Some(arp) = frame
        .get(14..)
        .and_then(|l3| ArpPacket::new_checked(l3).ok())
    else {
        return Err(DropReason::Malformed);
    };
    if !arp.is_ethernet_ipv4() {
        // Not about an Ethernet/IPv4 pair: the local stage drops it as malformed.
        return Ok(());
    }
    let (sender_ip, sender_mac) = (arp.source_protocol_addr(), arp.source_hardware_addr());
    let probe = sender_ip.is_unspecified() && arp.operation() == ArpOperation::Request;
    if !port.pod_sources.is_mac(sender_mac) {
        trace!(
            t,
            Stage::PortSecurity,
            "arp sender {} is-at {}: not {}'s MAC",
            sender_ip,
            sender_mac,
            port.name
        );
        return Err(DropReason::SpoofedArp);
    }
    if !probe && !port.pod_sources.allows_v4(u32::from(sender_ip)) {
        trace!(
            t,
            Stage::PortSecurity,
            "arp sender {} is not an address of {}",
            sender_ip,
            port.name
        );
        return Err(DropReason::SpoofedArp);
    }
    trace!(
        t,
        Stage::PortSecurity,
        "arp sender {} is-at {} is {}",
        sender_ip,
        sender_mac,
        port.name
    );
    Ok(())
}

/// fe80::/64, the link-local addresses a pod uses (RFC 4291 2.5.6).
#[inline]
fn is_link_local(a: u128) -> bool {
    a >> 64 == 0xfe80_0000_0000_0000
}

#[inline]
fn is_multicast(a: u128) -> bool {
    a >> 120 == 0xff
}

/// The rest of IPv6 from the pod, out of line: a source that is not one of the pod's
/// addresses (link-local, unspecified, spoofed), and neighbour discovery. The addresses
/// are read from the frame's IPv6 header at `l3`; an ICMPv6 header, if the packet has
/// one, is at `icmp_l4` (0: none); the packet ends at `end`.
#[inline(never)]
fn ipv6<T: Tracer>(
    port: &PortState,
    frame: &[u8],
    l3: usize,
    icmp_l4: usize,
    end: usize,
    t: &mut T,
) -> Result<(), DropReason> {
    let addr = |at: usize| bytes::<16>(frame, l3 + at).map(u128::from_be_bytes);
    let (Some(src), Some(dst)) = (addr(8), addr(24)) else {
        return Err(DropReason::Malformed);
    };
    let icmp = frame
        .get(icmp_l4)
        .filter(|_| icmp_l4 != 0)
        .map(|&m| Icmpv6Message(m));
    let sources = &port.pod_sources;
    if sources.allows_v6(src) {
        trace!(
            t,
            Stage::PortSecurity,
            "source {} is {}'s",
            Ipv6Addr::from(src),
            port.name
        );
    } else if is_link_local(src) && !port.owns_v6(Ipv6Addr::from(src)) {
        if !is_link_local(dst) && !is_multicast(dst) {
            trace!(
                t,
                Stage::PortSecurity,
                "link-local source {} may reach the link only, not {}",
                Ipv6Addr::from(src),
                Ipv6Addr::from(dst)
            );
            return Err(DropReason::SpoofedSrcIp);
        }
        trace!(
            t,
            Stage::PortSecurity,
            "link-local source {} to {} on the link",
            Ipv6Addr::from(src),
            Ipv6Addr::from(dst)
        );
    } else if src == 0 && icmp.is_some() && is_multicast(dst) {
        trace!(
            t,
            Stage::PortSecurity,
            "unspecified source to {} (an address being configured)",
            Ipv6Addr::from(dst)
        );
    } else {
        trace!(
            t,
            Stage::PortSecurity,
            "source {} is not an address of {} (pod IPs, allowed addresses, link-local)",
            Ipv6Addr::from(src),
            port.name
        );
        return Err(DropReason::SpoofedSrcIp);
    }
    match icmp {
        Some(m @ (Icmpv6Message::NEIGHBOR_SOLICIT | Icmpv6Message::NEIGHBOR_ADVERT)) => {
            neighbor_discovery(port, frame, icmp_l4, end, m, src == 0, t)
        }
        _ => Ok(()),
    }
}

/// A neighbour solicitation or advertisement from the pod: its link-layer address
/// options carry the pod's MAC; an NA (or a DAD NS) is about one of the pod's addresses.
fn neighbor_discovery<T: Tracer>(
    port: &PortState,
    frame: &[u8],
    l4: usize,
    end: usize,
    msg: Icmpv6Message,
    unspecified_src: bool,
    t: &mut T,
) -> Result<(), DropReason> {
    let end = end.min(frame.len());
    let Some(Ok(icmp)) = frame.get(l4..end).map(Icmpv6Packet::new_checked) else {
        return Err(DropReason::Malformed);
    };
    let advert = msg == Icmpv6Message::NEIGHBOR_ADVERT;
    let what = if advert {
        "neighbour advertisement"
    } else {
        "neighbour solicitation"
    };
    let target = icmp.target_addr();
    // The target an NA advertises, or a DAD NS probes, is the pod's.
    if advert || unspecified_src {
        let tgt = u128::from(target);
        if (!port.pod_sources.allows_v6(tgt) && !is_link_local(tgt)) || port.owns_v6(target) {
            trace!(
                t,
                Stage::PortSecurity,
                "{} for {}: not an address of {}",
                what,
                target,
                port.name
            );
            return Err(DropReason::SpoofedNd);
        }
    }
    for option in icmp.ndp_options() {
        let Ok(option) = option else {
            trace!(t, Stage::PortSecurity, "{} with a malformed option", what);
            return Err(DropReason::Malformed);
        };
        let expected = if advert {
            ndp_option::TARGET_LL_ADDR
        } else {
            ndp_option::SOURCE_LL_ADDR
        };
        if option.option_type != expected {
            continue;
        }
        if unspecified_src {
            trace!(
                t,
                Stage::PortSecurity,
                "{} from :: with a link-layer address option (RFC 4861 7.1.1)",
                what
            );
            return Err(DropReason::SpoofedNd);
        }
        let mac = option.link_layer_addr();
        if !mac.is_some_and(|m| port.pod_sources.is_mac(m)) {
            trace!(
                t,
                Stage::PortSecurity,
                "{} for {} with link-layer address {}: not {}'s MAC",
                what,
                target,
                mac.map_or_else(|| "(not Ethernet)".to_string(), |m| m.to_string()),
                port.name
            );
            return Err(DropReason::SpoofedNd);
        }
    }
    trace!(
        t,
        Stage::PortSecurity,
        "{} for {} is consistent with {}",
        what,
        target,
        port.name
    );
    Ok(())
}

/// [`PodSources`] of a pod at `mac`, for the tests of this stage and the pipeline's.
#[cfg(test)]
pub(crate) fn sources(mac: Option<[u8; 6]>, ips: &[&str], allowed: &[&str]) -> PodSources {
    let ips: Vec<std::net::IpAddr> = ips.iter().map(|s| s.parse().expect("ip")).collect();
    let allowed: Vec<crate::wire::IpCidr> = allowed
        .iter()
        .map(|s| {
            let (a, l) = s.split_once('/').expect("prefix");
            crate::wire::IpCidr::new(a.parse().expect("ip"), l.parse().expect("len"))
                .expect("prefix")
        })
        .collect();
    PodSources::new(mac.map(EthernetAddress), &ips, &allowed)
}

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{self, GW_MAC, POD, POD_MAC, UPLINK, UPLINK_MAC};
    use super::super::burst::Burst;
    use super::super::{l2, parse, Action, NoTrace, Recorder, Scratch};
    use super::*;
    use crate::snapshot::Snapshot;
    use crate::wire::checksum;

    const OTHER_MAC: [u8; 6] = [2, 0, 0, 0, 0x66, 0x66];
    const ALL_NODES_MAC: [u8; 6] = [0x33, 0x33, 0, 0, 0, 1];

    /// The stages' test snapshot; the pod (10.1.0.2 and fd00:1::2 at `POD_MAC`) sees
    /// the gateways 169.254.1.1 and fe80::1.
    fn snapshot() -> Snapshot {
        let mut snap = testing::snapshot();
        snap.ports[0].pod_sources = sources(Some(POD_MAC), &["10.1.0.2", "fd00:1::2"], &[]);
        snap.ports[0].local_v6 = vec!["fe80::1".parse().expect("v6")];
        snap
    }

    /// `check` of `frame` on port `port`, and what it traced.
    fn verdict(snap: &Snapshot, port: u16, frame: &[u8]) -> (Result<(), DropReason>, String) {
        let parsed = parse(frame, 0).expect("parses");
        let mut rec = Recorder::default();
        let r = check(&snap.ports[usize::from(port)], &parsed, frame, &mut rec);
        let text = rec
            .stages
            .iter()
            .map(|(s, d)| format!("{} {d}", s.name()))
            .collect::<Vec<_>>()
            .join("; ");
        (r, text)
    }

    /// UDP from `src_mac` and `src` to 8.8.8.8 through the gateway.
    fn udp4(src_mac: [u8; 6], src: [u8; 4]) -> Vec<u8> {
        let mut f = testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10);
        f[6..12].copy_from_slice(&src_mac);
        f[26..30].copy_from_slice(&src);
        f[24..26].fill(0);
        let c = !checksum::data(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f
    }

    /// An ARP request or reply (`op` 1 or 2) broadcast from `eth_src`.
    fn arp(
        op: u8,
        eth_src: [u8; 6],
        sender_mac: [u8; 6],
        sender: [u8; 4],
        target: [u8; 4],
    ) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&[0xff; 6]);
        f.extend_from_slice(&eth_src);
        f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, op]);
        f.extend_from_slice(&sender_mac);
        f.extend_from_slice(&sender);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&target);
        f.resize(60, 0);
        f
    }

    /// An IPv6 packet (hop limit 255) from `POD_MAC` to `dst_mac` carrying `l4` as
    /// protocol `next`; an ICMPv6 message gets its checksum.
    fn ipv6(dst_mac: [u8; 6], src: &str, dst: &str, next: u8, l4: &[u8]) -> Vec<u8> {
        let (s, d): (Ipv6Addr, Ipv6Addr) = (src.parse().expect("src"), dst.parse().expect("dst"));
        let mut f = Vec::new();
        f.extend_from_slice(&dst_mac);
        f.extend_from_slice(&POD_MAC);
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        f.extend_from_slice(&[next, 255]);
        f.extend_from_slice(&s.octets());
        f.extend_from_slice(&d.octets());
        let at = f.len();
        f.extend_from_slice(l4);
        if next == IpProtocol::ICMPV6.0 {
            let ph = checksum::pseudo_header_v6(s, d, IpProtocol::ICMPV6, l4.len() as u32);
            let c = !checksum::combine(&[ph, checksum::data(&f[at..])]);
            f[at + 2..at + 4].copy_from_slice(&c.to_be_bytes());
        }
        f
    }

    fn udp6(src: &str, dst: &str) -> Vec<u8> {
        ipv6(GW_MAC, src, dst, 17, &[0x13, 0x88, 0, 53, 0, 8, 0, 0])
    }

    /// A neighbour solicitation (135) or advertisement (136) for `target`, with a
    /// link-layer address option carrying `lla` (source for an NS, target for an NA).
    fn nd(msg: u8, target: &str, lla: Option<[u8; 6]>) -> Vec<u8> {
        let target: Ipv6Addr = target.parse().expect("target");
        let flags = if msg == 136 { 0x60 } else { 0 };
        let mut m = vec![msg, 0, 0, 0, flags, 0, 0, 0];
        m.extend_from_slice(&target.octets());
        if let Some(mac) = lla {
            m.extend_from_slice(&[if msg == 136 { 2 } else { 1 }, 1]);
            m.extend_from_slice(&mac);
        }
        m
    }

    #[test]
    fn the_pods_own_traffic_passes() {
        let snap = snapshot();
        let (r, text) = verdict(&snap, POD, &udp4(POD_MAC, [10, 1, 0, 2]));
        assert_eq!(r, Ok(()));
        assert_eq!(
            text,
            "port-security source 10.1.0.2 from 02:00:00:00:01:02 is pod's"
        );
        let (r, _) = verdict(&snap, POD, &udp6("fd00:1::2", "2001:db8::1"));
        assert_eq!(r, Ok(()));
    }

    #[test]
    fn spoofed_ipv4_sources_are_dropped() {
        let snap = snapshot();
        // The finding: a pod sending from 32 addresses 198.51.x.2.
        for x in 0..32u8 {
            let (r, _) = verdict(&snap, POD, &udp4(POD_MAC, [198, 51, x, 2]));
            assert_eq!(r, Err(DropReason::SpoofedSrcIp), "198.51.{x}.2");
        }
        let (r, text) = verdict(&snap, POD, &udp4(POD_MAC, [10, 1, 0, 3]));
        assert_eq!(r, Err(DropReason::SpoofedSrcIp));
        assert!(text.contains("10.1.0.3 is not an address of pod"), "{text}");
        // Ferrule's own gateway address is not the pod's either.
        let (r, _) = verdict(&snap, POD, &udp4(POD_MAC, [169, 254, 1, 1]));
        assert_eq!(r, Err(DropReason::SpoofedSrcIp));
    }

    #[test]
    fn spoofed_source_macs_are_dropped() {
        let mut snap = snapshot();
        let (r, text) = verdict(&snap, POD, &udp4(OTHER_MAC, [10, 1, 0, 2]));
        assert_eq!(r, Err(DropReason::SpoofedSrcMac));
        assert!(
            text.contains("02:00:00:00:66:66 is not pod's (02:00:00:00:01:02)"),
            "{text}"
        );
        let mut f = udp6("fd00:1::2", "2001:db8::1");
        f[6..12].copy_from_slice(&OTHER_MAC);
        assert_eq!(verdict(&snap, POD, &f).0, Err(DropReason::SpoofedSrcMac));
        let f = arp(1, OTHER_MAC, OTHER_MAC, [10, 1, 0, 2], [169, 254, 1, 1]);
        assert_eq!(verdict(&snap, POD, &f).0, Err(DropReason::SpoofedSrcMac));
        // A pod port without pod_mac takes no source MAC.
        snap.ports[0].pod_mac = None;
        snap.ports[0].pod_sources = sources(None, &["10.1.0.2"], &[]);
        let (r, text) = verdict(&snap, POD, &udp4(POD_MAC, [10, 1, 0, 2]));
        assert_eq!(r, Err(DropReason::SpoofedSrcMac));
        assert!(text.contains("no pod_mac"), "{text}");
    }

    #[test]
    fn arp_only_about_the_pod() {
        let snap = snapshot();
        let gw = [169, 254, 1, 1];
        let ok = |f: Vec<u8>| verdict(&snap, POD, &f).0;
        assert_eq!(ok(arp(1, POD_MAC, POD_MAC, [10, 1, 0, 2], gw)), Ok(()));
        assert_eq!(ok(arp(2, POD_MAC, POD_MAC, [10, 1, 0, 2], gw)), Ok(()));
        // An RFC 5227 probe (sender 0.0.0.0) asks; it cannot answer.
        assert_eq!(ok(arp(1, POD_MAC, POD_MAC, [0; 4], [10, 1, 0, 2])), Ok(()));
        assert_eq!(
            ok(arp(2, POD_MAC, POD_MAC, [0; 4], gw)),
            Err(DropReason::SpoofedArp)
        );
        // Another sender IP (another pod's, the gateway's) or sender MAC.
        for sender in [[10, 1, 0, 3], gw, [198, 51, 100, 2]] {
            assert_eq!(
                ok(arp(1, POD_MAC, POD_MAC, sender, gw)),
                Err(DropReason::SpoofedArp),
                "{sender:?}"
            );
            assert_eq!(
                ok(arp(2, POD_MAC, POD_MAC, sender, sender)),
                Err(DropReason::SpoofedArp),
                "gratuitous {sender:?}"
            );
        }
        let (r, text) = verdict(&snap, POD, &arp(1, POD_MAC, OTHER_MAC, [10, 1, 0, 2], gw));
        assert_eq!(r, Err(DropReason::SpoofedArp));
        assert!(text.contains("not pod's MAC"), "{text}");
    }

    #[test]
    fn l2_answers_the_pods_arp_and_drops_spoofed_arp() {
        let snap = snapshot();
        let gw = [169, 254, 1, 1];
        let mut frames = vec![
            arp(1, POD_MAC, POD_MAC, [10, 1, 0, 2], gw),
            arp(1, POD_MAC, POD_MAC, [10, 1, 0, 9], gw),
            arp(1, POD_MAC, OTHER_MAC, [10, 1, 0, 2], gw),
        ];
        let (_, actions) = testing::with_burst(&snap, &mut frames, l2::stage);
        assert_eq!(
            actions,
            [
                Action::Reply,
                Action::Drop(DropReason::SpoofedArp),
                Action::Drop(DropReason::SpoofedArp)
            ]
        );
        assert_eq!(&frames[0][38..42], &[10, 1, 0, 2], "answered to the pod");
        assert_eq!(
            &frames[1][38..42],
            &gw,
            "a dropped frame is left as it came"
        );
    }

    #[test]
    fn ipv6_sources() {
        let snap = snapshot();
        let v = |f: Vec<u8>| verdict(&snap, POD, &f);
        assert_eq!(
            v(udp6("fd00:1::9", "2001:db8::1")).0,
            Err(DropReason::SpoofedSrcIp)
        );
        assert_eq!(
            v(udp6("fd00:1::3", "fd00:1::2")).0,
            Err(DropReason::SpoofedSrcIp)
        );
        // Link-local sources (any interface ID, EUI-64 or not) reach the link only.
        let echo = [128, 0, 0, 0, 0, 1, 0, 1];
        for src in ["fe80::ff:fe00:102", "fe80::1234:5678:9abc:def0"] {
            assert_eq!(
                v(ipv6(GW_MAC, src, "fe80::1", 58, &echo)).0,
                Ok(()),
                "{src}"
            );
            assert_eq!(
                v(ipv6(ALL_NODES_MAC, src, "ff02::2", 58, &echo)).0,
                Ok(()),
                "{src}"
            );
        }
        let (r, text) = v(udp6("fe80::2", "2001:db8::1"));
        assert_eq!(r, Err(DropReason::SpoofedSrcIp));
        assert!(text.contains("may reach the link only"), "{text}");
        // Not link-local as a pod uses it (outside fe80::/64), nor Ferrule's own.
        assert_eq!(
            v(ipv6(GW_MAC, "fe80:1::2", "fe80::1", 58, &echo)).0,
            Err(DropReason::SpoofedSrcIp)
        );
        assert_eq!(
            v(ipv6(GW_MAC, "fe80::1", "fe80::1", 58, &echo)).0,
            Err(DropReason::SpoofedSrcIp)
        );
        // The unspecified source: ICMPv6 to a multicast group only (MLD report, DAD).
        let mld = [143, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(v(ipv6(ALL_NODES_MAC, "::", "ff02::16", 58, &mld)).0, Ok(()));
        assert_eq!(
            v(ipv6(
                ALL_NODES_MAC,
                "::",
                "ff02::16",
                17,
                &[0x13, 0x88, 0, 53, 0, 8, 0, 0]
            ))
            .0,
            Err(DropReason::SpoofedSrcIp)
        );
        assert_eq!(
            v(ipv6(GW_MAC, "::", "fe80::1", 58, &echo)).0,
            Err(DropReason::SpoofedSrcIp)
        );
    }

    #[test]
    fn neighbour_discovery_only_about_the_pod() {
        let snap = snapshot();
        let group = "ff02::1:ff00:1";
        let mc = [0x33, 0x33, 0xff, 0, 0, 1];
        let v = |src: &str, dst: &str, m: Vec<u8>| verdict(&snap, POD, &ipv6(mc, src, dst, 58, &m));
        // Solicitations for the gateway, from link-local or the pod's address, with the
        // pod's MAC as source link-layer address or none.
        assert_eq!(
            v("fe80::2", group, nd(135, "fe80::1", Some(POD_MAC))).0,
            Ok(())
        );
        assert_eq!(v("fd00:1::2", group, nd(135, "fe80::1", None)).0, Ok(()));
        let (r, text) = v("fe80::2", group, nd(135, "fe80::1", Some(OTHER_MAC)));
        assert_eq!(r, Err(DropReason::SpoofedNd));
        assert!(
            text.contains("link-layer address 02:00:00:00:66:66: not pod's MAC"),
            "{text}"
        );
        // Duplicate address detection: from ::, for one of its addresses, no option.
        let dad = "ff02::1:ff00:2";
        assert_eq!(v("::", dad, nd(135, "fd00:1::2", None)).0, Ok(()));
        assert_eq!(v("::", dad, nd(135, "fe80::2", None)).0, Ok(()));
        assert_eq!(
            v("::", dad, nd(135, "fd00:1::2", Some(POD_MAC))).0,
            Err(DropReason::SpoofedNd)
        );
        assert_eq!(
            v("::", dad, nd(135, "fd00:1::3", None)).0,
            Err(DropReason::SpoofedNd)
        );
        assert_eq!(
            v("::", dad, nd(135, "fe80::1", None)).0,
            Err(DropReason::SpoofedNd)
        );
        // Advertisements: of its own addresses, with its MAC.
        assert_eq!(
            v("fd00:1::2", "ff02::1", nd(136, "fd00:1::2", Some(POD_MAC))).0,
            Ok(())
        );
        assert_eq!(v("fe80::2", "fe80::1", nd(136, "fe80::2", None)).0, Ok(()));
        let (r, text) = v("fd00:1::2", "ff02::1", nd(136, "fd00:1::3", Some(POD_MAC)));
        assert_eq!(r, Err(DropReason::SpoofedNd));
        assert!(
            text.contains("advertisement for fd00:1::3: not an address of pod"),
            "{text}"
        );
        assert_eq!(
            v("fe80::2", "ff02::1", nd(136, "fe80::1", Some(POD_MAC))).0,
            Err(DropReason::SpoofedNd)
        );
        assert_eq!(
            v("fe80::2", "ff02::1", nd(136, "fd00:1::2", Some(OTHER_MAC))).0,
            Err(DropReason::SpoofedNd)
        );
        // An option of length 0 is malformed (RFC 4861 4.6).
        let mut m = nd(135, "fe80::1", Some(POD_MAC));
        m[25] = 0;
        assert_eq!(v("fe80::2", group, m).0, Err(DropReason::Malformed));
        // The source is checked first.
        assert_eq!(
            v("fd00:1::3", group, nd(135, "fe80::1", None)).0,
            Err(DropReason::SpoofedSrcIp)
        );
    }

    #[test]
    fn allowed_addresses_widen_the_sources() {
        let mut snap = snapshot();
        snap.ports[0].pod_sources = sources(
            Some(POD_MAC),
            &["10.1.0.2"],
            &["10.9.0.0/16", "fd00:9::/64"],
        );
        let v = |snap: &Snapshot, f: Vec<u8>| verdict(snap, POD, &f).0;
        assert_eq!(v(&snap, udp4(POD_MAC, [10, 9, 3, 4])), Ok(()));
        assert_eq!(
            v(&snap, udp4(POD_MAC, [10, 10, 0, 1])),
            Err(DropReason::SpoofedSrcIp)
        );
        assert_eq!(v(&snap, udp6("fd00:9::77", "2001:db8::1")), Ok(()));
        assert_eq!(
            v(&snap, udp6("fd00:9:0:1::77", "2001:db8::1")),
            Err(DropReason::SpoofedSrcIp)
        );
        let gw = [169, 254, 1, 1];
        assert_eq!(
            v(&snap, arp(1, POD_MAC, POD_MAC, [10, 9, 0, 1], gw)),
            Ok(())
        );
        let mc = [0x33, 0x33, 0, 0, 0, 1];
        let na = nd(136, "fd00:9::77", Some(POD_MAC));
        assert_eq!(v(&snap, ipv6(mc, "fd00:9::77", "ff02::1", 58, &na)), Ok(()));
        // Any address, explicitly; the MAC is still the pod's.
        snap.ports[0].pod_sources = sources(Some(POD_MAC), &[], &["0.0.0.0/0", "::/0"]);
        assert_eq!(v(&snap, udp4(POD_MAC, [198, 51, 7, 2])), Ok(()));
        assert_eq!(v(&snap, udp6("2001:db8:77::1", "2001:db8::1")), Ok(()));
        assert_eq!(
            v(&snap, udp4(OTHER_MAC, [198, 51, 7, 2])),
            Err(DropReason::SpoofedSrcMac)
        );
    }

    #[test]
    fn l2_keeps_the_pods_packets_and_drops_the_rest() {
        let snap = snapshot();
        let mut frames = vec![
            udp4(POD_MAC, [10, 1, 0, 2]),
            udp4(POD_MAC, [198, 51, 0, 2]),
            udp4(OTHER_MAC, [10, 1, 0, 2]),
            udp6("fd00:1::2", "2001:db8::1"),
            udp6("fd00:1::99", "2001:db8::1"),
        ];
        let (ok, actions) = testing::with_burst(&snap, &mut frames, |b| {
            l2::stage(b);
            b.s.ok[..b.n_ok].to_vec()
        });
        assert_eq!(ok, [0, 3]);
        assert_eq!(actions[1], Action::Drop(DropReason::SpoofedSrcIp));
        assert_eq!(actions[2], Action::Drop(DropReason::SpoofedSrcMac));
        assert_eq!(actions[4], Action::Drop(DropReason::SpoofedSrcIp));
    }

    #[test]
    fn uplinks_are_not_checked() {
        let snap = snapshot();
        let mut frames = vec![
            udp4(OTHER_MAC, [198, 51, 0, 2]),
            udp4(OTHER_MAC, [10, 1, 0, 2]),
        ];
        for f in &mut frames {
            f[0..6].copy_from_slice(&UPLINK_MAC);
        }
        let mut actions = vec![Action::Drop(DropReason::Malformed); frames.len()];
        let mut s = Box::<Scratch>::default();
        let mut t = NoTrace;
        let mut b = Burst::new(
            &snap,
            UPLINK,
            frames.as_mut_slice(),
            &mut actions,
            &mut s,
            None,
            &mut t,
        )
        .expect("the uplink exists");
        l2::stage(&mut b);
        assert_eq!(b.s.ok[..b.n_ok], [0, 1]);
    }
}
