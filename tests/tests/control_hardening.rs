//! End-to-end: what a client can and cannot do to `ferruled` over its control socket
//! (issue 18). One test per finding, each against real daemons on `net_null` ports:
//! a client that never reads cannot stall the control thread or grow its memory; idle
//! connections cannot lock root out; SIGHUP does not kill the daemon; two daemons
//! started together never both run; peer credentials are checked on both sides; client
//! text cannot forge log lines; and a seeded fuzz run over every method with random
//! framing leaves every reply matched to its request.

use ferrule_e2e::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Two `net_null` ports that receive nothing (the worker naps), after `base_config` and
/// a `[control]` section holding `control`.
fn config(prefix: &str, control: &str) -> String {
    format!(
        "{}[control]\n{control}\n\
         [[port]]\nname = \"pod0\"\ndevargs = \"net_null_{p}0,size=64,no-rx=1\"\nrole = \"pod\"\n\n\
         [[port]]\nname = \"uplink0\"\ndevargs = \"net_null_{p}1,size=64,no-rx=1\"\nrole = \"uplink\"\n",
        base_config(prefix),
        p = prefix.replace(['-', '.'], "_")
    )
}

/// A temporary directory other users may enter (the socket's mode decides the rest).
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

fn start(tag: &str, control: &str) -> Ferruled {
    let prefix = unique_prefix(tag);
    Ferruled::start_in(open_dir(), &config(&prefix, control), &prefix).expect("start ferruled")
}

const NOBODY: u32 = 65534;

/// `PROGRAM ARGS…` run as uid/gid 65534 without supplementary groups.
fn as_nobody(program: &Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
        ])
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run setpriv")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A raw connection to the control socket.
struct Raw {
    reader: BufReader<UnixStream>,
}

impl Raw {
    fn connect(path: &Path) -> Raw {
        let s = UnixStream::connect(path).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        Raw {
            reader: BufReader::new(s),
        }
    }

    fn send(&mut self, line: &str) {
        self.reader
            .get_mut()
            .write_all(format!("{line}\n").as_bytes())
            .expect("write");
    }

