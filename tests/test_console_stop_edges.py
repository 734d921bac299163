"""The console's stop met by a request that is not a decision, and by a second Ctrl-C.

`agentrt console` runs as a person runs it (a real uvicorn, `--port 0`, real signals, httpx
over loopback). A request is held mid-flight by a lock the test holds and releases, never by
a sleep: a page's first read waits on the database file's lock (taken by a process of the
test's own), a decision's commit on the write lock, a form on its body never finishing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from support.signal_masks import signal_mask
from test_cli import clean_env, events_of, pending, waiting_run
from test_console_stopping import _PATIENT_CONSOLE, STOPPING_DECISION, STOPPING_TITLE, _db_handles

pytest.importorskip("uvicorn")

STOPPED_OTHER = (
    "The console stopped before it answered; nothing was changed. Reload the page in a "
    "running console (start it again if it is not)."
)

# SQLite's lock bytes (os_unix.c): a process holding PENDING_BYTE for writing keeps any other
# from taking a SHARED lock, so a connection's first read waits (its busy handler) until it
# is let go.
_PENDING_BYTE = 0x40000000
_HOLD_FILE_LOCK = (
    "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
    f"fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, {_PENDING_BYTE}); "
    "print('held', flush=True); sys.stdin.readline()"
)


@contextlib.contextmanager
def _console(
    db: str, *extra: str, env: dict[str, str] | None = None, code: str = _PATIENT_CONSOLE
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`agentrt console --port 0` (its busy timeout 120 s: a held lock outlasts uvicorn's 2 s
    graceful shutdown however loaded the machine), and the address it printed."""
    process = subprocess.Popen(
        [sys.executable, "-c", code, "--db", db, "console", "--port", "0", "--by", "ops", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env or clean_env(),
    )
    try:
        assert process.stdout is not None
        head = "".join(process.stdout.readline() for _ in range(3))
        match = re.search(r"  open (http://127\.0\.0\.1:\d+)/", head)
        assert match, head
        yield process, match[1]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _ended(process: subprocess.Popen[str]) -> tuple[str, str, int]:
    out, err = process.communicate(timeout=90)
    return out, err, process.returncode


def _waits_for(done: Callable[[], bool], process: subprocess.Popen[str], what: str) -> None:
    """Polls a state the test can see (never a guess at how long something takes)."""
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, f"never: {what}"
        assert process.poll() is None, f"the console ended before {what}"
        time.sleep(0.01)


def _in_background(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    got: list[object] = []

    def run() -> None:
        try:
            got.append(call())
        except Exception as e:  # what the client met, asserted by the test
            got.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, got


def _stopping_page(message: str, db: str | None, back: str = "/") -> str:
    from agentrt.console import ConsoleConfig
    from agentrt.console._pages import message_page

    config = None if db is None else ConsoleConfig(db_path=db, by="ops")
    return str(message_page(STOPPING_TITLE, message, config, back=back))


def _assert_stopping(answer: object, body: str, kind: str = "text/html; charset=utf-8") -> None:
    from agentrt.console._security import HEADERS

    assert isinstance(answer, httpx.Response), answer
    assert answer.status_code == 503
    assert answer.headers["content-type"] == kind
    assert answer.headers["connection"] == "close"
    for name, value in HEADERS.items():
        assert answer.headers[name] == value
    if kind == "application/json":
        assert answer.json() == json.loads(body)
    else:
        assert answer.text == body


def _form_arriving(port: int, head: str) -> socket.socket:
    """A connection whose form the console is reading (uvicorn said "100 Continue", which it
    says once the console asks for the body), its body begun and never finished."""
    client = socket.create_connection(("127.0.0.1", port), timeout=90)
    client.sendall(
        (
            f"{head}Host: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            "Expect: 100-continue\r\nContent-Length: 100\r\n\r\n"
        ).encode()
    )
    continued = b""
    while not continued.endswith(b"\r\n\r\n"):
        continued += client.recv(1)
    assert continued == b"HTTP/1.1 100 Continue\r\n\r\n"
    client.sendall(b"token=")  # and the rest never comes
    return client


def _answer(client: socket.socket) -> tuple[str, list[str], str]:
    """The status line, the headers (lower case) and the body, read to the connection's end."""
    answer = b""
    while chunk := client.recv(65536):
        answer += chunk
    head, _, body = answer.decode().partition("\r\n\r\n")
    status, *headers = head.splitlines()
    return status, [h.lower() for h in headers], body


def _assert_stopping_raw(status: str, headers: list[str], body: str, page: str) -> None:
    from agentrt.console._security import HEADERS

    assert status == "HTTP/1.1 503 Service Unavailable"
    assert "content-type: text/html; charset=utf-8" in headers
    assert "connection: close" in headers
    for name, value in HEADERS.items():
        assert f"{name.lower()}: {value.lower()}" in headers
    assert body == page


def test_a_login_whose_form_was_still_arriving_at_the_stop_is_answered_as_nothing_changed(
    db_path: Path,
) -> None:
    # The console's one form that is not a decision: the token posted to /login. Cut off at
    # the stop, it is told the console is stopping and that nothing was changed: no cookie
    # is set (the browser is not let in by a half-read form), the record is as it was.
    db = str(db_path.resolve())
    run = waiting_run(db)
    before_events = events_of(db)
    token = "t" * 40
    with _console(db, env=clean_env(AGENTRT_CONSOLE_TOKEN=token)) as (process, base):
        port = int(base.rsplit(":", 1)[1])
        with _form_arriving(port, "POST /login HTTP/1.1\r\n") as client:
            process.send_signal(signal.SIGINT)
            status, headers, body = _answer(client)
        out, err, code = _ended(process)
    _assert_stopping_raw(status, headers, body, _stopping_page(STOPPED_OTHER, None))
    assert not [h for h in headers if h.startswith("set-cookie:")]
    assert "Traceback" not in err and "Exception in ASGI application" not in err
    assert (out, code) == ("agentrt console: stopped\n", 0)
    assert events_of(db) == before_events
    assert pending(db, run.id).status == "pending"


# The patient console, its graceful shutdown 120 s instead of 2 s: a second Ctrl-C sent once
# the first began the shutdown lands inside it however long a loaded machine stalls.
_PATIENT_SHUTDOWN = (
    "import uvicorn; _init = uvicorn.Config.__init__; "
    "uvicorn.Config.__init__ = lambda self, *a, **k: _init(self, *a, "
    "**{**k, 'timeout_graceful_shutdown': 120}); " + _PATIENT_CONSOLE
)


def _shutting_down(process: subprocess.Popen[str], port: int) -> None:
    """Returns once the console stopped listening: uvicorn's shutdown began."""

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=30).close()
        except ConnectionRefusedError:
            return True
        return False

    _waits_for(refused, process, "the console stopped listening")


def _verified(db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrt", "--db", db, "verify"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=90,
        check=False,
    )


@pytest.mark.parametrize(
    ("path", "twice"),
    [
        ("/", False),
        ("/runs/{run}", False),
        ("/api/state", False),
        ("/api/runs/{run}/state", False),
        ("/runs/{run}", True),
    ],
)
def test_a_page_uvicorn_gave_up_on_at_the_stop_is_answered_as_nothing_changed(
    db_path: Path, path: str, twice: bool
) -> None:
    # The console's first read waits on the file's lock when Ctrl-C comes: uvicorn gives up
    # on it after its graceful shutdown (or at once, at a second Ctrl-C during it). The client
    # is told the console is stopping and that nothing was changed (it was not), not uvicorn's
    # 500; the console ends as it should.
    if not Path(f"/proc/{os.getpid()}/fd").is_dir():
        pytest.skip("needs /proc to see the console open the database for the page")
    db = str(db_path.resolve())
    run = waiting_run(db)
    before_events = events_of(db)
    url = path.format(run=run.id)
    with _console(db, code=_PATIENT_SHUTDOWN if twice else _PATIENT_CONSOLE) as (process, base):
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLD_FILE_LOCK, db],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline() == "held\n"
            before = _db_handles(process.pid, db)
            getting, got = _in_background(lambda: httpx.get(base + url, timeout=90))
            _waits_for(
                lambda: _db_handles(process.pid, db) > before,
                process,
                "the console opened the database for the page",
            )
            process.send_signal(signal.SIGINT)
            if twice:
                _shutting_down(process, int(base.rsplit(":", 1)[1]))
                process.send_signal(signal.SIGINT)  # uvicorn's force exit
            getting.join(90)
            assert not getting.is_alive()
        finally:
            holder.communicate("go\n", timeout=30)  # the read may now go on, and the stop end
        out, err, code = _ended(process)
    if url.startswith("/api/"):  # its caller reads JSON, as every other refusal of the API
        _assert_stopping(got[0], json.dumps({"error": STOPPED_OTHER}), "application/json")
    else:
        _assert_stopping(got[0], _stopping_page(STOPPED_OTHER, None))
    # uvicorn gave up on it at its graceful shutdown's end, or did not wait (its force exit).
    assert ("timeout graceful shutdown exceeded" in err) is not twice
    assert "Traceback" not in err and "Exception in ASGI application" not in err
    assert (out, code) == ("agentrt console: stopped\n", 0)
    assert events_of(db) == before_events
    assert pending(db, run.id).status == "pending"


