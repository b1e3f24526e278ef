//! Ethernet II: MAC addresses, EtherTypes, the 14-byte frame header view and its repr.

use core::fmt;
use core::str::FromStr;
use std::net::Ipv6Addr;

use super::{clamp, read_u16, write_u16, Error, Result};

/// Length of the Ethernet II header (destination, source, EtherType).
pub const HEADER_LEN: usize = 14;

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xFF; 6]);
    /// 00:00:00:00:00:00.
    pub const UNSPECIFIED: EthernetAddress = EthernetAddress([0; 6]);

    /// The six bytes.
    pub const fn octets(&self) -> [u8; 6] {
        self.0
    }

    /// The six bytes as a slice.
    pub const fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The address read from the first six bytes of `bytes`, or `None` if there are fewer.
    pub fn from_bytes(bytes: &[u8]) -> Option<EthernetAddress> {
        let octets: [u8; 6] = bytes.get(..6)?.try_into().ok()?;
        Some(EthernetAddress(octets))
    }

    /// ff:ff:ff:ff:ff:ff.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// The group bit (I/G) is set; broadcast is a multicast address too.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Not multicast (and so not broadcast).
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// The locally administered bit (U/L) is set.
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }

    /// The MAC an IPv6 multicast group maps to (RFC 2464 §7): `33:33` followed by the
    /// last four bytes of the group address.
    pub const fn ipv6_multicast(group: &Ipv6Addr) -> EthernetAddress {
        let o = group.octets();
        EthernetAddress([0x33, 0x33, o[12], o[13], o[14], o[15]])
    }
}

impl From<[u8; 6]> for EthernetAddress {
    fn from(octets: [u8; 6]) -> Self {
        EthernetAddress(octets)
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl FromStr for EthernetAddress {
    type Err = Error;

    /// Six hex pairs separated by `:` or `-` (`aa:bb:cc:dd:ee:ff`); anything else is
    /// [`Error::Malformed`].
    fn from_str(s: &str) -> Result<Self> {
        let sep = if s.contains('-') { '-' } else { ':' };
        let mut octets = [0u8; 6];
        let mut parts = s.split(sep);
        for octet in &mut octets {
            let part = parts.next().ok_or(Error::Malformed)?;
            if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::Malformed);
            }
            *octet = u8::from_str_radix(part, 16).map_err(|_| Error::Malformed)?;
        }
        if parts.next().is_some() {
            return Err(Error::Malformed);
        }
        Ok(EthernetAddress(octets))
    }
}

/// An EtherType (or, after a VLAN tag, the encapsulated protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(transparent)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// ARP.
    pub const ARP: EtherType = EtherType(0x0806);
    /// IEEE 802.1Q customer VLAN tag.
    pub const VLAN: EtherType = EtherType(0x8100);
    /// IPv6.
    pub const IPV6: EtherType = EtherType(0x86DD);
    /// IEEE 802.1ad service VLAN tag (QinQ outer tag).
    pub const QINQ: EtherType = EtherType(0x88A8);

    /// Whether this is a VLAN tag protocol identifier (802.1Q or 802.1ad).
    pub const fn is_vlan(self) -> bool {
        self.0 == Self::VLAN.0 || self.0 == Self::QINQ.0
    }
}

impl From<u16> for EtherType {
    fn from(value: u16) -> Self {
        EtherType(value)
    }
}

impl From<EtherType> for u16 {
    fn from(value: EtherType) -> Self {
        value.0
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EtherType::IPV4 => f.write_str("ipv4"),
            EtherType::ARP => f.write_str("arp"),
            EtherType::VLAN => f.write_str("vlan"),
            EtherType::IPV6 => f.write_str("ipv6"),
            EtherType::QINQ => f.write_str("qinq"),
            EtherType(other) => write!(f, "0x{other:04x}"),
        }
    }
}

mod field {
    use core::ops::Range;

    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// A view of an Ethernet II frame: header and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short one.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps `buffer` and checks that it holds a whole header.
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// [`Error::Truncated`] if the buffer is shorter than [`HEADER_LEN`].
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// A reference to the wrapped buffer.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Header plus `payload_len` bytes.
    pub const fn buffer_len(payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }

    /// The destination MAC.
    pub fn dst_addr(&self) -> EthernetAddress {
        let mut octets = [0u8; 6];
        octets.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        EthernetAddress(octets)
    }

    /// The source MAC.
    pub fn src_addr(&self) -> EthernetAddress {
        let mut octets = [0u8; 6];
        octets.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        EthernetAddress(octets)
    }

