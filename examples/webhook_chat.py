"""Approving from a chat message, through the signed approval webhook.

Everything runs on loopback, in this one script:

1. the program starts a run whose agent wants to push a branch; the default
   policy requires a person's approval, so the run pauses (rows in a SQLite file);
2. the approval webhook (`agentrt.approver.webhook_app` over `Local.open(db)`)
   is served by uvicorn on 127.0.0.1, with a secret generated at start;
3. a chat bot, using the signing `WebhookClient`, reads the pending approval and
   posts its link and its plain rendering to a chat endpoint (a fake chat
   server on 127.0.0.1 that keeps the messages, like an incoming-webhook URL);
4. a person in the chat approves: the bot sends the decision bound to the hash
   it posted (a stale hash would be refused with 409 approval_changed);
5. the program resumes the run: the push executes exactly once, as approved.

    pip install -e '.[webhook]' uvicorn      # in a clone of agentrt
    python examples/webhook_chat.py [--db PATH]
"""

from __future__ import annotations

import argparse
import json
import secrets
import tempfile
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import uvicorn

import agentrt
from agentrt import Decision, SideEffect
from agentrt.approver import Local, WebhookClient, WebhookError, webhook_app
from agentrt.scripted import ScriptedAgent

# --- a fake chat service on loopback --------------------------------------------------------------


class Chat:
    """A chat endpoint that accepts `{"text": ...}` posts, like an incoming-webhook URL."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        chat = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = min(int(self.headers.get("Content-Length", "0")), 64 * 1024)
                message = json.loads(self.rfile.read(length))
                chat.messages.append(str(message["text"]))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/post"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- the webhook, served by uvicorn ---------------------------------------------------------------


class Served:
    """An ASGI app served by uvicorn on 127.0.0.1 in a thread of this process."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, proxy_headers=False, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the webhook server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


# --- the program that owns the run ----------------------------------------------------------------


def make_driver(store: agentrt.Store, pushed: list[str]) -> agentrt.Driver:
    @agentrt.tool(side_effect=SideEffect.REMOTE_MUTATION, timeout=timedelta(seconds=5))
    def push_branch(branch: str) -> dict[str, Any]:
        """Push a branch to the remote."""
        pushed.append(branch)
        return {"pushed": branch}

    agent = ScriptedAgent(
        [
            Decision.tool_call("push_branch", {"branch": "feature/login"}),
            Decision.complete({"pushed": "feature/login"}),
        ]
    )
    return agentrt.Driver(
        store=store, agent=agent, policy=agentrt.default_policy(), tools=[push_branch]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", help="the database file (default: a new temporary one)")
    args = parser.parse_args()
    if args.db is not None and str(args.db).startswith(("postgresql:", "postgres:")):
        # Not printed back: a URL may hold a password.
        parser.exit(2, f"{parser.prog}: --db takes a SQLite file's path here, not a URL\n")
    if args.db is not None and not Path(args.db).parent.is_dir():  # one sentence, no traceback
        parser.exit(
            2,
            f"{parser.prog}: --db {args.db}: {Path(args.db).parent} is not an existing directory\n",
        )
    db = Path(args.db) if args.db else Path(tempfile.mkdtemp()) / "runs.db"

    try:
        store = agentrt.open_store(db)
    except agentrt.StoreError as exc:  # a file that is not a database: one sentence
        parser.exit(2, f"{parser.prog}: --db {args.db}: {exc}\n")
    pushed: list[str] = []
    driver = make_driver(store, pushed)
    run = driver.start_sync("push the login branch")
    print(f"[program] run {run.id} stopped: {run.status}")

    secret = secrets.token_urlsafe(32)  # shared by the webhook and the bot, never printed
    chat = Chat()
    local = Local.open(db)  # the webhook's own connection to the file
    hook = Served(webhook_app(local, secret=secret))
    bot = WebhookClient(hook.url, secret)
    try:
        # The bot: read what waits, post it to the chat with its link.
        (item,) = bot.pending(run.id)
        link = bot.approval_url(run.id, item["approval_id"])
        text = bot.show_text(run.id, item["approval_id"])
        httpx.post(chat.url, json={"text": f"Approval needed: {link}\n{text}"})
        print(f"[chat] {chat.messages[0].splitlines()[0]}")
        print(f"[chat] ... {chat.messages[0].splitlines()[-1]}")

        # Someone tries with a hash they were never shown: refused, nothing decided.
        try:
            bot.approve(run.id, item["approval_id"], "0" * 64, "mallory@chat")
        except WebhookError as exc:
            print(f"[bot] a decision on another hash: {exc.status} {exc.code}")

        # A person clicks approve: the bot sends the decision bound to the posted hash.
        done = bot.approve(run.id, item["approval_id"], item["hash"], "alice@chat", "ship it")
        print(f"[bot] approved by {done['approval']['decided_by']}: {done['message']}")
    finally:
        bot.close()
        hook.close()
        local.close()
        chat.close()

    # The program resumes its run: the approved request executes once.
    run = driver.resume_sync(run.id)
    print(f"[program] resumed: {run.status} {run.reason}; pushed {pushed}")
    report = store.verify_events()
    print(f"event chain: {report.checked} events, {'intact' if report.intact else 'BROKEN'}")
    store.close()


if __name__ == "__main__":
    main()
