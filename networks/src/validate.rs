//! The seed's validations of a network spec, and the values they produce.
//!
//! Each rule is its own error: where the seed (or upstream's CRD) has a message it is
//! used word for word ("Spec is immutable", "Subnets is required for Layer3 topology",
//! "Topology localnet is not supported for primary network", "ipamLifecycle is
//! supported for Layer2 and Localnet topologies", "Unexpected number of join
//! subnets"); otherwise the message names the value. The field is the path as written
//! (flat or nested form, see [`crate::manifest::SpecPaths`]).

use crate::manifest::{
    ClusterUserDefinedNetwork, IpamLifecycle, IpamMode, NetworkSpec, Role, Topology,
    UserDefinedNetwork,
};
use crate::{family, overlaps, Invalid, Settings};
use ferrule_dataplane::wire::IpCidr;
use ferrule_policy::selector::Selector;
use std::net::IpAddr;

/// The smallest MTU of a network (IPv4's minimum reassembly size).
pub const MIN_MTU: u32 = 576;
/// The largest MTU of a network (jumbo frames).
pub const MAX_MTU: u32 = 9216;
/// The smallest MTU of a network with an IPv6 subnet.
pub const MIN_MTU_V6: u32 = 1280;
/// The longest Layer3 host subnet: IPv4.
pub const MAX_HOST_LEN_V4: u8 = 30;
/// The longest Layer3 host subnet: IPv6.
pub const MAX_HOST_LEN_V6: u8 = 126;
/// The Layer3 host subnet length when a subnet has none: IPv4.
pub const DEFAULT_HOST_LEN_V4: u8 = 24;
/// The Layer3 host subnet length when a subnet has none: IPv6.
pub const DEFAULT_HOST_LEN_V6: u8 = 64;

/// One subnet of a network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Subnet {
    /// The network's subnet, host bits clear.
    pub cidr: IpCidr,
    /// Layer3: the length of each node's share (given or defaulted); `None` otherwise.
    pub host_len: Option<u8>,
}

impl std::fmt::Display for Subnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.host_len {
            Some(h) => write!(f, "{}/{h}", self.cidr),
            None => write!(f, "{}", self.cidr),
        }
    }
}

/// A validated network: every value parsed, every default applied.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NetworkConfig {
    pub topology: Topology,
    pub role: Role,
    pub mtu: u32,
    /// 0–2 subnets, at most one per family (IPv4 first if both); empty only with IPAM
    /// disabled.
    pub subnets: Vec<Subnet>,
    /// Addresses never given out (host bits cleared, each inside a subnet).
    pub exclude_subnets: Vec<IpCidr>,
    /// Primary networks: the join subnets (given, or [`Settings::udn_join_subnets`] for
    /// the subnets' families). Empty for secondary networks (the field is ignored).
    pub join_subnets: Vec<IpCidr>,
    pub ipam_mode: IpamMode,
    /// `ipam.lifecycle: Persistent` (or the seed's `ipamLifecycle`).
    pub persistent_ips: bool,
    /// Localnet: the physical network name.
    pub physical_network: Option<String>,
    /// Localnet: the access VLAN, 1..=4094.
    pub vlan: Option<u16>,
}

/// Whether `s` is a DNS-1123 label: 1–63 lowercase letters, digits and `-`, starting
/// and ending with a letter or digit.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Checks a name or namespace (they end up in network names, logs and files).
pub fn check_name(object: &str, field: &str, name: &str) -> Result<(), Invalid> {
    if is_dns_label(name) {
        Ok(())
    } else {
        Err(Invalid::new(
            object,
            field,
            format!(
                "{name:?} is not a valid name: it must be a DNS-1123 label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)"
            ),
        ))
    }
}

/// Parses `ADDR/LEN` (a length is required).
pub fn parse_cidr(s: &str) -> Option<IpCidr> {
    let (a, l) = s.split_once('/')?;
    let addr: IpAddr = a.parse().ok()?;
    if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) || l.len() > 3 {
        return None;
    }
    let len: u8 = l.parse().ok()?;
    IpCidr::new(addr, len).ok()
}

fn not_cidr(object: &str, field: String, text: &str) -> Invalid {
    Invalid::new(object, field, format!("{text:?} is not a valid CIDR"))
}

/// A network prefix: a valid CIDR with the host bits clear.
fn parse_network(object: &str, field: String, text: &str) -> Result<IpCidr, Invalid> {
    let c = parse_cidr(text).ok_or_else(|| not_cidr(object, field.clone(), text))?;
    if c.trunc() != c {
        return Err(Invalid::new(
            object,
            field,
            format!("{text:?} has host bits set: the network is {}", c.trunc()),
        ));
    }
    Ok(c)
}

