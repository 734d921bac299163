"""The short path of each adapter, as docs/adapters.md prints it (issue 18, item 7).

Each adapter's section opens with a short program marked
`<!-- short-path: NAME -->`. The tests here read that block from the docs, check
the line counts the docs state (the block's lines, and how many of them a
program without agentrt would not have), and run it as printed, in a fresh
directory, with a real framework on its own test model and a person deciding
from another thread through `agentrt.approve` / `agentrt.reject`. The
omissions the short path cannot make are refused before anything is
recorded, or end the run honestly; never an orphaned waiting run.
"""

from __future__ import annotations

import difflib
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

import agentrt

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "adapters.md"


def short_path(name: str) -> tuple[str, int, int]:
    """The marked block of `name`: its code, and the (lines, added or changed) the docs state."""
    text = DOC.read_text()
    marker = f"<!-- short-path: {name} -->"
    assert text.count(marker) == 1, f"docs/adapters.md marks the {name} short path once"
    before, after = text.split(marker)
    code = re.match(r"\s*```python\n(.*?)\n```", after, re.S)
    assert code is not None, "the marker is followed by a python block"
    claim = re.findall(
        r"\*\*The short path: (\d+) lines\*\*.*?(\d+) lines are added or changed",
        before[-1200:],
        re.S,
    )
    assert claim, f"the {name} section states its line counts just above the block"
    lines, changed = claim[-1]
    return code.group(1), int(lines), int(changed)


def counted(code: str) -> list[str]:
    return [line for line in code.splitlines() if line.strip()]


def added_or_changed(plain: str, code: str) -> int:
    """Lines of `code` that are not lines of the program `plain` (added or changed)."""
    matcher = difflib.SequenceMatcher(a=counted(plain), b=counted(code), autojunk=False)
    kept = sum(block.size for block in matcher.get_matching_blocks())
    return len(counted(code)) - kept


@contextmanager
def a_person(
    db: Path, decide: Callable[[agentrt.Store, agentrt.Approval], Any], times: int = 1
) -> Iterator[list[Any]]:
    """A person at another terminal: waits for a pending approval in `db` and decides it,
    `times` times (each a new approval).

    Looks every 20 ms (a look, not a timing assumption: the program under test
    waits as long as needed); gives up only after 120 s so a broken program
    fails the test instead of hanging it.
    """
    decided: list[Any] = []
    stop = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            if db.exists():
                store = agentrt.open_store(db)
                try:
                    pending = [
                        a for run in store.list_runs() for a in store.pending_approvals(run.id)
                    ]
                    if pending:
                        decided.append(decide(store, pending[0]))
                        if len(decided) == times:
                            return
                finally:
                    store.close()
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield decided
    finally:
        stop.set()
        thread.join(timeout=130)


def approve(store: agentrt.Store, approval: agentrt.Approval) -> agentrt.Approval:
    return agentrt.approve(
        store, approval.run_id, approval.id, by="alice", note="checked", shown_hash=approval.hash
    )


def reject(store: agentrt.Store, approval: agentrt.Approval) -> agentrt.Approval:
    return agentrt.reject(
        store, approval.run_id, approval.id, by="alice", note="not today", shown_hash=approval.hash
    )


def only_run(db: Path) -> tuple[agentrt.Store, agentrt.Run]:
    store = agentrt.open_store(db)
    (run,) = store.list_runs()
    return store, run


# -- Pydantic AI ------------------------------------------------------------------

PYDANTIC_PLAIN = """
from pydantic_ai import Agent

agent = Agent(model, tools=[list_branches, push_branch])
result = agent.run_sync("publish the login branch")
"""


def pydantic_world(workdir: Path, heard: list[str]) -> dict[str, Any]:
    """What the snippet takes as the user's own: a scripted model and two tools acting on a file."""
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import (
        AgentInfo,
        DeltaToolCall,
        DeltaToolCalls,
        FunctionModel,
    )

    effects = workdir / "effects.log"

    def list_branches() -> list[str]:
        """List the branches."""
        return ["main", "feature/login"]

    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        with effects.open("a") as f:
            f.write(f"push_branch {branch}\n")
        return f"pushed {branch}"

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        heard.extend(
            f"{type(p).__name__}:{getattr(p, 'content', '')}"
            for p in getattr(messages[-1], "parts", [])
            if type(p).__name__ in ("ToolReturnPart", "RetryPromptPart")
        )
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n == 0:
            return ModelResponse(parts=[ToolCallPart("list_branches", {}, tool_call_id="c1")])
        if n == 1:
            call = ToolCallPart("push_branch", {"branch": "feature/login"}, tool_call_id="c2")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("published")])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        for index, part in enumerate(answer(messages, info).parts):
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                args = part.args_as_json_str()
                yield {index: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}

    stream_calls: type[DeltaToolCalls] | None = None  # the stream's chunks: text or DeltaToolCalls
    del stream_calls
    return {
        "model": FunctionModel(answer, stream_function=stream),
        "list_branches": list_branches,
        "push_branch": push_branch,
    }


def test_the_pydantic_ai_short_path_is_as_long_as_the_docs_say() -> None:
    code, lines, changed = short_path("pydantic-ai")
    assert len(counted(code)) == lines
    assert added_or_changed(PYDANTIC_PLAIN, code) == changed


def test_the_pydantic_ai_short_path_runs_as_printed_and_waits_for_the_person_inside_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, _ = short_path("pydantic-ai")
    monkeypatch.chdir(tmp_path)
    heard: list[str] = []
    world = pydantic_world(tmp_path, heard)
    with a_person(tmp_path / "runs.db", approve) as decided:
        exec(compile(code, "docs/adapters.md (pydantic-ai short path)", "exec"), world)
    assert world["result"].output == "published"
    assert (tmp_path / "effects.log").read_text() == "push_branch feature/login\n"
    (approval,) = decided
    assert (approval.status, approval.decided_by) == ("approved", "alice")
    store, run = only_run(tmp_path / "runs.db")
    assert (run.status, run.reason, run.result) == ("COMPLETED", "goal_completed", "published")
    assert [(s.decision.tool or s.decision.kind, s.status) for s in store.list_steps(run.id)] == [
        ("list_branches", "done"),
        ("push_branch", "done"),
        ("complete", "done"),
    ]
    assert heard[-1] == "ToolReturnPart:pushed feature/login"
    assert store.lease(run.id).owner == ""
    assert store.verify_events().intact


