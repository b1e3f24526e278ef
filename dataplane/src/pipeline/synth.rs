//! Synthetic packets for `ferrulectl trace`: an Ethernet frame with an IPv4 or IPv6
//! header and a TCP, UDP, SCTP, ICMP or ICMPv6 header, valid checksums, built from a
//! few fields. Control thread only (it allocates).

use crate::wire::{
    checksum, EtherType, EthernetAddress, EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet,
};
use std::net::IpAddr;

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthSpec {
    pub src_mac: EthernetAddress,
    pub dst_mac: EthernetAddress,
    pub proto: IpProtocol,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    /// TCP flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, URG 0x20 …).
    pub tcp_flags: u8,
    /// Total IP length; raised to the smallest valid packet of the protocol.
    pub ip_len: Option<u16>,
    pub ttl: u8,
}

/// Why a spec cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SynthError {
    /// Source and destination differ in IP version.
    MixedFamilies,
    /// ICMP with IPv6 addresses or ICMPv6 with IPv4 ones.
    ProtoFamily,
    /// Not tcp, udp, sctp, icmp or icmpv6.
    Proto,
    /// The packet would exceed 65535 bytes.
    TooLong,
}

fn l4_len(proto: IpProtocol) -> Result<usize, SynthError> {
    Ok(match proto {
        IpProtocol::TCP => 20,
        IpProtocol::UDP | IpProtocol::ICMP | IpProtocol::ICMPV6 => 8,
        IpProtocol::SCTP => 12,
        _ => return Err(SynthError::Proto),
    })
}

/// Builds the frame.
pub fn build(s: &SynthSpec) -> Result<Vec<u8>, SynthError> {
    build_with_payload(s, &[])
}

/// Builds the frame with `payload` after the transport header (the DNS proxy's answers
/// to pods); the IP length is at least what the payload needs.
pub fn build_with_payload(s: &SynthSpec, payload: &[u8]) -> Result<Vec<u8>, SynthError> {
    let v6 = match (s.src, s.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => false,
        (IpAddr::V6(_), IpAddr::V6(_)) => true,
        _ => return Err(SynthError::MixedFamilies),
    };
    if (s.proto == IpProtocol::ICMP && v6) || (s.proto == IpProtocol::ICMPV6 && !v6) {
        return Err(SynthError::ProtoFamily);
    }
    let ip_hdr = if v6 { 40 } else { 20 };
    let l4_hdr = l4_len(s.proto)?;
    let min = ip_hdr + l4_hdr + payload.len();
    if min > usize::from(u16::MAX) {
        return Err(SynthError::TooLong);
    }
    let ip_len = usize::from(s.ip_len.unwrap_or(0)).max(min);
    let mut f = vec![0u8; 14 + ip_len];
    {
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        eth.set_dst_addr(s.dst_mac);
        eth.set_src_addr(s.src_mac);
        eth.set_ethertype(if v6 { EtherType::IPV6 } else { EtherType::IPV4 });
    }
    let l4_off = 14 + ip_hdr;
    let l4 = &mut f[l4_off..];
    match s.proto {
        IpProtocol::TCP => {
            l4[0..2].copy_from_slice(&s.src_port.to_be_bytes());
            l4[2..4].copy_from_slice(&s.dst_port.to_be_bytes());
            l4[4..8].copy_from_slice(&1u32.to_be_bytes());
            l4[12] = 5 << 4;
            l4[13] = s.tcp_flags;
            l4[14..16].copy_from_slice(&65535u16.to_be_bytes());
        }
        IpProtocol::UDP => {
            l4[0..2].copy_from_slice(&s.src_port.to_be_bytes());
            l4[2..4].copy_from_slice(&s.dst_port.to_be_bytes());
            l4[4..6].copy_from_slice(&((ip_len - ip_hdr) as u16).to_be_bytes());
        }
        IpProtocol::SCTP => {
            l4[0..2].copy_from_slice(&s.src_port.to_be_bytes());
            l4[2..4].copy_from_slice(&s.dst_port.to_be_bytes());
        }
        _ => {
            // Echo request with identifier = source "port", sequence 1.
            l4[0] = if v6 { 128 } else { 8 };
            l4[4..6].copy_from_slice(&s.src_port.to_be_bytes());
            l4[6..8].copy_from_slice(&1u16.to_be_bytes());
        }
    }
    f[l4_off + l4_hdr..][..payload.len()].copy_from_slice(payload);
    let l4_total = (ip_len - ip_hdr) as u32;
    match (s.src, s.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let mut ip = Ipv4Packet::new_unchecked(&mut f[14..14 + ip_hdr]);
            ip.set_version(4);
            ip.set_header_len(20);
            ip.set_total_len(ip_len as u16);
            ip.set_dont_frag(true);
            ip.set_hop_limit(s.ttl);
            ip.set_next_header(s.proto);
            ip.set_src_addr(src);
            ip.set_dst_addr(dst);
            ip.fill_checksum();
            fill_l4_checksum(
                &mut f[l4_off..],
                s.proto,
                checksum::pseudo_header_v4(src, dst, s.proto, l4_total),
            );
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let mut ip = Ipv6Packet::new_unchecked(&mut f[14..14 + ip_hdr]);
            ip.set_version(6);
            ip.set_payload_len(l4_total as u16);
            ip.set_next_header(s.proto);
            ip.set_hop_limit(s.ttl);
            ip.set_src_addr(src);
            ip.set_dst_addr(dst);
            fill_l4_checksum(
                &mut f[l4_off..],
                s.proto,
                checksum::pseudo_header_v6(src, dst, s.proto, l4_total),
            );
        }
        _ => return Err(SynthError::MixedFamilies),
    }
    Ok(f)
}

fn fill_l4_checksum(l4: &mut [u8], proto: IpProtocol, pseudo: u16) {
    let at = match proto {
        IpProtocol::TCP => 16,
        IpProtocol::UDP => 6,
        IpProtocol::ICMP => {
            let c = !checksum::data(l4);
            l4[2..4].copy_from_slice(&c.to_be_bytes());
            return;
        }
        IpProtocol::ICMPV6 => 2,
        IpProtocol::SCTP => {
            crate::wire::SctpPacket::new_unchecked(&mut *l4).fill_checksum();
            return;
        }
        _ => return,
    };
    let mut c = !checksum::combine(&[pseudo, checksum::data(l4)]);
    if proto == IpProtocol::UDP && c == 0 {
        c = 0xffff;
    }
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
}
