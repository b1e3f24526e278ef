//! ferrule-pktgen's pure parts: frames checked by an independent parser (etherparse:
//! headers, lengths, IPv4 and UDP checksums), the flow walk against the flow formula,
//! the receive accounting, and the NDR/PDR search against a simulated device.

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use ferrule_perf::pktgen::flows::{
    min_frame, AddrRange, FlowSpec, FlowWalk, FrameWriter, PortRange, SizeMix, Tuple,
};
use ferrule_perf::pktgen::measure::{RxTracker, Trial};
use ferrule_perf::pktgen::search::{search, SearchSpec};
use ferrule_perf::pktgen::stamp::{Stamp, TSC_MASK};
use ferrule_perf::pktgen::{parse_mac, parse_rate};
use proptest::prelude::*;
use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};

const SRC_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const DST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn spec(src: &str, dst: &str, sport: &str, dport: &str, flows: u64) -> FlowSpec {
    FlowSpec {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        sport: sport.parse().unwrap(),
        dport: dport.parse().unwrap(),
        flows,
    }
}

fn frame(w: &FrameWriter, size: u16, t: &Tuple, s: &Stamp) -> Vec<u8> {
    let mut out = vec![0xaa; usize::from(FrameWriter::data_len(size))];
    w.write(size, t, s, &mut out);
    out
}

/// Parses `f` with etherparse and checks everything the generator promises.
fn check_frame(f: &[u8], size: u16, t: &Tuple, s: &Stamp, v6: bool) {
    assert_eq!(
        f.len() + 4,
        usize::from(size),
        "mbuf length is size minus FCS"
    );
    let p = SlicedPacket::from_ethernet(f).expect("etherparse parses the frame");
    let eth = p.link.as_ref().unwrap().to_header().unwrap();
    let eth = match eth {
        etherparse::LinkHeader::Ethernet2(e) => e,
        other => panic!("not Ethernet II: {other:?}"),
    };
    assert_eq!((eth.source, eth.destination), (SRC_MAC, DST_MAC));
    let Some(TransportSlice::Udp(udp)) = &p.transport else {
        panic!("not UDP")
    };
    assert_eq!(
        (udp.source_port(), udp.destination_port()),
        (t.sport, t.dport)
    );
    let payload = udp.payload();
    assert_eq!(Stamp::read(payload), Some(*s));
    assert_eq!(Stamp::find(f), Some(*s));
    let udp_header = udp.to_header();
    match &p.net {
        Some(NetSlice::Ipv4(ip)) if !v6 => {
            let h = ip.header().to_header();
            assert_eq!(Ipv4Addr::from(h.source), Ipv4Addr::from(t.src as u32));
            assert_eq!(Ipv4Addr::from(h.destination), Ipv4Addr::from(t.dst as u32));
            assert_eq!(h.header_checksum, h.calc_header_checksum(), "IPv4 checksum");
            assert_eq!(
                udp_header.checksum,
                udp_header.calc_checksum_ipv4(&h, payload).unwrap(),
                "UDP checksum over IPv4"
            );
            assert_eq!(usize::from(h.total_len), f.len() - 14);
        }
        Some(NetSlice::Ipv6(ip)) if v6 => {
            let h = ip.header().to_header();
            assert_eq!(Ipv6Addr::from(h.source), Ipv6Addr::from(t.src));
            assert_eq!(Ipv6Addr::from(h.destination), Ipv6Addr::from(t.dst));
            assert_eq!(
                udp_header.checksum,
                udp_header.calc_checksum_ipv6(&h, payload).unwrap(),
                "UDP checksum over IPv6"
            );
            assert_eq!(usize::from(h.payload_length), f.len() - 14 - 40);
        }
        other => panic!("wrong network layer: {other:?}"),
    }
    assert_eq!(usize::from(udp_header.length), payload.len() + 8);
}

proptest! {
    #[test]
    fn frames_parse_with_valid_checksums(
        v6 in any::<bool>(),
        size in 84u16..1600,
        src in any::<u128>(), dst in any::<u128>(),
        sport in any::<u16>(), dport in any::<u16>(),
        flow in any::<u32>(), seq in any::<u32>(), tsc in any::<u64>(), trial in any::<u16>(),
    ) {
        let mix: SizeMix = size.to_string().parse().unwrap();
        let w = FrameWriter::new(SRC_MAC, DST_MAC, v6, &mix).unwrap();
        let mask = if v6 { u128::MAX } else { u128::from(u32::MAX) };
        let t = Tuple { src: src & mask, dst: dst & mask, sport, dport };
        let s = Stamp { flow, seq, tsc: tsc & TSC_MASK, trial };
        check_frame(&frame(&w, size, &t, &s), size, &t, &s, v6);
    }
}

