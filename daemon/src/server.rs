//! The control-socket server: a `mio` event loop on a Unix stream socket that frames
//! newline-delimited JSON-RPC 2.0 requests, hands each one to a [`Service`], and writes
//! the responses back, on the daemon's control thread.
//!
//! No client can stall that thread or grow its memory without bound:
//!
//! - A connection's input is read only when it has nothing else to do: complete lines
//!   wait in its input buffer (at most one request line plus one read), and a request —
//!   or one item of a batch, or one piece of a streamed result — runs only while the
//!   connection's unsent output is under [`WRITE_HIGH_WATER`]. A batch's replies are
//!   written one by one as its array is produced, never gathered first; large results
//!   ([`Reply::Stream`], e.g. `acl.dump`) are written piece by piece the same way.
//! - Each connection gets a turn of at most [`TURN_BUDGET`] before the loop serves the
//!   others and the service's tick; connections with work left wait in a ready list
//!   (mio is edge-triggered, so no event would remind us of them), and the loop polls
//!   without waiting while that list is not empty.
//! - Connections are admitted by peer credentials (SO_PEERCRED: allowed uids and gids),
//!   at most `max_clients_per_peer` per process, the last `root_reserved_clients` slots
//!   for root, and a root client finding the table full evicts the connection idle the
//!   longest. Idle connections, stalled readers and request lines not finished in time
//!   are closed. A refused or closed client is told why in one error line.
//! - Client text in logs is escaped and shortened ([`log_safe`]); warnings are
//!   rate-limited per kind, with a line counting what was suppressed.
//!
//! Wire format, error codes and limits: `docs/control-protocol.md`.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::net::Shutdown;
use std::ops::Range;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Token, Waker};
use serde::Serialize;
use serde_json::Value;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use tracing::{debug, error, info, warn};

use ferrule_api as api;
use ferrule_api::rpc::{Reply, ReplyStream, RpcError, Service, INVALID_REQUEST, STREAM_CHUNK};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const SIGNALS: Token = Token(2);
const FIRST_CLIENT: usize = 3;

/// Bytes read from a client per `read(2)`.
const READ_CHUNK: usize = 64 * 1024;
/// A connection runs requests (and batch items, and pieces of streamed results) only
/// while its unsent replies are under this; above it, it waits for the client to read.
pub const WRITE_HIGH_WATER: usize = 1 << 20;
/// Most time one connection is served before the loop moves on to the others and the
/// tick (a single request that takes longer still runs to its end).
pub const TURN_BUDGET: Duration = Duration::from_millis(10);
/// Buffers grown past this by one large request or reply are released once empty.
const KEEP_BUFFER_CAPACITY: usize = 64 * 1024;
/// How often timeouts are checked and suppressed warnings are summed up.
const SWEEP_INTERVAL: Duration = Duration::from_millis(100);
/// Warnings of one kind logged per [`LOG_WINDOW`]; the rest are counted.
const LOG_BURST: u32 = 10;
const LOG_WINDOW: Duration = Duration::from_secs(10);
/// Longest piece of client text put in a log line, in characters.
const LOG_TEXT_MAX: usize = 120;

/// JSON-RPC error code of the lines sent to a client whose connection is refused or
/// closed by the daemon (not allowed, over a limit, idle, too slow). A server error in
/// JSON-RPC's reserved range.
pub const CONNECTION_REFUSED: i64 = -32000;

/// Settings of the control socket. [`ServerConfig::from_control`] makes them from the
/// `[control]` section; the defaults are those of an empty `[control]`, except that
/// the uid running the server is allowed besides root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Path of the Unix socket.
    pub socket: PathBuf,
    /// Permission bits of the socket file: 0o600, 0o660 or 0o666.
    pub socket_mode: u32,
    /// Group given to the socket file.
    pub socket_group: Option<u32>,
    /// Peers whose uid is listed may connect...
    pub allowed_uids: Vec<u32>,
    /// ...and so may peers whose primary gid is listed.
    pub allowed_gids: Vec<u32>,
    /// Largest request line in bytes (without the newline); longer lines are answered
    /// with `INVALID_REQUEST` and skipped.
    pub max_request_bytes: usize,
    /// Interval at which [`Service::tick`] is called.
    pub tick: Duration,
    /// Most clients connected at once.
    pub max_clients: usize,
    /// Most connections of one peer process.
    pub max_clients_per_peer: usize,
    /// Of `max_clients`, the slots only root may take.
    pub root_reserved_clients: usize,
    /// Most requests in one batch.
    pub max_batch: usize,
    /// A connection on which nothing moves for this long is closed.
    pub idle_timeout: Duration,
    /// A request line must be complete this long after its first byte arrived.
    pub request_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let mut allowed_uids = vec![0];
        let me = rustix::process::geteuid().as_raw();
        if me != 0 {
            allowed_uids.push(me);
        }
        ServerConfig {
            socket: PathBuf::from(api::DEFAULT_SOCKET),
            socket_mode: 0o600,
            socket_group: None,
            allowed_uids,
            allowed_gids: Vec::new(),
            max_request_bytes: api::DEFAULT_MAX_REQUEST_BYTES,
            tick: Duration::from_secs(1),
            max_clients: 256,
            max_clients_per_peer: 32,
            root_reserved_clients: 8,
            max_batch: 1024,
            idle_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(10),
        }
    }
}

impl ServerConfig {
    /// The settings of a `[control]` section, with [`Service::tick`] every `tick`.
    pub fn from_control(c: &crate::config::ControlSection, tick: Duration) -> ServerConfig {
        ServerConfig {
            socket: c.socket.clone(),
            socket_mode: c.socket_mode,
            socket_group: c.socket_group,
            allowed_uids: c.allowed_uids.clone(),
            allowed_gids: c.allowed_gids.clone(),
            max_request_bytes: c.max_request_bytes,
            tick,
            max_clients: c.max_clients,
            max_clients_per_peer: c.max_clients_per_peer,
            root_reserved_clients: c.root_reserved_clients,
            max_batch: c.max_batch,
            idle_timeout: Duration::from_secs(c.idle_timeout_s),
            request_timeout: Duration::from_secs(c.request_timeout_s),
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.tick.is_zero() {
            return Err("tick interval must be greater than zero".into());
        }
        if self.max_request_bytes == 0 {
            return Err("max_request_bytes must be greater than zero".into());
        }
        if self.max_clients == 0 || self.max_clients_per_peer == 0 || self.max_batch == 0 {
            return Err(
                "max_clients, max_clients_per_peer and max_batch must be at least 1".into(),
            );
        }
        if self.root_reserved_clients >= self.max_clients {
            return Err("root_reserved_clients must be less than max_clients".into());
        }
        if self.idle_timeout.is_zero() || self.request_timeout.is_zero() {
            return Err("timeouts must be greater than zero".into());
        }
        if self.socket_mode & !0o666 != 0 || self.socket_mode & 0o600 != 0o600 {
            return Err(format!(
                "socket mode {:#o}: read and write for the owner, optionally for the group \
                 or others, nothing else",
                self.socket_mode
            ));
        }
        Ok(())
    }
}

/// Why the control socket could not be set up or served.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Another process holds the resource: a ferruled holds its lock, or some process
    /// accepts connections on the socket.
    #[error("{what} is in use by another process{}; {hint}", held_by(.lock, .pid))]
    InUse {
        /// What is taken ("control socket PATH", "EAL file prefix \"P\"").
        what: String,
        /// The lock file held, when that is how we know.
        lock: Option<PathBuf>,
        /// The holder's pid, as written in the lock file.
        pid: Option<u32>,
        /// What to do about it.
        hint: &'static str,
    },
    /// The socket path exists and is not a socket; it is left alone.
    #[error("{} exists and is not a socket; refusing to replace it", path.display())]
    NotASocket { path: PathBuf },
    /// A setting is unusable.
    #[error("invalid control socket configuration: {0}")]
    Config(String),
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

fn held_by(lock: &Option<PathBuf>, pid: &Option<u32>) -> String {
    match (lock, pid) {
        (Some(lock), Some(pid)) => format!(" (pid {pid} holds {})", lock.display()),
        (Some(lock), None) => format!(" (another process holds {})", lock.display()),
        (None, _) => String::new(),
    }
}

const SOCKET_HINT: &str =
    "stop the other ferruled first, or give this one another socket (--socket or [control] socket)";
const PREFIX_HINT: &str = "stop the other ferruled first, or give this one another EAL file \
                           prefix (--file-prefix or [eal] file_prefix)";

impl ServerError {
    fn io(context: impl Into<String>, source: io::Error) -> Self {
        ServerError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Directory of the EAL file-prefix locks (created 0755).
pub const LOCK_DIR: &str = "/run/ferrule/locks";

/// The lock a daemon holds for its EAL file prefix: `LOCK_DIR/eal-<prefix>.lock`.
pub fn eal_lock_path(prefix: &str) -> PathBuf {
    Path::new(LOCK_DIR).join(format!("eal-{prefix}.lock"))
}

/// The lock a server holds for its socket: `<socket>.lock`, beside it.
pub fn socket_lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// An exclusive `flock` on a file, held for as long as this value lives (the process's
/// lifetime, for a daemon): one ferruled per control socket and per EAL file prefix,
/// without the race of "probe, then take". The holder's pid is written in the file for
/// the message a second daemon prints.
///
/// The file is never removed, not even by its holder on exit: a process that opened it
/// just before the unlink would lock the removed file while a third one creates and
/// locks a new file at the path, and both would run. A stale lock file is harmless: the
/// lock goes with the process that held it, whatever the file says.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
    path: PathBuf,
}

/// Creates the missing directories above `path` (mode 0755).
fn create_parent(path: &Path) -> Result<(), ServerError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(|e| {
                    ServerError::io(format!("cannot create directory {}", parent.display()), e)
                })?;
        }
    }
    Ok(())
}

