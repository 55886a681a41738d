#!/usr/bin/env bash
# The mpi conduit under MPICH as well as Open MPI: installs MPICH next to Open MPI when it is
# missing (Debian and Ubuntu keep `mpirun` and `mpicc` on Open MPI, whose alternatives rank
# higher; MPICH's are `mpirun.mpich` and `mpicc.mpich`), builds the suite against it in a
# target directory of its own and runs it through Hydra at 2 and 3 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'echo "mpich: FAILED at line $LINENO: $BASH_COMMAND (exit code $?)" >&2' ERR

have_mpich() {
    command -v mpicc.mpich >/dev/null 2>&1 && command -v mpirun.mpich >/dev/null 2>&1
}

if ! have_mpich; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "mpich: MPICH is missing and this system has no apt-get; install it by hand" >&2
        exit 1
    fi
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "mpich: need root or sudo to install MPICH" >&2
            exit 1
        }
        sudo=(sudo)
    fi
    echo "mpich: installing mpich libmpich-dev"
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends mpich libmpich-dev
fi
have_mpich || {
    echo "mpich: MPICH still missing after the install" >&2
    exit 1
}
echo "mpich: $(mpirun.mpich --version 2>/dev/null | grep -m1 -i version || echo 'version unknown')"

dir=target/mpich
MPICC=mpicc.mpich CARGO_TARGET_DIR="$dir" \
    cargo build --release --features amnet/mpi --bin amrun --bin amnet-testsuite
for n in 2 3; do
    echo "== amrun --conduit mpi -n $n amnet-testsuite, MPICH"
    AMNET_MPIRUN=mpirun.mpich "$dir"/release/amrun --conduit mpi -n "$n" --timeout 900 \
        "$dir"/release/amnet-testsuite
done
