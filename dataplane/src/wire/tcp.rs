//! TCP (RFC 9293): the segment header view, `TcpFlags`, and the option-less header repr.

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign, Not};
use core::str::FromStr;
use std::net::IpAddr;

use super::checksum;
use super::{clamp, read_u16, read_u32, write_u16, write_u32, Error, IpProtocol, Result};

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ_NUM: usize = 4;
    pub const ACK_NUM: usize = 8;
    pub const FLAGS: usize = 12;
    pub const WIN_SIZE: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
}

/// The TCP control bits (the low 9 bits of the offset/flags word).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct TcpFlags(pub u16);

impl TcpFlags {
    pub const FIN: TcpFlags = TcpFlags(0x001);
    pub const SYN: TcpFlags = TcpFlags(0x002);
    pub const RST: TcpFlags = TcpFlags(0x004);
    pub const PSH: TcpFlags = TcpFlags(0x008);
    pub const ACK: TcpFlags = TcpFlags(0x010);
    pub const URG: TcpFlags = TcpFlags(0x020);
    pub const ECE: TcpFlags = TcpFlags(0x040);
    pub const CWR: TcpFlags = TcpFlags(0x080);
    /// The historic ECN nonce bit (RFC 3540, obsolete).
    pub const NS: TcpFlags = TcpFlags(0x100);
    /// Every bit this type represents.
    pub const ALL: TcpFlags = TcpFlags(0x1FF);

    const NAMES: [(TcpFlags, &'static str); 9] = [
        (Self::FIN, "FIN"),
        (Self::SYN, "SYN"),
        (Self::RST, "RST"),
        (Self::PSH, "PSH"),
        (Self::ACK, "ACK"),
        (Self::URG, "URG"),
        (Self::ECE, "ECE"),
        (Self::CWR, "CWR"),
        (Self::NS, "NS"),
    ];

    /// No flags.
    pub const fn empty() -> TcpFlags {
        TcpFlags(0)
    }

    /// The raw bits.
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every flag in `other` is set.
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag in `other` is set.
    pub const fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// Sets or clears the flags in `other`.
    pub fn set(&mut self, other: TcpFlags, on: bool) {
        if on {
            self.0 |= other.0;
        } else {
            self.0 &= !other.0;
        }
    }
}

impl BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for TcpFlags {
    fn bitor_assign(&mut self, rhs: TcpFlags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for TcpFlags {
    type Output = TcpFlags;
    fn bitand(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & rhs.0)
    }
}

impl Not for TcpFlags {
    type Output = TcpFlags;
    fn not(self) -> TcpFlags {
        TcpFlags(!self.0 & Self::ALL.0)
    }
}

impl fmt::Display for TcpFlags {
    /// `SYN,ACK`; no flags is `none`; bits without a name are shown as hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            if !core::mem::replace(&mut first, false) {
                f.write_str(",")?;
            }
            Ok(())
        };
        for (flag, name) in Self::NAMES {
            if self.contains(flag) {
                sep(f)?;
                f.write_str(name)?;
            }
        }
        let unknown = self.0 & !Self::ALL.0;
        if unknown != 0 {
            sep(f)?;
            write!(f, "0x{unknown:x}")?;
        }
        Ok(())
    }
}

impl FromStr for TcpFlags {
    type Err = Error;

    /// Flag names separated by `,` or `|`, any case (`SYN,ACK`, `syn|ack`); `none` or the
    /// empty string is no flags. [`Error::Malformed`] for an unknown name.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.is_empty() || s.eq_ignore_ascii_case("none") {
            return Ok(TcpFlags::empty());
        }
        let mut flags = TcpFlags::empty();
        for part in s.split([',', '|']) {
            let part = part.trim();
            let (flag, _) = Self::NAMES
                .iter()
                .find(|(_, name)| name.eq_ignore_ascii_case(part))
                .ok_or(Error::Malformed)?;
            flags |= *flag;
        }
        Ok(flags)
    }
}

