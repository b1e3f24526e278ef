//! The established-connection lane: with conntrack active on a port the lanes can take
//! ([`fast::lane_port`]: one network, no locked port or source route table, no DNS
//! policy on the port, not switched), a plain IPv4 UDP or TCP packet
//! ([`fast::headers`]) of a connection conntrack already holds, checked against the ACL
//! state in force and owned by this worker, is looked up, tracked, translated (a
//! masqueraded connection's original direction to its SNAT address and port, its
//! replies back to the pod), routed and rewritten in a few passes of its own, without
//! the stages' parse, per-packet lists and marks: a connection's packets after its
//! first, which are nearly all a node forwards. ACL tables do not keep a packet from
//! the lane: the stages skip them for every packet it takes
//! ([`CtMark::skips_acl`]: replies, and packets of connections checked against the
//! rules in force).
//!
//! The lane takes such packets from the start of the burst whose next hop is resolved
//! and that the output's MTU fits, up to the first packet it cannot take without
//! changing the order of the table's operations (ICMP, a fragment, IP options, an
//! expiring TTL, a connection the changed ACLs have not checked, a tracked packet whose
//! destination after translation is the port's own, a next hop to resolve or an MTU it
//! does not fit, a SYN that reopens a connection); that packet and every one after it
//! go through the stages. Two kinds of packet it passes over without stopping, because
//! in the stages they do nothing to the table until every packet has been looked up:
//!
//! - a packet of no connection (a new one): the stages' lookup changes nothing for
//!   it, and their commit, which inserts it, runs after every lookup in either order
//!   (its later packets in the burst miss the table too); but a burst whose first such
//!   packet is its first goes to the stages whole (a SYN flood, a burst of queries);
//! - a packet of a connection another worker owns, which the lane hands off itself,
//!   as the conntrack lookup would (it never touches this worker's table): the worker
//!   polling a queue gets every worker's connections, unless RSS sorts them by owner.
//!
//! So the table sees the same operations in the same order as with the stages alone:
//! the same connection states, aging lists and slots. The verdicts, rewritten bytes and
//! connection states are the stages' (the differential test below runs both over
//! random bursts of many connections and expires them one at a time; making the lane go
//! on past a packet with options, an unresolved next hop, a reopening SYN or an
//! unchecked connection makes it fail). Of the per-packet scratch, a packet the lane
//! takes has only its conntrack mark and action written; the lane's own arrays
//! (`s.pending4`, `s.dst4`, `s.nh4`, and the keys and hashes by place in its list,
//! see [`stage`]) are the stages' to overwrite; a packet handed off has its marks
//! cleared. Nothing after the burst reads the rest for a routed port's packets.

use super::burst::Burst;
use super::ct::{owner_of, tcp_info, CtMark, SnatHint};
use super::fast::{self, Hops, L4_OFFSET};
use super::l2::{routed_frame, PREFETCH_AHEAD};
use super::neighbor::rewrite_v4;
use super::{Action, Frames, Tracer, MAX_BURST};
use crate::conntrack::{Dir, L4Info, TrackVerdict};
use crate::counters::DropReason;
use crate::flow::FlowKey;
use crate::nat::rewrite::{self, Endpoint};
use crate::snapshot::PortRole;
use crate::wire::IpProtocol;
use std::net::Ipv4Addr;

/// Whether the lane applies to burst `b`: conntrack active, on a port the lanes can
/// take ([`fast::lane_port`]).
#[inline(always)]
pub fn applies<F: Frames + ?Sized, T: Tracer>(b: &Burst<'_, F, T>) -> bool {
    b.ct.is_some() && fast::lane_port(b)
}

