"""Calling one tool under its timeout and turning every outcome into an observation.

A tool's outcome is never a crash of the runtime: a result becomes
`tool_result`; an exception, a timeout or content that is not usable JSON
becomes `tool_error` with a `failure` of `error`, `timeout` or
`invalid_content` (the unusable content kept for the record); `AbortRun` asks
for the run to end as `tool_abort`; `OutcomeUnknown` from a tool that is not
read-only is `interrupted` (`failure: "outcome_unknown"`), which the step
machine pauses for a person as after a crash (from a read-only tool it is an
ordinary `tool_error`: reading again changes nothing; decision 0054).

Invariants kept here:

- `invoke` raises only when *its caller* is cancelled. Whatever the tool
  raises is its outcome, recorded as `tool_error`: an exception whose `str()`
  or `repr()` raises, one with a huge message (kept clipped), a
  `CancelledError` the tool raised itself, and a `BaseException` that is not
  an `Exception` (`SystemExit`, `KeyboardInterrupt`, a custom one: the tool's
  own raise does not stop the process, see decision 0017).
- A coroutine tool runs in a task of its own, so that the tool's own `CancelledError`
  (its task ends without our task having been cancelled) is told apart from a
  cancellation of the caller (the `await` in `invoke` raises). A plain-function
  tool's thread carries whatever it raised as its result (`_Raised`), so its
  outcome is awaited on one future the thread answers, with no task (decision 0124).
- A plain-function tool runs on a daemon thread that runs nothing else while it
  runs, outside `concurrent.futures`' registry of workers, which the interpreter
  joins at exit: a tool that outlives its timeout (a thread cannot be killed)
  never holds the process open and never takes a thread from the store's I/O
  or from the next tool call. Its late result is discarded. The thread is an
  idle one kept from an earlier call that returned, or a new one (decision
  0092): starting a thread per call cost more than the rest of the call. Each
  call runs in a new, empty `contextvars.Context`, as on a new thread. A coroutine tool
  is cancelled at its timeout; one that swallows its cancellation and has not
  ended a second later is left running in the same way (its step is not held:
  the outcome is the timeout, or the caller's cancel).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import os
import queue
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from ._canonical import check_json, copy_json
from ._decisions import _MAX_KEPT, _kept_text
from ._errors import AbortRun, JSONValueError, OutcomeUnknown
from ._foreign import exception_text, plain_text, type_name
from ._records import Observation, ObservationKind, SideEffect, ToolCall, ToolResult, ToolSpec
from ._tools import Tool

_MAX_SUMMARY = 1024


@dataclass(frozen=True)
class ToolOutcome:
    observation: Observation
    abort: str | None = None  # set when the tool raised AbortRun
    # set (what happened, maybe "") when a tool that is not read-only raised OutcomeUnknown
    unknown: str | None = None

    @property
    def error(self) -> str:
        content = self.observation.content
        if self.observation.kind == ObservationKind.TOOL_RESULT or not isinstance(content, dict):
            return ""
        return str(content.get("error", ""))


def _error(spec: ToolSpec, failure: str, error: str, **kept: Any) -> Observation:
    return Observation.tool_error(spec.name, failure, error, **kept)


def result_observation(spec: ToolSpec, result: Any) -> Observation:
    """The observation for what `call` returned (or an invalid_content error); never raises."""
    try:
        return _result_observation(spec, result)
    except BaseException:  # a hostile value: what it is cannot be read, so it is unusable
        return _error(
            spec,
            "invalid_content",
            f"tool returned a {type_name(result)} that could not be inspected",
        )


def _result_observation(spec: ToolSpec, result: Any) -> Observation:
    if not isinstance(result, ToolResult):
        return _error(
            spec,
            "invalid_content",
            f"tool returned {type(result).__name__}, not a ToolResult",
            content_text=_kept_text(result),
        )
    if not isinstance(cast(object, result.summary), str):
        return _error(
            spec,
            "invalid_content",
            "tool summary is not a string",
            content_text=_kept_text(result.summary),
        )
    try:
        # One read of the tool's content, into plain values nobody else holds: what is
        # checked is what is hashed, recorded and shown, whatever the tool's own object
        # (a dict its thread still changes, a subclass answering differently) does next.
        content = copy_json(result.content)
        check_json(content)
        summary = str.__str__(result.summary)
        summary.encode("utf-8")
    except (JSONValueError, UnicodeEncodeError, RecursionError, TypeError, ValueError) as exc:
        return _error(
            spec,
            "invalid_content",
            f"tool content is not usable JSON: {exc}",
            content_text=_kept_text(result.content),
        )
    return Observation.tool_result(content, summary)


Future = concurrent.futures.Future[Any]
ToolThreads = list[Future]


@dataclass(frozen=True)
class _Raised:
    """What a tool thread raised, carried as the future's *result*.

    Never as the future's exception: asyncio refuses some exceptions into a
    future (a `StopIteration` from `next()` on a spent iterator), and the
    awaiting side would then never hear of the outcome until the timeout.
    """

    exc: BaseException


_IDLE_KEPT = 8
"""Idle tool threads kept for later calls; a thread returning when as many wait exits."""

_IDLE_S = 60.0
"""Seconds an idle tool thread waits for a call before it exits."""


class _Worker:
    """One daemon tool thread: runs the calls handed to it, one at a time, and offers
    itself back to `_ToolThreads` once each has returned, before its outcome is
    given (so the caller's next call finds it idle)."""

    def __init__(self, pool: _ToolThreads) -> None:
        self.pool = pool
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future]] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="agentrt-tool", daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                call, future = self.jobs.get(timeout=_IDLE_S)
            except queue.Empty:
                if self.pool.retire(self):
                    return
                continue  # taken for a call just as it timed out: the call is on its way
            if not future.set_running_or_notify_cancel():
                kept = self.pool.idle_again(self)
            else:
                try:
                    outcome = call()
                except BaseException as exc:  # whatever the tool raises is its outcome
                    outcome = _Raised(exc)
                kept = self.pool.idle_again(self)
                future.set_result(outcome)
            if not kept:
                return


