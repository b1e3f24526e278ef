//! The command line and environment (clap): every flag with its environment variable,
//! its validation (`--check`), and the [`Settings`] the daemon runs with.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::warm::Targets;

const ABOUT: &str = "The node's L-IPAM daemon: keeps a warm pool of ENIs and secondary IPv4 addresses over the EC2 API and hands them to pods";

const LONG_ABOUT: &str = "\
ferrule-ipamd runs on every Kubernetes node on EC2. It finds the instance, its ENIs \
and their secondary private IPv4 addresses, and keeps a warm pool of addresses ready \
for pods: below the thresholds it creates an ENI in the node's subnet with its \
security groups, attaches it at the next free device index and assigns it secondary \
addresses; above them it unassigns surplus addresses and frees ENIs that no pod uses \
(never the primary ENI). The CNI plugin asks it for a pod's address over a Unix \
socket (JSON-RPC 2.0, methods ipam.add, ipam.del, ipam.show); a released address \
cools for --cooling before it is handed out again. Which pod holds which address is \
checkpointed to --datastore and reconciled with EC2 at start. The pool's state is \
served on --introspection (GET /ip-manager, GET /metrics).

Thresholds (the AWS VPC CNI's knobs, same names and meaning):
  WARM_ENI_TARGET    keep this many ENIs' worth of free addresses (default 1).
  WARM_IP_TARGET     keep this many free addresses.
  MINIMUM_IP_TARGET  keep at least this many addresses on the node, used or not.
When WARM_IP_TARGET or MINIMUM_IP_TARGET is set (non-zero) they take precedence and \
WARM_ENI_TARGET is ignored; only the addresses they need are assigned, and surplus \
free addresses are unassigned. The node never holds more than \
min(N*M - N, the subnet's free addresses + those held), N and M being the instance \
type's ENIs and addresses per ENI (DescribeInstanceTypes, else a built-in table), N \
capped by MAX_ENI.";

const AFTER_HELP: &str = "\
ENVIRONMENT:
  WARM_ENI_TARGET, WARM_IP_TARGET, MINIMUM_IP_TARGET, MAX_ENI
        The thresholds above (a flag given on the command line wins).
  AWS_REGION, AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_EC2, AWS_ACCESS_KEY_ID,
  AWS_SECRET_ACCESS_KEY, AWS_PROFILE ...
        The AWS SDK's standard settings. Without them the region comes from the
        instance metadata service, and credentials from the instance's role.
  RUST_LOG
        Log filter (default info).

FILES:
  /var/lib/ferrule/ipamd.json   the datastore (--datastore)
  /run/ferrule/ipamd.sock       the IPAM socket (--socket, mode 0600)

IAM: the node's role needs ec2:DescribeInstances, ec2:DescribeInstanceTypes,
ec2:DescribeNetworkInterfaces, ec2:DescribeSubnets, ec2:DescribeVpcs,
ec2:CreateNetworkInterface, ec2:CreateTags, ec2:AttachNetworkInterface,
ec2:ModifyNetworkInterfaceAttribute, ec2:AssignPrivateIpAddresses,
ec2:UnassignPrivateIpAddresses, ec2:DetachNetworkInterface,
ec2:DeleteNetworkInterface (docs/ipam.md).

EXAMPLES:
  ferrule-ipamd --cluster prod-eu1
  WARM_IP_TARGET=5 MINIMUM_IP_TARGET=10 ferrule-ipamd --cluster prod-eu1 \\
      --ferruled-socket /run/ferrule/ferrule.sock
  ferrule-ipamd --cluster prod-eu1 --cooling 45s --check

EXIT STATUS:
  0 on SIGTERM/SIGINT or a passing --check; 2 on a bad flag. EC2 errors never end the
  daemon: they are logged, counted and retried.";

/// The command line.
#[derive(Debug, Clone, Parser)]
#[command(name = "ferrule-ipamd", version, about = ABOUT, long_about = LONG_ABOUT, after_long_help = AFTER_HELP)]
pub struct Args {
    /// Cluster name: ENIs the daemon creates are tagged ferrule.io/cluster=NAME, and
    /// available (unattached) ENIs with that tag are deleted at start (another
    /// instance's only once 5 minutes old).
    #[arg(
        long,
        env = "FERRULE_CLUSTER",
        default_value = "ferrule",
        value_name = "NAME"
    )]
    pub cluster: String,

    /// The EC2 instance ID of this node (default: from the instance metadata service).
    #[arg(long, env = "FERRULE_INSTANCE_ID", value_name = "ID")]
    pub instance_id: Option<String>,

    /// AWS region (default: AWS_REGION, else the instance metadata service).
    #[arg(long, env = "AWS_REGION", value_name = "REGION")]
    pub region: Option<String>,

    /// EC2 endpoint URL (default: the SDK's, from AWS_ENDPOINT_URL_EC2 or
    /// AWS_ENDPOINT_URL, else the region's).
    #[arg(long, value_name = "URL")]
    pub ec2_endpoint: Option<String>,

    /// Keep this many ENIs' worth of free addresses (ignored when WARM_IP_TARGET or
    /// MINIMUM_IP_TARGET is set).
    #[arg(long, env = "WARM_ENI_TARGET", default_value_t = 1, value_name = "N")]
    pub warm_eni_target: u32,

    /// Keep this many free addresses (takes precedence over WARM_ENI_TARGET).
    #[arg(long, env = "WARM_IP_TARGET", value_name = "N")]
    pub warm_ip_target: Option<u32>,

    /// Keep at least this many addresses on the node, assigned or not (takes
    /// precedence over WARM_ENI_TARGET).
    #[arg(long, env = "MINIMUM_IP_TARGET", value_name = "N")]
    pub minimum_ip_target: Option<u32>,

    /// Attach at most this many ENIs (the primary included), below the instance type's
    /// limit.
    #[arg(long, env = "MAX_ENI", value_name = "N")]
    pub max_eni: Option<u32>,

    /// How long a released pod address stays out of the pool (e.g. 30s, 500ms, 2m).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub cooling: Duration,

    /// How often the pool is reconciled with EC2 (it also is after each add and del).
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub reconcile_interval: Duration,

    /// Subnet of new ENIs (default: the primary ENI's).
    #[arg(long, value_name = "SUBNET_ID")]
    pub subnet_id: Option<String>,

    /// Security groups of new ENIs, comma-separated (default: the primary ENI's).
    #[arg(long, value_delimiter = ',', value_name = "SG_ID,...")]
    pub security_groups: Vec<String>,

    /// The datastore file (pod addresses, checkpointed after every change).
    #[arg(
        long,
        default_value = "/var/lib/ferrule/ipamd.json",
        value_name = "PATH"
    )]
    pub datastore: PathBuf,

    /// The IPAM socket the CNI plugin calls (created mode 0600).
    #[arg(long, default_value = ferrule_api::ipam::DEFAULT_IPAM_SOCKET, value_name = "PATH")]
    pub socket: PathBuf,

    /// Introspection and metrics HTTP address; must be a loopback address.
    #[arg(long, default_value = "127.0.0.1:61679", value_name = "ADDR:PORT")]
    pub introspection: SocketAddr,

    /// ferruled's control socket: push the ENIs (vpc.sync) after each pool change.
    #[arg(long, value_name = "PATH")]
    pub ferruled_socket: Option<PathBuf>,

    /// Attempts per EC2 call before waiting for the next reconcile.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub ec2_attempts: u32,

    /// Time limit of one EC2 call attempt.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub ec2_timeout: Duration,

    /// First retry backoff (doubles each attempt, with jitter, up to 20 s).
    #[arg(long, default_value = "200ms", value_parser = parse_duration, value_name = "DURATION")]
    pub ec2_backoff: Duration,

    /// How long to wait for EC2 to report an attachment, a detachment or new
    /// addresses before leaving it to the next reconcile.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub ec2_settle: Duration,

    /// Check the flags and environment, print the settings and exit.
    #[arg(long)]
    pub check: bool,
}

