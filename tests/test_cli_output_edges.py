"""The edges decision 0205 left open, each run as a person runs it (a real `python -m agentrt`).

1. `agentrt mcp` with an unbuffered standard output: a full one printed "agentrt mcp: [Errno
   28] No space left on device", a closed pipe "agentrt mcp: [Errno 32] Broken pipe", and
   `agentrt mcp --help > /dev/full` nothing at all, exit 0. Each is now said as for every
   command: the one line (exit 1), or quiet (exit 1) for a reader that went away.
2. A console whose "stopped" line cannot be written, after a person decided through it, said
   "nothing was changed". It now says what the console recorded.
3. In an ASCII locale, `approve --by josé` was refused as "not visible characters"; the
   name is now recorded as the bytes the terminal sent, read as UTF-8 (decision 0211).

The full standard output of a console that served is a file whose size limit
(`RLIMIT_FSIZE`, set on the running process once its address is printed) is what it
holds: its next write fails with EFBIG, "File too large", whatever the timing. Its writes
start 1 GiB into the (sparse) file, so that the limit leaves the database's files alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from test_cli import clean_env, events_of, pending, waiting_run
from test_closed_stdout import closed_stdout
from test_full_stdout import FULL, NOTHING_CHANGED, full_stdout, raw_notes_server

ROOT = Path(__file__).resolve().parent.parent
MCP = ROOT / "examples" / "mcp"

MCP_LOST = (
    f"agentrt: the standard output could not be written ({FULL}), so what agentrt mcp "
    "printed is incomplete; what it had done by then is not undone\n"
)


@pytest.fixture(params=[False, True], ids=["buffered", "unbuffered"])
def unbuffered(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


# --- 1. agentrt mcp -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return ["--", *raw_notes_server(tmp_path_factory.mktemp("notes"))]


def _mcp_commands(tmp_path: Path, tag: str, unbuffered: bool, server: list[str]) -> list[list[str]]:
    """Every `agentrt mcp` command that writes to stdout. Buffered, those that start a
    server are one `check` (the buffered `pin` is `test_full_stdout.py`'s): each starts an
    interpreter that imports the MCP SDK, about a second and a half of CPU. `--json` is not
    run again: its report is written by the same one `out.write(report)` of `mcp/_cli.py`
    as the text's, so a full or closed stdout meets it at the same write."""
    check = [
        "--manifest",
        str(MCP / "notes.manifest.json"),
        "--rules",
        str(MCP / "notes.rules.json"),
    ]
    served = [
        ["mcp", "check", "notes", *check, *server],
        ["mcp", "pin", "notes", "--out", str(tmp_path / f"{tag}.json"), *server],
    ]
    helps = [["mcp", "--help"], ["mcp", "pin", "--help"], ["mcp", "check", "--help"]]
    return helps + (served if unbuffered else served[:1])


def test_every_mcp_command_on_a_full_stdout_says_it_in_the_one_line(
    tmp_path: Path, unbuffered: bool, server: list[str]
) -> None:
    pytest.importorskip("mcp")
    for command in _mcp_commands(tmp_path, "full", unbuffered, server):
        result = full_stdout(command, unbuffered=unbuffered)
        # `pin` writes its manifest; `check` and help change nothing, and say so, as every
        # other command that changes nothing (decision 0215).
        said = MCP_LOST if command[1] == "pin" and "--help" not in command else NOTHING_CHANGED
        assert (command, result.returncode, result.stderr) == (command, 1, said)
    if unbuffered:  # the manifest was written before the report was lost
        assert (tmp_path / "full.json").exists()


def test_every_mcp_command_ends_quietly_when_its_reader_went_away(
    tmp_path: Path, unbuffered: bool, server: list[str]
) -> None:
    pytest.importorskip("mcp")
    for command in _mcp_commands(tmp_path, "closed", unbuffered, server):
        result = closed_stdout([sys.executable, "-m", "agentrt", *command], unbuffered=unbuffered)
        assert (command, result.returncode, result.stderr) == (command, 1, "")


def test_an_mcp_error_is_still_said_in_its_own_line(
    tmp_path: Path, unbuffered: bool, server: list[str]
) -> None:
    # What `agentrt mcp` says of a file it cannot read is unchanged by the above.
    missing = tmp_path / "missing.json"
    command = ["mcp", "check", "notes", "--manifest", str(missing), "--rules", str(missing)]
    result = full_stdout([*command, *server], unbuffered=unbuffered)
    assert result.returncode == 1
    assert result.stderr.startswith("agentrt mcp: ") and "missing.json" in result.stderr
    assert result.stderr.count("\n") == 1


# --- 2. a console stopped with its standard output full or closed --------------------------------


def _ignore_sigxfsz() -> None:
    # A write past RLIMIT_FSIZE then fails with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class _Console:
    """`agentrt console` serving `db` on a free port, deciding as `ops`."""

    def __init__(self, db: str, stdout: Any, *, unbuffered: bool) -> None:
        env = {k: v for k, v in clean_env().items() if k != "PYTHONUNBUFFERED"}
        if unbuffered:
            env["PYTHONUNBUFFERED"] = "1"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agentrt", "--db", db, "console", "--port", "0", "--by", "ops"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            preexec_fn=_ignore_sigxfsz,
        )
        self.base = ""

    def started(self, head: str) -> None:
        match = re.search(r"  open (http://127\.0\.0\.1:\d+)/\n", head)
        assert match, head
        self.base = match[1]

    def decide(self, run_id: str, verb: str) -> None:
        """Decide the run's approval through the console's own form, as a browser would."""
        assert self.post(self.form(run_id, verb)) == 303  # back to the run

    def form(self, run_id: str, verb: str) -> urllib.request.Request:
        """The run page's form that decides its approval (`verb`), filled as a browser does."""
        with urllib.request.urlopen(f"{self.base}/runs/{run_id}", timeout=30) as page:
            markup = page.read().decode()
        action = re.search(
            rf'action="(/runs/[^"]+/{verb})"|formaction="(/runs/[^"]+/{verb})"', markup
        )
        csrf = re.search(r'name="csrf" value="([^"]+)"', markup)
        shown_hash = re.search(r'name="hash" value="([^"]+)"', markup)
        assert action and csrf and shown_hash, markup
        form = f"csrf={csrf[1]}&hash={shown_hash[1]}&note=".encode()
        request = urllib.request.Request(
            self.base + (action[1] or action[2]),
            data=form,
            headers={"Origin": self.base, "Content-Type": "application/x-www-form-urlencoded"},
        )
        return request

    @staticmethod
    def post(request: urllib.request.Request) -> int:
        """The status the console answers a form with (its redirect not followed)."""

        class _NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=90) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as answered:  # a redirect not followed, or a refusal
            return answered.code
        except OSError:  # the console went away before it answered
            return 0

    def stop(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGINT)
        _, err = self.process.communicate(timeout=60)
        return self.process.returncode, err

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@pytest.fixture
def consoles() -> Iterator[list[_Console]]:
    started: list[_Console] = []
    yield started
    for console in started:
        console.kill()


