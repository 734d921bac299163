"""An example given a --db that is not a database says so in one sentence (decision 0162)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.parametrize("example", ["scripted.py", "own_loop.py"])
def test_an_example_given_a_db_that_is_not_a_database_says_so_in_one_sentence(
    tmp_path: Path, example: str
) -> None:
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("my notes\n")
    not_a_db.chmod(0o600)
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / example), "--db", str(not_a_db)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"{example}: --db {not_a_db}: cannot open {not_a_db}: file is not a database\n"
    )
    assert not_a_db.read_text() == "my notes\n"
