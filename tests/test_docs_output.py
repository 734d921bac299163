"""Output the docs print as a command's answer is what the command prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import agentrt

ROOT = Path(__file__).resolve().parent.parent


def console_block(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    (block,) = re.findall(r"```console\n(.*?)```", text, flags=re.S)
    return block.splitlines()


def test_the_recheck_page_shows_the_different_line_as_the_command_prints_it(
    tmp_path: Path,
) -> None:
    """docs/recheck.md's `agentrt recheck RUN` answer, against the $80 refund run of
    examples/recheck_tighten.py (the page's example): the same line but for the run id."""
    db = tmp_path / "runs.db"
    made = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "recheck_tighten.py"), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    with agentrt.open_existing(db, read_only=True) as store:
        (run,) = [r for r in store.list_runs() if r.goal == "refund order 23"]
    lines = console_block(ROOT / "docs" / "recheck.md")
    command = lines[0]
    assert command.startswith("$ agentrt --db runs.db recheck ")
    shown_id = command.split()[5]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "examples"), *sys.path])}
    policy = ["--policy", "recheck_tighten:tightened"]
    result = subprocess.run(
        [sys.executable, "-m", "agentrt", "--db", str(db), "recheck", run.id[:8], *policy],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 1, result.stderr  # 1: a difference
    printed = result.stdout.splitlines()
    shown = lines[1].split()[1]
    assert re.fullmatch(r"[0-9a-f]{32}", shown), f"the page shows the run id as {shown!r}"
    assert shown.startswith(shown_id)  # the id the page's own command names
    assert printed[0] == lines[1].replace(shown, run.id, 1)
    # The summary line, the example's policy ids in place of the page's.
    summary = lines[2].replace("refunds/2", "refunds/2 (up to $50)")
    assert printed[1] == summary.replace("refunds/1", "refunds/1 (up to $100)")
