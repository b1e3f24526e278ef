//! This test process's memory as the kernel counts it: what the memory tests measure
//! (each runs in a test binary of its own, since the counts are per process).

#![allow(dead_code)]

/// Resident set size of this process, in bytes.
pub fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("statm resident field");
    pages * 4096
}

/// This process's anonymous memory on transparent huge pages, in bytes.
pub fn anon_huge_bytes() -> usize {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").expect("smaps_rollup");
    let kib: usize = rollup
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("AnonHugePages line");
    kib << 10
}

/// Bytes of this process's mappings advised onto transparent huge pages
/// (`MADV_HUGEPAGE`: `hg` among their `VmFlags`), whether or not the kernel has backed
/// them with huge pages yet.
pub fn advised_huge_bytes() -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
    let (mut size_kib, mut total_kib) = (0usize, 0usize);
    for line in smaps.lines() {
        if let Some(v) = line.strip_prefix("Size:") {
            size_kib = v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .expect("Size");
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            if flags.split_whitespace().any(|f| f == "hg") {
                total_kib += size_kib;
            }
        }
    }
    total_kib << 10
}
