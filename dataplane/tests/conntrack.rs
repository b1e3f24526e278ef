//! Connection tracking core: TCP/UDP/ICMP state machines, SNAT reply tuples, related
//! lookups of ICMP errors, timeouts on an injected clock, limits, and a property test
//! against a reference model.

use ferrule_dataplane::conntrack::{
    tcp_flags as tf, ConnId, ConnState, ConnTable, CtConfig, Dir, InsertError, L4Info, Millis, Nat,
    TcpState, Timeouts, TrackVerdict, BYTES_PER_CONNECTION, NAT_ZONE,
};
use ferrule_dataplane::flow::FlowKey;
use proptest::prelude::*;
use std::collections::HashMap;
use std::net::Ipv4Addr;

const POD: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);
const SERVER: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);
const NODE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const ZONE: u16 = 3;
const SEC: Millis = 1000;

fn table() -> ConnTable {
    ConnTable::with_seed(
        &CtConfig {
            max_entries: 1024,
            ..CtConfig::default()
        },
        42,
    )
}

fn tcp_key() -> FlowKey {
    FlowKey::v4(ZONE, 6, POD, SERVER, 40000, 443)
}

fn seg(flags: u8, seq: u32, ack: u32, len: u32) -> L4Info {
    L4Info {
        tcp_flags: flags,
        seq,
        ack,
        window: 1000,
        wscale: None,
        payload_len: len,
    }
}

fn state(t: &ConnTable, id: ConnId) -> ConnState {
    t.get(id).expect("live").state()
}

fn expires(t: &ConnTable, id: ConnId) -> Millis {
    t.get(id).expect("live").expires_at()
}

const CISN: u32 = 1000;
const SISN: u32 = 500_000;

/// A TCP connection through the handshake at t = 10 s: client at CISN+1, server at
/// SISN+1, windows of 1000 bytes.
fn established(t: &mut ConnTable, nat: Option<Nat>) -> ConnId {
    let now = 10 * SEC;
    let id = t
        .insert(&tcp_key(), &seg(tf::SYN, CISN, 0, 0), 60, nat, 1, now)
        .expect("insert");
    assert_eq!(state(t, id), ConnState::Tcp(TcpState::SynSent));
    assert_eq!(expires(t, id), now + 120 * SEC);
    let sa = seg(tf::SYN | tf::ACK, SISN, CISN + 1, 0);
    assert_eq!(t.track(id, Dir::Reply, &sa, 60, now), TrackVerdict::Accept);
    assert_eq!(state(t, id), ConnState::Tcp(TcpState::SynRecv));
    assert_eq!(expires(t, id), now + 60 * SEC);
    let a = seg(tf::ACK, CISN + 1, SISN + 1, 0);
    assert_eq!(
        t.track(id, Dir::Original, &a, 54, now),
        TrackVerdict::Accept
    );
    assert_eq!(state(t, id), ConnState::Tcp(TcpState::Established));
    assert_eq!(expires(t, id), established_deadline(now));
    id
}

/// The deadline of an ESTABLISHED connection refreshed at `now`: 5 days on, in whole
/// seconds rounded up to the end of a 4,096-second cell (the grid of timeouts of
/// 128 s and more: under 1/64 of the timeout late, so that a busy connection does not
/// move in its aging list every second).
fn established_deadline(now: Millis) -> Millis {
    ((now.div_ceil(SEC) + 432_000) | 4095) * SEC
}

#[test]
fn tcp_handshake_data_and_counters() {
    let mut t = table();
    let id = established(&mut t, None);
    assert_eq!(t.lookup(&tcp_key()), Some((id, Dir::Original)));
    assert_eq!(t.lookup(&tcp_key().reversed()), Some((id, Dir::Reply)));
    let now = 20 * SEC;
    let d = seg(tf::ACK | tf::PSH, CISN + 1, SISN + 1, 500);
    assert_eq!(
        t.track(id, Dir::Original, &d, 554, now),
        TrackVerdict::Accept
    );
    let d = seg(tf::ACK | tf::PSH, SISN + 1, CISN + 501, 900);
    assert_eq!(t.track(id, Dir::Reply, &d, 954, now), TrackVerdict::Accept);
    let v = t.get(id).expect("live");
    assert_eq!(v.packets(Dir::Original), 3);
    assert_eq!(v.packets(Dir::Reply), 2);
    assert_eq!(v.bytes(Dir::Original), 60 + 54 + 554);
    assert_eq!(v.bytes(Dir::Reply), 60 + 954);
    assert!(v.replied());
    assert_eq!(v.zone(), ZONE);
    assert_eq!(v.expires_at(), established_deadline(now));
    let w = v.tcp_window(Dir::Original).expect("tcp");
    assert_eq!(w.end, CISN + 501);
    assert_eq!(v.tcp_window(Dir::Reply).expect("tcp").end, SISN + 901);
    assert_eq!(t.stats().inserts, 1);
    assert_eq!(t.stats().invalid, 0);
}

#[test]
fn tcp_client_close_reaches_time_wait() {
    let mut t = table();
    let id = established(&mut t, None);
    let now = 30 * SEC;
    let steps = [
        (
            Dir::Original,
            seg(tf::FIN | tf::ACK, CISN + 1, SISN + 1, 0),
            TcpState::FinWait,
            120,
        ),
        (
            Dir::Reply,
            seg(tf::ACK, SISN + 1, CISN + 2, 0),
            TcpState::CloseWait,
            60,
        ),
        (
            Dir::Reply,
            seg(tf::FIN | tf::ACK, SISN + 1, CISN + 2, 0),
            TcpState::LastAck,
            30,
        ),
        (
            Dir::Original,
            seg(tf::ACK, CISN + 2, SISN + 2, 0),
            TcpState::TimeWait,
            120,
        ),
    ];
    for (dir, l4, want, timeout) in steps {
        assert_eq!(
            t.track(id, dir, &l4, 54, now),
            TrackVerdict::Accept,
            "{want:?}"
        );
        assert_eq!(state(&t, id), ConnState::Tcp(want));
        assert_eq!(expires(&t, id), now + timeout * SEC);
    }
    assert_eq!(t.expire(now + 120 * SEC - 1, 100), 0);
    assert_eq!(t.expire(now + 120 * SEC, 100), 1);
    assert!(t.get(id).is_none());
    assert_eq!(t.lookup(&tcp_key()), None);
}

