"""A small disk for the tests of what a full one does: a tmpfs of its own."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(tmp_path: Path, size: str, refused: Callable[[str], None]) -> Iterator[Path]:
    """`tmp_path / "disk"`, a tmpfs of `size` of its own (0700) for the block, unmounted
    after; where it cannot be mounted, `refused(what the mount said)` (which skips or fails)."""
    mount = tmp_path / "disk"
    mount.mkdir(mode=0o700)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        refused(done.stderr)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def _cannot_mount(said: str) -> None:
    if not os.environ.get("CI"):
        pytest.skip(f"cannot mount a tmpfs here: {said.strip()}")
    raise AssertionError(said)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a 640 KiB tmpfs of its own, unmounted afterwards (mounting needs
    root: skipped without it, failed under CI)."""
    with tmpfs(tmp_path, "640k", _cannot_mount) as mount:
        yield mount
