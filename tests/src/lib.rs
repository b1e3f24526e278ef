//! End-to-end test helpers: start a real `ferruled` on a generated configuration, talk
//! to it with `ferrulectl`, stop it, and clean up its processes, sockets and hugepage
//! files even when a test fails.

pub mod topology;

use serde_json::Value;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Directory holding the workspace's built binaries (next to this test's `deps/`).
/// The first call brings the workspace's binaries up to date with `cargo build`, so
/// `cargo test -p ferrule-e2e` never runs stale binaries — unless
/// `FERRULE_E2E_PREBUILT=1` says the caller has just built them (`make test` does):
/// cargo run from inside a test sees the test's environment (cargo's own
/// `LD_LIBRARY_PATH` among it), which build scripts watch, and would compile much of
/// the dependency graph again.
pub fn bin_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf();
    BUILT.get_or_init(|| {
        if std::env::var_os("FERRULE_E2E_PREBUILT").is_some_and(|v| v == "1") {
            return;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        // The whole workspace, as `make test` and `make build` build it: the same
        // feature unification, so nothing is compiled twice.
        cmd.args(["build", "--quiet", "--workspace", "--bins"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build");
        assert!(
            status.success(),
            "cargo build of ferruled/ferrulectl/ferrule-cni/ferrule-agent/ferrule-ipamd failed"
        );
    });
    for b in [
        "ferruled",
        "ferrulectl",
        "ferrule-cni",
        "ferrule-agent",
        "ferrule-ipamd",
    ] {
        assert!(
            dir.join(b).exists(),
            "{} missing: run `cargo build --workspace --bins` first",
            dir.join(b).display()
        );
    }
    dir
}

pub fn ferruled_bin() -> PathBuf {
    bin_dir().join("ferruled")
}

pub fn ferrulectl_bin() -> PathBuf {
    bin_dir().join("ferrulectl")
}

/// The CNI plugin (installed as `ferrule` in a CNI plugin directory).
pub fn cni_bin() -> PathBuf {
    bin_dir().join("ferrule-cni")
}

/// A command running `program` under `wrapper` (e.g. `ip netns exec NS`; empty: none).
pub fn wrapped(wrapper: &[String], program: impl AsRef<std::ffi::OsStr>) -> Command {
    match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// The traffic generator (`perf/`, built with the workspace's binaries).
pub fn pktgen_bin() -> PathBuf {
    bin_dir().join("ferrule-pktgen")
}

/// The policy agent.
pub fn agent_bin() -> PathBuf {
    bin_dir().join("ferrule-agent")
}

/// The VPC IP address manager.
pub fn ipamd_bin() -> PathBuf {
    bin_dir().join("ferrule-ipamd")
}

/// The project's Python venv (scripts/setup.sh makes it: moto[server] and boto3).
pub fn venv() -> PathBuf {
    PathBuf::from(std::env::var("FERRULE_VENV").unwrap_or_else(|_| "/opt/ferrule/venv".into()))
}

/// Whether enough 2 MiB hugepages are free for one more test daemon.
pub fn hugepages_free(mb: u64) -> bool {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|n| n * 2 >= mb + 64)
}

/// Test daemons that may run at once (the test threads of one test binary).
const PARALLEL_DAEMONS: u64 = 8;

/// A unique EAL file prefix for one test daemon.
pub fn unique_prefix(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("ferrule-e2e-{tag}-{}-{n}", std::process::id())
}

/// The lock `ferruled` takes for its EAL file prefix (never removed by the daemon, see
/// `server::InstanceLock`); the harness removes it for its own prefixes once their
/// daemon is gone.
pub fn eal_lock(prefix: &str) -> PathBuf {
    Path::new("/run/ferrule/locks").join(format!("eal-{prefix}.lock"))
}

/// Removes the EAL lock of `prefix` if `pid` (a daemon that is gone) was its last
/// holder; a lock another daemon holds now names that daemon and stays.
pub fn remove_eal_lock(prefix: &str, pid: u32) {
    let path = eal_lock(prefix);
    if std::fs::read_to_string(&path).is_ok_and(|t| t.trim() == pid.to_string()) {
        let _ = std::fs::remove_file(&path);
    }
}

/// Hugepage files and runtime directories a process with `prefix` left behind.
pub fn leftovers(prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["/dev/hugepages", "/run/dpdk"] {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                // Exactly this prefix: `<prefix>` (runtime dir) or `<prefix>map_N` (hugepage
                // files), never another test's `<prefix>0…`.
                let name = e.file_name().to_string_lossy().into_owned();
                if name == prefix || name.starts_with(&format!("{prefix}map_")) {
                    out.push(e.path());
                }
            }
        }
    }
    out
}

