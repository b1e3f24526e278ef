//! EAL tests on ring-backed virtual ports: crafted frames go through a real worker
//! loop on its own lcore and must come out of the cross-connected port byte-for-byte,
//! with every counter accounted for. One EAL per process, so one test drives all cases.

#![cfg(feature = "dpdk")]

use etherparse::PacketBuilder;
use ferrule_dataplane::conntrack::CtConfig;
use ferrule_dataplane::counters::{DropReason, WorkerCounters};
use ferrule_dataplane::dpdk::{lcore, Eal, EalConfig, EthPort, Mbuf, Mempool, PortConf, Ring};
use ferrule_dataplane::punt::PuntQueues;
use ferrule_dataplane::snapshot::Snapshot;
use ferrule_dataplane::worker::{self, RxJob, Shared, TxTarget, WorkerPlan};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn hugepages_free() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|n| n >= 64)
}

/// A UDP or TCP frame with a distinct payload, built by etherparse.
fn frame(i: u32, tcp: bool) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).ipv4(
        [10, 0, 0, (i % 250) as u8 + 1],
        [10, 1, 0, 1],
        64,
    );
    let payload: Vec<u8> = (0..(i % 200 + 18)).map(|b| (b as u8) ^ (i as u8)).collect();
    let mut out = Vec::new();
    if tcp {
        let b = builder.tcp(1000 + i as u16, 80, i, 65535);
        b.write(&mut out, &payload).expect("build tcp frame");
    } else {
        let b = builder.udp(2000 + i as u16, 53);
        b.write(&mut out, &payload).expect("build udp frame");
    }
    out
}

