"""How agentrt reaches an MCP server: its own stdio transport; streamable HTTP without redirects.

This module owns the process of a stdio server and the raw bytes of every
`tools/list` answer. Both transports yield the SDK's stream pair, so the SDK's
`ClientSession` speaks the protocol; what is agentrt's is:

- A stdio server starts with the minimal environment `Server.child_environment`
  builds, in a new session (its own process group), with stderr drained into a
  small ring kept for error messages. On close: stdin closed, a short grace for
  the server to exit, then SIGTERM and SIGKILL to the whole group, whether or
  not the server itself already exited, so a child it left behind dies too.
  (The SDK's own stdio client signals the group only when the server itself
  outlives its grace.)
- A line longer than `max_message_bytes` ends the connection: a server cannot
  make the client buffer without bound.
- Over HTTP, a 3xx answer is an error: no redirect is followed, not even one the
  SDK would follow within the endpoint's origin. Proxies and credentials from
  the environment are not used (`trust_env=False`). What goes wrong with a POST
  carrying a request (a redirect, the connection broken off once made, a body
  or SSE event past `max_message_bytes`) reaches the SDK as a JSON-RPC error
  for that request, never as an exception in the SDK's task group, which would
  end the whole session under its holder.
- `RawCapture` keeps the bytes of each answer to a `tools/list` request, seen
  before the SDK parses them, so a pin hashes what the server sent and numbers
  beyond float64 keep their literal. It also knows which `tools/call` requests
  left for the server and have no answer yet (`sent`, `unanswered`): a call
  whose connection is lost after its request left has an unknown outcome,
  one lost before is an ordinary error (decision 0054). Over stdio a request
  has left once its line is being written to the server's stdin (a write that
  fails reached no reader); over HTTP once its POST got past connecting.
- An answer to a `tools/call` that agentrt refuses (a line, HTTP body or SSE
  event past `max_message_bytes` whose head names the call, or over stdio a
  line neither agentrt nor the SDK can read that is the call's answer) is
  noted (`refused`): the call was carried out, only its result is lost. So is
  that a call got a result at all (`resulted`): one the SDK then refuses was
  carried out too. An unreadable answer reaches the
  SDK as a JSON-RPC error for the call, so the call ends at once.
- An `elicitation/create` request of the server's (a tool asking the user for
  input mid-call) marks the calls in flight (`asked`), so a call that then
  fails says why; the client never offers elicitation and refuses it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from .._canonical import parse_json
from .._errors import JSONValueError, MCPServerError
from ._config import Server

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
INPUT_REQUIRED = "an input_required result"
STDERR_KEPT = 4096
EXIT_GRACE = 1.0
TERM_GRACE = 1.0
_POLL = 0.02

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


_TOOLS_CHANGED = b"notifications/tools/list_changed"  # as most servers write it


class RawCapture:
    """The raw answers to `tools/list` requests, by request id, as the server sent them."""

    def __init__(self) -> None:
        self._waiting: set[Any] = set()
        self._answers: dict[Any, Any] = {}
        self._unanswered: set[str] = set()
        self._calls: set[str] = set()
        self._refused: dict[str, str] = {}
        self._asked: dict[str, str] = {}
        self._results: set[str] = set()
        self.stderr = _StderrRing()
        self.unusable = anyio.Event()
        self.tools_changed = False
        """Set when the server announced `notifications/tools/list_changed`, in the order its
        messages came (before the answers that followed it): cleared by whoever lists the
        tools again (`Connection`)."""

    def sent(self, message: Any) -> None:
        """Note a message that left for the server: a `tools/call` now awaits its answer."""
        ident = _call_id(message)
        if ident is not None:
            self._unanswered.add(str(ident))
            self._calls.add(str(ident))

    def not_sent(self, message: Any) -> None:
        """A message noted as sent that provably never reached the server (no connection).

        Only a `tools/call` request's own failure clears its mark: the client's answer
        to a server's request may carry the same id (another id space) and says
        nothing of the call.
        """
        ident = _call_id(message)
        if ident is not None:
            self._unanswered.discard(str(ident))
            self._calls.discard(str(ident))

    def unanswered(self, ident: Any) -> bool:
        """Did the `tools/call` request `ident` leave for the server with no answer seen?"""
        return ident is not None and str(ident) in self._unanswered

    def forget(self, ident: Any) -> None:
        if ident is not None:
            self._unanswered.discard(str(ident))
            self._calls.discard(str(ident))
            self._refused.pop(str(ident), None)
            self._asked.pop(str(ident), None)
            self._results.discard(str(ident))

    def asked(self, ident: Any) -> str | None:
        """What the server asked of the user while the call `ident` was in flight, if it did."""
        return None if ident is None else self._asked.get(str(ident))

    def asking(self, message: Any) -> None:
        """Note a request of the server's own: an elicitation marks every call in flight."""
        method = getattr(message, "method", None)
        if method != "elicitation/create":
            return
        asked = _asked_for(getattr(message, "params", None), "an elicitation")
        for ident in self._calls:
            self._asked.setdefault(ident, asked)

    def resulted(self, ident: Any) -> bool:
        """Did the call `ident` get a result (not an error, not a request for input)?
        Then the server carried it out, whatever the SDK makes of that result."""
        return ident is not None and str(ident) in self._results

    def refused(self, ident: Any) -> str | None:
        """Why agentrt refused the answer to the `tools/call` request `ident`, if it did."""
        return None if ident is None else self._refused.get(str(ident))

    def refuse(self, ident: Any, why: str) -> bool:
        """Note that the answer to the call `ident` came and is refused; False (nothing
        noted) when `ident` is no `tools/call` of this connection awaiting its answer."""
        if ident is None or isinstance(ident, bool) or str(ident) not in self._calls:
            return False
        self._refused[str(ident)] = why
        self._unanswered.discard(str(ident))
        return True

    def outgoing(self, message: Any) -> None:
        """Note a message the client sends (a parsed JSON-RPC message or a dict)."""
        method = (
            message.get("method") if isinstance(message, dict) else getattr(message, "method", None)
        )
        ident = message.get("id") if isinstance(message, dict) else getattr(message, "id", None)
        if method == "tools/list" and _is_id(ident):
            self._waiting.add(str(ident))

    def incoming(self, raw: bytes) -> None:
        """Offer one raw message from the server; kept when it answers a `tools/list`;
        an answer to a `tools/call` sent is noted as an answer; the server's announcement that
        its tools changed is noted (`tools_changed`)."""
        if not self._waiting and not self._unanswered:
            # The announcement is read as the SDK reads it: a method name written with
            # escapes (`notifications\/tools\/list_changed`, as PHP's `json_encode` writes
            # it) is the same string, so a message with a backslash is parsed too.
            if _TOOLS_CHANGED in raw or b"\\" in raw:
                with contextlib.suppress(ValueError, RecursionError):
                    self._note_tools_changed(json.loads(raw))
            return
        # Only an answer (`result` or `error`) with a JSON-RPC id (a string or a number)
        # is one: a server's own request (its ids may equal the client's, JSON-RPC ids
        # being each side's own), a message whose id is a list or an object, or other
        # junk is nobody's answer (decision 0160).
        try:
            parsed = parse_json(raw)
        except JSONValueError as exc:
            with contextlib.suppress(ValueError, RecursionError):
                loose = json.loads(raw)
                self._note_tools_changed(loose)
                ident = _answer_id(loose)
                if ident is None:
                    return
                self._answered(loose)
                if ident in self._waiting:
                    # Unusable to agentrt (too deep, a lone surrogate, a 20,000-digit
                    # number), maybe not to the SDK: it answers the listing, so say so
                    # at take().
                    self._waiting.discard(ident)
                    self._answers[ident] = MCPServerError(
                        f"the server's tools/list answer is not usable JSON: {exc}"
                    )
                    self.unusable.set()
            return
        self._note_tools_changed(parsed)
        ident = _answer_id(parsed)
        if ident is None:
            return
        self._answered(parsed)
        if ident in self._waiting:
            self._waiting.discard(ident)
            self._answers[ident] = parsed

    def _answered(self, answer: dict[str, Any]) -> None:
        """Note an answer: its call (if one awaits it) no longer unanswered; a result noted,
        or what a result asking for the user's input asks."""
        ident = str(answer.get("id"))
        self._unanswered.discard(ident)
        if ident not in self._calls or "result" not in answer:
            return
        result = answer["result"]
        if isinstance(result, dict) and result.get("resultType") == "input_required":
            self._asked[ident] = _input_required(result)
        else:
            self._results.add(ident)

    def _note_tools_changed(self, message: Any) -> None:
        # Whatever its `id`: the SDK reads one that is null, or no request id, as the
        # notification, and a listing again for a message that was none costs one round trip.
        if (
            isinstance(message, dict)
            and message.get("method") == "notifications/tools/list_changed"
        ):
            self.tools_changed = True

    def clear(self) -> None:
        """Forget what an earlier, failed listing may have left."""
        self._waiting.clear()
        self._answers.clear()
        self.unusable = anyio.Event()

    def take(self) -> Any:
        """The one answer kept since the last take (the request was made one at a time)."""
        answers, self._answers = self._answers, {}
        self._waiting.clear()
        if len(answers) != 1:
            raise MCPServerError("the server's answer to tools/list was not seen on the wire")
        answer = next(iter(answers.values()))
        if isinstance(answer, MCPServerError):
            raise answer
        return answer


