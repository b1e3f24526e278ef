//! `ferrulectl acl`: apply an ACL file (YAML or JSON), dump tables with their hit
//! counters, clear counters; and the renderers of their replies.

use super::{params, CtlError, Ctx};
use crate::table::Table;
use clap::{Args, Subcommand};
use ferrule_api::{
    acl_method, AclApplied, AclClearParams, AclCleared, AclDump, AclDumpParams, AclTableDump,
};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

pub const ACL_LONG_ABOUT: &str = "\
Apply, list and reset Ferrule's access control lists.

An ACL table is an ordered list of rules matched on source and destination prefix,
protocol and source and destination port range; the first matching rule decides
(permit, deny, or reflect: permit and let the replies back in), and a packet no rule
matches is denied. A table is attached to a port for traffic entering the switch from
it (ingress) or leaving through it (egress); the global table applies on egress of
every uplink port, after the port's own table. Packets Ferrule answers itself (ARP,
neighbour discovery, echo to its own addresses on the port) are not subject to ACLs.

The whole ACL state is applied at once (`acl apply`): only changed tables are
recompiled, the new state reaches every worker in one generation without stopping
traffic, and the hit counters of unchanged rules carry on. See docs/acl.md.";

/// `ferrulectl acl` subcommands.
#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Replace the ACL state with the tables and attachments of a file.
    #[command(long_about = "\
Replace the whole ACL state with the one in FILE (YAML, or JSON when the name ends in
.json; `-` reads standard input). Tables, attachments or a global table left out of
the file are removed. The daemon validates everything first: on any error it answers
with the table, rule index and field at fault, and the rules in force stay as they
were. Prints the generation now in force and which tables were added, changed or
removed.

