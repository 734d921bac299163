"""The console's ASGI app (Starlette): routes, the security checks, and the calls that decide.

Reads go to one read-only `Store`, opened on first use; each decision opens
a writable store of its own for its one transaction and closes it. Every
store call runs on a worker thread (`run_in_threadpool`): SQLite is blocking,
the event loop never waits on it.

Decisions go through `agentrt.approve` / `agentrt.reject` / `agentrt.cancel`
with `shown_hash` set to the hash the page displayed, so a page gone stale
can only be refused (409), never decide a request it did not show. A decision
without a hash is refused before the store is touched.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import parse_qs, quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import _operator as operator
from .._errors import (
    AgentrtError,
    ApprovalChangedError,
    ApprovalExpiredError,
    ApprovalHashError,
    NotFoundError,
    NotPendingError,
    RunStateError,
    StoreError,
)
from .._records import RunStatus
from .._store import Store, open_existing
from ..trace import sanitize
from . import _data, _pages
from ._security import HEADERS, ConsoleConfig

BODY_LIMIT = 32 * 1024
"""Bytes a form may carry: the longest note (`NOTE_LIMIT` characters, 12 bytes each at most
percent-encoded) and two tokens fit."""
PAGE = 50


class _Deciding:
    """The decisions this console is committing, on worker threads.

    `stopped` (the console's server has stopped) waits for each decision begun and refuses
    any after it: uvicorn gives up on a request after its graceful shutdown, but not on the
    worker thread committing its decision, which may commit later. Whatever the console
    says last is said once no decision can still be recorded (decision 0212)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0
        self._stopped = False

    @contextmanager
    def deciding(self) -> Iterator[None]:
        """A decision being made; refused (`_Refused`, 503) once the console stopped."""
        with self._changed:
            if self._stopped:
                raise _Refused(503, "Not decided", "Nothing was decided: the console stopped.")
            self._count += 1
        try:
            yield
        finally:
            with self._changed:
                self._count -= 1
                self._changed.notify_all()

    def stopped(self, waiting: Callable[[int], None] | None = None) -> None:
        """No decision begins from now; returns once each one begun has ended. `waiting`, if
        given, is told how many are still being committed, once, before waiting for them."""
        with self._changed:
            told, self._stopped = self._stopped, True
            if not told and self._count and waiting is not None:
                waiting(self._count)
            self._changed.wait_for(lambda: self._count == 0)


class _Reader:
    """The one read-only store, opened on first use, shared by the worker threads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._store: Store | None = None
        self.chain = _data.ChainStatus()

    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = open_existing(self.path, read_only=True)
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status)


class _Refused(Exception):
    """A request the console answers with a page saying why (status, title, message)."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


STOPPING = "The console is stopping"
STOPPED_COMMITTING = (
    "The console stopped while recording this decision: it may have been recorded, or not. "
    "Open the run's page in a running console (start it again if it is not) and reload it to "
    "see whether the decision was recorded, before deciding again."
)
"""Said of a decision whose request uvicorn gave up on while its commit was begun (decision
0214): the worker thread committing it goes on, so whether it is recorded is not known."""
STOPPED_READING = (
    "Nothing was decided: the console stopped before this decision was made. Open the run's "
    "page in a running console (start it again if it is not) and decide again."
)
STOPPED_OTHER = (
    "The console stopped before it answered; nothing was changed. Reload the page in a "
    "running console (start it again if it is not)."
)


def _is_api(path: str) -> bool:
    """A route of the JSON API: every answer to it, a refusal included, is JSON."""
    return path.startswith("/api/")


_STAGE = "agentrt.console.stage"
"""The scope key of a request's `_Stage`: how far a decision got, for `_Stopping`."""


class _Stage:
    """How far a request's decision got: `None` (no decision), "reading" (its form), then
    "committing" (handed to the worker thread that commits it), and the run it is about."""

    def __init__(self) -> None:
        self.step: str | None = None
        self.run_id = ""


def _stage(request: Request, step: str) -> None:
    stage = request.scope.get(_STAGE)
    if isinstance(stage, _Stage):
        stage.step = step
        stage.run_id = request.path_params.get("run_id", "")


def _retrieved(task: asyncio.Future[None]) -> None:
    """A request's task given up on: what it raised (its cancel) was answered already."""
    if not task.cancelled():
        task.exception()


class _Stopping:
    """The outermost of the console's own layers: a request uvicorn gives up on (cancels) as
    the console stops, its graceful shutdown over, is answered 503 saying so, not uvicorn's
    500 "Internal Server Error" (decision 0214). A decision handed to its worker thread may
    still be committed there (decision 0212 waits for it): said as perhaps recorded, never
    "nothing was changed"."""

    def __init__(self, app: ASGIApp, config: ConsoleConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stage = _Stage()
        scope[_STAGE] = stage
        started = answered = False

        async def sending(message: Message) -> None:
            nonlocal started
            if answered:  # the console said it is stopping: nothing more goes out
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        # The request runs as a task of its own: uvicorn's cancel reaches this one at once,
        # whatever the request waits on (a worker thread it cannot leave, for one).
        inner = asyncio.ensure_future(self.app(scope, receive, sending))
        inner.add_done_callback(_retrieved)
        try:
            await asyncio.wait({inner})
        except asyncio.CancelledError:
            inner.cancel()
            if started:  # its answer began: it cannot be another one
                raise
            answered = True
            await self._stopping(stage, str(scope.get("path", "")))(scope, receive, send)
            return
        inner.result()

    def _stopping(self, stage: _Stage, path: str) -> Response:
        response: Response
        if _is_api(path):
            response = JSONResponse({"error": STOPPED_OTHER}, 503)
        elif stage.step is None:
            response = _html(_pages.message_page(STOPPING, STOPPED_OTHER, None), 503)
        else:
            message = STOPPED_COMMITTING if stage.step == "committing" else STOPPED_READING
            back = f"/runs/{quote(stage.run_id, safe='')}"
            page = _pages.message_page(STOPPING, message, self.config, back=back)
            response = _html(page, 503)
        for name, value in HEADERS.items():
            response.headers[name] = value
        response.headers["connection"] = "close"
        return response


class _Guard(BaseHTTPMiddleware):
    """Host (on loopback), token cookie, and Origin for state changes; headers on every answer."""

    def __init__(self, app: Any, config: ConsoleConfig) -> None:
        super().__init__(app)
        self.config = config

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await self._check(request, call_next)
        for name, value in HEADERS.items():
            response.headers[name] = value
        return response

    async def _check(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        config = self.config
        host = request.headers.get("host")
        if not config.host_ok(host):
            return _html(
                _pages.message_page(
                    "Wrong address",
                    "This console answers only when reached at its own address "
                    f"(http://127.0.0.1:{config.port}/ or http://localhost:{config.port}/); "
                    "a request naming another host is refused.",
                    None,
                ),
                400,
            )
        path = request.url.path
        public = path == "/login" or path.startswith("/static/")
        if not public and not config.cookie_matches(request.cookies.get(config.cookie_name)):
            if _is_api(path):
                return JSONResponse({"error": "token needed", "code": "unauthorized"}, 401)
            return _html(
                _pages.login_page(config, "Open the link the console printed when it started."),
                401,
            )
        if request.method not in ("GET", "HEAD") and not config.origin_ok(
            request.headers.get("origin"), host
        ):
            return _html(
                _pages.message_page(
                    "Refused",
                    "This request did not come from a page of this console (its Origin "
                    "header is missing or names another site), so nothing was changed.",
                    config,
                ),
                403,
            )
        return await call_next(request)


def _check_note(note: str) -> None:
    """A posted note as the record can keep it; else a 400 saying why."""
    if len(note) > _pages.NOTE_LIMIT:
        raise _Refused(400, "Bad request", "The note is too long.")
    problem = operator.storable_problem(note)
    if problem:
        raise _Refused(400, "Bad request", f"The note cannot be recorded: {problem}.")


async def _form(request: Request, config: ConsoleConfig, *, csrf: bool = True) -> dict[str, str]:
    """The posted form, at most BODY_LIMIT bytes; the CSRF token checked unless told not to."""
    declared = request.headers.get("content-length")
    if declared is not None and (
        not (declared.isascii() and declared.isdigit()) or int(declared) > BODY_LIMIT
    ):
        raise _Refused(413, "Too large", "The form was larger than the console accepts.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > BODY_LIMIT:
            raise _Refused(413, "Too large", "The form was larger than the console accepts.")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise _Refused(400, "Bad request", "The console accepts only its own forms.")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused(400, "Bad request", "The form was not UTF-8.") from None
    fields = {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}
    if csrf and not config.csrf_matches(fields.get("csrf", "")):
        raise _Refused(
            403,
            "Refused",
            "This form did not carry this console's token (a page from an earlier start of "
            "the console, or from elsewhere), so nothing was changed. Reload the page and "
            "decide again.",
        )
    return fields


def _perhaps(error: AgentrtError) -> _Refused | None:
    """The answer to a decision whose commit failed leaving unknown whether it was made
    (`StoreError.commit_unknown`): never "nothing was decided"."""
    if not (isinstance(error, StoreError) and error.commit_unknown):
        return None
    return _Refused(
        503,
        "Perhaps decided",
        f"Whether this was recorded is unknown: {sanitize(str(error))}. The run's page, "
        "opened again, shows what the record holds.",
    )


def _decision_refusal(error: AgentrtError) -> _Refused:
    perhaps = _perhaps(error)
    if perhaps is not None:
        return perhaps
    said = sanitize(str(error))
    if isinstance(error, ApprovalExpiredError) and error.cancelled_by:
        # A cancel expired the request (decision 0161): the run is over, not the time.
        return _Refused(
            410, "The run was cancelled", f"Nothing was decided: the run was cancelled. ({said})"
        )
    if isinstance(error, ApprovalExpiredError):
        return _Refused(410, "Expired", f"Nothing was decided: the request expired. ({said})")
    if isinstance(error, NotPendingError):
        return _Refused(
            409,
            "Already decided",
            f"Nothing was decided: {said}. The run's page shows what it waits on now.",
        )
    if isinstance(error, ApprovalChangedError | RunStateError):
        return _Refused(
            409,
            "Conflict: the request changed",
            "Nothing was decided. The request this page showed is no longer the one "
            f"waiting: it was decided, or the run moved on and asks again. ({said})",
        )
    if isinstance(error, ApprovalHashError):
        return _Refused(
            409, "Refused", f"Nothing was decided: the stored request fails its hash. ({said})"
        )
    if isinstance(error, NotFoundError):
        return _Refused(404, "Not found", said)
    return _Refused(503, "Not decided", f"Nothing was decided: {said}")


def create_app(
    config: ConsoleConfig, *, recorded: Callable[[str, bool], None] | None = None
) -> Starlette:
    """The console for `config.db_path`; it opens the database on first use.

    `recorded`, if given, is told each decision this console committed, in one sentence
    ("approval A of run R was approved by B"), with True, on the worker thread that committed
    it; and each whose commit failed leaving unknown whether it was made ("approval A of run R
    may have been approved by B"), with False: `agentrt console` says them if its last line
    cannot be written (decision 0205). Once its server stopped,
    `app.state.deciding.stopped()` waits for the decisions still being committed (and
    refuses any after): `recorded` has then been told all it will be."""
    reader = _Reader(config.db_path)
    deciding = _Deciding()

    def said(sentence: str, *, made: bool) -> None:
        if recorded is not None:
            recorded(sentence, made)

    async def read(fn: Callable[..., Any], *args: Any) -> Any:
        def call() -> Any:
            return fn(reader.store(), *args)

        try:
            return await run_in_threadpool(call)
        except NotFoundError as e:
            raise _Refused(404, "Not found", sanitize(str(e))) from e
        except AgentrtError as e:
            raise _Refused(503, "Cannot read the database", sanitize(str(e))) from e

    def answer(handler: Callable[[Request], Awaitable[Response]]) -> Callable[..., Any]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except _Refused as r:
                if _is_api(request.url.path):
                    return JSONResponse({"error": r.message}, r.status)
                back = "/"
                if "run_id" in request.path_params:
                    back = f"/runs/{quote(request.path_params['run_id'], safe='')}"
                return _html(_pages.message_page(r.title, r.message, config, back=back), r.status)

        return endpoint

    async def index(request: Request) -> Response:
        status = request.query_params.get("status") or None
        if status is not None and status not in {s.value for s in RunStatus}:
            raise _Refused(400, "Bad request", "No such status.")
        offset_text = request.query_params.get("offset", "0")
        # ASCII digits only: `isdigit` also says yes to "²" or "①", which int() refuses.
        if not (offset_text.isascii() and offset_text.isdigit()) or len(offset_text) > 12:
            raise _Refused(400, "Bad request", "The offset must be a whole number.")
        data = await read(
            lambda s: _data.index_data(s, status=status, offset=int(offset_text), limit=PAGE)
        )
        return _html(_pages.index_page(data, config))

    async def index_state(request: Request) -> Response:
        version = await read(_data.index_version)
        return JSONResponse({"version": version})

    async def run_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        data = await read(lambda s: _data.run_data(s, run_id, reader.chain))
        return _html(_pages.run_page(data, config))

    async def run_state(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        return JSONResponse(await read(_data.run_state, run_id))

    def decider(approve: bool) -> Callable[[Request], Awaitable[Response]]:
        async def decide(request: Request) -> Response:
            run_id = request.path_params["run_id"]
            approval_id = request.path_params["approval_id"]
            _stage(request, "reading")
            fields = await _form(request, config)
            shown_hash = fields.get("hash", "")
            note = fields.get("note", "")
            if not shown_hash:
                raise _decision_refusal(
                    ApprovalChangedError("a decision must carry the hash of what was shown")
                )
            _check_note(note)
            fn = operator.approve if approve else operator.reject

            def call() -> None:
                def decided(was: str) -> str:  # not a format string: ids may hold a '%'
                    how = "approved" if approve else "rejected"
                    return (
                        f"approval {sanitize(approval_id)} of run {sanitize(run_id)} {was} "
                        f"{how} by {sanitize(config.by)}"
                    )

                with deciding.deciding(), open_existing(config.db_path) as store:
                    try:
                        fn(store, run_id, approval_id, config.by, note, shown_hash=shown_hash)
                    except StoreError as e:
                        if e.commit_unknown:
                            said(decided("may have been"), made=False)
                        raise
                    said(decided("was"), made=True)

            _stage(request, "committing")
            try:
                await run_in_threadpool(call)
            except AgentrtError as e:
                if isinstance(e, AgentrtError):
                    raise _decision_refusal(e) from e
                raise _Refused(503, "Not decided", sanitize(str(e))) from e
            return RedirectResponse(f"/runs/{quote(run_id, safe='')}", 303)

        return decide

    async def cancel(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        _stage(request, "reading")
        fields = await _form(request, config)
        note = fields.get("note", "")
        _check_note(note)

        def call() -> None:
            def cancelled(was: str) -> str:  # not a format string: ids may hold a '%'
                return f"run {sanitize(run_id)} {was} cancelled by {sanitize(config.by)}"

            with deciding.deciding(), open_existing(config.db_path) as store:
                try:
                    operator.cancel(store, run_id, config.by, note)
                except StoreError as e:
                    if e.commit_unknown:
                        said(cancelled("may have been"), made=False)
                    raise
                said(cancelled("was"), made=True)

        _stage(request, "committing")
        try:
            await run_in_threadpool(call)
        except AgentrtError as e:
            if isinstance(e, RunStateError):
                raise _Refused(409, "Conflict", sanitize(str(e))) from e
            if isinstance(e, NotFoundError):
                raise _Refused(404, "Not found", sanitize(str(e))) from e
            raise (_perhaps(e) or _Refused(503, "Not cancelled", sanitize(str(e)))) from e
        return RedirectResponse(f"/runs/{quote(run_id, safe='')}", 303)

    def logged_in() -> Response:
        response = RedirectResponse("/", 303)
        if config.token is not None:
            response.set_cookie(
                config.cookie_name,
                config.session_value(),
                httponly=True,
                samesite="strict",
                path="/",
            )
        return response

    async def login(request: Request) -> Response:
        if config.token is None:
            return RedirectResponse("/", 303)
        if request.method == "POST":
            given = (await _form(request, config, csrf=False)).get("token", "")
        else:
            given = request.query_params.get("token", "")
        if given and config.token_matches(given):
            return logged_in()
        message = "That token is not this console's." if given else "No token was given."
        return _html(_pages.login_page(config, message), 401)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await run_in_threadpool(reader.close)

    routes = [
        Route("/", answer(index)),
        Route("/api/state", answer(index_state)),
        Route("/login", answer(login), methods=["GET", "POST"]),
        Route("/runs/{run_id}", answer(run_page)),
        Route("/api/runs/{run_id}/state", answer(run_state)),
        Route(
            "/runs/{run_id}/approvals/{approval_id}/approve",
            answer(decider(True)),
            methods=["POST"],
        ),
        Route(
            "/runs/{run_id}/approvals/{approval_id}/reject",
            answer(decider(False)),
            methods=["POST"],
        ),
        Route("/runs/{run_id}/cancel", answer(cancel), methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("agentrt.console", "static")]), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(_Stopping, config=config), Middleware(_Guard, config=config)],
        lifespan=lifespan,
    )
    app.state.reader = reader
    app.state.deciding = deciding
    return app


__all__ = ["BODY_LIMIT", "create_app"]
