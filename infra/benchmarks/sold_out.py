"""The sold-out path (paired with the HTTP ceiling measured right before
it), the waiting room's ticket poll and proof of work, and the hot-SKU
burst: what the edge answers when the units are gone, or nearly."""
import json
import subprocess
import time
import urllib.request

from benchmarks.common import BIN, EDGE, RESULTS, ctl, load, log, ratio, sale, warm


def sold_out():
    """The sold-out path, paired with a second measure of (a) right before
    it: the two then run under the same background (the order service up,
    the broker's and PostgreSQL's housekeeping after the drain)."""
    warm(sale(4), 1, 1000)
    load(EDGE, sale(4), 1, 2000, 2000)
    RESULTS["ceiling_http_paired"] = load(EDGE, 1, 1, 100_000, 100_000, get="/healthz")
    result = load(EDGE, sale(4), 1, 100_000, 100_000, offset=10_000)
    RESULTS["sold_out_path"] = result
    log(f"sold-out path: {result['requestsPerSecond']:.0f} req/s")
    return result


def queue_poll(sold_out):
    """One waiting ticket polled (GET /api/seckill/queue/{ticket}, one Lua
    call) under the same tool and connections, against the sold-out path
    just measured; and what a join's proof of work costs per bit."""
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


def hot_burst():
    """100 units, 50,000 users, 256 connections."""
    warm(sale(5), 1, 100)
    burst = load(EDGE, sale(5), 1, 50_000, 50_000, conns=256)
    RESULTS["hot_burst"] = burst
    log(f"hot burst: {burst['accepted']} accepted, sold out after {burst.get('lastAcceptSeconds')}s")
