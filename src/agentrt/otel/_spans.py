"""The audit log as spans: which event opens, ends or annotates which span (no SDK here).

This module is pure: it turns the events of one run into `SpanRecord`s, plain
frozen values, and never imports OpenTelemetry. The sink (`agentrt.otel`) hands
them to the SDK.

The rule that makes a restarted exporter safe (docs/decisions/0065): a span is
built only when the event that completes it passes, from the run's events up
to that event, which are all in the database. Nothing about a span lives only
in the exporter's memory, so a follower killed and restarted from its
persisted cursor builds exactly the spans it had not yet emitted, with the same
ids (derived from the record: `trace_id`, `span_id`) and the same content.

Which event completes which span:

- `agentrt.model` (one per attempt): `model.completed` or `model.failed` of its
  `call_id`, from its `model.dispatched`; a late reply's extra charge
  (`model.completed` with status `late`) is a zero-length `agentrt.model.late`;
- `agentrt.approval`: `approval.decided`, from `approval.requested`; one still
  pending when the run ends (a cancel, an expiry) ends with `run.finished`;
- `agentrt.step`: the next `step.started` of the run, or `run.finished`;
- `agentrt.run`: `run.finished`, from `run.created`;
- `agentrt.tool.late`: a `step.tool_finished` marked `late`, from the step's
  `step.tool_started`.

Every string attribute is cut at `TEXT_LIMIT` characters; span names are the
constants above, never text from the record.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import _events as ev
from .._canonical import to_text
from .._records import Event

TEXT_LIMIT = 1024
"""Every string attribute (model-written text above all) is cut to this many characters."""

SPAN_RUN = "agentrt.run"
SPAN_STEP = "agentrt.step"
SPAN_MODEL = "agentrt.model"
SPAN_MODEL_LATE = "agentrt.model.late"
SPAN_APPROVAL = "agentrt.approval"
SPAN_TOOL_LATE = "agentrt.tool.late"

RUN_CANCELLED = "run.cancelled"
"""A span event on the run span of a run that ended CANCELLED (the log says `run.finished`)."""

# What each event type of the catalogue becomes. A test walks `_events.ALL` against it.
RUN_EVENT = "run span event"
STEP_EVENT = "step span event"
MAPPING: Mapping[str, str] = {
    ev.RUN_CREATED: f"starts {SPAN_RUN}",
    ev.RUN_STARTED: RUN_EVENT,
    ev.RUN_RESUMED: RUN_EVENT,
    ev.RUN_FINISHED: f"ends {SPAN_RUN} (and the last {SPAN_STEP}, and any open {SPAN_APPROVAL})",
    ev.STEP_STARTED: f"starts {SPAN_STEP} (and ends the one before)",
    ev.STEP_DECIDED: STEP_EVENT,
    ev.STEP_POLICY: STEP_EVENT,
    ev.STEP_TOOL_STARTED: STEP_EVENT,
    ev.STEP_TOOL_FINISHED: f"{STEP_EVENT}; when late, {SPAN_TOOL_LATE}",
    ev.STEP_FAILED: STEP_EVENT,
    ev.STEP_INTERRUPTED: STEP_EVENT,
    ev.STEP_RECONCILED: STEP_EVENT,
    ev.APPROVAL_REQUESTED: f"{STEP_EVENT}; starts {SPAN_APPROVAL}",
    ev.APPROVAL_DECIDED: f"ends {SPAN_APPROVAL}",
    ev.LIMIT_EXCEEDED: RUN_EVENT,
    ev.LOOP_DETECTED: RUN_EVENT,
    ev.LEASE_TAKEN_OVER: RUN_EVENT,
    ev.MODEL_DISPATCHED: f"starts {SPAN_MODEL}",
    ev.MODEL_COMPLETED: f"ends {SPAN_MODEL}; a late charge is {SPAN_MODEL_LATE}",
    ev.MODEL_FAILED: f"ends {SPAN_MODEL}",
}

# Step-level events that are not step span events: they are spans of their own.
_OWN_SPANS = {ev.MODEL_DISPATCHED, ev.MODEL_COMPLETED, ev.MODEL_FAILED, ev.APPROVAL_DECIDED}

AttributeValue = str | int | float | bool


def trace_id(run_id: str) -> bytes:
    """The run's trace id: the first 16 bytes of sha256("agentrt/trace\\x00" + run_id)."""
    return hashlib.sha256(("agentrt/trace\x00" + run_id).encode("utf-8")).digest()[:16]


