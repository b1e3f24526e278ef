//! ICMP errors Ferrule originates — time exceeded, fragmentation needed, packet too
//! big — built into a fresh buffer from the offending packet and sent back out of the
//! port it arrived on, towards its source.

use super::local::LOCAL_TTL;
use super::{IcmpErrorKind, Parsed};
use crate::snapshot::PortState;
use crate::wire::{checksum, EtherType, EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Largest ICMPv4 error (RFC 1812: the error should not exceed 576 bytes of IP).
const MAX_V4_ERROR: usize = 576;
/// Largest ICMPv6 error (RFC 4443: must not exceed the minimum IPv6 MTU).
const MAX_V6_ERROR: usize = 1280;

/// Room a buffer needs for any error this module builds.
pub const MAX_ERROR_FRAME: usize = 14 + MAX_V6_ERROR;

/// Whether an error may be sent about this packet at all (RFC 1812 4.3.2.7 / RFC 4443
/// 2.4): never about an ICMP error, a non-first fragment, or a packet from a multicast,
/// broadcast or unspecified source.
pub fn allowed(parsed: &Parsed, original: &[u8]) -> bool {
    if parsed.later_fragment {
        return false;
    }
    let src_ok = match parsed.key.src_ip() {
        IpAddr::V4(a) => !(a.is_multicast() || a.is_broadcast() || a.is_unspecified()),
        IpAddr::V6(a) => !(a.is_multicast() || a.is_unspecified()),
    };
    // Nor about a packet sent to a multicast or broadcast address (RFC 1812 4.3.2.7).
    let dst_ok = match parsed.key.dst_ip() {
        IpAddr::V4(a) => !(a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => !a.is_multicast(),
    };
    if !src_ok || !dst_ok {
        return false;
    }
    let proto = IpProtocol(parsed.key.proto);
    let icmp_type = original.get(parsed.l4_offset).copied();
    match (proto, icmp_type) {
        // ICMPv4 errors are types 3, 4, 5, 11, 12; only queries (echo …) may get one.
        (IpProtocol::ICMP, Some(t)) => matches!(t, 0 | 8 | 13 | 14),
        // ICMPv6 errors are types 0..=127.
        (IpProtocol::ICMPV6, Some(t)) => t >= 128,
        _ => true,
    }
}

/// The address to send an error from on `port`: its first own address of the family.
fn source_v4(port: &PortState) -> Option<Ipv4Addr> {
    port.local_v4.first().copied()
}

fn source_v6(port: &PortState) -> Option<Ipv6Addr> {
    port.local_v6.first().copied()
}

/// Builds the error about `original` (as received on `port`) into `out`; returns its
/// length, or `None` when no error may or can be sent (see [`allowed`], or the port has
/// no address of the family to send it from).
pub fn build(
    port: &PortState,
    parsed: &Parsed,
    original: &[u8],
    kind: IcmpErrorKind,
    out: &mut [u8],
) -> Option<usize> {
    if !allowed(parsed, original) {
        return None;
    }
    let orig_l3 = original.get(parsed.l3_offset..)?;
    let orig_l3 = &orig_l3[..parsed.l3_len.min(orig_l3.len())];
    let orig_eth = EthernetFrame::new_checked(original).ok()?;
    let (to_mac, from_mac) = (orig_eth.src_addr(), port.mac);
    let (ip_hdr, icmp_hdr, max) = if parsed.is_ipv6() {
        (40, 8, MAX_V6_ERROR)
    } else {
        (20, 8, MAX_V4_ERROR)
    };
    let quoted = orig_l3.len().min(max - ip_hdr - icmp_hdr);
    let total = 14 + ip_hdr + icmp_hdr + quoted;
    if out.len() < total {
        return None;
    }
    let out = &mut out[..total];
    {
        let mut eth = EthernetFrame::new_unchecked(&mut *out);
        eth.set_dst_addr(to_mac);
        eth.set_src_addr(from_mac);
        eth.set_ethertype(if parsed.is_ipv6() {
            EtherType::IPV6
        } else {
            EtherType::IPV4
        });
    }
    let icmp_off = 14 + ip_hdr;
    out[icmp_off + icmp_hdr..].copy_from_slice(&orig_l3[..quoted]);
    let icmp_len = icmp_hdr + quoted;
    match (parsed.key.src_ip(), kind) {
        (IpAddr::V4(dst), kind) => {
            let src = source_v4(port)?;
            let (t, code, mtu) = match kind {
                IcmpErrorKind::TimeExceeded => (11u8, 0u8, 0u16),
                IcmpErrorKind::FragNeeded { mtu } => (3, 4, mtu),
                IcmpErrorKind::NoRoute => (3, 0, 0),
                IcmpErrorKind::PacketTooBig { .. } => return None,
            };
            let icmp = &mut out[icmp_off..icmp_off + icmp_hdr];
            icmp.copy_from_slice(&[t, code, 0, 0, 0, 0, 0, 0]);
            icmp[6..8].copy_from_slice(&mtu.to_be_bytes());
            let csum = !checksum::data(&out[icmp_off..]);
            out[icmp_off + 2..icmp_off + 4].copy_from_slice(&csum.to_be_bytes());
            let mut ip = Ipv4Packet::new_unchecked(&mut out[14..14 + ip_hdr]);
            ip.set_version(4);
            ip.set_header_len(20);
            ip.set_dscp(0);
            ip.set_ecn(0);
            ip.set_total_len((ip_hdr + icmp_len) as u16);
            ip.set_ident(0);
            ip.set_dont_frag(false);
            ip.set_more_frags(false);
            ip.set_frag_offset(0);
            ip.set_hop_limit(LOCAL_TTL);
            ip.set_next_header(IpProtocol::ICMP);
            ip.set_src_addr(src);
            ip.set_dst_addr(dst);
            ip.fill_checksum();
        }
        (IpAddr::V6(dst), kind) => {
            let src = source_v6(port)?;
            let (t, code, mtu) = match kind {
                IcmpErrorKind::TimeExceeded => (3u8, 0u8, 0u32),
                IcmpErrorKind::PacketTooBig { mtu } => (2, 0, u32::from(mtu)),
                IcmpErrorKind::NoRoute => (1, 0, 0),
                IcmpErrorKind::FragNeeded { .. } => return None,
            };
            let icmp = &mut out[icmp_off..icmp_off + icmp_hdr];
            icmp.copy_from_slice(&[t, code, 0, 0, 0, 0, 0, 0]);
            icmp[4..8].copy_from_slice(&mtu.to_be_bytes());
            let sum = checksum::pseudo_header_v6(src, dst, IpProtocol::ICMPV6, icmp_len as u32);
            let csum = !checksum::combine(&[sum, checksum::data(&out[icmp_off..])]);
            out[icmp_off + 2..icmp_off + 4].copy_from_slice(&csum.to_be_bytes());
            let mut ip = Ipv6Packet::new_unchecked(&mut out[14..14 + ip_hdr]);
            ip.set_version(6);
            ip.set_traffic_class(0);
            ip.set_flow_label(0);
            ip.set_payload_len(icmp_len as u16);
            ip.set_next_header(IpProtocol::ICMPV6);
            ip.set_hop_limit(LOCAL_TTL);
            ip.set_src_addr(src);
            ip.set_dst_addr(dst);
        }
    }
    Some(total)
}
