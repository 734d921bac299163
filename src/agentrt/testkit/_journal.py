"""What the kit saw happen, written where it survives a SIGKILL: the journal file.

The database records what the runtime committed; the journal records what
actually happened around it, in every process: each tool invocation as it
starts and when it returns, each agent input, each crash point passed, each
crash fired, each resume and each operator answer. It is one JSON object per
line in a file next to the database. Every record is one `write(2)` on an
`O_APPEND` descriptor, so lines from several threads never interleave and a
record written before a SIGKILL is in the file afterwards (the kernel holds it;
only a power cut could lose it, which is not what the kit simulates).

The tool and agent wrappers here are how "tool invocations actually seen" is
counted across processes: the consumer's tools are wrapped, unchanged in spec
and behaviour, by one that journals before and after delegating; and each tool
object's own `call` is journaled in place too, so a call the consumer's code
makes on the object itself, around the driver, is seen as well.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from .. import (
    Decision,
    StepInput,
    Tool,
    ToolCall,
    ToolResult,
    ToolSpec,
    check_json,
)


class Journal:
    """Appends records to one journal file; safe from any thread of one process."""

    def __init__(self, path: str | Path, process: int) -> None:
        self.path = Path(path)
        self.process = process
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._calls = 0

    def append(self, kind: str, /, **fields: Any) -> None:
        record = {"type": kind, "process": self.process, **fields}
        line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode("utf-8")
        with self._lock:
            if self._fd < 0:
                return
            os.write(self._fd, line)

    def next_call(self) -> int:
        with self._lock:
            self._calls += 1
            return self._calls

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_journal(path: str | Path) -> list[dict[str, Any]]:
    """Every complete record; a torn last line (none is expected) is ignored."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    records: list[dict[str, Any]] = []
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def _args_for_journal(args: Any) -> Any:
    try:
        check_json(args)
        return args
    except Exception:  # a tool may be handed anything a decoder produced; keep its text
        return repr(args)


# The journal of the process (real or simulated) whose task is running: where a call of
# a watched tool made outside the kit's wrapper (by a consumer's own loop) is journaled.
_PROCESS_JOURNAL: ContextVar[Journal | None] = ContextVar("agentrt_testkit_journal", default=None)
# Set on a tool watched in place: its own `call`, and the journal of the process that last
# built a driver with it (for a call made where no process's context reaches, a thread).
_UNWATCHED = "_agentrt_testkit_unwatched_call"
_LAST_JOURNAL = "_agentrt_testkit_journal"
_CALL = "call"


def journal_this_process(journal: Journal) -> None:
    """Make `journal` the one a watched tool's direct calls go to, in the current task."""
    _PROCESS_JOURNAL.set(journal)


def _journaled(
    original: Callable[[ToolCall], Any], tool: Tool, journal_of: Callable[[], Journal | None]
) -> Callable[[ToolCall], Any]:
    """`original`, journaling `tool.call` before it runs and `tool.returned` after; async
    stays async (so the runtime still cancels it at its timeout), sync stays sync."""

    def started(call: ToolCall) -> tuple[Journal | None, int]:
        journal = journal_of()
        if journal is None:
            return None, 0
        number = journal.next_call()
        journal.append(
            "tool.call",
            call=number,
            tool=tool.spec.name,
            step_id=getattr(call, "step_id", ""),
            args=_args_for_journal(getattr(call, "args", None)),
            lease_epoch=getattr(call, "lease_epoch", None),
        )
        return journal, number

    def returned(journal: Journal | None, number: int, error: BaseException | None) -> None:
        if journal is not None:
            journal.append(
                "tool.returned",
                call=number,
                error="" if error is None else f"{type(error).__name__}: {error}",
            )

    if inspect.iscoroutinefunction(original):

        async def watched_async(call: ToolCall) -> Any:
            journal, number = started(call)
            try:
                result = await original(call)
            except BaseException as exc:
                returned(journal, number, exc)
                raise
            returned(journal, number, None)
            return result

        return watched_async

    def watched(call: ToolCall) -> Any:
        journal, number = started(call)
        try:
            result = original(call)
        except BaseException as exc:
            returned(journal, number, exc)
            raise
        returned(journal, number, None)
        return result

    return watched


def _unwatched(tool: Tool) -> Callable[[ToolCall], Any]:
    """The tool's own `call`, whether or not it is watched in place."""
    state = getattr(tool, "__dict__", None)
    original = state.get(_UNWATCHED) if isinstance(state, dict) else None
    return original if original is not None else tool.call


def _watch_in_place(tool: Tool, journal: Journal) -> None:
    """Replace the tool object's own `call` by a journaled one, so a call the consumer's
    code makes on the object its factory built (a loop re-running a tool by hand) is seen
    as well as the driver's. A tool whose attributes cannot be set (slots, frozen) is seen
    only through the kit's wrapper."""
    state = getattr(tool, "__dict__", None)
    if not isinstance(state, dict):
        return
    if _UNWATCHED in state:
        state[_LAST_JOURNAL] = journal
        return
    original = tool.call
    watched = _journaled(original, tool, lambda: _PROCESS_JOURNAL.get() or state[_LAST_JOURNAL])
    try:
        setattr(tool, _LAST_JOURNAL, journal)
        setattr(tool, _UNWATCHED, original)
        setattr(tool, _CALL, watched)
    except Exception:  # a class that refuses new attributes: the wrapper alone sees it
        for name in (_LAST_JOURNAL, _UNWATCHED, _CALL):
            state.pop(name, None)


class _SeenTool:
    """A consumer tool as the driver gets it: every call through it journaled."""

    def __init__(self, inner: Tool, journal: Journal) -> None:
        self.inner = inner
        self.spec: ToolSpec = inner.spec
        self._watched = _journaled(_unwatched(inner), inner, lambda: journal)
        # The tool's own reconciliation (decision 0067) stays the runtime's to find.
        reconcile = getattr(inner, "reconcile", None)
        if callable(reconcile):
            self.reconcile = reconcile


class _SyncSeenTool(_SeenTool):
    def call(self, call: ToolCall) -> ToolResult:
        return self._watched(call)  # type: ignore[no-any-return]


class _AsyncSeenTool(_SeenTool):
    async def call(self, call: ToolCall) -> ToolResult:
        return await self._watched(call)  # type: ignore[no-any-return]


def seen_tool(inner: Tool, journal: Journal) -> Tool:
    """`inner` for the driver, every invocation journaled: through the wrapper returned,
    and on the tool object itself for calls made around the driver (`_watch_in_place`)."""
    _watch_in_place(inner, journal)
    if inspect.iscoroutinefunction(_unwatched(inner)):
        return _AsyncSeenTool(inner, journal)
    return _SyncSeenTool(inner, journal)


class SeenAgent:
    """The consumer's agent, journaling what it was shown before it decides."""

    def __init__(self, inner: Any, journal: Journal) -> None:
        self.inner = inner
        self._journal = journal

    async def decide(self, input: StepInput) -> Decision:
        index = input.steps[-1].index if input.steps else -1
        self._journal.append(
            "agent.input",
            step=index,
            steps=[[s.index, str(s.status)] for s in input.steps],
            run_status=str(input.run.status),
        )
        decide = getattr(self.inner, "decide", self.inner)
        result = decide(input)
        if inspect.isawaitable(result):
            result = await result
        return result  # type: ignore[no-any-return]
