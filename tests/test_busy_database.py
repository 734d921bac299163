"""A write whose outcome is already known waits out a busy database.

Another connection holds what the write needs past the store's wait just as a tool
(or a model attempt) finishes, on each backend (`database`): on SQLite a real second
sqlite3 connection holding `BEGIN IMMEDIATE` past the busy timeout; on PostgreSQL a
psycopg connection holding the run's row (`FOR UPDATE`) past the lock timeout. The
write that records the outcome waits and retries for as long as the lease is
ours, and records the outcome once when the lock is released; when the lease
is taken (or lapses) meanwhile, it fails loudly with `LeaseLostError` and
records nothing. Decision 0012.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
import agentrt._store.postgres._connection
import agentrt._store.sqlite._connection
from agentrt import Decision, Event, LeaseLostError, SideEffect, StepInput, ToolCall, ToolResult
from agentrt._errors import StoreBusyError
from agentrt._model import Message, ModelConfig, ModelRequest, ModelResponse, TextBlock, Usage
from agentrt._session import RunSession
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support.database import on_postgres
from support.rows import snapshot

pytestmark = pytest.mark.slow  # the lock is held on the real clock

BUSY_TIMEOUT_MS = 100
HOLD_SECONDS = 1.0


@pytest.fixture(autouse=True)
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A short busy timeout (SQLite) and lock timeout (PostgreSQL), so that holding the
    lock "past" it costs a second, not minutes."""
    monkeypatch.setattr(agentrt._store.sqlite._connection, "BUSY_TIMEOUT_MS", BUSY_TIMEOUT_MS)
    monkeypatch.setattr(agentrt._store.postgres._connection, "LOCK_TIMEOUT_MS", BUSY_TIMEOUT_MS)


def _postgres_connection(url: str) -> Any:
    """A psycopg connection of the test's own to the schema `url` names, in a transaction
    (psycopg begins one at its first statement)."""
    import psycopg

    from agentrt.lowlevel import schema_of

    base, _, query = url.partition("?")
    kept = [p for p in query.split("&") if p and not p.startswith("schema=")]
    conn = psycopg.connect(base + ("?" + "&".join(kept) if kept else ""))
    conn.execute(f'SET LOCAL search_path TO "{schema_of(url)}"')
    return conn


class LockHolder:
    """A second connection that takes the write lock (on PostgreSQL, the rows of the runs)
    and releases it `hold` seconds later.

    `during(conn)` runs inside its transaction (a second driver's own write, say),
    committed on release.
    """

    def __init__(
        self,
        db_path: Path | str,
        hold: float = HOLD_SECONDS,
        during: Callable[[Any], None] | None = None,
    ) -> None:
        self.db_path = db_path
        self.hold = hold
        self.during = during
        self.released = threading.Event()
        self.released_at = 0.0
        self.after_release: list[tuple[Any, ...]] | None = None
        self._conn: Any = None

    def take(self) -> None:
        if on_postgres(str(self.db_path)):
            conn = _postgres_connection(str(self.db_path))
            # Every write of a run's life takes its row first (decision 0108).
            assert conn.execute("SELECT id FROM runs FOR UPDATE").fetchall()
        else:
            conn = sqlite3.connect(
                self.db_path, isolation_level=None, check_same_thread=False, timeout=10
            )
            conn.execute("BEGIN IMMEDIATE")
        if self.during is not None:
            self.during(conn)
        self._conn = conn
        threading.Timer(self.hold, self._release).start()

    def _release(self) -> None:
        assert self._conn is not None
        # Taken before the commit that frees the lock: a write that waited for it is
        # delivered after this instant, whichever thread runs first after the commit.
        self.released_at = time.monotonic()
        if isinstance(self._conn, sqlite3.Connection):
            self._conn.execute("COMMIT")
        else:
            self._conn.commit()
        self._conn.close()
        self.after_release = snapshot(self.db_path)
        self.released.set()


@pytest.fixture
def holders() -> Iterator[list[LockHolder]]:
    made: list[LockHolder] = []
    yield made
    for holder in made:  # never leave a lock (or a timer thread) behind
        holder.released.wait(10)


