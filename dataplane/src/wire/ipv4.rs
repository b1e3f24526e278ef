//! IPv4 (RFC 791): the header view with TTL decrement and NAT rewrites that keep the
//! checksum by RFC 1624, the 20-byte header repr, and `Ipv4Cidr` for routes and subnets.

use core::fmt;
use core::str::FromStr;
use std::net::Ipv4Addr;

use super::checksum;
use super::{clamp, read_ipv4, read_u16, write_u16, Error, IpProtocol, Result};

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

/// Largest header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC_ADDR: usize = 12;
    pub const DST_ADDR: usize = 16;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1FFF;

/// A view of an IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buffer` without checking it.
    pub const fn new_unchecked(buffer: T) -> Ipv4Packet<T> {
        Ipv4Packet { buffer }
    }

    /// Wraps `buffer` and runs [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Wraps the IPv4 packet quoted inside an ICMP error: like `new_checked`, except that
    /// `total_len` may exceed the buffer (the quote is usually only the first bytes of the
    /// datagram). [`payload`](Self::payload) then ends at the end of the buffer.
    pub fn new_quoted(buffer: T) -> Result<Ipv4Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_header()?;
        Ok(packet)
    }

    fn check_header(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 {
            return Err(Error::Malformed);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if header_len > data.len() {
            return Err(Error::Truncated);
        }
        if usize::from(self.total_len()) < header_len {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Checks the header against the buffer:
    /// [`Error::Truncated`] if the buffer is shorter than 20 bytes, than the header length,
    /// or than `total_len`; [`Error::Malformed`] if the version is not 4, IHL < 5, or
    /// `total_len` < the header length. Bytes past `total_len` (Ethernet padding) are
    /// allowed and ignored.
    pub fn check_len(&self) -> Result<()> {
        self.check_header()?;
        if usize::from(self.total_len()) > self.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The IP version (4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0F) * 4
    }

    /// Differentiated Services Code Point.
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// Explicit Congestion Notification.
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// Total length of the datagram (header + payload).
    pub fn total_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Don't Fragment.
    pub fn dont_frag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    /// More Fragments.
    pub fn more_frags(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (read_u16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// Whether this is a fragment (MF set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// Whether this is the first fragment of a fragmented datagram (MF set, offset 0):
    /// it carries the transport header. Any packet with offset 0 does.
    pub fn is_first_fragment(&self) -> bool {
        self.more_frags() && self.frag_offset() == 0
    }

    /// Time to live.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol of the payload.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// The header checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::SRC_ADDR)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::DST_ADDR)
    }

    /// The header bytes (clamped to the buffer).
    pub fn header(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[clamp(0..self.header_len(), data.len())]
    }

    /// The options (the header past its first 20 bytes).
    pub fn options(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[clamp(HEADER_LEN..self.header_len(), data.len())]
    }

    /// The payload: from the end of the header to `total_len` (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[self.payload_range()]
    }

    fn payload_range(&self) -> core::ops::Range<usize> {
        let len = self.buffer.as_ref().len();
        clamp(self.header_len()..usize::from(self.total_len()), len)
    }

    /// Whether the header checksum is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let header = self.header();
        // The common header without options, as five words of a known length.
        let sum = match <&[u8; 20]>::try_from(header) {
            Ok(h) => checksum::sum(h),
            Err(_) => checksum::sum(header),
        };
        checksum::fold(sum) == 0xFFFF
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// The payload with the lifetime of the underlying buffer, for chaining views.
    pub fn into_payload(self) -> &'a [u8] {
        let range = self.payload_range();
        &self.buffer.as_ref()[range]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the version.
    pub fn set_version(&mut self, version: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0F) | (version << 4);
    }

    /// Sets the header length in bytes (rounded down to a multiple of 4, at most 60).
    pub fn set_header_len(&mut self, len: usize) {
        let ihl = (len / 4).min(15) as u8;
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xF0) | ihl;
    }

    /// Sets the DSCP (low 6 bits).
    pub fn set_dscp(&mut self, dscp: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0x03) | (dscp << 2);
    }

    /// Sets the ECN (low 2 bits).
    pub fn set_ecn(&mut self, ecn: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0xFC) | (ecn & 0x03);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, ident: u16) {
        write_u16(self.buffer.as_mut(), field::IDENT, ident);
    }

    fn set_flag(&mut self, flag: u16, on: bool) {
        let raw = read_u16(self.buffer.as_ref(), field::FLG_OFF);
        let raw = if on { raw | flag } else { raw & !flag };
        write_u16(self.buffer.as_mut(), field::FLG_OFF, raw);
    }

    /// Clears the flags (reserved, DF, MF), keeping the offset.
    pub fn clear_flags(&mut self) {
        let raw = read_u16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK;
        write_u16(self.buffer.as_mut(), field::FLG_OFF, raw);
    }

    /// Sets Don't Fragment.
    pub fn set_dont_frag(&mut self, value: bool) {
        self.set_flag(FLAG_DF, value);
    }

    /// Sets More Fragments.
    pub fn set_more_frags(&mut self, value: bool) {
        self.set_flag(FLAG_MF, value);
    }

    /// Sets the fragment offset in bytes (rounded down to a multiple of 8).
    pub fn set_frag_offset(&mut self, offset: u16) {
        let raw = read_u16(self.buffer.as_ref(), field::FLG_OFF);
        let raw = (raw & !OFFSET_MASK) | (offset >> 3);
        write_u16(self.buffer.as_mut(), field::FLG_OFF, raw);
    }

    /// Sets the TTL (checksum untouched; see [`decrement_ttl`](Self::decrement_ttl)).
    pub fn set_hop_limit(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the protocol.
    pub fn set_next_header(&mut self, protocol: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = protocol.0;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the source address (checksum untouched).
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR..field::SRC_ADDR + 4].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address (checksum untouched).
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR..field::DST_ADDR + 4].copy_from_slice(&addr.octets());
    }

    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let csum = !checksum::data(self.header());
        self.set_checksum(csum);
    }

    /// Decrements the TTL, updates the checksum incrementally (RFC 1624) and returns the
    /// new TTL. A TTL of 0 is left alone (and 0 returned): the caller drops packets whose
    /// TTL would expire before calling this.
    pub fn decrement_ttl(&mut self) -> u8 {
        let ttl = self.hop_limit();
        if ttl == 0 {
            return 0;
        }
        let proto = u16::from(self.next_header().0);
        let old = (u16::from(ttl) << 8) | proto;
        let new = (u16::from(ttl - 1) << 8) | proto;
        let csum = checksum::update16(self.checksum(), old, new);
        self.set_hop_limit(ttl - 1);
        self.set_checksum(csum);
        ttl - 1
    }

    /// Rewrites the source address, updates the header checksum incrementally, and
    /// returns the old address. The TCP/UDP checksum (which covers the address through
    /// the pseudo-header) is the caller's: `checksum::update_addr_v4`.
    pub fn rewrite_src_addr(&mut self, addr: Ipv4Addr) -> Ipv4Addr {
        let old = self.src_addr();
        let csum = checksum::update_addr_v4(self.checksum(), old, addr);
        self.set_src_addr(addr);
        self.set_checksum(csum);
        old
    }

    /// Like [`rewrite_src_addr`](Self::rewrite_src_addr) for the destination.
    pub fn rewrite_dst_addr(&mut self, addr: Ipv4Addr) -> Ipv4Addr {
        let old = self.dst_addr();
        let csum = checksum::update_addr_v4(self.checksum(), old, addr);
        self.set_dst_addr(addr);
        self.set_checksum(csum);
        old
    }

    /// The options, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let range = clamp(HEADER_LEN..self.header_len(), self.buffer.as_ref().len());
        &mut self.buffer.as_mut()[range]
    }

    /// The payload (to `total_len`), mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.payload_range();
        &mut self.buffer.as_mut()[range]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The owned contents of an IPv4 header (options, DSCP/ECN, ident and fragment fields are
/// not represented; `emit` writes a 20-byte header with them zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    pub src_addr: Ipv4Addr,
    pub dst_addr: Ipv4Addr,
    pub next_header: IpProtocol,
    /// Payload length (`total_len` − header length).
    pub payload_len: usize,
    /// TTL.
    pub hop_limit: u8,
    /// Don't Fragment.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Reads a header: `check_len` plus the checksum ([`Error::Malformed`] if wrong).
    /// Options are allowed and skipped.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::Malformed);
        }
        Ok(Ipv4Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.total_len()) - packet.header_len(),
            hop_limit: packet.hop_limit(),
            dont_frag: packet.dont_frag(),
        })
    }

    /// Bytes the emitted header takes (20).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header (total length = 20 + `payload_len`, saturating at 65535)
    /// and its checksum. The payload is not part of the IPv4 checksum, so it can be
    /// written before or after.
    ///
    /// # Panics
    /// If the buffer is shorter than 20 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) {
        packet.set_version(4);
        packet.set_header_len(HEADER_LEN);
        packet.set_dscp(0);
        packet.set_ecn(0);
        let total = (HEADER_LEN + self.payload_len).min(usize::from(u16::MAX));
        packet.set_total_len(total as u16);
        packet.set_ident(0);
        write_u16(packet.buffer.as_mut(), field::FLG_OFF, 0);
        packet.set_dont_frag(self.dont_frag);
        packet.set_hop_limit(self.hop_limit);
        packet.set_next_header(self.next_header);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

