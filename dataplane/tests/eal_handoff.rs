//! Connection ownership across two real workers: worker 0 polls pod-a, worker 1 polls
//! the uplink, so the two directions of every masqueraded connection arrive on
//! different workers. Each packet must be handed to the worker that owns its
//! connection (the one whose table holds it, named by the SNAT port), translated
//! there, and come out right; both workers must have handed packets over. Pod-a has
//! one transmit queue for the two workers: they share it.

#![cfg(feature = "dpdk")]

mod common;

use common::*;
use ferrule_dataplane::conntrack::CtConfig;
use ferrule_dataplane::counters::WorkerCounters;
use ferrule_dataplane::ct_requests::{CtFilter, CtReply, CtRequest};
use ferrule_dataplane::dpdk::{lcore, Eal, EalConfig, EthPort, Mbuf, Mempool, PortConf, Ring};
use ferrule_dataplane::punt::PuntQueues;
use ferrule_dataplane::worker::{self, RxJob, Shared, WorkerPlan};
use std::sync::Arc;
use std::time::{Duration, Instant};

const POD_A_IP: [u8; 4] = [10, 1, 0, 2];
const REMOTE: [u8; 4] = [8, 8, 8, 8];
const FLOWS: u16 = 32;

fn hugepages_free() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|n| n >= 64)
}

/// The first frame out of either transmit ring, waiting up to 10 s.
fn next_out(rings: &[Ring]) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for r in rings {
            if let Some(m) = r.dequeue() {
                return m.as_ref().to_vec();
            }
        }
        assert!(Instant::now() < deadline, "no frame came out");
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn send(pool: &Mempool, ring: &Ring, frame: &[u8]) {
    ring.enqueue(Mbuf::from_bytes(pool, frame).expect("mbuf"))
        .expect("room in the ring");
}

fn plan(worker: usize, lcore: u32, port: u16, index: usize) -> WorkerPlan {
    WorkerPlan {
        worker,
        lcore,
        burst_size: 32,
        workers: 2,
        ct: CtConfig {
            max_entries: 4096,
            max_per_zone: 4096,
            ..CtConfig::default()
        },
        ct_recheck: true,
        idle_sleep_us: 0,
        jobs: vec![RxJob {
            port,
            queue: 0,
            index,
            out: None,
        }],
    }
}

