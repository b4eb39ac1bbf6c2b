#!/usr/bin/env python3
"""`make upgrade-test`: a rolling upgrade from the previous landed version
while a sale runs, judged the way buyers and downstream consumers see it.

  UPGRADE_FROM (infra/upgrade/FROM)   the commit the services start at

1. The old version's four binaries are built from a git worktree of
   UPGRADE_FROM (once: kept in target/upgrade/<commit>/; the worktree and
   its build folder are deleted afterwards).
2. A database of its own (seckill_upgrade, made anew), topics and keys with
   this run's prefix. The old order service, compensator and edge start (the
   order service migrates the database to the old version's schema), and the
   old seckillctl warms a sale up.
3. Buyers order all along (distinct users, retried after a 503, which keeps
   nothing) and pay half of their orders; meanwhile, one step at a time:
   the new `seckillctl migrate` applies the new migrations under the old
   services; a new order service joins and the old one stops; the same for
   the compensator; a new edge takes the traffic and the old one stops.
4. The load stops. Every order answered 202 is read back as its buyer reads
   it (GET): CREATED or PAID, never FAILED, PAID exactly when its payment
   was answered 200; the new reconciliation must balance (nothing oversold,
   no buyer with two orders) and `events verify` must find every event of
   every order on the events topic, read as a consumer, each in order.

Exits non-zero on any breach. Cleans up the database, keys and topics.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time

from benchmarks import common as b
from benchmarks.cleanup import delete_topics
from shop import call, notify

ROOT = b.ROOT
FROM = os.environ.get("UPGRADE_FROM") or (ROOT / "infra" / "upgrade" / "FROM").read_text().split()[0]
NEW_BIN = ROOT / "target" / "debug"
RUN = f"upgrade{int(time.time())}"
DB = "seckill_upgrade"
ENV = dict(
    os.environ,
    SECKILL_TOPIC_PREFIX=f"{RUN}.",
    SECKILL_KEY_PREFIX=f"{RUN}:",
    SECKILL_DATABASE_URL=f"postgres://seckill:seckill@127.0.0.1:5432/{DB}",
    SECKILL_ADMIN_TOKEN="upgrade-admin-token-0123",
    SECKILL_PAYMENT_WEBHOOK_SECRET="upgrade-payment-webhook-secret-0123456789",
    RUST_LOG="warn",
)
ACTIVITY, SKU, STOCK = 7001, 1, 100_000
EDGES = {"old": "127.0.0.1:8281", "new": "127.0.0.1:8282"}
ORDERS = {"old": "127.0.0.1:9121", "new": "127.0.0.1:9123"}
COMPENSATORS = {"old": "127.0.0.1:9122", "new": "127.0.0.1:9124"}
PROCS = []


def log(msg):
    print(f"[upgrade] {msg}", flush=True)


def old_binaries():
    """The previous version's binaries, built once from a worktree."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", FROM], capture_output=True, text=True,
                            check=True).stdout.strip()
    home = ROOT / "target" / "upgrade" / commit[:12]
    names = ["seckill-edge", "seckill-order", "seckill-compensator", "seckillctl"]
    if all((home / n).exists() for n in names):
        return commit, home
    tree, build = ROOT / "target" / "upgrade" / "tree", ROOT / "target" / "upgrade" / "build"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    shutil.rmtree(tree, ignore_errors=True)
    log(f"building {commit[:12]} in a worktree (once; kept in {home.relative_to(ROOT)})")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True,
                   capture_output=True)
    try:
        packages = [a for p in ("seckill-edge", "seckill-order", "seckill-compensator", "seckill-ctl") for a in ("-p", p)]
        subprocess.run(["cargo", "build", "--bins", *packages], cwd=tree, check=True,
                       env=dict(os.environ, CARGO_TARGET_DIR=str(build)))
        home.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copy2(build / "debug" / name, home / name)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(build, ignore_errors=True)
    return commit, home


def start(binary, name, extra):
    out = open(b.LOGS / f"upgrade-{name}.log", "w")
    proc = subprocess.Popen([str(binary)], env=dict(ENV, **extra), stdout=out, stderr=subprocess.STDOUT)
    PROCS.append(proc)
    return proc


def ctl(binary, *args, check=True):
    out = subprocess.run([str(binary), *map(str, args)], env=ENV, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SystemExit(f"upgrade: seckillctl {' '.join(map(str, args))} failed: {out.stderr}{out.stdout}")
    return out


def old_has(*paths):
    """Whether the old version has one of these files (a feature it knows,
    wherever its version kept it)."""
    return any(subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{FROM}:{path}"],
                              capture_output=True).returncode == 0 for path in paths)


