//! The versioned control API: method names and the request/response types shared by
//! `ferruled`, `ferrulectl` and any other client of the control socket.
//!
//! Wire format and error codes: `docs/control-protocol.md`.

use serde::{Deserialize, Serialize};

/// Version of the control API. Bumped on any incompatible change to a method's
/// params or result; additions of optional fields do not bump it.
pub const API_VERSION: u32 = 1;

/// Default control socket path (the parent directory is created, the socket is 0600).
pub const DEFAULT_SOCKET: &str = "/run/ferrule/ferrule.sock";

/// Default largest request line, in bytes, the daemon accepts.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1 << 20;

/// Method names.
pub mod method {
    pub const VERSION: &str = "version";
    pub const PORTS_LIST: &str = "ports.list";
    pub const STATS_GET: &str = "stats.get";
}

/// Result of `version`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct VersionInfo {
    /// [`API_VERSION`] of the daemon.
    pub api_version: u32,
    /// Crate version of the daemon build.
    pub version: String,
    /// Git commit of the build, or "unknown".
    pub git_commit: String,
    /// DPDK version string (`rte_version()`), or "none" for a daemon without DPDK.
    pub dpdk: String,
}

/// Port role, from the configuration.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum PortRole {
    /// Towards the node's network (the VPC); SNAT and the global ACL apply here.
    Uplink,
    /// A pod's interface.
    Pod,
    /// The node's own network stack.
    Host,
}

impl PortRole {
    pub fn as_str(self) -> &'static str {
        match self {
            PortRole::Uplink => "uplink",
            PortRole::Pod => "pod",
            PortRole::Host => "host",
        }
    }
}

impl std::fmt::Display for PortRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-port counters. `rx_*`/`tx_*`/`drops` are counted by Ferrule's workers (summed
/// over workers); `hw_*` are the driver's own counters (`rte_eth_stats_get`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Packets received on this port that Ferrule dropped (any reason).
    pub drops: u64,
    /// Packets the NIC dropped because no receive descriptor was free.
    pub hw_rx_missed: u64,
    /// Receive errors reported by the driver.
    pub hw_rx_errors: u64,
    /// Transmit errors reported by the driver.
    pub hw_tx_errors: u64,
    /// Receive allocation failures (mempool empty).
    pub hw_rx_nombuf: u64,
}

/// One entry of `ports.list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortInfo {
    /// Configured port name.
    pub name: String,
    /// DPDK port id.
    pub port_id: u16,
    /// DPDK devargs it was created from (vdev string or PCI address).
    pub devargs: String,
    pub role: PortRole,
    /// "up" or "down".
    pub link: String,
    /// Link speed in Mbit/s (0 when unknown).
    pub speed_mbps: u32,
    /// MAC address, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    pub mtu: u16,
    /// Receive queues of the port (spread round-robin over the workers; RSS when > 1).
    pub rx_queues: u16,
    /// Where the static cross-connect sends this port's traffic, if anywhere.
    pub xconnect: Option<String>,
    pub counters: PortCounters,
}

/// Result of `ports.list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortsList {
    pub ports: Vec<PortInfo>,
}

/// A named drop counter.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DropCount {
    /// Drop reason, e.g. `tx-full`, `port-down` (see `docs/control-protocol.md`).
    pub reason: String,
    pub packets: u64,
}

/// Counters of one worker lcore.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WorkerStats {
    /// Worker index (0-based).
    pub worker: u32,
    /// EAL lcore the worker runs on.
    pub lcore: u32,
    /// Receive queues it polls, as `<port name>/<queue>`.
    pub queues: Vec<String>,
    /// Poll-loop iterations.
    pub polls: u64,
    /// Iterations in which at least one packet was received.
    pub busy_polls: u64,
    pub rx_packets: u64,
    pub tx_packets: u64,
    /// Total drops; by reason in `drop_reasons` (only non-zero reasons are listed).
    pub drops: u64,
    pub drop_reasons: Vec<DropCount>,
}

/// Result of `stats.get`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    /// Seconds since the daemon started forwarding.
    pub uptime_secs: f64,
    pub workers: Vec<WorkerStats>,
    /// Per-port counters, summed over workers.
    pub ports: Vec<PortStats>,
    /// Sums over all workers.
    pub totals: Totals,
}

/// Per-port entry of `stats.get`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortStats {
    pub name: String,
    pub counters: PortCounters,
}

/// Sums over all workers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Totals {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub drops: u64,
    pub drop_reasons: Vec<DropCount>,
}
