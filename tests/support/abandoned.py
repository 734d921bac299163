"""Tasks a test leaves pending on a loop it closed on purpose (decisions 0216-0219).

A test that closes its consumer's loop under a running task keeps the task to prove
what the runtime does with it. The task can never finish: its loop is gone, so it stays
pending, and when it is collected (at an xdist worker's exit, or under a later test)
asyncio logs "Task was destroyed but it is pending!" with no test named. Closing its
coroutine alone does not stop that: the task's own state stays pending.

`end_abandoned` is what such a test calls once it has proved what it proves: it closes
the coroutine (its `finally` blocks run here, as when the collector closes it) and tells
asyncio the task was let go on purpose, so nothing is logged of it later.
"""

from __future__ import annotations

import asyncio
from typing import Any


def end_abandoned(task: asyncio.Task[Any]) -> None:
    """Close `task`'s coroutine, and keep asyncio from reporting the task as destroyed
    while pending when it is collected (its loop is closed: it can never finish)."""
    task.get_coro().close()  # type: ignore[union-attr]
    task._log_destroy_pending = False  # type: ignore[attr-defined]


def end_abandoned_on(loop: asyncio.AbstractEventLoop) -> None:
    """`end_abandoned` every task still pending on `loop` (closed here if the test has not
    closed it yet): the tasks the test created on it and the ones the runtime started on it
    (a kept async tool's task, a lease's letting go)."""
    if not loop.is_closed():
        loop.close()
    for task in asyncio.all_tasks(loop):
        end_abandoned(task)
