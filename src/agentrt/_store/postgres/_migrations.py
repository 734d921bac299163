"""The PostgreSQL record's format: the same tables as SQLite's, its migrations, its safety check.

The versions are SQLite's (`schema_migrations` reaches the same `SCHEMA_VERSION`,
`agentrt_meta` holds the same `min_writer_version`), each migration written for
PostgreSQL. The differences (decision 0079): integers are `bigint`; text is
`text COLLATE "C"` (bytewise order and comparison, as SQLite's); times stay the
stored ISO text; each table SQLite gives an implicit `rowid` has an identity
column `rowid` (insertion order); `events.seq` is handed out under the lock of
the run's chain partition's head, a row of `chain_head` (as in SQLite since
migration 5: its last seq issued and that event's hash; decision 0093). A new
schema has `DEFAULT_PARTITIONS` partitions unless told.

All pending migrations run in one transaction under an advisory lock on the
schema, so two processes opening a new schema apply each once. A released
migration is never edited; a change is a new one.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors

from ..._clock import format_time, wall_clock
from ..._errors import SchemaVersionError, StoreError, UnsafeSchemaError
from ..sqlite._migrations import (
    CREATE_IN_SCHEMA,
    MIGRATE_IT,
    RUNTIME_VERSION,
    SCHEMA_VERSION,
    already_made,
    parse_version,
    recorded_version,
    settle_partitions,
)
from ._connection import TABLES, one_line, rollback_quietly

_T = "text COLLATE \"C\" NOT NULL DEFAULT ''"
_I = "bigint NOT NULL DEFAULT 0"
_ROWID = "rowid bigint GENERATED ALWAYS AS IDENTITY UNIQUE"

_V1 = f"""\
CREATE TABLE schema_migrations (
    version bigint PRIMARY KEY NOT NULL,
    applied_at {_T}
);
CREATE TABLE agentrt_meta (
    key text COLLATE "C" PRIMARY KEY NOT NULL,
    value {_T}
);
INSERT INTO agentrt_meta (key, value) VALUES ('min_writer_version', '0.1.0');
CREATE TABLE runs (
    id text COLLATE "C" PRIMARY KEY NOT NULL,
    goal {_T}, status {_T}, reason {_T}, reason_detail {_T}, limits_json {_T},
    step_count {_I}, created_at {_T}, started_at {_T}, finished_at {_T}, result_json {_T},
    model_calls {_I}, input_tokens {_I}, output_tokens {_I}, cached_input_tokens {_I},
    estimated_cost_micros {_I}, active_ms {_I},
    lease_owner {_T}, lease_expires_at {_T}, lease_epoch {_I}, lease_holder {_T},
    {_ROWID}
);
CREATE INDEX runs_status ON runs (status);
CREATE TABLE steps (
    id text COLLATE "C" PRIMARY KEY NOT NULL,
    run_id text COLLATE "C" NOT NULL REFERENCES runs (id),
    idx bigint NOT NULL,
    status {_T}, decision_json {_T}, policy_json {_T}, observation_json {_T},
    observation_hash {_T}, started_at {_T}, finished_at {_T}, spec_hash {_T}, policy_id {_T},
    {_ROWID},
    UNIQUE (run_id, idx)
);
CREATE TABLE events (
    seq bigint PRIMARY KEY,
    run_id text COLLATE "C" NOT NULL REFERENCES runs (id),
    step_id {_T}, at {_T}, type {_T}, payload_json {_T}, hash {_T}
);
CREATE INDEX events_run_seq ON events (run_id, seq);
CREATE TABLE chain_head (
    id integer PRIMARY KEY CHECK (id = 1),
    seq {_I}
);
INSERT INTO chain_head (id, seq) VALUES (1, 0);
CREATE TABLE approvals (
    id text COLLATE "C" PRIMARY KEY NOT NULL,
    run_id text COLLATE "C" NOT NULL REFERENCES runs (id),
    step_id {_T}, kind {_T}, capability_json {_T}, presentation_json {_T}, request_json {_T},
    hash {_T}, status {_T}, created_at {_T}, expires_at {_T}, decided_at {_T},
    decided_by {_T}, note {_T},
    {_ROWID}
);
CREATE INDEX approvals_run_created ON approvals (run_id, created_at);
CREATE TABLE model_calls (
    id text COLLATE "C" PRIMARY KEY NOT NULL,
    run_id text COLLATE "C" NOT NULL REFERENCES runs (id),
    step_id {_T}, attempt {_I}, status {_T}, model {_T},
    input_tokens {_I}, output_tokens {_I}, cached_input_tokens {_I}, cost_micros {_I},
    latency_ms {_I}, error {_T}, dispatched_at {_T}, completed_at {_T},
    {_ROWID}
);
CREATE INDEX model_calls_run ON model_calls (run_id);
CREATE TABLE tool_specs (
    hash text COLLATE "C" PRIMARY KEY NOT NULL,
    spec_json {_T}
)
"""

_V2 = """\
ALTER TABLE runs ADD COLUMN origin text COLLATE "C" NOT NULL DEFAULT 'driver'
"""

# A new database has no steps yet, so the backfill of SQLite's migration 3 has no rows.
_V3 = f"""\
ALTER TABLE steps ADD COLUMN reason_key {_T};
CREATE INDEX steps_run_reason ON steps (run_id, reason_key, idx) WHERE reason_key != ''
"""

# Each large value stored once (SQLite's migration 4, docs/decisions/0084).
_V4 = f"""\
CREATE TABLE stored_values (
    hash text COLLATE "C" PRIMARY KEY NOT NULL,
    length {_I},
    body {_T}
)
"""

# The chain in partitions (SQLite's migration 5, docs/decisions/0086, 0093): the one
# head row becomes partition 0's (`part`), which keeps its last event's hash as well;
# a record made before is partition 0 of 1, nothing rewritten. A schema created now
# is given its N after the migrations (`settle_partitions`: 16 unless told).
_V5 = f"""\
ALTER TABLE chain_head DROP CONSTRAINT chain_head_id_check;
ALTER TABLE chain_head RENAME COLUMN id TO part;
ALTER TABLE chain_head ADD COLUMN hash {_T};
UPDATE chain_head SET part = 0,
    seq = greatest(seq, coalesce((SELECT max(seq) FROM events), 0)),
    hash = coalesce((SELECT hash FROM events ORDER BY seq DESC LIMIT 1), '');
