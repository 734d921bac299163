"""The steps' part of a policy's input hash, grown as a run grows (`InputHashes.steps`).

It must equal the hash of the whole list (decision 0072's definition, what a re-check
rebuilds) whatever the views a session asks for: growing, with a step replaced in the
middle, shorter, or empty. It costs each new step once, not the whole run per step.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from agentrt._canonical import content_hash
from agentrt._policy_input import InputHashes
from agentrt._records import Approval, Decision, Step, StepStatus

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def step(i: int) -> Step:
    return Step(
        id=f"s{i:04d}",
        run_id="r1",
        index=i,
        status=StepStatus.DONE,
        decision=Decision.tool_call("t", {"i": i}),
        policy=None,
        observation=None,
        started_at=AT,
        finished_at=AT,
    )


def whole(hashes: InputHashes, steps: list[Step]) -> str:
    return content_hash([hashes.step(s) for s in steps])


def test_the_grown_hash_is_the_whole_lists_hash_for_every_view() -> None:
    hashes = InputHashes()
    steps = [step(i) for i in range(40)]
    views = [steps[:n] for n in (0, 1, 2, 5, 5, 17, 40)]
    replaced = list(steps)
    replaced[3] = dataclasses.replace(steps[3], status=StepStatus.FAILED)
    views += [replaced, replaced[:10], [], steps]
    for view in views:
        assert hashes.steps(view) == whole(InputHashes(), view)


def test_a_view_that_extends_the_last_hashes_only_its_new_steps() -> None:
    hashes = InputHashes()
    steps = [step(i) for i in range(100)]
    hashes.steps(steps[:99])
    hashed: list[str] = []
    real = hashes.step

    def counting(s: Step) -> str:
        hashed.append(s.id)
        return real(s)

    hashes.step = counting  # type: ignore[method-assign]
    assert hashes.steps(steps) == whole(InputHashes(), steps)
    assert hashed == ["s0099"]


def approval(i: int, status: str = "pending") -> Approval:
    return Approval(
        id=f"a{i}",
        run_id="r1",
        step_id=f"s{i:04d}",
        kind="k",
        capability={"i": i},
        presentation=None,
        request={"args": {"i": i}},
        hash="h",
        status=status,
        created_at=AT,
        expires_at=None,
        decided_at=None,
    )


def test_the_approvals_hash_is_the_whole_lists_hash_for_every_view() -> None:
    # Decision 0114: kept while a view holds the same approval objects as the last one.
    hashes = InputHashes()
    first, second = approval(1), approval(2)
    views = [[], [], [first], [first], [first, second], [first, approval(2, "approved")], []]
    for view in views:
        expected = content_hash([InputHashes().approval(a) for a in view])
        assert hashes.approvals(view) == expected
        assert hashes.approvals(tuple(view)) == expected
