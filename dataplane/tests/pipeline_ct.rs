//! The conntrack and NAT stages in the pipeline, on byte buffers: masquerading pod
//! traffic and translating replies and ICMP errors back (checked by etherparse, which
//! recomputes every checksum), `reflect` permits, re-checks after an ACL change,
//! ownership hand-offs between workers, invalid packets and exhausted SNAT ports.

mod common;

use common::*;
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use ferrule_dataplane::acl::table::AclTables;
use ferrule_dataplane::acl::{Action as AclAction, Proto};
use ferrule_dataplane::conntrack::Conntrack;
use ferrule_dataplane::conntrack::{CtConfig, Dir};
use ferrule_dataplane::counters::{DropReason, MAX_PORTS};
use ferrule_dataplane::pipeline::{self, Action, NoTrace, Recorder};
use ferrule_dataplane::snapshot::Snapshot;
use std::net::Ipv4Addr;
use std::sync::Arc;

const REMOTE: [u8; 4] = [8, 8, 8, 8];
const POD_A_IP: [u8; 4] = [10, 1, 0, 2];
const POD_B_IP: [u8; 4] = [10, 1, 0, 3];

fn conntrack(worker: u16, workers: u16) -> Conntrack {
    let cfg = CtConfig {
        max_entries: 1024,
        max_per_zone: 1024,
        ..CtConfig::default()
    };
    let mut ct = Conntrack::new(&cfg, worker, workers, true);
    ct.now = 1_000;
    ct
}

/// A TCP segment from pod-a (as received on its port).
fn from_a(dst: [u8; 4], sport: u16, dport: u16, seq: u32, kind: Tcp, payload: &[u8]) -> Vec<u8> {
    tcp(
        (POD_A, GW_MAC_A),
        POD_A_IP,
        dst,
        sport,
        dport,
        seq,
        kind,
        payload,
    )
}

/// A TCP segment from pod-b.
fn from_b(dst: [u8; 4], sport: u16, dport: u16, seq: u32, kind: Tcp, payload: &[u8]) -> Vec<u8> {
    tcp(
        (POD_B, GW_MAC_B),
        POD_B_IP,
        dst,
        sport,
        dport,
        seq,
        kind,
        payload,
    )
}

/// A TCP segment from the remote server, as the uplink's router delivers it.
fn from_remote(
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    seq: u32,
    kind: Tcp,
    payload: &[u8],
) -> Vec<u8> {
    tcp(
        (ROUTER, UPLINK_MAC),
        REMOTE,
        dst,
        sport,
        dport,
        seq,
        kind,
        payload,
    )
}

fn run(snap: &Snapshot, ct: &mut Conntrack, port: u16, frame: &mut [u8]) -> Action {
    pipeline::process_ct(snap, port, frame, Some(ct), &mut NoTrace)
}

/// Opens pod-a:40000 → pod-b:80 under `snap` (SYN, SYN-ACK), both forwarded.
fn open_a_to_b(snap: &Snapshot, ct: &mut Conntrack) {
    let mut syn = from_a(POD_B_IP, 40000, 80, 1, Tcp::Syn, &[]);
    assert_eq!(run(snap, ct, 0, &mut syn), Action::Forward { port: 1 });
    let mut synack = from_b(POD_A_IP, 80, 40000, 9, Tcp::SynAck(2), &[]);
    assert_eq!(run(snap, ct, 1, &mut synack), Action::Forward { port: 0 });
}

/// Runs `frames` as one burst received on `port`; the actions.
fn run_burst(
    snap: &Snapshot,
    ct: &mut Conntrack,
    port: u16,
    frames: &mut [Vec<u8>],
) -> Vec<Action> {
    let mut actions = vec![Action::Drop(DropReason::Malformed); frames.len()];
    let mut scratch = pipeline::Scratch::default();
    pipeline::process_burst(
        snap,
        port,
        frames,
        &mut actions,
        &mut scratch,
        Some(ct),
        &mut NoTrace,
    );
    actions
}

/// Addresses and ports of a frame, and whether etherparse's own checksums agree.
fn decode(frame: &[u8]) -> ([u8; 4], [u8; 4], u16, u16, bool) {
    let p = SlicedPacket::from_ethernet(frame).expect("etherparse");
    let Some(NetSlice::Ipv4(ip)) = p.net else {
        panic!("not IPv4")
    };
    let h = ip.header().to_header();
    let ip_ok = h.calc_header_checksum() == h.header_checksum;
    let (sport, dport, l4_ok) = match p.transport {
        Some(TransportSlice::Tcp(t)) => {
            let want = t
                .to_header()
                .calc_checksum_ipv4(&h, t.payload())
                .expect("sum");
            (t.source_port(), t.destination_port(), want == t.checksum())
        }
        Some(TransportSlice::Udp(u)) => {
            let want = u
                .to_header()
                .calc_checksum_ipv4(&h, u.payload())
                .expect("sum");
            (u.source_port(), u.destination_port(), want == u.checksum())
        }
        Some(TransportSlice::Icmpv4(i)) => {
            let id = match i.icmp_type() {
                etherparse::Icmpv4Type::EchoRequest(e) | etherparse::Icmpv4Type::EchoReply(e) => {
                    e.id
                }
                _ => 0,
            };
            let want = i.header().icmp_type.calc_checksum(i.payload());
            (id, id, want == i.checksum())
        }
        _ => (0, 0, true),
    };
    (h.source, h.destination, sport, dport, ip_ok && l4_ok)
}

