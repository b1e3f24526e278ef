#!/usr/bin/env bash
# Benchmark (not a test): ferrule-aclbench against dpdk-test-acl (scalar, sse, avx2) on
# the same ClassBench rule sets and traces, in one run, one core each. Prints lookups/s
# of each, Ferrule's ratio to the best rte_acl algorithm, and checks that Ferrule's
# first-match results equal the shared rte_acl results (`*_expected`).
#
#   perf/acl-compare.sh [DATA_DIR]   (default ../shared/data/classbench)
#   ITER=N     trace passes per timing (default 20)
#   ROUNDS=N   timings per classifier, alternating Ferrule and rte_acl (default 1);
#              the script prints medians and the median of the per-round ratios
#
# dpdk-test-acl runs on hugepages (--in-memory: no files left behind), as a deployment
# runs it: on 4 KiB pages (--no-huge) its tries miss the TLB and it runs up to half as
# fast (fw2_10k: 2.2 against 4.2 Mlookups/s), which would flatter Ferrule. Without free
# hugepages the script stops and says so (scripts/setup.sh reserves them).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data/classbench}
iter=${ITER:-20}
rounds=${ROUNDS:-1}
[ -d "$data" ] || { echo "acl-compare: no ClassBench data in $data" >&2; exit 1; }
hp=/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages
if [ "$(cat "$hp" 2>/dev/null || echo 0)" -lt 256 ]; then
    echo "acl-compare: dpdk-test-acl needs 512 MiB of free 2 MiB hugepages ($hp: $(cat "$hp" 2>/dev/null || echo none)); run scripts/setup.sh as root" >&2
    exit 1
fi
# --in-memory keeps no hugepage files, but EAL still makes a runtime directory.
trap 'rm -rf "/run/dpdk/ferrule-acl-$$"' EXIT
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
    "$bench" --rules "$rules" --trace "$trace" --iter 1 2>&1 >/dev/null | sed -n 's/^ipv4 lookup: */  ferrule IPv4 lookup: /p'
    # ROUNDS rounds, each timing Ferrule and then every rte_acl algorithm, so load that
    # comes and goes hits both sides; the medians and the median of the per-round
    # ratios are reported.
    ratios=() ferrules=() scalars=() sses=() avx2s=()
    for round in $(seq "$rounds"); do
        ferrule=$("$bench" --rules "$rules" --trace "$trace" --iter "$iter" 2>/dev/null | awk '/^lookups\/s:/ {print $2}')
        best=0
        for alg in scalar sse avx2; do
            out=$(dpdk-test-acl --in-memory --no-pci -l 0 --file-prefix "ferrule-acl-$$" \
                --log-level error -- --rulesf="$rules" --tracef="$trace" --tracenum="$lines" \
                --iter="$iter" --verbose=1 --alg="$alg" 2>&1 || true)
            rate=$(echo "$out" | sed -n 's/.* \([0-9.]*\) pkt\/sec.*/\1/p' | tail -n 1)
            if [ -z "$rate" ]; then
                # A failed run is not a slow one: say why, and leave it out of "best".
                echo "  rte_acl $alg FAILED on $set_name: $(echo "$out" | grep -v '^search_ip5tuples_once' | tail -n 3 | tr '\n' ' ')" >&2
                rate=0
            fi
            case $alg in scalar) scalars+=("$rate") ;; sse) sses+=("$rate") ;; avx2) avx2s+=("$rate") ;; esac
            best=$(awk -v a="$best" -v b="$rate" 'BEGIN {print (b > a) ? b : a}')
        done
        ferrules+=("$ferrule")
        ratios+=("$(awk -v f="$ferrule" -v b="$best" 'BEGIN {print (b > 0) ? f / b : 0}')")
    done
    median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
    for alg in scalar sse avx2; do
        case $alg in scalar) set -- "${scalars[@]}" ;; sse) set -- "${sses[@]}" ;; avx2) set -- "${avx2s[@]}" ;; esac
        printf '  rte_acl %-7s %14.0f lookups/s\n' "$alg" "$(median "$@")"
    done
    printf '  ferrule        %14.0f lookups/s  = %.3f x the best rte_acl (median of %d rounds; per round %s)\n' \
        "$(median "${ferrules[@]}")" "$(median "${ratios[@]}")" "$rounds" \
        "$(printf '%s\n' "${ratios[@]}" | sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.2f-%.2f", lo, hi}')"
done