class _ToolThreads:
    """The idle tool threads of this process.

    A call takes an idle thread or starts a new one; a thread is offered back only
    once its call has returned, so a call past its timeout keeps its thread to
    itself and the next call never waits for it. After a fork the child has none
    of the parent's threads, so it starts with none idle.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []

    def run(self, call: Callable[[], Any], future: Future) -> None:
        """Run `call()` on an idle thread (or a new one); its outcome (or `_Raised`) is
        `future`'s result."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self)
        worker.jobs.put((call, future))

    def idle_again(self, worker: _Worker) -> bool:
        """Keep `worker` for a later call; False (it should exit) when enough are idle."""
        with self._lock:
            if len(self._idle) >= _IDLE_KEPT:
                return False
            self._idle.append(worker)
            return True

    def retire(self, worker: _Worker) -> bool:
        """Forget an idle `worker` that waited long enough; False if a call just took it."""
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return True
            return False

    def forget_all(self) -> None:
        """In a forked child: the parent's threads do not exist here."""
        self._lock = threading.Lock()
        self._idle = []


_THREADS = _ToolThreads()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_THREADS.forget_all)


def _on_own_thread(method: Callable[[ToolCall], Any], call: ToolCall) -> Future:
    """Run `method(call)` on a daemon thread that runs nothing else until it returns (an
    idle one, or a new one); the future holds its result or `_Raised`.

    Not `concurrent.futures.ThreadPoolExecutor`: the interpreter joins its
    workers at exit, so a tool still running after its timeout would hold the
    process open until it returned; and a fixed pool's threads can all be held
    by calls past their timeouts.
    """
    future: Future = concurrent.futures.Future()
    _THREADS.run(lambda: contextvars.Context().run(method, call), future)
    return future


async def _call(tool: Tool, call: ToolCall, threads: ToolThreads | None) -> Any:
    method = tool.call
    if inspect.iscoroutinefunction(method):
        return await method(call)
    future = _on_own_thread(method, call)
    if threads is not None:
        threads.append(future)
    result = await asyncio.wrap_future(future)
    if type(result) is _Raised or not _awaitable(result):
        return result
    return await result


def _awaitable(value: Any) -> bool:
    """`inspect.isawaitable`, False for a value that cannot be inspected (its `__class__`
    raises): what reads it next says what it is."""
    try:
        return inspect.isawaitable(value)
    except BaseException:
        return False


async def _guarded(tool: Tool, call: ToolCall, threads: ToolThreads | None) -> tuple[bool, Any]:
    """(True, result) or (False, what the tool raised): the tool's task never ends raising.

    A `KeyboardInterrupt` or `SystemExit` that escaped a task would stop the
    event loop itself; here it is only the tool's outcome.
    """
    ok, result = await _awaited(_call(tool, call, threads))
    if ok and type(result) is _Raised:  # never `isinstance`: a returned value may be hostile
        return False, result.exc
    return ok, result


