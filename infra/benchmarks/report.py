"""BENCHMARKS.md and bench-results.json from a run's results, with its
charts: every figure beside the ceiling it is held to, as a ratio."""
import json
import time

from benchmarks.common import RESULTS, ROOT, RUN, machine, ratio
from benchmarks.drain import drain_rows
from benchmarks.features import feature_rows


def edge_rows(r):
    """The ceilings, the references and the edge's paths."""
    http = r["ceiling_http"]["requestsPerSecond"]
    http_paired = r["ceiling_http_paired"]["requestsPerSecond"]
    redis = r["ceiling_redis"]["requestsPerSecond"]
    pg_rows = r["ceiling_postgres"]["rowsPerSecond"]
    ref = r["reference_edge_redis"]["requestsPerSecond"]
    refk = r["reference_edge_redis_kafka"]
    acc = r["accepted_path"]
    seed = r["reference_seed_kafka"]
    accc = r["accepted_path_consuming"]
    acc2 = r["accepted_path_2_partitions"]
    q2 = r["accepted_path_quantity_two"]
    so = r["sold_out_path"]
    burst = r["hot_burst"]
    lua, lock = r["lua_vs_lock"]["lua"], r["lua_vs_lock"]["lock"]
    lua_acc, lock_acc = lua["accepted"] / lua["seconds"], max(lock["accepted"], 1) / lock["seconds"]
    return [
        ("(a) ceiling: plain HTTP (edge /healthz)", f"{http:,.0f} req/s", "", ""),
        ("(b) ceiling: Redis, deduct.lua by EVALSHA (redis-benchmark)", f"{redis:,.0f} calls/s", "", ""),
        ("(c) ceiling: PostgreSQL, 100-row batch inserts into the orders table without its outbox trigger (pgbench, 8 clients)",
         f"{pg_rows:,.0f} rows/s", f"PostgreSQL {r['ceiling_postgres']['postgresMicrosPerRow']} us per row", ""),
        ("reference: minimal axum handler + the same script", f"{ref:,.0f} req/s", f"p99 {r['reference_edge_redis']['latencyMs']['p99']:.2f} ms", f"{ratio(ref, redis):.2f} x (b)"),
        ("reference + the edge's publish (acks=all, delivery awaited)", f"{refk['requestsPerSecond']:,.0f} req/s",
         f"p50 {refk['latencyMs']['p50']:.2f} ms, p99 {refk['latencyMs']['p99']:.2f} ms", f"{ratio(refk['requestsPerSecond'], ref):.2f} x reference"),
        ("reference: minimal handler + the seed's 4-command script + the edge's publish", f"{seed['requestsPerSecond']:,.0f} req/s",
         f"p50 {seed['latencyMs']['p50']:.2f} ms, p99 {seed['latencyMs']['p99']:.2f} ms", f"{ratio(seed['requestsPerSecond'], refk['requestsPerSecond']):.2f} x reference + publish"),
        ("edge, accepted path (64 conns, distinct users)", f"{acc['requestsPerSecond']:,.0f} req/s",
         f"p50 {acc['latencyMs']['p50']:.2f} ms, p99 {acc['latencyMs']['p99']:.2f} ms",
         f"{ratio(acc['requestsPerSecond'], seed['requestsPerSecond']):.2f} x seed reference + publish (target 1.0); {ratio(acc['requestsPerSecond'], ref):.2f} x reference; {ratio(acc['requestsPerSecond'], refk['requestsPerSecond']):.2f} x reference + publish; {ratio(acc['requestsPerSecond'], http):.2f} x (a); {ratio(acc['requestsPerSecond'], redis):.2f} x (b)"),
        ("edge, accepted path while the order service consumes", f"{accc['requestsPerSecond']:,.0f} req/s",
         f"p50 {accc['latencyMs']['p50']:.2f} ms, p99 {accc['latencyMs']['p99']:.2f} ms (target p99 10 ms)",
         f"{ratio(accc['requestsPerSecond'], seed['requestsPerSecond']):.2f} x seed reference + publish"),
        ("edge, accepted path at a fixed rate (half the plain one): while the order service consumes, and alone",
         f"{r['accepted_at_a_rate']['rate']:,} req/s",
         f"p99 {r['accepted_at_a_rate']['consuming']['latencyMs']['p99']:.2f} ms consuming, "
         f"{r['accepted_at_a_rate']['alone']['latencyMs']['p99']:.2f} ms alone",
         f"{r['accepted_at_a_rate']['p99Ratio']:.2f} x the p99 alone (target 1.2)"),
        ("edge, accepted path of 2-unit orders (limit 2 per buyer) while the order service consumes", f"{q2['requestsPerSecond']:,.0f} req/s",
         f"p50 {q2['latencyMs']['p50']:.2f} ms, p99 {q2['latencyMs']['p99']:.2f} ms",
         f"{q2['ratioToOneUnit']:.2f} x the rate of 1-unit orders (goal 0.9); {q2['unitsRatioToOneUnit']:.2f} x their units per second (goal 1.6)"),
        ("tuning: accepted path, orders topic of 2 partitions (default 8)", f"{acc2['requestsPerSecond']:,.0f} req/s",
         f"p50 {acc2['latencyMs']['p50']:.2f} ms, p99 {acc2['latencyMs']['p99']:.2f} ms",
         f"{ratio(acc2['requestsPerSecond'], ref):.2f} x reference; {ratio(acc2['requestsPerSecond'], acc['requestsPerSecond']):.2f} x 8 partitions"),
        ("buyers (16 conns) while wrk floods /readyz (500 conns)", f"{r['readyz_flood']['flooded']['requestsPerSecond']:,.0f} req/s",
         f"p99 {r['readyz_flood']['flooded']['latencyMs']['p99']:.2f} ms (alone: {r['readyz_flood']['quiet']['latencyMs']['p99']:.2f} ms)",
         f"{r['readyz_flood']['p99VsHealthz']:.2f} x the p99 under a /healthz flood "
         f"({r['readyz_flood']['healthzFlooded']['latencyMs']['p99']:.2f} ms; target 1.2); "
         f"{r['readyz_flood']['p99Ratio']:.2f} x alone"),
        ("(a) again, right before the sold-out path", f"{http_paired:,.0f} req/s", "", f"{ratio(http_paired, http):.2f} x (a)"),
        ("edge, sold-out path (64 conns)", f"{so['requestsPerSecond']:,.0f} req/s",
         f"p99 {so['latencyMs']['p99']:.2f} ms ((a) right before: {r['ceiling_http_paired']['latencyMs']['p99']:.2f} ms, "
         f"{ratio(so['latencyMs']['p99'], r['ceiling_http_paired']['latencyMs']['p99']):.2f} x; target 1.2)",
         f"{ratio(so['requestsPerSecond'], http_paired):.2f} x (a) measured right before (target 0.9); {ratio(so['requestsPerSecond'], http):.2f} x (a) at the start"),
        ("waiting room: one ticket polled (GET /api/seckill/queue/{ticket}, 64 conns)", f"{r['queue_poll']['requestsPerSecond']:,.0f} req/s",
         f"p99 {r['queue_poll']['latencyMs']['p99']:.2f} ms",
         f"{r['queue_poll']['ratioToSoldOut']:.2f} x the sold-out path; {r['queue_poll']['ratioToHttp']:.2f} x (a) measured before it"),
        ("waiting room: a join's proof of work, solved natively (counting up)",
         ", ".join(f"{p['bits']} bits {p['solveMsMean']:.2f} ms" for p in r["pow_cost"] if p["bits"] in (8, 12, 16, 20)),
         f"checking one: {r['pow_cost'][0]['checkMicros']:.2f} us", "each bit doubles the work"),
        ("hot-SKU burst: 100 units, 50,000 users, 256 conns", f"{burst['accepted']} sold (exact: {burst['accepted'] == 100})",
         f"sold out after {burst.get('lastAcceptSeconds') or 0:.3f} s; p99 {burst['latencyMs']['p99']:.2f} ms", f"{burst['requestsPerSecond']:,.0f} req/s"),
        ("deduction = lua vs lock, one hot sale (64 conns)", f"lua {lua_acc:,.0f} vs lock {lock_acc:,.0f} accepted/s",
         f"lock answered {lock['outcomes']}", f"{ratio(lua_acc, lock_acc):.1f} x (target 10)"),
    ]


