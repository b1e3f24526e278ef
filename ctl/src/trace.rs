//! `ferrulectl trace`: a synthetic packet through the pipeline (`trace.run`), and live
//! captures of real ones (`trace start`, `trace dump`, with `--pcap` through [`crate::pcap`]).

use super::*;

pub(crate) const TRACE_LONG_ABOUT: &str = "\
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

pub(crate) fn trace(ctx: &mut Ctx<'_>, args: &TraceArgs) -> Result<(), CtlError> {
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
pub(crate) fn trace_dump(ctx: &mut Ctx<'_>, pcap: Option<&Path>) -> Result<(), CtlError> {
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
pub(crate) fn packets(n: usize) -> String {
    if n == 1 {
        "1 packet".to_string()
    } else {
        format!("{n} packets")
    }
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
pub(crate) fn render_stages(stages: &[TraceStage], indent: &str) -> String {
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
        TraceVerdict::DnsProxy => "verdict: to the DNS proxy".to_string(),
    }
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
