//! `ferrulectl fqdn cache|identities|selectors` against a fake daemon answering what
//! ferruled's `fqdn.*` methods answer: the request (no params), the three tables,
//! `--json` (the reply as it is), replies with fields this ferrulectl does not know,
//! and bad replies; and the example results of `docs/control-protocol.md`, which must
//! decode here and have the members the daemon's own `fqdn.*` handlers answer with.

mod ctl_support;

use std::time::{SystemTime, UNIX_EPOCH};

use ctl_support::FakeDaemon;
use ferrule_api::fqdn_method;
use ferrule_api::rpc::RpcError;
use ferrule_ctl::fqdn::{
    decode, format_ttl, render_cache, render_identities, FqdnCache, FqdnIdentities, FqdnSelectors,
    Labels,
};
use ferrule_daemon::config::{Config, EMBEDDED_DEFAULT};
use ferrule_daemon::daemon::NodeState;
use serde_json::{json, Value};

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// An `fqdn.cache` reply: two addresses of one name (one expiring in an hour, one
/// expired but still in use), and a name no selector selects.
fn cache(now: u64) -> Value {
    json!({"names": [
        {"name": "api.example.com", "labels": ["fqdn:*.example.com"],
         "endpoints": ["default/pod-a"],
         "ips": [
            {"ip": "203.0.113.7", "expires": now + 3600, "identity": 16777217},
            {"ip": "2001:db8::7", "expires": now.saturating_sub(5), "identity": 16777217}
         ]},
        {"name": "www.other.test", "labels": [], "endpoints": [],
         "ips": [{"ip": "198.51.100.9", "expires": now + 3600, "identity": null}]}
    ]})
}

fn identities() -> Value {
    json!({
        "identities": [
            {"id": 16777216, "labels": ["cidr:192.0.2.0/24", "reserved:world"], "refs": 1, "prefixes": 1},
            {"id": 16777217, "labels": ["fqdn:*.example.com", "reserved:world"], "refs": 3, "prefixes": 2}
        ],
        "breaker": {"ips_evicted_over_limit": 0, "ips_refused_over_limit": 4, "identities_refused": 1}
    })
}

fn selectors() -> Value {
    json!({
        "selectors": [
            {"selector": "fqdn:*.example.com", "identities": [16777217, 16777218]},
            {"selector": "fqdn:api.unused.test", "identities": []},
            {"selector": "cidr:192.0.2.0/24", "identities": [16777216]}
        ],
        "dns": [
            {"allow": ["*.example.com", "api.unused.test"], "pod": "default/pod-a"},
            {"allow": ["*"], "port": "pod-b"}
        ],
        "dns_servers": ["10.96.0.10", "fd00:96::a"],
        "proxy": {"queries": 12, "refused": 2, "forwarded": 10, "answered": 9,
                  "addresses_learned": 14, "malformed_queries": 0, "malformed_answers": 0,
                  "upstream_timeouts": 1, "upstream_errors": 0, "reply_errors": 0,
                  "tcp_connections": 3, "tcp_refused": 1},
        "pending": 0
    })
}

fn daemon(now: u64) -> FakeDaemon {
    FakeDaemon::start([
        (fqdn_method::CACHE, Ok(cache(now))),
        (fqdn_method::IDENTITIES, Ok(identities())),
        (fqdn_method::SELECTORS, Ok(selectors())),
    ])
}

#[test]
fn each_view_calls_its_method_without_params() {
    let d = daemon(now());
    for (view, method) in [
        ("cache", fqdn_method::CACHE),
        ("identities", fqdn_method::IDENTITIES),
        ("selectors", fqdn_method::SELECTORS),
    ] {
        d.ctl(&["fqdn", view]).ok();
        assert_eq!(
            d.take_calls(),
            [(method.to_string(), Value::Null)],
            "{view}"
        );
    }
    // No view: clap's help, as for the other command groups.
    assert_eq!(d.ctl(&["fqdn"]).code, Some(2));
    d.ctl(&["fqdn", "names"]).usage_error();
    d.ctl(&["fqdn", "cache", "--name", "x"]).usage_error();
    assert!(d.take_calls().is_empty(), "usage errors send nothing");
}