def _asked_for(params: Any, what: str) -> str:
    """`what`, and the message the server shows the user, if it gave one."""
    text = params.get("message") if isinstance(params, dict) else None
    return f"{what}: {text[:200]!r}" if isinstance(text, str) and text else what


def _input_required(result: dict[str, Any]) -> str:
    """What an `input_required` result asks, in a few words."""
    requests = result.get("inputRequests")
    asked = [
        _asked_for(request.get("params"), str(request.get("method") or "a request")[:40])
        for request in (requests.values() if isinstance(requests, dict) else [])
        if isinstance(request, dict)
    ]
    return f"{INPUT_REQUIRED}, " + ("; ".join(asked[:3]) or "naming no request")


def _call_id(message: Any) -> Any:
    """The id of a `tools/call` request (a parsed JSON-RPC message or a dict), else None."""
    if isinstance(message, dict):
        method, ident = message.get("method"), message.get("id")
    else:
        method, ident = getattr(message, "method", None), getattr(message, "id", None)
    return ident if method == "tools/call" else None


def _is_id(ident: Any) -> bool:
    """Is this a JSON-RPC request id (a string or an integer; not a bool, a list...)?"""
    return isinstance(ident, (str, int)) and not isinstance(ident, bool)


def _answer_id(message: Any) -> str | None:
    """The id (as text) of the JSON-RPC answer `message` is, or None if it is no answer."""
    if not _is_answer(message) or not _is_id(message.get("id")):
        return None
    return str(message["id"])


