"""Recovery at start-up: find the runs this program can resume, and resume them.

`Driver.recover()` asks the store for unfinished runs (RUNNING or
WAITING_FOR_APPROVAL), oldest first, in pages of `PAGE` rows, and judges each
from its row alone, writing nothing:

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
- WAITING whose latest approval is still pending → skipped.
- A run begun by an integration (`runs.origin` other than 'driver' or 'gate':
  a framework adapter, the MCP proxy; docs/decisions/0049) → skipped, naming
  the origin: the framework's own thread or the proxy continues it, and a
  Driver with the same tool names would otherwise run its own agent in it.
- A run started with a tool this driver does not register (by name) → skipped:
  it belongs to another program sharing the file, whose agent and tools
  resume it.

A resume is `Driver.resume`, which re-checks all of this inside its own
transaction, so a run that changed between the judgment and the resume is
never resumed on stale grounds. One run's failure is recorded on its own
`Recovered` (with the exception) and never stops the others. Terminal runs are
not read at all.

Bounds (docs/decisions/0021): at most `limit` runs are examined per call
(default `DEFAULT_LIMIT`, at most `MAX_LIMIT`), one page read at a time; pass
`after=<the last run id returned>` to go on past them. Runs are resumed one at
a time unless `concurrency` allows more.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, Any

from ._clock import format_time
from ._errors import ConfigError, ForeignRunError, RunLeasedError, RunStateError
from ._gate import RECOVERABLE_ORIGINS
from ._lease import check_live_lease
from ._records import ApprovalStatus, Run, RunStatus
from ._session import run_io
from ._store._records import RunCandidate, RunCursor

if TYPE_CHECKING:
    from ._driver import Driver

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
    driver: Driver, *, limit: int = DEFAULT_LIMIT, after: str | None = None, concurrency: int = 1
) -> list[Recovered]:
    """Examine up to `limit` unfinished runs, oldest first, and resume those that can be."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ConfigError(f"recover limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"recover concurrency must be a positive integer, got {concurrency!r}")
    store = driver.store
    start: RunCursor | None = None
    if after is not None:
        start = await run_io(partial(store.run_cursor, after))
        if start is None:
            raise ConfigError(f"recover(after=...) names no run: {after!r}")
    gate = asyncio.Semaphore(concurrency)
    done: list[Recovered] = []
    while len(done) < limit:
        page = await run_io(partial(store.unfinished_runs, start, min(PAGE, limit - len(done))))
        if not page:
            break
        start = page[-1].cursor

        async def one(candidate: RunCandidate) -> Recovered:
            async with gate:
                return await _recover_one(driver, candidate)

        done += await asyncio.gather(*(one(c) for c in page))
    return done


async def _recover_one(driver: Driver, candidate: RunCandidate) -> Recovered:
    run_id = candidate.run_id
    if candidate.unreadable:
        return Recovered(
            run_id,
            RecoverAction.FAILED,
            f"its row holds bytes that are not UTF-8 text ({', '.join(candidate.unreadable)}); "
            "it cannot be judged and is not resumed",
        )
    if candidate.origin not in RECOVERABLE_ORIGINS:
        return Recovered(run_id, RecoverAction.SKIPPED, _foreign(candidate.origin))
    try:
        if candidate.status == RunStatus.RUNNING:
            why = _judge_running(driver, candidate)
        else:
            why = await _judge_waiting(driver, run_id)
    except _Skip as skip:
        return Recovered(run_id, RecoverAction.SKIPPED, str(skip))
    except Exception as exc:  # a row that cannot be judged is this run's failure only
        return Recovered(run_id, RecoverAction.FAILED, _failure(exc), error=exc)
    try:
        missing = await run_io(partial(_unregistered_tools, driver, run_id))
    except Exception as exc:
        return Recovered(run_id, RecoverAction.FAILED, _failure(exc), error=exc)
    if missing:
        names = ", ".join(sorted(missing))
        return Recovered(
            run_id,
            RecoverAction.SKIPPED,
            f"it was started with tools this driver does not register ({names}); "
            "it belongs to another program",
        )
    try:
        run = await driver.resume(run_id)
    except RunLeasedError as exc:  # another process took it between the judgment and now
        return Recovered(run_id, RecoverAction.SKIPPED, _live(exc.owner, exc.expires_at))
    except ForeignRunError as exc:  # unreachable unless the row changed since the judgment
        return Recovered(run_id, RecoverAction.SKIPPED, _foreign(exc.origin))
    except Exception as exc:
        if isinstance(exc, RunStateError) and driver._is_executing(run_id):
            # Another call of this driver (a second recover, a resume) began it meanwhile.
            return Recovered(run_id, RecoverAction.SKIPPED, _EXECUTING)
        moved = await _moved_since(driver, candidate)
        if isinstance(exc, RunStateError) and moved is not None:
            return Recovered(
                run_id, RecoverAction.SKIPPED, f"it changed meanwhile: it is now {moved}"
            )
        return Recovered(run_id, RecoverAction.FAILED, _failure(exc), error=exc)
    return Recovered(run_id, RecoverAction.RESUMED, why, run=run)


