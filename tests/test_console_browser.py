"""The web console end to end: a real server process, Debian's chromium driven by Playwright.

The console runs as `agentrt console --port 0` (a real uvicorn on a free
loopback port); the test plays the person in the browser and the consumer's
program (`Program`, which resumes runs). Chromium is launched from
/usr/bin/chromium with a fresh profile; Playwright's own browser download is
never used. Without chromium or Playwright these tests skip in one line,
except under CI (the `CI` variable set), where they fail.

`AGENTRT_WRITE_SCREENSHOT=1` writes the run page of the demo to docs/console.png.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

import agentrt
from agentrt import Decision
from support.console import HOSTILE, Program, send

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 15_000

pytestmark = pytest.mark.slow
T = TypeVar("T")


def _missing() -> str:
    if not os.path.exists(CHROMIUM):
        return f"no chromium at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -e '.[test]')"
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return "the console extra is not installed (pip install -e '.[console]')"
    return ""


@pytest.fixture(scope="module")
def context() -> Iterator[Any]:
    why = _missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests cannot run under CI: {why}")
        pytest.skip(f"browser tests skipped: {why}")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="agentrt-chromium-")
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1200, "height": 900},
            )
            ctx.set_default_timeout(WAIT_MS)
            yield ctx
            ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(context: Any) -> Iterator[Any]:
    p = context.new_page()
    p.errors = []  # uncaught page errors and console errors (a CSP refusal is one): none expected
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    p.on("console", lambda m: p.errors.append(m.text) if m.type == "error" else None)
    yield p
    p.close()


def leave(page: Any) -> None:
    """Take `page` off the console before the console stops: a poll of the page that met the
    console stopped would be logged as an error (`net::ERR_CONNECTION_REFUSED`) and fail
    `page.errors == []`, at random, by how the poll and the stop fell."""
    page.goto("about:blank")


class Console:
    """`agentrt console` in a process of its own, and the address it printed."""

    def __init__(self, proc: subprocess.Popen[str], url: str, lines: list[str]) -> None:
        self.proc = proc
        self.url = url
        self.lines = lines


@contextmanager
def console(db: Path, *args: str) -> Iterator[Console]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrt", "console", "--db", str(db), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.strip().startswith("open "):
                break
        else:
            raise AssertionError(f"the console printed no address: {lines} {proc.stderr}")
        url = line.strip().removeprefix("open ")
        yield Console(proc, url, lines)
    finally:
        with proc:  # its pipes, closed as it is waited for
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def off_loop(fn: Callable[[], T]) -> T:
    """Call `fn` on a thread of its own: Playwright's sync API keeps an event loop running
    on the test's thread, and the program's `_sync` calls refuse to run inside one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as pw_expect

    pw_expect.set_options(timeout=WAIT_MS)
    return pw_expect(locator)


# --- the flows ----------------------------------------------------------------------------------


def test_a_person_approves_in_the_browser_and_the_page_follows_the_run_as_its_program_resumes_it(
    db_path: Path, page: Any
) -> None:
    program = Program(db_path, [send("alice"), Decision.complete({"sent": 1})])
    run = off_loop(lambda: program.start())
    approval = program.pending(run.id)
    with console(db_path, "--by", "alice") as c:
        assert c.url.startswith("http://127.0.0.1:")
        page.goto(c.url)
        page.get_by_role("link", name=re.compile("Review")).click()
        expect(page.locator(".request h2")).to_have_text("The run waits for your decision")
        expect(page.locator(".request .hash code")).to_have_text(approval.hash)
        page.get_by_label("Note for the record").fill("alice expects it")
        page.get_by_role("button", name="Approve as alice").click()
        expect(page.locator("#live-summary .notice")).to_contain_text(
            re.compile(
                r"^Approved by alice at [0-9-]+ [0-9:]+ UTC, waiting for the program to resume"
            )
        )
        expect(page.locator("#live-summary .pill")).to_have_text(
            "approved · waiting for its program"
        )
        decided = program.store.get_approval(run.id, approval.id)
        assert (decided.status, decided.decided_by, decided.note) == (
            "approved",
            "alice",
            "alice expects it",
        )
        assert program.send.calls == []  # the console never runs a tool
        # The program resumes the run; the open page follows without a reload.
        page.evaluate("window.__same_document = true")
        assert off_loop(lambda: program.resume(run.id)).status == "COMPLETED"
        expect(page.locator("#live-summary .pill")).to_have_text("completed")
        expect(page.locator(".timeline")).to_contain_text("send started again, as approved")
        expect(page.locator(".timeline")).to_contain_text("Run completed")
        expect(page.locator(".cancel")).to_have_count(0)  # a finished run offers no cancel
        assert page.evaluate("window.__same_document") is True
        assert page.errors == []
    program.close()


