"""The command line at its edges (found by the read-side attack, decision 0154).

- A number of seconds is bounded where it is read: `--interval` or `--retry` past what
  a wait can take (`threading.TIMEOUT_MAX`, about 292 years) used to be accepted, print
  or export a page, then end with "a number on the command line is too large (at most
  2^63-1)" and exit 2 at the first wait, although the number was far below 2^63-1.
- A command whose standard output is closed ends with one line and exit 1, not an
  `AttributeError` traceback (Python leaves `sys.stdout` None then).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentrt.export import Follower
from support.damage import finished_run_file
from support.signal_masks import signal_mask

HUGE = str(int(threading.TIMEOUT_MAX) + 1)


def agentrt(
    *args: str, close_stdout: bool = False, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTRT_DB", "COLUMNS")}
    env["OTEL_TRACES_EXPORTER"] = "none"
    return subprocess.run(
        [sys.executable, "-m", "agentrt", *args],
        capture_output=not close_stdout,
        stderr=subprocess.PIPE if close_stdout else None,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        preexec_fn=(lambda: os.close(1)) if close_stdout else None,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return finished_run_file(tmp_path / "agentrt.db", steps=1)


@pytest.mark.parametrize(
    "command",
    [
        ["events", "--follow", "--interval", HUGE],
        ["export", "--otel", "--cursor", "CURSOR", "--interval", HUGE],
        ["export", "--otel", "--cursor", "CURSOR", "--retry", HUGE],
    ],
    ids=["events-interval", "export-interval", "export-retry"],
)
def test_seconds_beyond_what_a_wait_can_take_are_a_usage_error_before_anything_is_read(
    db: Path, tmp_path: Path, command: list[str]
) -> None:
    cursor = tmp_path / "cursor.json"
    line = [str(cursor) if word == "CURSOR" else word for word in command]
    try:
        done = agentrt("--db", str(db), *line, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{HUGE} seconds were taken, and the command went on following")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "command line is too large" not in done.stderr
    assert "at most" in done.stderr.splitlines()[-1], done.stderr
    assert done.stdout == ""  # nothing printed, nothing exported
    assert not cursor.exists()


def test_a_follower_refuses_an_interval_beyond_what_a_wait_can_take(db: Path) -> None:
    with pytest.raises(ValueError, match="interval"):
        Follower(db, interval=threading.TIMEOUT_MAX * 2)


@pytest.mark.parametrize(
    "command",
    [["runs"], ["show", "a0000000000000000000000000000001"], ["events"], ["verify"]],
    ids=["runs", "show", "events", "verify"],
)
def test_a_command_whose_standard_output_is_closed_says_so_in_one_line_and_exits_1(
    db: Path, command: list[str]
) -> None:
    done = agentrt("--db", str(db), *command, close_stdout=True)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == "agentrt: the standard output is closed: nothing to print to", line


def test_a_command_whose_standard_error_is_closed_still_exits_with_its_own_status(
    db: Path,
) -> None:
    """With stderr closed (Python leaves `sys.stderr` None), what the command would say
    goes nowhere, but its exit status is still its own: 2 for a usage error, not 1 from
    a crash on writing the refusal."""
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTRT_DB", "COLUMNS")}
    done = subprocess.run(
        [sys.executable, "-m", "agentrt", "--db", str(db), "recheck", "a" * 32],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=30,
        preexec_fn=lambda: os.close(2),
    )
    assert (done.returncode, done.stdout) == (2, "")


def _catches(pid: int, sig: int) -> bool:
    """Whether process `pid` has a handler for `sig` now (False once it is gone)."""
    with contextlib.suppress(OSError):
        return bool(signal_mask(pid, "SigCgt") >> (sig - 1) & 1)
    return False


def test_a_second_sigterm_ends_a_follower_whose_reader_stopped_reading(tmp_path: Path) -> None:
    """The first SIGINT/SIGTERM stops between pages, the page being printed finished; when
    that page cannot finish (its reader stopped reading, the pipe is full), a second one
    ends the command at once, the page unacknowledged (the cursor not moved past it)."""
    import agentrt
    from agentrt import Decision, SideEffect
    from agentrt.scripted import ScriptedAgent
    from conftest import FakeClock, Ids, RecordingTool

    db = tmp_path / "agentrt.db"
    driver = agentrt.Driver(
        store=agentrt.open_store(db),
        agent=ScriptedAgent([Decision.complete({})]),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
        now=FakeClock(),
        new_id=Ids("a"),
    )
    try:
        # One event line bigger than a pipe holds: its write blocks until it is read.
        driver.start_sync("g" * 400_000)
    finally:
        driver.store.close()
    cursor = tmp_path / "cursor.json"
    env = {k: v for k, v in os.environ.items() if k != "AGENTRT_DB"}
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentrt",
            "--db",
            str(db),
            "events",
            "--json",
            "--follow",
            "--cursor",
            str(cursor),
        ],
        stdout=write_end,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    os.close(write_end)
    try:
        assert os.read(read_end, 100).startswith(b'{"at"')  # it is writing the first line
        # Sent again until it ends: two sent at once may reach it as one pending signal.
        # Only while it still catches SIGTERM: once the second one ended its following, its
        # handler is given back on its way out, and one more would kill it (-15).
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            if _catches(proc.pid, signal.SIGTERM):
                proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.2)
        if proc.poll() is None:
            pytest.fail("SIGTERM after SIGTERM did not end a follower blocked on its output")
    finally:
        os.close(read_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        proc.stderr.close()
    assert "Traceback" not in err, err
    assert proc.returncode == 1, err
    assert err.strip() == "agentrt: interrupted", err
    assert not cursor.exists(), "the page never finished, yet the cursor moved past it"
