# Ferrule — build, demo, test, bench. Every target first runs scripts/setup.sh, which
# installs what is missing and reserves hugepages (idempotent).

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all setup build demo test lint unit bench clean

all: build

setup:
	@scripts/setup.sh

build: setup
	$(CARGO) build --release --workspace --bins

demo: build
	@scripts/demo.sh

lint: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The whole suite: lint, unit tests, EAL tests on virtual devices, control-socket tests,
# end-to-end tests that start ferruled and ferrulectl, and the demo itself.
test: lint
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --no-fail-fast
	@PROFILE=debug scripts/demo.sh

bench: build
	@perf/xconnect-vs-testpmd.sh

clean:
	$(CARGO) clean
