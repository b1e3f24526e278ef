//! `ferrulectl trace`'s engine: builds the synthetic packet a `trace.run` request
//! describes, runs it through the pipeline of a snapshot with a recording tracer (no
//! state changes, nothing sent), and renders stages and verdict — for the daemon, and
//! for tests that check documented traces against the real pipeline.

use crate::config::parse_mac;
use ferrule_api::rpc::RpcError;
use ferrule_api::{TraceResult, TraceRun, TraceStage, TraceVerdict};
use ferrule_dataplane::conntrack::Conntrack;
use ferrule_dataplane::conntrack::CtConfig;
use ferrule_dataplane::pipeline::synth::{self, SynthError, SynthSpec};
use ferrule_dataplane::pipeline::{self, icmp_error, Action, IcmpErrorKind, Punt, Recorder};
use ferrule_dataplane::snapshot::{PortRole, Snapshot};
use ferrule_dataplane::wire::{EthernetAddress, IpProtocol};
use std::net::{IpAddr, SocketAddr};

/// `IP`, `IP:PORT` or `[IPv6]:PORT`.
fn endpoint(field: &str, s: &str) -> Result<(IpAddr, Option<u16>), RpcError> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip, None));
    }
    s.parse::<SocketAddr>()
        .map(|sa| (sa.ip(), Some(sa.port())))
        .map_err(|_| {
            RpcError::invalid_params(field, format!("{s:?} is not IP, IP:PORT or [IPv6]:PORT"))
        })
}

/// `SYN,ACK` → TCP flag bits.
fn tcp_flags(s: &str) -> Result<u8, RpcError> {
    let mut bits = 0u8;
    for f in s.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        bits |= match f.to_ascii_uppercase().as_str() {
            "FIN" => 0x01,
            "SYN" => 0x02,
            "RST" => 0x04,
            "PSH" => 0x08,
            "ACK" => 0x10,
            "URG" => 0x20,
            "ECE" => 0x40,
            "CWR" => 0x80,
            other => {
                return Err(RpcError::invalid_params(
                    "tcp_flags",
                    format!("{other:?} is not a TCP flag (FIN SYN RST PSH ACK URG ECE CWR)"),
                ))
            }
        };
    }
    Ok(bits)
}

fn kind_text(kind: IcmpErrorKind) -> String {
    match kind {
        IcmpErrorKind::TimeExceeded => "time exceeded".into(),
        IcmpErrorKind::FragNeeded { mtu } => format!("fragmentation needed (mtu {mtu})"),
        IcmpErrorKind::PacketTooBig { mtu } => format!("packet too big (mtu {mtu})"),
        IcmpErrorKind::NoRoute => "destination unreachable (no route)".into(),
    }
}

/// Turns recorded stages and the action into the API's stages and verdict.
pub fn render(
    snap: &Snapshot,
    in_port: u16,
    rec: Recorder,
    action: Action,
    icmp_sent: bool,
) -> (Vec<TraceStage>, TraceVerdict) {
    let port_name = |i: u16| {
        snap.ports
            .get(usize::from(i))
            .map(|p| p.name.clone())
            .unwrap_or_else(|| i.to_string())
    };
    let mut stages: Vec<TraceStage> = rec
        .stages
        .into_iter()
        .map(|(s, detail)| TraceStage {
            stage: s.name().to_string(),
            detail,
        })
        .collect();
    let verdict = match action {
        Action::Forward { port } => TraceVerdict::Forward {
            port: port_name(port),
        },
        Action::Reply => TraceVerdict::Forward {
            port: port_name(in_port),
        },
        Action::IcmpError { kind, reason } => {
            let detail = if icmp_sent {
                format!(
                    "{} sent back out of {}",
                    kind_text(kind),
                    port_name(in_port)
                )
            } else {
                format!(
                    "no {} sent (never about an ICMP error, a later fragment or a multicast \
                     source; or {} has no address of the family to send it from)",
                    kind_text(kind),
                    port_name(in_port)
                )
            };
            stages.push(TraceStage {
                stage: "icmp".into(),
                detail,
            });
            TraceVerdict::Drop {
                reason: reason.name().to_string(),
            }
        }
        Action::Punt(Punt::Resolve { ip, port, .. }) => {
            stages.push(TraceStage {
                stage: "punt".into(),
                detail: format!(
                    "held while {ip} is resolved on {}; sent if it answers",
                    port_name(port)
                ),
            });
            TraceVerdict::Drop {
                reason: "no-neighbour".into(),
            }
        }
        Action::Punt(Punt::Dns) => TraceVerdict::DnsProxy,
        Action::Punt(Punt::Learn) => {
            // Consumed by the control thread (not forwarded); the closest verdict.
            stages.push(TraceStage {
                stage: "punt".into(),
                detail: "to the control thread to learn from".into(),
            });
            TraceVerdict::Drop {
                reason: "local-unhandled".into(),
            }
        }
        // The owner runs the whole pipeline again (a synthetic trace has one table and
        // never hands off; live captures can).
        Action::Handoff { worker } => TraceVerdict::Handoff { worker },
        Action::Drop(reason) => TraceVerdict::Drop {
            reason: reason.name().to_string(),
        },
        // Layer-2 switching (the switch stage's lines say which segment and VLAN).
        Action::Switch { port, .. } => TraceVerdict::Forward {
            port: port_name(port),
        },
        Action::Flood {
            segment, in_vlan, ..
        } => {
            let from = ferrule_dataplane::switching::Member {
                port: in_port,
                vlan: in_vlan,
            };
            let ports: Vec<String> = snap
                .switching
                .flood_targets(segment, from)
                .map(|m| port_name(m.port))
                .collect();
            TraceVerdict::Forward {
                port: ports.join(","),
            }
        }
    };
    (stages, verdict)
}