def test_a_rejection_while_the_pydantic_ai_short_path_waits_tells_the_model_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, _ = short_path("pydantic-ai")
    monkeypatch.chdir(tmp_path)
    heard: list[str] = []
    world = pydantic_world(tmp_path, heard)
    with a_person(tmp_path / "runs.db", reject) as decided:
        exec(compile(code, "docs/adapters.md (pydantic-ai short path)", "exec"), world)
    assert world["result"].output == "published"  # the model's answer, after it was told
    assert not (tmp_path / "effects.log").exists()
    (approval,) = decided
    store, run = only_run(tmp_path / "runs.db")
    assert (run.status, run.reason, run.result) == ("CANCELLED", "approval_rejected", None)
    assert heard[-1] == f"ToolReturnPart:not run: {agentrt.adapters.ended_message(run)}"
    assert approval.status == "rejected"
    assert [(s.decision.tool or s.decision.kind, s.status) for s in store.list_steps(run.id)] == [
        ("list_branches", "done"),
        ("push_branch", "failed"),
    ]


def test_a_rejection_before_the_pydantic_ai_call_looks_at_its_approval_tells_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The person rejects in the moment after the pause committed and before the waiting call
    reads its approval (under load the watcher once landed there, and the call tried to
    attach to the cancelled run): the model is told the run ended, as after a wait, and the
    push never runs. The moment is made exact by rejecting as the call lets go of the run."""
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    from agentrt.adapters.pydantic_ai._run import FrameworkRun

    code, _, _ = short_path("pydantic-ai")
    monkeypatch.chdir(tmp_path)
    heard: list[str] = []
    world = pydantic_world(tmp_path, heard)
    db = tmp_path / "runs.db"
    let_go = FrameworkRun._let_go
    decided: list[agentrt.Approval] = []

    async def let_go_then_a_quick_person(self: FrameworkRun) -> None:
        await let_go(self)
        elsewhere = agentrt.open_store(db)
        try:
            pending = elsewhere.pending_approvals(self.run_id)
            if pending and not decided:
                decided.append(reject(elsewhere, pending[0]))
        finally:
            elsewhere.close()

    monkeypatch.setattr(FrameworkRun, "_let_go", let_go_then_a_quick_person)
    exec(compile(code, "docs/adapters.md (pydantic-ai short path)", "exec"), world)
    assert world["result"].output == "published"  # the model's answer, after it was told
    assert not (tmp_path / "effects.log").exists()
    assert [a.status for a in decided] == ["rejected"]
    store, run = only_run(db)
    assert (run.status, run.reason, run.result) == ("CANCELLED", "approval_rejected", None)
    assert heard[-1] == f"ToolReturnPart:not run: {agentrt.adapters.ended_message(run)}"
    assert [(s.decision.tool or s.decision.kind, s.status) for s in store.list_steps(run.id)] == [
        ("list_branches", "done"),
        ("push_branch", "failed"),
    ]


def test_a_pydantic_ai_agent_without_deferred_tool_requests_cancels_its_waiting_run_at_once(
    tmp_path: Path,
) -> None:
    """Leaving out `DeferredToolRequests` (and not waiting): Pydantic AI's `UserError`, and the
    agentrt run ends CANCELLED with a note, right as the error is raised (no orphaned WAITING)."""
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import UserError

    from agentrt.adapters import Classification
    from agentrt.adapters.pydantic_ai import AgentrtGate

    world = pydantic_world(tmp_path, [])
    store = agentrt.open_store(tmp_path / "runs.db")
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={
            "list_branches": Classification("read_only", timeout=5),
            "push_branch": Classification("remote_mutation", timeout=30),
        },
    )
    agent = Agent(
        world["model"], tools=[world["list_branches"], world["push_branch"]], capabilities=[gate]
    )
    meta = gate.run_metadata()
    run_id = meta["agentrt_run_id"]
    with pytest.raises(UserError) as raised:
        agent.run_sync("publish the login branch", metadata=meta)
    run = store.get_run(run_id)
    assert (run.status, run.reason) == ("CANCELLED", "operator_cancelled")
    assert not (tmp_path / "effects.log").exists()
    assert raised.value.__notes__ == [
        f"agentrt cancelled run {run_id}: a call waited for a person, but this framework run "
        "cannot stop for one (its output types do not include DeferredToolRequests), so nothing "
        "could carry out the decision; the call did not run. Build the agent with "
        "output_type=[str, DeferredToolRequests] and continue with approved(...), or give "
        "AgentrtGate wait_for_person=True to wait for the person inside the run"
    ]
    assert store.pending_approvals(run_id) == []
    assert store.lease(run_id).owner == ""
    # The same through run_stream_sync used without `with`: ended as the error is raised.
    meta = gate.run_metadata()
    with pytest.raises(UserError):
        agent.run_stream_sync("publish the login branch", metadata=meta).get_output()
    run = store.get_run(meta["agentrt_run_id"])
    assert (run.status, run.reason) == ("CANCELLED", "operator_cancelled")
    assert not (tmp_path / "effects.log").exists()


@pytest.mark.parametrize("value", [0, -1, 3601, True, "1", float("nan")])
def test_the_pydantic_ai_gate_refuses_a_poll_interval_that_is_not_a_sane_number_of_seconds(
    tmp_path: Path, value: Any
) -> None:
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    from agentrt.adapters.pydantic_ai import AgentrtGate

    with pytest.raises(agentrt.ConfigError, match="poll_interval must be a number of seconds"):
        AgentrtGate(
            store=agentrt.open_store(tmp_path / "runs.db"),
            policy=agentrt.default_policy(),
            classifications={},
            wait_for_person=True,
            poll_interval=value,
        )


# -- OpenAI Agents SDK --------------------------------------------------------------

AGENTS_PLAIN = """
from agents import Agent, Runner

