//! The route stage: one batched lookup in the input network's IPv4 table for every IPv4
//! packet of that network left (prefetching the table); IPv6 packets, and packets of
//! another network (replies translated back into a user-defined network), one by one in
//! their own network; then each packet's next hop — a port (listed in `s.routed` with
//! its output port in `s.out` and the next hop in `s.nh`), a blackhole, an
//! isolated destination, one of Ferrule's addresses (answered here), or no route (an
//! ICMP error). A route to a port of another network than the packet's is a crossing,
//! allowed only for a user-defined network's masqueraded egress through an uplink of
//! the default network ([`crossing`]); packets from or to a locked port pass only as
//! [`locked`] says. With source route tables (ENIs, [`Snapshot::source_routes`]) a
//! pod's packet from a source that selects one leaves by that table instead when the
//! main table would send it out of an uplink and it does not leave masqueraded
//! ([`by_source`]).

use super::burst::{Burst, Scratch};
use super::ct::{self, CtMark};
use super::{
    local, net_name, trace, Action, Frames, IcmpErrorKind, Parsed, Stage, Tracer, MAX_BURST,
};
use crate::conntrack::Conntrack;
use crate::counters::DropReason;
use crate::lpm;
use crate::snapshot::{NextHopEntry, PortRole, PortState, Snapshot, SourceRoutes};
use std::net::IpAddr;

/// The stage, over the packets `s.ok` lists. With one network and no locked port (the
/// common case) the packets are routed exactly as without networks; otherwise by
/// [`route_networks`].
#[inline(always)]
pub fn stage<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    // (The burst's parts are passed one by one: the context itself, passed to a function
    // that is not inlined, would have to live in memory for the whole burst.)
    b.n_routed = if b.snap.networks.len() > 1 || b.snap.any_locked || b.snap.source_routes.is_some()
    {
        route_networks(
            b.snap,
            b.port,
            &mut *b.s,
            &mut *b.frames,
            &mut *b.actions,
            b.ct.as_deref(),
            &mut *b.t,
            b.n_ok,
        )
    } else {
        route_all::<F, T, false>(
            b.snap,
            b.port,
            &mut *b.s,
            &mut *b.frames,
            &mut *b.actions,
            None,
            &mut *b.t,
            b.n_ok,
        )
    };
}

/// The stage when the snapshot has more than one network, a locked port or source
/// route tables: each packet looked up in its own network (a reply translated back
/// into a user-defined network is not in the input port's), then [`network_checks`]
/// and [`by_source`]. Out of line, so that the common case keeps its registers.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn route_networks<F: Frames + ?Sized, T: Tracer>(
    snap: &Snapshot,
    port: &PortState,
    s: &mut Scratch,
    frames: &mut F,
    actions: &mut [Action],
    ct: Option<&Conntrack>,
    t: &mut T,
    n_ok: usize,
) -> usize {
    route_all::<F, T, true>(snap, port, s, frames, actions, ct, t, n_ok)
}

/// Routes the `n_ok` packets `s.ok` lists: one batched IPv4 lookup in the input port's
/// network, the rest (IPv6, and with `NETWORKS` the packets of another network) one by
/// one; with `NETWORKS`, the network checks and the source route tables after each
/// lookup (`ct`: the worker's conntrack when it is active this burst). Returns how many
/// were routed to a port (listed in `s.routed`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn route_all<F: Frames + ?Sized, T: Tracer, const NETWORKS: bool>(
    snap: &Snapshot,
    port: &PortState,
    s: &mut Scratch,
    frames: &mut F,
    actions: &mut [Action],
    ct: Option<&Conntrack>,
    t: &mut T,
    n_ok: usize,
) -> usize {
    let (mut n4, mut n1) = (0usize, 0usize);
    for &i in &s.ok[..n_ok] {
        let parsed = &s.parsed[usize::from(i)];
        if parsed.is_ipv6() || (NETWORKS && parsed.key.network != port.network) {
            s.pending6[n1] = i;
            n1 += 1;
        } else {
            s.pending4[n4] = i;
            s.dst4[n4] = u32::from_be_bytes(v4_octets(&parsed.key.dst));
            n4 += 1;
        }
    }
    let net = snap.networks.get(usize::from(port.network));
    if let Some(net) = net {
        net.lpm4.lookup_batch(&s.dst4[..n4], &mut s.nh4[..n4]);
    }
    let mut n_routed = 0usize;
    for k in 0..n4 + n1 {
        let (i, nh) = if k < n4 {
            let nh = if net.is_some() {
                s.nh4[k]
            } else {
                lpm::NO_ROUTE
            };
            (usize::from(s.pending4[k]), nh)
        } else {
            let i = usize::from(s.pending6[k - n4]);
            let nh = if NETWORKS {
                lookup_one(snap, &s.parsed[i])
            } else {
                match (net, s.parsed[i].key.dst_ip()) {
                    (Some(net), IpAddr::V6(a)) => net.lpm6.lookup(a).unwrap_or(lpm::NO_ROUTE),
                    _ => lpm::NO_ROUTE,
                }
            };
            (i, nh)
        };
        match route::<T, NETWORKS>(
            snap,
            port,
            &s.parsed[i],
            (&s.ct, i),
            ct,
            nh,
            frames.frame_mut(i),
            t,
        ) {
            Ok((out, nh)) => {
                s.out[i] = out;
                s.nh[i] = nh;
                s.routed[n_routed] = i as u16;
                n_routed += 1;
            }
            Err(action) => actions[i] = action,
        }
    }
    n_routed
}

