"""The Pydantic AI adapter: every tool call of a real Pydantic AI agent through the Gate.

The agent is Pydantic AI's own, driven by its `FunctionModel` playing a script
(tests/support/adapters/pydantic_ai_child.py); the tools append a line to a
file when they act, so the lines are the executions. Child processes run the
same program, started, resumed, approved from another process and SIGKILLed.

Every test that touches a store takes `database` and runs on SQLite and on PostgreSQL
(issue 21 item 5); the child processes and the `agentrt` command get the store by its
name (the child's config.json), and only the example and the scenario script, each
with files of its own, stay on SQLite.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")

from pydantic_ai import (
    AgentRunResultEvent,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ToolReturnPart

import agentrt
from agentrt.adapters import Classification, UnclassifiedToolError
from agentrt.adapters.pydantic_ai import (
    RUN_ID_KEY,
    AgentrtGate,
    GateLimitExceeded,
    RunEndedError,
    approved,
)
from conftest import event_types
from support import forkserver
from support.adapters import assert_table_printed_in_docs
from support.adapters import pydantic_ai_child as child
from support.adapters.pydantic_ai_child import CLASSES, REQUESTS, RESULTS
from support.approvals import a_person_decides, assert_the_persons_decision_stands

CHILD = Path(child.__file__)
ROOT = Path(__file__).resolve().parent.parent
RUN = "0" * 31 + "1"
BY = ("--yes", "--by", "alice")


def effects(workdir: Path) -> list[str]:
    path = workdir / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def steps(store: agentrt.Store, run_id: str = RUN) -> list[tuple[str, str, str]]:
    """(tool or decision kind, step status, observation kind) per step, in order."""
    out = []
    for s in store.list_steps(run_id):
        assert s.decision is not None
        out.append(
            (
                s.decision.tool or s.decision.kind,
                str(s.status),
                str(s.observation.kind) if s.observation else "",
            )
        )
    return out


def make_gate(store: agentrt.Store, **kw: Any) -> AgentrtGate:
    return AgentrtGate(store=store, policy=agentrt.default_policy(), classifications=CLASSES, **kw)


def run_script(
    tmp_path: Path, script: str, database: str | None = None, **kw: Any
) -> tuple[agentrt.Store, list[str], Any]:
    store = agentrt.open_store(database or tmp_path / "runs.db")
    gate = make_gate(store, **kw)
    heard: list[str] = []
    agent = child.agent(tmp_path, script, gate=gate, heard=heard)
    result = agent.run_sync("tidy the repo", metadata=gate.run_metadata(RUN))
    return store, heard, result


# -- in one process -------------------------------------------------------------


def test_allowed_calls_run_once_each_and_the_output_completes_the_run(
    database: str,
    tmp_path: Path,
) -> None:
    store, heard, result = run_script(tmp_path, "allow", database=database)
    assert result.output == "done"
    assert effects(tmp_path) == ["write_note hello"]
    assert heard == [
        "ToolReturnPart:success:['main', 'feature/login']",
        "ToolReturnPart:success:noted hello",
    ]
    assert steps(store) == [
        ("list_branches", "done", "tool_result"),
        ("write_note", "done", "tool_result"),
        ("complete", "done", ""),
    ]
    run = store.get_run(RUN)
    assert (run.status, run.reason, run.result) == ("COMPLETED", "goal_completed", "done")
    (first, second, _) = store.list_steps(RUN)
    assert first.decision is not None and second.decision is not None
    assert (first.decision.args, first.decision.reason) == ({}, "pydantic-ai tool call call-list")
    assert second.decision.args == {"text": "hello"}
    assert second.observation is not None and second.observation.content == "noted hello"
    assert store.verify_events().intact


def test_a_denied_call_never_runs_and_the_model_sees_the_frameworks_tool_failure(
    database: str,
    tmp_path: Path,
) -> None:
    store, heard, result = run_script(tmp_path, "deny", database=database)
    assert result.output == "gave up"
    assert effects(tmp_path) == []
    assert heard == ["ToolReturnPart:failed:destructive tools are denied by the default policy"]
    assert steps(store) == [
        ("delete_branch", "failed", "policy_denied"),
        ("complete", "done", ""),
    ]


def test_schema_invalid_args_are_recorded_verbatim_and_sent_back_as_a_retry(
    database: str,
    tmp_path: Path,
) -> None:
    store, heard, result = run_script(tmp_path, "invalid", database=database)
    assert result.output == "done"
    assert effects(tmp_path) == ["write_note fixed"]
    assert heard[0] == (
        "ToolReturnPart:retried:args do not match the input schema of 'write_note': "
        "$: 'text' is a required property; $: Additional properties are not allowed "
        "('txt' was unexpected)"
    )
    bad = store.list_steps(RUN)[0]
    assert bad.decision is not None and bad.decision.args == {"txt": 7}
    assert steps(store)[0] == ("write_note", "failed", "invalid_decision")


def test_args_that_are_not_json_are_recorded_as_sent_and_sent_back_as_a_retry(
    database: str,
    tmp_path: Path,
) -> None:
    store, heard, _ = run_script(tmp_path, "unparsed", database=database)
    bad = store.list_steps(RUN)[0]
    assert bad.decision is not None and bad.decision.args == '{"text": '
    assert heard[0].startswith("ToolReturnPart:retried:args do not match the input schema")
    assert effects(tmp_path) == ["write_note fixed"]


def test_an_unclassified_tool_is_refused_before_the_model_is_asked_or_a_run_recorded(
    database: str,
    tmp_path: Path,
) -> None:
    store = agentrt.open_store(database)
    classes = {k: v for k, v in CLASSES.items() if k != "push_branch"}
    gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications=classes)
    heard: list[str] = []
    agent = child.agent(tmp_path, "allow", gate=gate, heard=heard)
    asked: list[int] = []
    refused = pytest.raises(UnclassifiedToolError, match="no classification for tool 'push_branch'")
    with agent.override(model=_counting(agent, asked)), refused:
        agent.run_sync("tidy", metadata=gate.run_metadata(RUN))
    assert asked == []
    assert store.list_runs() == []
    assert effects(tmp_path) == []


def _counting(agent: Any, asked: list[int]) -> Any:
    from pydantic_ai.models.function import FunctionModel

    inner = agent.model
    assert isinstance(inner, FunctionModel)

    def answer(messages: Any, info: Any) -> Any:
        asked.append(1)
        return inner.function(messages, info)  # type: ignore[misc]

    return FunctionModel(answer)


def test_a_classification_naming_no_tool_of_the_agent_is_refused(
    database: str, tmp_path: Path
) -> None:
    store = agentrt.open_store(database)
    classes = {**CLASSES, "push_brnch": Classification("remote_mutation", timeout=5)}
    gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications=classes)
    agent = child.agent(tmp_path, "allow", gate=gate)
    with pytest.raises(agentrt.ConfigError, match="classification for 'push_brnch'"):
        agent.run_sync("tidy", metadata=gate.run_metadata(RUN))
    assert store.list_runs() == []


def test_a_framework_run_that_names_no_agentrt_run_is_refused(
    database: str, tmp_path: Path
) -> None:
    store = agentrt.open_store(database)
    gate = make_gate(store)
    agent = child.agent(tmp_path, "allow", gate=gate)
    with pytest.raises(agentrt.ConfigError, match=r"metadata=gate\.run_metadata"):
        agent.run_sync("tidy")
    with pytest.raises(agentrt.ConfigError, match=r"metadata=gate\.run_metadata"):
        agent.run_sync("tidy", metadata={RUN_ID_KEY: "not-an-id"})
    assert store.list_runs() == []
    with pytest.raises(agentrt.ConfigError, match="32 lowercase hex"):
        gate.run_metadata("ABC")


def test_an_agentrt_limit_ends_the_framework_run_as_its_own_usage_limit_does(
    database: str,
    tmp_path: Path,
) -> None:
    store = agentrt.open_store(database)
    gate = make_gate(store, limits=agentrt.Limits(max_steps=3))
    agent = child.agent(tmp_path, "loop", gate=gate)
    with pytest.raises(GateLimitExceeded) as raised:
        agent.run_sync("write notes", metadata=gate.run_metadata(RUN))
    assert raised.value.run.reason == "limit_steps"
    assert str(raised.value) == (
        f"agentrt run {RUN} is FAILED (limit_steps: 3 steps reached max_steps 3); "
        "no tool call runs in it"
    )
    assert effects(tmp_path) == ["write_note n0", "write_note n1", "write_note n2"]
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("FAILED", "limit_steps")
    assert store.lease(RUN).owner == ""


def test_a_remote_change_waits_as_a_deferred_approval_carrying_the_agentrt_hash(
    tmp_path: Path, database: str
) -> None:
    store, _, result = run_script(tmp_path, "push", database=database)
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert [c.tool_call_id for c in requests.approvals] == ["call-push"]
    (pending,) = store.pending_approvals(RUN)
    shown = requests.metadata["call-push"]["agentrt"]
    assert (shown["run_id"], shown["approval_id"], shown["hash"], shown["tool"]) == (
        RUN,
        pending.id,
        pending.hash,
        "push_branch",
    )
    assert shown["text"].endswith(
        f"----- end of approval {pending.id} for tool push_branch -----\n"
    )
    assert effects(tmp_path) == []
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"


def test_a_framework_approval_by_call_id_alone_decides_nothing(
    database: str, tmp_path: Path
) -> None:
    store, _, result = run_script(tmp_path, "push", database=database)
    gate = make_gate(store)
    agent = child.agent(tmp_path, "push", gate=gate)
    again = agent.run_sync(
        message_history=result.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"call-push": ToolApproved()}),
        metadata=gate.run_metadata(RUN),
    )
    assert isinstance(again.output, DeferredToolRequests)
    assert effects(tmp_path) == []
    (pending,) = store.pending_approvals(RUN)
    assert pending.status == "pending"


def test_a_framework_approval_with_a_hash_that_is_not_the_requests_is_refused(
    database: str,
    tmp_path: Path,
) -> None:
    store, _, result = run_script(tmp_path, "push", database=database)
    results = approved(result.output, "call-push", by="alice")
    results.metadata["call-push"]["agentrt"]["hash"] = "0" * 64
    gate = make_gate(store)
    agent = child.agent(tmp_path, "push", gate=gate)
    again = agent.run_sync(
        message_history=result.all_messages(),
        deferred_tool_results=results,
        metadata=gate.run_metadata(RUN),
    )
    assert isinstance(again.output, DeferredToolRequests)
    assert "refused" in again.output.metadata["call-push"]["agentrt"]
    assert effects(tmp_path) == []
    assert store.pending_approvals(RUN)[0].status == "pending"


def test_approved_refuses_a_call_that_waits_on_no_agentrt_approval() -> None:
    with pytest.raises(KeyError, match="not waiting on an agentrt approval"):
        approved(DeferredToolRequests(), "call-x", by="alice")


def test_an_ended_agentrt_run_is_not_continued_by_a_later_framework_run(
    database: str,
    tmp_path: Path,
) -> None:
    store, _, _ = run_script(tmp_path, "allow", database=database)
    gate = make_gate(store)
    agent = child.agent(tmp_path, "allow", gate=gate)
    with pytest.raises(agentrt.RunStateError, match=r"is COMPLETED \(goal_completed\)"):
        agent.run_sync("again", metadata=gate.run_metadata(RUN))
    assert effects(tmp_path) == ["write_note hello"]


def test_without_pydantic_ai_the_adapter_says_which_extra_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['pydantic_ai'] = None\n"
        "try:\n"
        "    import agentrt.adapters.pydantic_ai\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "ImportError agentrt.adapters.pydantic_ai needs Pydantic AI: "
        "pip install 'agentrt[pydantic-ai]'"
    )


# -- across processes -------------------------------------------------------------


def setup_child(workdir: Path, script: str, database: str | None = None) -> None:
    """The child's config: its script, its run, and its store (`database`, else a file in
    `workdir`)."""
    workdir.mkdir(exist_ok=True)
    config = {"script": script, "run_id": RUN, "database": database or str(workdir / "runs.db")}
    (workdir / "config.json").write_text(json.dumps(config))


def database_of(workdir: Path) -> str:
    """The store `setup_child` gave the child in `workdir`."""
    return str(json.loads((workdir / "config.json").read_text())["database"])


# Every program below is a real process of its own, forked from one that has
# imported Pydantic AI and the adapter once (tests/support/forkserver.py).
PRELOAD_CLI = forkserver.PYDANTIC_AI


def spawn(workdir: Path, mode: str, *flags: str) -> tuple[int, dict[str, Any]]:
    done = forkserver.run(
        [sys.executable, str(CHILD), str(workdir), mode, *flags],
        preload=PRELOAD_CLI,
        timeout=120,
        cwd=ROOT,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    return done.returncode, json.loads(lines[-1])


def cli_approve(workdir: Path) -> forkserver.Done:
    return forkserver.run(
        [sys.executable, "-m", "agentrt", "approve", RUN, "--db", database_of(workdir), *BY],
        preload=PRELOAD_CLI,
        timeout=60,
    )


def approve_the_framework_way(workdir: Path, call_id: str) -> None:
    requests = REQUESTS.validate_json((workdir / "requests.json").read_bytes())
    results = approved(requests, call_id, by="alice", note="looked at it")
    (workdir / "results.json").write_bytes(RESULTS.dump_json(results))


@pytest.mark.slow
def test_approval_with_the_agentrt_command_from_another_process_runs_the_call_once(
    database: str,
    tmp_path: Path,
) -> None:
    setup_child(tmp_path, "push", database=database)
    assert spawn(tmp_path, "start") == (2, {"deferred": ["call-push"]})
    assert cli_approve(tmp_path).returncode == 0
    assert spawn(tmp_path, "resume") == (0, {"output": "pushed"})
    assert effects(tmp_path) == ["push_branch feature/login"]
    with agentrt.open_store(database) as store:
        assert store.get_run(RUN).status == "COMPLETED"
        (approval,) = store.list_approvals(RUN)
        assert (approval.status, approval.decided_by) == ("approved", "alice")


@pytest.mark.slow
def test_approval_through_deferred_tool_results_goes_through_agentrt_with_the_hash(
    database: str,
    tmp_path: Path,
) -> None:
    setup_child(tmp_path, "push", database=database)
    assert spawn(tmp_path, "start")[0] == 2
    approve_the_framework_way(tmp_path, "call-push")
    assert spawn(tmp_path, "resume") == (0, {"output": "pushed"})
    assert effects(tmp_path) == ["push_branch feature/login"]
    with agentrt.open_store(database) as store:
        (approval,) = store.list_approvals(RUN)
        assert (approval.status, approval.decided_by, approval.note) == (
            "approved",
            "alice",
            "looked at it",
        )
        decided = [e for e in store.list_events(RUN) if e.type == "approval.decided"]
        assert len(decided) == 1


@pytest.mark.slow
def test_an_approved_call_whose_arguments_changed_in_the_history_is_refused(
    database: str,
    tmp_path: Path,
) -> None:
    setup_child(tmp_path, "push", database=database)
    assert spawn(tmp_path, "start")[0] == 2
    approve_the_framework_way(tmp_path, "call-push")
    history = (tmp_path / "history.json").read_text()
    (tmp_path / "history.json").write_text(history.replace("feature/login", "main"))
    code, said = spawn(tmp_path, "resume")
    assert effects(tmp_path) == []
    # The call was refused; the run still waits on the recorded one, so the
    # model is not asked (decision 0051).
    assert (code, said["error"]) == (3, "RunStateError")
    assert said["message"].startswith(f"agentrt run {RUN} waits on call call-push (push_branch")
    with agentrt.open_store(database) as store:
        assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"
        assert store.pending_approvals(RUN)


def kill_mid_call(workdir: Path, *flags: str) -> int:
    """Resume with the push held after it acted; SIGKILL the child there."""
    (workdir / "hold").write_text("1")
    proc = forkserver.server(*PRELOAD_CLI).spawn(
        [sys.executable, str(CHILD), str(workdir), "resume", *flags], cwd=ROOT, capture=True
    )
    deadline = time.monotonic() + 60
    while not (workdir / "acted").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    (workdir / "hold").unlink()
    (workdir / "acted").unlink()
    return proc.returncode


@pytest.mark.slow
def test_a_call_cut_off_by_sigkill_is_not_run_again_by_the_frameworks_resume_until_approved(
    database: str,
    tmp_path: Path,
) -> None:
    setup_child(tmp_path, "push", database=database)
    assert spawn(tmp_path, "start")[0] == 2
    approve_the_framework_way(tmp_path, "call-push")
    assert kill_mid_call(tmp_path) == -signal.SIGKILL
    assert effects(tmp_path) == ["push_branch feature/login"]
    # Pydantic AI's own resume: the saved history and the same DeferredToolResults.
    assert spawn(tmp_path, "resume") == (2, {"deferred": ["call-push"]})
    assert effects(tmp_path) == ["push_branch feature/login"]
    requests = REQUESTS.validate_json((tmp_path / "requests.json").read_bytes())
    shown = requests.metadata["call-push"]["agentrt"]
    assert shown["kind"] == "interrupted_side_effect"
    assert "whether it took effect is unknown" in shown["notice"]
    with agentrt.open_store(database) as store:
        run = store.get_run(RUN)
        assert run.status == "WAITING_FOR_APPROVAL"
        assert [e.type for e in store.list_events(RUN)].count("lease.taken_over") == 1
    # Resumed again without a decision: still nothing runs.
    assert spawn(tmp_path, "resume") == (2, {"deferred": ["call-push"]})
    assert effects(tmp_path) == ["push_branch feature/login"]
    # A person approves the exact interrupted request: it runs once more.
    approve_the_framework_way(tmp_path, "call-push")
    assert spawn(tmp_path, "resume") == (0, {"output": "pushed"})
    assert effects(tmp_path) == ["push_branch feature/login", "push_branch feature/login"]
    with agentrt.open_store(database) as store:
        assert store.get_run(RUN).status == "COMPLETED"
        kinds = [(a.kind, a.status) for a in store.list_approvals(RUN)]
        assert kinds == [
            ("remote_mutation", "approved"),
            ("interrupted_side_effect", "approved"),
        ]
        assert store.verify_events().intact


@pytest.mark.slow
def test_the_interrupted_call_can_be_approved_with_the_agentrt_command_too(
    database: str,
    tmp_path: Path,
) -> None:
    setup_child(tmp_path, "push", database=database)
    assert spawn(tmp_path, "start")[0] == 2
    assert cli_approve(tmp_path).returncode == 0
    assert kill_mid_call(tmp_path) == -signal.SIGKILL
    assert spawn(tmp_path, "resume") == (2, {"deferred": ["call-push"]})
    assert effects(tmp_path) == ["push_branch feature/login"]
    assert cli_approve(tmp_path).returncode == 0
    assert spawn(tmp_path, "resume") == (0, {"output": "pushed"})
    assert effects(tmp_path) == ["push_branch feature/login"] * 2


def test_a_call_denied_the_frameworks_way_is_rejected_in_agentrt_and_never_runs(
    database: str,
    tmp_path: Path,
) -> None:
    store, _, result = run_script(tmp_path, "push", database=database)
    gate = make_gate(store)
    agent = child.agent(tmp_path, "push", gate=gate)
    again = agent.run_sync(
        message_history=result.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"call-push": ToolDenied("not today")}),
        metadata=gate.run_metadata(RUN),
    )
    assert again.output == "pushed"  # the script's words; the tool did not run
    assert effects(tmp_path) == []
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    (approval,) = store.list_approvals(RUN)
    assert (approval.status, approval.decided_by, approval.note) == (
        "rejected",
        "pydantic-ai ToolDenied",
        "not today",
    )


# -- the scenario table (docs/adapters.md) -----------------------------------------


# SQLite only: the scenario script (benchmarks/adapters/) keeps its records in files of its own.
@pytest.mark.slow
# A hang guard, not a speed test: the scenario script starts a dozen fresh interpreters,
# which on shared cores can outlast the suite's two minutes.
@pytest.mark.timeout(600)
def test_the_scenario_table_shows_no_unapproved_re_execution_and_the_tamper_refused(
    tmp_path: Path,
) -> None:
    done = forkserver.run(
        [sys.executable, "benchmarks/adapters/pydantic_ai_scenarios.py", "--dir", str(tmp_path)],
        preload=PRELOAD_CLI,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert_table_printed_in_docs(done.stdout)
    lines = done.stdout.strip().splitlines()
    assert lines[:2] == [
        "| scenario | measured | Pydantic AI alone | with agentrt |",
        "|---|---|---|---|",
    ]
    rows = {}
    for line in lines[2:]:
        scenario, measured, alone, gated = (cell.strip() for cell in line.strip("|").split("|"))
        rows[(scenario, measured)] = (alone, gated)
    approval = "a remote change needing approval"
    crash = "a crash mid-call (SIGKILL)"
    tamper = "a tampered approval"
    assert rows == {
        (approval, "paused for a person"): ("yes", "yes"),
        (approval, "executions before the approval"): ("0", "0"),
        (approval, "executions after an approval naming the tool call id"): ("1", "0"),
        (approval, "executions after an approval naming the request's hash"): (
            "(no such approval)",
            "1",
        ),
        (crash, "executions when the process was killed"): ("1", "1"),
        (crash, "the framework's resume"): ("finished", "paused for a person"),
        (crash, "unapproved re-executions"): ("1", "0"),
        (crash, "executions after a person approves again"): ("(nobody was asked)", "2"),
        (tamper, "executions of the changed request"): ("1", "0"),
        (tamper, "executions of the approved request"): ("0", "0"),
        (tamper, "the changed request"): ("ran", "refused"),
    }


# SQLite only: the example program keeps its record in a file of its own.
@pytest.mark.slow
def test_the_example_gates_the_agents_own_tools_and_pushes_once_after_approval(
    tmp_path: Path,
) -> None:
    db = tmp_path / "example.db"
    done = forkserver.run(
        [sys.executable, "examples/adapters/pydantic_ai_example.py", "--db", str(db)],
        preload=PRELOAD_CLI,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "model hears (failed): destructive tools are denied by the default policy" in out
    assert "model hears (success): pushed feature/login" in out
    assert "remote: branches=['main', 'feature/login'] pushed=['feature/login']" in out
    assert "agentrt run: COMPLETED goal_completed, 4 steps" in out
    assert "intact" in out
    with agentrt.open_store(db) as store:
        (run,) = store.list_runs()
        (approval,) = store.list_approvals(run.id)
        assert (approval.status, approval.decided_by) == ("approved", "example-operator")


def _agent_with(tmp_path: Path, script: list[Any], gate: AgentrtGate) -> Any:
    from pydantic_ai import Agent, ModelRetry

    agent: Any = Agent(
        child.model(script), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )
    tries: list[str] = []

    @agent.tool_plain
    def flaky(text: str) -> str:
        """Asks the model to try again once."""
        tries.append(text)
        if len(tries) == 1:
            raise ModelRetry("try again with more care")
        return f"ok {text}"

    @agent.tool_plain
    def broken(text: str) -> str:
        """Raises."""
        raise RuntimeError(f"broken on {text}")

    return agent


FLAKY = {
    "flaky": Classification("local_mutation", timeout=5),
    "broken": Classification("local_mutation", timeout=5),
}


def test_a_tools_own_model_retry_reaches_the_model_and_its_step_records_the_error(
    database: str,
    tmp_path: Path,
) -> None:
    store = agentrt.open_store(database)
    gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications=FLAKY)
    script = [[("flaky", {"text": "a"}, "c1")], [("flaky", {"text": "b"}, "c2")], "done"]
    result = _agent_with(tmp_path, script, gate).run_sync("go", metadata=gate.run_metadata(RUN))
    assert result.output == "done"
    assert steps(store) == [
        ("flaky", "failed", "tool_error"),
        ("flaky", "done", "tool_result"),
        ("complete", "done", ""),
    ]


def test_a_tool_that_raises_ends_the_framework_run_and_fails_the_agentrt_run(
    database: str,
    tmp_path: Path,
) -> None:
    store = agentrt.open_store(database)
    gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications=FLAKY)
    script = [[("broken", {"text": "a"}, "c1")], "done"]
    with pytest.raises(RuntimeError, match="broken on a"):
        _agent_with(tmp_path, script, gate).run_sync("go", metadata=gate.run_metadata(RUN))
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    tool_step, failed_step = store.list_steps(RUN)
    assert tool_step.decision is not None and tool_step.observation is not None
    assert (tool_step.decision.tool, tool_step.observation.summary) == (
        "broken",
        "RuntimeError: broken on a",
    )
    assert (failed_step.status, failed_step.decision) == ("failed", None)
    assert store.lease(RUN).owner == ""


@pytest.mark.parametrize("kind", ["ApprovalRequired", "CallDeferred"])
def test_a_tool_that_defers_itself_the_frameworks_way_is_refused_and_the_model_told_so(
    database: str, tmp_path: Path, kind: str
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import ApprovalRequired, CallDeferred

    store = agentrt.open_store(database)
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={"note": Classification("local_mutation", timeout=5)},
    )
    heard: list[str] = []
    script: list[Any] = [[("note", {"text": "big"}, "c1")], "done"]
    agent: Any = Agent(
        child.model(script, heard), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )

    @agent.tool
    def note(ctx: RunContext[None], text: str) -> str:
        """Pydantic AI's conditional approval (or deferral), asked by the tool itself."""
        if not ctx.tool_call_approved:
            raise ApprovalRequired() if kind == "ApprovalRequired" else CallDeferred()
        return f"noted {text}"

    result = agent.run_sync("go", metadata=gate.run_metadata(RUN))
    refused = (
        f"refused: the tool note raised Pydantic AI's {kind} itself, and behind AgentrtGate a "
        "call waits for a person only where agentrt's policy asks (the tool's Classification), "
        "so the call ends here as failed"
    )
    # No DeferredToolRequests that could never be honoured: the model is told.
    assert result.output == "done"
    assert heard == [f"ToolReturnPart:failed:{refused}"]
    assert steps(store) == [("note", "failed", "tool_error"), ("complete", "done", "")]
    step = store.list_steps(RUN)[0]
    assert step.observation is not None
    assert step.observation.summary == f"ToolFailed: {refused}"


