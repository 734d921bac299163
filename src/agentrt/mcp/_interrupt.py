"""Run an `agentrt.mcp` command's async work so a Ctrl-C is heard from any thread (decision 0213).

Shared by `agentrt mcp pin`/`check` (`_cli`) and `agentrt-proxy` (`_proxy`, which
also hears SIGTERM so, decision 0220).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

_T = TypeVar("_T")


class Terminated(BaseException):
    """The work was cancelled by SIGTERM (`run_interruptible(..., sigterm=True)`).

    A `BaseException`, as `KeyboardInterrupt`: no `except Exception` on the way out
    takes it for a failure of the work.
    """


def run_interruptible(work: Coroutine[Any, Any, _T], *, sigterm: bool = False) -> _T:
    """`asyncio.run(work)`, a Ctrl-C cancelling it through the event loop's own wakeup.

    `asyncio.run`'s SIGINT handler is a Python one: it runs in the main thread when
    that thread next runs Python code. The kernel may hand the signal to another
    thread (the child watcher's, when it runs at that instant), and then a loop
    waiting in `select` (for a server that never answers) hears of it only when its
    next timer fires: the handshake's timeout, 30 s on. `loop.add_signal_handler`
    wakes the loop from any thread (its wakeup fd), so the work is cancelled at
    once, and ends as `KeyboardInterrupt` once its connection is closed; a second
    Ctrl-C raises `KeyboardInterrupt` at once, as `asyncio.run` does.

    `sigterm`: SIGTERM is heard the same way and cancels the work as a first Ctrl-C
    does; the work then ends as `Terminated`. A second signal of either kind, while
    the first one's cancellation runs, raises `KeyboardInterrupt` at once.

    Only where SIGINT has Python's own handler, as `asyncio.run`'s: a process started
    with SIGINT ignored (a shell's `&`, a host keeping Ctrl-C for itself) keeps ignoring
    it, and one given a handler of its own keeps that one. Likewise SIGTERM, heard only
    where its action is the default one.
    """

    heard: list[signal.Signals] = []

    async def interruptible() -> _T | None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_signal(signum: signal.Signals) -> None:
            if heard:
                raise KeyboardInterrupt
            heard.append(signum)
            task.cancel()

        handled = [
            *([signal.SIGINT] if sigint_default else []),
            *([signal.SIGTERM] if sigterm and sigterm_default else []),
        ]
        if not handled:  # ignored, or handlers of the caller's
            return await work
        try:
            for signum in handled:
                loop.add_signal_handler(signum, on_signal, signum)
        except (ValueError, RuntimeError):  # not the main thread: asyncio.run's own handling
            return await work
        try:
            return await work
        except asyncio.CancelledError:
            if heard:
                # Ends as the task's result, not by raising: a `KeyboardInterrupt` out of
                # a task leaves the loop at once, and `asyncio.run`'s teardown (a second
                # signal's) would never run the done callbacks that stop the worker
                # threads (AnyIO's), which the interpreter's exit then waits for.
                return None
            raise
        finally:
            for signum in handled:
                loop.remove_signal_handler(signum)

    # Read before `asyncio.run`, which puts its own handler in the default one's place.
    sigint_default = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    sigterm_default = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    try:
        result = asyncio.run(interruptible())
    except asyncio.CancelledError:  # the signal came as the work returned: cancelled still
        if not heard:
            raise
    if heard and heard[0] is signal.SIGTERM:
        raise Terminated
    if heard:
        raise KeyboardInterrupt
    return cast(_T, result)  # None only when a signal was heard