def _is_answer(message: Any) -> bool:
    """Is this JSON value a JSON-RPC answer (`result` or `error`, not a request)?"""
    return (
        isinstance(message, dict)
        and "method" not in message
        and ("result" in message or "error" in message)
    )


@contextlib.asynccontextmanager
async def open_transport(server: Server, capture: RawCapture) -> AsyncIterator[Streams]:
    if server.command is not None:
        async with _stdio(server, capture) as streams:
            yield streams
    else:
        async with _http(server, capture) as streams:
            yield streams


# ---------------------------------------------------------------------------
# stdio


class _StderrRing:
    """The last few KiB a stdio server wrote to stderr, to say why it would not talk."""

    def __init__(self) -> None:
        self.data = b""
        self.ended = anyio.Event()

    def add(self, chunk: bytes) -> None:
        self.data = (self.data + chunk)[-STDERR_KEPT:]

    async def tail(self, wait: float = 0.5) -> str:
        with anyio.move_on_after(wait):
            await self.ended.wait()
        return self.data.decode("utf-8", "replace").strip()[-500:]


@contextlib.asynccontextmanager
async def _stdio(server: Server, capture: RawCapture) -> AsyncIterator[Streams]:
    assert server.command is not None
    try:
        process = await anyio.open_process(
            list(server.command),
            env=server.child_environment(),
            start_new_session=True,
        )
    except OSError as exc:
        raise MCPServerError(
            f"server {server.name!r}: cannot start {server.command[0]!r}: {exc.strerror or exc}"
        ) from exc
    stderr = capture.stderr
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](16)

    async def read_stdout() -> None:
        assert process.stdout is not None
        buffer = b""
        async with to_session:
            try:
                async for chunk in process.stdout:
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            await to_session.send(_parse_line(line, capture))
                    if len(buffer) > MAX_MESSAGE_BYTES:
                        capture.refuse(
                            _answer_id_at_head(buffer[:_HEAD_BYTES]),
                            f"its answer is longer than {MAX_MESSAGE_BYTES} bytes",
                        )
                        await to_session.send(
                            MCPServerError(
                                f"server {server.name!r} sent a message longer than "
                                f"{MAX_MESSAGE_BYTES} bytes"
                            )
                        )
                        return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                return

    async def read_stderr() -> None:
        assert process.stderr is not None
        try:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in process.stderr:
                    stderr.add(chunk)
        finally:
            stderr.ended.set()

    async def write_stdin() -> None:
        assert process.stdin is not None
        async with from_session:
            try:
                async for message in from_session:
                    capture.outgoing(message.message)
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    # Noted before the write, so an answer read while it drains is seen
                    # as one; a write that fails reached no reader (the server is gone).
                    capture.sent(message.message)
                    try:
                        await process.stdin.send(data.encode("utf-8") + b"\n")
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                        capture.not_sent(message.message)
                        raise
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                await to_session.aclose()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_stdout)
        tasks.start_soon(read_stderr)
        tasks.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            # Shielded: a cancelled caller must not leave the server's group alive.
            with anyio.CancelScope(shield=True):
                await write_stream.aclose()
                await _stop(process)
                await read_stream.aclose()
            tasks.cancel_scope.cancel()


