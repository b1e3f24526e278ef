//! Golden packets encoded by scapy (`scripts/gen-wire-fixtures.py`): every field scapy
//! read back must be what `ferrule_dataplane::wire` reports, every checksum must verify
//! and be reproduced by our `fill_checksum`, and where a repr is lossless, parse → emit
//! must give back scapy's bytes.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ferrule_dataplane::wire::icmpv6::ndp_option;
use ferrule_dataplane::wire::{
    self, checksum, ipv6, ArpPacket, ArpRepr, EtherType, EthernetFrame, EthernetRepr,
    Icmpv4Message, Icmpv4Packet, Icmpv4Repr, Icmpv6Message, Icmpv6Packet, Icmpv6Repr, IpProtocol,
    Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, SctpPacket, TcpPacket, TcpRepr, UdpPacket, UdpRepr,
    VlanHeader, VlanRepr,
};

/// One fixture file: the expected `key = value` lines and the frame.
struct Fixture {
    name: &'static str,
    expected: Vec<(String, String)>,
    frame: Vec<u8>,
}

fn decode_hex(hex: &str) -> Vec<u8> {
    assert!(hex.len() & 1 == 0, "odd hex length");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn load(name: &'static str, text: &str) -> Fixture {
    let mut expected = Vec::new();
    let mut frame = None;
    let mut has_scapy_line = false;
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix('#') {
            has_scapy_line |= comment.trim_start().starts_with("scapy:");
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let (key, value) = line.split_once(" = ").expect("`key = value` line");
        if key == "hex" {
            frame = Some(decode_hex(value));
        } else {
            expected.push((key.to_string(), value.to_string()));
        }
    }
    assert!(has_scapy_line, "{name}: no `# scapy:` line");
    Fixture {
        name,
        expected,
        frame: frame.expect("hex line"),
    }
}

type Values = BTreeMap<String, String>;

fn put(values: &mut Values, key: impl Into<String>, value: impl ToString) {
    let key = key.into();
    let old = values.insert(key.clone(), value.to_string());
    assert!(old.is_none(), "key {key} reported twice");
}

/// Zeroes the 16-bit checksum at `at` in a copy of `bytes`, runs `fill`, and returns
/// what it wrote.
fn refill16(bytes: &[u8], at: usize, fill: impl FnOnce(&mut [u8])) -> u16 {
    let mut copy = bytes.to_vec();
    copy[at..at + 2].fill(0);
    fill(&mut copy);
    u16::from_be_bytes([copy[at], copy[at + 1]])
}

/// Parses `frame` layer by layer with the wire module and reports every field under the
/// names the fixture script uses. Checksums and repr round trips are asserted on the way.
fn describe(frame: &[u8]) -> Values {
    let mut v = Values::new();
    let eth = EthernetFrame::new_checked(frame).expect("ethernet");
    put(&mut v, "eth.dst", eth.dst_addr());
    put(&mut v, "eth.src", eth.src_addr());
    put(&mut v, "eth.type", eth.ethertype().0);
    let repr = EthernetRepr::parse(&eth).unwrap();
    let mut copy = frame.to_vec();
    repr.emit(&mut EthernetFrame::new_unchecked(&mut copy[..]));
    assert_eq!(copy, frame, "ethernet emit");

    // VLAN tags, one at a time, cross-checked against l3_offset.
    let mut offset = wire::ethernet::HEADER_LEN;
    let mut ethertype = eth.ethertype();
    let mut count = 0;
    let mut outer_vid = None;
    while ethertype.is_vlan() {
        let tag = VlanHeader::new_checked(&frame[offset..]).expect("vlan tag");
        put(&mut v, format!("vlan.{count}.vid"), tag.vlan_id());
        put(&mut v, format!("vlan.{count}.pcp"), tag.pcp());
        put(&mut v, format!("vlan.{count}.dei"), u8::from(tag.dei()));
        put(&mut v, format!("vlan.{count}.type"), tag.ethertype().0);
        let repr = VlanRepr::parse(&tag).unwrap();
        let mut copy = frame[offset..offset + 4].to_vec();
        repr.emit(&mut VlanHeader::new_unchecked(&mut copy[..]));
        assert_eq!(copy, &frame[offset..offset + 4], "vlan emit");
        outer_vid = outer_vid.or(Some(tag.vlan_id()));
        ethertype = tag.ethertype();
        offset += 4;
        count += 1;
    }
    put(&mut v, "vlan.count", count);
    assert_eq!(wire::l3_offset(frame), Ok((offset, ethertype, outer_vid)));
    put(&mut v, "l3.offset", offset);
    let l3 = &frame[offset..];

    match ethertype {
        EtherType::ARP => describe_arp(&mut v, l3),
        EtherType::IPV4 => describe_ipv4(&mut v, l3),
        EtherType::IPV6 => describe_ipv6(&mut v, l3),
        other => panic!("unexpected ethertype {other}"),
    }
    v
}

fn describe_arp(v: &mut Values, l3: &[u8]) {
    let arp = ArpPacket::new_checked(l3).expect("arp");
    put(v, "arp.hwtype", arp.hardware_type());
    put(v, "arp.ptype", arp.protocol_type().0);
    put(v, "arp.hwlen", arp.hardware_len());
    put(v, "arp.plen", arp.protocol_len());
    put(v, "arp.op", u16::from(arp.operation()));
    put(v, "arp.hwsrc", arp.source_hardware_addr());
    put(v, "arp.psrc", arp.source_protocol_addr());
    put(v, "arp.hwdst", arp.target_hardware_addr());
    put(v, "arp.pdst", arp.target_protocol_addr());
    let repr = ArpRepr::parse(&arp).expect("arp repr");
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
    assert_eq!(out, &l3[..repr.buffer_len()], "arp emit");
}

fn describe_ipv4(v: &mut Values, l3: &[u8]) {
    let ip = Ipv4Packet::new_checked(l3).expect("ipv4");
    put(v, "ip.version", ip.version());
    put(v, "ip.header_len", ip.header_len());
    put(v, "ip.tos", (ip.dscp() << 2) | ip.ecn());
    put(v, "ip.len", ip.total_len());
    put(v, "ip.id", ip.ident());
    put(v, "ip.df", ip.dont_frag());
    put(v, "ip.mf", ip.more_frags());
    put(v, "ip.frag_offset", ip.frag_offset());
    put(v, "ip.ttl", ip.hop_limit());
    put(v, "ip.proto", ip.next_header().0);
    put(v, "ip.chksum", ip.checksum());
    put(v, "ip.src", ip.src_addr());
    put(v, "ip.dst", ip.dst_addr());
    put(v, "ip.options_len", ip.options().len());
    put(v, "ip.payload_len", ip.payload().len());
    assert!(ip.verify_checksum(), "ipv4 checksum");
    let refilled = refill16(l3, 10, |b| Ipv4Packet::new_unchecked(b).fill_checksum());
    assert_eq!(refilled, ip.checksum(), "ipv4 fill_checksum");
    let repr = Ipv4Repr::parse(&ip).expect("ipv4 repr");
    assert_eq!(repr.payload_len, ip.payload().len());
    // decrement_ttl keeps the checksum equal to a full recomputation.
    if ip.hop_limit() > 0 {
        let mut copy = l3.to_vec();
        let mut view = Ipv4Packet::new_checked(&mut copy[..]).unwrap();
        view.decrement_ttl();
        let incremental = view.checksum();
        view.fill_checksum();
        assert_eq!(view.checksum(), incremental, "decrement_ttl checksum");
    }
    let src = IpAddr::V4(ip.src_addr());
    let dst = IpAddr::V4(ip.dst_addr());
    let l4 = ip.payload();
    put(v, "l4.len", l4.len());
    describe_l4(v, ip.next_header(), l4, &src, &dst);
}

fn describe_ipv6(v: &mut Values, l3: &[u8]) {
    let ip = Ipv6Packet::new_checked(l3).expect("ipv6");
    put(v, "ip6.version", ip.version());
    put(v, "ip6.tc", ip.traffic_class());
    put(v, "ip6.fl", ip.flow_label());
    put(v, "ip6.plen", ip.payload_len());
    put(v, "ip6.nh", ip.next_header().0);
    put(v, "ip6.hlim", ip.hop_limit());
    put(v, "ip6.src", ip.src_addr());
    put(v, "ip6.dst", ip.dst_addr());
    let repr = Ipv6Repr::parse(&ip).unwrap();
    if ip.traffic_class() == 0 && ip.flow_label() == 0 {
        let mut out = [0u8; 40];
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, &l3[..40], "ipv6 emit");
    }
    let t = ipv6::transport(&ip).expect("transport walk");
    put(v, "ip6.l4.proto", t.protocol.0);
    put(v, "ip6.l4.offset", t.offset);
    if let Some(frag) = t.fragment {
        put(v, "ip6.frag.offset", frag.offset);
        put(v, "ip6.frag.m", frag.more);
        put(v, "ip6.frag.id", frag.ident);
    }
    let l4 = &ip.packet()[t.offset..];
    if !t.has_transport_header() {
        put(v, "ip6.l4.len", l4.len());
        return;
    }
    put(v, "l4.len", l4.len());
    let src = IpAddr::V6(ip.src_addr());
    // With a Routing header the pseudo-header carries the final destination.
    let final_dst = ipv6::pseudo_header_dst(&ip).expect("final destination");
    put(v, "ip6.final_dst", final_dst);
    describe_l4(v, t.protocol, l4, &src, &IpAddr::V6(final_dst));
}

