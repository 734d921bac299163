"""The lease: one owner per running run, renewed by a heartbeat, guarding every write.

The heartbeat keeps the lease through a long tool call and a held connection;
owners are distinct by name and suffix; the epoch fences tools.

`RunSession.require_lease` is the guard every loop write goes through. These
tests take the lease away at each point of a step, the way a second driver
would (its takeover, or the write its takeover makes on the run's row), and
show that the loop's next write raises `LeaseLostError` and writes nothing:
the rows are exactly as the new owner left them, and no tool starts.

The tests that take `database` (or `any_store`) run on SQLite and on PostgreSQL (issue
21 item 5). A lease there runs out by its stored expiry moved into the past
(`expire_lease`): PostgreSQL judges it by the server's clock, which no test can move.
Two stay on SQLite: the long tool call and the cancelled loop judge the lease on an
injected wall clock (`MovableWall`) that PostgreSQL does not honour (a lease several
lengths long in real time there would be a sleep, and a race with the load).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
import crashing_child as child
from agentrt import (
    Decision,
    LeaseLostError,
    PolicyDecision,
    RunLeasedError,
    RunView,
    SideEffect,
    StepInput,
    ToolCall,
    ToolRequest,
    ToolResult,
)
from agentrt._clock import format_time, wall_clock
from agentrt._model import Message, ModelRequest, ModelResponse, TextBlock, Usage
from agentrt._takeover import take_over
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.crashes import crash, resumer
from support.leases import (
    MovableWall,
    expire_lease,
    stored_expiry,
    take_in,
    wait_for_renewal,
)
from support.rows import query, snapshot

THIEF = "thief/000000000000"


class Thief:
    """Takes a RUNNING run's lease with the write a second driver's takeover makes."""

    def __init__(self, db_path: Path | str) -> None:
        self.db_path = db_path
        self.after: list[tuple[Any, ...]] | None = None

    def steal(self, run_id: str) -> None:
        assert self.after is None, "the lease is stolen once"
        other = agentrt.open_existing(str(self.db_path))
        try:
            with other.transaction() as tx:
                take_in(
                    tx,
                    run_id,
                    THIEF,
                    timedelta(minutes=5),
                    wall_clock,
                    from_status="RUNNING",
                )
        finally:
            other.close()
        self.after = snapshot(self.db_path)

    def assert_nothing_written_since(self, run_id: str) -> None:
        assert self.after is not None, "the lease was never stolen"
        assert snapshot(self.db_path) == self.after
        ((owner,),) = query(self.db_path, "SELECT lease_owner FROM runs WHERE id = ?", (run_id,))
        assert owner == THIEF


class Policy:
    """Answers `outcome`; steals the lease while it is being asked, when told to."""

    policy_id = "guard-test"

    def __init__(self, outcome: PolicyDecision, thief: Thief | None = None) -> None:
        self.outcome = outcome
        self.thief = thief

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        if self.thief is not None:
            self.thief.steal(request.run_id)
        return self.outcome


class OneReply:
    name = "fake:model"

    def __init__(self, on_generate: Callable[[], None] | None = None) -> None:
        self.on_generate = on_generate
        self.requests = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        if self.on_generate is not None:
            self.on_generate()
        return ModelResponse(
            text="ok", tool_uses=[], stop_reason="end_turn", usage=Usage(10, 5, 0), raw=b"{}"
        )


REQUEST = ModelRequest(system="", messages=[Message("user", [TextBlock("hi")])])

ALLOW = PolicyDecision.allow()


def guarded_run(
    db_path: Path | str,
    case: str,
) -> tuple[Thief, RecordingTool, Callable[[], agentrt.Run]]:
    """A driver set up so that the lease is stolen just before the write `case` names."""
    store = agentrt.open_store(str(db_path))
    thief = Thief(db_path)
    tool = RecordingTool("t", SideEffect.LOCAL_MUTATION)
    decisions: list[Any] = [Decision.tool_call("t", {"x": 1}), Decision.complete("done")]
    policy = Policy(ALLOW)
    probe_point = ""
    model: Any = None
    limits = agentrt.Limits()
    current: dict[str, str] = {}

    def steal_current() -> None:
        thief.steal(current["run_id"])

    if case == "begin step":
        probe_point = "step.tool_finished"
    elif case == "begin step at a limit":
        probe_point = "step.tool_finished"
        limits = agentrt.Limits(max_steps=1)
    elif case == "record decision":

        def stealing(input: StepInput) -> Decision:
            thief.steal(input.run.id)
            return Decision.tool_call("t", {"x": 1})

        decisions[0] = stealing
    elif case == "invalid decision":
        decisions[0] = Decision.tool_call("no-such-tool", {})
        probe_point = "step.decided"
    elif case in ("complete", "fail"):
        # Stolen while the agent decides: its ending, the step's one commit (with the
        # step's claim and decision, decision 0088), is refused.
        ending = Decision.complete("done") if case == "complete" else Decision.fail("given up")

        def stealing_then_ending(input: StepInput) -> Decision:
            thief.steal(input.run.id)
            return ending

        decisions[0] = stealing_then_ending
    elif case == "agent error":

        def raising(input: StepInput) -> Decision:
            thief.steal(input.run.id)
            raise RuntimeError("the agent broke")

        decisions[0] = raising
    elif case == "deny":
        policy = Policy(PolicyDecision.deny("no"), thief)
    elif case == "abort":
        policy = Policy(PolicyDecision.abort("stop"), thief)
    elif case == "pause":
        policy = Policy(
            PolicyDecision.require_approval("review", "a person decides", {"t": 1}, {"t": 1}), thief
        )
    elif case == "policy error":
        policy = Policy(PolicyDecision(outcome="bogus"), thief)
    elif case == "tool started":
        policy = Policy(ALLOW, thief)
    elif case == "tool finished":

        def stealing_tool(call: ToolCall) -> ToolResult:
            thief.steal(call.run_id)
            return ToolResult(content={"done": True})

        tool.result = stealing_tool
    elif case == "model dispatch":
        model = OneReply()

        async def asks_after_theft(input: StepInput) -> Decision:
            thief.steal(input.run.id)
            assert input.model is not None
            await input.model.generate(REQUEST)
            return Decision.complete("done")

        decisions[0] = asks_after_theft
    else:
        raise AssertionError(case)

    def probe(point: str, session: Any) -> None:
        if point == probe_point and thief.after is None:
            thief.steal(session.run_id)

    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(decisions),
        policy=policy,  # type: ignore[arg-type]
        tools=[tool],
        model=model,
        now=FakeClock(),
        new_id=Ids(),
        probe=probe,
    )
    run_id = Ids("b")()
    current["run_id"] = run_id

    def start() -> agentrt.Run:
        try:
            return driver.start_sync("goal", limits=limits, run_id=run_id)
        finally:
            store.close()

    return thief, tool, start


LOOP_WRITES = [
    "begin step",
    "begin step at a limit",
    "record decision",
    "invalid decision",
    "complete",
    "fail",
    "agent error",
    "deny",
    "abort",
    "pause",
    "policy error",
    "tool started",
    "tool finished",
    "model dispatch",
]


@pytest.mark.parametrize("case", LOOP_WRITES)
def test_every_loop_write_refuses_a_lease_held_by_someone_else(database: str, case: str) -> None:
    thief, tool, start = guarded_run(database, case)
    with pytest.raises(LeaseLostError):
        start()
    thief.assert_nothing_written_since(Ids("b")())
    expected_calls = 1 if case in ("begin step", "begin step at a limit", "tool finished") else 0
    assert len(tool.calls) == expected_calls


class Died(BaseException):
    """Stands for the process dying (nothing in the loop catches a BaseException)."""


class DyingTool:
    """A local mutation; its process dies once it started (a probe): the step stays `executing`."""

    def __init__(self) -> None:
        self.spec = agentrt.ToolSpec(
            name="t",
            description="mutates",
            input_schema={"type": "object"},
            side_effect=SideEffect.LOCAL_MUTATION,
            timeout=timedelta(seconds=5),
        )

    async def call(self, call: ToolCall) -> ToolResult:
        raise Died()


AFTER_TAKEOVER = {
    # name: (where the first process died, the reconcile of the second driver)
    "continue after an interrupted decision": ("deciding", None),
    "pause on an interrupted side effect": ("executing", None),
    "end on a reconcile conflict": (
        "executing",
        lambda view: agentrt.Reconciliation.conflict("the consumer says no"),
    ),
}


@pytest.mark.parametrize("case", list(AFTER_TAKEOVER))
def test_the_writes_after_a_takeover_refuse_a_lease_held_by_someone_else(
    database: str, case: str
) -> None:
    """A resume's own writes after the takeover are guarded too."""
    db_path = database
    died_while, reconcile = AFTER_TAKEOVER[case]

    async def dies(input: StepInput) -> Decision:
        # Dies after its model request's dispatch committed the step's claim (decision
        # 0088): the step is durable `deciding`, as a death while deciding leaves it.
        assert input.model is not None
        await input.model.generate(REQUEST)
        raise Died()

    def dies_once_the_tool_started(point: str, session: Any) -> None:
        # A tool's own exceptions, BaseExceptions included, are its recorded outcome;
        # a process dying is a crash point of the loop's.
        if point == "step.tool_started":
            raise Died()

    store = agentrt.open_store(str(db_path))
    first = agentrt.Driver(
        store=store,
        agent=dies if died_while == "deciding" else ScriptedAgent([Decision.tool_call("t", {})]),
        policy=agentrt.default_policy(),
        tools=[DyingTool()],
        model=OneReply() if died_while == "deciding" else None,
        now=FakeClock(),
        new_id=Ids(),
        probe=dies_once_the_tool_started,
    )
    with pytest.raises(Died):
        first.start_sync("goal")
    (run,) = store.list_runs(10)
    (step,) = store.list_steps(run.id)
    assert (run.status, step.status) == ("RUNNING", died_while)
    expire_lease(db_path, run.id)  # the first process is gone: its lease runs out
    thief = Thief(db_path)

    def probe(point: str, session: Any) -> None:
        if point == "step.interrupted":
            thief.steal(session.run_id)

    second = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.complete("done")] * 2),
        policy=agentrt.default_policy(),
        tools=[DyingTool()],
        reconcile=reconcile,
        now=FakeClock(),
        new_id=Ids("c"),
        probe=probe,
    )
    with pytest.raises(LeaseLostError):
        second.resume_sync(run.id)
    thief.assert_nothing_written_since(run.id)
    assert [s.status for s in store.list_steps(run.id)] == ["interrupted"]
    assert store.list_approvals(run.id) == []
    store.close()


