//! `acl.apply`'s params as types: the whole desired ACL state — named tables of rules,
//! where each is attached, the global table — with the one decoder every reader uses
//! ([`AclApply::from_params`]: errors name the field path, the table and the rule) and
//! the encoding every writer sends (the policy renderer, `ferrule-agent`).

use crate::rpc::RpcError;
use ferrule_dataplane::acl::table::Direction;
use ferrule_dataplane::acl::{Action, PortRange, Prefix, Proto, Rule, RuleField};
use ferrule_fqdn::{FqdnSelector, Selector};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// The fields a rule may have.
pub const RULE_FIELDS: &str = "action, proto, src, dst, src_port, dst_port, origin";

/// Most tables one apply may hold (attachments index them with a `u16`).
pub const MAX_TABLES: usize = 4096;

/// `acl.apply` params: the desired ACL state as a whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclApply {
    /// Tables in input order; names are unique.
    pub tables: Vec<AclTable>,
    /// Where tables are attached: at most one per port and direction.
    pub attach: Vec<AclAttach>,
    /// The table every uplink's egress is checked against, if any.
    pub global: Option<String>,
    /// The ports (or pods) whose DNS queries go through the DNS proxy, and the names
    /// each may look up: at most one entry per target.
    pub dns: Vec<DnsPolicy>,
    /// Validate and compile, change nothing.
    pub dry_run: bool,
}

/// The DNS policy of one port or pod (Cilium's `toPorts[].rules.dns`): its UDP DNS
/// queries to the configured DNS service addresses are answered through the proxy,
/// which refuses (`REFUSED`) a name no pattern of `allow` matches and learns the
/// addresses of the names it lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsPolicy {
    pub target: AttachTarget,
    /// Canonical `matchPattern`s (a name without `*` is a `matchName`); `*` allows
    /// every name.
    pub allow: Vec<String>,
}

/// A named table of rules, first match wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclTable {
    pub name: String,
    pub rules: Vec<Rule>,
}

/// What an attachment names: a port, or the Kubernetes pod a port records (`port.add
/// --pod`, the CNI plugin's ADD). A pod's attachment follows the pod: it applies to
/// whichever port records it, and waits while none does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttachTarget {
    Port(String),
    /// `namespace/name`.
    Pod(String),
}

impl std::fmt::Display for AttachTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttachTarget::Port(p) => write!(f, "port {p}"),
            AttachTarget::Pod(p) => write!(f, "pod {p}"),
        }
    }
}

/// A table attached to a port (or a pod's port) in one direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclAttach {
    pub target: AttachTarget,
    pub direction: Direction,
    pub table: String,
}

/// An `INVALID_PARAMS` error at `path`, with the table and rule it is about.
pub fn invalid(path: &str, table: Option<&str>, rule: Option<usize>, detail: String) -> RpcError {
    let mut e = RpcError::invalid_params(path, detail);
    e.data = Some(serde_json::json!({ "field": path, "table": table, "rule": rule }));
    e
}

/// How an error names a JSON value's type: `a string`, `a list`, `a map`, ….
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, RpcError> {
    v.as_object().ok_or_else(|| {
        invalid(
            path,
            None,
            None,
            format!("expected a map, found {}", type_name(v)),
        )
    })
}

fn list<'a>(v: Option<&'a Value>, path: &str) -> Result<&'a [Value], RpcError> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(invalid(
            path,
            None,
            None,
            format!("expected a list, found {}", type_name(other)),
        )),
    }
}

fn string<'a>(v: Option<&'a Value>, path: &str) -> Result<Option<&'a str>, RpcError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(invalid(
            path,
            None,
            None,
            format!("expected a string, found {}", type_name(other)),
        )),
    }
}

