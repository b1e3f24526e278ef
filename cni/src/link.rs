//! The pod's veth pair over netlink: created in the node's namespace, the pod end given
//! transmit checksumming off (an AF_PACKET/AF_XDP port sees what the kernel sends, and
//! a partial checksum would reach the wire unfinished), moved into the container's
//! namespace, renamed, addressed and routed through the gateway the way the AWS VPC CNI
//! sets pods up: the pod's addresses as host addresses, a link route to 169.254.1.1 and
//! the default route through it (fe80::1 for IPv6).
//!
//! Namespace changes happen on a thread of their own (`setns` moves the calling thread
//! only), which ends when the work in the container's namespace is done.

use crate::spec::{code, CniError};
use ferrule_dataplane::wire::IpCidr;
use futures::TryStreamExt;
use rtnetlink::packet_route::address::{AddressAttribute, AddressFlags};
use rtnetlink::packet_route::link::LinkAttribute;
use rtnetlink::packet_route::neighbour::NeighbourState;
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteScope};
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The IPv4 gateway pods route through (Ferrule answers ARP for it on pod ports).
pub const GATEWAY_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// The IPv6 gateway pods route through.
pub const GATEWAY_V6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

fn nl_err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> CniError {
    CniError::new(code::NETLINK, what.to_string(), e.to_string())
}

/// Runs `work` with a netlink handle in the current thread's namespace.
fn with_handle<T>(work: impl AsyncFnOnce(&Handle) -> Result<T, CniError>) -> Result<T, CniError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| nl_err("cannot start the netlink runtime", e))?;
    rt.block_on(async {
        let (connection, handle, _) =
            rtnetlink::new_connection().map_err(|e| nl_err("cannot open a netlink socket", e))?;
        let task = tokio::spawn(connection);
        let out = work(&handle).await;
        task.abort();
        out
    })
}

/// Runs `work` in the network namespace at `netns`, on a thread of its own.
fn in_netns<T: Send + 'static>(
    netns: &Path,
    work: impl FnOnce() -> Result<T, CniError> + Send + 'static,
) -> Result<T, CniError> {
    let file = std::fs::File::open(netns).map_err(|e| {
        CniError::new(
            code::UNKNOWN_CONTAINER,
            format!("cannot open the network namespace {}", netns.display()),
            e.to_string(),
        )
    })?;
    let path = netns.to_path_buf();
    std::thread::spawn(move || {
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| {
            CniError::new(
                code::UNKNOWN_CONTAINER,
                format!("{} is not a network namespace", path.display()),
                e.to_string(),
            )
        })?;
        work()
    })
    .join()
    .map_err(|_| CniError::new(code::NETLINK, "the namespace thread panicked", ""))?
}

async fn index_of(handle: &Handle, name: &str) -> Result<Option<(u32, Vec<u8>)>, CniError> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(Some(link)) => {
            let mac = link
                .attributes
                .iter()
                .find_map(|a| match a {
                    LinkAttribute::Address(m) => Some(m.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            Ok(Some((link.header.index, mac)))
        }
        Ok(None) => Ok(None),
        // ENODEV: no such link.
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -19 => Ok(None),
        Err(e) => Err(nl_err(format!("cannot look up {name}"), e)),
    }
}

/// What ADD made: the node end (a Ferrule port) and the pod end's MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Veth {
    pub host_name: String,
    pub pod_mac: String,
}

fn format_mac(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Turns transmit checksum offload off on `ifname` (in the caller's namespace).
fn tx_checksum_off(ifname: &str) -> Result<(), CniError> {
    let out = std::process::Command::new("ethtool")
        .args(["-K", ifname, "tx", "off"])
        .output()
        .map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                "cannot run ethtool to turn transmit checksumming off on the pod's veth",
                format!("{e} (install the ethtool package)"),
            )
        })?;
    if !out.status.success() {
        return Err(CniError::new(
            code::NETLINK,
            format!("ethtool -K {ifname} tx off failed"),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(())
}

/// The pod's network as ADD leaves it, and CHECK expects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSide {
    pub netns: PathBuf,
    pub ifname: String,
    pub addresses: Vec<IpAddr>,
    pub mtu: u16,
    pub routing: PodRouting,
}

/// How the pod's interface is routed: through its gateways (a link route to each, as
/// they need not be on the pod's subnet), with the default route or only with some
/// prefixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRouting {
    pub gateway_v4: Ipv4Addr,
    pub gateway_v6: Ipv6Addr,
    /// The default route goes through this interface (unless the namespace has one).
    pub default_route: bool,
    /// Further prefixes routed through the gateway of their family.
    pub routes: Vec<IpCidr>,
    /// Prefixes on the link (a Layer2 network's subnet: its pods reach each other
    /// directly, switched by Ferrule).
    pub on_link: Vec<IpCidr>,
}

