//! The rendered 6-tuple ACL rule (action, protocol, source and destination prefix,
//! source and destination port range, origin), its field parsers and validation, and
//! the [`FlowKey`] it matches.

use crate::flow::FlowKey;
use crate::wire::{IpCidr, IpProtocol, Ipv4Cidr, Ipv6Cidr};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a matching rule does with the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Drop the packet.
    Deny,
    /// Pass the packet, statelessly.
    Permit,
    /// Pass the packet and track its session so replies pass too.
    Reflect,
}

impl Action {
    /// Parses `deny`, `permit` or `reflect`.
    pub fn parse(text: &str) -> Result<Self, RuleError> {
        match text {
            "deny" => Ok(Self::Deny),
            "permit" => Ok(Self::Permit),
            "reflect" => Ok(Self::Reflect),
            _ => Err(RuleError::BadAction {
                text: text.to_owned(),
            }),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Deny => "deny",
            Self::Permit => "permit",
            Self::Reflect => "reflect",
        })
    }
}

/// The IP protocol a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// Any protocol.
    Any,
    /// Exactly this protocol number.
    Number(u8),
    /// Protocols `p` with `p & mask == value & mask` (ClassBench `value/mask`).
    Masked {
        /// Protocol bits to compare.
        value: u8,
        /// Which bits of the protocol byte are compared.
        mask: u8,
    },
}

impl Proto {
    /// ICMP (1).
    pub const ICMP: Self = Self::Number(IpProtocol::ICMP.0);
    /// TCP (6).
    pub const TCP: Self = Self::Number(IpProtocol::TCP.0);
    /// UDP (17).
    pub const UDP: Self = Self::Number(IpProtocol::UDP.0);
    /// ICMPv6 (58).
    pub const ICMPV6: Self = Self::Number(IpProtocol::ICMPV6.0);
    /// SCTP (132).
    pub const SCTP: Self = Self::Number(IpProtocol::SCTP.0);

    /// Parses `any`, `tcp`, `udp`, `sctp`, `icmp`, `icmpv6` or a number 0-255.
    pub fn parse(text: &str) -> Result<Self, RuleError> {
        match text {
            "any" => Ok(Self::Any),
            "tcp" => Ok(Self::TCP),
            "udp" => Ok(Self::UDP),
            "sctp" => Ok(Self::SCTP),
            "icmp" => Ok(Self::ICMP),
            "icmpv6" => Ok(Self::ICMPV6),
            _ => text
                .parse::<u8>()
                .map(Self::Number)
                .map_err(|_| RuleError::BadProto {
                    text: text.to_owned(),
                }),
        }
    }

    /// Whether protocol number `proto` is in this protocol set.
    pub fn matches(self, proto: u8) -> bool {
        match self {
            Self::Any => true,
            Self::Number(number) => proto == number,
            Self::Masked { value, mask } => proto & mask == value & mask,
        }
    }

    /// Whether the protocol carries ports a rule may match on (tcp, udp, sctp).
    pub fn has_ports(self) -> bool {
        matches!(self, Self::TCP | Self::UDP | Self::SCTP)
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Any => f.write_str("any"),
            Self::ICMP => f.write_str("icmp"),
            Self::TCP => f.write_str("tcp"),
            Self::UDP => f.write_str("udp"),
            Self::ICMPV6 => f.write_str("icmpv6"),
            Self::SCTP => f.write_str("sctp"),
            Self::Number(number) => write!(f, "{number}"),
            Self::Masked { value, mask } => write!(f, "{value:#04x}/{mask:#04x}"),
        }
    }
}

/// A source or destination prefix: any address, or one prefix of one family (the
/// wire's [`IpCidr`]) stored with its host bits cleared. Every constructor here clears
/// them ([`Prefix::parse`] reads `10.1.2.3/8` as `10.0.0.0/8`), so equal prefixes
/// compare equal; matching ignores host bits whatever the value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prefix {
    /// Any address of either family.
    Any,
    /// An IPv4 (length 0-32) or IPv6 (length 0-128) prefix, host bits cleared.
    Cidr(IpCidr),
}

