#!/usr/bin/env bash
# Installs what the ofi conduit (conduits/ofi, crate amnet-ofi) needs to build and run its
# tests: libfabric with its headers and pkg-config file (libfabric-dev), its tools
# (libfabric-bin: fi_info, fi_pingpong) and pkg-config. Idempotent: installs only what is
# missing. Debian and Ubuntu (apt-get); uses sudo unless run as root.
set -euo pipefail

have_fabric() {
    command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libfabric &&
        command -v fi_info >/dev/null 2>&1
}

if ! have_fabric; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-ofi: libfabric (headers, pkg-config file, fi_info) is missing, and this" \
            "system has no apt-get; install libfabric 1.10 or later by hand" >&2
        exit 1
    fi
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "install-ofi: need root or sudo to install libfabric" >&2
            exit 1
        }
        sudo=(sudo)
    fi
    echo "install-ofi: installing libfabric-dev libfabric-bin pkg-config"
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends libfabric-dev libfabric-bin pkg-config
fi

have_fabric || {
    echo "install-ofi: libfabric still missing after the install" >&2
    exit 1
}
echo "install-ofi: libfabric $(pkg-config --modversion libfabric); providers:" \
    "$(fi_info -l 2>/dev/null | grep -v '^ ' | tr -d ':' | tr '\n' ' ')"
