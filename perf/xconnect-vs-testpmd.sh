#!/usr/bin/env bash
# Benchmark (not a test): ferruled's static cross-connect between two net_null ports,
# one worker lcore, against dpdk-testpmd --forward-mode=io on the same two kinds of
# ports with one forwarding lcore, interleaved in the same run. Prints the medians and
# the ratio; record them in perf/RESULTS.md.
#
#   perf/xconnect-vs-testpmd.sh [ferrule-xconnect-bench options, e.g. --rounds 5 --seconds 10]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cargo build --release -q -p ferrule-daemon -p ferrulectl -p ferrule-perf
huge=$(ferrule_huge_flag 600)
[ -z "$huge" ] || echo "bench: not enough free hugepages for two 256 MiB processes; using --no-huge"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "dpdk: $(pkg-config --modversion libdpdk)"
# shellcheck disable=SC2086
exec target/release/ferrule-xconnect-bench $huge "$@"
