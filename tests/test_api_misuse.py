"""The mistakes a new user makes building a Driver or a Gate are refused when it is built,
in one sentence saying what to pass instead, before any run is recorded: never an
AttributeError from deep inside the first step, never a run that fails at its first
tool call for a configuration the constructor could have read."""

from __future__ import annotations

from typing import Any

import pytest

import agentrt
from agentrt import ConfigError, Decision, SideEffect
from agentrt.scripted import ScriptedAgent


@agentrt.tool(side_effect=SideEffect.READ_ONLY, timeout=5)
def look(order: str) -> dict[str, Any]:
    """Look up an order."""
    return {"order": order}


def agent() -> ScriptedAgent:
    return ScriptedAgent([Decision.tool_call("look", {"order": "A-1"}), Decision.complete("ok")])


def build(the_store: agentrt.Store, **overrides: Any) -> agentrt.Driver:
    kwargs: dict[str, Any] = {
        "store": the_store,
        "agent": agent(),
        "policy": agentrt.default_policy(),
        "tools": [look],
    }
    kwargs.update(overrides)
    return agentrt.Driver(**kwargs)


def test_a_path_given_as_the_store_is_refused_naming_open_store(store: agentrt.Store) -> None:
    with pytest.raises(ConfigError) as e:
        build(store, store="runs.db")
    assert str(e.value) == (
        "Driver needs a store, such as agentrt.open_store('runs.db'), not the str 'runs.db'"
    )
    with pytest.raises(ConfigError) as e:
        agentrt.Gate(store="runs.db", policy=agentrt.default_policy())  # type: ignore[arg-type]
    assert str(e.value).startswith("Gate needs a store, such as agentrt.open_store(")


def test_the_default_policy_factory_passed_uncalled_is_refused(store: agentrt.Store) -> None:
    with pytest.raises(ConfigError) as e:
        build(store, policy=agentrt.default_policy)
    assert str(e.value) == (
        "policy must be an object with an evaluate(request, view) method; "
        "default_policy is a function: did you mean default_policy()?"
    )
    assert store.list_runs() == []


def test_a_plain_function_as_the_policy_is_refused(store: agentrt.Store) -> None:
    def allow_all(request: Any, view: Any) -> agentrt.PolicyDecision:
        return agentrt.PolicyDecision.allow()

    with pytest.raises(ConfigError) as e:
        build(store, policy=allow_all)
    assert str(e.value).startswith(
        "policy must be an object with an evaluate(request, view) method; allow_all is a function"
    )
    with pytest.raises(ConfigError) as e:
        agentrt.Gate(store=store, policy=allow_all)  # type: ignore[arg-type]
    assert "allow_all is a function" in str(e.value)


def test_a_policy_class_passed_uncalled_is_refused(store: agentrt.Store) -> None:
    with pytest.raises(ConfigError) as e:
        build(store, policy=agentrt.SideEffectPolicy)
    assert str(e.value) == (
        "policy must be an object with an evaluate(request, view) method; "
        "SideEffectPolicy is a class: pass an instance, SideEffectPolicy(...)"
    )


@pytest.mark.parametrize("wrong", ["gpt-4o", [Decision.complete("ok")], 42])
def test_an_agent_that_cannot_decide_is_refused(store: agentrt.Store, wrong: Any) -> None:
    with pytest.raises(ConfigError) as e:
        build(store, agent=wrong)
    assert str(e.value) == (
        "agent must have a decide(input) method or be a function of the step input, "
        f"got {type(wrong).__name__}"
    )
    assert store.list_runs() == []  # not a FAILED run with agent_error for every start


def test_an_agent_class_passed_uncalled_is_refused(store: agentrt.Store) -> None:
    with pytest.raises(ConfigError) as e:
        build(store, agent=ScriptedAgent)
    assert str(e.value) == (
        "agent must have a decide(input) method or be a function of the step input; "
        "ScriptedAgent is a class: pass an instance, ScriptedAgent(...)"
    )


def test_one_tool_not_in_a_list_is_refused_naming_the_list(store: agentrt.Store) -> None:
    with pytest.raises(ConfigError) as e:
        build(store, tools=look)
    assert str(e.value) == "tools must be a list of tools: [look], not the tool itself"


@pytest.mark.parametrize("wrong", ["look", {"look": look}])
def test_tools_not_given_as_a_list_are_refused(store: agentrt.Store, wrong: Any) -> None:
    with pytest.raises(ConfigError) as e:
        build(store, tools=wrong)
    assert str(e.value) == (
        f"tools must be a list of tools (made with @agentrt.tool), got {type(wrong).__name__}"
    )


def test_a_correct_driver_still_runs_with_a_function_agent(store: agentrt.Store) -> None:
    """The accepted forms stay accepted: a function agent, a tuple of tools."""
    driver = build(store, agent=lambda step: Decision.complete("ok"), tools=(look,))
    run = driver.start_sync("g")
    assert (run.status, run.result) == ("COMPLETED", "ok")


