"""Where the time goes: perf recordings of the edge and the order service,
drawn as flame graphs by inferno, their top frames kept in the results."""
import subprocess
import time

from benchmarks.common import EDGE, LOGS, RESULTS, ROOT, edge, lag, load, log, order_service, sale, stop, warm

TOOLS = ROOT / ".data" / "tools" / "bin"


def flame_start(proc, name, seconds):
    """`perf record` of `proc` for `seconds` (the cpu-clock event at 199 Hz:
    no hardware counter needed; DWARF stacks: release builds keep line
    tables, not frame pointers)."""
    data = LOGS / f"bench-perf-{name}.data"
    return data, subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "199", "--call-graph", "dwarf,16384",
                                   "-p", str(proc.pid), "-o", str(data), "--", "sleep", str(seconds)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def flame_finish(recording, name, title):
    """The recording folded and drawn by inferno: bench-charts/flame-NAME.svg;
    the frames the most samples ended in (self time) go to the results."""
    data, proc = recording
    proc.wait()
    out = ROOT / "bench-charts" / f"flame-{name}.svg"
    out.parent.mkdir(exist_ok=True)
    folded = LOGS / f"bench-{name}.folded"
    drawn = subprocess.run(f"perf script -i {data} 2>/dev/null | {TOOLS}/inferno-collapse-perf > {folded} && "
                           f"{TOOLS}/inferno-flamegraph --title '{title}' < {folded} > {out}", shell=True)
    data.unlink(missing_ok=True)
    if drawn.returncode != 0 or out.stat().st_size < 1000:
        log(f"flame graph {name} not drawn")
        return
    own, total = {}, 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frame = stack.rsplit(";", 1)[-1]
        own[frame] = own.get(frame, 0) + int(count)
        total += int(count)
    RESULTS.setdefault("flames", {})[name] = [(frame[:120], round(100 * n / total, 1))
                                              for frame, n in sorted(own.items(), key=lambda x: -x[1])[:15]]
    folded.unlink(missing_ok=True)


def flames():
    """Where the time goes, apart from the measured runs (perf costs a
    little): the edge under the accepted path's load, then the order service
    draining what it accepted."""
    e = edge()
    warm(sale(19), 1, 50_000_000)
    recording = flame_start(e, "edge", 8)
    load(EDGE, sale(19), 1, 150_000, 150_000)
    flame_finish(recording, "edge", "the edge, accepted path (make bench)")
    stop(e)
    o = order_service()
    recording = flame_start(o, "order", 10)
    flame_finish(recording, "order", "the order service, draining a backlog (make bench)")
    while lag() > 0:
        time.sleep(0.2)
    stop(o)
