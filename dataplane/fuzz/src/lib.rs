//! The body of the `parse_frame` fuzz target: runs every `ferrule_dataplane::wire` view
//! over arbitrary bytes — `new_checked`, every accessor, the reprs, the IPv6 extension
//! walk, and the setters on a copy — so that any panic is a finding.
//!
//! It is a plain library so that it also runs on stable: `dataplane/tests/wire_fuzz.rs`
//! includes this file and feeds it corpora and proptest input in the normal test suite.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ferrule_dataplane::wire::{
    checksum, icmpv6, ipv6, sctp, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame,
    EthernetRepr, Icmpv4Packet, Icmpv4Repr, Icmpv6Packet, Icmpv6Repr, IpProtocol, Ipv4Packet,
    Ipv4Repr, Ipv6Packet, Ipv6Repr, SctpPacket, TcpPacket, TcpRepr, UdpPacket, UdpRepr, VlanHeader,
    VlanRepr,
};

/// Runs every parser over `data` as an Ethernet frame, and every view directly over
/// `data`. Returns how many views `new_checked` accepted (so tests can see progress).
pub fn parse_frame(data: &[u8]) -> usize {
    let mut accepted = 0;
    accepted += ethernet(data);
    // Every view straight over the bytes, as if they started at that layer.
    accepted += any_layer(data);
    if let Some(rest) = data.get(14..) {
        accepted += any_layer(rest);
    }
    accepted
}

fn any_layer(data: &[u8]) -> usize {
    let mut accepted = 0;
    accepted += vlan(data);
    accepted += arp(data);
    accepted += ipv4(data);
    accepted += ipv6(data);
    let v4 = (
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    );
    let v6 = (
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    );
    for (src, dst) in [&v4, &v6] {
        accepted += tcp(data, src, dst);
        accepted += udp(data, src, dst);
    }
    accepted += icmpv4(data);
    accepted += icmpv6(data, &Ipv6Addr::LOCALHOST, &Ipv6Addr::UNSPECIFIED);
    accepted += sctp(data);
    accepted
}

fn ethernet(data: &[u8]) -> usize {
    let Ok(frame) = EthernetFrame::new_checked(data) else {
        return 0;
    };
    black_box((
        frame.dst_addr(),
        frame.src_addr(),
        frame.ethertype(),
        frame.payload(),
    ));
    let dst = frame.dst_addr();
    black_box((
        dst.is_broadcast(),
        dst.is_multicast(),
        dst.is_unicast(),
        dst.to_string(),
    ));
    if let Ok(repr) = EthernetRepr::parse(&frame) {
        let mut copy = data.to_vec();
        repr.emit(&mut EthernetFrame::new_unchecked(&mut copy[..]));
        assert_eq!(copy, data, "ethernet emit must reproduce the header");
    }
    let mut copy = data.to_vec();
    let mut view = EthernetFrame::new_unchecked(&mut copy[..]);
    view.set_dst_addr(EthernetAddress::BROADCAST);
    view.set_src_addr(EthernetAddress([2, 0, 0, 0, 0, 1]));
    view.set_ethertype(EtherType::IPV6);
    black_box(view.payload_mut().len());

    let mut accepted = 1;
    if let Ok((offset, ethertype, _vid)) = ferrule_dataplane::wire::l3_offset(data) {
        let l3 = data.get(offset..).unwrap_or(&[]);
        accepted += match ethertype {
            EtherType::ARP => arp(l3),
            EtherType::IPV4 => ipv4(l3),
            EtherType::IPV6 => ipv6(l3),
            _ => 0,
        };
    }
    accepted
}

fn vlan(data: &[u8]) -> usize {
    let Ok(tag) = VlanHeader::new_checked(data) else {
        return 0;
    };
    black_box((
        tag.tci(),
        tag.pcp(),
        tag.dei(),
        tag.vlan_id(),
        tag.ethertype(),
        tag.payload(),
    ));
    let repr = VlanRepr::parse(&tag).expect("checked tag parses");
    let mut copy = data.to_vec();
    let mut view = VlanHeader::new_unchecked(&mut copy[..]);
    repr.emit(&mut view);
    view.set_pcp(0xFF);
    view.set_vlan_id(0xFFFF);
    view.set_dei(true);
    black_box((view.tci(), view.payload_mut().len(), repr.to_string()));
    1
}

fn arp(data: &[u8]) -> usize {
    let Ok(packet) = ArpPacket::new_checked(data) else {
        return 0;
    };
    black_box((
        packet.hardware_type(),
        packet.protocol_type(),
        packet.hardware_len(),
        packet.protocol_len(),
        packet.operation(),
        packet.source_hardware_addr(),
        packet.source_protocol_addr(),
        packet.target_hardware_addr(),
        packet.target_protocol_addr(),
        packet.is_ethernet_ipv4(),
    ));
    if let Ok(repr) = ArpRepr::parse(&packet) {
        let mut copy = data.to_vec();
        repr.emit(&mut ArpPacket::new_unchecked(&mut copy[..]));
        assert_eq!(
            &copy[..28],
            &data[..28],
            "arp emit must reproduce the packet"
        );
        black_box(repr.to_string());
    }
    1
}

