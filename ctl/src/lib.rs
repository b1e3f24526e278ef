//! `ferrulectl`: its command line (clap), the context every subcommand queries
//! `ferruled` through, and `version`. Each subcommand group is a module (`route`,
//! `neigh`, `trace`, `stats`, `port`, `acl`, `ct`, `vpc`, `policy`, `fqdn`) with its
//! arguments, its call and the renderer of its human output; `table` lays out tables
//! and `pcap` writes `trace dump --pcap` files.
//!
//! Adding a subcommand: a module with its arguments and a `render_*` function, a variant
//! in [`Command`] (its doc comment is the help text) and a `match` arm in [`run`];
//! `--json` and error handling come with [`Ctx::query`].

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Serialize;
use serde_json::Value;

use crate::table::Table;
use ferrule_api::client::{Client, ClientError};
use ferrule_api::{
    self as api, method, neigh_method, route_method, trace_method, NeighAdd, NeighDel, NeighDump,
    NetworkFilter, PortCounters, PortsList, RouteAdd, RouteDel, RouteDump, Stats, TraceDump,
    TraceResult, TraceRun, TraceStage, TraceStart, TraceVerdict, TracedPacket, VersionInfo,
};
use ferrule_dataplane::counters::DropReason;

pub mod acl;
pub mod ct;
pub mod fqdn;
pub mod ipam;
pub mod neigh;
pub mod network;
pub mod pcap;
pub mod policy;
pub mod port;
pub mod route;
pub mod stats;
pub mod table;
pub mod trace;
pub mod vpc;

pub use neigh::*;
pub use pcap::*;
#[cfg(test)]
use port::format_speed;
pub use port::render_ports;
pub use route::*;
pub use stats::*;
pub use trace::*;

const LONG_ABOUT: &str = "\
Query and control a running ferruled, Ferrule's DPDK userspace vswitch.

