#!/usr/bin/env bash
# The flash-sale demo (`make demo`): starts the edge, the order service and
# the compensator against the local infra, runs the seed's curl check, a
# 20,000-user load test, a sale with a payment window (unpaid orders
# cancelled, their units sold again), a sale of several units per order
# with a limit per buyer (infra/demo_quantities.py), a release of 14 sizes
# sold one per customer (infra/demo_release.py), a redrive of a wave of failures
# (infra/demo_redrive.py), a sale through its waiting room, a draw anyone
# can verify (infra/demo_draw.py), one order
# traced from its request to its event (its spans exported over OTLP),
# waits for the pipeline to drain, prints the reconciliations, and stops
# everything it started.
#
# `infra/demo.sh --cluster` (`make demo-cluster`) does the same on the
# replicated topology (infra/local/up.sh --cluster): two edges behind HAProxy
# on :8080, two order services, two compensators, three Kafka brokers and
# Redis found through Sentinel.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CLUSTER=0
[[ "${1:-}" == "--cluster" ]] && CLUSTER=1
PROFILE="${PROFILE:-dev}"
# SECKILL_BIN: where the four binaries are (infra/image/demo.sh points it at
# wrappers that run them from the container image).
BIN="${SECKILL_BIN:-$ROOT/target/$([[ $PROFILE == release ]] && echo release || echo debug)}"
LOGS="${SECKILL_DATA:-$ROOT/.data}/logs"
mkdir -p "$LOGS"

export SECKILL_ADMIN_TOKEN="${SECKILL_ADMIN_TOKEN:-demo-admin-token}"
# The demo stands in for the payment provider (infra/demo_lifecycle.py signs
# its notifications with this secret).
export SECKILL_PAYMENT_WEBHOOK_SECRET="${SECKILL_PAYMENT_WEBHOOK_SECRET:-demo-payment-webhook-secret-0123456789}"
export RUST_LOG="${RUST_LOG:-warn}"
EDGE="${SECKILL_HTTP_ADDR:-127.0.0.1:8080}"
if (( CLUSTER )); then
  export SECKILL_REDIS_URL="redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/seckill"
  export SECKILL_KAFKA_BROKERS="127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"
  EDGE=127.0.0.1:8080   # HAProxy
  EDGE_ADDRS=(127.0.0.1:8081 127.0.0.1:8082)
  CONSOLE=127.0.0.1:9081   # the first edge's operators' console
  HEALTH_ADDRS=(127.0.0.1:9101 127.0.0.1:9103 127.0.0.1:9102 127.0.0.1:9104)
else
  EDGE_ADDRS=("$EDGE")
  CONSOLE="${SECKILL_ADMIN_ADDR:-127.0.0.1:9080}"
  HEALTH_ADDRS=(127.0.0.1:9101 127.0.0.1:9102)
fi

# Spans: exported to SECKILL_OTLP_ENDPOINT when it names a collector of
# yours; else to a small OTLP receiver of the demo's on :4318 that writes
# them to $SPANS. One trace in a hundred is kept, and every trace a
# trusted proxy's traceparent marks sampled: the demo's traced order comes
# from 127.0.0.1, which the edges trust as a proxy (as HAProxy is on the
# replicated topology); a buyer's own flag is not obeyed.
SPANS=""
RECEIVER_ADDRS=()
if [[ -z "${SECKILL_OTLP_ENDPOINT:-}" ]]; then
  SPANS="$LOGS/demo-spans.jsonl"
  RECEIVER_ADDRS=(127.0.0.1:4318)
  export SECKILL_OTLP_ENDPOINT=http://127.0.0.1:4318
fi
export SECKILL__TELEMETRY__OTLP_SAMPLE_RATIO="${SECKILL__TELEMETRY__OTLP_SAMPLE_RATIO:-0.01}"

PIDS=()
RECEIVER_PID=""
stop_all() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  PIDS=()
  # Last: the services send their last spans as they stop.
  [[ -n "$RECEIVER_PID" ]] && { kill -TERM "$RECEIVER_PID" 2>/dev/null || true; wait "$RECEIVER_PID" 2>/dev/null || true; }
  RECEIVER_PID=""
}
# A demo that failed says what was running and what the services logged,
# so a failure on a machine gone since (CI) can still be explained.
explain_failure() {
  local status=$?
  if (( status != 0 )); then
    for log in "$LOGS"/demo-seckill-*.log; do
      echo "--- the last warnings of $log" >&2
      sed -E 's/\x1b\[[0-9;]*m//g' "$log" | grep -E 'WARN|ERROR|panicked' | tail -n 8 | cut -c1-240 >&2 || true
    done
    echo "--- PostgreSQL's sessions in every database, and its prepared transactions (a wait or a transaction left open shows here)" >&2
    "$ROOT/infra/local/pg_sessions.sh" >&2 || true
    echo "demo: failed (exit $status); the pipeline's processes on this machine:" >&2
    ps -eo pid,ppid,stat,etime,args | grep -E '[s]eckill-(edge|order|compensator)' | cut -c1-160 >&2 || true
  fi
  stop_all
}
trap explain_failure EXIT

