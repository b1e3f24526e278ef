//! Checks that LPM tables holding only short routes stay small in resident memory, not
//! only in `memory_bytes()`: tbl24 is reserved as zero pages and never written.
//! (Its own test binary: resident memory is per process.)

#[path = "common/process_memory.rs"]
mod process_memory;

use ferrule_dataplane::lpm::{Lpm4, Lpm6};
use process_memory::rss_bytes;
use std::net::{Ipv4Addr, Ipv6Addr};

#[test]
fn default_route_vrfs_cost_kilobytes() {
    const VRFS: usize = 32;
    let before = rss_bytes();
    let mut tables = Vec::new();
    for i in 0..VRFS as u32 {
        let mut t4 = Lpm4::new();
        t4.insert(Ipv4Addr::UNSPECIFIED, 0, i).unwrap();
        t4.insert(Ipv4Addr::new(10, 0, 0, 0), 7, i + 1).unwrap();
        let mut t6 = Lpm6::new();
        t6.insert(Ipv6Addr::UNSPECIFIED, 0, i).unwrap();
        // Looking up reads tbl24, which maps the shared zero page, not memory of its own.
        for a in (0..1u32 << 24).step_by(4099) {
            let nh = t4.lookup_u32(a << 8);
            assert!(nh == i || nh == i + 1, "{nh}");
        }
        let c4 = t4.clone();
        let c6 = t6.clone();
        tables.push((t4, t6, c4, c6));
    }
    let grown = rss_bytes().saturating_sub(before);
    // A touched tbl24 is 64 MiB: 64 of them would be 4 GiB.
    assert!(
        grown < 32 << 20,
        "{VRFS} default-route VRFs (and clones) grew RSS by {grown} bytes"
    );
    for (t4, t6, c4, c6) in &tables {
        assert!(t4.memory_bytes() < 16 << 10);
        assert!(t6.memory_bytes() < 16 << 10);
        assert_eq!(
            t4.lookup(Ipv4Addr::new(10, 1, 1, 1)),
            c4.lookup(Ipv4Addr::new(10, 1, 1, 1))
        );
        assert_eq!(
            t6.lookup(Ipv6Addr::LOCALHOST),
            c6.lookup(Ipv6Addr::LOCALHOST)
        );
    }
}