/// The `[eal]`, `[control]` and `[dataplane]` sections for a test daemon: two lcores,
/// 128 MiB (hugepages when enough are free for every test daemon that may run at the
/// same time, else `--no-huge`), a worker that naps when idle.
pub fn base_config(prefix: &str) -> String {
    format!(
        "[eal]\nlcores = [0, 1]\nmemory_mb = 128\nhugepages = {}\nin_memory = true\n\
         file_prefix = \"{prefix}\"\nlog_level = \"error\"\n\n\
         [dataplane]\nmbufs = 4095\nmbuf_cache = 64\nrx_desc = 256\ntx_desc = 256\nidle_sleep_us = 50\n\n\
         [log]\nlevel = \"info\"\n\n",
        hugepages_free(128 * PARALLEL_DAEMONS)
    )
}

/// A running `ferruled`, killed and cleaned up on drop if a test did not stop it.
pub struct Ferruled {
    child: Option<Child>,
    /// The child's pid, kept after it is reaped (for its lock file).
    child_pid: u32,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub prefix: String,
    pub log: PathBuf,
}

impl Ferruled {
    /// Writes `config` (a full TOML text; its `file_prefix` must be `prefix`), starts
    /// ferruled on it and waits until the control socket answers.
    pub fn start(config: &str, prefix: &str) -> anyhow::Result<Ferruled> {
        Self::start_in(tempfile::tempdir()?, config, prefix)
    }

    /// As `start`, in a directory the caller prepared (pcap files, …).
    pub fn start_in(
        dir: tempfile::TempDir,
        config: &str,
        prefix: &str,
    ) -> anyhow::Result<Ferruled> {
        Self::start_wrapped(dir, config, prefix, &[])
    }

