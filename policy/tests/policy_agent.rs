//! `ferrule-agent` against a stand-in control socket that records `acl.apply`
//! requests: it applies the rendered state at start, again after a manifest changes
//! (and not when nothing changed), keeps the tables in force while the state is
//! invalid, and exits 0 on SIGTERM.

use ferrule_daemon::acl::{parse_apply, AclPort};
use ferrule_dataplane::snapshot::PortRole;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PODS: &str = "
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec: {nodeName: n1, containers: [{name: c, ports: [{name: http, containerPort: 80}]}]}
status: {podIP: 10.9.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: shop, labels: {app: db}}
spec: {nodeName: n1, containers: [{name: c}]}
status: {podIP: 10.9.0.3}
---
apiVersion: v1
kind: Pod
metadata: {name: other, namespace: shop, labels: {app: db}}
spec: {nodeName: n2, containers: [{name: c}]}
status: {podIP: 10.9.0.4}
";

const POLICY: &str = "
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-from-web, namespace: shop}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{podSelector: {matchLabels: {app: web}}}], ports: [{port: 5432}]}]
";

/// Serves `acl.apply` on a Unix socket, recording each request's params; refuses
/// every other method.
fn fake_daemon(path: &Path) -> Arc<Mutex<Vec<Value>>> {
    let listener = UnixListener::bind(path).expect("bind");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut line = String::new();
            if BufReader::new(&mut stream).read_line(&mut line).is_err() {
                continue;
            }
            let Ok(req) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if req["method"] != "acl.apply" {
                // ferruled's other methods (ports.list): none here.
                let reply = json!({"jsonrpc": "2.0", "id": req["id"], "error": {
                    "code": -32601, "message": "method not found"}});
                let _ = stream.write_all(format!("{reply}\n").as_bytes());
                continue;
            }
            let tables = req["params"]["tables"].as_array().map_or(0, Vec::len);
            record.lock().expect("lock").push(req["params"].clone());
            let reply = json!({"jsonrpc": "2.0", "id": req["id"], "result": {
                "generation": 1, "dry_run": false, "tables": tables, "rules": 0,
                "added": [], "changed": [], "removed": [], "unchanged": 0,
                "attachments_changed": true, "compile_ms": 0.1}});
            let _ = stream.write_all(format!("{reply}\n").as_bytes());
        }
    });
    seen
}

fn wait_for(seen: &Arc<Mutex<Vec<Value>>>, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = seen.lock().expect("lock").clone();
        if got.len() >= n || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_agent_applies_on_start_and_on_change_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("pods.yaml"), PODS).unwrap();
    let socket = dir.path().join("ferrule.sock");
    let seen = fake_daemon(&socket);
    let mut agent = Command::new(env!("CARGO_BIN_EXE_ferrule-agent"))
        .args(["--state"])
        .arg(&state)
        .args(["--node", "n1", "--interval-ms", "50", "--socket"])
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ferrule-agent");

    // No policy yet: an empty state is applied.
    let got = wait_for(&seen, 1);
    assert_eq!(got.len(), 1, "first apply");
    assert_eq!(got[0]["tables"], json!([]));

    // A policy: db (on n1) gets a table, other (on n2) does not.
    std::fs::write(state.join("policy.yaml"), POLICY).unwrap();
    let got = wait_for(&seen, 2);
    assert_eq!(got.len(), 2, "apply after the change");
    let port = |name: &str, role, pod: Option<&str>| AclPort {
        name: name.into(),
        role,
        pod: pod.map(str::to_string),
        locked: false,
    };
    let ports = vec![
        port("web", PortRole::Pod, Some("shop/web")),
        port("db", PortRole::Pod, Some("shop/db")),
        port("uplink0", PortRole::Uplink, None),
    ];
    let desired = parse_apply(&got[1], &ports).expect("a valid acl.apply");
    assert_eq!(desired.tables.len(), 2, "{:#}", got[1]);
    assert!(got[1].to_string().contains("shop/db-from-web"));
    assert!(!got[1].to_string().contains("\"other\""));

    // Touching a file without changing the rendering sends nothing.
    std::fs::write(state.join("policy.yaml"), format!("{POLICY}\n# touched\n")).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(seen.lock().unwrap().len(), 2, "nothing changed");

    // An invalid manifest: logged, nothing applied.
    std::fs::write(
        state.join("bad.yaml"),
        POLICY
            .replace("5432", "70000")
            .replace("db-from-web", "bad"),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "an invalid state is not applied"
    );
    std::fs::remove_file(state.join("bad.yaml")).unwrap();

    let pid = agent.id().to_string();
    let st = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = agent.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut log = String::new();
    agent
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        log.contains("NetworkPolicy shop/bad") && log.contains("spec.ingress[0].ports[0].port"),
        "{log}"
    );
    assert!(log.contains("tables added"), "{log}");
}

#[test]
fn the_agents_help_explains_itself() {
    let o = Command::new(env!("CARGO_BIN_EXE_ferrule-agent"))
        .arg("--help")
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    for needle in [
        "--state",
        "--node",
        "--socket",
        "SIGTERM",
        "ferrule.io/port",
        "EXIT STATUS",
    ] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
}
