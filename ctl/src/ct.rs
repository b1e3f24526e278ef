//! `ferrulectl ct` and `ferrulectl nat`: list, flush and count tracked connections and
//! show masqueraded ones, and the renderers of their replies.

use super::{params, CtlError, Ctx};
use crate::table::Table;
use clap::{Args, Subcommand};
use ferrule_api::{
    ct_method, nat_method, CtDump, CtEntry, CtFilterParams, CtFlushed, CtStatsResult, NatDump,
};
use serde_json::Value;

pub const CT_LONG_ABOUT: &str = "\
List, flush and count the connections Ferrule tracks, like `conntrack -L|-F|-S`.

Each worker keeps its own connection table (a connection lives on the worker that owns
it: the one its SNAT port or a hash of its addresses and ports names). Ferrule tracks
the connections that a `reflect` ACL rule let through and those it masquerades; their
replies pass the ACLs, and after an `acl apply` the next packet of each is checked
against the new rules. Zones are networks: the same addresses in two networks are two
connections.";

pub const NAT_LONG_ABOUT: &str = "\
Show source NAT: every masqueraded connection with the pod's address and port, the node
address and port it became, and the remote end (see `ferrulectl vpc`).";

/// `ferrulectl ct` subcommands.
#[derive(Debug, Subcommand)]
pub enum CtCommand {
    /// List tracked connections.
    #[command(long_about = "\
List tracked connections, one per line as `conntrack -L` does: protocol, state, seconds
left before it expires, then the original direction (src, dst, ports, packets, bytes)
and the reply direction as it travels on the wire (after NAT), the SNAT mapping if any,
the zone (network) and the worker that holds it. Filters combine; --limit caps the
entries (default 10000).")]
    Dump(CtDumpArgs),

    /// Remove tracked connections.
    #[command(long_about = "\
Remove the tracked connections matching the filters (all of them without any), like
`conntrack -F` / `conntrack -D`. Their next packets are treated as new: checked by the
ACLs, masqueraded anew. Prints how many were removed.")]
    Flush(CtFilterArgs),

    /// Entries and counters per worker and zone.
    #[command(long_about = "\
Show each worker's table (entries, capacity, connections inserted, removed and expired,
new connections refused because the table or the zone was full or their tuple clashed,
packets invalid in their connection's state), entries per zone, and the conntrack and
NAT drop reasons: ct-invalid, ct-table-full, snat-ports-exhausted, handoff-full.")]
    Stats,
}

/// `ferrulectl nat` subcommands.
#[derive(Debug, Subcommand)]
pub enum NatCommand {
    /// List masqueraded connections with their mappings.
    Dump(CtDumpArgs),
}

/// The filters of `ct dump`, `ct flush` and `nat dump`.
#[derive(Debug, Args)]
pub struct CtFilterArgs {
    /// Only this zone (network).
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,
    /// Source address of the original direction.
    #[arg(long, value_name = "IP")]
    pub src: Option<String>,
    /// Destination address of the original direction.
    #[arg(long, value_name = "IP")]
    pub dst: Option<String>,
    /// tcp, udp, sctp, icmp, icmpv6 (any case) or a protocol number.
    #[arg(long, value_name = "PROTO")]
    pub proto: Option<String>,
    /// A port of either end, either direction (ICMP echo: the identifier).
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// A state, any case: SYN_SENT, SYN_RECV, ESTABLISHED, FIN_WAIT, CLOSE_WAIT,
    /// LAST_ACK, TIME_WAIT, CLOSE, SYN_SENT2 (TCP), UNREPLIED, ASSURED (UDP), ECHO,
    /// OTHER; any other name is refused.
    #[arg(long, value_name = "STATE")]
    pub state: Option<String>,
}

