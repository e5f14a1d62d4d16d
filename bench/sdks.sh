#!/usr/bin/env bash
# The SDKs for other languages against `rill bench`, on one release server, in one run:
# ROUNDS rounds, each running every workload once in turn (so noise hits all alike), then
# the median of each and its ratio to `rill bench` with the same shape.
#
# Usage: bench/sdks.sh            (after the release builds below)
#   cargo build --release -p rill-cli
#   (cd sdk/python && VIRTUAL_ENV=$PWD/.venv CARGO_TARGET_DIR=$PWD/../../target \
#      .venv/bin/maturin develop --release --locked)
#   (cd sdk/node && CARGO_TARGET_DIR=$PWD/../../target npm run build)
# Environment: ROUNDS (3), SIZES ("1024 100"), MESSAGES (500000), BATCH (1000),
#   RILL (target/release/rill), PYTHON (sdk/python/.venv/bin/python), NODE (node),
#   PEERS=1 also runs the clients a user of each language would pick instead against
#   Redis Streams and NATS JetStream (bench/sdk/peers.py and peers.cjs; needs
#   redis-server and nats-server, see bench/peers/install, and installs redis, nats-py,
#   ioredis and nats from the registries into a scratch directory).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-"1024 100"}
MESSAGES=${MESSAGES:-500000}
BATCH=${BATCH:-1000}
RILL=${RILL:-target/release/rill}
PYTHON=${PYTHON:-sdk/python/.venv/bin/python}
NODE=${NODE:-node}
OUT=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$OUT"' EXIT

"$RILL" serve --data "$OUT/data" --listen 127.0.0.1:0 --http 127.0.0.1:0 2> "$OUT/serve.log" > /dev/null &
for _ in $(seq 100); do
  grep -q "rill listening on" "$OUT/serve.log" && break
  sleep 0.1
done
ADDR=$(sed -n 's/.*rill listening on \([^ ]*\).*/\1/p' "$OUT/serve.log" | head -1)
[ -n "$ADDR" ] || { cat "$OUT/serve.log" >&2; exit 1; }
URL="rill://$ADDR"

if [ "${PEERS:-0}" = 1 ]; then
  PEERDIR="$OUT/peers"
  mkdir -p "$PEERDIR"
  "$PYTHON" -m pip install --quiet --target "$PEERDIR/py" redis==8.2.0 nats-py==2.16.0
  (cd "$PEERDIR" && npm init -y > /dev/null && npm install --silent --no-audit --no-fund ioredis@6.1.0 nats@2.29.3)
  free_port() { "$PYTHON" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
  REDIS_PORT=$(free_port)
  NATS_PORT=$(free_port)
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$OUT" > /dev/null &
  nats-server -js -a 127.0.0.1 -p "$NATS_PORT" -sd "$OUT/nats" > /dev/null 2>&1 &
  sleep 1
fi

run() { # label command...
  local label=$1
  shift
  if "$@" > "$OUT/line" 2> "$OUT/err"; then
    sed "s/^/$label /" "$OUT/line" | tail -1 | tee -a "$OUT/results"
  else
    echo "$label FAILED: $(tail -3 "$OUT/err" | tr '\n' ' ')" | tee -a "$OUT/results"
  fi
}

for round in $(seq "$ROUNDS"); do
  for size in $SIZES; do
    shape=(--messages "$MESSAGES" --size "$size" --batch "$BATCH")
    for w in produce consume; do
      run "$round rill-bench $w $size" "$RILL" bench "$w" --server "$URL" "${shape[@]}" --json
    done
    for w in produce consume group; do
      run "$round python $w $size" "$PYTHON" bench/sdk/bench.py "$w" "$URL" "${shape[@]}"
      run "$round node $w $size" "$NODE" bench/sdk/bench.mjs "$w" "$URL" "${shape[@]}"
    done
    if [ "${PEERS:-0}" = 1 ]; then
      for peer in redis nats; do
        run "$round python-$peer produce $size" env PYTHONPATH="$PEERDIR/py" "$PYTHON" bench/sdk/peers.py "$peer" \
          "127.0.0.1:$([ $peer = redis ] && echo "$REDIS_PORT" || echo "$NATS_PORT")" "${shape[@]}"
        run "$round node-$peer produce $size" env NODE_PATH="$PEERDIR/node_modules" "$NODE" bench/sdk/peers.cjs "$peer" \
          "127.0.0.1:$([ $peer = redis ] && echo "$REDIS_PORT" || echo "$NATS_PORT")" "${shape[@]}"
      done
    fi
  done
done

echo "== medians (records/s, MB/s, ratio to rill bench with the same shape)"
"$PYTHON" - "$OUT/results" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    parts = line.split(" ", 4)
    if len(parts) < 5 or "FAILED" in line:
        continue
    _, who, workload, size, body = parts
    d = json.loads(body)
    runs.setdefault((who, workload, int(size)), []).append(d["records_per_s"])
for (who, workload, size), rates in sorted(runs.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
    median = statistics.median(rates)
    base = runs.get(("rill-bench", "consume" if workload in ("consume", "group") else "produce", size))
    ratio = f"{median / statistics.median(base):.2f}x" if base else "-"
    print(f"{who:14} {workload:8} {size:5}B  {median:12,.0f} rec/s  {median*size/1e6:8.1f} MB/s  {ratio}  (n={len(rates)})")
PY
