"""`import agentrt` reaches the documented submodules, loads none it does not need, leaks nothing.

Each check runs in a fresh interpreter, so modules this test process already
imported cannot hide a missing import.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import types

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
