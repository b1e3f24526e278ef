//! UDP (RFC 768): the datagram view and header repr, with the checksum rules of both IP
//! families (0 means "none" over IPv4; a computed 0 is sent as 0xFFFF).

use core::fmt;
use std::net::IpAddr;

use super::checksum;
use super::{clamp, read_u16, write_u16, Error, IpProtocol, Result};

/// Length of the header.
pub const HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// A view of a UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps `buffer` without checking it.
    pub const fn new_unchecked(buffer: T) -> UdpPacket<T> {
        UdpPacket { buffer }
    }

    /// Wraps `buffer` and runs [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<UdpPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// [`Error::Truncated`] if the buffer is shorter than 8 bytes or than the length field;
    /// [`Error::Malformed`] if the length field is below 8.
    pub fn check_len(&self) -> Result<()> {
        let buffer_len = self.buffer.as_ref().len();
        if buffer_len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len > buffer_len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// The length field (header + payload).
    pub fn len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.payload().is_empty()
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    fn datagram_range(&self) -> core::ops::Range<usize> {
        clamp(0..usize::from(self.len()), self.buffer.as_ref().len())
    }

    /// The payload, bounded by the length field.
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[clamp(HEADER_LEN..usize::from(self.len()), data.len())]
    }

    fn compute_checksum(&self, src: &IpAddr, dst: &IpAddr) -> u16 {
        let datagram = &self.buffer.as_ref()[self.datagram_range()];
        let pseudo = checksum::pseudo_header(src, dst, IpProtocol::UDP, datagram.len() as u32);
        checksum::combine(&[pseudo, checksum::data(datagram)])
    }

    /// Whether the checksum is correct. Over IPv4 a checksum of 0 means "not computed"
    /// and passes; over IPv6 it is mandatory, so 0 fails.
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        if self.checksum() == 0 {
            return matches!((src, dst), (IpAddr::V4(_), IpAddr::V4(_)));
        }
        self.compute_checksum(src, dst) == 0xFFFF
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> UdpPacket<&'a T> {
    /// The payload with the lifetime of the underlying buffer.
    pub fn into_payload(self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        &data[clamp(HEADER_LEN..usize::from(self.len()), data.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, port);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Computes the checksum over the datagram (to the length field) and the
    /// pseudo-header; a computed 0 is written as 0xFFFF (RFC 768, RFC 8200 §8.1).
    pub fn fill_checksum(&mut self, src: &IpAddr, dst: &IpAddr) {
        self.set_checksum(0);
        let csum = match !self.compute_checksum(src, dst) {
            0 => 0xFFFF,
            csum => csum,
        };
        self.set_checksum(csum);
    }

    /// The payload (to the length field), mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = clamp(
            HEADER_LEN..usize::from(self.len()),
            self.buffer.as_ref().len(),
        );
        &mut self.buffer.as_mut()[range]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for UdpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The owned contents of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub payload_len: usize,
}

impl UdpRepr {
    /// Reads a header and verifies the checksum ([`Error::Malformed`] if wrong; a zero
    /// checksum over IPv4 is accepted).
    pub fn parse<T: AsRef<[u8]>>(
        packet: &UdpPacket<T>,
        src: &IpAddr,
        dst: &IpAddr,
    ) -> Result<UdpRepr> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            return Err(Error::Malformed);
        }
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: packet.payload().len(),
        })
    }

    /// Header (8) + payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header (length = 8 + `payload_len`, saturating) and the checksum over
    /// the datagram as it stands: put the payload at `buffer[8..]` first, or copy it into
    /// `payload_mut()` afterwards and call `fill_checksum` again.
    ///
    /// # Panics
    /// If the buffer is shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut UdpPacket<T>,
        src: &IpAddr,
        dst: &IpAddr,
    ) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(self.buffer_len().min(usize::from(u16::MAX)) as u16);
        packet.fill_checksum(src, dst);
    }
}

