//! Shared types of the `fqdn.*` replies ([`crate::fqdn_method`]): what `ferruled`
//! reports and `ferrulectl fqdn` reads.

use serde::{Deserialize, Serialize};

/// What the DNS proxy did, since the daemon started (`fqdn.selectors`' `proxy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyCounters {
    /// Queries punted to the proxy.
    pub queries: u64,
    /// Queries for a name the port's DNS policy does not allow (answered REFUSED).
    pub refused: u64,
    /// Queries sent upstream.
    pub forwarded: u64,
    /// Answers handed back to pods.
    pub answered: u64,
    /// Addresses of answers given to the name manager.
    pub addresses_learned: u64,
    /// Punted packets that were not a DNS query the proxy can read.
    pub malformed_queries: u64,
    /// Upstream datagrams that were not the answer to a waiting query.
    pub malformed_answers: u64,
    /// Queries whose answer did not come within `upstream_timeout_ms`.
    pub upstream_timeouts: u64,
    /// Queries that could not be sent upstream (socket errors, too many waiting).
    pub upstream_errors: u64,
    /// Answers or refusals that could not be handed back (no buffer, queue full).
    pub reply_errors: u64,
    /// DNS-over-TCP connections from pods accepted (absent from daemons without DNS
    /// over TCP).
    #[serde(default)]
    pub tcp_connections: u64,
    /// DNS-over-TCP connections reset because the connection limit was reached.
    #[serde(default)]
    pub tcp_refused: u64,
}
