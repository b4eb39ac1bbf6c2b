#!/usr/bin/env bash
# Stops the local servers: infra/local/down.sh [redis|postgres|kafka]... (all
# when none is named). Data stays, so up.sh brings each back with its data.
source "$(dirname "$0")/common.sh"

stop_pidfile() {
  local name="$1" pidfile="$2" seconds="$3"
  pid_alive "$pidfile" || { log "$name not running"; return; }
  local pid; pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + seconds))
  while kill -0 "$pid" 2>/dev/null; do
    if (( SECONDS >= deadline )); then log "$name did not stop in ${seconds}s; killing"; kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.2
  done
  rm -f "$pidfile"
  log "$name stopped"
}

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