fn unknown_keys(map: &Map<String, Value>, allowed: &[&str], path: &str) -> Result<(), RpcError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(invalid(
            &join(path, k),
            None,
            None,
            format!("unknown field (expected one of: {})", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

/// `path.key` (just `key` at the top): a field path as errors name it.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Parses one rule map; errors name `tables[t].rules[r].FIELD`, the table and the rule.
fn parse_rule(v: &Value, path: &str, table: &str, index: usize) -> Result<Rule, RpcError> {
    let fail = |field: &str, detail: String| {
        invalid(
            &join(path, field),
            Some(table),
            Some(index),
            format!("table {table:?} rule {index}: {detail}"),
        )
    };
    let map = v
        .as_object()
        .ok_or_else(|| fail("", format!("expected a map, found {}", type_name(v))))?;
    if let Some(k) = map
        .keys()
        .find(|k| !RULE_FIELDS.split(", ").any(|f| f == k.as_str()))
    {
        return Err(fail(
            k,
            format!("{k}: unknown field (expected one of: {RULE_FIELDS})"),
        ));
    }
    let text = |field: &str| -> Result<Option<&str>, RpcError> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(fail(
                field,
                format!("{field}: expected a string, found {}", type_name(other)),
            )),
        }
    };
    let rule_err =
        |e: ferrule_dataplane::acl::RuleError| fail(&e.field().to_string(), e.to_string());

    let action = match text("action")? {
        Some(a) => Action::parse(a).map_err(rule_err)?,
        None => {
            return Err(fail(
                "action",
                "action: required (permit, deny or reflect)".into(),
            ))
        }
    };
    let proto = match map.get("proto") {
        None | Some(Value::Null) => Proto::Any,
        Some(Value::String(s)) => Proto::parse(s).map_err(rule_err)?,
        Some(Value::Number(n)) => match n.as_u64().and_then(|n| u8::try_from(n).ok()) {
            Some(n) => Proto::Number(n),
            None => {
                return Err(fail(
                    "proto",
                    format!("proto: {n} is not a protocol number 0-255"),
                ))
            }
        },
        Some(other) => {
            return Err(fail(
                "proto",
                format!(
                    "proto: expected a name or a number, found {}",
                    type_name(other)
                ),
            ))
        }
    };
    let prefix = |field: RuleField| -> Result<Prefix, RpcError> {
        match text(&field.to_string())? {
            None => Ok(Prefix::Any),
            Some(s) => Prefix::parse(s, field).map_err(rule_err),
        }
    };
    let ports = |field: RuleField| -> Result<PortRange, RpcError> {
        match map.get(&field.to_string()) {
            None | Some(Value::Null) => Ok(PortRange::ANY),
            Some(Value::String(s)) => PortRange::parse(s.trim(), field).map_err(rule_err),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(n) => PortRange::from_number(n, field).map_err(rule_err),
                None => Err(fail(
                    &field.to_string(),
                    format!("{field}: {n} is not a port 0-65535"),
                )),
            },
            Some(other) => Err(fail(
                &field.to_string(),
                format!(
                    "{field}: expected N or \"LO-HI\", found {}",
                    type_name(other)
                ),
            )),
        }
    };
    // `dst` is a prefix, or a remote-identity selector (`fqdn:…`, `cidr:…`).
    let (dst, dst_selector) = match text("dst")? {
        Some(s) if s.starts_with("fqdn:") || s.starts_with("cidr:") => {
            let selector = Selector::parse(s).map_err(|e| fail("dst", format!("dst: {e}")))?;
            (Prefix::Any, Some(selector.to_string()))
        }
        _ => (prefix(RuleField::Dst)?, None),
    };
    let rule = Rule {
        action,
        proto,
        src: prefix(RuleField::Src)?,
        dst,
        src_port: ports(RuleField::SrcPort)?,
        dst_port: ports(RuleField::DstPort)?,
        origin: text("origin")?.map(str::to_owned),
        dst_selector,
    };
    rule.validate().map_err(rule_err)?;
    Ok(rule)
}

