"""The tables, created on first use, and the schema version that guards them.

Values (records, events, payloads) are stored as ``json``, not ``jsonb``: ``json`` keeps the text
exactly as written, while ``jsonb`` would turn the float ``1e20`` into an integer and refuses
strings holding ``\\u0000`` — both legal in wf's tagged JSON, which must round-trip exactly.
Ids use the ``"C"`` collation so that the database orders them like Python does (by code
point), whatever the database's locale. "Newest first" is ``ORDER BY seq DESC``: the
creation sequence (version 6), never the ids, which callers may choose.

There are no foreign keys: only a run's lease holder writes its journal and streams, a run is
deleted (by retention) only once finished and with its lease taken, all its rows in one
statement, and a foreign key check would lock the run's row on every append.

Versions and migrations: a new database gets the version-1 tables and then every migration in
order, so the path an existing database takes to the current version is the one every new
database takes too (and is tested by every test). ``ensure`` migrates in place, in the one
transaction that holds the schema's advisory lock: processes of the new wf starting together
migrate once, and a process of an older wf refuses a database stamped with a newer version.
A migration waits while processes of an older wf that announce their version use the tables
(``_users``): one that went on writing as it knows them would leave records the new schema
reads wrongly.
"""

from __future__ import annotations

import asyncio
import hashlib

from wf._exceptions import StoreCorrupted, StoreError, StoreVersionError
from wf.store.postgres import _users
from wf.store.postgres._conn import Conn

VERSION = 16
"""The schema this code writes; a database stamped with a newer one is refused."""

_TABLES = """
CREATE TABLE wf_runs (
    id          text COLLATE "C" PRIMARY KEY,
    workflow    text NOT NULL,
    status      text NOT NULL,
    parent_id   text COLLATE "C",
    due_at      double precision,  -- the queue: NULL finished, 0 due now, 'Infinity' waits
    lease_epoch bigint NOT NULL DEFAULT 0,  -- fencing token, bumped by every lease taken
    record      json NOT NULL
);
CREATE INDEX wf_runs_status ON wf_runs (status, id);
CREATE INDEX wf_runs_workflow ON wf_runs (workflow, id);
CREATE INDEX wf_runs_parent ON wf_runs (parent_id, id) WHERE parent_id IS NOT NULL;
CREATE INDEX wf_runs_due ON wf_runs (due_at, id) WHERE due_at IS NOT NULL;

CREATE TABLE wf_journal (
    run_id text COLLATE "C" NOT NULL,
    seq    integer NOT NULL,
    event  json NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE wf_inbox (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id text COLLATE "C" NOT NULL,
    kind   text NOT NULL,
    data   json NOT NULL
);
CREATE INDEX wf_inbox_run ON wf_inbox (run_id, id);

CREATE TABLE wf_hooks (
    token          text PRIMARY KEY,
    run_id         text COLLATE "C" NOT NULL,
    op             integer NOT NULL,
    payload_schema json,
    created_at     double precision NOT NULL
);
CREATE INDEX wf_hooks_run ON wf_hooks (run_id);

CREATE TABLE wf_stream_chunks (
    run_id text COLLATE "C" NOT NULL,
    name   text NOT NULL,
    idx    integer NOT NULL,
    data   bytea NOT NULL,
    PRIMARY KEY (run_id, name, idx)
);

CREATE TABLE wf_stream_ends (
    run_id text COLLATE "C" NOT NULL,
    name   text NOT NULL,
    chunks integer NOT NULL,
    PRIMARY KEY (run_id, name)
);
"""
"""Version 1: the tables of the first release (never edited: migrations change them)."""


_QUEUES = """
ALTER TABLE wf_runs
    ADD COLUMN IF NOT EXISTS priority integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS queue    text,
    ADD COLUMN IF NOT EXISTS grp      text,
    ADD COLUMN IF NOT EXISTS lane     bigint;  -- order within its group, from wf_lane_seq
CREATE SEQUENCE IF NOT EXISTS wf_lane_seq;
CREATE INDEX IF NOT EXISTS wf_runs_lane ON wf_runs (grp, lane) WHERE grp IS NOT NULL;
CREATE TABLE IF NOT EXISTS wf_rates (
    name text NOT NULL,
    ts   double precision NOT NULL
);
CREATE INDEX IF NOT EXISTS wf_rates_name ON wf_rates (name, ts);
"""

