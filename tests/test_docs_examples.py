"""Every Python block in the README and on the site runs, or says why it does not (decision 0075).

A ```python block runs, unless the line right before its fence marks it:

- `<!-- fragment: why -->`: not run; `why` says what it leaves out (the
  reader's model, a server, a loop that runs until stopped, a sketch).
- `<!-- short-path: NAME -->`: run by `tests/test_adapters_short_path.py`.

The runnable blocks of one page run in page order as one program, in a fresh
directory of their own (0700), in a child process with a timeout, so a block
may use what an earlier block on its page defined. A block with a top-level
`await` runs on the program's one event loop. A `<!-- given: ... -->` comment
(the lines up to a `-->` line) runs at its place in the program and is not
shown on the page: it defines what the page's prose says is the reader's own
(their model, their tools, a run waiting for a person), never agentrt's; after a
block, a given may assert what the page says happened.
Tracebacks name the page and the line.

A program that imports a module of an extra that is not installed skips,
naming it, except under CI (`CI` set: the test extra installs every one), where
it fails.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ("python", "py", "python3")
FRAGMENT = re.compile(r"^\s*<!-- fragment: (?P<why>.*\S)\s*-->\s*$")
SHORT_PATH = re.compile(r"^\s*<!-- short-path: (?P<name>[\w-]+) -->\s*$")
GIVEN_OPEN = re.compile(r"^<!-- given:\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>```+)\s*(?P<info>[^`\s]*)[^`]*$")

# What the child process runs: first the imports the page makes (one that fails for a module
# not installed, or for agentrt's sentence naming an extra, exits NEEDS_AN_EXTRA before
# anything runs), then the page's parts in order, names shared, one event loop.
NEEDS_AN_EXTRA = 3
RUNNER = """\
import ast, asyncio, importlib, inspect, json, sys
page = json.load(open(sys.argv[1], encoding="utf-8"))
for module in page["imports"]:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] == "agentrt":
            raise  # not an extra: the page names a module agentrt does not have
        print(f"{module}: {exc}")
        sys.exit(3)
    except ImportError as exc:
        if "extra" not in str(exc) and "pip install" not in str(exc):
            raise
        print(f"{module}: {exc}")  # agentrt's sentence naming the extra to install
        sys.exit(3)
names = {"__name__": "__main__", "__builtins__": __builtins__}
loop = asyncio.new_event_loop()
for part in page["parts"]:
    source = "\\n" * (part["line"] - 1) + part["code"]
    code = compile(source, part["path"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        loop.run_until_complete(eval(code, names))
    else:
        exec(code, names)
loop.close()
"""


@dataclass(frozen=True)
class Block:
    """One fenced block, or one given, of a page."""

    path: str  # relative to the repository root
    line: int  # of the block's first code line
    lang: str  # the fence's language; "given" for a given
    code: str
    marker: str  # "", "fragment", "short-path"
    why: str  # the fragment's reason, or the short path's name


def blocks_of(text: str, path: str) -> list[Block]:
    """Every fenced block and every given of `text`, in page order."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        if GIVEN_OPEN.match(lines[i]):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "-->"), None)
            assert end is not None, f"{path}:{i + 1}: a given without its closing -->"
            code = "\n".join(lines[i + 1 : end]) + "\n"
            found.append(Block(path, i + 2, "given", code, "", ""))
            i = end + 1
            continue
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent, ticks = fence.group("indent"), fence.group("ticks")
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].strip() == ticks),
            None,
        )
        assert end is not None, f"{path}:{i + 1}: a fence that is never closed"
        body = [line.removeprefix(indent) for line in lines[i + 1 : end]]
        before = lines[i - 1] if i > 0 else ""
        marker, why = "", ""
        if m := FRAGMENT.match(before):
            marker, why = "fragment", m.group("why")
        elif m := SHORT_PATH.match(before):
            marker, why = "short-path", m.group("name")
        found.append(
            Block(path, i + 2, fence.group("info").lower(), "\n".join(body) + "\n", marker, why)
        )
        i = end + 1
    return found


def pages() -> list[Path]:
    """The README, the files the site includes from the root, every page under docs/."""
    root = [ROOT / name for name in ("README.md", "CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md")]
    return [
        *root,
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "examples").rglob("*.md")),
    ]


def program(path: Path) -> list[Block]:
    """The parts of `path` that run: its unmarked python blocks and its givens."""
    rel = str(path.relative_to(ROOT))
    return [
        b
        for b in blocks_of(path.read_text(encoding="utf-8"), rel)
        if b.lang == "given" or (b.lang in PYTHON and not b.marker)
    ]


def imported_modules(parts: list[Block]) -> list[str]:
    """The modules the parts import, in order, each once."""
    names: list[str] = []
    for part in parts:
        flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        tree = compile(textwrap.dedent(part.code), part.path, "exec", flags=flags)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
    return list(dict.fromkeys(names))


