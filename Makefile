# Ferrule — build, demo, test, bench. Every target first runs scripts/setup.sh, which
# installs what is missing and reserves hugepages (idempotent).

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all setup build demo test lint feature-check no-dpdk install-cni bench fuzz wire-fixtures clean

all: build

setup:
	@scripts/setup.sh

build: setup
	$(CARGO) build --release --workspace --bins

demo: build
	@scripts/demo.sh

lint: setup feature-check
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	# The parser's fuzz target (its own workspace): CI builds it; run it with `make fuzz`.
	$(CARGO) build --manifest-path dataplane/fuzz/Cargo.toml

# `cargo build` and `cargo test` resolve the same features for every shared dependency,
# so the tests reuse the binaries' build instead of compiling the graph again.
feature-check:
	@CARGO=$(CARGO) scripts/feature-check.sh

# ferrulectl, ferrule-policy (with ferrule-agent), ferrule-cni, ferrule-networks, ferrule-fqdn
# and ferrule-api build with no DPDK development files visible, and none of them depends on
# ferrule-ffi; nor does ferrule-ipamd (checked with cargo tree).
no-dpdk:
	@if $(CARGO) tree -p ferrulectl -p ferrule-policy -p ferrule-api -p ferrule-cni -p ferrule-networks -p ferrule-fqdn -p ferrule-ipamd -e normal,build --prefix none \
		| grep -E '^(ferrule-ffi|bindgen) '; then \
		echo "no-dpdk: ferrulectl/ferrule-policy/ferrule-api/ferrule-cni/ferrule-networks/ferrule-fqdn/ferrule-ipamd depend on DPDK (above)" >&2; exit 1; fi
	@mkdir -p target/no-dpdk-pkgconfig
	PKG_CONFIG_PATH=$(CURDIR)/target/no-dpdk-pkgconfig PKG_CONFIG_LIBDIR=$(CURDIR)/target/no-dpdk-pkgconfig \
		$(CARGO) build -p ferrulectl -p ferrule-policy -p ferrule-api -p ferrule-cni -p ferrule-networks -p ferrule-fqdn

# The CNI plugin, as the runtime looks it up (`"type": "ferrule"`): /opt/cni/bin/ferrule.
install-cni: build
	install -D -m 0755 target/release/ferrule-cni $(DESTDIR)/opt/cni/bin/ferrule

# The whole suite: lint, the no-DPDK build of the clients, unit tests, EAL tests on virtual devices, control-socket tests,
# end-to-end tests that start ferruled and ferrulectl, and the demo itself.
test: lint no-dpdk
	$(CARGO) build --workspace --bins
	FERRULE_E2E_PREBUILT=1 $(CARGO) test --workspace --no-fail-fast
	@PROFILE=debug scripts/demo.sh

# Benchmarks (not tests): ferruled against OVS-DPDK and testpmd through ferrule-pktgen
# (tables and plots in target/switch-compare), the cross-connect rate against
# dpdk-testpmd, then the LPM and pipeline criterion benches against DPDK's rte_lpm.
# Results: perf/RESULTS.md.
bench: build
	@scripts/setup.sh --bench
	@perf/switch-compare.sh
	@perf/xconnect-vs-testpmd.sh
	$(CARGO) bench -p ferrule-perf --bench lpm -- --warm-up-time 1 --measurement-time 3
	$(CARGO) bench -p ferrule-perf --bench pipeline -- --warm-up-time 2 --measurement-time 5

# Fuzz the wire parsers (needs nightly and `cargo install cargo-fuzz`).
fuzz:
	cd dataplane && $(CARGO) +nightly fuzz run parse_frame -- -max_total_time=300

# Regenerate the scapy-encoded golden packets (needs Python; installs scapy in .venv).
wire-fixtures:
	@test -x .venv/bin/python || (python3 -m venv .venv && .venv/bin/pip install -q scapy)
	.venv/bin/python scripts/gen-wire-fixtures.py
	.venv/bin/python scripts/gen-nat-fixtures.py

clean:
	$(CARGO) clean