/// What the daemon runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub cluster: String,
    pub instance_id: Option<String>,
    pub region: Option<String>,
    pub ec2_endpoint: Option<String>,
    pub static_credentials: Option<(String, String)>,
    pub targets: Targets,
    pub max_eni: Option<u32>,
    pub cooling: Duration,
    pub reconcile_interval: Duration,
    pub subnet_id: Option<String>,
    pub security_groups: Vec<String>,
    pub datastore: PathBuf,
    pub socket: PathBuf,
    pub introspection: SocketAddr,
    pub ferruled_socket: Option<PathBuf>,
    pub ec2_attempts: u32,
    pub ec2_timeout: Duration,
    pub ec2_backoff: Duration,
    pub ec2_settle: Duration,
}

impl Args {
    /// The settings, or what is wrong with the flags.
    pub fn settings(&self) -> Result<Settings, String> {
        if self.cluster.is_empty()
            || self.cluster.len() > 200
            || !self
                .cluster
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:/".contains(c))
        {
            return Err(format!(
                "--cluster {:?}: 1 to 200 characters of letters, digits and -_.:/",
                self.cluster
            ));
        }
        if let Some(id) = &self.instance_id {
            if !id.starts_with("i-") {
                return Err(format!(
                    "--instance-id {id:?}: an instance ID starts with i-"
                ));
            }
        }
        if self.max_eni == Some(0) {
            return Err("--max-eni / MAX_ENI 0: the primary ENI counts, so at least 1".into());
        }
        if !self.introspection.ip().is_loopback() {
            return Err(format!(
                "--introspection {}: must be a loopback address (127.0.0.1, ::1): the \
                 introspection API has no authentication",
                self.introspection
            ));
        }
        if self.cooling > Duration::from_secs(3600) {
            return Err("--cooling: at most 1h".into());
        }
        if self.reconcile_interval < Duration::from_millis(50) {
            return Err("--reconcile-interval: at least 50ms".into());
        }
        if self.ec2_attempts == 0 {
            return Err("--ec2-attempts: at least 1".into());
        }
        if let Some(sg) = self.security_groups.iter().find(|g| !g.starts_with("sg-")) {
            return Err(format!(
                "--security-groups: {sg:?} is not a security group ID (sg-...)"
            ));
        }
        if let Some(subnet) = self
            .subnet_id
            .as_ref()
            .filter(|s| !s.starts_with("subnet-"))
        {
            return Err(format!(
                "--subnet-id {subnet:?}: not a subnet ID (subnet-...)"
            ));
        }
        Ok(Settings {
            cluster: self.cluster.clone(),
            instance_id: self.instance_id.clone(),
            region: self.region.clone().filter(|r| !r.is_empty()),
            ec2_endpoint: self.ec2_endpoint.clone(),
            static_credentials: None,
            targets: Targets {
                warm_eni: self.warm_eni_target,
                warm_ip: self.warm_ip_target,
                minimum_ip: self.minimum_ip_target,
            },
            max_eni: self.max_eni,
            cooling: self.cooling,
            reconcile_interval: self.reconcile_interval,
            subnet_id: self.subnet_id.clone(),
            security_groups: self.security_groups.clone(),
            datastore: self.datastore.clone(),
            socket: self.socket.clone(),
            introspection: self.introspection,
            ferruled_socket: self.ferruled_socket.clone(),
            ec2_attempts: self.ec2_attempts,
            ec2_timeout: self.ec2_timeout,
            ec2_backoff: self.ec2_backoff,
            ec2_settle: self.ec2_settle,
        })
    }
}

/// `30`, `30s`, `500ms`, `2m`, `1h` → a duration (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a number and a unit (ms, s, m, h), e.g. 30s"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<Settings, String> {
        let mut argv = vec!["ferrule-ipamd"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .settings()
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("3 weeks")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn validation_names_the_flag() {
        assert!(args(&["--introspection", "0.0.0.0:61679"])
            .unwrap_err()
            .contains("loopback"));
        assert!(args(&["--max-eni", "0"]).unwrap_err().contains("--max-eni"));
        assert!(args(&["--security-groups", "sg-1,web"])
            .unwrap_err()
            .contains("\"web\""));
        let s = args(&["--warm-ip-target", "5", "--minimum-ip-target", "10"]).unwrap();
        assert!(s.targets.ip_mode());
        assert_eq!(s.targets.warm_eni, 1);
    }
}
