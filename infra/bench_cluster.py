#!/usr/bin/env python3
"""`make bench-cluster`: the replicated topology's figures, each beside a
ceiling measured in the same run (infra/local/up.sh --cluster: three Kafka
brokers with RF 3 and min ISR 2, Redis through Sentinel, two edges behind
HAProxy, two order services). Writes BENCHMARKS-cluster.md and
bench-cluster-results.json; the single-node figures stay in BENCHMARKS.md.

It reuses the helpers of make bench (infra/benchmarks/common.py) and starts
what it measures with its own topic and key prefixes, and stops it.
"""
import json
import subprocess
import time
import urllib.request

from benchmarks import common as b
from benchmarks.cleanup import delete_topics

SENTINEL_URL = "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/seckill"
BROKERS = "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"
LB = "127.0.0.1:8080"
EDGES = ["127.0.0.1:8081", "127.0.0.1:8082"]
ORDER_METRICS = ["127.0.0.1:9111", "127.0.0.1:9113"]
RESULTS = {}

b.ENV.update(SECKILL_REDIS_URL=SENTINEL_URL, SECKILL_KAFKA_BROKERS=BROKERS)


def written(addr):
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("seckill_order_orders_written_total"):
                return int(float(line.split()[-1]))
    return 0


def start_edges(suffix, extra=None):
    """Both edges behind HAProxy, each with its share of the global rate
    limit, once ready."""
    edges = [b.start([str(b.BIN / "seckill-edge")], f"cluster-edge{i}{suffix}",
                     {"SECKILL_HTTP_ADDR": addr, "SECKILL_ADMIN_ADDR": "127.0.0.1:0",
                      "SECKILL__RATE_LIMIT__GLOBAL_PER_SECOND": "100000", **(extra or {})})
             for i, addr in enumerate(EDGES)]
    for addr in EDGES + [LB]:
        b.wait_http(f"http://{addr}/readyz")
    return edges


def sample_of(edges, servers):
    """CPU seconds so far of the edges and of each kind of server."""
    return {"edges": sum(b.cpu_seconds(p.pid) for p in edges),
            **{k: sum(b.cpu_seconds(p) for p in v) for k, v in servers.items()}}


def redis_primary_port():
    out = subprocess.run(["redis-cli", "-p", "26379", "sentinel", "get-master-addr-by-name", "seckill"],
                         capture_output=True, text=True).stdout.split()
    return out[1]


