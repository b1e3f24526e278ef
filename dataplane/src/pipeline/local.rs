//! Ferrule's own addresses: answers ARP for them, IPv6 neighbour solicitations for
//! them, and ICMP/ICMPv6 echo to them — in place, back out of the input port — and
//! punts ARP replies and neighbour advertisements to the control thread to learn.

use super::{trace, Action, Parsed, Punt, Stage, Tracer};
use crate::counters::DropReason;
use crate::snapshot::{PortRole, PortState};
use crate::wire::{
    checksum, ArpOperation, ArpPacket, EthernetAddress, EthernetFrame, IpProtocol, Ipv4Packet,
    Ipv6Packet,
};
use std::net::{IpAddr, Ipv6Addr};

/// ICMP type numbers used here.
const ICMP_ECHO_REPLY: u8 = 0;
const ICMP_ECHO_REQUEST: u8 = 8;
const ICMPV6_ECHO_REQUEST: u8 = 128;
const ICMPV6_ECHO_REPLY: u8 = 129;
const ICMPV6_RS: u8 = 133;
const ICMPV6_RA: u8 = 134;
const ICMPV6_NS: u8 = 135;
const ICMPV6_NA: u8 = 136;
/// Hop limit of packets Ferrule originates.
pub const LOCAL_TTL: u8 = 64;

/// ARP on `port`: requests for our addresses (and the port's proxied ones,
/// [`PortState::proxy_arp_v4`]) are answered, replies to us are punted to be learned,
/// anything else is dropped.
pub fn arp<T: Tracer>(port: &PortState, frame: &mut [u8], t: &mut T) -> Action {
    let l3 = &mut frame[14..];
    let Ok(mut arp) = ArpPacket::new_checked(&mut *l3) else {
        return Action::Drop(DropReason::Malformed);
    };
    if !arp.is_ethernet_ipv4() {
        trace!(
            t,
            Stage::Local,
            "arp for a hardware/protocol other than Ethernet/IPv4"
        );
        return Action::Drop(DropReason::Malformed);
    }
    let op = arp.operation();
    let target = arp.target_protocol_addr();
    let sender_ip = arp.source_protocol_addr();
    let sender_mac = arp.source_hardware_addr();
    if op == ArpOperation::Request && port.answers_arp(target) {
        arp.set_operation(ArpOperation::Reply);
        arp.set_target_hardware_addr(sender_mac);
        arp.set_target_protocol_addr(sender_ip);
        arp.set_source_hardware_addr(port.mac);
        arp.set_source_protocol_addr(target);
        let mut eth = EthernetFrame::new_unchecked(&mut *frame);
        eth.set_dst_addr(sender_mac);
        eth.set_src_addr(port.mac);
        trace!(
            t,
            Stage::Local,
            "arp who-has {} tell {}: reply {} is-at {}",
            target,
            sender_ip,
            target,
            port.mac
        );
        return Action::Reply;
    }
    if op == ArpOperation::Reply && port.owns_v4(target) {
        trace!(
            t,
            Stage::Local,
            "arp reply {} is-at {}: learn",
            sender_ip,
            sender_mac
        );
        return Action::Punt(Punt::Learn);
    }
    trace!(t, Stage::Local, "arp {:?} for {} is not for us", op, target);
    Action::Drop(DropReason::ArpIgnored)
}

/// Packets for Ferrule itself: `Some(action)` when the packet is consumed here,
/// `None` when it should be forwarded. Inlined: the IPv4 check is a scan of the port's
/// few addresses; IPv6 (neighbour discovery first) is out of line ([`input_v6`]).
#[inline(always)]
pub fn input<T: Tracer>(
    port: &PortState,
    parsed: &Parsed,
    frame: &mut [u8],
    t: &mut T,
) -> Option<Action> {
    if parsed.is_ipv6() {
        return input_v6(port, parsed, frame, t);
    }
    let dst = std::net::Ipv4Addr::from(parsed.key.dst_v4());
    if port.owns_v4(dst) {
        return Some(answer(port, parsed, frame, t));
    }
    None
}

