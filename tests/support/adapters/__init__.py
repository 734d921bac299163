"""What the adapter tests share: the child programs beside this file, and the docs' tables."""

from __future__ import annotations

from pathlib import Path

ADAPTERS_DOC = Path(__file__).resolve().parents[3] / "docs" / "adapters.md"


def assert_table_printed_in_docs(printed: str) -> None:
    """The scenario table a script printed stands, line for line, in docs/adapters.md.

    The docs' tables are the scripts' output, pasted: a script that now
    measures something else fails here until the docs are updated with it.
    """
    table = [line for line in printed.splitlines() if line.startswith("|")]
    assert len(table) > 2, f"no table printed:\n{printed}"
    lines = ADAPTERS_DOC.read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if line == table[0]]
    found = [lines[i : i + len(table)] for i in starts]
    assert table in found, (
        "docs/adapters.md does not hold the table the script printed; paste it:\n"
        + "\n".join(table)
    )