impl InstanceLock {
    /// Takes the lock at `path` (created 0644 if missing, its directory 0755), or fails
    /// with [`ServerError::InUse`] naming `what`, the lock, the holder's pid and `hint`.
    fn acquire(path: &Path, what: String, hint: &'static str) -> Result<InstanceLock, ServerError> {
        create_parent(path)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| ServerError::io(format!("cannot open lock file {}", path.display()), e))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(ServerError::InUse {
                    what,
                    lock: Some(path.to_path_buf()),
                    pid: holder_pid(&mut file),
                    hint,
                });
            }
            Err(e) => {
                return Err(ServerError::io(
                    format!("cannot lock {}", path.display()),
                    e.into(),
                ))
            }
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.write_all(pid.as_bytes()))
            .map_err(|e| ServerError::io(format!("cannot write {}", path.display()), e))?;
        Ok(InstanceLock {
            _file: file,
            path: path.to_path_buf(),
        })
    }

    /// Takes the lock of EAL file prefix `prefix` ([`eal_lock_path`]).
    pub fn eal_prefix(prefix: &str) -> Result<InstanceLock, ServerError> {
        InstanceLock::acquire(
            &eal_lock_path(prefix),
            format!("EAL file prefix {prefix:?}"),
            PREFIX_HINT,
        )
    }

    /// Path of the lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The pid the holder wrote in its lock file; it may be writing it right now, so an
/// empty file is read again for a little while.
fn holder_pid(file: &mut File) -> Option<u32> {
    for _ in 0..20 {
        let mut text = String::new();
        if file.rewind().is_ok() && file.read_to_string(&mut text).is_ok() {
            if let Ok(pid) = text.trim().parse() {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Why [`Server::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A signal caught by [`Server::catch_signals`] (`SIGINT` or `SIGTERM`) arrived.
    Signal(i32),
    /// [`ShutdownHandle::shutdown`] was called.
    Shutdown,
}

/// Makes a running [`Server::run`] return [`StopReason::Shutdown`], from any thread.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    requested: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl ShutdownHandle {
    /// Asks the server to stop. `run` returns after the events it is handling; when it is
    /// not running, the next `run` returns at once.
    pub fn shutdown(&self) {
        self.requested.store(true, Ordering::SeqCst);
        if let Err(e) = self.waker.wake() {
            // The flag is set; the loop sees it at the next tick at the latest.
            warn!("cannot wake the control thread for shutdown: {e}");
        }
    }
}

/// Who is at the other end of a connection (SO_PEERCRED, as of its `connect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Peer {
    uid: u32,
    gid: u32,
    pid: i32,
}

/// The control-socket server. Serves any number of clients on one thread.
pub struct Server {
    cfg: ServerConfig,
    poll: Poll,
    listener: UnixListener,
    /// Device and inode of the socket file we bound, so `Drop` removes only that file.
    socket_id: (u64, u64),
    waker: Arc<Waker>,
    shutdown_requested: Arc<AtomicBool>,
    signals: Option<Signals>,
    conns: HashMap<Token, Conn>,
    /// Connections per peer process.
    per_pid: HashMap<i32, usize>,
    /// Connections with work they can do now, served in turn.
    ready: VecDeque<Token>,
    next_token: usize,
    /// `accept` failed (for example `EMFILE`); retried at each tick because the
    /// edge-triggered listener will not report the waiting connections again.
    accept_retry: bool,
    limiter: LogLimiter,
    /// Held while the server lives; released after `Drop` removed the socket.
    _lock: InstanceLock,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("cfg", &self.cfg)
            .field("clients", &self.conns.len())
            .field("signals", &self.signals.is_some())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Creates the socket's parent directory (0755) if missing, takes the socket's lock
    /// (`<socket>.lock`, see [`InstanceLock`]), replaces a stale socket left by a dead
    /// daemon, and binds with the configured mode and group.
    ///
    /// Fails if another server holds the lock or another process accepts connections
    /// on the path, or if the path exists and is not a socket (never removed).
    pub fn bind(cfg: ServerConfig) -> Result<Server, ServerError> {
        cfg.validate().map_err(ServerError::Config)?;
        let path = cfg.socket.clone();
        create_parent(&path)?;
        let what = format!("control socket {}", path.display());
        let lock = InstanceLock::acquire(&socket_lock_path(&path), what, SOCKET_HINT)?;
        remove_stale_socket(&path)?;

        let mut listener = bind_private(&path, cfg.socket_mode, cfg.socket_group)?;
        let meta = fs::symlink_metadata(&path).map_err(|e| {
            let _ = fs::remove_file(&path);
            ServerError::io(format!("cannot stat control socket {}", path.display()), e)
        })?;
        let socket_id = (meta.dev(), meta.ino());

        let poll = Poll::new().map_err(|e| ServerError::io("cannot create poll instance", e))?;
        let setup = |poll: &Poll, listener: &mut UnixListener| -> io::Result<Waker> {
            poll.registry()
                .register(listener, LISTENER, Interest::READABLE)?;
            Waker::new(poll.registry(), WAKER)
        };
        let waker = setup(&poll, &mut listener).map_err(|e| {
            let _ = fs::remove_file(&path);
            ServerError::io("cannot register control socket", e)
        })?;
        info!(
            socket = %path.display(),
            mode = format_args!("{:#o}", cfg.socket_mode),
            "control socket listening"
        );
        Ok(Server {
            cfg,
            poll,
            listener,
            socket_id,
            waker: Arc::new(waker),
            shutdown_requested: Arc::new(AtomicBool::new(false)),
            signals: None,
            conns: HashMap::new(),
            per_pid: HashMap::new(),
            ready: VecDeque::new(),
            next_token: FIRST_CLIENT,
            accept_retry: false,
            limiter: LogLimiter::default(),
            _lock: lock,
        })
    }

    /// A handle that makes [`Server::run`] return; it can be sent to other threads.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            requested: Arc::clone(&self.shutdown_requested),
            waker: Arc::clone(&self.waker),
        }
    }

    /// Makes `SIGINT` and `SIGTERM` stop [`Server::run`] with [`StopReason::Signal`]
    /// instead of killing the process, and `SIGHUP` be logged and ignored (the daemon
    /// takes changes over the socket; it has no configuration to reload). Calling it
    /// again has no further effect.
    pub fn catch_signals(&mut self) -> Result<(), ServerError> {
        if self.signals.is_some() {
            return Ok(());
        }
        let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])
            .map_err(|e| ServerError::io("cannot install SIGINT/SIGTERM/SIGHUP handlers", e))?;
        self.poll
            .registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)
            .map_err(|e| ServerError::io("cannot register signal pipe", e))?;
        self.signals = Some(signals);
        Ok(())
    }

    /// Path of the bound socket.
    pub fn socket_path(&self) -> &Path {
        &self.cfg.socket
    }

    /// Number of connected clients.
    pub fn client_count(&self) -> usize {
        self.conns.len()
    }

    /// Serves clients, answering requests with `service` and calling
    /// [`Service::tick`] at the configured interval, until a shutdown is requested or
    /// a caught signal arrives. Client connections stay open across calls.
    pub fn run<S: Service>(&mut self, service: &mut S) -> Result<StopReason, ServerError> {
        let mut events = Events::with_capacity(256);
        let mut next_tick = Instant::now() + self.cfg.tick;
        let mut next_sweep = Instant::now() + SWEEP_INTERVAL;
        loop {
            if self.shutdown_requested.swap(false, Ordering::SeqCst) {
                info!("control socket: shutdown requested");
                return Ok(StopReason::Shutdown);
            }
            let now = Instant::now();
            if now >= next_tick {
                self.tick(service);
                next_tick += self.cfg.tick;
                if next_tick <= now {
                    // We fell behind (a slow request); do not run a burst of late ticks.
                    next_tick = now + self.cfg.tick;
                }
            }
            if now >= next_sweep {
                self.sweep(now);
                next_sweep = now + SWEEP_INTERVAL;
            }
            let timeout = if self.ready.is_empty() {
                next_tick
                    .min(next_sweep)
                    .saturating_duration_since(Instant::now())
            } else {
                Duration::ZERO
            };
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ServerError::io("control socket poll failed", e)),
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_clients(),
                    // The flag is checked at the top of the loop.
                    WAKER => {}
                    SIGNALS => {
                        if let Some(signal) = self.take_signals() {
                            info!(signal, "control socket: caught signal");
                            return Ok(StopReason::Signal(signal));
                        }
                    }
                    token => self.mark_ready(token),
                }
            }
            // One turn for each connection ready now; the tick comes first when due.
            for _ in 0..self.ready.len() {
                if Instant::now() >= next_tick {
                    break;
                }
                let Some(token) = self.ready.pop_front() else {
                    break;
                };
                self.serve(token, service);
            }
        }
    }

    /// Drains the signal pipe: `SIGHUP` is logged and ignored; the first other signal
    /// is returned.
    fn take_signals(&mut self) -> Option<i32> {
        let signals = self.signals.as_mut()?;
        let mut stop = None;
        for signal in signals.pending() {
            if signal == SIGHUP {
                if self.limiter.allow("sighup", Instant::now()) {
                    info!(
                        "SIGHUP ignored: ferruled takes changes over its control socket and \
                         does not reload its configuration file"
                    );
                }
            } else {
                stop = stop.or(Some(signal));
            }
        }
        stop
    }

    fn tick<S: Service>(&mut self, service: &mut S) {
        if self.accept_retry {
            self.accept_clients();
        }
        if panic::catch_unwind(AssertUnwindSafe(|| service.tick())).is_err() {
            error!("control service tick panicked");
        }
    }

    fn mark_ready(&mut self, token: Token) {
        if let Some(conn) = self.conns.get_mut(&token) {
            if !conn.in_ready {
                conn.in_ready = true;
                self.ready.push_back(token);
            }
        }
    }

    /// Gives one connection its turn.
    fn serve<S: Service>(&mut self, token: Token, service: &mut S) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        conn.in_ready = false;
        let mut ctx = Ctx {
            client: token.0,
            peer: conn.peer,
            limiter: &mut self.limiter,
            max_batch: self.cfg.max_batch,
        };
        let deadline = Instant::now() + TURN_BUDGET;
        match conn.turn(&mut ctx, service, deadline) {
            Ok(TurnEnd::Ready) => {
                conn.in_ready = true;
                self.ready.push_back(token);
            }
            Ok(TurnEnd::Wait) => {}
            Ok(TurnEnd::Close) => self.close_client(token, None),
            Err(e) => {
                match e.kind() {
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                        debug!(client = token.0, "control client went away: {e}")
                    }
                    _ => {
                        if self.limiter.allow("client i/o error", Instant::now()) {
                            warn!(client = token.0, "control client I/O error: {e}");
                        }
                    }
                }
                self.close_client(token, None);
            }
        }
    }

    fn accept_clients(&mut self) {
        self.accept_retry = false;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if self.limiter.allow("accept failed", Instant::now()) {
                        warn!("control socket: accept failed: {e}");
                    }
                    self.accept_retry = true;
                    return;
                }
            }
        }
    }

    /// Checks a new connection's credentials and the limits; registers it, or tells
    /// it why not and closes it.
    fn admit(&mut self, mut stream: UnixStream) {
        let now = Instant::now();
        let peer = match rustix::net::sockopt::socket_peercred(&stream) {
            Ok(c) => Peer {
                uid: c.uid.as_raw(),
                gid: c.gid.as_raw(),
                pid: c.pid.as_raw_pid(),
            },
            Err(e) => {
                if self.limiter.allow("peer credentials", now) {
                    warn!("control socket: cannot read a client's credentials: {e}");
                }
                return;
            }
        };
        let decision = admission(
            &self.cfg,
            &peer,
            self.conns.len(),
            self.per_pid.get(&peer.pid).copied().unwrap_or(0),
        );
        match decision {
            Admission::Refuse { kind, message } => {
                if self.limiter.allow(kind, now) {
                    warn!(
                        uid = peer.uid,
                        gid = peer.gid,
                        pid = peer.pid,
                        "control socket: refused a client: {message}"
                    );
                }
                refuse(stream, &message);
                return;
            }
            Admission::Evict => {
                if let Some(victim) = self.longest_idle() {
                    let message = format!(
                        "connection closed: every one of the {} client slots ([control] \
                         max_clients) is taken and a root client needed one; this connection \
                         was idle the longest",
                        self.cfg.max_clients
                    );
                    if self.limiter.allow("evicted", now) {
                        let v = &self.conns[&victim];
                        warn!(
                            client = victim.0,
                            uid = v.peer.uid,
                            pid = v.peer.pid,
                            idle_ms =
                                now.saturating_duration_since(v.last_active).as_millis() as u64,
                            "control socket: all {} client slots taken; closing the connection \
                             idle the longest for a root client",
                            self.cfg.max_clients
                        );
                    }
                    self.close_client(victim, Some(&message));
                }
            }
            Admission::Accept => {}
        }
        let token = Token(self.next_token);
        self.next_token += 1;
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            if self.limiter.allow("register", now) {
                warn!("control socket: cannot register client: {e}");
            }
            return;
        }
        debug!(
            client = token.0,
            uid = peer.uid,
            pid = peer.pid,
            "control client connected"
        );
        *self.per_pid.entry(peer.pid).or_default() += 1;
        self.conns.insert(
            token,
            Conn::new(stream, peer, self.cfg.max_request_bytes, now),
        );
        // Whatever it already sent is reported by the registration's first event.
    }

    /// The connection nothing has moved on for the longest.
    fn longest_idle(&self) -> Option<Token> {
        self.conns
            .iter()
            .min_by_key(|(_, c)| c.last_active)
            .map(|(t, _)| *t)
    }

    /// Closes a connection, first sending `message` as an error line when given.
    fn close_client(&mut self, token: Token, message: Option<&str>) {
        let Some(mut conn) = self.conns.remove(&token) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        if let Some(count) = self.per_pid.get_mut(&conn.peer.pid) {
            *count -= 1;
            if *count == 0 {
                self.per_pid.remove(&conn.peer.pid);
            }
        }
        if let Some(message) = message {
            // Only between replies: in the middle of one the line would corrupt it.
            if conn.work.is_none() {
                write_error_line(&mut conn.out, CONNECTION_REFUSED, message);
            }
            let _ = conn.flush();
            finish(&conn.stream);
        }
        debug!(client = token.0, "control client disconnected");
    }

    /// Closes connections past their timeouts; logs what the rate limiter held back.
    fn sweep(&mut self, now: Instant) {
        let mut closing: Vec<(Token, Option<String>)> = Vec::new();
        for (&token, conn) in &self.conns {
            let quiet = now.saturating_duration_since(conn.last_active);
            if conn.awaiting_input && conn.work.is_none() {
                if let Some(since) = conn.partial_since {
                    if now.saturating_duration_since(since) >= self.cfg.request_timeout {
                        let message = format!(
                            "request not completed within {} s ([control] request_timeout_s); \
                             closing the connection",
                            self.cfg.request_timeout.as_secs_f64()
                        );
                        if self.limiter.allow("request timeout", now) {
                            warn!(
                                client = token.0,
                                uid = conn.peer.uid,
                                pid = conn.peer.pid,
                                "control client: {message}"
                            );
                        }
                        closing.push((token, Some(message)));
                        continue;
                    }
                }
            }
            if quiet < self.cfg.idle_timeout {
                continue;
            }
            if conn.pending_out() > 0 {
                if self.limiter.allow("stalled", now) {
                    warn!(
                        client = token.0,
                        uid = conn.peer.uid,
                        pid = conn.peer.pid,
                        unread = conn.pending_out(),
                        "control client has not read its replies for {} s ([control] \
                         idle_timeout_s); closing the connection",
                        self.cfg.idle_timeout.as_secs_f64()
                    );
                }
                closing.push((token, None));
            } else if conn.work.is_none() && conn.awaiting_input {
                debug!(client = token.0, "closing an idle control connection");
                closing.push((
                    token,
                    Some(format!(
                        "connection closed after {} s without a request ([control] \
                         idle_timeout_s)",
                        self.cfg.idle_timeout.as_secs_f64()
                    )),
                ));
            }
        }
        for (token, message) in closing {
            self.close_client(token, message.as_deref());
        }
        self.limiter.sweep(now);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let path = &self.cfg.socket;
        match fs::symlink_metadata(path) {
            Ok(meta) if (meta.dev(), meta.ino()) == self.socket_id => {
                if let Err(e) = fs::remove_file(path) {
                    warn!("cannot remove control socket {}: {e}", path.display());
                }
            }
            // Replaced by someone else, or already gone: not ours to remove.
            _ => {}
        }
        // The lock is released when the fields drop, after the socket is gone.
    }
}

