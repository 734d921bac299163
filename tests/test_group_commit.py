"""Group commit (`agentrt._group_commit`): runs in one process share fsyncs, never outcomes.

The committer queues each transaction's work and commits whatever is queued in one
durable transaction, a savepoint each (`Store.transactions`); these tests hold the
committer's thread so that the grouping is decided by the test, not by timing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt._chain import partition_of
from agentrt._errors import StoreError
from agentrt._group_commit import Committer
from agentrt._records import Limits
from agentrt._store import open_store
from agentrt.scripted import ScriptedAgent
from conftest import EPOCH, RecordingTool


def _create(run_id: str) -> Any:
    def work(tx: Any) -> str:
        run = tx.create_run(
            run_id,
            "goal",
            Limits(),
            owner="me",
            lease_expires_at=EPOCH,
            holder="{}",
            specs=[],
            now=EPOCH,
        )
        return str(run.id)

    return work


class HeldExecutor:
    """One thread, held by a first task until `release()`: what is submitted meanwhile queues."""

    def __init__(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.gate = threading.Event()
        self.pool.submit(self.gate.wait)

    def submit(self, fn: Any) -> concurrent.futures.Future[Any]:
        return self.pool.submit(fn)

    def release(self) -> None:
        self.gate.set()

    def close(self) -> None:
        self.gate.set()
        self.pool.shutdown()


@pytest.fixture
def held() -> Any:
    executor = HeldExecutor()
    yield executor
    executor.close()


def _commits(store: Any) -> list[str]:
    """The COMMITs the store's connection runs from now on (the SQLite backend's own)."""
    seen: list[str] = []
    store._conn.set_trace_callback(lambda sql: seen.append(sql) if sql == "COMMIT" else None)
    return seen


def test_works_queued_together_share_one_commit_and_complete_after_it(
    tmp_path: Path, held: HeldExecutor
) -> None:
    store = open_store(tmp_path / "g.db")
    committer = Committer(store, held)  # type: ignore[arg-type]
    commits = _commits(store)
    futures = [committer.submit(_create(f"r{i}")) for i in range(5)]
    assert not any(f.done() for f in futures)  # nothing acknowledged before its commit
    held.release()
    assert [f.result(timeout=30) for f in futures] == [f"r{i}" for i in range(5)]
    assert commits == ["COMMIT"]
    assert (committer.groups, committer.works) == (1, 5)
    # The works' events in submission order, one chain.
    assert [e.run_id for e in store.list_events()] == [f"r{i}" for i in range(5) for _ in (0, 1)]
    assert store.verify_events().intact
    store.close()


def test_no_future_completes_before_the_commit_is_made(tmp_path: Path, held: HeldExecutor) -> None:
    store = open_store(tmp_path / "g.db")
    committer = Committer(store, held)  # type: ignore[arg-type]
    futures: list[concurrent.futures.Future[Any]] = []
    done_at_commit: list[bool] = []

    def trace(sql: str) -> None:
        if sql == "COMMIT":
            done_at_commit.extend(f.done() for f in futures)

    store._conn.set_trace_callback(trace)  # type: ignore[attr-defined]
    futures.extend(committer.submit(_create(f"r{i}")) for i in range(3))
    held.release()
    for f in futures:
        f.result(timeout=30)
    assert done_at_commit == [False, False, False]
    store.close()


def test_a_work_that_raises_fails_alone_and_the_others_commit(
    tmp_path: Path, held: HeldExecutor
) -> None:
    store = open_store(tmp_path / "g.db")
    committer = Committer(store, held)  # type: ignore[arg-type]

    def failing(tx: Any) -> None:
        _create("bad")(tx)
        raise ValueError("this run's own failure")

    first, bad, last = (committer.submit(w) for w in (_create("r1"), failing, _create("r2")))
    held.release()
    assert (first.result(timeout=30), last.result(timeout=30)) == ("r1", "r2")
    with pytest.raises(ValueError, match="this run's own failure"):
        bad.result(timeout=30)
    assert sorted(r.id for r in store.list_runs()) == ["r1", "r2"]
    assert [e.seq for e in store.list_events()] == [1, 2, 3, 4]
    assert store.verify_events().intact
    store.close()


def test_a_group_that_cannot_commit_fails_every_work_with_nothing_written(
    tmp_path: Path, held: HeldExecutor
) -> None:
    store = open_store(tmp_path / "g.db")
    committer = Committer(store, held)  # type: ignore[arg-type]
    futures = [committer.submit(_create(f"r{i}")) for i in range(3)]
    store.close()  # the store goes away under the queued group
    held.release()
    for f in futures:
        with pytest.raises(StoreError, match="closed"):
            f.result(timeout=30)
    reread = open_store(tmp_path / "g.db")
    assert reread.list_runs() == [] and reread.list_events() == []
    reread.close()


def test_a_sqlite_failure_inside_a_work_is_a_store_error_of_that_work_only(
    tmp_path: Path, held: HeldExecutor
) -> None:
    store = open_store(tmp_path / "g.db")
    committer = Committer(store, held)  # type: ignore[arg-type]

    def bad_sql(tx: Any) -> None:
        tx.conn.execute("INSERT INTO no_such_table VALUES (1)")

    bad, good = committer.submit(bad_sql), committer.submit(_create("r1"))
    held.release()
    with pytest.raises(StoreError, match="the transaction failed, nothing was written") as info:
        bad.result(timeout=30)
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert good.result(timeout=30) == "r1"
    store.close()


def test_a_group_reads_the_chain_head_once_and_each_work_chains_from_the_one_before(
    tmp_path: Path,
) -> None:
    """The works after the first chain from the heads the works before them left (decision
    0120): one read of the head for the group; a work rolled back leaves no trace in them."""
    store = open_store(tmp_path / "g.db")
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]

    def failing(tx: Any) -> None:
        _create("bad")(tx)
        raise ZeroDivisionError("the work's own failure")

    outcomes = store.transactions([_create("r1"), failing, _create("r2"), _create("r3")])
    assert [o.value for o in outcomes] == ["r1", None, "r2", "r3"]
    assert len([s for s in statements if s.startswith("SELECT seq, hash FROM chain_head")]) == 1
    events = store.list_events()
    assert [e.run_id for e in events] == ["r1", "r1", "r2", "r2", "r3", "r3"]
    assert [e.seq for e in events] == [1, 2, 3, 4, 5, 6]
    assert store.verify_events().intact
    assert store.chain_head() == (6, events[-1].hash)
    store.close()


@pytest.mark.parametrize(
    ("partitions", "last"),
    [(1, "commits"), (1, "raises"), (1, "raises once its events are written"), (4, "commits")],
)
def test_a_group_moves_each_chain_head_once_to_the_last_event_committed_there(
    tmp_path: Path, partitions: int, last: str
) -> None:
    """A group's works chain on from one another in memory; each partition's `chain_head`
    row is written once, after every work and before the COMMIT, to the last event of a
    work that committed (decision 0129): a work rolled back, even one whose events were
    written before it failed, moves no head; the chain verifies and the next transaction
    chains on from it."""
    store = open_store(tmp_path / "g.db", chain_partitions=partitions)
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]

    def failing(tx: Any) -> None:
        _create("bad")(tx)
        if last == "raises once its events are written":
            # A statement naming `events` writes the work's events first (`TxCore.execute`).
            assert tx.execute("SELECT count(*) FROM events WHERE run_id = 'bad'").fetchone()[0]
        raise ZeroDivisionError("the work's own failure")

    commits = last == "commits"
    works = [_create(f"r{i}") for i in range(6)] + [_create("r6") if commits else failing]
    outcomes = store.transactions(works)
    assert [o.error is None for o in outcomes] == [True] * 6 + [commits]
    assert not store.run_id_exists("bad")
    moves = [s for s in statements if s.startswith("UPDATE chain_head")]
    heads = store.chain_heads()
    events = store.list_events()
    touched = {partition_of(e.run_id, partitions) for e in events}
    assert len(moves) == len(touched)
    last_release = max(i for i, s in enumerate(statements) if s.startswith("RELEASE"))
    assert all(last_release < statements.index(m) < statements.index("COMMIT") for m in moves)
    for part in range(partitions):
        mine = [e for e in events if partition_of(e.run_id, partitions) == part]
        assert heads[part] == ((mine[-1].seq, mine[-1].hash) if mine else (0, ""))
    assert store.verify_events().intact
    with store.transaction() as tx:
        _create("after")(tx)
    assert store.verify_events().intact
    assert len(store.list_events()) == len(events) + 2
    store.close()


@pytest.mark.parametrize("fails", [None, "own", "sqlite"])
def test_a_group_of_one_work_is_its_own_transaction_without_a_savepoint(
    tmp_path: Path, fails: str | None
) -> None:
    """One run in flight: its work's transaction is the group's (decision 0110), so no
    savepoint wraps it; what it raises still reaches its caller alone, nothing written."""
    store = open_store(tmp_path / "g.db")
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]

    def work(tx: Any) -> str:
        made = _create("r1")(tx)
        if fails == "own":
            raise ValueError("this run's own failure")
        if fails == "sqlite":
            tx.conn.execute("INSERT INTO no_such_table VALUES (1)")
        return made

    [outcome] = store.transactions([work])
    assert not [s for s in statements if "SAVEPOINT" in s or s.startswith("RELEASE")]
    if fails is None:
        assert (outcome.value, outcome.error) == ("r1", None)
        assert [r.id for r in store.list_runs()] == ["r1"]
        assert "COMMIT" in statements
    else:
        assert "COMMIT" not in statements and "ROLLBACK" in statements
        if fails == "own":
            assert isinstance(outcome.error, ValueError)
        else:
            assert isinstance(outcome.error, StoreError)
            assert str(outcome.error).startswith("the transaction failed, nothing was written")
            assert isinstance(outcome.error.__cause__, sqlite3.OperationalError)
        assert store.list_runs() == [] and store.list_events() == []
    store.close()


def test_sixty_four_runs_in_flight_all_complete_on_one_intact_chain(tmp_path: Path) -> None:
    """The async Driver's commits go through the committer: 64 runs at once complete,
    each run's events in its own order, the chain intact (how many commits were shared
    depends on the machine's timing: `benchmarks/concurrency.py` counts it)."""
    store = open_store(tmp_path / "many.db")
    tool = RecordingTool("t", SideEffect.READ_ONLY)

    def driver() -> agentrt.Driver:
        return agentrt.Driver(
            store=store,
            agent=ScriptedAgent(
                [Decision.tool_call("t", {"x": i}) for i in range(3)] + [Decision.complete()]
            ),
            policy=agentrt.default_policy(),
            tools=[tool],
        )

    async def main() -> list[agentrt.Run]:
        return list(await asyncio.gather(*(driver().start(f"g{i}") for i in range(64))))

    runs = asyncio.run(main())
    assert [r.status for r in runs] == ["COMPLETED"] * 64
    assert len(tool.calls) == 64 * 3
    for run in runs:
        types = [e.type for e in store.list_events(run_id=run.id)]
        assert types[:2] == ["run.created", "run.started"] and types[-1] == "run.finished"
        assert types.count("step.tool_started") == types.count("step.tool_finished") == 3
    assert store.verify_events().intact
    store.close()


