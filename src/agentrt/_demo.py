"""`agentrt demo`: the seed's story, told on a real file with a real SIGKILL.

An agent whose tool charges a card (a local, simulated card processor) is
killed in the middle of the charge by SIGKILL. The restarted program calls
`driver.recover_sync()`, which finds the run, proves the dead owner gone (or
waits out its lease), and pauses it on an
`interrupted_side_effect` approval instead of charging again on its own. The
demo shows that approval as an operator would see it, with the exact command
to approve it; then, as the operator, it approves and resumes: the charge runs
once more, on the same step, and the audit trail shows every step.

Nothing is needed but the package. The database is left behind for
`agentrt show` / `agentrt events` / `agentrt verify`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from . import approve, open_existing, open_store
from ._driver import Driver
from ._errors import AgentrtError
from ._policy import SideEffectPolicy
from ._records import Decision, PolicyDecision, Run, RunStatus, SideEffect, ToolCall
from ._render_approval import approval_lines
from ._store import Store
from ._tools import tool
from .cli._commands import DEMO_MAKES_ITS_OWN_DATABASE
from .recover import RecoverAction
from .scripted import ScriptedAgent

ORDER = "A-1001"
AMOUNT_CENTS = 4200
LEASE = timedelta(seconds=30)


def _processor_log(workdir: Path) -> Path:
    return workdir / "card-processor.log"


def make_tools(workdir: Path, *, stall_after_request: bool) -> list[Any]:
    """The shop's tools. The card processor is a log file: each request is a line."""

    @tool(side_effect=SideEffect.READ_ONLY, timeout=timedelta(seconds=5))
    def look_up_order(order: str) -> dict[str, Any]:
        """Look up an order: what it costs and which card pays for it."""
        return {"order": order, "amount_cents": AMOUNT_CENTS, "card": "visa ending 4242"}

    @tool(side_effect=SideEffect.REMOTE_MUTATION, timeout=timedelta(seconds=60))
    def charge_card(order: str, amount_cents: int, call: ToolCall) -> dict[str, Any]:
        """Charge the order's card through the card processor."""
        if stall_after_request and _orphaned():
            os._exit(1)  # the demo is gone: nobody is there to tell the story to
        with open(_processor_log(workdir), "a", encoding="utf-8") as log:
            log.write(
                json.dumps(
                    {
                        "charge": order,
                        "amount_cents": amount_cents,
                        "pid": os.getpid(),
                        "lease_epoch": call.lease_epoch,
                    }
                )
                + "\n"
            )
            log.flush()
            os.fsync(log.fileno())
        if stall_after_request:
            # The processor has the request; its answer never arrives here, because
            # the demo kills this process now (see `_first_process`).
            (workdir / "charge-sent").write_text(str(os.getpid()))
            _stall_until_orphaned()
        return {"charged": order, "amount_cents": amount_cents}

    return [look_up_order, charge_card]


_PARENT = "AGENTRT_DEMO_PARENT"


def _orphaned() -> bool:
    """The demo that started this worker is gone (its pid is in the worker's environment:
    a parent that died before the worker started is noticed too)."""
    parent = os.environ.get(_PARENT, "")
    return parent.isdigit() and os.getppid() != int(parent)


def _stall_until_orphaned() -> None:
    """Wait to be killed; a demo that died first (SIGKILL, Ctrl-C, a closed terminal)
    cannot kill this worker, so it ends itself, as abruptly as the kill would have."""
    deadline = time.monotonic() + 600
    while not _orphaned() and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(1)  # no cleanup: the record stays as a dead process leaves it