/// What to do with a new connection.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Admission {
    Accept,
    /// Accept it after closing the connection idle the longest.
    Evict,
    /// Tell it `message` and close it; `kind` is the warning's rate-limit kind.
    Refuse {
        kind: &'static str,
        message: String,
    },
}

/// The admission rules: credentials, the per-process limit, the slots kept for root.
fn admission(cfg: &ServerConfig, peer: &Peer, connected: usize, of_pid: usize) -> Admission {
    if !cfg.allowed_uids.contains(&peer.uid) && !cfg.allowed_gids.contains(&peer.gid) {
        return Admission::Refuse {
            kind: "peer not allowed",
            message: format!(
                "permission denied: uid {} (gid {}) may not use this control socket; allow it \
                 with [control] allowed_uids or allowed_gids",
                peer.uid, peer.gid
            ),
        };
    }
    if of_pid >= cfg.max_clients_per_peer {
        return Admission::Refuse {
            kind: "per-peer limit",
            message: format!(
                "too many connections from pid {}: at most {} per process ([control] \
                 max_clients_per_peer)",
                peer.pid, cfg.max_clients_per_peer
            ),
        };
    }
    if peer.uid == 0 {
        if connected >= cfg.max_clients {
            return Admission::Evict;
        }
        return Admission::Accept;
    }
    let open = cfg.max_clients - cfg.root_reserved_clients;
    if connected >= open {
        return Admission::Refuse {
            kind: "client limit",
            message: format!(
                "too many clients: {connected} connected; of the {} slots ([control] \
                 max_clients) the last {} are kept for root ([control] root_reserved_clients)",
                cfg.max_clients, cfg.root_reserved_clients
            ),
        };
    }
    Admission::Accept
}

/// Sends a refused connection its error line and closes it.
fn refuse(mut stream: UnixStream, message: &str) {
    let mut line = Vec::new();
    write_error_line(&mut line, CONNECTION_REFUSED, message);
    // A fresh socket's buffer is empty: the short line goes in one write.
    let _ = stream.write(&line);
    finish(&stream);
}

/// Ends a connection politely: no more writes, and what the client already sent is
/// read and dropped, so that closing does not reset the connection before the client
/// has read our last line.
fn finish(stream: &UnixStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let mut sink = [0u8; 4096];
    let mut reader = stream;
    for _ in 0..16 {
        match reader.read(&mut sink) {
            Ok(n) if n > 0 => continue,
            _ => break,
        }
    }
}