_LOGS = """
CREATE TABLE IF NOT EXISTS wf_logs (
    seq    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id text COLLATE "C" NOT NULL,
    entry  json NOT NULL
);
CREATE INDEX IF NOT EXISTS wf_logs_run ON wf_logs (run_id, seq);
"""

_SCHEDULES = """
CREATE TABLE IF NOT EXISTS wf_schedules (
    id       text COLLATE "C" PRIMARY KEY,
    next_run double precision,
    schedule json NOT NULL
);
CREATE TABLE IF NOT EXISTS wf_tombstones (
    id         text COLLATE "C" PRIMARY KEY,
    workflow   text NOT NULL,
    status     text NOT NULL,
    deleted_at double precision NOT NULL,
    reason     text NOT NULL
);
"""

_CLAIM_ORDER = """
CREATE INDEX IF NOT EXISTS wf_runs_claim ON wf_runs (priority DESC, due_at, id)
    WHERE due_at < 'Infinity'::float8;
"""
"""The queue in claim order (``ORDER BY priority DESC, due_at, id``), runs waiting without a
time left out (``due_at`` NULL when finished, 'Infinity' when waiting for a message or a child).
A claim reads it in order and stops at its ``LIMIT``; with only ``(due_at, id)`` it read and
sorted every due run (the candidate query: 39 ms with 200,000 due runs, 0.12 ms with this). The
upgrade builds it inside the migration's transaction, holding writes to ``wf_runs`` meanwhile
(150 ms for 200,000 runs here)."""

_CREATION_ORDER = """
CREATE SEQUENCE IF NOT EXISTS wf_run_seq;
ALTER TABLE wf_runs
    ADD COLUMN IF NOT EXISTS seq       bigint,
    ADD COLUMN IF NOT EXISTS lane_name text;
UPDATE wf_runs r SET seq = o.n
FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM wf_runs) o
WHERE r.id = o.id AND r.seq IS NULL;
UPDATE wf_runs SET record = ('{"seq":' || seq || ',' || substr(record::text, 2))::json
WHERE record::text LIKE '{"%' AND record->>'seq' IS NULL;
UPDATE wf_runs SET lane_name = CASE WHEN queue IS NOT NULL THEN 'queue ' || queue
                                    ELSE 'workflow ' || workflow END || chr(10) || grp
WHERE grp IS NOT NULL;
SELECT setval('wf_run_seq', (SELECT coalesce(max(seq), 0) + 1 FROM wf_runs), false);
ALTER TABLE wf_runs ALTER COLUMN seq SET DEFAULT nextval('wf_run_seq'),
                    ALTER COLUMN seq SET NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS wf_runs_seq ON wf_runs (seq);
DROP INDEX IF EXISTS wf_runs_status;
DROP INDEX IF EXISTS wf_runs_workflow;
DROP INDEX IF EXISTS wf_runs_parent;
CREATE INDEX IF NOT EXISTS wf_runs_status_seq ON wf_runs (status, seq);
CREATE INDEX IF NOT EXISTS wf_runs_workflow_seq ON wf_runs (workflow, seq);
CREATE INDEX IF NOT EXISTS wf_runs_parent_seq ON wf_runs (parent_id, seq)
    WHERE parent_id IS NOT NULL;
DROP INDEX IF EXISTS wf_runs_claim;
CREATE INDEX IF NOT EXISTS wf_runs_claim_seq ON wf_runs (priority DESC, due_at, seq)
    WHERE due_at < 'Infinity'::float8;
DROP INDEX IF EXISTS wf_runs_lane;
CREATE INDEX IF NOT EXISTS wf_runs_lane_name ON wf_runs (lane_name, lane)
    WHERE lane_name IS NOT NULL;
ALTER TABLE wf_tombstones ADD COLUMN IF NOT EXISTS seq bigint;
"""
"""A store-wide creation sequence (``seq``, from ``wf_run_seq``; also in the record's JSON)
orders equal runs in the queue (``ORDER BY priority DESC, due_at, seq``) and every listing
(``ORDER BY seq DESC``), never the ids; runs of an existing database are numbered in id
order, the order they had. A group lane is named by its queue and group (``lane_name``,
``lane_of``): unrelated workflows no longer share one. Tombstones keep the number, so a
listing paged ``before=`` a run deleted since keeps its place."""

