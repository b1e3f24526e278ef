//! `ferrulectl port add|del`: attach a pod over vhost-user, or any DPDK device, to a
//! running ferruled, and detach it.

use super::{params, CtlError, Ctx};
use crate::table::Table;
use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use ferrule_api::PortsList;
use ferrule_api::{port_method, PortAdd, PortDel, PortDeleted, PortDevice, PortInfo, PortRole};

pub const PORT_LONG_ABOUT: &str = "\
Attach a port to a running ferruled, or detach one, without a restart.

A pod attaches over vhost-user (as in Calico/VPP, the userspace CNI or OVS-DPDK's
dpdkvhostuser ports): its virtio device and Ferrule share memory through a Unix socket.
In server mode (the default) Ferrule creates the socket (its directory with mode 0700)
and the pod connects; in client mode the pod serves the socket and Ferrule connects,
and reconnects whenever either side restarts. Other devices attach by kind: a kernel
interface (a pod's veth, an uplink) with --af-packet or --af-xdp, a TAP interface
Ferrule creates with --tap, a memif socket with --memif, a sink with --null, pcap files
with --rx-pcap/--tx-pcap (tests). ferruled builds the DPDK devargs itself and checks
every name and path first: sockets and files only under the directories its
configuration allows ([control] vhost_dirs, memif_dirs, pcap_dirs), never over an
existing file. Raw --devargs are refused unless [control] allow_raw_devargs is set.

The new port's receive queues go to the least busy workers, its addresses become routes
(a pod's IPs host routes to it), and it shows in `ferrulectl ports` with its link
state (up while the pod is connected), the pod, and the gateway address and MAC the pod
talks to. Traffic towards a pod that is not connected is dropped as port-down. A pod
port accepts only what the pod sends as itself, from its MAC and its addresses (and any
--allowed-address prefixes): port security, see `ferrulectl port add --help`.
Detaching a port takes it out of the workers' hands first, then unplugs it; every
buffer it held returns to the pool, its routes go, other ports are untouched.";

/// `ferrulectl port` subcommands.
#[derive(Debug, Subcommand)]
pub enum PortCommand {
    /// Attach a port.
    #[command(
        long_about = "\
Attach a port: a pod over vhost-user (--vhost-user), or a device by kind (--af-packet,
--af-xdp, --tap, --memif, --null, --rx-pcap), or raw DPDK devargs (--devargs, only when
ferruled's [control] allow_raw_devargs is set). Prints the new port as `ferrulectl
ports` shows it. A refused add changes nothing, on disk or in the daemon.

A pod port needs the pod's MAC (--mac): frames to the pod are sent to it. The pod routes
through the gateway its port shows (169.254.1.1 and fe80::1 by default), which Ferrule
answers ARP and neighbour discovery for. --ip gives the pod's addresses (host routes to
the port); for --role uplink or host, --ip gives Ferrule's own addresses with their
subnets and --mac Ferrule's MAC on the port.

Port security: a pod port forwards, answers and tracks only what the pod sends as
itself: from its MAC (--mac) and its addresses (--ip; for IPv6 also link-local
addresses, to the link only), ARP and neighbour discovery about them included.
Everything else is dropped and counted (spoofed-src-mac, spoofed-src-ip, spoofed-arp,
spoofed-nd in `ferrulectl stats`). A pod that legitimately sends from more addresses
(a VM behind vhost-user, a router pod) gets them with --allowed-address, once per
prefix (at most 64); --allowed-address 0.0.0.0/0 --allowed-address ::/0 lets it send
from any address (its MAC is still checked).

Examples:
  ferrulectl port add pod-c --vhost-user /run/ferrule/vhost/pod-c.sock \\
      --ip 10.1.0.4 --ip fd00:1::4 --mac 02:00:00:0a:01:04 --pod default/web-1
  ferrulectl port add pod-d --vhost-user /var/run/pods/d.sock --mode client --queues 2 \\
      --ip 10.1.0.5 --mac 02:00:00:0a:01:05
  ferrulectl port add pod-k --af-packet veth-k --ip 10.1.0.6 --mac 02:00:00:0a:01:06
  ferrulectl port add up1 --af-xdp ens5 --start-queue 0 --queues 2 --role uplink \\
      --ip 192.0.2.20/24
  ferrulectl port add vm1 --memif /run/ferrule/memif/vm1.sock --mode client \\
      --ip 10.1.0.7 --mac 02:00:00:0a:01:07
  ferrulectl port add vm-2 --vhost-user /run/ferrule/vhost/vm-2.sock --ip 10.1.0.8 \\
      --mac 02:00:00:0a:01:08 --allowed-address 10.8.0.0/24 --allowed-address fd00:8::/64",
        group(ArgGroup::new("device").required(true).args([
            "vhost_user", "af_packet", "af_xdp", "tap", "memif", "null", "rx_pcap", "devargs"
        ]))
    )]
    Add(Box<PortAddArgs>),

    /// Detach a port.
    #[command(long_about = "\
Detach a port: its queues stop being polled, nothing more is sent to it, its routes are
removed, then the device is unplugged and every buffer it held returns to the pool.
Ports with ACL tables attached are refused until an ACL state without them is applied.
Prints the pool's buffers in use afterwards.")]
    Del(PortDelArgs),
}

/// `--mode` of a vhost-user port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Ferrule creates the socket; the pod connects.
    Server,
    /// The pod serves the socket; Ferrule connects (and reconnects).
    Client,
}

/// `--role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    Pod,
    Uplink,
    Host,
}

/// Arguments of `ferrulectl port add`.
#[derive(Debug, Args)]
pub struct PortAddArgs {
    /// Port name (letters, digits, '-', '_', '.').
    #[arg(value_name = "NAME")]
    pub name: String,
    /// vhost-user socket of the pod (under ferruled's [control] vhost_dirs).
    #[arg(long = "vhost-user", value_name = "SOCKET_PATH")]
    pub vhost_user: Option<String>,
    /// Who creates the socket (vhost-user and memif) [default: server].
    #[arg(long, value_enum, value_name = "MODE")]
    pub mode: Option<Mode>,
    /// Queue pairs (vhost-user, af_packet, af_xdp) or receive queues [default: 1].
    #[arg(long, value_name = "N")]
    pub queues: Option<u16>,
    /// A kernel interface through an AF_PACKET socket (net_af_packet).
    #[arg(long = "af-packet", value_name = "IFACE")]
    pub af_packet: Option<String>,
    /// A kernel interface through AF_XDP (net_af_xdp).
    #[arg(long = "af-xdp", value_name = "IFACE")]
    pub af_xdp: Option<String>,
    /// First queue of the --af-xdp interface [default: 0].
    #[arg(long = "start-queue", value_name = "N")]
    pub start_queue: Option<u16>,
    /// A TAP interface Ferrule creates with this name (net_tap).
    #[arg(long, value_name = "IFACE")]
    pub tap: Option<String>,
    /// A memif socket (under ferruled's [control] memif_dirs); --mode gives its role.
    #[arg(long, value_name = "SOCKET_PATH")]
    pub memif: Option<String>,
    /// Interface id on the --memif socket [default: 0].
    #[arg(long = "memif-id", value_name = "ID")]
    pub memif_id: Option<u32>,
    /// A device that receives nothing and drops what it is sent (net_null).
    #[arg(long)]
    pub null: bool,
    /// Packets to receive, from a pcap file (under ferruled's [control] pcap_dirs).
    #[arg(long = "rx-pcap", value_name = "PATH")]
    pub rx_pcap: Option<String>,
    /// Where to write what the port sends: a new pcap file (under [control] pcap_dirs).
    #[arg(long = "tx-pcap", value_name = "PATH")]
    pub tx_pcap: Option<String>,
    /// Raw DPDK devargs (refused unless ferruled sets [control] allow_raw_devargs).
    #[arg(long, value_name = "DEVARGS")]
    pub devargs: Option<String>,
    /// Role of the port [default: pod].
    #[arg(long, value_enum, value_name = "ROLE")]
    pub role: Option<Role>,
    /// Network (VRF) [default: default].
    #[arg(long, value_name = "NET")]
    pub network: Option<String>,
    /// A pod address (ADDR or ADDR/32, ADDR/128), or for uplink and host ports one of
    /// Ferrule's addresses with its subnet (ADDR/LEN); repeat for more.
    #[arg(long = "ip", value_name = "CIDR")]
    pub ip: Vec<String>,
    /// The pod's MAC (pod ports, required), or Ferrule's MAC on the port.
    #[arg(long, value_name = "MAC")]
    pub mac: Option<String>,
    /// The Kubernetes pod behind the port.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub pod: Option<String>,
    /// MTU [default: 1500].
    #[arg(long, value_name = "BYTES")]
    pub mtu: Option<u16>,
    /// Pod ports: a prefix the pod may also send from besides its --ip addresses
    /// (ADDR/LEN with the host bits clear, or ADDR); repeat for more, at most 64.
    /// Port security drops packets from any other source; 0.0.0.0/0 and ::/0 allow
    /// every address.
    #[arg(long = "allowed-address", value_name = "CIDR")]
    pub allowed_address: Vec<String>,
}

/// Arguments of `ferrulectl port del`.
#[derive(Debug, Args)]
pub struct PortDelArgs {
    /// Port name.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// The `port.add` request of `ferrulectl port add`; an option that belongs to another
/// device kind is a usage error.
pub fn request(a: &PortAddArgs) -> Result<PortAdd, CtlError> {
    let usage = |what: &str| Err(CtlError::Usage(what.to_string()));
    if a.start_queue.is_some() && a.af_xdp.is_none() {
        return usage("--start-queue goes with --af-xdp");
    }
    if a.memif_id.is_some() && a.memif.is_none() {
        return usage("--memif-id goes with --memif");
    }
    if a.tx_pcap.is_some() && a.rx_pcap.is_none() {
        return usage("--tx-pcap goes with --rx-pcap");
    }
    if a.mode.is_some() && a.vhost_user.is_none() && a.memif.is_none() {
        return usage("--mode goes with --vhost-user or --memif");
    }
    let mode = a.mode.map(|m| match m {
        Mode::Server => "server".to_string(),
        Mode::Client => "client".to_string(),
    });
    let device = if let Some(iface) = &a.af_packet {
        Some(PortDevice::AfPacket {
            iface: iface.clone(),
        })
    } else if let Some(iface) = &a.af_xdp {
        Some(PortDevice::AfXdp {
            iface: iface.clone(),
            start_queue: a.start_queue,
        })
    } else if let Some(iface) = &a.tap {
        Some(PortDevice::Tap {
            iface: iface.clone(),
        })
    } else if let Some(socket) = &a.memif {
        Some(PortDevice::Memif {
            socket: socket.clone(),
            role: mode.clone(),
            id: a.memif_id,
        })
    } else if a.null {
        Some(PortDevice::Null)
    } else if a.rx_pcap.is_some() {
        Some(PortDevice::Pcap {
            rx_pcap: a.rx_pcap.clone(),
            tx_pcap: a.tx_pcap.clone(),
        })
    } else {
        None
    };
    Ok(PortAdd {
        name: a.name.clone(),
        vhost_user: a.vhost_user.clone(),
        // The daemon refuses a mode for anything but vhost-user; memif carries it as
        // its role.
        mode: if a.memif.is_some() { None } else { mode },
        queues: a.queues,
        device,
        devargs: a.devargs.clone(),
        role: a.role.map(|r| match r {
            Role::Pod => PortRole::Pod,
            Role::Uplink => PortRole::Uplink,
            Role::Host => PortRole::Host,
        }),
        network: a.network.clone(),
        ips: a.ip.clone(),
        mac: a.mac.clone(),
        pod: a.pod.clone(),
        mtu: a.mtu,
        allowed_addresses: a.allowed_address.clone(),
    })
}

/// Runs a `port` subcommand.
pub fn run(ctx: &mut Ctx<'_>, command: &PortCommand) -> Result<(), CtlError> {
    match command {
        PortCommand::Add(a) => {
            ctx.query(port_method::ADD, params(&request(a)?)?, |p: &PortInfo| {
                super::render_ports(&ferrule_api::PortsList {
                    ports: vec![p.clone()],
                })
            })
        }
        PortCommand::Del(a) => {
            let request = PortDel {
                name: a.name.clone(),
            };
            ctx.query(port_method::DEL, params(&request)?, |d: &PortDeleted| {
                format!("port {} deleted; {} mbufs in use\n", d.name, d.mbufs_in_use)
            })
        }
    }
}

/// `ferrulectl ports`.
pub fn render_ports(list: &PortsList) -> String {
    if list.ports.is_empty() {
        return "no ports\n".to_string();
    }
    let mut table = Table::new([
        "NAME", "ID", "ROLE", "LINK", "SPEED", "MAC", "MTU", "RXQ", "XCONNECT", "RX-PKTS",
        "RX-BYTES", "TX-PKTS", "TX-BYTES", "DROPS",
    ]);
    for port in &list.ports {
        let c = &port.counters;
        table.row([
            port.name.clone(),
            port.port_id.to_string(),
            port.role.to_string(),
            port.link.clone(),
            format_speed(port.speed_mbps),
            port.mac.clone(),
            port.mtu.to_string(),
            port.rx_queues.to_string(),
            port.xconnect.clone().unwrap_or_else(|| "-".to_string()),
            c.rx_packets.to_string(),
            c.rx_bytes.to_string(),
            c.tx_packets.to_string(),
            c.tx_bytes.to_string(),
            c.drops.to_string(),
        ]);
    }
    let mut out = table.to_string();
    let pods: Vec<&ferrule_api::PortInfo> = list
        .ports
        .iter()
        .filter(|p| {
            p.pod.is_some()
                || p.vhost_user.is_some()
                || p.gateway_ip.is_some()
                || !p.allowed_addresses.is_empty()
        })
        .collect();
    if !pods.is_empty() {
        let mut t = Table::new([
            "NAME",
            "POD",
            "NETWORK",
            "IPS",
            "GATEWAY-IP",
            "GATEWAY-MAC",
            "VHOST-USER",
            "MODE",
            "ALLOWED",
        ]);
        for p in pods {
            let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
            let allowed = if p.allowed_addresses.is_empty() {
                "-".to_string()
            } else {
                p.allowed_addresses.join(",")
            };
            let network = match (p.network.as_str(), p.locked) {
                ("", _) => "-".to_string(),
                (n, true) => format!("{n} (locked)"),
                (n, false) => n.to_string(),
            };
            t.row([
                p.name.clone(),
                dash(&p.pod),
                network,
                if p.ips.is_empty() {
                    "-".to_string()
                } else {
                    p.ips.join(",")
                },
                dash(&p.gateway_ip),
                dash(&p.gateway_mac),
                dash(&p.vhost_user),
                dash(&p.vhost_mode),
                allowed,
            ]);
        }
        out.push('\n');
        out.push_str(&t.to_string());
    }
    out
}

/// Link speed: `25G`, `2.5G`, `100M`, or `-` when unknown.
pub(crate) fn format_speed(mbps: u32) -> String {
    match mbps {
        0 => "-".to_string(),
        m if m % 1000 == 0 => format!("{}G", m / 1000),
        m if m >= 1000 => format!("{}G", f64::from(m) / 1000.0),
        m => format!("{m}M"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command};
    use clap::Parser;

    fn add(args: &[&str]) -> Result<PortAdd, String> {
        let mut argv = vec!["ferrulectl", "port", "add"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        let Command::Port {
            command: PortCommand::Add(a),
        } = cli.command
        else {
            panic!("not port add");
        };
        request(&a).map_err(|e| e.to_string())
    }

    #[test]
    fn the_issue_command_lines_parse() {
        let r = add(&[
            "pod-c",
            "--vhost-user",
            "/run/x.sock",
            "--mode",
            "client",
            "--queues",
            "2",
            "--network",
            "blue",
            "--ip",
            "10.2.0.9",
            "--ip",
            "fd00:2::9",
            "--mac",
            "02:00:00:00:00:09",
            "--pod",
            "ns/web",
        ])
        .unwrap();
        assert_eq!(r.vhost_user.as_deref(), Some("/run/x.sock"));
        assert_eq!(r.mode.as_deref(), Some("client"));
        assert_eq!((r.queues, r.ips.len()), (Some(2), 2));
        let r = add(&[
            "up1",
            "--devargs",
            "net_tap0",
            "--role",
            "uplink",
            "--ip",
            "192.0.2.20/24",
        ])
        .unwrap();
        assert_eq!(r.role, Some(PortRole::Uplink));
        assert!(r.allowed_addresses.is_empty());
        let r = add(&[
            "vm-1",
            "--vhost-user",
            "/run/vm.sock",
            "--ip",
            "10.1.0.7",
            "--mac",
            "02:00:00:0a:01:07",
            "--allowed-address",
            "10.8.0.0/24",
            "--allowed-address",
            "fd00:8::/64",
        ])
        .unwrap();
        assert_eq!(r.allowed_addresses, ["10.8.0.0/24", "fd00:8::/64"]);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["allowed_addresses"][1], "fd00:8::/64");
        let plain = serde_json::to_value(add(&["x", "--devargs", "net_tap0"]).unwrap()).unwrap();
        assert!(plain.get("allowed_addresses").is_none(), "{plain}");
        assert!(add(&["x"]).is_err(), "a device is required");
        assert!(add(&["x", "--vhost-user", "/a", "--devargs", "net_tap0"]).is_err());
        let r = add(&[
            "x",
            "--memif",
            "/run/ferrule/memif/x.sock",
            "--mode",
            "client",
        ])
        .unwrap();
        assert_eq!(
            r.device,
            Some(PortDevice::Memif {
                socket: "/run/ferrule/memif/x.sock".into(),
                role: Some("client".into()),
                id: None
            })
        );
        assert_eq!(r.mode, None);
        let r = add(&["x", "--af-xdp", "ens5", "--start-queue", "2"]).unwrap();
        assert_eq!(
            r.device,
            Some(PortDevice::AfXdp {
                iface: "ens5".into(),
                start_queue: Some(2)
            })
        );
        assert_eq!(
            add(&["x", "--null"]).unwrap().device,
            Some(PortDevice::Null)
        );
        assert!(add(&["x", "--af-packet", "a", "--tap", "b"]).is_err());
        assert!(add(&["x", "--tx-pcap", "/p/out.pcap"]).is_err());
        assert!(add(&["x", "--tap", "t", "--start-queue", "1"]).is_err());
    }
}