ALTER TABLE chain_head ADD CONSTRAINT chain_head_part CHECK (part >= 0);
INSERT INTO agentrt_meta (key, value) VALUES ('chain_partitions', '1');
UPDATE agentrt_meta SET value = '0.2.0' WHERE key = 'min_writer_version'
"""

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, _V1),
    (2, _V2),
    (3, _V3),
    (4, _V4),
    (5, _V5),
)

DEFAULT_PARTITIONS = 16
"""N for a schema created now: a fleet's writers of runs in different partitions commit
without waiting for each other (decision 0086 measured it)."""
assert MIGRATIONS[-1][0] == SCHEMA_VERSION

PROXY_V1 = f"""\
CREATE TABLE proxy_migrations (
    version bigint PRIMARY KEY NOT NULL,
    applied_at {_T}
);
CREATE TABLE proxy_requests (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_key text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL UNIQUE,
    tool {_T}, side_effect {_T}, created_at {_T}
);
CREATE INDEX proxy_requests_key ON proxy_requests (request_key, seq)
"""

# The proxy's look-ups served by an index (decision 0115), as in SQLite's `_PROXY_V2`.
PROXY_V2 = """\
CREATE INDEX proxy_requests_tool ON proxy_requests (tool, seq);
CREATE INDEX proxy_requests_created ON proxy_requests (created_at);
CREATE INDEX proxy_approvals_pending ON approvals (run_id) WHERE status = 'pending'
"""

PROXY_MIGRATIONS: tuple[tuple[int, str], ...] = ((1, PROXY_V1), (2, PROXY_V2))


def statements(script: str) -> list[str]:
    """The statements of one of the scripts above (no `;` inside any of them)."""
    return [s.strip() for s in script.split(";") if s.strip()]


# --- the schema's safety ---------------------------------------------------------------------

# Every function and operator the statements below call is the server's, whatever the
# store's schema holds (decision 0172). The session searches `pg_catalog` first, so a call
# whose argument types match a built-in exactly is that built-in; where the built-in needs
# a coercion (a `name` where it takes `text`, an `oid` compared with a `regclass` or an
# `integer`), a function or operator of the schema taking those exact types would be chosen
# instead, and could blind this guard. So each such call is `pg_catalog`-qualified, and each
# constant compared with an `oid` is made one (`'pg_class'::regclass::oid`, `16384::oid`).
_SCHEMA = "pg_catalog.to_regnamespace(pg_catalog.current_schema()::text)::oid"

# The schema's relations, found through their dependencies on it (decision 0112): every
# relation but an index or a composite type records one on its namespace when created (and
# moves it with `ALTER ... SET SCHEMA`), and `pg_depend` has an index on what is depended
# on, so the schema's relations are one index range and one probe of `pg_class` each, where
# `pg_class` (no index on the namespace alone) was scanned whole. Indexes and composite
# types hold none of what is refused (no trigger, rule, policy or row-level security can be
# put on one). Then each kind is looked up by its index on the relation (decision 0110).
OWN_RELATIONS = f"""\
    SELECT c.oid, c.relname, c.relkind, c.relrowsecurity
    FROM pg_depend AS d JOIN pg_class AS c ON c.oid = d.objid
    WHERE d.refclassid = 'pg_namespace'::regclass::oid AND d.refobjsubid = 0
        AND d.refobjid = {_SCHEMA}
        AND d.classid = 'pg_class'::regclass::oid
        AND c.relnamespace = {_SCHEMA}