impl Prefix {
    /// Parses `any`, `ADDR/LEN` or a bare address (a host prefix) of either family,
    /// clearing host bits. Errors name `field`.
    pub fn parse(text: &str, field: RuleField) -> Result<Self, RuleError> {
        if text == "any" {
            return Ok(Self::Any);
        }
        let bad = |reason: &'static str| RuleError::BadCidr {
            field,
            text: text.to_owned(),
            reason,
        };
        let cidr = match text.split_once('/') {
            Some((addr, len)) => {
                let addr = addr.parse::<IpAddr>().map_err(|_| bad("bad address"))?;
                let len = len.parse::<u8>().map_err(|_| bad("bad prefix length"))?;
                IpCidr::new(addr, len).map_err(|_| {
                    bad(match addr {
                        IpAddr::V4(_) => "prefix length above 32",
                        IpAddr::V6(_) => "prefix length above 128",
                    })
                })?
            }
            None => IpCidr::host(text.parse::<IpAddr>().map_err(|_| bad("bad address"))?),
        };
        Ok(Self::from(cidr))
    }

    /// The IPv4 prefix `addr/len` with host bits cleared (`len` clamped to 32: a
    /// longer one is the host prefix).
    pub fn v4(addr: Ipv4Addr, len: u8) -> Self {
        Self::from(IpCidr::V4(
            Ipv4Cidr::new(addr, len).unwrap_or(Ipv4Cidr::host(addr)),
        ))
    }

    /// The IPv6 prefix `addr/len` with host bits cleared (`len` clamped to 128: a
    /// longer one is the host prefix).
    pub fn v6(addr: Ipv6Addr, len: u8) -> Self {
        Self::from(IpCidr::V6(
            Ipv6Cidr::new(addr, len).unwrap_or(Ipv6Cidr::host(addr)),
        ))
    }

    /// The prefix, or `None` for any.
    pub fn cidr(&self) -> Option<IpCidr> {
        match *self {
            Self::Any => None,
            Self::Cidr(cidr) => Some(cidr),
        }
    }

    /// Whether `ip` is inside the prefix; never across families, except for `Any`.
    pub fn matches(&self, ip: IpAddr) -> bool {
        match self {
            Self::Any => true,
            Self::Cidr(cidr) => cidr.contains(ip),
        }
    }

    /// `Some(true)` for IPv4, `Some(false)` for IPv6, `None` for any.
    pub fn is_v4(&self) -> Option<bool> {
        self.cidr().map(|cidr| matches!(cidr, IpCidr::V4(_)))
    }

    /// An IPv4 prefix as the inclusive range of its host-order addresses; `None` for
    /// any and for IPv6.
    pub fn v4_range(&self) -> Option<(u32, u32)> {
        match self {
            Self::Cidr(IpCidr::V4(c)) => {
                let mask = Ipv4Cidr::mask_of(c.prefix_len());
                let low = c.address().to_bits() & mask;
                Some((low, low | !mask))
            }
            _ => None,
        }
    }

    /// An IPv6 prefix as the inclusive range of its addresses as integers; `None` for
    /// any and for IPv4.
    pub fn v6_range(&self) -> Option<(u128, u128)> {
        match self {
            Self::Cidr(IpCidr::V6(c)) => {
                let mask = Ipv6Cidr::mask_of(c.prefix_len());
                let low = c.address().to_bits() & mask;
                Some((low, low | !mask))
            }
            _ => None,
        }
    }
}

impl From<IpCidr> for Prefix {
    /// The prefix of `cidr` with its host bits cleared.
    fn from(cidr: IpCidr) -> Self {
        Self::Cidr(cidr.trunc())
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("any"),
            Self::Cidr(cidr) => cidr.fmt(f),
        }
    }
}

/// An inclusive port range; `lo..=hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// Lowest port matched.
    pub lo: u16,
    /// Highest port matched.
    pub hi: u16,
}

