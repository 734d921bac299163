"""The code stays ruff- and mypy-clean: CI runs these with the rest of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_lint_is_clean() -> None:
    result = run("ruff", "check", "src", "tests", "examples", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = run("ruff", "format", "--check", "src", "tests", "examples", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = run("mypy", "src/agentrt")
    assert result.returncode == 0, result.stdout + result.stderr