agent = Agent(name="publisher", model=model, tools=[list_branches, push_branch])
result = Runner.run_sync(agent, "publish the login branch")
"""


def agents_world(workdir: Path) -> dict[str, Any]:
    """The user's own: the SDK's scripted model and two function tools acting on a file."""
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")
    from agents import function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    set_tracing_disabled(True)
    effects = workdir / "effects.log"

    @function_tool
    def list_branches() -> list[str]:
        """List the branches."""
        return ["main", "feature/login"]

    @function_tool
    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        with effects.open("a") as f:
            f.write(f"push_branch {branch}\n")
        return f"pushed {branch}"

    model = ScriptedModel(
        [
            [function_call("list_branches", {}, call_id="c1")],
            [function_call("push_branch", {"branch": "feature/login"}, call_id="c2")],
            [assistant_message("published")],
        ]
    )
    return {"model": model, "list_branches": list_branches, "push_branch": push_branch}


def test_the_openai_agents_short_path_is_as_long_as_the_docs_say() -> None:
    code, lines, changed = short_path("openai-agents")
    assert len(counted(code)) == lines
    assert added_or_changed(AGENTS_PLAIN, code) == changed


def test_the_openai_agents_short_path_runs_as_printed_and_waits_for_the_person(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, _ = short_path("openai-agents")
    monkeypatch.chdir(tmp_path)
    world = agents_world(tmp_path)
    with a_person(tmp_path / "runs.db", approve) as decided:
        exec(compile(code, "docs/adapters.md (openai-agents short path)", "exec"), world)
    result = world["result"]
    assert (result.final_output, result.interruptions) == ("published", [])
    assert (tmp_path / "effects.log").read_text() == "push_branch feature/login\n"
    (approval,) = decided
    assert (approval.status, approval.decided_by) == ("approved", "alice")
    store, run = only_run(tmp_path / "runs.db")
    assert (run.status, run.reason, run.result) == ("COMPLETED", "goal_completed", "published")
    assert [(s.decision.tool or s.decision.kind, s.status) for s in store.list_steps(run.id)] == [
        ("list_branches", "done"),
        ("push_branch", "done"),
        ("complete", "done"),
    ]
    assert store.lease(run.id).owner == ""
    assert store.verify_events().intact


def test_a_rejection_while_the_openai_agents_short_path_waits_tells_the_model_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, _ = short_path("openai-agents")
    monkeypatch.chdir(tmp_path)
    world = agents_world(tmp_path)
    with a_person(tmp_path / "runs.db", reject) as decided:
        exec(compile(code, "docs/adapters.md (openai-agents short path)", "exec"), world)
    result = world["result"]
    assert (result.final_output, result.interruptions) == ("published", [])
    assert not (tmp_path / "effects.log").exists()
    (approval,) = decided
    assert approval.status == "rejected"
    store, run = only_run(tmp_path / "runs.db")
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    assert [(s.decision.tool or s.decision.kind, s.status) for s in store.list_steps(run.id)] == [
        ("list_branches", "done"),
        ("push_branch", "failed"),
    ]
    told = [
        str(item.output) for item in result.new_items if type(item).__name__ == "ToolCallOutputItem"
    ]
    assert told == ["['main', 'feature/login']", "policy_denied: rejected by alice: not today"]


def test_an_openai_agents_approval_that_expires_while_waiting_ends_the_run_and_runs_nothing(
    tmp_path: Path,
) -> None:
    """Nobody decides before the approval's `expires_at`: the wait ends, the expiry is
    recorded (CANCELLED, approval_expired), the model is told, and the push never runs."""
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")
    from datetime import UTC, datetime, timedelta

    from agentrt.adapters.openai_agents import Classification, gate_agent

    world = agents_world(tmp_path)
    start = datetime(2026, 12, 1, tzinfo=UTC)
    ticks = iter(range(1_000_000))

    def clock() -> datetime:  # one minute per reading: the hour of the approval passes
        return start + timedelta(minutes=next(ticks))

    store = agentrt.open_store(tmp_path / "runs.db")
    from agents import Agent

    agent = Agent(
        name="publisher", model=world["model"], tools=[world["list_branches"], world["push_branch"]]
    )
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={
            "list_branches": Classification("read_only", timeout=5),
            "push_branch": Classification("remote_mutation", timeout=30),
        },
        limits=agentrt.Limits(approval_ttl=timedelta(hours=1)),
        now=clock,
    )
    run = gated.new_run()
    result = run.run_agent_sync("publish", wait_for_person=True, poll_interval=0.01)
    assert result.final_output == "published"
    assert not (tmp_path / "effects.log").exists()
    ended = store.get_run(run.run_id)
    assert (ended.status, ended.reason) == ("CANCELLED", "approval_expired")
    assert [a.status for a in store.list_approvals(run.run_id)] == ["expired"]


@pytest.mark.parametrize("value", [0, -1, 3601, True, "1", float("nan")])
def test_run_agent_refuses_a_poll_interval_that_is_not_a_sane_number_of_seconds(
    tmp_path: Path, value: Any
) -> None:
    store, gated = publisher_gated(tmp_path)
    with pytest.raises(agentrt.ConfigError, match="poll_interval must be a number of seconds"):
        gated.new_run().run_agent_sync("publish", wait_for_person=True, poll_interval=value)
    assert store.list_runs() == []


# -- LangGraph ----------------------------------------------------------------------

LANGGRAPH_PLAIN = """
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

