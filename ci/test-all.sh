#!/usr/bin/env bash
# Every test: unit and integration tests (the suite as multi-process jobs at 1-8 ranks, the
# AM-based put/get path, thread mode), loom models, the suite through amrun, and a check that
# nothing was left in /dev/shm. Installs what it needs when missing (nothing yet for smp).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is required (https://rustup.rs)" >&2
    exit 1
fi
stale=$(ls /dev/shm 2>/dev/null | grep '^amnet-' || true)
if [ -n "$stale" ]; then
    echo "removing amnet objects left in /dev/shm by an earlier run: $stale"
    (cd /dev/shm && rm -f $stale)
fi
cargo test --workspace
bash ci/loom.sh
bash ci/suite.sh
bash ci/shm-clean.sh
