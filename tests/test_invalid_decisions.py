"""Whatever an agent returns is recorded and, when it is not a usable Decision,
becomes `invalid_decision`: the loop goes on under its limits, and nothing the
value does while it is read (a hostile repr, deep nesting, a misbehaving
subclass, a huge int) escapes the driver or leaves the run RUNNING.

Every test that takes a store takes `any_store` and runs on SQLite and on PostgreSQL
(issue 21 item 5; decision 0105): what is recorded is the same record on either."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import agentrt
from agentrt import Decision, LimitExceeded, Limits, SideEffect, Step, StepInput
from agentrt._canonical import to_text
from agentrt._decisions import RecordedDecision, record, validate
from conftest import FakeClock, Ids, RecordingTool, event_types


def first_then_complete(first: Any) -> Callable[[StepInput], Any]:
    """An agent answering `first` at step 0 and completing at step 1."""

    def decide(input: StepInput) -> Any:
        return first if input.steps[-1].index == 0 else Decision.complete("done")

    return decide


def drive(store: agentrt.Store, agent: Any, limits: Limits | None = None) -> agentrt.Run:
    tool = RecordingTool("read", SideEffect.READ_ONLY)
    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("goal", limits=limits)
    assert tool.calls == []
    return run


def decided_payload(store: agentrt.Store, run_id: str) -> Any:
    (decided,) = [e for e in store.list_events(run_id=run_id) if e.type == "step.decided"][:1]
    return decided.payload


def assert_first_step_invalid(store: agentrt.Store, run: agentrt.Run, error: str) -> Decision:
    """The run went on and completed; step 0 recorded the value and failed invalid_decision."""
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    first, second = store.list_steps(run.id)
    assert first.status == "failed"
    assert first.observation is not None
    assert first.observation.kind == "invalid_decision"
    assert first.observation.content == {"error": error}
    assert second.status == "done"
    assert event_types(store, run.id)[:6] == [
        "run.created",
        "run.started",
        "step.started",
        "step.decided",
        "step.failed",
        "step.started",
    ]
    assert first.decision is not None
    assert decided_payload(store, run.id) == first.decision.to_json()
    assert store.lease(run.id).owner == ""
    return first.decision


# -- None and other non-Decision values -------------------------------------------------


def test_a_decide_that_returns_none_is_recorded_as_invalid_decision(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    run = drive(store, first_then_complete(None))
    decision = assert_first_step_invalid(store, run, "the agent returned NoneType, not a Decision")
    assert decision == Decision(kind="", invalid_result="None")


def test_an_async_decide_that_forgets_its_return_is_recorded_as_invalid_decision(
    any_store: agentrt.Store,
) -> None:
    store = any_store

    async def decide(input: StepInput) -> Any:
        if input.steps[-1].index == 1:
            return Decision.complete("done")
        Decision.tool_call("read", {"x": 1})  # the forgotten `return`

    run = drive(store, decide)
    assert_first_step_invalid(store, run, "the agent returned NoneType, not a Decision")


def test_an_agent_that_always_returns_none_ends_under_its_failure_limit(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    run = drive(store, lambda input: None, Limits(max_consecutive_tool_failures=2))
    assert (run.status, run.reason) == ("FAILED", "repeated_tool_failures")
    steps = store.list_steps(run.id)
    assert [s.status for s in steps] == ["failed", "failed"]
    assert all(s.decision == Decision(kind="", invalid_result="None") for s in steps)


def test_other_non_decision_values_are_recorded_as_text(any_store: agentrt.Store) -> None:
    store = any_store
    run = drive(store, first_then_complete({"kind": "complete"}))
    decision = assert_first_step_invalid(store, run, "the agent returned dict, not a Decision")
    assert decision.invalid_result == "{'kind': 'complete'}"


# -- values that misbehave while they are read -----------------------------------------------


class HostileRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr refuses")

    __str__ = __repr__


class HostileStr(str):
    """A str subclass whose comparisons, hash and conversions all raise."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq refuses")

    def __hash__(self) -> int:
        raise RuntimeError("hash refuses")

    def __str__(self) -> str:
        raise RuntimeError("str refuses")

    def __repr__(self) -> str:
        raise RuntimeError("repr refuses")

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        raise RuntimeError("encode refuses")


