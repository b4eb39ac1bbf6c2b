#!/usr/bin/env python3
"""A small OTLP/HTTP trace receiver: what the tests and the demo export
spans to when no OpenTelemetry Collector is at hand. It takes
`POST /v1/traces` with an `application/x-protobuf` body, decodes it with the
OpenTelemetry project's own message types (PyPI `opentelemetry-proto`:
`ExportTraceServiceRequest`), answers as a collector does (200 with an
empty `ExportTraceServiceResponse`), and appends each span to OUT as one JSON
line: traceId, spanId, parentSpanId (hex; empty for a root), name, kind,
service (the resource's service.name), attributes, start and end (unix ns)
and status.

Usage: otlp_receiver.py PORT OUT   (127.0.0.1 only; PORT 0 picks one and
prints it on the first line of standard output)
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

KINDS = {value: name.removeprefix("SPAN_KIND_").lower() for name, value in Span.SpanKind.items()}
LOCK = threading.Lock()


def value_of(any_value):
    """An AnyValue as plain JSON (strings, numbers, booleans, lists)."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in any_value.array_value.values]
    if kind in ("kvlist_value", "bytes_value") or kind is None:
        return str(any_value)
    return getattr(any_value, kind)


def attributes(key_values):
    return {kv.key: value_of(kv.value) for kv in key_values}


def spans_of(request):
    """Every span of an export request, as the JSON lines OUT gets."""
    for resource_spans in request.resource_spans:
        service = attributes(resource_spans.resource.attributes).get("service.name", "")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "traceId": span.trace_id.hex(),
                    "spanId": span.span_id.hex(),
                    "parentSpanId": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": KINDS.get(span.kind, str(span.kind)),
                    "service": service,
                    "attributes": attributes(span.attributes),
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "status": {0: "unset", 1: "ok", 2: "error"}.get(span.status.code, str(span.status.code)),
                }


class Receiver(BaseHTTPRequestHandler):
    out = None

    def do_POST(self):  # the name http.server calls
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.rstrip("/") != "/v1/traces":
            return self.answer(404, b"")
        if not self.headers.get("Content-Type", "").startswith("application/x-protobuf"):
            return self.answer(415, b"")
        try:
            request = ExportTraceServiceRequest.FromString(body)
        except Exception:  # any undecodable body is a 400
            return self.answer(400, b"")
        lines = [json.dumps(span) + "\n" for span in spans_of(request)]
        with LOCK, open(self.out, "a") as out:
            out.writelines(lines)
        self.answer(200, ExportTraceServiceResponse().SerializeToString())

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    port, out = int(sys.argv[1]), sys.argv[2]
    Receiver.out = out
    server = ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
