"""`agentrt approve`, `reject` and `cancel` with a `--note` no store can keep.

A byte that is not UTF-8 on the command line reaches Python as a lone surrogate
(`b"\\xff"` as U+DCFF); no store can write it. The command refuses it in one line,
exit 2 (after the usage line), before anything is read or decided, as it refuses a
bad `--by`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import agentrt
from agentrt.cli import main
from conftest import FakeClock
from support.approvals import paused_run

NOT_UTF8 = b"paid \xff".decode("utf-8", "surrogateescape")


def refused_in_one_line(err: str) -> bool:
    """The usage line, then one sentence naming `--note` (what a bad `--by` gets too)."""
    *usage, said = err.splitlines()
    return usage == [line for line in usage if line.startswith("usage:")] and said.startswith(
        "agentrt: --note must be text: it holds \\udcff at position 6"
    )


def waiting(db_path: Path) -> tuple[str, str]:
    store = agentrt.open_store(db_path)
    _driver, run, _push = paused_run(store, FakeClock())
    (approval,) = store.pending_approvals(run.id)
    store.close()
    return run.id, approval.id


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_a_note_with_a_byte_that_is_not_utf8_is_refused_in_one_line_and_nothing_is_decided(
    db_path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """A person types `agentrt approve RUN --approval ID --note $'paid \\xff'`: exit 2 and one
    line naming `--note`, no traceback; the approval stays pending."""
    run_id, approval_id = waiting(db_path)
    code = main(["--db", str(db_path), verb, run_id, "--approval", approval_id,
                 "--by", "alice", "--note", NOT_UTF8])  # fmt: skip
    _out, err = capsys.readouterr()
    assert code == 2
    assert refused_in_one_line(err), err
    assert "Traceback" not in err and "codec" not in err
    with agentrt.open_store(db_path) as after:
        assert after.get_approval(run_id, approval_id).status == "pending"


def test_a_cancel_note_with_a_byte_that_is_not_utf8_is_refused_and_the_run_goes_on(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, _approval_id = waiting(db_path)
    code = main(["--db", str(db_path), "cancel", run_id, "--by", "alice", "--note", NOT_UTF8])
    _out, err = capsys.readouterr()
    assert code == 2
    assert refused_in_one_line(err), err
    with agentrt.open_store(db_path) as after:
        assert after.get_run(run_id).status == "WAITING_FOR_APPROVAL"
