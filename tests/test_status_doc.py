"""docs/status.md names tests that exist, and names them one by one.

Each row of docs/status.md cites the tests that verify its capability as
`file::test` (all under tests/), `file::Class::test` for a method, and
`::test` for another test of the file cited just before it in the same row
(after `file::Class::test`, `::other` is tried as `Class::other` first).
Every such reference must name a test pytest collects from that file: a
`test*` function at module level, a `Test*` class, or a `test*` method of one.
A row cites no whole test file: a capability is verified by named tests.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATUS = ROOT / "docs" / "status.md"
TESTS = ROOT / "tests"

_CODE = re.compile(r"`([^`]*)`")
_PATH = r"((?:::[A-Za-z_]\w*)+)(?:\[[^\]]*\])?"
_FULL = re.compile(rf"(?:tests/)?((?:[a-z_]+/)?test_\w+\.py){_PATH}")
_SHORT = re.compile(_PATH)
_WHOLE_FILE = re.compile(r"(?:tests/)?test_\w+\.py")
# A row with one of these statuses has no test to name.
_UNTESTED = ("not verified", "not started")


@dataclass(frozen=True)
class Reference:
    line: int
    text: str  # as written in the document
    file: str  # "" when a `::test` has no file before it in its row
    paths: tuple[str, ...]  # "Class::test" or "test": any one must exist


def references(text: str) -> list[Reference]:
    """Every test reference in the document, in order, shorthand resolved per row."""
    found: list[Reference] = []
    for number, line in enumerate(text.splitlines(), start=1):
        file, parent = "", ""
        for code in _CODE.findall(line):
            if full := _FULL.fullmatch(code):
                file, path = full.group(1), full.group(2)[2:]
                paths: tuple[str, ...] = (path,)
            elif short := _SHORT.fullmatch(code):
                path = short.group(1)[2:]
                paths = (f"{parent}::{path}", path) if parent else (path,)
            else:
                continue
            parent = paths[0].rpartition("::")[0]
            found.append(Reference(number, code, file, paths))
    return found


@functools.cache
def collected(file: str) -> frozenset[str]:
    """The tests pytest collects from tests/<file>, as `name` and `Class::name`."""
    path = TESTS / file
    if not path.is_file():
        return frozenset()
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name.startswith("test"):
                names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names.add(node.name)
            names.update(
                f"{node.name}::{member.name}"
                for member in node.body
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
                and member.name.startswith("test")
            )
    return frozenset(names)


def missing(ref: Reference, page: str = "docs/status.md", within: str = " in its row") -> str:
    """Why the reference (of `page`) names no test, or "" when it names one; `within`:
    where a `::test` looks for the file it continues."""
    where = f"{page} line {ref.line}: `{ref.text}`"
    if not ref.file:
        return f"{where} continues no file cited before it{within}"
    if not (TESTS / ref.file).is_file():
        return f"{where}: there is no tests/{ref.file}"
    if not any(path in collected(ref.file) for path in ref.paths):
        return f"{where}: tests/{ref.file} defines no test {ref.paths[0]}"
    return ""


_STATUS_TEXT = STATUS.read_text(encoding="utf-8")
_REFERENCES = list({(r.file, r.paths, r.text): r for r in references(_STATUS_TEXT)}.values())


def test_every_test_named_in_status_md_exists() -> None:
    # One test for every reference (about 2,100), each one that names no test listed: a
    # parametrized item each cost the suite about 3 ms of CPU under xdist, 6 s in all.
    assert _REFERENCES
    assert [why for why in map(missing, _REFERENCES) if why] == []


def test_the_reference_reader_resolves_shorthand_per_row_and_refuses_a_misspelled_name() -> None:
    sample = (
        "| a | done | `test_status_doc.py::test_every_test_named_in_status_md_exists`, "
        "`::test_every_tset_named_in_status_md_exists` |\n"
        "| b | done | `::test_every_test_named_in_status_md_exists` |\n"
        "| c | done | "
        "`test_testkit.py::TestRun::test_crash_after_takeover_still_waits_for_the_operator`, "
        "`::test_approved_request_survives_a_crash_after_resume`, `::TestMatrix`, "
        "`test_render.py::test_decide[truncated]`, `test_nowhere.py::test_x` |\n"
    )
    assert [missing(r) for r in references(sample)] == [
        "",
        "docs/status.md line 1: `::test_every_tset_named_in_status_md_exists`: "
        "tests/test_status_doc.py defines no test test_every_tset_named_in_status_md_exists",
        "docs/status.md line 2: `::test_every_test_named_in_status_md_exists` "
        "continues no file cited before it in its row",
        "",
        "",
        "",
        "",
        "docs/status.md line 3: `test_nowhere.py::test_x`: there is no tests/test_nowhere.py",
    ]
    assert len(_REFERENCES) > 100  # the document is read, not silently skipped


def test_every_row_of_status_md_names_its_tests_and_cites_no_whole_test_file() -> None:
    problems: list[str] = []
    for number, line in enumerate(_STATUS_TEXT.splitlines(), start=1):
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if not line.startswith("| ") or len(cells) < 3 or cells[1] in ("status", "---"):
            continue
        status, cited = cells[1], " | ".join(cells[2:])
        whole = [code for code in _CODE.findall(cited) if _WHOLE_FILE.fullmatch(code)]
        if whole:
            problems.append(f"line {number} cites a whole file: {', '.join(whole)}")
        if not references(cited) and not status.startswith(_UNTESTED):
            problems.append(f"line {number} ({cells[0][:60]}) names no test")
    assert problems == []
