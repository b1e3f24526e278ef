# Shared helpers for Ferrule's scripts (sourced, not run).

# Prints "--no-huge" when fewer than $1 MiB of 2 MiB hugepages are free.
ferrule_huge_flag() {
    local need_mb=${1:-256} free
    free=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)
    if [ $((free * 2)) -lt "$need_mb" ]; then
        echo "--no-huge"
    fi
}

# Waits up to $2 seconds (default 30) for the Unix socket $1 to appear.
ferrule_wait_socket() {
    local sock=$1 limit=${2:-30} i=0
    while [ ! -S "$sock" ] || ! "$FERRULECTL" --socket "$sock" version >/dev/null 2>&1; do
        i=$((i + 1))
        [ "$i" -le $((limit * 10)) ] || return 1
        sleep 0.1
    done
}
