//! `ferruled`'s TOML configuration: parsing, defaults, validation with errors that name
//! the key and the line, and the embedded default (`configs/ferrule.toml`).
//!
//! Every key is documented in `configs/README.md`.

use crate::api::{PortRole, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_SOCKET};
use serde::Deserialize;
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The repository's `configs/ferrule.toml`, compiled in: what `ferruled` runs when no
/// `--config` is given and `/etc/ferrule/ferrule.toml` does not exist.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../configs/ferrule.toml");

/// Where `ferruled` looks for its configuration by default.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/ferrule/ferrule.toml";

/// Largest burst a worker handles (the dataplane's `MAX_BURST`).
pub const MAX_BURST_SIZE: u16 = 256;

/// Most ports one daemon drives.
pub const MAX_PORTS: usize = 32;

/// A configuration error: where (file, line, key) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ConfigError {
    /// File path, or `<embedded default>`.
    pub source_name: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The key at fault, e.g. `port[1].mac`, when known.
    pub key: Option<String>,
    pub message: String,
}

/// The whole configuration, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub eal: EalSection,
    pub control: ControlSection,
    pub dataplane: DataplaneSection,
    pub log: LogSection,
    pub ports: Vec<PortConfig>,
}

/// `[eal]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EalSection {
    /// First is the main (control) lcore, the rest run one worker each.
    pub lcores: Vec<u32>,
    pub memory_mb: u32,
    pub hugepages: bool,
    pub in_memory: bool,
    pub file_prefix: String,
    pub log_level: String,
    pub telemetry: bool,
    pub extra_args: Vec<String>,
}

/// `[control]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlSection {
    pub socket: PathBuf,
    pub max_request_bytes: usize,
    pub max_clients: usize,
}

/// `[dataplane]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataplaneSection {
    pub burst_size: u16,
    pub mbufs: u32,
    pub mbuf_cache: u32,
    pub rx_desc: u16,
    pub tx_desc: u16,
    pub idle_sleep_us: u32,
    pub link_poll_ms: u64,
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSection {
    /// A `tracing` filter, e.g. `info` or `ferrule_control=debug,info`.
    pub level: String,
}

/// One `[[port]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    pub name: String,
    /// DPDK devargs: a vdev string (`net_null0,size=64`) or a PCI address.
    pub devargs: String,
    pub role: PortRole,
    pub mac: Option<[u8; 6]>,
    pub mtu: u16,
    pub rx_queues: u16,
    /// Name of the port this one's traffic is cross-connected to.
    pub xconnect: Option<String>,
}

// ---- raw (as written) ----

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    eal: RawEal,
    #[serde(default)]
    control: RawControl,
    #[serde(default)]
    dataplane: RawDataplane,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    port: Vec<RawPort>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawEal {
    lcores: Spanned<Vec<u32>>,
    memory_mb: Spanned<u32>,
    hugepages: bool,
    in_memory: bool,
    file_prefix: Spanned<String>,
    log_level: Spanned<String>,
    telemetry: bool,
    extra_args: Vec<String>,
}

