//! Ethernet ports: probing from devargs (vdev string or PCI address), queue set-up,
//! start/stop, link state, MAC, MTU and the driver's own statistics.

use super::{check, DpdkError, Mempool, Ring};
use std::ffi::{CStr, CString};

/// How to set up a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConf {
    pub rx_queues: u16,
    pub tx_queues: u16,
    /// Receive descriptors per queue (adjusted to what the driver accepts).
    pub rx_desc: u16,
    /// Transmit descriptors per queue (adjusted to what the driver accepts).
    pub tx_desc: u16,
    /// MTU to set, if any. Drivers that cannot change it keep theirs (a warning).
    pub mtu: Option<u16>,
    /// MAC to set, if any.
    pub mac: Option<[u8; 6]>,
    /// Accept frames for any destination MAC (a switch port wants this).
    pub promiscuous: bool,
}

impl Default for PortConf {
    fn default() -> Self {
        PortConf {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: None,
            mac: None,
            promiscuous: true,
        }
    }
}

/// Link state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Link {
    pub up: bool,
    /// Mbit/s; 0 when unknown.
    pub speed_mbps: u32,
    pub full_duplex: bool,
}

/// The driver's counters (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EthStats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    pub rx_nombuf: u64,
}

/// An ethdev port. Dropping it stops and closes the port (and removes a hot-plugged
/// device), which must happen before its mempool is freed.
#[derive(Debug)]
pub struct EthPort {
    id: u16,
    name: String,
    started: bool,
    /// Transmit queues set up by `configure`.
    tx_queues: u16,
}

/// The device name inside devargs: everything before the first comma.
pub fn devargs_name(devargs: &str) -> &str {
    devargs.split(',').next().unwrap_or(devargs).trim()
}

/// The name DPDK gives the ethdev of these devargs: the vdev name, or the PCI address
/// with its domain (`01:00.0` → `0000:01:00.0`).
pub fn ethdev_name(devargs: &str) -> String {
    let name = devargs_name(devargs);
    if is_pci_address(name) && name.split(':').count() == 2 {
        format!("0000:{}", name.to_ascii_lowercase())
    } else if is_pci_address(name) {
        name.to_ascii_lowercase()
    } else {
        name.to_string()
    }
}

/// Whether devargs name a PCI device (`0000:01:00.0` or `01:00.0`).
pub fn is_pci_address(devargs: &str) -> bool {
    let name = devargs_name(devargs);
    let parts: Vec<&str> = name.split(':').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    let bus_dev_fn = |bus: &str, devfn: &str| {
        let mut df = devfn.split('.');
        matches!((df.next(), df.next(), df.next()), (Some(d), Some(f), None) if hex(d, 2) && hex(f, 1))
            && hex(bus, 2)
    };
    match parts.as_slice() {
        [dom, bus, devfn] => hex(dom, 4) && bus_dev_fn(bus, devfn),
        [bus, devfn] => bus_dev_fn(bus, devfn),
        _ => false,
    }
}

