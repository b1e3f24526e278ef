//! Fuzz target: every `wire` parser over arbitrary bytes (`cargo +nightly fuzz run
//! parse_frame`). The logic is `ferrule_dataplane_fuzz::parse_frame`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ferrule_dataplane_fuzz::parse_frame(data);
});
