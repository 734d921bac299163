"""OpenTelemetry export of the audit log (the `otel` extra: the official SDK).

`OtelSink(store)` is a sink for `agentrt.export.Follower`: it turns the events
it is given into spans (`agentrt.run`, `agentrt.step`, `agentrt.model` per
attempt, `agentrt.approval` from request to decision, `agentrt.tool.late`) and
hands them to an SDK span exporter in its `flush()`, which the follower calls
before it moves its cursor. `agentrt export --otel` runs one beside the program.

The rules it keeps (docs/observability.md, docs/decisions/0065):

- deterministic ids: the trace id of a run is the first 16 bytes of
  sha256("agentrt/trace\\x00" + run_id); a span's id is the first 8 bytes of
  sha256("agentrt/span\\x00" + kind + "\\x00" + id), so a restarted exporter
  continues the same trace;
- a span is emitted once, when it is complete, built from the record: its
  opening events are read back from the database when the process that saw
  them is gone, so a follower killed and restarted from its cursor emits no
  span twice and leaves none without its end;
- every string attribute (model-written text above all) is cut at 1,024
  characters, and span names are constants, never text from the record;
- an export that fails raises from `flush()`: the page is not acknowledged and
  is delivered again, its spans rebuilt from the record; a collector's refusal that
  the same page would get again (an HTTP 4xx other than 408 and 429, as the OTLP/HTTP
  exporter `exporter_from_env` makes notes it) raises `OtelRefusedError`, on which
  `agentrt export --otel` stops rather than send that page for ever.

Configuration is the standard environment (`exporter_from_env`):
`OTEL_TRACES_EXPORTER` (`otlp`, the default, `console` or `none`),
`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`
(`http/protobuf`, the default, or `grpc`), and the SDK's own `OTEL_*`
variables for endpoints, headers, timeouts, `OTEL_SERVICE_NAME` and
`OTEL_RESOURCE_ATTRIBUTES`.

The mapping itself (`MAPPING`, `RunSpans`, `trace_id`, `span_id`) needs no
SDK; anything that exports does, and without the extra it raises
`OtelMissingError`, one sentence naming the extra.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import AgentrtError, ConfigError
from .._records import Event
from .._store import Store, open_existing
from ._refusal import refused_for_good
from ._spans import (
    MAPPING,
    RUN_CANCELLED,
    SPAN_APPROVAL,
    SPAN_MODEL,
    SPAN_MODEL_LATE,
    SPAN_RUN,
    SPAN_STEP,
    SPAN_TOOL_LATE,
    TEXT_LIMIT,
    RunSpans,
    SpanEventRecord,
    SpanRecord,
    span_id,
    spans_of,
    trace_id,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

EXTRA = "otel"
MISSING = (
    "the OpenTelemetry export needs the otel extra, which is not installed: "
    "pip install 'agentrt[otel]'"
)
SCOPE = "agentrt"
_log = logging.getLogger("agentrt.otel")
HISTORY_PAGE = 200
"""Events read back from the record at a time (a run's history after a restart, or what
another process committed): what a page's payloads take is what is held at once."""


class OtelMissingError(ConfigError):
    """The `otel` extra (the OpenTelemetry SDK) is not installed."""


class OtelConfigError(ConfigError):
    """An `OTEL_*` setting this exporter cannot honour."""


class OtelExportError(AgentrtError):
    """The span exporter did not take a batch: the page stays unacknowledged."""


class OtelRefusedError(OtelExportError):
    """The collector refused a batch with an HTTP status that the same batch would get
    again (a 4xx other than 408 and 429: `status`): sending the page again cannot help."""

    def __init__(self, status: int, spans: int) -> None:
        from http import HTTPStatus

        try:
            phrase = f" {HTTPStatus(status).phrase}"
        except ValueError:
            phrase = ""
        super().__init__(
            f"the collector refused {spans} spans for good (HTTP {status}{phrase}): the same "
            "page would be refused again"
        )
        self.status = status


def _require_sdk() -> None:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as e:
        raise OtelMissingError(MISSING) from e