/// Binds the socket so that it is never reachable with looser permissions than `mode`
/// (or owned by another group than `group`): it is bound inside a fresh 0700 staging
/// directory next to `path`, given its mode and group there, then renamed into place
/// (atomic, same directory). When the staging path would be too long for a socket
/// address, it binds in place under a umask that leaves it owner-only, then sets them.
fn bind_private(path: &Path, mode: u32, group: Option<u32>) -> Result<UnixListener, ServerError> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let staging = parent.join(format!(".fr{}", std::process::id()));
    let staged = staging.join("s");
    let restrict = |p: &Path| -> io::Result<()> {
        if let Some(gid) = group {
            std::os::unix::fs::chown(p, None, Some(gid))?;
        }
        fs::set_permissions(p, fs::Permissions::from_mode(mode))
    };
    // sun_path holds 107 bytes plus the NUL.
    if staged.as_os_str().len() < 108 {
        let _ = fs::remove_dir_all(&staging);
        if DirBuilder::new().mode(0o700).create(&staging).is_ok() {
            let result = UnixListener::bind(&staged).and_then(|l| {
                restrict(&staged)?;
                fs::rename(&staged, path)?;
                Ok(l)
            });
            let _ = fs::remove_dir_all(&staging);
            return result.map_err(|e| {
                ServerError::io(format!("cannot bind control socket {}", path.display()), e)
            });
        }
    }
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = UnixListener::bind(path);
    rustix::process::umask(old);
    let listener = bound.map_err(|e| {
        ServerError::io(format!("cannot bind control socket {}", path.display()), e)
    })?;
    restrict(path).map_err(|e| {
        let _ = fs::remove_file(path);
        ServerError::io(
            format!(
                "cannot set the mode and group of control socket {}",
                path.display()
            ),
            e,
        )
    })?;
    Ok(listener)
}

/// Makes `path` free for binding: nothing there, or a socket nobody listens on (removed).
/// Called with the socket's lock held, so no other ferruled is binding it now; the probe
/// catches a process that is not a ferruled listening there.
fn remove_stale_socket(path: &Path) -> Result<(), ServerError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(ServerError::io(
                format!("cannot inspect {}", path.display()),
                e,
            ));
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ServerError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(ServerError::InUse {
            what: format!("control socket {}", path.display()),
            lock: None,
            pid: None,
            hint: SOCKET_HINT,
        }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            info!(socket = %path.display(), "removing stale control socket");
            match fs::remove_file(path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(ServerError::io(
                    format!("cannot remove stale control socket {}", path.display()),
                    e,
                )),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ServerError::io(
            format!("cannot probe existing control socket {}", path.display()),
            e,
        )),
    }
}

/// What a connection's turn ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnEnd {
    /// Its budget ran out with work left: serve it again after the others.
    Ready,
    /// Waiting for the client: to send more, or to read what is pending.
    Wait,
    /// The client closed its side and everything is answered: close.
    Close,
}

/// What handling a request needs besides the connection.
struct Ctx<'a> {
    client: usize,
    peer: Peer,
    limiter: &'a mut LogLimiter,
    max_batch: usize,
}

/// The reply a connection is producing.
#[derive(Default)]
struct Work {
    /// A batch whose array is open: its requests not yet run.
    batch: Option<Batch>,
    /// A streamed result being written (of a single request, or of the batch's
    /// current item); its response object is closed after it.
    stream: Option<Box<dyn ReplyStream>>,
}

struct Batch {
    items: std::vec::IntoIter<Value>,
    /// Whether `[` was written (a batch of notifications writes nothing).
    opened: bool,
}

/// An answered request, before it is written.
enum Answer {
    Value(Value, Result<Value, RpcError>),
    Stream(Value, Box<dyn ReplyStream>),
}

/// One connected client.
struct Conn {
    stream: UnixStream,
    peer: Peer,
    input: Input,
    work: Option<Work>,
    /// Encoded replies not yet written; `out[out_pos..]` is pending.
    out: Vec<u8>,
    out_pos: usize,
    /// The client closed its sending side; close once the replies are written.
    read_closed: bool,
    /// Its last turn ended waiting for input.
    awaiting_input: bool,
    /// When the first byte of the request line still incomplete arrived.
    partial_since: Option<Instant>,
    /// When a byte last moved either way, or a request last ran.
    last_active: Instant,
    /// In the server's ready list.
    in_ready: bool,
}

impl Conn {
    fn new(stream: UnixStream, peer: Peer, max_request_bytes: usize, now: Instant) -> Self {
        Conn {
            stream,
            peer,
            input: Input::new(max_request_bytes),
            work: None,
            out: Vec::new(),
            out_pos: 0,
            read_closed: false,
            // Nothing read yet: waiting for its first request.
            awaiting_input: true,
            partial_since: None,
            last_active: now,
            in_ready: false,
        }
    }

    fn pending_out(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Writes, answers and reads until the budget runs out, the client must act, or
    /// the connection is done.
    fn turn<S: Service>(
        &mut self,
        ctx: &mut Ctx<'_>,
        service: &mut S,
        deadline: Instant,
    ) -> io::Result<TurnEnd> {
        self.awaiting_input = false;
        self.flush()?;
        loop {
            if self.pending_out() >= WRITE_HIGH_WATER {
                self.flush()?;
                if self.pending_out() >= WRITE_HIGH_WATER {
                    // The socket is full: its writable event brings us back.
                    return Ok(TurnEnd::Wait);
                }
            }
            if Instant::now() >= deadline {
                self.flush()?;
                return Ok(TurnEnd::Ready);
            }
            if self.work.is_some() {
                self.step(ctx, service)?;
                self.last_active = Instant::now();
                if self.pending_out() >= READ_CHUNK {
                    self.flush()?;
                }
                continue;
            }
            if let Some(frame) = self.input.next_frame() {
                self.last_active = Instant::now();
                match frame {
                    Frame::TooLong => {
                        let max = self.input.max;
                        if ctx.limiter.allow("request too long", Instant::now()) {
                            warn!(
                                client = ctx.client,
                                uid = ctx.peer.uid,
                                pid = ctx.peer.pid,
                                max,
                                "control request over the size limit ([control] max_request_bytes)"
                            );
                        }
                        let err = RpcError::new(INVALID_REQUEST, too_long_message(max));
                        write_response(&mut self.out, &Value::Null, Err(&err));
                        self.out.push(b'\n');
                    }
                    Frame::Line(range) => {
                        let line = &self.input.buf[range];
                        let work = start_line(line, ctx, service, &mut self.out);
                        self.work = work;
                    }
                }
                if self.pending_out() >= READ_CHUNK {
                    self.flush()?;
                }
                continue;
            }
            if self.read_closed {
                self.flush()?;
                return Ok(if self.pending_out() == 0 {
                    TurnEnd::Close
                } else {
                    TurnEnd::Wait
                });
            }
            match self.input.read_from(&mut self.stream) {
                Ok((0, _)) => {
                    if self.input.has_partial() {
                        debug!(client = ctx.client, "control client closed mid-request");
                    }
                    self.read_closed = true;
                    self.partial_since = None;
                }
                Ok((_, ends_partial)) => {
                    let now = Instant::now();
                    self.last_active = now;
                    self.partial_since = match ends_partial {
                        Some(true) => Some(now),
                        Some(false) => None,
                        None => self.partial_since.or(Some(now)),
                    };
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.flush()?;
                    self.input.release_if_empty();
                    self.awaiting_input = true;
                    return Ok(TurnEnd::Wait);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs one step of the reply in progress: the next piece of a streamed result, or
    /// the next request of a batch.
    fn step<S: Service>(&mut self, ctx: &mut Ctx<'_>, service: &mut S) -> io::Result<()> {
        let Some(work) = self.work.as_mut() else {
            return Ok(());
        };
        if let Some(stream) = work.stream.as_mut() {
            let out = &mut self.out;
            let done =
                panic::catch_unwind(AssertUnwindSafe(|| stream.write_next(out, STREAM_CHUNK)));
            match done {
                Ok(Ok(false)) => return Ok(()),
                Ok(Ok(true)) => {
                    work.stream = None;
                    self.out.push(b'}');
                    if work.batch.is_none() {
                        self.out.push(b'\n');
                        self.work = None;
                    }
                    return Ok(());
                }
                Ok(Err(e)) => {
                    error!(client = ctx.client, "streamed control reply failed: {e}");
                    return Err(io::Error::other("streamed reply failed"));
                }
                Err(_) => {
                    error!(client = ctx.client, "streamed control reply panicked");
                    return Err(io::Error::other("streamed reply panicked"));
                }
            }
        }
        let Some(batch) = work.batch.as_mut() else {
            self.work = None;
            return Ok(());
        };
        match batch.items.next() {
            Some(item) => {
                if let Some(answer) = handle_request(item, ctx, service) {
                    self.out.push(if batch.opened { b',' } else { b'[' });
                    batch.opened = true;
                    if let Some(stream) = write_answer(&mut self.out, answer) {
                        work.stream = Some(stream);
                    }
                }
            }
            None => {
                if batch.opened {
                    self.out.extend_from_slice(b"]\n");
                }
                self.work = None;
            }
        }
        Ok(())
    }

    /// Writes pending replies until done or the socket is full.
    fn flush(&mut self) -> io::Result<()> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out_pos += n;
                    self.last_active = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
            if self.out.capacity() > KEEP_BUFFER_CAPACITY {
                self.out = Vec::new();
            }
        } else if self.out_pos >= self.out.len() / 2 {
            self.out.drain(..self.out_pos);
            self.out_pos = 0;
        }
        Ok(())
    }
}

fn too_long_message(max: usize) -> String {
    format!(
        "request exceeds {max} bytes; raise [control] max_request_bytes to send larger \
         requests (an acl.apply of many rules, for example)"
    )
}

/// A piece of input cut at newlines.
#[derive(Debug, PartialEq, Eq)]
enum Frame {
    /// A complete line, without its newline: its bytes in the input buffer.
    Line(Range<usize>),
    /// A line longer than the limit; its bytes up to the next newline are discarded.
    TooLong,
}

/// A connection's input: bytes read and not yet handled, cut into lines of at most
/// `max` bytes on demand. Holds at most one line and one read.
#[derive(Debug)]
struct Input {
    buf: Vec<u8>,
    /// Bytes of `buf` handed out as lines or discarded.
    start: usize,
    /// Bytes after `start` known to hold no newline.
    scanned: usize,
    max: usize,
    /// Skipping the rest of an over-long line.
    discarding: bool,
}

impl Input {
    fn new(max: usize) -> Self {
        Input {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            max,
            discarding: false,
        }
    }

    fn has_partial(&self) -> bool {
        self.buf.len() > self.start || self.discarding
    }

    /// Frees the buffer when everything in it is handled (an idle connection holds no
    /// read buffer).
    fn release_if_empty(&mut self) {
        if self.start == self.buf.len() {
            self.buf = Vec::new();
            self.start = 0;
            self.scanned = 0;
        }
    }

    /// The next complete line, or `TooLong` once a line is known to be over the limit;
    /// `None` when more input is needed.
    fn next_frame(&mut self) -> Option<Frame> {
        loop {
            let from = self.start + self.scanned;
            match self.buf[from..].iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let line = self.start..from + i;
                    self.start = from + i + 1;
                    self.scanned = 0;
                    if self.discarding {
                        self.discarding = false;
                        continue;
                    }
                    if line.len() > self.max {
                        return Some(Frame::TooLong);
                    }
                    return Some(Frame::Line(line));
                }
                None => {
                    let pending = self.buf.len() - self.start;
                    if self.discarding || pending > self.max {
                        let report = !self.discarding;
                        self.discarding = true;
                        self.start = self.buf.len();
                        self.scanned = 0;
                        return report.then_some(Frame::TooLong);
                    }
                    self.scanned = pending;
                    return None;
                }
            }
        }
    }

    /// Reads once from `stream` after the bytes not yet handled. Returns the bytes read
    /// and whether the input now ends inside a line: `Some(true)` or `Some(false)` when
    /// the read held a newline, `None` when it did not (the line it continues goes on).
    fn read_from(&mut self, stream: &mut impl Read) -> io::Result<(usize, Option<bool>)> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
            if self.buf.is_empty() && self.buf.capacity() > KEEP_BUFFER_CAPACITY + READ_CHUNK {
                self.buf = Vec::new();
            }
        }
        let len = self.buf.len();
        self.buf.resize(len + READ_CHUNK, 0);
        let result = stream.read(&mut self.buf[len..]);
        let n = *result.as_ref().unwrap_or(&0);
        self.buf.truncate(len + n);
        result?;
        let data = &self.buf[len..];
        let ends = data.contains(&b'\n').then(|| data.last() != Some(&b'\n'));
        Ok((n, ends))
    }
}