fn describe_l4(v: &mut Values, proto: IpProtocol, l4: &[u8], src: &IpAddr, dst: &IpAddr) {
    match proto {
        IpProtocol::TCP => describe_tcp(v, l4, src, dst),
        IpProtocol::UDP => describe_udp(v, l4, src, dst),
        IpProtocol::ICMP => describe_icmpv4(v, l4),
        IpProtocol::ICMPV6 => {
            let (IpAddr::V6(src), IpAddr::V6(dst)) = (src, dst) else {
                panic!("icmpv6 over ipv4")
            };
            describe_icmpv6(v, l4, src, dst)
        }
        IpProtocol::SCTP => describe_sctp(v, l4),
        other => panic!("unexpected protocol {other}"),
    }
}

fn describe_tcp(v: &mut Values, l4: &[u8], src: &IpAddr, dst: &IpAddr) {
    let tcp = TcpPacket::new_checked(l4).expect("tcp");
    put(v, "tcp.sport", tcp.src_port());
    put(v, "tcp.dport", tcp.dst_port());
    put(v, "tcp.seq", tcp.seq_number());
    put(v, "tcp.ack", tcp.ack_number());
    put(v, "tcp.header_len", tcp.header_len());
    put(v, "tcp.flags", tcp.flags().bits());
    put(v, "tcp.window", tcp.window_len());
    put(v, "tcp.chksum", tcp.checksum());
    put(v, "tcp.urgptr", tcp.urgent_at());
    put(v, "tcp.options_len", tcp.options().len());
    put(v, "tcp.payload_len", tcp.payload().len());
    assert!(tcp.verify_checksum(src, dst), "tcp checksum");
    let refilled = refill16(l4, 16, |b| {
        TcpPacket::new_unchecked(b).fill_checksum(src, dst)
    });
    assert_eq!(refilled, tcp.checksum(), "tcp fill_checksum");
    let repr = TcpRepr::parse(&tcp, src, dst).expect("tcp repr");
    if tcp.options().is_empty() && tcp.urgent_at() == 0 {
        let mut out = l4.to_vec();
        out[..20].fill(0);
        repr.emit(&mut TcpPacket::new_unchecked(&mut out[..]), src, dst);
        assert_eq!(out, l4, "tcp emit");
    }
}