impl PortRange {
    /// Every port, `0-65535`.
    pub const ANY: Self = Self { lo: 0, hi: 65535 };

    /// Exactly one port.
    pub fn single(port: u16) -> Self {
        Self { lo: port, hi: port }
    }

    /// Parses `any`, `N` or `LO-HI`. Errors name `field`.
    pub fn parse(text: &str, field: RuleField) -> Result<Self, RuleError> {
        if text == "any" {
            return Ok(Self::ANY);
        }
        let port = |part: &str| -> Result<u16, RuleError> {
            let value = part.trim().parse::<u64>().map_err(|_| RuleError::BadPort {
                field,
                text: text.to_owned(),
            })?;
            Self::port(value, field)
        };
        let range = match text.split_once('-') {
            Some((lo, hi)) => Self {
                lo: port(lo)?,
                hi: port(hi)?,
            },
            None => Self::single(port(text)?),
        };
        range.check(field)?;
        Ok(range)
    }

    /// The single-port range of a number given as an integer (e.g. in JSON), checked
    /// against 65535. Errors name `field`.
    pub fn from_number(value: u64, field: RuleField) -> Result<Self, RuleError> {
        Self::port(value, field).map(Self::single)
    }

    fn port(value: u64, field: RuleField) -> Result<u16, RuleError> {
        u16::try_from(value).map_err(|_| RuleError::PortTooLarge { field, value })
    }

    fn check(self, field: RuleField) -> Result<(), RuleError> {
        if self.lo > self.hi {
            return Err(RuleError::PortRangeInverted {
                field,
                lo: self.lo,
                hi: self.hi,
            });
        }
        Ok(())
    }

    /// Whether the range is every port.
    pub fn is_any(self) -> bool {
        self == Self::ANY
    }

    /// Whether `port` is inside the range.
    pub fn contains(self, port: u16) -> bool {
        self.lo <= port && port <= self.hi
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_any() {
            f.write_str("any")
        } else if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// One ACL rule: five field ranges, an action and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// What a match does.
    pub action: Action,
    /// Protocol set.
    pub proto: Proto,
    /// Source prefix.
    pub src: Prefix,
    /// Destination prefix.
    pub dst: Prefix,
    /// Source port range, compared with the key's source port.
    pub src_port: PortRange,
    /// Destination port range, compared with the key's destination port.
    pub dst_port: PortRange,
    /// The policy this rule was rendered from, for dumps.
    pub origin: Option<String>,
    /// A remote-identity selector the destination must match instead of a prefix
    /// (`fqdn:*.example.com`, `cidr:192.0.2.0/24`; `dst` is then `Any`). Address
    /// classifiers never match such a rule: a [`Table`](super::table::Table) matches it
    /// by the destination's identity, with the identity sets it is compiled with.
    pub dst_selector: Option<String>,
}

impl Rule {
    /// A rule matching every packet.
    pub fn any(action: Action) -> Self {
        Self {
            action,
            proto: Proto::Any,
            src: Prefix::Any,
            dst: Prefix::Any,
            src_port: PortRange::ANY,
            dst_port: PortRange::ANY,
            origin: None,
            dst_selector: None,
        }
    }

    /// Whether every field of `key` is inside this rule's range for it (never, for a
    /// rule with a [`dst_selector`](Self::dst_selector): addresses carry no identity).
    pub fn matches(&self, key: &FlowKey) -> bool {
        self.dst_selector.is_none()
            && self.src.matches(key.src_ip())
            && self.dst.matches(key.dst_ip())
            && self.proto.matches(key.proto)
            && self.src_port.contains(key.src_port)
            && self.dst_port.contains(key.dst_port)
    }

