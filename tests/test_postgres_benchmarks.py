"""The PostgreSQL benchmark scripts run and print every figure (no timing is asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.postgres import server_url

ROOT = Path(__file__).resolve().parent.parent


def test_the_chain_head_benchmark_prints_each_variant_and_its_ratios() -> None:
    base = server_url("the chain-head benchmark")
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/pg_chain_head.py",
            "--url",
            base,
            "--writers",
            "1,8",
            "--seconds",
            "0.3",
            "--partitions",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [
        line.split()
        for line in lines
        if line.split()[:1] in (["1"], ["8"]) and "against" not in line
    ]
    assert [r[0] for r in rows] == ["1", "8"]
    # three figures, two ratios against chain off, three against one writer
    assert all(len(r) == 9 and all(x.endswith("x") for x in r[4:]) for r in rows)
    assert any(line.startswith("8 writers against 1 (target >= 4x): on ") for line in lines)
