//! End-to-end FQDN egress policy (docs/fqdn.md): kernel pods in network namespaces
//! resolve names through ferruled's DNS proxy, which forwards to a dnsmasq running in
//! ferruled's namespace, and connect to the addresses the names answered on a router
//! namespace. An ingress table on `pod-a` (the pod's egress) allows DNS to the cluster
//! DNS address and TCP to `fqdn:*.example.test`; the `dns` section lists the names the
//! pod may look up. Checked: what is resolved is allowed and nothing else (a name outside
//! `dns.allow` is REFUSED by the proxy, a name outside the selector resolves but is
//! denied), expiry by TTL once no connection uses an address (and not before), the
//! circuit breaker's identity bound under a name of 1,000 rotating addresses,
//! overlapping `fqdn:` and `cidr:` selectors (label sets and union of the rules), and a
//! crash: the checkpoint gives the same identities back and a live connection survives.

use ferrule_e2e::topology::*;
use ferrule_e2e::Ferruled;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The cluster DNS service address the pods send their queries to.
const DNS_SERVER: &str = "10.96.0.10";

/// Where dnsmasq listens, in ferruled's namespace.
const UPSTREAM_PORT: u16 = 5353;

/// A DNS client over UDP (A queries), as a library for the scripts below: `query(server,
/// name)` returns (rcode name, addresses, smallest TTL).
const DNS_LIB: &str = r#"
import socket, struct, sys, random, time, os, signal
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
def skip_name(b, o):
    while True:
        l = b[o]
        if l == 0:
            return o + 1
        if l & 0xC0 == 0xC0:
            return o + 2
        o += 1 + l
def parse(b):
    _, flags, qd, an, _, _ = struct.unpack(">HHHHHH", b[:12])
    o = 12
    for _ in range(qd):
        o = skip_name(b, o) + 4
    ips, ttls = [], []
    for _ in range(an):
        o = skip_name(b, o)
        t, c, ttl, rdlen = struct.unpack(">HHIH", b[o:o + 10])
        o += 10
        if t == 1 and rdlen == 4:
            ips.append(socket.inet_ntoa(b[o:o + 4]))
            ttls.append(ttl)
        o += rdlen
    return RCODES.get(flags & 0xF, str(flags & 0xF)), ips, min(ttls) if ttls else -1
def query(server, name, tries=3, timeout=2.0):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        for _ in range(tries):
            s.sendto(q, (server, 53))
            try:
                while True:
                    b, _ = s.recvfrom(4096)
                    if len(b) >= 12 and struct.unpack(">H", b[:2])[0] == qid:
                        return parse(b)
            except socket.timeout:
                continue
    finally:
        s.close()
    return "TIMEOUT", [], -1
"#;

/// `resolve.py SERVER NAME…`: one line per name, `NAME RCODE ADDR,ADDR|- TTL`.
const RESOLVE: &str = r#"
for name in sys.argv[2:]:
    rc, ips, ttl = query(sys.argv[1], name)
    print(name, rc, ",".join(sorted(ips)) or "-", ttl, flush=True)
"#;

/// `rotate.py SERVER HOSTS PID NAME ROUNDS PER_ROUND`: each round writes PER_ROUND new
/// addresses (198.18.ROUND.1…) for NAME into dnsmasq's hosts file, makes dnsmasq read it
/// again (SIGHUP) and asks until the answer is the new set. Prints `rounds R addresses N
/// queries Q`.
const ROTATE: &str = r#"
server, hosts, pid, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rounds, per = int(sys.argv[5]), int(sys.argv[6])
seen, queries = set(), 0
deadline = time.monotonic() + 40
for r in range(rounds):
    want = [f"198.18.{r}.{i}" for i in range(1, per + 1)]
    with open(hosts + ".tmp", "w") as f:
        f.write("203.0.113.11 a.example.test\n")
        for ip in want:
            f.write(f"{ip} {name}\n")
    os.rename(hosts + ".tmp", hosts)
    os.kill(pid, signal.SIGHUP)
    while True:
        assert time.monotonic() < deadline, f"round {r}: dnsmasq never answered the new set"
        rc, ips, _ = query(server, name)
        queries += 1
        assert rc == "NOERROR", f"round {r}: {rc}"
        if sorted(ips) == sorted(want):
            break
        time.sleep(0.02)
    seen.update(ips)
print("rounds", rounds, "addresses", len(seen), "queries", queries, flush=True)
"#;

/// Echo server on 0.0.0.0 on every port of its arguments, a thread per connection.
const ECHO_SERVER: &str = r#"
import socket, sys, threading
def serve(c):
    with c:
        f = c.makefile("rb")
        for line in f:
            c.sendall(line)
def accept(s):
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
for port in sys.argv[1:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(port)))
    s.listen(64)
    threading.Thread(target=accept, args=(s,), daemon=True).start()
print("listening", flush=True)
threading.Event().wait()
"#;

