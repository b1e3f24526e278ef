//! IPv6 (RFC 8200): the fixed-header view and repr, the extension-header walk to the
//! transport header (`transport`), `Ipv6Cidr`, and address helpers for NDP.

use core::fmt;
use core::str::FromStr;
use std::net::Ipv6Addr;

use super::{
    clamp, read_ipv6, read_u16, read_u32, write_u16, write_u32, Error, IpProtocol, Result,
};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

/// Most extension headers [`transport`] walks before giving up with [`Error::Malformed`].
pub const MAX_EXTENSION_HEADERS: usize = 8;

mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: usize = 8;
    pub const DST_ADDR: usize = 24;
}

/// A view of an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buffer` without checking it.
    pub const fn new_unchecked(buffer: T) -> Ipv6Packet<T> {
        Ipv6Packet { buffer }
    }

    /// Wraps `buffer` and runs [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Ipv6Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Wraps the IPv6 packet quoted inside an ICMPv6 error: like `new_checked`, except
    /// that the payload length may exceed the buffer. [`payload`](Self::payload) then
    /// ends at the end of the buffer.
    pub fn new_quoted(buffer: T) -> Result<Ipv6Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_header()?;
        Ok(packet)
    }

    fn check_header(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// [`Error::Truncated`] if the buffer is shorter than 40 bytes or than
    /// 40 + `payload_len`; [`Error::Malformed`] if the version is not 6. Bytes past the
    /// payload length (Ethernet padding) are ignored. Jumbograms (payload length 0 with a
    /// Jumbo Payload option) are not supported: their payload reads as empty.
    pub fn check_len(&self) -> Result<()> {
        self.check_header()?;
        if HEADER_LEN + usize::from(self.payload_len()) > self.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The IP version (6).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }

    /// Traffic class (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        ((read_u16(self.buffer.as_ref(), field::VER_TC_FLOW) >> 4) & 0xFF) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000F_FFFF
    }

    /// Payload length (everything after the fixed header, extension headers included).
    pub fn payload_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The header after the fixed header (an extension header or the transport).
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        read_ipv6(self.buffer.as_ref(), field::SRC_ADDR)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        read_ipv6(self.buffer.as_ref(), field::DST_ADDR)
    }

    fn payload_range(&self) -> core::ops::Range<usize> {
        let len = self.buffer.as_ref().len();
        clamp(
            HEADER_LEN..HEADER_LEN + usize::from(self.payload_len()),
            len,
        )
    }

    /// The payload (extension headers included), bounded by the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    /// The packet from its first byte to the end of its payload (padding excluded).
    pub fn packet(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[..self.payload_range().end]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Packet<&'a T> {
    /// The payload with the lifetime of the underlying buffer, for chaining views.
    pub fn into_payload(self) -> &'a [u8] {
        let range = self.payload_range();
        &self.buffer.as_ref()[range]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the version.
    pub fn set_version(&mut self, version: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_TC_FLOW];
        *b = (*b & 0x0F) | (version << 4);
    }

    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let raw = read_u16(self.buffer.as_ref(), field::VER_TC_FLOW);
        let raw = (raw & 0xF00F) | (u16::from(tc) << 4);
        write_u16(self.buffer.as_mut(), field::VER_TC_FLOW, raw);
    }

    /// Sets the flow label (low 20 bits).
    pub fn set_flow_label(&mut self, label: u32) {
        let raw = read_u32(self.buffer.as_ref(), field::VER_TC_FLOW);
        let raw = (raw & 0xFFF0_0000) | (label & 0x000F_FFFF);
        write_u32(self.buffer.as_mut(), field::VER_TC_FLOW, raw);
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, next: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = next.0;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, hop_limit: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hop_limit;
    }

    /// Decrements the hop limit (IPv6 has no header checksum) and returns the new value;
    /// 0 stays 0.
    pub fn decrement_hop_limit(&mut self) -> u8 {
        let hop_limit = self.hop_limit().saturating_sub(1);
        self.set_hop_limit(hop_limit);
        hop_limit
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR..field::SRC_ADDR + 16].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR..field::DST_ADDR + 16].copy_from_slice(&addr.octets());
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.payload_range();
        &mut self.buffer.as_mut()[range]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv6Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The owned contents of the fixed IPv6 header (traffic class and flow label are not
/// represented; `emit` writes them as zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    pub src_addr: Ipv6Addr,
    pub dst_addr: Ipv6Addr,
    pub next_header: IpProtocol,
    /// The payload length field.
    pub payload_len: usize,
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Reads the fixed header.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        packet.check_len()?;
        Ok(Ipv6Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
        })
    }

    /// Bytes the fixed header takes (40).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the fixed header (payload length saturating at 65535).
    ///
    /// # Panics
    /// If the buffer is shorter than 40 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) {
        write_u32(packet.buffer.as_mut(), field::VER_TC_FLOW, 0x6000_0000);
        packet.set_payload_len(self.payload_len.min(usize::from(u16::MAX)) as u16);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

