"""Serving the console: bind first, then say where, then run uvicorn until Ctrl-C.

The socket is bound before anything is printed, so the address printed is the
one in use (`--port 0` picks a free port). A token given with `--token` or
`AGENTRT_CONSOLE_TOKEN` is never printed back; a generated one (binding
elsewhere than loopback with no token given) is printed once, inside the login
link, because the person starting the console needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TextIO

import uvicorn

from .._db_url import shown_db
from ._app import create_app
from ._security import ConsoleConfig, is_loopback, new_token

TOKEN_ENV = "AGENTRT_CONSOLE_TOKEN"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, reuse_port=False)


def serve(
    db_path: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    by: str,
    token: str | None = None,
    stdout: TextIO | None = None,
    recorded: Callable[[str, bool], None] | None = None,
) -> int:
    """Serve the console for `db_path` until interrupted; returns the exit status.

    `recorded` is told each decision the console committed, in one sentence, and each whose
    commit's outcome is unknown (`create_app`); all of them before the last line."""
    out = stdout or sys.stdout
    token = token or os.environ.get(TOKEN_ENV) or None
    generated = False
    if token is None and not is_loopback(host):
        token, generated = new_token(), True
    # Checked before binding: a bad token or a refused host binds nothing.
    ConsoleConfig(db_path=db_path, by=by, host=host, port=port or 1, token=token)
    try:
        sock = _bind(host, port)
    except OSError as e:
        why = os.strerror(e.errno) if e.errno else str(e)
        raise OSError(
            f"cannot listen on {host}:{port}: {why}; choose another --port (0 picks a free one)"
        ) from e
    config = ConsoleConfig(
        db_path=db_path, by=by, host=host, port=sock.getsockname()[1], token=token
    )
    app = create_app(config, recorded=recorded)
    out.write(f"agentrt console: serving {shown_db(db_path)}, deciding as {by}\n")
    if token is None:
        out.write(f"  open {config.link(with_token=False)}\n")
    elif generated:
        out.write(f"  open {config.link(with_token=True)}\n")
        out.write("  (a token was generated for this start: the link logs a browser in once)\n")
    else:
        out.write(f"  open {config.link(with_token=False)}\n")
    out.write("  Ctrl-C stops it.\n")
    out.flush()
    server = _Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            # No lifespan task: a second Ctrl-C (uvicorn's force exit) skips its shutdown and
            # leaves it to be cancelled, which Starlette prints as a traceback; the read
            # store is closed by `_stop` instead (decision 0226).
            lifespan="off",
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=2,
        )
    )
    try:
        with _sigterm_stops():
            server.run(sockets=[sock])
    except (KeyboardInterrupt, _Terminated):  # Ctrl-C (or SIGTERM) is how it is stopped
        pass
    finally:
        _stop(sock, app.state.deciding.stopped, app.state.reader.close)
    out.write("agentrt console: stopped\n")
    out.flush()
    return 0


class _Server(uvicorn.Server):
    """uvicorn's server, SIGTERM and SIGINT left ignored while it serves where its caller
    ignores them (decision 0233; SIGINT too: a shell's `&`): uvicorn gives both its own
    handler whatever they were, and the signal then stopped a console its caller meant to
    keep. Put back after its own, from the main thread (where uvicorn puts them): the kernel
    drops the signal, as before.

    A second Ctrl-C (uvicorn's forced exit) cancels the requests still running at once
    (decision 0238): uvicorn then awaits `asyncio.Server.wait_closed`, which since Python
    3.12 waits for every connection to end, so a page waiting on the database held the
    console until the graceful shutdown's timeout. Cancelled, each is answered as the end
    of the loop answered it before 3.12 (decision 0214), and its connection ends."""

    _loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self.force_exit and self._loop is not None:
            # A signal handler: the cancels are made on the loop, between its callbacks.
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._cancel_requests)

    def _cancel_requests(self) -> None:
        for task in list(self.server_state.tasks):
            task.cancel()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        ignored = [s for s in _STOPPING if signal.getsignal(s) == signal.SIG_IGN]
        with super().capture_signals():
            if threading.current_thread() is threading.main_thread():
                for each in ignored:
                    signal.signal(each, signal.SIG_IGN)
            yield


_STOPPING = (signal.SIGTERM, signal.SIGINT)


class _Terminated(BaseException):
    """SIGTERM, once uvicorn has stopped: raised where it stops, as Ctrl-C's `KeyboardInterrupt`
    is (a `BaseException`, as that one)."""


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[None]:
    """SIGTERM stops the console as Ctrl-C does (decision 0229). uvicorn hears it while it
    serves and, once stopped, raises it again under the handler it found: left the default
    one, the process ended there, before the answers uvicorn's cancel had begun (decision
    0214) went out, and without the wait for the decisions still committing (decision
    0212). Only where SIGTERM has its default action, from the main thread; the default is
    put back for the wait after the stop, which a SIGTERM then ends (decision 0226)."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
    ):
        yield
        return

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _stop(
    sock: socket.socket,
    decided: Callable[[Callable[[int], None]], None],
    close_reader: Callable[[], None],
) -> None:
    """The console's server has stopped: close, and wait for the decisions still committing
    (`decided`, `_Deciding.stopped`).

    A decision uvicorn gave up on may still be committing on its worker thread: the last
    line waits for it, so that what it says (or, lost, what `recorded` was told) is what the
    console recorded (decision 0212). A Ctrl-C meanwhile does not cut the wait short: the
    process could not end before that thread anyway (it is not a daemon), and the decision
    would then be recorded after an "interrupted" that does not name it. The wait is the
    commit's, bounded by the store's busy timeout (decision 0226); a SIGTERM ends it, and
    the process, as the sentence on stderr says (decision 0229)."""

    def waiting(count: int) -> None:
        what = "the decision being recorded has" if count == 1 else f"the {count} decisions "
        if count != 1:
            what += "being recorded have"
        which = "the decision" if count == 1 else "each decision"
        err = sys.stderr  # None when started with none (the command line puts devnull there)
        if err is None:
            return
        # `kill` ends the wait only where SIGTERM has its default action (its caller may
        # ignore it, decision 0233): said only then.
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            ends = f"; `kill {os.getpid()}` does, {which} then recorded or not"
        else:
            ends = ""
        with contextlib.suppress(OSError, ValueError):  # a stderr gone: wait all the same
            err.write(
                f"agentrt console: stopping once {what} ended (Ctrl-C does not cut this "
                f"short{ends})\n"
            )
            err.flush()

    while True:
        try:
            sock.close()
            decided(waiting)
            close_reader()
            return
        except KeyboardInterrupt:  # a Ctrl-C while waiting: the wait goes on (see above)
            continue


__all__ = ["TOKEN_ENV", "serve"]
