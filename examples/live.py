"""A real run against a local model server, pausing for a person before its first change.

The agent is `ModelAgent`: the runtime renders the run into a request, sends it
through its accounting caller (every attempt recorded and charged), and turns
the reply into a decision. The model works in a scratch folder with four tools:
it may list and read files freely; writing a file is a change, so the policy
pauses the run for your approval first (you are shown the exact request);
`finish` ends the run. The scratch folder is `work/` beside the database.

Where the model is: `AGENTRT_LIVE_URL` (an Ollama server, e.g.
http://127.0.0.1:11434, or an OpenAI-compatible one, e.g.
http://127.0.0.1:8080/v1). Unset, the local defaults of both are tried. The
model is `AGENTRT_LIVE_MODEL` or `--model`, else the first the server lists;
`AGENTRT_LIVE_API_KEY` is sent to an OpenAI-compatible server that wants one.
Nothing is ever fetched from the internet: when no server answers, the script
says what to start and exits 0.

    python examples/live.py [--db PATH] [--model NAME] [--approve]
    python examples/live.py --db PATH --resume RUN_ID     # after approving elsewhere
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

import agentrt
from agentrt import Model, ModelConfig, PolicyDecision, Price, SideEffect, ToolRequest
from agentrt.lowlevel import refuse_other_url
from agentrt.model_agent import ModelAgent
from agentrt.render import RenderOptions

OLLAMA_DEFAULT = "http://127.0.0.1:11434"
OPENAI_DEFAULT = "http://127.0.0.1:8080/v1"
PROBE_TIMEOUT = 2.0
CALL_TIMEOUT = timedelta(minutes=3)

GOAL = (
    "In the working folder, read notes/inbox.txt and write notes/checklist.md: its items "
    "as a Markdown checklist ('- [ ] item', one per line). Then call finish with a "
    "one-line summary."
)

INBOX = "buy milk\nreply to Ana about the offsite\nrenew the TLS certificate\n"

NOTHING_ANSWERED = """\
No model server answered at {tried}.

Start one on this machine, then run this script again:
  - Ollama:  ollama serve   (and, once, `ollama pull` a model that can call tools,
             e.g. qwen2.5:7b or llama3.1:8b)
  - an OpenAI-compatible server, e.g. llama.cpp:
             llama-server -m MODEL.gguf --jinja --port 8080
