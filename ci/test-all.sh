#!/usr/bin/env bash
# Every test: unit and integration tests (the suite as multi-process jobs at 1-8 ranks, the
# AM-based put/get path, thread mode), loom models, the pure crates' unit tests under miri
# (where a nightly toolchain offers it), the suite through amrun, the C ABI's tests through
# amrun (ci/capi.sh), and a check that nothing was left in /dev/shm. Installs what it needs
# when missing (Open MPI, MPICH and libclang for the mpi conduit, libfabric for the ofi
# conduit, libibverbs for the ibv conduit's libibverbs device, iproute2 for the two-namespace
# udp test, a C and C++ compiler and pkg-config for the C ABI).
# Ends with one line totalling every test runner's counts.
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
bash ci/install-mpi.sh
bash ci/install-ofi.sh
bash ci/install-ibv.sh
log=$(mktemp)
step=""
trap 'rc=$?; rm -f "$log"; [ $rc -eq 0 ] || echo "test-all: FAILED in \"$step\" (exit code $rc)" >&2' EXIT
step="cargo test --workspace"; cargo test --workspace 2>&1 | tee -a "$log"
step="cargo test -p amnet-ibv --features ibv"; cargo test -p amnet-ibv --features ibv 2>&1 | tee -a "$log"
step="ci/loom.sh"; bash ci/loom.sh 2>&1 | tee -a "$log"
step="ci/miri.sh"; bash ci/miri.sh 2>&1 | tee -a "$log"
step="ci/suite.sh"; bash ci/suite.sh 2>&1 | tee -a "$log"
step="ci/capi.sh"; bash ci/capi.sh 2>&1 | tee -a "$log"
step="ci/shm-clean.sh"; bash ci/shm-clean.sh
step="the totals"
# cargo's "test result: ok. N passed; M failed" and the suite's "N passed, M failed".
awk '
    /^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1) } }
    /^[0-9]+ passed, [0-9]+ failed/ { p += $1; f += $3 }
    END { printf "total: %d passed, %d failed\n", p, f; exit (f > 0) }
' "$log"
