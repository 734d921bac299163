"""The crash matrix: a scenario crashed at every point of every step it reaches.

`discover` runs the scenario once without a crash and records every crash point
its probes passed, as (point, step, inside a transaction or not). Each becomes a
case: the scenario run again with one crash there, recovered and checked.
Points only a crash reaches (the takeover's `step.interrupted`, the resume
after it, the pause on an interrupted side effect) are found the same way one
level down: with `depth=2`, every such point passed while recovering from a
first crash becomes a case of two crashes. Cases run concurrently, each on its
own file; the result is a `CrashMatrix` whose `str()` is an aligned table of
crash point × step → what became of the run, followed by every violation.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..driver import run_sync as _run_coro
from ..errors import ConfigError
from ..records import RunStatus
from .harness import MODES
from .harness import run as run_scenario
from .invariants import InvariantError, Violation
from .result import ProbeHit, Result
from .scenario import Crash, Point, Scenario, ScenarioSource, build

# Points that only recovery passes: a crash there tests recovery from recovery.
RECOVERY_POINTS = frozenset({Point.AFTER_INTERRUPTED, Point.AFTER_RESUMED, Point.AFTER_PAUSED})

# Rows in the order a step passes them, so the table reads like a step's life.
_ROW_ORDER = (
    Point.AFTER_STEP_STARTED,
    Point.DURING_MODEL_REQUEST,
    Point.AFTER_DECIDED,
    Point.AFTER_PAUSED,
    Point.AFTER_RESUMED,
    Point.AFTER_ALLOWED,
    Point.AFTER_ATTACH_ALLOWED,
    Point.AFTER_TOOL_STARTED,
    Point.AFTER_TOOL_EFFECT,
    Point.AFTER_TOOL_FINISHED,
    Point.AFTER_INTERRUPTED,
)
_MAX_CASES = 1000


@dataclass(frozen=True)
class MatrixCase:
    """One cell of the matrix: a sequence of crashes, and what became of the run."""

    crashes: tuple[Crash, ...]
    result: Result | None
    error: str = ""  # the scenario could not be played at all

    @property
    def violations(self) -> tuple[Violation, ...]:
        if self.result is None:
            return (Violation("scenario_error", self.error),)
        return self.result.violations

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def label(self) -> str:
        return " ▸ ".join(c.label for c in self.crashes)

    @property
    def row(self) -> str:
        """The crashes but the last step: `step.tool_started@1 ▸ step.interrupted (in tx)`."""
        last = self.crashes[-1]
        tail = last.at.value + (" (in tx)" if last.inside_tx else "")
        return " ▸ ".join([*(c.label for c in self.crashes[:-1]), tail])

    @property
    def column(self) -> int:
        return self.crashes[-1].step

    @property
    def outcome(self) -> str:
        if self.result is None:
            return "✗ error"
        mark = "" if self.ok else "✗ "
        return mark + outcome_of(self.result)


def outcome_of(result: Result) -> str:
    run = result.run
    if run.status == RunStatus.WAITING_FOR_APPROVAL:
        return "WAITING"
    return f"{run.status} {run.reason}".strip()


@dataclass(frozen=True)
class CrashMatrix:
    """Every case of one scenario's matrix, with the clean run it was derived from."""

    scenario: str
    mode: str
    clean: Result
    cases: tuple[MatrixCase, ...]
    directory: Path | None = None  # kept when a case failed, for inspection

    @property
    def violations(self) -> list[tuple[str, Violation]]:
        """(case label, violation) for every violation, the clean run's first."""
        found = [("no crash", v) for v in self.clean.violations]
        for case in self.cases:
            found += [(case.label, v) for v in case.violations]
        return found

    @property
    def ok(self) -> bool:
        return not self.violations

    def case(self, *crashes: Crash) -> MatrixCase:
        for case in self.cases:
            if case.crashes == tuple(crashes):
                return case
        raise KeyError(" ▸ ".join(c.label for c in crashes))

    def assert_ok(self) -> None:
        if not self.ok:
            raise InvariantError(
                f"crash matrix of {self.scenario} ({self.mode})",
                [Violation(v.rule, f"[{label}] {v.detail}") for label, v in self.violations],
                str(self),
            )

    def __str__(self) -> str:
        steps = sorted({case.column for case in self.cases})
        rows: dict[str, dict[int, str]] = {}
        for case in sorted(self.cases, key=_case_order):
            rows.setdefault(case.row, {})[case.column] = case.outcome
        header = ["crash point", *(f"step {s}" for s in steps)]
        body = [[row, *(cells.get(s, "·") for s in steps)] for row, cells in rows.items()]
        widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

        failed = self.violations
        verdict = "all invariants hold" if not failed else f"{len(failed)} violation(s)"
        out = [
            f"crash matrix of {self.scenario} ({self.mode}): {len(self.cases)} cases, {verdict}",
            f"no crash: {outcome_of(self.clean)}",
            "",
            line(header),
            line(["-" * w for w in widths]),
            *(line(r) for r in body),
        ]
        if failed:
            out += ["", "violations:"]
            out += [f"  [{label}] {v}" for label, v in failed]
            if self.directory is not None:
                out.append(f"databases kept in {self.directory}")
        return "\n".join(out)


def _case_order(case: MatrixCase) -> tuple[object, ...]:
    return tuple(
        (_ROW_ORDER.index(c.at) if c.at in _ROW_ORDER else len(_ROW_ORDER), c.inside_tx, c.step)
        for c in case.crashes
    )


