#!/usr/bin/env python3
"""A sale through its waiting room, in the demo (infra/demo.sh): UNITS units,
BUYERS buyers who all join during the pre-queue (the start a few seconds
ahead), shuffled at the start, let in ACTIVE at a time at RATE a minute;
each admitted buyer orders with the admission token the moment it reads
ADMITTED (an admitted buyer may still hear SOLD_OUT: the room admits up to
overbook × the units left); everyone else polls at the pollAfterMs the edge
says, until their ticket reads SOLD_OUT. Prints the room's figures as `seckillctl queue stats`
shows them, and what the buyers saw; exits non-zero unless exactly UNITS
were sold, every other buyer heard SOLD_OUT, and no window of a second
admitted more than the rate allows.

Usage: demo_queue.py EDGE ACTIVITY SKU UNITS BUYERS ACTIVE RATE STARTS_IN_SECONDS CTL
"""

import json
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from shop import call

edge, activity, sku, units, buyers, active, rate, starts_in = sys.argv[1:9]
ctl = sys.argv[9]
activity, sku, units, buyers, active, rate = map(int, (activity, sku, units, buyers, active, rate))
starts_at = time.time() + float(starts_in)


def join(user):
    """A buyer joins during the pre-queue: their ticket."""
    body = {"activityId": activity, "skuId": sku, "userId": user}
    status, ticket = call(edge, "POST", "/api/seckill/queue", body)
    if status != 200 or ticket.get("status") != "WAITING":
        raise SystemExit(f"demo: buyer {user} joined {status} {ticket}")
    return user, ticket


def buyer(joined):
    """One buyer's life in the room after the join: poll, order when
    admitted. What they saw last, and when they were admitted (or None)."""
    user, ticket = joined
    body = {"activityId": activity, "skuId": sku, "userId": user}
    while time.time() < starts_at + 120:
        if ticket.get("status") == "ADMITTED":
            admitted_at = time.time()
            for _ in range(5):
                status, placed = call(edge, "POST", "/api/seckill/order", body, {"seckill-admission": ticket["admission"]})
                if status != 503:
                    break
                time.sleep(1)
            return f"order {status} {placed.get('code')}", admitted_at
        if ticket.get("status") in ("SOLD_OUT", "CLOSED"):
            return ticket["status"], None
        time.sleep(ticket.get("pollAfterMs", 1000) / 1000)
        status, polled = call(edge, "GET", f"/api/seckill/queue/{ticket['ticket']}")
        if status == 200:
            ticket = polled
    return "still waiting", None


with ThreadPoolExecutor(64) as pool:
    tickets = list(pool.map(join, range(1, buyers + 1)))
if time.time() >= starts_at:
    raise SystemExit("demo: the joins took past the start; the pre-queue shows nothing")
print(f"  {buyers} buyers joined the pre-queue, {starts_at - time.time():.1f} s before the start")
with ThreadPoolExecutor(buyers) as pool:
    lives = list(pool.map(buyer, tickets))
seen = Counter(last for last, _ in lives)
for outcome, n in sorted(seen.items()):
    print(f"  {n:>5}  {outcome}")
stats = subprocess.run([ctl, "queue", "stats", "--sale", f"{activity}:{sku}"], capture_output=True, text=True)
print("\n".join("  " + line for line in stats.stdout.splitlines()))
room = json.loads(subprocess.run([ctl, "queue", "stats", "--sale", f"{activity}:{sku}", "--json"],
                                 capture_output=True, text=True, check=True).stdout)
times = sorted(t for _, t in lives if t is not None)
busiest = max((sum(1 for u in times if t <= u < t + 1) for t in times), default=0)
print(f"  busiest second of admissions the buyers saw: {busiest} (the rate allows about {rate / 60 + 1:.0f}, one pass late at most)")
bought = seen.get("order 202 QUEUED", 0)
problems = []
if bought != units:
    problems.append(f"{bought} bought, not {units}")
sold_out = seen.get("SOLD_OUT", 0) + seen.get("order 410 SOLD_OUT", 0)
if sold_out != buyers - bought:
    problems.append(f"{sold_out} heard SOLD_OUT, not {buyers - bought}")
if room["admitted"] > units * 1.2 + active:
    problems.append(f"{room['admitted']} admitted for {units} units")
if problems:
    print("demo: the waiting room " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