def pipeline_rows(r):
    """The drains, the end-to-end sale, the spans and an order's whole cost."""
    pg_rows = r["ceiling_postgres"]["rowsPerSecond"]
    drain = r["drain"]
    e2e = r["end_to_end"]
    return [
        *drain_rows(drain, r["drain_reference"], r["drain_pair"], "first"),
        *drain_rows(r["drain_second"], r["drain_reference_second"], r["drain_pair_second"], "second"),
        ("drain against (c), PostgreSQL's ceiling", f"{ratio(drain['ordersPerSecond'], pg_rows):.2f} x (c)",
         f"PostgreSQL {drain['cpuMicrosPerOrder'].get('postgres', 0.0)} us per order, (c) {r['ceiling_postgres']['postgresMicrosPerRow']} us per row",
         f"{ratio(drain['cpuMicrosPerOrder'].get('postgres', 0.0), r['ceiling_postgres']['postgresMicrosPerRow']):.2f} x (c)'s per row"),
        ("end to end: 100,000-unit sale, 120,000 users, 256 conns",
         "never reached its last CREATED event" if e2e.get("secondsToLastEvent") is None
         else f"{e2e['secondsToLastEvent']:.1f} s to the last CREATED event on the topic",
         f"{e2e['seconds_to_last_order']:.1f} s to the last order row; max consumer lag {e2e['max_lag']:,}; edge {e2e['bench']['requestsPerSecond']:,.0f} req/s",
         f"consistent: {e2e['consistent']}"),
        *[(f"spans exported: {label} (accepted path, then its drain)",
           f"edge {t['edgeMicrosPerOrder']} us/order, order service {t['orderServiceMicrosPerOrder']} us/order",
           f"{t['requestsPerSecond']:,.0f} req/s, p99 {t['p99Ms']:.2f} ms, {t.get('edgeSpansPerOrder', 0)} edge spans exported per order",
           "the measure without spans" if label == "off" else
           f"{t['edgeMicrosPerOrder'] - r['tracing']['off']['edgeMicrosPerOrder']:+.1f} us at the edge, "
           f"{t['orderServiceMicrosPerOrder'] - r['tracing']['off']['orderServiceMicrosPerOrder']:+.1f} us at the order service; "
           f"{ratio(t['requestsPerSecond'], r['tracing']['off']['requestsPerSecond']):.2f} x the rate without")
          for label, t in r.get("tracing", {}).items()],
        ("the cost of one order, its HTTP request to its CREATED event on the topic (end-to-end sale)",
         f"{e2e['cpuMicrosPerOrder']['total']} us of CPU",
         ", ".join(f"{k} {v} us" for k, v in e2e['cpuMicrosPerOrder'].items() if k != "total"),
         "every part, /proc of each process"),
    ]


