"""agentrt.render: steps to messages and replies to decisions (models.md, "Rendering")."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentrt
from agentrt import (
    Approval,
    ConfigError,
    Decision,
    Limits,
    Observation,
    PolicyDecision,
    Run,
    SideEffect,
    Step,
    StepInput,
    ToolSpec,
)
from agentrt._canonical import from_text, parse_json, to_text
from agentrt._model import (
    ContentBlock,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from agentrt.model_agent import ModelAgent
from agentrt.render import (
    DEFAULT_SYSTEM,
    RenderOptions,
    decide,
    messages,
    request_bytes,
    same_renders,
    tool_use_id,
)
from agentrt.replay import ScriptedModel
from conftest import FakeClock, Ids, RecordingTool

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

READ = ToolSpec("read", "read a file", {"type": "object"}, SideEffect.READ_ONLY, timedelta(5))
FINISH = ToolSpec(
    "finish", "finish the goal", {"type": "object"}, SideEffect.READ_ONLY, timedelta(5), True
)


def make_run(goal: str = "tidy the notes", **changes: Any) -> Run:
    run = Run("r1", goal, "RUNNING", "", "", Limits(), 0, T0, T0, None, None)
    return replace(run, **changes)


def ok(content: Any, summary: str = "ok") -> Observation:
    return Observation("tool_result", content, summary, agentrt.content_hash(content))


def obs(kind: str, content: Any, summary: str = "") -> Observation:
    return Observation(kind, content, summary, agentrt.content_hash(content))


def step(index: int, decision: Decision | None, observation: Observation | None, **kw: Any) -> Step:
    status = kw.pop("status", "done" if observation is not None else "deciding")
    return Step(
        f"step{index:04d}", "r1", index, status, decision, None, observation, T0, None, **kw
    )


def inp(steps: list[Step], tools: tuple[ToolSpec, ...] = (READ, FINISH), **kw: Any) -> StepInput:
    return StepInput(run=make_run(**kw), steps=tuple(steps), approvals=(), tools=tools)


def turns(request: ModelRequest) -> list[tuple[str, list[Any]]]:
    return [(m.role, [b.to_json() for b in m.content]) for m in request.messages]


def result_text(request: ModelRequest, position: int) -> str:
    """The result content of the `position`-th rendered step."""
    (block,) = request.messages[2 + 2 * position].content
    assert isinstance(block, ToolResultBlock | TextBlock)
    return block.content if isinstance(block, ToolResultBlock) else block.text


def call(tool: str = "read", args: Any = None, reason: str = "") -> Decision:
    return Decision.tool_call(tool, {"path": "a"} if args is None else args, reason=reason)


# --------------------------------------------------------------------------- the conversation


def test_goal_opens_and_options_fill_system_tools_and_output_cap() -> None:
    request = messages(inp([]), RenderOptions(system="be brief", max_output_tokens=77))
    assert request.system == "be brief"
    assert request.max_output_tokens == 77
    assert tuple(request.tools) == (READ, FINISH)
    assert turns(request) == [("user", [{"type": "text", "text": "tidy the notes"}])]
    default = messages(inp([]))
    assert default.system == DEFAULT_SYSTEM and default.max_output_tokens == 4096


def test_tool_use_id_is_derived_from_the_step_id() -> None:
    s = step(0, call(), ok(1))
    assert tool_use_id(s) == "toolu_" + hashlib.sha256(b"step0000").hexdigest()[:24]
    assert tool_use_id(s) == tool_use_id(replace(s, index=9, status="failed"))
    assert tool_use_id(s) != tool_use_id(step(1, call(), ok(1)))


def test_a_tool_call_step_is_an_assistant_call_and_its_result() -> None:
    s = step(0, call(reason="I look first"), ok({"lines": [1, 2.50]}, "2 lines"))
    use_id = tool_use_id(s)
    assert turns(messages(inp([s, step(1, None, None)]))) == [
        ("user", [{"type": "text", "text": "tidy the notes"}]),
        (
            "assistant",
            [
                {"type": "text", "text": "I look first"},
                {"type": "tool_use", "id": use_id, "name": "read", "input": {"path": "a"}},
            ],
        ),
        (
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": use_id,
                    "content": '{"lines":[1,2.5]}',
                    "is_error": False,
                }
            ],
        ),
    ]


def test_result_text_is_the_json_text_with_literals_kept() -> None:
    content = parse_json(b'{"b":"<&>","a":1.50,"big":123456789012345678901234567890}')
    request = messages(inp([step(0, call(), ok(content))]))
    assert result_text(request, 0) == '{"a":1.50,"b":"<&>","big":123456789012345678901234567890}'


def test_steps_without_a_settled_outcome_render_nothing() -> None:
    settled = step(0, call(), ok(1))
    awaiting = step(1, call("push"), None, status="awaiting_approval")
    completed = step(2, Decision.complete({"done": True}), None, status="done")
    # An interrupted call waiting on a person to re-run it: its outcome is pending.
    rerun = step(
        3,
        call("push"),
        obs("interrupted", {"previous_status": "executing"}),
        status="awaiting_approval",
    )
    deciding = step(4, None, None)
    assert request_bytes(messages(inp([settled, awaiting, completed, rerun, deciding]))) == (
        request_bytes(messages(inp([settled])))
    )
    assert request_bytes(messages(inp([settled, replace(rerun, status="interrupted")]))) != (
        request_bytes(messages(inp([settled])))
    )


def test_content_is_capped_with_a_visible_marker() -> None:
    big = "x" * 20_000
    text = result_text(
        messages(inp([step(0, call(), ok(big))]), RenderOptions(content_cap=1000)), 0
    )
    assert len(text) <= 1000
    kept = text[: text.index("…")]
    assert text == kept + f"…[truncated: {20_002 - len(kept)} more characters]"
    assert ('"' + "x" * 100).startswith(kept[:101])
    short = result_text(messages(inp([step(0, call(), ok("y" * 900))]), RenderOptions()), 0)
    assert short == '"' + "y" * 900 + '"'


def test_older_results_are_summarized_outside_the_window() -> None:
    steps = [step(i, call(args={"n": i}), ok({"n": i}, f"result {i}")) for i in range(4)]
    steps[1] = step(1, call(args={"n": 1}), ok({"n": 1}, ""))
    request = messages(inp(steps), RenderOptions(full_results=2))
    assert [result_text(request, i) for i in range(4)] == [
        "[earlier result, summarized: result 0]",
        "[earlier result, not shown]",
        '{"n":2}',
        '{"n":3}',
    ]
    none_full = messages(inp(steps), RenderOptions(full_results=0))
    assert result_text(none_full, 3) == "[earlier result, summarized: result 3]"


DENIED = obs("policy_denied", {"tool": "read", "reason": "not today"}, "not today")

NUDGES: list[tuple[str, Decision, Observation, bool, str | None]] = [
    ("success", call(), ok({"a": 1}), False, None),
    (
        "tool error",
        call(),
        obs("tool_error", {"tool": "read", "error": "boom", "failure": "error"}),
        True,
        None,
    ),
    (
        "timeout",
        call(),
        obs("tool_error", {"tool": "read", "error": "slow", "failure": "timeout"}),
        True,
        "The tool timed out, so whether it took effect is unknown. Check the current state "
        "before calling it again.",
    ),
    (
        "denied",
        call(),
        DENIED,
        True,
        "This call was denied, so it did not run. Do not repeat it; find another way to the "
        "goal, or finish.",
    ),
    (
        "invalid args",
        call(args={"path": 3}),
        obs("invalid_decision", {"error": "args do not match"}),
        True,
        "This call was refused before it ran (see the error). Correct it to match the tool's "
        "name and input schema, then call again.",
    ),
    (
        "interrupted while executing",
        call(),
        obs("interrupted", {"previous_status": "executing"}),
        True,
        "The runtime stopped while this call was running, so its outcome is unknown: it may "
        "or may not have taken effect. Check the current state before repeating it.",
    ),
    (
        "cancelled by the operator",
        call(),
        obs("interrupted", {"by": "ops", "note": "stop"}),
        True,
        "The runtime stopped while this call was running, so its outcome is unknown: it may "
        "or may not have taken effect. Check the current state before repeating it.",
    ),
    (
        "interrupted before it started",
        call(),
        obs("interrupted", {"previous_status": "deciding"}),
        True,
        "The runtime stopped before this call started, so it did not run. Call it again if "
        "it is still needed.",
    ),
]


@pytest.mark.parametrize(
    ("decision", "observation", "is_error", "nudge"),
    [case[1:] for case in NUDGES],
    ids=[case[0] for case in NUDGES],
)
def test_each_outcome_is_shown_on_its_own_call_with_its_nudge(
    decision: Decision, observation: Observation, is_error: bool, nudge: str | None
) -> None:
    s = step(0, decision, observation, status="done" if not is_error else "failed")
    request = messages(inp([s]))
    (use,) = [b for b in request.messages[1].content if isinstance(b, ToolUseBlock)]
    (result,) = request.messages[2].content
    assert isinstance(result, ToolResultBlock)
    assert result.tool_use_id == use.id == tool_use_id(s)
    assert result.is_error is is_error
    body = to_text(observation.content)
    assert result.content == (body if nudge is None else f"{body}\n\n{nudge}")


INVALID = obs("invalid_decision", {"error": "refused"})


@pytest.mark.parametrize(
    ("decision", "tools", "assistant_text", "nudge"),
    [
        (
            Decision(kind="truncated", reason="I will call rea"),
            (READ,),
            "I will call rea",
            "Your reply was cut off at the output limit before it finished, so nothing ran. "
            "Reply again with one complete tool call and a shorter text.",
        ),
        (
            Decision(kind="no_tool_call", reason="All done, I think."),
            (READ, FINISH),
            "All done, I think.",
            "Your reply called no tool, so nothing ran. Every reply must call exactly one "
            "tool; to finish, call 'finish'.",
        ),
        (
            Decision(kind="no_tool_call"),
            (READ,),
            "(no_tool_call reply with no text)",
            "Your reply called no tool, so nothing ran. Every reply must call exactly one tool.",
        ),
        (
            Decision.tool_call("bad name!", {}),
            (READ,),
            "(a call of tool 'bad name!')",
            "This call was refused before it ran (see the error). Correct it to match the "
            "tool's name and input schema, then call again.",
        ),
        (
            Decision.complete(None),
            (READ,),
            "(complete reply with no text)",
            "This reply was refused before anything ran (see the error).",
        ),
    ],
    ids=["truncated", "no tool call", "empty reply", "unusable tool name", "other kind"],
)
def test_a_reply_with_no_call_to_show_renders_as_text_turns(
    decision: Decision, tools: tuple[ToolSpec, ...], assistant_text: str, nudge: str
) -> None:
    request = messages(inp([step(0, decision, INVALID, status="failed")], tools=tools))
    assert turns(request)[1:] == [
        ("assistant", [{"type": "text", "text": assistant_text}]),
        ("user", [{"type": "text", "text": '{"error":"refused"}\n\n' + nudge}]),
    ]


def test_several_finishing_tools_are_all_named() -> None:
    done = replace(FINISH, name="done")
    request = messages(inp([step(0, Decision(kind="no_tool_call"), INVALID)], tools=(done, FINISH)))
    assert result_text(request, 0).endswith("to finish, call 'done' or 'finish'.")


def test_args_that_are_not_an_object_are_shown_as_an_empty_input() -> None:
    request = messages(inp([step(0, call(args=[1, 2]), INVALID)]))
    (use,) = request.messages[1].content
    assert isinstance(use, ToolUseBlock) and use.input == {}


# --------------------------------------------------------------------------- hooks and options


def test_hooks_shape_the_opening_the_assistant_turn_and_the_result() -> None:
    def opening(run: Run) -> list[ContentBlock]:
        return [TextBlock(f"Goal: {run.goal}"), TextBlock("Be careful.")]

    def assistant(s: Step, default: Any) -> list[ContentBlock]:
        return [b for b in default if isinstance(b, ToolUseBlock)]

    def observation(s: Step, default: Any) -> list[ContentBlock]:
        (block,) = default
        return [replace(block, content=f"step {s.index}: {block.content}")]

    options = RenderOptions(opening=opening, assistant=assistant, observation=observation)
    s = step(0, call(reason="why"), ok(5))
    use_id = tool_use_id(s)
    opening_json = [
        {"type": "text", "text": "Goal: tidy the notes"},
        {"type": "text", "text": "Be careful."},
    ]
    use = {"type": "tool_use", "id": use_id, "name": "read", "input": {"path": "a"}}
    result = {
        "type": "tool_result",
        "tool_use_id": use_id,
        "content": "step 0: 5",
        "is_error": False,
    }
    assert turns(messages(inp([s]), options)) == [
        ("user", opening_json),
        ("assistant", [use]),
        ("user", [result]),
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (RenderOptions(assistant=lambda s, d: [TextBlock("no call")]), "exactly the one tool use"),
        (
            RenderOptions(assistant=lambda s, d: [*d, ToolUseBlock("toolu_x", "read", {})]),
            "exactly the one tool use",
        ),
        (
            RenderOptions(observation=lambda s, d: [ToolResultBlock("toolu_other", "x")]),
            "exactly the one result",
        ),
        (RenderOptions(observation=lambda s, d: []), "returned no content blocks"),
        (
            RenderOptions(observation=lambda s, d: ["text"]),  # type: ignore[list-item]
            "returned str, not a content block",
        ),
        (RenderOptions(opening=lambda run: [ToolUseBlock("a", "b", {})]), "text blocks only"),
    ],
)
def test_hooks_that_break_the_conversation_are_refused(
    options: RenderOptions, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        messages(inp([step(0, call(), ok(1))]), options)


def test_a_hook_cannot_add_a_call_to_a_reply_that_had_none() -> None:
    options = RenderOptions(assistant=lambda s, d: [ToolUseBlock("toolu_x", "read", {})])
    with pytest.raises(ConfigError, match="has no call"):
        messages(inp([step(0, Decision(kind="no_tool_call"), INVALID)]), options)


@pytest.mark.parametrize(
    "changes",
    [
        {"full_results": -1},
        {"content_cap": 63},
        {"max_reason": 10},
        {"max_output_tokens": 0},
        {"max_output_tokens": True},
        {"opening": "not callable"},
        {"system": None},
    ],
)
def test_render_options_refuse_what_cannot_work(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RenderOptions(**changes)


# --------------------------------------------------------------------------- decide


def response(
    text: str = "", uses: tuple[ToolUseBlock, ...] = (), stop: str = "tool_use"
) -> ModelResponse:
    return ModelResponse(text, uses, stop, Usage(1, 1))


USE_A = ToolUseBlock("toolu_a", "read", {"path": "x"})
USE_B = ToolUseBlock("toolu_b", "push", {})
USE_C = ToolUseBlock("toolu_c", "finish", {})


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            response(" I read it.\n", (USE_A,)),
            Decision("tool_call", "read", {"path": "x"}, reason="I read it.", origin="model"),
        ),
        (
            response("", (USE_A,), stop="end_turn"),
            Decision("tool_call", "read", {"path": "x"}, origin="model"),
        ),
        (
            response("both", (USE_A, USE_B, USE_C)),
            Decision(
                "tool_call",
                "read",
                {"path": "x"},
                reason="both\n[only the first tool call of a reply runs; not run: "
                "'push' or 'finish']",
                origin="model",
            ),
        ),
        (
            response("I can't help with that.", stop="refusal"),
            Decision("fail", message="the model refused: I can't help with that.", origin="model"),
        ),
        (
            response("", stop="refusal"),
            Decision("fail", message="the model refused", origin="model"),
        ),
        (
            response("", stop="model_context_window_exceeded"),
            Decision(
                "fail",
                message="the conversation no longer fits the model's context window",
                origin="model",
            ),
        ),
        (
            response("Let me call", (USE_A,), stop="max_tokens"),
            Decision(
                "truncated", reason="Let me call\n[cut off while calling 'read']", origin="model"
            ),
        ),
        (
            response("partial", stop="max_tokens"),
            Decision("truncated", reason="partial", origin="model"),
        ),
        (
            response("I think we are done.", stop="end_turn"),
            Decision("no_tool_call", reason="I think we are done.", origin="model"),
        ),
        (response("", stop="tool_use"), Decision("no_tool_call", origin="model")),
    ],
    ids=[
        "one call",
        "call with end_turn",
        "extra calls named",
        "refusal",
        "silent refusal",
        "context overflow",
        "cut off mid-call",
        "cut off text",
        "no call",
        "tool_use without a call",
    ],
)
def test_decide(reply: ModelResponse, expected: Decision) -> None:
    assert decide(reply) == expected


def test_a_truncated_reply_never_carries_a_call() -> None:
    decision = decide(response("x", (USE_A,), stop="max_tokens"))
    assert decision.kind == "truncated" and decision.tool == "" and decision.args is None


def test_reasons_are_capped_and_the_note_about_extra_calls_survives() -> None:
    long = "word " * 5000
    decision = decide(response(long, (USE_A, USE_B)), max_reason=500)
    assert len(decision.reason) <= 500
    assert "…[truncated: " in decision.reason
    assert decision.reason.endswith("\n[only the first tool call of a reply runs; not run: 'push']")
    refused = decide(response(long, stop="refusal"), max_reason=300)
    assert len(refused.message) <= 300 and refused.message.startswith("the model refused: word")
    with pytest.raises(ConfigError):
        decide(response("x"), max_reason=5)


# --------------------------------------------------------------------------- byte-identical renders

KINDS = st.sampled_from(["ok", "error", "timeout", "denied", "invalid", "interrupted", "none"])
TEXT = st.text(st.characters(codec="utf-8"), max_size=30)
JSONS = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def recorded_steps(draw: st.DrawFn) -> list[Step]:
    kinds = draw(st.lists(KINDS, max_size=12))
    steps = []
    for index, kind in enumerate(kinds):
        args = draw(st.dictionaries(TEXT, JSONS, max_size=3))
        reason = draw(TEXT)
        decision = call(draw(st.sampled_from(["read", "finish", "push"])), args, reason)
        content = draw(JSONS)
        observation = {
            "ok": ok(content, draw(TEXT)),
            "error": obs("tool_error", {"tool": "read", "error": draw(TEXT), "failure": "error"}),
            "timeout": obs("tool_error", {"tool": "read", "error": "t", "failure": "timeout"}),
            "denied": DENIED,
            "invalid": obs("invalid_decision", {"error": draw(TEXT)}, "bad"),
            "interrupted": obs(
                "interrupted", {"previous_status": draw(st.sampled_from(["deciding", "executing"]))}
            ),
            "none": ok(content),
        }[kind]
        if kind == "none":
            decision = Decision(
                kind=draw(st.sampled_from(["no_tool_call", "truncated"])), reason=reason
            )
            observation = INVALID
        steps.append(step(index, decision, observation))
    return steps


def as_stored(s: Step) -> Step:
    """The step as a reader of the database gets it: its JSON written and read back."""
    assert s.decision is not None and s.observation is not None
    return replace(
        s,
        decision=Decision.from_json(from_text(to_text(s.decision.to_json()))),
        observation=Observation.from_json(from_text(to_text(s.observation.to_json()))),
    )


def paused_and_resumed(input: StepInput) -> StepInput:
    """The same record as another process sees it after a pause: everything else differs."""
    run = replace(
        input.run,
        status="RUNNING",
        created_at=T0 - timedelta(days=1),
        started_at=T0 + timedelta(hours=5),
        step_count=len(input.steps) + 1,
        model_calls=41,
        input_tokens=9000,
        estimated_cost_micros=12,
        active_time=timedelta(seconds=3),
    )
    steps = tuple(
        replace(
            as_stored(s),
            started_at=T0 + timedelta(hours=3),
            finished_at=T0 + timedelta(hours=4),
            policy=PolicyDecision.require_approval("remote_mutation", "a person must approve"),
            policy_id="other-policy/2",
            spec_hash="f" * 64,
        )
        for s in input.steps
    )
    approval = Approval(
        "ap1", "r1", "step0000", "remote_mutation", {}, {}, {}, "h", "approved", T0, None, T0, "ops"
    )
    return StepInput(run=run, steps=steps, approvals=(approval,), tools=input.tools, model=object())


@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    recorded_steps(),
    st.integers(min_value=0, max_value=14),
    st.integers(min_value=64, max_value=400),
)
def test_the_same_record_renders_byte_identical_requests(
    steps: list[Step], full_results: int, content_cap: int
) -> None:
    options = RenderOptions(full_results=full_results, content_cap=content_cap)
    original = inp(steps)
    first = request_bytes(messages(original, options))
    assert request_bytes(messages(original, options)) == first
    assert same_renders(original, paused_and_resumed(original), options)
    # What is recorded shows: another goal, or one more settled step.
    assert not same_renders(original, inp(steps, goal="another goal"), options)
    assert not same_renders(original, inp([*steps, step(len(steps), call(), ok(1))]), options)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(recorded_steps(), st.data())
def test_each_request_is_a_prefix_of_the_next_while_no_result_leaves_the_window(
    steps: list[Step], data: st.DataObject
) -> None:
    options = RenderOptions(full_results=len(steps))
    cut = data.draw(st.integers(min_value=0, max_value=len(steps)))
    # Before a pause the step being decided is the last; after it, settled steps follow.
    earlier = messages(inp([*steps[:cut], step(cut, None, None)]), options)
    later = messages(inp(steps), options)
    assert list(later.messages[: len(earlier.messages)]) == list(earlier.messages)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(recorded_steps())
def test_every_render_is_a_well_formed_conversation(steps: list[Step]) -> None:
    request = messages(inp(steps), RenderOptions(content_cap=100, full_results=3))
    roles = [m.role for m in request.messages]
    assert roles == ["user"] + ["assistant", "user"] * ((len(roles) - 1) // 2)
    ids = []
    for said, answered in zip(request.messages[1::2], request.messages[2::2], strict=True):
        uses = [b for b in said.content if isinstance(b, ToolUseBlock)]
        results = [b for b in answered.content if isinstance(b, ToolResultBlock)]
        assert [u.id for u in uses] == [r.tool_use_id for r in results]
        assert all(isinstance(u.input, dict) for u in uses)
        ids += [u.id for u in uses]
        for block in answered.content:
            assert isinstance(block, ToolResultBlock | TextBlock)
            text = block.content if isinstance(block, ToolResultBlock) else block.text
            # The cap bounds the observation's text; a nudge of a sentence or two follows.
            body, _, nudge = text.partition("\n\n")
            assert len(body) <= 100 and len(nudge) <= 250
    assert len(ids) == len(set(ids))


# --------------------------------------------------------------------------- a real run


def drive_model_run(
    path: Path, responses: list[ModelResponse], pause: bool
) -> tuple[ScriptedModel, agentrt.Run]:
    """A model-driven run over a real store; with `pause`, pushes wait for approval and
    the run is approved and resumed by a fresh driver on a fresh open of the file."""
    model = ScriptedModel(responses)
    agent = ModelAgent(RenderOptions())

    async def decide(input: StepInput) -> Decision:
        return await agent.decide(replace(input, model=model))

    def build(store: agentrt.Store, clock: FakeClock, ids: Ids) -> agentrt.Driver:
        tools = [
            RecordingTool("read", SideEffect.READ_ONLY, result={"text": "notes"}),
            RecordingTool("push", SideEffect.REMOTE_MUTATION, result={"pushed": True}),
            RecordingTool("finish", SideEffect.READ_ONLY, terminal=True),
        ]
        policy = (
            agentrt.default_policy()
            if pause
            else agentrt.SideEffectPolicy({kind: PolicyDecision.allow() for kind in SideEffect})
        )
        return agentrt.Driver(
            store=store, agent=decide, policy=policy, tools=tools, now=clock, new_id=ids
        )

    clock, ids = FakeClock(), Ids()
    store = agentrt.open_store(path)
    run = build(store, clock, ids).start_sync("push the notes")
    if pause:
        assert run.status == "WAITING_FOR_APPROVAL"
        (approval,) = store.pending_approvals(run.id)
        agentrt.approve(store, run.id, approval.id, by="ops")
        store.close()
        store = agentrt.open_store(path)
        run = build(store, clock, ids).resume_sync(run.id)
    store.close()
    return model, run


def test_a_paused_and_resumed_run_renders_what_an_unpaused_run_does(tmp_path: Path) -> None:
    responses = [
        response("look", (ToolUseBlock("t1", "read", {"x": 1}),)),
        response("push", (ToolUseBlock("t2", "push", {"x": 2}),)),
        response("", stop="end_turn"),
        response("done", (ToolUseBlock("t3", "finish", {"x": 3}),)),
    ]
    paused, paused_run = drive_model_run(tmp_path / "a.db", responses, pause=True)
    straight, straight_run = drive_model_run(tmp_path / "b.db", responses, pause=False)
    assert paused_run.status == straight_run.status == "COMPLETED"
    assert len(paused.requests) == len(straight.requests) == 4
    assert [request_bytes(r) for r in paused.requests] == [
        request_bytes(r) for r in straight.requests
    ]
    # Each request extends the one before (no result has left the window yet).
    for before, after in zip(paused.requests, paused.requests[1:], strict=False):
        assert list(after.messages[: len(before.messages)]) == list(before.messages)
    last = paused.requests[-1]
    assert isinstance(last.messages[-1].content[0], TextBlock)
    assert "Every reply must call exactly one tool; to finish, call 'finish'." in (
        last.messages[-1].content[0].text
    )
