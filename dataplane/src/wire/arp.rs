//! ARP (RFC 826) for Ethernet and IPv4: the packet view and the `EthernetIpv4` repr.

use core::fmt;
use std::net::Ipv4Addr;

use super::ethernet::{EtherType, EthernetAddress};
use super::{read_ipv4, read_u16, write_u16, Error, Result};

/// Length of an Ethernet/IPv4 ARP packet.
pub const ETHERNET_IPV4_LEN: usize = 28;

/// ARP hardware type for Ethernet.
pub const HARDWARE_ETHERNET: u16 = 1;

mod field {
    use core::ops::Range;

    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    // The fixed offsets of an Ethernet (6-byte) / IPv4 (4-byte) packet.
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: usize = 14;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: usize = 24;
}

/// An ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOperation {
    /// 1: who-has.
    Request,
    /// 2: is-at.
    Reply,
    /// Any other opcode (RARP, InARP, …).
    Other(u16),
}

impl From<u16> for ArpOperation {
    fn from(value: u16) -> Self {
        match value {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            other => ArpOperation::Other(other),
        }
    }
}

impl From<ArpOperation> for u16 {
    fn from(value: ArpOperation) -> Self {
        match value {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Other(other) => other,
        }
    }
}

impl fmt::Display for ArpOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArpOperation::Request => f.write_str("request"),
            ArpOperation::Reply => f.write_str("reply"),
            ArpOperation::Other(op) => write!(f, "op {op}"),
        }
    }
}

/// A view of an ARP packet.
///
/// The address accessors read the fixed Ethernet/IPv4 offsets; check
/// [`is_ethernet_ipv4`](Self::is_ethernet_ipv4) (or use [`ArpRepr::parse`]) before
/// trusting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps `buffer` without checking its length.
    pub const fn new_unchecked(buffer: T) -> ArpPacket<T> {
        ArpPacket { buffer }
    }

    /// Wraps `buffer` and checks its length.
    pub fn new_checked(buffer: T) -> Result<ArpPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// [`Error::Truncated`] if the buffer ends before the fixed part or before the four
    /// addresses its `hardware_len`/`protocol_len` declare; [`Error::Unsupported`] if it is
    /// complete but shorter than an Ethernet/IPv4 packet (28 bytes), which the accessors
    /// need.
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < field::OPER + 2 {
            return Err(Error::Truncated);
        }
        let addrs = 2 * (usize::from(data[field::HLEN]) + usize::from(data[field::PLEN]));
        if data.len() < field::OPER + 2 + addrs {
            return Err(Error::Truncated);
        }
        if data.len() < ETHERNET_IPV4_LEN {
            return Err(Error::Unsupported);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Hardware type (1 for Ethernet).
    pub fn hardware_type(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::HTYPE)
    }

    /// Protocol type (an EtherType; 0x0800 for IPv4).
    pub fn protocol_type(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::PTYPE))
    }

    /// Hardware address length (6 for Ethernet).
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length (4 for IPv4).
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// The operation.
    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(read_u16(self.buffer.as_ref(), field::OPER))
    }

    /// Whether this is Ethernet/IPv4 ARP (htype 1, ptype 0x0800, hlen 6, plen 4).
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.hardware_type() == HARDWARE_ETHERNET
            && self.protocol_type() == EtherType::IPV4
            && self.hardware_len() == 6
            && self.protocol_len() == 4
    }

    /// Sender hardware address.
    pub fn source_hardware_addr(&self) -> EthernetAddress {
        let mut octets = [0u8; 6];
        octets.copy_from_slice(&self.buffer.as_ref()[field::SHA]);
        EthernetAddress(octets)
    }

    /// Sender protocol address.
    pub fn source_protocol_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::SPA)
    }

    /// Target hardware address.
    pub fn target_hardware_addr(&self) -> EthernetAddress {
        let mut octets = [0u8; 6];
        octets.copy_from_slice(&self.buffer.as_ref()[field::THA]);
        EthernetAddress(octets)
    }

    /// Target protocol address.
    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::TPA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Sets the hardware type.
    pub fn set_hardware_type(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::HTYPE, value);
    }

    /// Sets the protocol type.
    pub fn set_protocol_type(&mut self, value: EtherType) {
        write_u16(self.buffer.as_mut(), field::PTYPE, value.0);
    }

    /// Sets the hardware address length.
    pub fn set_hardware_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::HLEN] = value;
    }

    /// Sets the protocol address length.
    pub fn set_protocol_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::PLEN] = value;
    }

    /// Sets the operation.
    pub fn set_operation(&mut self, value: ArpOperation) {
        write_u16(self.buffer.as_mut(), field::OPER, value.into());
    }

    /// Sets the sender hardware address.
    pub fn set_source_hardware_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&addr.0);
    }

    /// Sets the sender protocol address.
    pub fn set_source_protocol_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA..field::SPA + 4].copy_from_slice(&addr.octets());
    }

    /// Sets the target hardware address.
    pub fn set_target_hardware_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&addr.0);
    }

    /// Sets the target protocol address.
    pub fn set_target_protocol_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA..field::TPA + 4].copy_from_slice(&addr.octets());
    }
}

/// The owned contents of an ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpRepr {
    /// ARP for IPv4 over Ethernet.
    EthernetIpv4 {
        operation: ArpOperation,
        source_hardware_addr: EthernetAddress,
        source_protocol_addr: Ipv4Addr,
        target_hardware_addr: EthernetAddress,
        target_protocol_addr: Ipv4Addr,
    },
}