AT = 1 << 30
"""Where the console's standard output starts in its (sparse) file: its size limit is set
past that offset, so that the database's files, far smaller, are not limited."""


def _printed(path: Path, ending: str, process: subprocess.Popen[str]) -> str:
    """What the console printed to the file `path` (from `AT`), once it ends with `ending`."""
    deadline = time.monotonic() + 60
    text = ""
    while time.monotonic() < deadline:
        with path.open("rb") as printed:
            printed.seek(AT)
            text = printed.read().decode()
        if text.endswith(ending):
            return text
        assert process.poll() is None, (text, process.communicate())
        time.sleep(0.05)
    raise AssertionError(f"the console did not print {ending!r}: {text!r}")


def _full_console(db: str, tmp_path: Path, unbuffered: bool, consoles: list[_Console]) -> _Console:
    """A console serving, its standard output a file that can take nothing more."""
    printed = tmp_path / "console.out"
    with printed.open("wb") as stdout:
        os.lseek(stdout.fileno(), AT, os.SEEK_SET)  # the console's writes start there
        console = _Console(db, stdout, unbuffered=unbuffered)
    consoles.append(console)
    console.started(_printed(printed, "  Ctrl-C stops it.\n", console.process))
    size = printed.stat().st_size
    resource.prlimit(console.process.pid, resource.RLIMIT_FSIZE, (size, size))
    return console


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_a_console_that_recorded_a_decision_says_so_when_its_stopped_line_is_lost(
    db_path: Path, tmp_path: Path, unbuffered: bool, consoles: list[_Console], verb: str
) -> None:
    pytest.importorskip("uvicorn")
    db = str(db_path)
    run = waiting_run(db)
    console = _full_console(db, tmp_path, unbuffered, consoles)
    console.decide(run.id, verb)
    approval = pending(db, run.id)
    assert approval.status == ("approved" if verb == "approve" else "rejected")
    assert console.stop() == (
        1,
        f"agentrt: approval {approval.id} of run {run.id} was {approval.status} by ops "
        "through the console, but its report could not be written to the standard output "
        "(File too large)\n",
    )


