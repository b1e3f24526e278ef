//! The parse stage: validates a frame's headers and extracts what later stages need —
//! the L3 offset and length, TTL, DF, and the [`FlowKey`] — in one pass. Malformed
//! frames are reported with a drop reason, never a panic.

use crate::counters::DropReason;
use crate::flow::{Family, FlowKey};
use crate::wire::{
    self, ethernet, EtherType, EthernetFrame, Icmpv4Message, Icmpv4Packet, Icmpv6Message,
    Icmpv6Packet, IpProtocol, Ipv4Packet, Ipv6Packet, SctpPacket, TcpPacket, UdpPacket,
};
use std::fmt;

/// What the parse stage learned about a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    pub ethertype: EtherType,
    /// Offset of the L3 header in the frame (14: untagged Ethernet).
    pub l3_offset: usize,
    /// IPv4 total length or IPv6 header + payload length.
    pub l3_len: usize,
    /// Offset of the transport header (0 when there is none, e.g. a later fragment).
    pub l4_offset: usize,
    pub ttl: u8,
    /// IPv4 Don't Fragment.
    pub dont_frag: bool,
    /// A non-first fragment (no transport header).
    pub later_fragment: bool,
    /// Key of the flow (zeroed for ARP).
    pub key: FlowKey,
}

impl Parsed {
    /// A placeholder for scratch arrays.
    pub const EMPTY: Parsed = Parsed {
        ethertype: EtherType(0),
        l3_offset: 0,
        l3_len: 0,
        l4_offset: 0,
        ttl: 0,
        dont_frag: false,
        later_fragment: false,
        key: FlowKey {
            src: [0; 16],
            dst: [0; 16],
            src_port: 0,
            dst_port: 0,
            network: 0,
            proto: 0,
            family: Family::V4,
        },
    };

    #[inline]
    pub fn is_arp(&self) -> bool {
        self.ethertype == EtherType::ARP
    }

    #[inline]
    pub fn is_ipv6(&self) -> bool {
        self.ethertype == EtherType::IPV6
    }
}

impl fmt::Display for Parsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_arp() {
            return write!(f, "arp");
        }
        let proto = IpProtocol(self.key.proto);
        write!(
            f,
            "{} {} {} -> {}",
            if self.is_ipv6() { "ipv6" } else { "ipv4" },
            proto,
            endpoint(self.key.src_ip(), self.key.src_port, proto),
            endpoint(self.key.dst_ip(), self.key.dst_port, proto),
        )?;
        write!(f, " len {} ttl {}", self.l3_len, self.ttl)?;
        if self.later_fragment {
            write!(f, " (fragment)")?;
        }
        Ok(())
    }
}

fn endpoint(ip: std::net::IpAddr, port: u16, proto: IpProtocol) -> String {
    let ported = matches!(proto, IpProtocol::TCP | IpProtocol::UDP | IpProtocol::SCTP);
    match (ip, ported) {
        (std::net::IpAddr::V6(a), true) => format!("[{a}]:{port}"),
        (a, true) => format!("{a}:{port}"),
        (a, false) => a.to_string(),
    }
}

fn bad(e: wire::Error) -> DropReason {
    match e {
        wire::Error::Truncated | wire::Error::Malformed | wire::Error::Unsupported => {
            DropReason::Malformed
        }
    }
}