    /// The next line, or `None` at end of file.
    fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("a JSON line")),
            Err(e) => panic!("read: {e}"),
        }
    }

    /// Calls `method` (params left out when `Null`) and returns the reply.
    fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        let mut request = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if !params.is_null() {
            request["params"] = params;
        }
        self.send(&request.to_string());
        let reply = self.recv().expect("a reply");
        assert_eq!(reply["id"], id, "{reply}");
        reply
    }

    /// Expects the daemon's error line, then the close.
    fn closed_with(&mut self, words: &[&str]) {
        let r = self.recv().expect("an error line before the close");
        let message = r["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(r["error"]["code"], -32000, "{r}");
        for w in words {
            assert!(message.contains(w), "{w:?} not in {message:?}");
        }
        assert!(self.recv().is_none(), "closed after the error line");
    }
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Finding 2: with a 20k-rule ACL applied, a client that sends a batch and a pipeline
/// of `acl.dump` requests and never reads them cannot stall the control thread:
/// `stats.get` still answers within a second, and the daemon's memory stays bounded.
#[test]
fn stats_answer_while_a_client_stalls_on_large_dumps() {
    let d = start("stall", "max_request_bytes = 16777216");
    let rules: Vec<Value> = (0..20_000u32)
        .map(|i| {
            json!({
                "action": if i % 3 == 0 { "deny" } else { "permit" },
                "proto": "tcp",
                "src": format!("10.{}.{}.0/24", (i / 256) % 256, i % 256),
                "dst_port": i % 65535 + 1,
                "origin": format!("default/policy-{}", i % 500),
            })
        })
        .collect();
    let mut admin = Raw::connect(&d.socket);
    admin
        .reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    let applied = admin.call(
        1,
        "acl.apply",
        json!({
            "tables": [{"name": "big", "rules": rules}],
            "attach": [{"port": "pod0", "direction": "ingress", "table": "big"}],
        }),
    );
    assert_eq!(applied["result"]["rules"], 20_000, "{applied}");
    // One dump read whole: its size, and the daemon's memory after it.
    let started = Instant::now();
    let dump = admin.call(2, "acl.dump", json!({}));
    let dump_ms = started.elapsed().as_millis();
    let dump_bytes = dump.to_string().len();
    assert_eq!(
        dump["result"]["tables"][0]["rules"][19_999]["index"],
        19_999
    );
    let pid = d.pid().expect("running");
    let rss_before = rss_kb(pid);

    // The client that never reads: a batch of 200 dumps and 100 pipelined ones, about
    // a gigabyte of replies if the daemon made them all.
    let mut stalled = UnixStream::connect(&d.socket).expect("connect");
    stalled
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let item = |id: u64| json!({"jsonrpc":"2.0","id":id,"method":"acl.dump"}).to_string();
    let mut lines = format!("[{}]\n", (0..200).map(item).collect::<Vec<_>>().join(","));
    for id in 1000..1100 {
        lines.push_str(&item(id));
        lines.push('\n');
    }
    stalled.write_all(lines.as_bytes()).expect("write");
    std::thread::sleep(Duration::from_millis(500));

    let mut worst = Duration::ZERO;
    for i in 0..20 {
        let started = Instant::now();
        let stats = admin.call(100 + i, "stats.get", Value::Null);
        worst = worst.max(started.elapsed());
        assert!(stats["result"]["workers"].is_array(), "{stats}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    let out = d.ctl(&["--json", "stats"]);
    let ctl_elapsed = started.elapsed();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rss_during = rss_kb(pid);
    eprintln!(
        "acl.dump of 20000 rules: {dump_bytes} bytes in {dump_ms} ms; stats.get under a \
         stalled client: worst {worst:?} of 20, ferrulectl stats {ctl_elapsed:?}; RSS {} MiB \
         before, {} MiB with the stalled client",
        rss_before / 1024,
        rss_during / 1024
    );
    assert!(worst < Duration::from_secs(1), "stats.get took {worst:?}");
    assert!(
        ctl_elapsed < Duration::from_secs(2),
        "ferrulectl stats took {ctl_elapsed:?}"
    );
    assert!(
        rss_during < rss_before + 64 * 1024,
        "RSS grew from {rss_before} kB to {rss_during} kB"
    );
    // The daemon did answer the stalled client as far as the socket took it.
    stalled.set_nonblocking(true).unwrap();
    let mut waiting = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(n) = stalled.read(&mut buf) {
        if n == 0 {
            break;
        }
        waiting += n;
    }
    assert!(waiting > 64 * 1024, "only {waiting} bytes were sent to it");
    drop(stalled);
    admin.call(200, "version", Value::Null);
}

/// Finding 3: idle connections cannot lock root out. With every open slot and the
/// ones kept for root taken by idle connections, `ferrulectl` as root still gets in
/// (the connection idle the longest makes room and is told why); a non-root client is
/// refused with the limit named.
#[test]
fn idle_connections_do_not_lock_out_root() {
    let d = start(
        "slots",
        "socket_mode = 0o666\nallowed_uids = [0, 65534]\nmax_clients = 256\n\
         root_reserved_clients = 8\nmax_clients_per_peer = 256",
    );
    // A non-root client is served while there is room.
    let out = as_nobody(
        &ferrulectl_bin(),
        &["--socket", d.socket.to_str().unwrap(), "version"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut idle: Vec<Raw> = (0..248).map(|_| Raw::connect(&d.socket)).collect();
    idle[0].call(1, "version", Value::Null);
    idle[247].call(2, "version", Value::Null);
    // The open slots are taken: not root, not served, and told why.
    let out = as_nobody(
        &ferrulectl_bin(),
        &["--socket", d.socket.to_str().unwrap(), "version"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("too many clients") && stderr.contains("root_reserved_clients"),
        "{stderr}"
    );
    // Root takes the reserved ones, then the 257th connection.
    idle.extend((0..8).map(|_| Raw::connect(&d.socket)));
    idle[255].call(3, "version", Value::Null);
    // Some of them are busy now and then; the idle ones are older.
    for (i, c) in idle.iter_mut().enumerate().skip(16).step_by(16) {
        c.call(10 + i as u64, "version", Value::Null);
    }
    let out = d.ctl(&["version"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("ferruled "),
        "{}",
        text(&out.stdout)
    );
    // The connection idle the longest made room, and was told.
    idle[1].closed_with(&["idle the longest", "[control] max_clients"]);
    idle[0].call(4, "version", Value::Null);
    assert!(d
        .log_text()
        .contains("closing the connection idle the longest"));
}

/// Finding 3: one process cannot hold every slot; idle connections and request lines
/// left unfinished (slowloris) are closed, with the reason.
#[test]
fn per_process_limit_and_timeouts() {
    let d = start("timeouts", "idle_timeout_s = 3\nrequest_timeout_s = 1");
    let mut idle = Raw::connect(&d.socket);
    let mut slow = Raw::connect(&d.socket);
    slow.reader
        .get_mut()
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,")
        .unwrap();
    let started = Instant::now();
    slow.closed_with(&["[control] request_timeout_s"]);
    assert!(started.elapsed() < Duration::from_secs(10));
    idle.closed_with(&["[control] idle_timeout_s"]);
    assert!(started.elapsed() >= Duration::from_secs(2));

    // 32 connections per process by default.
    let mut conns: Vec<Raw> = (0..40).map(|_| Raw::connect(&d.socket)).collect();
    for c in &mut conns[32..] {
        c.closed_with(&["[control] max_clients_per_peer", "at most 32"]);
    }
    conns[0].call(1, "version", Value::Null);
    conns[31].call(2, "version", Value::Null);
    // Another process is not affected.
    let out = d.ctl(&["version"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Finding 4: SIGHUP is logged and ignored.
#[test]
fn sighup_is_ignored_and_logged() {
    let mut d = start("hup", "");
    let pid = d.pid().expect("running").to_string();
    for _ in 0..3 {
        let st = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
        assert!(st.success());
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let out = d.ctl(&["version"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(d.log_text().contains("SIGHUP ignored"), "{}", d.log_text());
    let status = d.terminate();
    assert_eq!(status.code(), Some(0), "{}", d.log_text());
    assert!(!d.socket.exists());
}

/// Children killed (by pid) and their prefixes cleaned up even when a test fails.
struct Daemons {
    children: Vec<(Child, String)>,
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for (child, prefix) in &mut self.children {
            let pid = child.id();
            let _ = child.kill();
            let _ = child.wait();
            for p in leftovers(prefix) {
                let _ = std::fs::remove_file(&p).or_else(|_| std::fs::remove_dir_all(&p));
            }
            remove_eal_lock(prefix, pid);
        }
    }
}

/// Finding 5: two daemons started at the same moment on the same socket: exactly one
/// runs, the other exits 1 naming the lock and the pid holding it. Twenty times, half
/// with the same EAL file prefix too.
#[test]
fn two_daemons_started_together_never_both_run() {
    for round in 0..20 {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("ctl").join("ferrule.sock");
        let same_prefix = round % 2 == 0;
        let a = unique_prefix("race");
        let b = if same_prefix {
            a.clone()
        } else {
            unique_prefix("race")
        };
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let spawn = |prefix: &str, tag: &str| {
            let cfg = dir.path().join(format!("{tag}.toml"));
            std::fs::write(&cfg, config(prefix, "")).unwrap();
            let log = dir.path().join(format!("{tag}.log"));
            let mut cmd = Command::new(ferruled_bin());
            cmd.arg("--config")
                .arg(&cfg)
                .arg("--socket")
                .arg(&socket)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap());
            (cmd, log)
        };
        let (mut cmd_a, log_a) = spawn(&a, "a");
        let (mut cmd_b, log_b) = spawn(&b, "b");
        let started = std::thread::scope(|s| {
            let ba = std::sync::Arc::clone(&barrier);
            let ta = s.spawn(move || {
                ba.wait();
                cmd_a.spawn()
            });
            let bb = std::sync::Arc::clone(&barrier);
            let tb = s.spawn(move || {
                bb.wait();
                cmd_b.spawn()
            });
            (ta.join().unwrap(), tb.join().unwrap())
        });
        let mut daemons = Daemons {
            children: vec![
                (started.0.expect("spawn a"), a.clone()),
                (started.1.expect("spawn b"), b.clone()),
            ],
        };
        // One exits; it must be the loser of a lock.
        let deadline = Instant::now() + Duration::from_secs(60);
        let (loser, status) = loop {
            let mut exited = None;
            for (i, (child, _)) in daemons.children.iter_mut().enumerate() {
                if let Some(st) = child.try_wait().unwrap() {
                    exited = Some((i, st));
                }
            }
            if let Some(e) = exited {
                break e;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: both still running"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let logs = [&log_a, &log_b];
        let loser_log = std::fs::read_to_string(logs[loser]).unwrap();
        assert_eq!(status.code(), Some(1), "round {round}: {loser_log}");
        assert!(
            loser_log.contains("is in use by another process") && loser_log.contains(".lock"),
            "round {round}: {loser_log}"
        );
        let winner_pid = daemons.children[1 - loser].0.id();
        assert!(
            loser_log.contains(&format!("pid {winner_pid} holds")),
            "round {round}: {loser_log}"
        );
        assert!(
            loser_log.contains("stop the other ferruled first"),
            "{loser_log}"
        );
        // The other one runs and answers.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let winner = &mut daemons.children[1 - loser].0;
            if let Some(st) = winner.try_wait().unwrap() {
                panic!(
                    "round {round}: the winner exited too ({st}): {}",
                    std::fs::read_to_string(logs[1 - loser]).unwrap()
                );
            }
            let out = Command::new(ferrulectl_bin())
                .arg("--socket")
                .arg(&socket)
                .arg("version")
                .output()
                .unwrap();
            if out.status.success() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: the winner never answered"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let (winner, _) = &mut daemons.children[1 - loser];
        let st = Command::new("kill")
            .args(["-TERM", &winner.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let st = winner.wait().unwrap();
        assert_eq!(st.code(), Some(0), "round {round}");
        drop(daemons);
    }
}

/// Finding 6: a client whose uid is not allowed is refused with its uid and the keys
/// named (and logged), even when the socket's mode lets it connect; allowed, it is
/// served and its change requests are logged with its uid and pid.
#[test]
fn peer_credentials_are_checked() {
    let d = start("creds", "socket_mode = 0o666");
    let socket = d.socket.to_str().unwrap().to_string();
    let out = as_nobody(&ferrulectl_bin(), &["--socket", &socket, "version"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("permission denied: uid 65534")
            && stderr.contains("[control] allowed_uids or allowed_gids"),
        "{stderr}"
    );
    assert!(!text(&out.stdout).contains("ferruled "));
    let log = d.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("refused a client") && l.contains("uid=65534")),
        "{log}"
    );

    let d = start("creds-ok", "socket_mode = 0o666\nallowed_uids = [0, 65534]");
    let socket = d.socket.to_str().unwrap().to_string();
    let out = as_nobody(&ferrulectl_bin(), &["--socket", &socket, "version"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = as_nobody(
        &ferrulectl_bin(),
        &["--socket", &socket, "acl", "clear-counters"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = d.log_text();
    assert!(
        log.lines().any(|l| l.contains("control change request: ok")
            && l.contains("uid=65534")
            && l.contains("pid=")
            && l.contains("method=acl.clear-counters")),
        "{log}"
    );
    // Reads are not logged as changes.
    assert!(!log.contains("method=version"), "{log}");
}

/// Not a test of its own: the forged server of `a_forged_server_is_refused`, run as
/// uid 65534 by re-executing this test binary with `FERRULE_E2E_FORGED_SOCKET` set.
/// It answers every request with a success.
#[test]
fn forged_server_helper() {
    let Some(path) = std::env::var_os("FERRULE_E2E_FORGED_SOCKET") else {
        return;
    };
    let listener = UnixListener::bind(PathBuf::from(path)).expect("bind");
    listener.set_nonblocking(true).unwrap();
    // Until the test kills it (a bound in case it cannot).
    let deadline = Instant::now() + Duration::from_secs(900);
    while Instant::now() < deadline {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
                    let id = serde_json::from_str::<Value>(&line)
                        .map(|v| v["id"].clone())
                        .unwrap_or(Value::Null);
                    let reply = json!({"jsonrpc":"2.0","id":id,"result":{
                        "api_version": 1, "version": "6.6.6", "git_commit": "forged",
                        "dpdk": "0", "counters": 0}});
                    let _ = reader.get_mut().write_all(format!("{reply}\n").as_bytes());
                    line.clear();
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Finding 6, client side: a server planted at the socket path by another user is
/// refused before anything is sent: no forged success, exit 1, the owner named.
#[test]
fn a_forged_server_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.path().join("ferrule.sock");
    let child = Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([
            "forged_server_helper",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FERRULE_E2E_FORGED_SOCKET", &socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the forged server");
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _forged = Kill(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while UnixStream::connect(&socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "the forged server never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let path = socket.to_str().unwrap();
    let ctl = |args: &[&str], env: Option<&str>| {
        let mut cmd = Command::new(ferrulectl_bin());
        cmd.arg("--socket")
            .arg(path)
            .args(args)
            .env_remove("FERRULE_SERVER_UID");
        if let Some(uid) = env {
            cmd.env("FERRULE_SERVER_UID", uid);
        }
        cmd.output().unwrap()
    };
    for args in [
        &["version"][..],
        &["acl", "clear-counters"],
        &["--json", "stats"],
    ] {
        let out = ctl(args, None);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            text(&out.stdout)
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("refusing the server at {path}"))
                && stderr.contains("uid 65534")
                && stderr.contains("--server-uid"),
            "{stderr}"
        );
        assert!(!text(&out.stdout).contains("6.6.6"));
    }
    // Trusted on purpose, it is served (so the refusal above was the check's doing).
    let out = ctl(&["version"], Some("65534"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("ferruled 6.6.6"));
    let out = ctl(&["--server-uid", "65534", "version"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Finding 7: a method name carrying a newline, an ANSI escape and a NUL does not
/// forge a log line; repeated warnings are rate-limited with a count of the rest.
#[test]
fn client_text_cannot_forge_log_lines() {
    let d = start("logs", "");
    let forged = "x\n2099-01-01T00:00:00.000000Z  INFO ferrule_daemon: ACL applied\u{1b}[2K\u{0}";
    let mut c = Raw::connect(&d.socket);
    let reply = c.call(1, forged, Value::Null);
    assert_eq!(reply["error"]["code"], -32601);
    // A flood of bad requests.
    for id in 2..302 {
        let reply = c.call(id, "no.such.method", json!({}));
        assert_eq!(reply["error"]["code"], -32601);
    }
    std::thread::sleep(Duration::from_millis(300));
    let log = d.log_text();
    assert!(
        !log.lines().any(|l| l.starts_with("2099-01-01")),
        "a forged line: {log}"
    );
    assert!(!log.contains('\u{1b}') && !log.contains('\u{0}'), "{log:?}");
    assert!(
        log.contains(
            "x\\n2099-01-01T00:00:00.000000Z  INFO ferrule_daemon: ACL applied\\u{1b}[2K\\u{0}"
        ),
        "{log}"
    );
    let failed = log
        .lines()
        .filter(|l| l.contains("control request failed"))
        .count();
    // Ten per 10 s (twenty should the flood straddle two windows on a slow machine).
    assert!(
        failed <= 20,
        "{failed} warnings logged for 301 bad requests"
    );
    // The rest are counted when the window ends.
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let log = d.log_text();
        let counted: u64 = log
            .lines()
            .filter(|l| l.contains("more \"request failed\" warnings suppressed"))
            .filter_map(|l| {
                l.split(" more ")
                    .next()?
                    .rsplit(' ')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        if counted as usize + failed == 301 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no summary of suppressed warnings:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// xorshift64*: a seeded generator, so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

const METHODS: &[&str] = &[
    "version",
    "ports.list",
    "stats.get",
    "port.add",
    "port.del",
    "route.add",
    "route.del",
    "route.dump",
    "neigh.add",
    "neigh.del",
    "neigh.dump",
    "trace.run",
    "trace.start",
    "trace.dump",
    "acl.apply",
    "acl.dump",
    "acl.clear-counters",
    "vpc.sync",
    "vpc.show",
    "ct.dump",
    "ct.flush",
    "ct.stats",
    "nat.dump",
    "no.such.method",
    "",
    "acl.dump\n",
];

const KEYS: &[&str] = &[
    "name",
    "port",
    "table",
    "prefix",
    "via",
    "network",
    "ip",
    "mac",
    "src",
    "dst",
    "proto",
    "count",
    "tables",
    "attach",
    "global",
    "dry_run",
    "node_ips",
    "vpc_cidrs",
    "snat_ports",
    "in_port",
    "blackhole",
    "dst_port",
    "src_port",
    "rules",
    "action",
    "direction",
    "state",
];

const STRINGS: &[&str] = &[
    "",
    "default",
    "blue",
    "10.1.0.0/16",
    "0.0.0.0/0",
    "192.0.2.1",
    "fe80::1",
    "::/0",
    "02:00:00:00:00:01",
    "tcp",
    "udp",
    "permit",
    "deny",
    "ingress",
    "egress",
    "1024-2048",
    "x\u{0}y",
    "\u{1b}[31m",
    "é",
    "9999999999999999999999",
    "-1",
];

fn random_value(rng: &mut Rng, depth: u32) -> Value {
    match rng.below(if depth > 2 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.chance(50)),
        2 => json!(rng.next() as i64 >> rng.below(64)),
        3 => json!((rng.next() % 100_000) as f64 / 7.0),
        4 => json!(*rng.pick(STRINGS)),
        5 => {
            let n = rng.below(12) as usize;
            json!((0..n)
                .map(|_| char::from(b' ' + rng.below(95) as u8))
                .collect::<String>())
        }
        6 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => random_params(rng, depth + 1),
    }
}

fn random_params(rng: &mut Rng, depth: u32) -> Value {
    let mut m = serde_json::Map::new();
    for _ in 0..rng.below(5) {
        m.insert(rng.pick(KEYS).to_string(), random_value(rng, depth + 1));
    }
    Value::Object(m)
}

/// What a line should be answered with.
#[derive(Debug)]
enum Expect {
    /// One response with this id.
    One(Value),
    /// An array of responses with these ids.
    Many(Vec<Value>),
}

/// A random request object; its id when it expects an answer.
fn random_request(rng: &mut Rng, next_id: &mut u64) -> (Value, Option<Value>) {
    let method = *rng.pick(METHODS);
    let mut req = json!({"jsonrpc": "2.0", "method": method});
    match rng.below(10) {
        0 => {}
        1 => req["params"] = json!([]),
        2 => req["params"] = random_value(rng, 0),
        _ => req["params"] = random_params(rng, 0),
    }
    // Strings and objects as params are invalid requests: answered with their id.
    let id = match rng.below(10) {
        0 => None,
        1 => Some(Value::Null),
        2 => {
            *next_id += 1;
            Some(json!(format!("s{next_id}")))
        }
        _ => {
            *next_id += 1;
            Some(json!(*next_id))
        }
    };
    let answered = match &id {
        Some(id) => {
            req["id"] = id.clone();
            Some(id.clone())
        }
        // A notification with invalid params is still an invalid request: answered.
        None => match req.get("params") {
            Some(Value::Object(_) | Value::Array(_)) | None => None,
            Some(_) => Some(Value::Null),
        },
    };
    (req, answered)
}

/// One random line and what it should be answered with.
fn random_line(rng: &mut Rng, next_id: &mut u64, max: usize) -> (Vec<u8>, Option<Expect>) {
    match rng.below(20) {
        0 => {
            let n = 1 + rng.below(40) as usize;
            let junk: String = (0..n)
                .map(|_| char::from(b' ' + rng.below(95) as u8))
                .collect();
            (
                format!("}}{junk}").into_bytes(),
                Some(Expect::One(Value::Null)),
            )
        }
        1 => (
            format!("[{}]", "9".repeat(max + rng.below(20_000) as usize)).into_bytes(),
            Some(Expect::One(Value::Null)),
        ),
        2 => (b"  \t".to_vec(), None),
        3 => (b"[]".to_vec(), Some(Expect::One(Value::Null))),
        4..=6 => {
            let n = 1 + rng.below(8);
            let mut items = Vec::new();
            let mut ids = Vec::new();
            for _ in 0..n {
                if rng.chance(10) {
                    items.push(json!(rng.below(100)));
                    ids.push(Value::Null);
                    continue;
                }
                let (req, id) = random_request(rng, next_id);
                items.push(req);
                ids.extend(id);
            }
            let expect = (!ids.is_empty()).then_some(Expect::Many(ids));
            (Value::Array(items).to_string().into_bytes(), expect)
        }
        _ => {
            let (req, id) = random_request(rng, next_id);
            (req.to_string().into_bytes(), id.map(Expect::One))
        }
    }
}

/// Sends `lines` in random pieces on one connection while a thread reads the replies;
/// checks each against what its line expects. Returns the number of requests answered.
fn fuzz_connection(socket: &Path, seed: u64, lines: usize, max: usize) -> usize {
    let mut rng = Rng(seed);
    let mut next_id = seed * 1_000_000;
    let mut bytes = Vec::new();
    let mut expected = Vec::new();
    for _ in 0..lines {
        let (line, expect) = random_line(&mut rng, &mut next_id, max);
        bytes.extend_from_slice(&line);
        bytes.extend_from_slice(if rng.chance(10) { b"\r\n" } else { b"\n" });
        expected.extend(expect);
    }
    let stream = UnixStream::connect(socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let reader = stream.try_clone().unwrap();
    let replies = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut reader = BufReader::new(reader);
        let mut line = String::new();
        while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
            out.push(
                serde_json::from_str::<Value>(&line)
                    .unwrap_or_else(|e| panic!("reply {line:?} is not JSON: {e}")),
            );
            line.clear();
        }
        out
    });
    let mut writer = stream;
    let mut at = 0;
    while at < bytes.len() {
        let piece = if rng.chance(50) { 64 } else { 8192 };
        let n = (1 + rng.below(piece) as usize).min(bytes.len() - at);
        writer.write_all(&bytes[at..at + n]).expect("write");
        at += n;
        if rng.chance(2) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    writer.shutdown(std::net::Shutdown::Write).unwrap();
    let replies = replies.join().expect("reader");
    assert_eq!(
        replies.len(),
        expected.len(),
        "seed {seed}: {} replies for {} answered lines",
        replies.len(),
        expected.len()
    );
    let mut answered = 0;
    for (i, (reply, expect)) in replies.iter().zip(&expected).enumerate() {
        match expect {
            Expect::One(id) => {
                assert_eq!(&reply["id"], id, "seed {seed}, reply {i}: {reply}");
                assert_eq!(reply["jsonrpc"], "2.0");
                assert!(reply.get("result").is_some() != reply.get("error").is_some());
                answered += 1;
            }
            Expect::Many(ids) => {
                let got: Vec<&Value> = reply
                    .as_array()
                    .unwrap_or_else(|| panic!("seed {seed}, reply {i}: not an array: {reply}"))
                    .iter()
                    .map(|r| &r["id"])
                    .collect();
                assert_eq!(
                    got,
                    ids.iter().collect::<Vec<_>>(),
                    "seed {seed}, reply {i}"
                );
                answered += ids.len();
            }
        }
    }
    answered
}

/// A bounded, seeded fuzz run: every method with random params, random framing
/// (split writes, pipelining, batches, CRLF, garbage, over-long lines, notifications)
/// on four connections at once; every reply matches its request, and the daemon
/// answers `stats` afterwards.
#[test]
fn socket_fuzz_keeps_every_reply_matched() {
    let max = 8192;
    let d = start("fuzz", &format!("max_request_bytes = {max}"));
    let seed = std::env::var("FERRULE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_f00d_u64);
    eprintln!("fuzz seed {seed} (FERRULE_FUZZ_SEED replays it)");
    let started = Instant::now();
    let socket = d.socket.clone();
    let answered: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (1..=4)
            .map(|i| {
                let socket = socket.clone();
                s.spawn(move || {
                    fuzz_connection(&socket, seed.wrapping_mul(31).wrapping_add(i), 600, max)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("fuzz connection"))
            .sum()
    });
    eprintln!(
        "fuzz: {answered} requests answered in {:?}",
        started.elapsed()
    );
    assert!(answered > 2000, "{answered}");
    let out = d.ctl(&["--json", "stats"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = d.ctl(&["version"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = std::fs::metadata(&d.log).map(|m| m.len()).unwrap_or(0);
    assert!(log < 4 << 20, "{log} bytes of log for the fuzz run");
}