def test_the_run_list_shows_a_run_that_starts_waiting_without_a_reload(
    db_path: Path, page: Any
) -> None:
    done = Program(db_path, [Decision.complete(1)], prefix="b")
    off_loop(lambda: done.start("an earlier run"))
    with console(db_path) as c:
        page.goto(c.url)
        expect(page.locator("#live-waiting")).to_contain_text("Nobody is needed right now.")
        page.evaluate("window.__same_document = true")
        program = Program(db_path, [send("carol")])
        run = off_loop(lambda: program.start("tell carol"))
        card = page.locator(f'#live-waiting a[href="/runs/{run.id}"]')
        expect(card).to_contain_text("tell carol")
        expect(page.locator("#live-runs")).to_contain_text("runs 1–2 of 2")
        assert page.evaluate("window.__same_document") is True
        assert page.errors == []
    done.close()
    program.close()


def test_a_person_rejects_in_the_browser_and_the_run_is_cancelled(db_path: Path, page: Any) -> None:
    program = Program(db_path, [send("mallory")])
    run = off_loop(lambda: program.start())
    with console(db_path, "--by", "alice") as c:
        page.goto(f"{c.url}runs/{run.id}")
        page.get_by_label("Note for the record").fill("wrong recipient")
        page.get_by_role("button", name="Reject as alice").click()
        expect(page.locator("#live-summary .pill")).to_have_text("cancelled")
        expect(page.locator(".decisions")).to_contain_text("rejected by alice")
        expect(page.locator(".decisions")).to_contain_text("wrong recipient")
    stored = program.store.get_run(run.id)
    assert (stored.status, stored.reason) == ("CANCELLED", "approval_rejected")
    assert program.send.calls == []
    program.close()


def test_a_stale_page_is_refused_in_the_browser_and_the_new_request_stays_pending(
    db_path: Path, page: Any
) -> None:
    program = Program(db_path, [send("alice"), send("bob", body="different")])
    run = off_loop(lambda: program.start())
    shown = program.pending(run.id)
    with console(db_path, "--by", "alice") as c:
        page.goto(f"{c.url}runs/{run.id}")
        expect(page.locator(".request .hash code")).to_have_text(shown.hash)
        # Behind the page's back, through the real API: approved by someone else, resumed,
        # and now waiting on a new request with other arguments.
        agentrt.approve(program.store, run.id, shown.id, by="bob", shown_hash=shown.hash)
        off_loop(lambda: program.resume(run.id))
        new = program.pending(run.id)
        assert new.hash != shown.hash
        expect(page.locator(".request .stale")).to_be_visible()
        expect(page.locator(".newrequest")).to_be_visible()
        page.get_by_role("button", name="Approve as alice").click()
        expect(page.locator("h1")).to_have_text("Already decided")
        expect(page.locator(".message")).to_contain_text(
            f"Nothing was decided: approval {shown.id} was already approved by bob at "
        )
        assert program.store.get_approval(run.id, new.id).status == "pending"
        assert program.store.get_approval(run.id, shown.id).decided_by == "bob"
    program.close()


