"""agentrt.otel: the audit log as OpenTelemetry spans (issue 22 part 1, decision 0065).

Spans are checked with the SDK's in-memory exporter and, end to end, against a
local OTLP/HTTP receiver that decodes the protobuf (tests/support/otlp.py),
including an `agentrt export --otel` process SIGKILLed mid-run and restarted.

Every test that reads a record in this process takes `database` and runs on SQLite and
on PostgreSQL (a cursor there names one head per chain partition). On SQLite only: the
missing extra's one sentence and the command's usage errors (no record read); the live
observer's queue, threads and timeouts (the exporter's, not the record's); and, for their
cost, the tests that run `agentrt export --otel` processes (each says so).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import ConsoleSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import agentrt
from agentrt import Decision, SideEffect
from agentrt._events import ALL
from agentrt._records import Event
from agentrt.export import Follower, load_cursor
from agentrt.otel import (
    MAPPING,
    SPAN_APPROVAL,
    SPAN_MODEL,
    SPAN_MODEL_LATE,
    SPAN_RUN,
    SPAN_STEP,
    SPAN_TOOL_LATE,
    OtelConfigError,
    OtelExportError,
    OtelSink,
    exporter_from_env,
    span_id,
    spans_of,
    trace_id,
)
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support import models
from support.database import on_postgres
from support.otlp import Receiver
from support.rows import execute

ROOT = Path(__file__).resolve().parent.parent
SPAN_NAMES = {SPAN_RUN, SPAN_STEP, SPAN_MODEL, SPAN_MODEL_LATE, SPAN_APPROVAL, SPAN_TOOL_LATE}


def export_all(db: Path | str) -> list[Any]:
    exporter = InMemorySpanExporter()
    with OtelSink(db, exporter) as sink, Follower(db) as follower:
        follower.run(sink, follow=False)
    return list(exporter.get_finished_spans())


def hexid(n: int, width: int) -> str:
    return format(n, f"0{width}x")


def lookup_then_push(store: agentrt.Store, goal: str = "look, then push") -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent(
            [
                Decision.tool_call("lookup", {"x": 1}),
                Decision.tool_call("push", {"x": 2}),
                Decision.complete("pushed"),
            ]
        ),
        policy=agentrt.default_policy(),
        tools=[
            RecordingTool("lookup", SideEffect.READ_ONLY),
            RecordingTool("push", SideEffect.REMOTE_MUTATION),
        ],
        now=FakeClock(),
        new_id=Ids("a"),
    )


# -- ids -----------------------------------------------------------------------------


def test_trace_and_span_ids_are_the_first_bytes_of_the_documented_sha256() -> None:
    run_id = "a0000000000000000000000000000001"
    assert trace_id(run_id) == hashlib.sha256(b"agentrt/trace\x00" + run_id.encode()).digest()[:16]
    assert span_id("step", "s1") == hashlib.sha256(b"agentrt/span\x00step\x00s1").digest()[:8]
    # Pinned values: a change of the derivation breaks every trace already exported.
    assert trace_id("r").hex() == hashlib.sha256(b"agentrt/trace\x00r").hexdigest()[:32]
    assert span_id("run", "r") != span_id("step", "r")


def test_exported_spans_carry_the_deterministic_ids_and_parents(database: str) -> None:
    store = agentrt.open_store(database)
    try:
        driver = lookup_then_push(store)
        run = driver.start_sync("look, then push")
        (approval,) = store.pending_approvals(run.id)
        driver.approve(run.id, approval.id, by="alice")
        run = driver.resume_sync(run.id)
        steps = store.list_steps(run.id)
    finally:
        store.close()
    assert run.status == "COMPLETED"
    spans = export_all(database)
    assert [s.name for s in spans] == [SPAN_STEP, SPAN_APPROVAL, SPAN_STEP, SPAN_STEP, SPAN_RUN]
    tid = trace_id(run.id).hex()
    assert {hexid(s.context.trace_id, 32) for s in spans} == {tid}
    by_name = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    (run_span,) = by_name[SPAN_RUN]
    assert hexid(run_span.context.span_id, 16) == span_id("run", run.id).hex()
    assert run_span.parent is None
    step_ids = [hexid(s.context.span_id, 16) for s in by_name[SPAN_STEP]]
    assert step_ids == [span_id("step", st.id).hex() for st in steps]
    for s in by_name[SPAN_STEP]:
        assert hexid(s.parent.span_id, 16) == span_id("run", run.id).hex()
    (approval_span,) = by_name[SPAN_APPROVAL]
    assert hexid(approval_span.context.span_id, 16) == span_id("approval", approval.id).hex()
    assert hexid(approval_span.parent.span_id, 16) == span_id("step", steps[1].id).hex()
    assert approval_span.attributes["agentrt.approval.status"] == "approved"
    assert approval_span.attributes["agentrt.approval.by"] == "alice"
    assert approval_span.attributes["agentrt.approval.hash"] == approval.hash
    # The run span: OK, its run-level events as span events, its origin.
    assert run_span.status.status_code == StatusCode.OK
    assert [e.name for e in run_span.events] == ["run.started", "run.resumed"]
    assert run_span.attributes["agentrt.run.origin"] == "driver"
    assert run_span.attributes["agentrt.run.status"] == "COMPLETED"
    # The push step: its step-level events as span events, its policy and spec hash.
    push = by_name[SPAN_STEP][1]
    assert [e.name for e in push.events] == [
        "step.decided",
        "step.policy",
        "approval.requested",
        "step.policy",
        "step.tool_started",
        "step.tool_finished",
    ]
    assert push.attributes["agentrt.policy_id"] == steps[1].policy_id
    assert push.attributes["agentrt.spec_hash"] == steps[1].spec_hash
    assert push.attributes["agentrt.decision.origin"] == "model"
    assert push.attributes["agentrt.tool.name"] == "push"
    assert push.start_time <= approval_span.start_time <= approval_span.end_time <= push.end_time


def test_model_attempts_are_spans_with_genai_token_names_and_cost(database: str) -> None:
    store = agentrt.open_store(database)
    try:
        run = models.drive(
            store,
            models.FakeModel(models.reply(usage=agentrt.Usage(100, 20, 0)), models.reply()),
            agent=models.model_agent(calls=2),
        )
        calls = models.calls(store, run.id)
    finally:
        store.close()
    spans = export_all(database)
    model_spans = [s for s in spans if s.name == SPAN_MODEL]
    assert len(model_spans) == 2 == len(calls)
    first = model_spans[0]
    assert first.attributes["gen_ai.usage.input_tokens"] == 100
    assert first.attributes["gen_ai.usage.output_tokens"] == 20
    assert first.attributes["agentrt.usage.input_tokens"] == 100
    assert first.attributes["gen_ai.request.model"] == "fake:model"
    assert isinstance(first.attributes["agentrt.cost_micros"], int)
    (step,) = [s for s in spans if s.name == SPAN_STEP]
    assert all(s.parent.span_id == step.context.span_id for s in model_spans)
    (run_span,) = [s for s in spans if s.name == SPAN_RUN]
    assert run_span.attributes["agentrt.run.model_calls"] == 2
    assert run_span.attributes["agentrt.usage.input_tokens"] == 110
    assert run_span.attributes["agentrt.cost_micros"] == sum(
        s.attributes["agentrt.cost_micros"] for s in model_spans
    )


# -- every event type of the catalogue --------------------------------------------


def catalogue_run() -> list[Event]:
    """One run's events, one or more of every type in the catalogue, with the payloads the
    named writes give them (src/agentrt/_store/writes.py)."""
    t0 = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
    rows: list[tuple[str, str, dict[str, Any]]] = [
        ("", "run.created", {"goal": "g", "limits": {}, "tools": ["h1"]}),
        ("", "run.started", {}),
        ("s1", "step.started", {"index": 0}),
        ("s1", "model.dispatched", {"call_id": "m1", "attempt": 1, "model": "m"}),
        (
            "s1",
            "model.failed",
            {
                "call_id": "m1",
                "attempt": 1,
                "status": "error",
                "model": "m",
                "usage": {"input_tokens": 3, "output_tokens": 0},
                "cost_micros": 5,
                "latency_ms": 2,
                "error": "503",
            },
        ),
        ("s1", "model.dispatched", {"call_id": "m2", "attempt": 2, "model": "m"}),
        (
            "s1",
            "model.completed",
            {
                "call_id": "m2",
                "attempt": 2,
                "status": "ok",
                "model": "m",
                "usage": {"input_tokens": 7, "output_tokens": 4},
                "cost_micros": 9,
                "latency_ms": 2,
                "error": "",
            },
        ),
        ("s1", "step.decided", {"kind": "tool_call", "tool": "push", "args": {"x": 1}}),
        (
            "s1",
            "step.policy",
            {
                "decision": {"outcome": "require_approval"},
                "policy_id": "p/1",
                "spec_hash": "h1",
                "view": {},
            },
        ),
        (
            "s1",
            "approval.requested",
            {
                "approval_id": "ap1",
                "kind": "remote_mutation",
                "reason": "r",
                "capability": None,
                "presentation": None,
                "hash": "hh",
            },
        ),
        (
            "s1",
            "approval.decided",
            {"approval_id": "ap1", "status": "approved", "by": "bo", "note": ""},
        ),
        ("", "run.resumed", {"approval_id": "ap1"}),
        (
            "s1",
            "step.policy",
            {
                "decision": {"outcome": "require_approval"},
                "policy_id": "p/1",
                "spec_hash": "h1",
                "view": {},
            },
        ),
        ("s1", "step.tool_started", {"tool": "push", "args": {"x": 1}, "approval_id": "ap1"}),
        ("s1", "model.dispatched", {"call_id": "m3", "attempt": 1, "model": "m"}),
        (
            "",
            "lease.taken_over",
            {
                "previous_owner": "o1",
                "previous_expires_at": "t",
                "owner": "o2",
                "epoch": 2,
                "proof": {},
            },
        ),
        (
            "s1",
            "model.failed",
            {
                "call_id": "m3",
                "attempt": 1,
                "status": "ambiguous",
                "model": "m",
                "usage": {"input_tokens": 1, "output_tokens": 1},
                "cost_micros": 1,
                "latency_ms": 0,
                "error": "never recorded",
            },
        ),
        ("s1", "step.interrupted", {"previous_status": "executing"}),
        (
            "s1",
            "step.reconciled",
            {
                "decider": "tool_reconcile",
                "tool": "push",
                "operation_id": "op_0",
                "answer": "not_found",
                "detail": "",
            },
        ),
        ("", "run.resumed", {"after": "interruption"}),
        (
            "",
            "model.completed",
            {
                "call_id": "m3",
                "attempt": 1,
                "status": "late",
                "model": "m",
                "usage": {"input_tokens": 2, "output_tokens": 0},
                "cost_micros": 1,
                "latency_ms": 0,
                "error": "late",
            },
        ),
        ("s2", "step.started", {"index": 1}),
        ("s2", "step.decided", {"kind": "tool_call", "tool": "lookup", "args": {}}),
        (
            "s2",
            "step.policy",
            {"decision": {"outcome": "allow"}, "policy_id": "p/1", "spec_hash": "h2", "view": {}},
        ),
        ("s2", "step.tool_started", {"tool": "lookup", "args": {}}),
        ("s2", "step.tool_finished", {"tool": "lookup", "duration_ms": 1, "error": "boom"}),
        (
            "s2",
            "step.failed",
            {
                "kind": "tool_error",
                "content": {"error": "boom"},
                "summary": "boom",
                "content_hash": "x",
            },
        ),
        ("", "loop.detected", {"tool": "lookup", "count": 3}),
        ("", "limit.exceeded", {"reason": "limit_steps", "detail": "3 steps"}),
        ("s3", "step.started", {"index": 2}),
        ("s3", "step.decided", {"kind": "tool_call", "tool": "push", "args": {}}),
        (
            "s3",
            "step.policy",
            {"decision": {"outcome": "allow"}, "policy_id": "p/1", "spec_hash": "h1", "view": {}},
        ),
        ("s3", "step.tool_started", {"tool": "push", "args": {}}),
        ("s3", "step.failed", {"kind": "cancelled", "content": {}, "summary": "cancelled"}),
        (
            "",
            "run.finished",
            {"status": "CANCELLED", "reason": "operator_cancelled", "detail": "stop", "steps": 3},
        ),
        (
            "s3",
            "step.tool_finished",
            {"tool": "push", "duration_ms": 9, "summary": "ok", "late": True},
        ),
    ]
    return [
        Event(
            seq=i + 1,
            run_id="r1",
            step_id=step,
            at=t0 + timedelta(seconds=i),
            type=typ,
            payload=payload,
        )
        for i, (step, typ, payload) in enumerate(rows)
    ]


def test_every_event_type_in_the_catalogue_is_mapped_and_appears_in_a_span() -> None:
    assert set(MAPPING) == set(ALL)
    events = catalogue_run()
    assert {e.type for e in events} == set(ALL)
    spans = spans_of(events, origin="gate")
    assert {s.name for s in spans} <= SPAN_NAMES
    represented: set[int] = set()
    for s in spans:
        represented.add(s.seq)  # the event that completed it
        represented.update(int(e.attributes["agentrt.seq"]) for e in s.events)
    starts = {
        "run.created",
        "step.started",
        "model.dispatched",
        "approval.requested",
        "step.tool_started",
    }
    for e in events:
        if e.type in starts:
            continue  # opening events: a span's start time, checked below
        assert e.seq in represented, (e.seq, e.type)
    names = Counter(s.name for s in spans)
    assert names == {
        SPAN_MODEL: 3,
        SPAN_MODEL_LATE: 1,
        SPAN_APPROVAL: 1,
        SPAN_STEP: 3,
        SPAN_RUN: 1,
        SPAN_TOOL_LATE: 1,
    }
    ids = [s.span_id for s in spans]
    assert len(ids) == len(set(ids))
    known = set(ids)
    assert all(s.parent_id is None or s.parent_id in known for s in spans)
    run = next(s for s in spans if s.name == SPAN_RUN)
    assert [e.name for e in run.events] == [
        "run.started",
        "run.resumed",
        "lease.taken_over",
        "run.resumed",
        "loop.detected",
        "limit.exceeded",
        "run.cancelled",
    ]
    step1 = next(s for s in spans if s.span_id == span_id("step", "s1"))
    assert "step.interrupted" in [e.name for e in step1.events]
    assert "step.reconciled" in [e.name for e in step1.events]
    assert step1.error is not None and step1.attributes["agentrt.step.outcome"] == "interrupted"
    late = next(s for s in spans if s.name == SPAN_TOOL_LATE)
    assert late.parent_id == span_id("step", "s3")
    started = next(e for e in events if e.step_id == "s3" and e.type == "step.tool_started")
    assert late.start_ns == int(started.at.timestamp()) * 10**9
    model1 = next(s for s in spans if s.span_id == span_id("model", "m1"))
    assert model1.error == "503" and model1.attributes["gen_ai.usage.input_tokens"] == 3


def test_spans_end_only_when_complete_an_open_step_or_approval_emits_nothing() -> None:
    events = catalogue_run()
    upto_waiting = [e for e in events if e.seq <= 10]  # the approval requested, not decided
    names = [s.name for s in spans_of(upto_waiting)]
    assert names == [SPAN_MODEL, SPAN_MODEL]  # the step, its approval and the run are open


# -- text and names ---------------------------------------------------------------


def test_model_written_text_is_cut_at_1024_characters_and_never_a_span_name(
    database: str,
) -> None:
    long = "\x1b[31m" + "é" * 5000
    store = agentrt.open_store(database)
    try:
        agentrt.Driver(
            store=store,
            agent=ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.fail(long)]),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.READ_ONLY, result={"t": long})],
            now=FakeClock(),
            new_id=Ids(),
        ).start_sync(long)
    finally:
        store.close()
    spans = export_all(database)
    assert {s.name for s in spans} <= SPAN_NAMES
    texts = []
    for s in spans:
        texts += [v for v in s.attributes.values() if isinstance(v, str)]
        for e in s.events:
            assert e.name in set(ALL) | {"run.cancelled"}
            texts += [v for v in e.attributes.values() if isinstance(v, str)]
    assert max(len(t) for t in texts) == 1024
    run_span = next(s for s in spans if s.name == SPAN_RUN)
    assert run_span.attributes["agentrt.run.goal"] == long[:1024]
    assert run_span.status.status_code == StatusCode.ERROR


# -- configuration ---------------------------------------------------------------


def test_the_standard_otel_variables_choose_the_exporter_and_refuse_what_they_cannot() -> None:
    assert exporter_from_env({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert isinstance(exporter_from_env({"OTEL_TRACES_EXPORTER": "console"}), ConsoleSpanExporter)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    otlp = exporter_from_env({})
    assert isinstance(otlp, OTLPSpanExporter)
    otlp.shutdown()
    with pytest.raises(OtelConfigError, match="zipkin"):
        exporter_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(OtelConfigError, match="http/json"):
        exporter_from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    with pytest.raises(OtelConfigError, match="takes one"):
        exporter_from_env({"OTEL_TRACES_EXPORTER": "otlp,console"})
    try:
        import opentelemetry.exporter.otlp.proto.grpc  # noqa: F401
    except ImportError:
        with pytest.raises(agentrt.ConfigError, match="opentelemetry-exporter-otlp-proto-grpc"):
            exporter_from_env({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"})


def test_without_the_otel_extra_the_export_is_one_sentence_naming_the_extra(
    db_path: Path,
) -> None:
    store = agentrt.open_store(db_path)
    store.close()
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from agentrt.cli import main\n"
        f"sys.exit(main(['--db', {str(db_path)!r}, 'export', '--otel', '--cursor', "
        f"{str(db_path.with_name('c.json'))!r}, '--once']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "otel extra" in lines[0] and "Traceback" not in result.stderr
    # Named as every other extra is named (the same command works from PyPI or a clone).
    assert lines[0].endswith("pip install 'agentrt[otel]'")
    library = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['opentelemetry'] = None\n"
            "import agentrt.otel as o; o.exporter_from_env({})",
        ],
        capture_output=True,
        text=True,
    )
    assert library.returncode == 1
    assert "agentrt.otel.OtelMissingError: the OpenTelemetry export needs the otel extra" in (
        library.stderr
    )
    # The core never imports opentelemetry, with or without the extra.
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, agentrt, agentrt.export, agentrt.cli; "
            "print([m for m in sys.modules if m.startswith('opentelemetry')])",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "[]", probe.stderr


def test_export_needs_otel_and_a_cursor_usage_errors_exit_2(db_path: Path) -> None:
    agentrt.open_store(db_path).close()
    base = [sys.executable, "-m", "agentrt", "--db", str(db_path), "export"]
    no_otel = subprocess.run([*base, "--cursor", "c"], capture_output=True, text=True)
    assert no_otel.returncode == 2 and "--otel" in no_otel.stderr
    no_cursor = subprocess.run([*base, "--otel"], capture_output=True, text=True)
    assert no_cursor.returncode == 2 and "--cursor" in no_cursor.stderr


# -- failures and restarts --------------------------------------------------------


class Refusing(InMemorySpanExporter):
    def __init__(self) -> None:
        super().__init__()
        self.refuse = True

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if self.refuse:
            return SpanExportResult.FAILURE
        return super().export(spans)


def test_a_refused_export_leaves_the_page_unacknowledged_and_the_retry_sends_each_span_once(
    database: str, tmp_path: Path
) -> None:
    store = agentrt.open_store(database)
    try:
        lookup_then_push(store).start_sync("look, then push")
    finally:
        store.close()
    exporter = Refusing()
    cursor = tmp_path / "cursor.json"
    with OtelSink(database, exporter) as sink:
        with Follower(database, cursor=cursor, page_size=4) as follower:
            with pytest.raises(OtelExportError):
                follower.run(sink, follow=False)
            stuck = follower.position
        exporter.refuse = False
        with Follower(database, cursor=cursor, page_size=4) as follower:
            assert follower.position == stuck
            follower.run(sink, follow=False)
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == [SPAN_STEP]  # the lookup step; the push step and the run are still open
    ids = [s.context.span_id for s in exporter.get_finished_spans()]
    assert len(ids) == len(set(ids))


def wait_for(predicate: Any, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def heads_of(db: Path | str) -> tuple[tuple[int, str], ...]:
    """Each chain partition's head (one on SQLite, 16 on PostgreSQL): what a cursor that
    has delivered every event names."""
    with agentrt.open_existing(db, read_only=True) as store:
        return store.chain_heads()


def exporter_env(receiver: Receiver) -> dict[str, str]:
    return {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "shop-agent",
        "OTEL_BSP_SCHEDULE_DELAY": "10",
    }


def exporter_command(db: Path | str, cursor: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentrt",
        "--db",
        str(db),
        "export",
        "--otel",
        "--cursor",
        str(cursor),
        "--interval",
        "0.05",
        "--retry",
        "0.1",
        "--page",
        "3",
    ]


def start_exporter(db: Path | str, cursor: Path, receiver: Receiver) -> subprocess.Popen[str]:
    return subprocess.Popen(
        exporter_command(db, cursor),
        env=exporter_env(receiver),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def cursor_heads(cursor: Path) -> tuple[tuple[int, str], ...]:
    return tuple((seq, digest) for seq, digest in json.loads(cursor.read_text())["heads"])


def caught_up(db: Path | str, cursor: Path) -> bool:
    saved = load_cursor(cursor)
    return saved is not None and saved.heads == heads_of(db)


@pytest.mark.slow
def test_a_follower_sigkilled_mid_run_and_restarted_sends_no_duplicate_and_no_orphan_span(
    db_path: Path, tmp_path: Path
) -> None:
    """On SQLite only, for its cost (exporter processes of their own): test_cli_postgres.py
    runs `agentrt export --otel` on PostgreSQL, its cursor kept in a file."""
    cursor = tmp_path / "otel.cursor"
    store = agentrt.open_store(db_path)
    with Receiver() as receiver:
        try:
            driver = lookup_then_push(store)
            run = driver.start_sync("look, then push")
            assert run.status == "WAITING_FOR_APPROVAL"
            first = start_exporter(db_path, cursor, receiver)
            try:
                wait_for(lambda: caught_up(db_path, cursor))
                before = receiver.snapshot()
                assert [s.name for s in before] == [SPAN_STEP]  # only the finished lookup step
            finally:
                first.send_signal(signal.SIGKILL)
                first.wait(30)
            assert first.returncode == -signal.SIGKILL
            # The run goes on while no exporter runs: approved, resumed, completed.
            (approval,) = store.pending_approvals(run.id)
            driver.approve(run.id, approval.id, by="alice")
            run = driver.resume_sync(run.id)
            assert run.status == "COMPLETED"
            steps = store.list_steps(run.id)
            events = store.list_events(run.id, 0, 1000)
        finally:
            store.close()
        second = start_exporter(db_path, cursor, receiver)
        try:
            wait_for(
                lambda: (
                    caught_up(db_path, cursor)
                    and any(s.name == SPAN_RUN for s in receiver.snapshot())
                )
            )
        finally:
            second.send_signal(signal.SIGTERM)
            _, err = second.communicate(timeout=30)
        assert second.returncode == 0, err
        spans = receiver.snapshot()
    assert Counter(s.name for s in spans) == {SPAN_STEP: 3, SPAN_APPROVAL: 1, SPAN_RUN: 1}
    ids = [s.span_id for s in spans]
    assert len(ids) == len(set(ids)), "a span was sent twice"
    assert {s.trace_id for s in spans} == {trace_id(run.id).hex()}
    known = set(ids)
    assert all(s.parent_id == "" or s.parent_id in known for s in spans), "an orphan span"
    assert {s.service for s in spans} == {"shop-agent"}
    # The push step began before the kill and ended after it: its start is the record's.
    push = next(s for s in spans if s.span_id == span_id("step", steps[1].id).hex())
    started = next(e for e in events if e.type == "step.started" and e.step_id == steps[1].id)
    assert push.start_ns == int(started.at.timestamp() * 1_000_000) * 1000
    assert [name for name, _, _ in push.events][:3] == [
        "step.decided",
        "step.policy",
        "approval.requested",
    ]
    approval_span = next(s for s in spans if s.name == SPAN_APPROVAL)
    assert approval_span.parent_id == push.span_id
    assert approval_span.attributes["agentrt.approval.status"] == "approved"


@pytest.mark.slow
def test_an_export_the_receiver_refuses_is_retried_and_each_span_arrives_once(
    db_path: Path, tmp_path: Path
) -> None:
    """On SQLite only, for its cost (exporter processes of their own): test_cli_postgres.py
    runs `agentrt export --otel` on PostgreSQL, its cursor kept in a file."""
    store = agentrt.open_store(db_path)
    try:
        driver = lookup_then_push(store)
        run = driver.start_sync("look, then push")
        (approval,) = store.pending_approvals(run.id)
        driver.approve(run.id, approval.id, by="alice")
        driver.resume_sync(run.id)
    finally:
        store.close()
    cursor = tmp_path / "otel.cursor"
    with Receiver() as receiver:
        receiver.fail_next(2, 500)  # a refusal that may pass later (decision 0154)
        proc = start_exporter(db_path, cursor, receiver)
        try:
            wait_for(
                lambda: (
                    caught_up(db_path, cursor)
                    and any(s.name == SPAN_RUN for s in receiver.snapshot())
                )
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        spans = receiver.snapshot()
    assert proc.returncode == 0
    assert "trying again" in err
    assert Counter(s.name for s in spans) == {SPAN_STEP: 3, SPAN_APPROVAL: 1, SPAN_RUN: 1}
    assert len({s.span_id for s in spans}) == len(spans)
    assert cursor_heads(cursor) == heads_of(db_path)


def test_agentrt_export_otel_sink_is_a_follower_sink_that_exports_spans(database: str) -> None:
    from agentrt.export import otel_sink

    store = agentrt.open_store(database)
    try:
        lookup_then_push(store).start_sync("look, then push")
    finally:
        store.close()
    exporter = InMemorySpanExporter()
    sink = otel_sink(database, exporter)
    try:
        with Follower(database) as follower:
            follower.run(sink, follow=False)
    finally:
        sink.close()
    assert [s.name for s in exporter.get_finished_spans()] == [SPAN_STEP]
    assert sink.exported == 1


def assert_one_tree(spans: list[Any]) -> None:
    ids = [s.context.span_id for s in spans]
    assert len(ids) == len(set(ids)), "a span id twice"
    assert all(s.parent is None or s.parent.span_id in set(ids) for s in spans), "an orphan"
    assert len({s.context.trace_id for s in spans}) == 1


@pytest.mark.slow
def test_a_takeover_after_a_sigkill_shows_on_the_run_span_and_interrupts_the_step_span(
    database: str, crash_journal: Path
) -> None:
    from support.crashes import crash, resumer

    run_id = crash(database, "charge")  # a child SIGKILLed inside a remote side effect
    store = agentrt.open_store(database)
    try:
        resumer(store, database).resume_sync(run_id)
        (approval,) = store.pending_approvals(run_id)
        agentrt.reject(store, run_id, approval.id, by="ops", note="it went through upstream")
        (step,) = store.list_steps(run_id)
    finally:
        store.close()
    spans = export_all(database)
    assert_one_tree(spans)
    assert [s.name for s in spans] == [SPAN_APPROVAL, SPAN_STEP, SPAN_RUN]
    approval_span, step_span, run_span = spans
    assert [e.name for e in run_span.events] == ["run.started", "lease.taken_over", "run.cancelled"]
    assert run_span.attributes["agentrt.run.reason"] == "approval_rejected"
    assert step_span.status.status_code == StatusCode.ERROR
    # Interrupted by the takeover, then failed by the rejection: the last settling wins.
    assert step_span.attributes["agentrt.step.outcome"] == "failed"
    names = [e.name for e in step_span.events]
    assert names.index("step.interrupted") < names.index("approval.requested")
    assert names[-1] == "step.failed"
    assert hexid(approval_span.parent.span_id, 16) == span_id("step", step.id).hex()
    assert approval_span.attributes["agentrt.approval.status"] == "rejected"
    assert approval_span.attributes["agentrt.approval.note"] == "it went through upstream"


class Blocking:
    """A tool that blocks until released, telling the test when it has started."""

    def __init__(self) -> None:
        import threading

        self.started = threading.Event()
        self.release = threading.Event()
        self.spec = RecordingTool("slow", SideEffect.LOCAL_MUTATION).spec

    def call(self, call: agentrt.ToolCall) -> agentrt.ToolResult:
        self.started.set()
        assert self.release.wait(30)
        return agentrt.ToolResult({"done": True}, "finished late")


def test_a_tool_that_finishes_after_its_run_was_cancelled_is_a_late_tool_span(
    database: str,
) -> None:
    import threading

    slow = Blocking()
    store = agentrt.open_store(database)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent([Decision.tool_call("slow", {})]),
            policy=agentrt.default_policy(),
            tools=[slow],
            new_id=Ids(),
        )
        thread = threading.Thread(target=driver.start_sync, args=("g",))
        thread.start()
        try:
            assert slow.started.wait(30)
            run_id = store.list_runs()[0].id
            agentrt.cancel(store, run_id, by="ops", note="stop it")
        finally:
            slow.release.set()
            thread.join(30)
        (step,) = store.list_steps(run_id)
    finally:
        store.close()
    spans = export_all(database)
    assert_one_tree(spans)
    assert [s.name for s in spans] == [SPAN_STEP, SPAN_RUN, SPAN_TOOL_LATE]
    late = spans[2]
    assert hexid(late.context.span_id, 16) == span_id("tool.late", step.id).hex()
    assert hexid(late.parent.span_id, 16) == span_id("step", step.id).hex()
    assert late.attributes["agentrt.tool.summary"] == "finished late"
    assert late.attributes["agentrt.tool.late"] is True
    assert "run.cancelled" in [e.name for e in spans[1].events]


def test_a_page_sent_but_not_acknowledged_is_sent_again_with_identical_spans(
    database: str, tmp_path: Path
) -> None:
    # The one window left (decision 0065): a kill after the collector took a page and
    # before the cursor's rename. The restarted exporter sends that page's spans again,
    # with the same ids and the same content, rebuilt from the record.
    store = agentrt.open_store(database)
    try:
        driver = lookup_then_push(store)
        run = driver.start_sync("look, then push")
        (approval,) = store.pending_approvals(run.id)
        driver.approve(run.id, approval.id, by="alice")
        driver.resume_sync(run.id)
    finally:
        store.close()
    cursor = tmp_path / "cursor.json"
    with Follower(database, cursor=cursor) as follower:
        follower.run(lambda e: None, follow=False, max_events=8)  # acknowledged: 8 events
        acknowledged = follower.positions
        first = InMemorySpanExporter()
        with OtelSink(database, first) as killed:
            for event in follower.poll():  # sent, then "killed" before the ack
                killed(event)
            killed.flush()
    again = InMemorySpanExporter()
    with OtelSink(database, again) as restarted, Follower(database, cursor=cursor) as follower:
        assert follower.positions == acknowledged
        if not on_postgres(database):
            assert follower.position == 8  # one chain: seqs 1 to 8 acknowledged
        follower.run(restarted, follow=False)
    sent_first = [s.to_json() for s in first.get_finished_spans()]
    sent_again = [s.to_json() for s in again.get_finished_spans()]
    assert sent_first and sent_first == sent_again


def test_events_that_do_not_decode_still_give_every_span_with_the_decode_error_shown(
    database: str,
) -> None:
    store = agentrt.open_store(database)
    try:
        run = lookup_then_push(store).start_sync("look, then push")
    finally:
        store.close()
    healthy = [(s.name, s.context.span_id) for s in export_all(database)]
    # Tampered behind the runtime's back: the first step's decision and every time unreadable.
    execute(
        database,
        "UPDATE events SET payload_json = 'NaN' WHERE type = 'step.decided' AND seq = "
        "(SELECT MIN(seq) FROM events WHERE type = 'step.decided')",
    )
    execute(database, "UPDATE events SET at = '2026-13-01T00:00:00.000000Z'")
    spans = export_all(database)
    assert [(s.name, s.context.span_id) for s in spans] == healthy
    step = spans[0]
    decided = next(e for e in step.events if e.name == "step.decided")
    assert "payload_json: invalid JSON" in decided.attributes["agentrt.decode_error"]
    assert all(s.start_time == 0 == s.end_time for s in spans)  # no time to show: the epoch
    assert trace_id(run.id) == spans[0].context.trace_id.to_bytes(16, "big")


def test_a_live_observer_in_the_program_emits_the_same_spans_as_the_follower(
    database: str,
) -> None:
    from agentrt.otel import OtelObserver

    live = InMemorySpanExporter()
    store = agentrt.open_store(database)
    observer = OtelObserver(database, live)
    try:
        program = agentrt.Driver(
            store=store,
            agent=ScriptedAgent(
                [
                    Decision.tool_call("lookup", {"x": 1}),
                    Decision.tool_call("push", {"x": 2}),
                    Decision.complete("pushed"),
                ]
            ),
            policy=agentrt.default_policy(),
            tools=[
                RecordingTool("lookup", SideEffect.READ_ONLY),
                RecordingTool("push", SideEffect.REMOTE_MUTATION),
            ],
            now=FakeClock(),
            new_id=Ids("a"),
            observer=observer,
        )
        run = program.start_sync("look, then push")
        # Approved elsewhere (as `agentrt approve` would): the observer is not told.
        (approval,) = store.pending_approvals(run.id)
        agentrt.approve(store, run.id, approval.id, by="alice")
        assert program.resume_sync(run.id).status == "COMPLETED"
    finally:
        observer.close()
        store.close()
    followed = export_all(database)
    assert [s.to_json() for s in live.get_finished_spans()] == [s.to_json() for s in followed]
    assert [s.name for s in followed] == [SPAN_STEP, SPAN_APPROVAL, SPAN_STEP, SPAN_STEP, SPAN_RUN]


def test_export_once_with_the_console_exporter_prints_each_span_and_moves_the_cursor(
    db_path: Path, tmp_path: Path
) -> None:
    """On SQLite only, for its cost (exporter processes of their own): test_cli_postgres.py
    runs `agentrt export --otel` on PostgreSQL, its cursor kept in a file."""
    store = agentrt.open_store(db_path)
    try:
        run = lookup_then_push(store).start_sync("look, then push")
    finally:
        store.close()
    cursor = tmp_path / "c.json"
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "shop"}
    command = [
        sys.executable,
        "-m",
        "agentrt",
        "--db",
        str(db_path),
        "export",
        "--otel",
        "--cursor",
        str(cursor),
        "--once",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    decoder = json.JSONDecoder()
    printed, at = [], 0
    text = done.stdout
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        value, at = decoder.raw_decode(text, at)
        printed.append(value)
    assert [p["name"] for p in printed] == [SPAN_STEP]  # the lookup; the push waits
    assert printed[0]["context"]["trace_id"] == "0x" + trace_id(run.id).hex()
    assert printed[0]["resource"]["attributes"]["service.name"] == "shop"
    assert cursor_heads(cursor) == heads_of(db_path)
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout) == (0, "")  # nothing new: nothing sent twice


class HangingCollector:
    """A loopback OTLP/HTTP server that takes each request and answers none of them
    until `release` is set (then 200 to each); `received` is set at the first."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.received = threading.Event()
        self.release = threading.Event()
        self.requests = 0
        collector = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                collector.requests += 1
                collector.received.set()
                collector.release.wait()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class ThreadNoting:
    """Delegates to an exporter, noting on which thread each export began and ended."""

    def __init__(self, inner: Any) -> None:
        import threading

        self.inner = inner
        self.began: list[int] = []
        self.ended: list[int] = []
        self.entered = threading.Event()

    def export(self, spans: Any) -> Any:
        import threading

        self.began.append(threading.get_ident())
        self.entered.set()
        try:
            return self.inner.export(spans)
        finally:
            self.ended.append(threading.get_ident())

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def test_a_collector_that_never_answers_does_not_block_the_run_the_observer_exports_off_the_loop(
    db_path: Path,
) -> None:
    import threading

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from agentrt.otel import OtelObserver

    collector = HangingCollector()
    # The exporter's own timeout is far beyond any run here: before the fix the run
    # waited on it at every export, so the export had returned before the run ended.
    exporter = ThreadNoting(OTLPSpanExporter(endpoint=collector.endpoint, timeout=120))
    store = agentrt.open_store(db_path)
    observer = OtelObserver(db_path, exporter, close_timeout=60)  # type: ignore[arg-type]
    try:
        program = agentrt.Driver(
            store=store,
            agent=ScriptedAgent(
                [
                    Decision.tool_call("lookup", {"x": 1}),
                    Decision.tool_call("lookup", {"x": 2}),
                    Decision.complete("looked twice"),
                ]
            ),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
            now=FakeClock(),
            new_id=Ids("a"),
            observer=observer,
        )
        run = program.start_sync("look twice")
        # The run is over; the collector has not answered and still holds the request.
        assert run.status == "COMPLETED"
        assert [s.status for s in store.list_steps(run.id)] == ["done", "done", "done"]
        assert exporter.entered.wait(60) and collector.received.wait(60)
        assert exporter.ended == []  # the first export still waits on the collector
        assert threading.get_ident() not in exporter.began
        assert observer.exported == 0
        # Once the collector answers, the observer's thread sends the rest on close.
        collector.release.set()
        observer.close()
        assert threading.get_ident() not in exporter.began + exporter.ended
        assert observer.exported == 4 and observer.dropped == observer.failed == 0
    finally:
        collector.stop()
        observer.close()
        store.close()


