//! `ferrulectl vpc`: set and show the node's VPC state (node IPs, VPC CIDRs, SNAT
//! exclusions and ports), and the renderer of the reply.

use super::{CtlError, Ctx};
use clap::{Args, Subcommand};
use ferrule_api::{vpc_method, VpcState, VpcSync};
use serde_json::Value;

pub const VPC_LONG_ABOUT: &str = "\
Set and show the node's VPC state: the node's primary IPv4 address(es), the VPC's CIDRs,
extra CIDRs to leave alone, and the source ports SNAT may use.

Pod traffic leaving through an uplink to an IPv4 destination outside the VPC CIDRs and
the exclusions is masqueraded to the node's primary IP (the first --node-ip), as the
AWS VPC CNI does: a connection gets a random port of the range, replies and ICMP errors
are translated back. Traffic inside the VPC keeps the pod's address. The IPAM agent
normally sets this; the [vpc] section of the configuration gives the state at start.";

/// `ferrulectl vpc` subcommands.
#[derive(Debug, Subcommand)]
pub enum VpcCommand {
    /// Replace the VPC state.
    #[command(long_about = "\
Replace the whole VPC state with the options given; what is not given is cleared
(--snat-ports returns to its default). --node-ip must be an IPv4 address Ferrule owns
on an uplink port (`addresses` in the configuration). Prints the state now in force.

Examples:
  ferrulectl vpc set --node-ip 192.0.2.10 --vpc-cidr 192.0.2.0/24 --vpc-cidr 10.1.0.0/16
  ferrulectl vpc set --node-ip 192.0.2.10 --snat-exclude 100.64.0.0/10 --snat-ports 1024-29999")]
    Set(VpcSetArgs),

    /// Show the VPC state in force.
    Show,
}

/// Arguments of `ferrulectl vpc set`.
#[derive(Debug, Args)]
pub struct VpcSetArgs {
    /// The node's primary IPv4 address; repeat for more (the first is used for SNAT).
    #[arg(long = "node-ip", value_name = "IP", required = true)]
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
                enis: Vec::new(),
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
    format!(
        "node IPs:      {}\nVPC CIDRs:     {}\nSNAT exclude:  {}\nSNAT ports:    {}\nSNAT:          {}\n",
        list(&s.node_ips),
        list(&s.vpc_cidrs),
        list(&s.snat_exclude),
        list(&s.snat_ports),
        match &s.snat_address {
            Some(a) => format!("pods masqueraded to {a} outside the VPC CIDRs and exclusions"),
            None => "off (no node IP)".into(),
        }
    )
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
    }
}