struct Rig {
    pool: Arc<Mempool>,
    a_in: Ring,
    a_out: Ring,
    b_in: Ring,
    b_out: Ring,
    a: EthPort,
    b: EthPort,
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn run_worker(rig: &Rig, shared: &Arc<Shared>, counters: &Arc<WorkerCounters>) -> u32 {
    let pool = Arc::clone(&rig.pool);
    let lcore = *lcore::worker_lcores().first().expect("a worker lcore");
    let plan = WorkerPlan {
        worker: 0,
        lcore,
        burst_size: 32,
        workers: 1,
        ct: CtConfig {
            max_entries: 1024,
            max_per_zone: 1024,
            ..CtConfig::default()
        },
        ct_recheck: true,
        idle_sleep_us: 0,
        jobs: vec![
            RxJob {
                port: rig.a.id(),
                queue: 0,
                index: 0,
                out: Some(TxTarget {
                    port: rig.b.id(),
                    queue: 0,
                    index: 1,
                }),
            },
            RxJob {
                port: rig.b.id(),
                queue: 0,
                index: 1,
                out: Some(TxTarget {
                    port: rig.a.id(),
                    queue: 0,
                    index: 0,
                }),
            },
        ],
    };
    let (s, c) = (Arc::clone(shared), Arc::clone(counters));
    lcore::launch(lcore, move || worker::run(&plan, &s, &c, &pool)).expect("launch worker");
    lcore
}

fn byte_for_byte(rig: &Rig) {
    let shared = Arc::new(Shared::new(Snapshot::empty(), PuntQueues::new(16, 16), 1));
    let counters = Arc::new(WorkerCounters::default());
    let lcore = run_worker(rig, &shared, &counters);

    let frames_ab: Vec<Vec<u8>> = (0..300).map(|i| frame(i, i % 2 == 0)).collect();
    let frames_ba: Vec<Vec<u8>> = (0..100).map(|i| frame(i + 1000, true)).collect();
    let mut out_b = Vec::new();
    let mut out_a = Vec::new();
    // Feed in chunks that fit the rings; drain as we go.
    let mut fed = 0;
    for chunk in frames_ab.chunks(50) {
        fed += chunk.len();
        for f in chunk {
            let m = Mbuf::from_bytes(&rig.pool, f).expect("mbuf");
            rig.a_in.enqueue(m).expect("room in a_in");
        }
        wait_until("a->b chunk", || {
            while let Some(m) = rig.b_out.dequeue() {
                out_b.push(m.as_ref().to_vec());
            }
            out_b.len() == fed
        });
    }
    for f in &frames_ba {
        rig.b_in
            .enqueue(Mbuf::from_bytes(&rig.pool, f).expect("mbuf"))
            .expect("room in b_in");
    }
    wait_until("all frames out", || {
        while let Some(m) = rig.b_out.dequeue() {
            out_b.push(m.as_ref().to_vec());
        }
        while let Some(m) = rig.a_out.dequeue() {
            out_a.push(m.as_ref().to_vec());
        }
        out_b.len() == frames_ab.len() && out_a.len() == frames_ba.len()
    });
    shared.stop();
    assert_eq!(lcore::wait(lcore), 0);

    assert_eq!(out_b, frames_ab, "a->b frames differ");
    assert_eq!(out_a, frames_ba, "b->a frames differ");
    let bytes_ab: u64 = frames_ab.iter().map(|f| f.len() as u64).sum();
    let bytes_ba: u64 = frames_ba.iter().map(|f| f.len() as u64).sum();
    assert_eq!(counters.ports[0].rx_packets.get(), 300);
    assert_eq!(counters.ports[0].rx_bytes.get(), bytes_ab);
    assert_eq!(counters.ports[1].tx_packets.get(), 300);
    assert_eq!(counters.ports[1].tx_bytes.get(), bytes_ab);
    assert_eq!(counters.ports[1].rx_packets.get(), 100);
    assert_eq!(counters.ports[0].tx_bytes.get(), bytes_ba);
    assert_eq!(counters.rx_packets.get(), 400);
    assert_eq!(counters.tx_packets.get(), 400);
    assert_eq!(counters.total_drops(), 0);
    assert!(counters.polls.get() >= counters.busy_polls.get());
    assert!(counters.busy_polls.get() > 0);
}

fn link_down_and_tx_full(rig: &Rig) {
    let shared = Arc::new(Shared::new(Snapshot::empty(), PuntQueues::new(16, 16), 1));
    let counters = Arc::new(WorkerCounters::default());
    // Port b's link is down: everything from a is dropped as port-down.
    shared.set_link(1, false);
    let lcore = run_worker(rig, &shared, &counters);
    for i in 0..40 {
        rig.a_in
            .enqueue(Mbuf::from_bytes(&rig.pool, &frame(i, false)).expect("mbuf"))
            .expect("room");
    }
    wait_until("port-down drops", || {
        counters.drops[DropReason::PortDown as usize].get() == 40
    });
    assert_eq!(rig.b_out.count(), 0);
    assert_eq!(counters.ports[0].drops.get(), 40);

    // Link back up, b's transmit ring (255 slots) is never drained: the overflow is
    // dropped as tx-full, and nothing is lost from the accounting.
    shared.set_link(1, true);
    let total = 400u64;
    let mut fed = 0u64;
    while fed < total {
        if rig
            .a_in
            .enqueue(Mbuf::from_bytes(&rig.pool, &frame(fed as u32, true)).expect("mbuf"))
            .is_ok()
        {
            fed += 1;
        }
    }
    wait_until("all 400 handled", || {
        counters.ports[0].rx_packets.get() == 440
    });
    shared.stop();
    assert_eq!(lcore::wait(lcore), 0);
    let held = u64::from(rig.b_out.count());
    let tx_full = counters.drops[DropReason::TxFull as usize].get();
    assert_eq!(held, 255, "tx ring holds its capacity");
    assert_eq!(held + tx_full, total);
    assert_eq!(counters.ports[1].tx_packets.get(), held);
    assert_eq!(counters.ports[0].drops.get(), 40 + tx_full);
    while rig.b_out.dequeue().is_some() {}
}

#[test]
fn eal_worker_cross_connect() {
    let cfg = EalConfig {
        lcores: vec![0, 1],
        memory_mb: 128,
        hugepages: hugepages_free(),
        file_prefix: format!("ferrule-test-eal-{}", std::process::id()),
        log_level: "error".into(),
        ..EalConfig::default()
    };
    let eal = Eal::init(&cfg, "eal-test").expect("EAL init (run scripts/setup.sh as root)");
    assert_eq!(lcore::worker_lcores(), vec![1]);

    let pool = Mempool::new(
        "test_pool",
        4095,
        64,
        ferrule_dataplane::dpdk::mempool::DEFAULT_DATA_ROOM,
    )
    .expect("mempool");
    let mbuf_layout = Mbuf::from_bytes(&pool, &frame(7, true)).expect("mbuf");
    assert_eq!(mbuf_layout.as_ref(), frame(7, true).as_slice());
    assert_eq!(mbuf_layout.pkt_len() as usize, frame(7, true).len());
    assert_eq!(mbuf_layout.nb_segs(), 1);
    drop(mbuf_layout);

    let a_in = Ring::new("a_in", 256).expect("ring");
    let a_out = Ring::new("a_out", 256).expect("ring");
    let b_in = Ring::new("b_in", 256).expect("ring");
    let b_out = Ring::new("b_out", 256).expect("ring");
    let mut a = EthPort::from_rings("ring_a", &[&a_in], &[&a_out]).expect("port a");
    let mut b = EthPort::from_rings("ring_b", &[&b_in], &[&b_out]).expect("port b");
    for p in [&mut a, &mut b] {
        p.configure(&PortConf::default(), &pool).expect("configure");
        p.start().expect("start");
        assert!(p.link().up);
    }
    assert_eq!(a.driver(), "net_ring");
    let rig = Rig {
        pool: Arc::new(pool),
        a_in,
        a_out,
        b_in,
        b_out,
        a,
        b,
    };

    byte_for_byte(&rig);
    link_down_and_tx_full(&rig);

    let Rig {
        pool,
        a_in,
        a_out,
        b_in,
        b_out,
        a,
        b,
    } = rig;
    drop((a, b));
    drop((a_in, a_out, b_in, b_out));
    assert_eq!(pool.in_use(), 0, "every mbuf went back to the pool");
    drop(Arc::try_unwrap(pool).expect("no worker holds the pool"));
    drop(eal);
}
