"""The signed webhook: an ASGI app on Starlette in front of an `Approver`.

Loaded only by `agentrt.approver.webhook_app`, so that the core never imports
Starlette. Every request passes, in this order and before any route is chosen:

1. the rate limit (a token bucket per client), before anything is read;
2. the form of the three signing headers and the timestamp's window;
3. the body, read as it streams and refused past `max_body` bytes (413),
   whatever Content-Length says;
4. the timestamp's window again, by the clock after the body arrived (a body
   held back must not outlive its nonce in the cache), and the signature,
   compared in constant time;
5. the nonce, accepted once in the window.

Only then does the router see the request. Unauthenticated callers learn
nothing about routes, runs or approvals: every refusal before step 5 is a
generic 401, 413 or 429. The approver's calls are blocking SQLite: they run in
a worker thread, never on the event loop. There is no route that lists runs.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from .._canonical import MAX_DEPTH, deeper_than
from .._errors import (
    ApprovalChangedError,
    ApprovalExpiredError,
    ApprovalHashError,
    ConfigError,
    NotFoundError,
    NotPendingError,
    RunFinishedError,
    RunStateError,
    StoreBusyError,
)
from ..trace import sanitize
from ._local import PENDING_LIMIT_DEFAULT, PENDING_LIMIT_MAX, Approver, Decision
from ._local import decided_json as _decided_json
from ._local import run_outcome as _run_outcome
from ._peers import ClientKey
from ._signing import (
    MAX_BODY,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    SKEW,
    TIMESTAMP_HEADER,
    CacheFull,
    NonceCache,
    RateLimiter,
    Unauthorized,
    check_window,
    read_claim,
    secret_bytes,
    verify,
)

log = logging.getLogger("agentrt.approver.webhook")

_DIGITS = re.compile(r"[0-9]{1,18}")
_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
BUSY_RETRY_AFTER = 1
"""Seconds a client is told to wait after the database stayed busy past its timeout (503)."""


class _Json(JSONResponse):
    """JSON with every non-ASCII character escaped, so no byte of it can restyle a reader."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False).encode("ascii")


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return _Json(
        {"error": sanitize(message), "code": code},
        status_code=status,
        headers={**_HEADERS, **(headers or {})},
    )


def _refusal(exc: Exception) -> Response:
    """The response for an error the approver raised."""
    message = str(exc)
    # Subclasses before their bases: expired is a kind of not pending, finished of run state.
    if isinstance(exc, ApprovalExpiredError):
        return _error(410, "expired", message)
    if isinstance(exc, NotPendingError):
        return _error(409, "not_pending", message)
    if isinstance(exc, ApprovalChangedError):
        return _error(409, "approval_changed", message)
    if isinstance(exc, ApprovalHashError):
        return _error(409, "approval_hash", message)
    if isinstance(exc, RunFinishedError):
        return _error(409, "run_finished", message)
    if isinstance(exc, RunStateError):
        return _error(409, "run_not_waiting", message)
    if isinstance(exc, NotFoundError):
        return _error(404, "not_found", message)
    if isinstance(exc, ValueError):  # a bad request: the body, a label, a limit
        return _error(400, "bad_request", message)
    if isinstance(exc, StoreBusyError):
        # Nothing was written: the same signed decision, with a fresh nonce, can be sent again.
        log.warning("the database stayed busy past its timeout: %s", exc)
        return _error(
            503,
            "busy",
            "the database is busy; nothing was changed, try again",
            {"Retry-After": str(BUSY_RETRY_AFTER)},
        )
    log.exception("the approver failed", exc_info=exc)
    return _error(500, "internal_error", "the approver failed; see the server's log")


