"""tests/support/forkserver.py gives a forked child what a test asks of it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from support import forkserver

MAKE_A_FILE = """\
import os, sys
open(sys.argv[1], "w").close()
print(oct(os.stat(sys.argv[1]).st_mode & 0o777))
"""


def test_a_child_asked_for_a_umask_makes_its_files_under_it_and_others_under_the_servers(
    tmp_path: Path,
) -> None:
    """As `preexec_fn=lambda: os.umask(0o002)` would: test_example_dirs.py's umask test
    relies on it."""
    script = tmp_path / "make.py"
    script.write_text(MAKE_A_FILE)
    own = os.umask(0o022)
    os.umask(own)
    under_002 = forkserver.run(
        [sys.executable, str(script), str(tmp_path / "a")], preload=forkserver.CLI, umask=0o002
    )
    assert (under_002.returncode, under_002.stdout, under_002.stderr) == (0, "0o664\n", "")
    default = forkserver.run(
        [sys.executable, str(script), str(tmp_path / "b")], preload=forkserver.CLI
    )
    assert default.stdout == f"{oct(0o666 & ~own)}\n"


def test_a_child_finds_its_temporary_folder_in_its_own_environment(tmp_path: Path) -> None:
    """TMPDIR is read at the child's first use, as in a fresh interpreter, whatever
    folder the server found for itself: the demo's tests judge what a child made there."""
    script = tmp_path / "where.py"
    script.write_text("import tempfile\nprint(tempfile.gettempdir())\n")
    forkserver.run([sys.executable, str(script)], preload=forkserver.CLI)  # the server's own
    (tmp_path / "temp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "temp")}
    done = forkserver.run([sys.executable, str(script)], preload=forkserver.CLI, env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{tmp_path / 'temp'}\n", "")
