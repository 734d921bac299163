"""Run an `agentrt.mcp` command's async work so a Ctrl-C is heard from any thread (decision 0213).

Shared by `agentrt mcp pin`/`check` (`_cli`) and `agentrt-proxy` (`_proxy`).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


def run_interruptible(work: Coroutine[Any, Any, _T]) -> _T:
    """`asyncio.run(work)`, a Ctrl-C cancelling it through the event loop's own wakeup.

    `asyncio.run`'s SIGINT handler is a Python one: it runs in the main thread when
    that thread next runs Python code. The kernel may hand the signal to another
    thread (the child watcher's, when it runs at that instant), and then a loop
    waiting in `select` (for a server that never answers) hears of it only when its
    next timer fires: the handshake's timeout, 30 s on. `loop.add_signal_handler`
    wakes the loop from any thread (its wakeup fd), so the work is cancelled at
    once, and ends as `KeyboardInterrupt` once its connection is closed; a second
    Ctrl-C raises `KeyboardInterrupt` at once, as `asyncio.run` does.

    Only where SIGINT has Python's own handler, as `asyncio.run`'s: a process started
    with SIGINT ignored (a shell's `&`, a host keeping Ctrl-C for itself) keeps ignoring
    it, and one given a handler of its own keeps that one.
    """

    async def interruptible() -> _T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        interrupted = False

        def on_sigint() -> None:
            nonlocal interrupted
            if interrupted:
                raise KeyboardInterrupt
            interrupted = True
            task.cancel()

        if not default:  # SIGINT ignored, or a handler of the caller's
            return await work
        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (ValueError, RuntimeError):  # not the main thread: asyncio.run's own handling
            return await work
        try:
            return await work
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt from None
            raise
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    # Read before `asyncio.run`, which puts its own handler in the default one's place.
    default = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    return asyncio.run(interruptible())
