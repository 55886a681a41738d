#!/usr/bin/env bash
# The C ABI's cost: the Short round trip through the C entry points (bench/c/short_rtt.c,
# linked with libamnet.so and with libamnet.a) against the same loop on the Rust API
# (amnet-capi-rtt), all as 2-rank smp jobs, run in turn ROUNDS times in one invocation so
# that all see the same machine state. Prints each run's median and, at the end, the median
# of the runs of each and the C entry points' overhead in percent.
# Usage: bash bench/capi.sh [ROUNDS [ITERS [BATCHES]]]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
iters=${2:-20000}
batches=${3:-15}
target=${CARGO_TARGET_DIR:-target}
cargo build --release --bin amrun --bin amnet-capi-rtt
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
bash ci/install-capi.sh "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -std=c11 -O2 -Wall -Wextra -Werror -o "$prefix/short_rtt_so" bench/c/short_rtt.c \
    $(pkg-config --cflags --libs amnet)
cc -std=c11 -O2 -Wall -Wextra -Werror -o "$prefix/short_rtt_a" bench/c/short_rtt.c \
    $(pkg-config --cflags amnet) "$prefix/lib/libamnet.a" $(pkg-config --variable=libs_static amnet)
amrun="$target/release/amrun"
so=()
a=()
rust=()
one() {
    local line
    line=$(timeout 300 "$amrun" -n 2 "$@" "$iters" "$batches")
    echo "$line" >&2
    echo "$line" | awk '{print $3}'
}
for ((i = 0; i < rounds; i++)); do
    so+=("$(one "$prefix/short_rtt_so")")
    a+=("$(one "$prefix/short_rtt_a")")
    rust+=("$(one "$target/release/amnet-capi-rtt")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
awk -v so="$(median "${so[@]}")" -v a="$(median "${a[@]}")" -v r="$(median "${rust[@]}")" 'BEGIN {
    printf "Short round trip, smp, 2 ranks, medians of the runs: Rust API %.1f ns; C ABI with libamnet.so %.1f ns (%+.1f%%), with libamnet.a %.1f ns (%+.1f%%)\n",
        r, so, (so - r) / r * 100, a, (a - r) / r * 100 }'
