"""One process's life in a scenario, and the in-process harness that kills it on purpose.

`Life` is what every process of a scenario does, real (process mode) or
simulated (here): open the database (a SQLite file or a PostgreSQL schema),
build a fresh Driver with the kit's probes,
start the run or recover it, and keep going as a restarted program would:
resume a RUNNING run (refused with `RunLeasedError` until a dead owner's lease
expires, so it retries in small, bounded sleeps; in the harness, whose
simulated processes share one `VirtualWall`, it moves that clock past the
expiry instead, so no real time passes and load cannot lapse a live lease), ask the operator about
a pending approval and approve, reject or leave it, until the run ends, is
left waiting, or the process is crashed at its armed crash point.

In this module a crash is what a dead process leaves, inside one Python
process: at an after-commit point the driver's task is parked forever (it
awaits an event nobody sets), its heartbeat is stopped without releasing the
lease, and its database handle is closed under it. Inside a transaction, the
handle is closed on the I/O thread before the COMMIT, which rolls the
transaction back (on PostgreSQL the server rolls back what the closed connection
held). The next "process" is a fresh Driver on a fresh open of the
same database and, when the scenario is given by a factory, a fresh Scenario built
by it: nothing the dead process held in memory (an agent's or a tool's state)
survives into the next one, as it would not survive a real death. A Scenario
instance cannot be rebuilt, so its objects are shared by every simulated
process (`SharedScenarioWarning`). At the end the parked tasks are cancelled,
which is when a careless implementation would write (their cancellation
handlers try to record and to release the lease): the harness checks that the
record did not change.

Every read the kit makes of the record goes through the store interface
(`Store.newest_event`, `event_hash_exists`, `record_ids`, and the reads a
`Result` is built from), on the dying process's own store for what its open
transaction wrote and on a store opened apart for what is committed, so the
same checks hold on SQLite and on PostgreSQL. A store whose lease clock is not
the wall (PostgreSQL judges leases by the server's clock) cannot have it moved:
there the harness waits a dead owner's lease out in real time, in one sleep to
the expiry the refusal named (decision 0097).

The simulated processes run on an event loop and a thread of their own, watched
from the caller's: an agent or a tool that blocks that loop is reported as a
process that did not finish within the timeout, as process mode reports a hung child.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import traceback
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .. import (
    Driver,
    Gate,
    NotFoundError,
    Operator,
    Run,
    RunLeasedError,
    RunStatus,
    Store,
    StoreError,
    open_existing,
    open_store,
)
from ..lowlevel import Clock, IdFactory, RunSession, is_db_url, run_sync, wall_clock
from ._journal import Journal, SeenAgent, journal_this_process, read_journal, seen_tool
from ._scenario import (
    Crash,
    LoopContext,
    Scenario,
    ScenarioSource,
    Verdict,
    answer,
    build,
    floor_clock,
)

# A scenario whose operator keeps approving while the policy keeps asking again
# would otherwise never end; no honest scenario needs this many answers.
MAX_OPERATOR_ROUNDS = 100

START = "start"
RECOVER = "recover"

CASE_CHAIN_PARTITIONS: int | None = None
"""The chain partitions every process opens its database with (`open_store`'s default).
A crash matrix's image of a fresh SQLite file is made with the same (`_matrix._Player`),
so each case's copy is the file this open would have created."""


@dataclass(frozen=True)
class ProcessPlan:
    """What one process is told: which file and run, its number, and its one armed crash."""

    db_path: str
    journal_path: str
    run_id: str
    process: int
    role: str  # START or RECOVER
    crash: Crash | None
    crash_index: int
    fresh_process: bool  # a real new process: rebuilt clocks and ids need guarding

    def to_json(self) -> dict[str, Any]:
        return {
            "db_path": self.db_path,
            "journal_path": self.journal_path,
            "run_id": self.run_id,
            "process": self.process,
            "role": self.role,
            "crash": None if self.crash is None else self.crash.to_json(),
            "crash_index": self.crash_index,
            "fresh_process": self.fresh_process,
        }

    @classmethod
    def nth(
        cls,
        process: int,
        crashes: Sequence[Crash],
        crash_index: int,
        *,
        db_path: str | Path,
        journal_path: Path,
        run_id: str,
        fresh_process: bool,
    ) -> ProcessPlan:
        """The plan of process number `process` (from 1), armed with the next crash, if any."""
        return cls(
            db_path=str(db_path),
            journal_path=str(journal_path),
            run_id=run_id,
            process=process,
            role=START if process == 1 else RECOVER,
            crash=crashes[crash_index] if crash_index < len(crashes) else None,
            crash_index=crash_index,
            fresh_process=fresh_process,
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessPlan:
        crash = data.get("crash")
        return cls(
            db_path=str(data["db_path"]),
            journal_path=str(data["journal_path"]),
            run_id=str(data["run_id"]),
            process=int(data["process"]),
            role=str(data["role"]),
            crash=None if crash is None else Crash.from_json(crash),
            crash_index=int(data["crash_index"]),
            fresh_process=bool(data["fresh_process"]),
        )


class Crasher:
    """How a process dies at its crash point (overridden per mode)."""

    def after_commit(self, session: RunSession) -> Awaitable[None] | None:
        raise NotImplementedError

    def inside_tx(self, session: RunSession) -> None:
        raise NotImplementedError


class Life:
    """One process of a scenario: see the module docstring."""

    def __init__(
        self,
        scenario: Scenario,
        plan: ProcessPlan,
        crasher: Crasher,
        wall: VirtualWall | None = None,
    ) -> None:
        self.scenario = scenario
        self.plan = plan
        self.crasher = crasher
        # The clock leases are read from: the real one in a real process; in the
        # harness, one shared by the simulated processes, moved past a dead
        # owner's lease instead of sleeping it out.
        self.virtual_wall = wall
        self.wall: Clock = wall if wall is not None else wall_clock
        self.crashed = False
        self.journal = Journal(plan.journal_path, plan.process)
        self.store: Store = open_store(plan.db_path, chain_partitions=CASE_CHAIN_PARTITIONS)
        clock: Clock = scenario.now or wall_clock
        new_id: IdFactory | None = scenario.new_id
        if plan.fresh_process:
            # A factory rebuilt in a new process starts its fake clock and its id
            # sequence over: guard both against what earlier processes recorded.
            floor, used = floor_and_ids(self.store)
            clock = floor_clock(clock, floor)
            if new_id is not None:
                new_id = skipping_ids(new_id, used | {plan.run_id})
        self.clock = clock
        self.new_id = new_id

    # -- the probes --------------------------------------------------------

    def _armed(self, point: str, step: int, in_tx: bool) -> bool:
        crash = self.plan.crash
        return (
            crash is not None
            and not self.crashed
            and crash.at.value == point
            and crash.step == step
            and crash.inside_tx == in_tx
        )

    def probe(self, point: str, session: RunSession) -> Awaitable[None] | None:
        if not self._reached(point, session, in_tx=False):
            return None
        return self.crasher.after_commit(session)

    def probe_in_tx(self, point: str, session: RunSession) -> None:
        if self._reached(point, session, in_tx=True):
            self.crasher.inside_tx(session)

    def _reached(self, point: str, session: RunSession, *, in_tx: bool) -> bool:
        """Journal the probe; when it is the armed crash, journal the crash and say so."""
        step = _step_of(session)
        self.journal.append("probe", point=point, step=step, in_tx=in_tx)
        if not self._armed(point, step, in_tx):
            return False
        self.crashed = True
        extra: dict[str, Any] = {}
        if in_tx:
            # Read before the crash rolls it back: the event this transaction added.
            extra["lost_event"] = _uncommitted_head(session, self.plan.db_path)
        self.journal.append(
            "crash",
            index=self.plan.crash_index,
            point=point,
            step=step,
            in_tx=in_tx,
            step_id=_step_id_of(session),
            **extra,
        )
        return True

    # -- the life ------------------------------------------------------------

    def driver(self) -> Driver:
        s = self.scenario
        return Driver(
            self.store,
            SeenAgent(s.agent, self.journal),
            s.policy,
            tools=[seen_tool(t, self.journal) for t in s.tools],
            model=s.model,
            reconcile=s.reconcile,
            now=self.clock,
            new_id=self.new_id,
            lease_ttl=s.lease_ttl,
            lease_owner=f"testkit-p{self.plan.process}",
            wall=self.wall,
            probe=self.probe,
            probe_in_tx=self.probe_in_tx,
        )

    def gate(self, driver: Driver) -> Gate:
        """A gate for a consumer's own loop, configured as `driver` is (its tools, ids, lease)."""
        s = self.scenario
        return Gate(
            self.store,
            s.policy,
            tools=driver.tools,
            model=s.model,
            reconcile=s.reconcile,
            now=self.clock,
            new_id=self.new_id,
            lease_ttl=s.lease_ttl,
            lease_owner=f"testkit-p{self.plan.process}",
            wall=self.wall,
            probe=self.probe,
            probe_in_tx=self.probe_in_tx,
        )

    async def live(self) -> None:
        """Run this process's share of the scenario. Errors propagate unless it crashed."""
        plan = self.plan
        journal_this_process(self.journal)
        self.journal.append("process", pid=os.getpid(), role=plan.role)
        try:
            driver = self.driver()
            if plan.role == START:
                run = await self._loop(driver, resuming=False)
            else:
                run = self.store.get_run(plan.run_id)
            await self._until_settled(driver, run)
        except BaseException as exc:
            if self.crashed:
                # A dead process does nothing more; what its corpse raises is moot.
                return
            self.journal.append("error", error="".join(traceback.format_exception(exc)))
            raise
        finally:
            if not self.crashed:
                self.store.close()
                self.journal.close()

    async def _until_settled(self, driver: Driver, run: Run) -> None:
        operator = Operator(self.store, now=self.clock)
        for _ in range(MAX_OPERATOR_ROUNDS):
            if run.status == RunStatus.RUNNING:
                run = await self._resume(driver)
            elif run.status == RunStatus.WAITING_FOR_APPROVAL:
                pending = self.store.pending_approvals(run.id, cap=None)
                if not pending:
                    # Decided (by an earlier process) but not yet resumed.
                    run = await self._resume(driver)
                    continue
                approval = pending[-1]
                verdict = answer(self.scenario, approval)
                self.journal.append(
                    "operator", approval_id=approval.id, kind=approval.kind, verdict=str(verdict)
                )
                if verdict == Verdict.APPROVE:
                    operator.approve(
                        run.id, approval.id, by="testkit-operator", shown_hash=approval.hash
                    )
                    run = await self._resume(driver)
                elif verdict == Verdict.REJECT:
                    operator.reject(
                        run.id,
                        approval.id,
                        by="testkit-operator",
                        note="rejected by the scenario's operator",
                        shown_hash=approval.hash,
                    )
                    run = self.store.get_run(run.id)
                else:
                    break
            else:
                break
        else:
            raise RuntimeError(
                f"run {run.id} still {run.status} after {MAX_OPERATOR_ROUNDS} operator rounds"
            )
        self.journal.append("end", status=str(run.status), reason=str(run.reason))

    async def _loop(self, driver: Driver, *, resuming: bool) -> Run:
        s = self.scenario
        if s.loop is None:
            if resuming:
                return await driver.resume(self.plan.run_id)
            return await driver.start(s.goal, s.limits, run_id=self.plan.run_id)
        ctx = LoopContext(
            driver=driver,
            store=self.store,
            run_id=self.plan.run_id,
            goal=s.goal,
            limits=s.limits,
            resuming=resuming,
            probe=self.probe,
            probe_in_tx=self.probe_in_tx,
            gate=self.gate(driver),
            agent=driver.agent,
        )
        return await s.loop(ctx)

    async def _resume(self, driver: Driver) -> Run:
        """Resume, waiting out a dead owner's lease: in the harness by moving its clock past
        the expiry, in a real process in small, bounded sleeps."""
        ttl = self.scenario.lease_ttl.total_seconds()
        deadline = time.monotonic() + 10 * ttl + 10.0
        while True:
            self.journal.append("resume.call")
            try:
                return await self._loop(driver, resuming=True)
            except RunLeasedError as exc:
                self.journal.append("resume.refused", owner=exc.owner)
                if self.virtual_wall is not None and exc.expires_at is not None:
                    # Waiting is the clock's to do here: one refusal, then the lease
                    # has run out, however slowly the machine got there.
                    self.virtual_wall.pass_beyond(exc.expires_at)
                    now = self._lease_clock()
                    if now > exc.expires_at:
                        continue
                    # The store judges leases by a clock of its own (a server's), which
                    # no harness can move: the lease is waited out in real time, in one
                    # sleep (the dead owner's heartbeat is stopped: it cannot move).
                    if time.monotonic() >= deadline:
                        raise
                    left = (exc.expires_at - now).total_seconds()
                    await asyncio.sleep(min(left + 0.005, max(0.0, deadline - time.monotonic())))
                    continue
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(_until(exc.expires_at, ttl, self.wall))

    def _lease_clock(self) -> datetime:
        """The time the store judges leases by (the wall for SQLite, a server's clock)."""
        return self.store.lease_now(self.wall)


class VirtualWall:
    """The harness's wall clock: the real one plus however long it has waited out leases.

    Every simulated process of one case reads its leases from the same instance,
    so the leases they write and judge agree, as they agree between real
    processes on the real clock. A dead owner's lease is waited out by moving
    this clock just past its expiry: no real time passes, and a live owner's
    lease (renewed on this clock) never lapses because the machine is slow.
    """

    def __init__(self) -> None:
        self._offset = timedelta(0)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + self._offset

    def pass_beyond(self, moment: datetime) -> None:
        with self._lock:
            behind = moment - (datetime.now(UTC) + self._offset)
            if behind >= timedelta(0):
                self._offset += behind + timedelta(milliseconds=1)


def _until(expires_at: datetime | None, ttl: float, wall: Clock = wall_clock) -> float:
    """How long to sleep before trying again: to just past the expiry, in steps of at most 0.1 s."""
    if expires_at is None:
        return min(0.05, ttl)
    left = (expires_at - wall()).total_seconds()
    return max(0.005, min(left + 0.005, 0.1))


def note_crash_checked(journal_path: Path, process: int, db_path: str | Path) -> None:
    """Right after process `process` died: is the event of its lost transaction on file?

    Checked before anything else runs, because a later process may legitimately
    write the very same event again (same clock reading, same content).
    """
    lost = ""
    for rec in read_journal(journal_path):
        if rec["type"] == "crash" and rec["process"] == process:
            lost = str(rec.get("lost_event", ""))
    if not lost:
        return
    with open_existing(str(db_path), read_only=True) as store:
        present = store.event_hash_exists(lost)
    supervisor = Journal(journal_path, 0)
    try:
        supervisor.append("crash.checked", crashed=process, lost_present=present)
    finally:
        supervisor.close()


def _step_of(session: RunSession) -> int:
    return session.steps[-1].index if session.steps else -1


def _step_id_of(session: RunSession) -> str:
    return session.steps[-1].id if session.steps else ""


def _uncommitted_head(session: RunSession, db_path: str) -> str:
    """The newest event the open transaction wrote, '' if it wrote none.

    The store's own connection (this thread is inside its transaction) sees the
    transaction's events; a store opened apart sees only what is committed.
    """
    mine = session.config.store.newest_event(session.run_id)
    with open_existing(db_path, read_only=True) as other:
        committed = other.newest_event(session.run_id)
    if mine is None or (committed is not None and committed.hash == mine.hash):
        return ""
    return mine.hash


def recorded_floor_and_ids(db_path: str) -> tuple[datetime | None, set[str]]:
    """The newest time recorded and every id recorded, read through the store interface
    (nothing when the database does not exist or holds no agentrt record yet)."""
    if not is_db_url(db_path) and not os.path.exists(db_path):
        return None, set()
    try:
        with open_existing(db_path, read_only=True) as store:
            return floor_and_ids(store)
    except StoreError:
        # Not an agentrt record yet (created, never migrated): nothing recorded.
        return None, set()


def floor_and_ids(store: Store) -> tuple[datetime | None, set[str]]:
    """`recorded_floor_and_ids` on a store already open (a process's own, before it writes)."""
    newest = store.newest_event()
    return (newest.at if newest is not None else None), store.record_ids()


def skipping_ids(new_id: IdFactory, used: set[str]) -> IdFactory:
    """`new_id`, skipping ids already recorded (a rebuilt deterministic factory repeats them)."""

    def fresh() -> str:
        for _ in range(1_000_000):
            value = new_id()
            if value not in used:
                used.add(value)
                return value
        raise RuntimeError("the scenario's new_id keeps returning ids already recorded")

    return fresh


# -- the in-process harness ----------------------------------------------------


class _Parked(Crasher):
    """Kills a simulated process: its task parks forever, its handle closes under it."""

    def __init__(self, crashed: asyncio.Future[None]) -> None:
        self.crashed = crashed
        self.loop = crashed.get_loop()

    def _signal(self) -> None:
        if not self.crashed.done():
            self.crashed.set_result(None)

    def after_commit(self, session: RunSession) -> Awaitable[None]:
        # Runs in the driver's own task, right after the commit: from here on the
        # task never proceeds (nothing sets the event), like a dead process.
        if session.heartbeat is not None:
            session.heartbeat.stop()
        session.config.store.close()
        self._signal()
        return _park()

    def inside_tx(self, session: RunSession) -> None:
        # On the store's I/O thread, inside the transaction: closing the
        # connection rolls the transaction back (nothing of it reaches the file);
        # close first so the heartbeat, blocked on our write lock, can be joined.
        session.config.store.close()
        if session.heartbeat is not None:
            session.heartbeat.stop()
        self.loop.call_soon_threadsafe(self._signal)


async def _park() -> None:
    await asyncio.Event().wait()


# How long past a simulated process's timeout the watchdog leaves the harness's own
# timeout to act, before it judges the harness's event loop blocked.
_BLOCKED_GRACE_S = 1.0


class _Watch:
    """Which simulated process is playing and since when, for the watchdog to read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current = (1, time.monotonic())
        self.loop: asyncio.AbstractEventLoop | None = None

    def begin(self, process: int) -> None:
        with self._lock:
            self._current = (process, time.monotonic())

    def current(self) -> tuple[int, float]:
        with self._lock:
            return self._current

    def abandon(self) -> None:
        """Cancel every task of the blocked loop, for whenever it runs again."""
        loop = self.loop
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing to cancel
            if loop is not None:
                loop.call_soon_threadsafe(_cancel_all, loop)


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()


async def run_in_process(
    scenario: ScenarioSource,
    crashes: Sequence[Crash],
    *,
    db_path: str | Path,
    run_id: str,
    journal_path: Path,
    timeout: float,
) -> list[str]:
    """Play the scenario with simulated crashes; return the errors of its processes.

    The simulated processes run on an event loop of their own, on a thread of
    their own, watched from the caller's: an agent or a tool that blocks that
    loop (a synchronous model client in `decide`, say) is reported as a process
    that did not finish within `timeout`, as process mode reports a child that
    hangs. A thread cannot be killed: the blocked one is left behind (a daemon),
    its tasks cancelled for when it wakes.
    """
    watch = _Watch()
    caller = asyncio.get_running_loop()
    ended = asyncio.Event()
    outcome: list[list[str]] = []
    failure: list[BaseException] = []

    def harness() -> None:
        try:
            outcome.append(
                run_sync(
                    _play(
                        scenario,
                        crashes,
                        db_path=db_path,
                        run_id=run_id,
                        journal_path=journal_path,
                        timeout=timeout,
                        watch=watch,
                    )
                )
            )
        except BaseException as exc:
            failure.append(exc)
        with contextlib.suppress(RuntimeError):  # the caller stopped waiting, closed its loop
            caller.call_soon_threadsafe(ended.set)

    threading.Thread(target=harness, name="agentrt-testkit-harness", daemon=True).start()
    while not ended.is_set():
        seen = watch.current()
        left = seen[1] + timeout + _BLOCKED_GRACE_S - time.monotonic()
        try:
            await asyncio.wait_for(ended.wait(), timeout=max(0.0, left))
        except TimeoutError:
            if ended.is_set() or watch.current() != seen:
                continue
            watch.abandon()
            return [
                f"process {seen[0]} did not finish within {timeout:g}s (it blocked its "
                "event loop; its thread is left behind)"
            ]
    if failure:
        raise failure[0]
    return outcome[0]


async def _play(
    scenario: ScenarioSource,
    crashes: Sequence[Crash],
    *,
    db_path: str | Path,
    run_id: str,
    journal_path: Path,
    timeout: float,
    watch: _Watch,
) -> list[str]:
    """The simulated processes, one after the other (see `run_in_process`).

    A factory (reference or callable) is called again for every simulated
    process, as process mode rebuilds it in every child, with the same guards
    for a rebuilt fake clock and id sequence. A Scenario instance is shared by
    all of them: whatever its agent, tools or operator keep in memory outlives
    each simulated death.
    """
    shared = scenario if isinstance(scenario, Scenario) else None
    errors: list[str] = []
    parked: list[tuple[asyncio.Task[None], Life]] = []
    next_crash = 0
    process = 1
    wall = VirtualWall()
    watch.loop = asyncio.get_running_loop()
    while True:
        watch.begin(process)
        crashed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        plan = ProcessPlan.nth(
            process,
            crashes,
            next_crash,
            db_path=db_path,
            journal_path=journal_path,
            run_id=run_id,
            fresh_process=shared is None,
        )
        try:
            this = shared if shared is not None else build(scenario)
            life = Life(this, plan, _Parked(crashed), wall)
        except Exception as exc:
            errors.append(f"process {process} could not start: {type(exc).__name__}: {exc}")
            break
        task = asyncio.create_task(life.live(), name=f"testkit-process-{process}")
        done, _ = await asyncio.wait(
            {task, crashed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if crashed.done():
            parked.append((task, life))
            note_crash_checked(journal_path, process, db_path)
            next_crash += 1
            process += 1
            continue
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            errors.append(f"process {process} did not finish within {timeout:g}s")
        else:
            failure = task.exception()
            if failure is not None:
                errors.append(f"process {process} raised {type(failure).__name__}: {failure}")
        break
    errors += await _reap(parked, db_path, run_id)
    return errors


async def _reap(
    parked: list[tuple[asyncio.Task[None], Life]], db_path: str | Path, run_id: str
) -> list[str]:
    """Cancel the crashed processes' tasks and prove none of them wrote anything."""
    if not parked:
        return []
    before = _snapshot(db_path, run_id)
    for task, _ in parked:
        task.cancel()
    await asyncio.gather(*(task for task, _ in parked), return_exceptions=True)
    for _, life in parked:
        life.journal.close()
    after = _snapshot(db_path, run_id)
    if before != after:
        return ["a crashed process wrote to the database after its crash"]
    return []


def _snapshot(db_path: str | Path, run_id: str) -> tuple[Any, ...]:
    try:
        with open_existing(str(db_path), read_only=True) as store:
            run = store.get_run(run_id)
            steps = tuple((s.id, str(s.status)) for s in store.list_steps(run_id))
            lease = store.lease(run_id)
            return (store.chain_head(), str(run.status), steps, lease.owner, lease.epoch)
    except NotFoundError:
        return ()


__all__ = [
    "CASE_CHAIN_PARTITIONS",
    "Crasher",
    "Life",
    "ProcessPlan",
    "floor_and_ids",
    "note_crash_checked",
    "recorded_floor_and_ids",
    "run_in_process",
    "skipping_ids",
]
