"""Candidate engines for tool-schema patterns: Python's `re`, `regex` with a timeout, RE2.

Issue 9, bug 4: arguments are checked against `pattern` / `patternProperties`
before any timeout, on the event loop, and a backtracking engine lets one
pattern freeze the process. This script measures, per engine, what decision
0016 weighed:

- a benign check (`^[a-z0-9_-]{3,32}$` against `"hello_world"`) in µs;
- the same pattern against 1 MB of text (linear work for every engine);
- the classic catastrophic pattern `^(a+)+$` against `"a" * n + "!"`: the
  backtracking engines for small n only (their time doubles with each n),
  RE2 for n up to a million;
- RE2 as agentrt uses it (`agentrt._patterns.search`: the ECMA-262
  translation, cached compile) beside raw RE2;
- for `regex`, whether its timeout fires and how long after it asked.

    python benchmarks/patterns.py [--max-backtrack 22]

`regex` is optional (not a dependency); it is skipped when not installed.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import re2

from agentrt import _patterns as patterns

BENIGN = r"^[a-z0-9_-]{3,32}$"
EVIL = r"^(a+)+$"


def per_call_us(fn: Callable[[], Any], budget_s: float = 0.2) -> float:
    """Median µs of `fn()` over rounds that together take about `budget_s`."""
    fn()
    began = time.perf_counter()
    fn()
    once = max(time.perf_counter() - began, 1e-7)
    calls = max(1, min(10_000, int(budget_s / 5 / once)))
    rounds = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - began) / calls * 1e6)
    return statistics.median(rounds)


def engines() -> dict[str, Callable[[str, str], Any]]:
    out: dict[str, Callable[[str, str], Any]] = {
        "re": lambda p, s: re.search(p, s),
        "re2": lambda p, s: re2.search(p, s),
        "agentrt (re2)": patterns.search,
    }
    try:
        import regex  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return out
    out["regex (timeout 1 s)"] = lambda p, s: regex.search(p, s, timeout=1.0)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--max-backtrack", type=int, default=22, help="largest n for backtracking engines"
    )
    args = parser.parse_args(argv)
    found = engines()
    megabyte = "a" * 1_000_000
    print(f"{'engine':22} {'benign µs':>10} {'1 MB benign ms':>15}")
    for name, search in found.items():
        small = per_call_us(lambda s=search: s(BENIGN, "hello_world"))
        big = per_call_us(lambda s=search: s(r"^[a-z]+$", megabyte), budget_s=0.5) / 1000
        print(f"{name:22} {small:10.2f} {big:15.2f}")
    print()
    print(f"{EVIL!r} against 'a' * n + '!' (ms; '-' not run: doubling per n)")
    sizes = [16, 18, 20, args.max_backtrack, 40, 1000, 1_000_000]
    print(f"{'engine':22} " + " ".join(f"{n:>9}" for n in sizes))
    for name, search in found.items():
        backtracking = not name.startswith(("re2", "agentrt"))
        cells = []
        for n in sizes:
            if backtracking and n > args.max_backtrack and not name.startswith("regex"):
                cells.append(f"{'-':>9}")
                continue
            text = "a" * n + "!"
            began = time.perf_counter()
            try:
                search(EVIL, text)
                cells.append(f"{(time.perf_counter() - began) * 1000:9.2f}")
            except TimeoutError:
                cells.append(f"{'timeout':>9}")
        print(f"{name:22} " + " ".join(cells))
    print()
    print("regex's timeout on a pattern it cannot shortcut, `^(a|aa)+$` against 'a' * 60 + '!':")
    if "regex (timeout 1 s)" in found:
        began = time.perf_counter()
        try:
            found["regex (timeout 1 s)"](r"^(a|aa)+$", "a" * 60 + "!")
            outcome = "finished"
        except TimeoutError:
            outcome = "TimeoutError"
        print(f"  {outcome} after {time.perf_counter() - began:.2f} s (asked: 1 s)")
        began = time.perf_counter()
        re2.search(r"^(a|aa)+$", "a" * 60 + "!")
        print(f"  re2: {(time.perf_counter() - began) * 1e6:.0f} µs")
    else:
        print("  (regex not installed)")


if __name__ == "__main__":
    main()