#[test]
fn cache_prints_one_line_per_address() {
    let now = now();
    let stdout = daemon(now).ctl(&["fqdn", "cache"]).ok().to_string();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "ADDRESS", "TTL", "IDENTITY", "ENDPOINTS", "LABELS"]
    );
    let row = |i: usize| -> Vec<&str> { lines[i].split_whitespace().collect() };
    let first = row(1);
    assert_eq!(first[..2], ["api.example.com", "203.0.113.7"], "{stdout}");
    // Seconds until expiry, against this machine's clock: an hour, give or take the
    // seconds the test took.
    let ttl: u64 = first[2].parse().expect("seconds");
    assert!((3500..=3600).contains(&ttl), "{stdout}");
    assert_eq!(
        first[3..],
        ["16777217", "default/pod-a", "fqdn:*.example.com"]
    );
    assert_eq!(
        row(2),
        [
            "api.example.com",
            "2001:db8::7",
            "expired",
            "16777217",
            "default/pod-a",
            "fqdn:*.example.com"
        ]
    );
    let third = row(3);
    assert_eq!(third[..2], ["www.other.test", "198.51.100.9"]);
    assert_eq!(third[3..], ["-", "-", "-"], "{stdout}");
    assert_eq!(lines[4], "2 names, 3 addresses");
    // Columns line up: every address starts where the header's ADDRESS does.
    let at = lines[0].find("ADDRESS").expect("header");
    for line in &lines[1..4] {
        assert_ne!(line.as_bytes()[at], b' ', "{stdout}");
        assert_eq!(line.as_bytes()[at - 1], b' ', "{stdout}");
    }

    let empty = FakeDaemon::start([(fqdn_method::CACHE, Ok(json!({"names": []})))]);
    assert_eq!(empty.ctl(&["fqdn", "cache"]).ok(), "no names cached\n");
}

#[test]
fn identities_print_their_labels_then_the_breaker() {
    let stdout = daemon(now()).ctl(&["fqdn", "identities"]).ok().to_string();
    // The ID column is numeric: right-aligned.
    assert_eq!(
        stdout,
        concat!(
            "      ID  LABELS                             REFS  PREFIXES\n",
            "16777216  cidr:192.0.2.0/24,reserved:world      1         1\n",
            "16777217  fqdn:*.example.com,reserved:world     3         2\n",
            "\n",
            "BREAKER                 COUNT\n",
            "ips_evicted_over_limit      0\n",
            "ips_refused_over_limit      4\n",
            "identities_refused          1\n",
        )
    );
}

#[test]
fn selectors_print_identities_dns_policies_servers_and_proxy_counters() {
    let stdout = daemon(now()).ctl(&["fqdn", "selectors"]).ok().to_string();
    assert_eq!(
        stdout,
        "\
SELECTOR              IDENTITIES
fqdn:*.example.com    16777217,16777218
fqdn:api.unused.test  -
cidr:192.0.2.0/24     16777216

DNS POLICY         ALLOWED NAMES
pod default/pod-a  *.example.com, api.unused.test
port pod-b         *
DNS servers: 10.96.0.10, fd00:96::a

PROXY              COUNT
queries               12
refused                2
forwarded             10
answered               9
addresses_learned     14
malformed_queries      0
malformed_answers      0
upstream_timeouts      1
upstream_errors        0
reply_errors           0
tcp_connections        3
tcp_refused            1
pending                0
"
    );

    let empty = FakeDaemon::start([(
        fqdn_method::SELECTORS,
        Ok(json!({
            "selectors": [], "dns": [], "dns_servers": [], "pending": 3,
            "proxy": {"queries": 0, "refused": 0, "forwarded": 0, "answered": 0,
                      "addresses_learned": 0, "malformed_queries": 0, "malformed_answers": 0,
                      "upstream_timeouts": 0, "upstream_errors": 0, "reply_errors": 0}
        })),
    )]);
    let stdout = empty.ctl(&["fqdn", "selectors"]).ok().to_string();
    assert!(
        stdout.starts_with(
            "no selectors\n\nno DNS policies\nDNS servers: none ([fqdn] dns_servers is empty"
        ),
        "{stdout}"
    );
    assert!(stdout.ends_with("\npending                3\n"), "{stdout}");
}

