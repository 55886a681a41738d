#!/usr/bin/env bash
# Formatting check.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
