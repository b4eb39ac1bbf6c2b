#!/usr/bin/env bash
# busy.sh COMMAND...: runs COMMAND while other processes keep every core
# busy (one `yes > /dev/null` per core, at the same priority as the
# command), and stops them however the command ends: a machine shared with
# other work, as CI's and a developer's are (make test-stress).
set -euo pipefail
cores="$(nproc)"
pids=()
stop_busy() { [[ ${#pids[@]} -gt 0 ]] && kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null || true; }
trap stop_busy EXIT
for _ in $(seq "$cores"); do
  yes >/dev/null &
  pids+=("$!")
done
printf '[stress] %s processes keep the %s cores busy; running: %s\n' "${#pids[@]}" "$cores" "$*" >&2
started=$SECONDS
status=0
"$@" || status=$?
printf '[stress] ended with %s after %s s\n' "$status" "$((SECONDS - started))" >&2
exit "$status"
