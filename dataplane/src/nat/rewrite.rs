//! NAT header rewrites on IPv4 frames, in place, checksums updated incrementally (RFC
//! 1624): one endpoint of a packet (address plus TCP/UDP port or ICMP echo identifier),
//! and the packet quoted by an ICMP error; plus the flow key of a quoted packet, which
//! finds the connection an ICMP error is about.

use crate::flow::FlowKey;
use crate::wire::checksum;
use crate::wire::IpProtocol;
use std::net::{Ipv4Addr, Ipv6Addr};

/// IP protocol numbers the rewrites know.
const TCP: u8 = IpProtocol::TCP.0;
const UDP: u8 = IpProtocol::UDP.0;
const ICMP: u8 = IpProtocol::ICMP.0;
const ICMPV6: u8 = IpProtocol::ICMPV6.0;

/// Which endpoint of a packet a rewrite changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Src,
    Dst,
}

fn read16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn write16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn read_addr(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

/// Whether an ICMP (`icmpv6` false) or ICMPv6 message type is an error quoting a packet.
#[inline]
pub fn is_icmp_error(icmp_type: u8, icmpv6: bool) -> bool {
    if icmpv6 {
        (1..=4).contains(&icmp_type)
    } else {
        matches!(icmp_type, 3 | 11 | 12)
    }
}

/// Whether an ICMP type is an echo request or reply (IPv4 8/0, IPv6 128/129).
#[inline]
fn is_echo(icmp_type: u8, icmpv6: bool) -> bool {
    if icmpv6 {
        icmp_type == 128 || icmp_type == 129
    } else {
        icmp_type == 8 || icmp_type == 0
    }
}

/// Rewrites the address and port of endpoint `which` of the transport header at `l4`
/// of an IPv4 packet at `l3` (`l4 == 0`: no transport header, a later fragment — only
/// the address changes). The port is the TCP/UDP port, or for ICMP echo the
/// identifier. Returns false, changing nothing, when the headers are too short.
#[inline]
pub fn rewrite(
    frame: &mut [u8],
    l3: usize,
    l4: usize,
    proto: u8,
    which: Endpoint,
    addr: Ipv4Addr,
    port: u16,
) -> bool {
    if (proto == TCP || proto == UDP) && l4 >= l3 + 20 {
        if let Some(done) = rewrite_tcp_udp(frame, l3, l4, proto == TCP, which, addr, port) {
            return done;
        }
    }
    rewrite_any(frame, l3, l4, proto, which, addr, port)
}

/// [`rewrite`] of a TCP or UDP packet whose transport header follows a whole IPv4
/// header (the fast path's case), through fixed-size views of the two headers; `None`
/// when the frame is too short for them (the general path then decides). The same
/// bytes as the general path (the transport checksum's two updates in one fold).
#[inline(always)]
fn rewrite_tcp_udp(
    frame: &mut [u8],
    l3: usize,
    l4: usize,
    tcp: bool,
    which: Endpoint,
    addr: Ipv4Addr,
    port: u16,
) -> Option<bool> {
    let (head, rest) = frame.split_at_mut_checked(l4)?;
    let ip: &mut [u8; 20] = head.get_mut(l3..l3 + 20)?.try_into().ok()?;
    let (a, p) = if which == Endpoint::Src {
        (12, 0)
    } else {
        (16, 2)
    };
    let old_addr = u32::from_be_bytes([ip[a], ip[a + 1], ip[a + 2], ip[a + 3]]);
    // One address delta for both checksums (the transport one covers the address
    // through the pseudo-header), plus the port's for the transport checksum.
    let delta = checksum::delta32(old_addr, u32::from(addr));
    if tcp {
        let th: &mut [u8; 18] = rest.get_mut(..18)?.try_into().ok()?;
        let old_port = u16::from_be_bytes([th[p], th[p + 1]]);
        let csum = u16::from_be_bytes([th[16], th[17]]);
        let csum = checksum::apply(csum, delta + u32::from(!old_port) + u32::from(port));
        th[16..18].copy_from_slice(&csum.to_be_bytes());
        th[p..p + 2].copy_from_slice(&port.to_be_bytes());
    } else {
        let uh: &mut [u8; 8] = rest.get_mut(..8)?.try_into().ok()?;
        let old_port = u16::from_be_bytes([uh[p], uh[p + 1]]);
        let csum = u16::from_be_bytes([uh[6], uh[7]]);
        if csum != 0 {
            let c = checksum::apply(csum, delta + u32::from(!old_port) + u32::from(port));
            let c = if c == 0 { 0xFFFF } else { c };
            uh[6..8].copy_from_slice(&c.to_be_bytes());
        }
        uh[p..p + 2].copy_from_slice(&port.to_be_bytes());
    }
    let csum = checksum::apply(u16::from_be_bytes([ip[10], ip[11]]), delta);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    ip[a..a + 4].copy_from_slice(&addr.octets());
    Some(true)
}

/// [`rewrite`] for any protocol and layout.
fn rewrite_any(
    frame: &mut [u8],
    l3: usize,
    l4: usize,
    proto: u8,
    which: Endpoint,
    addr: Ipv4Addr,
    port: u16,
) -> bool {
    if frame.len() < l3 + 20 {
        return false;
    }
    let addr_at = l3 + if which == Endpoint::Src { 12 } else { 16 };
    let old_addr = read_addr(frame, addr_at);
    if l4 != 0 && !rewrite_l4(frame, l4, proto, which, old_addr, addr, port) {
        return false;
    }
    let csum = checksum::update_addr_v4(read16(frame, l3 + 10), old_addr, addr);
    write16(frame, l3 + 10, csum);
    frame[addr_at..addr_at + 4].copy_from_slice(&addr.octets());
    true
}

/// The transport part of [`rewrite`]: the port (or echo identifier) and the checksum,
/// which for TCP and UDP also covers the address through the pseudo-header.
fn rewrite_l4(
    frame: &mut [u8],
    l4: usize,
    proto: u8,
    which: Endpoint,
    old_addr: Ipv4Addr,
    addr: Ipv4Addr,
    port: u16,
) -> bool {
    let port_at = l4 + if which == Endpoint::Src { 0 } else { 2 };
    match proto {
        TCP if frame.len() >= l4 + 18 => {
            let old_port = read16(frame, port_at);
            let mut csum = read16(frame, l4 + 16);
            csum = checksum::update_addr_v4(csum, old_addr, addr);
            csum = checksum::update16(csum, old_port, port);
            write16(frame, l4 + 16, csum);
            write16(frame, port_at, port);
            true
        }
        UDP if frame.len() >= l4 + 8 => {
            let old_port = read16(frame, port_at);
            let csum = read16(frame, l4 + 6);
            if csum != 0 {
                let mut c = checksum::update_addr_v4(csum, old_addr, addr);
                c = checksum::update16(c, old_port, port);
                // 0 means "no checksum" in UDP over IPv4: send its other form.
                write16(frame, l4 + 6, if c == 0 { 0xFFFF } else { c });
            }
            write16(frame, port_at, port);
            true
        }
        ICMP if frame.len() >= l4 + 8 => {
            if is_echo(frame[l4], false) {
                let old_id = read16(frame, l4 + 4);
                let csum = checksum::update16(read16(frame, l4 + 2), old_id, port);
                write16(frame, l4 + 2, csum);
                write16(frame, l4 + 4, port);
            }
            true
        }
        TCP | UDP | ICMP => false,
        _ => true,
    }
}

/// Translates an ICMPv4 error (IPv4 packet at `l3`, ICMP header at `l4`) whose quoted
/// packet belongs to a NATed connection: endpoint `outer` of the error itself gets
/// address `outer_addr`; endpoint `inner` of the quoted packet gets `inner_addr` and
/// `inner_port` (port or echo identifier, when the quote holds it), its IP header
/// checksum and — when quoted — its transport checksum updated; the ICMP checksum is
/// recomputed over the message. Returns false, changing nothing, when the quote is too
/// short to hold the quoted packet's IP header and first 8 transport bytes.
#[allow(clippy::too_many_arguments)]
pub fn rewrite_icmp_error(
    frame: &mut [u8],
    l3: usize,
    l4: usize,
    outer: Endpoint,
    outer_addr: Ipv4Addr,
    inner: Endpoint,
    inner_addr: Ipv4Addr,
    inner_port: u16,
) -> bool {
    let total = usize::from(read16(frame, l3 + 2));
    let end = (l3 + total).min(frame.len());
    let q3 = l4 + 8;
    if end < q3 + 20 || frame[q3] >> 4 != 4 {
        return false;
    }
    let q4 = q3 + usize::from(frame[q3] & 0x0F) * 4;
    if end < q4 + 8 {
        return false;
    }
    let proto = frame[q3 + 9];
    // The quoted packet: its address, its header checksum, and the transport header
    // as far as it is quoted (a checksum beyond the quote is left alone).
    let addr_at = q3 + if inner == Endpoint::Src { 12 } else { 16 };
    let old_addr = read_addr(frame, addr_at);
    let port_at = q4 + if inner == Endpoint::Src { 0 } else { 2 };
    match proto {
        TCP | UDP => {
            let csum_at = q4 + if proto == TCP { 16 } else { 6 };
            let old_port = read16(frame, port_at);
            if csum_at + 2 <= end {
                let csum = read16(frame, csum_at);
                if !(proto == UDP && csum == 0) {
                    let mut c = checksum::update_addr_v4(csum, old_addr, inner_addr);
                    c = checksum::update16(c, old_port, inner_port);
                    write16(
                        frame,
                        csum_at,
                        if proto == UDP && c == 0 { 0xFFFF } else { c },
                    );
                }
            }
            write16(frame, port_at, inner_port);
        }
        ICMP if is_echo(frame[q4], false) => {
            let old_id = read16(frame, q4 + 4);
            let c = checksum::update16(read16(frame, q4 + 2), old_id, inner_port);
            write16(frame, q4 + 2, c);
            write16(frame, q4 + 4, inner_port);
        }
        _ => {}
    }
    let qcsum = checksum::update_addr_v4(read16(frame, q3 + 10), old_addr, inner_addr);
    write16(frame, q3 + 10, qcsum);
    frame[addr_at..addr_at + 4].copy_from_slice(&inner_addr.octets());
    // The error's own address, then its ICMP checksum over the changed message.
    rewrite(frame, l3, 0, ICMP, outer, outer_addr, 0);
    write16(frame, l4 + 2, 0);
    let csum = !checksum::data(&frame[l4..end]);
    write16(frame, l4 + 2, csum);
    true
}

/// The flow key of the packet an ICMP (`icmpv6` false) or ICMPv6 error at `l4` quotes,
/// in the direction that packet travelled: addresses, protocol, and the ports (for an
/// echo, its identifier in both) when the quote holds them. `None` when the message is
/// not an error or the quote is too short.
pub fn quoted_key(frame: &[u8], l4: usize, icmpv6: bool, network: u16) -> Option<FlowKey> {
    if frame.len() < l4 + 8 || !is_icmp_error(frame[l4], icmpv6) {
        return None;
    }
    let q3 = l4 + 8;
    let (proto, q4, mut key) = if icmpv6 {
        if frame.len() < q3 + 40 || frame[q3] >> 4 != 6 {
            return None;
        }
        let addr = |at: usize| {
            let mut b = [0u8; 16];
            b.copy_from_slice(&frame[at..at + 16]);
            Ipv6Addr::from(b)
        };
        let proto = frame[q3 + 6];
        let key = FlowKey::v6(network, proto, addr(q3 + 8), addr(q3 + 24), 0, 0);
        (proto, q3 + 40, key)
    } else {
        if frame.len() < q3 + 20 || frame[q3] >> 4 != 4 {
            return None;
        }
        let proto = frame[q3 + 9];
        let key = FlowKey::v4(
            network,
            proto,
            read_addr(frame, q3 + 12),
            read_addr(frame, q3 + 16),
            0,
            0,
        );
        (proto, q3 + usize::from(frame[q3] & 0x0F) * 4, key)
    };
    if frame.len() >= q4 + 8 {
        match proto {
            TCP | UDP | 132 => {
                key.src_port = read16(frame, q4);
                key.dst_port = read16(frame, q4 + 2);
            }
            ICMP | ICMPV6 if is_echo(frame[q4], proto == ICMPV6) => {
                let id = read16(frame, q4 + 4);
                key.src_port = id;
                key.dst_port = id;
            }
            _ => {}
        }
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TCP/UDP fast path writes exactly what the general path writes, for every
    /// endpoint, header length and frame length (short frames included).
    #[test]
    fn fast_path_equals_general_path() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..20_000 {
            let l3 = 14;
            let ihl = if round % 3 == 0 { 24 } else { 20 };
            let l4 = l3 + ihl;
            let len = match round % 5 {
                0 => l4 + (rnd() % 24) as usize,
                _ => 64 + (rnd() % 64) as usize,
            };
            let mut frame: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            if round % 7 == 0 && len > l4 + 7 {
                frame[l4 + 6] = 0;
                frame[l4 + 7] = 0;
            }
            let proto = if round % 2 == 0 { TCP } else { UDP };
            let which = if round % 4 < 2 {
                Endpoint::Src
            } else {
                Endpoint::Dst
            };
            let addr = Ipv4Addr::from(rnd() as u32);
            let port = rnd() as u16;
            let mut a = frame.clone();
            let mut b = frame.clone();
            let ra = rewrite(&mut a, l3, l4, proto, which, addr, port);
            let rb = rewrite_any(&mut b, l3, l4, proto, which, addr, port);
            assert_eq!((ra, &a), (rb, &b), "round {round}");
        }
    }
}
