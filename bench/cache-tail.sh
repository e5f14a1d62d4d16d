#!/usr/bin/env bash
# A long produce with the page cache full, as on a host that has run for a while: the
# log's drop-behind (cache_tail_bytes, default 2 GiB) against RILL_CACHE_TAIL_BYTES=off,
# in ABBA order, each run on a fresh server and data directory. Before each run it reads
# a FILL_GB file (made once, kept in the data's parent directory until the end) so that
# the cache is full. Prints the machine's limits first, then per run the throughput and
# the MB/s of each gigabyte.
#
# Usage: bench/cache-tail.sh   (MSG=10000000 records of 1 KiB, ROUNDS=2, FILL_GB=16,
# DIR=a directory on the disk to measure, default a fresh one under /tmp;
# RILL=PATH benches another build). Needs MSG KiB + FILL_GB of free disk space.
set -euo pipefail
cd "$(dirname "$0")/.."
RILL=${RILL:-target/release/rill}
[[ -x $RILL ]] || cargo build --release -p rill-cli
MSG=${MSG:-10000000}
ROUNDS=${ROUNDS:-2}
FILL_GB=${FILL_GB:-16}
D=${DIR:-$(mktemp -d)}
mkdir -p "$D"
trap 'rm -rf "$D/data" "$D/fill"' EXIT

dd if=/dev/zero of="$D/fill" bs=1M count=$((FILL_GB * 1024)) status=none
mkdir -p "$D/data"
"$RILL" bench limits --limits-dir "$D/data" 2>&1 | tail -4

run_one() { # round, tail setting ("off" or "default")
  local round=$1 tail=$2
  rm -rf "$D/data"
  cat "$D/fill" >/dev/null
  local free
  free=$(awk '/MemFree/ {print int($2 / 1024)}' /proc/meminfo)
  local env=(env -u RILL_CACHE_TAIL_BYTES)
  [[ $tail == off ]] && env=(env RILL_CACHE_TAIL_BYTES=off)
  RILL_LOG=warn "${env[@]}" "$RILL" serve --data "$D/data" --listen 127.0.0.1:0 2>"$D/serve.log" >/dev/null &
  local pid=$!
  local addr=""
  for _ in $(seq 100); do
    addr=$(sed -n 's/^rill listening on \([^ ]*\).*/\1/p' "$D/serve.log")
    [[ -n $addr ]] && break
    sleep 0.1
  done
  local out
  out=$("$RILL" bench produce --server "rill://$addr" --messages "$MSG" 2>&1)
  printf 'round %s, cache tail %s (%s MiB free before): %s |%s\n' "$round" "$tail" "$free" \
    "$(grep -o '[0-9.]* MB/s$' <<<"$(grep throughput <<<"$out")")" \
    "$(sed -n 's/.*MB\/s per gigabyte://p' <<<"$out")"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

for round in $(seq "$ROUNDS"); do
  if ((round % 2)); then order="off default"; else order="default off"; fi
  for tail in $order; do
    run_one "$round" "$tail"
  done
done
