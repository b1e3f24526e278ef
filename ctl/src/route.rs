//! `ferrulectl route add|del|list`: routes per network (`route.*`).

use super::*;

pub(crate) const ROUTE_LONG_ABOUT: &str = "\
Add, delete and list routes. Every network (VRF) has its own routing table, looked up
by longest prefix match on the destination address of packets received on the
network's ports. Without --network, commands act on the cluster default network
`default` (`route dump` without --network lists every network).

Routes come from the configuration ([[route]] in ferrule.toml), from the control API
(these commands), from the subnets of the ports' own addresses
(connected), from the pod ports' addresses (pod), from Ferrule's own addresses
(local) and from the node's ENIs (eni, `vpc.sync`). Each secondary ENI has its own
table, eni-<device index>, with a default route via its subnet gateway: a pod whose
address is one of the ENI's secondary IPs leaves by it (see the source rules `route
dump` prints). Routes added through the API are not written back to the configuration:
they are lost when ferruled restarts.";

/// `ferrulectl route` subcommands.
#[derive(Debug, Subcommand)]
pub enum RouteCommand {
    /// Add a route out of a port, or a blackhole route.
    #[command(
        long_about = "\
Add a route to PREFIX in a network: out of --port, to the next hop --via (resolved by
ARP or neighbour discovery on that port) or, without --via, straight to the
destination (an on-link route); or, with --blackhole, a route that drops matching
packets (counted as `blackhole` drops). A route to the same prefix from the
configuration or the API is replaced. Prints nothing on success, like `ip route add`.

PREFIX is ADDR/LEN with the host bits clear (10.2.0.0/16, 2001:db8::/32), or a bare
address for a host route (/32 or /128). The port must belong to the network, and
--via must be of the same IP version as PREFIX.

Examples:
  ferrulectl route add 0.0.0.0/0 --port uplink0 --via 192.0.2.1
  ferrulectl route add 10.9.0.0/16 --port uplink0
  ferrulectl route add 2001:db8:bad::/48 --blackhole --network blue",
        group(ArgGroup::new("target").required(true).args(["port", "blackhole"]))
    )]
    Add(RouteAddArgs),

    /// Delete a route.
    #[command(long_about = "\
Delete the route to PREFIX (exactly that prefix, not the longest match) from a
network. Routes from the configuration or the API can be deleted; connected, pod and
local routes follow the ports' configuration. Prints nothing on success.")]
    Del(RouteDelArgs),

    /// List routes.
    #[command(long_about = "\
List the routes of one network (--network) or of every network, in the order the
daemon keeps them: NETWORK, PREFIX, KIND (port, blackhole, or local for Ferrule's own
addresses), the output PORT, the next hop VIA (`-` for on-link routes), and the
SOURCE of the route: config, api, connected (a port address's subnet), pod (a pod
port's address) or local.")]
    Dump(NetworkArgs),
}

/// Arguments of `ferrulectl route add`.
#[derive(Debug, Args)]
pub struct RouteAddArgs {
    /// Destination prefix: ADDR/LEN, or ADDR for a host route.
    #[arg(value_name = "PREFIX")]
    pub prefix: String,

    /// Network (VRF) of the route [default: default].
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,

    /// Send matching packets out of this port.
    #[arg(long, value_name = "PORT")]
    pub port: Option<String>,

    /// Next-hop address on --port (default: on-link).
    // clap does not enforce `requires` when the required arg conflicts with one given
    // (`--blackhole`), hence the explicit conflict.
    #[arg(
        long,
        value_name = "NEXTHOP",
        requires = "port",
        conflicts_with = "blackhole"
    )]
    pub via: Option<String>,

    /// Drop matching packets.
    #[arg(long)]
    pub blackhole: bool,
}

/// Arguments of `ferrulectl route del`.
#[derive(Debug, Args)]
pub struct RouteDelArgs {
    /// Prefix of the route, as it was added.
    #[arg(value_name = "PREFIX")]
    pub prefix: String,

    /// Network (VRF) of the route [default: default].
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,
}

/// `--network` of the dump commands.
#[derive(Debug, Args)]
pub struct NetworkArgs {
    /// Only this network (default: every network).
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,
}

pub(crate) fn route(ctx: &mut Ctx<'_>, command: &RouteCommand) -> Result<(), CtlError> {
    match command {
        RouteCommand::Add(a) => {
            let request = RouteAdd {
                network: a.network.clone(),
                prefix: a.prefix.clone(),
                port: a.port.clone(),
                via: a.via.clone(),
                blackhole: a.blackhole,
            };
            ctx.query(route_method::ADD, params(&request)?, nothing)
        }
        RouteCommand::Del(a) => {
            let request = RouteDel {
                network: a.network.clone(),
                prefix: a.prefix.clone(),
            };
            ctx.query(route_method::DEL, params(&request)?, nothing)
        }
        RouteCommand::Dump(a) => {
            let request = NetworkFilter {
                network: a.network.clone(),
            };
            ctx.query(route_method::DUMP, params(&request)?, render_routes)
        }
    }
}

/// `ferrulectl route dump`.
pub fn render_routes(dump: &RouteDump) -> String {
    if dump.routes.is_empty() {
        return "no routes\n".to_string();
    }
    // A TABLE column only when some route is in another table than `main` (an ENI's).
    let tables = dump.routes.iter().any(|r| r.table.is_some());
    let mut headers = vec!["NETWORK"];
    if tables {
        headers.push("TABLE");
    }
    headers.extend(["PREFIX", "KIND", "PORT", "VIA", "SOURCE"]);
    let mut table = Table::new(headers);
    for r in &dump.routes {
        let mut row = vec![r.network.clone()];
        if tables {
            row.push(r.table.clone().unwrap_or_else(|| "main".into()));
        }
        row.extend([
            r.prefix.clone(),
            r.kind.clone(),
            or_dash(r.port.as_deref()),
            or_dash(r.via.as_deref()),
            r.source.clone(),
        ]);
        table.row(row);
    }
    let mut out = table.to_string();
    if !dump.rules.is_empty() {
        out.push_str("\nsource rules (pod traffic out of an uplink, not masqueraded):\n");
        for rule in &dump.rules {
            out.push_str(&format!(
                "  from {} lookup {} ({} device {}, network {})\n",
                if rule.sources.is_empty() {
                    "-".to_string()
                } else {
                    rule.sources.join(", ")
                },
                rule.table,
                rule.eni,
                rule.device_index,
                rule.network
            ));
        }
    }
    out
}
