//! `ferrulectl`: its command line (clap), one function per subcommand that queries
//! `ferruled` over the control socket, the renderers that turn replies into tables, and
//! the pcap writer of `trace dump --pcap`.
//!
//! Adding a subcommand: a variant in [`Command`] (its doc comment is the help text), a
//! `match` arm in [`run`], and a `render_*` function for the human output; `--json`
//! and error handling come with [`Ctx::query`].

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
pub mod policy;
pub mod port;
pub mod table;
pub mod vpc;

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
  ferrulectl trace start --port uplink0 --count 10
  ferrulectl trace dump --pcap /tmp/t.pcap  Captured packets with their path
  ferrulectl --json stats | jq .totals      Raw reply, for scripts
  ferrulectl --socket /tmp/f.sock version   Talk to a daemon on another socket
  FERRULE_SOCKET=/tmp/f.sock ferrulectl ports

Exit status:
  0  success
  1  ferruled could not be reached, answered with an error, or sent a reply that
     could not be understood; an output file could not be written
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

    /// Render Kubernetes NetworkPolicies into ACL tables; verdicts; apply once.
    #[command(long_about = policy::POLICY_LONG_ABOUT)]
    Policy {
        #[command(subcommand)]
        command: policy::PolicyCommand,
    },

    /// Trace a synthetic packet through the pipeline, or capture real ones.
    // Not `args_conflicts_with_subcommands`: it would refuse the global options too
    // (`trace --json dump`). `trace` refuses a subcommand given with the run's options.
    #[command(long_about = TRACE_LONG_ABOUT, subcommand_negates_reqs = true)]
    Trace(TraceArgs),
}

const ROUTE_LONG_ABOUT: &str = "\
Add, delete and list routes. Every network (VRF) has its own routing table, looked up
by longest prefix match on the destination address of packets received on the
network's ports. Without --network, commands act on the cluster default network
`default` (`route dump` without --network lists every network).

Routes come from the configuration ([[route]] in ferrule.toml), from the control API
(these commands), from the subnets of the ports' own addresses
(connected), from the pod ports' addresses (pod) and from Ferrule's own addresses
(local). Routes added through the API are not written back to the configuration:
they are lost when ferruled restarts.";

const NEIGH_LONG_ABOUT: &str = "\
Add, delete and list neighbours: the IP-to-MAC bindings (ARP for IPv4, neighbour
discovery for IPv6) Ferrule uses to address frames to a route's next hop, or to the
destination itself on on-link routes. Ferrule resolves neighbours by itself and holds
a few packets per neighbour while it does; static neighbours, from the configuration
([[neighbor]] in ferrule.toml) or added here, are never resolved or aged out. Without
--network, commands act on the cluster default network `default` (`neigh dump`
without --network lists every network).";

const TRACE_LONG_ABOUT: &str = "\
Show what Ferrule does to a packet, stage by stage, like `ovs-appctl ofproto/trace`.

Without a subcommand, builds a synthetic packet as if it had been received on
--in-port (Ethernet, then IPv4 or IPv6 by the address family of --src and --dst, then
the --proto header), runs it through the current pipeline without sending it, and
prints each stage's decision followed by the verdict: `verdict: forward PORT` or
`verdict: drop REASON`, REASON being a drop-reason name as counted by `ferrulectl
stats`. With --json the daemon's result is printed as it is: the stages and the
verdict as JSON (docs/control-protocol.md, `trace.run`).

`trace start` and `trace dump` capture real packets instead: the next packets
received on a port are recorded with the path they took, and can be written to a
pcap file.

Examples:
  ferrulectl trace --in-port pod-web --proto tcp --src 10.1.0.5:40000 \\
      --dst 203.0.113.7:443 --tcp-flags SYN
  ferrulectl trace --in-port uplink0 --proto icmpv6 --src 2001:db8::1 \\
      --dst 2001:db8:1::5 --ttl 1
  ferrulectl --json trace --in-port pod-web --proto udp --src [2001:db8:1::5]:5353 \\
      --dst [2001:db8::53]:53";

