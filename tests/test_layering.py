"""The package's layering: SQL lives only in the store layer, no module imports in a cycle,
and the public line holds (docs/decisions/0034).

The public line: every module is a documented door (`PUBLIC_MODULES`) or has a
leading underscore somewhere in its dotted name; the test kit reaches the
machinery only through `agentrt` and `agentrt.lowlevel`; and no example or
document imports an underscore module.

The store layer is `agentrt/_store/`: the interface and one package per backend
(`_store/sqlite/`: opening, pragmas, transactions, migrations, the named writes and reads).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import agentrt

PACKAGE = Path(agentrt.__file__).parent

ROOT = Path(__file__).resolve().parent.parent

PUBLIC_MODULES = {
    "agentrt",
    "agentrt.__main__",
    "agentrt.adapters",
    "agentrt.adapters.pydantic_ai",
    "agentrt.adapters.langgraph",
    "agentrt.adapters.openai_agents",
    "agentrt.approver",
    "agentrt.cli",
    "agentrt.console",
    "agentrt.export",
    "agentrt.lowlevel",
    "agentrt.mcp",
    "agentrt.mcp.proxy",
    "agentrt.bench",
    "agentrt.otel",
    "agentrt.model_agent",
    "agentrt.providers",
    "agentrt.providers.anthropic",
    "agentrt.providers.ollama",
    "agentrt.providers.openai_compat",
    "agentrt.recover",
    "agentrt.render",
    "agentrt.replay",
    "agentrt.scripted",
    "agentrt.testkit",
    "agentrt.testkit.plugin",
    "agentrt.trace",
    "agentrt.view",
}
"""The documented doors; any other module must be private (an underscore in its name)."""

STORE_LAYER = {"_store"}

_SQL_START = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|PRAGMA|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|"
    r"RELEASE|CREATE|DROP|ALTER|WITH|VACUUM|ATTACH)\b"
)
"""A statement's first keyword, in capitals (how this package writes SQL)."""
_SQL_SHAPE = re.compile(
    r"^\s*(PRAGMA\s+\w+|CREATE\s+(TEMP\w*\s+)?(UNIQUE\s+)?(TABLE|INDEX|VIEW|TRIGGER)\b|"
    r"DROP\s+(TABLE|INDEX|VIEW|TRIGGER)\b|ALTER\s+TABLE\b|"
    r"BEGIN(\s+(IMMEDIATE|EXCLUSIVE|DEFERRED|TRANSACTION))?\s*;?\s*$|"
    r"(COMMIT|ROLLBACK|VACUUM)\s*;?\s*$|SAVEPOINT\s+\w+|RELEASE\s+SAVEPOINT\b|"
    r"ATTACH\s+DATABASE\b|WITH\s+(RECURSIVE\s+)?\w+(\s*\([^)]*\))?\s+AS\s*\(|"
    r"REPLACE\s+INTO\b)",
    re.IGNORECASE,
)
"""A statement in any case: its first keywords in the shape only SQL has (lowercase
`pragma ...`, `create table ...`), so that prose starting "with" or "release" passes."""
_SQL_ANYWHERE = re.compile(
    r"\bSELECT\b.*\bFROM\b|\bINSERT\s+(OR\s+\w+\s+)?INTO\b|\bUPDATE\s+\w+\s+SET\b|"
    r"\bDELETE\s+FROM\b|\bBEGIN\s+IMMEDIATE\b",
    re.DOTALL | re.IGNORECASE,
)
_DB_METHODS = {"execute", "executemany", "executescript", "append_event"}
"""What only the store layer calls: a statement, or an audit event."""
_SQLITE_TYPES = {
    "Connection",
    "Cursor",
    "Row",
    "Error",
    "DatabaseError",
    "OperationalError",
    "IntegrityError",
}
"""What a module outside the store layer may name from `sqlite3`: types to annotate
with and errors to catch, never a way to open a connection or run a statement."""


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A source file's tree, parsed once for every test here that reads it."""
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _nodes(tree: ast.AST) -> tuple[ast.AST, ...]:
    """Every node of a tree, walked once (each check reads them several times)."""
    return tuple(ast.walk(tree))


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if ".venv" not in p.parts)


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else path.name


def _in_store_layer(relative: str) -> bool:
    return relative in STORE_LAYER or relative.split("/")[0] in STORE_LAYER