/// Validates a `UserDefinedNetwork`.
pub fn validate_udn(
    udn: &UserDefinedNetwork,
    settings: &Settings,
) -> Result<NetworkConfig, Invalid> {
    let object = udn.object();
    check_name(&object, "metadata.name", &udn.name)?;
    check_name(&object, "metadata.namespace", &udn.namespace)?;
    validate_spec(&udn.spec, &object, settings)
}

/// Validates a `ClusterUserDefinedNetwork`: its name, selector and network.
pub fn validate_cudn(
    cudn: &ClusterUserDefinedNetwork,
    settings: &Settings,
) -> Result<(Selector, NetworkConfig), Invalid> {
    let object = cudn.object();
    check_name(&object, "metadata.name", &cudn.name)?;
    let selector = Selector::parse(&cudn.namespace_selector).map_err(|(path, detail)| {
        Invalid::new(&object, format!("spec.namespaceSelector.{path}"), detail)
    })?;
    let config = validate_spec(&cudn.spec, &object, settings)?;
    Ok((selector, config))
}

/// Validates a spec (of the object named `object`) against the cluster's settings.
pub fn validate_spec(
    spec: &NetworkSpec,
    object: &str,
    settings: &Settings,
) -> Result<NetworkConfig, Invalid> {
    let p = &spec.paths;
    let err = |field: String, message: String| Invalid::new(object, field, message);
    let layer3 = spec.topology == Topology::Layer3;

    // The CRD's rules on the whole spec.
    if spec.topology == Topology::Localnet && spec.role == Role::Primary {
        return Err(err(
            p.field("role"),
            "Topology localnet is not supported for primary network".into(),
        ));
    }
    if layer3 && spec.subnets.is_empty() {
        return Err(err(
            p.field("subnets"),
            "Subnets is required for Layer3 topology".into(),
        ));
    }
    if spec.ipam_lifecycle.is_some() && layer3 {
        return Err(err(
            p.ipam_lifecycle(),
            "ipamLifecycle is supported for Layer2 and Localnet topologies".into(),
        ));
    }
    let ipam_mode = spec.ipam_mode.unwrap_or(IpamMode::Enabled);
    match ipam_mode {
        IpamMode::Disabled => {
            if layer3 || spec.role == Role::Primary {
                return Err(err(
                    p.field("ipam.mode"),
                    "ipam.mode Disabled is only supported for Layer2 and Localnet topologies of Secondary networks".into(),
                ));
            }
            if !spec.subnets.is_empty() {
                return Err(err(
                    p.field("subnets"),
                    "Subnets must be omitted when ipam.mode is Disabled".into(),
                ));
            }
            if spec.ipam_lifecycle.is_some() {
                return Err(err(
                    p.ipam_lifecycle(),
                    "lifecycle Persistent is only supported when ipam.mode is Enabled".into(),
                ));
            }
        }
        IpamMode::Enabled => {
            if spec.subnets.is_empty() {
                return Err(err(
                    p.field("subnets"),
                    "Subnets is required with ipam.mode is Enabled or unset".into(),
                ));
            }
        }
    }
    if spec.topology != Topology::Localnet {
        if spec.physical_network_name.is_some() {
            return Err(err(
                p.field("physicalNetworkName"),
                "only supported for Localnet topology".into(),
            ));
        }
        if spec.vlan.is_some() {
            return Err(err(
                p.field("vlan"),
                "only supported for Localnet topology".into(),
            ));
        }
    }

    // Subnets.
    if spec.subnets.len() > 2 {
        return Err(err(
            p.field("subnets"),
            format!(
                "at most 2 subnets (one per IP family) are allowed, got {}",
                spec.subnets.len()
            ),
        ));
    }
    // Each parsed subnet with its index as written.
    let mut parsed: Vec<(Subnet, usize)> = Vec::new();
    for (i, s) in spec.subnets.iter().enumerate() {
        let field = p.subnet(i);
        // The seed's `10.128.0.0/16/24` form.
        let (text, written_host) = match s.cidr.matches('/').count() {
            2 => {
                let (cidr, host) = s.cidr.rsplit_once('/').expect("two slashes");
                if !layer3 {
                    return Err(err(
                        field,
                        format!(
                            "{:?}: the host subnet form ADDR/LEN/HOSTLEN is only supported for Layer3 topology",
                            s.cidr
                        ),
                    ));
                }
                if s.host_subnet.is_some() {
                    return Err(err(
                        field,
                        format!("{:?}: the host subnet length is given twice", s.cidr),
                    ));
                }
                let host: i64 = match host.parse() {
                    Ok(h) if !host.starts_with('+') => h,
                    _ => return Err(not_cidr(object, field, &s.cidr)),
                };
                (cidr, Some((host, field.clone())))
            }
            _ => (
                s.cidr.as_str(),
                s.host_subnet.map(|h| {
                    let f = if p.subnet_objects {
                        format!("{}.subnets[{i}].hostSubnet", p.base)
                    } else {
                        field.clone()
                    };
                    (h, f)
                }),
            ),
        };
        let cidr = match parse_cidr(text) {
            Some(c) => c,
            None => return Err(not_cidr(object, field, &s.cidr)),
        };
        if cidr.trunc() != cidr {
            return Err(err(
                field,
                format!(
                    "{:?} has host bits set: the network is {}",
                    s.cidr,
                    cidr.trunc()
                ),
            ));
        }
        if let Some((other, _)) = parsed
            .iter()
            .find(|(o, _)| family(&o.cidr) == family(&cidr))
        {
            return Err(err(
                field,
                format!(
                    "{:?} is a second {} subnet (after {}): at most one subnet per IP family",
                    s.cidr,
                    family(&cidr),
                    other.cidr
                ),
            ));
        }
        let host_len = if layer3 {
            let (max, default) = match cidr {
                IpCidr::V4(_) => (MAX_HOST_LEN_V4, DEFAULT_HOST_LEN_V4),
                IpCidr::V6(_) => (MAX_HOST_LEN_V6, DEFAULT_HOST_LEN_V6),
            };
            let h = match written_host {
                Some((h, hf)) => {
                    if h <= i64::from(cidr.prefix_len()) {
                        return Err(err(
                            hf,
                            format!(
                                "host subnet length /{h} must be longer than the subnet's /{}",
                                cidr.prefix_len()
                            ),
                        ));
                    }
                    if h > i64::from(max) {
                        return Err(err(
                            hf,
                            format!(
                                "host subnet length /{h} is too long for {} (at most /{max})",
                                family(&cidr)
                            ),
                        ));
                    }
                    h as u8
                }
                None => {
                    if cidr.prefix_len() >= default {
                        return Err(err(
                            field,
                            format!(
                                "{:?}: the host subnet length defaults to /{default}, which is not longer than the subnet's /{}: give it, e.g. {cidr}/{}",
                                s.cidr,
                                cidr.prefix_len(),
                                (cidr.prefix_len() + 2).min(max)
                            ),
                        ));
                    }
                    default
                }
            };
            Some(h)
        } else {
            None
        };
        parsed.push((Subnet { cidr, host_len }, i));
    }
    let mut subnets: Vec<Subnet> = parsed.iter().map(|(s, _)| *s).collect();
    subnets.sort_by_key(|s| matches!(s.cidr, IpCidr::V6(_)));

    // excludeSubnets: any address inside a subnet (host bits are cleared, as Go's
    // ParseCIDR does: the seed's example excludes "10.0.0.100/26").
    let mut exclude_subnets = Vec::new();
    for (i, text) in spec.exclude_subnets.iter().enumerate() {
        let field = p.field(&format!("excludeSubnets[{i}]"));
        let c = parse_cidr(text)
            .ok_or_else(|| not_cidr(object, field.clone(), text))?
            .trunc();
        if !subnets.iter().any(|s| s.cidr.contains_cidr(&c)) {
            return Err(err(
                field,
                format!("{text:?} is not inside any subnet of the network"),
            ));
        }
        exclude_subnets.push(c);
    }

    // Join subnets: checked as written; used by primary networks only.
    let mut written_join = Vec::new();
    if let Some(join) = &spec.join_subnets {
        if join.is_empty() || join.len() > 2 {
            return Err(err(
                p.field("joinSubnets"),
                "Unexpected number of join subnets".into(),
            ));
        }
        for (i, text) in join.iter().enumerate() {
            let field = p.field(&format!("joinSubnets[{i}]"));
            let c = parse_network(object, field.clone(), text)?;
            if written_join.iter().any(|(o, _)| family(o) == family(&c)) {
                return Err(err(
                    field,
                    format!("{text:?}: at most one join subnet per IP family"),
                ));
            }
            written_join.push((c, field));
        }
    }
    let mut join_subnets = Vec::new();
    if spec.role == Role::Primary {
        if spec.join_subnets.is_none() {
            for s in &subnets {
                if let Some(j) = settings
                    .udn_join_subnets
                    .iter()
                    .find(|j| family(j) == family(&s.cidr))
                {
                    written_join.push((*j, p.field("joinSubnets")));
                }
            }
        }
        for (j, field) in &written_join {
            let reserved = reserved(settings).into_iter().find(|(r, _)| overlaps(j, r));
            if let Some((r, what)) = reserved {
                let message = if spec.join_subnets.is_some() {
                    format!("{j} overlaps {what} {r}")
                } else {
                    format!("the default join subnet {j} overlaps {what} {r}: set joinSubnets")
                };
                return Err(err(field.clone(), message));
            }
            join_subnets.push(*j);
        }
        if spec.join_subnets.is_some() {
            for s in &subnets {
                if !join_subnets.iter().any(|j| family(j) == family(&s.cidr)) {
                    return Err(err(
                        p.field("joinSubnets"),
                        format!(
                            "no {} join subnet for the {} subnet {}",
                            family(&s.cidr),
                            family(&s.cidr),
                            s.cidr
                        ),
                    ));
                }
            }
        }
        join_subnets.sort_by_key(|j| matches!(j, IpCidr::V6(_)));
    }

    // Pod subnets must not overlap the cluster's own subnets or this network's join.
    for (s, i) in &parsed {
        let c = s.cidr;
        let own_join = join_subnets
            .iter()
            .map(|j| (*j, "the network's join subnet"));
        if let Some((r, what)) = reserved(settings)
            .into_iter()
            .chain(own_join)
            .find(|(r, _)| overlaps(&c, r))
        {
            return Err(err(p.subnet(*i), format!("{c} overlaps {what} {r}")));
        }
    }

    // MTU.
    let mtu = match spec.mtu {
        None => settings.mtu,
        Some(m) if (i64::from(MIN_MTU)..=i64::from(MAX_MTU)).contains(&m) => m as u32,
        Some(m) => {
            return Err(err(
                p.field("mtu"),
                format!("{m} is out of range {MIN_MTU}..={MAX_MTU}"),
            ))
        }
    };
    if mtu < MIN_MTU_V6 && subnets.iter().any(|s| matches!(s.cidr, IpCidr::V6(_))) {
        return Err(err(
            p.field("mtu"),
            format!("{mtu} is below {MIN_MTU_V6}, the minimum for a network with an IPv6 subnet"),
        ));
    }

    // Localnet.
    if let Some(name) = &spec.physical_network_name {
        if name.is_empty()
            || name.len() > 253
            || name.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(err(
                p.field("physicalNetworkName"),
                format!(
                    "{name:?} is not a valid physical network name (1–253 characters, no spaces)"
                ),
            ));
        }
    }
    let vlan = match &spec.vlan {
        None => None,
        Some(v) => {
            if v.mode != "Access" {
                return Err(err(
                    p.field("vlan.mode"),
                    format!("{:?}: the only supported mode is Access", v.mode),
                ));
            }
            match v.access_id {
                None => {
                    return Err(err(
                        p.field("vlan.access"),
                        "required when vlan.mode is Access".into(),
                    ))
                }
                Some(id) if (1..=4094).contains(&id) => Some(id as u16),
                Some(id) => {
                    return Err(err(
                        p.field("vlan.access.id"),
                        format!("{id} is not a VLAN id (1..=4094)"),
                    ))
                }
            }
        }
    };

    Ok(NetworkConfig {
        topology: spec.topology,
        role: spec.role,
        mtu,
        subnets,
        exclude_subnets,
        join_subnets,
        ipam_mode,
        persistent_ips: spec.ipam_lifecycle == Some(IpamLifecycle::Persistent),
        physical_network: spec.physical_network_name.clone(),
        vlan,
    })
}

/// The cluster's prefixes a network's pod and join subnets must not overlap, with
/// what they are.
fn reserved(settings: &Settings) -> Vec<(IpCidr, &'static str)> {
    let mut out = Vec::new();
    out.extend(
        settings
            .default_join_subnets
            .iter()
            .map(|c| (*c, "the cluster default network's join subnet")),
    );
    out.extend(
        settings
            .cluster_subnets
            .iter()
            .map(|c| (*c, "the cluster default network's subnet")),
    );
    out.extend(
        settings
            .service_subnets
            .iter()
            .map(|c| (*c, "the service subnet")),
    );
    out.push((
        IpCidr::V4(settings.masquerade_subnet_v4.network()),
        "the masquerade subnet",
    ));
    out.push((
        IpCidr::V6(settings.masquerade_subnet_v6.network()),
        "the masquerade subnet",
    ));
    out
}
