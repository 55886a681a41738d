#!/usr/bin/env bash
# The mpi conduit under MPICH as well as Open MPI: installs MPICH next to Open MPI when it is
# missing (ci/install-mpi.sh --mpich), builds the suite against it in a target directory of
# its own and runs it through Hydra at 2 and 3 ranks, on MPI's own path (AMNET_HOST_BYPASS=0).
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'echo "mpich: FAILED at line $LINENO: $BASH_COMMAND (exit code $?)" >&2' ERR

bash ci/install-mpi.sh --mpich
echo "mpich: $(mpirun.mpich --version 2>/dev/null | grep -m1 -i version || echo 'version unknown')"

dir=target/mpich
MPICC=mpicc.mpich CARGO_TARGET_DIR="$dir" \
    cargo build --release --features amnet/mpi --bin amrun --bin amnet-testsuite
for n in 2 3; do
    echo "== amrun --conduit mpi -n $n amnet-testsuite, MPICH (AMNET_HOST_BYPASS=0)"
    AMNET_HOST_BYPASS=0 AMNET_MPIRUN=mpirun.mpich "$dir"/release/amrun --conduit mpi -n "$n" --timeout 900 \
        "$dir"/release/amnet-testsuite
done
