"""Start-up benchmark: what a fresh process pays before it does its work (decision 0061).

Each command below is started as a new process `--runs` times (default 10), the
commands in turn (round-robin, so a machine getting busier or quieter moves
every command alike), after one warm-up run each that is not counted:

- `python -c pass`: the interpreter's own start, the yardstick;
- `python -c "import agentrt"`;
- `python -c "from agentrt import *"`: every public name, so every module they need
  (`import agentrt` imports each name at its first use, decision 0090);
- `agentrt --help` (the console script, `python -m agentrt --help` without it);
- a one-step run: open a new store, drive a `ScriptedAgent` whose first decision
  completes the run, close the store;
- a one-tool run: the same with one `@agentrt.tool` (read-only) called once,
  then complete: the first use of pydantic and jsonschema is in this one.

Figures per command: wall time (median, min, max) from just before the start
to the child reaped, the child's CPU time (user + system, the kernel's own
accounting from `os.wait4`), and the median over the rounds of the wall-time
ratio to `python -c pass` started in the same round. Then where the time of
`import agentrt` and of `agentrt --help` goes: `python -X importtime`, each
module's own ("self") time, the minimum over `--runs` runs, summed by top-level
package (agentrt's modules one by one), the largest `--where` printed.

`--compare SRC` measures another source tree of agentrt in the same rounds (each
command once more with `PYTHONPATH=SRC`, labelled `[SRC's last part]`), e.g. a
checkout of the commit before a change: before and after under the same load.

Bytecode: the warm-up runs write the `.pyc` files (as `pip install` or a first
import does) even when PYTHONDONTWRITEBYTECODE is set, so that the figures are
the code's and not a compiler's; `--as-is` leaves the environment alone, and
the first lines say whether agentrt's bytecode is cached. `--no-warm-up` skips the
warm-up runs (with `--as-is`, for the tests' smoke run: every command still runs
and is printed, its figures those of a cold start).

    python benchmarks/startup.py [--runs N] [--where N] [--as-is] [--no-warm-up] [--dir DIR]
                                 [--compare SRC]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import agentrt

ONE_STEP = """
import sys
import agentrt
from agentrt.scripted import ScriptedAgent
store = agentrt.open_store(sys.argv[1])
driver = agentrt.Driver(
    store=store,
    agent=ScriptedAgent([agentrt.Decision.complete({"ok": True})]),
    policy=agentrt.default_policy(),
    tools=[],
)
run = driver.start_sync("one step", limits=agentrt.Limits(max_steps=2))
store.close()
assert run.status == "COMPLETED", run
"""

ONE_TOOL = """
import sys
from datetime import timedelta
import agentrt
from agentrt.scripted import ScriptedAgent

@agentrt.tool(side_effect="read_only", timeout=timedelta(seconds=30))
def read_page(n: int) -> dict:
    '''Read a page.'''
    return {"page": n}

store = agentrt.open_store(sys.argv[1])
agent = ScriptedAgent(
    [agentrt.Decision.tool_call("read_page", {"n": 1}), agentrt.Decision.complete({"ok": True})]
)
driver = agentrt.Driver(
    store=store, agent=agent, policy=agentrt.default_policy(), tools=[read_page]
)
run = driver.start_sync("one tool", limits=agentrt.Limits(max_steps=3))
store.close()
assert run.status == "COMPLETED", run
"""


def help_command() -> list[str]:
    script = Path(sys.executable).with_name("agentrt")
    if script.exists():
        return [str(script), "--help"]
    return [sys.executable, "-m", "agentrt", "--help"]


def commands() -> list[tuple[str, list[str], bool]]:
    """(label, argv, whether a new store path is appended) for every command measured."""
    py = sys.executable
    return [
        ("python -c pass", [py, "-c", "pass"], False),
        ("import agentrt", [py, "-c", "import agentrt"], False),
        ("import *", [py, "-c", "from agentrt import *"], False),
        ("agentrt --help", help_command(), False),
        ("one-step run", [py, "-c", ONE_STEP], True),
        ("one-tool run", [py, "-c", ONE_TOOL], True),
    ]


def run_once(argv: Sequence[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Start `argv`, wait for it; (wall seconds, CPU seconds). A failure stops the benchmark."""
    start = time.perf_counter()
    child = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    assert child.stderr is not None
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stderr.close()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} exited {child.returncode}: {errors.decode()}")
    return wall, usage.ru_utime + usage.ru_stime