ferrulectl talks to ferruled over its control socket (a Unix socket, mode 0600, so run
it as the daemon's user, usually root) using newline-delimited JSON-RPC 2.0; see
docs/control-protocol.md. Counters are printed as exact numbers. With --json the
daemon's reply is printed as pretty JSON instead of tables, for scripts and jq.

Before sending anything ferrulectl checks who listens on the socket (SO_PEERCRED): the
server must run as root, as the user running ferrulectl, or as the uid given with
--server-uid (FERRULE_SERVER_UID). Any other server is refused (exit 1), so a socket
someone else planted at the path cannot take your requests or fake their success.";

const AFTER_HELP: &str = "\
Examples:
  ferrulectl ports                          Ports with link state and counters
  ferrulectl stats                          Worker, port and drop-reason counters
  ferrulectl port add pod-c --vhost-user /run/ferrule/pod-c.sock --ip 10.1.0.4 \\
      --mac 02:00:00:0a:01:04 --pod default/web-1
                                            Attach a pod over vhost-user
  ferrulectl port del pod-c                 Detach it
  ferrulectl route add 0.0.0.0/0 --port uplink0 --via 192.0.2.1
  ferrulectl route add 198.51.100.0/24 --blackhole --network blue
  ferrulectl route dump                     Routes of every network
  ferrulectl neigh add 192.0.2.1 0a:1b:2c:3d:4e:5f --port uplink0
  ferrulectl neigh dump                     ARP/ND entries, with packets held
  ferrulectl trace --in-port pod-web --proto tcp --src 10.1.0.5:40000 --dst 203.0.113.7:443
                                            Where would this packet go, and why
  ferrulectl acl apply -f policy.yaml       Replace the ACL tables and attachments
  ferrulectl acl dump --port pod-web        Rules applying at a port, with hit counts
  ferrulectl vpc set --node-ip 192.0.2.10 --vpc-cidr 192.0.2.0/24
                                            Masquerade pods to the node IP outside the VPC
  ferrulectl ct dump --proto tcp --state ESTABLISHED
                                            Tracked connections, like conntrack -L
  ferrulectl nat dump                       Masqueraded connections and their ports
  ferrulectl fqdn cache                     DNS names learned for FQDN policy
  ferrulectl trace start --port uplink0 --count 10
  ferrulectl trace dump --pcap /tmp/t.pcap  Captured packets with their path
  ferrulectl --json stats | jq .totals      Raw reply, for scripts
  ferrulectl --socket /tmp/f.sock version   Talk to a daemon on another socket
  FERRULE_SOCKET=/tmp/f.sock ferrulectl ports
  ferrulectl --server-uid 990 stats         Trust a ferruled that runs as uid 990

Exit status:
  0  success
  1  ferruled could not be reached, answered with an error, or sent a reply that
     could not be understood; the server at the socket runs as an untrusted uid; an
     output file could not be written
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

    /// Uid the server may run as besides root and you; a server running as any other
    /// uid is refused before anything is sent.
    #[arg(long, global = true, value_name = "UID", env = "FERRULE_SERVER_UID")]
    pub server_uid: Option<u32>,

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

    /// Attach or detach a port (a vhost-user pod or any DPDK device) at run time.
    #[command(long_about = port::PORT_LONG_ABOUT)]
    Port {
        #[command(subcommand)]
        command: port::PortCommand,
    },

    /// Show uptime, per-worker, per-port and per-drop-reason counters.
    #[command(long_about = "\
Show the daemon's uptime, then three tables: one line per worker lcore (the queues it
polls, poll-loop iterations, the share of busy iterations that received packets, and
its packet counters), one line per port (Ferrule's counters and the driver's own
receive-missed, error and no-mbuf counters), and every drop reason with a non-zero
count, like `vppctl show errors`.")]
    Stats,

    /// Add, delete and list routes (per network).
    #[command(long_about = ROUTE_LONG_ABOUT)]
    Route {
        #[command(subcommand)]
        command: RouteCommand,
    },

    /// Add, delete and list ARP/ND neighbours (per network).
    #[command(long_about = NEIGH_LONG_ABOUT)]
    Neigh {
        #[command(subcommand)]
        command: NeighCommand,
    },

    /// Apply, list and reset access control lists.
    #[command(long_about = acl::ACL_LONG_ABOUT)]
    Acl {
        #[command(subcommand)]
        command: acl::AclCommand,
    },

    /// List, flush and count tracked connections.
    #[command(long_about = ct::CT_LONG_ABOUT)]
    Ct {
        #[command(subcommand)]
        command: ct::CtCommand,
    },

    /// Show masqueraded connections (source NAT).
    #[command(long_about = ct::NAT_LONG_ABOUT)]
    Nat {
        #[command(subcommand)]
        command: ct::NatCommand,
    },

    /// Set and show the node's VPC state (node IP, VPC CIDRs, SNAT).
    #[command(long_about = vpc::VPC_LONG_ABOUT)]
    Vpc {
        #[command(subcommand)]
        command: vpc::VpcCommand,
    },

    /// Create, delete and list user-defined networks (UDN/CUDN); MAC tables.
    #[command(long_about = network::NETWORK_LONG_ABOUT)]
    Network {
        #[command(subcommand)]
        command: network::NetworkCommand,
    },

    /// Show ferrule-ipamd's address pool: ENIs, addresses, pods (AWS VPC CNI model).
    #[command(long_about = ipam::IPAM_LONG_ABOUT)]
    Ipam {
        #[command(subcommand)]
        command: ipam::IpamCommand,
    },

    /// Render Kubernetes NetworkPolicies into ACL tables; verdicts; apply once.
    #[command(long_about = policy::POLICY_LONG_ABOUT)]
    Policy {
        #[command(subcommand)]
        command: policy::PolicyCommand,
    },

    /// Show the FQDN policy state: DNS cache, identities, selectors, DNS proxy.
    #[command(long_about = fqdn::FQDN_LONG_ABOUT)]
    Fqdn {
        #[command(subcommand)]
        command: fqdn::FqdnCommand,
    },

    /// Trace a synthetic packet through the pipeline, or capture real ones.
    // Not `args_conflicts_with_subcommands`: it would refuse the global options too
    // (`trace --json dump`). `trace` refuses a subcommand given with the run's options.
    #[command(long_about = TRACE_LONG_ABOUT, subcommand_negates_reqs = true)]
    Trace(TraceArgs),
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
    /// The command line is incomplete in a way clap did not catch.
    #[error("{0}")]
    Usage(String),
    /// Writing an output file (`trace dump --pcap`) failed.
    #[error("cannot write {}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Entry point of the `ferrulectl` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut stdout = io::stdout().lock();
    match run(&cli, &mut stdout).and_then(|()| stdout.flush().map_err(CtlError::Output)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`ferrulectl stats | head`): nothing left to tell anyone.
        Err(CtlError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        // Shaped like clap's own usage errors.
        Err(e @ CtlError::Usage(_)) => {
            eprintln!("error: {e}\n\nFor more information, try '--help'.");
            ExitCode::from(2)
        }
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
        Command::Port { ref command } => port::run(&mut ctx, command),
        Command::Route { ref command } => route(&mut ctx, command),
        Command::Neigh { ref command } => neigh(&mut ctx, command),
        Command::Acl { ref command } => acl::run(&mut ctx, command),
        Command::Vpc { ref command } => vpc::run(&mut ctx, command),
        Command::Network { ref command } => network::run(&mut ctx, command),
        Command::Ipam { ref command } => ipam::run(&mut ctx, command),
        Command::Policy { ref command } => policy::run(&mut ctx, command),
        Command::Ct { ref command } => ct::run(&mut ctx, command),
        Command::Nat { ref command } => ct::run_nat(&mut ctx, command),
        Command::Fqdn { ref command } => fqdn::run(&mut ctx, command),
        Command::Trace(ref args) => trace(&mut ctx, args),
    }
}