/// `ferrulectl route` subcommands.
#[derive(Debug, Subcommand)]
pub enum RouteCommand {
    /// Add a route out of a port, or a blackhole route.
    #[command(
        long_about = "\
Add a route to PREFIX in a network: out of --port, to the next hop --via (resolved by
ARP or neighbour discovery on that port) or, without --via, straight to the
destination (an on-link route); or, with --blackhole, a route that drops matching
packets (counted as `blackhole` drops). A route to the same prefix from the
configuration or the API is replaced. Prints nothing on success, like `ip route add`.

PREFIX is ADDR/LEN with the host bits clear (10.2.0.0/16, 2001:db8::/32), or a bare
address for a host route (/32 or /128). The port must belong to the network, and
--via must be of the same IP version as PREFIX.

Examples:
  ferrulectl route add 0.0.0.0/0 --port uplink0 --via 192.0.2.1
  ferrulectl route add 10.9.0.0/16 --port uplink0
  ferrulectl route add 2001:db8:bad::/48 --blackhole --network blue",
        group(ArgGroup::new("target").required(true).args(["port", "blackhole"]))
    )]
    Add(RouteAddArgs),

    /// Delete a route.
    #[command(long_about = "\
Delete the route to PREFIX (exactly that prefix, not the longest match) from a
network. Routes from the configuration or the API can be deleted; connected, pod and
local routes follow the ports' configuration. Prints nothing on success.")]
    Del(RouteDelArgs),

    /// List routes.
    #[command(long_about = "\
List the routes of one network (--network) or of every network, in the order the
daemon keeps them: NETWORK, PREFIX, KIND (port, blackhole, or local for Ferrule's own
addresses), the output PORT, the next hop VIA (`-` for on-link routes), and the
SOURCE of the route: config, api, connected (a port address's subnet), pod (a pod
port's address) or local.")]
    Dump(NetworkArgs),
}

/// Arguments of `ferrulectl route add`.
#[derive(Debug, Args)]
pub struct RouteAddArgs {
    /// Destination prefix: ADDR/LEN, or ADDR for a host route.
    #[arg(value_name = "PREFIX")]
    pub prefix: String,

    /// Network (VRF) of the route [default: default].
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,

    /// Send matching packets out of this port.
    #[arg(long, value_name = "PORT")]
    pub port: Option<String>,

    /// Next-hop address on --port (default: on-link).
    // clap does not enforce `requires` when the required arg conflicts with one given
    // (`--blackhole`), hence the explicit conflict.
    #[arg(
        long,
        value_name = "NEXTHOP",
        requires = "port",
        conflicts_with = "blackhole"
    )]
    pub via: Option<String>,

    /// Drop matching packets.
    #[arg(long)]
    pub blackhole: bool,
}

/// Arguments of `ferrulectl route del`.
#[derive(Debug, Args)]
pub struct RouteDelArgs {
    /// Prefix of the route, as it was added.
    #[arg(value_name = "PREFIX")]
    pub prefix: String,

    /// Network (VRF) of the route [default: default].
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,
}

/// `--network` of the dump commands.
#[derive(Debug, Args)]
pub struct NetworkArgs {
    /// Only this network (default: every network).
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,
}

/// `ferrulectl neigh` subcommands.
#[derive(Debug, Subcommand)]
pub enum NeighCommand {
    /// Add a static neighbour.
    #[command(long_about = "\
Add a static neighbour: frames to IP are sent to MAC out of --port, without ARP or
neighbour discovery, until the entry is deleted. The port must belong to the
network. Prints nothing on success.

Example:
  ferrulectl neigh add 192.0.2.1 0a:1b:2c:3d:4e:5f --port uplink0")]
    Add(NeighAddArgs),

    /// Delete a neighbour.
    #[command(long_about = "\
Delete the neighbour entry of IP, static or dynamic (a dynamic entry is resolved again
when next needed). Prints nothing on success.")]
    Del(NeighDelArgs),