/// The port or pod a map (an `attach` or `dns` entry at `path`) names.
fn target(
    map: &Map<String, Value>,
    path: &str,
    ports: Option<&[&str]>,
) -> Result<AttachTarget, RpcError> {
    let port_path = join(path, "port");
    let pod_path = join(path, "pod");
    match (
        string(map.get("port"), &port_path)?,
        string(map.get("pod"), &pod_path)?,
    ) {
        (Some(port), None) => {
            if let Some(ports) = ports {
                if !ports.contains(&port) {
                    return Err(invalid(
                        &port_path,
                        None,
                        None,
                        format!("no port named {port:?} (ports: {})", ports.join(", ")),
                    ));
                }
            }
            Ok(AttachTarget::Port(port.to_string()))
        }
        (None, Some(pod)) => {
            if !crate::valid_pod_ref(pod) {
                return Err(invalid(
                    &pod_path,
                    None,
                    None,
                    format!("{pod:?} is not NAMESPACE/NAME"),
                ));
            }
            Ok(AttachTarget::Pod(pod.to_string()))
        }
        (Some(_), Some(_)) => Err(invalid(
            &port_path,
            None,
            None,
            "give port or pod, not both".into(),
        )),
        (None, None) => Err(invalid(&port_path, None, None, "required (or pod)".into())),
    }
}

