"""Calling one tool under its timeout and turning every outcome into an observation.

A tool's outcome is never a crash of the runtime: a result becomes
`tool_result`; an exception, a timeout or content that is not usable JSON
becomes `tool_error` with a `failure` of `error`, `timeout` or
`invalid_content` (the unusable content kept for the record); `AbortRun` asks
for the run to end as `tool_abort`.

A plain-function tool runs on a worker thread of a pool reserved for tools, so
a tool that outlives its timeout (a thread cannot be killed) never takes a
thread from the store's I/O. A coroutine tool is cancelled at its timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from dataclasses import dataclass
from typing import Any, cast

from .canonical import check_json, content_hash
from .decisions import _kept_text
from .errors import AbortRun, JSONValueError
from .records import Observation, ObservationKind, ToolCall, ToolResult, ToolSpec
from .tools import Tool

_TOOL_THREADS = concurrent.futures.ThreadPoolExecutor(
    max_workers=32, thread_name_prefix="agentrt-tool"
)
_MAX_SUMMARY = 1024


@dataclass(frozen=True)
class ToolOutcome:
    observation: Observation
    abort: str | None = None  # set when the tool raised AbortRun

    @property
    def error(self) -> str:
        content = self.observation.content
        if self.observation.kind == ObservationKind.TOOL_RESULT or not isinstance(content, dict):
            return ""
        return str(content.get("error", ""))


def _error(spec: ToolSpec, failure: str, error: str, **kept: Any) -> Observation:
    content: dict[str, Any] = {"tool": spec.name, "error": error, "failure": failure, **kept}
    return Observation(
        kind=ObservationKind.TOOL_ERROR,
        content=content,
        summary=error[:_MAX_SUMMARY],
        content_hash=content_hash(content),
    )


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return _kept_text(text)[:4096]


def result_observation(spec: ToolSpec, result: Any) -> Observation:
    """The observation for what `call` returned (or an invalid_content error)."""
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
        check_json(result.content)
        result.summary.encode("utf-8")
    except (JSONValueError, UnicodeEncodeError, RecursionError, TypeError, ValueError) as exc:
        return _error(
            spec,
            "invalid_content",
            f"tool content is not usable JSON: {exc}",
            content_text=_kept_text(result.content),
        )
    return Observation(
        kind=ObservationKind.TOOL_RESULT,
        content=result.content,
        summary=result.summary[:_MAX_SUMMARY],
        content_hash=content_hash(result.content),
    )


ToolThreads = list["concurrent.futures.Future[Any]"]


async def _call(tool: Tool, call: ToolCall, threads: ToolThreads | None) -> Any:
    method = tool.call
    if inspect.iscoroutinefunction(method):
        return await method(call)
    future = _TOOL_THREADS.submit(method, call)
    if threads is not None:
        threads.append(future)
    result = await asyncio.wrap_future(future)
    if inspect.isawaitable(result):
        result = await result
    return result


async def invoke(
    tool: Tool, spec: ToolSpec, call: ToolCall, threads: ToolThreads | None = None
) -> ToolOutcome:
    """Run the tool once. Caller cancellation propagates (the driver records it).

    A plain-function tool runs on a thread that outlives a timeout or a
    cancellation; `threads` receives its future, so the caller can tell whether
    the call is still running (and keep the lease until it is not).
    """
    abort: str | None = None
    try:
        result = await asyncio.wait_for(_call(tool, call, threads), spec.timeout.total_seconds())
        observation = result_observation(spec, result)
    except TimeoutError:
        observation = _error(spec, "timeout", f"timed out after {spec.timeout.total_seconds():g}s")
    except AbortRun as exc:
        abort = exc.detail or "the tool aborted the run"
        observation = _error(spec, "abort", _kept_text(abort))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        observation = _error(spec, "error", _describe(exc))
    return ToolOutcome(observation=observation, abort=abort)
