"""A running session holds only its newest steps; the agent still sees every step as recorded.

Decision 0098: `RunSession.steps` is a `StepLog` that lets old settled steps go once
the held ones weigh more than `HELD_BYTES`, and reads them back from the store when
asked for. Here the budget is zero and three steps are always held, so nearly every
old step an agent, a policy or a re-check sees was read back; pages of four steps, two
kept, so reads cross pages and pages are let go too.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, StepInput
from agentrt import _history as history
from agentrt._history import ShownSteps
from agentrt._records import Observation, Step, StepStatus
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids
from support.postgres import postgres_schema

SIZE = 2000  # characters in each argument and observation: stored once, by reference


@pytest.fixture(params=["sqlite", "postgres"])
def either_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[agentrt.Store]:
    """A file-backed SQLite store, and a PostgreSQL schema of its own."""
    with ExitStack() as stack:
        if request.param == "sqlite":
            target = str(tmp_path / "runs.db")
        else:
            target = postgres_schema(stack, "a session's read-back of old steps")
        store = agentrt.open_store(target)
        stack.callback(store.close)
        yield store


@pytest.fixture
def small_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "HELD_BYTES", 0)
    monkeypatch.setattr(history, "MIN_HELD", 3)
    monkeypatch.setattr(history, "PAGE", 4)
    monkeypatch.setattr(history, "PAGES_KEPT", 2)


def echo_tools(calls: list[Any]) -> list[agentrt.Tool]:
    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    def echo(n: int, pad: str) -> dict[str, object]:
        """Echo a step's number with an observation of its own."""
        calls.append({"n": n, "pad": pad})
        return {"n": n, "seen": pad[::-1]}

    @agentrt.tool(side_effect=agentrt.SideEffect.REMOTE_MUTATION, timeout=30)
    def push(n: int, pad: str) -> dict[str, object]:
        """A call the default policy sends to a person."""
        calls.append({"push": n, "pad": pad})
        return {"pushed": n}

    return [echo, push]


def pad(n: int) -> str:
    return (f"{n}-" * SIZE)[:SIZE]


class Watching:
    """At each step compares what it is shown with the store's rows, then (if `meddle`)
    changes everything it was shown; calls `echo` (`push` at `push_at`) until `steps`."""

    def __init__(
        self, store: agentrt.Store, steps: int, *, meddle: bool = False, push_at: int = -1
    ) -> None:
        self.store = store
        self.steps = steps
        self.meddle = meddle
        self.push_at = push_at
        self.checked = 0
        self.read_back = 0  # the most items of one input that were not held

    def decide(self, input: StepInput) -> Decision:
        self.check(input)
        n = len(input.steps) - 1
        if n >= self.steps:
            return Decision.complete({"steps": n})
        tool = "push" if n == self.push_at else "echo"
        return Decision.tool_call(tool, {"n": n, "pad": pad(n)})

    def check(self, input: StepInput) -> None:
        shown = input.steps
        n = len(shown) - 1  # the last one is the step being decided
        recorded = self.store.list_steps(input.run.id, cap=None)
        assert len(recorded) >= n
        # Every earlier step, to the repr (number literals, key order, times), twice: a
        # step read back is read again (or kept in a page) and is the same. A meddling
        # agent's edits of a step still held show in its next input (decision 0092);
        # a step read back is as recorded, whatever was done to an earlier copy.
        compared = [i for i in range(n) if not self.meddle or shown.entry(i) is None]
        assert repr([shown[i] for i in compared]) == repr([recorded[i] for i in compared])
        assert repr([shown[i] for i in compared]) == repr([recorded[i] for i in compared])
        if not self.meddle:
            assert repr(list(shown[:n])) == repr(recorded[:n])
        assert [s.index for s in shown] == list(range(n + 1))
        assert isinstance(shown, ShownSteps)
        self.read_back = max(self.read_back, sum(shown.entry(i) is None for i in range(n)))
        self.checked += 1
        if self.meddle:
            for step in shown:
                if step.decision is not None and isinstance(step.decision.args, dict):
                    step.decision.args["n"] = -1
                    step.decision.args["pad"] = "changed"
                    step.decision.args["added"] = True
                if step.observation is not None and isinstance(step.observation.content, dict):
                    step.observation.content.clear()
                if step.policy is not None and isinstance(step.policy.capability, dict):
                    step.policy.capability.clear()


