"""Recovery at start-up: find the runs this program can resume, and resume them.

`Driver.recover()` asks the store for unfinished runs (RUNNING or
WAITING_FOR_APPROVAL), oldest first, in pages of `PAGE` rows, and judges each
from its row alone, writing nothing, by the judgement attach and resume make
(`_continuation.judge`, for the `Continuer` the Driver passes):

- RUNNING with no lease, an expired lease, this driver's own stopped lease, or
  a holder provably dead on this host (`lease.prove_dead`, through
  `_lease.check_live_lease`) → resumed: taken over, and the interruption
  contract decides what its step in flight becomes.
- RUNNING under a live lease of another owner → skipped. A live lease is never
  stolen: nothing is written (its expiry is compared with the wall clock, as
  the lease module always does; the driver's own clock is not read).
- RUNNING and being executed by this very driver → skipped (also when another
  call of this driver began it between the judgment and the resume).
- WAITING whose latest approval was decided, or is pending past its expiry →
  resumed (an approved call runs once; an expired approval cancels the run).
- WAITING whose latest approval is still pending → skipped; an approved one
  whose lease another live attach holds (decision 0032) → skipped as a live
  lease is.
- A run begun by an integration (`runs.origin` other than 'driver' or 'gate':
  a framework adapter, the MCP proxy; docs/decisions/0049) → skipped, naming
  the origin: the framework's own thread or the proxy continues it, and a
  Driver with the same tool names would otherwise run its own agent in it.
- A run started with a tool this driver does not register (by name) → skipped:
  it belongs to another program sharing the file, whose agent and tools
  resume it.

A resume is the `resume` it is given (`Driver.resume`, which the Driver
passes: this module knows no Driver), which re-checks all of this inside its own
transaction, so a run that changed between the judgment and the resume is
never resumed on stale grounds; such a run (its status moved, or, still
waiting, on another approval than the one judged) is skipped "it changed
meanwhile", not failed (decision 0161). One run's failure is recorded on its own
`Recovered` (with the exception) and never stops the others. Terminal runs are
not read at all.

Bounds (docs/decisions/0021): at most `limit` runs are examined per call
(default `DEFAULT_LIMIT`, at most `MAX_LIMIT`), one page read at a time; pass
`after=<the last run id returned>` to go on past them. Runs are resumed one at
a time unless `concurrency` allows more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial

from ._clock import Clock
from ._continuation import EXECUTING, Continuer, Refusal, foreign, judge, live
from ._errors import ConfigError, ForeignRunError, RunLeasedError, RunStateError
from ._lease import WallClock
from ._records import Run, RunStatus
from ._session import run_io
from ._store import Store
from ._store._records import ApprovalState, RunCandidate, RunCursor

PAGE = 100
"""Runs read per query."""
DEFAULT_LIMIT = 1000
"""Runs examined per `recover()` call unless told otherwise."""
MAX_LIMIT = 100_000
"""The most runs one call examines: its result holds one record per run."""


class RecoverAction(StrEnum):
    """What `recover()` did with one run."""

    RESUMED = "resumed"  # resumed; `run` is the run as the loop left it
    SKIPPED = "skipped"  # left alone (a live lease, an undecided approval); `run` is None
    FAILED = "failed"  # the resume raised; `error` says what, the other runs went on


@dataclass(frozen=True)
class Recovered:
    """One run `recover()` examined: what it did, why, and the result."""

    run_id: str
    action: RecoverAction
    why: str
    run: Run | None = None
    error: Exception | None = None


async def recover(
    store: Store,
    me: Continuer,
    resume: Callable[[str], Awaitable[Run]],
    *,
    now: Clock,
    wall: WallClock,
    limit: int = DEFAULT_LIMIT,
    after: str | None = None,
    concurrency: int = 1,
) -> list[Recovered]:
    """Examine up to `limit` unfinished runs, oldest first, and resume those that can be.

    `me` is who asks (`_continuation.judge` decides each run for it), `resume`
    continues one run (`Driver.resume`), `now` is the asker's clock (an
    approval's expiry) and `wall` the lease clock's source.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ConfigError(f"recover limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"recover concurrency must be a positive integer, got {concurrency!r}")
    start: RunCursor | None = None
    if after is not None:
        start = await run_io(partial(store.run_cursor, after))
        if start is None:
            raise ConfigError(f"recover(after=...) names no run: {after!r}")
    asker = _Asker(store, me, resume, now, wall)
    gate = asyncio.Semaphore(concurrency)
    done: list[Recovered] = []
    while len(done) < limit:
        page = await run_io(partial(store.unfinished_runs, start, min(PAGE, limit - len(done))))
        if not page:
            break
        start = page[-1].cursor

        async def one(candidate: RunCandidate) -> Recovered:
            async with gate:
                return await _recover_one(asker, candidate)

        done += await asyncio.gather(*(one(c) for c in page))
    return done


@dataclass(frozen=True)
class _Asker:
    """What `recover()` was given: the store, who asks, how to resume, the clocks."""

    store: Store
    me: Continuer
    resume: Callable[[str], Awaitable[Run]]
    now: Clock
    wall: WallClock


async def _recover_one(asker: _Asker, candidate: RunCandidate) -> Recovered:
    run_id = candidate.run_id
    if candidate.unreadable:
        return Recovered(
            run_id,
            RecoverAction.FAILED,
            f"its row holds bytes that are not UTF-8 text ({', '.join(candidate.unreadable)}); "
            "it cannot be judged and is not resumed",
        )
    if candidate.origin == "" and asker.me.origins is not None:
        # Readable text, yet no origin any program writes ('driver' is the column's
        # default): foreign to every Driver, as it always was for recovery.
        return Recovered(run_id, RecoverAction.SKIPPED, foreign(candidate.origin))
    store = asker.store
    seen: list[ApprovalState | None] = []  # the latest approval, as the judgement read it

    def approval() -> ApprovalState | None:
        seen.append(store.latest_approval_state(run_id))
        return seen[-1]

    try:
        # One judgement (`_continuation.judge`), the store read only as its rules need.
        judged = await run_io(
            lambda: judge(
                candidate,
                asker.me,
                lease_now=lambda: store.lease_now(asker.wall),
                now=asker.now,
                approval=approval,
                tools=lambda: store.started_tool_names(run_id),
            )
        )
    except Exception as exc:  # a row that cannot be judged is this run's failure only
        return Recovered(run_id, RecoverAction.FAILED, _failure(exc), error=exc)
    if isinstance(judged, Refusal):
        return Recovered(run_id, RecoverAction.SKIPPED, judged.skipped)
    try:
        run = await asker.resume(run_id)
    except RunLeasedError as exc:  # another process took it between the judgment and now
        return Recovered(run_id, RecoverAction.SKIPPED, live(exc.owner, exc.expires_at))
    except ForeignRunError as exc:  # unreachable unless the row changed since the judgment
        return Recovered(run_id, RecoverAction.SKIPPED, foreign(exc.origin))
    except Exception as exc:
        if isinstance(exc, RunStateError) and asker.me.executing(run_id):
            # Another call of this driver (a second recover, a resume) began it meanwhile.
            return Recovered(run_id, RecoverAction.SKIPPED, EXECUTING)
        moved = await _moved_since(store, candidate, seen[-1] if seen else None)
        if isinstance(exc, RunStateError) and moved is not None:
            return Recovered(
                run_id, RecoverAction.SKIPPED, f"it changed meanwhile: it is now {moved}"
            )
        return Recovered(run_id, RecoverAction.FAILED, _failure(exc), error=exc)
    return Recovered(run_id, RecoverAction.RESUMED, judged.why, run=run)


async def _moved_since(store: Store, c: RunCandidate, judged: ApprovalState | None) -> str | None:
    """The run as it is now, if it is not as judged (someone else moved it): its status,
    or, still waiting, the approval it waits on, when that is not the latest one judged
    (another program resumed the run, which went on and paused again)."""
    try:
        status = await run_io(partial(store.run_status, c.run_id))
        if status is not None and status != c.status:
            return str(status)
        if status != RunStatus.WAITING_FOR_APPROVAL or judged is None:
            return None
        latest = await run_io(partial(store.latest_approval_state, c.run_id))
    except Exception:
        return None
    if latest is not None and (latest.id, latest.status) != (judged.id, judged.status):
        return f"{status}, on approval {latest.id}, which is {latest.status}"
    return None


def _failure(exc: Exception) -> str:
    return f"resume failed: {type(exc).__name__}: {exc}"


__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "PAGE", "RecoverAction", "Recovered", "recover"]
