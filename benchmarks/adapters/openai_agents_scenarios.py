"""Issue 11's three scenarios, run with the OpenAI Agents SDK alone and with the agentrt adapter.

Each scenario runs the same program in real processes, once with the SDK's own
human-in-the-loop (`@function_tool(needs_approval=True)`, `RunState` saved as
JSON, `state.approve`, `Runner.run(agent, state)`) and once with the same agent
behind `agentrt.adapters.openai_agents.gate_agent`. The model is the SDK's own
`ScriptedModel`. Every real execution of the push appends a line to a file;
the table counts those lines.

1. A remote change needing approval: the program stops at the interruption and
   saves its state; a person approves; the program resumes.
2. A crash mid-call: the approved push is running when its process is SIGKILLed;
   the program is started again and does what it did before: loads its saved
   state, approves what the person approved, `Runner.run`. Then (adapter only,
   since the SDK alone has already run it again) a person approves the
   interrupted call through `agentrt approve` and the program resumes once more.
3. A tampered approval: after the person approved `feature/login`, the saved
   state is edited to push `main` (its SDK fingerprint recomputed, which anyone
   who can edit the file can do); the program resumes.

    python benchmarks/adapters/openai_agents_scenarios.py

prints a markdown table (docs/adapters.md shows its output).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _children
from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import agentrt
from agentrt.adapters.openai_agents import Classification, gate_agent

set_tracing_disabled(True)  # nothing leaves the machine

RUN_ID = "5c" * 16
BRANCH = "feature/login"
SCRIPT = Path(__file__).resolve()


# -- the program (one process of it) -------------------------------------------


def make_agent(work: Path, alone: bool, script: list[Any]) -> Agent[Any]:
    remote = work / "remote.log"

    def push(branch: str) -> str:
        with remote.open("a") as f:
            f.write(branch + "\n")
            f.flush()
        if (work / "hang").exists():
            (work / "started").write_text("started")
            time.sleep(3600)  # SIGKILLed here, mid-call
        return f"pushed {branch}"

    push.__doc__ = "Push a branch to the remote."
    # Alone, the SDK's own human-in-the-loop asks a person for every push.
    tool = function_tool(push, name_override="push_branch", needs_approval=alone)
    return Agent(name="publisher", model=ScriptedModel(script), tools=[tool])


def program(alone: bool, db: Path, work: Path, script: list[Any], fresh: bool = False) -> Any:
    """The SDK agent alone, or gated and naming its agentrt run (new when `fresh`, else resumed)."""
    agent = make_agent(work, alone, script)
    if alone:
        return agent, None
    gate = gate_agent(
        agent,
        store=agentrt.open_store(db),
        policy=agentrt.default_policy(),
        classifications={"push_branch": Classification("remote_mutation", timeout=30)},
        goal=f"publish {BRANCH}",
    )
    gated = gate.new_run(RUN_ID) if fresh else gate.resume(RUN_ID)
    return gated.agent, gated


async def start(alone: bool, db: Path, work: Path) -> dict[str, Any]:
    script = [[function_call("push_branch", {"branch": BRANCH}, call_id="call-push")]]
    agent, gated = program(alone, db, work, script, fresh=True)
    result = await Runner.run(agent, f"publish {BRANCH}")
    (work / "state.json").write_text(result.to_state().to_string())
    if gated is not None:
        await gated.close()
    return {"interruptions": len(result.interruptions)}


async def resume(alone: bool, db: Path, work: Path, approve: bool) -> dict[str, Any]:
    """Load the saved state through the SDK's resume path, approve as told, run."""
    agent, gated = program(alone, db, work, [[assistant_message("published")]])
    text = (work / "state.json").read_text()
    if gated is not None:
        state = await gated.load_state(text)
    else:
        state = await RunState.from_string(agent, text)
    if approve:
        for item in state.get_interruptions():
            state.approve(item)  # the person approved this request
        (work / "state.json").write_text(state.to_string())
    try:
        result = await Runner.run(agent, state)
    except Exception as exc:
        return {"raised": type(exc).__name__}
    finally:
        if gated is not None:
            await gated.close()
    return {"final_output": result.final_output, "interruptions": len(result.interruptions)}


def child_main(argv: list[str]) -> None:
    step, variant, db, work = argv[0], argv[1], Path(argv[2]), Path(argv[3])
    alone = variant == "alone"
    if step == "start":
        out = asyncio.run(start(alone, db, work))
    else:
        out = asyncio.run(resume(alone, db, work, approve=step == "approve-and-resume"))
    print(json.dumps(out))


# -- the scenarios (the parent) ----------------------------------------------------


