//! `ferrule-ipamd`: the node's L-IPAM daemon for EC2 — a warm pool of ENIs and secondary
//! IPv4 addresses kept over the EC2 API, handed to pods through the IPAM socket, with
//! introspection, metrics and the ENIs pushed to ferruled. No DPDK. Design and APIs:
//! `docs/ipam.md`.

pub mod cidr;
pub mod config;
pub mod datastore;
pub mod discovery;
pub mod ec2;
pub mod http;
pub mod limits;
pub mod manager;
pub mod metrics;
pub mod pool;
pub mod server;
pub mod warm;

use std::sync::Arc;

pub use config::{Args, Settings};
pub use manager::Ipamd;

/// Runs the daemon: starts it (discovery, datastore, reconciliation), binds the IPAM
/// socket and the introspection address, and serves until the future is dropped.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let metrics = Arc::new(metrics::Metrics::new());
    let listener = tokio::net::TcpListener::bind(settings.introspection)
        .await
        .map_err(|e| anyhow::anyhow!("--introspection {}: {e}", settings.introspection))?;
    let ipamd = Ipamd::start(settings.clone(), metrics).await?;
    let socket = server::bind(&settings.socket)
        .map_err(|e| anyhow::anyhow!("--socket {}: {e}", settings.socket.display()))?;
    tracing::info!(
        socket = %settings.socket.display(), introspection = %settings.introspection,
        "ferrule-ipamd ready"
    );
    tokio::spawn(ipamd.clone().run());
    tokio::spawn(server::serve(socket, ipamd.clone()));
    http::serve(listener, ipamd).await?;
    Ok(())
}
