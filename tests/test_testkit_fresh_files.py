"""A crash matrix's cases get their fresh SQLite file as a copy of one image (decision 0185).

The matrix creates and migrates one record per matrix (`lowlevel.fresh_sqlite_image`) and
writes its checkpointed main file to each case's path (`SqliteImage.write_new`). These
tests pin that such a file is the record `open_store` would have created there (schema,
meta rows, migrations, chain heads, journal mode, file mode and owner, no side files),
that `write_new` makes nothing where `open_store` would not create a file, and that a
matrix's image is its own: made with the chain partitions its cases open with, never
shared with another matrix, and not made at all for a PostgreSQL matrix.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt.lowlevel import SqliteImage, fresh_sqlite_image
from agentrt.testkit import (
    Crash,
    Point,
    _harness,
    _matrix,
    _runner,
    crash_matrix_sync,
    run_sync,
)
from support.database import brief, on_postgres

ONE_CASE = (Crash(0, Point.AFTER_TOOL_STARTED),)


def _one(crashes: tuple[Crash, ...]) -> bool:
    return crashes == ONE_CASE


@pytest.fixture
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    mask = getattr(request, "param", 0o022)
    before = os.umask(mask)
    try:
        yield mask
    finally:
        os.umask(before)


def _facts(path: Path) -> dict[str, Any]:
    """What a fresh record is made of, read with a plain read-only connection: every
    schema entry, the rows a migration writes (`applied_at` aside: a time), the pragmas
    that shape the file, and its integrity."""
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in conn.execute(sql).fetchall()]

        return {
            "schema": rows("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"),
            "meta": rows("SELECT key, value FROM agentrt_meta ORDER BY key"),
            "migrations": rows("SELECT version FROM schema_migrations ORDER BY version"),
            "heads": rows("SELECT part, seq, hash FROM chain_head ORDER BY part"),
            "sequences": rows("SELECT name, seq FROM sqlite_sequence ORDER BY name"),
            "tables": {
                name: conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
                for (name,) in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN "
                    "('agentrt_meta', 'schema_migrations', 'chain_head', 'sqlite_sequence')"
                )
            },
            **{
                pragma: conn.execute(f"PRAGMA {pragma}").fetchone()[0]
                for pragma in (
                    "journal_mode",
                    "page_size",
                    "page_count",
                    "freelist_count",
                    "auto_vacuum",
                    "encoding",
                    "user_version",
                    "application_id",
                    "integrity_check",
                )
            },
        }
    finally:
        conn.close()


def _file(path: Path) -> tuple[int, int, int, int]:
    st = os.lstat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_nlink


def _applied_at(path: Path) -> list[str]:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT applied_at FROM schema_migrations")]
    finally:
        conn.close()


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077], indirect=True)
@pytest.mark.parametrize("partitions", [None, 4])
def test_a_file_written_from_the_image_is_the_record_open_store_creates(
    tmp_path: Path, umask: int, partitions: int | None
) -> None:
    created, copied = tmp_path / "created.db", tmp_path / "copied.db"
    agentrt.open_store(created, chain_partitions=partitions).close()
    image = fresh_sqlite_image(partitions)
    assert image.chain_partitions == partitions
    assert image.write_new(copied) is True
    # Only the main file: the copy's first opener makes its -wal and -shm, as on a new file.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copied.db", "created.db"]
    assert _file(copied) == _file(created) == (0o600, os.geteuid(), _file(created)[2], 1)
    expected = _facts(created)
    assert expected["journal_mode"] == "wal" and expected["integrity_check"] == "ok"
    assert ("chain_partitions", str(partitions or 1)) in expected["meta"]
    assert ("min_writer_version", "0.2.0") in expected["meta"]
    assert expected["migrations"] == [(1,), (2,), (3,), (4,), (5,)]
    assert len(expected["heads"]) == (partitions or 1)
    assert set(expected["tables"].values()) == {0}
    assert _facts(copied) == expected
    # Its open migrates nothing (the image's migrations keep their time) and finds the N.
    applied = _applied_at(copied)
    with agentrt.open_store(copied) as store:
        assert len(store.chain_heads()) == (partitions or 1)
    assert _applied_at(copied) == applied
    assert _facts(copied) == expected


def test_a_copy_is_0600_even_under_a_umask_that_clears_the_owners_bits(tmp_path: Path) -> None:
    """As `open_store` creates a file: the mode is said exactly, not left to the umask."""
    image = fresh_sqlite_image()
    before = os.umask(0o277)
    try:
        assert image.write_new(tmp_path / "copied.db") is True
        agentrt.open_store(tmp_path / "created.db").close()
    finally:
        os.umask(before)
    assert _file(tmp_path / "copied.db")[0] == _file(tmp_path / "created.db")[0] == 0o600


def test_images_of_different_settings_have_different_keys() -> None:
    one, four = fresh_sqlite_image(), fresh_sqlite_image(4)
    assert one.key != four.key
    assert (one.key[0], four.key[0]) == (None, 4)
    assert fresh_sqlite_image().key == one.key


def test_write_new_makes_nothing_where_open_store_would_not_create_a_file(
    tmp_path: Path,
) -> None:
    image = fresh_sqlite_image()
    theirs = tmp_path / "theirs.db"
    theirs.write_bytes(b"a consumer's own file")
    assert image.write_new(theirs) is False
    assert theirs.read_bytes() == b"a consumer's own file"
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "elsewhere.db")
    assert image.write_new(link) is False
    assert not (tmp_path / "elsewhere.db").exists()
    assert image.write_new(tmp_path / "missing" / "case.db") is False
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert image.write_new(shared / "case.db") is False
    assert list(shared.iterdir()) == []
    # open_store then says why, as it would have without the image.
    with pytest.raises(agentrt.InsecureDirectoryError):
        agentrt.open_store(shared / "case.db")


class _Counted:
    """`fresh_sqlite_image` as the matrix calls it, each image it made kept."""

    def __init__(self) -> None:
        self.made: list[SqliteImage] = []

    def __call__(self, chain_partitions: int | None = None) -> SqliteImage:
        image = fresh_sqlite_image(chain_partitions)
        self.made.append(image)
        return image


def test_every_case_and_the_clean_run_get_a_copy_of_the_matrixs_one_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = _Counted()
    monkeypatch.setattr(_matrix, "fresh_sqlite_image", counted)
    folder = tmp_path / "cases"
    matrix = crash_matrix_sync(
        "support.scenarios:small",
        "harness",
        directory=folder,
        recovery=False,
        select=lambda crashes: len(crashes) == 1 and crashes[0].step == 0,
        keep_files=True,
    )
    matrix.assert_ok()
    assert len(matrix.cases) >= 3
    [image] = counted.made
    assert image.chain_partitions is _harness.CASE_CHAIN_PARTITIONS is None
    files = [folder / "clean.db"] + [folder / f"case-{i:04d}.db" for i in range(len(matrix.cases))]
    assert [Path(c.result.db_path) for c in matrix.cases if c.result] == files[1:]
    # The migrations' time is the image's in every file: each was copied, none created.
    times = {tuple(_applied_at(f)) for f in files}
    assert len(times) == 1
    for f in files:
        assert _file(f)[:2] == (0o600, os.geteuid())


def test_a_matrix_never_takes_another_matrixs_image_and_follows_the_cases_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each matrix makes its own image, with the chain partitions its processes open their
    store with at the time: a matrix whose cases open with N = 4 gets files of 4 (a copy of
    1 would be refused by their open), and the next one, back at the default, files of 1."""
    counted = _Counted()
    monkeypatch.setattr(_matrix, "fresh_sqlite_image", counted)
    for partitions in (4, None):
        monkeypatch.setattr(_harness, "CASE_CHAIN_PARTITIONS", partitions)
        folder = tmp_path / f"n{partitions}"
        matrix = crash_matrix_sync(
            "support.scenarios:small",
            "harness",
            directory=folder,
            recovery=False,
            select=_one,
            keep_files=True,
        )
        matrix.assert_ok()
        with agentrt.open_existing(folder / "case-0000.db", read_only=True) as kept:
            assert len(kept.chain_heads()) == (partitions or 1)
    assert [image.chain_partitions for image in counted.made] == [4, None]
    assert counted.made[0].key != counted.made[1].key