fn describe_udp(v: &mut Values, l4: &[u8], src: &IpAddr, dst: &IpAddr) {
    let udp = UdpPacket::new_checked(l4).expect("udp");
    put(v, "udp.sport", udp.src_port());
    put(v, "udp.dport", udp.dst_port());
    put(v, "udp.len", udp.len());
    put(v, "udp.chksum", udp.checksum());
    put(v, "udp.payload_len", udp.payload().len());
    assert!(udp.verify_checksum(src, dst), "udp checksum");
    let repr = UdpRepr::parse(&udp, src, dst).expect("udp repr");
    if udp.checksum() != 0 {
        let refilled = refill16(l4, 6, |b| {
            UdpPacket::new_unchecked(b).fill_checksum(src, dst)
        });
        assert_eq!(refilled, udp.checksum(), "udp fill_checksum");
        let mut out = l4.to_vec();
        out[..8].fill(0);
        repr.emit(&mut UdpPacket::new_unchecked(&mut out[..]), src, dst);
        assert_eq!(out, l4, "udp emit");
    }
}

fn describe_icmpv4(v: &mut Values, l4: &[u8]) {
    let icmp = Icmpv4Packet::new_checked(l4).expect("icmp");
    let msg_type = icmp.msg_type();
    put(v, "icmp.type", msg_type.0);
    put(v, "icmp.code", icmp.msg_code());
    put(v, "icmp.chksum", icmp.checksum());
    put(v, "icmp.data_len", icmp.data().len());
    assert!(icmp.verify_checksum(), "icmp checksum");
    let refilled = refill16(l4, 2, |b| Icmpv4Packet::new_unchecked(b).fill_checksum());
    assert_eq!(refilled, icmp.checksum(), "icmp fill_checksum");
    if msg_type == Icmpv4Message::ECHO_REQUEST || msg_type == Icmpv4Message::ECHO_REPLY {
        put(v, "icmp.id", icmp.echo_ident());
        put(v, "icmp.seq", icmp.echo_seq_no());
    }
    if msg_type == Icmpv4Message::DST_UNREACHABLE && icmp.msg_code() == 4 {
        put(v, "icmp.nexthopmtu", icmp.next_hop_mtu());
    }
    // The documented emit pattern: emit, copy the data, fill_checksum.
    let repr = Icmpv4Repr::parse(&icmp).expect("icmp repr");
    assert!(!matches!(repr, Icmpv4Repr::Other { .. }), "{repr}");
    let mut out = vec![0u8; repr.buffer_len()];
    let mut view = Icmpv4Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut view);
    view.data_mut().copy_from_slice(icmp.data());
    view.fill_checksum();
    assert_eq!(out, l4, "icmp emit");
    if msg_type.is_error() {
        let quoted = Ipv4Packet::new_quoted(icmp.into_data()).expect("quoted ipv4");
        put(v, "icmp.quoted.ip.src", quoted.src_addr());
        put(v, "icmp.quoted.ip.dst", quoted.dst_addr());
        put(v, "icmp.quoted.ip.proto", quoted.next_header().0);
        put(v, "icmp.quoted.ip.ttl", quoted.hop_limit());
        quoted_ports(v, "icmp.quoted.l4", quoted.next_header(), quoted.payload());
    }
}