/// The stage in place of [`l2::stage`](super::l2::stage) when the lane [`applies`]:
/// the burst's leading packets of established connections get their verdict here
/// (see the module documentation); the rest are parsed and checked as the l2 stage
/// does and listed in `s.ok`, in burst order, for the conntrack lookup and the stages
/// after it.
#[inline(always)]
pub fn stage<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>) {
    if b.ct.is_none() {
        // (Not without conntrack: `applies` says so.)
        super::l2::stage(b);
        return;
    }
    let (snap, port, s) = (b.snap, b.port, &mut *b.s);
    let Some(ct) = b.ct.as_deref_mut() else {
        return;
    };
    let pod = port.role == PortRole::Pod;
    let network = port.network;
    let lpm4 = &*snap.networks[usize::from(network)].lpm4;
    let foreign = ct.workers > 1 || ct.worker != 0;
    // (At most `MAX_BURST`, as `Burst::new` made it: said again so that the per-packet
    // arrays' bounds checks fold away.)
    let n = b.n.min(MAX_BURST);

    // 1. The leading plain packets, listed by index in `s.pending4` (the route
    //    stage's array, free until it runs), and by their place `k` in that list
    //    their keys (in `s.parsed[k].key`, which the stages overwrite for the packets
    //    they take) and hashes (`s.hash[k]`, which their lookup computes again). A
    //    packet of a connection another worker owns is handed off here, as the
    //    conntrack lookup would hand it off: it never touches this worker's table, so
    //    the lane goes on past it.
    for i in 0..PREFETCH_AHEAD.min(n) {
        b.frames.prefetch(i);
    }
    let mut n_keyed = 0usize;
    let mut stop = 0usize;
    // The packets handed off here, by index (and before step 4, those taken).
    let mut handled = Handled::default();
    while stop < n {
        let i = stop;
        b.frames.prefetch(i + PREFETCH_AHEAD);
        let frame = b.frames.frame(i);
        let Some(h) = fast::headers(port, pod, frame) else {
            break;
        };
        // (`headers` checked the frame holds the IP header and 8 bytes after it.)
        let Some(l4) = frame.get(L4_OFFSET..L4_OFFSET + 4) else {
            break;
        };
        let key = FlowKey::v4(
            network,
            frame[23],
            Ipv4Addr::from(h.src),
            Ipv4Addr::from(h.dst),
            u16::from_be_bytes([l4[0], l4[1]]),
            u16::from_be_bytes([l4[2], l4[3]]),
        );
        if foreign && !ct.no_handoff {
            let owner = owner_of(&key, &key, false, &snap.snat, ct.workers);
            if owner != ct.worker {
                s.ct[i] = CtMark::None;
                s.snat[i] = SnatHint::None;
                s.reflect[i] = false;
                b.actions[i] = Action::Handoff { worker: owner };
                handled.set(i);
                stop += 1;
                continue;
            }
        }
        let hash = ct.table.key_hash(&key);
        if n_keyed == 0 && ct.table.lookup_hashed(&key, hash).is_none() {
            // A burst that starts with a new connection is most likely one of first
            // packets (a SYN flood, a burst of DNS queries): the stages take it whole,
            // and hashing the rest would be work thrown away. (The lookup leaves the
            // bucket in the cache for theirs.)
            break;
        }
        s.hash[n_keyed] = hash;
        s.parsed[n_keyed].key = key;
        s.pending4[n_keyed] = i as u16;
        n_keyed += 1;
        stop += 1;
    }

    // 2. Their connections, looked up with the entries of the keys a few places on
    //    prefetched (as the conntrack lookup does), up to the first packet that is
    //    not of an established connection checked against the ACLs in force; each
    //    one's destination after translation, for the route lookup. The packets found
    //    are listed again, in place (`s.pending4[t]`, `t` no further than the place
    //    read), with their destinations (`s.dst4[t]`) and marks. A packet of no
    //    connection (a new one) is left to the stages and the lane goes on (see the
    //    module documentation).
    let mut n_found = 0usize;
    for k in 0..n_keyed {
        ct.table
            .prefetch_ahead(&mut s.hash, k, |j| (j < n_keyed).then_some(j));
        let i = s.pending4[k];
        let key = &s.parsed[k].key;
        let Some((id, dir)) = ct.table.lookup_hashed(key, s.hash[k]) else {
            continue;
        };
        let Some(conn) = ct.table.get(id) else {
            break;
        };
        if (ct.recheck && conn.acl_generation() != snap.acl.generation) || conn.zone() != network {
            break;
        }
        let nat = conn.nat();
        let dst = match (dir, nat) {
            (Dir::Reply, Some(_)) => conn.source_v4().0,
            _ => Ipv4Addr::from(key.dst_v4()),
        };
        if port.owns_v4(dst) {
            break;
        }
        let dst = u32::from(dst);
        lpm4.prefetch(dst);
        s.dst4[n_found] = dst;
        s.pending4[n_found] = i;
        s.ct[usize::from(i)] = CtMark::Tracked {
            id,
            dir,
            checked: true,
            nat,
        };
        n_found += 1;
    }

    // 3. Routed in one batch; then, in burst order, each packet whose next hop is
    //    resolved is tracked, translated and rewritten, up to the first that is not
    //    (its connection's later packets would be tracked before it).
    lpm4.lookup_batch(&s.dst4[..n_found], &mut s.nh4[..n_found]);
    let hops = Hops::of(snap);
    let mut done = 0usize;
    while done < n_found {
        let t = done;
        let i = usize::from(s.pending4[t]);
        let frame = b.frames.frame_mut(i);
        let Some(h) = frame.first_chunk::<L4_OFFSET>() else {
            break;
        };
        let (total, proto) = (usize::from(u16::from_be_bytes([h[16], h[17]])), h[23]);
        let Some((out, src_mac, dst_mac)) = hops.resolved(s.nh4[t], total) else {
            break;
        };
        let CtMark::Tracked { id, dir, nat, .. } = s.ct[i] else {
            break;
        };
        let l4 = if proto == IpProtocol::TCP.0 {
            tcp_info(frame, L4_OFFSET, total - 20)
        } else {
            L4Info::NONE
        };
        match ct.table.track(id, dir, &l4, total as u32, ct.now) {
            TrackVerdict::Accept => {}
            TrackVerdict::Invalid => {
                // (Unmarked, as the stages leave a packet their lookup drops.)
                s.ct[i] = CtMark::None;
                b.actions[i] = Action::Drop(DropReason::CtInvalid);
                done += 1;
                continue;
            }
            // A SYN that reopens a closing connection: the stages take it from here
            // (`track` changed nothing), and their lookup reopens it.
            TrackVerdict::Reopen => break,
        }
        let translated = match (dir, nat) {
            (Dir::Reply, Some(_)) => {
                let (addr, port) = ct
                    .table
                    .get(id)
                    .map_or((Ipv4Addr::UNSPECIFIED, 0), |c| c.source_v4());
                rewrite::rewrite(frame, 14, L4_OFFSET, proto, Endpoint::Dst, addr, port)
            }
            (Dir::Original, Some(nat)) => rewrite::rewrite(
                frame,
                14,
                L4_OFFSET,
                proto,
                Endpoint::Src,
                nat.addr,
                nat.port,
            ),
            _ => true,
        };
        b.actions[i] = if translated {
            rewrite_v4(frame, 14, src_mac, dst_mac);
            Action::Forward { port: out }
        } else {
            Action::Drop(DropReason::Malformed)
        };
        done += 1;
    }

    #[cfg(test)]
    LANED.with(|c| c.set(c.get() + done));

    // 4. The rest of the burst — the packets not handled above —, in burst order, as
    //    the l2 stage does. (Nothing is left when the lane took the whole burst, as it
    //    mostly does.)
    if handled.count + done < n {
        for &i in &s.pending4[..done] {
            handled.set(usize::from(i));
        }
        rest(b, &handled, n);
    } else {
        b.n_ok = 0;
    }
}

