#!/usr/bin/env bash
# `make demo`: runs ferruled on the embedded default configuration (configs/ferrule.toml:
# two net_null virtual ports cross-connected), shows `ferrulectl ports` and
# `ferrulectl stats` with traffic forwarded, then stops it with SIGTERM and checks it
# left nothing behind. Exits non-zero if anything is off.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

PROFILE=${PROFILE:-release}
FERRULED=target/$PROFILE/ferruled
FERRULECTL=target/$PROFILE/ferrulectl
[ -x "$FERRULED" ] && [ -x "$FERRULECTL" ] || { echo "demo: build first (make build)" >&2; exit 1; }

work=$(mktemp -d /tmp/ferrule-demo.XXXXXX)
sock=$work/ferrule.sock
prefix=ferrule-demo-$$
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -f /dev/hugepages/"$prefix"* 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

huge=$(ferrule_huge_flag 256)
[ -z "$huge" ] || echo "demo: not enough free hugepages; running with --no-huge (scripts/setup.sh as root reserves them)"

echo "demo: starting ferruled on configs/ferrule.toml (virtual ports only)"
# shellcheck disable=SC2086
"$FERRULED" --config configs/ferrule.toml --socket "$sock" --file-prefix "$prefix" $huge \
    2> "$work/ferruled.log" &
pid=$!
if ! ferrule_wait_socket "$sock" 30; then
    echo "demo: ferruled did not come up; its log:" >&2
    cat "$work/ferruled.log" >&2
    exit 1
fi
sleep 2

echo
echo "\$ ferrulectl ports"
"$FERRULECTL" --socket "$sock" ports
echo
echo "\$ ferrulectl stats"
"$FERRULECTL" --socket "$sock" stats
# totals.tx_packets: the first "tx_packets" after "totals" (drop_reasons holds none).
json=$("$FERRULECTL" --socket "$sock" --json stats | tr -d ' \n')
tx=$(printf '%s' "${json#*\"totals\":}" | grep -o '"tx_packets":[0-9]*' | head -n 1 | cut -d: -f2)
echo
if [ -z "$tx" ] || [ "$tx" -eq 0 ]; then
    echo "demo: FAILED: no packets forwarded" >&2
    exit 1
fi
echo "demo: forwarded $tx packets; stopping ferruled with SIGTERM"
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
if ls /dev/hugepages/"$prefix"* >/dev/null 2>&1; then
    echo "demo: FAILED: hugepage files left behind" >&2
    exit 1
fi
echo "demo: ferruled stopped cleanly (exit 0, socket removed, no hugepage files left)"
