#!/usr/bin/env bash
# Benchmark (not a test): pod -> pod over vhost-user. Two dpdk-testpmd pods with
# virtio-user devices — pod A sending UDP (txonly) to pod B's IP, pod B counting
# (rxonly) — joined once by ferruled (two vhost-user pod ports added with `ferrulectl
# port add`, the full pipeline: parse, route, rewrite) and once by dpdk-testpmd
# --forward-mode=io between two net_vhost ports (no packet processing at all), in
# alternating rounds of the same run. Reports pod B's median receive rate of each and
# the ratio. On a 2-core machine the three busy-polling processes share the cores, so
# the absolute rates are low and the ratio is what to read.
#
#   perf/vhost-vs-testpmd.sh [ROUNDS [SECONDS]]      (defaults 3 rounds of 10 s)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
FERRULECTL=target/release/ferrulectl
rounds=${1:-3}
seconds=${2:-10}
cargo build --release -q -p ferrule-daemon -p ferrulectl
[ "$(id -u)" -eq 0 ] || { echo "bench: needs root (DPDK)" >&2; exit 1; }
huge=$(ferrule_huge_flag 900)
[ -z "$huge" ] || { echo "bench: needs ~900 MiB of free hugepages (scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d /tmp/ferrule-vhost-bench.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$work" /run/dpdk/fvb-*
}
trap cleanup EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "dpdk: $(pkg-config --modversion libdpdk)"

stop() { # pid: SIGINT, then wait
    kill -INT "$1" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

pod() { # name socket mode-args... ; prints its pid
    local name=$1 sock=$2; shift 2
    # Both pods forward on core 0; the switch (ferruled's worker, testpmd's forwarding
    # lcore) has core 1 to itself.
    dpdk-testpmd -l 0,1 --main-lcore 1 --no-pci --in-memory --single-file-segments -m 128 \
        --file-prefix "fvb-$name" --log-level error \
        --vdev "virtio_user0,path=$sock,mac=02:00:00:0a:01:0${name#pod}" \
        -- --stats-period=1 "$@" > "$work/$name.log" 2>&1 &
    echo $!
}

# Pod B's receive rate: the median of its per-second Rx-pps samples after a warm-up.
rate() { # log
    grep -o 'Rx-pps: *[0-9]*' "$1" | awk '{print $2}' | tail -n +3 | sort -n \
        | awk '{a[NR]=$1} END {if (NR==0) print 0; else print a[int((NR+1)/2)]}'
}

run_testpmd() {
    rm -f "$work"/a.sock "$work"/b.sock "$work"/*.log
    dpdk-testpmd -l 0,1 --no-pci --in-memory -m 256 --file-prefix fvb-sw --log-level error \
        --vdev "net_vhost0,iface=$work/a.sock,queues=1" --vdev "net_vhost1,iface=$work/b.sock,queues=1" \
        -- --forward-mode=io --stats-period=60 > "$work/sw.log" 2>&1 &
    local sw=$!
    pids+=("$sw")
    for _ in $(seq 1 50); do [ -S "$work/b.sock" ] && break; sleep 0.1; done
    local b a
    b=$(pod podb "$work/b.sock" --forward-mode=rxonly); pids+=("$b")
    a=$(pod poda "$work/a.sock" --forward-mode=txonly --tx-ip=10.1.0.4,10.1.0.5); pids+=("$a")
    sleep "$seconds"
    stop "$a"; stop "$b"; stop "$sw"
    rate "$work/podb.log"
}

run_ferrule() {
    rm -f "$work"/*.log
    cat > "$work/ferrule.toml" <<EOF
[eal]
lcores = [0, 1]
memory_mb = 256
file_prefix = "fvb-fr"
log_level = "error"
[control]
vhost_dirs = ["$work/vh"]
[dataplane]
mbufs = 8191
EOF
    target/release/ferruled --config "$work/ferrule.toml" --socket "$work/f.sock" 2> "$work/fr.log" &
    local fr=$!
    pids+=("$fr")
    ferrule_wait_socket "$work/f.sock" 30
    local ctl=(target/release/ferrulectl --socket "$work/f.sock")
    "${ctl[@]}" port add poda --vhost-user "$work/vh/a.sock" --ip 10.1.0.4 --mac 02:00:00:0a:01:0a > /dev/null
    "${ctl[@]}" port add podb --vhost-user "$work/vh/b.sock" --ip 10.1.0.5 --mac 02:00:00:0a:01:0b > /dev/null
    local gw
    gw=$("${ctl[@]}" --json ports | tr -d ' \n' | grep -o '"gateway_mac":"[^"]*"' | head -1 | cut -d'"' -f4)
    local b a
    b=$(pod podb "$work/vh/b.sock" --forward-mode=rxonly); pids+=("$b")
    a=$(pod poda "$work/vh/a.sock" --forward-mode=txonly --tx-ip=10.1.0.4,10.1.0.5 "--eth-peer=0,$gw"); pids+=("$a")
    sleep "$seconds"
    stop "$a"; stop "$b"; stop "$fr"
    rate "$work/podb.log"
}

# The pods' MACs: pod A 02:00:00:0a:01:0a, pod B 02:00:00:0a:01:0b (from the names).
f_rates=(); t_rates=()
for r in $(seq 1 "$rounds"); do
    t=$(run_testpmd); t_rates+=("$t")
    f=$(run_ferrule); f_rates+=("$f")
    echo "round $r: testpmd io $t pps, ferruled $f pps"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
t=$(median "${t_rates[@]}"); f=$(median "${f_rates[@]}")
echo "median: testpmd io $t pps, ferruled $f pps, ratio $(awk -v f="$f" -v t="$t" 'BEGIN {printf "%.1f%%", t ? 100*f/t : 0}')"