fn quoted_ports(v: &mut Values, prefix: &str, proto: IpProtocol, l4: &[u8]) {
    let ports = match proto {
        IpProtocol::UDP => {
            let udp = UdpPacket::new_checked(l4).expect("quoted udp");
            (udp.src_port(), udp.dst_port())
        }
        IpProtocol::TCP => {
            let tcp = TcpPacket::new_checked(l4).expect("quoted tcp");
            (tcp.src_port(), tcp.dst_port())
        }
        other => panic!("quoted {other}"),
    };
    put(v, format!("{prefix}.sport"), ports.0);
    put(v, format!("{prefix}.dport"), ports.1);
}

fn describe_icmpv6(v: &mut Values, l4: &[u8], src: &Ipv6Addr, dst: &Ipv6Addr) {
    let icmp = Icmpv6Packet::new_checked(l4).expect("icmpv6");
    let msg_type = icmp.msg_type();
    put(v, "icmp6.type", msg_type.0);
    put(v, "icmp6.code", icmp.msg_code());
    put(v, "icmp6.cksum", icmp.checksum());
    put(v, "icmp6.data_len", icmp.data().len());
    assert!(icmp.verify_checksum(src, dst), "icmpv6 checksum");
    let refilled = refill16(l4, 2, |b| {
        Icmpv6Packet::new_unchecked(b).fill_checksum(src, dst)
    });
    assert_eq!(refilled, icmp.checksum(), "icmpv6 fill_checksum");
    match msg_type {
        Icmpv6Message::ECHO_REQUEST | Icmpv6Message::ECHO_REPLY => {
            put(v, "icmp6.id", icmp.echo_ident());
            put(v, "icmp6.seq", icmp.echo_seq_no());
        }
        Icmpv6Message::PACKET_TOO_BIG => put(v, "icmp6.mtu", icmp.mtu()),
        Icmpv6Message::NEIGHBOR_SOLICIT => put(v, "icmp6.tgt", icmp.target_addr()),
        Icmpv6Message::NEIGHBOR_ADVERT => {
            put(v, "icmp6.tgt", icmp.target_addr());
            let flags = icmp.neighbor_flags();
            put(
                v,
                "icmp6.flag.r",
                flags.contains(wire::NdpNeighborFlags::ROUTER),
            );
            put(
                v,
                "icmp6.flag.s",
                flags.contains(wire::NdpNeighborFlags::SOLICITED),
            );
            put(
                v,
                "icmp6.flag.o",
                flags.contains(wire::NdpNeighborFlags::OVERRIDE),
            );
        }
        Icmpv6Message::ROUTER_ADVERT => {
            put(v, "icmp6.ra.chlim", icmp.current_hop_limit());
            put(v, "icmp6.ra.m", icmp.router_flags() & 0x80 != 0);
            put(v, "icmp6.ra.o", icmp.router_flags() & 0x40 != 0);
            put(v, "icmp6.ra.lifetime", icmp.router_lifetime());
            put(v, "icmp6.ra.reachable", icmp.reachable_time());
            put(v, "icmp6.ra.retrans", icmp.retrans_time());
        }
        _ => {}
    }
    if msg_type.is_ndp() {
        let mut count = 0;
        for (n, option) in icmp.ndp_options().enumerate() {
            let option = option.expect("ndp option");
            put(v, format!("icmp6.opt.{n}.type"), option.option_type);
            put(v, format!("icmp6.opt.{n}.len"), (option.body.len() + 2) / 8);
            if matches!(
                option.option_type,
                ndp_option::SOURCE_LL_ADDR | ndp_option::TARGET_LL_ADDR
            ) {
                put(
                    v,
                    format!("icmp6.opt.{n}.lladdr"),
                    option.link_layer_addr().unwrap(),
                );
            }
            if let Some(mtu) = option.mtu() {
                put(v, format!("icmp6.opt.{n}.mtu"), mtu);
            }
            count += 1;
        }
        put(v, "icmp6.opt.count", count);
    }
    let repr = Icmpv6Repr::parse(&icmp, src, dst).expect("icmpv6 repr");
    let lossless = match repr {
        Icmpv6Repr::Other { .. } => false,
        // The repr keeps one link-layer option: lossless when that is all there is.
        Icmpv6Repr::NeighborSolicit { lladdr, .. }
        | Icmpv6Repr::NeighborAdvert { lladdr, .. }
        | Icmpv6Repr::RouterSolicit { lladdr } => {
            icmp.ndp_options().count() == usize::from(lladdr.is_some())
        }
        _ => true,
    };
    if lossless {
        let mut out = vec![0u8; repr.buffer_len()];
        let mut view = Icmpv6Packet::new_unchecked(&mut out[..]);
        repr.emit(&mut view, src, dst);
        if !msg_type.is_ndp() {
            view.data_mut().copy_from_slice(icmp.data());
            view.fill_checksum(src, dst);
        }
        assert_eq!(out, l4, "icmpv6 emit of {repr}");
    }
    if msg_type.is_error() {
        let quoted = Ipv6Packet::new_quoted(icmp.into_data()).expect("quoted ipv6");
        put(v, "icmp6.quoted.ip6.src", quoted.src_addr());
        put(v, "icmp6.quoted.ip6.dst", quoted.dst_addr());
        put(v, "icmp6.quoted.ip6.nh", quoted.next_header().0);
        put(v, "icmp6.quoted.ip6.hlim", quoted.hop_limit());
        quoted_ports(v, "icmp6.quoted.l4", quoted.next_header(), quoted.payload());
    }
}

