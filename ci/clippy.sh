#!/usr/bin/env bash
# Lints, warnings as errors, every target of every crate.
set -euo pipefail
cd "$(dirname "$0")/.."
# The mpi conduit is part of the workspace: it needs Open MPI and libclang.
bash ci/install-mpi.sh
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p amnet --features mpi --all-targets -- -D warnings
cargo clippy -p amnet-bench --features mpi --all-targets -- -D warnings
cargo clippy -p amnet-capi --features mpi --all-targets -- -D warnings
