//! The traffic a generator sends: address and port ranges, the flow mix walked over
//! them, frame sizes, and the UDP frame each packet is written from (with its stamp).

use super::stamp::{Stamp, STAMP_LEN};
use anyhow::{bail, Context, Result};
use std::net::IpAddr;
use std::str::FromStr;

/// The most flows a run may cycle through (each costs 8 bytes of sequence state).
pub const MAX_FLOWS: u64 = 1 << 24;

/// Bytes of Ethernet frame check sequence: counted in a frame size, never in the mbuf.
pub const FCS_LEN: usize = 4;

/// A contiguous range of addresses of one family, e.g. `10.0.0.1-10.0.3.255`,
/// `10.0.0.0/22` (every address in it) or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrRange {
    /// First address, as a number (IPv4 in the low 32 bits).
    pub first: u128,
    /// How many addresses (≥ 1).
    pub count: u128,
    pub v6: bool,
}

fn addr_bits(a: IpAddr) -> (u128, bool) {
    match a {
        IpAddr::V4(a) => (u128::from(u32::from(a)), false),
        IpAddr::V6(a) => (u128::from(a), true),
    }
}

impl FromStr for AddrRange {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if let Some((a, b)) = s.split_once('-') {
            let a: IpAddr = a
                .trim()
                .parse()
                .with_context(|| format!("bad address {a:?}"))?;
            let b: IpAddr = b
                .trim()
                .parse()
                .with_context(|| format!("bad address {b:?}"))?;
            let ((a, av6), (b, bv6)) = (addr_bits(a), addr_bits(b));
            if av6 != bv6 {
                bail!("range {s:?} mixes IPv4 and IPv6");
            }
            if b < a {
                bail!("range {s:?} ends before it starts");
            }
            return Ok(AddrRange {
                first: a,
                count: (b - a).saturating_add(1),
                v6: av6,
            });
        }
        if s.contains('/') {
            let net: ipnet::IpNet = s.parse().with_context(|| format!("bad prefix {s:?}"))?;
            let (first, v6) = addr_bits(net.network());
            let host_bits = u32::from(net.max_prefix_len() - net.prefix_len());
            let count = 1u128.checked_shl(host_bits).unwrap_or(u128::MAX);
            return Ok(AddrRange { first, count, v6 });
        }
        let a: IpAddr = s
            .parse()
            .with_context(|| format!("bad address, range or prefix {s:?}"))?;
        let (first, v6) = addr_bits(a);
        Ok(AddrRange {
            first,
            count: 1,
            v6,
        })
    }
}

/// A range of UDP ports, `1024-65535` or one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub count: u32,
}

impl FromStr for PortRange {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let port = |p: &str| -> Result<u16> {
            p.trim()
                .parse()
                .with_context(|| format!("bad port {p:?} (0-65535)"))
        };
        let (a, b) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(s)?, port(s)?),
        };
        if b < a {
            bail!("port range {s:?} ends before it starts");
        }
        Ok(PortRange {
            first: a,
            count: u32::from(b - a) + 1,
        })
    }
}

/// Which flows to send: the first `flows` combinations of the four ranges, the source
/// port varying fastest, then the destination port, the source address and the
/// destination address; sent round-robin, one packet per flow in turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSpec {
    pub src: AddrRange,
    pub dst: AddrRange,
    pub sport: PortRange,
    pub dport: PortRange,
    pub flows: u64,
}

impl FlowSpec {
    /// Checks families and that the ranges hold `flows` distinct combinations.
    pub fn validate(&self) -> Result<()> {
        if self.src.v6 != self.dst.v6 {
            bail!("--src-ip and --dst-ip must be the same address family");
        }
        if self.flows == 0 || self.flows > MAX_FLOWS {
            bail!("--flows must be 1 to {MAX_FLOWS}, not {}", self.flows);
        }
        let room = self
            .src
            .count
            .saturating_mul(self.dst.count)
            .saturating_mul(u128::from(self.sport.count))
            .saturating_mul(u128::from(self.dport.count));
        if room < u128::from(self.flows) {
            bail!(
                "--flows {} but the address and port ranges hold only {room} combinations: \
                 widen --src-port, --dst-port, --src-ip or --dst-ip",
                self.flows
            );
        }
        Ok(())
    }

    /// The radices of the odometer, fastest first: sport, dport, src, dst.
    fn radices(&self) -> [u128; 4] {
        [
            u128::from(self.sport.count),
            u128::from(self.dport.count),
            self.src.count,
            self.dst.count,
        ]
    }

    /// Flow `index`'s five-tuple (for tests and reports; the generator walks instead).
    pub fn tuple(&self, index: u64) -> Tuple {
        let mut rest = u128::from(index);
        let mut d = [0u128; 4];
        for (digit, radix) in d.iter_mut().zip(self.radices()) {
            *digit = rest % radix;
            rest /= radix;
        }
        self.tuple_of(&d)
    }