def main():
    started = time.time()
    b.LOGS.mkdir(parents=True, exist_ok=True)
    b.log(f"run {b.RUN} (replicated topology) on {b.machine()}")
    b.ctl("migrate")
    edges = start_edges("")

    # Ceilings: plain HTTP through HAProxy and to one edge directly.
    RESULTS["ceiling_http_lb"] = b.load(LB, 1, 1, 100_000, 100_000, get="/healthz")
    RESULTS["ceiling_http_edge"] = b.load(EDGES[0], 1, 1, 100_000, 100_000, get="/healthz")
    b.log(f"HTTP ceiling through HAProxy {RESULTS['ceiling_http_lb']['requestsPerSecond']:.0f} req/s, "
          f"one edge {RESULTS['ceiling_http_edge']['requestsPerSecond']:.0f} req/s")

    # Warm-up of the whole accepted path (dropped), then the accepted path
    # through the load balancer, with the CPU of every part.
    b.warm(b.sale(9), 1, 50_000_000)
    b.load(LB, b.sale(9), 1, 30_000, 30_000)
    b.warm(b.sale(3), 1, 50_000_000)
    servers = b.server_pids()
    before = sample_of(edges, servers)
    accepted = b.load(LB, b.sale(3), 1, 200_000, 200_000)
    after = sample_of(edges, servers)
    accepted["cpuMicrosPerRequest"] = {k: round((after[k] - before[k]) / 200_000 * 1e6, 1) for k in before}
    RESULTS["accepted_path_lb"] = accepted
    b.log(f"accepted path through HAProxy: {accepted['requestsPerSecond']:.0f} req/s, p99 {accepted['latencyMs']['p99']:.2f} ms")

    # The cost of WAIT (redis.min_replica_acks, issue "a 202 is a promise"):
    # the same load through edges that do not wait for the replica.
    for proc in edges:
        b.stop(proc)
    no_wait = start_edges("-no-wait", {"SECKILL__REDIS__MIN_REPLICA_ACKS": "0"})
    b.warm(b.sale(4), 1, 50_000_000)
    before = sample_of(no_wait, servers)
    unwaited = b.load(LB, b.sale(4), 1, 200_000, 200_000)
    after = sample_of(no_wait, servers)
    unwaited["cpuMicrosPerRequest"] = {k: round((after[k] - before[k]) / 200_000 * 1e6, 1) for k in before}
    RESULTS["accepted_path_lb_no_wait"] = unwaited
    b.log(f"accepted path without WAIT: {unwaited['requestsPerSecond']:.0f} req/s, p99 {unwaited['latencyMs']['p99']:.2f} ms")
    for proc in no_wait:
        b.stop(proc)
    edges = start_edges("")

    # Drain of both backlogs by two order services sharing the group.
    backlog = b.lag()
    t0 = time.time()
    services = [b.start([str(b.BIN / "seckill-order")], f"cluster-order{i}", {"SECKILL__METRICS_ADDR": addr})
                for i, addr in enumerate(ORDER_METRICS)]
    for addr in ORDER_METRICS:
        b.wait_http(f"http://{addr}/readyz")
    total = 0
    while time.time() - t0 < 600:
        total = sum(written(addr) for addr in ORDER_METRICS)
        if total >= backlog:
            break
        time.sleep(0.05)
    last = time.time()
    first = float(b.psql(f"SELECT extract(epoch FROM min(created_at)) FROM orders WHERE activity_id = {b.sale(3)}"))
    RESULTS["drain"] = {"backlog": backlog, "written": total, "seconds": last - first, "ordersPerSecond": total / (last - first),
                        "startToFirstOrderSeconds": first - t0}
    b.log(f"drain: {total} of {backlog} records in {last - first:.2f}s = {total / (last - first):.0f} orders/s")
    for proc in services + edges:
        b.stop(proc)

    # The PostgreSQL ceiling, the same pgbench as make bench (PostgreSQL is
    # shared by both topologies).
    script = b.LOGS / "bench-pgbench.sql"
    script.write_text(
        "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, accepted_at)\n"
        "SELECT 'pgb-' || txid_current() || '-' || g, 900001, 1, 1, txid_current() * 1000 + g, 'CREATED', now()\n"
        "  FROM unnest(ARRAY(SELECT generate_series(1, 100))) AS g;\n")
    pg = subprocess.run(["pgbench", "-n", "-c", "8", "-j", "2", "-T", "15", "-f", str(script), b.DB_URL], capture_output=True, text=True)
    tps = next((float(line.split("=")[1].split()[0]) for line in pg.stdout.splitlines() if line.startswith("tps =")), 0.0)
    b.psql("DELETE FROM orders WHERE activity_id = 900001")
    RESULTS["ceiling_postgres"] = {"rowsPerSecond": tps * 100}
    write_report(time.time() - started)