def _push_release(branch: str) -> str:
    """Push the branch as the run's final answer."""
    raise AssertionError("an output function ran")


@pytest.mark.parametrize(
    "output_type",
    ["function", "tool output", "text output", "native output"],
)
def test_an_output_function_is_refused_before_the_model_is_asked_or_a_run_recorded(
    database: str, tmp_path: Path, output_type: str
) -> None:
    from pydantic_ai import Agent, NativeOutput, TextOutput, ToolOutput
    from pydantic_ai.models.function import FunctionModel

    spec: Any = {
        "function": [_push_release, DeferredToolRequests],
        "tool output": [ToolOutput(_push_release, name="release"), str],
        "text output": TextOutput(_push_release),
        "native output": NativeOutput([_push_release]),
    }[output_type]
    store = agentrt.open_store(database)
    gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications={})
    asked: list[int] = []

    def answer(messages: list[Any], info: Any) -> Any:
        asked.append(1)
        raise AssertionError("the model was asked")

    agent: Any = Agent(FunctionModel(answer), output_type=spec, capabilities=[gate])
    with pytest.raises(agentrt.ConfigError) as refused:
        agent.run_sync("go", metadata=gate.run_metadata(RUN))
    assert str(refused.value) == (
        "output functions (_push_release) run outside agentrt's Gate, ungated and unrecorded, "
        "so AgentrtGate refuses them: give output_type plain types and make the function a "
        "tool of the agent"
    )
    assert asked == []
    assert store.list_runs() == []


