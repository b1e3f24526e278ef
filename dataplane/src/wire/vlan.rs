//! IEEE 802.1Q / 802.1ad VLAN tags: the 4-byte tag view, its repr, and `l3_offset`, which
//! finds the L3 header of a frame behind up to two tags.

use core::fmt;

use super::ethernet::{self, EtherType};
use super::{clamp, read_u16, write_u16, Error, Result};

/// Length of a VLAN tag after the TPID: TCI (2 bytes) + encapsulated EtherType (2 bytes).
pub const HEADER_LEN: usize = 4;

/// Largest valid VLAN ID (4095 is reserved, but it fits the field).
pub const MAX_VLAN_ID: u16 = 0x0FFF;

mod field {
    pub const TCI: usize = 0;
    pub const ETHERTYPE: usize = 2;
    pub const PAYLOAD: usize = 4;
}

/// A view of one VLAN tag: the 4 bytes that follow a `0x8100`/`0x88A8` TPID, then the
/// tagged payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanHeader<T> {
    /// Wraps `buffer` without checking its length.
    pub const fn new_unchecked(buffer: T) -> VlanHeader<T> {
        VlanHeader { buffer }
    }

    /// Wraps `buffer` and checks that it holds a whole tag.
    pub fn new_checked(buffer: T) -> Result<VlanHeader<T>> {
        let tag = Self::new_unchecked(buffer);
        tag.check_len()?;
        Ok(tag)
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

    /// The whole Tag Control Information field.
    pub fn tci(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::TCI)
    }

    /// Priority Code Point (0–7).
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop Eligible Indicator.
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// The VLAN ID (12 bits).
    pub fn vlan_id(&self) -> u16 {
        self.tci() & MAX_VLAN_ID
    }

    /// The EtherType of what the tag encapsulates (another TPID for QinQ).
    pub fn ethertype(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// Everything after the tag.
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[clamp(field::PAYLOAD..data.len(), data.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanHeader<T> {
    /// Sets the whole TCI.
    pub fn set_tci(&mut self, tci: u16) {
        write_u16(self.buffer.as_mut(), field::TCI, tci);
    }

    /// Sets the PCP (only the low 3 bits of `pcp` are used).
    pub fn set_pcp(&mut self, pcp: u8) {
        let tci = (self.tci() & 0x1FFF) | (u16::from(pcp & 0x7) << 13);
        self.set_tci(tci);
    }

    /// Sets the DEI.
    pub fn set_dei(&mut self, dei: bool) {
        let tci = (self.tci() & !0x1000) | if dei { 0x1000 } else { 0 };
        self.set_tci(tci);
    }

    /// Sets the VLAN ID (only the low 12 bits of `vlan_id` are used).
    pub fn set_vlan_id(&mut self, vlan_id: u16) {
        let tci = (self.tci() & !MAX_VLAN_ID) | (vlan_id & MAX_VLAN_ID);
        self.set_tci(tci);
    }

    /// Sets the encapsulated EtherType.
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        write_u16(self.buffer.as_mut(), field::ETHERTYPE, ethertype.0);
    }

    /// Everything after the tag, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let data = self.buffer.as_mut();
        let len = data.len();
        &mut data[clamp(field::PAYLOAD..len, len)]
    }
}

/// The owned contents of a VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanRepr {
    /// Priority Code Point (0–7).
    pub pcp: u8,
    /// Drop Eligible Indicator.
    pub dei: bool,
    /// VLAN ID (0–4095).
    pub vlan_id: u16,
    /// EtherType of the encapsulated payload.
    pub ethertype: EtherType,
}

impl VlanRepr {
    /// Reads a tag.
    pub fn parse<T: AsRef<[u8]>>(tag: &VlanHeader<T>) -> Result<VlanRepr> {
        tag.check_len()?;
        Ok(VlanRepr {
            pcp: tag.pcp(),
            dei: tag.dei(),
            vlan_id: tag.vlan_id(),
            ethertype: tag.ethertype(),
        })
    }

    /// Bytes the tag takes (after the TPID).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the tag; `pcp` and `vlan_id` are masked to their field widths.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, tag: &mut VlanHeader<T>) {
        let tci = (u16::from(self.pcp & 0x7) << 13)
            | if self.dei { 0x1000 } else { 0 }
            | (self.vlan_id & MAX_VLAN_ID);
        tag.set_tci(tci);
        tag.set_ethertype(self.ethertype);
    }
}

impl fmt::Display for VlanRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "vlan id={} pcp={} dei={} type={}",
            self.vlan_id, self.pcp, self.dei as u8, self.ethertype
        )
    }
}

