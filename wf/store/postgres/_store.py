"""``PostgresStore``: the ``Store`` contract on PostgreSQL, for many processes and machines.

See ``docs/postgres.md`` for the tables, leases, the queue and notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import Any

import orjson
import psycopg

from wf._exceptions import RunNotFound, StoreCorrupted, StoreError, UsageError
from wf.store._base import (
    WAITING_REPORTED,
    Deleted,
    Event,
    HookRecord,
    InboxMessage,
    Lease,
    LogEntry,
    Pins,
    Progress,
    QueueStats,
    RunRecord,
    RunStatus,
    Schedule,
    ScheduleLock,
    Slot,
    Store,
    StoreStats,
    Tombstone,
    WebhookDelivery,
    kept_count,
    lane_of,
)
from wf.store._decode import checked_events, checked_message, is_log_entry, journal_problems
from wf.store.postgres._conn import (
    Conn,
    Unreadable,
    build_conninfo,
    describe,
    failure,
    json_param,
    one_line,
    readable,
    refused_value,
)
from wf.store.postgres._lease import PostgresLease, due_at, record_json
from wf.store.postgres._locks import GRANTED, Then
from wf.store.postgres._schema import VERSION, lock_key
from wf.store.postgres._session import Session, channel_name
from wf.store.postgres._signals import QUEUE, RATES, SCHEDULES
from wf.store.postgres._users import one_shot_wait
from wf.store.postgres._writes import WITH_SEQ

log = logging.getLogger("wf.store.postgres")


def _list_where(
    statuses: Sequence[RunStatus] | None,
    workflow: str | None,
    parent_id: str | None,
    queue: str | None,
    group: str | None,
    deployment: str | None,
    before: str | None,
) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause (empty, or ending in a space) and its parameters of a listing."""
    # Every clause is a constant of this function; values only travel as parameters.
    clauses: list[str] = []
    params: list[Any] = []
    if statuses:
        values = _status_values(statuses)
        if len(values) == 1:
            # ``=`` and not ``= ANY``: only then does an index that leads with the status
            # give its runs newest first (a page reads what it shows, not past the others).
            clauses.append("status = %s")
            params.append(values[0])
        else:
            clauses.append("status = ANY(%s)")
            params.append(values)
    if workflow is not None:
        clauses.append("workflow = %s")
        params.append(workflow)
    if parent_id is not None:
        clauses.append("parent_id = %s")
        params.append(parent_id)
    # Each has an index ordered by creation (schema 8), so a page reads what it shows.
    for column, value in (("queue", queue), ("grp", group), ("deployment", deployment)):
        if value is not None:
            clauses.append(f"{column} = %s")
            params.append(value)
    if before is not None:
        # Created before that run, also when it has been deleted since (its tombstone
        # keeps its number); before no run at all when there never was one.
        clauses.append(
            "seq < coalesce((SELECT seq FROM wf_runs WHERE id = %s),"
            " (SELECT seq FROM wf_tombstones WHERE id = %s), 0)"
        )
        params.extend([before, before])
    return (f"WHERE {' AND '.join(clauses)} " if clauses else ""), params


def _status_values(statuses: Sequence[RunStatus]) -> list[str]:
    """The statuses' values, each once, in the order given."""
    return list(dict.fromkeys(RunStatus(s).value for s in statuses))


_WORKFLOW_NAMES = """
WITH RECURSIVE names(workflow) AS (
    (SELECT workflow FROM wf_runs ORDER BY workflow LIMIT 1)
    UNION ALL
    SELECT (SELECT r.workflow FROM wf_runs r WHERE r.workflow > names.workflow
            ORDER BY r.workflow LIMIT 1)
    FROM names WHERE names.workflow IS NOT NULL
)
SELECT workflow FROM names WHERE workflow IS NOT NULL LIMIT 10000
"""
"""The distinct workflow names by a loose index scan: one probe of the workflow index per
name, however many runs each has."""

_CREATE = (
    """
WITH run AS (
    INSERT INTO wf_runs (id, workflow, status, parent_id, due_at, record, priority, queue, grp,
                         lane, lane_name, seq, deployment, lane_width)
    SELECT %(id)s, %(workflow)s, %(status)s, %(parent)s, %(due)s,
           """
    + WITH_SEQ.format(record="%(record)s", seq="s.n")
    + """, %(priority)s,
           %(queue)s, %(group)s,
           CASE WHEN %(lane)s::text IS NULL THEN NULL ELSE nextval('wf_lane_seq') END,
           %(lane)s, s.n, %(deployment)s, %(width)s
    FROM (SELECT nextval('wf_run_seq') AS n) s
    ON CONFLICT (id) DO NOTHING
    RETURNING id, seq
), journal AS (
    INSERT INTO wf_journal (run_id, seq, event)
    SELECT run.id, e.n - 1, e.event
    FROM run, json_array_elements(%(events)s) WITH ORDINALITY AS e(event, n)
)
SELECT count(*), max(seq) FROM run
"""
)
"""A creation, numbered from ``wf_run_seq`` (its number spliced into the record's JSON)."""

_CREATE_EXPLICIT = _CREATE.replace(
    "    ON CONFLICT (id) DO NOTHING",
    "    WHERE NOT EXISTS (SELECT 1 FROM wf_tombstones WHERE id = %(id)s)\n"
    "    ON CONFLICT (id) DO NOTHING",
)
"""A creation of an id the caller gave: none while a tombstone says its run was deleted."""
assert _CREATE_EXPLICIT != _CREATE


def _lane_width(record: RunRecord) -> int | None:
    """The width of the run's group lane (``group_concurrency``, 1 unless given); None for a
    run in no group."""
    if record.group is None:
        return None
    width = (record.limits or {}).get("group_concurrency")
    return int(width) if width is not None else 1


_JOURNAL = """
SELECT (SELECT json_agg(event ORDER BY seq) FROM wf_journal WHERE run_id = r.id)
FROM wf_runs r WHERE r.id = %s
"""

_JOURNAL_FROM = """
SELECT (SELECT json_agg(event ORDER BY seq) FROM (
    SELECT event, seq FROM wf_journal WHERE run_id = r.id ORDER BY seq OFFSET %s
) later)
FROM wf_runs r WHERE r.id = %s
"""

_ACQUIRE = """
WITH locked AS (SELECT id FROM wf_runs WHERE id = %s FOR UPDATE)
UPDATE wf_runs SET lease_epoch = wf_runs.lease_epoch + 1
FROM locked WHERE wf_runs.id = locked.id
RETURNING wf_runs.lease_epoch
"""

_WIDTH = """GREATEST(1, COALESCE(lane_width, CASE
    WHEN (record->'limits'->>'group_concurrency') ~ '^[0-9]{{1,9}}$'
    THEN (record->'limits'->>'group_concurrency')::int END, 1))"""
"""A grouped run's lane width (a template: its braces doubled for ``str.format``):
``lane_width``, else (a run created before that column) its record's ``group_concurrency``,
at least 1. A stray ``UPDATE`` may leave anything there: a width of 0 or below would leave the
lane's runs unclaimed with no word, and a value the server cannot cast to ``int`` (``"x"``,
``1e400``) would fail every claim of the store: whatever is not a plain count reads as 1 (the
driver's admission reads the record's own). Read by the record's own keys, never from its text,
where the run's input could spell a ``"limits"`` object first."""

_CANDIDATES = (
    """
SELECT c.id, c.lane_name IS NOT NULL AND (
    SELECT count(*) FROM (
        SELECT 1 FROM wf_runs o
        WHERE o.lane_name = c.lane_name AND o.lane < c.lane AND o.due_at IS NOT NULL
        LIMIT c.width
    ) ahead
) >= c.width, c.priority, c.due_at, c.seq
FROM (
    SELECT id, lane_name, lane, priority, due_at, seq,
           CASE WHEN lane_name IS NULL THEN 1
                ELSE """
    + _WIDTH
    + """
           END AS width
    FROM wf_runs
    WHERE due_at <= %(now)s AND due_at < 'Infinity'::float8
      AND status {running} 'running'{queues} AND NOT (id = ANY(%(exclude)s))
    ORDER BY priority DESC, due_at, seq LIMIT %(scan)s
) c
ORDER BY c.priority DESC, c.due_at, c.seq
"""
)
"""Due runs for a claim, in ``due_runs`` order, each with whether it waits in its group's lane
(``group_concurrency`` unfinished runs of the lane ahead of it: ``lane_ahead``, read from the
partial index ``wf_runs_lane_open``; the width from ``lane_width``, or from the record of a run
created before that column) and its place in that order. Runs not ``running`` are read on
every claim, running ones less often: a run that is running and due is driven by someone (or
orphaned, its driver gone), so trying its lock again and again would only make every worker
queue behind every other. When the claim does read them, it merges them into the others by
their places, so that an orphan keeps its turn. ``due_at < 'Infinity'`` follows from a
finite ``now``; it is spelled out so that a generic plan can use the partial indexes
``wf_runs_claim_ready`` (runs not running) and ``wf_runs_claim_seq`` (running ones, for
orphans), read in claim order and stopping at the limit, instead of sorting the backlog or
reading past every running run."""

_HEADS = (
    """
WITH RECURSIVE lanes(name, width, n) AS (
    (SELECT lane_name, """
    + _WIDTH
    + """, 1 FROM wf_runs
     WHERE lane_name IS NOT NULL AND due_at IS NOT NULL ORDER BY lane_name, lane LIMIT 1)
    UNION ALL
    SELECT f.lane_name, f.width, l.n + 1 FROM lanes l CROSS JOIN LATERAL (
        SELECT lane_name, """
    + _WIDTH
    + """ AS width FROM wf_runs
        WHERE lane_name > l.name AND due_at IS NOT NULL ORDER BY lane_name, lane LIMIT 1
    ) f WHERE l.n <= %(lanes)s
), heads AS (
    SELECT h.* FROM lanes l CROSS JOIN LATERAL (
        SELECT id, priority, due_at, seq, status, queue, deployment, """
    + _WIDTH
    + """ AS width,
               row_number() OVER (ORDER BY lane) AS place
        FROM wf_runs WHERE lane_name = l.name AND due_at IS NOT NULL
        ORDER BY lane LIMIT l.width
    ) h
)
(SELECT id, false, priority, due_at, seq FROM (
    (SELECT id, priority, due_at, seq FROM wf_runs
     WHERE due_at <= %(now)s AND due_at < 'Infinity'::float8 AND status <> 'running'
       AND lane_name IS NULL{queues} AND NOT (id = ANY(%(exclude)s))
     ORDER BY priority DESC, due_at, seq LIMIT %(scan)s)
    UNION ALL
    SELECT id, priority, due_at, seq FROM heads
    WHERE place <= width AND due_at <= %(now)s AND status <> 'running'{queues}
      AND NOT (id = ANY(%(exclude)s))
) c ORDER BY priority DESC, due_at, seq LIMIT %(scan)s)
UNION ALL
SELECT NULL, NULL, NULL, NULL, count(*) FROM lanes
"""
)
"""A claim's look by lanes: its first runs in no lane (``wf_runs_claim_plain``) merged in claim
order with each group lane's heads, the first ``width`` unfinished runs of the lane (the width
of its first), those of them due and not running. The lanes are found by a loose index scan of
``wf_runs_lane_open``, one probe a lane, at most ``%(lanes)s + 1`` of them (the last row
counts them, its id NULL), and each lane's heads with one more, so the runs waiting behind a
busy head are never read, however long the lane. A store with more lanes than that goes on
with ``_CANDIDATES`` (``MANY_LANES``)."""

MAX_LANES = 200
"""Lanes a claim's look by lanes (``_HEADS``) visits at most: with more, it reads the queue
in claim order instead (``_CANDIDATES``), where many short lanes' heads come first."""

MANY_LANES = 2.0
"""Seconds a store that found more than ``MAX_LANES`` lanes reads the queue in claim order
before it looks at its lanes again."""

