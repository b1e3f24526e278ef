//! The pcap writer of `ferrulectl trace dump --pcap`: classic libpcap format, Ethernet
//! link type, microsecond timestamps.

use super::*;

/// Largest packet a pcap record of `trace dump --pcap` holds (the file's snaplen).
pub const PCAP_SNAPLEN: u32 = 65_535;

/// One packet of a pcap file.
#[derive(Debug, Clone, PartialEq)]
pub struct PcapRecord {
    /// Seconds since the daemon started (the record's timestamp).
    pub time_secs: f64,
    /// The bytes captured (at most [`PCAP_SNAPLEN`] are written).
    pub data: Vec<u8>,
    /// Length on the wire.
    pub orig_len: u32,
}

/// Decodes the captured bytes of `trace.dump` packets; bad hex is an unexpected reply.
pub fn pcap_records(packets: &[TracedPacket]) -> Result<Vec<PcapRecord>, CtlError> {
    packets
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let data = decode_hex(&p.data_hex).map_err(|e| {
                ClientError::Protocol(format!(
                    "result of `{}`: packets[{i}].data_hex: {e}",
                    trace_method::DUMP
                ))
            })?;
            Ok(PcapRecord {
                time_secs: p.time_secs,
                data,
                orig_len: p.len,
            })
        })
        .collect()
}

/// A classic pcap file (little-endian, magic 0xa1b2c3d4, version 2.4, microsecond
/// timestamps, link type 1 Ethernet) holding `records`.
pub fn pcap_file(records: &[PcapRecord]) -> Vec<u8> {
    const MAGIC: u32 = 0xa1b2_c3d4;
    const LINKTYPE_ETHERNET: u32 = 1;
    let mut out = Vec::with_capacity(24 + records.iter().map(|r| 16 + r.data.len()).sum::<usize>());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes()); // thiszone: timestamps are UTC
    out.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    out.extend_from_slice(&PCAP_SNAPLEN.to_le_bytes());
    out.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    for r in records {
        let (secs, micros) = pcap_timestamp(r.time_secs);
        let data = &r.data[..r.data.len().min(PCAP_SNAPLEN as usize)];
        // Fits: at most PCAP_SNAPLEN.
        let caplen = data.len() as u32;
        out.extend_from_slice(&secs.to_le_bytes());
        out.extend_from_slice(&micros.to_le_bytes());
        out.extend_from_slice(&caplen.to_le_bytes());
        // Readers reject a record longer than the packet it says it came from.
        let orig_len = r
            .orig_len
            .max(u32::try_from(r.data.len()).unwrap_or(u32::MAX));
        out.extend_from_slice(&orig_len.to_le_bytes());
        out.extend_from_slice(data);
    }
    out
}

/// Seconds and microseconds of a pcap record; clamped to what the format holds.
pub(crate) fn pcap_timestamp(secs: f64) -> (u32, u32) {
    if !secs.is_finite() || secs <= 0.0 {
        return (0, 0);
    }
    if secs >= f64::from(u32::MAX) {
        return (u32::MAX, 999_999);
    }
    // In range (checked above); `as` truncates towards zero, which is intended.
    let micros = (secs * 1e6).round() as u64;
    ((micros / 1_000_000) as u32, (micros % 1_000_000) as u32)
}