#[test]
fn tcp_server_close_and_simultaneous_fins() {
    let mut t = table();
    let id = established(&mut t, None);
    let now = 30 * SEC;
    let steps = [
        (
            Dir::Reply,
            seg(tf::FIN | tf::ACK, SISN + 1, CISN + 1, 0),
            TcpState::FinWait,
        ),
        (
            Dir::Original,
            seg(tf::ACK, CISN + 1, SISN + 2, 0),
            TcpState::CloseWait,
        ),
        (
            Dir::Original,
            seg(tf::FIN | tf::ACK, CISN + 1, SISN + 2, 0),
            TcpState::LastAck,
        ),
        (
            Dir::Reply,
            seg(tf::ACK, SISN + 2, CISN + 2, 0),
            TcpState::TimeWait,
        ),
    ];
    for (dir, l4, want) in steps {
        assert_eq!(
            t.track(id, dir, &l4, 54, now),
            TrackVerdict::Accept,
            "{want:?}"
        );
        assert_eq!(state(&t, id), ConnState::Tcp(want));
    }
    // Both FINs cross: FIN_WAIT, then LAST_ACK, then the last ACK.
    let mut t = table();
    let id = established(&mut t, None);
    let fin_c = seg(tf::FIN | tf::ACK, CISN + 1, SISN + 1, 0);
    let fin_s = seg(tf::FIN | tf::ACK, SISN + 1, CISN + 1, 0);
    assert_eq!(
        t.track(id, Dir::Original, &fin_c, 54, now),
        TrackVerdict::Accept
    );
    assert_eq!(
        t.track(id, Dir::Reply, &fin_s, 54, now),
        TrackVerdict::Accept
    );
    assert_eq!(state(&t, id), ConnState::Tcp(TcpState::LastAck));
    let ack = seg(tf::ACK, CISN + 2, SISN + 2, 0);
    assert_eq!(
        t.track(id, Dir::Original, &ack, 54, now),
        TrackVerdict::Accept
    );
    assert_eq!(state(&t, id), ConnState::Tcp(TcpState::TimeWait));
}

#[test]
fn tcp_rst_in_window_closes() {
    for (dir, seq) in [
        (Dir::Reply, SISN + 1),
        (Dir::Original, CISN + 1),
        (Dir::Reply, SISN + 600),
    ] {
        let mut t = table();
        let id = established(&mut t, None);
        let now = 40 * SEC;
        let rst = seg(tf::RST, seq, 0, 0);
        assert_eq!(t.track(id, dir, &rst, 54, now), TrackVerdict::Accept);
        assert_eq!(state(&t, id), ConnState::Tcp(TcpState::Close));
        assert_eq!(expires(&t, id), now + 10 * SEC);
        assert_eq!(t.expire(now + 10 * SEC, 8), 1);
    }
}

#[test]
fn tcp_rst_out_of_window_is_invalid() {
    let mut t = table();
    let id = established(&mut t, None);
    let before = expires(&t, id);
    let now = 40 * SEC;
    // Beyond the receiver's window, far below it, and with a bad ACK.
    let bad = [
        seg(tf::RST, SISN + 1 + 100_000, 0, 0),
        seg(tf::RST, SISN.wrapping_sub(3_000_000), 0, 0),
        seg(tf::RST, CISN + 1 + 5_000_000, 0, 0),
        seg(tf::RST | tf::ACK, SISN + 1, CISN + 1 + 1_000_000, 0),
    ];
    for (n, rst) in bad.iter().enumerate() {
        let dir = if n == 2 { Dir::Original } else { Dir::Reply };
        assert_eq!(
            t.track(id, dir, rst, 54, now),
            TrackVerdict::Invalid,
            "{rst:?}"
        );
        assert_eq!(state(&t, id), ConnState::Tcp(TcpState::Established));
        assert_eq!(expires(&t, id), before);
    }
    assert_eq!(t.stats().invalid, 4);
    assert_eq!(t.get(id).expect("live").packets(Dir::Reply), 1);
}

#[test]
fn tcp_rst_refusing_a_syn() {
    let mut t = table();
    let id = t
        .insert(&tcp_key(), &seg(tf::SYN, CISN, 0, 0), 60, None, 0, 0)
        .expect("insert");
    // A blind RST that does not acknowledge the SYN is refused…
    let blind = seg(tf::RST | tf::ACK, 0, CISN + 77_777, 0);
    assert_eq!(
        t.track(id, Dir::Reply, &blind, 54, 0),
        TrackVerdict::Invalid
    );
    assert_eq!(state(&t, id), ConnState::Tcp(TcpState::SynSent));
    // …the port-unreachable answer (RST/ACK, seq 0, acking the SYN) closes it.
    let refuse = seg(tf::RST | tf::ACK, 0, CISN + 1, 0);
    assert_eq!(
        t.track(id, Dir::Reply, &refuse, 54, 0),
        TrackVerdict::Accept
    );
    assert_eq!(state(&t, id), ConnState::Tcp(TcpState::Close));
}

