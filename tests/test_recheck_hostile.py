"""Re-checking against a hostile record or a hostile policy: a tampered `step.policy`,
a policy that edits what it is shown, a long run, an operator module that prints or
exits, a `--tools` that is not a list of tools, a `--since` beyond the calendar."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

import agentrt
import agentrt._policy_input as policy_input
from agentrt import Decision, PolicyDecision, RunView, SideEffect, ToolRequest
from agentrt._canonical import to_text
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from test_cli_recheck import POLICIES, make_run, run_main
from test_recheck import story_run


def tamper_first_decision(store: agentrt.Store, run_id: str, decision: Any) -> None:
    with store.transaction() as tx:
        for event in store.list_events(run_id=run_id):
            if event.type == "step.policy":
                payload = dict(event.payload)
                payload["decision"] = decision
                tx.execute(
                    "UPDATE events SET payload_json = ? WHERE seq = ?",
                    (to_text(payload), event.seq),
                )
                return


@pytest.mark.parametrize(
    ("decision", "why"),
    [
        ({"outcome": "\x1b[2Jallow", "reason": "r"}, "unknown outcome '\\x1b[2Jallow'"),
        ({"outcome": ["allow"]}, "unknown outcome ['allow']"),
        ({"outcome": "require_approval", "kind": 5}, "policy reason and kind must be strings"),
        ({"outcome": "require_approval", "kind": {"a": 1}}, "reason and kind must be strings"),
        ({"outcome": "require_approval", "reason": "r"}, "without naming its kind"),
    ],
)
def test_a_recorded_decision_that_is_not_a_usable_decision_is_not_recheckable(
    store: agentrt.Store, decision: Any, why: str
) -> None:
    run = story_run(store, agentrt.default_policy())
    tamper_first_decision(store, run.id, decision)
    report = agentrt.recheck(store, run.id, agentrt.default_policy())
    first = report.evaluations[0]
    assert first.verdict == "not_recheckable"
    assert first.detail.startswith("the recorded decision is not a usable decision: ")
    assert why in first.detail
    assert [e.verdict for e in report.evaluations[1:]] == ["same"] * 3
    # Every form of the report can be shown, and nothing recorded reaches a terminal raw.
    lines = [e.line(run.id) for e in report.evaluations]
    assert not any("\x1b" in line for line in lines)
    json.dumps(report.to_json())


def test_a_policy_that_edits_what_it_is_shown_changes_no_other_evaluation(
    store: agentrt.Store,
) -> None:
    run = story_run(store, agentrt.default_policy())
    seen: list[list[Any]] = []

    class Meddling:
        policy_id = "agentrt.default_policy/1"

        def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
            seen.append([s.decision.args for s in view.steps if s.decision is not None])
            decision = agentrt.default_policy().evaluate(request, view)
            for step in view.steps:
                if step.decision is not None and isinstance(step.decision.args, dict):
                    step.decision.args["meddled"] = True
            if view.approvals and isinstance(view.approvals[0].request, dict):
                view.approvals[0].request["meddled"] = True
            request.args["meddled"] = True
            return decision

    report = agentrt.recheck(store, run.id, Meddling())
    assert [e.verdict for e in report.evaluations] == ["same"] * 4
    # Each evaluation saw the record, not what the one before it did to its copy.
    assert all("meddled" not in args for view in seen for args in view)
    # And the record is as it was: the same policy re-checks it the same again.
    assert agentrt.recheck(store, run.id, agentrt.default_policy()).same


def test_a_long_run_is_rechecked_with_each_step_hashed_once(
    store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 60
    schema = {"type": "object", "properties": {"i": {"type": "integer"}}}
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(
            [Decision.tool_call("lookup", {"i": i}) for i in range(n)] + [Decision.complete({})]
        ),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.READ_ONLY, schema=schema)],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("look up", agentrt.Limits(max_steps=n + 5, loop_threshold=n + 5))
    assert run.status == "COMPLETED"
    hashed: list[str] = []
    real = policy_input.step_hash

    def counting(step: agentrt.Step) -> str:
        hashed.append(step.id)
        return real(step)

    monkeypatch.setattr(policy_input, "step_hash", counting)
    report = agentrt.recheck(store, run.id, agentrt.default_policy())
    assert [e.verdict for e in report.evaluations] == ["same"] * n
    # Evaluation k's view holds k steps: hashing each view whole is n(n-1)/2 step hashes
    # (1,770 here; 50 million for a run of 10,000 steps). Each step once is n - 1.
    assert len(hashed) == len(set(hashed)) == n - 1


EXTRA = """
import sys


