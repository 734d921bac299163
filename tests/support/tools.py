"""The three recording tools of the tests' story: a read, a remote push, a destructive rm.

Each call returns a fresh `RecordingTool`, so every test counts its own calls:
`read` (read-only) answers `{"files": ["a.txt"]}`, `push` (a remote mutation,
which the default policy sends for approval) answers `{"pushed": True}`, and
`rm` (destructive, which the default policy denies) answers the recording
tool's default.
"""

from __future__ import annotations

from agentrt import SideEffect
from conftest import RecordingTool


def read_tool() -> RecordingTool:
    return RecordingTool("read", SideEffect.READ_ONLY, result={"files": ["a.txt"]})


def push_tool() -> RecordingTool:
    return RecordingTool("push", SideEffect.REMOTE_MUTATION, result={"pushed": True})


def rm_tool() -> RecordingTool:
    return RecordingTool("rm", SideEffect.DESTRUCTIVE)


def make_tools() -> tuple[RecordingTool, RecordingTool, RecordingTool]:
    """`read`, `push` and `rm`, in that order."""
    return read_tool(), push_tool(), rm_tool()