#[test]
fn tcp_new_syn_on_closing_entry_reopens() {
    let mut t = table();
    let id = established(&mut t, None);
    let now = 50 * SEC;
    for (dir, l4) in [
        (Dir::Original, seg(tf::FIN | tf::ACK, CISN + 1, SISN + 1, 0)),
        (Dir::Reply, seg(tf::FIN | tf::ACK, SISN + 1, CISN + 2, 0)),
        (Dir::Original, seg(tf::ACK, CISN + 2, SISN + 2, 0)),
    ] {
        assert_eq!(t.track(id, dir, &l4, 54, now), TrackVerdict::Accept);
    }
    assert_eq!(state(&t, id), ConnState::Tcp(TcpState::TimeWait));
    let syn = seg(tf::SYN, CISN + 100_000, 0, 0);
    assert_eq!(
        t.track(id, Dir::Original, &syn, 60, now),
        TrackVerdict::Reopen
    );
    assert_eq!(
        state(&t, id),
        ConnState::Tcp(TcpState::TimeWait),
        "unchanged"
    );
    // The caller removes the entry and inserts the SYN as new.
    t.remove(id);
    let id2 = t
        .insert(&tcp_key(), &syn, 60, None, 0, now)
        .expect("reinsert");
    assert_eq!(state(&t, id2), ConnState::Tcp(TcpState::SynSent));

    // CLOSE (after an RST): an original SYN reopens, a reply SYN is invalid.
    let mut t = table();
    let id = established(&mut t, None);
    assert_eq!(
        t.track(id, Dir::Reply, &seg(tf::RST, SISN + 1, 0, 0), 54, now),
        TrackVerdict::Accept
    );
    assert_eq!(
        t.track(id, Dir::Reply, &seg(tf::SYN, 9, 0, 0), 60, now),
        TrackVerdict::Invalid
    );
    assert_eq!(
        t.track(id, Dir::Original, &syn, 60, now),
        TrackVerdict::Reopen
    );
}

#[test]
fn tcp_simultaneous_open() {
    let mut t = table();
    let id = t
        .insert(&tcp_key(), &seg(tf::SYN, CISN, 0, 0), 60, None, 0, 0)
        .expect("insert");
    let steps = [
        (Dir::Reply, seg(tf::SYN, SISN, 0, 0), TcpState::SynSent2),
        (
            Dir::Original,
            seg(tf::SYN | tf::ACK, CISN, SISN + 1, 0),
            TcpState::SynRecv,
        ),
        (
            Dir::Reply,
            seg(tf::SYN | tf::ACK, SISN, CISN + 1, 0),
            TcpState::SynRecv,
        ),
        (
            Dir::Original,
            seg(tf::ACK, CISN + 1, SISN + 1, 0),
            TcpState::Established,
        ),
    ];
    for (dir, l4, want) in steps {
        assert_eq!(
            t.track(id, dir, &l4, 60, SEC),
            TrackVerdict::Accept,
            "{want:?}"
        );
        assert_eq!(state(&t, id), ConnState::Tcp(want));
    }
    assert_eq!(ConnState::Tcp(TcpState::SynSent2).name(), "SYN_SENT2");
}

#[test]
fn tcp_bad_transitions_and_first_packets() {
    let mut t = table();
    let id = t
        .insert(&tcp_key(), &seg(tf::SYN, CISN, 0, 0), 60, None, 0, 0)
        .expect("insert");
    // An original-direction ACK before any SYN-ACK, a FIN without ACK, no flags.
    for l4 in [
        seg(tf::ACK, CISN + 1, 5, 0),
        seg(tf::FIN, CISN + 1, 0, 0),
        seg(0, CISN + 1, 0, 0),
        seg(tf::SYN | tf::FIN, CISN, 0, 0),
    ] {
        assert_eq!(
            t.track(id, Dir::Original, &l4, 60, 0),
            TrackVerdict::Invalid
        );
    }
    assert_eq!(state(&t, id), ConnState::Tcp(TcpState::SynSent));
    // A reply ACK in SYN_SENT is ignored (accepted, no state change).
    let ack = seg(tf::ACK, SISN, CISN + 1, 0);
    assert_eq!(t.track(id, Dir::Reply, &ack, 60, 0), TrackVerdict::Accept);
    assert_eq!(state(&t, id), ConnState::Tcp(TcpState::SynSent));

    let other = FlowKey::v4(ZONE, 6, POD, SERVER, 40001, 443);
    for flags in [
        tf::SYN | tf::ACK,
        tf::FIN | tf::ACK,
        tf::RST,
        0,
        tf::SYN | tf::RST,
    ] {
        assert_eq!(
            t.insert(&other, &seg(flags, 1, 1, 0), 60, None, 0, 0),
            Err(InsertError::Invalid)
        );
    }
    assert_eq!(t.len(), 1);
    // A plain ACK picks a connection up mid-stream, ESTABLISHED, with liberal windows.
    let id = t
        .insert(&other, &seg(tf::ACK, 7_000, 9_000, 100), 154, None, 0, 0)
        .expect("pickup");
    assert_eq!(state(&t, id), ConnState::Tcp(TcpState::Established));
    let rst = seg(tf::RST, 3_000_000_000, 0, 0);
    assert_eq!(t.track(id, Dir::Reply, &rst, 54, 0), TrackVerdict::Accept);
}