/// The route lookup of one packet in its own network.
#[inline(never)]
fn lookup_one(snap: &Snapshot, parsed: &Parsed) -> u32 {
    let key = &parsed.key;
    let Some(net) = snap.networks.get(usize::from(key.network)) else {
        return lpm::NO_ROUTE;
    };
    match key.dst_ip() {
        IpAddr::V4(a) => net.lpm4.lookup(a),
        IpAddr::V6(a) => net.lpm6.lookup(a),
    }
    .unwrap_or(lpm::NO_ROUTE)
}

/// The burst's conntrack marks and a packet's index in them.
type Marks<'a> = (&'a [CtMark; MAX_BURST], usize);

/// The IPv4 address inside an IPv4-mapped key address.
#[inline(always)]
fn v4_octets(mapped: &[u8; 16]) -> [u8; 4] {
    [mapped[12], mapped[13], mapped[14], mapped[15]]
}

/// Route, given the looked-up next hop (in the packet's network,
/// `parsed.key.network`): `Ok((output port, next hop))` for a packet to send on (the
/// next hop `nh`, or a source route table's), else the action that ends its path here.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn route<T: Tracer, const NETWORKS: bool>(
    snap: &Snapshot,
    port: &PortState,
    parsed: &Parsed,
    marks: Marks<'_>,
    ct: Option<&Conntrack>,
    nh: u32,
    frame: &mut [u8],
    t: &mut T,
) -> Result<(u16, u32), Action> {
    let dst = parsed.key.dst_ip();
    let network = parsed.key.network;
    let Some(entry) = (nh != lpm::NO_ROUTE).then(|| snap.next_hop(nh)).flatten() else {
        trace!(
            t,
            Stage::Route,
            "no route to {} in network {}",
            dst,
            net_name(snap, network)
        );
        return Err(Action::IcmpError {
            kind: IcmpErrorKind::NoRoute,
            reason: DropReason::NoRoute,
        });
    };
    let (out, via) = match *entry {
        NextHopEntry::Port { port, via } => (port, via),
        NextHopEntry::Blackhole => {
            trace!(
                t,
                Stage::Route,
                "{} matches a blackhole route (next hop {})",
                dst,
                nh
            );
            return Err(Action::Drop(DropReason::Blackhole));
        }
        NextHopEntry::Local => {
            // An address Ferrule owns on another port (a node IP seen from a pod).
            trace!(t, Stage::Route, "{} is one of Ferrule's addresses", dst);
            return Err(local::answer(port, parsed, frame, t));
        }
        NextHopEntry::Isolated => {
            trace!(
                t,
                Stage::Route,
                "{} in network {}: destination is in another network (isolated): drop",
                dst,
                net_name(snap, network)
            );
            return Err(Action::Drop(DropReason::NetworkIsolation));
        }
    };
    let Some(out_port) = snap.ports.get(usize::from(out)) else {
        return Err(Action::Drop(DropReason::NoRoute));
    };
    if NETWORKS {
        if out_port.network != network || port.locked || out_port.locked {
            network_checks(snap, port, out_port, parsed, marks, ct, frame, t)?;
        }
        if let Some(routes) = snap.source_routes.as_deref() {
            if let Some(hop) = by_source(snap, routes, port, out_port, parsed, marks, ct, frame, t)
            {
                return Ok(hop);
            }
        }
    }
    trace!(
        t,
        Stage::Route,
        "{} in network {} -> port {}{}",
        dst,
        net_name(snap, network),
        out_port.name,
        via.map(|v| format!(" via {v}"))
            .unwrap_or_else(|| " (on-link)".into())
    );
    Ok((out, nh))
}