builder = StateGraph(MessagesState)
builder.add_node("agent", call_model)
builder.add_node("tools", ToolNode([list_branches, push_branch]))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
graph = builder.compile(checkpointer=InMemorySaver())
config = {"configurable": {"thread_id": "publish-login"}}
state = graph.invoke({"messages": [("user", "publish the login branch")]}, config)
"""


def langgraph_world(workdir: Path) -> dict[str, Any]:
    """The user's own: a model node on LangChain's fake chat model, and two tools."""
    pytest.importorskip("langgraph", reason="needs agentrt[langgraph]")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    effects = workdir / "effects.log"

    @tool
    def list_branches() -> list[str]:
        """List the branches."""
        return ["main", "feature/login"]

    @tool
    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        with effects.open("a") as f:
            f.write(f"push_branch {branch}\n")
        return f"pushed {branch}"

    script = [
        AIMessage("", tool_calls=[{"name": "list_branches", "args": {}, "id": "c1"}]),
        AIMessage(
            "",
            tool_calls=[{"name": "push_branch", "args": {"branch": "feature/login"}, "id": "c2"}],
        ),
        AIMessage("published"),
    ]

    def call_model(state: dict[str, Any]) -> dict[str, Any]:
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        model = GenericFakeChatModel(messages=iter([script[turn]]))
        return {"messages": [model.invoke(state["messages"])]}

    return {"call_model": call_model, "list_branches": list_branches, "push_branch": push_branch}


def test_the_langgraph_short_path_is_as_long_as_the_docs_say() -> None:
    code, lines, changed = short_path("langgraph")
    assert len(counted(code)) == lines
    assert added_or_changed(LANGGRAPH_PLAIN, code) == changed


def test_the_langgraph_short_path_runs_as_printed_waits_for_the_person_and_ends_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, _ = short_path("langgraph")
    monkeypatch.chdir(tmp_path)
    world = langgraph_world(tmp_path)
    with a_person(tmp_path / "runs.db", approve) as decided:
        exec(compile(code, "docs/adapters.md (langgraph short path)", "exec"), world)
    messages = world["state"]["messages"]
    assert messages[-1].content == "published"
    assert [m.content for m in messages if type(m).__name__ == "ToolMessage"][-1] == (
        "pushed feature/login"
    )
    assert (tmp_path / "effects.log").read_text() == "push_branch feature/login\n"
    (approval,) = decided
    assert (approval.status, approval.decided_by) == ("approved", "alice")
    store, run = only_run(tmp_path / "runs.db")
    # No turn_end_node in the graph: invoke_and_wait ended the turn's run.
    assert (run.status, run.reason, run.result) == ("COMPLETED", "goal_completed", "published")
    assert [(s.decision.tool or s.decision.kind, s.status) for s in store.list_steps(run.id)] == [
        ("list_branches", "done"),
        ("push_branch", "done"),
        ("complete", "done"),
    ]
    assert store.lease(run.id).owner == ""
    assert store.verify_events().intact


def test_a_rejection_while_the_langgraph_short_path_waits_tells_the_model_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, _ = short_path("langgraph")
    monkeypatch.chdir(tmp_path)
    world = langgraph_world(tmp_path)
    with a_person(tmp_path / "runs.db", reject) as decided:
        exec(compile(code, "docs/adapters.md (langgraph short path)", "exec"), world)
    messages = world["state"]["messages"]
    assert messages[-1].content == "published"
    told = [m for m in messages if type(m).__name__ == "ToolMessage"][-1]
    assert told.status == "error"
    assert "not today" in str(told.content)
    assert not (tmp_path / "effects.log").exists()
    (approval,) = decided
    assert approval.status == "rejected"
    store, run = only_run(tmp_path / "runs.db")
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    assert [(s.decision.tool or s.decision.kind, s.status) for s in store.list_steps(run.id)] == [
        ("list_branches", "done"),
        ("push_branch", "failed"),
    ]


def test_ainvoke_and_wait_waits_for_the_person_on_the_async_path_and_ends_the_turn(
    tmp_path: Path,
) -> None:
    import asyncio

    from agentrt.adapters.langgraph import ainvoke_and_wait

    graph, tools_node, store, config = langgraph_gated(tmp_path)
    with a_person(tmp_path / "runs.db", approve):
        state = asyncio.run(
            ainvoke_and_wait(
                graph,
                {"messages": [("user", "publish")]},
                config,
                tools_node,
                poll_interval=0.01,
            )
        )
    assert state["messages"][-1].content == "published"
    assert (tmp_path / "effects.log").read_text() == "push_branch feature/login\n"
    (run,) = store.list_runs()
    assert (run.status, run.result) == ("COMPLETED", "published")


def test_a_person_deciding_before_the_langgraph_node_shows_the_request_ends_no_graph_run(
    tmp_path: Path,
) -> None:
    """A race the async short path met: the node paused the call, a person approved at
    once, and only then did the node build its interrupt value, whose text was read
    as a still-pending approval (`NotPendingError`). Deterministic here: the value is
    built from the copy the node held while it was pending, after the approval."""
    graph, tools_node, store, config = langgraph_gated(tmp_path)
    graph.invoke({"messages": [("user", "publish")]}, config)
    (run,) = store.list_runs()
    (held,) = store.pending_approvals(run.id)  # the node's copy: pending
    agentrt.approve(store, run.id, held.id, by="alice", shown_hash=held.hash)
    gate = tools_node.agentrt_gate  # type: ignore[attr-defined]
    value = gate._interrupt_value(held, {"name": "push_branch", "id": "call-1"})
    assert (value["approval_id"], value["hash"], value["text"]) == (held.id, held.hash, "")
    assert store.get_approval(run.id, held.id).status == "approved"


def test_invoke_and_wait_refuses_a_node_that_gated_tool_node_did_not_build(tmp_path: Path) -> None:
    pytest.importorskip("langgraph", reason="needs agentrt[langgraph]")
    from langgraph.prebuilt import ToolNode

    from agentrt.adapters.langgraph import invoke_and_wait

    world = langgraph_world(tmp_path)
    plain = ToolNode([world["list_branches"]])
    with pytest.raises(agentrt.ConfigError, match="takes the tool node that gated_tool_node"):
        invoke_and_wait(object(), {}, {"configurable": {"thread_id": "t"}}, plain)


def test_pydantic_ai_waiting_inside_the_run_runs_a_call_made_beside_the_waiting_one_after_it(
    tmp_path: Path,
) -> None:
    """With `wait_for_person=True` nothing is held or deferred: the model's push and note, made
    together, go through the Gate in order, the push after the person's approval, each once."""
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    from agentrt.adapters.pydantic_ai import AgentrtGate
    from support.adapters import pydantic_ai_child as child

    store = agentrt.open_store(tmp_path / "runs.db")
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications=child.CLASSES,
        wait_for_person=True,
        poll_interval=0.01,
    )
    agent = child.agent(tmp_path, "held", gate=gate)
    with a_person(tmp_path / "runs.db", approve):
        result = agent.run_sync("publish", metadata=gate.run_metadata())
    assert result.output == "done"
    assert (tmp_path / "effects.log").read_text().splitlines() == [
        "push_branch feature/login",
        "write_note pushed login",
    ]
    (run,) = store.list_runs()
    assert (run.status, run.result) == ("COMPLETED", "done")
    assert [(s.decision.tool or s.decision.kind, s.status) for s in store.list_steps(run.id)] == [
        ("push_branch", "done"),
        ("write_note", "done"),
        ("complete", "done"),
    ]


def test_a_pydantic_ai_approval_that_expires_while_waiting_ends_the_run_and_runs_nothing(
    tmp_path: Path,
) -> None:
    """Nobody decides before the approval's `expires_at` (by the gate's clock): the wait ends,
    the expiry is recorded (CANCELLED, approval_expired), the model is told, nothing runs."""
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    from datetime import UTC, datetime, timedelta

    from agentrt.adapters.pydantic_ai import AgentrtGate
    from support.adapters import pydantic_ai_child as child

    start = datetime(2026, 12, 1, tzinfo=UTC)
    ticks = iter(range(1_000_000))

    def clock() -> datetime:  # one minute per reading: the approval's hour passes
        return start + timedelta(minutes=next(ticks))

    store = agentrt.open_store(tmp_path / "runs.db")
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications=child.CLASSES,
        limits=agentrt.Limits(approval_ttl=timedelta(hours=1)),
        now=clock,
        wait_for_person=True,
        poll_interval=0.01,
    )
    heard: list[str] = []
    agent = child.agent(tmp_path, "push", gate=gate, heard=heard)
    meta = gate.run_metadata()
    result = agent.run_sync("publish", metadata=meta)
    assert result.output == "pushed"  # the model's answer after it was told
    assert not (tmp_path / "effects.log").exists()
    run = store.get_run(meta["agentrt_run_id"])
    assert (run.status, run.reason) == ("CANCELLED", "approval_expired")
    assert [a.status for a in store.list_approvals(run.id)] == ["expired"]
    assert heard == [
        f"ToolReturnPart:failed:not run: {agentrt.adapters.ended_message(run)}",
    ]


