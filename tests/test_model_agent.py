"""ModelAgent, a whole model-driven run recorded and replayed, and examples/live.py."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import threading
from dataclasses import replace
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import (
    Decision,
    ModelConfig,
    ModelResponse,
    ModelUnavailableError,
    Price,
    SideEffect,
    StepInput,
    ToolUseBlock,
    TransientModelError,
    Usage,
)
from agentrt.model_agent import ModelAgent
from agentrt.render import RenderOptions, messages, request_bytes
from agentrt.replay import Recorder, Replayer, ScriptedModel
from conftest import FakeClock, Ids, RecordingTool
from support import forkserver
from support.examples import run_example

ROOT = Path(__file__).resolve().parent.parent


def calls(name: str, args: Any, text: str = "", raw: bytes = b"") -> ModelResponse:
    use = ToolUseBlock(f"toolu_{name}", name, args)
    return ModelResponse(text, (use,), "tool_use", Usage(120, 30, 20), raw)


def says(text: str) -> ModelResponse:
    return ModelResponse(text, (), "end_turn", Usage(90, 10, 0), b"")


def step_input(model: Any, goal: str = "sort the inbox") -> StepInput:
    run = agentrt.Run("r", goal, "RUNNING", "", "", agentrt.Limits(), 0, None, None, None, None)
    deciding = agentrt.Step("s0", "r", 0, "deciding", None, None, None, None, None)
    spec = RecordingTool("read", SideEffect.READ_ONLY).spec
    return StepInput(run=run, steps=(deciding,), approvals=(), tools=(spec,), model=model)


# --------------------------------------------------------------------------- the agent


def test_model_agent_renders_asks_once_and_decodes_the_reply() -> None:
    options = RenderOptions(system="short", max_output_tokens=256, max_reason=100)
    model = ScriptedModel([calls("read", {"x": 1}, text="r" * 500)])
    input = step_input(model)
    decision = asyncio.run(ModelAgent(options).decide(input))
    (request,) = model.requests
    assert request_bytes(request) == request_bytes(messages(input, options))
    assert decision.kind == "tool_call" and decision.tool == "read" and decision.args == {"x": 1}
    assert decision.origin == "model" and len(decision.reason) <= 100


def test_model_agent_without_a_model_is_model_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailableError, match="no model configured"):
        asyncio.run(ModelAgent().decide(step_input(None)))
    store = agentrt.open_store(tmp_path / "runs.db")
    driver = agentrt.Driver(
        store=store,
        agent=ModelAgent(),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("read", SideEffect.READ_ONLY)],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("anything")
    assert (run.status, run.reason, run.reason_detail) == (
        "FAILED",
        "model_unavailable",
        "no model configured",
    )
    store.close()


# --------------------------------------------------------------------------- recorded and replayed

SCRIPT: list[Any] = [
    TransientModelError("overloaded", retry_after=0.001),  # retried: a second attempt row
    calls("read", {"x": 1}, text="First I look.", raw=b"\x00\xff raw provider bytes"),
    calls("delete", {"x": 2}, text="Then I clean up."),  # destructive: denied
    says("I think that is all."),  # no tool call: refused, the model is nudged
    calls("push", {"x": 3}, text="Now I push."),  # remote: waits for a person
    calls("finish", {"x": 4}, text="Done."),  # terminal: completes the run
]


def tools() -> list[RecordingTool]:
    return [
        RecordingTool("read", SideEffect.READ_ONLY, result={"lines": ["a", "b"]}),
        RecordingTool("delete", SideEffect.DESTRUCTIVE),
        RecordingTool("push", SideEffect.REMOTE_MUTATION, result={"pushed": 3}),
        RecordingTool("finish", SideEffect.READ_ONLY, terminal=True),
    ]


def drive(path: Path, model: agentrt.Model) -> tuple[agentrt.Run, list[RecordingTool]]:
    """The whole run: start, pause for approval, approve, resume to completion."""
    store = agentrt.open_store(path)
    used = tools()
    driver = agentrt.Driver(
        store=store,
        agent=ModelAgent(),
        policy=agentrt.default_policy(),
        tools=used,
        model=ModelConfig(model=model, prices=Price.free(), max_retries=1, backoff=timedelta(0)),
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("tidy and push the notes")
    assert run.status == "WAITING_FOR_APPROVAL", run
    (approval,) = store.pending_approvals(run.id)
    driver.approve(run.id, approval.id, by="ops", note="fine")
    run = driver.resume_sync(run.id)
    store.close()
    return run, used


def rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        tables = ("runs", "steps", "approvals", "events", "model_calls", "tool_specs")
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in tables}
    finally:
        conn.close()


def test_a_recorded_model_run_replays_to_identical_rows_and_events(tmp_path: Path) -> None:
    provider = ScriptedModel(SCRIPT, name="local:model")
    recorded, used = drive(tmp_path / "recorded.db", Recorder(provider, tmp_path / "rec"))
    assert (recorded.status, recorded.reason) == ("COMPLETED", "goal_completed")
    assert recorded.result == {"echo": {"x": 4}}
    assert len(provider.requests) == len(SCRIPT)

    replayer = Replayer(tmp_path / "rec", "local:model")
    replayed, replayed_tools = drive(tmp_path / "replayed.db", replayer)
    assert replayer.unplayed() == {}
    assert rows(tmp_path / "replayed.db") == rows(tmp_path / "recorded.db")
    # The tools ran the same way, and the one the policy denied never ran.
    assert [len(t.calls) for t in replayed_tools] == [len(t.calls) for t in used] == [1, 0, 1, 1]

    # What the rows say happened, so "identical" is not identical emptiness.
    table = rows(tmp_path / "replayed.db")
    store = agentrt.open_existing(tmp_path / "replayed.db", read_only=True)
    steps = store.list_steps(replayed.id)
    observations = [s.observation.kind if s.observation else None for s in steps]
    assert observations == [
        "tool_result",
        "policy_denied",
        "invalid_decision",
        "tool_result",
        "tool_result",
    ]
    model_calls = store.list_model_calls(replayed.id)
    assert [(c.attempt, c.status, c.model) for c in model_calls] == [
        (1, "error", "local:model"),
        (2, "ok", "local:model"),
        (1, "ok", "local:model"),
        (1, "ok", "local:model"),
        (1, "ok", "local:model"),
        (1, "ok", "local:model"),
    ]
    assert len(table["events"]) == len(store.list_events(limit=10_000))
    assert store.verify_events().intact
    store.close()

    # The model was told what became of each step: the denial and the nudge are in
    # the last request it received.
    last = provider.requests[-1].to_json()["messages"]
    texts = [b.get("content", b.get("text")) for m in last for b in m["content"]]
    assert any("This call was denied, so it did not run." in str(t) for t in texts)
    assert any(
        "Every reply must call exactly one tool; to finish, call 'finish'." in str(t) for t in texts
    )


def test_a_replay_that_asks_for_more_than_was_recorded_ends_the_run(tmp_path: Path) -> None:
    provider = ScriptedModel(SCRIPT, name="local:model")
    drive(tmp_path / "recorded.db", Recorder(provider, tmp_path / "rec"))
    # Another goal renders another opening message: no request matches a recording.
    store = agentrt.open_store(tmp_path / "other.db")
    driver = agentrt.Driver(
        store=store,
        agent=ModelAgent(),
        policy=agentrt.default_policy(),
        tools=tools(),
        model=Replayer(tmp_path / "rec", "local:model"),
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("a goal never recorded")
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert "ReplayMissError: no recording for request" in run.reason_detail
    store.close()


# --------------------------------------------------------------------------- examples/live.py


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_live_example_says_what_to_start_when_no_server_answers(tmp_path: Path) -> None:
    env = {**os.environ, "AGENTRT_LIVE_URL": f"http://127.0.0.1:{closed_port()}"}
    live = ROOT / "examples" / "live.py"
    result = run_example(live, "--db", str(tmp_path / "live.db"), env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "No model server answered" in result.stdout
    assert "ollama serve" in result.stdout and "AGENTRT_LIVE_URL" in result.stdout
    assert not (tmp_path / "live.db").exists()


ROUTES = {
    # kind: (models listing, chat endpoint, URL suffix given to the example)
    "openai": ("/v1/models", "/v1/chat/completions", "/v1"),
    "ollama": ("/api/tags", "/api/chat", ""),
}


class FakeServer:
    """A local HTTP server that plays an OpenAI-compatible or an Ollama provider: a
    scripted reply per chat request, in order; every request body kept."""

    def __init__(self, kind: str, replies: list[dict[str, Any]]) -> None:
        self.replies = replies
        self.bodies: list[Any] = []
        listing, chat, suffix = ROUTES[kind]
        listed = [{"id": "fake-7b"}] if kind == "openai" else [{"name": "fake-7b"}]
        models = {"data" if kind == "openai" else "models": listed}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == listing:
                    self.send(200, models)
                else:
                    self.send(404, {"error": "not found"})

            def do_POST(self) -> None:
                length = int(self.headers["content-length"])
                owner.bodies.append(json.loads(self.rfile.read(length)))
                if self.path != chat or len(owner.bodies) > len(owner.replies):
                    self.send(400, {"error": "unexpected request"})
                    return
                self.send(200, owner.replies[len(owner.bodies) - 1])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{suffix}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def reply_calling(kind: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """One chat reply calling `tool`, in the shape the provider `kind` sends."""
    if kind == "ollama":
        function = {"name": tool, "arguments": args}
        return {
            "model": "fake-7b",
            "message": {"role": "assistant", "content": "", "tool_calls": [{"function": function}]},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 200,
            "eval_count": 20,
        }
    function = {"name": tool, "arguments": json.dumps(args)}
    call = {"id": f"call_{tool}", "type": "function", "function": function}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 200, "completion_tokens": 20},
    }


CHECKLIST = (
    "- [ ] buy milk\n- [ ] reply to Ana about the offsite\n- [ ] renew the TLS certificate\n"
)


def live_replies(kind: str) -> list[dict[str, Any]]:
    return [
        reply_calling(kind, "read_file", {"path": "notes/inbox.txt"}),
        reply_calling(kind, "write_file", {"path": "notes/checklist.md", "content": CHECKLIST}),
        reply_calling(kind, "finish", {"summary": "three items as a checklist"}),
    ]


ADAPTERS = {"openai": "agentrt.providers.openai_compat", "ollama": "agentrt.providers.ollama"}


def run_live(url: str, *args: str) -> forkserver.Done:
    """examples/live.py in a process of its own, stdin /dev/null (no terminal), forked from
    a prepared process (tests/support/examples.py): its answers are judged here, not the
    interpreter's start."""
    env = {**os.environ, "AGENTRT_LIVE_URL": url}
    env.pop("AGENTRT_LIVE_MODEL", None)
    return run_example(ROOT / "examples" / "live.py", *args, env=env, timeout=60)


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_live_example_runs_against_a_local_server(tmp_path: Path, kind: str) -> None:
    pytest.importorskip(ADAPTERS[kind])
    with FakeServer(kind, live_replies(kind)) as server:
        result = run_live(server.url, "--db", str(tmp_path / "live.db"), "--approve")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Using {kind}:fake-7b at {server.url}" in result.stdout
    assert "The run waits for your approval (change)" in result.stdout
    assert ": COMPLETED (goal_completed)" in result.stdout
    assert (tmp_path / "work" / "notes" / "checklist.md").read_text() == CHECKLIST
    assert len(server.bodies) == 3
    # The model saw the file it asked for, as the result of its own call.
    tool_turns = [m for m in server.bodies[1]["messages"] if m["role"] == "tool"]
    assert len(tool_turns) == 1 and "buy milk" in tool_turns[0]["content"]


