"""A run recorded with a longer duration limit still reads back (decision 0139).

Found by a review: decision 0139 bounds a duration limit to 36,500 days in
`Limits.__post_init__`, which
`Limits.from_json` also runs when a stored run is read back. A run the previous release
recorded with a longer limit (accepted then, and working: `timedelta(days=40_000)` from
2026 is far from any date's end) no longer decodes: its `decode_error` is set and the
next step's claim ends it FAILED `internal_error` ("the run's record cannot be read
back"). The bound is for new limits; a stored one must still be read (at most clamped).
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import agentrt
from agentrt import Decision, Limits, RunStatus, SideEffect, StepInput
from agentrt._clock import duration_to_ns
from conftest import FakeClock, Ids, RecordingTool


def test_a_run_stored_with_a_longer_duration_limit_still_reads_back(db_path: Path) -> None:
    store = agentrt.open_store(db_path)
    calls: list[int] = []

    def decide(input: StepInput) -> Decision:
        calls.append(1)
        if len(calls) == 1:
            return Decision.tool_call("send", {})
        return Decision.complete({"ok": True})

    driver = agentrt.Driver(
        store=store,
        agent=decide,
        policy=agentrt.default_policy(),
        tools=[RecordingTool("send", SideEffect.REMOTE_MUTATION)],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("g", limits=Limits(max_elapsed_time=timedelta(days=36_500)))
    assert run.status == RunStatus.WAITING_FOR_APPROVAL
    # What the previous release wrote for Limits(max_elapsed_time=timedelta(days=40_000)).
    ns = duration_to_ns(timedelta(days=40_000))
    with sqlite3.connect(db_path) as db:
        row = db.execute("SELECT limits_json FROM runs WHERE id = ?", (run.id,)).fetchone()
        old = row[0].replace(str(duration_to_ns(timedelta(days=36_500))), str(ns))
        assert old != row[0]
        db.execute("UPDATE runs SET limits_json = ? WHERE id = ?", (old, run.id))
    stored = store.get_run(run.id)
    assert not stored.decode_error, stored.decode_error
    approval = store.list_approvals(run_id=run.id)[-1]
    driver.approve(run.id, approval.id, by="me")
    ended = driver.resume_sync(run.id)
    assert ended.status == RunStatus.COMPLETED, (ended.status, ended.reason)
    store.close()