def exporter_from_env(environ: Mapping[str, str] | None = None) -> SpanExporter | None:
    """The span exporter the standard `OTEL_*` variables ask for; None for `none`."""
    env = os.environ if environ is None else environ
    _require_sdk()
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    if not names:
        names = ["otlp"]
    if len(names) > 1:
        raise OtelConfigError(
            f"OTEL_TRACES_EXPORTER names {len(names)} exporters; agentrt export takes one "
            "(otlp, console or none)"
        )
    name = names[0].lower()
    if name == "none":
        return None
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(service_name=env.get("OTEL_SERVICE_NAME") or None)
    if name != "otlp":
        raise OtelConfigError(
            f"OTEL_TRACES_EXPORTER={names[0]!r} is not one agentrt export knows "
            "(otlp, console or none)"
        )
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "http/protobuf":
        try:
            from ._http import StatusNotingExporter
        except ImportError as e:
            raise OtelMissingError(MISSING) from e
        return StatusNotingExporter()
    if protocol == "grpc":
        try:
            grpc = importlib.import_module("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
        except ImportError as e:
            raise OtelMissingError(
                "OTLP over grpc needs the package opentelemetry-exporter-otlp-proto-grpc "
                "beside the otel extra, and it is not installed"
            ) from e
        made: SpanExporter = grpc.OTLPSpanExporter()
        return made
    raise OtelConfigError(
        f"the OTLP protocol {protocol!r} is not supported here (http/protobuf or grpc)"
    )


def resource_from_env() -> Resource:
    """The SDK's resource from `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` (default
    service name `agentrt`)."""
    _require_sdk()
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    base = Resource.create({})
    if str(base.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        base = base.merge(Resource({SERVICE_NAME: "agentrt"}))
    return base


def to_readable(span: SpanRecord, resource: Resource | None = None) -> ReadableSpan:
    """One `SpanRecord` as the SDK's `ReadableSpan`, ids and times as recorded."""
    _require_sdk()
    from opentelemetry.sdk.resources import Resource as _Resource
    from opentelemetry.sdk.trace import Event as SdkEvent
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    from .._store import RUNTIME_VERSION

    def context(span_bytes: bytes) -> SpanContext:
        return SpanContext(
            trace_id=int.from_bytes(span.trace_id, "big"),
            span_id=int.from_bytes(span_bytes, "big"),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )

    if span.error is not None:
        status = Status(StatusCode.ERROR, span.error)
    elif span.ok:
        status = Status(StatusCode.OK)
    else:
        status = Status(StatusCode.UNSET)
    return ReadableSpan(
        name=span.name,
        context=context(span.span_id),
        parent=None if span.parent_id is None else context(span.parent_id),
        resource=resource if resource is not None else _Resource.get_empty(),
        attributes=dict(span.attributes),
        events=[
            SdkEvent(e.name, dict(e.attributes), timestamp=e.time_ns, limit=None)
            for e in span.events
        ],
        kind=SpanKind.INTERNAL,
        status=status,
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=InstrumentationScope(SCOPE, RUNTIME_VERSION),
    )


class OtelSink:
    """A follower sink that exports the audit log as spans (see the module's doc).

    `store` is the database being followed (a path, opened read-only here, or an
    open `Store`); the sink reads a run's earlier events back from it when it
    meets a run it has no memory of (after a restart). `exporter` is an SDK
    `SpanExporter` (default: `exporter_from_env()`, shut down by `close()`; None
    exports nothing; one given is left open for its owner).
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        exporter: SpanExporter | str | None = "env",
        *,
        resource: Resource | None = None,
    ) -> None:
        _require_sdk()
        if isinstance(store, Store):
            self._store, self._own = store, False
        else:
            self._store, self._own = open_existing(store, read_only=True), True
        self._own_exporter = exporter == "env"
        self.exporter: SpanExporter | None = None
        try:
            if isinstance(exporter, str):
                if exporter != "env":
                    raise OtelConfigError(
                        f"exporter must be a SpanExporter, None or 'env', not {exporter!r}"
                    )
                self.exporter = exporter_from_env()
            else:
                self.exporter = exporter
            self.resource = resource if resource is not None else resource_from_env()
        except BaseException:
            self.close()
            raise
        self._runs: dict[str, RunSpans] = {}
        self._pending: list[SpanRecord] = []
        self.exported = 0

    def __call__(self, event: Event) -> None:
        builder = self._runs.get(event.run_id)
        if builder is None:
            builder = self._rebuild(event)
        self._pending += builder.add(event)
        if builder.finished:
            # Nothing more of it is kept; a late event reads the run back again.
            self._runs.pop(event.run_id, None)
        else:
            self._runs[event.run_id] = builder

    def _rebuild(self, event: Event) -> RunSpans:
        try:
            origin = self._store.get_run(event.run_id, cap=256).origin
        except AgentrtError:
            origin = ""
        # Fed a page at a time: the builder lets each step's events go once its span is
        # built, so a long run's history is never held whole.
        return RunSpans(event.run_id, origin, self._history(event))

    def _history(self, event: Event) -> Iterator[Event]:
        """The run's events before `event`, read a page at a time."""
        after = 0
        while True:
            page = self._store.list_events(event.run_id, after, HISTORY_PAGE)
            for e in page:
                if e.seq >= event.seq:
                    return
                yield e
            if len(page) < HISTORY_PAGE:
                return
            after = page[-1].seq

    def take(self) -> list[SpanRecord]:
        """The spans built since the last flush (they are not exported then)."""
        spans, self._pending = self._pending, []
        return spans

    def flush(self) -> None:
        """Export the spans built since the last flush; `OtelExportError` if refused."""
        spans = self.take()
        if not spans or self.exporter is None:
            self.exported += len(spans) if self.exporter is None else 0
            return
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self.exporter.export([to_readable(s, self.resource) for s in spans])
        except Exception as e:
            self._forget()
            raise OtelExportError(f"the span exporter raised: {e}") from e
        if result != SpanExportResult.SUCCESS:
            self._forget()
            status = getattr(self.exporter, "last_status", None)
            if isinstance(status, int) and refused_for_good(status):
                raise OtelRefusedError(status, len(spans))
            raise OtelExportError(
                f"the span exporter did not take {len(spans)} spans; the page will be "
                "delivered again"
            )
        self.exported += len(spans)

    def _forget(self) -> None:
        # The page goes unacknowledged and comes again: rebuild from the record then.
        self._runs.clear()
        self._pending.clear()

    def close(self) -> None:
        exporter = getattr(self, "exporter", None)
        if getattr(self, "_own_exporter", False) and exporter is not None:
            exporter.shutdown()
        if self._own:
            self._store.close()

    def __enter__(self) -> OtelSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OtelObserver(OtelSink):
    """The same spans from inside the program: `Driver(observer=OtelObserver(path))`.

    A driver's observer sees the events its own process commits, after commit
    and in commit order; it is not told of those written elsewhere (a person
    approving from `agentrt approve`, another process taking a run over). So at
    each event it first reads back from the database whatever of that run it
    has not seen, then hands the spans completed to its export thread (no
    `flush()` comes to an observer). It builds exactly the spans the follower
    builds, with the same ids and content; what it sees last is what the
    follower sees first.

    The exporter is called only on the observer's own daemon thread, never on
    the caller's (the Driver's or Gate's event loop), so a collector that hangs
    cannot stall a run, its heartbeat or its timeouts. The spans waiting for
    that thread are bounded by `max_queue`: beyond it new spans are dropped and
    counted in `dropped`. An export that fails is logged and its spans counted
    in `failed`, not sent again: the follower (`agentrt export --otel`) is the
    path with a cursor. `close()` waits at most `close_timeout` seconds for the
    queue to drain; what is still queued then is counted in `dropped`.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        exporter: SpanExporter | str | None = "env",
        *,
        resource: Resource | None = None,
        max_queue: int = 2048,
        close_timeout: float = 5.0,
    ) -> None:
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise ConfigError(f"max_queue must be a positive int, not {max_queue!r}")
        if not close_timeout >= 0:
            raise ConfigError(f"close_timeout must be a number >= 0, not {close_timeout!r}")
        super().__init__(store, exporter, resource=resource)
        self._lock = threading.Lock()
        self.max_queue = max_queue
        self.close_timeout = float(close_timeout)
        self.dropped = 0
        self.failed = 0
        self._queue: deque[SpanRecord] = deque()
        self._busy = 0  # spans taken by the export thread and not yet settled
        self._closing = False
        self._dropping = False
        self._ready = threading.Condition(threading.Lock())
        self._worker = threading.Thread(
            target=self._export_loop, name="agentrt-otel-export", daemon=True
        )
        self._worker.start()

    def __call__(self, event: Event) -> None:
        with self._lock:
            builder = self._runs.get(event.run_id)
            if builder is not None:
                # Catch up on what was committed elsewhere since (read from the record).
                after = builder.last_seq
                while True:
                    page = self._store.list_events(event.run_id, after, HISTORY_PAGE)
                    missed = [e for e in page if e.seq < event.seq]
                    for e in missed:
                        super().__call__(e)
                    if len(missed) < HISTORY_PAGE:
                        break
                    after = missed[-1].seq
            super().__call__(event)
            self._enqueue(self.take())

    def _enqueue(self, spans: list[SpanRecord]) -> None:
        if not spans:
            return
        with self._ready:
            if self.exporter is None or self._closing:
                if self.exporter is None:
                    self.exported += len(spans)
                else:
                    self.dropped += len(spans)
                return
            room = self.max_queue - len(self._queue)
            kept, lost = spans[: max(room, 0)], len(spans) - max(room, 0)
            self._queue.extend(kept)
            if lost > 0:
                self.dropped += lost
                if not self._dropping:
                    self._dropping = True
                    _log.warning(
                        "the OpenTelemetry export queue is full (%d spans): spans are "
                        "dropped until the exporter catches up (counted in .dropped)",
                        self.max_queue,
                    )
            self._ready.notify_all()

    def _export_loop(self) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        while True:
            with self._ready:
                while not self._queue and not self._closing:
                    self._ready.wait()
                if not self._queue:
                    return
                batch = list(self._queue)
                self._queue.clear()
                self._busy = len(batch)
            ok = False
            try:
                exporter = self.exporter
                assert exporter is not None
                result = exporter.export([to_readable(s, self.resource) for s in batch])
                ok = result == SpanExportResult.SUCCESS
                if not ok:
                    _log.warning("the span exporter did not take %d spans", len(batch))
            except Exception:
                _log.exception("the span exporter raised on %d spans", len(batch))
            with self._ready:
                self._busy = 0
                if ok:
                    self.exported += len(batch)
                    self._dropping = False
                else:
                    self.failed += len(batch)
                self._ready.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        """Wait, at most `timeout` seconds (default `close_timeout`), until every span
        handed over so far has been exported, refused or dropped."""
        limit = self.close_timeout if timeout is None else timeout
        with self._ready:
            self._ready.wait_for(lambda: not self._queue and not self._busy, timeout=limit)

    def close(self) -> None:
        ready = getattr(self, "_ready", None)
        if ready is not None:
            with ready:
                self._closing = True
                ready.notify_all()
            self._worker.join(self.close_timeout)
            with ready:
                if self._queue:
                    self.dropped += len(self._queue)
                    _log.warning(
                        "closed with %d spans not exported within %.1f s; they are dropped",
                        len(self._queue),
                        self.close_timeout,
                    )
                    self._queue.clear()
        super().close()


def export_spans(
    spans: Sequence[SpanRecord], exporter: SpanExporter, resource: Resource | None = None
) -> Any:
    """Hand `spans` to `exporter` as the SDK's spans; returns the exporter's result."""
    return exporter.export([to_readable(s, resource) for s in spans])


__all__ = [
    "EXTRA",
    "MAPPING",
    "RUN_CANCELLED",
    "SPAN_APPROVAL",
    "SPAN_MODEL",
    "SPAN_MODEL_LATE",
    "SPAN_RUN",
    "SPAN_STEP",
    "SPAN_TOOL_LATE",
    "TEXT_LIMIT",
    "OtelConfigError",
    "OtelExportError",
    "OtelMissingError",
    "OtelObserver",
    "OtelRefusedError",
    "OtelSink",
    "RunSpans",
    "SpanEventRecord",
    "SpanRecord",
    "export_spans",
    "exporter_from_env",
    "resource_from_env",
    "span_id",
    "spans_of",
    "to_readable",
    "trace_id",
]
