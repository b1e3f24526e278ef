//! `ferrulectl`: its command line (clap), one function per subcommand that queries
//! `ferruled` over the control socket, and the renderers that turn replies into tables.
//!
//! Adding a subcommand: a variant in [`Command`] (its doc comment is the help text), a
//! `match` arm in [`run`], and a `render_*` function for the human output; `--json`
//! and error handling come with [`Ctx::query`].

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::{self, method, PortCounters, PortsList, Stats, VersionInfo};
use crate::client::{Client, ClientError};
use crate::table::Table;

const LONG_ABOUT: &str = "\
Query and control a running ferruled, Ferrule's DPDK userspace vswitch.

ferrulectl talks to ferruled over its control socket (a Unix socket, mode 0600, so run
it as the daemon's user, usually root) using newline-delimited JSON-RPC 2.0; see
docs/control-protocol.md. Counters are printed as exact numbers. With --json the
daemon's reply is printed as pretty JSON instead of tables, for scripts and jq.";

const AFTER_HELP: &str = "\
Examples:
  ferrulectl ports                          Ports with link state and counters
  ferrulectl stats                          Worker, port and drop-reason counters
  ferrulectl --json stats | jq .totals      Raw reply, for scripts
  ferrulectl --socket /tmp/f.sock version   Talk to a daemon on another socket
  FERRULE_SOCKET=/tmp/f.sock ferrulectl ports

Exit status:
  0  success
  1  ferruled could not be reached, answered with an error, or sent a reply that
     could not be understood
  2  invalid command line";

/// Command line of `ferrulectl`.
#[derive(Debug, Parser)]
#[command(
    name = "ferrulectl",
    version,
    about = "Query and control a running ferruled",
    long_about = LONG_ABOUT,
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// Control socket of ferruled.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "FERRULE_SOCKET",
        default_value = api::DEFAULT_SOCKET
    )]
    pub socket: PathBuf,

    /// Print the daemon's reply as pretty JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,

    /// Seconds to wait for ferruled to answer; 0 waits forever.
    #[arg(long, global = true, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,

    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the versions of ferrulectl and ferruled.
    #[command(long_about = "\
Show the versions of ferrulectl and ferruled: crate version, control API version, git
commit and the DPDK version ferruled runs with. A warning is printed on stderr when
the two speak different control API versions. With --json only the daemon's reply is
printed.")]
    Version,

    /// List ports: role, link, speed, MAC, MTU, queues, cross-connect and counters.
    #[command(long_about = "\
List the ports ferruled drives, one per line: name, DPDK port id, role (uplink, pod,
host), link state and speed, MAC address, MTU, number of receive queues, the port the
static cross-connect sends its traffic to, and the packet and byte counters kept by
Ferrule's workers (summed over workers). DROPS counts packets received on the port that
Ferrule dropped, for any reason; `ferrulectl stats` breaks drops down by reason.")]
    Ports,

    /// Show uptime, per-worker, per-port and per-drop-reason counters.
    #[command(long_about = "\
Show the daemon's uptime, then three tables: one line per worker lcore (the queues it
polls, poll-loop iterations, the share of busy iterations that received packets, and
its packet counters), one line per port (Ferrule's counters and the driver's own
receive-missed, error and no-mbuf counters), and every drop reason with a non-zero
count, like `vppctl show errors`.")]
    Stats,
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Talking to ferruled failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Writing to stdout failed.
    #[error("cannot write output: {0}")]
    Output(#[source] io::Error),
}

/// Entry point of the `ferrulectl` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut stdout = io::stdout().lock();
    match run(&cli, &mut stdout).and_then(|()| stdout.flush().map_err(CtlError::Output)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`ferrulectl stats | head`): nothing left to tell anyone.
        Err(CtlError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrulectl: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command in `cli`, writing its output to `out`.
pub fn run(cli: &Cli, out: &mut dyn Write) -> Result<(), CtlError> {
    let mut ctx = Ctx::new(cli, out);
    match cli.command {
        Command::Version => version(&mut ctx),
        Command::Ports => ctx.query::<PortsList>(method::PORTS_LIST, Value::Null, render_ports),
        Command::Stats => ctx.query::<Stats>(method::STATS_GET, Value::Null, render_stats),
    }
}

/// What a command needs: the connection (made on first use), the output, the options.
pub struct Ctx<'a> {
    socket: PathBuf,
    timeout: Option<Duration>,
    json: bool,
    client: Option<Client>,
    out: &'a mut dyn Write,
}