/// Finds the L3 header of an Ethernet frame, skipping up to two VLAN tags (802.1Q
/// `0x8100` or 802.1ad `0x88A8`, in any order).
///
/// Returns `(offset of the L3 header from the start of the frame, its EtherType, the VLAN
/// ID of the outermost tag if any)`. [`Error::Truncated`] if the frame ends inside the
/// Ethernet header or a tag; [`Error::Unsupported`] for a third tag.
pub fn l3_offset(frame: &[u8]) -> Result<(usize, EtherType, Option<u16>)> {
    let eth = ethernet::Frame::new_checked(frame)?;
    let mut ethertype = eth.ethertype();
    let mut offset = ethernet::HEADER_LEN;
    let mut outer_vid = None;
    for _ in 0..2 {
        if !ethertype.is_vlan() {
            return Ok((offset, ethertype, outer_vid));
        }
        let tag = VlanHeader::new_checked(frame.get(offset..).ok_or(Error::Truncated)?)?;
        outer_vid = outer_vid.or(Some(tag.vlan_id()));
        ethertype = tag.ethertype();
        offset += HEADER_LEN;
    }
    if ethertype.is_vlan() {
        return Err(Error::Unsupported);
    }
    Ok((offset, ethertype, outer_vid))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ether(dst=00:00:00:00:00:02, src=00:00:00:00:00:01, type=0x8100)
    // / Dot1Q(prio=5, id=1, vlan=100, type=0x0800) / 2 payload bytes
    static TAGGED: [u8; 20] = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x81, 0x00, 0xb0,
        0x64, 0x08, 0x00, 0x45, 0x00,
    ];

    // QinQ: outer 802.1ad vid 10, inner 802.1Q vid 20 pcp 3, then IPv6.
    static QINQ: [u8; 22] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x88, 0xa8, 0x00,
        0x0a, 0x81, 0x00, 0x60, 0x14, 0x86, 0xdd,
    ];

    #[test]
    fn tag_fields() {
        let tag = VlanHeader::new_checked(&TAGGED[14..]).unwrap();
        assert_eq!(tag.tci(), 0xb064);
        assert_eq!(tag.pcp(), 5);
        assert!(tag.dei());
        assert_eq!(tag.vlan_id(), 100);
        assert_eq!(tag.ethertype(), EtherType::IPV4);
        assert_eq!(tag.payload(), &[0x45, 0x00]);
    }

    #[test]
    fn repr_round_trip() {
        let tag = VlanHeader::new_checked(&TAGGED[14..]).unwrap();
        let repr = VlanRepr::parse(&tag).unwrap();
        assert_eq!(
            repr,
            VlanRepr {
                pcp: 5,
                dei: true,
                vlan_id: 100,
                ethertype: EtherType::IPV4
            }
        );
        let mut out = [0u8; HEADER_LEN];
        repr.emit(&mut VlanHeader::new_unchecked(&mut out[..]));
        assert_eq!(out, TAGGED[14..18]);
    }

    #[test]
    fn setters_then_getters() {
        let mut bytes = [0u8; 4];
        let mut tag = VlanHeader::new_unchecked(&mut bytes[..]);
        tag.set_vlan_id(0xFFFF);
        assert_eq!(tag.vlan_id(), 0xFFF);
        assert_eq!(tag.pcp(), 0);
        tag.set_pcp(0xFF);
        tag.set_vlan_id(42);
        tag.set_dei(false);
        assert_eq!((tag.pcp(), tag.dei(), tag.vlan_id()), (7, false, 42));
        tag.set_dei(true);
        tag.set_pcp(1);
        assert_eq!((tag.pcp(), tag.dei(), tag.vlan_id()), (1, true, 42));
        tag.set_ethertype(EtherType::ARP);
        assert_eq!(bytes, [0x30, 0x2a, 0x08, 0x06]);
    }

    #[test]
    fn l3_offset_untagged_single_double() {
        let mut untagged = TAGGED;
        untagged[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(l3_offset(&untagged), Ok((14, EtherType::ARP, None)));
        assert_eq!(l3_offset(&TAGGED), Ok((18, EtherType::IPV4, Some(100))));
        assert_eq!(l3_offset(&QINQ), Ok((22, EtherType::IPV6, Some(10))));
        let inner = VlanHeader::new_checked(&QINQ[18..]).unwrap();
        assert_eq!((inner.vlan_id(), inner.pcp()), (20, 3));
    }

    #[test]
    fn l3_offset_truncated_and_triple() {
        for len in 0..QINQ.len() {
            assert_eq!(
                l3_offset(&QINQ[..len]),
                Err(Error::Truncated),
                "length {len}"
            );
        }
        let mut triple = QINQ.to_vec();
        triple[20..22].copy_from_slice(&[0x81, 0x00]);
        triple.extend_from_slice(&[0x00, 0x05, 0x08, 0x00]);
        assert_eq!(l3_offset(&triple), Err(Error::Unsupported));
    }
}
