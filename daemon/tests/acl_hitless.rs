//! Hitless ACL publication: a real worker on its own lcore forwards pod-a → pod-b over
//! ring-backed ports while the control path the daemon uses (`acl::parse_apply`,
//! `AclManager::apply`, `Fib::set_acl`, one snapshot swap, retired generations freed)
//! applies two rule sets alternately, 1,200 times. Every packet must get the verdict
//! of a generation that was in force, none may be lost, and the hit counters of the
//! rules both sets share must count every packet across all the applies.
//!
//! Flows (UDP destination port): 1000 is permitted by both sets, 2000 denied by both,
//! 3000 permitted by set A and denied by set B.

use etherparse::PacketBuilder;
use ferrule_api::AclDumpParams;
use ferrule_daemon::acl::{parse_apply, AclManager};
use ferrule_daemon::config::Config;
use ferrule_daemon::fib::Fib;
use ferrule_dataplane::conntrack::CtConfig;
use ferrule_dataplane::counters::{DropReason, RuleCounters, WorkerCounters};
use ferrule_dataplane::dpdk::{lcore, Eal, EalConfig, EthPort, Mbuf, Mempool, PortConf, Ring};
use ferrule_dataplane::punt::PuntQueues;
use ferrule_dataplane::snapshot::Snapshot;
use ferrule_dataplane::worker::{self, RxJob, Shared, WorkerPlan};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAC_A: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xb];
const POD_A: [u8; 6] = [2, 0, 0, 0xa, 1, 2];
const FLOWS: [u16; 3] = [1000, 2000, 3000];

const CONFIG: &str = r#"
[[port]]
name = "pod-a"
devargs = "net_ring_a"
role = "pod"
pod_ips = ["10.1.0.2"]
pod_mac = "02:00:00:0a:01:02"

[[port]]
name = "pod-b"
devargs = "net_ring_b"
role = "pod"
pod_ips = ["10.1.0.3"]
pod_mac = "02:00:00:0a:01:03"
"#;

/// Set A or B, attached to pod-a's ingress. The rules for flows 1000 and 2000 are the
/// same in both (so their counters carry over); B reorders them and flips 3000.
fn rule_set(b: bool) -> Value {
    let permit_1000 =
        json!({"action": "permit", "proto": "udp", "dst_port": 1000, "origin": "both/1000"});
    let deny_2000 =
        json!({"action": "deny", "proto": "udp", "dst_port": 2000, "origin": "both/2000"});
    let rules = if b {
        vec![
            json!({"action": "deny", "proto": "udp", "dst_port": 3000, "origin": "b/3000"}),
            deny_2000,
            permit_1000,
        ]
    } else {
        vec![
            permit_1000,
            json!({"action": "permit", "proto": "udp", "dst_port": 3000, "origin": "a/3000"}),
            deny_2000,
        ]
    };
    json!({
        "tables": [{"name": "pod-a-in", "rules": rules}],
        "attach": [{"port": "pod-a", "direction": "ingress", "table": "pod-a-in"}],
    })
}

/// A UDP frame pod-a → pod-b to `dst_port`, its sequence number in the payload.
fn frame(seq: u64, dst_port: u16) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(POD_A, MAC_A)
        .ipv4([10, 1, 0, 2], [10, 1, 0, 3], 64)
        .udp(40000, dst_port)
        .write(&mut out, &seq.to_be_bytes())
        .expect("build");
    out
}

/// The destination port and sequence number of a forwarded frame.
fn decode(frame: &[u8]) -> (u16, u64) {
    let port = u16::from_be_bytes([frame[36], frame[37]]);
    let seq = u64::from_be_bytes(frame[42..50].try_into().expect("payload"));
    (port, seq)
}

struct Rig {
    shared: Arc<Shared>,
    counters: Arc<WorkerCounters>,
    fib: Fib,
    acl: AclManager,
    retired: Vec<Arc<Snapshot>>,
}

impl Rig {
    /// What `Daemon::acl_apply` does, minus the socket.
    fn apply(&mut self, b: bool) {
        let desired = parse_apply(&rule_set(b), self.acl.ports()).expect("valid");
        let counters: [&RuleCounters; 1] = [&self.counters.acl];
        let applied = self
            .acl
            .apply(&desired, &counters, &|_| Vec::new())
            .expect("apply");
        let tables = applied.tables.expect("a change to publish");
        self.fib.set_acl(tables);
        let old = self.shared.snapshot.swap(Arc::new(self.fib.snapshot()));
        self.retired.push(old);
        self.retired.retain(|s| Arc::strong_count(s) > 1);
        self.acl.reclaim();
    }

