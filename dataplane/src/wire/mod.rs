//! Zero-copy packet header views and their owned representations (smoltcp `wire` style).
//!
//! Each protocol has a view `XPacket<T: AsRef<[u8]>>` over a byte buffer and, where it
//! makes sense, an owned `XRepr` that `parse`s from a view and `emit`s into one.
//!
//! The contract every view keeps:
//!
//! - `new_unchecked(buffer)` wraps without looking; accessors may panic on a short buffer.
//! - `new_checked(buffer)` = `new_unchecked` + `check_len`. After it succeeds **no accessor
//!   panics, whatever the bytes are** — variable-length regions (options, payloads) are
//!   clamped to the buffer, so even a setter that makes the header lie (a bigger IHL, a
//!   bigger UDP length) leaves the getters safe.
//! - Getters need `T: AsRef<[u8]>`, setters `T: AsMut<[u8]>`; fields are big-endian.
//! - `XRepr::parse` calls `check_len` itself and verifies checksums; `XRepr::emit` writes
//!   a header into a buffer of at least `XRepr::buffer_len()` bytes (and panics on a
//!   shorter one: that is a bug in the caller, not bad input).
//!
//! Layering is left to the caller: `vlan::l3_offset` finds the L3 header in a frame,
//! `ipv6::transport` walks IPv6 extension headers to the L4 header.
//!
//! ```
//! use ferrule_dataplane::wire::{l3_offset, EtherType, IpProtocol, Ipv4Packet, UdpPacket};
//!
//! # let mut frame = vec![0u8; 14];
//! # frame[12..14].copy_from_slice(&[0x08, 0x00]);
//! # frame.extend_from_slice(&[0x45, 0, 0, 30, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1,
//! #     10, 0, 0, 2, 0x04, 0xd2, 0, 53, 0, 10, 0, 0, b'h', b'i']);
//! # Ipv4Packet::new_unchecked(&mut frame[14..]).fill_checksum();
//! // Forwarding an IPv4/UDP packet in place.
//! let (offset, ethertype, _vid) = l3_offset(&frame)?;
//! assert_eq!(ethertype, EtherType::IPV4);
//! let mut ip = Ipv4Packet::new_checked(&mut frame[offset..])?;
//! if !ip.verify_checksum() || ip.hop_limit() <= 1 {
//!     return Ok(()); // drop, or answer with ICMP time exceeded
//! }
//! ip.decrement_ttl(); // RFC 1624 incremental checksum update
//! assert!(ip.verify_checksum());
//! if ip.next_header() == IpProtocol::UDP && !ip.is_fragment() {
//!     let udp = UdpPacket::new_checked(ip.payload())?;
//!     assert_eq!((udp.dst_port(), udp.payload()), (53, &b"hi"[..]));
//! }
//! # Ok::<(), ferrule_dataplane::wire::Error>(())
//! ```

use core::fmt;
use core::ops::Range;

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod sctp;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use ethernet::{EtherType, EthernetAddress, EthernetRepr, Frame as EthernetFrame};
pub use icmpv4::{Icmpv4Message, Icmpv4Packet, Icmpv4Repr};
pub use icmpv6::{Icmpv6Message, Icmpv6Packet, Icmpv6Repr, NdpNeighborFlags, NdpOption};
pub use ipv4::{Ipv4Cidr, Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Cidr, Ipv6FragInfo, Ipv6Packet, Ipv6Repr, Ipv6Transport};
pub use sctp::{SctpChunk, SctpPacket};
pub use tcp::{TcpFlags, TcpPacket, TcpRepr};
pub use udp::{UdpPacket, UdpRepr};
pub use vlan::{l3_offset, VlanHeader, VlanRepr};

/// Why a buffer could not be read as a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer ends before the header (or the length it declares) does.
    Truncated,
    /// A field holds a value the protocol forbids (bad version, IHL < 5, bad checksum, …).
    Malformed,
    /// Well-formed, but not something this code handles (a third VLAN tag, …).
    Unsupported,
}

impl Error {
    /// The name used in drop reasons, counters and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Error::Truncated => "truncated",
            Error::Malformed => "malformed",
            Error::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated packet",
            Error::Malformed => "malformed packet",
            Error::Unsupported => "unsupported packet",
        })
    }
}

impl std::error::Error for Error {}

/// The result of parsing a packet.
pub type Result<T> = core::result::Result<T, Error>;

/// An IPv4 or IPv6 address with a prefix length: the one prefix type of the
/// configuration, the forwarding state and the control API (routes, interface
/// addresses, subnets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpCidr {
    V4(Ipv4Cidr),
    V6(Ipv6Cidr),
}