def test_the_adapters_page_opens_with_the_same_counts_as_its_short_paths() -> None:
    opening = " ".join(DOC.read_text().split("\n## ", 1)[0].split())
    counts = {name: short_path(name)[2] for name in ("pydantic-ai", "openai-agents", "langgraph")}
    assert (
        f"adds or changes {counts['pydantic-ai']} lines for Pydantic AI, "
        f"{counts['openai-agents']} for the Agents SDK, {counts['langgraph']} for LangGraph"
    ) in opening


def two_pushes_in_one_response(tmp_path: Path) -> tuple[agentrt.Store, Any]:
    """An Agents SDK agent whose model asks for two pushes in one response, then answers
    "pushed both": its store at `tmp_path / "runs.db"` and a new `GatedRun`."""
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")
    from agents import Agent
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentrt.adapters.openai_agents import Classification, gate_agent

    world = agents_world(tmp_path)
    model = ScriptedModel(
        [
            [
                function_call("push_branch", {"branch": "feature/login"}, call_id="c1"),
                function_call("push_branch", {"branch": "feature/signup"}, call_id="c2"),
            ],
            [assistant_message("pushed both")],
        ]
    )
    store = agentrt.open_store(tmp_path / "runs.db")
    agent = Agent(name="publisher", model=model, tools=[world["push_branch"]])
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={"push_branch": Classification("remote_mutation", timeout=30)},
    )
    return store, gated.new_run()


def test_the_openai_agents_wait_goes_on_after_a_held_call_the_policy_sends_to_a_person(
    tmp_path: Path,
) -> None:
    """Two pushes in one model response: the first waits, the second is held behind it; once
    the first is approved and has run, the second asks for its own approval (the SDK raises
    `ApprovalPendingError` inside); `run_agent(wait_for_person=True)` waits again and goes on
    from the state saved before: each push runs once, in order."""
    store, run = two_pushes_in_one_response(tmp_path)
    with a_person(tmp_path / "runs.db", approve, times=2) as decided:
        result = run.run_agent_sync("publish both", wait_for_person=True, poll_interval=0.01)
    assert (result.final_output, result.interruptions) == ("pushed both", [])
    assert (tmp_path / "effects.log").read_text().splitlines() == [
        "push_branch feature/login",
        "push_branch feature/signup",
    ]
    assert [a.status for a in decided] == ["approved", "approved"]
    ended = store.get_run(run.run_id)
    assert (ended.status, ended.result) == ("COMPLETED", "pushed both")
    assert [s.status for s in store.list_steps(run.run_id)] == ["done", "done", "done"]


def test_a_person_deciding_between_the_sdks_two_judgements_leaves_the_second_call_held(
    tmp_path: Path,
) -> None:
    """The person approves the first push in the moment after the SDK judged it and before it
    judges the second (under load the watcher above once landed there): the second call is
    still held behind the first, not refused as "another call"; the run goes on as when the
    person is slower, each push once, in order. The moment is made exact by deciding from
    inside the second judgement, before it reads the run."""
    db = tmp_path / "runs.db"
    store, run = two_pushes_in_one_response(tmp_path)
    judge = run._judge
    decided_early: list[agentrt.Approval] = []
    later = ExitStack()
    people: list[list[Any]] = []

    async def judge_after_a_quick_person(
        name: str, context: Any, params: dict[str, Any], call_id: str, **kw: Any
    ) -> Any:
        if call_id == "c2" and not decided_early:
            elsewhere = agentrt.open_store(db)
            try:
                [pending] = elsewhere.pending_approvals(run.run_id)
                decided_early.append(approve(elsewhere, pending))
            finally:
                elsewhere.close()
            # The person who decides the second call comes only now: one watching from
            # the start could decide the first call first, before this moment.
            people.append(later.enter_context(a_person(db, approve, times=1)))
        return await judge(name, context, params, call_id, **kw)

    run._judge = judge_after_a_quick_person  # type: ignore[method-assign]
    with later:
        result = run.run_agent_sync("publish both", wait_for_person=True, poll_interval=0.01)
    [decided] = people
    assert (result.final_output, result.interruptions) == ("pushed both", [])
    assert (tmp_path / "effects.log").read_text().splitlines() == [
        "push_branch feature/login",
        "push_branch feature/signup",
    ]
    assert [a.status for a in decided_early + decided] == ["approved", "approved"]
    ended = store.get_run(run.run_id)
    assert (ended.status, ended.result) == ("COMPLETED", "pushed both")
    assert [s.status for s in store.list_steps(run.run_id)] == ["done", "done", "done"]


def test_a_langgraph_approval_that_expires_while_invoke_and_wait_waits_ends_the_run(
    tmp_path: Path,
) -> None:
    """Nobody decides before the approval's `expires_at` (by the node's clock): the wait ends,
    the expiry is recorded (CANCELLED, approval_expired), the model gets the node's error
    `ToolMessage` saying so and answers, and the push never runs."""
    pytest.importorskip("langgraph", reason="needs agentrt[langgraph]")
    from datetime import UTC, datetime, timedelta

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from agentrt.adapters.langgraph import (
        Classification,
        gated_tool_node,
        invoke_and_wait,
    )

    start = datetime(2026, 12, 1, tzinfo=UTC)
    ticks = iter(range(1_000_000))

    def clock() -> datetime:  # one minute per reading: the approval's hour passes
        return start + timedelta(minutes=next(ticks))

    world = langgraph_world(tmp_path)
    store = agentrt.open_store(tmp_path / "runs.db")
    tools_node = gated_tool_node(
        [world["list_branches"], world["push_branch"]],
        store=store,
        policy=agentrt.default_policy(),
        classifications={
            "list_branches": Classification("read_only", timeout=5),
            "push_branch": Classification("remote_mutation", timeout=30),
        },
        limits=agentrt.Limits(approval_ttl=timedelta(hours=1)),
        now=clock,
    )
    builder = StateGraph(MessagesState)
    builder.add_node("agent", world["call_model"])
    builder.add_node("tools", tools_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}
    out = invoke_and_wait(
        graph, {"messages": [("user", "publish")]}, config, tools_node, poll_interval=0.01
    )
    told = [m for m in out["messages"] if type(m).__name__ == "ToolMessage"][-1]
    assert (told.status, told.content) == (
        "error",
        "Denied by the policy: approval expired before it was decided",
    )
    assert out["messages"][-1].content == "published"
    assert not (tmp_path / "effects.log").exists()
    (run,) = store.list_runs()
    assert (run.status, run.reason) == ("CANCELLED", "approval_expired")
    assert [a.status for a in store.list_approvals(run.id)] == ["expired"]