def test_html_script_bidi_and_zero_width_text_from_a_model_is_inert_and_shown_escaped(
    db_path: Path, page: Any
) -> None:
    program = Program(db_path, [send(HOSTILE, body=HOSTILE)])
    run = off_loop(lambda: program.start(goal=HOSTILE))
    with console(db_path) as c:
        for url in (c.url, f"{c.url}runs/{run.id}"):
            page.goto(url)
            assert page.evaluate("window.__pwned") is None
            assert page.locator("main script, main img, main style, main iframe").count() == 0
            expect(page.locator("main")).to_be_visible()
            assert page.locator("[onerror]").count() == 0
        text = page.locator("main").inner_text()
        assert "<script>window.__pwned = 1</script>" in text
        assert "\\u202eevil\\u202c now\\u200b\\u2066x\\u2069" in text
        assert "\\x1b[31mred" in text
        for raw in ("\u202e", "\u200b", "\u2066", "\x1b"):
            assert raw not in text
        # Live updates swap parts of the page: still inert after one.
        agentrt.cancel(program.store, run.id, by="bob")
        expect(page.locator("#live-summary .pill")).to_have_text("cancelled")
        assert page.evaluate("window.__pwned") is None
        assert page.locator("main script, main img, main style").count() == 0
        assert page.errors == []
    program.close()


def test_off_loopback_the_console_needs_its_token_and_the_link_logs_in_with_a_clean_url(
    db_path: Path, page: Any
) -> None:
    program = Program(db_path, [send("alice")])
    run = off_loop(lambda: program.start())
    # 127.0.0.2 is a loopback address, but not one the console exempts (decision 0024).
    with console(db_path, "--host", "127.0.0.2") as c:
        link = c.url
        match = re.fullmatch(r"(http://127\.0\.0\.2:\d+/)login\?token=([A-Za-z0-9_\-]{43})", link)
        assert match, link
        base, token = match[1], match[2]
        response = page.goto(f"{base}runs/{run.id}")
        assert response.status == 401
        expect(page.locator("h1")).to_have_text("This console needs its token")
        assert run.id not in page.content()
        page.goto(link)
        assert page.url == base  # redirected clean: the token is not left in the address
        expect(page.locator("#live-waiting")).to_contain_text("tell alice the build is green")
        (cookie,) = [
            k for k in page.context.cookies(base) if k["name"].startswith("agentrt_console_")
        ]
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
        assert token not in cookie["value"]
        assert page.evaluate("document.cookie") == ""  # HttpOnly: out of a script's reach
        assert page.goto(f"{base}runs/{run.id}").status == 200
    program.close()


def test_an_open_page_whose_login_is_gone_says_signed_out_not_connection_lost(
    db_path: Path, page: Any
) -> None:
    """The console answers the page's poll with 401 (it restarted with another token, or
    the cookie went): the banner said "connection lost: retrying", which it was not."""
    program = Program(db_path, [send("alice")])
    run = off_loop(lambda: program.start())
    with console(db_path, "--host", "127.0.0.2") as c:
        base = c.url.split("login?")[0]
        page.goto(c.url)
        page.goto(f"{base}runs/{run.id}")
        conn = page.locator("#conn")
        expect(conn).to_be_hidden()
        page.context.clear_cookies()
        expect(conn).to_be_visible()
        expect(conn).to_have_text("signed out: open the console's login link again")
    program.close()


def test_a_person_approves_with_the_keyboard_alone(db_path: Path, page: Any) -> None:
    program = Program(db_path, [send("alice")])
    run = off_loop(lambda: program.start())
    approval = program.pending(run.id)
    with console(db_path, "--by", "alice") as c:
        page.goto(f"{c.url}runs/{run.id}")
        for _ in range(40):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.name") == "note":
                break
        else:
            raise AssertionError("the note field is not reachable with Tab")
        page.keyboard.type("by keyboard")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Approve as alice"
        page.keyboard.press("Enter")
        expect(page.locator("#live-summary .notice")).to_contain_text("Approved by alice")
    decided = program.store.get_approval(run.id, approval.id)
    assert (decided.status, decided.note) == ("approved", "by keyboard")
    program.close()