def run_page(parts: list[Block], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run `parts` as one program in a fresh directory of its own, in a child process."""
    tmp_path.mkdir(exist_ok=True)
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    page = {
        "imports": imported_modules(parts),
        "parts": [{"path": p.path, "line": p.line, "code": p.code} for p in parts],
    }
    (tmp_path / "page.json").write_text(json.dumps(page), encoding="utf-8")
    (tmp_path / "runner.py").write_text(RUNNER, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "page.json")],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


RUNNABLE = [p for p in pages() if any(b.lang in PYTHON for b in program(p))]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", RUNNABLE, ids=[str(p.relative_to(ROOT)) for p in RUNNABLE])
def test_every_unmarked_python_block_of_the_page_runs_as_printed(
    page: Path, tmp_path: Path
) -> None:
    done = run_page(program(page), tmp_path)
    if done.returncode == NEEDS_AN_EXTRA:
        if os.environ.get("CI"):
            pytest.fail(f"{page.relative_to(ROOT)} needs an extra CI installs: {done.stdout}")
        pytest.skip(f"{page.relative_to(ROOT)} needs an extra: {done.stdout.strip()}")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr[-6000:]


def test_every_python_block_on_the_site_and_in_the_readme_is_run_or_marked() -> None:
    """The run above takes every unmarked block; here, what is marked says why, and where."""
    problems = []
    counts = {"run": 0, "fragment": 0, "short-path": 0}
    for page in pages():
        rel = str(page.relative_to(ROOT))
        text = page.read_text(encoding="utf-8")
        found = blocks_of(text, rel)
        for b in found:
            if b.lang not in PYTHON:
                if b.marker:
                    problems.append(f"{rel}:{b.line}: a {b.marker} marker on a {b.lang!r} block")
                continue
            counts[b.marker or "run"] += 1
        problems += marker_problems(text, rel)
    assert problems == []
    assert counts["run"] >= 10, counts  # the extraction sees the runnable blocks
    short_paths = (ROOT / "tests" / "test_adapters_short_path.py").read_text(encoding="utf-8")
    named = {
        b.why
        for p in pages()
        for b in blocks_of(p.read_text(encoding="utf-8"), str(p))
        if b.marker == "short-path"
    }
    assert named == {"pydantic-ai", "openai-agents", "langgraph"}
    assert all(f'short_path("{name}")' in short_paths for name in named)


def marker_problems(text: str, path: str) -> list[str]:
    """Markers outside a block that mark nothing (no fence right after) or give no reason."""
    inside = {
        b.line - 1 + n for b in blocks_of(text, path) for n in range(len(b.code.splitlines()))
    }
    lines = text.splitlines()
    problems = []
    for n, line in enumerate(lines):
        if n in inside:
            continue
        if (FRAGMENT.match(line) or SHORT_PATH.match(line)) and not (
            n + 1 < len(lines) and FENCE.match(lines[n + 1])
        ):
            problems.append(f"{path}:{n + 1}: a marker not right before a fence")
        if line.lstrip().startswith("<!-- fragment") and not FRAGMENT.match(line):
            problems.append(f"{path}:{n + 1}: a fragment marker without its reason")
    return problems


def test_a_marker_that_marks_nothing_or_gives_no_reason_is_found() -> None:
    text = textwrap.dedent(
        """\
        <!-- fragment: a reason, then a blank line -->

        ```python
        x = 1
        ```

        <!-- fragment -->
        ```python
        y = 2
        ```

        ```text
        <!-- fragment: shown as text, inside a block -->
        <!-- fragment -->
        ```
        """
    )
    assert marker_problems(text, "p.md") == [
        "p.md:1: a marker not right before a fence",
        "p.md:7: a fragment marker without its reason",
    ]


def test_the_block_reader_sees_markers_indented_fences_and_givens() -> None:
    text = textwrap.dedent(
        """\
        # A page

        <!-- given:
        model = "mine"
        -->

        ```python
        print(model)
        ```

        <!-- fragment: needs your server -->
        ```python
        serve()
        ```

        - a list item:

          <!-- fragment: internals -->
          ```python
          x = 1
          ```

        <!-- short-path: langgraph -->
        ```python
        graph()
        ```

        ```sh
        agentrt demo
        ```
        """
    )
    assert blocks_of(text, "page.md") == [
        Block("page.md", 4, "given", 'model = "mine"\n', "", ""),
        Block("page.md", 8, "python", "print(model)\n", "", ""),
        Block("page.md", 13, "python", "serve()\n", "fragment", "needs your server"),
        Block("page.md", 20, "python", "x = 1\n", "fragment", "internals"),
        Block("page.md", 25, "python", "graph()\n", "short-path", "langgraph"),
        Block("page.md", 29, "sh", "agentrt demo\n", "", ""),
    ]


def test_a_failing_block_names_its_page_and_line(tmp_path: Path) -> None:
    parts = [
        Block("docs/x.md", 3, "python", "a = 1\n", "", ""),
        Block("docs/x.md", 9, "python", "b = a\nraise ValueError('the docs are wrong')\n", "", ""),
    ]
    done = run_page(parts, tmp_path)
    assert done.returncode == 1
    assert 'File "docs/x.md", line 10' in done.stderr
    assert done.stderr.rstrip().endswith("ValueError: the docs are wrong")


def test_a_block_with_a_top_level_await_runs_on_the_programs_one_loop(tmp_path: Path) -> None:
    parts = [
        Block("p.md", 1, "given", "import asyncio\nloops = []\n", "", ""),
        Block("p.md", 5, "python", "loops.append(asyncio.get_running_loop())\n"
              "await asyncio.sleep(0)\n", "", ""),
        Block("p.md", 9, "python", "loops.append(asyncio.get_running_loop())\n"
              "await asyncio.sleep(0)\nprint(len(loops), loops[0] is loops[1])\n", "", ""),
    ]  # fmt: skip
    done = run_page(parts, tmp_path)
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "2 True\n")


def test_a_page_needing_a_module_not_installed_stops_before_running_anything(
    tmp_path: Path,
) -> None:
    """A missing extra is told apart (skipped, except under CI); a wrong agentrt module is not."""
    parts = [
        Block("p.md", 1, "python", "open('ran', 'w').close()\n", "", ""),
        Block("p.md", 3, "python", "import agentrt_docs_not_installed\n", "", ""),
    ]
    done = run_page(parts, tmp_path / "extra")
    assert (done.returncode, done.stdout) == (
        NEEDS_AN_EXTRA,
        "agentrt_docs_not_installed: No module named 'agentrt_docs_not_installed'\n",
    )
    assert not (tmp_path / "extra" / "work" / "ran").exists()
    wrong = [Block("p.md", 1, "python", "from agentrt.no_such_module import X\n", "", "")]
    done = run_page(wrong, tmp_path / "wrong")
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'agentrt.no_such_module'" in done.stderr


# --- the README is the short version ------------------------------------------------------------


def test_the_readme_is_the_short_version_its_two_commands_first_and_links_into_the_docs() -> None:
    """What it is, the two commands (the first in it, CI's exactly), one example, where to go."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.findall(r"^## (.+)$", text, re.M) == ["Try it", "Using it", "Where to go next"]
    found = blocks_of(text, "README.md")
    assert [b.lang for b in found] == ["sh", "sh", "python"]
    assert [b.code for b in found[:2]] == [
        "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/agentrt demo\n",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && "
        ".venv/bin/python -m pytest -q -n auto --dist worksteal\n",
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # In a subshell there, so that `set -e` stops CI at any of its steps (decision 0238).
    assert f"({found[1].code.strip()})" in ci.splitlines()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert sum(link.startswith("docs/") for link in links) >= 10
    assert broken_links(ROOT / "README.md") == []


def broken_links(page: Path) -> list[str]:
    """Relative links of `page` whose file, or heading anchor, does not exist."""
    from markdown.extensions.toc import slugify

    broken = []
    for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif anchor:
            headings = re.findall(r"^#+\s+(.+?)\s*$", path.read_text(encoding="utf-8"), re.M)
            if anchor not in {slugify(h, "-") for h in headings}:
                broken.append(f"{link}: no such heading")
    return broken


def test_the_link_checker_finds_a_missing_page_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## What it does not claim\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md#what-it-does-not-claim) [site](https://example.org/x) "
        "[gone](docs/b.md) [moved](docs/a.md#installing)\n"
    )
    assert broken_links(page) == [
        "docs/b.md: no such file",
        "docs/a.md#installing: no such heading",
    ]


# --- a file a page names is one the reader has ----------------------------------------------------

# docs/status.md's section titles name the parts of the product specification each row
# verifies (`store.md`, `loop.md`, ...), which live outside the repository; that page is
# kept by the project's status process, not edited by hand here.
NAMES_THE_SPEC = {"status.md"}


def files_named_but_missing(page: Path) -> list[str]:
    """`line: NAME.md` for each Markdown file `page` names in its text (in code or plain
    words; link targets are `broken_links`') that is not a file of the clone: from its root,
    beside the page, in docs/ or among the decision records."""
    missing = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for found in re.finditer(r"(?<![\w./-])([\w][\w./-]*\.md)\b", line):
            name = found.group(1)
            if line[: found.start()].endswith("](") or "://" in line[max(0, found.start() - 8) :]:
                continue
            places = (ROOT, page.parent, ROOT / "docs", ROOT / "docs" / "decisions")
            if not any((place / name).is_file() for place in places):
                missing.append(f"{number}: {name}")
    return missing


def test_every_markdown_file_a_page_names_is_in_the_clone() -> None:
    """A reader of a clone cannot open the product specification (`loop.md`, `store.md`):
    a page that cites it sends them to a file they do not have."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = {
        page.name: names
        for page in pages
        if page.name not in NAMES_THE_SPEC and (names := files_named_but_missing(page))
    }
    assert missing == {}


def test_the_file_name_checker_finds_a_name_in_code_and_in_words_not_a_link(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "as `loop.md` pins\n[a](gone.md) and README.md and docs/recovery.md\n"
        "as store.md pins, and 0006-approvals-and-resume.md\n"
    )
    assert files_named_but_missing(page) == ["1: loop.md", "3: store.md"]
