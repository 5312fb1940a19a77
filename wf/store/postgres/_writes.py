"""Journal appends and record saves of every lease of a store instance, sent together.

A worker drives tens of runs at once, and each of their steps ends with a journal append (the
last one also saving the record). Sent one statement per append, every append is a round trip,
a statement to parse and run and a commit to flush, and a busy worker keeps as many of them in
flight as it has runs — each a backend of the server competing for its cores. Instead, the
appends and saves of every lease of the instance queue here and go out in one statement per
batch (one round trip, one commit): while a batch is in flight, the next one gathers, as the
commits of a group commit do. A lone append still goes at once, in the simpler statement of a
single write.

Each write in a batch keeps its own fencing: the statement locks the rows of the batch's runs
whose ``lease_epoch`` is still the writer's (in id order: two batches never deadlock, and a
claim's bump, which also locks in id order, waits for the batch or the batch for it), and
appends or saves only for those; a write whose epoch moved on is reported as not done, and its
lease raises, as the single statements did. A run appears at most once per batch: a lease's
writer waits for its write before it sends the next.

A batch commits or fails as a whole: its writers all get the same error (a lost connection, a
server that goes away). None is retried, since a failure after the commit cannot be told from
one before it, and appending again would duplicate events. One exception: a batch refused for a
value it carries (``refused_value``: a run whose record holds a NUL in its workflow name, which
no ``text`` column takes) wrote nothing, so its writes are sent again one by one. The write
that carries the value fails alone, as that run's damage (``StoreCorrupted``), and the others
land: one damaged run never fails the writes of the runs batched with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

from psycopg.types.json import Json

from wf.store.postgres._conn import Pool, refused_value, refused_write

WITH_SEQ = """('{{"seq":' || {seq} || ',' || substr({record}::text, 2))::json"""
"""A record's JSON (written without ``seq``) with the run's creation number first: the number
is the row's (``wf_runs.seq``), never what a caller's record says, and the JSON's own text is
kept exactly (``jsonb`` would change how numbers read)."""

_BATCH_RECORD = (
    WITH_SEQ.format(record="b.record", seq="r.seq").replace("{", "{{").replace("}", "}}")
)
"""``WITH_SEQ`` in ``_BATCH``, which is itself a format string."""

_BATCH = (
    """
WITH batch AS (
    SELECT b.n, b.run, b.epoch, b.save, b.workflow, b.status, b.parent, b.due, b.pin,
           ev.events, rc.record
    FROM unnest(%(runs)s::text[], %(epochs)s::bigint[], %(saves)s::boolean[],
                %(workflows)s::text[], %(statuses)s::text[], %(parents)s::text[],
                %(dues)s::float8[], %(pins)s::text[])
         WITH ORDINALITY AS b(run, epoch, save, workflow, status, parent, due, pin, n)
    JOIN json_array_elements(%(events)s) WITH ORDINALITY AS ev(events, n) ON ev.n = b.n
    JOIN json_array_elements(%(records)s) WITH ORDINALITY AS rc(record, n) ON rc.n = b.n
), locked AS (
    SELECT r.id FROM wf_runs r JOIN batch b ON r.id = b.run AND r.lease_epoch = b.epoch
    WHERE r.id = ANY(%(runs)s::text[])
    ORDER BY r.id FOR NO KEY UPDATE OF r
), saved AS (
    UPDATE wf_runs r SET workflow = b.workflow, status = b.status, parent_id = b.parent,
           due_at = b.due, deployment = b.pin, record = """
    + _BATCH_RECORD
    + """
    FROM batch b JOIN locked l ON l.id = b.run
    WHERE b.save AND r.id = b.run AND r.lease_epoch = b.epoch AND r.id = ANY(%(runs)s::text[])
    RETURNING r.id
), appended AS (
    INSERT INTO wf_journal (run_id, seq, event)
    SELECT b.run, last.seq + e.n, e.event
    FROM batch b JOIN locked l ON l.id = b.run,
         LATERAL (SELECT coalesce(max(seq), -1) AS seq FROM wf_journal WHERE run_id = b.run)
             AS last,
         LATERAL json_array_elements(b.events) WITH ORDINALITY AS e(event, n)
    RETURNING run_id
)
SELECT b.n, l.id IS NOT NULL, s.id IS NOT NULL, coalesce(a.k, 0){lazy}
FROM batch b
LEFT JOIN locked l ON l.id = b.run
LEFT JOIN saved s ON s.id = b.run
LEFT JOIN (SELECT run_id, count(*) AS k FROM appended GROUP BY run_id) a ON a.run_id = b.run
"""
)
"""One statement for a batch: per write (``n``, from 1), whether its epoch held, whether its
record was saved and how many events were appended."""

DURABLE = _BATCH.format(lazy="")
LAZY = _BATCH.format(lazy=", set_config('synchronous_commit', 'off', true)")
"""A batch of writes none of whose callers waits for durability (``append_soon``): visible at
once, durable with the next commit."""

_APPEND = """
INSERT INTO wf_journal (run_id, seq, event)
SELECT %(run)s, last.seq + e.n, e.event
FROM (SELECT coalesce(max(seq), -1) AS seq FROM wf_journal WHERE run_id = %(run)s) AS last,
     json_array_elements(%(events)s) WITH ORDINALITY AS e(event, n)
