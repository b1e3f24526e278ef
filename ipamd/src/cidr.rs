//! IPv4 CIDR text as EC2 gives it: parsing and the subnet's gateway (its first host
//! address, where EC2's VPC router answers).

use std::net::Ipv4Addr;

/// `a.b.c.d/len` → (network address, prefix length); `None` when malformed.
pub fn parse(cidr: &str) -> Option<(Ipv4Addr, u8)> {
    let (addr, len) = cidr.split_once('/')?;
    let addr: Ipv4Addr = addr.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    if len > 32 {
        return None;
    }
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some((Ipv4Addr::from(u32::from(addr) & mask), len))
}

/// The subnet's gateway: its network address + 1 ("" when `cidr` is malformed).
pub fn gateway(cidr: &str) -> String {
    parse(cidr)
        .map(|(net, _)| Ipv4Addr::from(u32::from(net).wrapping_add(1)).to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_is_the_first_host() {
        assert_eq!(gateway("10.0.16.0/20"), "10.0.16.1");
        assert_eq!(gateway("10.0.17.5/20"), "10.0.16.1");
        assert_eq!(gateway("nonsense"), "");
        assert_eq!(parse("10.0.0.0/33"), None);
    }
}