File format:
  tables:
    - name: pod-a-egress
      rules:                       # first match wins
        - {action: permit, proto: tcp, src: 10.1.0.0/16, dst_port: 80, origin: \"x/allow-web\"}
        - {action: permit, proto: udp, dst_port: \"5000-5010\"}
        - {action: deny}           # an omitted field matches anything
  attach:
    - {port: pod-a, direction: egress, table: pod-a-egress}
  global: null                     # or the name of a table for uplink egress

Rule fields: action (permit, deny or reflect; required), proto (any, tcp, udp, sctp,
icmp, icmpv6 or 0-255; default any), src and dst (CIDR, IPv4 or IPv6; default any),
src_port and dst_port (N or \"LO-HI\"; only with tcp, udp or sctp; default any),
origin (free text, shown by dump).

Examples:
  ferrulectl acl apply -f policy.yaml
  ferrulectl acl apply -f policy.json --dry-run")]
    Apply(AclApplyArgs),

    /// List tables, their rules with hit counters, and where they are attached.
    #[command(long_about = "\
List every ACL table in force like `vppctl show acl-plugin acl`: the table's name,
where it is attached (PORT DIRECTION, or global for uplink egress), then its rules in
match order with their packet and byte hit counts summed over workers and the policy
they came from, and last the packets no rule matched (denied).

With --port, only the tables that apply at that port (its own, and the global table
on an uplink); with --table, only that table.")]
    Dump(AclDumpArgs),

    /// Reset rule hit counters.
    #[command(long_about = "\
Reset the hit counters of every rule of every table, or of one table's rules with
--table. Prints how many counters were reset.")]
    ClearCounters(AclClearArgs),
}

/// Arguments of `ferrulectl acl apply`.
#[derive(Debug, Args)]
pub struct AclApplyArgs {
    /// The ACL state: YAML, or JSON for a .json name; `-` for standard input.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,

    /// Validate and compile, but do not apply.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `ferrulectl acl dump`.
#[derive(Debug, Args)]
pub struct AclDumpArgs {
    /// Only the tables applying at this port.
    #[arg(long, value_name = "PORT")]
    pub port: Option<String>,

    /// Only this table.
    #[arg(long, value_name = "TABLE")]
    pub table: Option<String>,
}

/// Arguments of `ferrulectl acl clear-counters`.
#[derive(Debug, Args)]
pub struct AclClearArgs {
    /// Only this table's counters.
    #[arg(long, value_name = "TABLE")]
    pub table: Option<String>,
}

/// Runs an `acl` subcommand.
pub fn run(ctx: &mut Ctx<'_>, command: &AclCommand) -> Result<(), CtlError> {
    match command {
        AclCommand::Apply(a) => {
            let mut request = load(&a.file)?;
            if a.dry_run {
                if let Value::Object(map) = &mut request {
                    map.insert("dry_run".into(), Value::Bool(true));
                }
            }
            ctx.query(acl_method::APPLY, request, render_applied)
        }
        AclCommand::Dump(a) => {
            let request = AclDumpParams {
                port: a.port.clone(),
                table: a.table.clone(),
            };
            ctx.query(acl_method::DUMP, params(&request)?, render_dump)
        }
        AclCommand::ClearCounters(a) => {
            let request = AclClearParams {
                table: a.table.clone(),
            };
            ctx.query(
                acl_method::CLEAR_COUNTERS,
                params(&request)?,
                |c: &AclCleared| format!("{} counters reset\n", c.counters),
            )
        }
    }
}

/// Reads an ACL file: JSON when the name ends in `.json`, else YAML (which also reads
/// JSON). The top level must be a map.
pub fn load(path: &Path) -> Result<Value, CtlError> {
    let file_err = |source| CtlError::File {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    if path == Path::new("-") {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(file_err)?;
    } else {
        text = std::fs::read_to_string(path).map_err(file_err)?;
    }
    parse(&text, path.extension().is_some_and(|e| e == "json"))
        .map_err(|e| CtlError::Usage(format!("{}: {e}", path.display())))
}

/// Parses ACL file text.
pub fn parse(text: &str, json: bool) -> Result<Value, String> {
    let value: Value = if json {
        serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?
    } else {
        serde_yaml::from_str(text).map_err(|e| format!("invalid YAML: {e}"))?
    };
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(Default::default())),
        _ => Err("expected a map with `tables`, `attach` and `global`".into()),
    }
}

/// Human output of `acl apply`: the reply's one-line summary.
pub fn render_applied(a: &AclApplied) -> String {
    format!("{}\n", a.summary())
}

fn render_table(t: &AclTableDump) -> String {
    let mut places: Vec<String> = t
        .attached
        .iter()
        .map(|a| format!("{} {}", a.port, a.direction))
        .collect();
    if t.global {
        places.push("global (egress of every uplink)".into());
    }
    let mut out = format!(
        "acl {}: {} rules, applied {}\n",
        t.name,
        t.rules.len(),
        if places.is_empty() {
            "nowhere".to_string()
        } else {
            places.join(", ")
        }
    );
    let mut table = Table::new([
        "#", "ACTION", "PROTO", "SRC", "DST", "SPORT", "DPORT", "PACKETS", "BYTES", "ORIGIN",
    ]);
    for r in &t.rules {
        table.row([
            r.index.to_string(),
            r.action.clone(),
            r.proto.clone(),
            r.src.clone(),
            r.dst.clone(),
            r.src_port.clone(),
            r.dst_port.clone(),
            r.hits.packets.to_string(),
            r.hits.bytes.to_string(),
            r.origin.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    table.row([
        "-".to_string(),
        "deny".into(),
        "(no rule matched)".into(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        t.no_match.packets.to_string(),
        t.no_match.bytes.to_string(),
        "-".into(),
    ]);
    for line in table.to_string().lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Human output of `acl dump`.
pub fn render_dump(d: &AclDump) -> String {
    let mut out = if d.tables.is_empty() {
        "no ACL tables\n".to_string()
    } else {
        d.tables
            .iter()
            .map(render_table)
            .collect::<Vec<_>>()
            .join("\n")
    };
    if !d.pending.is_empty() {
        out.push_str("\nwaiting for their port:\n");
        for p in &d.pending {
            let target = match (&p.port, &p.pod) {
                (Some(port), _) => format!("port {port}"),
                (None, Some(pod)) => format!("pod {pod}"),
                (None, None) => "-".into(),
            };
            out.push_str(&format!("  {} {} {target}\n", p.table, p.direction));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrule_api::{AclAttachment, AclRuleDump, Hits};

    #[test]
    fn yaml_and_json_files_parse_to_the_same_request() {
        let yaml = "tables:\n  - name: t\n    rules:\n      - {action: permit, proto: tcp, dst_port: 80}\n      - {action: deny}\nattach:\n  - {port: pod-a, direction: egress, table: t}\nglobal: null\n";
        let json = r#"{"tables":[{"name":"t","rules":[{"action":"permit","proto":"tcp","dst_port":80},{"action":"deny"}]}],"attach":[{"port":"pod-a","direction":"egress","table":"t"}],"global":null}"#;
        assert_eq!(parse(yaml, false).unwrap(), parse(json, true).unwrap());
        assert!(parse("- a\n- b\n", false)
            .unwrap_err()
            .contains("expected a map"));
        assert!(parse("tables: [", false)
            .unwrap_err()
            .contains("invalid YAML"));
        assert_eq!(parse("", false).unwrap(), serde_json::json!({}));
    }

    #[test]
    fn dump_lists_rules_hits_and_attachments() {
        let rule = |index, action: &str, packets| AclRuleDump {
            index,
            action: action.into(),
            proto: "tcp".into(),
            src: "10.1.0.0/16".into(),
            dst: "any".into(),
            src_port: "any".into(),
            dst_port: "80".into(),
            origin: Some("x/allow-web".into()),
            hits: Hits {
                packets,
                bytes: packets * 60,
            },
        };
        let dump = AclDump {
            pending: Vec::new(),
            generation: 3,
            tables: vec![AclTableDump {
                name: "pod-a-egress".into(),
                rules: vec![rule(0, "permit", 12), rule(1, "deny", 0)],
                no_match: Hits {
                    packets: 2,
                    bytes: 120,
                },
                attached: vec![AclAttachment {
                    port: "pod-a".into(),
                    direction: "egress".into(),
                }],
                global: false,
                memory_bytes: 0,
            }],
        };
        let text = render_dump(&dump);
        assert!(
            text.starts_with("acl pod-a-egress: 2 rules, applied pod-a egress\n"),
            "{text}"
        );
        assert!(text.contains("permit  tcp"), "{text}");
        assert!(text.contains("x/allow-web"), "{text}");
        let no_match = text.lines().last().unwrap();
        assert!(
            no_match.contains("(no rule matched)") && no_match.contains("120"),
            "{text}"
        );
        assert_eq!(
            render_dump(&AclDump {
                pending: vec![ferrule_api::AclPending {
                    port: None,
                    pod: Some("shop/web-0".into()),
                    direction: "egress".into(),
                    table: "t".into(),
                }],
                generation: 1,
                tables: vec![]
            }),
            "no ACL tables\n\nwaiting for their port:\n  t egress pod shop/web-0\n"
        );
    }
}
