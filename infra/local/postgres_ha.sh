# PostgreSQL that survives losing its primary (`up.sh --postgres-ha`,
# `down.sh --postgres-ha`, `status.sh --postgres-ha`): pg_auto_failover
# (Debian's postgresql-15-auto-failover, `pg_autoctl`). Sourced after
# common.sh, not run.
#
#   monitor  127.0.0.1:5440 (database pg_auto_failover): watches the nodes
#            and decides the failover.
#   nodes    127.0.0.1:5441 and 127.0.0.1:5442, one primary and one
#            standby, database and role seckill/seckill (scram, as on the
#            single server). Synchronous replication: the primary's
#            synchronous_standby_names is ANY 1 (the standby), so a commit is
#            acknowledged only once the standby has it. pg_auto_failover
#            gives that up while the standby is down (the primary goes on as
#            wait_primary, asynchronous: a commit then lives on one disk
#            until the standby is back and caught up) and fails over only to
#            a standby that had everything.
#   Redis, Kafka as in the single-node topology (the single PostgreSQL on
#            :5432 may run beside it).
#
# Each `pg_autoctl run` is the leader of its own process group (its keeper,
# its postgres supervisor and the postmaster): `pg_ha_kill NODE` is kill -9
# of the whole group, as a machine dying would be. The failover timings are
# the monitor's (pgautofailover.*: a node unhealthy after 4 s without its
# keeper's report and health checks; the old primary given 4 s to demote
# itself; safe to shorten with synchronous replication, as a primary cut
# off from its standby cannot acknowledge a commit).
#
# Services reach it with the URL `pg_autoctl show uri` prints, password
# added: postgres://seckill:seckill@127.0.0.1:5441,127.0.0.1:5442/seckill?target_session_attrs=read-write

