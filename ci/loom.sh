#!/usr/bin/env bash
# loom models of the lock-free ring and its doorbell, and of the smp-native collectives'
# flags and the endpoint barrier's flags (separate target dir: --cfg loom rebuilds everything).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
    cargo test -p amnet-smp --test loom --release
# ... and of the smp-native collectives' flag protocol.
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
    cargo test -p amnet-coll --lib --release loom_
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
    cargo test -p amnet-core --lib --release loom_
