#!/usr/bin/env bash
# Benchmark (not a test): ferrule-aclbench against dpdk-test-acl (scalar, sse, avx2) on
# the same ClassBench rule sets and traces, in one run, one core each. Prints lookups/s
# of each, Ferrule's ratio to the best rte_acl algorithm, and checks that Ferrule's
# first-match results equal the shared rte_acl results (`*_expected`).
#
#   perf/acl-compare.sh [DATA_DIR]   (default ../shared/data/classbench)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data/classbench}
iter=${ITER:-20}
[ -d "$data" ] || { echo "acl-compare: no ClassBench data in $data" >&2; exit 1; }
cargo build --release -q -p ferrule-perf --bin ferrule-aclbench
bench=target/release/ferrule-aclbench
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), DPDK $(pkg-config --modversion libdpdk)"
for rules in "$data"/*; do
    case "$rules" in *_trace|*_expected) continue ;; esac
    set_name=$(basename "$rules")
    trace=${rules}_trace
    [ -f "$trace" ] || continue
    lines=$(wc -l < "$trace")
    echo "== $set_name ($(grep -c '^@' "$rules") rules, $lines trace lines, $iter iterations)"
    if [ -f "${rules}_expected" ]; then
        if "$bench" --rules "$rules" --trace "$trace" --print-results 2>/dev/null | cmp -s - "${rules}_expected"; then
            echo "results: identical to rte_acl's"
        else
            echo "results: DIFFER from rte_acl's" >&2
            exit 1
        fi
    fi
    ferrule=$("$bench" --rules "$rules" --trace "$trace" --iter "$iter" | awk '/^lookups\/s:/ {print $2}')
    best=0
    for alg in scalar sse avx2; do
        out=$(dpdk-test-acl --no-huge --no-shconf --no-pci -l 0 --file-prefix "ferrule-acl-$$" \
            --log-level error -- --rulesf="$rules" --tracef="$trace" --tracenum="$lines" \
            --iter="$iter" --verbose=1 --alg="$alg" 2>&1 || true)
        rate=$(echo "$out" | sed -n 's/.* \([0-9.]*\) pkt\/sec.*/\1/p' | tail -n 1)
        rate=${rate:-0}
        printf '  rte_acl %-7s %14.0f lookups/s\n' "$alg" "$rate"
        best=$(awk -v a="$best" -v b="$rate" 'BEGIN {print (b > a) ? b : a}')
    done
    rm -rf "/run/dpdk/ferrule-acl-$$"
    printf '  ferrule        %14.0f lookups/s  = %.3f x the best rte_acl\n' "$ferrule" \
        "$(awk -v f="$ferrule" -v b="$best" 'BEGIN {print (b > 0) ? f / b : 0}')"
done