def test_a_work_whose_caller_stopped_waiting_while_queued_never_runs_and_the_rest_go_on(
    tmp_path: Path, held: HeldExecutor
) -> None:
    store = open_store(tmp_path / "g.db")
    committer = Committer(store, held)  # type: ignore[arg-type]
    first, given_up, last = (committer.submit(_create(f"r{i}")) for i in range(3))
    assert given_up.cancel()  # what asyncio does to the future of a cancelled await
    held.release()
    assert (first.result(timeout=30), last.result(timeout=30)) == ("r0", "r2")
    assert sorted(r.id for r in store.list_runs()) == ["r0", "r2"]
    # Nothing is left draining: a later work commits.
    assert committer.submit(_create("r3")).result(timeout=30) == "r3"
    assert store.verify_events().intact
    store.close()


def test_a_cancelled_run_does_not_stop_another_runs_commits(tmp_path: Path) -> None:
    """One run's task is cancelled while its step waits for the committer; another run
    in the same process still completes."""
    store = open_store(tmp_path / "c.db")
    tool = RecordingTool("t", SideEffect.READ_ONLY)
    started = asyncio.Event()

    async def never_decides(input: agentrt.StepInput) -> Decision:
        started.set()
        await asyncio.Event().wait()  # until cancelled
        raise AssertionError("unreachable")

    def driver(agent: Any) -> agentrt.Driver:
        return agentrt.Driver(
            store=store, agent=agent, policy=agentrt.default_policy(), tools=[tool]
        )

    async def main() -> agentrt.Run:
        stuck = asyncio.create_task(driver(never_decides).start("stuck"))
        await started.wait()
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        steps = [Decision.tool_call("t", {"x": i}) for i in range(3)] + [Decision.complete()]
        return await asyncio.wait_for(driver(ScriptedAgent(steps)).start("goes on"), 120)

    run = asyncio.run(main())
    assert run.status == "COMPLETED"
    stuck_run = next(r for r in store.list_runs() if r.id != run.id)
    # The cancelled loop left its claimed step as a Gate close does, and gave its lease back.
    assert [s.status for s in store.list_steps(stuck_run.id)] == ["deciding"]
    assert store.lease(stuck_run.id).owner == ""
    store.close()


