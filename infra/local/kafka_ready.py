#!/usr/bin/env python3
"""Exit 0 when a Kafka broker answers a metadata request naming at least N brokers (default 1).

Used by up.sh and status.sh, which run before any of the project's binaries are
built, so it speaks the wire protocol itself: ApiVersions v0, then Metadata v4
(the oldest version Kafka 4.x still serves).
"""
import socket
import struct
import sys


def request(sock, api_key, version, correlation, body):
    client = b"seckill-infra"
    header = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", read_exact(sock, 4))[0]
    return read_exact(sock, size)


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        data += chunk
    return data


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    wanted = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    with socket.create_connection((host, port), timeout=3) as sock:
        sock.settimeout(3)
        response = request(sock, 18, 0, 1, b"")
        error = struct.unpack(">h", response[4:6])[0]
        if error != 0:
            sys.exit(f"ApiVersions error {error}")
        # Metadata v4: topics = null (all), allow_auto_topic_creation = false.
        response = request(sock, 3, 4, 2, struct.pack(">ib", -1, 0))
        brokers = struct.unpack(">i", response[8:12])[0]
        if brokers < wanted:
            sys.exit(f"{brokers} broker(s) in metadata, waiting for {wanted}")


if __name__ == "__main__":
    try:
        main()
    except (OSError, ConnectionError, struct.error) as exc:
        sys.exit(str(exc))