/// A JSON-RPC 2.0 response object, members in the conventional order.
#[derive(Serialize)]
struct Response<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RpcError>,
}

/// Appends a response object (no newline).
fn write_response(out: &mut Vec<u8>, id: &Value, outcome: Result<&Value, &RpcError>) {
    let (result, error) = match outcome {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e)),
    };
    let response = Response {
        jsonrpc: "2.0",
        id,
        result,
        error,
    };
    let mark = out.len();
    if let Err(e) = serde_json::to_writer(&mut *out, &response) {
        // Only a failing Serialize impl can get here.
        out.truncate(mark);
        error!("cannot encode control reply: {e}");
        let err = RpcError::internal("cannot encode reply");
        let fallback = Response {
            jsonrpc: "2.0",
            id,
            result: None,
            error: Some(&err),
        };
        let _ = serde_json::to_writer(&mut *out, &fallback);
    }
}

/// Appends a whole error line with `id: null`.
fn write_error_line(out: &mut Vec<u8>, code: i64, message: &str) {
    write_response(out, &Value::Null, Err(&RpcError::new(code, message)));
    out.push(b'\n');
}

/// Appends an answer; for a streamed result, only the response's head, and returns the
/// stream that writes the rest (then `}`).
fn write_answer(out: &mut Vec<u8>, answer: Answer) -> Option<Box<dyn ReplyStream>> {
    match answer {
        Answer::Value(id, outcome) => {
            write_response(out, &id, outcome.as_ref());
            None
        }
        Answer::Stream(id, stream) => {
            out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
            // An id is a string, a number or null: it always encodes.
            let _ = serde_json::to_writer(&mut *out, &id);
            out.extend_from_slice(b",\"result\":");
            Some(stream)
        }
    }
}

/// Starts answering one line: a request (answered now, or its streamed result begun)
/// or a batch (begun; its requests run one per step). Returns the work left.
fn start_line<S: Service>(
    line: &[u8],
    ctx: &mut Ctx<'_>,
    service: &mut S,
    out: &mut Vec<u8>,
) -> Option<Work> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    let request: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            if ctx.limiter.allow("invalid JSON", Instant::now()) {
                warn!(
                    client = ctx.client,
                    uid = ctx.peer.uid,
                    pid = ctx.peer.pid,
                    "control request is not valid JSON: {e}"
                );
            }
            write_response(out, &Value::Null, Err(&RpcError::parse_error(e)));
            out.push(b'\n');
            return None;
        }
    };
    match request {
        Value::Array(items) if items.is_empty() => {
            invalid_warning(ctx, &Value::Null, "empty batch");
            let err = RpcError::invalid_request("empty batch");
            write_response(out, &Value::Null, Err(&err));
            out.push(b'\n');
            None
        }
        Value::Array(items) if items.len() > ctx.max_batch => {
            let detail = format!(
                "a batch of {} requests exceeds the limit of {}; send at most {} per batch \
                 or raise [control] max_batch",
                items.len(),
                ctx.max_batch,
                ctx.max_batch
            );
            invalid_warning(ctx, &Value::Null, &detail);
            write_response(out, &Value::Null, Err(&RpcError::invalid_request(detail)));
            out.push(b'\n');
            None
        }
        Value::Array(items) => {
            debug!(
                client = ctx.client,
                requests = items.len(),
                "control request batch"
            );
            Some(Work {
                batch: Some(Batch {
                    items: items.into_iter(),
                    opened: false,
                }),
                stream: None,
            })
        }
        request => {
            let answer = handle_request(request, ctx, service)?;
            match write_answer(out, answer) {
                Some(stream) => Some(Work {
                    batch: None,
                    stream: Some(stream),
                }),
                None => {
                    out.push(b'\n');
                    None
                }
            }
        }
    }
}

fn invalid_warning(ctx: &mut Ctx<'_>, id: &Value, detail: &str) {
    if ctx.limiter.allow("invalid request", Instant::now()) {
        warn!(
            client = ctx.client,
            uid = ctx.peer.uid,
            pid = ctx.peer.pid,
            id = %log_safe(&id.to_string()),
            "invalid control request: {}",
            log_safe(detail)
        );
    }
}

/// Checks one request object, calls the service, and returns the answer (`None` for a
/// notification). Change requests are logged at info with the client's uid and pid.
fn handle_request<S: Service>(
    request: Value,
    ctx: &mut Ctx<'_>,
    service: &mut S,
) -> Option<Answer> {
    let Value::Object(mut request) = request else {
        invalid_warning(ctx, &Value::Null, "a request must be a JSON object");
        let err = RpcError::invalid_request("a request must be a JSON object");
        return Some(Answer::Value(Value::Null, Err(err)));
    };
    // An id that cannot be echoed (not a string, number or null) is answered with null.
    let id = request.remove("id");
    let id_valid = matches!(
        id,
        None | Some(Value::String(_) | Value::Number(_) | Value::Null)
    );
    let reply_id = match &id {
        Some(id) if id_valid => id.clone(),
        _ => Value::Null,
    };
    let mut invalid = |detail: &str| {
        invalid_warning(ctx, &reply_id, detail);
        Some(Answer::Value(
            reply_id.clone(),
            Err(RpcError::invalid_request(detail)),
        ))
    };
    if !id_valid {
        return invalid("`id` must be a string, a number or null");
    }
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    let method = match request.remove("method") {
        Some(Value::String(method)) => method,
        Some(_) => return invalid("`method` must be a string"),
        None => return invalid("`method` is missing"),
    };
    let params = match request.remove("params") {
        None => Value::Null,
        Some(params @ (Value::Object(_) | Value::Array(_))) => params,
        Some(_) => return invalid("`params` must be an object or an array"),
    };

    let started = Instant::now();
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| service.call_reply(&method, &params)))
        .unwrap_or_else(|_| {
            error!(
                client = ctx.client,
                method = %log_safe(&method),
                "control method panicked"
            );
            Err(RpcError::internal(format!(
                "`{method}` failed unexpectedly"
            )))
        });
    let elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    log_request(ctx, &method, id.as_ref(), &outcome, elapsed_us);
    let id = id?;
    Some(match outcome {
        Ok(Reply::Value(result)) => Answer::Value(id, Ok(result)),
        Ok(Reply::Stream(stream)) => Answer::Stream(id, stream),
        Err(e) => Answer::Value(id, Err(e)),
    })
}