def test_works_a_loop_makes_in_one_iteration_go_to_the_committer_together_as_one_group(
    tmp_path: Path,
) -> None:
    """`submit_soon` (decision 0116): nothing reaches the committer until the loop's ready
    callbacks have run; then all of them at once, one commit. The committer's thread is
    free throughout: the grouping is the hand-over's, not a held thread's."""
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    committer = Committer(store, pool)
    commits = _commits(store)

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        futures = []
        for i in range(5):
            futures.append(committer.submit_soon(_create(f"r{i}"), loop))
            await_free = pool.submit(lambda: None)  # the committer's thread is idle...
            await_free.result(timeout=30)
            assert committer.works == 0  # ...and yet nothing was handed to it
        return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))

    assert asyncio.run(main()) == [f"r{i}" for i in range(5)]
    assert commits == ["COMMIT"]
    assert (committer.groups, committer.works) == (1, 5)
    assert [e.run_id for e in store.list_events()] == [f"r{i}" for i in range(5) for _ in (0, 1)]
    pool.shutdown()
    store.close()


def test_a_work_cancelled_before_its_loop_hands_it_over_never_runs(tmp_path: Path) -> None:
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    committer = Committer(store, pool)

    async def main() -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        first, dropped, last = (committer.submit_soon(_create(f"r{i}"), loop) for i in range(3))
        assert dropped.cancel()  # what asyncio does to it when its caller stops waiting
        return await asyncio.wrap_future(first), await asyncio.wrap_future(last)

    assert asyncio.run(main()) == ("r0", "r2")
    assert sorted(r.id for r in store.list_runs()) == ["r0", "r2"]
    assert (committer.groups, committer.works) == (1, 2)
    assert store.verify_events().intact
    pool.shutdown()
    store.close()