/// A view of a TCP segment. The payload runs to the end of the buffer, so wrap exactly
/// the IP payload (`Ipv4Packet::payload` is already bounded by the IP length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps `buffer` without checking it.
    pub const fn new_unchecked(buffer: T) -> TcpPacket<T> {
        TcpPacket { buffer }
    }

    /// Wraps `buffer` and runs [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<TcpPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// [`Error::Truncated`] if the buffer is shorter than 20 bytes or than the header
    /// length; [`Error::Malformed`] if the data offset is below 5.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if header_len > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SEQ_NUM)
    }

    /// Acknowledgment number (meaningful when ACK is set).
    #[inline]
    pub fn ack_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ACK_NUM)
    }

    /// Header length in bytes (data offset × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::FLAGS] >> 4) * 4
    }

    /// The control bits.
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(read_u16(self.buffer.as_ref(), field::FLAGS) & TcpFlags::ALL.0)
    }

    /// Shorthand for `flags().contains(TcpFlags::SYN)`.
    pub fn syn(&self) -> bool {
        self.flags().contains(TcpFlags::SYN)
    }

    /// Shorthand for `flags().contains(TcpFlags::ACK)`.
    pub fn ack(&self) -> bool {
        self.flags().contains(TcpFlags::ACK)
    }

    /// Shorthand for `flags().contains(TcpFlags::FIN)`.
    pub fn fin(&self) -> bool {
        self.flags().contains(TcpFlags::FIN)
    }

    /// Shorthand for `flags().contains(TcpFlags::RST)`.
    pub fn rst(&self) -> bool {
        self.flags().contains(TcpFlags::RST)
    }

    /// Window size (unscaled).
    #[inline]
    pub fn window_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WIN_SIZE)
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::URGENT)
    }

    /// The options bytes (the header past its first 20 bytes).
    pub fn options(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[clamp(HEADER_LEN..self.header_len(), data.len())]
    }

    /// The payload: everything after the header.
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[clamp(self.header_len()..data.len(), data.len())]
    }

    /// Whether the checksum over the whole buffer and the pseudo-header of `src`/`dst`
    /// is correct.
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        let data = self.buffer.as_ref();
        let pseudo = checksum::pseudo_header(src, dst, IpProtocol::TCP, data.len() as u32);
        checksum::combine(&[pseudo, checksum::data(data)]) == 0xFFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, port);
    }

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::SEQ_NUM, value);
    }

    /// Sets the acknowledgment number.
    pub fn set_ack_number(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::ACK_NUM, value);
    }

    /// Sets the header length in bytes (rounded down to a multiple of 4, at most 60).
    pub fn set_header_len(&mut self, len: usize) {
        let offset = (len / 4).min(15) as u8;
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & 0x0F) | (offset << 4);
    }

    /// Sets the control bits (keeping the data offset and reserved bits).
    pub fn set_flags(&mut self, flags: TcpFlags) {
        let raw = read_u16(self.buffer.as_ref(), field::FLAGS);
        let raw = (raw & !TcpFlags::ALL.0) | (flags.0 & TcpFlags::ALL.0);
        write_u16(self.buffer.as_mut(), field::FLAGS, raw);
    }

    /// Sets the window size.
    pub fn set_window_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::WIN_SIZE, value);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::URGENT, value);
    }

    /// The options, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let range = clamp(HEADER_LEN..self.header_len(), self.buffer.as_ref().len());
        &mut self.buffer.as_mut()[range]
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.buffer.as_ref().len();
        let range = clamp(self.header_len()..len, len);
        &mut self.buffer.as_mut()[range]
    }

    /// Computes the checksum over the whole buffer and the pseudo-header.
    pub fn fill_checksum(&mut self, src: &IpAddr, dst: &IpAddr) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let pseudo = checksum::pseudo_header(src, dst, IpProtocol::TCP, data.len() as u32);
        let csum = !checksum::combine(&[pseudo, checksum::data(data)]);
        self.set_checksum(csum);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for TcpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The owned contents of a TCP header. Options are not represented; `emit` writes a
/// 20-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq_number: u32,
    pub ack_number: u32,
    pub flags: TcpFlags,
    pub window_len: u16,
    pub payload_len: usize,
}

