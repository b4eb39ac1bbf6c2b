#!/usr/bin/env bash
# One node of the PostgreSQL formation (up.sh --postgres-ha), for the
# failover tests (make chaos-pg):
#   postgres_ha_node.sh kill NODE     kill -9 of its pg_autoctl, supervisor and postmaster
#   postgres_ha_node.sh start NODE    its pg_autoctl run again (it rejoins as it can: a
#                                     killed primary comes back as the new primary's standby)
#   postgres_ha_node.sh group NODE    its process group (kill -9 -- -GROUP is the kill, at once)
#   postgres_ha_node.sh primary       which node is primary now (exit 1: none)
#   postgres_ha_node.sh healthy       exit 0 once a primary and a secondary run as assigned
# NODE: node1 (:5441), node2 (:5442) or monitor (:5440).
source "$(dirname "$0")/common.sh"
case "${1:-}" in
  kill) pg_ha_kill "${2:?NODE}" ;;
  start) pg_ha_run "${2:?NODE}" ;;
  group) group="$(pg_ha_run_pid "${2:?NODE}")"; [[ -n "$group" ]] && echo "$group" ;;
  primary) primary="$(pg_ha_primary)"; [[ -n "$primary" ]] && echo "$primary" ;;
  healthy) pg_ha_healthy ;;
  *) die "usage: $0 kill|start|group NODE, or primary, or healthy" ;;
esac