impl fmt::Display for Ipv6Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ipv6 src={} dst={} nxt={} len={} hlim={}",
            self.src_addr, self.dst_addr, self.next_header, self.payload_len, self.hop_limit
        )
    }
}

/// What an IPv6 Fragment header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6FragInfo {
    /// Fragment offset in bytes.
    pub offset: u16,
    /// More Fragments.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

impl Ipv6FragInfo {
    /// Whether the header actually fragments (offset ≠ 0 or M set); an "atomic fragment"
    /// (RFC 6946) does not.
    pub const fn is_fragmenting(&self) -> bool {
        self.offset != 0 || self.more
    }
}

/// Where the transport header of an IPv6 packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Transport {
    /// The upper-layer protocol (or ESP / No Next Header, which end the walk).
    pub protocol: IpProtocol,
    /// Offset of the transport header from the start of the IPv6 header.
    pub offset: usize,
    /// The Fragment header, if the packet has one.
    pub fragment: Option<Ipv6FragInfo>,
}

impl Ipv6Transport {
    /// Whether the transport header is present: false for a non-first fragment.
    pub const fn has_transport_header(&self) -> bool {
        match self.fragment {
            Some(frag) => frag.offset == 0,
            None => true,
        }
    }
}

/// Walks the extension headers of `packet` to its transport header.
///
/// Hop-by-Hop (only directly after the fixed header), Routing, Destination Options
/// (`(len + 1) × 8` bytes), Fragment (8 bytes) and AH (`(len + 2) × 4` bytes) are skipped.
/// The walk stops at the first other header, at ESP and at No Next Header, and after a
/// non-first fragment's Fragment header (with `protocol` that header's next header and
/// `offset` at the fragment data). Errors: [`Error::Truncated`] when a header runs past the
/// payload length; [`Error::Malformed`] for more than [`MAX_EXTENSION_HEADERS`] headers, a
/// misplaced Hop-by-Hop header, a second Fragment header, or an AH shorter than 12 bytes.
pub fn transport<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Ipv6Transport> {
    walk(packet, |_, _| {})
}

/// The destination address for the TCP/UDP/ICMPv6 pseudo-header (RFC 8200 §8.1): the
/// final destination, which for a packet with a Routing header that still has segments
/// left is in the Routing header (the last address of a type 0 or type 2 header, Segment
/// List\[0\] of a Segment Routing Header), not in the IPv6 destination field. Errors as
/// for [`transport`].
pub fn pseudo_header_dst<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Ipv6Addr> {
    let mut final_dst = None;
    walk(packet, |protocol, header| {
        if protocol != IpProtocol::IPV6_ROUTE || header[3] == 0 {
            return;
        }
        let at = match header[2] {
            // Type 0 (deprecated) and type 2 (Mobile IPv6): a list of addresses from
            // byte 8, the last one is the final destination.
            0 | 2 if header.len() >= 24 => 8 + (header.len() - 8) / 16 * 16 - 16,
            // Type 4 (SRv6 SRH): Segment List[0], the last segment, at byte 8.
            4 if header.len() >= 24 => 8,
            _ => return,
        };
        final_dst = Some(read_ipv6(header, at));
    })?;
    Ok(final_dst.unwrap_or_else(|| packet.dst_addr()))
}

