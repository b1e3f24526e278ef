//! DPDK's own IPv4 route table (`rte_lpm`), wrapped safely: the baseline the
//! benchmarks measure Ferrule's `Lpm4` and pipeline against in the same run. The
//! benchmarks' only `unsafe` code, each block with why it is sound; the FFI
//! declarations are `ferrule-ffi`'s.

use ferrule_dataplane::dpdk::DpdkError;
use std::ffi::CString;
use std::ptr::NonNull;

/// An `rte_lpm` table. Needs the EAL; freed on drop.
#[derive(Debug)]
pub struct RteLpm(NonNull<ferrule_ffi::rte_lpm>);

// SAFETY: rte_lpm lookups are read-only and may run on any thread; updates take &mut.
unsafe impl Send for RteLpm {}
// SAFETY: as above.
unsafe impl Sync for RteLpm {}

/// The raw-entry bit `rte_lpm_lookup_bulk` sets on a hit.
pub const LOOKUP_SUCCESS: u32 = ferrule_ffi::RTE_LPM_LOOKUP_SUCCESS;

impl RteLpm {
    /// Creates a table for up to `max_rules` routes with `tbl8s` tbl8 groups.
    pub fn new(name: &str, max_rules: u32, tbl8s: u32) -> Result<RteLpm, DpdkError> {
        let cname = CString::new(name)
            .map_err(|_| DpdkError::new(format!("rte_lpm {name:?}: NUL in name"), 22))?;
        let cfg = ferrule_ffi::rte_lpm_config {
            max_rules,
            number_tbl8s: tbl8s,
            flags: 0,
        };
        // SAFETY: the EAL is running; cname and cfg are valid for the call; -1 is
        // SOCKET_ID_ANY.
        let p = unsafe { ferrule_ffi::rte_lpm_create(cname.as_ptr(), -1, &cfg) };
        NonNull::new(p)
            .map(RteLpm)
            .ok_or_else(|| DpdkError::last(format!("rte_lpm_create({name})")))
    }

    /// Adds a route; `next_hop` must fit 24 bits.
    pub fn add(&mut self, prefix: u32, len: u8, next_hop: u32) -> Result<(), DpdkError> {
        // SAFETY: the table is live and exclusively borrowed.
        let rc = unsafe { ferrule_ffi::rte_lpm_add(self.0.as_ptr(), prefix, len, next_hop) };
        if rc < 0 {
            return Err(DpdkError::new(
                format!("rte_lpm_add({prefix:#x}/{len})"),
                rc,
            ));
        }
        Ok(())
    }

    /// One lookup: the next hop, or `None` on a miss.
    #[inline]
    pub fn lookup(&self, ip: u32) -> Option<u32> {
        let mut nh = 0;
        // SAFETY: the table is live; nh is a valid out pointer.
        let rc = unsafe { ferrule_ffi::ferrule_lpm_lookup(self.0.as_ptr(), ip, &mut nh) };
        (rc == 0).then_some(nh)
    }

    /// Bulk lookup: raw entries (next hop in the low 24 bits, [`LOOKUP_SUCCESS`] set on
    /// a hit). `out` must be at least as long as `ips`.
    #[inline]
    pub fn lookup_bulk(&self, ips: &[u32], out: &mut [u32]) {
        assert!(
            out.len() >= ips.len(),
            "lookup_bulk: output shorter than input"
        );
        // SAFETY: the table is live; ips has ips.len() readable and out at least as many
        // writable u32s.
        unsafe {
            ferrule_ffi::ferrule_lpm_lookup_bulk(
                self.0.as_ptr(),
                ips.as_ptr(),
                out.as_mut_ptr(),
                ips.len() as u32,
            )
        };
    }
}

impl Drop for RteLpm {
    fn drop(&mut self) {
        // SAFETY: the table came from rte_lpm_create and is freed once.
        unsafe { ferrule_ffi::rte_lpm_free(self.0.as_ptr()) };
    }
}