impl TcpRepr {
    /// Reads a header and verifies the checksum ([`Error::Malformed`] if wrong) with the
    /// pseudo-header of `src`/`dst`.
    pub fn parse<T: AsRef<[u8]>>(
        packet: &TcpPacket<T>,
        src: &IpAddr,
        dst: &IpAddr,
    ) -> Result<TcpRepr> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            return Err(Error::Malformed);
        }
        Ok(TcpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window_len: packet.window_len(),
            payload_len: packet.payload().len(),
        })
    }

    /// Header (20) + payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header and the checksum over the buffer as it stands. The buffer must be
    /// exactly [`buffer_len`](Self::buffer_len) bytes. Either put the payload at
    /// `buffer[20..]` first, or copy it into `payload_mut()` afterwards and call
    /// `fill_checksum` again.
    ///
    /// # Panics
    /// If the buffer is shorter than 20 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut TcpPacket<T>,
        src: &IpAddr,
        dst: &IpAddr,
    ) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number);
        write_u16(packet.buffer.as_mut(), field::FLAGS, 0);
        packet.set_header_len(HEADER_LEN);
        packet.set_flags(self.flags);
        packet.set_window_len(self.window_len);
        packet.set_urgent_at(0);
        packet.fill_checksum(src, dst);
    }
}