def test_a_console_that_recorded_several_decisions_counts_them(
    db_path: Path, tmp_path: Path, consoles: list[_Console]
) -> None:
    pytest.importorskip("uvicorn")
    db = str(db_path)
    first = waiting_run(db, prefix="a")
    second = waiting_run(db, prefix="b")
    console = _full_console(db, tmp_path, False, consoles)
    console.decide(first.id, "approve")
    console.decide(second.id, "reject")
    last = pending(db, second.id)
    assert console.stop() == (
        1,
        "agentrt: the console recorded 2 decisions (the last: approval "
        f"{last.id} of run {second.id} was rejected by ops), but its report could not be "
        "written to the standard output (File too large)\n",
    )


def test_a_console_that_decided_nothing_still_says_nothing_changed(
    db_path: Path, tmp_path: Path, unbuffered: bool, consoles: list[_Console]
) -> None:
    pytest.importorskip("uvicorn")
    db = str(db_path)
    run = waiting_run(db)
    console = _full_console(db, tmp_path, unbuffered, consoles)
    with urllib.request.urlopen(f"{console.base}/runs/{run.id}", timeout=30) as page:
        assert page.status == 200
    assert console.stop() == (1, NOTHING_CHANGED.replace(FULL, "File too large"))
    assert pending(db, run.id).status == "pending"


def test_a_console_whose_reader_went_away_after_a_decision_ends_quietly(
    db_path: Path, unbuffered: bool, consoles: list[_Console]
) -> None:
    # A closed pipe is quiet, as for every command (decision 0196): nothing untrue is said.
    pytest.importorskip("uvicorn")
    db = str(db_path)
    run = waiting_run(db)
    read_end, write_end = os.pipe()
    try:
        console = _Console(db, write_end, unbuffered=unbuffered)
    finally:
        os.close(write_end)
    consoles.append(console)
    with os.fdopen(read_end) as reader:
        console.started("".join(reader.readline() for _ in range(3)))  # all it prints
    console.decide(run.id, "approve")
    assert console.stop() == (1, "")
    assert pending(db, run.id).status == "approved"


# --- 3. a name in another script under an ASCII locale ------------------------------------------


def _ascii_env() -> dict[str, str]:
    env = {k: v for k, v in clean_env().items() if not k.startswith(("LC_", "PYTHONIO"))}
    env.update(LC_ALL="C", LANG="C", PYTHONUTF8="0")
    return env


def _agentrt_bytes(*args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentrt", *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env=_ascii_env(),
    )


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_a_name_typed_in_utf8_under_an_ascii_locale_is_recorded_exactly(
    db_path: Path, verb: str
) -> None:
    db = str(db_path)
    run = waiting_run(db)
    result = _agentrt_bytes(
        "--db", db, verb, run.id, "--yes", "--by", "josé".encode(), "--note", "über".encode()
    )
    assert (result.returncode, result.stderr) == (0, b"")
    approval = pending(db, run.id)
    assert (approval.decided_by, approval.note) == ("josé", "über")
    # Printed in the locale's ASCII, escaped, as every text is there.
    assert b"by jos\\xe9" in result.stdout


def test_a_cancel_by_a_name_in_utf8_under_an_ascii_locale_is_recorded_exactly(
    db_path: Path,
) -> None:
    db = str(db_path)
    run = waiting_run(db)
    result = _agentrt_bytes("--db", db, "--json", "cancel", run.id, "--by", "Zoë".encode())
    assert (result.returncode, result.stderr) == (0, b"")
    said = [json.dumps(e.payload, ensure_ascii=False) for e in events_of(db, run.id)]
    assert any('"Zoë"' in payload for payload in said), said


def test_a_name_whose_bytes_are_not_utf8_is_refused_in_one_line(db_path: Path) -> None:
    db = str(db_path)
    run = waiting_run(db)
    result = _agentrt_bytes("--db", db, "approve", run.id, "--yes", "--by", b"jos\xe9")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        b"agentrt: --by must be text: it holds \\udce9 at position 4, which is not a "
        b"character (bytes that are not UTF-8?)"
    )
    assert pending(db, run.id).status == "pending"


