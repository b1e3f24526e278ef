//! The control-socket server: a `mio` event loop on a Unix stream socket that frames
//! newline-delimited JSON-RPC 2.0 requests, hands each one to a [`Service`], and writes
//! the responses back with per-connection buffering and backpressure.
//!
//! Wire format and error codes: `docs/control-protocol.md`.

use std::collections::HashMap;
use std::fs::{self, DirBuilder};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Token, Waker};
use serde::Serialize;
use serde_json::Value;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use tracing::{debug, error, info, warn};

use ferrule_api as api;
use ferrule_api::rpc::{RpcError, Service};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const SIGNALS: Token = Token(2);
const FIRST_CLIENT: usize = 3;

/// Bytes read from a client per `read(2)`.
const READ_CHUNK: usize = 64 * 1024;
/// A client whose unsent replies exceed this is not read from until they drain, so a
/// client that writes requests but never reads replies cannot grow our memory.
const WRITE_HIGH_WATER: usize = 1 << 20;
/// Buffers grown past this by one large request or reply are released once empty.
const KEEP_BUFFER_CAPACITY: usize = 64 * 1024;

/// Settings of the control socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Path of the Unix socket.
    pub socket: PathBuf,
    /// Largest request line in bytes (without the newline); longer lines are answered
    /// with `INVALID_REQUEST` and skipped.
    pub max_request_bytes: usize,
    /// Interval at which [`Service::tick`] is called.
    pub tick: Duration,
    /// Most clients connected at once; further connections are closed on accept.
    pub max_clients: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            socket: PathBuf::from(api::DEFAULT_SOCKET),
            max_request_bytes: api::DEFAULT_MAX_REQUEST_BYTES,
            tick: Duration::from_secs(1),
            max_clients: 256,
        }
    }
}

/// Why the control socket could not be set up or served.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Another process accepts connections on the socket path.
    #[error("control socket {} is in use by another process", path.display())]
    InUse { path: PathBuf },
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

impl ServerError {
    fn io(context: impl Into<String>, source: io::Error) -> Self {
        ServerError::Io {
            context: context.into(),
            source,
        }
    }
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
    next_token: usize,
    /// `accept` failed (for example `EMFILE`); retried at each tick because the
    /// edge-triggered listener will not report the waiting connections again.
    accept_retry: bool,
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
    /// Creates the socket's parent directory (0755) if missing, replaces a stale socket
    /// left by a dead daemon, binds, and restricts the socket to its owner (0600).
    ///
    /// Fails if another process accepts connections on the path, or if the path exists
    /// and is not a socket (such a file is never removed).
    pub fn bind(cfg: ServerConfig) -> Result<Server, ServerError> {
        if cfg.tick.is_zero() {
            return Err(ServerError::Config(
                "tick interval must be greater than zero".into(),
            ));
        }
        if cfg.max_request_bytes == 0 {
            return Err(ServerError::Config(
                "max_request_bytes must be greater than zero".into(),
            ));
        }
        let path = cfg.socket.clone();
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
        remove_stale_socket(&path)?;

        let mut listener = bind_private(&path)?;
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
        info!(socket = %path.display(), "control socket listening");
        Ok(Server {
            cfg,
            poll,
            listener,
            socket_id,
            waker: Arc::new(waker),
            shutdown_requested: Arc::new(AtomicBool::new(false)),
            signals: None,
            conns: HashMap::new(),
            next_token: FIRST_CLIENT,
            accept_retry: false,
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
    /// instead of killing the process. Calling it again has no further effect.
    pub fn catch_signals(&mut self) -> Result<(), ServerError> {
        if self.signals.is_some() {
            return Ok(());
        }
        let mut signals = Signals::new([SIGINT, SIGTERM])
            .map_err(|e| ServerError::io("cannot install SIGINT/SIGTERM handlers", e))?;
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
            let timeout = next_tick.saturating_duration_since(Instant::now());
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
                        if let Some(signal) = self.signals.as_mut().and_then(|s| s.pending().next())
                        {
                            info!(signal, "control socket: caught signal");
                            return Ok(StopReason::Signal(signal));
                        }
                    }
                    token => self.drive_client(token, service),
                }
            }
        }
    }

    fn tick<S: Service>(&mut self, service: &mut S) {
        if self.accept_retry {
            self.accept_clients();
        }
        if panic::catch_unwind(AssertUnwindSafe(|| service.tick())).is_err() {
            error!("control service tick panicked");
        }
    }

    fn accept_clients(&mut self) {
        self.accept_retry = false;
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    if self.conns.len() >= self.cfg.max_clients {
                        warn!(
                            max_clients = self.cfg.max_clients,
                            "control socket: too many clients, closing new connection"
                        );
                        continue;
                    }
                    let token = Token(self.next_token);
                    self.next_token += 1;
                    if let Err(e) =
                        self.poll
                            .registry()
                            .register(&mut stream, token, Interest::READABLE)
                    {
                        warn!("control socket: cannot register client: {e}");
                        continue;
                    }
                    debug!(client = token.0, "control client connected");
                    self.conns
                        .insert(token, Conn::new(stream, self.cfg.max_request_bytes));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    warn!("control socket: accept failed: {e}");
                    self.accept_retry = true;
                    return;
                }
            }
        }
    }

    /// Reads, answers and writes as far as the client's socket allows.
    fn drive_client<S: Service>(&mut self, token: Token, service: &mut S) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let outcome = conn.drive(token, service);
        let keep = match outcome {
            Ok(keep) => keep,
            Err(e) => {
                match e.kind() {
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                        debug!(client = token.0, "control client went away: {e}")
                    }
                    _ => warn!(client = token.0, "control client I/O error: {e}"),
                }
                false
            }
        };
        if !keep {
            self.close_client(token);
            return;
        }
        let wanted = conn.wanted_interest();
        if wanted != conn.interest {
            match self
                .poll
                .registry()
                .reregister(&mut conn.stream, token, wanted)
            {
                Ok(()) => conn.interest = wanted,
                Err(e) => {
                    warn!(
                        client = token.0,
                        "control socket: cannot update client interest: {e}"
                    );
                    self.close_client(token);
                }
            }
        }
    }

    fn close_client(&mut self, token: Token) {
        if let Some(mut conn) = self.conns.remove(&token) {
            let _ = self.poll.registry().deregister(&mut conn.stream);
            debug!(client = token.0, "control client disconnected");
        }
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
    }
}

