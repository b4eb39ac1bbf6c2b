"""The drain: the order service started on a backlog of accepted orders,
its rate against the PostgreSQL ceiling, its events as a consumer reads
them, and the same with PostgreSQL on a core of its own."""
import time

from benchmarks import ceilings, events
from benchmarks.common import (
    EDGE,
    RESULTS,
    cpu_per,
    edge,
    lag,
    load,
    log,
    order_service,
    orders_written,
    pin,
    pipeline_cpu,
    psql,
    ratio,
    sale,
    stop,
    warm,
)


def drain(sales, label):
    """The order service started on the backlog of `sales`' orders. The rate
    runs from the first order row (its transaction's start) to the moment
    the service's own counter of orders written reached the backlog (polled
    every 50 ms over HTTP: polling PostgreSQL would take from what is
    measured); joining the group before the first row is reported apart. The
    consumer downstream (started with the run) reads the events as they
    come: when the last of the drained orders' events reached the topic is
    its view. CPU per order of each part, every PostgreSQL process's and
    those that ended included."""
    backlog = lag()
    t0 = time.time()
    o = order_service()
    cpu_before = pipeline_cpu(None, o)
    written = 0
    series = []
    while time.time() - t0 < 600:
        written = orders_written()
        series.append((round(time.time() - t0, 3), written))
        if written >= backlog:
            break
        time.sleep(0.05)
    last = time.time()
    last_event = events.watcher().wait(sales, backlog, 120)
    cpu_after = pipeline_cpu(None, o)
    while lag() > 0 and time.time() - t0 < 600:
        time.sleep(0.1)
    first = float(psql(f"SELECT extract(epoch FROM min(created_at)) FROM orders WHERE activity_id IN ({','.join(map(str, sales))})"))
    seconds = last - first
    result = {"backlog": backlog, "seconds": seconds, "ordersPerSecond": written / seconds,
              "written": written, "startToFirstOrderSeconds": first - t0,
              "startToLagZeroSeconds": time.time() - t0, "series": series,
              "eventsSeen": events.watcher().seen(sales),
              "lastEventAfterLastOrderSeconds": None if last_event is None else last_event - last,
              "cpuMicrosPerOrder": cpu_per(cpu_before, cpu_after, backlog)}
    log(f"{label}: {written} of {backlog} records in {seconds:.2f}s = {written / seconds:.0f} orders/s; "
        f"{events.watcher().seen(sales)} events seen by a consumer, the last "
        f"{'never' if last_event is None else f'{last_event - last:.2f} s after the last order row'}; "
        f"CPU per order {result['cpuMicrosPerOrder']}")
    return o, result


def pinned():
    """The drain as in production: PostgreSQL on a core of its own (CPU 1),
    everything else on the other (CPU 0), for its ceiling and for the drain
    of a fresh backlog, in that order."""
    e = edge()
    warm(sale(18), 1, 50_000_000)
    load(EDGE, sale(18), 1, 200_000, 200_000)
    stop(e)
    pin(True)
    RESULTS["ceiling_postgres_pinned"] = ceilings.pg_ceiling(15)
    log(f"(c) pinned: {RESULTS['ceiling_postgres_pinned']['rowsPerSecond']:.0f} rows/s")
    o, RESULTS["drain_pinned"] = drain((sale(18),), "drain, pinned")
    stop(o)
    pin(False)


def drain_rows(pinned, drain, ceiling):
    """The report's rows of a drain, against the ceiling measured the same way."""
    pg = drain["cpuMicrosPerOrder"].get("postgres", 0.0)
    target = "0.6" if pinned else "0.45"
    event = ("never came" if drain.get("lastEventAfterLastOrderSeconds") is None
             else f"{drain['lastEventAfterLastOrderSeconds']:.2f} s after the last order row")
    return [
        (f"{pinned}drain of a {drain['backlog']:,}-record backlog (order service, its CREATED events)", f"{drain['ordersPerSecond']:,.0f} orders/s",
         f"{drain['seconds']:.2f} s first to last order; service start to first order {drain['startToFirstOrderSeconds']:.2f} s, to lag 0 {drain['startToLagZeroSeconds']:.2f} s",
         f"{ratio(drain['ordersPerSecond'], ceiling['rowsPerSecond']):.2f} x (c){' pinned' if pinned else ''} (target {target})"),
        (f"{pinned}drain: its events, as a consumer of the events topic sees them",
         f"{drain.get('eventsSeen', 0):,} of {drain['backlog']:,} CREATED events",
         "CPU per order: " + ", ".join(f"{k} {v} us" for k, v in drain["cpuMicrosPerOrder"].items()),
         f"the last {event} (target 2 s); PostgreSQL {pg} us per order = "
         f"{ratio(pg, ceiling['postgresMicrosPerRow']):.2f} x (c){' pinned' if pinned else ''}'s per row (target 1.3)"),
    ]