def _parse_line(line: bytes, capture: RawCapture) -> SessionMessage | Exception:
    capture.incoming(line)
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        ident = _loose_answer_id(line)
        why = f"its answer is not usable JSON ({_first_line(exc)})"
        if capture.refuse(ident, why):
            # The call's answer came: end the call now, as a JSON-RPC error the SDK reads.
            return SessionMessage(
                mcp_types.JSONRPCError(
                    jsonrpc="2.0",
                    id=ident,
                    error=mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=why),
                )
            )
        return MCPServerError(f"the server sent a line that is not a JSON-RPC message: {exc}")
    capture.asking(message)
    return SessionMessage(message)


_HEAD_BYTES = 512
# The head of a JSON-RPC answer as servers write it: `{"jsonrpc": "2.0", "id": ID, "result"`
# (or `"error"`). Best effort: a line past the bound is never parsed whole.
_ANSWER_HEAD = re.compile(
    rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?[0-9]{1,18}|"[^"\\]{0,200}")\s*,'
    rb'\s*"(?:result|error)"\s*:'
)


def _answer_id_at_head(head: bytes) -> Any:
    """The id of the JSON-RPC answer a too-long line begins, or None."""
    match = _ANSWER_HEAD.match(head)
    if match is None:
        return None
    raw = match.group(1)
    return raw[1:-1].decode("utf-8", "replace") if raw.startswith(b'"') else int(raw)


