#!/usr/bin/env bash
# otlp_receiver.sh PORT OUT: the small OTLP/HTTP trace receiver
# (otlp_receiver.py) in the foreground, its one package (PyPI
# opentelemetry-proto, the OpenTelemetry project's message types) installed
# into the project's virtualenv first when missing. make demo runs it on
# :4318 when SECKILL_OTLP_ENDPOINT names no collector of the user's.
source "$(dirname "$0")/common.sh"
venv_install "opentelemetry-proto==1.45.2"
exec "$VENV/bin/python" "$ROOT/infra/local/otlp_receiver.py" "$@"
