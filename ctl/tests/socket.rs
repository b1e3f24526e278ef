//! Integration tests of the control socket: the server with a test service on a thread,
//! raw clients speaking JSON-RPC lines, the blocking `Client`, and the `ferrulectl`
//! binary's behaviour against a live and a missing daemon.

use std::fs;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ferrule_api::client::{Client, ClientError};
use ferrule_api::rpc::{self, parse_params, RpcError, Service};
use ferrule_api::{self as api, VersionInfo};
use ferrule_daemon::server::{Server, ServerConfig, ServerError, ShutdownHandle, StopReason};
use serde::Deserialize;
use serde_json::{json, Value};
use tempfile::TempDir;

const IO_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Counters {
    notified: AtomicUsize,
    ticks: AtomicUsize,
}

/// The service under test: a few methods that exercise the server's paths.
struct TestService {
    counters: Arc<Counters>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddParams {
    a: i64,
    b: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SleepParams {
    ms: u64,
}

impl Service for TestService {
    fn call(&mut self, method: &str, params: &Value) -> Result<Value, RpcError> {
        match method {
            "echo" => Ok(params.clone()),
            "add" => {
                let p: AddParams = parse_params(params)?;
                Ok(json!(p.a + p.b))
            }
            "sleep" => {
                let p: SleepParams = parse_params(params)?;
                thread::sleep(Duration::from_millis(p.ms));
                Ok(json!({ "slept_ms": p.ms }))
            }
            "fail" => Err(RpcError::internal("asked to fail")),
            "panic" => panic!("test service asked to panic"),
            "notify" => {
                self.counters.notified.fetch_add(1, Ordering::SeqCst);
                Ok(Value::Null)
            }
            api::method::VERSION => Ok(json!(VersionInfo {
                api_version: api::API_VERSION,
                version: "9.9.9".to_string(),
                git_commit: "abc1234".to_string(),
                dpdk: "22.11.11".to_string(),
            })),
            // A reply that does not match the api types, for ferrulectl's error path.
            api::method::PORTS_LIST => Ok(json!({ "ports": "not a list" })),
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    fn tick(&mut self) {
        self.counters.ticks.fetch_add(1, Ordering::SeqCst);
    }
}

/// A server running on its own thread in a fresh temporary directory.
struct Running {
    path: PathBuf,
    handle: ShutdownHandle,
    thread: Option<JoinHandle<Result<StopReason, ServerError>>>,
    counters: Arc<Counters>,
    _dir: TempDir,
}

fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("ferrule-test")
        .tempdir()
        .expect("temp dir")
}

fn config(path: &Path) -> ServerConfig {
    ServerConfig {
        socket: path.to_path_buf(),
        ..ServerConfig::default()
    }
}

fn start() -> Running {
    start_with(|_| {})
}

fn start_with(adjust: impl FnOnce(&mut ServerConfig)) -> Running {
    let dir = temp_dir();
    let path = dir.path().join("ferrule.sock");
    let mut cfg = config(&path);
    adjust(&mut cfg);
    let server = Server::bind(cfg).expect("bind");
    spawn(server, dir, path)
}

fn spawn(mut server: Server, dir: TempDir, path: PathBuf) -> Running {
    let handle = server.shutdown_handle();
    let counters = Arc::new(Counters::default());
    let mut service = TestService {
        counters: Arc::clone(&counters),
    };
    let thread = thread::spawn(move || server.run(&mut service));
    Running {
        path,
        handle,
        thread: Some(thread),
        counters,
        _dir: dir,
    }
}

impl Running {
    /// Waits for `run` to return (after a shutdown request unless `signal`); the
    /// server is dropped with it, the temporary directory stays until `self` goes.
    fn join(&mut self) -> StopReason {
        let thread = self.thread.take().expect("running");
        thread.join().expect("server thread").expect("run")
    }

    fn stop(&mut self) -> StopReason {
        self.handle.shutdown();
        self.join()
    }

    fn connect(&self) -> Raw {
        Raw::connect(&self.path)
    }

    fn client(&self) -> Client {
        let mut client = Client::connect(&self.path).expect("connect");
        client.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        client
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.handle.shutdown();
            let _ = thread.join();
        }
    }
}

/// A client that speaks raw lines.
struct Raw {
    reader: BufReader<UnixStream>,
}

impl Raw {
    fn connect(path: &Path) -> Raw {
        let stream = UnixStream::connect(path).expect("connect");
        stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        stream.set_write_timeout(Some(IO_TIMEOUT)).expect("timeout");
        Raw {
            reader: BufReader::new(stream),
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).expect("write");
    }

    fn send(&mut self, line: &str) {
        self.send_raw(format!("{line}\n").as_bytes());
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).expect("read reply");
        assert!(n > 0, "server closed the connection");
        assert!(line.ends_with('\n'), "reply is one line: {line:?}");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply {line:?} is not JSON: {e}"))
    }

    fn request(&mut self, line: &str) -> Value {
        self.send(line);
        self.recv()
    }

    /// Checks the connection still works: an echo with a fresh id comes back.
    fn assert_alive(&mut self, id: u64) {
        let reply = self.request(&request(id, "echo", json!({ "alive": id })));
        assert_eq!(
            reply,
            json!({ "jsonrpc": "2.0", "id": id, "result": { "alive": id } })
        );
    }

    /// Whether the server closed the connection (EOF) within the read timeout.
    fn closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.reader.read(&mut byte), Ok(0))
    }
}

