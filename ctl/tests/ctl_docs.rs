//! Keeps `docs/control-protocol.md` honest:
//!
//! - every example request of the route, neigh, trace and acl methods decodes into
//!   its `api` params type, every example result is exactly what the `api` result type
//!   serializes to, and every example error names its field;
//! - the `version`, `ports.list` and `stats.get` examples are what their result types
//!   send, and the `stats.get` totals add up as the daemon adds them;
//! - the route, trace and trace-dump examples are what the code does on the example
//!   configuration (`configs/ferrule.toml` plus the doc's `toml` block): the route
//!   changes are applied to a [`Fib`], the dump is compared with its routes, and the
//!   traced packets are run through the pipeline;
//! - the ACL examples are what the daemon's ACL code answers: each `acl.apply` is
//!   validated and applied in order, and the dump and clear examples run on the result;
//! - the drop-reason table lists exactly the pipeline's reasons (which `ferrulectl
//!   stats` can describe).

use std::net::IpAddr;

use ferrule_api::rpc::{self, parse_params};
use ferrule_api::{
    self as api, acl_method, ct_method, nat_method, neigh_method, port_method, route_method,
    trace_method, vpc_method, NeighAdd, NeighDel, NeighDump, NetworkFilter, PortsList, RouteAdd,
    RouteDel, RouteDump, Stats, TraceDump, TraceResult, TraceRun, TraceStart, VersionInfo,
};
use ferrule_ctl::drop_reason_description;
use ferrule_daemon::acl::{parse_apply, AclManager};
use ferrule_daemon::config::{parse_mac, Config, IpCidr, EMBEDDED_DEFAULT};
use ferrule_daemon::fib::Fib;
use ferrule_dataplane::counters::DropReason;
use ferrule_dataplane::snapshot::{NextHopEntry, Snapshot};
use ferrule_dataplane::wire::EthernetAddress;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

const DOC: &str = include_str!("../../docs/control-protocol.md");

const METHODS: [&str; 20] = [
    route_method::ADD,
    route_method::DEL,
    route_method::DUMP,
    neigh_method::ADD,
    neigh_method::DEL,
    neigh_method::DUMP,
    trace_method::RUN,
    trace_method::START,
    trace_method::DUMP,
    acl_method::APPLY,
    acl_method::DUMP,
    acl_method::CLEAR_COUNTERS,
    vpc_method::SYNC,
    vpc_method::SHOW,
    ct_method::DUMP,
    ct_method::FLUSH,
    ct_method::STATS,
    nat_method::DUMP,
    port_method::ADD,
    port_method::DEL,
];

/// The text of the doc from `start` up to the next line that starts with `end`.
fn section(start: &str, end: &str) -> &'static str {
    let from = DOC
        .find(start)
        .unwrap_or_else(|| panic!("{start:?} is not in the doc"));
    let rest = &DOC[from..];
    let to = rest[start.len()..]
        .find(end)
        .map_or(rest.len(), |i| i + start.len());
    &rest[..to]
}

/// The JSON-RPC messages of a piece of the doc, in order: `--> `/`<-- ` lines, and
/// ```json blocks.
fn messages(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut json_block: Option<String> = None;
    for line in text.lines() {
        if let Some(block) = &mut json_block {
            if line.trim() == "```" {
                let value = serde_json::from_str(block)
                    .unwrap_or_else(|e| panic!("bad JSON block ({e}):\n{block}"));
                out.push(value);
                json_block = None;
            } else {
                block.push_str(line);
                block.push('\n');
            }
        } else if line.trim() == "```json" {
            json_block = Some(String::new());
        } else if let Some(message) = line
            .strip_prefix("--> ")
            .or_else(|| line.strip_prefix("<-- "))
        {
            let value = serde_json::from_str(message)
                .unwrap_or_else(|e| panic!("bad JSON line ({e}): {line}"));
            out.push(value);
        }
    }
    assert!(json_block.is_none(), "unterminated ```json block");
    out
}

/// The requests of a piece of the doc, each with the response that follows it.
fn exchanges(text: &str) -> Vec<(Value, Value)> {
    let mut out = Vec::new();
    let mut request: Option<Value> = None;
    for message in messages(text) {
        if message.get("method").is_some() {
            assert!(request.is_none(), "two requests in a row: {message}");
            request = Some(message);
        } else {
            let request = request
                .take()
                .unwrap_or_else(|| panic!("a response without a request: {message}"));
            assert_eq!(request["id"], message["id"], "{message}");
            out.push((request, message));
        }
    }
    assert!(request.is_none(), "a request without a response");
    out
}

