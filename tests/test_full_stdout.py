"""A standard output with no room left (`> /dev/full`) is said in one line (decision 0205).

`agentrt --db PATH migrate > /dev/full` created the record, then printed a bare
"[Errno 28] No space left on device" (unbuffered) or a traceback with exit status 120
(buffered, at the flush after the command). The line now says what was done and that
its report was lost, or that nothing was changed; exit status 1, as for a closed pipe
(decision 0196). Run with and without PYTHONUNBUFFERED: the first fails on a write inside
the command, the second on the flush after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision
from agentrt._store.sqlite._migrations import SCHEMA_VERSION
from test_cli import clean_env, drive, pending, waiting_run

FULL = "No space left on device"
NOTHING_CHANGED = (
    f"agentrt: the standard output could not be written ({FULL}), so what was printed "
    "is incomplete; nothing was changed\n"
)


def full_stdout(argv: list[str], *, unbuffered: bool) -> subprocess.CompletedProcess[str]:
    """The real command with its standard output /dev/full."""
    env = {k: v for k, v in clean_env().items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "agentrt", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=120,
            env=env,
        )


@pytest.fixture(params=[False, True], ids=["buffered", "unbuffered"])
def unbuffered(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_a_migration_whose_report_cannot_be_written_says_it_was_done(
    tmp_path: Path, unbuffered: bool
) -> None:
    db = tmp_path / "runs.db"
    result = full_stdout(["--db", str(db), "migrate"], unbuffered=unbuffered)
    version = SCHEMA_VERSION
    assert (result.returncode, result.stderr) == (
        1,
        f"agentrt: the migration was done ({db}: created at schema version {version}), "
        f"but its report could not be written to the standard output ({FULL})\n",
    )
    with agentrt.open_existing(db, read_only=True) as store:  # the record is there
        assert store.list_runs() == []


def test_the_read_commands_say_their_output_is_incomplete_and_nothing_changed(
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
        ["--json", "events"],
        ["verify"],
        ["--version"],
    ]
    for command in commands:
        result = full_stdout(["--db", db, *command], unbuffered=unbuffered)
        assert (command, result.returncode, result.stderr) == (command, 1, NOTHING_CHANGED)


def test_a_cursor_is_not_moved_past_events_that_could_not_be_written(
    db_path: Path, tmp_path: Path, unbuffered: bool
) -> None:
    db = str(db_path)
    drive(db, [Decision.complete({"ok": True})], prefix="a", goal="first")
    cursor = tmp_path / "cursor.json"
    result = full_stdout(["--db", db, "events", "--cursor", str(cursor)], unbuffered=unbuffered)
    assert (result.returncode, result.stderr) == (1, NOTHING_CHANGED)
    assert not cursor.exists() or json.loads(cursor.read_text())["heads"] in ([], [[0, None]])


def test_an_approval_decided_before_its_report_was_lost_says_it_was_decided(
    db_path: Path, unbuffered: bool
) -> None:
    db = str(db_path)
    run = waiting_run(db)
    approval = pending(db, run.id)
    result = full_stdout(
        ["--db", db, "--json", "approve", run.id, "--yes", "--by", "ops"], unbuffered=unbuffered
    )
    assert (result.returncode, result.stderr) == (
        1,
        f"agentrt: approval {approval.id} of run {run.id} was approved by ops, but its "
        f"report could not be written to the standard output ({FULL})\n",
    )
    assert pending(db, run.id).status == "approved"
