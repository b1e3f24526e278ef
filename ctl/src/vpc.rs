//! `ferrulectl vpc`: set and show the node's VPC state (node IPs, VPC CIDRs, SNAT
//! exclusions and ports, the node's ENIs), and the renderer of the reply.

use super::{CtlError, Ctx};
use clap::{Args, Subcommand};
use ferrule_api::{vpc_method, VpcEni, VpcState, VpcSync};
use serde_json::Value;

pub const VPC_LONG_ABOUT: &str = "\
Set and show the node's VPC state: the node's primary IPv4 address(es), the VPC's CIDRs,
extra CIDRs to leave alone, and the source ports SNAT may use.

Pod traffic leaving through an uplink to an IPv4 destination outside the VPC CIDRs and
the exclusions is masqueraded to the node's primary IP (the first --node-ip), as the
AWS VPC CNI does: a connection gets a random port of the range, replies and ICMP errors
are translated back. Traffic inside the VPC keeps the pod's address. The IPAM agent
(ferrule-ipamd) normally sets this, with the node's ENIs; the [vpc] section of the
configuration gives the state at start.

Each ENI is an uplink port. A pod whose address is a secondary IP of a secondary ENI
(device index k > 0) leaves through that ENI's port and its subnet gateway (table
eni-k) when its traffic leaves the node unmasqueraded; traffic to pods and traffic
masqueraded to the node IP keep the main table (the primary ENI), because EC2 drops a
packet whose source is not an address of the ENI it leaves by.";

