"""`verify` checks the file itself too: SQLite's integrity check, reported apart from the chain.

The damage is real: bytes of a page overwritten in the closed file, or an index
whose definition no longer matches its entries. The chain and the file are
reported on lines (and JSON keys) of their own, and the exit status is 1 when
either fails.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agentrt._records import FileCheck
from agentrt._store import open_existing
from agentrt.cli import main
from support.damage import finished_run_file, smash_page


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return finished_run_file(tmp_path / "agentrt.db")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _page_problem(root: int, said: str) -> str:
    """What SQLite says of damage on page `root`, the root page of its b-tree, passed through
    as SQLite writes it: 3.42 put the tree in the prefix ("Page 13: " before it, "Tree 13
    page 13: " since; decision XXXX)."""
    if sqlite3.sqlite_version_info < (3, 42, 0):
        return f"Page {root}: {said}"
    return f"Tree {root} page {root}: {said}"


def test_verify_of_a_sound_file_reports_the_chain_and_the_file_on_lines_of_their_own(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_existing(db, read_only=True) as store:
        seq, digest = store.chain_head()
        assert store.check_file() == FileCheck(ok=True, check="quick_check")
        assert store.check_file(full=True) == FileCheck(ok=True, check="integrity_check")
    code, out, err = _cli(capsys, "--db", str(db), "verify")
    assert (code, err) == (0, "")
    assert out == (
        f"intact: {seq} events checked; head {seq}:{digest}\n"
        "file: ok (PRAGMA integrity_check found no damage)\n"
    )
    code, out, _ = _cli(capsys, "--db", str(db), "verify", "--quick")
    assert code == 0
    assert out.splitlines()[1] == "file: ok (PRAGMA quick_check found no damage)"
    code, out, _ = _cli(capsys, "--db", str(db), "--json", "verify")
    assert code == 0
    assert json.loads(out)["file"] == {"ok": True, "check": "integrity_check", "problems": []}


def test_a_damaged_index_page_fails_verify_while_the_chain_stays_intact(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = smash_page(db, "events_run_seq")
    with open_existing(db, read_only=True) as store:
        assert store.verify_events().intact  # the chain reads the table, not the index
        quick = store.check_file()
        full = store.check_file(full=True)
    assert (quick.ok, quick.check, full.ok, full.check) == (
        False,
        "quick_check",
        False,
        "integrity_check",
    )
    damaged = _page_problem(page, "btreeInitPage() returns error code 11")
    assert quick.problems[0] == damaged
    # integrity_check stops at this damage; quick_check's findings follow what it said.
    assert full.problems == (
        "SQLite could not finish integrity_check: database disk image is malformed",
        *quick.problems,
    )
    code, out, err = _cli(capsys, "--db", str(db), "verify")
    assert (code, err) == (1, "")
    chain, file = out.splitlines()
    assert chain.startswith("intact: ")
    assert file.startswith(
        "file: damaged (PRAGMA integrity_check): SQLite could not finish integrity_check: "
        f"database disk image is malformed; {damaged}"
    )
    code, out, _ = _cli(capsys, "--db", str(db), "--json", "verify")
    doc = json.loads(out)
    assert code == 1
    assert doc["intact"] is True
    assert doc["file"]["ok"] is False
    assert doc["file"]["check"] == "integrity_check"
    assert doc["file"]["problems"] == list(full.problems)


def test_a_damaged_events_page_is_an_unreadable_break_and_a_damaged_file_never_a_traceback(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    smash_page(db, "events")
    with open_existing(db, read_only=True) as store:
        report = store.verify_events()
        checked = store.check_file()
    assert report.first_break is not None
    assert (report.intact, report.first_break.seq, report.first_break.problem) == (
        False,
        1,
        "unreadable",
    )
    assert report.first_break.detail == (
        "SQLite cannot read the events from here: database disk image is malformed"
    )
    assert not checked.ok
    code, out, err = _cli(capsys, "--db", str(db), "verify")
    assert (code, err) == (1, "")
    chain, file = out.splitlines()
    assert chain == (
        "broken at seq 1: unreadable (the event's stored text, or the page holding it, cannot "
        "be read): SQLite cannot read the events from here: database disk image is malformed; "
        "0 events verified before it, last verified none"
    )
    assert file.startswith("file: damaged (PRAGMA integrity_check): ")


def test_an_index_that_disagrees_with_its_table_is_found_by_the_full_check_only(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            "UPDATE sqlite_master SET sql = 'CREATE INDEX events_run_seq ON events (step_id, seq)'"
            " WHERE name = 'events_run_seq'"
        )
        conn.execute("PRAGMA writable_schema = OFF")
    finally:
        conn.close()
    with open_existing(db, read_only=True) as store:
        assert store.check_file(full=False).ok
        full = store.check_file(full=True)
    assert not full.ok
    assert any("missing from index events_run_seq" in p for p in full.problems)
    assert _cli(capsys, "--db", str(db), "verify", "--quick")[0] == 0
    code, out, _ = _cli(capsys, "--db", str(db), "verify")
    assert code == 1
    assert "missing from index events_run_seq" in out.splitlines()[1]


def test_the_text_shows_the_first_five_problems_and_counts_the_rest(db: Path) -> None:
    from agentrt.cli._verify import _file_text

    many = FileCheck(ok=False, check="quick_check", problems=tuple(f"p{i}" for i in range(8)))
    assert _file_text(many) == "file: damaged (PRAGMA quick_check): p0; p1; p2; p3; p4; and 3 more"
    capped = FileCheck(ok=False, check="quick_check", problems=tuple(f"p{i}" for i in range(100)))
    assert _file_text(capped).endswith("; p4; and 95+ more")


def test_a_damaged_first_page_is_refused_at_open_in_one_sentence(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open(db, "r+b") as f:
        f.seek(100)  # the b-tree header of page 1, which holds the schema
        f.write(b"\xff" * 16)
    code, out, err = _cli(capsys, "--db", str(db), "verify")
    assert (code, out) == (1, "")
    assert err == (
        f"agentrt: cannot open {db}: cannot read the database: database disk image is malformed\n"
    )
