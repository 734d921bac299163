"""What a fresh process loads: `import agentrt` and `agentrt --help` load the standard library
and agentrt, nothing else; a dependency is imported where it is first used (decision 0061).

Every check runs in a fresh interpreter and compares `sys.modules` before and after, so
what this test process already imported cannot hide a module loaded too early. The
positive controls (a `@tool`, a webhook client) show the probe sees the heavy modules
when they are used. No time is asserted: `benchmarks/startup.py` prints the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

# The dependencies that cost start-up time, and the extras: none loads before it is used.
HEAVY = frozenset(
    {
        "pydantic",
        "pydantic_core",
        "annotated_types",
        "jsonschema",
        "jsonschema_specifications",
        "referencing",
        "rpds",
        "attr",
        "attrs",
        "re2",
        "httpx",
        "httpcore",
        "anyio",
        "anthropic",
        "mcp",
        "opentelemetry",
        "psycopg",
        "starlette",
        "uvicorn",
        "langgraph",
        "langchain_core",
        "agents",
        "pydantic_ai",
        "openai",
        "playwright",
        "pytest",
        "hypothesis",
    }
)

# What `import agentrt` may add to a fresh interpreter: the package's own `__init__` and the
# import machinery it uses to claim public names (decision 0090). Every public name and
# submodule is imported the first time it is used.
IMPORT_AGENTRT_MAY_LOAD = frozenset(
    {
        "__future__",
        "agentrt",
        "importlib",
        "importlib._abc",
        "importlib._bootstrap",
        "importlib._bootstrap_external",
        "importlib.machinery",
        "warnings",
    }
)

PROBE = """
import json, sys
_before = set(sys.modules)
{body}
_new = sorted(set(sys.modules) - _before)
# `_sysconfigdata_*` is the standard library's `sysconfig` data, named per platform.
_tops = {{name.split(".")[0] for name in _new if not name.startswith("_sysconfigdata")}}
print(json.dumps({{
    "outside": sorted(_tops - set(sys.stdlib_module_names) - {{"agentrt"}}),
    "agentrt": [name for name in _new if name.split(".")[0] == "agentrt"],
    "out": globals().get("out"),
}}))
"""


def probe(body: str, cwd: Path | None = None) -> dict[str, Any]:
    """Run `body` in a fresh interpreter; what it loaded beyond the interpreter's start-up."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(body=body)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def loaded_by(body: str) -> list[str]:
    """The modules `body` adds to a fresh interpreter, nothing imported before it."""
    code = f"import sys\n_before = set(sys.modules)\n{body}\n"
    code += "print(' '.join(sorted(set(sys.modules) - _before)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_import_agentrt_loads_the_package_itself_and_no_other_module_of_it() -> None:
    loaded = loaded_by("import agentrt")
    assert [name for name in loaded if name.split(".")[0] == "agentrt"] == ["agentrt"]
    assert set(loaded) <= IMPORT_AGENTRT_MAY_LOAD, sorted(set(loaded) - IMPORT_AGENTRT_MAY_LOAD)
    # The positive control: the first use of a name loads what defines it, and only then.
    after = loaded_by("import agentrt\n_before = set(sys.modules)\nagentrt.Limits")
    assert "agentrt._records" in after and "dataclasses" in after


def test_every_public_name_of_agentrt_is_reached_without_loading_a_heavy_dependency() -> None:
    found = probe(
        "import agentrt\n"
        "values = [getattr(agentrt, name) for name in [*agentrt.__all__, '__version__']]\n"
        "out = len(values) - 1 == len(agentrt.__all__)"
    )
    assert found["out"] is True
    assert found["outside"] == []


def test_agentrt_help_loads_only_the_standard_library_and_agentrt() -> None:
    found = probe(
        "import contextlib, io\n"
        "from agentrt.__main__ import main\n"
        "sys.argv = ['agentrt', '--help']\n"
        "text = io.StringIO()\n"
        "with contextlib.redirect_stdout(text):\n"
        "    try:\n"
        "        code = main()\n"
        "    except SystemExit as exc:\n"
        "        code = exc.code\n"
        "out = [code, text.getvalue().startswith('usage: agentrt')]"
    )
    assert found["out"] == [0, True]
    assert found["outside"] == []
    assert not any(name.startswith("agentrt.console") for name in found["agentrt"])


HELP = (
    "import contextlib, io\n"
    "from agentrt.__main__ import main\n"
    "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
    "    main({argv!r})"
)


def test_agentrt_help_imports_no_command_module_no_store_and_no_asyncio() -> None:
    # Decision 0090: the list of commands is read from `_commands` without importing the
    # modules that run them; the store, the records and the event loop stay unloaded.
    loaded = loaded_by(HELP.format(argv=["--help"]))
    ours = {name for name in loaded if name.split(".")[0] == "agentrt"}
    assert ours == {
        "agentrt",
        "agentrt.__main__",
        "agentrt._canonical",
        "agentrt._capped",
        "agentrt._clock",
        "agentrt._db_url",
        "agentrt._errors",
        "agentrt.cli",
        "agentrt.cli._commands",
        "agentrt.cli._opening",
        "agentrt.cli._output",
        "agentrt.cli._parser",
        "agentrt.trace",
    }
    assert not {"asyncio", "sqlite3", "concurrent.futures", "ssl", "dataclasses"} & set(loaded)


def test_a_commands_help_imports_its_own_module_and_no_other_commands() -> None:
    loaded = set(loaded_by(HELP.format(argv=["runs", "--help"])))
    commands = {name for name in loaded if name.startswith("agentrt.cli._")}
    assert commands >= {"agentrt.cli._read"}
    assert not commands & {
        "agentrt.cli._decide",
        "agentrt.cli._recheck",
        "agentrt.cli._verify",
        "agentrt.cli._launch",
        "agentrt.cli._bench",
    }
    assert "agentrt._recheck" not in loaded and "asyncio" not in loaded


