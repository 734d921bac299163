"""The code stays ruff- and mypy-clean: CI runs these with the rest of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=540
    )


def test_ruff_lint_is_clean() -> None:
    result = run("ruff", "check", "src", "tests", "examples", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = run("ruff", "format", "--check", "src", "tests", "examples", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


# A hang guard, not a speed test: from a fresh clone mypy has no cache and checks every
# module (about 30 s on an idle core), which shared cores can stretch past two minutes.
@pytest.mark.timeout(600)
def test_mypy_strict_is_clean() -> None:
    result = run("mypy", "src/agentrt")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_package_version_is_the_runtime_version_the_file_records() -> None:
    import tomllib

    import agentrt
    from agentrt._store.sqlite._migrations import RUNTIME_VERSION

    with open(ROOT / "pyproject.toml", "rb") as f:
        declared = tomllib.load(f)["project"]["version"]
    assert declared == RUNTIME_VERSION == agentrt.__version__


def test_the_api_names_of_the_spec_are_importable_from_agentrt() -> None:
    import agentrt

    names = [
        "RunStatus",
        "TerminalReason",
        "StepStatus",
        "DecisionKind",
        "DecisionOrigin",
        "ObservationKind",
        "SideEffect",
        "PolicyOutcome",
        "ApprovalStatus",
        "ReconcileOutcome",
        "ModelCallStatus",
        "Limits",
        "Run",
        "Step",
        "Decision",
        "Observation",
        "ToolSpec",
        "ToolCall",
        "ToolResult",
        "PolicyDecision",
        "ToolRequest",
        "RunView",
        "Approval",
        "StepInput",
        "Reconciliation",
        "Event",
        "Tool",
        "tool",
        "AbortRun",
        "compile_tool",
        "check_args",
        "Policy",
        "default_policy",
        "SideEffectPolicy",
        "need_approval",
        "decode_presentation",
        "Agent",
        "open_store",
        "open_existing",
        "Store",
        "Driver",
        "approve",
        "reject",
        "cancel",
        "Operator",
        "canonical_json",
        "policy_json",
        "content_hash",
        "check_json",
        "AgentrtError",
        "NotFoundError",
        "RunStateError",
        "RunLeasedError",
        "LeaseLostError",
        "NotPendingError",
        "ApprovalExpiredError",
        "ApprovalHashError",
        "ApprovalChangedError",
        "SchemaVersionError",
        "UnsafeSchemaError",
        "InsecureModeError",
        "SymlinkError",
        "SessionClosedError",
        "LimitExceeded",
        "ModelUnavailableError",
        "TransientModelError",
        "ServedModelError",
        "Model",
        "ModelRequest",
        "Message",
        "ModelResponse",
        "Usage",
        "ModelConfig",
        "parse_dollars",
    ]
    assert [n for n in names if not hasattr(agentrt, n)] == []


def test_import_agentrt_loads_no_optional_extra() -> None:
    code = (
        "import sys, agentrt, agentrt.approver, agentrt.mcp; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('anthropic', 'mcp', 'opentelemetry', 'psycopg', 'starlette') "
        "or m.startswith('agentrt.providers') or m == 'agentrt.approver._webhook'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
