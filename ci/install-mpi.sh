#!/usr/bin/env bash
# Installs what the mpi conduit (conduits/mpi, crate amnet-mpi) needs to build and run its
# tests: Open MPI (mpicc, mpirun and the headers) and libclang with its headers (rsmpi
# generates its MPI bindings with bindgen). With `--mpich`, MPICH as well (`mpicc.mpich`,
# `mpirun.mpich`; Debian and Ubuntu keep `mpicc` and `mpirun` on Open MPI, whose alternatives
# rank higher). Idempotent: installs only what is missing.
# Debian and Ubuntu (apt-get); uses sudo unless run as root.
set -euo pipefail
mpich=0
[ "${1:-}" = "--mpich" ] && mpich=1

have_mpi() {
    command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1
}

# bindgen needs the shared library and clang's own headers (stddef.h): libclang-dev brings
# both, the bare runtime library does not.
have_libclang() {
    local so hdr
    so=$(ls ${LIBCLANG_PATH:+"$LIBCLANG_PATH"/libclang*.so*} /usr/lib/llvm-*/lib/libclang.so \
        /usr/lib/*/libclang.so 2>/dev/null | head -n 1 || true)
    hdr=$(ls /usr/lib/llvm-*/lib/clang/*/include/stddef.h /usr/lib/clang/*/include/stddef.h \
        2>/dev/null | head -n 1 || true)
    [ -n "$so" ] && [ -n "$hdr" ]
}

have_mpich() {
    command -v mpicc.mpich >/dev/null 2>&1 && command -v mpirun.mpich >/dev/null 2>&1
}

packages=()
have_mpi || packages+=(libopenmpi-dev openmpi-bin)
have_libclang || packages+=(libclang-dev)
[ $mpich -eq 0 ] || have_mpich || packages+=(mpich libmpich-dev)

if [ ${#packages[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-mpi: missing ${packages[*]}, and this system has no apt-get;" \
            "install an MPI library (with mpicc, mpirun) and libclang by hand" >&2
        exit 1
    fi
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "install-mpi: need root or sudo to install ${packages[*]}" >&2
            exit 1
        }
        sudo=(sudo)
    fi
    echo "install-mpi: installing ${packages[*]}"
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${packages[@]}"
fi

have_mpi && have_libclang || {
    echo "install-mpi: MPI or libclang still missing after the install" >&2
    exit 1
}
[ $mpich -eq 0 ] || have_mpich || {
    echo "install-mpi: MPICH still missing after the install" >&2
    exit 1
}
echo "install-mpi: $(mpirun --version 2>/dev/null | head -n 1); libclang present"