/// Logs a request that ran: changes at info (failures rate-limited), reads at debug,
/// failed reads and unknown methods as rate-limited warnings.
fn log_request(
    ctx: &mut Ctx<'_>,
    method: &str,
    id: Option<&Value>,
    outcome: &Result<Reply, RpcError>,
    elapsed_us: u64,
) {
    let change = api::method::is_change(method);
    let id = id.map_or_else(
        || "(notification)".to_string(),
        |id| log_safe(&id.to_string()),
    );
    let method = log_safe(method);
    match outcome {
        Ok(_) if change => info!(
            client = ctx.client,
            uid = ctx.peer.uid,
            pid = ctx.peer.pid,
            id = %id,
            method = %method,
            elapsed_us,
            "control change request: ok"
        ),
        Ok(_) => debug!(
            client = ctx.client,
            uid = ctx.peer.uid,
            pid = ctx.peer.pid,
            id = %id,
            method = %method,
            elapsed_us,
            "control request: ok"
        ),
        Err(e) => {
            let kind = if change {
                "change request failed"
            } else {
                "request failed"
            };
            if ctx.limiter.allow(kind, Instant::now()) {
                let message = log_safe(&e.message);
                if change {
                    info!(
                        client = ctx.client,
                        uid = ctx.peer.uid,
                        pid = ctx.peer.pid,
                        id = %id,
                        method = %method,
                        code = e.code,
                        "control change request: failed: {message}"
                    );
                } else {
                    warn!(
                        client = ctx.client,
                        uid = ctx.peer.uid,
                        pid = ctx.peer.pid,
                        id = %id,
                        method = %method,
                        code = e.code,
                        "control request failed: {message}"
                    );
                }
            }
        }
    }
}

