"""agentrt.export: the read-only follower, its persisted cursor, and the JSON Lines sink.

Every test of a follower takes `database` and runs on SQLite and on PostgreSQL (whose
chain has 16 partitions: a position is one seq per partition), but the hard kill of a
follower process, kept on SQLite for its cost (it says why). The cursor file's own tests
(its mode, its refusals) and a database never created are about files.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt._chain import partition_of
from agentrt._records import Event
from agentrt.export import (
    Cursor,
    CursorError,
    Follower,
    JsonLinesSink,
    load_cursor,
    save_cursor,
)
from agentrt.scripted import ScriptedAgent
from agentrt.trace import event_json
from conftest import FakeClock, Ids, RecordingTool
from support.database import on_postgres, pooled_schema


def drive(db: Path | str, steps: int, *, prefix: str) -> agentrt.Run:
    """A completed run of `steps` read-only tool calls."""
    decisions = [Decision.tool_call("lookup", {"x": i}) for i in range(steps)]
    store = agentrt.open_store(db)
    try:
        return agentrt.Driver(
            store=store,
            agent=ScriptedAgent([*decisions, Decision.complete()]),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
            now=FakeClock(),
            new_id=Ids(prefix),
        ).start_sync("follow me")
    finally:
        store.close()


def all_events(db: Path | str, run_id: str | None = None) -> list[Event]:
    with agentrt.open_existing(db, read_only=True) as store:
        return store.list_events(run_id, 0, 100_000)


class Collect:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.flushes = 0

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def flush(self) -> None:
        self.flushes += 1


def seqs(events: Sequence[Event]) -> list[int]:
    return [e.seq for e in events]


def test_follower_delivers_every_event_in_commit_order_read_only(database: str) -> None:
    first = drive(database, 2, prefix="a")
    drive(database, 1, prefix="b")
    sink = Collect()
    with Follower(database, page_size=3) as follower:
        assert follower._store.read_only
        delivered = follower.run(sink, follow=False)
    assert delivered == len(sink.events)
    assert sink.events == all_events(database)
    assert seqs(sink.events) == sorted(seqs(sink.events))
    assert sink.flushes == -(-delivered // 3)  # flushed once a page

    only = Collect()
    with Follower(database, run_id=first.id) as follower:
        follower.run(only, follow=False)
    assert only.events == all_events(database, first.id)


# How many events each follower delivers before its clean stop, in turn.
STOPS = (5, 3, 4, 8)


def test_cursor_gives_exactly_once_delivery_across_clean_stops(
    database: str, tmp_path: Path
) -> None:
    """Every event on file is delivered once, counted and identified by seq and hash.

    Each follower stops after a few events (`STOPS`: inside a page, at its end, and
    after a page and a bit, with pages of 4) and a new one, on a new open of the
    file, picks up from the cursor; more events are committed between stops. What
    each follower says it delivered is what its sink got, the cursor names the last
    event given of its partition (the one partition on SQLite; a run's on PostgreSQL,
    whose chain has 16), and the events given, in order, are each partition's log.
    """
    drive(database, 3, prefix="a")
    cursor = tmp_path / "export.cursor"
    got: list[Event] = []
    stopped_at: tuple[tuple[int, str], ...] | None = None
    for stop in range(100):
        sink = Collect()
        with Follower(database, cursor=cursor, page_size=4) as follower:
            start = follower.positions
            delivered = follower.run(sink, follow=False, max_events=STOPS[stop % len(STOPS)])
            end = follower.positions
        partitions = len(start)
        assert start == (stopped_at or ((0, ""),) * partitions), f"stop {stop} restarted"
        assert delivered == len(sink.events) <= STOPS[stop % len(STOPS)]
        if delivered == 0:
            assert end == start
            break
        last = sink.events[-1]
        assert end[partition_of(last.run_id, partitions)] == (last.seq, last.hash)
        saved = load_cursor(cursor)
        assert saved is not None and saved.heads == end
        stopped_at = end
        got += sink.events
        if stop == 1:
            drive(database, 2, prefix="b")  # more events arrive between stops
    expected = all_events(database)
    assert len(expected) > 25
    tally = Counter((e.seq, e.hash) for e in got)
    missing = [(e.seq, e.hash[:12]) for e in expected if (e.seq, e.hash) not in tally]
    twice = [(seq, h[:12]) for (seq, h), n in tally.items() if n > 1]
    assert (missing, twice) == ([], []), f"lost {missing}, delivered twice {twice}"
    assert len(got) == len(expected)
    # In commit order (each partition's seq order), each the event on file, payload and all;
    # with one partition (SQLite), `got == expected`.
    assert sorted(got, key=lambda e: e.seq) == expected
    for part in range(partitions):
        assert [e for e in got if partition_of(e.run_id, partitions) == part] == [
            e for e in expected if partition_of(e.run_id, partitions) == part
        ]


class Crash(BaseException):
    """Stands for the process dying inside the sink."""


def test_a_crash_mid_page_redelivers_at_most_that_page(database: str, tmp_path: Path) -> None:
    drive(database, 4, prefix="a")
    expected = seqs(all_events(database))
    cursor = tmp_path / "c"
    got: list[int] = []

    def dying(event: Event) -> None:
        got.append(event.seq)
        if len(got) == 11:
            raise Crash

    with Follower(database, cursor=cursor, page_size=4) as follower, pytest.raises(Crash):
        follower.run(dying, follow=False)
    saved = load_cursor(cursor)
    assert saved is not None and saved.seq == expected[7]  # two whole pages acknowledged
    again = Collect()
    with Follower(database, cursor=cursor, page_size=4) as follower:
        follower.run(again, follow=False)
    assert seqs(again.events) == expected[8:]
    redelivered = [s for s in got if s in seqs(again.events)]
    assert redelivered == expected[8:11]  # the part of the page that was in flight, no more


_FOLLOW_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from agentrt.export import Follower
    db, cursor, out = sys.argv[1:4]
    with open(out, "a") as f, Follower(db, cursor=cursor, page_size=5, interval=0.02) as follower:
        def sink(event):
            f.write(f"{event.seq}\\n")
            f.flush()
            time.sleep(0.01)
        follower.run(sink, follow=False)
    """
)