def driver_for(store: agentrt.Store, agent: Any, calls: list[Any]) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=echo_tools(calls),
        now=FakeClock(),
        new_id=Ids(),
    )


def echoed(calls: list[Any]) -> list[int]:
    return [c["n"] for c in calls if "n" in c]


def test_the_agent_at_each_step_sees_every_earlier_step_as_recorded_old_ones_read_back(
    either_store: agentrt.Store, small_log: None
) -> None:
    store = either_store
    calls: list[Any] = []
    agent = Watching(store, 24)
    run = driver_for(store, agent, calls).start_sync("echo", agentrt.Limits(max_steps=40))
    assert run.status == "COMPLETED"
    assert agent.checked == 25
    assert agent.read_back >= 20  # all but the three held (and the one decided)
    assert echoed(calls) == list(range(24))


def test_what_the_agent_does_to_what_it_was_shown_changes_nothing_recorded_or_executed(
    store: agentrt.Store, small_log: None
) -> None:
    calls: list[Any] = []
    agent = Watching(store, 24, meddle=True)
    run = driver_for(store, agent, calls).start_sync("echo", agentrt.Limits(max_steps=40))
    assert run.status == "COMPLETED"
    assert agent.checked == 25 and agent.read_back >= 20
    # Each call ran with the arguments decided, and each step holds them and its result.
    assert calls == [{"n": n, "pad": pad(n)} for n in range(24)]
    steps = store.list_steps(run.id, cap=None)
    for n, step in enumerate(steps[:24]):
        assert step.decision is not None and step.observation is not None
        assert step.decision.args == {"n": n, "pad": pad(n)}
        assert step.observation.content == {"n": n, "seen": pad(n)[::-1]}


def test_after_a_pause_and_a_resume_the_agent_still_sees_every_step_as_recorded(
    store: agentrt.Store, small_log: None
) -> None:
    calls: list[Any] = []
    agent = Watching(store, 24, meddle=True, push_at=12)
    driver = driver_for(store, agent, calls)
    run = driver.start_sync("echo", agentrt.Limits(max_steps=40))
    assert run.status == "WAITING_FOR_APPROVAL"
    (pending,) = store.pending_approvals(run.id)
    driver.approve(run.id, pending.id, by="alice", note="ok")
    run = driver.resume_sync(run.id)  # a new session, built from the whole record
    assert run.status == "COMPLETED"
    assert agent.checked == 25 and agent.read_back >= 20
    assert calls[12] == {"push": 12, "pad": pad(12)}
    assert echoed(calls) == [n for n in range(24) if n != 12]


def test_after_a_takeover_the_new_owner_is_shown_every_step_as_recorded(
    either_store: agentrt.Store, small_log: None
) -> None:
    store = either_store
    calls: list[Any] = []
    agent = Watching(store, 20, meddle=True)

    def gate(owner: str) -> agentrt.Gate:
        return agentrt.Gate(
            store=store,
            policy=agentrt.default_policy(),
            tools=echo_tools(calls),
            now=FakeClock(),
            new_id=Ids(prefix="b" if owner == "first" else "c"),
            lease_owner=owner,
        )

    def steps(session: agentrt.GateSession, count: int) -> None:
        for _ in range(count):
            step = session.step_sync()
            assert step is not None
            verdict = step.propose_sync(agent.decide(session.input()))
            if verdict.outcome == "allowed":
                step.execute_sync()

    first = gate("first").begin_sync("echo", agentrt.Limits(max_steps=40))
    steps(first, 10)
    run_id = first.run_id
    first.close_sync()  # the lease given back with the run RUNNING: as a dead owner's
    second, verdict = gate("second").attach_sync(run_id)
    assert verdict is None  # taken over, nothing in doubt: the run goes on
    # The new session's steps were loaded a page at a time, the old ones let go.
    assert second._rs.steps.held_count() <= 4 and len(second._rs.steps) == 10
    steps(second, 11)
    assert second.done and second.run.status == "COMPLETED"
    assert agent.checked == 21 and agent.read_back >= 16
    assert calls == [{"n": n, "pad": pad(n)} for n in range(20)]


