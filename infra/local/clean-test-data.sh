#!/usr/bin/env bash
# What earlier test runs left on the local servers: each test makes a
# database seckill_t<id> and Redis keys under t<id>: (tests/harness; on the
# single Redis and on the Redis Cluster), and a failed or interrupted test
# leaves them. Run before the suites (make test, make chaos), and after
# make test's single-node suites, when no test runs. Their Kafka topics
# (t<id>.*) are deleted too: left, they grew the broker by about a thousand partitions per full
# run, until producing timed out.
source "$(dirname "$0")/common.sh"
export PGPASSWORD=seckill
psql=(psql -h 127.0.0.1 -p "$PG_PORT" -U seckill -qtA -d seckill)
mapfile -t dbs < <("${psql[@]}" -c "SELECT datname FROM pg_database WHERE datname ~ '^seckill_t[0-9a-f]{12}(_[a-z]+)?$'")
for db in "${dbs[@]}"; do
  [[ -n "$db" ]] && "${psql[@]}" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
done
keys=0
hex='[0-9a-f]'
while read -r batch; do
  [[ -z "$batch" ]] && continue
  # shellcheck disable=SC2086
  redis-cli -p "$REDIS_PORT" UNLINK $batch >/dev/null
  keys=$((keys + $(wc -w <<<"$batch")))
done < <(redis-cli -p "$REDIS_PORT" --scan --pattern "t$hex$hex$hex$hex$hex$hex$hex$hex$hex$hex$hex$hex:*" | xargs -r -n 500 echo)
# The Redis Cluster's primaries (up.sh --redis-cluster), when it runs: one
# UNLINK per key, each on the node that holds it.
for port in "${RCLUSTER_PORTS[@]}"; do
  redis-cli -p "$port" role 2>/dev/null | head -1 | grep -q master || continue
  n="$(redis-cli -p "$port" --scan --pattern "t$hex$hex$hex$hex$hex$hex$hex$hex$hex$hex$hex$hex:*" | tee >(sed 's/^/UNLINK /' | redis-cli -p "$port" >/dev/null) | wc -l)"
  keys=$((keys + n))
done
topics="$(python3 "$ROOT/infra/local/clean_test_topics.py" "$KAFKA_PORT")"
# The broker removes a deleted topic's partitions after it answered (each
# closed, renamed *-delete, its files removed file.delete.delay.ms later):
# a suite started meanwhile competed with thousands of partitions going
# (a stress run after 2,061 topics were deleted saw its first tests' edges
# answer 503). Wait, two minutes at most, until none is left on the disk.
for _ in $(seq 1 120); do
  compgen -G "$DATA/kafka/log/t[0-9a-f]*" >/dev/null || break
  sleep 1
done
log "cleaned up earlier test runs: ${#dbs[@]} databases, $keys Redis keys, $topics Kafka topics"
