"""``PostgresStore``: the conformance kit, and what only a shared database can get wrong.

Each test works in a schema of its own (dropped afterwards), so tests may run in parallel and
leave nothing behind. The server is ``WF_TEST_POSTGRES_DSN`` (default: a local ``test``
database with trust authentication); when it cannot be reached, every test here is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

psycopg = pytest.importorskip("psycopg")

from psycopg.conninfo import make_conninfo  # noqa: E402

import wf  # noqa: E402
from tests.store.helpers import (  # noqa: E402
    a_take_back_wakes_the_runs_the_limit_held,
    acquire,
    assert_refused_at_once,
    created,
    edit_record,
    forking_holder,
    lease_loser,
    lose_the_lease_then_take_over,
    python,
    record,
    save,
    started,
    taken_over_beside_a_forked_helper,
)
from tests.store.test_counts import ENDS, mix, same_as_a_scan  # noqa: E402
from wf import Engine, StoreError, StoreVersionError  # noqa: E402
from wf.engine._current import use_engine  # noqa: E402
from wf.store import (  # noqa: E402
    HookRecord,
    RunRecord,
    RunStatus,
    Schedule,
    Store,
    WebhookDelivery,
    lane_of,
)
from wf.store.conformance import FAR, StoreConformance  # noqa: E402
from wf.store.postgres import PostgresStore  # noqa: E402
from wf.store.postgres._conn import describe  # noqa: E402
from wf.store.postgres._schema import VERSION  # noqa: E402
from wf.store.postgres._session import channel_name  # noqa: E402
from wf.store.postgres._signals import RUN, Signals  # noqa: E402
from wf.store.postgres._store import _CANDIDATES  # noqa: E402
from wf.testing import MockClock  # noqa: E402

pytestmark = pytest.mark.postgres

DSN = os.environ.get("WF_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="module")
def postgres_dsn() -> str:
    """The test server's DSN; skips the module when the server cannot be reached."""
    try:
        with psycopg.connect(DSN, connect_timeout=3):
            pass
    except psycopg.Error as error:
        where = describe(DSN)  # the DSN without a password
        message = f"PostgreSQL not reachable at {where} (set WF_TEST_POSTGRES_DSN): {error}"
        if os.environ.get("WF_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)  # CI (.ci/run) has the server: its absence is a failure
        pytest.skip(message)
    return DSN


@pytest.fixture
def schema(postgres_dsn: str) -> Iterator[str]:
    """A fresh schema name for one test; the schema is dropped afterwards."""
    name = f"wf_test_{uuid.uuid4().hex[:16]}"
    yield name
    drop_schema(name)


def drop_schema(name: str) -> None:
    """Drop the schema ``name`` with what it holds, if it exists."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def make(schema: str, **options: Any) -> PostgresStore:
    """A store instance on the test schema: one per simulated process."""
    return PostgresStore(DSN, schema=schema, **options)


class TestPostgresStore(StoreConformance):
    """A peer is a second ``PostgresStore`` on the same schema, as another process opens it."""

    @pytest.fixture(autouse=True)
    def _use_schema(self, schema: str) -> None:
        self.schema = schema

    async def make_store(self, tmp_path: Path) -> Store:
        store = make(self.schema)
        await store.open()  # a running process: connected before the test acts
        return store

    async def make_peer(self, store: Store, tmp_path: Path) -> Store:
        peer = make(self.schema)
        await peer.open()
        return peer

    async def damage_run(self, store: Store, run_id: str) -> None:
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(
                f"UPDATE \"{self.schema}\".wf_runs SET record = 'null'::json WHERE id = %s",
                [run_id],
            )

    async def edit_record(self, store: Store, run_id: str, changes: dict[str, Any]) -> None:
        await edit_record(store, run_id, changes)

    async def damage_schedule(self, store: Store, schedule_id: str) -> None:
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(
                f"UPDATE \"{self.schema}\".wf_schedules SET schedule = '[1]'::json WHERE id = %s",
                [schedule_id],
            )


# -- two store instances = two processes ------------------------------------------------------


async def test_one_lease_among_many_instances(schema: str) -> None:
    stores = [make(schema) for _ in range(4)]
    try:
        run = await created(stores[0])
        for _ in range(3):
            leases = await asyncio.gather(*(s.try_acquire(run.id) for s in stores))
            held = [lease for lease in leases if lease is not None]
            assert len(held) == 1
            await held[0].release()
    finally:
        for store in stores:
            await store.close()


@pytest.mark.parametrize("poster", ["this process", "another process"])
async def test_a_post_after_a_claim_read_the_inbox_is_in_the_drivers_read(
    schema: str, poster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A claim reads its runs' inboxes for their drivers; a driver watches the inbox only from
    # its own first read on. A post between the two reaches the driver's read, not its first
    # poll; with no post, that read is still the claim's (no round trip).
    store, other = make(schema), make(schema)
    await store.open()
    await other.open()
    try:
        posted, quiet = await created(store), await created(store)
        leases = {lease.run_id: lease for lease in await store.claim(FAR, 2)}
        assert set(leases) == {posted.id, quiet.id}
        heard = asyncio.Event()
        unwatch = store.watch_inbox(posted.id, heard.set)
        await (store if poster == "this process" else other).post(posted.id, "cancel", {})
        async with asyncio.timeout(10):
            await heard.wait()  # the driver's watch, had it begun, would have heard it
        unwatch()
        assert [m.kind for m in await leases[posted.id].read_inbox(store)] == ["cancel"]

        async def no_round_trip(run_id: str) -> list[Any]:
            raise AssertionError("read again without a post")

        monkeypatch.setattr(store, "read_inbox", no_round_trip)
        assert await leases[quiet.id].read_inbox(store) == []
        for lease in leases.values():
            await lease.release()
    finally:
        await store.close()
        await other.close()


async def test_one_shot_calls_open_no_listen_connection(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A producer's detached start, a listing, a status, a hook resumed, a store check: none
    # waits for news, so none opens a connection to LISTEN on (only the pool's).
    from wf.store.postgres import _signals

    listening: list[str] = []
    real = _signals.connect

    async def connect(conninfo: str, label: str) -> Any:
        listening.append(label)
        return await real(conninfo, label)

    monkeypatch.setattr(_signals, "connect", connect)
    store = make(schema)
    try:
        async with Engine(store) as engine:
            with use_engine(engine):
                run = await wf.start("tests.nowhere:flow", detach=True)
                assert await run.status() is wf.RunStatus.PENDING
                assert [r.id for r in await store.list_runs()] == [run.id]
                with pytest.raises(wf.HookError):
                    await wf.resume_hook("no-such-token", 1)
                assert await store.verify() == []
        assert listening == []
        await store.open()  # a service: listening from the start
        assert len(listening) == 1
    finally:
        await store.close()


async def test_a_first_wait_or_inbox_watch_starts_listening(schema: str) -> None:
    # What waits for news starts the LISTEN: a first wait returns at once (a change before it
    # was not heard: the caller reads again), and an inbox watch of a run hears another
    # process's post once the store listens.
    store, other = make(schema), make(schema)
    await other.open()
    try:
        run = await created(other)
        await store.get_run(run.id)  # connected, not listening
        async with asyncio.timeout(5):
            await store.wait_for_activity(60)  # at once: it was not listening
        heard = asyncio.Event()
        unwatch = store.watch_inbox(run.id, heard.set)
        async with asyncio.timeout(10):
            while not heard.is_set():  # posted again until heard: the first may come early
                await other.post(run.id, "wake", {})
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await heard.wait()
        unwatch()
    finally:
        await store.close()
        await other.close()


async def test_hook_token_race_has_exactly_one_winner(schema: str) -> None:
    stores = [make(schema) for _ in range(4)]
    try:
        for token in (f"race-{n}" for n in range(10)):
            runs = [f"wrun_{token}_{i}" for i in range(len(stores))]
            owners = await asyncio.gather(
                *(
                    s.register_hook(HookRecord(token, r, op=1))
                    for s, r in zip(stores, runs, strict=True)
                )
            )
            winners = [r for r, owner in zip(runs, owners, strict=True) if owner is None]
            assert len(winners) == 1
            assert all(owner in (None, winners[0]) for owner in owners)
            found = await stores[1].get_hook(token)
            assert found is not None and found.run_id == winners[0]
    finally:
        for store in stores:
            await store.close()


async def _advisory_holders(schema: str, run_id: str) -> list[int]:
    """Backend pids holding the run's advisory lock, as the server sees it."""
    from wf.store.postgres._schema import lock_key

    key = lock_key(schema, run_id) & 0xFFFFFFFFFFFFFFFF
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
            [key >> 32, key & 0xFFFFFFFF],
        )
        return [row[0] for row in await cur.fetchall()]


async def _acquire_soon(store: Store, run_id: str, seconds: float = 10.0) -> Any:
    """Poll until the run's lease is free (the server notices a dead client quickly)."""
    for _ in range(int(seconds / 0.05)):
        lease = await store.try_acquire(run_id)
        if lease is not None:
            return lease
        await asyncio.sleep(0.05)
    raise AssertionError(f"lease on {run_id} never became free")


async def _cut_lock_connection(schema: str, run_id: str) -> None:
    """Terminate the backend holding the run's advisory lock (the lease holder's lock
    connection dies: its leases may be taken over)."""
    [pid] = await _advisory_holders(schema, run_id)
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", [pid])


async def test_all_leases_of_an_instance_share_one_connection(schema: str) -> None:
    store = make(schema)
    try:
        runs = [await created(store) for _ in range(30)]
        leases = [await acquire(store, r.id) for r in runs]
        holders = {pid for r in runs for pid in await _advisory_holders(schema, r.id)}
        assert len(holders) == 1
        for lease in leases:
            await lease.release()
        assert await _advisory_holders(schema, runs[0].id) == []
    finally:
        await store.close()


async def test_closing_a_store_while_leases_are_handed_back_is_safe(schema: str) -> None:
    """Drivers hand their leases back as their store closes. Closing the lock connection under
    an unlock round trip in flight freed the libpq connection that round trip was paused on,
    and the interpreter aborted (CI, Python 3.12). Closing now waits for it: every yield point
    of the hand-back is tried."""
    for yields in range(12):
        store = make(schema)
        runs = [await created(store) for _ in range(5)]
        leases = [await acquire(store, r.id) for r in runs]
        releases = [asyncio.create_task(lease.release()) for lease in leases]
        for _ in range(yields):
            await asyncio.sleep(0)
        await store.close()
        await asyncio.gather(*releases, return_exceptions=True)
        assert await _advisory_holders(schema, runs[0].id) == [], yields


async def test_lease_of_a_killed_process_is_released(schema: str) -> None:
    store = make(schema)
    try:
        run = await created(store)
        proc = python(
            "import asyncio\n"
            "from wf.store.postgres import PostgresStore\n"
            "async def main():\n"
            f"    store = PostgresStore({DSN!r}, schema={schema!r})\n"
            f"    lease = await store.try_acquire({run.id!r})\n"
            "    print('held' if lease else 'busy', flush=True)\n"
            "    await asyncio.sleep(120)\n"
            "asyncio.run(main())\n"
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)
            assert line.strip() == "held", proc.stderr.read() if proc.stderr else ""
            assert await store.try_acquire(run.id) is None
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        lease = await _acquire_soon(store, run.id)
        await lease.release()
    finally:
        await store.close()


async def test_a_forked_helper_keeps_no_lease_of_a_dead_worker(schema: str) -> None:
    """A step's helper forked by the worker inherits the lock connection's socket, and with it
    the session's advisory locks: the worker killed, the run and the cap's place are free at
    once, not when the helper exits."""
    store = make(schema)
    try:
        run = await created(store)
        code = forking_holder(f"PostgresStore({DSN!r}, schema={schema!r})", run.id)
        code = "from wf.store.postgres import PostgresStore\n" + code
        await taken_over_beside_a_forked_helper(store, code, run.id)
    finally:
        await store.close()


async def test_a_lease_whose_connection_died_is_fenced_off(schema: str) -> None:
    first, second = make(schema), make(schema)
    try:
        run = await created(first)
        old = await acquire(first, run.id)
        await old.append([{"type": "old", "ts": 1.0}])
        await _cut_lock_connection(schema, run.id)
        new = await _acquire_soon(second, run.id)
        with pytest.raises(StoreError, match="lost"):
            await old.append([{"type": "stale", "ts": 2.0}])
        run.status = RunStatus.FAILED
        with pytest.raises(StoreError, match="lost"):
            await old.save(run)
        await old.release()  # nothing to give back: no error
        await new.append([{"type": "new", "ts": 3.0}])
        await new.release()
        journal = await second.read_journal(run.id)
        assert [e["type"] for e in journal] == ["run_started", "old", "new"]
        assert (await second.get_run(run.id)).status is RunStatus.PENDING
        again = await acquire(first, run.id)  # the instance recovers a fresh lock connection
        await again.release()
    finally:
        await first.close()
        await second.close()


async def test_writes_of_concurrent_runs_share_statements(schema: str) -> None:
    """Appends and saves of many leases at once go out in a few batched statements, and each
    lands in its own run's journal, in order."""
    store = make(schema)
    try:
        runs = [await created(store) for _ in range(40)]
        leases = [await acquire(store, r.id) for r in runs]
        writes = (await store._ready()).writes
        before = writes.batches

        async def drive(lease: Any, run: RunRecord) -> None:
            await lease.append([{"type": "a", "ts": 1.0}, {"type": "b", "ts": 1.0}])
            run.status = RunStatus.RUNNING
            await lease.append_and_save([{"type": "c", "ts": 2.0}], run)
            lease.append_soon([{"type": "d", "ts": 3.0}])
            run.status = RunStatus.COMPLETED
            run.output = run.id
            await lease.append_and_save([{"type": "e", "ts": 4.0}], run)

        await asyncio.gather(*(drive(lease, run) for lease, run in zip(leases, runs, strict=True)))
        # 120 durable writes: batched, they take far fewer statements.
        assert writes.batches - before < 40
        for run in runs:
            journal = await store.read_journal(run.id)
            assert [e["type"] for e in journal] == ["run_started", "a", "b", "c", "d", "e"]
            saved = await store.get_run(run.id)
            assert (saved.status, saved.output) == (RunStatus.COMPLETED, run.id)
        for lease in leases:
            await lease.release()
    finally:
        await store.close()


async def test_a_visible_append_reaches_other_processes_without_a_durable_commit(
    schema: str,
) -> None:
    """``append_visible`` (a drive's mark) is read by another instance once it returns, and is
    committed without waiting for the WAL flush; the next ``append`` is durable and comes
    after it in the journal."""
    store, peer = make(schema), make(schema)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        writes = (await store._ready()).writes
        flags: list[bool] = []
        write = writes.write

        async def spied(*args: Any, durable: bool, **kwargs: Any) -> Any:
            flags.append(durable)
            return await write(*args, durable=durable, **kwargs)

        writes.write = spied  # type: ignore[method-assign]
        await lease.append_visible([{"type": "step_started", "ts": 1.0}])
        assert [e["type"] for e in await peer.read_journal(run.id)][-1] == "step_started"
        await lease.append([{"type": "step_completed", "ts": 2.0}])
        assert flags == [False, True]
        journal = [e["type"] for e in await peer.read_journal(run.id)]
        assert journal == ["run_started", "step_started", "step_completed"]
        await lease.release()
    finally:
        await store.close()
        await peer.close()


async def test_a_runs_last_step_shares_the_outcomes_commit(schema: str) -> None:
    """A step's completion (``append_pending``) waits for the outcome's write and goes out in
    its statement, durably: a run's last step costs no commit of its own."""
    store, peer = make(schema), make(schema)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        writes = (await store._ready()).writes
        calls: list[tuple[int, bool, bool]] = []
        write = writes.write

        async def spied(run_id: str, epoch: int, events: Any, *rest: Any, durable: bool) -> Any:
            calls.append((len(orjson.loads(events)), bool(rest), durable))
            return await write(run_id, epoch, events, *rest, durable=durable)

        writes.write = spied  # type: ignore[method-assign]
        assert lease.append_pending([{"type": "step_completed", "ts": 1.0}])
        ended = dataclasses.replace(run, status=RunStatus.COMPLETED)
        await lease.append_and_save([{"type": "run_completed", "ts": 2.0}], ended)
        assert calls == [(2, True, True)]  # both events and the record, one durable write
        journal = [e["type"] for e in await peer.read_journal(run.id)]
        assert journal == ["run_started", "step_completed", "run_completed"]
        assert (await peer.get_run(run.id)).status is RunStatus.COMPLETED
        await lease.release()
    finally:
        await store.close()
        await peer.close()