@pytest.fixture
def waited(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each busy refusal an outcome's write waited out (or gave up at) said: a test
    that claims the write waited out the lock shows it was refused busy, on each backend,
    rather than merely blocked until the lock was freed."""
    seen: list[str] = []
    wait = RunSession._wait_out_busy

    async def spied(self: RunSession, busy: StoreBusyError, waiting_since: Any) -> None:
        seen.append(str(busy))
        await wait(self, busy, waiting_since)

    monkeypatch.setattr(RunSession, "_wait_out_busy", spied)
    return seen


def refused_busy(waited: list[str], database: str) -> bool:
    """Whether a write was refused busy past this module's timeout, in the backend's words."""
    said = (
        f"past the lock timeout ({BUSY_TIMEOUT_MS} ms)"
        if on_postgres(database)
        else "past the busy timeout"
    )
    return bool(waited) and all(said in w for w in waited)


class Observed:
    """Event types in commit order, each with the monotonic time it was delivered."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    def __call__(self, event: Event) -> None:
        self.seen.append((event.type, time.monotonic()))

    def at(self, type: str) -> list[float]:
        return [t for seen, t in self.seen if seen == type]


def tool_holding_the_lock(holder: LockHolder) -> RecordingTool:
    def call(c: ToolCall) -> ToolResult:
        holder.take()  # the lock is taken after the tool started and held past its end
        return ToolResult(content={"charged": 42}, summary="charged")

    return RecordingTool("charge", SideEffect.REMOTE_MUTATION, result=call)


def driver_for(
    store: agentrt.Store,
    tool: RecordingTool,
    observer: Observed,
    lease_ttl: timedelta = timedelta(seconds=30),
) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("charge", {"x": 1}), Decision.complete("done")]),
        policy=agentrt.SideEffectPolicy(
            {SideEffect.REMOTE_MUTATION: agentrt.PolicyDecision.allow()}
        ),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
        observer=observer,
        lease_ttl=lease_ttl,
    )


def test_the_busy_timeout_alone_refuses_a_write_with_store_busy_error(
    db_path: Path, holders: list[LockHolder]
) -> None:
    """What the loop's known-outcome writes must survive: a plain write gives up."""
    store = agentrt.open_store(db_path)
    holder = LockHolder(db_path, hold=0.5)
    holders.append(holder)
    holder.take()
    with pytest.raises(StoreBusyError, match="past the busy timeout"), store.transaction():
        pass
    store.close()


def test_a_tool_result_is_recorded_once_after_a_lock_held_past_the_busy_timeout(
    database: str, holders: list[LockHolder], waited: list[str]
) -> None:
    db_path = database
    store = agentrt.open_store(db_path)
    holder = LockHolder(db_path)
    holders.append(holder)
    tool = tool_holding_the_lock(holder)
    observed = Observed()
    run = driver_for(store, tool, observed).start_sync("charge once")
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert len(tool.calls) == 1
    step = store.list_steps(run.id)[0]
    assert step.status == "done"
    assert step.observation is not None
    assert step.observation.content == {"charged": 42}
    finished = [e for e in store.list_events(run_id=run.id) if e.type == "step.tool_finished"]
    assert [(e.step_id, e.payload["summary"]) for e in finished] == [(step.id, "charged")]
    # It really waited: the outcome was committed only after the lock was released,
    # which was long past the busy timeout.
    assert holder.released.wait(10)  # set after its snapshot, which may come after the run's end
    (finished_at,) = observed.at("step.tool_finished")
    assert finished_at >= holder.released_at
    assert HOLD_SECONDS > 5 * BUSY_TIMEOUT_MS / 1000
    assert store.lease(run.id).owner == ""
    assert store.verify_events().intact
    assert refused_busy(waited, database), waited
    store.close()


def test_a_lease_taken_while_the_database_is_busy_fails_loudly_and_records_nothing(
    database: str, holders: list[LockHolder], waited: list[str]
) -> None:
    db_path = database
    """The connection holding the lock is a second driver taking the run over: once it
    commits, the lease is not ours, and the outcome is left for the new owner."""

    def take_the_run_over(conn: Any) -> None:
        conn.execute(
            "UPDATE runs SET lease_owner = 'other/000000000000', lease_epoch = lease_epoch + 1, "
            "lease_expires_at = '9999-12-31T00:00:00.000000Z' WHERE status = 'RUNNING'"
        )

    store = agentrt.open_store(db_path)
    holder = LockHolder(db_path, during=take_the_run_over)
    holders.append(holder)
    tool = tool_holding_the_lock(holder)
    observed = Observed()
    with pytest.raises(LeaseLostError):
        driver_for(store, tool, observed).start_sync("charge once")
    assert holder.released.wait(10)
    assert len(tool.calls) == 1
    assert snapshot(db_path) == holder.after_release  # nothing written by us after it
    (run,) = store.list_runs(10)
    (step,) = store.list_steps(run.id)
    assert (run.status, step.status) == ("RUNNING", "executing")
    assert store.lease(run.id).owner == "other/000000000000"
    assert observed.at("step.tool_finished") == []
    assert refused_busy(waited, database), waited
    store.close()