/// Checks that `params` decodes strictly into `P`.
fn check_params<P: DeserializeOwned>(method: &str, params: &Value) {
    if let Err(e) = parse_params::<P>(params) {
        panic!("{method} example params {params} do not decode: {e}");
    }
}

/// Checks that `result` is exactly what `R` serializes to.
fn check_result<R: DeserializeOwned + Serialize>(method: &str, result: &Value) -> R {
    let decoded: R = serde_json::from_value(result.clone())
        .unwrap_or_else(|e| panic!("{method} example result does not decode: {e}\n{result}"));
    let again = serde_json::to_value(&decoded).expect("serializes");
    assert_eq!(
        &again, result,
        "{method}: the example result is not what the api type sends"
    );
    decoded
}

#[test]
fn examples_match_the_api_types() {
    let text = section("### `route.add`", "## Drop reasons");
    let mut requested = Vec::new();
    let mut answered = Vec::new();
    let mut method = String::new();
    for message in messages(text) {
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        if let Some(name) = message.get("method").and_then(Value::as_str) {
            method = name.to_string();
            assert!(METHODS.contains(&name), "unexpected method in {message}");
            let params = message.get("params").cloned().unwrap_or(Value::Null);
            match name {
                route_method::ADD => check_params::<RouteAdd>(name, &params),
                route_method::DEL => check_params::<RouteDel>(name, &params),
                route_method::DUMP | neigh_method::DUMP => {
                    check_params::<NetworkFilter>(name, &params)
                }
                neigh_method::ADD => check_params::<NeighAdd>(name, &params),
                neigh_method::DEL => check_params::<NeighDel>(name, &params),
                trace_method::RUN => check_params::<TraceRun>(name, &params),
                trace_method::START => check_params::<TraceStart>(name, &params),
                trace_method::DUMP => assert!(params.is_null(), "{message}"),
                // Checked field by field against the daemon's validation below.
                acl_method::APPLY => assert!(params.is_object(), "{message}"),
                acl_method::DUMP => check_params::<api::AclDumpParams>(name, &params),
                acl_method::CLEAR_COUNTERS => check_params::<api::AclClearParams>(name, &params),
                vpc_method::SYNC => check_params::<api::VpcSync>(name, &params),
                port_method::ADD => check_params::<api::PortAdd>(name, &params),
                port_method::DEL => check_params::<api::PortDel>(name, &params),
                vpc_method::SHOW | ct_method::STATS => assert!(params.is_null(), "{message}"),
                ct_method::DUMP | ct_method::FLUSH | nat_method::DUMP => {
                    check_params::<api::CtFilterParams>(name, &params)
                }
                _ => unreachable!("checked above"),
            }
            requested.push(method.clone());
        } else if let Some(result) = message.get("result") {
            assert!(
                !method.is_empty(),
                "a response before any request: {message}"
            );
            match method.as_str() {
                route_method::ADD
                | route_method::DEL
                | neigh_method::ADD
                | neigh_method::DEL
                | trace_method::START => assert_eq!(result, &json!({}), "{method}"),
                route_method::DUMP => {
                    check_result::<RouteDump>(&method, result);
                }
                neigh_method::DUMP => {
                    check_result::<NeighDump>(&method, result);
                }
                trace_method::RUN => {
                    check_result::<TraceResult>(&method, result);
                }
                trace_method::DUMP => {
                    check_result::<TraceDump>(&method, result);
                }
                acl_method::APPLY => {
                    check_result::<api::AclApplied>(&method, result);
                }
                acl_method::DUMP => {
                    check_result::<api::AclDump>(&method, result);
                }
                acl_method::CLEAR_COUNTERS => {
                    check_result::<api::AclCleared>(&method, result);
                }
                vpc_method::SYNC | vpc_method::SHOW => {
                    check_result::<api::VpcState>(&method, result);
                }
                ct_method::DUMP => {
                    check_result::<api::CtDump>(&method, result);
                }
                ct_method::FLUSH => {
                    check_result::<api::CtFlushed>(&method, result);
                }
                ct_method::STATS => {
                    let stats: api::CtStatsResult = check_result(&method, result);
                    let reasons: Vec<&str> =
                        stats.drops.iter().map(|d| d.reason.as_str()).collect();
                    assert_eq!(
                        reasons,
                        [
                            "ct-invalid",
                            "ct-table-full",
                            "snat-ports-exhausted",
                            "handoff-full"
                        ]
                    );
                }
                nat_method::DUMP => {
                    check_result::<api::NatDump>(&method, result);
                }
                port_method::ADD => {
                    check_result::<api::PortInfo>(&method, result);
                }
                port_method::DEL => {
                    check_result::<api::PortDeleted>(&method, result);
                }
                _ => unreachable!("checked above"),
            }
            answered.push(method.clone());
        } else {
            let error = &message["error"];
            assert_eq!(error["code"], rpc::INVALID_PARAMS, "{message}");
            let field = error["data"]["field"]
                .as_str()
                .unwrap_or_else(|| panic!("no data.field: {message}"));
            let text = error["message"].as_str().unwrap_or("");
            assert!(
                text.starts_with(&format!("invalid params: `{field}`: ")),
                "{message}"
            );
        }
    }
    for name in METHODS {
        assert!(
            requested.contains(&name.to_string()),
            "no request for {name}"
        );
        assert!(answered.contains(&name.to_string()), "no result for {name}");
        assert!(
            DOC.contains(&format!("### `{name}`")),
            "no section for {name}"
        );
    }
}