fn port_by_name(name: &str) -> Option<u16> {
    let cname = CString::new(name).ok()?;
    let mut id = 0u16;
    // SAFETY: cname is a valid C string; id is a valid out-pointer.
    let rc = unsafe { ferrule_ffi::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
    (rc == 0).then_some(id)
}

impl EthPort {
    /// Finds the port for `devargs`, probing (hot-plugging) the device first when it
    /// does not exist yet — the usual case for a vdev; PCI devices are probed by the
    /// EAL at start-up from its allow-list.
    pub fn probe(devargs: &str) -> Result<EthPort, DpdkError> {
        let name = ethdev_name(devargs);
        if let Some(id) = port_by_name(&name) {
            return Ok(EthPort {
                id,
                name,
                started: false,
                tx_queues: 0,
            });
        }
        let cdev = CString::new(devargs)
            .map_err(|_| DpdkError::new(format!("devargs {devargs:?} contain NUL"), 22))?;
        // SAFETY: cdev is a valid C string for the duration of the call.
        let rc = unsafe { ferrule_ffi::rte_dev_probe(cdev.as_ptr()) };
        check(|| format!("rte_dev_probe({devargs})"), rc)?;
        match port_by_name(&name) {
            Some(id) => Ok(EthPort {
                id,
                name,
                started: false,
                tx_queues: 0,
            }),
            None => Err(DpdkError::new(
                format!("rte_dev_probe({devargs}): no ethdev named {name:?} appeared"),
                19,
            )),
        }
    }

    /// Creates a port whose queues are rings (the net_ring driver): what a test uses to
    /// push frames into a worker and read what it sends.
    pub fn from_rings(name: &str, rx: &[&Ring], tx: &[&Ring]) -> Result<EthPort, DpdkError> {
        let cname = CString::new(name)
            .map_err(|_| DpdkError::new(format!("port name {name:?} contains NUL"), 22))?;
        let rxp: Vec<*mut ferrule_ffi::rte_ring> = rx.iter().map(|r| r.as_ptr()).collect();
        let txp: Vec<*mut ferrule_ffi::rte_ring> = tx.iter().map(|r| r.as_ptr()).collect();
        // SAFETY: the arrays hold rx.len()/tx.len() valid ring pointers for the call;
        // the rings outlive the port (the caller keeps them).
        let rc = unsafe {
            ferrule_ffi::rte_eth_from_rings(
                cname.as_ptr(),
                rxp.as_ptr(),
                rxp.len() as u32,
                txp.as_ptr(),
                txp.len() as u32,
                0,
            )
        };
        if rc < 0 {
            return Err(DpdkError::last(format!("rte_eth_from_rings({name})")));
        }
        Ok(EthPort {
            id: rc as u16,
            name: name.to_string(),
            started: false,
            tx_queues: 0,
        })
    }

    /// DPDK port id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Transmit queues the port was configured with.
    pub fn tx_queues(&self) -> u16 {
        self.tx_queues
    }

    /// DPDK device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets up queues, MTU and MAC. Call once, before `start`.
    pub fn configure(&mut self, conf: &PortConf, pool: &Mempool) -> Result<(), DpdkError> {
        self.tx_queues = conf.tx_queues;
        let id = self.id;
        let name = self.name.clone();
        let mut eth_conf = ferrule_ffi::rte_eth_conf::default();
        if conf.rx_queues > 1 {
            // Several receive queues: spread flows over them with RSS on every flow
            // type the device hashes.
            let mut info = ferrule_ffi::rte_eth_dev_info::default();
            // SAFETY: valid port id and out-pointer.
            let rc = unsafe { ferrule_ffi::rte_eth_dev_info_get(id, &mut info) };
            check(|| format!("rte_eth_dev_info_get({name})"), rc)?;
            if info.flow_type_rss_offloads != 0 {
                eth_conf.rxmode.mq_mode = ferrule_ffi::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
                eth_conf.rx_adv_conf.rss_conf.rss_hf = info.flow_type_rss_offloads;
            } else {
                tracing::warn!(port = %name, "driver has no RSS; its receive queues are filled by the driver's own policy");
            }
        }
        // SAFETY: eth_conf is a valid configuration, zero (default) but for RSS.
        let rc = unsafe {
            ferrule_ffi::rte_eth_dev_configure(id, conf.rx_queues, conf.tx_queues, &eth_conf)
        };
        check(
            || {
                format!(
                    "rte_eth_dev_configure({name}, {} rxq, {} txq)",
                    conf.rx_queues, conf.tx_queues
                )
            },
            rc,
        )?;
        let (mut nb_rx, mut nb_tx) = (conf.rx_desc, conf.tx_desc);
        // SAFETY: valid port id and out-pointers.
        let rc =
            unsafe { ferrule_ffi::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut nb_rx, &mut nb_tx) };
        check(|| format!("rte_eth_dev_adjust_nb_rx_tx_desc({name})"), rc)?;
        // SAFETY: plain getter on a valid port id.
        let socket = unsafe { ferrule_ffi::rte_eth_dev_socket_id(id) };
        let socket = if socket < 0 { 0 } else { socket as u32 };
        for q in 0..conf.rx_queues {
            // SAFETY: valid port/queue; NULL rx_conf means driver defaults; the pool
            // outlives the port (documented on Mempool).
            let rc = unsafe {
                ferrule_ffi::rte_eth_rx_queue_setup(
                    id,
                    q,
                    nb_rx,
                    socket,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            };
            check(|| format!("rte_eth_rx_queue_setup({name}, queue {q})"), rc)?;
        }
        for q in 0..conf.tx_queues {
            // SAFETY: valid port/queue; NULL tx_conf means driver defaults.
            let rc = unsafe {
                ferrule_ffi::rte_eth_tx_queue_setup(id, q, nb_tx, socket, std::ptr::null())
            };
            check(|| format!("rte_eth_tx_queue_setup({name}, queue {q})"), rc)?;
        }
        if let Some(mtu) = conf.mtu {
            // SAFETY: valid port id.
            let rc = unsafe { ferrule_ffi::rte_eth_dev_set_mtu(id, mtu) };
            if rc == -(libc_enotsup()) {
                tracing::warn!(port = %name, mtu, "driver cannot set the MTU; keeping its own");
            } else {
                check(|| format!("rte_eth_dev_set_mtu({name}, {mtu})"), rc)?;
            }
        }
        if let Some(mac) = conf.mac {
            let mut addr = ferrule_ffi::rte_ether_addr { addr_bytes: mac };
            // SAFETY: valid port id; addr is a valid rte_ether_addr for the call.
            let rc = unsafe { ferrule_ffi::rte_eth_dev_default_mac_addr_set(id, &mut addr) };
            if rc == -(libc_enotsup()) {
                tracing::warn!(port = %name, "driver cannot set the MAC; keeping its own");
            } else {
                check(|| format!("rte_eth_dev_default_mac_addr_set({name})"), rc)?;
            }
        }
        if conf.promiscuous {
            // SAFETY: valid port id. Drivers without the feature return -ENOTSUP, which
            // is harmless for a virtual port.
            let _ = unsafe { ferrule_ffi::rte_eth_promiscuous_enable(id) };
        }
        Ok(())
    }

    /// Starts the port.
    pub fn start(&mut self) -> Result<(), DpdkError> {
        // SAFETY: valid, configured port id.
        let rc = unsafe { ferrule_ffi::rte_eth_dev_start(self.id) };
        check(|| format!("rte_eth_dev_start({})", self.name), rc)?;
        self.started = true;
        Ok(())
    }

    /// Stops the port (no more rx/tx may be issued on it).
    pub fn stop(&mut self) -> Result<(), DpdkError> {
        if !self.started {
            return Ok(());
        }
        self.started = false;
        // SAFETY: valid port id; the workers that polled it have been joined.
        let rc = unsafe { ferrule_ffi::rte_eth_dev_stop(self.id) };
        check(|| format!("rte_eth_dev_stop({})", self.name), rc).map(|_| ())
    }

    pub fn is_started(&self) -> bool {
        self.started
    }

    /// Link state, without waiting for auto-negotiation.
    pub fn link(&self) -> Link {
        let mut link = ferrule_ffi::rte_eth_link::default();
        // SAFETY: valid port id and out-pointer.
        let rc = unsafe { ferrule_ffi::rte_eth_link_get_nowait(self.id, &mut link) };
        if rc < 0 {
            return Link::default();
        }
        Link {
            up: link.link_status() != 0,
            speed_mbps: if link.link_speed == ferrule_ffi::RTE_ETH_SPEED_NUM_UNKNOWN {
                0
            } else {
                link.link_speed
            },
            full_duplex: link.link_duplex() != 0,
        }
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        let mut addr = ferrule_ffi::rte_ether_addr::default();
        // SAFETY: valid port id and out-pointer.
        let rc = unsafe { ferrule_ffi::rte_eth_macaddr_get(self.id, &mut addr) };
        if rc < 0 {
            [0; 6]
        } else {
            addr.addr_bytes
        }
    }

    /// The port's MTU.
    pub fn mtu(&self) -> u16 {
        let mut mtu = 0u16;
        // SAFETY: valid port id and out-pointer.
        let rc = unsafe { ferrule_ffi::rte_eth_dev_get_mtu(self.id, &mut mtu) };
        if rc < 0 {
            0
        } else {
            mtu
        }
    }

    /// The driver's counters.
    pub fn stats(&self) -> EthStats {
        let mut s = ferrule_ffi::rte_eth_stats::default();
        // SAFETY: valid port id and out-pointer.
        let rc = unsafe { ferrule_ffi::rte_eth_stats_get(self.id, &mut s) };
        if rc < 0 {
            return EthStats::default();
        }
        EthStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        }
    }

    /// Most receive and transmit queues the driver offers.
    pub fn max_queues(&self) -> (u16, u16) {
        let mut info = ferrule_ffi::rte_eth_dev_info::default();
        // SAFETY: valid port id and out-pointer.
        let rc = unsafe { ferrule_ffi::rte_eth_dev_info_get(self.id, &mut info) };
        if rc < 0 {
            return (1, 1);
        }
        (info.max_rx_queues, info.max_tx_queues)
    }

    /// Name of the driver behind the port, e.g. `net_null`.
    pub fn driver(&self) -> String {
        let mut info = ferrule_ffi::rte_eth_dev_info::default();
        // SAFETY: valid port id and out-pointer.
        let rc = unsafe { ferrule_ffi::rte_eth_dev_info_get(self.id, &mut info) };
        if rc < 0 || info.driver_name.is_null() {
            return String::new();
        }
        // SAFETY: driver_name points to a static NUL-terminated string of the driver.
        unsafe { CStr::from_ptr(info.driver_name) }
            .to_string_lossy()
            .into_owned()
    }
}