_PINNED = " AND (deployment = ANY(%(pins)s) OR (%(unpinned)s AND deployment IS NULL))"
"""The claim's filter by deployment (``Store.due_runs``'s ``deployments``)."""


def _pin_params(deployments: Pins | None) -> dict[str, Any]:
    if deployments is None:
        return {}
    return {
        "pins": [d for d in deployments if d is not None],
        "unpinned": None in deployments,
    }


_BUMP = """
WITH locked AS (SELECT id FROM wf_runs WHERE id = ANY(%s) ORDER BY id FOR UPDATE)
UPDATE wf_runs SET lease_epoch = wf_runs.lease_epoch + 1
FROM locked WHERE wf_runs.id = locked.id
RETURNING wf_runs.id, wf_runs.lease_epoch
"""
"""``_ACQUIRE`` for a batch (rows locked in id order: two claims never deadlock)."""

_BUMP_GRANTED = _BUMP.replace("ANY(%s)", f"ANY({GRANTED})").replace(
    "FOR UPDATE", "FOR UPDATE NOWAIT"
)
"""``_BUMP`` for the locks the scan before it took (in its round trip: ``Then``). It never
waits for a row lock (``NOWAIT``): the lock connection would wait with it, and every unlock,
watchdog ping and lease attempt of the instance behind it. A row locked by another session
fails it (55P03), and the bump goes by the pool (``_bump_and_read``), where it may wait."""

_CLAIMED = """
SELECT r.id, r.record,
       (SELECT json_agg(event ORDER BY seq) FROM wf_journal WHERE run_id = r.id),
       (SELECT json_agg(json_build_array(m.id, m.kind, m.data) ORDER BY m.id)
        FROM wf_inbox m WHERE m.run_id = r.id)
FROM wf_runs r WHERE r.id = ANY(%s)
"""
"""What the drivers of claimed runs read first, for the whole batch: after the epochs were
bumped (a statement of its own, so that its snapshot sees every write of earlier holders)."""

_CLAIMED_GRANTED = _CLAIMED.replace("ANY(%s)", f"ANY({GRANTED})")
"""``_CLAIMED`` for the locks the scan before it took, after ``_BUMP_GRANTED`` (a statement of
its own, whose snapshot is taken once the bump's row locks are held)."""

MAX_LOOK_PAST = 1_000
"""Candidates a claim reads past the first ``2 × limit + 10``, at most."""


def _scan(limit: int) -> int:
    """Candidates one look of a claim for ``limit`` runs reads (past others' fresh claims)."""
    return 2 * limit + 10


LOOK_DEEPER = 3
"""Further looks a claim takes when everything it read was others' fresh claims."""

ORPHAN_LOOK = 2.0
"""Seconds between two looks at running runs by a claim that found enough others: a run whose
driver died (its lock gone with its connection) is taken over within this delay even while
the queue stays full."""

UNDUE_LOOK = 60.0
"""Seconds between two looks by ``due_schedules`` at the rows with no next fire (the paused
and ended schedules, and rows damaged with a NULL ``next_run`` column): those are not in the
index of due schedules, and reading their JSON on every pass cost 10 ms with 1,000 of them
among 10,000 schedules (against 0.07 ms for the due ones)."""

ORPHAN_LOOK_SHORT = 0.25
"""The same while the queue holds fewer due runs than the claim could take: soon enough for an
orphan, and a worker that every notification wakes does not try every running run's lock."""

_POST = """
WITH run AS (
    SELECT id, due_at FROM wf_runs WHERE id = %(id)s FOR NO KEY UPDATE
), queued AS (
    UPDATE wf_runs SET due_at = 0
    WHERE id = (SELECT id FROM run WHERE due_at IS NOT NULL)
), message AS (
    INSERT INTO wf_inbox (run_id, kind, data)
    SELECT id, %(kind)s, %(data)s FROM run
    RETURNING id
)
SELECT id FROM message
"""
"""A message and the run due now (a live run: a finished one is in no queue). The run's row
is locked first, a finished run's too: a retention delete of the run that has not committed
yet is waited for (under READ COMMITTED the row is then read again, and found gone: no such
run), where an insert beside it would leave an inbox row of no run (the delete cannot see
it); one that commits after the delete's snapshot but before the delete locks the row is
deleted by its second statement (``_DELETE_LATE_INBOX``). The lock is the one the ``UPDATE``
takes (``NO KEY UPDATE``): two posts to one run wait for each other as they did, and never
deadlock on raising a shared lock."""

_POST_ONCE = """
WITH run AS (
    SELECT id, due_at FROM wf_runs WHERE id = %(id)s FOR NO KEY UPDATE
), kept AS (
    INSERT INTO wf_deliveries (id, at, data)
    SELECT %(key)s, %(at)s, %(delivery)s FROM run
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), queued AS (
    UPDATE wf_runs SET due_at = 0
    WHERE id = (SELECT id FROM run WHERE due_at IS NOT NULL) AND EXISTS (SELECT 1 FROM kept)
), message AS (
    INSERT INTO wf_inbox (run_id, kind, data)
    SELECT id, %(kind)s, %(data)s FROM run WHERE EXISTS (SELECT 1 FROM kept)
    RETURNING id
)
SELECT (SELECT id FROM message), (SELECT data FROM wf_deliveries WHERE id = %(key)s),
    EXISTS (SELECT 1 FROM run)
"""
"""``post`` and ``save_delivery`` in one statement, the message only if the delivery was not
kept yet, the run's row locked first as ``_POST`` does. The last ``SELECT`` sees the table as
the statement began: the delivery kept before it (a repeat), never the one it keeps."""

_INBOX = """
SELECT m.id, m.kind, m.data
FROM wf_runs r LEFT JOIN wf_inbox m ON m.run_id = r.id
WHERE r.id = %s ORDER BY m.id
"""

_CANCELS_WAITING = """
SELECT DISTINCT run_id FROM wf_inbox WHERE run_id = ANY(%s) AND kind = 'cancel'
"""

_REGISTER_HOOK = """
INSERT INTO wf_hooks (token, run_id, op, payload_schema, created_at)
VALUES (%(token)s, %(run)s, %(op)s, %(schema)s, %(created)s)
ON CONFLICT (token) DO UPDATE
    SET op = EXCLUDED.op, payload_schema = EXCLUDED.payload_schema,
        created_at = EXCLUDED.created_at
    WHERE wf_hooks.run_id = EXCLUDED.run_id
RETURNING run_id
"""

_HOOK_COLUMNS = "token, run_id, op, payload_schema, created_at"

_CHUNKS = """
SELECT (SELECT array_agg(data ORDER BY idx) FROM wf_stream_chunks
        WHERE run_id = r.id AND name = %(name)s AND idx >= %(start)s),
       EXISTS (SELECT FROM wf_stream_ends WHERE run_id = r.id AND name = %(name)s)
FROM wf_runs r WHERE r.id = %(run)s
"""

# A batch (``max_bytes``): the sizes of the next ``most`` chunks are read (``octet_length``
# of a bytea is its stored length, not a read of its bytes), and only those within the
# budget (the first always) are sent.
_CHUNK_BATCH = """
SELECT (SELECT array_agg(data ORDER BY idx)
        FROM (SELECT idx, data,
                     sum(octet_length(data)) OVER (ORDER BY idx) AS through,
                     row_number() OVER (ORDER BY idx) AS n
              FROM (SELECT idx, data FROM wf_stream_chunks
                    WHERE run_id = r.id AND name = %(name)s AND idx >= %(start)s
                    ORDER BY idx LIMIT %(most)s) next) sized
        WHERE n = 1 OR through <= %(budget)s),
       EXISTS (SELECT FROM wf_stream_ends WHERE run_id = r.id AND name = %(name)s)
FROM wf_runs r WHERE r.id = %(run)s
"""

_MOST_CHUNKS = 4096
"""The chunks a batch holds at most."""

_LOGS = """
SELECT l.entries, l.first, l.checked,
       EXISTS (SELECT FROM wf_logs WHERE run_id = r.id AND checked IS NULL)
FROM wf_runs r,
     LATERAL (SELECT json_agg(entry ORDER BY seq) AS entries, min(seq) AS first,
                     bool_and(checked) AS checked
              FROM (SELECT seq, entry, checked FROM wf_logs WHERE run_id = %(run)s
                    ORDER BY seq OFFSET %(start)s) e) l
WHERE r.id = %(run)s
"""
"""A run's step log rows from ``start`` on, the ``seq`` of the first, whether all of those
were checked as written (false: some were there at schema 16's upgrade), and whether any row
of the run is unchecked (``_schema._LOGS_CHECKED``): when none is, the rows are the answer
(less any from before the upgrade that is no entry). The rows are found by ``%(run)s``, not
``r.id``: a generic plan (a statement prepared after its fifth run) of the lateral reference
read the whole table."""

_UNCHECKED_LOGS = """
SELECT array_agg(seq ORDER BY seq), json_agg(entry ORDER BY seq) FROM wf_logs
WHERE run_id = %(run)s AND checked IS NULL AND (seq < %(before)s OR %(before)s IS NULL)
"""
"""The run's unchecked rows (before ``before``, if not None), from the partial index."""

_UNCHECKED_ROWS = """
SELECT seq, entry FROM wf_logs
WHERE run_id = %(run)s AND checked IS NULL AND (seq < %(before)s OR %(before)s IS NULL)
"""
"""``_UNCHECKED_LOGS`` a row each, decoded alone: one that orjson cannot read spoils the
aggregate."""

_LOG_ROWS = """
SELECT entry FROM wf_logs WHERE run_id = %(run)s AND seq <> ALL(%(skip)s::bigint[])
ORDER BY seq OFFSET %(start)s
"""
"""``_LOGS`` without the rows ``skip``, left out before ``OFFSET``, an entry a row, each
decoded alone."""

_STREAMS = """
SELECT s.name, s.chunks, s.closed
FROM wf_runs r LEFT JOIN LATERAL (
    SELECT coalesce(c.name, e.name) AS name, coalesce(c.n, 0) AS chunks,
           e.name IS NOT NULL AS closed
    FROM (SELECT name, count(*) AS n FROM wf_stream_chunks WHERE run_id = r.id
          GROUP BY name) AS c
    FULL JOIN (SELECT name FROM wf_stream_ends WHERE run_id = r.id) AS e ON c.name = e.name
) AS s ON true
WHERE r.id = %s
"""


# -- schedules and retention (#16) -----------------------------------------------------------

_SAVE_SCHEDULE = """
INSERT INTO wf_schedules (id, next_run, schedule) VALUES (%(id)s, %(next)s, %(schedule)s)
ON CONFLICT (id) DO UPDATE SET next_run = EXCLUDED.next_run, schedule = EXCLUDED.schedule
"""

_DELETE_RUNS = """
WITH candidates AS (
    SELECT c.id, c.key FROM unnest(%(ids)s::text[], %(keys)s::bigint[]) AS c(id, key)
), doomed AS (
    -- A lease is a session advisory lock on the run's key: a run a driver holds is skipped.
    SELECT r.id, r.workflow, r.status, r.seq
    FROM wf_runs r JOIN candidates c ON r.id = c.id
    WHERE r.status IN ('completed', 'failed', 'cancelled') AND pg_try_advisory_xact_lock(c.key)
    FOR UPDATE OF r SKIP LOCKED
), journal AS (
    DELETE FROM wf_journal WHERE run_id IN (SELECT id FROM doomed)
    RETURNING pg_column_size(event) AS n
), inbox AS (
    DELETE FROM wf_inbox WHERE run_id IN (SELECT id FROM doomed)
    RETURNING pg_column_size(data) AS n
), hooks AS (
    DELETE FROM wf_hooks WHERE run_id IN (SELECT id FROM doomed)
), chunks AS (
    DELETE FROM wf_stream_chunks WHERE run_id IN (SELECT id FROM doomed)
    RETURNING pg_column_size(data) AS n
), ends AS (
    DELETE FROM wf_stream_ends WHERE run_id IN (SELECT id FROM doomed)
), logs AS (
    DELETE FROM wf_logs WHERE run_id IN (SELECT id FROM doomed)
    RETURNING pg_column_size(entry) AS n
), runs AS (
    DELETE FROM wf_runs WHERE id IN (SELECT id FROM doomed)
    RETURNING id, pg_column_size(record) AS n
), stones AS (
    INSERT INTO wf_tombstones (id, workflow, status, deleted_at, reason, seq)
    SELECT id, workflow, status, %(now)s, %(reason)s, seq FROM doomed
    ON CONFLICT (id) DO UPDATE SET workflow = EXCLUDED.workflow, status = EXCLUDED.status,
        deleted_at = EXCLUDED.deleted_at, reason = EXCLUDED.reason, seq = EXCLUDED.seq
)
SELECT (SELECT array_agg(id) FROM runs),
       coalesce((SELECT sum(n) FROM runs), 0) + coalesce((SELECT sum(n) FROM journal), 0)
       + coalesce((SELECT sum(n) FROM inbox), 0) + coalesce((SELECT sum(n) FROM chunks), 0)
       + coalesce((SELECT sum(n) FROM logs), 0)
"""