#[test]
fn version_ports_and_stats_examples_match_the_api_types() {
    let text = section("## Methods", "### Networks, routes and neighbours");
    let mut seen = Vec::new();
    for (request, response) in exchanges(text) {
        let name = request["method"].as_str().expect("method").to_string();
        assert!(
            request.get("params").is_none(),
            "{name} takes no params: {request}"
        );
        let result = &response["result"];
        match name.as_str() {
            api::method::VERSION => {
                let v: VersionInfo = check_result(&name, result);
                assert_eq!(v.api_version, api::API_VERSION);
                assert!(!v.dpdk.starts_with("DPDK"), "the daemon strips the prefix");
            }
            api::method::PORTS_LIST => {
                check_result::<PortsList>(&name, result);
            }
            api::method::STATS_GET => check_stats(&check_result::<Stats>(&name, result)),
            other => panic!("unexpected method {other}"),
        }
        seen.push(name);
    }
    for name in [
        api::method::VERSION,
        api::method::PORTS_LIST,
        api::method::STATS_GET,
    ] {
        assert!(seen.iter().any(|s| s == name), "no example of {name}");
    }
}

/// The control thread's entry comes last, and the totals are the daemon's sums.
fn check_stats(stats: &Stats) {
    let names: Vec<&str> = DropReason::ALL.iter().map(|r| r.name()).collect();
    let control = stats.workers.last().expect("the control thread's entry");
    assert_eq!(control.queues, ["control"]);
    assert_eq!(control.worker as usize, stats.workers.len() - 1);
    let mut totals = api::Totals::default();
    let mut reasons: Vec<api::DropCount> = Vec::new();
    for w in &stats.workers {
        let order: Vec<usize> = w
            .drop_reasons
            .iter()
            .map(|d| {
                names
                    .iter()
                    .position(|n| *n == d.reason)
                    .unwrap_or_else(|| panic!("unknown drop reason {}", d.reason))
            })
            .collect();
        assert!(order.windows(2).all(|p| p[0] < p[1]), "worker {}", w.worker);
        let sum: u64 = w.drop_reasons.iter().map(|d| d.packets).sum();
        assert_eq!(w.drops, sum, "worker {}", w.worker);
        for d in &w.drop_reasons {
            match reasons.iter_mut().find(|r| r.reason == d.reason) {
                Some(r) => r.packets += d.packets,
                None => reasons.push(d.clone()),
            }
        }
        totals.rx_packets += w.rx_packets;
        totals.tx_packets += w.tx_packets;
        totals.drops += w.drops;
    }
    totals.drop_reasons = reasons;
    assert_eq!(stats.totals, totals);
    let port_drops: u64 = stats.ports.iter().map(|p| p.counters.drops).sum();
    assert_eq!(
        port_drops, totals.drops,
        "every drop is counted against a port"
    );
}