fn ipv4(data: &[u8]) -> usize {
    if let Ok(quoted) = Ipv4Packet::new_quoted(data) {
        ipv4_accessors(&quoted);
    }
    let Ok(packet) = Ipv4Packet::new_checked(data) else {
        return 0;
    };
    ipv4_accessors(&packet);
    if let Ok(repr) = Ipv4Repr::parse(&packet) {
        black_box(repr.to_string());
        assert_eq!(repr.payload_len, packet.payload().len());
    }
    // Setters on a copy, then every getter again.
    let mut copy = data.to_vec();
    let mut view = Ipv4Packet::new_checked(&mut copy[..]).expect("same bytes");
    let was_valid = view.verify_checksum();
    if view.hop_limit() > 0 {
        view.decrement_ttl();
        assert_eq!(
            view.verify_checksum(),
            was_valid,
            "decrement_ttl keeps the checksum"
        );
    }
    view.rewrite_src_addr(Ipv4Addr::new(100, 64, 0, 1));
    view.rewrite_dst_addr(Ipv4Addr::BROADCAST);
    assert_eq!(
        view.verify_checksum(),
        was_valid,
        "rewrites keep the checksum"
    );
    view.set_header_len(60);
    view.set_total_len(u16::MAX);
    view.set_frag_offset(u16::MAX);
    view.set_more_frags(true);
    view.fill_checksum();
    black_box((view.options_mut().len(), view.payload_mut().len()));
    ipv4_accessors(&view);

    let src = IpAddr::V4(packet.src_addr());
    let dst = IpAddr::V4(packet.dst_addr());
    1 + transport(packet.next_header(), packet.payload(), &src, &dst)
}

fn ipv4_accessors<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) {
    black_box((
        p.version(),
        p.header_len(),
        p.dscp(),
        p.ecn(),
        p.total_len(),
        p.ident(),
        p.dont_frag(),
        p.more_frags(),
        p.frag_offset(),
        p.is_fragment(),
        p.is_first_fragment(),
        p.hop_limit(),
        p.next_header(),
        p.checksum(),
    ));
    black_box((
        p.src_addr(),
        p.dst_addr(),
        p.header(),
        p.options(),
        p.payload(),
    ));
    black_box(p.verify_checksum());
}

fn ipv6(data: &[u8]) -> usize {
    if let Ok(quoted) = Ipv6Packet::new_quoted(data) {
        ipv6_accessors(&quoted);
    }
    let Ok(packet) = Ipv6Packet::new_checked(data) else {
        return 0;
    };
    ipv6_accessors(&packet);
    let repr = Ipv6Repr::parse(&packet).expect("checked packet parses");
    black_box(repr.to_string());
    let walk = ipv6::transport(&packet);
    let final_dst = ipv6::pseudo_header_dst(&packet);
    assert_eq!(walk.is_ok(), final_dst.is_ok(), "both walks agree");

    let mut copy = data.to_vec();
    let mut view = Ipv6Packet::new_checked(&mut copy[..]).expect("same bytes");
    view.decrement_hop_limit();
    view.set_traffic_class(0xFF);
    view.set_flow_label(u32::MAX);
    view.set_payload_len(u16::MAX);
    black_box(view.payload_mut().len());
    ipv6_accessors(&view);

    let mut accepted = 1;
    if let (Ok(t), Ok(final_dst)) = (walk, final_dst) {
        let l4 = packet
            .packet()
            .get(t.offset..)
            .expect("the walk stays in the packet");
        if t.has_transport_header() {
            let src = IpAddr::V6(packet.src_addr());
            accepted += transport(t.protocol, l4, &src, &IpAddr::V6(final_dst));
        }
    }
    accepted
}

fn ipv6_accessors<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) {
    black_box((
        p.version(),
        p.traffic_class(),
        p.flow_label(),
        p.payload_len(),
        p.next_header(),
        p.hop_limit(),
    ));
    black_box((p.src_addr(), p.dst_addr(), p.payload(), p.packet()));
    black_box((
        ipv6::is_link_local(&p.src_addr()),
        ipv6::solicited_node(&p.dst_addr()),
    ));
}

fn transport(proto: IpProtocol, l4: &[u8], src: &IpAddr, dst: &IpAddr) -> usize {
    match (proto, src, dst) {
        (IpProtocol::TCP, _, _) => tcp(l4, src, dst),
        (IpProtocol::UDP, _, _) => udp(l4, src, dst),
        (IpProtocol::SCTP, _, _) => sctp(l4),
        (IpProtocol::ICMP, _, _) => icmpv4(l4),
        (IpProtocol::ICMPV6, IpAddr::V6(src), IpAddr::V6(dst)) => icmpv6(l4, src, dst),
        _ => 0,
    }
}