def bytecode_cached() -> str:
    package = Path(agentrt.__file__).parent
    sources = [p for p in package.rglob("*.py") if "__pycache__" not in p.parts]
    tag = sys.implementation.cache_tag
    cached = [p for p in sources if (p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc").exists()]
    return f"{len(cached)} of agentrt's {len(sources)} modules have bytecode cached"


def where_the_time_goes(runs: int, show: int, label: str, argv: Sequence[str]) -> list[str]:
    own: dict[str, int] = {}
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", *argv],
            capture_output=True,
            text=True,
            check=True,
        )
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            self_text, _, name = line[len("import time:") :].split("|")
            module = name.strip()
            own[module] = min(own.get(module, 1 << 62), int(self_text))
    by_package: collections.Counter[str] = collections.Counter()
    for module, self_us in own.items():
        by_package[module if module.startswith("agentrt") else module.split(".")[0]] += self_us
    total = sum(by_package.values())
    lines = [
        f"where `{label}` goes (python -X importtime, each module's self time, "
        f"minimum of {runs} runs; total {total / 1000:.1f} ms):"
    ]
    for package, package_us in by_package.most_common(show):
        lines.append(f"  {package_us / 1000:7.1f} ms  {package}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--runs", type=int, default=10, help="counted runs of each command")
    parser.add_argument("--where", type=int, default=15, help="packages listed (0: none)")
    parser.add_argument("--as-is", action="store_true", help="do not write bytecode first")
    parser.add_argument(
        "--no-warm-up", action="store_true", help="no uncounted run of each command first"
    )
    parser.add_argument("--dir", default=None, help="where the runs' stores go (removed after)")
    parser.add_argument(
        "--compare", metavar="SRC", default=None, help="another agentrt source tree to measure"
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    began = time.monotonic()
    print(f"python {sys.version.split()[0]}, agentrt {agentrt.__version__}")
    flag = "set" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "not set"
    print(f"PYTHONDONTWRITEBYTECODE {flag}; before the warm-up: {bytecode_cached()}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    measured: list[tuple[str, list[str], bool, dict[str, str] | None]] = [
        (label, argv_, store, None) for label, argv_, store in commands()
    ]
    if args.compare:
        tag = f"[{Path(args.compare).resolve().parent.name}]"
        other = {**os.environ, "PYTHONPATH": str(Path(args.compare).resolve())}
        measured += [(f"{label} {tag}", argv_, store, other) for label, argv_, store, _ in measured]
    walls: dict[str, list[float]] = {label: [] for label, _, _, _ in measured}
    cpus: dict[str, list[float]] = {label: [] for label, _, _, _ in measured}
    ratios: dict[str, list[float]] = {label: [] for label, _, _, _ in measured}
    workdir = tempfile.mkdtemp(prefix="agentrt-startup-", dir=args.dir)
    try:
        for n, (_, command, with_store, env) in enumerate([] if args.no_warm_up else measured):
            extra = [os.path.join(workdir, f"warm-{n}.db")] if with_store else []
            warm_env = dict(os.environ if env is None else env)
            if not args.as_is:  # the warm-up writes the bytecode
                warm_env.pop("PYTHONDONTWRITEBYTECODE", None)
            run_once([*command, *extra], warm_env)
        for round_ in range(args.runs):
            this_round: dict[str, float] = {}
            for n, (label, command, with_store, env) in enumerate(measured):
                extra = []
                if with_store:
                    extra = [os.path.join(workdir, f"r{round_}-{n}.db")]
                took, used = run_once([*command, *extra], env)
                walls[label].append(took)
                cpus[label].append(used)
                this_round[label] = took
            for label in this_round:
                ratios[label].append(this_round[label] / this_round["python -c pass"])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"after the warm-up: {bytecode_cached()}")
    print()
    print(f"{args.runs} runs of each, in turn; whole processes, milliseconds")
    width = max(len(label) for label, _, _, _ in measured)
    print(
        f"{'command':<{width}} {'wall median':>11} {'min':>7} {'max':>7} {'cpu median':>10}"
        f" {'x python -c pass':>17}"
    )
    for label, _, _, _ in measured:
        wall, cpu = walls[label], cpus[label]
        print(
            f"{label:<{width}} {statistics.median(wall) * 1000:>11.0f} {min(wall) * 1000:>7.0f}"
            f" {max(wall) * 1000:>7.0f} {statistics.median(cpu) * 1000:>10.0f}"
            f" {statistics.median(ratios[label]):>16.2f}x"
        )
    print("x python -c pass: the median over the rounds of each round's wall-time ratio")
    if args.where > 0:
        for label, argv_ in (
            ("import agentrt", ["-c", "import agentrt"]),
            ("agentrt --help", ["-m", "agentrt", "--help"]),
        ):
            print()
            for line in where_the_time_goes(args.runs, args.where, label, argv_):
                print(line)
    print()
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"(took {time.monotonic() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
