"""The host's stdout for `agentrt-proxy`: a writer the proxy can leave behind (decision 0227).

The MCP SDK's `stdio_server` writes each message with `anyio.wrap_file`: a
blocking write in an AnyIO worker thread, which a cancellation waits for (the
SDK shields it) and the interpreter's exit waits for (not a daemon thread). A
host that keeps stdin open and stops reading stdout fills the pipe, and that
write blocks; a signal then ended the host's stdin (decision 0220), but the
session's end waited for the write for ever: SIGTERM and Ctrl-C did not end the
proxy.

Here the proxy hands `stdio_server` its own stdout (its `stdout` argument). Each
message is written whole, in order, by one daemon thread of its own, and the
loop awaits it; the descriptor stays blocking (its file description may be
shared: a terminal, the host's pipe). In operation nothing changes: a host that
reads slowly, or stops and reads again, gets every message whole. Once a signal
ends the session (`stop`), the proxy waits for its host only while the host takes
something: after `GIVE_UP_SECONDS` with nothing taken it says so and gives up;
what it had not sent is dropped (the calls themselves are recorded). A blocked
write cannot be taken back: the thread stays in it, writes nothing more, and the
process exits without waiting for it.

As the SDK does when it claims stdout itself, fd 1 points at stderr meanwhile (so
nothing else in the process writes on the wire), and the wire is written through
a private duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import queue
import sys
import threading
from collections.abc import Iterator

GIVE_UP_SECONDS = 3.0
CHUNK = 16384  # what the host takes is counted a chunk at a time

_log = logging.getLogger("agentrt.mcp.proxy")

_Job = tuple[bytes, "asyncio.Future[None]", asyncio.AbstractEventLoop]


class StdoutClosed(OSError):
    """The host closed its end of stdout (EPIPE, or ECONNRESET on a socket): nothing
    more reaches it. Raised by `HostStdout.write` alone (decision 0234)."""

    def __init__(self) -> None:
        super().__init__(
            "the host closed stdout: what was not sent to it is dropped; every call is recorded"
        )


@contextlib.contextmanager
def host_closed_stdout() -> Iterator[None]:
    """Say a session that ended on the host's closed stdout in one line (`StdoutClosed`).

    The SDK's stdout writer raises the write's `StdoutClosed` in its task group,
    so the session ends in an exception group: that group, holding nothing else,
    becomes `StdoutClosed`; anything else goes on as it was (a `BrokenPipeError`
    from elsewhere is not the host's stdout).
    """
    try:
        yield
    except BaseExceptionGroup as group:
        _, rest = group.split(StdoutClosed)
        if rest is not None:
            raise
        raise StdoutClosed from None


class HostStdout:
    """What `stdio_server` asks of its `stdout` (an `anyio.AsyncFile[str]`): `write`, `flush`.

    Owns `fd` from here on: its thread closes it once it has written its last
    message (never while a write of its own may still use it).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._taken = 0  # bytes the host has taken, counted by the thread
        self._stopping = False
        self._given_up = False
        self._woken: asyncio.Future[None] | None = None
        self._thread = threading.Thread(target=self._work, name="agentrt-proxy stdout", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """A signal ended the session: from here on, wait for the host only while it reads."""
        self._stopping = True
        if self._woken is not None and not self._woken.done():
            self._woken.set_result(None)

    def close(self) -> None:
        """No more messages: the thread closes the descriptor once it is done writing."""
        self._jobs.put(None)

    async def write(self, text: str) -> int:
        data = text.encode("utf-8")  # as the SDK's own text layer: strict
        if self._given_up:
            return len(text)
        loop = asyncio.get_running_loop()
        written: asyncio.Future[None] = loop.create_future()
        self._jobs.put((data, written, loop))
        taken = -1
        while not written.done():
            if not self._stopping:
                woken = self._woken = loop.create_future()
                try:
                    await asyncio.wait([written, woken], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    self._woken = None
            elif self._taken == taken:
                self._given_up = True
                _log.warning(
                    "the host stopped reading stdout (nothing taken for %g s after the "
                    "signal): what was not sent to it is dropped; every call is recorded",
                    GIVE_UP_SECONDS,
                )
                return len(text)
            else:
                taken = self._taken
                await asyncio.wait([written], timeout=GIVE_UP_SECONDS)
        try:
            written.result()  # the write's own error, as the SDK's
        except (BrokenPipeError, ConnectionResetError) as gone:  # a pipe; a socket reset
            raise StdoutClosed from gone
        return len(text)

    async def flush(self) -> None:
        """Each `write` ends once its message is written whole: nothing is held here."""

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            data, written, loop = job
            error: BaseException | None = None
            view = memoryview(data)
            try:
                while view:
                    sent = os.write(self._fd, view[:CHUNK])
                    view = view[sent:]
                    self._taken += sent
            except OSError as exc:
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(_settle, written, error)
        os.close(self._fd)


def _settle(written: asyncio.Future[None], error: BaseException | None) -> None:
    if written.done():
        return
    if error is None:
        written.set_result(None)
    else:
        written.set_exception(error)


def stdout_open() -> None:
    """Refuse a host's stdout closed when the process started (a shell's `>&-`).

    Then fd 1 is whatever the process opened first (its event loop's descriptor, its
    database): neither to write the host's messages to nor to point at stderr, as
    decision 0224 says of stdin. The interpreter says so by leaving `sys.__stdout__` unset.
    """
    if sys.__stdout__ is None:
        raise OSError("stdout is closed: agentrt-proxy answers its host on stdout")


@contextlib.contextmanager
def claimed_stdout() -> Iterator[HostStdout]:
    """The host's stdout written through a private duplicate while fd 1 points at stderr.

    So nothing else in this process (a library, a child started with the default
    stdout) writes among the host's messages; fd 1 is the host's stdout again on
    the way out.
    """
    private = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        try:
            diversion = os.dup(2)
        except OSError:
            diversion = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(diversion, 1)
        finally:
            os.close(diversion)
    except BaseException:
        os.close(private)
        raise
    try:
        out = HostStdout(private)  # its thread owns `private` once started
    except BaseException:  # no thread: fd 1 is the host's again, the duplicate closed
        with contextlib.suppress(OSError):
            os.dup2(private, 1)
        os.close(private)
        raise
    try:
        yield out
    finally:
        with contextlib.suppress(OSError):
            os.dup2(private, 1)  # still open: only the thread closes it, after `close`
        out.close()
