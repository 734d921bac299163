"""Re-checkable decisions: a run's recorded policy evaluations asked again of a policy given now.

The tests that take `any_store` run on SQLite and on PostgreSQL (issue 21 item 5;
decision 0105); the two that rewrite a recorded row by hand stay on SQLite for now.
"""

from __future__ import annotations

from typing import Any

import pytest

import agentrt
from agentrt import Decision, PolicyDecision, RunView, SideEffect, ToolRequest
from agentrt._canonical import to_text
from agentrt._policy_input import input_text
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support.policies import FixedPolicy
from support.tools import make_tools

STORY = [
    Decision.tool_call("read", {"x": 1}),
    Decision.tool_call("push", {"x": "seven"}),  # invalid: no policy is asked
    Decision.tool_call("rm", {"x": 2}),
    Decision.tool_call("push", {"x": 3}),
    Decision.complete({"done": True}),
]


class Recording:
    """Wraps a policy, keeping the exact input of each call (canonical bytes and reprs)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.policy_id = agentrt._policy.policy_id_of(inner)
        self.inputs: list[tuple[bytes, str, str, Any, Any]] = []

    def evaluate(self, request: ToolRequest, view: RunView) -> Any:
        spec = request.spec
        self.inputs.append(
            (
                input_text(request, view),
                repr(view),
                repr((request.run_id, request.step_id, request.args)),
                spec,
                agentrt.canonical_json(spec.to_json()),
            )
        )
        return self.inner.evaluate(request, view)


def story_run(store: agentrt.Store, policy: Any, *, finish: bool = True) -> agentrt.Run:
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(list(STORY)),
        policy=policy,
        tools=list(make_tools()),
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("tidy the repo")
    assert run.status == "WAITING_FOR_APPROVAL"
    if not finish:
        return run
    (pending,) = store.pending_approvals(run.id)
    driver.approve(run.id, pending.id, by="alice", note="ok")
    run = driver.resume_sync(run.id)
    assert run.status == "COMPLETED"
    return run


def verdicts(report: agentrt.RecheckReport) -> list[tuple[str, str, str]]:
    return [
        (e.tool, e.recorded.outcome if e.recorded else "", e.verdict) for e in report.evaluations
    ]


def test_the_same_policy_rechecks_every_evaluation_the_same(any_store: agentrt.Store) -> None:
    store = any_store
    run = story_run(store, agentrt.default_policy())
    report = agentrt.recheck(store, run.id, agentrt.default_policy())
    assert verdicts(report) == [
        ("read", "allow", "same"),
        ("rm", "deny", "same"),
        ("push", "require_approval", "same"),  # the pause
        ("push", "require_approval", "same"),  # asked again on resume, same hash: allowed
    ]
    assert report.same and report.differences == ()
    assert report.ended and report.run_status == "COMPLETED"
    assert report.policy_id == "agentrt.default_policy/1"
    assert report.recorded_policy_ids == ("agentrt.default_policy/1",)
    assert not report.policy_changed
    assert {e.spec_source for e in report.evaluations} == {"record"}
    assert report.counts() == {
        "same": 4,
        "different": 0,
        "not_a_policy_evaluation": 0,
        "not_recheckable": 0,
    }


def test_the_policy_receives_byte_for_byte_the_input_it_got_the_first_time(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    first = Recording(agentrt.default_policy())
    run = story_run(store, first)
    again = Recording(agentrt.default_policy())
    report = agentrt.recheck(store, run.id, again)
    assert report.same
    assert len(first.inputs) == len(again.inputs) == 4
    for original, rechecked in zip(first.inputs, again.inputs, strict=True):
        text, view, ids_and_args, spec, spec_bytes = original
        assert rechecked[0] == text  # the whole input, canonical JSON, byte for byte
        assert rechecked[1] == view  # the run, its steps and approvals, to the repr
        assert rechecked[2] == ids_and_args
        assert rechecked[3] == spec and rechecked[4] == spec_bytes
    # The view grew as the run did: the resume's evaluation saw the pause's approval.
    assert b'"status":"approved"' in first.inputs[3][0]
    assert b'"status":"WAITING_FOR_APPROVAL"' in first.inputs[3][0]


class Stricter:
    """The default policy, and reads of `x == 1` now wait for a person too."""

    policy_id = "stricter/2"

    def __init__(self) -> None:
        self.inner = agentrt.default_policy()

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        if request.spec.name == "read":
            return agentrt.need_approval("read", "reads are reviewed now", capability={"r": 1})
        if request.spec.name == "push":
            return PolicyDecision.deny("no pushes any more")
        return self.inner.evaluate(request, view)


def test_a_stricter_policy_reports_each_difference(any_store: agentrt.Store) -> None:
    store = any_store
    run = story_run(store, agentrt.default_policy())
    report = agentrt.recheck(store, run.id, Stricter())
    assert verdicts(report) == [
        ("read", "allow", "different"),
        ("rm", "deny", "same"),
        ("push", "require_approval", "different"),
        ("push", "require_approval", "different"),
    ]
    read, rm, push, _ = report.evaluations
    assert read.differences == ("outcome", "kind", "approval_hash")
    assert read.now is not None and read.now.outcome == "require_approval"
    assert read.now.kind == "read" and len(read.now.approval_hash) == 64
    assert read.now_reason == "reads are reviewed now"
    assert push.differences == ("outcome", "kind", "approval_hash")
    assert push.now is not None and push.now.to_json() == {"outcome": "deny"}
    assert push.reason == "tool 'push' changes a remote system; a person must approve it"
    assert rm.differences == () and rm.now_reason == ""
    assert report.policy_changed and report.policy_id == "stricter/2"
    assert not report.same and len(report.differences) == 3


def test_a_changed_reason_alone_is_the_same(any_store: agentrt.Store) -> None:
    store = any_store
    run = story_run(store, agentrt.default_policy())

    class Reworded:
        policy_id = "agentrt.default_policy/1"

        def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
            decision = agentrt.default_policy().evaluate(request, view)
            return PolicyDecision(
                decision.outcome,
                "said differently",
                decision.kind,
                decision.capability,
                decision.presentation,
            )

    report = agentrt.recheck(store, run.id, Reworded())
    assert [e.verdict for e in report.evaluations] == ["same"] * 4
    assert not report.policy_changed


def test_a_changed_presentation_is_a_different_approval_hash(any_store: agentrt.Store) -> None:
    store = any_store
    run = story_run(store, agentrt.default_policy())

    class Presented:
        policy_id = "agentrt.default_policy/1"

        def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
            decision = agentrt.default_policy().evaluate(request, view)
            if decision.outcome != "require_approval":
                return decision
            return agentrt.need_approval(
                decision.kind,
                decision.reason,
                capability=decision.capability,
                presentation={"shown": "differently"},
            )

    report = agentrt.recheck(store, run.id, Presented())
    push = [e for e in report.evaluations if e.tool == "push"]
    assert [e.verdict for e in push] == ["different", "different"]
    assert [e.differences for e in push] == [("approval_hash",), ("approval_hash",)]
    recorded = store.list_approvals(run.id)[0].hash
    assert push[0].recorded is not None and push[0].recorded.approval_hash == recorded
    assert push[0].now is not None and push[0].now.approval_hash != recorded


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (RuntimeError("the table is gone"), "policy raised RuntimeError: the table is gone"),
        ("allow", "policy returned str, not a PolicyDecision"),
        (PolicyDecision("maybe"), "policy returned an unknown outcome 'maybe'"),
        (
            PolicyDecision("require_approval", "r", ""),
            "policy required an approval without naming its kind",
        ),
    ],
)
def test_a_policy_that_now_raises_or_answers_unusably_differs_with_its_error(
    any_store: agentrt.Store, answer: Any, error: str
) -> None:
    store = any_store
    run = story_run(store, agentrt.default_policy())
    report = agentrt.recheck(store, run.id, FixedPolicy(answer))
    assert [e.verdict for e in report.evaluations] == ["different"] * 4
    for e in report.evaluations:
        assert e.now is not None and e.now.to_json() == {"error": error}
        assert e.differences == ("outcome",)


def test_an_async_policy_is_awaited(any_store: agentrt.Store) -> None:
    store = any_store
    run = story_run(store, agentrt.default_policy())

    class Async:
        policy_id = "agentrt.default_policy/1"

        async def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
            return agentrt.default_policy().evaluate(request, view)

    assert agentrt.recheck(store, run.id, Async()).same


def test_a_run_not_yet_ended_is_rechecked_as_far_as_it_got(any_store: agentrt.Store) -> None:
    store = any_store
    run = story_run(store, agentrt.default_policy(), finish=False)
    report = agentrt.recheck(store, run.id, Stricter())
    assert not report.ended and report.run_status == "WAITING_FOR_APPROVAL"
    assert verdicts(report) == [
        ("read", "allow", "different"),
        ("rm", "deny", "same"),
        ("push", "require_approval", "different"),
    ]


def _changed_push() -> RecordingTool:
    tool = RecordingTool("push", SideEffect.REMOTE_MUTATION, result={"pushed": True})
    tool.spec = agentrt.ToolSpec(
        name="push",
        description="push, now described otherwise",
        input_schema=tool.spec.input_schema,
        side_effect=SideEffect.REMOTE_MUTATION,
        timeout=tool.spec.timeout,
    )
    return tool


def test_a_spec_changed_since_the_run_comes_from_the_current_registration(
    any_store: agentrt.Store,
) -> None:
    # The push resumed under a Driver whose push changed: that spec is not the run's own.
    store = any_store
    read, _, rm = make_tools()
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(list(STORY)),
        policy=agentrt.default_policy(),
        tools=list(make_tools()),
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("tidy the repo")
    (pending,) = store.pending_approvals(run.id)
    driver.approve(run.id, pending.id, by="alice")
    changed = _changed_push()
    later = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(list(STORY[4:])),
        policy=agentrt.default_policy(),
        tools=[read, changed, rm],
        now=FakeClock(),
        new_id=Ids("b"),
    )
    assert later.resume_sync(run.id).status == "WAITING_FOR_APPROVAL"  # the new hash pauses
    without = agentrt.recheck(store, run.id, agentrt.default_policy())
    assert [(e.tool, e.verdict, e.spec_source) for e in without.evaluations] == [
        ("read", "same", "record"),
        ("rm", "same", "record"),
        ("push", "same", "record"),
        ("push", "not_recheckable", ""),
    ]
    assert without.evaluations[3].detail == (
        "the tool spec the policy saw is in neither the record nor the tools given"
    )
    current = agentrt.recheck(store, run.id, agentrt.default_policy(), tools=[read, changed, rm])
    assert [(e.verdict, e.spec_source) for e in current.evaluations] == [
        ("same", "record"),
        ("same", "record"),
        ("same", "record"),
        ("same", "registration"),
    ]


def test_an_older_record_without_the_policys_input_is_not_recheckable(
    store: agentrt.Store,
) -> None:
    run = story_run(store, agentrt.default_policy())
    # Rewritten whole, without `input` (a large payload is stored by reference, decision
    # 0084, so SQL's JSON functions do not see it).
    with store.transaction() as tx:
        for event in store.list_events(run_id=run.id):
            if event.type == "step.policy":
                payload = {k: v for k, v in event.payload.items() if k != "input"}
                tx.execute(
                    "UPDATE events SET payload_json = ? WHERE seq = ?",
                    (to_text(payload), event.seq),
                )
    report = agentrt.recheck(store, run.id, Stricter())
    assert [e.verdict for e in report.evaluations] == ["not_recheckable"] * 4
    assert report.evaluations[0].detail == (
        "the record predates re-checkable decisions: it does not keep the policy's input"
    )
    assert report.differences == () and not report.same


def test_a_step_changed_since_the_evaluation_is_not_recheckable(store: agentrt.Store) -> None:
    run = story_run(store, agentrt.default_policy())
    first = store.list_steps(run.id)[0]
    with store.transaction() as tx:
        tx.execute("UPDATE steps SET finished_at = '' WHERE id = ?", (first.id,))
    report = agentrt.recheck(store, run.id, agentrt.default_policy())
    # The read's own evaluation saw no step; every later one saw the read's step.
    assert [e.verdict for e in report.evaluations] == ["same"] + ["not_recheckable"] * 3
    assert report.evaluations[1].detail == (
        "what the record holds now does not hash as the policy's input did: steps"
    )


def test_the_runtimes_own_pause_is_not_a_policy_evaluation(any_store: agentrt.Store) -> None:
    store = any_store
    from agentrt import OutcomeUnknown, ToolCall, ToolResult

    class Lost(RecordingTool):
        def call(self, call: ToolCall) -> ToolResult:
            raise OutcomeUnknown("the connection dropped after sending")

    lost = Lost("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("push", {"x": 1})]),
        policy=SideEffectAllow(),
        tools=[lost],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("push once")
    assert run.status == "WAITING_FOR_APPROVAL"
    report = agentrt.recheck(store, run.id, SideEffectAllow())
    assert [(e.verdict, e.policy_id) for e in report.evaluations] == [
        ("same", "allow-all/1"),
        ("not_a_policy_evaluation", "agentrt:interrupted_side_effect"),
    ]
    assert report.recorded_policy_ids == ("allow-all/1",) and report.same


class SideEffectAllow:
    policy_id = "allow-all/1"

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        return PolicyDecision.allow()


def test_a_run_that_does_not_exist_is_refused(any_store: agentrt.Store) -> None:
    store = any_store
    with pytest.raises(agentrt.NotFoundError):
        agentrt.recheck(store, "nope", agentrt.default_policy())