def test_an_output_function_given_to_one_run_alone_is_refused_before_it_runs(
    database: str,
    tmp_path: Path,
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def answer(messages: list[Any], info: Any) -> Any:
        name = info.output_tools[0].name
        return ModelResponse(parts=[ToolCallPart(name, {"branch": "main"}, "o1")])

    store = agentrt.open_store(database)
    gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications={})
    agent: Any = Agent(FunctionModel(answer), capabilities=[gate])
    with pytest.raises(agentrt.ConfigError, match=r"output functions \(_push_release\) run"):
        agent.run_sync("go", metadata=gate.run_metadata(RUN), output_type=[_push_release])
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("FAILED", "agent_error")


def _never_asked(asked: list[int]) -> Any:
    from pydantic_ai.models.function import FunctionModel

    def answer(messages: list[Any], info: Any) -> Any:
        asked.append(1)
        raise AssertionError("the model was asked")

    return FunctionModel(answer)


def _web_search_function(ctx: RunContext[Any]) -> Any:
    from pydantic_ai.native_tools import WebSearchTool

    return WebSearchTool()


_OPENAI_WEB_SEARCH: Any = {"openai_native_tools": [{"type": "web_search"}]}


@dataclass
class _AddsWebSearch(AbstractCapability[Any]):
    """A capability that adds a native tool to each model request, in its own hook."""

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        from dataclasses import replace

        from pydantic_ai.native_tools import WebSearchTool

        parameters = request_context.model_request_parameters
        tools = [*parameters.native_tools, WebSearchTool()]
        request_context.model_request_parameters = replace(parameters, native_tools=tools)
        return request_context


@pytest.mark.parametrize("where", ["agent", "run", "override", "function", "agent settings"])
def test_a_native_tool_is_refused_at_start_up_before_the_model_is_asked_or_a_run_recorded(
    database: str, tmp_path: Path, where: str
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import NativeTool
    from pydantic_ai.native_tools import CodeExecutionTool, MCPServerTool, WebSearchTool

    store = agentrt.open_store(database)
    gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications={})
    asked: list[int] = []
    at_agent = [NativeTool(WebSearchTool()), NativeTool(CodeExecutionTool())]
    agent: Any = Agent(
        _never_asked(asked),
        capabilities=[gate, *(at_agent if where == "agent" else [])],
        model_settings=_OPENAI_WEB_SEARCH if where == "agent settings" else None,
    )
    meta = gate.run_metadata(RUN)
    with pytest.raises(agentrt.ConfigError) as refused:
        if where in ("agent", "agent settings"):
            agent.run_sync("go", metadata=meta)
        elif where == "run":
            agent.run_sync("go", metadata=meta, capabilities=[NativeTool(CodeExecutionTool())])
        elif where == "override":
            server = MCPServerTool(id="deploys", url="https://mcp.example.invalid")
            with agent.override(native_tools=[server]):
                agent.run_sync("go", metadata=meta)
        else:
            agent.run_sync("go", metadata=meta, capabilities=[NativeTool(_web_search_function)])
    named = {
        "agent": "web_search, code_execution",
        "run": "code_execution",
        "override": "mcp_server:deploys",
        "function": "a native tool function _web_search_function",
        "agent settings": "web_search in openai_native_tools",
    }[where]
    assert str(refused.value) == (
        f"native tools ({named}) run at the model's provider, outside agentrt's Gate, with no "
        "record, policy or approval behind their calls, so AgentrtGate refuses them: give the "
        "agent a function tool that does the same job"
    )
    assert asked == []
    assert store.list_runs() == []


@pytest.mark.parametrize("where", ["run settings", "another capability's hook"])
def test_a_native_tool_seen_only_at_the_request_is_refused_before_the_model_is_asked(
    database: str, tmp_path: Path, where: str
) -> None:
    from pydantic_ai import Agent

    store = agentrt.open_store(database)
    gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications={})
    asked: list[int] = []
    adds = [_AddsWebSearch()] if where == "another capability's hook" else []
    agent: Any = Agent(_never_asked(asked), capabilities=[*adds, gate])
    settings = _OPENAI_WEB_SEARCH if where == "run settings" else None
    with pytest.raises(agentrt.ConfigError) as refused:
        agent.run_sync("go", metadata=gate.run_metadata(RUN), model_settings=settings)
    named = "web_search in openai_native_tools" if where == "run settings" else "web_search"
    assert str(refused.value).startswith(
        f"native tools ({named}) run at the model's provider, outside agentrt's Gate"
    )
    assert asked == []
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("FAILED", "agent_error")


def test_tool_search_over_the_agents_own_tools_is_let_through_and_found_tools_are_gated(
    database: str,
    tmp_path: Path,
) -> None:
    # Pydantic AI adds its `ToolSearch` capability to every agent: with a
    # `defer_loading` tool, the model is offered the `tool_search` native tool
    # (here answered by its local `search_tools`), and the tool it finds is
    # called through the Gate like any other.
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    offered: list[list[str]] = []

    def answer(messages: list[Any], info: Any) -> Any:
        offered.append([t.kind for t in info.model_request_parameters.native_tools])
        turn = len(offered)
        if turn == 1:
            return ModelResponse(parts=[ToolCallPart("search_tools", {"queries": ["note"]}, "s1")])
        if turn == 2:
            return ModelResponse(parts=[ToolCallPart("note", {"text": "a"}, "c1")])
        return ModelResponse(parts=[TextPart("noted")])

    store = agentrt.open_store(database)
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={"note": Classification("local_mutation", timeout=5)},
    )
    agent: Any = Agent(FunctionModel(answer), capabilities=[gate])
    ran: list[str] = []

    @agent.tool_plain(defer_loading=True)
    def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return "ok"

    result = agent.run_sync("note it", metadata=gate.run_metadata(RUN))

    assert result.output == "noted"
    assert offered == [["tool_search"]] * 3
    assert ran == ["a"]
    assert [(tool, status) for tool, status, _ in steps(store)] == [
        ("note", "done"),
        ("complete", "done"),
    ]
    assert store.get_run(RUN).status == "COMPLETED"


