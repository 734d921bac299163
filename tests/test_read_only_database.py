"""A SQLite database this process cannot write: writers refused at open, readers read.

The states are made with real file attributes and mounts, never a mode alone (this suite
runs as root, and a mode does not stop root): `chattr +i` on the database file, on its
directory, or on its `-shm` (ext4 under the test's tmp_path), and a tmpfs remounted
read-only. Each is undone inside the test. Where the mechanism is missing here the test
skips with one line (fails under `CI`).

Before decision 0175: a writer on an immutable file or beside an immutable `-shm`
opened without a word (SQLite falls back to reading) and failed at its first write ("a
statement of the transaction failed: attempt to write a readonly database"); one in a
directory it cannot write said "cannot open X: unable to open database file" (the command
line: "cannot open X: cannot open X: ..."); a reader beside a `-wal` it could not read said
"cannot read the database: unable to open database file", naming no file. Now every
writer's open (`open_store`, `open_existing`, a writing command) is refused in one sentence
naming the file, the cause, and that reading still works; readers read (beside an
unusable `-shm` too, the `-wal`'s commits included), or, where a `-wal` cannot be read,
are refused saying why rather than read the file without its last commits. Nothing of the
record changes: its files' bytes are the same, and once the state is undone the record
opens with every run and event, its chain intact.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

import agentrt
from agentrt import StoreError
from support.disks import tmpfs
from support.gates import make_gate
from test_cli import agentrt_cmd, clean_env

READ_INSTEAD = (
    "open it read-only (open_existing(path, read_only=True), or the agentrt commands that "
    "only read: runs, show, events, verify) or make it writable"
)

# A writer that begins a run and dies before closing: its -wal and -shm stay, the run's
# commits in the -wal only (as after a crash).
_CRASHING_WRITER = """
import os, sys
sys.path.insert(0, "tests")
import agentrt
from conftest import Ids
from support.gates import make_gate
store = agentrt.open_store(sys.argv[1])
make_gate(store, ids=Ids("b")).begin_sync("left in the wal")
os._exit(0)
"""


def unavailable(what: str, said: str) -> None:
    message = f"{what} is not available here ({said.strip()})"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI is set: it must not skip)")
    pytest.skip(message)


@contextmanager
def _chattr(flag: str, what: str, *paths: Path) -> Iterator[None]:
    """`chattr +FLAG` on each of `paths` for the block, `chattr -FLAG` after."""
    done = subprocess.run(["chattr", f"+{flag}", *map(str, paths)], capture_output=True, text=True)
    if done.returncode != 0:
        subprocess.run(["chattr", f"-{flag}", *map(str, paths)], capture_output=True)
        unavailable(f"chattr +{flag} ({what})", done.stderr)
    try:
        yield
    finally:
        subprocess.run(["chattr", f"-{flag}", *map(str, paths)], check=True)


def immutable(*paths: Path) -> AbstractContextManager[None]:
    """`chattr +i` on each of `paths` for the block, `chattr -i` after."""
    return _chattr("i", "an immutable file", *paths)


def append_only(*paths: Path) -> AbstractContextManager[None]:
    """`chattr +a` on each of `paths` for the block, `chattr -a` after."""
    return _chattr("a", "an append-only file", *paths)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of its own (read-only once `read_only(disk)`), unmounted afterwards."""
    with tmpfs(tmp_path, "4m", lambda said: unavailable("mounting a tmpfs", said)) as mount:
        yield mount


def read_only(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)


def a_record(directory: Path, *, crashed: bool = False) -> Path:
    """A database in `directory` (made 0700) holding one run begun by a Gate; `crashed`: a
    second run begun by a writer that died, its commits in the -wal left beside the file."""
    directory.mkdir(mode=0o700, exist_ok=True)
    db = directory / "agentrt.db"
    with agentrt.open_store(db) as store:
        make_gate(store).begin_sync("closed cleanly")
    if crashed:
        subprocess.run([sys.executable, "-c", _CRASHING_WRITER, str(db)], check=True)
        assert (db.parent / "agentrt.db-wal").exists() and (db.parent / "agentrt.db-shm").exists()
    return db