/// Binds the socket so that it is never reachable with looser permissions than 0600:
/// it is bound inside a fresh 0700 staging directory next to `path`, restricted to 0600
/// there, then renamed into place (atomic, same directory tree). When the staging path
/// would be too long for a socket address, it binds in place and restricts right after.
fn bind_private(path: &Path) -> Result<UnixListener, ServerError> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let staging = parent.join(format!(".fr{}", std::process::id()));
    let staged = staging.join("s");
    let restrict = |p: &Path| fs::set_permissions(p, fs::Permissions::from_mode(0o600));
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
    let listener = UnixListener::bind(path).map_err(|e| {
        ServerError::io(format!("cannot bind control socket {}", path.display()), e)
    })?;
    restrict(path).map_err(|e| {
        let _ = fs::remove_file(path);
        ServerError::io(
            format!("cannot restrict control socket {}", path.display()),
            e,
        )
    })?;
    Ok(listener)
}

/// Makes `path` free for binding: nothing there, or a socket nobody listens on (removed).
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
            path: path.to_path_buf(),
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

/// One connected client.
struct Conn {
    stream: UnixStream,
    lines: LineReader,
    /// Encoded replies not yet written; `out[out_pos..]` is pending.
    out: Vec<u8>,
    out_pos: usize,
    /// The client closed its sending side; close once the replies are written.
    read_closed: bool,
    interest: Interest,
}

impl Conn {
    fn new(stream: UnixStream, max_request_bytes: usize) -> Self {
        Conn {
            stream,
            lines: LineReader::new(max_request_bytes),
            out: Vec::new(),
            out_pos: 0,
            read_closed: false,
            interest: Interest::READABLE,
        }
    }

    fn pending_out(&self) -> usize {
        self.out.len() - self.out_pos
    }

    fn wanted_interest(&self) -> Interest {
        if self.pending_out() > 0 {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        }
    }