def test_a_refused_hand_over_fails_each_work_of_the_batch_and_none_runs(tmp_path: Path) -> None:
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    pool.shutdown()  # it refuses every submission, as at interpreter exit
    committer = Committer(store, pool)

    async def main() -> list[BaseException | str]:
        loop = asyncio.get_running_loop()
        futures = [committer.submit_soon(_create(f"r{i}"), loop) for i in range(2)]
        return await asyncio.gather(
            *(asyncio.wrap_future(f) for f in futures), return_exceptions=True
        )

    outcomes = asyncio.run(main())
    assert [type(o) for o in outcomes] == [RuntimeError, RuntimeError]
    assert "shutdown" in str(outcomes[0])
    assert store.list_runs() == []
    store.close()


# --- a lone work awaited at once (decision 0173) -------------------------------------------------


def test_a_lone_work_awaited_at_once_on_an_idle_loop_is_handed_over_without_a_loop_iteration(
    tmp_path: Path,
) -> None:
    """Nothing else is ready on the loop and its caller awaits it at once: the batch would
    hold it alone, so it reaches the committer before the loop runs again."""
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    committer = Committer(store, pool)
    commits = _commits(store)

    async def main() -> str:
        loop = asyncio.get_running_loop()
        waiting = committer.submit_soon(_create("r1"), loop, awaited_at_once=True)
        pool.submit(lambda: None).result(timeout=30)  # the drain handed over ran before it
        assert (committer.groups, committer.works) == (1, 1)
        assert commits == ["COMMIT"]
        assert not waiting.done()  # its outcome is set on the loop, once it runs again
        return await waiting

    assert asyncio.run(main()) == "r1"
    assert [r.id for r in store.list_runs()] == ["r1"]
    pool.shutdown()
    store.close()


