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
and behaviour, by one that journals before and after delegating.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
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


class _SeenTool:
    """A consumer tool, journaled: `tool.call` before it runs, `tool.returned` after."""

    def __init__(self, inner: Tool, journal: Journal) -> None:
        self.inner = inner
        self.spec: ToolSpec = inner.spec
        self._journal = journal
        # The tool's own reconciliation (decision 0067) stays the runtime's to find.
        reconcile = getattr(inner, "reconcile", None)
        if callable(reconcile):
            self.reconcile = reconcile

    def _started(self, call: ToolCall) -> int:
        number = self._journal.next_call()
        self._journal.append(
            "tool.call",
            call=number,
            tool=self.spec.name,
            step_id=call.step_id,
            args=_args_for_journal(call.args),
            lease_epoch=call.lease_epoch,
        )
        return number

    def _returned(self, number: int, error: BaseException | None) -> None:
        self._journal.append(
            "tool.returned",
            call=number,
            error="" if error is None else f"{type(error).__name__}: {error}",
        )


class _SyncSeenTool(_SeenTool):
    def call(self, call: ToolCall) -> ToolResult:
        number = self._started(call)
        try:
            result = self.inner.call(call)
        except BaseException as exc:
            self._returned(number, exc)
            raise
        self._returned(number, None)
        return result  # type: ignore[return-value]


class _AsyncSeenTool(_SeenTool):
    async def call(self, call: ToolCall) -> ToolResult:
        number = self._started(call)
        try:
            result = await self.inner.call(call)  # type: ignore[misc]
        except BaseException as exc:
            self._returned(number, exc)
            raise
        self._returned(number, None)
        return result  # type: ignore[no-any-return]


def seen_tool(inner: Tool, journal: Journal) -> Tool:
    """Wrap `inner` so every invocation is journaled; async stays async (so the runtime
    still cancels it at its timeout) and sync stays on the runtime's tool threads."""
    if inspect.iscoroutinefunction(inner.call):
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
