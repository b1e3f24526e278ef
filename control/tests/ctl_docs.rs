//! Keeps `docs/control-protocol.md` honest: every example request of the route, neigh
//! and trace methods decodes strictly into its `api` params type, every example result
//! is exactly what the `api` result type serializes to, every example error names its
//! field, and the drop-reason table lists the pipeline's reasons (which `ferrulectl
//! stats` can describe).

use ferrule_control::api::{
    neigh_method, route_method, trace_method, NeighAdd, NeighDel, NeighDump, NetworkFilter,
    RouteAdd, RouteDel, RouteDump, TraceDump, TraceResult, TraceRun, TraceStart,
};
use ferrule_control::ctl::drop_reason_description;
use ferrule_control::rpc::{self, parse_params};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

const DOC: &str = include_str!("../../docs/control-protocol.md");

const METHODS: [&str; 9] = [
    route_method::ADD,
    route_method::DEL,
    route_method::DUMP,
    neigh_method::ADD,
    neigh_method::DEL,
    neigh_method::DUMP,
    trace_method::RUN,
    trace_method::START,
    trace_method::DUMP,
];

/// The drop reasons the pipeline uses.
const DROP_REASONS: [&str; 15] = [
    "malformed",
    "arp-ignored",
    "dst-mac-mismatch",
    "vlan-tagged",
    "ttl-exceeded",
    "no-route",
    "blackhole",
    "no-neighbour",
    "mtu-exceeded",
    "port-down",
    "tx-full",
    "local-unhandled",
    "punt-full",
    "no-xconnect",
    "not-ip",
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

/// Checks that `params` decodes strictly into `P`.
fn check_params<P: DeserializeOwned>(method: &str, params: &Value) {
    if let Err(e) = parse_params::<P>(params) {
        panic!("{method} example params {params} do not decode: {e}");
    }
}

/// Checks that `result` is exactly what `R` serializes to.
fn check_result<R: DeserializeOwned + Serialize>(method: &str, result: &Value) {
    let decoded: R = serde_json::from_value(result.clone())
        .unwrap_or_else(|e| panic!("{method} example result does not decode: {e}\n{result}"));
    let again = serde_json::to_value(&decoded).expect("serializes");
    assert_eq!(
        &again, result,
        "{method}: the example result is not what the api type sends"
    );
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
                route_method::DUMP => check_result::<RouteDump>(&method, result),
                neigh_method::DUMP => check_result::<NeighDump>(&method, result),
                trace_method::RUN => check_result::<TraceResult>(&method, result),
                trace_method::DUMP => check_result::<TraceDump>(&method, result),
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
fn drop_reasons_are_documented_and_described() {
    let table = section("## Drop reasons", "## Talking");
    let documented: Vec<&str> = table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .collect();
    for reason in DROP_REASONS {
        assert!(documented.contains(&reason), "{reason} is not documented");
    }
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
