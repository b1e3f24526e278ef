//! Malformed input through the public API: every header truncated at every length, and
//! each field that can lie (IHL < 5, total length past the buffer, TCP data offset < 5,
//! UDP length, zero-length NDP options, IPv6 extension chains past the buffer or longer
//! than eight headers). Each must be an `Err` with the documented kind — never a panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ferrule_dataplane::wire::{
    ipv6, l3_offset, sctp::SctpPacket, ArpPacket, ArpRepr, Error, EthernetFrame, Icmpv4Packet,
    Icmpv6Packet, Icmpv6Repr, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, TcpPacket, UdpPacket,
    VlanHeader,
};

fn ipv4_packet(payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![
        0x45, 0x00, 0x00, 0x00, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 10, 0, 0, 1, 10, 0,
        0, 2,
    ];
    bytes.extend_from_slice(payload);
    let total = bytes.len() as u16;
    bytes[2..4].copy_from_slice(&total.to_be_bytes());
    Ipv4Packet::new_unchecked(&mut bytes[..]).fill_checksum();
    bytes
}

fn ipv6_packet(next: IpProtocol, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x60, 0, 0, 0, 0, 0, next.0, 64];
    bytes.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    bytes.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    bytes.extend_from_slice(payload);
    let len = (bytes.len() - 40) as u16;
    bytes[4..6].copy_from_slice(&len.to_be_bytes());
    bytes
}

const UDP: [u8; 12] = [0x04, 0xd2, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, 1, 2, 3, 4];
const TCP: [u8; 24] = [
    0x04, 0xd2, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x60, 0x02, 0xff, 0xff, 0, 0, 0, 0, 2, 4, 5,
    0xb4,
];

/// Each view's `new_checked` over every strict prefix of a valid header: `Truncated`.
#[test]
fn truncated_headers_at_every_length() {
    let frame = [&[0xffu8; 12][..], &[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]].concat();
    for len in 0..14 {
        assert_eq!(
            EthernetFrame::new_checked(&frame[..len]).err(),
            Some(Error::Truncated)
        );
    }
    for len in 0..frame.len() {
        assert_eq!(
            l3_offset(&frame[..len]).err(),
            Some(Error::Truncated),
            "{len}"
        );
    }
    for len in 0..4 {
        assert_eq!(
            VlanHeader::new_checked(&frame[14..14 + len]).err(),
            Some(Error::Truncated)
        );
    }
    let arp = [
        0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ];
    for len in 0..arp.len() {
        assert_eq!(
            ArpPacket::new_checked(&arp[..len]).err(),
            Some(Error::Truncated),
            "{len}"
        );
    }
    let v4 = ipv4_packet(&UDP);
    for len in 0..v4.len() {
        assert_eq!(
            Ipv4Packet::new_checked(&v4[..len]).err(),
            Some(Error::Truncated),
            "{len}"
        );
    }
    let v6 = ipv6_packet(IpProtocol::UDP, &UDP);
    for len in 0..v6.len() {
        assert_eq!(
            Ipv6Packet::new_checked(&v6[..len]).err(),
            Some(Error::Truncated),
            "{len}"
        );
    }
    for len in 0..TCP.len() {
        assert_eq!(
            TcpPacket::new_checked(&TCP[..len]).err(),
            Some(Error::Truncated),
            "{len}"
        );
    }
    for len in 0..UDP.len() {
        assert_eq!(
            UdpPacket::new_checked(&UDP[..len]).err(),
            Some(Error::Truncated),
            "{len}"
        );
    }
    for len in 0..12 {
        assert_eq!(
            SctpPacket::new_checked(&[0u8; 12][..len]).err(),
            Some(Error::Truncated)
        );
    }
    for len in 0..8 {
        let icmp = [8u8, 0, 0, 0, 0, 1, 0, 1];
        assert_eq!(
            Icmpv4Packet::new_checked(&icmp[..len]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Icmpv6Packet::new_checked(&icmp[..len]).err(),
            Some(Error::Truncated)
        );
    }
    // NS/NA need their 24-byte fixed part, RA 16, Redirect 40.
    for (msg_type, min) in [(135u8, 24), (136, 24), (134, 16), (137, 40), (133, 8)] {
        let mut bytes = vec![0u8; min];
        bytes[0] = msg_type;
        assert!(Icmpv6Packet::new_checked(&bytes[..]).is_ok(), "{msg_type}");
        for len in 0..min {
            assert_eq!(
                Icmpv6Packet::new_checked(&bytes[..len]).err(),
                Some(Error::Truncated),
                "type {msg_type} length {len}"
            );
        }
    }
}

#[test]
fn ipv4_lies() {
    let good = ipv4_packet(&UDP);
    for ihl in 0..5u8 {
        let mut bad = good.clone();
        bad[0] = 0x40 | ihl;
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).err(),
            Some(Error::Malformed),
            "{ihl}"
        );
        assert_eq!(
            Ipv4Packet::new_quoted(&bad[..]).err(),
            Some(Error::Malformed),
            "{ihl}"
        );
    }
    for version in [0u8, 6, 15] {
        let mut bad = good.clone();
        bad[0] = (version << 4) | 5;
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).err(),
            Some(Error::Malformed)
        );
    }
    // IHL past the buffer.
    let mut bad = good.clone();
    bad[0] = 0x4f;
    assert_eq!(
        Ipv4Packet::new_checked(&bad[..]).err(),
        Some(Error::Truncated)
    );
    // Total length past the buffer, and below the header length.
    for (total, err) in [
        (33u16, Error::Truncated),
        (0xffff, Error::Truncated),
        (19, Error::Malformed),
        (0, Error::Malformed),
    ] {
        let mut bad = good.clone();
        bad[2..4].copy_from_slice(&total.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).err(),
            Some(err),
            "total {total}"
        );
    }
    // A bad header checksum is fine for the view, not for the repr.
    let mut bad = good.clone();
    bad[10] ^= 0x55;
    let packet = Ipv4Packet::new_checked(&bad[..]).unwrap();
    assert!(!packet.verify_checksum());
    assert_eq!(Ipv4Repr::parse(&packet).err(), Some(Error::Malformed));
}

