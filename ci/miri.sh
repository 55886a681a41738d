#!/usr/bin/env bash
# The pure crates' unit tests under miri, which reports undefined behaviour, invalid aliasing
# and uninitialized reads: the sync-mode logic, the udp wire decoder and reliability protocol,
# and the core's configuration, handler table and bulk copy. (The mpi wire decoder's crate links MPI,
# which miri cannot run; its decoder is fuzzed by proptest in the ordinary test run.)
#
# Miri needs a nightly toolchain with the miri and rust-src components. This script adds the
# components when a nightly toolchain is installed without them; where none can be had it
# prints why and passes. Separate target dir: miri builds everything its own way.
set -euo pipefail
cd "$(dirname "$0")/.."
skip() {
    echo "miri: skipped: $1"
    exit 0
}
command -v rustup >/dev/null 2>&1 || skip "rustup is not installed"
rustup toolchain list 2>/dev/null | grep -q '^nightly' ||
    skip "no nightly toolchain (miri exists only for nightly; rustup toolchain install nightly)"
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1 || true
fi
cargo +nightly miri --version >/dev/null 2>&1 ||
    skip "the nightly toolchain has no miri component and it could not be added"
# proptest reads the working directory and the clock: no isolation. A few cases per property
# (miri runs code about a hundred times slower than a native build).
export MIRIFLAGS="-Zmiri-disable-isolation" PROPTEST_CASES=4 CARGO_TARGET_DIR=target/miri
cargo +nightly miri test -p amnet-sync-modes --lib
cargo +nightly miri test -p amnet-udp --lib -- wire:: proto::
cargo +nightly miri test -p amnet-core --lib -- config:: handlers:: mem::
