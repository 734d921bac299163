"""`agentrt export --otel` against a collector that refuses a page (found by the read-side
attack, decision 0154).

A refusal that cannot change (400 Bad Request, 401, 403, 404, 413...: the same request
gets the same answer) stops the exporter with exit 1 and one line saying what the
collector answered, the cursor unmoved; it used to retry that page for ever, blocking
every span after it. A refusal that may pass later (429, 5xx, no answer) keeps being
retried. Each test runs `agentrt export --otel` processes against a real local OTLP/HTTP
receiver (tests/support/otlp.py), on SQLite only for their cost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt.export import load_cursor
from agentrt.otel import SPAN_APPROVAL, SPAN_RUN, SPAN_STEP
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support.otlp import Receiver


def finished_run(db: Path) -> None:
    """One run that looked a thing up, pushed after an approval, and completed."""
    store = agentrt.open_store(db)
    try:
        driver = agentrt.Driver(
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
        run = driver.start_sync("look, then push")
        (approval,) = store.pending_approvals(run.id)
        driver.approve(run.id, approval.id, by="alice")
        assert driver.resume_sync(run.id).status == "COMPLETED"
    finally:
        store.close()


def heads_of(db: Path) -> tuple[tuple[int, str], ...]:
    with agentrt.open_existing(db, read_only=True) as store:
        return store.chain_heads()


def export(db: Path, cursor: Path, receiver: Receiver, *more: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "5",
    }
    env.pop("AGENTRT_DB", None)
    return subprocess.Popen(
        [
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
            "0.05",
            "--page",
            "3",
            *more,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def ended(proc: subprocess.Popen[str], timeout: float = 20) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("agentrt export --otel kept retrying a page the collector refused for good")


def caught_up(db: Path, cursor: Path, receiver: Receiver) -> bool:
    saved = load_cursor(cursor)
    return (
        saved is not None
        and saved.heads == heads_of(db)
        and any(s.name == SPAN_RUN for s in receiver.snapshot())
    )


def stop_when(proc: subprocess.Popen[str], done: object, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if done():  # type: ignore[operator]
                break
            time.sleep(0.02)
        else:
            pytest.fail(f"the exporter did not deliver (exit {proc.poll()})")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
def test_a_collector_that_refuses_a_page_for_good_stops_the_export_with_exit_1_and_one_line(
    db_path: Path, tmp_path: Path, status: int
) -> None:
    finished_run(db_path)
    cursor = tmp_path / "otel.cursor"
    with Receiver() as receiver:
        receiver.fail_next(1_000_000, status)
        # One page of every event: the refused page is the first, and the cursor none.
        proc = export(db_path, cursor, receiver, "--page", "500")
        _, err = ended(proc)
        requests = receiver.requests
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("agentrt: ")]
    assert f"HTTP {status}" in line, line
    assert "refused" in line and "cursor" in line, line
    assert "trying again" not in err
    if status == 413:
        assert "--page" in line, line  # a smaller page is what may pass
    assert requests == 1, "a refusal that cannot change was sent again"
    assert not cursor.exists(), "the cursor moved past a page the collector refused"


def test_a_page_refused_for_good_is_delivered_by_the_next_run_once_the_collector_takes_it(
    db_path: Path, tmp_path: Path
) -> None:
    finished_run(db_path)
    cursor = tmp_path / "otel.cursor"
    with Receiver() as receiver:
        receiver.fail_next(1, 400)
        refused = export(db_path, cursor, receiver, "--once")
        _, err = ended(refused)
        assert refused.returncode == 1 and "HTTP 400" in err, err
        again = export(db_path, cursor, receiver, "--once")
        _, err = ended(again)
        assert again.returncode == 0, err
        spans = receiver.snapshot()
    assert Counter(s.name for s in spans) == {SPAN_STEP: 3, SPAN_APPROVAL: 1, SPAN_RUN: 1}
    assert len({s.span_id for s in spans}) == len(spans)
    saved = load_cursor(cursor)
    assert saved is not None and saved.heads == heads_of(db_path)


@pytest.mark.parametrize(
    ("status", "retry_after", "failures"),
    [(500, None, 3), (502, "0", 8), (429, "0", 8), (503, "0", 8)],
)
def test_a_refusal_that_may_pass_later_is_retried_until_each_span_arrives_once(
    db_path: Path, tmp_path: Path, status: int, retry_after: str | None, failures: int
) -> None:
    # 8 answers of 429/502/503 with Retry-After: 0 outlast the SDK's own 6 attempts, so
    # the exporter itself must try the page again.
    finished_run(db_path)
    cursor = tmp_path / "otel.cursor"
    with Receiver() as receiver:
        receiver.fail_next(failures, status, retry_after=retry_after)
        proc = export(db_path, cursor, receiver)
        err = stop_when(proc, lambda: caught_up(db_path, cursor, receiver))
        spans = receiver.snapshot()
    assert "trying again" in err, err
    assert Counter(s.name for s in spans) == {SPAN_STEP: 3, SPAN_APPROVAL: 1, SPAN_RUN: 1}
    assert len({s.span_id for s in spans}) == len(spans)


def test_a_failure_with_no_answer_after_a_refusal_for_good_is_one_that_may_pass(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status noted is the answer to the batch being exported: a collector gone after
    refusing a page for good (a 400) leaves the next page's failure one that may pass,
    retried, not taken for that earlier 400."""
    from agentrt.export import Follower
    from agentrt.otel import OtelExportError, OtelRefusedError, OtelSink

    finished_run(db_path)
    receiver = Receiver()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    with OtelSink(db_path) as sink, Follower(db_path) as follower:
        events = follower.poll()
        try:
            receiver.fail_next(1, 400)
            for event in events:
                sink(event)
            with pytest.raises(OtelRefusedError):
                sink.flush()
        finally:
            receiver.close()  # the collector gone: the next batch gets no answer at all
        for event in events:
            sink(event)
        with pytest.raises(OtelExportError) as failed:
            sink.flush()
    assert not isinstance(failed.value, OtelRefusedError), failed.value
