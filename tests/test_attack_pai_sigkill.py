"""Attack: a real process SIGKILLed after a Pydantic AI tool call was recorded, then retried.

The child is a real Pydantic AI agent on its `FunctionModel` behind `AgentrtGate`, on a
real SQLite file; its model names each call afresh (Pydantic AI's generated ids, as a
provider's), and the program saves its message history only when a run ends, as the
docs' example does (`save(result.all_messages_json(), meta)`). The tool appends a line
to `effects.log` per execution.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")

import agentrt

ROOT = Path(__file__).resolve().parent.parent
RUN = "0" * 31 + "1"

CHILD = r'''
import json, sys, time
from datetime import timedelta
from pathlib import Path
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
import agentrt
from agentrt.adapters import Classification
from agentrt.adapters.pydantic_ai import AgentrtGate

workdir, mode = Path(sys.argv[1]), sys.argv[2]

def answer(messages, info):
    told = any(type(p).__name__ == "ToolReturnPart" for p in messages[-1].parts)
    if not told:
        return ModelResponse(parts=[ToolCallPart("write_note", {"text": "hello"})])
    if mode == "start":
        (workdir / "model-started").write_text("1")
        while True:
            time.sleep(1)
    return ModelResponse(parts=[TextPart("noted")])

store = agentrt.open_store(workdir / "runs.db")
gate = AgentrtGate(
    store=store,
    policy=agentrt.default_policy(),
    classifications={"write_note": Classification("local_mutation", timeout=5)},
    lease_ttl=timedelta(seconds=1),
)
agent = Agent(FunctionModel(answer), output_type=[str, DeferredToolRequests], capabilities=[gate])

@agent.tool_plain
def write_note(text: str) -> str:
    """Write a note in the local log."""
    with (workdir / "effects.log").open("a") as f:
        f.write(f"write_note {text}\n")
    return f"noted {text}"

result = agent.run_sync("write the note", metadata=gate.run_metadata(sys.argv[3]))
output = result.output
print(json.dumps({"output": output if isinstance(output, str) else type(output).__name__}))
'''


def effects(workdir: Path) -> list[str]:
    path = workdir / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def child(workdir: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    return subprocess.Popen(
        [sys.executable, str(workdir / "child.py"), str(workdir), mode, RUN],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_a_recorded_change_is_not_run_again_when_the_killed_program_retries_from_its_prompt(
    tmp_path: Path,
) -> None:
    """A program is SIGKILLed after its local change ran and was recorded, before the run
    ended (no history saved yet); it retries with its prompt and the same metadata, and
    the model, not having seen the return, makes the same call again under a new id: today
    the change runs a second time with nobody asked and nothing in the record saying it is
    a repeat; a recorded call should not be run again on the runtime's say alone."""
    (tmp_path / "child.py").write_text(CHILD)
    proc = child(tmp_path, "start")
    deadline = time.monotonic() + 60
    while not (tmp_path / "model-started").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert effects(tmp_path) == ["write_note hello"]
    with agentrt.open_store(tmp_path / "runs.db") as store:
        (step,) = store.list_steps(RUN)
        assert (step.status, store.get_run(RUN).status) == ("done", "RUNNING")
    time.sleep(1.5)  # the dead owner's short lease lapses
    retry = child(tmp_path, "retry")
    out, err = retry.communicate(timeout=120)
    assert retry.returncode == 0, err
    json.loads(out.splitlines()[-1])
    assert effects(tmp_path) == ["write_note hello"]