class _Going(BaseException):
    """A BaseException of the tool's own."""


@pytest.mark.parametrize(
    "raised", [SystemExit(3), KeyboardInterrupt(), _Going("down")], ids=lambda e: type(e).__name__
)
def test_a_tool_raising_a_base_exception_ends_the_framework_run_and_fails_the_agentrt_run(
    database: str, tmp_path: Path, raised: BaseException
) -> None:
    from pydantic_ai import Agent

    store = agentrt.open_store(database)
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={"note": Classification("local_mutation", timeout=5)},
    )
    ran: list[str] = []
    script: list[Any] = [[("note", {"text": "a"}, "c1")], "done"]
    agent: Any = Agent(
        child.model(script), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )

    @agent.tool_plain
    def note(text: str) -> str:
        """Raises a BaseException."""
        ran.append(text)
        raise raised

    meta = gate.run_metadata(RUN)
    with pytest.raises(type(raised)):
        agent.run_sync("go", metadata=meta)
    assert ran == ["a"]
    tool_step, failed_step = store.list_steps(RUN)
    assert tool_step.observation is not None
    assert (tool_step.status, tool_step.observation.kind) == ("failed", "tool_error")
    assert (failed_step.status, failed_step.decision) == ("failed", None)
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert store.lease(RUN).owner == ""
    # A later framework run naming the same run does not carry on.
    with pytest.raises(agentrt.RunStateError, match="is FAILED"):
        agent.run_sync("go again", metadata=meta)
    assert ran == ["a"]


def test_a_framework_run_cancelled_mid_call_pauses_its_retry_on_the_interrupted_side_effect(
    database: str,
    tmp_path: Path,
) -> None:
    from pydantic_ai import Agent

    store = agentrt.open_store(database)
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={"note": Classification("local_mutation", timeout=30)},
    )
    ran: list[str] = []
    script: list[Any] = [[("note", {"text": "a"}, "c1")], "done"]
    agent: Any = Agent(
        child.model(script), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )

    @agent.tool_plain
    async def note(text: str) -> str:
        """Acts, then takes its time (a Ctrl-C under `asyncio.run` cancels it here)."""
        ran.append(text)
        await asyncio.sleep(30)
        return "late"

    meta = gate.run_metadata(RUN)

    async def main() -> Any:
        task = asyncio.create_task(agent.run("go", metadata=meta))
        while not ran:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert steps(store) == [("note", "interrupted", "interrupted")]
        assert store.get_run(RUN).status == "RUNNING"
        # Retried from the prompt (the history was never saved): not run again.
        return await agent.run("go", metadata=meta)

    retried = asyncio.run(main())
    assert isinstance(retried.output, DeferredToolRequests)
    assert retried.output.metadata["c1"]["agentrt"]["kind"] == "interrupted_side_effect"
    assert ran == ["a"]
    assert steps(store) == [("note", "awaiting_approval", "interrupted")]


@dataclass
class _SlowFirstCall(AbstractCapability[Any]):
    """Another capability of the agent that does I/O before each call, longest for the first."""

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: Any, tool_def: Any, args: Any
    ) -> Any:
        await asyncio.sleep(0.2 if call.tool_call_id == "c1" else 0)
        return args


def test_calls_the_model_makes_together_go_through_the_gate_one_at_a_time_in_its_order(
    database: str,
    tmp_path: Path,
) -> None:
    store = agentrt.open_store(database)
    gate = make_gate(store)
    agent = child.agent(tmp_path, "together", gate=gate)
    meta = gate.run_metadata(RUN)
    assert agent.run_sync("go", metadata=meta, capabilities=[_SlowFirstCall()]).output == "done"
    # Pydantic AI runs each gated call alone (sequential): the first call's
    # slow hook does not let the second overtake it.
    assert effects(tmp_path) == ["write_note one", "write_note two"]
    recorded = store.list_steps(RUN)
    assert [s.index for s in recorded] == [0, 1, 2, 3]
    assert [s.decision.reason for s in recorded[:3] if s.decision] == [
        "pydantic-ai tool call c1",
        "pydantic-ai tool call c2",
        "pydantic-ai tool call c3",
    ]


# -- a call made beside one that waits for a person: held (decisions 0050, 0051) ------


def held_run(
    tmp_path: Path, script: str = "held", database: str | None = None
) -> tuple[agentrt.Store, Any, list[str]]:
    """Start the script: its first response is a call that waits and a call held behind it
    (its store on `database` when given, else a file in `tmp_path`)."""
    store = agentrt.open_store(database or tmp_path / "runs.db")
    heard: list[str] = []
    agent = child.agent(tmp_path, script, gate=make_gate(store), heard=heard)
    result = agent.run_sync("publish", metadata=make_gate(store).run_metadata(RUN))
    return store, result, heard


def resume_with(
    tmp_path: Path, store: agentrt.Store, script: str, result: Any, results: Any, heard: list[str]
) -> Any:
    gate = make_gate(store)
    agent = child.agent(tmp_path, script, gate=gate, heard=heard)
    return agent.run_sync(
        message_history=result.all_messages(),
        deferred_tool_results=results,
        metadata=gate.run_metadata(RUN),
    )


HELD_TEXT = (
    "Call call-note (write_note) is held behind call call-push (push_branch), which waits for "
    f"a person in agentrt run {RUN}. There is nothing to decide about it here: when the run "
    "continues after that call's decision, it goes through the Gate in its turn (recorded, "
    "checked against its schema, put to the policy). Nothing has been recorded or run for it "
    "yet.\n"
)


def test_a_call_made_beside_a_waiting_one_is_held_in_the_deferred_requests_and_not_recorded(
    database: str,
    tmp_path: Path,
) -> None:
    store, result, heard = held_run(tmp_path, database=database)
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert [(c.tool_call_id, c.tool_name) for c in requests.approvals] == [
        ("call-push", "push_branch"),
        ("call-note", "write_note"),
    ]
    (pending,) = store.pending_approvals(RUN)
    push = requests.metadata["call-push"]["agentrt"]
    assert (push["approval_id"], push["hash"]) == (pending.id, pending.hash)
    assert requests.metadata["call-note"] == {
        "agentrt": {
            "run_id": RUN,
            "tool": "write_note",
            "held_behind": "call-push",
            "text": HELD_TEXT,
        }
    }
    assert effects(tmp_path) == []
    assert heard == []
    assert steps(store) == [("push_branch", "awaiting_approval", "")]
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"


def test_after_approval_the_waiting_call_runs_then_the_held_call_is_judged_recorded_and_run(
    database: str,
    tmp_path: Path,
) -> None:
    store, result, heard = held_run(tmp_path, database=database)
    results = approved(result.output, "call-push", by="alice")
    assert set(results.approvals) == {"call-push", "call-note"}
    again = resume_with(tmp_path, store, "held", result, results, heard)
    assert again.output == "done"
    assert effects(tmp_path) == ["push_branch feature/login", "write_note pushed login"]
    assert heard == [
        "ToolReturnPart:success:pushed feature/login",
        "ToolReturnPart:success:noted pushed login",
    ]
    assert steps(store) == [
        ("push_branch", "done", "tool_result"),
        ("write_note", "done", "tool_result"),
        ("complete", "done", ""),
    ]
    note = store.list_steps(RUN)[1]
    assert note.decision is not None
    assert (note.decision.args, note.decision.reason) == (
        {"text": "pushed login"},
        "pydantic-ai tool call call-note",
    )
    types = [e.type for e in store.list_events(RUN)]
    assert types.count("step.tool_started") == 2
    assert [(a.status, a.decided_by) for a in store.list_approvals(RUN)] == [("approved", "alice")]
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert store.verify_events().intact


def test_after_agentrt_approve_plain_framework_approvals_continue_the_waiting_and_held_calls(
    database: str,
    tmp_path: Path,
) -> None:
    store, result, heard = held_run(tmp_path, database=database)
    (pending,) = store.pending_approvals(RUN)
    agentrt.approve(store, RUN, pending.id, by="alice", shown_hash=pending.hash)
    results = DeferredToolResults(
        approvals={"call-push": ToolApproved(), "call-note": ToolApproved()}
    )
    again = resume_with(tmp_path, store, "held", result, results, heard)
    assert again.output == "done"
    assert effects(tmp_path) == ["push_branch feature/login", "write_note pushed login"]
    assert [s[0] for s in steps(store)] == ["push_branch", "write_note", "complete"]
    assert store.get_run(RUN).status == "COMPLETED"


def test_a_plain_framework_approval_of_the_held_call_alone_decides_nothing_and_it_stays_held(
    database: str,
    tmp_path: Path,
) -> None:
    store, result, heard = held_run(tmp_path, database=database)
    results = DeferredToolResults(
        approvals={"call-push": ToolApproved(), "call-note": ToolApproved()}
    )
    again = resume_with(tmp_path, store, "held", result, results, heard)
    assert isinstance(again.output, DeferredToolRequests)
    assert [c.tool_call_id for c in again.output.approvals] == ["call-push", "call-note"]
    assert again.output.metadata["call-note"]["agentrt"]["held_behind"] == "call-push"
    assert effects(tmp_path) == []
    assert steps(store) == [("push_branch", "awaiting_approval", "")]


def test_after_the_waiting_call_is_denied_the_frameworks_way_the_held_call_never_runs(
    database: str,
    tmp_path: Path,
) -> None:
    store, result, heard = held_run(tmp_path, database=database)
    results = DeferredToolResults(
        approvals={"call-push": ToolDenied("not today"), "call-note": ToolApproved()}
    )
    again = resume_with(tmp_path, store, "held", result, results, heard)
    assert again.output == "done"  # the framework run ends cleanly; nothing ran
    assert effects(tmp_path) == []
    assert heard == [
        "ToolReturnPart:denied:not today",
        "ToolReturnPart:failed:not run and not recorded: the call call-note was held behind "
        f"call call-push, and agentrt run {RUN} is CANCELLED (approval_rejected: not today); "
        "no tool call runs in it",
    ]
    assert steps(store) == [("push_branch", "failed", "policy_denied")]
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    (approval,) = store.list_approvals(RUN)
    assert (approval.status, approval.decided_by, approval.note) == (
        "rejected",
        "pydantic-ai ToolDenied",
        "not today",
    )
    assert store.verify_events().intact


