//! The `parse_frame` fuzz target's body (`dataplane/fuzz/src/lib.rs`) run on stable in the
//! normal test suite: over the golden packets, every truncation and every single-bit flip
//! of them, and proptest input (random bytes, and random bytes behind valid headers).

#[path = "../fuzz/src/lib.rs"]
mod fuzz_target;

use proptest::prelude::*;

use fuzz_target::parse_frame;

/// The golden frames (scapy-built), decoded from the fixture files.
fn corpus() -> Vec<Vec<u8>> {
    let texts = [
        include_str!("fixtures/wire/arp_who_has.hex"),
        include_str!("fixtures/wire/arp_is_at.hex"),
        include_str!("fixtures/wire/dot1q_arp.hex"),
        include_str!("fixtures/wire/ipv4_icmp_echo_request.hex"),
        include_str!("fixtures/wire/ipv4_icmp_echo_reply.hex"),
        include_str!("fixtures/wire/ipv6_icmpv6_echo_request.hex"),
        include_str!("fixtures/wire/ipv6_icmpv6_echo_reply.hex"),
        include_str!("fixtures/wire/icmpv6_ns_sll.hex"),
        include_str!("fixtures/wire/icmpv6_na_tll.hex"),
        include_str!("fixtures/wire/icmpv6_na_unsolicited.hex"),
        include_str!("fixtures/wire/icmpv6_rs_sll.hex"),
        include_str!("fixtures/wire/icmpv6_ra_options.hex"),
        include_str!("fixtures/wire/ipv4_tcp_syn_options.hex"),
        include_str!("fixtures/wire/ipv4_tcp_psh_ack_payload.hex"),
        include_str!("fixtures/wire/ipv6_tcp_fin_ack_urg.hex"),
        include_str!("fixtures/wire/ipv6_udp_hbh_frag.hex"),
        include_str!("fixtures/wire/ipv6_frag_nonfirst.hex"),
        include_str!("fixtures/wire/ipv6_routing_destopt_udp.hex"),
        include_str!("fixtures/wire/ipv4_options_udp.hex"),
        include_str!("fixtures/wire/ipv4_udp_padded.hex"),
        include_str!("fixtures/wire/ipv4_udp_zero_checksum.hex"),
        include_str!("fixtures/wire/icmp_time_exceeded_udp.hex"),
        include_str!("fixtures/wire/icmp_frag_needed_tcp.hex"),
        include_str!("fixtures/wire/icmpv6_packet_too_big.hex"),
        include_str!("fixtures/wire/icmpv6_time_exceeded.hex"),
        include_str!("fixtures/wire/icmpv6_port_unreachable.hex"),
        include_str!("fixtures/wire/sctp_init.hex"),
        include_str!("fixtures/wire/dot1q_ipv4_udp.hex"),
        include_str!("fixtures/wire/qinq_ipv6_tcp.hex"),
    ];
    texts
        .iter()
        .map(|text| {
            let hex = text
                .lines()
                .find_map(|line| line.strip_prefix("hex = "))
                .expect("hex line");
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect()
        })
        .collect()
}

#[test]
fn golden_frames_parse_deeply() {
    for frame in corpus() {
        // Ethernet + L3 + L4 at least, plus the views tried directly on the bytes.
        assert!(parse_frame(&frame) >= 3, "{frame:02x?}");
    }
}

#[test]
fn every_truncation_of_every_golden_frame() {
    for frame in corpus() {
        for len in 0..frame.len() {
            parse_frame(&frame[..len]);
        }
    }
}

#[test]
fn every_bit_flip_of_every_golden_frame() {
    for frame in corpus() {
        let mut copy = frame.clone();
        for byte in 0..copy.len() {
            for bit in 0..8 {
                copy[byte] ^= 1 << bit;
                parse_frame(&copy);
                copy[byte] ^= 1 << bit;
            }
        }
    }
}

#[test]
fn interesting_byte_values_in_every_position() {
    for frame in corpus() {
        let mut copy = frame.clone();
        for byte in 0..copy.len() {
            let original = copy[byte];
            for value in [
                0x00, 0x01, 0x05, 0x0f, 0x40, 0x45, 0x4f, 0x7f, 0x80, 0xfe, 0xff,
            ] {
                copy[byte] = value;
                parse_frame(&copy);
            }
            copy[byte] = original;
        }
    }
}

fn header_prefix() -> impl Strategy<Value = Vec<u8>> {
    // A plausible Ethernet header (any of the EtherTypes we parse, tagged or not) followed
    // by a plausible first byte of the L3 header, so random input gets past the first
    // checks more often.
    let ethertypes = prop::sample::select(vec![
        vec![0x08, 0x00, 0x45],
        vec![0x08, 0x00, 0x4f],
        vec![0x86, 0xdd, 0x60],
        vec![0x08, 0x06, 0x00],
        vec![0x81, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45],
        vec![
            0x88, 0xa8, 0x00, 0x01, 0x81, 0x00, 0x00, 0x02, 0x86, 0xdd, 0x60,
        ],
    ]);
    (prop::collection::vec(any::<u8>(), 12), ethertypes).prop_map(|(mut macs, rest)| {
        macs.extend(rest);
        macs
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes(data in prop::collection::vec(any::<u8>(), 0..200)) {
        parse_frame(&data);
    }

    #[test]
    fn random_bytes_behind_plausible_headers(
        prefix in header_prefix(),
        rest in prop::collection::vec(any::<u8>(), 0..160),
    ) {
        let mut data = prefix;
        data.extend(rest);
        parse_frame(&data);
    }

    #[test]
    fn random_edits_of_golden_frames(
        index in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let corpus = corpus();
        let mut frame = corpus[index.index(corpus.len())].clone();
        for (at, value) in edits {
            let at = at.index(frame.len());
            frame[at] = value;
        }
        let len = frame.len();
        frame.truncate(1 + cut.index(len));
        parse_frame(&frame);
    }
}
