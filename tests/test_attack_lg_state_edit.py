"""The graph's state edited (`update_state`) while a turn waits for a person (attack campaign).

A real LangGraph ReAct graph (`build`) driven by LangChain's fake chat model, LangGraph's
in-memory checkpointer, tools appending a line to a file when they really run, a real
store (SQLite and PostgreSQL).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.messages import AIMessage, RemoveMessage
from langgraph.types import Command

from agentrt.adapters.langgraph import approve
from support.adapters.langgraph_graphs import CONFIG, TURN, ask, build, call, lines


def test_a_note_that_ran_is_not_run_again_after_the_turns_message_is_removed_from_the_state(
    database: str, tmp_path: Path
) -> None:
    """The model asks [write_note, push_branch]: the note runs, the push waits for a person.
    The program then removes the user's message from the thread (`update_state` with
    `RemoveMessage`) and resumes with the approval. Today the turn is named anew, the note's
    record is not found and the note is written a second time; it should run once."""
    graph, store, effects = build(
        tmp_path,
        [
            AIMessage(
                "",
                tool_calls=[
                    call("write_note", "n1", text="hello"),
                    call("push_branch", "p1", branch="feature/login"),
                ],
            ),
            AIMessage("done"),
        ],
        database=database,
    )
    out = ask(graph)
    (pending,) = out["__interrupt__"]
    assert lines(effects) == ["note hello"]

    graph.update_state(CONFIG, {"messages": [RemoveMessage(id=TURN)]})
    raised: Exception | None = None
    try:
        ask(graph, Command(resume=approve(pending, by="alice")))
    except Exception as exc:  # the effects are what this test is about; raised is checked next
        raised = exc
    assert lines(effects).count("note hello") == 1, (lines(effects), raised)
    assert raised is None
    assert lines(effects) == ["note hello", "push feature/login"]
    assert len(store.list_runs()) == 1
