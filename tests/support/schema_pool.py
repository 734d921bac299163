"""Migrated PostgreSQL schemas kept per test process, emptied between tests (decision 0105).

Making a schema and running the store's migrations into it, then dropping it, cost a
PostgreSQL test about 0.3 s of its 0.35 s (decision 0103). A `SchemaPool` keeps the
schemas it made, one process's (each xdist worker has its own pool, so no two tests
ever hold one schema at once), and hands a test one that is exactly as a fresh
migration leaves it:

- **Taken**: a free schema of the pool, or a new one migrated now (`open_store`, with
  the chain partitions asked for: a pool per N).
- **Given back** after the test, in one transaction on the pool's own connection:
  1. the schema's *catalog fingerprint* (every table, column and its type, default,
     identity and collation, constraint, index, trigger, rule, row-level policy and
     row-level security flag, view, sequence's parameters, function, type, the
     grants on the schema, its tables and columns, their owners), with the schema's
     name taken out, is compared with the one the pool's first schema of that N had
     right after its migration;
  2. every row of the record's tables is deleted, each identity sequence set back to
     its start, and the chain's heads back to seq 0 and no hash;
  3. the rows a migration writes (`schema_migrations`' versions, `agentrt_meta`, the
     heads) are compared with the pristine schema's;
  4. no other connection may hold a lock on any of its relations (a transaction a
     test left open; a `VACUUM` or `ANALYZE` running now in a transaction of its own
     is not one).
  Any difference, and the schema is dropped instead (`DROP SCHEMA ... CASCADE`): a
  test that planted a trigger, altered a table, made a table of its own, ran another
  migration or changed the meta rows leaves a schema the pool never hands out again,
  and the next test gets a freshly migrated one. A schema still locked by another
  connection is set aside, dropped when the pool closes.
- **Remade** after `RECYCLE_AFTER` uses (its tables' dead rows and index entries
  then go with it: the server this suite runs on has autovacuum off).
- **Closed** at the end of the session (`schema_pool` in tests/conftest.py): every
  schema it holds is dropped.

A schema's *name* is the pool's (`k_` and 12 hex digits), so whatever a test makes by
that prefix (a crash matrix's cases, `NAME_clean`, ...) is the caller's to drop
(support/database.py drops them after every test, kept cases too).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RECYCLE_AFTER = 50
"""Uses of one schema before it is dropped and a fresh one migrated in its place."""

OFF_VARIABLE = "AGENTRT_TEST_SCHEMA_POOL"
"""Set to `0`, every test gets a schema migrated for it and dropped after it (as before
the pool): for measuring the pool against its absence."""

_KEPT = ("schema_migrations", "agentrt_meta", "chain_head")
"""The tables whose rows a migration writes: compared with the pristine schema's, not
emptied (the heads are set back to seq 0 first)."""

# One row of text per catalog fact about the schema `%(s)s`, in no particular order; the
# schema's own name is replaced by `S` in Python (it appears in index, rule and policy
# definitions). Internal triggers (a foreign key's) are named by the server with an oid,
# so they are described by what they do and whether they are enabled, not by name.
_FINGERPRINT = """\
WITH ns AS (SELECT oid, nspname FROM pg_namespace WHERE nspname = %(s)s)
SELECT 'schema', pg_get_userbyid(n.nspowner) || ' ' || coalesce(n.nspacl::text, '')
    FROM pg_namespace AS n JOIN ns ON ns.oid = n.oid
UNION ALL
SELECT 'relation', concat_ws(' ', c.relname, c.relkind, c.relpersistence, c.relrowsecurity,
        c.relforcerowsecurity, pg_get_userbyid(c.relowner), coalesce(c.relacl::text, ''),
        coalesce(c.reloptions::text, ''), c.relreplident)
    FROM pg_class AS c JOIN ns ON c.relnamespace = ns.oid
