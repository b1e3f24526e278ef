//! `ferrule-daemon`: the code behind `ferruled` — its TOML configuration, EAL and port
//! bring-up, the control-socket server (a `mio` event loop speaking the protocol of
//! `ferrule-api`), and the forwarding state with its request handlers.

pub mod acl;
pub mod config;
pub mod daemon;
pub mod fdb;
pub mod fib;
pub mod fqdn;
pub mod metrics;
pub mod networks;
pub mod persist;
pub mod resolver;
pub mod server;
pub mod trace;
pub mod vpc;
