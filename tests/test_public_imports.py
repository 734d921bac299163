"""`import agentrt` reaches the documented submodules, loads none it does not need, leaks nothing.

Each check runs in a fresh interpreter, so modules this test process already
imported cannot hide a missing import.
"""

from __future__ import annotations

import ast
import importlib
import pickle
import subprocess
import sys
import types
from pathlib import Path

import pytest

import agentrt

DOCUMENTED = {
    "export",
    "model_agent",
    "providers",
    "recover",
    "render",
    "replay",
    "scripted",
    "testkit",
    "trace",
    "view",
}


def fresh(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_after_import_agentrt_the_documented_submodules_are_reachable() -> None:
    out = fresh(
        "import agentrt\n"
        "print(agentrt.scripted.ScriptedAgent.__name__, agentrt.export.Follower.__name__,\n"
        "      agentrt.trace.TextObserver.__name__, agentrt.testkit.crash_matrix.__name__,\n"
        "      agentrt.replay.ScriptedModel.__name__)"
    )
    assert out == "ScriptedAgent Follower TextObserver crash_matrix ScriptedModel"


def test_import_agentrt_loads_the_test_kit_and_the_exporter_only_when_used() -> None:
    out = fresh(
        "import sys, agentrt\n"
        "lazy = ('agentrt.testkit', 'agentrt.export', 'agentrt.replay', 'agentrt.scripted')\n"
        "print(sorted(m for m in lazy if m in sys.modules))\n"
        "agentrt.testkit\n"
        "print('agentrt.testkit' in sys.modules)"
    )
    assert out.splitlines() == ["[]", "True"]


def test_nothing_private_leaks_into_dir_agentrt() -> None:
    names = dir(agentrt)
    assert names == sorted({*agentrt.__all__, *DOCUMENTED, "__version__"})
    assert [n for n in names if n.startswith("_") and n != "__version__"] == []
    internal = [
        n
        for n in names
        if isinstance(getattr(agentrt, n), types.ModuleType) and n not in DOCUMENTED
    ]
    assert internal == []
    assert "annotations" not in names and "session" not in names and "lease" not in names


def test_every_name_in_dunder_all_is_importable_and_star_import_gives_exactly_them() -> None:
    assert [n for n in agentrt.__all__ if not hasattr(agentrt, n)] == []
    out = fresh(
        "ns = {}\nexec('from agentrt import *', ns)\n"
        "import agentrt\nprint(sorted(k for k in ns if k != '__builtins__') == "
        "sorted(agentrt.__all__))"
    )
    assert out == "True"


def test_an_unknown_attribute_of_agentrt_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="module 'agentrt' has no attribute 'nope'"):
        agentrt.nope  # noqa: B018


def test_every_public_class_and_function_from_a_private_module_names_agentrt() -> None:
    misnamed = [
        name
        for name in agentrt.__all__
        if isinstance(getattr(agentrt, name), type | types.FunctionType)
        and getattr(agentrt, name).__module__.startswith("agentrt._")
    ]
    assert misnamed == []
    assert repr(agentrt.Run) == "<class 'agentrt.Run'>"
    assert agentrt.tool.__module__ == "agentrt"


def test_a_public_record_and_an_error_named_agentrt_pickle_and_unpickle() -> None:
    decision = agentrt.PolicyDecision.deny("not on a weekday")
    limits = agentrt.Limits(max_steps=7)
    error = agentrt.RunStateError("the run moved")
    assert pickle.loads(pickle.dumps(decision)) == decision
    assert pickle.loads(pickle.dumps(limits)) == limits
    assert pickle.loads(pickle.dumps(agentrt.RunStatus.RUNNING)) is agentrt.RunStatus.RUNNING
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is agentrt.RunStateError and back.args == ("the run moved",)
    assert b"agentrt._" not in pickle.dumps(decision) + pickle.dumps(error)


def test_agentrt_lowlevel_exports_exactly_its_dunder_all_and_the_crash_points_the_kit_names() -> (
    None
):
    import agentrt.lowlevel as lowlevel
    from agentrt.testkit import Point

    ns: dict[str, object] = {}
    exec("from agentrt.lowlevel import *", ns)
    assert sorted(k for k in ns if k != "__builtins__") == sorted(lowlevel.__all__)
    points = {getattr(lowlevel, n) for n in lowlevel.__all__ if n.startswith("POINT_")}
    assert points == {p.value for p in Point}


def test_every_error_class_of_the_runtime_is_importable_from_agentrt() -> None:
    import agentrt._errors as errors

    missing = [
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ in {"agentrt", "agentrt._errors"}
        and name not in agentrt.__all__
    ]
    assert missing == []
    assert agentrt.MCPServerError.__module__ == "agentrt"