UNION ALL
SELECT 'column', concat_ws(' ', c.relname, a.attnum, a.attname, a.attisdropped,
        format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity, a.attgenerated,
        coalesce(co.collname, ''), coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
        coalesce(a.attacl::text, ''))
    FROM pg_class AS c JOIN ns ON c.relnamespace = ns.oid
    -- Each relation's columns read through the index on `attrelid` (a join the planner
    -- would otherwise make by scanning every column of the database: 8 of this query's
    -- 13 ms, with the pools' schemas on the server).
    CROSS JOIN LATERAL (
        SELECT * FROM pg_attribute AS a WHERE a.attrelid = c.oid AND a.attnum > 0 OFFSET 0
    ) AS a
    LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    LEFT JOIN pg_collation AS co ON co.oid = a.attcollation
UNION ALL
SELECT 'constraint', concat_ws(' ', c.relname, k.conname, k.condeferrable, k.convalidated,
        pg_get_constraintdef(k.oid))
    FROM pg_constraint AS k JOIN ns ON k.connamespace = ns.oid
    LEFT JOIN pg_class AS c ON c.oid = k.conrelid
UNION ALL
SELECT 'index', concat_ws(' ', pg_get_indexdef(i.indexrelid), i.indisvalid, i.indisready,
        i.indisunique, i.indisprimary)
    FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indrelid JOIN ns ON c.relnamespace = ns.oid
UNION ALL
SELECT 'trigger', concat_ws(' ', c.relname, t.tgenabled,
        CASE WHEN t.tgisinternal THEN t.tgfoid::regproc::text || ' ' || t.tgtype
             ELSE pg_get_triggerdef(t.oid) END)
    FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid JOIN ns ON c.relnamespace = ns.oid
UNION ALL
SELECT 'rule', concat_ws(' ', c.relname, r.rulename, r.ev_enabled, pg_get_ruledef(r.oid))
    FROM pg_rewrite AS r JOIN pg_class AS c ON c.oid = r.ev_class JOIN ns ON c.relnamespace = ns.oid
UNION ALL
SELECT 'policy', concat_ws(' ', c.relname, p.polname, p.polcmd, p.polpermissive,
        p.polroles::text, coalesce(pg_get_expr(p.polqual, p.polrelid), ''),
        coalesce(pg_get_expr(p.polwithcheck, p.polrelid), ''))
    FROM pg_policy AS p JOIN pg_class AS c ON c.oid = p.polrelid JOIN ns ON c.relnamespace = ns.oid
UNION ALL
SELECT 'sequence', concat_ws(' ', c.relname, q.seqtypid::regtype, q.seqstart, q.seqincrement,
        q.seqmax, q.seqmin, q.seqcache, q.seqcycle)
    FROM pg_sequence AS q JOIN pg_class AS c ON c.oid = q.seqrelid
    JOIN ns ON c.relnamespace = ns.oid
UNION ALL
SELECT 'function', p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')'
    FROM pg_proc AS p JOIN ns ON p.pronamespace = ns.oid
UNION ALL
SELECT 'type', t.typname || ' ' || t.typtype::text
    FROM pg_type AS t JOIN ns ON t.typnamespace = ns.oid
UNION ALL
SELECT 'statistics', s.stxname FROM pg_statistic_ext AS s JOIN ns ON s.stxnamespace = ns.oid
UNION ALL
SELECT 'operator', o.oprname FROM pg_operator AS o JOIN ns ON o.oprnamespace = ns.oid
UNION ALL
SELECT 'collation', co.collname FROM pg_collation AS co JOIN ns ON co.collnamespace = ns.oid
UNION ALL
SELECT 'publication', pr.prpubid::text || ' ' || c.relname
    FROM pg_publication_rel AS pr JOIN pg_class AS c ON c.oid = pr.prrelid
    JOIN ns ON c.relnamespace = ns.oid
"""

# A lock held by a `VACUUM` or `ANALYZE` running now in a transaction it began is its
# command's, not a transaction a test left open: another test run's at its start
# (tests/conftest.py), a benchmark's, autovacuum's. It locks each table of every schema in
# turn, and the reset's statements do not conflict with its lock (`DROP` waits for it).
# `ANALYZE` may run inside a transaction block, begun before it (a test's, left open with
# its writes): that one's locks count.
_LOCKED_ELSEWHERE = """\
SELECT count(*) FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation
    WHERE c.relnamespace = to_regnamespace(%s)::oid AND l.pid <> pg_backend_pid()
        AND l.pid NOT IN (
            SELECT a.pid FROM pg_stat_activity AS a
            WHERE a.xact_start >= a.query_start AND a.pid IN (
                SELECT pid FROM pg_stat_progress_vacuum
                UNION ALL SELECT pid FROM pg_stat_progress_analyze))