class HeldExporter:
    """An exporter that holds its first export until released, taking every span."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.entered = threading.Event()  # the export thread is inside `export`
        self.batches: list[int] = []

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.entered.set()
        self.release.wait()
        self.batches.append(len(spans))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def test_the_observers_queue_is_bounded_spans_beyond_it_are_dropped_and_counted(
    db_path: Path,
) -> None:
    from agentrt.otel import OtelObserver

    exporter = HeldExporter()
    store = agentrt.open_store(db_path)
    observer = OtelObserver(db_path, exporter, max_queue=1)  # type: ignore[arg-type]
    try:
        program = agentrt.Driver(
            store=store,
            agent=ScriptedAgent(
                [
                    Decision.tool_call("lookup", {"x": 1}),
                    Decision.tool_call("lookup", {"x": 2}),
                    Decision.complete("looked twice"),
                ]
            ),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
            now=FakeClock(),
            new_id=Ids("a"),
            observer=observer,
        )
        assert program.start_sync("look twice").status == "COMPLETED"
        assert len(observer._queue) <= 1
    finally:
        exporter.release.set()
        observer.close()
        store.close()
    total = len(export_all(db_path))
    assert total == 4  # three steps and the run
    # At most one span waits in the queue and one is in the export thread's hands.
    assert observer.dropped >= total - 2
    assert observer.exported == sum(exporter.batches) <= 2
    assert observer.exported + observer.dropped == total
    assert observer.failed == 0


def test_closing_the_observer_is_bounded_when_the_exporter_never_returns(db_path: Path) -> None:
    from agentrt.otel import OtelObserver

    exporter = HeldExporter()
    store = agentrt.open_store(db_path)
    observer = OtelObserver(db_path, exporter, close_timeout=0)  # type: ignore[arg-type]
    try:
        run = lookup_then_push(store).start_sync("look, then push")
        assert run.status == "WAITING_FOR_APPROVAL"
        for event in store.list_events(run.id, 0, 1000):
            observer(event)  # as the Driver's observer is called: it returns at once
        # The export thread has taken the spans and is held inside the exporter (before
        # it has, a close with no time to wait drops what is queued and ends the thread).
        assert exporter.entered.wait(60)
        observer.close()  # returns although the exporter is still held
        assert observer._worker.is_alive()
        assert observer.exported == 0
    finally:
        exporter.release.set()
        observer._worker.join(60)
        store.close()


@pytest.mark.parametrize(
    "option",
    [{"max_queue": 0}, {"max_queue": True}, {"close_timeout": -1}, {"close_timeout": float("nan")}],
)
def test_an_observer_queue_bound_or_close_timeout_out_of_range_is_one_sentence(
    db_path: Path, option: dict[str, Any]
) -> None:
    from agentrt.otel import OtelObserver

    agentrt.open_store(db_path).close()
    with pytest.raises(agentrt.ConfigError, match=r"must be"):
        OtelObserver(db_path, InMemorySpanExporter(), **option)


def test_a_refused_export_with_once_says_the_next_run_delivers_it_and_exits_1(
    db_path: Path, tmp_path: Path
) -> None:
    """`agentrt export --otel --once` whose collector refuses the page: one line saying the
    next run of the command delivers it (not "trying again", which `--once` never does),
    exit 1, and the next run sends the page."""
    store = agentrt.open_store(db_path)
    try:
        lookup_then_push(store).start_sync("look, then push")
    finally:
        store.close()
    cursor = tmp_path / "otel.cursor"
    with Receiver() as receiver:
        receiver.fail_next(1, 500)  # a refusal that may pass later (decision 0154)
        once = [*exporter_command(db_path, cursor), "--once"]
        env = exporter_env(receiver)
        refused = subprocess.run(once, env=env, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1
        assert "; run this command again to deliver the page" in refused.stderr
        assert "trying again" not in refused.stderr
        again = subprocess.run(once, env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
        assert [s.name for s in receiver.snapshot()] == [SPAN_STEP]