"""

# A function or operator in the store's schema: the server may choose it over its own for
# what the store's statements call, where it matches their arguments better (a literal
# taken as `text`), and run it in agentrt's reads and writes (decision 0157). A trigger's
# function is left to the trigger's refusal: SQL cannot call one.
#
# Code of the database's own (a function or operator not built into the server: an oid
# from `FirstNormalObjectId`, 16384, on) that a default, a check constraint or an index
# calls: it runs inside agentrt's writes as a trigger would (decision 0157). Found from
# the code's side, through `pg_depend`'s index on what is depended on: a database holds
# few such functions, where the schema's defaults alone are a hundred. An index on an
# operator class of the database's own calls its support functions in every write to the
# index (a btree's comparison): the index depends on the class, not on the functions.
_CODE = """\
    SELECT DISTINCT f.classid, f.objid FROM pg_depend AS f
    WHERE f.refclassid IN (
            'pg_proc'::regclass::oid, 'pg_operator'::regclass::oid, 'pg_opclass'::regclass::oid)
        AND f.refobjid >= 16384::oid
        AND f.classid IN (
            'pg_attrdef'::regclass::oid, 'pg_constraint'::regclass::oid, 'pg_class'::regclass::oid)
"""

# The shapes of every expression agentrt's migrations make, which `GUARD` passes without
# reading further: a default that is a constant, or a constant made `bigint` (`int8(int4)`,
# one argument, so the constant is all it holds); a check constraint or an index predicate
# that is one built-in comparison (`int4ge`, `textne`, `texteq`) of two leaves (a column, a
# constant: three closing braces in all). Any other expression is read by `_UNSAFE`. Each
# `:` before a field's name is matched by `_`: a statement's `:name` is a placeholder to
# `translate`, and the server writes `:` there.
_PLAIN_DEFAULT = """(a.adbin::text LIKE '{CONST %' OR a.adbin::text LIKE
            '{FUNCEXPR _funcid 481 _funcresulttype 20 _funcretset false _funcvariadic false '
            '_funcformat _ _funccollid 0 _inputcollid 0 _args ({CONST %')"""


def _plain_comparison(tree: str) -> str:
    return (
        f"(({tree} LIKE '{{OPEXPR _opno 525 _opfuncid 150 _opresulttype %' "
        f"OR {tree} LIKE '{{OPEXPR _opno 531 _opfuncid 157 _opresulttype %' "
        f"OR {tree} LIKE '{{OPEXPR _opno 98 _opfuncid 67 _opresulttype %') "
        f"AND pg_catalog.length({tree}) "
        f"- pg_catalog.length(pg_catalog.replace({tree}, '}}', '')) = 3)"
    )


# The expressions the server evaluates inside the store's writes besides its columns' types:
# each default (an insert that leaves its column out), check constraint and index expression
# or predicate of the schema's relations, as its stored node tree (`pg_node_tree`, whose
# constants are written as bytes, so no text of a row can look like a node), and for a
# default its column's type; those of the shapes agentrt makes (above) are not read further.
# Decision 0167.
_EXPRESSIONS = f"""\
    SELECT 'pg_attrdef'::regclass::oid AS classid, a.oid AS objid, a.adbin::text AS tree,
            t.atttypid AS column_type
        FROM own AS c JOIN pg_attrdef AS a ON a.adrelid = c.oid
        JOIN pg_attribute AS t ON t.attrelid = a.adrelid AND t.attnum = a.adnum
        WHERE NOT {_PLAIN_DEFAULT}
    UNION ALL
    SELECT 'pg_constraint'::regclass::oid, k.oid, k.conbin::text, NULL
        FROM own AS c JOIN pg_constraint AS k ON k.conrelid = c.oid
        WHERE k.contype = 'c' AND NOT {_plain_comparison("k.conbin::text")}
    UNION ALL
    SELECT 'pg_class'::regclass::oid, i.indexrelid,
            coalesce(i.indexprs::text, '') || coalesce(i.indpred::text, ''), NULL
        FROM own AS c JOIN pg_index AS i ON i.indrelid = c.oid
        WHERE i.indexprs IS NOT NULL
            OR i.indpred IS NOT NULL AND NOT {_plain_comparison("i.indpred::text")}
"""

# Each function a tree calls: a function call's, an operator's (and a `= ANY` one's hashed
# and negated forms). A built-in operator's function is never volatile, but it is read all
# the same.
_CALLED = r"':(?:funcid|opfuncid|hashfuncid|negfuncid) (\d+)'"

# An internal trigger tied to a relation outside the schema: a foreign key between one of the
# schema's tables and another schema's. Its `ON UPDATE`/`ON DELETE` action writes that table
# inside agentrt's writes, firing whatever trigger it has; agentrt's own foreign keys are
# between its tables (decision 0221).
_FOREIGN_KEY = "a foreign key to or from another schema"
_FOREIGN_KEY_OUT = "t.tgconstrrelid <> 0::oid AND t.tgconstrrelid NOT IN (SELECT own.oid FROM own)"

_UNSAFE = f"""\
WITH code AS MATERIALIZED (
{_CODE}), own AS MATERIALIZED (
{OWN_RELATIONS}), expressions AS MATERIALIZED (
{_EXPRESSIONS})
SELECT 'trigger', t.tgname::text FROM own AS c JOIN pg_trigger AS t ON t.tgrelid = c.oid
    WHERE NOT t.tgisinternal
UNION ALL
SELECT '{_FOREIGN_KEY}', k.conname::text
    FROM own AS c JOIN pg_trigger AS t ON t.tgrelid = c.oid
    JOIN pg_constraint AS k ON k.oid = t.tgconstraint
    WHERE t.tgisinternal AND {_FOREIGN_KEY_OUT}