/// Whether the ICMP error of an `IcmpError` action would actually be built and sent
/// (the same check the worker makes).
pub fn icmp_would_be_sent(snap: &Snapshot, in_port: u16, frame: &[u8], action: Action) -> bool {
    let Action::IcmpError { kind, .. } = action else {
        return false;
    };
    let Some(port) = snap.ports.get(usize::from(in_port)) else {
        return false;
    };
    let Ok(parsed) = pipeline::parse(frame, port.network) else {
        return false;
    };
    let mut out = vec![0u8; icmp_error::MAX_ERROR_FRAME];
    icmp_error::build(port, &parsed, frame, kind, &mut out).is_some()
}

/// Builds the packet of a `trace.run` request and traces it. Errors name the field.
pub fn run(snap: &Snapshot, p: &TraceRun) -> Result<TraceResult, RpcError> {
    let in_port = snap
        .ports
        .iter()
        .position(|x| x.name == p.in_port)
        .map(|i| i as u16)
        .ok_or_else(|| {
            RpcError::invalid_params("in_port", format!("no port named {:?}", p.in_port))
        })?;
    let port = &snap.ports[usize::from(in_port)];
    let proto = match p.proto.to_ascii_lowercase().as_str() {
        "tcp" => IpProtocol::TCP,
        "udp" => IpProtocol::UDP,
        "sctp" => IpProtocol::SCTP,
        "icmp" => IpProtocol::ICMP,
        "icmpv6" => IpProtocol::ICMPV6,
        other => {
            return Err(RpcError::invalid_params(
                "proto",
                format!("{other:?} is not tcp, udp, sctp, icmp or icmpv6"),
            ))
        }
    };
    let (src, sport) = endpoint("src", &p.src)?;
    let (dst, dport) = endpoint("dst", &p.dst)?;
    let ported = matches!(proto, IpProtocol::TCP | IpProtocol::UDP | IpProtocol::SCTP);
    if !ported && dport.is_some() {
        return Err(RpcError::invalid_params(
            "dst",
            format!("{} has no ports", p.proto),
        ));
    }
    let flags = match (&p.tcp_flags, proto) {
        (Some(f), IpProtocol::TCP) => tcp_flags(f)?,
        (Some(_), _) => return Err(RpcError::invalid_params("tcp_flags", "only with proto tcp")),
        (None, _) => 0x02,
    };
    let mac = |field: &str,
               s: &Option<String>,
               default: EthernetAddress|
     -> Result<EthernetAddress, RpcError> {
        match s {
            None => Ok(default),
            Some(m) => parse_mac(m).map(EthernetAddress).ok_or_else(|| {
                RpcError::invalid_params(field, format!("{m:?} is not a MAC address"))
            }),
        }
    };
    let default_src = match (port.role, port.pod_mac) {
        (PortRole::Pod, Some(m)) => m,
        _ => EthernetAddress([0x02, 0, 0, 0, 0, 0x01]),
    };
    let spec = SynthSpec {
        src_mac: mac("src_mac", &p.src_mac, default_src)?,
        dst_mac: mac("dst_mac", &p.dst_mac, port.mac)?,
        proto,
        src,
        dst,
        src_port: sport.unwrap_or(if ported { 40000 } else { 1 }),
        dst_port: dport.unwrap_or(if ported { 80 } else { 0 }),
        tcp_flags: flags,
        ip_len: p.len,
        ttl: p.ttl.unwrap_or(64),
    };
    let mut frame = synth::build(&spec).map_err(|e| match e {
        SynthError::MixedFamilies => {
            RpcError::invalid_params("dst", "src and dst differ in IP version")
        }
        SynthError::ProtoFamily => {
            RpcError::invalid_params("proto", "icmp is IPv4, icmpv6 is IPv6")
        }
        SynthError::Proto => RpcError::invalid_params("proto", "unsupported protocol"),
        SynthError::TooLong => RpcError::invalid_params("ip_len", "longer than 65535 bytes"),
    })?;
    if frame.len() > 14 + 9600 {
        return Err(RpcError::invalid_params("len", "at most 9600 bytes"));
    }
    Ok(trace_frame(snap, in_port, &mut frame))
}

/// Runs `frame`, as received on `in_port`, through the pipeline of `snap` with a
/// recording tracer, and renders its stages and verdict. Connection tracking runs on
/// an empty table of its own: the trace shows what happens to the first packet of a
/// connection (a new entry, its SNAT mapping), without touching the workers' tables.
pub fn trace_frame(snap: &Snapshot, in_port: u16, frame: &mut [u8]) -> TraceResult {
    let mut rec = Recorder::default();
    let cfg = CtConfig {
        max_entries: 16,
        max_per_zone: 16,
        ..CtConfig::default()
    };
    let mut ct = Conntrack::new(&cfg, 0, 1, true);
    let action = pipeline::process_ct(snap, in_port, frame, Some(&mut ct), &mut rec);
    let sent = icmp_would_be_sent(snap, in_port, frame, action);
    let (stages, verdict) = render(snap, in_port, rec, action, sent);
    TraceResult { stages, verdict }
}