def cases_from(
    hits: Iterable[ProbeHit],
    *,
    inside_tx: bool,
    prefix: tuple[Crash, ...] = (),
) -> list[tuple[Crash, ...]]:
    """One case per distinct (point, step, in tx) passed, in the order first passed."""
    known = {p.value for p in Point}
    seen: set[tuple[str, int, bool]] = set()
    out: list[tuple[Crash, ...]] = []
    for hit in hits:
        if hit.point not in known or hit.step < 0 or (hit.in_tx and not inside_tx):
            continue
        if hit.key in seen:
            continue
        seen.add(hit.key)
        out.append((*prefix, hit.as_crash()))
    return out


def after_crash(result: Result, *, inside_tx: bool) -> list[tuple[Crash, ...]]:
    """The next level of cases: the recovery points the next process passed while it
    recovered from `result`'s last crash (up to the first point of ordinary work)."""
    if not result.crashes_reached or len(result.crashes_reached) != len(result.crashes):
        return []
    died = result.crashes_reached[-1].process
    recovering: list[ProbeHit] = []
    for hit in result.probes:
        if hit.process != died + 1:
            continue
        if hit.point not in RECOVERY_POINTS:
            break
        recovering.append(hit)
    return cases_from(recovering, inside_tx=inside_tx, prefix=result.crashes)


async def discover(
    scenario: ScenarioSource, mode: str = "harness", *, db_path: str | Path | None = None
) -> tuple[Result, list[tuple[Crash, ...]]]:
    """Run the scenario once without a crash: its result and the first-level cases."""
    clean = await run_scenario(scenario, mode=mode, db_path=db_path, check_invariants=False)
    return clean, cases_from(clean.probes, inside_tx=True)


async def crash_matrix(
    scenario: ScenarioSource,
    mode: str = "harness",
    *,
    depth: int = 1,
    inside_tx: bool = True,
    workers: int = 4,
    directory: str | Path | None = None,
    keep_files: bool = False,
    timeout: float = 120.0,
) -> CrashMatrix:
    """Crash the scenario at every point of every step it reaches, and check each case.

    `scenario` is best given as a factory (`"pkg.mod:make"` or a function), so
    every case gets fresh tools, agent and clocks and cases run `workers` at a
    time; a Scenario instance is shared, so its cases run one at a time. Process
    mode needs a factory reference. `inside_tx=False` leaves out the crashes
    before a COMMIT. `depth=2` adds crashes during recovery from each crash.
    """
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
    if depth < 1:
        raise ConfigError("depth must be at least 1")
    if isinstance(scenario, Scenario):
        workers = 1
    title = build(scenario).title if not isinstance(scenario, str) else scenario
    base = (
        Path(directory)
        if directory is not None
        else Path(tempfile.mkdtemp(prefix="agentrt-matrix-"))
    )
    base.mkdir(parents=True, exist_ok=True)
    counter = iter(range(_MAX_CASES + 1))
    gate = asyncio.Semaphore(max(1, workers))

    async def play(crashes: tuple[Crash, ...]) -> MatrixCase:
        path = base / f"case-{next(counter):04d}.db"
        async with gate:
            try:
                result = await asyncio.to_thread(
                    _run_blocking, scenario, crashes, mode, path, timeout
                )
            except Exception as exc:  # the case could not be played: report it as a cell
                return MatrixCase(crashes, None, f"{type(exc).__name__}: {exc}")
        return MatrixCase(crashes, result)

    clean = await asyncio.to_thread(_run_blocking, scenario, (), mode, base / "clean.db", timeout)
    level = [c for c in cases_from(clean.probes, inside_tx=inside_tx)]
    cases: list[MatrixCase] = []
    for _ in range(depth):
        if not level:
            break
        if len(cases) + len(level) > _MAX_CASES:
            raise ConfigError(f"the matrix would exceed {_MAX_CASES} cases; lower depth")
        played = await asyncio.gather(*(play(c) for c in level))
        cases += played
        level = [
            nxt
            for case in played
            if case.result is not None
            for nxt in after_crash(case.result, inside_tx=inside_tx)
        ]
    matrix = CrashMatrix(title, mode, clean, tuple(cases))
    if matrix.ok and not keep_files:
        shutil.rmtree(base, ignore_errors=True)
        return matrix
    return CrashMatrix(title, mode, clean, tuple(cases), directory=base)


def crash_matrix_sync(
    scenario: ScenarioSource,
    mode: str = "harness",
    *,
    depth: int = 1,
    inside_tx: bool = True,
    workers: int = 4,
    directory: str | Path | None = None,
    keep_files: bool = False,
    timeout: float = 120.0,
) -> CrashMatrix:
    """`crash_matrix` from blocking code."""
    return _run_coro(
        crash_matrix(
            scenario,
            mode,
            depth=depth,
            inside_tx=inside_tx,
            workers=workers,
            directory=directory,
            keep_files=keep_files,
            timeout=timeout,
        )
    )


def _run_blocking(
    scenario: ScenarioSource, crashes: tuple[Crash, ...], mode: str, path: Path, timeout: float
) -> Result:
    # Each case on its own thread and event loop: a case that hangs or parks
    # tasks cannot disturb another.
    return _run_coro(
        run_scenario(
            scenario, *crashes, mode=mode, db_path=path, check_invariants=False, timeout=timeout
        )
    )
