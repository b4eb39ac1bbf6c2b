#!/usr/bin/env python3
"""`make bench`: the benchmark suite. Every figure is reported next to a
ceiling measured in the same run, as a ratio, because the machines here are
shared and noisy. Writes BENCHMARKS.md and bench-results.json.

It starts what it measures (release binaries) with its own topic and key
prefixes, so it never touches the demo's or the tests' data, and stops them.
"""
import json
import os
import platform
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release"
LOGS = ROOT / ".data" / "logs"
RUN = f"bench{int(time.time())}"
ENV = dict(
    os.environ,
    SECKILL_TOPIC_PREFIX=f"{RUN}.",
    SECKILL_KEY_PREFIX=f"{RUN}:",
    SECKILL_ADMIN_TOKEN="bench-admin-token",
    RUST_LOG="warn",
)
EDGE = "127.0.0.1:8180"
REFERENCE = "127.0.0.1:8190"
ORDER_METRICS = "127.0.0.1:9111"
DB_URL = "postgres://seckill:seckill@127.0.0.1:5432/seckill"
CONNS = 64
# Sale ids of this run: PostgreSQL is shared with earlier runs.
BASE = (int(time.time()) % 1_000_000) * 100


def sale(n):
    return BASE + n
PROCS = []
RESULTS = {}


def log(msg):
    print(f"[bench] {msg}", flush=True)