#[test]
fn pod_tcp_is_masqueraded_and_replies_come_back_to_the_pod() {
    let snap = snat_snapshot(vec![(61000, 61999)]);
    let mut ct = conntrack(0, 1);
    let mut syn = from_a(REMOTE, 40000, 443, 1000, Tcp::Syn, &[]);
    assert_eq!(
        run(&snap, &mut ct, 0, &mut syn),
        Action::Forward { port: 2 }
    );
    let (src, dst, sport, dport, ok) = decode(&syn);
    assert_eq!((src, dst, dport), (NODE, REMOTE, 443));
    assert!((61000..=61999).contains(&sport), "{sport}");
    assert!(ok, "checksums after SNAT");
    assert_eq!(ct.table.len(), 1);

    // The SYN-ACK to the node IP goes back to the pod, translated.
    let mut synack = from_remote(NODE, 443, sport, 5000, Tcp::SynAck(1001), &[]);
    assert_eq!(
        run(&snap, &mut ct, 2, &mut synack),
        Action::Forward { port: 0 }
    );
    assert_eq!(decode(&synack), (REMOTE, POD_A_IP, 443, 40000, true));
    // Data both ways.
    let mut ack = from_a(
        REMOTE,
        40000,
        443,
        1001,
        Tcp::Ack(5001),
        b"GET / HTTP/1.0\r\n\r\n",
    );
    assert_eq!(
        run(&snap, &mut ct, 0, &mut ack),
        Action::Forward { port: 2 }
    );
    assert_eq!(decode(&ack), (NODE, REMOTE, sport, 443, true));
    let (id, _) = ct.table.lookup(&masq_key(sport)).expect("tracked");
    let conn = ct.table.get(id).expect("conn");
    assert_eq!(conn.state().name(), "ESTABLISHED");
    assert_eq!(conn.packets(Dir::Original), 2);
    assert_eq!(conn.packets(Dir::Reply), 1);

    // Traffic inside the VPC keeps the pod's address and is not tracked.
    let mut inside = from_a([192, 0, 2, 77], 40001, 80, 1, Tcp::Syn, &[]);
    let action = run(&snap, &mut ct, 0, &mut inside);
    assert!(
        matches!(action, Action::Punt(_)),
        "{action:?}: the neighbour is unresolved"
    );
    assert_eq!(ct.table.len(), 1);
}

/// The reply-direction key of the masqueraded test connection.
fn masq_key(nat_port: u16) -> ferrule_dataplane::flow::FlowKey {
    ferrule_dataplane::flow::FlowKey::v4(
        0,
        6,
        Ipv4Addr::from(REMOTE),
        Ipv4Addr::from(NODE),
        443,
        nat_port,
    )
}

/// The reply-direction key of a masqueraded ping whose external id is `id`.
fn masq_key_icmp(id: u16) -> ferrule_dataplane::flow::FlowKey {
    ferrule_dataplane::flow::FlowKey::v4(0, 1, Ipv4Addr::from(REMOTE), Ipv4Addr::from(NODE), id, id)
}

#[test]
fn ping_and_udp_are_masqueraded_and_icmp_errors_translated_back() {
    let snap = snat_snapshot(vec![(61000, 61999)]);
    let mut ct = conntrack(0, 1);
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv4(POD_A_IP, REMOTE, 64)
        .icmpv4_echo_request(0x1234, 1)
        .write(&mut f, b"ping")
        .expect("build");
    assert_eq!(run(&snap, &mut ct, 0, &mut f), Action::Forward { port: 2 });
    let (src, _, id, _, ok) = decode(&f);
    assert_eq!(src, NODE);
    assert!(ok && (61000..=61999).contains(&id), "{id}");
    let mut reply = Vec::new();
    PacketBuilder::ethernet2(ROUTER, UPLINK_MAC)
        .ipv4(REMOTE, NODE, 60)
        .icmpv4_echo_reply(id, 1)
        .write(&mut reply, b"ping")
        .expect("build");
    assert_eq!(
        run(&snap, &mut ct, 2, &mut reply),
        Action::Forward { port: 0 }
    );
    assert_eq!(decode(&reply), (REMOTE, POD_A_IP, 0x1234, 0x1234, true));
    // An echo *request* to the node address with the ping's external id has the same
    // key as its reply, but is not part of the ping: it is not translated to the pod
    // (to the node address it is local: the node answers it), and the connection does
    // not count it.
    let (conn, _) = ct.table.lookup(&masq_key_icmp(id)).expect("tracked");
    let replies = ct.table.get(conn).expect("live").packets(Dir::Reply);
    let mut request = Vec::new();
    PacketBuilder::ethernet2(ROUTER, UPLINK_MAC)
        .ipv4(REMOTE, NODE, 60)
        .icmpv4_echo_request(id, 7)
        .write(&mut request, b"ping")
        .expect("build");
    let action = run(&snap, &mut ct, 2, &mut request);
    assert!(!matches!(action, Action::Forward { port: 0 }), "{action:?}");
    let (src, dst, ..) = decode(&request);
    assert!(src != POD_A_IP && dst != POD_A_IP, "{src:?} -> {dst:?}");
    assert_eq!(
        ct.table.get(conn).expect("live").packets(Dir::Reply),
        replies
    );
    // Nor is an echo reply from the pod with its ping's id the ping's original
    // direction: it is not counted in the ping, nor masqueraded with its mapping (an
    // echo reply is never masqueraded: it answers a ping that came in).
    let mut pod_reply = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv4(POD_A_IP, REMOTE, 64)
        .icmpv4_echo_reply(0x1234, 1)
        .write(&mut pod_reply, b"pong")
        .expect("build");
    assert_eq!(
        run(&snap, &mut ct, 0, &mut pod_reply),
        Action::Forward { port: 2 }
    );
    assert_eq!(decode(&pod_reply).0, POD_A_IP);
    assert_eq!(ct.table.get(conn).expect("live").packets(Dir::Original), 1);

    // UDP out, then a port unreachable about it from the remote side.
    let mut udp = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv4(POD_A_IP, REMOTE, 64)
        .udp(5353, 53)
        .write(&mut udp, b"query")
        .expect("build");
    assert_eq!(
        run(&snap, &mut ct, 0, &mut udp),
        Action::Forward { port: 2 }
    );
    let (_, _, nat_port, _, ok) = decode(&udp);
    assert!(ok);
    let quoted = udp[14..].to_vec();
    let mut err = Vec::new();
    PacketBuilder::ethernet2(ROUTER, UPLINK_MAC)
        .ipv4(REMOTE, NODE, 60)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::Port,
        ))
        .write(&mut err, &quoted)
        .expect("build");
    assert_eq!(
        run(&snap, &mut ct, 2, &mut err),
        Action::Forward { port: 0 }
    );
    let (src, dst, _, _, ok) = decode(&err);
    assert_eq!((src, dst), (REMOTE, POD_A_IP));
    assert!(ok, "outer checksums");
    // The quoted datagram is the pod's own again.
    let inner = &err[14 + 20 + 8..];
    assert_eq!(&inner[12..16], &POD_A_IP);
    assert_eq!(u16::from_be_bytes([inner[20], inner[21]]), 5353);
    assert_ne!(nat_port, 5353);
    // An error about nothing tracked is not translated: to the node IP it is local.
    let mut stray = err.clone();
    stray[14 + 16..14 + 20].copy_from_slice(&NODE);
    stray[14 + 20 + 8 + 20..14 + 20 + 8 + 22].copy_from_slice(&1u16.to_be_bytes());
    assert!(matches!(
        run(&snap, &mut ct, 2, &mut stray),
        Action::Drop(_)
    ));
}