UNION ALL
SELECT 'rule', r.rulename::text FROM own AS c JOIN pg_rewrite AS r ON r.ev_class = c.oid
    WHERE c.relkind NOT IN ('v', 'm')
UNION ALL
SELECT 'view', c.relname::text FROM own AS c WHERE c.relkind IN ('v', 'm')
UNION ALL
SELECT 'row-level policy', p.polname::text FROM own AS c JOIN pg_policy AS p ON p.polrelid = c.oid
UNION ALL
SELECT 'row-level security on', c.relname::text FROM own AS c WHERE c.relrowsecurity
UNION ALL
SELECT 'a function of its own called by', pg_catalog.pg_describe_object(f.classid, f.objid, 0)
    FROM code AS f WHERE EXISTS (
        SELECT FROM pg_depend AS d WHERE d.classid = f.classid AND d.objid = f.objid
            AND d.refclassid = 'pg_class'::regclass::oid AND d.refobjid IN (SELECT oid FROM own))
UNION ALL
SELECT 'a volatile function called by', pg_catalog.pg_describe_object(e.classid, e.objid, 0)
    FROM expressions AS e WHERE EXISTS (
        SELECT FROM pg_catalog.regexp_matches(e.tree, {_CALLED}, 'g') AS m (called)
            JOIN pg_proc AS p ON p.oid = m.called[1]::oid
            WHERE p.oid < 16384::oid AND p.provolatile = 'v')
UNION ALL
SELECT 'a type of its own used by', pg_catalog.pg_describe_object(e.classid, e.objid, 0)
    FROM expressions AS e WHERE EXISTS (
        SELECT FROM pg_depend AS d WHERE d.classid = e.classid AND d.objid = e.objid
            AND d.refclassid = 'pg_type'::regclass::oid AND d.refobjid >= 16384::oid
            -- A default made its column's type: the column is refused, below.
            AND d.refobjid IS DISTINCT FROM e.column_type)
UNION ALL
SELECT 'function', p.oid::regprocedure::text
    FROM pg_depend AS d JOIN pg_proc AS p ON p.oid = d.objid
    WHERE d.refclassid = 'pg_namespace'::regclass::oid AND d.refobjsubid = 0
        AND d.refobjid = {_SCHEMA}
        AND d.classid = 'pg_proc'::regclass::oid
        AND p.prorettype NOT IN ('trigger'::regtype::oid, 'event_trigger'::regtype::oid)
UNION ALL
SELECT 'operator', d.objid::regoperator::text FROM pg_depend AS d
    WHERE d.refclassid = 'pg_namespace'::regclass::oid AND d.refobjsubid = 0
        AND d.refobjid = {_SCHEMA}
        AND d.classid = 'pg_operator'::regclass::oid