#[test]
fn tcp_window_scaling_from_syn_options() {
    let mut t = table();
    let mut syn = seg(tf::SYN, CISN, 0, 0);
    syn.wscale = Some(7);
    let id = t.insert(&tcp_key(), &syn, 60, None, 0, 0).expect("insert");
    let mut sa = seg(tf::SYN | tf::ACK, SISN, CISN + 1, 0);
    sa.wscale = Some(9);
    assert_eq!(t.track(id, Dir::Reply, &sa, 60, 0), TrackVerdict::Accept);
    let ack = seg(tf::ACK, CISN + 1, SISN + 1, 0);
    assert_eq!(
        t.track(id, Dir::Original, &ack, 54, 0),
        TrackVerdict::Accept
    );
    let v = t.get(id).expect("live");
    assert_eq!(v.tcp_window(Dir::Original).expect("tcp").scale, Some(7));
    assert_eq!(v.tcp_window(Dir::Reply).expect("tcp").scale, Some(9));
    // The client's window is 1000 << 7: an RST from the server 100 kB ahead of what
    // the client acknowledged is inside it.
    let rst = seg(tf::RST, SISN + 1 + 100_000, 0, 0);
    assert_eq!(t.track(id, Dir::Reply, &rst, 54, 0), TrackVerdict::Accept);

    // Only one side offered the option: no scaling either way.
    let mut t = table();
    let id = t.insert(&tcp_key(), &syn, 60, None, 0, 0).expect("insert");
    let sa = seg(tf::SYN | tf::ACK, SISN, CISN + 1, 0);
    assert_eq!(t.track(id, Dir::Reply, &sa, 60, 0), TrackVerdict::Accept);
    assert_eq!(
        t.track(id, Dir::Original, &ack, 54, 0),
        TrackVerdict::Accept
    );
    let rst = seg(tf::RST, SISN + 1 + 100_000, 0, 0);
    assert_eq!(t.track(id, Dir::Reply, &rst, 54, 0), TrackVerdict::Invalid);
}

#[test]
fn udp_unreplied_then_assured() {
    let mut t = table();
    let key = FlowKey::v4(ZONE, 17, POD, SERVER, 5353, 53);
    let id = t
        .insert(&key, &L4Info::NONE, 80, None, 0, 0)
        .expect("insert");
    assert_eq!(state(&t, id), ConnState::UdpUnreplied);
    assert_eq!(expires(&t, id), 30 * SEC);
    assert_eq!(
        t.track(id, Dir::Original, &L4Info::NONE, 80, 5 * SEC),
        TrackVerdict::Accept
    );
    assert_eq!(state(&t, id), ConnState::UdpUnreplied);
    assert_eq!(expires(&t, id), 35 * SEC);
    assert!(!t.get(id).expect("live").replied());
    assert_eq!(t.lookup(&key.reversed()), Some((id, Dir::Reply)));
    assert_eq!(
        t.track(id, Dir::Reply, &L4Info::NONE, 120, 6 * SEC),
        TrackVerdict::Accept
    );
    assert_eq!(state(&t, id), ConnState::UdpAssured);
    assert_eq!(expires(&t, id), 126 * SEC);
    assert!(t.get(id).expect("live").replied());
    assert_eq!(
        t.track(id, Dir::Original, &L4Info::NONE, 80, 7 * SEC),
        TrackVerdict::Accept
    );
    assert_eq!(state(&t, id), ConnState::UdpAssured);
    assert_eq!(state(&t, id).name(), "ASSURED");
    assert_eq!(expires(&t, id), 127 * SEC);
}

#[test]
fn icmp_echo_by_identifier() {
    let mut t = table();
    let req = FlowKey::v4(ZONE, 1, POD, SERVER, 77, 77);
    let id = t
        .insert(&req, &L4Info::NONE, 98, None, 0, 0)
        .expect("insert");
    assert_eq!(state(&t, id), ConnState::IcmpEcho);
    assert_eq!(expires(&t, id), 30 * SEC);
    let reply = FlowKey::v4(ZONE, 1, SERVER, POD, 77, 77);
    assert_eq!(t.lookup(&reply), Some((id, Dir::Reply)));
    assert_eq!(t.lookup(&FlowKey::v4(ZONE, 1, SERVER, POD, 78, 78)), None);
    assert_eq!(
        t.track(id, Dir::Reply, &L4Info::NONE, 98, 3 * SEC),
        TrackVerdict::Accept
    );
    assert!(t.get(id).expect("live").replied());
    assert_eq!(expires(&t, id), 33 * SEC);
    // A different identifier is a different connection.
    let id2 = t
        .insert(
            &FlowKey::v4(ZONE, 1, POD, SERVER, 78, 78),
            &L4Info::NONE,
            98,
            None,
            0,
            0,
        )
        .expect("insert");
    assert_ne!(id, id2);
    // IPv6 echo.
    let a: std::net::Ipv6Addr = "fd00::5".parse().expect("addr");
    let b: std::net::Ipv6Addr = "2001:db8::1".parse().expect("addr");
    let k6 = FlowKey::v6(ZONE, 58, a, b, 9, 9);
    let id6 = t
        .insert(&k6, &L4Info::NONE, 98, None, 0, 0)
        .expect("insert");
    assert_eq!(t.lookup(&k6.reversed()), Some((id6, Dir::Reply)));
}