/// pod-a ingress: reflect everything; pod-a egress: deny everything; pod-b egress:
/// permit TCP port 80 (`permit_80`) or nothing.
fn reflect_snapshot(generation: u64, permit_80: bool) -> Snapshot {
    let mut snap = snapshot();
    let any = "any";
    let b_rules = if permit_80 {
        vec![rule(AclAction::Permit, Proto::TCP, any, Some(80))]
    } else {
        vec![rule(AclAction::Deny, Proto::TCP, any, Some(80))]
    };
    let tables = vec![
        table(
            0,
            "pod-a-reflect",
            vec![rule(AclAction::Reflect, Proto::Any, any, None)],
        ),
        table(
            1,
            "pod-a-egress",
            vec![rule(AclAction::Deny, Proto::Any, any, None)],
        ),
        table(2, "pod-b-egress", b_rules),
    ];
    let mut ingress = [None; MAX_PORTS];
    let mut egress = [None; MAX_PORTS];
    ingress[0] = Some(0);
    egress[0] = Some(1);
    egress[1] = Some(2);
    snap.acl = Arc::new(AclTables::new(tables, ingress, egress, None, generation));
    snap
}

#[test]
fn reflect_lets_replies_back_and_nothing_else() {
    let snap = reflect_snapshot(1, true);
    let mut ct = conntrack(0, 1);
    let deny = Action::Drop(DropReason::AclDeny);
    let mut syn = from_a(POD_B_IP, 40000, 80, 1, Tcp::Syn, &[]);
    assert_eq!(
        run(&snap, &mut ct, 0, &mut syn),
        Action::Forward { port: 1 }
    );
    assert_eq!(ct.table.len(), 1, "the reflect rule tracked it");
    // The reply passes pod-a's deny-all egress table.
    let mut synack = from_b(POD_A_IP, 80, 40000, 9, Tcp::SynAck(2), &[]);
    assert_eq!(
        run(&snap, &mut ct, 1, &mut synack),
        Action::Forward { port: 0 }
    );
    // An unsolicited packet in the reply's direction does not.
    let mut unsolicited = from_b(POD_A_IP, 80, 40001, 9, Tcp::Syn, &[]);
    assert_eq!(run(&snap, &mut ct, 1, &mut unsolicited), deny);
    // Neither does one to another port of the pod.
    let mut other = from_b(POD_A_IP, 81, 40000, 9, Tcp::Ack(2), &[]);
    assert_eq!(run(&snap, &mut ct, 1, &mut other), deny);

    // A plain permit is stateless: without reflect nothing is tracked.
    let mut plain = reflect_snapshot(1, true);
    let mut acl = (*plain.acl).clone();
    acl.tables[0] = table(
        0,
        "pod-a-permit",
        vec![rule(AclAction::Permit, Proto::Any, "any", None)],
    );
    acl.has_reflect = false;
    plain.acl = Arc::new(acl);
    let mut fresh = conntrack(0, 1);
    let mut syn = from_a(POD_B_IP, 40002, 80, 1, Tcp::Syn, &[]);
    assert_eq!(
        run(&plain, &mut fresh, 0, &mut syn),
        Action::Forward { port: 1 }
    );
    assert!(fresh.table.is_empty());
}

#[test]
fn an_acl_change_closes_connections_the_new_rules_deny() {
    let mut ct = conntrack(0, 1);
    let snap1 = reflect_snapshot(1, true);
    open_a_to_b(&snap1, &mut ct);
    // Generation 2 still permits: the next packet is re-checked and passes.
    let snap2 = reflect_snapshot(2, true);
    let mut ack = from_a(POD_B_IP, 40000, 80, 2, Tcp::Ack(10), &[]);
    let mut rec = Recorder::default();
    assert_eq!(
        pipeline::process_ct(&snap2, 0, &mut ack, Some(&mut ct), &mut rec),
        Action::Forward { port: 1 }
    );
    assert!(
        rec.stages
            .iter()
            .any(|(_, d)| d.contains("ACLs changed: checked again")),
        "{:?}",
        rec.stages
    );
    // Generation 3 denies port 80: the next packet is dropped and the connection closed,
    // so the reply direction is denied too.
    let snap3 = reflect_snapshot(3, false);
    let mut ack = from_a(POD_B_IP, 40000, 80, 2, Tcp::Ack(10), b"x");
    assert_eq!(
        run(&snap3, &mut ct, 0, &mut ack),
        Action::Drop(DropReason::AclDeny)
    );
    assert!(ct.table.is_empty(), "closed");
    let mut reply = from_b(POD_A_IP, 80, 40000, 10, Tcp::Ack(3), b"y");
    assert_eq!(
        run(&snap3, &mut ct, 1, &mut reply),
        Action::Drop(DropReason::AclDeny)
    );
    // With re-checks off the connection would have lived on.
    let mut lax = conntrack(0, 1);
    lax.recheck = false;
    let mut syn = from_a(POD_B_IP, 40000, 80, 1, Tcp::Syn, &[]);
    assert_eq!(
        run(&snap1, &mut lax, 0, &mut syn),
        Action::Forward { port: 1 }
    );
    let mut synack = from_b(POD_A_IP, 80, 40000, 9, Tcp::SynAck(2), &[]);
    assert_eq!(
        run(&snap1, &mut lax, 1, &mut synack),
        Action::Forward { port: 0 }
    );
    let mut ack = from_a(POD_B_IP, 40000, 80, 2, Tcp::Ack(10), &[]);
    assert_eq!(
        run(&snap3, &mut lax, 0, &mut ack),
        Action::Forward { port: 1 }
    );
}

