#!/usr/bin/env bash
# Ferrule machine set-up, idempotent: installs what is missing (Debian packages for DPDK
# and bindgen), reserves and mounts 2 MiB hugepages. Safe to run again; does nothing
# that is already done. Run as root.
#
#   scripts/setup.sh            # packages + hugepages
#   FERRULE_HUGEPAGES=1024 scripts/setup.sh   # how many 2 MiB pages to reserve (default 1024)
#   FERRULE_VENV=/opt/ferrule/venv scripts/setup.sh  # the project's Python venv (moto_server
#                                                    # for ferrule-ipamd's tests)
#   scripts/setup.sh --bench    # also what `make bench` compares against and plots with:
#                               # OVS-DPDK (run in private directories, never as the
#                               # system service) and matplotlib
#
# When hugepages cannot be had, it says so and how to run without them (--no-huge);
# `make demo` and `make test` then fall back to --no-huge by themselves, while ferruled
# itself refuses to start without its hugepages and says how to fix it.
set -euo pipefail

PAGES="${FERRULE_HUGEPAGES:-1024}"
PACKAGES=(dpdk dpdk-dev libdpdk-dev libclang-dev pkg-config iproute2 procps iputils-ping python3 ethtool tshark
    containerd runc containernetworking-plugins busybox-static python3-prometheus-client python3-venv
    dnsmasq-base bind9-dnsutils)
if [ "${1:-}" = "--bench" ]; then
    PACKAGES+=(openvswitch-switch-dpdk python3-matplotlib)
elif [ -n "${1:-}" ]; then
    printf 'setup: error: unknown option %s (the only one is --bench)\n' "$1" >&2
    exit 2
fi
HP_SYS=/sys/kernel/mm/hugepages/hugepages-2048kB
HP_MNT=/dev/hugepages

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        die "missing Debian packages: ${missing[*]}. Run as root: sudo $0 (or: sudo apt-get install ${missing[*]})"
    fi
    command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} with your distribution's tools (Debian 12 is the supported platform)"
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/ferrule-apt.log 2>&1; then
        say "apt-get install failed; refreshing the package lists and trying again"
        apt-get update -q >>/tmp/ferrule-apt.log 2>&1 || die "apt-get update failed (see /tmp/ferrule-apt.log)"
        apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/ferrule-apt.log 2>&1 \
            || die "apt-get install ${missing[*]} failed (see /tmp/ferrule-apt.log)"
    fi
else
    say "packages present: ${PACKAGES[*]}"
fi

pkg-config --atleast-version=22.11 libdpdk || die "libdpdk >= 22.11 not found by pkg-config after install"
command -v cargo >/dev/null || die "cargo not found: install the Rust toolchain (https://rustup.rs) and re-run"

# ---- the project's Python venv: moto_server, the EC2 emulator of ferrule-ipamd's tests ----
VENV="${FERRULE_VENV:-/opt/ferrule/venv}"
if [ -x "$VENV/bin/moto_server" ]; then
    say "moto present: $VENV/bin/moto_server"
else
    say "installing moto[server] into $VENV"
    mkdir -p "$(dirname "$VENV")" 2>/dev/null \
        || die "cannot create $(dirname "$VENV"): run as root, or set FERRULE_VENV to a writable path (the tests then need FERRULE_VENV too)"
    [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV" >/tmp/ferrule-venv.log 2>&1 \
        || die "python3 -m venv $VENV failed (see /tmp/ferrule-venv.log); on Debian: apt-get install python3-venv, then run scripts/setup.sh again"
    "$VENV/bin/pip" install -q 'moto[server]>=5,<6' >/tmp/ferrule-pip.log 2>&1 \
        || die "pip install 'moto[server]' into $VENV failed (see /tmp/ferrule-pip.log): check that PyPI is reachable (pip config, proxy), then run scripts/setup.sh again, or by hand: $VENV/bin/pip install 'moto[server]>=5,<6'"
    [ -x "$VENV/bin/moto_server" ] || die "moto installed but $VENV/bin/moto_server is missing (see /tmp/ferrule-pip.log)"
    say "moto installed: $VENV/bin/moto_server"
fi

# ---- hugepages ----
no_huge() {
    say "WARNING: $1"
    say "Ferrule still runs without hugepages: 'ferruled --no-huge' or 'eal.hugepages = false'."
    say "make demo and make test fall back to --no-huge automatically."
    exit 0
}

[ -d "$HP_SYS" ] || no_huge "this kernel offers no 2 MiB hugepages ($HP_SYS missing)"
have=$(cat "$HP_SYS/nr_hugepages")
if [ "$have" -lt "$PAGES" ]; then
    [ "$(id -u)" -eq 0 ] || no_huge "only $have of $PAGES hugepages reserved and not root; as root: echo $PAGES > $HP_SYS/nr_hugepages"
    echo "$PAGES" > "$HP_SYS/nr_hugepages" 2>/dev/null || true
    have=$(cat "$HP_SYS/nr_hugepages")
    if [ "$have" -lt "$PAGES" ]; then
        # Memory may be fragmented: compact and retry once.
        echo 1 > /proc/sys/vm/compact_memory 2>/dev/null || true
        echo "$PAGES" > "$HP_SYS/nr_hugepages" 2>/dev/null || true
        have=$(cat "$HP_SYS/nr_hugepages")
    fi
    [ "$have" -gt 0 ] || no_huge "the kernel refused to reserve hugepages (nr_hugepages stays 0)"
    [ "$have" -ge "$PAGES" ] || say "reserved $have of $PAGES hugepages (memory is short); enough for $((have * 2)) MiB"
fi
say "hugepages: $have x 2 MiB reserved, $(cat "$HP_SYS/free_hugepages") free"

if ! mount | grep -q "on $HP_MNT type hugetlbfs"; then
    [ "$(id -u)" -eq 0 ] || no_huge "$HP_MNT is not a hugetlbfs mount and not root; as root: mount -t hugetlbfs nodev $HP_MNT"
    mkdir -p "$HP_MNT"
    mount -t hugetlbfs -o pagesize=2M nodev "$HP_MNT" || no_huge "cannot mount hugetlbfs on $HP_MNT"
    say "mounted hugetlbfs on $HP_MNT"
fi
say "ready"