@pytest.mark.slow
def test_a_hard_kill_redelivers_at_most_one_page(db_path: Path, tmp_path: Path) -> None:
    """On SQLite only, for its cost (a process of its own): on PostgreSQL a killed page
    is delivered again by test_a_page_killed_mid_delivery_leaves_none_of_its_lines, and a
    restart by its cursor file is test_cli_postgres.py's."""
    drive(db_path, 16, prefix="a")
    expected = seqs(all_events(db_path))
    assert len(expected) > 60
    cursor, out = tmp_path / "cursor", tmp_path / "out.txt"
    out.touch()
    argv = [sys.executable, "-c", _FOLLOW_SCRIPT, str(db_path), str(cursor), str(out)]
    proc = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 20
        while len(out.read_text().split()) < 23 and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(10)
    first = [int(s) for s in out.read_text().split()]
    assert 23 <= len(first) < len(expected)
    subprocess.run(argv, check=True, timeout=30)
    everything = [int(s) for s in out.read_text().split()]
    again = everything[len(first) :]
    # Every event arrives, in order; what came twice is one contiguous piece of one page.
    assert sorted(set(everything)) == expected
    assert again == expected[expected.index(again[0]) :]
    duplicates = [s for s in again if s in first]
    assert len(duplicates) <= 5
    assert duplicates == first[len(first) - len(duplicates) :]


