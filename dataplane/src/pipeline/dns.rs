//! The DNS stage, after the ingress ACL: a DNS query from a port under DNS policy
//! (`acl.apply`'s `dns` section) to one of the node's DNS service addresses is handed
//! to the control thread's DNS proxy ([`Punt::Dns`]) instead of being routed. UDP only:
//! a TCP connection to port 53 of those addresses from such a port is dropped
//! (`dns-tcp`), so that a pod cannot look up a refused name over TCP; resolvers retry
//! over TCP only for answers too large for UDP.

use super::burst::Burst;
use super::{trace, Action, Frames, Punt, Stage, Tracer};
use crate::counters::DropReason;
use crate::wire::IpProtocol;

/// The DNS port.
pub const DNS_PORT: u16 = 53;

/// The stage, over the packets `s.ok` lists.
#[inline(always)]
pub fn stage<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    let Some(dns) = b.snap.dns.as_deref() else {
        return;
    };
    if !dns
        .ports
        .get(usize::from(b.in_port))
        .copied()
        .unwrap_or(false)
    {
        return;
    }
    let s = &mut *b.s;
    let mut kept = 0usize;
    for k in 0..b.n_ok {
        let i = usize::from(s.ok[k]);
        let key = &s.parsed[i].key;
        let to_server = key.dst_port == DNS_PORT && dns.servers.contains(&key.dst_ip());
        if to_server && key.proto == IpProtocol::UDP.0 {
            trace!(
                b.t,
                Stage::Dns,
                "DNS query to {}: to the DNS proxy",
                key.dst_ip()
            );
            b.actions[i] = Action::Punt(Punt::Dns);
        } else if to_server && key.proto == IpProtocol::TCP.0 {
            trace!(
                b.t,
                Stage::Dns,
                "DNS over TCP to {}: not proxied, dropped",
                key.dst_ip()
            );
            b.actions[i] = Action::Drop(DropReason::DnsTcp);
        } else {
            s.ok[kept] = i as u16;
            kept += 1;
        }
    }
    b.n_ok = kept;
}

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{self, GW_MAC, POD, POD_MAC};
    use super::*;
    use crate::snapshot::DnsIntercept;
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;

    const DNS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);

    fn snapshot(port_under_policy: bool) -> crate::snapshot::Snapshot {
        let mut snap = testing::snapshot();
        let mut ports = vec![false; snap.ports.len()];
        ports[usize::from(POD)] = port_under_policy;
        snap.dns = Some(Arc::new(DnsIntercept {
            ports,
            servers: vec![IpAddr::V4(DNS)],
        }));
        snap
    }

    fn frames() -> Vec<Vec<u8>> {
        vec![
            // UDP 53 to the DNS service, UDP 53 elsewhere, TCP 53 to the DNS service,
            // TCP 80 to the DNS service.
            testing::udp4(GW_MAC, DNS.octets(), 64, 30),
            testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 30),
            testing::tcp4(
                POD_MAC,
                GW_MAC,
                Ipv4Addr::new(10, 1, 0, 2),
                DNS,
                40000,
                53,
                0x02,
                1,
                0,
            ),
            testing::tcp4(
                POD_MAC,
                GW_MAC,
                Ipv4Addr::new(10, 1, 0, 2),
                DNS,
                40000,
                80,
                0x02,
                1,
                0,
            ),
        ]
    }

    #[test]
    fn queries_of_ports_under_dns_policy_go_to_the_proxy() {
        let snap = snapshot(true);
        let mut frames = frames();
        let (ok, actions) = testing::with_burst(&snap, &mut frames, |b| {
            testing::parse_all(b);
            stage(b);
            b.s.ok[..b.n_ok].to_vec()
        });
        assert_eq!(actions[0], Action::Punt(Punt::Dns));
        assert_eq!(actions[2], Action::Drop(DropReason::DnsTcp));
        assert_eq!(ok, [1, 3]);
    }

    #[test]
    fn other_ports_and_snapshots_without_dns_policy_are_untouched() {
        for snap in [snapshot(false), testing::snapshot()] {
            let mut frames = frames();
            let (ok, _) = testing::with_burst(&snap, &mut frames, |b| {
                testing::parse_all(b);
                stage(b);
                b.s.ok[..b.n_ok].to_vec()
            });
            assert_eq!(ok, [0, 1, 2, 3]);
        }
    }
}