def a_person_decides_after_the_read_of(
    store: agentrt.Store, reader: str, person: str
) -> list[agentrt.Approval]:
    """The store's `list_approvals` made to hand back what it read and, the first time the
    adapter's method `reader` reads (itself or through the method it calls) an approval
    still pending, a person decides it right after the read: approves it, rejects it, or
    cancels the run (decision 0118). Returns the list the approval decided is appended to."""
    read, raced = store.list_approvals, []

    def read_then_a_person_decides(*args: Any, **kwargs: Any) -> list[agentrt.Approval]:
        seen = read(*args, **kwargs)
        caller = sys._getframe(1)
        readers = (caller.f_code.co_name, caller.f_back.f_code.co_name if caller.f_back else "")
        if not raced and reader in readers and seen and seen[-1].status == "pending":
            waiting = seen[-1]
            raced.append(waiting)
            a_person_decides(store, RUN, waiting, person)
        return seen

    store.list_approvals = read_then_a_person_decides  # type: ignore[method-assign]
    return raced


def held_ended(person: str) -> str:
    why = "approval_rejected: not today" if person == "rejects" else "operator_cancelled: stop"
    return (
        "ToolReturnPart:failed:not run and not recorded: the call call-note was held behind "
        f"call call-push, and agentrt run {RUN} is CANCELLED ({why}); no tool call runs in it"
    )


@pytest.mark.parametrize("person", ["approves", "rejects", "cancels"])
def test_a_person_deciding_while_the_frameworks_approval_is_carried_stands_and_is_told(
    database: str, tmp_path: Path, person: str
) -> None:
    """A person decides between the adapter's read of the approval the run waits on and
    its carrying of the approval the framework run was resumed with (`approved(...)`):
    their decision stands, the call runs once only if they approved it, and the model is
    told, never a bare store error (decision 0118). Driven at the window: the read hands
    back what it read and the person decides right after it."""
    store, result, heard = held_run(tmp_path, database=database)
    results = approved(result.output, "call-push", by="dave")
    raced = a_person_decides_after_the_read_of(store, "_waiting", person)

    again = resume_with(tmp_path, store, "held", result, results, heard)

    assert again.output == "done"
    (waiting,) = raced
    if person == "approves":
        assert effects(tmp_path) == ["push_branch feature/login", "write_note pushed login"]
        assert heard == [
            "ToolReturnPart:success:pushed feature/login",
            "ToolReturnPart:success:noted pushed login",
        ]
        assert steps(store) == [
            ("push_branch", "done", "tool_result"),
            ("write_note", "done", "tool_result"),
            ("complete", "done", ""),
        ]
    else:
        why = "approval_rejected: not today" if person == "rejects" else "operator_cancelled: stop"
        assert effects(tmp_path) == []
        assert heard == [
            f"ToolReturnPart:failed:not run: agentrt run {RUN} is CANCELLED ({why}); "
            "no tool call runs in it",
            held_ended(person),
        ]
        kind = "policy_denied" if person == "rejects" else "interrupted"
        assert steps(store) == [("push_branch", "failed", kind)]
    assert_the_persons_decision_stands(store, RUN, waiting, person)
    expected = {
        "approves": ("COMPLETED",),
        "rejects": ("CANCELLED",),
        "cancels": ("CANCELLED",),
    }[person]
    assert store.get_run(RUN).status == expected[0]
    types = event_types(store, RUN)
    assert types.count("approval.decided") == (0 if person == "cancels" else 1)  # the person's
    assert types.count("step.tool_started") == (2 if person == "approves" else 0)
    assert store.verify_events().intact


@pytest.mark.parametrize("person", ["approves", "rejects", "cancels"])
def test_a_person_deciding_while_the_frameworks_denial_is_carried_stands_and_is_told(
    database: str, tmp_path: Path, person: str
) -> None:
    """A person decides between the adapter's read of the approval the run waits on and
    its carrying of the framework's `ToolDenied` as agentrt's rejection: their decision
    stands and the framework run goes on as if they had decided first, never with a bare
    store error (decision 0118). Approved: the denial is not carried, nothing runs, the
    held call stays held. Rejected or cancelled: the model hears the framework's denial,
    the held call the run's end."""
    store, result, heard = held_run(tmp_path, database=database)
    results = DeferredToolResults(
        approvals={"call-push": ToolDenied("no way"), "call-note": ToolApproved()}
    )
    raced = a_person_decides_after_the_read_of(store, "settle_denied", person)

    again = resume_with(tmp_path, store, "held", result, results, heard)

    (waiting,) = raced
    assert effects(tmp_path) == []
    if person == "approves":
        # As when the person approved before the framework run was resumed.
        assert isinstance(again.output, DeferredToolRequests)
        assert [c.tool_call_id for c in again.output.approvals] == ["call-note"]
        assert again.output.metadata["call-note"]["agentrt"]["held_behind"] == "call-push"
        assert heard == []
        assert steps(store) == [("push_branch", "awaiting_approval", "")]
    else:
        assert again.output == "done"
        assert heard == ["ToolReturnPart:denied:no way", held_ended(person)]
        kind = "policy_denied" if person == "rejects" else "interrupted"
        assert steps(store) == [("push_branch", "failed", kind)]
    assert_the_persons_decision_stands(store, RUN, waiting, person)
    expected = {
        "approves": ("WAITING_FOR_APPROVAL",),
        "rejects": ("CANCELLED",),
        "cancels": ("CANCELLED",),
    }[person]
    assert store.get_run(RUN).status == expected[0]
    types = event_types(store, RUN)
    assert types.count("approval.decided") == (0 if person == "cancels" else 1)  # the person's
    assert "step.tool_started" not in types
    assert store.verify_events().intact


def test_a_tool_denial_is_recorded_at_once_and_a_call_in_a_later_response_meets_the_runs_end(
    database: str,
    tmp_path: Path,
) -> None:
    store, result, heard = held_run(tmp_path, "push-then-note", database=database)
    results = DeferredToolResults(approvals={"call-push": ToolDenied("not today")})
    ended = (
        f"agentrt run {RUN} is CANCELLED (approval_rejected: not today); no tool call runs in it"
    )
    with pytest.raises(RunEndedError, match=re.escape(ended)):
        resume_with(tmp_path, store, "push-then-note", result, results, heard)
    # The model heard the denial; its next call was judged on the ended run: nothing ran.
    assert heard == ["ToolReturnPart:denied:not today"]
    assert effects(tmp_path) == []
    assert steps(store) == [("push_branch", "failed", "policy_denied")]
    (approval,) = store.list_approvals(RUN)
    assert (approval.status, approval.decided_by, approval.note) == (
        "rejected",
        "pydantic-ai ToolDenied",
        "not today",
    )
    assert store.verify_events().intact


def test_a_tool_denial_is_recorded_even_when_the_framework_run_then_raises(
    database: str,
    tmp_path: Path,
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def answer(messages: list[Any], info: Any) -> Any:
        if len(messages) > 1:
            raise ConnectionError("the provider went away")
        return ModelResponse(parts=[ToolCallPart("push_branch", {"branch": "x"}, "call-push")])

    store = agentrt.open_store(database)
    gate = make_gate(store)
    agent: Any = Agent(
        FunctionModel(answer),
        output_type=[str, DeferredToolRequests],
        toolsets=[child.tools(tmp_path)],
        capabilities=[gate],
    )
    meta = gate.run_metadata(RUN)
    first = agent.run_sync("publish", metadata=meta)
    assert isinstance(first.output, DeferredToolRequests)
    with pytest.raises(ConnectionError):
        agent.run_sync(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"call-push": ToolDenied("no")}),
            metadata=meta,
        )
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    assert [(a.status, a.decided_by) for a in store.list_approvals(RUN)] == [
        ("rejected", "pydantic-ai ToolDenied")
    ]
    assert effects(tmp_path) == []


def framework_runs_a_pauses_unanswered_calls() -> bool:
    """Whether the installed Pydantic AI runs a paused history's calls when given no results.

    Pydantic AI 2.78 (and perhaps a release before it: the registry here
    holds 2.68 and 2.78) runs the calls a history left waiting at its
    deferred pause when continued without results; 2.68 wrote a return for
    each and asked the model. Found out by running the framework alone on
    such a pause, so the tests follow the release installed.
    """
    from pydantic_ai import Agent, CallDeferred
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    ran: list[str] = []

    def answer(messages: list[Any], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("note", {}, tool_call_id="a"),
                    ToolCallPart("push", {}, tool_call_id="b"),
                ]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(answer), output_type=[str, DeferredToolRequests])

    @agent.tool_plain
    def note() -> str:
        ran.append("note")
        return "noted"

    @agent.tool_plain
    def push() -> str:
        if "paused" not in ran:  # deferred the first time, run the second
            ran.append("paused")
            raise CallDeferred
        ran.append("push")
        return "pushed"

    paused = agent.run_sync("go")
    assert isinstance(paused.output, DeferredToolRequests)
    agent.run_sync(message_history=paused.all_messages())
    # The two tools of a step may run in either order (each plain tool on a thread).
    return "push" in ran


def test_the_model_is_not_asked_while_an_approved_call_has_not_run_and_the_results_run_it_once(
    database: str,
    tmp_path: Path,
) -> None:
    store, result, heard = held_run(tmp_path, "note-then-push", database=database)
    assert isinstance(result.output, DeferredToolRequests)
    assert effects(tmp_path) == ["write_note pushing login"]
    # The history ends with the note's return: continuing it without results
    # made Pydantic AI 2.68 send the model a return for the push that never ran.
    assert type(result.all_messages()[-1]).__name__ == "ModelRequest"
    (pending,) = store.pending_approvals(RUN)
    agentrt.approve(store, RUN, pending.id, by="alice", shown_hash=pending.hash)
    if framework_runs_a_pauses_unanswered_calls():
        # The framework runs the approved call itself: through the Gate, once,
        # before the model is asked.
        again = resume_with(tmp_path, store, "note-then-push", result, None, heard)
        assert heard == [
            "ToolReturnPart:success:noted pushing login",
            "ToolReturnPart:success:pushed feature/login",
        ]
    else:
        with pytest.raises(agentrt.RunStateError) as refused:
            resume_with(tmp_path, store, "note-then-push", result, None, heard)
        assert str(refused.value) == (
            f"agentrt run {RUN} waits on call call-push (push_branch, approval {pending.id}, "
            "approved), which has not run, so the model is not asked: continue with "
            "deferred_tool_results naming that call (approved(requests, 'call-push', by=...), or "
            "DeferredToolResults(approvals={'call-push': ToolApproved()}) after `agentrt approve`)"
        )
        assert heard == []
        assert effects(tmp_path) == ["write_note pushing login"]
        assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"
        results = DeferredToolResults(approvals={"call-push": ToolApproved()})
        again = resume_with(tmp_path, store, "note-then-push", result, results, heard)
    assert again.output == "done"
    assert effects(tmp_path) == ["write_note pushing login", "push_branch feature/login"]
    assert steps(store) == [
        ("write_note", "done", "tool_result"),
        ("push_branch", "done", "tool_result"),
        ("complete", "done", ""),
    ]


