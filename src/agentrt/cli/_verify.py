"""The `verify` command: the event hash chain, then the file itself.

Prints the chain's head (or its first break, named and explained) and what
SQLite's integrity check (or `--quick`, its quick check) found, each on its own
line, or both in one JSON document; exits 0 only when both are sound. A head
kept from an earlier verify (`--head SEQ:HASH`) catches a cut or rewritten tail.
A record whose chain is in N > 1 partitions (decision 0093) keeps one head per
partition: `verify --json` prints them as `head` (`SEQ:HASH,SEQ:HASH,...`, in
partition order), which `--head` takes, and the text prints N and their digest.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from .._records import ChainBreak, FileCheck, VerifyReport
from .._render_approval import number
from ..trace import sanitize
from ._args import bounded
from ._opening import open_db
from ._output import EXIT_ERROR, EXIT_OK, Output, UsageError


def verify_arguments(verify: argparse.ArgumentParser) -> None:
    verify.add_argument(
        "--from",
        dest="from_seq",
        type=bounded(1, None),
        default=None,
        metavar="SEQ",
        help="first seq to check",
    )
    verify.add_argument(
        "--to",
        dest="to_seq",
        type=bounded(1, None),
        default=None,
        metavar="SEQ",
        help="last seq to check",
    )
    verify.add_argument(
        "--head",
        metavar="SEQ:HASH",
        help="a head kept from an earlier verify: catches a cut or rewritten tail "
        "(a chain in partitions: SEQ:HASH,SEQ:HASH,... as verify --json prints it)",
    )
    verify.add_argument(
        "--quick",
        action="store_true",
        help="check the file with PRAGMA quick_check (pages and records, not indexes): "
        "about three times faster than the full integrity_check",
    )


_PROBLEMS = {
    "altered": "the event does not match its hash: its content or its hash was edited",
    "deleted": "an event is missing from the middle of the chain",
    "swapped": "events were moved out of their place in the chain",
    "truncated": "events after the last one present are missing",
    "unreadable": "the event's stored text, or the page holding it, cannot be read",
    "rewritten": (
        "the chain verifies, but the event at the kept head does not carry the kept hash: "
        "the chain was recomputed after an edit"
    ),
}


def cmd_verify(args: argparse.Namespace, out: Output) -> int:
    head = _parse_head(args.head) if args.head is not None else None
    if args.from_seq is not None and args.to_seq is not None and args.from_seq > args.to_seq:
        raise UsageError(f"--from {args.from_seq} is after --to {args.to_seq}: nothing to check")
    top = max(seq for seq, _ in head) if head is not None else 0
    if head is not None and args.to_seq is not None and args.to_seq < top:
        # A kept head vouches for the chain up to it; a range that stops short of
        # it checks nothing against it, and must not say that it matches.
        raise UsageError(
            f"--head {top}:… lies beyond --to {args.to_seq}: the range must reach the kept head"
        )
    with open_db(args) as store:
        try:
            report = store.verify_events(
                args.from_seq, args.to_seq, head=None if head is None else _one_or_all(head)
            )
        except ValueError as e:  # a kept head of another number of partitions
            assert head is not None  # only a kept head can fail to fit
            raise UsageError(_misfit(head, len(store.chain_heads()), e)) from None
        checked = store.check_file(full=not args.quick, max_problems=FILE_PROBLEMS_MAX)
    if out.json:
        out.document({**_verify_json(report), "file": _file_json(checked)})
    else:
        out.line(_verify_text(report, head))
        out.line(_file_text(checked))
    return EXIT_OK if report.intact and checked.ok else EXIT_ERROR


FILE_PROBLEMS_MAX = 100  # what SQLite is asked for; the text shows the first few
FILE_PROBLEMS_SHOWN = 5


def _file_json(checked: FileCheck) -> dict[str, Any]:
    return {"ok": checked.ok, "check": checked.check, "problems": list(checked.problems)}


def _file_text(checked: FileCheck) -> str:
    """The file check's line, apart from the chain's: SQLite's own words, escaped."""
    if checked.check == "server":  # PostgreSQL: the server checks its own files
        return "file: not checked here (a PostgreSQL server keeps and checks its own files)"
    if checked.ok:
        return f"file: ok (PRAGMA {checked.check} found no damage)"
    shown = "; ".join(sanitize(p) for p in checked.problems[:FILE_PROBLEMS_SHOWN])
    more = len(checked.problems) - FILE_PROBLEMS_SHOWN
    if more > 0:
        shown += f"; and {more}{'+' if len(checked.problems) >= FILE_PROBLEMS_MAX else ''} more"
    return f"file: damaged (PRAGMA {checked.check}): {shown}"


