"""`agentrt demo` under the mistakes a new user makes: each is one sentence, never a
traceback, never a worker left behind, never a file created where none was asked for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import agentrt
from support import forkserver

pytestmark = pytest.mark.slow


def agentrt_cmd(
    *args: str, umask: int | None = None, env: dict[str, str] | None = None
) -> forkserver.Done:
    """`python -m agentrt ARGS...`, stdin /dev/null, forked from the process that has
    imported the CLI (tests/support/forkserver.py): what it says, makes and leaves is
    judged here, not the interpreter's start. The demo's worker it starts is a fresh
    interpreter, as ever; the tests that signal the demo or read it as it runs start it
    with `subprocess`."""
    return forkserver.run(
        [sys.executable, "-m", "agentrt", *args],
        preload=forkserver.CLI,
        env=env,
        umask=umask,
        timeout=60,
    )


def demo(*args: str, umask: int | None = None) -> forkserver.Done:
    return agentrt_cmd("demo", *args, umask=umask)


def workers_of(db: Path) -> list[int]:
    """The demo workers started on `db`, found by their command line (this test's own path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--child" in argv and os.fsencode(str(db)) in argv:
            try:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                found.append(int(entry.name))
    return found


def wait_for_no_worker(db: Path, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := workers_of(db)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:  # cleanup of what this test started, so a failure leaves nothing running
        os.kill(pid, signal.SIGKILL)
    return left


def no_traceback(result: subprocess.CompletedProcess[str] | forkserver.Done) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr


def test_a_dir_that_is_a_file_is_refused_in_one_sentence(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "notes.txt"
    not_a_dir.write_text("mine\n")
    result = demo("--dir", str(not_a_dir))
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"agentrt demo: error: --dir {not_a_dir}: it exists and is not a directory"
    )
    assert not_a_dir.read_text() == "mine\n"


def test_resume_of_a_missing_directory_says_so_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no such demo"
    result = demo("--resume", str(missing))
    no_traceback(result)
    assert result.returncode == 1
    assert result.stderr == (
        f"agentrt demo: {missing} holds no demo (no demo.db); start one with:"
        f" agentrt demo --dir '{missing}' --stop-at-approval\n"
    )
    assert not missing.exists()


def test_resume_of_a_directory_without_a_demo_creates_no_database_in_it(tmp_path: Path) -> None:
    result = demo("--resume", str(tmp_path))
    no_traceback(result)
    assert result.returncode == 1
    assert "holds no demo (no demo.db)" in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing created, the user's folder untouched


def test_a_new_dir_under_a_group_writable_umask_still_runs_the_demo(tmp_path: Path) -> None:
    """umask 002 is the default for a user on Debian and Ubuntu; the demo makes its folder
    owner-only, as the store requires, instead of failing in its worker."""
    workdir = tmp_path / "shop"
    result = demo("--dir", str(workdir), umask=0o002)
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert "event chain: 23 events, intact" in result.stdout
    assert workdir.stat().st_mode & 0o777 == 0o700


def test_an_existing_group_writable_dir_is_refused_before_any_charge(tmp_path: Path) -> None:
    workdir = tmp_path / "shared"
    workdir.mkdir()
    workdir.chmod(0o775)
    result = demo("--dir", str(workdir))
    no_traceback(result)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"agentrt demo: the directory {workdir} is writable by group")
    assert "keep the database in a directory only its owner can write" in line
    assert not (workdir / "card-processor.log").exists()  # no worker ever charged
    assert wait_for_no_worker(workdir / "demo.db") == []


def test_a_second_demo_on_the_same_dir_while_one_runs_is_refused(tmp_path: Path) -> None:
    workdir = tmp_path / "shop"
    first = subprocess.Popen(
        [sys.executable, "-m", "agentrt", "demo", "--dir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None
        assert first.stdout.readline().startswith("1. A shop's agent takes payment")
        second = demo("--dir", str(workdir))
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, err
    assert "the card processor received 2 charge requests" in out
    no_traceback(second)
    assert second.returncode == 2
    assert second.stderr.splitlines()[-1] == (
        f"agentrt demo: error: {workdir} holds a demo already; give another --dir"
    )
    assert second.stdout == ""
    store = agentrt.open_existing(workdir / "demo.db", read_only=True)
    assert [r.status for r in store.list_runs()] == ["COMPLETED"]  # one run, the first's
    store.close()


def test_a_reader_that_goes_away_leaves_no_worker_running(tmp_path: Path) -> None:
    """`agentrt demo | head -1`: the pipe breaks while the worker stalls in its charge."""
    workdir = tmp_path / "shop"
    errors = tmp_path / "stderr"
    with errors.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentrt", "demo", "--dir", str(workdir)],
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"1. A shop's agent")
        proc.stdout.close()  # the reader has what it wanted
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert b"Traceback" not in errors.read_bytes()
    assert wait_for_no_worker(workdir / "demo.db") == []


def test_ctrl_c_while_the_worker_charges_ends_the_demo_and_its_worker(tmp_path: Path) -> None:
    workdir = tmp_path / "shop"

    def default_sigint() -> None:  # as at a terminal, whatever the test runner ignores
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrt", "demo", "--dir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("1. A shop's agent")
        proc.send_signal(signal.SIGINT)  # the worker is starting or charging now
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err, err
    assert proc.returncode == 1  # the command's exit status for an error, `--help` says
    assert err.splitlines()[-1] == (
        f"agentrt demo: interrupted; the worker was stopped, what it left is in {workdir}"
    )
    assert wait_for_no_worker(workdir / "demo.db") == []


def test_a_demo_killed_outright_leaves_no_worker_stalled_for_ten_minutes(tmp_path: Path) -> None:
    """SIGKILL (or SIGTERM, or a closed terminal) runs no cleanup in the demo: its worker,
    stalled in the charge the demo was about to kill, notices it is orphaned and ends."""
    workdir = tmp_path / "shop"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrt", "demo", "--dir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"1. A shop's agent")
        deadline = time.monotonic() + 30
        while not workers_of(workdir / "demo.db") and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert wait_for_no_worker(workdir / "demo.db") == []


def test_resume_given_the_database_file_names_its_directory_instead(tmp_path: Path) -> None:
    """The printed commands name demo.db; --resume takes the directory that holds it."""
    workdir = tmp_path / "shop"
    workdir.mkdir(mode=0o700)
    agentrt.open_store(workdir / "demo.db").close()  # as a demo left it
    result = demo("--resume", str(workdir / "demo.db"))
    no_traceback(result)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"agentrt demo: --resume takes the demo's directory, not its database:"
        f" agentrt demo --resume {workdir}\n"
    )


def test_a_db_given_before_demo_is_refused_in_one_sentence_and_starts_nothing(
    tmp_path: Path,
) -> None:
    """`agentrt --db X demo` once ran the demo in a new temporary directory, as if --db had
    not been given: the user looked for the run in X and found nothing there."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    temp = tmp_path / "temp"
    temp.mkdir()
    result = agentrt_cmd("--db", str(notes), "demo", env={**os.environ, "TMPDIR": str(temp)})
    no_traceback(result)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "agentrt: --db is not used by the demo: it makes its own database in --dir DIR"
        " (a new temporary directory by default)\n"
    )
    assert list(temp.iterdir()) == []  # no demo directory made, no worker started
    assert notes.read_text() == "mine\n"


def test_a_db_given_after_demo_is_refused_in_the_same_sentence(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    result = agentrt_cmd("demo", "--db", str(tmp_path / "x.db"), env=env)
    no_traceback(result)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1] == (
        "agentrt demo: error: --db is not used by the demo: it makes its own database in"
        " --dir DIR (a new temporary directory by default)"
    )
    assert list(temp.iterdir()) == []
    assert not (tmp_path / "x.db").exists()
