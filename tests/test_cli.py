"""The `agentrt` command, driven as a user would: real processes, real databases, a real terminal.

Databases are made by real runs (Driver + ScriptedAgent) unless a test needs
rows no run can make (a tampered chain, a second pending approval, 10,000
steps), which it then writes with SQL and says so.

A test that takes `database` runs on SQLite and on PostgreSQL (the listings, `show`,
deciding, cancelling, the cursor, hostile text). The rest stay on SQLite, each for one of
these reasons: `events` and `verify` pin one chain's seqs (1, 2, 3...) and SQLite's
`integrity_check` line, where PostgreSQL pages by partition (test_cli_postgres.py reads
a run through every read command on both and compares them); the 10,000-step record is
written with SQLite's SQL by the benchmark's builder; a file that is missing, unsafe or
left byte for byte unchanged; the terminal's own rules (its width, an answer typed early
or refused before the store is read); the interpreter's start; `--follow`, which
test_cli_postgres.py follows on PostgreSQL.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import pty
import pwd
import queue
import re
import select
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from shlex import quote
from typing import Any
from unittest import mock

import pytest

import agentrt
import agentrt._tools
from agentrt import Decision, SideEffect, ToolCall, ToolResult
from agentrt._approval import approval_hash
from agentrt._clock import format_time
from agentrt._policy import SideEffectPolicy, need_approval
from agentrt._render_approval import approval_fields, hashed_content
from agentrt._store.sqlite import SqliteStore as Store
from agentrt.cli import main
from agentrt.scripted import ScriptedAgent
from agentrt.trace import display_width, event_json
from conftest import FakeClock, Ids, RecordingTool
from support import forkserver
from support.rows import execute

MESSAGE_SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
    "additionalProperties": False,
}


# --- making databases ---------------------------------------------------------------------------


def send_tool(result: Any = None) -> RecordingTool:
    return RecordingTool("send", SideEffect.REMOTE_MUTATION, schema=MESSAGE_SCHEMA, result=result)


def lookup_tool() -> RecordingTool:
    return RecordingTool("lookup", SideEffect.READ_ONLY)


def driver(db: Path | str, decisions: Sequence[Decision], prefix: str, tools: Sequence[Any]) -> Any:
    return agentrt.Driver(
        store=agentrt.open_store(db),
        agent=ScriptedAgent(list(decisions)),
        policy=agentrt.default_policy(),
        tools=list(tools),
        now=FakeClock(),
        new_id=Ids(prefix),
    )


def drive(
    db: Path | str, decisions: Sequence[Decision], *, prefix: str, goal: str = "a goal"
) -> agentrt.Run:
    d = driver(db, decisions, prefix, [lookup_tool(), send_tool()])
    try:
        run: agentrt.Run = d.start_sync(goal)
        return run
    finally:
        d.store.close()


def waiting_run(
    db: Path | str, *, prefix: str = "a", goal: str = "send the report", body: str = "hello"
) -> agentrt.Run:
    """A run that looked something up, then asked to send a message: WAITING on one approval."""
    return drive(
        db,
        [
            Decision.tool_call("lookup", {"x": 1}),
            Decision.tool_call("send", {"to": "bob@example.com", "body": body}),
            Decision.complete({"sent": True}),
        ],
        prefix=prefix,
        goal=goal,
    )


def pending(db: Path | str, run_id: str) -> agentrt.Approval:
    with agentrt.open_existing(db, read_only=True) as store:
        (approval,) = store.list_approvals(run_id)
        return approval


def events_of(db: Path | str, run_id: str | None = None) -> list[agentrt.Event]:
    with agentrt.open_existing(db, read_only=True) as store:
        return store.list_events(run_id, 0, 100_000)


# --- running the command ------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTRT_DB", "COLUMNS", "LINES")}
    env["PYTHONIOENCODING"] = "utf-8"
    env.update(extra)
    return env


def agentrt_cmd(*args: str, env: dict[str, str] | None = None) -> forkserver.Done:
    """The real command in a process of its own, stdin closed, stdout and stderr piped.

    The process is forked from one that has imported the CLI once
    (tests/support/forkserver.py); what the interpreter's own start does is judged
    by the tests that run `python -m agentrt` with `subprocess` (the import tests,
    `test_python_dash_m_and_main_agree`).
    """
    return forkserver.run(
        [sys.executable, "-m", "agentrt", *args],
        preload=PRELOAD,
        env=env or clean_env(),
        timeout=60,
    )


PRELOAD = forkserver.CLI


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The command in this process (for what needs no process of its own)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


PROMPT = b"anything else refuses: "


def _read_until(fd: int, marker: bytes | None, timeout: float = 30) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    while marker is None or marker not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out waiting for {marker!r}; got {data!r}")
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the other side of the terminal closed
            chunk = b""
        if not chunk:
            if marker is None:
                return data
            raise AssertionError(f"the command ended before {marker!r}; got {data!r}")
        data += chunk
    return data


def at_terminal(
    args: Sequence[str],
    answer: bytes | None = None,
    *,
    prompt: bool = True,
    before_answer: Callable[[], None] | None = None,
    columns: int = 200,
) -> tuple[int, str]:
    """The real command at a pseudo-terminal; types `answer` at the prompt (None: Ctrl-D)."""
    env = clean_env(COLUMNS=str(columns), LINES="50")
    pid, fd = pty.fork()
    if pid == 0:  # the child: becomes the command, with the terminal as stdin/stdout/stderr
        try:
            os.execve(sys.executable, [sys.executable, "-m", "agentrt", *args], env)
        finally:
            os._exit(127)
    try:
        output = b""
        if prompt:
            output = _read_until(fd, PROMPT)
            if before_answer is not None:
                before_answer()
            os.write(fd, b"\x04" if answer is None else answer)
        output += _read_until(fd, None)
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode("utf-8").replace("\r\n", "\n")


# --- runs ---------------------------------------------------------------------------------------


def test_runs_prints_runs_newest_first_with_totals_and_the_waiting_approval(
    database: str,
) -> None:
    first = waiting_run(database, prefix="a", goal="first")
    second = drive(database, [Decision.complete({"ok": True})], prefix="b", goal="second")
    result = agentrt_cmd("--db", database, "runs")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        "RUN                               STATUS                LEASE  ORIGIN  REASON          "
        "STEPS  MODEL CALLS  TOKENS       COST  WAITING               GOAL",
        f"{second.id}  COMPLETED             -      driver  goal_completed      1            0  "
        "     0  $0.000000  -                     second",
        f"{first.id}  WAITING_FOR_APPROVAL  -      driver  -                   2            0  "
        "     0  $0.000000  remote_mutation send  first",
        "runs 1-2 of 2, newest first",
    ]


def test_runs_json_is_one_document_with_totals(database: str) -> None:
    run = waiting_run(database)
    result = agentrt_cmd("runs", "--json", "--db", database)  # options after the command
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["total"], doc["offset"], doc["limit"], doc["next_offset"]) == (1, 0, 50, None)
    (summary,) = doc["runs"]
    assert summary["id"] == run.id and summary["status"] == "WAITING_FOR_APPROVAL"
    approval = pending(database, run.id)
    assert summary["waiting"] == [
        {
            "id": approval.id,
            "kind": "remote_mutation",
            "tool": "send",
            "hash": approval.hash,
            "created_at": format_time(approval.created_at),
            "expires_at": "",
        }
    ]


def test_the_database_comes_from_agentrt_db_unless_db_is_given(
    database: str, tmp_path: Path
) -> None:
    run = waiting_run(database)
    from_env = agentrt_cmd("--json", "runs", env=clean_env(AGENTRT_DB=database))
    assert from_env.returncode == 0, from_env.stderr
    assert [r["id"] for r in json.loads(from_env.stdout)["runs"]] == [run.id]
    other = tmp_path / "other.db"
    drive(other, [Decision.complete()], prefix="c")
    overridden = agentrt_cmd(
        "--json", "runs", "--db", str(other), env=clean_env(AGENTRT_DB=database)
    )
    assert [r["id"] for r in json.loads(overridden.stdout)["runs"]] == ["c" + "0" * 30 + "1"]


def test_runs_filters_by_status_and_says_how_to_page(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for prefix in "123":
        waiting_run(database, prefix=prefix)
    drive(database, [Decision.complete()], prefix="4")
    code, out, _ = run_main(
        capsys, "--db", database, "runs", "--status", "waiting_for_approval", "--limit", "2"
    )
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[1:3]] == ["3" + "0" * 30 + "1", "2" + "0" * 30 + "1"]
    assert lines[3] == (
        "runs 1-2 of 3 with status WAITING_FOR_APPROVAL, newest first; next page: "
        f"agentrt --db {quote(database)} runs --offset 2 --limit 2 --status WAITING_FOR_APPROVAL"
    )
    code, out, _ = run_main(capsys, "--db", database, "runs", "--offset", "9")
    assert (code, out) == (0, "no runs at offset 9; there are 4\n")


# --- show ---------------------------------------------------------------------------------------


def test_show_puts_the_waiting_approval_first_then_the_run_and_its_steps(database: str) -> None:
    run = waiting_run(database)
    approval = pending(database, run.id)
    result = agentrt_cmd("show", run.id, "--db", database)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"WAITING FOR APPROVAL {approval.id}",
        "  kind     remote_mutation",
        "  tool     send",
        f"  hash     {approval.hash}",
        "  created  2026-11-30T09:00:00.008000Z",
        "  expires  never",
        f"  decide   agentrt --db {quote(database)} approve {run.id}   or   "
        f"agentrt --db {quote(database)} reject {run.id}",
        "",
        f"run       {run.id}",
        "goal      send the report",
        "status    WAITING_FOR_APPROVAL",
        "origin    driver",
        "reason    -",
        "created   2026-11-30T09:00:00.001000Z",
        "started   2026-11-30T09:00:00.001000Z",
        "finished  -",
        "totals    2 steps, 0 model calls, 0 tokens (input 0, output 0, cached 0), "
        "cost $0.000000, active 0.007s",
        "",
        "steps 0-1 of 2 (by index, from 0)",
        "IDX  STATUS             DECISION" + " " * 38 + "POLICY" + " " * 21 + "OBSERVATION",
        '0    done               lookup {"x":1}'
        + " " * 32
        + "allow"
        + " " * 22
        + "tool_result: lookup ok",
        '1    awaiting_approval  send {"body":"hello","to":"bob@example.com"}  '
        "approval: remote_mutation  -",
    ]


def test_show_json_has_the_whole_approval_and_full_steps(database: str) -> None:
    run = waiting_run(database)
    result = agentrt_cmd("--json", "--db", database, "show", run.id)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    (approval,) = doc["waiting"]
    assert approval["hash"] == pending(database, run.id).hash
    assert approval["request"]["args"] == {"to": "bob@example.com", "body": "hello"}
    assert [s["decision"]["kind"] for s in doc["steps"]] == ["tool_call", "tool_call"]
    assert (doc["steps_total"], doc["steps_offset"]) == (2, 0)


def test_text_cut_at_the_read_cap_is_shown_as_cut_never_as_whole(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    goal = "G" * 100 + "m" * 70_000 + "DELETE EVERYTHING"
    detail = "D" * 100 + "x" * 70_000 + "TAIL"
    run = drive(database, [Decision.fail(detail)], prefix="a", goal=goal)
    db = database
    code, out, _ = run_main(capsys, "--db", db, "show", run.id)
    assert code == 0
    fields = dict(line.split(None, 1) for line in out.splitlines()[:6] if line)
    # The store read 65,536 characters: the head is shown, never a "tail" that is the cap's end.
    assert fields["goal"] == (f'"{"G" * 80}" … (70,117 chars; the first 65,536 read, 80 shown)')
    assert fields["detail"] == (
        f'"{"D" * 100}{"x" * 300}" … (70,104 chars; the first 65,536 read, 400 shown)'
    )
    assert "DELETE" not in out and "TAIL" not in out and "not shown" not in out
    code, out, _ = run_main(capsys, "--db", db, "runs")
    assert code == 0
    assert out.splitlines()[1].endswith("m … (70,117 chars; the first 4,096 read)")
    code, out, _ = run_main(capsys, "--db", db, "--json", "runs")
    (listed,) = json.loads(out)["runs"]
    assert listed["goal"] == {"truncated": True, "length": 70_117, "head": goal[:4096]}
    assert listed["reason_detail"] == {
        "truncated": True,
        "length": 70_104,
        "head": detail[:4096],
    }
    code, out, _ = run_main(capsys, "--db", db, "--json", "show", run.id)
    shown_run = json.loads(out)["run"]
    assert shown_run["goal"] == {"truncated": True, "length": 70_117, "head": goal[:65_536]}
    assert shown_run["reason_detail"]["length"] == 70_104
    assert shown_run["status"] == "FAILED"


def test_show_of_an_unknown_run_fails_naming_the_database(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    waiting_run(database)
    code, out, err = run_main(capsys, "--db", database, "show", "0" * 32)
    assert (code, out, err) == (1, "", f"agentrt: {database}: no run '{'0' * 32}'\n")


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (("show", "0" * 32), f"no run '{'0' * 32}'"),
        (("events", "0" * 32), f"no run '{'0' * 32}'"),
        (("events", "12345678"), "no run id starts with 12345678"),
        (("approve", "0" * 32, "--yes"), f"no run '{'0' * 32}'"),
        (("reject", "12345678", "--yes"), "no run id starts with 12345678"),
        (("cancel", "0" * 32), f"no run '{'0' * 32}'"),
        (("approve", "RUN", "--approval", "nope", "--yes"), "no approval 'nope' in run 'RUN'"),
        (("reject", "RUN", "--approval", "0" * 32), f"no approval '{'0' * 32}' in run 'RUN'"),
    ],
)
def test_every_command_that_finds_no_run_or_approval_names_the_database_it_looked_in(
    database: str,
    capsys: pytest.CaptureFixture[str],
    words: tuple[str, ...],
    message: str,
) -> None:
    run = waiting_run(database)
    args = [w.replace("RUN", run.id) for w in words]
    code, out, err = run_main(capsys, "--db", database, *args)
    assert (code, out, err) == (1, "", f"agentrt: {database}: {message.replace('RUN', run.id)}\n")
    with agentrt.open_existing(database, read_only=True) as store:
        assert store.get_run(run.id).status == "WAITING_FOR_APPROVAL"


def test_a_database_named_with_control_characters_is_named_escaped_when_no_run_is_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The name in front of a not-found error is the path as given, escaped like any text
    printed: an escape sequence or a newline in it reaches the terminal as `\\x1b`, `\\n`."""
    database = str(tmp_path / "we\x1b[31mird\nname\u202e.db")
    assert run_main(capsys, "--db", database, "migrate")[0] == 0
    code, out, err = run_main(capsys, "--db", database, "show", "0" * 32)
    shown = database.replace("\x1b", "\\x1b").replace("\n", "\\n").replace("\u202e", "\\u202e")
    assert (code, out, err) == (1, "", f"agentrt: {shown}: no run '{'0' * 32}'\n")