impl IpCidr {
    /// `address/prefix_len`; [`Error::Malformed`] if the length is past the family's.
    /// Host bits are kept (an interface address).
    pub fn new(address: core::net::IpAddr, prefix_len: u8) -> Result<IpCidr> {
        Ok(match address {
            core::net::IpAddr::V4(a) => IpCidr::V4(Ipv4Cidr::new(a, prefix_len)?),
            core::net::IpAddr::V6(a) => IpCidr::V6(Ipv6Cidr::new(a, prefix_len)?),
        })
    }

    /// The host prefix of an address: /32 or /128.
    pub fn host(address: core::net::IpAddr) -> IpCidr {
        match address {
            core::net::IpAddr::V4(a) => IpCidr::V4(Ipv4Cidr::host(a)),
            core::net::IpAddr::V6(a) => IpCidr::V6(Ipv6Cidr::host(a)),
        }
    }

    /// The address as given.
    pub fn address(&self) -> core::net::IpAddr {
        match self {
            IpCidr::V4(c) => c.address().into(),
            IpCidr::V6(c) => c.address().into(),
        }
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        match self {
            IpCidr::V4(c) => c.prefix_len(),
            IpCidr::V6(c) => c.prefix_len(),
        }
    }

    /// The family's longest length: 32 or 128.
    pub fn max_len(&self) -> u8 {
        match self {
            IpCidr::V4(_) => 32,
            IpCidr::V6(_) => 128,
        }
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> core::net::IpAddr {
        match self {
            IpCidr::V4(c) => c.network().address().into(),
            IpCidr::V6(c) => c.network().address().into(),
        }
    }

    /// The same prefix with the host bits cleared (10.1.2.3/8 → 10.0.0.0/8).
    pub fn trunc(&self) -> IpCidr {
        match self {
            IpCidr::V4(c) => IpCidr::V4(c.network()),
            IpCidr::V6(c) => IpCidr::V6(c.network()),
        }
    }

    /// Whether `ip` is inside the prefix (an address of the other family never is).
    pub fn contains(&self, ip: core::net::IpAddr) -> bool {
        match (self, ip) {
            (IpCidr::V4(c), core::net::IpAddr::V4(a)) => c.contains(a),
            (IpCidr::V6(c), core::net::IpAddr::V6(a)) => c.contains(a),
            _ => false,
        }
    }

    /// Whether `other` is entirely inside this prefix: of the same family, no shorter,
    /// and within it (a prefix contains itself; the other family never is inside).
    pub fn contains_cidr(&self, other: &IpCidr) -> bool {
        match (self, other) {
            (IpCidr::V4(c), IpCidr::V4(o)) => c.contains_subnet(o),
            (IpCidr::V6(c), IpCidr::V6(o)) => c.contains_subnet(o),
            _ => false,
        }
    }

    /// The two prefixes one bit longer that make up this one, host bits cleared, the
    /// lower first (10.0.0.0/8 → 10.0.0.0/9 and 10.128.0.0/9); `None` for a host prefix.
    pub fn halves(&self) -> Option<(IpCidr, IpCidr)> {
        let net = self.trunc();
        let len = net.prefix_len() + 1;
        let low = IpCidr::new(net.address(), len).ok()?;
        // The bit the halves differ in: the last one of the longer prefix.
        let bit = u32::from(net.max_len() - len);
        let high = match net.address() {
            core::net::IpAddr::V4(a) => {
                core::net::Ipv4Addr::from_bits(a.to_bits() | (1 << bit)).into()
            }
            core::net::IpAddr::V6(a) => {
                core::net::Ipv6Addr::from_bits(a.to_bits() | (1 << bit)).into()
            }
        };
        IpCidr::new(high, len).ok().map(|high| (low, high))
    }
}

impl fmt::Display for IpCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpCidr::V4(c) => c.fmt(f),
            IpCidr::V6(c) => c.fmt(f),
        }
    }
}

/// An IP protocol number (IPv4 `protocol`, IPv6 `next header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(transparent)]
pub struct IpProtocol(pub u8);

