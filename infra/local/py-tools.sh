#!/usr/bin/env bash
# Schemathesis (from PyPI) in a virtualenv of the project's (.data/venv),
# for the OpenAPI fuzzing test. Installed when missing; idempotent.
source "$(dirname "$0")/common.sh"
VENV="$DATA/venv"
VERSION=4.32.5
if [[ -x "$VENV/bin/schemathesis" ]] && "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$VERSION"; then
  exit 0
fi
python3 -m venv "$VENV" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$VENV"; }
log "installing schemathesis $VERSION into $VENV"
"$VENV/bin/pip" install -q "schemathesis==$VERSION" >"$LOGS/pip.log" 2>&1 || die "pip install schemathesis failed; see $LOGS/pip.log"
