"""The code stays ruff- and mypy-clean: CI runs these with the rest of the suite."""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from importlib import metadata
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


# mypy's cache, shared by every checkout on this machine that has the same interpreter
# and the same installed distributions (mypy and the typed packages it reads: 7,800 of
# the 7,950 modules it checks are the SDKs'). A fresh clone otherwise checks them all
# again: about 30 s of CPU, several minutes on shared cores. mypy validates every
# cached module by its content hash (a module whose path changed, in another clone,
# is reused only if its text is the same), so a changed agentrt module is checked
# again and a type error in it still fails the test (shown by the second check below).
# The shared copy is only ever replaced whole (a rename), never written in place; each
# run works on its own copy. It is used only in folders this user alone can write.
MYPY_CACHES = Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}" / "agentrt-mypy"


def mypy_cache_key() -> str:
    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    pyproject = (ROOT / "pyproject.toml").read_bytes()
    digest = hashlib.sha256("\n".join([sys.version, sys.platform, *installed]).encode())
    digest.update(pyproject)
    return digest.hexdigest()[:24]


def own_folder(path: Path) -> bool:
    """`path` is a folder of ours that nobody else can write (made so if missing)."""
    for folder in (path.parent, path):
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return False
    return True


def load_mypy_cache(into: Path) -> None:
    shared = MYPY_CACHES / mypy_cache_key()
    try:
        if not own_folder(MYPY_CACHES):
            raise OSError(f"{MYPY_CACHES} is not ours alone")
        shutil.copytree(shared, into)
    except (OSError, shutil.Error):  # none yet, replaced while copied, or not ours: empty
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir()


def save_mypy_cache(cache: Path) -> None:
    if not own_folder(MYPY_CACHES):
        return
    shared = MYPY_CACHES / mypy_cache_key()
    fresh = MYPY_CACHES / f".{shared.name}.{uuid.uuid4().hex}"
    shutil.copytree(cache, fresh)
    old = MYPY_CACHES / f".{shared.name}.{uuid.uuid4().hex}.old"
    with contextlib.suppress(OSError):  # none yet (or another run just moved it)
        os.rename(shared, old)
    try:
        os.rename(fresh, shared)
    except OSError:  # another run published first: theirs is as good
        shutil.rmtree(fresh, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    # Caches of other keys (other packages installed) not written for a week: gone.
    week_ago = time.time() - 7 * 24 * 3600
    for other in MYPY_CACHES.iterdir():
        with contextlib.suppress(OSError):
            if other.name != shared.name and other.stat().st_mtime < week_ago:
                shutil.rmtree(other, ignore_errors=True)


# A hang guard, not a speed test: with no shared cache yet mypy checks every module
# (about 30 s on an idle core), which shared cores can stretch past two minutes.
@pytest.mark.timeout(600)
def test_mypy_strict_is_clean(tmp_path: Path) -> None:
    cache = tmp_path / "mypy-cache"
    load_mypy_cache(cache)
    result = run("mypy", "--cache-dir", str(cache), "src/agentrt")
    assert result.returncode == 0, result.stdout + result.stderr
    save_mypy_cache(cache)

    # The same check, with the cache just written, of a copy of the package with one
    # module added that returns a str where it promises an int: mypy says so.
    copy = tmp_path / "src" / "agentrt"
    shutil.copytree(ROOT / "src" / "agentrt", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "_mistyped.py").write_text(
        '"""A type error."""\n\n\ndef count() -> int:\n    return "three"\n'
    )
    wrong = run("mypy", "--cache-dir", str(cache), str(copy))
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert wrong.stdout.splitlines()[:-1] == [
        f"{copy / '_mistyped.py'}:5: error: Incompatible return value type "
        '(got "str", expected "int")  [return-value]'
    ], wrong.stdout


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
