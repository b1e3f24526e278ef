//! SCTP (RFC 9260): the common header view, a chunk iterator, and the CRC32c checksum
//! (software, table-driven; RFC 3309 / RFC 9260 Appendix A).

use super::{read_u16, read_u32, write_u16, write_u32, Error, Result};

/// Length of the common header.
pub const HEADER_LEN: usize = 12;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const VERIFICATION_TAG: usize = 4;
    pub const CHECKSUM: usize = 8;
}

/// Chunk types the dataplane cares about (conntrack follows INIT / ABORT / SHUTDOWN).
pub mod chunk_type {
    pub const DATA: u8 = 0;
    pub const INIT: u8 = 1;
    pub const INIT_ACK: u8 = 2;
    pub const SACK: u8 = 3;
    pub const HEARTBEAT: u8 = 4;
    pub const HEARTBEAT_ACK: u8 = 5;
    pub const ABORT: u8 = 6;
    pub const SHUTDOWN: u8 = 7;
    pub const SHUTDOWN_ACK: u8 = 8;
    pub const ERROR: u8 = 9;
    pub const COOKIE_ECHO: u8 = 10;
    pub const COOKIE_ACK: u8 = 11;
    pub const SHUTDOWN_COMPLETE: u8 = 14;
}

/// The CRC32c (Castagnoli, reflected polynomial 0x82F63B78) lookup table.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// An incremental CRC32c.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crc32c(u32);

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32c {
    /// A fresh CRC.
    pub const fn new() -> Crc32c {
        Crc32c(0xFFFF_FFFF)
    }

    /// Feeds `data`.
    pub fn update(mut self, data: &[u8]) -> Crc32c {
        for &byte in data {
            self.0 = (self.0 >> 8) ^ CRC32C_TABLE[((self.0 ^ u32::from(byte)) & 0xFF) as usize];
        }
        self
    }

    /// The final value.
    pub const fn finish(self) -> u32 {
        !self.0
    }
}

/// The CRC32c of `data` (check value: `crc32c(b"123456789") == 0xE3069283`).
pub fn crc32c(data: &[u8]) -> u32 {
    Crc32c::new().update(data).finish()
}

/// A view of an SCTP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SctpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SctpPacket<T> {
    /// Wraps `buffer` without checking it.
    pub const fn new_unchecked(buffer: T) -> SctpPacket<T> {
        SctpPacket { buffer }
    }

    /// Wraps `buffer` and runs [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<SctpPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// [`Error::Truncated`] if the buffer is shorter than the 12-byte common header.
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

    /// Source port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Verification tag.
    pub fn verification_tag(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::VERIFICATION_TAG)
    }

    /// The checksum as a CRC32c value. The field is stored least significant byte first
    /// (as the reflected CRC comes out), so this equals [`crc32c`] of the packet with the
    /// field zeroed when the packet is correct. The raw big-endian reading of the four
    /// bytes is `checksum().swap_bytes()`.
    pub fn checksum(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::CHECKSUM).swap_bytes()
    }

    /// The chunks (everything after the common header). The packet is the whole
    /// buffer: wrap exactly the IP payload.
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        data.get(HEADER_LEN..).unwrap_or(&[])
    }

    /// The chunks, one at a time.
    pub fn chunks(&self) -> SctpChunks<'_> {
        SctpChunks {
            data: self.payload(),
        }
    }

    fn compute_checksum(&self) -> u32 {
        let data = self.buffer.as_ref();
        Crc32c::new()
            .update(&data[..field::CHECKSUM])
            .update(&[0; 4])
            .update(&data[HEADER_LEN..])
            .finish()
    }

    /// Whether the CRC32c over the packet (with the checksum field taken as zero) matches.
    pub fn verify_checksum(&self) -> bool {
        self.compute_checksum() == self.checksum()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SctpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, port);
    }

    /// Sets the verification tag.
    pub fn set_verification_tag(&mut self, tag: u32) {
        write_u32(self.buffer.as_mut(), field::VERIFICATION_TAG, tag);
    }

    /// Sets the checksum (a CRC32c value, stored least significant byte first).
    pub fn set_checksum(&mut self, crc: u32) {
        write_u32(self.buffer.as_mut(), field::CHECKSUM, crc.swap_bytes());
    }

    /// Computes and writes the CRC32c over the whole buffer.
    pub fn fill_checksum(&mut self) {
        let crc = self.compute_checksum();
        self.set_checksum(crc);
    }

    /// The chunks, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..)
            .unwrap_or(&mut [])
    }
}

/// One SCTP chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SctpChunk<'a> {
    /// Chunk type (see [`chunk_type`]).
    pub chunk_type: u8,
    /// Chunk flags.
    pub flags: u8,
    /// The chunk value (after the 4-byte chunk header, without padding).
    pub value: &'a [u8],
}

/// Iterator over the chunks of an SCTP packet. Yields `Err` once and stops for a chunk
/// whose length is below 4 ([`Error::Malformed`]) or runs past the packet
/// ([`Error::Truncated`]).
#[derive(Debug, Clone)]
pub struct SctpChunks<'a> {
    data: &'a [u8],
}

