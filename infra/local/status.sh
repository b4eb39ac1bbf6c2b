#!/usr/bin/env bash
# Says which local servers run and answer (`--cluster`: the replicated
# topology, `--redis-cluster`: the Redis Cluster one, `--postgres-ha`: the
# pg_auto_failover formation). Exit 0 when all named (or all) do.
source "$(dirname "$0")/common.sh"
set +e
if [[ $TOPOLOGY == cluster ]]; then
  cluster_status
  exit $?
fi
if [[ $TOPOLOGY == redis-cluster ]]; then
  redis_cluster_status
  exit $?
fi
if [[ $TOPOLOGY == postgres-ha ]]; then
  postgres_ha_status
  exit $?
fi
status=0
for server in $(selected "$@"); do
  case "$server" in
    redis) check=redis_ping; where="127.0.0.1:$REDIS_PORT" ;;
    postgres) check=pg_ready; where="127.0.0.1:$PG_PORT" ;;
    kafka) check=kafka_ready; where="127.0.0.1:$KAFKA_PORT (Kafka $KAFKA_VERSION)" ;;
    *) die "unknown server '$server' (redis, postgres, kafka)" ;;
  esac
  if $check >/dev/null 2>&1; then echo "$server: up on $where"; else echo "$server: down"; status=1; fi
done
exit $status
