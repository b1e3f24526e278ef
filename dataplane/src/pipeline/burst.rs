//! The per-burst context every stage works on ([`Burst`]): the burst's inputs (snapshot,
//! input port, frames, conntrack, tracer), its verdicts, and the per-packet arrays and
//! index lists ([`Scratch`]) one stage hands the next.
//!
//! A burst is a sequence of passes, one per stage, each over the packets still going on
//! (`Scratch::ok` up to routing, `Scratch::routed` after it), each compacting its list
//! as packets get their verdict in `actions`. Everything per packet lives in
//! fixed-size arrays indexed by the packet's place in the burst, allocated once per
//! worker: no allocation per burst.

use super::acl::AclScratch;
use super::ct::{CtMark, SnatHint};
use super::{Action, Frames, Parsed, Tracer, MAX_BURST};
use crate::conntrack::{Conntrack, KeyHash};
use crate::counters::DropReason;
use crate::snapshot::{PortState, Snapshot};
use crate::switching::{LearnEvent, MAX_LEARN_PER_BURST};

/// `Scratch::nh` of a packet sent out of a port without a route's next hop.
pub const NO_NEXT_HOP: u32 = crate::lpm::NO_ROUTE;

/// Per-burst working arrays, allocated once per worker and reused. Per-packet arrays
/// are indexed by the packet's place in the burst; `ok` and `routed` list the packets
/// still going on, by that index, their lengths in [`Burst`].
#[derive(Debug)]
pub struct Scratch {
    pub parsed: [Parsed; MAX_BURST],
    /// Packets that passed the front stages, by index.
    pub ok: [u16; MAX_BURST],
    /// Packets still to be routed, by index; IPv4 destinations and their next hops.
    pub(super) pending4: [u16; MAX_BURST],
    pub(super) dst4: [u32; MAX_BURST],
    pub(super) nh4: [u32; MAX_BURST],
    pub(super) pending6: [u16; MAX_BURST],
    /// Switched IP packets the switching policy pass checks, by index
    /// ([`switch::policy`](super::switch::policy)).
    pub switched: [u16; MAX_BURST],
    pub(super) n_switched: usize,
    /// Packets routed to a port, by index, and per packet its output port.
    pub routed: [u16; MAX_BURST],
    pub out: [u16; MAX_BURST],
    /// Per packet, the next hop (route table value) it was routed by: its gateway, if
    /// any, is that entry's ([`NextHopEntry::Port`](crate::snapshot::NextHopEntry)).
    /// Packets sent out of a port without a route (switched) have none
    /// ([`NO_NEXT_HOP`]).
    pub nh: [u32; MAX_BURST],
    /// The packets an ACL table classifies in one batch.
    pub(super) members: [u16; MAX_BURST],
    /// Per packet, what conntrack found.
    pub ct: [CtMark; MAX_BURST],
    /// Per packet (indexed like `parsed`), its key's conntrack hash as the lookup made it.
    pub hash: [KeyHash; MAX_BURST],
    /// Per packet, what the SNAT prefetch worked out for the commit.
    pub snat: [SnatHint; MAX_BURST],
    /// Per packet, whether an ACL `reflect` rule let it through (the commit then
    /// tracks its connection).
    pub reflect: [bool; MAX_BURST],
    pub(super) acl: AclScratch,
    /// Source MACs of switched frames the FDB does not have where they came from
    /// ([`switch::learn`](super::switch::learn)): for the worker to report.
    pub learned: [LearnEvent; MAX_LEARN_PER_BURST],
    pub n_learned: usize,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            parsed: [Parsed::EMPTY; MAX_BURST],
            ok: [0; MAX_BURST],
            pending4: [0; MAX_BURST],
            dst4: [0; MAX_BURST],
            nh4: [0; MAX_BURST],
            pending6: [0; MAX_BURST],
            switched: [0; MAX_BURST],
            n_switched: 0,
            routed: [0; MAX_BURST],
            out: [0; MAX_BURST],
            nh: [NO_NEXT_HOP; MAX_BURST],
            members: [0; MAX_BURST],
            ct: [CtMark::None; MAX_BURST],
            hash: [KeyHash::default(); MAX_BURST],
            snat: [SnatHint::None; MAX_BURST],
            reflect: [false; MAX_BURST],
            acl: AclScratch::default(),
            learned: [LearnEvent::EMPTY; MAX_LEARN_PER_BURST],
            n_learned: 0,
        }
    }
}

