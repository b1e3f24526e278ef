#!/usr/bin/env bash
# The demo/test topology: four network namespaces joined by veth pairs, nothing in the
# root namespace.
#
#   NAME-pa (pod-a: 10.1.0.2, fd00:1::2)  eth0 ──── va ┐
#   NAME-pb (pod-b: 10.1.0.3, fd00:1::3)  eth0 ──── vb ├ NAME-fr (ferruled, af_packet ports)
#   NAME-rt (router: 192.0.2.1, 2001:db8::1) eth0 ─ vu ┘
#
# Pods use the AWS VPC CNI style static gateway: 169.254.1.1 / fe80::1 on eth0.
# The router routes the pod subnets back via Ferrule's uplink address 192.0.2.10.
#
#   scripts/netns-topology.sh up NAME     create (replacing any leftover of NAME)
#   scripts/netns-topology.sh down NAME   delete
set -euo pipefail
cmd=${1:-}
name=${2:-ferrule-demo}
[ "${#name}" -le 20 ] || { echo "netns-topology: name too long: $name" >&2; exit 2; }

ns() { ip netns exec "$1" "${@:2}"; }

down() {
    # The four, and any pod namespace a test added with the same prefix.
    for n in $(ip netns list | awk '{print $1}' | grep "^$name-" || true); do
        ip netns del "$n" 2>/dev/null || true
    done
}

up() {
    down
    for n in fr pa pb rt; do
        ip netns add "$name-$n"
        ns "$name-$n" ip link set lo up
        ns "$name-$n" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
    done
    # Ferrule's side: no addresses, no IPv6 autoconfiguration, no kernel chatter.
    ns "$name-fr" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    pair() { # peer-ns ferrule-if mac
        ip link add "$2" netns "$name-fr" type veth peer name eth0 netns "$name-$1"
        ns "$name-$1" ip link set eth0 address "$3"
        # The peer's kernel must put real checksums in what it sends: Ferrule reads
        # frames off the wire (af_packet) and rewrites checksums incrementally.
        ns "$name-$1" ethtool -K eth0 tx off >/dev/null
        ns "$name-fr" ip link set "$2" up
        ns "$name-$1" ip link set eth0 up
    }
    pair pa va 02:00:00:0a:01:02
    pair pb vb 02:00:00:0a:01:03
    pair rt vu 02:00:00:c0:00:01
    for p in a:2 b:3; do
        n=${p%%:*} h=${p##*:}
        ns "$name-p$n" ip addr add "10.1.0.$h/32" dev eth0
        ns "$name-p$n" ip addr add "fd00:1::$h/128" dev eth0 nodad
        ns "$name-p$n" ip route add 169.254.1.1 dev eth0 scope link
        ns "$name-p$n" ip route add default via 169.254.1.1 dev eth0
        ns "$name-p$n" ip -6 route add default via fe80::1 dev eth0
    done
    ns "$name-rt" ip addr add 192.0.2.1/24 dev eth0
    ns "$name-rt" ip addr add 2001:db8::1/64 dev eth0 nodad
    ns "$name-rt" ip route add 10.1.0.0/16 via 192.0.2.10
    ns "$name-rt" ip -6 route add fd00:1::/64 via 2001:db8::10
}

case "$cmd" in
    up) up ;;
    down) down ;;
    *) echo "usage: $0 up|down [NAME]" >&2; exit 2 ;;
esac
