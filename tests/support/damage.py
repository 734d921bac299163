"""A file with a finished run in it, and real damage done to it: the bytes of a page
overwritten in the closed file, as a failing disk or a careless tool would."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import agentrt
from agentrt import Decision, SideEffect
from agentrt._store import open_store
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool


def finished_run_file(path: Path, steps: int = 30) -> Path:
    """A database at `path` holding one COMPLETED run of `steps` lookups, every commit
    in the main file (no WAL left)."""
    driver = agentrt.Driver(
        store=open_store(path),
        agent=ScriptedAgent(
            [Decision.tool_call("lookup", {"x": i}) for i in range(steps)] + [Decision.complete({})]
        ),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
        now=FakeClock(),
        new_id=Ids("a"),
    )
    try:
        assert driver.start_sync("look things up").status == agentrt.RunStatus.COMPLETED
    finally:
        driver.store.close()
    assert not Path(f"{path}-wal").exists()  # every commit is in the main file now
    return path


def root_page(path: Path, name: str) -> tuple[int, int]:
    """The root page number of table or index `name`, and the file's page size."""
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,))
        return int(root.fetchone()[0]), page_size
    finally:
        conn.close()


def smash_page(path: Path, name: str) -> int:
    """Overwrite the b-tree header of the root page of table or index `name`; its page number."""
    page, size = root_page(path, name)
    with open(path, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xff" * 16)
    return page