Or point AGENTRT_LIVE_URL at your server (http://HOST:11434 for Ollama,
http://HOST:PORT/v1 for an OpenAI-compatible one), and pick its model with
AGENTRT_LIVE_MODEL or --model.
This script never downloads anything itself."""


@dataclass(frozen=True)
class Server:
    kind: str  # "ollama" or "openai"
    url: str
    models: tuple[str, ...]


# --------------------------------------------------------------------------- finding a server


def probe(kind: str, url: str) -> Server | None:
    """The server at `url` if it answers as `kind` does, listing its models."""
    path = "/api/tags" if kind == "ollama" else "/models"
    try:
        # No redirects: a probe goes where it was told, nowhere else.
        with httpx.Client(timeout=PROBE_TIMEOUT, follow_redirects=False) as client:
            response = client.get(url.rstrip("/") + path)
        if response.status_code != 200:
            return None
        body = response.json()
    except (httpx.HTTPError, OSError, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    if kind == "ollama":
        items, field = body.get("models"), "name"
    else:
        items, field = body.get("data"), "id"
    if not isinstance(items, list):
        return None
    names = tuple(str(m[field]) for m in items if isinstance(m, dict) and field in m)
    return Server(kind, url.rstrip("/"), names)


def find_server() -> tuple[Server | None, list[str]]:
    """The first server that answers, and every address tried."""
    configured = os.environ.get("AGENTRT_LIVE_URL", "").strip()
    if configured:
        candidates = [("ollama", configured), ("openai", configured)]
    else:
        candidates = [("ollama", OLLAMA_DEFAULT), ("openai", OPENAI_DEFAULT)]
    tried: list[str] = []
    for kind, url in candidates:
        if url not in tried:
            tried.append(url)
        server = probe(kind, url)
        if server is not None:
            return server, tried
    return None, tried


def make_model(server: Server, name: str) -> Model:
    """The provider adapter for `server` (imported only now: the core never imports one)."""
    # A local model may take a while; the accounting caller's call_timeout matches.
    timeout = CALL_TIMEOUT
    if server.kind == "ollama":
        from agentrt.providers.ollama import OllamaModel

        return OllamaModel(name, host=server.url, timeout=timeout)
    from agentrt.providers.openai_compat import OpenAICompatModel

    key = os.environ.get("AGENTRT_LIVE_API_KEY") or None
    return OpenAICompatModel(name, base_url=server.url, api_key=key, timeout=timeout)


# --------------------------------------------------------------------------- the run


def make_tools(workdir: Path) -> list[agentrt.Tool]:
    def inside(path: str) -> Path:
        # The model names paths; none may leave the working folder.
        target = (workdir / path).resolve()
        if not target.is_relative_to(workdir.resolve()):
            raise ValueError(f"{path!r} is outside the working folder")
        return target

    @agentrt.tool(side_effect=SideEffect.READ_ONLY, timeout=timedelta(seconds=5))
    def list_files() -> list[str]:
        """List every file in the working folder, as paths relative to it."""
        return sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if p.is_file())

    @agentrt.tool(side_effect=SideEffect.READ_ONLY, timeout=timedelta(seconds=5))
    def read_file(path: str) -> str:
        """Read a text file of the working folder."""
        return inside(path).read_text(encoding="utf-8")

    @agentrt.tool(side_effect=SideEffect.LOCAL_MUTATION, timeout=timedelta(seconds=5))
    def write_file(path: str, content: str) -> dict[str, Any]:
        """Create or replace a text file of the working folder with `content`."""
        target = inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return {"written": path, "characters": len(content)}

    @agentrt.tool(side_effect=SideEffect.READ_ONLY, timeout=timedelta(seconds=5), terminal=True)
    def finish(summary: str) -> dict[str, str]:
        """Finish the goal, saying in one line what was done."""
        return {"summary": summary}

    return [list_files, read_file, write_file, finish]


def ask_first(request: ToolRequest) -> PolicyDecision:
    shown = {"tool": request.spec.name, "args": request.args or {}}
    return agentrt.need_approval(
        "change", f"{request.spec.name} changes files; a person approves it first", shown, shown
    )


POLICY = agentrt.SideEffectPolicy(
    {
        SideEffect.READ_ONLY: PolicyDecision.allow(),
        SideEffect.LOCAL_MUTATION: ask_first,
        SideEffect.REMOTE_MUTATION: ask_first,
        SideEffect.DESTRUCTIVE: PolicyDecision.deny("this example never deletes"),
    },
    policy_id="examples/live.py/1",
)


def make_driver(store: agentrt.Store, workdir: Path, model: Model) -> agentrt.Driver:
    config = ModelConfig(
        model=model,
        prices=Price.free(),  # a local model: recorded as free, not as unpriced
        call_timeout=CALL_TIMEOUT,
        max_retries=2,
    )
    return agentrt.Driver(
        store=store,
        agent=ModelAgent(RenderOptions(max_output_tokens=1024)),
        policy=POLICY,
        tools=make_tools(workdir),
        model=config,
        lease_owner="examples/live.py",
    )


LIMITS = agentrt.Limits(
    max_steps=12,
    max_model_calls=24,
    max_output_tokens_per_call=1024,
    max_elapsed_time=timedelta(minutes=20),
)


def decide_pending(
    store: agentrt.Store, db: Path, driver: agentrt.Driver, run: agentrt.Run, auto: bool
) -> bool:
    """Show the pending request and take the operator's answer; False: left waiting."""
    (approval,) = store.pending_approvals(run.id)
    print(f"\nThe run waits for your approval ({approval.kind}): {approval.capability}")
    print(json.dumps(approval.presentation, indent=2, ensure_ascii=False))
    if auto:
        answer = "y"
    elif sys.stdin.isatty():
        answer = input("Approve this exact request? [y/N] ").strip().lower()
    else:
        print(
            f"\nNo terminal to ask on. Approve with `agentrt --db {shlex.quote(str(db))} "
            f"approve {run.id}` and continue with `python {shlex.quote(sys.argv[0])} "
            f"--db {shlex.quote(str(db))} --resume {run.id}`,"
            " or run this script with --approve."
        )
        return False
    if answer in ("y", "yes"):
        driver.approve(run.id, approval.id, by=os.environ.get("USER", "operator"))
    else:
        driver.reject(run.id, approval.id, by=os.environ.get("USER", "operator"), note="declined")
    return True


def report(store: agentrt.Store, run: agentrt.Run, workdir: Path) -> None:
    print(f"\nrun {run.id}: {run.status} ({run.reason}) {run.reason_detail}")
    for step in store.list_steps(run.id):
        decision = step.decision
        what = (
            f"{decision.tool} {json.dumps(decision.args, ensure_ascii=False)[:80]}"
            if decision and decision.kind == "tool_call"
            else (decision.kind if decision else "-")
        )
        outcome = (
            f"{step.observation.kind}: {step.observation.summary[:60]}" if step.observation else ""
        )
        print(f"  step {step.index:>2}  {what:<60} {outcome}")
    calls = store.list_model_calls(run.id)
    print(
        f"model calls: {len(calls)}, tokens in {run.input_tokens} (cached "
        f"{run.cached_input_tokens}), out {run.output_tokens}"
    )
    if run.result is not None:
        print(f"result: {json.dumps(run.result, ensure_ascii=False)}")
    checklist = workdir / "notes" / "checklist.md"
    if checklist.exists():
        print(f"\n{checklist}:\n{checklist.read_text(encoding='utf-8')}")
    verified = store.verify_events()
    print(f"event chain: {verified.checked} events, {'intact' if verified.intact else 'BROKEN'}")


def sqlite_path(text: str) -> Path:
    """`--db` as a SQLite file's path; a URL of another scheme or libpq's keyword string is
    refused first, its password hidden (as a `Path`, a URL's `//` folds and no open sees it)."""
    try:
        refuse_other_url(text)
    except agentrt.StoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return Path(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", type=sqlite_path, help="database file (default: a new temp dir)")
    parser.add_argument(
        "--model", help="the model to use (default: AGENTRT_LIVE_MODEL or the first listed)"
    )
    parser.add_argument(
        "--approve", action="store_true", help="approve every change without asking"
    )
    parser.add_argument("--resume", metavar="RUN_ID", help="continue a run approved elsewhere")
    args = parser.parse_args(argv)
    if args.db is not None and str(args.db).startswith(("postgresql:", "postgres:")):
        # Not printed back: a URL may hold a password.
        parser.exit(2, f"{parser.prog}: --db takes a SQLite file's path here, not a URL\n")
    if args.db is not None and not Path(args.db).parent.is_dir():  # one sentence, no traceback
        parser.exit(
            2,
            f"{parser.prog}: --db {args.db}: {Path(args.db).parent} is not an existing directory\n",
        )

    server, tried = find_server()
    if server is None:
        print(NOTHING_ANSWERED.format(tried=" and ".join(tried)))
        return 0
    name = args.model or os.environ.get("AGENTRT_LIVE_MODEL", "").strip()
    if not name:
        if not server.models:
            print(
                f"The {server.kind} server at {server.url} answered but lists no model. Add one "
                "(for Ollama: `ollama pull qwen2.5:7b`), or name one with --model."
            )
            return 0
        name = server.models[0]
    try:
        model = make_model(server, name)
    except ImportError as exc:
        print(f"The {server.kind} adapter is not available: {exc}", file=sys.stderr)
        return 2

    db = args.db or Path(tempfile.mkdtemp(prefix="agentrt-live-")) / "runs.db"
    try:
        store = agentrt.open_store(db)
    except agentrt.StoreError as exc:  # a file that is not a database: one sentence
        parser.exit(2, f"{parser.prog}: --db {args.db}: {exc}\n")
    print(f"Using {model.name} at {server.url}")
    workdir = db.parent / "work"
    (workdir / "notes").mkdir(parents=True, exist_ok=True)
    inbox = workdir / "notes" / "inbox.txt"
    if not inbox.exists():
        inbox.write_text(INBOX, encoding="utf-8")

    try:
        driver = make_driver(store, workdir, model)
        if args.resume:
            run = driver.resume_sync(args.resume)
        else:
            print(f"Goal: {GOAL}\nWorking folder: {workdir}")
            run = driver.start_sync(GOAL, limits=LIMITS)
        while run.status == agentrt.RunStatus.WAITING_FOR_APPROVAL:
            if not decide_pending(store, db, driver, run, args.approve):
                return 0
            run = store.get_run(run.id)
            if run.status == agentrt.RunStatus.WAITING_FOR_APPROVAL:
                run = driver.resume_sync(run.id)
        report(store, run, workdir)
    finally:
        store.close()
    # Declining a change is an answer, not a failure of the example.
    done = run.status == agentrt.RunStatus.COMPLETED or run.reason == "approval_rejected"
    return 0 if done else 1


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()  # here, not at exit: a reader gone away is met below
    except BrokenPipeError:  # `| head -1`: end quietly, with status 1 as Python's docs do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
