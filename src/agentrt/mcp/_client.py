"""A live connection to one MCP server, and the agentrt tools that call through it.

This module owns the connection's lifetime and the shape of what crosses it:

- `connect(server)` is an async context manager: the transport, the SDK's
  `ClientSession` and the handshake on entry; the session closed and a stdio
  server's whole process group killed on exit. Tools returned by
  `Connection.load` call through that session, so they work inside the
  `async with` on the same event loop (a Driver started with `await
  driver.start(...)`); after it, or from another loop, a call is a tool error,
  never a hang.
- `tools/list` is read page by page from the raw bytes the server sent (at most
  `MAX_PAGES` pages and `MAX_TOOLS` tools; a repeated cursor ends the listing),
  so a pin hashes the literals the server wrote.
- A result becomes `structuredContent` when its canonical JSON fits
  `max_content_bytes`, else the text blocks joined (other blocks as
  placeholders such as `[image omitted]`), cut at the cap with `[truncated]`.
  `isError` raises `MCPToolError`, which the Driver records as a tool error.
- A call whose request left for the server and got no answer before the
  session ended, the process exited or the stream closed raises
  `OutcomeUnknown` (the server may have done the work): a side effect then
  waits for a person, as after a crash. A call that failed before its request
  left (the connection already closed, no connection made) is an ordinary
  `MCPToolError` (decision 0054). The request is known by the id the SDK gave
  it, seen as the session writes it (`_NotingWrites`, in the caller's task).
  A call that got an answer agentrt refuses, or a result the SDK refuses,
  raises `MCPAnswerRefused`: it was carried out, only its result is lost.
- A server that announces its tools changed (`notifications/tools/list_changed`) has
  them listed again before the next call of any of its tools, and each loaded tool is
  judged as a load would judge it against the same manifest and rule (`decide`); a tool
  that no longer passes (its input schema or description changed, its annotations now
  contradict the rule, it is gone) raises `MCPToolError` naming the change, before its
  request is sent. Any later listing on the connection (`check`, `load`) is judged the
  same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, cast

import anyio
import httpx2
import mcp_types
from mcp.client.session import ClientSession
from mcp.shared.message import SessionMessage

from .._canonical import canonical_json, copy_json
from .._errors import (
    ConfigError,
    MCPAnswerRefused,
    MCPInputRequired,
    MCPServerError,
    MCPToolError,
    OutcomeUnknown,
)
from .._records import ToolCall, ToolResult, ToolSpec
from .._tools import CompiledTool, compile_tool
from ._config import (
    Admitted,
    Manifest,
    Offer,
    PinnedTool,
    Report,
    Rule,
    Server,
    compile_output_schema,
    decide,
)
from ._transport import INPUT_REQUIRED, RawCapture, open_transport

MAX_PAGES = 100
MAX_TOOLS = 1000
HANDSHAKE_TIMEOUT = 30.0
OPERATION_ID_META = "agentrt/operation_id"
"""The `_meta` key a call to an MCP server carries its `ToolCall.operation_id` under."""
# How much later than the tool's own timeout the SDK gives up reading its answer.
SDK_TIMEOUT_SLACK_SECONDS = 1.0
TRUNCATED = "\n[truncated]"
_PLACEHOLDERS = {
    "image": "[image omitted]",
    "audio": "[audio omitted]",
    "resource": "[resource omitted]",
    "resource_link": "[resource link omitted]",
}


@dataclasses.dataclass
class _Attempt:
    """One `Connection.call`: the id the SDK gave its `tools/call` request, once written."""

    request_id: Any = None


_ATTEMPT: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar(
    "agentrt_mcp_attempt", default=None
)


class _NotingWrites:
    """The session's write stream, noting the id of the `tools/call` request that the
    `Connection.call` running in this task hands to the transport."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, item: SessionMessage, /) -> None:
        attempt = _ATTEMPT.get()
        message = item.message
        if attempt is not None and getattr(message, "method", None) == "tools/call":
            attempt.request_id = getattr(message, "id", None)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _NotingWrites:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        result: bool | None = await self._inner.__aexit__(exc_type, exc_val, exc_tb)
        return result