    /// The EtherType (a VLAN TPID if the frame is tagged; see `vlan::l3_offset`).
    pub fn ethertype(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// Everything after the header, padding included.
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[clamp(field::PAYLOAD..data.len(), data.len())]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Frame<&'a T> {
    /// The payload with the lifetime of the underlying buffer, for chaining views.
    pub fn into_payload(self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        &data[clamp(field::PAYLOAD..data.len(), data.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination MAC.
    pub fn set_dst_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr.0);
    }

    /// Sets the source MAC.
    pub fn set_src_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr.0);
    }

    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        write_u16(self.buffer.as_mut(), field::ETHERTYPE, ethertype.0);
    }

    /// Everything after the header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let data = self.buffer.as_mut();
        let len = data.len();
        &mut data[clamp(field::PAYLOAD..len, len)]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Frame<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The owned contents of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    pub src_addr: EthernetAddress,
    pub dst_addr: EthernetAddress,
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Reads the header of `frame`.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        Ok(EthernetRepr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `frame`.
    ///
    /// # Panics
    /// If the frame's buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        frame.set_src_addr(self.src_addr);
        frame.set_dst_addr(self.dst_addr);
        frame.set_ethertype(self.ethertype);
    }
}

impl fmt::Display for EthernetRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ethernet src={} dst={} type={}",
            self.src_addr, self.dst_addr, self.ethertype
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // dst 00:11:22:33:44:55, src 02:00:00:aa:bb:cc, IPv4, 4 payload bytes.
    static FRAME: [u8; 18] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc, 0x08, 0x00, 0xde,
        0xad, 0xbe, 0xef,
    ];

    #[test]
    fn parse_fields() {
        let frame = Frame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(frame.dst_addr().to_string(), "00:11:22:33:44:55");
        assert_eq!(frame.src_addr(), "02:00:00:aa:bb:cc".parse().unwrap());
        assert_eq!(frame.ethertype(), EtherType::IPV4);
        assert_eq!(frame.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(frame.into_payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn repr_round_trip() {
        let frame = Frame::new_checked(&FRAME[..]).unwrap();
        let repr = EthernetRepr::parse(&frame).unwrap();
        assert_eq!(repr.ethertype, EtherType::IPV4);
        let mut out = vec![0u8; repr.buffer_len() + 4];
        let mut frame_out = Frame::new_unchecked(&mut out[..]);
        repr.emit(&mut frame_out);
        frame_out
            .payload_mut()
            .copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(out, FRAME);
    }

    #[test]
    fn setters_then_getters() {
        let mut bytes = FRAME;
        let mut frame = Frame::new_checked(&mut bytes[..]).unwrap();
        frame.set_dst_addr(EthernetAddress::BROADCAST);
        frame.set_src_addr(EthernetAddress([2, 1, 2, 3, 4, 5]));
        frame.set_ethertype(EtherType::ARP);
        assert!(frame.dst_addr().is_broadcast());
        assert_eq!(frame.src_addr(), EthernetAddress([2, 1, 2, 3, 4, 5]));
        assert_eq!(frame.ethertype(), EtherType::ARP);
        assert_eq!(&bytes[..6], &[0xff; 6]);
        assert_eq!(&bytes[12..14], &[0x08, 0x06]);
    }

    #[test]
    fn truncated_at_every_length() {
        for len in 0..HEADER_LEN {
            assert_eq!(Frame::new_checked(&FRAME[..len]), Err(Error::Truncated));
        }
        let header_only = Frame::new_checked(&FRAME[..HEADER_LEN]).unwrap();
        assert!(header_only.payload().is_empty());
    }

    #[test]
    fn address_classes() {
        let bcast = EthernetAddress::BROADCAST;
        assert!(bcast.is_broadcast() && bcast.is_multicast() && !bcast.is_unicast());
        let mcast = EthernetAddress([0x01, 0x00, 0x5e, 0, 0, 1]);
        assert!(mcast.is_multicast() && !mcast.is_broadcast());
        let ucast = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
        assert!(ucast.is_unicast() && ucast.is_local());
        let group: Ipv6Addr = "ff02::1:ff28:9c5a".parse().unwrap();
        assert_eq!(
            EthernetAddress::ipv6_multicast(&group).to_string(),
            "33:33:ff:28:9c:5a"
        );
    }

    #[test]
    fn address_from_str() {
        assert_eq!(
            "AA-bb-cc-dd-ee-0F".parse::<EthernetAddress>(),
            Ok(EthernetAddress([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x0f]))
        );
        for bad in [
            "",
            "aa:bb:cc:dd:ee",
            "aa:bb:cc:dd:ee:ff:00",
            "aa:bb:cc:dd:ee:f",
            "gg:bb:cc:dd:ee:ff",
            "+a:bb:cc:dd:ee:ff",
        ] {
            assert_eq!(
                bad.parse::<EthernetAddress>(),
                Err(Error::Malformed),
                "{bad}"
            );
        }
        assert_eq!(EthernetAddress::from_bytes(&[1, 2, 3]), None);
        assert_eq!(
            EthernetAddress::from_bytes(&[1, 2, 3, 4, 5, 6, 7]),
            Some(EthernetAddress([1, 2, 3, 4, 5, 6]))
        );
    }

    #[test]
    fn ethertype_display() {
        assert_eq!(EtherType::IPV6.to_string(), "ipv6");
        assert_eq!(EtherType(0x88cc).to_string(), "0x88cc");
        assert!(EtherType::QINQ.is_vlan() && EtherType::VLAN.is_vlan());
        assert!(!EtherType::IPV4.is_vlan());
    }
}
