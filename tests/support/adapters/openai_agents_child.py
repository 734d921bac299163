"""A process of an OpenAI Agents SDK program behind the Gate, for the adapter's process tests.

    python openai_agents_child.py start  DB WORK RUN_ID [--held]
    python openai_agents_child.py resume DB WORK RUN_ID (load_state | from_json) [--approve]
    python openai_agents_child.py fresh  DB WORK RUN_ID

`start` runs the agent (the SDK's own `ScriptedModel` asks to push
`feature/login`, a remote mutation the default policy holds for a person; with
`--held` it also asks, in the same response, to write a note, held behind the
push) and saves `result.to_state().to_json()` to WORK/state.json: the SDK's persistence.
`resume` loads that file through the SDK's resume path (`RunState.from_json`,
directly or through `GatedRun.load_state`) with `gate_agent(...).resume(RUN_ID)`
(a refusal of the run named is printed like any error), optionally approves every
interruption with `state.approve`, and runs it with `Runner.run(agent, state)`.
The push appends one line to WORK/remote.log per real execution (the note, to
WORK/notes.log); when WORK/hang
exists it then writes WORK/started and sleeps, for the parent to SIGKILL;
with `--hang-model` the model's reply after the push writes WORK/model-started
and sleeps instead (a process that dies after the push was recorded).
`fresh` starts a new framework run of RUN_ID with a new input (`run_agent`; its
model would push `main`), not the saved state.
Each process prints one JSON line: what `Runner.run` returned or raised.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import agentrt
from agentrt.adapters.openai_agents import Classification, GatedAgent, gate_agent

set_tracing_disabled(True)  # nothing leaves the machine

CLASSES = {
    "list_branches": Classification("read_only", 5),
    "push_branch": Classification("remote_mutation", 30),
    "write_note": Classification("local_mutation", 30),
}


def make_agent(work: Path, script: list[Any]) -> Agent[Any]:
    remote = work / "remote.log"

    @function_tool
    def list_branches() -> list[str]:
        """List the branches."""
        return ["main", "feature/login"]

    @function_tool
    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        with remote.open("a") as f:
            f.write(branch + "\n")
            f.flush()
        if (work / "hang").exists():
            (work / "started").write_text("started")
            time.sleep(3600)  # the parent SIGKILLs us here, mid-call
        return f"pushed {branch}"

    @function_tool
    def write_note(text: str) -> str:
        """Write a note in the work tree."""
        with (work / "notes.log").open("a") as f:
            f.write(text + "\n")
        return f"noted {text}"

    return Agent(
        name="publisher",
        instructions="Publish the branch you are asked to.",
        model=ScriptedModel(script),
        tools=[list_branches, push_branch, write_note],
    )


def gated(db: Path, work: Path, script: list[Any]) -> GatedAgent:
    return gate_agent(
        make_agent(work, script),
        store=agentrt.open_store(db),
        policy=agentrt.default_policy(),
        classifications=CLASSES,
        goal="publish feature/login",
    )


def summary(result: Any) -> dict[str, Any]:
    return {
        "final_output": result.final_output,
        "interruptions": [
            {"tool": i.tool_name, "call_id": i.call_id, "arguments": i.arguments}
            for i in result.interruptions
        ],
    }


async def start(db: Path, work: Path, run_id: str, held: bool = False) -> dict[str, Any]:
    push = function_call("push_branch", {"branch": "feature/login"}, call_id="call-push")
    note = function_call("write_note", {"text": "login pushed"}, call_id="call-note")
    script = [[push, note] if held else [push]]
    g = gated(db, work, script).new_run(run_id)
    result = await Runner.run(g.agent, "publish feature/login")
    (work / "state.json").write_text(result.to_state().to_string())
    await g.close()
    return summary(result)


async def resume(
    db: Path, work: Path, run_id: str, how: str, approve: bool, hang_model: bool = False
) -> dict[str, Any]:
    async def hang(call: Any) -> Any:
        (work / "model-started").write_text("started")
        await asyncio.sleep(3600)  # the parent SIGKILLs us here, after the push
        return [assistant_message("never")]

    reply = (
        ModelStep.respond(hang) if hang_model else [assistant_message("feature/login is published")]
    )
    text = (work / "state.json").read_text()
    try:
        g = gated(db, work, [reply]).resume(run_id)
        if how == "load_state":
            state = await g.load_state(text)
        else:
            state = await RunState.from_string(g.agent, text)
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    if approve:
        for item in state.get_interruptions():
            state.approve(item)
    try:
        result = await Runner.run(g.agent, state)
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    finally:
        await g.close()
    return summary(result)


async def fresh(db: Path, work: Path, run_id: str) -> dict[str, Any]:
    push = function_call("push_branch", {"branch": "main"}, call_id="call-main")
    g = gated(db, work, [[push], [assistant_message("main is published")]]).resume(run_id)
    try:
        result = await g.run_agent("publish main")
    except Exception as exc:
        out = {"error": type(exc).__name__, "message": str(exc)}
        return dict(out, approval_id=getattr(exc, "approval_id", None))
    return summary(result)


def main() -> None:
    mode, work, run_id = sys.argv[1], Path(sys.argv[3]), sys.argv[4]
    # The store: a SQLite file's path, or a PostgreSQL URL (kept whole: a Path would
    # lose the `//` after its scheme).
    db: Any = sys.argv[2] if "://" in sys.argv[2] else Path(sys.argv[2])
    if mode == "start":
        out = asyncio.run(start(db, work, run_id, "--held" in sys.argv[5:]))
    elif mode == "fresh":
        out = asyncio.run(fresh(db, work, run_id))
    else:
        flags = sys.argv[6:]
        out = asyncio.run(
            resume(db, work, run_id, sys.argv[5], "--approve" in flags, "--hang-model" in flags)
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
