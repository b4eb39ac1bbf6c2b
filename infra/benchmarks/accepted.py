"""The accepted path: the edge taking orders (a unit each, distinct users)
against the references; again while the order service consumes, with an
orders topic of 2 partitions, under a /readyz flood, and with the
lock-based deduction beside the Lua one."""
import subprocess
import time

from benchmarks.common import EDGE, RESULTS, RUN, edge, load, log, profiled_load, ratio, sale, stop, warm


def warm_up_path():
    """A warm-up of the whole accepted path first (its figures are dropped):
    the broker's JIT and every connection pool start cold."""
    warm(sale(9), 1, 50_000_000)
    load(EDGE, sale(9), 1, 30_000, 30_000)


def accepted(e):
    """The accepted path with the order service stopped: this also builds
    the drain's backlog."""
    warm(sale(3), 1, 50_000_000)
    accepted = profiled_load(e, EDGE, sale(3), 200_000)
    RESULTS["accepted_path"] = accepted
    log(f"accepted path: {accepted['requestsPerSecond']:.0f} req/s, p99 {accepted['latencyMs']['p99']:.2f} ms")


def consuming(e):
    """The accepted path again while the order service consumes what it
    accepts (the p99 target holds here)."""
    warm(sale(15), 1, 50_000_000)
    RESULTS["accepted_path_consuming"] = profiled_load(e, EDGE, sale(15), 200_000)
    log(f"accepted path, order service consuming: p99 {RESULTS['accepted_path_consuming']['latencyMs']['p99']:.2f} ms")


def p99_at_a_rate(e):
    """The accepted path's p99 at a fixed rate (open loop, half the rate the
    plain accepted path reached), while the order service consumes what it
    accepts and, on an edge of its own whose orders nobody consumes,
    without: what the drain's Redis and CPU do to a buyer's wait when the
    machine is not saturated by the load itself (measured closed-loop, the
    p99 follows the throughput the drain's CPU takes). Returns the edge to
    run on."""
    rate = round(RESULTS["accepted_path"]["requestsPerSecond"] / 2)
    warm(sale(22), 1, 50_000_000)
    consuming = load(EDGE, sale(22), 1, rate * 8, rate * 8, rate=rate)
    stop(e)
    alone_edge = edge({"SECKILL_TOPIC_PREFIX": f"{RUN}.fixed."})
    warm(sale(23), 1, 50_000_000)
    # A new edge, its pools and the broker's partitions warmed first (as
    # the other edge was), its figures dropped.
    load(EDGE, sale(23), 1, rate * 2, rate * 2, rate=rate, offset=10_000_000)
    alone = load(EDGE, sale(23), 1, rate * 8, rate * 8, rate=rate)
    stop(alone_edge)
    RESULTS["accepted_at_a_rate"] = {"rate": rate, "consuming": consuming, "alone": alone,
                                     "p99Ratio": ratio(consuming["latencyMs"]["p99"], alone["latencyMs"]["p99"])}
    log(f"accepted path at {rate} req/s: p99 {consuming['latencyMs']['p99']:.2f} ms while consuming, "
        f"{alone['latencyMs']['p99']:.2f} ms alone")
    return edge()


def quantity_two():
    """The accepted path again, under the same load while the order service
    consumes, with orders of two units (a limit of 2 per buyer): beside
    orders of one (`consuming`, measured right before), the rate (goal 0.9
    x) and the units per second (goal 1.6 x)."""
    warm(sale(20), 1, 50_000_000, per_user_limit=2)
    two = load(EDGE, sale(20), 1, 200_000, 200_000, quantity=2)
    one = RESULTS["accepted_path_consuming"]
    two["ratioToOneUnit"] = ratio(two["requestsPerSecond"], one["requestsPerSecond"])
    two["unitsRatioToOneUnit"] = ratio(2 * two["accepted"] / two["seconds"], one["accepted"] / one["seconds"])
    RESULTS["accepted_path_quantity_two"] = two
    log(f"accepted path, 2 units per order: {two['ratioToOneUnit']:.2f} x the rate of 1, "
        f"{two['unitsRatioToOneUnit']:.2f} x the units per second")


def readyz_flood():
    """Buyers on the accepted path (16 connections) alone, then while wrk
    holds 500 connections on /healthz (the cheapest answer the edge has:
    what any flood costs on two shared cores), then on /readyz. The edge
    answers the probes from its background check, so a /readyz flood should
    cost buyers what a /healthz flood does (target 1.2 x at most); against
    the p99 alone the ratio is the machine's."""
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


def lua_vs_lock(e):
    """Lua against the lock-based deduction on one hot sale; stops `e` (the
    lock needs an edge of its own)."""
    warm(sale(6), 1, 10_000_000)
    lua = load(EDGE, sale(6), 1, 50_000, 50_000)
    stop(e)
    e = edge({"SECKILL__DEDUCTION": "lock"})
    warm(sale(7), 1, 10_000_000)
    lock = load(EDGE, sale(7), 1, 50_000, 50_000)
    stop(e)
    RESULTS["lua_vs_lock"] = {"lua": lua, "lock": lock}
    log(f"lua {lua['accepted'] / lua['seconds']:.0f} accepted/s vs lock {lock['accepted'] / lock['seconds']:.0f} accepted/s")


def two_partitions():
    """Tuning, not a target: the accepted path again with an orders topic of
    2 partitions instead of the default 8 (a topic of its own). Fewer,
    larger batches per produce request cost the broker less per record."""
    e = edge({"SECKILL_TOPIC_PREFIX": f"{RUN}.p2.", "SECKILL__KAFKA__ORDER_PARTITIONS": "2"})
    warm(sale(12), 1, 50_000_000)
    RESULTS["accepted_path_2_partitions"] = profiled_load(e, EDGE, sale(12), 200_000)
    stop(e)