    fn tuple_of(&self, d: &[u128; 4]) -> Tuple {
        Tuple {
            sport: self.sport.first.wrapping_add(d[0] as u16),
            dport: self.dport.first.wrapping_add(d[1] as u16),
            src: self.src.first.wrapping_add(d[2]),
            dst: self.dst.first.wrapping_add(d[3]),
        }
    }
}

/// One flow's addresses (as numbers, IPv4 in the low 32 bits) and ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tuple {
    pub src: u128,
    pub dst: u128,
    pub sport: u16,
    pub dport: u16,
}

/// Walks a [`FlowSpec`]'s flows in order, wrapping after the last, without a division
/// per packet.
#[derive(Debug, Clone)]
pub struct FlowWalk {
    spec: FlowSpec,
    radices: [u128; 4],
    digits: [u128; 4],
    index: u64,
}

impl FlowWalk {
    pub fn new(spec: &FlowSpec) -> Self {
        FlowWalk {
            radices: spec.radices(),
            spec: spec.clone(),
            digits: [0; 4],
            index: 0,
        }
    }

    /// The next flow: its index (0..flows) and tuple.
    #[inline]
    pub fn next_flow(&mut self) -> (u32, Tuple) {
        let out = (self.index as u32, self.spec.tuple_of(&self.digits));
        self.index += 1;
        if self.index == self.spec.flows {
            self.index = 0;
            self.digits = [0; 4];
        } else {
            for (digit, radix) in self.digits.iter_mut().zip(self.radices) {
                *digit += 1;
                if *digit < radix {
                    break;
                }
                *digit = 0;
            }
        }
        out
    }
}

/// Frame sizes to send, in turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeMix {
    /// Ethernet frame sizes including the FCS (RFC 2544's convention: a 64-byte frame
    /// is 60 bytes in the mbuf), one entry per packet of the repeating pattern.
    pub pattern: Vec<u16>,
    /// How it was asked for, for reports: `64`, `imix`, `64,1518`.
    pub name: String,
}

impl FromStr for SizeMix {
    type Err = anyhow::Error;

    /// `64`, `1518`, `imix` (simple IMIX: 64, 594 and 1518-byte frames, i.e. 40, 576 and
    /// 1500-byte IP packets, 7:4:1, interleaved)
    /// or a comma-separated list of sizes sent in turn.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let pattern: Vec<u16> = if s.eq_ignore_ascii_case("imix") {
            // 7:4:1, spread out so no run of one size is longer than needed.
            vec![64, 594, 64, 64, 594, 64, 1518, 64, 594, 64, 594, 64]
        } else {
            s.split(',')
                .map(|p| {
                    p.trim()
                        .parse::<u16>()
                        .with_context(|| format!("bad frame size {p:?}"))
                })
                .collect::<Result<_>>()?
        };
        if pattern.is_empty() {
            bail!("no frame size given");
        }
        Ok(SizeMix {
            pattern,
            name: s.to_ascii_lowercase(),
        })
    }
}

impl SizeMix {
    /// Mean frame size in bytes (with FCS).
    pub fn mean(&self) -> f64 {
        self.pattern.iter().map(|&s| f64::from(s)).sum::<f64>() / self.pattern.len() as f64
    }
}

/// Bytes a frame occupies on the wire beyond its size: preamble, SFD and the minimum
/// inter-frame gap (for line-rate figures in bits per second).
pub const WIRE_OVERHEAD: u64 = 20;

/// Ethernet + IP + UDP header bytes, before the stamp.
pub fn header_len(v6: bool) -> usize {
    14 + if v6 { 40 } else { 20 } + 8
}

/// Smallest frame size (with FCS) that holds the headers and the stamp.
pub fn min_frame(v6: bool) -> usize {
    header_len(v6) + STAMP_LEN + FCS_LEN
}

/// Writes frames: Ethernet, IPv4 or IPv6, UDP, the stamp, zero padding. The constant
/// parts and their checksum contributions are computed once per size.
#[derive(Debug, Clone)]
pub struct FrameWriter {
    v6: bool,
    /// One template per distinct size of the mix, indexed like `sizes`.
    templates: Vec<Template>,
}

#[derive(Debug, Clone)]
struct Template {
    /// Frame size with FCS.
    size: u16,
    bytes: Vec<u8>,
    /// Ones' complement sum of the IPv4 header's constant words (0 for IPv6).
    ip_sum: u32,
    /// Ones' complement sum of the UDP checksum's constant parts: the pseudo-header's
    /// protocol and length, the UDP length field, the padding.
    udp_sum: u32,
}