impl AclApply {
    /// Decodes and validates `acl.apply` params. With `ports`, every attachment must
    /// name one of them (the daemon passes its ports; a client that does not know them
    /// passes `None`). Every error names the field path (`tables[0].rules[3].dst`),
    /// and for a rule the table and the rule index, in `data`.
    pub fn from_params(params: &Value, ports: Option<&[&str]>) -> Result<AclApply, RpcError> {
        let empty = Map::new();
        let top = match params {
            Value::Null => &empty,
            v => object(v, "params")?,
        };
        unknown_keys(top, &["tables", "attach", "global", "dns", "dry_run"], "")?;
        let dry_run = match top.get("dry_run") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(invalid(
                    "dry_run",
                    None,
                    None,
                    format!("expected true or false, found {}", type_name(other)),
                ))
            }
        };
        let mut tables: Vec<AclTable> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let table_list = list(top.get("tables"), "tables")?;
        if table_list.len() > MAX_TABLES {
            return Err(invalid(
                "tables",
                None,
                None,
                format!("{} tables: at most {MAX_TABLES}", table_list.len()),
            ));
        }
        for (t, tv) in table_list.iter().enumerate() {
            let path = format!("tables[{t}]");
            let map = object(tv, &path)?;
            unknown_keys(map, &["name", "rules"], &path)?;
            let name_path = join(&path, "name");
            let name = string(map.get("name"), &name_path)?
                .ok_or_else(|| invalid(&name_path, None, None, "required".into()))?;
            if name.is_empty()
                || name.len() > 128
                || name.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(invalid(
                    &name_path,
                    Some(name),
                    None,
                    format!("{name:?}: a table name is 1-128 characters without spaces"),
                ));
            }
            if let Some(&first) = by_name.get(name) {
                return Err(invalid(
                    &name_path,
                    Some(name),
                    None,
                    format!("duplicate table name {name:?} (also tables[{first}])"),
                ));
            }
            let rules_path = join(&path, "rules");
            let rules = list(map.get("rules"), &rules_path)?
                .iter()
                .enumerate()
                .map(|(r, rv)| parse_rule(rv, &format!("{rules_path}[{r}]"), name, r))
                .collect::<Result<Vec<Rule>, RpcError>>()?;
            by_name.insert(name.to_string(), t);
            tables.push(AclTable {
                name: name.to_string(),
                rules,
            });
        }
        let table_ref = |v: Option<&Value>, path: &str| -> Result<Option<String>, RpcError> {
            match string(v, path)? {
                None => Ok(None),
                Some(name) => by_name
                    .get(name)
                    .map(|_| Some(name.to_string()))
                    .ok_or_else(|| {
                        invalid(
                            path,
                            Some(name),
                            None,
                            format!("no table named {name:?} in `tables`"),
                        )
                    }),
            }
        };
        let mut attach: Vec<AclAttach> = Vec::new();
        for (k, av) in list(top.get("attach"), "attach")?.iter().enumerate() {
            let path = format!("attach[{k}]");
            let map = object(av, &path)?;
            unknown_keys(map, &["port", "pod", "direction", "table"], &path)?;
            let target = target(map, &path, ports)?;
            let port_path = join(&path, "port");
            let dir_path = join(&path, "direction");
            let direction = match string(map.get("direction"), &dir_path)? {
                Some("ingress") => Direction::Ingress,
                Some("egress") => Direction::Egress,
                Some(other) => {
                    return Err(invalid(
                        &dir_path,
                        None,
                        None,
                        format!("{other:?}: expected ingress or egress"),
                    ))
                }
                None => {
                    return Err(invalid(
                        &dir_path,
                        None,
                        None,
                        "required (ingress or egress)".into(),
                    ))
                }
            };
            let table_path = join(&path, "table");
            let table = table_ref(map.get("table"), &table_path)?
                .ok_or_else(|| invalid(&table_path, None, None, "required".into()))?;
            if let Some(first) = attach
                .iter()
                .position(|a: &AclAttach| a.target == target && a.direction == direction)
            {
                return Err(invalid(
                    &port_path,
                    None,
                    None,
                    format!(
                        "{target} already has an {} table (attach[{first}]); one table per port and direction",
                        direction.name()
                    ),
                ));
            }
            attach.push(AclAttach {
                target,
                direction,
                table: table.to_string(),
            });
        }
        let global = table_ref(top.get("global"), "global")?;
        let mut dns: Vec<DnsPolicy> = Vec::new();
        for (k, dv) in list(top.get("dns"), "dns")?.iter().enumerate() {
            let path = format!("dns[{k}]");
            let map = object(dv, &path)?;
            unknown_keys(map, &["port", "pod", "allow"], &path)?;
            let target = target(map, &path, ports)?;
            if let Some(first) = dns.iter().position(|d| d.target == target) {
                return Err(invalid(
                    &path,
                    None,
                    None,
                    format!("{target} already has a DNS policy (dns[{first}])"),
                ));
            }
            let allow_path = join(&path, "allow");
            let mut allow = Vec::new();
            for (n, pv) in list(map.get("allow"), &allow_path)?.iter().enumerate() {
                let at = format!("{allow_path}[{n}]");
                let text = string(Some(pv), &at)?.unwrap_or_default();
                let pattern = FqdnSelector::match_pattern(text)
                    .map_err(|e| invalid(&at, None, None, e.to_string()))?;
                allow.push(pattern.as_str().to_string());
            }
            dns.push(DnsPolicy { target, allow });
        }
        Ok(AclApply {
            tables,
            attach,
            global,
            dns,
            dry_run,
        })
    }

    /// The params as clients send them (see the [`Serialize`] impl), as a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A port range as `acl.apply` carries it: a number, or `"LO-HI"`.
struct Ports(PortRange);

impl Serialize for Ports {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.lo == self.0.hi {
            s.serialize_u16(self.0.lo)
        } else {
            s.collect_str(&format_args!("{}-{}", self.0.lo, self.0.hi))
        }
    }
}

/// One rule as `acl.apply` carries it: only the fields that are not "any", keys in
/// name order (as a JSON object value lists them).
struct RuleOut<'a>(&'a Rule);

