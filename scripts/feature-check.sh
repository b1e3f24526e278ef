#!/usr/bin/env bash
# Fails when `cargo test --workspace` would build a dependency with other features than
# `cargo build --workspace` does: the dev-dependencies (criterion, proptest) then turn on
# features of shared crates (serde, either...) and everything above them — the AWS SDK,
# hyper, tracing-subscriber — compiles a second time for the tests (minutes on 2 cores).
# The fix is a line in tests/Cargo.toml giving the normal build the same features.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
features() {
    "$CARGO" tree --workspace -e "$1" --prefix none -f '{p} [{f}]' | sed 's/ (\*)$//' | sort -u | sed '/^$/d'
}
features normal,build >"$tmp/normal"
features normal,build,dev >"$tmp/dev"
# Only packages in both builds matter: a dev-only package compiles once anyway.
awk '{print $1 " " $2 " "}' "$tmp/normal" | sort -u >"$tmp/names"
grep -F -f "$tmp/names" "$tmp/dev" >"$tmp/shared" || true
if ! diff -u "$tmp/normal" "$tmp/shared" >"$tmp/diff"; then
    echo "feature-check: dev-dependencies change the features of shared dependencies" >&2
    echo "(- as \`cargo build\` resolves them, + as \`cargo test\` does):" >&2
    grep -E '^[-+][^-+]' "$tmp/diff" >&2
    echo "Give the normal build the same features in tests/Cargo.toml." >&2
    exit 1
fi
echo "feature-check: cargo build and cargo test share every dependency build"
