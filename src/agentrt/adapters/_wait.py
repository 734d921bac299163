"""Waiting for a person inside a framework run: the adapters' short path (decision 0058).

A program that would rather wait than stop and resume (each adapter's
`wait_for_person`) looks at the store every `poll_interval` seconds until the
approval its run waits on is decided, from any process (`agentrt approve`, the
console, the webhook), or the run ends (`agentrt cancel`), or the approval
lapses (its `expires_at` passed by the gate's clock: the adapter then lets
`attach` record the expiry). The lease is not held while waiting.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from agentrt import (
    Approval,
    ApprovalStatus,
    ConfigError,
    NotFoundError,
    RunStateError,
    RunStatus,
    Store,
)
from agentrt.lowlevel import wall_clock

if TYPE_CHECKING:
    from agentrt import Gate, GateSession, Verdict

POLL_INTERVAL = 0.5
"""Seconds between two looks at the store while a call waits for a person (the default)."""


def poll_interval(value: object) -> float:
    """A usable `poll_interval` (seconds, above 0, at most an hour); refused otherwise."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= 3600
    ):
        raise ConfigError(
            f"poll_interval must be a number of seconds above 0 and at most 3600, not {value!r}"
        )
    return float(value)


def _settled(
    store: Store, run_id: str, approval_id: str, clock: Callable[[], datetime]
) -> Approval | None:
    """The approval, once waiting on it is over; None while a person may still decide it."""
    approval = next(
        (a for a in store.list_approvals(run_id, cap=None) if a.id == approval_id), None
    )
    if approval is None:
        raise NotFoundError(
            f"run {run_id} has no approval {approval_id!r} in this store: the run waits on an "
            "approval of another database, or its record was changed by hand"
        )
    if approval.status != ApprovalStatus.PENDING:
        return approval
    if store.get_run(run_id).status != RunStatus.WAITING_FOR_APPROVAL:
        return approval
    if approval.expires_at is not None and clock() >= approval.expires_at:
        return approval
    return None


async def until_decided(
    store: Store,
    run_id: str,
    approval_id: str,
    *,
    every: float,
    clock: Callable[[], datetime] | None = None,
) -> Approval:
    """The approval once decided, or once its run ended or it lapsed (still pending then)."""
    while True:
        settled = await asyncio.to_thread(_settled, store, run_id, approval_id, clock or wall_clock)
        if settled is not None:
            return settled
        await asyncio.sleep(every)


def until_decided_sync(
    store: Store,
    run_id: str,
    approval_id: str,
    *,
    every: float,
    clock: Callable[[], datetime] | None = None,
) -> Approval:
    """`until_decided` for a program without an event loop."""
    while True:
        settled = _settled(store, run_id, approval_id, clock or wall_clock)
        if settled is not None:
            return settled
        time.sleep(every)


async def attach_unless_ended(
    gate: Gate, store: Store, run_id: str
) -> tuple[GateSession, Verdict | None] | None:
    """`gate.attach(run_id)`; None when the run has ended since the caller read it alive.

    A person's cancel or rejection (or an expiry settled elsewhere) may land between
    an adapter's read of the run and its attach, which then refuses the ended run: the
    adapter answers as for any ended run instead of letting the refusal out.
    """
    try:
        return await gate.attach(run_id)
    except RunStateError:
        run = await asyncio.to_thread(store.get_run, run_id)
        if isinstance(run.status, RunStatus) and run.status.terminal:
            return None
        raise