class Connection:
    """One open session with one MCP server; made by `connect`, valid inside its `async with`."""

    def __init__(self, server: Server, session: ClientSession, capture: RawCapture) -> None:
        self.server = server
        self._session = session
        self._capture = capture
        self._loop = asyncio.get_running_loop()
        self._list_lock = asyncio.Lock()
        self._open = True
        # Each tool's output schema as the last listing declared it (None: no schema).
        self._outputs: dict[str, Any] = {}
        # The last listing, by name, and how many listings were read: a loaded tool is
        # judged again when a listing came after the one it was judged by.
        self._listed: dict[str, Offer] = {}
        self._listings = 0
        self._relist_lock = asyncio.Lock()  # one listing again for a change, however many wait

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"<agentrt.mcp.Connection {self.server.name!r} {state}>"

    async def offers(self) -> list[Offer]:
        """Every tool the server offers now, read from the raw bytes of its `tools/list` pages."""
        self._usable()
        offers: dict[str, Offer] = {}
        cursor: str | None = None
        seen_cursors: set[str] = set()
        async with self._list_lock:
            for _page in range(MAX_PAGES):
                params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                self._capture.clear()
                try:
                    with anyio.fail_after(HANDSHAKE_TIMEOUT):
                        await self._list_page(params)
                except Exception as exc:
                    raise MCPServerError(
                        f"server {self.server.name!r}: tools/list failed: {_describe(exc)}"
                    ) from exc
                result = _result(self._capture.take(), self.server.name)
                tools = result.get("tools")
                if not isinstance(tools, list):
                    raise MCPServerError(
                        f"server {self.server.name!r}: tools/list has no tool list"
                    )
                for raw in tools:
                    offer = _offer(raw, self.server.name)
                    if offer.name in offers:
                        raise MCPServerError(
                            f"server {self.server.name!r} lists tool {offer.name!r} twice"
                        )
                    offers[offer.name] = offer
                    if len(offers) > MAX_TOOLS:
                        raise MCPServerError(
                            f"server {self.server.name!r} offers more than {MAX_TOOLS} tools"
                        )
                cursor = result.get("nextCursor")
                if not isinstance(cursor, str) or not cursor:
                    self._outputs = {name: offer.output_schema for name, offer in offers.items()}
                    self._listed = dict(offers)
                    self._listings += 1
                    return list(offers.values())
                if cursor in seen_cursors:
                    raise MCPServerError(
                        f"server {self.server.name!r} repeated a tools/list cursor"
                    )
                seen_cursors.add(cursor)
        raise MCPServerError(
            f"server {self.server.name!r}: tools/list has more than {MAX_PAGES} pages"
        )

    async def _list_page(self, params: mcp_types.PaginatedRequestParams | None) -> None:
        """One `tools/list` through the SDK; cut short when the capture already saw an
        answer agentrt cannot use (the SDK may drop it and wait for its timeout)."""

        async def watch(scope: anyio.CancelScope) -> None:
            await self._capture.unusable.wait()
            scope.cancel()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch, tasks.cancel_scope)
            await self._session.list_tools(params=params)
            tasks.cancel_scope.cancel()

    async def pin(self) -> Manifest:
        """What the server offers now, with hashes, for the operator to review and keep."""
        tools = {
            offer.name: PinnedTool.of(
                offer.name, offer.description, offer.input_schema, offer.annotations
            )
            for offer in await self.offers()
        }
        return Manifest(server=self.server.name, tools=tools)

    async def check(self, manifest: Manifest, rules: Mapping[str, Rule]) -> Report:
        """The report a load would give now, without making tools."""
        return decide(self.server, manifest, rules, await self.offers())[1]

    async def load(
        self, manifest: Manifest, rules: Mapping[str, Rule]
    ) -> tuple[list[MCPTool], Report]:
        """The tools that pass the manifest and the rules, as agentrt tools, and the report."""
        admitted, report = decide(self.server, manifest, rules, await self.offers())
        return [MCPTool(self, item, manifest.tools[item.offer.name]) for item in admitted], report

    async def _changed(self, tool: MCPTool) -> str | None:
        """Why `tool` no longer passes as loaded, judged against the server's latest listing
        (listed again first when the server announced a change), or None."""
        self._usable()
        async with self._relist_lock:
            if self._capture.tools_changed:
                self._capture.tools_changed = False
                try:
                    await self.offers()
                except BaseException as exc:
                    # Failed, or cut short (the call cancelled, its timeout): the change is
                    # still to be looked at, so the next call lists again.
                    self._capture.tools_changed = True
                    if not isinstance(exc, MCPServerError):
                        raise
                    raise MCPToolError(
                        f"MCP server {self.server.name!r} announced that its tools changed, "
                        f"and listing them again failed ({exc}); the call to "
                        f"{tool.server_tool!r} was not sent"
                    ) from exc
        return tool._judged(self._listings, self._listed)

    async def call(
        self, tool: str, arguments: dict[str, Any], timeout: float, operation_id: str = ""
    ) -> ToolResult:
        """Call one server tool and turn its answer into a ToolResult (`isError` raises).

        `timeout` is the tool's own, which the runtime enforces and records as a
        timeout (an unknown outcome). The SDK's read timeout is set later than
        that, so it never fires first and turns a call of unknown outcome into an
        ordinary tool error.

        A failure after the request left, with no answer seen, raises
        `OutcomeUnknown`; one before it left, `MCPToolError`; an answer agentrt
        refuses (too long, not usable JSON) or a result the SDK refuses (not a
        `CallToolResult`, content against the tool's output schema),
        `MCPAnswerRefused`: the call was carried out, its result is lost.

        `operation_id` (the step's `ToolCall.operation_id`) travels in the request's
        `_meta` as `agentrt/operation_id`, so a server can deduplicate by it or stamp
        it on what it creates (decision 0067).
        """
        self._usable()
        read_timeout = timeout + max(SDK_TIMEOUT_SLACK_SECONDS, timeout / 10)
        attempt = _Attempt()
        token = _ATTEMPT.set(attempt)
        try:
            meta = cast(Any, {OPERATION_ID_META: operation_id}) if operation_id else None
            result = await self._session.call_tool(
                tool,
                arguments,
                read_timeout_seconds=read_timeout,
                meta=meta,
                allow_input_required=True,
            )
            asked = self._capture.asked(attempt.request_id)
        except Exception as exc:
            refused = self._capture.refused(attempt.request_id)
            if refused is not None:
                raise MCPAnswerRefused(
                    f"MCP server {self.server.name!r} answered the call to {tool!r}, and its "
                    f"answer is refused: {refused}"
                ) from exc
            if self._capture.unanswered(attempt.request_id):
                raise OutcomeUnknown(
                    f"the connection to MCP server {self.server.name!r} was lost after the "
                    f"call to {tool!r} was sent ({_describe(exc)})"
                ) from exc
            asked = self._capture.asked(attempt.request_id)
            if asked is not None:
                then = "no result" if asked.startswith(INPUT_REQUIRED) else _describe(exc)
                raise MCPInputRequired(self._input_refused(tool, asked, then)) from exc
            if self._capture.resulted(attempt.request_id):
                # The server answered with a result the SDK would not take (not a
                # CallToolResult, or content against the tool's output schema).
                raise MCPAnswerRefused(
                    f"MCP server {self.server.name!r} answered the call to {tool!r}, and its "
                    f"answer is refused: the MCP SDK refused it ({_first_line(exc)})"
                ) from exc
            raise MCPToolError(f"the call to {tool!r} failed: {_describe(exc)}") from exc
        finally:
            _ATTEMPT.reset(token)
            self._capture.forget(attempt.request_id)
        if isinstance(result, mcp_types.InputRequiredResult):
            asked = INPUT_REQUIRED
            raise MCPInputRequired(self._input_refused(tool, asked, "no result"))
        if asked is not None and getattr(result, "is_error", False):
            text = _cap(_text_of(result), 500)
            raise MCPInputRequired(self._input_refused(tool, asked, text))
        if not getattr(result, "is_error", False):
            self._check_output(tool, result)
        return _tool_result(result, self.server.max_content_bytes)

    def _check_output(self, tool: str, result: Any) -> None:
        """A result checked against the tool's declared output schema, as the MCP SDK
        would, but by agentrt's validator (linear-time patterns, no I/O): one that does
        not fit was carried out all the same, so it raises `MCPAnswerRefused`."""
        schema = self._outputs.get(tool)
        if schema is None:
            return
        refused = (
            f"MCP server {self.server.name!r} answered the call to {tool!r}, and its answer "
            "is refused: "
        )
        try:
            compiled = compile_output_schema(schema)
        except ConfigError as exc:
            raise MCPAnswerRefused(
                f"{refused}the tool's output schema cannot be used ({_first_line(exc)})"
            ) from exc
        structured = getattr(result, "structured_content", None)
        if structured is None:
            raise MCPAnswerRefused(
                f"{refused}the tool has an output schema and its result no structured content"
            )
        errors = compiled.check(structured)
        if errors:
            raise MCPAnswerRefused(
                f"{refused}its structured content does not fit the tool's output schema "
                f"({_cap(errors[0], 200)})"
            )

    def _input_refused(self, tool: str, asked: str, then: str) -> str:
        return (
            f"MCP server {self.server.name!r} asked for the user's input during the call to "
            f"{tool!r} ({asked}); a request for input is refused, never passed on, so the "
            f"call did not complete ({then})"
        )

    def _usable(self) -> None:
        if not self._open:
            raise MCPToolError(f"the connection to MCP server {self.server.name!r} is closed")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not self._loop:
            raise MCPToolError(
                f"the connection to MCP server {self.server.name!r} belongs to another event loop"
            )


