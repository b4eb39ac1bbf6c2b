# The replicated topology (`up.sh --cluster`, `down.sh --cluster`,
# `status.sh --cluster`). Sourced after common.sh, not run.
#
#   Kafka    three KRaft nodes (broker + controller each) on 127.0.0.1:9092,
#            9094, 9096 (controllers 9093, 9095, 9097); RF 3, min ISR 2,
#            no unclean election; 512 MiB heap each.
#   Redis    primary :6379, replica :6380 (AOF everysec on both), three
#            Sentinels :26379-26381 watching master "seckill", quorum 2.
#   HAProxy  :8080 in front of the edges on :8081 and :8082, health-checked
#            on /readyz (the edges are started by whoever runs them).
#   PostgreSQL as in the single-node topology.
#
# It uses the same ports as the single-node Kafka and Redis, so starting one
# topology stops the other's Kafka and Redis first (PostgreSQL is shared).

CLUSTER="$DATA/cluster"
KAFKA_NODES=(1 2 3)
kafka_node_port() { echo $((9090 + 2 * $1)); }
REDIS_PORTS=(6379 6380)
SENTINEL_PORTS=(26379 26380 26381)
SENTINEL_MASTER=seckill
HAPROXY_PORT=8080
EDGE_PORTS=(8081 8082)

cluster_kafka_ready() { python3 "$ROOT/infra/local/kafka_ready.py" 127.0.0.1 "$(kafka_node_port "$1")" 3; }
cluster_redis_ping() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }
sentinel_master() { redis-cli -h 127.0.0.1 -p "$1" sentinel get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | tr '\n' ' '; }

start_cluster_redis() {
  command -v redis-server >/dev/null || apt_install redis-server redis-tools
  for port in "${REDIS_PORTS[@]}"; do
    local dir="$CLUSTER/redis-$port" conf="$CLUSTER/redis-$port/redis.conf"
    mkdir -p "$dir"
    if pid_alive "$dir/redis.pid" && cluster_redis_ping "$port"; then log "redis :$port already up"; continue; fi
    # A config file of its own, so a Sentinel's REPLICAOF survives restarts
    # (CONFIG REWRITE): a killed primary comes back as the new one's replica.
    if [[ ! -f "$conf" ]]; then
      {
        echo "bind 127.0.0.1"
        echo "port $port"
        echo "dir $dir"
        echo "appendonly yes"
        echo "appendfsync everysec"
        echo "save \"\""
        echo "daemonize yes"
        echo "pidfile $dir/redis.pid"
        echo "logfile $LOGS/redis-$port.log"
        echo "maxclients 10000"
        [[ $port != "${REDIS_PORTS[0]}" ]] && echo "replicaof 127.0.0.1 ${REDIS_PORTS[0]}"
      } >"$conf"
    fi
    log "starting redis :$port ($(grep -q replicaof "$conf" && echo replica || echo primary))"
    redis-server "$conf"
    wait_for "redis :$port" "$LOGS/redis-$port.log" 30 cluster_redis_ping "$port"
  done
}

