//! `ferrule-xconnect-bench`: ferruled's static cross-connect forwarding rate between
//! two virtual ports against `dpdk-testpmd --forward-mode=io` on the same kind of
//! ports, one forwarding core each, run alternately in the same session.

use anyhow::{bail, Context, Result};
use clap::Parser;
use ferrule_api::client::Client;
use ferrule_api::{method, Stats};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "ferrule-xconnect-bench",
    about = "Cross-connect forwarding rate: ferruled vs dpdk-testpmd io mode on net_null ports",
    long_about = "Runs ferruled (two net_null ports cross-connected, one worker lcore) and \
dpdk-testpmd --forward-mode=io (the same two net_null ports, one forwarding lcore) one after \
the other, ROUNDS times each, interleaved, and reports the median forwarding rate of each in \
Mpps (both directions summed) and their ratio. net_null receives an endless stream of frames \
and frees what it transmits, so the figure is the per-packet cost of the poll loop itself."
)]
struct Args {
    /// Measured seconds per run (after the warm-up).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Warm-up seconds per run, not measured.
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// Runs of each contender.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Frame size net_null generates.
    #[arg(long, default_value_t = 64)]
    frame_size: u32,
    /// Burst size for both.
    #[arg(long, default_value_t = 32)]
    burst: u16,
    /// ferruled binary (default: next to this binary).
    #[arg(long)]
    ferruled: Option<PathBuf>,
    /// testpmd binary.
    #[arg(long, default_value = "dpdk-testpmd")]
    testpmd: PathBuf,
    /// Use --no-huge for both.
    #[arg(long)]
    no_huge: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.0.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

fn eal_common(prefix: &str, no_huge: bool) -> Vec<String> {
    let mut a: Vec<String> = [
        "-l",
        "0,1",
        "--main-lcore",
        "0",
        "-m",
        "256",
        "--no-pci",
        "--no-telemetry",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push("--file-prefix".into());
    a.push(prefix.into());
    // The EAL refuses --in-memory without hugepages; --no-shconf keeps files away then.
    a.push(if no_huge { "--no-huge" } else { "--in-memory" }.into());
    if no_huge {
        a.push("--no-shconf".into());
    }
    a
}

/// testpmd io forwarding; returns Mpps (sum of both ports' Tx-pps, averaged).
fn run_testpmd(args: &Args, round: usize) -> Result<f64> {
    let prefix = format!("ferrule-bench-testpmd-{}-{round}", std::process::id());
    let mut cmd = Command::new(&args.testpmd);
    cmd.args(eal_common(&prefix, args.no_huge))
        .args(["--log-level", "error"])
        .arg(format!("--vdev=net_null0,size={}", args.frame_size))
        .arg(format!("--vdev=net_null1,size={}", args.frame_size))
        .args([
            "--",
            "--forward-mode=io",
            "--auto-start",
            "--stats-period",
            "1",
            "--nb-cores=1",
        ])
        .arg(format!("--burst={}", args.burst))
        .args(["--rxq=1", "--txq=1", "--nb-ports=2", "--no-lsc-interrupt"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = Guard(
        cmd.spawn()
            .with_context(|| format!("start {}", args.testpmd.display()))?,
    );
    let stdout = child.0.stdout.take().context("testpmd stdout")?;
    let mut periods: Vec<f64> = Vec::new();
    let mut current = 0.0;
    let mut ports_seen = 0;
    let want = (args.warmup + args.seconds) as usize;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if let Some(rest) = line.trim().strip_prefix("Tx-pps:") {
            let pps: f64 = rest
                .split_whitespace()
                .next()
                .unwrap_or("0")
                .parse()
                .unwrap_or(0.0);
            current += pps;
            ports_seen += 1;
            if ports_seen == 2 {
                periods.push(current);
                current = 0.0;
                ports_seen = 0;
                if periods.len() > want {
                    break;
                }
            }
        }
    }
    drop(child);
    // The EAL leaves an (empty) runtime directory; this prefix is ours alone.
    let _ = std::fs::remove_dir_all(Path::new("/run/dpdk").join(&prefix));
    // The first period after start is partial; skip warm-up periods plus that one.
    let measured: Vec<f64> = periods
        .iter()
        .skip(args.warmup as usize + 1)
        .copied()
        .collect();
    if measured.is_empty() {
        bail!("testpmd printed no statistics");
    }
    Ok(measured.iter().sum::<f64>() / measured.len() as f64 / 1e6)
}

fn ferruled_path(args: &Args) -> Result<PathBuf> {
    if let Some(p) = &args.ferruled {
        return Ok(p.clone());
    }
    let exe = std::env::current_exe()?;
    let p = exe
        .parent()
        .map(|d| d.join("ferruled"))
        .context("binary directory")?;
    if !p.exists() {
        bail!(
            "{} not found: build it (cargo build --release) or pass --ferruled",
            p.display()
        );
    }
    Ok(p)
}

fn stats(client: &mut Client) -> Result<Stats> {
    Ok(client.call_typed(method::STATS_GET, serde_json::Value::Null)?)
}

/// ferruled cross-connect; returns Mpps (both directions).
fn run_ferruled(args: &Args, round: usize, dir: &Path) -> Result<f64> {
    let prefix = format!("ferrule-bench-ferruled-{}-{round}", std::process::id());
    let cfg = format!(
        "[eal]\nlcores = [0, 1]\nmemory_mb = 256\nhugepages = {}\nfile_prefix = \"{prefix}\"\nlog_level = \"error\"\n\
         [dataplane]\nburst_size = {}\n[log]\nlevel = \"warn\"\n\
         [[port]]\nname = \"a\"\ndevargs = \"net_null0,size={fs}\"\nrole = \"pod\"\nxconnect = \"b\"\n\
         [[port]]\nname = \"b\"\ndevargs = \"net_null1,size={fs}\"\nrole = \"uplink\"\nxconnect = \"a\"\n",
        !args.no_huge,
        args.burst,
        fs = args.frame_size
    );
    let cfg_path = dir.join(format!("bench-{round}.toml"));
    let socket = dir.join(format!("bench-{round}.sock"));
    std::fs::write(&cfg_path, cfg)?;
    let child = Command::new(ferruled_path(args)?)
        .arg("--config")
        .arg(&cfg_path)
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("start ferruled")?;
    let _guard = Guard(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut client = loop {
        match Client::connect(&socket) {
            Ok(c) => break c,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => bail!("ferruled did not come up: {e}"),
        }
    };
    std::thread::sleep(Duration::from_secs(args.warmup));
    let a = stats(&mut client)?;
    std::thread::sleep(Duration::from_secs(args.seconds));
    let b = stats(&mut client)?;
    let dt = b.uptime_secs - a.uptime_secs;
    let dtx = b.totals.tx_packets.saturating_sub(a.totals.tx_packets);
    if dt <= 0.0 {
        bail!("ferruled uptime did not advance");
    }
    Ok(dtx as f64 / dt / 1e6)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.rounds == 0 || args.seconds == 0 {
        bail!("--rounds and --seconds must be at least 1");
    }
    let dir = std::env::temp_dir().join(format!("ferrule-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut testpmd = Vec::new();
    let mut ferruled = Vec::new();
    for round in 0..args.rounds {
        let t = run_testpmd(&args, round)?;
        let f = run_ferruled(&args, round, &dir)?;
        eprintln!(
            "round {}: testpmd {t:.2} Mpps, ferruled {f:.2} Mpps ({:.1}%)",
            round + 1,
            100.0 * f / t
        );
        testpmd.push(t);
        ferruled.push(f);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (t, f) = (median(&mut testpmd.clone()), median(&mut ferruled.clone()));
    let ratio = f / t;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "frame_size": args.frame_size, "burst": args.burst, "seconds": args.seconds,
                "rounds": args.rounds, "testpmd_mpps": testpmd, "ferruled_mpps": ferruled,
                "testpmd_median_mpps": t, "ferruled_median_mpps": f, "ratio": ratio,
            })
        );
    } else {
        println!(
            "frame {} B, burst {}, {} rounds x {} s",
            args.frame_size, args.burst, args.rounds, args.seconds
        );
        println!("testpmd io   median {t:8.2} Mpps  runs {testpmd:.2?}");
        println!("ferruled     median {f:8.2} Mpps  runs {ferruled:.2?}");
        println!(
            "ratio ferruled/testpmd = {:.3} ({:.1}%)",
            ratio,
            100.0 * ratio
        );
    }
    Ok(())
}