    /// Flushes, reads and answers complete requests, flushes again. Returns whether the
    /// connection stays open.
    fn drive<S: Service>(&mut self, token: Token, service: &mut S) -> io::Result<bool> {
        self.flush()?;
        let mut chunk = [0u8; READ_CHUNK];
        while !self.read_closed && self.pending_out() < WRITE_HIGH_WATER {
            let n = match self.stream.read(&mut chunk) {
                Ok(0) => {
                    if self.lines.has_partial() {
                        debug!(client = token.0, "control client closed mid-request");
                    }
                    self.read_closed = true;
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let out = &mut self.out;
            let max = self.lines.max;
            self.lines.feed(&chunk[..n], |frame| {
                let reply = match frame {
                    Frame::Line(line) => handle_line(line, token, service),
                    Frame::TooLong => {
                        warn!(client = token.0, max, "control request over the size limit");
                        let err = RpcError::new(
                            ferrule_api::rpc::INVALID_REQUEST,
                            format!("request exceeds {max} bytes"),
                        );
                        Some(encode(&Response::error(Value::Null, err)))
                    }
                };
                if let Some(reply) = reply {
                    out.extend_from_slice(&reply);
                    out.push(b'\n');
                }
            });
            self.flush()?;
        }
        self.flush()?;
        Ok(!(self.read_closed && self.pending_out() == 0))
    }

    /// Writes pending replies until done or the socket is full.
    fn flush(&mut self) -> io::Result<()> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
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

/// A piece of input cut at newlines.
#[derive(Debug, PartialEq, Eq)]
enum Frame<'a> {
    /// A complete line, without its newline.
    Line(&'a [u8]),
    /// A line longer than the limit; its bytes up to the next newline are discarded.
    TooLong,
}

/// Splits a byte stream into lines of at most `max` bytes, never buffering more.
#[derive(Debug)]
struct LineReader {
    buf: Vec<u8>,
    max: usize,
    /// Skipping the rest of an over-long line.
    discarding: bool,
}

impl LineReader {
    fn new(max: usize) -> Self {
        LineReader {
            buf: Vec::new(),
            max,
            discarding: false,
        }
    }

    fn has_partial(&self) -> bool {
        !self.buf.is_empty() || self.discarding
    }

    fn feed(&mut self, mut data: &[u8], mut on_frame: impl FnMut(Frame<'_>)) {
        while !data.is_empty() {
            let (segment, complete) = match data.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let segment = &data[..i];
                    data = &data[i + 1..];
                    (segment, true)
                }
                None => {
                    let segment = data;
                    data = &[];
                    (segment, false)
                }
            };
            if self.discarding {
                self.discarding = !complete;
                continue;
            }
            if self.buf.len() + segment.len() > self.max {
                self.release();
                self.discarding = !complete;
                on_frame(Frame::TooLong);
                continue;
            }
            if !complete {
                self.buf.extend_from_slice(segment);
            } else if self.buf.is_empty() {
                on_frame(Frame::Line(segment));
            } else {
                self.buf.extend_from_slice(segment);
                on_frame(Frame::Line(&self.buf));
                self.release();
            }
        }
    }

    fn release(&mut self) {
        self.buf.clear();
        if self.buf.capacity() > KEEP_BUFFER_CAPACITY {
            self.buf = Vec::new();
        }
    }
}

/// A JSON-RPC 2.0 response object, members in the conventional order.
#[derive(Debug, Serialize)]
struct Response {
    jsonrpc: &'static str,
    id: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<RpcError>,
}

impl Response {
    fn result(id: Value, result: Value) -> Self {
        Response {
            jsonrpc: "2.0",
            id,
            result: Some(result),
            error: None,
        }
    }

    fn error(id: Value, error: RpcError) -> Self {
        Response {
            jsonrpc: "2.0",
            id,
            result: None,
            error: Some(error),
        }
    }
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|e| {
        // Only a non-string map key or a failing Serialize impl can get here.
        error!("cannot encode control reply: {e}");
        let fallback = Response::error(Value::Null, RpcError::internal("cannot encode reply"));
        serde_json::to_vec(&fallback).unwrap_or_default()
    })
}

/// Answers one line: a request or a batch. `None` when nothing is to be sent (an empty
/// line, a notification, or a batch of notifications).
fn handle_line<S: Service>(line: &[u8], client: Token, service: &mut S) -> Option<Vec<u8>> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    let request: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            warn!(client = client.0, "control request is not valid JSON: {e}");
            return Some(encode(&Response::error(
                Value::Null,
                RpcError::parse_error(e),
            )));
        }
    };
    match request {
        Value::Array(items) if items.is_empty() => {
            warn!(client = client.0, "empty control request batch");
            let err = RpcError::invalid_request("empty batch");
            Some(encode(&Response::error(Value::Null, err)))
        }
        Value::Array(items) => {
            debug!(
                client = client.0,
                requests = items.len(),
                "control request batch"
            );
            let replies: Vec<Response> = items
                .into_iter()
                .filter_map(|item| handle_request(item, client, service))
                .collect();
            (!replies.is_empty()).then(|| encode(&replies))
        }
        request => handle_request(request, client, service).map(|reply| encode(&reply)),
    }
}