start_sentinels() {
  command -v redis-sentinel >/dev/null || { apt_install redis-sentinel; service redis-sentinel stop >/dev/null 2>&1 || true; }
  for port in "${SENTINEL_PORTS[@]}"; do
    local dir="$CLUSTER/sentinel-$port" conf="$CLUSTER/sentinel-$port/sentinel.conf"
    mkdir -p "$dir"
    if pid_alive "$dir/sentinel.pid" && cluster_redis_ping "$port"; then log "sentinel :$port already up"; continue; fi
    if cluster_redis_ping "$port"; then
      log "stopping a foreign sentinel on :$port"
      redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
      sleep 0.5
    fi
    # Sentinel rewrites its file with what it learns (the current primary,
    # the other Sentinels): written once, kept afterwards.
    if [[ ! -f "$conf" ]]; then
      cat >"$conf" <<CONF
bind 127.0.0.1
port $port
dir $dir
daemonize yes
pidfile $dir/sentinel.pid
logfile $LOGS/sentinel-$port.log
sentinel resolve-hostnames no
sentinel monitor $SENTINEL_MASTER 127.0.0.1 ${REDIS_PORTS[0]} 2
sentinel down-after-milliseconds $SENTINEL_MASTER 2000
sentinel failover-timeout $SENTINEL_MASTER 10000
sentinel parallel-syncs $SENTINEL_MASTER 1
CONF
    fi
    log "starting sentinel :$port"
    redis-sentinel "$conf"
    wait_for "sentinel :$port" "$LOGS/sentinel-$port.log" 30 cluster_redis_ping "$port"
  done
  wait_for "sentinels agreeing on a primary" "$LOGS/sentinel-${SENTINEL_PORTS[0]}.log" 30 \
    bash -c "redis-cli -p ${SENTINEL_PORTS[0]} sentinel ckquorum $SENTINEL_MASTER | grep -q OK"
  # Up means replicating: a warm-up or a deduction confirmed by a replica
  # needs one, and after an earlier failover both servers may come back as
  # primaries until Sentinel turns one into the other's replica (flushing
  # what it held).
  wait_for "the primary Sentinel names to have its replica online" "$LOGS/sentinel-${SENTINEL_PORTS[0]}.log" 90 \
    cluster_redis_replicated
}

# Every Sentinel names the same primary, that primary says it is one with a
# replica online, and every other server is its replica, linked.
cluster_redis_replicated() {
  local named port primary
  named="$(sentinel_master "${SENTINEL_PORTS[0]}")"
  [[ -n "$named" ]] || return 1
  for port in "${SENTINEL_PORTS[@]}"; do
    [[ "$(sentinel_master "$port")" == "$named" ]] || return 1
  done
  primary="$(echo "$named" | awk '{print $2}')"
  [[ "$(redis-cli -p "$primary" role 2>/dev/null | head -1)" == master ]] || return 1
  redis-cli -p "$primary" info replication 2>/dev/null | grep -Eq '^slave[0-9]+:.*state=online' || return 1
  for port in "${REDIS_PORTS[@]}"; do
    [[ $port == "$primary" ]] && continue
    local info; info="$(redis-cli -p "$port" info replication 2>/dev/null)"
    grep -q "^master_port:$primary" <<<"$info" && grep -q "^master_link_status:up" <<<"$info" || return 1
  done
}

start_cluster_kafka() {
  fetch_kafka
  local java; java="$(java_bin)"
  local cp="$KAFKA_LIBS/*" cluster_id_file="$CLUSTER/kafka-cluster-id"
  mkdir -p "$CLUSTER"
  local jvm=(-Xms256m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:ActiveProcessorCount=1 -Djava.awt.headless=true
             -Dlog4j2.configurationFile="$ROOT/infra/kafka/log4j2.properties")
  [[ -f "$cluster_id_file" ]] || "$java" -cp "$cp" "${jvm[@]}" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1 >"$cluster_id_file"
  local started=()
  for node in "${KAFKA_NODES[@]}"; do
    local dir="$CLUSTER/kafka-$node" port; port="$(kafka_node_port "$node")"
    local pidfile="$dir/kafka.pid" logfile="$LOGS/kafka-$node.log"
    if pid_alive "$pidfile"; then log "kafka node $node already up"; continue; fi
    mkdir -p "$dir/log"
    sed -e "s:@LOG_DIR@:$dir/log:" -e "s:@NODE@:$node:" -e "s:@PORT@:$port:" -e "s:@CONTROLLER_PORT@:$((port + 1)):" \
      "$ROOT/infra/kafka/cluster.properties" >"$dir/server.properties"
    if [[ ! -f "$dir/log/meta.properties" ]]; then
      "$java" -cp "$cp" "${jvm[@]}" kafka.tools.StorageTool format -t "$(cat "$cluster_id_file")" -c "$dir/server.properties" >>"$logfile" 2>&1 \
        || die "kafka node $node storage format failed; see $logfile"
    fi
    log "starting Apache Kafka $KAFKA_VERSION node $node on :$port"
    setsid nohup "$java" -cp "$cp" "${jvm[@]}" kafka.Kafka "$dir/server.properties" >>"$logfile" 2>&1 </dev/null &
    echo $! >"$pidfile"
    started+=("$node")
  done
  # The quorum needs two nodes before any answers: start all, then wait.
  for node in "${KAFKA_NODES[@]}"; do
    wait_for "kafka node $node" "$LOGS/kafka-$node.log" 180 cluster_kafka_ready "$node"
  done
}

