//! `ferrulectl route ...` and `ferrulectl neigh ...` against a fake daemon: the exact
//! params sent for each command form, the usage errors clap catches, the tables, and
//! how daemon errors and bad replies are reported.

mod ctl_support;

use ctl_support::{empty, FakeDaemon};
use ferrule_api::rpc::{self, RpcError};
use ferrule_api::{
    neigh_method, route_method, NeighAdd, NeighDel, NeighDump, NeighEntry, NetworkFilter, RouteAdd,
    RouteDel, RouteDump, RouteEntry,
};
use serde_json::{json, Value};

fn route_daemon() -> FakeDaemon {
    FakeDaemon::start([
        (route_method::ADD, empty()),
        (route_method::DEL, empty()),
        (route_method::DUMP, Ok(json!(routes()))),
    ])
}

fn routes() -> RouteDump {
    let route = |network: &str,
                 prefix: &str,
                 kind: &str,
                 port: Option<&str>,
                 via: Option<&str>,
                 source: &str| RouteEntry {
        network: network.to_string(),
        prefix: prefix.to_string(),
        kind: kind.to_string(),
        port: port.map(str::to_string),
        via: via.map(str::to_string),
        source: source.to_string(),
        table: None,
    };
    RouteDump {
        routes: vec![
            // Deliberately not sorted: ferrulectl keeps the daemon's order.
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
                "192.0.2.0/24",
                "port",
                Some("uplink0"),
                None,
                "connected",
            ),
            route("default", "192.0.2.10/32", "local", None, None, "local"),
            route("blue", "2001:db8:bad::/48", "blackhole", None, None, "api"),
            route("blue", "10.1.0.5/32", "port", Some("pod-web"), None, "pod"),
        ],
        rules: vec![],
    }
}

/// The one call the daemon received: its method and params.
fn one_call(daemon: &FakeDaemon) -> (String, Value) {
    let mut calls = daemon.take_calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    calls.remove(0)
}

#[test]
fn route_add_sends_the_params_of_each_form() {
    let daemon = route_daemon();
    let cases: [(&[&str], Value); 5] = [
        (
            &["route", "add", "10.9.0.0/16", "--port", "uplink0"],
            json!({ "prefix": "10.9.0.0/16", "port": "uplink0", "blackhole": false }),
        ),
        (
            &[
                "route",
                "add",
                "0.0.0.0/0",
                "--port",
                "uplink0",
                "--via",
                "192.0.2.1",
            ],
            json!({ "prefix": "0.0.0.0/0", "port": "uplink0", "via": "192.0.2.1",
                    "blackhole": false }),
        ),
        (
            &["route", "add", "2001:db8:bad::/48", "--blackhole"],
            json!({ "prefix": "2001:db8:bad::/48", "blackhole": true }),
        ),
        (
            &[
                "route",
                "add",
                "--network",
                "blue",
                "10.0.0.0/8",
                "--blackhole",
            ],
            json!({ "network": "blue", "prefix": "10.0.0.0/8", "blackhole": true }),
        ),
        // Passed through as typed: the daemon validates prefixes and addresses.
        (
            &[
                "route",
                "add",
                "10.1.2.3",
                "--via",
                "fe80::1",
                "--port",
                "p",
                "--network",
                "red",
            ],
            json!({ "network": "red", "prefix": "10.1.2.3", "port": "p", "via": "fe80::1",
                    "blackhole": false }),
        ),
    ];
    for (args, expected) in cases {
        // Like `ip route add`: nothing on success.
        assert_eq!(daemon.ctl(args).ok(), "", "{args:?}");
        let (method, params) = one_call(&daemon);
        assert_eq!(method, route_method::ADD);
        assert_eq!(params, expected, "{args:?}");
        // What the daemon decodes (strictly, as it does).
        let decoded: RouteAdd = rpc::parse_params(&params).expect("decodes as RouteAdd");
        assert_eq!(
            decoded.network.is_some(),
            args.contains(&"--network"),
            "{args:?}"
        );
    }

    // The default network is absent, not "default": the daemon picks it.
    daemon
        .ctl(&["route", "add", "10.0.0.0/8", "--port", "u"])
        .ok();
    let params: RouteAdd = rpc::parse_params(&one_call(&daemon).1).expect("decodes");
    assert_eq!(
        params,
        RouteAdd {
            network: None,
            prefix: "10.0.0.0/8".to_string(),
            port: Some("u".to_string()),
            via: None,
            blackhole: false,
        }
    );

    // With --json, the daemon's `{}`.
    let out = daemon.ctl(&["--json", "route", "add", "10.0.0.0/8", "--blackhole"]);
    assert_eq!(out.json(), json!({}));
    assert_eq!(out.stdout, "{}\n");
    assert_eq!(one_call(&daemon).0, route_method::ADD);
}