for addr in "${EDGE_ADDRS[@]}" "${HEALTH_ADDRS[@]}" "${RECEIVER_ADDRS[@]}"; do
  port="${addr##*:}"
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "demo: port $port is already in use (another demo or service running?)" >&2
    exit 1
  fi
done

# Every edge signs the waiting room's tokens with one key (any edge checks
# what another handed out); the demo's buyers all come from 127.0.0.1, so
# a client's status reads (and queue polls) may come a thousand a second.
EDGE_ENV=(
  "SECKILL__ADMISSION__SIGNING_KEY=${SECKILL__ADMISSION__SIGNING_KEY:-demo-admission-signing-key-0123456789abcdef}"
  SECKILL__STATUS_READS__PER_CLIENT_PER_SECOND=5000 SECKILL__STATUS_READS__PER_CLIENT_BURST=5000
  SECKILL__AUTH__TRUSTED_PROXIES=127.0.0.1/32
  # No user identity here: the demo's buyers are taken for their user id,
  # which also lets a draw's winner read its admission token as itself (a
  # token is shown only to a caller identified as its user).
  SECKILL__AUTH__ALLOW_ANONYMOUS=true
)

# start NAME LOG-SUFFIX [VAR=VALUE]...: a service, with its own settings.
start() {
  local name="$1" suffix="$2"; shift 2
  env "$@" "$BIN/$name" >"$LOGS/demo-$name$suffix.log" 2>&1 &
  PIDS+=($!)
}
wait_ready() {
  local name="$1" url="$2"
  for _ in $(seq 1 120); do
    if curl -fsS "$url" >/dev/null 2>&1; then echo "  $name ready ($url)"; return; fi
    sleep 0.5
  done
  echo "demo: $name did not become ready; see $LOGS/demo-*.log" >&2
  tail -n 20 "$LOGS"/demo-seckill-*.log >&2 || true
  exit 1
}

if [[ -n "$SPANS" ]]; then
  : >"$SPANS"
  "$ROOT/infra/local/otlp_receiver.sh" 4318 "$SPANS" >"$LOGS/demo-otlp-receiver.log" 2>&1 &
  RECEIVER_PID=$!
  for _ in $(seq 1 120); do (exec 3<>/dev/tcp/127.0.0.1/4318) 2>/dev/null && break; sleep 0.5; done
fi

echo "== starting the services ($PROFILE build$( ((CLUSTER)) && echo ', replicated topology'))"
if (( CLUSTER )); then
  start seckill-order -1 SECKILL__METRICS_ADDR=127.0.0.1:9101
  start seckill-order -2 SECKILL__METRICS_ADDR=127.0.0.1:9103
  start seckill-compensator -1 SECKILL__METRICS_ADDR=127.0.0.1:9102
  start seckill-compensator -2 SECKILL__METRICS_ADDR=127.0.0.1:9104
  # Each edge takes its share of the global rate limit.
  start seckill-edge -1 SECKILL_HTTP_ADDR=127.0.0.1:8081 SECKILL_ADMIN_ADDR=127.0.0.1:9081 SECKILL__RATE_LIMIT__GLOBAL_PER_SECOND=100000 "${EDGE_ENV[@]}"
  start seckill-edge -2 SECKILL_HTTP_ADDR=127.0.0.1:8082 SECKILL_ADMIN_ADDR=127.0.0.1:9082 SECKILL__RATE_LIMIT__GLOBAL_PER_SECOND=100000 "${EDGE_ENV[@]}"
else
  start seckill-order ""
  start seckill-compensator ""
  start seckill-edge "" "${EDGE_ENV[@]}"
fi
for addr in "${EDGE_ADDRS[@]}"; do wait_ready seckill-edge "http://$addr/readyz"; done
wait_ready "the operators' console" "http://$CONSOLE/readyz"
# The operators' routes answer on the console's address alone.
buyers_admin=$(curl -s -o /dev/null -w '%{http_code}' "http://${EDGE_ADDRS[0]}/admin/dashboard")
console_admin=$(curl -s -o /dev/null -w '%{http_code}' "http://$CONSOLE/admin/dashboard")
echo "  /admin/dashboard: $buyers_admin on the buyers' address, $console_admin on the console's"
[[ $buyers_admin == 404 && $console_admin == 200 ]] || { echo "demo: the console is not apart from the buyers' address" >&2; exit 1; }
for addr in "${HEALTH_ADDRS[@]}"; do wait_ready "service on $addr" "http://$addr/readyz"; done
(( CLUSTER )) && wait_ready "haproxy" "http://$EDGE/readyz"
# Sessions live in the edge that signed the browser in: one edge's console,
# on its own address (admin_addr), never behind the buyers' load balancer.
echo "  dashboard: http://$CONSOLE/admin/dashboard (up while the demo runs; sign in with the admin token$(
  [[ $SECKILL_ADMIN_TOKEN == demo-admin-token ]] && echo ": demo-admin-token" || echo " in SECKILL_ADMIN_TOKEN"))"

