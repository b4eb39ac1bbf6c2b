"""What exporting spans costs: the accepted path and its drain with spans
off, every trace exported, one in a hundred, and one in a hundred while
every request claims to be sampled."""
import json
import os
import time

from benchmarks.common import (
    BIN,
    EDGE,
    LOGS,
    ORDER_METRICS,
    RESULTS,
    ROOT,
    cpu_seconds,
    edge,
    lag,
    load,
    log,
    order_metric,
    orders_written,
    profiled_load,
    sale,
    start,
    stop,
    wait_http,
    wait_port,
    warm,
)

TRACING_RECEIVER = "127.0.0.1:4319"


def drained_cpu(extra):
    """The order service (with `extra`) started on the backlog its group
    lags by: its CPU per order (microseconds) until its counter of orders
    written reaches that backlog and its relay has sent their events (its
    counter of events relayed still for two seconds) — not left to the next
    run's order service, whose figure it would swell."""
    target = lag()
    o = start([str(BIN / "seckill-order")], "order-tracing", dict({"SECKILL__METRICS_ADDR": ORDER_METRICS}, **extra))
    wait_http(f"http://{ORDER_METRICS}/readyz")
    before, deadline = cpu_seconds(o.pid), time.time() + 300
    while orders_written() < target and time.time() < deadline:
        time.sleep(0.05)
    if orders_written() < target:
        log(f"the order service wrote {orders_written()} of {target} in 300 s")
    relayed, still_since = -1, time.time()
    while time.time() < deadline and time.time() - still_since < 2:
        now = order_metric("seckill_events_relayed_total")
        if now != relayed:
            relayed, still_since = now, time.time()
        time.sleep(0.1)
    spent = cpu_seconds(o.pid) - before
    stop(o)
    return round(spent / max(target, 1) * 1e6, 1)


def tracing_cost():
    """What exporting spans costs: the accepted path (edge) and the drain of
    what it accepted (order service with its relay), each with spans off,
    exported every one (a local OTLP receiver, infra/local/otlp_receiver.py,
    decoding them), and exported one trace in a hundred — also when every
    request comes with a `traceparent` whose sampled flag is set, from a
    client the edge does not trust (a buyer trying to force tracing: the
    edge starts its own trace, sampled at the ratio). CPU per order of the
    edge and of the order service, and the edge's spans the receiver took
    per order."""
    spans = LOGS / "bench-spans.jsonl"
    receiver = start([str(ROOT / ".data" / "venv" / "bin" / "python"), str(ROOT / "infra" / "local" / "otlp_receiver.py"),
                      TRACING_RECEIVER.split(":")[1], str(spans)], "otlp-receiver")
    wait_port(TRACING_RECEIVER)
    endpoint = {"SECKILL_OTLP_ENDPOINT": f"http://{TRACING_RECEIVER}"}
    one_in_100 = dict(endpoint, SECKILL__TELEMETRY__OTLP_SAMPLE_RATIO="0.01")
    flagged = f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"
    runs = (("off", {}, None), ("every trace", endpoint, None), ("1 in 100", one_in_100, None),
            ("1 in 100, every request flagged sampled", one_in_100, flagged))
    result = {}
    def edge_spans_so_far():
        """The edge's spans the receiver wrote, once it has written all it
        was sent (it decodes behind the exporters: every-trace runs leave it
        a backlog). The edge's only: the relay of a run may still send events
        of the run before (each with its own trace's flag)."""
        lines, steady_since, deadline = -1, time.time(), time.time() + 300
        while time.time() < deadline:
            now = sum(1 for _ in spans.open()) if spans.exists() else 0
            if now != lines:
                lines, steady_since = now, time.time()
            elif time.time() - steady_since >= 3:
                break
            time.sleep(0.5)
        if not spans.exists():
            return 0
        return sum(1 for line in spans.open() if json.loads(line).get("service") == "seckill-edge")
    for n, (label, extra, traceparent) in enumerate(runs):
        e = edge(extra)
        warm(sale(30 + n), 1, 50_000_000)
        load(EDGE, sale(30 + n), 1, 20_000, 20_000, offset=1_000_000)
        before = edge_spans_so_far()
        accepted = profiled_load(e, EDGE, sale(30 + n), 100_000, traceparent=traceparent)
        stop(e)
        edge_spans = edge_spans_so_far() - before
        drained = drained_cpu(extra)
        result[label] = {"requestsPerSecond": accepted["requestsPerSecond"], "p99Ms": accepted["latencyMs"]["p99"],
                         "edgeMicrosPerOrder": accepted["cpuMicrosPerRequest"]["service"], "orderServiceMicrosPerOrder": drained,
                         "edgeSpansPerOrder": round(edge_spans / 100_000, 3)}
        log(f"tracing {label}: edge {result[label]['edgeMicrosPerOrder']} us/order, "
            f"order service {drained} us/order, {result[label]['edgeSpansPerOrder']} edge spans/order, "
            f"{accepted['requestsPerSecond']:.0f} req/s")
    stop(receiver)
    spans.unlink(missing_ok=True)
    RESULTS["tracing"] = result