def start(cmd, name, extra=None):
    env = dict(ENV, **(extra or {}))
    out = open(LOGS / f"bench-{name}.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    PROCS.append(proc)
    return proc


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
    if proc in PROCS:
        PROCS.remove(proc)


def wait_http(url, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if subprocess.run(["curl", "-fsS", "-o", "/dev/null", url], capture_output=True).returncode == 0:
            return
        time.sleep(0.3)
    raise SystemExit(f"bench: {url} did not answer")


def wait_port(addr, seconds=30):
    host, port = addr.split(":")
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"bench: nothing listens on {addr}")


def ctl(*args, check=True):
    out = subprocess.run([str(BIN / "seckillctl"), *map(str, args)], env=ENV, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SystemExit(f"bench: seckillctl {' '.join(map(str, args))} failed: {out.stderr}{out.stdout}")
    return out.stdout


# The PostgreSQL ceiling's database: the pipeline's schema, triggers
# included, made for the run and dropped after it, so the ceiling's rows
# and the outbox rows its triggers write never reach the pipeline's relay
# (deleted afterwards, they were dead rows ahead of the relay's cursor that
# every turn stepped over until a vacuum).
CEILING_DB = f"seckill_{RUN}_ceiling"


def pg_ceiling(seconds):
    """Rows per second of pgbench (8 clients) inserting 100-row batches into
    a copy of the orders table — its indexes, without the outbox triggers:
    the row every order needs, not the events (the pipeline's cost to bear)
    — in a database of its own; and PostgreSQL's CPU per row (every
    postgres process, the backends that ended with pgbench included)."""
    psql(f"DROP DATABASE IF EXISTS {CEILING_DB}")
    psql(f"CREATE DATABASE {CEILING_DB}")
    url = DB_URL.rsplit("/", 1)[0] + "/" + CEILING_DB
    migrated = subprocess.run([str(BIN / "seckillctl"), "migrate"], env=dict(ENV, SECKILL_DATABASE_URL=url),
                              capture_output=True, text=True)
    if migrated.returncode != 0:
        raise SystemExit(f"bench: migrating {CEILING_DB} failed: {migrated.stderr}")
    triggers = subprocess.run(["psql", url, "-tAc", "SELECT tgname FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal"],
                              capture_output=True, text=True, check=True).stdout.split()
    for trigger in triggers:
        subprocess.run(["psql", url, "-qc", f"DROP TRIGGER {trigger} ON orders"], check=True, capture_output=True)
    script = LOGS / "bench-pgbench.sql"
    script.write_text(
        "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, accepted_at)\n"
        "SELECT '900001-1-' || (txid_current() * 1000 + g) || '-pgb', 900001, 1, 1, txid_current() * 1000 + g, 'CREATED', now()\n"
        "  FROM unnest(ARRAY(SELECT generate_series(1, 100))) AS g;\n")
    before = postgres_cpu()
    pg = subprocess.run(["pgbench", "-n", "-c", "8", "-j", "2", "-T", str(seconds), "-f", str(script), url],
                        capture_output=True, text=True)
    spent = postgres_cpu() - before
    tps = next((float(line.split("=")[1].split()[0]) for line in pg.stdout.splitlines() if line.startswith("tps =")), 0.0)
    failed = next((line for line in pg.stdout.splitlines() if "failed" in line), "")
    if "failed: 0 " not in failed and failed:
        log(f"pgbench reported failures: {failed}")
    counted = subprocess.run(["psql", url, "-tAc", "SELECT count(*) FROM orders"], capture_output=True, text=True)
    rows = int(counted.stdout.strip() or 0)
    drop_ceiling_database()
    return {"transactionsPerSecond": tps, "rowsPerSecond": tps * 100, "triggersDropped": triggers,
            "postgresMicrosPerRow": round(spent / max(rows, 1) * 1e6, 1)}


def postgres_cpu():
    """CPU seconds of every PostgreSQL process so far, those that ended
    (the postmaster's reaped children) included."""
    return sum(cpu_seconds(p) for p in server_pids(with_postgres=True)["postgres"]) + postmaster_children_cpu()


def drop_ceiling_database():
    psql(f"DROP DATABASE IF EXISTS {CEILING_DB} WITH (FORCE)")


def warm(activity, sku, stock):
    ctl("warmup", "--activity", activity, "--sku", sku, "--stock", stock, "--force")


def load(url, activity, sku, users, requests, conns=CONNS, offset=0, get=None, timeline_ms=None, stride=1,
         traceparent=None):
    args = ["bench", "--url", f"http://{url}", "--activity", activity, "--sku", sku, "--users", users,
            "--requests", requests, "--concurrency", conns, "--user-offset", offset, "--user-stride", stride, "--json"]
    if get:
        args += ["--get", get]
    if traceparent:
        args += ["--traceparent", traceparent]
    if timeline_ms:
        args += ["--timeline-ms", timeline_ms]
    result = json.loads(ctl(*args))["bench"]
    accepted = result["outcomes"].get("202 QUEUED", 0)
    result["accepted"] = accepted
    return result


def cpu_seconds(pid):
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def server_pids(with_postgres=False):
    found = {}
    for name in ("redis-server", "java") + (("postgres",) if with_postgres else ()):
        out = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.split()
        found[name] = [int(p) for p in out]
    return found


def profiled_load(proc, url, activity, requests, traceparent=None):
    """`load`, plus the CPU each part spent per request (microseconds): the
    process serving it, Redis, the Kafka broker (java) and the generator."""
    servers = server_pids()
    def sample():
        return {"service": cpu_seconds(proc.pid), **{k: sum(cpu_seconds(p) for p in v) for k, v in servers.items()}}
    before = sample()
    result = load(url, activity, 1, requests, requests, traceparent=traceparent)
    after = sample()
    per = {k: round((after[k] - before[k]) / requests * 1e6, 1) for k in before}
    per["generator"] = round(result.get("generatorCpuPercent", 0) / 100 * result["seconds"] / requests * 1e6, 1)
    result["cpuMicrosPerRequest"] = per
    return result


class EventWatcher:
    """A consumer of the events topic (`seckillctl events tail`, a group of
    its own), started once and reading as events come, as a team downstream
    would: it counts each sale's CREATED events and notes when the last of
    each came."""

    def __init__(self):
        self.counts, self.last = {}, {}
        self.changed = threading.Condition()
        self.proc = subprocess.Popen([str(BIN / "seckillctl"), "events", "tail", "--json", "--group", f"{RUN}-watch",
                                      "--idle", "3600"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        PROCS.append(self.proc)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.proc.stdout:
            line = line.replace(" ", "")
            if '"type":"CREATED"' not in line:
                continue
            found = re.search(r'"activityId":(\d+)', line)
            if not found:
                continue
            with self.changed:
                activity = int(found.group(1))
                self.counts[activity] = self.counts.get(activity, 0) + 1
                self.last[activity] = time.time()
                self.changed.notify_all()

    def seen(self, activities):
        with self.changed:
            return sum(self.counts.get(a, 0) for a in activities)

    def wait(self, activities, wanted, seconds):
        """When the last of `wanted` CREATED events of `activities` came
        (None if they did not within `seconds`)."""
        with self.changed:
            reached = self.changed.wait_for(lambda: sum(self.counts.get(a, 0) for a in activities) >= wanted, seconds)
            return max(self.last.get(a, 0) for a in activities) if reached else None


def postmaster_children_cpu():
    """CPU seconds of the PostgreSQL backends that ended so far (the
    postmaster's reaped children: a connection closed during a run)."""
    pid = subprocess.run(["pgrep", "-o", "-x", "postgres"], capture_output=True, text=True).stdout.split()
    try:
        fields = Path(f"/proc/{pid[0]}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def pipeline_cpu(edge_proc, order_proc):
    """CPU seconds so far of every part an order passes through, by pid: the
    edge, Redis, the broker, the order service (its consumers and the
    relay) and PostgreSQL (every process, and those that ended)."""
    parts = {"order service": {order_proc.pid: cpu_seconds(order_proc.pid)}}
    if edge_proc is not None:
        parts["edge"] = {edge_proc.pid: cpu_seconds(edge_proc.pid)}
    for name, pids in server_pids(with_postgres=True).items():
        parts[name] = {pid: cpu_seconds(pid) for pid in pids}
    parts["postgres"]["ended"] = postmaster_children_cpu()
    return parts


def cpu_per(before, after, n):
    """Microseconds per unit of what each part spent between two samples (a
    pid absent from the first counts from zero)."""
    return {k: round(sum(t - before.get(k, {}).get(pid, 0.0) for pid, t in v.items()) / n * 1e6, 1)
            for k, v in after.items()}


def psql(sql):
    out = subprocess.run(["psql", DB_URL, "-tAc", sql], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench: psql failed: {out.stderr}")
    return out.stdout.strip()


def lag():
    return json.loads(ctl("lag", "--json"))["order"]["total"]


def machine():
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = int(Path("/proc/meminfo").read_text().split()[1]) // 1024 // 1024
    return f"{os.cpu_count()} cores ({cpu}), {mem} GiB, {platform.platform()}"


def edge(extra=None):
    # Status reads (and queue polls) unlimited per client: the load comes
    # from one address.
    base = {"SECKILL_HTTP_ADDR": EDGE, "SECKILL__STATUS_READS__PER_CLIENT_PER_SECOND": "1000000000",
            "SECKILL__STATUS_READS__PER_CLIENT_BURST": "1000000000"}
    proc = start([str(BIN / "seckill-edge")], "edge", dict(base, **(extra or {})))
    wait_http(f"http://{EDGE}/readyz")
    return proc


def orders_written():
    """The order service's counter of orders written (its metrics endpoint)."""
    return order_metric("seckill_order_orders_written_total")


def order_metric(name):
    """One unlabelled series of the order service's metrics endpoint."""
    with urllib.request.urlopen(f"http://{ORDER_METRICS}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name):
                return int(float(line.split()[-1]))
    return 0


def order_service():
    proc = start([str(BIN / "seckill-order")], "order", {"SECKILL__METRICS_ADDR": ORDER_METRICS})
    wait_http(f"http://{ORDER_METRICS}/readyz")
    return proc


TOOLS = ROOT / ".data" / "tools" / "bin"


def flame_start(proc, name, seconds):
    """`perf record` of `proc` for `seconds` (the cpu-clock event at 199 Hz:
    no hardware counter needed; DWARF stacks: release builds keep line
    tables, not frame pointers)."""
    data = LOGS / f"bench-perf-{name}.data"
    return data, subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "199", "--call-graph", "dwarf,16384",
                                   "-p", str(proc.pid), "-o", str(data), "--", "sleep", str(seconds)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def flame_finish(recording, name, title):
    """The recording folded and drawn by inferno: bench-charts/flame-NAME.svg;
    the frames the most samples ended in (self time) go to the results."""
    data, proc = recording
    proc.wait()
    out = ROOT / "bench-charts" / f"flame-{name}.svg"
    out.parent.mkdir(exist_ok=True)
    folded = LOGS / f"bench-{name}.folded"
    drawn = subprocess.run(f"perf script -i {data} 2>/dev/null | {TOOLS}/inferno-collapse-perf > {folded} && "
                           f"{TOOLS}/inferno-flamegraph --title '{title}' < {folded} > {out}", shell=True)
    data.unlink(missing_ok=True)
    if drawn.returncode != 0 or out.stat().st_size < 1000:
        log(f"flame graph {name} not drawn")
        return
    own, total = {}, 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frame = stack.rsplit(";", 1)[-1]
        own[frame] = own.get(frame, 0) + int(count)
        total += int(count)
    RESULTS.setdefault("flames", {})[name] = [(frame[:120], round(100 * n / total, 1))
                                              for frame, n in sorted(own.items(), key=lambda x: -x[1])[:15]]
    folded.unlink(missing_ok=True)


def flames():
    """Where the time goes, apart from the measured runs (perf costs a
    little): the edge under the accepted path's load, then the order service
    draining what it accepted."""
    e = edge()
    warm(sale(19), 1, 50_000_000)
    recording = flame_start(e, "edge", 8)
    load(EDGE, sale(19), 1, 150_000, 150_000)
    flame_finish(recording, "edge", "the edge, accepted path (make bench)")
    stop(e)
    o = order_service()
    recording = flame_start(o, "order", 10)
    flame_finish(recording, "order", "the order service, draining a backlog (make bench)")
    while lag() > 0:
        time.sleep(0.2)
    stop(o)


def taskset(cpus, pid):
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], capture_output=True)


def pin(pinned):
    """Pinned: PostgreSQL (the postmaster and every backend; a new backend
    inherits the postmaster's affinity) on CPU 1 alone, every other process —
    Redis, the broker, the services, this script and what it starts
    (pgbench, seckillctl) — on CPU 0. Not pinned: every process on both."""
    postgres, rest = ("1", "0") if pinned else ("0,1", "0,1")
    pids = server_pids(with_postgres=True)
    for pid in pids["postgres"]:
        taskset(postgres, pid)
    for pid in pids["redis-server"] + pids["java"] + [p.pid for p in PROCS if p.poll() is None]:
        taskset(rest, pid)
    os.sched_setaffinity(0, {0} if pinned else {0, 1})


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
    last_event = WATCHER.wait(sales, backlog, 120)
    cpu_after = pipeline_cpu(None, o)
    while lag() > 0 and time.time() - t0 < 600:
        time.sleep(0.1)
    first = float(psql(f"SELECT extract(epoch FROM min(created_at)) FROM orders WHERE activity_id IN ({','.join(map(str, sales))})"))
    seconds = last - first
    result = {"backlog": backlog, "seconds": seconds, "ordersPerSecond": written / seconds,
              "written": written, "startToFirstOrderSeconds": first - t0,
              "startToLagZeroSeconds": time.time() - t0, "series": series,
              "eventsSeen": WATCHER.seen(sales),
              "lastEventAfterLastOrderSeconds": None if last_event is None else last_event - last,
              "cpuMicrosPerOrder": cpu_per(cpu_before, cpu_after, backlog)}
    log(f"{label}: {written} of {backlog} records in {seconds:.2f}s = {written / seconds:.0f} orders/s; "
        f"{WATCHER.seen(sales)} events seen by a consumer, the last "
        f"{'never' if last_event is None else f'{last_event - last:.2f} s after the last order row'}; "
        f"CPU per order {result['cpuMicrosPerOrder']}")
    return o, result


def main():
    LOGS.mkdir(parents=True, exist_ok=True)
    started = time.time()
    log(f"run {RUN} on {machine()}")
    ctl("migrate")

    # (a) plain HTTP ceiling: the edge's /healthz under the same tool and concurrency.
    e = edge()
    global WATCHER
    WATCHER = EventWatcher()
    http = load(EDGE, 1, 1, 100_000, 100_000, get="/healthz")
    RESULTS["ceiling_http"] = http
    log(f"(a) HTTP ceiling: {http['requestsPerSecond']:.0f} req/s")

    # (b) Redis ceiling: redis-benchmark running lua/deduct.lua by EVALSHA, distinct users, unpipelined.
    warm(sale(1), 1, 50_000_000)
    sha = subprocess.run(["redis-cli", "SCRIPT", "LOAD", (ROOT / "lua/deduct.lua").read_text()], capture_output=True, text=True).stdout.strip()
    base = f"{RUN}:seckill:{{{sale(1)}:1}}"
    keys = [f"{base}:{k}" for k in ("meta", "stock", "buyers", "orders", "reserved", "seq")] + [f"{base}:call:__rand_int__", f"{base}:trace"]
    # ARGV: activity, sku, publish deadline (ms), call id, outcome kept (ms),
    # then one request (user, nonce, request id, traceparent, admitted): as a lone call.
    rb = subprocess.run(["redis-benchmark", "-c", str(CONNS), "-n", "200000", "-r", "1000000000", "--csv",
                         "EVALSHA", sha, "8", *keys, str(sale(1)), "1", "7000", "bench", "60000",
                         "__rand_int__", "00000000bench000", "bench-request", "", "0"],
                        capture_output=True, text=True)
    rows = [line for line in rb.stdout.splitlines() if line.startswith('"EVALSHA')]
    redis_rps = float(rows[-1].split(",")[1].strip('"')) if rows else 0.0
    RESULTS["ceiling_redis"] = {"requestsPerSecond": redis_rps, "raw": rb.stdout.strip()}
    log(f"(b) Redis ceiling (deduct.lua by EVALSHA): {redis_rps:.0f} calls/s")

    # (c) PostgreSQL ceiling: pgbench inserting 100-row batches into the orders table (no outbox trigger).
    RESULTS["ceiling_postgres"] = pg_ceiling(15)
    log(f"(c) PostgreSQL ceiling: {RESULTS['ceiling_postgres']['rowsPerSecond']:.0f} rows/s in 100-row batches, "
        f"{RESULTS['ceiling_postgres']['postgresMicrosPerRow']} us of PostgreSQL CPU per row")

    # Reference: a minimal axum handler calling the same script.
    ref = start([str(BIN / "examples" / "lua_reference"), REFERENCE], "reference")
    wait_port(REFERENCE)
    warm(sale(2), 1, 50_000_000)
    reference = profiled_load(ref, REFERENCE, sale(2), 200_000)
    stop(ref)
    RESULTS["reference_edge_redis"] = reference
    log(f"reference axum+Lua: {reference['requestsPerSecond']:.0f} req/s")

    # The same handler that also publishes each order as the edge does: the
    # first half of the pipeline with nothing of the edge's own (rate limits,
    # sold-out flags, request ids, metrics). Not a target; it tells the edge's
    # overhead apart from Kafka's on this machine.
    ref = start([str(BIN / "examples" / "lua_reference"), REFERENCE, "--publish"], "reference-publish")
    wait_port(REFERENCE)
    warm(sale(10), 1, 50_000_000)
    warm(sale(11), 1, 50_000_000)
    # Warm-up, dropped: the first Kafka load of the run also warms the
    # broker's JIT (30,000 requests left it at twice its CPU per record).
    load(REFERENCE, sale(10), 1, 60_000, 60_000)
    reference_publish = profiled_load(ref, REFERENCE, sale(11), 200_000)
    stop(ref)
    RESULTS["reference_edge_redis_kafka"] = reference_publish
    log(f"reference axum+Lua+publish: {reference_publish['requestsPerSecond']:.0f} req/s")

    # The reference the edge's accepted path is held to: the minimal handler
    # running the seed article's own four-command script, publishing as the
    # edge does (services/edge/examples/seed_seckill.lua).
    ref = start([str(BIN / "examples" / "lua_reference"), REFERENCE, "--publish", "--seed"], "reference-seed")
    wait_port(REFERENCE)
    for n in (13, 14):
        subprocess.run(["redis-cli", "SET", f"{RUN}:seed:stock:{sale(n)}:1", "50000000"], capture_output=True, check=True)
    load(REFERENCE, sale(14), 1, 60_000, 60_000)
    reference_seed = profiled_load(ref, REFERENCE, sale(13), 200_000)
    stop(ref)
    RESULTS["reference_seed_kafka"] = reference_seed
    log(f"reference axum+seed Lua+publish: {reference_seed['requestsPerSecond']:.0f} req/s")

    # A warm-up of the whole accepted path first (its figures are dropped):
    # the broker's JIT and every connection pool start cold.
    warm(sale(9), 1, 50_000_000)
    load(EDGE, sale(9), 1, 30_000, 30_000)

    # 2. accepted path (order service stopped: this also builds the drain backlog).
    warm(sale(3), 1, 50_000_000)
    accepted = profiled_load(e, EDGE, sale(3), 200_000)
    RESULTS["accepted_path"] = accepted
    log(f"accepted path: {accepted['requestsPerSecond']:.0f} req/s, p99 {accepted['latencyMs']['p99']:.2f} ms")

    # 6. drain of that backlog (the warm-up's and the accepted path's sales).
    o, RESULTS["drain"] = drain((sale(9), sale(3)), "drain")

    # The accepted path again while the order service consumes what it
    # accepts (the p99 target holds here).
    warm(sale(15), 1, 50_000_000)
    RESULTS["accepted_path_consuming"] = profiled_load(e, EDGE, sale(15), 200_000)
    log(f"accepted path, order service consuming: p99 {RESULTS['accepted_path_consuming']['latencyMs']['p99']:.2f} ms")

    # 3. sold-out path, paired with a second measure of (a) right before it:
    # the two then run under the same background (the order service up, the
    # broker's and PostgreSQL's housekeeping after the drain).
    warm(sale(4), 1, 1000)
    load(EDGE, sale(4), 1, 2000, 2000)
    RESULTS["ceiling_http_paired"] = load(EDGE, 1, 1, 100_000, 100_000, get="/healthz")
    sold_out = load(EDGE, sale(4), 1, 100_000, 100_000, offset=10_000)
    RESULTS["sold_out_path"] = sold_out
    log(f"sold-out path: {sold_out['requestsPerSecond']:.0f} req/s")

    # 3b. the waiting room: one waiting ticket polled (GET /api/seckill/queue/{ticket},
    # one Lua call) under the same tool and connections, against the sold-out
    # path just measured; and what a join's proof of work costs per bit.
    starts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    ctl("warmup", "--activity", sale(17), "--sku", 1, "--stock", 1000, "--force", "--starts-at", starts,
        "--admission", '{"activeBuyers":10,"prequeueSeconds":7200}')
    join = urllib.request.Request(f"http://{EDGE}/api/seckill/queue", method="POST", headers={"content-type": "application/json"},
                                  data=json.dumps({"activityId": sale(17), "skuId": 1, "userId": 1}).encode())
    with urllib.request.urlopen(join, timeout=10) as response:
        ticket = json.loads(response.read())["ticket"]
    poll = load(EDGE, 1, 1, 100_000, 100_000, get=f"/api/seckill/queue/{ticket}")
    RESULTS["queue_poll"] = dict(poll, ratioToSoldOut=ratio(poll["requestsPerSecond"], sold_out["requestsPerSecond"]),
                                 ratioToHttp=ratio(poll["requestsPerSecond"], RESULTS["ceiling_http_paired"]["requestsPerSecond"]))
    log(f"queue poll: {poll['requestsPerSecond']:.0f} req/s ({RESULTS['queue_poll']['ratioToSoldOut']:.2f} x the sold-out path)")
    pow_cost = subprocess.run([str(BIN / "examples" / "pow_cost"), "20"], capture_output=True, text=True, check=True)
    RESULTS["pow_cost"] = [json.loads(line) for line in pow_cost.stdout.splitlines() if line.startswith("{")]

    # 4. hot-SKU burst: 100 units, 50,000 users, 256 connections.
    warm(sale(5), 1, 100)
    burst = load(EDGE, sale(5), 1, 50_000, 50_000, conns=256)
    RESULTS["hot_burst"] = burst
    log(f"hot burst: {burst['accepted']} accepted, sold out after {burst.get('lastAcceptSeconds')}s")

    # The /readyz flood: buyers on the accepted path (16 connections) alone,
    # then while wrk holds 500 connections on /healthz (the cheapest answer
    # the edge has: what any flood costs on two shared cores), then on
    # /readyz. The edge answers the probes from its background check, so a
    # /readyz flood should cost buyers what a /healthz flood does (target
    # 1.2 x at most); against the p99 alone the ratio is the machine's.
    warm(sale(16), 1, 50_000_000)
    quiet = load(EDGE, sale(16), 1, 20_000, 20_000, conns=16)
    flooded = {}
    for n, path in enumerate(("/healthz", "/readyz")):
        flood = subprocess.Popen(["wrk", "-t", "1", "-c", "500", "-d", "60s", f"http://{EDGE}{path}"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(2)
        flooded[path] = load(EDGE, sale(16), 1, 20_000, 20_000, conns=16, offset=100_000 * (n + 1))
        flood.terminate()
        flooded[path]["wrk"] = flood.communicate()[0]
    RESULTS["readyz_flood"] = {"quiet": quiet, "flooded": flooded["/readyz"], "healthzFlooded": flooded["/healthz"],
                               "p99Ratio": ratio(flooded["/readyz"]["latencyMs"]["p99"], quiet["latencyMs"]["p99"]),
                               "p99VsHealthz": ratio(flooded["/readyz"]["latencyMs"]["p99"],
                                                     flooded["/healthz"]["latencyMs"]["p99"])}
    log(f"/readyz flood: buyers' p99 {quiet['latencyMs']['p99']:.2f} ms alone, "
        f"{flooded['/healthz']['latencyMs']['p99']:.2f} ms under a /healthz flood, "
        f"{flooded['/readyz']['latencyMs']['p99']:.2f} ms under a /readyz flood")

    # 5. lua vs lock on one hot sale.
    warm(sale(6), 1, 10_000_000)
    lua = load(EDGE, sale(6), 1, 50_000, 50_000)
    stop(e)
    e = edge({"SECKILL__DEDUCTION": "lock"})
    warm(sale(7), 1, 10_000_000)
    lock = load(EDGE, sale(7), 1, 50_000, 50_000)
    stop(e)
    RESULTS["lua_vs_lock"] = {"lua": lua, "lock": lock}
    log(f"lua {lua['accepted'] / lua['seconds']:.0f} accepted/s vs lock {lock['accepted'] / lock['seconds']:.0f} accepted/s")

    # 7. end to end: a 100,000-unit sale under full load, order service running.
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
    last_event = WATCHER.wait((sale(8),), 100_000, 120)
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

    # Tuning, not a target: the accepted path again with an orders topic of
    # 2 partitions instead of the default 8 (a topic of its own). Fewer,
    # larger batches per produce request cost the broker less per record.
    e = edge({"SECKILL_TOPIC_PREFIX": f"{RUN}.p2.", "SECKILL__KAFKA__ORDER_PARTITIONS": "2"})
    warm(sale(12), 1, 50_000_000)
    RESULTS["accepted_path_2_partitions"] = profiled_load(e, EDGE, sale(12), 200_000)
    stop(e)

    # 6b. the drain as in production: PostgreSQL on a core of its own (CPU
    # 1), everything else on the other (CPU 0), for its ceiling and for the
    # drain of a fresh backlog, in that order.
    e = edge()
    warm(sale(18), 1, 50_000_000)
    load(EDGE, sale(18), 1, 200_000, 200_000)
    stop(e)
    pin(True)
    RESULTS["ceiling_postgres_pinned"] = pg_ceiling(15)
    log(f"(c) pinned: {RESULTS['ceiling_postgres_pinned']['rowsPerSecond']:.0f} rows/s")
    o, RESULTS["drain_pinned"] = drain((sale(18),), "drain, pinned")
    stop(o)
    pin(False)

    flames()
    tracing_cost()
    write_report(time.time() - started)


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


def drain_rows(pinned, drain, ceiling):
    """The report's rows of a drain, against the ceiling measured the same way."""
    pg = drain["cpuMicrosPerOrder"].get("postgres", 0.0)
    target = "0.9" if pinned else "0.6"
    event = ("never came" if drain.get("lastEventAfterLastOrderSeconds") is None
             else f"{drain['lastEventAfterLastOrderSeconds']:.2f} s after the last order row")
    return [
        (f"{pinned}drain of a {drain['backlog']:,}-record backlog (order service, events relayed)", f"{drain['ordersPerSecond']:,.0f} orders/s",
         f"{drain['seconds']:.2f} s first to last order; service start to first order {drain['startToFirstOrderSeconds']:.2f} s, to lag 0 {drain['startToLagZeroSeconds']:.2f} s",
         f"{ratio(drain['ordersPerSecond'], ceiling['rowsPerSecond']):.2f} x (c){' pinned' if pinned else ''} (target {target})"),
        (f"{pinned}drain: its events, as a consumer of the events topic sees them",
         f"{drain.get('eventsSeen', 0):,} of {drain['backlog']:,} CREATED events",
         "CPU per order: " + ", ".join(f"{k} {v} us" for k, v in drain["cpuMicrosPerOrder"].items()),
         f"the last {event} (target 2 s); PostgreSQL {pg} us per order = "
         f"{ratio(pg, ceiling['postgresMicrosPerRow']):.2f} x (c){' pinned' if pinned else ''}'s per row (target 1.1)"),
    ]


def ratio(a, b):
    return a / b if b else float("nan")


def write_report(total_seconds):
    r = RESULTS
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
    so = r["sold_out_path"]
    burst = r["hot_burst"]
    lua, lock = r["lua_vs_lock"]["lua"], r["lua_vs_lock"]["lock"]
    lua_acc, lock_acc = lua["accepted"] / lua["seconds"], max(lock["accepted"], 1) / lock["seconds"]
    drain = r["drain"]
    e2e = r["end_to_end"]
    rows = [
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
        ("tuning: accepted path, orders topic of 2 partitions (default 8)", f"{acc2['requestsPerSecond']:,.0f} req/s",
         f"p50 {acc2['latencyMs']['p50']:.2f} ms, p99 {acc2['latencyMs']['p99']:.2f} ms",
         f"{ratio(acc2['requestsPerSecond'], ref):.2f} x reference; {ratio(acc2['requestsPerSecond'], acc['requestsPerSecond']):.2f} x 8 partitions"),
        ("buyers (16 conns) while wrk floods /readyz (500 conns)", f"{r['readyz_flood']['flooded']['requestsPerSecond']:,.0f} req/s",
         f"p99 {r['readyz_flood']['flooded']['latencyMs']['p99']:.2f} ms (alone: {r['readyz_flood']['quiet']['latencyMs']['p99']:.2f} ms)",
         f"{r['readyz_flood']['p99VsHealthz']:.2f} x the p99 under a /healthz flood "
         f"({r['readyz_flood']['healthzFlooded']['latencyMs']['p99']:.2f} ms; target 1.2); "
         f"{r['readyz_flood']['p99Ratio']:.2f} x alone"),
        ("(a) again, right before the sold-out path", f"{http_paired:,.0f} req/s", "", f"{ratio(http_paired, http):.2f} x (a)"),
        ("edge, sold-out path (64 conns)", f"{so['requestsPerSecond']:,.0f} req/s", f"p99 {so['latencyMs']['p99']:.2f} ms",
         f"{ratio(so['requestsPerSecond'], http_paired):.2f} x (a) measured right before (target 0.8); {ratio(so['requestsPerSecond'], http):.2f} x (a) at the start"),
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
        *drain_rows("", drain, r["ceiling_postgres"]),
        ("(c) pinned: PostgreSQL alone on CPU 1, pgbench and everything else on CPU 0", f"{r['ceiling_postgres_pinned']['rowsPerSecond']:,.0f} rows/s",
         f"PostgreSQL {r['ceiling_postgres_pinned']['postgresMicrosPerRow']} us per row", f"{ratio(r['ceiling_postgres_pinned']['rowsPerSecond'], pg_rows):.2f} x (c)"),
        *drain_rows("pinned ", r["drain_pinned"], r["ceiling_postgres_pinned"]),
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
        "",
        "How to read it:",
        "",
        "- The *reference* is the smallest axum handler running the same Lua deduction (`services/edge/examples/lua_reference.rs`);",
        "  *reference + publish* is that handler also publishing each order exactly as the edge does (acks=all, idempotent,",
        "  delivery awaited): it shows what Kafka itself costs here, so *x reference + publish* near 1 means the edge adds",
        "  little of its own. The *seed reference + publish* runs the seed article's own four-command script",
        "  (`services/edge/examples/seed_seckill.lua`: no window, no order id, no reservation) and publishes the same way;",
        "  the accepted path's target (1.0) is set against it.",
        "- The order service relays its outbox (order events) while it drains and during the end-to-end sale: both include",
        "  that work.",
        "- The CPU table says where each request's CPU goes. The broker (`java`) and the producer inside the service are the",
        "  difference between the two references; on this machine they share the two cores with everything else.",
        "- The 2-partition row is a tuning figure, not the default: fewer partitions mean larger batches per produce request",
        "  and less broker CPU per order, at the price of fewer consumers able to share the topic.",
        "- The drain is timed from its first order row to the service's counter reaching the backlog; joining the consumer",
        "  group before that is reported apart.",
        "- (c) runs on a database of its own, made with the pipeline's migrations (the same table and indexes) with the",
        "  outbox triggers dropped (the row every order needs; its event is the pipeline's cost to bear), and dropped after",
        "  it: its rows never pass through the pipeline's database or relay. *(c) pinned* and the *pinned drain* run as in",
        "  production, PostgreSQL on a core of its own: the postmaster and every backend on CPU 1 alone (`taskset`; new",
        "  backends inherit it), everything else — Redis, the broker, the services, pgbench, the event consumer — on CPU 0.",
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
    topics = [f"{RUN}.{kind}seckill.orders{suffix}" for kind in ("", "reference.", "p2.") for suffix in ("", ".dlq")]
    topics.append(f"{RUN}.seckill.order-events")
    try:
        deleted = delete_topics(topics)
    except (OSError, ConnectionError, struct.error) as error:
        deleted = f"none ({error})"
    log(f"cleaned up: {len(keys)} Redis keys, the run's PostgreSQL rows, {deleted} Kafka topics")


if __name__ == "__main__":
    try:
        main()
    finally:
        for proc in PROCS.copy():  # stop() removes it from PROCS
            stop(proc)
        clean_up()
