"""The test kit proves a tool's own reconciliation (issue 24 item 3, decision 0067).

A `charge` tool pays a fake provider over HTTP on loopback (`support.payments`),
sending `ToolCall.operation_id` as the Idempotency-Key; its reconciliation looks
the charge up by that key. The whole crash matrix runs against it (every point of
every step, inside transactions and during recovery), in the harness and with
real SIGKILLs:

- a provider that deduplicates: the card is charged exactly once in every case,
  and nobody is asked (the reconciliation tells: found, or safe to repeat);
- a provider that does not: whenever a charge was cut off, the reconciliation
  answers not found and a person decides.
"""

from __future__ import annotations

import pytest

from agentrt.testkit import crash_matrix_sync
from support.payments import Provider
from support.testkit_children import forked_process_mode

REF_DEDUP = "support.payments:deduplicating"
REF_PLAIN = "support.payments:not_deduplicating"


def reconciled(case: object) -> list[dict[str, object]]:
    result = case.result  # type: ignore[attr-defined]
    return [e.payload for e in result.events if e.type == "step.reconciled"]


def assert_charged_once_and_nobody_asked(matrix: object, provider: Provider) -> None:
    matrix.assert_ok()  # type: ignore[attr-defined]
    answers: set[object] = set()
    for case in matrix.cases:  # type: ignore[attr-defined]
        result = case.result
        assert result is not None, case.label
        assert result.run.status == "COMPLETED", case.label
        assert provider.charged[result.run.id] == 1, case.label
        assert result.approvals == (), case.label
        answers |= {p["answer"] for p in reconciled(case)}
    assert answers == {"found", "safe_to_repeat"}  # both answers were exercised


@pytest.mark.timeout(600)
def test_a_deduplicating_provider_is_charged_exactly_once_at_every_crash_without_a_person() -> None:
    with Provider(deduplicates=True) as provider:
        matrix = crash_matrix_sync(REF_DEDUP, workers=2)
        assert_charged_once_and_nobody_asked(matrix, provider)


@pytest.mark.timeout(600)
def test_a_provider_that_does_not_deduplicate_leaves_every_cut_off_charge_to_a_person() -> None:
    with Provider(deduplicates=False) as provider:
        matrix = crash_matrix_sync(REF_PLAIN, workers=2)
        matrix.assert_ok()
        asked = 0
        for case in matrix.cases:
            result = case.result
            assert result is not None, case.label
            answers = [p["answer"] for p in reconciled(case)]
            assert set(answers) <= {"not_found"}, case.label
            kinds = [a.kind for a in result.approvals]
            # Each not-found answer is committed with the pause it leads to: one
            # approval per answer (a crash before that commit leaves neither).
            assert kinds.count("interrupted_side_effect") == len(answers), case.label
            for approval in result.approvals:
                assert approval.presentation["reconciliation"]["answer"] == "not_found"
            asked += len(answers)
            assert provider.charged[result.run.id] >= 1, case.label
        assert asked > 0


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_deduplicating_provider_is_charged_exactly_once_at_every_real_sigkill() -> None:
    # The children are forked from a prepared process (support/testkit_children.py).
    # On SQLite only: the kit's process-mode matrix on PostgreSQL is proved by
    # test_testkit_process.py, and this one would add 13 s of CPU (decision 0097).
    with Provider(deduplicates=True) as provider, forked_process_mode():
        matrix = crash_matrix_sync(REF_DEDUP, "process", workers=2)
        assert_charged_once_and_nobody_asked(matrix, provider)
        for case in matrix.cases:
            assert case.result is not None
            assert case.result.exit_codes[: len(case.crashes)] == (-9,) * len(case.crashes)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_provider_that_does_not_deduplicate_asks_a_person_at_every_real_sigkill() -> None:
    with Provider(deduplicates=False) as provider, forked_process_mode():  # as above
        matrix = crash_matrix_sync(REF_PLAIN, "process", workers=2, inside_tx=False)
        matrix.assert_ok()
        for case in matrix.cases:
            assert case.result is not None
            answers = [p["answer"] for p in reconciled(case)]
            assert set(answers) <= {"not_found"}, case.label
            assert provider.charged[case.result.run.id] >= 1, case.label


def test_the_kit_counts_a_reconciled_rerun_only_against_a_safe_to_repeat_answer() -> None:
    import dataclasses

    from agentrt.testkit import Crash, Point, check, run_sync

    with Provider(deduplicates=True) as provider:
        good = run_sync(REF_DEDUP, Crash(0, Point.AFTER_TOOL_STARTED))
        assert provider.charged[good.run.id] == 1
    assert check(good) == []
    said = [e.payload for e in good.events if e.type == "step.reconciled"]
    assert [p["answer"] for p in said] == ["safe_to_repeat"]
    # Without the answer that vouched for it, the re-run is a violation.
    events = tuple(e for e in good.events if e.type != "step.reconciled")
    found = {v.rule for v in check(dataclasses.replace(good, events=events))}
    assert found == {"unvouched_rerun", "too_many_tool_starts"}


def test_a_not_found_answer_commits_with_its_pause_so_a_crash_leaves_neither(
    database: str,
) -> None:
    # On SQLite and on PostgreSQL, where the harness waits each crash's lease (2 s) out
    # on the server's clock.
    from agentrt.testkit import Crash, Point, run_sync

    with Provider(deduplicates=False):
        # Killed mid-charge; the next owner's reconciliation answers not found and
        # is killed inside the transaction that pauses: none of it survives.
        result = run_sync(
            REF_PLAIN,
            Crash(0, Point.AFTER_TOOL_STARTED),
            Crash(0, Point.AFTER_PAUSED, inside_tx=True),
            db_path=database,
        )
    assert result.violations == ()
    assert [c.crash.at for c in result.crashes_reached] == ["step.tool_started", "run.paused"]
    # So the owner after it asked once more, and the record holds that one answer,
    # written with its pause: the event after it is the approval it led to.
    said = [e for e in result.events if e.type == "step.reconciled"]
    assert [e.payload["answer"] for e in said] == ["not_found"]
    kinds = [a.kind for a in result.approvals]
    assert kinds.count("interrupted_side_effect") == 1, kinds
    after = [e.type for e in result.events if e.seq > said[0].seq]
    assert after[:2] == ["step.policy", "approval.requested"], after