def _console_page(base: str, run_id: str) -> tuple[str, str]:
    """The CSRF token and the shown hash of the run's page."""
    markup = httpx.get(f"{base}/runs/{run_id}", timeout=30).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', markup)
    shown_hash = re.search(r'name="hash" value="([^"]+)"', markup)
    assert csrf and shown_hash, markup
    return csrf[1], shown_hash[1]


def _approving_held(
    process: subprocess.Popen[str],
    base: str,
    db: str,
    holder: sqlite3.Connection,
    run_id: str,
    approval_id: str,
) -> tuple[threading.Thread, list[object]]:
    """The run's page read, then `holder` takes the write lock and an approval is posted in
    the background: returned once the console has opened the database for the decision
    (its commit now waits on the lock the test holds)."""
    csrf, shown_hash = _console_page(base, run_id)
    before = _db_handles(process.pid, db)
    holder.execute("BEGIN IMMEDIATE")  # the write lock: the decision waits for it
    posting, got = _in_background(
        lambda: httpx.post(
            f"{base}/runs/{run_id}/approvals/{approval_id}/approve",
            data={"csrf": csrf, "hash": shown_hash, "note": ""},
            headers={"Origin": base},
            timeout=90,
        )
    )
    _waits_for(
        lambda: _db_handles(process.pid, db) > before,
        process,
        "the console opened the database for the decision",
    )
    return posting, got