def test_following_sees_events_committed_after_it_started(database: str) -> None:
    drive(database, 1, prefix="a")
    with Follower(database) as first:  # where the log ends now: one seq per partition
        first.run(Collect(), follow=False)
        end = first.after
    sink = Collect()
    with Follower(database, interval=0.01, after_seq=end) as follower:
        thread = threading.Thread(
            target=follower.run, args=(sink,), kwargs={"max_events": 1, "timeout": 20}
        )
        thread.start()
        time.sleep(0.05)  # the follower is polling an unchanged log
        assert sink.events == []
        run = drive(database, 0, prefix="b")
        thread.join(20)
    assert not thread.is_alive()
    assert [(e.run_id, e.type) for e in sink.events] == [(run.id, "run.created")]


def test_stop_ends_following_between_pages(database: str) -> None:
    drive(database, 0, prefix="a")
    stop = threading.Event()
    sink = Collect()
    with Follower(database, interval=0.01) as follower:
        timer = threading.Timer(0.1, stop.set)
        timer.start()
        started = time.monotonic()
        follower.run(sink, stop=stop, timeout=20)
        timer.join()
    assert time.monotonic() - started < 10
    assert sink.events == all_events(database)


def test_timeout_ends_following(database: str) -> None:
    drive(database, 0, prefix="a")
    with Follower(database, interval=0.01) as follower:
        started = time.monotonic()
        follower.run(Collect(), timeout=0.1)
    assert 0.1 <= time.monotonic() - started < 5


def test_cursor_file_is_written_atomically_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    old = os.umask(0)
    try:
        save_cursor(path, Cursor(((3, "ab" * 32),), None))
        save_cursor(path, Cursor(((9, "cd" * 32), (0, "")), "r" * 32))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]  # no temp file left
    assert json.loads(path.read_text()) == {
        "version": 2,
        "heads": [[9, "cd" * 32], [0, ""]],
        "run_id": "r" * 32,
    }
    assert load_cursor(path) == Cursor(((9, "cd" * 32), (0, "")), "r" * 32)
    assert load_cursor(tmp_path / "missing") is None


@pytest.mark.parametrize(
    "content",
    ["", "{", "[]", '{"version": 2, "seq": 1, "hash": "", "run_id": null}',
     '{"version": 3, "heads": [[1, ""]], "run_id": null}',
     '{"version": 2, "heads": [], "run_id": null}',
     '{"version": 2, "heads": [[1]], "run_id": null}',
     '{"version": 2, "heads": [[-1, ""]], "run_id": null}',
     '{"version": 1, "seq": -1, "hash": "", "run_id": null}',
     '{"version": 1, "seq": 1, "hash": 5, "run_id": null}'],
)  # fmt: skip
def test_an_unusable_cursor_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "c"
    path.write_text(content)
    with pytest.raises(CursorError):
        load_cursor(path)


def test_a_cursor_of_another_run_or_database_is_refused(database: str, tmp_path: Path) -> None:
    run = drive(database, 0, prefix="a")
    cursor = tmp_path / "c"
    with Follower(database, run_id=run.id, cursor=cursor) as follower:
        follower.run(Collect(), follow=False)
    with pytest.raises(CursorError, match="follows run"):
        Follower(database, cursor=cursor)
    with ExitStack() as stack:  # a database of the same kind: the same partitions
        other = (
            pooled_schema(stack, "another database")
            if on_postgres(database)
            else str(tmp_path / "other.db")
        )
        drive(other, 0, prefix="b")  # same seqs, different hashes
        with pytest.raises(CursorError, match="does not hold"):
            Follower(other, run_id=run.id, cursor=cursor)


def test_follower_never_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(agentrt.StoreError):
        Follower(missing)
    assert not missing.exists()


def test_follower_refuses_bad_settings(database: str) -> None:
    drive(database, 0, prefix="a")
    for kwargs in ({"interval": 0}, {"page_size": 0}, {"after_seq": -1}):
        with pytest.raises(ValueError):
            Follower(database, **kwargs)  # type: ignore[arg-type]