fn request(id: u64, method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string()
}

fn error_code(reply: &Value) -> i64 {
    reply["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error reply: {reply}"))
}

#[test]
fn echo_round_trip_has_the_json_rpc_shape() {
    let server = start();
    let mut c = server.connect();
    let reply = c.request(r#"{"jsonrpc":"2.0","id":"abc","method":"echo","params":{"x":[1,2]}}"#);
    assert_eq!(
        reply,
        json!({ "jsonrpc": "2.0", "id": "abc", "result": { "x": [1, 2] } })
    );
    // No params: the service sees null.
    let reply = c.request(r#"{"jsonrpc":"2.0","id":null,"method":"echo"}"#);
    assert_eq!(
        reply,
        json!({ "jsonrpc": "2.0", "id": null, "result": null })
    );
    let reply = c.request(&request(5, "fail", json!({})));
    assert_eq!(error_code(&reply), rpc::INTERNAL_ERROR);
    assert_eq!(reply["id"], 5);
    assert!(reply.get("result").is_none(), "{reply}");
}

#[test]
fn malformed_json_is_a_parse_error_and_the_connection_survives() {
    let server = start();
    let mut c = server.connect();
    for garbage in [
        "{",
        r#"{"jsonrpc":"2.0","id":1,"method":"echo""#,
        "nope",
        "\u{fffd}\u{1}",
    ] {
        let reply = c.request(garbage);
        assert_eq!(error_code(&reply), rpc::PARSE_ERROR, "{garbage}");
        assert_eq!(reply["id"], Value::Null);
        assert_eq!(reply["jsonrpc"], "2.0");
    }
    // Invalid UTF-8 is invalid JSON too.
    c.send_raw(b"\xff\xfe\n");
    assert_eq!(error_code(&c.recv()), rpc::PARSE_ERROR);
    c.assert_alive(2);
}

#[test]
fn unknown_method_is_method_not_found() {
    let server = start();
    let mut c = server.connect();
    let reply = c.request(&request(7, "no.such.method", json!({})));
    assert_eq!(error_code(&reply), rpc::METHOD_NOT_FOUND);
    assert_eq!(reply["id"], 7);
    assert!(reply["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("no.such.method"));
}

#[test]
fn bad_params_name_the_field() {
    let server = start();
    let mut c = server.connect();
    assert_eq!(
        c.request(&request(1, "add", json!({ "a": 2, "b": 3 })))["result"],
        5
    );

    let reply = c.request(&request(2, "add", json!({ "a": 2, "b": 3, "c": 4 })));
    assert_eq!(error_code(&reply), rpc::INVALID_PARAMS);
    assert_eq!(reply["error"]["data"]["field"], "c");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("`c`"),
        "{reply}"
    );

    let reply = c.request(&request(3, "add", json!({ "a": 2 })));
    assert_eq!(error_code(&reply), rpc::INVALID_PARAMS);
    assert_eq!(reply["error"]["data"]["field"], "b");

    let reply = c.request(&request(4, "sleep", json!({ "ms": "soon" })));
    assert_eq!(error_code(&reply), rpc::INVALID_PARAMS);
    assert_eq!(reply["id"], 4);
}

#[test]
fn invalid_request_shapes_are_invalid_request() {
    let server = start();
    let mut c = server.connect();
    let cases: [(&str, Value); 10] = [
        ("42", Value::Null),
        (r#""echo""#, Value::Null),
        ("null", Value::Null),
        (r#"{"id":1,"method":"echo"}"#, json!(1)),
        (r#"{"jsonrpc":"1.0","id":2,"method":"echo"}"#, json!(2)),
        (r#"{"jsonrpc":2.0,"id":3,"method":"echo"}"#, json!(3)),
        (r#"{"jsonrpc":"2.0","id":4,"method":5}"#, json!(4)),
        (r#"{"jsonrpc":"2.0","id":"five"}"#, json!("five")),
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"echo","params":"x"}"#,
            json!(6),
        ),
        (r#"{"jsonrpc":"2.0","id":[7],"method":"echo"}"#, Value::Null),
    ];
    for (line, id) in cases {
        let reply = c.request(line);
        assert_eq!(error_code(&reply), rpc::INVALID_REQUEST, "{line}: {reply}");
        assert_eq!(reply["id"], id, "{line}: {reply}");
    }
    // Invalid requests are answered even without an id.
    let reply = c.request(r#"{"jsonrpc":"2.0","method":7}"#);
    assert_eq!(error_code(&reply), rpc::INVALID_REQUEST);
    c.assert_alive(8);
}

#[test]
fn notification_is_executed_and_not_answered() {
    let server = start();
    let mut c = server.connect();
    c.send(r#"{"jsonrpc":"2.0","method":"notify"}"#);
    c.send(r#"{"jsonrpc":"2.0","method":"notify","params":{}}"#);
    // A failing notification is not answered either.
    c.send(r#"{"jsonrpc":"2.0","method":"no.such.method"}"#);
    // Replies keep request order, so the next line is the answer to this request.
    c.assert_alive(1);
    assert_eq!(server.counters.notified.load(Ordering::SeqCst), 2);
}

#[test]
fn empty_lines_are_ignored() {
    let server = start();
    let mut c = server.connect();
    c.send_raw(b"\n   \n\t\r\n");
    c.assert_alive(1);
    // CRLF line endings work.
    c.send_raw(format!("{}\r\n", request(2, "echo", json!([2]))).as_bytes());
    assert_eq!(c.recv()["result"], json!([2]));
}

#[test]
fn batch_gets_an_array_of_responses() {
    let server = start();
    let mut c = server.connect();
    let batch = format!(
        "[{},{},{},{},{}]",
        request(1, "echo", json!([1])),
        r#"{"jsonrpc":"2.0","method":"notify"}"#,
        r#"{"foo":"bar"}"#,
        request(3, "no.such.method", json!({})),
        request(4, "add", json!({ "a": 1, "b": 1 })),
    );
    let reply = c.request(&batch);
    let replies = reply
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {reply}"));
    assert_eq!(replies.len(), 4, "{reply}");
    assert_eq!(
        replies[0],
        json!({ "jsonrpc": "2.0", "id": 1, "result": [1] })
    );
    assert_eq!(error_code(&replies[1]), rpc::INVALID_REQUEST);
    assert_eq!(replies[1]["id"], Value::Null);
    assert_eq!(error_code(&replies[2]), rpc::METHOD_NOT_FOUND);
    assert_eq!(replies[2]["id"], 3);
    assert_eq!(replies[3]["result"], 2);
    assert_eq!(server.counters.notified.load(Ordering::SeqCst), 1);

    // An empty batch is one invalid request, not an empty array.
    let reply = c.request("[]");
    assert_eq!(error_code(&reply), rpc::INVALID_REQUEST);
    assert_eq!(reply["id"], Value::Null);

    // Non-object members each get an error.
    let reply = c.request("[1,2,3]");
    let replies = reply
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {reply}"));
    assert_eq!(replies.len(), 3);
    assert!(replies
        .iter()
        .all(|r| error_code(r) == rpc::INVALID_REQUEST));

    // A batch of notifications gets nothing back.
    c.send(r#"[{"jsonrpc":"2.0","method":"notify"},{"jsonrpc":"2.0","method":"notify"}]"#);
    c.assert_alive(5);
    assert_eq!(server.counters.notified.load(Ordering::SeqCst), 3);
}

#[test]
fn oversized_request_is_rejected_and_the_connection_survives() {
    let server = start_with(|cfg| cfg.max_request_bytes = 1024);
    let mut c = server.connect();
    // Exactly at the limit is accepted.
    let padding = "x".repeat(1024 - request(1, "echo", json!([""])).len());
    let at_limit = request(1, "echo", json!([padding]));
    assert_eq!(at_limit.len(), 1024);
    assert_eq!(c.request(&at_limit)["result"][0], padding.as_str());

    // Over the limit, sent in pieces: one error, then the rest of the line is skipped.
    let big = request(2, "echo", json!(["y".repeat(100_000)]));
    for piece in big.as_bytes().chunks(4096) {
        c.send_raw(piece);
    }
    c.send_raw(b"\n");
    let reply = c.recv();
    assert_eq!(error_code(&reply), rpc::INVALID_REQUEST);
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(
        reply["error"]["message"],
        "request exceeds 1024 bytes; raise [control] max_request_bytes to send larger \
         requests (an acl.apply of many rules, for example)"
    );
    c.assert_alive(3);

    // Over the limit in one write together with the next request.
    c.send_raw(format!("{}\n{}\n", "z".repeat(5000), request(4, "echo", json!([4]))).as_bytes());
    assert_eq!(error_code(&c.recv()), rpc::INVALID_REQUEST);
    assert_eq!(c.recv()["result"], json!([4]));
}

#[test]
fn many_concurrent_clients_get_their_own_answers() {
    let server = start();
    let path = server.path.clone();
    let threads: Vec<_> = (0..20)
        .map(|client| {
            let path = path.clone();
            thread::spawn(move || {
                if client % 2 == 0 {
                    let mut c = Client::connect(&path).expect("connect");
                    c.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
                    for seq in 0..50 {
                        let params = json!({ "client": client, "seq": seq });
                        assert_eq!(c.call("echo", params.clone()).expect("call"), params);
                    }
                } else {
                    let mut c = Raw::connect(&path);
                    for seq in 0..50u64 {
                        let id = client * 1000 + seq;
                        let reply = c.request(&request(id, "echo", json!([client, seq])));
                        assert_eq!(reply["id"], id);
                        assert_eq!(reply["result"], json!([client, seq]));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
}

#[test]
fn client_that_leaves_mid_request_does_not_disturb_others() {
    let server = start();
    let mut good = server.connect();
    let mut half = server.connect();
    half.send_raw(br#"{"jsonrpc":"2.0","id":1,"method":"ec"#);
    good.assert_alive(1);
    drop(half);
    good.assert_alive(2);

    // One that leaves with unread replies queued.
    let mut rude = server.connect();
    for id in 0..100 {
        rude.send(&request(id, "echo", json!(["x".repeat(1000)])));
    }
    drop(rude);
    good.assert_alive(3);
    let mut later = server.connect();
    later.assert_alive(4);
}

#[test]
fn a_client_that_does_not_read_is_throttled_without_blocking_others() {
    let server = start();
    let mut flood = Raw::connect(&server.path);
    flood
        .reader
        .get_ref()
        .set_write_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut writer = flood.reader.get_ref().try_clone().expect("clone");
    let line = format!("{}\n", request(1, "echo", json!(["f".repeat(4000)])));
    // Write until the server stops reading us and the socket buffers fill up (the write
    // times out), or 16 MiB if it never does.
    let flooder = thread::spawn(move || {
        let mut sent = 0usize;
        while sent * line.len() < 16 << 20 {
            match writer.write_all(line.as_bytes()) {
                Ok(()) => sent += 1,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return (sent, true);
                }
                Err(e) => panic!("flood write: {e}"),
            }
        }
        (sent, false)
    });
    let mut other = server.connect();
    let started = Instant::now();
    while !flooder.is_finished() {
        other.assert_alive(1);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "flood did not stop"
        );
    }
    let (sent, blocked) = flooder.join().expect("flooder");
    assert!(
        blocked,
        "the server kept reading a client that reads no replies ({sent} sent)"
    );
    other.assert_alive(2);

    // Reading resumes the flooder's connection; every request is answered in order.
    let reader = thread::spawn(move || {
        for _ in 0..sent {
            assert_eq!(flood.recv()["id"], 1);
        }
    });
    reader.join().expect("flood reader");
    other.assert_alive(3);
}

#[test]
fn panicking_method_is_an_internal_error() {
    let server = start();
    let mut c = server.connect();
    let reply = c.request(&request(1, "panic", json!({})));
    assert_eq!(error_code(&reply), rpc::INTERNAL_ERROR);
    assert_eq!(reply["id"], 1);
    c.assert_alive(2);
}

#[test]
fn tick_is_called_at_the_interval() {
    let server = start_with(|cfg| cfg.tick = Duration::from_millis(20));
    thread::sleep(Duration::from_millis(300));
    let ticks = server.counters.ticks.load(Ordering::SeqCst);
    assert!(
        (5..=20).contains(&ticks),
        "{ticks} ticks in 300 ms at 20 ms"
    );
    // Requests do not stop the ticks.
    let mut c = server.connect();
    for id in 0..20 {
        c.assert_alive(id);
        thread::sleep(Duration::from_millis(10));
    }
    assert!(server.counters.ticks.load(Ordering::SeqCst) > ticks);
}

/// Whether this test runs as root (the owner of `/proc/self` is the effective uid).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

#[test]
fn clients_over_the_limit_are_told_why_and_root_is_never_locked_out() {
    // One slot for anyone, one kept for root.
    let server = start_with(|cfg| {
        cfg.max_clients = 2;
        cfg.root_reserved_clients = 1;
    });
    let mut a = server.connect();
    a.assert_alive(1);
    if !running_as_root() {
        let mut b = server.connect();
        let reply = b.recv();
        assert_eq!(reply["error"]["code"], -32000, "{reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("[control] root_reserved_clients"),
            "{reply}"
        );
        assert!(b.closed_by_server());
        a.assert_alive(2);
        return;
    }
    let mut b = server.connect();
    b.assert_alive(2);
    thread::sleep(Duration::from_millis(20));
    b.assert_alive(3);
    // The table is full: root takes the slot of `a`, idle the longest, which is told.
    let mut c = server.connect();
    c.assert_alive(4);
    let reply = a.recv();
    assert_eq!(reply["error"]["code"], -32000, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("idle the longest"),
        "{reply}"
    );
    assert!(a.closed_by_server());
    b.assert_alive(5);
    drop(c);
    // Once the server has seen c leave, a new client gets in without evicting anyone.
    let started = Instant::now();
    loop {
        let mut d = server.connect();
        let _ = d
            .reader
            .get_mut()
            .write_all(format!("{}\n", request(6, "echo", json!([]))).as_bytes());
        let mut line = String::new();
        if matches!(d.reader.read_line(&mut line), Ok(n) if n > 0) {
            break;
        }
        assert!(
            started.elapsed() < IO_TIMEOUT,
            "no room freed after a client left"
        );
        thread::sleep(Duration::from_millis(10));
    }
    b.assert_alive(7);
}

#[test]
fn socket_is_owner_only() {
    let server = start();
    let meta = fs::metadata(&server.path).expect("socket exists");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
}

#[test]
fn missing_parent_directory_is_created() {
    let dir = temp_dir();
    let path = dir.path().join("run/ferrule/ferrule.sock");
    let server = Server::bind(config(&path)).expect("bind");
    let parent = fs::metadata(path.parent().expect("parent")).expect("parent exists");
    assert!(parent.is_dir());
    // 0755, less whatever the umask removes.
    assert_eq!(parent.permissions().mode() & 0o777 & !0o755, 0);
    let running = spawn(server, dir, path);
    running.connect().assert_alive(1);
}

#[test]
fn shutdown_stops_run_and_removes_the_socket() {
    let mut server = start();
    let mut c = server.connect();
    c.assert_alive(1);
    // From another thread, while a client is connected.
    let handle = server.handle.clone();
    thread::spawn(move || handle.shutdown())
        .join()
        .expect("shutdown thread");
    assert_eq!(server.join(), StopReason::Shutdown);
    assert!(!server.path.exists(), "socket file left behind");
    assert!(server.path.parent().expect("parent").exists());
    assert!(
        c.closed_by_server(),
        "clients are disconnected when the server goes"
    );
}

#[test]
fn shutdown_before_run_returns_at_once_and_run_can_resume() {
    let dir = temp_dir();
    let path = dir.path().join("ferrule.sock");
    let mut server = Server::bind(config(&path)).expect("bind");
    assert_eq!(server.socket_path(), path.as_path());
    let mut service = TestService {
        counters: Arc::default(),
    };
    server.shutdown_handle().shutdown();
    assert_eq!(server.run(&mut service).expect("run"), StopReason::Shutdown);
    // The request was consumed; the server can run again.
    let mut running = spawn(server, dir, path);
    running.connect().assert_alive(1);
    assert_eq!(running.stop(), StopReason::Shutdown);
    assert!(!running.path.exists());
}

#[test]
fn sigterm_stops_run() {
    let dir = temp_dir();
    let path = dir.path().join("ferrule.sock");
    let mut server = Server::bind(config(&path)).expect("bind");
    server.catch_signals().expect("signals");
    server.catch_signals().expect("signals again");
    let mut running = spawn(server, dir, path);
    running.connect().assert_alive(1);
    // SIGHUP is logged and ignored.
    signal_hook::low_level::raise(signal_hook::consts::SIGHUP).expect("raise");
    thread::sleep(Duration::from_millis(50));
    running.connect().assert_alive(2);
    signal_hook::low_level::raise(signal_hook::consts::SIGTERM).expect("raise");
    assert_eq!(
        running.join(),
        StopReason::Signal(signal_hook::consts::SIGTERM)
    );
    assert!(!running.path.exists(), "socket file left behind");
}

#[test]
fn bind_refuses_a_live_socket() {
    let server = start();
    match Server::bind(config(&server.path)) {
        Err(e @ ServerError::InUse { .. }) => {
            let text = e.to_string();
            assert!(text.contains("is in use by another process"), "{text}");
            assert!(text.contains(&server.path.display().to_string()), "{text}");
        }
        other => panic!("expected InUse, got {other:?}"),
    }
    // The live server's socket was left alone.
    server.connect().assert_alive(1);
}

#[test]
fn bind_refuses_a_socket_another_program_listens_on() {
    let dir = temp_dir();
    let path = dir.path().join("ferrule.sock");
    // Not a ferruled: it holds no lock, but it answers.
    let other = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    match Server::bind(config(&path)) {
        Err(e @ ServerError::InUse { .. }) => {
            assert!(
                e.to_string().contains("is in use by another process"),
                "{e}"
            );
        }
        other => panic!("expected InUse, got {other:?}"),
    }
    assert!(path.exists(), "its socket was left alone");
    drop(other);
}

#[test]
fn bind_replaces_a_stale_socket() {
    let dir = temp_dir();
    let path = dir.path().join("ferrule.sock");
    // A socket whose owner is gone: std's listener leaves the file behind on drop.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("stale bind"));
    assert!(fs::metadata(&path).expect("stale").file_type().is_socket());
    assert!(UnixStream::connect(&path).is_err());
    let server = Server::bind(config(&path)).expect("bind over a stale socket");
    let running = spawn(server, dir, path);
    running.connect().assert_alive(1);
}

#[test]
fn bind_never_deletes_a_regular_file() {
    let dir = temp_dir();
    let path = dir.path().join("ferrule.sock");
    fs::write(&path, "precious").expect("write");
    match Server::bind(config(&path)) {
        Err(e @ ServerError::NotASocket { .. }) => {
            assert!(e.to_string().contains("not a socket"), "{e}");
        }
        other => panic!("expected NotASocket, got {other:?}"),
    }
    assert_eq!(fs::read_to_string(&path).expect("still there"), "precious");

    // Nor a directory.
    let sub = dir.path().join("sub");
    fs::create_dir(&sub).expect("mkdir");
    assert!(matches!(
        Server::bind(config(&sub)),
        Err(ServerError::NotASocket { .. })
    ));
    assert!(sub.is_dir());
}

#[test]
fn bind_rejects_unusable_settings() {
    let dir = temp_dir();
    let path = dir.path().join("ferrule.sock");
    let cfg = ServerConfig {
        tick: Duration::ZERO,
        ..config(&path)
    };
    assert!(matches!(Server::bind(cfg), Err(ServerError::Config(_))));
    let cfg = ServerConfig {
        max_request_bytes: 0,
        ..config(&path)
    };
    assert!(matches!(Server::bind(cfg), Err(ServerError::Config(_))));
    assert!(!path.exists());
}

#[test]
fn server_drop_leaves_a_replaced_socket_alone() {
    let dir = temp_dir();
    let path = dir.path().join("ferrule.sock");
    let server = Server::bind(config(&path)).expect("bind");
    // Someone removes our socket and binds their own there.
    fs::remove_file(&path).expect("remove");
    let theirs = std::os::unix::net::UnixListener::bind(&path).expect("their bind");
    drop(server);
    assert!(
        path.exists(),
        "a socket the server did not create was removed"
    );
    drop(theirs);
}

#[test]
fn client_calls_and_errors() {
    let server = start();
    let mut client = server.client();
    assert_eq!(client.socket_path(), server.path.as_path());
    assert_eq!(
        client.call("echo", json!({ "a": 1 })).expect("echo"),
        json!({ "a": 1 })
    );
    assert_eq!(client.call("echo", Value::Null).expect("echo"), Value::Null);

    let info: VersionInfo = client
        .call_typed(api::method::VERSION, Value::Null)
        .expect("version");
    assert_eq!(info.version, "9.9.9");

    match client.call("no.such.method", Value::Null) {
        Err(ClientError::Rpc(e)) => {
            assert_eq!(e.code, rpc::METHOD_NOT_FOUND);
            assert!(e.to_string().contains("(code -32601)"), "{e}");
        }
        other => panic!("expected an RPC error, got {other:?}"),
    }
    match client.call("add", json!({ "a": 1, "z": 2 })) {
        Err(ClientError::Rpc(e)) => {
            assert_eq!(e.code, rpc::INVALID_PARAMS);
            assert_eq!(e.data, Some(json!({ "field": "z" })));
        }
        other => panic!("expected an RPC error, got {other:?}"),
    }
    // A result that does not decode is a protocol error, not a panic.
    match client.call_typed::<api::PortsList>(api::method::PORTS_LIST, Value::Null) {
        Err(e @ ClientError::Protocol(_)) => {
            assert!(
                e.to_string().starts_with("unexpected reply from ferruled:"),
                "{e}"
            );
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    // Still usable.
    assert_eq!(
        client.call("add", json!({ "a": 1, "b": 2 })).expect("add"),
        json!(3)
    );
}

#[test]
fn client_skips_the_late_reply_of_a_timed_out_call() {
    let server = start();
    let mut client = server.client();
    client
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    match client.call("sleep", json!({ "ms": 400 })) {
        Err(ClientError::Io(e)) => {
            assert!(
                matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                "{e}"
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    client.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    assert_eq!(
        client.call("echo", json!(["after"])).expect("echo"),
        json!(["after"])
    );
}

#[test]
fn client_reports_a_missing_daemon() {
    let dir = temp_dir();
    let path = dir.path().join("nobody.sock");
    match Client::connect(&path) {
        Err(e @ ClientError::Connect { .. }) => {
            let text = e.to_string();
            assert!(text.starts_with("cannot connect to ferruled at "), "{text}");
            assert!(text.contains("nobody.sock"), "{text}");
            assert!(text.contains("(is ferruled running? set --socket or FERRULE_SOCKET)"));
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
}

#[test]
fn client_reports_a_daemon_that_hangs_up() {
    let dir = temp_dir();
    let path = dir.path().join("rude.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let peer = thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut line = String::new();
        BufReader::new(&mut stream)
            .read_line(&mut line)
            .expect("read");
        stream.write_all(b"this is not json\n").expect("write");
        let mut line = String::new();
        BufReader::new(&mut stream)
            .read_line(&mut line)
            .expect("read");
        // Hang up without answering the second request.
    });
    let mut client = Client::connect(&path).expect("connect");
    client.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    match client.call("version", Value::Null) {
        Err(e @ ClientError::Protocol(_)) => {
            assert!(e.to_string().contains("this is not json"), "{e}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    let second = client.call("version", Value::Null);
    peer.join().expect("peer");
    match second {
        Err(ClientError::Io(e)) => assert_eq!(e.kind(), ErrorKind::UnexpectedEof),
        other => panic!("expected EOF, got {other:?}"),
    }
}

fn ferrulectl(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferrulectl"))
        .args(args)
        .env_remove("FERRULE_SOCKET")
        .output()
        .expect("run ferrulectl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn ferrulectl_without_a_daemon_fails_with_a_message() {
    let dir = temp_dir();
    let socket = dir.path().join("missing.sock");
    let socket = socket.to_str().expect("utf-8 path");
    let out = ferrulectl(&["--socket", socket, "ports"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("ferrulectl: cannot connect to ferruled at "),
        "{stderr}"
    );
    assert!(stderr.contains("missing.sock"), "{stderr}");
    assert!(stderr.contains("is ferruled running?"), "{stderr}");
    assert!(out.stdout.is_empty());

    // The same through the environment.
    let out = Command::new(env!("CARGO_BIN_EXE_ferrulectl"))
        .args(["--json", "stats"])
        .env("FERRULE_SOCKET", socket)
        .output()
        .expect("run ferrulectl");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("missing.sock"));
}

#[test]
fn ferrulectl_usage_errors_exit_2() {
    assert_eq!(ferrulectl(&["no-such-command"]).status.code(), Some(2));
    assert_eq!(ferrulectl(&[]).status.code(), Some(2));
    let help = ferrulectl(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    let help = text(&help.stdout);
    assert!(
        help.contains("Examples:") && help.contains("FERRULE_SOCKET"),
        "{help}"
    );
}

#[test]
fn ferrulectl_version_against_a_daemon() {
    let server = start();
    let socket = server.path.to_str().expect("utf-8 path");

    let out = ferrulectl(&["--socket", socket, "--json", "version"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let reply: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let info: VersionInfo = serde_json::from_value(reply).expect("a VersionInfo");
    assert_eq!(info.version, "9.9.9");
    assert_eq!(info.api_version, api::API_VERSION);

    let out = ferrulectl(&["version", "--socket", socket]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with(&format!("ferrulectl {}", env!("CARGO_PKG_VERSION"))),
        "{stdout}"
    );
    assert!(stdout.contains("ferruled 9.9.9 (control API 1, commit abc1234, DPDK 22.11.11)"));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn ferrulectl_reports_daemon_errors_and_bad_replies() {
    let server = start();
    let socket = server.path.to_str().expect("utf-8 path");

    // The test daemon has no stats.get.
    let out = ferrulectl(&["--socket", socket, "stats"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("ferrulectl: "), "{stderr}");
    assert!(
        stderr.contains("stats.get") && stderr.contains("(code -32601)"),
        "{stderr}"
    );

    // Its ports.list reply does not match the API types.
    let out = ferrulectl(&["--socket", socket, "ports"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("ferrulectl: unexpected reply from ferruled: "),
        "{stderr}"
    );

    // With --json the raw reply is printed as it is.
    let out = ferrulectl(&["--socket", socket, "--json", "ports"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let reply: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(reply, json!({ "ports": "not a list" }));
}

#[test]
fn ferrulectl_names_the_key_that_raises_the_request_limit() {
    let server = start_with(|cfg| cfg.max_request_bytes = 1024);
    let socket = server.path.to_str().expect("utf-8 path");
    // An ACL state well over 1024 bytes once encoded.
    let rules: Vec<Value> = (1..200)
        .map(|port| json!({"action": "permit", "proto": "tcp", "dst_port": port}))
        .collect();
    let file = server._dir.path().join("big.json");
    fs::write(
        &file,
        json!({"tables": [{"name": "big", "rules": rules}]}).to_string(),
    )
    .expect("write");
    let out = ferrulectl(&[
        "--socket",
        socket,
        "acl",
        "apply",
        "-f",
        file.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("request exceeds 1024 bytes; raise [control] max_request_bytes"),
        "{stderr}"
    );
}
