"""docs/recovery.md names tests that exist.

docs/recovery.md is the page that links every promise about a crash, the lease, a
takeover and a person deciding to the test that checks it (the seed essay, "When the
runtime does not know, a person decides", kept true with a test). It cites tests as
docs/status.md does (`file::test`, `file::Class::test`, and `::test` continuing the
file cited before it), in table rows and in prose whose paragraphs wrap a citation
over several lines; a paragraph, a list item and a table row are each read as one
row of docs/status.md is (test_status_doc.py).
"""

from __future__ import annotations

from pathlib import Path

from test_status_doc import Reference, missing, references

RECOVERY = Path(__file__).resolve().parent.parent / "docs" / "recovery.md"


def units(text: str) -> list[tuple[int, str]]:
    """The document as rows: each table row alone; each paragraph or list item (its
    wrapped lines joined) as one; with the number of its first line."""
    found: list[tuple[int, str]] = []
    start, lines = 0, []

    def flush() -> None:
        if lines:
            found.append((start, " ".join(lines)))
            lines.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "```")):
            flush()
            continue
        if stripped.startswith("|"):
            flush()
            found.append((number, stripped))
            continue
        if stripped.startswith("- "):
            flush()
        if not lines:
            start = number
        lines.append(stripped)
    flush()
    return found


def cited(text: str) -> list[Reference]:
    return [
        Reference(first + ref.line - 1, ref.text, ref.file, ref.paths)
        for first, row in units(text)
        for ref in references(row)
    ]


def problems(refs: list[Reference]) -> list[str]:
    """Why each reference of docs/recovery.md names no test (status.md's reading of one)."""
    return [why for ref in refs if (why := missing(ref, "docs/recovery.md", ""))]


def test_every_test_named_in_recovery_md_exists() -> None:
    refs = cited(RECOVERY.read_text(encoding="utf-8"))
    assert len(refs) > 100  # the page's tables and prose, not an empty reading
    assert problems(refs) == []


def test_the_reader_joins_a_wrapped_citation_and_refuses_a_misspelled_one() -> None:
    text = (
        "Its process mode does both\n"
        "(`test_testkit_process.py::TestSigkill::test_sigkill_inside_a_transaction_leaves_none_of_its_writes`,\n"
        "`::test_sigkill_during_a_model_request_leaves_the_attempt_recorded`).\n"
        "\n"
        "| a | `test_testkit_process.py::"
        "test_sigkill_inside_a_transaction_leaves_none_of_its_writes` |\n"
        "- `::test_alone` in a list item\n"
    )
    assert problems(cited(text)) == [
        "docs/recovery.md line 5: "
        "`test_testkit_process.py::test_sigkill_inside_a_transaction_leaves_none_of_its_writes`: "
        "tests/test_testkit_process.py defines no test "
        "test_sigkill_inside_a_transaction_leaves_none_of_its_writes",
        "docs/recovery.md line 6: `::test_alone` continues no file cited before it",
    ]