CTL="$BIN/seckillctl"

echo
echo "== the seed's check: 100 units, 2,000 users, 200 at a time (curl | xargs)"
"$CTL" warmup --activity 1001 --sku 2001 --stock 100 --force
# A 503 TRY_AGAIN kept nothing, and a client following the contract asks
# again: curl does (--retry), so the counts are each buyer's last answer.
# How many were asked again is the edge's own count, shown with its reasons.
# Each body goes to a file of its own: curl 7.88 cannot retry a transfer
# whose body went to /dev/null (it fails, exit 23, truncating it).
edge_try_again() {
  local sum=0 addr n
  for addr in "${EDGE_ADDRS[@]}"; do
    n="$(curl -fsS "http://$addr/metrics" | awk -F'[ }]+' '/^seckill_edge_orders_total\{outcome="TRY_AGAIN"/{print $NF}')"
    sum=$((sum + ${n:-0}))
  done
  echo "$sum"
}
try_again_before="$(edge_try_again)"
bodies="$(mktemp -d)"
seed_counts="$(seq 1 2000 | xargs -P 200 -I{} curl -s --retry 5 --retry-delay 1 -o "$bodies/{}" -w "%{http_code}\n" \
  -X POST "http://$EDGE/api/seckill/order" \
  -H 'Content-Type: application/json' -d '{"activityId":1001,"skuId":2001,"userId":{}}' | sort | uniq -c)"
rm -rf "$bodies"
echo "$seed_counts"
tried_again=$(( $(edge_try_again) - try_again_before ))
if (( tried_again > 0 )); then
  echo "  $tried_again answer(s) were 503 TRY_AGAIN and asked again; what the edge logged, most frequent first:"
  { sed -E 's/\x1b\[[0-9;]*m//g; s/^[^ ]+ +//' "$LOGS"/demo-seckill-edge*.log | grep -E '^(WARN|ERROR) ' \
    | grep -vE 'not ready|GETPID' | sed -E 's/[0-9]+-[0-9]+-[0-9]+-[0-9a-f]+/ORDER/g; s/[0-9.]+m?s\)/…)/g' \
    | sort | uniq -c | sort -rn | head -n 6 | cut -c1-220 | sed 's/^/   /'; } || true
fi
"$CTL" reconcile --activity 1001 --sku 2001 --wait-drain 60 >"$LOGS/demo-seed-reconcile.txt" || { cat "$LOGS/demo-seed-reconcile.txt"; exit 1; }
grep -E '^(orders created|verdict)' "$LOGS/demo-seed-reconcile.txt"
if [[ "$(echo "$seed_counts" | awk '$2==202{print $1}')" != 100 || "$(echo "$seed_counts" | awk '$2==410{print $1}')" != 1900 ]]; then
  echo "demo: the seed's check expected 100 x 202 and 1900 x 410" >&2
  exit 1
fi

echo
echo "== the flash sale: 1,000 units, 20,000 users, 256 connections, 5% retries"
"$CTL" warmup --activity 1001 --sku 2002 --stock 1000 --force
"$CTL" bench --url "http://$EDGE" --activity 1001 --sku 2002 --users 20000 --concurrency 256 \
  --same-user-ratio 0.05 --requests 21000 --reconcile --wait-drain 90

echo
echo "== the payment window: 200 units, 5 s to pay; a quarter of the buyers never pay"
"$CTL" warmup --activity 1001 --sku 2003 --stock 200 --payment-window 5 --force
python3 "$ROOT/infra/demo_lifecycle.py" "$EDGE" 1001 2003 200 5
"$CTL" reconcile --activity 1001 --sku 2003 --wait-drain 60 >"$LOGS/demo-lifecycle-reconcile.txt" || { cat "$LOGS/demo-lifecycle-reconcile.txt"; exit 1; }
grep -E '^(orders paid|orders cancelled|  units given back|payments applied|refunds due|paid late|remaining\+created|verdict)' "$LOGS/demo-lifecycle-reconcile.txt"