def test_a_second_ctrl_c_while_a_decision_commits_is_answered_and_recorded_whole(
    db_path: Path,
) -> None:
    # Ctrl-C, then Ctrl-C again during uvicorn's graceful shutdown (its force exit), while an
    # approval's commit waits on the write lock. The client is never told "approved" for what
    # is not recorded: it is told the decision may have been recorded; the record then holds
    # it whole (the approval, its events, the chain intact), and the console says it stopped.
    db = str(db_path.resolve())
    run = waiting_run(db)
    approval = pending(db, run.id)
    with _console(db, code=_PATIENT_SHUTDOWN) as (process, base):
        port = int(base.rsplit(":", 1)[1])
        holder = sqlite3.connect(db, isolation_level=None, timeout=60)
        try:
            posting, got = _approving_held(process, base, db, holder, run.id, approval.id)
            process.send_signal(signal.SIGINT)
            _shutting_down(process, port)
            process.send_signal(signal.SIGINT)  # uvicorn's force exit
            posting.join(90)
            assert not posting.is_alive()
            holder.execute("COMMIT")  # the decision may now commit
        finally:
            holder.close()
        out, err, code = _ended(process)
    _assert_stopping(got[0], _stopping_page(STOPPING_DECISION, db, back=f"/runs/{run.id}"))
    assert "Traceback" not in err and "Exception in ASGI application" not in err
    assert (out, code) == ("agentrt console: stopped\n", 0)
    assert pending(db, run.id).status == "approved"
    assert [e.type for e in events_of(db, run.id)][-1] == "approval.decided"
    verified = _verified(db)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_second_ctrl_c_while_a_decision_form_arrives_decides_nothing(db_path: Path) -> None:
    db = str(db_path.resolve())
    run = waiting_run(db)
    approval = pending(db, run.id)
    before_events = events_of(db)
    with _console(db, code=_PATIENT_SHUTDOWN) as (process, base):
        port = int(base.rsplit(":", 1)[1])
        head = f"POST /runs/{run.id}/approvals/{approval.id}/approve HTTP/1.1\r\n"
        with _form_arriving(port, head) as client:
            process.send_signal(signal.SIGINT)
            _shutting_down(process, port)
            process.send_signal(signal.SIGINT)  # uvicorn's force exit
            status, headers, body = _answer(client)
        out, err, code = _ended(process)
    _assert_stopping_raw(
        status,
        headers,
        body,
        _stopping_page(
            "Nothing was decided: the console stopped before this decision was made. Open the "
            "run's page in a running console (start it again if it is not) and decide again.",
            db,
            back=f"/runs/{run.id}",
        ),
    )
    assert "Traceback" not in err and "Exception in ASGI application" not in err
    assert (out, code) == ("agentrt console: stopped\n", 0)
    assert events_of(db) == before_events
    assert pending(db, run.id).status == "pending"


