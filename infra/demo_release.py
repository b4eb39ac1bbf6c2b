#!/usr/bin/env python3
"""A release in the demo (infra/demo.sh): one activity's SIZES sizes on sale,
each its own SKU (FIRST_SKU, FIRST_SKU + 1, ...), declared "one per customer"
across them. One customer asks for every size at once: one pair, the rest
409 LIMIT_REACHED naming the release. Then CUSTOMERS customers each ask for
three sizes at once: each gets exactly one. Customer ids start at a base of
this run's own, so the demo can be run again (the orders of an earlier run
still count against their customers). Exits non-zero when a count is not
what the release promises (its books are printed by the caller).

Usage: demo_release.py EDGE ACTIVITY FIRST_SKU SIZES CUSTOMERS
"""

import random
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from demo_lifecycle import order


def main():
    edge, activity, first_sku, sizes, customers = sys.argv[1], *map(int, sys.argv[2:6])
    base = 10_000_000 + int(time.time()) % 1_000_000 * 100
    skus = [first_sku + i for i in range(sizes)]

    def ask(customer, sku):
        # A 429 (the per-user rate limit: 14 at once is a burst) is asked
        # again after its Retry-After, as a client does.
        for _ in range(5):
            status, reply = order(edge, {"activityId": activity, "skuId": sku, "userId": customer})
            if status != 429:
                break
            time.sleep(1)
        return status, reply

    with ThreadPoolExecutor(32) as pool:
        one = list(pool.map(lambda sku: ask(base, sku), skus))
    codes = Counter(reply.get("code", status) if status != 202 else 202 for status, reply in one)
    refused = [reply for status, reply in one if status == 409]
    print(f"  one customer asks for all {sizes} sizes at once: {dict(codes)}")
    if codes[202] != 1 or len(refused) != sizes - 1 or any(r.get("release") != activity for r in refused):
        sys.exit("demo: one customer got more than one pair of a one-per-customer release")
    print(f"  refused: {refused[0]['code']}, holds {refused[0]['held']} of {refused[0]['limit']} in release {activity}")
    asked = [(base + c, sku) for c in range(1, customers + 1) for sku in random.sample(skus, 3)]
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda a: (a[0], ask(*a)), asked))
    pairs = Counter(customer for customer, (status, _) in answers if status == 202)
    print(f"  {customers} customers ask for 3 sizes each at once: {sum(pairs.values())} pairs sold, "
          f"{Counter(pairs.values())} pairs per customer")
    if len(pairs) != customers or any(n != 1 for n in pairs.values()):
        sys.exit("demo: a customer got no pair or more than one")


if __name__ == "__main__":
    main()