def test_a_work_awaited_at_once_waits_for_the_hand_over_while_other_callbacks_are_ready(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    committer = Committer(store, pool)

    async def main() -> str:
        loop = asyncio.get_running_loop()
        loop.call_soon(lambda: None)  # another callback is ready: it may make works too
        waiting = committer.submit_soon(_create("r1"), loop, awaited_at_once=True)
        pool.submit(lambda: None).result(timeout=30)
        assert committer.works == 0  # the committer's thread is idle, and yet has nothing
        return await waiting

    assert asyncio.run(main()) == "r1"
    assert (committer.groups, committer.works) == (1, 1)
    pool.shutdown()
    store.close()


def test_runs_woken_together_still_hand_their_works_awaited_at_once_over_as_one_group(
    tmp_path: Path,
) -> None:
    """Decision 0116's grouping is kept: tasks that run in one loop iteration each find
    the others' callbacks ready (or a batch begun), so their works go together."""
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    committer = Committer(store, pool)
    commits = _commits(store)

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()

        async def one(i: int) -> str:
            return await committer.submit_soon(_create(f"r{i}"), loop, awaited_at_once=True)

        return list(await asyncio.gather(*(one(i) for i in range(5))))

    assert asyncio.run(main()) == [f"r{i}" for i in range(5)]
    assert commits == ["COMMIT"]
    assert (committer.groups, committer.works) == (1, 5)
    assert [e.run_id for e in store.list_events()] == [f"r{i}" for i in range(5) for _ in (0, 1)]
    pool.shutdown()
    store.close()


def test_a_refused_hand_over_of_a_lone_work_fails_its_caller_and_it_never_runs(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    pool.shutdown()  # it refuses every submission, as at interpreter exit
    committer = Committer(store, pool)

    async def main() -> None:
        waiting = committer.submit_soon(
            _create("r1"), asyncio.get_running_loop(), awaited_at_once=True
        )
        with pytest.raises(RuntimeError, match="shutdown"):
            await waiting

    asyncio.run(main())
    assert store.list_runs() == []
    store.close()


def test_a_groups_answers_to_one_loop_wake_it_once_each_with_its_own_outcome_in_order(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    committer = Committer(store, pool)
    woken: list[Any] = []

    def fails(tx: Any) -> str:
        raise ValueError("no")

    async def main() -> list[BaseException | str]:
        loop = asyncio.get_running_loop()
        threadsafe = loop.call_soon_threadsafe

        def counted(callback: Any, *args: Any, **kwargs: Any) -> Any:
            woken.append(callback)
            return threadsafe(callback, *args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        futures = [
            committer.submit_soon(work, loop) for work in (_create("r0"), fails, _create("r2"))
        ]
        return list(await asyncio.gather(*futures, return_exceptions=True))

    first, failed, last = asyncio.run(main())
    assert (first, last) == ("r0", "r2")
    assert isinstance(failed, ValueError) and str(failed) == "no"
    assert len(woken) == 1  # one callback on the loop for the group's three answers
    assert (committer.groups, committer.works) == (1, 3)
    assert sorted(r.id for r in store.list_runs()) == ["r0", "r2"]
    pool.shutdown()
    store.close()


# --- a loop's works answered on the loop (decision 0121) ----------------------------------------


def test_a_loops_work_is_answered_on_an_asyncio_future_of_that_loop(tmp_path: Path) -> None:
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    committer = Committer(store, pool)

    async def main() -> str:
        loop = asyncio.get_running_loop()
        waiting = committer.submit_soon(_create("r1"), loop)
        assert isinstance(waiting, asyncio.Future)
        assert not isinstance(waiting, concurrent.futures.Future)
        assert waiting.get_loop() is loop
        return await waiting

    assert asyncio.run(main()) == "r1"
    assert [r.id for r in store.list_runs()] == ["r1"]
    pool.shutdown()
    store.close()


def test_a_loop_future_cancelled_once_its_group_began_still_commits_and_tells_cancelled(
    tmp_path: Path,
) -> None:
    """Once its group runs, a work commits or fails with it whatever its caller does; the
    caller who stopped waiting is told it was cancelled, not the outcome."""
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    committer = Committer(store, pool)
    cancelled = threading.Event()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        box: list[asyncio.Future[str]] = []

        def work(tx: Any) -> str:
            loop.call_soon_threadsafe(box[0].cancel)  # its caller gives up meanwhile
            assert cancelled.wait(30)
            return str(_create("r1")(tx))

        waiting = committer.submit_soon(work, loop)
        box.append(waiting)
        waiting.add_done_callback(lambda _: cancelled.set())
        loop.set_exception_handler(lambda _, context: errors.append(context))
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # The committer's one thread is through its drain once this runs on it; the
        # answer it sent this loop before that has been handled.
        await asyncio.wrap_future(pool.submit(lambda: None))
        await asyncio.sleep(0)

    errors: list[dict[str, Any]] = []
    asyncio.run(main())
    assert errors == []  # the answer to a cancelled future is dropped, never set
    assert [r.id for r in store.list_runs()] == ["r1"]  # committed all the same
    assert (committer.groups, committer.works) == (1, 1)
    assert store.verify_events().intact
    pool.shutdown()
    store.close()


def test_a_loop_closed_before_its_work_is_answered_leaves_the_others_answered(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "g.db")
    held = HeldExecutor()
    committer = Committer(store, held)
    loop = asyncio.new_event_loop()
    try:
        waiting = committer.submit_soon(_create("r1"), loop)
        loop.run_until_complete(asyncio.sleep(0))  # the loop hands the work over
    finally:
        loop.close()  # and is gone before the commit answers it
    other = committer.submit(_create("r2"))
    held.release()
    assert other.result(timeout=30) == "r2"
    assert sorted(r.id for r in store.list_runs()) == ["r1", "r2"]
    assert not waiting.done()  # nobody was left on its loop to tell
    third = committer.submit(_create("r3"))  # and the committer goes on
    assert third.result(timeout=30) == "r3"
    held.close()
    store.close()


def test_a_work_raising_stopiteration_reaches_its_loop_caller_as_an_error(
    tmp_path: Path,
) -> None:
    """An asyncio future refuses `StopIteration` (`TypeError` in the loop's callback):
    its caller is told a `RuntimeError` from it, as a coroutine raising it would be,
    rather than never told at all."""
    store = open_store(tmp_path / "g.db")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    committer = Committer(store, pool)

    def work(tx: Any) -> str:
        _create("r1")(tx)
        raise StopIteration("an exhausted iterator")

    async def main() -> BaseException | None:
        loop = asyncio.get_running_loop()
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: errors.append(context))
        waiting = committer.submit_soon(work, loop)
        await asyncio.sleep(0)  # the loop hands the work over
        # The committer's one thread is through its drain once this runs on it; its
        # answer to this loop was sent before, so it has been handled once we are back.
        await asyncio.wrap_future(pool.submit(lambda: None))
        await asyncio.sleep(0)
        assert errors == []
        assert waiting.done()  # never left waiting forever
        return waiting.exception()

    error = asyncio.run(main())
    assert isinstance(error, RuntimeError)
    assert isinstance(error.__cause__, StopIteration)
    assert store.list_runs() == []  # the work's writes were rolled back alone
    pool.shutdown()
    store.close()


FORKED = """
import asyncio, os, signal, sys
import agentrt
from agentrt import Decision, ToolResult
from agentrt.scripted import ScriptedAgent

@agentrt.tool(side_effect="read_only", timeout=5)
def read_page(page: int) -> ToolResult:
    'Read one page.'
    return ToolResult({"page": page})

def run(path: str) -> str:
    store = agentrt.open_store(path)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent(
                [Decision.tool_call("read_page", {"page": 1}), Decision.complete()]
            ),
            policy=agentrt.default_policy(),
            tools=[read_page],
        )
        return str(asyncio.run(driver.start("read a page")).status)
    finally:
        store.close()

print("parent", run(os.path.join(sys.argv[1], "parent.db")), flush=True)
pid = os.fork()
if pid == 0:
    signal.alarm(30)  # a child that hangs dies of it, and the parent says so
    print("child", run(os.path.join(sys.argv[1], "child.db")), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child ended", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_forked_child_of_a_process_that_committed_off_its_loop_commits_on_threads_of_its_own(
    tmp_path: Path,
) -> None:
    """A child forked after its parent's async runs committed on the I/O threads has none
    of those threads: work handed to the parent's executor would wait for them for ever.
    The child gets its own, and its committers (`os.register_at_fork`)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "parent COMPLETED",
        "child COMPLETED",
        "child ended 0",
    ], done.stderr


def _commit_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "agentrt-commit"]


def test_a_committer_commits_on_a_daemon_thread_of_its_own_which_ends_when_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an executor given, a committer drains on its own thread (decision 0126): a
    daemon, so it never holds the process open, which ends once idle for `_IDLE_S` and is
    started again by the next work."""
    from agentrt import _group_commit

    monkeypatch.setattr(_group_commit, "_IDLE_S", 0.05)
    store = open_store(tmp_path / "g.db")
    committer = Committer(store)
    before = set(_commit_threads())
    assert committer.submit(_create("r1")).result(timeout=30) == "r1"
    (thread,) = set(_commit_threads()) - before
    assert thread.daemon
    thread.join(timeout=30)  # idle past _IDLE_S: it ends
    assert not thread.is_alive()
    assert committer.submit(_create("r2")).result(timeout=30) == "r2"  # a new one takes over
    assert sorted(r.id for r in store.list_runs()) == ["r1", "r2"]
    store.close()


def test_a_committer_whose_thread_cannot_start_fails_the_caller_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path / "g.db")
    committer = Committer(store)

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refuse)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            committer.submit(_create("r1"))
    assert store.list_runs() == []  # its work never ran
    assert committer.submit(_create("r2")).result(timeout=30) == "r2"  # the next one does
    assert [r.id for r in store.list_runs()] == ["r2"]
    store.close()


def test_works_queued_while_the_committers_thread_failed_to_start_fail_rather_than_wait_for_ever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A work queued by another thread while the first caller's drain is being started
    finds a drain under way and returns; if that thread then cannot start, the work is
    failed with the same error (it never runs), not left queued with no thread to run
    it."""
    store = open_store(tmp_path / "g.db")
    committer = Committer(store)
    entered, go_on = threading.Event(), threading.Event()
    real_start = threading.Thread.start

    def failing_start(self: threading.Thread) -> None:
        if self.name != "agentrt-commit":
            return real_start(self)
        entered.set()
        go_on.wait(10)
        raise RuntimeError("can't start new thread")

    first: list[BaseException] = []

    def submit_first() -> None:
        try:
            committer.submit(_create("r1"))
        except RuntimeError as e:
            first.append(e)

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", failing_start)
        caller = threading.Thread(target=submit_first)
        caller.start()
        assert entered.wait(10)
        second = committer.submit(_create("r2"))  # a drain is being started: it queues
        go_on.set()
        caller.join(10)
    assert len(first) == 1
    with pytest.raises(RuntimeError, match="can't start new thread"):
        second.result(timeout=10)
    assert store.list_runs() == []  # neither work ran
    assert committer.submit(_create("r3")).result(timeout=30) == "r3"
    store.close()