/// After an ACL change the first packet of a connection to arrive may be a reply: the
/// connection's original tuple is checked against the changed tables then — the
/// ingress table of the port the reply leaves by, the egress table of the port it came
/// in by, the global table when that is the uplink. Denied: the reply is dropped and
/// the connection closed (a reply used to mark it checked without a check, so that
/// the original direction went on past the new rules). Permitted: it is marked
/// checked, and the original direction's next packet is not checked again.
#[test]
fn an_acl_change_is_checked_on_a_reply_too() {
    let snap1 = reflect_snapshot(1, true);
    // Generation 3 denies port 80 on pod-b's egress: the reply closes the connection.
    let mut ct = conntrack(0, 1);
    open_a_to_b(&snap1, &mut ct);
    let snap3 = reflect_snapshot(3, false);
    let mut reply = from_b(POD_A_IP, 80, 40000, 10, Tcp::Ack(2), b"y");
    let mut rec = Recorder::default();
    assert_eq!(
        pipeline::process_ct(&snap3, 1, &mut reply, Some(&mut ct), &mut rec),
        Action::Drop(DropReason::AclDeny)
    );
    assert!(ct.table.is_empty(), "closed");
    assert!(
        rec.stages
            .iter()
            .any(|(_, d)| d.contains("denied by the changed egress table pod-b-egress")),
        "{:?}",
        rec.stages
    );
    let mut ack = from_a(POD_B_IP, 40000, 80, 2, Tcp::Ack(10), b"x");
    assert_eq!(
        run(&snap3, &mut ct, 0, &mut ack),
        Action::Drop(DropReason::AclDeny)
    );
    // Several replies in one burst (a server streaming): every one is dropped, not
    // only the first.
    let mut ct = conntrack(0, 1);
    open_a_to_b(&snap1, &mut ct);
    let mut replies: Vec<Vec<u8>> = (0..4u32)
        .map(|k| from_b(POD_A_IP, 80, 40000, 10 + 100 * k, Tcp::Ack(2), &[b'y'; 100]))
        .collect();
    let actions = run_burst(&snap3, &mut ct, 1, &mut replies);
    assert_eq!(actions, [Action::Drop(DropReason::AclDeny); 4]);
    assert!(ct.table.is_empty(), "closed");
    // Generation 2 still permits: the reply passes and marks the connection checked.
    let mut ct = conntrack(0, 1);
    open_a_to_b(&snap1, &mut ct);
    let snap2 = reflect_snapshot(2, true);
    let mut reply = from_b(POD_A_IP, 80, 40000, 10, Tcp::Ack(2), b"y");
    assert_eq!(
        run(&snap2, &mut ct, 1, &mut reply),
        Action::Forward { port: 0 }
    );
    let (id, _) = ct
        .table
        .lookup(&first_key(&from_a(
            POD_B_IP,
            40000,
            80,
            2,
            Tcp::Ack(10),
            &[],
        )))
        .expect("tracked");
    assert_eq!(ct.table.get(id).expect("live").acl_generation(), 2);
    let mut ack = from_a(POD_B_IP, 40000, 80, 2, Tcp::Ack(11), &[]);
    let mut rec = Recorder::default();
    assert_eq!(
        pipeline::process_ct(&snap2, 0, &mut ack, Some(&mut ct), &mut rec),
        Action::Forward { port: 1 }
    );
    assert!(
        !rec.stages
            .iter()
            .any(|(_, d)| d.contains("ACLs changed: checked again")),
        "{:?}",
        rec.stages
    );

    // Masqueraded: a global table that now denies port 443 closes the connection on
    // the first reply from outside.
    let snat = snat_snapshot(vec![(61000, 61999)]);
    let mut ct = conntrack(0, 1);
    let mut syn = from_a(REMOTE, 40000, 443, 1000, Tcp::Syn, &[]);
    assert_eq!(
        run(&snat, &mut ct, 0, &mut syn),
        Action::Forward { port: 2 }
    );
    let (_, _, nat_port, _, _) = decode(&syn);
    let mut denying = snat.clone();
    let mut acl = (*denying.acl).clone();
    acl.tables = vec![table(
        0,
        "global",
        vec![rule(AclAction::Deny, Proto::TCP, "any", Some(443))],
    )];
    acl.global = Some(0);
    acl.any_egress = true;
    acl.generation = snat.acl.generation + 1;
    denying.acl = Arc::new(acl);
    let mut synack = from_remote(NODE, 443, nat_port, 5000, Tcp::SynAck(1001), &[]);
    assert_eq!(
        run(&denying, &mut ct, 2, &mut synack),
        Action::Drop(DropReason::AclDeny)
    );
    assert!(ct.table.is_empty(), "closed");
}

