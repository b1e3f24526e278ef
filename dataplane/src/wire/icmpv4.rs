//! ICMP for IPv4 (RFC 792, RFC 1191): the message view and the repr of the messages a
//! router sends and answers (echo, destination unreachable, time exceeded).
//!
//! Building a message: size the buffer with `repr.buffer_len()`, `repr.emit(&mut packet)`
//! (type, code, rest-of-header, checksum), copy the echo data or the quoted datagram into
//! `packet.data_mut()`, then `packet.fill_checksum()` — the checksum covers the data.

use core::fmt;

use super::checksum;
use super::{read_u16, write_u16, Error, Result};

/// Length of the header (type, code, checksum, rest-of-header).
pub const HEADER_LEN: usize = 8;

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQNO: usize = 6;
    pub const UNUSED: usize = 4;
    pub const MTU: usize = 6;
    pub const DATA: usize = 8;
}

/// An ICMPv4 message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct Icmpv4Message(pub u8);

impl Icmpv4Message {
    pub const ECHO_REPLY: Icmpv4Message = Icmpv4Message(0);
    pub const DST_UNREACHABLE: Icmpv4Message = Icmpv4Message(3);
    pub const SOURCE_QUENCH: Icmpv4Message = Icmpv4Message(4);
    pub const REDIRECT: Icmpv4Message = Icmpv4Message(5);
    pub const ECHO_REQUEST: Icmpv4Message = Icmpv4Message(8);
    pub const ROUTER_ADVERT: Icmpv4Message = Icmpv4Message(9);
    pub const ROUTER_SOLICIT: Icmpv4Message = Icmpv4Message(10);
    pub const TIME_EXCEEDED: Icmpv4Message = Icmpv4Message(11);
    pub const PARAM_PROBLEM: Icmpv4Message = Icmpv4Message(12);
    pub const TIMESTAMP: Icmpv4Message = Icmpv4Message(13);
    pub const TIMESTAMP_REPLY: Icmpv4Message = Icmpv4Message(14);

    /// Whether this is an error message, which quotes the offending datagram (and whose
    /// quoted addresses and ports NAT rewrites).
    pub const fn is_error(self) -> bool {
        matches!(self.0, 3 | 4 | 5 | 11 | 12)
    }
}

impl fmt::Display for Icmpv4Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            0 => "echo-reply",
            3 => "destination-unreachable",
            4 => "source-quench",
            5 => "redirect",
            8 => "echo-request",
            9 => "router-advertisement",
            10 => "router-solicitation",
            11 => "time-exceeded",
            12 => "parameter-problem",
            13 => "timestamp",
            14 => "timestamp-reply",
            other => return write!(f, "type {other}"),
        };
        f.write_str(name)
    }
}

/// Destination Unreachable codes (RFC 792, RFC 1122, RFC 1812).
pub mod dst_unreachable {
    pub const NET_UNREACHABLE: u8 = 0;
    pub const HOST_UNREACHABLE: u8 = 1;
    pub const PROTO_UNREACHABLE: u8 = 2;
    pub const PORT_UNREACHABLE: u8 = 3;
    /// Fragmentation needed and DF set: carries the next-hop MTU (RFC 1191).
    pub const FRAG_REQUIRED: u8 = 4;
    pub const NET_PROHIBITED: u8 = 9;
    pub const HOST_PROHIBITED: u8 = 10;
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Time Exceeded codes.
pub mod time_exceeded {
    pub const TTL_EXPIRED: u8 = 0;
    pub const FRAG_EXPIRED: u8 = 1;
}

/// A view of an ICMPv4 message. The message is the whole buffer: wrap exactly the IP
/// payload (the checksum covers all of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Wraps `buffer` without checking it.
    pub const fn new_unchecked(buffer: T) -> Icmpv4Packet<T> {
        Icmpv4Packet { buffer }
    }

    /// Wraps `buffer` and runs [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Icmpv4Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// [`Error::Truncated`] if the buffer is shorter than the 8-byte header.
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

    /// Message type.
    pub fn msg_type(&self) -> Icmpv4Message {
        Icmpv4Message(self.buffer.as_ref()[field::TYPE])
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Echo identifier (bytes 4–5; meaningful for echo messages).
    pub fn echo_ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// Echo sequence number (bytes 6–7; meaningful for echo messages).
    pub fn echo_seq_no(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_SEQNO)
    }

