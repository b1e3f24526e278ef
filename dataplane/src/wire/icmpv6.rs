//! ICMPv6 (RFC 4443) and Neighbor Discovery (RFC 4861): the message view with NDP fields
//! and options, and the repr of the messages a router answers and sends.
//!
//! Building a message: size the buffer with `repr.buffer_len()`, `repr.emit(&mut packet,
//! &src, &dst)` (header, NDP link-layer option, checksum), copy echo data or the quoted
//! packet into `packet.data_mut()`, then `packet.fill_checksum(&src, &dst)`.

use core::fmt;
use core::ops::BitOr;
use std::net::Ipv6Addr;

use super::checksum;
use super::ethernet::EthernetAddress;
use super::{read_ipv6, read_u16, read_u32, write_u16, write_u32, Error, IpProtocol, Result};

/// Length of the common header: type, code, checksum and 4 message-specific bytes.
pub const HEADER_LEN: usize = 8;

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQNO: usize = 6;
    pub const MTU: usize = 4;
    pub const NEIGH_FLAGS: usize = 4;
    pub const CUR_HOP_LIMIT: usize = 4;
    pub const ROUTER_FLAGS: usize = 5;
    pub const ROUTER_LIFETIME: usize = 6;
    pub const REACHABLE_TIME: usize = 8;
    pub const RETRANS_TIME: usize = 12;
    pub const TARGET: usize = 8;
    pub const REDIRECT_DST: usize = 24;
    pub const DATA: usize = 8;
}

/// An ICMPv6 message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct Icmpv6Message(pub u8);

impl Icmpv6Message {
    pub const DST_UNREACHABLE: Icmpv6Message = Icmpv6Message(1);
    pub const PACKET_TOO_BIG: Icmpv6Message = Icmpv6Message(2);
    pub const TIME_EXCEEDED: Icmpv6Message = Icmpv6Message(3);
    pub const PARAM_PROBLEM: Icmpv6Message = Icmpv6Message(4);
    pub const ECHO_REQUEST: Icmpv6Message = Icmpv6Message(128);
    pub const ECHO_REPLY: Icmpv6Message = Icmpv6Message(129);
    pub const MLD_QUERY: Icmpv6Message = Icmpv6Message(130);
    pub const MLD_REPORT: Icmpv6Message = Icmpv6Message(131);
    pub const MLD_DONE: Icmpv6Message = Icmpv6Message(132);
    pub const ROUTER_SOLICIT: Icmpv6Message = Icmpv6Message(133);
    pub const ROUTER_ADVERT: Icmpv6Message = Icmpv6Message(134);
    pub const NEIGHBOR_SOLICIT: Icmpv6Message = Icmpv6Message(135);
    pub const NEIGHBOR_ADVERT: Icmpv6Message = Icmpv6Message(136);
    pub const REDIRECT: Icmpv6Message = Icmpv6Message(137);
    pub const MLDV2_REPORT: Icmpv6Message = Icmpv6Message(143);

    /// Error messages (types 0–127) quote the offending packet.
    pub const fn is_error(self) -> bool {
        self.0 < 128
    }

    /// Neighbor Discovery messages (RS, RA, NS, NA, Redirect).
    pub const fn is_ndp(self) -> bool {
        matches!(self.0, 133..=137)
    }

    /// The shortest valid message of this type (header and fixed fields).
    pub const fn min_len(self) -> usize {
        match self.0 {
            134 => 16,
            135 | 136 => 24,
            137 => 40,
            _ => HEADER_LEN,
        }
    }

    /// Where NDP options start, for the message types that carry them.
    pub const fn ndp_options_offset(self) -> Option<usize> {
        match self.0 {
            133 => Some(8),
            134 => Some(16),
            135 | 136 => Some(24),
            137 => Some(40),
            _ => None,
        }
    }
}

impl fmt::Display for Icmpv6Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            1 => "destination-unreachable",
            2 => "packet-too-big",
            3 => "time-exceeded",
            4 => "parameter-problem",
            128 => "echo-request",
            129 => "echo-reply",
            130 => "mld-query",
            131 => "mld-report",
            132 => "mld-done",
            133 => "router-solicitation",
            134 => "router-advertisement",
            135 => "neighbor-solicitation",
            136 => "neighbor-advertisement",
            137 => "redirect",
            143 => "mldv2-report",
            other => return write!(f, "type {other}"),
        };
        f.write_str(name)
    }
}

