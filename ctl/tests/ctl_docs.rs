//! Keeps `docs/control-protocol.md` honest:
//!
//! - every example request of the route, neigh, trace and acl methods decodes into
//!   its `api` params type, every example result is exactly what the `api` result type
//!   serializes to, and every example error names its field;
//! - the `version`, `ports.list` and `stats.get` examples are what their result types
//!   send, and the `stats.get` totals add up as the daemon adds them;
//! - the route, trace and trace-dump examples are what the daemon's own request
//!   handlers ([`NodeState`], no EAL) answer on the example configuration
//!   (`configs/ferrule.toml` plus the doc's `toml` block): the requests are replayed in
//!   order and every answer compared, and the dumped packets are run through the
//!   pipeline;
//! - the ACL and VPC examples are what the same handlers answer: each `acl.apply` is
//!   validated and applied in order, and the dump and clear examples run on the result;
//! - the drop-reason table lists exactly the pipeline's reasons (which `ferrulectl
//!   stats` can describe).

use std::net::IpAddr;

use ferrule_api::rpc::{self, parse_params};
use ferrule_api::{
    self as api, acl_method, ct_method, nat_method, neigh_method, network_method, port_method,
    route_method, trace_method, vpc_method, NeighAdd, NeighDel, NeighDump, NetworkFilter,
    PortsList, RouteAdd, RouteDel, RouteDump, Stats, TraceDump, TraceResult, TraceRun, TraceStart,
    VersionInfo,
};
use ferrule_ctl::drop_reason_description;
use ferrule_daemon::config::{parse_mac, Config, EMBEDDED_DEFAULT};
use ferrule_daemon::daemon::NodeState;
use ferrule_dataplane::counters::DropReason;
use ferrule_dataplane::wire::EthernetAddress;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

const DOC: &str = include_str!("../../docs/control-protocol.md");

