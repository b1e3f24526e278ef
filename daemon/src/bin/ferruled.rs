//! `ferruled`: the Ferrule node daemon. Loads the configuration, takes its instance
//! locks, binds the control socket, starts the dataplane and serves the control API
//! until SIGINT/SIGTERM (SIGHUP is logged and ignored).

use clap::Parser;
use ferrule_daemon::config::{Config, DEFAULT_CONFIG_PATH, EMBEDDED_DEFAULT};
use ferrule_daemon::daemon::{Daemon, StartOptions};
use ferrule_daemon::fib::Fib;
use ferrule_daemon::server::{InstanceLock, Server, ServerConfig, StopReason};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "ferruled",
    version,
    about = "Ferrule: userspace packet-forwarding vswitch for Kubernetes nodes (DPDK)",
    long_about = "ferruled runs Ferrule's dataplane: DPDK poll-mode workers, one per worker \
lcore, forward packets between the configured ports, while the control thread serves the \
JSON-RPC control API on a Unix socket (see ferrulectl(1) and docs/control-protocol.md).\n\n\
Configuration: --config PATH, else /etc/ferrule/ferrule.toml, else the embedded default \
(configs/ferrule.toml: the demo topology of scripts/netns-topology.sh — two pod ports \
and an uplink on af_packet veths). Every key is documented \
in configs/README.md. Logging goes to stderr; RUST_LOG overrides [log] level.\n\n\
State: with [state] path (or --state), everything received at run time — ports added \
over the socket, routes, static neighbours, the ACL tables and attachments, the VPC/SNAT \
settings — is kept in that file (rewritten atomically after each change) and restored at \
start before the workers poll, so a restart or a crash loses none of it. Connection \
tracking is not kept: connections are tracked anew after a restart (see \
docs/kubernetes.md). A corrupt file or one of another version stops the start (exit 1) \
unless --discard-state is given.\n\n\
SIGINT or SIGTERM stops polling, stops the ports, frees DPDK memory, removes the control \
socket and exits 0. SIGHUP is logged and ignored: ferruled takes changes over its control \
socket (ferrulectl, ferrule-agent) and never reloads its configuration file.\n\n\
One ferruled per control socket and per EAL file prefix: before touching either it takes \
an exclusive lock (flock) on <socket>.lock beside the socket and on \
/run/ferrule/locks/eal-<file_prefix>.lock, held until it exits; a second ferruled exits 1 \
naming the lock and the pid holding it. The lock files stay behind, harmlessly.\n\n\
The control socket gets [control] socket_mode (0600) and socket_group; a client is served \
only if its uid is in [control] allowed_uids (root) or its gid in allowed_gids, within \
max_clients connections (the last root_reserved_clients of them for root, who may also \
evict the connection idle the longest), max_clients_per_peer per process, max_batch \
requests per batch, max_request_bytes per request line; idle connections close after \
idle_timeout_s and unfinished request lines after request_timeout_s. Every change request \
is logged with the client's uid and pid. See configs/README.md and \
docs/control-protocol.md.",
    after_help = "EXIT STATUS:\n  0  stopped by SIGINT/SIGTERM (or --check passed)\n  \
1  the dataplane or control socket failed to start, or another ferruled holds the \
socket's or the EAL file prefix's lock\n  2  bad command line or configuration\n\n\
SIGNALS:\n  SIGINT, SIGTERM  stop cleanly, exit 0\n  SIGHUP           ignored (logged)\n\n\
EXAMPLES:\n  ferruled --config /etc/ferrule/ferrule.toml\n  \
ferruled --check --config ./ferrule.toml\n  ferruled --no-huge --socket /tmp/ferrule.sock"
)]
struct Args {
    /// Configuration file (TOML). Default: /etc/ferrule/ferrule.toml if it exists, else
    /// the embedded default.
    #[arg(long, short = 'c', value_name = "PATH")]
    config: Option<PathBuf>,

    /// Control socket path; overrides [control] socket.
    #[arg(long, short = 's', value_name = "PATH", env = "FERRULE_SOCKET")]
    socket: Option<PathBuf>,

    /// Run without hugepages (slower, but needs no reservation); overrides
    /// [eal] hugepages.
    #[arg(long)]
    no_huge: bool,

    /// EAL --file-prefix; overrides [eal] file_prefix (unique per DPDK process).
    #[arg(long, value_name = "PREFIX")]
    file_prefix: Option<String>,

    /// File that keeps the state received at run time (ports, routes, neighbours, ACLs,
    /// VPC) across restarts; overrides [state] path.
    #[arg(long, value_name = "PATH")]
    state: Option<PathBuf>,

    /// Start even when the state file cannot be read: it is moved aside (PATH.discarded)
    /// and the daemon starts with the configuration alone.
    #[arg(long)]
    discard_state: bool,

    /// Validate the configuration, print a summary and exit.
    #[arg(long)]
    check: bool,

    /// Print the embedded default configuration and exit.
    #[arg(long)]
    print_default_config: bool,
}