#[test]
fn json_prints_the_reply_as_it_is() {
    let now = now();
    let d = daemon(now);
    for (view, reply) in [
        ("cache", cache(now)),
        ("identities", identities()),
        ("selectors", selectors()),
    ] {
        assert_eq!(d.ctl(&["--json", "fqdn", view]).json(), reply, "{view}");
        assert_eq!(d.ctl(&["fqdn", view, "--json"]).json(), reply, "{view}");
    }
    // Even a reply this ferrulectl could not render.
    let odd = json!({"names": "not a list", "v2": true});
    let d = FakeDaemon::start([(fqdn_method::CACHE, Ok(odd.clone()))]);
    assert_eq!(d.ctl(&["--json", "fqdn", "cache"]).json(), odd);
}

#[test]
fn new_fields_are_tolerated() {
    let mut reply = selectors();
    reply["generation"] = json!(7);
    reply["selectors"][2]["kind"] = json!("cidr");
    reply["dns"][1]["note"] = json!("x");
    reply["proxy"]["upstream_truncated"] = json!(5);
    let d = FakeDaemon::start([(fqdn_method::SELECTORS, Ok(reply))]);
    let stdout = d.ctl(&["fqdn", "selectors"]).ok().to_string();
    // A counter this ferrulectl does not know is printed after the others.
    assert!(
        stdout.ends_with("pending                 0\nupstream_truncated      5\n"),
        "{stdout}"
    );

    let mut reply = cache(now());
    reply["names"][0]["ips"][0]["seen"] = json!(1);
    reply["names"][0]["ttl_floor"] = json!(60);
    let d = FakeDaemon::start([(fqdn_method::CACHE, Ok(reply))]);
    assert!(d.ctl(&["fqdn", "cache"]).ok().contains("203.0.113.7"));
}

#[test]
fn bad_replies_and_errors() {
    let mut reply = cache(now());
    reply["names"][1]["ips"][0]["expires"] = json!("soon");
    let d = FakeDaemon::start([
        (fqdn_method::CACHE, Ok(reply)),
        (
            fqdn_method::IDENTITIES,
            Ok(json!({"identities": [{"id": "x"}], "breaker": {}})),
        ),
        (fqdn_method::SELECTORS, Ok(json!({"selectors": []}))),
    ]);
    let stderr = d.ctl(&["fqdn", "cache"]).failed().to_string();
    assert!(
        stderr.starts_with(
            "ferrulectl: unexpected reply from ferruled: result of `fqdn.cache`: names[1].ips[0]: "
        ),
        "{stderr}"
    );
    let stderr = d.ctl(&["fqdn", "identities"]).failed().to_string();
    assert!(
        stderr.contains("result of `fqdn.identities`: identities[0]: "),
        "{stderr}"
    );
    let stderr = d.ctl(&["fqdn", "selectors"]).failed().to_string();
    assert!(
        stderr.contains("result of `fqdn.selectors`: missing field `dns`"),
        "{stderr}"
    );

    // An older ferruled without the methods.
    let d = FakeDaemon::start([(
        fqdn_method::CACHE,
        Err(RpcError::invalid_params("params", "fqdn.* takes no params")),
    )]);
    let stderr = d.ctl(&["fqdn", "identities"]).failed().to_string();
    assert!(stderr.contains("fqdn.identities"), "{stderr}");
    let stderr = d.ctl(&["fqdn", "cache"]).failed().to_string();
    assert!(stderr.contains("fqdn.* takes no params"), "{stderr}");
}

