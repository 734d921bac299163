"""What the README and docs/*.md tell a reader to run works as written, from a clone.

- The README's "Using it" snippet runs as pasted, in a fresh directory, in its
  own process, and ends as it says it does.
- Every shell command line in README.md and docs/*.md is checked against what
  it names: a `pip install` names only extras pyproject defines (and a package
  that is not on the index, `agentrt`, only as `-e '.[extra]'` or `.`); an
  `agentrt ...` line names only subcommands and options the parser has; a
  `python path` line and a `--config`/`--rules`/`--manifest` file names a file
  in the repository.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentrt
from agentrt.cli._parser import build_parser

ROOT = Path(__file__).resolve().parent.parent
INSTALLING = ROOT / "docs" / "index.md"  # its "Installing" section may name the index
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples/mcp/README.md"]


def code_blocks(path: Path, lang: str) -> list[str]:
    """The fenced code blocks of `path` in language `lang`, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S)


def test_the_readmes_using_it_snippet_runs_as_pasted_and_ends_as_it_says(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Using it", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S)
    assert snippet is not None
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    (work / "snippet.py").write_text(snippet.group(1), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "snippet.py"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == "COMPLETED shipped\n"  # what its last comment says it prints
    with agentrt.open_existing(work / "runs.db", read_only=True) as store:
        (run,) = store.list_runs()
        (approval,) = store.list_approvals(run.id)
        assert (approval.status, approval.decided_by) == ("approved", "alice")
        pushed = [s.observation.content for s in store.list_steps(run.id) if s.observation]
        assert pushed == [{"pushed": "login"}]


# --- every shell command line in the docs -------------------------------------------------------

SHELL_LANGS = ("sh", "bash", "shell", "console")
INLINE = re.compile(r"`((?:pip install|python3? |agentrt |agentrt-proxy |\.venv/bin/)[^`]*)`")
WHERE_THE_CLONE_IS = ("~/agentrt/", "/path/to/agentrt/")
REPO_PATH = re.compile(r"^(examples|benchmarks|tools|docs|src|tests)/")
SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;"}


def pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def shell_lines(path: Path) -> Iterator[tuple[str, str, bool]]:
    """(where, line, whole) for each command line of `path`: fenced (whole) or inline."""
    text = path.read_text(encoding="utf-8")
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
        lang, body = match.group(1), match.group(2)
        if lang not in SHELL_LANGS and lang != "":
            continue
        line_no = text[: match.start()].count("\n") + 2
        for n, line in enumerate(body.replace("\\\n", " ").splitlines()):
            if lang == "":  # output shown in a block: only its `$ command` lines
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if line.strip():
                yield f"{path.relative_to(ROOT)}:{line_no + n}", line, True
    for match in INLINE.finditer(text):
        line_no = text[: match.start()].count("\n") + 1
        yield f"{path.relative_to(ROOT)}:{line_no}", match.group(1), False


def commands(line: str) -> Iterator[list[str]]:
    """The simple commands of one line: words, with comments and `<placeholders>` dropped."""
    line = re.sub(r"<[^<>]*>", "PLACEHOLDER", line)
    line = re.sub(r"\$\([^()]*\)", "SUBST", line)  # $(...) is a command of its own
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words: list[str] = []
    for word in lexer:
        if word in SEPARATORS:
            if words:
                yield words
            words = []
        else:
            words.append(word)
    if words:
        yield words


def in_the_clone(word: str) -> str:
    for prefix in WHERE_THE_CLONE_IS:
        if word.startswith(prefix):
            return word[len(prefix) :]
    return word


def parse_quietly(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """None if `parser` accepts `argv`, else what it said."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exc:
        return err.getvalue().strip() or f"exit {exc.code}"
    return None


def option_names(parser: argparse.ArgumentParser) -> set[str]:
    return set(parser._option_string_actions)


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


class Checker:
    """What each program named in the docs accepts, read from its own parser."""

    def __init__(self) -> None:
        project = pyproject()["project"]
        assert isinstance(project, dict)
        self.extras: dict[str, list[str]] = project["optional-dependencies"]
        self.known_packages = {
            re.split(r"[<>=\[ ;]", dep, maxsplit=1)[0].lower()
            for deps in self.extras.values()
            for dep in deps
        }
        self.main = build_parser()
        self.commands = subparsers(self.main)
        from agentrt.mcp._cli import _parser as mcp_parser
        from agentrt.mcp._proxy import _parser as proxy_parser

        self.mcp = mcp_parser()
        self.proxy = proxy_parser()
        self._help: dict[tuple[str, ...], str] = {}

    def help_of(self, *argv: str) -> str:
        if argv not in self._help:
            done = subprocess.run(
                [*argv, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
            self._help[argv] = done.stdout
        return self._help[argv]

    def check(self, words: list[str], whole: bool, may_name_the_index: bool) -> list[str]:
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words = words[1:]  # VAR=value before the program
        if not words:
            return []
        program = words[0].removeprefix(".venv/bin/")
        args = [in_the_clone(w) for w in words[1:]]
        problems = [
            f"{w} is not in the repository"
            for w in args
            if REPO_PATH.match(w) and not (ROOT / w.split("*")[0]).exists()
        ]
        if REPO_PATH.match(in_the_clone(program)) and not (ROOT / in_the_clone(program)).exists():
            problems.append(f"{program} is not in the repository")
        if program in ("python", "python3") and args[:2] == ["-m", "pip"]:
            program, args = "pip", args[2:]
        if program == "pip":
            problems += self.pip(args, may_name_the_index)
        elif program in ("python", "python3"):
            problems += self.python(args, whole)
        elif program == "agentrt":
            problems += self.agentrt(args, whole)
        elif program == "agentrt-proxy":
            problems += self.options(self.proxy, args, whole, "agentrt-proxy")
        return problems

    def pip(self, args: list[str], may_name_the_index: bool) -> list[str]:
        if args[:1] != ["install"]:
            return [f"pip {' '.join(args)}: only pip install is expected"]
        problems = []
        for arg in args[1:]:
            if arg.startswith("-"):
                continue
            name, _, extras = arg.partition("[")
            wanted = [e.strip() for e in extras.rstrip("]").split(",") if e.strip()]
            if name == "agentrt" and not may_name_the_index:
                problems.append(
                    f"pip install {arg}: agentrt is not on the package index; "
                    f"from a clone: pip install -e '.[{','.join(wanted)}]'"
                )
            elif name in (".", "agentrt"):
                problems += [
                    f"pip install {arg}: no extra {e!r}" for e in wanted if e not in (self.extras)
                ]
            elif name.lower() not in self.known_packages:
                problems.append(f"pip install {arg}: a package pyproject does not name")
        return problems

    def python(self, args: list[str], whole: bool) -> list[str]:
        if args[:1] == ["-m"] and len(args) > 1:
            module, rest = args[1], args[2:]
            if module == "agentrt":
                return self.agentrt(rest, whole)
            if module == "agentrt.mcp.proxy":
                return self.options(self.proxy, rest, whole, "python -m agentrt.mcp.proxy")
            if module.startswith("agentrt") and importlib.util.find_spec(module) is None:
                return [f"python -m {module}: no such module"]
            return []
        if not args or args[0].startswith("-"):
            return []
        script = args[0]
        if not (ROOT / script).is_file():
            return [f"python {script}: no such file in the repository"]
        given = [a.split("=")[0] for a in args[1:] if a.startswith("--")]
        if given:
            text = self.help_of(sys.executable, str(ROOT / script))
            return [f"python {script}: no option {o}" for o in given if o not in text]
        return []

    def agentrt(self, args: list[str], whole: bool) -> list[str]:
        at = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
        if at is not None and at > 0 and args[at - 1] == "--db":
            at = next((i for i, a in enumerate(args) if i > at and not a.startswith("-")), None)
        if at is None:
            return []  # `agentrt --help` and the like
        name = args[at]
        if name not in self.commands:
            return [f"agentrt {name}: no such command"]
        rest = args[:at] + args[at + 1 :]
        if name == "demo":
            text = self.help_of(sys.executable, "-m", "agentrt", "demo")
            return [
                f"agentrt demo: no option {o}"
                for o in rest
                if o.startswith("--") and (o not in text)
            ]
        if name == "mcp":
            before = args[at + 1 :]
            before = before[: before.index("--")] if "--" in before else before
            return self.options(self.mcp, before, whole, "agentrt mcp")
        return self.options(self.main, args, whole, "agentrt", sub=self.commands[name])

    def options(
        self,
        parser: argparse.ArgumentParser,
        args: list[str],
        whole: bool,
        what: str,
        sub: argparse.ArgumentParser | None = None,
    ) -> list[str]:
        if whole:  # a line to paste: the parser must accept it as it is
            said = parse_quietly(parser, args)
            return [f"{what} {' '.join(args)}: {said}"] if said else []
        # A command named in prose: its command words and options must exist.
        known = option_names(parser) | (option_names(sub) if sub else set())
        for word in args:
            if not word.startswith("-") and word in subparsers(parser):
                known |= option_names(subparsers(parser)[word])
        return [
            f"{what}: no option {w}"
            for w in args
            if w.startswith("--") and w != "--" and (w.split("=")[0] not in known)
        ]


def documented_command_lines() -> list[tuple[str, str, bool, bool]]:
    found = []
    for doc in DOCS:
        installing = ""
        if doc == INSTALLING:
            text = doc.read_text(encoding="utf-8")
            installing = text.split("## Installing", 1)[1].split("\n## ", 1)[0]
        for where, line, whole in shell_lines(doc):
            found.append((where, line, whole, bool(installing) and line in installing))
    return found


def test_every_command_line_in_the_readme_and_docs_runs_as_written_from_a_clone() -> None:
    checker = Checker()
    lines = documented_command_lines()
    problems = [
        f"{where}: {problem}"
        for where, line, whole, may_name_the_index in lines
        for words in commands(line)
        for problem in checker.check(words, whole, may_name_the_index)
    ]
    assert problems == []
    # The extraction sees what it must: every kind of line is there to be checked.
    seen = " ".join(line for _, line, _, _ in lines)
    for expected in (
        "pip install -e '.[console]'",
        "agentrt --db runs.db approve RUN",
        "agentrt mcp pin",
        "agentrt-proxy --config",
        "python benchmarks/driver.py",
    ):
        assert expected in seen, expected


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("pip install 'agentrt[console]'", "agentrt is not on the package index"),
        ("pip install -e '.[nope]'", "no extra 'nope'"),
        ("pip install -e '.[cli]'", "no extra 'cli'"),
        ("agentrt --db runs.db resume RUN", "no such command"),
        ("agentrt --db runs.db show RUN --frobnicate", "unrecognized arguments: --frobnicate"),
        ("agentrt demo --stop-at-aproval", "no option --stop-at-aproval"),
        ("agentrt mcp pin notes -- python x.py", "required: --out"),
        ("agentrt-proxy --cfg proxy.json", "required: --config"),
        ("python examples/nowhere.py --db x", "no such file in the repository"),
        ("python benchmarks/driver.py --fastest", "no option --fastest"),
        ("cp examples/mcp/nothing.json ~/x/", "examples/mcp/nothing.json is not in the repository"),
    ],
)  # fmt: skip
def test_the_command_line_checker_finds_each_kind_of_broken_line(line: str, problem: str) -> None:
    checker = Checker()
    found = [p for words in commands(line) for p in checker.check(words, True, False)]
    assert any(problem in p for p in found), found


def test_the_empty_cli_extra_is_gone_and_every_extra_installs_something() -> None:
    extras = pyproject()["project"]["optional-dependencies"]  # type: ignore[index]
    assert "cli" not in extras
    assert all(extras[name] for name in extras)
