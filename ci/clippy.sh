#!/usr/bin/env bash
# Lints, warnings as errors, every target of every crate.
set -euo pipefail
cd "$(dirname "$0")/.."
# The mpi and ofi conduits are part of the workspace: they need Open MPI and libclang, and
# libfabric. The ibv conduit's libibverbs device (feature amnet-ibv/ibv) needs libibverbs.
bash ci/install-mpi.sh
bash ci/install-ofi.sh
bash ci/install-ibv.sh
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p amnet --features mpi --all-targets -- -D warnings
cargo clippy -p amnet-bench --features mpi --all-targets -- -D warnings
cargo clippy -p amnet-capi --features mpi --all-targets -- -D warnings
cargo clippy -p amnet --features ofi --all-targets -- -D warnings
cargo clippy -p amnet-bench --features ofi --all-targets -- -D warnings
cargo clippy -p amnet-ibv --features ibv --all-targets -- -D warnings
cargo clippy -p amnet --features ibv --all-targets -- -D warnings