/// `probe.py ADDR:PORT…`: a TCP connection to each (1.5 s to connect), a line echoed;
/// prints `ADDR:PORT ok` or `ADDR:PORT fail REASON`.
const PROBE: &str = r#"
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        c = socket.create_connection((host, int(port)), timeout=1.5)
        c.settimeout(3)
        c.sendall(b"probe\n")
        r = c.recv(100)
        c.close()
        print(target, "ok" if r == b"probe\n" else "bad " + repr(r), flush=True)
    except Exception as e:
        print(target, "fail", type(e).__name__, flush=True)
"#;

/// `hold.py ADDR PORT SECONDS`: one connection that sends a line every 200 ms and
/// waits for its echo (20 s at most each) for SECONDS; prints `connected`, then `done N`.
const HOLD: &str = r#"
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
c.settimeout(20)
print("connected", flush=True)
end = time.monotonic() + float(sys.argv[3])
f = c.makefile("rb")
n = 0
while time.monotonic() < end:
    msg = f"line {n}\n".encode()
    c.sendall(msg)
    r = f.readline()
    if r != msg:
        print("mismatch", n, repr(r), flush=True)
        sys.exit(1)
    n += 1
    time.sleep(0.2)
c.close()
print("done", n, flush=True)
"#;

/// dnsmasq in ferruled's namespace on 127.0.0.1:UPSTREAM_PORT, answering from a hosts
/// file; killed on drop.
struct Dnsmasq {
    child: Child,
    hosts: PathBuf,
    log: PathBuf,
}