impl<'a> Iterator for SctpChunks<'a> {
    type Item = Result<SctpChunk<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.data.is_empty() {
            return None;
        }
        let data = core::mem::take(&mut self.data);
        if data.len() < 4 {
            return Some(Err(Error::Truncated));
        }
        let len = usize::from(read_u16(data, 2));
        if len < 4 {
            return Some(Err(Error::Malformed));
        }
        let Some(value) = data.get(4..len) else {
            return Some(Err(Error::Truncated));
        };
        let padded = (len + 3) & !3;
        self.data = data.get(padded..).unwrap_or(&[]);
        Some(Ok(SctpChunk {
            chunk_type: data[0],
            flags: data[1],
            value,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_check_values() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        // RFC 3720 B.4 test vectors.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
        assert_eq!(
            Crc32c::default().update(b"1234").update(b"56789").finish(),
            0xE306_9283
        );
    }

    // SCTP INIT 5000 → 80, vtag 0, init tag 0x11223344, a_rwnd 65535, 10/10 streams,
    // initial TSN 1; the checksum bytes are filled in by the test.
    fn init_packet() -> Vec<u8> {
        vec![
            0x13, 0x88, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // header
            0x01, 0x00, 0x00, 0x14, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0xff, 0xff, 0x00, 0x0a,
            0x00, 0x0a, 0x00, 0x00, 0x00, 0x01,
        ]
    }

    #[test]
    fn fields_and_checksum() {
        let mut bytes = init_packet();
        let mut packet = SctpPacket::new_checked(&mut bytes[..]).unwrap();
        assert!(!packet.verify_checksum());
        packet.fill_checksum();
        assert!(packet.verify_checksum());
        let crc = packet.checksum();
        // Independently: CRC32c over the packet with a zero field, stored LSB first.
        let mut zeroed = bytes.clone();
        zeroed[8..12].fill(0);
        assert_eq!(crc32c(&zeroed), crc);
        assert_eq!(&bytes[8..12], &crc.to_le_bytes());
        let packet = SctpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!((packet.src_port(), packet.dst_port()), (5000, 80));
        assert_eq!(packet.verification_tag(), 0);
        let chunks: Vec<_> = packet.chunks().collect();
        assert_eq!(chunks.len(), 1);
        let init = chunks[0].unwrap();
        assert_eq!(
            (init.chunk_type, init.flags, init.value.len()),
            (chunk_type::INIT, 0, 16)
        );
        let mut corrupt = bytes.clone();
        corrupt[20] ^= 1;
        assert!(!SctpPacket::new_checked(&corrupt[..])
            .unwrap()
            .verify_checksum());
    }

    #[test]
    fn setters_then_getters() {
        let mut bytes = init_packet();
        let mut packet = SctpPacket::new_checked(&mut bytes[..]).unwrap();
        packet.set_src_port(1);
        packet.set_dst_port(2);
        packet.set_verification_tag(0xdead_beef);
        packet.set_checksum(0x0102_0304);
        assert_eq!((packet.src_port(), packet.dst_port()), (1, 2));
        assert_eq!(packet.verification_tag(), 0xdead_beef);
        assert_eq!(packet.checksum(), 0x0102_0304);
        assert_eq!(packet.payload_mut().len(), 20);
        assert_eq!(&bytes[8..12], &[4, 3, 2, 1]);
    }

    #[test]
    fn chunk_errors() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                SctpPacket::new_checked(&init_packet()[..len]),
                Err(Error::Truncated)
            );
        }
        let bytes = init_packet();
        // Cut inside the chunk.
        let packet = SctpPacket::new_checked(&bytes[..20]).unwrap();
        assert_eq!(
            packet.chunks().collect::<Vec<_>>(),
            vec![Err(Error::Truncated)]
        );
        let packet = SctpPacket::new_checked(&bytes[..14]).unwrap();
        assert_eq!(
            packet.chunks().collect::<Vec<_>>(),
            vec![Err(Error::Truncated)]
        );
        let mut zero = bytes.clone();
        zero[14..16].fill(0);
        let packet = SctpPacket::new_checked(&zero[..]).unwrap();
        assert_eq!(
            packet.chunks().collect::<Vec<_>>(),
            vec![Err(Error::Malformed)]
        );
        // Two chunks, the first padded (length 5 → 8 bytes).
        let mut two = bytes[..12].to_vec();
        two.extend_from_slice(&[0x00, 0x03, 0x00, 0x05, 0xaa, 0, 0, 0]);
        two.extend_from_slice(&[0x0b, 0x00, 0x00, 0x04]);
        let packet = SctpPacket::new_checked(&two[..]).unwrap();
        let chunks: Vec<_> = packet.chunks().map(|c| c.unwrap()).collect();
        assert_eq!(
            chunks[0],
            SctpChunk {
                chunk_type: 0,
                flags: 3,
                value: &[0xaa]
            }
        );
        assert_eq!(chunks[1].chunk_type, chunk_type::COOKIE_ACK);
        assert_eq!(chunks.len(), 2);
    }
}
