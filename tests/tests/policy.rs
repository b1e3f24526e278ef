//! End-to-end NetworkPolicy: Pod and NetworkPolicy manifests for the demo topology's
//! pods (default/pod-a 10.1.0.2 on port pod-a, default/pod-b 10.1.0.3 on port pod-b)
//! are rendered and applied to a running ferruled with `ferrulectl policy apply`;
//! then real TCP and UDP connections between the kernel stacks in the pod and router
//! namespaces must succeed exactly when `ferrulectl policy verdict` says `allow`.

use ferrule_e2e::topology::*;
use std::io::Write;
use std::process::{Child, Command, Stdio};

const STATE: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: pod-a, namespace: default, labels: {app: a}}
spec:
  containers: [{name: c, ports: [{name: http, containerPort: 8080}]}]
status: {podIPs: [{ip: 10.1.0.2}, {ip: "fd00:1::2"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: default, labels: {app: b}, annotations: {ferrule.io/port: pod-b}}
spec:
  containers:
    - name: c
      ports: [{name: http, containerPort: 8081}, {name: dns, containerPort: 5353, protocol: UDP}]
status: {podIP: 10.1.0.3}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-from-a, namespace: default}
spec:
  podSelector: {matchLabels: {app: b}}
  ingress:
    - from: [{podSelector: {matchLabels: {app: a}}}]
      ports: [{port: http}, {port: dns, protocol: UDP}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-isolated, namespace: default}
spec:
  podSelector: {matchLabels: {app: a}}
  policyTypes: [Ingress, Egress]
  egress: [{to: [{podSelector: {}}]}]
"#;

/// Serves TCP and UDP ports on an address: every TCP connection gets "ok", every UDP
/// datagram is answered with "ok".
const SERVER: &str = r#"
import socket, sys, threading
ip = sys.argv[1]
fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
def tcp(port):
    s = socket.socket(fam); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.sendall(b"ok\n"); c.close()
def udp(port):
    s = socket.socket(fam, socket.SOCK_DGRAM); s.bind((ip, port))
    while True:
        b, peer = s.recvfrom(2048); s.sendto(b"ok", peer)
for spec in sys.argv[2:]:
    proto, port = spec.split(":")
    threading.Thread(target=tcp if proto == "tcp" else udp, args=(int(port),), daemon=True).start()
print("listening", flush=True)
threading.Event().wait()
"#;

/// Connects (TCP) or sends a datagram (UDP) and prints "ok" when the server answered.
const CLIENT: &str = r#"
import socket, sys
proto, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
try:
    if proto == "tcp":
        c = socket.create_connection((ip, port), timeout=2); print(c.recv(10).decode().strip())
    else:
        s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(2)
        s.sendto(b"hi", (ip, port)); print(s.recv(10).decode())
except OSError as e:
    print("failed", e)
"#;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        ferrule_e2e::stop_timeout_child(&mut self.0);
    }
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .expect("write");
    path.to_string_lossy().into_owned()
}

fn serve(topo: &Topology, ns: &str, script: &str, ip: &str, ports: &[&str]) -> Server {
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &topo.ns(ns),
            "timeout",
            "120",
            "python3",
            script,
            ip,
        ])
        .args(ports)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start server");
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("server ready");
    assert_eq!(line.trim(), "listening", "server in {ns}");
    Server(child)
}

#[test]
fn real_traffic_gets_the_verdict_policy_verdict_gives() {
    let topo = Topology::up("pol");
    let d = topo.ferruled("policy");
    let files = tempfile::tempdir().expect("tempdir");
    let state = write(files.path(), "state.yaml", STATE);
    let server = write(files.path(), "server.py", SERVER);
    let client = write(files.path(), "client.py", CLIENT);

    // Render and apply: pod-b (port pod-b via the annotation) and pod-a (the port that
    // records default/pod-a) get tables.
    let o = d.ctl(&["policy", "render", "--state", &state]);
    assert!(o.status.success(), "{}", text(&o));
    let rendered = text(&o);
    assert!(
        rendered.contains("pod: default/pod-a") && rendered.contains("port: pod-b"),
        "{rendered}"
    );
    let o = d.ctl(&["policy", "apply", "--state", &state]);
    assert!(o.status.success(), "policy apply: {}", text(&o));
    assert!(text(&o).contains("added"), "{}", text(&o));
    let dump = d.ctl_json(&["acl", "dump"]);
    assert!(
        dump.to_string().contains("default/b-from-a"),
        "the daemon holds the rendered rules: {dump:#}"
    );

    let _b = serve(
        &topo,
        "pb",
        &server,
        "10.1.0.3",
        &["tcp:8080", "tcp:8081", "udp:5353", "udp:5354"],
    );
    let _a = serve(&topo, "pa", &server, "10.1.0.2", &["tcp:8080", "udp:5353"]);
    let _r = serve(&topo, "rt", &server, "192.0.2.1", &["tcp:8080"]);

    // (client namespace, FROM, TO, destination address, port, protocol)
    let cases = [
        ("pa", "default/pod-a", "default/b", "10.1.0.3", 8081, "TCP"),
        ("pa", "default/pod-a", "default/b", "10.1.0.3", 8080, "TCP"),
        ("pa", "default/pod-a", "default/b", "10.1.0.3", 5353, "UDP"),
        ("pa", "default/pod-a", "default/b", "10.1.0.3", 5354, "UDP"),
        ("pb", "default/b", "default/pod-a", "10.1.0.2", 8080, "TCP"),
        ("pb", "default/b", "default/pod-a", "10.1.0.2", 5353, "UDP"),
        ("rt", "192.0.2.1", "default/b", "10.1.0.3", 8081, "TCP"),
        ("pa", "default/pod-a", "192.0.2.1", "192.0.2.1", 8080, "TCP"),
        ("pb", "default/b", "192.0.2.1", "192.0.2.1", 8080, "TCP"),
    ];
    let mut allowed = 0;
    let mut report = Vec::new();
    for (ns, from, to, ip, port, proto) in cases {
        let port_s = port.to_string();
        let o = d.ctl(&[
            "policy",
            "verdict",
            "--state",
            &state,
            "--from",
            from,
            "--to",
            to,
            "--port",
            &port_s,
            "--protocol",
            proto,
        ]);
        assert!(o.status.success(), "verdict: {}", text(&o));
        let verdict = String::from_utf8_lossy(&o.stdout).trim().to_string();
        assert!(verdict == "allow" || verdict == "deny", "{verdict}");
        let c = topo.run(
            ns,
            &[
                "timeout",
                "10",
                "python3",
                &client,
                &proto.to_lowercase(),
                ip,
                &port_s,
            ],
        );
        let passed = String::from_utf8_lossy(&c.stdout).trim() == "ok";
        allowed += usize::from(passed);
        report.push(format!(
            "{from} -> {to} {port}/{proto}: verdict {verdict}, traffic {}",
            if passed { "passed" } else { "blocked" }
        ));
        assert_eq!(
            passed,
            verdict == "allow",
            "ferruled disagrees with policy verdict:\n{}",
            report.join("\n")
        );
    }
    // The policy both allows and denies here, so the comparison means something.
    assert!((2..cases.len()).contains(&allowed), "{}", report.join("\n"));
    let stats = d.ctl_json(&["stats"]);
    assert!(drops(&stats, "acl-deny") > 0, "{stats:#}");
}