/// Destination Unreachable codes.
pub mod dst_unreachable {
    pub const NO_ROUTE: u8 = 0;
    pub const ADMIN_PROHIBITED: u8 = 1;
    pub const BEYOND_SCOPE: u8 = 2;
    pub const ADDR_UNREACHABLE: u8 = 3;
    pub const PORT_UNREACHABLE: u8 = 4;
    pub const FAILED_POLICY: u8 = 5;
    pub const REJECT_ROUTE: u8 = 6;
}

/// Time Exceeded codes.
pub mod time_exceeded {
    pub const HOP_LIMIT_EXCEEDED: u8 = 0;
    pub const FRAG_REASSEMBLY_EXCEEDED: u8 = 1;
}

/// NDP option types.
pub mod ndp_option {
    pub const SOURCE_LL_ADDR: u8 = 1;
    pub const TARGET_LL_ADDR: u8 = 2;
    pub const PREFIX_INFO: u8 = 3;
    pub const REDIRECTED_HEADER: u8 = 4;
    pub const MTU: u8 = 5;
}

/// The flags of a Neighbor Advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct NdpNeighborFlags(pub u8);

impl NdpNeighborFlags {
    /// R: the sender is a router.
    pub const ROUTER: NdpNeighborFlags = NdpNeighborFlags(0x80);
    /// S: sent in response to a solicitation.
    pub const SOLICITED: NdpNeighborFlags = NdpNeighborFlags(0x40);
    /// O: override an existing cache entry.
    pub const OVERRIDE: NdpNeighborFlags = NdpNeighborFlags(0x20);

    /// No flags.
    pub const fn empty() -> NdpNeighborFlags {
        NdpNeighborFlags(0)
    }

    /// Whether every flag in `other` is set.
    pub const fn contains(self, other: NdpNeighborFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for NdpNeighborFlags {
    type Output = NdpNeighborFlags;
    fn bitor(self, rhs: NdpNeighborFlags) -> NdpNeighborFlags {
        NdpNeighborFlags(self.0 | rhs.0)
    }
}

impl fmt::Display for NdpNeighborFlags {
    /// `R,S,O` style; `none` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::ROUTER, "R"),
            (Self::SOLICITED, "S"),
            (Self::OVERRIDE, "O"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|(_, n)| *n)
            .collect();
        if set.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&set.join(","))
        }
    }
}

/// One NDP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdpOption<'a> {
    /// Option type (see [`ndp_option`]).
    pub option_type: u8,
    /// The option bytes after type and length (`length × 8 − 2` bytes).
    pub body: &'a [u8],
}

impl NdpOption<'_> {
    /// The Ethernet address of a source/target link-layer address option (types 1 and 2,
    /// length 1); `None` for other options or other link-layer address sizes.
    pub fn link_layer_addr(&self) -> Option<EthernetAddress> {
        match self.option_type {
            ndp_option::SOURCE_LL_ADDR | ndp_option::TARGET_LL_ADDR if self.body.len() == 6 => {
                EthernetAddress::from_bytes(self.body)
            }
            _ => None,
        }
    }

    /// The MTU of an MTU option (type 5).
    pub fn mtu(&self) -> Option<u32> {
        if self.option_type != ndp_option::MTU || self.body.len() != 6 {
            return None;
        }
        Some(read_u32(self.body, 2))
    }
}

/// Iterator over NDP options. Yields one `Err` and stops for an option of length 0
/// ([`Error::Malformed`], RFC 4861 §4.6: the packet must be discarded) or one that runs
/// past the message ([`Error::Truncated`]).
#[derive(Debug, Clone)]
pub struct NdpOptions<'a> {
    data: &'a [u8],
}

impl<'a> Iterator for NdpOptions<'a> {
    type Item = Result<NdpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.data.is_empty() {
            return None;
        }
        let data = core::mem::take(&mut self.data);
        if data.len() < 2 {
            return Some(Err(Error::Truncated));
        }
        let len = usize::from(data[1]) * 8;
        if len == 0 {
            return Some(Err(Error::Malformed));
        }
        let Some(body) = data.get(2..len) else {
            return Some(Err(Error::Truncated));
        };
        self.data = &data[len..];
        Some(Ok(NdpOption {
            option_type: data[0],
            body,
        }))
    }
}

