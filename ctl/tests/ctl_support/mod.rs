//! Shared by the `ctl_*` tests: a fake ferruled (the real control-socket server with a
//! service that records every call and answers with canned replies) and a runner of
//! the real `ferrulectl` binary against it.

#![allow(dead_code)] // each test file uses its own part of this module

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};

use ferrule_api::rpc::{RpcError, Service};
use ferrule_daemon::server::{Server, ServerConfig, ServerError, ShutdownHandle, StopReason};
use serde_json::Value;
use tempfile::TempDir;

/// One request the fake daemon received: method and params (`Value::Null` when the
/// request had none).
pub type Call = (String, Value);

type Calls = Arc<Mutex<Vec<Call>>>;

/// Answers each method with its canned reply, and records what it was asked.
struct FakeService {
    replies: HashMap<String, Result<Value, RpcError>>,
    calls: Calls,
}

impl Service for FakeService {
    fn call(&mut self, method: &str, params: &Value) -> Result<Value, RpcError> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((method.to_string(), params.clone()));
        self.replies
            .get(method)
            .cloned()
            .unwrap_or_else(|| Err(RpcError::method_not_found(method)))
    }
}

/// A fake ferruled on a temporary socket, serving on its own thread until dropped.
pub struct FakeDaemon {
    socket: PathBuf,
    handle: ShutdownHandle,
    thread: Option<JoinHandle<Result<StopReason, ServerError>>>,
    calls: Calls,
    dir: TempDir,
}

impl FakeDaemon {
    /// Starts a daemon answering `method` with `reply` for each pair; other methods
    /// get "method not found".
    pub fn start<'a>(
        replies: impl IntoIterator<Item = (&'a str, Result<Value, RpcError>)>,
    ) -> FakeDaemon {
        let dir = tempfile::Builder::new()
            .prefix("ferrule-ctl-test")
            .tempdir()
            .expect("temp dir");
        let socket = dir.path().join("ferrule.sock");
        let mut server = Server::bind(ServerConfig {
            socket: socket.clone(),
            ..ServerConfig::default()
        })
        .expect("bind");
        let handle = server.shutdown_handle();
        let calls = Calls::default();
        let mut service = FakeService {
            replies: replies
                .into_iter()
                .map(|(method, reply)| (method.to_string(), reply))
                .collect(),
            calls: Arc::clone(&calls),
        };
        let thread = thread::spawn(move || server.run(&mut service));
        FakeDaemon {
            socket,
            handle,
            thread: Some(thread),
            calls,
            dir,
        }
    }

    /// A directory that lives as long as the daemon, for output files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `ferrulectl --socket SOCKET ARGS...`.
    pub fn ctl(&self, args: &[&str]) -> Run {
        let socket = self.socket.to_str().expect("utf-8 socket path");
        let mut all = vec!["--socket", socket];
        all.extend_from_slice(args);
        ferrulectl(&all)
    }

    /// The requests received so far, in order; clears the record.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.handle.shutdown();
            let _ = thread.join();
        }
    }
}

/// What a `ferrulectl` run printed, and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Checks the run succeeded and printed nothing on stderr; returns stdout.
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, Some(0), "ferrulectl failed: {self:?}");
        assert_eq!(self.stderr, "", "ferrulectl wrote to stderr: {self:?}");
        &self.stdout
    }

    /// Checks the run was a usage error (exit status 2) that printed only on stderr.
    pub fn usage_error(&self) -> &str {
        assert_eq!(self.code, Some(2), "expected a usage error: {self:?}");
        assert_eq!(self.stdout, "", "{self:?}");
        assert!(self.stderr.starts_with("error: "), "{self:?}");
        &self.stderr
    }

    /// Checks the run failed with exit status 1 and printed only on stderr.
    pub fn failed(&self) -> &str {
        assert_eq!(self.code, Some(1), "expected a failure: {self:?}");
        assert_eq!(self.stdout, "", "{self:?}");
        assert!(self.stderr.starts_with("ferrulectl: "), "{self:?}");
        &self.stderr
    }

    /// stdout as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.ok())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
}

/// Runs the `ferrulectl` binary with `args` (and without FERRULE_SOCKET).
pub fn ferrulectl(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrulectl"))
        .args(args)
        .env_remove("FERRULE_SOCKET")
        .output()
        .expect("run ferrulectl");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `{}`: the result of route.add, route.del, neigh.add, neigh.del and trace.start.
pub fn empty() -> Result<Value, RpcError> {
    Ok(serde_json::json!({}))
}