PG_HA_MONITOR_PORT=5440
PG_HA_NODES=(node1 node2)
pg_ha_port() { [[ $1 == monitor ]] && echo "$PG_HA_MONITOR_PORT" || echo $((5440 + ${1#node})); }
PG_HA_URL="postgres://seckill:seckill@127.0.0.1:5441,127.0.0.1:5442/seckill?target_session_attrs=read-write"
PG_HA_MONITOR_URI="postgres://autoctl_node@127.0.0.1:$PG_HA_MONITOR_PORT/pg_auto_failover?sslmode=disable"

# The folder of the formation: beside the single server's (the postgres
# user must reach it).
pg_ha_dir() { echo "$(dirname "$(pg_data_dir)")/postgres-ha"; }

# pg_autoctl keeps its configuration and state under XDG folders: here,
# inside the formation's folder, so removing it removes everything.
pg_autoctl_env() {
  local dir; dir="$(pg_ha_dir)"
  echo PATH="$PG_BIN:$PATH" XDG_CONFIG_HOME="$dir/xdg-config" XDG_DATA_HOME="$dir/xdg-data"
}
# shellcheck disable=SC2046 # the variables are words by design
pg_autoctl_as_postgres() { runuser -u postgres -- env $(pg_autoctl_env) pg_autoctl "$@"; }

# The pid of `pg_autoctl run` of NAME (the leader of its process group).
pg_ha_run_pid() { pgrep -f "^pg_autoctl run --pgdata $(pg_ha_dir)/$1\$" | head -1 || true; }

pg_ha_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$(pg_ha_port "$1")"; }

pg_ha_psql() {
  local port; port="$(pg_ha_port "$1")"; shift
  runuser -u postgres -- "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 -qtA "$@"
}

# The node that is primary now, as its own server says (none: empty).
pg_ha_primary() {
  local node
  for node in "${PG_HA_NODES[@]}"; do
    if [[ "$(pg_ha_psql "$node" -d seckill -c 'select pg_is_in_recovery()' 2>/dev/null)" == f ]]; then
      echo "$node"; return
    fi
  done
}

pg_ha_has_primary() { [[ -n "$(pg_ha_primary)" ]]; }

# Whether the formation is whole: a primary, a secondary, both as assigned.
pg_ha_healthy() {
  local state; state="$(pg_autoctl_as_postgres show state --pgdata "$(pg_ha_dir)/monitor" 2>/dev/null)"
  grep -Eq '\|\s+primary\s+\|\s+primary\s*$' <<<"$state" && grep -Eq '\|\s+secondary\s+\|\s+secondary\s*$' <<<"$state"
}

# Launches `pg_autoctl run` of NAME in a session (process group) of its
# own, without waiting for it.
pg_ha_launch() {
  local name="$1" dir; dir="$(pg_ha_dir)/$name"
  [[ -n "$(pg_ha_run_pid "$name")" ]] && return
  log "starting pg_autoctl $name (:$(pg_ha_port "$name"))"
  # shellcheck disable=SC2046
  runuser -u postgres -- env $(pg_autoctl_env) setsid pg_autoctl run --pgdata "$dir" \
    >>"$LOGS/postgres-ha-$name.log" 2>&1 </dev/null &
}

# Launches `pg_autoctl run` of NAME and waits until its server answers.
pg_ha_run() {
  pg_ha_launch "$1"
  wait_for "pg_autoctl $1" "$LOGS/postgres-ha-$1.log" 120 pg_ha_ready "$1"
}

# A small server: pg_autoctl sizes shared_buffers by the machine's memory
# (6 GB of 24), for each of three instances sharing two cores.
pg_ha_small() {
  echo "shared_buffers = '128MB'" >>"$1/postgresql.auto.conf"
  echo "max_connections = 300" >>"$1/postgresql.auto.conf"
}

start_pg_ha_monitor() {
  local dir; dir="$(pg_ha_dir)/monitor"
  if [[ ! -f "$dir/PG_VERSION" ]]; then
    log "creating the pg_auto_failover monitor in $dir"
    pg_autoctl_as_postgres create monitor --pgdata "$dir" --pgport "$PG_HA_MONITOR_PORT" --hostname 127.0.0.1 \
      --listen 127.0.0.1 --auth trust --no-ssl >>"$LOGS/postgres-ha-monitor.log" 2>&1 \
      || die "pg_autoctl create monitor failed; see $LOGS/postgres-ha-monitor.log"
    pg_ha_small "$dir"
  fi
  pg_ha_run monitor
  local setting
  for setting in health_check_period=1000 health_check_timeout=2000 health_check_retry_delay=500 \
      health_check_max_retries=1 node_considered_unhealthy_timeout=4000 startup_grace_period=4000 \
      primary_demote_timeout=4000; do
    pg_ha_psql monitor -d pg_auto_failover -c "alter system set pgautofailover.${setting%%=*} = ${setting#*=}" >/dev/null
  done
  pg_ha_psql monitor -d pg_auto_failover -c "select pg_reload_conf()" >/dev/null
}

start_pg_ha_node() {
  local name="$1" dir; dir="$(pg_ha_dir)/$name"
  if [[ ! -f "$dir/PG_VERSION" ]]; then
    log "creating pg_auto_failover node $name in $dir"
    pg_autoctl_as_postgres create postgres --pgdata "$dir" --pgport "$(pg_ha_port "$name")" --hostname 127.0.0.1 \
      --listen 127.0.0.1 --monitor "$PG_HA_MONITOR_URI" --auth trust --no-ssl --dbname seckill --name "$name" \
      >>"$LOGS/postgres-ha-$name.log" 2>&1 || die "pg_autoctl create postgres $name failed; see $LOGS/postgres-ha-$name.log"
    pg_ha_small "$dir"
  fi
  pg_ha_run "$name"
}

# The application's role and database on the primary (replicated to the
# standby), its password asked over TCP (scram) as on the single server:
# a line of its own ahead of the trust lines pg_autoctl writes, on each node.
pg_ha_application_role() {
  local primary="$1" node
  if [[ "$(pg_ha_psql "$primary" -d seckill -c "select 1 from pg_roles where rolname='seckill'")" != 1 ]]; then
    pg_ha_psql "$primary" -d seckill -c "create role seckill login createdb password 'seckill'" >/dev/null
    pg_ha_psql "$primary" -d seckill -c "grant pg_signal_backend to seckill" >/dev/null
    pg_ha_psql "$primary" -d seckill -c "alter database seckill owner to seckill" >/dev/null
    pg_ha_psql "$primary" -d seckill -c "grant all on schema public to seckill" >/dev/null
  fi
  for node in "${PG_HA_NODES[@]}"; do
    local hba; hba="$(pg_ha_dir)/$node/pg_hba.conf"
    [[ -f "$hba" ]] || continue
    if ! grep -q '^host all seckill 127.0.0.1/32 scram-sha-256' "$hba"; then
      sed -i '1i host all seckill 127.0.0.1/32 scram-sha-256' "$hba"
      pg_ha_psql "$node" -d seckill -c "select pg_reload_conf()" >/dev/null 2>&1 || true
    fi
  done
}

start_postgres_ha() {
  command -v pg_autoctl >/dev/null || apt_install postgresql-15-auto-failover pg-auto-failover-cli
  [[ -x "$PG_BIN/pg_ctl" ]] || { apt_install postgresql postgresql-contrib; PG_BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"; }
  local dir; dir="$(pg_ha_dir)"
  mkdir -p "$dir"; chown postgres:postgres "$dir"
  start_pg_ha_monitor
  local node first="${PG_HA_NODES[0]}"
  # A new formation: the first node is made primary, and the second is made
  # from it.
  if [[ ! -f "$dir/$first/PG_VERSION" ]]; then
    start_pg_ha_node "$first"
    wait_for "a primary" "$LOGS/postgres-ha-$first.log" 120 pg_ha_has_primary
    pg_ha_application_role "$(pg_ha_primary)"
  fi
  # Nodes that exist start together, none waited for alone: after a
  # failover the first may be a standby that catches up only from the
  # other, which must run too.
  for node in "${PG_HA_NODES[@]}"; do
    if [[ -f "$dir/$node/PG_VERSION" ]]; then pg_ha_launch "$node"; else start_pg_ha_node "$node"; fi
  done
  wait_for "a primary" "$LOGS/postgres-ha-monitor.log" 180 pg_ha_has_primary
  wait_for "the formation (a primary and a synchronous standby)" "$LOGS/postgres-ha-monitor.log" 180 pg_ha_healthy
  pg_ha_application_role "$(pg_ha_primary)"
  log "up: PostgreSQL with failover, primary $(pg_ha_primary) ($PG_HA_URL)"
}

# Stops NAME's pg_autoctl (which stops its postgres), or kills its group.
stop_pg_ha_node() {
  local name="$1" pid
  pid="$(pg_ha_run_pid "$name")"
  [[ -n "$pid" ]] || { log "pg_autoctl $name not running"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  log "pg_autoctl $name stopped"
}

# The monitor first: nodes without it keep their roles (stopping the
# primary while the monitor watched would fail it over).
stop_postgres_ha() {
  local node
  stop_pg_ha_node monitor
  for node in "${PG_HA_NODES[@]}"; do stop_pg_ha_node "$node"; done
}

# kill -9 of NAME's pg_autoctl, its supervisor and its postmaster (the
# process group), as a machine that dies.
pg_ha_kill() {
  local pid; pid="$(pg_ha_run_pid "$1")"
  [[ -n "$pid" ]] || die "pg_autoctl $1 is not running"
  kill -KILL -- "-$pid"
  log "killed pg_autoctl $1 and its postgres (process group $pid)"
}

postgres_ha_status() {
  if ! pg_ha_ready monitor >/dev/null 2>&1; then echo "postgres-ha: down"; return 1; fi
  pg_autoctl_as_postgres show state --pgdata "$(pg_ha_dir)/monitor"
  echo "primary: $(pg_ha_primary); url: $PG_HA_URL"
  pg_ha_healthy
}
