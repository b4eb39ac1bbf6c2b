#!/usr/bin/env bash
# The waiting-room step of `make demo`, N times in a row (not in CI): how
# often does it stall? Starts an edge, an order service and a compensator
# against the local infra (infra/local/up.sh), then for each run warms a
# sale of its own up (100 units, the start 8 s ahead, 40 buyers in at a
# time, 3,000 a minute), lets 1,000 buyers through its room
# (infra/demo_queue.py) and waits up to 60 s for the pipeline to drain it
# (seckillctl reconcile --wait-drain). A run that does not balance is a
# stall: its reconciliation and PostgreSQL's sessions are kept in the logs.
# Prints one line per run and the count at the end; exits 1 if any stalled.
#
#   infra/queue_repeat.sh [RUNS]        (default 30; SECKILL_BIN: the binaries to run)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RUNS="${1:-30}"
BIN="${SECKILL_BIN:-$ROOT/target/debug}"
LOGS="${SECKILL_DATA:-$ROOT/.data}/logs/queue-repeat"
mkdir -p "$LOGS"
export SECKILL_ADMIN_TOKEN="${SECKILL_ADMIN_TOKEN:-demo-admin-token}"
export SECKILL_PAYMENT_WEBHOOK_SECRET="${SECKILL_PAYMENT_WEBHOOK_SECRET:-demo-payment-webhook-secret-0123456789}"
export RUST_LOG="${RUST_LOG:-warn}"
EDGE=127.0.0.1:8080
CTL="$BIN/seckillctl"

PIDS=()
stop_all() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT
start() {
  local name="$1"; shift
  env "$@" "$BIN/$name" >"$LOGS/$name.log" 2>&1 &
  PIDS+=($!)
}
start seckill-order
start seckill-compensator
start seckill-edge SECKILL__ADMISSION__SIGNING_KEY=queue-repeat-signing-key-0123456789abcdef \
  SECKILL__STATUS_READS__PER_CLIENT_PER_SECOND=5000 SECKILL__STATUS_READS__PER_CLIENT_BURST=5000
for url in "http://$EDGE/readyz" http://127.0.0.1:9101/readyz http://127.0.0.1:9102/readyz; do
  for _ in $(seq 1 120); do curl -fsS "$url" >/dev/null 2>&1 && break; sleep 0.5; done
  curl -fsS "$url" >/dev/null || { echo "queue_repeat: $url not ready; see $LOGS" >&2; exit 1; }
done

# Each run a SKU of its own, new every time the script runs.
base=$(( $(date +%s) % 100000 * 100 ))
stalled=0
for run in $(seq 1 "$RUNS"); do
  sku=$(( base + run ))
  began=$(date +%s.%N)
  starts="$(date -u -d '+8 seconds' +%Y-%m-%dT%H:%M:%SZ)"
  "$CTL" warmup --activity 1009 --sku "$sku" --stock 100 --starts-at "$starts" --force \
    --admission '{"activeBuyers":40,"admitPerMinute":3000,"prequeueSeconds":600}' >/dev/null
  verdict=balanced
  if ! python3 "$ROOT/infra/demo_queue.py" "$EDGE" 1009 "$sku" 100 1000 40 3000 8 "$CTL" >"$LOGS/run-$run.txt" 2>&1; then
    verdict="the room's step failed"
  elif ! "$CTL" reconcile --activity 1009 --sku "$sku" --wait-drain 60 >"$LOGS/run-$run-reconcile.txt" 2>&1; then
    verdict="STALLED: $(grep -E '^(orders created|events|verdict)' "$LOGS/run-$run-reconcile.txt" | tr '\n' ';' | cut -c1-200)"
  fi
  if [[ $verdict != balanced ]]; then
    stalled=$((stalled + 1))
    "$ROOT/infra/local/pg_sessions.sh" >"$LOGS/run-$run-sessions.txt" 2>&1 || true
  fi
  printf 'run %2d (sku %s): %s in %.1f s\n' "$run" "$sku" "$verdict" "$(awk -v a="$began" -v b="$(date +%s.%N)" 'BEGIN{print b - a}')"
done
echo "stalled: $stalled of $RUNS runs (logs: $LOGS)"
(( stalled == 0 ))