class ExplodingDict(dict[str, Any]):
    """A dict subclass whose iteration raises."""

    def items(self) -> Any:
        raise RuntimeError("items refuses")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iter refuses")

    def __repr__(self) -> str:
        raise RuntimeError("repr refuses")


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_returned_value_whose_repr_raises_becomes_invalid_decision(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    run = drive(store, first_then_complete(HostileRepr()))
    decision = assert_first_step_invalid(
        store, run, "the agent returned HostileRepr, not a Decision"
    )
    assert decision.invalid_result == "<HostileRepr object; repr raised RuntimeError>"


def test_args_whose_repr_raises_become_invalid_decision(any_store: agentrt.Store) -> None:
    store = any_store
    run = drive(store, first_then_complete(Decision.tool_call("read", HostileRepr())))  # type: ignore[arg-type]
    decision = assert_first_step_invalid(
        store,
        run,
        "args are not usable JSON: test_invalid_decisions.HostileRepr is not a JSON value at $",
    )
    assert (decision.kind, decision.tool, decision.args) == ("tool_call", "read", None)
    assert decision.invalid_args == "<HostileRepr object; repr raised RuntimeError>"


def test_a_decision_nested_100000_deep_becomes_invalid_decision(any_store: agentrt.Store) -> None:
    # Deeper than any supported interpreter's repr goes (3.13's goes past 5,000 levels).
    store = any_store
    run = drive(store, first_then_complete(Decision.tool_call("read", {"x": nested(100_000)})))
    first = store.list_steps(run.id)[0]
    assert first.observation is not None
    error = first.observation.content["error"]
    assert error.startswith("args are not usable JSON: nesting deeper than 256 at $.x[0][0]")
    decision = assert_first_step_invalid(store, run, error)
    assert decision.args is None
    assert decision.invalid_args is not None
    assert decision.invalid_args == (
        "{'x': [[[[[[[[...]]]]]]]]} (shortened: repr raised RecursionError)"
    )


def test_a_bare_value_nested_100000_deep_becomes_invalid_decision(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    run = drive(store, first_then_complete(nested(100_000)))
    decision = assert_first_step_invalid(store, run, "the agent returned list, not a Decision")
    assert decision.invalid_result == (
        "[[[[[[[[[...]]]]]]]]] (shortened: repr raised RecursionError)"
    )


@pytest.mark.parametrize(
    ("tool", "kept"),
    [
        (5, "5"),
        (["read"], "['read']"),
        (None, "None"),
        (b"read", "read"),
        (HostileRepr(), "<HostileRepr object; repr raised RuntimeError>"),
    ],
    ids=["int", "list", "none", "bytes", "hostile-repr"],
)
def test_a_tool_name_that_is_not_a_string_becomes_invalid_decision(
    any_store: agentrt.Store, tool: Any, kept: str
) -> None:
    store = any_store
    bad = Decision(kind="tool_call", tool=tool, args={"x": 1})
    run = drive(store, first_then_complete(bad))
    name = type(tool).__name__
    decision = assert_first_step_invalid(store, run, f"decision.tool must be a string, got {name}")
    assert (decision.kind, decision.tool, decision.args) == ("tool_call", kept, {"x": 1})


def read_as_plain(store: agentrt.Store, decision: Decision) -> tuple[Step, RecordingTool]:
    """Drive `decision` (a `read` of {"x": 1}, however its values are dressed), then a
    completion; check it ran as plain values; its first step and the tool."""
    tool = RecordingTool("read", SideEffect.READ_ONLY)
    driver = agentrt.Driver(
        store=store,
        agent=first_then_complete(decision),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("goal")
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    first = store.list_steps(run.id)[0]
    assert first.status == "done"
    assert first.decision == Decision(kind="tool_call", tool="read", args={"x": 1})
    return first, tool


def test_a_str_subclass_whose_methods_raise_is_recorded_as_plain_text(
    any_store: agentrt.Store,
) -> None:
    # Its text is usable; none of its own methods is ever called, so it is valid.
    decision = Decision(kind=HostileStr("tool_call"), tool=HostileStr("read"), args={"x": 1})
    first, tool = read_as_plain(any_store, decision)
    assert first.decision is not None
    assert [type(first.decision.kind), type(first.decision.tool)] == [str, str]
    assert [c.args for c in tool.calls] == [{"x": 1}]


def test_args_whose_own_iteration_raises_are_read_by_the_base_type(
    any_store: agentrt.Store,
) -> None:
    # As a str subclass's: none of its own methods is asked (decision 0138); what the
    # dict holds is the args, recorded, judged and passed as plain values.
    _, tool = read_as_plain(any_store, Decision.tool_call("read", ExplodingDict(x=1)))
    assert [(c.args, type(c.args)) for c in tool.calls] == [({"x": 1}, dict)]


class ArmedKey(str):
    """A str subclass usable as a dict key until armed; then its hash and eq raise."""

    armed = False

    def __hash__(self) -> int:
        if ArmedKey.armed:
            raise RuntimeError("hash refuses")
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        if ArmedKey.armed:
            raise RuntimeError("eq refuses")
        return str.__eq__(self, other)

    def isascii(self) -> bool:
        raise RuntimeError("isascii refuses")


@pytest.fixture
def armed_key() -> Iterator[type[ArmedKey]]:
    ArmedKey.armed = False
    yield ArmedKey
    ArmedKey.armed = False


def test_an_args_key_whose_methods_raise_becomes_invalid_decision(
    any_store: agentrt.Store, armed_key: type[ArmedKey]
) -> None:
    store = any_store
    args = {armed_key("x"): 1}
    armed_key.armed = True
    run = drive(store, first_then_complete(Decision.tool_call("read", args)))
    decision = assert_first_step_invalid(
        store, run, "args are not usable JSON: not usable JSON: RuntimeError: isascii refuses"
    )
    assert decision.args is None
    assert decision.invalid_args == "{'x': 1}"


def test_a_huge_int_becomes_invalid_decision_without_printing_it(any_store: agentrt.Store) -> None:
    store = any_store
    huge = 10**20_000
    run = drive(store, first_then_complete(Decision.complete(huge)))
    decision = assert_first_step_invalid(
        store, run, "result is not usable JSON: integer of more than 10000 characters at $"
    )
    assert decision.invalid_result == (f"<int of {huge.bit_length()} bits; repr raised ValueError>")


def test_a_decision_subclass_whose_fields_raise_becomes_invalid_decision(
    any_store: agentrt.Store,
) -> None:
    store = any_store

    class Sneaky(Decision):
        def __getattribute__(self, name: str) -> Any:
            if name == "args":
                raise RuntimeError("args refuse")
            return super().__getattribute__(name)

        def __repr__(self) -> str:
            return "Sneaky()"

    run = drive(store, first_then_complete(Sneaky(kind="tool_call", tool="read")))
    decision = assert_first_step_invalid(
        store, run, "the decision could not be recorded: RuntimeError: args refuse"
    )
    assert decision == Decision(kind="", invalid_result="Sneaky()")


# -- the agent's exceptions -------------------------------------------------------------------


def test_an_agent_exception_whose_str_raises_ends_the_run_as_agent_error(
    any_store: agentrt.Store,
) -> None:
    store = any_store

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    def decide(input: StepInput) -> Decision:
        raise Unprintable()

    run = drive(store, decide)
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert run.reason_detail == "Unprintable: <its message could not be read: RuntimeError>"
    (step,) = store.list_steps(run.id)
    assert step.status == "failed"


def test_a_limit_exceeded_naming_no_model_limit_is_an_agent_error(any_store: agentrt.Store) -> None:
    store = any_store

    def decide(input: StepInput) -> Decision:
        raise LimitExceeded("goal_completed", "not really")

    run = drive(store, decide)
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert run.reason_detail == "LimitExceeded: goal_completed: not really"


def test_a_limit_exceeded_whose_fields_raise_is_an_agent_error(any_store: agentrt.Store) -> None:
    store = any_store

    class Hostile(LimitExceeded):
        def __getattribute__(self, name: str) -> Any:
            if name in ("reason", "detail"):
                raise RuntimeError(f"{name} refuses")
            return super().__getattribute__(name)

    def decide(input: StepInput) -> Decision:
        raise Hostile("limit_tokens", "spent")

    run = drive(store, decide)
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert run.reason_detail == "Hostile: limit_tokens: spent"


def test_an_agent_whose_decide_attribute_raises_ends_the_run_as_agent_error(
    any_store: agentrt.Store,
) -> None:
    store = any_store

    class Broken:
        armed = False  # armed once the driver is built, whatever its constructor checks

        @property
        def decide(self) -> Any:
            if self.armed:
                raise RuntimeError("no decide today")
            return lambda input: Decision.complete("never")

    broken = Broken()
    driver = agentrt.Driver(
        store=store, agent=broken, policy=agentrt.default_policy(), now=FakeClock(), new_id=Ids()
    )
    broken.armed = True
    run = driver.start_sync("goal")
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert run.reason_detail == "RuntimeError: no decide today"
    assert [s.status for s in store.list_steps(run.id)] == ["failed"]


# -- record and validate never raise ------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        HostileRepr(),
        nested(5000),
        ExplodingDict(a=1),
        10**20_000,
        Decision(kind=HostileStr("x"), tool=HostileRepr()),  # type: ignore[arg-type]
        Decision.tool_call("read", {"k": HostileRepr()}),
        Decision.complete(nested(5000)),
        Decision(kind="tool_call", tool="read", invalid_args=HostileRepr()),  # type: ignore[arg-type]
    ],
    ids=[
        "none",
        "hostile-repr",
        "nested",
        "exploding-dict",
        "huge-int",
        "hostile-fields",
        "hostile-arg",
        "nested-result",
        "hostile-invalid-args",
    ],
)
def test_record_and_validate_never_raise_and_store_plain_values(value: Any) -> None:
    recorded = record(value)
    assert isinstance(recorded, RecordedDecision)
    assert recorded.problems
    assert type(recorded.decision) is Decision
    error = validate(recorded, {})
    assert isinstance(error, str) and error
    assert to_text(recorded.decision.to_json()) == recorded.text


def test_the_tool_receives_the_args_as_recorded_even_when_the_agents_object_changes(
    any_store: agentrt.Store,
) -> None:
    """Validation, the policy and the tool see the recorded values, never the agent's
    object, which here answers differently every time it is read."""
    store = any_store

    class Shifty(dict[str, Any]):
        reads = 0

        def items(self) -> Any:
            Shifty.reads += 1
            return dict.items({"x": Shifty.reads})

    tool = RecordingTool("read", SideEffect.READ_ONLY)
    driver = agentrt.Driver(
        store=store,
        agent=first_then_complete(Decision.tool_call("read", Shifty(x=0))),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("goal")
    assert run.status == "COMPLETED"
    first = store.list_steps(run.id)[0]
    assert first.decision is not None
    recorded = first.decision.args
    started = [e for e in store.list_events(run_id=run.id) if e.type == "step.tool_started"]
    assert [e.payload["args"] for e in started] == [recorded]
    assert [c.args for c in tool.calls] == [recorded]
    assert type(tool.calls[0].args) is dict
