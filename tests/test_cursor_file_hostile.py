"""Hostile cursor files given to `agentrt events --cursor` and `agentrt export --cursor`
(decision 0141; found by an attack).

A cursor file is input like any other: whatever it holds (or whatever it is), the
command must end promptly with one clear line on stderr and exit 1, never hang,
never print a traceback, and never blame the command line for what the file says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.damage import finished_run_file


def agentrt(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTRT_DB", "COLUMNS", "LINES")}
    env["PYTHONIOENCODING"] = "utf-8"
    env.setdefault("OTEL_TRACES_EXPORTER", "console")
    return subprocess.run(
        [sys.executable, "-m", "agentrt", *args],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return finished_run_file(tmp_path / "agentrt.db", steps=3)


def one_clear_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("agentrt: "), done.stderr
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [["events", "--limit", "2"], ["export", "--otel", "--once"]],
    ids=["events", "export"],
)
def test_a_cursor_that_is_a_fifo_is_refused_not_waited_on(
    db: Path, tmp_path: Path, command: list[str]
) -> None:
    # open() of a FIFO blocks until a writer appears: the command freezes forever.
    cursor = tmp_path / "cursor.json"
    os.mkfifo(cursor)
    try:
        done = agentrt("--db", str(db), *command, "--cursor", str(cursor))
    except subprocess.TimeoutExpired:
        pytest.fail(f"agentrt {command[0]} --cursor FIFO hung (no writer ever comes)")
    assert done.returncode == 1
    one_clear_line(done)


@pytest.mark.parametrize(
    "command",
    [["events", "--limit", "2"], ["export", "--otel", "--once"]],
    ids=["events", "export"],
)
def test_a_deeply_nested_cursor_file_is_one_clear_error_not_a_traceback(
    db: Path, tmp_path: Path, command: list[str]
) -> None:
    # 4,000 '[' fit in the 4,096 characters load_cursor reads; json.loads raises
    # RecursionError, which is not the ValueError load_cursor catches.
    cursor = tmp_path / "cursor.json"
    cursor.write_text("[" * 4000 + "\n")
    done = agentrt("--db", str(db), *command, "--cursor", str(cursor))
    assert done.returncode == 1, done.stderr
    line = one_clear_line(done)
    assert "cursor" in line


@pytest.mark.parametrize("version", [1, 2])
def test_a_cursor_seq_beyond_sqlite_integers_is_blamed_on_the_file_not_the_command_line(
    db: Path, tmp_path: Path, version: int
) -> None:
    # A seq of 2^70 passes Cursor.from_json (a non-negative int) and overflows at the
    # first read: main() says "a number on the command line is too large" and exits 2
    # (usage), though the command line holds no such number: the cursor file does.
    big = 2**70
    cursor = tmp_path / "cursor.json"
    data: dict[str, object]
    if version == 1:
        data = {"version": 1, "seq": big, "hash": ""}
    else:
        data = {"version": 2, "heads": [[big, ""]], "run_id": None}
    cursor.write_text(json.dumps(data) + "\n")
    done = agentrt("--db", str(db), "events", "--limit", "2", "--cursor", str(cursor))
    line = one_clear_line(done)
    assert "command line" not in line, line
    assert "cursor" in line, line
    assert done.returncode == 1, (done.returncode, line)
