"""The Driver is a Gate plus an agent: the same decisions through the Driver and
through a hand-written loop over a Gate give identical rows, events (with their
hashes) and clock readings."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import agentrt
from agentrt import Decision, GateSession, VerdictOutcome
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids
from support.tools import make_tools


def decisions() -> list[Any]:
    return [
        Decision.tool_call("read", {"x": 1}),
        Decision.tool_call("push", {"x": "seven"}),
        Decision.tool_call("rm", {"x": 2}),
        Decision.tool_call("push", {"x": 3}),
        Decision.complete({"done": True}),
    ]


class Recording(FakeClock):
    """A fake clock that keeps every reading it gave."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[Any] = []

    def __call__(self) -> Any:
        self.given.append(super().__call__())
        return self.given[-1]


def record(store: agentrt.Store, run_id: str) -> tuple[Any, ...]:
    run = store.get_run(run_id)
    return (
        run,
        store.list_steps(run_id),
        store.list_approvals(run_id),
        store.list_events(run_id=run_id, limit=10_000),
    )


def through_the_driver(db: Path, clock: Recording) -> tuple[Any, ...]:
    store = agentrt.open_store(db)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent(decisions()),
            policy=agentrt.default_policy(),
            tools=list(make_tools()),
            now=clock,
            new_id=Ids(),
        )
        run = driver.start_sync("tidy the repo")
        (pending,) = store.pending_approvals(run.id)
        driver.approve(run.id, pending.id, by="alice", note="ok")
        run = driver.resume_sync(run.id)
        assert run.status == "COMPLETED"
        return record(store, run.id)
    finally:
        store.close()


async def drive(session: GateSession, agent: ScriptedAgent) -> None:
    """A consumer's own loop: the model decides, the gate judges and executes."""
    while True:
        step = await session.step()
        if step is None:
            return
        verdict = await step.propose(agent.decide(session.input()))
        if verdict.outcome == VerdictOutcome.ALLOWED:
            await step.execute()
            if session.done:
                return
        elif verdict.outcome in (VerdictOutcome.PENDING, VerdictOutcome.ENDED):
            return


def through_a_gate_loop(db: Path, clock: Recording) -> tuple[Any, ...]:
    store = agentrt.open_store(db)
    try:
        gate = agentrt.Gate(
            store=store,
            policy=agentrt.default_policy(),
            tools=list(make_tools()),
            now=clock,
            new_id=Ids(),
        )
        agent = ScriptedAgent(decisions())

        async def first() -> str:
            session = await gate.begin("tidy the repo")
            await drive(session, agent)
            await session.close()
            return session.run.id

        run_id = agentrt._driver.run_sync(first())
        (pending,) = store.pending_approvals(run_id)
        agentrt.Operator(store, now=clock).approve(run_id, pending.id, by="alice", note="ok")

        async def then() -> None:
            session, verdict = await gate.attach(run_id)
            assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
            step = session.current()
            assert step is not None
            await step.execute()
            await drive(session, agent)
            await session.close()

        agentrt._driver.run_sync(then())
        assert store.get_run(run_id).status == "COMPLETED"
        return record(store, run_id)
    finally:
        store.close()


def _origin_blind(event: agentrt.Event) -> agentrt.Event:
    """The event without its hash, and with the origin a policy saw left out."""
    payload = event.payload
    if event.type == "step.policy" and isinstance(payload, dict) and "input" in payload:
        recorded = copy.deepcopy(payload["input"])
        recorded["run"].pop("origin")
        recorded["hashes"].pop("run")
        payload = {**payload, "input": recorded}
    return dataclasses.replace(event, payload=payload, hash="")


def test_the_driver_and_a_hand_written_gate_loop_write_identical_rows_events_and_clock_readings(
    tmp_path: Path,
) -> None:
    driver_clock, gate_clock = Recording(), Recording()
    by_driver = through_the_driver(tmp_path / "driver.db", driver_clock)
    by_gate = through_a_gate_loop(tmp_path / "gate.db", gate_clock)
    # The run, the same but for the kind of program that began it (decision 0049).
    assert (by_driver[0].origin, by_gate[0].origin) == ("driver", "gate")
    assert dataclasses.replace(by_gate[0], origin="driver") == by_driver[0]
    assert by_gate[1] == by_driver[1]  # every step
    assert by_gate[2] == by_driver[2]  # every approval
    # Every event, the same but for the origin inside what each policy evaluation saw
    # (`step.policy`'s recorded input, decision 0072): the run as the policy got it,
    # its origin included. So the chain's hashes differ from the first evaluation on.
    assert [_origin_blind(e) for e in by_gate[3]] == [_origin_blind(e) for e in by_driver[3]]
    seen = [e.payload["input"]["run"]["origin"] for e in by_gate[3] if e.type == "step.policy"]
    assert seen and set(seen) == {"gate"}
    assert gate_clock.given == driver_clock.given
    assert len(driver_clock.given) == 20  # as the pinned sequence of test_driver reads it