/// Adds `bytes` (big-endian 16-bit words, an odd last byte padded) to a ones'
/// complement sum.
fn sum_words(mut sum: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

impl FrameWriter {
    /// Templates for every size in `sizes`; fails when one is too small for the headers
    /// and the stamp or larger than 9,018 bytes.
    pub fn new(src_mac: [u8; 6], dst_mac: [u8; 6], v6: bool, sizes: &SizeMix) -> Result<Self> {
        let mut distinct: Vec<u16> = sizes.pattern.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let mut templates = Vec::new();
        for size in distinct {
            if usize::from(size) < min_frame(v6) {
                bail!(
                    "frame size {size} is too small: an {} frame with the generator's stamp \
                     needs at least {} bytes (with FCS)",
                    if v6 { "IPv6" } else { "IPv4" },
                    min_frame(v6)
                );
            }
            if size > 9018 {
                bail!("frame size {size} is larger than a 9,000-byte-MTU frame (9,018)");
            }
            templates.push(Template::new(src_mac, dst_mac, v6, size));
        }
        Ok(FrameWriter { v6, templates })
    }

    /// The mbuf data length of a frame of `size` (with FCS).
    pub fn data_len(size: u16) -> u16 {
        size - FCS_LEN as u16
    }

    /// Writes the frame of `size` for `tuple` with `stamp` into `out` (exactly
    /// `data_len(size)` bytes). `size` must be one of the mix's sizes.
    #[inline]
    pub fn write(&self, size: u16, tuple: &Tuple, stamp: &Stamp, out: &mut [u8]) {
        let t = self
            .templates
            .iter()
            .find(|t| t.size == size)
            .expect("size from the mix");
        out.copy_from_slice(&t.bytes);
        let l3 = 14;
        let (l4, addr_sum) = if self.v6 {
            let (s, d) = (tuple.src.to_be_bytes(), tuple.dst.to_be_bytes());
            out[l3 + 8..l3 + 24].copy_from_slice(&s);
            out[l3 + 24..l3 + 40].copy_from_slice(&d);
            (l3 + 40, sum_words(sum_words(0, &s), &d))
        } else {
            let (s, d) = (
                (tuple.src as u32).to_be_bytes(),
                (tuple.dst as u32).to_be_bytes(),
            );
            out[l3 + 12..l3 + 16].copy_from_slice(&s);
            out[l3 + 16..l3 + 20].copy_from_slice(&d);
            let sum = sum_words(sum_words(0, &s), &d);
            let csum = !fold(t.ip_sum + sum);
            out[l3 + 10..l3 + 12].copy_from_slice(&csum.to_be_bytes());
            (l3 + 20, sum)
        };
        out[l4..l4 + 2].copy_from_slice(&tuple.sport.to_be_bytes());
        out[l4 + 2..l4 + 4].copy_from_slice(&tuple.dport.to_be_bytes());
        let payload = l4 + 8;
        stamp.write(&mut out[payload..payload + STAMP_LEN]);
        let sum = t.udp_sum
            + addr_sum
            + u32::from(tuple.sport)
            + u32::from(tuple.dport)
            + sum_words(0, &out[payload..payload + STAMP_LEN]);
        let csum = match !fold(sum) {
            0 => 0xffff,
            c => c,
        };
        out[l4 + 6..l4 + 8].copy_from_slice(&csum.to_be_bytes());
    }
}

impl Template {
    fn new(src_mac: [u8; 6], dst_mac: [u8; 6], v6: bool, size: u16) -> Self {
        let len = usize::from(FrameWriter::data_len(size));
        let mut b = vec![0u8; len];
        b[0..6].copy_from_slice(&dst_mac);
        b[6..12].copy_from_slice(&src_mac);
        let l3 = 14;
        let ip_len = len - l3;
        let (l4, ip_sum) = if v6 {
            b[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            b[l3] = 0x60;
            b[l3 + 4..l3 + 6].copy_from_slice(&((ip_len - 40) as u16).to_be_bytes());
            b[l3 + 6] = 17; // UDP
            b[l3 + 7] = 64; // hop limit
            (l3 + 40, 0)
        } else {
            b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            b[l3] = 0x45;
            b[l3 + 2..l3 + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
            b[l3 + 6] = 0x40; // don't fragment
            b[l3 + 8] = 64; // TTL
            b[l3 + 9] = 17; // UDP
                            // Addresses and checksum are zero here: the sum covers the rest.
            (l3 + 20, sum_words(0, &b[l3..l3 + 20]))
        };
        let udp_len = (len - l4) as u16;
        b[l4 + 4..l4 + 6].copy_from_slice(&udp_len.to_be_bytes());
        // Pseudo-header protocol and length, the UDP length field, the (zero) padding.
        let udp_sum = 17 + u32::from(udp_len) + u32::from(udp_len);
        Template {
            size,
            bytes: b,
            ip_sum,
            udp_sum,
        }
    }
}