fn libc_enotsup() -> i32 {
    95 // ENOTSUP on Linux
}

impl EthPort {
    /// Stops and closes the port (its queues' mbufs go back to their pool) and, for a
    /// virtual device, unplugs it: its name (and, for vhost-user, its socket) can be
    /// used again. The caller makes sure no worker polls or sends on it any more.
    pub fn detach(mut self) -> Result<(), DpdkError> {
        self.stop()?;
        let id = self.id;
        let name = std::mem::take(&mut self.name);
        // Closed below, once: Drop must not close it again.
        std::mem::forget(self);
        // SAFETY: valid port id, stopped; nothing uses it any more (the caller's
        // contract); it is closed once, here, since Drop does not run.
        let rc = unsafe { ferrule_ffi::rte_eth_dev_close(id) };
        check(|| format!("rte_eth_dev_close({name})"), rc)?;
        if is_pci_address(&name) {
            return Ok(());
        }
        let bus = CString::new("vdev").map_err(|_| DpdkError::new("bus name", 22))?;
        let dev = CString::new(name.as_str())
            .map_err(|_| DpdkError::new(format!("device name {name:?} contains NUL"), 22))?;
        // SAFETY: both are valid C strings for the call; the device's port is closed.
        let rc = unsafe { ferrule_ffi::rte_eal_hotplug_remove(bus.as_ptr(), dev.as_ptr()) };
        check(|| format!("rte_eal_hotplug_remove(vdev, {name})"), rc).map(|_| ())
    }
}