#[test]
fn snat_reply_tuples() {
    let mut t = table();
    let nat = Nat {
        addr: NODE,
        port: 61000,
    };
    let id = established(&mut t, Some(nat));
    // The reply direction of a masqueraded connection is in zone 0, whatever its own.
    let reply = FlowKey::v4(NAT_ZONE, 6, SERVER, NODE, 443, 61000);
    assert_eq!(t.lookup(&reply), Some((id, Dir::Reply)));
    assert_eq!(
        t.lookup(&FlowKey::v4(ZONE, 6, SERVER, NODE, 443, 61000)),
        None,
        "the reply tuple in the connection's own zone"
    );
    assert_eq!(t.lookup(&tcp_key()), Some((id, Dir::Original)));
    assert_eq!(
        t.lookup(&tcp_key().reversed()),
        None,
        "un-NATed reply tuple"
    );
    let v = t.get(id).expect("live");
    assert_eq!(v.nat(), Some(nat));
    assert_eq!(v.reply_key(), reply);
    assert!(t.nat_tuple_in_use(6, &reply.src, 443, nat));
    assert!(!t.nat_tuple_in_use(6, &reply.src, 444, nat));
    assert!(!t.nat_tuple_in_use(17, &reply.src, 443, nat));
    assert!(!t.nat_tuple_in_use(6, &reply.src, 443, Nat { port: 61001, ..nat }));
    // Nor may a connection of another zone (the same pod address and port in another
    // network) take it: the external tuple is the node's, in zone 0.
    let other_zone = FlowKey::v4(ZONE + 1, 6, POD, SERVER, 40000, 443);
    assert_eq!(
        t.insert(&other_zone, &seg(tf::SYN, 1, 0, 0), 60, Some(nat), 0, 0),
        Err(InsertError::Exists)
    );
    assert_eq!(t.stats().clashes, 1);
    // A second connection may not take the same external tuple.
    let other = FlowKey::v4(ZONE, 6, Ipv4Addr::new(10, 0, 0, 6), SERVER, 40000, 443);
    assert_eq!(
        t.insert(&other, &seg(tf::SYN, 1, 0, 0), 60, Some(nat), 0, 0),
        Err(InsertError::Exists)
    );
    assert_eq!(t.stats().clashes, 2);
    assert!(t
        .insert(
            &other,
            &seg(tf::SYN, 1, 0, 0),
            60,
            Some(Nat { port: 61001, ..nat }),
            0,
            0
        )
        .is_ok());

    // ICMP echo id 77 masqueraded to id 9000: the reply carries 9000 in both fields.
    let req = FlowKey::v4(ZONE, 1, POD, SERVER, 77, 77);
    let nat = Nat {
        addr: NODE,
        port: 9000,
    };
    let id = t
        .insert(&req, &L4Info::NONE, 98, Some(nat), 0, 0)
        .expect("insert");
    let reply = FlowKey::v4(NAT_ZONE, 1, SERVER, NODE, 9000, 9000);
    assert_eq!(t.lookup(&reply), Some((id, Dir::Reply)));
    assert_eq!(
        t.lookup(&FlowKey::v4(NAT_ZONE, 1, SERVER, NODE, 77, 77)),
        None
    );
    assert_eq!(t.get(id).expect("live").reply_key(), reply);
    assert!(t.nat_tuple_in_use(1, &reply.src, 0, nat));
}

#[test]
fn related_finds_quoted_connections() {
    // Without SNAT.
    let mut t = table();
    let id = established(&mut t, None);
    let orig = tcp_key();
    assert_eq!(t.related(&orig), Some((id, Dir::Original)));
    assert_eq!(t.related(&orig.reversed()), Some((id, Dir::Reply)));
    assert_eq!(
        t.related(&FlowKey::v4(ZONE, 6, POD, SERVER, 40000, 444)),
        None
    );

    // With SNAT to NODE:61000.
    let mut t = table();
    let nat = Nat {
        addr: NODE,
        port: 61000,
    };
    let id = established(&mut t, Some(nat));
    // The original packet after translation, quoted by a router on the Internet (in
    // zone 0, where the uplink is).
    let translated = FlowKey::v4(NAT_ZONE, 6, NODE, SERVER, 61000, 443);
    assert_eq!(
        t.related(&FlowKey::v4(ZONE, 6, NODE, SERVER, 61000, 443)),
        None,
        "translated, but in the connection's own zone"
    );
    assert_eq!(t.related(&translated), Some((id, Dir::Original)));
    // The original packet before translation, quoted inside the pod network.
    assert_eq!(t.related(&orig), Some((id, Dir::Original)));
    // A reply before un-translation, and after it (quoted by the pod).
    let reply = FlowKey::v4(NAT_ZONE, 6, SERVER, NODE, 443, 61000);
    assert_eq!(t.related(&reply), Some((id, Dir::Reply)));
    assert_eq!(t.related(&orig.reversed()), Some((id, Dir::Reply)));

    // A translated echo request quoted by a time-exceeded.
    let req = FlowKey::v4(ZONE, 1, POD, SERVER, 77, 77);
    let nat = Nat {
        addr: NODE,
        port: 9000,
    };
    let id = t
        .insert(&req, &L4Info::NONE, 98, Some(nat), 0, 0)
        .expect("insert");
    let quoted = FlowKey::v4(NAT_ZONE, 1, NODE, SERVER, 9000, 9000);
    assert_eq!(t.related(&quoted), Some((id, Dir::Original)));
    assert_eq!(t.related(&req), Some((id, Dir::Original)));
}

