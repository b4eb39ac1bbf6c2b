#!/usr/bin/env bash
# Starts the local servers the project needs, without Docker:
#   infra/local/up.sh [redis|postgres|kafka]...   (all when none is named)
#   infra/local/up.sh --cluster                   (the replicated topology:
#                                                  see cluster.sh)
#   infra/local/up.sh --redis-cluster             (Kafka and PostgreSQL as
#                                                  here, a Redis Cluster in
#                                                  place of the single Redis:
#                                                  see redis_cluster.sh)
#   infra/local/up.sh --postgres-ha               (Redis and Kafka as here,
#                                                  PostgreSQL with failover:
#                                                  see postgres_ha.sh)
# Installs what is missing (Debian packages; Kafka's jars from Maven Central),
# is safe to run any number of times, and returns only when every named
# server answers (Redis PING, pg_isready, a Kafka metadata request).
source "$(dirname "$0")/common.sh"

start_redis() {
  command -v redis-server >/dev/null || apt_install redis-server redis-tools
  local dir="$DATA/redis" pidfile="$DATA/redis/redis.pid"
  mkdir -p "$dir"
  if pid_alive "$pidfile" && redis_ping; then log "redis already up"; return; fi
  refuse_foreign redis "$REDIS_PORT"
  if redis_ping; then
    # A Redis we did not start (e.g. the Debian service) holds the port.
    log "stopping a foreign redis on :$REDIS_PORT"
    service redis-server stop >/dev/null 2>&1 || redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
    sleep 1
  fi
  log "starting redis (AOF, appendfsync everysec) in $dir"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$dir" \
    --appendonly yes --appendfsync everysec --save "" \
    --daemonize yes --pidfile "$pidfile" --logfile "$LOGS/redis.log" \
    --maxclients 10000 --protected-mode yes
  wait_for redis "$LOGS/redis.log" 30 redis_ping
}