def test_every_policy_evaluation_of_a_run_whose_steps_were_let_go_rechecks_the_same(
    store: agentrt.Store, small_log: None
) -> None:
    """The hash of the steps a policy was shown (decision 0072) is kept for steps let go."""
    calls: list[Any] = []
    agent = Watching(store, 24, push_at=12)
    driver = driver_for(store, agent, calls)
    run = driver.start_sync("echo", agentrt.Limits(max_steps=40))
    (pending,) = store.pending_approvals(run.id)
    driver.approve(run.id, pending.id, by="alice", note="ok")
    run = driver.resume_sync(run.id)
    assert run.status == "COMPLETED"
    report = agentrt.recheck(store, run.id, agentrt.default_policy())
    assert report.same
    assert report.counts()["same"] == 25  # 24 calls, the push asked again on resume
    assert report.counts()["not_recheckable"] == 0


# -- memory -----------------------------------------------------------------------


def held_characters(*roots: Any) -> int:
    """The characters of every distinct string of at least 100 reachable from `roots`
    (through lists, tuples, dicts and objects' attributes): what holds step values."""
    seen: set[int] = set()
    total = 0
    stack = list(roots)
    while stack:
        item = stack.pop()
        if (
            id(item) in seen
            or isinstance(item, type)
            or (callable(item) and not hasattr(item, "__dict__"))
        ):
            continue
        seen.add(id(item))
        if isinstance(item, str):
            total += len(item) if len(item) >= 100 else 0
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set):
            stack.extend(item)
        elif dataclasses.is_dataclass(item):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif hasattr(item, "__dict__") and type(item).__module__.startswith("agentrt."):
            stack.append(vars(item))
    return total


def run_steps(store: agentrt.Store, count: int) -> int:
    """Characters of step values the session (its log, pages, shown copies and policy
    hashes) holds after `count` steps of 4,000-character arguments and observations."""
    calls: list[Any] = []
    gate = agentrt.Gate(
        store=store,
        policy=agentrt.default_policy(),
        tools=echo_tools(calls),
        now=FakeClock(),
        new_id=Ids(),
    )
    session = gate.begin_sync("echo", agentrt.Limits(max_steps=count + 10))
    for n in range(count):
        step = session.step_sync()
        assert step is not None
        session.input()  # as a Driver shows it to its agent: copies made for held steps
        assert step.propose_sync(Decision.tool_call("echo", {"n": n, "pad": f"{n:4}" * 1000}))
        step.execute_sync()
    shown = session.input()
    rs = session._rs
    held = held_characters(rs.steps, session._shown, rs._input_hashes)
    assert len(shown.steps) == count and len(rs.steps) == count
    session.close_sync()
    return held


