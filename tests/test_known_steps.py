"""A Gate that loaded a run before reads only the steps after what it read (decision 0130).

Attaching a run loads its steps (decision 0011); the LangGraph adapter attaches once per
tool call, so each call read the whole run, twice (the attach's look and the takeover's).
A step settled in a final status is never written again and no step is ever deleted, so
each load keeps what it read up to the first step not so settled (`KnownPrefixes`, one per
Gate or Driver), and the next load of that run reads the step it ended with (to see that
the record still holds it) and the steps after it. These tests count the rows a load reads
and compare what the session holds with the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

import agentrt
from agentrt import Decision
from agentrt import _history as history
from agentrt._history import KnownPrefixes, SettledPrefix, StepLog
from agentrt._records import Step, StepStatus
from conftest import FakeClock, Ids


class RowsRead:
    """Counts the steps every snapshot of `store` reads (a session's load reads in one)."""

    def __init__(self, store: agentrt.Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        real = store.snapshot

        @contextlib.contextmanager
        def snapshot() -> Iterator[Any]:
            with real() as view:
                yield _Counted(view, self)

        monkeypatch.setattr(store, "snapshot", snapshot)

    def take(self) -> int:
        rows, self.rows = self.rows, 0
        return rows


class _Counted:
    def __init__(self, view: Any, counter: RowsRead) -> None:
        self._view = view
        self._counter = counter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    def steps_from(self, run_id: str, first_index: int, limit: int) -> list[Step]:
        steps: list[Step] = self._view.steps_from(run_id, first_index, limit)
        self._counter.rows += len(steps)
        return steps


class DigestsMade:
    """Counts the steps the policy input's hashes digest (`StepLog.digest` asked for)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = 0
        real = StepLog.digest

        def digest(log: StepLog, position: int, entry: Any, make: Any) -> str:
            self.made += 1
            return real(log, position, entry, make)

        monkeypatch.setattr(StepLog, "digest", digest)

    def take(self) -> int:
        made, self.made = self.made, 0
        return made


def make_gate(store: agentrt.Store, owner: str) -> agentrt.Gate:
    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    def look(n: int) -> dict[str, object]:
        """Look at page n."""
        return {"n": n}

    return agentrt.Gate(
        store=store,
        policy=agentrt.default_policy(),
        tools=[look],
        now=FakeClock(),
        new_id=Ids(prefix=owner[:1]),
        lease_owner=owner,
    )


def look(session: agentrt.GateSession, count: int, first: int) -> None:
    for n in range(first, first + count):
        step = session.step_sync()
        assert step is not None
        assert step.propose_sync(Decision.tool_call("look", {"n": n})).outcome == "allowed"
        step.execute_sync()


def held(session: agentrt.GateSession) -> StepLog:
    return session._rs.steps


def recorded(store: agentrt.Store, run_id: str) -> list[Step]:
    return store.steps_from(run_id, 0, 10_000)


def looked(gate: agentrt.Gate, steps: int, max_steps: int = 200) -> str:
    """A run `gate` begins, of `steps` allowed `look` steps, its session then closed (the
    lease given back, the run RUNNING: the next attach takes it over); its id."""
    session = gate.begin_sync("look", agentrt.Limits(max_steps=max_steps))
    look(session, steps, 0)
    session.close_sync()
    return session.run_id


def rechecks_the_same(store: agentrt.Store, run_id: str, evaluations: int) -> None:
    """What the policy was shown each time hashes as a re-check of the record does."""
    report = agentrt.recheck(store, run_id, agentrt.default_policy())
    assert report.same and report.counts()["same"] == evaluations


def test_an_attach_reads_only_the_steps_after_what_the_gate_read_before(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    gate = make_gate(store, "first")
    run_id = looked(gate, 40)
    reads = RowsRead(store, monkeypatch)
    # This gate began the run and never loaded it: its first attach reads it whole once
    # (the attach's look), and the takeover's load reads only the step that look ended with.
    session, verdict = gate.attach_sync(run_id)
    assert verdict is None
    assert reads.take() == 40 + 1
    assert list(held(session)) == recorded(store, run_id)
    digests = DigestsMade(monkeypatch)
    for round_ in range(3):
        look(session, 5, 40 + 5 * round_)
        # The policy input's list of step hashes goes on from what the session before
        # listed: only the steps recorded since are digested (the whole run before). The
        # first session this gate attached listed the run whole.
        assert digests.take() <= (2 * 5 if round_ else 40 + 2 * 5)
        session.close_sync()
        session, verdict = gate.attach_sync(run_id)
        assert verdict is None
        # The attach's look: the step it knew last and the five new ones; the takeover's
        # load: the step the look ended with.
        assert reads.take() == (1 + 5) + 1
        assert list(held(session)) == recorded(store, run_id)
        assert len(held(session)) == 45 + 5 * round_
    session.close_sync()
    rechecks_the_same(store, run_id, 55)


def test_steps_another_gate_added_and_settled_meanwhile_are_read(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    first, second = make_gate(store, "first"), make_gate(store, "second")
    run_id = looked(first, 10)
    session, _ = first.attach_sync(run_id)
    session.close_sync()
    other, _ = second.attach_sync(run_id)
    look(other, 7, 10)
    other.close_sync()
    reads = RowsRead(store, monkeypatch)
    session, verdict = first.attach_sync(run_id)
    assert verdict is None
    # The look: the step it knew last and the seven after it; the takeover's: the last.
    assert reads.take() == (1 + 7) + 1
    assert list(held(session)) == recorded(store, run_id)
    assert [s.status for s in held(session)][-7:] == [StepStatus.DONE] * 7
    session.close_sync()


def test_a_record_that_does_not_hold_the_known_steps_is_read_whole(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    gate = make_gate(store, "first")
    run_id = looked(gate, 12)
    session, _ = gate.attach_sync(run_id)
    session.close_sync()
    known = gate._config.known
    prefix = known.get(run_id)
    assert prefix is not None and len(prefix) == 12
    # As if the store now held another record under this run id (a restored copy, say):
    # the step the known steps end with is not the one recorded there.
    known.keep(run_id, dataclasses.replace(prefix, ids=(*prefix.ids[:-1], "not-recorded")))
    reads = RowsRead(store, monkeypatch)
    session, _ = gate.attach_sync(run_id)
    assert reads.take() == 1 + 12 + 1  # the step it looked for, then the run whole, then one
    assert list(held(session)) == recorded(store, run_id)
    session.close_sync()


def test_known_steps_let_go_among_the_newest_are_read_again_so_the_newest_are_held(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "HELD_BYTES", 0)
    monkeypatch.setattr(history, "MIN_HELD", 3)
    store = any_store
    gate = make_gate(store, "first")
    run_id = looked(gate, 20)
    session, _ = gate.attach_sync(run_id)
    look(session, 2, 20)
    session.close_sync()
    reads = RowsRead(store, monkeypatch)
    session, _ = gate.attach_sync(run_id)
    steps = held(session)
    assert [steps.held(p) is not None for p in range(len(steps))][-3:] == [True] * 3
    assert steps.held_count() == 3
    assert reads.take() <= 2 * (3 + 2 + 1)
    assert list(steps) == recorded(store, run_id)  # the others read back from the store
    session.close_sync()
    rechecks_the_same(store, run_id, 22)


def test_a_langgraph_call_reads_a_bounded_number_of_steps_however_long_the_run(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")
    from support.adapters.langgraph_graphs import read_pages

    calls = 30
    reads = RowsRead(any_store, monkeypatch)
    rows: list[int] = []
    # What each call's attach read, taken inside its tool.
    read_pages(any_store, calls, lambda: rows.append(reads.take()))
    assert len(rows) == calls
    # Each call after the first two loads the run twice: each load reads the step it knew
    # last and the one step recorded since (the whole run was 2n rows per call before).
    assert rows[2:] == [3] * (calls - 2)


def test_a_step_interrupted_before_later_steps_does_not_end_what_is_known(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step left open at a close is interrupted by the next takeover, and the run goes on
    past it. Once a later step exists nothing writes it again, so what a load keeps goes on
    past it: the run is not read from that step at every attach for the rest of its life."""
    store = any_store
    gate = make_gate(store, "first")
    session = gate.begin_sync("look", agentrt.Limits(max_steps=200))
    look(session, 5, 0)
    assert session.step_sync() is not None  # left open: `deciding` when the session closes
    run_id = session.run_id
    session.close_sync()
    session, _ = gate.attach_sync(run_id)  # the takeover interrupts it
    look(session, 20, 5)
    session.close_sync()
    statuses = [s.status for s in recorded(store, run_id)]
    assert statuses == [StepStatus.DONE] * 5 + [StepStatus.INTERRUPTED] + [StepStatus.DONE] * 20
    reads = RowsRead(store, monkeypatch)
    session, _ = gate.attach_sync(run_id)
    # The attach's look: from the last step known (the fifth, read when the sixth was still
    # open) on; the takeover's load: only the step that look ended with, past the
    # interrupted one (it was read from the interrupted step on, 22 rows, before).
    assert reads.take() == (1 + 21) + 1
    assert list(held(session)) == recorded(store, run_id)
    look(session, 3, 25)
    session.close_sync()
    session, _ = gate.attach_sync(run_id)
    assert reads.take() == (1 + 3) + 1
    assert list(held(session)) == recorded(store, run_id)
    session.close_sync()
    rechecks_the_same(store, run_id, 28)


def test_a_settled_prefix_goes_past_an_interrupted_step_only_to_a_final_one_after_it(
    store: agentrt.Store,
) -> None:
    """An interrupted step is the run's last only until the run goes on: the takeover that
    found it may still write it (a person's approval, a reconciliation). So a prefix ends at
    a step settled in a final status, past interrupted steps before it, never on one."""
    gate = make_gate(store, "first")
    session = gate.begin_sync("look", agentrt.Limits(max_steps=20))
    look(session, 2, 0)
    assert session.step_sync() is not None
    run_id = session.run_id
    session.close_sync()
    session, _ = gate.attach_sync(run_id)
    session.close_sync()
    steps = recorded(store, run_id)
    assert [s.status for s in steps] == [StepStatus.DONE] * 2 + [StepStatus.INTERRUPTED]
    assert prefix_of(store, run_id).ids == tuple(s.id for s in steps[:2])
    session, _ = gate.attach_sync(run_id)
    look(session, 1, 2)
    session.close_sync()
    steps = recorded(store, run_id)
    assert prefix_of(store, run_id).ids == tuple(s.id for s in steps)


# -- the prefixes kept ------------------------------------------------------------


def prefix_of(store: agentrt.Store, run_id: str) -> SettledPrefix:
    log = StepLog(recorded(store, run_id), lambda first, limit: [], digest=lambda s: s.id)
    return log.settled_prefix()


def test_the_prefixes_kept_are_bounded_by_weight_and_count_least_recently_used_first(
    store: agentrt.Store,
) -> None:
    gate = make_gate(store, "first")
    ids = [looked(gate, 2, max_steps=20) for _ in range(4)]
    prefixes = [prefix_of(store, run_id) for run_id in ids]
    # A prefix weighs its held steps and what it keeps of every step (id, index, digest).
    weight = prefixes[0].held_weight + 2 * history.KNOWN_POSITION_WEIGHT
    assert prefixes[0].held_weight > 0 and all(p.held_weight == weight - 512 for p in prefixes)
    kept = KnownPrefixes(budget=2 * weight, runs=3)
    kept.keep(ids[0], prefixes[0])
    kept.keep(ids[1], prefixes[1])
    assert kept.get(ids[0]) is prefixes[0]  # now the most recently used
    kept.keep(ids[2], prefixes[2])  # over the weight: the least recently used goes
    assert [kept.get(i) is not None for i in ids[:3]] == [True, False, True]
    by_count = KnownPrefixes(budget=10 * weight, runs=2)
    for run_id, prefix in zip(ids, prefixes, strict=True):
        by_count.keep(run_id, prefix)
    assert [by_count.get(i) is not None for i in ids] == [False, False, True, True]
    alone = KnownPrefixes(budget=weight // 2)
    alone.keep(ids[0], prefixes[0])  # heavier than the budget, but the one kept last
    assert alone.get(ids[0]) is prefixes[0]
    alone.keep(ids[1], prefixes[1])
    assert alone.get(ids[0]) is None and alone.get(ids[1]) is prefixes[1]
    alone.forget(ids[1])
    assert alone.get(ids[1]) is None


def test_a_settled_prefix_ends_before_the_first_step_not_settled_in_a_final_status(
    store: agentrt.Store,
) -> None:
    gate = make_gate(store, "first")
    session = gate.begin_sync("look", agentrt.Limits(max_steps=20))
    look(session, 3, 0)
    open_step = session.step_sync()
    assert open_step is not None
    run_id = session.run_id
    session.close_sync()
    steps = recorded(store, run_id)
    assert [s.status for s in steps] == [StepStatus.DONE] * 3 + [StepStatus.DECIDING]
    prefix = prefix_of(store, run_id)
    assert prefix.ids == tuple(s.id for s in steps[:3])
    assert tuple(d[1] for d in prefix.digests if isinstance(d, tuple)) == prefix.ids
    assert prefix.head(2).ids == prefix.ids[:2] and prefix.head(3) is prefix


# -- found by review: a restored copy, and a policy that edits what it is shown -------


def _copy_database(source: Any, target: Any) -> None:
    import sqlite3

    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def known_then_restored(store: agentrt.Store, db_path: Any) -> tuple[agentrt.Gate, str]:
    """A run of three `look` steps, known to its gate (all three `done`), then the database
    replaced by a copy taken while the third was executing."""
    older = db_path.with_name("older.db")

    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    def look(n: int) -> dict[str, object]:
        """Look at page n."""
        if n == 2:
            _copy_database(db_path, older)  # a backup taken while step 2 is executing
        return {"n": n}

    gate = agentrt.Gate(
        store=store,
        policy=agentrt.default_policy(),
        tools=[look],
        now=FakeClock(),
        new_id=Ids(prefix="f"),
        lease_owner="first",
    )
    session = gate.begin_sync("look", agentrt.Limits(max_steps=20))
    for n in range(3):
        step = session.step_sync()
        assert step is not None
        assert step.propose_sync(Decision.tool_call("look", {"n": n})).outcome == "allowed"
        step.execute_sync()
    run_id = session.run_id
    session.close_sync()
    session, _ = gate.attach_sync(run_id)  # this gate now knows steps 0..2, all done
    session.close_sync()
    _copy_database(older, db_path)  # the older copy restored
    return gate, run_id


def test_a_restored_copy_holding_the_known_last_step_not_yet_settled_is_not_taken_as_known(
    store: agentrt.Store, db_path: Any
) -> None:
    """An older copy taken while the last known step was still open holds it under the
    same index and id: the load must not keep the known `done` step where the record
    holds it `executing` (its status and digest are compared too)."""
    from agentrt._session import load

    gate, run_id = known_then_restored(store, db_path)
    record = recorded(store, run_id)
    assert [s.status for s in record] == [StepStatus.DONE] * 2 + [StepStatus.EXECUTING]
    _, steps, _ = load(gate._config, run_id)
    assert [s.status for s in steps] == [s.status for s in record]


def test_after_a_restore_the_gate_keeps_showing_a_step_the_record_holds_interrupted(
    store: agentrt.Store, db_path: Any
) -> None:
    """The same restore, end to end: the takeover interrupts the recorded step 2 and the
    run goes on past it; every later session of this Gate holds step 2 as the record does,
    `interrupted` (decision 0011's mirror invariant)."""
    gate, run_id = known_then_restored(store, db_path)
    session, _ = gate.attach_sync(run_id)  # takes over: step 2 recorded interrupted
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(Decision.tool_call("look", {"n": 9})).outcome == "allowed"
    step.execute_sync()
    session.close_sync()
    record = recorded(store, run_id)
    assert record[2].status == StepStatus.INTERRUPTED
    session, _ = gate.attach_sync(run_id)
    assert [s.status for s in held(session)] == [s.status for s in record]
    session.close_sync()


def test_what_a_policy_does_to_its_view_of_a_known_step_reaches_no_later_session(
    any_store: agentrt.Store,
) -> None:
    """A policy is shown copies of the steps (the spec's read-only view): the held steps
    are shared with the Gate's later sessions, so an edit of what it was shown must reach
    neither this session nor a later one, nor what their agents are shown."""
    store = any_store
    meddle = []

    class Meddling:
        policy_id = "meddling/1"

        def evaluate(self, request: Any, view: Any) -> agentrt.PolicyDecision:
            if meddle:
                for step in view.steps:
                    if step.decision is not None and isinstance(step.decision.args, dict):
                        step.decision.args["n"] = -1
            return agentrt.PolicyDecision.allow()

    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    def look(n: int) -> dict[str, object]:
        """Look at page n."""
        return {"n": n}

    gate = agentrt.Gate(
        store=store, policy=Meddling(), tools=[look], now=FakeClock(), new_id=Ids(prefix="e")
    )

    def one(session: agentrt.GateSession, n: int) -> None:
        step = session.step_sync()
        assert step is not None
        assert step.propose_sync(Decision.tool_call("look", {"n": n})).outcome == "allowed"
        step.execute_sync()

    session = gate.begin_sync("look", agentrt.Limits(max_steps=20))
    one(session, 0)
    one(session, 1)
    run_id = session.run_id
    session.close_sync()
    session, _ = gate.attach_sync(run_id)
    meddle.append(True)
    one(session, 2)  # the policy edits steps 0 and 1, as this session holds them
    meddle.clear()
    session.close_sync()
    session, _ = gate.attach_sync(run_id)
    assert list(held(session)) == recorded(store, run_id)
    assert [s.decision.args for s in session.input().steps] == [{"n": 0}, {"n": 1}, {"n": 2}]
    session.close_sync()
