"""MkDocs hooks for the documentation site (mkdocs.yml): the decision records' index.

The index of `docs/decisions/` is written at build time from the records
themselves (number and title from each file's first heading), so a new record
appears on the site without anyone editing a list.
"""

from __future__ import annotations

import re
from typing import Any

from mkdocs.structure.files import File, Files

_HEADING = re.compile(r"^#\s+(.+?)\s*$", re.MULTILINE)


def on_files(files: Files, config: Any) -> Files:
    records = sorted(
        (f for f in files if re.fullmatch(r"decisions/\d{4}-[^/]+\.md", f.src_uri)),
        key=lambda f: f.src_uri,
    )
    lines = [
        "# Decision records",
        "",
        "Where the spec was silent, the choice made and why, one record each.",
        "",
    ]
    for record in records:
        text = record.content_string
        found = _HEADING.search(text)
        title = found.group(1) if found else record.src_uri
        name = record.src_uri.removeprefix("decisions/")
        lines.append(f"- [{title}]({name})")
    files.append(File.generated(config, "decisions/index.md", content="\n".join(lines) + "\n"))
    return files
