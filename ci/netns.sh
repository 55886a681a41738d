#!/usr/bin/env bash
# A conduit across two hosts (`bash ci/netns.sh udp|ofi`): two network namespaces joined by a
# veth pair stand for two machines on one Ethernet segment. The launcher runs in the first,
# ranks are spread over both ("remote" start through AMNET_SSH="ip netns exec"), and the
# conduit test suite runs as one job; for udp then again with loss, duplication and
# reordering, and without and with authenticated datagrams; for ofi on libfabric's tcp
# provider, which each rank binds to its namespace's veth address (the one it reaches the
# launcher from). Both run with the host-local bypass on and off (the second namespace's
# loopback shows whether its two ranks talked through the network). Skipped, with the reason,
# only where namespaces or a veth pair cannot be created.
set -euo pipefail
cd "$(dirname "$0")/.."
CONDUIT=${1:-udp}
trap 'echo "netns ($CONDUIT): FAILED at line $LINENO: $BASH_COMMAND (exit code $?)" >&2' ERR
# udp: 3 ranks in the first namespace and 2 in the second; ofi: 2 and 2.
if [ "$CONDUIT" = udp ]; then RANKS=${RANKS:-5}; else RANKS=${RANKS:-4}; fi
case "$CONDUIT" in
    udp) FEATURES=() ;;
    ofi) FEATURES=(--features amnet/ofi) ;;
    *)
        echo "netns: unknown conduit '$CONDUIT' (udp or ofi)" >&2
        exit 2
        ;;
esac

SUDO=""
if [ "$(id -u)" != 0 ]; then
    if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
        echo "netns ($CONDUIT): SKIPPED: network namespaces need root (or password-less sudo)"
        exit 0
    fi
fi
if ! command -v ip >/dev/null; then
    echo "netns ($CONDUIT): installing iproute2"
    $SUDO apt-get install -y -qq --no-install-recommends iproute2 >/dev/null \
        || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends iproute2 >/dev/null; }
fi

cargo build --release "${FEATURES[@]}" --bin amrun --bin amnet-testsuite

A="amnA$$"
B="amnB$$"
VA="va$$"
VB="vb$$"
cleanup() {
    $SUDO ip netns del "$A" 2>/dev/null || true
    $SUDO ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT
if ! err=$($SUDO ip netns add "$A" 2>&1); then
    echo "netns ($CONDUIT): SKIPPED: cannot create a network namespace: $err"
    exit 0
fi
$SUDO ip netns add "$B"
if ! err=$($SUDO ip link add "$VA" type veth peer name "$VB" 2>&1); then
    echo "netns ($CONDUIT): SKIPPED: cannot create a veth pair: $err"
    exit 0
fi
$SUDO ip link set "$VA" netns "$A"
$SUDO ip link set "$VB" netns "$B"
$SUDO ip -n "$A" addr add 198.18.0.1/24 dev "$VA"
$SUDO ip -n "$B" addr add 198.18.0.2/24 dev "$VB"
for ns in "$A" "$B"; do $SUDO ip -n "$ns" link set lo up; done
$SUDO ip -n "$A" link set "$VA" up
$SUDO ip -n "$B" link set "$VB" up
$SUDO ip netns exec "$A" ping -c 1 -W 2 198.18.0.2 >/dev/null 2>&1 \
    || echo "netns ($CONDUIT): note: ping between the namespaces failed (no ping?); going on"

run() {
    echo "== $CONDUIT across namespaces $A,$B: $RANKS ranks $*"
    $SUDO ip netns exec "$A" env AMNET_SSH="ip netns exec" AMNET_UDP_BOOT_ADDR=198.18.0.1 "$@" \
        target/release/amrun --conduit "$CONDUIT" -n "$RANKS" --hosts "$A,$B" --timeout 900 \
        target/release/amnet-testsuite
}
# Bytes the second namespace's loopback carried: its ranks' datagrams to one another (they
# reach the launcher and the first namespace over the veth link).
lo_bytes() { $SUDO ip netns exec "$B" cat /sys/class/net/lo/statistics/tx_bytes; }
# `run_lo MIN MAX ENV...`: run, and check the loopback bytes of the run lie in [MIN, MAX].
run_lo() {
    local lo_min=$1 lo_max=$2 before after
    shift 2
    before=$(lo_bytes)
    run "$@"
    after=$(lo_bytes)
    echo "netns ($CONDUIT): the second namespace's loopback carried $((after - before)) bytes"
    if [ $((after - before)) -lt "$lo_min" ] || [ $((after - before)) -gt "$lo_max" ]; then
        echo "netns ($CONDUIT): FAILED: expected $lo_min to $lo_max bytes on the loopback"
        exit 1
    fi
}
# The host-local bypass (default): the two ranks of the second namespace send each other
# nothing over its loopback; without it, megabytes.
if [ "$CONDUIT" = ofi ]; then
    run_lo 0 65536 AMNET_OFI_PROVIDER_INCLUDE=tcp
    run_lo 1000000 1000000000000 AMNET_OFI_PROVIDER_INCLUDE=tcp AMNET_HOST_BYPASS=0
else
    run_lo 0 65536
    run_lo 1000000 1000000000000 AMNET_HOST_BYPASS=0
    # Loss, duplication and reordering come from the conduit's own fault injection at the
    # socket edge, the same on every kernel (tc netem is missing from many); they apply to
    # the network path only.
    run AMNET_UDP_LOSS=0.1 AMNET_UDP_DUP=0.05 AMNET_UDP_REORDER=0.1
    # Authenticated datagrams: the secret reaches every rank on the standard input of the
    # "remote" start, never on its command line.
    run AMNET_UDP_AUTH=1 AMNET_UDP_LOSS=0.1 AMNET_UDP_DUP=0.05 AMNET_UDP_REORDER=0.1
fi
# The ranks in the second namespace must really have talked over the link.
rx=$($SUDO ip netns exec "$B" cat "/sys/class/net/$VB/statistics/rx_bytes")
tx=$($SUDO ip netns exec "$B" cat "/sys/class/net/$VB/statistics/tx_bytes")
echo "netns ($CONDUIT): the second namespace's link carried $rx bytes in, $tx bytes out"
if [ "$rx" -lt 1000000 ] || [ "$tx" -lt 1000000 ]; then
    echo "netns ($CONDUIT): FAILED: almost no traffic crossed the link; were the ranks spread?"
    exit 1
fi
echo "netns ($CONDUIT): passed"