/// [`input`] of an IPv6 packet.
#[inline(never)]
fn input_v6<T: Tracer>(
    port: &PortState,
    parsed: &Parsed,
    frame: &mut [u8],
    t: &mut T,
) -> Option<Action> {
    let dst = Ipv6Addr::from(parsed.key.dst);
    let proto = IpProtocol(parsed.key.proto);
    // Neighbour discovery arrives on multicast too; handle it before the local check.
    if proto == IpProtocol::ICMPV6 && parsed.l4_offset != 0 {
        let icmp_type = frame.get(parsed.l4_offset).copied().unwrap_or(0);
        if matches!(icmp_type, ICMPV6_NS | ICMPV6_NA) && parsed.ttl != 255 {
            // RFC 4861 7.1.1/7.1.2: neighbour discovery from off-link is invalid.
            trace!(
                t,
                Stage::Local,
                "neighbour discovery with hop limit {} (not 255) dropped",
                parsed.ttl
            );
            return Some(Action::Drop(DropReason::Malformed));
        }
        match icmp_type {
            ICMPV6_NS => return Some(neighbor_solicit(port, parsed, frame, t)),
            ICMPV6_NA => {
                trace!(t, Stage::Local, "neighbour advertisement to {}: learn", dst);
                return Some(Action::Punt(Punt::Learn));
            }
            ICMPV6_RS | ICMPV6_RA => {
                trace!(t, Stage::Local, "router solicitation/advertisement ignored");
                return Some(Action::Drop(DropReason::LocalUnhandled));
            }
            _ => {}
        }
    }
    if dst.is_multicast() {
        trace!(t, Stage::Local, "multicast {} is not forwarded", dst);
        return Some(Action::Drop(DropReason::LocalUnhandled));
    }
    if is_link_local(&dst) && !port.owns_v6(dst) {
        trace!(
            t,
            Stage::Local,
            "link-local {} is not ours and not forwarded",
            dst
        );
        return Some(Action::Drop(DropReason::NoRoute));
    }
    // Addresses owned on other ports are found by the route lookup (a `Local` next
    // hop), which then calls `answer`.
    port.owns_v6(dst).then(|| answer(port, parsed, frame, t))
}

/// A packet to one of Ferrule's addresses: echo requests are answered in place, the
/// rest is dropped.
#[inline(never)]
pub fn answer<T: Tracer>(port: &PortState, parsed: &Parsed, frame: &mut [u8], t: &mut T) -> Action {
    let dst = parsed.key.dst_ip();
    let proto = IpProtocol(parsed.key.proto);
    if parsed.l4_offset != 0 {
        let icmp_type = frame.get(parsed.l4_offset).copied().unwrap_or(0);
        if proto == IpProtocol::ICMP && icmp_type == ICMP_ECHO_REQUEST {
            echo_reply_v4(port, parsed, frame);
            trace!(t, Stage::Local, "echo request to {}: echo reply", dst);
            return Action::Reply;
        }
        if proto == IpProtocol::ICMPV6 && icmp_type == ICMPV6_ECHO_REQUEST {
            echo_reply_v6(port, parsed, frame);
            trace!(t, Stage::Local, "echo request to {}: echo reply", dst);
            return Action::Reply;
        }
    }
    trace!(
        t,
        Stage::Local,
        "{} to local address {} is not handled",
        proto,
        dst
    );
    Action::Drop(DropReason::LocalUnhandled)
}

fn is_link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// Swaps the Ethernet addresses towards the sender, our MAC as source.
fn turn_around_l2(port: &PortState, frame: &mut [u8]) {
    let mut eth = EthernetFrame::new_unchecked(frame);
    let src = eth.src_addr();
    eth.set_dst_addr(src);
    eth.set_src_addr(port.mac);
}

