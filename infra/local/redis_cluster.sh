# The Redis Cluster topology (`up.sh --redis-cluster`, `down.sh
# --redis-cluster`, `status.sh --redis-cluster`). Sourced after common.sh,
# not run.
#
#   Redis    a Redis Cluster of three primaries with one replica each on
#            127.0.0.1:7000-7005 (made once with `redis-cli --cluster
#            create --cluster-replicas 1`), AOF everysec, 512 MiB each at
#            most, a node unreachable for 2 s failed over by its replica.
#   Kafka, PostgreSQL as in the single-node topology (Kafka on :9092 and
#            the single Redis on :6379 are the same ports as the replicated
#            topology's, so that one is stopped first).
#
# Services reach it with SECKILL_REDIS_URL=redis+cluster://127.0.0.1:7000,
# 127.0.0.1:7001,127.0.0.1:7002 (any reachable node tells the client the
# rest).

RCLUSTER="$DATA/redis-cluster"
RCLUSTER_PORTS=(7000 7001 7002 7003 7004 7005)
RCLUSTER_URL="redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"

# Every call bounded: a frozen node (SIGSTOP) accepts a connection and never
# answers.
rcli() { timeout 5 redis-cli -h 127.0.0.1 "$@"; }
rcluster_ping() { rcli -p "$1" ping 2>/dev/null | grep -q PONG; }
rcluster_ok() { rcli -p "${RCLUSTER_PORTS[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; }

start_redis_cluster() {
  command -v redis-server >/dev/null || apt_install redis-server redis-tools
  local port dir conf
  for port in "${RCLUSTER_PORTS[@]}"; do
    dir="$RCLUSTER/$port" conf="$RCLUSTER/$port/redis.conf"
    mkdir -p "$dir"
    # A node a fault test left frozen goes on.
    pid_alive "$dir/redis.pid" && kill -CONT "$(cat "$dir/redis.pid")" 2>/dev/null
    if pid_alive "$dir/redis.pid" && rcluster_ping "$port"; then log "redis cluster node :$port already up"; continue; fi
    # nodes.conf keeps the node's id, slots and role across restarts: a
    # killed primary comes back as its promoted replica's replica.
    cat >"$conf" <<CONF
bind 127.0.0.1
port $port
dir $dir
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 2000
appendonly yes
appendfsync everysec
save ""
maxmemory 512mb
maxmemory-policy noeviction
daemonize yes
pidfile $dir/redis.pid
logfile $LOGS/redis-cluster-$port.log
maxclients 10000
CONF
    log "starting redis cluster node :$port"
    redis-server "$conf"
    wait_for "redis cluster node :$port" "$LOGS/redis-cluster-$port.log" 30 rcluster_ping "$port"
  done
  if ! rcli -p "${RCLUSTER_PORTS[0]}" cluster info | grep -q 'cluster_slots_assigned:16384'; then
    log "creating the Redis Cluster (3 primaries, 1 replica each)"
    local nodes=()
    for port in "${RCLUSTER_PORTS[@]}"; do nodes+=("127.0.0.1:$port"); done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >>"$LOGS/redis-cluster-create.log" 2>&1 \
      || die "redis-cli --cluster create failed; see $LOGS/redis-cluster-create.log"
  fi
  wait_for "the Redis Cluster (cluster_state:ok)" "$LOGS/redis-cluster-${RCLUSTER_PORTS[0]}.log" 60 rcluster_ok
  # Every primary with its replica: a failover needs one.
  wait_for "a replica for every primary" "$LOGS/redis-cluster-${RCLUSTER_PORTS[0]}.log" 60 rcluster_replicated
}

# Three primaries, each with a connected replica (CLUSTER NODES: field 3
# the flags, field 8 the link).
rcluster_replicated() {
  rcli -p "${RCLUSTER_PORTS[0]}" cluster nodes 2>/dev/null | awk '
    $3 !~ /fail/ && $8 == "connected" && $3 ~ /master/ { primaries++ }
    $3 !~ /fail/ && $8 == "connected" && $3 ~ /slave/ { replicas++ }
    END { exit !(primaries >= 3 && replicas >= 3) }'
}

stop_redis_cluster() {
  local port
  for port in "${RCLUSTER_PORTS[@]}"; do stop_pidfile "redis cluster node :$port" "$RCLUSTER/$port/redis.pid" 20; done
}

redis_cluster_running() {
  local port
  for port in "${RCLUSTER_PORTS[@]}"; do pid_alive "$RCLUSTER/$port/redis.pid" && return 0; done
  return 1
}

redis_cluster_status() {
  local status=0 port
  for port in "${RCLUSTER_PORTS[@]}"; do
    if rcluster_ping "$port"; then
      echo "redis cluster node :$port: up, $(rcli -p "$port" role | head -1)"
    else echo "redis cluster node :$port: down"; status=1; fi
  done
  rcluster_ok && echo "redis cluster: state ok" || { echo "redis cluster: not ok"; status=1; }
  kafka_ready >/dev/null 2>&1 && echo "kafka: up on 127.0.0.1:$KAFKA_PORT" || { echo "kafka: down"; status=1; }
  pg_ready && echo "postgres: up on 127.0.0.1:$PG_PORT" || { echo "postgres: down"; status=1; }
  return $status
}
