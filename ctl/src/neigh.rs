//! `ferrulectl neigh add|del|list`: ARP/ND neighbours per network (`neigh.*`).

use super::*;

pub(crate) const NEIGH_LONG_ABOUT: &str = "\
Add, delete and list neighbours: the IP-to-MAC bindings (ARP for IPv4, neighbour
discovery for IPv6) Ferrule uses to address frames to a route's next hop, or to the
destination itself on on-link routes. Ferrule resolves neighbours by itself and holds
a few packets per neighbour while it does; static neighbours, from the configuration
([[neighbor]] in ferrule.toml) or added here, are never resolved or aged out. Without
--network, commands act on the cluster default network `default` (`neigh dump`
without --network lists every network).";

/// `ferrulectl neigh` subcommands.
#[derive(Debug, Subcommand)]
pub enum NeighCommand {
    /// Add a static neighbour.
    #[command(long_about = "\
Add a static neighbour: frames to IP are sent to MAC out of --port, without ARP or
neighbour discovery, until the entry is deleted. The port must belong to the
network. Prints nothing on success.

Example:
  ferrulectl neigh add 192.0.2.1 0a:1b:2c:3d:4e:5f --port uplink0")]
    Add(NeighAddArgs),

    /// Delete a neighbour.
    #[command(long_about = "\
Delete the neighbour entry of IP, static or dynamic (a dynamic entry is resolved again
when next needed). Prints nothing on success.")]
    Del(NeighDelArgs),

    /// List neighbours.
    #[command(long_about = "\
List the neighbour entries of one network (--network) or of every network: NETWORK,
IP, MAC (`-` while resolution is under way), PORT, STATE (static, reachable, stale,
or incomplete while resolution is under way), AGE (seconds since the entry was
learned or last confirmed, `-` for static entries) and HELD (packets waiting for the
resolution to finish).")]
    Dump(NetworkArgs),
}

/// Arguments of `ferrulectl neigh add`.
#[derive(Debug, Args)]
pub struct NeighAddArgs {
    /// IPv4 or IPv6 address of the neighbour.
    #[arg(value_name = "IP")]
    pub ip: String,

    /// Its MAC address, aa:bb:cc:dd:ee:ff.
    #[arg(value_name = "MAC")]
    pub mac: String,

    /// Port the neighbour is reached through.
    #[arg(long, value_name = "PORT")]
    pub port: String,

    /// Network (VRF) of the entry [default: default].
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,
}

/// Arguments of `ferrulectl neigh del`.
#[derive(Debug, Args)]
pub struct NeighDelArgs {
    /// IPv4 or IPv6 address of the neighbour.
    #[arg(value_name = "IP")]
    pub ip: String,

    /// Network (VRF) of the entry [default: default].
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,
}

pub(crate) fn neigh(ctx: &mut Ctx<'_>, command: &NeighCommand) -> Result<(), CtlError> {
    match command {
        NeighCommand::Add(a) => {
            let request = NeighAdd {
                network: a.network.clone(),
                ip: a.ip.clone(),
                mac: a.mac.clone(),
                port: a.port.clone(),
            };
            ctx.query(neigh_method::ADD, params(&request)?, nothing)
        }
        NeighCommand::Del(a) => {
            let request = NeighDel {
                network: a.network.clone(),
                ip: a.ip.clone(),
            };
            ctx.query(neigh_method::DEL, params(&request)?, nothing)
        }
        NeighCommand::Dump(a) => {
            let request = NetworkFilter {
                network: a.network.clone(),
            };
            ctx.query(neigh_method::DUMP, params(&request)?, render_neighbors)
        }
    }
}

/// `ferrulectl neigh dump`.
pub fn render_neighbors(dump: &NeighDump) -> String {
    if dump.neighbors.is_empty() {
        return "no neighbours\n".to_string();
    }
    let mut table = Table::new(["NETWORK", "IP", "MAC", "PORT", "STATE", "AGE", "HELD"]);
    for n in &dump.neighbors {
        table.row([
            n.network.clone(),
            n.ip.clone(),
            or_dash(Some(n.mac.as_str())),
            n.port.clone(),
            n.state.clone(),
            format_age(n.age_secs, &n.state),
            n.held_packets.to_string(),
        ]);
    }
    table.to_string()
}

/// A neighbour's age as `12.3s`; `-` for static entries, which do not age.
pub(crate) fn format_age(secs: f64, state: &str) -> String {
    if state == "static" || !secs.is_finite() || secs < 0.0 {
        return "-".to_string();
    }
    format!("{secs:.1}s")
}