_DELETE_LATE_INBOX = """
WITH inbox AS (
    DELETE FROM wf_inbox WHERE run_id = ANY(%s::text[]) RETURNING pg_column_size(data) AS n
)
SELECT coalesce(sum(n), 0) FROM inbox
"""
"""The messages ``_DELETE_RUNS`` could not see, deleted in its transaction by a statement of
its own. That statement reads one snapshot, taken before it locks a row: a post to a finished
run that locked the row, inserted and committed in between is not waited for (its lock is
gone) and its message is not in the snapshot, so it would be left with no run. This statement's
snapshot holds it; a post after it waits on the row lock the delete holds and finds no run. A
post is the only writer of a finished run (the rest write under the lease, which the delete
skips), so the inbox is the only table to read again."""

_COUNTS = "SELECT name, sum(n) FROM wf_counts GROUP BY name"
_SCAN_COUNTS = (
    "SELECT status, count(*) FROM wf_runs GROUP BY status"
    " UNION ALL SELECT 'tombstones', count(*) FROM wf_tombstones"
)

_FOLD_COUNTS = """
WITH gone AS (
    DELETE FROM wf_counts
    WHERE shard <> 0 AND shard NOT IN (SELECT pid FROM pg_stat_activity)
      AND pg_try_advisory_xact_lock(hashtext(current_schema() || ' wf_counts fold'))
    RETURNING name, n
)
INSERT INTO wf_counts AS c (name, shard, n)
SELECT name, 0, sum(n) FROM gone GROUP BY name ORDER BY name
ON CONFLICT (name, shard) DO UPDATE SET n = c.n + EXCLUDED.n
"""
"""Fold the count rows of backends that are gone into shard 0 (a backend that is alive may be
adding to its rows: those are never touched, so no writer waits on a fold)."""

_SIZE = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r' AND left(c.relname, 3) = 'wf_'
"""

_VERIFY = (
    (
        "SELECT id FROM wf_runs WHERE status IN ('pending', 'running') "
        "AND (due_at IS NULL OR due_at = 'Infinity'::float8) ORDER BY id",
        "not finished but not in the queue (no worker will pick it up)",
    ),
    (
        "SELECT id FROM wf_runs WHERE lease_epoch = 9223372036854775807 ORDER BY id",
        "its lease_epoch is bigint's largest value, so no lease on it can be taken (set it to 0"
        " while no worker drives the run)",
    ),
    (
        "SELECT DISTINCT j.run_id FROM wf_journal j LEFT JOIN wf_runs r ON r.id = j.run_id "
        "WHERE r.id IS NULL ORDER BY j.run_id",
        "journal rows of a run that does not exist",
    ),
    (
        "SELECT DISTINCT h.run_id FROM wf_hooks h LEFT JOIN wf_runs r ON r.id = h.run_id "
        "WHERE r.id IS NULL ORDER BY h.run_id",
        "hook rows of a run that does not exist",
    ),
    (
        "SELECT DISTINCT i.run_id FROM wf_inbox i LEFT JOIN wf_runs r ON r.id = i.run_id "
        "WHERE r.id IS NULL ORDER BY i.run_id",
        "inbox rows of a run that does not exist",
    ),
)
"""Checks the server makes alone (a query listing the runs, and what is wrong with each). A
check of a JSON value is made here, by orjson: the server's operators (``->>``) fail the whole
query on a value PostgreSQL takes but cannot turn into text (a ``\\u0000`` or a lone
surrogate escape), and only orjson says what wf can read."""

VERIFY_PAGE = 2_000
"""Rows ``verify`` reads at a time from each table it checks value by value."""

_VERIFY_RUNS = """
SELECT id, status, record, seq, deployment, due_at FROM wf_runs WHERE id > %s ORDER BY id LIMIT %s
"""

_REPAIR_RECORD = """
UPDATE wf_runs SET record = (
    SELECT json_object_agg(key, value) FROM (
        SELECT key, value FROM json_each(record)
        WHERE key NOT IN (SELECT json_object_keys(%(patch)s::json))
        UNION ALL SELECT key, value FROM json_each(%(patch)s::json)
    ) AS merged
)
WHERE id = %(id)s AND deployment IS NOT DISTINCT FROM %(column)s
      AND (record->>'seq') IS NOT DISTINCT FROM %(seq)s
      AND (record->>'deployment') IS NOT DISTINCT FROM %(deployment)s
      AND (record->>'code_hash') IS NOT DISTINCT FROM %(code_hash)s
RETURNING id
"""
"""Sets only the repaired keys of a record: a save by an older worker between verify's read
and this update leaves the three guarded keys as they were, and its status and output must
stay. Merged with ``json`` functions, not ``jsonb``'s ``||``: ``jsonb`` refuses a record
holding a ``\\u0000``, which ``verify`` names without failing."""

_VERIFY_JOURNAL = """
SELECT j.run_id, j.seq, j.event,
       j.seq = 0 AND EXISTS (SELECT FROM wf_runs r WHERE r.id = j.run_id)
FROM wf_journal j WHERE (j.run_id, j.seq) > (%s, %s) ORDER BY j.run_id, j.seq LIMIT %s
"""

_VERIFY_INBOX = "SELECT id, data FROM wf_inbox WHERE id > %s ORDER BY id LIMIT %s"

_TEXT_FIELDS = ("workflow", "parent_id", "deployment")
"""A record's values that each save also writes to a ``text`` column."""


class _PostgresScheduleLock(ScheduleLock):
    def __init__(self, store: PostgresStore, name: str, generation: int) -> None:
        self._store = store
        self._name = name
        self._generation: int | None = generation

    async def release(self) -> None:
        generation, self._generation = self._generation, None
        if generation is not None:
            session = await self._store._ready()
            await session.locks.unlock(self._name, generation)