impl<'a> Ctx<'a> {
    fn new(cli: &Cli, out: &'a mut dyn Write) -> Self {
        Ctx {
            socket: cli.socket.clone(),
            timeout: (cli.timeout > 0).then(|| Duration::from_secs(cli.timeout)),
            json: cli.json,
            client: None,
            out,
        }
    }

    /// The connection to ferruled, connecting on first use.
    pub fn client(&mut self) -> Result<&mut Client, CtlError> {
        if self.client.is_none() {
            let mut client = Client::connect(&self.socket)?;
            client.set_read_timeout(self.timeout)?;
            self.client = Some(client);
        }
        match self.client.as_mut() {
            Some(client) => Ok(client),
            None => unreachable!("client was connected above"),
        }
    }

    /// Calls `method` and prints the result: raw with `--json`, else decoded into `T`
    /// and rendered.
    pub fn query<T: DeserializeOwned>(
        &mut self,
        method: &str,
        params: Value,
        render: impl FnOnce(&T) -> String,
    ) -> Result<(), CtlError> {
        if self.json {
            let result = self.client()?.call(method, params)?;
            self.print_json(&result)
        } else {
            let result: T = self.client()?.call_typed(method, params)?;
            self.print(&render(&result))
        }
    }

    /// Writes `text` to the output.
    pub fn print(&mut self, text: &str) -> Result<(), CtlError> {
        self.out
            .write_all(text.as_bytes())
            .map_err(CtlError::Output)
    }

    /// Writes `value` as pretty JSON and a newline.
    pub fn print_json(&mut self, value: &Value) -> Result<(), CtlError> {
        let mut text = serde_json::to_string_pretty(value).map_err(|e| {
            CtlError::Output(io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
        })?;
        text.push('\n');
        self.print(&text)
    }
}

fn version(ctx: &mut Ctx<'_>) -> Result<(), CtlError> {
    if ctx.json {
        let result = ctx.client()?.call(method::VERSION, Value::Null)?;
        return ctx.print_json(&result);
    }
    ctx.print(&format!(
        "ferrulectl {} (control API {})\n",
        env!("CARGO_PKG_VERSION"),
        api::API_VERSION
    ))?;
    let info: VersionInfo = ctx.client()?.call_typed(method::VERSION, Value::Null)?;
    ctx.print(&render_version(&info))?;
    if info.api_version != api::API_VERSION {
        eprintln!(
            "ferrulectl: warning: ferruled speaks control API {}, ferrulectl speaks {}; \
             some commands may fail",
            info.api_version,
            api::API_VERSION
        );
    }
    Ok(())
}

/// The daemon's line of `ferrulectl version`.
pub fn render_version(info: &VersionInfo) -> String {
    // `rte_version()` says "DPDK 23.11.0"; a daemon built without DPDK says "none".
    let dpdk = match info.dpdk.as_str() {
        "none" => "without DPDK".to_string(),
        other => format!("DPDK {}", other.strip_prefix("DPDK ").unwrap_or(other)),
    };
    format!(
        "ferruled {} (control API {}, commit {}, {dpdk})\n",
        info.version, info.api_version, info.git_commit
    )
}

/// `ferrulectl ports`.
pub fn render_ports(list: &PortsList) -> String {
    if list.ports.is_empty() {
        return "no ports\n".to_string();
    }
    let mut table = Table::new([
        "NAME", "ID", "ROLE", "LINK", "SPEED", "MAC", "MTU", "RXQ", "XCONNECT", "RX-PKTS",
        "RX-BYTES", "TX-PKTS", "TX-BYTES", "DROPS",
    ]);
    for port in &list.ports {
        let c = &port.counters;
        table.row([
            port.name.clone(),
            port.port_id.to_string(),
            port.role.to_string(),
            port.link.clone(),
            format_speed(port.speed_mbps),
            port.mac.clone(),
            port.mtu.to_string(),
            port.rx_queues.to_string(),
            port.xconnect.clone().unwrap_or_else(|| "-".to_string()),
            c.rx_packets.to_string(),
            c.rx_bytes.to_string(),
            c.tx_packets.to_string(),
            c.tx_bytes.to_string(),
            c.drops.to_string(),
        ]);
    }
    table.to_string()
}

/// `ferrulectl stats`.
pub fn render_stats(stats: &Stats) -> String {
    let mut out = format!(
        "uptime {}  rx {} packets  tx {} packets  drops {} packets\n",
        format_uptime(stats.uptime_secs),
        stats.totals.rx_packets,
        stats.totals.tx_packets,
        stats.totals.drops
    );

    out.push('\n');
    if stats.workers.is_empty() {
        out.push_str("no workers\n");
    } else {
        let mut workers = Table::new([
            "WORKER", "LCORE", "QUEUES", "POLLS", "BUSY%", "RX", "TX", "DROPS",
        ]);
        for w in &stats.workers {
            let queues = if w.queues.is_empty() {
                "-".to_string()
            } else {
                w.queues.join(",")
            };
            workers.row([
                w.worker.to_string(),
                w.lcore.to_string(),
                queues,
                w.polls.to_string(),
                busy_percent(w.busy_polls, w.polls),
                w.rx_packets.to_string(),
                w.tx_packets.to_string(),
                w.drops.to_string(),
            ]);
        }
        out.push_str(&workers.to_string());
    }

    out.push('\n');
    if stats.ports.is_empty() {
        out.push_str("no ports\n");
    } else {
        let mut ports = Table::new([
            "PORT",
            "RX-PKTS",
            "RX-BYTES",
            "TX-PKTS",
            "TX-BYTES",
            "DROPS",
            "RX-MISSED",
            "RX-ERRORS",
            "TX-ERRORS",
            "RX-NOMBUF",
        ]);
        for port in &stats.ports {
            let PortCounters {
                rx_packets,
                rx_bytes,
                tx_packets,
                tx_bytes,
                drops,
                hw_rx_missed,
                hw_rx_errors,
                hw_tx_errors,
                hw_rx_nombuf,
            } = &port.counters;
            let mut row = vec![port.name.clone()];
            row.extend(
                [
                    rx_packets,
                    rx_bytes,
                    tx_packets,
                    tx_bytes,
                    drops,
                    hw_rx_missed,
                    hw_rx_errors,
                    hw_tx_errors,
                    hw_rx_nombuf,
                ]
                .map(u64::to_string),
            );
            ports.row(row);
        }
        out.push_str(&ports.to_string());
    }

    out.push('\n');
    let drops: Vec<_> = stats
        .totals
        .drop_reasons
        .iter()
        .filter(|d| d.packets > 0)
        .collect();
    if drops.is_empty() {
        out.push_str("no drops\n");
    } else {
        let mut reasons = Table::new(["PACKETS", "REASON", "DESCRIPTION"]);
        for d in drops {
            reasons.row([
                d.packets.to_string(),
                d.reason.clone(),
                drop_reason_description(&d.reason).unwrap_or("").to_string(),
            ]);
        }
        out.push_str(&reasons.to_string());
    }
    out
}

/// What a drop reason means, for the drop reasons this ferrulectl knows.
pub fn drop_reason_description(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "tx-full" => "transmit queue full",
        "port-down" => "output port's link is down",
        "no-xconnect" => "input port has no cross-connect peer",
        _ => return None,
    })
}