/// Step 4 of [`stage`]: the packets of the burst's first `n` not in `handled`, parsed
/// and checked as the l2 stage does and listed in `s.ok`, in burst order. (A function
/// of its own, not inlined: in the lane's body the parse's accessors were no longer
/// inlined, which cost new connections 5% more instructions.)
#[inline(never)]
fn rest<F: Frames + ?Sized, T: Tracer>(b: &mut Burst<'_, F, T>, handled: &Handled, n: usize) {
    let (snap, port, s) = (b.snap, b.port, &mut *b.s);
    let pod = port.role == PortRole::Pod;
    let mut n_ok = 0usize;
    for i in 0..n.min(MAX_BURST) {
        if handled.has(i) {
            continue;
        }
        s.ct[i] = CtMark::None;
        s.snat[i] = SnatHint::None;
        s.reflect[i] = false;
        let frame = b.frames.frame_mut(i);
        if routed_frame(
            snap,
            port,
            pod,
            frame,
            &mut s.parsed[i],
            &mut b.actions[i],
            b.t,
        ) {
            s.ok[n_ok] = i as u16;
            n_ok += 1;
        }
    }
    b.n_ok = n_ok;
}

/// A set of a burst's packets, by index, and how many it holds.
#[derive(Default)]
struct Handled {
    bits: [u64; MAX_BURST / 64],
    count: usize,
}