def test_a_takeover_while_the_agent_decides_starts_no_tool_and_raises_lease_lost(
    database: str,
) -> None:
    """Another driver takes the run over, through its real takeover, while this
    driver's agent is deciding: the decision is not recorded and no tool starts."""
    db_path = database
    store = agentrt.open_store(str(db_path))
    other_store = agentrt.open_existing(str(db_path))
    tool = RecordingTool("t", SideEffect.READ_ONLY)
    other = agentrt.Driver(
        store=other_store,
        agent=ScriptedAgent([]),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids("c"),
    )
    taken: dict[str, Any] = {}

    async def decide(input: StepInput) -> Decision:
        # This driver's live lease expired, as it would after a stall of an hour (its
        # hour-long lease means no heartbeat renews it meanwhile).
        expire_lease(db_path, input.run.id)
        session = await take_over(other._config, input.run.id)
        session.stop_heartbeat()
        taken["epoch"] = session.epoch
        taken["rows"] = snapshot(db_path)
        return Decision.tool_call("t", {"x": 1})

    driver = agentrt.Driver(
        store=store,
        agent=decide,
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
        lease_ttl=timedelta(hours=1),
    )
    with pytest.raises(LeaseLostError, match="is now leased by"):
        driver.start_sync("goal")
    assert tool.calls == []
    assert snapshot(db_path) == taken["rows"]
    (run,) = store.list_runs(10)
    assert store.lease(run.id).owner == other.lease_owner
    assert store.lease(run.id).epoch == taken["epoch"] == 2
    # The step being decided was kept in memory (decision 0088): the takeover found no
    # step in flight, and the refused commit wrote nothing of it.
    events = [e.type for e in store.list_events(run_id=run.id)]
    assert events == [
        "run.created",
        "run.started",
        "lease.taken_over",
        "run.resumed",
    ]
    assert store.list_steps(run.id) == []
    other_store.close()
    store.close()