fn load_config(args: &Args) -> Result<(Config, String), String> {
    let (mut cfg, source) = match &args.config {
        Some(path) => (
            Config::load(path).map_err(|e| e.to_string())?,
            path.display().to_string(),
        ),
        None if std::path::Path::new(DEFAULT_CONFIG_PATH).exists() => (
            Config::load(std::path::Path::new(DEFAULT_CONFIG_PATH)).map_err(|e| e.to_string())?,
            DEFAULT_CONFIG_PATH.to_string(),
        ),
        None => (
            Config::embedded_default().map_err(|e| e.to_string())?,
            "<embedded default>".into(),
        ),
    };
    if let Some(socket) = &args.socket {
        cfg.control.socket = socket.clone();
    }
    if args.no_huge {
        cfg.eal.hugepages = false;
    }
    if let Some(state) = &args.state {
        if !state.is_absolute() {
            return Err(format!("--state {}: an absolute path", state.display()));
        }
        cfg.state = Some(state.clone());
        // The FQDN checkpoint goes beside the state file unless configured apart.
        if !cfg.fqdn.checkpoint_configured {
            cfg.fqdn.checkpoint = Some(ferrule_daemon::config::default_checkpoint(state));
        }
    }
    if let Some(prefix) = &args.file_prefix {
        if prefix.is_empty()
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(format!(
                "--file-prefix {prefix:?}: use only A-Z a-z 0-9 - _ ."
            ));
        }
        cfg.eal.file_prefix = prefix.clone();
    }
    Ok((cfg, source))
}

/// Free 2 MiB hugepages, as the kernel reports them (None when unknown).
fn free_hugepage_mb() -> Option<u64> {
    let read = |size: &str, mb: u64| {
        std::fs::read_to_string(format!(
            "/sys/kernel/mm/hugepages/hugepages-{size}/free_hugepages"
        ))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|n| n * mb)
    };
    match (read("2048kB", 2), read("1048576kB", 1024)) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// Interval of the control thread's housekeeping (punts, resolution, links, aging).
const CONTROL_TICK_MS: u64 = 10;

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: a journal or a log file gets plain text.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.print_default_config {
        print!("{EMBEDDED_DEFAULT}");
        return ExitCode::SUCCESS;
    }
    let (cfg, source) = match load_config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ferruled: {e}");
            return ExitCode::from(2);
        }
    };
    // The forwarding state (routes from ports, pods and [[route]]) must also hold
    // together; a clash is a configuration error like any other.
    let placeholder_macs = vec![[0u8; 6]; cfg.ports.len()];
    let placeholder_ids: Vec<u16> = (0..cfg.ports.len() as u16).collect();
    if let Err(e) = Fib::from_config(&cfg, &placeholder_macs, &placeholder_ids) {
        eprintln!("ferruled: {source}: `{}`: {}", e.field, e.message);
        return ExitCode::from(2);
    }
    if args.check {
        println!(
            "{source}: OK — {} port(s), {} worker(s), socket {}",
            cfg.ports.len(),
            cfg.eal.lcores.len() - 1,
            cfg.control.socket.display()
        );
        return ExitCode::SUCCESS;
    }
    init_logging(&cfg.log.level);
    tracing::info!(config = %source, "ferruled {} starting", env!("CARGO_PKG_VERSION"));

    // One daemon per EAL file prefix (and, in Server::bind, per socket), before the
    // EAL or the socket is touched; held until the process exits.
    let _prefix_lock = match InstanceLock::eal_prefix(&cfg.eal.file_prefix) {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("ferruled: {e}");
            return ExitCode::from(1);
        }
    };

    if cfg.eal.hugepages {
        if let Some(free) = free_hugepage_mb() {
            if free < u64::from(cfg.eal.memory_mb) {
                eprintln!(
                    "ferruled: {free} MiB of hugepages are free, eal.memory_mb needs {}.\n  \
                     hint: run scripts/setup.sh as root to reserve and mount hugepages, \
                     or run without them: --no-huge (or eal.hugepages = false)",
                    cfg.eal.memory_mb
                );
                return ExitCode::from(1);
            }
        }
    }

    // Punted packets (neighbour answers, packets held for resolution) are handled
    // every tick; link state is polled every link_poll_ms within it.
    let server_cfg = ServerConfig::from_control(
        &cfg.control,
        Duration::from_millis(CONTROL_TICK_MS.min(cfg.dataplane.link_poll_ms)),
    );
    let mut server = match Server::bind(server_cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ferruled: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = server.catch_signals() {
        eprintln!("ferruled: {e}");
        return ExitCode::from(1);
    }
    let options = StartOptions {
        discard_state: args.discard_state,
    };
    let mut daemon = match Daemon::start_with(&cfg, options) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ferruled: {e}");
            return ExitCode::from(1);
        }
    };
    tracing::info!(socket = %server.socket_path().display(), "control socket ready");
    let stopped = server.run(&mut daemon);
    match &stopped {
        Ok(StopReason::Signal(sig)) => tracing::info!(signal = sig, "stopping"),
        Ok(StopReason::Shutdown) => tracing::info!("stopping"),
        Err(e) => tracing::error!(error = %e, "control loop failed; stopping"),
    }
    daemon.stop_workers();
    let leaked = daemon.mbufs_in_use();
    if leaked > 0 {
        tracing::debug!(mbufs = leaked, "mbufs still held by port queues at stop");
    }
    drop(daemon);
    drop(server);
    tracing::info!("ferruled stopped");
    if stopped.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
