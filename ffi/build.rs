//! Finds the system DPDK with pkg-config, compiles the C shim for DPDK's
//! `static inline` functions and generates the Rust bindings with bindgen.

use std::env;
use std::path::PathBuf;

const MIN_DPDK: &str = "22.11";

fn main() {
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/shim.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let dpdk = match pkg_config::Config::new()
        .atleast_version(MIN_DPDK)
        .cargo_metadata(false)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "ferrule-ffi: DPDK >= {MIN_DPDK} not found with pkg-config ({e}).\n\
                 Install it with `scripts/setup.sh` (Debian: apt-get install dpdk dpdk-dev \
                 libdpdk-dev libclang-dev pkg-config) or point PKG_CONFIG_PATH at libdpdk.pc."
            );
            std::process::exit(1);
        }
    };

    // Link every DPDK library dynamically. The poll-mode drivers are plugins that EAL
    // loads from its driver directory, except net_ring, whose `rte_eth_from_rings`
    // the tests call directly.
    for dir in &dpdk.link_paths {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    for lib in &dpdk.libs {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    println!("cargo:rustc-link-lib=dylib=rte_net_ring");

    // The shim and bindgen must see the same configuration as the installed libraries:
    // the include paths plus `-include rte_config.h` and the `-march` from the cflags.
    let mut clang_args: Vec<String> = dpdk
        .include_paths
        .iter()
        .map(|p| format!("-I{}", p.display()))
        .collect();
    let mut build = cc::Build::new();
    build.file("shim/shim.c").opt_level(3).warnings(true);
    for path in &dpdk.include_paths {
        build.include(path);
    }
    let raw_cflags = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut words = raw_cflags.split_whitespace();
    while let Some(word) = words.next() {
        if word == "-include" {
            if let Some(header) = words.next() {
                build.flag("-include").flag(header);
                clang_args.push("-include".into());
                clang_args.push(header.into());
            }
        } else if word.starts_with("-march=") {
            build.flag(word);
            clang_args.push(word.into());
        }
    }
    build.compile("ferrule_shim");

    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let bindings = bindgen::Builder::default()
        .header("shim/shim.h")
        .clang_args(&clang_args)
        .allowlist_function("rte_.*")
        .allowlist_function("ferrule_.*")
        .allowlist_type("rte_.*")
        .allowlist_var("RTE_.*")
        .allowlist_var("RING_F_.*")
        .allowlist_var("ferrule_.*")
        .blocklist_type("max_align_t")
        .opaque_type("rte_arp_ipv4")
        .opaque_type("rte_arp_hdr")
        .opaque_type("rte_l2tpv2_combined_msg_hdr")
        .opaque_type("rte_gtp_psc_generic_hdr")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on the DPDK headers");
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("cannot write bindings.rs");
}
