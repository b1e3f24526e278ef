//! ferrule-ipamd's pool logic in-process against moto (an EC2 emulator, started per
//! test on a loopback port): the warm pool's thresholds, cooling and shrinking, the
//! instance type's limits, restart and reconciliation, and EC2 faults injected by a
//! proxy between the daemon and moto.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ferrule_api::ipam::{IpState, IpamAdd, IpamDel};
use ferrule_ipamd::manager::IpamError;
use ferrule_ipamd::metrics::Metrics;
use ferrule_ipamd::Ipamd;
use support::{settings, world, FaultKind, FaultProxy, Moto};

fn pod(n: u32) -> IpamAdd {
    IpamAdd {
        container_id: format!("container-{n}"),
        ifname: "eth0".into(),
        pod_namespace: "default".into(),
        pod_name: format!("pod-{n}"),
    }
}

fn unpod(n: u32) -> IpamDel {
    IpamDel {
        container_id: format!("container-{n}"),
        ifname: "eth0".into(),
    }
}

async fn start(s: ferrule_ipamd::Settings) -> Arc<Ipamd> {
    tokio::time::timeout(
        Duration::from_secs(60),
        Ipamd::start(s, Arc::new(Metrics::new())),
    )
    .await
    .expect("start within 60 s")
    .expect("start")
}

