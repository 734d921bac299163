"""A hand-written gate loop SIGKILLed inside `execute`, in a real child process.

The run is left RUNNING with its step `executing`; `gate.attach` in the parent
(proving the child dead) applies the interruption contract: the run pauses on
an `interrupted_side_effect` approval and the tool does not run again on its
own; approving it and attaching again runs it once more, on the same step.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import agentrt
import crashing_child as child
from agentrt import Decision, VerdictOutcome

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_a_session_abandoned_during_execute_pauses_on_interrupted_side_effect(
    db_path: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, str(HERE / "gate_child.py"), str(db_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=HERE,
    )
    assert proc.returncode == -9, proc.stderr  # killed by SIGKILL, nothing else
    assert len(child.journal_lines(db_path)) == 1
    store = agentrt.open_store(db_path)
    try:
        (run,) = store.list_runs()
        assert run.status == "RUNNING"
        (step,) = store.list_steps(run.id)
        assert step.status == "executing"
        gate = agentrt.Gate(
            store=store,
            policy=child.policy(),
            tools=child.tools(db_path),
            lease_owner="parent",
        )
        session, verdict = gate.attach_sync(run.id)
        assert verdict is not None and verdict.outcome == VerdictOutcome.PENDING
        assert verdict.approval is not None
        assert verdict.approval.kind == "interrupted_side_effect"
        assert verdict.approval.capability == {"tool": "charge", "args": {"amount": 5}}
        assert session.done and session.current() is None
        assert len(child.journal_lines(db_path)) == 1  # not run again on the runtime's own say
        session.close_sync()
        with pytest.raises(agentrt.RunStateError, match="still pending"):
            gate.attach_sync(run.id)  # undecided: refused, and nothing runs
        assert len(child.journal_lines(db_path)) == 1
        (approval,) = store.pending_approvals(run.id)
        agentrt.approve(store, run.id, approval.id, by="ops", shown_hash=approval.hash)
        session, verdict = gate.attach_sync(run.id)
        assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
        open_step = session.current()
        assert open_step is not None and open_step.id == step.id
        observation = open_step.execute_sync()
        assert observation.kind == "tool_result"
        lines = child.journal_lines(db_path)
        assert len(lines) == 2 and lines[1].split()[2] == step.id  # once more, same step
        last = session.step_sync()
        assert last is not None
        assert last.propose_sync(Decision.complete({"done": True})).outcome == "ended"
        assert store.get_run(run.id).status == "COMPLETED"
        session.close_sync()
    finally:
        store.close()