class MCPTool:
    """An agentrt tool that calls one server tool through a `Connection`.

    Its spec is the operator's: the rule's side effect, timeout and terminal
    flag, the offered name, the model's schema (denied and fixed parameters
    removed). Fixed values are added after the Driver validated the model's
    arguments; the whole is checked against the server's own schema before
    it is sent.
    """

    def __init__(
        self, connection: Connection, admitted: Admitted, pinned: PinnedTool | None = None
    ) -> None:
        self.spec: ToolSpec = admitted.spec
        self.server_tool = admitted.offer.name
        self._connection = connection
        self._rule = admitted.rule
        self._pinned = pinned
        self._server_schema: CompiledTool = compile_tool(
            dataclasses.replace(admitted.spec, input_schema=admitted.offer.input_schema)
        )
        # The listing it was last judged by (the load's), and why it no longer passes.
        self._judged_by = connection._listings
        self._refused: str | None = None

    def _judged(self, listings: int, listed: Mapping[str, Offer]) -> str | None:
        """Why this tool no longer passes as loaded, by the latest listing (`listings` read
        so far, the last `listed`): judged as a load would judge it, once per listing."""
        if listings == self._judged_by or self._pinned is None:
            return self._refused
        self._judged_by = listings
        server = self._connection.server
        offer = listed.get(self.server_tool)
        admitted, report = decide(
            server,
            Manifest(server=server.name, tools={self.server_tool: self._pinned}),
            {self.server_tool: self._rule},
            [] if offer is None else [offer],
        )
        if admitted and admitted[0].spec == self.spec:
            self._refused = None
        elif report.refused:
            self._refused = report.refused[0][1]
        else:
            self._refused = "what a load makes of it changed"
        return self._refused

    def __repr__(self) -> str:
        return f"<agentrt.mcp.MCPTool {self.spec.name!r} -> {self.server_tool!r}>"

    async def call(self, call: ToolCall) -> ToolResult:
        args = dict(call.args) if isinstance(call.args, Mapping) else {}
        hidden = sorted((set(self._rule.deny) | set(self._rule.fixed)) & set(args))
        if hidden:
            raise MCPToolError(f"parameter {hidden[0]!r} is not the model's to set")
        args.update(copy_json(dict(self._rule.fixed)))
        changed = await self._connection._changed(self)
        if changed is not None:
            raise MCPToolError(
                f"MCP server {self._connection.server.name!r} changed tool "
                f"{self.server_tool!r} during this session: {changed}; the call was not sent "
                "(review the change, pin the server again and load it anew)"
            )
        errors = self._server_schema.check(args)
        if errors:
            raise MCPToolError(f"the arguments do not pass the server's schema: {errors[0]}")
        return await self._connection.call(
            self.server_tool, args, self.spec.timeout.total_seconds(), call.operation_id
        )