start_postgres() {
  [[ -x "$PG_BIN/pg_ctl" ]] || { apt_install postgresql postgresql-contrib; PG_BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"; }
  local pgdata; pgdata="$(pg_data_dir)"
  local sock="$pgdata-run" logfile="$LOGS/postgres.log"
  if [[ -f "$pgdata/postmaster.pid" ]] && pg_ready; then log "postgres already up"; ensure_pg_role "$sock"; return; fi
  refuse_foreign postgres "$PG_PORT"
  if pg_ready; then
    log "stopping a foreign postgres on :$PG_PORT"
    pg_ctlcluster --force "$(basename "$(dirname "$PG_BIN")")" main stop >/dev/null 2>&1 || service postgresql stop >/dev/null 2>&1 || true
    sleep 1
  fi
  mkdir -p "$pgdata" "$sock"; touch "$logfile"
  chown postgres:postgres "$pgdata" "$sock" "$logfile"; chmod 700 "$pgdata"
  if [[ ! -f "$pgdata/PG_VERSION" ]]; then
    log "initdb $pgdata"
    runuser -u postgres -- "$PG_BIN/initdb" -D "$pgdata" -U postgres --auth-local=trust --auth-host=scram-sha-256 -E UTF8 >>"$logfile" 2>&1 \
      || die "initdb failed; see $logfile"
    cat >>"$pgdata/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$sock'
max_connections = 300
shared_buffers = 256MB
wal_buffers = 16MB
max_wal_size = 2GB
CONF
  fi
  log "starting postgres in $pgdata"
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$pgdata" -l "$logfile" -w -t 60 start >/dev/null \
    || die "postgres did not start; see $logfile"
  wait_for postgres "$logfile" 60 pg_ready
  ensure_pg_role "$sock"
}

ensure_pg_role() {
  local sock="$1"
  local psql=(runuser -u postgres -- "$PG_BIN/psql" -h "$sock" -p "$PG_PORT" -U postgres -v ON_ERROR_STOP=1 -qtA)
  if [[ "$("${psql[@]}" -c "select 1 from pg_roles where rolname='seckill'")" != 1 ]]; then
    "${psql[@]}" -c "create role seckill login createdb password 'seckill'" >/dev/null
  fi
  # The tests drop their databases WITH (FORCE), which must end autovacuum
  # workers too: PostgreSQL asks pg_signal_backend for those.
  if [[ "$("${psql[@]}" -c "select 1 from pg_auth_members m join pg_roles r on r.oid = m.roleid join pg_roles u on u.oid = m.member where r.rolname = 'pg_signal_backend' and u.rolname = 'seckill'")" != 1 ]]; then
    "${psql[@]}" -c "grant pg_signal_backend to seckill" >/dev/null
  fi
  if [[ "$("${psql[@]}" -c "select 1 from pg_database where datname='seckill'")" != 1 ]]; then
    "${psql[@]}" -c "create database seckill owner seckill" >/dev/null
  fi
}

fetch_kafka() {
  [[ -f "$KAFKA_LIBS/kafka_2.13-$KAFKA_VERSION.jar" ]] && return
  command -v mvn >/dev/null || apt_install maven
  log "fetching Apache Kafka $KAFKA_VERSION jars from Maven Central into $KAFKA_LIBS"
  rm -rf "$KAFKA_LIBS.tmp"
  mvn -q -B -f "$ROOT/infra/kafka/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$KAFKA_LIBS.tmp" >"$LOGS/kafka-fetch.log" 2>&1 \
    || die "could not fetch the Kafka jars; see $LOGS/kafka-fetch.log"
  mv "$KAFKA_LIBS.tmp" "$KAFKA_LIBS"
}

java_bin() {
  local candidate
  for candidate in /usr/lib/jvm/java-17-openjdk-amd64/bin/java "$(command -v java || true)"; do
    [[ -x "$candidate" ]] && { echo "$candidate"; return; }
  done
  apt_install openjdk-17-jre-headless
  echo /usr/lib/jvm/java-17-openjdk-amd64/bin/java
}

start_kafka() {
  local dir="$DATA/kafka" pidfile="$DATA/kafka/kafka.pid" logfile="$LOGS/kafka.log"
  local wanted; wanted="$(sed "s:@LOG_DIR@:$dir/log:" "$ROOT/infra/kafka/server.properties")"
  if pid_alive "$pidfile" && kafka_ready; then
    # Running with the configuration of this checkout: nothing to do. One
    # started from an older one (a listener added since) is restarted.
    if [[ "$wanted" == "$(cat "$dir/server.properties" 2>/dev/null)" ]]; then log "kafka already up"; return; fi
    log "kafka runs an older configuration; restarting it"
    stop_pidfile kafka "$pidfile" 60
  fi
  refuse_foreign kafka "$KAFKA_PORT"
  fetch_kafka
  local java; java="$(java_bin)"
  mkdir -p "$dir/log"
  printf '%s\n' "$wanted" >"$dir/server.properties"
  local cp="$KAFKA_LIBS/*"
  local jvm=(-Xms512m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
             -Dlog4j2.configurationFile="$ROOT/infra/kafka/log4j2.properties")
  if [[ ! -f "$dir/log/meta.properties" ]]; then
    local cluster_id; cluster_id="$("$java" -cp "$cp" "${jvm[@]}" kafka.tools.StorageTool random-uuid 2>>"$logfile" | tail -1)"
    log "formatting Kafka storage (cluster $cluster_id)"
    "$java" -cp "$cp" "${jvm[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" >>"$logfile" 2>&1 \
      || die "kafka storage format failed; see $logfile"
  fi
  log "starting Apache Kafka $KAFKA_VERSION (KRaft) on :$KAFKA_PORT"
  setsid nohup "$java" -cp "$cp" "${jvm[@]}" kafka.Kafka "$dir/server.properties" >>"$logfile" 2>&1 </dev/null &
  echo $! >"$pidfile"
  wait_for kafka "$logfile" 120 kafka_ready
}

if [[ $TOPOLOGY == cluster ]]; then
  # The single-node Kafka and Redis hold the same ports.
  stop_pidfile kafka "$DATA/kafka/kafka.pid" 60
  stop_pidfile redis "$DATA/redis/redis.pid" 20
  start_postgres
  start_cluster_redis
  start_sentinels
  start_cluster_kafka
  start_haproxy
  log "up: the replicated topology (infra/local/status.sh --cluster)"
  exit 0
fi
if cluster_running; then
  log "the replicated topology runs on the same ports: stopping it"
  stop_cluster
fi
if [[ $TOPOLOGY == postgres-ha ]]; then
  start_redis
  start_kafka
  start_postgres_ha
  exit 0
fi
if [[ $TOPOLOGY == redis-cluster ]]; then
  start_postgres
  start_kafka
  start_redis_cluster
  log "up: PostgreSQL, Kafka and a Redis Cluster on :${RCLUSTER_PORTS[0]}-${RCLUSTER_PORTS[-1]} ($RCLUSTER_URL)"
  exit 0
fi
for server in $(selected "$@"); do
  case "$server" in
    redis) start_redis ;;
    postgres) start_postgres ;;
    kafka) start_kafka ;;
    *) die "unknown server '$server' (redis, postgres, kafka)" ;;
  esac
done
log "up: $(selected "$@")"