def _scale_builder() -> types.ModuleType:
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "cli_scale.py"
    spec = importlib.util.spec_from_file_location("cli_scale", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """120 small runs and one of 10,000 steps, written with SQL by the benchmark's builder."""
    path = tmp_path_factory.mktemp("scale") / "scale.db"
    big, _ = _scale_builder().build(str(path), runs=120, steps=10_000)
    return path, big


class PageSpy:
    """Records the page sizes the store is asked for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, Any]] = []
        for name in ("list_steps", "list_runs", "list_events"):
            original = getattr(Store, name)
            monkeypatch.setattr(Store, name, self._wrap(name, original))

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def spy(store: Store, *args: Any, **kwargs: Any) -> Any:
            rows = original(store, *args, **kwargs)
            self.calls.append((name, len(rows)))
            return rows

        return spy


def test_show_of_a_10000_step_run_prints_one_bounded_page(
    big_db: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, big = big_db
    spy = PageSpy(monkeypatch)
    code, out, err = run_main(capsys, "--db", str(path), "show", big)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    start = lines.index("steps 9950-9999 of 10,000 (by index, from 0)")
    table = lines[start + 2 : -1]
    assert [int(line.split()[0]) for line in table] == list(range(9950, 10_000))
    assert lines[-1] == (
        f"showing 50 of 10,000 steps; see others with agentrt --db {path} show {big} --offset N "
        "[--limit N] (at most 1000)"
    )
    assert spy.calls == [("list_steps", 50)]  # only the page printed was read
    code, out, _ = run_main(capsys, "--db", str(path), "show", big, "--offset", "0", "--limit", "3")
    assert [line.split()[0] for line in out.splitlines()[-4:-1]] == ["0", "1", "2"]


def test_runs_on_a_big_database_reads_one_page(
    big_db: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, big = big_db
    spy = PageSpy(monkeypatch)
    code, out, _ = run_main(capsys, "--db", str(path), "runs")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 52 and lines[1].split()[0] == big
    assert lines[-1] == (
        f"runs 1-50 of 121, newest first; next page: agentrt --db {path} runs --offset 50"
    )
    assert spy.calls == [("list_runs", 50)]


# --- events -------------------------------------------------------------------------------------


def test_events_prints_the_audit_log_as_text_or_json_lines(db_path: Path) -> None:
    run = waiting_run(db_path)
    stored = events_of(db_path, run.id)
    as_json = agentrt_cmd("--db", str(db_path), "--json", "events", run.id)
    assert as_json.returncode == 0, as_json.stderr
    assert [json.loads(line) for line in as_json.stdout.splitlines()] == [
        json.loads(json.dumps(event_json(e))) for e in stored
    ]
    text = agentrt_cmd("--db", str(db_path), "events", run.id, "--limit", "3")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["SEQ", "AT", "STEP", "TYPE", "PAYLOAD"]
    assert [line.split()[:2] for line in lines[1:4]] == [
        ["1", "2026-11-30T09:00:00.001000Z"],
        ["2", "2026-11-30T09:00:00.001000Z"],
        ["3", "2026-11-30T09:00:00.002000Z"],
    ]
    assert [line.split()[3] for line in lines[3:4]] == ["step.started"]
    assert lines[4] == (
        f"more events after seq 3: agentrt --db {db_path} events {run.id} --after 3"
    )
    after = agentrt_cmd("--db", str(db_path), "--json", "events", run.id, "--after", "3")
    assert [json.loads(line)["seq"] for line in after.stdout.splitlines()] == [
        e.seq for e in stored[3:]
    ]


class InterruptingStream:
    """A stdout that receives Ctrl-C (a real SIGINT) while the `at`-th line is printed."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        self.lines.extend(text.splitlines())
        if len(self.lines) == self.at:
            signal.raise_signal(signal.SIGINT)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_ctrl_c_during_events_with_a_cursor_delivers_each_event_once(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = waiting_run(database)
    expected = [e.seq for e in events_of(database, run.id)]
    cursor = tmp_path / "cursor"
    printed: list[int] = []
    for at in (4, 0):  # interrupted while printing the fourth event; then to the end
        stream = InterruptingStream(at)
        monkeypatch.setattr(sys, "stdout", stream)
        code = main(["--db", database, "--json", "events", run.id, "--cursor", str(cursor)])
        monkeypatch.undo()
        # Ctrl-C is a clean stop: the page being printed is finished and acknowledged.
        assert code == 0
        printed += [json.loads(line)["seq"] for line in stream.lines]
    assert printed == expected


@pytest.mark.slow
def test_follow_shows_events_of_a_run_in_another_process_as_they_commit(db_path: Path) -> None:
    run = waiting_run(db_path)
    with agentrt.open_existing(db_path) as store:
        agentrt.approve(store, run.id, pending(db_path, run.id).id, by="ann")
        head, _ = store.chain_head()
    follower = subprocess.Popen(
        [sys.executable, "-m", "agentrt", "--db", str(db_path), "events", run.id, "--follow",
         "--json", "--after", str(head), "--interval", "0.05", "--timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in follower.stdout or ():
            lines.put(line)

    reader = threading.Thread(target=read)
    reader.start()

    def next_event(type: str) -> dict[str, Any]:
        while True:
            event: dict[str, Any] = json.loads(lines.get(timeout=30))
            if event["type"] == type:
                return event

    release = threading.Event()

    def blocked(call: ToolCall) -> ToolResult:
        assert release.wait(30)
        return ToolResult({"sent": True}, "sent")

    resumer = driver(
        db_path,
        [
            Decision.tool_call("lookup", {"x": 1}),
            Decision.tool_call("send", {}),
            Decision.complete(),
        ],
        "e",
        [lookup_tool(), send_tool(result=blocked)],
    )
    resuming = threading.Thread(target=resumer.resume_sync, args=(run.id,))
    try:
        resuming.start()
        started = next_event("step.tool_started")
        # The tool is still running: the follower saw the commit, not the finished run.
        assert resuming.is_alive()
        assert started["payload"]["tool"] == "send"
        release.set()
        resuming.join(30)
        finished = next_event("run.finished")
        assert finished["payload"]["status"] == "COMPLETED"
    finally:
        release.set()
        resuming.join(30)
        follower.terminate()  # a clean stop, as Ctrl-C would be
        follower.wait(30)
        reader.join(30)
        resumer.store.close()
    with follower:  # its pipes, closed once read
        assert follower.returncode == 0
        assert follower.stderr is not None and follower.stderr.read() == ""


# --- approve and reject -------------------------------------------------------------------------


def test_approve_yes_prints_what_a_person_decides_on_first_and_binds_the_decision(
    database: str,
) -> None:
    run = waiting_run(database)
    approval = pending(database, run.id)
    result = agentrt_cmd(
        "--db", database, "approve", run.id, "--yes", "--by", "ann", "--note", "fine"
    )
    assert result.returncode == 0, result.stderr
    # The tool, each argument once (its exact JSON literal), why, what approving and
    # rejecting do, the hash; the full hashed view only with --full.
    assert result.stdout.splitlines() == [
        f"Run {run.id} waits for approval {approval.id}.",
        "  tool       send (remote_mutation)",
        "  arguments",
        '    body  "hello"',
        '    to    "bob@example.com"',
        "  why asked  \"tool 'send' changes a remote system; a person must approve it\"",
        "  approving  lets the run call send once with exactly these arguments, when the "
        "program that owns the run resumes it",
        "  rejecting  cancels the run; send is not called",
        "  asked      2026-11-30T09:00:00.008000Z",
        "  expires    never",
        f"  hash       {approval.hash}",
        "",
        "Every field exactly as it is hashed, one a line: add --full.",
        f"approved: approval {approval.id} of run {run.id} (hash {approval.hash}), by ann",
        "The run stays WAITING_FOR_APPROVAL until the program that owns it resumes it: "
        "Driver.resume (or Driver.recover) or Gate.attach.",
    ]
    decided = pending(database, run.id)
    assert (decided.status, decided.decided_by, decided.note) == ("approved", "ann", "fine")
    # The approval is the one a resume honours: the tool runs once.
    send = send_tool()
    resumer = driver(database, [Decision.complete()] * 3, "e", [lookup_tool(), send])
    try:
        assert resumer.resume_sync(run.id).status == "COMPLETED"
    finally:
        resumer.store.close()
    assert [c.args for c in send.calls] == [{"to": "bob@example.com", "body": "hello"}]


def test_approve_full_prints_every_hashed_field_after_the_summary_with_durations_in_units(
    database: str,
) -> None:
    run = waiting_run(database)
    approval = pending(database, run.id)
    result = agentrt_cmd("--db", database, "approve", run.id, "--yes", "--full")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    heading = lines.index("What you approve, one field a line, exactly as the hash covers it:")
    assert lines.index(f"  hash       {approval.hash}") < heading  # the summary comes first
    assert "Every field exactly as it is hashed, one a line: add --full." not in lines
    fields = lines[heading + 1 : lines.index(f"hash  {approval.hash}")]
    assert fields[0] == "  capability                                      {…} (object, 2 keys)"
    assert '  request.args.body                               "hello" (string, 5 chars)' in fields
    assert "  request.args                                    {…} (object, 2 keys)" in fields
    # A duration the runtime hashes in nanoseconds shows its unit beside the integer.
    assert "  request.spec.timeout                            5000000000 (5 s)" in fields
    assert len(fields) == len(list(approval_fields(hashed_content(approval)))) - 1
    assert lines[-2].startswith(f"approved: approval {approval.id} of run {run.id}")


def test_reject_named_approval_cancels_the_run(database: str) -> None:
    run = waiting_run(database)
    approval = pending(database, run.id)
    result = agentrt_cmd(
        "reject", run.id, "--approval", approval.id, "--note", "not today", "--db", database
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == [
        f"rejected: approval {approval.id} of run {run.id} (hash {approval.hash}), "
        f"by {pwd.getpwuid(os.geteuid()).pw_name}",
        "The run is now CANCELLED (approval_rejected).",
    ]
    with agentrt.open_existing(database, read_only=True) as store:
        assert (store.get_run(run.id).status, store.get_run(run.id).reason) == (
            "CANCELLED",
            "approval_rejected",
        )
    assert pending(database, run.id).note == "not today"


def test_approve_without_a_terminal_refuses_and_changes_nothing(database: str) -> None:
    run = waiting_run(database)
    result = agentrt_cmd("--db", database, "approve", run.id)
    assert result.returncode == 1
    assert result.stderr == (
        "agentrt: not approved: there is no terminal to ask at, and nothing was decided; "
        "pass --yes (or --approval ID) to approve without being asked\n"
    )
    assert "hash  " in result.stdout  # it showed the request; it did not decide it
    assert pending(database, run.id).status == "pending"


def test_approve_y_at_a_terminal_approves(database: str) -> None:
    run = waiting_run(database)
    approval = pending(database, run.id)
    code, screen = at_terminal(["--db", database, "approve", run.id, "--by", "ann"], b"y\n")
    assert code == 0, screen
    assert f"  hash       {approval.hash}\n" in screen
    assert (
        f"Approve this request (hash {approval.hash[:16]}…)? "
        "Type y to approve, anything else refuses: y\n"
    ) in screen
    assert f"approved: approval {approval.id} of run {run.id}" in screen
    assert pending(database, run.id).status == "approved"


@pytest.mark.parametrize(
    ("answer", "said"), [(b"n\n", "the answer was not y"), (None, "no answer (end of input)")]
)
def test_anything_but_y_at_a_terminal_refuses(
    db_path: Path, answer: bytes | None, said: str
) -> None:
    run = waiting_run(db_path)
    code, screen = at_terminal(["--db", str(db_path), "reject", run.id], answer)
    assert code == 1, screen
    assert f"agentrt: not rejected: {said}; nothing was decided\n" in screen
    assert pending(db_path, run.id).status == "pending"


def test_a_change_after_the_request_was_shown_is_refused_not_applied(database: str) -> None:
    run = waiting_run(database)
    shown = pending(database, run.id)

    def change_it() -> None:
        # Someone rewrites the request while the operator reads it, with a hash that matches.
        presentation = {"tool": "send", "args": {"to": "mallory@example.com"}}
        new_hash = approval_hash(shown.kind, shown.capability, presentation, shown.request)
        execute(
            database,
            "UPDATE approvals SET presentation_json = ?, hash = ? WHERE id = ?",
            (json.dumps(presentation), new_hash, shown.id),
        )

    code, screen = at_terminal(
        ["--db", database, "approve", run.id], b"y\n", before_answer=change_it
    )
    assert code == 1, screen
    assert (
        f"agentrt: refused, nothing was decided: approval {shown.id} changed since it was shown"
        in screen
    )
    after = pending(database, run.id)
    assert after.status == "pending" and after.hash != shown.hash


def test_a_tampered_approval_is_refused_before_it_is_shown(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = waiting_run(database)
    execute(database, "UPDATE approvals SET request_json = replace(request_json, 'bob@', 'eve@')")
    code, out, err = run_main(capsys, "--db", database, "approve", run.id, "--yes")
    assert (code, out) == (1, "")
    assert err.startswith("agentrt: refused, nothing was decided: approval ")
    assert "no longer matches its hash" in err
    assert pending(database, run.id).status == "pending"


def test_approve_json_needs_yes_or_a_named_approval(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = waiting_run(database)
    code, _, err = run_main(capsys, "--db", database, "--json", "approve", run.id)
    assert code == 2
    assert "approve --json does not ask at a terminal: pass --yes or --approval ID" in err
    approval = pending(database, run.id)
    code, out, _ = run_main(
        capsys,
        "--db",
        database,
        "--json",
        "approve",
        run.id,
        "--approval",
        approval.id,
        "--by",
        "ann",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["decision"] == "approved" and doc["approval"]["decided_by"] == "ann"
    assert doc["run"]["status"] == "WAITING_FOR_APPROVAL"


def test_by_defaults_to_the_os_user(
    database: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = waiting_run(database)
    # LOGNAME and USER are whatever the environment says; the label is the uid's name.
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "mallory")
    code, _, _ = run_main(capsys, "--db", database, "approve", run.id, "--yes")
    assert code == 0
    assert pending(database, run.id).decided_by == pwd.getpwuid(os.geteuid()).pw_name != "mallory"


def test_hash_option_must_match(database: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = waiting_run(database)
    code, _, err = run_main(
        capsys, "--db", database, "approve", run.id, "--yes", "--hash", "0" * 64
    )
    assert code == 1 and f"not the {'0' * 64} given with --hash" in err
    code, _, _ = run_main(
        capsys,
        "--db",
        database,
        "approve",
        run.id,
        "--yes",
        "--hash",
        pending(database, run.id).hash,
    )
    assert code == 0


def test_an_ambiguous_run_names_its_candidates(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = waiting_run(database)
    first = pending(database, run.id)
    execute(  # a second pending approval: rows no single run makes
        database,
        "INSERT INTO approvals (id, run_id, step_id, kind, capability_json, presentation_json, "
        "request_json, hash, status, created_at) SELECT ?, run_id, step_id, kind, "
        "capability_json, presentation_json, request_json, hash, status, created_at "
        "FROM approvals WHERE id = ?",
        ("c" * 32, first.id),
    )
    code, out, err = run_main(capsys, "--db", database, "approve", run.id, "--yes")
    assert (code, out) == (1, "")
    assert err == (
        f"agentrt: run {run.id} waits on 2 pending approvals: {first.id} (remote_mutation), "
        f"{'c' * 32} (remote_mutation); name the one you mean with "
        f"agentrt --db {quote(database)} approve {run.id} --approval ID; nothing was decided\n"
    )
    code, out, _ = run_main(capsys, "--db", database, "approve", run.id, "--approval", "c" * 32)
    assert code == 0 and f"approved: approval {'c' * 32}" in out


def test_deciding_again_says_who_decided_how_and_when(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    waiting = waiting_run(database, prefix="a")
    db = database
    assert run_main(capsys, "--db", db, "approve", waiting.id, "--yes", "--by", "ann",
                    "--note", "ok\nby me")[0] == 0  # fmt: skip
    decided = pending(database, waiting.id)
    at = format_time(decided.decided_at)
    for verb in ("approve", "reject"):
        code, out, err = run_main(capsys, "--db", db, verb, waiting.id, "--yes")
        assert (code, out) == (1, "")
        assert err == (
            f"agentrt: run {waiting.id} is waiting, but no approval of it is pending: approval "
            f'{decided.id} was already approved by ann at {at} (note: "ok\\nby me"), and the '
            "run waits for its program to resume it; nothing was decided\n"
        )
    rejected = waiting_run(database, prefix="b")
    assert run_main(capsys, "--db", db, "reject", rejected.id, "--yes", "--by", "bo")[0] == 0
    gone = pending(database, rejected.id)
    code, _, err = run_main(capsys, "--db", db, "approve", rejected.id, "--yes")
    assert (code, err) == (
        1,
        f"agentrt: run {rejected.id} is CANCELLED; it waits on no approval (approval {gone.id} "
        f"was rejected by bo at {format_time(gone.decided_at)})\n",
    )
    code, _, err = run_main(capsys, "--db", db, "approve", rejected.id, "--approval", gone.id)
    assert (code, err) == (
        1,
        f"agentrt: approval {gone.id} of run {rejected.id} was already rejected by bo at "
        f"{format_time(gone.decided_at)}; nothing was decided\n",
    )


def test_deciding_a_run_that_waits_on_nothing_is_refused(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = drive(database, [Decision.complete()], prefix="a")
    code, _, err = run_main(capsys, "--db", database, "approve", run.id, "--yes")
    assert (code, err) == (1, f"agentrt: run {run.id} is COMPLETED; it waits on no approval\n")
    waiting = waiting_run(database, prefix="b")
    approval = pending(database, waiting.id)
    assert run_main(capsys, "--db", database, "approve", waiting.id, "--yes")[0] == 0
    code, _, err = run_main(
        capsys, "--db", database, "reject", waiting.id, "--approval", approval.id
    )
    assert code == 1
    assert err == (
        f"agentrt: approval {approval.id} of run {waiting.id} was already approved by "
        f"{pwd.getpwuid(os.geteuid()).pw_name} at "
        f"{format_time(pending(database, waiting.id).decided_at)}; nothing was decided\n"
    )


def test_long_strings_show_as_head_and_tail_with_sizes(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    body = "A" * 100 + "m" * 4800 + "Z" * 100
    run = waiting_run(database, body=body)
    code, out, _ = run_main(capsys, "--db", database, "approve", run.id, "--yes", "--full")
    assert code == 0
    long_body = f'"{"A" * 80}" … 4,840 chars not shown … "{"Z" * 80}"'
    line = next(x for x in out.splitlines() if x.startswith("    body "))  # the summary
    assert line.split(None, 1)[1] == long_body
    line = next(x for x in out.splitlines() if x.startswith("  request.args.body "))
    assert line.split(None, 1)[1] == f"{long_body} (string, 5,000 chars)"


def test_long_keys_differing_only_in_the_middle_show_different_paths() -> None:
    first, second = "k-" * 20 + "A" + "k-" * 20, "k-" * 20 + "B" + "k-" * 20
    rows = dict(approval_fields({first: 1, second: 2}))
    paths = [path for path in rows if path]
    assert len(paths) == 2 and rows[paths[0]] == "1" and rows[paths[1]] == "2"
    for path, key in zip(paths, (first, second), strict=True):
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        assert path == f'["{"k-" * 16}"…"{"k-" * 16}" (81 chars, sha256 {digest})]'
    assert paths[0] != paths[1]


def test_an_interrupted_side_effect_is_explained_in_plain_words(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = waiting_run(database)
    a = pending(database, run.id)
    kind = "interrupted_side_effect"
    execute(  # what a resume after a crash records, made with SQL
        database,
        "UPDATE approvals SET kind = ?, hash = ? WHERE id = ?",
        (kind, approval_hash(kind, a.capability, a.presentation, a.request), a.id),
    )
    _, shown, _ = run_main(capsys, "--db", database, "show", run.id)
    code, out, _ = run_main(capsys, "--db", database, "reject", run.id, "--yes")
    assert code == 0
    for text in (shown, out):
        assert "whether it took effect is unknown. Approving runs it once more" in text


# --- cancel -------------------------------------------------------------------------------------


def test_cancel_ends_a_live_run_once(database: str) -> None:
    run = waiting_run(database)
    result = agentrt_cmd("--db", database, "cancel", run.id, "--by", "ops", "--note", "stop")
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout == f"cancelled: run {run.id} is now CANCELLED (operator_cancelled), by ops\n"
    )
    again = agentrt_cmd("--db", database, "cancel", run.id)
    assert again.returncode == 1
    assert again.stderr == f"agentrt: run {run.id} is CANCELLED; only a live run is cancelled\n"


# --- verify -------------------------------------------------------------------------------------


def _verify(db: Path, *args: str) -> forkserver.Done:
    return agentrt_cmd("--db", str(db), "verify", *args)


def _tamper(db: Path, *statements: str) -> None:
    with sqlite3.connect(db) as conn:
        for sql in statements:
            conn.execute(sql)


def test_verify_prints_the_head_of_an_intact_chain(db_path: Path) -> None:
    waiting_run(db_path)
    with agentrt.open_existing(db_path, read_only=True) as store:
        seq, digest = store.chain_head()
    result = _verify(db_path)
    file_ok = "file: ok (PRAGMA integrity_check found no damage)\n"
    assert (result.returncode, result.stdout) == (
        0,
        f"intact: {seq} events checked; head {seq}:{digest}\n{file_ok}",
    )
    kept = _verify(db_path, "--head", f"{seq}:{digest}")
    head = f"{seq}:{digest}"
    assert kept.stdout == (
        f"intact: {seq} events checked; head {head}; the kept head {head} matches\n{file_ok}"
    )


_SWAP = (
    "UPDATE events SET seq = -1 WHERE seq = 5",
    "UPDATE events SET seq = 5 WHERE seq = 6",
    "UPDATE events SET seq = 6 WHERE seq = -1",
)


@pytest.mark.parametrize(
    ("statements", "expected"),
    [
        (("UPDATE events SET payload_json = '{\"index\":7}' WHERE seq = 3",),
         "broken at seq 3: altered (the event does not match its hash: its content or its "
         "hash was edited)"),
        (("DELETE FROM events WHERE seq = 4",),
         "broken at seq 4: deleted (an event is missing from the middle of the chain)"),
        (_SWAP, "broken at seq 5: swapped (events were moved out of their place in the chain)"),
    ],
    ids=["edited", "deleted", "swapped"],
)  # fmt: skip
def test_verify_reports_the_first_break(
    db_path: Path, statements: Sequence[str], expected: str
) -> None:
    waiting_run(db_path)
    _tamper(db_path, *statements)
    result = _verify(db_path)
    assert result.returncode == 1
    assert result.stdout.startswith(expected + "; ")


def test_verify_catches_a_cut_tail_against_a_kept_head(db_path: Path) -> None:
    waiting_run(db_path)
    with agentrt.open_existing(db_path, read_only=True) as store:
        seq, digest = store.chain_head()
    # Cut the last two events and cover the tracks in the chain's head row as well.
    _tamper(
        db_path,
        f"DELETE FROM events WHERE seq > {seq - 2}",
        f"UPDATE chain_head SET seq = {seq - 2} WHERE part = 0",
    )
    alone = _verify(db_path)
    assert alone.returncode == 0  # the chain that is left is consistent: only a kept head tells
    kept = _verify(db_path, "--head", f"{seq}:{digest}")
    assert kept.returncode == 1
    assert kept.stdout.startswith(
        f"broken at seq {seq - 1}: truncated (events after the last one present are missing)"
    )


def test_verify_json(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    waiting_run(db_path)
    _tamper(db_path, "DELETE FROM events WHERE seq = 2")
    code, out, _ = run_main(capsys, "--db", str(db_path), "--json", "verify")
    assert code == 1
    doc = json.loads(out)
    assert (doc["intact"], doc["checked"], doc["first_break"]) == (
        False,
        1,
        {"seq": 2, "problem": "deleted"},
    )


# --- hostile text -------------------------------------------------------------------------------


HOSTILE_ALL = (
    "\x1b[31mALERT\x1b[0m pay \u202egnp.exe\u202c join\u200dme tag\U000e0041 del\x7f zalgo e"
    + "\u0301" * 12
)
"""ANSI escapes, a right-to-left override, a zero-width joiner, a tag character, DEL and zalgo."""
HOSTILE_SHOWN = (
    "\\x1b[31mALERT\\x1b[0m pay \\u202egnp.exe\\u202c join\\u200dme tag\\U000e0041 del\\x7f "
    "zalgo e" + "\u0301" * 4 + "\\u0301" * 8
)
"""HOSTILE_ALL as text output shows it; inside a JSON literal ESC reads \\u001b instead."""
HOSTILE_QUOTED = HOSTILE_SHOWN.replace("\\x1b", "\\u001b")
NEVER_RAW = ("\x1b", "\u202e", "\u202c", "\u200d", "\U000e0041", "\x7f", "\u0301" * 5)


def hostile_waiting_run(db: Path | str, prefix: str) -> agentrt.Run:
    """A run whose goal, tool name, argument key and value and approval reason are hostile."""
    name = "send" + HOSTILE_ALL
    tool = RecordingTool(name, SideEffect.REMOTE_MUTATION, schema={"type": "object"})

    def ask(request: Any) -> agentrt.PolicyDecision:
        return need_approval("remote_mutation", "reason " + HOSTILE_ALL, {"tool": name}, {})

    store = agentrt.open_store(db)
    # Tool names are now refused unless every provider accepts them; a file written
    # before that rule (or by hand) can still hold any name, and must still be shown.
    anything = re.compile(r".+", re.DOTALL)
    try:
        with mock.patch.object(agentrt._tools, "_TOOL_NAME", anything):
            return agentrt.Driver(
                store=store,
                agent=ScriptedAgent(
                    [Decision.tool_call(name, {"key" + HOSTILE_ALL: "value" + HOSTILE_ALL})]
                ),
                policy=SideEffectPolicy({SideEffect.REMOTE_MUTATION: ask}, policy_id="hostile/1"),
                tools=[tool],
                now=FakeClock(),
                new_id=Ids(prefix),
            ).start_sync(HOSTILE_ALL)
    finally:
        store.close()


def test_hostile_strings_are_shown_escaped_everywhere(database: str) -> None:
    text_run, json_run = hostile_waiting_run(database, "a"), hostile_waiting_run(database, "b")
    db, note = database, "note " + HOSTILE_ALL
    text = {
        "runs": agentrt_cmd("--db", db, "runs"),
        "show": agentrt_cmd("--db", db, "show", text_run.id),
        "approve": agentrt_cmd("--db", db, "approve", text_run.id, "--yes", "--note", note),
        "events": agentrt_cmd("--db", db, "events", text_run.id, "--limit", "1000"),
        "unknown": agentrt_cmd("--db", db, "show", HOSTILE_ALL),
    }
    as_json = {
        "runs": agentrt_cmd("--db", db, "--json", "runs"),
        "show": agentrt_cmd("--db", db, "--json", "show", json_run.id),
        "approve": agentrt_cmd(
            "--db", db, "--json", "approve", json_run.id, "--yes", "--note", note
        ),
        "events": agentrt_cmd("--db", db, "--json", "events", json_run.id, "--limit", "1000"),
        "unknown": agentrt_cmd("--db", db, "--json", "show", HOSTILE_ALL),
    }
    for mode, results in (("text", text), ("json", as_json)):
        for name, result in results.items():
            assert result.returncode == (1 if name == "unknown" else 0), (mode, name, result)
            for stream, output in (("stdout", result.stdout), ("stderr", result.stderr)):
                for raw in NEVER_RAW:
                    assert raw not in output, (mode, name, stream, raw)
            if mode == "json":
                assert result.stdout.isascii(), name
    # Text: every field shown, escaped.
    assert f"remote_mutation send{HOSTILE_SHOWN}  {HOSTILE_SHOWN}" in text["runs"].stdout
    shown = text["show"].stdout.splitlines()
    assert f"  tool     send{HOSTILE_SHOWN}" in shown and f"goal      {HOSTILE_SHOWN}" in shown
    approve = text["approve"].stdout.splitlines()
    assert f"  tool       send{HOSTILE_SHOWN} (remote_mutation)" in approve
    assert any(x.endswith(f'"reason {HOSTILE_QUOTED}"') and "why asked" in x for x in approve)
    (arg,) = [line for line in approve if line.startswith('    "key')]
    assert arg.startswith('    "key\\u001b[31mALERT\\u001b[0m pay \\u202egnp.exe')
    assert arg.endswith(f'"value{HOSTILE_QUOTED}"')
    full_run = hostile_waiting_run(database, "c")
    full = agentrt_cmd("--db", db, "approve", full_run.id, "--full").stdout.splitlines()
    # The rows of the full view; the values they show in part follow them, whole.
    rows = full[: next(i for i, x in enumerate(full) if x.startswith("Shown above in part"))]
    (arg,) = [line for line in rows if line.startswith("  request.args[")]
    assert arg.startswith('  request.args["key\\u001b[31mALERT\\u001b[0m pay \\u202egnp.exe')
    assert arg.endswith(f'"value{HOSTILE_QUOTED}" (string, {len("value" + HOSTILE_ALL)} chars)')
    for raw in NEVER_RAW:
        assert all(raw not in line for line in full)
    assert f'"note":"note {HOSTILE_QUOTED}"' in text["events"].stdout
    assert f'"tool":"send{HOSTILE_QUOTED}"' in text["events"].stdout
    assert text["unknown"].stderr == f"agentrt: {db}: no run '{HOSTILE_SHOWN}'\n"
    # JSON: lossless, ASCII only.
    runs = json.loads(as_json["runs"].stdout)["runs"]
    assert [r["goal"] for r in runs] == [HOSTILE_ALL, HOSTILE_ALL]
    assert [r["id"] for r in runs] == [json_run.id, text_run.id]  # the text one is decided
    assert [w["tool"] for r in runs for w in r["waiting"]] == ["send" + HOSTILE_ALL]
    doc = json.loads(as_json["show"].stdout)
    assert doc["run"]["goal"] == HOSTILE_ALL
    assert doc["waiting"][0]["request"]["args"] == {"key" + HOSTILE_ALL: "value" + HOSTILE_ALL}
    assert json.loads(as_json["approve"].stdout)["approval"]["note"] == note
    payloads = [json.loads(line)["payload"] for line in as_json["events"].stdout.splitlines()]
    hostile = {k for p in payloads for k, v in p.items() if isinstance(v, str) and HOSTILE_ALL in v}
    assert {"goal", "note", "reason"} <= hostile


def test_a_terminal_gets_a_table_that_fits_its_width(db_path: Path) -> None:
    waiting_run(db_path, goal="a goal long enough that it cannot fit " * 5)
    code, screen = at_terminal(["--db", str(db_path), "runs"], prompt=False, columns=160)
    assert code == 0, screen
    lines = screen.splitlines()
    assert all(display_width(line) <= 160 for line in lines)
    assert lines[1].endswith("…")
    assert lines[0].split()[-1] == "GOAL"


# --- the rules ----------------------------------------------------------------------------------


def test_help_explains_why_there_is_no_resume() -> None:
    result = agentrt_cmd("--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "There is no `resume` command. Resuming a run executes its tools" in text
    assert "Exit status: 0 ok, 1 error or refusal, 2 usage." in text
    for command in ("runs", "show", "events", "approve", "reject", "cancel", "verify", "demo"):
        assert f" {command} " in text
    resume = agentrt_cmd("resume", "x")
    assert resume.returncode == 2
    assert resume.stderr.startswith("agentrt: There is no `resume` command.")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["runs"], "no database given: pass --db PATH or set AGENTRT_DB"),
        (["--db", "x.db", "runs", "--limit", "0"],
         "argument --limit: must be between 1 and 1000, got 0"),
        (["--db", "x.db", "runs", "--status", "done"], "argument --status: 'done' is not a status"),
        (["--db", "x.db", "verify", "--head", "12:abc"],
         "--head must be SEQ:HASH as verify prints it"),
        (["--db", "x.db", "frobnicate"], "invalid choice: 'frobnicate'"),
        (["--db", "x.db", "approve"], "the following arguments are required: RUN"),
        (["--db", "x.db", "approve", "r", "--by", ""], "--by must not be empty"),
        (["--db", "x.db", "cancel", "r", "--by", "a\x1b[2Jb"],
         "--by must be one line of visible characters"),
        (["--db", "x.db", "events", "--timeout", "-1"], "must be a positive number of seconds"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    args: list[str], message: str,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTRT_DB", raising=False)
    code, out, err = run_main(capsys, *args)
    assert code == 2
    assert message in err
    assert out == ""
    assert not (tmp_path / "x.db").exists()


def _numeric_options() -> list[tuple[str, str]]:
    """Every command's option whose value is a number, found in the parser itself: each one
    whose type turns `"7"` into a number (or numbers)."""
    from agentrt.cli._parser import build_parser

    found: list[tuple[str, str]] = []
    for action in build_parser()._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for command, sub in action.choices.items():
            for option in sub._actions:
                if option.type is None or not option.option_strings:
                    continue
                try:
                    value = option.type("7")  # type: ignore[operator]
                except (argparse.ArgumentTypeError, TypeError, ValueError):
                    continue
                if isinstance(value, (int, float, tuple)):
                    found.append((command, option.option_strings[0]))
    return found


NUMERIC_OPTIONS = _numeric_options()


def test_the_numeric_options_are_found_in_the_parser() -> None:
    for known in (("runs", "--limit"), ("events", "--after"), ("events", "--timeout")):
        assert known in NUMERIC_OPTIONS
    assert ("runs", "--status") not in NUMERIC_OPTIONS


@pytest.mark.parametrize(("command", "option"), NUMERIC_OPTIONS)
@pytest.mark.parametrize("bad", ["1_0", " 10", "10 ", "10\n", "+10", "\u0661\u0660", "1e1"])
def test_a_numeric_option_accepts_only_plain_decimal_digits(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    command: str, option: str, bad: str,
) -> None:  # fmt: skip
    """Python's int() and float() read `1_0`, spaces, a sign and other scripts' digits;
    an option's value is plain ASCII digits (and, for seconds, one decimal point), or a
    usage error naming the option and quoting the value."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, "--db", "x.db", command, f"{option}={bad}")
    assert code == 2, err
    assert f"argument {option}: not " in err and repr(bad) in err, err
    assert out == ""
    assert not (tmp_path / "x.db").exists()


def test_plain_digits_are_read_exactly_and_a_sign_or_too_many_digits_is_out_of_range() -> None:
    from agentrt.cli._args import after_seqs, bounded, seconds

    limit = bounded(1, 1000)
    assert (limit("1"), limit("0010"), limit("1000")) == (1, 10, 1000)
    assert bounded(0, None)(str(2**63 - 1)) == 2**63 - 1
    assert after_seqs("0,17,0") == (0, 17, 0)
    assert (seconds("0.5"), seconds("30"), seconds("007.25")) == (0.5, 30.0, 7.25)
    for parse, text, message in (
        (limit, "-0", "must be between 1 and 1000, got -0"),
        (limit, "-5", "must be between 1 and 1000, got -5"),
        (limit, "1001", "must be between 1 and 1000, got 1001"),
        (bounded(0, None), str(2**63), f"must be between 0 and {2**63 - 1}, got {2**63}"),
        (limit, "9" * 5000, "must be between 1 and 1000, got a number of 5000 characters"),
        (after_seqs, "0,1_0", "in '0,1_0': not an integer: '1_0'"),
        (seconds, "-0.5", "must be a positive number of seconds, got -0.5"),
        (seconds, "0.0", "must be a positive number of seconds, got 0.0"),
        (seconds, "9" * 400, "must be a positive number of seconds, got a number of 400 char"),
        (seconds, "inf", "not a number of seconds: 'inf'"),
        (seconds, "nan", "not a number of seconds: 'nan'"),
        (seconds, ".5", "not a number of seconds: '.5'"),
        (seconds, "5.", "not a number of seconds: '5.'"),
    ):
        with pytest.raises(argparse.ArgumentTypeError) as refused:
            parse(text)
        assert str(refused.value).startswith(message), (text, str(refused.value))


def test_a_missing_database_is_never_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing.db"
    for command in (
        ["runs"],
        ["approve", "r", "--yes"],
        ["events", "--follow", "--timeout", "0.1"],
    ):
        code, _, err = run_main(capsys, "--db", str(missing), *command)
        assert (code, err) == (
            1,
            f"agentrt: no database at {missing} (agentrt opens existing databases only and "
            "never creates one)\n",
        )
    assert list(tmp_path.iterdir()) == []


def _make_insecure(db: Path) -> str:
    db.chmod(0o664)
    return (
        "it is writable by group or others (mode 0664), and anyone who can write it can forge "
        "an approval; make it owner-only (chmod 600)"
    )


def _make_wal_writable(db: Path) -> str:
    wal = db.with_name(db.name + "-wal")
    wal.touch()
    wal.chmod(0o666)
    return f"its -wal file {wal} is writable by group or others (mode 0666)"


def _make_lock_writable(db: Path) -> str:
    lock = db.with_name(db.name + "-lock")
    lock.touch()
    lock.chmod(0o666)
    return (
        f"its -lock file {lock} is writable by group or others (mode 0666), and anyone who can "
        "write it can hold up every writer to its busy timeout; make it owner-only (chmod 600)"
    )


def _make_wal_a_directory(db: Path) -> str:
    wal = db.with_name(db.name + "-wal")
    wal.mkdir()
    return (
        f"{wal} is a directory, not a regular file, so agentrt will not open the database beside it"
    )


def _give_away(db: Path) -> str:
    os.chown(db, 4242, 4242)
    return f"it is owned by uid 4242, not by you (uid {os.geteuid()}), and its owner could"


def _make_symlink(db: Path) -> str:
    link = db.with_name("link.db")
    link.symlink_to(db)
    return "is a symlink"


def _add_trigger(db: Path) -> str:
    _tamper(db, "CREATE TRIGGER sneaky AFTER INSERT ON runs BEGIN SELECT 1; END")
    return "it holds a trigger or a view, which could run hidden code"


def _make_newer(db: Path) -> str:
    """The record as a newer agentrt leaves it: one migration past this version's."""
    from agentrt._store.sqlite._migrations import SCHEMA_VERSION

    newer = SCHEMA_VERSION + 1
    _tamper(db, f"INSERT INTO schema_migrations (version, applied_at) VALUES ({newer}, '')")
    return f"the database was written by a newer agentrt (schema version {newer}"


_ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")


@pytest.mark.parametrize(
    "spoil",
    [_make_insecure, _make_wal_writable, _make_lock_writable, _make_wal_a_directory,
     pytest.param(_give_away, marks=_ROOT_ONLY), _make_symlink, _add_trigger, _make_newer],
)  # fmt: skip
def test_an_unsafe_database_is_refused_in_one_sentence(
    db_path: Path, capsys: pytest.CaptureFixture[str], spoil: Callable[[Path], str]
) -> None:
    waiting_run(db_path)
    expected = spoil(db_path)
    target = db_path.with_name("link.db") if spoil is _make_symlink else db_path
    for command in (["runs"], ["verify"], ["cancel", "r"]):
        code, out, err = run_main(capsys, "--db", str(target), *command)
        assert (code, out) == (1, "")
        assert err.startswith(f"agentrt: refusing {target}: ")
        assert expected in err
        assert err.count("\n") == 1 and err.count(". ") == 0  # one sentence, one line
        # The sentence names the problem the file has, and no other.
        problems = ("writable by group", "owned by uid", "not a regular file", "symlink")
        assert [p for p in problems if p in err] == [p for p in problems if p in expected]


def test_reading_commands_open_read_only_and_deciding_ones_read_write(
    db_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = waiting_run(db_path)
    opened: list[bool] = []
    original = agentrt.open_existing

    def spy(path: Any, read_only: bool = False) -> Store:
        opened.append(read_only)
        return original(path, read_only=read_only)

    monkeypatch.setattr("agentrt.cli._opening.open_existing", spy)
    monkeypatch.setattr("agentrt.export.open_existing", spy)
    db = str(db_path)
    before = db_path.read_bytes()
    for command in (["runs"], ["show", run.id], ["events", run.id], ["events"], ["verify"]):
        opened.clear()
        assert run_main(capsys, "--db", db, *command)[0] == 0
        assert opened and all(opened), command
    assert db_path.read_bytes() == before
    opened.clear()
    assert run_main(capsys, "--db", db, "cancel", run.id)[0] == 0
    assert opened == [False]


def test_demo_runs_the_demo_module_with_the_rest_of_the_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    received: list[list[str]] = []

    def run(argv: list[str]) -> int:
        received.append(argv)
        return 0

    fake = types.ModuleType("agentrt._demo")
    fake.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agentrt._demo", fake)
    assert run_main(capsys, "demo", "--fast", "x")[0] == 0
    assert received == [["--fast", "x"]]


@pytest.mark.parametrize(
    ("before", "command", "message"),
    [
        (
            ["--db", "x.db"],
            "demo",
            "--db is not used by the demo: it makes its own database in"
            " --dir DIR (a new temporary directory by default)",
        ),
        (
            ["--db=x.db"],
            "demo",
            "--db is not used by the demo: it makes its own database in"
            " --dir DIR (a new temporary directory by default)",
        ),
        (["--json"], "demo", "--json is not used by the demo: it has no JSON output"),
        (["--db", "x.db"], "mcp", "--db is not used by agentrt mcp: it reads no database"),
        (
            ["--json"],
            "mcp",
            "--json before mcp is not read: give it after the command"
            " (agentrt mcp pin|check NAME --json ...)",
        ),
    ],
)
def test_a_global_option_before_a_command_that_does_not_read_it_is_refused(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    before: list[str],
    command: str,
    message: str,
) -> None:
    """`agentrt --db X demo` once ran the demo on a database of its own, silently."""
    received: list[list[str]] = []

    def run(argv: list[str]) -> int:
        received.append(argv)
        return 0

    fake = types.ModuleType("agentrt._demo")
    fake.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agentrt._demo", fake)
    assert run_main(capsys, *before, command, "pin") == (2, "", f"agentrt: {message}\n")
    assert received == []


def test_demo_says_so_when_it_is_not_installed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    real = importlib.import_module

    def missing(name: str, package: str | None = None) -> types.ModuleType:
        if name == "agentrt._demo":
            raise ModuleNotFoundError("No module named 'agentrt._demo'", name="agentrt._demo")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", missing)
    assert run_main(capsys, "demo") == (
        1,
        "",
        "agentrt: the demo is not part of this installation of agentrt\n",
    )


def test_python_dash_m_and_main_agree(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agentrt.__main__ import main as entry

    waiting_run(db_path)
    assert entry(["--db", str(db_path), "runs"]) == 0
    in_process = capsys.readouterr().out
    # A fresh interpreter, as a user starts it (the other tests fork theirs).
    fresh = subprocess.run(
        [sys.executable, "-m", "agentrt", "--db", str(db_path), "runs"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert (fresh.returncode, fresh.stdout) == (0, in_process)
    assert agentrt_cmd("--db", str(db_path), "runs").stdout == in_process


# --- findings of the review ---------------------------------------------------------------------


def test_a_y_typed_before_the_request_is_shown_is_no_answer(db_path: Path) -> None:
    run = waiting_run(db_path)
    env = clean_env(COLUMNS="200", LINES="50")
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execve(
                sys.executable,
                [sys.executable, "-m", "agentrt", "--db", str(db_path), "approve", run.id],
                env,
            )
        finally:
            os._exit(127)
    try:
        os.write(fd, b"y\n")  # typed ahead, before anything is on the screen
        output = _read_until(fd, PROMPT)
        os.write(fd, b"\x04")  # then no answer at the prompt
        output += _read_until(fd, None)
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1, output
    assert pending(db_path, run.id).status == "pending"


def test_verify_refuses_a_range_that_stops_short_of_the_kept_head(db_path: Path) -> None:
    waiting_run(db_path)
    store = agentrt.open_existing(db_path, read_only=True)
    seq, digest = store.chain_head()
    store.close()
    short = agentrt_cmd("--db", str(db_path), "verify", "--to", "2", "--head", f"{seq}:{digest}")
    assert short.returncode == 2 and "must reach the kept head" in short.stderr
    backwards = agentrt_cmd("--db", str(db_path), "verify", "--from", "5", "--to", "3")
    assert backwards.returncode == 2 and "nothing to check" in backwards.stderr
    zero = agentrt_cmd("--db", str(db_path), "verify", "--head", "0:" + "0" * 64)
    assert zero.returncode == 2 and "names no event" in zero.stderr


def test_huge_numbers_and_unusable_paths_are_one_sentence_not_a_traceback(db_path: Path) -> None:
    run = waiting_run(db_path)
    huge = agentrt_cmd("--db", str(db_path), "runs", "--offset", "9" * 20)
    assert huge.returncode == 2 and "Traceback" not in huge.stderr
    cursor = agentrt_cmd(
        "--db",
        str(db_path),
        "events",
        run.id,
        "--cursor",
        str(db_path.parent / "missing" / "dir" / "cursor"),
    )
    assert cursor.returncode == 1, cursor.stderr
    assert "Traceback" not in cursor.stderr
    assert len(cursor.stderr.strip().splitlines()) == 1


def test_json_output_escapes_del(database: str) -> None:
    run = waiting_run(database, goal="rm\x7f -rf")
    shown = agentrt_cmd("--db", database, "--json", "show", run.id)
    assert shown.returncode == 0
    assert "\x7f" not in shown.stdout and "\\u007f" in shown.stdout


def test_a_run_id_that_is_not_an_id_is_refused_at_start(tmp_path: Path) -> None:
    store = agentrt.open_store(tmp_path / "ids.db")
    driver = agentrt.Driver(store=store, agent=ScriptedAgent([]), policy=agentrt.default_policy())
    with pytest.raises(agentrt.ConfigError, match="32 lowercase hex"):
        driver.start_sync("g", run_id="x $(touch /tmp/pwned) ; echo")
    assert store.list_runs() == []
