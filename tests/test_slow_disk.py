"""`tools/slow_disk.sh`: the slower disk the suite's time is also measured on (issue 19).

The script preloads `tools/slow_fsync.c`, built with gcc, so that every fsync of the
command and of its children waits a given time more after syncing. A sleep never
ends early, so these checks hold however loaded the machine is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "slow_disk.sh"

# A child's child timed around its fsync and fdatasync: the preload is inherited.
_PROBE = """
import os, subprocess, sys, tempfile, time
code = '''
import os, sys, tempfile, time
fd, path = tempfile.mkstemp()
try:
    t = time.perf_counter(); os.fsync(fd); a = time.perf_counter() - t
    t = time.perf_counter(); os.fdatasync(fd); b = time.perf_counter() - t
    print(f"{a * 1e6:.0f} {b * 1e6:.0f}")
finally:
    os.close(fd); os.unlink(path)
'''
child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
sys.stdout.write(child.stdout)
"""


def test_every_fsync_of_the_command_and_its_children_waits_the_extra_time() -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), "--extra-us", "30000", "--", sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("slow disk: every fsync waits 30000 us more")
    fsync_us, fdatasync_us = (int(x) for x in lines[-1].split())
    assert fsync_us >= 30_000
    assert fdatasync_us >= 30_000


def test_without_a_command_it_says_how_to_use_it_and_exits_2() -> None:
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: tools/slow_disk.sh")