class PostgresStore(Store):
    """Runs in PostgreSQL, shared by any number of processes and machines.

    ``dsn`` is a libpq connection string or URL (``postgresql://user@host:5432/db``). Tables are
    created on first use in ``schema`` (created too if missing), or else in the first schema of
    the connection's ``search_path``. Each instance opens up to ``pool_size`` connections for
    queries, one that holds the advisory locks of all its leases, and one that listens for
    notifications (and another from its first ``wait_for_run``: see ``_signals``). Bound to
    the event loop it is used in (a new loop gets new connections).
    """

    filters_deployments = True
    claims_lane_heads = True

    def __init__(self, dsn: str, *, schema: str | None = None, pool_size: int = 10) -> None:
        if pool_size < 1:
            raise UsageError("pool_size must be at least 1")
        self.dsn = dsn
        self.schema = schema
        self.pool_size = pool_size
        self._conninfo = build_conninfo(dsn, schema)
        self._label = describe(dsn)
        self._session: Session | None = None
        self._starting: asyncio.Task[Session] | None = None
        self._orphans_at = 0.0
        """Loop time of the next look at running runs by a claim (``ORPHAN_LOOK``)."""
        self._short_at = 0.0
        """The same while the queue runs short (``ORPHAN_LOOK_SHORT``)."""
        self._undue_at = 0.0
        """Loop time of the next look at the rows with no next fire (``UNDUE_LOOK``)."""
        self._others_claiming = 0
        """Candidates the last claim found locked by other processes (see ``claim``)."""
        self._no_lanes_until = 0.0
        """The same after a look by lanes found none: the cheaper look in claim order serves
        until a run waiting in a lane turns up there (or ``MANY_LANES`` seconds pass)."""
        self._counting: set[asyncio.Task[tuple[float | None, str]]] = set()
        """Rate limits' counts in flight (``try_rate``): ``close`` waits for them, since one
        whose caller left is taken back when it ends."""
        self._uncounting: set[asyncio.Task[None]] = set()
        """Rate limits' starts being taken back (``try_rate``), kept from the collector."""
        self._many_lanes_until = 0.0
        """Loop time until which claims read the queue in claim order, not by lanes: the last
        look by lanes found more than ``MAX_LANES`` (see ``_HEADS``)."""

    def __repr__(self) -> str:
        schema = f", schema={self.schema!r}" if self.schema else ""
        return f"PostgresStore({self._label!r}{schema})"

    async def open(self) -> None:
        """Connect, create or check the tables and start listening now, rather than on first use.

        Raises ``StoreError`` if the server cannot be reached, ``StoreVersionError`` if its
        tables were written by a newer wf. An upgrade of the tables waits until no session of
        an older wf uses them, however long; opened by its first operation instead (a one-shot
        command), a store waits ``WF_POSTGRES_UPGRADE_WAIT`` seconds at most (``_users``).
        """
        await (await self._ready(service=True)).signals.listen()

    async def _ready(self, *, service: bool = False) -> Session:
        loop = asyncio.get_running_loop()
        session = self._session
        if session is not None:
            if session.loop is loop:
                return session
            session.abandon()
            self._session = None
        starting = self._starting
        if starting is None or starting.get_loop() is not loop:
            wait = None if service else one_shot_wait()
            starting = self._starting = loop.create_task(
                Session.open(self._conninfo, self._label, self.schema, self.pool_size, wait)
            )
        try:
            session = await asyncio.shield(starting)
        finally:
            if starting.done() and self._starting is starting:
                self._starting = None  # after a failure, the next call tries again
        if self._session is None:
            self._session = session
        return self._session

    async def _fetchone(
        self, what: str, query: str, params: Any, *, run: str | None = None, queue: bool = False
    ) -> tuple[Any, ...] | None:
        async with self._query(what, run, queue) as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

    async def _fetchall(
        self, what: str, query: str, params: Any, *, run: str | None = None, queue: bool = False
    ) -> list[tuple[Any, ...]]:
        async with self._query(what, run, queue) as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    @contextlib.asynccontextmanager
    async def _query(
        self, what: str, run: str | None, queue: bool, runs: bool = False
    ) -> AsyncIterator[Conn]:
        """A pooled connection; notes the read of ``run``, the queue or a listing of runs
        (see ``Signals``)."""
        session = await self._ready()
        async with session.pool.connection(what) as conn:
            # Noted once a connection is in hand, right before the query goes out.
            if run is not None:
                session.signals.reading_run(run)
            if queue:
                session.signals.reading_queue()
            if runs:
                session.signals.reading_runs()
            yield conn

    # -- runs -----------------------------------------------------------------------------

    async def create_run(
        self, record: RunRecord, events: Sequence[Event] = (), *, explicit: bool = False
    ) -> bool:
        params = {
            "id": record.id,
            "workflow": record.workflow,
            "status": record.status.value,
            "parent": record.parent_id,
            "due": due_at(record),
            "record": json_param(record_json(record)),
            "events": json_param(list(events)),
            "priority": record.priority,
            "queue": record.queue,
            "group": record.group,
            "lane": lane_of(record),
            "deployment": record.deployment,
            "width": _lane_width(record),
        }
        create = _CREATE_EXPLICIT if explicit else _CREATE
        if record.group is None:
            row = await self._fetchone("create a run", create, params)
        else:
            # A lane's order is the order of commits: creations of one group take a lock
            # until they commit, so a later lane number is never visible before an earlier one.
            session = await self._ready()
            async with self._query("create a run", None, False) as conn, conn.transaction():
                key = lock_key(session.schema, "lane:" + str(params["lane"]))
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", [key])
                row = await (await conn.execute(create, params)).fetchone()
        created = bool(row and row[0])
        if created:
            assert row is not None
            record.seq = int(row[1])
            (await self._ready()).signals.changed(QUEUE, record.id)
        return created

    async def get_run(self, run_id: str) -> RunRecord:
        row = await self._fetchone(
            "read a run", "SELECT record FROM wf_runs WHERE id = %s", [run_id], run=run_id
        )
        if row is None:
            raise RunNotFound(run_id)
        return record_of(run_id, row[0], self.run_location(run_id))

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        limit: int = 50,
        before: str | None = None,
        parent_id: str | None = None,
        queue: str | None = None,
        group: str | None = None,
        deployment: str | None = None,
    ) -> list[RunRecord]:
        limit = max(0, limit)
        # Several statuses: a page of each, newest first from its index, merged.
        each: list[list[RunStatus] | None] = (
            [[status] for status in dict.fromkeys(RunStatus(s) for s in statuses)]
            if statuses
            else [None]
        )
        out: list[RunRecord] = []
        while len(out) < limit:
            wanted = limit - len(out)
            parts: list[str] = []
            params: list[Any] = []
            for only in each:
                where, more = _list_where(
                    only, workflow, parent_id, queue, group, deployment, before
                )
                parts.append(
                    f"SELECT record, seq, id FROM wf_runs {where}ORDER BY seq DESC LIMIT %s"
                )
                params += [*more, wanted]
            if len(parts) == 1:
                query = parts[0]
            else:
                query = (
                    f"SELECT record, seq, id FROM ({' UNION ALL '.join(f'({p})' for p in parts)})"
                    " AS u ORDER BY seq DESC LIMIT %s"
                )
                params.append(wanted)
            async with self._query("list runs", None, False, runs=True) as conn:
                rows = await (await conn.execute(query, params)).fetchall()
            out += filter(None, (self._listed(row[2], row[0]) for row in rows))
            if len(rows) < wanted:
                break
            before = rows[-1][2]  # a damaged row was left out: the page goes on past it
        return out

    def _listed(self, run_id: str, data: Any) -> RunRecord | None:
        """A listed row's record; None for a damaged one, noted in ``faults`` and left out:
        one damaged run never hides the others."""
        record: RunRecord | None = None
        where = self.run_location(run_id)
        with self.faults.contain("run", run_id, where):
            record = RunRecord.from_json(readable(data, where), run_id)
        return record

    async def search_runs(
        self,
        text: str,
        *,
        limit: int,
        budget: int,
        before: str | None = None,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        parent_id: str | None = None,
        queue: str | None = None,
        group: str | None = None,
        deployment: str | None = None,
    ) -> tuple[list[RunRecord], str | None, int]:
        # The server tests the runs looked at and sends back an id and a flag each; only the
        # matches' records travel.
        where, params = _list_where(statuses, workflow, parent_id, queue, group, deployment, before)
        query = (
            "SELECT id, strpos(lower(id), %s) > 0 OR strpos(lower(workflow), %s) > 0"
            f" FROM wf_runs {where}ORDER BY seq DESC LIMIT %s"
        )
        async with self._query("search runs", None, False, runs=True) as conn:
            rows = await (await conn.execute(query, [text, text, *params, budget])).fetchall()
            hits: list[str] = []
            cursor: str | None = None
            looked = 0
            for run_id, hit in rows:
                looked += 1
                cursor = run_id
                if hit:
                    hits.append(run_id)
                    if len(hits) == limit:
                        break
            if len(rows) < budget and cursor == (rows[-1][0] if rows else None):
                cursor = None  # nothing left after the last run looked at
            found = await (
                await conn.execute(
                    "SELECT id, record FROM wf_runs WHERE id = ANY(%s) ORDER BY seq DESC", [hits]
                )
            ).fetchall()
        return list(filter(None, (self._listed(*row) for row in found))), cursor, looked

    async def workflow_names(self) -> list[str] | None:
        # One index probe per name (``wf_runs_workflow_seq``), never a scan of the runs.
        rows = await self._fetchall("list workflow names", _WORKFLOW_NAMES, [])
        return [str(row[0]) for row in rows]

    async def read_journal(self, run_id: str, start: int = 0) -> list[Event]:
        start = max(0, start)
        if start:
            query, args = _JOURNAL_FROM, [start, run_id]
        else:
            query, args = _JOURNAL, [run_id]
        row = await self._fetchone("read a journal", query, args, run=run_id)
        if row is None:
            raise RunNotFound(run_id)
        return _journal(run_id, row[0], start)

    async def try_acquire(self, run_id: str) -> Lease | None:
        session = await self._ready()
        generation = await session.locks.try_lock(run_id, session.lock_key(run_id))
        if generation is None:
            return None
        try:
            # Bumping the fencing epoch after the lock is taken: writes of any earlier holder
            # that lost its lock are refused from now on.
            row = await self._fetchone("take a run lease", _ACQUIRE, [run_id])
        except BaseException:
            await session.locks.unlock(run_id, generation)
            raise
        if row is None:
            await session.locks.unlock(run_id, generation)
            raise RunNotFound(run_id)
        return PostgresLease(session, run_id, int(row[0]), generation)

    async def claim(
        self,
        now: float,
        limit: int,
        queues: Sequence[str] | None = None,
        exclude: Collection[str] = (),
        held: set[str] | None = None,
        waiting: set[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[Lease]:
        """Due runs' leases in a few round trips for the whole batch, however large.

        1. the candidates, in queue order (``_CANDIDATES``), reading past as many as the last
           claim found locked by other processes: runs not running, and running ones
           (orphans, if their lock is free) every ``ORPHAN_LOOK`` seconds, or every
           ``ORPHAN_LOOK_SHORT`` while the others run short, merged in queue order so
           that an orphan keeps its turn; 2. their advisory locks, first
           free first, in one statement on the lock connection (``Locks.try_many``): locks
           held by other processes are skipped (and reported in ``held``), never waited for;
           3. the fencing epochs of those taken,
           bumped in one statement; 4. their records, journals and inboxes, read in one
           statement, handed to the leases so that drivers start without asking again. 2, 3
           and 4 go in one round trip and one transaction (``Then``): a claim is two round
           trips, the look and the leases.
        """
        if limit <= 0:
            return []
        session = await self._ready()
        # Others' fresh claims still show as not running until their drivers' first writes
        # commit, and every worker reads the same head of the queue: look past them, as far
        # as the last claim found them (with four workers, two or three claims' worth).
        scan = _scan(limit)
        look = scan + self._others_claiming
        lane_waits: set[str] = set() if waiting is None else waiting
        places: dict[str, tuple[int, float, int]] = {}
        found, looked, lanes = await self._candidates(
            now, "<>", queues, exclude, look, deployments, lane_waits, places, lanes=True
        )
        full = looked == look
        if lanes is None and full and len(found) < limit and len(lane_waits) > 0:
            # The look was mostly runs waiting behind their lanes' heads (a group with a long
            # backlog ahead of the others): read past them once, as far as MAX_LOOK_PAST, so
            # that the heads of the lanes behind it are found.
            more, _, _ = await self._candidates(
                now,
                "<>",
                queues,
                {*exclude, *found, *lane_waits},
                MAX_LOOK_PAST,
                deployments,
                lane_waits,
                places,
            )
            found += more
        fresh = set(found)  # (running runs refused are their drivers', not fresh claims)
        moment = asyncio.get_running_loop().time()
        if moment >= self._orphans_at or (len(found) < limit and moment >= self._short_at):
            self._orphans_at = moment + ORPHAN_LOOK
            self._short_at = moment + ORPHAN_LOOK_SHORT
            orphans, _, _ = await self._candidates(
                now, "=", queues, exclude, scan, deployments, lane_waits, places
            )
            if orphans:
                # An orphan keeps its place in the queue (priority, then creation): the locks
                # are tried in this order, and the first free ones taken.
                found = sorted([*found, *orphans], key=places.__getitem__)
        if not found:
            self._others_claiming = 0
            await self._report_waiting(lanes, now, queues, exclude, deployments, waiting)
            return []
        candidates = [(run_id, session.lock_key(run_id)) for run_id in dict.fromkeys(found)]
        # The epochs of the locks taken are bumped and the runs read in the scan's round trip.
        then = Then(functools.partial(self._claim_statements, session))
        try:
            taken, refused, generation = await session.locks.try_many(candidates, limit, then)
        except BaseException:
            for run_id in then.tried:
                session.signals.claim_read_stale(run_id)
            raise
        first = list(taken)
        try:
            passed = sum(r in fresh for r in refused)
            if len(taken) < limit and full and len(fresh) == look and passed:
                # The whole look was others' fresh claims (a worker that starts beside busy
                # ones reads the head they just took), and due runs may wait behind them: a
                # worker that stopped here would sit idle until the next announcement or
                # poll while they drain the queue without it. Read on past what was refused.
                taken, generation, passed = await self._look_deeper(
                    now,
                    limit,
                    queues,
                    {*exclude, *found},
                    refused,
                    taken,
                    generation,
                    passed,
                    deployments,
                )
            self._others_claiming = min(passed, MAX_LOOK_PAST)
            if held is not None:
                held.update(refused)
            for run_id in set(then.tried).difference(taken):
                session.signals.claim_read_stale(run_id)  # not taken (or lost: read again)
            if not taken:
                await self._report_waiting(lanes, now, queues, exclude, deployments, waiting)
                return []
            epochs, rows = await self._claimed_reads(then, first, taken)
        except BaseException:
            for run_id in {*taken, *then.tried}:
                session.signals.claim_read_stale(run_id)
            for run_id in taken:
                await session.locks.unlock(run_id, generation)
            raise
        by_id = {row[0]: row[1:] for row in rows}
        leases: list[Lease] = []
        order = {run_id: i for i, run_id in enumerate(taken)}
        for run_id in sorted(taken, key=order.__getitem__):
            got = by_id.get(run_id)
            if run_id not in epochs or got is None:
                session.signals.claim_read_stale(run_id)
                await session.locks.unlock(run_id, generation)  # deleted meanwhile
                continue
            record_json, journal, inbox = got
            try:
                read = (
                    readable(record_json, self.run_location(run_id)),
                    _journal(run_id, journal),
                    _inbox(readable(inbox, f"the inbox of run {run_id!r} in wf_inbox") or []),
                )
            except StoreCorrupted as error:  # the run alone: noted, given back, the claim goes on
                self.faults.note("run", run_id, self.run_location(run_id), error)
                session.signals.claim_read_stale(run_id)
                await session.locks.unlock(run_id, generation)
                continue
            lease = PostgresLease(session, run_id, epochs[run_id], generation, read)
            lease.heads_lane = True  # ``_candidates`` left out the runs that wait in lanes
            leases.append(lease)
        return leases

    async def _report_waiting(
        self,
        lanes: int | None,
        now: float,
        queues: Sequence[str] | None,
        exclude: Collection[str],
        deployments: Pins | None,
        waiting: set[str] | None,
    ) -> None:
        """For a claim that leases nothing: a look by lanes (``lanes``: how many it found)
        never read the runs waiting behind their heads, so read the queue's first
        ``WAITING_REPORTED`` in claim order to say which they are (``Store.claim``). Only then
        (a worker driving nothing asks), and only if some lane has unfinished runs."""
        if lanes and waiting is not None:
            await self._candidates(
                now, "<>", queues, exclude, WAITING_REPORTED, deployments, waiting
            )

    @staticmethod
    def _claim_statements(session: Session, tried: list[str]) -> list[tuple[str, list[object]]]:
        """The statements a claim's lock scan is followed by (``Then``): the epochs of the
        runs it locked bumped, then those runs read (``_bump_and_read``). Posts heard of from
        now on may be missed by the read: their drivers read again."""
        session.signals.claim_reading(tried)
        return [(_BUMP_GRANTED, []), (_CLAIMED_GRANTED, [])]

    async def _claimed_reads(
        self, then: Then, first: list[str], taken: list[str]
    ) -> tuple[dict[str, int], list[tuple[Any, ...]]]:
        """The new epochs and ``_CLAIMED``'s rows of the runs ``taken``: those of the scan's
        own runs (``first``) from its round trip (``then``), the rest's (a look past others'
        claims) read now. A statement after the scan refused for a value (a ``lease_epoch`` at
        bigint's largest) or a bump that met a row locked by another session
        (``_BUMP_GRANTED``) wrote nothing: the scan's runs then go as the rest do."""
        epochs: dict[str, int] = {}
        rows: list[tuple[Any, ...]] = []
        kept = set(taken)
        scanned = [run_id for run_id in first if run_id in kept]
        rest = [run_id for run_id in taken if run_id not in set(first)]
        if scanned and then.error is not None:
            waits = isinstance(then.error, psycopg.errors.LockNotAvailable)
            if not waits and not refused_value(then.error):
                raise failure("PostgreSQL failed to take run leases", then.error) from then.error
            rest = scanned + rest
        elif scanned:
            assert then.rows is not None
            bumped, read = then.rows
            epochs = {row[0]: int(row[1]) for row in bumped if row[0] in kept}
            rows = [row for row in read if row[0] in kept]
        if rest:
            more_epochs, more_rows = await self._bump_and_read(rest)
            epochs.update(more_epochs)
            rows += more_rows
        return epochs, rows

    async def _bump_and_read(
        self, taken: list[str]
    ) -> tuple[dict[str, int], list[tuple[Any, ...]]]:
        """Each claimed run's new ``lease_epoch`` (run id -> epoch) and what ``_CLAIMED`` reads
        of them: one round trip, the two statements pipelined in one transaction. The read is
        a statement of its own after the bump (under ``READ COMMITTED`` its snapshot is taken
        once the bump's row locks are held, so it sees every write of earlier holders), sent
        without waiting for the bump's reply. A bump the server refuses for a value (see
        ``_bump``) wrote nothing: then the two go as before, the bump run by run."""
        session = await self._ready()
        # Posts heard of from now on may be missed by the read: their drivers read again (a
        # run left out by the bump is forgotten by the caller, as one the read did not find).
        session.signals.claim_reading(taken)
        try:
            async with self._query("take run leases", None, False) as conn, conn.pipeline():
                bumped = await conn.execute(_BUMP, [taken])
                read = await conn.execute(_CLAIMED, [taken])
                # Both replies are in once the pipeline has synced (at the block's end).
            epochs = {row[0]: int(row[1]) for row in await bumped.fetchall()}
            return epochs, await read.fetchall()
        except StoreError as error:
            if not refused_value(error):
                raise
        epochs = await self._bump(taken)
        if not epochs:
            return epochs, []
        return epochs, await self._fetchall("read claimed runs", _CLAIMED, [list(epochs)])

    async def _bump(self, taken: list[str]) -> dict[str, int]:
        """Each claimed run's new ``lease_epoch`` (run id -> epoch), in one statement.

        A value the server refuses (a ``lease_epoch`` at bigint's largest value, which only a
        hand edit makes) fails the statement for every run of the batch: it is then sent run by
        run, as ``Writes`` does for saves, so that the run that holds it alone is noted as
        damaged (``faults``) and left out, and the others are driven."""
        try:
            rows = await self._fetchall("take run leases", _BUMP, [taken])
        except StoreError as error:
            if not refused_value(error) or len(taken) == 1:
                if refused_value(error):
                    self._refused_bump(taken[0], error)
                    return {}
                raise
            rows = []
            for run_id in taken:
                try:
                    rows += await self._fetchall("take run leases", _BUMP, [[run_id]])
                except StoreError as one:
                    if not refused_value(one):
                        raise
                    self._refused_bump(run_id, one)
        return {row[0]: int(row[1]) for row in rows}

    def _refused_bump(self, run_id: str, error: StoreError) -> None:
        reason = one_line(error.__cause__ or error)
        damage = StoreCorrupted(
            f"{self.run_location(run_id)}: PostgreSQL refused to count its lease ({reason}):"
            " its lease_epoch is out of range; set it to 0 while no worker drives the run"
        )
        self.faults.note("run", run_id, self.run_location(run_id), damage)

    async def _look_deeper(
        self,
        now: float,
        limit: int,
        queues: Sequence[str] | None,
        exclude: set[str],
        refused: list[str],
        taken: list[str],
        generation: int,
        passed: int,
        deployments: Pins | None = None,
    ) -> tuple[list[str], int, int]:
        """``claim`` past a look that was all others' fresh claims: up to ``LOOK_DEEPER``
        more looks, each past everything read so far, while each one is again all theirs.
        Returns the runs taken, their lock generation and how many fresh claims were passed;
        ``refused`` gains the runs found locked. On failure the caller gives ``taken`` back
        (the list grows in place, so it holds every lock taken here too)."""
        session = await self._ready()
        scan = _scan(limit)
        for _ in range(LOOK_DEEPER):
            lane_waits: set[str] = set()
            found, read, _ = await self._candidates(
                now, "<>", queues, exclude, scan, deployments, lane_waits, lanes=True
            )
            if not read:
                break
            exclude.update(found)
            exclude.update(lane_waits)
            more = [(run_id, session.lock_key(run_id)) for run_id in found]
            won, also, now_generation = await session.locks.try_many(more, limit - len(taken))
            refused += also
            if now_generation != generation:
                # The lock connection was replaced between the looks: the locks taken on
                # the first went with it (giving them back only forgets them here, so that
                # later claims try them again). Stop here, so that the caller's generation
                # is right for every lock it may have to give back.
                for run_id in taken:
                    await session.locks.unlock(run_id, generation)
                taken[:] = won
                return taken, now_generation, passed
            taken += won
            fresh = set(found)
            round_passed = sum(r in fresh for r in also)
            passed += round_passed
            if len(taken) >= limit or read < scan or not round_passed:
                break
        return taken, generation, passed

    async def _candidates(
        self,
        now: float,
        running: str,
        queues: Sequence[str] | None,
        exclude: Collection[str],
        scan: int,
        deployments: Pins | None = None,
        waiting: set[str] | None = None,
        places: dict[str, tuple[int, float, int]] | None = None,
        *,
        lanes: bool = False,
    ) -> tuple[list[str], int, int | None]:
        """The first ``scan`` candidates' ids, less those that wait in their lane (added to
        ``waiting``), how many were read, and how many lanes were looked at if they were read
        by lanes (else None); ``places`` gains each one's sort key in claim order (priority
        first, then due time, then creation).

        ``lanes``: read by lanes (``_HEADS``: runs waiting behind their heads are neither read
        nor reported), unless this store found more than ``MAX_LANES`` lanes, or none, within
        the last ``MANY_LANES`` seconds: then in claim order (``_CANDIDATES``), where many
        short lanes' heads come first, and with no lanes the same runs by a cheaper plan; a
        look that finds a run waiting in a lane ends the second case and looks again."""
        filters = (" AND queue = ANY(%(queues)s)" if queues is not None else "") + (
            _PINNED if deployments is not None else ""
        )
        params = {
            "now": float(now),
            "exclude": list(exclude),
            "queues": list(queues) if queues is not None else None,
            "scan": scan,
            "lanes": MAX_LANES,
            **_pin_params(deployments),
        }
        moment = asyncio.get_running_loop().time()
        lanes = lanes and running == "<>"
        if lanes and moment >= max(self._many_lanes_until, self._no_lanes_until):
            rows = await self._fetchall(
                "read the queue", _HEADS.format(queues=filters), params, queue=True
            )
            count = next(int(row[4]) for row in rows if row[0] is None)
            if count <= MAX_LANES:
                if count == 0:
                    # No lane has unfinished runs: the look in claim order reads the same
                    # runs, by a cheaper statement, until it finds one waiting in a lane.
                    self._no_lanes_until = moment + MANY_LANES
                rows = [row for row in rows if row[0] is not None]
                if places is not None:
                    places.update(
                        (row[0], (-int(row[2]), float(row[3]), int(row[4]))) for row in rows
                    )
                return [row[0] for row in rows], len(rows), count
            self._many_lanes_until = moment + MANY_LANES
        query = _CANDIDATES.format(running=running, queues=filters)
        rows = await self._fetchall("read the queue", query, params, queue=True)
        back = lanes and self._no_lanes_until > moment >= self._many_lanes_until
        if back and any(row[1] for row in rows):
            # Lanes are back, with runs waiting in them: look again, by lanes.
            self._no_lanes_until = 0.0
            return await self._candidates(
                now, running, queues, exclude, scan, deployments, waiting, places, lanes=True
            )
        if waiting is not None:
            waiting.update(row[0] for row in rows if row[1])
        if places is not None:
            places.update((row[0], (-int(row[2]), float(row[3]), int(row[4]))) for row in rows)
        return [row[0] for row in rows if not row[1]], len(rows), None

    # -- inbox and queue ------------------------------------------------------------------

    async def post(self, run_id: str, kind: str, data: dict[str, Any]) -> str:
        params = {"id": run_id, "kind": kind, "data": json_param(data)}
        row = await self._fetchone("post to a run's inbox", _POST, params)
        if row is None:
            raise RunNotFound(run_id)
        (await self._ready()).signals.changed(QUEUE, run_id)
        return _message_id(row[0])

    async def post_once(
        self, run_id: str, kind: str, data: dict[str, Any], delivery: WebhookDelivery
    ) -> WebhookDelivery | None:
        params = {
            "id": run_id,
            "kind": kind,
            "data": json_param(data),
            "key": delivery.id,
            "at": delivery.at,
            "delivery": orjson.dumps(delivery.to_json()).decode(),
        }
        row = await self._fetchone("post to a run's inbox once", _POST_ONCE, params)
        assert row is not None  # a SELECT without FROM: always one row
        message, kept, exists = row
        if message is not None:
            (await self._ready()).signals.changed(QUEUE, run_id)
            return None
        if kept is None:
            # Kept by a statement that committed while this one ran (it waited on its row),
            # or no such run.
            found = (await self.get_deliveries([delivery.id])).get(delivery.id)
            if found is not None:
                return found
            if not exists:
                raise RunNotFound(run_id)
            raise StoreError(f"cannot post to run {run_id} once: delivery {delivery.id} vanished")
        try:
            return WebhookDelivery.from_json(orjson.loads(kept))
        except ValueError as error:
            raise StoreCorrupted(
                f"wf_deliveries row {delivery.id!r}: not a webhook delivery ({error})"
            ) from None

    async def read_inbox(self, run_id: str) -> list[InboxMessage]:
        rows = await self._fetchall("read a run's inbox", _INBOX, [run_id], run=run_id)
        if not rows:
            raise RunNotFound(run_id)
        return _inbox([row for row in rows if row[0] is not None])

    async def cancels_waiting(self, run_ids: Collection[str]) -> set[str]:
        if not run_ids:
            return set()
        async with self._query("read the inboxes of listed runs", None, False, runs=True) as conn:
            cur = await conn.execute(_CANCELS_WAITING, [list(run_ids)])
            return {row[0] for row in await cur.fetchall()}

    async def due_runs(
        self,
        now: float,
        limit: int = 100,
        queues: Sequence[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[str]:
        where = "due_at <= %(now)s AND due_at < 'Infinity'::float8"  # see _CANDIDATES
        params: dict[str, Any] = {"now": float(now), "limit": max(0, limit)}
        if queues is not None:
            where += " AND queue = ANY(%(queues)s)"
            params["queues"] = list(queues)
        if deployments is not None:
            where += _PINNED
            params.update(_pin_params(deployments))
        rows = await self._fetchall(
            "read the queue",
            f"SELECT id FROM wf_runs WHERE {where} ORDER BY priority DESC, due_at, seq "
            "LIMIT %(limit)s",
            params,
            queue=True,
        )
        return [row[0] for row in rows]

    # -- lanes, slots, rates ---------------------------------------------------------------

    async def lane_ahead(self, lane: str, run_id: str, limit: int) -> list[str]:
        rows = await self._fetchall("read a group's lane", _LANE_AHEAD, [lane, run_id, limit])
        return [row[0] for row in rows]

    async def probe_write(self) -> None:
        # A write of no row: refused all the same by a read-only transaction or a standby
        # (SQLSTATE 25006), as the executor checks before it looks for rows.
        await self._fetchall("try a write", _PROBE_WRITE, None)

    async def try_slot(self, name: str, capacity: int) -> Slot | None:
        session = await self._ready()
        keys = [
            (f"slot\0{name}\0{i}", lock_key(session.schema, f"slot:{name}:{i}"))
            for i in range(capacity)
        ]
        taken = await session.locks.try_any(keys)
        if taken is None:
            return None
        return _PostgresSlot(session, *taken)

    async def slots_taken(self, name: str, capacity: int) -> int:
        session = await self._ready()
        wanted = set()
        for i in range(capacity):
            key = lock_key(session.schema, f"slot:{name}:{i}") & 0xFFFFFFFFFFFFFFFF
            wanted.add((key >> 32, key & 0xFFFFFFFF))
        rows = await self._fetchall("count a cap's places", _ADVISORY_HELD, None)
        return sum(1 for classid, objid in rows if (int(classid), int(objid)) in wanted)

    async def try_rate(self, name: str, n: int, window: float, now: float) -> float | None:
        # Not cancelled with its caller: cancelled in flight, the commit may have counted the
        # start all the same, and no run started with it (it held back a start of the limit's
        # for the whole window). The caller is cancelled at once; a start counted is taken
        # back when the answer comes (as ``Locks`` hands back a lock granted too late).
        attempt = asyncio.get_running_loop().create_task(self._try_rate(name, n, window, now))
        self._counting.add(attempt)
        attempt.add_done_callback(self._counting.discard)
        try:
            return (await asyncio.shield(attempt))[0]
        except asyncio.CancelledError:
            attempt.add_done_callback(lambda done: self._uncount(done, name, now))
            raise

    def _uncount(self, done: asyncio.Task[tuple[float | None, str]], name: str, now: float) -> None:
        """Take back the start ``done`` counted (at ``now``) for a caller that left."""
        if done.cancelled() or done.exception() is not None:
            return
        retry_at, row = done.result()
        if retry_at is not None:
            return  # refused: nothing was counted
        session = self._session
        if session is None or session.loop is not asyncio.get_running_loop():
            return  # closed meanwhile: not opened again for this
        task = session.loop.create_task(_delete_start(session, name, now, row))
        self._uncounting.add(task)
        task.add_done_callback(self._uncounting.discard)

    async def _try_rate(
        self, name: str, n: int, window: float, now: float
    ) -> tuple[float | None, str]:
        """``try_rate``'s answer, and the row of the start it counted (its ``ctid``; '' when
        refused): a take-back deletes that row, not another start of the same time."""
        session = await self._ready()
        async with self._query("count a rate limit", None, False) as conn, conn.transaction():
            key = lock_key(session.schema, "rate:" + name)
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", [key])
            await conn.execute(
                "DELETE FROM wf_rates WHERE name = %s AND ts <= %s", [name, now - window]
            )
            cur = await conn.execute(
                "SELECT count(*), min(ts) FROM wf_rates WHERE name = %s", [name]
            )
            row = await cur.fetchone()
            count, oldest = (int(row[0]), row[1]) if row else (0, None)
            if count >= n and oldest is not None:
                return float(oldest) + window, ""
            cur = await conn.execute(
                "INSERT INTO wf_rates (name, ts) VALUES (%s, %s) RETURNING ctid::text",
                [name, now],
            )
            inserted = await cur.fetchone()
            return None, str(inserted[0]) if inserted else ""

    async def rate_retry_at(self, name: str, n: int, window: float, now: float) -> float | None:
        row = await self._fetchone(
            "read a rate limit",
            "SELECT count(*), min(ts) FROM wf_rates WHERE name = %s AND ts > %s",
            [name, now - window],
        )
        count, oldest = (int(row[0]), row[1]) if row else (0, None)
        return float(oldest) + window if count >= n and oldest is not None else None

    async def queue_stats(self, now: float, *, limit: int = 10_000) -> list[QueueStats]:
        """One grouped query over the queue index (``limit`` does not apply). A due run whose
        record the server cannot read (a time that is no number, a ``\\u0000`` or a lone
        surrogate escape, which ``->>`` refuses) fails the whole query: then each due run is
        read alone, and the damaged ones are left out and noted."""
        try:
            rows = await self._fetchall(
                "read the queue",
                _QUEUE_STATS,
                {"now": float(now)},
                queue=True,
            )
        except StoreError as error:
            if not refused_value(error):
                raise
            return await super().queue_stats(now, limit=limit)
        return [QueueStats(row[0], row[1], int(row[2]), float(row[3])) for row in rows]

    async def next_due_at(
        self, after: float | None = None, queues: Sequence[str] | None = None
    ) -> float | None:
        query = "SELECT min(due_at) FROM wf_runs WHERE due_at < 'Infinity'::float8 AND due_at > %s"
        params: list[Any] = [float("-inf") if after is None else float(after)]
        if queues is not None:
            query += " AND queue = ANY(%s)"
            params.append(list(queues))
        row = await self._fetchone("read the queue", query, params, queue=True)
        return None if row is None or row[0] is None else float(row[0])

    def watch_inbox(self, run_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Called back on every ``QUEUE`` announcement of the run (a post announces one, in
        this process at once, from others through the queue channel every process listens
        on), and on a reconnection of the listener. Watching needs an open session (a run's
        driver has one); without one, nothing is heard."""
        session = self._session
        if session is None or session.loop is not asyncio.get_running_loop():
            return super().watch_inbox(run_id, callback)
        unwatch = session.signals.inboxes.add(run_id, callback)
        session.signals.listen_soon()
        return unwatch

    async def wait_for_activity(self, timeout: float) -> None:
        session = await self._ready()
        await session.signals.wait_activity(timeout)

    async def wait_for_change(self, timeout: float) -> None:
        session = await self._ready()
        # The first wait of this process starts listening for run changes: one announced
        # before that was not heard, so this wait ends at once (the caller lists again).
        fresh = await session.signals.listen()
        if not await session.signals.listen_runs() and not fresh:
            await session.signals.wait_change(timeout)

    async def wait_for_run(self, run_id: str, timeout: float) -> None:
        session = await self._ready()
        # The first wait of this process starts listening for journal and stream changes:
        # one announced before that was not heard, so this wait ends at once (the caller reads
        # again, then waits while listening). A run's end in a group, a save, a post: the
        # queue channel's.
        fresh = await session.signals.listen()
        fresh = await session.signals.listen_runs() or fresh
        # Watch first, then check the run exists: a change in between is not missed (it sets
        # the watch's event, which the wait then finds set).
        watch = None if fresh else session.signals.watch(run_id)
        try:
            row = await self._fetchone(
                "read a run", "SELECT 1 FROM wf_runs WHERE id = %s", [run_id]
            )
        except BaseException:
            if watch is not None:
                session.signals.unwatch(run_id, watch)
            raise
        if row is None:
            if watch is not None:
                session.signals.unwatch(run_id, watch)
            raise RunNotFound(run_id)
        if watch is not None:  # else it changed since the caller's last read: return now
            await session.signals.wait_run(run_id, watch, timeout)

    # -- hooks ----------------------------------------------------------------------------

    async def register_hook(self, hook: HookRecord) -> str | None:
        params = {
            "token": hook.token,
            "run": hook.run_id,
            "op": hook.op,
            "schema": None if hook.schema is None else json_param(hook.schema),
            "created": float(hook.created_at),
        }
        while True:
            row = await self._fetchone("register a hook", _REGISTER_HOOK, params)
            if row is not None:
                (await self._ready()).signals.changed(QUEUE, hook.run_id)
                return None
            # Taken by another run; if that owner let go in the meantime, claim it again.
            owner = await self._fetchone(
                "read a hook", "SELECT run_id FROM wf_hooks WHERE token = %s", [hook.token]
            )
            if owner is not None:
                return str(owner[0])

    async def get_hook(self, token: str) -> HookRecord | None:
        row = await self._fetchone(
            "read a hook", f"SELECT {_HOOK_COLUMNS} FROM wf_hooks WHERE token = %s", [token]
        )
        return None if row is None else _hook(row)

    async def release_hook(self, token: str, run_id: str) -> None:
        session = await self._ready()
        async with session.pool.connection("release a hook") as conn:
            await conn.execute(
                "DELETE FROM wf_hooks WHERE token = %s AND run_id = %s", [token, run_id]
            )

    async def save_delivery(self, delivery: WebhookDelivery) -> None:
        async with self._query("keep a webhook delivery", None, False) as conn:
            await conn.execute(
                "INSERT INTO wf_deliveries (id, at, data) VALUES (%s, %s, %s)"
                " ON CONFLICT (id) DO NOTHING",
                [delivery.id, delivery.at, orjson.dumps(delivery.to_json()).decode()],
            )

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, WebhookDelivery]:
        if not delivery_ids:
            return {}
        rows = await self._fetchall(
            "read webhook deliveries",
            "SELECT id, data FROM wf_deliveries WHERE id = ANY(%s)",
            [list(delivery_ids)],
        )
        found = {}
        for key, data in rows:
            try:
                found[key] = WebhookDelivery.from_json(orjson.loads(data))
            except ValueError as error:
                raise StoreCorrupted(
                    f"wf_deliveries row {key!r}: not a webhook delivery ({error})"
                ) from None
        return found

    async def prune_deliveries(self, before: float) -> int:
        rows = await self._fetchall(
            "prune webhook deliveries",
            "DELETE FROM wf_deliveries WHERE at < %s RETURNING id",
            [before],
        )
        return len(rows)

    async def list_hooks(self, run_id: str | None = None) -> list[HookRecord]:
        if run_id is None:
            query, params = f"SELECT {_HOOK_COLUMNS} FROM wf_hooks ORDER BY token", None
        else:
            query = f"SELECT {_HOOK_COLUMNS} FROM wf_hooks WHERE run_id = %s ORDER BY token"
            params = [run_id]
        hooks = []
        for row in await self._fetchall("list hooks", query, params):
            # A damaged hook is left out (noted once): the others are still listed.
            with self.faults.contain("hook", row[0], f"wf_hooks row {row[0]!r}"):
                hooks.append(_hook(row))
        return hooks

    # -- streams --------------------------------------------------------------------------

    async def read_chunks(
        self, run_id: str, stream: str, start: int = 0, *, max_bytes: int | None = None
    ) -> tuple[list[bytes], bool]:
        params = {"run": run_id, "name": stream, "start": max(0, start)}
        query = _CHUNKS
        if max_bytes is not None:
            params |= {"budget": max_bytes, "most": _MOST_CHUNKS}
            query = _CHUNK_BATCH
        row = await self._fetchone("read a stream", query, params, run=run_id)
        if row is None:
            raise RunNotFound(run_id)
        chunks, closed = row
        return [bytes(c) for c in chunks or []], bool(closed)

    async def read_logs(self, run_id: str, start: int = 0) -> list[LogEntry]:
        params: dict[str, Any] = {"run": run_id, "start": max(0, start)}
        row = await self._fetchone("read step logs", _LOGS, params, run=run_id)
        if row is None:
            raise RunNotFound(run_id)
        entries, first, checked, unchecked = row
        if not unchecked and not isinstance(entries, Unreadable):
            found: list[LogEntry] = entries or []
            if checked is False:  # rows from before schema 16, trusted: one may be damaged
                return [entry for entry in found if is_log_entry(entry)]
            return found
        # Some row is not as wf wrote it (a stray write): those that are no entry are
        # skipped, as the local store skips such a line, and ``start`` counts entries alone.
        # The rows from ``start`` on hold the answer (skipping moves its first entry later,
        # never earlier): it is their entries, less as many as there are rows before them
        # that are no entry. One orjson cannot read is no entry either.
        if isinstance(entries, Unreadable):  # it spoils the aggregate: a row at a time
            params["skip"] = await self._stray_logs(run_id, None) if unchecked else []
            rows = await self._fetchall("read step logs", _LOG_ROWS, params, run=run_id)
            return [entry for (entry,) in rows if is_log_entry(entry)]
        if first is None:
            return []
        before = len(await self._stray_logs(run_id, first))
        return [entry for entry in entries if is_log_entry(entry)][before:]

    async def _stray_logs(self, run_id: str, before: int | None) -> list[int]:
        """The ``seq`` of the run's unchecked step log rows (before ``before``) that are no
        entry."""
        params = {"run": run_id, "before": before}
        row = await self._fetchone("read step logs", _UNCHECKED_LOGS, params, run=run_id)
        if row is not None and not isinstance(row[1], Unreadable):
            pairs = zip(row[0] or [], row[1] or [], strict=True)
            return [seq for seq, entry in pairs if not is_log_entry(entry)]
        rows = await self._fetchall("read step logs", _UNCHECKED_ROWS, params, run=run_id)
        return [seq for seq, entry in rows if not is_log_entry(entry)]

    async def list_streams(self, run_id: str) -> dict[str, tuple[int, bool]]:
        rows = await self._fetchall("list streams", _STREAMS, [run_id], run=run_id)
        if not rows:
            raise RunNotFound(run_id)
        return {name: (int(n), bool(closed)) for name, n, closed in rows if name is not None}

    # -- schedules and retention (#16) ---------------------------------------------------

    async def lock_schedule(self, schedule_id: str, *, wait: bool = True) -> ScheduleLock | None:
        """A session advisory lock on the lease connection, keyed by the schedule's id."""
        session = await self._ready()
        name = "schedule:" + schedule_id  # never a run id: those have no ':'
        key = lock_key(session.schema, name)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30.0
        delay = 0.002
        while True:
            generation = await session.locks.try_lock(name, key)
            if generation is not None:
                return _PostgresScheduleLock(self, name, generation)
            if not wait:
                return None
            if loop.time() > deadline:
                raise StoreError(f"schedule {schedule_id!r} stayed locked for 30 s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def save_schedule(self, schedule: Schedule) -> None:
        params = {
            "id": schedule.id,
            "next": schedule.next_run,
            "schedule": json_param(schedule.to_json()),
        }
        session = await self._ready()
        async with session.pool.connection("save a schedule") as conn:
            await conn.execute(_SAVE_SCHEDULE, params)
        session.signals.changed(SCHEDULES, "")

    def run_location(self, run_id: str) -> str:
        return f"wf_runs row {run_id!r}"

    def schedule_location(self, schedule_id: str) -> str:
        return f"wf_schedules row {schedule_id!r}"

    def _schedule(self, schedule_id: str, data: Any) -> Schedule:
        where = self.schedule_location(schedule_id)
        try:
            return Schedule.from_json(readable(data, where))
        except (TypeError, ValueError) as error:
            raise StoreCorrupted(f"{where}: not a schedule ({error})") from None

    def _schedule_row(self, schedule_id: str, column: Any, data: Any) -> Schedule:
        """A listed row's schedule, its ``next_run`` column checked against the record's: the
        column is what ``due_schedules`` reads (``wf_schedules_next``), so a row whose column
        says otherwise (NULL while the schedule has a next fire, say) would never fire, or be
        looked at again and again, with no word: it is damage, named like any other. (A
        ``get_schedule`` reads the record alone: saving the schedule again repairs the row.)"""
        found = self._schedule(schedule_id, data)
        stored = None if column is None else float(column)
        if stored != found.next_run:
            where = self.schedule_location(schedule_id)
            said = "NULL" if stored is None else repr(stored)
            raise StoreCorrupted(
                f"{where}: its next_run column ({said}) disagrees with the schedule's next_run "
                f"({found.next_run!r}), so workers would not fire it when due; saving it again "
                "(wf schedule set, or pause and resume) repairs it"
            )
        return found

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        row = await self._fetchone(
            "read a schedule", "SELECT schedule FROM wf_schedules WHERE id = %s", [schedule_id]
        )
        return None if row is None else self._schedule(schedule_id, row[0])

    async def delete_schedule(self, schedule_id: str) -> bool:
        row = await self._fetchone(
            "delete a schedule",
            "DELETE FROM wf_schedules WHERE id = %s RETURNING id",
            [schedule_id],
        )
        if row is None:
            return False
        (await self._ready()).signals.changed(SCHEDULES, "")
        return True

    def rate_returns(self) -> int:
        session = self._session
        return 0 if session is None else session.signals.rate_returns

    def schedule_changes(self) -> int:
        session = self._session
        return 0 if session is None else session.signals.schedule_changes

    async def list_schedules(self) -> list[Schedule]:
        rows = await self._fetchall(
            "list schedules", "SELECT id, next_run, schedule FROM wf_schedules ORDER BY id", None
        )
        found = []
        for schedule_id, column, data in rows:
            # A damaged row is skipped (noted once): the other schedules still fire.
            with self.faults.contain("schedule", schedule_id, self.schedule_location(schedule_id)):
                found.append(self._schedule_row(schedule_id, column, data))
        return found

    async def due_schedules(self, now: float) -> tuple[list[Schedule], float | None]:
        """The due rows and the earliest later ``next_run``, from ``wf_schedules_next``; and
        the rows damaged with a NULL ``next_run`` column while their schedule has a next fire
        (which that index leaves out; looked for every ``UNDUE_LOOK`` seconds, in the same
        round trip): noted once in ``faults``, never returned."""
        query = (
            "SELECT id, next_run, schedule FROM wf_schedules"
            " WHERE next_run IS NOT NULL AND next_run <= %(now)s"
            " UNION ALL (SELECT NULL, NULL, to_json(min(next_run)) FROM wf_schedules"
            " WHERE next_run IS NOT NULL AND next_run > %(now)s)"
        )
        moment = asyncio.get_running_loop().time()
        if moment >= self._undue_at:
            self._undue_at = moment + UNDUE_LOOK
            query += (
                " UNION ALL (SELECT id, next_run, schedule FROM wf_schedules"
                " WHERE next_run IS NULL AND (schedule->>'next_run') IS NOT NULL)"
            )
        rows = await self._fetchall("list due schedules", query, {"now": now})
        found = []
        later: float | None = None
        for schedule_id, column, data in rows:
            if schedule_id is None:
                later = None if data is None else float(data)
                continue
            with self.faults.contain("schedule", schedule_id, self.schedule_location(schedule_id)):
                found.append(self._schedule_row(schedule_id, column, data))
        found.sort(key=lambda schedule: schedule.id)
        return found, later

    async def delete_runs(self, run_ids: Sequence[str], *, now: float, reason: str) -> Deleted:
        if not run_ids:
            return Deleted()
        session = await self._ready()
        params = {
            "ids": list(run_ids),
            "keys": [session.lock_key(run_id) for run_id in run_ids],
            "now": float(now),
            "reason": reason,
        }
        async with self._query("delete runs", None, False) as conn, conn.transaction():
            row = await (await conn.execute(_DELETE_RUNS, params)).fetchone()
            ids, size = (row or (None, 0))[:2]
            if ids:
                late = await (await conn.execute(_DELETE_LATE_INBOX, [ids])).fetchone()
                size = int(size or 0) + int((late or (0,))[0] or 0)
        for run_id in ids or ():
            session.signals.changed(QUEUE, run_id)
        return Deleted(sorted(ids or []), int(size or 0))

    async def prune_tombstones(self, before: float) -> int:
        rows = await self._fetchall(
            "prune tombstones",
            "DELETE FROM wf_tombstones WHERE deleted_at < %s RETURNING id",
            [before],
        )
        return len(rows)

    async def get_tombstone(self, run_id: str) -> Tombstone | None:
        row = await self._fetchone(
            "read a tombstone",
            "SELECT id, workflow, status, deleted_at, reason, seq FROM wf_tombstones WHERE id = %s",
            [run_id],
        )
        if row is None:
            return None
        if not math.isfinite(row[3]):  # NaN or ±Infinity: no time (and no JSON number)
            raise StoreCorrupted(f"wf_tombstones row {run_id!r}: its deleted_at is {row[3]}")
        return Tombstone(
            str(row[0]), str(row[1]), str(row[2]), float(row[3]), str(row[4]), int(row[5] or 0)
        )

    async def store_info(self) -> StoreStats:
        counts = {status.value: 0 for status in RunStatus}
        async with self._query("count runs", None, False) as conn:
            try:
                async with conn.transaction():
                    await conn.execute(_FOLD_COUNTS)
                    rows = await (await conn.execute(_COUNTS)).fetchall()
            except psycopg.errors.ReadOnlySqlTransaction:
                # A read-only server (a replica): the rows are summed as they are, unfolded.
                rows = await (await conn.execute(_COUNTS)).fetchall()
        kept = {str(name): int(n) for name, n in rows}
        for status in counts:
            counts[status] = max(kept.get(status, 0), 0)
        schedules = await self._fetchone("count", "SELECT count(*) FROM wf_schedules", None)
        size = await self._fetchone("measure the tables", _SIZE, None)
        session = await self._ready()
        return StoreStats(
            kind="postgres",
            location=f"{self._label} (schema {session.schema})",
            format=VERSION,
            runs=counts,
            schedules=int(schedules[0]) if schedules else 0,
            tombstones=max(kept.get("tombstones", 0), 0),
            size_bytes=int(size[0]) if size else None,
        )

    async def verify(self, *, on_progress: Progress | None = None) -> list[str]:
        problems = []
        for query, what in _VERIFY:
            for (run_id,) in await self._fetchall("verify the store", query, None):
                problems.append(f"run {run_id}: {what}")
        problems += await self._verify_runs()
        problems += await self._verify_journal()
        query = "SELECT id, next_run, schedule FROM wf_schedules ORDER BY id"
        for schedule_id, column, data in await self._fetchall("verify the store", query, None):
            try:
                self._schedule_row(schedule_id, column, data)
            except StoreCorrupted as error:
                problems.append(str(error))
        problems += await self._verify_inbox()
        query = f"SELECT {_HOOK_COLUMNS} FROM wf_hooks ORDER BY token"
        for row in await self._fetchall("verify the store", query, None):
            try:
                _hook(row)
            except StoreCorrupted as error:
                problems.append(str(error))
        return problems + await self._repair_counts()

    async def _verify_runs(self) -> list[str]:
        """Each record, as a driver would read it, and the columns its saves write."""
        problems = []
        after = ""
        while True:
            rows = await self._fetchall("verify the store", _VERIFY_RUNS, [after, VERIFY_PAGE])
            for run_id, status, data, seq, deployment, due in rows:
                where = self.run_location(run_id)
                if isinstance(data, dict) and str(data.get("status", status)) != status:
                    problems.append(f"run {run_id}: the status column disagrees with the record")
                try:
                    record = RunRecord.from_json(readable(data, where), run_id)
                except StoreCorrupted as error:
                    text = str(error)
                    problems.append(text if text.startswith(where) else f"{where}: {text}")
                    continue
                except (TypeError, ValueError, KeyError, AttributeError) as error:
                    problems.append(f"{where}: not a run record ({error})")
                    continue
                problems += await self._repair_record(run_id, data, record, seq, deployment)
                wanted = due_at(record)
                if due is not None and wanted is not None and due not in (0.0, wanted):
                    # Saves write the record's due time, a post 0 (due now): anything else
                    # was written by hand, and a worker takes the run only then.
                    problems.append(
                        f"run {run_id}: its due_at column ({due!r}) is neither 0 (due now) nor "
                        f"what its record says ({wanted!r}): no worker would take it when it "
                        "is due"
                    )
                for name in _TEXT_FIELDS:
                    value = getattr(record, name)
                    if isinstance(value, str) and "\0" in value:
                        problems.append(
                            f"{where}: its {name} holds a NUL character, which PostgreSQL "
                            "cannot store in a text column (no save of the run can succeed)"
                        )
            if len(rows) < VERIFY_PAGE:
                return problems
            after = rows[-1][0]

    async def _repair_record(
        self,
        run_id: str,
        data: dict[str, Any],
        record: RunRecord,
        seq: int | None,
        deployment: str | None,
    ) -> list[str]:
        """The record against the columns its saves also write, which are the truth where
        they differ: a worker of an older wf still running after the schema's upgrade
        rewrites the record without ``seq`` and ``code_hash``, so its pin read back as none
        (``deployment: null``) while the ``deployment`` column kept it. Put right here, in
        one update of the repaired keys alone, applied only while those keys (and the
        column) are as read: a newer save meanwhile wins, an older worker's keeps its
        status and output."""
        off = []
        fixed = dict(data)
        if seq is not None and data.get("seq") != seq:
            off.append(f"seq {data.get('seq')!r}, column {seq}")
            fixed["seq"] = seq
        if deployment is not None and record.deployment != deployment:
            off.append(f"deployment {record.deployment!r}, column {deployment!r}")
            if "code_hash" not in fixed:
                fixed["code_hash"] = record.code_hash  # what the older record's field held
            fixed["deployment"] = deployment
        if not off:
            return []
        patch = {name: fixed[name] for name in ("seq", "deployment", "code_hash") if name in fixed}
        guard = {
            name: None if data.get(name) is None else str(data[name])
            for name in ("seq", "deployment", "code_hash")
        }
        params = {"patch": json_param(patch), "id": run_id, "column": deployment, **guard}
        done = await self._fetchall("repair a run's record", _REPAIR_RECORD, params)
        said = (
            f"run {run_id}: its record disagrees with its columns ({'; '.join(off)}; a worker "
            "of an older wf rewrote it)"
        )
        if not done:
            return [f"{said}: not repaired (saved meanwhile: verify again)"]
        return [f"{said}: repaired from the columns"]

    async def _verify_journal(self) -> list[str]:
        """Each journal event: JSON orjson reads, an object, ``run_started`` first; and each
        run's journal whose events are all objects, as replay reads it (``journal_problems``:
        its first damaged event)."""
        problems: list[str] = []
        after: tuple[str, int] = ("", -1)
        run: tuple[str, list[Any]] | None = None
        """The run whose events the walk is gathering: pages may split a run's journal."""

        def replayable(run: tuple[str, list[Any]] | None) -> None:
            if run is not None and all(isinstance(event, dict) for event in run[1]):
                problems.extend(journal_problems(f"wf_journal rows of run {run[0]!r}", run[1]))

        while True:
            rows = await self._fetchall("verify the store", _VERIFY_JOURNAL, [*after, VERIFY_PAGE])
            for run_id, seq, event, first in rows:
                if run is None or run[0] != run_id:
                    replayable(run)
                    run = (run_id, [])
                run[1].append(event)
                where = f"wf_journal row of run {run_id!r}, event {seq}"
                if isinstance(event, Unreadable):
                    problems.append(f"{where}: not JSON wf can read ({event.reason})")
                elif not isinstance(event, dict):
                    problems.append(f"{where}: not a journal event")
                elif first and event.get("type") != "run_started":
                    problems.append(f"run {run_id}: the journal does not start with run_started")
            if len(rows) < VERIFY_PAGE:
                replayable(run)
                return problems
            after = (rows[-1][0], int(rows[-1][1]))

    async def _verify_inbox(self) -> list[str]:
        """Each inbox message: JSON orjson reads, an object."""
        problems = []
        after = 0
        while True:
            rows = await self._fetchall("verify the store", _VERIFY_INBOX, [after, VERIFY_PAGE])
            for number, data in rows:
                if isinstance(data, Unreadable):
                    problems.append(f"wf_inbox row {number}: not JSON wf can read ({data.reason})")
                elif not isinstance(data, dict):
                    problems.append(f"wf_inbox row {number}: not an inbox message")
            if len(rows) < VERIFY_PAGE:
                return problems
            after = int(rows[-1][0])

    async def _repair_counts(self) -> list[str]:
        """Set the kept counts to a count of the tables when they are off; one line each.
        The tables are locked against writes meanwhile, so the count and the kept figures
        are of one moment."""
        async with self._query("verify the counts", None, False) as conn, conn.transaction():
            await conn.execute("LOCK TABLE wf_runs, wf_tombstones IN SHARE MODE")
            kept = {str(k): int(n) for k, n in await (await conn.execute(_COUNTS)).fetchall()}
            rows = await (await conn.execute(_SCAN_COUNTS)).fetchall()
            found = {str(k): int(n) for k, n in rows}
            off = {
                name: (kept.get(name, 0), found.get(name, 0))
                for name in sorted(set(kept) | set(found))
                if kept.get(name, 0) != found.get(name, 0)
            }
            if off:
                await conn.execute("DELETE FROM wf_counts")
                await conn.execute(
                    "INSERT INTO wf_counts (name, shard, n) SELECT name, 0, n FROM "
                    "(SELECT status AS name, count(*) AS n FROM wf_runs GROUP BY status "
                    "UNION ALL SELECT 'tombstones', count(*) FROM wf_tombstones) AS scan"
                )
        return [
            f"wf_counts: the count of {name} was {kept_count(was)}, a count of the table found "
            f"{now}: repaired"
            for name, (was, now) in off.items()
        ]

    # -- lifecycle ------------------------------------------------------------------------

    async def close(self) -> None:
        """Close every connection; leases still held are released with their connection.
        Rate limits' starts being counted or taken back are waited for first (at most
        ``RATE_CLOSE_WAIT`` seconds)."""
        session = self._session
        if session is None:
            return
        if session.loop is asyncio.get_running_loop():
            # A stopping worker cancels its drives, then closes at once: their starts counted
            # meanwhile are taken back (and announced) now, not left counted for the window.
            await self._settle_rates(RATE_CLOSE_WAIT)
            if self._session is not session:
                return  # closed by another caller meanwhile
            self._session = None
            await session.close()
            return
        self._session = None
        session.abandon()

    async def _settle_rates(self, within: float) -> None:
        """Wait up to ``within`` seconds for counts in flight and the take-backs they start."""
        loop = asyncio.get_running_loop()
        end = loop.time() + within
        while (pending := self._counting | self._uncounting) and loop.time() < end:
            await asyncio.wait(pending, timeout=end - loop.time())
            await asyncio.sleep(0)  # a count's done callback starts its take-back


async def _delete_start(session: Session, name: str, now: float, row: str) -> None:
    """Delete the start of rate limit ``name`` at ``now`` that ``try_rate`` inserted as ``row``
    (its ``ctid``: two starts of one time taken back together each delete their own; a row
    moved since, by a ``VACUUM FULL``, is not found). A failure is only logged: the start then
    counts until it leaves the window."""
    try:
        async with session.pool.connection("take back a rate limit's start") as conn:
            cur = await conn.execute(
                _UNCOUNT, [row, name, now, channel_name(session.schema), RATES]
            )
    except Exception as error:  # nothing waits on it: said, not raised
        log.debug("wf: taking back a rate limit's start failed: %s", error)
        return
    if cur.rowcount:
        # Runs the start held back meanwhile wait for the window's end: their workers look at
        # the limit again when they hear of it (other processes by the statement's NOTIFY).
        session.signals.wake(RATES)


_UNCOUNT = """
WITH gone AS (DELETE FROM wf_rates WHERE ctid = %s::tid AND name = %s AND ts = %s RETURNING 1)
SELECT pg_notify(%s, %s) FROM gone
"""
"""A rate limit's start taken back: its own row, announced (``RATES``) in the same statement.
A ``ctid`` names a row until the row is deleted or moved (wf never updates these rows); the
name and time make sure that a slot a trimmed start left, and another start took since, is
deleted only if it is a start alike. The ``NOTIFY`` goes with the delete, not through
``Signals``' batches, so that a store closing right after still tells the other workers (a
take-back is rare: its commit may take the notify lock)."""

RATE_CLOSE_WAIT = 2.0
"""Seconds ``PostgresStore.close`` waits for rate limits' counts and take-backs in flight."""

_PROBE_WRITE = "UPDATE wf_runs SET id = id WHERE false RETURNING id"
"""A write that changes nothing (``Store.probe_write``)."""

_LANE_AHEAD = """
SELECT o.id FROM wf_runs me JOIN wf_runs o ON o.lane_name = me.lane_name AND o.lane < me.lane
WHERE me.lane_name = %s AND me.id = %s AND o.due_at IS NOT NULL AND o.lane_name IS NOT NULL
ORDER BY o.lane LIMIT %s
"""

_ADVISORY_HELD = """
SELECT classid::bigint, objid::bigint FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


class _PostgresSlot(Slot):
    """A cap's place: an advisory lock on the store instance's lock connection."""

    def __init__(self, session: Session, name: str, generation: int) -> None:
        self._session, self._name, self._generation = session, name, generation
        self._released = False

    async def release(self) -> None:
        if not self._released:
            self._released = True
            await self._session.locks.unlock(self._name, self._generation)
            self._session.signals.changed(QUEUE, "")


_QUEUE_STATS = """
SELECT workflow, grp, count(*), min(CASE
    WHEN (record->>'wake_at')::float8 <= %(now)s THEN (record->>'wake_at')::float8
    WHEN status = 'pending' THEN (record->>'created_at')::float8
    ELSE (record->>'updated_at')::float8 END)
FROM wf_runs
WHERE due_at <= %(now)s AND status IN ('pending', 'suspended')
GROUP BY workflow, grp ORDER BY workflow, coalesce(grp, '')
"""
"""Waiting runs per workflow, as ``queue_stats_of`` counts them (see ``Store.queue_stats``)."""


def _message_id(number: int) -> str:
    # Zero-padded so that ids sort as text in posting order, as the contract asks.
    return f"m{number:019d}"


def record_of(run_id: str, data: Any, where: str) -> RunRecord:
    """The run record a ``wf_runs`` row holds; ``StoreCorrupted`` naming the row (``where``)
    if it is not one (``[]``, an object without the fields of a record), as listings and
    ``verify`` name it."""
    try:
        return RunRecord.from_json(readable(data, where), run_id)
    except StoreCorrupted as error:
        text = str(error)
        if text.startswith(where):
            raise
        raise StoreCorrupted(f"{where}: {text}") from error
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        raise StoreCorrupted(f"{where}: not a run record ({error})") from error


def _journal(run_id: str, events: list[Any] | None, first: int = 0) -> list[Event]:
    """A journal as ``json_agg`` returns it (from event ``first`` on): each event must be a
    JSON object."""
    events = readable(events, f"the journal of run {run_id!r} in wf_journal")
    return checked_events(
        events or [], lambda i: f"event {first + i} of run {run_id!r} in wf_journal"
    )


def _inbox(rows: Sequence[tuple[Any, ...]]) -> list[InboxMessage]:
    """Inbox rows (id, kind, data) as messages; one that is not is ``StoreCorrupted``."""
    return [
        checked_message(
            _message_id(n), kind, readable(data, f"wf_inbox row {n}"), f"wf_inbox row {n}"
        )
        for n, kind, data in rows
    ]


def _hook(row: tuple[Any, ...]) -> HookRecord:
    token, run_id, op, schema, created_at = row
    schema = readable(schema, f"wf_hooks row {token!r}")
    if schema is not None and not isinstance(schema, dict):
        kind = type(schema).__name__
        raise StoreCorrupted(f"wf_hooks row {token!r}: its payload schema is a JSON {kind}")
    if not math.isfinite(created_at):  # NaN or ±Infinity: no time (and no JSON number)
        raise StoreCorrupted(f"wf_hooks row {token!r}: its created_at is {created_at}")
    return HookRecord(token, run_id, int(op), schema, float(created_at))