    /// Next-hop MTU (bytes 6–7; meaningful for Destination Unreachable code 4).
    pub fn next_hop_mtu(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::MTU)
    }

    /// The 4 rest-of-header bytes as one word.
    pub fn rest_of_header(&self) -> u32 {
        super::read_u32(self.buffer.as_ref(), field::UNUSED)
    }

    /// Everything after the 8-byte header: echo data, or the quoted datagram of an error.
    pub fn data(&self) -> &[u8] {
        self.buffer.as_ref().get(field::DATA..).unwrap_or(&[])
    }

    /// Whether the checksum over the whole message is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xFFFF
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Icmpv4Packet<&'a T> {
    /// The data with the lifetime of the underlying buffer (to parse a quoted datagram).
    pub fn into_data(self) -> &'a [u8] {
        self.buffer.as_ref().get(field::DATA..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, value: Icmpv4Message) {
        self.buffer.as_mut()[field::TYPE] = value.0;
    }

    /// Sets the message code.
    pub fn set_msg_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_IDENT, value);
    }

    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_SEQNO, value);
    }

    /// Sets the next-hop MTU.
    pub fn set_next_hop_mtu(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::MTU, value);
    }

    /// Sets the 4 rest-of-header bytes.
    pub fn set_rest_of_header(&mut self, value: u32) {
        super::write_u32(self.buffer.as_mut(), field::UNUSED, value);
    }

    /// Everything after the header, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(field::DATA..)
            .unwrap_or(&mut [])
    }

    /// Computes the checksum over the whole message.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let csum = !checksum::data(self.buffer.as_ref());
        self.set_checksum(csum);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The owned contents of an ICMPv4 message header (data and quoted bytes stay in the
/// buffer; the repr records their length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Repr {
    EchoRequest {
        ident: u16,
        seq_no: u16,
        data_len: usize,
    },
    EchoReply {
        ident: u16,
        seq_no: u16,
        data_len: usize,
    },
    /// `next_hop_mtu` is the bytes 6–7 field (RFC 1191, for code 4; 0 otherwise).
    DstUnreachable {
        code: u8,
        next_hop_mtu: u16,
        quoted_len: usize,
    },
    TimeExceeded {
        code: u8,
        quoted_len: usize,
    },
    /// Any other message: only type and code are kept; `emit` writes an 8-byte header
    /// with a zero rest-of-header.
    Other {
        msg_type: Icmpv4Message,
        code: u8,
    },
}

impl Icmpv4Repr {
    /// Reads a message and verifies its checksum ([`Error::Malformed`] if wrong).
    pub fn parse<T: AsRef<[u8]>>(packet: &Icmpv4Packet<T>) -> Result<Icmpv4Repr> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::Malformed);
        }
        let data_len = packet.data().len();
        Ok(match packet.msg_type() {
            Icmpv4Message::ECHO_REQUEST if packet.msg_code() == 0 => Icmpv4Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data_len,
            },
            Icmpv4Message::ECHO_REPLY if packet.msg_code() == 0 => Icmpv4Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data_len,
            },
            Icmpv4Message::DST_UNREACHABLE => Icmpv4Repr::DstUnreachable {
                code: packet.msg_code(),
                next_hop_mtu: packet.next_hop_mtu(),
                quoted_len: data_len,
            },
            Icmpv4Message::TIME_EXCEEDED => Icmpv4Repr::TimeExceeded {
                code: packet.msg_code(),
                quoted_len: data_len,
            },
            msg_type => Icmpv4Repr::Other {
                msg_type,
                code: packet.msg_code(),
            },
        })
    }

    /// Header (8) + data or quoted bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match *self {
                Icmpv4Repr::EchoRequest { data_len, .. }
                | Icmpv4Repr::EchoReply { data_len, .. } => data_len,
                Icmpv4Repr::DstUnreachable { quoted_len, .. }
                | Icmpv4Repr::TimeExceeded { quoted_len, .. } => quoted_len,
                Icmpv4Repr::Other { .. } => 0,
            }
    }

    /// Writes the header and a checksum over the buffer as it stands. After copying the
    /// data into `data_mut()`, call `fill_checksum()`.
    ///
    /// # Panics
    /// If the buffer is shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Icmpv4Packet<T>) {
        let (msg_type, code, rest) = match *self {
            Icmpv4Repr::EchoRequest { ident, seq_no, .. } => (
                Icmpv4Message::ECHO_REQUEST,
                0,
                (u32::from(ident) << 16) | u32::from(seq_no),
            ),
            Icmpv4Repr::EchoReply { ident, seq_no, .. } => (
                Icmpv4Message::ECHO_REPLY,
                0,
                (u32::from(ident) << 16) | u32::from(seq_no),
            ),
            Icmpv4Repr::DstUnreachable {
                code, next_hop_mtu, ..
            } => (
                Icmpv4Message::DST_UNREACHABLE,
                code,
                u32::from(next_hop_mtu),
            ),
            Icmpv4Repr::TimeExceeded { code, .. } => (Icmpv4Message::TIME_EXCEEDED, code, 0),
            Icmpv4Repr::Other { msg_type, code } => (msg_type, code, 0),
        };
        packet.set_msg_type(msg_type);
        packet.set_msg_code(code);
        packet.set_rest_of_header(rest);
        packet.fill_checksum();
    }
}

