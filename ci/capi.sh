#!/usr/bin/env bash
# The C ABI and the GASNet-1 layer: builds libamnet and amrun (release), installs them with
# ci/install-capi.sh into a scratch prefix, compiles every C test in tests/c with
# `cc $(pkg-config --cflags --libs amnet)` (the gasnet_*.c tests use GASNet's headers alone),
# and runs each through amrun at 2 and 4 ranks on smp and at 2 ranks on udp, and at 2 ranks on mpi
# where an MPI library is installed (ci/install-mpi.sh), each bounded by a timeout. Ends with
# one line "N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
# The C and C++ compilers and pkg-config, installed when missing (Debian and Ubuntu, apt-get;
# sudo unless run as root).
packages=()
command -v pkg-config >/dev/null 2>&1 || packages+=(pkg-config)
command -v cc >/dev/null 2>&1 || packages+=(gcc)
command -v c++ >/dev/null 2>&1 || packages+=(g++)
if [ ${#packages[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "capi: missing ${packages[*]}, and this system has no apt-get" >&2
        exit 1
    fi
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        sudo=(sudo)
    fi
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${packages[@]}"
fi
# With an MPI library, the library and amrun have the mpi conduit too (as ci/suite.sh builds
# amrun last, so that nothing is rebuilt).
mpi=()
conduits="smp udp"
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
    mpi=(--mpi)
    conduits="smp udp mpi"
    cargo build --release --features amnet/mpi --bin amrun
else
    echo "no MPI library (ci/install-mpi.sh installs one): the mpi conduit is not tested"
    cargo build --release --bin amrun
fi
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
bash ci/install-capi.sh "${mpi[@]}" "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
amrun="$target/release/amrun"
passed=0
failed=0
# run NAME EXPECTED-CODE AMRUN-ARGS... -- PROGRAM ARGS...
run() {
    local name=$1 want=$2
    shift 2
    local rc=0
    timeout -k 10 120 "$amrun" --timeout 100 "$@" >"$prefix/out" 2>&1 || rc=$?
    if [ "$rc" -eq "$want" ]; then
        passed=$((passed + 1))
        echo "ok     $name (exit $rc)"
    else
        failed=$((failed + 1))
        echo "FAILED $name: exit $rc, wanted $want"
        sed 's/^/    /' "$prefix/out" | tail -20
    fi
}
for src in tests/c/*.c; do
    name=$(basename "$src" .c)
    # -Werror: the header must compile cleanly under strict warnings, in C and in C++.
    cc -std=c11 -O2 -Wall -Wextra -Werror -pthread -o "$prefix/$name" "$src" \
        $(pkg-config --cflags --libs amnet)
done
c++ -x c++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only \
    $(pkg-config --cflags amnet) - <<<'#include "amnet.h"
#include "gasnet.h"
#include "gasnet_coll.h"
#include "gasnet_tools.h"
#include "gasnet_vis.h"
#include "gasnet_handler.h"
int main() { amnet_handle_t h = 0; return amnet_sync(&h) + gasnet_init(0, 0) + (int)gasnett_ticks_now(); }'
# A GASNet-1 client written in C++ (the same source, compiled as C++).
c++ -x c++ -std=c++17 -O2 -Wall -Wextra -Werror -o "$prefix/gasnet_client_cxx" \
    tests/c/gasnet_client.c $(pkg-config --cflags --libs amnet)
echo "the C tests compile against the installed headers and library (C11, and C++17)"
# The static library links too.
cc -std=c11 -O2 -o "$prefix/errors-static" tests/c/errors.c -I"$prefix/include" \
    "$prefix/lib/libamnet.a" $(pkg-config --variable=libs_static amnet)
for conduit in $conduits; do
    for n in 2 4; do
        [ "$conduit" != smp ] && [ "$n" = 4 ] && continue
        at="--conduit $conduit -n $n"
        for t in am_pingpong putget barrier errors threads atomics vis progress npam coll gasnet_client gasnet_coll gasnet_tools gasnet_vis gasnet_handler; do
            run "$t $at" 0 $at "$prefix/$t"
        done
        run "coll images $at" 0 $at "$prefix/coll" images
        run "gasnet_coll images $at" 0 $at "$prefix/gasnet_coll" images
        run "exit_code main $at" 42 $at "$prefix/exit_code" main
        run "exit_code handler $at" 43 $at "$prefix/exit_code" handler
        run "exit_code return $at" 7 $at "$prefix/exit_code" return
        run "exit_code prepared $at" 44 $at "$prefix/exit_code" prepared
    done
done
run "errors (static library) --conduit smp -n 2" 0 --conduit smp -n 2 "$prefix/errors-static"
run "gasnet_client (C++) --conduit smp -n 2" 0 --conduit smp -n 2 "$prefix/gasnet_client_cxx"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
