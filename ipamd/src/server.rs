//! The IPAM socket: a Unix socket (mode 0600) answering JSON-RPC 2.0 requests, one per
//! line, with `ferrule-api`'s framing and error codes, so the CNI plugin calls it with
//! the blocking `ferrule_api::client::Client`. Methods: `ipam.add`, `ipam.del`,
//! `ipam.show` (docs/ipam.md).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use ferrule_api::ipam::{ipam_method, IpamAdd, IpamDel, IpamReleased, NO_FREE_IP};
use ferrule_api::rpc::{self, RpcError};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::manager::{IpamError, Ipamd};

/// Largest request line accepted.
const MAX_LINE: u64 = 1 << 20;

/// Binds the socket at `path` (replacing a stale one, creating its directory) with
/// mode 0600.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves connections forever.
pub async fn serve(listener: UnixListener, ipamd: Arc<Ipamd>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let ipamd = ipamd.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, ipamd).await {
                        tracing::debug!("IPAM connection: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("IPAM socket accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(stream: UnixStream, ipamd: Arc<Ipamd>) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut line = Vec::new();
        let n = (&mut reader)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(());
        }
        let too_long = line.last() != Some(&b'\n') && n as u64 >= MAX_LINE;
        let reply = if too_long {
            error_reply(
                Value::Null,
                RpcError::invalid_request(format!("request longer than {MAX_LINE} bytes")),
            )
        } else {
            answer(&line, &ipamd)
        };
        let mut out = serde_json::to_vec(&reply).unwrap_or_default();
        out.push(b'\n');
        write.write_all(&out).await?;
        if too_long {
            return Ok(());
        }
    }
}

fn error_reply(id: Value, error: RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

/// The reply to one request line.
pub fn answer(line: &[u8], ipamd: &Ipamd) -> Value {
    let request: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return error_reply(Value::Null, RpcError::parse_error(e)),
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return error_reply(id, RpcError::invalid_request("`jsonrpc` must be \"2.0\""));
    }
    let Some(method) = request.get("method").and_then(Value::as_str) else {
        return error_reply(id, RpcError::invalid_request("`method` must be a string"));
    };
    let params = request.get("params").cloned().unwrap_or(Value::Null);
    match call(ipamd, method, &params) {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(error) => error_reply(id, error),
    }
}

fn call(ipamd: &Ipamd, method: &str, params: &Value) -> Result<Value, RpcError> {
    match method {
        ipam_method::ADD => {
            let req: IpamAdd = rpc::parse_params(params)?;
            let address = ipamd.add(&req).map_err(ipam_error)?;
            value(&address)
        }
        ipam_method::DEL => {
            let req: IpamDel = rpc::parse_params(params)?;
            let released = ipamd.del(&req).map_err(ipam_error)?;
            value(&IpamReleased {
                released: released.map(|ip| ip.to_string()),
            })
        }
        ipam_method::SHOW => value(&ipamd.show()),
        _ => Err(RpcError::method_not_found(method)),
    }
}

fn ipam_error(e: IpamError) -> RpcError {
    match e {
        IpamError::Empty(field) => RpcError::invalid_params(field, "must not be empty"),
        IpamError::NoFreeIp(message) => RpcError::new(NO_FREE_IP, message),
        IpamError::Datastore(e) => RpcError::internal(e),
    }
}

fn value<T: serde::Serialize>(v: &T) -> Result<Value, RpcError> {
    serde_json::to_value(v).map_err(RpcError::internal)
}