def span_id(kind: str, ident: str) -> bytes:
    """A span's id: the first 8 bytes of sha256("agentrt/span\\x00" + kind + "\\x00" + id)."""
    return hashlib.sha256(f"agentrt/span\x00{kind}\x00{ident}".encode()).digest()[:8]


@dataclass(frozen=True)
class SpanEventRecord:
    """One span event as built from an audit event: its name, time and attributes."""

    name: str
    time_ns: int
    attributes: Mapping[str, AttributeValue]


@dataclass(frozen=True)
class SpanRecord:
    """One complete span, ready for an exporter: ids, times (ns since the epoch), content."""

    name: str
    trace_id: bytes
    span_id: bytes
    parent_id: bytes | None
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttributeValue]
    events: tuple[SpanEventRecord, ...] = ()
    error: str | None = None  # None: no error; text: the span's status is ERROR with it
    ok: bool = False  # the span's status is OK (a run that completed)
    seq: int = 0  # the seq of the event that completed it


def cut(text: str) -> str:
    """`text` cut to `TEXT_LIMIT` characters."""
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT]


_INT64 = range(-(2**63), 2**63)


def attribute(value: Any) -> AttributeValue:
    """A payload value as one attribute: scalars as they are (text cut), the rest as the
    record's own JSON text, number literals as written (`12.50`, `1e400`). A number an
    attribute cannot carry (an integer past 64 bits, a literal past a double's range) is
    its literal as text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value) if value in _INT64 else cut(_json_text(value))
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else cut(_json_text(value))
    if isinstance(value, str):
        return cut(value)
    if value is None:
        return ""
    return cut(_json_text(value))


def _json_text(value: Any) -> str:
    try:
        return to_text(value)
    except Exception:  # a payload read back from the record is JSON: kept for any other caller
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _ns(at: datetime | None, fallback: int) -> int:
    if at is None:
        return fallback
    return int(at.timestamp()) * 1_000_000_000 + at.microsecond * 1000


def _payload(event: Event) -> dict[str, Any]:
    return event.payload if isinstance(event.payload, dict) else {}


def event_attributes(event: Event) -> dict[str, AttributeValue]:
    """A span event's attributes: `agentrt.seq`, then each payload field under `agentrt.`."""
    out: dict[str, AttributeValue] = {"agentrt.seq": event.seq}
    for key, value in _payload(event).items():
        out[f"agentrt.{key}"] = attribute(value)
    if event.decode_error:
        out["agentrt.decode_error"] = cut(event.decode_error)
    return out