impl IpProtocol {
    /// IPv6 Hop-by-Hop Options.
    pub const HOP_BY_HOP: IpProtocol = IpProtocol(0);
    /// ICMP for IPv4.
    pub const ICMP: IpProtocol = IpProtocol(1);
    /// TCP.
    pub const TCP: IpProtocol = IpProtocol(6);
    /// UDP.
    pub const UDP: IpProtocol = IpProtocol(17);
    /// IPv6 Routing header.
    pub const IPV6_ROUTE: IpProtocol = IpProtocol(43);
    /// IPv6 Fragment header.
    pub const IPV6_FRAG: IpProtocol = IpProtocol(44);
    /// Encapsulating Security Payload.
    pub const ESP: IpProtocol = IpProtocol(50);
    /// Authentication Header.
    pub const AH: IpProtocol = IpProtocol(51);
    /// ICMP for IPv6.
    pub const ICMPV6: IpProtocol = IpProtocol(58);
    /// IPv6 No Next Header.
    pub const IPV6_NO_NXT: IpProtocol = IpProtocol(59);
    /// IPv6 Destination Options.
    pub const IPV6_OPTS: IpProtocol = IpProtocol(60);
    /// SCTP.
    pub const SCTP: IpProtocol = IpProtocol(132);

    /// The short lower-case name ("tcp"), or `None` for a number without one here.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "hop-by-hop",
            1 => "icmp",
            6 => "tcp",
            17 => "udp",
            43 => "ipv6-route",
            44 => "ipv6-frag",
            50 => "esp",
            51 => "ah",
            58 => "icmpv6",
            59 => "ipv6-nonxt",
            60 => "ipv6-opts",
            132 => "sctp",
            _ => return None,
        })
    }

    /// The transport protocols a filter names (`tcp`, `udp`, `sctp`, `icmp`, `icmpv6`, in
    /// any case) or a number 0-255.
    pub fn parse_transport(text: &str) -> Option<IpProtocol> {
        let named = [
            IpProtocol::TCP,
            IpProtocol::UDP,
            IpProtocol::SCTP,
            IpProtocol::ICMP,
            IpProtocol::ICMPV6,
        ]
        .into_iter()
        .find(|p| p.name().is_some_and(|n| n.eq_ignore_ascii_case(text)));
        named.or_else(|| text.parse().ok().map(IpProtocol))
    }

    /// The name of a transport protocol (`tcp`, `udp`, `sctp`, `icmp`, `icmpv6`), or the
    /// number for any other.
    pub fn transport_name(self) -> String {
        match self {
            IpProtocol::TCP
            | IpProtocol::UDP
            | IpProtocol::SCTP
            | IpProtocol::ICMP
            | IpProtocol::ICMPV6 => self.to_string(),
            other => other.0.to_string(),
        }
    }

    /// Whether this number names an IPv6 extension header that `ipv6::transport` walks
    /// over (Hop-by-Hop, Routing, Fragment, Destination Options, AH).
    pub const fn is_ipv6_extension(self) -> bool {
        matches!(self.0, 0 | 43 | 44 | 51 | 60)
    }
}

impl From<u8> for IpProtocol {
    fn from(value: u8) -> Self {
        IpProtocol(value)
    }
}

impl From<IpProtocol> for u8 {
    fn from(value: IpProtocol) -> Self {
        value.0
    }
}

impl fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.0),
        }
    }
}

// Byte helpers shared by the views. Callers guarantee the range is in bounds (checked by
// `check_len`); the clamp helper is for the variable-length regions.

#[inline]
fn read_u16(data: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([data[at], data[at + 1]])
}