impl fmt::Display for UdpRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "udp {}→{} len={}",
            self.src_port, self.dst_port, self.payload_len
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(a: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, a))
    }

    fn v6(a: u16) -> IpAddr {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, a))
    }

    // 10.0.0.1:53 → 10.0.0.2:33333, 4-byte payload "ping", checksum over that
    // (computed by hand below), followed by 2 bytes of padding past the length.
    static DATAGRAM: [u8; 14] = [
        0x00, 0x35, 0x82, 0x35, 0x00, 0x0c, 0x00, 0x00, b'p', b'i', b'n', b'g', 0x00, 0x00,
    ];

    #[test]
    fn fields_and_checksum() {
        let mut bytes = DATAGRAM;
        let mut packet = UdpPacket::new_checked(&mut bytes[..]).unwrap();
        assert_eq!(packet.src_port(), 53);
        assert_eq!(packet.dst_port(), 33333);
        assert_eq!(packet.len(), 12);
        assert_eq!(packet.payload(), b"ping");
        assert!(!packet.is_empty());
        // A zero checksum passes over IPv4 only.
        assert!(packet.verify_checksum(&v4(1), &v4(2)));
        assert!(!packet.verify_checksum(&v6(1), &v6(2)));
        packet.fill_checksum(&v4(1), &v4(2));
        // Independent: the pseudo-header and datagram written out byte by byte.
        let mut all = vec![10, 0, 0, 1, 10, 0, 0, 2, 0, 17, 0, 12];
        all.extend_from_slice(&bytes[..12]);
        assert_eq!(checksum::data(&all), 0xFFFF);
        let packet = UdpPacket::new_checked(&bytes[..]).unwrap();
        assert!(packet.verify_checksum(&v4(1), &v4(2)));
        assert!(!packet.verify_checksum(&v4(1), &v4(3)));
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Choose payload words so the complement of the sum is 0.
        let mut bytes = [0u8; 10];
        let mut packet = UdpPacket::new_unchecked(&mut bytes[..]);
        packet.set_len(10);
        packet.set_src_port(0);
        packet.set_dst_port(0);
        let partial = checksum::combine(&[
            checksum::pseudo_header(&v4(1), &v4(2), IpProtocol::UDP, 10),
            checksum::data(&[0, 0, 0, 0, 0, 10, 0, 0]),
        ]);
        // sum + x = 0xFFFF → complement 0.
        packet
            .payload_mut()
            .copy_from_slice(&(0xFFFF - partial).to_be_bytes());
        packet.fill_checksum(&v4(1), &v4(2));
        assert_eq!(packet.checksum(), 0xFFFF);
        assert!(packet.verify_checksum(&v4(1), &v4(2)));
    }

    #[test]
    fn repr_round_trip() {
        let repr = UdpRepr {
            src_port: 4789,
            dst_port: 4789,
            payload_len: 3,
        };
        let mut bytes = vec![0u8; repr.buffer_len()];
        bytes[8..].copy_from_slice(b"abc");
        repr.emit(
            &mut UdpPacket::new_unchecked(&mut bytes[..]),
            &v6(1),
            &v6(2),
        );
        let packet = UdpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(UdpRepr::parse(&packet, &v6(1), &v6(2)), Ok(repr));
        assert_eq!(
            UdpRepr::parse(&packet, &v6(1), &v6(3)),
            Err(Error::Malformed)
        );
        let mut again = vec![0u8; repr.buffer_len()];
        again[8..].copy_from_slice(b"abc");
        repr.emit(
            &mut UdpPacket::new_unchecked(&mut again[..]),
            &v6(1),
            &v6(2),
        );
        assert_eq!(again, bytes);
        assert_eq!(packet.into_payload(), b"abc");
    }

    #[test]
    fn check_len_errors() {
        for len in 0..12 {
            assert_eq!(
                UdpPacket::new_checked(&DATAGRAM[..len]),
                Err(Error::Truncated),
                "{len}"
            );
        }
        for field_len in 0..8u16 {
            let mut bad = DATAGRAM;
            bad[4..6].copy_from_slice(&field_len.to_be_bytes());
            assert_eq!(UdpPacket::new_checked(&bad[..]), Err(Error::Malformed));
        }
        let mut long = DATAGRAM;
        long[4..6].copy_from_slice(&15u16.to_be_bytes());
        assert_eq!(UdpPacket::new_checked(&long[..]), Err(Error::Truncated));
    }

    #[test]
    fn setters_cannot_make_getters_panic() {
        let mut bytes = DATAGRAM;
        let mut packet = UdpPacket::new_checked(&mut bytes[..]).unwrap();
        packet.set_len(0xFFFF);
        assert_eq!(packet.payload().len(), 6);
        packet.set_len(2);
        assert!(packet.payload().is_empty());
        packet.fill_checksum(&v4(1), &v4(2));
        let _ = packet.verify_checksum(&v4(1), &v4(2));
        assert!(packet.payload_mut().is_empty());
    }
}