/// Client-supplied text made safe for one log line: control characters (newline,
/// carriage return, tab, NUL, ESC, DEL, the C1 range), bidirectional-text overrides
/// and backslashes are escaped (`\n`, `\u{1b}`, `\\`), and it is cut after
/// `LOG_TEXT_MAX` characters with a count of what was left out.
pub fn log_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(LOG_TEXT_MAX) + 8);
    for (n, (i, c)) in text.char_indices().enumerate() {
        if n == LOG_TEXT_MAX {
            out.push_str(&format!("…(+{} bytes)", text.len() - i));
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if c.is_control()
                || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                out.push_str(&format!("\\u{{{:x}}}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// Rate limit of warnings: at most `LOG_BURST` of one kind per `LOG_WINDOW`; the rest
/// are counted and reported in one line when the window ends.
#[derive(Debug, Default)]
struct LogLimiter {
    windows: Vec<(&'static str, Window)>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    logged: u32,
    suppressed: u64,
}

impl LogLimiter {
    /// Whether a warning of `kind` may be logged now (if not, it is counted).
    fn allow(&mut self, kind: &'static str, now: Instant) -> bool {
        let i = match self.windows.iter().position(|(k, _)| *k == kind) {
            Some(i) => i,
            None => {
                self.windows.push((
                    kind,
                    Window {
                        start: now,
                        logged: 0,
                        suppressed: 0,
                    },
                ));
                self.windows.len() - 1
            }
        };
        let w = &mut self.windows[i].1;
        if now.saturating_duration_since(w.start) >= LOG_WINDOW {
            report_suppressed(kind, w.suppressed);
            *w = Window {
                start: now,
                logged: 0,
                suppressed: 0,
            };
        }
        if w.logged < LOG_BURST {
            w.logged += 1;
            true
        } else {
            w.suppressed += 1;
            false
        }
    }

    /// Reports and forgets the windows that have ended; returns what they suppressed.
    fn sweep(&mut self, now: Instant) -> Vec<(&'static str, u64)> {
        let mut reported = Vec::new();
        self.windows.retain(|(kind, w)| {
            if now.saturating_duration_since(w.start) < LOG_WINDOW {
                return true;
            }
            report_suppressed(kind, w.suppressed);
            if w.suppressed > 0 {
                reported.push((*kind, w.suppressed));
            }
            false
        });
        reported
    }
}

fn report_suppressed(kind: &str, suppressed: u64) {
    if suppressed > 0 {
        warn!(
            kind,
            suppressed,
            "control socket: {suppressed} more \"{kind}\" warnings suppressed in the last {} s",
            LOG_WINDOW.as_secs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::AtomicUsize;

    fn frames(input: &mut Input, data: &[u8]) -> Vec<String> {
        let mut reader = data;
        while !reader.is_empty() {
            input.read_from(&mut reader).expect("read");
        }
        let mut out = Vec::new();
        while let Some(frame) = input.next_frame() {
            out.push(match frame {
                Frame::Line(range) => String::from_utf8_lossy(&input.buf[range]).into_owned(),
                Frame::TooLong => "<too long>".to_string(),
            })
        }
        out
    }

    #[test]
    fn lines_are_split_across_reads() {
        let mut input = Input::new(100);
        assert_eq!(frames(&mut input, b"ab"), Vec::<String>::new());
        assert!(input.has_partial());
        assert_eq!(frames(&mut input, b"c\nde\n\nf"), ["abc", "de", ""]);
        assert_eq!(frames(&mut input, b"\n"), ["f"]);
        assert!(!input.has_partial());
    }

    #[test]
    fn over_long_line_is_reported_once_and_skipped() {
        let mut input = Input::new(4);
        assert_eq!(frames(&mut input, b"abcd\n"), ["abcd"]);
        assert_eq!(frames(&mut input, b"abc"), Vec::<String>::new());
        assert_eq!(frames(&mut input, b"de"), ["<too long>"]);
        assert_eq!(input.buf.len(), input.start, "nothing of it is kept");
        assert_eq!(frames(&mut input, b"fghijkl"), Vec::<String>::new());
        assert_eq!(frames(&mut input, b"mn\nok\n"), ["ok"]);
        assert_eq!(frames(&mut input, b"abcde\nxy\n"), ["<too long>", "xy"]);
    }

    #[test]
    fn reads_say_whether_a_line_is_left_open() {
        let mut input = Input::new(100);
        assert_eq!(input.read_from(&mut &b"ab"[..]).unwrap(), (2, None));
        assert_eq!(input.read_from(&mut &b"c\nd"[..]).unwrap(), (3, Some(true)));
        assert_eq!(input.read_from(&mut &b"\n"[..]).unwrap(), (1, Some(false)));
        assert_eq!(input.read_from(&mut &b""[..]).unwrap(), (0, None));
    }

    #[test]
    fn too_long_error_names_the_limit_and_the_key() {
        let text = too_long_message(1_048_576);
        assert!(
            text.starts_with("request exceeds 1048576 bytes; "),
            "{text}"
        );
        assert!(text.contains("[control] max_request_bytes"), "{text}");
    }

    /// A streamed result of `n` pieces of about `size` bytes: `["xx…", …]`.
    struct Blob {
        n: usize,
        size: usize,
        next: usize,
    }

    impl ReplyStream for Blob {
        fn write_next(&mut self, out: &mut Vec<u8>, chunk: usize) -> Result<bool, RpcError> {
            let start = out.len();
            if self.next == 0 {
                out.push(b'[');
            }
            while self.next < self.n && out.len() - start < chunk {
                if self.next > 0 {
                    out.push(b',');
                }
                out.push(b'"');
                out.extend(std::iter::repeat_n(b'x', self.size));
                out.push(b'"');
                self.next += 1;
            }
            if self.next == self.n {
                out.push(b']');
                return Ok(true);
            }
            Ok(false)
        }
    }

    #[derive(Default)]
    struct TestService {
        calls: Arc<AtomicUsize>,
        ticks: Arc<AtomicUsize>,
    }

    impl Service for TestService {
        fn call(&mut self, method: &str, params: &Value) -> Result<Value, RpcError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            match method {
                "echo" => Ok(params.clone()),
                "sleep" => {
                    std::thread::sleep(Duration::from_millis(params["ms"].as_u64().unwrap_or(1)));
                    Ok(Value::Null)
                }
                "boom" => panic!("boom"),
                _ => Err(RpcError::method_not_found(method)),
            }
        }

        fn call_reply(&mut self, method: &str, params: &Value) -> Result<Reply, RpcError> {
            match method {
                // 200 KB: 100 strings of 2000 bytes.
                "big" => {
                    self.calls.fetch_add(1, Ordering::SeqCst);
                    Ok(Reply::Stream(Box::new(Blob {
                        n: 100,
                        size: 2000,
                        next: 0,
                    })))
                }
                _ => self.call(method, params).map(Reply::Value),
            }
        }

        fn tick(&mut self) {
            self.ticks.fetch_add(1, Ordering::SeqCst);
        }
    }

    const ROOT: Peer = Peer {
        uid: 0,
        gid: 0,
        pid: 1,
    };

    /// What a connection's requests are handled with; batches of at most 64.
    fn ctx(limiter: &mut LogLimiter) -> Ctx<'_> {
        Ctx {
            client: 9,
            peer: ROOT,
            limiter,
            max_batch: 64,
        }
    }

    /// Answers one line as a connection would, the work run to its end.
    fn answer(line: &str) -> Option<Value> {
        let mut limiter = LogLimiter::default();
        let mut ctx = ctx(&mut limiter);
        ctx.max_batch = 4;
        let mut service = TestService::default();
        let mut out = Vec::new();
        let mut work = start_line(line.as_bytes(), &mut ctx, &mut service, &mut out);
        while let Some(w) = work.as_mut() {
            if let Some(stream) = w.stream.as_mut() {
                if stream.write_next(&mut out, STREAM_CHUNK).unwrap() {
                    w.stream = None;
                    out.push(b'}');
                    if w.batch.is_none() {
                        out.push(b'\n');
                        work = None;
                    }
                }
                continue;
            }
            let batch = w.batch.as_mut().unwrap();
            match batch.items.next() {
                Some(item) => {
                    if let Some(a) = handle_request(item, &mut ctx, &mut service) {
                        out.push(if batch.opened { b',' } else { b'[' });
                        batch.opened = true;
                        w.stream = write_answer(&mut out, a);
                    }
                }
                None => {
                    if batch.opened {
                        out.extend_from_slice(b"]\n");
                    }
                    work = None;
                }
            }
        }
        if out.is_empty() {
            return None;
        }
        assert_eq!(out.last(), Some(&b'\n'), "a reply ends its line");
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
        Some(serde_json::from_slice(&out).expect("reply is JSON"))
    }

    #[test]
    fn requests_are_validated() {
        let r = answer(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":[1]}"#).unwrap();
        assert_eq!(r, json!({"jsonrpc":"2.0","id":7,"result":[1]}));
        let r = answer(r#"{"jsonrpc":"1.0","id":"a","method":"echo"}"#).unwrap();
        assert_eq!(r["id"], "a");
        assert_eq!(r["error"]["code"], -32600);
        let r = answer(r#"{"jsonrpc":"2.0","id":{},"method":"echo"}"#).unwrap();
        assert_eq!(r["id"], Value::Null);
        assert_eq!(r["error"]["code"], -32600);
        let r = answer(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":3}"#).unwrap();
        assert_eq!(r["error"]["code"], -32600);
        assert_eq!(answer(r#"{"jsonrpc":"2.0","method":"echo"}"#), None);
        assert_eq!(answer("  \t\r"), None);
        let r = answer("{").unwrap();
        assert_eq!(r["error"]["code"], -32700);
    }

    #[test]
    fn panicking_method_is_an_internal_error() {
        let r = answer(r#"{"jsonrpc":"2.0","id":1,"method":"boom"}"#).unwrap();
        assert_eq!(r["error"]["code"], -32603);
        assert_eq!(r["id"], 1);
    }

    #[test]
    fn streamed_results_and_batches_are_well_formed() {
        let r = answer(r#"{"jsonrpc":"2.0","id":"s","method":"big"}"#).unwrap();
        assert_eq!(r["id"], "s");
        assert_eq!(r["result"].as_array().unwrap().len(), 100);
        let r = answer(
            r#"[{"jsonrpc":"2.0","id":1,"method":"big"},{"jsonrpc":"2.0","method":"echo"},
               {"jsonrpc":"2.0","id":2,"method":"echo","params":[2]},7]"#,
        )
        .unwrap();
        let r = r.as_array().unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0]["result"].as_array().unwrap().len(), 100);
        assert_eq!(r[1], json!({"jsonrpc":"2.0","id":2,"result":[2]}));
        assert_eq!(r[2]["error"]["code"], -32600);
        // Notifications only: nothing at all.
        assert_eq!(answer(r#"[{"jsonrpc":"2.0","method":"big"}]"#), None);
    }

    #[test]
    fn a_batch_over_the_limit_is_refused_naming_the_key() {
        let item = r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#;
        let r = answer(&format!("[{}]", [item; 5].join(","))).unwrap();
        assert_eq!(r["error"]["code"], -32600);
        assert_eq!(r["id"], Value::Null);
        let message = r["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("limit of 4") && message.contains("[control] max_batch"),
            "{message}"
        );
        let r = answer(&format!("[{}]", [item; 4].join(","))).unwrap();
        assert_eq!(r.as_array().unwrap().len(), 4);
    }

    fn pair(max_request_bytes: usize) -> (Conn, UnixStream) {
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        (
            Conn::new(ours, ROOT, max_request_bytes, Instant::now()),
            theirs,
        )
    }

    /// Turns until the connection waits for its client.
    fn turns(conn: &mut Conn, service: &mut TestService, limiter: &mut LogLimiter) -> TurnEnd {
        loop {
            let mut ctx = ctx(limiter);
            let end = conn
                .turn(&mut ctx, service, Instant::now() + TURN_BUDGET)
                .expect("turn");
            if end != TurnEnd::Ready {
                return end;
            }
        }
    }

    fn read_available(stream: &mut UnixStream, into: &mut Vec<u8>) {
        let mut buf = [0u8; 65536];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => into.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// Finding 2: a batch of large results for a client that does not read runs only
    /// as far as the output limit allows, and is written item by item.
    #[test]
    fn a_batch_for_a_client_that_does_not_read_stops_at_the_output_limit() {
        let (mut conn, mut client) = pair(1 << 20);
        let mut service = TestService::default();
        let mut limiter = LogLimiter::default();
        let items: Vec<String> = (0..50)
            .map(|id| json!({"jsonrpc":"2.0","id":id,"method":"big"}).to_string())
            .collect();
        // And a pipelined request behind it.
        let line = format!(
            "[{}]\n{}\n",
            items.join(","),
            json!({"jsonrpc":"2.0","id":"after","method":"echo","params":[1]})
        );
        client.write_all(line.as_bytes()).expect("write");
        assert_eq!(turns(&mut conn, &mut service, &mut limiter), TurnEnd::Wait);
        let ran = service.calls.load(Ordering::SeqCst);
        // 50 results of 200 KB would be 10 MB: only what fits under the limit (plus
        // what the socket took) ran.
        assert!((1..20).contains(&ran), "{ran} of 50 ran");
        assert!(
            conn.pending_out() < WRITE_HIGH_WATER + 2 * STREAM_CHUNK,
            "{} bytes pending",
            conn.pending_out()
        );
        assert!(conn.work.is_some());

        // Reading lets it go on; the whole batch then the pipelined request arrive.
        let mut received = Vec::new();
        for _ in 0..10_000 {
            read_available(&mut client, &mut received);
            if received.iter().filter(|&&b| b == b'\n').count() == 2 {
                break;
            }
            let mut ctx = ctx(&mut limiter);
            conn.turn(&mut ctx, &mut service, Instant::now() + TURN_BUDGET)
                .expect("turn");
        }
        let mut lines = received.split(|&b| b == b'\n');
        let batch: Value = serde_json::from_slice(lines.next().unwrap()).expect("batch JSON");
        let batch = batch.as_array().expect("array");
        assert_eq!(batch.len(), 50);
        for (i, r) in batch.iter().enumerate() {
            assert_eq!(r["id"], i);
            assert_eq!(r["result"].as_array().map(Vec::len), Some(100));
        }
        let after: Value = serde_json::from_slice(lines.next().unwrap()).expect("JSON");
        assert_eq!(after["id"], "after");
        assert_eq!(service.calls.load(Ordering::SeqCst), 51);
    }

    /// Finding 2: pipelined requests are read and run a turn at a time, not all at
    /// once, and each turn ends within its budget.
    #[test]
    fn pipelined_requests_run_a_turn_at_a_time() {
        let (mut conn, mut client) = pair(1 << 20);
        let mut service = TestService::default();
        let mut limiter = LogLimiter::default();
        let mut lines = String::new();
        for id in 0..200 {
            lines.push_str(
                &json!({"jsonrpc":"2.0","id":id,"method":"sleep","params":{"ms":1}}).to_string(),
            );
            lines.push('\n');
        }
        client.write_all(lines.as_bytes()).expect("write");
        let mut ctx = ctx(&mut limiter);
        let end = conn
            .turn(&mut ctx, &mut service, Instant::now() + TURN_BUDGET)
            .expect("turn");
        assert_eq!(end, TurnEnd::Ready);
        let ran = service.calls.load(Ordering::SeqCst);
        assert!((1..200).contains(&ran), "{ran} requests in one turn");
        assert_eq!(turns(&mut conn, &mut service, &mut limiter), TurnEnd::Wait);
        assert_eq!(service.calls.load(Ordering::SeqCst), 200);
        let mut received = Vec::new();
        read_available(&mut client, &mut received);
        let ids: Vec<u64> = received
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                serde_json::from_slice::<Value>(l).unwrap()["id"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(ids, (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn closes_after_answering_when_the_client_stops_sending() {
        let (mut conn, mut client) = pair(1 << 20);
        let mut service = TestService::default();
        let mut limiter = LogLimiter::default();
        client
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\"}\n{\"jsonrpc\"")
            .unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        assert_eq!(turns(&mut conn, &mut service, &mut limiter), TurnEnd::Close);
        let mut received = Vec::new();
        read_available(&mut client, &mut received);
        let r: Value = serde_json::from_slice(received.trim_ascii()).unwrap();
        assert_eq!(r["id"], 1);
    }

    fn cfg() -> ServerConfig {
        ServerConfig {
            allowed_uids: vec![0, 1000],
            allowed_gids: vec![120],
            max_clients: 10,
            max_clients_per_peer: 3,
            root_reserved_clients: 2,
            ..ServerConfig::default()
        }
    }

    fn peer(uid: u32, gid: u32, pid: i32) -> Peer {
        Peer { uid, gid, pid }
    }

    /// Findings 3 and 6: credentials, the per-process limit, the root reserve.
    #[test]
    fn admission_rules() {
        let cfg = cfg();
        assert_eq!(admission(&cfg, &peer(0, 0, 5), 0, 0), Admission::Accept);
        assert_eq!(
            admission(&cfg, &peer(1000, 1000, 5), 0, 0),
            Admission::Accept
        );
        // By group.
        assert_eq!(
            admission(&cfg, &peer(4242, 120, 5), 0, 0),
            Admission::Accept
        );
        match admission(&cfg, &peer(65534, 65534, 5), 0, 0) {
            Admission::Refuse { message, .. } => {
                assert!(message.contains("uid 65534"), "{message}");
                assert!(message.contains("[control] allowed_uids"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // Per process, root included.
        for uid in [0, 1000] {
            match admission(&cfg, &peer(uid, 0, 5), 3, 3) {
                Admission::Refuse { message, .. } => {
                    assert!(message.contains("pid 5"), "{message}");
                    assert!(
                        message.contains("[control] max_clients_per_peer"),
                        "{message}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        // The last two slots are root's.
        assert_eq!(admission(&cfg, &peer(1000, 0, 6), 7, 0), Admission::Accept);
        match admission(&cfg, &peer(1000, 0, 6), 8, 0) {
            Admission::Refuse { message, .. } => {
                assert!(message.contains("root_reserved_clients"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(admission(&cfg, &peer(0, 0, 6), 9, 0), Admission::Accept);
        // Full: root takes the slot of the connection idle the longest.
        assert_eq!(admission(&cfg, &peer(0, 0, 6), 10, 0), Admission::Evict);
    }

    /// Finding 7: client text cannot forge log lines or paint the terminal.
    #[test]
    fn log_text_is_escaped_and_capped() {
        assert_eq!(log_safe("acl.dump"), "acl.dump");
        assert_eq!(
            log_safe("x\n2024-01-01 INFO forged\r\u{1b}[31m\0\u{7f}\\"),
            "x\\n2024-01-01 INFO forged\\r\\u{1b}[31m\\u{0}\\u{7f}\\\\"
        );
        assert_eq!(log_safe("\u{202e}abc\u{85}"), "\\u{202e}abc\\u{85}");
        let long = "é".repeat(500);
        let cut = log_safe(&long);
        assert!(cut.starts_with(&"é".repeat(LOG_TEXT_MAX)), "{cut}");
        assert!(
            cut.ends_with(&format!("…(+{} bytes)", 2 * (500 - LOG_TEXT_MAX))),
            "{cut}"
        );
        assert!(!cut.contains('\n'));
    }

    /// Finding 7: repeated warnings are rate-limited per kind and counted.
    #[test]
    fn warnings_are_rate_limited_per_kind() {
        let mut limiter = LogLimiter::default();
        let t0 = Instant::now();
        let allowed = (0..1000).filter(|_| limiter.allow("a", t0)).count();
        assert_eq!(allowed, LOG_BURST as usize);
        assert!(limiter.allow("b", t0), "kinds are limited separately");
        assert!(limiter.sweep(t0 + Duration::from_secs(1)).is_empty());
        let reported = limiter.sweep(t0 + LOG_WINDOW);
        assert_eq!(reported, vec![("a", 1000 - u64::from(LOG_BURST))]);
        assert!(limiter.allow("a", t0 + LOG_WINDOW), "a new window");
    }

    /// A server on its own thread in a temporary directory.
    struct Running {
        path: PathBuf,
        handle: ShutdownHandle,
        thread: Option<std::thread::JoinHandle<()>>,
        ticks: Arc<AtomicUsize>,
        _dir: tempfile::TempDir,
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.handle.shutdown();
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    fn start(adjust: impl FnOnce(&mut ServerConfig)) -> Running {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sock");
        let mut cfg = ServerConfig {
            socket: path.clone(),
            tick: Duration::from_millis(20),
            ..ServerConfig::default()
        };
        adjust(&mut cfg);
        let mut server = Server::bind(cfg).expect("bind");
        let handle = server.shutdown_handle();
        let service = TestService::default();
        let ticks = Arc::clone(&service.ticks);
        let thread = std::thread::spawn(move || {
            let mut service = service;
            server.run(&mut service).expect("run");
        });
        Running {
            path,
            handle,
            thread: Some(thread),
            ticks,
            _dir: dir,
        }
    }

    fn connect(path: &Path) -> std::io::BufReader<std::os::unix::net::UnixStream> {
        let s = std::os::unix::net::UnixStream::connect(path).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        std::io::BufReader::new(s)
    }

    fn line(c: &mut std::io::BufReader<std::os::unix::net::UnixStream>) -> Option<Value> {
        use std::io::BufRead;
        let mut text = String::new();
        match c.read_line(&mut text) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_str(&text).expect("JSON line")),
            Err(e) => panic!("read: {e}"),
        }
    }

    fn alive(c: &mut std::io::BufReader<std::os::unix::net::UnixStream>, id: u64) {
        let req = format!(
            "{}\n",
            json!({"jsonrpc":"2.0","id":id,"method":"echo","params":[id]})
        );
        c.get_mut().write_all(req.as_bytes()).expect("write");
        assert_eq!(line(c).expect("reply")["result"], json!([id]));
    }

    fn closed_with(
        c: &mut std::io::BufReader<std::os::unix::net::UnixStream>,
        words: &[&str],
    ) -> Value {
        let r = line(c).expect("an error line before the close");
        assert_eq!(r["error"]["code"], CONNECTION_REFUSED, "{r}");
        let message = r["error"]["message"].as_str().unwrap_or_default();
        for w in words {
            assert!(message.contains(w), "{w:?} not in {message}");
        }
        assert!(line(c).is_none(), "then the connection is closed");
        r
    }

    /// Finding 3: idle connections go; an unfinished request line is answered and
    /// closed (slowloris).
    #[test]
    fn idle_and_unfinished_requests_time_out() {
        let server = start(|cfg| {
            cfg.idle_timeout = Duration::from_millis(1000);
            cfg.request_timeout = Duration::from_millis(300);
        });
        let mut idle = connect(&server.path);
        let mut slow = connect(&server.path);
        let mut busy = connect(&server.path);
        slow.get_mut().write_all(b"{\"jsonrpc\":").unwrap();
        let started = Instant::now();
        closed_with(&mut slow, &["[control] request_timeout_s"]);
        // Activity keeps a connection open.
        while started.elapsed() < Duration::from_millis(1600) {
            alive(&mut busy, 1);
            std::thread::sleep(Duration::from_millis(50));
        }
        closed_with(&mut idle, &["[control] idle_timeout_s"]);
        alive(&mut busy, 2);
    }

    /// Finding 3: one process cannot take every slot.
    #[test]
    fn per_process_limit() {
        let server = start(|cfg| {
            cfg.max_clients = 10;
            cfg.max_clients_per_peer = 2;
        });
        let mut a = connect(&server.path);
        alive(&mut a, 1);
        let mut b = connect(&server.path);
        alive(&mut b, 2);
        let mut c = connect(&server.path);
        closed_with(&mut c, &["[control] max_clients_per_peer", "at most 2"]);
        alive(&mut a, 3);
        drop(b);
        // Its slot is free again once the server has seen it go.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut d = connect(&server.path);
            let req = format!("{}\n", json!({"jsonrpc":"2.0","id":4,"method":"echo"}));
            let _ = d.get_mut().write_all(req.as_bytes());
            if line(&mut d).is_some_and(|r| r["id"] == 4) {
                break;
            }
            assert!(Instant::now() < deadline, "slot not freed");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Finding 3: a full table does not lock root out: root takes the slot of the
    /// connection idle the longest, which is told why. Others are refused.
    #[test]
    fn root_takes_the_slot_of_the_longest_idle_connection() {
        let server = start(|cfg| {
            cfg.max_clients = 3;
            cfg.max_clients_per_peer = 10;
            cfg.root_reserved_clients = 1;
        });
        let mut a = connect(&server.path);
        alive(&mut a, 1);
        let mut b = connect(&server.path);
        alive(&mut b, 2);
        std::thread::sleep(Duration::from_millis(20));
        if !rustix::process::geteuid().is_root() {
            let mut c = connect(&server.path);
            closed_with(&mut c, &["[control] root_reserved_clients"]);
            return;
        }
        let mut c = connect(&server.path);
        alive(&mut c, 3);
        alive(&mut b, 4);
        let mut d = connect(&server.path);
        alive(&mut d, 5);
        closed_with(&mut a, &["idle the longest", "[control] max_clients"]);
        alive(&mut b, 6);
        alive(&mut c, 7);
    }

    #[test]
    fn the_tick_runs_while_a_client_floods() {
        let server = start(|_| {});
        let path = server.path.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let flood = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut c = connect(&path);
                let mut batch = String::new();
                for id in 0..64 {
                    batch.push_str(
                        &json!({"jsonrpc":"2.0","id":id,"method":"sleep","params":{"ms":1}})
                            .to_string(),
                    );
                    batch.push('\n');
                }
                let reader = c.get_ref().try_clone().unwrap();
                let drain = std::thread::spawn(move || {
                    let mut r = reader;
                    let mut buf = [0u8; 65536];
                    while matches!(r.read(&mut buf), Ok(n) if n > 0) {}
                });
                while !stop.load(Ordering::SeqCst) {
                    if c.get_mut().write_all(batch.as_bytes()).is_err() {
                        break;
                    }
                }
                let _ = c.get_ref().shutdown(Shutdown::Both);
                let _ = drain.join();
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        let before = server.ticks.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(1));
        let ticks = server.ticks.load(Ordering::SeqCst) - before;
        stop.store(true, Ordering::SeqCst);
        flood.join().unwrap();
        // 50 at 20 ms; a busy 2-core machine may lose some, not most.
        assert!(ticks >= 15, "{ticks} ticks in 1 s at 20 ms under a flood");
    }

    /// Finding 5: one server per socket, whoever comes second.
    #[test]
    fn a_second_server_on_the_socket_is_refused_naming_the_lock_and_pid() {
        let server = start(|_| {});
        let cfg = ServerConfig {
            socket: server.path.clone(),
            ..ServerConfig::default()
        };
        let e = Server::bind(cfg).expect_err("second bind");
        let text = e.to_string();
        let lock = socket_lock_path(&server.path);
        assert!(text.contains("is in use by another process"), "{text}");
        assert!(text.contains(&lock.display().to_string()), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains("--socket"), "{text}");
        let mut c = connect(&server.path);
        alive(&mut c, 1);
    }

    #[test]
    fn socket_gets_the_configured_mode() {
        let server = start(|cfg| cfg.socket_mode = 0o660);
        let meta = fs::metadata(&server.path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    }
}