    /// Checks the operator rule model: source and destination of one family, port
    /// ranges not inverted, and ports only with tcp, udp or sctp.
    pub fn validate(&self) -> Result<(), RuleError> {
        if self.dst_selector.is_some() && self.dst != Prefix::Any {
            return Err(RuleError::SelectorAndPrefix { dst: self.dst });
        }
        if let (Some(src), Some(dst)) = (self.src.is_v4(), self.dst.is_v4()) {
            if src != dst {
                return Err(RuleError::MixedFamilies {
                    src: self.src,
                    dst: self.dst,
                });
            }
        }
        for (range, field) in [
            (self.src_port, RuleField::SrcPort),
            (self.dst_port, RuleField::DstPort),
        ] {
            range.check(field)?;
            if !range.is_any() && !self.proto.has_ports() {
                return Err(RuleError::PortsWithoutPortProto {
                    field,
                    proto: self.proto,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} proto {} src {} dst ",
            self.action, self.proto, self.src
        )?;
        match &self.dst_selector {
            Some(selector) => f.write_str(selector)?,
            None => write!(f, "{}", self.dst)?,
        }
        write!(f, " src_port {} dst_port {}", self.src_port, self.dst_port)?;
        if let Some(origin) = &self.origin {
            write!(f, " origin {origin:?}")?;
        }
        Ok(())
    }
}

/// A rule field, as named in `acl.apply` input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleField {
    /// `action`.
    Action,
    /// `proto`.
    Proto,
    /// `src`.
    Src,
    /// `dst`.
    Dst,
    /// `src_port`.
    SrcPort,
    /// `dst_port`.
    DstPort,
}

impl fmt::Display for RuleField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Action => "action",
            Self::Proto => "proto",
            Self::Src => "src",
            Self::Dst => "dst",
            Self::SrcPort => "src_port",
            Self::DstPort => "dst_port",
        })
    }
}

/// Why a rule field is invalid; every variant names its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// Both a destination prefix and a destination selector.
    #[error("dst: {dst} and a selector: a rule matches its destination by one of them")]
    SelectorAndPrefix {
        /// The prefix given.
        dst: Prefix,
    },
    /// Not `deny`, `permit` or `reflect`.
    #[error("action: unknown action {text:?} (deny, permit or reflect)")]
    BadAction {
        /// The text given.
        text: String,
    },
    /// Not a protocol name or a number 0-255.
    #[error("proto: unknown protocol {text:?} (any, tcp, udp, sctp, icmp, icmpv6 or 0-255)")]
    BadProto {
        /// The text given.
        text: String,
    },
    /// Not `any` or a CIDR prefix.
    #[error("{field}: bad CIDR {text:?}: {reason}")]
    BadCidr {
        /// `src` or `dst`.
        field: RuleField,
        /// The text given.
        text: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Not `N` or `LO-HI`.
    #[error("{field}: bad port {text:?} (N or \"LO-HI\")")]
    BadPort {
        /// `src_port` or `dst_port`.
        field: RuleField,
        /// The text given.
        text: String,
    },
    /// A port above 65535.
    #[error("{field}: port {value} > 65535")]
    PortTooLarge {
        /// `src_port` or `dst_port`.
        field: RuleField,
        /// The number given.
        value: u64,
    },
    /// `lo > hi`.
    #[error("{field}: low port {lo} > high port {hi}")]
    PortRangeInverted {
        /// `src_port` or `dst_port`.
        field: RuleField,
        /// Low end.
        lo: u16,
        /// High end.
        hi: u16,
    },
    /// Ports with a protocol other than tcp, udp or sctp.
    #[error("{field}: ports need proto tcp, udp or sctp, not {proto}")]
    PortsWithoutPortProto {
        /// `src_port` or `dst_port`.
        field: RuleField,
        /// The rule's protocol.
        proto: Proto,
    },
    /// An IPv4 source with an IPv6 destination or the reverse.
    #[error("dst: family of {dst} differs from src {src}")]
    MixedFamilies {
        /// Source prefix.
        src: Prefix,
        /// Destination prefix.
        dst: Prefix,
    },
}

