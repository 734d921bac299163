"""`ScriptedAgent` finds its place in O(1) amortized per decision, with the same answer
as judging every step (`script_position`) for any sequence of inputs it is shown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentrt import (
    Decision,
    Limits,
    Observation,
    Run,
    SideEffect,
    Step,
    StepInput,
    ToolSpec,
)
from agentrt.scripted import ScriptedAgent, script_position

AT = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
TOOLS = (
    ToolSpec(
        name="read",
        description="r",
        input_schema={},
        side_effect=SideEffect.READ_ONLY,
        timeout=SECOND,
    ),
    ToolSpec(
        name="send",
        description="s",
        input_schema={},
        side_effect=SideEffect.REMOTE_MUTATION,
        timeout=SECOND,
    ),
)


def run(run_id: str) -> Run:
    return Run(run_id, "g", "RUNNING", "", "", Limits(), 0, AT, AT, None, None)


def step(run_id: str, index: int, status: str, *, previous: str = "", tool: str = "read") -> Step:
    observation = Observation.interrupted(previous) if previous else None
    return Step(
        id=f"{run_id}-{index}-{status}",
        run_id=run_id,
        index=index,
        status=status,
        decision=Decision.tool_call(tool, {}),
        policy=None,
        observation=observation,
        started_at=AT,
        finished_at=None,
    )


def shown(run_id: str, steps: list[Step]) -> StepInput:
    return StepInput(run=run(run_id), steps=tuple(steps), approvals=(), tools=TOOLS)


def test_the_remembered_prefix_gives_the_same_position_as_judging_every_step() -> None:
    agent = ScriptedAgent([Decision.complete()] * 50)
    steps: list[Step] = []
    inputs: list[StepInput] = []
    for index in range(4):  # done steps: each settles its entry
        inputs.append(shown("r1", [*steps, step("r1", index, "deciding")]))
        steps.append(step("r1", index, "done"))
    # Interrupted while deciding (does not settle), then while executing a read-only
    # call (does not settle) and a side effect (settles), then failed.
    steps.append(step("r1", 4, "interrupted", previous="deciding"))
    inputs.append(shown("r1", [*steps, step("r1", 5, "deciding")]))
    steps.append(step("r1", 5, "interrupted", previous="executing"))
    steps.append(step("r1", 6, "interrupted", previous="executing", tool="send"))
    steps.append(step("r1", 7, "failed"))
    inputs.append(shown("r1", [*steps, step("r1", 8, "deciding")]))
    # The interrupted read is reconciled: done now, the same step id in a later input.
    steps[5] = step("r1", 5, "done")
    steps[5] = Step(**{**steps[5].__dict__, "id": "r1-5-interrupted"})
    inputs.append(shown("r1", [*steps, step("r1", 8, "deciding")]))
    # Another run shown to the same agent; then the first again, and one cut short.
    inputs.append(shown("r2", [step("r2", 0, "done"), step("r2", 1, "deciding")]))
    inputs.append(shown("r1", [*steps, step("r1", 8, "deciding")]))
    inputs.append(shown("r1", [*steps[:2], step("r1", 2, "deciding")]))
    # The same run with a different step at the remembered prefix's end (a rewritten run).
    other = [step("r1", 0, "done"), step("r1", 1, "done")]
    other[1] = Step(**{**other[1].__dict__, "id": "elsewhere"})
    inputs.append(shown("r1", [*other, step("r1", 2, "interrupted", previous="deciding")]))
    expected = [0, 1, 2, 3, 4, 6, 7, 1, 7, 2, 2]
    assert [script_position(i) for i in inputs] == expected
    assert [agent._settled.position(i) for i in inputs] == expected


def test_the_agent_plays_the_entry_at_that_position() -> None:
    agent = ScriptedAgent([Decision.tool_call("read", {"n": n}) for n in range(3)])
    steps = [step("r1", 0, "done"), step("r1", 1, "interrupted", previous="deciding")]
    decision = agent.decide(shown("r1", [*steps, step("r1", 2, "deciding")]))
    assert decision.args == {"n": 1}