def test_live_example_without_a_terminal_leaves_the_run_waiting_to_resume(
    tmp_path: Path,
) -> None:
    pytest.importorskip(ADAPTERS["openai"])
    db = tmp_path / "live.db"
    with FakeServer("openai", live_replies("openai")) as server:
        first = run_live(server.url, "--db", str(db))
        assert first.returncode == 0, first.stdout + first.stderr
        assert "No terminal to ask on" in first.stdout
        store = agentrt.open_store(db)
        (run,) = store.list_runs(limit=10)
        assert run.status == "WAITING_FOR_APPROVAL"
        assert f"--resume {run.id}" in first.stdout
        (approval,) = store.pending_approvals(run.id)
        agentrt.approve(store, run.id, approval.id, by="test")
        store.close()
        second = run_live(server.url, "--db", str(db), "--resume", run.id)
    assert second.returncode == 0, second.stdout + second.stderr
    assert ": COMPLETED (goal_completed)" in second.stdout
    assert (tmp_path / "work" / "notes" / "checklist.md").read_text() == CHECKLIST


def test_model_agent_decides_through_a_closure_model_as_well() -> None:
    # An agent wrapping ModelAgent can supply its own model (no accounting caller).
    model = ScriptedModel([says("nothing to do")])
    agent = ModelAgent()

    async def decide(input: StepInput) -> Decision:
        return await agent.decide(replace(input, model=model))

    decision = asyncio.run(decide(step_input(None)))
    assert decision == Decision(kind="no_tool_call", reason="nothing to do", origin="model")


def test_live_example_given_a_db_that_is_not_a_database_says_so_in_one_sentence(
    tmp_path: Path,
) -> None:
    pytest.importorskip(ADAPTERS["openai"])
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("my notes\n")
    not_a_db.chmod(0o600)
    with FakeServer("openai", live_replies("openai")) as server:
        result = run_live(server.url, "--db", str(not_a_db), "--approve")
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr == (
        f"live.py: --db {not_a_db}: cannot open {not_a_db}: file is not a database\n"
    )
    assert not_a_db.read_text() == "my notes\n"
    assert server.bodies == []  # no model request made
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no work folder