    /// List neighbours.
    #[command(long_about = "\
List the neighbour entries of one network (--network) or of every network: NETWORK,
IP, MAC (`-` while resolution is under way), PORT, STATE (static, reachable, stale,
or incomplete while resolution is under way), AGE (seconds since the entry was
learned or last confirmed, `-` for static entries) and HELD (packets waiting for the
resolution to finish).")]
    Dump(NetworkArgs),
}

/// Arguments of `ferrulectl neigh add`.
#[derive(Debug, Args)]
pub struct NeighAddArgs {
    /// IPv4 or IPv6 address of the neighbour.
    #[arg(value_name = "IP")]
    pub ip: String,

    /// Its MAC address, aa:bb:cc:dd:ee:ff.
    #[arg(value_name = "MAC")]
    pub mac: String,

    /// Port the neighbour is reached through.
    #[arg(long, value_name = "PORT")]
    pub port: String,

    /// Network (VRF) of the entry [default: default].
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,
}

/// Arguments of `ferrulectl neigh del`.
#[derive(Debug, Args)]
pub struct NeighDelArgs {
    /// IPv4 or IPv6 address of the neighbour.
    #[arg(value_name = "IP")]
    pub ip: String,

    /// Network (VRF) of the entry [default: default].
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,
}

/// `ferrulectl trace`: a synthetic run (the options) or a capture (the subcommands).
#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: Option<TraceCommand>,

    #[command(flatten)]
    pub run: TraceRunArgs,
}

/// The synthetic packet of `ferrulectl trace`. The four required options are
/// `Option`s because a subcommand lifts the requirement (`subcommand_negates_reqs`).
#[derive(Debug, Args)]
pub struct TraceRunArgs {
    /// Port the packet is received on.
    #[arg(long, value_name = "PORT", required = true)]
    pub in_port: Option<String>,

    /// Protocol above IP.
    #[arg(long, value_enum, value_name = "PROTO", required = true)]
    pub proto: Option<TraceProto>,

    /// Source: IP, IP:PORT or [IPv6]:PORT.
    #[arg(long, value_name = "IP[:PORT]", required = true)]
    pub src: Option<String>,

    /// Destination: IP, IP:PORT or [IPv6]:PORT.
    #[arg(long, value_name = "IP[:PORT]", required = true)]
    pub dst: Option<String>,

    /// TCP flags, comma-separated: SYN,ACK,FIN,RST,PSH,URG,ECE,CWR [default: SYN].
    #[arg(long, value_name = "FLAGS")]
    pub tcp_flags: Option<String>,

    /// Total IP length in bytes [default: the smallest packet of the protocol].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(20..=9600))]
    pub len: Option<u16>,

    /// IPv4 TTL or IPv6 hop limit [default: 64].
    #[arg(long, value_name = "N")]
    pub ttl: Option<u8>,
}

impl TraceRunArgs {
    /// Whether any of the options was given.
    pub fn is_empty(&self) -> bool {
        let TraceRunArgs {
            in_port,
            proto,
            src,
            dst,
            tcp_flags,
            len,
            ttl,
        } = self;
        in_port.is_none()
            && proto.is_none()
            && src.is_none()
            && dst.is_none()
            && tcp_flags.is_none()
            && len.is_none()
            && ttl.is_none()
    }

    /// The params of `trace.run`; `None` when a required option is missing.
    pub fn request(&self) -> Option<TraceRun> {
        Some(TraceRun {
            in_port: self.in_port.clone()?,
            proto: self.proto?.as_str().to_string(),
            src: self.src.clone()?,
            dst: self.dst.clone()?,
            tcp_flags: self.tcp_flags.clone(),
            len: self.len,
            ttl: self.ttl,
            src_mac: None,
            dst_mac: None,
        })
    }
}

/// `--proto` of `ferrulectl trace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TraceProto {
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Icmpv6,
}