impl Scratch {
    /// The ACL rule hits of the last burst.
    pub fn acl_hits(&self) -> &[super::AclHit] {
        self.acl.hits()
    }

    /// The learn events of the last burst.
    pub fn learned(&self) -> &[LearnEvent] {
        &self.learned[..self.n_learned]
    }
}

/// One burst on its way through the stages: what every stage reads (the snapshot, the
/// input port, the conntrack state, the tracer), the frames and their verdicts, and
/// how many packets each list of [`Scratch`] holds. Built on the stack for each burst
/// and passed to every stage by `&mut`; inlined into the burst function, its fields
/// are locals, so a stage's per-packet loop reads no more through it than it would
/// through separate arguments.
pub struct Burst<'a, F: ?Sized, T> {
    pub snap: &'a Snapshot,
    /// The port the burst arrived on (configuration index) and its state.
    pub in_port: u16,
    pub port: &'a PortState,
    pub frames: &'a mut F,
    /// `actions[i]`: the verdict of frame `i`.
    pub actions: &'a mut [Action],
    pub s: &'a mut Scratch,
    /// This worker's conntrack, when the stages have something to track.
    pub ct: Option<&'a mut Conntrack>,
    pub t: &'a mut T,
    /// Packets in the burst.
    pub n: usize,
    /// How many packets `s.ok` lists (up to routing) and `s.routed` lists (after it).
    pub n_ok: usize,
    pub n_routed: usize,
}

impl<'a, F: Frames + ?Sized, T: Tracer> Burst<'a, F, T> {
    /// The context of a burst received on `in_port`: at most [`MAX_BURST`] frames,
    /// and no more than `actions` holds. `None` (and every frame dropped) when the
    /// snapshot has no such port. Conntrack is left out when it has nothing to do in
    /// this generation ([`Conntrack::active`]).
    #[inline(always)]
    pub fn new(
        snap: &'a Snapshot,
        in_port: u16,
        frames: &'a mut F,
        actions: &'a mut [Action],
        s: &'a mut Scratch,
        ct: Option<&'a mut Conntrack>,
        t: &'a mut T,
    ) -> Option<Self> {
        let n = frames.count().min(MAX_BURST).min(actions.len());
        s.acl.n_hits = 0;
        s.n_learned = 0;
        s.n_switched = 0;
        let Some(port) = snap.ports.get(usize::from(in_port)) else {
            actions[..n].fill(Action::Drop(DropReason::Malformed));
            return None;
        };
        let ct = ct.filter(|c| c.active(snap));
        Some(Burst {
            snap,
            in_port,
            port,
            frames,
            actions,
            s,
            ct,
            t,
            n,
            n_ok: 0,
            n_routed: 0,
        })
    }
}