#[test]
fn tcp_data_offset_below_five() {
    for offset in 0..5u8 {
        let mut bad = TCP;
        bad[12] = offset << 4;
        assert_eq!(
            TcpPacket::new_checked(&bad[..]).err(),
            Some(Error::Malformed),
            "{offset}"
        );
    }
    let mut past = TCP;
    past[12] = 0x70; // 28 bytes of header in 24
    assert_eq!(
        TcpPacket::new_checked(&past[..]).err(),
        Some(Error::Truncated)
    );
}

#[test]
fn udp_length_lies() {
    for len in 0..8u16 {
        let mut bad = UDP;
        bad[4..6].copy_from_slice(&len.to_be_bytes());
        assert_eq!(
            UdpPacket::new_checked(&bad[..]).err(),
            Some(Error::Malformed),
            "{len}"
        );
    }
    let mut bad = UDP;
    bad[4..6].copy_from_slice(&13u16.to_be_bytes());
    assert_eq!(
        UdpPacket::new_checked(&bad[..]).err(),
        Some(Error::Truncated)
    );
}

#[test]
fn arp_not_ethernet_ipv4() {
    let mut arp = vec![0, 6, 8, 0, 6, 4, 0, 1];
    arp.resize(28, 0);
    let packet = ArpPacket::new_checked(&arp[..]).unwrap();
    assert_eq!(ArpRepr::parse(&packet).err(), Some(Error::Malformed));
    // Declared address lengths past the buffer.
    let mut long = arp.clone();
    long[4] = 0xff;
    assert_eq!(
        ArpPacket::new_checked(&long[..]).err(),
        Some(Error::Truncated)
    );
}

fn ns_with_option(option: &[u8]) -> Vec<u8> {
    let mut bytes = vec![135, 0, 0, 0, 0, 0, 0, 0];
    bytes.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    bytes.extend_from_slice(option);
    let src = Ipv6Addr::LOCALHOST;
    Icmpv6Packet::new_unchecked(&mut bytes[..]).fill_checksum(&src, &src);
    bytes
}

#[test]
fn ndp_option_lies() {
    let src = Ipv6Addr::LOCALHOST;
    // Zero length: Malformed (RFC 4861 §4.6), for every option type.
    for option_type in [1u8, 2, 3, 5, 200] {
        let bytes = ns_with_option(&[option_type, 0, 1, 2, 3, 4, 5, 6]);
        let packet = Icmpv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.ndp_options().next(), Some(Err(Error::Malformed)));
        assert_eq!(
            packet.ndp_options().count(),
            1,
            "the iterator stops after the error"
        );
        assert_eq!(
            Icmpv6Repr::parse(&packet, &src, &src).err(),
            Some(Error::Malformed)
        );
    }
    // A zero-length option after a good one.
    let bytes = ns_with_option(&[1, 1, 2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0]);
    let packet = Icmpv6Packet::new_checked(&bytes[..]).unwrap();
    let options: Vec<_> = packet.ndp_options().collect();
    assert!(options[0].is_ok());
    assert_eq!(options[1], Err(Error::Malformed));
    assert_eq!(
        Icmpv6Repr::parse(&packet, &src, &src).err(),
        Some(Error::Malformed)
    );
    // Length past the message, and a dangling byte.
    for option in [&[1u8, 2, 2, 0, 0, 0, 0, 1][..], &[1], &[1, 1, 2, 0]] {
        let bytes = ns_with_option(option);
        let packet = Icmpv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            packet.ndp_options().last(),
            Some(Err(Error::Truncated)),
            "{option:?}"
        );
        assert_eq!(
            Icmpv6Repr::parse(&packet, &src, &src).err(),
            Some(Error::Truncated)
        );
    }
}

