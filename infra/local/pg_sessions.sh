#!/usr/bin/env bash
# Who is in PostgreSQL now, in every database of the server: each session
# with its pid, database, application_name (each binary names its own:
# seckill-edge, seckill-order, ...), state, transaction age, backend_xid and
# backend_xmin (a transaction open anywhere holds the relay's horizon back),
# the pids blocking it, and its query; then the prepared transactions (they
# hold the horizon too, with no session at all). For a stall: the demo's
# failure dump runs it; operators can too.
#
#   infra/local/pg_sessions.sh [URL]   (default: SECKILL_DATABASE_URL, else the local server)
set -uo pipefail
URL="${1:-${SECKILL_DATABASE_URL:-postgres://seckill:seckill@127.0.0.1:5432/seckill}}"
echo "pid | database | application | state | transaction age | backend_xid | backend_xmin | blocked by | wait | query"
psql "$URL" -XAtF ' | ' -c \
  "SELECT pid, datname, application_name, state, date_trunc('millisecond', now() - xact_start),
          backend_xid, backend_xmin, pg_blocking_pids(pid), concat_ws(':', wait_event_type, wait_event),
          left(regexp_replace(query, '\s+', ' ', 'g'), 90)
     FROM pg_stat_activity
    WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'
    ORDER BY xact_start NULLS LAST"
echo "prepared transaction gid | transaction | database | owner | age"
psql "$URL" -XAtF ' | ' -c \
  "SELECT gid, transaction, database, owner, date_trunc('millisecond', now() - prepared)
     FROM pg_prepared_xacts ORDER BY prepared"