def files(db: Path) -> list[tuple[str, str]]:
    """The record's bytes: the database file's and its -wal's (none: empty), hashed. (A
    reader in a directory it may write makes an empty -wal and a -shm, SQLite's index of
    the -wal, beside a file it cannot write: neither holds or changes a record.)"""
    wal = db.parent / "agentrt.db-wal"
    return [
        (p.name, hashlib.sha256(p.read_bytes() if p.exists() else b"").hexdigest())
        for p in (db, wal)
    ]


def goals(store: agentrt.Store) -> list[str]:
    return sorted(run.goal for run in store.list_runs())


def writers_refused(db: Path, said: str) -> None:
    """`open_store`, `open_existing` and the command's `cancel` each refuse with `said`."""
    openings: list[Callable[[], object]] = [
        lambda: agentrt.open_store(db),
        lambda: agentrt.open_existing(db),
    ]
    for opening in openings:
        with pytest.raises(StoreError) as refused:
            opening()
        assert type(refused.value) is StoreError
        assert str(refused.value) == said
    done = agentrt_cmd("--db", str(db), "cancel", "a" * 32, "--by", "op", env=clean_env())
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"agentrt: {said}\n")


def readers_read(db: Path, expected: list[str]) -> None:
    """`open_existing(read_only=True)` reads every run and a intact chain; `runs` and
    `verify` exit 0."""
    with agentrt.open_existing(db, read_only=True) as store:
        assert goals(store) == expected
        assert store.verify_events().intact
    runs = agentrt_cmd("--db", str(db), "runs", env=clean_env())
    assert (runs.returncode, runs.stderr) == (0, ""), runs
    assert all(goal in runs.stdout for goal in expected)
    verify = agentrt_cmd("--db", str(db), "verify", env=clean_env())
    assert (verify.returncode, verify.stderr) == (0, ""), verify
    assert verify.stdout.startswith("intact: ")


def reopened_whole(db: Path, expected: list[str]) -> None:
    """The state undone, a writer opens the record: every run there, the chain intact."""
    with agentrt.open_store(db) as store:
        assert goals(store) == expected
        assert store.verify_events().intact


def immutable_database_refused(db: Path) -> str:
    """What a writer's open of `db` says when the database file is immutable."""
    return (
        f"cannot open {db} for writing: the database file may not be written even by "
        "root (an immutable or append-only file: see lsattr), so a writer could not record "
        f"anything; {READ_INSTEAD}"
    )


def test_an_immutable_database_file_refuses_writers_and_is_read(tmp_path: Path) -> None:
    db = a_record(tmp_path / "d")
    before = files(db)
    with immutable(db):
        writers_refused(
            db,
            immutable_database_refused(db),
        )
        readers_read(db, ["closed cleanly"])
    assert files(db) == before
    reopened_whole(db, ["closed cleanly"])


@pytest.mark.parametrize("which", ["", "-wal"])
def test_an_append_only_database_or_wal_refuses_writers_and_is_read(
    tmp_path: Path, which: str
) -> None:
    """`access(2)` says an append-only file is writable (only an open without O_APPEND is
    refused, EPERM): SQLite then falls back to reading without a word, as for an immutable
    file, and the first write failed ("attempt to write a readonly database")."""
    db = a_record(tmp_path / "d", crashed=which == "-wal")
    expected = ["closed cleanly", "left in the wal"] if which else ["closed cleanly"]
    target = Path(f"{db}{which}")
    what = f"its -wal file {target}" if which else "the database file"
    before = files(db)
    with append_only(target):
        writers_refused(
            db,
            f"cannot open {db} for writing: {what} may not be written even by root (an "
            "immutable or append-only file: see lsattr), so a writer could not record "
            f"anything; {READ_INSTEAD}",
        )
        readers_read(db, expected)
    assert files(db) == before
    reopened_whole(db, expected)


