#!/usr/bin/env bash
# Stops the local servers: infra/local/down.sh [redis|postgres|kafka]... (all
# when none is named), or `--cluster`: the replicated topology's Kafka nodes,
# Redis, Sentinels and HAProxy, or `--redis-cluster`: the Redis Cluster's six
# nodes (Kafka and PostgreSQL are the single-node ones), or `--postgres-ha`:
# the pg_auto_failover monitor and nodes. Data stays, so up.sh brings each
# back.
source "$(dirname "$0")/common.sh"

if [[ $TOPOLOGY == cluster ]]; then
  stop_cluster
  exit 0
fi
if [[ $TOPOLOGY == redis-cluster ]]; then
  stop_redis_cluster
  exit 0
fi
if [[ $TOPOLOGY == postgres-ha ]]; then
  stop_postgres_ha
  exit 0
fi

for server in $(selected "$@"); do
  case "$server" in
    redis) stop_pidfile redis "$DATA/redis/redis.pid" 20 ;;
    kafka) stop_pidfile kafka "$DATA/kafka/kafka.pid" 60 ;;
    postgres)
      for pgdata in "$DATA/postgres" /var/tmp/seckill-postgres; do
        if [[ -f "$pgdata/postmaster.pid" ]]; then
          runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null && log "postgres stopped"
        fi
      done ;;
    *) die "unknown server '$server' (redis, postgres, kafka)" ;;
  esac
done
