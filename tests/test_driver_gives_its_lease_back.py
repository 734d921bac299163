"""A Driver whose loop stops on an error gives its lease back, unless a tool may be running.

A run held by a loop that stopped (a store error starting a held approved call, an id
factory that repeats ids, an agent, a policy or an observer raising `KeyboardInterrupt`,
`SystemExit` or another `BaseException`) was left under this process's lease, renewed by
nobody, until it lapsed: every resume refused meanwhile, as after a crash of the process.
Nothing runs under the lease once the loop stopped, so it is given back: the run is left
as the record stands (what a failed or abandoned commit would have written is not written
after it) and any resume continues it at once. The exception still reaches the caller: a real
Ctrl-C still stops the program. While a tool may still be running the lease is kept
(decision 0017's lingering thread, and a tool whose run an exception interrupted).

SQLite and PostgreSQL (`any_store`, `database`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt._errors import StoreError
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool, event_types


class _AllowAll:
    policy_id = "allow-all/1"

    def evaluate(self, request: Any, view: Any) -> Any:
        return agentrt.PolicyDecision.allow()


def _driver(store: agentrt.Store, agent: Any, **kw: Any) -> agentrt.Driver:
    kw.setdefault("policy", _AllowAll())
    kw.setdefault("tools", [RecordingTool("note", SideEffect.LOCAL_MUTATION)])
    kw.setdefault("new_id", Ids())
    return agentrt.Driver(store=store, agent=agent, now=FakeClock(), **kw)


def _finish(store: agentrt.Store, run_id: str, tools: Any = None) -> agentrt.Run:
    """Another driver, with a sane id factory, resumes the run at once and completes it."""
    finisher = _driver(
        store,
        lambda input: Decision.complete({"done": True}),
        new_id=Ids("f"),
        **({} if tools is None else {"tools": tools}),
    )
    return finisher.resume_sync(run_id)


# --- 4. a held approved call whose start fails for another reason ---------------------------


def test_a_held_approved_call_whose_start_failed_on_a_store_error_is_given_back_at_once(
    any_store: agentrt.Store,
) -> None:
    tool = RecordingTool("pay", SideEffect.REMOTE_MUTATION)
    script = [Decision.tool_call("pay", {"x": 1}), Decision.complete({"paid": 1})]
    first = _driver(any_store, ScriptedAgent(script), policy=agentrt.default_policy(), tools=[tool])
    run = first.start_sync("pay")
    assert run.status == "WAITING_FOR_APPROVAL"
    (approval,) = any_store.list_approvals(run.id)
    agentrt.approve(any_store, run.id, approval.id, by="alice", shown_hash=approval.hash)

    def failing(point: str, session: Any) -> None:
        if point == "run.resumed":
            raise StoreError("disk I/O error")

    failed = _driver(
        any_store,
        ScriptedAgent(script),
        policy=agentrt.default_policy(),
        tools=[tool],
        probe_in_tx=failing,
        new_id=Ids("b"),
    )
    with pytest.raises(StoreError, match="disk I/O error"):
        failed.resume_sync(run.id)
    assert tool.calls == []
    # Nothing was written, and nothing runs under the hold: it is given back.
    assert any_store.get_run(run.id).status == "WAITING_FOR_APPROVAL"
    assert any_store.get_approval(run.id, approval.id).status == "approved"
    assert any_store.lease_state(run.id).owner == ""
    # A resume at once runs the approved call, once.
    second = _driver(
        any_store,
        ScriptedAgent(script),
        policy=agentrt.default_policy(),
        tools=[tool],
        new_id=Ids("c"),
    )
    assert second.resume_sync(run.id).status == "COMPLETED"
    assert len(tool.calls) == 1


# --- 2. an id factory that repeats ids ------------------------------------------------------


def test_an_id_factory_repeating_a_step_id_is_named_and_the_run_is_left_to_any_resume(
    any_store: agentrt.Store,
) -> None:
    repeated = "c" * 32
    tool = RecordingTool("note", SideEffect.LOCAL_MUTATION)
    script = [Decision.tool_call("note", {"x": 1})] * 2 + [Decision.complete({})]
    driver = _driver(any_store, ScriptedAgent(script), tools=[tool], new_id=lambda: repeated)

    with pytest.raises(StoreError) as failed:
        driver.start_sync("note twice")
    said = str(failed.value)
    assert "UNIQUE" not in said and "duplicate key" not in said
    assert f"the id {repeated} " in said
    assert "new_id" in said
    assert "already the id of a step" in said
    (run,) = any_store.list_runs()
    assert run.id == repeated
    # Step 0 ran and is recorded; step 1 could not be: the run is nobody's, and a driver
    # with a sane id factory continues it at once.
    assert [s.status for s in any_store.list_steps(run.id)] == ["done"]
    assert len(tool.calls) == 1
    assert any_store.lease_state(run.id).owner == ""
    assert _finish(any_store, run.id, tools=[tool]).status == "COMPLETED"
    assert len(tool.calls) == 1


def test_a_gate_whose_id_factory_repeats_a_step_id_names_it_and_its_close_gives_the_run_back(
    any_store: agentrt.Store,
) -> None:
    repeated = "d" * 32
    tool = RecordingTool("note", SideEffect.LOCAL_MUTATION)
    gate = agentrt.Gate(
        store=any_store, policy=_AllowAll(), tools=[tool], now=FakeClock(), new_id=lambda: repeated
    )
    session = gate.begin_sync("note twice")
    first = session.step_sync()
    assert first is not None
    assert first.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
    first.execute_sync()
    second = session.step_sync()
    assert second is not None
    assert second.propose_sync(Decision.tool_call("note", {"x": 2})).outcome == "allowed"
    with pytest.raises(StoreError, match=f"the id {repeated} given by the id factory"):
        second.execute_sync()
    assert len(tool.calls) == 1  # the second call's start was not recorded: it never ran
    session.close_sync()
    assert any_store.lease_state(session.run_id).owner == ""
    assert any_store.get_run(session.run_id).status == "RUNNING"
    assert _finish(any_store, session.run_id, tools=[tool]).status == "COMPLETED"
    assert len(tool.calls) == 1


def test_an_id_factory_repeating_a_run_id_is_refused_naming_it_and_the_first_run_is_untouched(
    any_store: agentrt.Store,
) -> None:
    first = _driver(any_store, ScriptedAgent([Decision.complete({})]), new_id=Ids())
    done = first.start_sync("first")
    # A second program starting its counter from 1 again.
    second = _driver(any_store, ScriptedAgent([Decision.complete({})]), new_id=Ids())
    with pytest.raises(agentrt.RunStateError, match=f"run {done.id} already exists"):
        second.start_sync("second")
    (only,) = any_store.list_runs()
    assert (only.id, only.goal, only.status) == (done.id, "first", "COMPLETED")


# --- 5. a BaseException from the agent, the policy or an observer ---------------------------


class _Raises:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def decide(self, input: Any) -> Decision:
        raise self.error


class _RaisingPolicy:
    policy_id = "raising/1"

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def evaluate(self, request: Any, view: Any) -> Any:
        raise self.error


class _GeneratorExit(BaseException):
    """A BaseException that is neither KeyboardInterrupt nor SystemExit."""


@pytest.mark.parametrize(
    "error",
    [KeyboardInterrupt(), SystemExit(3), _GeneratorExit("own")],
    ids=["keyboard-interrupt", "system-exit", "own-base-exception"],
)
def test_an_agent_raising_a_base_exception_propagates_and_leaves_the_run_to_any_resume(
    any_store: agentrt.Store, error: BaseException
) -> None:
    with pytest.raises(type(error)):
        _driver(any_store, _Raises(error)).start_sync("decide")
    (run,) = any_store.list_runs()
    assert run.status == "RUNNING"
    # The record as it stands (the step's claim, kept for its next commit, was never
    # written, as a death before that commit leaves it); the lease given back.
    assert any_store.list_steps(run.id) == []
    assert any_store.lease_state(run.id).owner == ""
    assert _finish(any_store, run.id).status == "COMPLETED"


@pytest.mark.parametrize(
    "error", [KeyboardInterrupt(), SystemExit(3)], ids=["keyboard-interrupt", "system-exit"]
)
def test_a_policy_raising_a_base_exception_propagates_and_runs_nothing_and_gives_the_lease_back(
    any_store: agentrt.Store, error: BaseException
) -> None:
    tool = RecordingTool("note", SideEffect.LOCAL_MUTATION)
    agent = ScriptedAgent([Decision.tool_call("note", {"x": 1})])
    with pytest.raises(type(error)):
        _driver(any_store, agent, policy=_RaisingPolicy(error), tools=[tool]).start_sync("x")
    assert tool.calls == []
    (run,) = any_store.list_runs()
    assert run.status == "RUNNING"
    assert any_store.lease_state(run.id).owner == ""
    assert "step.tool_started" not in event_types(any_store, run.id)


@pytest.mark.parametrize("on", ["run.created", "step.started", "step.tool_finished"])
def test_an_observer_raising_keyboard_interrupt_propagates_and_gives_the_lease_back(
    any_store: agentrt.Store, on: str
) -> None:
    tool = RecordingTool("note", SideEffect.LOCAL_MUTATION)
    agent = ScriptedAgent([Decision.tool_call("note", {"x": 1}), Decision.complete({})])

    def observer(event: Any) -> None:
        if event.type == on:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _driver(any_store, agent, tools=[tool], observer=observer).start_sync("x")
    (run,) = any_store.list_runs()
    assert run.status == "RUNNING"
    assert any_store.lease_state(run.id).owner == ""
    finished = _finish(any_store, run.id, tools=[tool])
    if on == "step.started":
        # Delivered after the step's claim committed with its tool's start, before the
        # tool ran: the record says it may have run, and a person decides (never run on
        # its own).
        assert finished.status == "WAITING_FOR_APPROVAL"
        (approval,) = any_store.list_approvals(run.id)
        assert approval.kind == "interrupted_side_effect"
    else:
        assert finished.status == "COMPLETED"
    assert len(tool.calls) == (1 if on == "step.tool_finished" else 0)


def test_a_real_ctrl_c_while_a_tool_still_runs_keeps_the_lease_until_its_thread_returns(
    any_store: agentrt.Store,
) -> None:
    """A SIGINT landing while a tool's thread runs: the program stops (KeyboardInterrupt),
    and nobody may take the run over and start the call beside the thread, so the lease
    stays until the thread returns, then is given back; the call never runs twice."""
    release = threading.Event()

    def slow(call: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does, while this call runs
        release.wait(10)
        return agentrt.ToolResult(content={"ok": True})

    tool = RecordingTool("note", SideEffect.LOCAL_MUTATION, result=slow)
    agent = ScriptedAgent([Decision.tool_call("note", {"x": 1}), Decision.complete({})])
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            _driver(any_store, agent, tools=[tool]).start_sync("x")
    finally:
        signal.signal(signal.SIGINT, before)
        held = any_store.lease_state(any_store.list_runs()[0].id).owner
        release.set()
    (run,) = any_store.list_runs()
    assert run.status == "RUNNING"
    assert held != ""
    deadline = time.monotonic() + 10
    while any_store.lease_state(run.id).owner and time.monotonic() < deadline:
        time.sleep(0.01)
    assert any_store.lease_state(run.id).owner == ""
    again = _finish(any_store, run.id, tools=[tool])
    # The call started and its outcome was never recorded: a person decides (the seed's
    # contract), never the agent's next step. COMPLETED here would be a rerun's door.
    assert again.status == "WAITING_FOR_APPROVAL"
    (approval,) = any_store.list_approvals(run.id)
    assert approval.kind == "interrupted_side_effect"
    assert len(tool.calls) == 1


def test_a_tool_thread_left_by_an_earlier_timeout_does_not_hold_the_run_when_the_loop_stops(
    any_store: agentrt.Store,
) -> None:
    """Unlike a call a cancel or an interrupt broke into (its step in doubt, a person to
    decide), a call past its timeout is settled in the record, `timeout`, and let go
    (decision 0017): the live loop itself goes on, and its agent may call again beside
    the thread. So a loop that stops later gives the lease back at once, as one that
    pauses or ends does, and the next owner continues without asking anyone; the late
    result is never recorded. (Holding the lease for a thread that may never return, the
    case a timeout is for, would leave the run to nobody for the life of the process.)"""
    release = threading.Event()
    returned: list[bool] = []

    def hung(call: Any) -> Any:
        release.wait(30)
        returned.append(True)
        return agentrt.ToolResult(content={"late": True})

    tool = RecordingTool(
        "note", SideEffect.LOCAL_MUTATION, result=hung, timeout=timedelta(seconds=0.2)
    )
    decisions = iter([Decision.tool_call("note", {"x": 1})])

    def agent(input: Any) -> Any:
        step = next(decisions, None)
        if step is None:
            raise KeyboardInterrupt  # the next step's agent: the loop stops
        return step

    try:
        with pytest.raises(KeyboardInterrupt):
            _driver(any_store, agent, tools=[tool]).start_sync("x")
        (run,) = any_store.list_runs()
        assert returned == []  # the timed-out call's thread still runs
        assert any_store.lease_state(run.id).owner == ""
        (step,) = any_store.list_steps(run.id)
        assert step.status == "failed"
        assert step.observation is not None
        timed_out = {"tool": "note", "error": "timed out after 0.2s", "failure": "timeout"}
        assert step.observation.content == timed_out
        again = _finish(any_store, run.id, tools=[tool])
        assert again.status == "COMPLETED"
        assert any_store.list_approvals(run.id) == []
    finally:
        release.set()
    assert len(tool.calls) == 1
    deadline = time.monotonic() + 30
    while not returned and time.monotonic() < deadline:
        time.sleep(0.01)
    assert returned == [True]
    (first, _) = any_store.list_steps(run.id)
    assert first.observation is not None and first.observation.content == timed_out
    assert event_types(any_store, run.id).count("step.tool_finished") == 1  # never the late one


# --- 6. a begin that failed: a lease given back only if the run was made --------------------


RUN_ID = "e" * 32


def _begin(kind: str, store: agentrt.Store, observer: Any = None) -> None:
    tool = RecordingTool("note", SideEffect.LOCAL_MUTATION)
    if kind == "gate":
        gate = agentrt.Gate(
            store=store,
            policy=_AllowAll(),
            tools=[tool],
            now=FakeClock(),
            new_id=Ids(),
            observer=observer,
        )
        gate.begin_sync("x", run_id=RUN_ID)
    else:
        agent = ScriptedAgent([Decision.complete({})])
        _driver(store, agent, tools=[tool], observer=observer).start_sync("x", run_id=RUN_ID)


@pytest.mark.parametrize("kind", ["gate", "driver"])
def test_a_begin_that_made_no_run_logs_no_lease_to_give_back(
    database: str, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    store = agentrt.open_store(database)
    store.close()
    caplog.set_level(logging.DEBUG, logger="agentrt")
    with pytest.raises(StoreError, match="the store is closed"):
        _begin(kind, store)
    # No run was made, so there was no lease: nothing said of giving one back.
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == []
    with agentrt.open_existing(database, read_only=True) as reader:
        assert reader.list_runs() == []


@pytest.mark.parametrize("kind", ["gate", "driver"])
def test_a_begin_that_made_its_run_and_could_not_give_the_lease_back_logs_it(
    database: str, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    store = agentrt.open_store(database)

    def observer(event: Any) -> None:
        if event.type == "run.created":  # made and committed; then the store goes away
            store.close()
            raise KeyboardInterrupt

    caplog.set_level(logging.DEBUG, logger="agentrt")
    with pytest.raises(KeyboardInterrupt):
        _begin(kind, store, observer)
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "agentrt",
            "WARNING",
            f"could not give back the lease on run {RUN_ID} after its start failed; it will expire",
        )
    ]
    with agentrt.open_existing(database, read_only=True) as reader:
        assert reader.lease_state(RUN_ID).owner != ""


# --- 7. a cancelled loop whose kept tool ended before it let go -----------------------------


def test_a_cancelled_loop_whose_kept_tool_thread_returned_gives_the_lease_back_before_it_raises(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Driver's loop is cancelled mid-call; the tool's thread, kept for the lease, returns
    while the cancel's outcome is being committed (the commit held until it has). Nothing of
    the loop runs any more when it lets go: the lease is given back and the run freed before
    `start` raises, so the driver's resume right after is not refused. Before, the give back
    was handed to the kept thread's callback, run on an I/O thread after `start` had raised
    ("this driver is already executing run …", the lease still held). What is handed off the
    loop is held here until the test has looked: no thread is raced."""
    import asyncio

    from agentrt import _gate
    from support.gates import hold_next_group

    started, release, returned = threading.Event(), threading.Event(), threading.Event()

    def blocking(call: Any) -> Any:
        started.set()
        assert release.wait(30)
        returned.set()
        return agentrt.ToolResult(content={"ok": True})

    tool = RecordingTool("note", SideEffect.LOCAL_MUTATION, result=blocking)
    agent = ScriptedAgent([Decision.tool_call("note", {"x": 1}), Decision.complete({})])
    driver = _driver(any_store, agent, tools=[tool])
    held: list[Any] = []  # what was handed off the loop, run once the test has looked
    loop = asyncio.new_event_loop()
    try:
        running = loop.create_task(driver.start("x"))
        assert loop.run_until_complete(loop.run_in_executor(None, started.wait, 30))
        (run,) = any_store.list_runs()
        entered, go = hold_next_group(any_store, commit="before")  # the cancel's outcome
        running.cancel()
        assert loop.run_until_complete(loop.run_in_executor(None, entered.wait, 30))
        release.set()
        assert returned.wait(30)  # the kept thread has returned: nothing runs any more
        monkeypatch.setattr(_gate, "off_the_loop", held.append)
        go.set()
        with pytest.raises(asyncio.CancelledError):
            loop.run_until_complete(running)
        assert any_store.lease_state(run.id).owner == "", (
            "the cancelled loop returned before it gave the lease back, its tool's thread ended"
        )
        again = loop.run_until_complete(driver.resume(run.id))
        # The call's outcome is unknown (cancelled mid-call): a person decides.
        assert again.status == "WAITING_FOR_APPROVAL"
        assert len(tool.calls) == 1
    finally:
        release.set()
        for fn in held:
            fn()
        loop.close()
