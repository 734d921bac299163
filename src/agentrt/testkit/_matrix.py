"""The crash matrix: a scenario crashed at every point of every step it reaches.

`discover` runs the scenario once without a crash and records every crash point
its probes passed, as (point, step, inside a transaction or not). Each becomes a
case: the scenario run again with one crash there, recovered and checked.

Some points only a crash reaches: the recovery points (`step.interrupted` of
the takeover, the `run.resumed` after it, the `run.paused` on an interrupted
side effect), passed by the process that recovers. They are found the same way
one level down, from the probes the recovering process passed up to its first
point of ordinary work, and crashed at with a second crash. `depth` is how many
levels are exhaustive: with `depth=2`, every recovery point after every first
crash. Then (`recovery=True`, the default) one more level covers what is left:
each recovery point of each distinct recovery (the same recovery points passed
in the same order are one recovery) is crashed at once, after the first case
that leads to it. So the default matrix crashes at every point at every step
the scenario reaches, recovery points included, with a bounded number of cases
(for the 3-step checkout scenario: 25 first crashes and 20 recovery crashes).

Cases run concurrently, each on its own fresh database; the result is a `CrashMatrix`
whose `str()` is an aligned table of crash point × step → what became of the
run, followed by every violation.

A case's fresh SQLite file is a copy: the matrix creates and migrates one record
(`lowlevel.fresh_sqlite_image`, with the chain partitions every process opens
with, `harness.CASE_CHAIN_PARTITIONS`) and writes its checkpointed main file to
each case's path, 0600 and this user's, before the case's first process opens it
(itself, in process mode too): it opens an existing record of this schema
version, exactly as freshly migrated, instead of creating one (decision 0185).
The image is the matrix's own, made at its first case and never shared with
another matrix. A PostgreSQL case gets a schema of its own, as before.
"""

from __future__ import annotations

import asyncio
import functools
import glob
import shutil
import tempfile
import warnings
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .. import ConfigError, RunStatus
from ..lowlevel import (
    SqliteImage,
    drop_postgres_schema,
    fresh_sqlite_image,
    is_db_url,
    schema_of,
    shown_db,
    with_schema,
)
from ..lowlevel import run_sync as _run_coro
from . import _harness
from ._result import ProbeHit, Result
from ._runner import MODES, shared_warning
from ._runner import play as play_scenario
from ._runner import run as run_scenario
from ._scenario import Crash, Point, Scenario, ScenarioSource, SharedScenarioWarning, build
from ._violation import InvariantError, Violation

# Points that only recovery passes: a crash there tests recovery from recovery.
RECOVERY_POINTS = frozenset({Point.AFTER_INTERRUPTED, Point.AFTER_RESUMED, Point.AFTER_PAUSED})
# Passed on the way to a recovery point without ending the recovery: an approved
# call allowed again at attach, before `execute` resumes the run as it starts it.
_ON_THE_WAY = frozenset({Point.AFTER_ATTACH_ALLOWED})

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
# A SQLite database's file and the files the store keeps beside it (its write-ahead log,
# shared memory, rollback journal and writers' lock file).
_SQLITE_FILES = ("", "-wal", "-shm", "-journal", "-lock")


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
    # Kept when a case failed, for inspection: the folder of the cases' files, or the
    # PostgreSQL URL whose schema is the prefix of the cases' schemas (out of the repr:
    # a URL may hold a password).
    directory: Path | str | None = field(default=None, repr=False)

    @property
    def violations(self) -> list[tuple[str, Violation]]:
        """(case label, violation) for every violation, the clean run's first. A matrix of
        no case proves nothing: it is one violation (`nothing_crashed`)."""
        found = [("no crash", v) for v in self.clean.violations]
        if not self.cases:
            found.append(("no crash", nothing_crashed(self.clean)))
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
                out.append(f"databases kept in {shown_db(str(self.directory))}")
        return "\n".join(out)