WHERE EXISTS (
    SELECT FROM wf_runs WHERE id = %(run)s AND lease_epoch = %(epoch)s FOR KEY SHARE
)
"""
"""A lone durable append (the cheaper statement when no other write is waiting: the latency of
a run driven alone is that of its appends). ``FOR KEY SHARE`` conflicts with the ``FOR UPDATE``
of a lease's bump only."""

APPEND_SAVE = (
    """
WITH saved AS (
    UPDATE wf_runs SET workflow = %(workflow)s, status = %(status)s, parent_id = %(parent)s,
           due_at = %(due)s, deployment = %(deployment)s, record = """
    + WITH_SEQ.format(record="%(record)s", seq="seq")
    + """
    WHERE id = %(run)s AND lease_epoch = %(epoch)s
    RETURNING id
), appended AS (
    INSERT INTO wf_journal (run_id, seq, event)
    SELECT saved.id, last.seq + e.n, e.event
    FROM saved,
         (SELECT coalesce(max(seq), -1) AS seq FROM wf_journal WHERE run_id = %(run)s) AS last,
         json_array_elements(%(events)s) WITH ORDINALITY AS e(event, n)
    RETURNING 1
)
SELECT (SELECT count(*) FROM saved), (SELECT count(*) FROM appended)
"""
)
"""A lone durable append with a save: the insert reads the update's result, so nothing is
written unless the epoch is still the lease's (the update's row lock fences it)."""

MAX_BATCH = 256
"""Writes per statement, at most (a bound on its size and on the row locks it holds)."""

IN_FLIGHT = 1
"""Batches in flight at once per store instance. One keeps batches large: while it is out,
every write that comes waits for it and goes in the next."""


@dataclasses.dataclass(frozen=True)
class Written:
    """What a write did: its epoch held (``fenced`` False: the lease was taken over), whether
    its record was saved, how many events were appended."""

    fenced: bool
    saved: bool
    appended: int


@dataclasses.dataclass
class _Write:
    run_id: str
    epoch: int
    events: bytes
    """The events, a JSON array encoded by the caller (so an unencodable value fails only
    its own write)."""
    record: tuple[str, str, str | None, float | None, bytes, str | None] | None
    """(workflow, status, parent id, due, encoded record, deployment) of a save, or None."""
    durable: bool
    done: asyncio.Future[Written]