async def invoke(
    tool: Tool, spec: ToolSpec, call: ToolCall, threads: ToolThreads | None = None
) -> ToolOutcome:
    """Run the tool once. Only a cancellation of the caller propagates (the driver records it).

    A plain-function tool runs on a thread that outlives a timeout or a
    cancellation; `threads` receives its future, so the caller can tell whether
    the call is still running (and keep the lease until it is not).
    """
    try:
        plain = not inspect.iscoroutinefunction(tool.call)
    except BaseException:  # a hostile `call`: `_guarded` records what reading it raises
        plain = False
    if plain:
        return await _invoke_on_thread(tool, spec, call, threads)
    task = asyncio.ensure_future(_guarded(tool, call, threads))
    return await _invoke_in_task(task, spec, threads)


async def _invoke_on_thread(
    tool: Tool, spec: ToolSpec, call: ToolCall, threads: ToolThreads | None
) -> ToolOutcome:
    """`invoke` of a plain-function tool: its thread's outcome awaited on one future of the
    loop, answered by the thread itself (no task, no chained futures between: a step's tool
    call makes three callbacks of the loop, not seven).

    As in the task's way: a caller cancelled, or a timeout, before the thread took the call
    leaves it never run (`Future.cancel` succeeds only then); a thread that took it runs on
    and is left in `threads`. A result that is awaitable is awaited in a task of its own
    for the time left.
    """
    loop = asyncio.get_running_loop()
    timeout = spec.timeout.total_seconds()
    began = loop.time()
    waiter = loop.create_future()
    try:
        future = _on_own_thread(tool.call, call)
    except BaseException as exc:  # no thread could be started: the call never ran
        return _raised(spec, exc)
    if threads is not None:
        threads.append(future)

    def arrived(_: Future) -> None:  # on the tool thread, or here if it never ran
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(_release, waiter)

    future.add_done_callback(arrived)
    timer = loop.call_later(timeout, _release, waiter)
    try:
        await waiter
    except asyncio.CancelledError:
        future.cancel()  # never run if not taken yet; a running thread is left in `threads`
        raise
    finally:
        timer.cancel()
    if not future.done():
        future.cancel()
        observation = _error(spec, "timeout", f"timed out after {timeout:g}s")
        return ToolOutcome(observation=observation)
    result = future.result()
    if type(result) is _Raised:
        return _raised(spec, result.exc)
    if _awaitable(result):  # one that cannot be inspected: `result_observation` says so
        left = max(0.0, timeout - (loop.time() - began))
        return await _invoke_in_task(asyncio.ensure_future(_awaited(result)), spec, threads, left)
    return ToolOutcome(observation=result_observation(spec, result))