#[test]
fn drop_reasons_are_documented_and_described() {
    let table = section("## Drop reasons", "## Talking");
    let documented: Vec<&str> = table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .collect();
    let reasons: Vec<&str> = DropReason::ALL.iter().map(|r| r.name()).collect();
    assert_eq!(
        documented, reasons,
        "the table lists the pipeline's reasons, in their order"
    );
    for reason in &documented {
        assert!(
            drop_reason_description(reason).is_some(),
            "ferrulectl stats cannot describe {reason}"
        );
    }
    // Verdicts in the examples use documented reasons.
    for message in messages(section("### `route.add`", "## Drop reasons")) {
        if let Some(reason) = message["result"]["verdict"]["reason"].as_str() {
            assert!(documented.contains(&reason), "{reason}");
        }
    }
}

/// The example configuration: `configs/ferrule.toml` plus the doc's `toml` block.
fn example_fib() -> Fib {
    let start = DOC.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let len = DOC[start..].find("```").expect("end of the toml block");
    let text = format!("{EMBEDDED_DEFAULT}\n{}", &DOC[start..start + len]);
    let cfg = Config::parse(&text, "docs/control-protocol.md").expect("valid configuration");
    let n = cfg.ports.len();
    let ids: Vec<u16> = (0..n as u16).collect();
    Fib::from_config(&cfg, &vec![[0u8; 6]; n], &ids).expect("valid forwarding state")
}

/// A refused change: the field and the message, as the daemon words them.
type Refusal = (String, String);

fn refused(field: &str, message: impl Into<String>) -> Refusal {
    (field.to_string(), message.into())
}

fn network_param(fib: &Fib, network: &Option<String>) -> Result<u16, Refusal> {
    match network {
        None => Ok(0),
        Some(n) => fib
            .network_index(n)
            .ok_or_else(|| refused("network", format!("no network named {n:?}"))),
    }
}

/// `route.add`, as `control/src/daemon/routes.rs` validates and applies it.
fn route_add(fib: &mut Fib, p: &RouteAdd) -> Result<(), Refusal> {
    let net = network_param(fib, &p.network)?;
    let prefix: IpCidr = p.prefix.parse().map_err(|e: String| refused("prefix", e))?;
    let entry = match (&p.port, p.blackhole) {
        (Some(port), false) => {
            let port = fib
                .port_index(port)
                .ok_or_else(|| refused("port", format!("no port named {port:?}")))?;
            let via = match &p.via {
                None => None,
                Some(v) => Some(
                    v.parse::<IpAddr>()
                        .map_err(|_| refused("via", format!("{v:?} is not an IP address")))?,
                ),
            };
            NextHopEntry::Port { port, via }
        }
        (None, true) if p.via.is_some() => {
            return Err(refused("via", "a blackhole route has no next hop"))
        }
        (None, true) => NextHopEntry::Blackhole,
        (Some(_), true) => {
            return Err(refused(
                "blackhole",
                "give either port or blackhole, not both",
            ))
        }
        (None, false) => return Err(refused("port", "needs port or blackhole")),
    };
    fib.add_route(net, prefix, entry)
        .map_err(|e| refused(e.field, e.message))
}

/// `route.del`, as the daemon validates and applies it.
fn route_del(fib: &mut Fib, p: &RouteDel) -> Result<(), Refusal> {
    let net = network_param(fib, &p.network)?;
    let prefix: IpCidr = p.prefix.parse().map_err(|e: String| refused("prefix", e))?;
    fib.del_route(net, prefix)
        .map_err(|e| refused(e.field, e.message))
}

/// `route.dump`, as the daemon lists the routes.
fn route_dump(fib: &Fib, p: &NetworkFilter) -> RouteDump {
    let nets: Vec<u16> = match &p.network {
        Some(_) => vec![network_param(fib, &p.network).expect("a known network")],
        None => (0..fib.network_count() as u16).collect(),
    };
    let mut routes = Vec::new();
    for net in nets {
        for (prefix, r) in fib.routes(net) {
            let (kind, port, via) = match r.entry {
                NextHopEntry::Port { port, via } => (
                    "port",
                    fib.ports().get(usize::from(port)).map(|p| p.name.clone()),
                    via.map(|v| v.to_string()),
                ),
                NextHopEntry::Blackhole => ("blackhole", None, None),
                NextHopEntry::Local => ("local", None, None),
            };
            routes.push(api::RouteEntry {
                network: fib.network_name(net).to_string(),
                prefix: prefix.to_string(),
                kind: kind.to_string(),
                port,
                via,
                source: r.source.name().to_string(),
            });
        }
    }
    RouteDump { routes }
}

