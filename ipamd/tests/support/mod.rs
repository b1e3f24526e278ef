//! Test support for ferrule-ipamd against moto: a moto_server per test on a free
//! loopback port (killed by PID when dropped), a VPC with a /20 subnet, a security
//! group and a t3.medium instance in it, settings for the daemon, and a fault-injecting
//! HTTP proxy to put between the daemon and moto.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{Filter, InstanceType, ResourceType, Tag, TagSpecification};
use clap::Parser;
use ferrule_ipamd::{Args, Settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const REGION: &str = "us-east-1";

/// Where moto_server is: $FERRULE_MOTO_SERVER, else the project venv's.
pub fn moto_server_path() -> PathBuf {
    if let Ok(path) = std::env::var("FERRULE_MOTO_SERVER") {
        return PathBuf::from(path);
    }
    let venv = std::env::var("FERRULE_VENV").unwrap_or_else(|_| "/opt/ferrule/venv".into());
    Path::new(&venv).join("bin/moto_server")
}

pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A moto_server process; killed by PID when dropped.
pub struct Moto {
    child: Child,
    pub port: u16,
}

impl Moto {
    pub fn start() -> Moto {
        let path = moto_server_path();
        assert!(
            path.exists(),
            "moto_server not found at {} : run scripts/setup.sh (it installs moto[server] into \
             the project venv /opt/ferrule/venv), or set FERRULE_MOTO_SERVER to a moto_server",
            path.display()
        );
        let port = free_port();
        let child = Command::new(&path)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e} (run scripts/setup.sh)",
                    path.display()
                )
            });
        let moto = Moto { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while StdStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen on {port} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        moto
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain SDK client on `endpoint` (the test's own view of EC2).
pub async fn ec2_client(endpoint: &str) -> aws_sdk_ec2::Client {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(REGION))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await;
    aws_sdk_ec2::Client::new(&config)
}

/// What the test created in moto.
pub struct World {
    pub ec2: aws_sdk_ec2::Client,
    pub vpc_id: String,
    pub subnet_id: String,
    pub sg_id: String,
    pub instance_id: String,
}

/// A VPC 10.0.0.0/16, a subnet 10.0.0.0/20, a security group and a t3.medium instance.
pub async fn world(moto: &Moto) -> World {
    let ec2 = ec2_client(&moto.endpoint()).await;
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
    let subnet = ec2
        .create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block("10.0.0.0/20")
        .availability_zone("us-east-1a")
        .send()
        .await
        .unwrap();
    let subnet_id = subnet.subnet().unwrap().subnet_id().unwrap().to_string();
    let sg = ec2
        .create_security_group()
        .group_name("nodes")
        .description("nodes")
        .vpc_id(&vpc_id)
        .send()
        .await
        .unwrap();
    let sg_id = sg.group_id().unwrap().to_string();
    let run = ec2
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(InstanceType::T3Medium)
        .min_count(1)
        .max_count(1)
        .subnet_id(&subnet_id)
        .security_group_ids(&sg_id)
        .send()
        .await
        .unwrap();
    let instance_id = run.instances()[0].instance_id().unwrap().to_string();
    World {
        ec2,
        vpc_id,
        subnet_id,
        sg_id,
        instance_id,
    }
}

impl World {
    /// The instance's ENIs as moto has them: (id, device index, secondary count).
    pub async fn enis(&self) -> Vec<(String, i32, usize)> {
        let out = self
            .ec2
            .describe_network_interfaces()
            .filters(
                Filter::builder()
                    .name("attachment.instance-id")
                    .values(&self.instance_id)
                    .build(),
            )
            .send()
            .await
            .unwrap();
        let mut enis: Vec<_> = out
            .network_interfaces()
            .iter()
            .map(|e| {
                (
                    e.network_interface_id().unwrap().to_string(),
                    e.attachment().and_then(|a| a.device_index()).unwrap_or(-1),
                    e.private_ip_addresses()
                        .iter()
                        .filter(|a| !a.primary().unwrap_or(false))
                        .count(),
                )
            })
            .collect();
        enis.sort_by_key(|e| e.1);
        enis
    }

    /// Secondary addresses moto holds on the instance's ENIs.
    pub async fn secondary_count(&self) -> usize {
        self.enis().await.iter().map(|e| e.2).sum()
    }

    /// Every ENI with the cluster tag, attached or not: (id, status).
    pub async fn tagged_enis(&self, cluster: &str) -> Vec<(String, String)> {
        let out = self
            .ec2
            .describe_network_interfaces()
            .filters(
                Filter::builder()
                    .name("tag:ferrule.io/cluster")
                    .values(cluster)
                    .build(),
            )
            .send()
            .await
            .unwrap();
        out.network_interfaces()
            .iter()
            .map(|e| {
                (
                    e.network_interface_id().unwrap().to_string(),
                    e.status()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    /// An unattached ENI with the cluster tag of another instance, as a crashed daemon
    /// would leave (`created_at`: its creation tag, seconds since the epoch).
    pub async fn leak_eni(&self, cluster: &str, created_at: Option<u64>) -> String {
        let mut tags = TagSpecification::builder()
            .resource_type(ResourceType::NetworkInterface)
            .tags(
                Tag::builder()
                    .key("ferrule.io/cluster")
                    .value(cluster)
                    .build(),
            )
            .tags(
                Tag::builder()
                    .key("ferrule.io/instance-id")
                    .value("i-elsewhere")
                    .build(),
            );
        if let Some(at) = created_at {
            tags = tags.tags(
                Tag::builder()
                    .key("ferrule.io/created-at")
                    .value(at.to_string())
                    .build(),
            );
        }
        let out = self
            .ec2
            .create_network_interface()
            .subnet_id(&self.subnet_id)
            .groups(&self.sg_id)
            .tag_specifications(tags.build())
            .send()
            .await
            .unwrap();
        out.network_interface()
            .unwrap()
            .network_interface_id()
            .unwrap()
            .to_string()
    }
}

/// Daemon settings against `endpoint` with short intervals; `extra` flags appended.
pub fn settings(world: &World, endpoint: &str, dir: &Path, extra: &[&str]) -> Settings {
    let datastore = dir.join("ipamd.json");
    let socket = dir.join("ipamd.sock");
    let base: [(&str, &str); 11] = [
        ("--cluster", "test-cluster"),
        ("--instance-id", &world.instance_id),
        ("--region", REGION),
        ("--ec2-endpoint", endpoint),
        ("--datastore", datastore.to_str().unwrap()),
        ("--socket", socket.to_str().unwrap()),
        ("--cooling", "1s"),
        ("--reconcile-interval", "200ms"),
        ("--ec2-backoff", "20ms"),
        ("--ec2-timeout", "2s"),
        ("--ec2-settle", "3s"),
    ];
    let mut argv = vec!["ferrule-ipamd".to_string()];
    for (flag, value) in base {
        // A flag in `extra` replaces the default here.
        if !extra.contains(&flag) {
            argv.push(flag.to_string());
            argv.push(value.to_string());
        }
    }
    argv.extend(extra.iter().map(|s| s.to_string()));
    let mut settings = Args::try_parse_from(argv).unwrap().settings().unwrap();
    // The environment must not leak thresholds into the tests.
    if !extra.contains(&"--warm-ip-target") {
        settings.targets.warm_ip = None;
    }
    if !extra.contains(&"--minimum-ip-target") {
        settings.targets.minimum_ip = None;
    }
    settings.static_credentials = Some(("testing".into(), "testing".into()));
    settings
}

/// What the proxy does with the requests that match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Answer HTTP 503 with EC2's RequestLimitExceeded error.
    Throttle,
    /// Answer HTTP 500 InternalError.
    ServerError,
    /// Read the request and never answer (the attempt times out).
    Hang,
}

#[derive(Debug, Clone)]
struct Fault {
    kind: FaultKind,
    /// Only requests whose body contains this (e.g. `Action=AttachNetworkInterface`).
    matching: Option<String>,
    remaining: u32,
}

/// An HTTP proxy in front of moto that injects faults: one request per connection,
/// forwarded with `Connection: close`.
#[derive(Clone)]
pub struct FaultProxy {
    pub addr: SocketAddr,
    faults: Arc<Mutex<Vec<Fault>>>,
    pub injected: Arc<Mutex<u32>>,
}

impl FaultProxy {
    pub async fn start(upstream_port: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = FaultProxy {
            addr: listener.local_addr().unwrap(),
            faults: Arc::default(),
            injected: Arc::default(),
        };
        let me = proxy.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let me = me.clone();
                tokio::spawn(async move {
                    let _ = me.handle(stream, upstream_port).await;
                });
            }
        });
        proxy
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next `count` requests (whose body contains `matching`, if given) get `kind`.
    pub fn inject(&self, kind: FaultKind, matching: Option<&str>, count: u32) {
        self.faults.lock().unwrap().push(Fault {
            kind,
            matching: matching.map(str::to_string),
            remaining: count,
        });
    }

    pub fn clear(&self) {
        self.faults.lock().unwrap().clear();
    }

    pub fn injected(&self) -> u32 {
        *self.injected.lock().unwrap()
    }

    fn fault_for(&self, body: &str) -> Option<FaultKind> {
        let mut faults = self.faults.lock().unwrap();
        let fault = faults.iter_mut().find(|f| {
            f.remaining > 0
                && f.matching
                    .as_ref()
                    .is_none_or(|m| body.contains(m.as_str()))
        })?;
        fault.remaining -= 1;
        *self.injected.lock().unwrap() += 1;
        Some(fault.kind)
    }

    async fn handle(&self, mut client: TcpStream, upstream_port: u16) -> std::io::Result<()> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let header_end = loop {
            let n = client.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())
                    .flatten()
            })
            .unwrap_or(0);
        while buf.len() < header_end + length {
            let n = client.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = String::from_utf8_lossy(&buf[header_end..]).to_string();
        match self.fault_for(&body) {
            Some(FaultKind::Hang) => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                return Ok(());
            }
            Some(kind) => {
                let (status, code) = match kind {
                    FaultKind::Throttle => ("503 Service Unavailable", "RequestLimitExceeded"),
                    _ => ("500 Internal Server Error", "InternalError"),
                };
                let xml = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
                     <Message>injected by the test proxy</Message></Error></Errors>\
                     <RequestID>00000000-0000-0000-0000-000000000000</RequestID></Response>"
                );
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
                    xml.len()
                );
                client.write_all(reply.as_bytes()).await?;
                client.shutdown().await?;
                return Ok(());
            }
            None => {}
        }
        // Forward with Connection: close, then relay the answer until moto closes.
        let mut rewritten = String::new();
        for line in head.trim_end_matches("\r\n\r\n").split("\r\n") {
            if !line.to_ascii_lowercase().starts_with("connection:") {
                rewritten.push_str(line);
                rewritten.push_str("\r\n");
            }
        }
        rewritten.push_str("Connection: close\r\n\r\n");
        let mut upstream = TcpStream::connect(("127.0.0.1", upstream_port)).await?;
        upstream.write_all(rewritten.as_bytes()).await?;
        upstream.write_all(&buf[header_end..]).await?;
        let mut answer = Vec::new();
        upstream.read_to_end(&mut answer).await?;
        client.write_all(&answer).await?;
        client.shutdown().await?;
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
