//! `ferrule-pktgen`: a DPDK traffic generator for measuring a switch — stamped UDP
//! flows out of one port, back in on others; loss, reordering, latency, and the NDR/PDR
//! search. The parts live in `ferrule_perf::pktgen`.

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use ferrule_dataplane::dpdk::{self, Eal, EalConfig};
use ferrule_perf::pktgen::flows::{AddrRange, FlowSpec, FrameWriter, PortRange, SizeMix};
use ferrule_perf::pktgen::generator::{Generator, GeneratorConf};
use ferrule_perf::pktgen::measure::Trial;
use ferrule_perf::pktgen::search::{search, Search, SearchSpec};
use ferrule_perf::pktgen::{parse_mac, parse_rate};
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum SearchKind {
    /// No-drop rate: the highest rate with no packet lost.
    Ndr,
    /// Partial-drop rate: the highest rate losing at most --loss percent.
    Pdr,
}

#[derive(Parser, Debug)]
#[command(
    name = "ferrule-pktgen",
    version,
    about = "DPDK traffic generator: stamped UDP flows through a switch; throughput, loss, latency, NDR/PDR",
    long_about = "Sends UDP frames out of one DPDK port (--tx-port) and receives them on others \
(--rx-port, by default the same port) in one polling thread on one CPU (--lcore). Every frame \
carries a stamp at the start of its UDP payload: flow number, the flow's sequence number and the \
transmit time (TSC). Whatever the switch between the ports does to the headers (MAC rewrite, TTL, \
NAT, VLAN tags), the receiver finds the stamp and counts each flow's packets: loss is what was sent \
and not received by the end of the drain time, reordering is a packet older than one already seen \
on its flow, a packet of an earlier trial arriving late is counted apart (late), latency is \
receive TSC minus transmit TSC (one clock: both ends are this process).\n\n\
Flows: the first --flows combinations of --src-port, --dst-port, --src-ip and --dst-ip (varied \
in that order, the source port fastest), one packet per flow in turn. Sizes are Ethernet frame \
sizes with the 4-byte FCS, as RFC 2544 counts them: 64 puts 60 bytes in the mbuf; imix is 64, \
594 and 1518 bytes 7:4:1.\n\n\
Modes: without --search, --trials trials of --duration seconds at --rate (or as fast as the \
port takes packets). With --search ndr|pdr, an RFC 2544 binary search: one unlimited trial gives \
the generator's ceiling, then the bracket [0, ceiling] halves until it is narrower than \
--resolution; a trial passes when loss is at most --loss and the generator sent at least 99% of \
the rate asked (a port that pushes back, like a full virtio ring, must not pass a rate by \
refusing to take it).\n\n\
Ports are DPDK devargs: virtio_user0,path=/run/ferrule/vhost/pod.sock (a vhost-user switch port; \
the EAL gets --single-file-segments for it), net_memif0,..., net_af_packet0,iface=veth0, \
net_null0, net_ring0 (a loopback), or a PCI address. Each process needs its own --file-prefix \
(default: ferrule-pktgen-PID); memory is --in-memory hugepages unless --no-huge.\n\n\
Examples:\n  ferrule-pktgen --tx-port virtio_user0,path=a.sock --rx-port virtio_user1,path=b.sock \\\n    \
--dst-mac 02:fe:00:00:00:01 --src-ip 10.1.0.4 --dst-ip 10.1.0.5 --flows 1000 --src-port 1024-65535 \\\n    \
--rate 5M --duration 10 --json\n  ferrule-pktgen ... --search ndr --duration 5 --resolution 0.5"
)]
struct Args {
    /// Transmitting port (DPDK devargs or PCI address).
    #[arg(long, value_name = "DEVARGS")]
    tx_port: String,
    /// Receiving port; repeat for several. Default: the transmitting port.
    #[arg(long, value_name = "DEVARGS")]
    rx_port: Vec<String>,
    /// Destination MAC of every frame (the switch port's or its gateway's).
    #[arg(long, value_name = "MAC", default_value = "ff:ff:ff:ff:ff:ff")]
    dst_mac: String,
    /// Source MAC. Default: the transmitting port's.
    #[arg(long, value_name = "MAC")]
    src_mac: Option<String>,
    /// Source addresses: an address, a range A-B or a prefix (IPv4 or IPv6).
    #[arg(long, value_name = "RANGE", default_value = "10.0.0.1")]
    src_ip: String,
    /// Destination addresses, as --src-ip.
    #[arg(long, value_name = "RANGE", default_value = "10.0.1.1")]
    dst_ip: String,
    /// UDP source ports: a port or a range A-B.
    #[arg(long, value_name = "RANGE", default_value = "1024")]
    src_port: String,
    /// UDP destination ports: a port or a range A-B.
    #[arg(long, value_name = "RANGE", default_value = "5001")]
    dst_port: String,
    /// Flows to cycle through (1 to 16,777,216); the ranges must hold that many.
    #[arg(long, default_value_t = 1)]
    flows: u64,
    /// Frame sizes with FCS: 64, 1518, imix, or a list sent in turn (64,1518).
    #[arg(long, default_value = "64")]
    size: String,
    /// Transmit rate in packets/s (14.2M, 500k, 250000). Default: as fast as the port
    /// takes them.
    #[arg(long)]
    rate: Option<String>,
    /// Seconds per trial.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of traffic before the first trial, not measured: the switch notices the
    /// links come up, learns flows and neighbours.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// After a trial's transmission, receive for up to this long (milliseconds) for
    /// packets still in flight; stops early after a tenth of it with nothing received.
    #[arg(long, default_value_t = 500)]
    drain_ms: u64,
    /// Trials at the fixed rate (without --search).
    #[arg(long, default_value_t = 1)]
    trials: usize,
    /// Search for the no-drop (ndr) or partial-drop (pdr) rate.
    #[arg(long, value_enum)]
    search: Option<SearchKind>,
    /// Loss allowed for --search pdr, percent of the packets sent.
    #[arg(long, default_value_t = 0.5)]
    loss: f64,
    /// The search stops when the bracket is narrower than this percent of its top.
    #[arg(long, default_value_t = 1.0)]
    resolution: f64,
    /// Trials a search may run at most.
    #[arg(long, default_value_t = 20)]
    max_trials: usize,
    /// Record the latency of one received packet in this many (1: every packet; the
    /// histogram costs about as much as the rest of the receive path).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    latency_sample: u64,
    /// Include each trial's latency CDF (nanoseconds, fraction) in the JSON.
    #[arg(long)]
    cdf: bool,
    /// Packets per transmit burst (1-256).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=256))]
    burst: u16,
    /// CPU (and DPDK lcore) the generator polls on.
    #[arg(long, default_value_t = 0)]
    lcore: u32,
    /// Memory to reserve, MiB.
    #[arg(long, default_value_t = 512)]
    memory: u32,
    /// Mbufs in the pool (all ports' rings and what is in flight must fit).
    #[arg(long, default_value_t = 32767)]
    mbufs: u32,
    /// Run without hugepages (slower; virtio_user to a vhost-user switch needs them).
    #[arg(long)]
    no_huge: bool,
    /// EAL --file-prefix. Default: ferrule-pktgen-PID.
    #[arg(long)]
    file_prefix: Option<String>,
    /// Seconds to wait for the ports' links (a vhost-user peer connecting).
    #[arg(long, default_value_t = 10.0)]
    link_timeout: f64,
    /// Print the results as JSON on standard output.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    tx_port: String,
    rx_ports: Vec<String>,
    flows: u64,
    size: String,
    mean_frame_bytes: f64,
    src_ip: String,
    dst_ip: String,
    src_port: String,
    dst_port: String,
    tsc_hz: u64,
    lcore: u32,
    dpdk: String,
    /// The unmeasured warm-up, when there was one.
    warmup: Option<Trial>,
    trials: Vec<Trial>,
    #[serde(skip_serializing_if = "Option::is_none")]
    search: Option<SearchReport>,
}

