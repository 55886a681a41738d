#!/usr/bin/env bash
# The conduit test suite the way users run it: through amrun, as real multi-process jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin amrun --bin amnet-testsuite --example demo
for n in 2 4 8; do
    echo "== amrun -n $n amnet-testsuite"
    target/release/amrun -n "$n" --timeout 600 target/release/amnet-testsuite
done
for n in 3 7; do
    echo "== amrun -n $n amnet-testsuite coll"
    target/release/amrun -n "$n" --timeout 300 target/release/amnet-testsuite coll
done
echo "== amrun -n 4 demo"
target/release/amrun -n 4 --timeout 120 target/release/examples/demo