def write_report(total_seconds):
    r = RESULTS
    lb, one = r["ceiling_http_lb"]["requestsPerSecond"], r["ceiling_http_edge"]["requestsPerSecond"]
    acc, drain, pg = r["accepted_path_lb"], r["drain"], r["ceiling_postgres"]["rowsPerSecond"]
    unwaited = r["accepted_path_lb_no_wait"]
    single = {}
    try:
        single = json.loads((b.ROOT / "bench-results.json").read_text())
    except (OSError, ValueError):
        pass
    rows = [
        ("(a) ceiling: plain HTTP through HAProxy (two edges' /healthz)", f"{lb:,.0f} req/s", "", f"{b.ratio(lb, one):.2f} x one edge directly"),
        ("(a') one edge's /healthz directly", f"{one:,.0f} req/s", "", ""),
        ("(c) ceiling: PostgreSQL, 100-row batch inserts (pgbench, 8 clients)", f"{pg:,.0f} rows/s", "", ""),
        ("accepted path through HAProxy (64 conns, distinct users; RF 3, min ISR 2)", f"{acc['requestsPerSecond']:,.0f} req/s",
         f"p50 {acc['latencyMs']['p50']:.2f} ms, p99 {acc['latencyMs']['p99']:.2f} ms", f"{b.ratio(acc['requestsPerSecond'], lb):.2f} x (a)"),
        ("the same without WAIT (redis.min_replica_acks 0: a failover may lose what a buyer was told)",
         f"{unwaited['requestsPerSecond']:,.0f} req/s",
         f"p50 {unwaited['latencyMs']['p50']:.2f} ms, p99 {unwaited['latencyMs']['p99']:.2f} ms",
         f"WAIT costs {b.ratio(acc['requestsPerSecond'], unwaited['requestsPerSecond']):.2f} x the throughput, "
         f"p99 {b.ratio(acc['latencyMs']['p99'], unwaited['latencyMs']['p99']):.2f} x"),
        (f"drain of a {drain['backlog']:,}-record backlog (both runs), two order services", f"{drain['ordersPerSecond']:,.0f} orders/s",
         f"{drain['seconds']:.2f} s first to last order", f"{b.ratio(drain['ordersPerSecond'], pg):.2f} x (c)"),
    ]
    if single:
        s_acc = single["accepted_path"]
        s_drain = single["drain"]
        rows += [
            ("single node, same machine, its own run: accepted path", f"{s_acc['requestsPerSecond']:,.0f} req/s",
             f"p99 {s_acc['latencyMs']['p99']:.2f} ms (BENCHMARKS.md)", f"{b.ratio(s_acc['requestsPerSecond'], single['ceiling_http']['requestsPerSecond']):.2f} x its (a)"),
            ("single node, same machine, its own run: drain", f"{s_drain['ordersPerSecond']:,.0f} orders/s", "(BENCHMARKS.md)",
             f"{b.ratio(s_drain['ordersPerSecond'], single['ceiling_postgres']['rowsPerSecond']):.2f} x its (c)"),
        ]
    cpu = acc["cpuMicrosPerRequest"]
    lines = [
        "# Benchmarks: the replicated topology",
        "",
        f"Written by `make bench-cluster` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, run `{b.RUN}`, in {total_seconds:.0f} s.",
        f"Machine: {b.machine()}. Three Kafka brokers, two Redis servers and three Sentinels, HAProxy, PostgreSQL, two edges,",
        "two order services and the load generator all share it. Ratios against ceilings of the same run.",
        "",
        "| measurement | result | detail | ratio |",
        "|---|---|---|---|",
        *[f"| {a} | {b_} | {c} | {d} |" for a, b_, c, d in rows],
        "",
        "CPU per accepted request (microseconds; `java` is all three brokers, `redis-server` both servers and the Sentinels):",
        "",
        "| run | edges | redis-server | java | generator |",
        "|---|---|---|---|---|",
        *[f"| {name} | {c['edges']} | {c.get('redis-server', 0)} | {c.get('java', 0)} | {run.get('generatorCpuPercent', 0) / 100 * run['seconds'] / 200_000 * 1e6:.1f} |"
          for name, run, c in (("WAIT for 1 replica", acc, cpu), ("no WAIT", unwaited, unwaited["cpuMicrosPerRequest"]))],
        "",
        "Every record is written to three brokers (acks=all waits for two) on two cores: the brokers' CPU per order is",
        "about three times the single node's, and that, not the edges, bounds the accepted path here.",
        "",
    ]
    (b.ROOT / "BENCHMARKS-cluster.md").write_text("\n".join(lines))
    (b.ROOT / "bench-cluster-results.json").write_text(json.dumps(RESULTS, indent=2))
    b.log("wrote BENCHMARKS-cluster.md")


def clean_up():
    port = redis_primary_port()
    keys = subprocess.run(["redis-cli", "-p", port, "--scan", "--pattern", f"{b.RUN}:*"], capture_output=True, text=True).stdout.split()
    for i in range(0, len(keys), 500):
        subprocess.run(["redis-cli", "-p", port, "UNLINK", *keys[i:i + 500]], capture_output=True)
    for table in ("orders", "sales"):
        b.psql(f"DELETE FROM {table} WHERE activity_id BETWEEN {b.sale(0)} AND {b.sale(99)}")
    try:
        deleted = delete_topics([f"{b.RUN}.seckill.orders", f"{b.RUN}.seckill.orders.dlq"])
    except (OSError, ConnectionError) as error:
        deleted = f"none ({error})"
    b.log(f"cleaned up: {len(keys)} Redis keys, the run's PostgreSQL rows, {deleted} Kafka topics")


if __name__ == "__main__":
    try:
        main()
    finally:
        for proc in list(b.PROCS):
            b.stop(proc)
        clean_up()
