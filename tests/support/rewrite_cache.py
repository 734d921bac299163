"""The test modules' assert-rewritten bytecode, written once by xdist's controller.

Each xdist worker imports every test module to collect, and pytest rewrites
each one's asserts as it imports it: about 15 s of CPU per worker for this
suite, half of a worker's collection. pytest caches what it rewrote in
`__pycache__/*-pytest-*.pyc` (hash-checked, so valid in any clone), but not
where `PYTHONDONTWRITEBYTECODE` is set, as on the project's machines; it still
reads that cache. So the controller, before it starts the workers, rewrites
the modules the run will collect whose cache is missing or stale, in a process
per core, with pytest's own functions, as decision 0061 compiles agentrt's
modules once for the children; each worker then reads them. From a fresh
clone that is one rewrite shared by the workers instead of one per worker;
on a later run only a check of each file's hash.

Best effort: any failure leaves the workers to rewrite as they always did.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

_config: pytest.Config | None = None


def _files(config: pytest.Config) -> list[Path]:
    """The test modules and conftest files under the run's arguments."""
    found: set[Path] = set()
    for arg in config.args or [str(config.rootpath)]:
        path = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
        if path.is_dir():
            found.update(path.rglob("test_*.py"))
            found.update(path.rglob("conftest.py"))
        elif path.suffix == ".py":
            found.add(path)
            found.update(p for p in (path.parent / "conftest.py",) if p.exists())
    return sorted(p for p in found if ".venv" not in p.parts)


def _rewrite(path: Path) -> None:
    from _pytest.assertion import rewrite

    assert _config is not None
    state = _config.stash[rewrite.assertstate_key]
    cache_dir = rewrite.get_cache_dir(path)
    pyc = cache_dir / (path.name[:-3] + rewrite.PYC_TAIL)
    if rewrite._read_pyc(path, pyc, state.trace) is not None:
        return
    if not rewrite.try_makedirs(cache_dir):
        return
    source_hash, co = rewrite._rewrite_test(path, _config)
    rewrite._write_pyc(state, co, source_hash, pyc)


def write(config: pytest.Config) -> None:
    """Rewrite and cache the run's test modules, if the run has xdist workers to share them."""
    global _config
    option: Any = config.option
    if getattr(option, "dist", "no") == "no" or getattr(option, "assertmode", None) != "rewrite":
        return
    with contextlib.suppress(Exception):
        files = _files(config)
        _config = config
        cores = min(os.cpu_count() or 1, 8)
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(cores, mp_context=context) as pool:
            list(pool.map(_rewrite, files, chunksize=4))