def _literal_texts(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Every string or bytes literal, an f-string read as its literal parts joined."""
    texts: list[tuple[ast.AST, str]] = []
    inside_fstrings: set[int] = set()
    for node in _nodes(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "?"
                for v in node.values
            ]
            texts.append((node, "".join(parts)))
            inside_fstrings.update(id(v) for v in node.values)
    for node in _nodes(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            folded = _fold(node)  # "UPD" + "ATE" is still UPDATE
            if folded is not None:
                texts.append((node, folded))
    for node in _nodes(tree):
        if isinstance(node, ast.Constant) and id(node) not in inside_fstrings:
            if isinstance(node.value, str):
                texts.append((node, node.value))
            elif isinstance(node.value, bytes):
                texts.append((node, node.value.decode("latin-1")))
    return texts


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in _nodes(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _fold(node: ast.expr) -> str | None:
    """A sum of string literals as the text it makes; None when any part is not one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _fold(node.left), _fold(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _is_sql(text: str) -> bool:
    return bool(_SQL_START.match(text) or _SQL_SHAPE.match(text) or _SQL_ANYWHERE.search(text))


def _db_access(tree: ast.AST) -> list[tuple[int, str]]:
    """Statements and events reached other than through the store layer's named writes.

    Any attribute `execute`, `executemany`, `executescript` or `append_event` (called,
    or taken as a value to call later), on whatever object, and the same names as a
    string (`getattr`); one exception: `.execute()` called with no argument is the
    Gate's `GateStep.execute`, which no connection or cursor accepts. And `sqlite3`
    other than its types and errors: `from sqlite3 import ...`, `import sqlite3 as`,
    `sqlite3.connect`, the module passed around as a value.
    """
    bare_calls = {
        id(node.func)
        for node in _nodes(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "execute"
        and not node.args
        and not node.keywords
    }
    sqlite_bases = {
        id(node.value)
        for node in _nodes(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "sqlite3"
    }
    hits: list[tuple[int, str]] = []
    for node in _nodes(tree):
        if isinstance(node, ast.Attribute) and node.attr in _DB_METHODS:
            if id(node) not in bare_calls:
                hits.append((node.lineno, f"a statement or event of its own ({ast.unparse(node)})"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in _DB_METHODS
        ):
            hits.append((node.lineno, f"a statement or event by name ({node.value!r})"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sqlite3" and alias.asname is not None:
                    hits.append((node.lineno, f"sqlite3 under another name ({alias.asname})"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlite3":
            names = ", ".join(a.name for a in node.names)
            hits.append((node.lineno, f"a connection of its own (from sqlite3 import {names})"))
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "sqlite3"
            and node.attr not in _SQLITE_TYPES
        ):
            hits.append((node.lineno, f"a connection of its own ({ast.unparse(node)})"))
        elif isinstance(node, ast.Name) and node.id == "sqlite3" and id(node) not in sqlite_bases:
            hits.append((node.lineno, "a connection of its own (sqlite3 beyond its types)"))
    return hits


def _sql_in(path: Path) -> list[str]:
    tree = _tree(path)
    docs = _docstrings(tree)
    return [
        f"{_relative(path)}:{node.lineno}: {text[:60]!r}"
        for node, text in _literal_texts(tree)
        if id(node) not in docs and _is_sql(text)
    ] + [f"{_relative(path)}:{line}: {what}" for line, what in _db_access(tree)]


def test_sql_appears_only_in_the_store_layer_and_the_migrations() -> None:
    found = [
        hit for path in _modules() if not _in_store_layer(_relative(path)) for hit in _sql_in(path)
    ]
    assert found == []


def test_the_sql_detector_finds_a_statement_in_a_plain_and_an_f_string(tmp_path: Path) -> None:
    source = (
        '"""A docstring may say SELECT * FROM runs."""\n'
        'a = "SELECT * FROM runs WHERE id = ?"\n'
        'b = f"UPDATE runs SET status = {x} WHERE id = ?"\n'
        'c = "the run (PRAGMA quick_check found nothing)"\n'
        'd = "update runs set goal = ?"; e = b"delete from events"\n'
        'f = "select id from runs"\n'
        "g = sqlite3.connect(path)\n"
    )
    module = tmp_path / "hiding.py"
    module.write_text(source, encoding="utf-8")
    hits = [hit.split(": ", 1)[1] for hit in _sql_in(module)]
    assert sorted(hits) == sorted(
        [
            "'SELECT * FROM runs WHERE id = ?'",
            "'UPDATE runs SET status = ? WHERE id = ?'",
            "'update runs set goal = ?'",
            "'delete from events'",
            "'select id from runs'",
            "a connection of its own (sqlite3.connect)",
        ]
    )


def test_the_sql_detector_sees_through_a_split_verb_a_method_alias_lowercase_and_from_import(
    tmp_path: Path,
) -> None:
    """The four ways past a literal-only check: each is found, and the Gate's own
    `step.execute()`, `sqlite3.Error` and prose starting with a keyword are not."""
    source = (
        'verb = "UPD" + "ATE"\n'
        'tx.execute(verb + " runs SET status = ?", (s,))\n'
        "add = tx.append_event\n"
        'add(run_id, "", now, "run.finished", {})\n'
        'conn.executescript("pragma journal_mode = wal")\n'
        'x = "create table notes (id TEXT)"\n'
        "from sqlite3 import connect\n"
        'run = getattr(tx, "executemany")\n'
        "import sqlite3 as lite\n"
        "opener = sqlite3\n"
        # None of these is a way to the database:
        "obs = await step.execute()\n"
        "import sqlite3\n"
        "try:\n    pass\nexcept sqlite3.Error:\n    pass\n"
        'y = "with the approval it was given"; z = "release the lease"\n'
        'w = "update the docs"; v = "Begin again"\n'
    )
    module = tmp_path / "fooling.py"
    module.write_text(source, encoding="utf-8")
    hits = [hit.split(": ", 1)[1] for hit in _sql_in(module)]
    assert sorted(hits) == sorted(
        [
            "'UPDATE'",
            "a statement or event of its own (tx.execute)",
            "a statement or event of its own (tx.append_event)",
            "a statement or event of its own (conn.executescript)",
            "'pragma journal_mode = wal'",
            "'create table notes (id TEXT)'",
            "a connection of its own (from sqlite3 import connect)",
            "a statement or event by name ('executemany')",
            "sqlite3 under another name (lite)",
            "a connection of its own (sqlite3 beyond its types)",
        ]
    )


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, names: set[str], type_only: bool = False) -> set[str]:
    """The agentrt modules `path` imports, at any depth of its code.

    `type_only` counts the imports made only for the type checker (under
    `if TYPE_CHECKING:`) too; without it they are skipped.
    """
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    tree = _tree(path)
    typing_only = {  # `if TYPE_CHECKING:` imports are not made at run time
        id(inner)
        for node in _nodes(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    for node in _nodes(tree):
        if id(node) in typing_only and not type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
    result: set[str] = set()
    for name in found:
        while name and name not in names:
            name = name.rpartition(".")[0]
        if name and name != module:
            result.add(name)
    return result


def _import_cycles(type_only: bool = False) -> set[frozenset[str]]:
    paths = {_module_name(p): p for p in _modules()}
    graph = {name: _imports(path, set(paths), type_only) for name, path in paths.items()}
    # A package's __init__ importing its own submodules is not a cycle worth naming;
    # edges from a submodule to its own package's __init__ are kept.
    for name in graph:
        graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: set[frozenset[str]] = set()

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.add(frozenset(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return cycles


def test_no_agentrt_module_imports_in_a_cycle() -> None:
    assert _import_cycles() == set()


def test_no_module_imports_in_a_cycle_counting_type_only_imports() -> None:
    """A cycle through `if TYPE_CHECKING:` imports is still two concepts that know
    each other (issue 20: `_driver` and `recover` did); none is left."""
    assert _import_cycles(type_only=True) == set()


def _is_private(module: str) -> bool:
    return any(part.startswith("_") and part != "__main__" for part in module.split("."))


def test_every_module_is_a_documented_door_or_private() -> None:
    names = sorted(_module_name(p) for p in _modules())
    undecided = [n for n in names if n not in PUBLIC_MODULES and not _is_private(n)]
    assert undecided == []
    assert [n for n in PUBLIC_MODULES if n not in names] == []


def test_the_test_kit_imports_no_private_module_outside_its_own_package() -> None:
    paths = {_module_name(p): p for p in _modules()}
    found = {
        f"{name} imports {target}"
        for name, path in paths.items()
        if name.startswith("agentrt.testkit")
        for target in _imports(path, set(paths))
        if _is_private(target) and not target.startswith("agentrt.testkit.")
    }
    assert found == set()


def test_the_adapters_import_no_private_module_outside_their_own_package() -> None:
    """An adapter is built on the public doors (`agentrt`, `agentrt.lowlevel`, ...), as a
    consumer's own integration would be; only its own package, and what the adapters
    share (`agentrt.adapters._classify`, `_calls`), is private to it."""
    paths = {_module_name(p): p for p in _modules()}
    found = set()
    for name, path in paths.items():
        if not name.startswith("agentrt.adapters"):
            continue
        parts = name.split(".")
        own = ".".join(parts[:3]) if len(parts) > 2 and not parts[2].startswith("_") else name
        for target in _imports(path, set(paths)):
            if _is_private(target) and not (
                target.startswith(own + ".") or re.fullmatch(r"agentrt\.adapters\._\w+", target)
            ):
                found.add(f"{name} imports {target}")
    assert found == set()


_IMPORT_LINE = re.compile(
    r"^[ \t]*(?:from\s+(agentrt(?:\.\w+)*)\s+import\s+(\([\w\s,]*\)|[\w \t,]+)"
    r"|import\s+(agentrt(?:\.\w+)*))(.*)$",
    re.MULTILINE,
)


def _private_imports(text: str) -> list[str]:
    found = []
    for match in _IMPORT_LINE.finditer(text):
        module = match.group(1) or match.group(3)
        names = re.findall(r"\w+", match.group(2) or "")
        if "internals: patched on purpose" in match.group(4):
            continue  # a maintainer's profiling recipe says so on the line
        if _is_private(module) or any(n.startswith("_") for n in names):
            found.append(match.group(0).strip())
    return found


def test_examples_the_readme_and_the_docs_import_no_private_module() -> None:
    sources = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "examples").rglob("*.py")),
    ]
    found = [
        f"{s.relative_to(ROOT)}: {line}"
        for s in sources
        for line in _private_imports(s.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_the_private_import_detector_sees_from_import_and_a_private_name() -> None:
    text = (
        "from agentrt._model import Model\n"
        "    import agentrt.testkit._harness\n"
        "from agentrt import _session as s\n"
        "from agentrt import Run, Driver\n"
        "from agentrt.lowlevel import run_sync\n"
        "from agentrt import _driver  # internals: patched on purpose\n"
        "from agentrt import (\n    Run,\n    _step,\n)\n"
    )
    assert _private_imports(text) == [
        "from agentrt._model import Model",
        "import agentrt.testkit._harness",
        "from agentrt import _session as s",
        "from agentrt import (\n    Run,\n    _step,\n)",
    ]


BACKEND_PACKAGES = ("_store/sqlite/", "_store/postgres/")
"""Each backend's package: the only place its driver is imported."""

SQLITE_ONLY_DOORS = {"lowlevel.py"}
"""Modules above the store that may import the SQLite backend: `agentrt.lowlevel`
re-exports its plain reads of a file a killed process left (documented SQLite-only)."""


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an `import` or `from ... import` names, relative ones resolved
    against the package root as `agentrt.<...>` (type-only imports included)."""
    found: list[tuple[int, str]] = []
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def _resolved(relative_path: str, module: str) -> str:
    """`module` as imported from the file at `relative_path`, in dotted absolute form."""
    if not module.startswith("."):
        return module
    level = len(module) - len(module.lstrip("."))
    parts = ["agentrt", *relative_path.split("/")[:-1]]
    base = parts[: len(parts) - (level - 1)]
    rest = module.lstrip(".")
    return ".".join([*base, rest] if rest else base)


def test_no_module_outside_a_backend_imports_a_database_driver() -> None:
    """`sqlite3` (and any future driver) is imported only inside its backend's package:
    failures cross the interface as `StoreError`s, never as a driver's exception."""
    found = [
        f"{_relative(path)}:{line}: {module}"
        for path in _modules()
        if not _relative(path).startswith(BACKEND_PACKAGES)
        for line, module in _imported_modules(_tree(path))
        if module.split(".")[0] in {"sqlite3", "psycopg", "psycopg_pool"}
    ]
    assert found == []


def test_nothing_above_the_store_imports_a_backend_but_the_sqlite_only_doors() -> None:
    found = []
    for path in _modules():
        relative = _relative(path)
        if relative.startswith("_store/") or relative in SQLITE_ONLY_DOORS:
            continue
        for line, module in _imported_modules(_tree(path)):
            if _resolved(relative, module).startswith("agentrt._store.sqlite"):
                found.append(f"{relative}:{line}: {module}")
    assert found == []


def test_the_import_resolver_reads_relative_imports_from_where_they_stand() -> None:
    assert _resolved("view.py", "._store.sqlite._reads") == "agentrt._store.sqlite._reads"
    assert _resolved("mcp/_proxy.py", ".._store") == "agentrt._store"
    assert _resolved("_store/sqlite/_tx.py", "..._chain") == "agentrt._chain"
    assert _resolved("cli/__init__.py", "..") == "agentrt"