"""


def fingerprint(conn: Any, schema: str) -> str:
    """The SHA-256 of the schema's catalog facts (its name taken out), sorted.

    Read with only `pg_catalog` on the search path, so that every definition names
    the schema's objects qualified, whatever the connection's own path."""
    with conn.transaction():
        (path,) = conn.execute("SELECT current_setting('search_path')").fetchone()
        conn.execute("SELECT set_config('search_path', 'pg_catalog', true)")
        rows = conn.execute(_FINGERPRINT, {"s": schema}).fetchall()
        conn.execute("SELECT set_config('search_path', %s, true)", (path,))
    facts = sorted(
        f"{kind} {text}".replace(f'"{schema}".', "S.").replace(f"{schema}.", "S.")
        for kind, text in rows
    )
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()


def kept_rows(conn: Any, schema: str) -> tuple[tuple[Any, ...], ...]:
    """The rows a migration writes, in a fixed order (`applied_at` left out: a time)."""
    q = f'"{schema}"'
    return (
        tuple(conn.execute(f"SELECT version FROM {q}.schema_migrations ORDER BY 1").fetchall()),
        tuple(conn.execute(f"SELECT key, value FROM {q}.agentrt_meta ORDER BY 1").fetchall()),
        tuple(conn.execute(f"SELECT part, seq, hash FROM {q}.chain_head ORDER BY 1").fetchall()),
    )


@dataclass
class _Pristine:
    fingerprint: str
    kept: tuple[tuple[Any, ...], ...]
    emptied: tuple[str, ...]  # the tables emptied between tests, runs last (the others refer to it)


@dataclass
class _Held:
    schema: str
    partitions: int | None
    uses: int = 0


@dataclass
class PoolStats:
    """What the pool did, for its own tests and for the measurements (decision 0105)."""

    made: int = 0
    reused: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # why -> how many

    def drop(self, why: str) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + 1


class SchemaPool:
    """Migrated schemas on one server, for one process's tests, one test at a time each."""

    def __init__(self, base: str, *, reuse: bool | None = None) -> None:
        self.base = base
        self.reuse = os.environ.get(OFF_VARIABLE) != "0" if reuse is None else reuse
        self.stats = PoolStats()
        self._free: dict[int | None, list[_Held]] = {}
        self._pristine: dict[int | None, _Pristine] = {}
        self._set_aside: list[str] = []
        self._taken: dict[str, _Held] = {}
        self._conn: Any = None

    # --- the pool's own connection --------------------------------------------------------

    def _connection(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.base, autocommit=True)
            self._conn.execute("SET lock_timeout = '5s'")
        return self._conn

    def _run(self, work: Callable[[Any], Any]) -> Any:
        """`work` on the pool's connection; once more on a new one if the first was lost
        (a test that restarts the server drops it)."""
        import psycopg

        try:
            return work(self._connection())
        except psycopg.OperationalError:
            if self._conn is not None and not self._conn.broken:
                raise
            self._conn = None
            return work(self._connection())

    # --- taking and giving back -----------------------------------------------------------

    def url(self, schema: str) -> str:
        from .postgres import with_schema

        return with_schema(self.base, schema)

    def take(self, partitions: int | None = None) -> str:
        """A schema exactly as a fresh migration leaves it; its name (give it back with
        `give_back`)."""
        free = self._free.setdefault(partitions, [])
        if free:
            held = free.pop()
            self.stats.reused += 1
        else:
            held = self._make(partitions)
        held.uses += 1
        self._taken[held.schema] = held
        return held.schema

    def _make(self, partitions: int | None) -> _Held:
        import agentrt

        schema = f"k_{uuid.uuid4().hex[:12]}"
        agentrt.open_store(self.url(schema), chain_partitions=partitions).close()
        self.stats.made += 1
        if partitions not in self._pristine:
            try:
                self._pristine[partitions] = self._run(lambda conn: _pristine(conn, schema))
            except BaseException:
                self._set_aside.append(schema)  # dropped when the pool closes
                raise
        return _Held(schema, partitions)

    def give_back(self, schema: str) -> str:
        """Empty the schema for the next test, or drop it; say which (`reused`, or why not)."""
        held = self._taken.pop(schema)
        pristine = self._pristine[held.partitions]
        if not self.reuse:  # as before the pool: no reset, the schema dropped
            self.stats.drop("not reused")
            self._run(lambda conn: _drop(conn, schema))
            return "not reused"
        try:
            why = self._run(lambda conn: _reset(conn, schema, pristine))
        except BaseException:
            self._set_aside.append(schema)  # never handed out again; dropped when the pool closes
            raise
        if why == "locked":
            self._set_aside.append(schema)
            self.stats.drop(why)
            return why
        if why is None and held.uses >= RECYCLE_AFTER:
            why = "recycled"
        if why is None:
            self._free[held.partitions].append(held)
            return "reused"
        self.stats.drop(why)
        self._run(lambda conn: _drop(conn, schema))
        return why

    def drop_prefixed(self, schema: str) -> list[str]:
        """Drop every schema named `schema` + `_...` (what a test made by its name: a crash
        matrix's cases); their names."""

        def work(conn: Any) -> list[str]:
            names = [
                str(name)
                for (name,) in conn.execute(
                    "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s ORDER BY 1",
                    (schema + "\\_%",),
                ).fetchall()
            ]
            for name in names:
                _drop(conn, name)
            return names

        return list(self._run(work))

    def close(self) -> None:
        """Drop every schema the pool holds (free, taken or set aside)."""
        names = [h.schema for free in self._free.values() for h in free]
        names += [*self._taken, *self._set_aside]
        self._free.clear()
        self._taken.clear()
        self._set_aside.clear()
        for name in names:
            try:
                self._run(lambda conn, name=name: _drop(conn, name))
            except Exception as exc:
                print(f"agentrt tests: could not drop schema {name}: {type(exc).__name__}")
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _pristine(conn: Any, schema: str) -> _Pristine:
    tables = [
        str(name)
        for (name,) in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = to_regnamespace(%s)::oid "
            "AND relkind = 'r' ORDER BY relname = 'runs', relname",
            (schema,),
        ).fetchall()
        if name not in _KEPT
    ]
    return _Pristine(fingerprint(conn, schema), kept_rows(conn, schema), tuple(tables))


