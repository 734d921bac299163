"""`agentrt-proxy` stopped by a signal while its host keeps its stdin open (decision 0220).

A host that neither writes nor closes the proxy's stdin (an operator trying the
proxy in a terminal, a host that stops it with SIGINT or SIGTERM) must not keep it
waiting: the SDK's `stdio_server` read stdin in a worker thread the cancellation
waited for, so neither one Ctrl-C nor two ended it. Each test starts the real
proxy (`tests/proxy_child.py`, the command's own `main`) in front of the real shop
server, its stdin a pipe this test holds open, answers nothing after the
handshake, and sends the signal. The bound on each wait is a hang guard, not a race.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support import forkserver
from tests.support.mcp_proxy import PRELOAD, PROXY_CHILD, Shop, agentrt, write_owner_only

from agentrt import open_existing

PROXY_SIGINT_ELSEWHERE = Path(__file__).parent / "proxy_sigint_elsewhere.py"
HANG_GUARD = 30.0

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test-host", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class Proxy:
    """A real proxy process whose stdin and stdout are this test's pipes."""

    def __init__(self, argv: list[str], root: Path, stdout: tuple[int, int] | None = None) -> None:
        """`stdout`: the host's end and the proxy's (both owned from here), else a pipe."""
        stdin_r, self.stdin = os.pipe()
        self.stdout, stdout_w = stdout or os.pipe()
        self._err = tempfile.TemporaryFile(dir=root)  # noqa: SIM115 - closed in `end`
        try:
            self.child = forkserver.server(*PRELOAD).spawn(
                argv, stdin=stdin_r, stdout=stdout_w, stderr=self._err.fileno()
            )
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        self._buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        os.write(self.stdin, (json.dumps(message) + "\n").encode())

    def line(self) -> dict[str, Any]:
        """The next line the proxy writes on stdout (within the hang guard)."""
        deadline = time.monotonic() + HANG_GUARD
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.stdout], [], [], max(left, 0))
            assert ready, "the proxy wrote no line in time"
            chunk = os.read(self.stdout, 65536)
            assert chunk, "the proxy closed its stdout"
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        said: dict[str, Any] = json.loads(line)
        return said

    def handshake(self) -> None:
        self.send(INITIALIZE)
        answer = self.line()
        assert answer["id"] == 1 and "result" in answer, answer
        self.send(INITIALIZED)

    def until_logged(self, line: str) -> None:
        """Wait (within the hang guard) until the proxy has logged `line` on stderr."""
        deadline = time.monotonic() + HANG_GUARD
        while True:
            self._err.seek(0)
            if line in self._err.read().decode("utf-8", "replace").splitlines():
                return
            assert time.monotonic() < deadline and self.child.poll() is None, line
            time.sleep(0.02)

    def stderr(self) -> str:
        """What it has written on stderr so far."""
        self._err.seek(0)
        return self._err.read().decode("utf-8", "replace")

    def close_stdin(self) -> None:
        os.close(self.stdin)
        self.stdin = -1

    def ended(self) -> tuple[int, bytes, str]:
        """Its exit status, the rest of its stdout, its stderr: stdin still open."""
        code = self.child.wait(HANG_GUARD)
        rest = self._buffer
        while chunk := os.read(self.stdout, 65536):
            rest += chunk
        self._err.seek(0)
        return code, rest, self._err.read().decode("utf-8", "replace")

    def end(self) -> None:
        if self.child.poll() is None:
            self.child.kill()
            self.child.wait(HANG_GUARD)
        for fd in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._err.close()


@contextlib.contextmanager
def proxy(shop: Shop, *, script: Path = PROXY_CHILD) -> Iterator[Proxy]:
    args = ["--config", str(shop.config)]
    if script == PROXY_CHILD:
        args = [str(shop.clock_file), *args]
    started = Proxy([sys.executable, str(script), *args], shop.root)
    try:
        yield started
    finally:
        started.end()


def logged(stderr: str) -> list[str]:
    """What the proxy logged, less the lines naming each tool it registered."""
    return [
        line
        for line in stderr.splitlines()
        if not line.startswith("agentrt-proxy: server shop: registered ")
    ]