/// The source route table (an ENI's, `eni-<k>`) a packet routed by the main table to
/// `output` leaves by, if any: only a pod's IPv4 packet from a source that selects one
/// ([`SourceRoutes::table_v4`]), which the main table sends out of an uplink, and which
/// does not leave masqueraded. Traffic to pods, the host or Ferrule's addresses stays
/// on the main table, and so does masqueraded traffic: it leaves by the main table
/// (the primary ENI) with the node IP as its source, as the AWS VPC CNI does, because
/// EC2 drops a packet whose source is not an address of the ENI it leaves by. Returns
/// the table's default route: `(its port, its next hop)`.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn by_source<T: Tracer>(
    snap: &Snapshot,
    routes: &SourceRoutes,
    input: &PortState,
    output: &PortState,
    parsed: &Parsed,
    (marks, i): Marks<'_>,
    ct: Option<&Conntrack>,
    frame: &[u8],
    t: &mut T,
) -> Option<(u16, u32)> {
    if parsed.is_ipv6() || input.role != PortRole::Pod {
        return None;
    }
    let table = routes.table_v4(parsed.key.network, parsed.key.src_v4())?;
    if output.role != PortRole::Uplink {
        trace!(
            t,
            Stage::Route,
            "source {} selects table {} of {}, but {} goes to {} port {}: table main",
            parsed.key.src_ip(),
            table.name,
            table.owner,
            parsed.key.dst_ip(),
            output.role,
            output.name
        );
        return None;
    }
    if ct.is_some_and(|ct| ct::masqueraded_egress(snap, ct, input, output, parsed, marks[i], frame))
    {
        trace!(
            t,
            Stage::Route,
            "source {} selects table {} of {}, but {} is outside the VPC and masqueraded to the node IP: table main",
            parsed.key.src_ip(),
            table.name,
            table.owner,
            parsed.key.dst_ip()
        );
        return None;
    }
    let Some(&NextHopEntry::Port { port, via }) = snap.next_hop(table.nh) else {
        return None;
    };
    trace!(
        t,
        Stage::Route,
        "source {} is a secondary IP of {}: table {} -> port {}{}",
        parsed.key.src_ip(),
        table.owner,
        table.name,
        snap.ports
            .get(usize::from(port))
            .map_or("?", |p| p.name.as_str()),
        via.map(|v| format!(" via {v}")).unwrap_or_default()
    );
    Some((port, table.nh))
}

/// The checks of a packet routed to `output` when the snapshot has more than one
/// network or a locked port: [`crossing`] when `output` is in another network than the
/// packet, [`locked`] when either port is locked. `ct` is the worker's conntrack when
/// it is active this burst (the marks are only meaningful then).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn network_checks<T: Tracer>(
    snap: &Snapshot,
    input: &PortState,
    output: &PortState,
    parsed: &Parsed,
    (marks, i): Marks<'_>,
    ct: Option<&Conntrack>,
    frame: &[u8],
    t: &mut T,
) -> Result<(), Action> {
    if output.network != parsed.key.network {
        crossing(snap, input, output, parsed, &marks[i], ct, frame, t)?;
    }
    if input.locked || output.locked {
        locked(snap, input, output, parsed, t)?;
    }
    Ok(())
}

/// A packet routed to `output`, a port of another network than the packet's: allowed
/// only when the packet's network is user-defined, `output` is an uplink of the
/// default network and the packet leaves masqueraded
/// ([`ct::masqueraded_egress`]); anything else is dropped as `network-crossing`.
#[allow(clippy::too_many_arguments)]
#[inline]
fn crossing<T: Tracer>(
    snap: &Snapshot,
    input: &PortState,
    output: &PortState,
    parsed: &Parsed,
    mark: &CtMark,
    ct: Option<&Conntrack>,
    frame: &[u8],
    t: &mut T,
) -> Result<(), Action> {
    let network = parsed.key.network;
    let egress = snap.user_defined(network)
        && output.role == PortRole::Uplink
        && output.network == 0
        && ct.is_some_and(|ct| {
            ct::masqueraded_egress(snap, ct, input, output, parsed, *mark, frame)
        });
    if egress {
        trace!(
            t,
            Stage::Route,
            "{} in network {} leaves through uplink {} of network {}, masqueraded",
            parsed.key.dst_ip(),
            net_name(snap, network),
            output.name,
            net_name(snap, output.network)
        );
        return Ok(());
    }
    trace!(
        t,
        Stage::Route,
        "{} in network {} -> port {} of network {}: would cross into another network: drop",
        parsed.key.dst_ip(),
        net_name(snap, network),
        output.name,
        net_name(snap, output.network)
    );
    Err(Action::Drop(DropReason::NetworkCrossing))
}

