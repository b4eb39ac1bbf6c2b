#!/usr/bin/env python3
"""Deletes the topics earlier test runs left on the local broker: every
topic named t<12 hex digits>.* (tests/harness gives each test such a
prefix). Run by clean-test-data.sh, when no test runs. Speaks the wire
protocol itself (Metadata v4, DeleteTopics v1), as kafka_ready.py does.
Prints how many it deleted."""
import re
import socket
import struct
import sys

from kafka_ready import request

TEST_TOPIC = re.compile(r"^t[0-9a-f]{12}\.")


def string(data, at):
    length = struct.unpack(">h", data[at:at + 2])[0]
    return (data[at + 2:at + 2 + length].decode() if length >= 0 else None), at + 2 + max(length, 0)


def topic_names(sock):
    response = request(sock, 3, 4, 1, struct.pack(">ib", -1, 0))
    at = 8  # correlation id, throttle time
    (brokers,) = struct.unpack(">i", response[at:at + 4])
    at += 4
    for _ in range(brokers):
        at += 4
        _, at = string(response, at)
        at += 4
        _, at = string(response, at)
    _, at = string(response, at)  # cluster id
    at += 4  # controller id
    (topics,) = struct.unpack(">i", response[at:at + 4])
    at += 4
    names = []
    for _ in range(topics):
        at += 2
        name, at = string(response, at)
        at += 1  # is_internal
        (partitions,) = struct.unpack(">i", response[at:at + 4])
        at += 4
        for _ in range(partitions):
            at += 2 + 4 + 4
            for _ in range(2):  # replicas, isr
                (count,) = struct.unpack(">i", response[at:at + 4])
                at += 4 + 4 * count
        names.append(name)
    return names


def delete(sock, names):
    body = struct.pack(">i", len(names))
    for name in names:
        body += struct.pack(">h", len(name)) + name.encode()
    body += struct.pack(">i", 60_000)
    response = request(sock, 20, 1, 2, body)
    count, at, deleted = struct.unpack(">i", response[8:12])[0], 12, 0
    for _ in range(count):
        _, at = string(response, at)
        deleted += struct.unpack(">h", response[at:at + 2])[0] == 0
        at += 2
    return deleted


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9092
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.settimeout(90)
            names = [n for n in topic_names(sock) if n and TEST_TOPIC.match(n)]
            deleted = sum(delete(sock, names[i:i + 200]) for i in range(0, len(names), 200))
    except (OSError, ConnectionError, struct.error) as exc:
        print(f"0 (no broker: {exc})")
        return
    print(deleted)


if __name__ == "__main__":
    main()
