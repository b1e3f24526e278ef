//! `ferrule-cni`: a CNI plugin (specification 1.0.0; 0.3.x and 0.4.0 configurations)
//! that gives a container a network interface on Ferrule — a veth pair whose node end is
//! a `ferruled` pod port, or a vhost-user socket for a DPDK application — with its
//! addresses from the IPAM plugin the configuration names. No DPDK in this crate.

pub mod ipam;
pub mod ipamd;
pub mod link;
pub mod plugin;
pub mod spec;

use spec::{CallEnv, CniError, Command, NetConf, SUPPORTED_VERSIONS};

/// Runs one call: `env` from the environment, `stdin` the network configuration.
/// Returns what to print on stdout (`None` for nothing) or the error object.
pub fn run(env: &CallEnv, stdin: &[u8]) -> Result<Option<serde_json::Value>, CniError> {
    if env.command == Command::Version {
        return Ok(Some(serde_json::json!({
            "cniVersion": "1.0.0",
            "supportedVersions": SUPPORTED_VERSIONS,
        })));
    }
    let conf = NetConf::parse(stdin)?;
    let version = conf.cni_version.clone();
    let outcome = match env.command {
        Command::Add => plugin::add(env, &conf, stdin)
            .map(|r| Some(serde_json::to_value(r).unwrap_or(serde_json::Value::Null))),
        Command::Del => plugin::del(env, &conf, stdin).map(|()| None),
        Command::Check => plugin::check(env, &conf, stdin).map(|()| None),
        Command::Version => Ok(None),
    };
    outcome.map_err(|e| e.in_version(&version))
}
