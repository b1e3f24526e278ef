#!/usr/bin/env bash
# `make demo`: runs ferruled on the embedded default configuration (configs/ferrule.toml)
# in a network namespace wired to two pod namespaces and a router namespace
# (scripts/netns-topology.sh, virtual ports only). The pods' real kernel stacks ping
# their gateway, each other and the uplink's next hop, over IPv4 and IPv6; a TTL of 1
# comes back as ICMP time exceeded from the gateway. A dpdk-testpmd pod is attached over
# vhost-user at run time and pinged from a kernel pod, then detached. Then it shows routes, neighbours,
# and traces; applies configs/acl-example.yaml (pod-b accepts only TCP 80), checks that
# pod-a's ping to pod-b is now denied and counted, removes the ACLs again; turns on
# source NAT and pings an address beyond the router masqueraded; shows the counters,
# stops ferruled with SIGTERM and checks it left nothing behind.
# Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

PROFILE=${PROFILE:-release}
FERRULED=target/$PROFILE/ferruled
FERRULECTL=target/$PROFILE/ferrulectl
[ -x "$FERRULED" ] && [ -x "$FERRULECTL" ] || { echo "demo: build first (make build)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "demo: needs root (network namespaces, DPDK)" >&2; exit 1; }

topo=frdemo$$
work=$(mktemp -d /tmp/ferrule-demo.XXXXXX)
sock=$work/ferrule.sock
prefix=ferrule-demo-$$
# Under [control] vhost_dirs of configs/ferrule.toml (the default, /run/ferrule/vhost).
vhost_sock=/run/ferrule/vhost/$prefix-pod-v.sock
pid=
pod_pid=
cleanup() {
    if [ -n "$pod_pid" ] && kill -0 "$pod_pid" 2>/dev/null; then kill -KILL "$pod_pid" 2>/dev/null || true; wait "$pod_pid" 2>/dev/null || true; fi
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    scripts/netns-topology.sh down "$topo" || true
    rm -f /dev/hugepages/"$prefix"* /dev/hugepages/"$prefix-pod"* 2>/dev/null || true
    rm -rf "/run/dpdk/$prefix" "/run/dpdk/$prefix-pod" "$work"
    rm -f "$vhost_sock" "/run/ferrule/locks/eal-$prefix.lock" "/run/ferrule/locks/eal-$prefix-pod.lock"
}
trap cleanup EXIT

huge=$(ferrule_huge_flag 256)
[ -z "$huge" ] || echo "demo: not enough free hugepages; running with --no-huge (scripts/setup.sh as root reserves them)"

echo "demo: creating the topology (namespaces $topo-{fr,pa,pb,rt})"
scripts/netns-topology.sh up "$topo"
echo "demo: starting ferruled on configs/ferrule.toml in $topo-fr"
# shellcheck disable=SC2086
ip netns exec "$topo-fr" "$FERRULED" --config configs/ferrule.toml --socket "$sock" \
    --file-prefix "$prefix" $huge 2> "$work/ferruled.log" &
pid=$!
if ! ferrule_wait_socket "$sock" 30; then
    echo "demo: ferruled did not come up; its log:" >&2
    cat "$work/ferruled.log" >&2
    exit 1
fi
ctl() { echo; echo "\$ ferrulectl $*"; "$FERRULECTL" --socket "$sock" "$@"; }
ping_from() { # ns args...
    local ns=$1; shift
    echo; echo "\$ ($ns) ping $*"
    ip netns exec "$topo-$ns" ping -c 2 -W 2 "$@"
}

ctl ports
ping_from pa 169.254.1.1            # pod-a -> its gateway (Ferrule answers)
ping_from pa 10.1.0.3               # pod-a -> pod-b
ping_from pa 192.0.2.1              # pod-a -> the uplink's next hop (resolved by ARP)
ping_from pb -6 fe80::1%eth0        # pod-b -> its IPv6 gateway
ping_from pb -6 fd00:1::2           # pod-b -> pod-a over IPv6
ping_from pa -6 2001:db8::1         # pod-a -> the router over IPv6 (resolved by ND)
echo; echo "\$ (pa) ping -t 1 10.1.0.3   # expect: Time to live exceeded from 169.254.1.1"
out=$(ip netns exec "$topo-pa" ping -c 1 -W 2 -t 1 10.1.0.3 || true)
echo "$out"
echo "$out" | grep -q "From 169.254.1.1.*Time to live exceeded" \
    || { echo "demo: FAILED: no time exceeded from the gateway" >&2; exit 1; }
# A vhost-user pod: dpdk-testpmd with a virtio-user device, answering ARP and pings
# (icmpecho), attached at run time; pod-a's kernel pings it through Ferrule.
ctl port add pod-v --vhost-user "$vhost_sock" --ip 10.1.0.4 \
    --mac 02:00:00:0a:01:04 --pod demo/pod-v
# shellcheck disable=SC2086
dpdk-testpmd -l 0,1 --no-pci --in-memory --single-file-segments -m 128 \
    --file-prefix "$prefix-pod" $huge --log-level error \
    --vdev "virtio_user0,path=$vhost_sock,mac=02:00:00:0a:01:04" \
    -- --forward-mode=icmpecho --stats-period=60 > "$work/pod-v.log" 2>&1 &
pod_pid=$!
for _ in $(seq 1 50); do
    "$FERRULECTL" --socket "$sock" --json ports | tr -d ' \n' | grep -q '"link":"up","mac":"[^"]*","mtu":1500,"name":"pod-v"' && break
    sleep 0.2
done
ping_from pa 10.1.0.4               # pod-a (kernel) -> pod-v (vhost-user)
ctl ports
kill -INT "$pod_pid"; wait "$pod_pid" || true; pod_pid=
ctl port del pod-v
ctl route dump
ctl neigh dump
ctl trace --in-port pod-a --proto tcp --src 10.1.0.2:40000 --dst 10.1.0.3:80 --tcp-flags SYN
ctl trace --in-port pod-a --proto udp --src 10.1.0.2:53 --dst 192.0.2.77:53 --ttl 1

ctl acl apply -f configs/acl-example.yaml
echo; echo "\$ (pa) ping 10.1.0.3   # expect: no answer, pod-b-egress denies it"
if ip netns exec "$topo-pa" ping -c 2 -W 1 10.1.0.3; then
    echo "demo: FAILED: the ACL did not stop pod-a's ping to pod-b" >&2; exit 1
fi
ctl acl dump
dump=$("$FERRULECTL" --socket "$sock" --json acl dump --table pod-b-egress | tr -d ' \n')
[[ $dump == *'"packets":2},"index":2,"origin":"demo/default-deny"'* ]] \
    || { echo "demo: FAILED: the deny rule did not count the 2 pings: $dump" >&2; exit 1; }
ctl trace --in-port pod-a --proto tcp --src 10.1.0.2:40000 --dst 10.1.0.3:80 --tcp-flags SYN
echo; echo "\$ printf 'tables: []\\n' | ferrulectl acl apply -f -   # remove every table"
printf 'tables: []\n' | "$FERRULECTL" --socket "$sock" acl apply -f -
ping_from pa 10.1.0.3               # pod-a -> pod-b again

# Source NAT: the router gets an "internet" address and no route back to the pods;
# pod-a's pings reach it only masqueraded to the node IP.
ip netns exec "$topo-rt" ip addr add 203.0.113.1/32 dev lo
ip netns exec "$topo-rt" ip route del 10.1.0.0/16
ctl vpc set --node-ip 192.0.2.10 --vpc-cidr 192.0.2.0/24 --vpc-cidr 10.1.0.0/16
ping_from pa 203.0.113.1            # masqueraded to 192.0.2.10, replies translated back
ctl nat dump
ctl ct dump --proto icmp
ctl stats

echo
echo "demo: stopping ferruled with SIGTERM"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
if [ "$rc" -ne 0 ]; then
    echo "demo: FAILED: ferruled exited with $rc; its log:" >&2
    cat "$work/ferruled.log" >&2
    exit 1
fi
[ ! -e "$sock" ] || { echo "demo: FAILED: control socket left behind" >&2; exit 1; }
if ls /dev/hugepages/"$prefix"* >/dev/null 2>&1 || [ -e "/run/dpdk/$prefix" ]; then
    echo "demo: FAILED: hugepage or runtime files left behind" >&2
    exit 1
fi
echo "demo: every ping answered or denied as expected; ferruled stopped cleanly (exit 0, socket removed, nothing left behind)"