#[test]
fn smallest_frames_fit_the_stamp() {
    assert_eq!(min_frame(false), 64, "a 64-byte IPv4 frame holds the stamp");
    let w = FrameWriter::new(SRC_MAC, DST_MAC, false, &"64".parse().unwrap()).unwrap();
    let t = Tuple {
        src: 0x0a00_0001,
        dst: 0x0a00_0102,
        sport: 1024,
        dport: 5001,
    };
    let s = Stamp {
        flow: 7,
        seq: 9,
        tsc: 123_456_789,
        trial: 3,
    };
    check_frame(&frame(&w, 64, &t, &s), 64, &t, &s, false);
    let err = FrameWriter::new(SRC_MAC, DST_MAC, true, &"64".parse().unwrap()).unwrap_err();
    assert!(err.to_string().contains("at least 84"), "{err}");
    assert!(FrameWriter::new(SRC_MAC, DST_MAC, false, &"9019".parse().unwrap()).is_err());
}

#[test]
fn imix_is_seven_four_one() {
    let m: SizeMix = "imix".parse().unwrap();
    let count = |s| m.pattern.iter().filter(|&&x| x == s).count();
    assert_eq!((count(64), count(594), count(1518)), (7, 4, 1));
    assert!((m.mean() - (7.0 * 64.0 + 4.0 * 594.0 + 1518.0) / 12.0).abs() < 1e-9);
    assert_eq!(
        "64, 1518".parse::<SizeMix>().unwrap().pattern,
        vec![64, 1518]
    );
    assert!("".parse::<SizeMix>().is_err());
    assert!("jumbo".parse::<SizeMix>().is_err());
}

#[test]
fn ranges_parse_and_refuse_nonsense() {
    let r: AddrRange = "10.0.0.0/22".parse().unwrap();
    assert_eq!((r.first, r.count, r.v6), (0x0a00_0000, 1024, false));
    let r: AddrRange = "10.0.0.5-10.0.1.4".parse().unwrap();
    assert_eq!((r.first, r.count), (0x0a00_0005, 256));
    let r: AddrRange = "fd00::1".parse().unwrap();
    assert_eq!((r.count, r.v6), (1, true));
    let r: AddrRange = "fd00::/64".parse().unwrap();
    assert_eq!(r.count, 1u128 << 64);
    assert!("10.0.0.9-10.0.0.1".parse::<AddrRange>().is_err());
    assert!("10.0.0.1-fd00::1".parse::<AddrRange>().is_err());
    assert!("10.0.0.256".parse::<AddrRange>().is_err());
    let p: PortRange = "1024-65535".parse().unwrap();
    assert_eq!((p.first, p.count), (1024, 64512));
    assert!("70000".parse::<PortRange>().is_err());
    assert!("9-1".parse::<PortRange>().is_err());
    assert!(spec("10.0.0.1", "fd00::1", "1", "1", 1).validate().is_err());
    let too_many = spec("10.0.0.1", "10.0.0.2", "1-10", "1-10", 101);
    let err = too_many.validate().unwrap_err().to_string();
    assert!(err.contains("only 100 combinations"), "{err}");
    assert!(spec("10.0.0.1", "10.0.0.2", "1-10", "1-10", 100)
        .validate()
        .is_ok());
    assert!(spec("10.0.0.1", "10.0.0.2", "1", "1", 0)
        .validate()
        .is_err());
    assert_eq!(parse_rate("14.2M").unwrap(), 14.2e6);
    assert_eq!(parse_rate("500k").unwrap(), 5e5);
    assert_eq!(parse_rate("250000").unwrap(), 2.5e5);
    assert!(parse_rate("-1M").is_err() && parse_rate("fast").is_err());
    assert_eq!(
        parse_mac("02:00:00:0a:01:0B").unwrap(),
        [2, 0, 0, 10, 1, 11]
    );
    assert!(parse_mac("02:00:00:0a:01").is_err() && parse_mac("zz:00:00:00:00:00").is_err());
}