def test_the_pydantic_ai_gate_refuses_classifications_that_are_not_a_mapping(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    from agentrt.adapters import Classification
    from agentrt.adapters.pydantic_ai import AgentrtGate

    store = agentrt.open_store(tmp_path / "runs.db")
    with pytest.raises(agentrt.ConfigError, match="classifications must be a mapping"):
        AgentrtGate(
            store=store,
            policy=agentrt.default_policy(),
            classifications=[("push_branch", Classification("remote_mutation", 30))],  # type: ignore[arg-type]
            wait_for_person=True,
        )
    assert store.list_runs() == []


WAITING_CHILD = """
import asyncio, json, sys
sys.path.insert(0, "tests")
from pathlib import Path
import agentrt
from agentrt.adapters.pydantic_ai import AgentrtGate
from support.adapters import pydantic_ai_child as child
work, run_id = Path(sys.argv[1]), sys.argv[2]
store = agentrt.open_store(work / "runs.db")
gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications=child.CLASSES,
                   wait_for_person=True, poll_interval=0.02)
agent = child.agent(work, "push", gate=gate)
output = asyncio.run(child.drive(agent, work, prompt="publish the login branch",
                                 metadata=gate.run_metadata(run_id), resume=False))
print(json.dumps({"output": output}))
"""


def test_a_call_cut_off_by_sigkill_while_waiting_inside_the_run_runs_again_only_after_a_person(
    tmp_path: Path,
) -> None:
    """The interruption contract on the short path: a child waiting inside the run, approved,
    SIGKILLed mid-push (after its effect); the program started again from its saved history
    with `wait_for_person=True` takes the run over, waits on `interrupted_side_effect`, and
    pushes a second time only once a person approves that."""
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    import signal
    import subprocess
    import sys

    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from agentrt.adapters.pydantic_ai import AgentrtGate
    from support.adapters import pydantic_ai_child as child

    run_id = "0" * 31 + "7"
    effects = tmp_path / "effects.log"
    (tmp_path / "hold").write_text("1")  # the push waits here after acting
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITING_CHILD, str(tmp_path), run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        with a_person(tmp_path / "runs.db", approve) as first:
            deadline = time.monotonic() + 120
            while not (tmp_path / "acted").exists():
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        with proc:  # its pipes, closed as it is waited for
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    (tmp_path / "hold").unlink()
    assert [a.kind for a in first] == ["remote_mutation"]
    assert effects.read_text().splitlines() == ["push_branch feature/login"]

    history = ModelMessagesTypeAdapter.validate_json((tmp_path / "history.json").read_bytes())
    store = agentrt.open_store(tmp_path / "runs.db")
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications=child.CLASSES,
        wait_for_person=True,
        poll_interval=0.02,
    )
    agent = child.agent(tmp_path, "push", gate=gate)
    with a_person(tmp_path / "runs.db", approve) as second:
        result = agent.run_sync(message_history=history, metadata=gate.run_metadata(run_id))
    assert result.output == "pushed"
    assert [a.kind for a in second] == ["interrupted_side_effect"]
    assert effects.read_text().splitlines() == ["push_branch feature/login"] * 2
    run = store.get_run(run_id)
    assert (run.status, run.result) == ("COMPLETED", "pushed")
    assert [(a.kind, a.status) for a in store.list_approvals(run_id)] == [
        ("remote_mutation", "approved"),
        ("interrupted_side_effect", "approved"),
    ]
    assert [e.type for e in store.list_events(run_id)].count("lease.taken_over") == 1
    assert store.verify_events().intact


def test_waiting_on_an_approval_the_store_does_not_hold_is_a_clear_not_found_error(
    store: agentrt.Store,
) -> None:
    """An approval id from elsewhere (another database's checkpoint, a hand edit) is named."""
    import asyncio

    from agentrt.adapters._wait import until_decided, until_decided_sync
    from support.gates import make_gate
    from support.tools import read_tool

    session = make_gate(store, read_tool()).begin_sync(
        "wait on something", agentrt.Limits(max_steps=3)
    )
    run_id = session.run.id
    session.close_sync()
    with pytest.raises(agentrt.NotFoundError, match="has no approval 'appr-elsewhere'"):
        until_decided_sync(store, run_id, "appr-elsewhere", every=0.01)
    with pytest.raises(agentrt.NotFoundError, match="has no approval 'appr-elsewhere'"):
        asyncio.run(until_decided(store, run_id, "appr-elsewhere", every=0.01))


# -- A person deciding at the moment each wait-for-person path assumed could not happen --


def langgraph_gated(tmp_path: Path) -> tuple[Any, Any, agentrt.Store, Any]:
    """The LangGraph short path's graph, built by hand: (graph, tools node, store, config)."""
    pytest.importorskip("langgraph", reason="needs agentrt[langgraph]")
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from agentrt.adapters.langgraph import Classification, gated_tool_node

    world = langgraph_world(tmp_path)
    store = agentrt.open_store(tmp_path / "runs.db")
    tools_node = gated_tool_node(
        [world["list_branches"], world["push_branch"]],
        store=store,
        policy=agentrt.default_policy(),
        classifications={
            "list_branches": Classification("read_only", timeout=5),
            "push_branch": Classification("remote_mutation", timeout=30),
        },
    )
    builder = StateGraph(MessagesState)
    builder.add_node("agent", world["call_model"])
    builder.add_node("tools", tools_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver())
    return graph, tools_node, store, {"configurable": {"thread_id": "t1"}}


def decide_elsewhere(db: Path, how: Callable[[agentrt.Store], Any]) -> Any:
    """A person at another terminal: their own open of the file, closed after."""
    elsewhere = agentrt.open_store(db)
    try:
        return how(elsewhere)
    finally:
        elsewhere.close()


