#!/usr/bin/env python3
"""The payment window in the demo (infra/demo.sh): a sale of UNITS units with
a short payment window; a first wave of buyers takes every unit, three in
four of them pay, the rest never do. At the deadline their orders are
cancelled and the units go back on sale; a second wave buys exactly those
units, and pays. Prints what happened; exits non-zero if the counts are not
what the lifecycle promises (the reconciliation is printed by the caller).

The payments come the way a payment provider sends them: a notification
to POST /api/payments/notify signed with SECKILL_PAYMENT_WEBHOOK_SECRET
(Seckill-Signature: t=<seconds>,v1=<HMAC-SHA256 of "<t>.<body>">) — this
script stands in for the provider (infra/shop.py).

Usage: demo_lifecycle.py EDGE ACTIVITY SKU UNITS WINDOW_SECONDS
"""

import sys
import time
from concurrent.futures import ThreadPoolExecutor

from shop import call, notify


def order(edge, body, tries=6):
    """Places one order as the contract lets a client: a 503 TRY_AGAIN kept
    nothing, so it is asked again (a second apart); the last answer."""
    for _ in range(tries - 1):
        status, reply = call(edge, "POST", "/api/seckill/order", body)
        if status != 503:
            return status, reply
        time.sleep(1)
    return call(edge, "POST", "/api/seckill/order", body)


def wave(edge, activity, sku, users):
    """Orders one unit for each user; returns {user: order id} of the accepted."""
    def body(user):
        return {"activityId": activity, "skuId": sku, "userId": user}
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda u: (u, order(edge, body(u))), users))
    return {user: reply["orderId"] for user, (status, reply) in answers if status == 202}


def wait_status(edge, order_ids, wanted, timeout):
    deadline = time.monotonic() + timeout
    left = set(order_ids)
    while left and time.monotonic() < deadline:
        left = {o for o in left if call(edge, "GET", f"/api/seckill/order/{o}")[1].get("status") != wanted}
        if left:
            time.sleep(0.2)
    if left:
        sys.exit(f"demo: {len(left)} orders never became {wanted}")


def pay(edge, orders):
    with ThreadPoolExecutor(32) as pool:
        replies = list(pool.map(lambda order: notify(edge, order, f"pay_{order}"), orders.values()))
    return sum(1 for status, reply in replies if status == 200 and reply.get("outcome") == "APPLIED")


def main():
    edge, activity, sku, units, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    first = wave(edge, activity, sku, range(1, 2 * units + 1))
    wait_status(edge, first.values(), "CREATED", 60)
    payers = {user: order for user, order in first.items() if user % 4 != 0}
    unpaid = {user: order for user, order in first.items() if user % 4 == 0}
    paid = pay(edge, payers)
    print(f"  first wave: {2 * units} buyers, {len(first)} orders, {paid} paid, {len(unpaid)} never pay")
    started = time.monotonic()
    wait_status(edge, unpaid.values(), "CANCELLED", window + 30)
    print(f"  {len(unpaid)} unpaid orders cancelled at their deadline ({window} s window; "
          f"{time.monotonic() - started:.1f} s after the payments)")
    late_order = next(iter(unpaid.values()))
    status, reply = notify(edge, late_order, f"pay_late_{late_order}")
    late = f"{reply.get('outcome')} {reply.get('refundReason')}"
    print(f"  a payment after the cancellation: {status} {late} (owed back: seckillctl payments refunds)")
    repeat = notify(edge, next(iter(payers.values())), f"pay_{next(iter(payers.values()))}")[1].get("outcome")
    print(f"  a notification the provider sent twice: {repeat} again, applied once")
    second = wave(edge, activity, sku, range(2 * units + 1, 4 * units + 1))
    wait_status(edge, second.values(), "CREATED", 60)
    paid_again = pay(edge, second)
    print(f"  second wave: {2 * units} new buyers, {len(second)} orders (the returned units), {paid_again} paid")
    if len(first) != units or len(second) != len(unpaid) or paid + paid_again != units or late != "REFUND_DUE ORDER_EXPIRED" or repeat != "APPLIED":
        sys.exit("demo: the payment window did not sell every unit exactly once")


if __name__ == "__main__":
    main()