def test_a_pause_continued_without_results_while_its_call_waits_runs_nothing(
    database: str,
    tmp_path: Path,
) -> None:
    """Still pending: the call is handed back again (2.78) or the run refused (2.68)."""
    store, result, heard = held_run(tmp_path, "note-then-push", database=database)
    (pending,) = store.pending_approvals(RUN)
    if framework_runs_a_pauses_unanswered_calls():
        again = resume_with(tmp_path, store, "note-then-push", result, None, heard)
        assert isinstance(again.output, DeferredToolRequests)
        assert [c.tool_call_id for c in again.output.approvals] == ["call-push"]
        assert again.output.metadata["call-push"]["agentrt"]["approval_id"] == pending.id
    else:
        with pytest.raises(agentrt.RunStateError, match="which has not run, so the model is not"):
            resume_with(tmp_path, store, "note-then-push", result, None, heard)
    assert heard == []
    assert effects(tmp_path) == ["write_note pushing login"]
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"
    assert [a.status for a in store.list_approvals(RUN)] == ["pending"]


def test_a_pause_continued_without_results_after_agentrt_reject_runs_nothing(
    database: str,
    tmp_path: Path,
) -> None:
    """Rejected: on 2.78 the framework hands the waiting call to the Gate, and the model
    hears the recorded rejection (decision 0122); on 2.68 it writes its own return for the
    call. Either way nothing runs, nothing more is recorded, and the run stays ended."""
    store, result, heard = held_run(tmp_path, "note-then-push", database=database)
    (pending,) = store.pending_approvals(RUN)
    agentrt.reject(store, RUN, pending.id, by="bob", note="no", shown_hash=pending.hash)
    runs_them = framework_runs_a_pauses_unanswered_calls()

    again = resume_with(tmp_path, store, "note-then-push", result, None, heard)

    assert again.output == "done"
    assert heard[0] == "ToolReturnPart:success:noted pushing login"
    if runs_them:
        assert heard[1:] == ["ToolReturnPart:failed:approval rejected: no"]
    else:
        assert len(heard) == 2 and heard[1].startswith("ToolReturnPart:interrupted:")
    assert effects(tmp_path) == ["write_note pushing login"]
    assert steps(store) == [
        ("write_note", "done", "tool_result"),
        ("push_branch", "failed", "policy_denied"),
    ]
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    assert store.verify_events().intact


@pytest.mark.parametrize("answer", ["approved", "denied", "by call id alone"])
def test_an_inline_deferred_call_handler_decides_through_agentrt_as_resumed_results_do(
    database: str, tmp_path: Path, answer: str
) -> None:
    from pydantic_ai.capabilities import HandleDeferredToolCalls

    store = agentrt.open_store(database)
    handled: list[str] = []

    async def handle(ctx: RunContext[None], requests: DeferredToolRequests) -> Any:
        handled.append(requests.approvals[0].tool_call_id)
        if answer == "approved":
            return approved(requests, "call-push", by="inline")
        if answer == "denied":
            return DeferredToolResults(approvals={"call-push": ToolDenied("not from here")})
        return DeferredToolResults(approvals={"call-push": ToolApproved()})

    gate = make_gate(store)
    heard: list[str] = []
    agent = child.agent(tmp_path, "push", gate=gate, heard=heard)
    result = agent.run_sync(
        "publish",
        metadata=gate.run_metadata(RUN),
        capabilities=[HandleDeferredToolCalls(handle)],
    )
    assert handled == ["call-push"]
    (approval,) = store.list_approvals(RUN)
    if answer == "approved":
        assert result.output == "pushed"
        assert effects(tmp_path) == ["push_branch feature/login"]
        assert (approval.status, approval.decided_by) == ("approved", "inline")
        assert store.get_run(RUN).status == "COMPLETED"
    elif answer == "denied":
        # Recorded as agentrt's rejection before the model hears of it.
        assert result.output == "pushed"
        assert heard == ["ToolReturnPart:denied:not from here"]
        assert effects(tmp_path) == []
        assert (approval.status, approval.decided_by, approval.note) == (
            "rejected",
            "pydantic-ai ToolDenied",
            "not from here",
        )
        assert store.get_run(RUN).status == "CANCELLED"
    else:
        assert isinstance(result.output, DeferredToolRequests)
        assert effects(tmp_path) == []
        assert approval.status == "pending"
        assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"


@pytest.mark.parametrize("person", ["approves", "rejects", "cancels"])
def test_a_person_deciding_while_an_inline_denial_is_carried_stands_and_is_told(
    database: str, tmp_path: Path, person: str
) -> None:
    """A person decides between the adapter's read of the approval the run waits on and its
    carrying of an inline handler's `ToolDenied` as agentrt's rejection, before the model is
    asked: their decision stands, never a bare store error (decision 0118). Approved: the
    denial is not carried and the model is not asked while the approved call has not run
    (the refusal that names the ways on). Rejected or cancelled: the model hears the denial."""
    from pydantic_ai.capabilities import HandleDeferredToolCalls

    store = agentrt.open_store(database)

    async def handle(ctx: RunContext[None], requests: DeferredToolRequests) -> Any:
        return DeferredToolResults(approvals={"call-push": ToolDenied("not from here")})

    gate = make_gate(store)
    heard: list[str] = []
    agent = child.agent(tmp_path, "push", gate=gate, heard=heard)
    raced = a_person_decides_after_the_read_of(store, "refuse_model_while_waiting", person)

    def run() -> Any:
        return agent.run_sync(
            "publish",
            metadata=gate.run_metadata(RUN),
            capabilities=[HandleDeferredToolCalls(handle)],
        )

    if person == "approves":
        with pytest.raises(agentrt.RunStateError, match="already answers it") as told:
            run()
        assert "the model is not asked" in str(told.value)
    else:
        assert run().output == "pushed"
        assert heard == ["ToolReturnPart:denied:not from here"]
    (waiting,) = raced
    assert effects(tmp_path) == []
    assert_the_persons_decision_stands(store, RUN, waiting, person)
    expected = {
        "approves": ("WAITING_FOR_APPROVAL",),
        "rejects": ("CANCELLED",),
        "cancels": ("CANCELLED",),
    }[person]
    assert store.get_run(RUN).status == expected[0]
    types = event_types(store, RUN)
    assert types.count("approval.decided") == (0 if person == "cancels" else 1)  # the person's
    assert "step.tool_started" not in types
    assert store.verify_events().intact


def test_a_held_call_the_policy_sends_to_a_person_gets_its_own_agentrt_approval(
    database: str,
    tmp_path: Path,
) -> None:
    store, result, heard = held_run(tmp_path, "held-push", database=database)
    requests = result.output
    assert [c.tool_call_id for c in requests.approvals] == ["call-push", "call-push2"]
    assert requests.metadata["call-push2"]["agentrt"]["held_behind"] == "call-push"
    first = requests.metadata["call-push"]["agentrt"]
    again = resume_with(
        tmp_path, store, "held-push", result, approved(requests, "call-push", by="alice"), heard
    )
    assert effects(tmp_path) == ["push_branch feature/login"]
    later = again.output
    assert isinstance(later, DeferredToolRequests)
    assert [c.tool_call_id for c in later.approvals] == ["call-push2"]
    (pending,) = store.pending_approvals(RUN)
    own = later.metadata["call-push2"]["agentrt"]
    assert (own["approval_id"], own["hash"], own["tool"]) == (
        pending.id,
        pending.hash,
        "push_branch",
    )
    assert own["hash"] != first["hash"]
    assert '"feature/signup"' in own["text"]
    assert steps(store) == [
        ("push_branch", "done", "tool_result"),
        ("push_branch", "awaiting_approval", ""),
    ]
    final = resume_with(
        tmp_path, store, "held-push", again, approved(later, "call-push2", by="bob"), heard
    )
    assert final.output == "pushed"
    assert effects(tmp_path) == ["push_branch feature/login", "push_branch feature/signup"]
    assert [(a.status, a.decided_by) for a in store.list_approvals(RUN)] == [
        ("approved", "alice"),
        ("approved", "bob"),
    ]
    assert store.get_run(RUN).status == "COMPLETED"


def test_approved_refuses_a_held_call_and_names_the_call_it_is_held_behind(
    database: str,
    tmp_path: Path,
) -> None:
    _, result, _ = held_run(tmp_path, database=database)
    with pytest.raises(KeyError, match="'call-note' is held behind call 'call-push'"):
        approved(result.output, "call-note", by="alice")


def _override_refused(call_id: str) -> str:
    return (
        f"ToolApproved(override_args=...) for call {call_id} is refused and nothing ran: agentrt "
        "approves the exact request the person saw (its hash), so to run other arguments, "
        "reject the call and let the model ask again"
    )


def _recorded(store: agentrt.Store) -> Any:
    return (
        steps(store),
        [(a.status, a.hash) for a in store.list_approvals(RUN)],
        [e.type for e in store.list_events(RUN)],
        store.get_run(RUN).status,
    )


@pytest.mark.parametrize("which", ["call-push2", "call-push"])
def test_a_framework_approval_with_override_args_is_refused_before_anything_runs(
    database: str, tmp_path: Path, which: str
) -> None:
    # The held call (call-push2) or the waiting one (call-push) approved the
    # framework's way with other arguments: refused before any call runs or
    # any return is written, so the saved history stays the one to continue.
    store, result, heard = held_run(tmp_path, "held-push", database=database)
    requests = result.output
    before = _recorded(store)
    results = approved(requests, "call-push", by="alice")
    results.approvals[which] = ToolApproved(override_args={"branch": "main"})
    with pytest.raises(agentrt.ConfigError) as refused:
        resume_with(tmp_path, store, "held-push", result, results, heard)
    assert str(refused.value) == _override_refused(which)
    assert effects(tmp_path) == []
    assert heard == []
    assert _recorded(store) == before
    # The same saved history, continued with the documented approvals, runs
    # the calls once each, in the model's order, with the model's arguments.
    again = resume_with(
        tmp_path, store, "held-push", result, approved(requests, "call-push", by="alice"), heard
    )
    assert effects(tmp_path) == ["push_branch feature/login"]
    later = again.output
    assert [c.tool_call_id for c in later.approvals] == ["call-push2"]
    assert '"feature/signup"' in later.metadata["call-push2"]["agentrt"]["text"]
    final = resume_with(
        tmp_path, store, "held-push", again, approved(later, "call-push2", by="bob"), heard
    )
    assert final.output == "pushed"
    assert effects(tmp_path) == ["push_branch feature/login", "push_branch feature/signup"]
    assert [s.decision.args for s in store.list_steps(RUN)][:2] == [
        {"branch": "feature/login"},
        {"branch": "feature/signup"},
    ]
    assert store.get_run(RUN).status == "COMPLETED"


