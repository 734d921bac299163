"""A tool's content is read once, into plain values (decision 0138).

Found by an attack, on the old code: a tool's content is read once for its hash and
again for the record:

`result_observation` checks the content and `Observation.tool_result` hashes it, but
`written_observation` encodes the tool's own object again, later. A dict subclass whose
`items()` changes between reads (or any content another thread of the tool still
mutates) is then stored with a `content_hash` that is not the hash of the stored
content, and `step.tool_finished` carries the stale hash: the record contradicts itself,
and loop detection (which compares content hashes) judges content nobody stored.
"""

from __future__ import annotations

from typing import Any

import agentrt
from agentrt import Decision, PolicyDecision, SideEffect, ToolCall, ToolResult
from agentrt._canonical import content_hash
from conftest import RecordingTool
from support.gates import make_gate, open_step
from support.policies import FixedPolicy


class _Shifting(dict):  # type: ignore[type-arg]
    """Reads as {"n": 1} the first three times its items are read, then as {"n": 2}."""

    reads = 0

    def items(self) -> Any:
        type(self).reads += 1
        return {"n": 1 if type(self).reads <= 3 else 2}.items()


def call_once(
    store: agentrt.Store, tool: RecordingTool
) -> tuple[agentrt.GateSession, agentrt.Observation]:
    """`tool` allowed and executed once on a Gate session, closed after; what it observed."""
    gate = make_gate(store, tool, policy=FixedPolicy(PolicyDecision.allow()))
    session, step = open_step(gate, f"{tool.spec.name} once")
    assert step.propose_sync(Decision.tool_call(tool.spec.name, {"x": 1})).outcome == "allowed"
    observation = step.execute_sync()
    session.close_sync()
    return session, observation


def test_stored_content_hash_is_the_hash_of_the_stored_content(any_store: agentrt.Store) -> None:
    class Shifting(_Shifting):
        reads = 0

    def result(call: ToolCall) -> ToolResult:
        return ToolResult(Shifting(n=1))

    tool = RecordingTool("read", SideEffect.READ_ONLY, result=result)
    session, _ = call_once(any_store, tool)

    [stored] = any_store.list_steps(session.run.id)
    observation = stored.observation
    assert observation is not None and observation.kind == "tool_result"
    # The record must agree with itself: the hash kept is the hash of the content kept.
    assert observation.content_hash == content_hash(observation.content), (
        f"stored content {observation.content!r} but content_hash of another value"
    )
    [finished] = [
        e for e in any_store.list_events(session.run.id) if e.type == "step.tool_finished"
    ]
    assert finished.payload["content_hash"] == content_hash(observation.content)


class _Souring(dict):  # type: ignore[type-arg]
    """Usable the first three times its items are read, then holding NaN."""

    reads = 0

    def items(self) -> Any:
        type(self).reads += 1
        return {"n": 1 if type(self).reads <= 3 else float("nan")}.items()


def test_content_that_would_sour_when_read_again_is_recorded_as_read_once(
    any_store: agentrt.Store,
) -> None:
    """A dict subclass whose `items()` would hold NaN at a later read: the content is read
    once, by the base type (what the dict holds), into plain values; the outcome of the
    call, which ran, is recorded (it was lost: `execute` raised after the tool ran)."""

    class Souring(_Souring):
        reads = 0

    def result(call: ToolCall) -> ToolResult:
        return ToolResult(Souring(n=1))

    push = RecordingTool("push", SideEffect.REMOTE_MUTATION, result=result)
    session, observation = call_once(any_store, push)
    assert len(push.calls) == 1
    [stored] = any_store.list_steps(session.run.id)
    assert stored.status == "done"
    assert stored.observation is not None and stored.observation.content == {"n": 1}
    assert type(observation.content) is dict
    assert stored.observation.content_hash == content_hash({"n": 1})
