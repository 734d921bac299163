"""A PostgreSQL connection lost at COMMIT leaves the commit's outcome unknown, and says so.

The server may have committed before the connection dropped (a network cut, a pooler or
proxy restarted): the client cannot tell. The store must not say "nothing was written"
then, and the step machine, whose `step.tool_started` may or may not be in the record,
must run no tool and claim nothing: the run is left for a takeover to judge (as the
SQLite store does after an I/O error at COMMIT, decision 0155).

Deterministic: a relay to the test server (`support.pg_cut`) passes everything on but the
server's acknowledgement of one COMMIT, the commit already durable on the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt._errors import StoreError
from agentrt._records import Limits
from agentrt.scripted import ScriptedAgent
from conftest import EPOCH, FakeClock, Ids, RecordingTool, event_types
from support.pg_cut import CommitCutter
from support.postgres import postgres_schema


@pytest.fixture
def cut() -> Iterator[tuple[str, CommitCutter]]:
    """A migrated schema's URL, and a relay to it that can cut a COMMIT's acknowledgement."""
    with ExitStack() as stack:
        url = postgres_schema(stack, "a connection lost at COMMIT")
        agentrt.open_store(url).close()  # created and migrated directly
        cutter = CommitCutter(url)
        stack.callback(cutter.close)
        yield url, cutter


def _create(store: Any, run_id: str) -> None:
    with store.transaction() as tx:
        tx.create_run(
            run_id,
            "goal",
            Limits(),
            owner="me",
            lease_expires_at=EPOCH,
            holder="{}",
            specs=[],
            now=EPOCH,
        )


def test_a_commit_whose_connection_dropped_says_its_outcome_is_unknown_not_nothing_written(
    cut: tuple[str, CommitCutter],
) -> None:
    _url, cutter = cut
    store = agentrt.open_store(cutter.url)
    _create(store, "r1")
    cutter.arm()
    with pytest.raises(StoreError) as failed:
        _create(store, "r2")
    said = str(failed.value)
    assert cutter.cuts == 1
    assert "nothing was written" not in said
    assert "whether the transaction was committed is unknown" in said
    # The server had committed it: what the error could not say, the record shows.
    assert store.get_run("r2").id == "r2"
    # The store goes on, on a new connection.
    _create(store, "r3")
    assert sorted(r.id for r in store.list_runs()) == ["r1", "r2", "r3"]
    store.close()


def test_a_tool_start_whose_commit_outcome_is_unknown_runs_no_tool_and_a_takeover_asks_a_person(
    cut: tuple[str, CommitCutter],
) -> None:
    url, cutter = cut
    store = agentrt.open_store(cutter.url)
    tool = RecordingTool("write_note", SideEffect.REMOTE_MUTATION)

    def arm_at_tool_start(point: str, session: Any) -> None:
        if point == "step.tool_started":
            cutter.arm()

    def driver(s: agentrt.Store, ids: Ids, **kw: Any) -> agentrt.Driver:
        return agentrt.Driver(
            store=s,
            agent=ScriptedAgent([Decision.tool_call("write_note", {"x": 1}), Decision.complete()]),
            policy=_AllowAll(),
            tools=[tool],
            now=FakeClock(),
            new_id=ids,
            **kw,
        )

    with pytest.raises(StoreError) as failed:
        driver(store, Ids("a"), probe_in_tx=arm_at_tool_start).start_sync("write it")
    said = str(failed.value)
    assert "nothing was written" not in said
    assert "unknown" in said
    assert tool.calls == []  # its start may not be recorded: it never ran
    (run,) = store.list_runs()
    # The server committed the start: the record says the tool may have run.
    assert [s.status for s in store.list_steps(run.id)] == ["executing"]
    assert event_types(store, run.id)[-1] == "step.tool_started"
    # No tool runs in this process, so the lease was given back: a takeover judges the
    # step at once, and a person decides whether the call runs (never run on its own).
    assert store.lease_state(run.id).owner == ""
    store.close()

    direct = agentrt.open_store(url)
    resumed = driver(direct, Ids("b")).resume_sync(run.id)
    assert resumed.status == "WAITING_FOR_APPROVAL"
    (approval,) = direct.list_approvals(run.id)
    assert approval.kind == "interrupted_side_effect"
    assert tool.calls == []
    direct.close()


class _AllowAll:
    policy_id = "allow-all/1"

    def evaluate(self, request: Any, view: Any) -> Any:
        return agentrt.PolicyDecision.allow()


def test_a_gate_session_whose_tool_start_commit_is_unknown_says_so_and_claims_nothing_unwritten(
    cut: tuple[str, CommitCutter],
) -> None:
    _url, cutter = cut
    store = agentrt.open_store(cutter.url)
    tool = RecordingTool("write_note", SideEffect.REMOTE_MUTATION)

    def arm_at_tool_start(point: str, session: Any) -> None:
        if point == "step.tool_started":
            cutter.arm()

    gate = agentrt.Gate(
        store=store,
        policy=_AllowAll(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids("e"),
        probe_in_tx=arm_at_tool_start,
    )
    session = gate.begin_sync("write it")
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(Decision.tool_call("write_note", {"x": 1})).outcome == "allowed"
    with pytest.raises(StoreError, match="whether the transaction was committed is unknown"):
        step.execute_sync()
    assert tool.calls == []
    # The session is not used again, and says why without claiming nothing was written.
    with pytest.raises(agentrt.RunStateError) as refused:
        session.step_sync()
    assert "is unknown" in str(refused.value)
    assert "is not in the record" not in str(refused.value)
    session.close_sync()
    assert store.lease_state(session.run_id).owner == ""
    assert [s.status for s in store.list_steps(session.run_id)] == ["executing"]
    store.close()