    fn hits(&self, origin: &str) -> u64 {
        let dump = self
            .acl
            .dump(&AclDumpParams::default(), 0, &[&self.counters.acl])
            .expect("dump");
        dump.tables[0]
            .rules
            .iter()
            .find(|r| r.origin.as_deref() == Some(origin))
            .map_or(0, |r| r.hits.packets)
    }

    fn acl_drops(&self) -> u64 {
        self.counters.drops[DropReason::AclDeny as usize].get()
    }
}

fn hugepages_free() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|n| n >= 64)
}

fn send(pool: &Mempool, ring: &Ring, bytes: &[u8]) {
    let mut m = Mbuf::from_bytes(pool, bytes).expect("mbuf");
    loop {
        match ring.enqueue(m) {
            Ok(()) => return,
            Err(back) => {
                m = back;
                std::thread::yield_now();
            }
        }
    }
}

#[test]
fn a_thousand_applies_never_lose_or_misclassify_a_packet() {
    let eal_cfg = EalConfig {
        lcores: vec![0, 1],
        memory_mb: 128,
        hugepages: hugepages_free(),
        file_prefix: format!("ferrule-test-acl-{}", std::process::id()),
        log_level: "error".into(),
        ..EalConfig::default()
    };
    let eal = Eal::init(&eal_cfg, "acl-test").expect("EAL init (run scripts/setup.sh as root)");
    let pool = Arc::new(
        Mempool::new(
            "acl_pool",
            8191,
            64,
            ferrule_dataplane::dpdk::mempool::DEFAULT_DATA_ROOM,
        )
        .expect("mempool"),
    );
    let a_in = Ring::new("acl_a_in", 1024).expect("ring");
    let a_out = Ring::new("acl_a_out", 1024).expect("ring");
    let b_in = Ring::new("acl_b_in", 1024).expect("ring");
    let b_out = Ring::new("acl_b_out", 4096).expect("ring");
    let mut a = EthPort::from_rings("net_ring_a", &[&a_in], &[&a_out]).expect("port a");
    let mut b = EthPort::from_rings("net_ring_b", &[&b_in], &[&b_out]).expect("port b");
    let conf = PortConf::default();
    for p in [&mut a, &mut b] {
        p.configure(&conf, &pool).expect("configure");
        p.start().expect("start");
    }
    let cfg = Config::parse(CONFIG, "acl_hitless").expect("config");
    let mut fib = Fib::from_config(&cfg, &[MAC_A, MAC_B], &[a.id(), b.id()]).expect("fib");
    let shared = Arc::new(Shared::new(fib.snapshot(), PuntQueues::new(64, 16), 1));
    shared.set_dpdk_id(0, a.id());
    shared.set_dpdk_id(1, b.id());
    let counters = Arc::new(WorkerCounters::default());
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
                port: a.id(),
                queue: 0,
                index: 0,
                out: None,
            },
            RxJob {
                port: b.id(),
                queue: 0,
                index: 1,
                out: None,
            },
        ],
    };
    {
        let (s, c, p) = (
            Arc::clone(&shared),
            Arc::clone(&counters),
            Arc::clone(&pool),
        );
        lcore::launch(lcore, move || worker::run(&plan, &s, &c, &p)).expect("launch worker");
    }
    let ports = fib.acl_ports();
    let mut rig = Rig {
        shared: Arc::clone(&shared),
        counters: Arc::clone(&counters),
        fib,
        acl: AclManager::new(ports),
        retired: Vec::new(),
    };

    let received = |out: &Ring| -> Vec<(u16, u64)> {
        std::iter::from_fn(|| out.dequeue())
            .map(|m| decode(m.as_ref()))
            .collect()
    };
    let mut seq = 0u64;
    let mut sent = [0u64; 3];
    let mut through = [0u64; 3];

    // Phase 1, strict: after each apply, packets of every flow go through and are
    // waited for; each must get exactly the verdict of the generation just published.
    for k in 0..200 {
        let b = k % 2 == 1;
        rig.apply(b);
        let drops_before = rig.acl_drops();
        for (f, &port) in FLOWS.iter().enumerate() {
            for _ in 0..2 {
                send(&pool, &a_in, &frame(seq, port));
                seq += 1;
                sent[f] += 1;
            }
        }
        let want_through: Vec<u16> = if b {
            vec![1000, 1000]
        } else {
            vec![1000, 1000, 3000, 3000]
        };
        let want_drops = 6 - want_through.len() as u64;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got: Vec<(u16, u64)> = Vec::new();
        while got.len() < want_through.len() || rig.acl_drops() - drops_before < want_drops {
            assert!(
                Instant::now() < deadline,
                "apply {k}: packets did not come out"
            );
            got.extend(received(&b_out));
        }
        std::thread::sleep(Duration::from_micros(200));
        got.extend(received(&b_out));
        let ports: Vec<u16> = got.iter().map(|&(p, _)| p).collect();
        assert_eq!(
            ports,
            want_through,
            "apply {k} (set {})",
            if b { "B" } else { "A" }
        );
        assert_eq!(rig.acl_drops() - drops_before, want_drops, "apply {k}");
        for (p, _) in got {
            through[FLOWS.iter().position(|&f| f == p).expect("flow")] += 1;
        }
    }

    // Phase 2, concurrent: a sender streams the three flows while 1,000 applies
    // alternate; nothing may be lost or get a verdict neither set gives.
    let stop = AtomicBool::new(false);
    let streamed = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    let mut seen = Vec::new();
    let last_seq = std::thread::scope(|scope| {
        let sender = scope.spawn(|| {
            let mut seq = seq;
            while !stop.load(Ordering::Relaxed) {
                let f = (seq % 3) as usize;
                send(&pool, &a_in, &frame(seq, FLOWS[f]));
                streamed[f].fetch_add(1, Ordering::Relaxed);
                seq += 1;
            }
            seq
        });
        for k in 0..1000 {
            rig.apply(k % 2 == 1);
            seen.extend(received(&b_out));
        }
        // Let the stream run under the last set a little, then stop it.
        std::thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
        sender.join().expect("sender")
    });
    for (f, n) in streamed.iter().enumerate() {
        sent[f] += n.load(Ordering::Relaxed);
    }
    let total_sent: u64 = sent.iter().sum();
    assert_eq!(total_sent, last_seq);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        seen.extend(received(&b_out));
        let out = through.iter().sum::<u64>() + seen.len() as u64;
        if out + rig.acl_drops() >= total_sent {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "packets lost: {out} out + {} denied of {total_sent}",
            rig.acl_drops()
        );
    }
    let mut last = None;
    for &(port, s) in &seen {
        assert_ne!(
            port, 2000,
            "flow 2000 is denied by both sets, yet packet {s} passed"
        );
        assert!(last < Some(s), "reordered: {s} after {last:?}");
        last = Some(s);
        through[FLOWS.iter().position(|&f| f == port).expect("flow")] += 1;
    }
    eprintln!(
        "sent {sent:?} through {through:?} acl drops {}",
        rig.acl_drops()
    );
    assert_eq!(through[0], sent[0], "every packet of flow 1000 passes");
    assert_eq!(through[1], 0);
    assert!(
        through[2] > 0 && through[2] < sent[2],
        "flow 3000 saw both verdicts"
    );
    let out: u64 = through.iter().sum();
    assert_eq!(
        out + rig.acl_drops(),
        total_sent,
        "every packet forwarded or denied"
    );
    let total_drops: u64 = counters.drops.iter().map(|c| c.get()).sum();
    assert_eq!(total_drops, rig.acl_drops(), "no drop other than acl-deny");
    // The rules both sets share kept their counters through all 1,200 applies.
    assert_eq!(rig.hits("both/1000"), sent[0]);
    assert_eq!(rig.hits("both/2000"), sent[1]);
    assert!(rig.retired.len() <= 2, "old generations are freed");

    shared.stop();
    lcore::wait_all();
    for p in [&mut a, &mut b] {
        p.stop().expect("stop");
    }
    drop((a, b, a_in, a_out, b_in, b_out, rig, shared, counters));
    drop(pool);
    drop(eal);
}