    /// As `start_in`, with ferruled run under `wrapper` (e.g. `ip netns exec NS`).
    pub fn start_wrapped(
        dir: tempfile::TempDir,
        config: &str,
        prefix: &str,
        wrapper: &[String],
    ) -> anyhow::Result<Ferruled> {
        let cfg_path = dir.path().join("ferrule.toml");
        // A test's sockets and pcap files live in its directory: `port.add` may use it
        // unless the test writes its own `[control]`.
        let config = if config.contains("[control]") {
            config.to_string()
        } else {
            let d = dir.path().display();
            format!(
                "{config}\n[control]\nvhost_dirs = [\"{d}\"]\nmemif_dirs = [\"{d}\"]\n\
                 pcap_dirs = [\"{d}\"]\n"
            )
        };
        // Test daemons run side by side: no metrics endpoint unless a test asks.
        let config = if config.contains("[metrics]") {
            config
        } else {
            format!("{config}\n[metrics]\nlisten = \"\"\n")
        };
        std::fs::write(&cfg_path, config)?;
        let socket = dir.path().join("ctl").join("ferrule.sock");
        let log = dir.path().join("ferruled.log");
        let mut cmd = wrapped(wrapper, ferruled_bin());
        cmd.arg("--config")
            .arg(&cfg_path)
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let child = cmd.stderr(std::fs::File::create(&log)?).spawn()?;
        let mut d = Ferruled {
            child_pid: child.id(),
            child: Some(child),
            dir,
            socket,
            prefix: prefix.to_string(),
            log,
        };
        let mut deadline = Instant::now() + Duration::from_secs(30);
        let mut respawns = 0;
        loop {
            if let Some(status) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                d.child = None;
                let log = d.log_text();
                // DPDK's af_packet driver names its fanout group after the process ID
                // and the interface index: two daemons started side by side may pick
                // the same group for different interfaces (EINVAL). Another process ID
                // picks another group.
                if log.contains("could not set PACKET_FANOUT") && respawns < 3 {
                    respawns += 1;
                    let child = cmd.stderr(std::fs::File::create(&d.log)?).spawn()?;
                    d.child_pid = child.id();
                    d.child = Some(child);
                    deadline = Instant::now() + Duration::from_secs(30);
                    continue;
                }
                anyhow::bail!("ferruled exited early ({status}):\n{log}");
            }
            if d.socket.exists() && d.ctl(&["version"]).status.success() {
                return Ok(d);
            }
            if Instant::now() > deadline {
                anyhow::bail!("ferruled did not answer within 30 s:\n{}", d.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills ferruled with SIGKILL, as a crash would, and starts it again on the same
    /// configuration and socket (not under a wrapper); waits until it answers. Its log
    /// goes on in the same file.
    pub fn crash_and_restart(&mut self, extra_args: &[&str]) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let log = std::fs::OpenOptions::new().append(true).open(&self.log)?;
        let child = Command::new(ferruled_bin())
            .arg("--config")
            .arg(self.dir.path().join("ferrule.toml"))
            .arg("--socket")
            .arg(&self.socket)
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.child_pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                anyhow::bail!("ferruled exited early ({status}):\n{}", self.log_text());
            }
            if self.socket.exists() && self.ctl(&["version"]).status.success() {
                return Ok(());
            }
            if Instant::now() > deadline {
                anyhow::bail!("ferruled did not answer within 30 s:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs `ferrulectl --socket <ours> ARGS…`.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(ferrulectl_bin())
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run ferrulectl")
    }

    /// Runs `ferrulectl --json ARGS…` and parses its output.
    pub fn ctl_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.ctl(&all);
        assert!(
            out.status.success(),
            "ferrulectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("ferrulectl --json prints JSON")
    }

    /// Sends a raw line to the control socket and returns the reply line.
    pub fn raw_request(&self, line: &[u8]) -> anyhow::Result<String> {
        use std::io::{BufRead, BufReader};
        let mut s = std::os::unix::net::UnixStream::connect(&self.socket)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(line)?;
        s.write_all(b"\n")?;
        let mut reply = String::new();
        BufReader::new(s).read_line(&mut reply)?;
        Ok(reply)
    }

    /// Polls `stats.get` until `cond` holds (10 s at most).
    pub fn wait_stats(&self, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = self.ctl_json(&["stats"]);
            if cond(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last stats: {s:#}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGTERM and waits (20 s at most) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("ferruled is running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().expect("wait ferruled") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let status = child.wait().expect("wait ferruled");
                panic!(
                    "ferruled ignored SIGTERM for 20 s (killed: {:?})\n{}",
                    status.signal(),
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Ferruled {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for p in leftovers(&self.prefix) {
            let _ = std::fs::remove_file(&p).or_else(|_| std::fs::remove_dir_all(&p));
        }
        remove_eal_lock(&self.prefix, self.child_pid);
    }
}

/// A child process stopped (like [`stop_timeout_child`]) when dropped, also when the
/// test fails.
pub struct Stopped(pub Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        stop_timeout_child(&mut self.0);
    }
}

/// Stops a child started as `ip netns exec NS timeout SECS PROGRAM …` (the child is
/// `timeout`; PROGRAM is its child): SIGTERM first, which `timeout` passes on to
/// PROGRAM before it exits — a SIGKILL would leave PROGRAM running, orphaned — then
/// SIGKILL if it has not exited within two seconds. Waits for it.
pub fn stop_timeout_child(child: &mut Child) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Writes frames as a classic pcap file (Ethernet link type).
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) -> std::io::Result<()> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(path, out)
}

/// Reads the frames of a classic pcap file (either byte order, µs or ns stamps).
pub fn read_pcap(path: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    let data = std::fs::read(path)?;
    anyhow::ensure!(
        data.len() >= 24,
        "{}: shorter than a pcap header",
        path.display()
    );
    let magic = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => anyhow::bail!("{}: not a pcap file (magic {m:#x})", path.display()),
    };
    let u32_at = |o: usize| {
        let b = [data[o], data[o + 1], data[o + 2], data[o + 3]];
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    let mut frames = Vec::new();
    let mut off = 24;
    while off + 16 <= data.len() {
        let incl = u32_at(off + 8) as usize;
        off += 16;
        anyhow::ensure!(
            off + incl <= data.len(),
            "{}: truncated record",
            path.display()
        );
        frames.push(data[off..off + incl].to_vec());
        off += incl;
    }
    Ok(frames)
}

/// A network namespace created for one test, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> anyhow::Result<Netns> {
        let name = format!("ferrule-{tag}-{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let st = Command::new("ip").args(["netns", "add", &name]).status()?;
        anyhow::ensure!(st.success(), "ip netns add {name} failed (run as root)");
        let ns = Netns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs a command inside the namespace; fails on a non-zero exit.
    pub fn exec(&self, args: &[&str]) -> anyhow::Result<()> {
        let st = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .status()?;
        anyhow::ensure!(st.success(), "in netns {}: {args:?} failed", self.name);
        Ok(())
    }

    /// The wrapper that runs a program inside the namespace.
    pub fn wrapper(&self) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.name.clone(),
        ]
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