def test_a_cancel_between_the_langgraph_nodes_read_and_its_attach_tells_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The person approves while `invoke_and_wait` waits; the node reads the run waiting on
    the approved call, and in the moment before it attaches, an operator cancels the run
    (the Gate then refused the ended run: `RunStateError` out of the graph). The model is
    told the call's recorded outcome, as when the cancel comes a moment earlier; the push
    never runs; nothing is lost from the record."""
    from agentrt.adapters.langgraph import _wait as lg_wait
    from agentrt.adapters.langgraph import invoke_and_wait

    graph, tools_node, store, config = langgraph_gated(tmp_path)
    db = tmp_path / "runs.db"
    wait = lg_wait.until_decided_sync

    def wait_after_a_person_approved(
        store: agentrt.Store, run_id: str, approval_id: str, **kw: Any
    ) -> agentrt.Approval:
        decide_elsewhere(db, lambda s: approve(s, s.get_approval(run_id, approval_id)))
        return wait(store, run_id, approval_id, **kw)

    gated = tools_node.agentrt_gate
    attach = gated.gate.attach
    cancelled: list[agentrt.Run] = []

    async def cancel_then_attach(run_id: str) -> Any:
        if store.get_run(run_id).status == "WAITING_FOR_APPROVAL" and not cancelled:
            cancelled.append(decide_elsewhere(db, lambda s: agentrt.cancel(s, run_id, "ops")))
        return await attach(run_id)

    monkeypatch.setattr(lg_wait, "until_decided_sync", wait_after_a_person_approved)
    monkeypatch.setattr(gated.gate, "attach", cancel_then_attach)
    out = invoke_and_wait(
        graph, {"messages": [("user", "publish")]}, config, tools_node, poll_interval=0.01
    )
    assert len(cancelled) == 1
    told = [m for m in out["messages"] if type(m).__name__ == "ToolMessage"][-1]
    assert told.status == "error" and "cancelled by ops" in str(told.content)
    assert out["messages"][-1].content == "published"
    assert not (tmp_path / "effects.log").exists()
    (run,) = store.list_runs()
    assert (run.status, run.reason) == ("CANCELLED", "operator_cancelled")
    assert [a.status for a in store.list_approvals(run.id)] == ["approved"]
    assert [(s.decision.tool, s.status) for s in store.list_steps(run.id)] == [
        ("list_branches", "done"),
        ("push_branch", "failed"),
    ]
    assert store.lease(run.id).owner == ""
    assert store.verify_events().intact


def test_a_cancel_between_the_langgraph_nodes_read_and_its_new_step_ends_the_graph_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node reads the turn's run RUNNING for the push (not recorded yet), and in the
    moment before it attaches to claim a step an operator cancels the run: the graph run
    ends with the adapter's `RunEndedError`, as when the cancel comes a moment earlier,
    not the Gate's bare `RunStateError`; nothing of the push is recorded or run."""
    from agentrt.adapters.langgraph import RunEndedError, invoke_and_wait

    graph, tools_node, store, config = langgraph_gated(tmp_path)
    db = tmp_path / "runs.db"
    gated = tools_node.agentrt_gate
    attach = gated.gate.attach
    cancelled: list[agentrt.Run] = []

    async def cancel_then_attach(run_id: str) -> Any:
        if store.get_run(run_id).status == "RUNNING" and not cancelled:
            cancelled.append(decide_elsewhere(db, lambda s: agentrt.cancel(s, run_id, "ops")))
        return await attach(run_id)

    monkeypatch.setattr(gated.gate, "attach", cancel_then_attach)
    with pytest.raises(RunEndedError) as raised:
        invoke_and_wait(graph, {"messages": [("user", "publish")]}, config, tools_node)
    assert len(cancelled) == 1
    assert not (tmp_path / "effects.log").exists()
    (run,) = store.list_runs()
    assert (raised.value.run.id, raised.value.run.status) == (run.id, "CANCELLED")
    assert (run.status, run.reason) == ("CANCELLED", "operator_cancelled")
    assert [(s.decision.tool, s.status) for s in store.list_steps(run.id)] == [
        ("list_branches", "done"),
    ]
    assert store.lease(run.id).owner == ""
    assert store.verify_events().intact


def test_a_rejection_between_the_waits_two_reads_reaches_the_langgraph_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`_settled` reads the approvals, then the run: the person rejects between the two. The
    wait sees the run ended with its copy of the approval still pending; the model is told
    of the rejection, the push never runs, and the turn ends as after any rejection."""
    from agentrt.adapters import _wait
    from agentrt.adapters.langgraph import invoke_and_wait

    graph, tools_node, store, config = langgraph_gated(tmp_path)
    db = tmp_path / "runs.db"
    settled = _wait._settled
    decided: list[agentrt.Approval] = []

    def settled_with_a_person_between_its_reads(
        store: agentrt.Store, run_id: str, approval_id: str, clock: Any
    ) -> Any:
        get_run = store.get_run

        def rejected_then_read(run_id: str) -> agentrt.Run:
            if not decided:
                decided.append(
                    decide_elsewhere(db, lambda s: reject(s, s.get_approval(run_id, approval_id)))
                )
            return get_run(run_id)

        monkeypatch.setattr(store, "get_run", rejected_then_read)
        try:
            return settled(store, run_id, approval_id, clock)
        finally:
            monkeypatch.setattr(store, "get_run", get_run)

    monkeypatch.setattr(_wait, "_settled", settled_with_a_person_between_its_reads)
    out = invoke_and_wait(
        graph, {"messages": [("user", "publish")]}, config, tools_node, poll_interval=0.01
    )
    assert [a.status for a in decided] == ["rejected"]
    told = [m for m in out["messages"] if type(m).__name__ == "ToolMessage"][-1]
    assert told.status == "error" and "not today" in str(told.content)
    assert out["messages"][-1].content == "published"
    assert not (tmp_path / "effects.log").exists()
    (run,) = store.list_runs()
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    assert store.verify_events().intact


def publisher_gated(tmp_path: Path) -> tuple[agentrt.Store, Any]:
    """The Agents SDK short path's agent on `agents_world`'s model, gated on a store at
    `tmp_path / "runs.db"`: (that store, the `GatedAgent`)."""
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")
    from agents import Agent

    from agentrt.adapters.openai_agents import Classification, gate_agent

    world = agents_world(tmp_path)
    store = agentrt.open_store(tmp_path / "runs.db")
    agent = Agent(
        name="publisher", model=world["model"], tools=[world["list_branches"], world["push_branch"]]
    )
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={
            "list_branches": Classification("read_only", timeout=5),
            "push_branch": Classification("remote_mutation", timeout=30),
        },
    )
    return store, gated


def test_an_approval_then_a_cancel_while_run_agent_waits_tells_the_model_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The person approves; the wait reads it approved; in the moment before the decision is
    carried into the SDK's run state an operator cancels the run. `run_agent` promises a
    cancel while waiting is told to the model as the SDK's rejection of the call: the push
    never runs and the model answers."""
    from agentrt.adapters.openai_agents import _gated

    db = tmp_path / "runs.db"
    store, gated = publisher_gated(tmp_path)
    wait = _gated.until_decided
    cancelled: list[agentrt.Run] = []

    async def approved_then_cancelled(
        store: agentrt.Store, run_id: str, approval_id: str, **kw: Any
    ) -> agentrt.Approval:
        decide_elsewhere(db, lambda s: approve(s, s.get_approval(run_id, approval_id)))
        approval = await wait(store, run_id, approval_id, **kw)
        cancelled.append(decide_elsewhere(db, lambda s: agentrt.cancel(s, run_id, "ops")))
        return approval

    monkeypatch.setattr(_gated, "until_decided", approved_then_cancelled)
    result = gated.new_run().run_agent_sync("publish", wait_for_person=True, poll_interval=0.01)
    assert len(cancelled) == 1
    assert (result.final_output, result.interruptions) == ("published", [])
    assert not (tmp_path / "effects.log").exists()
    (run,) = store.list_runs()
    assert (run.status, run.reason) == ("CANCELLED", "operator_cancelled")
    told = [
        str(item.output) for item in result.new_items if type(item).__name__ == "ToolCallOutputItem"
    ]
    # Told as the SDK would be told of any call the cancel cut off: its recorded outcome.
    assert told[-1] == "interrupted: cancelled by ops"
    assert [a.status for a in store.list_approvals(run.id)] == ["approved"]
    assert [(s.decision.tool, s.status) for s in store.list_steps(run.id)] == [
        ("list_branches", "done"),
        ("push_branch", "failed"),
    ]
    assert store.verify_events().intact