/// Checks one request object, calls the service, and builds the response (`None` for a
/// notification).
fn handle_request<S: Service>(request: Value, client: Token, service: &mut S) -> Option<Response> {
    let Value::Object(mut request) = request else {
        warn!(client = client.0, "control request is not an object");
        let err = RpcError::invalid_request("a request must be a JSON object");
        return Some(Response::error(Value::Null, err));
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
    let invalid = |detail: &str| {
        warn!(client = client.0, id = %reply_id, "invalid control request: {detail}");
        Some(Response::error(
            reply_id.clone(),
            RpcError::invalid_request(detail),
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
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| service.call(&method, &params)))
        .unwrap_or_else(|_| {
            error!(client = client.0, method = %method, "control method panicked");
            Err(RpcError::internal(format!(
                "`{method}` failed unexpectedly"
            )))
        });
    let elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    let Some(id) = id else {
        match &outcome {
            Ok(_) => debug!(client = client.0, method = %method, elapsed_us, "notification"),
            Err(e) => warn!(client = client.0, method = %method, "notification failed: {e}"),
        }
        return None;
    };
    Some(match outcome {
        Ok(result) => {
            debug!(client = client.0, id = %id, method = %method, elapsed_us, "request");
            Response::result(id, result)
        }
        Err(e) => {
            warn!(client = client.0, id = %id, method = %method, "request failed: {e}");
            Response::error(id, e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(reader: &mut LineReader, data: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        reader.feed(data, |frame| {
            out.push(match frame {
                Frame::Line(line) => String::from_utf8_lossy(line).into_owned(),
                Frame::TooLong => "<too long>".to_string(),
            })
        });
        out
    }

    #[test]
    fn lines_are_split_across_reads() {
        let mut reader = LineReader::new(100);
        assert_eq!(frames(&mut reader, b"ab"), Vec::<String>::new());
        assert!(reader.has_partial());
        assert_eq!(frames(&mut reader, b"c\nde\n\nf"), ["abc", "de", ""]);
        assert_eq!(frames(&mut reader, b"\n"), ["f"]);
        assert!(!reader.has_partial());
    }

    #[test]
    fn over_long_line_is_reported_once_and_skipped() {
        let mut reader = LineReader::new(4);
        assert_eq!(frames(&mut reader, b"abcd\n"), ["abcd"]);
        assert_eq!(frames(&mut reader, b"abc"), Vec::<String>::new());
        assert_eq!(frames(&mut reader, b"de"), ["<too long>"]);
        assert!(reader.buf.is_empty());
        assert_eq!(frames(&mut reader, b"fghijkl"), Vec::<String>::new());
        assert_eq!(frames(&mut reader, b"mn\nok\n"), ["ok"]);
        assert_eq!(frames(&mut reader, b"abcde\nxy\n"), ["<too long>", "xy"]);
    }

    struct Echo;

    impl Service for Echo {
        fn call(&mut self, method: &str, params: &Value) -> Result<Value, RpcError> {
            match method {
                "echo" => Ok(params.clone()),
                "boom" => panic!("boom"),
                _ => Err(RpcError::method_not_found(method)),
            }
        }
    }

    fn answer(line: &str) -> Option<Value> {
        handle_line(line.as_bytes(), Token(9), &mut Echo)
            .map(|bytes| serde_json::from_slice(&bytes).expect("reply is JSON"))
    }

    #[test]
    fn requests_are_validated() {
        let r = answer(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":[1]}"#).unwrap();
        assert_eq!(r, serde_json::json!({"jsonrpc":"2.0","id":7,"result":[1]}));
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
}
