"""A framework call's step is found by one indexed read of its reason (docs/decisions/0060).

The adapters record a framework's tool call id in the decision's reason and look
the call up before each call. `agentrt.lowlevel.steps_with_reasons` answers that
from `steps.reason_key` (migration 3) through the partial index
`steps_run_reason`, never by reading the run's steps; what it returns is checked
against each step's decoded decision, so it is exactly the steps whose
`decision.reason` is one of those asked for.

The tests that take `any_store` or `database` run on SQLite and on PostgreSQL (issue 21
item 5); those that pin SQLite's query plans or its migration 3 stay on a file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, Store
from agentrt._store.sqlite import _migrations as migrations
from agentrt._store.sqlite._migrations import MIGRATIONS
from agentrt.lowlevel import step_of_run, steps_with_reasons
from conftest import FakeClock, Ids
from support.database import on_postgres
from support.gates import make_gate
from support.rows import execute
from support.tools import read_tool


def record(store: Store, reasons: Sequence[str], *, ids: str = "a") -> str:
    """A Gate run whose steps decide `read` with each reason in turn (each allowed and run)."""
    gate = make_gate(store, read_tool(), clock=FakeClock(), ids=Ids(ids))
    session = gate.begin_sync("look things up", agentrt.Limits(max_steps=len(reasons) + 2))
    for n, reason in enumerate(reasons):
        step = session.step_sync()
        assert step is not None
        verdict = step.propose_sync(Decision.tool_call("read", {"x": n}, reason=reason))
        assert verdict.outcome == "allowed"
        step.execute_sync()
    run_id = session.run.id
    session.close_sync()
    return run_id


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def reasons_of(steps: Sequence[agentrt.Step]) -> list[tuple[int, str]]:
    return [(s.index, s.decision.reason if s.decision else "") for s in steps]


def test_the_read_returns_exactly_the_steps_recording_a_reason_in_step_order(
    any_store: Store,
) -> None:
    store = any_store
    run = record(store, ["call c1", "call c2", "", "call c1", "call c3", "call c10"])
    other = record(store, ["call c1", "call c2"], ids="b")  # the same call ids in another run

    reused = steps_with_reasons(store, run, ["call c1"])
    assert reasons_of(reused) == [(0, "call c1"), (3, "call c1")]  # a reused id: both, in order
    assert all(s.run_id == run for s in reused)
    assert [s.status for s in reused] == ["done", "done"]
    assert reused == store.list_steps(run, cap=None)[0:4:3]  # the same records a page read gives
    assert reasons_of(steps_with_reasons(store, run, {"call c3", "call c2", "call c9"})) == [
        (1, "call c2"),
        (4, "call c3"),
    ]
    assert reasons_of(steps_with_reasons(store, other, ["call c1"])) == [(0, "call c1")]
    assert steps_with_reasons(store, run, ["call c"]) == []  # a reason is matched whole
    assert steps_with_reasons(store, run, ["call c9"]) == []
    assert steps_with_reasons(store, "no-such-run", ["call c1"]) == []
    assert steps_with_reasons(store, run, []) == []


def test_a_reason_to_look_up_must_be_a_non_empty_text(any_store: Store) -> None:
    store = any_store
    run = record(store, ["", "call c1"])
    with pytest.raises(ValueError, match="non-empty text"):
        steps_with_reasons(store, run, [""])  # a decision with no reason is never a call's
    with pytest.raises(ValueError, match="non-empty text"):
        steps_with_reasons(store, run, [7])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not one text"):
        steps_with_reasons(store, run, "call c1")


def test_a_reason_longer_than_the_key_is_found_whole_and_one_sharing_its_head_is_not(
    any_store: Store,
) -> None:
    store = any_store
    head = "call " + "x" * 300
    run = record(store, [head + "-one", head + "-two", head[:256]])
    rows = store.query("SELECT reason_key FROM steps WHERE run_id = ? ORDER BY idx", (run,))
    assert [len(r[0]) for r in rows] == [256, 256, 256]  # one key for all three
    assert reasons_of(steps_with_reasons(store, run, [head + "-two"])) == [(1, head + "-two")]
    assert reasons_of(steps_with_reasons(store, run, [head[:256]])) == [(2, head[:256])]
    assert steps_with_reasons(store, run, [head + "-three"]) == []


def test_recording_a_decision_keys_its_step_by_the_reasons_head_in_the_same_write(
    any_store: Store,
) -> None:
    store = any_store
    run = record(store, ["call c1", "", "ééé call"])
    rows = store.query(
        "SELECT idx, status, reason_key FROM steps WHERE run_id = ? ORDER BY idx", (run,)
    )
    assert [tuple(r) for r in rows] == [
        (0, "done", "call c1"),
        (1, "done", ""),
        (2, "done", "ééé call"),
    ]


def plant(database: str, run_id: str, rows: Sequence[tuple[str, int, Any, str]]) -> None:
    """Steps written past the runtime: (id, idx, decision_json as text or bytes, reason_key)."""
    for step_id, idx, decision, key in rows:
        execute(
            database,
            "INSERT INTO steps (id, run_id, idx, status, decision_json, reason_key) "
            "VALUES (?, ?, ?, 'done', CAST(? AS TEXT), ?)",
            (step_id, run_id, idx, decision, key),
        )


def test_a_row_whose_decision_does_not_decode_is_never_returned_and_breaks_no_read(
    any_store: Store, database: str
) -> None:
    store = any_store
    run = record(store, ["call c1"])
    undecodable = ["s-not-json", "s-huge-number"]
    rows: list[tuple[str, int, Any, str]] = [
        ("s-not-json", 5, "{not json", "call c1"),
        ("s-huge-number", 7, '{"args":1e99999,"reason":"call c1"}', "call c1"),
        ("s-list-reason", 10, '{"kind":"tool_call","reason":["call c1"]}', "call c1"),
        ("s-other", 8, '{"kind":"tool_call","reason":"call c2","tool":"read"}', "call c1"),
    ]
    if not on_postgres(database):  # a PostgreSQL text column cannot hold bytes not UTF-8
        bad = b'{"kind":"tool_call","reason":"call c1","tool":"\xff"}'
        rows.append(("s-bad-utf8", 6, bad, "call c1"))
        undecodable.append("s-bad-utf8")
    plant(database, run, rows)
    # a step whose decision decodes but another column does not
    execute(
        database,
        "INSERT INTO steps (id, run_id, idx, status, decision_json, observation_json, "
        "reason_key) VALUES ('s-bad-obs', ?, 9, 'done', "
        """'{"kind":"tool_call","reason":"call c1","tool":"read"}', '{oops', 'call c1')""",
        (run,),
    )
    found = steps_with_reasons(store, run, ["call c1"])
    assert [(s.index, s.id) for s in found] == [(0, found[0].id), (9, "s-bad-obs")]
    assert found[0].decode_error == ""
    assert "observation_json" in found[1].decode_error  # returned, saying what did not decode
    assert found[1].observation is None
    # The reads a page gives agree: those rows are there, their decisions unreadable.
    by_id = {s.id: s for s in store.list_steps(run, cap=None)}
    assert all(by_id[i].decision is None for i in undecodable)


def test_step_of_run_reads_one_step_of_that_run_whole(any_store: Store) -> None:
    store = any_store
    run = record(store, ["call c1", "call c2"])
    other = record(store, ["call c1"], ids="b")
    second = store.list_steps(run, cap=None)[1]
    assert step_of_run(store, run, second.id) == second
    assert step_of_run(store, other, second.id) is None  # a step of another run
    assert step_of_run(store, run, "no-such-step") is None


@pytest.fixture
def statements(any_store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement `any_store` reads with while the test reads (either backend)."""
    seen: list[str] = []
    real = any_store._query  # type: ignore[attr-defined]  # the store's one read path

    def counted(sql: str, params: Sequence[Any] = ()) -> list[Any]:
        seen.append(sql)
        return real(sql, params)  # type: ignore[no-any-return]

    monkeypatch.setattr(any_store, "_query", counted)
    yield seen


