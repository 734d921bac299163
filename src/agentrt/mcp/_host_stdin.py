"""The host's stdin for `agentrt-proxy`, read on the event loop: a signal stops it (decision 0220).

The MCP SDK's `stdio_server` reads stdin with `anyio.wrap_file`: a blocking
`readline` in a worker thread, which a cancellation waits for (the SDK shields
it). A proxy whose host keeps stdin open and writes nothing could then not end on
a Ctrl-C or a SIGTERM until the host wrote or closed stdin. Here the proxy hands
`stdio_server` its own lines of stdin instead (its `stdin` argument), read by the
event loop: it waits for the descriptor to be readable (`loop.add_reader`), then
reads what is there. A cancelled wait simply stops waiting.

The descriptor is not made non-blocking (its file description may be shared: a
terminal, the host's pipe); a read after the loop said it is readable returns at
once, for no other reader in this process reads it: fd 0 points at the null
device meanwhile, as the SDK does when it claims stdin itself, and the host's
stdin is read through a private duplicate. A descriptor the loop cannot watch (a
regular file, the null device: reads that never wait for a writer) is read
directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator

CHUNK = 65536


class HostLines:
    """The lines of the host's stdin as text: `async for line in HostLines(fd)`.

    What `stdio_server` asks of its `stdin` (an `anyio.AsyncFile[str]`): async
    iteration over lines, each ending with its `\\n` (the last one perhaps without),
    decoded as UTF-8 with errors replaced, as the SDK decodes its own.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._eof = False
        self._watchable = True
        self._waiting: asyncio.Future[None] | None = None

    def stop(self) -> None:
        """End the lines here, as if the host had closed stdin: what is buffered is dropped.

        The SDK's server then ends its session as on the host's EOF (the calls in
        flight go on to their end).
        """
        self._eof = True
        self._buffer.clear()
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_result(None)

    def __aiter__(self) -> HostLines:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line.decode("utf-8", "replace")
            if self._eof:
                if not self._buffer:
                    raise StopAsyncIteration
                line = bytes(self._buffer)
                self._buffer.clear()
                return line.decode("utf-8", "replace")
            chunk = await self._read()  # b"" once stopped
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True

    async def _read(self) -> bytes:
        if self._watchable:
            loop = asyncio.get_running_loop()
            readable = self._waiting = loop.create_future()

            def ready() -> None:
                if not readable.done():
                    readable.set_result(None)

            try:
                loop.add_reader(self._fd, ready)
            except PermissionError:  # epoll refuses a regular file or the null device
                self._watchable = False
            else:
                try:
                    await readable
                finally:
                    self._waiting = None
                    loop.remove_reader(self._fd)
                if self._eof:  # stopped while it waited: nothing is read
                    return b""
        return os.read(self._fd, CHUNK)


def stdin_open() -> None:
    """Refuse a host's stdin closed when the process started (a shell's `<&-`).

    Then fd 0 is whatever the process opened first (its event loop's descriptor, its
    database): neither to read as the host's messages nor to point at the null device
    (decision 0224). The interpreter says so by leaving `sys.__stdin__` unset.
    """
    if sys.__stdin__ is None:
        raise OSError("stdin is closed: agentrt-proxy reads its host's messages on stdin")


@contextlib.contextmanager
def claimed_stdin() -> Iterator[int]:
    """A private duplicate of fd 0 (the host's stdin) while fd 0 points at the null device.

    So nothing else in this process (a library, a child it starts with the default
    stdin) reads the host's messages; fd 0 is the host's stdin again on the way out.
    """
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        try:
            yield private
        finally:
            os.dup2(private, 0)
    finally:
        os.close(private)
