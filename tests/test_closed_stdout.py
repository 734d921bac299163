"""A reader that went away (`| head -1`) ends the command or the example quietly (decision 0196).

`python examples/scripted.py | head -1` printed a BrokenPipeError traceback, and
`agentrt runs | head -1` "Exception ignored ... BrokenPipeError" with exit status 120
(the interpreter's flush at exit). Each now ends with exit status 1, as Python's docs
handle EPIPE (and as a process a SIGPIPE ends is not 0 either), and nothing on stderr.

Deterministic: the standard output is a pipe whose reading end is closed before the
process starts, so its first write (or its flush at exit, when the output is buffered)
fails, whatever the timing. Run with and without PYTHONUNBUFFERED: the first breaks on
a write inside the command, the second on the flush after it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision
from test_cli import clean_env, drive

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def closed_stdout(
    argv: list[str], *, unbuffered: bool, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`argv` run with a standard output nobody reads (the pipe's reading end is closed)."""
    environ = {k: v for k, v in (env or clean_env()).items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        environ["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            argv,
            stdout=write_end,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=120,
            env=environ,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_the_commands_long_outputs_end_quietly_when_the_reader_went_away(
    db_path: Path, unbuffered: bool
) -> None:
    db = str(db_path)
    done = drive(db, [Decision.complete({"ok": True})], prefix="a", goal="first")
    commands = [
        ["runs"],
        ["--json", "runs"],
        ["approvals"],
        ["show", done.id],
        ["events", done.id],
        ["events"],
        ["--json", "events"],
        ["verify"],
    ]
    for command in commands:
        result = closed_stdout(
            [sys.executable, "-m", "agentrt", "--db", db, *command], unbuffered=unbuffered
        )
        assert (command, result.returncode, result.stderr) == (command, 1, "")


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_the_demo_ends_quietly_with_status_1_when_the_reader_went_away(
    tmp_path: Path, unbuffered: bool
) -> None:
    """`agentrt demo | head -1`, as every other command: not 0, since its reader saw not
    what it printed, and no traceback."""
    workdir = tmp_path / "shop"
    result = closed_stdout(
        [sys.executable, "-m", "agentrt", "demo", "--dir", str(workdir)], unbuffered=unbuffered
    )
    assert (result.returncode, result.stderr) == (1, "")


def _scripted() -> object:
    spec = importlib.util.spec_from_file_location("scripted_example", EXAMPLES / "scripted.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize(
    "example", ["scripted.py", "payments.py", "own_loop.py", "recheck_tighten.py"]
)
def test_an_example_ends_quietly_when_the_reader_went_away(
    tmp_path: Path, example: str, unbuffered: bool
) -> None:
    where = (
        ["--dir", str(tmp_path / "shop")]
        if example == "payments.py"
        else ["--db", str(tmp_path / "example.db")]
    )
    result = closed_stdout([sys.executable, str(EXAMPLES / example), *where], unbuffered=unbuffered)
    assert (result.returncode, result.stderr) == (1, "")


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_the_scripted_examples_second_process_ends_quietly_when_the_reader_went_away(
    tmp_path: Path, unbuffered: bool
) -> None:
    """The process `scripted.py | head -1` showed a traceback from."""
    scripted = _scripted()
    db = str(tmp_path / "runs.db")
    with agentrt.open_store(db) as store:
        run = scripted.make_driver(store, tmp_path, "process-1").start_sync("ship it")  # type: ignore[attr-defined]
    assert run.status == "WAITING_FOR_APPROVAL"
    second = [
        sys.executable,
        str(EXAMPLES / "scripted.py"),
        "--workdir",
        str(tmp_path),
        "--approve-and-resume",
        run.id,
    ]
    result = closed_stdout(second, unbuffered=unbuffered, env=clean_env(AGENTRT_DB=db))
    assert (result.returncode, result.stderr) == (1, "")