_EXECUTING = "this driver is executing it now"


def _foreign(origin: str) -> str:
    return (
        f"it was begun by {origin!r}, not by a Driver or a plain Gate; "
        "the program that began it continues it"
    )


class _Skip(Exception):
    """This run is left alone; the message says why."""


def _judge_running(driver: Driver, c: RunCandidate) -> str:
    if driver._is_executing(c.run_id):
        raise _Skip(_EXECUTING)
    config = driver._config
    try:
        proof: dict[str, Any] = check_live_lease(
            c.lease, config.owner, driver.store.lease_now(config.wall)
        )
    except RunLeasedError as exc:
        raise _Skip(_live(exc.owner, exc.expires_at)) from None
    by = proof.get("by")
    if by == "no lease":
        return "RUNNING with no lease"
    if by == "this driver's own lease":
        return "RUNNING under this driver's own lease; its loop had stopped"
    if by == "lease expired":
        return f"RUNNING and its lease expired at {c.lease.shown_expiry()}"
    return f"RUNNING and its owner's process is gone (pid {proof.get('pid')}: {proof.get('proof')})"


def _live(owner: str, expires_at: Any) -> str:
    return f"RUNNING under a live lease held by {owner} until {expires_at}; not taken"


async def _judge_waiting(driver: Driver, run_id: str) -> str:
    latest = await run_io(partial(driver.store.latest_approval_state, run_id))
    if latest is None:  # resume says what is wrong with such a run
        return "WAITING, with no approval on record"
    approval_id, status, expires_at = latest.id, latest.status, latest.expires_at
    if status != ApprovalStatus.PENDING:
        return f"WAITING and its approval {approval_id} was {status}"
    if expires_at is not None and driver.now() >= expires_at:
        return (
            f"WAITING and its approval {approval_id} expired undecided at {format_time(expires_at)}"
        )
    raise _Skip(f"WAITING for approval {approval_id}, which is still pending")


def _unregistered_tools(driver: Driver, run_id: str) -> set[str]:
    """Names of the tools the run was started with (its `run.created`) that this driver lacks.

    By name, not by hash: a program that edited a tool's description still owns
    its runs. A run of a program with other tools is not this program's to resume.
    """
    stored = driver.store.started_tool_names(run_id)
    names = {"?" if n is None else n for n in stored}
    return names - set(driver._config.specs)


async def _moved_since(driver: Driver, c: RunCandidate) -> str | None:
    """The run's status now, if it is not the one judged (someone else moved it)."""
    try:
        status = await run_io(partial(driver.store.run_status, c.run_id))
    except Exception:
        return None
    if status is not None and status != c.status:
        return str(status)
    return None


def _failure(exc: Exception) -> str:
    return f"resume failed: {type(exc).__name__}: {exc}"


__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "PAGE", "RecoverAction", "Recovered", "recover"]
