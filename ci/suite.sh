#!/usr/bin/env bash
# The conduit test suite the way users run it: through amrun, as real multi-process jobs, on
# every conduit (smp, udp, mpi, ofi, ibv), udp also on a lossy network, udp and ofi across two
# network namespaces, mpi under Open MPI and MPICH, ofi on libfabric's tcp, shm and udp
# providers, ibv on its emulated device.
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'echo "suite: FAILED at line $LINENO: $BASH_COMMAND (exit code $?)" >&2' ERR
cargo build --release --bin amrun --bin amnet-testsuite --example demo
for n in 2 4 8; do
    echo "== amrun -n $n amnet-testsuite"
    target/release/amrun -n "$n" --timeout 600 target/release/amnet-testsuite
done
# The endpoint barrier over active messages where the ranks share a host (flags by default).
echo "== amrun -n 3 amnet-testsuite barrier, AMNET_BARRIER=am"
AMNET_BARRIER=am target/release/amrun -n 3 --timeout 300 target/release/amnet-testsuite barrier
for n in 3 7; do
    echo "== amrun -n $n amnet-testsuite coll"
    target/release/amrun -n "$n" --timeout 300 target/release/amnet-testsuite coll
done
# The scheduled algorithms preferred wherever they apply (the selector's default picks them
# only where its cost model says they are faster).
for n in 3 8; do
    echo "== amrun -n $n amnet-testsuite coll, scheduled algorithms preferred"
    AMNET_COLL_TUNE='broadcast:-:binomial?;reduce_to_all:-:recursive_doubling?' \
        target/release/amrun -n "$n" --timeout 300 target/release/amnet-testsuite coll
    AMNET_COLL_TUNE='broadcast:-:knomial?:radix=3' \
        target/release/amrun -n "$n" --timeout 300 target/release/amnet-testsuite coll
    # The data-movement algorithms, each preferred over every size (one value per algorithm of
    # an operation; several operations share a value); the last value also runs every entry and
    # exit signal and team barrier as a tree.
    for tune in \
        'broadcast:-:scatter_allgather?;scatter:-:binomial?;gather:-:binomial?;gather_all:-:ring?;exchange:-:pairwise?' \
        'broadcast:-:pipeline?:chunk=1000;gather_all:-:recursive_doubling?;exchange:-:bruck?' \
        'broadcast:-4K:pipeline?:chunk=16;broadcast:4K-:pipeline?;gather_all:-:bruck?' \
        'gather_all:-:gather_broadcast?;barrier:-:tree'; do
        echo "== AMNET_COLL_TUNE='$tune'"
        AMNET_COLL_TUNE="$tune" \
            target/release/amrun -n "$n" --timeout 300 target/release/amnet-testsuite coll
    done
    # The reductions' trees and prefix schemes and the vector reductions' algorithms (where an
    # operation has several, each takes a range of sizes).
    AMNET_COLL_TUNE='reduce:0-64:binomial?;reduce:65-:knomial?:radix=3;reduce_to_all:-:reduce_broadcast?;prefix_reduce:0-64:dissemination?;prefix_reduce:65-:chain?;exclusive_prefix_reduce:0-64:chain?;exclusive_prefix_reduce:65-:dissemination?;reduce_elems:0-64:binomial?;reduce_elems:65-:reduce_scatter_gather?;reduce_elems_to_all:0-256:recursive_doubling?;reduce_elems_to_all:257-4K:ring?;reduce_elems_to_all:4K-:rabenseifner?;scan_elems:-:dissemination?;exclusive_scan_elems:-:dissemination?' \
        target/release/amrun -n "$n" --timeout 300 target/release/amnet-testsuite coll
done
# udp on one host: with the host-local bypass (the default: every message through the smp
# rings), and without it, where the datagrams, their loss and their authentication are tested.
for n in 2 8; do
    echo "== amrun --conduit udp -n $n amnet-testsuite (host-local bypass)"
    target/release/amrun --conduit udp -n "$n" --timeout 900 target/release/amnet-testsuite
done
for n in 2 4 8; do
    echo "== amrun --conduit udp -n $n amnet-testsuite, AMNET_HOST_BYPASS=0"
    AMNET_HOST_BYPASS=0 \
        target/release/amrun --conduit udp -n "$n" --timeout 900 target/release/amnet-testsuite
done
for n in 2 4 8; do
    echo "== amrun --conduit udp -n $n amnet-testsuite, AMNET_HOST_BYPASS=0, 10% loss + 5% duplication + 10% reordering"
    AMNET_HOST_BYPASS=0 AMNET_UDP_LOSS=0.1 AMNET_UDP_DUP=0.05 AMNET_UDP_REORDER=0.1 \
        target/release/amrun --conduit udp -n "$n" --timeout 900 target/release/amnet-testsuite
done
echo "== amrun --conduit udp -n 4 amnet-testsuite, AMNET_HOST_BYPASS=0, 30% loss"
AMNET_HOST_BYPASS=0 AMNET_UDP_LOSS=0.3 \
    target/release/amrun --conduit udp -n 4 --timeout 900 target/release/amnet-testsuite
