//! A blocking control-socket client: connects to `ferruled`, checks who runs the server
//! it reached (SO_PEERCRED), sends one JSON-RPC 2.0 request per line and reads the
//! matching reply. Used by `ferrulectl`, `ferrule-agent` and the tests.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::rpc::RpcError;

/// Largest reply line the client accepts.
const MAX_REPLY_BYTES: u64 = 256 << 20;

/// Environment variable naming a further uid the server may run as (besides root and
/// the client's own uid); `ferrulectl --server-uid` sets the same.
pub const SERVER_UID_ENV: &str = "FERRULE_SERVER_UID";

/// The uid named by [`SERVER_UID_ENV`], if it is set.
pub fn server_uid_from_env() -> Result<Option<u32>, ClientError> {
    match std::env::var(SERVER_UID_ENV) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => text
            .trim()
            .parse::<u32>()
            .map(Some)
            .map_err(|_| ClientError::Config(format!("{SERVER_UID_ENV}={text:?} is not a uid"))),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(ClientError::Config(format!(
            "{SERVER_UID_ENV} is not a uid"
        ))),
    }
}

/// Why a control request did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error(
        "cannot connect to ferruled at {}: {source} \
         (is ferruled running? set --socket or FERRULE_SOCKET)",
        path.display()
    )]
    Connect {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The process listening on the socket runs as a uid the client does not trust: not
    /// root, not the client's own, not the expected server uid.
    #[error(
        "refusing the server at {}: it runs as uid {uid} (pid {pid}), not as root, this \
         user or the expected server uid; a socket anyone could have created? If ferruled \
         really runs as uid {uid}, pass --server-uid {uid} or set FERRULE_SERVER_UID={uid}",
        path.display()
    )]
    UntrustedServer { path: PathBuf, uid: u32, pid: i32 },
    /// The client's own settings are unusable.
    #[error("{0}")]
    Config(String),
    /// Sending or receiving failed, or timed out.
    #[error("control socket: {0}")]
    Io(#[from] io::Error),
    /// The daemon's reply is not a valid JSON-RPC 2.0 response to the request.
    #[error("unexpected reply from ferruled: {0}")]
    Protocol(String),
    /// The daemon answered with an error.
    #[error("ferruled: {0}")]
    Rpc(RpcError),
}

/// A connection to the control socket.
#[derive(Debug)]
pub struct Client {
    stream: BufReader<UnixStream>,
    path: PathBuf,
    next_id: u64,
}

