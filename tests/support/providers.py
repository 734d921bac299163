"""Local fake model servers for the provider adapter tests: real HTTP on 127.0.0.1.

`FakeServer` is a `ThreadingHTTPServer` in a daemon thread. It answers each
POST with the next action of its script (the last one repeats) and records
what it was sent, so a test checks both the request an adapter put on the wire
and how the adapter read the reply. The actions play a provider well or badly:
a JSON reply, a redirect, a body cut off mid-read, a connection that hangs, a
20 MiB body declared or chunked. A hanging action waits on the server's
`release` event, set when the server closes, so no thread outlives its test.

The reply builders (`openai_completion`, `ollama_chat`, `anthropic_message`)
write bodies in the shape each provider documents for a non-streamed reply,
with the fields a real reply carries.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

MIB = 1024 * 1024

# The deadline of a test whose server hangs or stalls: long enough that the request has been
# sent before it fires even on a loaded machine. A deadline that fires before anything is sent
# is rightly "could not be reached" (transient), not a timeout that may have been served; at
# 300 ms a machine at load 8 fired it inside the SDK, before the request left.
STALL_DEADLINE = timedelta(seconds=2)
# A stalled call must end at its deadline, not at the SDK's own default of minutes.
STALL_ENDS_WITHIN = 30.0


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Outcome:
    """What the server managed to send for one request."""

    sent: int = 0
    finished: bool = False
    client_went_away: bool = False


Action = Callable[["_Handler", Outcome], None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        fake = self.server.fake
        with fake.lock:
            fake.requests.append(
                Seen(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                )
            )
            action = fake.script[0] if len(fake.script) == 1 else fake.script.pop(0)
            outcome = Outcome()
            fake.outcomes.append(outcome)
        try:
            action(self, outcome)
            self.wfile.flush()
            outcome.finished = True
        except (BrokenPipeError, ConnectionResetError):
            outcome.client_went_away = True
            self.close_connection = True

    def write(self, data: bytes, outcome: Outcome) -> None:
        self.wfile.write(data)
        outcome.sent += len(data)

    def wait(self) -> None:
        """Stall until the test is over, then drop the connection."""
        self.wfile.flush()
        self.server.fake.release.wait(30)
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeServer


class FakeServer:
    """A local server that plays a provider; use as a context manager."""

    def __init__(self, *script: Action) -> None:
        self.script: list[Action] = list(script) or [json_reply({})]
        self.requests: list[Seen] = []
        self.outcomes: list[Outcome] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        # A short poll interval: shutdown() waits up to one interval for the loop to notice.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def unused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- actions


def _head(handler: _Handler, status: int, headers: dict[str, str], outcome: Outcome) -> None:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    handler.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), outcome)


_REASONS = {
    200: "OK",
    301: "Moved Permanently",
    302: "Found",
    307: "Temporary Redirect",
    308: "Permanent Redirect",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    422: "Unprocessable Entity",
    425: "Too Early",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


def json_reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Action:
    """A complete reply; `body` is sent as is when bytes, else as JSON."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()

    def act(handler: _Handler, outcome: Outcome) -> None:
        sent = {"Content-Type": "application/json", "Content-Length": str(len(data))}
        _head(handler, status, {**sent, **(headers or {})}, outcome)
        handler.write(data, outcome)

    return act


def redirect(location: str, status: int = 307) -> Action:
    return json_reply(b"", status, {"Location": location})


def cut_off(body: bytes, declared: int, status: int = 200) -> Action:
    """Declare `declared` bytes, send `body` (fewer), then drop the connection."""

    def act(handler: _Handler, outcome: Outcome) -> None:
        headers = {"Content-Type": "application/json", "Content-Length": str(declared)}
        _head(handler, status, headers, outcome)
        handler.write(body, outcome)
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)
        handler.close_connection = True

    return act