impl Default for PodRouting {
    /// The default network's: 169.254.1.1 / fe80::1, default route.
    fn default() -> Self {
        PodRouting {
            gateway_v4: GATEWAY_V4,
            gateway_v6: GATEWAY_V6,
            default_route: true,
            routes: Vec::new(),
            on_link: Vec::new(),
        }
    }
}

/// Creates the veth pair `host_name` ↔ the pod's `ifname` in `netns`, addressed and
/// routed. On error, what was created is deleted again.
pub fn add_veth(host_name: &str, pod: &PodSide) -> Result<Veth, CniError> {
    // A temporary name for the pod end, unique like the host end, until it is moved.
    let tmp = format!("{}p", &host_name[..host_name.len().min(14)]);
    let (host, tmp_c, mtu) = (host_name.to_string(), tmp.clone(), u32::from(pod.mtu));
    with_handle(async move |h| {
        if index_of(h, &host).await?.is_some() {
            return Err(CniError::new(
                code::NETLINK,
                format!("interface {host} exists"),
                "a previous ADD for this container was not deleted",
            ));
        }
        h.link()
            .add(LinkVeth::new(&host, &tmp_c).mtu(mtu).build())
            .execute()
            .await
            .map_err(|e| nl_err(format!("cannot create the veth pair {host}/{tmp_c}"), e))
    })?;
    let result = finish_veth(host_name, &tmp, pod);
    if result.is_err() {
        let _ = del_veth(host_name);
    }
    result
}

fn finish_veth(host_name: &str, tmp: &str, pod: &PodSide) -> Result<Veth, CniError> {
    tx_checksum_off(tmp)?;
    let ns = std::fs::File::open(&pod.netns).map_err(|e| {
        CniError::new(
            code::UNKNOWN_CONTAINER,
            format!("cannot open the network namespace {}", pod.netns.display()),
            e.to_string(),
        )
    })?;
    let (host, tmp_c) = (host_name.to_string(), tmp.to_string());
    with_handle(async move |h| {
        let (tmp_index, _) = index_of(h, &tmp_c)
            .await?
            .ok_or_else(|| nl_err(format!("{tmp_c} vanished"), "no such link"))?;
        h.link()
            .set(
                LinkUnspec::new_with_index(tmp_index)
                    .setns_by_fd(ns.as_raw_fd())
                    .build(),
            )
            .execute()
            .await
            .map_err(|e| nl_err("cannot move the pod's veth into its namespace", e))?;
        let (host_index, _) = index_of(h, &host)
            .await?
            .ok_or_else(|| nl_err(format!("{host} vanished"), "no such link"))?;
        h.link()
            .set(LinkUnspec::new_with_index(host_index).up().build())
            .execute()
            .await
            .map_err(|e| nl_err(format!("cannot bring {host} up"), e))
    })?;
    // The node end carries no address of its own: no IPv6 autoconfiguration on it.
    let _ = std::fs::write(
        format!("/proc/sys/net/ipv6/conf/{host_name}/disable_ipv6"),
        b"1",
    );
    let (tmp_c, pod_c) = (tmp.to_string(), pod.clone());
    let pod_mac = in_netns(&pod.netns, move || {
        with_handle(async move |h| configure_pod(h, &tmp_c, &pod_c).await)
    })?;
    Ok(Veth {
        host_name: host_name.to_string(),
        pod_mac,
    })
}

async fn configure_pod(h: &Handle, tmp: &str, pod: &PodSide) -> Result<String, CniError> {
    let (index, mac) = index_of(h, tmp).await?.ok_or_else(|| {
        nl_err(
            format!("{tmp} is not in the pod's namespace"),
            "no such link",
        )
    })?;
    if index_of(h, &pod.ifname).await?.is_some() {
        return Err(CniError::new(
            code::NETLINK,
            format!("the container already has an interface {}", pod.ifname),
            "",
        ));
    }
    h.link()
        .set(
            LinkUnspec::new_with_index(index)
                .name(pod.ifname.clone())
                .build(),
        )
        .execute()
        .await
        .map_err(|e| nl_err(format!("cannot rename {tmp} to {}", pod.ifname), e))?;
    h.link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(|e| nl_err(format!("cannot bring {} up", pod.ifname), e))?;
    address_and_route(h, index, pod).await?;
    Ok(format_mac(&mac))
}

/// Gives the pod's interface (already named and up) its addresses and routes, when
/// they are known only after the port is attached (an address the network's IPAM in
/// ferruled hands out).
pub fn address_pod(pod: &PodSide) -> Result<(), CniError> {
    let pod_c = pod.clone();
    in_netns(&pod.netns, move || {
        with_handle(async move |h| {
            let (index, _) = index_of(h, &pod_c.ifname).await?.ok_or_else(|| {
                nl_err(
                    format!("the container has no interface {}", pod_c.ifname),
                    "no such link",
                )
            })?;
            address_and_route(h, index, &pod_c).await
        })
    })
}

