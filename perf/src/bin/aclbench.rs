//! `ferrule-aclbench`: ACL classifier lookup rate on ClassBench rule sets and traces,
//! read exactly as DPDK's `dpdk-test-acl` reads them, so the two run on the same files
//! and their results can be compared line by line.

use clap::{Parser, ValueEnum};
use ferrule_dataplane::acl::classbench::{self, LoadError};
use ferrule_dataplane::acl::{
    Classifier, Compiled, DecisionTreeClassifier, FlowKey, LinearClassifier, Rule,
};
use ferrule_perf::bitvector::BitVectorClassifier;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Keys classified per `classify_batch` call, as a worker classifies an rx burst.
const BURST: usize = 32;

#[derive(Parser, Debug)]
#[command(
    name = "ferrule-aclbench",
    about = "ACL classifier lookup rate on ClassBench rule sets and traces (dpdk-test-acl formats)",
    long_about = "Loads a ClassBench rule file and trace the way dpdk-test-acl does, builds the \
classifier, classifies the whole trace ITER times in bursts of 32 and reports lookups/s, \
ns/lookup, build time and memory.\n\n\
Rule lines: `@SRC/LEN DST/LEN SLO : SHI DLO : DHI PROTO/MASK`, extra columns ignored; file \
order is priority (the first rule is rule 0). Trace lines: `SRC DST SPORT DPORT PROTO` as \
integers (addresses as 32-bit numbers), extra columns ignored. Blank lines and lines starting \
with `#` are skipped.\n\n\
IPv6: an address column holding a `:` is read as IPv6, in rule files (`ADDR/LEN`) and traces \
alike, so the files `dpdk-test-acl --ipv6` reads load as they are, with no option; a file may \
also mix both families.\n\n\
With --print-results, standard output holds exactly one line per trace line, the 0-based index \
of the first matching rule or 4294967295 when none matches (the format of the shared \
*_expected files), and the report goes to standard error.\n\n\
Exit status: 0 on success, 2 on bad arguments or an unreadable or malformed rule or trace \
file (the message names the file and line).",
    after_help = "Example:\n  ferrule-aclbench --rules ../shared/data/classbench/acl1_10k \
--trace ../shared/data/classbench/acl1_10k_trace --iter 10"
)]
struct Args {
    /// ClassBench rule file.
    #[arg(long, value_name = "FILE")]
    rules: PathBuf,
    /// ClassBench trace file.
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// Times the whole trace is classified in the timed run.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    iter: u32,
    /// Print the first matching rule of every trace line on standard output.
    #[arg(long)]
    print_results: bool,
    /// Classifier to build.
    #[arg(long, value_enum, default_value_t = Algorithm::Compiled)]
    alg: Algorithm,
}

/// The classifiers the benchmark can build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Algorithm {
    /// The classifier the data path uses (`acl::Compiled`): RFC for IPv4 where its
    /// tables fit, the decision trees otherwise.
    Compiled,
    /// The decision trees alone, for both families.
    Tree,
    /// The linear reference: scans the rules in order (the correctness oracle).
    Linear,
    /// The aggregated bit vector classifier (IPv6 keys fall back to a linear scan).
    Abv,
}

impl Algorithm {
    /// Builds the classifier over `rules` (priority order).
    fn build(self, rules: Vec<Rule>) -> Box<dyn Classifier> {
        match self {
            Self::Linear => Box::new(LinearClassifier::new(rules)),
            Self::Compiled => match Compiled::new(&rules) {
                Ok(classifier) => {
                    eprintln!("ipv4 lookup:   {}", classifier.ipv4_lookup());
                    Box::new(classifier)
                }
                Err(err) => {
                    eprintln!("ferrule-aclbench: cannot build the classifier: {err}");
                    std::process::exit(2);
                }
            },
            Self::Tree => match DecisionTreeClassifier::new(&rules) {
                Ok(classifier) => Box::new(classifier),
                Err(err) => {
                    eprintln!("ferrule-aclbench: cannot build tree: {err}");
                    std::process::exit(2);
                }
            },
            Self::Abv => match BitVectorClassifier::new(&rules) {
                Ok(classifier) => Box::new(classifier),
                Err(err) => {
                    eprintln!("ferrule-aclbench: cannot build abv: {err}");
                    std::process::exit(2);
                }
            },
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("ferrule-aclbench: {err}");
            ExitCode::from(2)
        }
    }
}

/// Errors that end the run with exit status 2.
#[derive(Debug)]
enum Failure {
    Load(LoadError),
    Output(std::io::Error),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Load(err) => write!(f, "{err}"),
            Self::Output(err) => write!(f, "writing results: {err}"),
        }
    }
}

fn run(args: &Args) -> Result<(), Failure> {
    let rules = classbench::load_rules(&args.rules).map_err(Failure::Load)?;
    let trace = classbench::load_trace(&args.trace).map_err(Failure::Load)?;
    let rule_count = rules.len();

    let started = Instant::now();
    let classifier = args.alg.build(rules);
    let build_time = started.elapsed();

    let mut results = vec![0u32; trace.len()];
    let started = Instant::now();
    for _ in 0..args.iter {
        classify_trace(classifier.as_ref(), black_box(&trace), &mut results);
        black_box(&results);
    }
    let elapsed = started.elapsed();

    let report = Report {
        alg: args.alg,
        rules: rule_count,
        trace: trace.len(),
        iter: args.iter,
        build_time,
        elapsed,
        memory: classifier.memory_bytes(),
        peak_rss: peak_rss_bytes(),
    };
    if args.print_results {
        let stdout = std::io::stdout();
        let mut out = BufWriter::new(stdout.lock());
        for result in &results {
            writeln!(out, "{result}").map_err(Failure::Output)?;
        }
        out.flush().map_err(Failure::Output)?;
        eprint!("{report}");
    } else {
        print!("{report}");
    }
    Ok(())
}

/// Classifies `trace` burst by burst into `results`.
fn classify_trace(classifier: &dyn Classifier, trace: &[FlowKey], results: &mut [u32]) {
    for (keys, out) in trace.chunks(BURST).zip(results.chunks_mut(BURST)) {
        classifier.classify_batch(keys, out);
    }
}

/// The process's peak resident set (`VmHWM`), when the kernel reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What a run measured.
struct Report {
    alg: Algorithm,
    rules: usize,
    trace: usize,
    iter: u32,
    build_time: Duration,
    elapsed: Duration,
    memory: usize,
    peak_rss: Option<u64>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lookups = self.trace as f64 * f64::from(self.iter);
        let seconds = self.elapsed.as_secs_f64();
        let alg = format!("{:?}", self.alg).to_lowercase();
        writeln!(f, "classifier:    {alg}")?;
        writeln!(f, "rules:         {}", self.rules)?;
        writeln!(
            f,
            "trace:         {} keys x {} iterations",
            self.trace, self.iter
        )?;
        writeln!(
            f,
            "build time:    {:.3} ms",
            self.build_time.as_secs_f64() * 1e3
        )?;
        writeln!(f, "memory:        {} bytes (classifier)", self.memory)?;
        if let Some(rss) = self.peak_rss {
            writeln!(f, "peak RSS:      {rss} bytes (process)")?;
        }
        writeln!(f, "elapsed:       {seconds:.3} s")?;
        if lookups > 0.0 && seconds > 0.0 {
            writeln!(f, "lookups/s:     {:.0}", lookups / seconds)?;
            writeln!(f, "ns/lookup:     {:.2}", seconds * 1e9 / lookups)?;
        }
        Ok(())
    }
}
