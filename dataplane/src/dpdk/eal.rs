//! EAL start-up from Ferrule's configuration and its clean-up at exit.

use super::DpdkError;
use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicBool, Ordering};

static EAL_STARTED: AtomicBool = AtomicBool::new(false);

/// EAL settings. `args()` turns them into the argument vector `rte_eal_init` takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EalConfig {
    /// Lcores to use. The first is the main lcore (control thread); the rest run workers.
    pub lcores: Vec<u32>,
    /// The CPU each of `lcores` runs on, when not the lcore's own number (several lcores
    /// may share a CPU: `--lcores L@C,…` instead of `-l`). Empty: lcore = CPU.
    pub cpus: Vec<u32>,
    /// Memory to reserve at start-up, in MiB.
    pub memory_mb: u32,
    /// Use hugepages (`false` passes `--no-huge`: slower, but works anywhere).
    pub hugepages: bool,
    /// Keep no files in hugetlbfs or `/run/dpdk` (`--in-memory`). When false,
    /// `--huge-unlink` still removes hugepage files right after mapping them.
    pub in_memory: bool,
    /// `--file-prefix`: must be unique per DPDK process on the machine.
    pub file_prefix: String,
    /// PCI devices to allow (`-a`). Empty means `--no-pci`: no PCI device is touched.
    pub pci_allow: Vec<String>,
    /// Virtual devices to create at start-up (`--vdev`).
    pub vdevs: Vec<String>,
    /// EAL log level (`--log-level`), e.g. `notice`.
    pub log_level: String,
    /// Enable the DPDK telemetry socket.
    pub telemetry: bool,
    /// Extra arguments appended verbatim.
    pub extra_args: Vec<String>,
}

impl Default for EalConfig {
    fn default() -> Self {
        EalConfig {
            lcores: vec![0, 1],
            cpus: Vec::new(),
            memory_mb: 256,
            hugepages: true,
            in_memory: true,
            file_prefix: "ferrule".into(),
            pci_allow: Vec::new(),
            vdevs: Vec::new(),
            log_level: "notice".into(),
            telemetry: false,
            extra_args: Vec::new(),
        }
    }
}

impl EalConfig {
    /// The `rte_eal_init` argument vector, program name first.
    pub fn args(&self, program: &str) -> Vec<String> {
        let mut a = vec![program.to_string()];
        if self.cpus.len() == self.lcores.len() {
            let list: Vec<String> = self
                .lcores
                .iter()
                .zip(&self.cpus)
                .map(|(l, c)| format!("{l}@{c}"))
                .collect();
            a.push("--lcores".into());
            a.push(list.join(","));
        } else {
            let list: Vec<String> = self.lcores.iter().map(u32::to_string).collect();
            a.push("-l".into());
            a.push(list.join(","));
        }
        if let Some(main) = self.lcores.first() {
            a.push("--main-lcore".into());
            a.push(main.to_string());
        }
        a.push("-m".into());
        a.push(self.memory_mb.to_string());
        if !self.hugepages {
            // Without hugepages the EAL uses legacy memory, which --in-memory refuses;
            // --no-shconf still keeps the runtime files away.
            a.push("--no-huge".into());
            if self.in_memory {
                a.push("--no-shconf".into());
            }
        } else if self.in_memory {
            a.push("--in-memory".into());
        } else {
            a.push("--huge-unlink".into());
        }
        a.push("--file-prefix".into());
        a.push(self.file_prefix.clone());
        if self.pci_allow.is_empty() {
            a.push("--no-pci".into());
        }
        for pci in &self.pci_allow {
            a.push("-a".into());
            a.push(pci.clone());
        }
        for vdev in &self.vdevs {
            a.push("--vdev".into());
            a.push(vdev.clone());
        }
        a.push("--log-level".into());
        a.push(self.log_level.clone());
        if !self.telemetry {
            a.push("--no-telemetry".into());
        }
        a.extend(self.extra_args.iter().cloned());
        a
    }
}

/// The running EAL. There is at most one per process; dropping it calls
/// `rte_eal_cleanup`, which must come after every port, mempool and ring is gone.
#[derive(Debug)]
pub struct Eal {
    args: Vec<String>,
    runtime_dir: Option<std::path::PathBuf>,
}

impl Eal {
    /// Starts the EAL. Fails if it was already started in this process.
    pub fn init(cfg: &EalConfig, program: &str) -> Result<Eal, DpdkError> {
        Self::init_args(cfg.args(program))
    }

