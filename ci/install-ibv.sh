#!/usr/bin/env bash
# Installs what the ibv conduit's libibverbs device (conduits/ibv, crate amnet-ibv, cargo
# feature `ibv`) needs to build and run its tests: libibverbs and librdmacm with their headers
# and pkg-config files (libibverbs-dev, librdmacm-dev), rdma-core's user-space set-up and
# pkg-config. Idempotent: installs only what is missing. Debian and Ubuntu (apt-get); uses sudo
# unless run as root. The tests that need an RDMA device pass with a "skipped" line where the
# host has none.
set -euo pipefail

packages=(libibverbs-dev librdmacm-dev rdma-core pkg-config)

# The packages of the list that are not installed (all of them where dpkg is missing and
# libibverbs' header or pkg-config file is).
missing() {
    if command -v dpkg-query >/dev/null 2>&1; then
        local p
        for p in "${packages[@]}"; do
            dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed ||
                echo "$p"
        done
    elif ! have_verbs; then
        echo "${packages[@]}"
    fi
}

have_verbs() {
    command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libibverbs &&
        [ -e "$(pkg-config --variable=includedir libibverbs)/infiniband/verbs.h" ]
}

todo=$(missing)
if [ -n "$todo" ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-ibv: missing $todo, and this system has no apt-get; install rdma-core's" \
            "libibverbs with its headers and pkg-config file by hand" >&2
        have_verbs && exit 0
        exit 1
    fi
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "install-ibv: need root or sudo to install $todo" >&2
            exit 1
        }
        sudo=(sudo)
    fi
    echo "install-ibv: installing $todo"
    "${sudo[@]}" apt-get update -q
    # shellcheck disable=SC2086 # one word per package
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends $todo
fi

have_verbs || {
    echo "install-ibv: libibverbs (header or pkg-config file) still missing after the install" >&2
    exit 1
}
devices=$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ' || true)
echo "install-ibv: libibverbs $(pkg-config --modversion libibverbs); RDMA devices:" \
    "${devices:-none (the tests that need one will say skipped)}"