@pytest.fixture
def plans(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """The query plan of every statement the store runs while the test reads (SQLite's)."""
    seen: list[list[str]] = []
    real = store._query  # type: ignore[attr-defined]  # the SQLite store's one read path

    def explained(sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        plan = real("EXPLAIN QUERY PLAN " + sql, params)
        seen.append([str(r["detail"]) for r in plan])
        return real(sql, params)

    monkeypatch.setattr(store, "_query", explained)
    yield seen


# SQLite only: the plan pinned is SQLite's (EXPLAIN QUERY PLAN, ANALYZE on the file).
def test_the_look_up_searches_the_reason_index_and_never_scans_the_run(
    store: Store, db_path: Path, plans: list[list[str]]
) -> None:
    run = record(store, [f"call c{n}" for n in range(40)])
    search = ["SEARCH steps USING INDEX steps_run_reason (run_id=? AND reason_key=?)"]
    for analyzed in (False, True):  # the same once a consumer has run ANALYZE on the file
        if analyzed:
            conn = raw(db_path)
            conn.execute("ANALYZE")
            conn.close()
        plans.clear()
        assert len(steps_with_reasons(store, run, ["call c7"])) == 1
        assert len(steps_with_reasons(store, run, [f"call c{n}" for n in range(0, 40, 3)])) == 14
        assert plans == [search, search]
    plans.clear()
    step = steps_with_reasons(store, run, ["call c7"])[0]
    plans.clear()
    assert step_of_run(store, run, step.id) == step
    ((detail,),) = plans
    assert detail.startswith("SEARCH steps USING INDEX sqlite_autoindex_steps_1 (id=?)")


def test_many_reasons_are_looked_up_in_chunks_and_come_back_in_step_order(
    any_store: Store, statements: list[str]
) -> None:
    store = any_store
    run = record(store, [f"call c{n}" for n in range(12)])
    statements.clear()
    asked = [f"call c{n}" for n in range(1200)]  # more than one statement's worth
    found = steps_with_reasons(store, run, asked)
    assert reasons_of(found) == [(n, f"call c{n}") for n in range(12)]
    assert len(statements) == 3


# SQLite only: a file of schema 2 as the previous release wrote it, and bytes not UTF-8.
def test_migration_3_keys_the_steps_already_recorded_and_keeps_rows_that_do_not_decode(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as old:  # a file of schema 2, as the previous release wrote it
        old.setattr(migrations, "MIGRATIONS", MIGRATIONS[:2])
        old.setattr(migrations, "SCHEMA_VERSION", 2)
        agentrt.open_store(db_path).close()

    def decision(reason: Any) -> str:  # as the runtime writes one: canonical JSON
        return agentrt.canonical_json(
            {"args": {"x": 1}, "kind": "tool_call", "reason": reason, "tool": "read"}
        ).decode()

    rows = [
        ("s0", 0, decision("call c1")),
        ("s1", 1, '{"kind":"tool_call","tool":"read"}'),  # no reason
        ("s2", 2, decision("call c2")),
        ("s3", 3, decision("call c1")),
        ("s-not-json", 10, "{not json"),
        ("s-bad-utf8", 11, b'{"kind":"tool_call","reason":"call c1","tool":"\xff"}'),
        ("s-number", 12, decision(12)),
        ("s-array", 13, "[1, 2]"),
        ("s-empty", 14, ""),
        ("s-long", 15, decision("y" * 300)),
    ]
    conn = raw(db_path)
    try:
        assert "reason_key" not in [r[1] for r in conn.execute("PRAGMA table_info(steps)")]
        conn.execute("INSERT INTO runs (id, goal, status) VALUES ('r1', 'g', 'RUNNING')")
        for step_id, idx, text in rows:
            conn.execute(
                "INSERT INTO steps (id, run_id, idx, status, decision_json) "
                "VALUES (?, 'r1', ?, 'done', CAST(? AS TEXT))",
                (step_id, idx, text),
            )
    finally:
        conn.close()

    store = agentrt.open_store(db_path)  # migrates: no row above fails it
    try:
        keys = store.query("SELECT id, reason_key FROM steps ORDER BY idx")
        assert {r[0]: r[1] for r in keys} == {
            "s0": "call c1",
            "s1": "",
            "s2": "call c2",
            "s3": "call c1",
            "s-not-json": "",
            "s-bad-utf8": "call c1",  # keyed, but its text is not UTF-8: it never decodes
            "s-number": "",
            "s-array": "",
            "s-empty": "",
            "s-long": "y" * 256,
        }
        assert [s.id for s in steps_with_reasons(store, "r1", ["call c1"])] == ["s0", "s3"]
        assert [s.id for s in steps_with_reasons(store, "r1", ["y" * 300])] == ["s-long"]
    finally:
        store.close()


# -- the adapters look calls up through the index ---------------------------------


class NoWholeRunReads:
    """Counts the reads of a whole run's steps or approvals through the store's page reads."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[str] = []
        for name in ("list_steps", "list_approvals"):
            real = getattr(store, name)
            monkeypatch.setattr(store, name, self._counting(name, real))

    def _counting(self, name: str, real: Any) -> Any:
        def read(*args: Any, **kwargs: Any) -> Any:
            self.reads.append(name)
            return real(*args, **kwargs)

        return read


def test_a_langgraph_call_is_looked_up_without_reading_every_step(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from agentrt.adapters.langgraph import Classification, gated_tool_node

    ran: list[str] = []

    @tool
    def look(q: str) -> str:
        """Look something up."""
        ran.append(q)
        return q

    script = iter(
        [
            AIMessage("", tool_calls=[{"name": "look", "args": {"q": f"q{n}"}, "id": f"c{n}"}])
            for n in range(6)
        ]
        + [AIMessage("done")]
    )
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [next(script)]})
    node = gated_tool_node(
        [look],
        store=store,
        policy=agentrt.default_policy(),
        classifications={"look": Classification("read_only", timeout=5)},
    )
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    spy = NoWholeRunReads(store, monkeypatch)
    builder.compile().invoke(
        {"messages": [HumanMessage("look")]}, {"configurable": {"thread_id": "t"}}
    )
    assert ran == [f"q{n}" for n in range(6)]
    assert spy.reads.count("list_steps") == 0  # each call: one indexed read, not the run
    (run,) = store.list_runs()
    assert [s.decision.reason for s in store.list_steps(run.id) if s.decision] == [
        f"langgraph tool call c{n}" for n in range(6)
    ]


def test_pydantic_ai_and_agents_sdk_calls_are_looked_up_without_reading_every_step(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")
    import asyncio

    from agents import Agent as SdkAgent
    from agents import Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    from agentrt.adapters.openai_agents import Classification, gate_agent
    from agentrt.adapters.pydantic_ai import AgentrtGate

    classes = {"look": Classification("read_only", timeout=5)}
    ran: list[str] = []
    spy = NoWholeRunReads(store, monkeypatch)

    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def look(q: str) -> str:
        """Look something up."""
        ran.append(q)
        return q

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n == 6:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("look", {"q": f"p{n}"}, tool_call_id=f"c{n}")])

    gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications=classes)
    agent = Agent(
        FunctionModel(answer),
        output_type=[str, DeferredToolRequests],
        toolsets=[toolset],
        capabilities=[gate],
    )
    assert agent.run_sync("look", metadata=gate.run_metadata()).output == "done"

    set_tracing_disabled(True)

    @function_tool
    def sdk_look(q: str) -> str:
        """Look something up."""
        ran.append(q)
        return q

    script: list[Any] = [
        [function_call("sdk_look", {"q": f"o{n}"}, call_id=f"c{n}")] for n in range(6)
    ] + [[assistant_message("done")]]
    gated = gate_agent(
        SdkAgent(name="looker", model=ScriptedModel(script), tools=[sdk_look]),
        store=store,
        policy=agentrt.default_policy(),
        classifications={"sdk_look": Classification("read_only", timeout=5)},
    ).new_run()
    assert asyncio.run(Runner.run(gated.agent, "look")).final_output == "done"

    assert ran == [f"p{n}" for n in range(6)] + [f"o{n}" for n in range(6)]
    assert spy.reads.count("list_steps") == 0
    assert all(r.status == "COMPLETED" for r in store.list_runs())


# --- a reason that is not valid UTF-8 (review of issue 18 item 9, finding 2) -------------

LONE = "call-\ud800-x"  # a lone surrogate: what a JSON answer's "id": "call-\ud800-x" decodes to


def test_a_reason_that_is_not_valid_utf8_matches_no_step_and_never_raises(any_store: Store) -> None:
    store = any_store
    gate = make_gate(store, read_tool(), clock=FakeClock(), ids=Ids("a"))
    session = gate.begin_sync("look things up", agentrt.Limits(max_steps=5))
    for n, reason in enumerate(["call c1", LONE, "x" * 300 + "\ud800"]):
        step = session.step_sync()
        assert step is not None
        verdict = step.propose_sync(Decision.tool_call("read", {"x": n}, reason=reason))
        if verdict.outcome == "allowed":
            step.execute_sync()
    run = session.run.id
    session.close_sync()
    # the record refused the two decisions and keeps their reasons escaped, as text
    assert reasons_of(store.list_steps(run, cap=None)) == [
        (0, "call c1"),
        (1, "call-\\ud800-x"),
        (2, "x" * 300 + "\\ud800"),
    ]

    assert steps_with_reasons(store, run, [LONE]) == []  # no recorded reason can equal it
    assert steps_with_reasons(store, run, ["x" * 300 + "\ud800"]) == []  # past the key's head
    assert reasons_of(steps_with_reasons(store, run, [LONE, "call c1"])) == [(0, "call c1")]
    # the escaped text is a reason of its own, found whole as the record holds it
    assert reasons_of(steps_with_reasons(store, run, ["call-\\ud800-x"])) == [(1, "call-\\ud800-x")]


def recorded(store: Store) -> tuple[agentrt.Run, list[tuple[int, str, str]]]:
    """The store's one run, and each step's (index, status, reason)."""
    (run,) = store.list_runs()
    return run, [
        (s.index, s.status, s.decision.reason if s.decision else "")
        for s in store.list_steps(run.id, cap=None)
    ]


def test_a_pydantic_ai_call_id_with_a_lone_surrogate_is_refused_and_the_run_completes(
    any_store: Store,
) -> None:
    store = any_store
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from agentrt.adapters.pydantic_ai import AgentrtGate, Classification

    ran: list[str] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            call = ToolCallPart("write_note", {"text": "hi"}, tool_call_id=LONE)
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("done")])

    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={"write_note": Classification("local_mutation", timeout=5)},
    )
    agent = Agent(
        FunctionModel(answer), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )

    @agent.tool_plain
    def write_note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return "ok"

    assert agent.run_sync("go", metadata=gate.run_metadata()).output == "done"
    run, steps = recorded(store)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert steps[0] == (0, "failed", "pydantic-ai tool call call-\\ud800-x")  # refused, escaped
    assert ran == []  # a refused decision runs nothing


def test_an_agents_sdk_call_id_with_a_lone_surrogate_is_refused_and_the_run_completes(
    any_store: Store,
) -> None:
    store = any_store
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")
    import asyncio

    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentrt.adapters.openai_agents import Classification, gate_agent

    set_tracing_disabled(True)
    ran: list[str] = []

    @function_tool
    def write_note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return "ok"

    script: list[Any] = [
        [function_call("write_note", {"text": "hi"}, call_id=LONE)],
        [assistant_message("done")],
    ]
    gated = gate_agent(
        Agent(name="writer", model=ScriptedModel(script), tools=[write_note]),
        store=store,
        policy=agentrt.default_policy(),
        classifications={"write_note": Classification("local_mutation", timeout=5)},
    ).new_run()
    assert asyncio.run(Runner.run(gated.agent, "go")).final_output == "done"
    run, steps = recorded(store)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert steps[0] == (0, "failed", "openai-agents call_id call-\\ud800-x")  # refused, escaped
    assert ran == []


def test_a_langgraph_call_id_with_a_lone_surrogate_is_refused_and_the_run_completes(
    any_store: Store,
) -> None:
    store = any_store
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from agentrt.adapters.langgraph import Classification, gated_tool_node

    ran: list[str] = []

    @tool
    def write_note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return "ok"

    script = iter(
        [
            AIMessage("", tool_calls=[{"name": "write_note", "args": {"text": "hi"}, "id": LONE}]),
            AIMessage("done"),
        ]
    )
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [next(script)]})
    node = gated_tool_node(
        [write_note],
        store=store,
        policy=agentrt.default_policy(),
        classifications={"write_note": Classification("local_mutation", timeout=5)},
    )
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    out = builder.compile().invoke(
        {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t"}}
    )
    # the model is told of the refusal once and goes on; the turn's run stays open
    assert [m.content for m in out["messages"]][2:] == [
        "Invalid call: decision.reason is not valid UTF-8 text",
        "done",
    ]
    run, steps = recorded(store)
    assert run.status == "RUNNING"  # a LangGraph turn's run is left open between its calls
    assert steps == [(0, "failed", "langgraph tool call call-\\ud800-x")]  # once, not 3 times
    assert ran == []


def test_a_reason_holding_a_nul_is_keyed_whole_and_found(any_store: Store) -> None:
    """A framework's call id may hold a NUL character: the step is keyed by its reason's head
    with each NUL as U+FFFD (never cut at the NUL, as SQLite's `substr` cut it; PostgreSQL
    holds no NUL in a text), and found by that reason alone, not by one sharing its head."""
    store = any_store
    run = record(store, ["note\x001", "note\x002", "note"])
    rows = store.query("SELECT reason_key FROM steps WHERE run_id = ? ORDER BY idx", (run,))
    assert [r[0] for r in rows] == ["note\ufffd1", "note\ufffd2", "note"]
    assert reasons_of(steps_with_reasons(store, run, ["note\x002"])) == [(1, "note\x002")]
    assert reasons_of(steps_with_reasons(store, run, ["note"])) == [(2, "note")]
    assert steps_with_reasons(store, run, ["note\ufffd1"]) == []  # the key is not the reason


def test_a_step_keyed_at_its_nul_before_decision_0143_is_still_found(db_path: Path) -> None:
    """A file written before decision 0143 keyed a reason holding a NUL by its head up to the
    NUL (SQLite's `substr` stopped there): such a step is still found by its whole reason."""
    store = agentrt.open_store(db_path)
    try:
        run = record(store, ["note\x001"])
    finally:
        store.close()
    with raw(db_path) as conn:
        conn.execute("UPDATE steps SET reason_key = 'note' WHERE run_id = ?", (run,))
    store = agentrt.open_store(db_path)
    try:
        assert reasons_of(steps_with_reasons(store, run, ["note\x001"])) == [(0, "note\x001")]
        assert steps_with_reasons(store, run, ["note\x002"]) == []
    finally:
        store.close()
