"""Disks of a test's own: a small tmpfs (what a full disk does), an ext4 on a loop device
(what a filesystem turned read-only does)."""

from __future__ import annotations

import os
import shutil
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


def _cannot_make_ext4(said: str) -> None:
    """Skipped in one line (failed under CI) where this machine cannot make an `Ext4`."""
    line = "; ".join(part.strip() for part in said.splitlines() if part.strip())
    if not os.environ.get("CI"):
        pytest.skip(f"cannot make an ext4 turned read-only here: {line}")
    raise AssertionError(line)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a 640 KiB tmpfs of its own, unmounted afterwards (mounting needs
    root: skipped without it, failed under CI)."""
    with tmpfs(tmp_path, "640k", _cannot_mount) as mount:
        yield mount


EXT4_SYSFS = Path("/sys/fs/ext4")
"""Where the kernel lists each mounted ext4 (`<device>/trigger_fs_error`)."""

EXT4_TOOLS = ("mkfs.ext4", "e2fsck", "findmnt", "mount", "umount")
"""The commands an `Ext4` needs, looked for before anything is made."""


def _trigger(mount: Path) -> Path:
    source = subprocess.run(
        ["findmnt", "-no", "SOURCE", str(mount)], capture_output=True, text=True
    ).stdout.strip()
    return EXT4_SYSFS / Path(source).name / "trigger_fs_error"


class Ext4:
    """A loop-mounted ext4 of its own, `errors=remount-ro`: `turn_read_only()` makes it
    report an error, and the kernel turns it read-only under whatever has files open on it
    (as a real error does); `repair()` unmounts it, runs `e2fsck` and mounts it again,
    read-write, as an operator does after such an error."""

    def __init__(self, image: Path, mount: Path) -> None:
        self.image = image
        self.mount = mount

    def _mount(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["mount", "-o", "loop,errors=remount-ro", str(self.image), str(self.mount)],
            capture_output=True,
            text=True,
        )

    def turn_read_only(self) -> None:
        _trigger(self.mount).write_text("the test turns this filesystem read-only")
        # Linux 6.x marks it `emergency_ro` (the mount still says `rw`): writes fail.
        with pytest.raises(OSError, match="Read-only file system"):
            os.utime(self.mount)

    def repair(self) -> None:
        subprocess.run(["umount", str(self.mount)], check=True)
        fsck = subprocess.run(["e2fsck", "-fy", str(self.image)], capture_output=True, text=True)
        assert fsck.returncode in (0, 1), fsck  # 1: errors found and corrected
        mounted = self._mount()
        assert mounted.returncode == 0, mounted.stderr


@contextmanager
def ext4(tmp_path: Path, size: str, refused: Callable[[str], None]) -> Iterator[Ext4]:
    """`tmp_path / "disk"`, an `Ext4` of `size` (an image in `tmp_path` on a loop device),
    its root 0700, unmounted after; where it cannot be made or turned read-only (a command
    or the kernel's `trigger_fs_error` missing), `refused(what was said)` before the test
    begins, with nothing left mounted."""
    missing = [tool for tool in EXT4_TOOLS if shutil.which(tool) is None]
    if missing:
        refused(f"{', '.join(missing)} not found")
    image, mount = tmp_path / "ext4.img", tmp_path / "disk"
    mount.mkdir(mode=0o700)
    made = subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-E", "root_owner=0:0", str(image), size],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        refused(f"mkfs.ext4 failed: {made.stderr}")
    disk = Ext4(image, mount)
    mounted = disk._mount()
    if mounted.returncode != 0:
        refused(mounted.stderr)
    try:
        trigger = _trigger(mount)
        if not os.access(trigger, os.W_OK):
            refused(f"{trigger} cannot be written: this kernel cannot turn it read-only")
        os.chmod(mount, 0o700)
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture
def ext4_disk(tmp_path: Path) -> Iterator[Ext4]:
    """An `Ext4` of 16 MiB of its own (loop device and mount: root, skipped without it,
    failed under CI)."""
    with ext4(tmp_path, "16M", _cannot_make_ext4) as disk:
        yield disk
