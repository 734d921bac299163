"""The MCP proxy's rows: which run each request key made (part of the store layer).

`agentrt-proxy` makes one run per tool call and ties an identical re-call to
the run of its predecessor through a request key (hex SHA-256 of the tool
name, a NUL byte and the canonical JSON of the arguments). This module owns
the statements over its table, `proxy_requests`, and the proxy's migrations
(`_migrations.PROXY_MIGRATIONS`, recorded in `proxy_migrations`).

Invariants:
- A key's row is written, in its own fsynced transaction, *before* the run it
  names is created (`claim_request`), so no run of the proxy ever exists
  without its key: a crash between the two leaves a row naming no run, which
  the proxy reads as "never started".
- `claim_request` is a compare-and-set on the key's latest row: of two
  processes that judged the same latest row, exactly one claims the key.
- With a cap, `claim_request` counts the calls that wait for a person, or are
  on their way to it, in the same `BEGIN IMMEDIATE` transaction as its insert:
  the cap on pending approvals holds across every process on the file.
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Collection
from datetime import datetime

from ..._clock import format_time, parse_time
from ..._errors import SchemaVersionError
from .._records import Claim, RequestRow
from ._migrations import PROXY_MIGRATIONS, statements
from ._reads import StoreReads
from ._writes import SqliteTx


def _row(values: tuple[object, ...]) -> RequestRow:
    seq, key, run_id, tool, side_effect, created_at = values
    return RequestRow(
        seq=int(seq),  # type: ignore[call-overload]
        request_key=str(key),
        run_id=str(run_id),
        tool=str(tool),
        side_effect=str(side_effect),
        created_at=parse_time(created_at) if isinstance(created_at, str) else None,
    )


_COLUMNS = "seq, request_key, run_id, tool, side_effect, created_at"


def _waiting_or_on_the_way(tx: SqliteTx, awaiting: Collection[str], fresh_since: datetime) -> int:
    """The proxy's pending approvals, plus its calls of a side effect in `awaiting`
    (those the policy sends to a person) claimed since `fresh_since` whose run has no
    approval yet and is missing (being created) or RUNNING (being decided)."""
    row = tx.execute(
        "SELECT count(*) FROM approvals AS a JOIN proxy_requests AS p ON p.run_id = a.run_id "
        "WHERE a.status = 'pending'"
    ).fetchone()
    pending = int(row[0]) if row is not None else 0
    kinds = sorted(set(awaiting))
    if not kinds:
        return pending
    marks = ", ".join("?" for _ in kinds)
    row = tx.execute(
        "SELECT count(*) FROM proxy_requests AS p LEFT JOIN runs AS r ON r.id = p.run_id "
        f"WHERE p.side_effect IN ({marks}) AND p.created_at >= ? "
        "AND (r.id IS NULL OR r.status = 'RUNNING') "
        "AND NOT EXISTS (SELECT 1 FROM approvals AS a WHERE a.run_id = p.run_id)",
        (*kinds, format_time(fresh_since)),
    ).fetchone()
    return pending + (int(row[0]) if row is not None else 0)


class ProxyRows(StoreReads):
    """The proxy's rows as methods of the SQLite store."""

    proxy_found_version: int | None = None
    """The proxy schema version `migrate_proxy` last found (0: it created the proxy's
    tables); None until it runs."""

    @abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager[SqliteTx]:
        """A write transaction of the store (`SqliteStore.transaction`)."""

    def migrate_proxy(self, now: datetime) -> int:
        """Apply the proxy's pending migrations in one transaction; returns the version reached.

        A file whose proxy tables are newer than this code is refused
        (`SchemaVersionError`) before anything changes.
        """
        known = PROXY_MIGRATIONS[-1].version
        with self.transaction() as tx:
            exists = tx.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'proxy_migrations'"
            ).fetchone()
            current = 0
            if exists is not None:
                row = tx.execute("SELECT max(version) FROM proxy_migrations").fetchone()
                current = int(row[0]) if row is not None and isinstance(row[0], int) else 0
            if current > known:
                raise SchemaVersionError(
                    f"the database's proxy tables were written by a newer agentrt (proxy schema "
                    f"version {current}; this one knows up to {known}): upgrade agentrt to use it"
                )
            for migration in PROXY_MIGRATIONS:
                if migration.version <= current:
                    continue
                for sql in statements(migration.sql):
                    tx.execute(sql)
                tx.execute(
                    "INSERT INTO proxy_migrations (version, applied_at) VALUES (?, ?)",
                    (migration.version, format_time(now)),
                )
        self.proxy_found_version = current
        return known

    def proxy_versions(self) -> list[int]:
        """The proxy migrations the file records, in order."""
        return [
            int(row[0])
            for row in self._query("SELECT version FROM proxy_migrations ORDER BY version")
        ]

    def latest_request(self, key: str) -> RequestRow | None:
        """The latest run made for `key`, or None."""
        rows = self._query(
            f"SELECT {_COLUMNS} FROM proxy_requests WHERE request_key = ? "
            "ORDER BY seq DESC LIMIT 1",
            (key,),
        )
        return _row(tuple(rows[0])) if rows else None

    def request_of_run(self, run_id: str) -> RequestRow | None:
        """The key row that made `run_id`, or None for a run the proxy did not make."""
        rows = self._query(f"SELECT {_COLUMNS} FROM proxy_requests WHERE run_id = ?", (run_id,))
        return _row(tuple(rows[0])) if rows else None

    def _lock_claim(self, tx: SqliteTx, key: str, *, capped: bool) -> None:
        """Hold what a claim judges until its commit: the key's latest row and, when
        `capped`, the proxy's count of waiting calls. SQLite's `BEGIN IMMEDIATE`
        already admits one writer, so nothing more is needed here."""

    def claim_request(
        self,
        key: str,
        judged_seq: int | None,
        run_id: str,
        tool: str,
        side_effect: str,
        now: datetime,
        *,
        cap: int | None = None,
        awaiting: Collection[str] = (),
        fresh_since: datetime | None = None,
    ) -> Claim:
        """Record that `run_id` is the key's next run, if the key's latest row is still
        `judged_seq` (None: the key had none); writes nothing when another call claimed
        the key since (`claimed` False), or, given a `cap`, when `cap` calls of the proxy
        already wait for a person or are on their way to it (`full`; see
        `_waiting_or_on_the_way` for `awaiting` and `fresh_since`)."""
        with self.transaction() as tx:
            self._lock_claim(tx, key, capped=cap is not None)
            row = tx.execute(
                "SELECT seq FROM proxy_requests WHERE request_key = ? ORDER BY seq DESC LIMIT 1",
                (key,),
            ).fetchone()
            current = None if row is None else int(row[0])
            if current != judged_seq:
                return Claim(claimed=False)
            waiting = 0
            if cap is not None:
                waiting = _waiting_or_on_the_way(tx, awaiting, fresh_since or now)
                if waiting >= cap:
                    return Claim(claimed=False, full=True, waiting=waiting)
            tx.execute(
                "INSERT INTO proxy_requests (request_key, run_id, tool, side_effect, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (key, run_id, tool, side_effect, format_time(now)),
            )
            return Claim(claimed=True, waiting=waiting)

    def unsettled_requests(
        self, tool: str, ended: Collection[tuple[str, str | None]]
    ) -> list[RequestRow]:
        """The latest row of each request key of `tool` whose run is RUNNING or
        WAITING_FOR_APPROVAL, or ended with a (reason, reason_detail) pair of `ended` (a
        None detail: any), oldest first.

        One statement that reads the tool's rows through `proxy_requests_tool`, then, for
        each, its key's latest seq through `proxy_requests_key` and, for a latest row, its
        run through the primary key of `runs` (decision 0119). The run's state is asked by
        a correlated scalar subquery, not a join: neither backend turns one into a join,
        so no planner can start from `runs` instead, whose states and reasons no index
        serves (PostgreSQL did, reading `runs` whole, when few runs matched); a row whose
        run is missing gets NULL and is left out, as the join left it."""
        states = ["r.status IN ('RUNNING', 'WAITING_FOR_APPROVAL')"]
        params: list[str] = [tool]
        for reason, detail in ended:
            if detail is None:
                states.append("r.reason = ?")
                params.append(reason)
            else:
                states.append("(r.reason = ? AND r.reason_detail = ?)")
                params.extend((reason, detail))
        columns = ", ".join(f"p.{column}" for column in _COLUMNS.split(", "))
        rows = self._query(
            f"SELECT {columns} FROM proxy_requests AS p WHERE p.tool = ? "
            "AND p.seq = (SELECT max(q.seq) FROM proxy_requests AS q "
            "WHERE q.request_key = p.request_key) "
            f"AND (SELECT {' OR '.join(states)} FROM runs AS r WHERE r.id = p.run_id) "
            "ORDER BY p.seq",
            tuple(params),
        )
        return [_row(tuple(row)) for row in rows]