# SQLite only: the lease is judged on an injected wall clock, which PostgreSQL ignores.
def test_lease_long_tool_call_keeps_the_lease(db_path: Path) -> None:
    """A tool call several lease lengths long keeps its lease: nobody can take the run."""
    store = agentrt.open_store(db_path)
    refusals: list[RunLeasedError] = []
    # Leases are judged on a clock the test moves, so a slow machine cannot lapse one;
    # the heartbeat renews on real time, and the test waits for each renewal.
    wall = MovableWall()
    other = agentrt.Driver(
        store=agentrt.open_store(db_path),
        agent=ScriptedAgent([]),
        policy=agentrt.default_policy(),
        lease_owner="other",
        wall=wall,
    )

    def long_call(call: ToolCall) -> ToolResult:
        for _ in range(4):  # four lease lengths in all
            wall.advance(timedelta(milliseconds=300))
            wait_for_renewal(lambda: stored_expiry(db_path, call.run_id), format_time(wall()))
            try:
                other.resume_sync(call.run_id)
            except RunLeasedError as exc:
                refusals.append(exc)
        return ToolResult({"done": True})

    slow = RecordingTool("slow", SideEffect.LOCAL_MUTATION, result=long_call)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("slow", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[slow],
        lease_ttl=timedelta(milliseconds=300),
        wall=wall,
    )
    run = driver.start_sync("long")
    assert run.status == "COMPLETED"
    assert len(refusals) == 4
    expiries = [r.expires_at for r in refusals]
    assert expiries == sorted(expiries) and len(set(expiries)) >= 3  # renewed meanwhile
    assert "lease.taken_over" not in event_types(store, run.id)