def _no_passwd_entry() -> list[str]:
    """`unshare` running a command as uid 4242, which has no entry in the password database
    (as a container started with `--user 4242`): the OS user's name is then `LOGNAME`'s.
    Skips where user namespaces cannot be made; fails instead when `CI` is set."""
    command = ["unshare", "--user", "--map-user=4242", "--"]
    try:
        probe = subprocess.run([*command, "true"], capture_output=True, timeout=30)
    except FileNotFoundError:
        _cannot_make_a_user("no unshare(1)")
    if probe.returncode != 0:
        _cannot_make_a_user(f"no user namespace here: {probe.stderr!r}")
    return command


def _cannot_make_a_user(said: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{said} (CI is set: it must not skip)")
    pytest.skip(said)


@pytest.mark.parametrize("unshare", [None, "exit 1"], ids=["missing", "refused"])
def test_the_os_user_name_test_fails_under_ci_where_it_cannot_make_a_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unshare: str | None
) -> None:
    """Under CI a test must not skip (as `support.postgres`, `support.disks`): a runner with
    no `unshare(1)`, or one that may not make a user namespace, skipped the test below in
    silence, and the OS user's name went unchecked there."""
    if unshare is not None:
        (tmp_path / "unshare").write_text(f"#!/bin/sh\necho no >&2\n{unshare}\n")
        (tmp_path / "unshare").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises((pytest.fail.Exception, pytest.skip.Exception)) as ended:
        _no_passwd_entry()
    assert ended.type is pytest.fail.Exception, ended.value
    assert str(ended.value).endswith("(CI is set: it must not skip)")


@pytest.mark.parametrize("command", ["approve", "reject", "cancel", "console"])
def test_an_os_user_name_that_is_not_utf8_is_refused_naming_it_and_how_to_pass_by(
    db_path: Path, command: str
) -> None:
    """No --by given, and the OS user's name is bytes that are not UTF-8: the refusal said
    "--by must be text" of an option nobody passed. It names the OS user's name, and --by
    as the way to record another name (decision 0215); nothing is decided."""
    if command == "console":
        pytest.importorskip("uvicorn")
    db = str(db_path)
    run = waiting_run(db)
    words = {"approve": [run.id, "--yes"], "reject": [run.id, "--yes"], "cancel": [run.id]}
    env: dict[bytes, bytes] = {os.fsencode(k): os.fsencode(v) for k, v in _ascii_env().items()}
    env[b"LOGNAME"] = b"jos\xe9"
    argv = [sys.executable, "-m", "agentrt", "--db", db, command, *words.get(command, [])]
    result = subprocess.run(
        [*_no_passwd_entry(), *argv],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env=env,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        b"agentrt: the OS user's name (the default for --by) must be text: it holds \\udce9 "
        b"at position 4, which is not a character (bytes that are not UTF-8?); pass --by NAME "
        b"to record another name"
    )
    assert pending(db, run.id).status == "pending"