_DEPLOYMENTS = """
ALTER TABLE wf_runs ADD COLUMN IF NOT EXISTS deployment text;
CREATE INDEX IF NOT EXISTS wf_runs_deployment ON wf_runs (deployment, status)
    WHERE deployment IS NOT NULL;
"""
"""The deployment a run is pinned to, for claims that serve one deployment (``AND deployment
= ANY(...)``) and ``wf deployments``: written with the record by every save (a re-pin by ``wf
deployments upgrade`` too). Runs written before pinning are unpinned (NULL): their record's
``deployment`` was the code's hash (``RunRecord.from_json``)."""

_LIST_FILTERS = """
CREATE INDEX IF NOT EXISTS wf_runs_queue_seq ON wf_runs (queue, seq) WHERE queue IS NOT NULL;
CREATE INDEX IF NOT EXISTS wf_runs_grp_seq ON wf_runs (grp, seq) WHERE grp IS NOT NULL;
CREATE INDEX IF NOT EXISTS wf_runs_deployment_seq ON wf_runs (deployment, seq)
    WHERE deployment IS NOT NULL;
"""
"""Listings filtered by named queue, group or deployment read their index newest-created first
(``ORDER BY seq DESC``), however many runs the table holds; finished runs keep all three."""

_COUNTS = """
CREATE TABLE IF NOT EXISTS wf_counts (
    name  text NOT NULL,     -- a run status, or 'tombstones'
    shard integer NOT NULL,  -- the writing backend's pid; 0: folded
    n     bigint NOT NULL,
    PRIMARY KEY (name, shard)
);
CREATE OR REPLACE FUNCTION wf_count_run() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO wf_counts AS c (name, shard, n) VALUES (OLD.status, pg_backend_pid(), -1)
        ON CONFLICT (name, shard) DO UPDATE SET n = c.n - 1;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO wf_counts AS c (name, shard, n) VALUES (NEW.status, pg_backend_pid(), 1)
        ON CONFLICT (name, shard) DO UPDATE SET n = c.n + 1;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION wf_count_tombstone() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO wf_counts AS c (name, shard, n)
    VALUES ('tombstones', pg_backend_pid(), CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END)
    ON CONFLICT (name, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS wf_runs_count_insert ON wf_runs;
DROP TRIGGER IF EXISTS wf_runs_count_update ON wf_runs;
DROP TRIGGER IF EXISTS wf_runs_count_delete ON wf_runs;
DROP TRIGGER IF EXISTS wf_tombstones_count ON wf_tombstones;
CREATE TRIGGER wf_runs_count_insert AFTER INSERT ON wf_runs
    FOR EACH ROW EXECUTE PROCEDURE wf_count_run();
CREATE TRIGGER wf_runs_count_update AFTER UPDATE ON wf_runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE PROCEDURE wf_count_run();
CREATE TRIGGER wf_runs_count_delete AFTER DELETE ON wf_runs
    FOR EACH ROW EXECUTE PROCEDURE wf_count_run();
CREATE TRIGGER wf_tombstones_count AFTER INSERT OR DELETE ON wf_tombstones
    FOR EACH ROW EXECUTE PROCEDURE wf_count_tombstone();
DELETE FROM wf_counts;
INSERT INTO wf_counts (name, shard, n) SELECT status, 0, count(*) FROM wf_runs GROUP BY status;
INSERT INTO wf_counts (name, shard, n) SELECT 'tombstones', 0, count(*) FROM wf_tombstones;
"""
"""Run counts by status (and tombstones) kept as runs change, so ``store_info`` reads a few
rows instead of counting the table. Each backend adds to rows of its own (``shard``: its pid),
so writers never wait on one another's counts; ``store_info`` sums them, folding the rows of
backends that are gone into shard 0. Row triggers keep them: a creation, a deletion, and an
update only when the status changes (the ``WHEN`` test costs no function call). The triggers
are made and the counts taken in the upgrade's transaction, which holds writes to both
tables until it commits, so no change falls between them."""

