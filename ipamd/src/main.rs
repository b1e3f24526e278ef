//! The `ferrule-ipamd` binary: parses the command line, sets up logging, and runs the
//! daemon until SIGTERM or SIGINT.

use clap::Parser;
use ferrule_ipamd::Args;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let settings = match args.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ferrule-ipamd: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if args.check {
        println!("ferrule-ipamd: settings are valid");
        println!("{settings:#?}");
        return std::process::ExitCode::SUCCESS;
    }
    // Files and sockets the daemon creates are its own only.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ferrule-ipamd: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let socket = settings.socket.clone();
    let result = runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = ferrule_ipamd::run(settings) => r,
            _ = tokio::signal::ctrl_c() => Ok(()),
            _ = term.recv() => Ok(()),
        }
    });
    let _ = std::fs::remove_file(&socket);
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrule-ipamd: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