/// Compares what the doc says a change did with what the code does.
fn check_outcome(request: &Value, response: &Value, outcome: Result<(), Refusal>) {
    match outcome {
        Ok(()) => assert_eq!(response["result"], json!({}), "{request} was refused"),
        Err((field, message)) => {
            let error = &response["error"];
            assert!(
                !error.is_null(),
                "{request} is refused: `{field}`: {message}"
            );
            assert_eq!(error["data"]["field"], field.as_str(), "{request}");
            assert_eq!(
                error["message"],
                format!("invalid params: `{field}`: {message}").as_str(),
                "{request}"
            );
        }
    }
}

fn decode_hex(hex: &str) -> Vec<u8> {
    assert!(hex.len().is_multiple_of(2), "odd hex: {hex}");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn examples_match_the_forwarding_state_and_the_pipeline() {
    let mut fib = example_fib();
    let mut snap: Option<Snapshot> = None;
    let (mut dumps, mut traces) = (0, 0);
    for (request, response) in exchanges(section("### `route.add`", "## Drop reasons")) {
        let name = request["method"].as_str().expect("method");
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let result = &response["result"];
        match name {
            route_method::ADD => {
                let p: RouteAdd = parse_params(&params).expect("decodes");
                check_outcome(&request, &response, route_add(&mut fib, &p));
            }
            route_method::DEL => {
                let p: RouteDel = parse_params(&params).expect("decodes");
                check_outcome(&request, &response, route_del(&mut fib, &p));
            }
            route_method::DUMP if !result.is_null() => {
                let p: NetworkFilter = parse_params(&params).expect("decodes");
                let dump = serde_json::to_value(route_dump(&fib, &p)).expect("serializes");
                assert_eq!(result, &dump, "the route.dump example is not the code's");
                dumps += 1;
            }
            neigh_method::DUMP if !result.is_null() => {
                // The examples' neighbours: the entries listed, the incomplete ones last.
                let dump: NeighDump = serde_json::from_value(result.clone()).expect("decodes");
                let mut keys = Vec::new();
                let mut incomplete = false;
                for n in &dump.neighbors {
                    if n.state == "incomplete" {
                        incomplete = true;
                        assert!(n.mac.is_empty(), "{n:?}");
                        continue;
                    }
                    assert!(!incomplete, "incomplete entries come last");
                    let net = fib.network_index(&n.network).expect("a known network");
                    let ip: IpAddr = n.ip.parse().expect("an IP address");
                    keys.push((net, ip));
                    let mac = EthernetAddress(parse_mac(&n.mac).expect("a MAC address"));
                    let port = fib.port_index(&n.port).expect("a known port");
                    fib.set_neighbor(net, ip, mac, port, n.state == "static");
                }
                assert!(keys.windows(2).all(|k| k[0] < k[1]), "order of {keys:?}");
                snap = None;
            }
            trace_method::RUN if !result.is_null() => {
                let snap = snap.get_or_insert_with(|| fib.snapshot());
                let p: TraceRun = parse_params(&params).expect("decodes");
                let traced = ferrule_daemon::trace::run(snap, &p).expect("the example traces");
                let traced = serde_json::to_value(traced).expect("serializes");
                assert_eq!(result, &traced, "trace.run {params}");
                traces += 1;
            }
            trace_method::DUMP => {
                let snap = snap.get_or_insert_with(|| fib.snapshot());
                let dump: TraceDump = serde_json::from_value(result.clone()).expect("decodes");
                for p in &dump.packets {
                    let frame = decode_hex(&p.data_hex);
                    assert_eq!(frame.len() as u32, p.len.min(2048), "{}", p.data_hex);
                    let in_port = fib.port_index(&p.port).expect("a known port");
                    let mut frame = frame;
                    let traced = ferrule_daemon::trace::trace_frame(snap, in_port, &mut frame);
                    // Replayed on the generation the worker used: no `note` stage.
                    assert_eq!(p.stages, traced.stages, "trace.dump packet {}", p.data_hex);
                    assert_eq!(
                        p.verdict, traced.verdict,
                        "trace.dump packet {}",
                        p.data_hex
                    );
                    traces += 1;
                }
            }
            _ => {}
        }
        if name.starts_with("route.") {
            snap = None;
        }
    }
    assert!(dumps > 0, "no route.dump example was checked");
    assert!(traces > 0, "no trace example was checked");
}

/// The ACL examples are what the daemon's ACL code answers on the example ports: the
/// applies are validated and applied in order, dumps and clears run on the result.
/// Generations, compile times and classifier sizes vary and are not compared.
#[test]
fn acl_examples_are_what_the_daemon_does() {
    let fib = example_fib();
    let ports = fib
        .ports()
        .iter()
        .map(|p| (p.name.clone(), p.role))
        .collect();
    let mut acl = AclManager::new(ports);
    let worker = ferrule_dataplane::counters::RuleCounters::default();
    let counters = [&worker];
    let exchanges = exchanges(section("### `acl.apply`", "### `vpc.sync`"));
    assert!(exchanges.len() >= 7, "{} ACL examples", exchanges.len());
    for (request, response) in exchanges {
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let outcome: Result<Value, rpc::RpcError> = match request["method"].as_str() {
            Some(acl_method::APPLY) => parse_apply(&params, acl.ports())
                .and_then(|d| acl.apply(&d, &counters))
                .map(|a| serde_json::to_value(a.result).expect("json")),
            Some(acl_method::DUMP) => parse_params(&params)
                .and_then(|p| acl.dump(&p, 0, &counters))
                .map(|d| serde_json::to_value(d).expect("json")),
            Some(acl_method::CLEAR_COUNTERS) => parse_params(&params)
                .and_then(|p| acl.clear(&p, &counters))
                .map(|c| serde_json::to_value(c).expect("json")),
            other => panic!("unexpected method {other:?}"),
        };
        match (outcome, response.get("result")) {
            (Ok(mut got), Some(want)) => {
                let mut want = want.clone();
                for v in [&mut got, &mut want] {
                    v["generation"] = Value::Null;
                    if v.get("compile_ms").is_some() {
                        v["compile_ms"] = Value::Null;
                    }
                    if let Some(tables) = v.get_mut("tables").and_then(Value::as_array_mut) {
                        for t in tables {
                            t["memory_bytes"] = Value::Null;
                        }
                    }
                }
                assert_eq!(got, want, "{request}");
            }
            (Err(e), None) => {
                let error = serde_json::to_value(&e).expect("json");
                assert_eq!(error, response["error"], "{request}");
            }
            (Ok(got), None) => panic!("{request}: the daemon answers {got}, the doc an error"),
            (Err(e), Some(_)) => panic!("{request}: the daemon refuses it: {e}"),
        }
    }
}

/// The VPC examples are what the daemon's VPC code answers on the example ports.
#[test]
fn vpc_examples_are_what_the_daemon_does() {
    let fib = example_fib();
    let mut state = ferrule_daemon::vpc::state(fib.snat());
    for (request, response) in exchanges(section("### `vpc.sync`", "### `ct.dump`")) {
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let outcome = match request["method"].as_str() {
            Some(vpc_method::SYNC) => parse_params::<api::VpcSync>(&params).and_then(|spec| {
                ferrule_daemon::vpc::policy(&spec, &fib.uplink_v4())
                    .map(|p| {
                        state = ferrule_daemon::vpc::state(&p);
                        state.clone()
                    })
                    .map_err(|e| rpc::RpcError::invalid_params(&e.field, e.message))
            }),
            Some(vpc_method::SHOW) => Ok(state.clone()),
            other => panic!("unexpected method {other:?}"),
        };
        match (outcome, response.get("result")) {
            (Ok(got), Some(want)) => {
                assert_eq!(serde_json::to_value(got).unwrap(), *want, "{request}")
            }
            (Err(e), None) => assert_eq!(
                serde_json::to_value(&e).unwrap(),
                response["error"],
                "{request}"
            ),
            (got, _) => panic!("{request}: the daemon answers {got:?}, the doc {response}"),
        }
    }
}