impl Serialize for RuleOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("action", &format_args!("{}", r.action))?;
        if let Some(selector) = &r.dst_selector {
            m.serialize_entry("dst", selector)?;
        } else if r.dst != Prefix::Any {
            m.serialize_entry("dst", &format_args!("{}", r.dst))?;
        }
        if !r.dst_port.is_any() {
            m.serialize_entry("dst_port", &Ports(r.dst_port))?;
        }
        if let Some(o) = &r.origin {
            m.serialize_entry("origin", o)?;
        }
        if r.proto != Proto::Any {
            m.serialize_entry("proto", &format_args!("{}", r.proto))?;
        }
        if r.src != Prefix::Any {
            m.serialize_entry("src", &format_args!("{}", r.src))?;
        }
        if !r.src_port.is_any() {
            m.serialize_entry("src_port", &Ports(r.src_port))?;
        }
        m.end()
    }
}

/// One rule as `acl.apply` carries it, as a JSON value.
pub fn rule_value(r: &Rule) -> Value {
    serde_json::to_value(RuleOut(r)).unwrap_or(Value::Null)
}

struct Rules<'a>(&'a [Rule]);

impl Serialize for Rules<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(RuleOut))
    }
}

impl Serialize for AclTable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("rules", &Rules(&self.rules))?;
        m.end()
    }
}

impl Serialize for AclAttach {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("direction", self.direction.name())?;
        match &self.target {
            AttachTarget::Port(p) => m.serialize_entry("port", p)?,
            AttachTarget::Pod(p) => m.serialize_entry("pod", p)?,
        }
        m.serialize_entry("table", &self.table)?;
        m.end()
    }
}

impl Serialize for DnsPolicy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("allow", &self.allow)?;
        match &self.target {
            AttachTarget::Port(p) => m.serialize_entry("port", p)?,
            AttachTarget::Pod(p) => m.serialize_entry("pod", p)?,
        }
        m.end()
    }
}

/// The params as clients send them: rules with only their non-default fields, ports
/// as a number or `"LO-HI"`, `global` null when there is none, `dry_run` only when
/// set; keys in name order. Streams: no JSON value is built in between.
impl Serialize for AclApply {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("attach", &self.attach)?;
        if !self.dns.is_empty() {
            m.serialize_entry("dns", &self.dns)?;
        }
        if self.dry_run {
            m.serialize_entry("dry_run", &true)?;
        }
        m.serialize_entry("global", &self.global)?;
        m.serialize_entry("tables", &self.tables)?;
        m.end()
    }
}

