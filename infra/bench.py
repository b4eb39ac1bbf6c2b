#!/usr/bin/env python3
"""`make bench`: the benchmark suite. Every figure is reported next to a
ceiling measured in the same run, as a ratio, because the machines here are
shared and noisy. Writes BENCHMARKS.md and bench-results.json.

It starts what it measures (release binaries) with its own topic and key
prefixes, so it never touches the demo's or the tests' data, and stops them.
Each measurement is a file of `infra/benchmarks/`; this runner takes them in
an order that matters (the accepted path builds the drain's backlog; the
sold-out path is paired with a ceiling measured right before it) and writes
the report from what they found.
"""
import time

from benchmarks import accepted, ceilings, drain, end_to_end, events, features, flames, report, sold_out, spans
from benchmarks.cleanup import clean_up
from benchmarks.common import LOGS, PROCS, RESULTS, RUN, ctl, edge, log, machine, sale, stop


def edge_paths():
    """The ceilings, the references and the edge's accepted path, which
    leaves the drain's backlog; returns the running edge."""
    e = edge()
    events.watch_events()
    ceilings.http()
    ceilings.redis()
    ceilings.postgres()
    ceilings.references()
    accepted.warm_up_path()
    accepted.accepted(e)
    return e


def main():
    LOGS.mkdir(parents=True, exist_ok=True)
    started = time.time()
    log(f"run {RUN} on {machine()}")
    ctl("migrate")
    e = edge_paths()
    o, RESULTS["drain"] = drain.drain((sale(9), sale(3)), "drain")
    RESULTS["drain_reference"] = drain.reference_drain((sale(9), sale(3)), "first", RESULTS["drain"]["backlog"])
    RESULTS["drain_pair"] = drain.pair(RESULTS["drain"], RESULTS["drain_reference"], "the order service first")
    accepted.consuming(e)
    e = accepted.p99_at_a_rate(e)
    accepted.quantity_two()
    sold = sold_out.sold_out()
    sold_out.queue_poll(sold)
    sold_out.hot_burst()
    accepted.readyz_flood()
    accepted.lua_vs_lock(e)
    end_to_end.sale_end_to_end(o)
    accepted.two_partitions()
    drain.second_pair()
    features.features()
    flames.flames()
    spans.tracing_cost()
    report.write_report(time.time() - started)


if __name__ == "__main__":
    try:
        main()
    finally:
        for proc in PROCS.copy():  # stop() removes it from PROCS
            stop(proc)
        clean_up()