def _loop_closed(pid: int) -> bool:
    """Whether the process has no epoll descriptor left: uvicorn's event loop closed."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(fd) == "anon_inode:[eventpoll]":
                return False
    return True


def _waiting_said(pid: int) -> str:
    """What the console says once stopped while a decision is still being committed."""
    return (
        "agentrt console: stopping once the decision being recorded has ended (Ctrl-C does "
        f"not cut this short; `kill {pid}` does, the decision then recorded or not)\n"
    )


def _stopped_while_a_decision_commits(db_path: Path, stop: signal.Signals, again: int) -> None:
    """An approval's commit waits on the write lock the test holds when `stop` comes; once
    the console said what it waits for, `again` more of the same signal; then the lock is
    given up. The client is told the decision may have been recorded, the console waits for
    it, records it whole and ends "stopped", 0, saying nothing of an interruption."""
    if not Path(f"/proc/{os.getpid()}/fd").is_dir():
        pytest.skip("needs /proc to see the console's database and event loop")
    db = str(db_path.resolve())
    run = waiting_run(db)
    approval = pending(db, run.id)
    with _console(db) as (process, base):
        assert process.stderr is not None
        said: list[str] = []
        reading = threading.Thread(target=lambda: said.extend(process.stderr or ()))
        reading.start()
        holder = sqlite3.connect(db, isolation_level=None, timeout=60)
        try:
            posting, got = _approving_held(process, base, db, holder, run.id, approval.id)
            process.send_signal(stop)
            posting.join(90)  # answered once uvicorn gave up on it (2 s)
            assert not posting.is_alive()
            _assert_stopping(got[0], _stopping_page(STOPPING_DECISION, db, back=f"/runs/{run.id}"))
            _waits_for(lambda: _loop_closed(process.pid), process, "uvicorn's loop closed")
            _waits_for(
                lambda: _waiting_said(process.pid) in said,
                process,
                "the console said what it waits for",
            )
            for _ in range(again):
                process.send_signal(stop)  # and again: it goes on waiting
            holder.execute("COMMIT")  # the decision may now commit
        finally:
            holder.close()
        assert process.stdout is not None
        out = process.stdout.read()  # its last line, once it ended
        process.wait(90)
        reading.join(30)
    err = "".join(said)
    assert "Traceback" not in err and "interrupted" not in err, err
    assert (out, process.returncode) == ("agentrt console: stopped\n", 0)
    assert pending(db, run.id).status == "approved"
    verified = _verified(db)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_ctrl_c_while_the_stop_waits_for_a_decision_does_not_cut_it_short(
    db_path: Path,
) -> None:
    # Ctrl-C: uvicorn gives up on the decision (503, perhaps recorded) while its commit waits
    # on the write lock, and the console waits for it before its last line (decision 0212).
    # Ctrl-C again meanwhile (the console seems stuck) ended the wait: "agentrt: interrupted",
    # exit 1, no "stopped", and the process, waiting on its worker thread, then recorded the
    # decision without a word. Now the console says what it waits for, goes on waiting, and
    # ends as a stop does once the decision has ended.
    _stopped_while_a_decision_commits(db_path, signal.SIGINT, again=2)


def test_a_sigterm_while_a_decision_commits_stops_the_console_as_ctrl_c_does(
    db_path: Path,
) -> None:
    # SIGTERM (`kill`, a service manager's stop) while an approval's commit waits on the
    # write lock. uvicorn stops as at a Ctrl-C, then raised SIGTERM again once it had
    # stopped: the process ended at once (-15) before the 503 it had begun for the
    # decision went out (the client saw the connection drop, no answer), without waiting
    # for the decision nor saying "stopped". Now it is a stop: the client told the decision
    # may have been recorded, the console waiting for it, recorded whole, "stopped", 0.
    _stopped_while_a_decision_commits(db_path, signal.SIGTERM, again=0)


def test_a_sigterm_while_the_stop_waits_for_a_decision_ends_the_console_as_it_said(
    db_path: Path,
) -> None:
    # A commit that does not end (here: the write lock never let go) keeps a stopped console
    # waiting; Ctrl-C does not cut that short (decision 0226). What does is said with the
    # wait, and does it: `kill PID` ends the process (by SIGTERM), the decision not recorded
    # (its transaction never committed), the record whole.
    if not Path(f"/proc/{os.getpid()}/fd").is_dir():
        pytest.skip("needs /proc to see the console's database")
    db = str(db_path.resolve())
    run = waiting_run(db)
    approval = pending(db, run.id)
    with _console(db) as (process, base):
        assert process.stderr is not None
        said: list[str] = []
        reading = threading.Thread(target=lambda: said.extend(process.stderr or ()))
        reading.start()
        holder = sqlite3.connect(db, isolation_level=None, timeout=60)
        try:
            posting, got = _approving_held(process, base, db, holder, run.id, approval.id)
            process.send_signal(signal.SIGINT)
            posting.join(90)
            assert not posting.is_alive()
            _waits_for(
                lambda: _waiting_said(process.pid) in said,
                process,
                "the console said what it waits for",
            )
            process.send_signal(signal.SIGINT)  # not this
            process.send_signal(signal.SIGTERM)  # this
            assert process.stdout is not None
            out = process.stdout.read()
            process.wait(90)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        reading.join(30)
    _assert_stopping(got[0], _stopping_page(STOPPING_DECISION, db, back=f"/runs/{run.id}"))
    assert (out, process.returncode) == ("", -signal.SIGTERM)
    assert pending(db, run.id).status == "pending"
    verified = _verified(db)
    assert verified.returncode == 0, verified.stdout + verified.stderr


# `agentrt.console.serve` called by a program of its own, started with its stderr closed
# (Python then sets `sys.stderr` to None; the command line puts os.devnull in its place).
_SERVE_STDERR_CLOSED = (
    "import sys; import agentrt._store.sqlite._connection as c; c.BUSY_TIMEOUT_MS = 120_000; "
    "assert sys.stderr is None; from agentrt.console import serve; "
    "sys.exit(serve(sys.argv[1], port=0, by='ops'))"
)


def test_a_serve_with_stderr_closed_still_waits_for_the_decision_being_recorded(
    db_path: Path,
) -> None:
    # Stopped while a decision commits, the console says on stderr what it waits for. With
    # no stderr at all (`sys.stderr` None) that sentence raised AttributeError out of the
    # stop: no wait, no "stopped", a traceback nobody sees, exit 1, and the decision then
    # recorded by the worker thread the process still waited for.
    if not Path(f"/proc/{os.getpid()}/fd").is_dir():
        pytest.skip("needs /proc to see the console open the database for the decision")
    db = str(db_path.resolve())
    run = waiting_run(db)
    approval = pending(db, run.id)
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVE_STDERR_CLOSED, db],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
        preexec_fn=lambda: os.close(2),  # the child's fd 2, closed before its exec
    )
    try:
        assert process.stdout is not None
        head = "".join(process.stdout.readline() for _ in range(3))
        match = re.search(r"  open (http://127\.0\.0\.1:\d+)/", head)
        assert match, head
        base = match[1]
        holder = sqlite3.connect(db, isolation_level=None, timeout=60)
        try:
            posting, got = _approving_held(process, base, db, holder, run.id, approval.id)
            process.send_signal(signal.SIGINT)
            posting.join(90)
            assert not posting.is_alive()
            _waits_for(lambda: _loop_closed(process.pid), process, "uvicorn's loop closed")
            # Waiting for the decision (its lock still held): the process has not ended.
            assert process.poll() is None
            holder.execute("COMMIT")  # the decision may now commit
        finally:
            holder.close()
        out = process.stdout.read()
        process.wait(90)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        if process.stdout is not None:
            process.stdout.close()  # read to its end above: closed here
    _assert_stopping(got[0], _stopping_page(STOPPING_DECISION, db, back=f"/runs/{run.id}"))
    assert (out, process.returncode) == ("agentrt console: stopped\n", 0)
    assert pending(db, run.id).status == "approved"
    verified = _verified(db)
    assert verified.returncode == 0, verified.stdout + verified.stderr


# `agentrt.console.serve` called by a program that ignores SIGTERM (`trap '' TERM` in the
# shell that started it, or its own `signal.signal(SIGTERM, SIG_IGN)`) or SIGINT (a shell's
# `&`), and says afterwards whether it still does.
_SERVE_IGNORING = (
    "import signal, sys; ignored = getattr(signal, sys.argv[2]); "
    "signal.signal(ignored, signal.SIG_IGN); "
    "from agentrt.console import serve; code = serve(sys.argv[1], port=0, by='ops'); "
    "print('ignored after:', signal.getsignal(ignored) is signal.SIG_IGN, flush=True); "
    "sys.exit(code)"
)


@pytest.mark.parametrize(
    ("ignored", "stopped_by"),
    [(signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGTERM)],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_serve_whose_caller_ignores_a_signal_goes_on_ignoring_it(
    db_path: Path, ignored: signal.Signals, stopped_by: signal.Signals
) -> None:
    # A program ignoring SIGTERM (or SIGINT) calls `serve`: uvicorn put its own handler in
    # place while it served, so that signal stopped the console the program meant to keep.
    # It stays ignored (by the kernel: nothing delivered), the console serving; the other
    # signal stops it, and the program finds the ignored one still ignored (decision 0233).
    if not Path(f"/proc/{os.getpid()}/status").is_file():
        pytest.skip("needs /proc to see which signals the console ignores")
    db = str(db_path.resolve())
    waiting_run(db)
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVE_IGNORING, db, ignored.name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
    )
    try:
        assert process.stdout is not None
        head = "".join(process.stdout.readline() for _ in range(3))
        match = re.search(r"  open (http://127\.0\.0\.1:\d+)/", head)
        assert match, head
        base = match[1]
        # Answered: uvicorn serves, its handlers in place.
        assert httpx.get(f"{base}/", timeout=30).status_code == 200
        bit = 1 << (ignored - 1)
        assert signal_mask(process.pid, "SigIgn") & bit, f"{ignored.name} no longer ignored"
        process.send_signal(ignored)  # dropped by the kernel
        assert httpx.get(f"{base}/", timeout=30).status_code == 200
        process.send_signal(stopped_by)
        out, err = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert "Traceback" not in err, err
    assert (out, process.returncode) == ("agentrt console: stopped\nignored after: True\n", 0)


@pytest.mark.parametrize("sigterm", ["default", "ignored"])
def test_the_stops_wait_names_kill_only_where_sigterm_would_end_it(
    sigterm: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The sentence said at the wait (decision 0229) tells a person that `kill PID` ends it;
    # a console whose caller ignores SIGTERM (decision 0233) would not end, so it says only
    # what holds there.
    from agentrt.console import _serve

    previous = signal.signal(
        signal.SIGTERM, signal.SIG_DFL if sigterm == "default" else signal.SIG_IGN
    )
    try:
        sock = socket.socket()
        _serve._stop(sock, lambda waiting: waiting(1), lambda: None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    said = capsys.readouterr().err
    head = "agentrt console: stopping once the decision being recorded has ended (Ctrl-C does "
    if sigterm == "default":
        assert said == _waiting_said(os.getpid())
    else:
        assert said == head + "not cut this short)\n"
