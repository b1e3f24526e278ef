//! The stamp the generator writes at the start of each UDP payload (flow, per-flow
//! sequence number, transmit time) and finds again in whatever the device under test
//! delivers, whatever it did to the headers (MAC rewrite, TTL, NAT, VLAN tags).

/// Marks a payload as the generator's.
pub const MAGIC: u16 = 0xf3a7;

/// Bytes of the stamp: magic (2), flow (4), sequence (4), transmit TSC (low 48 bits: 6),
/// trial (2).
pub const STAMP_LEN: usize = 18;

/// The TSC bits a stamp keeps: 48 bits wrap after more than a day at 3 GHz, and
/// latencies are taken modulo 2^48.
pub const TSC_MASK: u64 = (1 << 48) - 1;

/// What one packet carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    /// Flow index, 0..flows.
    pub flow: u32,
    /// The flow's packet number, from 0.
    pub seq: u32,
    /// TSC when the packet was handed to the transmit queue (low 48 bits).
    pub tsc: u64,
    /// Which trial sent it (wrapping): a packet of an earlier trial that arrives late is
    /// not counted as one of this trial's.
    pub trial: u16,
}

impl Stamp {
    /// Writes the stamp into the first [`STAMP_LEN`] bytes of `out`.
    #[inline]
    pub fn write(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&MAGIC.to_be_bytes());
        out[2..6].copy_from_slice(&self.flow.to_be_bytes());
        out[6..10].copy_from_slice(&self.seq.to_be_bytes());
        out[10..16].copy_from_slice(&(self.tsc & TSC_MASK).to_be_bytes()[2..]);
        out[16..18].copy_from_slice(&self.trial.to_be_bytes());
    }

    /// Reads a stamp at the start of `p`, if the magic is there.
    #[inline]
    pub fn read(p: &[u8]) -> Option<Stamp> {
        let p = p.get(..STAMP_LEN)?;
        if u16::from_be_bytes([p[0], p[1]]) != MAGIC {
            return None;
        }
        let mut tsc = [0u8; 8];
        tsc[2..].copy_from_slice(&p[10..16]);
        Some(Stamp {
            flow: u32::from_be_bytes(p[2..6].try_into().ok()?),
            seq: u32::from_be_bytes(p[6..10].try_into().ok()?),
            tsc: u64::from_be_bytes(tsc),
            trial: u16::from_be_bytes([p[16], p[17]]),
        })
    }

    /// The stamp of a received Ethernet frame: up to two VLAN tags, then an IPv4
    /// (unfragmented, any options) or IPv6 (no extension headers) UDP datagram whose
    /// payload starts with a stamp. `None` for anything else.
    #[inline]
    pub fn find(frame: &[u8]) -> Option<Stamp> {
        let mut off = 12;
        let mut ethertype = u16::from_be_bytes([*frame.get(off)?, *frame.get(off + 1)?]);
        off += 2;
        for _ in 0..2 {
            if ethertype != 0x8100 && ethertype != 0x88a8 {
                break;
            }
            ethertype = u16::from_be_bytes([*frame.get(off + 2)?, *frame.get(off + 3)?]);
            off += 4;
        }
        let l4 = match ethertype {
            0x0800 => {
                let ip = frame.get(off..off + 20)?;
                let ihl = usize::from(ip[0] & 0x0f) * 4;
                let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
                if ip[0] >> 4 != 4 || ihl < 20 || ip[9] != 17 || frag != 0 {
                    return None;
                }
                off + ihl
            }
            0x86dd => {
                let ip = frame.get(off..off + 40)?;
                if ip[0] >> 4 != 6 || ip[6] != 17 {
                    return None;
                }
                off + 40
            }
            _ => return None,
        };
        Stamp::read(frame.get(l4 + 8..)?)
    }
}