impl Drop for EthPort {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, "stopping port");
        }
        // SAFETY: valid port id, stopped; close releases its queues (returning their
        // mbufs to the pool, which the caller keeps alive until after this).
        let rc = unsafe { ferrule_ffi::rte_eth_dev_close(self.id) };
        if rc < 0 {
            tracing::warn!(port = %self.name, rc, "rte_eth_dev_close failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_are_recognised() {
        assert!(is_pci_address("0000:01:00.0"));
        assert!(is_pci_address("01:00.1"));
        assert!(is_pci_address("0000:af:1f.7,rxq_cqe_comp_en=1"));
        assert!(!is_pci_address("net_null0"));
        assert!(!is_pci_address("net_pcap0,rx_pcap=a.pcap"));
        assert!(!is_pci_address("0000:01:00"));
        assert!(!is_pci_address("zz00:01:00.0"));
    }

    #[test]
    fn ethdev_names_of_pci_ports_carry_the_domain() {
        assert_eq!(ethdev_name("01:00.1"), "0000:01:00.1");
        assert_eq!(ethdev_name("0000:AF:00.0,foo=1"), "0000:af:00.0");
        assert_eq!(ethdev_name("net_tap0,iface=x"), "net_tap0");
    }

    #[test]
    fn devargs_name_is_before_the_first_comma() {
        assert_eq!(devargs_name("net_null0,size=64"), "net_null0");
        assert_eq!(devargs_name("net_tap0"), "net_tap0");
    }
}