def test_an_approval_by_nobody_is_refused_and_nothing_is_decided(store: agentrt.Store) -> None:
    """`by` is who decided, in the record for good: an empty or blank name is refused,
    as the command line refuses an empty --by, not recorded as "someone unrecorded"."""

    @agentrt.tool(side_effect=SideEffect.REMOTE_MUTATION, timeout=5)
    def push_branch(branch: str) -> dict[str, Any]:
        """Push a branch."""
        return {"pushed": branch}

    driver = build(
        store,
        agent=ScriptedAgent([Decision.tool_call("push_branch", {"branch": "x"})]),
        tools=[push_branch],
    )
    run = driver.start_sync("ship")
    (approval,) = store.pending_approvals(run.id)
    for nobody in ("", "   "):
        with pytest.raises(ValueError) as e:
            agentrt.approve(store, run.id, approval.id, by=nobody, shown_hash=approval.hash)
        assert str(e.value) == "by must name who decides (a person or a system), not be blank"
        with pytest.raises(ValueError):
            agentrt.reject(store, run.id, approval.id, by=nobody)
        with pytest.raises(ValueError):
            agentrt.cancel(store, run.id, by=nobody)
    assert store.get_approval(run.id, approval.id).status == "pending"
    assert store.get_run(run.id).status == "WAITING_FOR_APPROVAL"


def test_the_tool_decorator_used_bare_names_the_two_arguments_it_needs() -> None:
    """`@agentrt.tool` without its parentheses: the side effect and the timeout are the
    author's to declare, and the error names them, not "takes 0 positional arguments"."""

    def push_branch(branch: str) -> dict[str, Any]:
        """Push a branch."""
        return {"pushed": branch}

    with pytest.raises(TypeError) as e:
        agentrt.tool(push_branch)  # type: ignore[call-arg]
    assert str(e.value) == (
        "tool() missing 2 required keyword-only arguments: 'side_effect' and 'timeout'"
    )
    with pytest.raises(ConfigError) as e:
        agentrt.tool(push_branch, side_effect="read_only", timeout=5)  # type: ignore[arg-type]
    assert str(e.value) == (
        "agentrt.tool takes no positional argument: write"
        " @agentrt.tool(side_effect=..., timeout=...) above push_branch"
    )


@pytest.mark.parametrize(
    ("wrong", "got"),
    [
        (Decision.complete("ok"), "one Decision: put it in a list, [Decision...]"),
        ("complete", "str"),
        ({"kind": "complete"}, "dict"),
        (3, "int"),
    ],
)
def test_a_script_that_is_not_a_list_of_decisions_is_refused(wrong: Any, got: str) -> None:
    with pytest.raises(ConfigError) as e:
        ScriptedAgent(wrong)
    assert str(e.value) == f"ScriptedAgent plays a list of Decisions, got {got}"


def test_a_sync_twin_inside_a_running_event_loop_says_to_await_and_records_nothing(
    store: agentrt.Store, recwarn: pytest.WarningsRecorder
) -> None:
    import asyncio
    import gc

    driver = build(store)

    async def inside_a_loop() -> None:
        driver.start_sync("g")

    with pytest.raises(RuntimeError) as e:
        asyncio.run(inside_a_loop())
    assert str(e.value) == (
        "a _sync method was called inside a running event loop; await the async method instead"
    )
    gc.collect()
    assert [str(w.message) for w in recwarn.list if "never awaited" in str(w.message)] == []
    assert store.list_runs() == []


@pytest.mark.parametrize(
    ("owner", "said"),
    [
        ("w" * 1025, "lease_owner must be at most 1,024 characters, got 1,025"),
        ("shop\ud800", "lease_owner must be text UTF-8 can hold (it has a lone surrogate)"),
    ],
    ids=["too-long", "surrogate"],
)
def test_a_lease_owner_no_record_can_hold_whole_is_refused_when_built(
    store: agentrt.Store, owner: str, said: str
) -> None:
    # Before: a 100,000-character owner was written into every lease, read whole by every
    # view; a lone surrogate failed the run's first write, after the Gate or Driver was made.
    for build in (
        lambda: agentrt.Gate(store=store, policy=agentrt.default_policy(), lease_owner=owner),
        lambda: agentrt.Driver(
            store=store,
            agent=ScriptedAgent([Decision.complete("done")]),
            policy=agentrt.default_policy(),
            lease_owner=owner,
        ),
    ):
        with pytest.raises(ConfigError) as refused:
            build()
        assert str(refused.value) == said
    assert list(store.list_runs()) == []
    # The longest allowed still runs.
    gate = agentrt.Gate(store=store, policy=agentrt.default_policy(), lease_owner="w" * 1024)
    session = gate.begin_sync("a long owner")
    assert store.lease(session.run.id).owner.startswith("w" * 1024 + "/")
    session.close_sync()