def _request_target(scope: Scope) -> str:
    """The path as the client sent it, percent-encoding kept, with `?query` if any."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) and raw else str(scope["path"])
    query = scope.get("query_string", b"")
    return f"{path}?{query.decode('latin-1')}" if query else path


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Parsers disagree on which of two equal keys wins: a body that repeats one is refused.
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(
            f"the body repeats a key: {sorted({k for k in keys if keys.count(k) > 1})}"
        )
    return dict(pairs)


def _json_body(body: bytes, allowed: set[str]) -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None
    # Bounded by the runtime's own depth, not by how deep this interpreter's parser goes
    # (3.13's goes past 8,000 levels, 3.11's stops near 1,000: decision 0238).
    if deeper_than(text, MAX_DEPTH):
        raise ValueError("the body is not JSON: nested too deeply")
    try:
        value = json.loads(text, object_pairs_hook=_no_repeats) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None
    except RecursionError:  # a caller already deep in its own frames
        raise ValueError("the body is not JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError("the body must be a JSON object")
    extra = sorted(set(value) - allowed)
    if extra:
        raise ValueError(
            f"unknown field(s) {', '.join(extra)}; expected {', '.join(sorted(allowed))}"
        )
    for key in ("by", "note"):
        if key in value and not isinstance(value[key], str):
            raise ValueError(f"{key} must be a string")
    if "by" not in value:
        raise ValueError("by is required: who decides")
    return value


class WebhookApp:
    """The webhook as an ASGI app. See the module docstring for what every request passes.

    `now` returns Unix seconds (the wall clock by default): it judges the
    timestamp window and refills the rate limit. The rate-limit bucket is the
    transport peer's; behind a proxy, name it in `trusted_proxies` (addresses or
    networks) and the client is read from its `X-Forwarded-For` (`_peers`).
    `client_key(scope)` replaces that rule altogether.
    """

    def __init__(
        self,
        approver: Approver,
        *,
        secret: str | bytes,
        now: Callable[[], float] | None = None,
        skew: int = SKEW,
        max_body: int = MAX_BODY,
        rate_limit: RateLimiter | None = None,
        nonces: NonceCache | None = None,
        client_key: Callable[[Scope], str] | None = None,
        trusted_proxies: Iterable[str] | None = None,
    ) -> None:
        if client_key is not None and trusted_proxies is not None:
            raise ConfigError("give client_key or trusted_proxies, not both")
        self.approver = approver
        self._secret = secret_bytes(secret)
        self.now = now or time.time
        if skew < 1 or max_body < 1:
            raise ValueError("skew and max_body must be positive")
        self.skew = skew
        self.max_body = max_body
        self.rate_limit = rate_limit if rate_limit is not None else RateLimiter()
        # (not `or`: an empty cache has no length, so it is falsy)
        self.nonces = nonces if nonces is not None else NonceCache(skew=skew)
        self.client_key = client_key or ClientKey(trusted_proxies)
        self._router = Starlette(
            routes=[
                Route("/runs/{run}/approvals", self._list, methods=["GET"]),
                Route("/runs/{run}/approvals/{approval}", self._show, methods=["GET"]),
                Route("/runs/{run}/approvals/{approval}/approve", self._approve, methods=["POST"]),
                Route("/runs/{run}/approvals/{approval}/reject", self._reject, methods=["POST"]),
                Route("/runs/{run}/cancel", self._cancel, methods=["POST"]),
            ],
            exception_handlers={HTTPException: _http_error},
        )

    def __repr__(self) -> str:
        return f"WebhookApp({self.approver!r})"  # never the secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._router(scope, receive, send)
            return
        refused, body = await self._admit(scope, receive)
        if refused is not None:
            await refused(scope, receive, send)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self._router(scope, replay, send)

    async def _admit(self, scope: Scope, receive: Receive) -> tuple[Response | None, bytes]:
        """Rate limit, signature form, window, body cap, signature, nonce: a refusal or the body."""
        now = self.now()
        wait = self.rate_limit.take(self.client_key(scope), now)
        if wait > 0:
            retry = str(max(1, math.ceil(wait)))
            return _error(429, "rate_limited", "too many requests", {"Retry-After": retry}), b""
        headers = Request(scope).headers
        try:
            claim = read_claim(
                headers.get(TIMESTAMP_HEADER),
                headers.get(NONCE_HEADER),
                headers.get(SIGNATURE_HEADER),
                now=now,
                skew=self.skew,
            )
        except Unauthorized as exc:
            log.info("refused an unsigned or stale request: %s", exc)
            return _error(401, "unauthorized", "the request is not signed as required"), b""
        declared = headers.get("content-length")
        if declared is not None:
            if not _DIGITS.fullmatch(declared):
                return _error(400, "bad_request", "Content-Length is not a number"), b""
            if int(declared) > self.max_body:
                return self._too_large(), b""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return _error(400, "bad_request", "the client went away"), b""
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return self._too_large(), b""
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        # The body may have taken its time: judge the window again, now, so that a
        # replay held back until the original's nonce left the cache is still refused.
        now = self.now()
        try:
            check_window(claim.timestamp, now=now, skew=self.skew)
            verify(self._secret, claim, scope["method"], _request_target(scope), body)
        except Unauthorized as exc:
            log.info("refused a badly signed request: %s", exc)
            return _error(401, "unauthorized", "the request is not signed as required"), b""
        try:
            fresh = self.nonces.add(claim.nonce, claim.timestamp, now, window=self.skew)
        except CacheFull:
            return _error(429, "rate_limited", "too many requests", {"Retry-After": "1"}), b""
        if not fresh:
            log.info("refused a replayed nonce")
            return _error(401, "unauthorized", "the request is not signed as required"), b""
        return None, body

    def _too_large(self) -> Response:
        return _error(413, "body_too_large", f"the body is larger than {self.max_body} bytes")

    # --- routes (signed requests only) ------------------------------------------------------

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await run_in_threadpool(fn, *args)

    async def _list(self, request: Request) -> Response:
        run_id = request.path_params["run"]
        text = request.query_params.get("limit", str(PENDING_LIMIT_DEFAULT))
        if not _DIGITS.fullmatch(text) or not 1 <= int(text) <= PENDING_LIMIT_MAX:
            return _error(400, "bad_request", f"limit must be 1 to {PENDING_LIMIT_MAX}")
        try:
            items = await self._call(self.approver.pending, run_id, int(text))
        except Exception as exc:
            return _refusal(exc)
        return _Json(
            {"run_id": run_id, "approvals": [item.to_json() for item in items]}, headers=_HEADERS
        )

    async def _show(self, request: Request) -> Response:
        run_id, approval_id = request.path_params["run"], request.path_params["approval"]
        form = request.query_params.get("format", "json")
        if form not in ("json", "text"):
            return _error(400, "bad_request", "format is json or text")
        try:
            item = await self._call(self.approver.show, run_id, approval_id)
        except Exception as exc:
            return _refusal(exc)
        if form == "text":
            return PlainTextResponse(item.text, headers=_HEADERS)
        return _Json(item.to_json(), headers=_HEADERS)

    async def _approve(self, request: Request) -> Response:
        return await self._decide(request, approve=True)

    async def _reject(self, request: Request) -> Response:
        return await self._decide(request, approve=False)

    async def _decide(self, request: Request, *, approve: bool) -> Response:
        run_id, approval_id = request.path_params["run"], request.path_params["approval"]
        try:
            fields = _json_body(await request.body(), {"hash", "by", "note"})
            shown = fields.get("hash", "")
            if not isinstance(shown, str):
                raise ValueError("hash must be a string")
            decision = Decision(run_id, approval_id, shown, fields["by"], fields.get("note", ""))
            decide = self.approver.approve if approve else self.approver.reject
            decided = await self._call(decide, decision)
        except Exception as exc:
            return _refusal(exc)
        if approve:
            return _Json(
                {
                    "approval": _decided_json(decided),
                    "run": {"id": run_id, "status": "WAITING_FOR_APPROVAL"},
                    "message": "approved; the run goes on when the program that owns it resumes it",
                },
                status_code=202,
                headers=_HEADERS,
            )
        return _Json(
            {
                "approval": _decided_json(decided),
                "run": {"id": run_id, "status": "CANCELLED", "reason": "approval_rejected"},
                "message": "rejected; the run is cancelled and the tool is not called",
            },
            headers=_HEADERS,
        )

    async def _cancel(self, request: Request) -> Response:
        run_id = request.path_params["run"]
        try:
            fields = _json_body(await request.body(), {"by", "note"})
            run = await self._call(
                self.approver.cancel, run_id, fields["by"], fields.get("note", "")
            )
        except Exception as exc:
            return _refusal(exc)
        return _Json({"run": _run_outcome(run)}, headers=_HEADERS)


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return _error(404, "not_found", "no such route")
    if status == 405:
        allow = (
            {"Allow": exc.headers["Allow"]}
            if isinstance(exc, HTTPException) and exc.headers
            else {}
        )
        return _error(405, "method_not_allowed", "this route does not take that method", allow)
    return _error(400, "bad_request", "the request cannot be served")