impl Default for RawEal {
    fn default() -> Self {
        RawEal {
            lcores: Spanned::new(0..0, vec![0, 1]),
            memory_mb: Spanned::new(0..0, 256),
            hugepages: true,
            in_memory: true,
            file_prefix: Spanned::new(0..0, "ferrule".into()),
            log_level: Spanned::new(0..0, "notice".into()),
            telemetry: false,
            extra_args: Vec::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawControl {
    socket: PathBuf,
    max_request_bytes: Spanned<usize>,
    max_clients: Spanned<usize>,
}

impl Default for RawControl {
    fn default() -> Self {
        RawControl {
            socket: PathBuf::from(DEFAULT_SOCKET),
            max_request_bytes: Spanned::new(0..0, DEFAULT_MAX_REQUEST_BYTES),
            max_clients: Spanned::new(0..0, 256),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDataplane {
    burst_size: Spanned<u16>,
    mbufs: Spanned<u32>,
    mbuf_cache: Spanned<u32>,
    rx_desc: Spanned<u16>,
    tx_desc: Spanned<u16>,
    idle_sleep_us: Spanned<u32>,
    link_poll_ms: Spanned<u64>,
}

impl Default for RawDataplane {
    fn default() -> Self {
        RawDataplane {
            burst_size: Spanned::new(0..0, 32),
            mbufs: Spanned::new(0..0, 16383),
            mbuf_cache: Spanned::new(0..0, 256),
            rx_desc: Spanned::new(0..0, 1024),
            tx_desc: Spanned::new(0..0, 1024),
            idle_sleep_us: Spanned::new(0..0, 0),
            link_poll_ms: Spanned::new(0..0, 1000),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLog {
    level: Spanned<String>,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            level: Spanned::new(0..0, "info".into()),
        }
    }
}

/// A `[log] level` value: `LEVEL` or `TARGET=LEVEL` directives, comma-separated.
fn valid_log_filter(s: &str) -> bool {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let directive_ok = |d: &str| {
        let level = d
            .rsplit('=')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        LEVELS.contains(&level.as_str())
    };
    !s.trim().is_empty()
        && s.split(',').all(directive_ok)
        && tracing_subscriber::EnvFilter::try_new(s).is_ok()
}

/// An EAL `--log-level` value: `LEVEL` or `PATTERN:LEVEL`.
fn valid_eal_log_level(s: &str) -> bool {
    const NAMES: [&str; 8] = [
        "emergency",
        "alert",
        "critical",
        "error",
        "warning",
        "notice",
        "info",
        "debug",
    ];
    let level = s.rsplit(':').next().unwrap_or("");
    NAMES.contains(&level) || level.parse::<u8>().is_ok_and(|n| (1..=8).contains(&n))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPort {
    name: Spanned<String>,
    devargs: Spanned<String>,
    role: PortRole,
    #[serde(default)]
    mac: Option<Spanned<String>>,
    #[serde(default = "default_mtu")]
    mtu: Spanned<u16>,
    #[serde(default = "default_rx_queues")]
    rx_queues: Spanned<u16>,
    #[serde(default)]
    xconnect: Option<Spanned<String>>,
}

fn default_mtu() -> Spanned<u16> {
    Spanned::new(0..0, 1500)
}

fn default_rx_queues() -> Spanned<u16> {
    Spanned::new(0..0, 1)
}

/// Parses a MAC address `aa:bb:cc:dd:ee:ff` (or with `-`).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(parts) {
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

struct Ctx<'a> {
    text: &'a str,
    source_name: &'a str,
}

impl Ctx<'_> {
    fn line_of(&self, span: &Range<usize>) -> Option<usize> {
        if span.start == 0 && span.end == 0 {
            return None; // a default value: no line
        }
        Some(
            self.text[..span.start.min(self.text.len())]
                .matches('\n')
                .count()
                + 1,
        )
    }

    fn err(&self, span: Range<usize>, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            source_name: self.source_name.to_string(),
            line: self.line_of(&span),
            key: Some(key.to_string()),
            message: format!("`{key}`: {}", message.into()),
        }
    }
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            source_name: path.display().to_string(),
            line: None,
            key: None,
            message: format!("cannot read the configuration: {e}"),
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// The embedded default configuration.
    pub fn embedded_default() -> Result<Config, ConfigError> {
        Config::parse(EMBEDDED_DEFAULT, "<embedded default>")
    }

    /// Parses and validates configuration text; `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Config, ConfigError> {
        let ctx = Ctx { text, source_name };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let line = ctx
                .line_of(&span)
                .or(Some(1))
                .filter(|_| e.span().is_some());
            // Name the key written on that line when the message does not.
            let key = line
                .and_then(|l| text.lines().nth(l - 1))
                .and_then(key_on_line);
            let msg = e.message().trim().to_string();
            let message = match &key {
                Some(k) if !msg.contains('`') => format!("`{k}`: {msg}"),
                _ => msg,
            };
            ConfigError {
                source_name: source_name.to_string(),
                line,
                key,
                message,
            }
        })?;
        raw.validate(&ctx)
    }
}

/// The key of a `key = value` line.
fn key_on_line(line: &str) -> Option<String> {
    let (k, _) = line.split_once('=')?;
    let k = k.trim();
    (!k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.\"".contains(c)))
    .then(|| k.trim_matches('"').to_string())
}

impl RawConfig {
    fn validate(self, ctx: &Ctx) -> Result<Config, ConfigError> {
        let eal = self.eal.validate(ctx)?;
        let control = self.control.validate(ctx)?;
        let dataplane = self.dataplane.validate(ctx)?;
        if self.port.len() > MAX_PORTS {
            return Err(ctx.err(0..0, "port", format!("at most {MAX_PORTS} ports")));
        }
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        let mut devargs_seen: HashMap<&str, usize> = HashMap::new();
        let mut ports = Vec::with_capacity(self.port.len());
        for (i, p) in self.port.iter().enumerate() {
            let key = |f: &str| format!("port[{i}].{f}");
            let name = p.name.get_ref();
            if name.is_empty()
                || name.len() > 32
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(ctx.err(
                    p.name.span(),
                    &key("name"),
                    format!("{name:?} is not a port name (1-32 of A-Z a-z 0-9 - _ .)"),
                ));
            }
            if let Some(j) = by_name.insert(name, i) {
                return Err(ctx.err(
                    p.name.span(),
                    &key("name"),
                    format!("{name:?} is also port[{j}]"),
                ));
            }
            let devargs = p.devargs.get_ref().trim();
            let dev_name = devargs.split(',').next().unwrap_or("").trim();
            if dev_name.is_empty() {
                return Err(ctx.err(p.devargs.span(), &key("devargs"), "empty devargs"));
            }
            if let Some(j) = devargs_seen.insert(dev_name, i) {
                return Err(ctx.err(
                    p.devargs.span(),
                    &key("devargs"),
                    format!("device {dev_name:?} is also used by port[{j}]"),
                ));
            }
            let mac = match &p.mac {
                None => None,
                Some(m) => match parse_mac(m.get_ref()) {
                    Some(mac) if mac[0] & 1 == 1 => {
                        return Err(ctx.err(
                            m.span(),
                            &key("mac"),
                            "a multicast MAC cannot be a port's",
                        ))
                    }
                    Some(mac) => Some(mac),
                    None => {
                        return Err(ctx.err(
                            m.span(),
                            &key("mac"),
                            format!("{:?} is not a MAC address (aa:bb:cc:dd:ee:ff)", m.get_ref()),
                        ))
                    }
                },
            };
            let mtu = *p.mtu.get_ref();
            if !(68..=9600).contains(&mtu) {
                return Err(ctx.err(
                    p.mtu.span(),
                    &key("mtu"),
                    format!("{mtu} is outside 68..=9600"),
                ));
            }
            let rxq = *p.rx_queues.get_ref();
            if !(1..=16).contains(&rxq) {
                return Err(ctx.err(
                    p.rx_queues.span(),
                    &key("rx_queues"),
                    format!("{rxq} is outside 1..=16"),
                ));
            }
            ports.push(PortConfig {
                name: name.clone(),
                devargs: devargs.to_string(),
                role: p.role,
                mac,
                mtu,
                rx_queues: rxq,
                xconnect: p.xconnect.as_ref().map(|x| x.get_ref().clone()),
            });
        }
        for (i, p) in self.port.iter().enumerate() {
            if let Some(x) = &p.xconnect {
                let key = format!("port[{i}].xconnect");
                match by_name.get(x.get_ref().as_str()) {
                    None => {
                        return Err(ctx.err(
                            x.span(),
                            &key,
                            format!("no port named {:?}", x.get_ref()),
                        ))
                    }
                    Some(&j) if j == i => {
                        return Err(ctx.err(
                            x.span(),
                            &key,
                            "a port cannot be cross-connected to itself",
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        let level = self.log.level.get_ref();
        if !valid_log_filter(level) {
            return Err(ctx.err(
                self.log.level.span(),
                "log.level",
                format!(
                    "{level:?} is not a log filter: LEVEL or TARGET=LEVEL, comma-separated, \
                     LEVEL one of off, error, warn, info, debug, trace \
                     (e.g. info or ferrule_control=debug,info)"
                ),
            ));
        }
        let log = LogSection {
            level: level.clone(),
        };
        Ok(Config {
            eal,
            control,
            dataplane,
            log,
            ports,
        })
    }
}

impl RawEal {
    fn validate(self, ctx: &Ctx) -> Result<EalSection, ConfigError> {
        let lcores = self.lcores.get_ref();
        if lcores.len() < 2 {
            return Err(ctx.err(
                self.lcores.span(),
                "eal.lcores",
                "needs at least two lcores: the main (control) lcore, then one per worker",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for l in lcores {
            if *l >= 128 || !seen.insert(*l) {
                return Err(ctx.err(
                    self.lcores.span(),
                    "eal.lcores",
                    format!("lcore {l} is repeated or out of range 0..128"),
                ));
            }
        }
        let mem = *self.memory_mb.get_ref();
        if mem < 64 {
            return Err(ctx.err(
                self.memory_mb.span(),
                "eal.memory_mb",
                format!("{mem} MiB is below 64"),
            ));
        }
        let prefix = self.file_prefix.get_ref();
        if prefix.is_empty()
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(ctx.err(
                self.file_prefix.span(),
                "eal.file_prefix",
                format!("{prefix:?} must be non-empty and use only A-Z a-z 0-9 - _ ."),
            ));
        }
        let level = self.log_level.get_ref();
        if !valid_eal_log_level(level) {
            return Err(ctx.err(
                self.log_level.span(),
                "eal.log_level",
                format!(
                    "{level:?} is not an EAL log level: one of emergency, alert, critical, \
                     error, warning, notice, info, debug or 1-8, optionally after PATTERN:"
                ),
            ));
        }
        Ok(EalSection {
            lcores: lcores.clone(),
            memory_mb: mem,
            hugepages: self.hugepages,
            in_memory: self.in_memory,
            file_prefix: prefix.clone(),
            log_level: self.log_level.into_inner(),
            telemetry: self.telemetry,
            extra_args: self.extra_args,
        })
    }
}

impl RawControl {
    fn validate(self, ctx: &Ctx) -> Result<ControlSection, ConfigError> {
        let max = *self.max_request_bytes.get_ref();
        if !(1024..=64 << 20).contains(&max) {
            return Err(ctx.err(
                self.max_request_bytes.span(),
                "control.max_request_bytes",
                format!("{max} is outside 1024..=67108864"),
            ));
        }
        let clients = *self.max_clients.get_ref();
        if clients == 0 {
            return Err(ctx.err(
                self.max_clients.span(),
                "control.max_clients",
                "must be at least 1",
            ));
        }
        Ok(ControlSection {
            socket: self.socket,
            max_request_bytes: max,
            max_clients: clients,
        })
    }
}

impl RawDataplane {
    fn validate(self, ctx: &Ctx) -> Result<DataplaneSection, ConfigError> {
        let burst = *self.burst_size.get_ref();
        if !(1..=MAX_BURST_SIZE).contains(&burst) {
            return Err(ctx.err(
                self.burst_size.span(),
                "dataplane.burst_size",
                format!("{burst} is outside 1..={MAX_BURST_SIZE}"),
            ));
        }
        let mbufs = *self.mbufs.get_ref();
        if mbufs < 1024 {
            return Err(ctx.err(
                self.mbufs.span(),
                "dataplane.mbufs",
                format!("{mbufs} is below 1024"),
            ));
        }
        for (v, key) in [
            (&self.rx_desc, "dataplane.rx_desc"),
            (&self.tx_desc, "dataplane.tx_desc"),
        ] {
            let n = *v.get_ref();
            if !(64..=16384).contains(&n) {
                return Err(ctx.err(v.span(), key, format!("{n} is outside 64..=16384")));
            }
        }
        let cache = *self.mbuf_cache.get_ref();
        // DPDK's limits: at most 512 per lcore, and the pool at least 1.5 times the cache.
        if cache > 512 || u64::from(cache) * 3 > u64::from(mbufs) * 2 {
            return Err(ctx.err(
                self.mbuf_cache.span(),
                "dataplane.mbuf_cache",
                format!(
                    "{cache} must be at most 512 and at most dataplane.mbufs / 1.5 ({mbufs} mbufs)"
                ),
            ));
        }
        let idle = *self.idle_sleep_us.get_ref();
        if idle > 100_000 {
            return Err(ctx.err(
                self.idle_sleep_us.span(),
                "dataplane.idle_sleep_us",
                format!("{idle} is above 100000 (100 ms)"),
            ));
        }
        let poll = *self.link_poll_ms.get_ref();
        if poll == 0 {
            return Err(ctx.err(
                self.link_poll_ms.span(),
                "dataplane.link_poll_ms",
                "must be at least 1",
            ));
        }
        Ok(DataplaneSection {
            burst_size: burst,
            mbufs,
            mbuf_cache: cache,
            rx_desc: *self.rx_desc.get_ref(),
            tx_desc: *self.tx_desc.get_ref(),
            idle_sleep_us: idle,
            link_poll_ms: poll,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, "test.toml")
    }

    /// 1-based line of the first line containing `needle`.
    fn line_of(text: &str, needle: &str) -> Option<usize> {
        text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
    }

    const TWO_PORTS: &str = r#"
[[port]]
name = "a"
devargs = "net_null0"
role = "pod"
xconnect = "b"

[[port]]
name = "b"
devargs = "net_null1"
role = "uplink"
mac = "02:00:00:00:00:0b"
"#;

    #[test]
    fn embedded_default_is_valid() {
        let cfg = Config::embedded_default().expect("embedded default parses");
        assert!(cfg.ports.len() >= 2);
        assert!(
            cfg.ports.iter().all(|p| !crate::daemon::is_pci(&p.devargs)),
            "virtual ports only"
        );
    }

    #[test]
    fn defaults_apply() {
        let cfg = parse(TWO_PORTS).expect("valid");
        assert_eq!(cfg.eal.lcores, vec![0, 1]);
        assert_eq!(cfg.dataplane.burst_size, 32);
        assert_eq!(cfg.control.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(cfg.ports[0].mtu, 1500);
        assert_eq!(cfg.ports[0].xconnect.as_deref(), Some("b"));
        assert_eq!(cfg.ports[1].mac, Some([2, 0, 0, 0, 0, 0x0b]));
        assert_eq!(cfg.ports[1].role, PortRole::Uplink);
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let e = parse("[eal]\nlcores = [0, 1]\nhugepage = true\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("hugepage"), "{e}");
        assert!(e.to_string().starts_with("test.toml:3:"), "{e}");
    }

    #[test]
    fn bad_values_are_named_with_their_line() {
        let bad_mac = TWO_PORTS.replace("02:00:00:00:00:0b", "02:00:00:00:0b");
        let e = parse(&bad_mac).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("port[1].mac"));
        assert_eq!(e.line, line_of(&bad_mac, "02:00:00:00:0b"));

        let bad_role = TWO_PORTS.replace("\"uplink\"", "\"spine\"");
        let e = parse(&bad_role).unwrap_err();
        assert_eq!(e.line, line_of(&bad_role, "spine"), "{e}");
        assert!(
            e.message.contains("spine") || e.message.contains("role"),
            "{e}"
        );

        let bad_type = "[dataplane]\nburst_size = \"lots\"\n";
        let e = parse(bad_type).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("burst_size"), "{e}");

        let e = parse("[dataplane]\nburst_size = 1000\n").unwrap_err();
        assert_eq!(
            (e.key.as_deref(), e.line),
            (Some("dataplane.burst_size"), Some(2))
        );

        let e = parse("[eal]\nlcores = [3]\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("eal.lcores"), Some(2)));
    }

    #[test]
    fn log_levels_and_pool_limits_are_checked() {
        let e = parse("[log]\nlevel = \"loud\"\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("log.level"), Some(2)));
        assert!(parse("[log]\nlevel = \"ferrule_control=debug,warn\"\n").is_ok());
        let e = parse("[eal]\nlog_level = \"chatty\"\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("eal.log_level"), Some(2)));
        assert!(parse("[eal]\nlog_level = \"pmd.net.*:debug\"\n").is_ok());
        assert!(parse("[eal]\nlog_level = \"7\"\n").is_ok());
        let e = parse("[dataplane]\nmbufs = 1024\nmbuf_cache = 700\n").unwrap_err();
        assert_eq!(
            (e.key.as_deref(), e.line),
            (Some("dataplane.mbuf_cache"), Some(3))
        );
        let e = parse("[dataplane]\nidle_sleep_us = 5000000\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("dataplane.idle_sleep_us"));
    }

    #[test]
    fn cross_references_are_checked() {
        let text = TWO_PORTS.replace("xconnect = \"b\"", "xconnect = \"c\"");
        let e = parse(&text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("port[0].xconnect"));
        assert_eq!(e.line, line_of(&text, "\"c\""));
        let e = parse(&TWO_PORTS.replace("xconnect = \"b\"", "xconnect = \"a\"")).unwrap_err();
        assert!(e.message.contains("itself"));
        let e = parse(&TWO_PORTS.replace("name = \"b\"", "name = \"a\"")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("port[1].name"));
        let e = parse(&TWO_PORTS.replace("net_null1", "net_null0")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("port[1].devargs"));
    }

    #[test]
    fn missing_required_key_is_reported() {
        let e = parse("[[port]]\nname = \"a\"\nrole = \"pod\"\n").unwrap_err();
        assert!(e.message.contains("devargs"), "{e}");
    }

    #[test]
    fn mac_parsing() {
        assert_eq!(
            parse_mac("02:AB:cd:00:00:01"),
            Some([2, 0xab, 0xcd, 0, 0, 1])
        );
        assert_eq!(
            parse_mac("02-ab-cd-00-00-01"),
            Some([2, 0xab, 0xcd, 0, 0, 1])
        );
        assert_eq!(parse_mac("2:ab:cd:0:0:1"), None);
        assert_eq!(format_mac(&[2, 0xab, 0, 0, 0, 1]), "02:ab:00:00:00:01");
    }
}
