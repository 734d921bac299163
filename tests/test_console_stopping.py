"""A console decision uvicorn gives up on at the console's stop (decision 0214).

`agentrt console` runs as a person runs it (a real uvicorn, `--port 0`). A decision whose
commit waits on the database's write lock when Ctrl-C comes outlives uvicorn's graceful
shutdown (2 s): uvicorn cancels the request, while the worker thread committing it goes on
(decision 0212 waits for it before the console's last line). The browser was answered 500
"Internal Server Error", though the decision may be, and here is, in the record.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from test_cli import clean_env, pending, waiting_run


def _db_handles(pid: int, db: str) -> int:
    """How many of the process's open files are the database file itself."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(fd) == db
    return count


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _post(request: urllib.request.Request) -> tuple[int, str, str]:
    """The status, content type and body the console answers a form with."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=90) as answer:
            return int(answer.status), answer.headers["content-type"], answer.read().decode()
    except urllib.error.HTTPError as answered:
        return answered.code, answered.headers["content-type"], answered.read().decode()


STOPPING_TITLE = "The console is stopping"
STOPPING_DECISION = (
    "The console stopped while recording this decision: it may have been recorded, or not. "
    "Open the run's page in a running console (start it again if it is not) and reload it to "
    "see whether the decision was recorded, before deciding again."
)


# `python -m agentrt` with the store's busy timeout at 120 s instead of 5 s: the decision
# then waits on the held lock past uvicorn's 2 s graceful shutdown however long a loaded
# machine stalls between the two, instead of giving up first ("busy") when a stall passes 3 s.
_PATIENT_CONSOLE = (
    "import sys; import agentrt._store.sqlite._connection as c; c.BUSY_TIMEOUT_MS = 120_000; "
    "from agentrt.__main__ import main; sys.exit(main())"
)


@pytest.mark.parametrize("verb", ["approve", "reject", "cancel"])
def test_a_decision_uvicorn_gave_up_on_at_the_stop_is_answered_as_perhaps_recorded(
    db_path: Path, verb: str
) -> None:
    pytest.importorskip("uvicorn")
    if not Path(f"/proc/{os.getpid()}/fd").is_dir():
        pytest.skip("needs /proc to see the console open the database for the decision")
    from agentrt.console import ConsoleConfig
    from agentrt.console._pages import message_page

    db = str(db_path.resolve())
    run = waiting_run(db)
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _PATIENT_CONSOLE,
            "--db",
            db,
            "console",
            "--port",
            "0",
            "--by",
            "ops",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
    )
    holder = sqlite3.connect(db, isolation_level=None, timeout=60)
    try:
        assert process.stdout is not None and process.stderr is not None
        head = "".join(process.stdout.readline() for _ in range(3))
        match = re.search(r"  open (http://127\.0\.0\.1:\d+)/\n", head)
        assert match, head
        base = match[1]
        with urllib.request.urlopen(f"{base}/runs/{run.id}", timeout=30) as page:
            markup = page.read().decode()
        csrf = re.search(r'name="csrf" value="([^"]+)"', markup)
        shown_hash = re.search(r'name="hash" value="([^"]+)"', markup)
        assert csrf and shown_hash, markup
        approval = pending(db, run.id)
        path = (
            f"/runs/{run.id}/cancel"
            if verb == "cancel"
            else f"/runs/{run.id}/approvals/{approval.id}/{verb}"
        )
        form = urllib.request.Request(
            base + path,
            data=f"csrf={csrf[1]}&hash={shown_hash[1]}&note=".encode(),
            headers={"Origin": base, "Content-Type": "application/x-www-form-urlencoded"},
        )
        before = _db_handles(process.pid, db)
        holder.execute("BEGIN IMMEDIATE")  # the write lock: the decision waits for it
        answered: list[tuple[int, str, str]] = []
        posting = threading.Thread(target=lambda: answered.append(_post(form)))
        posting.start()
        deadline = time.monotonic() + 60
        while _db_handles(process.pid, db) <= before:  # the decision opened its store
            assert time.monotonic() < deadline, "the console never began the decision"
            assert process.poll() is None
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        posting.join(90)  # answered while the decision still waits on the lock
        assert not posting.is_alive()
        holder.execute("COMMIT")  # the decision may now commit, within its busy timeout
    finally:
        holder.close()
        try:
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    back = f"/runs/{run.id}"
    assert answered == [
        (
            503,
            "text/html; charset=utf-8",
            str(
                message_page(
                    STOPPING_TITLE,
                    STOPPING_DECISION,
                    ConsoleConfig(db_path=db, by="ops"),
                    back=back,
                )
            ),
        )
    ]
    assert "timeout graceful shutdown exceeded" in err
    assert "Traceback" not in err and "Exception in ASGI application" not in err
    assert out == "agentrt console: stopped\n"
    assert process.returncode == 0
    # The answer said it may be recorded; here it is: it committed once the lock was free,
    # and the console's stop waited for it (decision 0212).
    status = pending(db, run.id).status
    assert status == {"approve": "approved", "reject": "rejected", "cancel": "expired"}[verb]


def test_a_decision_whose_form_was_still_arriving_at_the_stop_is_answered_as_not_made(
    db_path: Path,
) -> None:
    # The form's body never finished arriving when Ctrl-C came: nothing began to decide, and
    # the answer says so (not uvicorn's 500), with what to do.
    pytest.importorskip("uvicorn")
    from agentrt.console import ConsoleConfig
    from agentrt.console._pages import message_page
    from agentrt.console._security import HEADERS

    db = str(db_path.resolve())
    run = waiting_run(db)
    approval = pending(db, run.id)
    process = subprocess.Popen(
        [sys.executable, "-m", "agentrt", "--db", db, "console", "--port", "0", "--by", "ops"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
    )
    try:
        assert process.stdout is not None
        head = "".join(process.stdout.readline() for _ in range(3))
        match = re.search(r"  open http://127\.0\.0\.1:(\d+)/\n", head)
        assert match, head
        port = int(match[1])
        with socket.create_connection(("127.0.0.1", port), timeout=90) as client:
            client.sendall(
                (
                    f"POST /runs/{run.id}/approvals/{approval.id}/approve HTTP/1.1\r\n"
                    f"Host: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n"
                    "Content-Type: application/x-www-form-urlencoded\r\n"
                    "Expect: 100-continue\r\nContent-Length: 100\r\n\r\n"
                ).encode()
            )
            # uvicorn says "100 Continue" once the console reads the form: it is reading it.
            continued = b""
            while not continued.endswith(b"\r\n\r\n"):
                continued += client.recv(1)
            assert continued == b"HTTP/1.1 100 Continue\r\n\r\n"
            client.sendall(b"csrf=")  # and the rest never comes
            process.send_signal(signal.SIGINT)
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    head_text, _, body = answer.decode().partition("\r\n\r\n")
    assert head_text.splitlines()[0] == "HTTP/1.1 503 Service Unavailable"
    headers = head_text.lower().splitlines()
    assert "content-type: text/html; charset=utf-8" in headers
    assert "connection: close" in headers
    for name, value in HEADERS.items():  # the console's own, as on every answer
        assert f"{name.lower()}: {value.lower()}" in headers
    assert body == str(
        message_page(
            STOPPING_TITLE,
            "Nothing was decided: the console stopped before this decision was made. Open the "
            "run's page in a running console (start it again if it is not) and decide again.",
            ConsoleConfig(db_path=db, by="ops"),
            back=f"/runs/{run.id}",
        )
    )
    assert "Traceback" not in err
    assert (out, process.returncode) == ("agentrt console: stopped\n", 0)
    assert pending(db, run.id).status == "pending"