/// What the stages' unit tests share: a small snapshot (a pod port and an uplink in one
/// network, a default route via a resolved gateway) and frames to run through it.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::lpm::Lpm4;
    use crate::snapshot::{Neighbor, NextHopEntry, PortRole};
    use crate::wire::{checksum, EthernetAddress};
    use rustc_hash::FxHashMap;
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;

    pub const POD: u16 = 0;
    pub const UPLINK: u16 = 1;
    pub const GW_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xa];
    pub const UPLINK_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xc];
    pub const POD_MAC: [u8; 6] = [2, 0, 0, 0, 1, 2];
    pub const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 9, 1];
    pub const ROUTER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

    /// Pod port 0 (its pod 10.1.0.2 at `POD_MAC`, MTU 1500) and uplink 1 (192.0.2.10, MTU 1400): 10.1.0.2/32
    /// to the pod, 203.0.113.0/24 blackholed, the rest via 192.0.2.1 (resolved).
    pub fn snapshot() -> Snapshot {
        let mut snap = Snapshot::empty();
        let port = |name: &str, role, mac, mtu, pod_mac, local| PortState {
            name: String::from(name),
            dpdk_id: 0,
            role,
            network: 0,
            mac: EthernetAddress(mac),
            mtu,
            pod_mac,
            local_v4: vec![local],
            local_v6: Vec::new(),
            proxy_arp_v4: Vec::new(),
            xconnect: None,
            pod_sources: Default::default(),
            locked: false,
        };
        snap.ports = vec![
            port(
                "pod",
                PortRole::Pod,
                GW_MAC,
                1500,
                Some(EthernetAddress(POD_MAC)),
                Ipv4Addr::new(169, 254, 1, 1),
            ),
            port(
                "uplink",
                PortRole::Uplink,
                UPLINK_MAC,
                1400,
                None,
                Ipv4Addr::new(192, 0, 2, 10),
            ),
        ];
        snap.ports[0].pod_sources =
            super::super::port_security::sources(Some(POD_MAC), &["10.1.0.2"], &[]);
        let mut lpm = Lpm4::new();
        lpm.insert(Ipv4Addr::new(10, 1, 0, 2), 32, 0)
            .expect("route");
        lpm.insert(Ipv4Addr::UNSPECIFIED, 0, 1).expect("route");
        lpm.insert(Ipv4Addr::new(203, 0, 113, 0), 24, 2)
            .expect("route");
        snap.networks[0].lpm4 = Arc::new(lpm);
        snap.next_hops = Arc::new(vec![
            NextHopEntry::Port {
                port: POD,
                via: None,
            },
            NextHopEntry::Port {
                port: UPLINK,
                via: Some(IpAddr::V4(ROUTER)),
            },
            NextHopEntry::Blackhole,
        ]);
        let mut neighbors = FxHashMap::default();
        neighbors.insert(
            (0u16, IpAddr::V4(ROUTER)),
            Neighbor {
                mac: EthernetAddress(ROUTER_MAC),
                port: UPLINK,
            },
        );
        snap.neighbors = Arc::new(neighbors);
        snap.resolve_gateways();
        snap
    }

    /// [`snapshot`] plus 192.0.2.0/24 on-link out of the uplink (its neighbours
    /// unresolved but the router) and 10.1.0.0/24 on-link to the pod port (the lanes'
    /// tests: next hops the lanes resolve and ones they leave to the stages).
    pub fn on_link_snapshot() -> Snapshot {
        let mut snap = snapshot();
        let mut hops = (*snap.next_hops).clone();
        hops.push(NextHopEntry::Port {
            port: UPLINK,
            via: None,
        });
        hops.push(NextHopEntry::Port {
            port: POD,
            via: None,
        });
        let n = hops.len() as u32;
        snap.next_hops = Arc::new(hops);
        let mut lpm = (*snap.networks[0].lpm4).clone();
        lpm.insert(Ipv4Addr::new(192, 0, 2, 0), 24, n - 2)
            .expect("route");
        lpm.insert(Ipv4Addr::new(10, 1, 0, 0), 24, n - 1)
            .expect("route");
        snap.networks[0].lpm4 = Arc::new(lpm);
        snap.resolve_gateways();
        snap
    }

    /// An Ethernet/IPv4/UDP frame from the pod (to `dst_mac`) to `dst`, with `payload`
    /// bytes of UDP payload, TTL `ttl`, DF set; checksums valid.
    pub fn udp4(dst_mac: [u8; 6], dst: [u8; 4], ttl: u8, payload: usize) -> Vec<u8> {
        let ip_len = 20 + 8 + payload;
        let mut f = vec![0u8; 14 + ip_len];
        f[0..6].copy_from_slice(&dst_mac);
        f[6..12].copy_from_slice(&POD_MAC);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let len = (ip_len as u16).to_be_bytes();
        f[14..34].copy_from_slice(&[
            0x45, 0, len[0], len[1], 0, 1, 0x40, 0, ttl, 17, 0, 0, 10, 1, 0, 2, dst[0], dst[1],
            dst[2], dst[3],
        ]);
        let c = !checksum::data(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f[34..36].copy_from_slice(&5000u16.to_be_bytes());
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        f[38..40].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
        f
    }

    /// The ports [`udn_snapshot`] adds: a pod port in each of two user-defined
    /// networks (their pods both 10.128.0.5) and a host port.
    pub const POD_A: u16 = 2;
    pub const POD_B: u16 = 3;
    pub const HOST: u16 = 4;
    pub const GW_MAC_A: [u8; 6] = [2, 0xfe, 0, 0, 0, 0x1a];
    pub const GW_MAC_B: [u8; 6] = [2, 0xfe, 0, 0, 0, 0x1b];
    pub const HOST_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 0x40];
    pub const POD_MAC_A: [u8; 6] = [2, 0, 0, 0, 0xa, 5];
    pub const POD_MAC_B: [u8; 6] = [2, 0, 0, 0, 0xb, 5];
    pub const HOST_PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0x40, 1];
    /// The UDN pods' address (the same in both networks) and the node IP.
    pub const UDN_POD: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 5);
    pub const NODE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
    /// The host port's peer (the kubelet) and an address behind it.
    pub const HOST_PEER: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 2);
    /// Next hops [`udn_snapshot`] adds to [`snapshot`]'s three.
    pub const NH_POD_A: u32 = 3;
    pub const NH_POD_B: u32 = 4;
    pub const NH_ISOLATED: u32 = 5;
    pub const NH_HOST: u32 = 6;

    /// [`snapshot`] with user-defined networks: network 0 `default` (pod port 0, uplink 1
    /// with node IP 192.0.2.10 and SNAT on, host port 4 towards 172.16.0.0/24),
    /// networks 1 `udn-a` and 2 `udn-b` (user-defined; pod ports 2 and 3, each with its
    /// pod at 10.128.0.5). Routes: in `default` also 10.128.0.5/32 to pod-a (a route
    /// crossing into udn-a) and 172.16.0.0/24 to the host port; in `udn-a` its pod, the
    /// default route via the uplink of `default`, 10.1.0.0/16 isolated, 10.128.1.0/24
    /// to pod-b (crossing into udn-b); in `udn-b` its pod and the default route via the
    /// uplink. SNAT's VPC is 198.51.100.0/24 (not masqueraded from `default`).
    pub fn udn_snapshot() -> Snapshot {
        use crate::snapshot::Network;
        use crate::wire::Ipv4Cidr;
        let mut snap = snapshot();
        let pod_port = |name: &str, network, mac, pod_mac: [u8; 6]| PortState {
            name: String::from(name),
            dpdk_id: 0,
            role: PortRole::Pod,
            network,
            mac: EthernetAddress(mac),
            mtu: 1500,
            pod_mac: Some(EthernetAddress(pod_mac)),
            local_v4: vec![Ipv4Addr::new(169, 254, 1, 1)],
            local_v6: Vec::new(),
            proxy_arp_v4: Vec::new(),
            xconnect: None,
            pod_sources: super::super::port_security::sources(Some(pod_mac), &["10.128.0.5"], &[]),
            locked: false,
        };
        snap.ports.push(pod_port("pod-a", 1, GW_MAC_A, POD_MAC_A));
        snap.ports.push(pod_port("pod-b", 2, GW_MAC_B, POD_MAC_B));
        snap.ports.push(PortState {
            name: "host".into(),
            dpdk_id: 0,
            role: PortRole::Host,
            network: 0,
            mac: EthernetAddress(HOST_MAC),
            mtu: 1500,
            pod_mac: None,
            local_v4: vec![Ipv4Addr::new(172, 16, 0, 1)],
            local_v6: Vec::new(),
            proxy_arp_v4: Vec::new(),
            xconnect: None,
            pod_sources: Default::default(),
            locked: false,
        });
        let mut hops = (*snap.next_hops).clone();
        hops.extend([
            NextHopEntry::Port {
                port: POD_A,
                via: None,
            },
            NextHopEntry::Port {
                port: POD_B,
                via: None,
            },
            NextHopEntry::Isolated,
            NextHopEntry::Port {
                port: HOST,
                via: None,
            },
        ]);
        snap.next_hops = Arc::new(hops);
        let mut lpm = (*snap.networks[0].lpm4).clone();
        lpm.insert(UDN_POD, 32, NH_POD_A).expect("route");
        lpm.insert(Ipv4Addr::new(172, 16, 0, 0), 24, NH_HOST)
            .expect("route");
        snap.networks[0].lpm4 = Arc::new(lpm);
        let udn = |name: &str, pod_nh: u32, extra: &[(Ipv4Addr, u8, u32)]| {
            let mut net = Network::new(
                name,
                Ipv4Addr::new(169, 254, 1, 1),
                "fe80::1".parse().expect("v6"),
            );
            net.user_defined = true;
            let mut lpm = Lpm4::new();
            lpm.insert(UDN_POD, 32, pod_nh).expect("route");
            lpm.insert(Ipv4Addr::UNSPECIFIED, 0, 1).expect("route");
            for &(a, len, nh) in extra {
                lpm.insert(a, len, nh).expect("route");
            }
            net.lpm4 = Arc::new(lpm);
            net
        };
        snap.networks.push(udn(
            "udn-a",
            NH_POD_A,
            &[
                (Ipv4Addr::new(10, 1, 0, 0), 16, NH_ISOLATED),
                (Ipv4Addr::new(10, 128, 1, 0), 24, NH_POD_B),
            ],
        ));
        snap.networks.push(udn("udn-b", NH_POD_B, &[]));
        let mut neighbors = (*snap.neighbors).clone();
        neighbors.insert(
            (0u16, IpAddr::V4(HOST_PEER)),
            Neighbor {
                mac: EthernetAddress(HOST_PEER_MAC),
                port: HOST,
            },
        );
        snap.neighbors = Arc::new(neighbors);
        snap.snat = Arc::new(crate::nat::SnatPolicy {
            node_ips: vec![NODE],
            vpc_cidrs: vec![Ipv4Cidr::new(Ipv4Addr::new(198, 51, 100, 0), 24).expect("cidr")],
            ..Default::default()
        });
        snap.resolve_gateways();
        snap.update_locked();
        snap
    }

    /// An Ethernet/IPv4/TCP frame (a 20-byte TCP header with `flags`, sequence `seq`
    /// and acknowledgement `ack`, window 65535, no payload; the IPv4 header checksum
    /// valid).
    #[allow(clippy::too_many_arguments)]
    pub fn tcp4(
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        sport: u16,
        dport: u16,
        flags: u8,
        seq: u32,
        ack: u32,
    ) -> Vec<u8> {
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[8..12].copy_from_slice(&ack.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = flags;
        tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
        ipv4(src_mac, dst_mac, src, dst, 6, &tcp)
    }

    /// An Ethernet/IPv4 frame with protocol `proto` and payload `l4`, TTL 64, DF set,
    /// the header checksum valid.
    pub fn ipv4(
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: u8,
        l4: &[u8],
    ) -> Vec<u8> {
        let mut f = vec![0u8; 34];
        f[0..6].copy_from_slice(&dst_mac);
        f[6..12].copy_from_slice(&src_mac);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14..34].copy_from_slice(&ipv4_header(src, dst, proto, l4.len()));
        f.extend_from_slice(l4);
        f
    }

    /// A 20-byte IPv4 header (TTL 64, DF) for `payload` bytes, its checksum valid.
    pub fn ipv4_header(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: usize) -> [u8; 20] {
        let len = (20 + payload as u16).to_be_bytes();
        let (s, d) = (src.octets(), dst.octets());
        let mut h = [
            0x45, 0, len[0], len[1], 0, 1, 0x40, 0, 64, proto, 0, 0, s[0], s[1], s[2], s[3], d[0],
            d[1], d[2], d[3],
        ];
        let c = !checksum::data(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }

    /// The burst the stages' tests run on: frames in vectors, no tracing.
    pub type TestBurst<'a> = Burst<'a, [Vec<u8>], super::super::NoTrace>;

    /// Parses every frame of `b` and passes them all on (`ok`), as the stages between
    /// parsing and routing see them.
    pub fn parse_all(b: &mut TestBurst<'_>) {
        for i in 0..b.n {
            b.s.parsed[i] = super::super::parse(b.frames.frame(i), 0).expect("parses");
            b.s.ok[i] = i as u16;
        }
        b.n_ok = b.n;
    }

    /// Parses every frame of `b` and routes them all out of `port` without a gateway,
    /// as the stages after routing see them.
    pub fn route_all_to(b: &mut TestBurst<'_>, port: u16) {
        for i in 0..b.n {
            b.s.parsed[i] = super::super::parse(b.frames.frame(i), 0).expect("parses");
            b.s.routed[i] = i as u16;
            b.s.out[i] = port;
            b.s.nh[i] = NO_NEXT_HOP;
        }
        b.n_routed = b.n;
    }

    /// Runs `f` on the context of a burst of `frames` received on the pod port.
    pub fn with_burst<R>(
        snap: &Snapshot,
        frames: &mut [Vec<u8>],
        f: impl FnOnce(&mut TestBurst<'_>) -> R,
    ) -> (R, Vec<Action>) {
        with_burst_on(snap, POD, frames, f)
    }

    /// [`with_burst`] of a burst received on `port`.
    pub fn with_burst_on<R>(
        snap: &Snapshot,
        port: u16,
        frames: &mut [Vec<u8>],
        f: impl FnOnce(&mut TestBurst<'_>) -> R,
    ) -> (R, Vec<Action>) {
        let mut actions = vec![Action::Drop(DropReason::Malformed); frames.len()];
        let mut s = Box::<Scratch>::default();
        let mut t = super::super::NoTrace;
        let mut b = Burst::new(snap, port, frames, &mut actions, &mut s, None, &mut t)
            .expect("the port exists");
        let r = f(&mut b);
        (r, actions)
    }
}
