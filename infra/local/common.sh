# Shared settings for infra/local/*.sh. Sourced, not run.
#
# Everything the local servers write lives under $SECKILL_DATA (default: the
# repository's git-ignored .data/), and the Kafka jars are cached under
# $SECKILL_CACHE (default: ~/.cache/seckill), outside git, so a fresh clone
# on a warm machine does not fetch them again.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DATA="${SECKILL_DATA:-$ROOT/.data}"
CACHE="${SECKILL_CACHE:-$HOME/.cache/seckill}"
LOGS="$DATA/logs"
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$ROOT/infra/kafka/pom.xml")"
KAFKA_LIBS="$CACHE/kafka-$KAFKA_VERSION/libs"
PG_BIN="${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"

REDIS_PORT=6379
PG_PORT=5432
KAFKA_PORT=9092
KAFKA_CONTROLLER_PORT=9093

mkdir -p "$DATA" "$LOGS"

log() { printf '[infra] %s\n' "$*" >&2; }
die() { printf '[infra] error: %s\n' "$*" >&2; exit 1; }

# wait_for NAME LOGFILE SECONDS CMD...: runs CMD until it succeeds, or fails
# naming the log file to read.
wait_for() {
  local name="$1" logfile="$2" seconds="$3"; shift 3
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS >= deadline )); then
      tail -n 20 "$logfile" >&2 2>/dev/null || true
      die "$name did not answer within ${seconds}s; see $logfile"
    fi
    sleep 0.5
  done
}

APT_UPDATED=0
apt_install() {
  if [[ $APT_UPDATED == 0 ]]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >"$LOGS/apt.log" 2>&1 || die "apt-get update failed; see $LOGS/apt.log"
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"$LOGS/apt.log" 2>&1 \
    || die "apt-get install $* failed; see $LOGS/apt.log"
}

# venv_install NAME==VERSION...: each into the project's virtualenv
# (.data/venv) when missing or at another version.
VENV="$DATA/venv"
venv_install() {
  local package missing=()
  for package in "$@"; do
    [[ "$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('${package%%==*}'))" 2>/dev/null)" == "${package##*==}" ]] \
      || missing+=("$package")
  done
  (( ${#missing[@]} == 0 )) && return 0
  [[ -x "$VENV/bin/pip" ]] || python3 -m venv "$VENV" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$VENV"; }
  log "installing ${missing[*]} into $VENV"
  "$VENV/bin/pip" install -q "${missing[@]}" >"$LOGS/pip.log" 2>&1 || die "pip install ${missing[*]} failed; see $LOGS/pip.log"
}

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pidfile NAME PIDFILE SECONDS: SIGTERM, then SIGKILL after SECONDS.
stop_pidfile() {
  local name="$1" pidfile="$2" seconds="$3"
  pid_alive "$pidfile" || { log "$name not running"; return 0; }
  local pid; pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + seconds)) killed=0
  # A process already dead but not yet reaped (a zombie) still answers
  # kill -0: ps says which.
  while kill -0 "$pid" 2>/dev/null && [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" != Z* ]]; do
    if (( SECONDS >= deadline && ! killed )); then
      log "$name did not stop in ${seconds}s; killing"
      kill -KILL "$pid" 2>/dev/null || true
      killed=1
    fi
    sleep 0.2
  done
  rm -f "$pidfile"
  log "$name stopped"
}

# port_holder PORT: "pid command directory" of the process listening on
# 127.0.0.1:PORT (its working directory: a postgres' or a redis' data
# directory), or nothing when the port is free.
port_holder() {
  command -v ss >/dev/null || apt_install iproute2
  local pid; pid="$(ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)"
  [[ -n "$pid" ]] || return 0
  local command; command="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | tr -s ' ')"
  echo "$pid|$(readlink "/proc/$pid/cwd" 2>/dev/null)|$command"
}

# refuse_foreign NAME PORT: when the port is held by a server of another
# checkout (anything but Debian's own service, which the callers stop),
# fail naming it — pid, command, directory — and how to stop it; a
# checkout's servers are never stopped from another one.
refuse_foreign() {
  local name="$1" port="$2" holder pid dir command
  holder="$(port_holder "$port")"
  [[ -n "$holder" ]] || return 0
  IFS='|' read -r pid dir command <<<"$holder"
  case "$dir" in
    /var/lib/postgresql/*|/var/lib/redis*) return 0 ;; # Debian's service: the caller stops it
  esac
  # This checkout's own (its pid file lost): the caller deals with it.
  [[ "$dir/ $command" == *"$DATA/"* ]] && return 0
  local how="kill -TERM $pid" data="$dir" checkout='(/[^ ]*)/\.data/[^ ]*'
  if [[ "$dir/ $command" =~ $checkout ]]; then
    data="${BASH_REMATCH[0]}"
    how="${BASH_REMATCH[1]}/infra/local/down.sh (or kill -TERM $pid)"
  fi
  die "$name's port :$port is held by pid $pid (${command:0:100}), its data in $data — another checkout's servers, not this one's ($DATA). Stop them first: $how"
}

redis_ping() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }
pg_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; }
kafka_ready() { python3 "$ROOT/infra/local/kafka_ready.py" 127.0.0.1 "$KAFKA_PORT"; }

pg_data_dir() {
  # PostgreSQL runs as the postgres user, which must reach its data folder.
  if runuser -u postgres -- test -x "$DATA" 2>/dev/null || chmod o+x "$DATA" 2>/dev/null && runuser -u postgres -- test -x "$DATA"; then
    echo "$DATA/postgres"
  else
    echo "/var/tmp/seckill-postgres"
  fi
}

# The servers named on the command line, or all of them.
selected() {
  if (( $# == 0 )); then echo "redis postgres kafka"; else echo "$@"; fi
}

# `--cluster` as the first argument selects the replicated topology,
# `--redis-cluster` the Redis Cluster one, `--postgres-ha` PostgreSQL with
# failover.
TOPOLOGY=single
case "${1:-}" in
  --cluster) TOPOLOGY=cluster; shift ;;
  --redis-cluster) TOPOLOGY=redis-cluster; shift ;;
  --postgres-ha) TOPOLOGY=postgres-ha; shift ;;
esac
source "$ROOT/infra/local/cluster.sh"
source "$ROOT/infra/local/redis_cluster.sh"
source "$ROOT/infra/local/postgres_ha.sh"
