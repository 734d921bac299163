"""Playing a scenario: in this process (`harness`) or in child processes (`process`).

This module owns the kit's entry points `run`, `run_sync` and `play`: it checks
the crashes asked for, names the file, the run and the journal, hands the
scenario to the in-process harness (`harness.run_in_process`) or to the
supervisor of child processes (`process.run_in_children`), then collects the
record into a `Result` and checks the contract on it. It sits above both modes,
so neither imports the other.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import re
import secrets
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from .. import ConfigError, NotFoundError, SchemaVersionError
from ..lowlevel import is_db_url, refuse_other_url, schema_of
from ..lowlevel import run_sync as _run_coro
from ._harness import recorded_floor_and_ids, run_in_process, skipping_ids
from ._invariants import check, repeats
from ._process import run_in_children
from ._result import Result, collect
from ._scenario import Crash, Scenario, ScenarioSource, SharedScenarioWarning, build

MODES = ("harness", "process")


async def run(
    scenario: ScenarioSource,
    *crashes: Crash,
    mode: str = "harness",
    db_path: str | Path | None = None,
    run_id: str | None = None,
    check_invariants: bool = True,
    timeout: float = 120.0,
) -> Result:
    """Run the scenario, crashing at each of `crashes` in turn, and check the contract.

    `mode="harness"` simulates each process inside this one; `mode="process"`
    runs each as a child Python process killed with SIGKILL, and needs the
    scenario named by a factory reference (`"pkg.mod:make_scenario"`).
    Raises `InvariantError` (an AssertionError) listing every violation unless
    `check_invariants=False`; the violations are on the result either way.

    `db_path` is the database: a SQLite file's path, or a PostgreSQL URL naming
    a schema (`postgresql://.../db?schema=NAME`, as `agentrt.open_store` takes);
    None gives a fresh temporary file. The kit reads the record only through
    the store interface, so both backends are checked alike (decision 0097).

    Give the scenario as a factory (`"pkg.mod:make_scenario"` or a function):
    each process, simulated or real, then gets a fresh Scenario, so nothing an
    agent or a tool remembered in memory survives a crash. A Scenario instance
    is shared by every simulated process, so its objects' memory does survive
    the simulated crashes (which a dead process's never does): crashing one in
    the harness warns with `SharedScenarioWarning`.
    """
    if crashes and mode == "harness" and isinstance(scenario, Scenario):
        warnings.warn(shared_warning(scenario), SharedScenarioWarning, stacklevel=2)
    return await play(
        scenario,
        crashes,
        mode=mode,
        db_path=db_path,
        run_id=run_id,
        check_invariants=check_invariants,
        timeout=timeout,
    )


def shared_warning(scenario: Scenario) -> str:
    return (
        f"scenario {scenario.title} is a Scenario instance: its agent, tools and operator "
        "are shared by every simulated process, so what they keep in memory survives the "
        "simulated crashes (a dead process's memory does not); give the scenario as a "
        "factory ('pkg.mod:make_scenario' or a function) to rebuild it in each process"
    )


async def play(
    scenario: ScenarioSource,
    crashes: Sequence[Crash],
    *,
    mode: str,
    db_path: str | Path | None,
    run_id: str | None,
    check_invariants: bool,
    timeout: float,
    clean: Result | None = None,
    fresh: bool = False,
) -> Result:
    """`run` without the warning (the matrix warns once for all its cases). `clean` is the
    scenario played without a crash, when the caller has it (the matrix does); else, when
    a crashed run repeats a side effect the crash hid (`invariants.repeats`), the kit plays
    the scenario once without a crash to tell a repeat from a request it makes anyway.
    `fresh`: the caller made `db_path` a fresh record, which holds no id yet (the matrix's
    copy of its image), so the run is named as on a database not made yet, without
    opening it to read the ids recorded."""
    crashes = tuple(crashes)
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
    for crash in crashes:
        if not isinstance(crash, Crash):
            raise ConfigError(f"expected Crash(...) arguments, got {crash!r}")
    built = build(scenario)
    path = database_of(db_path or built.db_path or _temporary_db())
    rid = run_id or _new_run_id(built, path, fresh=fresh)
    journal_path = journal_for(path, rid)
    journal_path.unlink(missing_ok=True)
    exit_codes: list[int] = []
    if mode == "process":
        ref = scenario if isinstance(scenario, str) else built.factory
        if not ref:
            raise ConfigError(
                "process mode rebuilds the scenario in each child: name it by its factory "
                "('pkg.mod:make_scenario'), not by a Scenario instance"
            )
        errors, exit_codes = await asyncio.to_thread(
            run_in_children,
            ref,
            crashes,
            db_path=path,
            run_id=rid,
            journal_path=journal_path,
            timeout=timeout,
        )
    else:
        errors = await run_in_process(
            scenario, crashes, db_path=path, run_id=rid, journal_path=journal_path, timeout=timeout
        )
    try:
        result = collect(
            scenario=built.title,
            mode=mode,
            db_path=path,
            run_id=rid,
            journal_path=journal_path,
            crashes=crashes,
            errors=errors,
            exit_codes=exit_codes,
            script=built.expected_script(),
        )
    except (NotFoundError, FileNotFoundError, SchemaVersionError) as exc:
        raise ScenarioError(
            f"scenario {built.title} never created its run: " + "; ".join(errors or [str(exc)])
        ) from exc
    if clean is None and crashes and repeats(result):
        clean = await _without_a_crash(scenario, mode, timeout)
    result = replace(result, violations=tuple(check(result, clean)))
    if check_invariants:
        result.check()
    return result


async def _without_a_crash(scenario: ScenarioSource, mode: str, timeout: float) -> Result | None:
    """The scenario played once without a crash, on a file of its own removed after; None for
    a Scenario instance (its objects remember the crashed run) or when it cannot be played."""
    if isinstance(scenario, Scenario):
        return None
    with tempfile.TemporaryDirectory(prefix="agentrt-testkit-clean-") as folder:
        try:
            return await play(
                scenario,
                (),
                mode=mode,
                db_path=Path(folder) / "clean.db",
                run_id=None,
                check_invariants=False,
                timeout=timeout,
            )
        except Exception:  # nothing to compare with: the repeat goes unjudged
            return None


def run_sync(
    scenario: ScenarioSource,
    *crashes: Crash,
    mode: str = "harness",
    db_path: str | Path | None = None,
    run_id: str | None = None,
    check_invariants: bool = True,
    timeout: float = 120.0,
) -> Result:
    """`run` from blocking code."""
    return _run_coro(
        run(
            scenario,
            *crashes,
            mode=mode,
            db_path=db_path,
            run_id=run_id,
            check_invariants=check_invariants,
            timeout=timeout,
        )
    )


class ScenarioError(RuntimeError):
    """The scenario could not be played at all (its run was never created)."""


def database_of(db_path: str | Path) -> Path | str:
    """The database the kit was given: a SQLite file's `Path`, or a PostgreSQL URL as it is
    (a `str`: a URL made a `Path` would lose the `//` after its scheme). An in-memory
    database is refused: every process, real or simulated, opens its own, so the one
    recovering would find no run."""
    text = str(db_path)
    if text == ":memory:":
        raise ConfigError(
            "the test kit needs a database every process of the scenario opens again: "
            "':memory:' gives each its own empty one; pass a file's path or a PostgreSQL URL"
        )
    refuse_other_url(text)  # as a `Path` its `//` would fold, and no open refuse it (0191)
    return text if is_db_url(text) else Path(text)


def journal_for(database: Path | str, run_id: str) -> Path:
    """Where the kit's journal of a run goes: beside a SQLite file, or, for a PostgreSQL
    schema, in a temporary folder of the kit's (named by the schema). It is named by the
    whole run id (two runs sharing a prefix share no journal), or by its digest when the
    id is no safe file name."""
    name = (
        run_id
        if _SAFE_NAME.fullmatch(run_id)
        else hashlib.sha256(run_id.encode(errors="surrogatepass")).hexdigest()
    )
    if isinstance(database, Path):
        return Path(f"{database}.testkit-{name}.jsonl")
    folder = Path(_temporary_db()).parent
    return folder / f"{schema_of(database)}.testkit-{name}.jsonl"


_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


def _new_run_id(scenario: Scenario, db_path: Path | str, *, fresh: bool = False) -> str:
    # The scenario's own id factory names the run, as `Driver.start` would have,
    # so a fake factory gives the same ids with and without the kit.
    if scenario.new_id is None:
        return secrets.token_hex(16)
    _, used = (None, set()) if fresh else recorded_floor_and_ids(str(db_path))
    return skipping_ids(scenario.new_id, used)()


_TEMP_DIRS: list[str] = []


def _temporary_db() -> Path:
    directory = tempfile.mkdtemp(prefix="agentrt-testkit-")
    if not _TEMP_DIRS:
        atexit.register(_remove_temp_dirs)
    _TEMP_DIRS.append(directory)
    return Path(directory) / "run.db"


def _remove_temp_dirs() -> None:
    for directory in _TEMP_DIRS:
        shutil.rmtree(directory, ignore_errors=True)


__all__ = [
    "MODES",
    "ScenarioError",
    "database_of",
    "journal_for",
    "play",
    "run",
    "run_sync",
    "shared_warning",
]
