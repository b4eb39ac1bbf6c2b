#!/usr/bin/env bash
# What the Rust build itself needs beyond the toolchain, installed when
# missing (idempotent): librdkafka 2.12, which rdkafka-sys compiles from
# source, includes curl's headers even with curl support switched off.
source "$(dirname "$0")/common.sh"
dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || apt_install libcurl4-openssl-dev