#[inline]
fn read_u32(data: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

#[inline]
fn write_u16(data: &mut [u8], at: usize, value: u16) {
    data[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

#[inline]
fn write_u32(data: &mut [u8], at: usize, value: u32) {
    data[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

#[inline]
fn read_ipv4(data: &[u8], at: usize) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(data[at], data[at + 1], data[at + 2], data[at + 3])
}

#[inline]
fn read_ipv6(data: &[u8], at: usize) -> std::net::Ipv6Addr {
    let mut octets = [0u8; 16];
    octets.copy_from_slice(&data[at..at + 16]);
    std::net::Ipv6Addr::from(octets)
}

/// `range` cut down to fit a buffer of `len` bytes (empty if it starts past the end).
#[inline]
fn clamp(range: Range<usize>, len: usize) -> Range<usize> {
    let end = range.end.min(len);
    range.start.min(end)..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_cidr_both_families() {
        use core::net::IpAddr;
        let v4 = IpCidr::new("10.1.2.3".parse().unwrap(), 8).unwrap();
        assert_eq!(v4.to_string(), "10.1.2.3/8");
        assert_eq!(v4.network(), "10.0.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(v4.trunc().to_string(), "10.0.0.0/8");
        assert!(v4.contains("10.200.0.1".parse().unwrap()));
        assert!(!v4.contains("11.0.0.1".parse().unwrap()));
        assert!(
            !v4.contains("::a01:203".parse().unwrap()),
            "never the other family"
        );
        assert_eq!(v4.max_len(), 32);
        let v6 = IpCidr::host("2001:db8::1".parse().unwrap());
        assert_eq!((v6.prefix_len(), v6.max_len()), (128, 128));
        assert_eq!(v6.to_string(), "2001:db8::1/128");
        assert!(IpCidr::new("10.0.0.0".parse().unwrap(), 33).is_err());
        assert!(IpCidr::new("::".parse().unwrap(), 129).is_err());
        assert_eq!(
            IpCidr::new("::".parse().unwrap(), 0).unwrap().to_string(),
            "::/0"
        );
    }

    /// `ADDR/LEN` as an [`IpCidr`], host bits kept.
    fn c(text: &str) -> IpCidr {
        let (addr, len) = text.split_once('/').unwrap();
        IpCidr::new(addr.parse().unwrap(), len.parse().unwrap()).unwrap()
    }

    #[test]
    fn ip_cidr_containment_of_prefixes() {
        assert!(c("10.0.0.0/8").contains_cidr(&c("10.1.2.3/32")));
        assert!(c("10.0.0.0/8").contains_cidr(&c("10.0.0.0/8")), "itself");
        assert!(
            c("10.9.9.9/8").contains_cidr(&c("10.0.0.0/9")),
            "host bits ignored"
        );
        assert!(
            !c("10.0.0.0/9").contains_cidr(&c("10.0.0.0/8")),
            "not a shorter one"
        );
        assert!(!c("10.0.0.0/8").contains_cidr(&c("11.0.0.0/16")));
        assert!(c("0.0.0.0/0").contains_cidr(&c("255.255.255.255/32")));
        assert!(
            !c("0.0.0.0/0").contains_cidr(&c("::/128")),
            "never the other family"
        );
        assert!(!c("::/0").contains_cidr(&c("10.0.0.0/8")));
        assert!(c("fd00::/8").contains_cidr(&c("fdff::1/128")));
        assert!(!c("fd00::/8").contains_cidr(&c("fe00::/16")));
    }

    #[test]
    fn ip_cidr_halves() {
        let texts = |cidr: IpCidr| cidr.halves().map(|(a, b)| (a.to_string(), b.to_string()));
        let pair = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
        assert_eq!(texts(c("10.0.0.0/8")), pair("10.0.0.0/9", "10.128.0.0/9"));
        assert_eq!(texts(c("10.1.2.3/8")), pair("10.0.0.0/9", "10.128.0.0/9"));
        assert_eq!(texts(c("0.0.0.0/0")), pair("0.0.0.0/1", "128.0.0.0/1"));
        assert_eq!(texts(c("10.0.0.2/31")), pair("10.0.0.2/32", "10.0.0.3/32"));
        assert_eq!(texts(c("10.0.0.1/32")), None);
        assert_eq!(texts(c("::/0")), pair("::/1", "8000::/1"));
        assert_eq!(texts(c("fd00::/126")), pair("fd00::/127", "fd00::2/127"));
        assert_eq!(texts(c("fd00::1/128")), None);
        let (low, high) = c("192.168.0.0/16").halves().unwrap();
        assert!(
            c("192.168.0.0/16").contains_cidr(&low) && c("192.168.0.0/16").contains_cidr(&high)
        );
        assert!(!low.contains_cidr(&high) && !high.contains_cidr(&low));
    }

    #[test]
    fn ip_protocol_names() {
        assert_eq!(IpProtocol::TCP.to_string(), "tcp");
        assert_eq!(IpProtocol::ICMPV6.to_string(), "icmpv6");
        assert_eq!(IpProtocol(253).to_string(), "253");
        assert_eq!(IpProtocol::from(17), IpProtocol::UDP);
        assert_eq!(u8::from(IpProtocol::SCTP), 132);
        assert!(IpProtocol::IPV6_FRAG.is_ipv6_extension());
        assert!(!IpProtocol::ESP.is_ipv6_extension());
    }

    #[test]
    fn error_display() {
        assert_eq!(Error::Truncated.to_string(), "truncated packet");
        assert_eq!(Error::Malformed.name(), "malformed");
        let boxed: Box<dyn std::error::Error> = Box::new(Error::Unsupported);
        assert_eq!(boxed.to_string(), "unsupported packet");
    }

    #[test]
    fn clamp_cuts_to_buffer() {
        assert_eq!(clamp(2..10, 5), 2..5);
        assert_eq!(clamp(7..10, 5), 5..5);
        assert_eq!(clamp(2..4, 5), 2..4);
        // A header length past the total length (after a setter) gives an empty range.
        let (start, end) = (6, 4);
        assert_eq!(clamp(start..end, 5), 4..4);
    }
}
