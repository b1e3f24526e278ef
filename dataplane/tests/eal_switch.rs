//! Layer-2 switching through a real worker and `net_ring` ports: a broadcast from a pod
//! is flooded (a copy with `rte_pktmbuf_copy`, the original for the last member) to the
//! other pod unchanged and to the uplink with an 802.1Q tag inserted (`prepend`); a
//! tagged frame from the uplink comes out of the pod untagged (`adj`) and its source is
//! reported for learning; a unicast to a learned host leaves the uplink tagged.

#![cfg(feature = "dpdk")]

mod common;

use common::*;
use ferrule_dataplane::conntrack::CtConfig;
use ferrule_dataplane::counters::WorkerCounters;
use ferrule_dataplane::dpdk::{lcore, Eal, EalConfig, EthPort, Mbuf, Mempool, PortConf, Ring};
use ferrule_dataplane::punt::PuntQueues;
use ferrule_dataplane::switching::{
    retag_vec, FdbAges, FdbHit, LearnEvent, Member, Segment, Switching, NO_SLOT, NO_VLAN,
};
use ferrule_dataplane::wire::EthernetAddress;
use ferrule_dataplane::worker::{self, RxJob, Shared, WorkerPlan};
use std::sync::Arc;
use std::time::{Duration, Instant};

const VLAN: u16 = 100;
const HOST: [u8; 6] = [2, 0, 0, 0, 0x77, 1];

fn hugepages_free() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|n| n >= 64)
}

/// The next frame out of `ring`, waiting up to 10 s.
fn next_out(ring: &Ring) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(m) = ring.dequeue() {
            return m.as_ref().to_vec();
        }
        assert!(Instant::now() < deadline, "no frame came out");
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn send(pool: &Mempool, ring: &Ring, frame: &[u8]) {
    ring.enqueue(Mbuf::from_bytes(pool, frame).expect("mbuf"))
        .expect("room in the ring");
}

/// A broadcast ARP request from `src_mac`/`src_ip` for `target`.
fn who_has(src_mac: [u8; 6], src_ip: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&src_ip);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target);
    f
}

/// The demo snapshot (pod-a 0, pod-b 1, uplink 2) with one segment: the two pods
/// untagged (their MACs static) and the uplink on VLAN 100; `host` learned behind it.
fn switched_snapshot(host: bool) -> ferrule_dataplane::snapshot::Snapshot {
    let mut snap = snapshot();
    let mut sw = Switching::new(
        vec![Segment {
            name: "blue".into(),
            network: 0,
            members: vec![
                Member::untagged(0),
                Member::untagged(1),
                Member {
                    port: 2,
                    vlan: VLAN,
                },
            ],
        }],
        Arc::new(FdbAges::new(4)),
    );
    for (mac, port) in [(POD_A, 0), (POD_B, 1)] {
        let hit = FdbHit {
            member: Member::untagged(port),
            slot: NO_SLOT,
        };
        sw.insert(0, EthernetAddress(mac), hit);
    }
    if host {
        let hit = FdbHit {
            member: Member {
                port: 2,
                vlan: VLAN,
            },
            slot: 0,
        };
        sw.insert(0, EthernetAddress(HOST), hit);
    }
    snap.switching = Arc::new(sw);
    snap
}

