"""A database with a second name, or in a directory others control, is refused like a symlink.

Each refusal has its own error (`HardLinkError`, `InsecureDirectoryError`) at every
open, and one sentence with exit status 1 from the command.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agentrt._errors import HardLinkError, InsecureDirectoryError, InsecureModeError
from agentrt._store import Store, open_existing, open_store
from agentrt.cli import main

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOBODY = 65534

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX modes and links")


def _openers(path: Path) -> list[Callable[[], Store]]:
    return [
        lambda: open_store(path),
        lambda: open_existing(path),
        lambda: open_existing(path, read_only=True),
    ]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    directory = tmp_path / "home"
    directory.mkdir(mode=0o700)
    path = directory / "agentrt.db"
    open_store(path).close()
    return path


def test_a_database_with_a_second_hard_link_is_refused_by_every_open_and_the_command(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.link(db, tmp_path / "elsewhere.db")
    for opener in _openers(db):
        with pytest.raises(HardLinkError) as caught:
            opener()
        assert str(caught.value) == (
            f"database {db} has 2 hard links; agentrt opens only a file with one name, because "
            "another name for it can be changed out of sight of these checks"
        )
    code, out, err = _cli(capsys, "--db", str(db), "runs")
    assert (code, out) == (1, "")
    assert err == (
        f"agentrt: refusing {db}: it has another name (a second hard link), which could be "
        "changed out of sight of agentrt's checks; keep only one name for the database\n"
    )
    os.unlink(tmp_path / "elsewhere.db")
    open_existing(db).close()  # one name again: accepted


def test_a_sidecar_with_a_second_hard_link_is_refused(db: Path, tmp_path: Path) -> None:
    with open_store(db):  # a live writer keeps its -wal
        os.link(f"{db}-wal", tmp_path / "copy-of-wal")
        with pytest.raises(HardLinkError, match=r"wal file .*-wal has 2 hard links"):
            open_existing(db, read_only=True)


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o720, 0o702, 0o1733])
def test_a_directory_writable_by_group_or_others_is_refused_even_with_the_sticky_bit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int
) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    path = directory / "agentrt.db"
    open_store(path).close()
    directory.chmod(mode)
    for opener in _openers(path):
        with pytest.raises(InsecureDirectoryError) as caught:
            opener()
        assert str(caught.value) == (
            f"the directory {directory} is writable by group or others (mode {mode:04o}), so "
            "they could plant a -wal or -journal file beside the database or replace it: keep "
            "the database in a directory only its owner can write"
        )
        assert isinstance(caught.value, InsecureModeError)
    code, out, err = _cli(capsys, "--db", str(path), "verify")
    assert (code, out) == (1, "")
    assert err == f"agentrt: refusing {path}: {caught.value}\n"


def test_a_new_database_is_not_even_created_in_a_directory_others_can_write(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o1777)
    with pytest.raises(InsecureDirectoryError):
        open_store(directory / "agentrt.db")
    assert list(directory.iterdir()) == []


def test_a_relative_path_checks_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "cwd"
    directory.mkdir()
    directory.chmod(0o777)
    monkeypatch.chdir(directory)
    with pytest.raises(InsecureDirectoryError, match=f"the directory {directory} is writable"):
        open_store("agentrt.db")


@pytest.mark.skipif(not IS_ROOT, reason="only root can give a directory to another user")
def test_a_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "theirs"
    directory.mkdir(mode=0o755)
    path = directory / "agentrt.db"
    open_store(path).close()
    os.chown(directory, NOBODY, NOBODY)
    for opener in _openers(path):
        with pytest.raises(InsecureDirectoryError) as caught:
            opener()
        assert str(caught.value) == (
            f"the directory {directory} is owned by uid {NOBODY}, not by this process (uid 0) "
            "or root, and its owner could replace the database"
        )


def test_a_directory_only_its_owner_can_write_is_accepted_whatever_its_other_bits(db: Path) -> None:
    for mode in (0o700, 0o755, 0o1755):
        db.parent.chmod(mode)
        with open_existing(db, read_only=True) as store:
            assert store.count_runs() == 0