def test_the_step_values_a_session_holds_do_not_grow_with_the_run(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic: the characters of the values reachable from the session's
    structures, not the process's memory; 100 steps and 200 steps hold the same. (Held
    whole, they are 800,000 and 1,600,000 characters: each bound below fails.)"""
    monkeypatch.setattr(history, "HELD_BYTES", 256 * 1024)
    sizes = {}
    for count in (100, 200):
        with agentrt.open_store(tmp_path / f"{count}.db") as store:
            sizes[count] = run_steps(store, count)
    # Each step's values weigh 8,000 characters: 256 KiB holds about 25 steps' values (more
    # than the `MIN_HELD` always held, so the budget is what bounds them), plus at most a
    # page of four read back (none is read here).
    assert 0 < sizes[100] <= 256 * 1024 + 40 * 8_000
    assert sizes[200] <= sizes[100] + 2 * 8_000  # flat: where a step falls in a page
    assert sizes[200] < 200 * 8_000 / 4


def test_a_long_step_log_reads_an_old_step_a_page_at_a_time(small_log: None) -> None:
    reads: list[tuple[int, int]] = []
    steps = [finished(n) for n in range(20)]

    def read(first: int, limit: int) -> list[agentrt.Step]:
        reads.append((first, limit))
        return steps[first : first + limit]

    log = history.StepLog(steps, read)
    assert [log.held(i) is None for i in range(20)] == [True] * 17 + [False] * 3
    assert log[0] == steps[0] and log[3] == steps[3] and reads == [(0, 4)]
    assert log[5] == steps[5] and log[1] == steps[1] and reads == [(0, 4), (4, 4)]
    assert log[9] == steps[9] and reads == [(0, 4), (4, 4), (8, 4)]
    assert log[2] == steps[2] and len(reads) == 3  # the first page was used last: kept
    assert log[6] == steps[6] and reads[-1] == (4, 4)  # the least recently used: let go
    assert list(log) == steps and log[-1] is steps[-1]
    view = log.view(19)
    assert view[0] == steps[0] and view[0] is not log[0]  # an independent copy
    assert len(view) == 19 and view == steps[:19]


def finished(n: int) -> agentrt.Step:
    return Step(
        id=f"s{n}",
        run_id="r",
        index=n,
        status=StepStatus.DONE,
        decision=Decision.tool_call("echo", {"n": n, "pad": pad(n)}),
        policy=None,
        observation=Observation.tool_result({"n": n}, ""),
        started_at=None,
        finished_at=None,
    )


def test_a_scripted_run_and_the_default_policy_never_read_an_old_step_back(
    store: agentrt.Store, small_log: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common readers read only the newest steps: the limits, the policy's input
    hashes, `ScriptedAgent`'s position (its settled prefix): none reads the store."""
    reads: list[tuple[int, int]] = []
    read = store.steps_from

    def counted(run_id: str, first_index: int, limit: int) -> list[agentrt.Step]:
        reads.append((first_index, limit))
        return read(run_id, first_index, limit)

    monkeypatch.setattr(store, "steps_from", counted)
    calls: list[Any] = []
    script: list[Decision] = [
        Decision.tool_call("echo", {"n": n, "pad": pad(n)}) for n in range(30)
    ]
    agent = ScriptedAgent([*script, Decision.complete({"done": True})])
    run = driver_for(store, agent, calls).start_sync("echo", agentrt.Limits(max_steps=40))
    assert run.status == "COMPLETED" and echoed(calls) == list(range(30))
    assert reads == []
    last = agent.last_input
    assert last is not None and isinstance(last.steps, ShownSteps)
    assert sum(last.steps.entry(i) is None for i in range(len(last.steps))) >= 25  # let go
    assert [s.index for s in last.steps] == list(range(31))  # reading them now reads back
    assert reads != []


