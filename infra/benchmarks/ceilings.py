"""The ceilings every figure is held to, measured in the same run: (a)
plain HTTP, (b) Redis running deduct.lua, (c) PostgreSQL inserting order
rows; and the references — the smallest handler running the same script,
with and without the edge's publish, and the seed article's own script."""
import subprocess

from benchmarks.common import (
    BIN,
    CONNS,
    DB_URL,
    EDGE,
    ENV,
    LOGS,
    REFERENCE,
    RESULTS,
    ROOT,
    RUN,
    cpu_seconds,
    load,
    log,
    postmaster_children_cpu,
    profiled_load,
    psql,
    sale,
    server_pids,
    start,
    stop,
    wait_port,
    warm,
)


def http():
    """(a) plain HTTP ceiling: the edge's /healthz under the same tool and concurrency."""
    result = load(EDGE, 1, 1, 100_000, 100_000, get="/healthz")
    RESULTS["ceiling_http"] = result
    log(f"(a) HTTP ceiling: {result['requestsPerSecond']:.0f} req/s")


def redis():
    """(b) Redis ceiling: redis-benchmark running lua/deduct.lua by EVALSHA, distinct users, unpipelined."""
    warm(sale(1), 1, 50_000_000)
    sha = subprocess.run(["redis-cli", "SCRIPT", "LOAD", (ROOT / "lua/deduct.lua").read_text()], capture_output=True, text=True).stdout.strip()
    base = f"{RUN}:seckill:{{{sale(1)}:1}}"
    keys = [f"{base}:{k}" for k in ("meta", "stock", "buyers", "orders", "reserved", "seq")] + \
        [f"{base}:call:__rand_int__", f"{base}:trace", f"{base}:held"]
    # ARGV: activity, sku, publish deadline (ms), call id, outcome kept (ms),
    # then one request (user, nonce, request id, traceparent, admitted,
    # quantity): as a lone call.
    rb = subprocess.run(["redis-benchmark", "-c", str(CONNS), "-n", "200000", "-r", "1000000000", "--csv",
                         "EVALSHA", sha, str(len(keys)), *keys, str(sale(1)), "1", "7000", "bench", "60000",
                         "__rand_int__", "00000000bench000", "bench-request", "", "0", "1"],
                        capture_output=True, text=True)
    rows = [line for line in rb.stdout.splitlines() if line.startswith('"EVALSHA')]
    redis_rps = float(rows[-1].split(",")[1].strip('"')) if rows else 0.0
    RESULTS["ceiling_redis"] = {"requestsPerSecond": redis_rps, "raw": rb.stdout.strip()}
    log(f"(b) Redis ceiling (deduct.lua by EVALSHA): {redis_rps:.0f} calls/s")


def postgres():
    """(c) PostgreSQL ceiling: pgbench inserting 100-row batches into the orders table (no outbox trigger)."""
    RESULTS["ceiling_postgres"] = pg_ceiling(15)
    log(f"(c) PostgreSQL ceiling: {RESULTS['ceiling_postgres']['rowsPerSecond']:.0f} rows/s in 100-row batches, "
        f"{RESULTS['ceiling_postgres']['postgresMicrosPerRow']} us of PostgreSQL CPU per row")


def references():
    """The smallest axum handler calling the same script; the same also
    publishing each order as the edge does; and the seed's own script."""
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
