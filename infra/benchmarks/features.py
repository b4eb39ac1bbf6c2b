"""What each feature costs, and only the sales that use it: the edge's CPU
per order of a plain sale (one unit a buyer, no room, no draw) beside the
same load on a sale with a limit above one unit, and on a sale behind a
waiting room (each buyer joins, polls until admitted, orders with the
token: the room's whole journey, per order), and on a sale in a release
(one unit per customer across the activity's sizes: each order takes and
keeps its unit in the release's own slot, two more replica-confirmed
script calls). A sampled trace's cost is the
"spans exported" rows' (every trace against none). A draw's orders take
the room's path (a token claimed and spent per order); its entries are
joins. All on topics of their own, nobody consuming."""
from benchmarks.common import EDGE, RESULTS, RUN, ctl, edge, log, profiled_load, sale, stop, warm

REQUESTS = 50_000


def features():
    """The four sales, one after the other, on one edge."""
    e = edge({"SECKILL_TOPIC_PREFIX": f"{RUN}.features.", "SECKILL__ADMISSION__TICK_MS": "100"})
    runs = {}
    warm(sale(40), 1, 50_000_000)
    runs["plain"] = profiled_load(e, EDGE, sale(40), REQUESTS)
    warm(sale(41), 1, 50_000_000, per_user_limit=2)
    runs["limit of 2 units a buyer"] = profiled_load(e, EDGE, sale(41), REQUESTS)
    # Declared first: every edge holds it within a second, the warm-up's
    # time included.
    ctl("release", "--activity", sale(43), "--per-customer-limit", 1)
    warm(sale(43), 1, 50_000_000)
    runs["release, 1 unit a customer across sizes"] = profiled_load(e, EDGE, sale(43), REQUESTS)
    ctl("warmup", "--activity", sale(42), "--sku", 1, "--stock", 50_000_000, "--force",
        "--admission", '{"activeBuyers":100000,"admitPerMinute":6000000}')
    runs["waiting room (join, polls, order)"] = profiled_load(e, EDGE, sale(42), REQUESTS // 5, through_room=True)
    stop(e)
    plain = runs["plain"]["cpuMicrosPerRequest"]["service"]
    RESULTS["features"] = {
        label: {"edgeMicrosPerOrder": run["cpuMicrosPerRequest"]["service"],
                "redisMicrosPerOrder": run["cpuMicrosPerRequest"]["redis-server"],
                "extraEdgeMicrosPerOrder": round(run["cpuMicrosPerRequest"]["service"] - plain, 1),
                "requestsPerSecond": run["requestsPerSecond"], "outcomes": run["outcomes"]}
        for label, run in runs.items()}
    for label, figures in RESULTS["features"].items():
        log(f"feature {label}: edge {figures['edgeMicrosPerOrder']} us/order ({figures['extraEdgeMicrosPerOrder']:+.1f}), "
            f"redis {figures['redisMicrosPerOrder']} us/order, {figures['outcomes']}")


def feature_rows(r):
    """The report's rows: each feature's cost beside the plain sale's."""
    rows = [(f"feature cost: {label}", f"edge {f['edgeMicrosPerOrder']} us/order",
             f"Redis {f['redisMicrosPerOrder']} us/order; {f['requestsPerSecond']:,.0f} req/s; {f['outcomes']}",
             "the plain sale" if label == "plain" else f"{f['extraEdgeMicrosPerOrder']:+.1f} us at the edge")
            for label, f in r["features"].items()]
    tracing = r.get("tracing", {})
    if "every trace" in tracing:
        extra = tracing["every trace"]["edgeMicrosPerOrder"] - tracing["off"]["edgeMicrosPerOrder"]
        rows.append(("feature cost: a sampled trace", f"edge {tracing['every trace']['edgeMicrosPerOrder']} us/order",
                     "every trace exported, against none (the spans rows)", f"{extra:+.1f} us at the edge"))
    return rows
