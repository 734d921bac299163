"""An example given a --db that is not a database says so in one sentence (decision 0162),
every example that takes --db, not only the two first fixed.

Each example is forked from a prepared process (tests/support/examples.py): these
judge its answer, not the interpreter's start."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.examples import run_example
from test_examples import _examples_taking_db

ROOT = Path(__file__).resolve().parent.parent

# live.py reaches its database only once a model server answers: its own test, with a
# fake server, is in test_model_agent.py.
NEEDS_A_SERVER = {"live.py"}


def test_every_example_that_takes_db_is_tested_here_or_beside_its_server() -> None:
    names = {p.relative_to(ROOT / "examples").as_posix() for p in _examples_taking_db()}
    assert names >= NEEDS_A_SERVER
    assert {"scripted.py", "own_loop.py", "webhook_chat.py", "recheck_tighten.py"} <= names


@pytest.mark.slow
@pytest.mark.parametrize(
    "example",
    [p for p in _examples_taking_db() if p.name not in NEEDS_A_SERVER],
    ids=lambda p: p.relative_to(ROOT / "examples").as_posix(),
)
def test_an_example_given_a_db_that_is_not_a_database_says_so_in_one_sentence(
    tmp_path: Path, example: Path
) -> None:
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("my notes\n")
    not_a_db.chmod(0o600)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_example(example, "--db", str(not_a_db), cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr == (
        f"{example.name}: --db {not_a_db}: cannot open {not_a_db}: file is not a database\n"
    )
    assert not_a_db.read_text() == "my notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made beside it


URL = "postgresql://agentrt:hunter2@127.0.0.1:1/nowhere"
"""A URL with a password, on a port nothing listens on."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "example", _examples_taking_db(), ids=lambda p: p.relative_to(ROOT / "examples").as_posix()
)
def test_an_example_given_a_url_with_a_password_never_prints_it(
    tmp_path: Path, example: Path
) -> None:
    """A URL may hold a password: an example refusing it says why in one sentence without
    printing it back, as `scripted.py` already did not on success. Once every example
    quoted it (twice for those that take a path only, as `postgresql:/agentrt:hunter2@...`
    "is not an existing directory")."""
    result = run_example(example, "--db", URL, cwd=tmp_path)  # stdin is /dev/null
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert "hunter2" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n")
    if example.name == "scripted.py":  # it runs on PostgreSQL: here the server is not there
        assert result.stderr.startswith(
            "scripted.py: --db <your URL>: cannot open postgresql://agentrt:***@127.0.0.1:1/nowhere"
        )
    else:
        assert result.stderr == (
            f"{example.name}: --db takes a SQLite file's path here, not a URL\n"
        )
