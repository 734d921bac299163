"""A takeover acts on the run as it is when it takes the lease (decision 0134).

`take_over` loads the run, then takes its lease in a transaction of its own, and the
interruption contract acts on the steps loaded. Another process that took the run over in
between, went on past the interrupted step and settled a later one, then gave the lease
back, left those steps behind the record: the contract paused the interrupted step for a
person although the run had gone on from it (found by a review of decision 0133, whose
known prefixes rely on an interrupted step behind a later one never being written). The
take now checks that the run is as loaded (the lease's epoch, the run row) and loads it
again when it is not. The last step loaded is compared too: a holder whose lease lapsed may
still write its own step (a policy's denial) without changing the run row.

The window is opened by running the other process's work inside the first one's load
(`_takeover.load`), on a thread of its own with a store of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, PolicyDecision, Reconciliation
from agentrt import _session as session_module
from agentrt import _takeover as takeover_module
from agentrt._records import Step
from conftest import FakeClock, Ids, event_types
from support.leases import expire_lease
from support.models import TINY_REQUEST, Replies
from support.policies import FixedPolicy
from support.tools import read_tool


def recorded(store: agentrt.Store, run_id: str) -> list[Step]:
    return store.steps_from(run_id, 0, 10_000)


class World:
    """What a consumer's reconcile asks: the outside world, whose answer may change."""

    def __init__(self) -> None:
        self.answer = "continue"
        self.cut_off = threading.Event()  # the call on page 1 has begun

    def reconcile(self, view: agentrt.RunView) -> Reconciliation:
        if self.answer == "continue":
            return Reconciliation.continue_run("the read was harmless")
        return Reconciliation.waiting(
            PolicyDecision.require_approval("check", "ask a person about the cut-off read")
        )


def gate_of(store: agentrt.Store, owner: str, world: World, ids: str) -> agentrt.Gate:
    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    async def look(n: int) -> dict[str, object]:
        """Look at page n (page 1 never answers)."""
        if n == 1:
            world.cut_off.set()
            await asyncio.sleep(3600)
        return {"n": n}

    return agentrt.Gate(
        store=store,
        policy=agentrt.default_policy(),
        tools=[look],
        now=FakeClock(),
        new_id=Ids(prefix=ids),
        lease_owner=owner,
        reconcile=world.reconcile,
    )


def cut_off_run(gate: agentrt.Gate, world: World) -> str:
    """A run whose step 0 is done and whose step 1's call was cut off by its caller: step 1
    `interrupted`, the run RUNNING, its lease given back."""

    async def main() -> str:
        session = await gate.begin("look", agentrt.Limits(max_steps=50))
        for n in (0, 1):
            step = await session.step()
            assert step is not None
            assert (await step.propose(Decision.tool_call("look", {"n": n}))).outcome == "allowed"
            if n == 0:
                await step.execute()
        task = asyncio.create_task(step.execute())
        while not world.cut_off.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await session.close()
        return session.run_id

    return asyncio.run(main())


def in_its_load(
    monkeypatch: pytest.MonkeyPatch, gate: agentrt.Gate, meanwhile: Callable[[str], None]
) -> list[int]:
    """Run `meanwhile(run_id)` inside each of `gate`'s takeover loads, on another thread (as
    another process would, between the load and the take); returns the loads counted."""
    real = takeover_module.load
    loads: list[int] = []

    def load(config: Any, run_id: str) -> Any:
        loaded = real(config, run_id)
        if config is gate._config:
            loads.append(len(loads))
            with concurrent.futures.ThreadPoolExecutor(1) as worker:
                worker.submit(meanwhile, run_id).result()
        return loaded

    monkeypatch.setattr(takeover_module, "load", load)
    return loads


