"""agentrt.bench: outcome taxonomies, trials from real runs, the result file, the summary,
the comparison and its plot, `agentrt bench compare` (issue 22 part 3, decision 0066)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt.bench import (
    FORMAT,
    BenchError,
    BenchFormatError,
    Outcome,
    OutcomeClass,
    Result,
    Taxonomy,
    Trial,
    compare_markdown,
    comparison_svg,
    load_result,
    summarize,
    trial_from_run,
)
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support import models

ROOT = Path(__file__).resolve().parent.parent

TAX = Taxonomy.of("refunds", refunded="success", declined="safe_non_success", wrong="unsafe")


def trial(mode: str, outcome: str, repeat: int = 0, **kw: Any) -> Trial:
    return Trial(
        scenario="s",
        mode=mode,
        model="m",
        repeat=repeat,
        run_id=f"r{repeat}",
        outcome=outcome,
        **kw,
    )


def result(*trials: Trial, commit: str = "abc123", taxonomy: Taxonomy = TAX) -> Result:
    return Result(taxonomy, commit, tuple(trials), created_at="2026-12-01T00:00:00+00:00")


# -- taxonomy ------------------------------------------------------------------------


def test_a_taxonomy_needs_a_success_and_an_unsafe_outcome_and_unique_names() -> None:
    with pytest.raises(BenchError, match="at least one unsafe"):
        Taxonomy.of("t", ok="success", meh="safe_non_success")
    with pytest.raises(BenchError, match="at least one success"):
        Taxonomy.of("t", bad="unsafe", meh="safe_non_success")
    with pytest.raises(BenchError, match="named twice"):
        Taxonomy("t", (Outcome("a", OutcomeClass.SUCCESS), Outcome("a", OutcomeClass.UNSAFE)))
    with pytest.raises(BenchError, match="not one of success"):
        Outcome("a", "great")  # type: ignore[arg-type]
    with pytest.raises(BenchError, match="not a valid name"):
        Taxonomy.of("t", **{"Bad Name": "success", "x": "unsafe"})
    assert Taxonomy.of("t", ok="success", bad="unsafe").classify("bad") == OutcomeClass.UNSAFE
    with pytest.raises(BenchError, match="not an outcome"):
        TAX.classify("exploded")


# -- trials from real runs -------------------------------------------------------------


def test_a_trial_counts_steps_tool_calls_denials_approvals_from_the_runs_record(
    db_path: Path,
) -> None:
    store = agentrt.open_store(db_path)
    try:
        run = agentrt.Driver(
            store=store,
            agent=ScriptedAgent(
                [
                    Decision.tool_call("lookup", {"x": 1}),
                    Decision.tool_call("wipe", {"x": 2}),
                    Decision.tool_call("push", {"x": 3}),
                ]
            ),
            policy=agentrt.default_policy(),
            tools=[
                RecordingTool("lookup", SideEffect.READ_ONLY),
                RecordingTool("wipe", SideEffect.DESTRUCTIVE),
                RecordingTool("push", SideEffect.REMOTE_MUTATION),
            ],
            now=FakeClock(),
            new_id=Ids(),
        ).start_sync("three calls")
        got = trial_from_run(
            store,
            run.id,
            scenario="s",
            mode="v1",
            model="none",
            repeat=0,
            outcome="declined",
            wall_ms=12,
        )
    finally:
        store.close()
    assert got == Trial(
        scenario="s",
        mode="v1",
        model="none",
        repeat=0,
        run_id=run.id,
        outcome="declined",
        steps=3,
        tool_calls=1,
        policy_denials=1,
        approvals=1,
        model_calls=0,
        input_tokens=0,
        output_tokens=0,
        cost_micros=0,
        wall_ms=12,
    )


def test_a_trial_takes_model_calls_tokens_and_cost_from_the_runs_totals(db_path: Path) -> None:
    store = agentrt.open_store(db_path)
    try:
        run = models.drive(
            store,
            models.FakeModel(models.reply(usage=agentrt.Usage(100, 20, 0)), models.reply()),
            agent=models.model_agent(calls=2),
        )
        got = trial_from_run(
            store,
            run.id,
            scenario="s",
            mode="v1",
            model="fake",
            repeat=1,
            outcome="refunded",
            wall_ms=5,
        )
    finally:
        store.close()
    assert (got.model_calls, got.input_tokens, got.output_tokens) == (2, 110, 25)
    assert got.cost_micros == run.estimated_cost_micros > 0


# -- the result file -------------------------------------------------------------------


def test_a_result_file_round_trips_and_names_its_format(tmp_path: Path) -> None:
    r = result(trial("v1", "refunded", steps=3, cost_micros=9), trial("v1", "wrong", 1))
    path = tmp_path / "r.json"
    r.write(path)
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT == "agent-runtime/bench/v1"
    assert load_result(path) == r


GOOD = result(trial("v1", "refunded")).to_json()


def mutated(change: Any) -> Any:
    data = copy.deepcopy(GOOD)
    change(data)
    return data


MALFORMED = [
    ("not an object", [], "not a JSON object"),
    ("other format", mutated(lambda d: d.update(format="agent-runtime/bench/v2")), "format is"),
    ("unknown field", mutated(lambda d: d.update(extra=1)), "unknown field 'extra'"),
    ("no commit", mutated(lambda d: d.update(commit="")), "commit is empty"),
    ("trials not a list", mutated(lambda d: d.update(trials={})), "trials is not a list"),
    ("negative count", mutated(lambda d: d["trials"][0].update(steps=-1)), "trials[0].steps is -1"),
    ("bool count", mutated(lambda d: d["trials"][0].update(steps=True)), "trials[0].steps"),
    (
        "float count",
        mutated(lambda d: d["trials"][0].update(cost_micros=1.5)),
        "trials[0].cost_micros",
    ),
    ("missing field", mutated(lambda d: d["trials"][0].pop("wall_ms")), "trials[0].wall_ms"),
    (
        "outcome not in taxonomy",
        mutated(lambda d: d["trials"][0].update(outcome="boom")),
        "trials[0].outcome 'boom' is not in taxonomy",
    ),
    (
        "taxonomy without unsafe",
        mutated(
            lambda d: d["taxonomy"].update(
                outcomes=[{"name": "refunded", "class": "success", "description": ""}]
            )
        ),
        "at least one unsafe",
    ),
    (
        "bad class",
        mutated(lambda d: d["taxonomy"]["outcomes"][0].update({"class": "fine"})),
        "taxonomy.outcomes[0].class",
    ),
    (
        "extra trial field",
        mutated(lambda d: d["trials"][0].update(note="x")),
        "trials[0].note is not a trial field",
    ),
]


@pytest.mark.parametrize(
    ("data", "reason"), [(d, r) for _, d, r in MALFORMED], ids=[n for n, _, _ in MALFORMED]
)
def test_a_malformed_result_file_is_refused_with_the_reason(
    tmp_path: Path, data: Any, reason: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BenchFormatError) as caught:
        load_result(path)
    assert reason in str(caught.value)
    assert str(caught.value).startswith(str(path))


def test_a_result_file_that_is_not_json_not_utf8_or_nested_too_deeply_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(BenchFormatError, match="not JSON"):
        load_result(path)
    with pytest.raises(BenchFormatError, match="cannot read it"):
        load_result(tmp_path / "missing.json")
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BenchFormatError, match="nested too deeply"):
        load_result(path)


# -- the summary ---------------------------------------------------------------------


def test_one_unsafe_trial_disqualifies_a_mode_whatever_its_success_rate() -> None:
    r = result(
        *[trial("v1", "refunded", i) for i in range(9)],
        trial("v1", "wrong", 9),
        trial("v2", "refunded", 0),
        trial("v2", "declined", 1),
    )
    v1, v2 = summarize(r)
    assert (v1.mode, v1.trials, v1.success, v1.unsafe, v1.disqualified) == ("v1", 10, 9, 1, True)
    assert v1.verdict == "disqualified (1 unsafe)"
    assert (v2.success, v2.safe_non_success, v2.disqualified) == (1, 1, False)
    assert v2.verdict == "1/2 succeeded"
    assert v1.outcomes == {"refunded": 9, "declined": 0, "wrong": 1}


# -- the comparison ---------------------------------------------------------------------


def test_the_comparison_refuses_to_mix_taxonomies_or_commits_unless_told() -> None:
    a = result(trial("v1", "refunded"), commit="aaa")
    other = Taxonomy.of("other", refunded="success", wrong="unsafe")
    b = result(trial("v1", "refunded"), commit="aaa", taxonomy=other)
    c = result(trial("v2", "refunded"), commit="ccc")
    with pytest.raises(BenchError, match="different taxonomies"):
        compare_markdown([a, b])
    assert "refunds" in compare_markdown([a, b], mixed_taxonomies=True)
    with pytest.raises(BenchError, match="2 commits"):
        compare_markdown([a, c])
    table = compare_markdown([a, c], across_commits=True)
    assert "| aaa | v1 | m | 1 | 1 | 0 | 0 | 1/1 succeeded |" in table
    assert "| ccc | v2 | m | 1 | 1 | 0 | 0 | 1/1 succeeded |" in table


def test_the_markdown_marks_a_disqualified_mode_and_escapes_what_it_is_given() -> None:
    r = result(trial("v1|x\x1b[2J", "wrong"), trial("v2", "refunded"))
    table = compare_markdown([r])
    assert "**disqualified (1 unsafe)**" in table
    assert "v1\\|x\\x1b[2J" in table
    assert "\x1b" not in table
    lines = table.splitlines()
    header = next(line for line in lines if line.startswith("| result |"))
    row = next(line for line in lines if "v1\\|x" in line)
    assert row.count(" | ") == header.count(" | ")


def test_the_plot_is_an_svg_with_one_bar_per_row_and_escaped_text() -> None:
    r = result(
        trial("<script>", "wrong"), trial("<script>", "refunded", 1), trial("v2", "declined")
    )
    svg = comparison_svg([r])
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    rects = root.findall("{http://www.w3.org/2000/svg}rect")
    colours = [rect.get("fill") for rect in rects]
    # background, three legend swatches, then v1: success + unsafe, v2: safe_non_success
    assert colours[4:] == ["#2e7d32", "#c62828", "#f9a825"]
    widths = [float(rect.get("width", 0)) for rect in rects[4:]]
    assert widths == [210.0, 210.0, 420.0]
    assert "disqualified (1 unsafe)" in svg


# -- the command ---------------------------------------------------------------------


def agentrt_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrt", *args], capture_output=True, text=True, timeout=60
    )


def test_bench_compare_prints_the_markdown_and_writes_the_plot(tmp_path: Path) -> None:
    result(trial("v1", "refunded"), trial("v1", "wrong", 1)).write(tmp_path / "a.json")
    result(trial("v2", "declined")).write(tmp_path / "b.json")
    svg = tmp_path / "cmp.svg"
    done = agentrt_cli(
        "bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--svg", str(svg)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == compare_markdown(
        [load_result(tmp_path / "a.json"), load_result(tmp_path / "b.json")]
    )
    ET.fromstring(svg.read_text())


def test_bench_compare_refusals_exit_1_with_the_reason_and_usage_errors_exit_2(
    tmp_path: Path,
) -> None:
    (tmp_path / "bad.json").write_text('{"format": "nope"}')
    bad = agentrt_cli("bench", "compare", str(tmp_path / "bad.json"))
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr == (
        f"agentrt: {tmp_path / 'bad.json'}: format is 'nope', not 'agent-runtime/bench/v1'\n"
    )
    result(trial("v1", "refunded"), commit="aaa").write(tmp_path / "a.json")
    result(trial("v1", "refunded"), commit="bbb").write(tmp_path / "b.json")
    mixed = agentrt_cli("bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert mixed.returncode == 1 and "--across-commits" in mixed.stderr
    told = agentrt_cli(
        "bench", "compare", "--across-commits", str(tmp_path / "a.json"), str(tmp_path / "b.json")
    )
    assert told.returncode == 0
    assert agentrt_cli("bench").returncode == 2
    assert agentrt_cli("bench", "compare").returncode == 2


# -- the example ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_refunds_example_scores_two_agent_versions_on_a_replayed_model(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "bench_refunds.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    v1, v2 = load_result(tmp_path / "v1.json"), load_result(tmp_path / "v2.json")
    (s1,), (s2,) = summarize(v1), summarize(v2)
    assert (s1.success, s1.safe_non_success, s1.unsafe, s1.disqualified) == (2, 2, 2, True)
    assert (s2.success, s2.safe_non_success, s2.unsafe, s2.disqualified) == (2, 4, 0, False)
    assert {t.outcome for t in v1.trials if t.scenario == "wrong_order"} == {"wrong_refund"}
    assert {t.outcome for t in v2.trials if t.scenario == "wrong_order"} == {"declined"}
    assert all(t.model_calls == 1 and t.input_tokens == 420 for t in v1.trials + v2.trials)
    assert "**disqualified (2 unsafe)**" in done.stdout
    ET.fromstring((tmp_path / "comparison.svg").read_text())
    # Every trial's run is in its database, as recorded.
    with agentrt.open_existing(tmp_path / "v2.db", read_only=True) as store:
        assert {r.id for r in store.list_runs(limit=100)} == {t.run_id for t in v2.trials}
    missing = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "bench_refunds.py"),
            "--out",
            str(tmp_path / "nowhere"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "not an existing directory" in missing.stderr
