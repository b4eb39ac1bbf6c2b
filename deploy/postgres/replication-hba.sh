#!/bin/sh
# Run once by the postgres image when it makes its database (mounted in
# /docker-entrypoint-initdb.d): the order service's relay streams the order
# events from a logical replication slot, over a replication connection,
# which pg_hba.conf must admit (the image admits ordinary ones only).
set -e
echo "host replication all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
