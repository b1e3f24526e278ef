//! Checks that a clone of an LPM table advises a dense tbl24 onto transparent huge pages
//! and leaves a sparse one on the pages it wrote, dirtying no more of them than the
//! inserts did. (Its own test binary: mappings and the resident set are per process, and
//! another test's allocations would move them.)

#![cfg(feature = "dpdk")]

#[path = "common/process_memory.rs"]
mod process_memory;

use ferrule_dataplane::lpm::Lpm4;
use process_memory::{advised_huge_bytes, anon_huge_bytes, rss_bytes};
use std::net::Ipv4Addr;

/// The kernel's transparent huge page mode: `always`, `madvise` or `never`.
fn thp_mode() -> String {
    let modes = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .unwrap_or_else(|_| "[never]".into());
    let start = modes.find('[').map_or(0, |i| i + 1);
    let end = modes.find(']').unwrap_or(modes.len());
    modes[start..end].to_string()
}

/// Whether advising fresh memory onto huge pages shows in this process's mappings.
fn kernel_marks_advice() -> bool {
    let mut probe: Vec<u8> = Vec::with_capacity(6 << 20);
    let before = advised_huge_bytes();
    let took = ferrule_dataplane::dpdk::memory::advise_huge_pages(probe.spare_capacity_mut());
    took && advised_huge_bytes() > before
}

#[test]
fn a_clone_advises_dense_tbl24_onto_huge_pages_and_sparse_not() {
    let mode = thp_mode();
    // Sparse first (nothing advised is alive yet for khugepaged to collapse meanwhile):
    // 4,000 /24 routes spread over the address space, a 4 KiB page each.
    let prefix = |i: u32| Ipv4Addr::from(i.wrapping_mul(2_654_435_761) & 0xFFFF_FF00);
    let rss_start = rss_bytes();
    let mut sparse = Lpm4::new();
    for i in 0..4_000u32 {
        sparse.insert(prefix(i), 24, i % 64).unwrap();
    }
    let (advised, rss_built) = (advised_huge_bytes(), rss_bytes());
    let sparse_clone = sparse.clone();
    let gained = advised_huge_bytes().saturating_sub(advised);
    assert_eq!(
        gained, 0,
        "a sparse tbl24 clone was advised onto huge pages"
    );
    // In `always` mode the kernel uses huge pages for the inserts' table too.
    if mode == "madvise" {
        // The clone dirties no more memory than the inserts did (its copies must not
        // spill into the neighbouring memory pages of each written entry).
        let (built, cloned) = (rss_built - rss_start, rss_bytes() - rss_built);
        assert!(
            cloned <= built + built / 4,
            "built {built} bytes resident, the clone {cloned}"
        );
    }
    for i in 0..4_000u32 {
        let a = u32::from(prefix(i)) | 0x7F;
        assert_eq!(sparse_clone.lookup_u32(a), sparse.lookup_u32(a));
        assert_eq!(sparse_clone.lookup_u32(a), i % 64, "{}", Ipv4Addr::from(a));
    }
    drop((sparse, sparse_clone));

    // Where the kernel cannot take the advice (built without transparent huge pages, or
    // a sandbox that accepts it and does nothing), there is nothing more to check.
    if !kernel_marks_advice() {
        eprintln!("this kernel does not mark memory advised onto huge pages: dense case skipped");
        return;
    }
    // Dense: 64 /8 routes write 64 × 256 KiB of tbl24, eight whole huge pages of it.
    let mut dense = Lpm4::new();
    for i in 0..64u8 {
        dense
            .insert(Ipv4Addr::new(i + 8, 0, 0, 0), 8, u32::from(i))
            .unwrap();
    }
    let (advised, huge) = (advised_huge_bytes(), anon_huge_bytes());
    let dense_clone = dense.clone();
    let gained = advised_huge_bytes().saturating_sub(advised);
    // The chunk header misaligns the table by a few bytes: the huge pages at either end
    // of the written part may straddle unwritten memory and not be advised.
    assert!(
        gained >= 12 << 20,
        "cloning 16 MiB of dense tbl24 advised {gained} bytes onto huge pages"
    );
    // Whether the kernel found free huge pages is its business; say what it did.
    eprintln!(
        "THP {mode}: {} MiB advised, {} MiB on huge pages",
        gained >> 20,
        anon_huge_bytes().saturating_sub(huge) >> 20
    );
    for a in (8u32 << 24..72 << 24).step_by(65_537) {
        assert_eq!(dense.lookup_u32(a), dense_clone.lookup_u32(a));
        assert_eq!(dense_clone.lookup_u32(a), (a >> 24) - 8);
    }
}