impl TraceProto {
    /// The name `trace.run` expects.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceProto::Tcp => "tcp",
            TraceProto::Udp => "udp",
            TraceProto::Sctp => "sctp",
            TraceProto::Icmp => "icmp",
            TraceProto::Icmpv6 => "icmpv6",
        }
    }
}

/// `ferrulectl trace` subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Capture the next packets received on a port.
    #[command(long_about = "\
Capture the next --count packets received on --port, each with the stages it went
through and its verdict, as `ferrulectl trace` shows for a synthetic packet. Read
them with `ferrulectl trace dump`.

Example:
  ferrulectl trace start --port uplink0 --count 10")]
    Start(TraceStartArgs),

    /// Show the captured packets, optionally writing them to a pcap file.
    #[command(long_about = "\
Show the packets captured since `ferrulectl trace start`: for each one a header line
(#N, the port, the receive time in seconds since ferruled started, the length on the
wire), its stages and its verdict; then how many packets are still to be captured.

With --pcap FILE, the packets are also written to FILE as a classic pcap file
(Ethernet link type, microsecond timestamps counted from the daemon's start) that
tcpdump, tshark and Wireshark open. Only the first bytes of each packet are kept by
the daemon; the pcap records the original length too.

Example:
  ferrulectl trace dump --pcap /tmp/trace.pcap && tshark -r /tmp/trace.pcap")]
    Dump(TraceDumpArgs),
}

/// Arguments of `ferrulectl trace start`.
#[derive(Debug, Args)]
pub struct TraceStartArgs {
    /// Port whose received packets are captured.
    #[arg(long, value_name = "PORT")]
    pub port: String,

    /// How many packets to capture.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub count: u32,
}