#[test]
fn timeouts_on_the_injected_clock() {
    let mut t = table();
    let udp = |p: u16| FlowKey::v4(ZONE, 17, POD, SERVER, p, 53);
    let id = t
        .insert(&udp(1), &L4Info::NONE, 80, None, 0, SEC)
        .expect("insert");
    assert_eq!(t.expire(31 * SEC - 1, 10), 0);
    assert_eq!(t.expire(31 * SEC, 10), 1);
    assert!(t.get(id).is_none());

    // A refresh extends; an expiry at the old deadline does nothing.
    let id = t
        .insert(&udp(2), &L4Info::NONE, 80, None, 0, 100 * SEC)
        .expect("insert");
    t.track(id, Dir::Original, &L4Info::NONE, 80, 120 * SEC);
    assert_eq!(t.expire(130 * SEC, 10), 0);
    assert_eq!(t.expire(150 * SEC - 1, 10), 0);
    assert_eq!(t.expire(150 * SEC, 10), 1);

    // Deadlines are whole seconds, rounded up: never early.
    let id = t
        .insert(&udp(3), &L4Info::NONE, 80, None, 0, 200_500)
        .expect("insert");
    assert_eq!(expires(&t, id), 231 * SEC);
    assert_eq!(t.expire(230_500, 10), 0);
    assert_eq!(t.expire(231 * SEC, 10), 1);

    // The budget: 10 due entries in three classes, 3 at a time.
    let now = 1000 * SEC;
    for p in 0..4 {
        t.insert(&udp(100 + p), &L4Info::NONE, 80, None, 0, now)
            .expect("insert");
    }
    for p in 0..3 {
        let k = FlowKey::v4(ZONE, 1, POD, SERVER, 100 + p, 100 + p);
        t.insert(&k, &L4Info::NONE, 80, None, 0, now)
            .expect("insert");
    }
    for p in 0..3 {
        let k = FlowKey::v4(ZONE, 6, POD, SERVER, 100 + p, 80);
        t.insert(&k, &seg(tf::SYN, 1, 0, 0), 80, None, 0, now)
            .expect("insert");
    }
    let later = now + 200 * SEC;
    assert_eq!(t.len(), 10);
    assert_eq!(t.expire(later, 3), 3);
    assert_eq!(t.len(), 7);
    assert_eq!(t.expire(later, 3), 3);
    assert_eq!(t.expire(later, 3), 3);
    assert_eq!(t.expire(later, 3), 1);
    assert_eq!(t.expire(later, 3), 0);
    assert!(t.is_empty());
    assert_eq!(t.stats().expirations, 13);

    // Configured timeouts are used.
    let mut t = ConnTable::new(&CtConfig {
        max_entries: 16,
        timeouts: Timeouts {
            udp_unreplied: 5,
            ..Timeouts::default()
        },
        ..CtConfig::default()
    });
    let id = t
        .insert(&udp(1), &L4Info::NONE, 80, None, 0, 0)
        .expect("insert");
    assert_eq!(expires(&t, id), 5 * SEC);
    assert_eq!(t.get(id).expect("live").time_left(2 * SEC), 3 * SEC);
}

#[test]
fn established_connection_times_out_after_five_days() {
    let mut t = table();
    let id = established(&mut t, None);
    let deadline = established_deadline(10 * SEC);
    assert!(((10 + 432_000) * SEC..(10 + 432_000 + 432_000 / 64) * SEC).contains(&deadline));
    assert_eq!(t.expire(deadline - 1, 10), 0);
    assert!(t.get(id).is_some());
    assert_eq!(t.expire(deadline, 10), 1);
}

#[test]
fn table_and_zone_limits() {
    let mut t = ConnTable::with_seed(
        &CtConfig {
            max_entries: 4,
            max_per_zone: 2,
            ..CtConfig::default()
        },
        9,
    );
    let key = |zone: u16, p: u16| FlowKey::v4(zone, 17, POD, SERVER, p, 53);
    let a = t
        .insert(&key(1, 1), &L4Info::NONE, 80, None, 0, 0)
        .expect("insert");
    t.insert(&key(1, 2), &L4Info::NONE, 80, None, 0, 0)
        .expect("insert");
    assert_eq!(
        t.insert(&key(1, 3), &L4Info::NONE, 80, None, 0, 0),
        Err(InsertError::ZoneFull)
    );
    t.insert(&key(2, 1), &L4Info::NONE, 80, None, 0, 0)
        .expect("insert");
    let d = t
        .insert(&key(2, 2), &L4Info::NONE, 80, None, 0, 0)
        .expect("insert");
    assert_eq!(
        t.insert(&key(3, 1), &L4Info::NONE, 80, None, 0, 0),
        Err(InsertError::TableFull)
    );
    assert_eq!(
        (t.len(), t.zone_len(1), t.zone_len(2), t.zone_len(3)),
        (4, 2, 2, 0)
    );
    assert_eq!((t.stats().table_full, t.stats().zone_full), (1, 1));
    // Tracked connections are untouched.
    assert_eq!(t.lookup(&key(1, 1)), Some((a, Dir::Original)));
    assert_eq!(
        t.track(a, Dir::Reply, &L4Info::NONE, 80, SEC),
        TrackVerdict::Accept
    );
    assert_eq!(state(&t, a), ConnState::UdpAssured);
    // Removal frees room, in the table and the zone.
    t.remove(d);
    t.remove(d);
    assert_eq!(t.stats().removals, 1);
    assert!(t.get(d).is_none());
    t.insert(&key(3, 1), &L4Info::NONE, 80, None, 0, 0)
        .expect("room again");
    t.remove(a);
    t.insert(&key(1, 3), &L4Info::NONE, 80, None, 0, 0)
        .expect("zone room again");
    assert_eq!(
        (t.len(), t.zone_len(1), t.zone_len(2), t.zone_len(3)),
        (4, 2, 1, 1)
    );
    assert_eq!(t.iter().count(), 4);
    assert_eq!(t.remove_matching(|_, v| v.zone() == 1), 2);
    assert_eq!((t.len(), t.zone_len(1)), (2, 0));
}