/// A SYN on a tuple whose connection is closing opens a new connection, and that SYN
/// goes through the ACLs like any first packet (here the changed rules deny it: it is
/// dropped and nothing stays tracked).
#[test]
fn a_syn_on_a_closing_connection_is_classified_again() {
    let snap = reflect_snapshot(1, true);
    let mut ct = conntrack(0, 1);
    open_a_to_b(&snap, &mut ct);
    let mut rst = from_a(POD_B_IP, 40000, 80, 2, Tcp::Rst(10), &[]);
    assert_eq!(
        run(&snap, &mut ct, 0, &mut rst),
        Action::Forward { port: 1 }
    );
    let key = first_key(&from_a(POD_B_IP, 40000, 80, 1, Tcp::Syn, &[]));
    let (id, _) = ct.table.lookup(&key).expect("still tracked while closing");
    assert_eq!(ct.table.get(id).expect("live").state().to_string(), "CLOSE");
    // Same rules: the new SYN is classified (a trace shows the ACL verdict) and opens a
    // new connection.
    let mut again = from_a(POD_B_IP, 40000, 80, 5000, Tcp::Syn, &[]);
    let mut rec = Recorder::default();
    assert_eq!(
        pipeline::process_ct(&snap, 0, &mut again, Some(&mut ct), &mut rec),
        Action::Forward { port: 1 }
    );
    let said = |what: &str| rec.stages.iter().any(|(_, d)| d.contains(what));
    assert!(said("a new SYN opens it again"), "{:?}", rec.stages);
    assert!(
        said("egress table pod-b-egress rule 0: permit"),
        "{:?}",
        rec.stages
    );
    let (id, _) = ct.table.lookup(&key).expect("tracked");
    assert_eq!(
        ct.table.get(id).expect("live").state().to_string(),
        "SYN_SENT"
    );
    // Reset again, and the rules changed to deny port 80: the next SYN is dropped and
    // nothing stays tracked.
    let mut rst = from_a(POD_B_IP, 40000, 80, 5001, Tcp::Rst(0), &[]);
    run(&snap, &mut ct, 0, &mut rst);
    let deny = reflect_snapshot(2, false);
    let mut again = from_a(POD_B_IP, 40000, 80, 9000, Tcp::Syn, &[]);
    assert_eq!(
        run(&deny, &mut ct, 0, &mut again),
        Action::Drop(DropReason::AclDeny)
    );
    assert!(ct.table.lookup(&key).is_none(), "nothing tracked");
}

#[test]
fn out_of_window_rst_is_invalid_and_in_window_rst_closes() {
    let snap = snat_snapshot(vec![(61000, 61999)]);
    let mut ct = conntrack(0, 1);
    let mut syn = from_a(REMOTE, 40000, 443, 1000, Tcp::Syn, &[]);
    run(&snap, &mut ct, 0, &mut syn);
    let (_, _, port, _, _) = decode(&syn);
    let mut synack = from_remote(NODE, 443, port, 5000, Tcp::SynAck(1001), &[]);
    assert_eq!(
        run(&snap, &mut ct, 2, &mut synack),
        Action::Forward { port: 0 }
    );
    let mut ack = from_a(REMOTE, 40000, 443, 1001, Tcp::Ack(5001), &[]);
    run(&snap, &mut ct, 0, &mut ack);
    let mut bad = from_remote(NODE, 443, port, 5001 + 3_000_000, Tcp::Rst(1001), &[]);
    assert_eq!(
        run(&snap, &mut ct, 2, &mut bad),
        Action::Drop(DropReason::CtInvalid)
    );
    assert_eq!(ct.table.len(), 1);
    let mut good = from_remote(NODE, 443, port, 5001, Tcp::Rst(1001), &[]);
    assert_eq!(
        run(&snap, &mut ct, 2, &mut good),
        Action::Forward { port: 0 }
    );
    let (id, _) = ct
        .table
        .lookup(&masq_key(port))
        .expect("still there, closing");
    assert_eq!(ct.table.get(id).unwrap().state().name(), "CLOSE");
}

#[test]
fn snat_ports_run_out_per_destination() {
    // One port: one connection per remote endpoint.
    let snap = snat_snapshot(vec![(61000, 61000)]);
    let mut ct = conntrack(0, 1);
    let mut first = from_a(REMOTE, 40000, 443, 1, Tcp::Syn, &[]);
    assert_eq!(
        run(&snap, &mut ct, 0, &mut first),
        Action::Forward { port: 2 }
    );
    let mut second = from_b(REMOTE, 40000, 443, 1, Tcp::Syn, &[]);
    assert_eq!(
        run(&snap, &mut ct, 1, &mut second),
        Action::Drop(DropReason::SnatPortsExhausted)
    );
    // Another destination may reuse the port (endpoint-dependent mapping).
    let mut other = from_b([9, 9, 9, 9], 40000, 443, 1, Tcp::Syn, &[]);
    assert_eq!(
        run(&snap, &mut ct, 1, &mut other),
        Action::Forward { port: 2 }
    );
    assert_eq!(decode(&other).2, 61000);
}

#[test]
fn packets_go_to_the_worker_that_owns_their_connection() {
    let snap = snat_snapshot(vec![(61000, 61999)]);
    let mut w = [conntrack(0, 2), conntrack(1, 2)];
    // Whichever worker receives the SYN, exactly one runs it; the other hands it over.
    let syn = from_a(REMOTE, 40000, 443, 1000, Tcp::Syn, &[]);
    let mut verdicts = Vec::new();
    for ct in w.iter_mut() {
        let mut f = syn.clone();
        verdicts.push((run(&snap, ct, 0, &mut f), f));
    }
    let owner = verdicts
        .iter()
        .position(|(a, _)| *a == Action::Forward { port: 2 })
        .expect("one worker forwards");
    assert_eq!(
        verdicts[1 - owner].0,
        Action::Handoff {
            worker: owner as u16
        }
    );
    let (_, _, port, _, _) = decode(&verdicts[owner].1);
    assert_eq!(
        usize::from(port) % 2,
        owner,
        "the SNAT port names the owner"
    );
    // The reply arrives on the other worker and is handed to the owner, which
    // translates it.
    let reply = from_remote(NODE, 443, port, 5000, Tcp::SynAck(1001), &[]);
    let mut f = reply.clone();
    assert_eq!(
        run(&snap, &mut w[1 - owner], 2, &mut f),
        Action::Handoff {
            worker: owner as u16
        }
    );
    let mut f = reply.clone();
    assert_eq!(
        run(&snap, &mut w[owner], 2, &mut f),
        Action::Forward { port: 0 }
    );
    // Pod-to-pod flows (no NAT) hash the same both ways.
    let ab = from_a(POD_B_IP, 1234, 80, 1, Tcp::Syn, &[]);
    let ba = from_b(POD_A_IP, 80, 1234, 1, Tcp::SynAck(2), &[]);
    let owner_of = |f: &[u8], port: u16| {
        let parsed = pipeline::parse(f, 0).expect("parse");
        let _ = port;
        pipeline::ct::owner(&parsed, f, &snap.snat, 2)
    };
    assert_eq!(owner_of(&ab, 0), owner_of(&ba, 1));

    // The SNAT range narrowed by a `vpc.sync` that no longer holds the port: the
    // connection keeps its mapping, and its replies still go to its owner.
    let narrowed = snat_snapshot(vec![(62000, 62999)]);
    // (The SYN-ACK again: a retransmission.)
    let (mut f, mut g) = (reply.clone(), reply.clone());
    assert_eq!(
        run(&narrowed, &mut w[1 - owner], 2, &mut f),
        Action::Handoff {
            worker: owner as u16
        }
    );
    assert_eq!(
        run(&narrowed, &mut w[owner], 2, &mut g),
        Action::Forward { port: 0 }
    );
    for port in 61000..61032u16 {
        let f = from_remote(NODE, 443, port, 5000, Tcp::Ack(1001), &[]);
        let parsed = pipeline::parse(&f, 2).expect("parse");
        assert_eq!(
            pipeline::ct::owner(&parsed, &f, &narrowed.snat, 2),
            port % 2,
            "port {port}"
        );
    }
}