def close_delimited(body: bytes) -> Action:
    """A body framed only by closing the connection (no length, not chunked)."""

    def act(handler: _Handler, outcome: Outcome) -> None:
        _head(handler, 200, {"Content-Type": "application/json", "Connection": "close"}, outcome)
        handler.write(body, outcome)
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)
        handler.close_connection = True

    return act


def hang() -> Action:
    """Read the request and never answer."""

    def act(handler: _Handler, outcome: Outcome) -> None:
        handler.wait()

    return act


def stall_body(status: int, first: bytes, declared: int) -> Action:
    """Send the status and the start of the body, then stall."""

    def act(handler: _Handler, outcome: Outcome) -> None:
        headers = {"Content-Type": "application/json", "Content-Length": str(declared)}
        _head(handler, status, headers, outcome)
        handler.write(first, outcome)
        handler.wait()

    return act


def huge(
    total: int = 20 * MIB,
    *,
    chunked: bool = False,
    then_stall_at: int | None = None,
    status: int = 200,
) -> Action:
    """A body of `total` bytes, declared by Content-Length or sent chunked.

    With `then_stall_at`, the server stops after that many body bytes and waits:
    a client that tried to read it all would then time out instead of refusing.
    """
    piece = b" " * (64 * 1024)

    def act(handler: _Handler, outcome: Outcome) -> None:
        headers = {"Content-Type": "application/json"}
        if chunked:
            headers["Transfer-Encoding"] = "chunked"
        else:
            headers["Content-Length"] = str(total)
        _head(handler, status, headers, outcome)
        body_sent = 0
        limit = total if then_stall_at is None else then_stall_at
        while body_sent < limit:
            chunk = piece[: min(len(piece), limit - body_sent)]
            if chunked:
                handler.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n", outcome)
            else:
                handler.write(chunk, outcome)
            body_sent += len(chunk)
        if then_stall_at is not None:
            handler.wait()
        elif chunked:
            handler.write(b"0\r\n\r\n", outcome)

    return act


# --------------------------------------------------------------------------- provider bodies


def openai_completion(
    *,
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = "stop",
    refusal: str | None = None,
    usage: dict[str, Any] | None = None,
    model: str = "gpt-4o-2024-08-06",
) -> dict[str, Any]:
    """A `chat.completion` object as OpenAI documents it."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": refusal,
        "annotations": [],
    }
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1741570283,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage
        if usage is not None
        else {
            "prompt_tokens": 1117,
            "completion_tokens": 46,
            "total_tokens": 1163,
            "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035",
    }


def openai_tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def openai_error(message: str, code: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": code,
        }
    }


def ollama_chat(
    *,
    content: str = "",
    tool_calls: list[dict[str, Any]] | None = None,
    done_reason: str | None = "stop",
    prompt_eval_count: Any = 26,
    eval_count: Any = 298,
    model: str = "llama3.2",
) -> dict[str, Any]:
    """A non-streamed `/api/chat` reply as Ollama documents it (zero counts omitted)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    reply: dict[str, Any] = {
        "model": model,
        "created_at": "2023-12-12T14:13:43.416799Z",
        "message": message,
        "done": True,
        "total_duration": 5191566416,
        "load_duration": 2154458,
        "prompt_eval_duration": 383809000,
        "eval_duration": 4799921000,
    }
    if done_reason is not None:
        reply["done_reason"] = done_reason
    if prompt_eval_count is not None:
        reply["prompt_eval_count"] = prompt_eval_count
    if eval_count is not None:
        reply["eval_count"] = eval_count
    return reply


def anthropic_message(
    *,
    content: list[dict[str, Any]] | None = None,
    stop_reason: str = "end_turn",
    usage: dict[str, Any] | None = None,
    model: str = "claude-sonnet-4-5-20250929",
) -> dict[str, Any]:
    """A Messages API `message` object as Anthropic documents it."""
    return {
        "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content if content is not None else [{"type": "text", "text": "Hi!"}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage
        if usage is not None
        else {
            "input_tokens": 2095,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 503,
            "service_tier": "standard",
        },
    }


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }
