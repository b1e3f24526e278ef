//! The real `ferrule-ipamd` binary against moto: `ipam.add`/`ipam.del`/`ipam.show` over
//! the Unix socket with ferrule-api's blocking client, `GET /ip-manager` and
//! `GET /metrics`, discovery through IMDS (a stand-in) and the SDK's endpoint
//! environment, the ENIs pushed to a stand-in ferruled (`vpc.sync`), and `--help` /
//! `--check`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ferrule_api::client::{Client, ClientError};
use ferrule_api::ipam::{ipam_method, IpamAddress, IpamReleased, IpamState, NO_FREE_IP};
use serde_json::{json, Value};
use support::{free_port, world, Moto};

const BIN: &str = env!("CARGO_BIN_EXE_ferrule-ipamd");

/// The daemon process; killed by PID when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn http_get(port: u16, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

/// A stand-in ferruled: answers every request on `path` and passes `vpc.sync` params on.
fn fake_ferruled(path: &Path) -> mpsc::Receiver<Value> {
    let listener = UnixListener::bind(path).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                let req: Value = serde_json::from_str(&line).unwrap();
                if req["method"] == "vpc.sync" {
                    let _ = tx.send(req["params"].clone());
                }
                let reply = json!({ "jsonrpc": "2.0", "id": req["id"], "result": {} });
                let _ = writeln!(writer, "{reply}");
                line.clear();
            }
        }
    });
    rx
}

/// A stand-in instance metadata service (IMDSv2: a token, then the metadata), counting
/// the metadata it served.
fn fake_imds(instance_id: String) -> (u16, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = Vec::new();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                head.push(line.clone());
                line.clear();
            }
            let first = head.first().cloned().unwrap_or_default();
            let has_token = head.iter().any(|h| {
                h.to_ascii_lowercase()
                    .starts_with("x-aws-ec2-metadata-token: test-token")
            });
            let (status, body) = if first.starts_with("PUT /latest/api/token") {
                ("200 OK", "test-token".to_string())
            } else if !has_token {
                ("401 Unauthorized", String::new())
            } else if first.starts_with("GET /latest/meta-data/instance-id ") {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                ("200 OK", instance_id.clone())
            } else if first.starts_with("GET /latest/meta-data/placement/region ") {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                ("200 OK", support::REGION.to_string())
            } else {
                ("404 Not Found", String::new())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nx-aws-ec2-metadata-token-ttl-seconds: 21600\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_the_ipam_socket_introspection_and_metrics() {
    let moto = Moto::start();
    let w = world(&moto).await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("ipamd.sock");
    let ferruled = dir.path().join("ferrule.sock");
    let pushes = fake_ferruled(&ferruled);
    let http = free_port();
    // The instance ID and region come from the (stand-in) metadata service, the
    // endpoint from the SDK's standard environment.
    let (imds, imds_served) = fake_imds(w.instance_id.clone());
    let child = Command::new(BIN)
        .args(["--cluster", "bin-test"])
        .arg("--datastore")
        .arg(dir.path().join("ipamd.json"))
        .arg("--socket")
        .arg(&socket)
        .arg("--ferruled-socket")
        .arg(&ferruled)
        .args(["--introspection", &format!("127.0.0.1:{http}")])
        .args(["--reconcile-interval", "200ms", "--cooling", "1s"])
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env(
            "AWS_EC2_METADATA_SERVICE_ENDPOINT",
            format!("http://127.0.0.1:{imds}/"),
        )
        .env("AWS_ENDPOINT_URL_EC2", moto.endpoint())
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("FERRULE_INSTANCE_ID")
        .env_remove("WARM_IP_TARGET")
        .env_remove("MINIMUM_IP_TARGET")
        .env_remove("AWS_ENDPOINT_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _daemon = Daemon(child);

    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the IPAM socket did not appear");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        imds_served.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "instance ID and region from IMDS"
    );
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let mut client = Client::connect(&socket).unwrap();
    let params = json!({
        "container_id": "abc123", "ifname": "eth0",
        "pod_namespace": "default", "pod_name": "web-0"
    });
    let address: IpamAddress = loop {
        match client.call_typed(ipam_method::ADD, params.clone()) {
            Ok(a) => break a,
            Err(ClientError::Rpc(e)) if e.code == NO_FREE_IP => {
                assert!(Instant::now() < deadline, "the pool never filled: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(address.gateway, "10.0.0.1");
    assert_eq!(address.device_index, 0);
    let again: IpamAddress = client.call_typed(ipam_method::ADD, params).unwrap();
    assert_eq!(again, address);
    let bad = client
        .call(ipam_method::ADD, json!({ "container_id": "x", "ifname": "eth0", "pod_namespace": "d", "pod_name": "p", "extra": 1 }))
        .unwrap_err();
    assert!(bad.to_string().contains("unknown field `extra`"), "{bad}");

    let (head, body) = http_get(http, "/ip-manager");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let state: IpamState = serde_json::from_str(&body).unwrap();
    assert_eq!(state.allocated, 1);
    assert_eq!(state.allocations[0].pod_name, "web-0");
    assert_eq!(state.allocations[0].ip, address.ip);
    assert_eq!(state.settings.instance_type, "t3.medium");
    let shown: IpamState = client.call_typed(ipam_method::SHOW, Value::Null).unwrap();
    assert_eq!(shown.allocations, state.allocations);

    let (_, metrics) = http_get(http, "/metrics");
    for needle in [
        r#"ferrule_ipamd_ec2_calls_total{operation="AssignPrivateIpAddresses",outcome="ok"}"#,
        "ferrule_ipamd_ips_assigned 1",
        "ferrule_ipamd_max_pod_ips 15",
    ] {
        assert!(metrics.contains(needle), "{needle} not in {metrics}");
    }

    let released: IpamReleased = client
        .call_typed(
            ipam_method::DEL,
            json!({ "container_id": "abc123", "ifname": "eth0" }),
        )
        .unwrap();
    assert_eq!(released.released.as_deref(), Some(address.ip.as_str()));

    // The ENIs went to ferruled.
    let sync = pushes
        .recv_timeout(Duration::from_secs(20))
        .expect("a vpc.sync push");
    let sync: ferrule_api::VpcSync = serde_json::from_value(sync).unwrap();
    assert_eq!(sync.vpc_cidrs, vec!["10.0.0.0/16".to_string()]);
    assert!(sync.node_ips.is_empty());
    let primary = &sync.enis[0];
    assert_eq!(
        (primary.device_index, primary.gateway.as_str()),
        (0, "10.0.0.1")
    );
    assert!(primary.port.is_none());

    // SIGTERM: a clean exit that removes the socket.
    let mut daemon = _daemon;
    let pid = rustix::process::Pid::from_child(&daemon.0);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = daemon.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "no exit within 10 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the socket is removed on exit");
}

#[test]
fn help_reads_like_a_man_page_and_check_validates() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for section in [
        "WARM_IP_TARGET",
        "ENVIRONMENT:",
        "FILES:",
        "EXAMPLES:",
        "--cooling",
    ] {
        assert!(help.contains(section), "{section} missing from --help");
    }
    let out = Command::new(BIN)
        .args(["--introspection", "0.0.0.0:1", "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
    let out = Command::new(BIN)
        .args([
            "--check",
            "--instance-id",
            "i-0abc",
            "--region",
            "us-east-1",
        ])
        .env_remove("WARM_IP_TARGET")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("settings are valid"));
}
