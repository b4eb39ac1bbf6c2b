#!/usr/bin/env bash
# The lint's own tools, installed when missing (idempotent): ruff from PyPI
# into the project's virtualenv (the Python lint of infra/, ruff.toml). Go
# (gofmt, go vet) and the Rust toolchain are the machine's own.
source "$(dirname "$0")/common.sh"
command -v go >/dev/null || die "go is not installed (gofmt and go vet lint deploy/check)"
venv_install "ruff==0.17.6"