#[test]
fn the_walk_visits_each_flow_once_per_round_in_the_documented_order() {
    let s = spec("10.0.0.1-10.0.0.3", "10.1.0.0/31", "1000-1004", "53-54", 50);
    s.validate().unwrap();
    let mut walk = FlowWalk::new(&s);
    let mut seen = HashSet::new();
    for i in 0..s.flows {
        let (flow, t) = walk.next_flow();
        assert_eq!(u64::from(flow), i);
        assert_eq!(t, s.tuple(i), "the walk agrees with the flow formula");
        assert!((1000..=1004).contains(&t.sport) && (53..=54).contains(&t.dport));
        assert!((0x0a00_0001..=0x0a00_0003).contains(&t.src));
        assert!((0x0a01_0000..=0x0a01_0001).contains(&t.dst));
        assert!(seen.insert(t), "flow {i} repeats {t:?}");
    }
    // Source port fastest, then destination port, then source address.
    assert_eq!(s.tuple(1).sport, 1001);
    assert_eq!((s.tuple(5).sport, s.tuple(5).dport), (1000, 54));
    assert_eq!(s.tuple(10).src, 0x0a00_0002);
    assert_eq!(s.tuple(30).dst, 0x0a01_0001);
    // Round two starts over.
    assert_eq!(walk.next_flow(), (0, s.tuple(0)));
}

fn received(flow: u32, seq: u32, tsc: u64) -> Vec<u8> {
    received_in(0, flow, seq, tsc)
}

fn received_in(trial: u16, flow: u32, seq: u32, tsc: u64) -> Vec<u8> {
    let w = FrameWriter::new(SRC_MAC, DST_MAC, false, &"64".parse().unwrap()).unwrap();
    let t = Tuple {
        src: 1,
        dst: 2,
        sport: 3,
        dport: 4,
    };
    frame(
        &w,
        64,
        &t,
        &Stamp {
            flow,
            seq,
            tsc,
            trial,
        },
    )
}

#[test]
fn the_receiver_counts_loss_reordering_foreign_frames_and_latency() {
    let mut rx = RxTracker::new(2, 1_000_000_000, 1);
    // Flow 0: 0, 1, 3, 2 (2 late), 4. Flow 1: 0, 2 (1 lost). A frame of a flow never
    // sent and one without a stamp are foreign.
    for (flow, seq, lat) in [
        (0, 0, 100),
        (0, 1, 200),
        (0, 3, 300),
        (0, 2, 400),
        (1, 0, 500),
        (0, 4, 600),
        (1, 2, 700),
    ] {
        rx.record(&received(flow, seq, 1000), 1000 + lat);
    }
    rx.record(&received(5, 0, 1000), 2000);
    let mut junk = received(0, 5, 1000);
    junk[42] ^= 0xff; // the magic
    rx.record(&junk, 2000);
    assert_eq!((rx.packets, rx.reordered, rx.foreign), (7, 1, 2));
    assert_eq!(rx.bytes, 7 * 64);
    // Eight sent (flow 0: 0-4, flow 1: 0-2): flow 1 packet 1 never arrived.
    let t = Trial::new(Some(1e6), 1.0, 8, 8 * 64, 0, &rx, 1_000_000_000, true);
    assert_eq!((t.lost, t.rx_packets), (1, 7));
    assert!((t.loss_ratio - 0.125).abs() < 1e-12);
    let l = t.latency.unwrap();
    // 1 GHz: cycles are nanoseconds.
    assert_eq!((l.min_ns, l.max_ns), (100.0, 700.0));
    assert!((l.p50_ns - 400.0).abs() <= 1.0, "{l:?}");
    assert!((t.rx_gbps - 7.0 * 84.0 * 8.0 / 1e9).abs() < 1e-12);
    let cdf = &t.latency_cdf;
    assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    assert!((cdf.last().unwrap().1 - 1.0).abs() < 1e-9);
    // A packet of an earlier trial arriving in the next one is late, not counted; the
    // flows' sequence state carries over, so an old sequence number is reordered.
    rx.start_trial(1);
    rx.record(&received_in(0, 0, 5, 0), 10);
    assert_eq!((rx.packets, rx.late, rx.reordered), (0, 1, 0));
    rx.record(&received_in(1, 0, 1, 0), 10);
    assert_eq!((rx.packets, rx.reordered), (1, 1));
    // Transmit times keep 48 bits: a latency across the wrap is still right.
    rx.start_trial(2);
    rx.record(&received_in(2, 1, 3, TSC_MASK - 9), (1 << 48) + 20);
    let l = rx.latency(1_000_000_000).unwrap();
    assert_eq!((l.min_ns, rx.late), (30.0, 0));
}

