#!/usr/bin/env bash
# Lints, warnings as errors, every target of every crate.
set -euo pipefail
cd "$(dirname "$0")/.."
# The mpi and ofi conduits are part of the workspace: they need Open MPI and libclang, and
# libfabric.
bash ci/install-mpi.sh
bash ci/install-ofi.sh
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p amnet --features mpi --all-targets -- -D warnings
cargo clippy -p amnet-bench --features mpi --all-targets -- -D warnings
cargo clippy -p amnet-capi --features mpi --all-targets -- -D warnings
cargo clippy -p amnet --features ofi --all-targets -- -D warnings
cargo clippy -p amnet-bench --features ofi --all-targets -- -D warnings
