"""A local OTLP/HTTP trace receiver on loopback: it decodes each protobuf request it is sent.

`Receiver()` serves `POST /v1/traces` on 127.0.0.1 (a free port) in a thread, decodes
the body as an `ExportTraceServiceRequest` (opentelemetry-proto) and keeps every span
it holds, as `Received` values; `fail_next(n)` answers the next n requests 400
(an error the SDK does not retry by itself), `fail_next(n, status, retry_after=...)`
with another status (and a `Retry-After` header, which the SDK honours for 429 and 503).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Received:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: tuple[tuple[str, int, dict[str, Any]], ...]
    status_code: int
    service: str


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class Receiver:
    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.requests = 0
        self._failures = 0
        self._status = 400
        self._retry_after: str | None = None
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.requests += 1
                    if receiver._failures > 0:
                        receiver._failures -= 1
                        self.send_response(receiver._status)
                        if receiver._retry_after is not None:
                            self.send_header("Retry-After", receiver._retry_after)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    if self.path != "/v1/traces":
                        self.send_response(404)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    for rs in request.resource_spans:
                        service = _attrs(rs.resource.attributes).get("service.name", "")
                        for ss in rs.scope_spans:
                            for s in ss.spans:
                                receiver.spans.append(
                                    Received(
                                        name=s.name,
                                        trace_id=s.trace_id.hex(),
                                        span_id=s.span_id.hex(),
                                        parent_id=s.parent_span_id.hex(),
                                        start_ns=s.start_time_unix_nano,
                                        end_ns=s.end_time_unix_nano,
                                        attributes=_attrs(s.attributes),
                                        events=tuple(
                                            (e.name, e.time_unix_nano, _attrs(e.attributes))
                                            for e in s.events
                                        ),
                                        status_code=s.status.code,
                                        service=service,
                                    )
                                )
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}/v1/traces"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def fail_next(self, n: int, status: int = 400, *, retry_after: str | None = None) -> None:
        with self._lock:
            self._failures = n
            self._status = status
            self._retry_after = retry_after

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.spans)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
