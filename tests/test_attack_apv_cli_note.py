"""Attack on `agentrt approve`: a note that came in as bytes the locale cannot decode."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentrt
from agentrt.cli import main
from conftest import FakeClock
from support.approvals import paused_run


def test_a_note_with_a_byte_that_is_not_utf8_is_refused_in_one_line_not_a_traceback(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A person types `agentrt approve RUN --approval ID --note $'paid \\xff'` (argv decodes the
    byte as the lone surrogate U+DCFF); today the UnicodeEncodeError of the store's write
    escapes `main` as a traceback. It should be one clear sentence, exit 1 or 2, nothing decided."""
    store = agentrt.open_store(db_path)
    _driver, run, _push = paused_run(store, FakeClock())
    (approval,) = store.pending_approvals(run.id)
    store.close()
    note = b"paid \xff".decode("utf-8", "surrogateescape")
    try:
        code = main(["--db", str(db_path), "approve", run.id, "--approval", approval.id,
                     "--by", "alice", "--note", note])  # fmt: skip
    except UnicodeError as exc:
        pytest.fail(f"agentrt approve raised {exc!r} instead of refusing the note")
    _out, err = capsys.readouterr()
    assert code in (1, 2)
    assert "--note" in err and "Traceback" not in err
    with agentrt.open_store(db_path) as after:
        assert after.get_approval(run.id, approval.id).status == "pending"