#[test]
fn route_add_needs_exactly_one_of_port_and_blackhole() {
    let daemon = route_daemon();
    let both = daemon.ctl(&["route", "add", "10.0.0.0/8", "--port", "a", "--blackhole"]);
    let stderr = both.usage_error();
    assert!(
        stderr.contains("'--port <PORT>' cannot be used with '--blackhole'"),
        "{stderr}"
    );

    let neither = daemon.ctl(&["route", "add", "10.0.0.0/8"]);
    let stderr = neither.usage_error();
    assert!(
        stderr.contains("required arguments were not provided") && stderr.contains("--port"),
        "{stderr}"
    );

    let via_alone = daemon.ctl(&["route", "add", "10.0.0.0/8", "--via", "192.0.2.1"]);
    assert!(via_alone.usage_error().contains("--port"));

    let via_blackhole = daemon.ctl(&[
        "route",
        "add",
        "10.0.0.0/8",
        "--via",
        "192.0.2.1",
        "--blackhole",
    ]);
    let stderr = via_blackhole.usage_error();
    assert!(
        stderr.contains("'--via <NEXTHOP>' cannot be used with '--blackhole'"),
        "{stderr}"
    );

    daemon.ctl(&["route", "add", "--port", "a"]).usage_error();
    daemon
        .ctl(&["route", "add", "10.0.0.0/8", "--port", "a", "--metric", "5"])
        .usage_error();
    assert!(daemon.take_calls().is_empty(), "usage errors send nothing");
}

#[test]
fn route_del_sends_prefix_and_network() {
    let daemon = route_daemon();
    assert_eq!(daemon.ctl(&["route", "del", "10.9.0.0/16"]).ok(), "");
    let (method, params) = one_call(&daemon);
    assert_eq!(method, route_method::DEL);
    assert_eq!(params, json!({ "prefix": "10.9.0.0/16" }));
    let decoded: RouteDel = rpc::parse_params(&params).expect("decodes");
    assert_eq!(decoded.network, None);

    daemon
        .ctl(&["route", "del", "2001:db8::/32", "--network", "blue"])
        .ok();
    assert_eq!(
        one_call(&daemon).1,
        json!({ "network": "blue", "prefix": "2001:db8::/32" })
    );

    daemon.ctl(&["route", "del"]).usage_error();
    daemon
        .ctl(&["route", "del", "10.0.0.0/8", "--port", "a"])
        .usage_error();
    assert!(daemon.take_calls().is_empty());
}

#[test]
fn route_dump_is_a_table_in_the_daemons_order() {
    let daemon = route_daemon();
    let stdout = daemon.ctl(&["route", "dump"]).ok().to_string();
    assert_eq!(
        stdout,
        "\
NETWORK  PREFIX             KIND       PORT     VIA        SOURCE
default  0.0.0.0/0          port       uplink0  192.0.2.1  config
default  192.0.2.0/24       port       uplink0  -          connected
default  192.0.2.10/32      local      -        -          local
blue     2001:db8:bad::/48  blackhole  -        -          api
blue     10.1.0.5/32        port       pod-web  -          pod
"
    );
    let (method, params) = one_call(&daemon);
    assert_eq!(method, route_method::DUMP);
    assert_eq!(params, json!({}));
    let filter: NetworkFilter = rpc::parse_params(&params).expect("decodes");
    assert_eq!(filter.network, None);

    daemon.ctl(&["route", "dump", "--network", "blue"]).ok();
    assert_eq!(one_call(&daemon).1, json!({ "network": "blue" }));

    // --json prints the reply as it is.
    let out = daemon.ctl(&["route", "dump", "--json"]);
    assert_eq!(out.json(), json!(routes()));
}