/// `ferrulectl vpc` subcommands.
#[derive(Debug, Subcommand)]
pub enum VpcCommand {
    /// Replace the VPC state.
    #[command(long_about = "\
Replace the whole VPC state with the options given; what is not given is cleared
(--snat-ports returns to its default, no --enis removes the ENIs). --node-ip must be an
IPv4 address Ferrule owns on an uplink port (`addresses` in the configuration, or an
ENI's primary IP). --enis FILE reads the node's ENIs, a JSON array of objects with
id, mac, device_index, subnet_cidr, gateway, primary_ip, secondary_ips and optionally
port (absent: the uplink port with the ENI's MAC); without --node-ip the node IP is
then the primary ENI's primary IP. Nothing changes unless all of it is valid. Prints
the state now in force.

Examples:
  ferrulectl vpc set --node-ip 192.0.2.10 --vpc-cidr 192.0.2.0/24 --vpc-cidr 10.1.0.0/16
  ferrulectl vpc set --node-ip 192.0.2.10 --snat-exclude 100.64.0.0/10 --snat-ports 1024-29999
  ferrulectl vpc set --vpc-cidr 10.0.0.0/16 --enis enis.json")]
    Set(VpcSetArgs),

    /// Show the VPC state in force.
    Show,
}

/// Arguments of `ferrulectl vpc set`.
#[derive(Debug, Args)]
pub struct VpcSetArgs {
    /// The node's primary IPv4 address; repeat for more (the first is used for SNAT).
    /// Required unless --enis gives a primary ENI.
    #[arg(long = "node-ip", value_name = "IP", required_unless_present = "enis")]
    pub node_ip: Vec<String>,

    /// An IPv4 CIDR of the VPC (not masqueraded); repeat for more.
    #[arg(long = "vpc-cidr", value_name = "CIDR")]
    pub vpc_cidr: Vec<String>,

    /// An extra IPv4 CIDR not to masquerade to; repeat for more.
    #[arg(long = "snat-exclude", value_name = "CIDR")]
    pub snat_exclude: Vec<String>,

    /// SNAT source ports, LO-HI [default: 1024-65535]; 30000-32767 is never used.
    #[arg(long = "snat-ports", value_name = "LO-HI")]
    pub snat_ports: Option<String>,

    /// The node's ENIs: a JSON file holding an array of ENI objects (`-`: standard
    /// input).
    #[arg(long = "enis", value_name = "FILE")]
    pub enis: Option<std::path::PathBuf>,
}

/// Reads the `--enis` file: a JSON array of ENIs.
fn read_enis(path: &std::path::Path) -> Result<Vec<VpcEni>, CtlError> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| CtlError::Usage(format!("--enis {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| CtlError::Usage(format!("--enis {}: {e}", path.display())))
}

/// Runs a `vpc` subcommand.
pub fn run(ctx: &mut Ctx<'_>, command: &VpcCommand) -> Result<(), CtlError> {
    match command {
        VpcCommand::Set(a) => {
            let request = VpcSync {
                node_ips: a.node_ip.clone(),
                vpc_cidrs: a.vpc_cidr.clone(),
                snat_exclude: a.snat_exclude.clone(),
                snat_ports: a.snat_ports.clone(),
                enis: match &a.enis {
                    Some(path) => read_enis(path)?,
                    None => Vec::new(),
                },
            };
            ctx.query(vpc_method::SYNC, super::params(&request)?, render_vpc)
        }
        VpcCommand::Show => ctx.query(vpc_method::SHOW, Value::Null, render_vpc),
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(", ")
    }
}

/// Human output of `vpc show` and `vpc set`.
pub fn render_vpc(s: &VpcState) -> String {
    let mut out = format!(
        "node IPs:      {}\nVPC CIDRs:     {}\nSNAT exclude:  {}\nSNAT ports:    {}\nSNAT:          {}\n",
        list(&s.node_ips),
        list(&s.vpc_cidrs),
        list(&s.snat_exclude),
        list(&s.snat_ports),
        match &s.snat_address {
            Some(a) => format!("pods masqueraded to {a} outside the VPC CIDRs and exclusions"),
            None => "off (no node IP)".into(),
        }
    );
    if !s.enis.is_empty() {
        let mut t = super::Table::new([
            "ENI",
            "DEVICE",
            "MAC",
            "SUBNET",
            "GATEWAY",
            "PRIMARY",
            "PORT",
            "TABLE",
            "SECONDARY IPS",
        ]);
        for e in &s.enis {
            t.row([
                e.eni.id.clone(),
                e.eni.device_index.to_string(),
                e.eni.mac.clone(),
                e.eni.subnet_cidr.clone(),
                e.eni.gateway.clone(),
                e.eni.primary_ip.clone(),
                e.bound_port.clone(),
                e.table.clone(),
                list(&e.eni.secondary_ips),
            ]);
        }
        out.push('\n');
        out.push_str(&t.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_on_and_off() {
        let mut s = VpcState {
            node_ips: vec!["192.0.2.10".into()],
            vpc_cidrs: vec!["192.0.2.0/24".into()],
            snat_exclude: vec![],
            snat_ports: vec!["1024-29999".into(), "32768-65535".into()],
            snat_address: Some("192.0.2.10".into()),
            enis: vec![],
        };
        let text = render_vpc(&s);
        assert!(text.contains("SNAT exclude:  -\n"), "{text}");
        assert!(text.contains("1024-29999, 32768-65535"), "{text}");
        assert!(text.contains("masqueraded to 192.0.2.10"), "{text}");
        s.snat_address = None;
        assert!(render_vpc(&s).contains("off (no node IP)"));
        assert!(!text.contains("ENI"), "{text}");
        s.enis.push(ferrule_api::VpcEniState {
            eni: VpcEni {
                id: "eni-0b1".into(),
                mac: "02:00:00:00:00:b1".into(),
                device_index: 1,
                subnet_cidr: "10.0.1.0/24".into(),
                gateway: "10.0.1.1".into(),
                primary_ip: "10.0.1.10".into(),
                secondary_ips: vec!["10.0.1.20".into(), "10.0.1.21".into()],
                port: None,
            },
            bound_port: "eth1".into(),
            table: "eni-1".into(),
        });
        let text = render_vpc(&s);
        let row = text.lines().last().unwrap_or_default();
        let cells: Vec<&str> = row.split("  ").filter(|c| !c.is_empty()).collect();
        assert_eq!(
            cells.iter().map(|c| c.trim()).collect::<Vec<_>>(),
            [
                "eni-0b1",
                "1",
                "02:00:00:00:00:b1",
                "10.0.1.0/24",
                "10.0.1.1",
                "10.0.1.10",
                "eth1",
                "eni-1",
                "10.0.1.20, 10.0.1.21"
            ],
            "{text}"
        );
    }
}