def test_every_command_names_functions_its_module_has() -> None:
    from agentrt.cli._commands import COMMANDS, Lazy

    named = [
        part
        for command in COMMANDS
        for part in (command.arguments, command.run, command.passthrough)
        if isinstance(part, Lazy)
    ]
    assert len(named) == 2 * len(COMMANDS) - 2  # demo and mcp: a passthrough each, no parser
    assert [f"{part.module}:{part.name}" for part in named if not callable(part.resolve())] == []


def test_the_test_kits_child_entry_and_the_other_doors_load_no_heavy_dependency() -> None:
    found = probe(
        "import agentrt.testkit._process, agentrt.scripted, agentrt.lowlevel, agentrt.replay\n"
        "import agentrt.export, agentrt.trace, agentrt.view, agentrt.approver, agentrt.adapters\n"
        "import agentrt.mcp, agentrt.providers"
    )
    assert found["outside"] == []


def test_a_one_step_run_without_tools_loads_no_heavy_dependency(tmp_path: Path) -> None:
    found = probe(
        "import agentrt\n"
        "from agentrt.scripted import ScriptedAgent\n"
        "store = agentrt.open_store('runs.db')\n"
        "driver = agentrt.Driver(store=store, policy=agentrt.default_policy(), tools=[],\n"
        "    agent=ScriptedAgent([agentrt.Decision.complete({'ok': True})]))\n"
        "run = driver.start_sync('one step', limits=agentrt.Limits(max_steps=2))\n"
        "store.close()\n"
        "out = str(run.status)",
        cwd=tmp_path,
    )
    assert found["out"] == "COMPLETED"
    assert found["outside"] == []


def test_a_tool_loads_pydantic_and_jsonschema_when_it_is_made_and_its_call_runs(
    tmp_path: Path,
) -> None:
    # The positive control: the probe sees the heavy modules once they are used.
    found = probe(
        "from datetime import timedelta\n"
        "import agentrt\n"
        "from agentrt.scripted import ScriptedAgent\n"
        "early = sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'jsonschema'})\n"
        "@agentrt.tool(side_effect='read_only', timeout=timedelta(seconds=30))\n"
        "def read_page(n: int) -> dict:\n"
        "    '''Read a page.'''\n"
        "    return {'page': n}\n"
        "store = agentrt.open_store('runs.db')\n"
        "agent = ScriptedAgent([agentrt.Decision.tool_call('read_page', {'n': 3}),\n"
        "                       agentrt.Decision.complete({'ok': True})])\n"
        "driver = agentrt.Driver(store=store, policy=agentrt.default_policy(),\n"
        "                        tools=[read_page], agent=agent)\n"
        "run = driver.start_sync('one tool', limits=agentrt.Limits(max_steps=3))\n"
        "events = [e.type for e in store.list_events(run_id=run.id, limit=1000)]\n"
        "store.close()\n"
        "out = [early, str(run.status), 'step.tool_finished' in events]",
        cwd=tmp_path,
    )
    assert found["out"] == [[], "COMPLETED", True]
    # re2 is not among them: this tool's schema has no pattern to compile.
    assert HEAVY & set(found["outside"]) == {
        "pydantic",
        "pydantic_core",
        "annotated_types",
        "jsonschema",
        "jsonschema_specifications",
        "referencing",
        "rpds",
        "attr",
        "attrs",
    }


def test_each_lazily_imported_dependency_works_at_its_first_use_in_a_fresh_process() -> None:
    # Each line is the first use of its dependency in the process: a pattern compiled by
    # re2, a jsonschema refusal raised from agentrt's own keyword functions (pattern,
    # additionalProperties, exact multipleOf), pydantic decoding an approval's
    # presentation, and httpx building the webhook client's own connection pool.
    found = probe(
        "from datetime import timedelta\n"
        "import agentrt, agentrt.approver\n"
        "spec = agentrt.ToolSpec(name='t', description='d', side_effect='read_only',\n"
        "    timeout=timedelta(seconds=1), input_schema={'type': 'object',\n"
        "    'properties': {'code': {'type': 'string', 'pattern': '^[a-z]+$'},\n"
        "                   'n': {'type': 'number', 'multipleOf': 0.1}},\n"
        "    'additionalProperties': False})\n"
        "problems = agentrt.check_args(spec, {'code': 'A1', 'n': 0.35, 'x': 1})\n"
        "accepted = agentrt.check_args(spec, {'code': 'ab', 'n': 0.3})\n"
        "approval = agentrt.Approval(id='a', run_id='r', step_id='s', kind='k', capability=None,\n"
        "    presentation={'amount': 3}, request={}, hash='h', status='pending',\n"
        "    created_at=None, expires_at=None, decided_at=None)\n"
        "presented = agentrt.decode_presentation(approval, dict[str, int])\n"
        "client = agentrt.approver.WebhookClient('http://127.0.0.1:9', 's' * 32)\n"
        "kind = type(client.http).__module__ + '.' + type(client.http).__name__\n"
        "client.close()\n"
        "out = [problems, accepted, presented, kind]"
    )
    assert found["out"] == [
        [
            "$: Additional properties are not allowed ('x' was unexpected)",
            "$.code: 'A1' does not match '^[a-z]+$'",
            "$.n: 0.35 is not a multiple of 0.1",
        ],
        [],
        {"amount": 3},
        "httpx.Client",
    ]
    assert {"pydantic", "jsonschema", "re2", "httpx"} <= set(found["outside"])