#[test]
fn route_dump_without_routes() {
    let daemon = FakeDaemon::start([(route_method::DUMP, Ok(json!({ "routes": [] })))]);
    assert_eq!(daemon.ctl(&["route", "dump"]).ok(), "no routes\n");
}

#[test]
fn daemon_errors_go_to_stderr_with_exit_status_1() {
    let daemon = FakeDaemon::start([
        (
            route_method::ADD,
            Err(RpcError::invalid_params(
                "prefix",
                "10.1.2.3/16 has host bits set (10.1.0.0/16?)",
            )),
        ),
        (
            route_method::DEL,
            Err(RpcError::invalid_params(
                "network",
                "no network named \"nope\"",
            )),
        ),
        (
            neigh_method::ADD,
            Err(RpcError::invalid_params(
                "mac",
                "\"0a:1b\" is not a MAC address",
            )),
        ),
    ]);
    let out = daemon.ctl(&["route", "add", "10.1.2.3/16", "--port", "uplink0"]);
    assert_eq!(
        out.failed(),
        "ferrulectl: ferruled: invalid params: `prefix`: 10.1.2.3/16 has host bits set \
         (10.1.0.0/16?) (code -32602)\n"
    );
    // The same with --json: errors are not JSON output.
    let out = daemon.ctl(&["--json", "route", "add", "10.1.2.3/16", "--blackhole"]);
    assert!(out.failed().contains("`prefix`"), "{out:?}");

    let out = daemon.ctl(&["route", "del", "10.0.0.0/8", "--network", "nope"]);
    assert!(
        out.failed()
            .contains("`network`: no network named \"nope\" (code -32602)"),
        "{out:?}"
    );
    let out = daemon.ctl(&["neigh", "add", "192.0.2.1", "0a:1b", "--port", "uplink0"]);
    assert!(out.failed().contains("`mac`"), "{out:?}");

    // A method the daemon does not have (an older ferruled).
    let out = daemon.ctl(&["neigh", "dump"]);
    assert!(
        out.failed()
            .contains("method not found: `neigh.dump` (code -32601)"),
        "{out:?}"
    );
}

#[test]
fn bad_dump_replies_are_unexpected_replies() {
    let daemon = FakeDaemon::start([
        (route_method::DUMP, Ok(json!({ "routes": "all of them" }))),
        (
            neigh_method::DUMP,
            Ok(json!({ "neighbors": [{ "ip": "192.0.2.1" }] })),
        ),
    ]);
    for args in [&["route", "dump"], &["neigh", "dump"]] {
        let out = daemon.ctl(args);
        assert!(
            out.failed()
                .starts_with("ferrulectl: unexpected reply from ferruled: "),
            "{out:?}"
        );
    }
}

fn neighbors() -> NeighDump {
    let neigh = |network: &str,
                 ip: &str,
                 mac: &str,
                 port: &str,
                 state: &str,
                 age_secs: f64,
                 held_packets: u32| NeighEntry {
        network: network.to_string(),
        ip: ip.to_string(),
        mac: mac.to_string(),
        port: port.to_string(),
        state: state.to_string(),
        age_secs,
        held_packets,
    };
    NeighDump {
        neighbors: vec![
            neigh(
                "default",
                "192.0.2.1",
                "0a:1b:2c:3d:4e:5f",
                "uplink0",
                "reachable",
                12.3,
                0,
            ),
            neigh(
                "default",
                "192.0.2.77",
                "",
                "uplink0",
                "incomplete",
                0.04,
                3,
            ),
            neigh(
                "blue",
                "2001:db8::1",
                "0a:00:00:00:00:01",
                "uplink1",
                "static",
                0.0,
                0,
            ),
            neigh(
                "blue",
                "fe80::1",
                "0a:00:00:00:00:02",
                "uplink1",
                "stale",
                612.0,
                0,
            ),
        ],
    }
}

fn neigh_daemon() -> FakeDaemon {
    FakeDaemon::start([
        (neigh_method::ADD, empty()),
        (neigh_method::DEL, empty()),
        (neigh_method::DUMP, Ok(json!(neighbors()))),
    ])
}