impl fmt::Display for Ipv4Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ipv4 src={} dst={} proto={} len={} ttl={}",
            self.src_addr, self.dst_addr, self.next_header, self.payload_len, self.hop_limit
        )
    }
}

/// An IPv4 address with a prefix length: a route, a subnet, or an interface address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Cidr {
    address: Ipv4Addr,
    prefix_len: u8,
}

impl Ipv4Cidr {
    /// The host prefix of an address (/32).
    pub const fn host(address: Ipv4Addr) -> Ipv4Cidr {
        Ipv4Cidr {
            address,
            prefix_len: 32,
        }
    }

    /// `address/prefix_len`; [`Error::Malformed`] if `prefix_len` > 32. Host bits are
    /// kept (an interface address); [`network`](Self::network) clears them.
    pub const fn new(address: Ipv4Addr, prefix_len: u8) -> Result<Ipv4Cidr> {
        if prefix_len > 32 {
            return Err(Error::Malformed);
        }
        Ok(Ipv4Cidr {
            address,
            prefix_len,
        })
    }

    /// The mask for a prefix length (0 for /0; lengths past 32 count as 32).
    pub const fn mask_of(prefix_len: u8) -> u32 {
        match u32::MAX.checked_shl(32u32.saturating_sub(prefix_len as u32)) {
            Some(mask) => mask,
            None => 0,
        }
    }

