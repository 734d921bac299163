"""The suite's `once`: a slow product built by the first worker that asks, read by the rest."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from support.once import once, run_folder


def _count(folder: Path) -> None:
    with open(folder / "builds", "a") as f:
        f.write("x")


def test_a_second_ask_reads_what_the_first_built(tmp_path_factory: pytest.TempPathFactory) -> None:
    shared = run_folder(tmp_path_factory)
    first = once(shared, "once-test-a", _count)
    second = once(shared, "once-test-a", _count)
    assert first == second == run_folder(tmp_path_factory) / "once-test-a"
    assert (first / "builds").read_text() == "x"


def test_a_failed_build_is_made_again_from_an_empty_folder_by_the_next_ask(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    def failing(folder: Path) -> None:
        _count(folder)
        raise RuntimeError("the build failed")

    with pytest.raises(RuntimeError, match="the build failed"):
        once(run_folder(tmp_path_factory), "once-test-b", failing)
    folder = once(run_folder(tmp_path_factory), "once-test-b", _count)
    assert (folder / "builds").read_text() == "x"  # what the failed build wrote is gone


def _slow_count(folder: Path) -> None:
    time.sleep(0.2)  # wide enough that askers without the lock would all build
    _count(folder)


def _ask(folder: str) -> None:
    once(Path(folder), "once-test-c", _slow_count)


def test_workers_asking_at_once_build_it_once(tmp_path: Path) -> None:
    # Four processes share one base folder, as a run's workers share theirs.
    context = multiprocessing.get_context("fork")
    asking = [context.Process(target=_ask, args=(str(tmp_path),)) for _ in range(4)]
    for p in asking:
        p.start()
    for p in asking:
        p.join(60)
    assert [p.exitcode for p in asking] == [0, 0, 0, 0]
    assert (tmp_path / "once-test-c" / "builds").read_text() == "x"
