"""The SQLite store answers hostile arguments with its own errors or a correct answer.

A path with a NUL, a count or seq beyond SQLite's 64-bit integers, a problem limit beyond
SQLite's 32-bit one, a run id no UTF-8 can hold: never a `ValueError` of the OS layer, an
`OverflowError` of the driver, a codec's error, or a sound file reported damaged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt._errors import NotFoundError, StoreError
from agentrt._records import Limits
from agentrt._store import open_existing, open_store
from conftest import EPOCH

BEYOND_INT64 = 2**64


@pytest.mark.parametrize("opener", [open_store, open_existing])
def test_a_database_path_with_a_nul_is_refused_as_a_store_error(
    tmp_path: Path, opener: object
) -> None:
    with pytest.raises(StoreError, match="NUL"):
        opener(str(tmp_path / "a\0b.db"))  # type: ignore[operator]


def _store_with_one_run(tmp_path: Path) -> object:
    store = open_store(tmp_path / "x.db")
    with store.transaction() as tx:
        tx.create_run(
            "r1",
            "goal",
            Limits(),
            owner="me",
            lease_expires_at=EPOCH,
            holder="{}",
            specs=[],
            now=EPOCH,
        )
    return store


def test_counts_and_seqs_beyond_sixty_four_bits_read_as_no_bound_or_nothing_past_them(
    tmp_path: Path,
) -> None:
    store = _store_with_one_run(tmp_path)
    assert [r.id for r in store.list_runs(limit=BEYOND_INT64)] == ["r1"]  # type: ignore[attr-defined]
    assert store.list_runs(offset=BEYOND_INT64) == []  # type: ignore[attr-defined]
    assert len(store.list_events(limit=BEYOND_INT64)) == 2  # type: ignore[attr-defined]
    assert store.list_events(after_seq=BEYOND_INT64) == []  # type: ignore[attr-defined]
    assert store.list_steps("r1", limit=BEYOND_INT64) == []  # type: ignore[attr-defined]
    whole = store.verify_events(to_seq=BEYOND_INT64)  # type: ignore[attr-defined]
    assert (whole.intact, whole.checked) == (True, 2)
    past = store.verify_events(from_seq=BEYOND_INT64)  # type: ignore[attr-defined]
    assert (past.intact, past.checked) == (True, 0)
    store.close()  # type: ignore[attr-defined]


def test_a_kept_head_beyond_sixty_four_bits_is_a_truncated_chain_not_a_crash(
    tmp_path: Path,
) -> None:
    store = _store_with_one_run(tmp_path)
    report = store.verify_events(head=(BEYOND_INT64, "ab" * 32))  # type: ignore[attr-defined]
    assert not report.intact
    store.close()  # type: ignore[attr-defined]


def test_a_problem_limit_beyond_thirty_two_bits_does_not_report_a_sound_file_damaged(
    tmp_path: Path,
) -> None:
    store = _store_with_one_run(tmp_path)
    for limit in (2**31, BEYOND_INT64):
        check = store.check_file(max_problems=limit)  # type: ignore[attr-defined]
        assert (check.ok, check.problems) == (True, ())
        full = store.check_file(full=True, max_problems=limit)  # type: ignore[attr-defined]
        assert (full.ok, full.problems) == (True, ())
    store.close()  # type: ignore[attr-defined]


def test_a_run_id_no_utf8_can_hold_is_not_found_rather_than_a_codec_error(
    tmp_path: Path,
) -> None:
    store = _store_with_one_run(tmp_path)
    with pytest.raises(NotFoundError):
        store.get_run("r\udcff")  # type: ignore[attr-defined]
    with pytest.raises(NotFoundError):
        store.lease("r\udcff")  # type: ignore[attr-defined]
    assert store.list_steps("r\udcff") == []  # type: ignore[attr-defined]
    assert store.list_events("r\udcff") == []  # type: ignore[attr-defined]
    assert store.list_runs(status="\udcff") == []  # type: ignore[attr-defined]
    store.close()  # type: ignore[attr-defined]