    /// The address as given.
    pub const fn address(&self) -> Ipv4Addr {
        self.address
    }

    /// The prefix length.
    pub const fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// The netmask as an address (255.255.255.0 for /24).
    pub const fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from_bits(Self::mask_of(self.prefix_len))
    }

    /// The same prefix with the host bits cleared (10.1.2.3/8 → 10.0.0.0/8).
    pub const fn network(&self) -> Ipv4Cidr {
        let bits = self.address.to_bits() & Self::mask_of(self.prefix_len);
        Ipv4Cidr {
            address: Ipv4Addr::from_bits(bits),
            prefix_len: self.prefix_len,
        }
    }

    /// The directed broadcast address (all host bits set).
    pub const fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from_bits(self.address.to_bits() | !Self::mask_of(self.prefix_len))
    }

    /// Whether `addr` is inside the prefix.
    pub const fn contains(&self, addr: Ipv4Addr) -> bool {
        let mask = Self::mask_of(self.prefix_len);
        addr.to_bits() & mask == self.address.to_bits() & mask
    }

    /// Whether `other` is entirely inside this prefix (equal counts).
    pub const fn contains_subnet(&self, other: &Ipv4Cidr) -> bool {
        other.prefix_len >= self.prefix_len && self.contains(other.address)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = Error;

    /// `a.b.c.d/len`; a bare address is a /32. [`Error::Malformed`] otherwise.
    fn from_str(s: &str) -> Result<Self> {
        let (addr, len) = match s.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (s, None),
        };
        let address: Ipv4Addr = addr.parse().map_err(|_| Error::Malformed)?;
        let prefix_len = match len {
            Some(len) if !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit()) => {
                len.parse::<u8>().map_err(|_| Error::Malformed)?
            }
            Some(_) => return Err(Error::Malformed),
            None => 32,
        };
        Ipv4Cidr::new(address, prefix_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real UDP/DNS query header: 192.168.0.1 → 192.168.0.199, TTL 64, DF, checksum 0xb861,
    // total length 0x73 (115). Followed here by 95 payload bytes.
    static HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn packet_bytes() -> Vec<u8> {
        let mut bytes = HEADER.to_vec();
        bytes.extend((0..95).map(|i| i as u8));
        bytes
    }

    // 10.0.0.1 → 10.0.0.2, ICMP, IHL 6 with a Router Alert option (94 04 00 00),
    // ident 0x1234, MF set, offset 1480, TTL 1, DSCP 46, ECN 1, 4 payload bytes.
    static WITH_OPTIONS: [u8; 28] = [
        0x46, 0xb9, 0x00, 0x1c, 0x12, 0x34, 0x20, 0xb9, 0x01, 0x01, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02, 0x94, 0x04, 0x00, 0x00, 0xaa, 0xbb, 0xcc, 0xdd,
    ];

    #[test]
    fn fields() {
        let bytes = packet_bytes();
        let packet = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.version(), 4);
        assert_eq!(packet.header_len(), 20);
        assert_eq!((packet.dscp(), packet.ecn()), (0, 0));
        assert_eq!(packet.total_len(), 115);
        assert_eq!(packet.ident(), 0);
        assert!(packet.dont_frag() && !packet.more_frags());
        assert_eq!(packet.frag_offset(), 0);
        assert!(!packet.is_fragment() && !packet.is_first_fragment());
        assert_eq!(packet.hop_limit(), 64);
        assert_eq!(packet.next_header(), IpProtocol::UDP);
        assert_eq!(packet.checksum(), 0xb861);
        assert_eq!(packet.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(packet.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(packet.options().is_empty());
        assert_eq!(packet.payload().len(), 95);
        assert!(packet.verify_checksum());
    }

    #[test]
    fn options_and_fragments() {
        let mut bytes = WITH_OPTIONS;
        let mut packet = Ipv4Packet::new_unchecked(&mut bytes[..]);
        packet.fill_checksum();
        let packet = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.header_len(), 24);
        assert_eq!(packet.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(packet.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!((packet.dscp(), packet.ecn()), (46, 1));
        assert_eq!(packet.ident(), 0x1234);
        assert!(packet.more_frags() && !packet.dont_frag());
        assert_eq!(packet.frag_offset(), 0xb9 * 8);
        assert!(packet.is_fragment() && !packet.is_first_fragment());
        assert!(packet.verify_checksum());
        let repr = Ipv4Repr::parse(&packet).unwrap();
        assert_eq!(repr.payload_len, 4);
        assert_eq!(repr.next_header, IpProtocol::ICMP);
    }

    #[test]
    fn repr_round_trip() {
        let bytes = packet_bytes();
        let packet = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        let repr = Ipv4Repr::parse(&packet).unwrap();
        assert_eq!(
            repr,
            Ipv4Repr {
                src_addr: Ipv4Addr::new(192, 168, 0, 1),
                dst_addr: Ipv4Addr::new(192, 168, 0, 199),
                next_header: IpProtocol::UDP,
                payload_len: 95,
                hop_limit: 64,
                dont_frag: true,
            }
        );
        let mut out = vec![0xEEu8; repr.buffer_len() + repr.payload_len];
        let mut view = Ipv4Packet::new_unchecked(&mut out[..]);
        repr.emit(&mut view);
        view.payload_mut().copy_from_slice(packet.payload());
        assert_eq!(out, bytes);
    }

    #[test]
    fn setters_then_getters() {
        let mut bytes = packet_bytes();
        let mut packet = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_dscp(10);
        packet.set_ecn(3);
        packet.set_ident(0xbeef);
        packet.set_dont_frag(false);
        packet.set_more_frags(true);
        packet.set_frag_offset(64);
        packet.set_hop_limit(7);
        packet.set_next_header(IpProtocol::TCP);
        packet.set_src_addr(Ipv4Addr::new(1, 2, 3, 4));
        packet.set_dst_addr(Ipv4Addr::new(5, 6, 7, 8));
        packet.set_total_len(40);
        packet.fill_checksum();
        assert_eq!((packet.dscp(), packet.ecn()), (10, 3));
        assert_eq!(packet.ident(), 0xbeef);
        assert!(!packet.dont_frag() && packet.more_frags());
        assert_eq!(packet.frag_offset(), 64);
        assert!(packet.is_fragment() && !packet.is_first_fragment());
        packet.set_frag_offset(0);
        assert!(packet.is_first_fragment());
        packet.clear_flags();
        assert!(!packet.is_fragment());
        assert_eq!(packet.hop_limit(), 7);
        assert_eq!(packet.next_header(), IpProtocol::TCP);
        assert_eq!(packet.src_addr(), Ipv4Addr::new(1, 2, 3, 4));
        assert_eq!(packet.dst_addr(), Ipv4Addr::new(5, 6, 7, 8));
        assert_eq!(packet.payload().len(), 20);
        packet.fill_checksum();
        assert!(packet.verify_checksum());
        packet.set_checksum(packet.checksum() ^ 1);
        assert!(!packet.verify_checksum());
    }

    #[test]
    fn setters_cannot_make_getters_panic() {
        let mut bytes = HEADER;
        bytes[2..4].copy_from_slice(&[0, 20]);
        let mut packet = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_header_len(60);
        packet.set_total_len(1500);
        assert_eq!(packet.options().len(), 0);
        assert_eq!(packet.payload().len(), 0);
        assert_eq!(packet.header().len(), 20);
        let _ = packet.verify_checksum();
        packet.fill_checksum();
        assert_eq!(packet.payload_mut().len(), 0);
        assert_eq!(packet.options_mut().len(), 0);
    }

    #[test]
    fn decrement_ttl_keeps_checksum_valid() {
        let mut bytes = packet_bytes();
        let mut packet = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        for expect in (0..64).rev() {
            assert_eq!(packet.decrement_ttl(), expect);
            assert!(packet.verify_checksum(), "ttl {expect}");
            let incremental = packet.checksum();
            packet.fill_checksum();
            assert_eq!(packet.checksum(), incremental, "ttl {expect}");
        }
        assert_eq!(packet.decrement_ttl(), 0);
        assert_eq!(packet.hop_limit(), 0);
        assert!(packet.verify_checksum());
    }

    #[test]
    fn rewrite_addresses_keeps_checksum_valid() {
        let mut bytes = packet_bytes();
        let mut packet = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        let old = packet.rewrite_src_addr(Ipv4Addr::new(100, 64, 0, 1));
        assert_eq!(old, Ipv4Addr::new(192, 168, 0, 1));
        assert!(packet.verify_checksum());
        packet.rewrite_dst_addr(Ipv4Addr::new(8, 8, 8, 8));
        assert!(packet.verify_checksum());
        let incremental = packet.checksum();
        packet.fill_checksum();
        assert_eq!(packet.checksum(), incremental);
    }

    #[test]
    fn check_len_errors() {
        let bytes = packet_bytes();
        for len in 0..bytes.len() {
            assert_eq!(
                Ipv4Packet::new_checked(&bytes[..len]),
                Err(Error::Truncated),
                "length {len}"
            );
        }
        // Ethernet padding past total_len is fine and not part of the payload.
        let mut padded = bytes.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(
            Ipv4Packet::new_checked(&padded[..])
                .unwrap()
                .payload()
                .len(),
            95
        );

        let mut bad = bytes.clone();
        bad[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&bad[..]), Err(Error::Malformed));
        for ihl in 0..5 {
            bad[0] = 0x40 | ihl;
            assert_eq!(
                Ipv4Packet::new_checked(&bad[..]),
                Err(Error::Malformed),
                "ihl {ihl}"
            );
        }
        bad[0] = 0x4F; // 60-byte header in a 20-byte buffer
        assert_eq!(Ipv4Packet::new_checked(&bad[..20]), Err(Error::Truncated));
        let mut short_total = bytes.clone();
        short_total[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&short_total[..]),
            Err(Error::Malformed)
        );
        let mut long_total = bytes.clone();
        long_total[2..4].copy_from_slice(&116u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&long_total[..]),
            Err(Error::Truncated)
        );

        let mut bad_csum = bytes.clone();
        bad_csum[11] ^= 0xFF;
        let packet = Ipv4Packet::new_checked(&bad_csum[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&packet), Err(Error::Malformed));
    }

    #[test]
    fn quoted_packet_may_be_cut() {
        let bytes = packet_bytes();
        let quote = &bytes[..28];
        assert_eq!(Ipv4Packet::new_checked(quote), Err(Error::Truncated));
        let packet = Ipv4Packet::new_quoted(quote).unwrap();
        assert_eq!(packet.payload(), &bytes[20..28]);
        assert_eq!(Ipv4Packet::new_quoted(&bytes[..19]), Err(Error::Truncated));
    }

    #[test]
    fn emit_saturates_total_len() {
        let repr = Ipv4Repr {
            src_addr: Ipv4Addr::LOCALHOST,
            dst_addr: Ipv4Addr::LOCALHOST,
            next_header: IpProtocol::UDP,
            payload_len: 70_000,
            hop_limit: 1,
            dont_frag: false,
        };
        let mut out = [0u8; 20];
        let mut packet = Ipv4Packet::new_unchecked(&mut out[..]);
        repr.emit(&mut packet);
        assert_eq!(packet.total_len(), 0xFFFF);
        assert!(packet.verify_checksum());
    }

    #[test]
    fn cidr() {
        let cidr: Ipv4Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(cidr.address(), Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!(cidr.prefix_len(), 8);
        assert_eq!(cidr.network().to_string(), "10.0.0.0/8");
        assert_eq!(cidr.netmask(), Ipv4Addr::new(255, 0, 0, 0));
        assert_eq!(cidr.broadcast(), Ipv4Addr::new(10, 255, 255, 255));
        assert!(cidr.contains(Ipv4Addr::new(10, 200, 0, 1)));
        assert!(!cidr.contains(Ipv4Addr::new(11, 0, 0, 1)));
        let all: Ipv4Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(Ipv4Addr::BROADCAST));
        assert_eq!(all.netmask(), Ipv4Addr::UNSPECIFIED);
        let host: Ipv4Cidr = "192.0.2.1".parse().unwrap();
        assert_eq!(host.prefix_len(), 32);
        assert!(host.contains(Ipv4Addr::new(192, 0, 2, 1)));
        assert!(!host.contains(Ipv4Addr::new(192, 0, 2, 2)));
        assert!(cidr.contains_subnet(&"10.9.0.0/16".parse().unwrap()));
        assert!(!cidr.contains_subnet(&"10.0.0.0/7".parse().unwrap()));
        for bad in [
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0/8",
            "10.0.0.0/+8",
            "x/8",
            "10.0.0.0/8/8",
        ] {
            assert_eq!(bad.parse::<Ipv4Cidr>(), Err(Error::Malformed), "{bad}");
        }
        assert_eq!(
            Ipv4Cidr::new(Ipv4Addr::UNSPECIFIED, 33),
            Err(Error::Malformed)
        );
    }
}