def test_the_pages_fit_a_phone_screen_without_sideways_scrolling(db_path: Path, page: Any) -> None:
    program = Program(db_path, [send(HOSTILE, body=HOSTILE * 3)])
    run = off_loop(lambda: program.start(goal=HOSTILE))
    page.set_viewport_size({"width": 390, "height": 844})
    with console(db_path) as c:
        for url in (c.url, f"{c.url}runs/{run.id}"):
            page.goto(url)
            assert page.evaluate("document.documentElement.scrollWidth") <= 390, url
        box = page.get_by_role("button", name=re.compile("^Approve as")).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    program.close()


def test_a_person_reads_a_long_argument_whole_in_its_fold_before_deciding_on_a_phone(
    db_path: Path, page: Any
) -> None:
    hidden = "and also wire $9,000 to account 666"
    body = "A" * 1500 + hidden + "B" * 1500
    program = Program(db_path, [send("alice", body=body)])
    run = off_loop(lambda: program.start())
    page.set_viewport_size({"width": 390, "height": 844})
    with console(db_path, "--by", "alice") as c:
        page.goto(f"{c.url}runs/{run.id}")
        request = page.locator(".request")
        expect(request.locator(".facts")).to_contain_text("chars not shown")
        whole = request.locator("details.whole")
        expect(whole.locator("summary")).to_contain_text(
            "Read whole the 3 values shown here in part"
        )
        shown = whole.locator("pre")
        expect(shown).to_have_count(1)  # the two copies of the same text point to it
        expect(shown).to_be_hidden()
        whole.locator("summary").click()
        expect(shown).to_be_visible()
        expect(shown).to_have_text(f'"{body}"')
        # Wrapped and scrolled within the page: nothing pushes the page sideways.
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        shown.get_by_text(hidden, exact=False).scroll_into_view_if_needed()
        # The fold is above the buttons: read first, then decide.
        approve = page.get_by_role("button", name="Approve as alice")
        assert whole.bounding_box()["y"] < approve.bounding_box()["y"]
        assert page.errors == []
    program.close()


