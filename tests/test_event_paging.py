"""`agentrt events --after` pages exactly on a chain in partitions (issue 21, decision 0095).

Each partition numbers its own events (`seq = head + N`, decision 0093), so across
partitions a later commit can carry a lower seq: a quiet partition's next event, or
one whose transaction was still open while the page was read. The page's hint
therefore names one seq per partition, the last shown of each, and the hinted
command starts each partition there: across the two pages every event of the
record appears exactly once. Everything runs through `agentrt.cli.main`, on a
SQLite file of 4 partitions and on PostgreSQL with its default 16; a transaction
is held open in the test's own thread (the command reads on connections of its
own, which no row lock blocks), so nothing sleeps or races.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from agentrt._chain import partition_of
from agentrt._records import Event
from agentrt._store import Store, open_store
from agentrt.cli import main
from agentrt.export import Follower
from support.postgres import postgres_schema
from test_chain_partitions import T0, make_run, note


class Record:
    """A database of N partitions the test writes to, and its `--db` text."""

    def __init__(self, db: str, partitions: int) -> None:
        self.db = db
        self.partitions = partitions

    def store(self, stack: ExitStack) -> Store:
        store = open_store(self.db, chain_partitions=self.partitions)
        stack.callback(store.close)
        return store

    def run_in(self, partition: int, k: int = 0) -> str:
        found = [
            f"r{j}" for j in range(10_000) if partition_of(f"r{j}", self.partitions) == partition
        ]
        return found[k]


@pytest.fixture(params=["sqlite-N4", "postgres-N16"])
def record(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Record]:
    with ExitStack() as stack:
        if request.param == "sqlite-N4":
            yield Record(str(tmp_path / "paged.db"), 4)
        else:
            yield Record(postgres_schema(stack, "the paging tests"), 16)


def page(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[list[int], str]:
    """The seqs one `--json events` command printed, and its hint (stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return [json.loads(line)["seq"] for line in out.splitlines()], err


def hinted(hint: str) -> list[str]:
    """The argv of the command a hint names (after `agentrt`), with `--json` kept first."""
    words = shlex.split(hint.split(": ", 1)[1])
    assert words[:3] == ["agentrt", "--db", words[2]]
    return [*words[1:3], "--json", *words[3:]]


def all_seqs(store: Store) -> list[int]:
    return [e.seq for e in store.list_events(None, 0, 100_000, cap=None)]


def test_an_event_whose_transaction_was_open_during_the_page_is_on_the_hinted_page(
    record: Record, capsys: pytest.CaptureFixture[str]
) -> None:
    # Partition 2's event takes its seq and stays uncommitted while the last partition
    # commits higher seqs and the page is read past it; it commits after the page.
    n = record.partitions
    late, busy = record.run_in(2), record.run_in(n - 1)
    on_sqlite = n == 4  # one writer at a time there: the busy partition commits first
    with ExitStack() as stack:
        store, reader = record.store(stack), record.store(stack)
        make_run(store, late)
        if on_sqlite:
            make_run(store, busy)
            for i in range(3):
                note(store, busy, i)
        with store.transaction() as held:
            held.record_reconciled(late, "held", {"held": True}, T0)
            (uncommitted,) = held.events
            if not on_sqlite:  # another writer commits past it while it is open
                make_run(reader, busy)
                for i in range(3):
                    note(reader, busy, i)
            committed = all_seqs(reader)
            first, hint = page(capsys, "--db", record.db, "--json", "events", "--limit", "5")
        assert uncommitted.seq not in committed
        assert first == sorted(committed)[:5]
        assert max(first) > uncommitted.seq  # commit order is not seq order
        second, last = page(capsys, *hinted(hint))
        everything = all_seqs(reader)
    assert last == ""
    assert uncommitted.seq in second
    assert sorted(first + second) == everything  # none missed
    assert len(first + second) == len(everything)  # none twice


def test_a_quiet_partitions_next_events_below_the_seqs_shown_are_on_the_hinted_page(
    record: Record, capsys: pytest.CaptureFixture[str]
) -> None:
    n = record.partitions
    busy, first_quiet, second_quiet = record.run_in(n - 1), record.run_in(1), record.run_in(0)
    with ExitStack() as stack:
        store = record.store(stack)
        make_run(store, busy)  # seqs N-1, 2N-1, then 3N-1, ... for its notes
        for i in range(4):
            note(store, busy, i)
        make_run(store, first_quiet)  # seqs 1 and 1+N
        shown, hint = page(capsys, "--db", record.db, "--json", "events", "--limit", "5")
        assert main(["--db", record.db, "events", "--limit", "5"]) == 0
        as_text = capsys.readouterr().out.splitlines()
        assert [int(line.split()[0]) for line in as_text[1:-1]] == shown
        assert as_text[-1] + "\n" == hint  # the same hint, on stdout
        # Committed after the page, with seqs below the highest shown (3N-1): partition
        # 0's first two, N and 2N, and partition 1's third, 1+2N.
        make_run(store, second_quiet)
        note(store, first_quiet, 0)
        everything = all_seqs(store)
    assert shown == sorted([1, 1 + n, n - 1, 2 * n - 1, 3 * n - 1])
    assert {n, 2 * n, 1 + 2 * n} <= set(everything)
    rest, tail = page(capsys, *hinted(hint))
    assert tail == ""  # the last page: no hint
    assert sorted(shown + rest) == everything
    assert len(shown + rest) == len(everything)
    after = [0] * n
    after[1], after[n - 1] = 1 + n, 3 * n - 1
    place = ",".join(map(str, after))
    said = f"more events after seq {place} (the last shown of each of the {n} chain partitions): "
    assert hint.startswith(said + "agentrt --db ")
    assert hint.endswith(f" events --after {place}\n")
    if n == 4:
        assert hint == f"{said}agentrt --db {record.db} events --after {place}\n"


def test_paging_by_hints_while_quiet_partitions_commit_shows_every_event_once(
    record: Record, capsys: pytest.CaptureFixture[str]
) -> None:
    n = record.partitions
    quiet, busy = [record.run_in(p) for p in (0, 1, 2)], record.run_in(n - 1)
    seen: list[int] = []
    with ExitStack() as stack:
        store = record.store(stack)
        make_run(store, busy)
        for i in range(10):
            note(store, busy, i)
        argv = ["--db", record.db, "--json", "events", "--limit", "3"]
        for i in range(6):  # a page, then a write to a quiet partition, below its seqs
            shown, hint = page(capsys, *argv)
            seen += shown
            assert hint, f"page {i} is not the last"
            if i < 3:
                make_run(store, quiet[i])
            else:
                note(store, quiet[i - 3], i)
            argv = [*hinted(hint), "--limit", "3"]
        while True:
            shown, hint = page(capsys, *argv)
            seen += shown
            if not hint:
                break
            argv = [*hinted(hint), "--limit", "3"]
        everything = all_seqs(store)
    assert sorted(seen) == everything
    assert len(seen) == len(everything)


def test_a_run_and_a_single_partition_still_page_by_one_seq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parted = Record(str(tmp_path / "four.db"), 4)
    one = Record(str(tmp_path / "one.db"), 1)
    with ExitStack() as stack:
        for rec in (parted, one):
            store = rec.store(stack)
            run_id = rec.run_in(rec.partitions - 1)
            make_run(store, run_id)
            for i in range(3):
                note(store, run_id, i)
    run_id = parted.run_in(3)
    _, hint = page(capsys, "--db", parted.db, "--json", "events", run_id, "--limit", "2")
    assert hint == f"more events after seq 7: agentrt --db {parted.db} events {run_id} --after 7\n"
    _, hint = page(capsys, "--db", one.db, "--json", "events", "--limit", "2")
    assert hint == f"more events after seq 2: agentrt --db {one.db} events --after 2\n"


def test_an_after_list_that_does_not_fit_the_partitions_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = Record(str(tmp_path / "four.db"), 4)
    with ExitStack() as stack:
        make_run(rec.store(stack), rec.run_in(0))
    for bad, why in (
        ("1,2", "--after names 2 seqs and this database's chain has 4 partition(s)"),
        ("1,,2,3", "argument --after: in '1,,2,3': not an integer: ''"),
        ("1,2,-3,4", "argument --after: in '1,2,-3,4': must be between 0 and"),
        ("x", "argument --after: not an integer: 'x'"),
    ):
        code = main(["--db", rec.db, "events", "--after", bad])
        _, err = capsys.readouterr()
        assert code == 2, bad
        assert why in err, err
    assert main(["--db", rec.db, "--json", "events", "--after", "8,0,0,0"]) == 0
    out, _ = capsys.readouterr()
    assert out == ""  # partition 0's two events are 4 and 8: nothing after them


def test_a_follower_started_at_anothers_after_delivers_exactly_what_it_did_not(
    tmp_path: Path,
) -> None:
    rec = Record(str(tmp_path / "four.db"), 4)
    a, b = rec.run_in(3), rec.run_in(1)
    with ExitStack() as stack:
        store = rec.store(stack)
        make_run(store, a)
        note(store, a, 0)
        got: list[Event] = []
        with Follower(rec.db, page_size=2) as follower:
            assert follower.run(got.append, follow=False, max_events=2) == 2
            assert follower.after == (0, 0, 0, 7)
        make_run(store, b)  # seqs 1 and 5, below the 7 delivered
        with Follower(rec.db, after_seq=follower.after) as later:
            later.run(got.append, follow=False)
            assert later.after == (0, 5, 0, 11)
        with Follower(rec.db, run_id=b, after_seq=(0, 1, 0, 0)) as one_run:
            assert [e.seq for e in one_run.poll()] == [5]
            one_run.run(lambda e: None, follow=False)
            assert one_run.after == (5,)
        everything = store.list_events(None, 0, 100, cap=None)
    assert sorted(e.seq for e in got) == [e.seq for e in everything] == [1, 3, 5, 7, 11]
    with pytest.raises(ValueError, match="names 2 positions"):
        Follower(rec.db, after_seq=(0, 0))
    with pytest.raises(ValueError, match="negative"):
        Follower(rec.db, after_seq=(0, 0, -1, 0))
