"""The package as a user gets it: the built wheel, not this checkout (issue 23 item 1).

The sdist and the wheel are built from the checkout with `python -m build`
(without build isolation, so nothing is fetched: the build backend is the
`test` extra's setuptools), checked with `twine check --strict`, and the wheel
is installed with `pip --no-deps --no-index` into a fresh virtualenv that has
no pip and no site-packages of anyone else's.

Its dependencies come from this environment, honestly and narrowly: for each
scenario the test resolves, from the *wheel's own* `Requires-Dist` lines, the
distributions the core (and the chosen extras) need, follows their own
requirements, and links exactly those distributions' top-level files into a
directory put on `PYTHONPATH`. Nothing else of this environment is visible, so
a module that needs a package its extra does not bring fails here, and the
checkout's `agentrt` (an editable install) is never on the path: each probe
asserts that `agentrt` was imported from the virtualenv.

Scenarios: the core alone, then each extra alone (and pytest alone, for the
plugin), so a module is seen both with its extra and without it. In each,
every public module of the wheel (no underscore in its dotted name) is imported
and every name in its `__all__` read; a module whose extra is missing must
refuse with one line naming the extra to install.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from support.once import once, run_folder

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow

EXTRA_OF = {
    "agentrt.adapters.langgraph": "langgraph",
    "agentrt.adapters.openai_agents": "openai-agents",
    "agentrt.adapters.pydantic_ai": "pydantic-ai",
    "agentrt.approver": "webhook",  # `webhook_app()` imports Starlette when called
    "agentrt.console": "console",
    "agentrt.mcp": "mcp",  # the connection names import the SDK when first read
    "agentrt.providers.anthropic": "anthropic",
}
"""The public modules that need an extra; every other public module needs the core only."""

PYTEST_PLUGIN = "agentrt.testkit.plugin"
"""Loaded by pytest through its entry point; it needs pytest, which no extra brings."""

_PROBE = r"""
import importlib, json, sys
from importlib import metadata
out = {"modules": {}}
import agentrt
out["agentrt_file"] = agentrt.__file__
out["version"] = agentrt.__version__
out["metadata_version"] = metadata.version("agentrt")
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            getattr(module, attr)
        if name == "agentrt.approver":
            try:
                module.webhook_app(None, secret=b"s" * 32)
            except ImportError:
                raise
            except Exception:
                pass  # past the import: the extra is there
        out["modules"][name] = ["ok", "", ""]
    except ImportError as exc:
        out["modules"][name] = [type(exc).__name__, str(exc), exc.name or ""]
