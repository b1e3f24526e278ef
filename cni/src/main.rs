//! The `ferrule` CNI plugin binary (installed as `/opt/cni/bin/ferrule`): reads the
//! call from the environment and the network configuration from stdin, prints the
//! result or a CNI error object on stdout, and exits 0 or 1.

use ferrule_cni::spec::{code, CallEnv, CniError};
use std::io::{Read, Write};
use std::process::ExitCode;

/// Largest network configuration read from stdin.
const MAX_CONF_BYTES: u64 = 1 << 20;

fn main() -> ExitCode {
    let outcome = CallEnv::from_env(|k| std::env::var(k).ok()).and_then(|env| {
        let mut stdin = Vec::new();
        if env.command != ferrule_cni::spec::Command::Version {
            std::io::stdin()
                .take(MAX_CONF_BYTES)
                .read_to_end(&mut stdin)
                .map_err(|e| {
                    CniError::new(
                        code::IO_FAILURE,
                        "cannot read the configuration",
                        e.to_string(),
                    )
                })?;
        }
        ferrule_cni::run(&env, &stdin)
    });
    let mut out = std::io::stdout().lock();
    let (text, status) = match outcome {
        Ok(None) => (None, ExitCode::SUCCESS),
        Ok(Some(v)) => (Some(v.to_string()), ExitCode::SUCCESS),
        Err(e) => (
            Some(serde_json::to_string(&e).unwrap_or_else(|_| e.msg.clone())),
            ExitCode::from(1),
        ),
    };
    if let Some(text) = text {
        let _ = writeln!(out, "{text}");
    }
    status
}
