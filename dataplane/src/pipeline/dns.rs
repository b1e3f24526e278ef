//! The DNS stage, after the ingress ACL: DNS traffic from a port under DNS policy
//! (`acl.apply`'s `dns` section) to port 53 of one of the node's DNS service addresses
//! — UDP queries and every TCP segment — is handed to the control thread's DNS proxy
//! ([`Punt::Dns`]) instead of being routed, so that no name is looked up around it.

use super::burst::Burst;
use super::{trace, Action, Frames, Punt, Stage, Tracer};
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
        let dns_proto = key.proto == IpProtocol::UDP.0 || key.proto == IpProtocol::TCP.0;
        if dns_proto && key.dst_port == DNS_PORT && dns.servers.contains(&key.dst_ip()) {
            trace!(
                b.t,
                Stage::Dns,
                "DNS {} to {}: to the DNS proxy",
                if key.proto == IpProtocol::UDP.0 {
                    "query"
                } else {
                    "over TCP"
                },
                key.dst_ip()
            );
            b.actions[i] = Action::Punt(Punt::Dns);
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
        assert_eq!(actions[2], Action::Punt(Punt::Dns));
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