print(json.dumps(out))
"""


def run(
    *args: str | Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
    )


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path
    metadata: str  # the wheel's METADATA

    def requirements(self) -> list[Requirement]:
        return [
            Requirement(line.partition(": ")[2])
            for line in self.metadata.splitlines()
            if line.startswith("Requires-Dist: ")
        ]

    def field(self, key: str) -> list[str]:
        return [
            line.partition(": ")[2]
            for line in self.metadata.splitlines()
            if line.startswith(f"{key}: ")
        ]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    # Parallel workers share one build: two builds of the same checkout at once would
    # write the same egg-info and sdist directory. The first worker builds under a lock.
    out = once(run_folder(tmp_path_factory), "release-dist", _build)
    (wheel,) = out.glob("agentrt-*.whl")
    (sdist,) = out.glob("agentrt-*.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        text = z.read(meta).decode()
    return Built(wheel, sdist, text)


def _build(out: Path) -> None:
    result = run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv (no pip, no system site-packages) holding only the wheel.

    Made once per test run, like the build, whichever workers run this module's tests:
    they only run its programs (without writing bytecode), in folders of their own.
    """

    def install(out: Path) -> None:
        home = out / "venv"
        venv.EnvBuilder(with_pip=False, system_site_packages=False).create(home)
        result = run(
            sys.executable, "-m", "pip", "--python", home / "bin" / "python", "install",
            "--quiet", "--no-deps", "--no-index", built.wheel,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr

    return once(run_folder(tmp_path_factory), "release-wheelenv", install) / "venv"


def _closure(requirements: Iterable[Requirement]) -> dict[str, metadata.Distribution]:
    """The installed distributions these requirements need, following their own."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = list(requirements)
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        dist = metadata.distribution(req.name)  # PackageNotFoundError: not installed here
        found[key[0]] = dist
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or any(
                sub.marker.evaluate({"extra": extra}) for extra in ("", *req.extras)
            ):
                todo.append(sub)
    return found


def _top_level(dist: metadata.Distribution) -> set[str]:
    parts = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
    return {p for p in parts if p != "__pycache__" and not p.endswith(".pth")}


@functools.cache
def _view(root: Path, extras: frozenset[str], requirements: tuple[str, ...]) -> Path:
    """A directory holding exactly the distributions the core and `extras` need."""
    reqs = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras):
            reqs.append(req)
    if "pytest" in extras:
        reqs.append(Requirement("pytest"))
    target = root / ("view-" + "-".join(sorted(extras)) if extras else "view-core")
    target.mkdir()
    for dist in _closure(reqs).values():
        assert canonicalize_name(dist.metadata["Name"]) != "agentrt"
        base = Path(str(dist.locate_file("")))
        for name in _top_level(dist):
            if (base / name).exists() and not (target / name).exists():
                (target / name).symlink_to(base / name)
    return target


def environment(view: Path, **extra: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "PYTHONPATH": str(view),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
    }
    env.update(extra)
    return env


def public_modules(wheel: Path) -> list[str]:
    """Every module of the wheel with no underscore-led part (`__init__`/`__main__` aside)."""
    names = []
    with zipfile.ZipFile(wheel) as z:
        for path in z.namelist():
            if not path.startswith("agentrt/") or not path.endswith(".py"):
                continue
            parts = path[: -len(".py")].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if any(p.startswith("_") and p != "__main__" for p in parts):
                continue
            names.append(".".join(parts))
    return sorted(names)


def probe(installed: Path, view: Path, modules: list[str], cwd: Path) -> dict[str, object]:
    result = run(installed / "bin" / "python", "-c", _PROBE, *modules,
                 env=environment(view), cwd=cwd)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, object] = json.loads(result.stdout)
    return data


def _scenarios() -> list[frozenset[str]]:
    extras = sorted(set(EXTRA_OF.values()))
    return [
        frozenset(),
        *(frozenset({e}) for e in extras),
        frozenset({"pytest"}),
    ]


def test_python_m_build_makes_a_wheel_and_an_sdist_that_pass_twine_check(built: Built) -> None:
    result = run(sys.executable, "-m", "twine", "check", "--strict", built.wheel, built.sdist)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout
    with tarfile.open(built.sdist) as sdist:
        names = {name.partition("/")[2] for name in sdist.getnames()}
    # The whole project a packager or a reviewer needs, the wheel built from it.
    assert {
        "LICENSE",
        "CHANGELOG.md",
        "SECURITY.md",
        "CONTRIBUTING.md",
        "mkdocs.yml",
        "docs/index.md",
        "tests/conftest.py",
        "tests/support/__init__.py",
        "examples/mcp/proxy.json",
        "src/agentrt/py.typed",
    } <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".db"))]


def test_the_wheel_is_typed_licensed_and_carries_classifiers_urls_and_every_extra(
    built: Built,
) -> None:
    from agentrt._store.sqlite._migrations import RUNTIME_VERSION

    with zipfile.ZipFile(built.wheel) as z:
        names = set(z.namelist())
        entry_points = z.read(f"agentrt-{RUNTIME_VERSION}.dist-info/entry_points.txt").decode()
        license_text = z.read(f"agentrt-{RUNTIME_VERSION}.dist-info/licenses/LICENSE").decode()
    assert "agentrt/py.typed" in names
    assert {"agentrt/console/static/console.css", "agentrt/console/static/console.js"} <= names
    assert not [n for n in names if n.startswith(("tests/", "docs/", "examples/"))]
    assert license_text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "agentrt = agentrt.__main__:main" in entry_points
    assert "agentrt-proxy = agentrt.mcp.proxy:main" in entry_points
    # The test kit's pytest plugin loads only when a project asks for it (decision 0056).
    assert "pytest11" not in entry_points and "agentrt.testkit.plugin" not in entry_points

    assert built.field("Version") == [RUNTIME_VERSION]
    assert built.field("License-Expression") == ["Apache-2.0"]
    assert built.field("Requires-Python") == [">=3.11"]
    classifiers = built.field("Classifier")
    assert {"Typing :: Typed", "Programming Language :: Python :: 3.11"} <= set(classifiers)
    # Each Python the suite runs on (.ci/run: 3.11, then the newest other; decision 0238)
    # is one the wheel names; it names none older than its Requires-Python.
    named = sorted(
        tuple(int(n) for n in c.rsplit(":: ", 1)[1].split("."))
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert sys.version_info[:2] in named
    assert named[0] == (3, 11) and named == [(3, minor) for minor in range(11, 11 + len(named))]
    assert [c for c in classifiers if c.startswith("Development Status ::")]
    urls = dict(u.split(", ", 1) for u in built.field("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}
    assert all(u.startswith("https://") for u in urls.values())
    with open(ROOT / "pyproject.toml", "rb") as f:
        declared = set(tomllib.load(f)["project"]["optional-dependencies"])
    assert set(built.field("Provides-Extra")) == declared
    assert set(EXTRA_OF.values()) <= declared


def test_agentrt_version_the_module_and_the_installed_metadata_agree(
    built: Built, installed: Path, tmp_path: Path
) -> None:
    from agentrt._store.sqlite._migrations import RUNTIME_VERSION

    view = _view(tmp_path, frozenset(), tuple(str(r) for r in built.requirements()))
    result = run(installed / "bin" / "agentrt", "--version", env=environment(view), cwd=tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, f"agentrt {RUNTIME_VERSION}")
    data = probe(installed, view, [], tmp_path)
    assert data["version"] == data["metadata_version"] == RUNTIME_VERSION
    assert str(data["agentrt_file"]).startswith(str(installed)), data["agentrt_file"]


def test_agentrt_demo_runs_from_the_wheel_with_the_core_dependencies_only(
    built: Built, installed: Path, tmp_path: Path
) -> None:
    view = _view(tmp_path, frozenset(), tuple(str(r) for r in built.requirements()))
    work = tmp_path / "demo"
    work.mkdir(mode=0o700)
    result = run(installed / "bin" / "agentrt", "demo", "--dir", work,
                 env=environment(view), cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "worker exit status: -9 (killed by signal 9)" in result.stdout
    assert "(interrupted_side_effect)" in result.stdout  # why the person is asked
    assert "the card processor received 2 charge requests" in result.stdout
    assert "event chain: 23 events, intact" in result.stdout


def test_agentrt_proxy_check_loads_the_example_config_from_the_wheel(
    built: Built, installed: Path, tmp_path: Path
) -> None:
    server = shutil.which("mcp-server-time", path=str(BIN))
    assert server, f"mcp-server-time is not installed in {BIN} (pip install -e '.[test]')"
    view = _view(tmp_path, frozenset({"mcp"}), tuple(str(r) for r in built.requirements()))
    work = tmp_path / "proxy"
    work.mkdir(mode=0o700)
    for name in ("proxy.json", "time.rules.json"):
        shutil.copy(ROOT / "examples" / "mcp" / name, work / name)
        (work / name).chmod(0o600)
    # The third-party server alone is on PATH, as `pip install mcp-server-time` puts it there.
    tools = tmp_path / "server-bin"
    tools.mkdir()
    (tools / "mcp-server-time").symlink_to(server)
    env = environment(view, PATH=f"{tools}:/usr/bin:/bin")
    agentrt_bin = installed / "bin" / "agentrt"
    pin = run(agentrt_bin, "mcp", "pin", "time", "--out", "time.manifest.json", "--",
              "mcp-server-time", "--local-timezone", "UTC", env=env, cwd=work)  # fmt: skip
    assert pin.returncode == 0, pin.stdout + pin.stderr
    check = run(installed / "bin" / "agentrt-proxy", "--config", "proxy.json", "--check",
                env=env, cwd=work)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert "agentrt-proxy: offers time_get_current_time (read_only)" in check.stderr
    assert "unavailable" not in check.stderr


@pytest.mark.parametrize(
    "extras", _scenarios(), ids=lambda s: "+".join(sorted(s)) if s else "core-only"
)
def test_every_public_module_imports_with_its_extra_and_names_the_extra_without_it(
    built: Built, installed: Path, tmp_path: Path, extras: frozenset[str]
) -> None:
    modules = public_modules(built.wheel)
    assert set(EXTRA_OF) | {PYTEST_PLUGIN} <= set(modules)
    view = _view(tmp_path, extras, tuple(str(r) for r in built.requirements()))
    present = {canonicalize_name(p.name.partition("-")[0]) for p in view.glob("*.dist-info")}
    # An extra is there when every distribution it names is (console and webhook share one).
    there = {
        extra
        for extra in set(EXTRA_OF.values())
        if all(
            canonicalize_name(r.name) in present
            for r in built.requirements()
            if r.marker is not None and r.marker.evaluate({"extra": extra})
        )
    }
    if "pytest" in extras:
        there.add("pytest")
    assert extras <= there
    data = probe(installed, view, modules, tmp_path)
    assert str(data["agentrt_file"]).startswith(str(installed)), data["agentrt_file"]
    outcomes = data["modules"]
    assert isinstance(outcomes, dict)
    for name in modules:
        kind, message, missing = outcomes[name]
        needs = "pytest" if name == PYTEST_PLUGIN else EXTRA_OF.get(name)
        if needs is None or needs in there:
            assert kind == "ok", f"{name} with {sorted(extras)}: {kind}: {message}"
        elif needs == "pytest":
            assert (kind, missing) == ("ModuleNotFoundError", "pytest"), (name, message)
        else:
            # One sentence, on one line, naming the extra to install.
            assert kind in ("ImportError", "ModuleNotFoundError"), (name, kind, message)
            assert f"pip install 'agentrt[{needs}]'" in message, (name, message)
            assert "\n" not in message, (name, message)
