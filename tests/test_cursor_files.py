"""The follower's cursor file, as `agentrt events --cursor` and `agentrt export --cursor`
keep it (found by the read-side attack, decision 0154).

- A follower reads back every cursor it writes, whatever the chain's number of
  partitions (up to 1,024): it used to read the first 4,096 characters only, so a
  cursor of some 50 partitions or more was "not JSON" at the next start.
- One cursor file is followed by one follower at a time: two at once each delivered
  every event, and each moved the other's cursor.
- A cursor file that is a symlink, or that others may write, is refused: reading went
  through the link and writing replaced it, and anyone who can write the cursor can
  make the follower skip events (a seq with no hash is taken unchecked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt._records import Event
from agentrt.export import CursorError, Follower, load_cursor
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support.damage import finished_run_file


def runs_in_partitions(path: Path, partitions: int, runs: int) -> Path:
    store = agentrt.open_store(path, chain_partitions=partitions)
    try:
        for k in range(runs):
            driver = agentrt.Driver(
                store=store,
                agent=ScriptedAgent(
                    [Decision.tool_call("lookup", {"x": k}), Decision.complete({})]
                ),
                policy=agentrt.default_policy(),
                tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
                now=FakeClock(),
                new_id=Ids("abcdef"[k]),
            )
            assert driver.start_sync("look it up").status == agentrt.RunStatus.COMPLETED
    finally:
        store.close()
    return path


def test_a_cursor_of_a_chain_in_1024_partitions_is_read_back_by_the_next_follower(
    tmp_path: Path,
) -> None:
    db = runs_in_partitions(tmp_path / "wide.db", 1024, 3)
    cursor = tmp_path / "cursor.json"
    seen: list[Event] = []
    with Follower(db, cursor=cursor) as follower:
        follower.run(seen.append, follow=False)
        delivered = follower.positions
    assert cursor.stat().st_size > 4096  # what the reader used to stop at
    assert seen
    saved = load_cursor(cursor)
    assert saved is not None and saved.heads == delivered
    again: list[Event] = []
    with Follower(db, cursor=cursor) as follower:
        assert follower.positions == delivered
        follower.run(again.append, follow=False)
    assert again == []


def test_a_cursor_file_larger_than_any_cursor_is_refused_in_one_sentence(
    tmp_path: Path,
) -> None:
    db = finished_run_file(tmp_path / "agentrt.db", steps=1)
    cursor = tmp_path / "cursor.json"
    cursor.write_text(json.dumps({"version": 2, "heads": [[0, ""]], "pad": "x" * 10**7}))
    with pytest.raises(CursorError, match=r"cursor\.json is larger than"):
        Follower(db, cursor=cursor)


def test_a_second_follower_of_the_same_cursor_file_is_refused_while_the_first_holds_it(
    tmp_path: Path,
) -> None:
    db = finished_run_file(tmp_path / "agentrt.db", steps=2)
    cursor = tmp_path / "cursor.json"
    first: list[Event] = []
    with Follower(db, cursor=cursor, page_size=3) as one:
        one.run(first.append, follow=False, max_events=3)
        with pytest.raises(CursorError, match=r"in use by another follower"):
            Follower(db, cursor=cursor)
        one.run(first.append, follow=False)
    # Once the first is closed, the cursor is free again and says where it stopped.
    rest: list[Event] = []
    with Follower(db, cursor=cursor) as two:
        two.run(rest.append, follow=False)
    assert rest == []
    assert [e.seq for e in first] == list(range(1, len(first) + 1))


@pytest.mark.parametrize("fails", ["no-database", "cursor-not-json"])
def test_a_follower_that_fails_to_start_lets_go_of_its_cursor_file(
    tmp_path: Path, fails: str
) -> None:
    db = finished_run_file(tmp_path / "agentrt.db", steps=2)
    cursor = tmp_path / "cursor.json"
    if fails == "no-database":
        with pytest.raises(agentrt.StoreError):
            Follower(tmp_path / "missing.db", cursor=cursor)
    else:
        cursor.write_text("{not json")
        os.chmod(cursor, 0o600)
        with pytest.raises(CursorError, match="not JSON"):
            Follower(db, cursor=cursor)
        cursor.unlink()
    # Nothing holds the cursor file now: the next follower of it starts.
    seen: list[Event] = []
    with Follower(db, cursor=cursor) as follower:
        follower.run(seen.append, follow=False)
    assert seen and [e.seq for e in seen] == list(range(1, len(seen) + 1))


def test_agentrt_events_on_a_cursor_another_follower_holds_is_one_line_and_exit_1(
    tmp_path: Path,
) -> None:
    db = finished_run_file(tmp_path / "agentrt.db", steps=1)
    cursor = tmp_path / "cursor.json"
    env = {k: v for k, v in os.environ.items() if k != "AGENTRT_DB"}
    with Follower(db, cursor=cursor):
        done = subprocess.run(
            [sys.executable, "-m", "agentrt", "--db", str(db), "events", "--cursor", str(cursor)],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=30,
        )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("agentrt: ") and "in use by another follower" in line, line
    assert "SEQ" not in done.stdout and "run.created" not in done.stdout


def test_a_cursor_file_that_is_a_symlink_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    db = finished_run_file(tmp_path / "agentrt.db", steps=1)
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"version": 2, "heads": [[2, ""]], "run_id": None}))
    target.chmod(0o600)
    cursor = tmp_path / "cursor.json"
    cursor.symlink_to(target)
    with pytest.raises(CursorError, match=r"cursor\.json is a symlink"):
        Follower(db, cursor=cursor)
    assert cursor.is_symlink()


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666], ids=["group", "others", "everyone"])
def test_a_cursor_file_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    db = finished_run_file(tmp_path / "agentrt.db", steps=1)
    cursor = tmp_path / "cursor.json"
    # A seq with no hash is taken unchecked: whoever can write this skips events.
    cursor.write_text(json.dumps({"version": 2, "heads": [[9, ""]], "run_id": None}))
    cursor.chmod(mode)
    with pytest.raises(CursorError, match=r"writable by group or others"):
        Follower(db, cursor=cursor)