/// Two workers' tables counting against node-wide limits: the node's total and a
/// network's connections stop at their limits whichever worker each connection lands
/// on, the refusals are `ct-table-full` (counted as table or zone full), established
/// traffic goes on, and a closed connection frees room on the other worker too.
#[test]
fn connection_limits_are_node_wide() {
    let snap = snat_snapshot(vec![(61000, 61999)]);
    let budget = ferrule_dataplane::conntrack::CtBudget::new(10, 6, 2);
    let mut w = [conntrack(0, 2), conntrack(1, 2)];
    for ct in &mut w {
        ct.table.set_budget(std::sync::Arc::clone(&budget));
        ct.no_handoff = true;
    }
    // Zone 0 (pods to the outside): six connections at most, over both workers.
    let mut opened = Vec::new();
    for i in 0..10u16 {
        let mut syn = from_a(REMOTE, 40000 + i, 443, 1, Tcp::Syn, &[]);
        match run(&snap, &mut w[usize::from(i % 2)], 0, &mut syn) {
            Action::Forward { port: 2 } => opened.push(i),
            a => assert_eq!(a, Action::Drop(DropReason::CtTableFull)),
        }
    }
    assert_eq!(opened.len(), 6, "{opened:?}");
    assert_eq!(w[0].table.len() + w[1].table.len(), 6);
    let zone_full: u64 = w.iter().map(|c| c.table.stats().zone_full).sum();
    assert_eq!(zone_full, 4);
    // Traffic of an open connection goes on (its SYN again).
    let i = opened[0];
    let mut ack = from_a(REMOTE, 40000 + i, 443, 1, Tcp::Syn, &[]);
    assert_eq!(
        run(&snap, &mut w[usize::from(i % 2)], 0, &mut ack),
        Action::Forward { port: 2 }
    );
    // Zone 1 (another network's UDP keys): the node's total of 10 stops it at 4.
    let mut other = 0;
    for i in 0..10u16 {
        let mut key = first_key(&from_a(REMOTE, 50000 + i, 443, 1, Tcp::Syn, &[]));
        key.network = 1;
        key.proto = 17;
        let ct = &mut w[usize::from(i % 2)];
        let h = ct.table.hash(&key);
        let l4 = ferrule_dataplane::conntrack::L4Info::NONE;
        if ct
            .table
            .insert_hashed(&key, h, &l4, 40, None, 0, ct.now)
            .is_ok()
        {
            other += 1;
        }
    }
    assert_eq!(other, 4);
    let table_full: u64 = w.iter().map(|c| c.table.stats().table_full).sum();
    assert_eq!(table_full, 6);
    // Closing one of worker 1's zone-0 connections lets worker 0 open one.
    let gone = *opened
        .iter()
        .find(|&&i| i % 2 == 1)
        .expect("one on worker 1");
    let (id, _) = w[1]
        .table
        .lookup(&first_key(&from_a(
            REMOTE,
            40000 + gone,
            443,
            1,
            Tcp::Syn,
            &[],
        )))
        .expect("tracked");
    w[1].table.remove(id);
    let mut syn = from_a(REMOTE, 45000, 443, 1, Tcp::Syn, &[]);
    assert_eq!(
        run(&snap, &mut w[0], 0, &mut syn),
        Action::Forward { port: 2 }
    );
}

#[test]
fn spoofed_sources_are_neither_tracked_nor_masqueraded() {
    // Issue 18: a pod sending from 32 addresses 198.51.x.2 had all 32 masqueraded.
    let snap = snat_snapshot(vec![(61000, 61999)]);
    let mut ct = conntrack(0, 1);
    let mut frames: Vec<Vec<u8>> = (0..32u8)
        .map(|x| {
            tcp(
                (POD_A, GW_MAC_A),
                [198, 51, x, 2],
                REMOTE,
                40000,
                443,
                1000,
                Tcp::Syn,
                &[],
            )
        })
        .collect();
    frames.push(from_a(REMOTE, 40000, 443, 1000, Tcp::Syn, &[]));
    let actions = run_burst(&snap, &mut ct, 0, &mut frames);
    assert!(
        actions[..32]
            .iter()
            .all(|a| *a == Action::Drop(DropReason::SpoofedSrcIp)),
        "{actions:?}"
    );
    assert_eq!(actions[32], Action::Forward { port: 2 });
    assert_eq!(ct.table.len(), 1, "only the pod's own connection");
    let (src, _, _, _, ok) = decode(&frames[32]);
    assert_eq!((src, ok), (NODE, true), "the pod's own SYN is masqueraded");
    for f in &frames[..32] {
        assert_eq!(&f[26..28], &[198, 51], "a dropped frame is left as it came");
    }
}

