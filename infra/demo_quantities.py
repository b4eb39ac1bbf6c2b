#!/usr/bin/env python3
"""Several units per order in the demo (infra/demo.sh): a sale of UNITS units
warmed with a limit of 2 per buyer. One buyer takes 2 and asks for 1 more:
409 LIMIT_REACHED. Then BUYERS buyers ask for 1, 2 or 3 units (by their id):
the 3s are refused 400 (more than one order may hold), and the 1s and 2s
are sized to take exactly the units left. Every answer is checked; exits
non-zero when a count is not what the contract promises (the
reconciliation, in units, is printed by the caller).

Usage: demo_quantities.py EDGE ACTIVITY SKU UNITS
"""

import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from demo_lifecycle import order


def ask(edge, activity, sku, user, quantity):
    return order(edge, {"activityId": activity, "skuId": sku, "userId": user, "quantity": quantity})


def main():
    edge, activity, sku, units = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    first = ask(edge, activity, sku, 1_000_000, 2)
    again = ask(edge, activity, sku, 1_000_000, 1)
    print(f"  a buyer takes 2 ({first[0]}), then asks for 1 more: {again[0]} {again[1].get('code')} "
          f"(holds {again[1].get('held')} of {again[1].get('limit')})")
    if first[0] != 202 or again[0] != 409 or again[1].get("code") != "LIMIT_REACHED":
        sys.exit("demo: the limit per buyer was not kept")
    left = units - 2
    # Buyers 1..3n ask for 1, 2, 3 units in turn: n of each, n + 2n = left.
    n = left // 3
    quantity = {user: 1 + (user - 1) % 3 for user in range(1, 3 * n + 1)}
    with ThreadPoolExecutor(32) as pool:
        answers = dict(pool.map(lambda u: (u, ask(edge, activity, sku, u, quantity[u])), quantity))
    counts = Counter((quantity[u], status) for u, (status, _) in answers.items())
    for (asked, status), times in sorted(counts.items()):
        print(f"  asked for {asked}: {times} x {status}")
    sold = sum(quantity[u] for u, (status, _) in answers.items() if status == 202)
    print(f"  units sold to the crowd: {sold} of the {left} left ({left - 3 * n} left over by design)")
    if counts[(3, 400)] != n or counts[(1, 202)] != n or counts[(2, 202)] != n or sold != 3 * n:
        sys.exit("demo: a quantity was not answered as the contract says")


if __name__ == "__main__":
    main()