def test_an_inline_handlers_override_args_for_a_held_call_is_refused_before_it_is_recorded(
    database: str,
    tmp_path: Path,
) -> None:
    # A HandleDeferredToolCalls capability answers during the run, so Pydantic
    # AI applies its override_args before any hook of the gate's sees them:
    # the held note reaches the toolset with other arguments than the model's.
    from pydantic_ai.capabilities import HandleDeferredToolCalls

    store = agentrt.open_store(database)

    async def handle(ctx: RunContext[None], requests: DeferredToolRequests) -> Any:
        results = approved(requests, "call-push", by="inline")
        results.approvals["call-note"] = ToolApproved(override_args={"text": "not the model's"})
        return results

    gate = make_gate(store)
    agent = child.agent(tmp_path, "held", gate=gate, heard=[])
    with pytest.raises(agentrt.ConfigError) as refused:
        agent.run_sync(
            "publish",
            metadata=gate.run_metadata(RUN),
            capabilities=[HandleDeferredToolCalls(handle)],
        )
    assert str(refused.value) == _override_refused("call-note")
    # The push the person approved ran once; the note was neither recorded nor run.
    assert effects(tmp_path) == ["push_branch feature/login"]
    assert [(s.decision.tool, s.decision.args) for s in store.list_steps(RUN)] == [
        ("push_branch", {"branch": "feature/login"})
    ]
    assert store.get_run(RUN).status == "RUNNING"


def test_a_waiting_call_the_history_already_answers_names_the_ways_on_that_work(
    database: str,
    tmp_path: Path,
) -> None:
    # A history in which the waiting call got a return without running (as an
    # earlier version wrote for a refused framework approval) can no longer
    # run it: naming it in DeferredToolResults is Pydantic AI's UserError.
    store, result, heard = held_run(tmp_path, "held-push", database=database)
    requests = result.output
    (pending,) = store.pending_approvals(RUN)
    answered = [
        *result.all_messages(),
        ModelRequest(
            parts=[
                ToolReturnPart("push_branch", "refused: not run", tool_call_id="call-push"),
                ToolReturnPart("push_branch", "held", tool_call_id="call-push2"),
            ]
        ),
    ]
    gate = make_gate(store)
    agent = child.agent(tmp_path, "held-push", gate=gate, heard=heard)
    with pytest.raises(agentrt.RunStateError) as refused:
        agent.run_sync(message_history=answered, metadata=gate.run_metadata(RUN))
    assert str(refused.value) == (
        f"agentrt run {RUN} waits on call call-push (push_branch, approval {pending.id}, "
        "pending), which has not run, and this message history already answers it, so it can "
        "no longer run from this history and the model is not asked: continue from the "
        "history saved before that answer with deferred_tool_results naming the call "
        "(approved(requests, 'call-push', by=...)), or end the wait with `agentrt reject` or "
        "`agentrt cancel`"
    )
    assert heard == []
    assert effects(tmp_path) == []
    again = resume_with(
        tmp_path, store, "held-push", result, approved(requests, "call-push", by="alice"), heard
    )
    assert effects(tmp_path) == ["push_branch feature/login"]
    assert [c.tool_call_id for c in again.output.approvals] == ["call-push2"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["agentrt command", "deferred tool results"])
def test_a_held_call_runs_once_in_its_turn_after_approval_from_another_process(
    database: str, tmp_path: Path, how: str
) -> None:
    setup_child(tmp_path, "held", database=database)
    assert spawn(tmp_path, "start") == (2, {"deferred": ["call-push", "call-note"]})
    assert effects(tmp_path) == []
    if how == "agentrt command":
        assert cli_approve(tmp_path).returncode == 0
    else:
        approve_the_framework_way(tmp_path, "call-push")
    assert spawn(tmp_path, "resume") == (0, {"output": "done"})
    assert effects(tmp_path) == ["push_branch feature/login", "write_note pushed login"]
    assert returns_saved(tmp_path, "call-note") == ["success:noted pushed login"]
    with agentrt.open_store(database) as store:
        assert steps(store) == [
            ("push_branch", "done", "tool_result"),
            ("write_note", "done", "tool_result"),
            ("complete", "done", ""),
        ]
        note = store.list_steps(RUN)[1]
        assert note.decision is not None
        assert note.decision.reason == "pydantic-ai tool call call-note"
        assert store.get_run(RUN).status == "COMPLETED"
        assert store.verify_events().intact


@pytest.mark.slow
def test_a_call_held_behind_one_cut_off_by_sigkill_stays_held_until_a_person_approves_again(
    database: str,
    tmp_path: Path,
) -> None:
    setup_child(tmp_path, "held", database=database)
    assert spawn(tmp_path, "start")[0] == 2
    approve_the_framework_way(tmp_path, "call-push")
    assert kill_mid_call(tmp_path) == -signal.SIGKILL
    assert effects(tmp_path) == ["push_branch feature/login"]
    # Pydantic AI's own resume, with the same DeferredToolResults: nothing runs.
    assert spawn(tmp_path, "resume") == (2, {"deferred": ["call-push", "call-note"]})
    assert effects(tmp_path) == ["push_branch feature/login"]
    requests = REQUESTS.validate_json((tmp_path / "requests.json").read_bytes())
    assert requests.metadata["call-push"]["agentrt"]["kind"] == "interrupted_side_effect"
    assert requests.metadata["call-note"]["agentrt"]["held_behind"] == "call-push"
    approve_the_framework_way(tmp_path, "call-push")
    assert spawn(tmp_path, "resume") == (0, {"output": "done"})
    assert effects(tmp_path) == [
        "push_branch feature/login",
        "push_branch feature/login",
        "write_note pushed login",
    ]
    with agentrt.open_store(database) as store:
        assert [s[0] for s in steps(store)] == ["push_branch", "write_note", "complete"]
        assert store.get_run(RUN).status == "COMPLETED"
        assert store.verify_events().intact


@pytest.mark.slow
@pytest.mark.parametrize("results", ["plain approvals", "none"])
def test_after_a_rejection_with_the_agentrt_command_the_model_is_told_and_nothing_runs(
    database: str, tmp_path: Path, results: str
) -> None:
    setup_child(tmp_path, "held", database=database)
    assert spawn(tmp_path, "start")[0] == 2
    rejected = forkserver.run(
        [
            *(sys.executable, "-m", "agentrt", "reject", RUN, "--db", str(database)),
            *(*BY, "--note", "not this week"),
        ],
        preload=PRELOAD_CLI,
        timeout=60,
    )
    assert rejected.returncode == 0, rejected.stderr
    if results == "plain approvals":
        plain = DeferredToolResults(
            approvals={"call-push": ToolApproved(), "call-note": ToolApproved()}
        )
        (tmp_path / "results.json").write_bytes(RESULTS.dump_json(plain))
    # The framework run continuing it answers the waiting call with the
    # rejection and the held call with the run's end, and ends cleanly.
    assert spawn(tmp_path, "resume") == (0, {"output": "done"})
    assert effects(tmp_path) == []
    ended = (
        f"agentrt run {RUN} is CANCELLED (approval_rejected: not this week); "
        "no tool call runs in it"
    )
    assert returns_saved(tmp_path, "call-push") == ["failed:approval rejected: not this week"]
    assert returns_saved(tmp_path, "call-note") == [
        f"failed:not run and not recorded: the call call-note was held behind call call-push, "
        f"and {ended}"
    ]
    with agentrt.open_store(database) as store:
        assert steps(store) == [("push_branch", "failed", "policy_denied")]
        run = store.get_run(RUN)
        assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
        assert store.verify_events().intact
    # A new turn on the ended run is still refused at its start.
    code, said = spawn(tmp_path, "start")
    assert (code, said["error"]) == (3, "RunStateError")


def test_an_approved_call_with_arguments_longer_than_a_read_cap_still_runs_once(
    database: str,
    tmp_path: Path,
) -> None:
    long_branch = child.LONG_BRANCH
    assert len(long_branch) > 65_536  # Store.list_steps' default read cap
    store, _, result = run_script(tmp_path, "long", database=database)
    gate = make_gate(store)
    agent = child.agent(tmp_path, "long", gate=gate)
    again = agent.run_sync(
        message_history=result.all_messages(),
        deferred_tool_results=approved(result.output, "call-long", by="alice"),
        metadata=gate.run_metadata(RUN),
    )
    assert again.output == "pushed"
    assert effects(tmp_path) == [f"push_branch {long_branch}"]


# -- a call issued again after its outcome was recorded -----------------------------


async def stop_after_the_tools(
    tmp_path: Path, script: str, database: str | None = None
) -> tuple[agentrt.Store, list[Any]]:
    """Run until the tools' outcomes are recorded; keep the history as it was before them.

    Leaving `agent.iter` there ends the framework run as a program that stops
    (or dies) would: the agentrt run stays RUNNING, its lease let go, and the
    history the program saved last ends with the model's calls, without returns.
    """
    from pydantic_ai._agent_graph import CallToolsNode

    store = agentrt.open_store(database or tmp_path / "runs.db")
    gate = make_gate(store)
    agent = child.agent(tmp_path, script, gate=gate)
    saved: list[Any] = []
    tools_ran = False
    async with agent.iter("tidy the repo", metadata=gate.run_metadata(RUN)) as run:
        async for node in run:
            if tools_ran:
                break
            saved = run.all_messages()
            tools_ran = isinstance(node, CallToolsNode)
    assert store.get_run(RUN).status == "RUNNING"
    return store, saved


async def resume_from(
    tmp_path: Path, store: agentrt.Store, script: str, history: list[Any]
) -> tuple[Any, list[str]]:
    gate = make_gate(store)
    heard: list[str] = []
    agent = child.agent(tmp_path, script, gate=gate, heard=heard)
    result = await agent.run(message_history=history, metadata=gate.run_metadata(RUN))
    return result.output, heard


def test_a_recorded_call_issued_again_from_an_older_history_gets_its_recorded_return(
    database: str,
    tmp_path: Path,
) -> None:
    store, saved = asyncio.run(stop_after_the_tools(tmp_path, "note", database=database))
    assert effects(tmp_path) == ["write_note hello"]
    output, heard = asyncio.run(resume_from(tmp_path, store, "note", saved))
    assert output == "noted"
    assert effects(tmp_path) == ["write_note hello"]
    assert heard == ["ToolReturnPart:success:noted hello"]
    assert steps(store) == [("write_note", "done", "tool_result"), ("complete", "done", "")]
    assert [e.type for e in store.list_events(RUN)].count("step.tool_started") == 1


def test_a_recorded_denial_issued_again_is_the_same_failure_and_asks_nobody(
    database: str,
    tmp_path: Path,
) -> None:
    store, saved = asyncio.run(stop_after_the_tools(tmp_path, "deny", database=database))
    output, heard = asyncio.run(resume_from(tmp_path, store, "deny", saved))
    assert output == "gave up"
    assert effects(tmp_path) == []
    assert heard == ["ToolReturnPart:failed:destructive tools are denied by the default policy"]
    assert steps(store) == [("delete_branch", "failed", "policy_denied"), ("complete", "done", "")]
    assert store.list_approvals(RUN) == []


def test_a_recorded_call_issued_again_with_other_arguments_is_refused_and_never_runs(
    database: str,
    tmp_path: Path,
) -> None:
    store, saved = asyncio.run(stop_after_the_tools(tmp_path, "note", database=database))
    changed = ModelMessagesTypeAdapter.validate_json(
        ModelMessagesTypeAdapter.dump_json(saved).replace(b'"hello"', b'"goodbye"')
    )
    output, heard = asyncio.run(resume_from(tmp_path, store, "note", changed))
    assert output == "noted"
    assert effects(tmp_path) == ["write_note hello"]
    assert heard == [
        f"ToolReturnPart:failed:refused: the call call-note was recorded (step 0 of run {RUN}) "
        "as write_note with other arguments; a changed call is not run as the recorded one; "
        "nothing ran"
    ]
    assert steps(store) == [("write_note", "done", "tool_result"), ("complete", "done", "")]