impl Client {
    /// Connects to the control socket at `path` and checks the server's credentials
    /// (see [`Client::connect_trusting`]), trusting the uid of [`SERVER_UID_ENV`] when
    /// that is set.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        Client::connect_trusting(path, server_uid_from_env()?)
    }

    /// Connects to the control socket at `path`. The process that listens there must
    /// run as root, as this process's effective uid, or as `server_uid`: its
    /// credentials (SO_PEERCRED) are checked before anything is sent, so a socket
    /// planted at the path by another user cannot take the requests or forge answers.
    pub fn connect_trusting(path: &Path, server_uid: Option<u32>) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        let cred = rustix::net::sockopt::socket_peercred(&stream).map_err(io::Error::from)?;
        let uid = cred.uid.as_raw();
        let own = rustix::process::geteuid().as_raw();
        if uid != 0 && uid != own && Some(uid) != server_uid {
            return Err(ClientError::UntrustedServer {
                path: path.to_path_buf(),
                uid,
                pid: cred.pid.as_raw_pid(),
            });
        }
        Ok(Client {
            stream: BufReader::new(stream),
            path: path.to_path_buf(),
            next_id: 1,
        })
    }

    /// Path of the socket this client is connected to.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// Limits how long [`Client::call`] waits for the daemon to accept a request and to
    /// reply (`None`: forever). A call that times out fails with [`ClientError::Io`];
    /// its late reply is skipped by the next call.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) -> Result<(), ClientError> {
        let stream = self.stream.get_ref();
        stream.set_read_timeout(timeout)?;
        stream.set_write_timeout(timeout)?;
        Ok(())
    }

    /// Calls `method` and returns its result. `params` is sent as given, or left out
    /// when it is `Value::Null`.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method });
        if !params.is_null() {
            request["params"] = params;
        }
        let mut line = serde_json::to_vec(&request)
            .map_err(|e| ClientError::Protocol(format!("cannot encode request: {e}")))?;
        line.push(b'\n');
        if let Err(e) = self.stream.get_mut().write_all(&line) {
            // The daemon may have refused the connection (a limit, the credentials)
            // with an error line before closing it: that says more than EPIPE.
            if let Ok(reply) = self.read_reply() {
                if reply.get("id").is_some_and(Value::is_null) && reply.contains_key("error") {
                    return into_result(reply);
                }
            }
            return Err(e.into());
        }

        loop {
            let reply = self.read_reply()?;
            match reply_id(&reply) {
                Some(reply_id) if reply_id == id => return into_result(reply),
                // A late reply to an earlier call that timed out.
                Some(reply_id) if reply_id < id => continue,
                Some(reply_id) => {
                    return Err(ClientError::Protocol(format!(
                        "reply id {reply_id} does not match request id {id}"
                    )))
                }
                // The daemon could not read the request's id (a parse error, or the
                // request was too large): the error is about this request.
                None if reply.get("id").is_some_and(Value::is_null) => {
                    return into_result(reply);
                }
                None => {
                    let found = reply.get("id").map_or("none".to_string(), Value::to_string);
                    return Err(ClientError::Protocol(format!(
                        "reply id {} does not match request id {id}",
                        abbreviate(&found)
                    )));
                }
            }
        }
    }

    /// Calls `method` and decodes its result into `T`.
    pub fn call_typed<T: DeserializeOwned>(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<T, ClientError> {
        let result = self.call(method, params)?;
        serde_json::from_value(result)
            .map_err(|e| ClientError::Protocol(format!("result of `{method}`: {e}")))
    }

    /// Reads one reply line and checks that it is a JSON-RPC 2.0 response object.
    fn read_reply(&mut self) -> Result<serde_json::Map<String, Value>, ClientError> {
        let mut line = Vec::new();
        let n = (&mut self.stream)
            .take(MAX_REPLY_BYTES)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Err(ClientError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "ferruled closed the connection without replying",
            )));
        }
        if line.last() != Some(&b'\n') {
            return Err(if n as u64 >= MAX_REPLY_BYTES {
                ClientError::Protocol(format!("reply longer than {MAX_REPLY_BYTES} bytes"))
            } else {
                ClientError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "ferruled closed the connection in the middle of a reply",
                ))
            });
        }
        let value: Value = serde_json::from_slice(&line).map_err(|e| {
            ClientError::Protocol(format!(
                "{e}: {}",
                abbreviate(String::from_utf8_lossy(&line).trim_end())
            ))
        })?;
        let Value::Object(reply) = value else {
            return Err(ClientError::Protocol(format!(
                "not a JSON-RPC response object: {}",
                abbreviate(&value.to_string())
            )));
        };
        if reply.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(ClientError::Protocol(
                "`jsonrpc` is not \"2.0\"".to_string(),
            ));
        }
        Ok(reply)
    }
}

fn reply_id(reply: &serde_json::Map<String, Value>) -> Option<u64> {
    reply.get("id").and_then(Value::as_u64)
}

fn into_result(mut reply: serde_json::Map<String, Value>) -> Result<Value, ClientError> {
    if let Some(error) = reply.remove("error") {
        let error: RpcError = serde_json::from_value(error)
            .map_err(|e| ClientError::Protocol(format!("malformed `error` member: {e}")))?;
        return Err(ClientError::Rpc(error));
    }
    reply
        .remove("result")
        .ok_or_else(|| ClientError::Protocol("reply has neither `result` nor `error`".to_string()))
}

/// Shortens text quoted in an error message.
fn abbreviate(text: &str) -> String {
    const MAX_CHARS: usize = 200;
    match text.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_member_becomes_rpc_error() {
        let reply = serde_json::json!({
            "jsonrpc": "2.0", "id": 1,
            "error": { "code": -32601, "message": "method not found: `x`" }
        });
        let Value::Object(reply) = reply else {
            unreachable!()
        };
        match into_result(reply) {
            Err(ClientError::Rpc(e)) => assert_eq!(e.code, -32601),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn reply_without_result_is_a_protocol_error() {
        let Value::Object(reply) = serde_json::json!({ "jsonrpc": "2.0", "id": 1 }) else {
            unreachable!()
        };
        assert!(matches!(into_result(reply), Err(ClientError::Protocol(_))));
    }

    #[test]
    fn abbreviate_cuts_on_char_boundaries() {
        let long = "é".repeat(300);
        let short = abbreviate(&long);
        assert_eq!(short.chars().count(), 201);
        assert_eq!(abbreviate("abc"), "abc");
    }
}