impl Dnsmasq {
    fn start(topo: &Topology, dir: &Path, hosts: &str, local_ttl: u32) -> Dnsmasq {
        let hosts_path = dir.join("hosts");
        std::fs::write(&hosts_path, hosts).expect("write hosts");
        let log = dir.join("dnsmasq.log");
        let child = Command::new("ip")
            .args(["netns", "exec", &topo.ns("fr"), "/usr/sbin/dnsmasq"])
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--listen-address=127.0.0.1",
                "--bind-interfaces",
                "--user=root",
                "--group=root",
                "--log-queries",
                "--log-facility=-",
                // Names of .test it does not know: NXDOMAIN, never forwarded.
                "--local=/test/",
            ])
            .arg(format!("--port={UPSTREAM_PORT}"))
            .arg(format!("--addn-hosts={}", hosts_path.display()))
            .arg(format!("--local-ttl={local_ttl}"))
            .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("dnsmasq log"))
            .spawn()
            .expect("run dnsmasq");
        let mut d = Dnsmasq {
            child,
            hosts: hosts_path,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !d.log_text().contains("read ") {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("dnsmasq exited ({st}):\n{}", d.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "dnsmasq did not start:\n{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    fn pid(&self) -> u32 {
        // `ip netns exec` executes dnsmasq in its own process.
        self.child.id()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `dig` printed: the answer's status, its A records (sorted), the whole text.
struct Dig {
    status: String,
    addrs: Vec<String>,
    text: String,
}

/// One test's world: the topology, dnsmasq, the echo server on the router (TCP 8080
/// and 9090 on every router address) and a directory for files. Dropped in field order:
/// the server and dnsmasq before the namespaces go.
struct Env {
    _server: Script,
    dns: Dnsmasq,
    topo: Topology,
    dir: tempfile::TempDir,
}

/// `configs/ferrule.toml` with an `[fqdn]` section (the DNS service address, dnsmasq
/// upstream, and `fqdn_keys`), followed by `sections`.
fn fqdn_config(prefix: &str, fqdn_keys: &str, sections: &str) -> String {
    format!(
        "{}\n[fqdn]\ndns_servers = [\"{DNS_SERVER}\"]\nupstream = \"127.0.0.1:{UPSTREAM_PORT}\"\n\
         {fqdn_keys}\n{sections}\n",
        config(prefix)
    )
}

impl Env {
    /// The topology with `rt_addrs` (host addresses) on the router's loopback, dnsmasq
    /// answering `hosts` with TTL `local_ttl`, the echo server.
    fn up(tag: &str, rt_addrs: &[&str], hosts: &str, local_ttl: u32) -> Env {
        // The binaries are brought up to date first (it may wait on cargo's lock):
        // the scripts started below run for 60 s at most.
        ferrule_e2e::bin_dir();
        let topo = Topology::up(tag);
        for a in rt_addrs {
            let o = topo.run(
                "rt",
                &["ip", "addr", "add", &format!("{a}/32"), "dev", "lo"],
            );
            assert!(o.status.success(), "{}", text(&o));
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let dns = Dnsmasq::start(&topo, dir.path(), hosts, local_ttl);
        let mut server = Script::start(
            &topo,
            "rt",
            dir.path(),
            "echo.py",
            ECHO_SERVER,
            &["8080", "9090"],
        );
        assert_eq!(server.line(), "listening");
        Env {
            _server: server,
            dns,
            topo,
            dir,
        }
    }

    /// Starts ferruled in the `fr` namespace on [`fqdn_config`].
    fn ferruled(&self, tag: &str, fqdn_keys: &str, sections: &str) -> Ferruled {
        self.topo
            .ferruled_with(tag, |p| fqdn_config(p, fqdn_keys, sections))
    }

    /// `acl apply -f` of `yaml`; must succeed.
    fn apply(&self, d: &Ferruled, yaml: &str) {
        let path = self.dir.path().join("policy.yaml");
        std::fs::write(&path, yaml).expect("write policy");
        let o = d.ctl(&["acl", "apply", "-f", path.to_str().expect("path")]);
        assert!(
            o.status.success(),
            "acl apply:\n{}\n{}",
            text(&o),
            d.log_text()
        );
    }

    /// Resolves `names` from pod `pod` through the cluster DNS address: (rcode,
    /// addresses, TTL) per name.
    fn resolve(&self, pod: &str, names: &[&str]) -> Vec<(String, Vec<String>, i64)> {
        let mut args = vec![DNS_SERVER];
        args.extend_from_slice(names);
        let code = format!("{DNS_LIB}{RESOLVE}");
        let (ok, out) =
            Script::start(&self.topo, pod, self.dir.path(), "resolve.py", &code, &args).finish();
        assert!(ok, "resolve: {out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), names.len(), "{out}");
        lines
            .iter()
            .zip(names)
            .map(|(l, n)| {
                let w: Vec<&str> = l.split_whitespace().collect();
                assert_eq!((w.len(), w[0]), (4, *n), "{out}");
                let ips = if w[2] == "-" {
                    Vec::new()
                } else {
                    w[2].split(',').map(str::to_string).collect()
                };
                (w[1].to_string(), ips, w[3].parse().expect("ttl"))
            })
            .collect()
    }

    /// `dig @DNS_SERVER ARGS` in pod `pod` (Debian's dig: a real resolver client,
    /// which asks again over TCP when a UDP answer comes truncated).
    fn dig(&self, pod: &str, args: &[&str]) -> Dig {
        let server = format!("@{DNS_SERVER}");
        let mut argv = vec!["dig", server.as_str(), "+time=3", "+tries=1"];
        argv.extend_from_slice(args);
        let o = self.topo.run(pod, &argv);
        let text = text(&o);
        let status = text
            .split("status: ")
            .nth(1)
            .and_then(|t| t.split(',').next())
            .unwrap_or("NO-ANSWER")
            .to_string();
        let mut addrs: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with(';'))
            .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [_, _, "IN", "A", addr] => Some(addr.to_string()),
                _ => None,
            })
            .collect();
        addrs.sort();
        Dig {
            status,
            addrs,
            text,
        }
    }

    /// Resolves one name that must answer NOERROR with exactly `want`.
    fn resolve_ok(&self, d: &Ferruled, name: &str, want: &[&str]) {
        let r = self.resolve("pa", &[name]);
        assert_eq!(
            (r[0].0.as_str(), r[0].1.clone()),
            ("NOERROR", want.iter().map(|s| s.to_string()).collect()),
            "{name}: {r:?}\n{}",
            self.diagnostics(d)
        );
    }

    /// TCP connections from pod-a to each `addr:port`: whether each got its line echoed.
    fn probe(&self, targets: &[&str]) -> Vec<bool> {
        let (ok, out) = Script::start(
            &self.topo,
            "pa",
            self.dir.path(),
            "probe.py",
            PROBE,
            targets,
        )
        .finish();
        assert!(ok, "probe: {out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), targets.len(), "{out}");
        lines.iter().map(|l| l.ends_with(" ok")).collect()
    }

    /// Checks each target's reachability from pod-a against `want`.
    fn expect_reach(&self, d: &Ferruled, want: &[(&str, bool)]) {
        let targets: Vec<&str> = want.iter().map(|(t, _)| *t).collect();
        let got = self.probe(&targets);
        let expected: Vec<bool> = want.iter().map(|(_, b)| *b).collect();
        assert_eq!(
            got,
            expected,
            "reachability of {targets:?}\n{}",
            self.diagnostics(d)
        );
    }

    /// A connection from pod-a held for `secs` seconds (started, connected).
    fn hold(&self, addr: &str, port: u16, secs: u32) -> Script {
        let (p, s) = (port.to_string(), secs.to_string());
        let mut h = Script::start(
            &self.topo,
            "pa",
            self.dir.path(),
            "hold.py",
            HOLD,
            &[addr, &p, &s],
        );
        assert_eq!(h.line(), "connected");
        h
    }

    fn diagnostics(&self, d: &Ferruled) -> String {
        format!(
            "fqdn.cache: {:#}\nfqdn.identities: {:#}\nfqdn.selectors: {:#}\n{}\n{}\n\
             --- ferruled log ---\n{}\n--- dnsmasq log ---\n{}",
            rpc(d, "fqdn.cache"),
            rpc(d, "fqdn.identities"),
            rpc(d, "fqdn.selectors"),
            text(&d.ctl(&["stats"])),
            text(&d.ctl(&["ct", "dump"])),
            d.log_text(),
            self.dns.log_text()
        )
    }
}

/// A raw control request without params: its result (panics on an error reply).
fn rpc(d: &Ferruled, method: &str) -> Value {
    let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#);
    let reply = d.raw_request(line.as_bytes()).expect("control reply");
    let v: Value = serde_json::from_str(&reply).expect("JSON reply");
    assert!(v.get("error").is_none(), "{method}: {v:#}");
    v["result"].clone()
}

/// A label set as text (`cidr:…,fqdn:…,reserved:world`), whether JSON carries it as
/// an array of labels or as its text.
fn labels(v: &Value) -> String {
    match v {
        Value::Array(a) => a
            .iter()
            .map(|l| l.as_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(","),
        Value::String(s) => s.clone(),
        other => panic!("labels: {other}"),
    }
}

/// `fqdn.identities`: (id, label text) of each identity in use, sorted.
fn identities(d: &Ferruled) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = rpc(d, "fqdn.identities")["identities"]
        .as_array()
        .expect("identities")
        .iter()
        .map(|i| (i["id"].as_u64().expect("id"), labels(&i["labels"])))
        .collect();
    v.sort();
    v
}

/// The identity whose label text is `text`.
fn identity_of(d: &Ferruled, text: &str) -> Option<u64> {
    identities(d)
        .into_iter()
        .find(|(_, l)| l == text)
        .map(|(id, _)| id)
}

/// `fqdn.selectors`: the identities of selector `sel`, sorted.
fn selected(d: &Ferruled, sel: &str) -> Vec<u64> {
    let v = rpc(d, "fqdn.selectors");
    let mut ids: Vec<u64> = v["selectors"]
        .as_array()
        .expect("selectors")
        .iter()
        .find(|s| s["selector"] == sel)
        .unwrap_or_else(|| panic!("no selector {sel}: {v:#}"))["identities"]
        .as_array()
        .expect("identities")
        .iter()
        .map(|i| i.as_u64().expect("id"))
        .collect();
    ids.sort();
    ids
}

/// The DNS proxy's counter `name`.
fn proxy(d: &Ferruled, name: &str) -> u64 {
    rpc(d, "fqdn.selectors")["proxy"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("proxy counter {name}"))
}

/// `fqdn.cache`: the cached addresses of `name` with their identity (none: unselected).
fn cached(d: &Ferruled, name: &str) -> Vec<(String, Option<u64>)> {
    rpc(d, "fqdn.cache")["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter(|n| n["name"] == name)
        .flat_map(|n| n["ips"].as_array().cloned().unwrap_or_default())
        .map(|ip| {
            (
                ip["ip"].as_str().expect("ip").to_string(),
                ip["identity"].as_u64(),
            )
        })
        .collect()
}

fn acl_denied(d: &Ferruled) -> u64 {
    drops(&d.ctl_json(&["stats"]), "acl-deny")
}

fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        if Instant::now() > deadline {
            eprintln!("timed out waiting for {what}");
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// pod-a may send DNS to the cluster DNS address (UDP, and TCP that the DNS stage
/// drops) and TCP 8080 to `*.example.test`; it may look up `*.example.test` and
/// `*.other.test`.
const POLICY: &str = r#"
tables:
  - name: pod-a-out
    rules:
      - {action: reflect, proto: udp, dst: 10.96.0.10/32, dst_port: 53, origin: "e2e/dns"}
      - {action: reflect, proto: tcp, dst: 10.96.0.10/32, dst_port: 53, origin: "e2e/dns-tcp"}
      - {action: reflect, proto: tcp, dst: "fqdn:*.example.test", dst_port: 8080, origin: "e2e/to-fqdn"}
attach:
  - {port: pod-a, direction: ingress, table: pod-a-out}
dns:
  - {port: pod-a, allow: ["*.example.test", "*.other.test"]}
"#;

const HOSTS: &str = "203.0.113.11 a.example.test\n\
                     203.0.113.21 b.other.test\n\
                     203.0.113.31 c.blocked.test\n";

const ALL_ADDRS: &[&str] = &[
    "203.0.113.11",
    "203.0.113.12",
    "203.0.113.21",
    "203.0.113.31",
];

/// The tests of this file one at a time: each runs a ferruled with busy-polling workers
/// and timing-sensitive checks (TTLs of seconds); two side by side on a 2-core machine
/// would starve each other.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn resolved_names_are_allowed_and_nothing_else() {
    let _serial = serial();
    let env = Env::up("q", ALL_ADDRS, HOSTS, 30);
    let mut d = env.ferruled("fq", "", "");
    env.apply(&d, POLICY);
    let fqdn_ids = selected(&d, "fqdn:*.example.test");
    assert_eq!(
        fqdn_ids.len(),
        1,
        "the selector holds its pre-allocated identity"
    );

    // Nothing resolved yet: the server's addresses are all denied.
    let denied = acl_denied(&d);
    env.expect_reach(&d, &[("203.0.113.11:8080", false)]);
    assert!(acl_denied(&d) > denied);

    let r = env.resolve("pa", &["a.example.test", "b.other.test", "c.blocked.test"]);
    let diag = || env.diagnostics(&d);
    assert_eq!(
        (r[0].0.as_str(), r[0].1.as_slice()),
        ("NOERROR", &["203.0.113.11".to_string()][..]),
        "{r:?}\n{}",
        diag()
    );
    assert_eq!(
        (r[1].0.as_str(), r[1].1.as_slice()),
        ("NOERROR", &["203.0.113.21".to_string()][..]),
        "{r:?}\n{}",
        diag()
    );
    // dnsmasq knows c.blocked.test, but the pod may not look it up.
    assert_eq!(
        (r[2].0.as_str(), r[2].1.len()),
        ("REFUSED", 0),
        "{r:?}\n{}",
        diag()
    );
    let sel = rpc(&d, "fqdn.selectors");
    assert_eq!(sel["proxy"]["refused"], 1, "{sel:#}");
    assert_eq!(sel["proxy"]["forwarded"], 2, "{sel:#}");
    assert_eq!(sel["proxy"]["answered"], 2, "{sel:#}");
    assert!(
        !env.dns.log_text().contains("c.blocked.test"),
        "a refused name never reaches upstream:\n{}",
        env.dns.log_text()
    );

    // The resolved address of the selected name maps to the selector's identity.
    assert_eq!(
        cached(&d, "a.example.test"),
        [("203.0.113.11".to_string(), Some(fqdn_ids[0]))],
        "{}",
        diag()
    );
    // b.other.test is cached but no selector selects it.
    assert_eq!(
        cached(&d, "b.other.test"),
        [("203.0.113.21".to_string(), None)],
        "{}",
        diag()
    );
    let cache = rpc(&d, "fqdn.cache");
    let a = cache["names"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "a.example.test")
        .expect("a.example.test cached");
    assert_eq!(labels(&a["labels"]), "fqdn:*.example.test", "{cache:#}");
    assert_eq!(a["endpoints"][0], "default/pod-a", "{cache:#}");
    assert_eq!(
        selected(&d, "fqdn:*.example.test"),
        fqdn_ids,
        "a new address of a selected name changes no selector"
    );

    let denied = acl_denied(&d);
    env.expect_reach(
        &d,
        &[
            ("203.0.113.11:8080", true),  // resolved, selected
            ("203.0.113.12:8080", false), // the same server, never resolved
            ("203.0.113.21:8080", false), // resolved, not selected by the rule
            ("203.0.113.31:8080", false), // refused, never learned
            ("203.0.113.11:9090", false), // resolved, but another port
        ],
    );
    assert!(
        acl_denied(&d) >= denied + 4,
        "each denied connection counted as acl-deny\n{}",
        diag()
    );

    // pod-b is under no DNS policy and no table: its query is not proxied.
    let queries = proxy(&d, "queries");
    let r = env.resolve("pb", &["c.blocked.test"]);
    assert_eq!(
        r[0].0, "TIMEOUT",
        "pod-b's DNS is routed, and nobody serves 10.96.0.10: {r:?}"
    );
    assert_eq!(proxy(&d, "queries"), queries);

    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

#[test]
fn dns_over_tcp_goes_through_the_proxy_too() {
    let _serial = serial();
    // big.example.test has more addresses than a UDP answer holds.
    let big: Vec<String> = (1..=120).map(|i| format!("198.51.100.{i}")).collect();
    let hosts: String = big
        .iter()
        .map(|ip| format!("{ip} big.example.test\n"))
        .collect();
    let env = Env::up(
        "u",
        &["203.0.113.11", "198.51.100.7"],
        &format!("{HOSTS}{hosts}"),
        30,
    );
    let mut d = env.ferruled("fu", "", "");
    env.apply(&d, POLICY);
    let fqdn_ids = selected(&d, "fqdn:*.example.test");
    let diag = || env.diagnostics(&d);

    // dig asks over UDP, gets the answer truncated, and asks again over TCP: the
    // whole answer comes through the proxy, every address learned before it.
    env.expect_reach(&d, &[("198.51.100.7:8080", false)]);
    let r = env.dig("pa", &["big.example.test"]);
    assert!(
        r.text.contains("Truncated, retrying in TCP mode"),
        "{}\n{}",
        r.text,
        diag()
    );
    let mut want = big.clone();
    want.sort();
    assert_eq!(
        (r.status.as_str(), &r.addrs),
        ("NOERROR", &want),
        "{}",
        r.text
    );
    let learned = cached(&d, "big.example.test");
    assert_eq!(learned.len(), 120, "{}", diag());
    assert!(
        learned.iter().all(|(_, id)| *id == Some(fqdn_ids[0])),
        "{learned:?}"
    );
    env.expect_reach(&d, &[("198.51.100.7:8080", true)]);

    // Over TCP from the start: an allowed name answers, a refused one gets REFUSED
    // and never reaches upstream.
    let r = env.dig("pa", &["+tcp", "a.example.test"]);
    assert_eq!(
        (r.status.as_str(), &r.addrs[..]),
        ("NOERROR", &["203.0.113.11".to_string()][..]),
        "{}",
        r.text
    );
    let r = env.dig("pa", &["+tcp", "c.blocked.test"]);
    assert_eq!(r.status, "REFUSED", "{}", r.text);
    assert!(
        !env.dns.log_text().contains("c.blocked.test"),
        "{}",
        env.dns.log_text()
    );
    assert_eq!(proxy(&d, "tcp_connections"), 3, "{}", diag());
    assert_eq!(proxy(&d, "refused"), 1);
    assert_eq!(proxy(&d, "tcp_refused"), 0);
    env.expect_reach(&d, &[("203.0.113.11:8080", true)]);

    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

#[test]
fn an_expired_address_stays_while_used_and_goes_once_unused() {
    let _serial = serial();
    let env = Env::up("t", ALL_ADDRS, HOSTS, 2);
    let mut d = env.ferruled("ft", "min_ttl = 1\ngc_interval_ms = 200\n", "");
    env.apply(&d, POLICY);
    let r = env.resolve("pa", &["a.example.test"]);
    assert_eq!(r[0].0, "NOERROR", "{r:?}");
    assert_eq!(r[0].2, 2, "dnsmasq's TTL: {r:?}");
    let held = env.hold("203.0.113.11", 8080, 5);

    // Past the TTL, the address a live connection uses stays learned and allowed.
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(
        cached(&d, "a.example.test").len(),
        1,
        "kept under a live connection\n{}",
        env.diagnostics(&d)
    );
    let (ok, out) = held.finish();
    eprintln!("past the TTL: {}", out.trim());
    assert!(
        ok && out.contains("done"),
        "the connection lived on past the TTL: {out}\n{}",
        env.diagnostics(&d)
    );

    // Closed and its conntrack entry flushed: the address is forgotten.
    std::thread::sleep(Duration::from_millis(500));
    let gone = wait_for("the address to be forgotten", 10, || {
        let _ = d.ctl(&["ct", "flush", "--dst", "203.0.113.11"]);
        cached(&d, "a.example.test").is_empty()
    });
    assert!(gone, "expired and unused\n{}", env.diagnostics(&d));
    let cache = rpc(&d, "fqdn.cache");
    assert!(!cache.to_string().contains("203.0.113.11"), "{cache:#}");
    let denied = acl_denied(&d);
    env.expect_reach(&d, &[("203.0.113.11:8080", false)]);
    assert!(acl_denied(&d) > denied, "{}", env.diagnostics(&d));
    // The selector keeps its identity (pre-allocated) with no address left.
    assert_eq!(selected(&d, "fqdn:*.example.test").len(), 1);

    // Resolved again: allowed again.
    env.resolve_ok(&d, "a.example.test", &["203.0.113.11"]);
    env.expect_reach(&d, &[("203.0.113.11:8080", true)]);
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

#[test]
fn a_name_of_a_thousand_rotating_addresses_stays_within_two_identities() {
    let _serial = serial();
    let env = Env::up("b", &["203.0.113.11", "198.18.49.20"], HOSTS, 300);
    let mut d = env.ferruled("fb", "", "");
    env.apply(&d, POLICY);
    let before = selected(&d, "fqdn:*.example.test");
    let ids_before = identities(&d);

    let (rounds, per) = (50, 20);
    let code = format!("{DNS_LIB}{ROTATE}");
    let args = [
        DNS_SERVER.to_string(),
        env.dns.hosts.display().to_string(),
        env.dns.pid().to_string(),
        "rot.example.test".to_string(),
        rounds.to_string(),
        per.to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let (ok, out) =
        Script::start(&env.topo, "pa", env.dir.path(), "rotate.py", &code, &args).finish();
    assert!(ok, "rotate: {out}\n{}", env.diagnostics(&d));
    eprintln!("{out} in {:.1} s", started.elapsed().as_secs_f64());
    assert!(out.contains("addresses 1000 "), "{out}");

    let ids = identities(&d);
    let with_fqdn: Vec<&(u64, String)> = ids.iter().filter(|(_, l)| l.contains("fqdn:")).collect();
    assert!(
        !with_fqdn.is_empty() && with_fqdn.len() <= 2,
        "at most two FQDN identities: {ids:?}"
    );
    assert_eq!(ids, ids_before, "no identity came or went: {ids:?}");
    assert_eq!(
        selected(&d, "fqdn:*.example.test"),
        before,
        "the selector's identities did not change"
    );
    let rot = cached(&d, "rot.example.test");
    assert_eq!(
        rot.len(),
        1000,
        "every address kept (max_ips_per_name 1000)"
    );
    assert!(
        rot.iter().all(|(_, id)| *id == Some(before[0])),
        "all under the selector's identity"
    );
    let breaker = &rpc(&d, "fqdn.identities")["breaker"];
    assert_eq!(breaker["identities_refused"], 0, "{breaker:#}");
    assert_eq!(breaker["ips_evicted_over_limit"], 0, "{breaker:#}");
    assert!(proxy(&d, "addresses_learned") >= 1000);

    // The last round's addresses are in force: one of them is on the router.
    env.expect_reach(
        &d,
        &[("198.18.49.20:8080", true), ("198.18.49.20:9090", false)],
    );
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

/// POLICY with a CIDR rule on another port.
const POLICY_CIDR: &str = r#"
tables:
  - name: pod-a-out
    rules:
      - {action: reflect, proto: udp, dst: 10.96.0.10/32, dst_port: 53, origin: "e2e/dns"}
      - {action: reflect, proto: tcp, dst: "fqdn:*.example.test", dst_port: 8080, origin: "e2e/to-fqdn"}
      - {action: reflect, proto: tcp, dst: "cidr:203.0.113.0/24", dst_port: 9090, origin: "e2e/to-cidr"}
attach:
  - {port: pod-a, direction: ingress, table: pod-a-out}
dns:
  - {port: pod-a, allow: ["*.example.test", "*.other.test"]}
"#;

#[test]
fn fqdn_and_cidr_selectors_overlap_by_labels_and_allow_the_union() {
    let _serial = serial();
    let env = Env::up(
        "o",
        &["203.0.113.11", "203.0.113.12", "198.51.100.7"],
        "203.0.113.11 a.example.test\n198.51.100.7 far.example.test\n",
        30,
    );
    let mut d = env.ferruled("fo", "", "");
    env.apply(&d, POLICY_CIDR);
    let cidr_only = identity_of(&d, "cidr:203.0.113.0/24,reserved:world");
    let fqdn_only = identity_of(&d, "fqdn:*.example.test,reserved:world");
    assert!(
        cidr_only.is_some() && fqdn_only.is_some(),
        "{}",
        env.diagnostics(&d)
    );

    env.resolve_ok(&d, "a.example.test", &["203.0.113.11"]);
    env.resolve_ok(&d, "far.example.test", &["198.51.100.7"]);
    let both = identity_of(&d, "cidr:203.0.113.0/24,fqdn:*.example.test,reserved:world")
        .unwrap_or_else(|| {
            panic!(
                "the resolved address inside the /24 carries both labels\n{}",
                env.diagnostics(&d)
            )
        });
    assert_eq!(
        cached(&d, "a.example.test"),
        [("203.0.113.11".to_string(), Some(both))]
    );
    // Outside the /24 the name's address has the FQDN label alone.
    assert_eq!(
        cached(&d, "far.example.test"),
        [("198.51.100.7".to_string(), fqdn_only)]
    );
    let mut want_cidr = vec![cidr_only.unwrap(), both];
    want_cidr.sort();
    let mut want_fqdn = vec![fqdn_only.unwrap(), both];
    want_fqdn.sort();
    assert_eq!(selected(&d, "cidr:203.0.113.0/24"), want_cidr);
    assert_eq!(selected(&d, "fqdn:*.example.test"), want_fqdn);

    env.expect_reach(
        &d,
        &[
            ("203.0.113.11:8080", true),  // resolved: FQDN rule
            ("203.0.113.11:9090", true),  // inside the /24: CIDR rule
            ("203.0.113.12:9090", true),  // nobody resolved it, inside the /24
            ("203.0.113.12:8080", false), // … but no FQDN label
            ("198.51.100.7:8080", true),  // resolved outside the /24
            ("198.51.100.7:9090", false), // … not in the CIDR
        ],
    );
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

#[test]
fn a_crash_keeps_identities_and_connections_from_the_checkpoint() {
    let _serial = serial();
    let env = Env::up("k", ALL_ADDRS, HOSTS, 300);
    let state = env.dir.path().join("lib/state.json");
    let sections = format!("[state]\npath = \"{}\"\n", state.display());
    let mut checkpoint = state.as_os_str().to_owned();
    checkpoint.push(".fqdn");
    let checkpoint = PathBuf::from(checkpoint);
    let d = env.ferruled("fk", "", &sections);
    env.apply(&d, POLICY);
    env.resolve_ok(&d, "a.example.test", &["203.0.113.11"]);
    env.expect_reach(&d, &[("203.0.113.11:8080", true)]);
    let before = identities(&d);
    let cache_before = cached(&d, "a.example.test");
    assert!(
        wait_for("the checkpoint", 5, || std::fs::read_to_string(&checkpoint)
            .is_ok_and(|t| t.contains("a.example.test"))),
        "{}",
        env.diagnostics(&d)
    );
    let held = env.hold("203.0.113.11", 8080, 12);
    std::thread::sleep(Duration::from_secs(1));

    // kill -9, and start again in the namespace on the same state.
    let pid = d.pid().expect("running");
    let st = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    let old_log = d.log_text();
    drop(d);
    let mut d = env.ferruled("fk2", "", &sections);
    let restarted_log = d.log_text();
    assert!(
        restarted_log.contains("FQDN state restored from its checkpoint"),
        "{restarted_log}"
    );

    let (ok, out) = held.finish();
    eprintln!("across the crash: {}", out.trim());
    assert!(
        ok && out.contains("done"),
        "the connection survived the crash: {out}\n{}\n--- before the crash ---\n{old_log}",
        env.diagnostics(&d)
    );
    assert_eq!(
        identities(&d),
        before,
        "the same identities after the restart\n{}",
        env.diagnostics(&d)
    );
    assert_eq!(cached(&d, "a.example.test"), cache_before);
    // A new connection without resolving again.
    env.expect_reach(
        &d,
        &[("203.0.113.11:8080", true), ("203.0.113.12:8080", false)],
    );
    assert_eq!(
        proxy(&d, "queries"),
        0,
        "nothing resolved since the restart"
    );
    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}

/// The cluster as `ferrule-agent` reads it: pod-a (app=a) and pod-b (app=b) of node
/// n1 with the addresses configs/ferrule.toml gives their ports, and a
/// CiliumNetworkPolicy letting app=a reach `*.example.test` on TCP 8080 and send DNS
/// to the cluster DNS address, looking up `*.example.test` only.
const CLUSTER: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: default}
---
apiVersion: v1
kind: Pod
metadata: {name: pod-a, namespace: default, labels: {app: a}}
spec: {nodeName: n1, containers: [{name: c}]}
status: {phase: Running, podIP: 10.1.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: pod-b, namespace: default, labels: {app: b}}
spec: {nodeName: n1, containers: [{name: c}]}
status: {phase: Running, podIP: 10.1.0.3}
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: a-to-example, namespace: default}
spec:
  endpointSelector: {matchLabels: {app: a}}
  egress:
    - toFQDNs: [{matchPattern: "*.example.test"}]
      toPorts: [{ports: [{port: "8080", protocol: TCP}]}]
    - toCIDR: ["10.96.0.10/32"]
      toPorts:
        - ports: [{port: "53", protocol: UDP}]
          rules:
            dns: [{matchPattern: "*.example.test"}]
"#;

/// Runs `ferrule-agent --once` for node n1 over the manifests in `state` against `d`:
/// whether it succeeded, and its output.
fn run_agent_once(state: &Path, d: &Ferruled) -> (bool, String) {
    let o = Command::new(ferrule_e2e::agent_bin())
        .args(["--state", state.to_str().expect("path"), "--node", "n1"])
        .arg("--socket")
        .arg(&d.socket)
        .arg("--once")
        .stdin(Stdio::null())
        .output()
        .expect("ferrule-agent");
    (o.status.success(), text(&o))
}

#[test]
fn cilium_network_policy_through_the_agent() {
    let _serial = serial();
    let env = Env::up("g", ALL_ADDRS, HOSTS, 30);
    let mut d = env.ferruled("fg", "", "");
    let state = env.dir.path().join("cluster");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::write(state.join("cluster.yaml"), CLUSTER).expect("write manifests");
    let (ok, agent) = run_agent_once(&state, &d);
    let dump = || text(&d.ctl(&["--json", "acl", "dump"]));
    assert!(ok, "ferrule-agent --once:\n{agent}\n{}", d.log_text());
    let diag = || {
        format!(
            "--- agent ---\n{agent}\n--- acl dump ---\n{}\n{}",
            dump(),
            env.diagnostics(&d)
        )
    };

    // The FQDN rule's selector is in force, the pod's DNS goes through the proxy.
    let fqdn_ids = selected(&d, "fqdn:*.example.test");
    assert_eq!(fqdn_ids.len(), 1, "{}", diag());
    let rendered = dump();
    assert!(
        rendered.contains("*.example.test") && rendered.contains("cnp:a-to-example"),
        "{}",
        diag()
    );

    // Nothing resolved yet: the server is denied.
    let denied = acl_denied(&d);
    env.expect_reach(&d, &[("203.0.113.11:8080", false)]);
    assert!(acl_denied(&d) > denied, "{}", diag());

    // a.example.test resolves through the proxy; b.other.test is outside the
    // policy's rules.dns (dnsmasq knows it): REFUSED, and never sent upstream.
    let r = env.resolve("pa", &["a.example.test", "b.other.test"]);
    assert_eq!(
        (r[0].0.as_str(), r[0].1.as_slice()),
        ("NOERROR", &["203.0.113.11".to_string()][..]),
        "{r:?}\n{}",
        diag()
    );
    assert_eq!(
        (r[1].0.as_str(), r[1].1.len()),
        ("REFUSED", 0),
        "{r:?}\n{}",
        diag()
    );
    let sel = rpc(&d, "fqdn.selectors");
    assert_eq!(sel["proxy"]["refused"], 1, "{sel:#}");
    assert_eq!(sel["proxy"]["answered"], 1, "{sel:#}");
    assert!(
        !env.dns.log_text().contains("b.other.test"),
        "a refused name never reaches upstream:\n{}",
        env.dns.log_text()
    );
    assert_eq!(
        cached(&d, "a.example.test"),
        [("203.0.113.11".to_string(), Some(fqdn_ids[0]))],
        "{}",
        diag()
    );

    let denied = acl_denied(&d);
    env.expect_reach(
        &d,
        &[
            ("203.0.113.11:8080", true),  // resolved, selected
            ("203.0.113.12:8080", false), // the same server, never resolved
            ("203.0.113.21:8080", false), // refused, never learned
            ("203.0.113.11:9090", false), // resolved, but another port
        ],
    );
    assert!(
        acl_denied(&d) >= denied + 3,
        "each denied connection counted as acl-deny\n{}",
        diag()
    );

    // pod-b is selected by no policy: its DNS is not proxied.
    let queries = proxy(&d, "queries");
    let r = env.resolve("pb", &["a.example.test"]);
    assert_eq!(r[0].0, "TIMEOUT", "pod-b's query is not proxied: {r:?}");
    assert_eq!(proxy(&d, "queries"), queries);

    let status = d.terminate();
    assert!(status.success(), "{}", d.log_text());
}