def nothing_crashed(clean: Result) -> Violation:
    """Why a matrix has no case: its clean run passed no crash point, or none was selected."""
    if cases_from(clean.probes, inside_tx=True):
        return Violation("nothing_crashed", "no crash point was selected, so nothing was crashed")
    return Violation(
        "nothing_crashed",
        "the clean run passed no crash point, so nothing was crashed: a loop of its own "
        "must drive the run through ctx.gate or ctx.driver, or pass ctx.probe and "
        "ctx.probe_in_tx on to what it builds",
    )


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
        if hit.process != died + 1 or hit.point in _ON_THE_WAY:
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


Cases = list[tuple[Crash, ...]]
Select = Callable[[tuple[Crash, ...]], bool]


async def _explore(
    clean: Result,
    play: Callable[[tuple[Crash, ...]], Awaitable[MatrixCase]],
    *,
    depth: int,
    recovery: bool,
    inside_tx: bool,
    select: Select | None,
    play_last: bool,
) -> tuple[list[MatrixCase], Cases]:
    """Every case of the matrix, level by level: (the cases played, the cases not played).

    A level is played when the next one is derived from it (its recoveries), and
    the last level only if `play_last`.
    """

    def selected(crashes: tuple[Crash, ...]) -> bool:
        return select is None or select(crashes)

    level = [c for c in cases_from(clean.probes, inside_tx=inside_tx) if selected(c)]
    played: list[MatrixCase] = []
    exhaustive = depth - 1  # levels still to derive in full
    covered = not recovery  # the covering level is derived (or not wanted)
    # (a recovery, as the crash points it passes in order; one of those points): the
    # recovery crashes already in the matrix.
    seen: set[tuple[tuple[Crash, ...], Crash]] = set()
    while level:
        if len(played) + len(level) > _MAX_CASES:
            raise ConfigError(
                f"the matrix would exceed {_MAX_CASES} cases; lower depth or pass recovery=False"
            )
        last = exhaustive == 0 and covered
        if last and not play_last:
            return played, level
        done = list(await asyncio.gather(*(play(c) for c in level)))
        played += done
        if last:
            break
        following: Cases = []
        for case in done:
            if case.result is None:
                continue
            after = after_crash(case.result, inside_tx=inside_tx)
            path = tuple(c[-1] for c in after)
            for nxt in after:
                key = (path, nxt[-1])
                if (exhaustive > 0 or key not in seen) and selected(nxt):
                    following.append(nxt)
                    seen.add(key)
        if exhaustive > 0:
            exhaustive -= 1
        else:
            covered = True
        level = following
    return played, []


def _check_args(mode: str, depth: int, workers: int) -> None:
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigError(f"depth must be an int of at least 1, got {depth!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an int of at least 1, got {workers!r}")