def cpu_table(r):
    """The CPU each request of the accepted-path runs cost, by process."""
    return [
        "CPU per request (microseconds; /proc of each process around the run; `java` is the Kafka broker):",
        "",
        "| run | service | redis-server | java | generator |",
        "|---|---|---|---|---|",
        *[f"| {name} | {c['service']} | {c['redis-server']} | {c['java']} | {c['generator']} |"
          for name, c in ((n, r[k]["cpuMicrosPerRequest"]) for n, k in (
              ("reference", "reference_edge_redis"), ("reference + publish", "reference_edge_redis_kafka"),
              ("seed reference + publish", "reference_seed_kafka"),
              ("edge, accepted path", "accepted_path"),
              ("edge, accepted path, order service consuming", "accepted_path_consuming"),
              ("edge, accepted path, 2 partitions", "accepted_path_2_partitions")))],
    ]


def reading(r):
    """How to read the table, the charts and the flame graphs."""
    return [
        "How to read it:",
        "",
        "- The *reference* is the smallest axum handler running the same Lua deduction (`services/edge/examples/lua_reference.rs`);",
        "  *reference + publish* is that handler also publishing each order exactly as the edge does (acks=all, idempotent,",
        "  delivery awaited): it shows what Kafka itself costs here, so *x reference + publish* near 1 means the edge adds",
        "  little of its own. The *seed reference + publish* runs the seed article's own four-command script",
        "  (`services/edge/examples/seed_seckill.lua`: no window, no order id, no reservation) and publishes the same way;",
        "  the accepted path's target (1.0) is set against it.",
        "- The order service produces each order's CREATED event itself (delivered before its offsets are committed) and",
        "  relays its outbox of later events while it drains and during the end-to-end sale: both include that work.",
        "- The CPU table says where each request's CPU goes. The broker (`java`) and the producer inside the service are the",
        "  difference between the two references; on this machine they share the two cores with everything else.",
        "- The 2-partition row is a tuning figure, not the default: fewer partitions mean larger batches per produce request",
        "  and less broker CPU per order, at the price of fewer consumers able to share the topic.",
        "- The drain is timed from its first order row to the service's counter reaching the backlog; joining the consumer",
        "  group before that is reported apart. Its yardstick is the *minimal drain* (`services/order/examples/minimal_drain.rs`):",
        "  the smallest program doing the same job on the same backlog — batches of at most 2,000 records or 20 ms, one",
        "  `INSERT … SELECT FROM unnest(…) ON CONFLICT DO NOTHING RETURNING` and one guarded stock `UPDATE` per batch in one",
        "  transaction (a database of its own, migrated like the pipeline's), one pipelined Redis write of the statuses, one",
        "  CREATED event per order (the same JSON and CloudEvents headers, acks=all, idempotent, every delivery awaited), the",
        "  offsets committed after. It runs right after the service on the first backlog, and before it on a second one (its",
        "  own topics); *CPU per order, the whole machine* adds up every part (the drain, Redis, the broker, PostgreSQL).",
        "- (c) runs on a database of its own, made with the pipeline's migrations (the same table and indexes) with the",
        "  outbox triggers dropped (the row every order needs; its event is the pipeline's cost to bear), and dropped after",
        "  it: its rows never pass through the pipeline's database or relay.",
        "- Events are counted by a consumer of the events topic (`seckillctl events tail`, its own group, reading from the",
        "  start of the run), not by the relay: *the last event* is when that consumer read it.",
        "- *Spans exported* runs the accepted path (100,000 orders) and the order service's drain of them (with its relay)",
        "  four times: without `SECKILL_OTLP_ENDPOINT`, exporting every trace to a local OTLP receiver",
        "  (`infra/local/otlp_receiver.py`, which decodes every span), exporting one trace in a hundred",
        "  (`otlp_sample_ratio` 0.01), and the same while every request carries a `traceparent` with the sampled flag set",
        "  (`seckillctl bench --traceparent`: a buyer trying to force tracing, from an address not in `auth.trusted_proxies`).",
        "  The edge's and the order service's own CPU per order are compared, and the edge's spans the receiver took per order; the",
        "  receiver's CPU is not counted (a collector runs elsewhere), but it shares the machine.",
        "- *The cost of one order* adds up the CPU of every process an order passes through (edge, Redis, broker, order",
        "  service with its relay, every PostgreSQL process) from the end-to-end sale's first request to its 100,000th CREATED",
        "  event read from the topic, divided by 100,000; the 20,000 sold-out answers are in it, the load generator and the",
        "  consumer are not (the broker serving that consumer is).",
        "",
        "Charts of this run (`bench-charts/`, drawn by matplotlib from `bench-results.json`):",
        "",
        "![requests per second by outcome, end to end](bench-charts/qps.svg)",
        "![latency percentiles, end to end](bench-charts/latency.svg)",
        "![order service lag, end to end](bench-charts/lag.svg)",
        "![drain of the backlog](bench-charts/drain.svg)",
        "",
        "Where the time goes: flame graphs of this run (perf on the cpu-clock event, 199 Hz, DWARF stacks; inferno),",
        "the edge during the accepted path and the order service during the drain (open the SVG to search and zoom):",
        "",
        "![the edge, accepted path](bench-charts/flame-edge.svg)",
        "![the order service, draining a backlog](bench-charts/flame-order.svg)",
        "",
        "The frames the most samples ended in (self time, % of the process's samples):",
        "",
        *[f"- {name}: " + "; ".join(f"`{frame}` {pct}%" for frame, pct in frames)
          for name, frames in r.get("flames", {}).items()],
        "",
        "Machine-readable results: `bench-results.json`.",
        "",
    ]


