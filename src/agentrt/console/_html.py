"""Building HTML where nothing a model or a server wrote can become markup.

The one rule: text reaches a page only through `h()` (or `text()`), which runs
it through `agentrt.trace.sanitize` (control, bidi, zero-width and other
invisible characters become visible escapes such as `\\u202e`, as the command
line shows them) and then through `html.escape` (so `<`, `>`, `&` and both
quotes are entities). Only `Html` values, which this package builds from its own
constant templates, pass through unescaped. Templates are never built from data.

Pages carry no inline script or style (the Content-Security-Policy forbids
both): behaviour is `static/console.js`, looks are `static/console.css`, and
widths are classes, never `style` attributes.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from datetime import timedelta

from ..trace import sanitize


class Html(str):
    """Markup this package built: passed through `h()` as is."""

    __slots__ = ()


def text(value: object) -> Html:
    """Any value as inert, visible text: sanitized, then HTML-escaped."""
    if isinstance(value, Html):
        return value
    return Html(html.escape(sanitize(str(value)), quote=True))


def shown_text(value: str) -> Html:
    """Text that `sanitize` already made visible (the CLI's renderings): HTML-escaped only."""
    return Html(html.escape(value, quote=True))


def h(template: str, *values: object) -> Html:
    """`template` (a constant of this package) with each `{}` filled by `text(value)`."""
    return Html(template.format(*(text(v) for v in values)))


def join(parts: Iterable[Html], sep: str = "") -> Html:
    return Html(sep.join(parts))


def page(
    title: str,
    body: Html,
    *,
    by: str | None,
    live: str | None = None,
    version: int = 0,
    refresh_in: timedelta | None = None,
) -> Html:
    """A whole page: the layout, the stylesheet, the script, and `body` in `main`.

    With `live` (a state URL), the script polls it and, when the version it
    reports differs from `version`, fetches the page again and swaps every
    element marked `data-live` for its namesake. With `refresh_in` too, it does so
    once that long has passed (a lease shown lapses then, and no event says so).
    """
    who = h('<span class="who">deciding as <strong>{}</strong></span>', by) if by else Html("")
    data = Html("")
    if live is not None:
        data = h(' data-state-url="{}" data-version="{}"', live, version)
        if refresh_in is not None:
            ms = max(refresh_in // timedelta(milliseconds=1), 0)
            data = Html(data + h(' data-refresh-in="{}"', ms))
    return h(
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="same-origin">'
        "<title>{} · agentrt console</title>"
        '<link rel="icon" href="/static/icon.svg" type="image/svg+xml">'
        '<link rel="stylesheet" href="/static/console.css">'
        '<script src="/static/console.js" defer></script>'
        "</head><body>"
        '<a class="skip" href="#main">Skip to content</a>'
        '<header class="top"><a class="brand" href="/">agentrt <span>console</span></a>'
        "{}"
        '<span class="conn" id="conn" hidden>connection lost: retrying</span></header>'
        '<main id="main"{}>{}</main>'
        "</body></html>\n",
        title,
        who,
        data,
        body,
    )


__all__ = ["Html", "h", "join", "page", "shown_text", "text"]