class _Player:
    """Plays cases `workers` at a time, each on its own thread (and event loop) and database:
    a file each in the folder `base` (written from the matrix's image of a fresh record),
    or a schema each named after the schema of the PostgreSQL URL `base` (`PREFIX_clean`,
    `PREFIX_c0001`, ...)."""

    def __init__(
        self,
        scenario: ScenarioSource,
        mode: str,
        base: tuple[Path | str, bool],
        workers: int,
        timeout: float,
    ) -> None:
        self.scenario = scenario
        self.mode = mode
        self.base, self.own_folder = base
        self.timeout = timeout
        self.counter = iter(range(10 * _MAX_CASES))
        self.made: list[str] = []  # the schemas made on a server, to drop after
        self.files: list[Path] = []  # the databases made in a folder the kit was given
        self.without_crash: Result | None = None  # what each case is compared with
        # A fresh SQLite record's file, made at the first case's file: this matrix's own.
        self.image: SqliteImage | None = None
        # A pool of its own: the default executor's few threads would cap `workers`,
        # and a process-mode case mostly waits on its children.
        self.pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="agentrt-matrix")

    def _database(self, name: str) -> tuple[Path | str, bool]:
        """The case's database, and whether it is a copy of the image just written."""
        if isinstance(self.base, Path):
            path = self.base / f"{name}.db"
            self.files.append(path)
            if self.image is None:
                self.image = fresh_sqlite_image(_harness.CASE_CHAIN_PARTITIONS)
            # False: something is there already, or the folder is not fit for a database;
            # the case's first open meets it and judges it, as without the image.
            return path, self.image.write_new(path)
        url = with_schema(self.base, f"{schema_of(self.base)}_{name}")
        self.made.append(url)
        return url, False

    async def _play(self, crashes: tuple[Crash, ...], database: tuple[Path | str, bool]) -> Result:
        run = functools.partial(
            _run_blocking,
            self.scenario,
            crashes,
            self.mode,
            database,
            self.timeout,
            self.without_crash,
        )
        return await asyncio.get_running_loop().run_in_executor(self.pool, run)

    async def clean(self) -> Result:
        self.without_crash = await self._play((), self._database("clean"))
        return self.without_crash

    async def __call__(self, crashes: tuple[Crash, ...]) -> MatrixCase:
        number = next(self.counter)
        name = f"case-{number:04d}" if isinstance(self.base, Path) else f"c{number:04d}"
        try:
            result = await self._play(crashes, self._database(name))
        except Exception as exc:  # the case could not be played: report it as a cell
            return MatrixCase(crashes, None, f"{type(exc).__name__}: {exc}")
        return MatrixCase(crashes, result)

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def remove(self) -> list[str]:
        """Remove every case's database: the folder if the kit made it, else the files it
        wrote there (a database, its SQLite side files, its journals), or the schemas made,
        each tried whatever became of the others; the schemas that could not be dropped, as
        shown (without a password)."""
        if isinstance(self.base, Path) and self.own_folder:
            shutil.rmtree(self.base, ignore_errors=True)
        for database in self.files if not self.own_folder else []:
            made = [Path(f"{database}{side}") for side in _SQLITE_FILES]
            made += database.parent.glob(f"{glob.escape(database.name)}.testkit-*.jsonl")
            for path in made:
                path.unlink(missing_ok=True)
        self.files.clear()
        left: list[str] = []
        for url in self.made:
            try:
                drop_postgres_schema(url)
            except Exception:
                left.append(shown_db(url))
        self.made.clear()
        return left


def _base_of(directory: str | Path | None, prefix: str) -> tuple[Path | str, bool]:
    """Where a matrix's cases go, and whether the kit made that folder (so may remove it
    whole): the folder given (made if missing), the PostgreSQL URL given, or a new
    temporary folder. A folder the consumer gave that exists is theirs: only what the
    cases wrote in it is removed."""
    if directory is not None and is_db_url(str(directory)):
        return str(directory), False
    if directory is None:
        return Path(tempfile.mkdtemp(prefix=prefix)), True
    base = Path(directory)
    if base.is_dir():
        return base, False
    base.mkdir(parents=True)
    return base, True


async def crash_matrix(
    scenario: ScenarioSource,
    mode: str = "harness",
    *,
    depth: int = 1,
    recovery: bool = True,
    inside_tx: bool = True,
    workers: int = 4,
    directory: str | Path | None = None,
    keep_files: bool = False,
    timeout: float = 120.0,
    select: Select | None = None,
) -> CrashMatrix:
    """Crash the scenario at every point of every step it reaches, and check each case.

    `scenario` is best given as a factory (`"pkg.mod:make"` or a function), so
    every process of every case gets fresh tools, agent and clocks and cases run
    `workers` at a time; a Scenario instance is shared (its memory survives the
    simulated crashes: `SharedScenarioWarning`), so its cases run one at a time.
    Process mode needs a factory reference. `inside_tx=False` leaves out the
    crashes before a COMMIT. By default every point the clean run passes is
    crashed at, and then each recovery point (`step.interrupted`, `run.resumed`,
    `run.paused`) of each distinct recovery from those crashes, once;
    `recovery=False` leaves the recovery points out. `depth=2` crashes at every
    recovery point after every first crash (and covers the recoveries from
    those). `select(crashes)` False leaves a case out (and the recoveries it
    would lead to), e.g. `lambda c: len(c) == 1 or c[-1].step == 1`.

    `directory` is where the cases' databases go: a folder (a file each; a new
    temporary one when None), or a PostgreSQL URL whose schema (`?schema=PREFIX`)
    prefixes the cases' schemas (`PREFIX_clean`, `PREFIX_c0000`, ...). Each file
    is a copy of one record the matrix creates and migrates first (its main file
    after a checkpoint, 0600), so every case opens a freshly migrated record
    without creating one; a file already at a case's path is left to the case's
    open, as it would be without the copy. They are
    removed when every case holds, unless `keep_files`: a folder the kit made
    whole, a folder that already existed only of the files the cases wrote
    there, the schemas made; kept for inspection otherwise
    (`CrashMatrix.directory`). A matrix of no case (the clean run passed no
    crash point, or `select` kept none) proves nothing: it fails with
    `nothing_crashed`.
    """
    _check_args(mode, depth, workers)
    if isinstance(scenario, Scenario):
        workers = 1
        warnings.warn(shared_warning(scenario), SharedScenarioWarning, stacklevel=2)
    title = build(scenario).title if not isinstance(scenario, str) else scenario
    player = _Player(scenario, mode, _base_of(directory, "agentrt-matrix-"), workers, timeout)
    base = player.base
    try:
        try:
            clean = await player.clean()
            played, _ = await _explore(
                clean,
                player,
                depth=depth,
                recovery=recovery,
                inside_tx=inside_tx,
                select=select,
                play_last=True,
            )
        finally:
            player.close()
    except BaseException as e:
        # No matrix to name them: what the cases made goes, unless asked to keep it.
        if keep_files:
            e.add_note(f"the cases' databases are kept in {shown_db(str(base))}")
        else:
            left = player.remove()
            if left:
                e.add_note(f"these schemas could not be dropped: {', '.join(left)}")
        raise
    matrix = CrashMatrix(title, mode, clean, tuple(played))
    if matrix.ok and not keep_files:
        player.remove()
        return matrix
    return CrashMatrix(title, mode, clean, tuple(played), directory=base)


