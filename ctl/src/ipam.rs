//! `ferrulectl ipam`: the state of `ferrule-ipamd`'s address pool — its ENIs and their
//! secondary addresses, the pods holding them, the settings in force — read with
//! `ipam.show` from ipamd's socket (the document its `GET /ip-manager` serves), and
//! rendered.

use super::table::Table;
use super::{CtlError, Ctx};
use clap::{Args, Subcommand};
use ferrule_api::client::Client;
use ferrule_api::ipam::{ipam_method, IpState, IpamState, DEFAULT_IPAM_SOCKET};
use serde_json::Value;
use std::path::PathBuf;

pub const IPAM_LONG_ABOUT: &str = "\
Show the address pool of ferrule-ipamd, the node's IP address manager on AWS (the VPC CNI
model): the ENIs attached to the instance, each secondary private IP and whether a pod
holds it, it is ready for a pod (warm) or cooling after a pod released it, the pods'
addresses, and the warm-pool settings in force (WARM_ENI_TARGET, WARM_IP_TARGET,
MINIMUM_IP_TARGET, the instance type's limits). The state is read from ipamd's socket
(--ipamd-socket); --json prints it as ipamd returns it, the document its introspection
endpoint serves at GET /ip-manager. See docs/ipam.md.";

/// `ferrulectl ipam` subcommands.
#[derive(Debug, Subcommand)]
pub enum IpamCommand {
    /// The pool: totals, ENIs with their addresses' states, settings.
    #[command(long_about = "\
Show the pool: addresses allocated to pods, available (warm) and cooling, the most pods
the node can address (min(N·M − N, the subnet's free addresses)), each ENI (device
index, subnet, primary IP, how many of its secondary addresses are in each state) and
the settings in force. With --verbose, every address with its state.

Examples:
  ferrulectl ipam show
  ferrulectl ipam show --verbose
  ferrulectl --json ipam show")]
    Show(IpamShowArgs),

    /// The pods' addresses: namespace, pod, container, interface, IP, ENI.
    #[command(long_about = "\
List the addresses ferrule-ipamd has given to pods: the pod's namespace and name, the
container (sandbox) ID and interface the CNI plugin asked for, the address and the ENI
it belongs to (a pod on a secondary ENI leaves the node through that ENI).

Example:
  ferrulectl ipam pods")]
    Pods(IpamArgs),
}

/// Where ferrule-ipamd listens.
#[derive(Debug, Args)]
pub struct IpamArgs {
    /// ferrule-ipamd's socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_IPAM_SOCKET, env = "FERRULE_IPAMD_SOCKET")]
    pub ipamd_socket: PathBuf,
}

/// Arguments of `ipam show`.
#[derive(Debug, Args)]
pub struct IpamShowArgs {
    #[command(flatten)]
    pub ipamd: IpamArgs,
    /// List every address with its state.
    #[arg(long, short)]
    pub verbose: bool,
}

/// Runs an `ipam` subcommand.
pub fn run(ctx: &mut Ctx<'_>, command: &IpamCommand) -> Result<(), CtlError> {
    let (socket, verbose, pods) = match command {
        IpamCommand::Show(a) => (&a.ipamd.ipamd_socket, a.verbose, false),
        IpamCommand::Pods(a) => (&a.ipamd_socket, false, true),
    };
    let mut client = Client::connect(socket)?;
    client.set_read_timeout(ctx.timeout)?;
    if ctx.json {
        let value = client.call(ipam_method::SHOW, Value::Null)?;
        return ctx.print_json(&value);
    }
    let state: IpamState = client.call_typed(ipam_method::SHOW, Value::Null)?;
    ctx.print(&if pods {
        render_pods(&state)
    } else {
        render_show(&state, verbose)
    })
}

fn count(ips: &[ferrule_api::ipam::IpamIp], state: IpState) -> usize {
    ips.iter().filter(|i| i.state == state).count()
}

/// Human output of `ipam show`.
pub fn render_show(s: &IpamState, verbose: bool) -> String {
    let c = &s.settings;
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let mut out = format!(
        "instance {} ({}), cluster {}, subnet {}\n\
         thresholds: {} (WARM_ENI_TARGET {}, WARM_IP_TARGET {}, MINIMUM_IP_TARGET {}); \
         cooling {} s\n\
         limits: {} ENIs × {} IPv4 addresses; max pod IPs {}\n\
         addresses: {} total, {} allocated, {} available, {} cooling\n\n",
        c.instance_id,
        c.instance_type,
        c.cluster,
        c.subnet_id,
        c.mode,
        c.warm_eni_target,
        opt(c.warm_ip_target),
        opt(c.minimum_ip_target),
        c.cooling_secs,
        c.max_enis,
        c.ips_per_eni,
        s.max_pod_ips,
        s.total,
        s.allocated,
        s.available,
        s.cooling,
    );
    let mut t = Table::new([
        "ENI",
        "DEVICE",
        "MAC",
        "SUBNET",
        "PRIMARY IP",
        "ALLOCATED",
        "AVAILABLE",
        "COOLING",
    ]);
    for e in &s.enis {
        t.row([
            e.id.clone(),
            e.device_index.to_string(),
            e.mac.clone(),
            e.subnet_cidr.clone(),
            e.primary_ip.clone(),
            count(&e.ips, IpState::Assigned).to_string(),
            count(&e.ips, IpState::Available).to_string(),
            count(&e.ips, IpState::Cooling).to_string(),
        ]);
    }
    out.push_str(&t.to_string());
    if verbose {
        let mut t = Table::new(["ENI", "IP", "STATE", "POD", "COOLING LEFT(s)"]);
        for e in &s.enis {
            for ip in &e.ips {
                let pod = s
                    .allocations
                    .iter()
                    .find(|a| a.ip == ip.ip)
                    .map_or("-".to_string(), |a| {
                        format!("{}/{}", a.pod_namespace, a.pod_name)
                    });
                t.row([
                    e.id.clone(),
                    ip.ip.clone(),
                    state_name(ip.state).to_string(),
                    pod,
                    ip.cooling_ms_left
                        .map_or("-".to_string(), |ms| format!("{:.1}", ms as f64 / 1000.0)),
                ]);
            }
        }
        out.push('\n');
        out.push_str(&t.to_string());
    }
    out
}

fn state_name(s: IpState) -> &'static str {
    match s {
        IpState::Available => "available",
        IpState::Assigned => "assigned",
        IpState::Cooling => "cooling",
    }
}

/// Human output of `ipam pods`.
pub fn render_pods(s: &IpamState) -> String {
    let mut t = Table::new(["NAMESPACE", "POD", "CONTAINER", "IFNAME", "IP", "ENI"]);
    for a in &s.allocations {
        t.row([
            a.pod_namespace.clone(),
            a.pod_name.clone(),
            a.container_id.chars().take(12).collect::<String>(),
            a.ifname.clone(),
            a.ip.clone(),
            a.eni_id.clone(),
        ]);
    }
    if t.is_empty() {
        return "no pod holds an address\n".into();
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrule_api::ipam::{IpamAllocation, IpamEni, IpamIp, IpamSettings};

    fn state() -> IpamState {
        IpamState {
            allocated: 1,
            available: 1,
            cooling: 1,
            total: 3,
            max_pod_ips: 15,
            blocked: None,
            allocations: vec![IpamAllocation {
                pod_namespace: "default".into(),
                pod_name: "web-1".into(),
                container_id: "0123456789abcdef0123".into(),
                ifname: "eth0".into(),
                ip: "10.0.1.21".into(),
                eni_id: "eni-0b".into(),
            }],
            enis: vec![IpamEni {
                id: "eni-0b".into(),
                mac: "02:00:00:00:00:0b".into(),
                device_index: 1,
                subnet_cidr: "10.0.0.0/20".into(),
                primary_ip: "10.0.1.20".into(),
                ips: vec![
                    IpamIp {
                        ip: "10.0.1.21".into(),
                        state: IpState::Assigned,
                        cooling_ms_left: None,
                    },
                    IpamIp {
                        ip: "10.0.1.22".into(),
                        state: IpState::Cooling,
                        cooling_ms_left: Some(12_500),
                    },
                    IpamIp {
                        ip: "10.0.1.23".into(),
                        state: IpState::Available,
                        cooling_ms_left: None,
                    },
                ],
            }],
            settings: IpamSettings {
                instance_id: "i-0a".into(),
                instance_type: "t3.medium".into(),
                mode: "eni".into(),
                warm_eni_target: 1,
                max_enis: 3,
                ips_per_eni: 6,
                cooling_secs: 30,
                ..IpamSettings::default()
            },
        }
    }

    #[test]
    fn show_counts_each_enis_addresses_by_state() {
        let text = render_show(&state(), false);
        assert!(
            text.contains("3 total, 1 allocated, 1 available, 1 cooling"),
            "{text}"
        );
        assert!(
            text.contains("3 ENIs × 6 IPv4 addresses; max pod IPs 15"),
            "{text}"
        );
        let row = text.lines().find(|l| l.starts_with("eni-0b")).expect("row");
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[cells.len() - 3..], ["1", "1", "1"], "{row}");
        let verbose = render_show(&state(), true);
        assert!(verbose.contains("default/web-1"), "{verbose}");
        assert!(verbose.contains("12.5"), "{verbose}");
    }

    #[test]
    fn pods_lists_each_allocation() {
        let text = render_pods(&state());
        assert!(text.contains("web-1") && text.contains("10.0.1.21") && text.contains("eni-0b"));
        assert!(
            text.contains("0123456789ab") && !text.contains("0123456789abc"),
            "{text}"
        );
        let empty = IpamState::default();
        assert_eq!(render_pods(&empty), "no pod holds an address\n");
    }
}