async def test_pending_events_a_takeover_fenced_off_fail_every_later_write(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held ``append_pending`` events whose write a takeover refuses are never dropped
    silently: ``settle`` fails, and so does every later write of the lease, so nothing the
    run did after them is recorded without them."""
    monkeypatch.setattr("wf.store.postgres._lease.PENDING", 60.0)  # held until the settle
    first, second = make(schema), make(schema)
    try:
        run = await created(first)
        lease = await acquire(first, run.id)
        assert lease.append_pending([{"type": "step_completed", "ts": 1.0}])
        await _cut_lock_connection(schema, run.id)
        new = await _acquire_soon(second, run.id)
        with pytest.raises(StoreError, match="lost"):
            await lease.settle()
        with pytest.raises(StoreError, match="lost"):
            await lease.append([{"type": "after", "ts": 2.0}])
        with pytest.raises(StoreError, match="lost"):
            await lease.save(dataclasses.replace(run, status=RunStatus.COMPLETED))
        assert [e["type"] for e in await second.read_journal(run.id)] == ["run_started"]
        await new.release()
        with contextlib.suppress(StoreError):
            await lease.release()
    finally:
        await first.close()
        await second.close()


async def test_a_fenced_write_fails_alone_in_its_batch(schema: str) -> None:
    """A lease taken over by another driver is refused, while the writes batched with it
    (whose epochs held) land."""
    first, second = make(schema), make(schema)
    try:
        runs = [await created(first) for _ in range(3)]
        old = [await acquire(first, r.id) for r in runs]
        await _cut_lock_connection(schema, runs[0].id)
        new = await _acquire_soon(second, runs[1].id)  # only this one is taken over
        outcomes = await asyncio.gather(
            *(lease.append([{"type": "old", "ts": 2.0}]) for lease in old),
            return_exceptions=True,
        )
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], StoreError) and "lost" in str(outcomes[1])
        await new.append([{"type": "new", "ts": 3.0}])
        journals = [[e["type"] for e in await second.read_journal(r.id)] for r in runs]
        assert journals == [["run_started", "old"], ["run_started", "new"], ["run_started", "old"]]
        await new.release()
        for lease in old:
            await lease.release()
    finally:
        await first.close()
        await second.close()


@pytest.mark.parametrize("text", [b'{"x":"\\ud800"}', b"[" * 1100 + b"]" * 1100, b"[1e400]"])
def test_a_json_cell_orjson_cannot_read_is_handed_on_as_unreadable(text: bytes) -> None:
    """What PostgreSQL's ``json`` takes and orjson does not is decoded to a value that fails
    only where it is used, with the collector's state given back as it was found."""
    import gc

    from wf.store.postgres._conn import Unreadable, loads, readable

    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            value = loads(text)
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
        assert isinstance(value, Unreadable)
        with pytest.raises(wf.StoreCorrupted, match=r"^wf_runs row 'x': not JSON wf can read"):
            readable(value, "wf_runs row 'x'")
    assert loads(b'{"a":[1]}') == readable({"a": [1]}, "anywhere") == {"a": [1]}


@pytest.mark.parametrize("workflow", ["tests:flow\0", None], ids=["nul", "null"])
async def test_a_write_the_server_refuses_a_value_of_fails_alone_in_its_batch(
    schema: str, workflow: str | None
) -> None:
    """A run whose record holds what no ``text`` column takes (a NUL in its workflow name,
    left by a stray ``UPDATE``), or a null where a column takes none (a caller's record with
    no workflow: SQLSTATE 23502, outside class 22's data exceptions), fails its own writes as
    damage; the writes batched with it land, as if it had not been there."""
    store = make(schema)
    try:
        runs = [await created(store) for _ in range(3)]
        leases = [await acquire(store, r.id) for r in runs]
        victim = runs[1]
        victim.workflow = workflow  # type: ignore[assignment]
        victim.status = RunStatus.RUNNING
        event = {"type": "x", "ts": 2.0}
        outcomes = await asyncio.gather(
            leases[0].append([event]),
            leases[1].append_and_save([event], victim),
            leases[2].append([event]),
            return_exceptions=True,
        )
        assert outcomes[0] is None and outcomes[2] is None, outcomes
        assert isinstance(outcomes[1], wf.StoreCorrupted), outcomes
        assert str(outcomes[1]).startswith(f"wf_runs row {victim.id!r}: PostgreSQL refused")
        journals = [[e["type"] for e in await store.read_journal(r.id)] for r in runs]
        assert journals == [["run_started", "x"], ["run_started"], ["run_started", "x"]]
        # Alone too: a lone save of it is the run's damage, not a failure of the store.
        with pytest.raises(wf.StoreCorrupted, match="PostgreSQL refused the run's write"):
            await leases[1].save(victim)
        for lease in leases:
            with contextlib.suppress(StoreError):
                await lease.release()
    finally:
        await store.close()


async def _damage(schema: str, query: str, *params: Any) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
        await admin.execute(query.format(s=schema), params)  # type: ignore[arg-type]


async def test_verify_repairs_a_record_an_older_worker_rewrote_from_its_columns(
    schema: str,
) -> None:
    """A worker of a wf from before pinning, still running after the schema's upgrade, saves
    a pinned run's record without ``seq`` and ``code_hash`` and with the code's hash as
    ``deployment``: the run reads back unpinned while the ``deployment`` column says v2.
    ``verify`` says so and repairs the record from the columns, once."""
    store = make(schema)
    try:
        run = await created(store, deployment="v2")
        await _damage(
            schema,
            "UPDATE {s}.wf_runs SET record = ((record::jsonb - 'seq' - 'code_hash')"
            ' || \'{{"deployment": "0123456789ab"}}\'::jsonb)::json WHERE id = %s',
            run.id,
        )
        assert (await store.get_run(run.id)).deployment is None
        problems = await store.verify()
        assert problems == [
            f"run {run.id}: its record disagrees with its columns (seq None, column {run.seq}; "
            "deployment None, column 'v2'; a worker of an older wf rewrote it): repaired from "
            "the columns"
        ]
        again = await store.get_run(run.id)
        assert (again.deployment, again.seq, again.code_hash) == ("v2", run.seq, "0123456789ab")
        assert await store.verify() == []
    finally:
        await store.close()


async def test_verify_keeps_an_older_workers_save_made_while_it_repairs(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older worker saves the record again (the run completed, still without ``seq``)
    between verify's read and its repair: the three keys verify guards on are unchanged, and
    the repair sets them alone, so the save's status and output stay."""
    store = make(schema)
    try:
        run = await created(store, deployment="v2")
        await _damage(
            schema,
            "UPDATE {s}.wf_runs SET record = (record::jsonb - 'seq')::json WHERE id = %s",
            run.id,
        )
        repair = PostgresStore._repair_record

        async def saved_meanwhile(self: PostgresStore, run_id: str, *args: Any) -> list[str]:
            await _damage(
                schema,
                "UPDATE {s}.wf_runs SET status = 'completed', record = (record::jsonb"
                ' || \'{{"status": "completed", "output": "DONE"}}\'::jsonb)::json'
                " WHERE id = %s",
                run_id,
            )
            return await repair(self, run_id, *args)

        monkeypatch.setattr(PostgresStore, "_repair_record", saved_meanwhile)
        [problem] = await store.verify()
        assert problem.endswith("repaired from the columns"), problem
        monkeypatch.undo()
        again = await store.get_run(run.id)
        assert (again.status, again.output) == (RunStatus.COMPLETED, "DONE")
        assert (again.seq, again.deployment) == (run.seq, "v2")
        assert await store.verify() == []
    finally:
        await store.close()


async def test_verify_names_values_the_server_takes_and_wf_cannot_use(schema: str) -> None:
    """``verify`` names a record whose workflow holds a NUL (no save of it can succeed) and a
    record or event that orjson cannot read, each by its row, instead of failing as a whole
    on the server's ``->>``."""
    store = make(schema)
    try:
        nul, surrogate, number, healthy = [await created(store) for _ in range(4)]
        await _damage(
            schema,
            "UPDATE {s}.wf_runs SET record = replace(record::text, '\"tests:flow\"',"
            " '\"tests:flow\\u0000\"')::json WHERE id = %s",
            nul.id,
        )
        await _damage(
            schema,
            "UPDATE {s}.wf_runs SET record = replace(record::text, '\"group\":null',"
            ' \'"group":"\\ud800"\')::json WHERE id = %s',
            surrogate.id,
        )
        await _damage(
            schema,
            "UPDATE {s}.wf_journal SET event = ('{{\"n\":1e400,' || substr(event::text, 2))"
            "::json WHERE run_id = %s",
            number.id,
        )
        problems = await store.verify()
        assert len(problems) == 3, problems
        assert f"wf_runs row {nul.id!r}: its workflow holds a NUL character" in problems[0]
        assert problems[1].startswith(f"wf_runs row {surrogate.id!r}: not JSON wf can read")
        assert problems[2].startswith(
            f"wf_journal row of run {number.id!r}, event 0: not JSON wf can read"
        )
        assert (await store.get_run(healthy.id)).id == healthy.id
    finally:
        await store.close()


_STRAY_ROWS = [
    "{}",
    "[1, 2]",
    '{"ts": "nope", "op": 0, "step": "s", "attempt": 1, "stream": "stdout", "text": "x"}',
    '{"ts": 1.0, "op": "x", "step": ["s"], "attempt": 1, "stream": "stdout", "text": "x"}',
    '{"ts": 1.0, "op": 0, "step": "s", "attempt": 1.5, "stream": "stdout", "text": "x"}',
    '{"ts": 1.0, "op": 1e3, "step": "s", "attempt": 1, "stream": "stdout", "text": "x"}',
    '{"ts": 1.0, "op": 0, "step": "s", "attempt": 1, "stream": "stdout", "text": 5}',
    '{"ts": 1.0, "op": 0, "step": "s", "attempt": 1, "stream": "log", "text": "", "level": 1}',
    '{"ts": 1.0, "op": null, "step": "s", "attempt": 1, "stream": "stdout", "text": "x"}',
    '{"ts": true, "op": 0, "step": "s", "attempt": 1, "stream": "stdout", "text": "x"}',
    '{"ts": 1.0, "text": "\\u0000", "step": 7}',  # PostgreSQL's -> fails on any \u0000
    '{"ts": 1e400, "text": "x"}',  # PostgreSQL takes it, orjson cannot read it
    '{"ts": 1.0, "text": "\\ud800"}',  # the same: a lone surrogate
]


@pytest.mark.parametrize("line", _STRAY_ROWS)
async def test_a_step_log_row_of_the_wrong_shape_is_skipped_as_a_stray_write(
    schema: str, line: str
) -> None:
    """As on the other stores: a row that is no log entry (not an object, a field of another
    type, JSON orjson cannot read) is skipped and not counted: ``start`` counts the entries
    read, so a follower's next read neither skips nor repeats one."""
    from wf.store.conformance import log_entry

    store = make(schema)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        await lease.append_logs([log_entry("before")])
        await _damage(
            schema, "INSERT INTO {s}.wf_logs (run_id, entry) VALUES (%s, %s)", run.id, line
        )
        await lease.append_logs([log_entry("after"), log_entry("last")])
        await lease.release()
        texts = [entry["text"] for entry in await store.read_logs(run.id)]
        assert texts == ["before", "after", "last"]
        assert [entry["text"] for entry in await store.read_logs(run.id, 1)] == ["after", "last"]
        assert [entry["text"] for entry in await store.read_logs(run.id, 2)] == ["last"]
        assert await store.read_logs(run.id, 3) == []
    finally:
        await store.close()


@pytest.mark.parametrize(
    "stray",
    [
        {"text": "no time"},
        {"ts": math.nan, "text": "NaN"},
        {"ts": math.inf, "text": "inf"},
        {"ts": True, "text": "a bool"},
        {"ts": 1.0, "text": "x", "step": 5},
    ],
)
async def test_an_appended_step_log_entry_readers_would_not_take_is_skipped(
    schema: str, stray: dict[str, Any]
) -> None:
    """``append_logs`` stores what it is given, and marks as checked only a batch of entries
    readers take as they will read them back (a NaN time is stored as ``null``): the rest are
    checked, and skipped, as any stray row."""
    from wf.store.conformance import log_entry

    store = make(schema)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        await lease.append_logs([log_entry("a"), stray, log_entry("b")])
        await lease.release()
        assert [entry["text"] for entry in await store.read_logs(run.id)] == ["a", "b"]
        assert [entry["text"] for entry in await store.read_logs(run.id, 1)] == ["b"]
    finally:
        await store.close()


async def test_a_step_log_entry_whose_time_is_no_64_bit_number_is_not_stored(
    schema: str,
) -> None:
    """An int time beyond what JSON storage takes is refused as any value that is not JSON
    (``StoreError``), not with an ``OverflowError`` of the check, and nothing is stored."""
    from wf.store.conformance import log_entry

    store = make(schema)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        with pytest.raises(StoreError, match="not JSON"):
            await lease.append_logs([log_entry("a"), {**log_entry("b"), "ts": 10**400}])
        await lease.release()
        assert await store.read_logs(run.id) == []
    finally:
        await store.close()


def _count_queries(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queries ``store`` sends through its one-row and all-rows helpers, as sent."""
    sent: list[str] = []
    for name in ("_fetchone", "_fetchall"):
        method = getattr(store, name)

        async def spy(what: str, query: str, *args: Any, _method: Any = method, **kw: Any) -> Any:
            sent.append(query)
            return await _method(what, query, *args, **kw)

        monkeypatch.setattr(store, name, spy)
    return sent


async def test_step_logs_wf_wrote_are_read_in_one_query(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows ``append_logs`` wrote are read by one query, with no look at stray rows: a
    change that sent every read down the path that checks rows would fail here."""
    from wf.store.conformance import log_entry

    store = make(schema)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        await lease.append_logs([log_entry(str(n), level="INFO") for n in range(5)])
        await lease.append_logs([log_entry(str(n)) for n in range(5, 10)])
        await lease.release()
        sent = _count_queries(store, monkeypatch)
        assert [entry["text"] for entry in await store.read_logs(run.id, 8)] == ["8", "9"]
        assert len(await store.read_logs(run.id)) == 10
        assert len(sent) == 2
    finally:
        await store.close()


async def test_a_step_log_row_a_stray_update_changed_is_skipped(schema: str) -> None:
    """The case met: an ``UPDATE`` made a stored entry's ``ts`` a string, and the run's page
    failed. Readers skip it from then on, wherever the read starts."""
    from wf.store.conformance import log_entry

    store = make(schema)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        await lease.append_logs([log_entry(text) for text in ("a", "b", "c", "d")])
        await lease.release()
        assert [entry["text"] for entry in await store.read_logs(run.id, 3)] == ["d"]
        await _damage(
            schema,
            'UPDATE {s}.wf_logs SET entry = (entry::jsonb || \'{{"ts": "x"}}\')::json'
            " WHERE run_id = %s AND entry->>'text' = 'b'",
            run.id,
        )
        assert [entry["text"] for entry in await store.read_logs(run.id)] == ["a", "c", "d"]
        assert [entry["text"] for entry in await store.read_logs(run.id, 2)] == ["d"]
        assert await store.read_logs(run.id, 3) == []
    finally:
        await store.close()


async def test_step_log_entries_with_a_nul_or_a_surrogate_escape_are_read(schema: str) -> None:
    """Entries wf writes are served whatever their text holds: a NUL (stored as ``\\u0000``,
    which PostgreSQL's ``->`` and ``jsonb`` refuse) and a lone surrogate escaped as text."""
    from wf.store.conformance import log_entry

    store = make(schema)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        texts = ["a\x00b", "\\ud800", "c"]
        await lease.append_logs([log_entry(text, step="\x00") for text in texts])
        await lease.release()
        assert [entry["text"] for entry in await store.read_logs(run.id)] == texts
        assert [entry["text"] for entry in await store.read_logs(run.id, 2)] == ["c"]
    finally:
        await store.close()


async def test_pooled_connections_killed_while_idle_are_replaced(schema: str) -> None:
    """A server restart (here: every backend of the store terminated) must not fail the next
    operations: idle connections the server closed are dropped, not used.

    Only this store's backends are terminated (its own application name): other tests and
    processes on the same server keep theirs."""
    from psycopg.conninfo import make_conninfo

    name = f"wf-test-{schema}"[:63]
    store = PostgresStore(make_conninfo(DSN, application_name=name), schema=schema)
    try:
        run = await created(store)
        await asyncio.gather(*(store.get_run(run.id) for _ in range(4)))  # fill the pool
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            killed = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            assert len(await killed.fetchall()) >= 1  # the pool's connections were there
        await asyncio.sleep(0.2)  # the goodbyes arrive
        for _ in range(4):
            assert (await store.get_run(run.id)).id == run.id
        lease = await _acquire_soon(store, run.id)  # the lock connection is replaced too
        await lease.append([{"type": "after", "ts": 2.0}])
        await lease.release()
        assert [e["type"] for e in await store.read_journal(run.id)][-1] == "after"
    finally:
        await store.close()


async def test_a_lost_listen_connection_is_said_in_one_line(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """libpq says a terminated connection in several lines (``server closed the connection
    unexpectedly`` / ``This probably means ...``): the warning is one line, as is every
    ``StoreError`` made of a psycopg error."""
    name = f"wf-test-{schema}"[:63]
    store = PostgresStore(make_conninfo(DSN, application_name=name), schema=schema)
    try:
        await store.open()
        await store.next_due_at()  # reads the queue, as a worker does: the loss is a warning
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            killed = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND query LIKE 'LISTEN%%'",
                (name,),
            )
            assert len(await killed.fetchall()) == 1
        for _ in range(100):
            lost = [r for r in caplog.records if "lost its PostgreSQL LISTEN" in r.getMessage()]
            if lost:
                break
            await asyncio.sleep(0.05)  # the goodbye arrives
        [said] = lost
        assert "\n" not in said.getMessage() and "closed the connection" in said.getMessage()
    finally:
        await store.close()


async def test_a_listen_connection_that_cannot_come_back_for_a_while_is_said_once(
    schema: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LISTEN connection lost and the server refusing connections for a while (a
    restart): one line says it cannot listen, one that it listens again, not one per retry
    (170 lines in one outage)."""
    from wf.store.postgres import _signals

    monkeypatch.setattr(_signals, "_RECONNECT_DELAY", (0.01, 0.02))
    real = _signals.connect
    refused = [0]

    async def connect(*args: Any, **kwargs: Any) -> Any:
        if refused[0] < 6:
            refused[0] += 1
            raise wf.StoreUnavailable("cannot connect to PostgreSQL: the test refused it")
        return await real(*args, **kwargs)

    name = f"wf-test-{schema}"[:63]
    store = PostgresStore(make_conninfo(DSN, application_name=name), schema=schema)
    try:
        await store.open()
        await store.next_due_at()  # reads the queue, as a worker does: the loss is a warning
        monkeypatch.setattr(_signals, "connect", connect)
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            killed = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND query LIKE 'LISTEN%%'",
                (name,),
            )
            assert len(await killed.fetchall()) == 1
        said: list[str] = []
        for _ in range(200):
            said = [r.getMessage() for r in caplog.records if "LISTEN" in r.getMessage()]
            said += [r.getMessage() for r in caplog.records if "listens" in r.getMessage()]
            if any("again" in m for m in said):
                break
            await asyncio.sleep(0.05)  # the goodbye arrives, the retries fail, one works
        assert refused[0] == 6
        assert [m.split(":")[0] for m in said] == [
            "wf lost its PostgreSQL LISTEN connection",
            "wf cannot LISTEN on PostgreSQL yet",
            "wf listens on PostgreSQL again",
        ], said
    finally:
        await store.close()


async def test_notifications_wake_waiters_of_another_instance(schema: str) -> None:
    waiter_store, writer = make(schema), make(schema)
    try:
        await waiter_store.open()
        # Timeouts far beyond the test's patience: only a notification can end these waits.
        waiting = asyncio.ensure_future(waiter_store.wait_for_activity(600.0))
        await asyncio.sleep(0)
        run = await created(writer)
        await asyncio.wait_for(waiting, 5.0)

        lease = await acquire(writer, run.id)
        # The instance's first wait for a run starts listening for journal changes, which
        # workers never do (they are not told of every step of each other's runs): it ends at
        # once, since a change announced before it listened was not heard.
        await asyncio.wait_for(waiter_store.wait_for_run(run.id, 600.0), 5.0)
        waiting = asyncio.ensure_future(waiter_store.wait_for_run(run.id, 600.0))
        await asyncio.sleep(0.05)
        await lease.append([{"type": "step_completed", "ts": 1.0}])
        await asyncio.wait_for(waiting, 5.0)

        waiting = asyncio.ensure_future(waiter_store.wait_for_run(run.id, 600.0))
        await asyncio.sleep(0.05)
        await lease.write_chunk("out", 0, b"x")
        await asyncio.wait_for(waiting, 5.0)
        await lease.release()
    finally:
        await waiter_store.close()
        await writer.close()


@pytest.mark.parametrize("group", [None, "g"])
async def test_only_a_grouped_runs_end_wakes_other_instances_workers(
    schema: str, group: str | None
) -> None:
    """A run that ends outside a group makes nothing startable (a cap's place announces
    itself when released, a parent hears through a post): other instances' workers
    (``wait_for_activity``) are not woken for it, while its watchers and views of many runs
    (``wait_for_run``, ``wait_for_change``) are. A grouped run's end wakes workers: its lane's
    next run may start now. With W workers, every end announced to all of them cost each
    worker and its server backend the ends of all the others' runs."""
    waiter_store, writer = make(schema), make(schema)
    try:
        await waiter_store.open()
        run = await created(writer, group=group)
        lease = await acquire(writer, run.id)
        await lease.save(dataclasses.replace(run, status=RunStatus.RUNNING))
        # Both listen from here on (each first wait only starts listening and ends at once).
        await asyncio.wait_for(waiter_store.wait_for_run(run.id, 600.0), 5.0)
        await asyncio.wait_for(waiter_store.wait_for_change(600.0), 5.0)
        await waiter_store.list_runs()
        await waiter_store.due_runs(0.0)  # the queue as it is now has been read
        workers = asyncio.ensure_future(waiter_store.wait_for_activity(1.0))
        watcher = asyncio.ensure_future(waiter_store.wait_for_run(run.id, 600.0))
        view = asyncio.ensure_future(waiter_store.wait_for_change(600.0))
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        ended = loop.time()
        await lease.save(dataclasses.replace(run, status=RunStatus.COMPLETED, output=1))
        await lease.release()
        await asyncio.wait_for(asyncio.gather(watcher, view), 5.0)
        await asyncio.wait_for(workers, 5.0)
        woken_at_once = loop.time() - ended < 0.5  # else the wait's own 1 s timeout ended it
        assert woken_at_once == (group is not None)
    finally:
        await waiter_store.close()
        await writer.close()


async def _heard(channel: str, during: Any, seconds: float, *, first: bool = False) -> list[str]:
    """Payloads a bare connection ``LISTEN``ing on ``channel`` receives while ``during`` runs,
    and for ``seconds`` after, or until the ``first`` (an older wf, say: it holds no lock
    saying it listens)."""
    got: list[str] = []
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as spy:
        await spy.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))

        async def listen() -> None:
            async for notify in spy.notifies():
                got.append(notify.payload)
                if first:
                    return

        listening = asyncio.ensure_future(listen())
        await during
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(listening, seconds)
    return got


async def test_the_run_channel_is_announced_on_only_while_a_store_listens_there(
    schema: str,
) -> None:
    """A ``NOTIFY`` wakes every backend listening on any channel of the database, so the run
    channel's announcements (a busy worker's every round trip) woke every worker's backend
    for nothing. They are sent only while some store instance listens there."""
    from wf.store.postgres._session import channel_name

    writer, watcher = make(schema), make(schema)
    try:
        run = await created(writer)
        lease = await acquire(writer, run.id)
        current = (await writer._ready()).schema
        channel = channel_name(current, "wfr")
        quiet = await _heard(channel, lease.append([{"type": "e", "ts": 1.0}]), 0.5)
        assert quiet == []
        await watcher.wait_for_run(run.id, 0.01)  # from now on it listens on the run channel
        heard = await _heard(channel, lease.append([{"type": "e", "ts": 2.0}]), 5.0, first=True)
        assert any(run.id in payload for payload in heard), heard
        await lease.release()
    finally:
        await watcher.close()
        await writer.close()


async def test_the_run_channel_is_let_go_once_nothing_waits_there(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that waited for a run once (an application awaiting one result) would keep
    every worker announcing its runs' steps and ends for the rest of its life: it stops
    listening there once nothing has waited for a while, and listens again at its next wait
    (which then ends at once: what was announced meanwhile was not heard)."""
    from wf.store.postgres import _signals
    from wf.store.postgres._session import channel_name

    monkeypatch.setattr(_signals, "RUN_LISTEN_LINGER", 0.3)
    writer, watcher = make(schema), make(schema)
    try:
        run = await created(writer)
        lease = await acquire(writer, run.id)
        channel = channel_name((await writer._ready()).schema, "wfr")
        await watcher.wait_for_run(run.id, 0.01)  # listens from now on
        heard = await _heard(channel, lease.append([{"type": "e", "ts": 1.0}]), 5.0, first=True)
        assert any(run.id in payload for payload in heard), heard
        await asyncio.sleep(1.0)  # no wait for longer than the linger
        quiet = await _heard(channel, lease.append([{"type": "e", "ts": 2.0}]), 0.5)
        assert quiet == []  # nobody listens: nothing is announced there
        loop = asyncio.get_running_loop()
        began = loop.time()
        await watcher.wait_for_run(run.id, 5.0)  # listens again, and returns at once
        assert loop.time() - began < 2.0
        heard = await _heard(channel, lease.append([{"type": "e", "ts": 3.0}]), 5.0, first=True)
        assert any(run.id in payload for payload in heard), heard
        await lease.release()
    finally:
        await watcher.close()
        await writer.close()


async def test_an_instance_is_not_woken_again_by_its_own_notifications(schema: str) -> None:
    # Its waiters were woken when the change committed; the server's echo of the notification
    # would wake them a second time (a worker would look at the queue again for nothing).
    store = make(schema)
    try:
        await store.open()  # listening, as a worker's store is (a first wait returns at once)
        await created(store)
        await store.due_runs(0.0)  # the change is read: nothing new since
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait_for(store.wait_for_activity(0.5), 5.0)
        assert loop.time() - began >= 0.4  # the echo arrives within milliseconds
    finally:
        await store.close()


# -- the database ----------------------------------------------------------------------------


async def test_tables_are_created_once_by_processes_starting_together(schema: str) -> None:
    stores = [make(schema) for _ in range(5)]
    try:
        assert await asyncio.gather(*(s.list_runs() for s in stores)) == [[]] * 5
        run = await created(stores[0])
        assert [r.id for r in await stores[4].list_runs()] == [run.id]
    finally:
        for store in stores:
            await store.close()


async def _schema_of_version(conn: Any, schema: str, version: int) -> None:
    """``schema`` as a wf of schema ``version`` left it: its tables, the migrations up to
    ``version``, and the version it records."""
    from wf.store.postgres._schema import _TABLES, MIGRATIONS

    await conn.execute(f"CREATE SCHEMA {schema}")
    await conn.execute(f"SET search_path TO {schema}")
    await conn.execute(_TABLES)
    for number, statements in MIGRATIONS:
        if number <= version:
            await conn.execute(statements)
    await conn.execute("CREATE TABLE wf_meta (key text PRIMARY KEY, value text NOT NULL)")
    await conn.execute("INSERT INTO wf_meta VALUES ('schema_version', %s)", (str(version),))


async def test_a_read_only_server_is_read_from_without_creating_tables(schema: str) -> None:
    """Tables already at this version are only read at startup: a read-only server (a
    replica, ``default_transaction_read_only``) lists runs and counts them."""
    writer = make(schema)
    try:
        run = await created(writer)
    finally:
        await writer.close()
    read_only = make_conninfo(DSN, options="-c default_transaction_read_only=on")
    reader = PostgresStore(read_only, schema=schema)
    try:
        assert [r.id for r in await reader.list_runs()] == [run.id]
        assert (await reader.get_run(run.id)).id == run.id
        assert (await reader.store_info()).runs["pending"] == 1
        # The server's state, which passes (a failover over): waited out by a worker.
        with pytest.raises(wf.StoreUnavailable, match="read-only transaction"):
            await reader.create_run(record())
    finally:
        await reader.close()


async def test_a_version_5_schema_is_numbered_in_its_old_order(schema: str) -> None:
    """Runs of a database from before the creation sequence are numbered in id order (the
    order its queue and listings had); a lane keeps its order and becomes its queue's; new
    runs come after all of them."""
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await _schema_of_version(conn, schema, 5)
        rows = [("p3", None, None), ("p2", None, None), ("p1", None, None), ("p0", None, None)]
        rows += [("z-lane-first", "g", 1), ("a-lane-second", "g", 2)]
        for run_id, group, lane in rows:
            old = RunRecord(id=run_id, workflow="app:flow", group=group).to_json()
            del old["seq"]
            await conn.execute(
                "INSERT INTO wf_runs (id, workflow, status, due_at, record, grp, lane)"
                " VALUES (%s, 'app:flow', 'pending', 0, %s, %s, %s)",
                [run_id, orjson.dumps(old).decode(), group, lane],
            )
    store = make(schema)
    try:
        fresh = RunRecord(id="0-new", workflow="app:flow")
        assert await store.create_run(fresh)
        assert await store.due_runs(0.0) == [
            "a-lane-second", "p0", "p1", "p2", "p3", "z-lane-first", "0-new",
        ]  # fmt: skip
        listed = [r.id for r in await store.list_runs()]
        assert listed == ["0-new", "z-lane-first", "p3", "p2", "p1", "p0", "a-lane-second"]
        assert [r.seq for r in await store.list_runs()] == [7, 6, 5, 4, 3, 2, 1]
        second = await store.get_run("a-lane-second")
        lane = lane_of(second)
        assert lane is not None
        assert await store.lane_ahead(lane, second.id, 5) == ["z-lane-first"]
    finally:
        await store.close()


async def test_a_newer_schema_is_refused(schema: str) -> None:
    store = make(schema)
    await store.open()
    await store.close()
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute(f"UPDATE {schema}.wf_meta SET value = '99'")
    newer = make(schema)
    with pytest.raises(StoreVersionError, match="newer version of wf"):
        await newer.list_runs()
    await newer.close()


async def test_a_version_1_schema_is_upgraded_in_place(schema: str) -> None:
    """Tables made by the first version (no queue columns) gain them, and keep their runs."""
    from wf.store.postgres._schema import _TABLES

    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA {schema}")
        await conn.execute(f"SET search_path TO {schema}")
        await conn.execute(_TABLES)
        await conn.execute("CREATE TABLE wf_meta (key text PRIMARY KEY, value text NOT NULL)")
        await conn.execute("INSERT INTO wf_meta VALUES ('schema_version', '1')")
        await conn.execute(
            "INSERT INTO wf_runs (id, workflow, status, due_at, record) VALUES "
            "('old-run', 'tests:flow', 'pending', 0, '{\"id\": \"old-run\", "
            '"workflow": "tests:flow"}\')'
        )
    store = make(schema)
    try:
        assert await store.due_runs(0.0) == ["old-run"]
        fresh = RunRecord(id="new-run", workflow="tests:flow", priority=5, group="g")
        assert await store.create_run(fresh)
        assert await store.due_runs(0.0) == ["new-run", "old-run"]
        lane = lane_of(fresh)
        assert lane is not None and await store.lane_ahead(lane, "new-run", 5) == []
    finally:
        await store.close()
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        cur = await conn.execute(f"SELECT value FROM {schema}.wf_meta")
        assert (await cur.fetchone()) == (str(VERSION),)  # every step, in order


async def test_runs_of_a_version_5_database_are_unpinned(schema: str) -> None:
    """Before pinning, a record's ``deployment`` was its code's hash: after the upgrade the run
    is unpinned (no ``deployment`` column value), due to a worker of any deployment, and keeps
    the hash as ``code_hash``."""
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await _schema_of_version(conn, schema, 5)
        await conn.execute(
            "INSERT INTO wf_runs (id, workflow, status, due_at, record) VALUES "
            "('old-run', 'tests:flow', 'pending', 0, '{\"id\": \"old-run\", "
            '"workflow": "tests:flow", "deployment": "0123456789ab"}\')'
        )
    store = make(schema)
    try:
        assert await store.due_runs(0.0, deployments={"v1", None}) == ["old-run"]
        record = await store.get_run("old-run")
        assert (record.deployment, record.code_hash) == (None, "0123456789ab")
    finally:
        await store.close()


async def test_an_unreachable_server_is_a_clear_error() -> None:
    store = PostgresStore("postgresql://someone:secret@127.0.0.1:1/nowhere")
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:1/nowhere") as caught:
        await store.list_runs()
    assert "secret" not in str(caught.value)
    await store.close()


async def test_values_round_trip_exactly(schema: str) -> None:
    store = make(schema)
    try:
        odd = {
            "float": 1e20,
            "tiny": 5e-324,
            "nul": "a\x00b",
            "text": "é€😀",
            "keys": {"b": 1, "a": 2},
        }
        run = await created(store, input=odd)
        lease = await acquire(store, run.id)
        await lease.append([{"type": "e", "ts": 1.5, "value": odd}])
        await lease.release()
        got = await store.get_run(run.id)
        assert got.input == odd
        assert type(got.input["float"]) is float
        [_, event] = await store.read_journal(run.id)
        assert event["value"] == odd and list(event["value"]["keys"]) == ["b", "a"]
        await store.post(run.id, "hook", {"payload": odd})
        [message] = await store.read_inbox(run.id)
        assert message.data == {"payload": odd}
    finally:
        await store.close()


async def test_a_run_that_suspends_with_unread_messages_stays_due(schema: str) -> None:
    store = make(schema)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        await store.post(run.id, "wake", {})
        run.status = RunStatus.SUSPENDED  # saved as if the message had not been seen
        await lease.save(run)
        await lease.release()
        assert await store.due_runs(0.0) == [run.id]
    finally:
        await store.close()


async def test_lease_and_listen_connections_ask_for_tcp_keepalives(postgres_dsn: str) -> None:
    # Without them the server would notice a vanished machine (and free its leases) only
    # after the kernel default of two hours.
    from wf.store.postgres._conn import connect, with_keepalives

    conn = await connect(with_keepalives(postgres_dsn), "test")
    try:
        cur = await conn.execute("SHOW tcp_keepalives_idle")
        row = await cur.fetchone()
        assert row is not None and row[0] in ("30", "30s")
    finally:
        await conn.close()


def test_wf_postgres_dsn_selects_the_postgres_store(monkeypatch: pytest.MonkeyPatch) -> None:
    from wf._config import default_store

    monkeypatch.setenv("WF_POSTGRES_DSN", DSN)
    store = default_store()
    assert isinstance(store, PostgresStore) and store.dsn == DSN


def test_a_store_survives_a_new_event_loop(schema: str) -> None:
    store = make(schema)

    async def create() -> str:
        return (await created(store)).id

    run_id = asyncio.run(create())
    assert asyncio.run(store.get_run(run_id)).id == run_id
    asyncio.run(store.close())


# -- the engine on Postgres -------------------------------------------------------------------


@dataclasses.dataclass
class Approval:
    approved: bool
    by: str


steps_run: list[str] = []


@wf.step
def add(total: int, n: int) -> int:
    steps_run.append(f"add {n}")
    return total + n


@wf.workflow
async def pg_order(order: int) -> dict[str, Any]:
    total = 0
    for n in range(1, 4):
        total = await add(total, n * order)
    await wf.sleep(3600)  # beyond suspend_after: the run leaves memory and its lease
    hook: wf.Hook[Approval] = wf.create_hook(Approval, token=f"pg-approve-{order}")
    decision = await hook.next()
    return {"total": total, "by": decision.by, "approved": decision.approved}


async def test_workflows_run_to_completion_on_postgres(schema: str) -> None:
    steps_run.clear()
    clock = MockClock()
    first, second = make(schema), make(schema)
    try:
        engine = Engine(first, clock, suspend_after=0)
        with use_engine(engine):
            runs: list[wf.Run[Any]] = [
                await wf.start(pg_order, order, detach=True) for order in (1, 2, 3)
            ]
            await wf.Worker(engine).run(until_idle=True)
            assert [await r.status() for r in runs] == [RunStatus.SUSPENDED] * 3
            assert clock.now() >= 1_800_000_000.0 + 3600

        # Another "process" delivers the approvals and drives the runs to the end.
        other = Engine(second, clock, suspend_after=0)
        with use_engine(other):
            for order in (1, 2, 3):
                await wf.resume_hook(f"pg-approve-{order}", {"approved": True, "by": f"ada{order}"})
            await wf.Worker(other).run(until_idle=True)
            results = [await wf.get_run(r.id).result() for r in runs]
        assert results == [
            {"total": 6 * order, "by": f"ada{order}", "approved": True} for order in (1, 2, 3)
        ]
        assert sorted(steps_run) == sorted(f"add {n * o}" for o in (1, 2, 3) for n in (1, 2, 3))
        journal = await second.read_journal(runs[0].id)
        kinds = [e["type"] for e in journal]
        assert kinds.count("run_suspended") == 2 and kinds[-1] == "run_completed"
        assert await second.due_runs(4_000_000_000.0) == []
        assert await second.list_hooks() == []
    finally:
        await first.close()
        await second.close()


async def test_a_driver_that_loses_its_lease_cancels_its_steps_and_stops(schema: str) -> None:
    """``pg_terminate_backend`` on the lock connection: the driver finds out (a watchdog pings
    that connection while leases are held), cancels its async step at once and stops, before
    another driver takes the run over — not one step running in two workers at once."""

    async def cut(run_id: str) -> None:
        await _cut_lock_connection(schema, run_id)

    # Within the watchdog's interval, not an hour.
    await lose_the_lease_then_take_over(
        make(schema),
        make(schema),
        cut,
        "lock connection to PostgreSQL was dropped",
        stop_within=10,
    )


async def test_a_garbage_schema_version_is_reported(schema: str) -> None:
    store = make(schema)
    await store.open()
    await store.close()
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
        await admin.execute(
            f"UPDATE {schema}.wf_meta SET value = 'banana' WHERE key = 'schema_version'"
        )
    again = make(schema)
    with pytest.raises(StoreError, match=r"schema_version .* is 'banana', not a version number"):
        await again.open()
    await again.close()


async def test_an_unknown_status_is_reported_once_not_retried_forever(schema: str) -> None:
    store = make(schema)
    try:
        engine = Engine(store, MockClock())
        with use_engine(engine):
            run = await wf.start(lease_loser, 1, detach=True)
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(
                f"UPDATE {schema}.wf_runs SET record = "
                "jsonb_set(record::jsonb, '{status}', '\"bogus\"')::json WHERE id = %s",
                [run.id],
            )
        errors: list[BaseException] = []
        worker = wf.Worker(engine, on_error=lambda run_id, error: errors.append(error))
        with use_engine(engine):
            await asyncio.wait_for(worker.run(until_idle=True), 30)
            engine.clock.jump(3600)  # type: ignore[attr-defined]
            await asyncio.wait_for(worker.run(until_idle=True), 30)  # not tried again
        assert len(errors) == 1 and isinstance(errors[0], wf.StoreCorrupted)
        assert "unknown status 'bogus'" in str(errors[0])
        assert await worker.undriven() == [run.id]
    finally:
        await store.close()


# -- schema migrations -------------------------------------------------------------------------


@wf.workflow
async def count_to(n: int) -> int:
    return n


async def _as_version_2(schema: str) -> None:
    """Make the schema exactly what the previous release created: version 2 (the queue's
    step), without the tables of versions 3 (step logs) and 4 (schedules), stamped ``2``."""
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute(
            f"DROP TABLE {schema}.wf_logs, {schema}.wf_schedules, {schema}.wf_tombstones"
        )
        await conn.execute(f"UPDATE {schema}.wf_meta SET value = '2'")


async def _version(schema: str) -> str:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        cur = await conn.execute(f"SELECT value FROM {schema}.wf_meta")
        row = await cur.fetchone()
        assert row is not None
        return str(row[0])


async def test_a_version_2_database_migrates_in_place(schema: str) -> None:
    old = make(schema)
    async with wf.testing.engine(old) as eng:
        run = await wf.start(count_to, 3)
        assert await run.result() == 3
        old_id = run.id
    await old.close()
    await _as_version_2(schema)
    # Three processes of the new wf open the old database at once: one migrates, under the
    # schema's advisory lock, and the others find it done.
    stores = [make(schema) for _ in range(3)]
    await asyncio.gather(*(s.open() for s in stores))
    assert await _version(schema) == str(VERSION)
    store = stores[0]
    assert (await store.get_run(old_id)).status is RunStatus.COMPLETED
    assert (await store.read_journal(old_id))[0]["type"] == "run_started"
    async with wf.testing.engine(store) as eng:
        await wf.schedule("s", count_to, cron="* * * * *", input=[1])
        assert [s.id for s in await stores[1].list_schedules()] == ["s"]
        done = await store.delete_runs([old_id], now=eng.clock.now(), reason="gc")
        assert done.ids == [old_id]
        with pytest.raises(wf.ResultExpired):
            await wf.get_run(old_id).result()
    info = await stores[2].store_info()
    assert info.format == VERSION and info.tombstones == 1 and info.schedules == 1
    for s in stores:
        await s.close()


async def test_an_older_wf_refuses_the_migrated_schema(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make(schema)
    await store.open()
    await store.close()
    from wf.store.postgres import _schema

    monkeypatch.setattr(_schema, "VERSION", 2)  # the previous release
    older = make(schema)
    with pytest.raises(StoreVersionError, match=f"have version {VERSION}, written by a newer"):
        await older.open()
    await older.close()


async def test_a_change_between_watching_a_run_and_waiting_ends_the_wait() -> None:
    """``wait_for_run`` watches the run, checks that it exists (a round trip), then waits: a
    notification that arrives during the check must end the wait at once. (It once set the
    event of that moment and left the wait on its fresh successor: a 1-in-15 lost wake-up in
    the conformance kit's wait tests.)"""
    # Never connects: no pool, no connection string.
    signals = Signals(None, "", "test", "channel", "run-channel", listening_key=1)  # type: ignore[arg-type]
    watch = signals.watch("run-1")
    assert watch is not None
    signals.wake(RUN + "run-1")
    await asyncio.wait_for(signals.wait_run("run-1", watch, 30.0), 2.0)
    assert signals.watch("run-2") is not None  # other runs: nothing to report


async def _claim_look_plan(schema: str, values: dict[str, str]) -> str:
    """The generic plan (what a prepared statement becomes after a few runs) of a claim's look
    at the queue, once 20,000 copies of a run, their columns given by ``values`` (SQL of
    ``g``, 1 to 20,000), fill the table."""
    store = make(schema)
    await store.open()
    try:
        created_id = (await created(store)).id
    finally:
        await store.close()
    query = _CANDIDATES.format(running="<>", queues="")
    generic = query.replace("%(now)s", "$1").replace("%(exclude)s", "$2").replace("%(scan)s", "$3")
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
        await admin.execute(f"SET search_path TO {schema}")
        columns = [
            row[0]
            for row in await (
                await admin.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_schema = %s AND table_name = 'wf_runs'"
                    " ORDER BY ordinal_position",
                    [schema],
                )
            ).fetchall()
        ]
        values = {**values, "seq": "nextval('wf_run_seq')"}  # each run its own place
        await admin.execute(
            f"INSERT INTO wf_runs ({', '.join(columns)})"
            f" SELECT {', '.join(values.get(c, c) for c in columns)}"
            " FROM wf_runs, generate_series(1, 20000) AS g WHERE id = %s",
            [created_id],
        )
        await admin.execute("ANALYZE wf_runs")
        await admin.execute("SET plan_cache_mode = force_generic_plan")
        await admin.execute(f"PREPARE candidates(float8, text[], int) AS {generic}")
        return "\n".join(
            row[0]
            for row in await (
                await admin.execute("EXPLAIN EXECUTE candidates(1e12, '{}', 60)")
            ).fetchall()
        )


async def test_claims_read_a_backlog_in_claim_order_instead_of_sorting_it(schema: str) -> None:
    """With many due runs, the claim's candidate query walks the claim-order index and stops at
    its limit, even as a generic plan (what a prepared statement becomes after a few runs):
    sorting every due run made each claim's cost grow with the backlog."""
    values = {"id": "'wrun_b' || lpad(g::text, 9, '0')", "due_at": "g::float8"}
    plan = await _claim_look_plan(schema, {**values, "priority": "mod(g, 3)"})
    assert "wf_runs_claim" in plan and "Sort" not in plan, plan


@contextlib.asynccontextmanager
async def _behind_two_claims(
    schema: str, instances: int, runs: int
) -> AsyncIterator[tuple[list[PostgresStore], list[Any]]]:
    """``instances`` stores on ``schema`` (each a worker), ``runs`` runs created in order, and
    the first two stores' claims of 50 each, taken: the stores and the leases so far. Every
    lease in the list is released, and every store closed, at the end."""
    stores = [make(schema) for _ in range(instances)]
    for store in stores:
        await store.open()
    leases: list[Any] = []
    try:
        for i in range(runs):
            await created(stores[0], created_at=float(i))
        leases += await stores[0].claim(FAR, 50)
        leases += await stores[1].claim(FAR, 50)  # 50 locked by the first of its 110 candidates
        yield stores, leases
    finally:
        for lease in leases:
            await lease.release()
        for store in stores:
            await store.close()


async def test_a_claim_looks_past_the_runs_other_workers_just_claimed(schema: str) -> None:
    """Runs another worker has claimed look pending until its drivers' first writes commit,
    and every worker reads the same head of the queue: a claim that found them locked reads
    further, instead of taking almost nothing (or nothing, and idling until the next poll)
    while runs wait behind them."""
    async with _behind_two_claims(schema, 4, 400) as (stores, leases):
        third, fourth = stores[2:]
        assert len(leases) == 100
        found = await third.claim(FAR, 50)  # 100 of its 110 candidates are locked
        leases += found
        assert len(found) == 50  # before: 10, and the rest waited for its next claim
        found = await fourth.claim(FAR, 50)  # all of its 110 candidates are locked
        leases += found
        assert len(found) == 50  # before: none, and the worker idled until its next poll
        more = await third.claim(FAR, 40)
        leases += more
        assert len(more) == 40
        assert len({lease.run_id for lease in leases}) == len(leases) == 240


async def test_a_claim_whose_lock_connection_is_replaced_while_reading_on_forgets_the_lost_locks(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The locks of a claim's first look go with a lock connection replaced before its next
    look: the claim hands out only the later ones, and the lost ones are tried again later
    (not kept in mind as this instance's, which would keep it off them for good)."""
    async with _behind_two_claims(schema, 3, 300) as (stores, leases):
        third = stores[2]
        locks = (await third._ready()).locks
        try_many = locks.try_many
        calls = 0

        async def replaced_before_the_second(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 2:  # the lock connection dies and is replaced (a watchdog's ping)
                assert locks._conn is not None
                pid = locks._conn.info.backend_pid
                async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
                    await admin.execute("SELECT pg_terminate_backend(%s)", [pid])
                locks._lost()
            return await try_many(*args, **kwargs)

        monkeypatch.setattr(locks, "try_many", replaced_before_the_second)
        found = await third.claim(FAR, 50)  # took 10 on its first look, lost them, read on
        assert calls == 2
        assert len(found) == 40
        leases += found
        monkeypatch.undo()
        again = await third.claim(FAR, 300)
        leases += again
        assert len(again) == 300 - 140  # the 10 lost with the connection included
        assert len({lease.run_id for lease in leases}) == len(leases) == 300


async def test_a_claim_that_fails_while_reading_on_gives_back_every_lock_it_took(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locks a claim took before a later statement of it failed are given back: a lock kept
    by a claim that returned nothing would keep its run from every driver."""
    async with _behind_two_claims(schema, 4, 300) as (stores, leases):
        third, fourth = stores[2:]
        looks = 0
        candidates = third._candidates

        async def failing_second_look(
            now: float, running: str, *args: Any, **kwargs: Any
        ) -> tuple[list[str], int]:
            nonlocal looks
            if running == "<>":  # not the look at running runs (orphans)
                looks += 1
                if looks == 2:
                    raise StoreError("the server went away")
            return await candidates(now, running, *args, **kwargs)

        monkeypatch.setattr(third, "_candidates", failing_second_look)
        with pytest.raises(StoreError, match="went away"):
            await third.claim(FAR, 50)  # took 10 on its first look, then read on and failed
        assert looks == 2
        rest = await fourth.claim(FAR, 300)
        leases += rest
        assert len(rest) == 200  # every run the first two did not take: none kept by the third


async def test_counts_kept_as_runs_change_equal_a_count_and_verify_repairs_a_drift(
    schema: str,
) -> None:
    """Creations, status changes and deletions from two instances (two backends each) keep
    ``store_info``'s counts equal to a count of the table; rows of backends that are gone are
    folded; a drift is repaired by ``verify``, which says so."""
    first, second = make(schema), make(schema)
    try:
        runs = [await created(store) for store in (first, second, first, second)]
        await save(second, runs[0], RunStatus.COMPLETED)
        await save(first, runs[1], RunStatus.FAILED)
        await save(first, runs[2], RunStatus.RUNNING)
        assert (await second.delete_runs([runs[0].id], now=FAR, reason="gc")).ids == [runs[0].id]
        await second.close()  # its backends are gone: their rows get folded
        info = await first.store_info()
        assert (info.runs["pending"], info.runs["running"], info.runs["failed"]) == (1, 1, 1)
        assert info.runs["completed"] == 0 and info.tombstones == 1
        async with first._query("drift", None, False) as conn:
            await conn.execute("UPDATE wf_counts SET n = n + 5 WHERE name = 'failed'")
        assert (await first.store_info()).runs["failed"] == 6
        [problem] = await first.verify()
        assert "the count of failed was 6, a count of the table found 1: repaired" in problem
        assert (await first.store_info()).runs["failed"] == 1
        assert await first.verify() == []
        # Below zero (shards of backends killed mid-change): 0 shown, never a negative.
        async with first._query("drift", None, False) as conn:
            await conn.execute("UPDATE wf_counts SET n = n - 4 WHERE name = 'failed'")
        assert (await first.store_info()).runs["failed"] == 0
        [problem] = await first.verify()
        assert "the count of failed was below 0, a count of the table found 1: repaired" in problem
        assert await first.verify() == []
    finally:
        await first.close()
        await second.close()


async def test_every_listing_filter_lists_what_a_scan_finds(schema: str) -> None:
    """Status filters (one status, or several merged newest first), alone and with a
    workflow, queue, group or deployment, list what filtering every run finds, in creation
    order, and a page ``before=`` a run goes on where the first one stopped."""
    store = make(schema)
    try:
        runs = [await created(store, **mix(n)) for n in range(24)]
        for n, run in enumerate(runs):
            if n % 5:
                await save(store, run, RunStatus.RUNNING)
            if n % 5 > 1:
                await save(store, run, ENDS[n % len(ENDS)])
        assert (await store.delete_runs([runs[3].id], now=FAR, reason="test")).ids
        await same_as_a_scan(store)
        every = await store.list_runs(limit=1000)
        several = [RunStatus.CANCELLED, RunStatus.PENDING, RunStatus.FAILED]
        want = [r.id for r in every if r.status in several]
        first = await store.list_runs(statuses=several, limit=3)
        assert [r.id for r in first] == want[:3]
        rest = await store.list_runs(statuses=[*several, RunStatus.FAILED], before=want[2])
        assert [r.id for r in rest] == want[3:]
        older = {r.id for r in runs[:3]}  # created before the deleted run
        gone = await store.list_runs(statuses=several, before=runs[3].id)
        assert [r.id for r in gone] == [
            r.id for r in every if r.status in several and r.id in older
        ]
    finally:
        await store.close()


async def test_a_claim_reads_the_lane_width_of_runs_created_before_it_had_a_column(
    schema: str,
) -> None:
    """Lane widths are a column since schema 11, written by creations; runs created before
    have none, and a claim reads their width from their record: a lane of width 2 gives its
    first two runs and holds the third, whichever way its width is known."""
    store = make(schema)
    try:
        for old in (True, False):
            group = f"wide-{old}"
            runs = [record(group=group, limits={"group_concurrency": 2}) for _ in range(3)]
            for run in runs:
                await store.create_run(run, [started(run)])
            if old:
                async with store._query("as schema 10 wrote them", None, False) as conn:
                    await conn.execute(
                        "UPDATE wf_runs SET lane_width = NULL WHERE grp = %s", [group]
                    )
            leases = await store.claim(FAR, 20)
            try:
                assert {lease.run_id for lease in leases} == {runs[0].id, runs[1].id}
            finally:
                for lease in leases:
                    await lease.release()
            waiting: set[str] = set()
            heads = {runs[0].id, runs[1].id}
            assert await store.claim(FAR, 20, exclude=heads, waiting=waiting) == []
            assert waiting == {runs[2].id}
            for run in runs:
                await save(store, run, RunStatus.COMPLETED)
        async with store._query("widths", None, False) as conn:
            rows = await (
                await conn.execute("SELECT grp, lane_width FROM wf_runs ORDER BY seq")
            ).fetchall()
        assert [tuple(r) for r in rows] == [("wide-True", None)] * 3 + [("wide-False", 2)] * 3
    finally:
        await store.close()


async def test_a_claims_look_reads_past_no_running_run(schema: str) -> None:
    """A running run keeps its due time (orphans are found by it), so in claim order every
    running run sits ahead of the runs a claim may start. The claim's look reads the index of
    runs not running (schema 12), as a generic plan too: with 18,000 runs running ahead of
    2,000 waiting, it reads the waiting ones first, where it read past the 18,000."""
    values = {"id": "'wrun_r' || lpad(g::text, 9, '0')", "due_at": "0::float8"}
    values["status"] = "CASE WHEN mod(g, 10) = 0 THEN 'pending' ELSE 'running' END"
    plan = await _claim_look_plan(schema, values)
    assert "wf_runs_claim_ready" in plan and "Sort" not in plan, plan


async def test_closing_ends_a_listener_whose_cancellation_became_an_error(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver that turned the listener's cancellation into an error of its own would have
    had the listener reconnect and listen again for good: ``close`` ends it, within its
    bound."""
    import psycopg

    async def deaf_notifies(self: object, *args: object, **kwargs: object) -> Any:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise psycopg.OperationalError("the read was cancelled") from None
        yield  # an async generator, as psycopg's

    monkeypatch.setattr(psycopg.AsyncConnection, "notifies", deaf_notifies)
    store = make(schema)
    await store.open()  # starts listening
    await asyncio.sleep(0.05)
    async with asyncio.timeout(10):
        await store.close()


async def _terminate(pid: int) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", [pid])


async def _goodbye_arrived(conn: Any) -> None:
    """Until the server's goodbye reached the (idle) connection's socket."""
    import select

    for _ in range(200):
        if select.select([conn.pgconn.socket], [], [], 0)[0]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the terminated backend's connection never heard of it")


@pytest.mark.parametrize("how", ["claim", "try_acquire", "try_slot"])
async def test_a_lock_connection_killed_while_idle_is_replaced_at_the_next_lease(
    schema: str, how: str
) -> None:
    """An idle-session timeout or ``pg_terminate_backend`` while no lease is held: the next
    lease (a claim's batch, a single one, a cap's place) is taken on a fresh connection, not
    failed on the dead one (which had ended ``wf worker``)."""
    store = make(schema)
    try:
        first = await created(store)
        await (await acquire(store, first.id)).release()  # the lock connection is open, idle
        conn = store._session.locks._conn  # type: ignore[union-attr]
        await _terminate(conn.info.backend_pid)
        await _goodbye_arrived(conn)
        run = await created(store)
        if how == "claim":
            [lease] = await store.claim(FAR, 10, exclude={first.id})
        elif how == "try_acquire":
            lease = await store.try_acquire(run.id)
        else:
            lease = await store.try_slot("cap:test", 2)
        assert lease is not None
        await lease.release()
    finally:
        await store.close()


async def test_a_claim_whose_lock_connection_dies_under_it_retries_on_a_fresh_one(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock connection dropped during the claim's statement: sent once more on a new
    connection (nothing was granted on the dead one), as a single lease's is."""
    from wf.store.postgres import _locks

    store = make(schema)
    try:
        run = await created(store)
        await (await acquire(store, run.id)).release()
        conn = store._session.locks._conn  # type: ignore[union-attr]
        monkeypatch.setattr(_locks, "looks_alive", lambda c: True)  # not found before use
        await _terminate(conn.info.backend_pid)
        await _goodbye_arrived(conn)
        [lease] = await store.claim(FAR, 10)
        assert lease.run_id == run.id
        await lease.release()
    finally:
        await store.close()


async def test_a_claim_that_meets_its_store_closing_opens_no_lock_connection(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim whose look at the queue was in flight while its store closed went on to take
    its locks on a lock connection it opened after the close: a connection nothing would
    close, holding the runs' locks (from every other process) until this process exited.
    Now the claim fails as any operation on a closed store does, and opens nothing."""
    from wf.store.postgres import _locks

    store = make(schema)
    try:
        run = await created(store)
        opened: list[str] = []
        real_connect = _locks.connect

        async def counted(conninfo: str, label: str) -> Any:
            opened.append(label)
            return await real_connect(conninfo, label)

        monkeypatch.setattr(_locks, "connect", counted)
        look = store._candidates

        async def closed_meanwhile(*args: Any, **kwargs: Any) -> Any:
            found = await look(*args, **kwargs)
            await store.close()  # a worker stopping while its claim looked at the queue
            return found

        monkeypatch.setattr(store, "_candidates", closed_meanwhile)
        with pytest.raises(StoreError, match="closed"):
            await store.claim(FAR, 10)
        assert opened == [], "a lock connection was opened after the store closed"
        monkeypatch.undo()
        other = make(schema)
        try:
            lease = await other.try_acquire(run.id)  # no lock left held by the closed store
            assert lease is not None
            await lease.release()
        finally:
            await other.close()
    finally:
        await store.close()


async def test_a_lock_connection_that_opens_as_its_store_closes_is_closed_with_it(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close came while the lock connection was being opened: the connection opened then
    was kept (nothing closes it later), and the lease taken on it held its run for good."""
    from wf.store.postgres import _locks

    store = make(schema)
    try:
        run = await created(store)
        session = await store._ready()
        real_connect = _locks.connect
        made: list[Any] = []

        async def closing_meanwhile(conninfo: str, label: str) -> Any:
            conn = await real_connect(conninfo, label)
            made.append(conn)
            await store.close()
            return conn

        monkeypatch.setattr(_locks, "connect", closing_meanwhile)
        with pytest.raises(StoreError, match="closed"):
            await session.locks.try_lock(run.id, session.lock_key(run.id))
        assert len(made) == 1 and made[0].closed, "the lock connection outlived its store"
    finally:
        await store.close()


async def test_a_lock_scan_that_fails_on_a_live_connection_keeps_it_and_its_leases(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's lock scan cancelled by a statement timeout (an ``OperationalError``, as a
    lost connection's is) dropped the lock connection although it was fine, and with it the
    lock of every lease held on it: their runs were open to any other worker while their
    drivers still ran them. Only a connection psycopg found broken (or closed) is dropped."""
    from wf.store.postgres import _locks

    store, other = make(schema), make(schema)
    try:
        kept = await created(store)
        lease = await acquire(store, kept.id)
        lost: list[BaseException] = []
        lease.on_lost(lost.append)
        second = await created(store)
        locks = store._session.locks  # type: ignore[union-attr]
        conn, generation = locks._conn, locks.generation
        assert conn is not None
        await conn.execute("SET statement_timeout = '50ms'")
        slow = _locks._SCAN_THEN.replace("\nFROM granted\n", "\nFROM granted, pg_sleep(1)\n")
        assert slow != _locks._SCAN_THEN
        monkeypatch.setattr(_locks, "_SCAN_THEN", slow)
        with pytest.raises(wf.StoreUnavailable, match="statement timeout"):
            await store.claim(FAR, 10, exclude={kept.id})
        assert locks._conn is conn and not conn.broken, "a live lock connection was dropped"
        assert locks.generation == generation and locks.held(kept.id, generation)
        assert await other.try_acquire(kept.id) is None, "a held lease's lock went with it"
        await asyncio.sleep(locks.check_interval + 0.5)  # the watchdog finds it fine too
        assert lost == []
        await conn.execute("SET statement_timeout = 0")
        # What the failed scan was granted before the timeout went back: a session's advisory
        # lock outlives its statement, and the second run was locked by no lease for good.
        taken = await other.try_acquire(second.id)
        assert taken is not None, "the failed scan kept the lock of a run no lease holds"
        await taken.release()
        await lease.release()
    finally:
        await store.close()
        await other.close()


async def test_an_operation_refused_a_new_connection_waits_for_an_open_one(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``too many connections`` for a second pool connection while the first is in use: the
    operation waits for the first one rather than fail."""
    from wf.store.postgres import _conn

    store = make(schema)
    try:
        await store.open()
        real = _conn.connect
        pool = store._session.pool  # type: ignore[union-attr]
        async with pool.connection("hold one"):

            async def refused(conninfo: str, label: str) -> Any:
                raise wf.StoreUnavailable("cannot connect: too many connections (the test)")

            monkeypatch.setattr(_conn, "connect", refused)
            waiting = asyncio.ensure_future(created(store))
            await asyncio.sleep(0.2)
            assert not waiting.done()
        run = await asyncio.wait_for(waiting, 5)  # on the connection given back
        assert (await store.get_run(run.id)).id == run.id
        monkeypatch.setattr(_conn, "connect", real)
    finally:
        await store.close()


async def test_a_dropped_connection_is_store_unavailable(schema: str) -> None:
    """A query on a terminated backend fails with ``wf.StoreUnavailable`` (a worker tries it
    again), a query the server refuses as such with a plain ``StoreError``."""
    store = make(schema)
    try:
        await store.open()
        pool = store._session.pool  # type: ignore[union-attr]
        async with pool.connection("read") as conn:
            pid = conn.info.backend_pid
        with pytest.raises(wf.StoreUnavailable, match="terminat"):
            async with pool.connection("read the queue") as conn:
                await _terminate(pid)
                await conn.execute("SELECT 1")
        with pytest.raises(StoreError) as refused:
            async with pool.connection("read nothing") as conn:
                await conn.execute("SELECT * FROM no_such_table")
        assert not isinstance(refused.value, wf.StoreUnavailable)
    finally:
        await store.close()


@pytest.mark.parametrize(
    "what", ["dbname=wf_no_such_database_for_this_test", "user=wf_no_such_role_for_this_test"]
)
async def test_a_connection_string_the_server_refuses_is_no_outage(
    postgres_dsn: str, what: str
) -> None:
    """A database or role that does not exist is the connection string's fault: a plain
    ``StoreError`` at once (a worker exits 3 saying so), never ``wf.StoreUnavailable``, which a
    worker starting would wait out for its whole outage limit."""
    dsn = psycopg.conninfo.make_conninfo(postgres_dsn, **dict([what.split("=")]))
    store = PostgresStore(dsn)
    await assert_refused_at_once(store, "does not exist")


async def test_a_run_whose_lease_epoch_cannot_grow_is_damage_not_a_failed_claim(
    schema: str,
) -> None:
    """A hand-edited ``lease_epoch`` at bigint's largest value fails the batch's bump: the
    claim takes the other runs, notes that run alone as damaged (its row named), and
    ``verify`` names it."""
    store = make(schema)
    try:
        runs = [await created(store) for _ in range(3)]
        bad = runs[1].id
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(
                f"UPDATE {schema}.wf_runs SET lease_epoch = 9223372036854775807 WHERE id = %s",
                [bad],
            )
        leases = await store.claim(FAR, 10)
        assert sorted(lease.run_id for lease in leases) == sorted(r.id for r in runs if r.id != bad)
        [fault] = list(store.faults)
        assert fault.item == bad and "lease_epoch" in fault.said() and f"'{bad}'" in fault.said()
        for lease in leases:
            await lease.release()
        assert await store.claim(FAR, 10, exclude={bad}) != []  # the others go on
        problems = await store.verify()
        assert any(bad in p and "lease_epoch" in p for p in problems), problems
    finally:
        await store.close()


@pytest.mark.parametrize("how", ["DELETE FROM {}.wf_meta", "DROP TABLE {}.wf_meta"])
async def test_a_lost_schema_version_beside_wf_tables_says_what_is_wrong(
    schema: str, how: str
) -> None:
    """Not ``relation "wf_runs" already exists``: what is missing, and how to put it back."""
    store = make(schema)
    await store.open()
    await store.close()
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
        await admin.execute(how.format(schema))
    again = make(schema)
    with pytest.raises(wf.StoreCorrupted, match=r"no schema_version row .* wf's tables exist"):
        await again.open()
    await again.close()


async def test_a_failure_while_opening_existing_tables_does_not_say_it_created_them(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf.store.postgres import _session

    store = make(schema)
    await store.open()
    await store.close()

    async def dropped(conn: Any, schema: str | None, wait: float | None) -> str:
        raise psycopg.OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(_session, "ensure", dropped)
    again = make(schema)
    with pytest.raises(wf.StoreUnavailable) as failed:
        await again.open()
    await again.close()
    assert "create" not in str(failed.value) and "check or set up" in str(failed.value)


@pytest.mark.parametrize("record", ["[]", '{"id": 5}'])
async def test_reading_a_run_whose_record_is_not_one_names_its_row(
    schema: str, record: str
) -> None:
    store = make(schema)
    try:
        run = await created(store)
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(
                f"UPDATE {schema}.wf_runs SET record = %s::json WHERE id = %s", [record, run.id]
            )
        with pytest.raises(wf.StoreCorrupted, match=rf"^wf_runs row '{run.id}': "):
            await store.get_run(run.id)
    finally:
        await store.close()


async def test_a_one_shot_command_does_not_warn_of_a_lost_listen_connection(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``wf store verify`` (or ``wf gc``) hears of no change: its ``LISTEN`` connection
    terminated is no warning; a store that reads the queue still warns."""
    import logging

    for reads_queue in (False, True):
        store = make(schema)
        try:
            await store.open()
            await store.verify()
            if reads_queue:
                await store.next_due_at()
            signals = store._session.signals  # type: ignore[union-attr]
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger="wf.store.postgres"):
                await _terminate(signals._conn.info.backend_pid)
                for _ in range(200):
                    if any("LISTEN" in r.getMessage() for r in caplog.records):
                        break
                    await asyncio.sleep(0.01)
            [said] = [r for r in caplog.records if "lost its PostgreSQL LISTEN" in r.getMessage()]
            assert said.levelno == (logging.WARNING if reads_queue else logging.DEBUG)
        finally:
            await store.close()


async def _copies(store: PostgresStore, run: RunRecord, count: int) -> None:
    """``count`` copies of ``run`` (created already) behind it in its lane and the queue."""
    async with store._query("copy a run", None, False) as conn:
        columns = [
            row[0]
            for row in await (
                await conn.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_schema = current_schema() AND table_name = 'wf_runs'"
                    " ORDER BY ordinal_position"
                )
            ).fetchall()
        ]
        values = {
            "id": "id || '-' || g",
            "seq": "nextval('wf_run_seq')",
            "lane": "nextval('wf_lane_seq')",
        }
        await conn.execute(
            f"INSERT INTO wf_runs ({', '.join(columns)})"
            f" SELECT {', '.join(values.get(c, c) for c in columns)}"
            " FROM wf_runs, generate_series(1, %s) AS g WHERE id = %s ORDER BY g",
            [count, run.id],
        )


async def test_a_claim_finds_a_lanes_head_behind_another_lanes_long_backlog(
    schema: str,
) -> None:
    """A claim looks at each lane's heads, never the runs waiting behind them: a lane whose
    head runs and whose 1,500 runs waiting come first in the queue does not hide the head of
    a lane created after them (a look in claim order read past at most 1,000 of them)."""
    store = make(schema)
    try:
        # A claim that found no lane at all looks in claim order for a while: the first run
        # it finds waiting in a lane sends it back to lanes at once.
        assert await store.claim(FAR, 2) == []
        busy = await created(store, group="busy")
        await _copies(store, busy, 1_500)
        free = await created(store, group="free")
        plain = await created(store)
        driving = await acquire(store, busy.id)
        busy.status = RunStatus.RUNNING
        await driving.save(busy)
        try:
            waiting: set[str] = set()
            leases = await store.claim(FAR, 2, waiting=waiting)
            try:
                assert [lease.run_id for lease in leases] == [free.id, plain.id]
            finally:
                for lease in leases:
                    await lease.release()
            # Leasing nothing, it says which runs wait (the first 1,000 in claim order).
            leases = await store.claim(FAR, 2, exclude={free.id, plain.id}, waiting=waiting)
            assert leases == [] and len(waiting) == 1_000
            assert f"{busy.id}-1" in waiting and busy.id not in waiting
        finally:
            await driving.release()
    finally:
        await store.close()


async def test_a_claim_keeps_claim_order_across_lanes_and_runs_in_none(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heads of lanes and the runs in no lane are merged in claim order (priority, then
    due time, then creation), with more lanes than a look by lanes visits too (the look then
    reads the queue in claim order)."""
    from wf.store.postgres import _store

    store = make(schema)
    try:
        first = await created(store, group="a")
        await created(store, group="a")
        second = await created(store)
        third = await created(store, group="b", limits={"group_concurrency": 2})
        fourth = await created(store, group="b", limits={"group_concurrency": 2})
        await created(store, group="b", limits={"group_concurrency": 2})
        urgent = await created(store, group="c", priority=5)
        fifth = await created(store)
        want = [urgent.id, first.id, second.id, third.id, fourth.id, fifth.id]
        for lanes in (_store.MAX_LANES, 1):
            monkeypatch.setattr(_store, "MAX_LANES", lanes)
            store._many_lanes_until = 0.0
            leases = await store.claim(FAR, 20)
            try:
                assert [lease.run_id for lease in leases] == want
                assert (store._many_lanes_until > 0.0) is (lanes == 1)
            finally:
                for lease in leases:
                    await lease.release()
    finally:
        await store.close()


async def test_a_version_13_database_gets_the_claim_index_of_runs_in_no_lane(
    schema: str,
) -> None:
    """Schema 14 adds ``wf_runs_claim_plain``: a version-13 database's runs are claimed by
    lanes after the upgrade."""
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await _schema_of_version(conn, schema, 13)
    old = make(schema)
    try:
        with pytest.MonkeyPatch.context() as patch:
            from wf.store.postgres import _schema

            patch.setattr(_schema, "VERSION", 13)
            patch.setattr(_schema, "MIGRATIONS", _schema.MIGRATIONS[:12])
            head = await created(old, group="g")
            behind = await created(old, group="g")
            plain = await created(old)
    finally:
        await old.close()
    store = make(schema)
    try:
        leases = await store.claim(FAR, 20)
        try:
            assert {lease.run_id for lease in leases} == {head.id, plain.id}
        finally:
            for lease in leases:
                await lease.release()
        assert await _version(schema) == str(VERSION)
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %s"
                " AND indexname = 'wf_runs_claim_plain'",
                [schema],
            )
            found = await cur.fetchone()
        assert found is not None and "lane_name IS NULL" in found[0]
        assert behind.id in await store.due_runs(FAR)
    finally:
        await store.close()


async def test_a_version_14_database_gets_the_index_of_schedules_by_next_fire(
    schema: str,
) -> None:
    """Schema 15 adds ``wf_schedules_next``: a version-14 database's schedules are read by
    their next fire time after the upgrade, the due ones alone."""
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await _schema_of_version(conn, schema, 14)
    old = make(schema)
    try:
        with pytest.MonkeyPatch.context() as patch:
            from wf.store.postgres import _schema

            patch.setattr(_schema, "VERSION", 14)
            patch.setattr(_schema, "MIGRATIONS", _schema.MIGRATIONS[:13])
            for schedule_id, at in (("due", 10.0), ("later", 20.0), ("paused", None)):
                made = Schedule(schedule_id, "tests:flow", "* * * * *", next_run=at)
                await old.save_schedule(made)
    finally:
        await old.close()
    store = make(schema)
    try:
        due, later = await store.due_schedules(15.0)
        assert [s.id for s in due] == ["due"] and later == 20.0
        assert await _version(schema) == str(VERSION)
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %s"
                " AND indexname = 'wf_schedules_next'",
                [schema],
            )
            found = await cur.fetchone()
        assert found is not None and "next_run" in found[0]
    finally:
        await store.close()


def _count_then_wait(
    counting: dict[PostgresStore, asyncio.Event], gate: asyncio.Event
) -> Callable[..., contextlib.AbstractAsyncContextManager[Any]]:
    """``PostgresStore._query`` made to stop each store of ``counting`` after its rate limit's
    count committed, before the caller hears the answer: it sets the store's event, then
    waits for ``gate``."""
    real = PostgresStore._query

    @contextlib.asynccontextmanager
    async def slow_query(
        self: PostgresStore, what: str, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        async with real(self, what, *args, **kwargs) as conn:
            yield conn
        if self in counting and what == "count a rate limit":
            counting[self].set()  # committed: the start is counted
            await gate.wait()  # and the caller has not heard yet

    return slow_query


@pytest.mark.parametrize(
    ("call", "method"),
    [("claim", "_scan"), ("try_slot", "_scan"), ("try_acquire", "_try"), ("lock_schedule", "_try")],
)
async def test_locks_granted_to_a_cancelled_taker_are_handed_back(
    schema: str, call: str, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim, a cap's place, a run's lease taken alone (``try_acquire``) or a schedule's
    lock, whose caller is cancelled after the server granted its advisory locks and before the
    answer was read: held by the session and by no lease, the locks kept the run (the place,
    the schedule) from every other process until the lock connection closed, and from this one
    too once taken again (re-entrant) and released. They are handed back (on Redis, the
    schedule's lock had stayed for its time to live: ``test_redis``)."""
    from wf.store.postgres import _locks

    store, peer = make(schema), make(schema)
    answered = asyncio.Event()
    gate = asyncio.Event()
    real = getattr(_locks.Locks, method)

    async def slow_answer(self: _locks.Locks, *args: Any) -> Any:
        found = await real(self, *args)
        answered.set()  # granted
        await gate.wait()  # and the caller has not heard yet
        return found

    async def take(taker: PostgresStore) -> Any:
        if call in ("claim", "try_acquire"):
            return await taker.try_acquire(run.id)
        if call == "try_slot":
            return await taker.try_slot("cap", 1)
        return await taker.lock_schedule("nightly", wait=False)

    try:
        run = await created(store)
        monkeypatch.setattr(_locks.Locks, method, slow_answer)
        caller = asyncio.ensure_future(store.claim(FAR, 10) if call == "claim" else take(store))
        await asyncio.wait_for(answered.wait(), 10)
        caller.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        monkeypatch.setattr(_locks.Locks, method, real)
        for taker in (store, peer):  # this process (taken and given back), then another
            began = asyncio.get_running_loop().time()
            while (taken := await take(taker)) is None:
                assert asyncio.get_running_loop().time() - began < 2.0, "still held"
                await asyncio.sleep(0.02)
            await taken.release()
    finally:
        await store.close()
        await peer.close()


async def test_a_rate_limited_start_counted_for_a_cancelled_caller_is_taken_back(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``try_rate``'s caller cancelled after the transaction committed the start and before the
    answer was used: no run started, yet the start counted for the whole window (here 60 s,
    one start allowed). It is taken back when the answer comes."""
    store, peer = make(schema), make(schema)
    answered = asyncio.Event()
    gate = asyncio.Event()
    real = PostgresStore._query
    slow_query = _count_then_wait({store: answered}, gate)

    try:
        await store.open()
        monkeypatch.setattr(PostgresStore, "_query", slow_query)
        caller = asyncio.ensure_future(store.try_rate("r", 1, 60.0, 1_000.0))
        await asyncio.wait_for(answered.wait(), 10)
        caller.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        monkeypatch.setattr(PostgresStore, "_query", real)
        began = asyncio.get_running_loop().time()
        while await peer.rate_retry_at("r", 1, 60.0, 1_001.0) is not None:
            assert asyncio.get_running_loop().time() - began < 2.0, "still counted"
            await asyncio.sleep(0.02)
        assert await peer.try_rate("r", 1, 60.0, 1_001.0) is None
        assert await store.try_rate("r", 1, 60.0, 1_002.0) == pytest.approx(1_061.0)
    finally:
        await store.close()
        await peer.close()


async def test_a_start_taken_back_wakes_the_runs_the_rate_limit_held(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run held back by a rate limit while a start counted for a cancelled caller filled it
    slept until the window's end (a minute here) although the start was taken back at once:
    nothing told the worker. The take-back is announced, and the worker looks again."""
    store, peer = make(schema), make(schema)
    counted, gate = asyncio.Event(), asyncio.Event()
    slow_query = _count_then_wait({peer: counted}, gate)

    monkeypatch.setattr(PostgresStore, "_query", slow_query)
    try:
        await a_take_back_wakes_the_runs_the_limit_held(store, peer, counted, gate)
    finally:
        await store.close()
        await peer.close()


@pytest.mark.parametrize("answered", [True, False], ids=["answered", "in-flight"])
async def test_a_start_taken_back_as_its_store_closes_is_taken_back_and_announced(
    schema: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    answered: bool,
) -> None:
    """A stopping worker cancels its drives, then closes its store at once: the main way a
    start is taken back. The close did not wait for the take-back (nor for a count still in
    flight), so the start stayed counted for the whole window, the other workers were not
    told, and the announcement failed with a warning that the store is closed. The close
    waits for both (bounded), and the take-back is announced with its delete."""
    store, peer = make(schema), make(schema)
    counted, gate = asyncio.Event(), asyncio.Event()
    slow_query = _count_then_wait({store: counted}, gate)

    try:
        await store.open()
        await peer.open()
        await peer.wait_for_activity(0.01)  # the peer listens
        before = peer.rate_returns()
        monkeypatch.setattr(PostgresStore, "_query", slow_query)
        caller = asyncio.ensure_future(store.try_rate("r", 1, 60.0, 1_000.0))
        await asyncio.wait_for(counted.wait(), 10)
        caller.cancel()
        if answered:
            gate.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(store.close())
        if not answered:
            await asyncio.sleep(0.05)  # the close waits for the count in flight
            gate.set()
        await asyncio.wait_for(closing, 10)
        assert await peer.rate_retry_at("r", 1, 60.0, 1_001.0) is None, "still counted"
        began = asyncio.get_running_loop().time()
        while peer.rate_returns() == before:
            assert asyncio.get_running_loop().time() - began < 5.0, "the peer was not told"
            await asyncio.sleep(0.02)
        loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert loud == []
    finally:
        await store.close()
        await peer.close()


async def test_a_start_taken_back_before_a_store_listens_is_looked_at_when_it_does(
    schema: str,
) -> None:
    """A start taken back (announced as ``t``) while a worker's store did not listen yet: the
    first ``LISTEN`` counted no rate return, so a run the worker held back for the limit slept
    until the window's end. Listening counts one (as a reconnection does, and Redis's
    subscribe): the worker reads its limits again."""
    peer = make(schema)
    try:
        await peer.rate_retry_at("r", 1, 60.0, 1_000.0)  # connected, not listening
        before = peer.rate_returns()
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
            # What a take-back announces; nobody in ``peer`` hears it.
            await conn.execute("SELECT pg_notify(%s, 't')", [channel_name(schema)])
        await peer.wait_for_activity(0.01)  # the first wait listens
        assert peer.rate_returns() > before
    finally:
        await peer.close()


async def test_two_starts_of_the_same_time_taken_back_together_are_both_taken_back(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two starts of one rate limit counted at the same time, each for a caller cancelled
    before it heard: their take-backs ran together and each deleted "a row of that name and
    time", the same one, so one start stayed counted for the whole window. Each take-back now
    deletes the row its own start inserted. (A third connection holds the rows until both
    take-backs wait for them, so that they do run together.)"""
    store, peer = make(schema), make(schema)
    answered = [asyncio.Event(), asyncio.Event()]
    gate = asyncio.Event()
    real = PostgresStore._query
    slow_query = _count_then_wait({store: answered[0], peer: answered[1]}, gate)

    holder = await psycopg.AsyncConnection.connect(DSN)
    try:
        await store.open()
        await peer.open()
        monkeypatch.setattr(PostgresStore, "_query", slow_query)
        callers = [asyncio.ensure_future(s.try_rate("r", 2, 60.0, 1_000.0)) for s in (store, peer)]
        for event in answered:
            await asyncio.wait_for(event.wait(), 10)
        await holder.execute(f'SELECT 1 FROM "{schema}".wf_rates WHERE name = %s FOR UPDATE', ["r"])
        for caller in callers:
            caller.cancel()
        gate.set()
        for caller in callers:
            with pytest.raises(asyncio.CancelledError):
                await caller
        monkeypatch.setattr(PostgresStore, "_query", real)
        began = asyncio.get_running_loop().time()
        waiting = 0
        while waiting < 2:  # both take-backs wait for the rows the holder locked
            assert asyncio.get_running_loop().time() - began < 10.0, waiting
            await asyncio.sleep(0.02)
            async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as look:
                cur = await look.execute(_TAKE_BACKS_WAITING, [holder.info.backend_pid])
                row = await cur.fetchone()
                waiting = int(row[0]) if row else 0
        await holder.commit()
        began = asyncio.get_running_loop().time()
        while await peer.rate_retry_at("r", 1, 60.0, 1_001.0) is not None:
            assert asyncio.get_running_loop().time() - began < 2.0, "a start is still counted"
            await asyncio.sleep(0.02)
        assert await peer.try_rate("r", 1, 60.0, 1_001.0) is None
    finally:
        await holder.close()
        await store.close()
        await peer.close()


_TAKE_BACKS_WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
  AND query LIKE '%%DELETE FROM wf_rates%%' AND pg_blocking_pids(pid) @> ARRAY[%s::int]
"""
"""Take-backs waiting for the rows the holder (its pid) locked: not other tests' (the database
is shared)."""


async def test_pgconnect_timeout_bounds_the_opening_of_a_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libpq's ``PGCONNECT_TIMEOUT`` sets how long a connection's opening may take when the
    DSN says nothing (wf's own 10 s had overridden it), here at a socket that takes the
    connection and never answers, as an address where packets are dropped."""
    import socket
    import time

    monkeypatch.setenv("PGCONNECT_TIMEOUT", "1")
    with socket.create_server(("127.0.0.1", 0)) as hole:
        port = hole.getsockname()[1]
        store = PostgresStore(f"postgresql://postgres:s3cret@127.0.0.1:{port}/test")
        began = time.monotonic()
        with pytest.raises(wf.StoreUnavailable) as raised:
            await store.open()
        took = time.monotonic() - began
        await store.close()
    assert took < 5, took
    said = str(raised.value)
    assert said.startswith(
        f"cannot connect to PostgreSQL at postgresql://postgres@127.0.0.1:{port}/test"
    )
    assert "s3cret" not in said


async def _operations(store: PostgresStore, during: Any) -> list[str]:
    """What ``during`` (a coroutine) asked of the store's pooled connections, in order: one
    operation is one round trip for each of those here (a claim's look, its leases' bump)."""
    pool = (await store._ready()).pool
    asked: list[str] = []
    connection = pool.connection

    def counted(what: str) -> Any:
        asked.append(what)
        return connection(what)

    pool.connection = counted  # type: ignore[method-assign]
    try:
        await during
    finally:
        del pool.connection
    return asked


async def test_a_claim_takes_bumps_and_reads_its_leases_in_one_round_trip(schema: str) -> None:
    """The advisory locks, the fencing epochs' bump and the read of the claimed runs (records,
    journals, inboxes) go out together on the lock connection: one round trip after the look
    at the queue, none on the pool. The read still sees what the bump's row locks waited for:
    a write of the run's former holder that committed while the claim took its lock."""
    store, former = make(schema), make(schema)
    try:
        runs = [await created(store, group=f"g{i}") for i in range(3)]
        held = await acquire(former, runs[0].id)
        await held.append([{"type": "step_completed", "ts": 1.0}])
        await held.release()
        claimed: list[Any] = []
        locks = (await store._ready()).locks
        scan = locks._scan
        scans = 0

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal scans
            scans += 1
            return await scan(*args, **kwargs)

        async def claim() -> None:
            claimed.extend(await store.claim(FAR, 10))

        locks._scan = counted  # type: ignore[method-assign]
        asked = await _operations(store, claim())
        del locks._scan
        # Its looks at the queue (the first claim also looks at running runs for orphans),
        # then one round trip on the lock connection for the leases.
        assert [what for what in asked if what != "read the queue"] == []
        assert scans == 1
        assert sorted(lease.run_id for lease in claimed) == sorted(r.id for r in runs)
        for lease in claimed:
            got, journal = await lease.read_run(store)
            assert got.id == lease.run_id
            expected = ["run_started"] + (["step_completed"] if got.id == runs[0].id else [])
            assert [e["type"] for e in journal] == expected
            await lease.release()
    finally:
        await store.close()
        await former.close()


async def test_a_claim_whose_bump_fails_gives_its_locks_back(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bump after the lock scan, in its round trip, fails (not for a value): the claim
    says so, and the locks the scan took are given back, so that the next claim, this
    process's or another's, takes those runs."""
    from wf.store.postgres import _store

    store, peer = make(schema), make(schema)
    try:
        runs = [await created(store) for _ in range(3)]
        monkeypatch.setattr(_store, "_BUMP_GRANTED", "SELECT 1 FROM no_such_table")
        with pytest.raises(wf.StoreError, match="take run leases"):
            await store.claim(FAR, 10)
        monkeypatch.undo()
        for taker in (peer, store):
            leases = await taker.claim(FAR, 10)
            assert sorted(lease.run_id for lease in leases) == sorted(r.id for r in runs)
            for lease in leases:
                await lease.release()
    finally:
        await store.close()
        await peer.close()


@pytest.mark.parametrize("sqlstate", ["40P01", "57014", "40001", "55P03"])
async def test_a_bump_that_fails_for_a_lock_or_a_timeout_keeps_the_other_leases(
    schema: str, monkeypatch: pytest.MonkeyPatch, sqlstate: str
) -> None:
    """A bump in the lock scan's round trip fails for a deadlock, a timeout, a serialization
    failure or a lock not granted (psycopg's ``OperationalError`` kinds, the connection
    fine): the lock connection is kept, and with it the leases already held on it; the
    locks the scan took are given back."""
    from wf.store.postgres import _store

    store, peer = make(schema), make(schema)
    try:
        first = await created(store)
        [held] = await store.claim(FAR, 1)
        locks = (await store._ready()).locks
        generation = locks.generation
        runs = [await created(store) for _ in range(2)]
        failing = f"DO $$ BEGIN RAISE SQLSTATE '{sqlstate}'; END $$"
        monkeypatch.setattr(_store, "_BUMP_GRANTED", failing)
        if sqlstate == "55P03":
            # A row lock not granted at once: the bump goes by the pool, which may wait.
            got = await store.claim(FAR, 10)
            assert sorted(lease.run_id for lease in got) == sorted(r.id for r in runs)
            for lease in got:
                await lease.release()
        else:
            with pytest.raises(wf.StoreError, match="take run leases"):
                await store.claim(FAR, 10)
        monkeypatch.undo()
        assert locks.generation == generation
        assert held.run_id == first.id and locks.held(first.id, generation)
        leases = await peer.claim(FAR, 10)
        assert sorted(lease.run_id for lease in leases) == sorted(r.id for r in runs)
        for lease in leases:
            await lease.release()
        await held.release()
    finally:
        await store.close()
        await peer.close()


async def _row_locked(schema: str, run_id: str) -> psycopg.AsyncConnection[Any]:
    """A connection of another session that holds the run's row lock (until it rolls back)."""
    conn = await psycopg.AsyncConnection.connect(DSN)
    await conn.execute(f'SELECT id FROM "{schema}".wf_runs WHERE id = %s FOR UPDATE', [run_id])
    return conn


async def _waits_for(blocker: psycopg.AsyncConnection[Any], seconds: float = 10.0) -> None:
    """Until a session waits for a lock ``blocker``'s session holds."""
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
        async with asyncio.timeout(seconds):
            while True:
                cur = await admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    [blocker.info.backend_pid],
                )
                row = await cur.fetchone()
                if row is not None and row[0]:
                    return
                await asyncio.sleep(0.01)


async def test_a_claim_waiting_on_a_row_lock_holds_up_no_release(schema: str) -> None:
    """Another session holds a run's row lock while a claim takes that run: the claim waits
    for it, but not on the lock connection, so a lease's release (and every other use of
    that connection) goes through meanwhile."""
    store = make(schema)
    try:
        await created(store)
        [held] = await store.claim(FAR, 1)
        locked = await created(store)
        blocker = await _row_locked(schema, locked.id)
        try:
            claiming = asyncio.create_task(store.claim(FAR, 10))
            await _waits_for(blocker)
            await asyncio.wait_for(held.release(), 5)
            assert not claiming.done()
        finally:
            await blocker.rollback()
            await blocker.close()
        [lease] = await asyncio.wait_for(claiming, 10)
        assert lease.run_id == locked.id
        await lease.release()
    finally:
        await store.close()


async def test_a_lock_scan_cancelled_midway_gives_its_locks_back(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task of a claim's lock scan is cancelled while its round trip is under way (as
    ``asyncio.run`` cancels every task when it ends): whatever the scan took is given back,
    so that another process claims those runs; the leases held before stay held."""
    from wf.store.postgres import _store

    store, peer = make(schema), make(schema)
    try:
        await created(store)
        [held] = await store.claim(FAR, 1)
        locks = (await store._ready()).locks
        generation = locks.generation
        runs = [await created(store) for _ in range(3)]
        monkeypatch.setattr(_store, "_CLAIMED_GRANTED", "SELECT pg_sleep(30)")
        claiming = asyncio.create_task(store.claim(FAR, 10))
        async with asyncio.timeout(10):
            while not (scans := [t for t in asyncio.all_tasks() if "_try_many" in repr(t)]):
                await asyncio.sleep(0.005)
        await _waits_on_sleep(schema)
        [scan] = scans
        scan.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(claiming, 10)
        monkeypatch.undo()
        async with asyncio.timeout(10):
            while len(got := await peer.claim(FAR, 10)) < len(runs):
                for lease in got:
                    await lease.release()
                await asyncio.sleep(0.01)
        assert sorted(lease.run_id for lease in got) == sorted(r.id for r in runs)
        assert locks.held(held.run_id, generation)
        for lease in got:
            await lease.release()
        await held.release()
    finally:
        await store.close()
        await peer.close()


async def _waits_on_sleep(schema: str, seconds: float = 10.0) -> None:
    """Until a session runs ``pg_sleep``."""
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
        async with asyncio.timeout(seconds):
            while True:
                cur = await admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
                )
                row = await cur.fetchone()
                if row is not None and row[0]:
                    return
                await asyncio.sleep(0.01)


async def _end(lease: Any, run: RunRecord, status: RunStatus = RunStatus.COMPLETED) -> None:
    """End the run under its lease, as its driver does."""
    await lease.save(dataclasses.replace(run, status=status))
    await lease.release()


async def _silenced(store: PostgresStore) -> None:
    """Open ``store`` with its notifications to other processes lost: a ``NOTIFY`` goes out
    after its commit, from a task of its own, and a batch whose send fails is dropped."""
    await store.open()
    session = store._session
    assert session is not None

    async def lost() -> None:
        return None

    session.signals._send = lost  # type: ignore[method-assign]


async def test_a_claim_after_a_lane_end_takes_a_run_committed_elsewhere_unannounced(
    schema: str,
) -> None:
    """A run of higher priority another process committed before the claim goes first, even
    when its announcement has not arrived (late or lost) and the claim follows this process's
    own lane end: the claim reads the queue, not what its lanes' last read said."""
    store, other = make(schema), make(schema)
    try:
        await store.open()  # listening, as a worker is
        await _silenced(other)
        runs = [await created(store, group="g") for _ in range(2)]
        filler = await created(store, group="h")
        first = await store.claim(FAR, 10)
        assert {lease.run_id for lease in first} == {runs[0].id, filler.id}
        by_id = {lease.run_id: lease for lease in first}
        urgent = await created(other, priority=5)
        await _end(by_id[runs[0].id], runs[0])
        claimed = await store.claim(FAR, 1)
        assert [lease.run_id for lease in claimed] == [urgent.id]
        for lease in claimed:
            await lease.release()
        await _end(by_id[filler.id], filler)
    finally:
        await store.close()
        await other.close()


async def test_next_due_at_sees_a_delayed_run_committed_elsewhere_unannounced(
    schema: str,
) -> None:
    """When the next run not due yet is due is read from the queue after a claim, not from
    the claim's look: a run delayed by another process whose announcement is late or lost
    is not slept past."""
    store, other = make(schema), make(schema)
    try:
        await store.open()  # listening, as a worker is
        await _silenced(other)
        head = await created(store, group="g")
        await created(store, group="h", wake_at=FAR + 100.0)
        leases = await store.claim(FAR, 10)
        assert [lease.run_id for lease in leases] == [head.id]
        assert await store.next_due_at(after=FAR + 1.0) == FAR + 100.0
        sooner = await created(other, wake_at=FAR + 50.0)
        assert await store.next_due_at(after=FAR + 1.0) == FAR + 50.0
        await save(other, sooner, RunStatus.CANCELLED)
        for lease in leases:
            await lease.release()
    finally:
        await store.close()
        await other.close()


@pytest.mark.parametrize("change", ["priority", "cancel", "unclaimed", "excluded"])
async def test_a_claim_after_a_lane_end_takes_what_the_queue_holds_now(
    schema: str, change: str
) -> None:
    """After this process's own lane end, a claim takes what the queue holds then: a run of
    higher priority created by another instance, the run after a lane's next run that
    another instance cancelled, the run after one that ended under a lease taken without a
    claim, or a run the last claim was told to leave out. Every write of the other instance
    has committed before the claim: no wait for its notification."""
    store, other = make(schema), make(schema)
    try:
        await store.open()
        runs = [await created(store, group="g") for _ in range(3)]
        plain = await created(store, group="h")
        aside = await created(store, priority=5)
        leases = await store.claim(FAR, 10, exclude={aside.id} if change == "excluded" else ())
        if change != "excluded":
            assert aside.id in {lease.run_id for lease in leases}
            await _end(next(lease for lease in leases if lease.run_id == aside.id), aside)
            leases = [lease for lease in leases if lease.run_id != aside.id]
        assert {lease.run_id for lease in leases} == {runs[0].id, plain.id}
        by_id = {lease.run_id: lease for lease in leases}
        await _end(by_id[plain.id], plain)
        expected = [runs[1].id]
        if change == "priority":
            expected = [(await created(other, priority=5)).id]
        elif change == "cancel":
            await save(other, runs[1], RunStatus.CANCELLED)
            expected = [runs[2].id]
        await _end(by_id[runs[0].id], runs[0])
        if change == "unclaimed":
            # The lane's next run ends under a lease taken without a claim.
            await _end(await acquire(store, runs[1].id), runs[1])
            expected = [runs[2].id]
        elif change == "excluded":
            expected = [aside.id]
        claimed = await store.claim(FAR, 1)
        assert [lease.run_id for lease in claimed] == expected
        for lease in claimed:
            await lease.release()
    finally:
        await store.close()
        await other.close()


async def test_a_lane_that_widens_when_its_head_ends_starts_as_wide(schema: str) -> None:
    """A lane's width is its first run's: when a run one wide ends and the runs behind it are
    two wide, the claim after the end takes both."""
    store = make(schema)
    try:
        await store.open()
        narrow = await created(store, group="w")
        wide = [await created(store, group="w", limits={"group_concurrency": 2}) for _ in range(2)]
        [lease] = await store.claim(FAR, 10)
        assert lease.run_id == narrow.id
        await _end(lease, narrow)
        leases = await store.claim(FAR, 10)
        assert sorted(lease.run_id for lease in leases) == sorted(r.id for r in wide)
        for lease in leases:
            await lease.release()
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("column", "limits"),
    [
        ("0", None),
        ("-5", None),
        ("NULL", '"x"'),
        ("NULL", "1e400"),
        ("NULL", "99999999999"),
    ],
)
async def test_a_damaged_lane_width_holds_neither_the_claim_nor_its_lane(
    schema: str, column: str, limits: str | None
) -> None:
    """A lane width of 0 or below (a stray ``UPDATE`` of ``lane_width``), or, for a run with
    no ``lane_width``, a record's ``group_concurrency`` the server cannot cast, read as 1:
    before, a width of 0 left the lane's runs unclaimed with no word, and a cast the server
    refused failed every claim of the store. (A record the server cannot read as JSON at all,
    a lone surrogate escape in it, still does: the width is read by the record's own keys,
    never guessed from its text, where the run's input could spell ``"limits"`` first.)"""
    store = make(schema)
    try:
        head = await created(store, group="g", limits={"group_concurrency": 1})
        behind = await created(store, group="g", limits={"group_concurrency": 1})
        plain = await created(store)
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(
                f"UPDATE {schema}.wf_runs SET lane_width = {column} WHERE lane_name IS NOT NULL"
            )
            if limits is not None:
                await admin.execute(
                    f"UPDATE {schema}.wf_runs SET record = replace(record::text,"
                    f" '\"group_concurrency\":1', '\"group_concurrency\":{limits}')::json"
                    " WHERE id = %s",
                    [head.id],
                )
        for lanes in (True, False):  # by lanes (``_HEADS``) and in claim order (``_CANDIDATES``)
            store._many_lanes_until = 0.0 if lanes else math.inf  # type: ignore[attr-defined]
            waiting: set[str] = set()
            leases = await store.claim(FAR, 10, waiting=waiting)
            assert {lease.run_id for lease in leases} >= {plain.id, head.id} - {
                f.item for f in store.faults
            }
            if head.id in {lease.run_id for lease in leases}:
                assert behind.id not in {lease.run_id for lease in leases}  # width 1
            for lease in leases:
                await lease.release()
    finally:
        await store.close()


@pytest.mark.parametrize("lanes", [True, False])
async def test_a_run_found_damaged_keeps_its_place_in_its_lane(schema: str, lanes: bool) -> None:
    """A lane head whose record cannot be read is noted by the driver that meets it, in this
    process only: another may be driving it, or a repair make it whole, so it keeps its place
    and the run behind it waits (a lane of width 1 never runs two at once)."""
    store = make(schema)
    try:
        head = await created(store, group="g")
        behind = await created(store, group="g")
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(
                f"UPDATE {schema}.wf_runs SET record = '[]'::json WHERE id = %s", [head.id]
            )
        store._many_lanes_until = 0.0 if lanes else math.inf  # type: ignore[attr-defined]
        [first] = await store.claim(FAR, 10)
        assert first.run_id == head.id  # the lane's head; its driver finds it damaged:
        with store.faults.contain("run", head.id, "its row"):
            await first.read_run(store)
        await first.release()
        assert store.faults.of_kind("run") == {head.id}
        assert await store.claim(FAR, 10, exclude={head.id}) == []
        assert await store.lane_ahead(lane_of(behind), behind.id, 1) == [head.id]
    finally:
        await store.close()


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
async def test_a_hook_whose_created_at_is_no_time_is_damaged_alone(schema: str, value: str) -> None:
    """A stray ``UPDATE`` of ``wf_hooks.created_at`` to ``NaN`` or an infinity: that hook is
    named and left out, the others listed (before, it was read as a float that no JSON could
    carry, and ``wf inspect --json`` of its run failed with an unexpected ``ValueError``)."""
    store = make(schema)
    try:
        run = await created(store)
        await store.register_hook(HookRecord("bad", run.id, op=1))
        await store.register_hook(HookRecord("good", run.id, op=2))
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(
                f"UPDATE {schema}.wf_hooks SET created_at = %s::float8 WHERE token = 'bad'",
                [value],
            )
        assert [h.token for h in await store.list_hooks(run.id)] == ["good"]
        assert [h.token for h in await store.list_hooks()] == ["good"]
        assert [f.item for f in store.faults] == ["bad"]
        with pytest.raises(wf.StoreCorrupted, match="wf_hooks row 'bad': its created_at"):
            await store.get_hook("bad")
    finally:
        await store.close()


async def test_a_tombstone_whose_deleted_at_is_no_time_is_named(schema: str) -> None:
    """A tombstone row a stray write left with ``deleted_at = 'NaN'``: reading it is
    ``StoreCorrupted`` naming its row (before, ``wf inspect`` of that id failed with an
    unexpected ``ValueError`` from the JSON encoder)."""
    store = make(schema)
    try:
        await store.open()
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(
                f"INSERT INTO {schema}.wf_tombstones (id, workflow, status, deleted_at, reason)"
                " VALUES ('gone', 'w', 'completed', 'NaN', 'x')"
            )
        with pytest.raises(wf.StoreCorrupted, match="wf_tombstones row 'gone': its deleted_at"):
            await store.get_tombstone("gone")
    finally:
        await store.close()


async def test_a_lane_width_is_never_read_from_the_runs_input(schema: str) -> None:
    """A run with no ``lane_width`` (made before that column) whose input spells a
    ``"limits"`` object: its lane's width is the record's own ``group_concurrency`` (here none:
    1), not the input's, so the run behind it waits."""
    store = make(schema)
    try:
        head = await created(store, group="g")
        behind = await created(store, group="g")
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(f"UPDATE {schema}.wf_runs SET lane_width = NULL")
            await admin.execute(
                f'UPDATE {schema}.wf_runs SET record = (\'{{"input":'
                '{"limits":{"group_concurrency":50}},\' || substr(record::text, 2))::json'
            )
        for lanes in (True, False):  # by lanes (``_HEADS``) and in claim order (``_CANDIDATES``)
            store._many_lanes_until = 0.0 if lanes else math.inf  # type: ignore[attr-defined]
            leases = await store.claim(FAR, 10)
            assert [lease.run_id for lease in leases] == [head.id]
            assert behind.id not in {lease.run_id for lease in leases}
            for lease in leases:
                await lease.release()
    finally:
        await store.close()


async def test_a_version_15_databases_step_logs_are_trusted_without_a_rewrite(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 16 takes the step log rows already there as wf wrote them: adding the column
    rewrites nothing, its partial index is built empty, and an old run's rows are read by
    one query. One a stray write damaged before the upgrade is still never served: it is left
    out of the answer (and, alone of stray rows, counted by ``start``)."""
    from wf.store.conformance import log_entry

    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await _schema_of_version(conn, schema, 15)
        await conn.execute(
            "INSERT INTO wf_runs (id, workflow, status, due_at, record) VALUES "
            "('old-run', 'tests:flow', 'pending', 0, '{\"id\": \"old-run\", "
            '"workflow": "tests:flow"}\')'
        )
        for entry in (log_entry("a"), {**log_entry("b"), "ts": "x"}, log_entry("c")):
            await conn.execute(
                "INSERT INTO wf_logs (run_id, entry) VALUES ('old-run', %s)",
                [orjson.dumps(entry).decode()],
            )
        relation = "SELECT relfilenode FROM pg_class WHERE oid = 'wf_logs'::regclass"
        before = await (await conn.execute(relation)).fetchone()
    store = make(schema)
    try:
        sent = _count_queries(store, monkeypatch)
        assert [entry["text"] for entry in await store.read_logs("old-run")] == ["a", "c"]
        assert [entry["text"] for entry in await store.read_logs("old-run", 2)] == ["c"]
        assert len(sent) == 2
        assert [entry["text"] for entry in await store.read_logs("old-run", 1)] == ["c"]
        lease = await acquire(store, "old-run")
        await lease.append_logs([log_entry("d")])
        await lease.release()
        assert [entry["text"] for entry in await store.read_logs("old-run", 3)] == ["d"]
        await _damage(schema, "INSERT INTO {s}.wf_logs (run_id, entry) VALUES ('old-run', '[]')")
        assert await _version(schema) == str(VERSION)
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
            await conn.execute(f"SET search_path TO {schema}")
            assert await (await conn.execute(relation)).fetchone() == before
            cur = await conn.execute("SELECT entry->>'text', checked FROM wf_logs ORDER BY seq")
            assert await cur.fetchall() == [
                ("a", False),
                ("b", False),
                ("c", False),
                ("d", True),
                (None, None),
            ]
        assert [entry["text"] for entry in await store.read_logs("old-run", 3)] == ["d"]
    finally:
        await store.close()


async def test_verify_names_rows_no_run_explains(schema: str) -> None:
    """Rows beside a run that nothing explains: hook and inbox rows of a run that does not
    exist (deleted by hand: no delete of wf's leaves them), and a live run whose queue
    position is neither due now nor its record's due time (a pending run due in 31 million
    years would never be taken). ``verify`` names each; it used to say nothing."""
    store = make(schema)
    await store.open()
    try:
        run = await created(store)
        gone = await created(store)
        await store.register_hook(HookRecord("orphan", gone.id, op=1))
        await store.post(gone.id, "wake", {})
        assert await store.verify() == []
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(f"DELETE FROM {schema}.wf_journal WHERE run_id = %s", [gone.id])
            await admin.execute(f"DELETE FROM {schema}.wf_runs WHERE id = %s", [gone.id])
            await admin.execute(
                f"UPDATE {schema}.wf_runs SET due_at = 1e15 WHERE id = %s", [run.id]
            )
        problems = await store.verify()
        assert f"run {gone.id}: hook rows of a run that does not exist" in problems, problems
        assert f"run {gone.id}: inbox rows of a run that does not exist" in problems, problems
        said = [line for line in problems if line.startswith(f"run {run.id}: its due_at")]
        assert said == [
            f"run {run.id}: its due_at column (1000000000000000.0) is neither 0 (due now) nor "
            "what its record says (0.0): no worker would take it when it is due"
        ], problems
    finally:
        await store.close()


@pytest.mark.parametrize("once", [False, True], ids=["post", "post_once"])
async def test_a_post_racing_the_delete_of_its_finished_run_leaves_no_inbox_row(
    schema: str, once: bool
) -> None:
    """A wake or hook payload posted to a finished run while retention deletes it (deleted,
    not yet committed): the post used to lock nothing (a finished run is in no queue) and
    insert beside the row the delete removed, so an inbox row of no run was left and
    ``verify`` said so on a store nothing damaged. The post waits for the delete now, finds
    the run gone and says so."""
    from wf.store.postgres._session import lock_key
    from wf.store.postgres._store import _DELETE_RUNS

    store = make(schema)
    await store.open()
    try:
        run = await created(store)
        await save(store, run, RunStatus.COMPLETED)
        async with await psycopg.AsyncConnection.connect(DSN) as deleter:
            await deleter.execute(f"SET search_path TO {schema}")
            params = {"ids": [run.id], "keys": [lock_key(schema, run.id)], "now": 1.0}
            await deleter.execute(_DELETE_RUNS, {**params, "reason": "retention"})
            if once:
                delivery = WebhookDelivery("d-1", "tok", run.id, "", None, 1.0)
                posted = asyncio.ensure_future(store.post_once(run.id, "hook", {}, delivery))
            else:
                posted = asyncio.ensure_future(store.post(run.id, "wake", {}))
            async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as look:
                for _ in range(500):  # until the post waits on the delete's lock, or is done
                    cur = await look.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                        [deleter.info.backend_pid],
                    )
                    if posted.done() or await cur.fetchone() is not None:
                        break
                    await asyncio.sleep(0.01)
            await deleter.commit()
        with pytest.raises(wf.RunNotFound):
            await asyncio.wait_for(posted, 10)
        assert await store.verify() == []
    finally:
        await store.close()


async def test_a_post_committed_while_the_delete_of_its_run_reads_leaves_no_inbox_row(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete is one statement with one snapshot: a post to a finished run that locks the
    row, inserts and commits after that snapshot but before the delete locks the row is not
    waited for (its lock is gone) and its message is not in the snapshot the delete's inbox
    ``DELETE`` reads. The delete stops here, after its snapshot and before its row locks
    (a gate on an advisory lock this test holds), while such a post commits."""
    from wf.store.postgres import _store
    from wf.store.postgres._session import lock_key

    gate = lock_key(schema, "test gate")
    gated = _store._DELETE_RUNS.replace(
        "WITH candidates AS (",
        f"WITH gate AS (SELECT pg_advisory_xact_lock({gate})), candidates AS (",
    ).replace(
        "JOIN candidates c ON r.id = c.id", "JOIN candidates c ON r.id = c.id CROSS JOIN gate"
    )
    assert gated.count("gate") == 2, "the delete's SQL changed: place the gate again"
    monkeypatch.setattr(_store, "_DELETE_RUNS", gated)
    store = make(schema)
    await store.open()
    try:
        run = await created(store)
        await save(store, run, RunStatus.COMPLETED)
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as holder:
            await holder.execute("SELECT pg_advisory_lock(%s)", [gate])
            deleting = asyncio.ensure_future(store.delete_runs([run.id], now=1.0, reason="r"))
            for _ in range(500):  # until the delete waits at the gate
                cur = await holder.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    [holder.info.backend_pid],
                )
                if await cur.fetchone() is not None:
                    break
                assert not deleting.done(), deleting
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the delete never reached the gate")
            await store.post(run.id, "wake", {})  # the run is there: the delete locks nothing yet
            await holder.execute("SELECT pg_advisory_unlock(%s)", [gate])
        assert (await asyncio.wait_for(deleting, 10)).ids == [run.id]
        assert await store.verify() == []
    finally:
        await store.close()


async def test_deleting_a_run_deletes_its_step_logs(schema: str) -> None:
    """Retention and ``wf gc`` left a deleted run's ``wf_logs`` rows for good: nothing else
    deleted them, and verify did not name them."""
    from wf.store.conformance import log_entry

    store = make(schema)
    await store.open()
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        await lease.append_logs([log_entry("a"), log_entry("b")])
        await lease.release()
        await save(store, run, RunStatus.COMPLETED)
        done = await store.delete_runs([run.id], now=1.0, reason="gc")
        assert done.ids == [run.id]
        async with await psycopg.AsyncConnection.connect(DSN) as conn:
            await conn.execute(f"SET search_path TO {schema}")
            cur = await conn.execute("SELECT count(*) FROM wf_logs WHERE run_id = %s", [run.id])
            assert await cur.fetchone() == (0,)
    finally:
        await store.close()


async def test_a_lock_attempt_cancelled_after_its_grant_gives_the_lock_back(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``try_lock``'s own task is cancelled after the server granted the lock, before its
    answer was taken in (as ``asyncio.run`` cancels every task when it ends): the lock is
    given back, so that another process takes it."""
    from wf.store.postgres._locks import Locks

    store, peer = make(schema), make(schema)
    try:
        locks, theirs = (await store._ready()).locks, (await peer._ready()).locks
        real = Locks._try
        granted = asyncio.Event()

        async def granted_then_slow(self: Locks, key: int) -> int | None:
            generation = await real(self, key)
            granted.set()
            await asyncio.sleep(30)  # the answer not taken in yet
            return generation

        monkeypatch.setattr(Locks, "_try", granted_then_slow)
        taking = asyncio.create_task(locks.try_lock("wrun-x", 42))
        async with asyncio.timeout(10):
            await granted.wait()
        [attempt] = [t for t in asyncio.all_tasks() if "granted_then_slow" in repr(t)]
        taking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taking
        attempt.cancel()
        monkeypatch.undo()
        async with asyncio.timeout(10):
            while await theirs.try_lock("wrun-x", 42) is None:
                await asyncio.sleep(0.01)
    finally:
        await store.close()
        await peer.close()