fn ext(next: IpProtocol, len8: u8) -> Vec<u8> {
    let mut bytes = vec![0u8; (usize::from(len8) + 1) * 8];
    bytes[0] = next.0;
    bytes[1] = len8;
    bytes
}

#[test]
fn ipv6_extension_chain_lies() {
    let walk = |bytes: &[u8]| ipv6::transport(&Ipv6Packet::new_checked(bytes).unwrap());
    // A header whose length runs past the payload.
    for len8 in 1..=255u8 {
        let mut e = ext(IpProtocol::UDP, 0);
        e[1] = len8;
        let bytes = ipv6_packet(IpProtocol::IPV6_OPTS, &e);
        assert_eq!(walk(&bytes).err(), Some(Error::Truncated), "{len8}");
    }
    // A chain cut in the middle of every header (payload length consistent with the cut).
    let mut chain = ext(IpProtocol::IPV6_ROUTE, 1);
    chain.extend(ext(IpProtocol::IPV6_FRAG, 0));
    chain.extend([IpProtocol::AH.0, 0, 0, 0, 0, 0, 0, 1]);
    chain.extend([IpProtocol::UDP.0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
    let full = ipv6_packet(IpProtocol::HOP_BY_HOP, &chain);
    assert_eq!(walk(&full).unwrap().offset, full.len());
    for cut in 0..chain.len() {
        let bytes = ipv6_packet(IpProtocol::HOP_BY_HOP, &chain[..cut]);
        assert_eq!(walk(&bytes).err(), Some(Error::Truncated), "cut {cut}");
        assert_eq!(
            ipv6::pseudo_header_dst(&Ipv6Packet::new_checked(&bytes[..]).unwrap()).err(),
            Some(Error::Truncated)
        );
    }
    // More than eight extension headers.
    for n in 1..=12usize {
        let mut chain = Vec::new();
        for i in 0..n {
            let next = if i + 1 == n {
                IpProtocol::TCP
            } else {
                IpProtocol::IPV6_OPTS
            };
            chain.extend(ext(next, 0));
        }
        let bytes = ipv6_packet(IpProtocol::IPV6_OPTS, &chain);
        let result = walk(&bytes);
        if n <= 8 {
            assert_eq!(result.unwrap().offset, 40 + 8 * n, "{n} headers");
        } else {
            assert_eq!(result.err(), Some(Error::Malformed), "{n} headers");
        }
    }
    // A loop of headers pointing at themselves ends at the limit too.
    let mut chain = Vec::new();
    for _ in 0..100 {
        chain.extend(ext(IpProtocol::IPV6_ROUTE, 0));
    }
    let bytes = ipv6_packet(IpProtocol::IPV6_ROUTE, &chain);
    assert_eq!(walk(&bytes).err(), Some(Error::Malformed));
    // Payload length past the buffer, wrong version.
    let mut bad = ipv6_packet(IpProtocol::UDP, &UDP);
    bad[5] += 1;
    assert_eq!(
        Ipv6Packet::new_checked(&bad[..]).err(),
        Some(Error::Truncated)
    );
    bad[0] = 0x40;
    assert_eq!(
        Ipv6Packet::new_checked(&bad[..]).err(),
        Some(Error::Malformed)
    );
}

/// Views built from the quoted packet of an ICMP error tolerate the cut, and a packet that
/// passed `new_checked` answers every accessor whatever its bytes say.
#[test]
fn accessors_after_new_checked_never_panic() {
    let v4 = ipv4_packet(&UDP);
    let quoted = Ipv4Packet::new_quoted(&v4[..24]).unwrap();
    assert_eq!(quoted.payload().len(), 4);
    let src = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    // Minimal buffers of every view, every byte 0xff.
    let ones = [0xffu8; 64];
    for len in 0..ones.len() {
        let data = &ones[..len];
        if let Ok(p) = TcpPacket::new_checked(data) {
            let _ = (
                p.options(),
                p.payload(),
                p.flags().to_string(),
                p.verify_checksum(&src, &src),
            );
        }
        if let Ok(p) = UdpPacket::new_checked(data) {
            let _ = (p.payload(), p.verify_checksum(&src, &src));
        }
        if let Ok(p) = Icmpv6Packet::new_checked(data) {
            let _ = (
                p.target_addr(),
                p.redirect_dst_addr(),
                p.retrans_time(),
                p.ndp_options().count(),
            );
        }
        if let Ok(p) = SctpPacket::new_checked(data) {
            let _ = (p.chunks().count(), p.verify_checksum());
        }
    }
}