impl ArpRepr {
    /// Reads an Ethernet/IPv4 ARP packet; [`Error::Malformed`] for any other
    /// hardware/protocol type or address length.
    pub fn parse<T: AsRef<[u8]>>(packet: &ArpPacket<T>) -> Result<ArpRepr> {
        packet.check_len()?;
        if !packet.is_ethernet_ipv4() {
            return Err(Error::Malformed);
        }
        Ok(ArpRepr::EthernetIpv4 {
            operation: packet.operation(),
            source_hardware_addr: packet.source_hardware_addr(),
            source_protocol_addr: packet.source_protocol_addr(),
            target_hardware_addr: packet.target_hardware_addr(),
            target_protocol_addr: packet.target_protocol_addr(),
        })
    }

    /// Bytes the packet takes.
    pub const fn buffer_len(&self) -> usize {
        match self {
            ArpRepr::EthernetIpv4 { .. } => ETHERNET_IPV4_LEN,
        }
    }

    /// Writes the packet.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ArpPacket<T>) {
        match *self {
            ArpRepr::EthernetIpv4 {
                operation,
                source_hardware_addr,
                source_protocol_addr,
                target_hardware_addr,
                target_protocol_addr,
            } => {
                packet.set_hardware_type(HARDWARE_ETHERNET);
                packet.set_protocol_type(EtherType::IPV4);
                packet.set_hardware_len(6);
                packet.set_protocol_len(4);
                packet.set_operation(operation);
                packet.set_source_hardware_addr(source_hardware_addr);
                packet.set_source_protocol_addr(source_protocol_addr);
                packet.set_target_hardware_addr(target_hardware_addr);
                packet.set_target_protocol_addr(target_protocol_addr);
            }
        }
    }
}

impl fmt::Display for ArpRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArpRepr::EthernetIpv4 {
                operation,
                source_hardware_addr,
                source_protocol_addr,
                target_hardware_addr,
                target_protocol_addr,
            } => write!(
                f,
                "arp {operation} src={source_hardware_addr}/{source_protocol_addr} \
                 tgt={target_hardware_addr}/{target_protocol_addr}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Who-has 10.0.0.2 tell 10.0.0.1 from 02:00:00:00:00:01.
    static REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x0a,
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x02,
    ];

    fn request_repr() -> ArpRepr {
        ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            source_hardware_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            source_protocol_addr: Ipv4Addr::new(10, 0, 0, 1),
            target_hardware_addr: EthernetAddress::UNSPECIFIED,
            target_protocol_addr: Ipv4Addr::new(10, 0, 0, 2),
        }
    }

    #[test]
    fn fields() {
        let packet = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(packet.hardware_type(), 1);
        assert_eq!(packet.protocol_type(), EtherType::IPV4);
        assert_eq!((packet.hardware_len(), packet.protocol_len()), (6, 4));
        assert_eq!(packet.operation(), ArpOperation::Request);
        assert_eq!(packet.source_protocol_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(packet.target_protocol_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert!(packet.is_ethernet_ipv4());
    }

    #[test]
    fn repr_round_trip() {
        let packet = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        let repr = ArpRepr::parse(&packet).unwrap();
        assert_eq!(repr, request_repr());
        let mut out = [0xAAu8; ETHERNET_IPV4_LEN];
        repr.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, REQUEST);
        assert_eq!(repr.buffer_len(), 28);
    }

    #[test]
    fn setters_make_a_reply() {
        let mut bytes = REQUEST;
        let mut packet = ArpPacket::new_checked(&mut bytes[..]).unwrap();
        let mac = EthernetAddress([2, 0, 0, 0, 0, 2]);
        packet.set_operation(ArpOperation::Reply);
        packet.set_target_hardware_addr(packet.source_hardware_addr());
        packet.set_target_protocol_addr(packet.source_protocol_addr());
        packet.set_source_hardware_addr(mac);
        packet.set_source_protocol_addr(Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(packet.operation(), ArpOperation::Reply);
        assert_eq!(packet.source_hardware_addr(), mac);
        assert_eq!(
            packet.target_hardware_addr(),
            EthernetAddress([2, 0, 0, 0, 0, 1])
        );
        assert_eq!(packet.target_protocol_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(bytes[7], 2);
    }

    #[test]
    fn operation_numbers() {
        for op in [0u16, 1, 2, 3, 0xFFFF] {
            assert_eq!(u16::from(ArpOperation::from(op)), op);
        }
        assert_eq!(ArpOperation::from(3), ArpOperation::Other(3));
    }

    #[test]
    fn truncated_and_malformed() {
        for len in 0..REQUEST.len() {
            assert_eq!(
                ArpPacket::new_checked(&REQUEST[..len]),
                Err(Error::Truncated),
                "length {len}"
            );
        }
        for (at, value) in [(1, 6u8), (2, 0x86), (4, 8), (5, 16)] {
            let mut bytes = REQUEST.to_vec();
            bytes[at] = value;
            bytes.resize(64, 0);
            let packet = ArpPacket::new_checked(&bytes[..]).unwrap();
            assert_eq!(ArpRepr::parse(&packet), Err(Error::Malformed), "byte {at}");
        }
        // A complete packet with 1-byte addresses is too short for the Ethernet/IPv4 view.
        let tiny = [0, 1, 8, 0, 1, 1, 0, 1, 0xa, 0xb, 0xc, 0xd];
        assert_eq!(ArpPacket::new_checked(&tiny[..]), Err(Error::Unsupported));
    }
}