#[test]
fn floods_tags_and_untags_through_a_worker() {
    let cfg = EalConfig {
        lcores: vec![0, 1],
        memory_mb: 128,
        hugepages: hugepages_free(),
        file_prefix: format!("ferrule-test-switch-{}", std::process::id()),
        log_level: "error".into(),
        ..EalConfig::default()
    };
    let eal = Eal::init(&cfg, "switch-test").expect("EAL init (run scripts/setup.sh as root)");
    let pool = Arc::new(
        Mempool::new(
            "switch_pool",
            2047,
            64,
            ferrule_dataplane::dpdk::mempool::DEFAULT_DATA_ROOM,
        )
        .expect("mempool"),
    );
    let ring = |name: &str| Ring::new(name, 512).expect("ring");
    let rx: Vec<Ring> = (0..3).map(|p| ring(&format!("sw_rx{p}"))).collect();
    let tx: Vec<Ring> = (0..3).map(|p| ring(&format!("sw_tx{p}"))).collect();
    let mut ports: Vec<EthPort> = (0..3)
        .map(|p| EthPort::from_rings(&format!("net_sw{p}"), &[&rx[p]], &[&tx[p]]).expect("port"))
        .collect();
    for port in &mut ports {
        port.configure(&PortConf::default(), &pool)
            .expect("configure");
        port.start().expect("start");
    }
    let shared = Arc::new(Shared::new(
        switched_snapshot(false),
        PuntQueues::new(64, 16),
        1,
    ));
    for (i, p) in ports.iter().enumerate() {
        shared.set_dpdk_id(i, p.id());
        shared.set_tx_queues(i, p.tx_queues(), 1);
    }
    let counters = Arc::new(WorkerCounters::default());
    let lcore = *lcore::worker_lcores().first().expect("a worker lcore");
    {
        let (s, c, p) = (
            Arc::clone(&shared),
            Arc::clone(&counters),
            Arc::clone(&pool),
        );
        let plan = WorkerPlan {
            worker: 0,
            lcore,
            burst_size: 32,
            workers: 1,
            ct: CtConfig::default(),
            ct_recheck: true,
            idle_sleep_us: 0,
            jobs: (0..3)
                .map(|i| RxJob {
                    port: ports[i].id(),
                    queue: 0,
                    index: i,
                    out: None,
                })
                .collect(),
        };
        lcore::launch(lcore, move || worker::run(&plan, &s, &c, &p)).expect("launch");
    }

    // pod-a asks for pod-b: flooded to pod-b unchanged and to the uplink tagged.
    let arp = who_has(POD_A, [10, 1, 0, 2], [10, 1, 0, 3]);
    send(&pool, &rx[0], &arp);
    assert_eq!(next_out(&tx[1]), arp, "to pod-b unchanged");
    let mut tagged = arp.clone();
    retag_vec(&mut tagged, false, VLAN);
    let out = next_out(&tx[2]);
    assert_eq!(out, tagged);
    let p = etherparse::SlicedPacket::from_ethernet(&out).expect("parses");
    let Some(etherparse::VlanSlice::SingleVlan(v)) = p.vlan else {
        panic!("not tagged once: {:?}", p.vlan)
    };
    assert_eq!(v.vlan_identifier().value(), VLAN);
    assert!(tx[0].dequeue().is_none(), "never back to pod-a");

    // A host on VLAN 100 answers pod-a: untagged on the way, and learned.
    let mut reply = vec![];
    reply.extend_from_slice(&POD_A);
    reply.extend_from_slice(&HOST);
    reply.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 2]);
    reply.extend_from_slice(&HOST);
    reply.extend_from_slice(&[10, 1, 0, 3]);
    reply.extend_from_slice(&POD_A);
    reply.extend_from_slice(&[10, 1, 0, 2]);
    let mut reply_tagged = reply.clone();
    retag_vec(&mut reply_tagged, false, VLAN);
    send(&pool, &rx[2], &reply_tagged);
    assert_eq!(next_out(&tx[0]), reply, "to pod-a untagged");
    let deadline = Instant::now() + Duration::from_secs(5);
    let event = loop {
        if let Some(e) = shared.pop_fdb_learn() {
            break e;
        }
        assert!(Instant::now() < deadline, "no learn event");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(
        event,
        LearnEvent {
            segment: 0,
            mac: EthernetAddress(HOST),
            member: Member {
                port: 2,
                vlan: VLAN
            },
        }
    );

    // Once learned (a new generation), pod-a's unicast to the host leaves tagged.
    shared.snapshot.store(Arc::new(switched_snapshot(true)));
    let mut unicast = reply.clone();
    unicast[..6].copy_from_slice(&HOST);
    unicast[6..12].copy_from_slice(&POD_A);
    unicast[22..28].copy_from_slice(&POD_A);
    unicast[28..32].copy_from_slice(&[10, 1, 0, 2]);
    unicast[32..38].copy_from_slice(&HOST);
    unicast[38..42].copy_from_slice(&[10, 1, 0, 3]);
    send(&pool, &rx[0], &unicast);
    let mut expect = unicast.clone();
    retag_vec(&mut expect, false, VLAN);
    assert_eq!(next_out(&tx[2]), expect);
    assert!(tx[1].dequeue().is_none(), "not flooded");

    assert_eq!(counters.flooded.get(), 1);
    assert_eq!(counters.flood_copies.get(), 2);
    assert_eq!(counters.switched.get(), 2);
    assert_eq!(counters.total_drops(), 0);
    let _ = NO_VLAN;

    shared.stop();
    lcore::wait_all();
    for p in &mut ports {
        p.stop().expect("stop");
    }
    drop(ports);
    drop((rx, tx, shared));
    drop(pool);
    drop(eal);
}
