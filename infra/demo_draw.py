#!/usr/bin/env python3
"""A sale sold by a draw, in the demo (infra/demo.sh): ENTRANTS buyers enter
in the few seconds entries are open; at drawAt one draw ranks them all by a
keyed hash of a seed whose SHA-256 was published before the first entry.
Prints the commitment, the reveal, the winners (each orders with the token
its entry reads) and the check anyone can make with no server
(`seckillctl draw export` + `seckillctl draw verify`). Exits non-zero unless
the seed matches its commitment, the list its digest, exactly UNITS were
sold and every winner's order was accepted.

Usage: demo_draw.py EDGE ACTIVITY SKU UNITS ENTRANTS CTL
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from shop import call

edge, activity, sku, units, entrants, ctl = sys.argv[1:7]
activity, sku, units, entrants = map(int, (activity, sku, units, entrants))
sale = f"{activity}:{sku}"
draw_path = f"/api/seckill/draw/{activity}/{sku}"


def enter(user):
    body = {"activityId": activity, "skuId": sku, "userId": user}
    status, entry = call(edge, "POST", "/api/seckill/draw/entries", body)
    if status != 200 or entry.get("status") != "ENTERED":
        raise SystemExit(f"demo: user {user} entered {status} {entry}")
    return user, entry["entry"]


def claim(entered):
    """An entrant reads their entry after the draw; a winner orders with
    its token. (user, status, the order's answer)."""
    user, entry = entered
    status, read = call(edge, "GET", f"/api/seckill/draw/entries/{entry}")
    if read.get("status") != "WON":
        return user, read.get("status"), None
    body = {"activityId": activity, "skuId": sku, "userId": user}
    answer, placed = call(edge, "POST", "/api/seckill/order", body, {"seckill-admission": read["admission"]})
    return user, "WON", f"{answer} {placed.get('code')}"


_, draw = call(edge, "GET", draw_path)
commitment = draw["seedCommitment"]
print(f"  commitment, published before entries open: SHA-256(seed) = {commitment}")
with ThreadPoolExecutor(32) as pool:
    entries = list(pool.map(enter, range(1, entrants + 1)))
_, draw = call(edge, "GET", draw_path)
print(f"  {len(entries)} entries; draw at {draw['drawAt']} ({draw['state']})")
deadline = time.time() + 60
while draw.get("state") != "DRAWN" and time.time() < deadline:
    time.sleep(0.5)
    _, draw = call(edge, "GET", draw_path)
if draw.get("state") != "DRAWN":
    raise SystemExit(f"demo: the draw was not made: {draw}")
seed, digest = draw["seed"], draw["entriesDigest"]
revealed = hashlib.sha256(seed.encode()).hexdigest()
print(f"  revealed seed {seed}: SHA-256 {revealed} {'matches' if revealed == commitment else 'DOES NOT MATCH'}")
print(f"  entry list SHA-256 {digest}; {draw['winners']} winners of {draw['entries']} entries")
with ThreadPoolExecutor(32) as pool:
    lives = list(pool.map(claim, entries))
winners = sorted(user for user, status, _ in lives if status == "WON")
orders = [answer for _, status, answer in lives if status == "WON"]
print(f"  winners (user ids): {winners[:12]}{' …' if len(winners) > 12 else ''}")
print(f"  their orders: {dict((a, orders.count(a)) for a in sorted(set(orders)))}")
with tempfile.TemporaryDirectory() as folder:
    listing = os.path.join(folder, "entries.txt")
    subprocess.run([ctl, "draw", "export", "--sale", sale, "--out", listing], check=True, capture_output=True)
    with open(listing, "rb") as exported:
        print(f"  sha256sum of the exported list: {hashlib.sha256(exported.read()).hexdigest()}")
    verify = subprocess.run([ctl, "draw", "verify", "--seed", seed, "--entries", listing, "--commitment", commitment,
                             "--digest", digest, "--winners", str(draw["winners"]), "--json"],
                            capture_output=True, text=True)
report = json.loads(verify.stdout)
ranked_winners = sorted(r["userId"] for r in report["ranking"] if r["won"])
print(f"  seckillctl draw verify: {'verified' if report['verified'] else report['problems']}; "
      f"its first {draw['winners']} are the winners: {ranked_winners == winners}")
problems = []
if verify.returncode != 0 or revealed != commitment:
    problems.append("the draw did not verify")
if ranked_winners != winners:
    problems.append("the verified ranking's first entries are not the winners")
if orders.count("202 QUEUED") != units or len(winners) != units:
    problems.append(f"{orders.count('202 QUEUED')} winners' orders accepted, {len(winners)} winners, not {units}")
if problems:
    print("demo: the draw: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