def kill_at_the_model(workdir: Path, mode: str) -> int:
    """Run the child until its model is asked after a tool returned; SIGKILL it there.

    The tool's outcome is recorded; the history the child saved last holds the
    call but not its return.
    """
    proc = forkserver.server(*PRELOAD_CLI).spawn(
        [sys.executable, str(CHILD), str(workdir), mode, "--hang-model"], cwd=ROOT, capture=True
    )
    deadline = time.monotonic() + 60
    while not (workdir / "model-started").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    (workdir / "model-started").unlink()
    return proc.returncode


def returns_saved(workdir: Path, call_id: str) -> list[str]:
    saved = ModelMessagesTypeAdapter.validate_json((workdir / "history.json").read_bytes())
    return [
        f"{p.outcome}:{p.content}"
        for m in saved
        for p in getattr(m, "parts", [])
        if type(p).__name__ == "ToolReturnPart" and p.tool_call_id == call_id
    ]


@pytest.mark.slow
def test_a_local_change_recorded_before_a_sigkill_is_not_run_again_by_the_frameworks_resume(
    database: str,
    tmp_path: Path,
) -> None:
    setup_child(tmp_path, "note", database=database)
    assert kill_at_the_model(tmp_path, "start") == -signal.SIGKILL
    assert effects(tmp_path) == ["write_note hello"]
    assert returns_saved(tmp_path, "call-note") == []  # the saved history predates the return
    # Pydantic AI's own resume: the saved history, the same metadata; the call is issued again.
    assert spawn(tmp_path, "resume") == (0, {"output": "noted"})
    assert effects(tmp_path) == ["write_note hello"]
    assert returns_saved(tmp_path, "call-note") == ["success:noted hello"]
    with agentrt.open_store(database) as store:
        assert steps(store) == [("write_note", "done", "tool_result"), ("complete", "done", "")]
        assert store.get_run(RUN).status == "COMPLETED"
        assert store.list_approvals(RUN) == []
        types = [e.type for e in store.list_events(RUN)]
        assert (types.count("step.tool_started"), types.count("lease.taken_over")) == (1, 1)
        assert store.verify_events().intact


@pytest.mark.slow
def test_an_approved_push_recorded_before_a_sigkill_is_not_asked_for_or_run_again(
    database: str,
    tmp_path: Path,
) -> None:
    setup_child(tmp_path, "push", database=database)
    assert spawn(tmp_path, "start")[0] == 2
    approve_the_framework_way(tmp_path, "call-push")
    assert kill_at_the_model(tmp_path, "resume") == -signal.SIGKILL
    assert effects(tmp_path) == ["push_branch feature/login"]
    assert returns_saved(tmp_path, "call-push") == []
    # The framework's resume: the saved history and the same DeferredToolResults.
    assert spawn(tmp_path, "resume") == (0, {"output": "pushed"})
    assert effects(tmp_path) == ["push_branch feature/login"]
    assert returns_saved(tmp_path, "call-push") == ["success:pushed feature/login"]
    with agentrt.open_store(database) as store:
        assert store.get_run(RUN).status == "COMPLETED"
        assert [(a.kind, a.status) for a in store.list_approvals(RUN)] == [
            ("remote_mutation", "approved")
        ]
        assert steps(store) == [("push_branch", "done", "tool_result"), ("complete", "done", "")]
        assert [e.type for e in store.list_events(RUN)].count("step.tool_started") == 1


# -- the streaming entry points: the same Gate as `run` ------------------------------

ENTRY_POINTS = ["run_stream", "run_stream_sync", "iter", "run_stream_events"]


def through(agent: Any, how: str, prompt: str | None, **kw: Any) -> tuple[Any, list[Any]]:
    """Run the agent through one of Pydantic AI's entry points: its output and message history.

    Each is used as its documentation shows, to the end: the stream read
    whole, the nodes iterated, the events consumed.
    """
    if how == "run_stream_sync":
        with agent.run_stream_sync(prompt, **kw) as res:
            return res.get_output(), res.all_messages()
    if how == "run":
        result = agent.run_sync(prompt, **kw)
        return result.output, result.all_messages()

    async def drive() -> tuple[Any, list[Any]]:
        if how == "run_stream":
            async with agent.run_stream(prompt, **kw) as res:
                return await res.get_output(), res.all_messages()
        if how == "iter":
            async with agent.iter(prompt, **kw) as run:
                async for _node in run:
                    pass
            assert run.result is not None
            return run.result.output, run.result.all_messages()
        assert how == "run_stream_events"
        async with agent.run_stream_events(prompt, **kw) as events:
            seen = [event async for event in events]
        assert isinstance(seen[-1], AgentRunResultEvent)
        return seen[-1].result.output, seen[-1].result.all_messages()

    return asyncio.run(drive())


@pytest.mark.parametrize("how", ENTRY_POINTS)
def test_each_streaming_entry_point_runs_allowed_calls_once_and_its_output_completes_the_run(
    database: str, tmp_path: Path, how: str
) -> None:
    store = agentrt.open_store(database)
    gate = make_gate(store)
    agent = child.agent(tmp_path, "allow", gate=gate)
    output, _ = through(agent, how, "tidy the repo", metadata=gate.run_metadata(RUN))
    assert output == "done"
    assert effects(tmp_path) == ["write_note hello"]
    assert steps(store) == [
        ("list_branches", "done", "tool_result"),
        ("write_note", "done", "tool_result"),
        ("complete", "done", ""),
    ]
    note = store.list_steps(RUN)[1]
    assert note.decision is not None and note.decision.args == {"text": "hello"}
    run = store.get_run(RUN)
    assert (run.status, run.reason, run.result) == ("COMPLETED", "goal_completed", "done")
    assert store.lease(RUN).owner == ""
    assert store.verify_events().intact


@pytest.mark.parametrize("how", ENTRY_POINTS)
def test_each_streaming_entry_point_ends_deferred_on_an_approval_and_continues_after_it(
    database: str, tmp_path: Path, how: str
) -> None:
    store = agentrt.open_store(database)
    gate = make_gate(store)
    agent = child.agent(tmp_path, "held", gate=gate)
    meta = gate.run_metadata(RUN)
    requests, history = through(agent, how, "publish", metadata=meta)
    assert isinstance(requests, DeferredToolRequests)
    assert [c.tool_call_id for c in requests.approvals] == ["call-push", "call-note"]
    (pending,) = store.pending_approvals(RUN)
    assert requests.metadata["call-push"]["agentrt"]["hash"] == pending.hash
    assert requests.metadata["call-note"]["agentrt"]["held_behind"] == "call-push"
    assert effects(tmp_path) == []
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"
    assert store.lease(RUN).owner == ""
    output, _ = through(
        agent,
        how,
        None,
        message_history=history,
        deferred_tool_results=approved(requests, "call-push", by="alice"),
        metadata=meta,
    )
    assert output == "done"
    assert effects(tmp_path) == ["push_branch feature/login", "write_note pushed login"]
    assert steps(store) == [
        ("push_branch", "done", "tool_result"),
        ("write_note", "done", "tool_result"),
        ("complete", "done", ""),
    ]
    assert store.get_run(RUN).status == "COMPLETED"


def test_run_stream_taking_a_text_beside_a_waiting_call_as_output_leaves_the_run_waiting(
    database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = agentrt.open_store(database)
    gate = make_gate(store)
    agent = child.agent(tmp_path, "announce", gate=gate)
    meta = gate.run_metadata(RUN)
    with caplog.at_level("WARNING", logger="agentrt.adapters.pydantic_ai"):
        output, history = through(agent, "run_stream", "publish", metadata=meta)
    # Pydantic AI's run_stream: the text streamed first is the output, and the
    # deferral of the call beside it is dropped. Nothing ran; the run waits.
    assert output == "pushing now"
    assert effects(tmp_path) == []
    (pending,) = store.pending_approvals(RUN)
    run = store.get_run(RUN)
    assert (run.status, run.result) == ("WAITING_FOR_APPROVAL", None)
    assert steps(store) == [("push_branch", "awaiting_approval", "")]
    assert [r.getMessage() for r in caplog.records] == [
        "the framework run returned an output while agentrt run "
        f"{RUN} waits for a person (approval {pending.id}): the output is not recorded as the "
        "run's result; continue the framework run with the same metadata and its message "
        "history to get the DeferredToolRequests"
    ]
    # Continued as the warning says: the waiting call comes back deferred.
    requests, history = through(agent, "run", None, message_history=history, metadata=meta)
    assert isinstance(requests, DeferredToolRequests)
    assert requests.metadata["call-push"]["agentrt"]["approval_id"] == pending.id
    output, _ = through(
        agent,
        "run",
        None,
        message_history=history,
        deferred_tool_results=approved(requests, "call-push", by="alice"),
        metadata=meta,
    )
    assert output == "ok"
    assert effects(tmp_path) == ["push_branch feature/login"]
    assert store.get_run(RUN).status == "COMPLETED"


def test_a_stream_left_before_its_output_is_read_leaves_the_run_as_a_crash_would(
    database: str,
    tmp_path: Path,
) -> None:
    store = agentrt.open_store(database)
    gate = make_gate(store)
    agent = child.agent(tmp_path, "note", gate=gate)

    async def leave_early() -> list[Any]:
        async with agent.run_stream("note it", metadata=gate.run_metadata(RUN)) as res:
            return res.all_messages()  # the final answer is never read

    history = asyncio.run(leave_early())
    assert effects(tmp_path) == ["write_note hello"]
    assert steps(store) == [("write_note", "done", "tool_result")]
    run = store.get_run(RUN)
    assert (run.status, run.result) == ("RUNNING", None)
    assert store.lease(RUN).owner == ""  # let go: the next framework run continues it
    output, _ = through(
        agent, "run", None, message_history=history, metadata=gate.run_metadata(RUN)
    )
    assert output == "noted"
    assert effects(tmp_path) == ["write_note hello"]
    assert steps(store) == [("write_note", "done", "tool_result"), ("complete", "done", "")]
    assert store.get_run(RUN).status == "COMPLETED"


def test_the_gates_toolset_used_outside_a_run_of_its_agent_refuses_to_list_or_call_tools(
    database: str,
    tmp_path: Path,
) -> None:
    from pydantic_ai import Agent

    store = agentrt.open_store(database)
    gate = make_gate(store)
    wrapped = gate.get_wrapper_toolset(child.tools(tmp_path))
    assert wrapped is not None
    agent: Any = Agent(child.model(child.SCRIPTS["note"]), toolsets=[wrapped])
    with pytest.raises(agentrt.ConfigError, match="no call runs ungated"):
        agent.run_sync("note it")
    assert effects(tmp_path) == []
    assert store.list_runs() == []