def _release(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _awaited(result: Any) -> tuple[bool, Any]:
    """(True, what `result` gives) or (False, what it raised), never raising: `_guarded`'s
    way, for what a plain-function tool returned that is awaitable too."""
    try:
        return True, await result
    except BaseException as exc:
        return False, exc


async def _invoke_in_task(
    task: asyncio.Future[tuple[bool, Any]],
    spec: ToolSpec,
    threads: ToolThreads | None,
    timeout: float | None = None,
) -> ToolOutcome:
    """`invoke` of a tool running in `task` (`_guarded`), given `timeout` seconds (the
    spec's unless given)."""
    if timeout is None:
        timeout = spec.timeout.total_seconds()
    try:
        done = await _done_within(task, timeout)
    except asyncio.CancelledError:
        # Only our own task's cancellation gets here: the caller's. Let the tool
        # unwind from its cancellation first, as `asyncio.wait_for` would.
        await _cancel(task, threads)
        raise
    except GeneratorExit:
        _left_running(task, threads)
        raise
    if not done:
        await _cancel(task, threads)
        observation = _error(spec, "timeout", f"timed out after {spec.timeout.total_seconds():g}s")
        return ToolOutcome(observation=observation)
    ok, value = task.result()
    if ok:
        return ToolOutcome(observation=result_observation(spec, value))
    return _raised(spec, value)


async def _done_within(task: asyncio.Future[Any], timeout: float) -> bool:
    """Whether `task` is done within `timeout` seconds: `asyncio.wait({task}, timeout=...)`
    for the one task, without its checks and sets (the task is never cancelled here; the
    caller's cancellation is raised, the task left running, as `asyncio.wait` does)."""
    waiter = asyncio.get_running_loop().create_future()

    def release(_: object) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = waiter.get_loop().call_later(timeout, release, None)
    task.add_done_callback(release)
    try:
        await waiter
    finally:
        timer.cancel()
        task.remove_done_callback(release)
    return task.done()


CANCEL_GRACE_S = 1.0
"""Seconds a cancelled coroutine of the consumer's (a tool, a model's request) gets to
unwind before it is left running."""


async def cancel_within_grace(task: asyncio.Future[Any]) -> bool:
    """Cancel `task`; whether it ended within `CANCEL_GRACE_S`.

    A coroutine that swallows its cancellation (a bare `except:` in a retry loop) cannot
    be stopped, like a thread: past the grace it is left running, its late outcome
    discarded by the caller, so that it never holds the step or the run.
    """
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
    return task in done


async def _cancel(task: asyncio.Future[Any], threads: ToolThreads | None) -> None:
    """Cancel the tool's task (`cancel_within_grace`); one left running is tracked in
    `threads` as a thread is, so a cancelled caller keeps the lease while it still runs."""
    try:
        ended = await cancel_within_grace(task)
    except GeneratorExit:  # closed from outside while the task had its grace: it may run on
        _left_running(task, threads)
        raise
    if ended or threads is None:
        return
    _track(task, threads)


def _left_running(task: asyncio.Future[Any], threads: ToolThreads | None) -> None:
    """The caller's coroutine closed from outside (by hand, or collected with its loop):
    nothing can be awaited here, and nobody will record the outcome. A task left running on
    a live loop is tracked as a thread is, so the lease is kept while it runs; one whose loop
    is closed never runs again (decision 0198)."""
    if threads is not None and not task.done() and not task.get_loop().is_closed():
        _track(task, threads)


class KeptTask(concurrent.futures.Future[Any]):
    """A future done once a tool's task left running is (`_track`), kept for the lease as a
    thread is. A task whose event loop is closed before it ends never runs again, and its
    end is never told: `loop_closed` says so, for the heartbeat to end the future then
    (`RunSession.start_heartbeat`). The loop is referred to weakly: one collected was never
    to run the task again either."""

    def __init__(self, task: asyncio.Future[Any]) -> None:
        super().__init__()
        self._loop = weakref.ref(task.get_loop())

    def loop_closed(self) -> bool:
        loop = self._loop()
        return loop is None or loop.is_closed()


def _track(task: asyncio.Future[Any], threads: ToolThreads) -> None:
    """Track a tool's task left running in `threads`, as a thread is: a future done once the
    task is (or once its loop is found closed, `KeptTask`)."""
    running = KeptTask(task)
    running.set_running_or_notify_cancel()
    task.add_done_callback(lambda _: _ended(running))
    threads.append(running)


def _ended(running: Future) -> None:
    """`running` is done (on the thread that finds it so: the task's loop, or a heartbeat
    that found that loop closed; a second time is ignored)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        running.set_result(None)


def _raised(spec: ToolSpec, exc: BaseException) -> ToolOutcome:
    """The outcome of a tool that raised `exc`; never raises."""
    if isinstance(exc, AbortRun):
        abort = _detail(exc) or "the tool aborted the run"
        return ToolOutcome(observation=_error(spec, "abort", abort), abort=abort)
    if isinstance(exc, OutcomeUnknown) and spec.side_effect != SideEffect.READ_ONLY:
        what = _detail(exc)
        observation = Observation.outcome_unknown(
            what or "the tool could not tell whether the call took effect"
        )
        return ToolOutcome(observation=observation, unknown=what)
    if isinstance(exc, asyncio.CancelledError):
        error = f"{exception_text(exc)} (raised by the tool itself; the run was not cancelled)"
        return ToolOutcome(observation=_error(spec, "error", error))
    return ToolOutcome(observation=_error(spec, "error", exception_text(exc)))


def _detail(exc: AbortRun | OutcomeUnknown) -> str:
    """The `detail` an `AbortRun` or `OutcomeUnknown` carries, as plain text; never raises."""
    try:
        detail: object = exc.detail  # typed str, but a subclass may store anything
        if isinstance(detail, str):
            return plain_text(detail, _MAX_KEPT)
        return "" if detail is None else _kept_text(detail)
    except BaseException:  # a hostile subclass: the abort (or the pause) itself still stands
        return ""