def _loose_answer_id(line: bytes) -> Any:
    """The id of the JSON-RPC answer `line` is, read by the standard library, or None."""
    try:
        loose = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return loose.get("id") if _answer_id(loose) is not None else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[1] if len(text) > 1 else text[0] if text else type(exc).__name__).strip()[:200]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin, give the server a moment, then kill its whole group (its children too)."""
    pgid = process.pid
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(EXIT_GRACE):
        while process.returncode is None:
            await anyio.sleep(_POLL)
    for sig, grace in ((signal.SIGTERM, TERM_GRACE), (signal.SIGKILL, TERM_GRACE)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        with anyio.move_on_after(grace):
            while _group_alive(pgid):
                _ = process.returncode  # reaps the leader, which would keep the group alive
                await anyio.sleep(_POLL)
        if not _group_alive(pgid):
            break
    with anyio.move_on_after(TERM_GRACE):
        await process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                await stream.aclose()
    # asyncio keeps the subprocess transport open until it is collected, and then
    # closes it on a loop that may be gone; nothing public reaches it.
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(PermissionError, RuntimeError):
            close()


# ---------------------------------------------------------------------------
# streamable HTTP


class _TeeStream(httpx2.AsyncByteStream):
    """A response body offered to the capture, its JSON-RPC messages passed on whole.

    A JSON body is passed on once read to its end; an SSE stream event by event.
    Given the id of the request the POST carried, a body (or event) past
    `MAX_MESSAGE_BYTES`, or one the connection broke off, is not passed on: a
    JSON-RPC error for that id ends the request instead, so the SDK's task never
    fails (which would end the whole session and its caller's task). An over-long
    answer whose head names a call is noted as refused (the call was carried out).
    """

    def __init__(self, inner: Any, capture: RawCapture, sse: bool, request_id: Any) -> None:
        self._inner = inner
        self._capture = capture
        self._sse = sse
        self._request_id = request_id
        self._buffer = bytearray()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        what = "an event" if self._sse else "a response"
        try:
            async for chunk in self._inner:
                self._buffer += chunk
                if self._sse:
                    events = self._events()
                    if events:
                        yield events
                if len(self._buffer) > MAX_MESSAGE_BYTES:
                    why = f"the server sent {what} longer than {MAX_MESSAGE_BYTES} bytes"
                    self._capture.refuse(_answer_id_at_head(self._head()), why)
                    if self._request_id is None:
                        raise MCPServerError(why)
                    yield self._error(why)
                    return
        except httpx2.TransportError as exc:
            if self._request_id is None:
                raise
            # Cut off mid-answer: no answer seen, so a call's outcome stays unknown.
            yield self._error(f"the connection broke off mid-answer: {type(exc).__name__}")
            return
        if self._sse:
            self._buffer += b"\n\n"
            events = self._events()
            if events:
                yield events
        else:
            self._capture.incoming(bytes(self._buffer))
            yield bytes(self._buffer)

    def _events(self) -> bytes:
        """The complete events buffered, offered to the capture; the rest stays buffered."""
        # A "\r" at the end may be the first half of a "\r\n" still on its way.
        held = b"\r" if self._buffer.endswith(b"\r") else b""
        normal = self._buffer[: len(self._buffer) - len(held)]
        normal = normal.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *events, rest = normal.split(b"\n\n")
        self._buffer = bytearray(rest + held)
        for event in events:
            data = [
                line[5:].removeprefix(b" ")
                for line in event.split(b"\n")
                if line.startswith(b"data:")
            ]
            if data:
                self._capture.incoming(bytes(b"\n".join(data)))
        return b"".join(event + b"\n\n" for event in events)

    def _head(self) -> bytes:
        """The first bytes of the message buffered (of an event, its data)."""
        if not self._sse:
            return bytes(self._buffer[:_HEAD_BYTES])
        start = self._buffer.find(b"data:")
        if start < 0:
            return b""
        return bytes(self._buffer[start + 5 : start + 5 + _HEAD_BYTES]).removeprefix(b" ")

    def _error(self, why: str) -> bytes:
        """A JSON-RPC error for the request, as this body's kind carries it."""
        error = _rpc_error(self._request_id, why)
        return b"event: message\ndata: " + error + b"\n\n" if self._sse else error

    async def aclose(self) -> None:
        await self._inner.aclose()


def _rpc_error(ident: Any, why: str) -> bytes:
    message = {"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": why}}
    return json.dumps(message).encode("utf-8")