def write_report(total_seconds):
    r = RESULTS
    rows = edge_rows(r) + pipeline_rows(r) + feature_rows(r)
    cpu = {k: r[k]["generatorCpuPercent"] for k in ("ceiling_http", "ceiling_http_paired", "accepted_path", "sold_out_path") if "generatorCpuPercent" in r[k]}
    lines = [
        "# Benchmarks",
        "",
        f"Written by `make bench` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, run `{RUN}`, in {total_seconds:.0f} s.",
        f"Machine: {machine()}. Redis, PostgreSQL, Kafka, the services and the load generator all share it.",
        "Every figure is measured in the same run as its ceiling; compare ratios, not absolute numbers, across runs.",
        "",
        "| measurement | result | detail | ratio |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows],
        "",
        f"Load generator (`seckillctl bench`) CPU, as % of one core: {', '.join(f'{k} {v:.0f}%' for k, v in cpu.items())}.",
        "",
        *cpu_table(r),
        "",
    ] + reading(r)
    charts(r)
    (ROOT / "BENCHMARKS.md").write_text("\n".join(lines))
    (ROOT / "bench-results.json").write_text(json.dumps(RESULTS, indent=2))
    print("\n".join(lines))


def charts(r):
    """The seed article's "QPS curve" and its companions, as SVG beside
    BENCHMARKS.md: the end-to-end sale second by second (requests by outcome,
    latency), the order service's lag during it, and the drain curve."""
    import matplotlib
    matplotlib.use("svg")
    import matplotlib.pyplot as plt
    plt.rcParams["svg.hashsalt"] = RUN  # the same run draws the same file
    out = ROOT / "bench-charts"
    out.mkdir(exist_ok=True)
    timeline = r["end_to_end"]["bench"].get("timeline") or []
    slot = 0.1
    seconds = [s["startMs"] / 1000 for s in timeline]

    def save(fig, ax, name, title, ylabel, xlabel="seconds since the first request"):
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize="small")
        fig.tight_layout()
        fig.savefig(out / name, metadata={"Date": None})
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 3.6))
    outcomes = sorted({k for s in timeline for k in s["outcomes"]})
    for outcome in outcomes:
        ax.plot(seconds, [s["outcomes"].get(outcome, 0) / slot for s in timeline], label=outcome)
    save(fig, ax, "qps.svg", "End to end: 100,000 units, 120,000 users, 256 connections", "requests per second")

    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.plot(seconds, [s["p50Ms"] for s in timeline], label="p50")
    ax.plot(seconds, [s["p99Ms"] for s in timeline], label="p99")
    save(fig, ax, "latency.svg", "End to end: latency of the requests sent in each 100 ms", "milliseconds")

    fig, ax = plt.subplots(figsize=(8, 3.6))
    lag = r["end_to_end"].get("lagSeries") or []
    ax.plot([t for t, _ in lag], [v for _, v in lag], label="records not yet committed")
    save(fig, ax, "lag.svg", "End to end: the order service's consumer lag", "records")

    fig, ax = plt.subplots(figsize=(8, 3.6))
    drain = r["drain"].get("series") or []
    ax.plot([t for t, _ in drain], [v for _, v in drain], label="orders written")
    save(fig, ax, "drain.svg", f"Drain of a {r['drain']['backlog']:,}-record backlog", "orders", "seconds since the order service started")