/// Link speed: `25G`, `2.5G`, `100M`, or `-` when unknown.
fn format_speed(mbps: u32) -> String {
    match mbps {
        0 => "-".to_string(),
        m if m % 1000 == 0 => format!("{}G", m / 1000),
        m if m >= 1000 => format!("{}G", f64::from(m) / 1000.0),
        m => format!("{m}M"),
    }
}

/// Uptime as `3d 04:05:06`, or `05:06:07` under a day.
fn format_uptime(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "unknown".to_string();
    }
    // Truncation is intended; `as` saturates for absurdly large values.
    let total = secs as u64;
    let (days, rest) = (total / 86_400, total % 86_400);
    let clock = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    if days > 0 {
        format!("{days}d {clock}")
    } else {
        clock
    }
}

/// Share of poll-loop iterations that received packets, one decimal.
fn busy_percent(busy: u64, polls: u64) -> String {
    if polls == 0 {
        return "-".to_string();
    }
    format!("{:.1}", busy as f64 * 100.0 / polls as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DropCount, PortInfo, PortRole, PortStats, Totals, WorkerStats};
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_after_the_subcommand() {
        let cli = Cli::try_parse_from(["ferrulectl", "stats", "--json", "--socket", "/x.sock"])
            .expect("parses");
        assert!(cli.json);
        assert_eq!(cli.socket, PathBuf::from("/x.sock"));
        assert!(matches!(cli.command, Command::Stats));
        assert!(Cli::try_parse_from(["ferrulectl"]).is_err());
        assert!(Cli::try_parse_from(["ferrulectl", "bogus"]).is_err());
    }

    #[test]
    fn version_line() {
        let mut info = VersionInfo {
            api_version: 1,
            version: "0.1.0".to_string(),
            git_commit: "3f2c1ab".to_string(),
            dpdk: "DPDK 23.11.0".to_string(),
        };
        assert_eq!(
            render_version(&info),
            "ferruled 0.1.0 (control API 1, commit 3f2c1ab, DPDK 23.11.0)\n"
        );
        info.dpdk = "none".to_string();
        assert_eq!(
            render_version(&info),
            "ferruled 0.1.0 (control API 1, commit 3f2c1ab, without DPDK)\n"
        );
    }

    #[test]
    fn formats() {
        assert_eq!(format_speed(0), "-");
        assert_eq!(format_speed(100), "100M");
        assert_eq!(format_speed(2500), "2.5G");
        assert_eq!(format_speed(25_000), "25G");
        assert_eq!(format_uptime(59.9), "00:00:59");
        assert_eq!(format_uptime(93_784.0), "1d 02:03:04");
        assert_eq!(format_uptime(f64::NAN), "unknown");
        assert_eq!(busy_percent(1, 3), "33.3");
        assert_eq!(busy_percent(0, 0), "-");
    }

    fn port(name: &str, id: u16, xconnect: Option<&str>) -> PortInfo {
        PortInfo {
            name: name.to_string(),
            port_id: id,
            devargs: format!("net_ring{id}"),
            role: if id == 0 {
                PortRole::Uplink
            } else {
                PortRole::Pod
            },
            link: "up".to_string(),
            speed_mbps: if id == 0 { 10_000 } else { 0 },
            mac: format!("02:00:00:00:00:0{id}"),
            mtu: 1500,
            rx_queues: 2,
            xconnect: xconnect.map(str::to_string),
            counters: PortCounters {
                rx_packets: 1_000_000 * u64::from(id + 1),
                rx_bytes: 64_000_000,
                tx_packets: 42,
                tx_bytes: 2688,
                drops: 7,
                ..PortCounters::default()
            },
        }
    }

    #[test]
    fn ports_table() {
        let list = PortsList {
            ports: vec![port("uplink0", 0, Some("pod-a")), port("pod-a", 1, None)],
        };
        let text = render_ports(&list);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("NAME     ID  ROLE    LINK  SPEED  MAC"),
            "{text}"
        );
        assert!(
            lines[1].contains("uplink  up    10G    02:00:00:00:00:00  1500"),
            "{text}"
        );
        assert!(
            lines[1].ends_with("1000000  64000000       42      2688      7"),
            "{text}"
        );
        let fields: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(fields[..5], ["pod-a", "1", "pod", "up", "-"], "{text}");
        assert_eq!(fields[8..10], ["-", "2000000"], "{text}");
        assert_eq!(render_ports(&PortsList { ports: vec![] }), "no ports\n");
    }

    #[test]
    fn stats_tables() {
        let stats = Stats {
            uptime_secs: 3725.5,
            workers: vec![WorkerStats {
                worker: 0,
                lcore: 2,
                queues: vec!["0/0".to_string(), "1/0".to_string()],
                polls: 1000,
                busy_polls: 250,
                rx_packets: 900,
                tx_packets: 880,
                drops: 20,
                drop_reasons: vec![DropCount {
                    reason: "tx-full".to_string(),
                    packets: 20,
                }],
            }],
            ports: vec![PortStats {
                name: "uplink0".to_string(),
                counters: PortCounters::default(),
            }],
            totals: Totals {
                rx_packets: 900,
                tx_packets: 880,
                drops: 20,
                drop_reasons: vec![
                    DropCount {
                        reason: "tx-full".to_string(),
                        packets: 20,
                    },
                    DropCount {
                        reason: "port-down".to_string(),
                        packets: 0,
                    },
                    DropCount {
                        reason: "new-reason".to_string(),
                        packets: 3,
                    },
                ],
            },
        };
        let text = render_stats(&stats);
        assert!(
            text.starts_with("uptime 01:02:05  rx 900 packets  tx 880 packets"),
            "{text}"
        );
        assert!(
            text.contains("WORKER  LCORE  QUEUES   POLLS  BUSY%   RX   TX  DROPS\n"),
            "{text}"
        );
        assert!(
            text.contains("     0      2  0/0,1/0   1000   25.0  900  880     20\n"),
            "{text}"
        );
        assert!(text.contains("PORT     RX-PKTS"), "{text}");
        assert!(
            text.contains("     20  tx-full     transmit queue full\n"),
            "{text}"
        );
        assert!(text.contains("      3  new-reason\n"), "{text}");
        assert!(!text.contains("port-down"), "{text}");
    }

    #[test]
    fn stats_without_drops() {
        let stats = Stats {
            uptime_secs: 1.0,
            workers: vec![],
            ports: vec![],
            totals: Totals::default(),
        };
        assert_eq!(
            render_stats(&stats),
            "uptime 00:00:01  rx 0 packets  tx 0 packets  drops 0 packets\n\n\
             no workers\n\nno ports\n\nno drops\n"
        );
    }
}