def test_a_lease_that_lapses_while_the_database_stays_busy_fails_loudly_and_records_nothing(
    database: str, holders: list[LockHolder], waited: list[str]
) -> None:
    db_path = database
    """Nobody can renew a lease while another connection holds the write lock: once it
    has lapsed, another process may take the run, so the loop stops waiting."""
    store = agentrt.open_store(db_path)
    holder = LockHolder(db_path, hold=2.5)
    holders.append(holder)
    tool = tool_holding_the_lock(holder)
    observed = Observed()
    driver = driver_for(store, tool, observed, lease_ttl=timedelta(seconds=1))
    with pytest.raises(LeaseLostError, match="stayed busy until the lease"):
        driver.start_sync("charge once")
    assert not holder.released.is_set()  # it gave up while the lock was still held
    assert holder.released.wait(10)
    assert snapshot(db_path) == holder.after_release
    (run,) = store.list_runs(10)
    (step,) = store.list_steps(run.id)
    assert (run.status, step.status) == ("RUNNING", "executing")
    assert refused_busy(waited, database), waited
    store.close()


def test_a_completed_model_attempt_is_settled_once_after_a_lock_held_past_the_busy_timeout(
    database: str, holders: list[LockHolder], waited: list[str]
) -> None:
    db_path = database
    store = agentrt.open_store(db_path)
    holder = LockHolder(db_path)
    holders.append(holder)

    class Model:
        name = "fake:model"

        async def generate(self, request: ModelRequest) -> ModelResponse:
            holder.take()
            return ModelResponse(
                text="hi",
                tool_uses=[],
                stop_reason="end_turn",
                usage=Usage(1_000, 200, 0),
                raw=b"{}",
            )

    async def decide(input: StepInput) -> Decision:
        assert input.model is not None
        request = ModelRequest(system="", messages=[Message("user", [TextBlock("hello")])])
        reply = await input.model.generate(request)
        return Decision.complete({"text": reply.text})

    observed = Observed()
    driver = agentrt.Driver(
        store=store,
        agent=decide,
        policy=agentrt.default_policy(),
        model=ModelConfig(model=Model()),
        now=FakeClock(),
        new_id=Ids(),
        observer=observed,
    )
    run = driver.start_sync("ask once")
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    (call,) = store.list_model_calls(run.id)
    assert (call.status, call.input_tokens, call.output_tokens) == ("ok", 1_000, 200)
    assert (run.input_tokens, run.output_tokens, run.model_calls) == (1_000, 200, 1)
    (completed_at,) = observed.at("model.completed")
    assert completed_at >= holder.released_at
    assert refused_busy(waited, database), waited
    store.close()


def test_a_late_result_after_a_cancel_is_appended_once_after_a_lock_held_past_the_busy_timeout(
    database: str, holders: list[LockHolder], waited: list[str]
) -> None:
    db_path = database
    """An operator cancelled the run while its tool ran; the tool's late result is
    still appended (loop.md), after the lock another connection held is released."""
    store = agentrt.open_store(db_path)
    holder = LockHolder(db_path)
    holders.append(holder)

    def call(c: ToolCall) -> ToolResult:
        operator = agentrt.open_existing(db_path)
        try:
            agentrt.cancel(operator, c.run_id, by="ops", note="stop it")
        finally:
            operator.close()
        holder.take()
        return ToolResult(content={"charged": 42}, summary="charged late")

    tool = RecordingTool("charge", SideEffect.REMOTE_MUTATION, result=call)
    observed = Observed()
    run = driver_for(store, tool, observed).start_sync("charge once")
    assert (run.status, run.reason) == ("CANCELLED", "operator_cancelled")
    events = store.list_events(run_id=run.id)
    assert [e.type for e in events][-3:] == ["step.failed", "run.finished", "step.tool_finished"]
    late = events[-1]
    assert (late.payload["late"], late.payload["summary"]) == (True, "charged late")
    (finished_at,) = observed.at("step.tool_finished")
    assert finished_at >= holder.released_at
    assert refused_busy(waited, database), waited
    store.close()