def test_lease_held_connection_does_not_starve_the_heartbeat(
    any_store: agentrt.Store, database: str
) -> None:
    """The consumer holds the store's own connection (its lock) through a long tool call;
    the heartbeat renews on a connection of its own all the same."""
    store = any_store
    seen: list[str] = []

    def hold_the_connection(call: ToolCall) -> ToolResult:
        def read_expiry() -> str:
            return stored_expiry(database, call.run_id)  # on a connection of the test's

        with store._lock:  # what a consumer holding the connection does to other users
            seen.append(read_expiry())
            for _ in range(2):  # two renewals while it is held, however long they take
                seen.append(wait_for_renewal(read_expiry, seen[-1]))
        return ToolResult({"held": True})

    tool = RecordingTool("hold", SideEffect.LOCAL_MUTATION, result=hold_the_connection)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("hold", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
        lease_ttl=timedelta(milliseconds=300),
    )
    run = driver.start_sync("hold")
    assert run.status == "COMPLETED"
    assert len(set(seen)) >= 3, seen  # the expiry moved while the connection was held


def test_lease_same_lease_owner_name_is_two_owners(any_store: agentrt.Store) -> None:
    store = any_store
    a = agentrt.Driver(
        store=store, agent=ScriptedAgent([]), policy=agentrt.default_policy(), lease_owner="replica"
    )
    b = agentrt.Driver(
        store=store, agent=ScriptedAgent([]), policy=agentrt.default_policy(), lease_owner="replica"
    )
    assert a.lease_owner != b.lease_owner
    assert a.lease_owner.startswith("replica/") and len(a.lease_owner) == len("replica/") + 12
    unnamed = agentrt.Driver(store=store, agent=ScriptedAgent([]), policy=agentrt.default_policy())
    assert len(unnamed.lease_owner) == 32


def test_a_live_owners_late_result_after_a_real_takeover_is_not_recorded(
    any_store: agentrt.Store, database: str
) -> None:
    """The essay's takeover with the first owner still alive: its charge stalled past the
    lease, another driver took the run over by its real resume (the call interrupted, a
    person asked), then the charge returns. Its result is not recorded, the approval
    stands, and the first loop raises `LeaseLostError` having started nothing else."""
    store = any_store
    taken: dict[str, Any] = {}

    def stalls_then_returns(call: ToolCall) -> ToolResult:
        # Stalled an hour (its hour-long lease: no heartbeat renewed it meanwhile).
        expire_lease(database, call.run_id)
        other = agentrt.Driver(
            store=agentrt.open_existing(database),
            agent=ScriptedAgent([]),
            policy=agentrt.default_policy(),
            tools=[charge, after],
            lease_owner="other",
        )
        taken["run"] = other.resume_sync(call.run_id)
        taken["rows"] = snapshot(database)
        return ToolResult({"charged": True})

    charge = RecordingTool("charge", SideEffect.LOCAL_MUTATION, result=stalls_then_returns)
    after = RecordingTool("after", SideEffect.LOCAL_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("charge", {}), Decision.tool_call("after", {})]),
        policy=agentrt.default_policy(),
        tools=[charge, after],
        lease_owner="first",
        lease_ttl=timedelta(hours=1),
    )
    with pytest.raises(LeaseLostError):
        driver.start_sync("charge once")
    assert taken["run"].status == "WAITING_FOR_APPROVAL"
    assert snapshot(database) == taken["rows"]  # nothing written after the takeover
    (run,) = store.list_runs(10)
    (step,) = store.list_steps(run.id)
    assert (run.status, step.status) == ("WAITING_FOR_APPROVAL", "awaiting_approval")
    (approval,) = store.pending_approvals(run.id)
    assert approval.kind == "interrupted_side_effect"
    types = event_types(store, run.id)
    assert "step.tool_finished" not in types
    assert types[-4:] == [
        "lease.taken_over",
        "step.interrupted",
        "step.policy",
        "approval.requested",
    ]
    assert (len(charge.calls), after.calls) == (1, [])


