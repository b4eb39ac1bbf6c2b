"""What every measurement of `make bench` shares: the run's names and
ports, starting and stopping what it measures, the load generator, and the
CPU each process spends (from /proc)."""
import json
import os
import platform
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = ROOT / "target" / "release"
LOGS = ROOT / ".data" / "logs"
RUN = f"bench{int(time.time())}"
ENV = dict(
    os.environ,
    SECKILL_TOPIC_PREFIX=f"{RUN}.",
    SECKILL_KEY_PREFIX=f"{RUN}:",
    SECKILL_ADMIN_TOKEN="bench-admin-token",
    RUST_LOG="warn",
)
EDGE = "127.0.0.1:8180"
REFERENCE = "127.0.0.1:8190"
ORDER_METRICS = "127.0.0.1:9111"
DB_URL = "postgres://seckill:seckill@127.0.0.1:5432/seckill"
CONNS = 64
# Sale ids of this run: PostgreSQL is shared with earlier runs.
BASE = (int(time.time()) % 1_000_000) * 100


def sale(n):
    return BASE + n


PROCS = []
RESULTS = {}


def log(msg):
    print(f"[bench] {msg}", flush=True)


def start(cmd, name, extra=None):
    env = dict(ENV, **(extra or {}))
    out = open(LOGS / f"bench-{name}.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    PROCS.append(proc)
    return proc


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
    if proc in PROCS:
        PROCS.remove(proc)


def wait_http(url, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if subprocess.run(["curl", "-fsS", "-o", "/dev/null", url], capture_output=True).returncode == 0:
            return
        time.sleep(0.3)
    raise SystemExit(f"bench: {url} did not answer")


def wait_port(addr, seconds=30):
    host, port = addr.split(":")
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"bench: nothing listens on {addr}")


def ctl(*args, check=True, env=None):
    out = subprocess.run([str(BIN / "seckillctl"), *map(str, args)], env=env or ENV, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SystemExit(f"bench: seckillctl {' '.join(map(str, args))} failed: {out.stderr}{out.stdout}")
    return out.stdout


def warm(activity, sku, stock, per_user_limit=1):
    ctl("warmup", "--activity", activity, "--sku", sku, "--stock", stock, "--force", "--per-user-limit", per_user_limit)


def load(url, activity, sku, users, requests, conns=CONNS, offset=0, get=None, timeline_ms=None, stride=1,
         traceparent=None, quantity=1, rate=None, through_room=False):
    args = ["bench", "--url", f"http://{url}", "--activity", activity, "--sku", sku, "--users", users,
            "--requests", requests, "--concurrency", conns, "--user-offset", offset, "--user-stride", stride,
            "--quantity", quantity, "--json"]
    if rate:
        args += ["--rate", rate]
    if through_room:
        args += ["--through-room"]
    if get:
        args += ["--get", get]
    if traceparent:
        args += ["--traceparent", traceparent]
    if timeline_ms:
        args += ["--timeline-ms", timeline_ms]
    result = json.loads(ctl(*args))["bench"]
    accepted = result["outcomes"].get("202 QUEUED", 0)
    result["accepted"] = accepted
    return result


def cpu_seconds(pid):
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def server_cpu():
    """CPU seconds so far of Redis, the broker and PostgreSQL, by process
    (the backends that ended under "ended"): what `cpu_per` takes."""
    cpu = {name: {pid: cpu_seconds(pid) for pid in pids} for name, pids in server_pids(with_postgres=True).items()}
    cpu["postgres"]["ended"] = postmaster_children_cpu()
    return cpu


def server_pids(with_postgres=False):
    found = {}
    for name in ("redis-server", "java") + (("postgres",) if with_postgres else ()):
        out = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.split()
        found[name] = [int(p) for p in out]
    return found


def profiled_load(proc, url, activity, requests, traceparent=None, through_room=False):
    """`load`, plus the CPU each part spent per request (microseconds): the
    process serving it, Redis, the Kafka broker (java) and the generator."""
    def sample():
        return {"service": {proc.pid: cpu_seconds(proc.pid)},
                **{k: {p: cpu_seconds(p) for p in v} for k, v in server_pids().items()}}
    before = sample()
    result = load(url, activity, 1, requests, requests, traceparent=traceparent, through_room=through_room)
    per = cpu_per(before, sample(), requests)
    per["generator"] = round(result.get("generatorCpuPercent", 0) / 100 * result["seconds"] / requests * 1e6, 1)
    result["cpuMicrosPerRequest"] = per
    return result


def postmaster_children_cpu():
    """CPU seconds of the PostgreSQL backends that ended so far (the
    postmaster's reaped children: a connection closed during a run)."""
    pid = subprocess.run(["pgrep", "-o", "-x", "postgres"], capture_output=True, text=True).stdout.split()
    try:
        fields = Path(f"/proc/{pid[0]}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def pipeline_cpu(edge_proc, order_proc):
    """CPU seconds so far of every part an order passes through, by pid: the
    edge, Redis, the broker, the order service (its consumers and the
    relay) and PostgreSQL (every process, and those that ended)."""
    parts = {"order service": {order_proc.pid: cpu_seconds(order_proc.pid)}}
    if edge_proc is not None:
        parts["edge"] = {edge_proc.pid: cpu_seconds(edge_proc.pid)}
    for name, pids in server_pids(with_postgres=True).items():
        parts[name] = {pid: cpu_seconds(pid) for pid in pids}
    parts["postgres"]["ended"] = postmaster_children_cpu()
    return parts


def cpu_per(before, after, n):
    """Microseconds per unit of what each part spent between two samples (a
    pid absent from the first counts from zero; one gone by the second, such
    as Redis's rewrite child, is not counted)."""
    return {k: round(sum(t - before.get(k, {}).get(pid, 0.0) for pid, t in v.items()) / n * 1e6, 1)
            for k, v in after.items()}


def psql(sql):
    out = subprocess.run(["psql", DB_URL, "-tAc", sql], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench: psql failed: {out.stderr}")
    return out.stdout.strip()


def lag(extra=None):
    return json.loads(ctl("lag", "--json", env=dict(ENV, **(extra or {}))))["order"]["total"]


def machine():
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = int(Path("/proc/meminfo").read_text().split()[1]) // 1024 // 1024
    return f"{os.cpu_count()} cores ({cpu}), {mem} GiB, {platform.platform()}"


def edge(extra=None):
    # Status reads (and queue polls) unlimited per client: the load comes
    # from one address. Its log at its default level (info), as shipped.
    base = {"SECKILL_HTTP_ADDR": EDGE, "SECKILL__STATUS_READS__PER_CLIENT_PER_SECOND": "1000000000",
            "SECKILL__STATUS_READS__PER_CLIENT_BURST": "1000000000", "RUST_LOG": "info"}
    proc = start([str(BIN / "seckill-edge")], "edge", dict(base, **(extra or {})))
    wait_http(f"http://{EDGE}/readyz")
    return proc


def orders_written():
    """The order service's counter of orders written (its metrics endpoint)."""
    return order_metric("seckill_order_orders_written_total")


def order_metric(name):
    """One unlabelled series of the order service's metrics endpoint."""
    with urllib.request.urlopen(f"http://{ORDER_METRICS}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name):
                return int(float(line.split()[-1]))
    return 0


def order_service(extra=None):
    proc = start([str(BIN / "seckill-order")], "order", dict({"SECKILL__METRICS_ADDR": ORDER_METRICS}, **(extra or {})))
    wait_http(f"http://{ORDER_METRICS}/readyz")
    return proc


def ratio(a, b):
    return a / b if b else float("nan")
