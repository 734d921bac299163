"""Entry point of the `agentrt` command: the console script and `python -m agentrt`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the `agentrt` command with `argv` (default: the process's arguments)."""
    from .cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