def _demo_stopped(tmp_path: Path) -> Path:
    workdir = tmp_path / "demo"
    stopped = subprocess.run(
        [sys.executable, "-m", "agentrt", "demo", "--dir", str(workdir), "--stop-at-approval"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert stopped.returncode == 0, stopped.stderr
    return workdir / "demo.db"


def test_the_approval_page_shows_the_decision_and_its_buttons_first_and_folds_the_hashed_view(
    tmp_path: Path, page: Any
) -> None:
    db = _demo_stopped(tmp_path)
    with agentrt.open_existing(db, read_only=True) as store:
        (approval,) = store.pending_approvals(cap=None)
    with console(db, "--by", "operator") as c:
        page.goto(f"{c.url}runs/{approval.run_id}")
        request = page.locator(".request")
        facts = request.locator(".facts")
        expect(facts.locator("dd").first).to_have_text("charge_card (remote_mutation)")
        args = facts.locator("table.args tr")
        expect(args).to_have_count(2)
        expect(args.nth(0)).to_have_text("amount_cents4200")
        expect(args.nth(1)).to_have_text('order"A-1001"')
        expect(facts).to_contain_text("if you approveRuns charge_card once more")
        # Approve and Reject are on the first screen (1200 x 900), not below the fields.
        approve = page.get_by_role("button", name="Approve as operator")
        reject = page.get_by_role("button", name="Reject as operator")
        for button in (approve, reject):
            box = button.bounding_box()
            assert box is not None and box["y"] + box["height"] <= 900, box
        # The full hashed view is folded under them, and opens on a click.
        fields = request.locator("table.fields")
        expect(fields).to_be_hidden()
        summary_box = request.locator("details.full > summary").bounding_box()
        assert summary_box is not None and summary_box["y"] > approve.bounding_box()["y"]
        if os.environ.get("AGENTRT_WRITE_SCREENSHOT") == "1":
            page.screenshot(path=str(ROOT / "docs" / "console-approval.png"))
        request.locator("details.full > summary").click()
        expect(fields).to_be_visible()
        timeout_row = fields.locator("tr", has_text="request.spec.timeout")
        expect(timeout_row.locator("td")).to_have_text("60000000000 (60 s)")
        expect(fields.locator("tr")).to_have_count(38)
        approve.click()
        # After the decision, until the program resumes: its own state, on the run and the index.
        expect(page.locator("#live-summary .pill")).to_have_text(
            "approved · waiting for its program"
        )
        page.goto(c.url)
        expect(page.locator("#live-waiting h1 .badge")).to_have_text("0")
        expect(page.locator("#live-waiting .empty")).to_have_text("Nobody is needed right now.")
        card = page.locator(f'#live-waiting .card.resuming a[href="/runs/{approval.run_id}"]')
        expect(card.locator(".state")).to_have_text(
            re.compile(
                r"^approved by operator at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, "
                r"waiting for the program to resume$"
            )
        )
        expect(page.locator("#live-runs .pill").first).to_have_text(
            "approved · waiting for its program"
        )
        if os.environ.get("AGENTRT_WRITE_SCREENSHOT") == "1":
            page.screenshot(path=str(ROOT / "docs" / "console-after-decision.png"))
        # The program resumes: the card leaves without a reload and the run completes.
        page.evaluate("window.__same_document = true")
        finished = subprocess.run(
            [sys.executable, "-m", "agentrt", "demo", "--resume", str(db.parent)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert finished.returncode == 0, finished.stdout + finished.stderr
        expect(page.locator("#live-waiting .card")).to_have_count(0)
        expect(page.locator("#live-runs .pill").first).to_have_text("completed")
        assert page.evaluate("window.__same_document") is True
        assert page.errors == []


def test_the_demo_stopped_at_its_approval_is_approved_in_the_browser_and_finished(
    tmp_path: Path, page: Any
) -> None:
    workdir = tmp_path / "demo"
    agentrt_cmd = [sys.executable, "-m", "agentrt"]
    stopped = subprocess.run(
        [*agentrt_cmd, "demo", "--dir", str(workdir), "--stop-at-approval"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert stopped.returncode == 0, stopped.stderr
    db = workdir / "demo.db"
    with console(db, "--by", "operator") as c:
        page.goto(c.url)
        page.get_by_role("link", name=re.compile("Review")).click()
        expect(page.locator(".request .notice.warn")).to_contain_text(
            "This call started and the process stopped before its outcome was recorded: "
            "it may already have taken effect."
        )
        expect(page.locator(".timeline")).to_contain_text("Taken over from a stopped process")
        expect(page.locator(".chain")).to_contain_text("Audit chain verified")
        if os.environ.get("AGENTRT_WRITE_SCREENSHOT") == "1":
            page.get_by_label("Note for the record").fill("the processor shows no capture")
            page.screenshot(path=str(ROOT / "docs" / "console.png"), full_page=True)
        page.get_by_role("button", name="Approve as operator").click()
        expect(page.locator("#live-summary .notice")).to_contain_text("Approved by operator")
        finished = subprocess.run(
            [*agentrt_cmd, "demo", "--resume", str(workdir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert finished.returncode == 0, finished.stdout + finished.stderr
        expect(page.locator("#live-summary .pill")).to_have_text("completed")
        expect(page.locator(".timeline")).to_contain_text("charge_card started again, as approved")


# -- a right-to-left letter in a value (decision 0140) ----------------------------------

BIDI_ACCOUNT = "acct 1111 \u05e9 2222 3333"
BIDI_GROUPS = ["1111", "2222", "3333"]

# For each element matched, the x position of each group's first character as laid out.
BIDI_POSITIONS = """([selector, groups]) => {
  const out = [];
  for (const el of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      if (!groups.every((g) => node.data.includes(g))) continue;
      out.push(groups.map((g) => {
        const r = document.createRange();
        const i = node.data.indexOf(g);
        r.setStart(node, i);
        r.setEnd(node, i + 1);
        return r.getBoundingClientRect().left;
      }));
    }
  }
  return out;
}"""


def test_digits_after_a_right_to_left_letter_are_shown_in_the_order_they_are_hashed(
    page: Any, db_path: Path
) -> None:
    """A model writes `to = "acct 1111 ש 2222 3333"`: that exact string is hashed and
    approved, and the page must lay its digit groups out in that order. Without the values'
    `<bdo dir="ltr">` the browser's bidi algorithm showed "1111 3333 2222" (found by an
    attack), in the summary's argument cell and in the full hashed view alike."""
    from starlette.testclient import TestClient

    from agentrt.console import ConsoleConfig, create_app

    def waiting_page() -> str:  # off Playwright's own event loop
        program = Program(db_path, [send(BIDI_ACCOUNT), Decision.complete({})])
        try:
            run = program.start()
            assert program.pending(run.id).request["args"]["to"] == BIDI_ACCOUNT
            app = create_app(ConsoleConfig(db_path=str(db_path), by="alice"))
            client = TestClient(app, base_url="http://127.0.0.1:8765")
            return client.get(f"/runs/{run.id}").text
        finally:
            program.close()

    with concurrent.futures.ThreadPoolExecutor(1) as worker:
        markup = worker.submit(waiting_page).result()
    page.set_content(markup)
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    for selector in ("table.args td", "table.fields td"):
        laid_out = page.evaluate(BIDI_POSITIONS, [selector, BIDI_GROUPS])
        assert laid_out, f"{selector}: no cell holds the value"
        for xs in laid_out:
            assert xs == sorted(xs), f"{selector}: the groups laid out at x={xs}"


def test_a_killed_runs_gone_process_is_seen_on_the_list_and_its_page_even_on_a_phone(
    db_path: Path, page: Any
) -> None:
    """Decision 0196: a run killed mid-call is no longer plain "running"; the owner's name
    (the consumer's text, here hostile and long) is inert and wraps on a phone."""
    from support.left_running import killed_run
    from test_cli import clean_env

    run_id = killed_run(str(db_path), clean_env(), HOSTILE * 3)
    with console(db_path) as c:
        for width in (1200, 390):
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(c.url)
            mark = page.locator(f'tr:has(a[href="/runs/{run_id}"]) .lease')
            expect(mark).to_have_text("process gone")
            expect(mark).to_be_visible()
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.goto(f"{c.url}runs/{run_id}")
            said = page.locator("#live-summary .notice.lease")
            expect(said).to_be_visible()
            text = said.inner_text()
            assert text.startswith("Lease: held by <script>window.__pwned = 1</script>")
            assert "but its process is gone (pid " in text
            assert text.endswith("a resume takes the run over at once.")
            for raw in ("\u202e", "\u200b", "\x1b"):
                assert raw not in text
            assert page.evaluate("window.__pwned") is None
            assert page.locator("main script, main img, main style").count() == 0
            assert page.evaluate("document.documentElement.scrollWidth") <= width
        leave(page)
    assert page.errors == []


def test_an_open_page_is_drawn_again_when_the_lease_it_shows_lapses(
    db_path: Path, page: Any, context: Any
) -> None:
    """A lease lapses with no event written, so the version the page polls does not move:
    the page says when the lease it shows lapses and is drawn again then, in place. The
    browsers' clocks are Playwright's (`page.clock`), advanced by the test; the lease lapses
    by a write of its expiry, as the console's clock passing it would (no real-clock race)."""
    from agentrt._clock import format_time, wall_clock
    from support.leases import ANOTHER_HOST
    from support.left_running import killed_run
    from support.rows import execute
    from test_cli import clean_env

    run_id = killed_run(str(db_path), clean_env(), "worker")
    listing = context.new_page()
    try:
        with console(db_path) as c:
            # Held by a process on another host (nothing proves it gone) for an hour more.
            with agentrt.open_existing(db_path, read_only=True) as store:
                now = store.lease_now(wall_clock)
            lapses = now + timedelta(hours=1)
            execute(
                db_path,
                "UPDATE runs SET lease_expires_at = ?, lease_holder = ? WHERE id = ?",
                (format_time(lapses), ANOTHER_HOST, run_id),
            )
            for opened in (page, listing):
                opened.clock.install()
            page.goto(f"{c.url}runs/{run_id}")
            listing.goto(c.url)
            said = page.locator("#live-summary .notice.lease")
            expect(said).to_have_text(
                re.compile(rf"^Lease: held by worker/\S+ until {re.escape(format_time(lapses))}\.$")
            )
            row = listing.locator(f'tr:has(a[href="/runs/{run_id}"])')
            expect(row).to_be_visible()
            assert row.locator(".lease").count() == 0  # a held lease is not marked
            for opened in (page, listing):
                refresh_in = int(opened.locator("main").get_attribute("data-refresh-in"))
                assert 3_500_000 < refresh_in <= 3_600_000
                opened.evaluate("window.__notReloaded = true")
            execute(
                db_path,
                "UPDATE runs SET lease_expires_at = ? WHERE id = ?",
                (format_time(now - timedelta(seconds=1)), run_id),
            )
            for opened in (page, listing):
                opened.clock.fast_forward(3_602_000)
            expect(said).to_contain_text("lapsed at ")
            expect(row.locator(".lease")).to_have_text("lease lapsed")
            for opened in (page, listing):
                assert opened.evaluate("window.__notReloaded") is True
                leave(opened)
    finally:
        listing.close()
    assert page.errors == []


def test_a_page_whose_lease_lapsed_while_a_note_is_typed_is_not_fetched_again_every_second(
    db_path: Path, page: Any
) -> None:
    """The page is drawn again once when the lease it shows lapses, even though a person is
    typing in one of its live parts (the cancel note, left as it is): the page it fetched says
    the lease lapsed, which needs no other drawing, so it is not fetched again every poll. The
    browser's clock is Playwright's (`page.clock`), advanced by the test; the lease lapses by
    a write of its expiry, as the console's clock passing it would."""
    from agentrt._clock import format_time, wall_clock
    from support.leases import ANOTHER_HOST
    from support.left_running import killed_run
    from support.rows import execute
    from test_cli import clean_env

    run_id = killed_run(str(db_path), clean_env(), "worker")
    with agentrt.open_existing(db_path, read_only=True) as store:
        now = store.lease_now(wall_clock)
    execute(
        db_path,
        "UPDATE runs SET lease_expires_at = ?, lease_holder = ? WHERE id = ?",
        (format_time(now + timedelta(hours=1)), ANOTHER_HOST, run_id),
    )
    polls: list[str] = []
    fetched: list[str] = []

    def seen(request: Any) -> None:
        if request.url.endswith(f"/api/runs/{run_id}/state"):
            polls.append(request.url)
        elif request.url.endswith(f"/runs/{run_id}"):
            fetched.append(request.url)

    def polled(more: int) -> None:
        """Advance the page's clock a second at a time until it polled `more` times again
        (a poll is made once the one before it, and its page fetch if any, are done)."""
        goal = len(polls) + more
        for _ in range(WAIT_MS // 10):
            if len(polls) >= goal:
                return
            page.clock.run_for(1000)
            page.wait_for_timeout(10)
        raise AssertionError(f"the page polled {len(polls)} times, not {goal}")

    with console(db_path) as c:
        page.clock.install()
        page.on("request", seen)
        page.goto(f"{c.url}runs/{run_id}")
        assert int(page.locator("main").get_attribute("data-refresh-in")) > 3_500_000
        said = page.locator("#live-summary .notice.lease")
        expect(said).to_contain_text("held by worker/")
        polled(2)
        assert fetched == [f"{c.url}runs/{run_id}"]  # loaded once, not fetched again
        page.locator("details.cancel summary").click()
        page.locator("#cancel-note").fill("looking into it")
        lapsed = now - timedelta(seconds=1)
        execute(db_path, "UPDATE runs SET lease_expires_at = ? WHERE id = ?",
                (format_time(lapsed), run_id))  # fmt: skip
        page.clock.fast_forward(3_602_000)
        expect(said).to_contain_text(f"lapsed at {format_time(lapsed)}")
        polled(5)
        assert len(fetched) == 2  # drawn again once when the lease lapsed, then left alone
        assert page.locator("#cancel-note").input_value() == "looking into it"
        leave(page)
    assert page.errors == []
