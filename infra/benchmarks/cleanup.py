"""What a run leaves behind, deleted: its Redis keys, PostgreSQL rows and
Kafka topics."""
import socket
import struct
import subprocess
import sys

from benchmarks.ceilings import drop_ceiling_database
from benchmarks.common import ROOT, RUN, log, psql, sale


def delete_topics(names):
    """Kafka DeleteTopics v1 by hand (no Kafka tool is installed): how many
    of `names` the broker deleted."""
    sys.path.insert(0, str(ROOT / "infra" / "local"))
    from kafka_ready import read_exact, request  # noqa: F401  (the wire helpers)
    body = struct.pack(">i", len(names))
    for name in names:
        body += struct.pack(">h", len(name)) + name.encode()
    body += struct.pack(">i", 30_000)
    with socket.create_connection(("127.0.0.1", 9092), timeout=35) as sock:
        sock.settimeout(35)
        response = request(sock, 20, 1, 1, body)
    count, at, deleted = struct.unpack(">i", response[8:12])[0], 12, 0
    for _ in range(count):
        length = struct.unpack(">h", response[at:at + 2])[0]
        at += 2 + length
        deleted += struct.unpack(">h", response[at:at + 2])[0] == 0
        at += 2
    return deleted


def clean_up():
    """Deletes this run's Redis keys, PostgreSQL rows and Kafka topics:
    benchmarks leave hundreds of thousands of orders behind, a Redis that
    grows by gigabytes rewrites its AOF in the middle of the next run, and
    every topic keeps its partitions on the broker for good."""
    keys = subprocess.run(["redis-cli", "--scan", "--pattern", f"{RUN}:*"], capture_output=True, text=True).stdout.split()
    for i in range(0, len(keys), 500):
        subprocess.run(["redis-cli", "UNLINK", *keys[i:i + 500]], capture_output=True)
    for table in ("orders", "sales", "order_events", "order_events_pruned", "late_payments"):
        psql(f"DELETE FROM {table} WHERE activity_id BETWEEN {sale(0)} AND {sale(99)}")
    drop_ceiling_database()
    psql(f"DROP DATABASE IF EXISTS seckill_{RUN}_drain WITH (FORCE)")
    topics = [f"{RUN}.{kind}seckill.orders{suffix}" for kind in ("", "reference.", "p2.", "second.", "minimal.", "fixed.", "features.")
              for suffix in ("", ".dlq")]
    topics += [f"{RUN}.{kind}seckill.{name}-events" for kind in ("", "second.", "minimal.", "reference.", "p2.", "fixed.", "features.")
               for name in ("order", "draw")]
    try:
        deleted = delete_topics(topics)
    except (OSError, ConnectionError, struct.error) as error:
        deleted = f"none ({error})"
    log(f"cleaned up: {len(keys)} Redis keys, the run's PostgreSQL rows, {deleted} Kafka topics")