def test_a_cancel_before_the_sdk_attaches_for_the_approved_call_tells_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The person approves while `run_agent` waits, the decision is carried into the SDK's
    state, and in the moment before the approved call attaches the run an operator cancels
    it (the Gate then refused the ended run: the SDK's `UserError` out of `run_agent`). The
    model is told the call's recorded outcome, as when the cancel comes a moment earlier;
    the push never runs; nothing is lost from the record."""
    from agentrt.adapters.openai_agents import _gated

    db = tmp_path / "runs.db"
    store, gated = publisher_gated(tmp_path)
    wait = _gated.until_decided

    async def approved(
        store: agentrt.Store, run_id: str, approval_id: str, **kw: Any
    ) -> agentrt.Approval:
        decide_elsewhere(db, lambda s: approve(s, s.get_approval(run_id, approval_id)))
        return await wait(store, run_id, approval_id, **kw)

    attach = gated.gate.attach
    cancelled: list[agentrt.Run] = []

    async def cancel_then_attach(run_id: str) -> Any:
        if store.get_run(run_id).status == "WAITING_FOR_APPROVAL" and not cancelled:
            cancelled.append(decide_elsewhere(db, lambda s: agentrt.cancel(s, run_id, "ops")))
        return await attach(run_id)

    monkeypatch.setattr(_gated, "until_decided", approved)
    monkeypatch.setattr(gated.gate, "attach", cancel_then_attach)
    result = gated.new_run().run_agent_sync("publish", wait_for_person=True, poll_interval=0.01)
    assert len(cancelled) == 1
    assert (result.final_output, result.interruptions) == ("published", [])
    told = [
        str(item.output) for item in result.new_items if type(item).__name__ == "ToolCallOutputItem"
    ]
    assert told[-1] == "interrupted: cancelled by ops"
    assert not (tmp_path / "effects.log").exists()
    (run,) = store.list_runs()
    assert (run.status, run.reason) == ("CANCELLED", "operator_cancelled")
    assert [a.status for a in store.list_approvals(run.id)] == ["approved"]
    assert store.lease(run.id).owner == ""
    assert store.verify_events().intact


def test_a_rejection_elsewhere_just_before_the_langgraph_answer_is_applied_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graph is resumed with a person's approval (`approve(interrupt)`); the node reads
    the approval still pending, and in the moment before it applies the answer another
    person rejects it through `agentrt reject`. What was decided there stands, as when it
    came a moment earlier: the model is told of the rejection, the push never runs, and
    the late approval is not an error out of the graph."""
    from langgraph.types import Command

    from agentrt.adapters.langgraph import approve as approve_interrupt

    graph, tools_node, store, config = langgraph_gated(tmp_path)
    db = tmp_path / "runs.db"
    gated = tools_node.agentrt_gate
    operator_approve = gated._operator.approve
    decided: list[agentrt.Approval] = []

    def rejected_elsewhere_first(run_id: str, approval_id: str, *args: Any, **kw: Any) -> Any:
        decided.append(
            decide_elsewhere(db, lambda s: reject(s, s.get_approval(run_id, approval_id)))
        )
        return operator_approve(run_id, approval_id, *args, **kw)

    monkeypatch.setattr(gated._operator, "approve", rejected_elsewhere_first)
    graph.invoke({"messages": [("user", "publish")]}, config)
    (interrupt,) = graph.get_state(config).interrupts
    out = graph.invoke(Command(resume=approve_interrupt(interrupt, by="bob")), config)
    assert [a.status for a in decided] == ["rejected"]
    told = [m for m in out["messages"] if type(m).__name__ == "ToolMessage"][-1]
    assert told.status == "error" and "not today" in str(told.content)
    assert out["messages"][-1].content == "published"
    assert not (tmp_path / "effects.log").exists()
    (run,) = store.list_runs()
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    assert [(a.status, a.decided_by) for a in store.list_approvals(run.id)] == [
        ("rejected", "alice")
    ]
    assert store.verify_events().intact


def test_a_rejection_elsewhere_just_before_the_sdks_own_approval_is_carried_in_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer approves the call in the SDK's run state (`state.approve`) and runs it
    on; the adapter reads the approval pending, and in the moment before it carries the
    SDK's approval into agentrt a person rejects it through `agentrt reject`. The person's
    rejection stands, as when it came a moment earlier: the model is told, the push never
    runs, and the late approval is not an error out of the framework run."""
    db = tmp_path / "runs.db"
    store, gated = publisher_gated(tmp_path)
    run = gated.new_run()
    first = run.run_agent_sync("publish")
    (item,) = first.interruptions
    state = first.to_state()
    state.approve(item)
    carry = run._decide
    decided: list[agentrt.Approval] = []

    def rejected_elsewhere_first(approval: agentrt.Approval, *args: Any, **kw: Any) -> Any:
        decided.append(decide_elsewhere(db, lambda s: reject(s, approval)))
        return carry(approval, *args, **kw)

    monkeypatch.setattr(run, "_decide", rejected_elsewhere_first)
    result = run.run_agent_sync(state)
    assert [a.status for a in decided] == ["rejected"]
    assert (result.final_output, result.interruptions) == ("published", [])
    assert not (tmp_path / "effects.log").exists()
    (ended,) = store.list_runs()
    assert (ended.status, ended.reason) == ("CANCELLED", "approval_rejected")
    told = [
        str(item.output) for item in result.new_items if type(item).__name__ == "ToolCallOutputItem"
    ]
    assert told[-1] == "policy_denied: approval rejected: not today"  # the step's record
    assert store.verify_events().intact