def test_a_resumed_session_judges_its_approved_call_without_reading_an_old_step_back(
    store: agentrt.Store, small_log: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The policy input's digest of each step is made as the step is let go, while
    `load` fills the log off the event loop: the resumed session's first policy check
    (the approved call judged again) reads no old step back, on whatever thread."""
    calls: list[Any] = []
    script: list[Decision] = [
        Decision.tool_call("echo", {"n": n, "pad": pad(n)}) for n in range(30)
    ]
    script.append(Decision.tool_call("push", {"n": 30, "pad": pad(30)}))
    driver = driver_for(store, ScriptedAgent([*script, Decision.complete({"done": True})]), calls)
    run = driver.start_sync("echo", agentrt.Limits(max_steps=40))
    assert run.status == "WAITING_FOR_APPROVAL"
    (pending,) = store.pending_approvals(run.id)
    driver.approve(run.id, pending.id, by="alice", note="ok")
    reads: list[tuple[int, int]] = []
    read = store.steps_from

    def counted(run_id: str, first_index: int, limit: int) -> list[agentrt.Step]:
        reads.append((first_index, limit))
        return read(run_id, first_index, limit)

    monkeypatch.setattr(store, "steps_from", counted)
    run = driver.resume_sync(run.id)
    assert run.status == "COMPLETED" and calls[-1] == {"push": 30, "pad": pad(30)}
    assert reads == []


def test_a_page_read_before_one_of_its_steps_was_written_again_is_read_again(
    small_log: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page holds the steps of its indexes as they were when read, held ones included:
    one written since is read again once it is let go, never taken from the old page."""
    monkeypatch.setattr(history, "MIN_HELD", 1)
    rows = [finished(0), dataclasses.replace(finished(1), status=StepStatus.EXECUTING)]

    def read(first: int, limit: int) -> list[agentrt.Step]:
        return list(rows[first : first + limit])

    log = history.StepLog(rows, read)
    assert log.held(0) is None and log[0] == rows[0]  # page 0 read: step 1 executing in it
    rows[1] = finished(1)  # the step's tool finished: its row and the session's copy
    log.put(rows[1])
    rows.append(finished(2))
    log.append(rows[2])
    assert log.held(1) is None  # let go now that it is done
    assert log[1].status == StepStatus.DONE and log[1] == rows[1]


def test_an_inputs_steps_slice_and_add_as_the_tuple_they_replaced(
    store: agentrt.Store, small_log: None
) -> None:
    calls: list[Any] = []
    script: list[Decision] = [Decision.tool_call("echo", {"n": n, "pad": pad(n)}) for n in range(8)]
    agent = ScriptedAgent([*script, Decision.complete({"done": True})])
    run = driver_for(store, agent, calls).start_sync("echo", agentrt.Limits(max_steps=20))
    assert run.status == "COMPLETED"
    last = agent.last_input
    assert last is not None and isinstance(last.steps, ShownSteps)
    tail = last.steps[-3:]
    assert isinstance(tail, tuple) and [s.index for s in tail] == [6, 7, 8]
    assert last.steps[:2] == tuple(last.steps)[:2]  # the first two read back, equal
    both = last.steps + (tail[0],)  # noqa: RUF005 (concatenation is what is tested)
    assert isinstance(both, tuple) and len(both) == len(last.steps) + 1
    assert isinstance((tail[0],) + last.steps, tuple)  # noqa: RUF005


def test_a_rewritten_step_weighs_what_a_step_weighs() -> None:
    # Decision 0114: a step written again is weighed by the records it does not share.
    first = Step(
        id="s",
        run_id="r",
        index=0,
        status=StepStatus.DECIDING,
        decision=None,
        policy=None,
        observation=None,
        started_at=None,
        finished_at=None,
    )
    decided = dataclasses.replace(
        first, decision=Decision.tool_call("echo", {"n": 1, "pad": ["a", {"b": None}]})
    )
    allowed = dataclasses.replace(
        decided,
        status=StepStatus.EXECUTING,
        policy=agentrt.PolicyDecision(outcome="allow", capability={"c": "x" * 50}),
    )
    done = dataclasses.replace(
        allowed,
        status=StepStatus.DONE,
        observation=Observation.tool_result({"seen": "y" * 9}, "seen"),
    )
    again = dataclasses.replace(done, decision=Decision.tool_call("echo", {"n": 2}))
    chain = [first, decided, allowed, done, again, first]
    for old, new in itertools.pairwise(chain):
        weight = history.rewritten_weight(old, history.step_weight(old), new)
        assert weight == history.step_weight(new)
    log = history.StepLog([], lambda first, limit: [])
    for step in chain:
        log.put(step)
        assert log.held_weight == history.step_weight(step)
