//! The ClassBench rule and trace formats, read exactly as DPDK's `dpdk-test-acl` reads
//! them.
//!
//! Rule lines: `@SRC/LEN DST/LEN SLO : SHI DLO : DHI PROTO/MASK`, whitespace-separated,
//! extra columns ignored. File order is priority (the first rule line is rule 0).
//! Numbers are read like C's `strtoul(s, NULL, 0)`: decimal, `0x` hex or leading-`0`
//! octal. `PROTO/MASK` with mask `0xFF` is an exact protocol, mask `0x00` any protocol,
//! any other mask a value/mask match ([`Proto::Masked`]). ClassBench rules carry port
//! ranges whatever their protocol, and `rte_acl` compares them against the packet's
//! port bytes regardless; the loaded [`Rule`]s keep them as they are (the match
//! semantics of [`Rule::matches`] is exactly that), so they need not pass
//! [`Rule::validate`]. Every rule's action is `permit`.
//!
//! Trace lines: `SRC DST SPORT DPORT PROTO`, whitespace-separated integers (addresses
//! as 32-bit numbers), extra columns ignored. As an extension, an address column holding
//! a `:` is read as an IPv6 address, and rule prefixes may be IPv6.
//!
//! In both files, blank lines and lines starting with `#` are skipped; they take no
//! rule index or trace slot. Errors name the 1-based line number.

use super::rule::{Action, PortRange, Prefix, Proto, Rule, RuleField};
use super::FlowKey;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// A line of a rule or trace file that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// A rule or trace file that cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line of the file is malformed.
    #[error("{}:{}: {}", path.display(), source.line, source.reason)]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line and why.
        source: ParseError,
    },
}

/// Lines that carry content, with their 1-based numbers.
fn content_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
}

/// An unsigned number the way `strtoul(s, &end, 0)` reads a whole token, at most `max`.
fn c_number(token: &str, max: u64) -> Option<u64> {
    let value = if let Some(hex) = token
        .strip_prefix("0x")
        .or_else(|| token.strip_prefix("0X"))
    {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()?
    } else if token.len() > 1 && token.starts_with('0') {
        if !token.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return None;
        }
        u64::from_str_radix(&token[1..], 8).ok()?
    } else {
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        token.parse().ok()?
    };
    (value <= max).then_some(value)
}

/// Builds a [`ParseError`] for `line`.
fn error(line: usize, reason: impl fmt::Display) -> ParseError {
    ParseError {
        line,
        reason: reason.to_string(),
    }
}

/// Reads rule lines; the result is in priority order.
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, ParseError> {
    content_lines(text)
        .map(|(line, content)| parse_rule(content).map_err(|reason| error(line, reason)))
        .collect()
}

/// Reads one rule line (trimmed, not blank).
fn parse_rule(content: &str) -> Result<Rule, String> {
    let body = content
        .strip_prefix('@')
        .ok_or("a rule line starts with '@'")?;
    let columns: Vec<&str> = body.split_whitespace().take(9).collect();
    let [src, dst, slo, sdelim, shi, dlo, ddelim, dhi, proto] = columns[..] else {
        return Err(format!(
            "expected `@SRC/LEN DST/LEN SLO : SHI DLO : DHI PROTO/MASK`, found {} columns",
            columns.len()
        ));
    };
    let src = Prefix::parse(src, RuleField::Src).map_err(|e| e.to_string())?;
    let dst = Prefix::parse(dst, RuleField::Dst).map_err(|e| e.to_string())?;
    if matches!((src.is_v4(), dst.is_v4()), (Some(a), Some(b)) if a != b) {
        return Err(format!("dst: family of {dst} differs from src {src}"));
    }
    let src_port = port_range(slo, sdelim, shi, RuleField::SrcPort)?;
    let dst_port = port_range(dlo, ddelim, dhi, RuleField::DstPort)?;
    let proto = protocol(proto)?;
    Ok(Rule {
        action: Action::Permit,
        proto,
        src,
        dst,
        src_port,
        dst_port,
        origin: None,
        dst_selector: None,
    })
}