#[test]
fn acl_generation_is_kept() {
    let mut t = table();
    let key = FlowKey::v4(ZONE, 17, POD, SERVER, 1, 53);
    let big = (1u64 << 40) + 3;
    let id = t
        .insert(&key, &L4Info::NONE, 80, None, big, 0)
        .expect("insert");
    assert_eq!(t.get(id).expect("live").acl_generation(), big);
    t.set_acl_generation(id, big + 5);
    assert_eq!(t.get(id).expect("live").acl_generation(), big + 5);
    let key2 = FlowKey::v4(ZONE, 17, POD, SERVER, 2, 53);
    let id2 = t
        .insert(&key2, &L4Info::NONE, 80, None, big + 9, 0)
        .expect("insert");
    assert_eq!(t.get(id).expect("live").acl_generation(), big + 5);
    assert_eq!(t.get(id2).expect("live").acl_generation(), big + 9);
}

#[test]
fn bytes_per_connection_fit_the_budget() {
    // Entry (key, NAT, state, aging links, deadline, ACL generation, counters, TCP
    // windows) plus its share of the index: 112 + 16.
    const { assert!(BYTES_PER_CONNECTION <= 128) };
    assert_eq!(BYTES_PER_CONNECTION, 128);
    let t = ConnTable::with_seed(
        &CtConfig {
            max_entries: 100_000,
            ..CtConfig::default()
        },
        1,
    );
    assert!(t.memory_bytes() <= 128 * t.capacity());
}

// ---- property test against a reference model -----------------------------------

#[derive(Debug, Clone)]
enum Op {
    Insert { key: FlowKey, nat: Option<u16> },
    Lookup(FlowKey),
    Track { pick: usize, reply: bool },
    Remove(usize),
    Advance(u64),
    Expire(usize),
}

fn small_key() -> impl Strategy<Value = FlowKey> {
    let addr = prop_oneof![
        Just(Ipv4Addr::new(10, 0, 0, 1)),
        Just(Ipv4Addr::new(10, 0, 0, 2)),
        Just(NODE),
    ];
    (
        0u16..3,
        prop_oneof![Just(17u8), Just(1u8)],
        addr.clone(),
        addr,
        1u16..4,
        1u16..4,
    )
        .prop_map(|(zone, proto, s, d, sp, dp)| {
            if proto == 1 {
                FlowKey::v4(zone, proto, s, d, sp, sp)
            } else {
                FlowKey::v4(zone, proto, s, d, sp, dp)
            }
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (small_key(), proptest::option::of(1u16..4)).prop_map(|(key, nat)| Op::Insert { key, nat }),
        3 => small_key().prop_map(Op::Lookup),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, reply)| Op::Track { pick, reply }),
        1 => any::<usize>().prop_map(Op::Remove),
        2 => (0u64..50_000).prop_map(Op::Advance),
        1 => (0usize..5).prop_map(Op::Expire),
    ]
}

#[derive(Debug, Clone)]
struct ModelConn {
    key: FlowKey,
    reply: FlowKey,
    expires: u64,
    assured: bool,
}

fn model_reply(key: &FlowKey, nat: Option<u16>) -> FlowKey {
    let mut r = key.reversed();
    if let Some(p) = nat {
        r.dst = NODE.to_ipv6_mapped().octets();
        r.dst_port = p;
        r.network = NAT_ZONE;
        if key.proto == 1 {
            r.src_port = p;
        }
    }
    r
}

fn model_deadline(now: u64, timeout: u64) -> u64 {
    (now.div_ceil(1000) + timeout) * 1000
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn table_matches_reference_model(ops in proptest::collection::vec(op(), 1..120)) {
        let cfg = CtConfig { max_entries: 12, max_per_zone: 6, ..CtConfig::default() };
        let mut t = ConnTable::with_seed(&cfg, 0xfeed);
        let mut conns: HashMap<ConnId, ModelConn> = HashMap::new();
        let mut tuples: HashMap<FlowKey, (ConnId, Dir)> = HashMap::new();
        let mut now: u64 = 0;
        for op in ops {
            match op {
                Op::Insert { key, nat } => {
                    let reply = model_reply(&key, nat);
                    let zone_n = conns.values().filter(|c| c.key.network == key.network).count();
                    let want = if conns.len() >= 12 {
                        Err(InsertError::TableFull)
                    } else if zone_n >= 6 {
                        Err(InsertError::ZoneFull)
                    } else if tuples.contains_key(&key) || tuples.contains_key(&reply) {
                        Err(InsertError::Exists)
                    } else {
                        Ok(())
                    };
                    let nat = nat.map(|port| Nat { addr: NODE, port });
                    let got = t.insert(&key, &L4Info::NONE, 64, nat, 0, now);
                    match (got, want) {
                        (Ok(id), Ok(())) => {
                            prop_assert!(!conns.contains_key(&id));
                            let timeout = 30;
                            conns.insert(id, ModelConn { key, reply, expires: model_deadline(now, timeout), assured: false });
                            tuples.insert(reply, (id, Dir::Reply));
                            tuples.insert(key, (id, Dir::Original));
                        }
                        (Err(e), Err(w)) => prop_assert_eq!(e, w),
                        (g, w) => prop_assert!(false, "insert {:?}: got {:?}, want {:?}", key, g, w),
                    }
                }
                Op::Lookup(key) => {
                    let got = t.lookup(&key);
                    match tuples.get(&key) {
                        None => prop_assert_eq!(got, None),
                        Some(&(id, dir)) => {
                            let c = &conns[&id];
                            if c.key == c.reply {
                                prop_assert_eq!(got.map(|g| g.0), Some(id));
                            } else {
                                prop_assert_eq!(got, Some((id, dir)));
                            }
                        }
                    }
                }
                Op::Track { pick, reply } => {
                    if conns.is_empty() { continue; }
                    let mut ids: Vec<ConnId> = conns.keys().copied().collect();
                    ids.sort();
                    let id = ids[pick % ids.len()];
                    let dir = if reply { Dir::Reply } else { Dir::Original };
                    prop_assert_eq!(t.track(id, dir, &L4Info::NONE, 64, now), TrackVerdict::Accept);
                    let c = conns.get_mut(&id).expect("model");
                    if reply && c.key.proto == 17 { c.assured = true; }
                    let timeout = if c.key.proto == 1 { 30 } else if c.assured { 120 } else { 30 };
                    c.expires = model_deadline(now, timeout);
                }
                Op::Remove(pick) => {
                    if conns.is_empty() { continue; }
                    let mut ids: Vec<ConnId> = conns.keys().copied().collect();
                    ids.sort();
                    let id = ids[pick % ids.len()];
                    t.remove(id);
                    let c = conns.remove(&id).expect("model");
                    tuples.remove(&c.key);
                    tuples.remove(&c.reply);
                }
                Op::Advance(ms) => now += ms,
                Op::Expire(budget) => {
                    let due = conns.values().filter(|c| c.expires <= now).count();
                    let n = t.expire(now, budget);
                    prop_assert_eq!(n, due.min(budget));
                    let gone: Vec<ConnId> = conns.keys().copied().filter(|&id| t.get(id).is_none()).collect();
                    prop_assert_eq!(gone.len(), n);
                    for id in gone {
                        let c = conns.remove(&id).expect("model");
                        prop_assert!(c.expires <= now, "expired early: {:?} at {}", c, now);
                        tuples.remove(&c.key);
                        tuples.remove(&c.reply);
                    }
                }
            }
            prop_assert_eq!(t.len(), conns.len());
            for z in 0..3u16 {
                prop_assert_eq!(t.zone_len(z), conns.values().filter(|c| c.key.network == z).count());
            }
            for (&id, c) in &conns {
                let v = t.get(id).expect("live in model");
                prop_assert_eq!(v.key(), c.key);
                prop_assert_eq!(v.reply_key(), c.reply);
                prop_assert_eq!(v.expires_at(), c.expires);
            }
        }
        // Everything still tracked is found under both tuples; then all of it expires.
        for (&id, c) in &conns {
            prop_assert_eq!(t.lookup(&c.key).map(|g| g.0), Some(id));
            prop_assert_eq!(t.lookup(&c.reply).map(|g| g.0), Some(id));
        }
        let n = conns.len();
        prop_assert_eq!(t.expire(now + 1_000_000, usize::MAX), n);
        prop_assert!(t.is_empty());
    }
}