UNION ALL
SELECT 'a column of its own type', c.relname::text || '.' || a.attname::text
    FROM own AS c JOIN pg_depend AS t ON t.classid = 'pg_class'::regclass::oid AND t.objid = c.oid
        AND t.objsubid > 0
    JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = t.objsubid
    -- Compared as numbers, so that each relation's own dependencies are read through the
    -- index on the dependent (a few rows each), never the range of every dependency on a
    -- type of the database's own, which grows with every other schema's (a third of the
    -- guard's time before).
    WHERE t.refclassid::int8 = 'pg_type'::regclass::oid::int8 AND t.refobjid::int8 >= 16384
"""
"""What the schema holds that agentrt refuses, each thing named: read at open, by the lease's
renewals, and once a transaction's `GUARD` has found something, to say what; each time only
once `_ANY_UNSAFE` has said the schema holds something (decision 0217)."""


def _on_each(lookup: str) -> str:
    """Whether `lookup` (a catalog's rows of the relation `c.oid`) finds a row for any relation
    of the schema: a lateral subquery, so each relation's rows are read through the catalog's
    index on the relation, and the planner estimates no join (decision 0217)."""
    return f"EXISTS (SELECT FROM own AS c CROSS JOIN LATERAL ({lookup} LIMIT 1) AS x)"


# Whether `_UNSAFE` would find anything, at a fraction of its cost: `check_schema` runs it first
# and `_UNSAFE` only when it says yes (decision 0217). Each of `_UNSAFE`'s branches has its
# condition here, never narrower, and nothing it names is computed: no `pg_attribute`, no
# `pg_describe_object`, no regular expression. Where a branch reads a subset of what is tested
# here, a row of the superset is enough to read `_UNSAFE`, which decides:
# - a rule on a view or a materialized view (which `_UNSAFE`'s rule branch passes over) is
#   refused there as a view;
# - the volatile-call and type-of-its-own branches read only the expressions of a shape
#   agentrt does not make (`_EXPRESSIONS`): any such expression answers yes here.
# One plan of a dozen single-relation lookups (`_UNSAFE`'s is of joins whose estimates
# compare the catalogs' statistics, planned afresh on each new connection), and every lookup
# by an index on the schema's relations, however many other schemas the database holds
# (`_UNSAFE` read every default of the database: `pg_attrdef` has no index the planner would
# choose for a join it estimated at one relation).
_TRIGGERS = (
    "SELECT FROM pg_trigger AS t WHERE t.tgrelid = c.oid "
    f"AND (NOT t.tgisinternal OR {_FOREIGN_KEY_OUT})"
)
_RULES = "SELECT FROM pg_rewrite AS r WHERE r.ev_class = c.oid"
_POLICIES = "SELECT FROM pg_policy AS p WHERE p.polrelid = c.oid"
_DEFAULTS = f"SELECT FROM pg_attrdef AS a WHERE a.adrelid = c.oid AND NOT {_PLAIN_DEFAULT}"
_CHECKS = (
    "SELECT FROM pg_constraint AS k WHERE k.conrelid = c.oid AND k.contype = 'c' "
    f"AND NOT {_plain_comparison('k.conbin::text')}"
)
_INDEXES = (
    "SELECT FROM pg_index AS i WHERE i.indrelid = c.oid AND (i.indexprs IS NOT NULL "
    f"OR i.indpred IS NOT NULL AND NOT {_plain_comparison('i.indpred::text')})"
)
_COLUMN_TYPES = (
    "SELECT FROM pg_depend AS t WHERE t.classid = 'pg_class'::regclass::oid "
    "AND t.objid = c.oid AND t.objsubid > 0 "
    "AND t.refclassid::int8 = 'pg_type'::regclass::oid::int8 AND t.refobjid::int8 >= 16384"
)

_ANY_UNSAFE = f"""\
WITH code AS MATERIALIZED (
{_CODE}), own AS MATERIALIZED (
{OWN_RELATIONS})
SELECT EXISTS (SELECT FROM own AS c WHERE c.relkind IN ('v', 'm') OR c.relrowsecurity)
    OR {_on_each(_TRIGGERS)}
    OR {_on_each(_RULES)}
    OR {_on_each(_POLICIES)}
    OR {_on_each(_DEFAULTS)}
    OR {_on_each(_CHECKS)}
    OR {_on_each(_INDEXES)}
    OR {_on_each(_COLUMN_TYPES)}
    OR EXISTS (SELECT FROM pg_depend AS d
        WHERE d.refclassid = 'pg_namespace'::regclass::oid AND d.refobjsubid = 0
            AND d.refobjid = {_SCHEMA}
            AND d.classid IN ('pg_proc'::regclass::oid, 'pg_operator'::regclass::oid))
    OR EXISTS (SELECT FROM code AS f WHERE EXISTS (
        SELECT FROM pg_depend AS d WHERE d.classid = f.classid AND d.objid = f.objid
            AND d.refclassid = 'pg_class'::regclass::oid AND d.refobjid IN (SELECT oid FROM own)))
"""


# The transaction's guard: whether the schema holds anything `_UNSAFE` would name (or an
# expression of a shape agentrt does not make, which `_UNSAFE` then reads), at the least
# cost, since every write transaction runs it (decision 0167). Each relation of the schema is
# read once (its `pg_class` row), and each kind looked up only where the row's own flags say
# it can be: `relhastriggers` and `relhasrules`, which the server sets whenever a trigger or
# rule is made and reads to decide whether to load any (a relation whose flag is off has none
# that would run), and `relchecks`, the count of check constraints it loads. Sequences have
# no defaults, checks, indexes or columns of a type to choose. The function, operator and
# policy lookups are `_UNSAFE`'s, found from the schema's dependents read once.
_FOUND = f"""\
WITH inschema AS MATERIALIZED (
    SELECT d.classid, d.objid FROM pg_depend AS d
    WHERE d.refclassid = 'pg_namespace'::regclass::oid AND d.refobjsubid = 0
        AND d.refobjid = {_SCHEMA}
        AND d.classid IN (
            'pg_class'::regclass::oid, 'pg_proc'::regclass::oid, 'pg_operator'::regclass::oid)
), code AS MATERIALIZED (
{_CODE})
SELECT 'relation' FROM inschema AS d JOIN pg_class AS c ON c.oid = d.objid
    WHERE d.classid = 'pg_class'::regclass::oid AND c.relnamespace = {_SCHEMA} AND (
        c.relkind IN ('v', 'm') OR c.relrowsecurity
        OR c.relhastriggers AND EXISTS (
            SELECT FROM pg_trigger AS t WHERE t.tgrelid = c.oid AND (NOT t.tgisinternal
                OR t.tgconstrrelid <> 0::oid AND t.tgconstrrelid NOT IN (
                    SELECT i.objid FROM inschema AS i
                    WHERE i.classid = 'pg_class'::regclass::oid)))
        OR c.relhasrules AND EXISTS (SELECT FROM pg_rewrite AS r WHERE r.ev_class = c.oid)
        OR c.relkind <> 'S' AND EXISTS (
            SELECT FROM pg_depend AS t
            WHERE t.classid = 'pg_class'::regclass::oid AND t.objid = c.oid
                AND t.objsubid > 0 AND t.refclassid::int8 = 'pg_type'::regclass::oid::int8
                AND t.refobjid::int8 >= 16384)
        OR c.relkind <> 'S' AND EXISTS (
            SELECT FROM pg_attrdef AS a WHERE a.adrelid = c.oid AND NOT {_PLAIN_DEFAULT})
        OR c.relchecks > 0 AND EXISTS (
            SELECT FROM pg_constraint AS k WHERE k.conrelid = c.oid AND k.contypid = 0::oid
                AND k.contype = 'c' AND NOT {_plain_comparison("k.conbin::text")})
        OR c.relkind <> 'S' AND EXISTS (
            SELECT FROM pg_index AS i WHERE i.indrelid = c.oid
                AND (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL)
                AND (i.indexprs IS NOT NULL OR NOT {_plain_comparison("i.indpred::text")})))
UNION ALL
SELECT 'row-level policy' FROM pg_policy AS p
    WHERE p.polrelid IN (
        SELECT d.objid FROM inschema AS d WHERE d.classid = 'pg_class'::regclass::oid)
UNION ALL
SELECT 'code' FROM code AS f WHERE EXISTS (
        SELECT FROM pg_depend AS d WHERE d.classid = f.classid AND d.objid = f.objid
            AND d.refclassid = 'pg_class'::regclass::oid AND d.refobjid IN (
                SELECT i.objid FROM inschema AS i WHERE i.classid = 'pg_class'::regclass::oid))
UNION ALL
SELECT 'function' FROM inschema AS d JOIN pg_proc AS p ON p.oid = d.objid
    WHERE d.classid = 'pg_proc'::regclass::oid
        AND p.prorettype NOT IN ('trigger'::regtype::oid, 'event_trigger'::regtype::oid)
UNION ALL
SELECT 'operator' FROM inschema AS d WHERE d.classid = 'pg_operator'::regclass::oid
"""


def lock_statement(tables: tuple[str, ...]) -> str:
    """`LOCK TABLE` of `tables`, in their order, in `ROW EXCLUSIVE` mode: what every write
    takes of a table anyway, so writers never wait for each other on it, and what every DDL
    that can put code in a table's way waits for (`CREATE TRIGGER`, `CREATE RULE`,
    `CREATE POLICY`, `CREATE INDEX`, every `ALTER TABLE` that sets a default, adds a check,
    changes a column or turns row-level security on). Sent before a transaction's guard,
    so that the guard sees every such change committed before it and none can be made until
    the transaction ends (decision 0172). `ONLY`: a table inheriting from one of them takes
    no part in the store's statements (`translate`), so it is not locked either."""
    return f"LOCK TABLE ONLY {', '.join(tables)} IN ROW EXCLUSIVE MODE"


LOCK = lock_statement(TABLES)
"""The store's tables locked before a write transaction's guard."""

# A table that cannot be locked in its place: gone, or replaced by what is no table (a
# materialized view, a sequence, a foreign table). `check_schema` then says whether the
# schema holds what it refuses; else the lock's failure is the transaction's.
_UNLOCKABLE = (pg_errors.UndefinedTable, pg_errors.WrongObjectType)


def is_unlockable(error: psycopg.Error) -> bool:
    """Whether `error` is `LOCK`'s failure on a table gone or replaced by what is no table."""
    return isinstance(error, _UNLOCKABLE)


def check_schema(conn: psycopg.Connection[Any]) -> None:
    """Refuse a schema holding a trigger, rule, view or row-level policy agentrt did not make,
    or code that would run inside its statements (`_UNSAFE`), naming each thing found.

    Run it inside the transaction whose writes it protects. `_ANY_UNSAFE` first, and
    `_UNSAFE`, which names what it finds, only when that says the schema holds anything
    (decision 0217).
    """
    _refuse_found(conn, conn.execute(_ANY_UNSAFE).fetchone())


def _refuse_found(conn: psycopg.Connection[Any], any_unsafe: Any) -> None:
    """`_UNSAFE`'s refusal, read where `_ANY_UNSAFE`'s row (`any_unsafe`) says yes."""
    if any_unsafe is None or any_unsafe[0] is not False:
        _refuse_unsafe(conn.execute(_UNSAFE).fetchall())


def begin_checked(conn: psycopg.Connection[Any], begin: str, lock: str = LOCK) -> None:
    """`begin` (a `BEGIN ...` without parameters), `lock` (the store's tables, `LOCK`) and
    `check_schema` inside it, sent as one message: one round trip (decision 0100). The
    tables are locked before the check reads the catalogs, so nothing the check passed can
    change before the transaction ends. A table that cannot be locked (`is_unlockable`):
    the schema is checked in a transaction of its own, which says what replaced it when
    that is refused; else the lock's failure is raised, the transaction rolled back."""
    try:
        cursor = conn.execute(f"{begin};\n{lock};\n{_ANY_UNSAFE}")
    except psycopg.Error as e:
        if not is_unlockable(e):
            raise
        rollback_quietly(conn)
        try:
            cursor = conn.execute(f"{begin};\n{_ANY_UNSAFE}")
            if cursor.nextset():
                _refuse_found(conn, cursor.fetchone())
        finally:
            rollback_quietly(conn)
        raise
    # The results: BEGIN's, the lock's, the check's.
    if not (cursor.nextset() and cursor.nextset()):
        raise psycopg.ProgrammingError("the schema check sent with BEGIN gave no result")
    _refuse_found(conn, cursor.fetchone())


_REFUSAL = "agentrt refuses this schema:"

GUARD = (
    f"SELECT CAST('{_REFUSAL} ' || string_agg(kind, ', ') AS integer) "
    f"FROM ({_FOUND}) AS unsafe (kind)"
)
"""The transaction's check as one statement that fails when the schema holds anything it
refuses (a text that is no integer), so that statements pipelined behind it never run then;
`check_schema`, in the transaction begun again, then says what (or, where it finds nothing
after all, the transaction goes on)."""


def is_refusal(error: psycopg.Error) -> bool:
    """Whether `error` is `GUARD`'s failure (then `check_schema` says what was found)."""
    return isinstance(error, pg_errors.InvalidTextRepresentation) and _REFUSAL in str(error)


_CODE_KINDS = (
    "a function of its own called by",
    "a volatile function called by",
    "a type of its own used by",
    "a column of its own type",
    "function",
    "operator",
)


def _refuse_unsafe(found: list[Any]) -> None:
    if found:
        # What a trigger or view names first; code of the database's own after.
        ordered = sorted(found, key=lambda f: (f[0] in _CODE_KINDS, f[0], f[1]))
        named = ", ".join(f"{kind} {name!r}" for kind, name in ordered)
        said = f"the database holds {named}; agentrt refuses a schema with triggers or views"
        kinds = {kind for kind, _ in found}
        others = []
        if kinds - {"trigger", "view"}:
            others.append("rules, row-level policies or row-level security")
        if _FOREIGN_KEY in kinds:
            others.append(
                "foreign keys to or from another schema, whose actions write that schema's "
                "tables inside agentrt's writes"
            )
        if kinds & set(_CODE_KINDS):
            others.append(
                "functions and operators of the database's own, in its schema or in a table's "
                "defaults, checks, indexes or column types, or volatile functions in a table's "
                "defaults, checks or indexes, which run inside agentrt's reads and writes"
            )
        if others:
            said += f" (or {'; or '.join(others)})"
        raise UnsafeSchemaError(said)


def _exists(conn: psycopg.Connection[Any], table: str) -> bool:
    row = conn.execute("SELECT pg_catalog.to_regclass(%s::text)", (table,)).fetchone()
    return row is not None and row[0] is not None


def schema_version(conn: psycopg.Connection[Any]) -> int:
    """The highest migration applied; 0 for a schema agentrt never wrote. A migration record
    changed by hand is refused, as SQLite's (`recorded_version`)."""
    # `agentrt_meta` first, as SQLite's: a migration another session commits between the
    # two reads (outside the migration's lock: `open_existing`) is then found whole.
    meta = _exists(conn, "agentrt_meta")
    if not _exists(conn, "schema_migrations"):
        return recorded_version(None if not meta else (0, None, None), list)
    row = conn.execute(
        "SELECT count(*), min(version), max(version) FROM schema_migrations"
    ).fetchone()
    assert row is not None
    return recorded_version(
        (int(row[0]), row[1], row[2]),
        lambda: [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")],
    )


def check_not_newer(conn: psycopg.Connection[Any]) -> int:
    version = schema_version(conn)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the database was written by a newer agentrt (schema version {version}; this "
            f"agentrt {RUNTIME_VERSION} knows up to {SCHEMA_VERSION}): upgrade agentrt to use it"
        )
    return version


ASK_SCHEMA = "check the URL's database and schema="


def _unmade(schema: str, current: int) -> str:
    if current == 0:
        return f"schema {schema} holds no agentrt store yet"
    return f"the store is at schema version {current} and this agentrt needs {SCHEMA_VERSION}"


def no_schema(schema: str) -> str:
    """What is said of a schema the database does not have (a misspelled `schema=`)."""
    return f"the database has no schema {schema}"


def check_exact(conn: psycopg.Connection[Any]) -> None:
    version = check_not_newer(conn)
    if version == 0:
        raise SchemaVersionError(
            "this schema holds no agentrt record (perhaps the URL is not the one you meant); "
            f"{CREATE_IN_SCHEMA}"
        )
    if version < SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the database was written by an older agentrt (schema version {version}; this "
            f"agentrt {RUNTIME_VERSION} needs {SCHEMA_VERSION}): {MIGRATE_IT}"
        )


def check_writer(conn: psycopg.Connection[Any], runtime_version: str = RUNTIME_VERSION) -> None:
    """Refuse to write a schema whose `min_writer_version` is above `runtime_version`."""
    if not _exists(conn, "agentrt_meta"):
        return
    row = conn.execute("SELECT value FROM agentrt_meta WHERE key = 'min_writer_version'").fetchone()
    required = "" if row is None else str(row[0])
    if required == "":
        return
    try:
        needed = parse_version(required)
    except ValueError:
        raise SchemaVersionError(
            f"the database requires writers of version {required!r}, which this agentrt "
            f"{runtime_version} cannot compare with: refusing to write it"
        ) from None
    if parse_version(runtime_version) < needed:
        raise SchemaVersionError(
            f"the database was written by a newer agentrt and may be written only by agentrt "
            f"{required} or later (this is {runtime_version}): upgrade to write it"
        )


def present_tables(
    conn: psycopg.Connection[Any], names: tuple[str, ...], *, tables_only: bool = False
) -> tuple[str, ...]:
    """Those of `names` the schema holds, in their order (with `tables_only`, only those that
    are tables): a record of an earlier schema version lacks the later tables."""
    rows = conn.execute(
        "SELECT t.name FROM unnest(%s::text[]) WITH ORDINALITY AS t (name, n) "
        "JOIN pg_class AS c ON c.oid = pg_catalog.to_regclass(t.name)::oid "
        "WHERE NOT %s OR c.relkind IN ('r', 'p') ORDER BY t.n",
        (list(names), tables_only),
    ).fetchall()
    return tuple(str(r[0]) for r in rows)


# The migration that made each of `TABLES` made after the first.
_MADE_IN = {"stored_values": 4}


def tables_at(version: int | None = None) -> tuple[str, ...]:
    """`TABLES` a schema of `version` (default `SCHEMA_VERSION`, the one a store opens) has:
    each write transaction locks them all, so one missing fails it (nothing written) and one
    made again is locked as the one it replaced."""
    at = SCHEMA_VERSION if version is None else version
    return tuple(t for t in TABLES if _MADE_IN.get(t, 1) <= at)


def _lock_existing(conn: psycopg.Connection[Any]) -> None:
    """The store's tables that exist (and are tables), in `TABLES`' order, locked `ACCESS
    EXCLUSIVE` until the migration's transaction ends."""
    found = present_tables(conn, TABLES, tables_only=True)
    if found:
        tables = psycopg.sql.SQL(", ").join(psycopg.sql.Identifier(t) for t in found)
        conn.execute(psycopg.sql.SQL("LOCK TABLE ONLY {} IN ACCESS EXCLUSIVE MODE").format(tables))


FOREIGN = (
    "this schema holds no agentrt record but other tables (perhaps the URL is not the one "
    "you meant); agentrt creates a record only in a new or empty schema: nothing was changed"
)


def upgrade(
    conn: psycopg.Connection[Any],
    schema: str,
    *,
    chain_partitions: int | None = None,
    where: str = "",
    foreign: bool = True,
) -> int:
    """Create the schema if needed and bring it to `SCHEMA_VERSION` in one transaction;
    returns the version it found (0: the record was created now).

    Not `foreign`, a schema holding a relation but no record of agentrt's is refused
    (`FOREIGN`) before anything is made in it (`agentrt migrate`, decision 0201).

    A schema created now gets `chain_partitions` heads (default `DEFAULT_PARTITIONS`);
    one that exists keeps its N, and another given for it is refused (`where` names the
    record in that refusal).

    READ COMMITTED whatever the role's `default_transaction_isolation`: a process that
    waited on the lock while another migrated must see what that one committed (a
    snapshot taken before the lock was granted would find no version, and migrate again)."""
    conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
    try:
        conn.execute(
            "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(%s::text))",
            (f"agentrt.migrate.{schema}",),
        )
        found = conn.execute("SELECT pg_catalog.to_regnamespace(%s::text)", (schema,)).fetchone()
        if found is None or found[0] is None:  # a runtime role need not be able to create one
            try:
                conn.execute(
                    psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(schema))
                )
            except pg_errors.InsufficientPrivilege as e:  # most often, a misspelled schema=
                raise StoreError(
                    f"cannot open {where}: {no_schema(schema)}, and this role may not create "
                    f"it ({one_line(str(e))}): {ASK_SCHEMA}"
                ) from e
        check_schema(conn)
        current = check_not_newer(conn)
        if not foreign and current == 0 and _holds_anything(conn, schema):
            raise SchemaVersionError(FOREIGN)
        if 0 < current < SCHEMA_VERSION:
            # Writers lock every table in `TABLES`' order, so a migration altering them
            # takes them all first in that order, and no writer and migration wait on each
            # other both ways; then the schema is checked again under the locks.
            _lock_existing(conn)
            check_schema(conn)
        check_writer(conn)
        applied_at = format_time(wall_clock())
        for version, script in MIGRATIONS:
            if version <= current:
                continue
            for sql in statements(script):
                try:
                    conn.execute(sql)
                except pg_errors.InsufficientPrivilege as e:  # agents' role before the owner
                    raise StoreError(
                        f"cannot open {where}: {_unmade(schema, current)}, and this role may "
                        f"not {'create its tables' if current == 0 else 'migrate it'} "
                        f"({one_line(str(e))}): the schema's owner "
                        f"{'creates them' if current == 0 else 'migrates it'} first "
                        "(agentrt --db URL migrate, or open_store)"
                    ) from e
                except psycopg.Error as e:
                    refusal = already_made(version, current, one_line(str(e)))
                    if refusal is None:
                        raise
                    raise refusal from e
            conn.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (%s, %s)",
                (version, applied_at),
            )
        created = current == 0
        wanted = DEFAULT_PARTITIONS if created and chain_partitions is None else chain_partitions
        settle_partitions(conn, wanted, created=created, mark="%s", where=where)
        check_writer(conn)
        conn.execute("COMMIT")
    except BaseException:
        rollback_quietly(conn)
        raise
    return current


def _holds_anything(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the schema holds a relation (a table, a view, a sequence, ...)."""
    row = conn.execute(
        "SELECT 1 FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s LIMIT 1",
        (schema,),
    ).fetchone()
    return row is not None