impl fmt::Display for Icmpv4Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data_len,
            } => {
                write!(
                    f,
                    "icmp echo-request id={ident} seq={seq_no} len={data_len}"
                )
            }
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data_len,
            } => {
                write!(f, "icmp echo-reply id={ident} seq={seq_no} len={data_len}")
            }
            Icmpv4Repr::DstUnreachable {
                code,
                next_hop_mtu,
                quoted_len,
            } => write!(
                f,
                "icmp destination-unreachable code={code} mtu={next_hop_mtu} quoted={quoted_len}"
            ),
            Icmpv4Repr::TimeExceeded { code, quoted_len } => {
                write!(f, "icmp time-exceeded code={code} quoted={quoted_len}")
            }
            Icmpv4Repr::Other { msg_type, code } => write!(f, "icmp {msg_type} code={code}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::Ipv4Packet;
    use crate::wire::udp::UdpPacket;

    // Echo request id 0x1c46 seq 1, 8 data bytes "abcdefgh", checksum 0x4a23.
    static ECHO: [u8; 16] = [
        0x08, 0x00, 0x4a, 0x23, 0x1c, 0x46, 0x00, 0x01, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67,
        0x68,
    ];

    #[test]
    fn echo_fields() {
        // Independent check of the checksum: 0x0800 + 0x1c46 + 0x0001 + 0x6162 + 0x6364 +
        // 0x6566 + 0x6768 = 0x1_b5db → 0xb5dc → complement 0x4a23.
        let packet = Icmpv4Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(packet.msg_type(), Icmpv4Message::ECHO_REQUEST);
        assert_eq!(packet.msg_code(), 0);
        assert_eq!(packet.checksum(), 0x4a23);
        assert_eq!(packet.echo_ident(), 0x1c46);
        assert_eq!(packet.echo_seq_no(), 1);
        assert_eq!(packet.data(), b"abcdefgh");
        assert!(packet.verify_checksum());
    }

    #[test]
    fn echo_round_trip_and_reply() {
        let packet = Icmpv4Packet::new_checked(&ECHO[..]).unwrap();
        let repr = Icmpv4Repr::parse(&packet).unwrap();
        assert_eq!(
            repr,
            Icmpv4Repr::EchoRequest {
                ident: 0x1c46,
                seq_no: 1,
                data_len: 8
            }
        );
        let mut out = vec![0u8; repr.buffer_len()];
        let mut view = Icmpv4Packet::new_unchecked(&mut out[..]);
        repr.emit(&mut view);
        view.data_mut().copy_from_slice(packet.data());
        view.fill_checksum();
        assert_eq!(out, ECHO);

        // Turn it into the reply in place: type 0, checksum fixed incrementally.
        let mut reply = ECHO;
        let mut view = Icmpv4Packet::new_checked(&mut reply[..]).unwrap();
        let csum = checksum::update16(view.checksum(), 0x0800, 0x0000);
        view.set_msg_type(Icmpv4Message::ECHO_REPLY);
        view.set_checksum(csum);
        assert!(view.verify_checksum());
        assert_eq!(
            Icmpv4Repr::parse(&view),
            Ok(Icmpv4Repr::EchoReply {
                ident: 0x1c46,
                seq_no: 1,
                data_len: 8
            })
        );
    }

    #[test]
    fn time_exceeded_quoting_udp() {
        // Quoted: 10.0.0.1:1234 → 10.0.0.9:53 UDP, 8-byte header only.
        let mut quoted = vec![
            0x45, 0x00, 0x00, 0x20, 0x00, 0x01, 0x00, 0x00, 0x01, 0x11, 0x00, 0x00, 0x0a, 0x00,
            0x00, 0x01, 0x0a, 0x00, 0x00, 0x09, 0x04, 0xd2, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00,
        ];
        Ipv4Packet::new_unchecked(&mut quoted[..]).fill_checksum();
        let repr = Icmpv4Repr::TimeExceeded {
            code: 0,
            quoted_len: quoted.len(),
        };
        let mut bytes = vec![0u8; repr.buffer_len()];
        let mut packet = Icmpv4Packet::new_unchecked(&mut bytes[..]);
        repr.emit(&mut packet);
        packet.data_mut().copy_from_slice(&quoted);
        packet.fill_checksum();
        let packet = Icmpv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&packet), Ok(repr));
        assert!(packet.msg_type().is_error());
        // The quote is cut short of the quoted total length: new_quoted reads it anyway.
        let inner = Ipv4Packet::new_quoted(packet.into_data()).unwrap();
        assert!(Ipv4Packet::new_checked(packet.into_data()).is_err());
        assert_eq!(inner.dst_addr(), std::net::Ipv4Addr::new(10, 0, 0, 9));
        let udp = UdpPacket::new_unchecked(inner.payload());
        assert_eq!((udp.src_port(), udp.dst_port()), (1234, 53));
    }

    #[test]
    fn frag_needed_carries_mtu() {
        let repr = Icmpv4Repr::DstUnreachable {
            code: dst_unreachable::FRAG_REQUIRED,
            next_hop_mtu: 1400,
            quoted_len: 0,
        };
        let mut bytes = [0u8; 8];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[..2], [3, 4]);
        assert_eq!(bytes[4..], [0, 0, 0x05, 0x78]);
        let packet = Icmpv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.next_hop_mtu(), 1400);
        assert_eq!(Icmpv4Repr::parse(&packet), Ok(repr));
    }

    #[test]
    fn other_and_errors() {
        let mut bytes = [13u8, 0, 0, 0, 0, 0, 0, 0];
        Icmpv4Packet::new_unchecked(&mut bytes[..]).fill_checksum();
        let packet = Icmpv4Packet::new_checked(&bytes[..]).unwrap();
        let repr = Icmpv4Repr::parse(&packet).unwrap();
        assert_eq!(
            repr,
            Icmpv4Repr::Other {
                msg_type: Icmpv4Message::TIMESTAMP,
                code: 0
            }
        );
        assert_eq!(repr.buffer_len(), 8);
        assert_eq!(repr.to_string(), "icmp timestamp code=0");
        for len in 0..8 {
            assert_eq!(
                Icmpv4Packet::new_checked(&ECHO[..len]),
                Err(Error::Truncated)
            );
        }
        let mut bad = ECHO;
        bad[9] ^= 0x40;
        let packet = Icmpv4Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&packet), Err(Error::Malformed));
    }

    #[test]
    fn setters_then_getters() {
        let mut bytes = ECHO;
        let mut packet = Icmpv4Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_msg_type(Icmpv4Message::DST_UNREACHABLE);
        packet.set_msg_code(4);
        packet.set_echo_ident(0x0102);
        packet.set_echo_seq_no(0x0304);
        assert_eq!(packet.rest_of_header(), 0x0102_0304);
        packet.set_next_hop_mtu(9000);
        assert_eq!(packet.next_hop_mtu(), 9000);
        assert_eq!(packet.echo_ident(), 0x0102);
        packet.fill_checksum();
        assert!(packet.verify_checksum());
        assert_eq!(packet.msg_type().to_string(), "destination-unreachable");
        assert_eq!(Icmpv4Message(99).to_string(), "type 99");
    }
}