# What the old version's edge speaks: the payment provider's notifications
# (else the buyer-facing /pay) and the per-client limit of status reads.
OLD_NOTIFIES = old_has("services/edge/src/http/payments.rs", "services/edge/src/http/provider/payments.rs")
OLD_LIMITS_READS = old_has("services/edge/src/status_reads.rs")


def service(bin_dir, which, version):
    if which == "edge":
        # An older edge ignores SECKILL_ADMIN_ADDR (it has no console address).
        extra = {"SECKILL_HTTP_ADDR": EDGES[version], "SECKILL_ADMIN_ADDR": "127.0.0.1:0"}
        if version == "new" or OLD_LIMITS_READS:
            # Every buyer here is 127.0.0.1: one client to the per-client
            # limit of status reads, which the read-back would trip.
            extra["SECKILL__STATUS_READS__PER_CLIENT_PER_SECOND"] = "100000"
            extra["SECKILL__STATUS_READS__PER_CLIENT_BURST"] = "100000"
        proc = start(bin_dir / "seckill-edge", f"edge-{version}", extra)
        b.wait_http(f"http://{EDGES[version]}/readyz")
    else:
        addr = (ORDERS if which == "order" else COMPENSATORS)[version]
        proc = start(bin_dir / f"seckill-{which}", f"{which}-{version}", {"SECKILL__METRICS_ADDR": addr})
        b.wait_http(f"http://{addr}/readyz")
    log(f"{version} {which} up")
    return proc


class Buyers:
    """Buyers ordering and paying through whichever edges take traffic."""

    def __init__(self):
        self.edges = [EDGES["old"]]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.orders = {}     # user -> order id answered 202
        self.paid = set()    # order ids whose payment was answered 200
        self.answers = {}    # "order 202", "pay 200", ... -> count
        self.unexpected = []
        self.next_user = 1

    def count(self, what):
        with self.lock:
            self.answers[what] = self.answers.get(what, 0) + 1

    def edge(self):
        return random.choice(self.edges)

    def buyer(self):
        while not self.stop.is_set():
            with self.lock:
                user, self.next_user = self.next_user, self.next_user + 1
            order_id = self.order(user)
            if order_id and user % 2 == 0:
                self.pay(user, order_id)
            time.sleep(0.02)

    def order(self, user):
        for _ in range(20):
            status, body = call(self.edge(), "POST", "/api/seckill/order",
                                {"activityId": ACTIVITY, "skuId": SKU, "userId": user})
            self.count(f"order {status} {body.get('code', '')}".strip())
            if status == 202:
                with self.lock:
                    self.orders[user] = body["orderId"]
                return body["orderId"]
            if status == 409 and body.get("code") == "ALREADY_PURCHASED":
                # A retry after an answer that was lost in the cut: the
                # first attempt was kept, and the buyer is told its id.
                with self.lock:
                    self.orders[user] = body["orderId"]
                return body["orderId"]
            if status not in (0, 503):
                self.unexpected.append(("order", user, status, body))
                return None
            time.sleep(0.2)
        self.unexpected.append(("order never accepted", user))
        return None

    def pay(self, user, order_id):
        """The payment provider's signed notification, or an old edge's
        buyer-facing /pay (before notifications)."""
        for _ in range(100):
            edge = self.edge()
            if edge == EDGES["new"] or OLD_NOTIFIES:
                status, body = notify(edge, order_id, f"{RUN}-{order_id}", ENV["SECKILL_PAYMENT_WEBHOOK_SECRET"])
                if status == 200 and body.get("outcome") != "APPLIED":
                    self.unexpected.append(("payment not applied", order_id, body))
                    return
            else:
                status, body = call(edge, "POST", f"/api/seckill/order/{order_id}/pay", {"userId": user},
                                    {"Idempotency-Key": f"{RUN}-{order_id}"})
            self.count(f"pay {status} {body.get('code', body.get('outcome', ''))}".strip())
            if status == 200:
                with self.lock:
                    self.paid.add(order_id)
                return
            # Not yet written (the order service is behind) or a part being
            # replaced: the buyer tries again.
            if status not in (0, 503) and body.get("code") != "ORDER_PENDING":
                self.unexpected.append(("pay", order_id, status, body))
                return
            time.sleep(0.2)
        self.unexpected.append(("payment never answered", order_id))