def _until_its_effect(shop: Shop, running: Proxy) -> None:
    """Returns once the held `send` made its effect (the proxy still running)."""
    deadline = time.monotonic() + HANG_GUARD
    while not shop.effects():
        assert time.monotonic() < deadline and running.child.poll() is None
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_a_signal_ends_the_proxy_whose_host_keeps_stdin_open(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """After the handshake the host writes nothing and keeps stdin open: SIGINT ends the
    proxy with 130 (its Ctrl-C), SIGTERM with 143 (128 + 15), nothing more on stdout
    than the handshake's answer, nothing logged but the tools it registered. Before,
    neither ended it until the host wrote or closed stdin."""
    shop = Shop(tmp_path)
    with proxy(shop) as running:
        running.handshake()
        running.child.send_signal(sig)
        ended, rest, stderr = running.ended()
    assert (ended, rest, logged(stderr)) == (code, b"", []), stderr


def test_a_second_ctrl_c_right_after_the_first_still_ends_the_proxy(tmp_path: Path) -> None:
    """Two Ctrl-C back to back (an operator pressing it again): 130, nothing on stdout.
    The second one, heard while the first one's end runs, used to leave the process
    waiting at the interpreter's exit for an AnyIO worker thread nobody stopped (the
    first one's `KeyboardInterrupt` was raised out of the work's task, so `asyncio.run`'s
    teardown for the second one never ran the callbacks that stop those threads)."""
    shop = Shop(tmp_path)
    with proxy(shop) as running:
        running.handshake()
        running.child.send_signal(signal.SIGINT)
        running.child.send_signal(signal.SIGINT)
        ended, rest, stderr = running.ended()
    assert (ended, rest) == (130, b""), stderr


def test_a_ctrl_c_taken_by_another_thread_ends_the_serving_proxy(tmp_path: Path) -> None:
    """Only a thread of the proxy's own (not the main one, which waits in `select`) can
    take the SIGINT (`tests/proxy_sigint_elsewhere.py`, decision 0215): the proxy,
    serving a host that keeps stdin open, still ends at once, 130."""
    shop = Shop(tmp_path)
    with proxy(shop, script=PROXY_SIGINT_ELSEWHERE) as running:
        running.handshake()
        running.child.send_signal(signal.SIGINT)
        ended, rest, stderr = running.ended()
    assert (ended, rest, logged(stderr)) == (130, b"", []), stderr


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_a_call_in_flight_when_the_signal_comes_goes_on_to_its_end_and_is_recorded(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """A `send` the shop has carried out but not yet answered when the signal comes:
    the proxy stops reading its host, lets the call end, records it, then exits. The
    run is completed with the tool's result; the effect happened once; the host never
    gets no result, only the SDK's JSON-RPC error for a request its session closed
    under (what a host that closes stdin is sent too): it says nothing of the call's
    outcome, and an identical call later meets the recorded run."""
    shop = Shop(tmp_path)
    hold = shop.folder / "hold"
    hold.touch()
    with proxy(shop) as running:
        running.handshake()
        running.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "shop_send", "arguments": {"to": "ann", "text": "hi"}},
            }
        )
        _until_its_effect(shop, running)
        running.child.send_signal(sig)
        with pytest.raises(TimeoutError):  # it waits for the call, not for its host
            select_or_timeout(running, 0.5)
        hold.unlink()
        ended, rest, stderr = running.ended()
    closed = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32000, "message": "Connection closed"}}
    assert (ended, [json.loads(line) for line in rest.splitlines()]) == (code, [closed]), stderr
    assert "a signal ended the session; 1 call(s) go on to their end" in stderr
    assert shop.effects() == [{"tool": "send", "to": "ann", "text": "hi"}]
    store = open_existing(shop.db, read_only=True)
    try:
        (run,) = store.list_runs()
        assert run.status == "COMPLETED", run
    finally:
        store.close()


def select_or_timeout(running: Proxy, seconds: float) -> None:
    """Raise `TimeoutError` if the proxy is still running `seconds` on."""
    try:
        running.child.wait(seconds)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError from exc


