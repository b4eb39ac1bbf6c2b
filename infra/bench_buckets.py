#!/usr/bin/env python3
"""`make bench-buckets`: the hot-SKU burst (100 units, 50,000 users, 256
connections) through one edge on the Redis Cluster topology, the sale in
1 and in 3 stock buckets, and in 3 with every buyer at home in the same
bucket (two thirds of the units borrowed). Each run must sell exactly 100 and leave every
bucket empty with nothing on its way; it prints what the buckets cost: the
borrowings and units borrowed (the edge's counters), the deduction's
latency, how long buyers were told sold out while a unit remained (the
first 410 before the last request a 202 answered), and every answer by
status (a 503 TRY_AGAIN counted apart: after
the last unit each buyer must hear 410 SOLD_OUT).

It uses `make bench`'s helpers (release binaries, its own key and topic
prefixes) and deletes what it created: the keys on every primary, the rows,
the topics.
"""
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks import cleanup
from benchmarks import common as bench

PRIMARIES = (7000, 7001, 7002)
bench.ENV["SECKILL_REDIS_URL"] = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in PRIMARIES)


def counters():
    """The edge's counters and histogram sums this bench reads."""
    wanted = ("seckill_edge_borrowings_total", "seckill_edge_units_borrowed_total", "seckill_edge_borrow_gave_up_total",
              "seckill_edge_deduct_seconds_sum", "seckill_edge_deduct_seconds_count")
    found = dict.fromkeys(wanted, 0.0)
    with urllib.request.urlopen(f"http://{bench.EDGE}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in found:
                found[name] += float(line.rsplit(" ", 1)[1])
    return found


def burst(n, buckets, one_home=False):
    """The burst on a sale in `buckets`; with `one_home`, every buyer's id a
    multiple of `buckets` apart, so all share one home bucket and every
    other bucket's units must be borrowed."""
    sale = bench.sale(n)
    bench.ctl("warmup", "--activity", sale, "--sku", 1, "--stock", 100, "--buckets", buckets, "--force")
    before = counters()
    result = bench.load(bench.EDGE, sale, 1, 50_000, 50_000, conns=256, stride=buckets if one_home else 1)
    after = counters()
    report = json.loads(bench.ctl("reconcile", "--activity", sale, "--sku", 1, "--json", check=False))
    redis = report["redis"]
    moved = {k: after[k] - before[k] for k in after}
    deductions = moved["seckill_edge_deduct_seconds_count"]
    line = {
        "buckets": buckets,
        "oneHome": one_home,
        "accepted": result["accepted"],
        "outcomes": result["outcomes"],
        "remaining": redis["remaining"],
        "inTransit": redis["inTransit"],
        "perBucket": [(b["bucket"], b["total"], b["buyers"], b["lent"], b["borrowed"]) for b in redis.get("buckets", [])],
        "borrowings": moved["seckill_edge_borrowings_total"],
        "unitsBorrowed": moved["seckill_edge_units_borrowed_total"],
        "borrowGaveUp": moved["seckill_edge_borrow_gave_up_total"],
        "deductMeanMs": 1000 * moved["seckill_edge_deduct_seconds_sum"] / deductions if deductions else 0,
        "p99Ms": result["latencyMs"]["p99"],
        "requestsPerSecond": result["requestsPerSecond"],
        "lastAcceptSeconds": result.get("lastAcceptSeconds"),
        # From the first 410 to the last request a 202 answered, when that
        # came later: buyers told sold out while a unit was still there.
        "soldOutWhileAUnitRemainedSeconds": result.get("soldOutWhileAUnitRemainedSeconds"),
    }
    bench.log(json.dumps(line))
    return line


def clean_up():
    keys = 0
    for port in PRIMARIES:
        found = subprocess.run(["redis-cli", "-p", str(port), "--scan", "--pattern", f"{bench.RUN}:*"],
                               capture_output=True, text=True).stdout.split()
        keys += len(found)
        # One key per command: a cluster takes several only from one slot.
        commands = "".join(f"UNLINK {key}\n" for key in found)
        subprocess.run(["redis-cli", "-p", str(port)], input=commands, capture_output=True, text=True)
    bench.log(f"deleted {keys} keys on the cluster")
    try:
        cleanup.clean_up()
    except SystemExit as error:  # a database the run never migrated
        bench.log(f"clean-up: {error}")


def main():
    bench.LOGS.mkdir(parents=True, exist_ok=True)
    bench.edge()
    lines = [burst(20, 1), burst(21, 3), burst(22, 3, one_home=True)]
    failed = [line for line in lines if line["accepted"] != 100 or line["remaining"] != 0 or line["inTransit"] != 0
              or line["outcomes"].get("410 SOLD_OUT", 0) != 49_900]
    for line in lines:
        print(f"K={line['buckets']}{' (every buyer at one home)' if line['oneHome'] else ''}: {line['accepted']} sold, remaining {line['remaining']}, in transit "
              f"{line['inTransit']}, {line['outcomes']}, "
              f"{line['borrowings']:.0f} borrowings ({line['unitsBorrowed']:.0f} units), "
              f"deduction mean {line['deductMeanMs']:.2f} ms, p99 {line['p99Ms']:.2f} ms, "
              f"{line['requestsPerSecond']:,.0f} req/s, sold out while a unit remained for "
              f"{line['soldOutWhileAUnitRemainedSeconds']} s, per bucket (bucket, units, buyers, lent, borrowed) "
              f"{line['perBucket']}")
    if failed:
        raise SystemExit(f"bench-buckets: not exactly 100 sold with every bucket empty: {failed}")


if __name__ == "__main__":
    try:
        main()
    finally:
        for proc in list(bench.PROCS):
            bench.stop(proc)
        cleanup.clean_up()