class Writes:
    """The batching writer of one store instance (see the module's docstring)."""

    def __init__(self, pool: Pool, in_flight: int = IN_FLIGHT) -> None:
        self._pool = pool
        self._in_flight = max(1, in_flight)
        self._queue: list[_Write] = []
        self._senders: set[asyncio.Task[None]] = set()
        self.batches = 0
        """Statements sent (for measurements: writes per statement)."""

    async def write(
        self,
        run_id: str,
        epoch: int,
        events: bytes,
        record: tuple[str, str, str | None, float | None, bytes, str | None] | None = None,
        *,
        durable: bool = True,
    ) -> Written:
        """Append ``events`` (an encoded JSON array) to the run's journal and, with ``record``,
        save the run's row, if the run's ``lease_epoch`` is still ``epoch``; with the writes
        queued meanwhile by other leases. A write cancelled before its batch goes out is not
        sent; one cancelled later may still be written (as a statement cancelled in flight)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Written] = loop.create_future()
        self._queue.append(_Write(run_id, epoch, events, record, durable, done))
        # A sender whose loop found the queue empty is done already (no await in between).
        if sum(not sender.done() for sender in self._senders) < self._in_flight:
            sender = loop.create_task(self._send_all())
            self._senders.add(sender)
            sender.add_done_callback(self._senders.discard)
        return await done

    async def _send_all(self) -> None:
        while self._queue:
            batch = [w for w in self._queue[:MAX_BATCH] if not w.done.cancelled()]
            del self._queue[:MAX_BATCH]
            if batch:
                await self._send(batch)

    async def _send(self, batch: list[_Write]) -> None:
        try:
            if len(batch) == 1 and batch[0].durable:
                written = [await self._send_one(batch[0])]
            else:
                written = await self._send_many(batch)
        except asyncio.CancelledError:
            for w in batch:
                w.done.cancel()
            raise
        except Exception as error:
            if refused_value(error):
                # Nothing was written: each write again alone, so the refused one fails alone.
                if len(batch) > 1:
                    await self._send_each(batch)
                else:
                    _fail(batch[0], error)
                return
            for w in batch:
                if not w.done.done():
                    w.done.set_exception(error)
            return
        self.batches += 1
        for w, outcome in zip(batch, written, strict=True):
            if not w.done.done():
                w.done.set_result(outcome)

    async def _send_each(self, batch: list[_Write]) -> None:
        """The writes of a refused batch, each in a statement of its own."""
        for index, w in enumerate(batch):
            if w.done.done():
                continue
            try:
                if w.durable:
                    written = await self._send_one(w)
                else:
                    [written] = await self._send_many([w])
            except asyncio.CancelledError:
                for later in batch[index:]:
                    later.done.cancel()
                raise
            except Exception as error:
                if refused_value(error):
                    _fail(w, error)
                elif not w.done.done():
                    w.done.set_exception(error)
                continue
            self.batches += 1
            if not w.done.done():
                w.done.set_result(written)

    async def _send_one(self, w: _Write) -> Written:
        params: dict[str, Any] = {"run": w.run_id, "epoch": w.epoch, "events": _json(w.events)}
        async with self._pool.connection("append to the journal") as conn:
            if w.record is None:
                cur = await conn.execute(_APPEND, params)
                return Written(cur.rowcount > 0, False, cur.rowcount)
            workflow, status, parent, due, record, pin = w.record
            params.update(
                workflow=workflow,
                status=status,
                parent=parent,
                due=due,
                record=_json(record),
                deployment=pin,
            )
            row = await (await conn.execute(APPEND_SAVE, params)).fetchone()
        saved = row is not None and int(row[0]) == 1
        return Written(saved, saved, int(row[1]) if row is not None else 0)

    async def _send_many(self, batch: list[_Write]) -> list[Written]:
        saves = [w.record for w in batch]
        params: dict[str, Any] = {
            "runs": [w.run_id for w in batch],
            "epochs": [w.epoch for w in batch],
            "saves": [s is not None for s in saves],
            "workflows": [s[0] if s else None for s in saves],
            "statuses": [s[1] if s else None for s in saves],
            "parents": [s[2] if s else None for s in saves],
            "dues": [s[3] if s else None for s in saves],
            "pins": [s[5] if s else None for s in saves],
            "events": _json(b"[" + b",".join(w.events for w in batch) + b"]"),
            "records": _json(b"[" + b",".join(s[4] if s else b"null" for s in saves) + b"]"),
        }
        query = DURABLE if any(w.durable for w in batch) else LAZY
        async with self._pool.connection("append to the journal") as conn:
            rows = await (await conn.execute(query, params)).fetchall()
        # (A lazy batch's rows carry set_config's result too: a fifth column, ignored.)
        found = {int(row[0]): Written(bool(row[1]), bool(row[2]), int(row[3])) for row in rows}
        return [found.get(n, Written(False, False, 0)) for n in range(1, len(batch) + 1)]

    async def close(self) -> None:
        """Wait for the batches in flight (their writers are waiting for them)."""
        for sender in list(self._senders):
            with contextlib.suppress(BaseException):
                await sender

    def abandon(self) -> None:
        """Forget the batches of a finished event loop."""
        self._queue.clear()
        self._senders.clear()


def _fail(w: _Write, error: BaseException) -> None:
    """Fail a write PostgreSQL refused for a value it carries, as its run's damage."""
    if not w.done.done():
        w.done.set_exception(refused_write(w.run_id, error))


def _json(data: bytes) -> Json:
    """A ``json`` parameter of already encoded JSON text."""
    return Json(data, dumps=bytes)
