"""A database that holds no agentrt record: the refusal says it may be the wrong path first.

The command said "the database has no agentrt schema (open it with open_store to create
one)" of any SQLite file without agentrt's tables: to someone who pointed at another
application's database by mistake, that advice was to add agentrt's tables to it. The
sentence now says the file holds no agentrt record (perhaps the wrong path) and how to
create one in a new file (decision 0196); and the file is left as it was.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

import agentrt
from test_cli import agentrt_cmd

SQLITE_SAID = (
    "this database holds no agentrt record (perhaps the path is not the one you meant); "
    "to create a record, give open_store the path of a new file"
)
"""What `open_existing` says, to a programmer."""


def cli_said(path: Path) -> str:
    """What the command line says, to an operator: the command that creates a record."""
    return (
        "this database holds no agentrt record (perhaps the path is not the one you meant); "
        f"to create one at a new path or in an empty file: agentrt --db {path} migrate"
    )


def another_applications_database(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total INTEGER)")
        conn.execute("INSERT INTO invoices (total) VALUES (42)")
    conn.close()
    path.chmod(0o600)


def tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        found = [r[0] for r in conn.execute("SELECT name FROM sqlite_master ORDER BY name")]
    conn.close()
    return found


@pytest.mark.parametrize("command", [["runs"], ["show", "0" * 32], ["verify"]])
def test_another_applications_file_is_refused_saying_it_may_be_the_wrong_path(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "billing.db"
    another_applications_database(path)
    result: subprocess.CompletedProcess[str] = agentrt_cmd("--db", str(path), *command)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"agentrt: refusing {path}: {cli_said(path)}\n"
    assert tables(path) == ["invoices"]


def test_open_existing_says_the_same(tmp_path: Path) -> None:
    path = tmp_path / "billing.db"
    another_applications_database(path)
    with pytest.raises(agentrt.SchemaVersionError) as refused:
        agentrt.open_existing(path)
    assert str(refused.value) == SQLITE_SAID
    assert tables(path) == ["invoices"]