impl Handled {
    /// Adds packet `i` (not in the set yet).
    #[inline(always)]
    fn set(&mut self, i: usize) {
        if let Some(w) = self.bits.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
        self.count += 1;
    }

    #[inline(always)]
    fn has(&self, i: usize) -> bool {
        self.bits
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

#[cfg(test)]
thread_local! {
    /// Packets the lane gave a verdict (tests: that random bursts exercise it).
    static LANED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::super::burst::testing::{
        self, GW_MAC, POD, POD_MAC, ROUTER_MAC, UPLINK, UPLINK_MAC,
    };
    use super::super::{process_burst, NoTrace, Recorder, Scratch};
    use super::*;
    use crate::acl::rule::{Action as RuleAction, Prefix, RuleField};
    use crate::acl::table::{AclTables, Table};
    use crate::acl::Rule;
    use crate::conntrack::{ConnState, Conntrack, CtConfig, NoAdvice, TcpWindow};
    use crate::counters::MAX_PORTS;
    use crate::nat::SnatPolicy;
    use crate::snapshot::Snapshot;
    use crate::wire::{checksum, Ipv4Cidr};
    use rand::prelude::*;
    use std::sync::Arc;

    /// The node address pods are masqueraded to: the uplink's own address, so that a
    /// reply is for Ferrule until it is translated back.
    const NODE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
    const POD_IP: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);

    /// The lanes' test snapshot ([`testing::on_link_snapshot`]) masquerading its pod to
    /// `NODE` (10.0.0.0/8 not masqueraded); ACL state
    /// `generation`: the pod's traffic reflected (in generation 2, but to 1.1.1.1,
    /// which is denied), an egress table on the uplink permitting everything.
    fn snapshot(generation: u64) -> Snapshot {
        let mut snap = testing::on_link_snapshot();
        snap.snat = Arc::new(SnatPolicy {
            node_ips: vec![NODE],
            vpc_cidrs: vec![Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 0), 8).expect("cidr")],
            ports: vec![(40000, 40063)],
            ..Default::default()
        });
        let compile = |name: &str, rules: Vec<Rule>| {
            let slots = (0..rules.len() as u32).collect();
            Arc::new(Table::compile(name.into(), rules, slots, 9).expect("compile"))
        };
        let mut pod_rules = vec![Rule::any(RuleAction::Reflect)];
        if generation == 2 {
            let mut deny = Rule::any(RuleAction::Deny);
            deny.dst = Prefix::parse("1.1.1.1", RuleField::Dst).expect("prefix");
            pod_rules.insert(0, deny);
        }
        let (mut ingress, mut egress) = ([None; MAX_PORTS], [None; MAX_PORTS]);
        ingress[usize::from(POD)] = Some(0);
        egress[usize::from(UPLINK)] = Some(1);
        snap.acl = Arc::new(AclTables::new(
            vec![
                compile("pod", pod_rules),
                compile("uplink", vec![Rule::any(RuleAction::Permit)]),
            ],
            ingress,
            egress,
            None,
            generation,
        ));
        snap.resolve_gateways();
        snap
    }

    /// Worker `worker` of `workers`; `no_handoff`: running packets handed to it.
    fn conntrack(worker: u16, workers: u16, recheck: bool, no_handoff: bool) -> Conntrack {
        let cfg = CtConfig {
            max_entries: 256,
            max_per_zone: 256,
            ..Default::default()
        };
        let mut ct = Conntrack::new_in(&cfg, worker, workers, recheck, &NoAdvice);
        ct.no_handoff = no_handoff;
        ct
    }

    /// A UDP (`tcp_flags` `None`) or TCP frame from `src_mac` to `dst_mac`.
    #[allow(clippy::too_many_arguments)]
    fn l4_frame(
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        sport: u16,
        dport: u16,
        tcp_flags: Option<u8>,
        seq: u32,
        ack: u32,
        payload: usize,
    ) -> Vec<u8> {
        let mut l4 = match tcp_flags {
            Some(flags) => {
                let mut t =
                    testing::tcp4(src_mac, dst_mac, src, dst, sport, dport, flags, seq, ack);
                t.drain(..34);
                t
            }
            None => {
                let mut u = vec![0u8; 8];
                u[0..2].copy_from_slice(&sport.to_be_bytes());
                u[2..4].copy_from_slice(&dport.to_be_bytes());
                u[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
                // A checksum (not the payload's: nothing checks it) for the
                // translations to update.
                u[6..8].copy_from_slice(&sport.wrapping_mul(0x9e37).to_be_bytes());
                u
            }
        };
        l4.extend(std::iter::repeat_n(0x5a, payload));
        let proto = if tcp_flags.is_some() { 6 } else { 17 };
        testing::ipv4(src_mac, dst_mac, src, dst, proto, &l4)
    }

    /// The connections the bursts draw from: the pod's to a few destinations (out of
    /// the uplink masqueraded, via the router or on-link; to the pod subnet; to a
    /// blackhole), by protocol and ports.
    fn flows() -> Vec<(bool, u16, Ipv4Addr, u16)> {
        let dsts = [
            Ipv4Addr::new(8, 8, 8, 8),
            Ipv4Addr::new(1, 1, 1, 1),
            Ipv4Addr::new(192, 0, 2, 77),
            Ipv4Addr::new(10, 1, 0, 7),
            Ipv4Addr::new(203, 0, 113, 5),
        ];
        let mut v = Vec::new();
        for (k, &dst) in dsts.iter().enumerate() {
            for sport in 0..6u16 {
                v.push((sport % 2 == 0, 30000 + sport, dst, 443 + k as u16));
            }
        }
        v
    }

    /// A packet of one of [`flows`] in its original direction, from the pod: TCP with
    /// flags and sequence numbers that open, carry and close connections (mostly in
    /// their window, sometimes not), or UDP.
    /// `clean`: only masqueraded connections through the router, carrying data.
    fn original(rng: &mut StdRng, flows: &[(bool, u16, Ipv4Addr, u16)], clean: bool) -> Vec<u8> {
        let flows = if clean { &flows[..12] } else { flows };
        let &(tcp, sport, dst, dport) = flows.choose(rng).expect("flows");
        let flags: &[u8] = if clean {
            &[0x10, 0x18]
        } else {
            &[0x02, 0x10, 0x10, 0x10, 0x18, 0x18, 0x11, 0x04, 0x12]
        };
        let flags = flags.choose(rng).copied();
        let seq = if clean || rng.gen_bool(0.9) {
            1000
        } else {
            rng.gen()
        };
        // (1,400 bytes of payload are too big for the uplink.)
        let sizes: &[usize] = if clean {
            &[0, 20, 1300]
        } else {
            &[0, 0, 20, 1300, 1400]
        };
        let payload = *sizes.choose(rng).expect("sizes");
        l4_frame(
            POD_MAC,
            GW_MAC,
            POD_IP,
            dst,
            sport,
            dport,
            tcp.then(|| flags.expect("flags")),
            seq,
            5001,
            payload,
        )
    }

    /// A reply from the uplink to one of the connections `ct` tracks (its reply
    /// tuple, which after masquerade is the node's address and SNAT port), or to a
    /// tuple it does not track.
    /// `clean`: only to tracked tuples, carrying data.
    fn reply(rng: &mut StdRng, ct: &Conntrack, clean: bool) -> Vec<u8> {
        let tuples: Vec<_> = ct.table.iter().map(|(_, c)| c.reply_key()).collect();
        let (tcp, src, dst, sport, dport) = match tuples.choose(rng) {
            Some(k) if clean || rng.gen_bool(0.9) => (
                k.proto == 6,
                Ipv4Addr::from(k.src_v4()),
                Ipv4Addr::from(k.dst_v4()),
                k.src_port,
                k.dst_port,
            ),
            _ => (
                rng.gen_bool(0.5),
                Ipv4Addr::new(8, 8, 8, 8),
                NODE,
                443,
                rng.gen_range(40000..40064),
            ),
        };
        let flags: &[u8] = if clean {
            &[0x10, 0x18]
        } else {
            &[0x12, 0x10, 0x10, 0x18, 0x11, 0x04]
        };
        let flags = *flags.choose(rng).expect("flags");
        let seq = if clean || rng.gen_bool(0.9) {
            5000
        } else {
            rng.gen()
        };
        let payload = *[0usize, 0, 20, 1300].choose(rng).expect("sizes");
        l4_frame(
            ROUTER_MAC,
            UPLINK_MAC,
            src,
            dst,
            sport,
            dport,
            tcp.then_some(flags),
            seq,
            1001,
            payload,
        )
    }

    /// Now and then a frame the lane must leave alone: an expiring TTL, a later
    /// fragment, a first fragment, IP options, a wrong MAC (either), a bad checksum, a
    /// truncated frame; or one it takes: Ethernet padding.
    fn spoil(rng: &mut StdRng, f: &mut Vec<u8>) {
        let fix = |f: &mut Vec<u8>| {
            f[24..26].fill(0);
            let c = !checksum::data(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
        };
        match rng.gen_range(0..40) {
            0 => {
                f[22] = 1;
                fix(f);
            }
            1 => {
                f[21] = 1;
                fix(f);
            }
            2 => f[0] ^= 1,
            // Sent from another MAC: not the pod as itself.
            8 => f[11] ^= 1,
            3 => f[24] ^= 0x40,
            6 => {
                f[20] |= 0x20;
                fix(f);
            }
            7 => {
                // Four bytes of options (no-ops): the header grows to 24 bytes.
                f.splice(34..34, [1u8; 4]);
                f[14] = 0x46;
                let total = u16::from_be_bytes([f[16], f[17]]) + 4;
                f[16..18].copy_from_slice(&total.to_be_bytes());
                f[24..26].fill(0);
                let c = !checksum::data(&f[14..38]);
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
            4 => f.truncate(rng.gen_range(0..f.len())),
            5 => f.extend_from_slice(&[0; 6]),
            _ => {}
        }
    }

    /// A connection as the table holds it, for comparing two tables (its slot last:
    /// the same slots mean the same order of removals and inserts).
    type ConnRow = (
        crate::flow::FlowKey,
        ConnState,
        Option<crate::conntrack::Nat>,
        [u64; 4],
        Option<[TcpWindow; 2]>,
        u64,
        u64,
        bool,
        u32,
    );

    fn rows(ct: &Conntrack) -> Vec<ConnRow> {
        let mut v: Vec<ConnRow> = ct
            .table
            .iter()
            .map(|(id, c)| {
                (
                    c.key(),
                    c.state(),
                    c.nat(),
                    [
                        c.packets(Dir::Original),
                        c.packets(Dir::Reply),
                        c.bytes(Dir::Original),
                        c.bytes(Dir::Reply),
                    ],
                    c.tcp_window(Dir::Original)
                        .zip(c.tcp_window(Dir::Reply))
                        .map(|(a, b)| [a, b]),
                    c.expires_at(),
                    c.acl_generation(),
                    c.replied(),
                    id.index(),
                )
            })
            .collect();
        v.sort_by_key(|r| format!("{:?}", r.0));
        v
    }

    /// Random bursts of many connections' packets, both ways, through the lane and
    /// through the stages alone (a tracer turns the lanes off), each with its own
    /// conntrack: the same verdicts, the same bytes and the same connections, as one
    /// worker and as one of two (whose other worker's connections are handed off).
    #[test]
    fn the_lane_gives_the_stages_verdicts_bytes_and_connections() {
        let flows = flows();
        for (seed, (worker, workers, recheck, no_handoff)) in [
            (0u16, 1u16, true, false),
            (1, 2, true, false),
            (1, 2, false, true),
        ]
        .into_iter()
        .enumerate()
        {
            // The third: the pod port has taken 8.8.8.8 as an address of its own, and
            // its connections there now end at Ferrule.
            let mut local = snapshot(1);
            local.ports[usize::from(POD)]
                .local_v4
                .push(Ipv4Addr::new(8, 8, 8, 8));
            let snaps = [
                Arc::new(snapshot(1)),
                Arc::new(snapshot(2)),
                Arc::new(local),
            ];
            let mut rng = StdRng::seed_from_u64(0xe57a + seed as u64);
            let mut lane_ct = conntrack(worker, workers, recheck, no_handoff);
            let mut staged_ct = conntrack(worker, workers, recheck, no_handoff);
            // Each path its own scratch: neither reads what the other left.
            let (mut lane_scratch, mut staged_scratch) =
                (Box::<Scratch>::default(), Box::<Scratch>::default());
            LANED.with(|c| c.set(0));
            let mut packets = 0usize;
            for case in 0..4000 {
                // ACL state changes now and then: connections are checked again.
                let snap = &snaps[(case / 500) % 3];
                let now = 1_000 + case as u64 * 7;
                lane_ct.now = now;
                staged_ct.now = now;
                let port = if case % 3 == 0 { UPLINK } else { POD };
                let n = rng.gen_range(1..=64);
                packets += n;
                // Half the bursts are of established connections only, as most are.
                let clean = rng.gen_bool(0.5);
                let mut lane: Vec<Vec<u8>> = (0..n)
                    .map(|_| {
                        let mut f = if port == POD {
                            original(&mut rng, &flows, clean)
                        } else {
                            reply(&mut rng, &staged_ct, clean)
                        };
                        if !clean {
                            spoil(&mut rng, &mut f);
                        }
                        f
                    })
                    .collect();
                let mut staged = lane.clone();
                let mut a = vec![Action::Drop(DropReason::Malformed); n];
                let mut b = a.clone();
                process_burst(
                    snap,
                    port,
                    lane.as_mut_slice(),
                    &mut a,
                    &mut lane_scratch,
                    Some(&mut lane_ct),
                    &mut NoTrace,
                );
                process_burst(
                    snap,
                    port,
                    staged.as_mut_slice(),
                    &mut b,
                    &mut staged_scratch,
                    Some(&mut staged_ct),
                    &mut Recorder::default(),
                );
                assert_eq!(
                    a, b,
                    "case {case} on port {port}, worker {worker}/{workers}"
                );
                assert_eq!(lane, staged, "case {case} on port {port}");
                assert_eq!(
                    lane_scratch.acl_hits(),
                    staged_scratch.acl_hits(),
                    "case {case}: the ACL hits"
                );
                assert_eq!(rows(&lane_ct), rows(&staged_ct), "case {case}: the tables");
                assert_eq!(
                    lane_ct.table.stats(),
                    staged_ct.table.stats(),
                    "case {case}"
                );
                if case % 300 == 299 {
                    // Time passes: connections expire alike, one at a time first (in
                    // the order of the aging lists, which the order of tracking
                    // sets), then the rest.
                    let later = now + 200_000;
                    for _ in 0..8 {
                        assert_eq!(
                            lane_ct.table.expire(later, 1),
                            staged_ct.table.expire(later, 1)
                        );
                        assert_eq!(rows(&lane_ct), rows(&staged_ct), "case {case}: expiry");
                    }
                    assert_eq!(
                        lane_ct.table.expire(later, usize::MAX),
                        staged_ct.table.expire(later, usize::MAX)
                    );
                }
            }
            let laned = LANED.with(|c| c.get());
            assert!(
                laned * 6 > packets,
                "the bursts exercise the lane: {laned} of {packets} packets (worker {worker}/{workers})"
            );
        }
    }

    /// `frames` received on the pod port: their actions, and how many the lane took.
    fn run_pod_burst(
        snap: &Snapshot,
        frames: &mut [Vec<u8>],
        ct: &mut Conntrack,
        s: &mut Scratch,
    ) -> (Vec<Action>, usize) {
        let mut actions = vec![Action::Drop(DropReason::Malformed); frames.len()];
        LANED.with(|c| c.set(0));
        process_burst(snap, POD, frames, &mut actions, s, Some(ct), &mut NoTrace);
        (actions, LANED.with(|c| c.get()))
    }

    /// The packets `ct` counted in the original direction of the connection from
    /// source port `sport`.
    fn original_packets(ct: &Conntrack, sport: u16) -> Option<u64> {
        ct.table
            .iter()
            .find(|(_, c)| c.key().src_port == sport)
            .map(|(_, c)| c.packets(Dir::Original))
    }

    /// As one of two workers: the other worker's packets are handed off from the lane,
    /// which goes on past them; this worker's established packets are all its own.
    #[test]
    fn hands_off_another_workers_packets_and_goes_on() {
        let snap = snapshot(1);
        let mut ct = conntrack(0, 2, true, false);
        let dst = Ipv4Addr::new(8, 8, 8, 8);
        let udp = |sport| l4_frame(POD_MAC, GW_MAC, POD_IP, dst, sport, 53, None, 0, 0, 10);
        let owner = |sport| {
            let key = FlowKey::v4(0, 17, POD_IP, dst, sport, 53);
            owner_of(&key, &key, false, &snap.snat, 2)
        };
        let ours: Vec<u16> = (1000..).filter(|&p| owner(p) == 0).take(2).collect();
        let theirs: Vec<u16> = (1000..).filter(|&p| owner(p) == 1).take(2).collect();
        let mut s = Box::<Scratch>::default();
        let mut run = |sports: &[u16], ct: &mut Conntrack| {
            let mut frames: Vec<Vec<u8>> = sports.iter().map(|&p| udp(p)).collect();
            run_pod_burst(&snap, &mut frames, ct, &mut s)
        };
        let fwd = Action::Forward { port: UPLINK };
        let handoff = Action::Handoff { worker: 1 };
        // First packets: the stages open this worker's connections.
        let (actions, laned) = run(&[ours[0], theirs[0], ours[1]], &mut ct);
        assert_eq!(actions, [fwd, handoff, fwd]);
        assert_eq!((laned, ct.table.len()), (0, 2));
        // Established, mixed with the other worker's: every one of ours in the lane.
        let mixed = [theirs[1], ours[0], theirs[0], ours[1], theirs[1], ours[0]];
        let (actions, laned) = run(&mixed, &mut ct);
        assert_eq!(actions, [handoff, fwd, handoff, fwd, handoff, fwd]);
        assert_eq!(laned, 3);
        assert_eq!(
            (
                original_packets(&ct, ours[0]),
                original_packets(&ct, ours[1])
            ),
            (Some(3), Some(2))
        );
        assert_eq!(
            ct.table.len(),
            2,
            "the other worker's connections are not ours"
        );
    }

    /// A burst of established packets is the lane's whole; a new connection's packets
    /// are left to the stages around the lane's; a packet the lane cannot read ends its
    /// part, and the rest goes through the stages in order.
    #[test]
    fn takes_established_packets_around_new_connections() {
        let snap = snapshot(1);
        let mut ct = conntrack(0, 1, true, false);
        let dst = Ipv4Addr::new(8, 8, 8, 8);
        let udp = |sport| l4_frame(POD_MAC, GW_MAC, POD_IP, dst, sport, 53, None, 0, 0, 10);
        let mut s = Box::<Scratch>::default();
        let run = |frames: &mut Vec<Vec<u8>>, ct: &mut Conntrack, s: &mut Scratch| {
            run_pod_burst(&snap, frames, ct, s)
        };
        // First packets: the stages open the connections.
        let mut first = vec![udp(1), udp(2)];
        let (actions, laned) = run(&mut first, &mut ct, &mut s);
        assert_eq!(laned, 0);
        assert!(actions
            .iter()
            .all(|a| *a == Action::Forward { port: UPLINK }));
        assert_eq!(ct.table.len(), 2);
        // Established: all in the lane, masqueraded as the stages did the first.
        let mut again = vec![udp(1), udp(2), udp(1)];
        let (actions, laned) = run(&mut again, &mut ct, &mut s);
        assert_eq!(laned, 3);
        assert!(actions
            .iter()
            .all(|a| *a == Action::Forward { port: UPLINK }));
        assert_eq!(again[0][26..30], first[0][26..30], "source masqueraded");
        assert_eq!(again[0][34..36], first[0][34..36], "to the same port");
        assert_eq!(
            Ipv4Addr::from([again[0][26], again[0][27], again[0][28], again[0][29]]),
            NODE
        );
        // A new connection in the middle: left to the stages, the lane goes on.
        let mut mixed = vec![udp(1), udp(3), udp(2), udp(3)];
        let (actions, laned) = run(&mut mixed, &mut ct, &mut s);
        assert_eq!(laned, 2);
        assert!(actions
            .iter()
            .all(|a| *a == Action::Forward { port: UPLINK }));
        assert_eq!(ct.table.len(), 3);
        assert_eq!(
            (original_packets(&ct, 2), original_packets(&ct, 3)),
            (Some(3), Some(2)),
            "tracked once a packet, lane or not; the new one opened by the stages"
        );
        // A packet whose TTL runs out stops the lane: the rest take the stages.
        let mut expiring = udp(2);
        expiring[22] = 1;
        expiring[24..26].fill(0);
        let c = !checksum::data(&expiring[14..34]);
        expiring[24..26].copy_from_slice(&c.to_be_bytes());
        let mut stopped = vec![udp(1), expiring, udp(1), udp(3)];
        let (actions, laned) = run(&mut stopped, &mut ct, &mut s);
        assert_eq!(laned, 1);
        assert_eq!(actions[0], Action::Forward { port: UPLINK });
        assert_ne!(actions[1], Action::Forward { port: UPLINK });
        assert_eq!(actions[2..], [Action::Forward { port: UPLINK }; 2]);
        assert_eq!(original_packets(&ct, 1), Some(6));
    }
}
