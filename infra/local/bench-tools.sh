#!/usr/bin/env bash
# make bench's own tools, installed when missing (idempotent): perf (Debian's
# linux-perf: sampling the edge and the order service on the cpu-clock
# event, which needs no hardware counter) and inferno 0.12.8 from crates.io
# (perf's stacks folded and drawn as flame graphs), into .data/tools.
source "$(dirname "$0")/common.sh"
command -v perf >/dev/null || apt_install linux-perf
TOOLS="$DATA/tools"
if [[ ! -x "$TOOLS/bin/inferno-flamegraph" ]]; then
  log "installing inferno 0.12.8 into $TOOLS"
  cargo install --quiet --locked --version 0.12.8 --root "$TOOLS" inferno >"$LOGS/inferno.log" 2>&1 \
    || die "cargo install inferno failed; see $LOGS/inferno.log"
fi