/// The extension-header walk behind [`transport`]; `on_header` sees each extension
/// header's protocol and bytes.
fn walk<T: AsRef<[u8]>>(
    packet: &Ipv6Packet<T>,
    mut on_header: impl FnMut(IpProtocol, &[u8]),
) -> Result<Ipv6Transport> {
    packet.check_len()?;
    let data = packet.packet();
    let mut next = packet.next_header();
    let mut offset = HEADER_LEN;
    let mut fragment: Option<Ipv6FragInfo> = None;
    let mut count = 0;
    loop {
        let len = match next {
            IpProtocol::HOP_BY_HOP | IpProtocol::IPV6_ROUTE | IpProtocol::IPV6_OPTS => {
                if next == IpProtocol::HOP_BY_HOP && count != 0 {
                    return Err(Error::Malformed);
                }
                let len_byte = *data.get(offset + 1).ok_or(Error::Truncated)?;
                (usize::from(len_byte) + 1) * 8
            }
            IpProtocol::IPV6_FRAG => {
                if fragment.is_some() {
                    return Err(Error::Malformed);
                }
                8
            }
            IpProtocol::AH => {
                let len_byte = *data.get(offset + 1).ok_or(Error::Truncated)?;
                if len_byte == 0 {
                    return Err(Error::Malformed);
                }
                (usize::from(len_byte) + 2) * 4
            }
            protocol => {
                return Ok(Ipv6Transport {
                    protocol,
                    offset,
                    fragment,
                })
            }
        };
        if count == MAX_EXTENSION_HEADERS {
            return Err(Error::Malformed);
        }
        count += 1;
        let header = data.get(offset..offset + len).ok_or(Error::Truncated)?;
        on_header(next, header);
        let header_next = IpProtocol(header[0]);
        offset += len;
        if next == IpProtocol::IPV6_FRAG {
            let raw = read_u16(header, 2);
            let info = Ipv6FragInfo {
                offset: raw & 0xFFF8,
                more: raw & 1 != 0,
                ident: read_u32(header, 4),
            };
            fragment = Some(info);
            if info.offset != 0 {
                return Ok(Ipv6Transport {
                    protocol: header_next,
                    offset,
                    fragment,
                });
            }
        }
        next = header_next;
    }
}

/// Whether `addr` is link-local unicast (fe80::/10).
pub const fn is_link_local(addr: &Ipv6Addr) -> bool {
    addr.segments()[0] & 0xFFC0 == 0xFE80
}

/// The solicited-node multicast group of `addr` (RFC 4291 §2.7.1):
/// ff02::1:ffXX:XXXX with the low 24 bits of the address.
pub const fn solicited_node(addr: &Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(
        0xFF02,
        0,
        0,
        0,
        0,
        1,
        0xFF00 | o[13] as u16,
        ((o[14] as u16) << 8) | o[15] as u16,
    )
}

/// Whether `addr` is a solicited-node multicast group (ff02::1:ff00:0/104).
pub const fn is_solicited_node(addr: &Ipv6Addr) -> bool {
    let s = addr.segments();
    s[0] == 0xFF02
        && s[1] == 0
        && s[2] == 0
        && s[3] == 0
        && s[4] == 0
        && s[5] == 1
        && s[6] & 0xFF00 == 0xFF00
}

/// An IPv6 address with a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv6Cidr {
    address: Ipv6Addr,
    prefix_len: u8,
}

impl Ipv6Cidr {
    /// The host prefix of an address (/128).
    pub const fn host(address: Ipv6Addr) -> Ipv6Cidr {
        Ipv6Cidr {
            address,
            prefix_len: 128,
        }
    }

    /// `address/prefix_len`; [`Error::Malformed`] if `prefix_len` > 128.
    pub const fn new(address: Ipv6Addr, prefix_len: u8) -> Result<Ipv6Cidr> {
        if prefix_len > 128 {
            return Err(Error::Malformed);
        }
        Ok(Ipv6Cidr {
            address,
            prefix_len,
        })
    }

    /// The mask for a prefix length (0 for /0; lengths past 128 count as 128).
    pub const fn mask_of(prefix_len: u8) -> u128 {
        match u128::MAX.checked_shl(128u32.saturating_sub(prefix_len as u32)) {
            Some(mask) => mask,
            None => 0,
        }
    }