def test_a_public_class_says_agentrt_when_a_door_imported_its_private_module_first() -> None:
    # Decision 0034 with lazy names (decision 0090): the module that defines a public class
    # claims it as soon as it has run, before anything reads `agentrt.Run`.
    out = fresh(
        "import pickle, sys\n"
        "import agentrt._records as records, agentrt._session as session\n"
        "import agentrt._store._base as base\n"
        "untouched = [n for n in ('Run', 'Limits', 'VerdictOutcome', 'Store')\n"
        "             if n in vars(sys.modules['agentrt'])]\n"
        "dumped = pickle.dumps(records.Limits(max_steps=3))\n"
        "print(untouched, records.Run.__module__, records.Limits.__module__,\n"
        "      session.VerdictOutcome.__module__, base.Store.__module__,\n"
        "      records.operation_id.__module__, b'agentrt._' in dumped,\n"
        "      pickle.loads(dumped) == records.Limits(max_steps=3))\n"
        "import agentrt.testkit, agentrt.lowlevel\n"
        "print(records.Decision.__module__, agentrt.Decision is records.Decision)"
    )
    assert out.splitlines() == [
        "[] agentrt agentrt agentrt agentrt agentrt False True",
        "agentrt True",
    ]


def test_a_private_module_holds_names_that_are_not_public_under_their_own_module() -> None:
    # Only the names `agentrt` exports are claimed: `open_store` of the SQLite store is
    # another function with the same name, and keeps its module.
    out = fresh(
        "import agentrt._store.sqlite._store as sqlite_store, agentrt\n"
        "print(sqlite_store.open_store.__module__, agentrt.open_store.__module__,\n"
        "      agentrt.open_store is sqlite_store.open_store)"
    )
    assert out == "agentrt._store.sqlite._store agentrt False"


def _type_checking_imports() -> dict[str, str]:
    """Name -> module of the imports `agentrt/__init__.py` makes under `if TYPE_CHECKING:`."""
    tree = ast.parse(Path(agentrt.__file__).read_text(encoding="utf-8"))
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1
    return {
        alias.name: f".{node.module}"
        for node in blocks[0].body
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    }


def test_the_lazy_table_the_type_checking_imports_and_dunder_all_name_the_same_things() -> None:
    table = agentrt._EXPORTS
    seen = _type_checking_imports()
    assert seen.pop("RUNTIME_VERSION") == "._store"  # `__version__`, reachable, not listed
    assert seen == table
    assert sorted(table) == sorted(agentrt.__all__)
    assert len(agentrt.__all__) == len(set(agentrt.__all__))


def test_each_public_class_and_function_is_looked_up_where_it_is_defined() -> None:
    # The claim runs when the module in the table has run, so the table must name the
    # module whose source defines the class or function, not one that re-exports it.
    src = Path(agentrt.__file__).parent
    wrong = []
    for name, module in agentrt._EXPORTS.items():
        value = getattr(agentrt, name)
        assert vars(importlib.import_module(module, "agentrt"))[name] is value
        if not isinstance(value, type | types.FunctionType):
            continue  # a type alias (`ContentBlock`)
        parts = module.lstrip(".").split(".")
        path = src.joinpath(*parts).with_suffix(".py")
        if not path.exists():
            path = src.joinpath(*parts, "__init__.py")
        defined = {
            node.name
            for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        }
        if name not in defined:
            wrong.append((name, module))
    assert wrong == []


def test_private_modules_stay_reachable_as_attributes_and_an_unknown_one_is_refused() -> None:
    out = fresh(
        "import sys, agentrt\n"
        "before = 'agentrt._operator' in sys.modules\n"
        "same = agentrt.__version__ == agentrt.RUNTIME_VERSION\n"
        "print(before, agentrt._operator.__name__, same)\n"
        "try:\n"
        "    agentrt._no_such_module\n"
        "except AttributeError as e:\n"
        "    print(e)"
    )
    assert out.splitlines() == [
        "False agentrt._operator True",
        "module 'agentrt' has no attribute '_no_such_module'",
    ]


def test_a_reload_of_agentrt_keeps_one_claiming_finder_and_the_claim() -> None:
    out = fresh(
        "import importlib, sys, agentrt\n"
        "importlib.reload(agentrt)\n"
        "importlib.reload(agentrt)\n"
        "import agentrt._records as records\n"
        "finders = [f for f in sys.meta_path if getattr(f, 'agentrt_claims', False)]\n"
        "print(len(finders), sys.meta_path[0] is finders[0], records.Run.__module__,\n"
        "      agentrt.Run is records.Run)"
    )
    assert out == "1 True agentrt True"