def child(step: str, variant: str, work: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(SCRIPT), "child", step, variant, str(work / "runs.db"), str(work)]
    done = _children.run(cmd, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"{step} ({variant}) failed: {done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def executions(work: Path) -> int:
    remote = work / "remote.log"
    return len(remote.read_text().splitlines()) if remote.exists() else 0


def pushed(work: Path) -> list[str]:
    remote = work / "remote.log"
    return remote.read_text().splitlines() if remote.exists() else []


def agentrt_approve(work: Path) -> None:
    cmd = [sys.executable, "-m", "agentrt", "approve", RUN_ID, "--db", str(work / "runs.db")]
    done = _children.run([*cmd, "--yes", "--by", "operator"], timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"agentrt approve failed: {done.stderr}")


def remote_change(variant: str, work: Path) -> dict[str, Any]:
    child("start", variant, work)
    before = executions(work)
    out = child("approve-and-resume", variant, work)
    return {"before": before, "after": executions(work), "outcome": out}


def crash(variant: str, work: Path) -> dict[str, Any]:
    child("start", variant, work)
    (work / "hang").write_text("")
    cmd = [sys.executable, str(SCRIPT), "child", "approve-and-resume", variant]
    proc = _children.popen([*cmd, str(work / "runs.db"), str(work)])
    deadline = time.monotonic() + 60
    while not (work / "started").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the push never started")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (work / "hang").unlink()
    at_crash = executions(work)
    restart = child("approve-and-resume", variant, work)  # the program, started again
    after_restart = executions(work)
    row: dict[str, Any] = {
        "at_crash": at_crash,
        "unapproved": after_restart - at_crash,
        "restart": restart,
        "after_person": None,
    }
    if variant == "gated":
        store = agentrt.open_existing(work / "runs.db", read_only=True)
        row["pending"] = [a.kind for a in store.pending_approvals(RUN_ID)]
        store.close()
        agentrt_approve(work)  # a person, shown that the call may have taken effect
        child("resume", variant, work)
        row["after_person"] = executions(work) - after_restart
    return row


def tamper(variant: str, work: Path) -> dict[str, Any]:
    from agents._tool_invocation import tool_invocation_identity_and_scope

    child("start", variant, work)
    if variant == "gated":
        agentrt_approve(work)  # the person approves feature/login through agentrt
    state = asyncio.run(_approved_state(variant, work))
    item = state.get_interruptions()[0]
    raw = item.raw_item.model_dump(exclude_none=True)
    changed = dict(raw, arguments=raw["arguments"].replace(BRANCH, "main"))
    old = tool_invocation_identity_and_scope(raw)
    new = tool_invocation_identity_and_scope(changed)
    assert old is not None and new is not None
    text = state.to_string().replace(BRANCH, "main").replace(old[3], new[3])
    (work / "state.json").write_text(text)
    out = child("resume", variant, work)
    return {"pushed": pushed(work), "outcome": out}


async def _approved_state(variant: str, work: Path) -> Any:
    """The state the person approved (the SDK's state.approve; agentrt's carried in)."""
    agent, gated = program(variant == "alone", work / "runs.db", work, [])
    text = (work / "state.json").read_text()
    if gated is not None:
        state = await gated.load_state(text)
        await gated.close()
    else:
        state = await RunState.from_string(agent, text)
        for item in state.get_interruptions():
            state.approve(item)
    return state


def outcome_text(out: dict[str, Any]) -> str:
    if "raised" in out:
        return f"refused: `{out['raised']}`"
    if out.get("interruptions"):
        return "interruption"
    return "completed"


def main() -> None:
    scenarios = {"remote": remote_change, "crash": crash, "tamper": tamper}

    def measure(key: tuple[str, str]) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as tmp:
            return scenarios[key[0]](key[1], Path(tmp))

    # Each scenario has its own directory, database and processes: two at a time.
    keys = [(name, variant) for variant in ("alone", "gated") for name in scenarios]
    with ThreadPoolExecutor(max_workers=2) as pool:
        r = dict(zip(keys, pool.map(measure, keys), strict=True))
    rows = [
        (
            "remote change needing approval",
            "pushes before the person approved",
            r[("remote", "alone")]["before"],
            r[("remote", "gated")]["before"],
        ),
        (
            "",
            "pushes after the approval and the resume",
            r[("remote", "alone")]["after"],
            r[("remote", "gated")]["after"],
        ),
        (
            "crash mid-call (SIGKILL during the push)",
            "pushes when the process died",
            r[("crash", "alone")]["at_crash"],
            r[("crash", "gated")]["at_crash"],
        ),
        (
            "",
            "unapproved re-executions when the program resumes its saved state",
            r[("crash", "alone")]["unapproved"],
            r[("crash", "gated")]["unapproved"],
        ),
        (
            "",
            "what that resume did",
            outcome_text(r[("crash", "alone")]["restart"]),
            outcome_text(r[("crash", "gated")]["restart"])
            + f"; waits on `{', '.join(r[('crash', 'gated')]['pending'])}`",
        ),
        (
            "",
            "pushes after a person approves the interrupted call",
            "n/a (already ran again)",
            r[("crash", "gated")]["after_person"],
        ),
        (
            "tampered approval (`feature/login` approved, state edited to `main`)",
            "branches pushed on resume",
            ", ".join(r[("tamper", "alone")]["pushed"]) or "none",
            ", ".join(r[("tamper", "gated")]["pushed"]) or "none",
        ),
        (
            "",
            "what the resume did",
            outcome_text(r[("tamper", "alone")]["outcome"]),
            outcome_text(r[("tamper", "gated")]["outcome"]),
        ),
    ]
    print("| scenario | measured | Agents SDK alone | with `agentrt.adapters.openai_agents` |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2:])
    else:
        main()
