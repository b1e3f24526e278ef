#!/usr/bin/env bash
# Benchmark (not a test): the same ferrule-pktgen traffic through ferruled, OVS-DPDK and
# dpdk-testpmd io (the I/O ceiling) on identical vhost-user ports and pinning, in
# alternating rounds: plain routing and SNAT, 1 to 1M flows, 64-byte and IMIX frames,
# plus a latency run per switch and case. Prints the tables (medians of the rounds) and
# writes results.json, table.md, throughput-vs-flows.png and latency-cdf.png.
#
#   perf/switch-compare.sh [--rounds 2] [--seconds 3] [--warmup 2] [--switches ferruled,ovs,testpmd]
#                          [--cases plain,snat] [--flows 1,1000,100000,1000000] [--sizes 64,imix]
#                          [--mode throughput|ndr|pdr] [--loss 0.1] [--latency-rate 1M]
#                          [--out target/switch-compare]
#
# Pinning: the generator polls CPU 0, the switch's forwarding thread CPU 1; the switch's
# other threads share CPU 0 (docs/pktgen.md, "Comparing switches").
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
case "${1:-}" in -h | --help) exec /usr/bin/python3 perf/switch-compare.py --help ;; esac
[ "$(id -u)" -eq 0 ] || { echo "switch-compare: needs root (DPDK, OVS-DPDK)" >&2; exit 1; }
if [ ! -x /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk ] || ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    echo "switch-compare: needs OVS-DPDK and matplotlib: run scripts/setup.sh --bench" >&2
    exit 1
fi
huge=$(ferrule_huge_flag 1600)
[ -z "$huge" ] || { echo "switch-compare: needs ~1.6 GiB of free 2 MiB hugepages (a 1 GiB switch and a 512 MiB generator): scripts/setup.sh" >&2; exit 1; }
cargo build --release -q -p ferrule-daemon -p ferrulectl -p ferrule-perf
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "dpdk: $(pkg-config --modversion libdpdk), $(/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk --version | head -1)"
exec /usr/bin/python3 perf/switch-compare.py "$@"
