#!/usr/bin/env bash
# The compile-time checks of the SQL (sqlx's query macros) read query
# descriptions committed in .sqlx/, so the build never needs a database.
# This script makes them from the migrations and the code, against a
# scratch database on the local PostgreSQL (infra/local/up.sh postgres):
#   infra/local/sqlx.sh prepare   rewrite .sqlx/ (after changing a query or a migration)
#   infra/local/sqlx.sh check     fail when .sqlx/ is not what the code and migrations give
# It needs no sqlx-cli: the macros themselves write the descriptions
# (SQLX_OFFLINE_DIR) while the crates that hold queries are rebuilt.
source "$(dirname "$0")/common.sh"
mode="${1:-check}"
[[ "$mode" == prepare || "$mode" == check ]] || die "usage: $0 prepare|check"
db=seckill_sqlx_$$
url="postgres://seckill:seckill@127.0.0.1:$PG_PORT/$db"
export PGPASSWORD=seckill
psql=(psql -h 127.0.0.1 -p "$PG_PORT" -U seckill -v ON_ERROR_STOP=1 -qtA)
out="$(mktemp -d)"
cleanup() { "${psql[@]}" -d seckill -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; rm -rf "$out"; }
trap cleanup EXIT
"${psql[@]}" -d seckill -c "CREATE DATABASE $db" >/dev/null
for migration in "$ROOT"/migrations/*.sql; do
  # One transaction each, as sqlx applies them (a migration may LOCK TABLE).
  "${psql[@]}" -1 -d "$db" -f "$migration" >/dev/null 2>&1 || die "applying $(basename "$migration") failed"
done
# Rebuild exactly the crates whose code holds queries.
crates=()
for manifest in "$ROOT"/shared/Cargo.toml "$ROOT"/services/*/Cargo.toml; do
  dir="$(dirname "$manifest")"
  if grep -rqE 'sqlx::query(_as|_scalar)?!' "$dir/src"; then
    find "$dir/src" -name '*.rs' -exec touch {} +
    crates+=(-p "$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -1)")
  fi
done
(cd "$ROOT" && SQLX_OFFLINE=false SQLX_OFFLINE_DIR="$out" DATABASE_URL="$url" cargo build -q "${crates[@]}" --all-targets)
if [[ "$mode" == prepare ]]; then
  rm -rf "$ROOT/.sqlx" && cp -r "$out" "$ROOT/.sqlx"
  log "wrote $(ls "$ROOT/.sqlx" | wc -l) query descriptions to .sqlx/"
elif ! diff -rq "$out" "$ROOT/.sqlx" >/dev/null; then
  diff -rq "$out" "$ROOT/.sqlx" >&2 || true
  die ".sqlx/ is stale: run infra/local/sqlx.sh prepare (make sqlx-prepare) and commit it"
else
  log ".sqlx/ matches the code and the migrations ($(ls "$out" | wc -l) queries)"
fi