def phase(seconds, what):
    log(what)
    time.sleep(seconds)


def main():
    b.LOGS.mkdir(parents=True, exist_ok=True)
    commit, old = old_binaries()
    log(f"run {RUN}: from {commit[:12]} to the working tree")
    b.psql(f"DROP DATABASE IF EXISTS {DB}")
    b.psql(f"CREATE DATABASE {DB}")
    order_old = service(old, "order", "old")
    compensator_old = service(old, "compensator", "old")
    edge_old = service(old, "edge", "old")
    ctl(old / "seckillctl", "warmup", "--activity", ACTIVITY, "--sku", SKU, "--stock", STOCK, "--force")

    buyers = Buyers()
    threads = [threading.Thread(target=buyers.buyer) for _ in range(8)]
    for t in threads:
        t.start()
    try:
        phase(8, "the old version sells")
        log("new migrations, under the old services: " + ctl(NEW_BIN / "seckillctl", "migrate").stdout.strip())
        phase(8, "the old services on the new schema")
        service(NEW_BIN, "order", "new")
        phase(5, "two order services, old and new")
        b.stop(order_old)
        service(NEW_BIN, "compensator", "new")
        phase(5, "two compensators, old and new")
        b.stop(compensator_old)
        service(NEW_BIN, "edge", "new")
        buyers.edges = [EDGES["old"], EDGES["new"]]
        phase(5, "two edges, old and new")
        buyers.edges = [EDGES["new"]]
        phase(2, "the old edge's requests finish")
        b.stop(edge_old)
        phase(8, "the new version sells")
    finally:
        buyers.stop.set()
        for t in threads:
            t.join()
    log(f"answers: {json.dumps(dict(sorted(buyers.answers.items())))}")
    return judge(buyers)


def judge(buyers):
    breaches = [f"unexpected answer: {u}" for u in buyers.unexpected[:20]]
    reconcile = ctl(NEW_BIN / "seckillctl", "reconcile", "--activity", ACTIVITY, "--sku", SKU, "--wait-drain", 120,
                    check=False)
    print(reconcile.stdout, flush=True)
    if reconcile.returncode != 0:
        breaches.append(f"the reconciliation does not balance (exit {reconcile.returncode}): {reconcile.stderr}")
    # The buyer's view of every promise.
    seen = {}
    for user, order_id in buyers.orders.items():
        status, body = call(EDGES["new"], "GET", f"/api/seckill/order/{order_id}")
        state = body.get("status", f"HTTP {status}")
        seen[state] = seen.get(state, 0) + 1
        wanted = "PAID" if order_id in buyers.paid else "CREATED"
        if state != wanted:
            breaches.append(f"user {user}'s order {order_id} is {state}, not {wanted}")
    log(f"{len(buyers.orders)} orders answered 202, read back as: {json.dumps(seen)}; {len(buyers.paid)} paid")
    events = ctl(NEW_BIN / "seckillctl", "events", "verify", "--activity", ACTIVITY, "--sku", SKU, "--wait-drain", 60,
                 check=False)
    print(events.stdout, flush=True)
    if events.returncode != 0:
        breaches.append(f"events verify: exit {events.returncode}: {events.stderr}")
    if not buyers.orders:
        breaches.append("no order was accepted")
    for breach in breaches[:40]:
        log(f"BREACH: {breach}")
    log(f"{len(breaches)} breaches" if breaches else "nothing lost, oversold or duplicated; every event relayed")
    return 1 if breaches else 0


def clean_up():
    keys = subprocess.run(["redis-cli", "--scan", "--pattern", f"{RUN}:*"], capture_output=True,
                          text=True).stdout.split()
    for i in range(0, len(keys), 500):
        subprocess.run(["redis-cli", "UNLINK", *keys[i:i + 500]], capture_output=True)
    b.psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    topics = [f"{RUN}.seckill.{t}" for t in ("orders", "orders.dlq", "order-events", "draw-events")]
    try:
        deleted = delete_topics(topics)
    except OSError as error:
        deleted = f"none ({error})"
    log(f"cleaned up: {len(keys)} Redis keys, database {DB}, {deleted} Kafka topics")


if __name__ == "__main__":
    code = 1
    try:
        code = main()
    finally:
        for proc in PROCS.copy():  # stop() removes it from PROCS
            b.stop(proc) if proc.poll() is None else None
        clean_up()
    sys.exit(code)