class _Session(ClientSession):
    """The SDK's session, minus its check of a result against the tool's output schema.

    The SDK checks with `jsonschema` and Python's backtracking `re` on the event loop,
    where a server's pattern such as `^(a+)+$` freezes everything for hours;
    `Connection.call` checks with agentrt's validator instead (decision 0160).
    """

    async def validate_tool_result(self, name: str, result: mcp_types.CallToolResult) -> None:
        return None


@contextlib.asynccontextmanager
async def connect(server: Server) -> AsyncIterator[Connection]:
    """Open a session with `server`; it is closed, and a stdio server killed, on exit."""
    capture = RawCapture()
    connection: Connection | None = None
    try:
        async with (
            open_transport(server, capture) as (read_stream, write_stream),
            _Session(read_stream, _NotingWrites(write_stream)) as session,
        ):
            try:
                with anyio.fail_after(HANDSHAKE_TIMEOUT):
                    await session.initialize()
            except Exception as exc:
                said = await capture.stderr.tail() if server.command is not None else ""
                raise MCPServerError(
                    f"server {server.name!r}: the MCP handshake failed: {_describe(exc)}"
                    + (f"; its stderr ends: {said}" if said else "")
                ) from exc
            connection = Connection(server, session, capture)
            try:
                yield connection
            finally:
                connection._open = False
    except BaseExceptionGroup as group:
        # The SDK's and the transport's task groups wrap what went wrong, sometimes
        # twice; the caller gets the one error it would have got without them.
        leaves = _leaves(group)
        if len(leaves) == 1 and isinstance(leaves[0], Exception):
            raise _as_server_error(server, leaves[0]) from None
        raise
    except httpx2.TransportError as exc:
        raise _as_server_error(server, exc) from exc