def test_lease_epoch_grows_with_every_new_owner_and_reaches_tools(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)
    assert store.lease(run_id).epoch == 1
    driver = resumer(store, db_path)
    run = driver.resume_sync(run_id)  # pauses on the interrupted side effect
    assert store.lease(run_id).owner == ""  # released by the pause
    (approval,) = store.pending_approvals(run.id)
    agentrt.approve(store, run.id, approval.id, by="ops")
    driver.resume_sync(run.id)
    lines = child.journal_lines(db_path)
    assert [line.split()[-1] for line in lines] == ["epoch=1", "epoch=3"]
    assert store.lease(run_id).epoch == 3  # the takeover, then the resume after approval


def test_lease_holder_in_another_pid_namespace_proves_nothing() -> None:
    from agentrt import _lease as lease

    dead_pid = 2**22 + 12345  # beyond pid_max: no such process here
    record = lease.holder_record()
    assert lease.prove_dead(json.dumps({**record, "pid": dead_pid, "start": "1"})) == {
        "host": record["host"],
        "pid": dead_pid,
        "start": "1",
        "proof": "no such process",
    }
    for other in ({"pidns": "pid:[4026531999]"}, {"boot": "another-boot"}, {"pidns": ""}):
        assert (
            lease.prove_dead(json.dumps({**record, "pid": dead_pid, "start": "1", **other})) is None
        )


# SQLite only: the lease is judged on an injected wall clock, which PostgreSQL ignores.
def test_lease_a_cancelled_loop_keeps_its_lease_while_its_tool_thread_still_runs(
    db_path: Path,
) -> None:
    """A plain-function tool cannot be stopped: after the caller cancels the loop, the run
    must not be taken over (and the call started again) while the first call still runs."""
    import asyncio

    store = agentrt.open_store(db_path)
    started = threading.Event()
    release = threading.Event()

    def charge(call: ToolCall) -> ToolResult:
        started.set()
        assert release.wait(20)
        return ToolResult({"charged": True})

    tool = RecordingTool("charge", SideEffect.REMOTE_MUTATION, result=charge)
    allow_all = child.policy()
    wall = MovableWall()  # leases judged on the test's clock: no load lapses one
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("charge", {})]),
        policy=allow_all,
        tools=[tool],
        lease_ttl=timedelta(milliseconds=300),
        wall=wall,
    )

    async def cancel_mid_call() -> None:
        task = asyncio.create_task(driver.start("g"))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_call())
    (run,) = store.list_runs()
    other = agentrt.Driver(
        store=agentrt.open_store(db_path),
        agent=ScriptedAgent([]),
        policy=allow_all,
        tools=[tool],
        wall=wall,
    )
    wall.advance(timedelta(seconds=1))  # more than three lease lengths: still renewed
    wait_for_renewal(lambda: stored_expiry(db_path, run.id), format_time(wall()))
    with pytest.raises(RunLeasedError):
        other.resume_sync(run.id)
    release.set()
    deadline = time.monotonic() + 10
    while store.lease(run.id).owner and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.lease(run.id).owner == ""  # given back once the thread returned
    resumed = other.resume_sync(run.id)
    assert resumed.status == "WAITING_FOR_APPROVAL"
    assert store.pending_approvals(run.id)[0].kind == "interrupted_side_effect"
    assert len(tool.calls) == 1


def test_lease_lapsed_lease_starts_no_model_request(
    any_store: agentrt.Store, database: str
) -> None:
    from agentrt._model import Message, ModelConfig, ModelRequest, TextBlock

    store = any_store
    sent: list[Any] = []

    class Model:
        name = "m"

        async def generate(self, request: Any) -> Any:
            sent.append(request)
            raise AssertionError("never sent")

    async def stall_then_ask(input: agentrt.StepInput) -> Decision:
        # The loop stalled past its lease (an hour long: no heartbeat renews it meanwhile),
        # and nobody took it.
        expire_lease(database, input.run.id, holder_elsewhere=False)
        await input.model.generate(
            ModelRequest("", [Message("user", [TextBlock("hi")])], max_output_tokens=10)
        )
        return Decision.complete()

    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([stall_then_ask]),
        policy=agentrt.default_policy(),
        model=ModelConfig(model=Model()),
        lease_ttl=timedelta(hours=1),
    )
    with pytest.raises(agentrt.LeaseLostError, match="lapsed"):
        driver.start_sync("g")
    assert sent == []
    (run,) = store.list_runs()
    assert store.list_model_calls(run.id) == []