#[derive(Serialize)]
struct SearchReport {
    kind: SearchKind,
    loss_threshold_percent: f64,
    resolution_percent: f64,
    #[serde(flatten)]
    result: Search,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("ferrule-pktgen: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<()> {
    let flows = FlowSpec {
        src: args.src_ip.parse::<AddrRange>().context("--src-ip")?,
        dst: args.dst_ip.parse::<AddrRange>().context("--dst-ip")?,
        sport: args.src_port.parse::<PortRange>().context("--src-port")?,
        dport: args.dst_port.parse::<PortRange>().context("--dst-port")?,
        flows: args.flows,
    };
    flows.validate()?;
    let sizes: SizeMix = args.size.parse().context("--size")?;
    // Every size against the family's headers, before DPDK starts.
    FrameWriter::new([0; 6], [0; 6], flows.src.v6, &sizes).context("--size")?;
    let rate = args
        .rate
        .as_deref()
        .map(parse_rate)
        .transpose()
        .context("--rate")?;
    if !(args.duration > 0.0 && args.duration.is_finite()) {
        bail!("--duration must be above 0 seconds");
    }
    if !(0.0..=100.0).contains(&args.loss) {
        bail!("--loss must be 0 to 100 (percent)");
    }
    if !(args.resolution > 0.0 && args.resolution < 100.0) {
        bail!("--resolution must be above 0 and below 100 (percent)");
    }
    if args.search.is_some() && rate.is_some() {
        bail!("--rate and --search exclude each other: the search chooses the rates");
    }
    let conf = GeneratorConf {
        tx_port: args.tx_port.clone(),
        rx_ports: if args.rx_port.is_empty() {
            vec![args.tx_port.clone()]
        } else {
            args.rx_port.clone()
        },
        src_mac: args
            .src_mac
            .as_deref()
            .map(parse_mac)
            .transpose()
            .context("--src-mac")?,
        dst_mac: parse_mac(&args.dst_mac).context("--dst-mac")?,
        flows,
        sizes,
        burst: args.burst,
        mbufs: args.mbufs,
        latency_sample: args.latency_sample,
    };

    let prefix = args
        .file_prefix
        .clone()
        .unwrap_or_else(|| format!("ferrule-pktgen-{}", std::process::id()));
    let mut ports: Vec<&String> = vec![&conf.tx_port];
    ports.extend(&conf.rx_ports);
    let eal_conf = EalConfig {
        lcores: vec![args.lcore],
        memory_mb: args.memory,
        hugepages: !args.no_huge,
        in_memory: true,
        file_prefix: prefix.clone(),
        pci_allow: ports
            .iter()
            .filter(|d| dpdk::ethdev::is_pci_address(d))
            .map(|d| d.to_string())
            .collect(),
        log_level: "error".into(),
        // virtio_user shares memory with its vhost-user peer by file descriptor: one
        // per memory segment list, which this keeps few.
        extra_args: if args.no_huge {
            Vec::new()
        } else {
            vec!["--single-file-segments".into()]
        },
        ..EalConfig::default()
    };
    let eal = Eal::init(&eal_conf, "ferrule-pktgen").context("starting DPDK's EAL")?;
    let result = measure(args, &conf, rate);
    drop(eal);
    // --in-memory still makes the EAL's runtime directory; the prefix is ours.
    let _ = std::fs::remove_dir_all(std::path::Path::new("/run/dpdk").join(&prefix));
    let report = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

fn measure(args: &Args, conf: &GeneratorConf, rate: Option<f64>) -> Result<Report> {
    let mut gen = Generator::new(conf)?;
    if !gen.wait_links(Duration::from_secs_f64(args.link_timeout)) {
        bail!(
            "a port's link is still down after {} s (is the switch's vhost-user port there?)",
            args.link_timeout
        );
    }
    let drain = Duration::from_millis(args.drain_ms);
    let human = !args.json;
    let mut warmup = None;
    if args.warmup > 0.0 {
        let w = gen.trial(rate, args.warmup, drain, false);
        if human {
            println!("warm-up: {}", line(&w));
        }
        warmup = Some(w);
    }
    let mut trials = Vec::new();
    let mut search_report = None;
    match args.search {
        None => {
            for i in 0..args.trials {
                let t = gen.trial(rate, args.duration, drain, args.cdf);
                if human {
                    println!("trial {}: {}", i + 1, line(&t));
                }
                trials.push(t);
            }
        }
        Some(kind) => {
            let spec = SearchSpec {
                loss_threshold: match kind {
                    SearchKind::Ndr => 0.0,
                    SearchKind::Pdr => args.loss / 100.0,
                },
                resolution: args.resolution / 100.0,
                max_trials: args.max_trials.max(1),
                ..SearchSpec::default()
            };
            let result = search(&spec, |r| -> Result<Trial, std::convert::Infallible> {
                let t = gen.trial(r, args.duration, drain, args.cdf);
                if human {
                    println!("search trial: {}", line(&t));
                }
                trials.push(t.clone());
                Ok(t)
            })
            .unwrap_or_else(|e| match e {});
            if human {
                println!(
                    "{}: {:.3} Mpps{} (generator ceiling {:.3} Mpps, {} trials)",
                    match kind {
                        SearchKind::Ndr => "NDR".to_string(),
                        SearchKind::Pdr => format!("PDR ({}% loss)", args.loss),
                    },
                    result.rate_pps / 1e6,
                    if result.generator_limited {
                        " — the generator's limit: the device kept up"
                    } else {
                        ""
                    },
                    result.ceiling_pps / 1e6,
                    result.steps.len()
                );
            }
            search_report = Some(SearchReport {
                kind,
                loss_threshold_percent: spec.loss_threshold * 100.0,
                resolution_percent: args.resolution,
                result,
            });
        }
    }
    Ok(Report {
        tx_port: conf.tx_port.clone(),
        rx_ports: conf.rx_ports.clone(),
        flows: conf.flows.flows,
        size: conf.sizes.name.clone(),
        mean_frame_bytes: conf.sizes.mean(),
        src_ip: args.src_ip.clone(),
        dst_ip: args.dst_ip.clone(),
        src_port: args.src_port.clone(),
        dst_port: args.dst_port.clone(),
        tsc_hz: dpdk::tsc_hz(),
        lcore: args.lcore,
        dpdk: dpdk::version(),
        warmup,
        trials,
        search: search_report,
    })
}

/// One line a person reads.
fn line(t: &Trial) -> String {
    let target = t
        .target_pps
        .map(|r| format!("{:.3} Mpps", r / 1e6))
        .unwrap_or_else(|| "unlimited".into());
    let lat = t
        .latency
        .map(|l| {
            format!(
                ", latency p50 {:.1} µs p99 {:.1} µs max {:.1} µs",
                l.p50_ns / 1e3,
                l.p99_ns / 1e3,
                l.max_ns / 1e3
            )
        })
        .unwrap_or_default();
    format!(
        "target {target}, sent {} ({:.3} Mpps), received {} ({:.3} Mpps, {:.2} Gbit/s), lost {} ({:.4}%), reordered {}, late {}, foreign {}{lat}",
        t.tx_packets,
        t.tx_pps / 1e6,
        t.rx_packets,
        t.rx_pps / 1e6,
        t.rx_gbps,
        t.lost,
        t.loss_ratio * 100.0,
        t.reordered,
        t.late,
        t.foreign,
    )
}