#[test]
fn help_explains_fqdn_policy() {
    let out = ctl_support::ferrulectl(&["fqdn", "--help"]);
    let text = out.ok();
    for needle in [
        "FQDN policy allows egress by DNS name",
        "docs/fqdn.md",
        "cache ",
        "identities ",
        "selectors ",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let text = ctl_support::ferrulectl(&["fqdn", "cache", "--help"])
        .ok()
        .to_string();
    assert!(text.contains("seconds until it expires"), "{text}");
    let text = ctl_support::ferrulectl(&["--help"]).ok().to_string();
    assert!(text.contains("fqdn"), "{text}");
}

// The renderers and the decoding, called directly (a fixed clock).

#[test]
fn cache_table_at_a_fixed_time() {
    let c: FqdnCache = decode(&json!({"names": [
        {"name": "api.example.com", "labels": ["fqdn:*.example.com"],
         "endpoints": ["default/pod-a", "default/pod-b"],
         "ips": [{"ip": "203.0.113.7", "expires": 1060, "identity": 16777217},
                 {"ip": "2001:db8::7", "expires": 999, "identity": 16777217}]},
        {"name": "other.test", "labels": [], "endpoints": [],
         "ips": [{"ip": "198.51.100.1", "expires": 1300}]}
    ]}))
    .expect("decodes");
    assert_eq!(
        render_cache(&c, 1000),
        concat!(
            "NAME             ADDRESS       TTL      IDENTITY  ENDPOINTS                    LABELS\n",
            "api.example.com  203.0.113.7   60       16777217  default/pod-a,default/pod-b  fqdn:*.example.com\n",
            "api.example.com  2001:db8::7   expired  16777217  default/pod-a,default/pod-b  fqdn:*.example.com\n",
            "other.test       198.51.100.1  300             -  -                            -\n",
            "2 names, 3 addresses\n",
        )
    );
    assert_eq!(
        render_cache(&FqdnCache { names: vec![] }, 0),
        "no names cached\n"
    );
    assert_eq!(format_ttl(100, 40), "60");
    assert_eq!(format_ttl(100, 100), "expired");
    assert_eq!(format_ttl(0, 100), "expired");
}

#[test]
fn labels_decode_from_a_list_or_their_text() {
    let l: Labels =
        serde_json::from_value(json!(["fqdn:a.com", "reserved:world"])).expect("a list");
    assert_eq!(l.0, ["fqdn:a.com", "reserved:world"]);
    let t: Labels = serde_json::from_value(json!("fqdn:a.com,reserved:world")).expect("text");
    assert_eq!(t, l);
    let none: Labels = serde_json::from_value(json!([])).expect("empty");
    assert!(none.0.is_empty());
    assert!(serde_json::from_value::<Labels>(json!(7)).is_err());
}

#[test]
fn decoding_errors_name_the_first_bad_element() {
    let v = json!({"names": [
        {"name": "a.com", "labels": [], "endpoints": [], "ips": []},
        {"name": "b.com", "labels": [], "endpoints": [], "ips": [{"ip": "192.0.2.1"}]}
    ]});
    let e = decode::<FqdnCache>(&v).unwrap_err();
    assert!(
        e.starts_with("names[1].ips[0]: ") && e.contains("expires"),
        "{e}"
    );
    let v = json!({"names": [{"name": "a.com", "endpoints": [], "ips": []}]});
    let e = decode::<FqdnCache>(&v).unwrap_err();
    assert!(e.starts_with("names[0]: ") && e.contains("labels"), "{e}");

    let v = json!({"identities": [{"id": 1, "labels": [], "refs": 1}], "breaker": {}});
    let e = decode::<FqdnIdentities>(&v).unwrap_err();
    assert!(
        e.starts_with("identities[0]: ") && e.contains("prefixes"),
        "{e}"
    );

    let v = json!({"selectors": [], "dns": [{"port": "p"}], "dns_servers": [], "pending": 0,
                   "proxy": {}});
    let e = decode::<FqdnSelectors>(&v).unwrap_err();
    assert!(e.starts_with("dns[0]: ") && e.contains("allow"), "{e}");
    let v = json!({"selectors": [], "dns": [], "dns_servers": [], "pending": 0,
                   "proxy": {"queries": "many"}});
    let e = decode::<FqdnSelectors>(&v).unwrap_err();
    assert!(e.starts_with("proxy: "), "{e}");
    // A missing top-level field: serde's own message.
    let e = decode::<FqdnSelectors>(&json!({})).unwrap_err();
    assert!(e.contains("selectors"), "{e}");
}

#[test]
fn unknown_counters_are_printed_after_the_known_ones() {
    let r: FqdnIdentities = decode(&json!({
        "identities": [],
        "breaker": {"ips_evicted_over_limit": 1, "ips_refused_over_limit": 2,
                    "identities_refused": 3, "new_counter": 4, "note": "x"},
        "future": true
    }))
    .expect("decodes");
    assert_eq!(
        render_identities(&r),
        concat!(
            "no identities\n",
            "\n",
            "BREAKER                 COUNT\n",
            "ips_evicted_over_limit      1\n",
            "ips_refused_over_limit      2\n",
            "identities_refused          3\n",
            "new_counter                 4\n",
        )
    );
}

const DOC: &str = include_str!("../../docs/control-protocol.md");

/// The example result of a method's section: the first fenced line that is a JSON
/// object.
fn doc_example(method: &str) -> Value {
    let heading = format!("### `{method}`");
    let from = DOC.find(&heading).expect("a section for the method");
    let text = &DOC[from + heading.len()..];
    let text = &text[..text.find("\n### ").unwrap_or(text.len())];
    let line = text
        .lines()
        .find(|l| l.starts_with("{\""))
        .unwrap_or_else(|| panic!("no example result for {method}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{method} example: {e}"))
}

/// The member names of an object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    k.sort();
    k
}