def _verify_json(report: VerifyReport) -> dict[str, Any]:
    brk = report.first_break
    out: dict[str, Any] = {
        "intact": report.intact,
        "checked": report.checked,
        "head_seq": report.head_seq,
        "head_hash": report.head_hash,
        "head": f"{report.head_seq}:{report.head_hash}",
        "first_break": None if brk is None else _break_json(brk),
    }
    if report.heads:  # N > 1 partitions: head_seq is N, head_hash their digest
        out["partitions"] = len(report.heads)
        out["heads"] = [{"seq": seq, "hash": digest} for seq, digest in report.heads]
        out["head"] = ",".join(f"{seq}:{digest}" for seq, digest in report.heads)
    return out


def _break_json(brk: ChainBreak) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": brk.seq, "problem": brk.problem}
    if brk.detail:  # what is wrong, when the problem's name does not say it all
        out["detail"] = brk.detail
    return out


def _verify_text(report: VerifyReport, head: list[tuple[int, str]] | None) -> str:
    verified = f"{report.head_seq}:{sanitize(report.head_hash)}" if report.head_seq else "none"
    brk = report.first_break
    if brk is None:
        if report.checked == 0 and (report.head_seq == 0 or report.heads):
            return "intact: no events"
        if report.heads:
            text = (
                f"intact: {number(report.checked)} events checked in {len(report.heads)} "
                f"partitions; head {verified} (N:DIGEST; verify --json prints the heads to keep)"
            )
        else:
            text = f"intact: {number(report.checked)} events checked; head {verified}"
        if head is not None and len(head) == 1:
            text += f"; the kept head {head[0][0]}:{sanitize(head[0][1])} matches"
        elif head is not None:
            text += f"; the kept heads of {len(head)} partitions match"
        return text
    why = _PROBLEMS.get(brk.problem, "")
    problem = sanitize(brk.problem) + (f" ({why})" if why else "")
    if brk.detail:
        problem += f": {sanitize(brk.detail)}"
    return (
        f"broken at seq {brk.seq}: {problem}; {number(report.checked)} events verified "
        f"before it, last verified {verified}"
    )


_HEAD = re.compile(r"([0-9]+):([0-9a-f]{64})")
_PARTITION_HEAD = re.compile(r"([0-9]+):([0-9a-f]{64})?")


def _parse_head(text: str) -> list[tuple[int, str]]:
    """One `SEQ:HASH`, or (a chain in partitions) one per partition, comma-separated; a
    partition with no event then reads `0:`."""
    parts = text.strip().split(",")
    if len(parts) == 1:
        match = _HEAD.fullmatch(parts[0])
        if match is None:
            raise UsageError(
                f"--head must be SEQ:HASH as verify prints it (a seq, a colon, 64 lowercase "
                f"hex characters), not {sanitize(text)!r}"
            )
        if int(match[1]) == 0:
            raise UsageError(
                "--head 0:… names no event: a kept head is the seq and hash verify printed"
            )
        return [(int(match[1]), match[2])]
    heads: list[tuple[int, str]] = []
    for part in parts:
        found = _PARTITION_HEAD.fullmatch(part)
        if found is None or (int(found[1]) == 0) != (found[2] is None):
            raise UsageError(
                "--head must be SEQ:HASH,SEQ:HASH,... as verify --json prints it (one per "
                f"partition, 0: for one with no event), not {sanitize(text)!r}"
            )
        heads.append((int(found[1]), found[2] or ""))
    return heads


def _misfit(head: list[tuple[int, str]], partitions: int, error: ValueError) -> str:
    """Why a kept head does not fit the record, in the command's own terms."""
    if len(head) == 1 and partitions > 1:
        # Most likely the text's N:DIGEST pasted back: a digest of the heads, not one.
        return (
            f"--head names one head, and this record's chain is in {partitions} partitions: "
            'keep the heads verify --json prints as "head" (SEQ:HASH,SEQ:HASH,..., one per '
            "partition); the N:DIGEST the text prints is their digest, not a head"
        )
    if len(head) != partitions:
        return (
            f"--head names {len(head)} partition heads, and this record's chain is in "
            f"{partitions} partition(s): keep the head verify prints for this record"
        )
    return f"--head does not fit this record: {error}"


def _one_or_all(head: list[tuple[int, str]]) -> tuple[int, str] | list[tuple[int, str]]:
    return head[0] if len(head) == 1 else head


__all__ = ["cmd_verify"]