#[test]
fn trace_shows_the_conntrack_and_nat_stages() {
    let snap = snat_snapshot(vec![(61000, 61999)]);
    let mut ct = conntrack(0, 1);
    let mut syn = from_a(REMOTE, 40000, 443, 1000, Tcp::Syn, &[]);
    let mut rec = Recorder::default();
    let action = pipeline::process_ct(&snap, 0, &mut syn, Some(&mut ct), &mut rec);
    assert_eq!(action, Action::Forward { port: 2 });
    let names: Vec<&str> = rec.stages.iter().map(|(s, _)| s.name()).collect();
    assert!(
        names.starts_with(&["parse", "l2", "port-security", "ct"]),
        "{names:?}"
    );
    let nat = rec
        .stages
        .iter()
        .find(|(s, _)| s.name() == "nat")
        .expect("nat stage");
    assert!(
        nat.1
            .starts_with("source 10.1.0.2:40000 masqueraded to 192.0.2.10:"),
        "{}",
        nat.1
    );
    assert!(rec
        .stages
        .iter()
        .any(|(s, d)| s.name() == "ct" && d.starts_with("new connection")));
}

#[test]
fn too_big_for_the_uplink_is_refused_before_masquerading() {
    let mut snap = snat_snapshot(vec![(61000, 61999)]);
    snap.ports[2].mtu = 1400;
    let mut ct = conntrack(0, 1);
    let mut big = from_a(REMOTE, 40000, 443, 1, Tcp::Ack(1), &[0u8; 1400]);
    let before = big.clone();
    let action = run(&snap, &mut ct, 0, &mut big);
    assert!(
        matches!(
            action,
            Action::IcmpError {
                reason: DropReason::MtuExceeded,
                ..
            }
        ),
        "{action:?}"
    );
    // The ICMP error is built from the frame: it must still be the pod's packet.
    assert_eq!(big, before);
    assert!(ct.table.is_empty());
}

/// A burst of first packets from a pod: each connection gets its own SNAT port (the
/// burst's own connections taken into account), a second SYN of a connection in the
/// same burst joins the connection the first opened (same port, counted in it), and
/// once the ports run out the rest are dropped.
#[test]
fn a_burst_of_new_connections_gets_distinct_ports() {
    // Four ports for six connections: the allocator's first pick often clashes with a
    // connection inserted earlier in the burst.
    let snap = snat_snapshot(vec![(61000, 61003)]);
    let mut ct = conntrack(0, 1);
    let mut frames: Vec<Vec<u8>> = (0..6u16)
        .map(|i| from_a(REMOTE, 40000 + i, 443, 1, Tcp::Syn, &[]))
        .collect();
    frames.insert(2, from_a(REMOTE, 40000, 443, 1, Tcp::Syn, &[]));
    let actions = run_burst(&snap, &mut ct, 0, &mut frames);
    let forwarded: Vec<usize> = (0..frames.len())
        .filter(|&i| actions[i] == Action::Forward { port: 2 })
        .collect();
    assert_eq!(forwarded, [0, 1, 2, 3, 4], "{actions:?}");
    assert_eq!(decode(&frames[2]), decode(&frames[0]), "the same mapping");
    assert_eq!(actions[5], Action::Drop(DropReason::SnatPortsExhausted));
    assert_eq!(actions[6], Action::Drop(DropReason::SnatPortsExhausted));
    let mut ports: Vec<u16> = [0, 1, 3, 4]
        .iter()
        .map(|&i| {
            let (src, dst, sport, _, ok) = decode(&frames[i]);
            assert_eq!((src, dst, ok), (NODE, REMOTE, true));
            sport
        })
        .collect();
    ports.sort_unstable();
    assert_eq!(ports, [61000, 61001, 61002, 61003]);
    assert_eq!(ct.table.len(), 4);
    assert_eq!(ct.table.stats().clashes, 1);
    let fresh = from_a(REMOTE, 40001, 443, 1, Tcp::Syn, &[]);
    let (id, dir) = ct.table.lookup(&first_key(&fresh)).expect("tracked");
    assert_eq!(dir, Dir::Original);
    assert_eq!(ct.table.get(id).expect("live").packets(Dir::Original), 1);
    let mut syn = from_a(REMOTE, 40000, 443, 1, Tcp::Syn, &[]);
    let (id, _) = ct.table.lookup(&first_key(&syn)).expect("tracked");
    assert_eq!(ct.table.get(id).expect("live").packets(Dir::Original), 2);
    // And a third SYN, in a burst of its own, is that connection's too.
    assert_eq!(
        run(&snap, &mut ct, 0, &mut syn),
        Action::Forward { port: 2 }
    );
    assert_eq!(decode(&syn), decode(&frames[0]));
}

/// The original-direction key of a frame from a pod, as conntrack keys it.
fn first_key(frame: &[u8]) -> ferrule_dataplane::flow::FlowKey {
    pipeline::parse(frame, 0).expect("parses").key
}

