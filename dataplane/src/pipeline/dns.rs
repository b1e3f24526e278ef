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
    if !dns.ports.get(usize::from(b.in_port)).copied().unwrap_or(false) {
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