echo
echo "== several units per order: 302 units, 2 per buyer; buyers ask for 1, 2 or 3"
"$CTL" warmup --activity 1001 --sku 2007 --stock 302 --per-user-limit 2 --force
python3 "$ROOT/infra/demo_quantities.py" "$EDGE" 1001 2007 302
"$CTL" reconcile --activity 1001 --sku 2007 --wait-drain 60 >"$LOGS/demo-quantities-reconcile.txt" || { cat "$LOGS/demo-quantities-reconcile.txt"; exit 1; }
grep -E '^(orders created|  units created|users over their limit|remaining\+created|verdict)' "$LOGS/demo-quantities-reconcile.txt"

echo
echo "== a release: 14 sizes (each its own SKU), one pair per customer across them"
"$CTL" release --activity 1009 --per-customer-limit 1
for size in $(seq 3001 3014); do "$CTL" warmup --activity 1009 --sku "$size" --stock 20 --force >/dev/null; done
python3 "$ROOT/infra/demo_release.py" "$EDGE" 1009 3001 14 60
"$CTL" reconcile --release 1009 >"$LOGS/demo-release-reconcile.txt" || { cat "$LOGS/demo-release-reconcile.txt"; exit 1; }
grep -E '^(limit per customer|customers|most one customer holds|units|customers over the limit|verdict)' "$LOGS/demo-release-reconcile.txt"

echo
echo "== a redrive: a bad release refuses every fifth buyer's order; once rolled back, they get it again"
"$CTL" warmup --activity 1001 --sku 2004 --stock 50 --force
python3 "$ROOT/infra/demo_redrive.py" "$EDGE" 1001 2004 50 "$CTL"
"$CTL" reconcile --activity 1001 --sku 2004 --wait-drain 60 >"$LOGS/demo-redrive-reconcile.txt" || { cat "$LOGS/demo-redrive-reconcile.txt"; exit 1; }
grep -E '^(orders created|orders failed|202s that ended FAILED|  placed again|verdict)' "$LOGS/demo-redrive-reconcile.txt"

echo
echo "== the waiting room: 100 units, 1,000 buyers in the pre-queue, 40 in at a time, 3,000 a minute"
starts="$(date -u -d '+8 seconds' +%Y-%m-%dT%H:%M:%SZ)"
"$CTL" warmup --activity 1001 --sku 2005 --stock 100 --starts-at "$starts" --force \
  --admission '{"activeBuyers":40,"admitPerMinute":3000,"prequeueSeconds":600}'
python3 "$ROOT/infra/demo_queue.py" "$EDGE" 1001 2005 100 1000 40 3000 8 "$CTL"
"$CTL" reconcile --activity 1001 --sku 2005 --wait-drain 60 >"$LOGS/demo-queue-reconcile.txt" || { cat "$LOGS/demo-queue-reconcile.txt"; exit 1; }
grep -E '^(orders created|waiting room|verdict)' "$LOGS/demo-queue-reconcile.txt"

echo
echo "== a draw: 30 units, 300 entries in 6 s, one draw anyone can verify"
opens="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
draw_at="$(date -u -d '+6 seconds' +%Y-%m-%dT%H:%M:%SZ)"
ends="$(date -u -d '+10 minutes' +%Y-%m-%dT%H:%M:%SZ)"
"$CTL" warmup --activity 1001 --sku 2008 --stock 30 --ends-at "$ends" --force \
  --draw "{\"entriesOpenAt\":\"$opens\",\"drawAt\":\"$draw_at\",\"claimSeconds\":60}" >/dev/null
python3 "$ROOT/infra/demo_draw.py" "$EDGE" 1001 2008 30 300 "$CTL"
"$CTL" reconcile --activity 1001 --sku 2008 --wait-drain 60 >"$LOGS/demo-draw-reconcile.txt" || { cat "$LOGS/demo-draw-reconcile.txt"; exit 1; }
grep -E '^(orders created|draw|verdict)' "$LOGS/demo-draw-reconcile.txt"

echo
echo "== one order, traced: its spans from the request to its CREATED event (OTLP, SECKILL_OTLP_ENDPOINT)"
"$CTL" warmup --activity 1001 --sku 2006 --stock 1 --force >/dev/null
trace_id="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
curl -fsS -X POST "http://$EDGE/api/seckill/order" -H 'Content-Type: application/json' \
  -H "traceparent: 00-$trace_id-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')-01" \
  -d '{"activityId":1001,"skuId":2006,"userId":1}' && echo
if [[ -n "$SPANS" ]]; then
  python3 "$ROOT/infra/demo_trace.py" "$SPANS" "$trace_id" 30
  echo "  every exported span: $SPANS (one JSON line each); point SECKILL_OTLP_ENDPOINT at a collector to see them in your tracing backend"
else
  echo "  trace $trace_id: in the backend behind $SECKILL_OTLP_ENDPOINT"
fi

echo
echo "== stopping the services"
trap - EXIT
stop_all
echo "demo finished: every unit accounted for"