def _span_event(event: Event, time_ns: int, name: str | None = None) -> SpanEventRecord:
    return SpanEventRecord(name or event.type, time_ns, event_attributes(event))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class RunSpans:
    """Builds the spans of one run as its events pass, in commit order.

    `history` holds the run's events before the one being added (rebuilt from
    the database after a restart). `add(event)` returns the spans `event`
    completes; an event at or before the last one seen adds nothing.

    The work per event is bounded: the events are indexed as they pass (by
    step, call and approval), and a step's events are let go once its span is
    built, so a run of many steps costs each span only its own events.
    """

    def __init__(self, run_id: str, origin: str = "", history: Iterable[Event] = ()) -> None:
        self.run_id = run_id
        self.origin = origin
        self.trace = trace_id(run_id)
        self.finished = False
        self.last_seq = 0
        self._last_ns = 0
        self._times: dict[int, int] = {}
        self._created: Event | None = None
        self._last_step: Event | None = None
        self._by_step: dict[str, list[Event]] = {}
        self._dispatched: dict[str, Event] = {}
        self._requested: dict[str, Event] = {}
        self._tool_started: dict[str, Event] = {}
        self._run_events: list[Event] = []
        self._calls = self._inputs = self._outputs = self._cost = 0
        for event in history:
            if event.seq > self.last_seq:
                self._index(event)

    def _time(self, event: Event) -> int:
        # An event whose time did not decode takes the time of the last one before it that did.
        found = self._times.get(event.seq)
        if found is not None:
            return found
        return _ns(event.at, self._last_ns)

    def _index(self, event: Event) -> None:
        """Take `event` into the run's state (after the spans it completes were built)."""
        self._times[event.seq] = self._last_ns = _ns(event.at, self._last_ns)
        self.last_seq = event.seq
        payload = _payload(event)
        t = event.type
        kept = True  # whether a later span may need this event (and so its time)
        if t == ev.RUN_CREATED:
            self._created = event
        elif t == ev.RUN_FINISHED:
            self.finished = True
        elif t == ev.STEP_STARTED:
            if self._last_step is not None:
                self._forget_step(self._last_step.step_id)
            self._last_step = event
        elif t == ev.MODEL_DISPATCHED:
            self._calls += 1
            self._dispatched[str(payload.get("call_id", ""))] = event
        elif t in (ev.MODEL_COMPLETED, ev.MODEL_FAILED):
            usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
            assert isinstance(usage, dict)
            self._inputs += _int(usage.get("input_tokens"))
            self._outputs += _int(usage.get("output_tokens"))
            self._cost += _int(payload.get("cost_micros"))
            dispatched = self._dispatched.pop(str(payload.get("call_id", "")), None)
            if dispatched is not None:
                self._times.pop(dispatched.seq, None)
            kept = False
        elif t == ev.APPROVAL_REQUESTED:
            self._requested[str(payload.get("approval_id", ""))] = event
        elif t == ev.APPROVAL_DECIDED:
            self._requested.pop(str(payload.get("approval_id", "")), None)
            kept = False
        elif t == ev.STEP_TOOL_STARTED:
            self._tool_started[event.step_id] = event
        if t == ev.STEP_TOOL_FINISHED and payload.get("late") is True:
            kept = False
        elif not event.step_id:
            if t not in (ev.RUN_CREATED, ev.RUN_FINISHED) and t not in _OWN_SPANS:
                self._run_events.append(event)
        elif t not in _OWN_SPANS:
            self._by_step.setdefault(event.step_id, []).append(event)
        if not kept:
            self._times.pop(event.seq, None)

    def _forget_step(self, step_id: str) -> None:
        # Its span is built. A late tool result can only follow the run's last step
        # (a cancel ends the run), so nothing of an earlier step is kept.
        for e in self._by_step.pop(step_id, []):
            self._times.pop(e.seq, None)
        self._tool_started.pop(step_id, None)

    def add(self, event: Event) -> list[SpanRecord]:
        if event.seq <= self.last_seq:
            return []
        payload = _payload(event)
        t = event.type
        # The event's own time, as `_index` will record it, for the spans it ends.
        self._times[event.seq] = _ns(event.at, self._last_ns)
        spans: list[SpanRecord] = []
        if t in (ev.MODEL_COMPLETED, ev.MODEL_FAILED):
            spans.append(self._model(event, payload))
        elif t == ev.APPROVAL_DECIDED:
            approval_id = str(payload.get("approval_id", ""))
            spans.append(self._approval(approval_id, event, payload))
        elif t == ev.STEP_TOOL_FINISHED and payload.get("late") is True:
            spans.append(self._tool_late(event))
        elif t == ev.STEP_STARTED:
            if self._last_step is not None:
                spans.append(self._step(self._last_step, event))
        elif t == ev.RUN_FINISHED:
            if self._last_step is not None:
                spans.append(self._step(self._last_step, event))
            spans += self._open_approvals(event)
            spans.append(self._run(event, payload))
        self._index(event)
        return spans

    # -- helpers ------------------------------------------------------------

    def _parent(self, step_id: str) -> bytes:
        return span_id("step", step_id) if step_id else span_id("run", self.run_id)

    def _model(self, event: Event, payload: dict[str, Any]) -> SpanRecord:
        call_id = str(payload.get("call_id", ""))
        end = self._time(event)
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        attrs: dict[str, AttributeValue] = {
            "agentrt.run.id": self.run_id,
            "agentrt.model.call_id": call_id,
            "agentrt.model.attempt": _int(payload.get("attempt")),
            "agentrt.model.status": attribute(payload.get("status", "")),
            "agentrt.model.latency_ms": _int(payload.get("latency_ms")),
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": attribute(payload.get("model", "")),
            "agentrt.usage.input_tokens": _int(usage.get("input_tokens")),
            "agentrt.usage.output_tokens": _int(usage.get("output_tokens")),
            "gen_ai.usage.input_tokens": _int(usage.get("input_tokens")),
            "gen_ai.usage.output_tokens": _int(usage.get("output_tokens")),
        }
        if _int(usage.get("cached_input_tokens")):
            attrs["agentrt.usage.cached_input_tokens"] = _int(usage.get("cached_input_tokens"))
        cost = payload.get("cost_micros")
        if isinstance(cost, int) and not isinstance(cost, bool):
            attrs["agentrt.cost_micros"] = cost
        else:
            attrs["agentrt.model.unpriced"] = True
        error = str(payload.get("error", "") or "")
        if error:
            attrs["agentrt.model.error"] = cut(error)
        if event.step_id:
            attrs["agentrt.step.id"] = event.step_id
        if payload.get("status") == "late":
            return SpanRecord(
                name=SPAN_MODEL_LATE,
                trace_id=self.trace,
                span_id=span_id("model.late", f"{call_id}@{event.seq}"),
                parent_id=self._parent(event.step_id),
                start_ns=end,
                end_ns=end,
                attributes=attrs,
                seq=event.seq,
            )
        dispatched = self._dispatched.get(call_id)
        start = end if dispatched is None else self._time(dispatched)
        step_id = event.step_id or (dispatched.step_id if dispatched is not None else "")
        failed = event.type == ev.MODEL_FAILED
        return SpanRecord(
            name=SPAN_MODEL,
            trace_id=self.trace,
            span_id=span_id("model", call_id),
            parent_id=self._parent(step_id),
            start_ns=start,
            end_ns=max(start, end),
            attributes=attrs,
            error=(cut(error) or str(payload.get("status", "failed"))) if failed else None,
            seq=event.seq,
        )

    def _approval_span(
        self,
        requested: Event | None,
        approval_id: str,
        end_event: Event,
        status: str,
        extra: Mapping[str, AttributeValue],
    ) -> SpanRecord:
        end = self._time(end_event)
        start = end if requested is None else self._time(requested)
        asked = {} if requested is None else _payload(requested)
        step_id = requested.step_id if requested is not None else end_event.step_id
        attrs: dict[str, AttributeValue] = {
            "agentrt.run.id": self.run_id,
            "agentrt.step.id": step_id,
            "agentrt.approval.id": approval_id,
            "agentrt.approval.kind": attribute(asked.get("kind", "")),
            "agentrt.approval.hash": attribute(asked.get("hash", "")),
            "agentrt.approval.reason": attribute(asked.get("reason", "")),
            "agentrt.approval.status": status,
            **extra,
        }
        return SpanRecord(
            name=SPAN_APPROVAL,
            trace_id=self.trace,
            span_id=span_id("approval", approval_id),
            parent_id=self._parent(step_id),
            start_ns=start,
            end_ns=max(start, end),
            attributes=attrs,
            seq=end_event.seq,
        )

    def _approval(self, approval_id: str, event: Event, payload: dict[str, Any]) -> SpanRecord:
        extra = {
            "agentrt.approval.by": attribute(payload.get("by", "")),
            "agentrt.approval.note": attribute(payload.get("note", "")),
        }
        status = str(attribute(payload.get("status", "")))
        requested = self._requested.get(approval_id)
        return self._approval_span(requested, approval_id, event, status, extra)

    def _open_approvals(self, finished: Event) -> list[SpanRecord]:
        # Closed undecided: the run ended (a cancel, an expiry) while they waited.
        return [
            self._approval_span(e, approval_id, finished, "closed", {})
            for approval_id, e in self._requested.items()
        ]

    def _tool_late(self, event: Event) -> SpanRecord:
        started = self._tool_started.get(event.step_id)
        end = self._time(event)
        start = end if started is None else self._time(started)
        payload = _payload(event)
        attrs: dict[str, AttributeValue] = {
            "agentrt.run.id": self.run_id,
            "agentrt.step.id": event.step_id,
            "agentrt.tool.name": attribute(payload.get("tool", "")),
            "agentrt.tool.late": True,
            "agentrt.tool.duration_ms": _int(payload.get("duration_ms")),
        }
        error = payload.get("error")
        if error:
            attrs["agentrt.tool.error"] = attribute(error)
        else:
            attrs["agentrt.tool.summary"] = attribute(payload.get("summary", ""))
        return SpanRecord(
            name=SPAN_TOOL_LATE,
            trace_id=self.trace,
            span_id=span_id("tool.late", event.step_id),
            parent_id=self._parent(event.step_id),
            start_ns=start,
            end_ns=max(start, end),
            attributes=attrs,
            error=cut(str(error)) if error else None,
            seq=event.seq,
        )

    def _step(self, started: Event, closer: Event) -> SpanRecord:
        step_id = started.step_id
        own = self._by_step.get(step_id, [])
        start = self._time(started)
        attrs: dict[str, AttributeValue] = {
            "agentrt.run.id": self.run_id,
            "agentrt.step.id": step_id,
            "agentrt.step.index": _int(_payload(started).get("index")),
        }
        error: str | None = None
        outcome = "ended_with_run" if closer.type == ev.RUN_FINISHED else "done"
        end = start
        span_events = []
        settled = False
        for e in own:
            p = _payload(e)
            if e.type != ev.STEP_STARTED:
                span_events.append(_span_event(e, self._time(e)))
            end = max(end, self._time(e))
            if e.type == ev.STEP_DECIDED:
                attrs["agentrt.decision.kind"] = attribute(p.get("kind", ""))
                attrs["agentrt.decision.origin"] = attribute(p.get("origin", "") or "model")
                if p.get("tool"):
                    attrs["agentrt.tool.name"] = attribute(p.get("tool"))
            elif e.type == ev.STEP_POLICY:
                decision = p.get("decision") if isinstance(p.get("decision"), dict) else {}
                assert isinstance(decision, dict)
                attrs["agentrt.policy.outcome"] = attribute(decision.get("outcome", ""))
                attrs["agentrt.policy_id"] = attribute(p.get("policy_id", ""))
                attrs["agentrt.spec_hash"] = attribute(p.get("spec_hash", ""))
            elif e.type == ev.STEP_TOOL_FINISHED:
                settled = True
                outcome = "failed" if p.get("error") else "done"
            elif e.type == ev.STEP_FAILED:
                settled = True
                outcome = "failed"
                content = p.get("content")
                why = content.get("error", "") if isinstance(content, dict) else ""
                error = cut(str(why or p.get("summary", "") or p.get("kind", "failed")))
            elif e.type == ev.STEP_INTERRUPTED:
                settled = True
                outcome = "interrupted"
                error = "interrupted: the outcome is unknown"
        if not settled and closer.type == ev.RUN_FINISHED:
            # Settled with the run (a `complete` or `fail` decision, a cancel): it ends then.
            end = max(end, self._time(closer))
        attrs["agentrt.step.outcome"] = outcome
        return SpanRecord(
            name=SPAN_STEP,
            trace_id=self.trace,
            span_id=span_id("step", step_id),
            parent_id=span_id("run", self.run_id),
            start_ns=start,
            end_ns=end,
            attributes=attrs,
            events=tuple(span_events),
            error=error,
            seq=closer.seq,
        )

    def _run(self, finished: Event, payload: dict[str, Any]) -> SpanRecord:
        created = self._created
        start = self._time(created) if created is not None else self._time(finished)
        goal = _payload(created).get("goal", "") if created is not None else ""
        span_events = [_span_event(e, self._time(e)) for e in self._run_events]
        status = str(payload.get("status", ""))
        if status == "CANCELLED":
            span_events.append(_span_event(finished, self._time(finished), RUN_CANCELLED))
        attrs: dict[str, AttributeValue] = {
            "agentrt.run.id": self.run_id,
            "agentrt.run.origin": self.origin,
            "agentrt.run.goal": attribute(goal),
            "agentrt.run.status": status,
            "agentrt.run.reason": attribute(payload.get("reason", "")),
            "agentrt.run.detail": attribute(payload.get("detail", "")),
            "agentrt.run.steps": _int(payload.get("steps")),
            "agentrt.run.model_calls": self._calls,
            "agentrt.usage.input_tokens": self._inputs,
            "agentrt.usage.output_tokens": self._outputs,
            "agentrt.cost_micros": self._cost,
        }
        end = self._time(finished)
        return SpanRecord(
            name=SPAN_RUN,
            trace_id=self.trace,
            span_id=span_id("run", self.run_id),
            parent_id=None,
            start_ns=start,
            end_ns=max(start, end),
            attributes=attrs,
            events=tuple(span_events),
            error=None
            if status in ("COMPLETED", "CANCELLED")
            else cut(f"{payload.get('reason', '')}: {payload.get('detail', '')}".strip(": ")),
            ok=status == "COMPLETED",
            seq=finished.seq,
        )


def spans_of(events: Sequence[Event], origin: str = "") -> list[SpanRecord]:
    """Every span the events of one run complete, in the order they complete."""
    if not events:
        return []
    builder = RunSpans(events[0].run_id, origin)
    out: list[SpanRecord] = []
    for event in events:
        out += builder.add(event)
    return out


__all__ = [
    "MAPPING",
    "RUN_CANCELLED",
    "SPAN_APPROVAL",
    "SPAN_MODEL",
    "SPAN_MODEL_LATE",
    "SPAN_RUN",
    "SPAN_STEP",
    "SPAN_TOOL_LATE",
    "TEXT_LIMIT",
    "RunSpans",
    "SpanEventRecord",
    "SpanRecord",
    "attribute",
    "cut",
    "event_attributes",
    "span_id",
    "spans_of",
    "trace_id",
]