/// Through [`AclApply::from_params`] (without a port list): the same checks and
/// messages.
impl<'de> Deserialize<'de> for AclApply {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        AclApply::from_params(&v, None).map_err(|e| serde::de::Error::custom(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "tables": [
                {"name": "web", "rules": [
                    {"action": "permit", "proto": "tcp", "dst": "10.0.0.0/8", "dst_port": 80},
                    {"action": "reflect", "proto": "udp", "src": "2001:db8::/32", "src_port": "1000-2000", "origin": "np/x"},
                    {"action": "deny"}
                ]},
                {"name": "all", "rules": [{"action": "permit"}]}
            ],
            "attach": [{"port": "pod-a", "direction": "egress", "table": "web"}],
            "global": "all"
        })
    }

    #[test]
    fn selector_destinations_and_dns_policies_decode_and_round_trip() {
        let v = json!({
            "tables": [{"name": "p", "rules": [
                {"action": "reflect", "proto": "tcp", "dst": "fqdn:*.Example.TEST.", "dst_port": 443},
                {"action": "reflect", "dst": "cidr:192.0.2.7/24"},
                {"action": "reflect", "proto": "udp", "dst": "10.96.0.10/32", "dst_port": 53}
            ]}],
            "attach": [{"pod": "ns/a", "direction": "ingress", "table": "p"}],
            "dns": [{"pod": "ns/a", "allow": ["*.example.test", "API.example.com"]}]
        });
        let a = AclApply::from_params(&v, None).unwrap();
        let rules = &a.tables[0].rules;
        assert_eq!(
            rules[0].dst_selector.as_deref(),
            Some("fqdn:*.example.test")
        );
        assert_eq!(rules[0].dst, Prefix::Any);
        assert_eq!(rules[1].dst_selector.as_deref(), Some("cidr:192.0.2.0/24"));
        assert_eq!(rules[2].dst_selector, None);
        assert_eq!(a.dns[0].target, AttachTarget::Pod("ns/a".into()));
        assert_eq!(a.dns[0].allow, ["*.example.test", "api.example.com"]);
        assert_eq!(AclApply::from_params(&a.to_value(), None).unwrap(), a);
    }

    #[test]
    fn bad_selectors_and_dns_policies_name_their_field() {
        let cases = [
            (
                json!({"tables": [{"name": "p", "rules": [{"action": "permit", "dst": "fqdn:a..b"}]}]}),
                "tables[0].rules[0].dst",
            ),
            (
                json!({"tables": [{"name": "p", "rules": [{"action": "permit", "dst": "cidr:10.0.0.0/40"}]}]}),
                "tables[0].rules[0].dst",
            ),
            (
                json!({"dns": [{"pod": "ns/a", "allow": ["**.x"]}]}),
                "dns[0].allow[0]",
            ),
            (
                json!({"dns": [{"pod": "ns/a", "allow": [7]}]}),
                "dns[0].allow[0]",
            ),
            (json!({"dns": [{"pod": "a", "allow": []}]}), "dns[0].pod"),
            (json!({"dns": [{"pod": "ns/a"}, {"pod": "ns/a"}]}), "dns[1]"),
            (
                json!({"dns": [{"pod": "ns/a", "names": []}]}),
                "dns[0].names",
            ),
        ];
        for (v, field) in cases {
            let e = AclApply::from_params(&v, None).unwrap_err();
            assert!(
                e.message.contains(&format!("`{field}`")),
                "{field}: {}",
                e.message
            );
        }
    }

    #[test]
    fn decodes_encodes_and_decodes_again_to_the_same_state() {
        let apply = AclApply::from_params(&sample(), None).expect("valid");
        assert_eq!(apply.tables.len(), 2);
        assert_eq!(apply.tables[0].rules.len(), 3);
        assert_eq!(apply.attach[0].direction, Direction::Egress);
        assert_eq!(apply.global.as_deref(), Some("all"));
        let again = AclApply::from_params(&apply.to_value(), None).expect("its own output");
        assert_eq!(again, apply);
        let via_serde: AclApply = serde_json::from_value(apply.to_value()).expect("serde");
        assert_eq!(via_serde, apply);
        assert_eq!(
            serde_json::to_value(&apply).expect("json"),
            apply.to_value()
        );
    }

    #[test]
    fn ports_are_checked_only_when_given() {
        assert!(AclApply::from_params(&sample(), Some(&["pod-a", "uplink0"])).is_ok());
        let e = AclApply::from_params(&sample(), Some(&["uplink0"])).unwrap_err();
        assert_eq!(e.code, crate::rpc::INVALID_PARAMS);
        assert!(e.message.contains("attach[0].port"), "{}", e.message);
        assert!(
            e.message.contains("no port named \"pod-a\""),
            "{}",
            e.message
        );
    }

    #[test]
    fn errors_name_the_path_the_table_and_the_rule() {
        let mut bad = sample();
        bad["tables"][0]["rules"][1]["src_port"] = json!(true);
        let e = AclApply::from_params(&bad, None).unwrap_err();
        assert!(
            e.message.contains("tables[0].rules[1].src_port"),
            "{}",
            e.message
        );
        let data = e.data.expect("data");
        assert_eq!(data["table"], "web");
        assert_eq!(data["rule"], 1);
        let serde_err = serde_json::from_value::<AclApply>(bad).unwrap_err();
        assert!(serde_err
            .to_string()
            .contains("tables[0].rules[1].src_port"));
    }
}