impl RuleError {
    /// The field the error is about.
    pub fn field(&self) -> RuleField {
        match self {
            Self::BadAction { .. } => RuleField::Action,
            Self::BadProto { .. } => RuleField::Proto,
            Self::MixedFamilies { .. } | Self::SelectorAndPrefix { .. } => RuleField::Dst,
            Self::BadCidr { field, .. }
            | Self::BadPort { field, .. }
            | Self::PortTooLarge { field, .. }
            | Self::PortRangeInverted { field, .. }
            | Self::PortsWithoutPortProto { field, .. } => *field,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(a))
    }

    fn key(src: IpAddr, dst: IpAddr, proto: u8, src_port: u16, dst_port: u16) -> FlowKey {
        FlowKey::from_ips(0, proto, src, dst, src_port, dst_port).expect("one family")
    }

    fn tcp4(src: [u8; 4], dst: [u8; 4], dst_port: u16) -> FlowKey {
        key(v4(src), v4(dst), 6, 40000, dst_port)
    }

    fn prefix(text: &str) -> Prefix {
        Prefix::parse(text, RuleField::Src).unwrap()
    }

    #[test]
    fn prefix_lengths_0_32_128() {
        let zero = prefix("0.0.0.0/0");
        assert!(zero.matches(v4([255, 255, 255, 255])));
        assert!(zero.matches(v4([0, 0, 0, 0])));
        let host = prefix("10.1.2.3/32");
        assert!(host.matches(v4([10, 1, 2, 3])));
        assert!(!host.matches(v4([10, 1, 2, 2])));
        assert!(!host.matches(v4([10, 1, 2, 4])));
        let net = prefix("10.1.2.3/8");
        assert_eq!(net, Prefix::v4(Ipv4Addr::new(10, 0, 0, 0), 8));
        assert!(net.matches(v4([10, 255, 0, 1])));
        assert!(!net.matches(v4([11, 0, 0, 0])));
        let host6 = prefix("2001:db8::1/128");
        assert!(host6.matches("2001:db8::1".parse().unwrap()));
        assert!(!host6.matches("2001:db8::2".parse().unwrap()));
        let zero6 = prefix("::/0");
        assert!(zero6.matches("ffff::1".parse().unwrap()));
        assert_eq!(
            prefix("2001:db8::1"),
            Prefix::v6("2001:db8::1".parse().unwrap(), 128)
        );
        assert_eq!(
            prefix("10.0.0.1"),
            Prefix::v4(Ipv4Addr::new(10, 0, 0, 1), 32)
        );
    }

