#!/usr/bin/env bash
# Fails when a test or the launcher left amnet shared-memory objects behind.
set -euo pipefail
left=$(ls /dev/shm 2>/dev/null | grep '^amnet-' || true)
if [ -n "$left" ]; then
    echo "shared-memory objects left in /dev/shm:" >&2
    echo "$left" >&2
    exit 1
fi
echo "no amnet objects left in /dev/shm"
