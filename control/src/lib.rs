//! `ferrule-control`: the control thread (a `mio` event loop on a Unix socket speaking
//! newline-delimited JSON-RPC 2.0), the versioned API types, the daemon's configuration,
//! and the code behind the `ferruled` and `ferrulectl` binaries.

pub mod acl;
pub mod api;
pub mod client;
pub mod config;
pub mod ctl;
pub mod daemon;
pub mod fib;
pub mod policy;
pub mod resolver;
pub mod rpc;
pub mod server;
pub mod table;
pub mod trace;
pub mod vpc;
