"""The drain: the order service started on a backlog of accepted orders,
against the minimal drain (`services/order/examples/minimal_drain.rs`: the
smallest program doing the same job) on the same backlog, in both orders;
its events as a consumer reads them; and its rate against the PostgreSQL
ceiling."""
import json
import resource
import subprocess
import time

from benchmarks import events
from benchmarks.common import (
    BIN,
    DB_URL,
    EDGE,
    ENV,
    RESULTS,
    RUN,
    cpu_per,
    ctl,
    edge,
    lag,
    load,
    log,
    order_service,
    orders_written,
    pipeline_cpu,
    psql,
    ratio,
    sale,
    server_cpu,
    stop,
    warm,
)

# The minimal drain's database: the pipeline's migrations, its own rows.
REFERENCE_DB = f"seckill_{RUN}_drain"
# The topic prefix of the second backlog (its own orders topic).
SECOND = f"{RUN}.second."


def drain(sales, label, prefix=None):
    """The order service started on the backlog of `sales`' orders (on the
    topics under `prefix`: the run's own when None). The rate
    runs from the first order row (its transaction's start) to the moment
    the service's own counter of orders written reached the backlog (polled
    every 50 ms over HTTP: polling PostgreSQL would take from what is
    measured); joining the group before the first row is reported apart. The
    consumer downstream (started with the run, on the run's own topics)
    reads the events as they come: when the last of the drained orders'
    events reached the topic is its view. CPU per order of each part, every
    PostgreSQL process's and those that ended included."""
    extra = {"SECKILL_TOPIC_PREFIX": prefix} if prefix else {}
    backlog = lag(extra)
    t0 = time.time()
    o = order_service(extra)
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
    last_event = None if prefix else events.watcher().wait(sales, backlog, 120)
    cpu_after = pipeline_cpu(None, o)
    while lag(extra) > 0 and time.time() - t0 < 600:
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


def reference_drain(sales, label, backlog, prefix=None):
    """The minimal drain on the backlog of `sales`' orders (the orders topic
    under `prefix`, the run's own when None), in a group of its own: into
    a database of its own, migrated like the pipeline's, its sales warmed
    there; its statuses on Redis keys of its own; its events on a topic of
    its own. Timed as the service is: from its first order row to its last;
    CPU per order of it, Redis, the broker and PostgreSQL."""
    psql(f"DROP DATABASE IF EXISTS {REFERENCE_DB} WITH (FORCE)")
    psql(f"CREATE DATABASE {REFERENCE_DB}")
    url = DB_URL.rsplit("/", 1)[0] + "/" + REFERENCE_DB
    own = dict(ENV, SECKILL_DATABASE_URL=url, SECKILL_KEY_PREFIX=f"{RUN}:drain:")
    ctl("migrate", env=own)
    for s in sales:
        ctl("warmup", "--activity", s, "--sku", 1, "--stock", 50_000_000, "--force", env=own)
    before, children = server_cpu(), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([str(BIN / "examples" / "minimal_drain"), "--orders-topic", f"{prefix or RUN + '.'}seckill.orders",
                          "--events-prefix", f"{RUN}.minimal.", "--group", f"{RUN}-minimal-{label}",
                          "--database-url", url, "--expect", str(backlog), "--key-prefix", f"{RUN}:"],
                         env=ENV, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"bench: the minimal drain failed: {out.stderr}")
    after, done = server_cpu(), resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    first = float(subprocess.run(["psql", url, "-tAc", "SELECT extract(epoch FROM min(created_at)) FROM orders"],
                                 capture_output=True, text=True, check=True).stdout)
    seconds = report["lastWrittenMs"] / 1000 - first
    cpu = {"minimal drain": round((done.ru_utime + done.ru_stime - children.ru_utime - children.ru_stime) / backlog * 1e6, 1),
           **cpu_per(before, after, backlog)}
    result = {"backlog": backlog, "written": report["written"], "seconds": seconds,
              "ordersPerSecond": report["written"] / seconds, "cpuMicrosPerOrder": cpu}
    log(f"minimal drain ({label}): {report['written']} of {backlog} in {seconds:.2f}s = {result['ordersPerSecond']:.0f} orders/s; "
        f"CPU per order {cpu}")
    psql(f"DROP DATABASE IF EXISTS {REFERENCE_DB} WITH (FORCE)")
    return result


def pair(first, second, order):
    """The order service's drain against the minimal drain's on the same
    backlog, `order` saying which ran first: the ratio of their rates, and
    of the whole machine's CPU per order."""
    machine = {k: sum(d["cpuMicrosPerOrder"].values()) for k, d in (("service", first), ("reference", second))}
    return {"order": order, "ratio": ratio(first["ordersPerSecond"], second["ordersPerSecond"]),
            "cpuRatio": ratio(machine["service"], machine["reference"]), "machineCpuMicrosPerOrder": machine}


def second_pair():
    """A second backlog, on topics of its own: the minimal drain first, then
    the order service."""
    e = edge({"SECKILL_TOPIC_PREFIX": SECOND})
    warm(sale(18), 1, 50_000_000)
    accepted = load(EDGE, sale(18), 1, 200_000, 200_000)["accepted"]
    stop(e)
    reference = reference_drain((sale(18),), "second", accepted, SECOND)
    o, service = drain((sale(18),), "drain, the minimal drain first", SECOND)
    stop(o)
    RESULTS["drain_second"] = service
    RESULTS["drain_reference_second"] = reference
    RESULTS["drain_pair_second"] = pair(service, reference, "the minimal drain first")


def drain_rows(drain, reference, paired, label):
    """The report's rows of a drain against the minimal drain on the same backlog."""
    event = ("not watched" if drain.get("lastEventAfterLastOrderSeconds") is None and label != "first"
             else "never came" if drain.get("lastEventAfterLastOrderSeconds") is None
             else f"{drain['lastEventAfterLastOrderSeconds']:.2f} s after the last order row")
    cpu = ", ".join(f"{k} {v} us" for k, v in drain["cpuMicrosPerOrder"].items())
    ref_cpu = ", ".join(f"{k} {v} us" for k, v in reference["cpuMicrosPerOrder"].items())
    machine = paired["machineCpuMicrosPerOrder"]
    return [
        (f"drain of a {drain['backlog']:,}-record backlog (order service, its CREATED events; {paired['order']})",
         f"{drain['ordersPerSecond']:,.0f} orders/s",
         f"{drain['seconds']:.2f} s first to last order; service start to first order {drain['startToFirstOrderSeconds']:.2f} s; "
         f"{drain.get('eventsSeen', 0):,} CREATED events seen by a consumer, the last {event} (target 2 s)",
         f"{paired['ratio']:.2f} x the minimal drain (target 1.0)"),
        (f"minimal drain of the same backlog ({paired['order']})", f"{reference['ordersPerSecond']:,.0f} orders/s",
         f"{reference['seconds']:.2f} s first to last order", ""),
        (f"drain: CPU per order, the whole machine ({paired['order']})",
         f"{machine['service']:.1f} us vs {machine['reference']:.1f} us",
         f"order service: {cpu}; minimal drain: {ref_cpu}",
         f"{paired['cpuRatio']:.2f} x the minimal drain's (target 1.1 at most)"),
    ]