class _Stop(Exception):
    """The demo stops here: one sentence to stderr, and the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def make_policy() -> SideEffectPolicy:
    allow = PolicyDecision.allow()

    def charges_up_to_100_dollars(request: Any) -> PolicyDecision:
        if int(request.args.get("amount_cents", 0)) <= 10_000:
            return allow
        return PolicyDecision.require_approval(
            "large_charge", "charges over $100 need a person", request.args, request.args
        )

    return SideEffectPolicy(
        {SideEffect.READ_ONLY: allow, SideEffect.REMOTE_MUTATION: charges_up_to_100_dollars},
        policy_id="demo-shop/1",
    )


SCRIPT = [
    Decision.tool_call("look_up_order", {"order": ORDER}, reason="what do we charge?"),
    Decision.tool_call(
        "charge_card", {"order": ORDER, "amount_cents": AMOUNT_CENTS}, reason="take payment"
    ),
    Decision.complete({"order": ORDER, "paid": True}),
]


def make_driver(store: Store, workdir: Path, *, stall: bool, name: str) -> Driver:
    return Driver(
        store=store,
        agent=ScriptedAgent(SCRIPT),
        policy=make_policy(),
        tools=make_tools(workdir, stall_after_request=stall),
        lease_owner=name,
        lease_ttl=LEASE,
    )


def _child(db: Path) -> int:
    """The first process: it will be killed in the middle of the charge."""
    store = open_store(db)
    make_driver(store, db.parent, stall=True, name="shop-worker").start_sync(
        f"take payment for order {ORDER}"
    )
    return 1  # not reached: the parent kills this process mid-charge


def _q(path: Path) -> str:
    """A path inside a command the reader is told to run: quoted for a POSIX shell."""
    return shlex.quote(str(path))


def say(text: str = "") -> None:
    print(text, flush=True)


def _first_process(db: Path) -> int:
    """Start the worker, wait until its charge request is out, then SIGKILL it."""
    marker = db.parent / "charge-sent"
    worker = subprocess.Popen(
        [sys.executable, "-m", "agentrt._demo", "--child", str(db)],
        stdout=subprocess.DEVNULL,
        env={**os.environ, _PARENT: str(os.getpid())},
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            if worker.poll() is not None:
                raise _Stop(
                    f"the worker process ended (exit status {worker.returncode})"
                    " before it charged the card"
                )
            if time.monotonic() > deadline:
                raise _Stop("the worker process did not charge the card within 60 seconds")
            time.sleep(0.02)
        say(f"  worker pid {worker.pid} sent the charge to the card processor;")
        say("  before its answer is recorded, the process is killed with SIGKILL (as the")
        say("  kernel's OOM killer, a deploy or a power cut would): no cleanup runs.")
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    finally:
        # Ctrl-C, a reader gone (`| head`), any error: the worker never outlives the demo.
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    say(f"  worker exit status: {worker.returncode} (killed by signal {-worker.returncode})")
    return worker.pid


def _print_trail(store: Store, run_id: str) -> None:
    steps = {s.id: s.index for s in store.list_steps(run_id)}
    for event in store.list_events(run_id=run_id, limit=1000):
        step = f"step {steps[event.step_id]}" if event.step_id in steps else ""
        payload = json.dumps(event.payload, sort_keys=True, ensure_ascii=False)
        if len(payload) > 72:
            payload = payload[:69] + "..."
        say(f"  {event.seq:>3}  {event.type:<19} {step:<6} {payload}")


def _show_approval(store: Store, run_id: str, db: Path) -> Any:
    (approval,) = store.pending_approvals(run_id)
    for line in approval_lines(
        approval, "interrupted while executing; outcome unknown", verb="approve", full=False
    ):
        say(line)
    say()
    say("  An operator approves it, bound to the hash shown above, with:")
    say(f"    agentrt --db {_q(db)} approve {run_id} --approval {approval.id}")
    say("  (add --full to see every field exactly as it is hashed first)")
    return approval


def run(argv: list[str]) -> int:
    """The `agentrt demo` command; returns its exit code."""
    try:
        return _run(argv)
    except BrokenPipeError:
        # The reader went away (`agentrt demo | head`): quietly, and status 1, as every
        # command of the CLI (decision 0196): its reader did not see what it printed.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (_Stop, AgentrtError) as e:
        print(f"agentrt demo: {e}", file=sys.stderr, flush=True)
        return e.code if isinstance(e, _Stop) else 1


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="agentrt demo",
        description="A run killed mid-charge by SIGKILL; a person decides what happens next."
        " The demo makes its own database in --dir (--db and $AGENTRT_DB are not read).",
    )
    parser.add_argument(
        "--dir", type=Path, help="where to put the database (default: a new temp dir)"
    )
    parser.add_argument(
        "--stop-at-approval",
        action="store_true",
        help="leave the run waiting for you to approve it with the printed command",
    )
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="after approving a run left by --stop-at-approval, resume it",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    # Read only to refuse it: the demo's database is its own, in --dir.
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.db is not None:
        parser.error(DEMO_MAKES_ITS_OWN_DATABASE)
    if args.child:
        return _child(args.child)
    if args.resume:
        return _interruptible(args.resume, "", lambda: _resume(args.resume))

    workdir = args.dir or Path(tempfile.mkdtemp(prefix="agentrt-demo-"))
    if workdir.exists() and not workdir.is_dir():
        parser.error(f"--dir {workdir}: it exists and is not a directory")
    try:
        # Owner-only, whatever the umask (002 is a common default): the store refuses a
        # database in a directory others can write, and the worker would fail on it.
        workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise _Stop(f"cannot create --dir {workdir}: {e.strerror}") from None
    db = workdir / "demo.db"
    if db.exists() or _processor_log(workdir).exists():
        parser.error(f"{workdir} holds a demo already; give another --dir")
    # The database is created here, so a directory the store refuses is one sentence before
    # any worker starts; the processor's log, created exclusively, claims the directory
    # against a second demo started on it at the same moment.
    open_store(db).close()
    try:
        os.close(os.open(_processor_log(workdir), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        parser.error(f"{workdir} holds a demo already; give another --dir")
    return _interruptible(
        workdir, "the worker was stopped, ", lambda: _story(db, workdir, args.stop_at_approval)
    )


def _interruptible(workdir: Path, stopped: str, body: Callable[[], int]) -> int:
    """Run `body`; Ctrl-C is one sentence saying where what it left is, not a traceback."""
    try:
        return body()
    except KeyboardInterrupt:
        raise _Stop(f"interrupted; {stopped}what it left is in {workdir}") from None


def _story(db: Path, workdir: Path, stop_at_approval: bool) -> int:
    say(f"1. A shop's agent takes payment for order {ORDER} (${AMOUNT_CENTS / 100:.2f}).")
    _first_process(db)

    say()
    say("2. The program starts again and asks the runtime what it left behind:")
    say("   driver.recover_sync() resumes every run this program can resume.")
    store = open_store(db)
    (left,) = store.list_runs(status=RunStatus.RUNNING)
    steps = store.list_steps(left.id)
    say(
        f"  run {left.id}: {left.status}, step {steps[-1].index} '{steps[-1].status}'"
        f" (charge_card), lease held by {store.lease(left.id).owner}"
    )
    driver = make_driver(store, workdir, stall=False, name="shop-worker")
    (found,) = driver.recover_sync()
    # Where /proc cannot prove the old process gone, its lease is waited out.
    while found.action == RecoverAction.SKIPPED:  # pragma: no cover
        say(f"  {found.why}; waiting it out...")
        time.sleep(1)
        (found,) = driver.recover_sync()
    if found.run is None:
        raise _Stop(f"recovery of run {found.run_id} failed: {found.why}")
    run = found.run
    say(f"  recover: run {found.run_id} {found.action}: {found.why}")
    say("  the charge may or may not have gone through: the record cannot say more.")
    say(f"  so the runtime does not charge again on its own. The run is {run.status}:")
    say()
    approval = _show_approval(store, run.id, db)

    if stop_at_approval:
        say()
        say("Stopped here, as asked. The run waits in the database until a person decides.")
        say("Or decide in a browser (pip install 'agentrt[console]'):")
        say(f"  agentrt console --db {_q(db)}")
        say("After approving, finish the story with:")
        say(f"  agentrt demo --resume {_q(workdir)}")
        return 0

    say()
    say("3. The operator checks with the card processor, decides to charge again, and")
    say("   approves; the program resumes the run.")
    approve(
        store,
        run.id,
        approval.id,
        by="demo-operator",
        note="processor shows no capture",
        shown_hash=approval.hash,
    )
    return _finish(store, driver.resume_sync(run.id), db)


def _finish(store: Store, run: Run, db: Path) -> int:
    """Show what became of the resumed run, leave the database."""
    say(f"  run {run.id}: {run.status} ({run.reason}), result {json.dumps(run.result)}")
    charges = _processor_log(db.parent).read_text(encoding="utf-8").splitlines()
    say(
        f"  the card processor received {len(charges)} charge requests:"
        " the lost one, and the one a person approved"
    )
    say()
    say("4. The audit trail, every step (each line committed and fsynced with its change):")
    _print_trail(store, run.id)
    report = store.verify_events()
    say(f"  event chain: {report.checked} events, {'intact' if report.intact else 'BROKEN'}")
    say()
    say(f"The database is left at {db}. Look at it with:")
    say(f"  agentrt --db {_q(db)} show {run.id}")
    say(f"  agentrt --db {_q(db)} events {run.id}")
    say(f"  agentrt --db {_q(db)} verify")
    store.close()
    return 0 if run.status == RunStatus.COMPLETED else 1


def _resume(workdir: Path) -> int:
    """`--resume DIR`: after a person approved with the command, finish the story."""
    if workdir.is_file():  # the printed commands name demo.db; the directory is what is asked
        raise _Stop(
            "--resume takes the demo's directory, not its database:"
            f" agentrt demo --resume {_q(workdir.parent)}"
        )
    db = workdir / "demo.db"
    if not db.is_file():  # never created here: --resume only finishes a demo left waiting
        raise _Stop(
            f"{workdir} holds no demo (no demo.db); start one with:"
            f" agentrt demo --dir {_q(workdir)} --stop-at-approval"
        )
    store = open_existing(db)
    waiting = store.list_runs(status=RunStatus.WAITING_FOR_APPROVAL)
    if not waiting:
        say(f"no run of {db} is waiting for an approval")
        return 1
    run = waiting[0]
    pending = store.pending_approvals(run.id)
    if pending:
        say(f"run {run.id} still waits for approval {pending[0].id}; approve it first:")
        say(f"  agentrt --db {_q(db)} approve {run.id} --approval {pending[0].id}")
        return 1
    say("3. A person approved the charge; the program starts again and recovers:")
    driver = make_driver(store, workdir, stall=False, name="shop-worker")
    (found,) = driver.recover_sync()
    say(f"  recover: run {found.run_id} {found.action}: {found.why}")
    if found.run is None:
        say(f"  the run was not resumed: {found.why}")
        return 1
    return _finish(store, found.run, db)


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