fn echo_reply_v4(port: &PortState, parsed: &Parsed, frame: &mut [u8]) {
    turn_around_l2(port, frame);
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut frame[parsed.l3_offset..]);
        let (s, d) = (ip.src_addr(), ip.dst_addr());
        ip.set_src_addr(d);
        ip.set_dst_addr(s);
        ip.set_hop_limit(LOCAL_TTL);
        ip.fill_checksum();
    }
    let l4 = parsed.l4_offset;
    // Type 8 → 0 in the type/code word: an RFC 1624 update of the ICMP checksum.
    let old = u16::from_be_bytes([frame[l4], frame[l4 + 1]]);
    frame[l4] = ICMP_ECHO_REPLY;
    let new = u16::from_be_bytes([frame[l4], frame[l4 + 1]]);
    let csum = u16::from_be_bytes([frame[l4 + 2], frame[l4 + 3]]);
    let csum = checksum::update16(csum, old, new);
    frame[l4 + 2..l4 + 4].copy_from_slice(&csum.to_be_bytes());
}

fn echo_reply_v6(port: &PortState, parsed: &Parsed, frame: &mut [u8]) {
    turn_around_l2(port, frame);
    let mut ip = Ipv6Packet::new_unchecked(&mut frame[parsed.l3_offset..]);
    let (s, d) = (ip.src_addr(), ip.dst_addr());
    ip.set_src_addr(d);
    ip.set_dst_addr(s);
    ip.set_hop_limit(LOCAL_TTL);
    // Swapping source and destination leaves the pseudo-header sum unchanged; only the
    // type changes.
    let l4 = parsed.l4_offset;
    let old = u16::from_be_bytes([frame[l4], frame[l4 + 1]]);
    frame[l4] = ICMPV6_ECHO_REPLY;
    let new = u16::from_be_bytes([frame[l4], frame[l4 + 1]]);
    let csum = u16::from_be_bytes([frame[l4 + 2], frame[l4 + 3]]);
    let csum = checksum::update16(csum, old, new);
    frame[l4 + 2..l4 + 4].copy_from_slice(&csum.to_be_bytes());
}