fn tcp(data: &[u8], src: &IpAddr, dst: &IpAddr) -> usize {
    let Ok(packet) = TcpPacket::new_checked(data) else {
        return 0;
    };
    black_box((
        packet.src_port(),
        packet.dst_port(),
        packet.seq_number(),
        packet.ack_number(),
        packet.header_len(),
        packet.flags().to_string(),
        packet.window_len(),
        packet.checksum(),
        packet.urgent_at(),
        packet.options(),
        packet.payload(),
    ));
    let valid = packet.verify_checksum(src, dst);
    assert_eq!(TcpRepr::parse(&packet, src, dst).is_ok(), valid);
    let mut copy = data.to_vec();
    let mut view = TcpPacket::new_checked(&mut copy[..]).expect("same bytes");
    view.set_header_len(60);
    view.set_flags(packet.flags());
    view.fill_checksum(src, dst);
    assert!(view.verify_checksum(src, dst));
    black_box((
        view.options_mut().len(),
        view.payload_mut().len(),
        view.payload().len(),
    ));
    1
}

fn udp(data: &[u8], src: &IpAddr, dst: &IpAddr) -> usize {
    let Ok(packet) = UdpPacket::new_checked(data) else {
        return 0;
    };
    black_box((
        packet.src_port(),
        packet.dst_port(),
        packet.len(),
        packet.checksum(),
    ));
    black_box(packet.payload());
    let valid = packet.verify_checksum(src, dst);
    assert_eq!(UdpRepr::parse(&packet, src, dst).is_ok(), valid);
    let mut copy = data.to_vec();
    let mut view = UdpPacket::new_checked(&mut copy[..]).expect("same bytes");
    view.fill_checksum(src, dst);
    assert!(view.verify_checksum(src, dst));
    view.set_len(u16::MAX);
    black_box((view.payload_mut().len(), view.payload().len()));
    1
}

fn sctp(data: &[u8]) -> usize {
    let Ok(packet) = SctpPacket::new_checked(data) else {
        return 0;
    };
    black_box((
        packet.src_port(),
        packet.dst_port(),
        packet.verification_tag(),
    ));
    black_box((
        packet.checksum(),
        packet.verify_checksum(),
        packet.payload(),
    ));
    for chunk in packet.chunks() {
        black_box(chunk.ok());
    }
    let mut copy = data.to_vec();
    let mut view = SctpPacket::new_checked(&mut copy[..]).expect("same bytes");
    view.fill_checksum();
    assert!(view.verify_checksum());
    black_box(sctp::crc32c(data));
    1
}

fn icmpv4(data: &[u8]) -> usize {
    let Ok(packet) = Icmpv4Packet::new_checked(data) else {
        return 0;
    };
    black_box((
        packet.msg_type(),
        packet.msg_code(),
        packet.checksum(),
        packet.echo_ident(),
        packet.echo_seq_no(),
        packet.next_hop_mtu(),
        packet.data(),
    ));
    let valid = packet.verify_checksum();
    match Icmpv4Repr::parse(&packet) {
        Ok(repr) => {
            assert!(valid);
            let mut out = vec![0u8; repr.buffer_len()];
            let mut view = Icmpv4Packet::new_unchecked(&mut out[..]);
            repr.emit(&mut view);
            black_box(repr.to_string());
        }
        Err(_) => assert!(!valid),
    }
    if packet.msg_type().is_error() {
        black_box(ipv4(packet.data()));
    }
    1
}

fn icmpv6(data: &[u8], src: &Ipv6Addr, dst: &Ipv6Addr) -> usize {
    let Ok(packet) = Icmpv6Packet::new_checked(data) else {
        return 0;
    };
    black_box((
        packet.msg_type(),
        packet.msg_code(),
        packet.checksum(),
        packet.echo_ident(),
        packet.echo_seq_no(),
        packet.mtu(),
        packet.param_pointer(),
        packet.neighbor_flags(),
        packet.target_addr(),
        packet.redirect_dst_addr(),
    ));
    black_box((
        packet.current_hop_limit(),
        packet.router_flags(),
        packet.router_lifetime(),
        packet.reachable_time(),
        packet.retrans_time(),
        packet.data(),
    ));
    for option in packet.ndp_options().flatten() {
        black_box((option.link_layer_addr(), option.mtu()));
    }
    let valid = packet.verify_checksum(src, dst);
    if let Ok(repr) = Icmpv6Repr::parse(&packet, src, dst) {
        assert!(valid);
        let mut out = vec![0u8; repr.buffer_len()];
        let mut view = Icmpv6Packet::new_unchecked(&mut out[..]);
        repr.emit(&mut view, src, dst);
        assert!(view.verify_checksum(src, dst));
        black_box(repr.to_string());
    }
    if packet.msg_type().is_error() {
        black_box(ipv6(packet.data()));
    }
    black_box(icmpv6::ndp_option::SOURCE_LL_ADDR);
    black_box(checksum::data(data));
    1
}