impl fmt::Display for TcpRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tcp {}→{} [{}] seq={} ack={} win={} len={}",
            self.src_port,
            self.dst_port,
            self.flags,
            self.seq_number,
            self.ack_number,
            self.window_len,
            self.payload_len
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(a: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 168, 1, a))
    }

    // A Linux SYN 192.168.1.1:51234 → 192.168.1.2:80, seq 0x3a7e2c41, window 64240,
    // options MSS 1460, SACK permitted, timestamps (1, 0), NOP, window scale 7.
    static SYN: [u8; 40] = [
        0xc8, 0x22, 0x00, 0x50, 0x3a, 0x7e, 0x2c, 0x41, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0x00, 0x00, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x00,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    fn syn_bytes() -> [u8; 40] {
        let mut bytes = SYN;
        TcpPacket::new_unchecked(&mut bytes[..]).fill_checksum(&v4(1), &v4(2));
        bytes
    }

    #[test]
    fn fields() {
        let bytes = syn_bytes();
        let packet = TcpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.src_port(), 51234);
        assert_eq!(packet.dst_port(), 80);
        assert_eq!(packet.seq_number(), 0x3a7e_2c41);
        assert_eq!(packet.ack_number(), 0);
        assert_eq!(packet.header_len(), 40);
        assert_eq!(packet.flags(), TcpFlags::SYN);
        assert!(packet.syn() && !packet.ack() && !packet.fin() && !packet.rst());
        assert_eq!(packet.window_len(), 64240);
        assert_eq!(packet.urgent_at(), 0);
        assert_eq!(packet.options(), &SYN[20..]);
        assert!(packet.payload().is_empty());
        assert!(packet.verify_checksum(&v4(1), &v4(2)));
        assert!(!packet.verify_checksum(&v4(1), &v4(3)));
        assert_ne!(packet.checksum(), 0);
    }

    #[test]
    fn checksum_against_hand_sum() {
        let bytes = syn_bytes();
        // Independent: sum the pseudo-header bytes written out by hand.
        let mut all = vec![192, 168, 1, 1, 192, 168, 1, 2, 0, 6, 0, 40];
        all.extend_from_slice(&bytes);
        assert_eq!(checksum::data(&all), 0xFFFF);
    }

    #[test]
    fn repr_round_trip() {
        let src = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
        let dst = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));
        let repr = TcpRepr {
            src_port: 443,
            dst_port: 40000,
            seq_number: 1,
            ack_number: 0xFFFF_FFFF,
            flags: TcpFlags::PSH | TcpFlags::ACK,
            window_len: 512,
            payload_len: 5,
        };
        let mut bytes = vec![0u8; repr.buffer_len()];
        bytes[20..].copy_from_slice(b"hello");
        repr.emit(&mut TcpPacket::new_unchecked(&mut bytes[..]), &src, &dst);
        let packet = TcpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(TcpRepr::parse(&packet, &src, &dst), Ok(repr));
        assert_eq!(packet.payload(), b"hello");
        assert_eq!(&bytes[12..14], &[0x50, 0x18]);
        // emit → parse → emit gives identical bytes.
        let mut again = vec![0u8; repr.buffer_len()];
        again[20..].copy_from_slice(b"hello");
        let parsed = TcpRepr::parse(&packet, &src, &dst).unwrap();
        parsed.emit(&mut TcpPacket::new_unchecked(&mut again[..]), &src, &dst);
        assert_eq!(again, bytes);
        // The wrong addresses fail (swapping them would not: the sum is symmetric).
        let other = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 3));
        assert_eq!(TcpRepr::parse(&packet, &src, &other), Err(Error::Malformed));
    }

    #[test]
    fn setters_then_getters() {
        let mut bytes = syn_bytes();
        let mut packet = TcpPacket::new_checked(&mut bytes[..]).unwrap();
        packet.set_src_port(1);
        packet.set_dst_port(2);
        packet.set_seq_number(3);
        packet.set_ack_number(4);
        packet.set_flags(TcpFlags::SYN | TcpFlags::ACK | TcpFlags::ECE);
        packet.set_window_len(5);
        packet.set_urgent_at(6);
        packet.set_header_len(24);
        packet.fill_checksum(&v4(1), &v4(2));
        assert_eq!((packet.src_port(), packet.dst_port()), (1, 2));
        assert_eq!((packet.seq_number(), packet.ack_number()), (3, 4));
        assert_eq!(packet.flags().to_string(), "SYN,ACK,ECE");
        assert_eq!(packet.header_len(), 24);
        assert_eq!((packet.window_len(), packet.urgent_at()), (5, 6));
        assert_eq!(packet.options().len(), 4);
        assert_eq!(packet.payload().len(), 16);
        assert!(packet.verify_checksum(&v4(1), &v4(2)));
        packet.options_mut()[0] = 1;
        packet.payload_mut()[0] = 1;
        assert!(!packet.verify_checksum(&v4(1), &v4(2)));
        // A bigger header than the buffer: getters stay in bounds.
        packet.set_header_len(60);
        assert_eq!(packet.options().len(), 20);
        assert!(packet.payload().is_empty());
    }

    #[test]
    fn check_len_errors() {
        let bytes = syn_bytes();
        for len in 0..bytes.len() {
            assert_eq!(
                TcpPacket::new_checked(&bytes[..len]),
                Err(Error::Truncated),
                "{len}"
            );
        }
        for offset in 0..5u8 {
            let mut bad = bytes;
            bad[12] = (offset << 4) | 0x02;
            assert_eq!(
                TcpPacket::new_checked(&bad[..]),
                Err(Error::Malformed),
                "{offset}"
            );
        }
    }

    #[test]
    fn flags_text() {
        assert_eq!((TcpFlags::SYN | TcpFlags::ACK).to_string(), "SYN,ACK");
        assert_eq!(TcpFlags::empty().to_string(), "none");
        assert_eq!(TcpFlags(0x0E11).to_string(), "FIN,ACK,0xe00");
        assert_eq!("SYN,ACK".parse(), Ok(TcpFlags::SYN | TcpFlags::ACK));
        assert_eq!(" fin | psh ".parse(), Ok(TcpFlags::FIN | TcpFlags::PSH));
        assert_eq!("".parse(), Ok(TcpFlags::empty()));
        assert_eq!("none".parse(), Ok(TcpFlags::empty()));
        assert_eq!("SYN,BOGUS".parse::<TcpFlags>(), Err(Error::Malformed));
        assert_eq!("SYN,".parse::<TcpFlags>(), Err(Error::Malformed));
        for bits in 0..=0x1FFu16 {
            let flags = TcpFlags(bits);
            assert_eq!(flags.to_string().parse(), Ok(flags), "{bits:#x}");
        }
        let mut flags = TcpFlags::ALL;
        flags.set(TcpFlags::NS, false);
        assert_eq!(!flags, TcpFlags::NS);
        assert!(flags.intersects(TcpFlags::RST | TcpFlags::NS));
        assert_eq!(flags & TcpFlags::URG, TcpFlags::URG);
        assert_eq!(flags.bits(), 0xFF);
    }
}