def _request_id(messages: list[Any]) -> Any:
    """The id of the one JSON-RPC request a POST carries, else None."""
    requests = [m for m in messages if isinstance(m, dict) and "method" in m and "id" in m]
    if len(messages) != 1 or len(requests) != 1:
        return None
    ident = requests[0]["id"]
    return ident if isinstance(ident, (str, int)) and not isinstance(ident, bool) else None


class _NoRedirects(httpx2.AsyncBaseTransport):
    """No redirect followed; a POST's failure after connecting made its request's error.

    The SDK runs each POST in a task of the session's task group: an error raised
    there ends the whole session, cancelling whoever holds it (a proxy's every
    call). So what goes wrong with a POST carrying a request (a redirect, a
    transport error once connected) is that request's JSON-RPC error instead; its
    answer was never seen, so a call's outcome stays unknown (decision 0054).
    """

    def __init__(self, capture: RawCapture) -> None:
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False)
        self._capture = capture

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        messages: list[Any] = []
        if request.method == "POST":
            body = await request.aread()
            with contextlib.suppress(JSONValueError):
                sent = parse_json(body)
                messages = sent if isinstance(sent, list) else [sent]
                for message in messages:
                    self._capture.outgoing(message)
                    self._capture.sent(message)
        ident = _request_id(messages)
        try:
            response = await self._inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
            for message in messages:  # no connection was made: nothing left
                self._capture.not_sent(message)
            calls = [m for m in messages if isinstance(m, dict) and m.get("method") == "tools/call"]
            if len(calls) != 1 or calls[0].get("id") is None:
                raise
            # A call that never left is an ordinary error of its own.
            why = f"could not be reached: {type(exc).__name__}: {exc}; the call was not sent"
            return _error_response(request, calls[0]["id"], why)
        except httpx2.TransportError as exc:
            if ident is None:
                raise
            why = f"the connection broke off: {type(exc).__name__}: {exc}"
            return _error_response(request, ident, why)
        if 300 <= response.status_code < 400:
            await response.aclose()
            why = (
                f"the server answered {response.status_code} with a redirect to "
                f"{response.headers.get('location', '?')!r}; redirects are not followed"
            )
            if ident is None:
                raise MCPServerError(why)
            return _error_response(request, ident, why)
        kind = response.headers.get("content-type", "")
        response.stream = _TeeStream(
            response.stream, self._capture, "text/event-stream" in kind, ident
        )
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _error_response(request: httpx2.Request, ident: Any, why: str) -> httpx2.Response:
    """A response the SDK reads as the JSON-RPC error `why` for the request `ident`."""
    return httpx2.Response(
        502,
        content=_rpc_error(ident, why),
        headers={"content-type": "application/json"},
        request=request,
    )


@contextlib.asynccontextmanager
async def _http(server: Server, capture: RawCapture) -> AsyncIterator[Streams]:
    assert server.url is not None
    client = httpx2.AsyncClient(
        transport=_NoRedirects(capture),
        follow_redirects=False,
        trust_env=False,
        timeout=httpx2.Timeout(30.0, read=300.0),
    )
    # The SDK's own bound on an SSE event (1 MiB) is off: `_TeeStream` keeps agentrt's.
    async with (
        client,
        streamable_http_client(server.url, http_client=client, max_sse_event_size=None) as streams,
    ):
        yield streams  # type: ignore[misc]
