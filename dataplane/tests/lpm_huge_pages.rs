//! Checks that a clone of an LPM table puts a dense tbl24 on transparent huge pages and
//! leaves a sparse one on the pages it wrote, dirtying no more of them than the inserts
//! did. (Its own test binary: the huge-page count and the resident set are per process,
//! and another test's allocations would move them.)

#[path = "common/process_memory.rs"]
mod process_memory;

use ferrule_dataplane::lpm::Lpm4;
use process_memory::{anon_huge_bytes, rss_bytes};
use std::net::Ipv4Addr;

/// The kernel's transparent huge page mode: `always`, `madvise` or `never`.
fn thp_mode() -> String {
    let modes = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .unwrap_or_else(|_| "[never]".into());
    let start = modes.find('[').map_or(0, |i| i + 1);
    let end = modes.find(']').unwrap_or(modes.len());
    modes[start..end].to_string()
}

#[test]
fn a_clone_puts_dense_tbl24_on_huge_pages_and_sparse_not() {
    let mode = thp_mode();
    if mode == "never" {
        eprintln!("transparent huge pages are off on this machine: nothing to check");
        return;
    }
    // Dense: 64 /8 routes write 64 × 256 KiB of tbl24, eight whole huge pages of it.
    let mut dense = Lpm4::new();
    for i in 0..64u8 {
        dense
            .insert(Ipv4Addr::new(i + 8, 0, 0, 0), 8, u32::from(i))
            .unwrap();
    }
    let before = anon_huge_bytes();
    let dense_clone = dense.clone();
    let gained = anon_huge_bytes().saturating_sub(before);
    // The chunk header misaligns the table by a few bytes: the huge pages at either end
    // of the written part may straddle unwritten memory and stay 4 KiB.
    assert!(
        gained >= 12 << 20,
        "THP {mode}: cloning 16 MiB of dense tbl24 put {gained} bytes on huge pages"
    );
    for a in (8u32 << 24..72 << 24).step_by(65_537) {
        assert_eq!(dense.lookup_u32(a), dense_clone.lookup_u32(a));
    }
    // Sparse: 4,000 /24 routes spread over the address space, a 4 KiB page each.
    let rss_start = rss_bytes();
    let mut sparse = Lpm4::new();
    for i in 0..4_000u32 {
        sparse
            .insert(
                Ipv4Addr::from(i.wrapping_mul(2_654_435_761) & 0xFFFF_FF00),
                24,
                i % 64,
            )
            .unwrap();
    }
    let before = anon_huge_bytes();
    let rss_built = rss_bytes();
    let sparse_clone = sparse.clone();
    let gained = anon_huge_bytes().saturating_sub(before);
    // In `always` mode the kernel uses huge pages whatever the advice.
    if mode == "madvise" {
        assert_eq!(gained, 0, "a sparse tbl24 clone went onto huge pages");
        // And the clone dirties no more memory than the inserts did (its copies must
        // not spill into the neighbouring memory pages of each written entry).
        let (built, cloned) = (rss_built - rss_start, rss_bytes() - rss_built);
        assert!(
            cloned <= built + built / 4,
            "built {built} bytes resident, the clone {cloned}"
        );
    }
    assert_eq!(sparse_clone.len(), sparse.len());
}
