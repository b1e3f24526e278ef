#!/bin/bash
# The Linux kernel's netfilter conntrack + MASQUERADE, measured like Ferrule's
# conntrack_path bench for comparison (issue 5): a UDP generator (perf/netfilter/udpgen.c,
# sendmmsg, 18-byte payloads: 64-byte frames) in namespace ct-gen sends through a router
# namespace ct-rtr to ct-sink (which drops it on a blackhole route), over veth pairs.
# On veth the whole path runs on the sender's CPU (the generator is pinned), so the time
# per datagram is syscall + stack + router; the router's share is read off as the
# difference between runs with and without conntrack + MASQUERADE on the router.
#
# Cases: forwarding without rules; masquerade with 1k and with N (default 200k, under
# the kernel's nf_conntrack_max) established flows (each sent once first, untimed); and
# new connections (every datagram a new tuple, `max` of them into an empty table).
#
# usage: perf/netfilter-conntrack.sh [seconds=3] [rounds=3] [big=200000]
# Needs root, nft, gcc. Creates and deletes only the namespaces ct-gen, ct-rtr, ct-sink.
set -euo pipefail
SECS=${1:-3}
ROUNDS=${2:-3}
BIG=${3:-200000}
NEW=${NEW:-200000}
CPU=${CPU:-1}
for tool in nft gcc ip; do
    command -v "$tool" >/dev/null || {
        echo "netfilter-conntrack: '$tool' is missing (Debian: apt-get install nftables gcc iproute2)" >&2
        exit 1
    }
done
[ "$(id -u)" = 0 ] || { echo "netfilter-conntrack: needs root (network namespaces, nft)" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
gen=$(mktemp -d)/udpgen
gcc -O2 -Wall -o "$gen" "$here/netfilter/udpgen.c"

cleanup() {
    for ns in ct-gen ct-rtr ct-sink; do ip netns del $ns 2>/dev/null || true; done
}
trap cleanup EXIT

setup() { # $1: masquerade (1) or plain forwarding (0)
    local masq=$1
    cleanup
    for ns in ct-gen ct-rtr ct-sink; do ip netns add $ns; done
    ip link add g0 netns ct-gen type veth peer name r0 netns ct-rtr
    ip link add r1 netns ct-rtr type veth peer name s0 netns ct-sink
    ip -n ct-gen addr add 10.0.0.2/24 dev g0
    ip -n ct-rtr addr add 10.0.0.1/24 dev r0
    ip -n ct-rtr addr add 192.0.2.10/24 dev r1
    ip -n ct-sink addr add 192.0.2.1/24 dev s0
    for l in "ct-gen g0" "ct-rtr r0" "ct-rtr r1" "ct-sink s0"; do
        ip -n "${l% *}" link set "${l#* }" up
        ip -n "${l% *}" link set lo up
    done
    ip -n ct-gen route add default via 10.0.0.1
    ip -n ct-rtr route add default via 192.0.2.1
    ip -n ct-sink route add blackhole 198.18.0.0/15
    ip netns exec ct-rtr sysctl -qw net.ipv4.ip_forward=1
    ip netns exec ct-sink sysctl -qw net.ipv4.ip_forward=1
    # Static neighbours: no ARP during the runs.
    ip -n ct-gen neigh replace 10.0.0.1 lladdr "$(ip -n ct-rtr -br link show r0 | awk '{print $3}')" dev g0
    ip -n ct-rtr neigh replace 192.0.2.1 lladdr "$(ip -n ct-sink -br link show s0 | awk '{print $3}')" dev r1
    if [ "$masq" = 1 ]; then
        ip netns exec ct-rtr nft -f - <<'NFT'
table ip nat {
    chain postrouting {
        type nat hook postrouting priority srcnat; policy accept;
        oifname "r1" ip daddr != 192.0.2.0/24 masquerade
    }
}
NFT
    fi
}

run() { # $1 label, $2 flows, $3 max, $4 warm
    ip netns exec ct-gen taskset -c "$CPU" "$gen" "$2" "$SECS" "$3" "$4" | sed "s/^/$1: /"
}

for r in $(seq "$ROUNDS"); do
    echo "round $r"
    setup 0
    run "forward, no rules, 1k flows" 1000 999999999999 1
    setup 1
    run "masquerade, 1k established flows" 1000 999999999999 1
    echo "  conntrack entries: $(ip netns exec ct-rtr cat /proc/sys/net/netfilter/nf_conntrack_count)"
    setup 1
    run "masquerade, $BIG established flows" "$BIG" 999999999999 1
    echo "  conntrack entries: $(ip netns exec ct-rtr cat /proc/sys/net/netfilter/nf_conntrack_count)"
    setup 1
    run "masquerade, new connections (table 0 -> $NEW)" 0 "$NEW" 0
    echo "  conntrack entries: $(ip netns exec ct-rtr cat /proc/sys/net/netfilter/nf_conntrack_count)"
done