/// A view of an ICMPv6 message. The message is the whole buffer: wrap exactly the bytes
/// from the ICMPv6 header to the end of the IPv6 payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wraps `buffer` without checking it.
    pub const fn new_unchecked(buffer: T) -> Icmpv6Packet<T> {
        Icmpv6Packet { buffer }
    }

    /// Wraps `buffer` and runs [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Icmpv6Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// [`Error::Truncated`] if the buffer is shorter than 8 bytes, or than the fixed part
    /// of its NDP message type (RA 16, NS/NA 24, Redirect 40).
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.msg_type().min_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn byte_at(&self, at: usize) -> u8 {
        self.buffer.as_ref().get(at).copied().unwrap_or(0)
    }

    fn u32_at(&self, at: usize) -> u32 {
        let data = self.buffer.as_ref();
        if data.len() < at + 4 {
            return 0;
        }
        read_u32(data, at)
    }

    fn addr_at(&self, at: usize) -> Ipv6Addr {
        let data = self.buffer.as_ref();
        if data.len() < at + 16 {
            return Ipv6Addr::UNSPECIFIED;
        }
        read_ipv6(data, at)
    }

    /// Message type.
    pub fn msg_type(&self) -> Icmpv6Message {
        Icmpv6Message(self.buffer.as_ref()[field::TYPE])
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// Echo sequence number.
    pub fn echo_seq_no(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_SEQNO)
    }

    /// The MTU of a Packet Too Big message (bytes 4–7).
    pub fn mtu(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::MTU)
    }

    /// The pointer of a Parameter Problem message (bytes 4–7).
    pub fn param_pointer(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::MTU)
    }

    /// Neighbor Advertisement flags (byte 4).
    pub fn neighbor_flags(&self) -> NdpNeighborFlags {
        NdpNeighborFlags(self.buffer.as_ref()[field::NEIGH_FLAGS] & 0xE0)
    }

    /// Target address of an NS, NA or Redirect (bytes 8–23). Reads as `::` on a message
    /// too short to have one (other types).
    pub fn target_addr(&self) -> Ipv6Addr {
        self.addr_at(field::TARGET)
    }

    /// Destination address of a Redirect (bytes 24–39), `::` if too short.
    pub fn redirect_dst_addr(&self) -> Ipv6Addr {
        self.addr_at(field::REDIRECT_DST)
    }

    /// Router Advertisement: current hop limit.
    pub fn current_hop_limit(&self) -> u8 {
        self.byte_at(field::CUR_HOP_LIMIT)
    }

    /// Router Advertisement: flags byte (M 0x80, O 0x40, …).
    pub fn router_flags(&self) -> u8 {
        self.byte_at(field::ROUTER_FLAGS)
    }

    /// Router Advertisement: router lifetime in seconds.
    pub fn router_lifetime(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ROUTER_LIFETIME)
    }

    /// Router Advertisement: reachable time in ms (0 if the message is too short).
    pub fn reachable_time(&self) -> u32 {
        self.u32_at(field::REACHABLE_TIME)
    }

    /// Router Advertisement: retransmission timer in ms (0 if the message is too short).
    pub fn retrans_time(&self) -> u32 {
        self.u32_at(field::RETRANS_TIME)
    }

    /// Everything after the 8-byte header (echo data, the quoted packet of an error, or
    /// the NDP body).
    pub fn data(&self) -> &[u8] {
        self.buffer.as_ref().get(field::DATA..).unwrap_or(&[])
    }

    /// The NDP options of an RS, RA, NS, NA or Redirect; empty for other messages.
    pub fn ndp_options(&self) -> NdpOptions<'_> {
        let data = self.buffer.as_ref();
        let options = self
            .msg_type()
            .ndp_options_offset()
            .and_then(|offset| data.get(offset..))
            .unwrap_or(&[]);
        NdpOptions { data: options }
    }

    fn compute_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> u16 {
        let data = self.buffer.as_ref();
        let pseudo = checksum::pseudo_header_v6(*src, *dst, IpProtocol::ICMPV6, data.len() as u32);
        checksum::combine(&[pseudo, checksum::data(data)])
    }

    /// Whether the checksum over the message and the IPv6 pseudo-header is correct.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        self.compute_checksum(src, dst) == 0xFFFF
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Icmpv6Packet<&'a T> {
    /// The data with the lifetime of the underlying buffer (to parse a quoted packet).
    pub fn into_data(self) -> &'a [u8] {
        self.buffer.as_ref().get(field::DATA..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, value: Icmpv6Message) {
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

    /// Sets bytes 4–7 (Packet Too Big MTU, Parameter Problem pointer, or zero for the
    /// reserved word of other messages).
    pub fn set_mtu(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::MTU, value);
    }

    /// Sets the Neighbor Advertisement flags (and clears the rest of the reserved word).
    pub fn set_neighbor_flags(&mut self, flags: NdpNeighborFlags) {
        write_u32(
            self.buffer.as_mut(),
            field::NEIGH_FLAGS,
            u32::from(flags.0 & 0xE0) << 24,
        );
    }

    /// Sets the target address.
    ///
    /// # Panics
    /// If the buffer is shorter than 24 bytes (checked for NS/NA by `check_len`).
    pub fn set_target_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::TARGET..field::TARGET + 16].copy_from_slice(&addr.octets());
    }

    /// Everything after the 8-byte header, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(field::DATA..)
            .unwrap_or(&mut [])
    }

    /// Computes the checksum over the message and the IPv6 pseudo-header.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let csum = !self.compute_checksum(src, dst);
        self.set_checksum(csum);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv6Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The owned contents of an ICMPv6 message (echo data and quoted bytes stay in the
/// buffer; the repr records their length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv6Repr {
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
    PacketTooBig {
        mtu: u32,
        quoted_len: usize,
    },
    TimeExceeded {
        code: u8,
        quoted_len: usize,
    },
    DstUnreachable {
        code: u8,
        quoted_len: usize,
    },
    /// `lladdr` is the source link-layer address option.
    NeighborSolicit {
        target_addr: Ipv6Addr,
        lladdr: Option<EthernetAddress>,
    },
    /// `lladdr` is the target link-layer address option.
    NeighborAdvert {
        flags: NdpNeighborFlags,
        target_addr: Ipv6Addr,
        lladdr: Option<EthernetAddress>,
    },
    /// `lladdr` is the source link-layer address option.
    RouterSolicit {
        lladdr: Option<EthernetAddress>,
    },
    /// Any other message (Router Advertisement, Redirect, MLD, Parameter Problem, …):
    /// only type and code are kept; `emit` writes an 8-byte header with a zero word.
    Other {
        msg_type: Icmpv6Message,
        code: u8,
    },
}

