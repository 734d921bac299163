"""The examples that take `--dir` as a new user runs them: twice in the same folder, a
folder made under a group-writable umask, a file given for the folder. Each is one
sentence and an exit status, never a traceback from the second run's databases."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentrt
from support import forkserver
from support.examples import run_example

ROOT = Path(__file__).resolve().parent.parent
PAYMENTS = ROOT / "examples" / "payments.py"
LANGGRAPH = ROOT / "examples" / "adapters" / "langgraph_example.py"

pytestmark = pytest.mark.slow


def example(script: Path, *args: str, umask: int | None = None) -> forkserver.Done:
    """The example in a process of its own, forked from a prepared process
    (tests/support/examples.py): what it says, leaves and exits with is judged here, not
    the interpreter's start (their first runs are in test_example_payments.py, from a
    fresh interpreter, and test_adapter_langgraph.py)."""
    return run_example(script, *args, umask=umask)


@pytest.mark.parametrize(
    ("script", "left"),
    [(PAYMENTS, "payments.db"), (PAYMENTS, "lookup-fails.db"), (LANGGRAPH, "runs.db")],
    ids=["payments.py", "payments.py-second-story", "langgraph_example.py"],
)
def test_a_second_run_in_the_same_dir_is_refused_in_one_sentence(
    tmp_path: Path, script: Path, left: str
) -> None:
    """A first run left its database in the folder (run once for real in test_examples.py,
    test_example_payments.py and test_adapter_langgraph.py); the second says so."""
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o700)
    agentrt.open_store(workdir / left).close()
    before = sorted(p.name for p in workdir.iterdir())
    second = example(script, "--dir", str(workdir))
    assert (second.returncode, second.stdout) == (2, ""), second.stderr
    assert second.stderr == (
        f"{script.name}: --dir {workdir} holds a run of this example already; give another --dir\n"
    )
    assert sorted(p.name for p in workdir.iterdir()) == before  # nothing added or changed


@pytest.mark.parametrize("script", [PAYMENTS, LANGGRAPH], ids=lambda p: p.name)
def test_a_file_given_as_the_dir_is_refused_in_one_sentence(tmp_path: Path, script: Path) -> None:
    not_a_dir = tmp_path / "notes.txt"
    not_a_dir.write_text("mine\n")
    result = example(script, "--dir", str(not_a_dir))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"{script.name}: --dir {not_a_dir}: it exists and is not a directory\n"
    assert not_a_dir.read_text() == "mine\n"


@pytest.mark.parametrize("script", [PAYMENTS, LANGGRAPH], ids=lambda p: p.name)
def test_a_new_dir_under_a_group_writable_umask_runs_the_example(
    tmp_path: Path, script: Path
) -> None:
    """umask 002, a Debian or Ubuntu user's default: the example makes its folder owner-only,
    which the store requires, instead of failing on it."""
    workdir = tmp_path / "work"
    result = example(script, "--dir", str(workdir), umask=0o002)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert workdir.stat().st_mode & 0o777 == 0o700