_LANE_HEADS = """
CREATE INDEX IF NOT EXISTS wf_runs_lane_open ON wf_runs (lane_name, lane)
    WHERE lane_name IS NOT NULL AND due_at IS NOT NULL;
"""
"""The unfinished runs of each group lane, in lane order: what ``lane_ahead`` and a claim's
look at lane heads read, in as many index entries as the lane's width, however many finished
runs the lane has had."""

_LANE_WIDTH = """
ALTER TABLE wf_runs ADD COLUMN IF NOT EXISTS lane_width integer;
"""
"""A grouped run's lane width (``group_concurrency``, 1 unless given), written by its creation
(a run keeps the width it was created with): a claim reads it for every due run of a lane it
looks at, where it parsed the record's JSON for it. Runs created before have none; the claim
still reads theirs from the record."""

_CLAIM_READY = """
CREATE INDEX IF NOT EXISTS wf_runs_claim_ready ON wf_runs (priority DESC, due_at, seq)
    WHERE due_at < 'Infinity'::float8 AND status <> 'running';
"""
"""The queue in claim order without the runs being driven: a claim's look at the runs it may
start (``_CANDIDATES``, ``status <> 'running'``) reads its first runs here. In
``wf_runs_claim_seq`` every running run sits ahead of them (a running run keeps its due-now
time: it is how an orphan is found), so each claim read past all of them: 20,000 running runs
made a claim's look 45-85 ms. A run enters this index while it waits (created, woken, timed)
and leaves it when it starts running."""

_DELIVERIES = """
CREATE TABLE IF NOT EXISTS wf_deliveries (
    id   text COLLATE "C" PRIMARY KEY,
    at   double precision NOT NULL,
    data text NOT NULL
);
CREATE INDEX IF NOT EXISTS wf_deliveries_at ON wf_deliveries (at);
"""
"""Webhook deliveries that carried an idempotency key (``Store.save_delivery``): a retry after
the hook was released still gets the first reply. ``data`` is the delivery's JSON."""

_CLAIM_PLAIN = """
CREATE INDEX IF NOT EXISTS wf_runs_claim_plain ON wf_runs (priority DESC, due_at, seq)
    WHERE due_at < 'Infinity'::float8 AND status <> 'running' AND lane_name IS NULL;
"""
"""The runs of no group lane that a claim may start, in claim order: a claim reads its runs in
no lane here and each lane's head from ``wf_runs_lane_open`` (one probe a lane, see
``_HEADS`` in ``_store``), never the runs waiting behind a busy head. In
``wf_runs_claim_ready`` those sit among the others: a 1,500-run backlog in 10 groups had a
claim read about 170 of them per run it claimed."""

_SCHEDULES_DUE = """
CREATE INDEX IF NOT EXISTS wf_schedules_next ON wf_schedules (next_run)
    WHERE next_run IS NOT NULL;
"""
"""The schedules by next fire time: a worker's pass reads the due ones and the earliest later
fire (``due_schedules``), not every schedule (1,000 idle schedules had each pass read them all,
and on PostgreSQL each fire's notification made every worker read them all again)."""

_LOGS_CHECKED = """
ALTER TABLE wf_logs ADD COLUMN IF NOT EXISTS checked boolean DEFAULT false;
ALTER TABLE wf_logs ALTER COLUMN checked DROP DEFAULT;
CREATE INDEX IF NOT EXISTS wf_logs_unchecked ON wf_logs (run_id, seq) WHERE checked IS NULL;
CREATE OR REPLACE FUNCTION wf_log_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.checked := NULL;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS wf_logs_changed ON wf_logs;
CREATE TRIGGER wf_logs_changed BEFORE UPDATE ON wf_logs
    FOR EACH ROW EXECUTE PROCEDURE wf_log_changed();
"""
"""Which step log rows are entries as wf wrote them: ``checked`` is true on a row that
``append_logs`` checked in Python (``_decode.is_log_entry``) and that nothing changed since
(the trigger clears it on any ``UPDATE``; wf never updates a log row, so its writes pay
nothing); false on a row that was there at this upgrade (trusted as wf's: readers drop one
that is no entry from their answer, but count it in ``start``; checking an old run's 10,000
entries in Python made reading them whole ~1.4x as long, their last lines no longer); NULL
on a row another writer inserted after it. Readers check the NULL rows alone, in Python,
found by the partial index (empty when only wf writes the table, and built empty at the
upgrade). Checking every row in SQL on every read was too slow (each ``->`` of a ``json``
parses the row again: ~45x; one ``::jsonb`` a row: 3.6x to 18x), and fails on an entry wf
wrote: PostgreSQL's ``->`` and ``jsonb`` refuse ``\\u0000`` (a NUL a step printed) anywhere
in the row. The default is kept in the catalog, not written to the rows (PostgreSQL 11 and
newer: no rewrite; 10 rewrites the table once), and dropped so that a row another writer
inserts gets NULL. ``EXECUTE PROCEDURE``, not ``FUNCTION``: PostgreSQL 10 has only that
spelling."""