    /// The address as given.
    pub const fn address(&self) -> Ipv6Addr {
        self.address
    }

    /// The prefix length.
    pub const fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// The netmask as an address.
    pub const fn netmask(&self) -> Ipv6Addr {
        Ipv6Addr::from_bits(Self::mask_of(self.prefix_len))
    }

    /// The same prefix with the host bits cleared.
    pub const fn network(&self) -> Ipv6Cidr {
        let bits = self.address.to_bits() & Self::mask_of(self.prefix_len);
        Ipv6Cidr {
            address: Ipv6Addr::from_bits(bits),
            prefix_len: self.prefix_len,
        }
    }

    /// Whether `addr` is inside the prefix.
    pub const fn contains(&self, addr: Ipv6Addr) -> bool {
        let mask = Self::mask_of(self.prefix_len);
        addr.to_bits() & mask == self.address.to_bits() & mask
    }

    /// Whether `other` is entirely inside this prefix.
    pub const fn contains_subnet(&self, other: &Ipv6Cidr) -> bool {
        other.prefix_len >= self.prefix_len && self.contains(other.address)
    }
}

impl fmt::Display for Ipv6Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

impl FromStr for Ipv6Cidr {
    type Err = Error;

    /// `addr/len`; a bare address is a /128. [`Error::Malformed`] otherwise.
    fn from_str(s: &str) -> Result<Self> {
        let (addr, len) = match s.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (s, None),
        };
        let address: Ipv6Addr = addr.parse().map_err(|_| Error::Malformed)?;
        let prefix_len = match len {
            Some(len) if !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit()) => {
                len.parse::<u8>().map_err(|_| Error::Malformed)?
            }
            Some(_) => return Err(Error::Malformed),
            None => 128,
        };
        Ipv6Cidr::new(address, prefix_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // fe80::1 → ff02::1, tc 0xb8, flow 0x12345, hop limit 255, next header UDP, 12 bytes
    // of payload (an 8-byte UDP header + 4 bytes), then 2 bytes of padding.
    static PACKET: [u8; 54] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x0c, 0x11, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x04, 0xd2, 0x16, 0x2e, 0x00,
        0x0c, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00,
    ];

    fn src() -> Ipv6Addr {
        "fe80::1".parse().unwrap()
    }

    fn dst() -> Ipv6Addr {
        "ff02::1".parse().unwrap()
    }

    #[test]
    fn fields() {
        let packet = Ipv6Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(packet.version(), 6);
        assert_eq!(packet.traffic_class(), 0xb8);
        assert_eq!(packet.flow_label(), 0x12345);
        assert_eq!(packet.payload_len(), 12);
        assert_eq!(packet.next_header(), IpProtocol::UDP);
        assert_eq!(packet.hop_limit(), 255);
        assert_eq!(packet.src_addr(), src());
        assert_eq!(packet.dst_addr(), dst());
        assert_eq!(packet.payload(), &PACKET[40..52]);
        assert_eq!(packet.packet(), &PACKET[..52]);
        assert_eq!(
            transport(&packet),
            Ok(Ipv6Transport {
                protocol: IpProtocol::UDP,
                offset: 40,
                fragment: None
            })
        );
    }

    #[test]
    fn repr_round_trip() {
        let mut bytes = PACKET;
        bytes[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
        let packet = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        let repr = Ipv6Repr::parse(&packet).unwrap();
        assert_eq!(
            repr,
            Ipv6Repr {
                src_addr: src(),
                dst_addr: dst(),
                next_header: IpProtocol::UDP,
                payload_len: 12,
                hop_limit: 255
            }
        );
        let mut out = [0u8; 54];
        out[40..].copy_from_slice(&bytes[40..]);
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn setters_then_getters() {
        let mut bytes = PACKET;
        let mut packet = Ipv6Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_traffic_class(0x03);
        packet.set_flow_label(0xFFFF_FFFF);
        assert_eq!(packet.version(), 6);
        assert_eq!(packet.traffic_class(), 0x03);
        assert_eq!(packet.flow_label(), 0xF_FFFF);
        packet.set_flow_label(7);
        assert_eq!((packet.traffic_class(), packet.flow_label()), (0x03, 7));
        packet.set_payload_len(4);
        packet.set_next_header(IpProtocol::TCP);
        packet.set_hop_limit(2);
        assert_eq!(packet.decrement_hop_limit(), 1);
        assert_eq!(packet.decrement_hop_limit(), 0);
        assert_eq!(packet.decrement_hop_limit(), 0);
        packet.set_src_addr(dst());
        packet.set_dst_addr(src());
        assert_eq!(packet.payload().len(), 4);
        assert_eq!(packet.next_header(), IpProtocol::TCP);
        assert_eq!((packet.src_addr(), packet.dst_addr()), (dst(), src()));
        packet.set_payload_len(0xFFFF);
        assert_eq!(packet.payload().len(), 14);
        assert_eq!(packet.payload_mut().len(), 14);
        packet.set_version(4);
        assert_eq!(bytes[0], 0x40);
    }

    #[test]
    fn check_len_errors() {
        for len in 0..52 {
            assert_eq!(
                Ipv6Packet::new_checked(&PACKET[..len]),
                Err(Error::Truncated),
                "{len}"
            );
        }
        let mut bad = PACKET;
        bad[0] = 0x4b;
        assert_eq!(Ipv6Packet::new_checked(&bad[..]), Err(Error::Malformed));
        assert!(Ipv6Packet::new_quoted(&PACKET[..44]).is_ok());
        assert_eq!(
            Ipv6Packet::new_quoted(&PACKET[..44])
                .unwrap()
                .payload()
                .len(),
            4
        );
    }

    /// Builds an IPv6 packet with `exts` (each `(next header of this ext, bytes)`), first
    /// header `first`, ending in `tail`.
    fn with_exts(first: IpProtocol, exts: &[Vec<u8>], tail: &[u8]) -> Vec<u8> {
        let mut bytes = PACKET[..40].to_vec();
        bytes[6] = first.0;
        for ext in exts {
            bytes.extend_from_slice(ext);
        }
        bytes.extend_from_slice(tail);
        let len = (bytes.len() - 40) as u16;
        bytes[4..6].copy_from_slice(&len.to_be_bytes());
        bytes
    }

    fn opts(next: IpProtocol, len8: u8) -> Vec<u8> {
        let mut ext = vec![0u8; (usize::from(len8) + 1) * 8];
        ext[0] = next.0;
        ext[1] = len8;
        ext[2] = 1; // PadN
        ext[3] = ext.len() as u8 - 4;
        ext
    }

    fn frag(next: IpProtocol, offset: u16, more: bool, ident: u32) -> Vec<u8> {
        let mut ext = vec![next.0, 0];
        ext.extend_from_slice(&(offset | u16::from(more)).to_be_bytes());
        ext.extend_from_slice(&ident.to_be_bytes());
        ext
    }

    fn ah(next: IpProtocol, len4: u8) -> Vec<u8> {
        let mut ext = vec![0u8; (usize::from(len4) + 2) * 4];
        ext[0] = next.0;
        ext[1] = len4;
        ext
    }

    fn walk(bytes: &[u8]) -> Result<Ipv6Transport> {
        transport(&Ipv6Packet::new_checked(bytes)?)
    }

    #[test]
    fn walk_extension_chain() {
        let exts = [
            opts(IpProtocol::IPV6_ROUTE, 0),
            opts(IpProtocol::IPV6_OPTS, 1),
            opts(IpProtocol::IPV6_FRAG, 0),
            frag(IpProtocol::AH, 0, true, 0xdead_beef),
            ah(IpProtocol::TCP, 4),
        ];
        let bytes = with_exts(IpProtocol::HOP_BY_HOP, &exts, &[0; 20]);
        assert_eq!(
            walk(&bytes),
            Ok(Ipv6Transport {
                protocol: IpProtocol::TCP,
                offset: 40 + 8 + 16 + 8 + 8 + 24,
                fragment: Some(Ipv6FragInfo {
                    offset: 0,
                    more: true,
                    ident: 0xdead_beef
                }),
            })
        );
    }

    #[test]
    fn walk_non_first_fragment_stops() {
        let exts = [frag(IpProtocol::IPV6_OPTS, 1448, false, 7)];
        // The "options header" after it is fragment data and must not be walked.
        let bytes = with_exts(IpProtocol::IPV6_FRAG, &exts, &[0xff; 3]);
        let t = walk(&bytes).unwrap();
        assert_eq!(t.protocol, IpProtocol::IPV6_OPTS);
        assert_eq!(t.offset, 48);
        assert_eq!(
            t.fragment,
            Some(Ipv6FragInfo {
                offset: 1448,
                more: false,
                ident: 7
            })
        );
        assert!(!t.has_transport_header());
    }

    #[test]
    fn walk_stops_at_esp_and_no_next() {
        let bytes = with_exts(IpProtocol::IPV6_OPTS, &[opts(IpProtocol::ESP, 0)], &[1; 16]);
        assert_eq!(walk(&bytes).unwrap().protocol, IpProtocol::ESP);
        assert_eq!(walk(&bytes).unwrap().offset, 48);
        let bytes = with_exts(IpProtocol::IPV6_NO_NXT, &[], &[]);
        assert_eq!(walk(&bytes).unwrap().protocol, IpProtocol::IPV6_NO_NXT);
    }

    #[test]
    fn walk_errors() {
        // Eight headers are fine, nine are not.
        let eight: Vec<_> = (0..8)
            .map(|i| {
                opts(
                    if i == 7 {
                        IpProtocol::UDP
                    } else {
                        IpProtocol::IPV6_OPTS
                    },
                    0,
                )
            })
            .collect();
        let bytes = with_exts(IpProtocol::IPV6_OPTS, &eight, &[0; 8]);
        assert_eq!(walk(&bytes).unwrap().offset, 40 + 64);
        let nine: Vec<_> = (0..9)
            .map(|i| {
                opts(
                    if i == 8 {
                        IpProtocol::UDP
                    } else {
                        IpProtocol::IPV6_OPTS
                    },
                    0,
                )
            })
            .collect();
        let bytes = with_exts(IpProtocol::IPV6_OPTS, &nine, &[0; 8]);
        assert_eq!(walk(&bytes), Err(Error::Malformed));

        // A header whose length runs past the payload (the packet is otherwise complete).
        let mut bytes = with_exts(IpProtocol::IPV6_ROUTE, &[opts(IpProtocol::UDP, 0)], &[]);
        bytes[41] = 3;
        assert_eq!(walk(&bytes), Err(Error::Truncated));
        // Cut inside each header of a chain, with the payload length adjusted to match.
        let exts = [
            opts(IpProtocol::IPV6_FRAG, 1),
            frag(IpProtocol::AH, 0, false, 1),
            ah(IpProtocol::UDP, 1),
        ];
        let full = with_exts(IpProtocol::HOP_BY_HOP, &exts, &[]);
        assert!(walk(&full).is_ok());
        for cut in 40..full.len() {
            let mut short = full[..cut].to_vec();
            short[4..6].copy_from_slice(&((cut - 40) as u16).to_be_bytes());
            assert_eq!(walk(&short), Err(Error::Truncated), "cut at {cut}");
        }

        let hbh_late = with_exts(
            IpProtocol::IPV6_OPTS,
            &[opts(IpProtocol::HOP_BY_HOP, 0), opts(IpProtocol::UDP, 0)],
            &[],
        );
        assert_eq!(walk(&hbh_late), Err(Error::Malformed));
        let two_frags = with_exts(
            IpProtocol::IPV6_FRAG,
            &[
                frag(IpProtocol::IPV6_FRAG, 0, true, 1),
                frag(IpProtocol::UDP, 0, true, 1),
            ],
            &[],
        );
        assert_eq!(walk(&two_frags), Err(Error::Malformed));
        let short_ah = with_exts(IpProtocol::AH, &[ah(IpProtocol::UDP, 0)], &[]);
        assert_eq!(walk(&short_ah), Err(Error::Malformed));
    }

    #[test]
    fn pseudo_header_dst_from_routing_header() {
        let a: Ipv6Addr = "2001:db8::a".parse().unwrap();
        let b: Ipv6Addr = "2001:db8::b".parse().unwrap();
        let routing = |kind: u8, segments_left: u8, addrs: &[Ipv6Addr]| {
            let mut ext = vec![
                IpProtocol::UDP.0,
                (addrs.len() * 2) as u8,
                kind,
                segments_left,
            ];
            ext.extend_from_slice(&[0; 4]);
            for addr in addrs {
                ext.extend_from_slice(&addr.octets());
            }
            ext
        };
        let walk_dst = |bytes: &[u8]| pseudo_header_dst(&Ipv6Packet::new_checked(bytes).unwrap());
        // No routing header: the destination field.
        assert_eq!(walk_dst(&PACKET[..]), Ok(dst()));
        // Type 0 with segments left: the last address.
        let bytes = with_exts(IpProtocol::IPV6_ROUTE, &[routing(0, 2, &[a, b])], &[0; 8]);
        assert_eq!(walk_dst(&bytes), Ok(b));
        // Segments left 0: the destination field already is the final destination.
        let bytes = with_exts(IpProtocol::IPV6_ROUTE, &[routing(0, 0, &[a, b])], &[0; 8]);
        assert_eq!(walk_dst(&bytes), Ok(dst()));
        // Type 2 (one address) and type 4 (SRH: Segment List[0] is the final segment).
        let bytes = with_exts(IpProtocol::IPV6_ROUTE, &[routing(2, 1, &[a])], &[0; 8]);
        assert_eq!(walk_dst(&bytes), Ok(a));
        let bytes = with_exts(IpProtocol::IPV6_ROUTE, &[routing(4, 1, &[a, b])], &[0; 8]);
        assert_eq!(walk_dst(&bytes), Ok(a));
        // Unknown routing type, or no room for an address: the destination field.
        let bytes = with_exts(IpProtocol::IPV6_ROUTE, &[routing(3, 1, &[a])], &[0; 8]);
        assert_eq!(walk_dst(&bytes), Ok(dst()));
        let bytes = with_exts(IpProtocol::IPV6_ROUTE, &[routing(0, 1, &[])], &[0; 8]);
        assert_eq!(walk_dst(&bytes), Ok(dst()));
    }

    #[test]
    fn address_helpers() {
        assert!(is_link_local(&"fe80::1".parse().unwrap()));
        assert!(is_link_local(&"febf::1".parse().unwrap()));
        assert!(!is_link_local(&"fec0::1".parse().unwrap()));
        assert!(!is_link_local(&"2001:db8::1".parse().unwrap()));
        let addr: Ipv6Addr = "2001:db8::2aa:ff:fe28:9c5a".parse().unwrap();
        let group = solicited_node(&addr);
        assert_eq!(group, "ff02::1:ff28:9c5a".parse::<Ipv6Addr>().unwrap());
        assert!(is_solicited_node(&group));
        assert!(!is_solicited_node(&addr));
    }

    #[test]
    fn cidr() {
        let cidr: Ipv6Cidr = "2001:db8:1::5/48".parse().unwrap();
        assert_eq!(cidr.network().to_string(), "2001:db8:1::/48");
        assert!(cidr.contains("2001:db8:1:ffff::1".parse().unwrap()));
        assert!(!cidr.contains("2001:db8:2::1".parse().unwrap()));
        assert_eq!(
            cidr.netmask(),
            "ffff:ffff:ffff::".parse::<Ipv6Addr>().unwrap()
        );
        let all: Ipv6Cidr = "::/0".parse().unwrap();
        assert!(all.contains(Ipv6Addr::LOCALHOST));
        assert!(all.contains_subnet(&cidr) && !cidr.contains_subnet(&all));
        let host: Ipv6Cidr = "::1".parse().unwrap();
        assert_eq!(host.prefix_len(), 128);
        assert_eq!(host.address(), Ipv6Addr::LOCALHOST);
        for bad in ["::/129", "::/", "::/-1", "10.0.0.0/8", "::1/64/1"] {
            assert_eq!(bad.parse::<Ipv6Cidr>(), Err(Error::Malformed), "{bad}");
        }
    }
}
