"""The benchmark scripts run, print every figure, and measure what they say they measure.

No timing is asserted here (figures are for `benchmarks/`, not for pass/fail):
these tests keep the scripts working, and check that the schema replay writes
the rows and events a real step writes.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

import agentrt

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def test_the_driver_benchmark_prints_every_figure_and_the_verdicts(tmp_path: Path) -> None:
    done = run_script("benchmarks/driver.py", "--repeats", "1", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines if line[:5].strip() in {"10", "100", "400"}]
    # steps, observation (1 or 2 words), then 9 figures
    assert [(r[0], " ".join(r[1:-9])) for r in rows] == [
        (n, size) for n in ("10", "100", "400") for size in ("small", "8 KiB")
    ]
    assert all(len(r[-9:]) == 9 and r[-1].endswith("x") for r in rows)
    assert any(line.startswith("flat, small") for line in lines)
    assert any(line.startswith("vs floor") for line in lines)
    assert any("the schema's own SQL alone" in line for line in lines)
    assert list(tmp_path.iterdir()) == []  # its databases are gone


def test_the_schema_replay_writes_what_a_driver_step_writes(tmp_path: Path) -> None:
    bench = load("driver")
    replay = bench.SchemaReplay(str(tmp_path), bench.make_tool("x" * 100), "t")
    try:
        real_step = replay.store.query(
            "SELECT id FROM steps WHERE idx = 0 AND run_id != ? ORDER BY rowid DESC LIMIT 1",
            (replay.run_id,),
        )[0]["id"]
        real_events = [
            r["type"]
            for r in replay.store.query(
                "SELECT type FROM events WHERE step_id = ? ORDER BY seq", (real_step,)
            )
        ]
        before = replay.index
        replay.measure(3)
        steps = replay.store.query(
            "SELECT id, idx, status, decision_json, policy_json, observation_json FROM steps "
            "WHERE run_id = ? AND idx >= ? ORDER BY idx",
            (replay.run_id, before),
        )
        real = replay.store.query(
            "SELECT decision_json, policy_json, observation_json FROM steps WHERE id = ?",
            (real_step,),
        )[0]
        assert [s["idx"] for s in steps] == [before, before + 1, before + 2]
        for step in steps:
            assert step["status"] == "done"
            assert tuple(step)[3:] == tuple(real)  # the real run's texts, so the real sizes
            replayed = [
                r["type"]
                for r in replay.store.query(
                    "SELECT type FROM events WHERE step_id = ? ORDER BY seq", (step["id"],)
                )
            ]
            assert (
                replayed
                == real_events
                == [
                    "step.started",
                    "step.decided",
                    "step.policy",
                    "step.tool_started",
                    "step.tool_finished",
                ]
            )
        (run,) = replay.store.query(
            "SELECT step_count, active_ms FROM runs WHERE id = ?", (replay.run_id,)
        )
        assert tuple(run) == (replay.index, replay.index)
    finally:
        replay.close()


def test_the_phase_timer_prints_every_phase(tmp_path: Path) -> None:
    done = run_script(
        "benchmarks/step_phases.py", "--steps", "20", "--runs", "1", "--dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    labels = [line.split(None, 1)[1] for line in done.stdout.splitlines()[1:]]
    assert labels[:3] == [
        "in-loop wall time per step (timers included)",
        "SQL: COMMIT",
        "SQL: every other statement",
    ]
    assert {
        "step started: read, limits, claim kept (begin_step)",
        "decided: kept (record_decision)",
        "tx  claim, decision, tool started (start_tool)",
        "tx  tool finished (finish_tool)",
        "the tool call (invoke)",
    } <= {label.strip() for label in labels}


def test_a_run_is_driven_through_either_entry_point(tmp_path: Path) -> None:
    bench = load("driver")
    store = agentrt.open_store(tmp_path / "runs.db")
    try:
        for entry in ("sync", "async"):
            sample = bench.run_once(store, bench.make_tool(""), 5, entry=entry)
            assert sample.wall > sample.loop > 0 and sample.cpu > 0
        runs = store.list_runs()
        assert [(r.status, r.step_count) for r in runs] == [("COMPLETED", 6)] * 2
    finally:
        store.close()


@pytest.mark.slow
def test_the_pattern_benchmark_measures_every_engine_it_names() -> None:
    done = run_script("benchmarks/patterns.py", "--max-backtrack", "16")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for engine in ("re ", "re2 ", "agentrt (re2)"):
        assert sum(line.startswith(engine) for line in lines) == 2, engine
    assert any(line.startswith("'^(a+)+$' against") for line in lines)


@pytest.mark.slow
def test_the_tool_thread_benchmark_prints_each_way_of_calling_a_plain_tool() -> None:
    done = run_script("benchmarks/tool_threads.py", "--calls", "20")
    assert done.returncode == 0, done.stderr
    names = [line.rsplit(None, 2)[0] for line in done.stdout.splitlines()]
    assert names == ["pool thread (old)", "own daemon thread", "invoke, whole"]


def test_the_store_safety_benchmark_prints_every_figure(tmp_path: Path) -> None:
    done = run_script(
        "benchmarks/store_safety.py",
        *("--repeats", "1", "--runs", "300", "--steps", "50", "--mb", "1"),
        *("--dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for figure in (
        "unchanged schema (one PRAGMA schema_version)",
        "share of that transaction (unchanged)",
        "list_runs(100)",
        "PRAGMA quick_check",
        "PRAGMA integrity_check",
        "stored_values.body                                       1.0 MB",
        "of which free pages",
    ):
        assert figure in out, figure
    # Each large value stored once (decision 0084): allowed, echoed, and approved alike.
    stored = "large values stored                                      1.0 MB = 1.0x"
    assert out.count(stored) == 3, out
    assert "steps.decision_json" not in out and "events.payload_json" not in out
    assert list(tmp_path.iterdir()) == []  # its databases are gone


def test_the_stored_values_benchmark_prints_the_file_over_its_content_by_limit(
    tmp_path: Path,
) -> None:
    done = run_script(
        "benchmarks/stored_values.py",
        *("--steps", "10", "--sizes", "2048", "--limits", "0", "1024", "--dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "in rows" in lines[2] and "limit 1024" in lines[2]
    size, in_rows, _, _, once, _, _ = lines[3].split()
    assert size == "2048"
    assert float(once.rstrip("x")) < float(in_rows.rstrip("x"))
    assert list(tmp_path.iterdir()) == []


def test_the_gate_benchmark_prints_the_driver_and_the_gate_loop_side_by_side(
    tmp_path: Path,
) -> None:
    done = run_script("benchmarks/gate.py", "--steps", "5", "--rounds", "1", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("in-loop µs per step, 5 steps, median of 1 rounds")
    assert [line.split()[0] for line in lines[1:]] == ["driver", "gate", "gate/driver"]
    assert all(float(line.split()[-1]) > 0 for line in lines[1:])


def test_the_startup_benchmark_prints_every_command_and_where_import_agentrt_goes(
    tmp_path: Path,
) -> None:
    done = run_script(
        "benchmarks/startup.py", "--runs", "1", "--where", "3", "--as-is", "--dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    table = lines.index("1 runs of each, in turn; whole processes, milliseconds")
    rows = lines[table + 2 : table + 7]
    assert [row[:16].strip() for row in rows] == [
        "python -c pass",
        "import agentrt",
        "agentrt --help",
        "one-step run",
        "one-tool run",
    ]
    assert all(row.endswith("x") and len(row[16:].split()) == 5 for row in rows)
    assert rows[0].endswith(" 1.00x")
    where = next(i for i, line in enumerate(lines) if line.startswith("where `import agentrt`"))
    assert len([line for line in lines[where + 1 : where + 4] if " ms  " in line]) == 3
    assert list(tmp_path.iterdir()) == []  # the runs' stores are gone


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_call_lookup_benchmark_prints_each_frameworks_ends_alone_gated_and_the_adapters_share(
    tmp_path: Path,
) -> None:
    for framework in ("langgraph", "pydantic_ai", "agents"):
        pytest.importorskip(framework, reason="needs the adapters' extras")
    done = run_script("benchmarks/adapter_lookup.py", "--calls", "12", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "12 calls per run; cost per call in µs, median of the first and the last 5 calls"
    )
    rows = [line.split() for line in lines[4:16]]
    assert [row[:2] for row in rows] == [
        [name, side]
        for name in ("langgraph", "pydantic-ai", "openai-agents")
        for side in ("alone", "gated", "adapter", "look-up")
    ]
    assert all(float(row[2]) > 0 and float(row[3]) > 0 for row in rows if row[1] != "adapter")
    assert list(tmp_path.iterdir()) == []  # its stores are gone


def test_the_long_run_benchmark_prints_each_tenth_memory_and_the_file_over_its_content(
    tmp_path: Path,
) -> None:
    done = run_script(
        "benchmarks/long_run.py", "--steps", "20", "--size", "64", "--dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("20 steps of 64 bytes")
    tenths = lines[1].removeprefix("µs per step by tenth: ").split()
    assert len(tenths) == 10 and all(float(t.replace(",", "")) > 0 for t in tenths)
    assert lines[2].startswith("last tenth / first tenth: ") and "(target <= 1.2x)" in lines[2]
    assert lines[3].startswith("max RSS growth: ") and lines[3].endswith("(target <= 64 MiB)")
    assert lines[4].startswith("database: ") and lines[4].endswith("(target <= 1.5x)")
    assert list(tmp_path.iterdir()) == []  # its database is gone