/// The resolver race: two UDP queries from one socket (A and AAAA) in one burst both
/// go out, masqueraded to the same port, and both answers come back; with a reflect
/// rule and no SNAT, a SYN and its retransmission in one burst both pass and the
/// answer is let back. Nothing is counted as a full table or invalid.
#[test]
fn two_first_packets_of_one_connection_in_a_burst_both_pass() {
    let query = |id: u8| {
        let mut f = Vec::new();
        PacketBuilder::ethernet2(POD_A, GW_MAC_A)
            .ipv4(POD_A_IP, REMOTE, 64)
            .udp(33333, 53)
            .write(&mut f, &[id; 40])
            .expect("build");
        f
    };
    let snap = snat_snapshot(vec![(61000, 61999)]);
    let mut ct = conntrack(0, 1);
    let mut frames = vec![query(1), query(28)];
    let actions = run_burst(&snap, &mut ct, 0, &mut frames);
    assert_eq!(actions, [Action::Forward { port: 2 }; 2]);
    let (src, dst, nat_port, _, ok) = decode(&frames[0]);
    assert_eq!((src, dst, ok), (NODE, REMOTE, true));
    assert_eq!(decode(&frames[1]), (NODE, REMOTE, nat_port, 53, true));
    assert_eq!(ct.table.len(), 1);
    let (id, _) = ct.table.lookup(&first_key(&query(1))).expect("tracked");
    assert_eq!(ct.table.get(id).expect("live").packets(Dir::Original), 2);
    for answer in [1u8, 28] {
        let mut f = Vec::new();
        PacketBuilder::ethernet2(ROUTER, UPLINK_MAC)
            .ipv4(REMOTE, NODE, 60)
            .udp(53, nat_port)
            .write(&mut f, &[answer; 60])
            .expect("build");
        assert_eq!(run(&snap, &mut ct, 2, &mut f), Action::Forward { port: 0 });
        assert_eq!(decode(&f), (REMOTE, POD_A_IP, 53, 33333, true));
    }
    let drops = ct.table.stats();
    assert_eq!((drops.table_full, drops.invalid), (0, 0));

    // Reflect, no SNAT: pod-a to pod-b, a SYN and its retransmission in one burst
    // both pass, and the answer comes back through pod-a's deny-all egress table.
    let snap = reflect_snapshot(1, true);
    let mut ct = conntrack(0, 1);
    let syn = || from_a(POD_B_IP, 40000, 80, 1, Tcp::Syn, &[]);
    let mut frames = vec![syn(), syn()];
    let actions = run_burst(&snap, &mut ct, 0, &mut frames);
    assert_eq!(actions, [Action::Forward { port: 1 }; 2]);
    assert_eq!(ct.table.len(), 1);
    let mut answer = from_b(POD_A_IP, 80, 40000, 9, Tcp::SynAck(2), &[]);
    assert_eq!(
        run(&snap, &mut ct, 1, &mut answer),
        Action::Forward { port: 0 }
    );
}

/// Established traffic both ways in bursts of many sizes — so that the lookup's
/// prefetch groups end part-way through a burst, and packets dropped before the lookup
/// (truncated frames) leave gaps in it — gets the same actions, rewrites and counters
/// as the same packets run one at a time through an identical table.
#[test]
fn established_bursts_equal_packet_by_packet() {
    let snap = snat_snapshot(vec![(61000, 61999)]);
    let (mut in_bursts, mut one_by_one) = (conntrack(0, 1), conntrack(0, 1));
    const CONNS: u16 = 150;
    let mut nat_ports = Vec::new();
    for c in 0..CONNS {
        let mut ports = [0u16; 2];
        for (k, ct) in [&mut in_bursts, &mut one_by_one].into_iter().enumerate() {
            let mut syn = from_a(REMOTE, 40000 + c, 443, 1000, Tcp::Syn, &[]);
            assert_eq!(run(&snap, ct, 0, &mut syn), Action::Forward { port: 2 });
            ports[k] = decode(&syn).2;
            let mut synack = from_remote(NODE, 443, ports[k], 5000, Tcp::SynAck(1001), &[]);
            assert_eq!(run(&snap, ct, 2, &mut synack), Action::Forward { port: 0 });
        }
        assert_eq!(ports[0], ports[1], "identical tables pick the same port");
        nat_ports.push(ports[0]);
    }
    let mut seed = 0x5eed_u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut forwarded, mut dropped) = (0, 0);
    for (b, &size) in [
        1usize, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 64, 100, 256,
    ]
    .iter()
    .cycle()
    .take(48)
    .enumerate()
    {
        let from_pod = b % 2 == 0;
        let mut frames: Vec<Vec<u8>> = (0..size)
            .map(|_| {
                let r = rnd();
                let c = (r % u64::from(CONNS)) as usize;
                let payload = vec![0x5a; (r >> 16) as usize % 200];
                let f = if from_pod {
                    from_a(
                        REMOTE,
                        40000 + c as u16,
                        443,
                        1001,
                        Tcp::Ack(5001),
                        &payload,
                    )
                } else {
                    from_remote(NODE, 443, nat_ports[c], 5001, Tcp::Ack(1001), &payload)
                };
                if r % 9 == 0 {
                    f[..30].to_vec()
                } else {
                    f
                }
            })
            .collect();
        let port = if from_pod { 0 } else { 2 };
        let mut singles = frames.clone();
        let want: Vec<Action> = singles
            .iter_mut()
            .map(|f| run(&snap, &mut one_by_one, port, f))
            .collect();
        let mut actions = vec![Action::Drop(DropReason::Malformed); size];
        let mut scratch = pipeline::Scratch::default();
        pipeline::process_burst(
            &snap,
            port,
            frames.as_mut_slice(),
            &mut actions,
            &mut scratch,
            Some(&mut in_bursts),
            &mut NoTrace,
        );
        assert_eq!(actions, want, "burst {b} of {size}");
        assert_eq!(frames, singles, "burst {b} of {size}: rewrites");
        for a in &actions {
            match a {
                Action::Forward { .. } => forwarded += 1,
                Action::Drop(DropReason::Malformed) => dropped += 1,
                other => panic!("burst {b}: {other:?}"),
            }
        }
    }
    // 1,989 packets, one in nine truncated.
    assert!(
        forwarded > 1600 && dropped > 150,
        "{forwarded} forwarded, {dropped} dropped"
    );
    for (c, &port) in nat_ports.iter().enumerate() {
        let (a, _) = in_bursts.table.lookup(&masq_key(port)).expect("tracked");
        let (b, _) = one_by_one.table.lookup(&masq_key(port)).expect("tracked");
        let (a, b) = (
            in_bursts.table.get(a).expect("live"),
            one_by_one.table.get(b).expect("live"),
        );
        for dir in [Dir::Original, Dir::Reply] {
            assert_eq!(a.packets(dir), b.packets(dir), "connection {c}");
            assert_eq!(a.bytes(dir), b.bytes(dir), "connection {c}");
        }
        assert_eq!(a.state(), b.state(), "connection {c}");
        assert_eq!(a.expires_at(), b.expires_at(), "connection {c}");
    }
}