    /// Starts the EAL with a raw argument vector (program name first).
    pub fn init_args(args: Vec<String>) -> Result<Eal, DpdkError> {
        if EAL_STARTED.swap(true, Ordering::SeqCst) {
            return Err(DpdkError::new(
                "rte_eal_init: already started in this process",
                114,
            ));
        }
        let cargs: Vec<CString> = args
            .iter()
            .map(|s| CString::new(s.as_str()))
            .collect::<Result<_, _>>()
            .map_err(|_| DpdkError::new("rte_eal_init: an argument contains NUL", 22))?;
        // EAL may keep pointers into argv (it stores some option strings as given), so
        // the strings live for the rest of the process.
        let leaked: &'static mut [CString] = Box::leak(cargs.into_boxed_slice());
        let mut argv: Vec<*mut c_char> = leaked.iter().map(|c| c.as_ptr() as *mut c_char).collect();
        argv.push(std::ptr::null_mut());
        let argv: &'static mut [*mut c_char] = Box::leak(argv.into_boxed_slice());
        let argc = (argv.len() - 1) as i32;
        // SAFETY: argv holds argc valid NUL-terminated strings followed by NULL, all
        // leaked so they outlive the EAL; this is the only call in the process.
        let rc = unsafe { ferrule_ffi::rte_eal_init(argc, argv.as_mut_ptr()) };
        if rc < 0 {
            EAL_STARTED.store(false, Ordering::SeqCst);
            return Err(DpdkError::last(format!("rte_eal_init({})", args.join(" "))));
        }
        // SAFETY: valid after a successful init; returns a pointer to a static string.
        let dir = unsafe { ferrule_ffi::rte_eal_get_runtime_dir() };
        let runtime_dir = (!dir.is_null()).then(|| {
            // SAFETY: non-NULL, NUL-terminated, static for the life of the EAL.
            let s = unsafe { std::ffi::CStr::from_ptr(dir) };
            std::path::PathBuf::from(s.to_string_lossy().into_owned())
        });
        Ok(Eal { args, runtime_dir })
    }

    /// The arguments the EAL was started with.
    pub fn args(&self) -> &[String] {
        &self.args
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        // SAFETY: the EAL was started by this value; the caller dropped every DPDK
        // object before it (documented on the type). Workers were joined by then.
        let rc = unsafe { ferrule_ffi::rte_eal_cleanup() };
        if rc < 0 {
            tracing::warn!(rc, "rte_eal_cleanup failed");
        }
        // The EAL leaves its runtime directory (/run/dpdk/<prefix>) behind; remove it
        // when it is empty, as it is with --in-memory. A non-empty one is left alone.
        if let Some(dir) = &self.runtime_dir {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_for_virtual_ports_only_skip_pci() {
        let cfg = EalConfig {
            hugepages: false,
            ..EalConfig::default()
        };
        let a = cfg.args("ferruled");
        assert_eq!(a[0], "ferruled");
        assert!(a.windows(2).any(|w| w == ["-l", "0,1"]));
        assert!(a.windows(2).any(|w| w == ["--main-lcore", "0"]));
        assert!(a.contains(&"--no-huge".to_string()));
        assert!(a.contains(&"--no-pci".to_string()));
        assert!(a.contains(&"--no-shconf".to_string()));
        assert!(
            !a.contains(&"--in-memory".to_string()),
            "EAL refuses --in-memory with --no-huge"
        );
        assert!(a.windows(2).any(|w| w == ["--file-prefix", "ferrule"]));
    }

    #[test]
    fn lcores_on_given_cpus() {
        let cfg = EalConfig {
            lcores: vec![0, 1, 2],
            cpus: vec![0, 1, 1],
            ..EalConfig::default()
        };
        let a = cfg.args("ferruled");
        assert!(a.windows(2).any(|w| w == ["--lcores", "0@0,1@1,2@1"]));
        assert!(!a.contains(&"-l".to_string()));
        assert!(a.windows(2).any(|w| w == ["--main-lcore", "0"]));
    }

    #[test]
    fn args_allow_listed_pci() {
        let cfg = EalConfig {
            pci_allow: vec!["0000:01:00.0".into()],
            in_memory: false,
            ..EalConfig::default()
        };
        let a = cfg.args("x");
        assert!(!a.contains(&"--no-pci".to_string()));
        assert!(a.windows(2).any(|w| w == ["-a", "0000:01:00.0"]));
        assert!(a.contains(&"--huge-unlink".to_string()));
    }
}