def test_a_takeover_whose_run_went_on_meanwhile_acts_on_the_run_as_it_is(
    any_store: agentrt.Store, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, world = any_store, World()
    run_id = cut_off_run(gate_of(store, "origin", world, "c"), world)
    assert [s.status for s in recorded(store, run_id)] == ["done", "interrupted"]
    assert store.lease(run_id).owner == ""
    other_store = agentrt.open_store(database)
    other, first = gate_of(other_store, "bravo", world, "b"), gate_of(store, "alpha", world, "a")

    def bravo_goes_on(rid: str) -> None:
        if world.answer != "continue":
            return  # once only
        # Bravo takes the run over (its reconcile: go on), settles step 2, gives the lease
        # back and attaches once more: what its Gate keeps runs past step 1 (0133).
        session, verdict = other.attach_sync(rid)
        assert verdict is None
        step = session.step_sync()
        assert step is not None
        assert step.propose_sync(Decision.tool_call("look", {"n": 2})).outcome == "allowed"
        step.execute_sync()
        session.close_sync()
        session, _ = other.attach_sync(rid)
        session.close_sync()
        world.answer = "waiting"  # the outside world's answer changes

    try:
        loads = in_its_load(monkeypatch, first, bravo_goes_on)
        attached, verdict = first.attach_sync(run_id)
        attached.close_sync()
        # Alpha judged the run as it is: nothing in doubt (step 2 done), and a reconcile
        # that asks to wait for a call when none was executing ends the run, as it always
        # has; step 1, behind a later step, is not written again.
        assert verdict is not None and verdict.outcome == "ended"
        run = store.get_run(run_id)
        assert (run.status, run.reason) == ("FAILED", "reconcile_conflict")
        steps = recorded(store, run_id)
        assert [s.status for s in steps] == ["done", "interrupted", "done"]
        assert store.pending_approvals(run_id) == []
        assert loads == [0, 1]  # the run moved after the first load: loaded again
        # What bravo's Gate keeps of the run is what the record holds.
        _, held, _ = session_module.load(other._config, run_id)
        assert list(held) == steps
        # After step 1's cut-off: bravo's takeover and step, its second attach, alpha's end.
        assert event_types(store, run_id)[12:] == [
            "run.resumed",
            "step.started",
            "step.decided",
            "step.policy",
            "step.tool_started",
            "step.tool_finished",
            "run.resumed",
            "run.finished",
        ]
    finally:
        other_store.close()


def test_a_takeover_of_a_run_that_keeps_changing_gives_up_having_written_nothing(
    any_store: agentrt.Store, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, world = any_store, World()
    run_id = cut_off_run(gate_of(store, "origin", world, "c"), world)
    other_store = agentrt.open_store(database)
    other, first = gate_of(other_store, "bravo", world, "b"), gate_of(store, "alpha", world, "a")

    def bravo_attaches(rid: str) -> None:
        session, _ = other.attach_sync(rid)  # takes the run (its epoch moves), gives it back
        session.close_sync()

    try:
        loads = in_its_load(monkeypatch, first, bravo_attaches)
        before = event_types(store, run_id)
        with pytest.raises(agentrt.RunStateError) as raised:
            asyncio.run(first.attach(run_id))  # through the group committer this time
        assert str(raised.value) == (
            f"run {run_id} changed 3 times while it was being taken over (another process is "
            "working on it); nothing was taken"
        )
        assert loads == [0, 1, 2]
        # Only bravo's three attaches wrote: alpha took nothing.
        events = store.list_events(run_id=run_id, limit=100_000)
        assert len(events) > len(before)
        assert not [e for e in events if "alpha" in str(e.payload)]
        assert store.lease(run_id).owner == ""
        assert [s.status for s in recorded(store, run_id)] == ["done", "interrupted"]
    finally:
        other_store.close()


def test_a_denial_by_a_holder_whose_lease_lapsed_inside_the_load_is_seen_by_the_takeover(
    any_store: agentrt.Store, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder stalled past its lease (not dead) wakes up between the takeover's load and
    its take, and its policy denies its step's call: the step `failed`, the run row
    unchanged. The takeover loads again and hands out the step as recorded (found by a
    review of decision 0134: the session held it `deciding`, with no decision)."""
    store, read, clock = any_store, read_tool(), FakeClock()
    stalled = agentrt.Gate(
        store=store,
        policy=FixedPolicy(agentrt.PolicyDecision.deny("not now")),
        tools=[read],
        now=clock,
        new_id=Ids("a"),
        lease_ttl=timedelta(hours=1),  # its heartbeat renews nothing meanwhile
        lease_owner="stalled",
        model=Replies(),
    )
    orphan = stalled.begin_sync("read it")
    step = orphan.step_sync()
    assert step is not None and step.model is not None
    # Its model call commits the step's claim: `deciding` on the record.
    asyncio.run(step.model.generate(TINY_REQUEST))
    run_id = orphan.run.id
    expire_lease(database, run_id)  # it stalled past its lease; nobody took it yet
    rescuer = agentrt.Gate(
        store=store,
        policy=agentrt.default_policy(),
        tools=[read],
        now=clock,
        new_id=Ids("b"),
        lease_owner="rescuer",
    )
    verdicts: list[str] = []

    def denied(rid: str) -> None:
        if not verdicts:  # the stalled holder wakes up once
            verdicts.append(step.propose_sync(Decision.tool_call("read", {})).outcome)

    loads = in_its_load(monkeypatch, rescuer, denied)
    session, _ = rescuer.attach_sync(run_id)
    try:
        assert verdicts == ["denied"]
        on_record = recorded(store, run_id)
        assert [s.status for s in on_record] == ["failed"]
        assert on_record[0].observation is not None
        assert on_record[0].observation.kind == "policy_denied"
        assert [s.status for s in session.input().steps] == ["failed"]
        assert list(session._rs.steps) == on_record
        assert loads == [0, 1]  # the step moved after the first load: loaded again
    finally:
        session.close_sync()
        orphan.close_sync()