#[test]
fn stamps_survive_vlan_tags_and_rewritten_headers() {
    let mut f = received(3, 4, 5);
    // NAT and routing: new addresses, ports, TTL and MACs; the stamp is in the payload.
    f[0..12].copy_from_slice(&[9; 12]);
    f[22] = 1;
    f[26..38].copy_from_slice(&[7; 12]);
    let s = Stamp::find(&f).unwrap();
    assert_eq!((s.flow, s.seq, s.tsc), (3, 4, 5));
    let mut tagged = f[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
    tagged.extend_from_slice(&f[12..]);
    assert_eq!(Stamp::find(&tagged), Some(s));
    let mut frag = f.clone();
    frag[20] = 0x20; // more fragments
    assert_eq!(Stamp::find(&frag), None);
    assert_eq!(Stamp::find(&f[..40]), None);
}

/// A device that forwards up to `capacity` packets/s and drops the rest; the
/// generator reaches `ceiling`; the port takes at most `port_max` (back-pressure).
fn simulated(
    capacity: f64,
    ceiling: f64,
    port_max: f64,
) -> impl FnMut(Option<f64>) -> Result<Trial, ()> {
    move |target| {
        let made = target.unwrap_or(ceiling).min(ceiling);
        let offered = made.min(port_max);
        let pushed_back = (made - offered) as u64;
        let delivered = offered.min(capacity);
        let mut rx = RxTracker::new(1, 1000, 1);
        rx.packets = delivered as u64;
        Ok(Trial::new(
            target,
            1.0,
            offered as u64,
            0,
            pushed_back,
            &rx,
            1_000_000_000,
            false,
        ))
    }
}

#[test]
fn the_search_finds_the_device_rate_within_the_resolution() {
    let spec = SearchSpec::default();
    let s = search(&spec, simulated(7.3e6, 20e6, f64::MAX)).unwrap();
    assert!(!s.generator_limited);
    assert!(
        s.rate_pps <= 7.3e6 && s.rate_pps >= 7.3e6 * 0.98,
        "{}",
        s.rate_pps
    );
    assert_eq!(s.ceiling_pps, 20e6);
    assert!(s.steps.len() <= spec.max_trials);
    assert!(s.at_rate.as_ref().unwrap().lost == 0);
    // PDR: 10% loss allowed → up to capacity / 0.9.
    let pdr = SearchSpec {
        loss_threshold: 0.1,
        ..spec
    };
    let s = search(&pdr, simulated(9e6, 20e6, f64::MAX)).unwrap();
    assert!(s.rate_pps <= 10e6 && s.rate_pps > 9.7e6, "{}", s.rate_pps);
    // The generator is the bottleneck: said so, and the rate is the ceiling.
    let s = search(&spec, simulated(30e6, 20e6, f64::MAX)).unwrap();
    assert!(s.generator_limited && s.rate_pps == 20e6 && s.steps.len() == 1);
    // A port that pushes back at 5 Mpps (a full virtio ring) loses nothing: the rate is
    // what it took, and it is the device's limit, not the generator's.
    let s = search(&spec, simulated(30e6, 20e6, 5e6)).unwrap();
    assert!(!s.generator_limited && s.rate_pps == 5e6, "{s:?}");
    // Asked for more than the port takes, a trial fails even though nothing was lost.
    let mut dev = simulated(30e6, 20e6, 5e6);
    let t = dev(Some(6e6)).unwrap();
    assert_eq!(t.lost, 0);
    assert!(!spec.passes(Some(6e6), &t) && spec.passes(Some(4.99e6), &dev(Some(4.99e6)).unwrap()));
    // Nothing gets through: rate 0, no passing trial.
    let s = search(&spec, simulated(0.0, 20e6, f64::MAX)).unwrap();
    assert_eq!(s.rate_pps, 0.0);
    assert!(s.at_rate.is_none());
}
