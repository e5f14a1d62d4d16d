#!/usr/bin/env bash
# rill bench produce and consume with TLS and/or --auth against the same without, on one
# machine, alternating: ROUNDS × {plain, auth, tls, tls+auth}, each on a fresh server
# with a throw-away CA (openssl). Prints one line per run: round, setup, workload,
# records/s. Usage: bench/security.sh   (MSG=1000000 ROUNDS=3 by default; SETUPS="plain tls"
# runs only those; RILL=PATH benches another build of the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
RILL=${RILL:-target/release/rill}
[[ -x $RILL ]] || cargo build --release -p rill-cli
MSG=${MSG:-1000000}
ROUNDS=${ROUNDS:-3}
SETUPS=${SETUPS:-plain auth tls tlsauth}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$D/ca.key" -out "$D/ca.pem" -days 2 -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$D/server.key" -out "$D/server.csr" -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$D/ext.cnf"
openssl x509 -req -in "$D/server.csr" -CA "$D/ca.pem" -CAkey "$D/ca.key" -CAcreateserial \
  -out "$D/server.pem" -days 2 -extfile "$D/ext.cnf" 2>/dev/null
echo "bench-admin-password" >"$D/pw"

run_one() { # round, setup, serve flags...
  local round=$1 name=$2
  shift 2
  rm -rf "$D/data"
  RILL_LOG=warn "$RILL" serve --data "$D/data" --listen 127.0.0.1:0 --http 127.0.0.1:0 "$@" 2>"$D/serve.log" >/dev/null &
  local pid=$!
  local addr=""
  for _ in $(seq 100); do
    addr=$(sed -n 's/^rill listening on \([^ ]*\) .*/\1/p' "$D/serve.log")
    [[ -n $addr ]] && break
    sleep 0.1
  done
  local port=${addr##*:} url extra=() creds=(env -u RILL_USER -u RILL_PASSWORD -u RILL_TOKEN)
  case $name in
    tls*) url="rills://localhost:$port" extra=(--tls-ca "$D/ca.pem") ;;
    *) url="rill://127.0.0.1:$port" ;;
  esac
  case $name in *auth) creds=(env RILL_USER=admin RILL_PASSWORD=bench-admin-password) ;; esac
  for workload in produce consume; do
    local out rate
    if out=$("${creds[@]}" "$RILL" bench "$workload" --server "$url" "${extra[@]}" \
      --messages "$MSG" --warmup 50000 2>&1); then
      rate=$(sed -n 's/.*throughput: \([0-9]*\) records\/s.*/\1/p' <<<"$out")
    else
      rate=failed
      printf 'round %s, %s %s failed:\n%s\n' "$round" "$name" "$workload" "$out" >&2
    fi
    printf '%s\t%s\t%s\t%s\n' "$round" "$name" "$workload" "$rate"
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

for round in $(seq "$ROUNDS"); do
  for setup in $SETUPS; do
    case $setup in
      plain) run_one "$round" plain ;;
      auth) run_one "$round" auth --auth --admin-password-file "$D/pw" ;;
      tls) run_one "$round" tls --tls-cert "$D/server.pem" --tls-key "$D/server.key" ;;
      tlsauth) run_one "$round" tlsauth --auth --admin-password-file "$D/pw" \
        --tls-cert "$D/server.pem" --tls-key "$D/server.key" ;;
      *) echo "unknown setup $setup (plain, auth, tls, tlsauth)" >&2; exit 2 ;;
    esac
  done
done
