"""A small disk for the tests of what a full one does: a tmpfs of its own."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a 640 KiB tmpfs of its own, unmounted afterwards (mounting needs
    root: skipped without it, failed under CI)."""
    mount = tmp_path / "disk"
    mount.mkdir(mode=0o700)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=640k,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 and not os.environ.get("CI"):
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