/// Ports (or ICMP echo id) of a transport header; (0, 0) when it has none we read.
#[inline(always)]
fn l4_ports(proto: IpProtocol, l4: &[u8], v6: bool) -> Result<(u16, u16), DropReason> {
    Ok(match proto {
        IpProtocol::TCP => {
            let p = TcpPacket::new_checked(l4).map_err(bad)?;
            (p.src_port(), p.dst_port())
        }
        IpProtocol::UDP => {
            let p = UdpPacket::new_checked(l4).map_err(bad)?;
            (p.src_port(), p.dst_port())
        }
        IpProtocol::SCTP => {
            let p = SctpPacket::new_checked(l4).map_err(bad)?;
            (p.src_port(), p.dst_port())
        }
        IpProtocol::ICMP if !v6 => {
            let p = Icmpv4Packet::new_checked(l4).map_err(bad)?;
            let t = p.msg_type();
            if t == Icmpv4Message::ECHO_REQUEST || t == Icmpv4Message::ECHO_REPLY {
                (p.echo_ident(), p.echo_ident())
            } else {
                (0, 0)
            }
        }
        IpProtocol::ICMPV6 if v6 => {
            let p = Icmpv6Packet::new_checked(l4).map_err(bad)?;
            let t = p.msg_type();
            if t == Icmpv6Message::ECHO_REQUEST || t == Icmpv6Message::ECHO_REPLY {
                (p.echo_ident(), p.echo_ident())
            } else {
                (0, 0)
            }
        }
        _ => (0, 0),
    })
}

/// Parses an Ethernet frame received in `network`.
#[inline(always)]
pub fn parse(frame: &[u8], network: u16) -> Result<Parsed, DropReason> {
    let mut p = Parsed::EMPTY;
    parse_into(frame, network, &mut p)?;
    Ok(p)
}

/// [`parse`] into `p` (the burst's array: no copy of the result); on an error `p` holds
/// nothing meaningful.
#[inline(always)]
pub fn parse_into(frame: &[u8], network: u16, p: &mut Parsed) -> Result<(), DropReason> {
    let eth = EthernetFrame::new_checked(frame).map_err(bad)?;
    let ethertype = eth.ethertype();
    let l3_offset = ethernet::HEADER_LEN;
    *p = Parsed {
        ethertype,
        l3_offset,
        l3_len: 0,
        l4_offset: 0,
        ttl: 0,
        dont_frag: false,
        later_fragment: false,
        key: FlowKey {
            network,
            ..FlowKey::default()
        },
    };
    let l3 = &frame[l3_offset..];
    match ethertype {
        EtherType::ARP => {
            wire::ArpPacket::new_checked(l3).map_err(bad)?;
            Ok(())
        }
        EtherType::IPV4 => {
            let ip = Ipv4Packet::new_checked(l3).map_err(bad)?;
            if !ip.verify_checksum() {
                return Err(DropReason::Malformed);
            }
            let proto = ip.next_header();
            p.l3_len = usize::from(ip.total_len());
            p.ttl = ip.hop_limit();
            p.dont_frag = ip.dont_frag();
            p.later_fragment = ip.is_fragment() && !ip.is_first_fragment();
            let (sport, dport) = if p.later_fragment {
                (0, 0)
            } else {
                p.l4_offset = l3_offset + ip.header_len();
                l4_ports(proto, ip.payload(), false)?
            };
            p.key = FlowKey::v4(network, proto.0, ip.src_addr(), ip.dst_addr(), sport, dport);
            Ok(())
        }
        EtherType::IPV6 => {
            let ip = Ipv6Packet::new_checked(l3).map_err(bad)?;
            let tr = wire::ipv6::transport(&ip).map_err(bad)?;
            p.l3_len = 40 + usize::from(ip.payload_len());
            p.ttl = ip.hop_limit();
            p.later_fragment = tr.fragment.is_some_and(|f| f.offset != 0);
            let (sport, dport) = if p.later_fragment {
                (0, 0)
            } else {
                p.l4_offset = l3_offset + tr.offset;
                let end = (40 + usize::from(ip.payload_len())).min(l3.len());
                let l4 = l3.get(tr.offset..end).ok_or(DropReason::Malformed)?;
                l4_ports(tr.protocol, l4, true)?
            };
            p.key = FlowKey::v6(
                network,
                tr.protocol.0,
                ip.src_addr(),
                ip.dst_addr(),
                sport,
                dport,
            );
            Ok(())
        }
        t if t.is_vlan() => Err(DropReason::VlanTagged),
        _ => Err(DropReason::NotIp),
    }
}

impl Parsed {
    /// The family of the key (ARP counts as IPv4).
    pub fn family(&self) -> Family {
        self.key.family
    }
}