def test_a_proxy_started_with_its_stdin_closed_says_so_and_exits_1(tmp_path: Path) -> None:
    """A host that starts the proxy with fd 0 closed (a shell's `<&-`): fd 0 is then the
    first descriptor the proxy opens (its event loop's), which the proxy must neither read
    as its host's messages nor point at the null device. It says stdin is closed, before
    starting any server, and exits 1, nothing on stdout. Before, it dup'd that descriptor and
    exited 1 on "[Errno 22] Invalid argument" (epoll refusing to watch itself)."""
    shop = Shop(tmp_path)
    command = 'exec "$0" "$1" "$2" --config "$3" <&-'
    args = [str(PROXY_CHILD), str(shop.clock_file), str(shop.config)]
    done = subprocess.run(
        ["/bin/sh", "-c", command, sys.executable, *args],
        capture_output=True,
        timeout=HANG_GUARD,
        check=False,
    )
    said = done.stderr.decode("utf-8", "replace")
    assert (done.returncode, done.stdout) == (1, b""), said
    assert said.splitlines() == [
        "agentrt-proxy: stdin is closed: agentrt-proxy reads its host's messages on stdin"
    ]


def call(request_id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def until_stdout_full(running: Proxy) -> int:
    """Wait (within the hang guard) until the proxy's stdout pipe holds all it can: the
    proxy's write of what is left blocks there, the host taking nothing. Its size."""
    size = fcntl.fcntl(running.stdout, fcntl.F_GETPIPE_SZ)
    deadline = time.monotonic() + HANG_GUARD
    while True:
        held = bytearray(4)
        fcntl.ioctl(running.stdout, termios.FIONREAD, held)
        if int.from_bytes(held, sys.byteorder) == size:
            return size
        assert time.monotonic() < deadline and running.child.poll() is None, "never filled"
        time.sleep(0.02)


GONE_ON = "agentrt-proxy: a signal ended the session; 1 call(s) go on to their end"
SDK_GAVE_UP = (
    "agentrt-proxy: shutdown error response for request 3 gave up: transport write blocked"
)
LONG = "y" * (256 * 1024)  # the shop's `long` receipt: more than the pipe holds


def long_answers(shop: Shop) -> None:
    """The shop's `receipt` answers `LONG`, which the proxy passes on whole."""
    (shop.folder / "answer").write_text("long")
    config = json.loads(shop.config.read_text())
    config["servers"]["shop"]["max_content_bytes"] = 1024 * 1024
    write_owner_only(shop.config, config)


def _full_with_a_call_held(shop: Shop, running: Proxy, hold: Path) -> int:
    """The host's stdout full with a 256 KiB answer it does not read, and a second call
    (`send`) made and held in flight (its effect happened, its answer not yet given).
    Returns the pipe's size."""
    running.handshake()
    running.send(call(2, "shop_receipt", order="o-1"))
    size = until_stdout_full(running)
    hold.touch()
    running.send(call(3, "shop_send", to="ann", text="hi"))
    deadline = time.monotonic() + HANG_GUARD
    while len(shop.effects()) < 2:
        assert time.monotonic() < deadline and running.child.poll() is None
        time.sleep(0.02)
    return size


def _both_calls_recorded_once(shop: Shop) -> None:
    """Each call's effect happened once, and both runs are recorded `COMPLETED`."""
    assert shop.effects() == [
        {"tool": "receipt", "order": "o-1"},
        {"tool": "send", "to": "ann", "text": "hi"},
    ]
    store = open_existing(shop.db, read_only=True)
    try:
        assert sorted(run.status for run in store.list_runs()) == ["COMPLETED", "COMPLETED"]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_a_signal_ends_the_proxy_whose_host_stopped_reading_its_stdout(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """The host keeps stdin open and stops reading stdout: a 256 KiB answer fills the
    pipe, the proxy's write of the rest blocks; a second call (`send`) is carried out
    but not yet answered when the signal comes. The proxy lets that call end and
    records it, gives up on the host that takes nothing, says so in one line, and exits
    130 or 143. Both calls are recorded complete, each effect happened once, `agentrt
    verify` finds the record intact; the host's pipe holds the answer's first 64 KiB,
    nothing more: the answers it never read are lost on the wire alone. Before, the
    proxy never ended: the SDK's stdout writer's blocked write, in a worker thread, is
    what the session's end waited for."""
    shop = Shop(tmp_path)
    long_answers(shop)
    hold = shop.folder / "hold"
    with proxy(shop) as running:
        size = _full_with_a_call_held(shop, running, hold)
        running.child.send_signal(sig)
        running.until_logged(GONE_ON)  # it gave its host up, and waits for the call
        hold.unlink()
        ended, rest, stderr = running.ended()
    assert ended == code, stderr
    assert (len(rest), rest.count(b"\n")) == (size, 0), rest[:200]
    assert rest.startswith(b'{"jsonrpc":"2.0","id":2,"result":'), rest[:200]
    said = logged(stderr)
    assert said[:1] + said[-2:] == [
        "agentrt-proxy: shop_receipt -> result",
        GONE_ON,
        "agentrt-proxy: shop_send -> result (the host had cancelled it)",
    ], stderr
    # Between them, in an order two timers decide: the call cut from its session, the
    # proxy giving its host up (3 s), and the SDK's own bound on its "Connection closed"
    # answer (1 s: "transport write blocked"), which only the SDK decides to log.
    assert sorted(line for line in said[1:-2] if line != SDK_GAVE_UP) == [
        "agentrt-proxy: shop_send: the host cancelled the call; it goes on",
        "agentrt-proxy: the host stopped reading stdout (nothing taken for 3 s after the "
        "signal): what was not sent to it is dropped; every call is recorded",
    ], stderr
    _both_calls_recorded_once(shop)
    verified = agentrt("verify", "--db", str(shop.db))
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_a_host_that_reads_again_after_the_signal_gets_the_answer_it_left_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals, code: int
) -> None:
    """The host stopped reading (a 256 KiB answer fills the pipe, a second call held in
    flight), the signal comes, and the host reads again while the proxy waits for it: the
    answer it left arrives whole, the proxy never says it gave the host up, and it ends 130
    or 143 once the call in flight is recorded. The wait's bound (3 s with nothing taken)
    is made 600 s here, so the host's reading is never raced by it."""
    monkeypatch.setenv("AGENTRT_TEST_PROXY_GIVE_UP", "600")
    shop = Shop(tmp_path)
    long_answers(shop)
    hold = shop.folder / "hold"
    with proxy(shop) as running:
        _full_with_a_call_held(shop, running, hold)
        running.child.send_signal(sig)
        # The signal heard: the call in flight cut from the session (it goes on).
        running.until_logged("agentrt-proxy: shop_send: the host cancelled the call; it goes on")
        first = running.line()  # the host reads again
        hold.unlink()
        ended, rest, stderr = running.ended()
    (text,) = first["result"]["content"]
    said = json.loads(text["text"]) if text["type"] == "text" else None
    assert (first["id"], said == {"result": LONG}) == (2, True), text["text"][:200]
    # After it, at most the SDK's own "Connection closed" answer to the call cut from the
    # session (sent if its 1 s bound did not end first: the SDK's timer, not the proxy's).
    after = [json.loads(line) for line in rest.splitlines()]
    assert all(message.get("id") == 3 and "error" in message for message in after), after
    assert ended == code, stderr
    assert "the host stopped reading stdout" not in stderr, stderr
    assert logged(stderr)[-1] == "agentrt-proxy: shop_send -> result (the host had cancelled it)"
    _both_calls_recorded_once(shop)


def test_a_host_that_stops_reading_then_reads_again_gets_every_answer_whole(
    tmp_path: Path,
) -> None:
    """Normal operation: a host that leaves the proxy's stdout full for a while (a 256 KiB
    answer, a second call sent meanwhile), then reads again, gets both answers whole and
    in order, and the proxy ends 0 when the host closes stdin."""
    shop = Shop(tmp_path)
    long_answers(shop)
    with proxy(shop) as running:
        running.handshake()
        running.send(call(2, "shop_receipt", order="o-1"))
        until_stdout_full(running)
        running.send(call(3, "shop_price", item="tea"))
        first, second = running.line(), running.line()
        running.close_stdin()
        ended, rest, stderr = running.ended()
    (text,) = first["result"]["content"]
    said = json.loads(text["text"]) if text["type"] == "text" else None
    assert (first["id"], said == {"result": LONG}) == (2, True), text["text"][:200]
    assert (second["id"], second["result"]["structuredContent"]) == (
        3,
        {"item": "tea", "cents": 250},
    )
    assert (ended, rest) == (0, b""), stderr


def test_a_host_that_closes_stdin_mid_answer_still_gets_it_whole_before_the_exit_0(
    tmp_path: Path,
) -> None:
    """The host's stdin ends while the proxy's write of a 256 KiB answer is blocked on
    the full pipe, and the host goes on reading: the whole answer reaches it, one line,
    then the proxy exits 0. The session's end awaits the write of each message it sent
    (the stdout thread, a daemon, would not hold the exit): the proxy is still there a
    second on, and nothing is cut short."""
    shop = Shop(tmp_path)
    long_answers(shop)
    with proxy(shop) as running:
        running.handshake()
        running.send(call(2, "shop_receipt", order="o-1"))
        until_stdout_full(running)
        running.close_stdin()
        with pytest.raises(TimeoutError):  # it waits for its host to take the answer
            select_or_timeout(running, 1.0)
        rest = bytearray()
        while chunk := os.read(running.stdout, 65536):
            rest += chunk
        ended, more, stderr = running.ended()
    assert (ended, more, rest.count(b"\n"), rest.endswith(b"\n")) == (0, b"", 1, True), stderr
    answer = json.loads(rest)
    (text,) = answer["result"]["content"]
    assert (answer["id"], json.loads(text["text"])) == (2, {"result": LONG})


def test_a_proxy_started_with_its_stdout_closed_says_so_and_exits_1(tmp_path: Path) -> None:
    """A host that starts the proxy with fd 1 closed (a shell's `>&-`): fd 1 is then the
    first descriptor the proxy opens, which it must neither write its host's messages to
    nor point at stderr. It says stdout is closed, before starting any server, and exits
    1. Before, it started every server, then died of the SDK's `AttributeError` (no
    `sys.stdout`), or, writing stdout itself, exited 1 on "[Errno 22] Invalid argument"
    (the event loop's descriptor, taken for stdout, pointed at stderr)."""
    shop = Shop(tmp_path)
    command = 'exec "$0" "$1" "$2" --config "$3" >&-'
    args = [str(PROXY_CHILD), str(shop.clock_file), str(shop.config)]
    done = subprocess.run(
        ["/bin/sh", "-c", command, sys.executable, *args],
        input=(json.dumps(INITIALIZE) + "\n").encode(),
        stderr=subprocess.PIPE,
        timeout=HANG_GUARD,
        check=False,
    )
    said = done.stderr.decode("utf-8", "replace")
    assert (done.returncode, said.splitlines()) == (
        1,
        ["agentrt-proxy: stdout is closed: agentrt-proxy answers its host on stdout"],
    ), said


CLOSED_STDOUT = (
    "agentrt-proxy: the host closed stdout: what was not sent to it is dropped; "
    "every call is recorded"
)


def test_a_host_that_closes_stdout_ends_the_proxy_in_one_line_every_call_recorded(
    tmp_path: Path,
) -> None:
    """The host closes its end of the proxy's stdout (it died, or it is done reading)
    while a `send` is held and keeps stdin open; then a `price` is answered: that write
    meets EPIPE. The proxy says so in one line, lets the held call end and records it,
    and exits 1. Both runs are completed, each effect happened once. Before, it died of
    the SDK's `ExceptionGroup` traceback (`BrokenPipeError` from the stdout writer)."""
    shop = Shop(tmp_path)
    hold = shop.folder / "hold"
    hold.touch()
    with proxy(shop) as running:
        running.handshake()
        running.send(call(2, "shop_send", to="ann", text="hi"))
        _until_its_effect(shop, running)
        os.close(running.stdout)
        running.stdout = -1
        running.send(call(3, "shop_price", item="tea"))
        running.until_logged(
            "agentrt-proxy: the host closed the session; 1 call(s) go on to their end"
        )
        hold.unlink()
        code = running.child.wait(HANG_GUARD)
        stderr = running.stderr()
    assert code == 1, stderr
    said = logged(stderr)
    assert "Traceback" not in stderr and said[-1] == CLOSED_STDOUT, stderr
    assert said.count(CLOSED_STDOUT) == 1, stderr
    assert "agentrt-proxy: shop_send -> result (the host had cancelled it)" in said, stderr
    assert shop.effects() == [{"tool": "send", "to": "ann", "text": "hi"}]
    store = open_existing(shop.db, read_only=True)
    try:
        assert sorted(run.status for run in store.list_runs()) == ["COMPLETED", "COMPLETED"]
    finally:
        store.close()


def test_a_host_that_closes_stdout_and_sends_sigterm_still_ends_the_proxy_143(
    tmp_path: Path,
) -> None:
    """A host that goes away the common way: its end of the proxy's stdout closes and a
    SIGTERM comes, a `send` in flight. The session's end writes the SDK's `Connection
    closed` answer, which meets EPIPE: the proxy says so in one line, lets the call end
    and records it, and exits 143 as the signal asks. Before, the EPIPE's traceback,
    exit 1."""
    shop = Shop(tmp_path)
    hold = shop.folder / "hold"
    hold.touch()
    with proxy(shop) as running:
        running.handshake()
        running.send(call(2, "shop_send", to="ann", text="hi"))
        _until_its_effect(shop, running)
        os.close(running.stdout)
        running.stdout = -1
        running.child.send_signal(signal.SIGTERM)
        running.until_logged(GONE_ON)
        hold.unlink()
        code = running.child.wait(HANG_GUARD)
        stderr = running.stderr()
    assert code == 143, stderr
    said = logged(stderr)
    assert "Traceback" not in stderr and said.count(CLOSED_STDOUT) == 1, stderr
    assert said[-1] == "agentrt-proxy: shop_send -> result (the host had cancelled it)", stderr
    assert shop.effects() == [{"tool": "send", "to": "ann", "text": "hi"}]
    store = open_existing(shop.db, read_only=True)
    try:
        (run,) = store.list_runs()
        assert run.status == "COMPLETED", run
    finally:
        store.close()


def tcp_pair() -> tuple[int, int]:
    """A TCP connection over loopback: the host's end, the proxy's (as inetd hands it)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        host = socket.create_connection(listener.getsockname())
        served, _ = listener.accept()
    return host.detach(), served.detach()


def test_a_host_that_resets_its_tcp_stdout_ends_the_proxy_in_the_same_one_line(
    tmp_path: Path,
) -> None:
    """A host reached over TCP (the proxy's stdout a socket, as inetd or a socket-activated
    service hands it) that goes away resets the connection: the proxy's next write meets
    ECONNRESET, not EPIPE. Same as a closed pipe: one line, exit 1, the call recorded,
    `agentrt verify` clean.
    Before, the `ExceptionGroup` traceback (`ConnectionResetError`)."""
    shop = Shop(tmp_path)
    args = [sys.executable, str(PROXY_CHILD), str(shop.clock_file), "--config", str(shop.config)]
    running = Proxy(args, shop.root, stdout=tcp_pair())
    try:
        running.handshake()
        host = socket.socket(fileno=running.stdout)
        host.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        host.close()  # linger 0: a reset, whatever the host had read
        running.stdout = -1
        running.send(call(2, "shop_price", item="tea"))
        code = running.child.wait(HANG_GUARD)
        stderr = running.stderr()
    finally:
        running.end()
    assert code == 1, stderr
    said = logged(stderr)
    assert "Traceback" not in stderr and said[-1] == CLOSED_STDOUT, stderr
    assert said.count(CLOSED_STDOUT) == 1, stderr
    store = open_existing(shop.db, read_only=True)
    try:
        (run,) = store.list_runs()
        assert run.status == "COMPLETED", run
    finally:
        store.close()
    verified = agentrt("verify", "--db", str(shop.db))
    assert verified.returncode == 0, verified.stdout + verified.stderr
