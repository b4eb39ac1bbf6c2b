"""End to end: a 100,000-unit sale under full load with the order service
running — requests by outcome over time, the consumer lag, the last
CREATED event as a consumer reads it, and every part's CPU per order."""
import json
import threading
import time

from benchmarks import events
from benchmarks.common import (
    EDGE,
    RESULTS,
    cpu_per,
    ctl,
    edge,
    lag,
    load,
    log,
    orders_written,
    pipeline_cpu,
    sale,
    stop,
    warm,
)


def sale_end_to_end(o):
    """The sale, with the order service `o` (stopped after it)."""
    e = edge()
    warm(sale(8), 1, 100_000)
    max_lag = [0]
    lag_series = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            try:
                now = lag()
                lag_series.append((round(time.time() - t0, 3), now))
                max_lag[0] = max(max_lag[0], now)
            except SystemExit:
                pass
            time.sleep(0.2)

    written = orders_written()
    # What every part spends from the first request to the last CREATED
    # event on the topic, per order of the sale.
    cpu_before = pipeline_cpu(e, o)
    t0 = time.time()
    lag_watcher = threading.Thread(target=watch)
    lag_watcher.start()
    e2e = load(EDGE, sale(8), 1, 120_000, 120_000, conns=256, timeline_ms=100)
    while orders_written() < written + 100_000 and time.time() - t0 < 600:
        time.sleep(0.05)
    e2e_seconds = time.time() - t0
    last_event = events.watcher().wait((sale(8),), 100_000, 120)
    cpu_after = pipeline_cpu(e, o)
    done.set()
    lag_watcher.join()
    lag_after = lag()
    per_order = cpu_per(cpu_before, cpu_after, 100_000)
    RESULTS["end_to_end"] = {"bench": e2e, "seconds_to_last_order": e2e_seconds, "max_lag": max_lag[0], "lag_after": lag_after,
                             "lagSeries": lag_series,
                             "secondsToLastEvent": None if last_event is None else last_event - t0,
                             "cpuMicrosPerOrder": {**per_order, "total": round(sum(per_order.values()), 1)}}
    log(f"end to end: 100000 orders in {e2e_seconds:.1f}s, the last CREATED event after "
        f"{'never' if last_event is None else f'{last_event - t0:.1f}s'}, max lag {max_lag[0]}, CPU per order {per_order}")
    recon = json.loads(ctl("reconcile", "--activity", sale(8), "--sku", 1, "--wait-drain", 60, "--json", check=False))
    RESULTS["end_to_end"]["consistent"] = recon["consistent"]
    stop(e)
    stop(o)