/// A packet from or to a locked port (the default-network interface of a pod whose
/// primary network is user-defined): from it, only to a `Host` port or to a
/// `locked_allow` address; to it, only from a `Host` port or from a `locked_allow`
/// address. Anything else is dropped as `default-network-locked`.
#[inline(never)]
fn locked<T: Tracer>(
    snap: &Snapshot,
    input: &PortState,
    output: &PortState,
    parsed: &Parsed,
    t: &mut T,
) -> Result<(), Action> {
    let (src, dst) = (parsed.key.src_ip(), parsed.key.dst_ip());
    let (port, why) = if input.locked && output.role != PortRole::Host && !snap.locked_allows(dst) {
        (input, "from")
    } else if output.locked && input.role != PortRole::Host && !snap.locked_allows(src) {
        (output, "to")
    } else {
        return Ok(());
    };
    trace!(
        t,
        Stage::Route,
        "{} -> {} in network {}: {} locked port {} (only probes from the host and the Kubernetes API/DNS): drop",
        src,
        dst,
        net_name(snap, parsed.key.network),
        why,
        port.name
    );
    Err(Action::Drop(DropReason::DefaultNetworkLocked))
}

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{self, GW_MAC, POD, UPLINK};
    use super::*;

    #[test]
    fn routes_a_batch_to_ports_and_ends_the_rest() {
        let mut snap = testing::snapshot();
        let mut frames = vec![
            testing::udp4(GW_MAC, [8, 8, 8, 8], 64, 10),
            testing::udp4(GW_MAC, [203, 0, 113, 5], 64, 10),
            testing::udp4(GW_MAC, [10, 1, 0, 2], 64, 10),
        ];
        let run = |snap: &Snapshot, frames: &mut [Vec<u8>]| {
            testing::with_burst(snap, frames, |b| {
                testing::parse_all(b);
                stage(b);
                let routed = b.s.routed[..b.n_routed].to_vec();
                let hops: Vec<_> = routed
                    .iter()
                    .map(|&i| (b.s.out[usize::from(i)], b.s.nh[usize::from(i)]))
                    .collect();
                (routed, hops)
            })
        };
        let ((routed, hops), actions) = run(&snap, &mut frames);
        assert_eq!(routed, [0, 2]);
        // Next hop 1 is the default route via the router, 0 the pod's.
        assert_eq!(hops, [(UPLINK, 1), (POD, 0)]);
        assert_eq!(actions[1], Action::Drop(DropReason::Blackhole));

        // Without a route: an ICMP error to the sender.
        let mut lpm = crate::lpm::Lpm4::new();
        lpm.insert(std::net::Ipv4Addr::new(10, 1, 0, 2), 32, 0)
            .expect("route");
        snap.networks[0].lpm4 = std::sync::Arc::new(lpm);
        let ((routed, _), actions) = run(&snap, &mut frames);
        assert_eq!(routed, [2]);
        assert_eq!(
            actions[0],
            Action::IcmpError {
                kind: IcmpErrorKind::NoRoute,
                reason: DropReason::NoRoute
            }
        );
    }

    // Networks: isolation, crossing, locked ports.

    use super::super::burst::testing::{
        udn_snapshot, GW_MAC_A, HOST, HOST_MAC, HOST_PEER, HOST_PEER_MAC, POD_A, POD_MAC,
        POD_MAC_A, ROUTER_MAC, UDN_POD, UPLINK_MAC,
    };
    use super::super::{process, process_ct, NoTrace, Recorder};
    use crate::conntrack::tcp_flags::{ACK, SYN};
    use crate::conntrack::{Conntrack, CtConfig, NoAdvice};
    use crate::wire::IpCidr;
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    fn conntrack() -> Conntrack {
        let cfg = CtConfig {
            max_entries: 64,
            ..CtConfig::default()
        };
        Conntrack::new_in(&cfg, 0, 1, true, &NoAdvice)
    }

    /// A TCP SYN from pod-a (udn-a) to `dst`.
    fn from_pod_a(dst: [u8; 4], proto: u8) -> Vec<u8> {
        let dst = Ipv4Addr::from(dst);
        match proto {
            6 => testing::tcp4(POD_MAC_A, GW_MAC_A, UDN_POD, dst, 40000, 80, SYN, 1, 0),
            p => testing::ipv4(POD_MAC_A, GW_MAC_A, UDN_POD, dst, p, &[0; 8]),
        }
    }

    /// The route-stage drop reason and trace of one packet, run with conntrack.
    fn verdict(snap: &Snapshot, port: u16, mut frame: Vec<u8>) -> (Action, Vec<String>) {
        let mut ct = conntrack();
        let mut rec = Recorder::default();
        let action = process_ct(snap, port, &mut frame, Some(&mut ct), &mut rec);
        let lines = rec
            .stages
            .iter()
            .map(|(s, d)| format!("{} {}", s.name(), d))
            .collect();
        (action, lines)
    }

    #[test]
    fn an_isolated_destination_is_dropped() {
        let snap = udn_snapshot();
        let (action, lines) = verdict(&snap, POD_A, from_pod_a([10, 1, 0, 2], 6));
        assert_eq!(action, Action::Drop(DropReason::NetworkIsolation));
        assert!(
            lines.iter().any(|l| l
                == "route 10.1.0.2 in network udn-a: destination is in another network (isolated): drop"),
            "{lines:#?}"
        );
    }

    #[test]
    fn routes_into_another_network_are_dropped_unless_masqueraded_egress() {
        let snap = udn_snapshot();
        // udn-a to a pod port of udn-b.
        let (action, lines) = verdict(&snap, POD_A, from_pod_a([10, 128, 1, 7], 6));
        assert_eq!(action, Action::Drop(DropReason::NetworkCrossing));
        assert!(
            lines.iter().any(|l| l
                == "route 10.128.1.7 in network udn-a -> port pod-b of network udn-b: would cross into another network: drop"),
            "{lines:#?}"
        );
        // The default network to a pod port of udn-a (a route of the default network).
        let f = testing::tcp4(
            POD_MAC,
            testing::GW_MAC,
            Ipv4Addr::new(10, 1, 0, 2),
            UDN_POD,
            40000,
            80,
            SYN,
            1,
            0,
        );
        assert_eq!(
            verdict(&snap, POD, f).0,
            Action::Drop(DropReason::NetworkCrossing)
        );
        // udn-a to the uplink of the default network: TCP is masqueraded and leaves;
        // a protocol SNAT does not masquerade (GRE) does not.
        assert_eq!(
            verdict(&snap, POD_A, from_pod_a([8, 8, 8, 8], 6)).0,
            Action::Forward { port: UPLINK }
        );
        assert_eq!(
            verdict(&snap, POD_A, from_pod_a([8, 8, 8, 8], 47)).0,
            Action::Drop(DropReason::NetworkCrossing)
        );
        // Without conntrack nothing is masqueraded: the crossing is dropped.
        let mut f = from_pod_a([8, 8, 8, 8], 6);
        assert_eq!(
            process(&snap, POD_A, &mut f, &mut NoTrace),
            Action::Drop(DropReason::NetworkCrossing)
        );
        // Without a node IP neither.
        let mut off = snap.clone();
        Arc::make_mut(&mut off.snat).node_ips.clear();
        assert_eq!(
            verdict(&off, POD_A, from_pod_a([8, 8, 8, 8], 6)).0,
            Action::Drop(DropReason::NetworkCrossing)
        );
        // Nor from a network that is not user-defined.
        let mut plain = snap.clone();
        plain.networks[1].user_defined = false;
        assert_eq!(
            verdict(&plain, POD_A, from_pod_a([8, 8, 8, 8], 6)).0,
            Action::Drop(DropReason::NetworkCrossing)
        );
    }

    /// The default network's pod port 0 locked, the Kubernetes API at 10.96.0.1 and
    /// another default-network pod at 10.1.0.3 on port 5.
    fn locked_snapshot() -> Snapshot {
        let mut snap = udn_snapshot();
        snap.ports[usize::from(POD)].locked = true;
        let mut other = snap.ports[usize::from(POD)].clone();
        other.name = "pod-c".into();
        other.locked = false;
        other.mac = crate::wire::EthernetAddress([2, 0xfe, 0, 0, 0, 0x0c]);
        other.pod_mac = Some(crate::wire::EthernetAddress([2, 0, 0, 0, 1, 3]));
        other.pod_sources =
            super::super::port_security::sources(Some([2, 0, 0, 0, 1, 3]), &["10.1.0.3"], &[]);
        snap.ports.push(other);
        let mut hops = (*snap.next_hops).clone();
        hops.push(NextHopEntry::Port { port: 5, via: None });
        snap.next_hops = Arc::new(hops);
        let mut lpm = (*snap.networks[0].lpm4).clone();
        lpm.insert(Ipv4Addr::new(10, 1, 0, 3), 32, 7)
            .expect("route");
        snap.networks[0].lpm4 = Arc::new(lpm);
        snap.locked_allow = Arc::new(vec![IpCidr::new(
            std::net::IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1)),
            32,
        )
        .expect("cidr")]);
        snap.update_locked();
        assert!(snap.any_locked);
        snap
    }

    #[test]
    fn a_locked_port_talks_only_to_the_host_and_the_allowed_addresses() {
        let snap = locked_snapshot();
        let from_locked = |dst: [u8; 4]| {
            testing::tcp4(
                POD_MAC,
                testing::GW_MAC,
                Ipv4Addr::new(10, 1, 0, 2),
                Ipv4Addr::from(dst),
                40000,
                443,
                SYN,
                1,
                0,
            )
        };
        // To the Kubernetes API: passes; to anything else: dropped.
        assert_eq!(
            verdict(&snap, POD, from_locked([10, 96, 0, 1])).0,
            Action::Forward { port: UPLINK }
        );
        let (action, lines) = verdict(&snap, POD, from_locked([8, 8, 8, 8]));
        assert_eq!(action, Action::Drop(DropReason::DefaultNetworkLocked));
        assert!(
            lines.iter().any(|l| l
                .starts_with("route 10.1.0.2 -> 8.8.8.8 in network default: from locked port pod")),
            "{lines:#?}"
        );
        assert_eq!(
            verdict(&snap, POD, from_locked([10, 1, 0, 3])).0,
            Action::Drop(DropReason::DefaultNetworkLocked)
        );
        // To the host (a probe's answer): passes.
        assert_eq!(
            verdict(&snap, POD, from_locked([172, 16, 0, 2])).0,
            Action::Forward { port: HOST }
        );
        // From the host (a kubelet probe): passes.
        let probe = testing::tcp4(
            HOST_PEER_MAC,
            HOST_MAC,
            HOST_PEER,
            Ipv4Addr::new(10, 1, 0, 2),
            50000,
            8080,
            SYN,
            1,
            0,
        );
        assert_eq!(verdict(&snap, HOST, probe).0, Action::Forward { port: POD });
        // From another pod, or from beyond the uplink: dropped.
        let from_c = testing::tcp4(
            [2, 0, 0, 0, 1, 3],
            [2, 0xfe, 0, 0, 0, 0x0c],
            Ipv4Addr::new(10, 1, 0, 3),
            Ipv4Addr::new(10, 1, 0, 2),
            50000,
            8080,
            SYN,
            1,
            0,
        );
        let (action, lines) = verdict(&snap, 5, from_c);
        assert_eq!(action, Action::Drop(DropReason::DefaultNetworkLocked));
        assert!(
            lines.iter().any(|l| l.contains("to locked port pod")),
            "{lines:#?}"
        );
        let from_outside = testing::tcp4(
            ROUTER_MAC,
            UPLINK_MAC,
            Ipv4Addr::new(8, 8, 8, 8),
            Ipv4Addr::new(10, 1, 0, 2),
            80,
            40000,
            ACK,
            1,
            1,
        );
        assert_eq!(
            verdict(&snap, UPLINK, from_outside).0,
            Action::Drop(DropReason::DefaultNetworkLocked)
        );
        // From the Kubernetes API (its answer): passes.
        let from_kapi = testing::tcp4(
            ROUTER_MAC,
            UPLINK_MAC,
            Ipv4Addr::new(10, 96, 0, 1),
            Ipv4Addr::new(10, 1, 0, 2),
            443,
            40000,
            ACK,
            1,
            1,
        );
        assert_eq!(
            verdict(&snap, UPLINK, from_kapi).0,
            Action::Forward { port: POD }
        );
        // Unlocked, the same packets pass.
        let mut open = snap.clone();
        open.ports[usize::from(POD)].locked = false;
        open.update_locked();
        assert!(!open.any_locked);
        assert_eq!(
            verdict(&open, POD, from_locked([8, 8, 8, 8])).0,
            Action::Forward { port: UPLINK }
        );
    }

    // Source route tables (ENIs).

    use crate::snapshot::{Neighbor, SourceRoutes, SourceTable};
    use crate::wire::Ipv4Cidr;

    const ENI1: u16 = 2;
    const POD_C: u16 = 3;
    const ENI1_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xe1];
    const ENI1_GW: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
    const ENI1_GW_MAC: [u8; 6] = [2, 0, 0, 0, 0xe1, 1];
    const POD_C_MAC: [u8; 6] = [2, 0, 0, 0, 1, 3];

    /// [`testing::snapshot`] (pod 10.1.0.2 on port 0, uplink 1 with node IP 192.0.2.10
    /// and the default route via 192.0.2.1) plus uplink 2 `eni1` (ENI 1's port, its
    /// primary 10.0.1.10, its gateway 10.0.1.1 resolved) and pod port 3 (10.1.0.3);
    /// SNAT on with the VPC 10.0.0.0/8; with `eni`, the pod's source 10.1.0.2 selects
    /// table eni-1 (the default via 10.0.1.1 out of `eni1`).
    fn eni_snapshot(eni: bool) -> Snapshot {
        let mut snap = testing::snapshot();
        let mut eni1 = snap.ports[usize::from(UPLINK)].clone();
        eni1.name = "eni1".into();
        eni1.mac = crate::wire::EthernetAddress(ENI1_MAC);
        eni1.local_v4 = vec![Ipv4Addr::new(10, 0, 1, 10)];
        eni1.proxy_arp_v4 = vec![Ipv4Addr::new(10, 1, 0, 2)];
        snap.ports.push(eni1);
        let mut pod_c = snap.ports[usize::from(POD)].clone();
        pod_c.name = "pod-c".into();
        pod_c.pod_mac = Some(crate::wire::EthernetAddress(POD_C_MAC));
        pod_c.pod_sources =
            super::super::port_security::sources(Some(POD_C_MAC), &["10.1.0.3"], &[]);
        snap.ports.push(pod_c);
        let mut hops = (*snap.next_hops).clone();
        hops.push(NextHopEntry::Port {
            port: ENI1,
            via: Some(IpAddr::V4(ENI1_GW)),
        });
        hops.push(NextHopEntry::Port {
            port: POD_C,
            via: None,
        });
        snap.next_hops = Arc::new(hops);
        let mut lpm = (*snap.networks[0].lpm4).clone();
        lpm.insert(Ipv4Addr::new(10, 1, 0, 3), 32, 4)
            .expect("route");
        snap.networks[0].lpm4 = Arc::new(lpm);
        let mut neighbors = (*snap.neighbors).clone();
        neighbors.insert(
            (0, IpAddr::V4(ENI1_GW)),
            Neighbor {
                mac: crate::wire::EthernetAddress(ENI1_GW_MAC),
                port: ENI1,
            },
        );
        snap.neighbors = Arc::new(neighbors);
        snap.resolve_gateways();
        snap.snat = Arc::new(crate::nat::SnatPolicy {
            node_ips: vec![testing::NODE],
            vpc_cidrs: vec![Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 0), 8).expect("cidr")],
            ..Default::default()
        });
        if eni {
            let mut routes = SourceRoutes::default();
            routes.tables.push(SourceTable {
                name: "eni-1".into(),
                owner: "eni-0abc (device 1)".into(),
                nh: 3,
            });
            routes
                .v4
                .insert((0, u32::from(Ipv4Addr::new(10, 1, 0, 2))), 0);
            snap.source_routes = Some(Arc::new(routes));
        }
        snap
    }

    /// A TCP SYN from the pod (10.1.0.2) to `dst`.
    fn from_pod(dst: [u8; 4]) -> Vec<u8> {
        testing::tcp4(
            POD_MAC,
            testing::GW_MAC,
            Ipv4Addr::new(10, 1, 0, 2),
            Ipv4Addr::from(dst),
            40000,
            80,
            SYN,
            1,
            0,
        )
    }

    /// Runs one frame from `port` with conntrack: the verdict, the frame as it
    /// leaves, the trace lines.
    fn run_eni(snap: &Snapshot, port: u16, mut frame: Vec<u8>) -> (Action, Vec<u8>, Vec<String>) {
        let mut ct = conntrack();
        let mut rec = Recorder::default();
        let action = process_ct(snap, port, &mut frame, Some(&mut ct), &mut rec);
        let lines = rec
            .stages
            .iter()
            .map(|(s, d)| format!("{} {}", s.name(), d))
            .collect();
        (action, frame, lines)
    }

    #[test]
    fn a_pod_on_an_eni_reaches_the_vpc_through_its_eni_and_gateway() {
        let snap = eni_snapshot(true);
        let (action, frame, lines) = run_eni(&snap, POD, from_pod([10, 0, 9, 9]));
        assert_eq!(action, Action::Forward { port: ENI1 }, "{lines:#?}");
        assert_eq!(frame[0..6], ENI1_GW_MAC, "to ENI 1's gateway");
        assert_eq!(frame[6..12], ENI1_MAC, "from ENI 1's port");
        assert_eq!(frame[26..30], [10, 1, 0, 2], "the pod's own address");
        assert!(
            lines.iter().any(|l| l
                == "route source 10.1.0.2 is a secondary IP of eni-0abc (device 1): table eni-1 -> port eni1 via 10.0.1.1"),
            "{lines:#?}"
        );
        // Without the source tables the same packet leaves by the main table's uplink.
        let (action, frame, _) = run_eni(&eni_snapshot(false), POD, from_pod([10, 0, 9, 9]));
        assert_eq!(action, Action::Forward { port: UPLINK });
        assert_eq!(frame[0..6], testing::ROUTER_MAC);
        // Without conntrack (nothing is masqueraded) the ENI table applies too.
        let mut f = from_pod([10, 0, 9, 9]);
        assert_eq!(
            process(&snap, POD, &mut f, &mut NoTrace),
            Action::Forward { port: ENI1 }
        );
    }

    #[test]
    fn traffic_to_pods_stays_on_the_main_table() {
        let snap = eni_snapshot(true);
        let (action, frame, lines) = run_eni(&snap, POD, from_pod([10, 1, 0, 3]));
        assert_eq!(action, Action::Forward { port: POD_C }, "{lines:#?}");
        assert_eq!(frame[0..6], POD_C_MAC);
        assert!(
            lines.iter().any(|l| l
                == "route source 10.1.0.2 selects table eni-1 of eni-0abc (device 1), but 10.1.0.3 goes to pod port pod-c: table main"),
            "{lines:#?}"
        );
        // A source that selects no table: main, and no word about tables.
        let from_c = testing::tcp4(
            POD_C_MAC,
            testing::GW_MAC,
            Ipv4Addr::new(10, 1, 0, 3),
            Ipv4Addr::new(10, 0, 9, 9),
            40000,
            80,
            SYN,
            1,
            0,
        );
        let (action, _, lines) = run_eni(&snap, POD_C, from_c);
        assert_eq!(action, Action::Forward { port: UPLINK });
        assert!(!lines.iter().any(|l| l.contains("table")), "{lines:#?}");
    }

    #[test]
    fn masqueraded_traffic_leaves_by_the_main_table_as_the_node_ip() {
        let snap = eni_snapshot(true);
        let (action, frame, lines) = run_eni(&snap, POD, from_pod([8, 8, 8, 8]));
        assert_eq!(action, Action::Forward { port: UPLINK }, "{lines:#?}");
        assert_eq!(frame[0..6], testing::ROUTER_MAC);
        assert_eq!(frame[26..30], testing::NODE.octets(), "masqueraded");
        assert!(
            lines.iter().any(|l| l
                == "route source 10.1.0.2 selects table eni-1 of eni-0abc (device 1), but 8.8.8.8 is outside the VPC and masqueraded to the node IP: table main"),
            "{lines:#?}"
        );
        // A protocol SNAT leaves alone (GRE) keeps the pod's address: its ENI's table.
        let gre = testing::ipv4(
            POD_MAC,
            testing::GW_MAC,
            Ipv4Addr::new(10, 1, 0, 2),
            Ipv4Addr::new(8, 8, 8, 8),
            47,
            &[0; 8],
        );
        assert_eq!(run_eni(&snap, POD, gre).0, Action::Forward { port: ENI1 });
        // SNAT off: nothing is masqueraded, the ENI's table applies.
        let mut off = snap.clone();
        Arc::make_mut(&mut off.snat).node_ips.clear();
        let (action, frame, _) = run_eni(&off, POD, from_pod([8, 8, 8, 8]));
        assert_eq!(action, Action::Forward { port: ENI1 });
        assert_eq!(frame[26..30], [10, 1, 0, 2]);
    }

    #[test]
    fn an_enis_port_answers_arp_for_its_secondary_ips() {
        let snap = eni_snapshot(true);
        let ask = |target: Ipv4Addr| {
            let mut f = vec![0u8; 64];
            let n =
                local::build_arp_request(&snap.ports[usize::from(UPLINK)], ENI1_GW, target, &mut f)
                    .expect("fits");
            f.truncate(n);
            f[6..12].copy_from_slice(&ENI1_GW_MAC);
            f[22..28].copy_from_slice(&ENI1_GW_MAC);
            let action = process(&snap, ENI1, &mut f, &mut NoTrace);
            (action, f)
        };
        let (action, f) = ask(Ipv4Addr::new(10, 1, 0, 2));
        assert_eq!(action, Action::Reply);
        assert_eq!(f[0..6], ENI1_GW_MAC);
        assert_eq!(f[22..28], ENI1_MAC, "10.1.0.2 is at ENI 1's port");
        assert_eq!(
            ask(Ipv4Addr::new(10, 0, 1, 10)).0,
            Action::Reply,
            "its primary"
        );
        assert_eq!(
            ask(Ipv4Addr::new(10, 1, 0, 3)).0,
            Action::Drop(DropReason::ArpIgnored),
            "not an address of this ENI"
        );
    }
}