const METHODS: [&str; 25] = [
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
    network_method::APPLY,
    network_method::DEL,
    network_method::LIST,
    network_method::LOOKUP,
    network_method::FDB,
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
                network_method::APPLY => check_params::<api::network::NetworkApply>(name, &params),
                network_method::DEL => check_params::<api::network::NetworkDel>(name, &params),
                network_method::LIST => {
                    check_params::<api::network::NetworkListParams>(name, &params)
                }
                network_method::LOOKUP => {
                    check_params::<api::network::NetworkLookup>(name, &params)
                }
                network_method::FDB => check_params::<api::network::FdbParams>(name, &params),
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
                network_method::APPLY => {
                    check_result::<api::network::NetworkApplied>(&method, result);
                }
                network_method::DEL => assert_eq!(result, &json!({}), "{method}"),
                network_method::LIST => {
                    check_result::<api::network::NetworkList>(&method, result);
                }
                network_method::LOOKUP => {
                    check_result::<api::network::NetworkLookupResult>(&method, result);
                }
                network_method::FDB => {
                    check_result::<api::network::FdbDump>(&method, result);
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

/// The daemon's state on the example configuration: `configs/ferrule.toml` plus the
/// doc's `toml` block.
fn example_state() -> NodeState {
    let start = DOC.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let len = DOC[start..].find("```").expect("end of the toml block");
    let text = format!("{EMBEDDED_DEFAULT}\n{}", &DOC[start..start + len]);
    let cfg = Config::parse(&text, "docs/control-protocol.md").expect("valid configuration");
    NodeState::for_tests(&cfg).expect("valid forwarding state")
}

/// Compares the doc's response with what the daemon's handler answered: the same
/// result, or the same error (code, message and the field it names).
fn check_answer(request: &Value, response: &Value, answer: Result<Value, rpc::RpcError>) {
    match answer {
        Ok(got) => assert_eq!(response["result"], got, "{request}"),
        Err(e) => {
            let error = &response["error"];
            assert!(!error.is_null(), "{request} is refused: {e}");
            let got = serde_json::to_value(&e).expect("json");
            assert_eq!(error["code"], got["code"], "{request}");
            assert_eq!(error["message"], got["message"], "{request}");
            assert_eq!(error["data"]["field"], got["data"]["field"], "{request}");
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
    let mut state = example_state();
    let (mut dumps, mut traces) = (0, 0);
    for (request, response) in exchanges(section("### `route.add`", "## Drop reasons")) {
        let name = request["method"].as_str().expect("method");
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let result = &response["result"];
        match name {
            route_method::ADD | route_method::DEL => {
                let answer = state.call(name, &params).expect("a state method");
                check_answer(&request, &response, answer);
            }
            route_method::DUMP if !result.is_null() => {
                let answer = state.call(name, &params).expect("a state method");
                assert_eq!(
                    result,
                    &answer.expect("route.dump answers"),
                    "the route.dump example is not the code's"
                );
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
                    let fib = state.fib_mut();
                    let net = fib.network_index(&n.network).expect("a known network");
                    let ip: IpAddr = n.ip.parse().expect("an IP address");
                    keys.push((net, ip));
                    let mac = EthernetAddress(parse_mac(&n.mac).expect("a MAC address"));
                    let port = fib.port_index(&n.port).expect("a known port");
                    fib.set_neighbor(net, ip, mac, port, n.state == "static");
                }
                assert!(keys.windows(2).all(|k| k[0] < k[1]), "order of {keys:?}");
                state.publish();
            }
            trace_method::RUN if !result.is_null() => {
                let answer = state.call(name, &params).expect("a state method");
                assert_eq!(
                    result,
                    &answer.expect("the example traces"),
                    "trace.run {params}"
                );
                traces += 1;
            }
            trace_method::DUMP => {
                let snap = state.snapshot();
                let dump: TraceDump = serde_json::from_value(result.clone()).expect("decodes");
                for p in &dump.packets {
                    let frame = decode_hex(&p.data_hex);
                    assert_eq!(frame.len() as u32, p.len.min(2048), "{}", p.data_hex);
                    let in_port = state.fib().port_index(&p.port).expect("a known port");
                    let mut frame = frame;
                    let traced = ferrule_daemon::trace::trace_frame(&snap, in_port, &mut frame);
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
    }
    assert!(dumps > 0, "no route.dump example was checked");
    assert!(traces > 0, "no trace example was checked");
}

/// The ACL examples are what the daemon's ACL code answers on the example ports: the
/// applies are validated and applied in order, dumps and clears run on the result.
/// Generations, compile times and classifier sizes vary and are not compared.
#[test]
fn acl_examples_are_what_the_daemon_does() {
    let mut state = example_state();
    let exchanges = exchanges(section("### `acl.apply`", "### `vpc.sync`"));
    assert!(exchanges.len() >= 7, "{} ACL examples", exchanges.len());
    for (request, response) in exchanges {
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let method = request["method"].as_str().unwrap_or_default();
        assert!(
            [
                acl_method::APPLY,
                acl_method::DUMP,
                acl_method::CLEAR_COUNTERS
            ]
            .contains(&method),
            "unexpected method {method:?}"
        );
        let outcome = state.call(method, &params).expect("a state method");
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

/// Condition times are the clock's: the doc's stand for any.
fn without_times(mut v: Value) -> Value {
    match &mut v {
        Value::Object(o) => {
            if o.contains_key("lastTransitionTime") {
                o.insert("lastTransitionTime".into(), json!("T"));
            }
            for x in o.values_mut() {
                *x = without_times(x.take());
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                *x = without_times(x.take());
            }
        }
        _ => {}
    }
    v
}

/// The network examples are what the daemon's network handlers answer, in order.
#[test]
fn network_examples_are_what_the_daemon_does() {
    let mut state = example_state();
    for (request, response) in exchanges(section("### `network.apply`", "## Drop reasons")) {
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let method = request["method"].as_str().unwrap_or_default();
        let answer = state
            .call(method, &params)
            .expect("a state method")
            .map(without_times);
        check_answer(&request, &without_times(response), answer);
    }
}

/// The VPC examples are what the daemon's VPC handlers answer on the example ports.
#[test]
fn vpc_examples_are_what_the_daemon_does() {
    let mut state = example_state();
    for (request, response) in exchanges(section("### `vpc.sync`", "### `ct.dump`")) {
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let method = request["method"].as_str().unwrap_or_default();
        assert!(
            [vpc_method::SYNC, vpc_method::SHOW].contains(&method),
            "unexpected method {method:?}"
        );
        let outcome = state.call(method, &params).expect("a state method");
        match (outcome, response.get("result")) {
            (Ok(got), Some(want)) => assert_eq!(got, *want, "{request}"),
            (Err(e), None) => assert_eq!(
                serde_json::to_value(&e).expect("json"),
                response["error"],
                "{request}"
            ),
            (got, _) => panic!("{request}: the daemon answers {got:?}, the doc {response}"),
        }
    }
}
