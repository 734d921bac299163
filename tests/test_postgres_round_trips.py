"""How many round trips an allowed tool step makes to PostgreSQL (decision 0100).

Counted at the store's connection: each `execute` of one of its cursors (the
connection's own `execute` is one too) outside a pipeline is one round trip (a
message of several statements without parameters too), and a pipeline is one,
whatever it sends. The steady cost of a step is the difference between a run
of 20 allowed steps and one of 10, over 10: the run's creation and its last step
cancel out. A change that adds a round trip to the step fails here, naming the
statements. A model attempt's settlement is counted alone: the run's lock first, with the
transaction's BEGIN, and none again in a transaction that holds it already.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt._model import Usage
from agentrt._store.postgres import PostgresStore
from agentrt.scripted import ScriptedAgent
from support.postgres import held_run, postgres_schema

# An allowed step: its first commit (BEGIN, the store's tables' lock (decision 0172), the
# schema's guard and the run's lock with
# its partition's head; the claim; the new step's row with the decision; the server's
# clock for the lease, the run's lock held since the first statement (decision 0110);
# the step executing; the events with COMMIT) is 6, its
# second (BEGIN, the guard and the lock with the head; the outcome; the active time; the
# events with COMMIT) 4. Before decision 0100 it was 29.5 (one statement a round trip,
# each event two); the Driver's first look at the run's lease before each step (1) went
# with decision 0101; each commit's own lock of the head (2) and the new step's row
# sent alone (1) with decision 0108.
ROUND_TRIPS_PER_STEP = 10

PIPELINED = " ;; "  # between the statements of one pipeline, as counted


@agentrt.tool(side_effect=SideEffect.READ_ONLY, timeout=30)
def read(page: int) -> str:
    """Read a page."""
    return f"page {page}"


class Trips:
    """The round trips sent on one connection, with the first statement of each."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.sent: collections.Counter[str] = collections.Counter()
        self.in_pipeline: list[str] = []
        self.depth = 0

    @property
    def total(self) -> int:
        return sum(self.sent.values())

    def saw(self, sql: object) -> None:
        text = " ".join(str(sql).split())[:80]
        if self.depth:
            self.in_pipeline.append(text)
        else:
            self.sent[text] += 1


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the round-trip count")


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> Trips:
    seen = Trips()
    execute = psycopg.Cursor.execute
    pipeline = psycopg.Connection.pipeline

    def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if self.connection is seen.conn:
            seen.saw(query)
        return execute(self, query, *args, **kwargs)

    @contextmanager
    def counted_pipeline(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        if self is not seen.conn:
            with pipeline(self, *args, **kwargs) as p:
                yield p
            return
        seen.depth += 1
        seen.in_pipeline = []
        try:
            with pipeline(self, *args, **kwargs) as p:
                yield p
        finally:
            seen.depth -= 1
            seen.sent[PIPELINED.join(seen.in_pipeline)] += 1

    monkeypatch.setattr(psycopg.Cursor, "execute", counted_execute)
    monkeypatch.setattr(psycopg.Connection, "pipeline", counted_pipeline)
    return seen


def run_steps(store: PostgresStore, steps: int) -> None:
    agent = ScriptedAgent(
        [Decision.tool_call("read", {"page": i}) for i in range(steps)]
        + [Decision.complete("done")]
    )
    driver = agentrt.Driver(store=store, agent=agent, policy=agentrt.default_policy(), tools=[read])
    result = driver.start_sync("read the pages")
    assert result.status == agentrt.RunStatus.COMPLETED, result


def test_an_allowed_step_of_the_driver_makes_ten_round_trips(url: str, trips: Trips) -> None:
    store = agentrt.open_store(url)
    assert isinstance(store, PostgresStore)
    try:
        run_steps(store, 3)  # warm: the tool's spec stored, every statement prepared
        trips.conn = store._pg
        counts = []
        for steps in (10, 20):
            trips.sent.clear()
            run_steps(store, steps)
            counts.append((trips.total, dict(trips.sent)))
    finally:
        store.close()
    (ten, sent_ten), (twenty, sent_twenty) = counts
    per_step = {k: (sent_twenty.get(k, 0) - sent_ten.get(k, 0)) / 10 for k in sent_twenty}
    shown = "\n".join(f"{v:5.2f} {k}" for k, v in sorted(per_step.items(), key=lambda i: -i[1]))
    assert (twenty - ten) / 10 == ROUND_TRIPS_PER_STEP, shown
    # Each of the step's two commits: BEGIN, the tables' lock, the guard and the run's
    # lock in one round trip,
    # the events and COMMIT in one; the claim's new step with the decision.
    pipelined = {k.split(" ")[0]: v for k, v in per_step.items() if PIPELINED in k}
    assert pipelined == {"BEGIN": 2, "WITH": 2, "INSERT": 1}, shown


def test_a_lease_read_with_a_lock_already_held_is_the_servers_clock_then(url: str) -> None:
    store = agentrt.open_store(url)
    assert isinstance(store, PostgresStore)
    try:
        held_run(store, "r1")

        def wall() -> datetime:
            raise AssertionError("the PostgreSQL store never reads the caller's clock")

        with store.transaction() as tx:
            assert tx.lock_run("r1") is not None
            before = tx.lease_now(wall)  # a round trip of its own: the lock was just taken
            assert tx._clock is None
            assert tx.lock_run("r1") is not None  # held already: the clock came with it
            kept = tx._clock
            read_with_lock = tx.lease_now(wall)
            after = tx.lease_now(wall)  # nothing kept any more: read again
        assert kept is not None and read_with_lock == kept
        assert before <= read_with_lock <= after
    finally:
        store.close()


def test_a_guard_that_refused_is_checked_again_and_a_trigger_gone_by_then_lets_it_go_on(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipelined guard failed (the spy was there); by the re-check that names what it
    found the spy is gone: the transaction begins again, checked, and its statement runs."""
    from agentrt._store.postgres import _tx

    store = agentrt.open_store(url)
    assert isinstance(store, PostgresStore)
    schema = url.rsplit("schema=", 1)[1]
    try:
        held_run(store, "r1")
        base = url.split("?", 1)[0]
        with psycopg.connect(base, autocommit=True) as other:
            other.execute(f"SET search_path TO {schema}")
            other.execute(
                "CREATE FUNCTION spy_fn() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RETURN NEW; END $$"
            )
            other.execute(
                "CREATE TRIGGER spy AFTER UPDATE ON runs FOR EACH ROW EXECUTE FUNCTION spy_fn()"
            )
        checked_again: list[str] = []
        check = _tx.begin_checked

        def spy_gone_first(conn: Any, begin: str, lock: str) -> None:
            with psycopg.connect(base, autocommit=True) as other:
                other.execute(f"DROP TRIGGER spy ON {schema}.runs")
            checked_again.append(begin)
            check(conn, begin, lock)

        monkeypatch.setattr(_tx, "begin_checked", spy_gone_first)
        with store.transaction() as tx:
            assert tx.release_lease("r1", "me", epoch=1) is True
        assert checked_again == ["BEGIN ISOLATION LEVEL READ COMMITTED"]
        assert store.lease("r1").owner == ""
    finally:
        store.close()


def test_a_claimed_steps_row_goes_with_the_next_statement_and_the_stores_own_read_sees_it(
    url: str, trips: Trips
) -> None:
    store = agentrt.open_store(url)
    assert isinstance(store, PostgresStore)
    try:
        held_run(store, "r1")
        now = datetime(2026, 12, 3, tzinfo=UTC)
        trips.conn = store._pg
        with store.transaction() as tx:
            assert tx.lock_run("r1") is not None
            tx.claim_step("r1", 0, "me", lambda: "s1", now, epoch=1)
            claimed = dict(trips.sent)
            # A read of the store's own, inside the transaction: the row is sent first.
            assert [
                r[0] for r in store.query("SELECT id FROM steps WHERE run_id = ?", ("r1",))
            ] == ["s1"]
        sent_alone = [k for k in claimed if PIPELINED not in k]
        assert [k.split(" ")[0] for k in sent_alone] == ["UPDATE"], claimed  # the claim alone
        assert [s.id for s in store.list_steps("r1")] == ["s1"]
    finally:
        store.close()


def test_a_statement_sent_with_the_next_that_fails_fails_the_commit_and_nothing_is_written(
    url: str,
) -> None:
    store = agentrt.open_store(url)
    assert isinstance(store, PostgresStore)
    try:
        held_run(store, "r1")
        now = datetime(2026, 12, 3, tzinfo=UTC)
        with store.transaction() as tx:
            tx.claim_step("r1", 0, "me", lambda: "s1", now, epoch=1)
        events = len(store.list_events("r1"))
        with (
            pytest.raises(agentrt.StoreError, match="the id s1 given by the id factory"),
            store.transaction() as tx,
        ):
            step = tx.claim_step("r1", 1, "me", lambda: "s1", now, epoch=1)  # s1 is taken
            assert step.id == "s1"  # sent with the commit: the claim returned first
        assert store.get_run("r1").step_count == 1
        assert len(store.list_events("r1")) == events
        assert [s.id for s in store.list_steps("r1")] == ["s1"]
        with store.transaction() as tx:  # the store goes on
            tx.claim_step("r1", 1, "me", lambda: "s2", now, epoch=1)
        assert [s.id for s in store.list_steps("r1")] == ["s1", "s2"]
    finally:
        store.close()


def test_the_result_of_a_statement_sent_with_the_next_cannot_be_read(url: str) -> None:
    store = agentrt.open_store(url)
    try:
        with store.transaction() as tx:
            sent = tx.execute(
                "INSERT OR IGNORE INTO stored_values (hash, length, body) VALUES (?, ?, ?)",
                ("h", 1, "x"),
            )
            with pytest.raises(agentrt.StoreError, match="has no 'rowcount'"):
                sent.rowcount  # noqa: B018
    finally:
        store.close()


def _dispatched(store: PostgresStore, now: datetime) -> None:
    """Run r1 (held by `me`) with step s1 claimed and attempt c1 dispatched, committed."""
    held_run(store, "r1")
    with store.transaction() as tx:
        tx.claim_step("r1", 0, "me", lambda: "s1", now, epoch=1)
        tx.dispatch_model_call("r1", "s1", "c1", 1, "m", Usage(10, 5), 70, now)


def _settle(tx: Any, now: datetime) -> Any:
    return tx.settle_model_call(
        "r1",
        "s1",
        "c1",
        1,
        "m",
        status="ok",
        usage=Usage(8, 4),
        cost_micros=60,
        latency_ms=5,
        error="",
        now=now,
    )


def test_a_model_attempts_settlement_locks_the_run_first_with_the_transactions_begin(
    url: str, trips: Trips
) -> None:
    """Decision 0012 on PostgreSQL: the run's row (with its partition's head) is the
    settlement's first statement, sent with BEGIN, before the attempt's row is written;
    the settlement makes as many round trips as when it wrote the attempt's row first."""
    store = agentrt.open_store(url)
    assert isinstance(store, PostgresStore)
    try:
        now = datetime(2026, 12, 3, tzinfo=UTC)
        _dispatched(store, now)
        trips.conn = store._pg
        with store.transaction() as tx:
            run = _settle(tx, now)
        assert run is not None and run.estimated_cost_micros == 60
        sent = [k.split(" ;; ") for k in trips.sent]
        assert [[s.split(" ")[0] for s in k] for k in sent] == [
            ["BEGIN", "LOCK", "SELECT"],
            ["UPDATE"],
            ["UPDATE"],
            ["WITH", "COMMIT"],
        ], trips.sent
        assert sent[0][2].startswith("SELECT r.*, clock_timestamp() AS agentrt_clock, h.seq"), sent
        assert sent[1][0].startswith("UPDATE ONLY model_calls"), sent[1]
        assert all(n == 1 for n in trips.sent.values()), trips.sent
    finally:
        store.close()


def test_a_settlement_in_a_transaction_holding_the_runs_lock_sends_no_second_lock(
    url: str, trips: Trips
) -> None:
    """A commit's kept writes lock the run first (`hold_lease`); the settlement after them
    in the same transaction does not lock it again (a round trip that waits for no one)."""
    store = agentrt.open_store(url)
    assert isinstance(store, PostgresStore)
    try:
        now = datetime(2026, 12, 3, tzinfo=UTC)
        _dispatched(store, now)
        trips.conn = store._pg
        with store.transaction() as tx:
            assert tx.lock_run("r1") is not None
            trips.sent.clear()
            run = _settle(tx, now)
            settled = dict(trips.sent)
        assert run is not None and run.estimated_cost_micros == 60
        assert [k.split(" ")[0] for k in settled] == ["UPDATE", "UPDATE"], settled
        assert store.list_model_calls("r1")[0].status == "ok"
    finally:
        store.close()