/// What a command needs: the connection (made on first use), the output, the options.
pub struct Ctx<'a> {
    socket: PathBuf,
    server_uid: Option<u32>,
    timeout: Option<Duration>,
    json: bool,
    client: Option<Client>,
    out: &'a mut dyn Write,
}

impl<'a> Ctx<'a> {
    fn new(cli: &Cli, out: &'a mut dyn Write) -> Self {
        Ctx {
            socket: cli.socket.clone(),
            server_uid: cli.server_uid,
            timeout: (cli.timeout > 0).then(|| Duration::from_secs(cli.timeout)),
            json: cli.json,
            client: None,
            out,
        }
    }

    /// The connection to ferruled, connecting on first use.
    pub fn client(&mut self) -> Result<&mut Client, CtlError> {
        if self.client.is_none() {
            let mut client = Client::connect_trusting(&self.socket, self.server_uid)?;
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

/// Encodes the params of a request, leaving out optional fields that are absent.
fn params<T: Serialize>(params: &T) -> Result<Value, CtlError> {
    let mut value = serde_json::to_value(params)
        .map_err(|e| ClientError::Protocol(format!("cannot encode request: {e}")))?;
    if let Value::Object(fields) = &mut value {
        fields.retain(|_, v| !v.is_null());
    }
    Ok(value)
}

/// The human output of commands whose result is `{}`: nothing, like `ip route add`.
fn nothing(_: &IgnoredAny) -> String {
    String::new()
}

/// The daemon's line of `ferrulectl version`.
pub fn render_version(info: &VersionInfo) -> String {
    // The daemon reports the bare version ("22.11.11"); older ones said "DPDK 22.11.11".
    let dpdk = format!(
        "DPDK {}",
        info.dpdk.strip_prefix("DPDK ").unwrap_or(&info.dpdk)
    );
    format!(
        "ferruled {} (control API {}, commit {}, {dpdk})\n",
        info.version, info.api_version, info.git_commit
    )
}

/// `-` for an absent or empty value.
fn or_dash(value: Option<&str>) -> String {
    match value {
        Some(v) if !v.is_empty() => v.to_string(),
        _ => "-".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use ferrule_api::{DropCount, PortInfo, PortRole, PortStats, Totals, WorkerStats};

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
        info.dpdk = "22.11.11".to_string();
        assert_eq!(
            render_version(&info),
            "ferruled 0.1.0 (control API 1, commit 3f2c1ab, DPDK 22.11.11)\n"
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
            pod: None,
            network: "default".into(),
            ips: Vec::new(),
            locked: false,
            gateway_ip: None,
            gateway_mac: None,
            vhost_user: None,
            vhost_mode: None,
            allowed_addresses: Vec::new(),
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
            mbufs: 16383,
            mbufs_in_use: 1024,
            uptime_secs: 3725.5,
            workers: vec![WorkerStats {
                worker: 0,
                lcore: 2,
                queues: vec!["0/0".to_string(), "1/0".to_string()],
                polls: 1000,
                busy_polls: 250,
                rx_packets: 900,
                tx_packets: 880,
                local_replies: 0,
                icmp_errors: 0,
                punts: 0,
                handoffs: 0,
                switched: 0,
                flooded: 0,
                flood_copies: 0,
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
            mbufs: 0,
            mbufs_in_use: 0,
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

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("ferrulectl").chain(args.iter().copied()))
    }

    #[test]
    fn route_add_needs_exactly_one_of_port_and_blackhole() {
        let cli = parse(&[
            "route",
            "add",
            "10.0.0.0/8",
            "--port",
            "up0",
            "--via",
            "1.1.1.1",
        ])
        .expect("parses");
        let Command::Route {
            command: RouteCommand::Add(a),
        } = cli.command
        else {
            panic!("not route add: {cli:?}");
        };
        assert_eq!(
            (a.prefix.as_str(), a.port.as_deref(), a.via.as_deref()),
            ("10.0.0.0/8", Some("up0"), Some("1.1.1.1"))
        );
        assert!(!a.blackhole && a.network.is_none());
        assert!(parse(&[
            "route",
            "add",
            "10.0.0.0/8",
            "--blackhole",
            "--network",
            "blue"
        ])
        .is_ok());

        use clap::error::ErrorKind;
        for (args, kind) in [
            (
                &["route", "add", "10.0.0.0/8", "--port", "a", "--blackhole"][..],
                ErrorKind::ArgumentConflict,
            ),
            (
                &["route", "add", "10.0.0.0/8"][..],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                &["route", "add", "10.0.0.0/8", "--via", "1.1.1.1"][..],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                &[
                    "route",
                    "add",
                    "10.0.0.0/8",
                    "--via",
                    "1.1.1.1",
                    "--blackhole",
                ][..],
                ErrorKind::ArgumentConflict,
            ),
            (
                &["route", "add", "--port", "a"][..],
                ErrorKind::MissingRequiredArgument,
            ),
        ] {
            match parse(args) {
                Err(e) => assert_eq!(e.kind(), kind, "{args:?}: {e}"),
                Ok(cli) => panic!("{args:?} parsed: {cli:?}"),
            }
        }
    }

    #[test]
    fn trace_parses_with_options_or_a_subcommand() {
        let cli = parse(&[
            "trace",
            "--in-port",
            "pod-a",
            "--proto",
            "icmpv6",
            "--src",
            "2001:db8::1",
            "--dst",
            "[2001:db8::2]:0",
            "--len",
            "9600",
            "--ttl",
            "0",
            "--json",
        ])
        .expect("parses");
        assert!(cli.json);
        let Command::Trace(TraceArgs { command: None, run }) = cli.command else {
            panic!("not a trace run: {cli:?}");
        };
        let request = run.request().expect("complete");
        assert_eq!(request.proto, "icmpv6");
        assert_eq!(request.dst, "[2001:db8::2]:0");
        assert_eq!((request.len, request.ttl), (Some(9600), Some(0)));
        assert_eq!(request.tcp_flags, None);

        let cli = parse(&["trace", "start", "--port", "up0", "--count", "1000"]).expect("parses");
        let Command::Trace(TraceArgs {
            command: Some(TraceCommand::Start(TraceStartArgs { count: 1000, .. })),
            run,
        }) = cli.command
        else {
            panic!("not trace start: {cli:?}");
        };
        assert!(run.is_empty() && run.request().is_none());
        // Global options may come between `trace` and its subcommand.
        let cli = parse(&["trace", "--json", "dump", "--pcap", "/tmp/x.pcap"]).expect("parses");
        assert!(cli.json);
        assert!(matches!(
            cli.command,
            Command::Trace(TraceArgs {
                command: Some(TraceCommand::Dump(TraceDumpArgs { pcap: Some(_) })),
                ..
            })
        ));

        let run = [
            "--in-port",
            "a",
            "--proto",
            "tcp",
            "--src",
            "1.1.1.1",
            "--dst",
            "2.2.2.2",
        ];
        let with = |extra: &[&str]| {
            let mut args = vec!["trace"];
            args.extend(run);
            args.extend(extra);
            parse(&args)
        };
        assert!(with(&[]).is_ok());
        for bad in [
            &["--len", "19"][..],
            &["--len", "9601"],
            &["--ttl", "256"],
            &["--ttl", "-1"],
            &["--proto", "gre"],
        ] {
            assert!(with(bad).is_err(), "{bad:?}");
        }
        assert!(parse(&["trace"]).is_err());
        assert!(parse(&["trace", "--in-port", "a"]).is_err());
        assert!(parse(&["trace", "start", "--port", "a", "--count", "0"]).is_err());
        assert!(parse(&["trace", "start", "--port", "a", "--count", "1001"]).is_err());
        assert!(parse(&["trace", "start", "--port", "a"]).is_err());
    }

    #[test]
    fn absent_params_are_left_out() {
        let request = RouteAdd {
            network: None,
            prefix: "10.0.0.0/8".to_string(),
            port: None,
            via: None,
            blackhole: true,
        };
        assert_eq!(
            params(&request).expect("encodes"),
            serde_json::json!({ "prefix": "10.0.0.0/8", "blackhole": true })
        );
        assert_eq!(
            params(&NetworkFilter::default()).expect("encodes"),
            serde_json::json!({})
        );
    }

    #[test]
    fn routes_table() {
        let route = |network: &str,
                     prefix: &str,
                     kind: &str,
                     port: Option<&str>,
                     via: Option<&str>,
                     source: &str| api::RouteEntry {
            network: network.to_string(),
            prefix: prefix.to_string(),
            kind: kind.to_string(),
            port: port.map(str::to_string),
            via: via.map(str::to_string),
            source: source.to_string(),
            table: None,
        };
        let mut dump = RouteDump {
            routes: vec![
                route(
                    "default",
                    "0.0.0.0/0",
                    "port",
                    Some("uplink0"),
                    Some("192.0.2.1"),
                    "config",
                ),
                route(
                    "default",
                    "10.1.0.5/32",
                    "port",
                    Some("pod-web"),
                    None,
                    "pod",
                ),
                route("blue", "2001:db8::/32", "blackhole", None, None, "api"),
            ],
            rules: vec![],
        };
        assert_eq!(
            render_routes(&dump),
            "NETWORK  PREFIX         KIND       PORT     VIA        SOURCE\n\
             default  0.0.0.0/0      port       uplink0  192.0.2.1  config\n\
             default  10.1.0.5/32    port       pod-web  -          pod\n\
             blue     2001:db8::/32  blackhole  -        -          api\n"
        );
        assert_eq!(render_routes(&RouteDump::default()), "no routes\n");
        // An ENI's table: a TABLE column and the source rules.
        dump.routes.truncate(1);
        let mut eni = dump.routes[0].clone();
        eni.table = Some("eni-1".into());
        eni.port = Some("eth1".into());
        eni.via = Some("10.0.1.1".into());
        eni.source = "eni".into();
        dump.routes.push(eni);
        dump.rules.push(api::SourceRule {
            network: "default".into(),
            table: "eni-1".into(),
            eni: "eni-0b1".into(),
            device_index: 1,
            sources: vec!["10.0.1.20".into(), "10.0.1.21".into()],
        });
        assert_eq!(
            render_routes(&dump),
            "NETWORK  TABLE  PREFIX     KIND  PORT     VIA        SOURCE\n\
             default  main   0.0.0.0/0  port  uplink0  192.0.2.1  config\n\
             default  eni-1  0.0.0.0/0  port  eth1     10.0.1.1   eni\n\
             \n\
             source rules (pod traffic out of an uplink, not masqueraded):\n  \
             from 10.0.1.20, 10.0.1.21 lookup eni-1 (eni-0b1 device 1, network default)\n"
        );
    }

    #[test]
    fn neighbours_table() {
        let neigh = |ip: &str, mac: &str, state: &str, age_secs, held_packets| api::NeighEntry {
            network: "default".to_string(),
            ip: ip.to_string(),
            mac: mac.to_string(),
            port: "uplink0".to_string(),
            state: state.to_string(),
            age_secs,
            held_packets,
        };
        let dump = NeighDump {
            neighbors: vec![
                neigh("192.0.2.1", "0a:1b:2c:3d:4e:5f", "reachable", 12.34, 0),
                neigh("192.0.2.9", "", "incomplete", 0.25, 3),
                neigh("192.0.2.2", "0a:00:00:00:00:02", "static", 0.0, 0),
            ],
        };
        assert_eq!(
            render_neighbors(&dump),
            "NETWORK  IP         MAC                PORT     STATE       AGE    HELD\n\
             default  192.0.2.1  0a:1b:2c:3d:4e:5f  uplink0  reachable   12.3s     0\n\
             default  192.0.2.9  -                  uplink0  incomplete  0.2s      3\n\
             default  192.0.2.2  0a:00:00:00:00:02  uplink0  static      -         0\n"
        );
        assert_eq!(
            render_neighbors(&NeighDump { neighbors: vec![] }),
            "no neighbours\n"
        );
        assert_eq!(format_age(f64::NAN, "stale"), "-");
    }

    fn stage(stage: &str, detail: &str) -> TraceStage {
        TraceStage {
            stage: stage.to_string(),
            detail: detail.to_string(),
        }
    }

    #[test]
    fn trace_lines() {
        let result = TraceResult {
            stages: vec![
                stage("parse", "ipv4 tcp 10.1.0.5:40000 -> 203.0.113.7:443 [SYN]"),
                stage("route", "0.0.0.0/0 via 192.0.2.1 out uplink0"),
                stage("neighbor", ""),
            ],
            verdict: TraceVerdict::Forward {
                port: "uplink0".to_string(),
            },
        };
        assert_eq!(
            render_trace(&result),
            "parse     ipv4 tcp 10.1.0.5:40000 -> 203.0.113.7:443 [SYN]\n\
             route     0.0.0.0/0 via 192.0.2.1 out uplink0\n\
             neighbor\n\
             verdict: forward uplink0\n"
        );
        let dropped = TraceResult {
            stages: vec![],
            verdict: TraceVerdict::Drop {
                reason: "no-route".to_string(),
            },
        };
        assert_eq!(render_trace(&dropped), "verdict: drop no-route\n");
        assert_eq!(
            render_trace_start(&TraceStart {
                port: "up0".to_string(),
                count: 10
            }),
            "tracing the next 10 packets received on up0\n"
        );
    }

    #[test]
    fn trace_dump_lines() {
        let dump = TraceDump {
            remaining: 3,
            packets: vec![
                TracedPacket {
                    port: "uplink0".to_string(),
                    time_secs: 12.3456,
                    len: 74,
                    data_hex: "00".to_string(),
                    stages: vec![stage("parse", "ipv4 udp"), stage("ttl", "64 -> 63")],
                    verdict: TraceVerdict::Forward {
                        port: "pod-web".to_string(),
                    },
                },
                TracedPacket {
                    port: "uplink0".to_string(),
                    time_secs: 13.0,
                    len: 60,
                    data_hex: String::new(),
                    stages: vec![],
                    verdict: TraceVerdict::Drop {
                        reason: "not-ip".to_string(),
                    },
                },
            ],
        };
        assert_eq!(
            render_trace_dump(&dump),
            "#1  port uplink0  t=12.346s  len 74\n\
             \x20 parse  ipv4 udp\n\
             \x20 ttl    64 -> 63\n\
             \x20 verdict: forward pod-web\n\
             \n\
             #2  port uplink0  t=13.000s  len 60\n\
             \x20 verdict: drop not-ip\n\
             \n\
             remaining: 3\n"
        );
        let empty = TraceDump {
            remaining: 0,
            packets: vec![],
        };
        assert_eq!(
            render_trace_dump(&empty),
            "no packets captured\nremaining: 0\n"
        );
    }

    #[test]
    fn hex() {
        assert_eq!(decode_hex(""), Ok(vec![]));
        assert_eq!(decode_hex("00ffA0"), Ok(vec![0, 0xff, 0xa0]));
        assert!(decode_hex("abc").is_err());
        assert!(decode_hex("zz").is_err());
        assert!(decode_hex("0 ").is_err());
        assert!(decode_hex("é0").is_err());
    }

    #[test]
    fn pcap_timestamps() {
        assert_eq!(pcap_timestamp(12.345_678_4), (12, 345_678));
        assert_eq!(pcap_timestamp(1.999_999_9), (2, 0));
        assert_eq!(pcap_timestamp(-1.0), (0, 0));
        assert_eq!(pcap_timestamp(f64::INFINITY), (0, 0));
        assert_eq!(pcap_timestamp(1e12), (u32::MAX, 999_999));
    }

    #[test]
    fn pcap_layout() {
        let file = pcap_file(&[PcapRecord {
            time_secs: 1.5,
            data: vec![0xaa, 0xbb],
            orig_len: 60,
        }]);
        let mut expected = vec![
            0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0,
            0,
        ];
        expected.extend([
            1, 0, 0, 0, 0x20, 0xa1, 0x07, 0, 2, 0, 0, 0, 60, 0, 0, 0, 0xaa, 0xbb,
        ]);
        assert_eq!(file, expected);

        // The original length is never below the captured one; records are cut at the
        // snaplen.
        let big = pcap_file(&[PcapRecord {
            time_secs: 0.0,
            data: vec![0; 70_000],
            orig_len: 10,
        }]);
        assert_eq!(big.len(), 24 + 16 + 65_535);
        assert_eq!(big[32..40], [0xff, 0xff, 0, 0, 0x70, 0x11, 0x01, 0]);
    }

    #[test]
    fn bad_hex_is_an_unexpected_reply() {
        let packet = TracedPacket {
            port: "p".to_string(),
            time_secs: 0.0,
            len: 1,
            data_hex: "0g".to_string(),
            stages: vec![],
            verdict: TraceVerdict::Drop {
                reason: "malformed".to_string(),
            },
        };
        match pcap_records(&[packet]) {
            Err(e @ CtlError::Client(ClientError::Protocol(_))) => {
                let text = e.to_string();
                assert!(
                    text.starts_with("unexpected reply from ferruled: "),
                    "{text}"
                );
                assert!(text.contains("packets[0].data_hex"), "{text}");
            }
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }
}