MIGRATIONS: list[tuple[int, str]] = [
    (2, _QUEUES),  # queues: priority, named queue, group lane; rate-limit windows
    (3, _LOGS),  # step logs: what steps printed or logged, per attempt
    (4, _SCHEDULES),  # cron schedules; tombstones of runs deleted by retention
    (5, _CLAIM_ORDER),  # the queue in claim order: claims that do not sort the backlog
    (6, _CREATION_ORDER),  # a creation sequence orders queue and listings; lanes per queue
    (7, _DEPLOYMENTS),  # runs pinned to a deployment
    (8, _LIST_FILTERS),  # listings by queue, group and deployment from indexes
    (9, _COUNTS),  # run counts kept as runs change
    (10, _LANE_HEADS),  # lane heads read from the unfinished runs alone
    (11, _LANE_WIDTH),  # a grouped run's lane width in a column of its own
    (12, _CLAIM_READY),  # the queue in claim order without the running runs
    (13, _DELIVERIES),  # webhook deliveries kept for retries after the hook is released
    (14, _CLAIM_PLAIN),  # the queue in claim order without grouped runs: lanes by their heads
    (15, _SCHEDULES_DUE),  # schedules by next fire time: a pass reads the due ones alone
    (16, _LOGS_CHECKED),  # step log rows checked as written: readers check the others alone
]
"""Numbered steps, in order: step ``n`` upgrades a schema of version ``n - 1``. A new step is
appended with the next number (and ``VERSION`` raised to it); steps are idempotent, and all of
them run in the one transaction that ``ensure`` holds under its advisory lock."""


async def _upgrade(conn: Conn, version: int) -> None:
    for number, statements in MIGRATIONS:
        if number > version:
            await conn.execute(statements)
    await conn.execute("UPDATE wf_meta SET value = %s WHERE key = 'schema_version'", [str(VERSION)])