/// Answers a neighbour solicitation for one of our addresses with a solicited
/// advertisement carrying our MAC, in place.
fn neighbor_solicit<T: Tracer>(
    port: &PortState,
    parsed: &Parsed,
    frame: &mut [u8],
    t: &mut T,
) -> Action {
    let l4 = parsed.l4_offset;
    // NS: type, code, checksum, reserved (4), target (16), options.
    let Some(target_bytes) = frame.get(l4 + 8..l4 + 24) else {
        return Action::Drop(DropReason::Malformed);
    };
    let mut tb = [0u8; 16];
    tb.copy_from_slice(target_bytes);
    let target = Ipv6Addr::from(tb);
    let (src, dst_ip) = match (parsed.key.src_ip(), parsed.key.dst_ip()) {
        (IpAddr::V6(s), IpAddr::V6(d)) => (s, d),
        _ => return Action::Drop(DropReason::Malformed),
    };
    // RFC 4861 7.1.1: code 0 and a valid checksum.
    let icmp_end = (parsed.l3_offset + parsed.l3_len).min(frame.len());
    let Some(icmp) = frame.get(l4..icmp_end) else {
        return Action::Drop(DropReason::Malformed);
    };
    let sum = checksum::pseudo_header_v6(src, dst_ip, IpProtocol::ICMPV6, icmp.len() as u32);
    if icmp.get(1) != Some(&0) || checksum::combine(&[sum, checksum::data(icmp)]) != 0xffff {
        trace!(
            t,
            Stage::Local,
            "neighbour solicitation with a bad code or checksum"
        );
        return Action::Drop(DropReason::Malformed);
    }
    if !port.owns_v6(target) {
        trace!(
            t,
            Stage::Local,
            "neighbour solicitation for {} is not for us",
            target
        );
        return Action::Drop(DropReason::ArpIgnored);
    }
    if src.is_unspecified() {
        trace!(
            t,
            Stage::Local,
            "duplicate address detection for {} ignored",
            target
        );
        return Action::Drop(DropReason::LocalUnhandled);
    }
    // NA with a target link-layer address option: 24 + 8 bytes of ICMPv6. A unicast
    // solicitation too short to be rewritten into that may be answered without the
    // option (RFC 4861 7.2.4); a multicast one needs it.
    let na_len = if frame.len() >= l4 + 32 {
        32
    } else if frame.len() >= l4 + 24 && !dst_ip.is_multicast() {
        24
    } else {
        return Action::Drop(DropReason::Malformed);
    };
    turn_around_l2(port, frame);
    {
        let mut ip = Ipv6Packet::new_unchecked(&mut frame[parsed.l3_offset..]);
        ip.set_src_addr(target);
        ip.set_dst_addr(src);
        ip.set_hop_limit(255);
        ip.set_payload_len((l4 - parsed.l3_offset - 40 + na_len) as u16);
    }
    let na = &mut frame[l4..l4 + na_len];
    na[0] = ICMPV6_NA;
    na[1] = 0;
    na[2] = 0;
    na[3] = 0;
    // Router (on pod ports, where we are the pods' gateway), Solicited, Override.
    let router = if port.role == PortRole::Pod { 0x80 } else { 0 };
    na[4..8].copy_from_slice(&[router | 0x40 | 0x20, 0, 0, 0]);
    na[8..24].copy_from_slice(&target.octets());
    if na_len == 32 {
        na[24] = 2; // target link-layer address
        na[25] = 1; // length in units of 8 bytes
        na[26..32].copy_from_slice(port.mac.as_bytes());
    }
    let sum = checksum::pseudo_header_v6(target, src, IpProtocol::ICMPV6, na_len as u32);
    let csum = !checksum::combine(&[sum, checksum::data(na)]);
    na[2..4].copy_from_slice(&csum.to_be_bytes());
    // Anything after the NA (the solicitation's longer options) is now padding.
    trace!(
        t,
        Stage::Local,
        "neighbour solicitation for {} from {}: advertise {}",
        target,
        src,
        port.mac
    );
    Action::Reply
}

/// The MAC an IPv6 multicast group maps to (for sends to all-nodes etc.).
pub fn ipv6_multicast_mac(group: &Ipv6Addr) -> EthernetAddress {
    EthernetAddress::ipv6_multicast(group)
}

/// Builds an ARP request "who-has `target` tell `sender_ip`" from `port` into `out`
/// (at least 42 bytes); returns the frame length.
pub fn build_arp_request(
    port: &PortState,
    sender_ip: std::net::Ipv4Addr,
    target: std::net::Ipv4Addr,
    out: &mut [u8],
) -> Option<usize> {
    const LEN: usize = 14 + 28;
    let out = out.get_mut(..LEN)?;
    {
        let mut eth = EthernetFrame::new_unchecked(&mut *out);
        eth.set_dst_addr(EthernetAddress::BROADCAST);
        eth.set_src_addr(port.mac);
        eth.set_ethertype(crate::wire::EtherType::ARP);
    }
    let mut arp = ArpPacket::new_unchecked(&mut out[14..]);
    arp.set_hardware_type(1);
    arp.set_protocol_type(crate::wire::EtherType::IPV4);
    arp.set_hardware_len(6);
    arp.set_protocol_len(4);
    arp.set_operation(ArpOperation::Request);
    arp.set_source_hardware_addr(port.mac);
    arp.set_source_protocol_addr(sender_ip);
    arp.set_target_hardware_addr(EthernetAddress::UNSPECIFIED);
    arp.set_target_protocol_addr(target);
    Some(LEN)
}