/// The Ethernet link-layer address option of the wanted type, if any. Options of other
/// types, and link-layer options of non-Ethernet size, are skipped; a broken option is
/// an error.
fn find_lladdr<T: AsRef<[u8]>>(
    packet: &Icmpv6Packet<T>,
    option_type: u8,
) -> Result<Option<EthernetAddress>> {
    let mut found = None;
    for option in packet.ndp_options() {
        let option = option?;
        if option.option_type == option_type && found.is_none() {
            found = option.link_layer_addr();
        }
    }
    Ok(found)
}

impl Icmpv6Repr {
    /// Reads a message and verifies its checksum with the pseudo-header of `src`/`dst`
    /// ([`Error::Malformed`] if wrong). NDP messages must have code 0 and well-formed
    /// options ([`Error::Malformed`] for a zero-length option).
    pub fn parse<T: AsRef<[u8]>>(
        packet: &Icmpv6Packet<T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
    ) -> Result<Icmpv6Repr> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            return Err(Error::Malformed);
        }
        let msg_type = packet.msg_type();
        let code = packet.msg_code();
        if msg_type.is_ndp() && code != 0 {
            return Err(Error::Malformed);
        }
        let data_len = packet.data().len();
        Ok(match msg_type {
            Icmpv6Message::ECHO_REQUEST if code == 0 => Icmpv6Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data_len,
            },
            Icmpv6Message::ECHO_REPLY if code == 0 => Icmpv6Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data_len,
            },
            Icmpv6Message::PACKET_TOO_BIG if code == 0 => Icmpv6Repr::PacketTooBig {
                mtu: packet.mtu(),
                quoted_len: data_len,
            },
            Icmpv6Message::TIME_EXCEEDED => Icmpv6Repr::TimeExceeded {
                code,
                quoted_len: data_len,
            },
            Icmpv6Message::DST_UNREACHABLE => Icmpv6Repr::DstUnreachable {
                code,
                quoted_len: data_len,
            },
            Icmpv6Message::NEIGHBOR_SOLICIT => Icmpv6Repr::NeighborSolicit {
                target_addr: packet.target_addr(),
                lladdr: find_lladdr(packet, ndp_option::SOURCE_LL_ADDR)?,
            },
            Icmpv6Message::NEIGHBOR_ADVERT => Icmpv6Repr::NeighborAdvert {
                flags: packet.neighbor_flags(),
                target_addr: packet.target_addr(),
                lladdr: find_lladdr(packet, ndp_option::TARGET_LL_ADDR)?,
            },
            Icmpv6Message::ROUTER_SOLICIT => Icmpv6Repr::RouterSolicit {
                lladdr: find_lladdr(packet, ndp_option::SOURCE_LL_ADDR)?,
            },
            _ => {
                // Options of the other NDP messages are still checked.
                if msg_type.is_ndp() {
                    for option in packet.ndp_options() {
                        option?;
                    }
                }
                Icmpv6Repr::Other { msg_type, code }
            }
        })
    }

    const fn lladdr_len(lladdr: &Option<EthernetAddress>) -> usize {
        if lladdr.is_some() {
            8
        } else {
            0
        }
    }

    /// Bytes the message takes.
    pub const fn buffer_len(&self) -> usize {
        match self {
            Icmpv6Repr::EchoRequest { data_len, .. } | Icmpv6Repr::EchoReply { data_len, .. } => {
                HEADER_LEN + *data_len
            }
            Icmpv6Repr::PacketTooBig { quoted_len, .. }
            | Icmpv6Repr::TimeExceeded { quoted_len, .. }
            | Icmpv6Repr::DstUnreachable { quoted_len, .. } => HEADER_LEN + *quoted_len,
            Icmpv6Repr::NeighborSolicit { lladdr, .. }
            | Icmpv6Repr::NeighborAdvert { lladdr, .. } => 24 + Self::lladdr_len(lladdr),
            Icmpv6Repr::RouterSolicit { lladdr } => HEADER_LEN + Self::lladdr_len(lladdr),
            Icmpv6Repr::Other { .. } => HEADER_LEN,
        }
    }

    /// Writes the message header, the NDP link-layer option, and a checksum over the
    /// buffer as it stands. After copying echo data or a quote into `data_mut()`, call
    /// `fill_checksum` again.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len) without the data.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Icmpv6Packet<T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
    ) {
        let lladdr_option = |packet: &mut Icmpv6Packet<T>, at: usize, kind: u8, mac: &_| {
            if let Some(EthernetAddress(mac)) = mac {
                let option = &mut packet.buffer.as_mut()[at..at + 8];
                option[0] = kind;
                option[1] = 1;
                option[2..].copy_from_slice(mac);
            }
        };
        let (msg_type, code) = match *self {
            Icmpv6Repr::EchoRequest { ident, seq_no, .. } => {
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                (Icmpv6Message::ECHO_REQUEST, 0)
            }
            Icmpv6Repr::EchoReply { ident, seq_no, .. } => {
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                (Icmpv6Message::ECHO_REPLY, 0)
            }
            Icmpv6Repr::PacketTooBig { mtu, .. } => {
                packet.set_mtu(mtu);
                (Icmpv6Message::PACKET_TOO_BIG, 0)
            }
            Icmpv6Repr::TimeExceeded { code, .. } => {
                packet.set_mtu(0);
                (Icmpv6Message::TIME_EXCEEDED, code)
            }
            Icmpv6Repr::DstUnreachable { code, .. } => {
                packet.set_mtu(0);
                (Icmpv6Message::DST_UNREACHABLE, code)
            }
            Icmpv6Repr::NeighborSolicit {
                target_addr,
                ref lladdr,
            } => {
                packet.set_mtu(0);
                packet.set_target_addr(target_addr);
                lladdr_option(packet, 24, ndp_option::SOURCE_LL_ADDR, lladdr);
                (Icmpv6Message::NEIGHBOR_SOLICIT, 0)
            }
            Icmpv6Repr::NeighborAdvert {
                flags,
                target_addr,
                ref lladdr,
            } => {
                packet.set_neighbor_flags(flags);
                packet.set_target_addr(target_addr);
                lladdr_option(packet, 24, ndp_option::TARGET_LL_ADDR, lladdr);
                (Icmpv6Message::NEIGHBOR_ADVERT, 0)
            }
            Icmpv6Repr::RouterSolicit { ref lladdr } => {
                packet.set_mtu(0);
                lladdr_option(packet, 8, ndp_option::SOURCE_LL_ADDR, lladdr);
                (Icmpv6Message::ROUTER_SOLICIT, 0)
            }
            Icmpv6Repr::Other { msg_type, code } => {
                packet.set_mtu(0);
                (msg_type, code)
            }
        };
        packet.set_msg_type(msg_type);
        packet.set_msg_code(code);
        packet.fill_checksum(src, dst);
    }
}

