"""examples/payments.py runs from a clone and ends as its docstring says (issue 24 item 4)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import agentrt

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(180)
def test_the_payments_example_completes_without_a_person_when_the_provider_can_tell(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples/payments.py"), "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "the tool's reconciliation answered found: the provider has the charge" in out
    assert "run COMPLETED; charges at the provider so far: 1" in out
    assert "the tool's reconciliation answered unknown: the provider's lookup answered 503" in out
    assert "run WAITING_FOR_APPROVAL; charges at the provider so far: 2" in out
    with agentrt.open_existing(tmp_path / "payments.db", read_only=True) as store:
        (run,) = store.list_runs()
        assert run.status == "COMPLETED" and store.list_approvals(run.id) == []
        starts = [e for e in store.list_events(run_id=run.id) if e.type == "step.tool_started"]
        assert len(starts) == 1  # never charged again
    with agentrt.open_existing(tmp_path / "lookup-fails.db", read_only=True) as store:
        (run,) = store.list_runs()
        (approval,) = store.pending_approvals(run.id)
        assert approval.presentation["reconciliation"] == {
            "answer": "unknown",
            "detail": "the provider's lookup answered 503",
        }