/// The solicited-node multicast group of an address (ff02::1:ffXX:XXXX).
pub fn solicited_node(a: &Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// Builds a neighbour solicitation for `target` from `src` on `port` into `out` (at
/// least 86 bytes), to the target's solicited-node group; returns the frame length.
pub fn build_neighbor_solicit(
    port: &PortState,
    src: Ipv6Addr,
    target: Ipv6Addr,
    out: &mut [u8],
) -> Option<usize> {
    const ICMP_LEN: usize = 32; // NS (24) + source link-layer address option (8)
    const LEN: usize = 14 + 40 + ICMP_LEN;
    let out = out.get_mut(..LEN)?;
    let group = solicited_node(&target);
    {
        let mut eth = EthernetFrame::new_unchecked(&mut *out);
        eth.set_dst_addr(EthernetAddress::ipv6_multicast(&group));
        eth.set_src_addr(port.mac);
        eth.set_ethertype(crate::wire::EtherType::IPV6);
    }
    {
        let mut ip = Ipv6Packet::new_unchecked(&mut out[14..54]);
        ip.set_version(6);
        ip.set_traffic_class(0);
        ip.set_flow_label(0);
        ip.set_payload_len(ICMP_LEN as u16);
        ip.set_next_header(IpProtocol::ICMPV6);
        ip.set_hop_limit(255);
        ip.set_src_addr(src);
        ip.set_dst_addr(group);
    }
    let ns = &mut out[54..];
    ns[..8].copy_from_slice(&[ICMPV6_NS, 0, 0, 0, 0, 0, 0, 0]);
    ns[8..24].copy_from_slice(&target.octets());
    ns[24] = 1; // source link-layer address
    ns[25] = 1;
    ns[26..32].copy_from_slice(port.mac.as_bytes());
    let sum = checksum::pseudo_header_v6(src, group, IpProtocol::ICMPV6, ICMP_LEN as u32);
    let csum = !checksum::combine(&[sum, checksum::data(ns)]);
    ns[2..4].copy_from_slice(&csum.to_be_bytes());
    Some(LEN)
}

/// The (address, MAC) an ARP reply or neighbour advertisement announces, if `frame`
/// is one (checksums verified).
pub fn learned(frame: &[u8]) -> Option<(IpAddr, EthernetAddress)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    match eth.ethertype() {
        crate::wire::EtherType::ARP => {
            let arp = ArpPacket::new_checked(&frame[14..]).ok()?;
            (arp.is_ethernet_ipv4() && arp.operation() == ArpOperation::Reply).then(|| {
                (
                    IpAddr::V4(arp.source_protocol_addr()),
                    arp.source_hardware_addr(),
                )
            })
        }
        crate::wire::EtherType::IPV6 => {
            let ip = Ipv6Packet::new_checked(&frame[14..]).ok()?;
            let tr = crate::wire::ipv6::transport(&ip).ok()?;
            if tr.protocol != IpProtocol::ICMPV6 {
                return None;
            }
            let end = (40 + usize::from(ip.payload_len())).min(frame.len() - 14);
            let icmp = frame.get(14 + tr.offset..14 + end)?;
            if icmp.first() != Some(&ICMPV6_NA) || icmp.len() < 24 {
                return None;
            }
            let sum = checksum::pseudo_header_v6(
                ip.src_addr(),
                ip.dst_addr(),
                IpProtocol::ICMPV6,
                icmp.len() as u32,
            );
            if checksum::combine(&[sum, checksum::data(icmp)]) != 0xffff {
                return None;
            }
            let mut tb = [0u8; 16];
            tb.copy_from_slice(&icmp[8..24]);
            // The target link-layer address option; without it, the frame's source.
            let mut mac = eth.src_addr();
            let mut opts = &icmp[24..];
            while opts.len() >= 8 {
                let len = usize::from(opts[1]) * 8;
                if len == 0 || len > opts.len() {
                    return None;
                }
                if opts[0] == 2 && len >= 8 {
                    mac = EthernetAddress::from_bytes(&opts[2..8])?;
                }
                opts = &opts[len..];
            }
            Some((IpAddr::V6(Ipv6Addr::from(tb)), mac))
        }
        _ => None,
    }
}