def lock_key(namespace: str, name: str) -> int:
    """A signed 64-bit advisory lock key for ``name`` within ``namespace`` (the schema).

    Advisory locks are shared by the whole database, so the schema is part of the key: two wf
    stores in one database never contend. A collision only makes a lease look busy.
    """
    digest = hashlib.blake2b(f"{namespace}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


_CURRENT = f"""
SELECT current_schema(), to_regclass(quote_ident(current_schema()) || '.wf_meta') IS NOT NULL,
       {_users.ANNOUNCE_CURRENT}
"""
"""The current schema, whether it has wf's tables, and this session's announcement that it
speaks this version of them (``_users``), taken before the version is read."""


async def _current(conn: Conn, schema: str | None) -> tuple[str | None, str | None]:
    """The schema's name if its tables are there at this code's version, read without a write
    (a read-only server, a replica, can still be read from), else None; and the schema this
    session announced itself to (None if none exists yet)."""
    row = await (await conn.execute(_CURRENT, [VERSION])).fetchone()
    announced = str(row[0]) if row is not None and row[0] is not None else None
    if row is None or row[0] is None or not row[1] or (schema is not None and row[0] != schema):
        return None, announced
    # The current schema is the first of the search path that exists: its wf_meta is this.
    cur = await conn.execute("SELECT value FROM wf_meta WHERE key = 'schema_version'")
    found = await cur.fetchone()
    return (str(row[0]) if found is not None and found[0] == str(VERSION) else None), announced


async def ensure(conn: Conn, schema: str | None, wait: float | None = None) -> str:
    """Create the schema and tables if missing, check the version; return the schema's name.

    The tables at this code's version are only read: nothing is written (not even
    ``CREATE ... IF NOT EXISTS``, which a read-only transaction refuses), so a store on a
    read-only server or a replica still reads. Else it runs in one transaction under an
    advisory lock, so that processes starting together neither race on ``CREATE`` nor see half
    a schema. An upgrade waits while sessions of an older wf use the tables (``_users``), at
    most ``wait`` seconds (None: until they end).
    """
    current, announced = await _current(conn, schema)
    if current is not None:
        return current
    with _users.waiting("wf's tables", VERSION, wait) as waiting:
        while True:
            async with conn.transaction():
                current, version = await _locked(conn, schema, announced)
                announced = current
                if version is None or version == VERSION:
                    # At this version after a wait: another wf upgraded them meanwhile.
                    waiting.elsewhere = version == VERSION
                    return current
                waiting.where = f"wf's tables in PostgreSQL schema {current!r}"
                if await _users.shut_out(conn, current, VERSION):
                    waiting.check()
                    await _upgrade(conn, version)  # in place, in this transaction
                    return current
                found = await _users.holders(conn, current, VERSION)
            if found:
                await waiting.pause(version, found)
            else:  # they ended between the try and the look: try again
                await asyncio.sleep(_users.POLL / 10)


async def _locked(conn: Conn, schema: str | None, announced: str | None) -> tuple[str, int | None]:
    """Under the schema's advisory lock, in the caller's transaction: the schema's name and the
    version of its tables, or None when they were just created at this version."""
    if schema is not None:
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key("wf-schema", schema)])
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")  # validated identifier
    row = await (await conn.execute("SELECT current_schema()")).fetchone()
    current = row[0] if row else None
    if current is None:
        raise StoreError(
            "PostgreSQL has no schema to create wf's tables in: the search_path names no "
            "existing schema (pass schema=... to PostgresStore or fix search_path)"
        )
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key("wf-schema", current)])
    if announced != current:
        await _users.announce(conn, current, VERSION)  # a schema made just now
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS wf_meta (key text PRIMARY KEY, value text NOT NULL)"
    )
    cur = await conn.execute("SELECT value FROM wf_meta WHERE key = 'schema_version'")
    found = await cur.fetchone()
    if found is None:
        cur = await conn.execute(
            "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'wf_runs'",
            [current],
        )
        if await cur.fetchone() is not None:
            # Creating the tables would fail on the first one ("relation wf_runs already
            # exists"), and guessing their version could upgrade them wrongly: say so.
            raise StoreCorrupted(
                f"wf_meta in PostgreSQL schema {current!r} has no schema_version row (it was "
                "emptied or dropped) but wf's tables exist: put it back with INSERT INTO "
                "wf_meta (key, value) VALUES ('schema_version', 'N'), N the version of "
                f"the wf that made them (this wf writes version {VERSION}), or drop wf's "
                "tables to start afresh"
            )
        await conn.execute(_TABLES)
        await conn.execute("INSERT INTO wf_meta (key, value) VALUES ('schema_version', '1')")
        await _upgrade(conn, 1)
        return str(current), None
    try:
        version = int(found[0])
    except (TypeError, ValueError):
        raise StoreCorrupted(
            f"wf_meta.schema_version in PostgreSQL schema {current!r} is {found[0]!r}, not "
            f"a version number: the wf tables are damaged (this wf writes version {VERSION})"
        ) from None
    if version > VERSION:
        raise StoreVersionError(_newer(current, version))
    return str(current), version


def _newer(schema: str, version: int) -> str:
    return (
        f"the wf tables in PostgreSQL schema {schema!r} have version {version}, written "
        f"by a newer version of wf (this one knows version {VERSION}); upgrade wf"
    )


async def recheck(conn: Conn, schema: str) -> None:
    """A new query connection of a store already open: announce this version (``_users``),
    then make sure the tables were not upgraded meanwhile by a newer wf (while this process
    had no connection, so its upgrade did not wait for it): ``StoreVersionError`` if so."""
    await _users.announce(conn, schema, VERSION)
    cur = await conn.execute("SELECT value FROM wf_meta WHERE key = 'schema_version'")
    found = await cur.fetchone()
    if (
        found is not None
        and str(found[0]).isascii()
        and str(found[0]).isdigit()
        and int(found[0]) > VERSION
    ):
        raise StoreVersionError(
            _newer(schema, int(found[0])) + " (a newer wf upgraded them while this process ran)"
        )