#[test]
fn doc_examples_decode_and_match_the_daemon() {
    let text = format!("{EMBEDDED_DEFAULT}\n[fqdn]\ndns_servers = [\"10.96.0.10\"]\n");
    let cfg = Config::parse(&text, "test").expect("valid configuration");
    let mut state = NodeState::for_tests(&cfg).expect("a state");
    let mut answer = |method: &str| -> Value {
        state
            .call(method, &Value::Null)
            .expect("a state method")
            .expect("answers")
    };

    let cache = doc_example(fqdn_method::CACHE);
    let c: FqdnCache = decode(&cache).expect("the fqdn.cache example decodes");
    assert!(!c.names.is_empty() && !c.names[0].ips.is_empty());
    let name = &cache["names"][0];
    assert_eq!(
        keys(name),
        ["endpoints", "ips", "labels", "name"],
        "the members of ferrule_fqdn's CachedName"
    );
    assert_eq!(keys(&name["ips"][0]), ["expires", "identity", "ip"]);
    assert_eq!(keys(&cache), keys(&answer(fqdn_method::CACHE)));

    let identities = doc_example(fqdn_method::IDENTITIES);
    decode::<FqdnIdentities>(&identities).expect("the fqdn.identities example decodes");
    assert_eq!(
        keys(&identities["identities"][0]),
        ["id", "labels", "prefixes", "refs"]
    );
    let daemon = answer(fqdn_method::IDENTITIES);
    assert_eq!(keys(&identities), keys(&daemon));
    assert_eq!(keys(&identities["breaker"]), keys(&daemon["breaker"]));

    let selectors = doc_example(fqdn_method::SELECTORS);
    decode::<FqdnSelectors>(&selectors).expect("the fqdn.selectors example decodes");
    assert_eq!(keys(&selectors["selectors"][0]), ["identities", "selector"]);
    let daemon = answer(fqdn_method::SELECTORS);
    assert_eq!(keys(&selectors), keys(&daemon));
    assert_eq!(keys(&selectors["proxy"]), keys(&daemon["proxy"]));
    assert_eq!(daemon["dns_servers"], json!(["10.96.0.10"]));
}

