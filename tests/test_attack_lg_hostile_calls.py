"""Hostile tool calls in the model's AI message, through the gated ToolNode (attack campaign).

Real LangGraph graphs driven by LangChain's fake chat model (`build`), tools that
append a line to a file when they really run, a real store (SQLite and PostgreSQL).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.types import Command

import agentrt
from agentrt.adapters.langgraph import Classification, approve, gated_tool_node
from support.adapters.langgraph_graphs import (
    CLASSES,
    RUN,
    ask,
    build,
    build_prebuilt,
    call,
    lines,
    tool_messages,
)


def test_tool_call_ids_holding_a_nul_character_are_gated_like_any_other(
    database: str, tmp_path: Path
) -> None:
    """A model gives tool call ids holding a NUL character (a note, then a push to approve).
    Today SQLite never finds the recorded calls again (the push's interrupt is lost and
    both calls are answered "Not run: ... waits for a person on another call", though the
    note ran) and PostgreSQL fails the graph with a StoreError traceback; the push should
    pause the graph for a person and, once approved, both calls run once and say so."""
    note_id, push_id = "note\x001", "push\x002"
    graph, store, effects = build(
        tmp_path,
        [
            AIMessage(
                "",
                tool_calls=[
                    call("write_note", note_id, text="hello"),
                    call("push_branch", push_id, branch="feature/login"),
                ],
            ),
            AIMessage("done"),
        ],
        database=database,
    )
    out = ask(graph)
    assert "__interrupt__" in out, tool_messages(out)
    (pending,) = out["__interrupt__"]
    assert pending.value["tool_call_id"] == push_id
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"

    out = ask(graph, Command(resume=approve(pending, by="alice")))
    assert tool_messages(out) == [
        (note_id, "success", "noted hello"),
        (push_id, "success", "pushed feature/login"),
    ]
    assert lines(effects) == ["note hello", "push feature/login"]
    assert [s.status for s in store.list_steps(RUN)] == ["done", "done"]


def test_a_call_whose_arguments_are_not_json_hears_invalid_call_not_an_id_used_twice(
    database: str, tmp_path: Path
) -> None:
    """A model sends `set_temperature(celsius=NaN)` (Python's JSON parser accepts NaN), a
    call made once. The step is recorded `invalid_decision` ("args are not usable JSON"),
    but the model is told "Not run: tool call id c1 was already used in this turn by
    set_temperature null": the record and what the model hears should both say invalid."""
    effects = tmp_path / "temperature.log"

    @tool
    def set_temperature(celsius: float) -> str:
        """Set the thermostat."""
        with effects.open("a") as f:
            f.write(f"{celsius}\n")
        return "set"

    def node(tools: list[Any]) -> Any:
        return gated_tool_node(
            [*tools, set_temperature],
            store=agentrt.open_store(database),
            policy=agentrt.default_policy(),
            classifications={
                **CLASSES,
                "set_temperature": Classification("remote_mutation", timeout=5),
            },
        )

    graph, store, _ = build(
        tmp_path,
        [
            AIMessage("", tool_calls=[call("set_temperature", "c1", celsius=float("nan"))]),
            AIMessage("ok"),
        ],
        node=node,
        database=database,
    )
    out = ask(graph)
    (step,) = store.list_steps(RUN)
    assert step.observation is not None and step.observation.kind == "invalid_decision"
    ((call_id, status, content),) = tool_messages(out)
    assert (call_id, status) == ("c1", "error")
    assert content.startswith("Invalid call: "), content
    assert "not usable JSON" in content
    assert "already used" not in content
    assert not effects.exists()


def test_under_send_a_call_sharing_the_waiting_push_id_does_not_fail_the_graph(
    database: str, tmp_path: Path
) -> None:
    """The prebuilt agent (each call a `Send` task) gets [push_branch, write_note] sharing one
    tool call id. Today `ainvoke` raises ApprovalChangedError ("a changed call is refused")
    though nothing was changed; as documented, the graph should pause on the push and the
    note be answered "Not run", nothing run or recorded for it, the push run once approved."""
    graph, store, effects = build_prebuilt(
        tmp_path,
        [
            AIMessage(
                "",
                tool_calls=[
                    call("push_branch", "dup", branch="feature/login"),
                    call("write_note", "dup", text="hello"),
                ],
            ),
            AIMessage("done"),
        ],
        database=database,
    )
    out = ask(graph)
    (pending,) = out["__interrupt__"]
    assert pending.value["tool"] == "push_branch"
    assert lines(effects) == []
    assert [s.decision.tool for s in store.list_steps(RUN) if s.decision] == ["push_branch"]

    ask(graph, Command(resume=approve(pending, by="alice")))
    assert lines(effects) == ["push feature/login"]
    assert [s.status for s in store.list_steps(RUN)] == ["done"]
