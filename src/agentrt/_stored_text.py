"""What a TEXT value read back from the database can be, and how to name what is wrong with it.

SQLite stores whatever bytes it is given as TEXT; a tampered or damaged file may
hold bytes that are not UTF-8. Python's default decoding raises in the middle of a
fetch, failing a whole page, a verification or an open because of one value. Every
agentrt connection decodes TEXT with `decode_text` instead: valid UTF-8 reads as
`str`, anything else as its raw `bytes`, so each reader can say which field is
unreadable (`unreadable_text`) and go on. Nothing here raises.
"""

from __future__ import annotations


def decode_text(data: bytes) -> str | bytes:
    """A connection's `text_factory`: TEXT as `str`, or its raw bytes when not valid UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def unreadable_text(value: object) -> str:
    """Why a TEXT value read as something other than `str`, as a clause: `not valid UTF-8 ...`."""
    if isinstance(value, bytes):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as e:
            return (
                f"not valid UTF-8 text ({e.reason}: byte 0x{value[e.start]:02x} at offset "
                f"{e.start} of {len(value)})"
            )
        return f"a {len(value)}-byte BLOB, not text"
    if value is None:
        return "NULL, not text"
    return f"not text but {type(value).__name__}"


def shown_text(value: object) -> str:
    """A TEXT value as text to show: itself, or unreadable bytes with each bad byte as `\\xNN`."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return "" if value is None else str(value)


__all__ = ["decode_text", "shown_text", "unreadable_text"]
