#!/usr/bin/env python3
"""make demo's traced order: waits (bounded) until the spans of TRACE-ID
that the OTLP receiver wrote to SPANS include the relay's send of the order's
CREATED event, then prints the trace as a tree — each span's service, name,
kind and duration under its parent. Exit 1 if the trace did not arrive whole
within the wait.

Usage: demo_trace.py SPANS TRACE-ID [SECONDS]
"""

import json
import sys
import time


def spans_of(path, trace_id):
    try:
        with open(path) as lines:
            return [s for s in map(json.loads, lines) if s["traceId"] == trace_id]
    except FileNotFoundError:
        return []


def print_tree(spans):
    children = {}
    ids = {s["spanId"] for s in spans}
    for span in sorted(spans, key=lambda s: s["start"]):
        parent = span["parentSpanId"] if span["parentSpanId"] in ids else None
        children.setdefault(parent, []).append(span)

    def show(span, depth):
        took = (span["end"] - span["start"]) / 1e6
        print(f"  {'  ' * depth}{span['service']:<14} {span['name']} ({span['kind']}, {took:.2f} ms)")
        for child in children.get(span["spanId"], []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)


def main():
    path, trace_id = sys.argv[1:3]
    wait = float(sys.argv[3]) if len(sys.argv) > 3 else 30
    deadline = time.monotonic() + wait
    while True:
        spans = spans_of(path, trace_id)
        if any(s["name"].endswith("seckill.order-events") and s["kind"] == "producer" for s in spans):
            break
        if time.monotonic() > deadline:
            print(f"trace {trace_id}: {len(spans)} span(s) after {wait:.0f} s, no event sent", file=sys.stderr)
            sys.exit(1)
        time.sleep(0.5)
    services = sorted({s["service"] for s in spans})
    print(f"trace {trace_id}: {len(spans)} spans from {', '.join(services)}")
    print_tree(spans)


if __name__ == "__main__":
    main()
