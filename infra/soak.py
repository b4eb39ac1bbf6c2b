#!/usr/bin/env python3
"""`make soak`: the whole pipeline under a steady load of distinct buyers for
a while, and every service's resident memory over that time — memory that
only grows shows up here, never in a benchmark's minute.

  SOAK_SECONDS (300)   how long the load runs
  SOAK_RATE (2700)     orders per second, open loop

The edge, an order service and a compensator (release binaries) run with
this run's own prefixes; one sale with stock for every order; the load
generator sends one order per distinct user. RSS of each process is sampled
every SOAK_SAMPLE_SECONDS (15). Prints a table and writes
soak-results.json; cleans up what it created (bench.py's clean-up).
"""
import json
import os
import threading
import time
from pathlib import Path

import bench as b

SECONDS = int(os.environ.get("SOAK_SECONDS", "300"))
RATE = int(os.environ.get("SOAK_RATE", "2700"))
SAMPLE = int(os.environ.get("SOAK_SAMPLE_SECONDS", "15"))
COMPENSATOR_METRICS = "127.0.0.1:9112"


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main():
    b.LOGS.mkdir(parents=True, exist_ok=True)
    b.log(f"soak {b.RUN}: {RATE} orders/s for {SECONDS} s on {b.machine()}")
    b.ctl("migrate")
    procs = {
        "edge": b.edge(),
        "order": b.order_service(),
        "compensator": b.start([str(b.BIN / "seckill-compensator")], "compensator",
                               {"SECKILL__METRICS_ADDR": COMPENSATOR_METRICS}),
    }
    b.wait_http(f"http://{COMPENSATOR_METRICS}/readyz")
    b.warm(b.sale(1), 1, RATE * SECONDS + 1_000)
    samples = []
    started = time.time()

    def sample():
        samples.append({"seconds": round(time.time() - started), **{k: round(rss_mib(p.pid), 1) for k, p in procs.items()}})

    sample()
    load = threading.Thread(target=lambda: b.ctl(
        "bench", "--url", f"http://{b.EDGE}", "--activity", b.sale(1), "--sku", 1, "--users", RATE * SECONDS,
        "--concurrency", 256, "--rate", RATE, "--duration", SECONDS, "--json"))
    load.start()
    while load.is_alive():
        time.sleep(SAMPLE)
        sample()
    # The drain and the sweeper's work after the load.
    for _ in range(4):
        time.sleep(SAMPLE)
        sample()
    report(samples)


def report(samples):
    lines = ["| s | edge MiB | order MiB | compensator MiB |", "|---|---|---|---|"]
    lines += [f"| {s['seconds']} | {s['edge']} | {s['order']} | {s['compensator']} |" for s in samples]
    print("\n".join(lines), flush=True)
    (b.ROOT / "soak-results.json").write_text(json.dumps({"rate": RATE, "seconds": SECONDS, "samples": samples}, indent=2))


if __name__ == "__main__":
    try:
        main()
    finally:
        for proc in list(b.PROCS):
            b.stop(proc)
        b.clean_up()