#[test]
fn both_directions_meet_on_the_owning_worker() {
    let cfg = EalConfig {
        lcores: vec![0, 1],
        memory_mb: 128,
        hugepages: hugepages_free(),
        file_prefix: format!("ferrule-test-handoff-{}", std::process::id()),
        log_level: "error".into(),
        ..EalConfig::default()
    };
    let eal = Eal::init(&cfg, "handoff-test").expect("EAL init (run scripts/setup.sh as root)");
    let pool = Arc::new(
        Mempool::new(
            "handoff_pool",
            4095,
            64,
            ferrule_dataplane::dpdk::mempool::DEFAULT_DATA_ROOM,
        )
        .expect("mempool"),
    );
    // Ports 0 (pod-a), 1 (pod-b, unused) and 2 (uplink): one receive ring each; the
    // uplink has a transmit ring per worker, pod-a only one, which the two workers
    // share (each takes its lock).
    let ring = |name: &str| Ring::new(name, 512).expect("ring");
    let rx: Vec<Ring> = (0..3).map(|p| ring(&format!("ho_rx{p}"))).collect();
    let tx: Vec<Vec<Ring>> = (0..3)
        .map(|p| {
            let queues = if p == 0 { 1 } else { 2 };
            (0..queues)
                .map(|q| ring(&format!("ho_tx{p}_{q}")))
                .collect()
        })
        .collect();
    let mut ports: Vec<EthPort> = (0..3)
        .map(|p| {
            let txr: Vec<&Ring> = tx[p].iter().collect();
            EthPort::from_rings(&format!("net_ho{p}"), &[&rx[p]], &txr).expect("port")
        })
        .collect();
    for (p, port) in ports.iter_mut().enumerate() {
        let conf = PortConf {
            tx_queues: tx[p].len() as u16,
            ..PortConf::default()
        };
        port.configure(&conf, &pool).expect("configure");
        port.start().expect("start");
    }
    let shared = Arc::new(Shared::new(
        snat_snapshot(vec![(61000, 61999)]),
        PuntQueues::new(64, 16),
        2,
    ));
    for (i, p) in ports.iter().enumerate() {
        shared.set_dpdk_id(i, p.id());
        shared.set_tx_queues(i, p.tx_queues(), 2);
    }
    let counters = [
        Arc::new(WorkerCounters::default()),
        Arc::new(WorkerCounters::default()),
    ];
    // Worker 0 on the EAL's worker lcore, worker 1 on a plain thread (ring ports and
    // the mempool work from any thread).
    let lcore = *lcore::worker_lcores().first().expect("a worker lcore");
    {
        let (s, c, p) = (
            Arc::clone(&shared),
            Arc::clone(&counters[0]),
            Arc::clone(&pool),
        );
        let plan0 = plan(0, lcore, ports[0].id(), 0);
        lcore::launch(lcore, move || worker::run(&plan0, &s, &c, &p)).expect("launch");
    }
    let thread = {
        let (s, c, p) = (
            Arc::clone(&shared),
            Arc::clone(&counters[1]),
            Arc::clone(&pool),
        );
        let plan1 = plan(1, u32::MAX, ports[2].id(), 2);
        std::thread::spawn(move || worker::run(&plan1, &s, &c, &p))
    };

    for k in 0..FLOWS {
        let sport = 40000 + k;
        let syn = tcp(
            (POD_A, GW_MAC_A),
            POD_A_IP,
            REMOTE,
            sport,
            443,
            1000,
            Tcp::Syn,
            &[],
        );
        send(&pool, &rx[0], &syn);
        let out = next_out(&tx[2]);
        assert_eq!(&out[26..30], &NODE, "flow {k}: masqueraded");
        let nat_port = u16::from_be_bytes([out[34], out[35]]);
        assert!((61000..=61999).contains(&nat_port));
        let synack = tcp(
            (ROUTER, UPLINK_MAC),
            REMOTE,
            NODE,
            443,
            nat_port,
            5000,
            Tcp::SynAck(1001),
            &[],
        );
        send(&pool, &rx[2], &synack);
        let back = next_out(&tx[0]);
        assert_eq!(&back[30..34], &POD_A_IP, "flow {k}: translated back");
        assert_eq!(u16::from_be_bytes([back[36], back[37]]), sport);
        let ack = tcp(
            (POD_A, GW_MAC_A),
            POD_A_IP,
            REMOTE,
            sport,
            443,
            1001,
            Tcp::Ack(5001),
            b"data",
        );
        send(&pool, &rx[0], &ack);
        let out = next_out(&tx[2]);
        assert_eq!(
            u16::from_be_bytes([out[34], out[35]]),
            nat_port,
            "flow {k}: same mapping"
        );
    }

    // Every connection sits in the table of the worker its SNAT port names.
    let replies = shared
        .ask_workers(
            &CtRequest::Dump {
                filter: CtFilter::default(),
                limit: 1000,
            },
            Duration::from_secs(5),
        )
        .expect("both workers answer");
    let mut total = 0;
    for reply in replies {
        let CtReply::Dump { worker, conns, .. } = reply else {
            panic!("a dump")
        };
        for c in &conns {
            let nat = c.nat.expect("masqueraded");
            assert_eq!(nat.port % 2, worker, "{c:?}");
            assert_eq!(c.state, "ESTABLISHED");
        }
        total += conns.len();
    }
    assert_eq!(total, usize::from(FLOWS));
    let handoffs: Vec<u64> = counters.iter().map(|c| c.handoffs.get()).collect();
    assert!(
        handoffs[0] > 0 && handoffs[1] > 0,
        "both directions crossed workers: {handoffs:?}"
    );
    assert_eq!(counters[0].total_drops() + counters[1].total_drops(), 0);

    shared.stop();
    lcore::wait_all();
    assert_eq!(thread.join().expect("worker thread"), 0);
    for p in &mut ports {
        p.stop().expect("stop");
    }
    drop(ports);
    drop((rx, tx, shared));
    drop(pool);
    drop(eal);
}
