//! The flow key: a fixed-size, hashable summary of a packet's connection identity
//! (network, protocol, addresses, ports or ICMP id), extracted once per packet by the
//! parse stage and used by every later stage (ACL, conntrack, NAT).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Address family of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Family {
    #[default]
    V4 = 4,
    V6 = 6,
}

/// The identity of a packet's flow. IPv4 addresses are stored as IPv4-mapped IPv6
/// (`::ffff:a.b.c.d`) so one key type serves both families. For ICMP echo the
/// identifier is both `src_port` and `dst_port`; for other portless protocols both
/// are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct FlowKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub src_port: u16,
    pub dst_port: u16,
    /// The network (VRF / conntrack zone).
    pub network: u16,
    /// IP protocol number of the transport header.
    pub proto: u8,
    pub family: Family,
}

fn mapped(a: Ipv4Addr) -> [u8; 16] {
    a.to_ipv6_mapped().octets()
}

impl FlowKey {
    /// An IPv4 flow key.
    pub fn v4(
        network: u16,
        proto: u8,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        sport: u16,
        dport: u16,
    ) -> Self {
        FlowKey {
            src: mapped(src),
            dst: mapped(dst),
            src_port: sport,
            dst_port: dport,
            network,
            proto,
            family: Family::V4,
        }
    }

    /// An IPv6 flow key.
    pub fn v6(
        network: u16,
        proto: u8,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        sport: u16,
        dport: u16,
    ) -> Self {
        FlowKey {
            src: src.octets(),
            dst: dst.octets(),
            src_port: sport,
            dst_port: dport,
            network,
            proto,
            family: Family::V6,
        }
    }

    /// A key from two addresses of one family; `None` when the families differ.
    pub fn from_ips(
        network: u16,
        proto: u8,
        src: IpAddr,
        dst: IpAddr,
        sport: u16,
        dport: u16,
    ) -> Option<Self> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Some(Self::v4(network, proto, s, d, sport, dport)),
            (IpAddr::V6(s), IpAddr::V6(d)) => Some(Self::v6(network, proto, s, d, sport, dport)),
            _ => None,
        }
    }

    /// The IPv4 source address as a host-order number (meaningful for IPv4 keys).
    #[inline]
    pub fn src_v4(&self) -> u32 {
        u32::from_be_bytes([self.src[12], self.src[13], self.src[14], self.src[15]])
    }

    /// The IPv4 destination address as a host-order number (meaningful for IPv4 keys).
    #[inline]
    pub fn dst_v4(&self) -> u32 {
        u32::from_be_bytes([self.dst[12], self.dst[13], self.dst[14], self.dst[15]])
    }

    /// Source address.
    pub fn src_ip(&self) -> IpAddr {
        to_ip(self.family, self.src)
    }

    /// Destination address.
    pub fn dst_ip(&self) -> IpAddr {
        to_ip(self.family, self.dst)
    }

    /// A hash of the flow that is the same for both directions (the endpoints are
    /// ordered before hashing): which worker owns a connection.
    pub fn symmetric_hash(&self) -> u64 {
        let a = (self.src, self.src_port);
        let b = (self.dst, self.dst_port);
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let mut h: u64 =
            0xcbf2_9ce4_8422_2325 ^ u64::from(self.network) ^ (u64::from(self.proto) << 16);
        let mut mix = |bytes: &[u8]| {
            for chunk in bytes.chunks(8) {
                let mut w = [0u8; 8];
                w[..chunk.len()].copy_from_slice(chunk);
                h = (h ^ u64::from_le_bytes(w))
                    .wrapping_mul(0x0100_0000_01b3_u64 | 0x9E37_79B9_0000_0000);
                h ^= h >> 29;
            }
        };
        mix(&lo.0);
        mix(&lo.1.to_le_bytes());
        mix(&hi.0);
        mix(&hi.1.to_le_bytes());
        h ^ (h >> 32)
    }

    /// The key of the reply direction.
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            ..*self
        }
    }
}

fn to_ip(family: Family, b: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(b);
    match family {
        Family::V4 => IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED)),
        Family::V6 => IpAddr::V6(v6),
    }
}

impl std::fmt::Display for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (s, d) = (self.src_ip(), self.dst_ip());
        let fmt_ep = |ip: IpAddr, port: u16| match ip {
            IpAddr::V4(a) => format!("{a}:{port}"),
            IpAddr::V6(a) => format!("[{a}]:{port}"),
        };
        write!(
            f,
            "net {} proto {} {} -> {}",
            self.network,
            self.proto,
            fmt_ep(s, self.src_port),
            fmt_ep(d, self.dst_port)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_hash_is_the_same_both_ways_and_spreads() {
        let k = FlowKey::v4(
            0,
            6,
            Ipv4Addr::new(10, 1, 0, 2),
            Ipv4Addr::new(8, 8, 8, 8),
            40000,
            443,
        );
        assert_eq!(k.symmetric_hash(), k.reversed().symmetric_hash());
        let mut other = k;
        other.network = 1;
        assert_ne!(k.symmetric_hash(), other.symmetric_hash());
        let odd = (0..1000u16)
            .filter(|p| {
                let mut f = k;
                f.src_port = 10000 + p;
                f.symmetric_hash() % 2 == 1
            })
            .count();
        assert!((400..600).contains(&odd), "{odd} of 1000 on worker 1");
    }

    #[test]
    fn key_is_fixed_size_and_round_trips_addresses() {
        assert_eq!(std::mem::size_of::<FlowKey>(), 40);
        let k = FlowKey::v4(
            3,
            6,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            1234,
            80,
        );
        assert_eq!(k.src_ip(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(k.reversed().dst_port, 1234);
        assert_eq!(k.reversed().reversed(), k);
        let a: Ipv6Addr = "fd00::1".parse().expect("addr");
        let k6 = FlowKey::v6(0, 17, a, Ipv6Addr::LOCALHOST, 1, 2);
        assert_eq!(k6.src_ip(), IpAddr::V6(a));
        assert_ne!(k6, k6.reversed());
        assert_eq!(k.to_string(), "net 3 proto 6 10.0.0.1:1234 -> 10.0.0.2:80");
    }
}