    #[test]
    fn prefix_text_errors_and_ranges() {
        for (text, shown) in [
            ("any", "any"),
            ("10.1.2.3/8", "10.0.0.0/8"),
            ("10.0.0.1", "10.0.0.1/32"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("2001:db8::1/32", "2001:db8::/32"),
            ("2001:db8::1", "2001:db8::1/128"),
            ("::/0", "::/0"),
        ] {
            assert_eq!(prefix(text).to_string(), shown, "{text}");
        }
        for (text, message) in [
            (
                "10.0.0.0/33",
                "src: bad CIDR \"10.0.0.0/33\": prefix length above 32",
            ),
            (
                "::/129",
                "src: bad CIDR \"::/129\": prefix length above 128",
            ),
            (
                "10.0.0.0/300",
                "src: bad CIDR \"10.0.0.0/300\": bad prefix length",
            ),
            (
                "10.0.0.0/",
                "src: bad CIDR \"10.0.0.0/\": bad prefix length",
            ),
            ("10.0.0/8", "src: bad CIDR \"10.0.0/8\": bad address"),
            ("", "src: bad CIDR \"\": bad address"),
        ] {
            let err = Prefix::parse(text, RuleField::Src).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
        // Lengths past the family's are the host prefix.
        assert_eq!(
            Prefix::v4(Ipv4Addr::new(10, 0, 0, 1), 40),
            prefix("10.0.0.1")
        );
        assert_eq!(
            Prefix::v6("2001:db8::1".parse().unwrap(), 200),
            prefix("2001:db8::1")
        );
        let cidr = IpCidr::new(v4([10, 1, 2, 3]), 8).unwrap();
        assert_eq!(Prefix::from(cidr), prefix("10.0.0.0/8"));
        assert_eq!(Prefix::from(cidr).cidr(), Some(cidr.trunc()));
        assert_eq!(Prefix::Any.cidr(), None);
        assert_eq!(
            prefix("10.1.0.0/16").v4_range(),
            Some((0x0A01_0000, 0x0A01_FFFF))
        );
        assert_eq!(prefix("0.0.0.0/0").v4_range(), Some((0, u32::MAX)));
        assert_eq!(prefix("::/0").v4_range(), None);
        assert_eq!(Prefix::Any.v4_range(), None);
        let (lo, hi) = prefix("2001:db8::/32").v6_range().unwrap();
        assert_eq!(
            (lo >> 96, hi >> 96, hi as u32),
            (0x2001_0db8, 0x2001_0db8, u32::MAX)
        );
        assert_eq!(prefix("::1").v6_range(), Some((1, 1)));
        assert_eq!(prefix("10.0.0.0/8").v6_range(), None);
    }

    #[test]
    fn families_never_cross_except_any() {
        let mut rule = Rule::any(Action::Permit);
        let k4 = tcp4([10, 0, 0, 1], [10, 0, 0, 2], 80);
        let k6 = key(
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
            6,
            1,
            80,
        );
        assert!(rule.matches(&k4) && rule.matches(&k6));
        rule.src = prefix("::/0");
        assert!(!rule.matches(&k4) && rule.matches(&k6));
        rule.src = prefix("0.0.0.0/0");
        assert!(rule.matches(&k4) && !rule.matches(&k6));
        rule.src = Prefix::Any;
        rule.dst = prefix("::/0");
        assert!(!rule.matches(&k4) && rule.matches(&k6));
        // An IPv4-mapped IPv6 key is an IPv6 key.
        rule.dst = prefix("10.0.0.0/8");
        let mapped = key(
            "::ffff:10.0.0.1".parse().unwrap(),
            "::ffff:10.0.0.2".parse().unwrap(),
            6,
            1,
            80,
        );
        assert!(!rule.matches(&mapped));
    }

    #[test]
    fn port_range_bounds() {
        let mut rule = Rule::any(Action::Deny);
        rule.proto = Proto::TCP;
        rule.dst_port = PortRange { lo: 5000, hi: 5010 };
        let at = |rule: &Rule, port| rule.matches(&tcp4([1, 1, 1, 1], [2, 2, 2, 2], port));
        assert!(!at(&rule, 4999));
        assert!(at(&rule, 5000));
        assert!(at(&rule, 5010));
        assert!(!at(&rule, 5011));
        rule.dst_port = PortRange::ANY;
        assert!(at(&rule, 0) && at(&rule, 65535));
        rule.src_port = PortRange::single(40000);
        assert!(at(&rule, 1));
        rule.src_port = PortRange::single(40001);
        assert!(!at(&rule, 1));
    }

    #[test]
    fn proto_any_exact_and_masked() {
        let mut rule = Rule::any(Action::Permit);
        let udp = key(v4([1, 1, 1, 1]), v4([2, 2, 2, 2]), 17, 1, 53);
        let icmp = key(v4([1, 1, 1, 1]), v4([2, 2, 2, 2]), 1, 0, 0);
        assert!(rule.matches(&udp) && rule.matches(&icmp));
        rule.proto = Proto::UDP;
        assert!(rule.matches(&udp) && !rule.matches(&icmp));
        rule.proto = Proto::Number(0);
        assert!(!rule.matches(&udp));
        rule.proto = Proto::Masked {
            value: 0x10,
            mask: 0xF0,
        };
        assert!(rule.matches(&udp) && !rule.matches(&icmp));
    }

    #[test]
    fn parses_fields() {
        assert_eq!(Proto::parse("tcp"), Ok(Proto::Number(6)));
        assert_eq!(Proto::parse("icmpv6"), Ok(Proto::Number(58)));
        assert_eq!(Proto::parse("255"), Ok(Proto::Number(255)));
        assert_eq!(Proto::parse("any"), Ok(Proto::Any));
        assert_eq!(Proto::Number(132).to_string(), "sctp");
        assert_eq!(Action::parse("reflect"), Ok(Action::Reflect));
        let f = RuleField::DstPort;
        assert_eq!(PortRange::parse("80", f), Ok(PortRange::single(80)));
        assert_eq!(
            PortRange::parse("5000-5010", f),
            Ok(PortRange { lo: 5000, hi: 5010 })
        );
        assert_eq!(
            PortRange::parse("0-65535", f).map(PortRange::is_any),
            Ok(true)
        );
        assert_eq!(
            PortRange::from_number(65535, f),
            Ok(PortRange::single(65535))
        );
    }

    #[test]
    fn field_errors_name_the_field() {
        let f = RuleField::DstPort;
        let err = PortRange::parse("65536", f).unwrap_err();
        assert_eq!(
            err,
            RuleError::PortTooLarge {
                field: f,
                value: 65536
            }
        );
        assert_eq!(err.to_string(), "dst_port: port 65536 > 65535");
        assert_eq!(
            PortRange::from_number(70000, RuleField::SrcPort)
                .unwrap_err()
                .field(),
            RuleField::SrcPort
        );
        assert_eq!(
            PortRange::parse("10-5", f),
            Err(RuleError::PortRangeInverted {
                field: f,
                lo: 10,
                hi: 5
            })
        );
        assert!(matches!(
            PortRange::parse("x", f),
            Err(RuleError::BadPort { .. })
        ));
        assert!(matches!(
            PortRange::parse("1-", f),
            Err(RuleError::BadPort { .. })
        ));
        for bad in [
            "10.0.0.0/33",
            "10.0.0/8",
            "::/129",
            "10.0.0.0/x",
            "",
            "10.0.0.0/",
        ] {
            let err = Prefix::parse(bad, RuleField::Dst).unwrap_err();
            assert!(
                matches!(
                    err,
                    RuleError::BadCidr {
                        field: RuleField::Dst,
                        ..
                    }
                ),
                "{bad}"
            );
            assert!(err.to_string().starts_with("dst: bad CIDR"), "{err}");
        }
        assert_eq!(Proto::parse("256").unwrap_err().field(), RuleField::Proto);
        assert_eq!(Proto::parse("gre").unwrap_err().field(), RuleField::Proto);
        assert_eq!(
            Action::parse("allow").unwrap_err().field(),
            RuleField::Action
        );
    }

    #[test]
    fn validate_the_operator_model() {
        let mut rule = Rule::any(Action::Permit);
        assert_eq!(rule.validate(), Ok(()));
        rule.dst_port = PortRange::single(80);
        assert_eq!(
            rule.validate(),
            Err(RuleError::PortsWithoutPortProto {
                field: RuleField::DstPort,
                proto: Proto::Any
            })
        );
        rule.proto = Proto::ICMP;
        assert_eq!(rule.validate().unwrap_err().field(), RuleField::DstPort);
        for proto in [Proto::TCP, Proto::UDP, Proto::SCTP] {
            rule.proto = proto;
            assert_eq!(rule.validate(), Ok(()));
        }
        rule.src_port = PortRange { lo: 9, hi: 8 };
        assert_eq!(rule.validate().unwrap_err().field(), RuleField::SrcPort);
        rule.src_port = PortRange::ANY;
        rule.src = prefix("10.0.0.0/8");
        rule.dst = prefix("2001:db8::/32");
        let err = rule.validate().unwrap_err();
        assert!(matches!(err, RuleError::MixedFamilies { .. }));
        assert_eq!(err.field(), RuleField::Dst);
        rule.dst = Prefix::Any;
        assert_eq!(rule.validate(), Ok(()));
    }
}