def test_a_postgresql_matrix_makes_no_image(
    database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    counted = _Counted()
    monkeypatch.setattr(_matrix, "fresh_sqlite_image", counted)
    directory = database if on_postgres(database) else str(tmp_path / "cases")
    crash_matrix_sync(
        brief("support.scenarios:checkout", database),
        "harness",
        directory=directory,
        recovery=False,
        select=lambda crashes: crashes == (Crash(0, Point.AFTER_STEP_STARTED),),
    ).assert_ok()
    assert len(counted.made) == (0 if on_postgres(database) else 1)


def test_a_case_on_a_copy_names_its_run_as_on_a_file_it_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scenario's own id factory names each case's run: a copy holds no id, so the
    matrix names the run without reading the file, and the ids are the ones a case on a
    file it created gets (`checkout`'s factory starts at 1 in every process)."""
    read: list[str] = []
    recorded = _runner.recorded_floor_and_ids

    def reading(db_path: str) -> Any:
        read.append(db_path)
        return recorded(db_path)

    monkeypatch.setattr(_runner, "recorded_floor_and_ids", reading)
    matrix = crash_matrix_sync(
        "support.scenarios:checkout",
        "harness",
        recovery=False,
        select=lambda crashes: crashes[0].step == 0 and not crashes[0].inside_tx,
    )
    matrix.assert_ok()
    assert len(matrix.cases) >= 3 and read == []
    created = run_sync("support.scenarios:checkout", db_path=tmp_path / "created.db")
    assert read == [str(tmp_path / "created.db")]  # a file of its own: looked for, not there
    assert created.run_id == "c" + f"{1:031x}"
    assert {c.result.run_id for c in matrix.cases if c.result} == {created.run_id}
    assert matrix.clean.run_id == created.run_id