class Chatty:
    policy_id = "agentrt.default_policy/1"

    def evaluate(self, request, view):
        print("debug: asked about", request.spec.name)
        return agentrt.default_policy().evaluate(request, view)


def chatty():
    print("building the policy")
    return Chatty()


tools_number = 42
tools_not_tools = [1, 2]


def tools_raising():
    raise RuntimeError("no tools today")


def exits():
    sys.exit(3)
"""


@pytest.fixture
def hostile_policies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "hostile_policy_code"
    folder.mkdir()
    (folder / "recheck_hostile.py").write_text(textwrap.dedent(POLICIES) + EXTRA)
    monkeypatch.syspath_prepend(str(folder))


def test_json_stays_one_document_when_the_policy_prints(
    db_path: Path, hostile_policies: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(db_path, "bob", prefix="a")
    code, out, err = run_main(
        capsys, "--db", str(db_path), "recheck", run.id, "--policy", "recheck_hostile:chatty"
    )
    assert code == 0
    assert "debug: asked about" not in out and "building the policy" not in out
    assert "building the policy" in err and err.count("debug: asked about") == 3
    code, out, err = run_main(
        capsys,
        *("--db", str(db_path), "recheck", run.id, "--policy", "recheck_hostile:chatty"),
        "--json",
    )
    assert code == 0
    assert json.loads(out)["counts"]["same"] == 3  # stdout is the document alone
    assert "building the policy" in err


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--tools", "recheck_hostile:tools_number"], "--tools recheck_hostile:tools_number"),
        (["--tools", "recheck_hostile:tools_not_tools"], "tools must be Tools or ToolSpecs"),
        (["--tools", "recheck_hostile:tools_raising"], "raised RuntimeError"),
        (["--policy", "recheck_hostile:exits"], "--policy recheck_hostile:exits exited (3)"),
    ],
)
def test_a_tools_or_policy_reference_that_is_unusable_is_a_usage_error(
    db_path: Path,
    hostile_policies: None,
    capsys: pytest.CaptureFixture[str],
    option: list[str],
    says: str,
) -> None:
    run = make_run(db_path, "bob", prefix="a")
    argv = ["--db", str(db_path), "recheck", run.id, "--policy", "recheck_hostile:same"]
    if option[0] == "--policy":
        argv = argv[:-2]
    code, out, err = run_main(capsys, *argv, *option)
    assert (code, out) == (2, "")
    assert says in err


def test_a_policy_module_that_exits_as_it_is_imported_is_a_usage_error(
    db_path: Path, tmp_path: Path, hostile_policies: None, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "hostile_policy_code" / "recheck_exits_at_import.py"
    module.write_text("import sys\nsys.exit(4)\n")
    run = make_run(db_path, "bob", prefix="a")
    code, out, err = run_main(
        capsys,
        *("--db", str(db_path), "recheck", run.id),
        *("--policy", "recheck_exits_at_import:policy"),
    )
    assert (code, out) == (2, "")
    assert "cannot import 'recheck_exits_at_import' for --policy: it exited (4)" in err


@pytest.mark.parametrize("since", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"])
def test_a_since_beyond_the_calendar_in_utc_is_a_usage_error_saying_so(
    db_path: Path, hostile_policies: None, capsys: pytest.CaptureFixture[str], since: str
) -> None:
    code, out, err = run_main(
        capsys,
        *("--db", str(db_path), "recheck", "--all", "--since", since),
        *("--policy", "recheck_hostile:same"),
    )
    assert (code, out) == (2, "")
    assert f"--since {since!r} is not a time" in err
    assert "2^63" not in err