#[test]
fn acl_doc_selector_example_is_valid() {
    let doc = include_str!("../../docs/acl.md");
    let from = doc.find("## Selector destinations").expect("the section");
    let text = &doc[from..];
    let start = text.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let len = text[start..].find("```").expect("its end");
    let value = ferrule_ctl::acl::parse(&text[start..start + len], false).expect("valid YAML");
    let apply = ferrule_api::AclApply::from_params(&value, None).expect("a valid acl.apply");
    let rules = &apply.tables[0].rules;
    assert_eq!(rules[1].dst_selector.as_deref(), Some("fqdn:*.example.com"));
    assert_eq!(
        rules[2].dst_selector.as_deref(),
        Some("cidr:198.51.100.0/24")
    );
    assert_eq!(apply.dns.len(), 1);
    assert_eq!(apply.dns[0].allow, ["*.example.com"]);
}

#[test]
fn fqdn_configuration_examples_are_valid() {
    // configs/README.md: the `[fqdn]` example block, and the error it shows.
    let readme = include_str!("../../configs/README.md");
    let from = readme.find("## `[fqdn]`").expect("the [fqdn] section");
    let text = &readme[from..];
    let start = text.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let len = text[start..].find("```").expect("its end");
    let block = &text[start..start + len];
    let cfg = Config::parse(&format!("{EMBEDDED_DEFAULT}\n{block}"), "README")
        .expect("the README's [fqdn] example is valid");
    assert_eq!(cfg.fqdn.dns_servers.len(), 2);
    assert_eq!(cfg.fqdn.config.min_ttl, 60);
    let bad = "\n[fqdn]\ndns_servers = [\"10.96.0.10\", \"10.96.0.300\"]\n";
    let e = Config::parse(bad, "/etc/ferrule/ferrule.toml")
        .expect_err("a bad address")
        .to_string();
    let shown = format!("ferruled: {e}");
    assert!(
        text.contains(&shown),
        "the README shows {shown:?} as the error"
    );

    // configs/ferrule.toml: the commented [fqdn] block, uncommented, is valid; as
    // shipped it is all comments (the demo runs this file without DNS policy).
    let lines: Vec<&str> = EMBEDDED_DEFAULT
        .lines()
        .skip_while(|l| *l != "# [fqdn]")
        .collect();
    assert!(!lines.is_empty(), "a commented [fqdn] block");
    assert!(lines.iter().all(|l| l.starts_with('#')), "{lines:?}");
    let uncommented: String = lines
        .iter()
        .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or("")))
        .collect();
    let cfg = Config::parse(
        &format!("{EMBEDDED_DEFAULT}\n{uncommented}"),
        "ferrule.toml",
    )
    .expect("the commented [fqdn] block is valid");
    assert_eq!(
        cfg.fqdn.dns_servers,
        ["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(
        cfg.fqdn.upstream,
        Some("10.96.0.10:53".parse().expect("an address"))
    );
    assert_eq!(
        (cfg.fqdn.gc_interval_ms, cfg.fqdn.upstream_timeout_ms),
        (1000, 5000)
    );
    let shipped = Config::parse(EMBEDDED_DEFAULT, "ferrule.toml").expect("valid");
    assert!(shipped.fqdn.dns_servers.is_empty());
}
