"""examples/recheck_tighten.py as a new user runs it: which past runs a tighter policy changes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import agentrt

ROOT = Path(__file__).resolve().parent.parent


def test_the_tightened_refund_policy_would_have_changed_only_the_80_dollar_run(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "recheck_tighten.py"), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "  refund order 17: same (was allow, now allow)" in out
    assert "  refund order 23: different (was allow, now require_approval)" in out
    # A reason worded differently ("over $50" for "over $100") is not a difference.
    assert out.count("  refund order 71: same (was require_approval, now require_approval)") == 2
    assert "runs it would have changed: refund order 23\n" in out
    lines = out.splitlines()
    cli = lines[lines.index("exit status 1") - 2 : lines.index("exit status 1")]
    assert cli[0].startswith("different  ") and cli[0].endswith(
        "step 0 refund: allow -> require_approval(large_refund)  "
        "[outcome, kind, approval_hash]  now: refunds over $50 need a person"
    )
    assert cli[1] == (
        "3 runs since 2026-11-23T00:00:00.000000Z: 1 would have changed "
        "(1 of 4 evaluations differ), 0 with evaluations not re-checkable"
    )
    with agentrt.open_existing(db, read_only=True) as store:
        assert len(store.list_runs()) == 3
        assert store.verify_events().intact