def test_an_immutable_database_others_may_read_is_refused_for_writing_not_as_insecure(
    tmp_path: Path,
) -> None:
    """A writer tightens a file others may read to 0600 before it opens it: that chmod
    cannot be made on an immutable file (EPERM) or a read-only filesystem (EROFS). Before,
    it said `InsecureModeError` "cannot tighten X to 0600: Operation not permitted", which
    is no insecure mode (0640 is writable by nobody else) and hid the cause: a file this
    process cannot write is refused to writers in the one sentence, and read."""
    db = a_record(tmp_path / "d")
    db.chmod(0o640)
    before = files(db)
    with immutable(db):
        writers_refused(
            db,
            immutable_database_refused(db),
        )
        readers_read(db, ["closed cleanly"])
    assert files(db) == before
    assert db.stat().st_mode & 0o777 == 0o640  # untouched until a writer may write it
    reopened_whole(db, ["closed cleanly"])
    assert db.stat().st_mode & 0o777 == 0o600


def test_a_read_only_directory_refuses_writers_naming_the_sidecars_and_is_read(
    tmp_path: Path,
) -> None:
    db = a_record(tmp_path / "d")
    before = files(db)
    assert sorted(p.name for p in db.parent.iterdir()) == ["agentrt.db", "agentrt.db-lock"]
    with immutable(db.parent):
        writers_refused(
            db,
            f"cannot open {db} for writing: its directory {db.parent} is not writable by "
            "this process, so SQLite cannot create the -wal and -shm files a writer needs "
            f"beside it; {READ_INSTEAD}",
        )
        readers_read(db, ["closed cleanly"])
    assert files(db) == before
    reopened_whole(db, ["closed cleanly"])


def test_an_immutable_shm_refuses_writers_and_readers_read_the_wals_commits(
    tmp_path: Path,
) -> None:
    db = a_record(tmp_path / "d", crashed=True)
    shm = db.parent / "agentrt.db-shm"
    before = files(db)
    with immutable(shm):
        writers_refused(
            db,
            f"cannot open {db} for writing: its -shm file {shm} may not be written even by "
            "root (an immutable or append-only file: see lsattr), so a writer could not record "
            f"anything; {READ_INSTEAD}",
        )
        readers_read(db, ["closed cleanly", "left in the wal"])
    assert files(db) == before
    reopened_whole(db, ["closed cleanly", "left in the wal"])


def test_a_read_only_filesystem_refuses_writers_and_is_read_with_its_wal(disk: Path) -> None:
    clean = a_record(disk / "clean")
    crashed = a_record(disk / "crashed", crashed=True)
    before = files(clean), files(crashed)
    read_only(disk)
    for db, expected in (
        (clean, ["closed cleanly"]),
        (crashed, ["closed cleanly", "left in the wal"]),
    ):
        writers_refused(
            db,
            f"cannot open {db} for writing: the database file is on a read-only "
            f"filesystem, so a writer could not record anything; {READ_INSTEAD}",
        )
        readers_read(db, expected)
    assert (files(clean), files(crashed)) == before


def test_a_wal_that_cannot_be_read_on_a_read_only_filesystem_refuses_readers_too(
    disk: Path,
) -> None:
    """A -wal whose -shm is gone, where none can be made: reading the file alone would show
    the record without the -wal's commits, so the reader is refused, saying why."""
    db = a_record(disk / "d", crashed=True)
    (db.parent / "agentrt.db-shm").unlink()
    before = files(db)
    read_only(disk)
    said = (
        f"cannot read {db}: its -wal file may hold commits that are not in the database file "
        "yet, and SQLite cannot read it (unable to open database file) because its -shm "
        f"file is missing or unusable and the directory {db.parent} is on a read-only "
        "filesystem, so none can be made; open it once where it is writable (a writer "
        "folds the -wal in) or copy the database with its -wal to a writable directory "
        "and read the copy"
    )
    with pytest.raises(StoreError) as refused:
        agentrt.open_existing(db, read_only=True)
    assert (type(refused.value), str(refused.value)) == (StoreError, said)
    for command in ("runs", "verify"):
        done = agentrt_cmd("--db", str(db), command, env=clean_env())
        assert (done.returncode, done.stdout, done.stderr) == (1, "", f"agentrt: {said}\n")
    writers_refused(
        db,
        f"cannot open {db} for writing: the database file is on a read-only filesystem, so "
        f"a writer could not record anything; {READ_INSTEAD}",
    )
    assert files(db) == before