/// Reads `LO : HI` from its three columns.
fn port_range(lo: &str, delim: &str, hi: &str, field: RuleField) -> Result<PortRange, String> {
    if delim != ":" {
        return Err(format!(
            "{field}: expected `LO : HI`, found `{lo} {delim} {hi}`"
        ));
    }
    let port = |token: &str| {
        c_number(token, 65535)
            .and_then(|value| u16::try_from(value).ok())
            .ok_or_else(|| format!("{field}: bad port {token:?} (0-65535)"))
    };
    let range = PortRange {
        lo: port(lo)?,
        hi: port(hi)?,
    };
    if range.lo > range.hi {
        return Err(format!(
            "{field}: low port {} > high port {}",
            range.lo, range.hi
        ));
    }
    Ok(range)
}

/// Reads `VALUE/MASK`.
fn protocol(token: &str) -> Result<Proto, String> {
    let bad = || format!("proto: bad protocol {token:?} (VALUE/MASK, each 0-255)");
    let (value, mask) = token.split_once('/').ok_or_else(bad)?;
    let byte = |part: &str| {
        c_number(part, 255)
            .and_then(|v| u8::try_from(v).ok())
            .ok_or_else(bad)
    };
    let (value, mask) = (byte(value)?, byte(mask)?);
    Ok(match mask {
        0 => Proto::Any,
        0xFF => Proto::Number(value),
        _ => Proto::Masked {
            value: value & mask,
            mask,
        },
    })
}

/// Reads trace lines, one key per content line.
pub fn parse_trace(text: &str) -> Result<Vec<FlowKey>, ParseError> {
    content_lines(text)
        .map(|(line, content)| parse_key(content).map_err(|reason| error(line, reason)))
        .collect()
}

/// Reads one trace line (trimmed, not blank).
fn parse_key(content: &str) -> Result<FlowKey, String> {
    let columns: Vec<&str> = content.split_whitespace().take(5).collect();
    let [src, dst, src_port, dst_port, proto] = columns[..] else {
        return Err(format!(
            "expected `SRC DST SPORT DPORT PROTO`, found {} columns",
            columns.len()
        ));
    };
    let address = |token: &str, name: &str| -> Result<IpAddr, String> {
        if token.contains(':') {
            token
                .parse::<Ipv6Addr>()
                .map(IpAddr::V6)
                .map_err(|_| format!("{name}: bad IPv6 address {token:?}"))
        } else {
            c_number(token, u64::from(u32::MAX))
                .and_then(|v| u32::try_from(v).ok())
                .map(|v| IpAddr::V4(Ipv4Addr::from(v)))
                .ok_or_else(|| format!("{name}: bad address {token:?} (0-4294967295)"))
        }
    };
    let number = |token: &str, name: &str, max: u16| -> Result<u16, String> {
        c_number(token, u64::from(max))
            .and_then(|v| u16::try_from(v).ok())
            .ok_or_else(|| format!("{name}: bad value {token:?} (0-{max})"))
    };
    let proto = number(proto, "proto", 255)?;
    let proto = u8::try_from(proto).map_err(|_| format!("proto: bad value {proto}"))?;
    FlowKey::from_ips(
        0,
        proto,
        address(src, "src")?,
        address(dst, "dst")?,
        number(src_port, "src_port", 65535)?,
        number(dst_port, "dst_port", 65535)?,
    )
    .ok_or_else(|| "src and dst are of different address families".to_owned())
}

/// Reads a file and parses it with `parse`, naming the file in errors.
fn load<T>(
    path: &Path,
    parse: fn(&str) -> Result<Vec<T>, ParseError>,
) -> Result<Vec<T>, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|source| LoadError::Parse {
        path: path.to_owned(),
        source,
    })
}

