"""The console's pages, built from the read models with `_html` (everything escaped).

A run's waiting request is shown with the command line's own rendering
(`agentrt._render_approval`, decision 0057): first what a person decides on
(`summary`: the tool, each argument once as its exact JSON literal, why a
person is asked, what approving and rejecting do, the hash), then the buttons,
then every field in the order it is hashed (`hashed_rows`), folded in a
`<details>`, with sizes, long strings as head and tail, durations in units, and
every invisible or control character visible as an escape. Every value shown in
part (a long string, a long key) is also shown whole, once, folded above the
buttons (`whole_values`). The form carries
the hash shown, so a decision can only be bound to what the person saw.

A run still waiting whose request was decided (approved, its program has not
resumed it yet) is its own state: "approved by X at T, waiting for the program
to resume", on the run page and the index, never counted as waiting for a person.

Parts of a page that change while a run moves carry `data-live` and an `id`;
`console.js` fetches the page again and swaps exactly those elements. The
waiting request and its form are not live: a request is never replaced under a
person's eyes; a banner says when it is no longer the one waiting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from urllib.parse import quote, urlencode

from .. import view
from .._capped import capped_length
from .._clock import format_time
from .._records import Approval, RunStatus, VerifyReport
from .._render_approval import (
    INTERRUPTED_KIND,
    Summary,
    approval_fields,
    hashed_rows,
    summary,
    whole_label,
    whole_values,
)
from .._render_approval import INTERRUPTED_NOTICE as RENDER_CRASH_NOTICE
from ._data import Entry, IndexData, Pending, RunData, seconds, waits_for_its_program
from ._html import Html, h, join, page, shown_text, text
from ._security import ConsoleConfig

INTERRUPTED_NOTICE = (
    "This call started and the process stopped before its outcome was recorded: it may "
    "already have taken effect. Approving runs it once more; rejecting ends the run "
    "without calling it again."
)
GOAL_LIMIT = 1000
NOTE_LIMIT = 2000


def _when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return format_time(value).replace("T", " ").rsplit(".", 1)[0] + " UTC"


def _status_label(status: str) -> str:
    return status.lower().replace("_", " ")


_STATUSES = frozenset(s.value for s in RunStatus)


def _pill(status: str) -> Html:
    # The class comes from the known statuses only: a stored value never names a class.
    known = status.lower() if status in _STATUSES else "unknown"
    return h('<span class="pill s-{}">{}</span>', known, _status_label(status) or "unknown")


_LEASE_MARKS = {"owner_gone": "process gone", "lapsed": "lease lapsed", "none": "nobody holds it"}


def _lease_mark(lease: view.LeaseView | None) -> Html:
    """A running run no live process holds, marked on the list (a held one is not); the class
    comes from the known states only, never from stored text."""
    if lease is None or lease.state not in _LEASE_MARKS:
        return Html("")
    return h(' <span class="lease l-{}">{}</span>', lease.state, _LEASE_MARKS[lease.state])


def _soonest_lapse(leases: Iterable[view.LeaseView | None]) -> timedelta | None:
    """How long until the soonest of the leases shown lapses (None: none will by itself)."""
    return min((x.lapses_in for x in leases if x is not None and x.lapses_in is not None),
               default=None)  # fmt: skip


def _lease_notice(lease: view.LeaseView | None) -> Html:
    """A running run's lease on its page, in `show`'s words (its owner escaped like any text)."""
    if lease is None:
        return Html("")
    words = lease.words()
    look = "info" if lease.state == "held" else "warn"
    return h('<p class="notice {} lease">Lease: {}.</p>', look, words)


def _resuming_pill(last: Approval | None) -> Html:
    """The state of a run whose request was decided and whose program has not resumed it."""
    if last is None:  # waiting with nothing pending and nothing decided: a file made by hand
        return Html('<span class="pill s-resuming">waiting for its program</span>')
    said = "rejected" if last.status == "rejected" else "approved"
    return h('<span class="pill s-resuming">{} · waiting for its program</span>', said)


def decided_sentence(last: Approval | None) -> str:
    """`approved by alice at 2026-12-01 09:00:00 UTC, waiting for the program to resume`."""
    if last is None:
        return "no request pending, waiting for the program to resume"
    return (
        f"{last.status} by {last.decided_by or 'someone unrecorded'} at "
        f"{_when(last.decided_at)}, waiting for the program to resume"
    )


def _goal(goal: str) -> Html:
    """A goal as itself when short and read whole, else as the CLI shows a long string."""
    if len(goal) <= GOAL_LIMIT and capped_length(goal) is None:
        return text(goal)
    ((_, shown),) = list(approval_fields(goal))
    return shown_text(shown)


def _u(value: str) -> str:
    """An id as one URL path segment."""
    return quote(value, safe="")


def _number(n: int) -> str:
    return f"{n:,}"


# --- the run list -------------------------------------------------------------------------------


def _waiting_card(s: view.RunSummary) -> Html:
    w = s.waiting[0] if s.waiting else None
    what = h("{} · {}", w.kind, w.tool or "-") if w else text("pending")
    more = h(" (+{} more)", len(s.waiting) - 1) if len(s.waiting) > 1 else Html("")
    since = _when(w.created_at) if w else "-"
    return h(
        '<li class="card waiting"><a class="cardlink" href="/runs/{}">'
        '<span class="what">{}{}</span><span class="goal">{}</span>'
        '<span class="meta">run {} · waiting since {}</span>'
        '<span class="go">Review →</span></a></li>',
        _u(s.run.id),
        what,
        more,
        _clip(s.run.goal, 160),
        s.run.id[:12],
        since,
    )


def _resuming_card(s: view.RunSummary, last: Approval | None) -> Html:
    what = h("{} · {}", last.status, view.approval_tool(last) or "-") if last else text("decided")
    return h(
        '<li class="card resuming"><a class="cardlink" href="/runs/{}">'
        '<span class="what">{}</span><span class="goal">{}</span>'
        '<span class="state">{}</span>'
        '<span class="meta">run {}</span>'
        '<span class="go">Open →</span></a></li>',
        _u(s.run.id),
        what,
        _clip(s.run.goal, 160),
        decided_sentence(last),
        s.run.id[:12],
    )


def _clip(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[:limit] + "…"


def _run_row(s: view.RunSummary, decided: dict[str, Approval | None]) -> Html:
    r = s.run
    pill = _resuming_pill(decided.get(r.id)) if waits_for_its_program(s) else _pill(r.status)
    return h(
        '<tr><td>{}{}</td><td class="goalcell"><a href="/runs/{}">{}</a>'
        '<span class="rid">{}</span></td>'
        '<td class="num">{}</td><td class="num">{}</td><td class="num">{}</td>'
        '<td class="num">{}</td><td>{}</td></tr>',
        pill,
        _lease_mark(s.lease),
        _u(r.id),
        _clip(r.goal, 120) or "(no goal)",
        r.id[:12],
        _number(r.step_count),
        _number(r.model_calls),
        _number(s.tokens),
        view.format_cost(r.estimated_cost_micros),
        _when(r.created_at),
    )


def _page_link(label: str, status: str | None, offset: int) -> Html:
    query = {"offset": str(offset)}
    if status:
        query["status"] = status
    return h('<a class="button ghost" href="/?{}">{}</a>', urlencode(query), label)


def index_page(data: IndexData, config: ConsoleConfig) -> Html:
    runs = data.runs
    asking = data.asking
    if asking:
        cards = join(_waiting_card(s) for s in asking)
        waiting_html = h('<ul class="cards">{}</ul>', cards)
    else:
        waiting_html = Html('<p class="empty">Nobody is needed right now.</p>')
    resuming = data.resuming
    if resuming:
        waiting_html = h(
            '{}<h2 class="resuming">Decided, waiting for the program to resume '
            '<span class="badge calm">{}</span></h2><ul class="cards">{}</ul>',
            waiting_html,
            _number(len(resuming)),
            join(_resuming_card(s, data.decided.get(s.run.id)) for s in resuming),
        )
    hidden = data.waiting.total - len(data.waiting.runs)
    if hidden > 0:
        # Newest first: the runs left out are those that have waited longest.
        waiting_html = h(
            '{}<p class="more">and {} more waiting run{}, the longest waiting among them: '
            '<a href="/?status=WAITING_FOR_APPROVAL">every waiting run</a></p>',
            waiting_html,
            _number(hidden),
            "" if hidden == 1 else "s",
        )
    options = join(
        h(
            '<option value="{}"{}>{}</option>',
            s.value,
            Html(" selected") if runs.status == s.value else Html(""),
            _status_label(s.value),
        )
        for s in RunStatus
    )
    filter_form = h(
        '<form class="filter" method="get" action="/">'
        '<label for="status">Show</label><select id="status" name="status">'
        '<option value="">every status</option>{}</select>'
        '<button class="button ghost" type="submit">Filter</button></form>',
        options,
    )
    if runs.runs:
        rows = join(_run_row(s, data.decided) for s in runs.runs)
        table = h(
            '<table class="runs"><thead><tr><th>status</th><th>goal</th>'
            '<th class="num">steps</th><th class="num">model calls</th>'
            '<th class="num">tokens</th><th class="num">cost</th><th>created</th>'
            "</tr></thead><tbody>{}</tbody></table>",
            rows,
        )
    else:
        table = Html('<p class="empty">No runs here.</p>')
    pager = []
    if runs.offset > 0:
        # Past the end, "newer" is the last page that shows runs, not another empty one.
        newer = max(min(runs.offset, runs.total) - runs.limit, 0)
        pager.append(_page_link("← newer", runs.status, newer))
    if runs.next_offset is not None:
        pager.append(_page_link("older →", runs.status, runs.next_offset))
    which = f" {_status_label(runs.status)}" if runs.status else ""
    if runs.runs or runs.offset == 0:
        count = h(
            '<p class="count">runs {}–{} of {}{}, newest first</p>',
            runs.offset + 1 if runs.runs else 0,
            runs.offset + len(runs.runs),
            _number(runs.total),
            which,
        )
    else:
        count = h(
            '<p class="count">no runs after the first {}; {}{} in all</p>',
            _number(runs.offset),
            _number(runs.total),
            which,
        )
    body = h(
        '<section data-live id="live-waiting"><h1>Waiting for a person '
        '<span class="badge">{}</span></h1>{}</section>'
        '<section><div class="bar"><h2>All runs</h2>{}</div>'
        '<div data-live id="live-runs">{}{}<nav class="pager">{}</nav></div></section>',
        _number(data.asking_total),
        waiting_html,
        filter_form,
        table,
        count,
        join(pager),
    )
    shown = (s.lease for s in (*data.waiting.runs, *data.runs.runs))
    return page(
        "Runs",
        body,
        by=config.by,
        live="/api/state",
        version=data.version,
        refresh_in=_soonest_lapse(shown),
    )


# --- a run --------------------------------------------------------------------------------------


_SIZE = re.compile(r"(.*) (\((?:string|object|list), [0-9,]+ (?:chars?|keys?|items?)\))", re.S)


def _path_cell(path: str) -> Html:
    """A field path with its last member set apart (the text is the path, unchanged)."""
    cut = max(path.rfind("."), path.rfind("["))
    if cut <= 0 or '"' in path[cut:]:
        return h('<span class="key">{}</span>', shown_text(path))
    return h(
        '<span class="parent">{}</span><span class="key">{}</span>',
        shown_text(path[:cut]),
        shown_text(path[cut:]),
    )


def _value_cell(value: str) -> Html:
    """A shown value with its size (`(string, 6 chars)`) set apart."""
    match = _SIZE.fullmatch(value)
    if match is None:
        return shown_text(value)
    return h('{} <span class="size">{}</span>', shown_text(match[1]), shown_text(match[2]))


def _field_rows(approval: Approval) -> Html:
    out = []
    for path, value in hashed_rows(approval):
        depth = min(path.count(".") + path.count("["), 8)
        out.append(
            h(
                '<tr class="d{}"><th class="path" scope="row">{}</th>'
                '<td class="value"><bdo dir="ltr">{}</bdo></td></tr>',
                depth,
                _path_cell(path),
                _value_cell(value),
            )
        )
    return join(out)


def _arguments(s: Summary) -> Html:
    """The arguments the tool is called with, one a row, each its exact JSON literal."""
    if not s.args:
        return h('<span class="none">{}</span>', shown_text(s.args_note or "(none)"))
    rows = join(
        # <bdo>: laid out in the order it is stored and hashed, a right-to-left letter in
        # it reordering nothing around it (decision 0140).
        h(
            '<tr><th scope="row">{}</th><td><bdo dir="ltr">{}</bdo></td></tr>',
            shown_text(k),
            shown_text(v),
        )
        for k, v in s.args
    )
    more = Html("")
    if s.args_more:
        more = h(
            '<tr><th scope="row">…</th><td>and {} more (every one: in the full view below)'
            "</td></tr>",
            _number(s.args_more),
        )
    return h('<table class="args">{}{}</table>', rows, more)


def _facts(s: Summary, a: Approval) -> Html:
    side = h(' <span class="size">({})</span>', shown_text(s.side_effect)) if s.side_effect else ""
    return h(
        '<dl class="facts">'
        "<dt>tool</dt><dd><code>{}</code>{}</dd>"
        "<dt>arguments</dt><dd>{}</dd>"
        "<dt>why asked</dt><dd>{}{}</dd>"
        '<dt>if you approve</dt><dd class="does">{}</dd>'
        '<dt>if you reject</dt><dd class="does">{}</dd>'
        "<dt>asked</dt><dd>{}</dd><dt>expires</dt><dd>{}</dd></dl>",
        shown_text(s.tool),
        Html(side),
        _arguments(s),
        shown_text(s.why),
        Html("")
        if s.kind == s.side_effect
        else h(' <span class="size">({})</span>', shown_text(s.kind)),
        shown_text(s.approving[:1].upper() + s.approving[1:] + "."),
        shown_text(s.rejecting[:1].upper() + s.rejecting[1:] + "."),
        _when(a.created_at),
        _when(a.expires_at) if a.expires_at else "never",
    )


def _wholes(approval: Approval) -> Html:
    """Every value the page shows only in part (a long string, a long key), whole, folded:
    no character of what is decided is out of reach before the buttons (decision 0156)."""
    wholes = whole_values(approval)
    if not wholes:
        return Html("")
    items = join(
        h(
            '<div class="wholeval"><p class="wpath">{}: the same as <code>{}</code></p></div>',
            shown_text(whole_label(w)),
            shown_text(w.same_as),
        )
        if w.same_as
        else h(
            '<div class="wholeval"><p class="wpath">{}</p><pre><bdo dir="ltr">{}</bdo></pre></div>',
            shown_text(whole_label(w)),
            shown_text(w.value),
        )
        for w in wholes
    )
    count = len(wholes)
    return h(
        '<details class="whole"><summary>Read whole the {} shown here in part '
        '<span class="opt">(every character of what you decide)</span></summary>{}</details>',
        f"{_number(count)} value{'' if count == 1 else 's'}",
        items,
    )


def _notice(s: Summary) -> str:
    """The interrupted call's notice: what the presentation says happened, or the crash's."""
    if not s.notice or s.notice == RENDER_CRASH_NOTICE:
        return INTERRUPTED_NOTICE
    return s.notice.removeprefix("NOTICE: ")


def _decision_form(p: Pending, run_id: str, config: ConsoleConfig) -> Html:
    a = p.approval
    s = summary(a, p.reason)
    interrupted = (
        h(
            '<div class="notice warn" role="note"><strong>Outcome unknown.</strong> {}</div>',
            _notice(s),
        )
        if a.kind == INTERRUPTED_KIND
        else Html("")
    )
    expired = ""
    if a.expires_at is not None and a.expires_at <= datetime.now(a.expires_at.tzinfo):
        expired = f"This request expired at {_when(a.expires_at)}: deciding it will be refused."
    mismatches = join(
        h(
            '<div class="notice bad mismatch" role="alert"><strong>Check before deciding:</strong>'
            " {}</div>",
            shown_text(m),
        )
        for m in s.mismatches
    )
    if p.hash_error:
        form = h(
            '<div class="notice bad" role="alert"><strong>This request cannot be decided.</strong> '
            "Its stored fields no longer match its hash: {}</div>",
            p.hash_error,
        )
    else:
        form = h(
            '<form class="decide" method="post" action="/runs/{}/approvals/{}/approve">'
            '<input type="hidden" name="csrf" value="{}">'
            '<input type="hidden" name="hash" value="{}">'
            '<label for="note-{}">Note for the record <span class="opt">(optional)</span></label>'
            '<textarea id="note-{}" name="note" rows="2" maxlength="{}"></textarea>'
            '<div class="actions">'
            '<button class="button approve" type="submit">Approve as {}</button>'
            '<button class="button reject" type="submit" '
            'formaction="/runs/{}/approvals/{}/reject">Reject as {}</button>'
            "</div></form>",
            _u(run_id),
            _u(a.id),
            config.csrf,
            a.hash,
            a.id,
            a.id,
            NOTE_LIMIT,
            config.by,
            _u(run_id),
            _u(a.id),
            config.by,
        )
    return h(
        '<section class="request" data-approval="{}" data-hash="{}" aria-labelledby="rq-{}">'
        '<div class="stale notice bad" role="alert" hidden><strong>This request is no longer '
        "the one waiting.</strong> It was decided, or the run moved on and asks again. A decision "
        'made here will be refused. <a href="/runs/{}">Show what waits now</a></div>'
        '<h2 id="rq-{}">The run waits for your decision</h2>{}{}{}{}{}'
        '<p class="hash">hash <code>{}</code></p>{}'
        '<details class="full"><summary>Every field exactly as it is hashed '
        '<span class="opt">({} fields: what the hash above covers)</span></summary>'
        '<table class="fields">{}</table></details></section>',
        a.id,
        a.hash,
        a.id,
        _u(run_id),
        a.id,
        interrupted,
        h('<p class="notice warn">{}</p>', expired) if expired else Html(""),
        _facts(s, a),
        mismatches,
        _wholes(a),
        a.hash,
        form,
        _number(s.fields),
        _field_rows(a),
    )


def _decided(approvals: tuple[Approval, ...]) -> Html:
    if not approvals:
        return Html("")
    items = join(
        h(
            '<li><span class="pill s-{}">{}</span> by <strong>{}</strong> at {}{}'
            '<span class="rid">approval {} · hash {}…</span></li>',
            "completed" if a.status == "approved" else "cancelled",
            a.status,
            a.decided_by or "?",
            _when(a.decided_at),
            h(": “{}”", a.note) if a.note else Html(""),
            a.id[:12],
            a.hash[:16],
        )
        for a in approvals
    )
    return h('<section class="decisions"><h2>Decisions</h2><ul>{}</ul></section>', items)


def _chain(report: VerifyReport, checked_at: datetime | None) -> Html:
    when = _when(checked_at)
    if report.intact:
        return h(
            '<p class="chain ok" id="chain">Audit chain verified: {} events intact '
            '<span class="rid">up to event {} ({}…), checked {}</span></p>',
            _number(report.checked),
            report.head_seq,
            report.head_hash[:16],
            when,
        )
    brk = report.first_break
    where = f"at event {brk.seq}: {brk.problem}" if brk else ""
    return h(
        '<p class="chain bad" id="chain" role="alert">Audit chain BROKEN {}; '
        '{} events verified before it <span class="rid">checked {}</span></p>',
        where,
        _number(report.checked),
        when,
    )


def _entry(e: Entry, origin: datetime | None) -> Html:
    offset = ""
    if origin is not None and e.at is not None:
        offset = "+" + seconds(max(int((e.at - origin).total_seconds() * 1000), 0))
    duration = Html("")
    if e.duration_ms is not None:
        duration = h(
            '<span class="dur"><span class="track"><span class="fill w{}"></span></span>{}</span>',
            e.width,
            seconds(e.duration_ms),
        )
    step = h('<span class="stepno">step {}</span>', e.step) if e.step is not None else Html("")
    return h(
        '<li class="ev k-{}"><span class="dot" aria-hidden="true"></span>'
        '<div class="evbody"><div class="evhead"><span class="evtitle">{}</span>{}'
        '<time title="{}">{}</time></div>{}{}</div></li>',
        e.kind,
        e.title,
        step,
        _when(e.at),
        offset,
        h('<p class="evdetail">{}</p>', e.detail) if e.detail else Html(""),
        duration,
    )


def _summary(data: RunData) -> Html:
    run = data.detail.summary.run
    tokens = data.detail.summary.tokens
    note = Html("")
    pill = _pill(run.status)
    if run.status == RunStatus.WAITING_FOR_APPROVAL and not data.pending:
        last = data.decided[-1] if data.decided else None
        pill = _resuming_pill(last)
        sentence = decided_sentence(last)
        note = h(
            '<p class="notice info resuming">{}. The console never runs tools: the run goes on '
            "when {}</p>",
            sentence[:1].upper() + sentence[1:],
            view.what_continues(run.origin),
        )
    reason = h(' <span class="reason">{}</span>', run.reason) if run.reason else Html("")
    return h(
        '<section class="summary" data-live id="live-summary">'
        '<div class="titlebar">{}{}<span class="rid">run {}</span></div>'
        '<p class="goaltext">{}</p>{}{}'
        '<dl class="totals"><div><dt>steps</dt><dd>{}</dd></div>'
        "<div><dt>model calls</dt><dd>{}</dd></div><div><dt>tokens</dt><dd>{}</dd></div>"
        "<div><dt>cost</dt><dd>{}</dd></div><div><dt>active</dt><dd>{}</dd></div>"
        "<div><dt>created</dt><dd>{}</dd></div><div><dt>finished</dt><dd>{}</dd></div></dl>"
        "{}</section>",
        pill,
        reason,
        run.id,
        _goal(run.goal),
        h('<p class="detail">{}</p>', _clip(run.reason_detail, 600))
        if run.reason_detail
        else Html(""),
        _lease_notice(data.detail.summary.lease),
        _number(run.step_count),
        _number(run.model_calls),
        _number(tokens),
        view.format_cost(run.estimated_cost_micros),
        view.format_duration(run.active_time),
        _when(run.created_at),
        _when(run.finished_at),
        note,
    )


def run_page(data: RunData, config: ConsoleConfig) -> Html:
    run = data.detail.summary.run
    requests = join(_decision_form(p, run.id, config) for p in data.pending)
    origin = data.timeline[0].at if data.timeline else None
    entries = join(_entry(e, origin) for e in data.timeline)
    more = Html("")
    if data.events_total > data.events_shown:
        more = h(
            '<p class="count">the latest events of {}; all of them: '
            "<code>agentrt events {}</code></p>",
            _number(data.events_total),
            run.id,
        )
    cancel = Html("")
    if run.status in (RunStatus.RUNNING, RunStatus.WAITING_FOR_APPROVAL):
        cancel = h(
            '<details class="cancel"><summary>Cancel this run</summary>'
            '<form method="post" action="/runs/{}/cancel">'
            '<input type="hidden" name="csrf" value="{}">'
            '<label for="cancel-note">Why</label>'
            '<input id="cancel-note" name="note" maxlength="{}">'
            '<button class="button reject" type="submit">Cancel the run as {}</button>'
            "</form></details>",
            _u(run.id),
            config.csrf,
            NOTE_LIMIT,
            config.by,
        )
    body = h(
        '<p class="crumb"><a href="/">← all runs</a></p>{}'
        '<div class="newrequest notice info" role="status" hidden>A request waits for a decision. '
        '<a href="/runs/{}">Show it</a></div>{}'
        '<div data-live id="live-trail">{}<section class="trail"><h2>What happened</h2>{}'
        '<ol class="timeline">{}</ol>{}</section></div><div data-live id="live-cancel">{}</div>',
        _summary(data),
        _u(run.id),
        requests,
        _decided(data.decided),
        _chain(data.chain, data.chain_checked_at),
        entries,
        more,
        cancel,
    )
    return page(
        _clip(run.goal, 60) or run.id,
        body,
        by=config.by,
        live=f"/api/runs/{_u(run.id)}/state",
        version=data.version,
        refresh_in=_soonest_lapse([data.detail.summary.lease]),
    )


# --- answers ------------------------------------------------------------------------------------


def message_page(
    title: str, message: str, config: ConsoleConfig | None, *, back: str = "/"
) -> Html:
    """A page for a refusal or an error: the title, one message, and a way back."""
    return page(
        title,
        h(
            '<section class="message"><h1>{}</h1><p>{}</p>'
            '<p><a class="button ghost" href="{}">Back</a></p></section>',
            title,
            message,
            back,
        ),
        by=config.by if config else None,
    )


def login_page(config: ConsoleConfig, message: str) -> Html:
    return page(
        "Token needed",
        h(
            '<section class="message"><h1>This console needs its token</h1><p>{}</p>'
            '<form method="post" action="/login" class="login">'
            '<label for="token">Token</label>'
            '<input id="token" name="token" type="password" autocomplete="off">'
            '<button class="button approve" type="submit">Open the console</button></form>'
            "</section>",
            message,
        ),
        by=None,  # who decides is not told to someone without the token
    )


__all__ = [
    "INTERRUPTED_NOTICE",
    "decided_sentence",
    "index_page",
    "login_page",
    "message_page",
    "run_page",
]