def test_json_lines_sink_appends_durable_lines(database: str, tmp_path: Path) -> None:
    drive(database, 1, prefix="a")
    out = tmp_path / "events.jsonl"
    with JsonLinesSink(out) as sink, Follower(database) as follower:
        follower.run(sink, follow=False, max_events=3)
        after = follower.after
    with JsonLinesSink(out) as sink, Follower(database, after_seq=after) as follower:
        follower.run(sink, follow=False)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    lines = out.read_text().splitlines()
    expected = all_events(database)
    assert [json.loads(line) for line in lines] == [
        json.loads(json.dumps(event_json(e))) for e in expected
    ]
    assert all(line.isascii() for line in lines)


# --- the JSON Lines sink under a hard kill ------------------------------------------------------


_SINK_KILL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from agentrt.export import Follower, JsonLinesSink

    db, cursor, out, page_size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with JsonLinesSink(out) as sink:
        taken = []

        def deliver(event):
            # The second page is killed just before its end, when well over a buffer's
            # worth of its lines has been given to the sink.
            if len(taken) == 2 * page_size - 2:
                os.kill(os.getpid(), signal.SIGKILL)
            taken.append(event)
            sink(event)

        deliver.flush = sink.flush
        with Follower(db, cursor=cursor, page_size=page_size) as follower:
            follower.run(deliver, follow=False)
    """
)


@pytest.mark.slow
def test_a_page_killed_mid_delivery_leaves_none_of_its_lines(database: str, tmp_path: Path) -> None:
    drive(database, 16, prefix="a")
    expected = seqs(all_events(database))
    page_size = 40  # 40 lines of about 350 bytes: more than a write buffer's worth
    cursor, out = tmp_path / "cursor", tmp_path / "out.jsonl"
    argv = [sys.executable, "-c", _SINK_KILL_SCRIPT, str(database), str(cursor), str(out)]
    killed = subprocess.run([*argv, str(page_size)], timeout=60)
    assert killed.returncode == -signal.SIGKILL
    saved = load_cursor(cursor)
    assert saved is not None and saved.seq == expected[page_size - 1]
    # Of the killed page nothing reached the file: only the acknowledged first page is there.
    assert [json.loads(line)["seq"] for line in out.read_text().splitlines()] == expected[
        :page_size
    ]
    # The restarted exporter delivers the killed page again and the rest, once each.
    with JsonLinesSink(out) as sink, Follower(database, cursor=cursor) as follower:
        follower.run(sink, follow=False)
    assert [json.loads(line)["seq"] for line in out.read_text().splitlines()] == expected


def test_json_lines_sink_writes_a_page_as_one_write_of_whole_lines(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drive(database, 16, prefix="a")
    events = all_events(database)
    out = tmp_path / "out.jsonl"
    writes: list[bytes] = []
    real_write = os.write

    def spy(fd: int, data: bytes | memoryview) -> int:
        if fd not in (0, 1, 2):
            writes.append(bytes(data))
        return real_write(fd, data)

    with JsonLinesSink(out) as sink:
        monkeypatch.setattr(os, "write", spy)
        for event in events:
            sink(event)
        assert out.read_bytes() == b""  # nothing of a page lands before flush()
        sink.flush()
        monkeypatch.undo()
    assert len(writes) == 1 and writes[0].endswith(b"\n")
    lines = out.read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == seqs(events)
    assert len(writes[0]) > 16_384  # big enough that a buffered stream would have split it


def test_json_lines_sink_cuts_a_torn_tail_when_it_opens(database: str, tmp_path: Path) -> None:
    drive(database, 1, prefix="a")
    events = all_events(database)
    out = tmp_path / "out.jsonl"
    whole = json.dumps(event_json(events[0])) + "\n"
    out.write_text(whole + json.dumps(event_json(events[1]))[:37])  # a kill inside a write
    with JsonLinesSink(out) as sink:
        for event in events[1:]:
            sink(event)
    lines = out.read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == seqs(events)
    # A file holding only a torn line is cut to nothing; an intact file is left alone.
    out.write_text('{"seq": 1, "pay')
    JsonLinesSink(out).close()
    assert out.read_bytes() == b""
    out.write_text(whole)
    JsonLinesSink(out).close()
    assert out.read_text() == whole