def _db_handles(pid: int, db: str) -> int:
    """How many of the process's open files are the database file itself."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(fd) == db
    return count


def test_a_decision_in_flight_when_the_console_is_stopped_is_said_as_it_ended(
    db_path: Path, tmp_path: Path, consoles: list[_Console]
) -> None:
    # A decision whose commit waits on the database's write lock when Ctrl-C comes, past
    # uvicorn's graceful shutdown (2 s): the console said "nothing was changed", then its
    # worker thread committed the decision before the process ended. It now waits for the
    # decision it is committing before its last line, which says how it ended: recorded,
    # or (the lock held past the busy timeout) not, and nothing changed.
    pytest.importorskip("uvicorn")
    if not Path(f"/proc/{os.getpid()}/fd").is_dir():
        pytest.skip("needs /proc to see the console open the database for the decision")
    db = str(db_path.resolve())
    run = waiting_run(db)
    console = _full_console(db, tmp_path, False, consoles)
    form = console.form(run.id, "approve")
    before = _db_handles(console.process.pid, db)
    holder = sqlite3.connect(db, isolation_level=None, timeout=60)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock: the decision waits for it
        answered: list[object] = []
        posting = threading.Thread(target=lambda: answered.append(console.post(form)))
        posting.start()
        deadline = time.monotonic() + 60
        while _db_handles(console.process.pid, db) <= before:  # the decision opened its store
            assert time.monotonic() < deadline, "the console never began the decision"
            assert console.process.poll() is None
            time.sleep(0.01)
        console.process.send_signal(signal.SIGINT)
        assert console.process.stderr is not None
        said: list[str] = []
        for line in console.process.stderr:  # uvicorn gives up on the request: 2 s
            said.append(line)
            if "timeout graceful shutdown exceeded" in line:
                break
        holder.execute("COMMIT")
    finally:
        holder.close()
    rest = console.process.communicate(timeout=60)[1]
    posting.join(60)
    last = ("".join(said) + rest).splitlines()[-1]
    approval = pending(db, run.id)
    if approval.status == "approved":
        assert last == (
            f"agentrt: approval {approval.id} of run {run.id} was approved by ops through the "
            "console, but its report could not be written to the standard output "
            "(File too large)"
        )
    else:  # the lock was held past the decision's busy timeout: nothing was decided
        assert approval.status == "pending"
        assert last + "\n" == NOTHING_CHANGED.replace(FULL, "File too large")
    assert console.process.returncode == 1


# --- 2b. a console decision whose commit's outcome is unknown -----------------------------------


@pytest.mark.parametrize("verb", ["approve", "reject", "cancel"])
def test_a_console_decision_whose_commit_is_unknown_is_said_as_perhaps_made(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    # A commit that failed in a way that leaves unknown whether it was made (an I/O error at
    # SQLite's COMMIT, a PostgreSQL connection lost during it) was answered "Nothing was
    # decided: ... whether it is in the file is unknown", and `recorded` was not told, so a
    # lost last line said "nothing was changed". Here the commit was in fact made.
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from agentrt import _operator
    from agentrt._errors import commit_unknown
    from agentrt.console import ConsoleConfig, create_app

    db = str(db_path)
    run = waiting_run(db)
    approval = pending(db, run.id)
    real = getattr(_operator, verb)

    def made_but_unknown(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise commit_unknown("commit failed: the disk reported an I/O error; whether it is unknown")

    monkeypatch.setattr(_operator, verb, made_but_unknown)
    told: list[tuple[str, bool]] = []
    config = ConsoleConfig(db_path=db, by="ops")
    base = "http://127.0.0.1:8765"
    with TestClient(
        create_app(config, recorded=lambda *said: told.append(said)), base_url=base
    ) as client:
        form = {"csrf": config.csrf, "note": "", "hash": approval.hash}
        path = (
            f"/runs/{run.id}/cancel"
            if verb == "cancel"
            else f"/runs/{run.id}/approvals/{approval.id}/{verb}"
        )
        answer = client.post(path, data=form, headers={"Origin": base}, follow_redirects=False)
        assert answer.status_code == 503
        assert "Nothing was decided" not in answer.text and "Not cancelled" not in answer.text
        assert "unknown" in answer.text
        client.get("/").raise_for_status()
    done = {"approve": "approved", "reject": "rejected", "cancel": "cancelled"}[verb]
    assert told == [
        (
            f"run {run.id} may have been cancelled by ops"
            if verb == "cancel"
            else f"approval {approval.id} of run {run.id} may have been {done} by ops",
            False,
        )
    ]


def test_a_console_counts_the_decisions_perhaps_made_apart() -> None:
    from types import SimpleNamespace

    from agentrt.cli._launch import _Recorded

    out = SimpleNamespace(done=None)
    recorded = _Recorded(out)  # type: ignore[arg-type]
    recorded("approval A of run R may have been approved by ops", False)
    assert out.done == "approval A of run R may have been approved by ops through the console"
    recorded("approval B of run S was rejected by ops", True)
    assert out.done == (
        "the console recorded 1 decision (and perhaps 1 more, their commits' outcome unknown) "
        "(the last: approval B of run S was rejected by ops)"
    )
    recorded("run T was cancelled by ops", True)
    assert out.done == (
        "the console recorded 2 decisions (and perhaps 1 more, their commits' outcome unknown) "
        "(the last: run T was cancelled by ops)"
    )


def test_a_name_with_utf8_and_a_byte_that_is_not_is_refused_naming_that_byte(
    db_path: Path,
) -> None:
    # `josé` in UTF-8, then one Latin-1 byte: the refusal named `\udcc3`, the first byte of
    # the `é` that is valid UTF-8, at position 4; it now names the byte that is not UTF-8.
    db = str(db_path)
    run = waiting_run(db)
    result = _agentrt_bytes(
        "--db", db, "approve", run.id, "--yes", "--by", "josé".encode() + b"\xe9"
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        b"agentrt: --by must be text: it holds \\udce9 at position 5, which is not a "
        b"character (bytes that are not UTF-8?)"
    )
    assert pending(db, run.id).status == "pending"