async fn address_and_route(h: &Handle, index: u32, pod: &PodSide) -> Result<(), CniError> {
    let r = &pod.routing;
    let mut v4 = false;
    let mut v6 = false;
    for addr in &pod.addresses {
        let host_len = if addr.is_ipv4() { 32 } else { 128 };
        let mut req = h.address().add(index, *addr, host_len);
        if addr.is_ipv6() {
            // The address is the pod's alone: no duplicate detection to wait for.
            req.message_mut()
                .attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
            v6 = true;
        } else {
            v4 = true;
        }
        req.execute()
            .await
            .map_err(|e| nl_err(format!("cannot add {addr} to {}", pod.ifname), e))?;
    }
    // The gateways are reached on the link (they need not be on the pod's subnet).
    if v4 {
        let link = RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(r.gateway_v4, 32)
            .output_interface(index)
            .scope(RouteScope::Link)
            .build();
        tolerate_exists(h.route().add(link).execute().await)
            .map_err(|e| nl_err(format!("cannot add the link route to {}", r.gateway_v4), e))?;
    }
    // A second interface of a container whose first one carries the default route
    // gets its addresses and its own prefixes only.
    if v4 && r.default_route && default_gateways(h, true).await?.is_empty() {
        let default = RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(Ipv4Addr::UNSPECIFIED, 0)
            .gateway(r.gateway_v4)
            .output_interface(index)
            .build();
        tolerate_exists(h.route().add(default).execute().await).map_err(|e| {
            nl_err(
                format!("cannot add the default route via {}", r.gateway_v4),
                e,
            )
        })?;
    }
    if v6 && r.default_route && default_gateways(h, false).await?.is_empty() {
        let default = RouteMessageBuilder::<Ipv6Addr>::new()
            .destination_prefix(Ipv6Addr::UNSPECIFIED, 0)
            .gateway(r.gateway_v6)
            .output_interface(index)
            .build();
        tolerate_exists(h.route().add(default).execute().await).map_err(|e| {
            nl_err(
                format!("cannot add the default route via {}", r.gateway_v6),
                e,
            )
        })?;
    }
    for prefix in &r.on_link {
        let result = match prefix.network() {
            IpAddr::V4(a) if v4 => {
                let m = RouteMessageBuilder::<Ipv4Addr>::new()
                    .destination_prefix(a, prefix.prefix_len())
                    .output_interface(index)
                    .scope(RouteScope::Link)
                    .build();
                h.route().add(m).execute().await
            }
            IpAddr::V6(a) if v6 => {
                let m = RouteMessageBuilder::<Ipv6Addr>::new()
                    .destination_prefix(a, prefix.prefix_len())
                    .output_interface(index)
                    .build();
                h.route().add(m).execute().await
            }
            _ => continue,
        };
        tolerate_exists(result)
            .map_err(|e| nl_err(format!("cannot add the link route to {prefix}"), e))?;
    }
    for prefix in &r.routes {
        let result = match prefix.network() {
            IpAddr::V4(a) if v4 => {
                let m = RouteMessageBuilder::<Ipv4Addr>::new()
                    .destination_prefix(a, prefix.prefix_len())
                    .gateway(r.gateway_v4)
                    .output_interface(index)
                    .build();
                h.route().add(m).execute().await
            }
            IpAddr::V6(a) if v6 => {
                let m = RouteMessageBuilder::<Ipv6Addr>::new()
                    .destination_prefix(a, prefix.prefix_len())
                    .gateway(r.gateway_v6)
                    .output_interface(index)
                    .build();
                h.route().add(m).execute().await
            }
            _ => continue,
        };
        tolerate_exists(result)
            .map_err(|e| nl_err(format!("cannot add the route to {prefix}"), e))?;
    }
    Ok(())
}

/// A permanent neighbour entry in a pod's namespace: `ip` is at `mac` on `ifname`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticNeighbour {
    pub netns: PathBuf,
    pub ifname: String,
    pub ip: IpAddr,
    /// `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
}

