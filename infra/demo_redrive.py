#!/usr/bin/env python3
"""A redrive in the demo (infra/demo.sh): a bad release adds a constraint
that refuses the new orders of every fifth buyer; their orders, answered
202, are dead-lettered and settled FAILED (units back on sale). The release
is rolled back, and `seckillctl dlq redrive` gives each of those buyers
their order again — a new order id, redriveOf the original — which the
buyer reads back as CREATED. A second run places nothing. Exits non-zero if
the counts are not what the redrive promises.

Usage: demo_redrive.py EDGE ACTIVITY SKU UNITS SECKILLCTL
"""

import json
import os
import re
import subprocess
import sys
import time

from demo_lifecycle import wait_status, wave

DB = os.environ.get("SECKILL_DATABASE_URL", "postgres://seckill:seckill@127.0.0.1:5432/seckill")
CONSTRAINT = "demo_bad_release"


def psql(sql):
    subprocess.run(["psql", DB, "-qtA", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True, capture_output=True)


def ctl(binary, *args):
    out = subprocess.run([binary, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"demo: seckillctl {' '.join(args)} failed: {out.stderr}{out.stdout}")
    return out.stdout


def main():
    edge, activity, sku, units, binary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    sale = f"{activity}:{sku}"
    psql(f"ALTER TABLE orders DROP CONSTRAINT IF EXISTS {CONSTRAINT}")
    try:
        psql(f"ALTER TABLE orders ADD CONSTRAINT {CONSTRAINT} CHECK (status <> 'CREATED' OR user_id % 5 <> 0) NOT VALID")
        orders = wave(edge, activity, sku, range(1, units + 1))
        refused = {user: order for user, order in orders.items() if user % 5 == 0}
        wait_status(edge, refused.values(), "FAILED", 60)
        wait_status(edge, [o for u, o in orders.items() if u % 5 != 0], "CREATED", 60)
        print(f"  a bad release: {len(orders)} orders answered 202, {len(refused)} of them refused by a constraint "
              f"and settled FAILED (dead-lettered DB_REJECTED)")
    finally:
        psql(f"ALTER TABLE orders DROP CONSTRAINT IF EXISTS {CONSTRAINT}")
    print("  the release rolled back (constraint dropped)")
    dry = ctl(binary, "dlq", "redrive", "--sale", sale, "--dry-run")
    print(f"  dry run: {dry.count('would redrive')} buyer(s) would get their order again")
    started = time.monotonic()
    run = ctl(binary, "dlq", "redrive", "--sale", sale, "--note", "demo: bad release rolled back")
    placed = dict(re.findall(r"order (\S+)\): placed as (\S+)", run))
    print("  " + run.strip().splitlines()[-1])
    wait_status(edge, placed.values(), "CREATED", 60)
    print(f"  the buyers read their new orders back as CREATED ({time.monotonic() - started:.1f} s after the run), "
          f"e.g. {next(iter(placed.values()), '-')} (redriveOf {next(iter(placed), '-')})")
    again = ctl(binary, "dlq", "redrive", "--sale", sale)
    print("  run again: " + again.strip().splitlines()[-1])
    stats = json.loads(ctl(binary, "dlq", "stats", "--sale", sale, "--json"))
    print(f"  seckillctl dlq stats --sale {sale}: {stats['records']} dead letters {json.dumps(stats['byReason'])}, "
          f"{stats['redriven']} redriven")
    runs = ctl(binary, "dlq", "runs", "--limit", "3").strip().splitlines()
    print("  the audit trail (seckillctl dlq runs):")
    for line in runs:
        print(f"    {line}")
    if sorted(placed) != sorted(refused.values()) or "0 order(s) placed again" not in again:
        sys.exit("demo: the redrive did not give every refused buyer exactly one order")


if __name__ == "__main__":
    main()
