"""A Gate step's `execute` whose store connection was lost before the commit that starts
the tool was sent: the store says "cannot begin a write transaction, nothing was written"
(a plain `StoreError`, not `StoreBusyError`: the connection, not a lock). Nothing of the
step was written and the tool did not start, exactly as after a busy refusal (decision
0179), so the step stays open and allowed and a retry, on a new connection, makes the
same commit.

Before, the step was taken for executed: the session's next `step()` was accepted and its
first commit wrote the refused step's kept claim and decision in front of its own, so a
run that went on to its end kept step 0 `deciding` for good (what the test kit's
invariants call `step_left_in_flight`). A server restart or a failover between two
steps is all it takes.

The connection is ended by the server (`pg_terminate_backend`), as in
`test_postgres_commit_connection_lost.py`, and waited for until the server no longer
lists its backend, before the call: no race with it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack

import psycopg
import pytest

import agentrt
from agentrt import Decision, RunStateError, SideEffect, StepStatus, StoreError
from conftest import RecordingTool, event_types
from support.gates import make_gate, open_step
from support.postgres import postgres_schema

STEP_EVENTS = [
    "step.started",
    "step.decided",
    "step.policy",
    "step.tool_started",
    "step.tool_finished",
]


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the Gate's execute with its connection lost")


def end_the_stores_connection(store: agentrt.Store, url: str) -> None:
    """The server ends the store's one connection (as a restart does); returns once the
    server no longer lists its backend."""
    pid = store._pg.info.backend_pid  # type: ignore[attr-defined]
    with psycopg.connect(url.partition("?")[0], autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(500):
            gone = other.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if gone is not None and gone[0] == 0:
                return
            time.sleep(0.01)
    raise AssertionError(f"the server still lists backend {pid}")


def test_an_execute_whose_connection_was_lost_before_its_commit_stays_executable(
    url: str,
) -> None:
    with agentrt.open_store(url) as store:
        tool = RecordingTool("note", SideEffect.READ_ONLY)
        session, step = open_step(make_gate(store, tool), "goal")
        run_id = session.run_id
        assert step.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
        claimed_at = step.step.started_at

        end_the_stores_connection(store, url)
        with pytest.raises(StoreError) as raised:
            step.execute_sync()
        assert type(raised.value) is StoreError and not raised.value.commit_unknown
        assert str(raised.value).startswith(
            "cannot begin a write transaction, nothing was written: "
        )
        # Nothing written, nothing run: the step is still open and allowed.
        assert tool.calls == []
        assert event_types(store, run_id) == ["run.created", "run.started"]
        assert store.list_steps(run_id) == []
        assert session.current() is step and not session.done
        with pytest.raises(RunStateError) as refused:
            session.step_sync()
        assert str(refused.value) == (
            f"step 0 of run {run_id} is still open: its execute was refused by the store "
            "before the tool started, and nothing of that execute was written; execute it "
            "again, or close the session"
        )

        # The retry, on a new connection, makes the same commit and runs the call once.
        assert step.execute_sync().kind == "tool_result"
        assert [c.args for c in tool.calls] == [{"x": 1}]
        assert event_types(store, run_id) == ["run.created", "run.started", *STEP_EVENTS]
        [recorded] = store.list_steps(run_id)
        assert (recorded.index, recorded.status) == (0, StepStatus.DONE)
        assert recorded.started_at == claimed_at
        with pytest.raises(RunStateError, match="step 0 was executed already; a call runs once"):
            step.execute_sync()
        again = session.step_sync()
        assert again is not None and again.index == 1
        assert again.propose_sync(Decision.complete("done")).outcome == "ended"
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
            (0, StepStatus.DONE),
            (1, StepStatus.DONE),
        ]
        assert len(tool.calls) == 1
        assert store.verify_events().intact
        session.close_sync()