def _as_server_error(server: Server, error: Exception) -> Exception:
    """An HTTP failure under the SDK (refused, reset, timed out) is the server's, said so."""
    if isinstance(error, httpx2.TransportError):
        kind = type(error).__name__
        return MCPServerError(
            f"server {server.name!r} could not be reached: {kind}: {_describe(error)}"
        )
    return error


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    if isinstance(error, anyio.get_cancelled_exc_class()):
        return []
    return [error]


async def pin(server: Server) -> Manifest:
    """Connect, read what the server offers, and close: the manifest to review and keep."""
    async with connect(server) as connection:
        return await connection.pin()


async def check(server: Server, manifest: Manifest, rules: Mapping[str, Rule]) -> Report:
    """Connect, compare the server with the manifest and the rules, and close."""
    async with connect(server) as connection:
        return await connection.check(manifest, rules)


@contextlib.asynccontextmanager
async def load(
    server: Server, manifest: Manifest, rules: Mapping[str, Rule]
) -> AsyncIterator[tuple[list[MCPTool], Report]]:
    """`async with load(server, manifest, rules) as (tools, report):` the tools live inside."""
    async with connect(server) as connection:
        yield await connection.load(manifest, rules)


# ---------------------------------------------------------------------------
# What crosses the wire


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc) or type(exc).__name__
    return text[:500]


def _first_line(exc: BaseException) -> str:
    """The first line of what `exc` says, at most 200 characters."""
    lines = _describe(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:200]


def _result(answer: Any, server: str) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise MCPServerError(f"server {server!r}: tools/list answer is not an object")
    if "error" in answer:
        error = answer["error"]
        message = error.get("message") if isinstance(error, dict) else None
        raise MCPServerError(f"server {server!r}: tools/list failed: {str(message)[:500]}")
    result = answer.get("result")
    if not isinstance(result, dict):
        raise MCPServerError(f"server {server!r}: tools/list answer has no result")
    return result


def _offer(raw: Any, server: str) -> Offer:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise MCPServerError(f"server {server!r} listed a tool without a name")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise MCPServerError(
            f"server {server!r}: tool {raw['name']!r} has a description that is not text"
        )
    schema = raw.get("inputSchema")
    if not isinstance(schema, dict):
        raise MCPServerError(f"server {server!r}: tool {raw['name']!r} has no input schema object")
    annotations = raw.get("annotations")
    return Offer(
        name=raw["name"],
        description=description,
        input_schema=schema,
        annotations=annotations if isinstance(annotations, dict) else None,
        output_schema=raw.get("outputSchema"),
    )


def _cap(text: str, limit: int) -> str:
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= limit:
        return text
    room = max(0, limit - len(TRUNCATED.encode()))
    return encoded[:room].decode("utf-8", "ignore") + TRUNCATED


def _text_of(result: Any) -> str:
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        else:
            parts.append(_PLACEHOLDERS.get(kind, f"[{str(kind)[:40]} content omitted]"))
    return "\n".join(parts)


def _tool_result(result: Any, limit: int) -> ToolResult:
    text = _cap(_text_of(result), limit)
    if getattr(result, "is_error", False):
        raise MCPToolError(text or "the server reported an error and said nothing more")
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        try:
            if len(canonical_json(structured)) <= limit:
                return ToolResult(content=structured, summary=text[:200])
        except (TypeError, ValueError):
            pass  # not usable JSON: the text blocks stand for it
    return ToolResult(content=text, summary=text[:200])