#[test]
fn neigh_add_and_del_send_their_params() {
    let daemon = neigh_daemon();
    let out = daemon.ctl(&[
        "neigh",
        "add",
        "192.0.2.1",
        "0a:1b:2c:3d:4e:5f",
        "--port",
        "uplink0",
    ]);
    assert_eq!(out.ok(), "");
    let (method, params) = one_call(&daemon);
    assert_eq!(method, neigh_method::ADD);
    assert_eq!(
        params,
        json!({ "ip": "192.0.2.1", "mac": "0a:1b:2c:3d:4e:5f", "port": "uplink0" })
    );
    let decoded: NeighAdd = rpc::parse_params(&params).expect("decodes");
    assert_eq!(decoded.network, None);

    daemon
        .ctl(&[
            "neigh",
            "add",
            "--network",
            "blue",
            "2001:db8::1",
            "0a:00:00:00:00:01",
            "--port",
            "uplink1",
        ])
        .ok();
    assert_eq!(
        one_call(&daemon).1,
        json!({ "network": "blue", "ip": "2001:db8::1", "mac": "0a:00:00:00:00:01",
                "port": "uplink1" })
    );

    assert_eq!(daemon.ctl(&["neigh", "del", "192.0.2.1"]).ok(), "");
    let (method, params) = one_call(&daemon);
    assert_eq!(method, neigh_method::DEL);
    assert_eq!(params, json!({ "ip": "192.0.2.1" }));
    let decoded: NeighDel = rpc::parse_params(&params).expect("decodes");
    assert_eq!(decoded.network, None);
    daemon
        .ctl(&["neigh", "del", "fe80::1", "--network", "blue"])
        .ok();
    assert_eq!(
        one_call(&daemon).1,
        json!({ "network": "blue", "ip": "fe80::1" })
    );

    let out = daemon.ctl(&["--json", "neigh", "del", "192.0.2.1"]);
    assert_eq!(out.json(), json!({}));
    one_call(&daemon);

    // The port is required; so are IP and MAC.
    daemon
        .ctl(&["neigh", "add", "192.0.2.1", "0a:1b:2c:3d:4e:5f"])
        .usage_error();
    daemon
        .ctl(&["neigh", "add", "192.0.2.1", "--port", "uplink0"])
        .usage_error();
    daemon.ctl(&["neigh", "del"]).usage_error();
    assert!(daemon.take_calls().is_empty());
}

#[test]
fn neigh_dump_is_a_table() {
    let daemon = neigh_daemon();
    let stdout = daemon.ctl(&["neigh", "dump"]).ok().to_string();
    assert_eq!(
        stdout,
        "\
NETWORK  IP           MAC                PORT     STATE       AGE     HELD
default  192.0.2.1    0a:1b:2c:3d:4e:5f  uplink0  reachable   12.3s      0
default  192.0.2.77   -                  uplink0  incomplete  0.0s       3
blue     2001:db8::1  0a:00:00:00:00:01  uplink1  static      -          0
blue     fe80::1      0a:00:00:00:00:02  uplink1  stale       612.0s     0
"
    );
    let (method, params) = one_call(&daemon);
    assert_eq!(method, neigh_method::DUMP);
    assert_eq!(params, json!({}));

    daemon.ctl(&["neigh", "dump", "--network", "blue"]).ok();
    assert_eq!(one_call(&daemon).1, json!({ "network": "blue" }));

    assert_eq!(
        daemon.ctl(&["--json", "neigh", "dump"]).json(),
        json!(neighbors())
    );

    let empty = FakeDaemon::start([(neigh_method::DUMP, Ok(json!({ "neighbors": [] })))]);
    assert_eq!(empty.ctl(&["neigh", "dump"]).ok(), "no neighbours\n");
}

#[test]
fn help_shows_the_new_commands() {
    let out = ctl_support::ferrulectl(&["--help"]);
    let help = out.ok();
    for text in ["route", "neigh", "trace", "ferrulectl route add 0.0.0.0/0"] {
        assert!(help.contains(text), "{text}: {help}");
    }
    for args in [
        &["route", "add", "--help"][..],
        &["route", "del", "--help"],
        &["route", "dump", "--help"],
        &["neigh", "add", "--help"],
        &["neigh", "dump", "--help"],
    ] {
        let out = ctl_support::ferrulectl(args);
        assert!(out.ok().contains("Usage: ferrulectl"), "{args:?}");
    }
}