fn describe_sctp(v: &mut Values, l4: &[u8]) {
    let sctp = SctpPacket::new_checked(l4).expect("sctp");
    put(v, "sctp.sport", sctp.src_port());
    put(v, "sctp.dport", sctp.dst_port());
    put(v, "sctp.tag", sctp.verification_tag());
    // scapy reads the field as a big-endian integer; our checksum() is the CRC value.
    put(v, "sctp.chksum", sctp.checksum().swap_bytes());
    assert!(sctp.verify_checksum(), "sctp crc32c");
    let mut copy = l4.to_vec();
    copy[8..12].fill(0);
    let mut view = SctpPacket::new_unchecked(&mut copy[..]);
    view.fill_checksum();
    assert_eq!(view.checksum(), sctp.checksum(), "sctp fill_checksum");
    let chunk = sctp.chunks().next().expect("a chunk").expect("chunk");
    put(v, "sctp.chunk.0.type", chunk.chunk_type);
    put(v, "sctp.chunk.0.len", chunk.value.len() + 4);
    if chunk.chunk_type == wire::sctp::chunk_type::INIT {
        let tag = u32::from_be_bytes(chunk.value[..4].try_into().unwrap());
        put(v, "sctp.init.init_tag", tag);
    }
}

fn check(fixture: Fixture) {
    let values = describe(&fixture.frame);
    assert!(
        fixture.expected.len() >= 10,
        "{}: too few values",
        fixture.name
    );
    for (key, want) in &fixture.expected {
        match values.get(key) {
            Some(got) => assert_eq!(got, want, "{}: {key}", fixture.name),
            None => panic!("{}: we report no `{key}` (scapy says {want})", fixture.name),
        }
    }
}