/// Arguments of the dumps.
#[derive(Debug, Args)]
pub struct CtDumpArgs {
    #[command(flatten)]
    pub filter: CtFilterArgs,
    /// At most this many entries [default: 10000].
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

impl CtFilterArgs {
    fn request(&self, limit: Option<usize>) -> CtFilterParams {
        CtFilterParams {
            network: self.network.clone(),
            src: self.src.clone(),
            dst: self.dst.clone(),
            proto: self.proto.clone(),
            port: self.port,
            state: self.state.clone(),
            limit,
        }
    }
}

/// Runs a `ct` subcommand.
pub fn run(ctx: &mut Ctx<'_>, command: &CtCommand) -> Result<(), CtlError> {
    match command {
        CtCommand::Dump(a) => ctx.query(
            ct_method::DUMP,
            params(&a.filter.request(a.limit))?,
            render_ct_dump,
        ),
        CtCommand::Flush(f) => ctx.query(
            ct_method::FLUSH,
            params(&f.request(None))?,
            |r: &CtFlushed| format!("{} connections removed\n", r.removed),
        ),
        CtCommand::Stats => ctx.query(ct_method::STATS, Value::Null, render_ct_stats),
    }
}

/// Runs a `nat` subcommand.
pub fn run_nat(ctx: &mut Ctx<'_>, command: &NatCommand) -> Result<(), CtlError> {
    match command {
        NatCommand::Dump(a) => ctx.query(
            nat_method::DUMP,
            params(&a.filter.request(a.limit))?,
            render_nat_dump,
        ),
    }
}

fn render_entry(e: &CtEntry) -> String {
    let o = &e.original;
    let r = &e.reply;
    let mut line = format!(
        "{:<6} {:<11} {:>7.0} src={} dst={} sport={} dport={} packets={} bytes={} \
         src={} dst={} sport={} dport={} packets={} bytes={}",
        e.proto,
        e.state,
        e.time_left_secs.ceil(),
        o.src,
        o.dst,
        o.sport,
        o.dport,
        o.packets,
        o.bytes,
        r.src,
        r.dst,
        r.sport,
        r.dport,
        r.packets,
        r.bytes
    );
    if let Some(snat) = &e.snat {
        line.push_str(&format!(" snat={snat}"));
    }
    line.push_str(&format!(" zone={} worker={}\n", e.network, e.worker));
    line
}

/// Human output of `ct dump`.
pub fn render_ct_dump(d: &CtDump) -> String {
    let mut out: String = d.entries.iter().map(render_entry).collect();
    out.push_str(&format!(
        "{} connections{}\n",
        d.entries.len(),
        if d.truncated {
            " (truncated: raise --limit)"
        } else {
            ""
        }
    ));
    out
}

/// Human output of `ct stats`.
pub fn render_ct_stats(s: &CtStatsResult) -> String {
    let mut t = Table::new([
        "WORKER",
        "ENTRIES",
        "CAPACITY",
        "INSERTS",
        "REMOVALS",
        "EXPIRED",
        "TABLE-FULL",
        "ZONE-FULL",
        "CLASHES",
        "INVALID",
    ]);
    for w in &s.workers {
        t.row([
            w.worker.to_string(),
            w.entries.to_string(),
            w.capacity.to_string(),
            w.inserts.to_string(),
            w.removals.to_string(),
            w.expirations.to_string(),
            w.table_full.to_string(),
            w.zone_full.to_string(),
            w.clashes.to_string(),
            w.invalid.to_string(),
        ]);
    }
    let mut z = Table::new(["NETWORK", "ENTRIES"]);
    for zone in &s.zones {
        z.row([zone.network.clone(), zone.entries.to_string()]);
    }
    let mut d = Table::new(["REASON", "PACKETS"]);
    for drop in &s.drops {
        d.row([drop.reason.clone(), drop.packets.to_string()]);
    }
    let limits = if s.max_connections == 0 {
        String::new()
    } else {
        format!(
            "node-wide limits: {} connections, {} per network\n",
            s.max_connections, s.max_per_zone
        )
    };
    format!("{t}\n{limits}{z}\n{d}")
}

/// Human output of `nat dump`.
pub fn render_nat_dump(d: &NatDump) -> String {
    let mut t = Table::new([
        "PROTO", "INSIDE", "OUTSIDE", "REMOTE", "STATE", "TTL", "WORKER",
    ]);
    for e in &d.entries {
        t.row([
            e.proto.clone(),
            e.inside.clone(),
            e.outside.clone(),
            e.remote.clone(),
            e.state.clone(),
            format!("{:.0}", e.time_left_secs.ceil()),
            e.worker.to_string(),
        ]);
    }
    let mut out = if d.entries.is_empty() {
        String::new()
    } else {
        t.to_string()
    };
    out.push_str(&format!(
        "{} masqueraded connections{}\n",
        d.entries.len(),
        if d.truncated {
            " (truncated: raise --limit)"
        } else {
            ""
        }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrule_api::{CtTuple, NatEntry};

    #[test]
    fn dump_lines_read_like_conntrack() {
        let tuple = |src: &str, dst: &str, sport, dport| CtTuple {
            src: src.into(),
            dst: dst.into(),
            sport,
            dport,
            packets: 3,
            bytes: 180,
        };
        let d = CtDump {
            entries: vec![CtEntry {
                worker: 1,
                network: "default".into(),
                proto: "tcp".into(),
                state: "ESTABLISHED".into(),
                time_left_secs: 431999.2,
                original: tuple("10.1.0.2", "203.0.113.1", 40000, 8080),
                reply: tuple("203.0.113.1", "192.0.2.10", 8080, 61000),
                snat: Some("192.0.2.10:61000".into()),
            }],
            truncated: false,
        };
        let text = render_ct_dump(&d);
        assert!(
            text.starts_with(
                "tcp    ESTABLISHED  432000 src=10.1.0.2 dst=203.0.113.1 sport=40000 dport=8080"
            ),
            "{text}"
        );
        assert!(
            text.contains("src=203.0.113.1 dst=192.0.2.10 sport=8080 dport=61000"),
            "{text}"
        );
        assert!(
            text.contains("snat=192.0.2.10:61000 zone=default worker=1\n1 connections\n"),
            "{text}"
        );
        let n = NatDump {
            entries: vec![NatEntry {
                worker: 0,
                proto: "icmp".into(),
                inside: "10.1.0.2:4660".into(),
                outside: "192.0.2.10:61001".into(),
                remote: "203.0.113.1".into(),
                state: "ECHO".into(),
                time_left_secs: 29.5,
            }],
            truncated: true,
        };
        let text = render_nat_dump(&n);
        assert!(
            text.contains("10.1.0.2:4660") && text.contains("truncated"),
            "{text}"
        );
    }
}
