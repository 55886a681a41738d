#!/usr/bin/env bash
# Lints, warnings as errors, every target of every crate.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo clippy --workspace --all-targets -- -D warnings
