"""Text a read cut at its cap: what the reader got and how long the whole value is.

Page reads cap every text column at `TEXT_CAP` characters in the store, so an
oversized value is never loaded whole; the cut value is a `CappedText` (a JSON
value over the cap reads as `truncated_marker`), and whoever shows it says the
rest was not read. Backend-independent: every store caps the same way.
"""

from __future__ import annotations

from typing import Any

TEXT_CAP = 65_536
"""The characters of one text column a page read returns."""


def truncated_marker(length: int, head: str) -> dict[str, Any]:
    """What a JSON value over the read cap reads as."""
    return {"truncated": True, "length": length, "head": head}


class CappedText(str):
    """A text column a read cut at its cap: the characters read, and the full `length`.

    It is the `str` of the characters read, so it works wherever text does; whoever
    shows it checks for this type (or `capped_length`) and says that the rest was
    not read, rather than showing the head as if it were the whole value.
    """

    length: int

    def __new__(cls, head: str, length: int) -> CappedText:
        text = super().__new__(cls, head)
        text.length = length
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return (CappedText, (str(self), self.length))


def capped_length(text: str) -> int | None:
    """The full length of `text` when a read cut it at its cap (a `CappedText`), else None."""
    return text.length if isinstance(text, CappedText) else None