/// Reads a ClassBench rule file.
pub fn load_rules(path: &Path) -> Result<Vec<Rule>, LoadError> {
    load(path, parse_rules)
}

/// Reads a ClassBench trace file.
pub fn load_trace(path: &Path) -> Result<Vec<FlowKey>, LoadError> {
    load(path, parse_trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_rule_line_with_extra_columns() {
        let rules = parse_rules(
            "@30.95.224.190/32\t235.155.103.111/24\t0 : 65535\t5541 : 5541\t0x06/0xFF\t0x0000/0x0200\t\n",
        )
        .unwrap();
        assert_eq!(
            rules,
            [Rule {
                action: Action::Permit,
                proto: Proto::TCP,
                src: Prefix::v4(Ipv4Addr::new(30, 95, 224, 190), 32),
                dst: Prefix::v4(Ipv4Addr::new(235, 155, 103, 0), 24),
                src_port: PortRange::ANY,
                dst_port: PortRange::single(5541),
                origin: None,
                dst_selector: None,
            }]
        );
    }

    #[test]
    fn protocol_masks() {
        assert_eq!(protocol("0x00/0x00"), Ok(Proto::Any));
        assert_eq!(protocol("0x11/0x00"), Ok(Proto::Any));
        assert_eq!(protocol("17/255"), Ok(Proto::UDP));
        assert_eq!(
            protocol("0x07/0x06"),
            Ok(Proto::Masked { value: 6, mask: 6 })
        );
        assert!(protocol("0x100/0xFF").is_err());
        assert!(protocol("6").is_err());
    }

    #[test]
    fn numbers_read_like_strtoul_base_0() {
        assert_eq!(c_number("0", 10), Some(0));
        assert_eq!(c_number("0x1F", 255), Some(31));
        assert_eq!(c_number("017", 255), Some(15));
        assert_eq!(c_number("65536", 65535), None);
        assert_eq!(c_number("08", 255), None);
        assert_eq!(c_number("0x", 255), None);
        assert_eq!(c_number("-1", 255), None);
        assert_eq!(c_number("", 255), None);
    }

    #[test]
    fn reads_trace_lines_and_skips_comments() {
        let keys =
            parse_trace("# comment\n\n509600768\t2888576959\t65535\t1708\t6\t0\t649\n").unwrap();
        assert_eq!(
            keys,
            [FlowKey::v4(
                0,
                6,
                Ipv4Addr::from(509_600_768),
                Ipv4Addr::from(2_888_576_959),
                65535,
                1708
            )]
        );
        let v6 = parse_trace("2001:db8::1 2001:db8::2 1 2 17").unwrap();
        assert_eq!(v6[0].src_ip(), "2001:db8::1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn errors_name_the_line() {
        let text = "@1.2.3.4/32 5.6.7.8/32 0 : 65535 80 : 80 0x06/0xFF\n\n@1.2.3.4/33 5.6.7.8/32 0 : 65535 80 : 80 0x06/0xFF\n";
        let err = parse_rules(text).unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.reason.contains("src"), "{err}");
        assert_eq!(
            parse_rules("@1.2.3.4/32 5.6.7.8/32 0 : 65535 90 : 80 0x06/0xFF")
                .unwrap_err()
                .line,
            1
        );
        assert!(parse_rules("1.2.3.4/32 5.6.7.8/32 0 : 65535 80 : 80 0x06/0xFF").is_err());
        assert!(parse_rules("@1.2.3.4/32 ::/0 0 : 65535 80 : 80 0x06/0xFF").is_err());
        assert!(parse_rules("@1.2.3.4/32 5.6.7.8/32 0 - 65535 80 : 80 0x06/0xFF").is_err());
        let err = parse_trace("1 2 3 4 6\n1 2 3 70000 6\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.reason.contains("dst_port"), "{err}");
        assert_eq!(parse_trace("1 2 3 4").unwrap_err().line, 1);
        assert_eq!(parse_trace("4294967296 2 3 4 6").unwrap_err().line, 1);
    }
}