def _reset(conn: Any, schema: str, pristine: _Pristine) -> str | None:
    """Empty `schema` in one transaction if it is as `pristine` was; else why not (and
    nothing of the reset stays)."""
    import psycopg

    refused: list[str] = []
    try:
        with conn.transaction():
            why = _emptied(conn, schema, pristine)
            if why is not None:
                refused.append(why)
                raise psycopg.Rollback()
    except psycopg.errors.LockNotAvailable:
        return "locked"
    return refused[0] if refused else None


def _emptied(conn: Any, schema: str, pristine: _Pristine) -> str | None:
    if conn.execute(_LOCKED_ELSEWHERE, (schema,)).fetchone()[0]:
        return "locked"
    if fingerprint(conn, schema) != pristine.fingerprint:
        return "changed"
    q = f'"{schema}"'
    for table in pristine.emptied:
        conn.execute(f"DELETE FROM {q}.{table}")
    conn.execute(
        "SELECT setval(q.seqrelid::regclass, q.seqstart, false) FROM pg_sequence AS q "
        "JOIN pg_class AS c ON c.oid = q.seqrelid "
        "WHERE c.relnamespace = to_regnamespace(%s)::oid",
        (schema,),
    )
    conn.execute(f"UPDATE {q}.chain_head SET seq = 0, hash = '' WHERE seq <> 0 OR hash <> ''")
    if kept_rows(conn, schema) != pristine.kept:
        return "meta rows changed"
    return None


def _drop(conn: Any, schema: str) -> None:
    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