impl fmt::Display for Icmpv6Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mac = |lladdr: &Option<EthernetAddress>| match lladdr {
            Some(mac) => mac.to_string(),
            None => "-".to_string(),
        };
        match self {
            Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data_len,
            } => {
                write!(
                    f,
                    "icmpv6 echo-request id={ident} seq={seq_no} len={data_len}"
                )
            }
            Icmpv6Repr::EchoReply {
                ident,
                seq_no,
                data_len,
            } => {
                write!(
                    f,
                    "icmpv6 echo-reply id={ident} seq={seq_no} len={data_len}"
                )
            }
            Icmpv6Repr::PacketTooBig { mtu, quoted_len } => {
                write!(f, "icmpv6 packet-too-big mtu={mtu} quoted={quoted_len}")
            }
            Icmpv6Repr::TimeExceeded { code, quoted_len } => {
                write!(f, "icmpv6 time-exceeded code={code} quoted={quoted_len}")
            }
            Icmpv6Repr::DstUnreachable { code, quoted_len } => {
                write!(
                    f,
                    "icmpv6 destination-unreachable code={code} quoted={quoted_len}"
                )
            }
            Icmpv6Repr::NeighborSolicit {
                target_addr,
                lladdr,
            } => {
                write!(
                    f,
                    "icmpv6 neighbor-solicitation target={target_addr} sll={}",
                    mac(lladdr)
                )
            }
            Icmpv6Repr::NeighborAdvert {
                flags,
                target_addr,
                lladdr,
            } => write!(
                f,
                "icmpv6 neighbor-advertisement [{flags}] target={target_addr} tll={}",
                mac(lladdr)
            ),
            Icmpv6Repr::RouterSolicit { lladdr } => {
                write!(f, "icmpv6 router-solicitation sll={}", mac(lladdr))
            }
            Icmpv6Repr::Other { msg_type, code } => write!(f, "icmpv6 {msg_type} code={code}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv6::solicited_node;

    fn src() -> Ipv6Addr {
        "fe80::200:ff:fe00:1".parse().unwrap()
    }

    fn target() -> Ipv6Addr {
        "fe80::200:ff:fe00:2".parse().unwrap()
    }

    // NS for fe80::200:ff:fe00:2 from fe80::200:ff:fe00:1 to its solicited-node group,
    // with a source link-layer address option 02:00:00:00:00:01. Checksum 0x7897 as
    // computed by scapy for the same packet.
    static NS: [u8; 32] = [
        0x87, 0x00, 0x78, 0x97, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x02, 0x00, 0x00, 0xff, 0xfe, 0x00, 0x00, 0x02, 0x01, 0x01, 0x02, 0x00, 0x00, 0x00,
        0x00, 0x01,
    ];

    #[test]
    fn neighbor_solicit_fields() {
        let dst = solicited_node(&target());
        let packet = Icmpv6Packet::new_checked(&NS[..]).unwrap();
        assert_eq!(packet.msg_type(), Icmpv6Message::NEIGHBOR_SOLICIT);
        assert_eq!(packet.msg_code(), 0);
        assert_eq!(packet.target_addr(), target());
        assert!(packet.verify_checksum(&src(), &dst));
        assert_eq!(packet.checksum(), 0x7897);
        let options: Vec<_> = packet.ndp_options().collect();
        assert_eq!(options.len(), 1);
        let sll = options[0].unwrap();
        assert_eq!(sll.option_type, ndp_option::SOURCE_LL_ADDR);
        assert_eq!(
            sll.link_layer_addr(),
            Some(EthernetAddress([2, 0, 0, 0, 0, 1]))
        );
        let repr = Icmpv6Repr::parse(&packet, &src(), &dst).unwrap();
        assert_eq!(
            repr,
            Icmpv6Repr::NeighborSolicit {
                target_addr: target(),
                lladdr: Some(EthernetAddress([2, 0, 0, 0, 0, 1]))
            }
        );
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Icmpv6Packet::new_unchecked(&mut out[..]), &src(), &dst);
        assert_eq!(out, NS);
    }

    #[test]
    fn neighbor_advert_round_trip() {
        let repr = Icmpv6Repr::NeighborAdvert {
            flags: NdpNeighborFlags::SOLICITED | NdpNeighborFlags::OVERRIDE,
            target_addr: target(),
            lladdr: Some(EthernetAddress([2, 0, 0, 0, 0, 2])),
        };
        let mut bytes = vec![0xFFu8; repr.buffer_len()];
        repr.emit(
            &mut Icmpv6Packet::new_unchecked(&mut bytes[..]),
            &target(),
            &src(),
        );
        assert_eq!(&bytes[..2], &[136, 0]);
        assert_eq!(&bytes[4..8], &[0x60, 0, 0, 0]);
        assert_eq!(&bytes[24..26], &[2, 1]);
        let packet = Icmpv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.neighbor_flags().to_string(), "S,O");
        assert_eq!(Icmpv6Repr::parse(&packet, &target(), &src()), Ok(repr));
        // Without the option.
        let bare = Icmpv6Repr::NeighborAdvert {
            flags: NdpNeighborFlags::ROUTER,
            target_addr: target(),
            lladdr: None,
        };
        assert_eq!(bare.buffer_len(), 24);
        let mut bytes = [0u8; 24];
        bare.emit(
            &mut Icmpv6Packet::new_unchecked(&mut bytes[..]),
            &target(),
            &src(),
        );
        let packet = Icmpv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&packet, &target(), &src()), Ok(bare));
    }

    #[test]
    fn echo_and_errors_round_trip() {
        let dst: Ipv6Addr = "2001:db8::1".parse().unwrap();
        for repr in [
            Icmpv6Repr::EchoRequest {
                ident: 7,
                seq_no: 9,
                data_len: 5,
            },
            Icmpv6Repr::EchoReply {
                ident: 0xFFFF,
                seq_no: 0,
                data_len: 0,
            },
            Icmpv6Repr::PacketTooBig {
                mtu: 1280,
                quoted_len: 48,
            },
            Icmpv6Repr::TimeExceeded {
                code: 1,
                quoted_len: 40,
            },
            Icmpv6Repr::DstUnreachable {
                code: dst_unreachable::PORT_UNREACHABLE,
                quoted_len: 3,
            },
            Icmpv6Repr::RouterSolicit {
                lladdr: Some(EthernetAddress([2, 0, 0, 0, 0, 9])),
            },
            Icmpv6Repr::RouterSolicit { lladdr: None },
            Icmpv6Repr::Other {
                msg_type: Icmpv6Message::MLD_DONE,
                code: 0,
            },
        ] {
            let mut bytes = vec![0u8; repr.buffer_len()];
            let mut packet = Icmpv6Packet::new_unchecked(&mut bytes[..]);
            repr.emit(&mut packet, &src(), &dst);
            for (i, b) in packet.data_mut().iter_mut().enumerate() {
                if !matches!(repr, Icmpv6Repr::RouterSolicit { .. }) {
                    *b = i as u8;
                }
            }
            packet.fill_checksum(&src(), &dst);
            let packet = Icmpv6Packet::new_checked(&bytes[..]).unwrap();
            assert_eq!(Icmpv6Repr::parse(&packet, &src(), &dst), Ok(repr), "{repr}");
            assert_eq!(
                Icmpv6Repr::parse(&packet, &src(), &target()),
                Err(Error::Malformed),
                "{repr}"
            );
        }
    }

    #[test]
    fn router_advert_recognised() {
        // RA: hop limit 64, M flag, lifetime 1800, reachable 30000, retrans 1000,
        // SLL option and MTU option 1500.
        let mut bytes = vec![134, 0, 0, 0, 64, 0x80, 0x07, 0x08];
        bytes.extend_from_slice(&30000u32.to_be_bytes());
        bytes.extend_from_slice(&1000u32.to_be_bytes());
        bytes.extend_from_slice(&[1, 1, 2, 0, 0, 0, 0, 0x0a]);
        bytes.extend_from_slice(&[5, 1, 0, 0, 0, 0, 0x05, 0xdc]);
        let dst: Ipv6Addr = "ff02::1".parse().unwrap();
        Icmpv6Packet::new_unchecked(&mut bytes[..]).fill_checksum(&src(), &dst);
        let packet = Icmpv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.current_hop_limit(), 64);
        assert_eq!(packet.router_flags(), 0x80);
        assert_eq!(packet.router_lifetime(), 1800);
        assert_eq!(packet.reachable_time(), 30000);
        assert_eq!(packet.retrans_time(), 1000);
        let options: Vec<_> = packet.ndp_options().map(|o| o.unwrap()).collect();
        assert_eq!(
            options[0].link_layer_addr(),
            Some(EthernetAddress([2, 0, 0, 0, 0, 0x0a]))
        );
        assert_eq!(options[1].mtu(), Some(1500));
        assert_eq!(options[1].link_layer_addr(), None);
        assert_eq!(
            Icmpv6Repr::parse(&packet, &src(), &dst),
            Ok(Icmpv6Repr::Other {
                msg_type: Icmpv6Message::ROUTER_ADVERT,
                code: 0
            })
        );
        assert!(Icmpv6Message::ROUTER_ADVERT.is_ndp());
        assert_eq!(
            Icmpv6Message::ROUTER_ADVERT.to_string(),
            "router-advertisement"
        );
    }

    #[test]
    fn malformed_ndp() {
        let dst = solicited_node(&target());
        // Zero-length option.
        let mut zero = NS;
        zero[25] = 0;
        Icmpv6Packet::new_unchecked(&mut zero[..]).fill_checksum(&src(), &dst);
        let packet = Icmpv6Packet::new_checked(&zero[..]).unwrap();
        assert_eq!(
            packet.ndp_options().collect::<Vec<_>>(),
            vec![Err(Error::Malformed)]
        );
        assert_eq!(
            Icmpv6Repr::parse(&packet, &src(), &dst),
            Err(Error::Malformed)
        );
        // Option longer than the message.
        let mut long = NS;
        long[25] = 2;
        Icmpv6Packet::new_unchecked(&mut long[..]).fill_checksum(&src(), &dst);
        let packet = Icmpv6Packet::new_checked(&long[..]).unwrap();
        assert_eq!(
            Icmpv6Repr::parse(&packet, &src(), &dst),
            Err(Error::Truncated)
        );
        // One trailing byte.
        let mut odd = NS.to_vec();
        odd.push(1);
        Icmpv6Packet::new_unchecked(&mut odd[..]).fill_checksum(&src(), &dst);
        let packet = Icmpv6Packet::new_checked(&odd[..]).unwrap();
        assert_eq!(
            Icmpv6Repr::parse(&packet, &src(), &dst),
            Err(Error::Truncated)
        );
        // Non-zero code.
        let mut code = NS;
        code[1] = 1;
        Icmpv6Packet::new_unchecked(&mut code[..]).fill_checksum(&src(), &dst);
        let packet = Icmpv6Packet::new_checked(&code[..]).unwrap();
        assert_eq!(
            Icmpv6Repr::parse(&packet, &src(), &dst),
            Err(Error::Malformed)
        );
        // Truncated fixed part.
        for len in 0..24 {
            assert_eq!(
                Icmpv6Packet::new_checked(&NS[..len]),
                Err(Error::Truncated),
                "{len}"
            );
        }
        // A truncated NS accessed as an echo: accessors stay in bounds.
        let mut echo = NS[..8].to_vec();
        echo[0] = 128;
        let packet = Icmpv6Packet::new_checked(&echo[..]).unwrap();
        assert_eq!(packet.target_addr(), Ipv6Addr::UNSPECIFIED);
        assert_eq!(packet.redirect_dst_addr(), Ipv6Addr::UNSPECIFIED);
        assert_eq!((packet.reachable_time(), packet.retrans_time()), (0, 0));
        assert_eq!(packet.ndp_options().count(), 0);
    }

    #[test]
    fn setters_then_getters() {
        let mut bytes = NS;
        let mut packet = Icmpv6Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_msg_type(Icmpv6Message::NEIGHBOR_ADVERT);
        packet.set_neighbor_flags(NdpNeighborFlags(0xFF));
        assert_eq!(packet.neighbor_flags(), NdpNeighborFlags(0xE0));
        packet.set_target_addr(src());
        assert_eq!(packet.target_addr(), src());
        packet.set_echo_ident(1);
        packet.set_echo_seq_no(2);
        assert_eq!(packet.mtu(), 0x0001_0002);
        packet.set_mtu(1280);
        assert_eq!(packet.mtu(), 1280);
        assert_eq!(packet.param_pointer(), 1280);
        packet.set_msg_code(3);
        assert_eq!(packet.msg_code(), 3);
        assert_eq!(packet.data_mut().len(), 24);
    }
}