macro_rules! golden {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let text = include_str!(concat!("fixtures/wire/", stringify!($name), ".hex"));
                check(load(stringify!($name), text));
            }
        )*

        const ALL: &[&str] = &[$(stringify!($name)),*];
    };
}

golden!(
    arp_who_has,
    arp_is_at,
    dot1q_arp,
    ipv4_icmp_echo_request,
    ipv4_icmp_echo_reply,
    ipv6_icmpv6_echo_request,
    ipv6_icmpv6_echo_reply,
    icmpv6_ns_sll,
    icmpv6_na_tll,
    icmpv6_na_unsolicited,
    icmpv6_rs_sll,
    icmpv6_ra_options,
    ipv4_tcp_syn_options,
    ipv4_tcp_psh_ack_payload,
    ipv6_tcp_fin_ack_urg,
    ipv6_udp_hbh_frag,
    ipv6_frag_nonfirst,
    ipv6_routing_destopt_udp,
    ipv4_options_udp,
    ipv4_udp_padded,
    ipv4_udp_zero_checksum,
    icmp_time_exceeded_udp,
    icmp_frag_needed_tcp,
    icmpv6_packet_too_big,
    icmpv6_time_exceeded,
    icmpv6_port_unreachable,
    sctp_init,
    dot1q_ipv4_udp,
    qinq_ipv6_tcp,
);

/// Every fixture on disk has a test above (so a regenerated set can't be half-tested).
#[test]
fn every_fixture_is_tested() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/wire");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .expect("fixture dir")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".hex").map(str::to_string)
        })
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

/// A wrong expectation must fail: the comparison is not vacuous.
#[test]
#[should_panic(expected = "ip.ttl")]
fn a_wrong_value_fails() {
    let text =
        include_str!("fixtures/wire/ipv4_udp_padded.hex").replace("ip.ttl = 64", "ip.ttl = 65");
    check(load("ipv4_udp_padded", &text));
}

/// Padding after the IPv4 total length is not payload.
#[test]
fn padding_is_not_payload() {
    let fixture = load(
        "ipv4_udp_padded",
        include_str!("fixtures/wire/ipv4_udp_padded.hex"),
    );
    let ip = Ipv4Packet::new_checked(&fixture.frame[14..]).unwrap();
    assert_eq!(fixture.frame.len(), 60);
    assert_eq!(ip.payload().len(), 10);
    let udp = UdpPacket::new_checked(ip.payload()).unwrap();
    assert_eq!(udp.payload(), b"hi");
}

/// NAT rewrite of a golden TCP packet: incremental updates equal full recomputation.
#[test]
fn nat_rewrite_incremental_checksums() {
    let fixture = load(
        "ipv4_tcp_syn_options",
        include_str!("fixtures/wire/ipv4_tcp_syn_options.hex"),
    );
    let mut frame = fixture.frame.clone();
    let new_src = Ipv4Addr::new(100, 64, 7, 1);
    let new_port = 61000;
    let (header_len, old_src) = {
        let mut ip = Ipv4Packet::new_checked(&mut frame[14..]).unwrap();
        let old = ip.rewrite_src_addr(new_src);
        (ip.header_len(), old)
    };
    let tcp_bytes = &mut frame[14 + header_len..];
    let mut tcp = TcpPacket::new_checked(tcp_bytes).unwrap();
    let mut csum = checksum::update_addr_v4(tcp.checksum(), old_src, new_src);
    csum = checksum::update16(csum, tcp.src_port(), new_port);
    tcp.set_src_port(new_port);
    tcp.set_checksum(csum);
    let dst = IpAddr::V4(Ipv4Addr::new(10, 2, 0, 9));
    assert!(tcp.verify_checksum(&IpAddr::V4(new_src), &dst));
    let incremental = tcp.checksum();
    tcp.fill_checksum(&IpAddr::V4(new_src), &dst);
    assert_eq!(tcp.checksum(), incremental);
    let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!(ip.src_addr(), new_src);
}