echo "== amrun --conduit udp -n 4 amnet-testsuite, AMNET_HOST_BYPASS=0, authenticated datagrams (AMNET_UDP_AUTH=1)"
AMNET_HOST_BYPASS=0 AMNET_UDP_AUTH=1 \
    target/release/amrun --conduit udp -n 4 --timeout 900 target/release/amnet-testsuite
bash ci/netns.sh udp
# The mpi conduit (Open MPI, installed by ci/install-mpi.sh): the same suite through mpirun.
# Every rank here shares one host, so the host-local bypass (on by default) would carry all
# of it: MPI's own path runs with AMNET_HOST_BYPASS=0, the bypass at 4 ranks.
cargo build --release --features amnet/mpi --bin amrun --bin amnet-testsuite
for n in 2 3 4; do
    echo "== amrun --conduit mpi -n $n amnet-testsuite (AMNET_HOST_BYPASS=0)"
    AMNET_HOST_BYPASS=0 target/release/amrun --conduit mpi -n "$n" --timeout 900 \
        target/release/amnet-testsuite
done
echo "== amrun --conduit mpi -n 4 amnet-testsuite, host-local bypass"
target/release/amrun --conduit mpi -n 4 --timeout 900 target/release/amnet-testsuite
echo "== amrun --conduit mpi -n 2 amnet-testsuite, put/get on the AM path (AMNET_RMA=am)"
AMNET_HOST_BYPASS=0 AMNET_RMA=am target/release/amrun --conduit mpi -n 2 --timeout 900 \
    target/release/amnet-testsuite
# The same under MPICH, built against it in target/mpich (installs MPICH when missing).
bash ci/mpich.sh
# The ofi conduit (libfabric, installed by ci/install-ofi.sh) on the provider it chooses here,
# tcp;ofi_rxm, bound to the launcher's address (loopback); also in the ofi_tag_2 layout. On one
# host the bypass would carry every message: these runs set AMNET_HOST_BYPASS=0 (the bypass
# runs across the namespaces, below).
cargo build --release --features amnet/ofi --bin amrun --bin amnet-testsuite
for n in 2 4 8; do
    echo "== amrun --conduit ofi -n $n amnet-testsuite (AMNET_HOST_BYPASS=0)"
    AMNET_HOST_BYPASS=0 target/release/amrun --conduit ofi -n "$n" --timeout 900 \
        target/release/amnet-testsuite
done
echo "== amrun --conduit ofi -n 2 amnet-testsuite, AMNET_HOST_BYPASS=0, AMNET_OFI_TAG_MODE=ofi_tag_2"
AMNET_HOST_BYPASS=0 AMNET_OFI_TAG_MODE=ofi_tag_2 target/release/amrun --conduit ofi -n 2 \
    --timeout 900 target/release/amnet-testsuite
# Split Longs as tagged data messages rather than writes, on tcp.
echo "== amrun --conduit ofi -n 2 amnet-testsuite am_long, AMNET_HOST_BYPASS=0, AMNET_OFI_LONG_WRITE=0"
AMNET_HOST_BYPASS=0 AMNET_OFI_LONG_WRITE=0 target/release/amrun --conduit ofi -n 2 \
    --timeout 300 target/release/amnet-testsuite am_long
# ... on libfabric's shm provider at 4 ranks and udp;ofi_rxd at 2 (udp bound to loopback);
echo "== amrun --conduit ofi -n 4 amnet-testsuite, AMNET_HOST_BYPASS=0, AMNET_OFI_PROVIDER_INCLUDE=shm"
AMNET_HOST_BYPASS=0 AMNET_OFI_PROVIDER_INCLUDE=shm target/release/amrun --conduit ofi -n 4 \
    --timeout 900 target/release/amnet-testsuite
echo "== amrun --conduit ofi -n 2 amnet-testsuite, AMNET_HOST_BYPASS=0, AMNET_OFI_PROVIDER_INCLUDE=udp"
AMNET_HOST_BYPASS=0 AMNET_OFI_PROVIDER_INCLUDE=udp target/release/amrun --conduit ofi -n 2 \
    --timeout 900 target/release/amnet-testsuite
# ... and across two network namespaces over tcp.
bash ci/netns.sh ofi
# The ibv conduit on its emulated device (no RDMA device exists here), with the host-local
# bypass off (every message through the device's queue pairs) and on (at 4 ranks, where it
# carries the messages and the device registers the shared segment).
for n in 2 4 8; do
    echo "== amrun --conduit ibv -n $n amnet-testsuite (AMNET_IBV_DEVICE=emu, AMNET_HOST_BYPASS=0)"
    AMNET_IBV_DEVICE=emu AMNET_HOST_BYPASS=0 target/release/amrun --conduit ibv -n "$n" \
        --timeout 900 target/release/amnet-testsuite
done
echo "== amrun --conduit ibv -n 4 amnet-testsuite (AMNET_IBV_DEVICE=emu)"
AMNET_IBV_DEVICE=emu target/release/amrun --conduit ibv -n 4 --timeout 900 \
    target/release/amnet-testsuite
echo "== amrun -n 4 demo"
target/release/amrun -n 4 --timeout 120 target/release/examples/demo
