"""Hostile tool calls in the model's AI message, through the gated ToolNode.

A model may give a call arguments that are not usable JSON, or two calls of one
message one id. Each is answered to the model, never run unjudged, and never
fails the graph. Real LangGraph graphs driven by LangChain's fake chat model
(`build`, `build_prebuilt`), tools that append a line to a file when they really
run, a real store (SQLite and PostgreSQL).
"""

from __future__ import annotations

import os
from collections.abc import Callable
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


def _with_thermostat(database: str, effects: Path) -> Callable[[list[Any]], Any]:
    """The gated node of `build` over its tools and `set_temperature`, which writes the
    temperature to `effects` when it really runs."""

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

    return node


def test_a_call_whose_arguments_are_not_json_hears_invalid_call_not_an_id_used_twice(
    database: str, tmp_path: Path
) -> None:
    """A model sends `set_temperature(celsius=NaN)` (Python's JSON parser accepts NaN), a
    call made once. The step is recorded `invalid_decision` ("args are not usable JSON")
    and the model hears the same: `Invalid call: ...`, not that its id was used twice;
    the tool never runs."""
    effects = tmp_path / "temperature.log"
    graph, store, _ = build(
        tmp_path,
        [
            AIMessage("", tool_calls=[call("set_temperature", "c1", celsius=float("nan"))]),
            AIMessage("ok"),
        ],
        node=_with_thermostat(database, effects),
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


def test_a_call_whose_arguments_are_not_json_hears_invalid_call_again_when_replayed(
    database: str, tmp_path: Path
) -> None:
    """A model sends [set_temperature(celsius=NaN), push_branch] in one message: the first is
    recorded `invalid_decision`, the push pauses the graph for a person. On resume LangGraph
    runs the node again from its top: the NaN call gets its recorded `Invalid call: ...`
    again (one step, nothing run), and the approved push runs once."""
    effects = tmp_path / "temperature.log"
    graph, store, pushes = build(
        tmp_path,
        [
            AIMessage(
                "",
                tool_calls=[
                    call("set_temperature", "c1", celsius=float("nan")),
                    call("push_branch", "p1", branch="feature/login"),
                ],
            ),
            AIMessage("ok"),
        ],
        node=_with_thermostat(database, effects),
        database=database,
    )
    (pending,) = ask(graph)["__interrupt__"]
    out = ask(graph, Command(resume=approve(pending, by="alice")))

    (invalid, pushed) = tool_messages(out)
    assert invalid[:2] == ("c1", "error") and invalid[2].startswith("Invalid call: "), invalid
    assert "not usable JSON" in invalid[2]
    assert pushed == ("p1", "success", "pushed feature/login")
    assert [s.status for s in store.list_steps(RUN)] == ["failed", "done"]
    assert lines(pushes) == ["push feature/login"]
    assert not effects.exists()


def test_under_send_a_call_sharing_the_waiting_push_id_is_not_run_and_the_graph_pauses(
    database: str, tmp_path: Path
) -> None:
    """The prebuilt agent (each call a `Send` task) gets [push_branch, write_note] sharing one
    tool call id. The push is recorded and pauses the graph for a person; the note, another
    call of the message under the push's id, is answered `Not run: run <id> waits for a
    person on another call`, nothing run or recorded for it (no `ApprovalChangedError`:
    nothing was changed). Once approved, the push runs once."""
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

    out = ask(graph, Command(resume=approve(pending, by="alice")))
    assert lines(effects) == ["push feature/login"]
    assert [s.status for s in store.list_steps(RUN)] == ["done"]
    assert sorted((m.name, m.status, m.content) for m in out["messages"] if m.type == "tool") == [
        ("push_branch", "success", "pushed feature/login"),
        ("write_note", "error", f"Not run: run {RUN} waits for a person on another call"),
    ]


def test_tool_call_ids_holding_a_nul_character_are_gated_like_any_other(
    database: str, tmp_path: Path
) -> None:
    """A model gives tool call ids holding a NUL character (a note, then a push to approve):
    the push pauses the graph for a person and, once approved, both calls run once and say
    so (SQLite found the recorded calls no more, keyed at the NUL, and PostgreSQL refused
    the key: decision 0143)."""
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