/// Adds (or replaces) a permanent neighbour entry in the pod's namespace.
pub fn add_static_neighbour(n: &StaticNeighbour) -> Result<(), CniError> {
    let mac = parse_mac(&n.mac).ok_or_else(|| {
        nl_err(
            format!("cannot add a neighbour entry for {}", n.ip),
            format!("{:?} is not a MAC address", n.mac),
        )
    })?;
    let n_c = n.clone();
    in_netns(&n.netns, move || {
        with_handle(async move |h| {
            let (index, _) = index_of(h, &n_c.ifname).await?.ok_or_else(|| {
                nl_err(
                    format!("the container has no interface {}", n_c.ifname),
                    "no such link",
                )
            })?;
            h.neighbours()
                .add(index, n_c.ip)
                .link_layer_address(&mac)
                .state(NeighbourState::Permanent)
                .replace()
                .execute()
                .await
                .map_err(|e| {
                    nl_err(
                        format!("cannot add the neighbour entry {} at {}", n_c.ip, n_c.mac),
                        e,
                    )
                })
        })
    })
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// The gateways of the namespace's default routes of one family.
async fn default_gateways(h: &Handle, v4: bool) -> Result<Vec<IpAddr>, CniError> {
    let query = if v4 {
        RouteMessageBuilder::<Ipv4Addr>::new().build()
    } else {
        RouteMessageBuilder::<Ipv6Addr>::new().build()
    };
    let mut routes = h.route().get(query).execute();
    let mut out = Vec::new();
    while let Some(r) = routes
        .try_next()
        .await
        .map_err(|e| nl_err("cannot list routes", e))?
    {
        if r.header.destination_prefix_length != 0 {
            continue;
        }
        for a in &r.attributes {
            match a {
                RouteAttribute::Gateway(RouteAddress::Inet(g)) => out.push(IpAddr::V4(*g)),
                RouteAttribute::Gateway(RouteAddress::Inet6(g)) => out.push(IpAddr::V6(*g)),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// A route that exists already (a second interface of the same container: the first
/// one carries the gateway and the default route) is left as it is.
fn tolerate_exists(r: Result<(), rtnetlink::Error>) -> Result<(), rtnetlink::Error> {
    match r {
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -17 => Ok(()),
        other => other,
    }
}

/// Deletes the veth pair by its node end; gone already is fine.
pub fn del_veth(host_name: &str) -> Result<(), CniError> {
    let host = host_name.to_string();
    with_handle(async move |h| {
        let Some((index, _)) = index_of(h, &host).await? else {
            return Ok(());
        };
        match h.link().del(index).execute().await {
            Ok(()) => Ok(()),
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -19 => Ok(()),
            Err(e) => Err(nl_err(format!("cannot delete {host}"), e)),
        }
    })
}

/// Whether the node end `host_name` exists.
pub fn host_veth_exists(host_name: &str) -> Result<bool, CniError> {
    let host = host_name.to_string();
    with_handle(async move |h| Ok(index_of(h, &host).await?.is_some()))
}

/// CHECK: the pod's interface exists, is up, has its addresses and default routes.
pub fn check_pod(pod: &PodSide) -> Result<(), CniError> {
    let pod_c = pod.clone();
    in_netns(&pod.netns, move || {
        with_handle(async move |h| {
            let fail = |what: String| CniError::new(code::CHECK_FAILED, what, "");
            let (index, _) = index_of(h, &pod_c.ifname)
                .await?
                .ok_or_else(|| fail(format!("the container has no interface {}", pod_c.ifname)))?;
            let mut have = Vec::new();
            let mut addrs = h.address().get().set_link_index_filter(index).execute();
            while let Some(a) = addrs
                .try_next()
                .await
                .map_err(|e| nl_err("cannot list addresses", e))?
            {
                for attr in &a.attributes {
                    if let AddressAttribute::Address(ip) = attr {
                        have.push(*ip);
                    }
                }
            }
            for want in &pod_c.addresses {
                if !have.contains(want) {
                    return Err(fail(format!("{} lost address {want}", pod_c.ifname)));
                }
            }
            let r = &pod_c.routing;
            for (v4, gw) in [
                (true, IpAddr::V4(r.gateway_v4)),
                (false, IpAddr::V6(r.gateway_v6)),
            ] {
                if !r.default_route || !pod_c.addresses.iter().any(|a| a.is_ipv4() == v4) {
                    continue;
                }
                if !default_gateways(h, v4).await?.contains(&gw) {
                    return Err(fail(format!("the default route via {gw} is missing")));
                }
            }
            Ok(())
        })
    })
}

/// The pod's addresses of an IPAM result, as host addresses.
pub fn pod_addresses(cidrs: &[IpCidr]) -> Vec<IpAddr> {
    cidrs.iter().map(IpCidr::address).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_parsed_the_usual_way() {
        assert_eq!(
            parse_mac("02:0a:ff:00:01:9c"),
            Some([2, 10, 255, 0, 1, 0x9c])
        );
        assert_eq!(parse_mac("02:0a:ff:00:01"), None);
        assert_eq!(parse_mac("02:0a:ff:00:01:9c:00"), None);
        assert_eq!(parse_mac("zz:0a:ff:00:01:9c"), None);
    }

    #[test]
    fn macs_are_written_the_usual_way() {
        assert_eq!(format_mac(&[2, 0, 0, 0x0a, 1, 0xff]), "02:00:00:0a:01:ff");
    }
}