async def matrix_cases(
    scenario: ScenarioSource,
    mode: str = "harness",
    *,
    depth: int = 1,
    recovery: bool = True,
    inside_tx: bool = True,
    workers: int = 4,
    timeout: float = 120.0,
    select: Select | None = None,
    directory: str | Path | None = None,
) -> tuple[Result, Cases]:
    """The clean run and the crashes of every case `crash_matrix` would play, in order.

    To know which recovery points a crash leads to, the kit must play it: every
    level but the last is played here (on temporary files, removed after), as
    the pytest plugin does at collection. With `recovery=False` and `depth=1`
    only the clean run is played (that is `discover`). `directory` is as for
    `crash_matrix` (a folder or a PostgreSQL URL); what is played there is removed.
    """
    _check_args(mode, depth, workers)
    if isinstance(scenario, Scenario):
        workers = 1
    player = _Player(scenario, mode, _base_of(directory, "agentrt-matrix-plan-"), workers, timeout)
    try:
        clean = await player.clean()
        played, rest = await _explore(
            clean,
            player,
            depth=depth,
            recovery=recovery,
            inside_tx=inside_tx,
            select=select,
            play_last=False,
        )
    finally:
        player.close()
        player.remove()
    return clean, [c.crashes for c in played] + rest


def crash_matrix_sync(
    scenario: ScenarioSource,
    mode: str = "harness",
    *,
    depth: int = 1,
    recovery: bool = True,
    inside_tx: bool = True,
    workers: int = 4,
    directory: str | Path | None = None,
    keep_files: bool = False,
    timeout: float = 120.0,
    select: Select | None = None,
) -> CrashMatrix:
    """`crash_matrix` from blocking code."""
    return _run_coro(
        crash_matrix(
            scenario,
            mode,
            depth=depth,
            recovery=recovery,
            inside_tx=inside_tx,
            workers=workers,
            directory=directory,
            keep_files=keep_files,
            timeout=timeout,
            select=select,
        )
    )


def _run_blocking(
    scenario: ScenarioSource,
    crashes: tuple[Crash, ...],
    mode: str,
    database: tuple[Path | str, bool],
    timeout: float,
    clean: Result | None,
) -> Result:
    # Each case on its own thread and event loop: a case that hangs or parks
    # tasks cannot disturb another.
    path, fresh = database
    return _run_coro(
        play_scenario(
            scenario,
            crashes,
            mode=mode,
            db_path=path,
            run_id=None,
            check_invariants=False,
            timeout=timeout,
            clean=clean,
            fresh=fresh,
        )
    )