start_haproxy() {
  command -v haproxy >/dev/null || { apt_install haproxy; service haproxy stop >/dev/null 2>&1 || true; }
  local dir="$CLUSTER/haproxy"
  mkdir -p "$dir"
  if pid_alive "$dir/haproxy.pid"; then log "haproxy already up"; return; fi
  log "starting haproxy on :$HAPROXY_PORT (edges on :${EDGE_PORTS[*]})"
  haproxy -D -f "$ROOT/infra/haproxy/haproxy.cfg" -p "$dir/haproxy.pid" >>"$LOGS/haproxy.log" 2>&1 \
    || die "haproxy did not start; see $LOGS/haproxy.log"
}

stop_cluster() {
  stop_pidfile haproxy "$CLUSTER/haproxy/haproxy.pid" 10
  for port in "${SENTINEL_PORTS[@]}"; do stop_pidfile "sentinel :$port" "$CLUSTER/sentinel-$port/sentinel.pid" 10; done
  for port in "${REDIS_PORTS[@]}"; do stop_pidfile "redis :$port" "$CLUSTER/redis-$port/redis.pid" 20; done
  # All brokers at once: one stopped after the others would wait for a
  # controller quorum that is gone.
  local node pidfile
  for node in "${KAFKA_NODES[@]}"; do
    pidfile="$CLUSTER/kafka-$node/kafka.pid"
    pid_alive "$pidfile" && kill -TERM "$(cat "$pidfile")" 2>/dev/null
  done
  for node in "${KAFKA_NODES[@]}"; do stop_pidfile "kafka node $node" "$CLUSTER/kafka-$node/kafka.pid" 30; done
}

cluster_running() {
  local pidfile
  for pidfile in "$CLUSTER"/kafka-*/kafka.pid "$CLUSTER"/redis-*/redis.pid; do
    pid_alive "$pidfile" && return 0
  done
  return 1
}

cluster_status() {
  local status=0 node port
  for node in "${KAFKA_NODES[@]}"; do
    port="$(kafka_node_port "$node")"
    if cluster_kafka_ready "$node" >/dev/null 2>&1; then echo "kafka node $node: up on 127.0.0.1:$port"; else echo "kafka node $node: down"; status=1; fi
  done
  for port in "${REDIS_PORTS[@]}"; do
    if cluster_redis_ping "$port"; then
      echo "redis :$port: up, $(redis-cli -p "$port" role | head -1)"
    else echo "redis :$port: down"; status=1; fi
  done
  for port in "${SENTINEL_PORTS[@]}"; do
    if cluster_redis_ping "$port"; then echo "sentinel :$port: up, primary $(sentinel_master "$port")"; else echo "sentinel :$port: down"; status=1; fi
  done
  if pid_alive "$CLUSTER/haproxy/haproxy.pid"; then echo "haproxy: up on 127.0.0.1:$HAPROXY_PORT"; else echo "haproxy: down"; status=1; fi
  pg_ready && echo "postgres: up on 127.0.0.1:$PG_PORT" || { echo "postgres: down"; status=1; }
  return $status
}