#[test]
fn burst_lookup_equals_single_lookups() {
    let mut t = table();
    let mut keys = Vec::new();
    for p in 0..300u16 {
        let k = FlowKey::v4(ZONE, 17, POD, SERVER, 1000 + p, 53);
        let nat = (p % 3 == 0).then_some(Nat {
            addr: NODE,
            port: 20000 + p,
        });
        if p % 5 != 0 {
            let id = t.insert(&k, &L4Info::NONE, 64, nat, 0, 0).expect("insert");
            keys.push(t.get(id).expect("live").reply_key());
        }
        keys.push(k);
    }
    let mut out = vec![None; keys.len()];
    t.lookup_burst(&keys, &mut out);
    for (k, o) in keys.iter().zip(&out) {
        assert_eq!(*o, t.lookup(k));
    }
    assert_eq!(out.iter().filter(|o| o.is_some()).count(), 240 * 2);
}

#[test]
fn burst_lookup_equals_single_lookups_in_a_full_table() {
    // A full table (two keys per connection in 8/10 of the index's slots) stores some
    // keys past their home bucket: the burst lookup's prefetch of those goes through
    // the next bucket. Every seed gives another placement.
    for seed in 0..4 {
        let mut t = ConnTable::with_seed(
            &CtConfig {
                max_entries: 512,
                ..CtConfig::default()
            },
            seed,
        );
        let mut keys = Vec::new();
        for p in 0..512u16 {
            let k = FlowKey::v4(ZONE, 17, POD, SERVER, 2000 + p, 53);
            let nat = (p % 2 == 0).then_some(Nat {
                addr: NODE,
                port: 30000 + p,
            });
            let id = t.insert(&k, &L4Info::NONE, 64, nat, 0, 0).expect("insert");
            keys.push(t.get(id).expect("live").reply_key());
            keys.push(k);
        }
        assert_eq!(t.len(), 512);
        for p in 0..64u16 {
            keys.push(FlowKey::v4(ZONE, 17, POD, SERVER, 9000 + p, 53));
        }
        let mut out = vec![None; keys.len()];
        t.lookup_burst(&keys, &mut out);
        for (k, o) in keys.iter().zip(&out) {
            assert_eq!(*o, t.lookup(k), "seed {seed}: {k:?}");
        }
        assert_eq!(out.iter().filter(|o| o.is_some()).count(), 1024);
    }
}

#[test]
fn l4_info_from_a_tcp_header() {
    use ferrule_dataplane::wire::TcpPacket;
    // 40000 -> 443, seq 1000, SYN, window 64240, options: NOP, window scale 7.
    let bytes: [u8; 24] = [
        0x9c, 0x40, 0x01, 0xbb, 0, 0, 0x03, 0xe8, 0, 0, 0, 0, 0x60, 0x02, 0xfa, 0xf0, 0, 0, 0, 0,
        1, 3, 3, 7,
    ];
    let tcp = TcpPacket::new_checked(&bytes[..]).expect("tcp");
    let l4 = L4Info::from_tcp(&tcp, 0);
    assert_eq!(
        l4,
        L4Info {
            tcp_flags: tf::SYN,
            seq: 1000,
            ack: 0,
            window: 64240,
            wscale: Some(7),
            payload_len: 0,
        }
    );
}
