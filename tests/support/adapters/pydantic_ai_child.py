"""A Pydantic AI agent over a local stand-in for a git remote, gated by agentrt or not.

Used in process by tests/test_adapter_pydantic_ai.py and as a child process
(`python pydantic_ai_child.py WORKDIR start|resume [--bare] [--hang-model]`) by the
two-process, SIGKILL and scenario tests. The model is Pydantic AI's own
`FunctionModel` playing a script: its n-th answer is `SCRIPTS[name][n]`, where
n counts the answers already in the message history, so a run resumed from a
saved history goes on where it stopped. Every tool appends one line to
`WORKDIR/effects.log` when it acts: the lines are the executions.

The program persists what a Pydantic AI user persists: the message history
after every node (`history.json`), and the deferred requests a run ended with
(`requests.json`); a resume reads the history and, when present,
`results.json` (the `DeferredToolResults` a person produced).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

import agentrt
from agentrt.adapters import Classification
from agentrt.adapters.pydantic_ai import AgentrtGate

REQUESTS = TypeAdapter(DeferredToolRequests)
RESULTS = TypeAdapter(DeferredToolResults)

CLASSES = {
    "list_branches": Classification("read_only", timeout=5),
    "write_note": Classification("local_mutation", timeout=5),
    "push_branch": Classification("remote_mutation", timeout=60),
    "delete_branch": Classification("destructive", timeout=5),
}

Turn = list[tuple[str, dict[str, Any], str] | str] | str
"""A text answer, or the parts of a response: tool calls (name, args, id) and texts."""

LONG_BRANCH = "feature/" + "x" * 100_000

SCRIPTS: dict[str, list[Turn]] = {
    "long": [[("push_branch", {"branch": LONG_BRANCH}, "call-long")], "pushed"],
    "push": [[("push_branch", {"branch": "feature/login"}, "call-push")], "pushed"],
    "note": [[("write_note", {"text": "hello"}, "call-note")], "noted"],
    "allow": [
        [("list_branches", {}, "call-list")],
        [("write_note", {"text": "hello"}, "call-note")],
        "done",
    ],
    "deny": [[("delete_branch", {"branch": "main"}, "call-delete")], "gave up"],
    "invalid": [
        [("write_note", {"txt": 7}, "call-bad")],
        [("write_note", {"text": "fixed"}, "call-good")],
        "done",
    ],
    "unparsed": [
        [("write_note", '{"text": ', "call-raw")],
        [("write_note", {"text": "fixed"}, "call-good")],
        "done",
    ],
    "together": [
        [
            ("write_note", {"text": "one"}, "c1"),
            ("write_note", {"text": "two"}, "c2"),
            ("list_branches", {}, "c3"),
        ],
        "done",
    ],
    "loop": [[("write_note", {"text": f"n{i}"}, f"call-{i}")] for i in range(10)],
    # A call the policy allows, made after one that waits for a person: held.
    "held": [
        [
            ("push_branch", {"branch": "feature/login"}, "call-push"),
            ("write_note", {"text": "pushed login"}, "call-note"),
        ],
        "done",
    ],
    # A text beside a call that waits (`run_stream` takes the text as the output).
    "announce": [["pushing now", ("push_branch", {"branch": "feature/login"}, "call-push")], "ok"],
    # A call that waits, then (whatever the person said) a call in a later response.
    "push-then-note": [
        [("push_branch", {"branch": "feature/login"}, "call-push")],
        [("write_note", {"text": "after the push"}, "call-note")],
        "done",
    ],
    # A call that runs, then one that waits, in the same response.
    "note-then-push": [
        [
            ("write_note", {"text": "pushing login"}, "call-note"),
            ("push_branch", {"branch": "feature/login"}, "call-push"),
        ],
        "done",
    ],
    # A held call that waits for a person itself when its turn comes.
    "held-push": [
        [
            ("push_branch", {"branch": "feature/login"}, "call-push"),
            ("push_branch", {"branch": "feature/signup"}, "call-push2"),
        ],
        "pushed",
    ],
}


def tools(workdir: Path, *, bare: bool = False) -> FunctionToolset[Any]:
    """Four tools; each appends `name args` to effects.log when it acts.

    `push_branch` waits, after acting, while `WORKDIR/hold` exists (a SIGKILL
    lands there: the effect happened, its outcome was never recorded). `bare`
    marks it `requires_approval`, Pydantic AI's own human-in-the-loop.
    """
    effects = workdir / "effects.log"

    def act(line: str) -> None:
        with effects.open("a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def list_branches() -> list[str]:
        """List the branches."""
        return ["main", "feature/login"]

    @toolset.tool_plain
    def write_note(text: str) -> str:
        """Write a note in the local log."""
        act(f"write_note {text}")
        return f"noted {text}"

    @toolset.tool_plain(requires_approval=bare)
    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        act(f"push_branch {branch}")
        (workdir / "acted").write_text("1")
        while (workdir / "hold").exists():
            time.sleep(0.05)
        return f"pushed {branch}"

    @toolset.tool_plain
    def delete_branch(branch: str) -> str:
        """Delete a branch."""
        act(f"delete_branch {branch}")
        return f"deleted {branch}"

    return toolset


def model(
    script: list[Turn], heard: list[str] | None = None, hang: Path | None = None
) -> FunctionModel:
    """The scripted model: the n-th answer after n answers in the history.

    It answers streamed requests too (`run_stream`, `run_stream_events`): the
    same answer, a text in two chunks or each tool call in one.

    With `hang` (a work directory), the model never answers once it is told a
    tool's return: it writes `hang/model-started` and waits to be killed there,
    after the tool's outcome was recorded and before any history holding the
    return was saved.
    """

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if hang is not None and any(
            type(p).__name__ == "ToolReturnPart" for p in getattr(messages[-1], "parts", [])
        ):
            (hang / "model-started").write_text("1")
            while True:
                time.sleep(1)
        if heard is not None:
            last = messages[-1]
            heard.extend(
                f"{type(p).__name__}:{getattr(p, 'outcome', '')}:{getattr(p, 'content', '')}"
                for p in getattr(last, "parts", [])
                if type(p).__name__ in ("ToolReturnPart", "RetryPromptPart")
            )
        n = sum(isinstance(m, ModelResponse) for m in messages)
        turn = script[min(n, len(script) - 1)]
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(
            parts=[
                TextPart(part)
                if isinstance(part, str)
                else ToolCallPart(*part[:2], tool_call_id=part[2])
                for part in turn
            ]
        )

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        response = answer(messages, info)
        for index, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                half = len(part.content) // 2
                yield part.content[:half]
                yield part.content[half:]
            elif isinstance(part, ToolCallPart):
                args = part.args if isinstance(part.args, str) else json.dumps(part.args)
                yield {index: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}

    return FunctionModel(answer, stream_function=stream)


def agent(
    workdir: Path,
    script: str,
    *,
    gate: AgentrtGate | None,
    heard: list[str] | None = None,
    hang: bool = False,
) -> Agent[None, str | DeferredToolRequests]:
    capabilities = [gate] if gate is not None else []
    return Agent(
        model(SCRIPTS[script], heard, workdir if hang else None),
        output_type=[str, DeferredToolRequests],
        toolsets=[tools(workdir, bare=gate is None)],
        capabilities=capabilities,
    )


async def drive(
    the_agent: Agent[None, str | DeferredToolRequests],
    workdir: Path,
    *,
    prompt: str | None,
    metadata: dict[str, str] | None,
    resume: bool,
) -> Any:
    """Run (or resume) the agent, saving the history after every node as a user would."""
    history = None
    results = None
    if resume:
        history = ModelMessagesTypeAdapter.validate_json((workdir / "history.json").read_bytes())
        if (workdir / "results.json").exists():
            results = RESULTS.validate_json((workdir / "results.json").read_bytes())
    async with the_agent.iter(
        prompt,
        message_history=history,
        deferred_tool_results=results,
        metadata=metadata,
    ) as run:
        async for _node in run:
            (workdir / "history.json").write_bytes(
                ModelMessagesTypeAdapter.dump_json(run.all_messages())
            )
        assert run.result is not None
        (workdir / "history.json").write_bytes(
            ModelMessagesTypeAdapter.dump_json(run.all_messages())
        )
        output = run.result.output
    if isinstance(output, DeferredToolRequests):
        (workdir / "requests.json").write_bytes(REQUESTS.dump_json(output))
    (workdir / "results.json").unlink(missing_ok=True)
    return output


def main(argv: list[str]) -> int:
    workdir, mode = Path(argv[0]), argv[1]
    bare = "--bare" in argv
    config = json.loads((workdir / "config.json").read_text())
    script = config["script"]
    store = None
    gate = None
    metadata = None
    if not bare:
        store = agentrt.open_store(config.get("database") or workdir / "runs.db")
        gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications=CLASSES)
        metadata = gate.run_metadata(config["run_id"])
    the_agent = agent(workdir, script, gate=gate, hang="--hang-model" in argv)
    prompt = "publish the login branch" if mode == "start" else None
    try:
        output = asyncio.run(
            drive(the_agent, workdir, prompt=prompt, metadata=metadata, resume=mode == "resume")
        )
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        return 3
    finally:
        if store is not None:
            store.close()
    if isinstance(output, DeferredToolRequests):
        print(json.dumps({"deferred": [c.tool_call_id for c in output.approvals]}))
        return 2
    print(json.dumps({"output": output}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