/// Arguments of `ferrulectl trace dump`.
#[derive(Debug, Args)]
pub struct TraceDumpArgs {
    /// Also write the captured packets to this pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
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
        Command::Policy { ref command } => policy::run(&mut ctx, command),
        Command::Ct { ref command } => ct::run(&mut ctx, command),
        Command::Nat { ref command } => ct::run_nat(&mut ctx, command),
        Command::Trace(ref args) => trace(&mut ctx, args),
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

fn route(ctx: &mut Ctx<'_>, command: &RouteCommand) -> Result<(), CtlError> {
    match command {
        RouteCommand::Add(a) => {
            let request = RouteAdd {
                network: a.network.clone(),
                prefix: a.prefix.clone(),
                port: a.port.clone(),
                via: a.via.clone(),
                blackhole: a.blackhole,
            };
            ctx.query(route_method::ADD, params(&request)?, nothing)
        }
        RouteCommand::Del(a) => {
            let request = RouteDel {
                network: a.network.clone(),
                prefix: a.prefix.clone(),
            };
            ctx.query(route_method::DEL, params(&request)?, nothing)
        }
        RouteCommand::Dump(a) => {
            let request = NetworkFilter {
                network: a.network.clone(),
            };
            ctx.query(route_method::DUMP, params(&request)?, render_routes)
        }
    }
}

fn neigh(ctx: &mut Ctx<'_>, command: &NeighCommand) -> Result<(), CtlError> {
    match command {
        NeighCommand::Add(a) => {
            let request = NeighAdd {
                network: a.network.clone(),
                ip: a.ip.clone(),
                mac: a.mac.clone(),
                port: a.port.clone(),
            };
            ctx.query(neigh_method::ADD, params(&request)?, nothing)
        }
        NeighCommand::Del(a) => {
            let request = NeighDel {
                network: a.network.clone(),
                ip: a.ip.clone(),
            };
            ctx.query(neigh_method::DEL, params(&request)?, nothing)
        }
        NeighCommand::Dump(a) => {
            let request = NetworkFilter {
                network: a.network.clone(),
            };
            ctx.query(neigh_method::DUMP, params(&request)?, render_neighbors)
        }
    }
}

fn trace(ctx: &mut Ctx<'_>, args: &TraceArgs) -> Result<(), CtlError> {
    if args.command.is_some() && !args.run.is_empty() {
        return Err(CtlError::Usage(
            "--in-port, --proto, --src, --dst, --tcp-flags, --len and --ttl describe the \
             packet of `ferrulectl trace`; they cannot be used with `trace start` or \
             `trace dump`"
                .to_string(),
        ));
    }
    match &args.command {
        Some(TraceCommand::Start(a)) => {
            let request = TraceStart {
                port: a.port.clone(),
                count: a.count,
            };
            ctx.query(trace_method::START, params(&request)?, |_: &IgnoredAny| {
                render_trace_start(&request)
            })
        }
        Some(TraceCommand::Dump(a)) => trace_dump(ctx, a.pcap.as_deref()),
        None => {
            // clap requires the four options when no subcommand is given.
            let request = args.run.request().ok_or_else(|| {
                CtlError::Usage(
                    "trace needs --in-port, --proto, --src and --dst, or a subcommand".to_string(),
                )
            })?;
            ctx.query(trace_method::RUN, params(&request)?, render_trace)
        }
    }
}

/// `ferrulectl trace dump [--pcap FILE]`.
fn trace_dump(ctx: &mut Ctx<'_>, pcap: Option<&Path>) -> Result<(), CtlError> {
    let Some(path) = pcap else {
        return ctx.query(trace_method::DUMP, Value::Null, render_trace_dump);
    };
    let raw = ctx.client()?.call(trace_method::DUMP, Value::Null)?;
    let dump: TraceDump = serde_json::from_value(raw.clone())
        .map_err(|e| ClientError::Protocol(format!("result of `{}`: {e}", trace_method::DUMP)))?;
    // Every packet is decoded before anything is written or printed.
    let records = pcap_records(&dump.packets)?;
    std::fs::write(path, pcap_file(&records)).map_err(|source| CtlError::File {
        path: path.to_path_buf(),
        source,
    })?;
    let wrote = format!("wrote {} to {}\n", packets(records.len()), path.display());
    if ctx.json {
        ctx.print_json(&raw)?;
        // Keep stdout pure JSON.
        eprint!("{wrote}");
        Ok(())
    } else {
        ctx.print(&render_trace_dump(&dump))?;
        ctx.print(&wrote)
    }
}

/// `1 packet`, `2 packets`.
fn packets(n: usize) -> String {
    if n == 1 {
        "1 packet".to_string()
    } else {
        format!("{n} packets")
    }
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
    let mut out = table.to_string();
    let pods: Vec<&ferrule_api::PortInfo> = list
        .ports
        .iter()
        .filter(|p| p.pod.is_some() || p.vhost_user.is_some() || p.gateway_ip.is_some())
        .collect();
    if !pods.is_empty() {
        let mut t = Table::new([
            "NAME",
            "POD",
            "GATEWAY-IP",
            "GATEWAY-MAC",
            "VHOST-USER",
            "MODE",
        ]);
        for p in pods {
            let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
            t.row([
                p.name.clone(),
                dash(&p.pod),
                dash(&p.gateway_ip),
                dash(&p.gateway_mac),
                dash(&p.vhost_user),
                dash(&p.vhost_mode),
            ]);
        }
        out.push('\n');
        out.push_str(&t.to_string());
    }
    out
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

/// `ferrulectl route dump`.
pub fn render_routes(dump: &RouteDump) -> String {
    if dump.routes.is_empty() {
        return "no routes\n".to_string();
    }
    let mut table = Table::new(["NETWORK", "PREFIX", "KIND", "PORT", "VIA", "SOURCE"]);
    for r in &dump.routes {
        table.row([
            r.network.clone(),
            r.prefix.clone(),
            r.kind.clone(),
            or_dash(r.port.as_deref()),
            or_dash(r.via.as_deref()),
            r.source.clone(),
        ]);
    }
    table.to_string()
}

/// `ferrulectl neigh dump`.
pub fn render_neighbors(dump: &NeighDump) -> String {
    if dump.neighbors.is_empty() {
        return "no neighbours\n".to_string();
    }
    let mut table = Table::new(["NETWORK", "IP", "MAC", "PORT", "STATE", "AGE", "HELD"]);
    for n in &dump.neighbors {
        table.row([
            n.network.clone(),
            n.ip.clone(),
            or_dash(Some(n.mac.as_str())),
            n.port.clone(),
            n.state.clone(),
            format_age(n.age_secs, &n.state),
            n.held_packets.to_string(),
        ]);
    }
    table.to_string()
}

/// `ferrulectl trace`: the stages, then the verdict line.
pub fn render_trace(result: &TraceResult) -> String {
    let mut out = render_stages(&result.stages, "");
    out.push_str(&render_verdict(&result.verdict));
    out.push('\n');
    out
}

/// `ferrulectl trace start`.
pub fn render_trace_start(start: &TraceStart) -> String {
    let what = if start.count == 1 {
        "packet".to_string()
    } else {
        format!("{} packets", start.count)
    };
    format!("tracing the next {what} received on {}\n", start.port)
}

/// `ferrulectl trace dump`: each packet's header line, stages and verdict, then how
/// many packets are still to be captured.
pub fn render_trace_dump(dump: &TraceDump) -> String {
    let mut out = String::new();
    if dump.packets.is_empty() {
        out.push_str("no packets captured\n");
    }
    for (k, p) in dump.packets.iter().enumerate() {
        let time = if p.time_secs.is_finite() {
            format!("{:.3}s", p.time_secs)
        } else {
            "-".to_string()
        };
        out.push_str(&format!(
            "#{}  port {}  t={time}  len {}\n",
            k + 1,
            p.port,
            p.len
        ));
        out.push_str(&render_stages(&p.stages, "  "));
        out.push_str(&format!("  {}\n\n", render_verdict(&p.verdict)));
    }
    out.push_str(&format!("remaining: {}\n", dump.remaining));
    out
}

/// One `STAGE  DETAIL` line per stage, stage names padded to a common width.
fn render_stages(stages: &[TraceStage], indent: &str) -> String {
    let width = stages
        .iter()
        .map(|s| s.stage.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for s in stages {
        let line = format!("{indent}{:<width$}  {}", s.stage, s.detail);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `verdict: forward PORT` or `verdict: drop REASON`.
pub fn render_verdict(verdict: &TraceVerdict) -> String {
    match verdict {
        TraceVerdict::Forward { port } => format!("verdict: forward {port}"),
        TraceVerdict::Drop { reason } => format!("verdict: drop {reason}"),
        TraceVerdict::Handoff { worker } => format!("verdict: handed to worker {worker}"),
    }
}

/// `-` for an absent or empty value.
fn or_dash(value: Option<&str>) -> String {
    match value {
        Some(v) if !v.is_empty() => v.to_string(),
        _ => "-".to_string(),
    }
}

/// A neighbour's age as `12.3s`; `-` for static entries, which do not age.
fn format_age(secs: f64, state: &str) -> String {
    if state == "static" || !secs.is_finite() || secs < 0.0 {
        return "-".to_string();
    }
    format!("{secs:.1}s")
}

/// Largest packet a pcap record of `trace dump --pcap` holds (the file's snaplen).
pub const PCAP_SNAPLEN: u32 = 65_535;

/// One packet of a pcap file.
#[derive(Debug, Clone, PartialEq)]
pub struct PcapRecord {
    /// Seconds since the daemon started (the record's timestamp).
    pub time_secs: f64,
    /// The bytes captured (at most [`PCAP_SNAPLEN`] are written).
    pub data: Vec<u8>,
    /// Length on the wire.
    pub orig_len: u32,
}

/// Decodes the captured bytes of `trace.dump` packets; bad hex is an unexpected reply.
pub fn pcap_records(packets: &[TracedPacket]) -> Result<Vec<PcapRecord>, CtlError> {
    packets
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let data = decode_hex(&p.data_hex).map_err(|e| {
                ClientError::Protocol(format!(
                    "result of `{}`: packets[{i}].data_hex: {e}",
                    trace_method::DUMP
                ))
            })?;
            Ok(PcapRecord {
                time_secs: p.time_secs,
                data,
                orig_len: p.len,
            })
        })
        .collect()
}

/// A classic pcap file (little-endian, magic 0xa1b2c3d4, version 2.4, microsecond
/// timestamps, link type 1 Ethernet) holding `records`.
pub fn pcap_file(records: &[PcapRecord]) -> Vec<u8> {
    const MAGIC: u32 = 0xa1b2_c3d4;
    const LINKTYPE_ETHERNET: u32 = 1;
    let mut out = Vec::with_capacity(24 + records.iter().map(|r| 16 + r.data.len()).sum::<usize>());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes()); // thiszone: timestamps are UTC
    out.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    out.extend_from_slice(&PCAP_SNAPLEN.to_le_bytes());
    out.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    for r in records {
        let (secs, micros) = pcap_timestamp(r.time_secs);
        let data = &r.data[..r.data.len().min(PCAP_SNAPLEN as usize)];
        // Fits: at most PCAP_SNAPLEN.
        let caplen = data.len() as u32;
        out.extend_from_slice(&secs.to_le_bytes());
        out.extend_from_slice(&micros.to_le_bytes());
        out.extend_from_slice(&caplen.to_le_bytes());
        // Readers reject a record longer than the packet it says it came from.
        let orig_len = r
            .orig_len
            .max(u32::try_from(r.data.len()).unwrap_or(u32::MAX));
        out.extend_from_slice(&orig_len.to_le_bytes());
        out.extend_from_slice(data);
    }
    out
}

/// Seconds and microseconds of a pcap record; clamped to what the format holds.
fn pcap_timestamp(secs: f64) -> (u32, u32) {
    if !secs.is_finite() || secs <= 0.0 {
        return (0, 0);
    }
    if secs >= f64::from(u32::MAX) {
        return (u32::MAX, 999_999);
    }
    // In range (checked above); `as` truncates towards zero, which is intended.
    let micros = (secs * 1e6).round() as u64;
    ((micros / 1_000_000) as u32, (micros % 1_000_000) as u32)
}

/// Decodes hex text (either case, no separators).
pub fn decode_hex(text: &str) -> Result<Vec<u8>, String> {
    let pairs = text.as_bytes().chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return Err(format!("odd number of hex digits ({})", text.len()));
    }
    let digit = |i: usize, b: u8| -> Result<u8, String> {
        match b {
            b'0'..=b'9' => Ok(b - b'0'),
            b'a'..=b'f' => Ok(b - b'a' + 10),
            b'A'..=b'F' => Ok(b - b'A' + 10),
            _ => Err(format!("not a hex digit at offset {i}")),
        }
    };
    pairs
        .enumerate()
        .map(|(i, pair)| Ok(digit(2 * i, pair[0])? << 4 | digit(2 * i + 1, pair[1])?))
        .collect()
}

/// What a drop reason means, for the drop reasons this ferrulectl knows.
pub fn drop_reason_description(reason: &str) -> Option<&'static str> {
    DropReason::from_name(reason).map(DropReason::description)
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
            gateway_ip: None,
            gateway_mac: None,
            vhost_user: None,
            vhost_mode: None,
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
        };
        let dump = RouteDump {
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
        };
        assert_eq!(
            render_routes(&dump),
            "NETWORK  PREFIX         KIND       PORT     VIA        SOURCE\n\
             default  0.0.0.0/0      port       uplink0  192.0.2.1  config\n\
             default  10.1.0.5/32    port       pod-web  -          pod\n\
             blue     2001:db8::/32  blackhole  -        -          api\n"
        );
        assert_eq!(render_routes(&RouteDump { routes: vec![] }), "no routes\n");
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
