//! IPAM by delegation, the way the reference `bridge` and `ptp` plugins do it: the plugin
//! named in `ipam.type` is looked up in `CNI_PATH` and executed with the same
//! environment and the same network configuration on stdin; its result (any supported
//! version) gives the pod's addresses.

use crate::ipamd::{self, Ipamd};
use crate::spec::{code, CallEnv, CniError, CniResult, NetConf};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where a pod's addresses come from: a plugin executed from `CNI_PATH`, or
/// ferrule-ipamd over its socket (`ipam.type` `ferrule-ipamd`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ipam {
    Plugin(PathBuf),
    Ipamd(Ipamd),
}

impl Ipam {
    /// The configuration's IPAM, if it names one.
    pub fn from_conf(conf: &NetConf, env: &CallEnv) -> Result<Option<Ipam>, CniError> {
        match conf.ipam_type()?.as_deref() {
            None => Ok(None),
            Some(ipamd::IPAM_TYPE) => {
                let ipam = conf.ipam.as_ref().cloned().unwrap_or_default();
                Ok(Some(Ipam::Ipamd(Ipamd::from_conf(&ipam)?)))
            }
            Some(t) => Ok(Some(Ipam::Plugin(find_plugin(t, &env.path)?))),
        }
    }

    /// IPAM `ADD`: the pod's addresses.
    pub fn add(&self, env: &CallEnv, conf: &[u8]) -> Result<CniResult, CniError> {
        match self {
            Ipam::Plugin(p) => add(p, env, conf),
            Ipam::Ipamd(d) => d.add(env).map(|(_, result)| result),
        }
    }

    /// IPAM `DEL`: the addresses released (idempotent).
    pub fn del(&self, env: &CallEnv, conf: &[u8]) -> Result<(), CniError> {
        match self {
            Ipam::Plugin(p) => del(p, env, conf),
            Ipam::Ipamd(d) => d.del(env).map(drop),
        }
    }

    /// IPAM `CHECK`: the allocation of `addresses` still held.
    pub fn check(
        &self,
        env: &CallEnv,
        conf: &[u8],
        addresses: &[std::net::IpAddr],
    ) -> Result<(), CniError> {
        match self {
            Ipam::Plugin(p) => check(p, env, conf),
            Ipam::Ipamd(d) => d.check(env, addresses),
        }
    }
}

/// The executable of plugin `name` in `CNI_PATH`.
pub fn find_plugin(name: &str, path: &[PathBuf]) -> Result<PathBuf, CniError> {
    path.iter()
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            let dirs: Vec<String> = path.iter().map(|d| d.display().to_string()).collect();
            CniError::new(
                code::IPAM,
                format!("IPAM plugin {name:?} not found"),
                format!("looked in CNI_PATH: {}", dirs.join(":")),
            )
        })
}

/// Runs `plugin` for `command` (`ADD`, `DEL`, `CHECK`) with the caller's environment and
/// `conf` on stdin; returns its stdout, or its error object as a [`CniError`].
fn exec(plugin: &Path, command: &str, env: &CallEnv, conf: &[u8]) -> Result<Vec<u8>, CniError> {
    let mut child = Command::new(plugin)
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", &env.container_id)
        .env(
            "CNI_NETNS",
            env.netns
                .as_deref()
                .map(Path::as_os_str)
                .unwrap_or_default(),
        )
        .env("CNI_IFNAME", &env.ifname)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            CniError::new(
                code::IPAM,
                format!("cannot run IPAM plugin {}", plugin.display()),
                e.to_string(),
            )
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin that exits without reading its input is judged by its output.
        let _ = stdin.write_all(conf);
    }
    let out = child.wait_with_output().map_err(|e| {
        CniError::new(
            code::IPAM,
            format!("IPAM plugin {} failed", plugin.display()),
            e.to_string(),
        )
    })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    // A plugin's own error object is passed on as it is.
    if let Ok(e) = serde_json::from_slice::<CniError>(&out.stdout) {
        return Err(e);
    }
    Err(CniError::new(
        code::IPAM,
        format!("IPAM plugin {} failed ({})", plugin.display(), out.status),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    ))
}

/// Allocates the pod's addresses: IPAM `ADD`.
pub fn add(plugin: &Path, env: &CallEnv, conf: &[u8]) -> Result<CniResult, CniError> {
    let out = exec(plugin, "ADD", env, conf)?;
    let value: serde_json::Value = serde_json::from_slice(&out).map_err(|e| {
        CniError::new(
            code::IPAM,
            format!("IPAM plugin {} returned no result", plugin.display()),
            e.to_string(),
        )
    })?;
    let result = CniResult::parse(&value)?;
    if result.ips.is_empty() {
        return Err(CniError::new(
            code::IPAM,
            format!("IPAM plugin {} gave no address", plugin.display()),
            "",
        ));
    }
    Ok(result)
}

/// Releases the pod's addresses: IPAM `DEL` (idempotent in the plugins).
pub fn del(plugin: &Path, env: &CallEnv, conf: &[u8]) -> Result<(), CniError> {
    exec(plugin, "DEL", env, conf).map(drop)
}

/// Asks the IPAM plugin whether the allocation is still there: IPAM `CHECK`.
pub fn check(plugin: &Path, env: &CallEnv, conf: &[u8]) -> Result<(), CniError> {
    exec(plugin, "CHECK", env, conf).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Command as Cmd;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    fn env() -> CallEnv {
        CallEnv {
            command: Cmd::Add,
            container_id: "c1".into(),
            netns: Some("/var/run/netns/c1".into()),
            ifname: "eth0".into(),
            args: HashMap::new(),
            path: Vec::new(),
        }
    }

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn the_plugin_gets_the_environment_and_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("seen");
        let p = script(
            dir.path(),
            "fake-ipam",
            &format!(
                "cat > {s}.stdin; echo \"$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME $CNI_NETNS\" > {s}\n\
                 echo '{{\"cniVersion\":\"1.0.0\",\"ips\":[{{\"address\":\"10.1.0.9/24\"}}]}}'",
                s = seen.display()
            ),
        );
        assert_eq!(find_plugin("fake-ipam", &[dir.path().into()]).unwrap(), p);
        assert!(find_plugin("nope", &[dir.path().into()]).is_err());
        let r = add(&p, &env(), b"{\"conf\":1}").unwrap();
        assert_eq!(r.ips[0].address, "10.1.0.9/24");
        assert_eq!(
            std::fs::read_to_string(&seen).unwrap().trim(),
            "ADD c1 eth0 /var/run/netns/c1"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("seen.stdin")).unwrap(),
            "{\"conf\":1}"
        );
    }

    #[test]
    fn plugin_errors_are_passed_on() {
        let dir = tempfile::tempdir().unwrap();
        let p = script(
            dir.path(),
            "full",
            "echo '{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"no free address\"}'; exit 1",
        );
        let e = add(&p, &env(), b"{}").unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (11, "no free address"));
        let p = script(dir.path(), "crash", "echo boom >&2; exit 3");
        let e = add(&p, &env(), b"{}").unwrap_err();
        assert_eq!(e.code, code::IPAM);
        assert!(e.details.contains("boom"), "{e:?}");
        let p = script(dir.path(), "empty", "echo '{\"cniVersion\":\"1.0.0\"}'");
        assert!(add(&p, &env(), b"{}")
            .unwrap_err()
            .msg
            .contains("no address"));
    }
}
