#!/usr/bin/env bash
# Build amnet's C library (release) and install it under PREFIX (with --mpi, with the mpi
# conduit too, which needs an MPI library and libclang: ci/install-mpi.sh):
#   PREFIX/lib/libamnet.so, PREFIX/lib/libamnet.a, PREFIX/include/amnet.h,
#   PREFIX/include/gasnet.h (the GASNet-1 layer), PREFIX/lib/pkgconfig/amnet.pc
# after which `cc $(pkg-config --cflags --libs amnet) prog.c` builds a program (with
# PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when PREFIX is not a system prefix).
set -euo pipefail
features=()
if [ "${1:-}" = "--mpi" ]; then
    features=(--features mpi)
    shift
fi
if [ $# -ne 1 ]; then
    echo "usage: bash ci/install-capi.sh [--mpi] PREFIX" >&2
    exit 2
fi
mkdir -p "$1"
prefix=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
# The library's file names carry no hash of its features: a build with other features (the
# workspace's, without mpi) overwrites them while cargo may still count this variant as
# built, so the crate is rebuilt every time (its dependencies are not).
cargo clean --release -p amnet-capi >/dev/null 2>&1 || true
# Builds libamnet.so and libamnet.a, and notes the native libraries the static library needs
# as rustc reports them.
log=$(cargo rustc --release -p amnet-capi "${features[@]}" --lib -- --print native-static-libs 2>&1) || {
    echo "$log" >&2
    exit 1
}
native=$(echo "$log" | sed -n 's/.*native-static-libs: //p' | tail -1)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 755 "$target/release/libamnet.so" "$prefix/lib/"
install -m 644 "$target/release/libamnet.a" "$prefix/lib/"
install -m 644 capi/include/amnet.h capi/include/gasnet.h capi/include/gasnet_tools.h \
    capi/include/gasnet_coll.h capi/include/gasnet_vis.h capi/include/gasnet_handler.h \
    "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@LIBS_STATIC@|$native|" \
    capi/amnet.pc.in >"$prefix/lib/pkgconfig/amnet.pc"
echo "installed amnet $version under $prefix (pkg-config file: $prefix/lib/pkgconfig/amnet.pc)"
