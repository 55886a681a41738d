#!/usr/bin/env bash
# loom models of the lock-free ring and its doorbell, of the smp-native collectives' flags and
# the endpoint barrier's flags, of the ibv emulated device's queues, and of the ofi conduit's RMA
# slots where libfabric is installed (separate target dir: --cfg loom rebuilds everything).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
    cargo test -p amnet-smp --test loom --release
# ... and of the smp-native collectives' flag protocol.
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
    cargo test -p amnet-coll --lib --release loom_
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
    cargo test -p amnet-core --lib --release loom_
# ... and of the ibv emulated device's queues.
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
    cargo test -p amnet-ibv --lib --release loom_
if pkg-config --exists libfabric 2>/dev/null; then
    RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
        cargo test -p amnet-ofi --lib --release loom_
fi