/// The pool's total equals the secondary addresses moto holds on the instance.
async fn assert_consistent(ipamd: &Ipamd, w: &support::World) {
    let state = ipamd.show();
    assert_eq!(
        state.total as usize,
        w.secondary_count().await,
        "the pool counts only addresses EC2 has: {state:#?}"
    );
    assert_eq!(
        state.total,
        state.allocated + state.available + state.cooling
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_eni_target_fills_limits_and_shrinks_after_cooling() {
    let moto = Moto::start();
    let w = world(&moto).await;
    let dir = tempfile::tempdir().unwrap();
    let ipamd = start(settings(&w, &moto.endpoint(), dir.path(), &[])).await;
    let node = ipamd.node().clone();
    assert_eq!(
        (node.max_enis, node.ips_per_eni),
        (3, 6),
        "moto's t3.medium limits"
    );
    assert_eq!(node.security_groups, vec![w.sg_id.clone()]);
    assert_eq!(node.subnet_id, w.subnet_id);

    // One ENI's worth (5) of warm addresses, on the primary ENI.
    ipamd.reconcile_once().await.unwrap();
    let state = ipamd.show();
    assert_eq!((state.total, state.available, state.enis.len()), (5, 5, 1));
    assert_eq!(state.max_pod_ips, 15);
    assert_eq!(state.settings.mode, "eni");
    assert_consistent(&ipamd, &w).await;

    // The first pod takes one: below a full ENI of warm addresses, a second ENI.
    let first = ipamd.add(&pod(0)).unwrap();
    assert_eq!(first.prefix_len, 32);
    assert_eq!(first.subnet_cidr, "10.0.0.0/20");
    assert_eq!(first.gateway, "10.0.0.1");
    assert_eq!(first.vpc_cidrs, vec!["10.0.0.0/16".to_string()]);
    assert_eq!(ipamd.add(&pod(0)).unwrap(), first, "ipam.add is idempotent");
    ipamd.reconcile_once().await.unwrap();
    let enis = w.enis().await;
    assert_eq!(enis.len(), 2, "{enis:?}");
    assert_eq!(enis[1].1, 1, "next free device index");
    assert_eq!(enis[1].2, 5, "all M-1 secondaries assigned");
    let tags = w.tagged_enis("test-cluster").await;
    assert_eq!(tags.len(), 1, "the new ENI carries the cluster tag");
    assert_eq!(tags[0].1, "in-use");

    // Up to N·M − N = 15 pods, then a clear error.
    for n in 1..15 {
        match ipamd.add(&pod(n)) {
            Ok(_) => {}
            Err(IpamError::NoFreeIp(_)) => {
                ipamd.reconcile_once().await.unwrap();
                ipamd.add(&pod(n)).unwrap();
            }
            Err(e) => panic!("{e}"),
        }
    }
    ipamd.reconcile_once().await.unwrap();
    assert_eq!(w.enis().await.len(), 3);
    let err = ipamd.add(&pod(15)).unwrap_err().to_string();
    assert_eq!(
        err,
        "no free IP: 0 available, 0 cooling, ENI limit 3 reached"
    );
    assert_eq!(ipamd.show().blocked.as_deref(), Some("ENI limit 3 reached"));
    assert_consistent(&ipamd, &w).await;

    // Released addresses cool: not reused, ENIs not freed.
    for n in 0..15 {
        assert!(ipamd.del(&unpod(n)).unwrap().is_some());
    }
    assert!(
        ipamd.del(&unpod(0)).unwrap().is_none(),
        "ipam.del is idempotent"
    );
    ipamd.reconcile_once().await.unwrap();
    let state = ipamd.show();
    assert_eq!(
        (state.cooling, state.available, state.enis.len()),
        (15, 0, 3)
    );
    assert!(state
        .enis
        .iter()
        .flat_map(|e| &e.ips)
        .all(|ip| ip.state == IpState::Cooling));
    let err = ipamd.add(&pod(99)).unwrap_err().to_string();
    assert!(
        err.starts_with("no free IP: 0 available, 15 cooling"),
        "{err}"
    );

    // After the cooling period the surplus ENIs go; the primary stays.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ipamd.reconcile_once().await.unwrap();
    let enis = w.enis().await;
    assert_eq!(enis.len(), 1, "{enis:?}");
    assert_eq!(enis[0].1, 0, "the primary ENI is never freed");
    assert!(
        w.tagged_enis("test-cluster").await.is_empty(),
        "freed ENIs are deleted"
    );
    let state = ipamd.show();
    assert_eq!((state.total, state.available), (5, 5));
    let m = ipamd.metrics();
    for op in [
        "CreateNetworkInterface",
        "AttachNetworkInterface",
        "ModifyNetworkInterfaceAttribute",
        "DetachNetworkInterface",
    ] {
        assert_eq!(m.ec2_calls_of(op, "ok"), 2, "{op}");
    }
    let calls = m.encode();
    assert!(
        calls.contains(
            r#"ferrule_ipamd_ec2_calls_total{operation="DeleteNetworkInterface",outcome="ok"} 2"#
        ),
        "{calls}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_targets_take_precedence_and_trim_the_surplus() {
    let moto = Moto::start();
    let w = world(&moto).await;
    let dir = tempfile::tempdir().unwrap();
    let s = settings(
        &w,
        &moto.endpoint(),
        dir.path(),
        &["--warm-ip-target", "5", "--minimum-ip-target", "10"],
    );
    // No ferruled listens there: the push fails, is counted, and is tried again.
    let mut s = s;
    s.ferruled_socket = Some(dir.path().join("no-ferruled.sock"));
    let ipamd = start(s).await;
    ipamd.reconcile_once().await.unwrap();
    ipamd.reconcile_once().await.unwrap();
    assert!(ipamd
        .metrics()
        .encode()
        .contains(r#"ferrule_ipamd_ferruled_pushes_total{outcome="error"} 2"#));
    let state = ipamd.show();
    assert_eq!(state.settings.mode, "ip");
    assert_eq!(
        (state.total, state.available, state.enis.len()),
        (10, 10, 2)
    );

    for n in 0..7 {
        ipamd.add(&pod(n)).unwrap();
    }
    ipamd.reconcile_once().await.unwrap();
    let state = ipamd.show();
    // 3 left < 5 warm: only the 2 more the target needs.
    assert_eq!((state.total, state.available, state.allocated), (12, 5, 7));
    assert_eq!(
        w.enis().await.iter().map(|e| e.2).collect::<Vec<_>>(),
        vec![5, 5, 2]
    );

    for n in 0..7 {
        ipamd.del(&unpod(n)).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ipamd.reconcile_once().await.unwrap();
    let state = ipamd.show();
    // Surplus trimmed down to MINIMUM_IP_TARGET, never below.
    assert_eq!((state.total, state.available), (10, 10));
    assert_consistent(&ipamd, &w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_restores_the_datastore_and_reconciles_with_ec2() {
    let moto = Moto::start();
    let w = world(&moto).await;
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&w, &moto.endpoint(), dir.path(), &[]);
    let first = start(s.clone()).await;
    first.reconcile_once().await.unwrap();
    let kept = first.add(&pod(1)).unwrap();
    let lost = first.add(&pod(2)).unwrap();
    drop(first);

    // Behind the daemon's back: one pod's address unassigned, an ENI leaked.
    w.ec2
        .unassign_private_ip_addresses()
        .network_interface_id(&lost.eni_id)
        .private_ip_addresses(&lost.ip)
        .send()
        .await
        .unwrap();
    let leaked = w.leak_eni("test-cluster", None).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let young = w.leak_eni("test-cluster", Some(now)).await;
    assert!(w
        .tagged_enis("test-cluster")
        .await
        .iter()
        .any(|(id, _)| *id == leaked));

    let second = start(s).await;
    let state = second.show();
    assert_eq!(state.allocations.len(), 1, "{state:#?}");
    assert_eq!(state.allocations[0].ip, kept.ip);
    assert_eq!(state.allocations[0].pod_name, "pod-1");
    assert_eq!(
        second.add(&pod(1)).unwrap().ip,
        kept.ip,
        "running pods keep their address"
    );
    assert!(
        !w.tagged_enis("test-cluster")
            .await
            .iter()
            .any(|(id, _)| *id == leaked),
        "the leaked, unattached ENI of the cluster is deleted at start"
    );
    assert!(
        w.tagged_enis("test-cluster")
            .await
            .iter()
            .any(|(id, _)| *id == young),
        "another instance's ENI created moments ago is left to its daemon"
    );
    let text = std::fs::read_to_string(dir.path().join("ipamd.json")).unwrap();
    assert!(
        text.contains(&kept.ip) && !text.contains("container-2"),
        "{text}"
    );
    assert!(second
        .metrics()
        .encode()
        .contains("ferrule_ipamd_dropped_allocations_total 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec2_faults_are_retried_counted_and_leave_the_pool_consistent() {
    let moto = Moto::start();
    let w = world(&moto).await;
    let proxy = FaultProxy::start(moto.port).await;
    let dir = tempfile::tempdir().unwrap();
    let s = settings(
        &w,
        &proxy.endpoint(),
        dir.path(),
        &[
            "--ec2-attempts",
            "4",
            "--ec2-timeout",
            "500ms",
            "--ec2-settle",
            "1s",
        ],
    );
    let ipamd = start(s).await;

    // Throttling for the next 3 requests: retried within the attempts.
    proxy.inject(FaultKind::Throttle, None, 3);
    ipamd.reconcile_once().await.unwrap();
    assert_eq!(proxy.injected(), 3);
    assert_eq!(ipamd.show().total, 5);
    let m = ipamd.metrics();
    let throttled: u64 = [
        "DescribeNetworkInterfaces",
        "DescribeSubnets",
        "AssignPrivateIpAddresses",
    ]
    .iter()
    .map(|op| m.ec2_calls_of(op, "throttled"))
    .sum();
    assert_eq!(throttled, 3);
    assert!(m.encode().contains(r#"ferrule_ipamd_ec2_errors_total{operation="DescribeNetworkInterfaces",code="RequestLimitExceeded"}"#));

    // Mid-allocation: the ENI is created, its attachment fails every attempt and so
    // does its deletion: the round fails, nothing is counted, the ENI is left.
    ipamd.add(&pod(1)).unwrap();
    proxy.inject(
        FaultKind::ServerError,
        Some("Action=AttachNetworkInterface"),
        4,
    );
    proxy.inject(
        FaultKind::Throttle,
        Some("Action=DeleteNetworkInterface"),
        4,
    );
    let err = ipamd.reconcile_once().await.unwrap_err();
    assert_eq!(err.operation, "AttachNetworkInterface");
    assert_eq!(err.attempts, 4);
    assert_eq!(ipamd.show().enis.len(), 1);
    assert_consistent(&ipamd, &w).await;
    let tagged = w.tagged_enis("test-cluster").await;
    assert_eq!(tagged.len(), 1);
    assert_eq!(tagged[0].1, "available", "created, not attached");
    assert_eq!(m.ec2_calls_of("AttachNetworkInterface", "server_error"), 4);

    // EC2 stops answering: attempts time out, the round fails, the pool is unchanged.
    proxy.inject(FaultKind::Hang, None, 4);
    let before = ipamd.show();
    let err = ipamd.reconcile_once().await.unwrap_err();
    assert_eq!(err.code, "Timeout");
    assert_eq!(ipamd.show().total, before.total);
    assert!(m.ec2_calls_of("DescribeNetworkInterfaces", "timeout") >= 1);
    assert!(ipamd.add(&pod(1)).is_ok(), "the daemon still serves pods");

    // EC2 is back: the leaked ENI is found and deleted, a fresh one attached.
    proxy.clear();
    ipamd.reconcile_once().await.unwrap();
    let tagged = w.tagged_enis("test-cluster").await;
    assert_eq!(tagged.len(), 1, "{tagged:?}");
    assert_eq!(tagged[0].1, "in-use");
    assert_eq!(ipamd.show().total, 10);
    assert_consistent(&ipamd, &w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_come_and_go_while_the_loop_runs() {
    let moto = Moto::start();
    let w = world(&moto).await;
    let dir = tempfile::tempdir().unwrap();
    let s = settings(
        &w,
        &moto.endpoint(),
        dir.path(),
        &["--cooling", "300ms", "--reconcile-interval", "100ms"],
    );
    let ipamd = start(s).await;
    let looping = tokio::spawn(ipamd.clone().run());

    // Four workers add and delete pods against the running loop for about 3 s.
    let mut workers = Vec::new();
    for worker in 0..4u32 {
        let ipamd = ipamd.clone();
        workers.push(tokio::spawn(async move {
            let mut held = Vec::new();
            for round in 0..30u32 {
                let n = worker * 1000 + round;
                if ipamd.add(&pod(n)).is_ok() {
                    held.push(n);
                }
                if held.len() > 2 {
                    let gone = held.remove(0);
                    assert!(ipamd.del(&unpod(gone)).unwrap().is_some());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            held
        }));
    }
    let mut held = Vec::new();
    for w in workers {
        held.extend(w.await.expect("a worker panicked"));
    }
    assert!(!looping.is_finished(), "the loop never exits");

    // Quiet now: the loop settles; every held pod has its own address on the node.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let _round = ipamd.reconcile_once().await;
    let state = ipamd.show();
    assert_eq!(state.allocated as usize, held.len(), "{state:#?}");
    let mut ips: Vec<_> = state.allocations.iter().map(|a| a.ip.clone()).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), held.len(), "no address given twice");
    assert!(
        state.available >= 5,
        "a full ENI of warm addresses again: {state:#?}"
    );
    assert_consistent(&ipamd, &w).await;
    looping.abort();
}
