"""The worker loop is a bulkhead: one damaged item never stops the others.

A store holds healthy runs (pending ones; ones suspended on a timer; runs of a group lane and
of a rate limit) beside two victims (a run asleep for an hour, a run waiting on a hook) and a
schedule. One item is damaged: a run record, a journal line (not the torn last one, which is
tolerated by design), the schedule's file, the hook's file, a lane entry, the creation
sequence, a rate window. A worker then runs until idle: every healthy run completes, the
worker returns normally, and ``wf store verify`` names the damaged item by its path. The same
on PostgreSQL (damaged rows) and on Redis (damaged values, and the entries an evicted run leaves).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import wf
from tests.engine.conftest import POSTGRES_DSN, REDIS_URL, require_server
from wf import Engine, StoreError
from wf.cli._app import build_app
from wf.engine._aside import STORE_FAILED_RETRY
from wf.engine._current import use_engine
from wf.engine._driver import drive
from wf.engine._schedules import check_stored
from wf.store import RunStatus, Store, collect_faults
from wf.store.local import LocalStore, _fsops
from wf.store.memory import MemoryStore
from wf.testing import MockClock


@wf.step
async def bump(x: int) -> int:
    return x + 1


@wf.workflow(name="bulkhead:plain")
async def plain(x: int) -> int:
    return await bump(x)


@wf.workflow(name="bulkhead:napper")
async def napper(x: int) -> int:
    y = await bump(x)
    await wf.sleep(30)
    return await bump(y)


@wf.workflow(name="bulkhead:laned", group="lane")
async def laned(x: int) -> int:
    return await bump(x)


@wf.workflow(name="bulkhead:rated", rate_limit=(100, 60))
async def rated(x: int) -> int:
    return await bump(x)


@wf.workflow(name="bulkhead:sleeper")
async def sleeper(x: int) -> int:
    y = await bump(x)
    await wf.sleep(3600)
    return await bump(y)


@wf.workflow(name="bulkhead:parent")
async def parent(x: int) -> int:
    child = await wf.start(plain, x)
    return int(await child.result()) * 10


@wf.workflow(name="bulkhead:queued", queue="bulkhead-kids")
async def queued(x: int) -> int:
    return x + 1


@wf.workflow(name="bulkhead:queued-parent")
async def queued_parent(x: int) -> int:
    child = await wf.start(queued, x)
    return int(await child.result()) * 10


@wf.workflow(name="bulkhead:grandparent")
async def grandparent(x: int) -> int:
    child = await wf.start(parent, x)
    return int(await child.result()) + 1


@wf.workflow(name="bulkhead:adopter")
async def adopter(other: str) -> str:
    try:
        await wf.start(hooked, 1, run_id=other, detach=True)
    except wf.StoreCorrupted as error:
        return f"met {error}"
    return "adopted"


@wf.workflow(name="bulkhead:hooked")
async def hooked(x: int) -> int:
    hook = wf.create_hook(dict, token=f"bulkhead-{x}")
    return len(await hook.next())


GARBAGE = [b"null", b"[1,2,3]", b'"text"', b"{oops", b"\xff\xfe", b"{}", b'{"id": 5}']
SCHEDULES = [
    b"null",
    b"[1,2,3]",
    b"{",
    json.dumps({"id": "tick", "workflow": "bulkhead:plain", "cron": "bad cron", "next_run": 0}),
    json.dumps({"id": "tick", "workflow": "bulkhead:plain", "cron": "* * * * *", "next_run": "x"}),
    json.dumps({"workflow": "bulkhead:plain", "cron": "* * * * *", "next_run": 0}),
    json.dumps({"id": "tick", "workflow": 5, "cron": "* * * * *", "next_run": 0}),
    json.dumps({"id": "tick", "workflow": "bulkhead:plain", "cron": "* * * * *", "skipped": "x"}),
    json.dumps(
        {"id": "tick", "workflow": "bulkhead:plain", "cron": "* * * * *", "next_run": 1e300}
    ),
    json.dumps(
        {"id": "tick", "workflow": "bulkhead:plain", "cron": "* * * * *", "next_run": -1e18}
    ),
    json.dumps({"id": "tick", "workflow": "bulkhead:plain", "cron": "* * * * *", "input": "x"}),
    json.dumps(
        {"id": "tick", "workflow": "bulkhead:plain", "cron": "* * * * *", "catch_up": "sometimes"}
    ),
]

JOURNAL_LINES = [
    *GARBAGE,
    b'{"type": "step_finished", "ts": 1}',  # of no kind wf knows
    b'{"type": "step_completed", "ts": 1, "op": 0, "result": 2}',  # without its name
    b'{"type": "run_completed", "ts": 1, "output": 2}',  # an outcome before the journal's end
]
"""What a journal line that is not the last may become: each makes the run damaged (its
driver fails it as such), never a line replay passes over."""

LANE_ENTRIES = ["garbage+", "12x+wrun_nothing", "1.x+abc", "00000000000000000001+bad id!"]

DAMAGE: dict[str, st.SearchStrategy[Any]] = {
    "record": st.sampled_from(GARBAGE),
    "journal line": st.sampled_from(JOURNAL_LINES),
    "schedule": st.sampled_from(SCHEDULES),
    "hook": st.sampled_from(GARBAGE),
    "lane entry": st.sampled_from(LANE_ENTRIES),
    "creation sequence": st.sampled_from([b"xx", b"-1", b"1.5"]),
    "rate": st.sampled_from([b"null", b'"text"', b"{oops", b"\xff\xfe", b"{}", b'["x"]']),
}
CASES = st.sampled_from(sorted(DAMAGE)).flatmap(lambda k: st.tuples(st.just(k), DAMAGE[k]))


async def verify(store: Store) -> list[str]:
    """What ``wf store verify`` reports."""
    return await store.verify() + await check_stored(store)


async def drained(engine: Engine, healthy: list[str]) -> wf.Worker:
    """A worker run until idle, which must return normally with every healthy run done."""
    worker = wf.Worker(engine, retention=False)
    await asyncio.wait_for(worker.run(until_idle=True), 60)
    for run_id in healthy:
        assert (await wf.get_run(run_id).status()) is RunStatus.COMPLETED, run_id
    return worker


class Healthy:
    """A store with healthy runs, two victims and a schedule (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.healthy: list[str] = []
        self.sleeper = ""
        self.hooked = ""

    async def build(self) -> None:
        engine = self.engine
        for i in range(2):
            self.healthy.append((await wf.start(plain, i, detach=True)).id)
            self.healthy.append((await wf.start(laned, i, detach=True)).id)
            self.healthy.append((await wf.start(rated, i, detach=True)).id)
            nap = await wf.start(napper, i, detach=True)
            await drive(engine, nap.id)  # suspended on its timer
            self.healthy.append(nap.id)
        done = await wf.start(rated, 9, detach=True)
        await drive(engine, done.id)  # its start made the rate window's file
        self.sleeper = (await wf.start(sleeper, 1, detach=True)).id
        await drive(engine, self.sleeper)
        self.hooked = (await wf.start(hooked, 1, detach=True)).id
        await drive(engine, self.hooked)
        await wf.schedule("tick", plain, cron="0 0 1 1 *", input=1)
        for run_id in (self.sleeper, self.hooked, *self.healthy[3::4]):
            assert (await wf.get_run(run_id).status()) is RunStatus.SUSPENDED

    def damage(self, kind: str, what: Any) -> str:
        """Damage one item; the path ``wf store verify`` must name."""
        store = self.engine.store
        assert isinstance(store, LocalStore)
        root = store.root
        if kind == "record":
            path = os.path.join(store.run_location(self.sleeper), "run.json")
        elif kind == "journal line":
            path = os.path.join(store.run_location(self.sleeper), "journal.jsonl")
            lines = Path(path).read_bytes().split(b"\n")
            assert len(lines) > 3  # line 2 is not the last one (nor the padding after it)
            lines[1] = what
            Path(path).write_bytes(b"\n".join(lines))
            return path
        elif kind == "schedule":
            path = store.schedule_location("tick")
        elif kind == "hook":
            [path] = glob.glob(os.path.join(root, "hooks", "*.json"))
        elif kind == "lane entry":
            [lane] = [p for p in glob.glob(os.path.join(root, "lanes", "*")) if os.path.isdir(p)]
            path = os.path.join(lane, what)
            Path(path).touch()
            return path
        elif kind == "creation sequence":
            path = os.path.join(root, "sequence")
        else:
            [path] = glob.glob(os.path.join(root, "rates", "*.json"))
        Path(path).write_bytes(what if isinstance(what, bytes) else what.encode())
        return path


async def bulkhead_case(kind: str, what: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(Path(tmp) / ".workflows")
        engine = Engine(store, MockClock(), suspend_after=0)
        try:
            with use_engine(engine):
                built = Healthy(engine)
                await built.build()
                path = built.damage(kind, what)
                before = await verify(store)
                assert any(path in line for line in before), (path, before)
                worker = wf.Worker(engine, retention=False)
                await asyncio.wait_for(worker.run(until_idle=True), 60)
                for run_id in built.healthy:
                    assert (await wf.get_run(run_id).status()) is RunStatus.COMPLETED, run_id
                after = await verify(store)
                # Three items mend themselves: run.json is a cache of the journal (the
                # sleeper's next save rewrites it), a rate window is rewritten by the next
                # start under its limit, and the creation sequence is rebuilt by the first
                # verify (past every number in use, ``_sequence``). The others stay damaged,
                # and named.
                if kind == "creation sequence":
                    assert any(line.endswith(": repaired") for line in before), before
                    assert (await wf.start(plain, 1, detach=True)).id
                if kind not in ("record", "rate", "creation sequence"):
                    assert any(path in line for line in after), (path, after)
                noted = any(path in str(fault) for fault in worker.faults)
                if kind == "schedule":  # met by the worker: skipped, said once
                    assert noted, list(worker.faults)
                if kind == "journal line":
                    # Noted when its run was driven, and the run failed as damaged: replay
                    # passes over no line it cannot use (it used to read past an object
                    # without a type, and an event of a kind it does not know).
                    status = await wf.get_run(built.sleeper).status()
                    noted = any(built.sleeper in str(fault) for fault in worker.faults)
                    assert noted and status is RunStatus.FAILED, (list(worker.faults), status)
        finally:
            await store.close()


@settings(max_examples=15, deadline=None, database=None)
@given(case=CASES)
@example(case=("schedule", b"null"))
@example(case=("schedule", SCHEDULES[3]))
@example(case=("schedule", SCHEDULES[-4]))
@example(case=("schedule", SCHEDULES[-3]))
@example(case=("schedule", SCHEDULES[-2]))
@example(case=("schedule", SCHEDULES[-1]))
@example(case=("journal line", b"{oops"))
@example(case=("journal line", b"{}"))
@example(case=("journal line", JOURNAL_LINES[-3]))
@example(case=("journal line", JOURNAL_LINES[-2]))
@example(case=("journal line", JOURNAL_LINES[-1]))
@example(case=("record", b"null"))
@example(case=("hook", b"[1,2,3]"))
@example(case=("lane entry", "12x+wrun_nothing"))
@example(case=("creation sequence", b"xx"))
@example(case=("rate", b"null"))
def test_one_damaged_item_stops_nothing_else(case: tuple[str, Any]) -> None:
    asyncio.run(bulkhead_case(*case))


@pytest.mark.parametrize("item", ["journal", "record", "schedule", "hook"])
@pytest.mark.parametrize("what", ["directory", "link", "unreadable"])
async def test_a_file_that_is_no_file_it_can_read_stops_nothing_else(
    tmp_path: Path, item: str, what: str
) -> None:
    """A directory, a link (refused) or a file that refuses to be read where one item's file
    belongs is that item's damage: skipped and named, while every other item goes on."""
    store = LocalStore(tmp_path / ".workflows")
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            built = Healthy(engine)
            await built.build()
            run_dir = store.run_location(built.sleeper)
            if item == "journal":
                path = os.path.join(run_dir, "journal.jsonl")
            elif item == "record":
                path = os.path.join(run_dir, "run.json")
                Path(path).write_text(json.dumps((await store.get_run(built.sleeper)).to_json()))
            elif item == "schedule":
                path = store.schedule_location("tick")
            else:
                [path] = glob.glob(os.path.join(store.root, "hooks", "*.json"))
            refused = contextlib.nullcontext()
            if what == "directory":
                os.remove(path)
                os.mkdir(path)
            elif what == "link":
                os.rename(path, path + ".elsewhere")
                os.symlink(path + ".elsewhere", path)
            else:  # what EACCES says (tests run as root, who reads a file of mode 000)
                refused = _fsops.inject("read", errno.EACCES, match=path)
            with refused:
                assert any(path in line for line in await verify(store)), path
                worker = await drained(engine, built.healthy)
                if (item, what) != ("record", "link"):  # the sleeper's save replaced the link
                    assert any(path in line for line in await verify(store)), path
                listed = {r.id for r in await store.list_runs(limit=100)}
                assert set(built.healthy) <= listed
                schedules = {s.id for s in await store.list_schedules()}
                assert schedules == (set() if item == "schedule" else {"tick"})
            if item == "schedule":
                assert any(path in str(fault) for fault in worker.faults)
    finally:
        await store.close()


async def test_a_creation_a_power_cut_left_without_data_is_no_run_to_wait_for(
    tmp_path: Path,
) -> None:
    """A power cut after a creation's rename and before its flush leaves the run's directory
    with zeros for data. It was never reported created: the worker drives the others, drops
    the leftover and stops; nothing calls it damaged."""
    root = tmp_path / ".workflows"
    store = LocalStore(root)
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            healthy = [(await wf.start(plain, i, detach=True)).id for i in range(3)]
            lost = (await wf.start(plain, 9, detach=True)).id
    finally:
        await store.close()
    for path in (root / "runs" / lost).iterdir():
        path.write_bytes(b"\0" * path.stat().st_size)
    store = LocalStore(root)  # the process started after the power cut
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            worker = await drained(engine, healthy)
            assert not list(worker.faults)
            # The creation's counter bump may have reached the disk or not: a drift that
            # verify repairs and says (the counts' own rule), and nothing else.
            assert all("counts: the count of pending" in line for line in await verify(store))
            assert lost not in {r.id for r in await store.list_runs()}
            assert not (root / "runs" / lost).exists()
    finally:
        await store.close()


async def test_a_record_time_that_is_not_a_time_is_rebuilt_from_the_journal(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path / ".workflows")
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            run = await wf.start(sleeper, 1, detach=True)
            await drive(engine, run.id)
            path = Path(store.run_location(run.id)) / "run.json"
            record = (await store.get_run(run.id)).to_json()
            path.write_text(json.dumps({**record, "wake_at": "soon"}))
            assert any(f"{path}: wake_at is not a time" in p for p in await verify(store))
            others = [await wf.start(plain, i, detach=True) for i in range(2)]
            worker = wf.Worker(engine, retention=False)
            await asyncio.wait_for(worker.run(until_idle=True), 60)
            assert [await r.result() for r in others] == [1, 2]
            assert await run.result() == 3  # the journal, the truth, gave the record back
            assert await verify(store) == []
    finally:
        await store.close()


async def test_a_record_time_that_is_not_a_time_is_damage_on_every_store() -> None:
    store = MemoryStore()
    engine = Engine(store, MockClock(), suspend_after=0)
    with use_engine(engine):
        run = await wf.start(sleeper, 1, detach=True)
        await drive(engine, run.id)
        # What no store should hold, as a store written by a buggy program might: a wake-up
        # time nobody can compare (the wake-up check, the driver, a listing).
        store._runs[run.id].record.wake_at = "soon"  # type: ignore[assignment]
        others = [await wf.start(plain, i, detach=True) for i in range(2)]
        worker = wf.Worker(engine, retention=False)
        await asyncio.wait_for(worker.run(until_idle=True), 60)
        assert [await r.result() for r in others] == [1, 2]
        with pytest.raises(wf.StoreCorrupted, match="wake_at is not a time"):
            await run.status()
    [fault] = list(worker.faults)
    assert (fault.kind, fault.item) == ("run", run.id)
    assert "wake_at is not a time ('soon')" in fault.reason


# -- the command line --------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / ".workflows"
    monkeypatch.setenv("WF_DIR", str(root))
    monkeypatch.chdir(tmp_path)
    yield root


async def test_worker_until_idle_skips_a_null_schedule_file_and_drives_the_rest(
    project: Path,
) -> None:
    store = LocalStore(project)
    engine = Engine(store, suspend_after=0)
    try:
        with use_engine(engine):
            runs = [await wf.start(plain, i, detach=True) for i in range(3)]
            await wf.schedule("tick", plain, cron="0 0 1 1 *", input=1)
        Path(store.schedule_location("tick")).write_bytes(b"null")
    finally:
        await store.close()
    result = await asyncio.to_thread(
        CliRunner().invoke, build_app(), ["worker", "--until-idle"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "3 run(s) driven, 1 damaged item(s) skipped" in result.stderr
    assert result.stderr.count(store.schedule_location("tick")) == 2  # when met; the summary
    store = LocalStore(project)
    engine = Engine(store)
    try:
        with use_engine(engine):
            for run in runs:
                assert await wf.get_run(run.id).result() == 1 + runs.index(run)
    finally:
        await store.close()
    again = await asyncio.to_thread(
        CliRunner().invoke,
        build_app(),
        ["worker", "--until-idle", "--log-format", "json"],
        catch_exceptions=False,
    )
    assert again.exit_code == 0, again.output
    lines = [json.loads(line) for line in again.stderr.splitlines()]
    [stopped] = [line for line in lines if line["message"].startswith("worker stopped")]
    assert stopped["driven"] == 0 and stopped["skipped"] == 1
    [named] = [line for line in lines if line.get("skipped_where")]
    assert named["skipped_where"] == store.schedule_location("tick")
    assert named["skipped_kind"] == "schedule file" and "not a schedule" in named["skipped_reason"]
    verified = await asyncio.to_thread(
        CliRunner().invoke, build_app(), ["store", "verify"], catch_exceptions=False
    )
    assert verified.exit_code == 1
    assert f"{store.schedule_location('tick')}: not a schedule" in verified.stdout
    assert "1 problem(s)" in verified.stdout


# -- PostgreSQL: the matching rows -----------------------------------------------------------


@pytest.fixture
async def pg_engine() -> AsyncIterator[Engine]:
    require_server("postgres")
    import psycopg

    from wf.store.postgres import PostgresStore

    schema = f"wf_bulkhead_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(POSTGRES_DSN, schema=schema)
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            yield engine
    finally:
        await store.close()
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


PG_DAMAGE = {
    "schedule null": ("wf_schedules", "schedule = 'null'::json"),
    "schedule list": ("wf_schedules", "schedule = '[1,2,3]'::json"),
    "schedule bad cron": (
        "wf_schedules",
        "next_run = 0, schedule = jsonb_set(jsonb_set(schedule::jsonb, '{cron}', "
        "'\"bad cron\"'), '{next_run}', '0')::json",
    ),
    "schedule string next_run": (
        "wf_schedules",
        "next_run = 0, schedule = jsonb_set(schedule::jsonb, '{next_run}', '\"x\"')::json",
    ),
    "run status": (
        "wf_runs",
        "record = jsonb_set(record::jsonb, '{status}', '\"bogus\"')::json",
    ),
    "run wake_at": (
        "wf_runs",
        "record = jsonb_set(record::jsonb, '{wake_at}', '\"soon\"')::json",
    ),
    # JSON PostgreSQL takes and orjson does not read: a lone surrogate escape, nesting deeper
    # than 1024, a number beyond a float.
    "run surrogate": (
        "wf_runs",
        'record = replace(record::text, \'"group":null\', \'"group":"g\\ud800"\')::json',
    ),
    "run depth": (
        "wf_runs",
        "record = replace(record::text, '\"group\":null',"
        " '\"group\":' || repeat('[', 1100) || repeat(']', 1100))::json",
    ),
    "run number": (
        "wf_runs",
        "record = replace(record::text, '\"group\":null', '\"group\":1e400')::json",
    ),
    "schedule surrogate": (
        "wf_schedules",
        'schedule = (\'{"x":"\\ud800",\' || substr(schedule::text, 2))::json',
    ),
    # A value a save writes to a text column, which PostgreSQL refuses: every save of the run
    # fails (and, batched with other runs' writes, failed theirs).
    "run NUL workflow": (
        "wf_runs",
        'record = replace(record::text, \'"workflow":"bulkhead:plain"\','
        ' \'"workflow":"bulkhead:plain\\u0000"\')::json',
    ),
}


@pytest.mark.postgres
@pytest.mark.parametrize("kind", sorted(PG_DAMAGE))
async def test_one_damaged_row_stops_nothing_else(pg_engine: Engine, kind: str) -> None:
    engine = pg_engine
    store = engine.store
    healthy = [(await wf.start(plain, i, detach=True)).id for i in range(2)]
    nap = await wf.start(napper, 1, detach=True)
    await drive(engine, nap.id)
    healthy.append(nap.id)
    victim = (await wf.start(plain, 7, detach=True)).id
    await wf.schedule("tick", plain, cron="0 0 1 1 *", input=1)
    table, change = PG_DAMAGE[kind]
    item = "tick" if table == "wf_schedules" else victim
    import psycopg

    from wf.store.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    schema = store.schema
    row = f"SELECT t::text FROM {schema}.{table} t WHERE id = %s"
    async with await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as admin:
        before = await (await admin.execute(row, [item])).fetchone()
        await admin.execute(f"UPDATE {schema}.{table} SET {change} WHERE id = %s", [item])
        assert await (await admin.execute(row, [item])).fetchone() != before  # damaged
        if table == "wf_schedules":  # due: a worker reads only due schedules
            await admin.execute(f"UPDATE {schema}.{table} SET next_run = 0 WHERE id = %s", [item])
    # The queue's depth (the web UI's queues page, the OpenTelemetry gauge) counts the others
    # (and the victim, when the server reads what it needs of its record).
    depth = {s.workflow: s.depth for s in await store.queue_stats(engine.clock.now())}
    assert depth["bulkhead:plain"] == 3 or (table == "wf_runs" and depth["bulkhead:plain"] == 2)
    worker = await drained(engine, healthy)
    where = store.schedule_location(item) if table == "wf_schedules" else store.run_location(item)
    assert any(where in fault.where for fault in worker.faults), list(worker.faults)
    problems = await verify(store)
    assert any(where in line for line in problems), problems


@pytest.mark.postgres
async def test_a_schedule_row_with_a_null_next_run_is_damage_said_everywhere(
    pg_engine: Engine,
) -> None:
    """A row whose ``next_run`` column is NULL while its schedule (not paused, not ended) has
    a next fire is left out by the index workers read due schedules from: it would never fire,
    with no word. Workers, ``wf schedules`` and ``wf store verify`` name it as damaged, and the
    other schedules fire; saving it again repairs it."""
    import psycopg

    from wf import admin
    from wf.store.postgres import PostgresStore

    engine = pg_engine
    store = engine.store
    assert isinstance(store, PostgresStore)
    await wf.schedule("broken", plain, cron="* * * * *", input=1)
    await wf.schedule("fine", plain, cron="* * * * *", input=2)
    async with await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as conn:
        await conn.execute(
            f"UPDATE {store.schema}.wf_schedules SET next_run = NULL WHERE id = 'broken'"
        )
    where = store.schedule_location("broken")
    page = await admin.schedule_page(store)
    assert [row["id"] for row in page.schedules] == ["fine"]
    assert [fault.where for fault in page.damaged] == [where]
    assert "next_run column (NULL)" in page.damaged[0].reason
    problems = await verify(store)
    assert any(line.startswith(where) and "NULL" in line for line in problems), problems
    assert isinstance(engine.clock, MockClock)
    engine.clock.jump(60)
    worker = await drained(engine, [])
    assert [fault.where for fault in worker.faults] == [where]
    fired = {s.id: s.last_run_id for s in await store.list_schedules()}
    assert fired == {"fine": fired["fine"]} and fired["fine"] is not None
    from wf.engine._pausing import pause, resume

    await pause(store, "broken", engine.clock.now())  # a save repairs the row
    await resume(store, "broken", engine.clock.now())
    assert await verify(store) == []


PG_VALUES = {
    "journal event": (
        "UPDATE {s}.wf_journal SET event = 'null' WHERE run_id = %s"
        " AND seq = (SELECT min(seq) + 1 FROM {s}.wf_journal WHERE run_id = %s)",
        "wf_journal row of run '{victim}', event 1",
    ),
    "inbox message": (
        "INSERT INTO {s}.wf_inbox (run_id, kind, data) SELECT %s, 'hook', '[1]' WHERE %s <> ''",
        "wf_inbox row",
    ),
    "hook schema": (
        "UPDATE {s}.wf_hooks SET payload_schema = '[1]' WHERE run_id = %s AND %s <> ''",
        "wf_hooks row 'bulkhead-1'",
    ),
    "journal number": (
        "UPDATE {s}.wf_journal SET event = ('{{\"n\":1e400,' || substr(event::text, 2))::json"
        " WHERE run_id = %s AND seq = (SELECT min(seq) + 1 FROM {s}.wf_journal WHERE run_id = %s)",
        "wf_journal row of run '{victim}', event 1: not JSON wf can read",
    ),
    "inbox surrogate": (
        "INSERT INTO {s}.wf_inbox (run_id, kind, data)"
        " SELECT %s, 'hook', '{{\"x\":\"\\ud800\"}}' WHERE %s <> ''",
        "wf_inbox row",
    ),
    "hook surrogate": (
        'UPDATE {s}.wf_hooks SET payload_schema = \'{{"x":"\\ud800"}}\''
        " WHERE run_id = %s AND %s <> ''",
        "wf_hooks row 'bulkhead-1': not JSON wf can read",
    ),
}


@pytest.mark.postgres
@pytest.mark.parametrize("kind", sorted(PG_VALUES))
async def test_one_value_a_run_cannot_use_stops_nothing_else(pg_engine: Engine, kind: str) -> None:
    import psycopg

    from wf.store.postgres import PostgresStore

    engine = pg_engine
    store = engine.store
    assert isinstance(store, PostgresStore)
    built = Healthy(engine)
    await built.build()
    victim = built.sleeper if kind.startswith("journal") else built.hooked
    change, named = PG_VALUES[kind]
    async with await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as admin:
        await admin.execute(change.format(s=store.schema), [victim, victim])  # type: ignore[arg-type]
    worker = await drained(engine, built.healthy)
    named = named.format(victim=victim)
    problems = await verify(store)
    assert any(line.startswith(named) for line in problems), (named, problems)
    if kind.startswith("hook"):
        assert await store.list_hooks() == []  # left out, and said once
        assert any("bulkhead-1" in str(fault) for fault in store.faults), list(store.faults)
    else:  # met by the worker: the run is left alone, and named
        assert any(victim in fault.item for fault in worker.faults), list(worker.faults)
        with pytest.raises(wf.StoreCorrupted):
            await (store.read_journal if kind.startswith("journal") else store.read_inbox)(victim)


# -- a worker inside another program (wf serve, wf dev) ---------------------------------------


class _Flaky(MemoryStore):
    """A store whose claim fails once, as a server that went away and came back."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise StoreError("the server went away")
        return await super().claim(*args, **kwargs)


async def test_a_served_worker_says_why_it_stopped_and_starts_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = Engine(_Flaky(), MockClock())
    with use_engine(engine):
        run = await wf.start(plain, 4, detach=True)
        worker = wf.Worker(engine, retention=False)
        task = asyncio.get_running_loop().create_task(worker.serve(retry=0.01))
        try:
            assert await asyncio.wait_for(run.result(), 10) == 5
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)
    assert "the worker stopped: the server went away; starting again in 0.01s" in caplog.text


# -- Redis: the matching keys, and what an eviction or a stray write leaves ------------------


@pytest.fixture
async def redis_engine() -> AsyncIterator[Engine]:
    require_server("redis")
    from tests.store.helpers import drop_redis_keys
    from wf.store.redis import RedisStore

    prefix = f"wf_bulkhead:{uuid.uuid4().hex[:12]}:"
    store = RedisStore(REDIS_URL, prefix=prefix)
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            yield engine
    finally:
        await store.close()
        drop_redis_keys(REDIS_URL, prefix)


@pytest.mark.redis
async def test_a_child_whose_redis_queue_key_is_damaged_is_not_half_made(
    redis_engine: Engine,
) -> None:
    """Redis does not undo a script's writes when a later one fails: the creation reads every
    key it writes first, so the child's queue key of another type leaves no record behind
    (which the parent's next drive would have taken for its child, a run with no journal, and
    failed on). The parent stays due; once the key is removed, it creates its child once."""
    import redis

    from wf.store.redis import RedisStore

    engine = redis_engine
    store = engine.store
    assert isinstance(store, RedisStore)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        probe = (await wf.start(queued, 0, detach=True)).id
        qk = client.hget(f"{store.prefix}r:{probe}", "qk").decode()
        queue_key = f"{store.prefix}q:{qk}"
        client.delete(queue_key)
        client.set(queue_key, b"someone's")
        mom = (await wf.start(queued_parent, 2, detach=True)).id
        errors: list[BaseException] = []
        worker = wf.Worker(engine, retention=False, on_error=lambda r, e: errors.append(e))
        await asyncio.wait_for(worker.run(until_idle=True), 60)
        assert (await store.get_run(mom)).status in (RunStatus.PENDING, RunStatus.RUNNING)
        assert client.exists(f"{store.prefix}r:{mom}.0") == 0
        [error] = errors
        assert type(error) is StoreError and queue_key in str(error), error

        client.delete(queue_key)
        engine.clock.jump(60)  # type: ignore[attr-defined]
        await asyncio.wait_for(worker.run(until_idle=True), 60)
        record = await store.get_run(mom)
        assert (record.status, record.output) == (RunStatus.COMPLETED, 30), record.error
        assert [r.id for r in await store.list_runs(parent_id=mom)] == [f"{mom}.0"]
    finally:
        client.close()


REDIS_DAMAGE = [
    "record",
    "journal line",
    "journal line null",
    "schedule",
    "hook",
    "inbox message",
    "tombstone",
    "creation sequence",
    "lane entry",
    "queue entry",
    "evicted run",
    "lease value",
    "queue key",
    "lane width",
    "run hash type",
    "journal type",
    "epoch",
    "creation number",
]


@pytest.mark.redis
@pytest.mark.parametrize("kind", REDIS_DAMAGE)
async def test_one_damaged_redis_value_stops_nothing_else(redis_engine: Engine, kind: str) -> None:
    import redis

    engine = redis_engine
    store = engine.store
    built = Healthy(engine)
    await built.build()
    p = store.prefix  # type: ignore[attr-defined]
    client = redis.Redis.from_url(REDIS_URL)
    named: str | None = None  # what ``wf store verify`` must name
    noted: str | None = None  # what the worker must name, having met it
    try:
        if kind == "record":
            client.hset(f"{p}r:{built.sleeper}", "rec", b"{oops")
            named = noted = built.sleeper
        elif kind.startswith("journal line"):
            client.lset(f"{p}j:{built.sleeper}", 1, b"null" if kind.endswith("null") else b"{oops")
            named = noted = f"element 1 of {p}j:{built.sleeper}"
        elif kind == "schedule":
            client.hset(f"{p}sched", "tick", b"[1,2,3]")
            named = noted = f"field 'tick' of {p}sched"
        elif kind == "hook":
            client.hset(f"{p}hooks", "bulkhead-1", b"{}")
            named = f"field 'bulkhead-1' of {p}hooks"
        elif kind == "inbox message":
            client.hset(f"{p}in:{built.hooked}", "m0", b"[1]")
            named = noted = f"field 'm0' of {p}in:{built.hooked}"
        elif kind == "tombstone":
            client.hset(f"{p}tomb", "wrun_gone", b"null")
            named = f"field 'wrun_gone' of {p}tomb"
        elif kind == "creation sequence":
            client.set(f"{p}seq", b"xx")
            named = f"{p}seq"
        elif kind == "lane entry":  # would hold the lane's one place for good
            [lane] = client.keys(f"{p}g:*")
            client.zadd(lane, {b"wrun_evicted": 0})
        elif kind == "queue entry":  # a member whose run is gone
            [queue] = client.keys(f"{p}q:*")
            client.zadd(queue, {b"0000000000000000wrun_evicted": 0})
        elif kind == "lease value":  # no token of wf's, and no time to live: held by nobody
            client.set(f"{p}lease:{built.healthy[0]}", b"1:2")
        elif kind == "queue key":  # a member of the queues' index that names no queue
            client.zadd(f"{p}qk", {b"nopipe": 0})
        elif kind == "lane width":
            laned_run = built.healthy[1]  # Healthy.build starts plain, laned, rated, napper
            client.hset(f"{p}r:{laned_run}", "gw", b"wide")
        elif kind in ("run hash type", "journal type"):  # a key of another type: a string
            key = f"{p}{'r' if kind == 'run hash type' else 'j'}:{built.sleeper}"
            client.delete(key)
            client.set(key, b"x")
            named = noted = key
        elif kind in ("epoch", "creation number"):  # a field the scripts count with
            field = "ep" if kind == "epoch" else "seq"
            client.hset(f"{p}r:{built.sleeper}", field, b"abc")
            named = noted = f"field '{field}' of {p}r:{built.sleeper}"
        else:  # evicted under maxmemory, or deleted by hand: its entries stay behind
            gone = built.healthy.pop(0)
            client.delete(f"{p}r:{gone}")
            named = gone
    finally:
        client.close()
    if kind == "lane width":  # named until the run's own next save writes it again
        where = f"field 'gw' of {p}r:{built.healthy[1]}"
        assert any(where in line for line in await verify(store))
    worker = await drained(engine, built.healthy)
    problems = await verify(store)
    if named is not None:
        assert any(named in line for line in problems), (named, problems)
    else:  # dropped by the claim that met it: nothing is left to name
        assert problems == [], problems
    if noted is not None:
        assert any(noted in str(fault) for fault in worker.faults), list(worker.faults)
    if kind == "creation sequence":
        with pytest.raises(wf.StoreCorrupted, match="creation sequence is not a number"):
            await wf.start(plain, 1, detach=True)
    if kind == "hook":
        assert await store.list_hooks() == []  # left out, and said once
        assert any(named in str(fault) for fault in store.faults), list(store.faults)
    if kind == "tombstone":
        with pytest.raises(wf.StoreCorrupted, match="not a tombstone"):
            await store.get_tombstone("wrun_gone")


@pytest.mark.parametrize("where", ["by-workflow", "tmp"])
async def test_damage_met_creating_a_child_leaves_its_parent_due(
    tmp_path: Path, where: str
) -> None:
    """A file where the child's ``by-workflow/<hash>`` index directory (or ``tmp/``) belongs
    is the store's damage, not the parent's: its drive stops, the parent stays due (not
    failed as if its workflow had raised) and is tried again later; once the file is
    removed it goes on and creates its child exactly once. The index directory's damage
    failed the parent for good with ``StoreCorrupted`` (and a process that knew the directory
    never looked for it again); the file at ``tmp/``, met by the link of the parent's queue
    entry, had it skipped as a damaged run."""
    store = LocalStore(tmp_path / ".workflows")
    clock = MockClock()
    engine = Engine(store, clock, suspend_after=0)
    try:
        with use_engine(engine):
            first = (await wf.start(plain, 1, detach=True)).id  # makes its index directory
            await drained(engine, [first])
            mom = (await wf.start(parent, 2, detach=True)).id
            [index] = glob.glob(
                os.path.join(store.root, "by-workflow", "*", "*", "*", f"*+{first}")
            )
            damaged = Path(os.path.join(store.root, where))
            if where == "by-workflow":
                damaged = Path(index).parents[2]  # by-workflow/<hash of bulkhead:plain>
            shutil.rmtree(damaged)
            damaged.write_bytes(b"someone's")
            errors: list[BaseException] = []
            worker = wf.Worker(engine, retention=False, on_error=lambda r, e: errors.append(e))
            await asyncio.wait_for(worker.run(until_idle=True), 60)
            record = await store.get_run(mom)
            assert record.status in (RunStatus.PENDING, RunStatus.RUNNING), record.error
            assert await store.list_runs(parent_id=mom) == []
            [error] = errors  # the store's failure, tried again later: not damage of the run
            assert type(error) is StoreError and str(damaged) in str(error), error
            assert not list(worker.faults)
            assert any(str(damaged) in line for line in await verify(store))

            damaged.unlink()
            if where == "tmp":
                damaged.mkdir()
            clock.jump(60)
            await asyncio.wait_for(worker.run(until_idle=True), 60)
            record = await store.get_run(mom)
            assert (record.status, record.output) == (RunStatus.COMPLETED, 30), record.error
            assert [r.id for r in await store.list_runs(parent_id=mom)] == [f"{mom}.0"]
            await verify(store)  # puts back the first run's entries, gone with the directory
            assert await verify(store) == []
    finally:
        await store.close()


async def test_damage_met_creating_a_child_leaves_its_parent_due_on_any_store() -> None:
    """The engine's side, whatever store raises ``StoreCorrupted`` from a child's creation:
    the parent's drive stops with a ``StoreError`` naming the damage and the child, and the
    parent goes on once the store creates the child."""
    store = MemoryStore()
    clock = MockClock()
    engine = Engine(store, clock, suspend_after=0)
    real = store.create_run
    refused = [0]

    async def create_run(record: Any, *args: Any, **kwargs: Any) -> bool:
        if record.parent_id is not None and refused[0] < 1:
            refused[0] += 1
            raise wf.StoreCorrupted("by-workflow/x: a file stands where a directory belongs")
        return await real(record, *args, **kwargs)

    store.create_run = create_run  # type: ignore[method-assign]
    with use_engine(engine):
        mom = (await wf.start(parent, 2, detach=True)).id
        errors: list[BaseException] = []
        worker = wf.Worker(engine, retention=False, on_error=lambda r, e: errors.append(e))
        await asyncio.wait_for(worker.run(until_idle=True), 60)
        assert (await store.get_run(mom)).status is RunStatus.RUNNING
        [error] = errors
        assert type(error) is StoreError
        assert str(error) == (
            f"starting child run {mom}.0 of run {mom}: by-workflow/x: a file stands where a "
            "directory belongs"
        )
        clock.jump(60)
        await asyncio.wait_for(worker.run(until_idle=True), 60)
        record = await store.get_run(mom)
        assert (record.status, record.output) == (RunStatus.COMPLETED, 30), record.error
        assert [r.id for r in await store.list_runs(parent_id=mom)] == [f"{mom}.0"]


async def test_an_ancestors_result_drives_a_child_whose_store_failed_again_only_later() -> None:
    """A caller awaiting a grandparent's ``result()`` drives its due descendants; a parent
    whose child's creation fails with a ``StoreError`` is driven again only after
    ``STORE_FAILED_RETRY``, as a worker's own drive is, not at every look (every 2 s, each
    replaying the parent's journal and saying a line)."""
    store = MemoryStore()
    clock = MockClock(autojump=False)  # time moves here only
    engine = Engine(store, clock, suspend_after=0)
    real = store.create_run
    tries = [0]
    refusing = [True]

    async def create_run(record: Any, *args: Any, **kwargs: Any) -> bool:
        if record.workflow == "bulkhead:plain" and refusing[0]:
            tries[0] += 1
            raise wf.StoreCorrupted("by-workflow/x: a file stands where a directory belongs")
        return await real(record, *args, **kwargs)

    async def looked() -> None:
        """One look of the wait's (it times out at once), and the drives it set off."""
        with pytest.raises(TimeoutError):
            await run.result(timeout=0.01)
        for _ in range(1000):
            if not engine.drivers:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"drives still under way: {list(engine.drivers)}")

    store.create_run = create_run  # type: ignore[method-assign]
    with use_engine(engine):
        run = await wf.start(grandparent, 2, detach=True)
        await looked()
        assert tries == [1]
        for _ in range(5):
            await looked()
            clock.jump(STORE_FAILED_RETRY / 10)
        assert tries == [1]  # 15 s: not tried again yet
        clock.jump(STORE_FAILED_RETRY)
        await looked()
        await looked()
        assert tries == [2]
        refusing[0] = False
        clock.jump(STORE_FAILED_RETRY + 1)
        assert await asyncio.wait_for(run.result(), 60) == 31


@pytest.mark.parametrize("what", ["locator", "link"])
async def test_a_damaged_run_of_the_id_a_child_is_started_with_is_the_workflows_to_meet(
    tmp_path: Path, what: str
) -> None:
    """On the local store: a packed run's locator that is no locator, or a link where the
    run's directory belongs, under the id a workflow starts a child with, is that run's
    damage, met by the workflow (``wf.StoreCorrupted``, which it may catch), not a creation
    refused by the store's damage: that kept the parent due, tried every 30 s for nothing."""
    store = LocalStore(tmp_path / ".workflows")
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            mom = (await wf.start(adopter, "other1", detach=True)).id
            if what == "locator":
                os.makedirs(store.segments.links, exist_ok=True)
                Path(store.segments.links, "other1").write_text("not a locator")
            else:
                os.symlink(tmp_path, store.run_dir("other1"))
            errors: list[BaseException] = []
            worker = wf.Worker(engine, retention=False, on_error=lambda r, e: errors.append(e))
            await asyncio.wait_for(worker.run(until_idle=True), 60)
            record = await store.get_run(mom)
            assert record.status is RunStatus.COMPLETED, (record.error, errors)
            assert str(record.output).startswith("met "), record.output
            assert not errors
    finally:
        await store.close()


@pytest.mark.parametrize("where", ["get_run", "get_tombstone", "post"])
async def test_damage_of_an_existing_run_adopted_as_a_child_is_the_workflows_to_meet(
    where: str,
) -> None:
    """Only the child's creation makes damage the driver's: a child ``run_id`` naming a run
    that exists (or existed) and whose record (tombstone, inbox) is damaged is met by the
    workflow as ``wf.StoreCorrupted``, which it may catch. It was a ``StoreError`` instead,
    leaving the parent due, driven again and again for nothing."""
    store = MemoryStore()
    engine = Engine(store, MockClock(), suspend_after=0)
    damage = wf.StoreCorrupted("run other: its record is not JSON")
    real_get_run, real_post = store.get_run, store.post

    async def get_run(run_id: str) -> Any:
        if run_id == "other" and where == "get_run":
            raise damage
        if run_id == "other" and where == "get_tombstone":
            raise wf.RunNotFound(run_id)
        return await real_get_run(run_id)

    async def get_tombstone(run_id: str) -> Any:
        raise damage

    async def post(run_id: str, *args: Any, **kwargs: Any) -> Any:
        if run_id == "other":
            raise damage
        return await real_post(run_id, *args, **kwargs)

    with use_engine(engine):
        await wf.start(hooked, 1, run_id="other", detach=True)
        await drained(engine, [])  # waits for its hook: an adopter posts to it
        store.get_run = get_run  # type: ignore[method-assign]
        store.get_tombstone = get_tombstone  # type: ignore[method-assign]
        if where == "post":
            store.post = post  # type: ignore[method-assign]
        mom = (await wf.start(adopter, "other", detach=True)).id
        errors: list[BaseException] = []
        worker = wf.Worker(engine, retention=False, on_error=lambda r, e: errors.append(e))
        await asyncio.wait_for(worker.run(until_idle=True), 60)
        record = await real_get_run(mom)
        assert (record.status, record.output) == (RunStatus.COMPLETED, f"met {damage}"), (
            record.error,
            errors,
        )
        assert errors == []


async def test_a_run_whose_hook_file_is_damaged_still_ends_when_cancelled(tmp_path: Path) -> None:
    """The damage is the hook's: the run's outcome stands (its token stays held, named by
    verify, until the file is removed), instead of a run left running for good."""
    store = LocalStore(tmp_path / ".workflows")
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine), collect_faults() as met:
            run = await wf.start(hooked, 1, detach=True)
            await drive(engine, run.id)
            [path] = glob.glob(os.path.join(store.root, "hooks", "*.json"))
            Path(path).write_bytes(b"garbage{")
            await asyncio.wait_for(run.cancel(wait=True), 30)
            assert (await run.status()) is RunStatus.CANCELLED
        assert [(f.kind, f.item) for f in met] == [("hook", "bulkhead-1")]
        assert any(path in line for line in await verify(store))
    finally:
        await store.close()


@pytest.mark.redis
@pytest.mark.parametrize("raw", [b"{{", b"[1]"])
async def test_a_run_registering_a_token_whose_redis_record_is_damaged_is_told_once(
    redis_engine: Engine, raw: bytes
) -> None:
    """As on the local store: the new run fails with the damaged field named (not a registration
    that "succeeded" without writing, leaving it waiting unlisted, nor raw Lua text retried
    forever), the hook is noted once, and ``wf hook resume``'s reading names the same field."""
    import redis

    engine = redis_engine
    store = engine.store
    p = store.prefix  # type: ignore[attr-defined]
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.hset(f"{p}hooks", "bulkhead-7", raw)
        with collect_faults() as met:
            run = await wf.start(hooked, 7, detach=True)
            await asyncio.wait_for(drive(engine, run.id), 30)
        where = f"field 'bulkhead-7' of {p}hooks"
        assert await run.status() is RunStatus.FAILED
        record = await store.get_run(run.id)
        assert record.error is not None and where in json.dumps(record.error)
        assert [(f.kind, f.item) for f in met] == [("hook", "bulkhead-7")]
        with pytest.raises(wf.StoreCorrupted, match=where):
            await store.get_hook("bulkhead-7")
        assert client.hget(f"{p}hooks", "bulkhead-7") == raw
    finally:
        client.close()


@pytest.mark.parametrize("err", [errno.EACCES, errno.EIO])
@pytest.mark.parametrize("first", [True, False])
async def test_a_journal_that_cannot_be_opened_skips_its_run_for_now(
    tmp_path: Path, err: int, first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """One run whose journal refuses to open (EACCES, EIO) is that run's fault, wherever it
    sits in the queue: skipped with one line naming it, the others driven, and tried again
    later (it may heal) by the same worker."""
    store = LocalStore(tmp_path / ".workflows")
    clock = MockClock()
    engine = Engine(store, clock, suspend_after=0)
    try:
        with use_engine(engine):
            healthy = [(await wf.start(plain, i, detach=True)).id for i in range(2)]
            bad = (await wf.start(plain, 9, detach=True)).id
            if not first:
                healthy += [(await wf.start(plain, i, detach=True)).id for i in range(2, 4)]
            else:
                healthy.append((await wf.start(plain, 5, detach=True)).id)
            journal = os.path.join(store.run_location(bad), "journal.jsonl")
            worker = wf.Worker(engine, retention=False)
            with _fsops.inject("open", err, match=journal):
                await asyncio.wait_for(worker.run(until_idle=True), 60)
                for run_id in healthy:
                    assert (await wf.get_run(run_id).status()) is RunStatus.COMPLETED
                assert (await store.get_run(bad)).status is RunStatus.PENDING
                [fault] = list(worker.faults)
                assert fault.item == bad and fault.again
                said = [r.getMessage() for r in caplog.records if bad in r.getMessage()]
                assert len(said) == 1 and journal in said[0], said
                clock.jump(1)
                await asyncio.wait_for(worker.run(until_idle=True), 60)  # not yet again
                assert (await store.get_run(bad)).status is RunStatus.PENDING
            clock.jump(60)  # healed meanwhile: tried again, and driven
            await asyncio.wait_for(worker.run(until_idle=True), 60)
            assert (await store.get_run(bad)).status is RunStatus.COMPLETED
            assert not list(worker.faults)
    finally:
        await store.close()


async def test_a_store_wide_failure_in_a_claim_still_stops_the_worker(tmp_path: Path) -> None:
    """A full file system met on a run's file is the store's failure, not the run's."""
    store = LocalStore(tmp_path / ".workflows")
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            run_id = (await wf.start(plain, 1, detach=True)).id
            journal = os.path.join(store.run_location(run_id), "journal.jsonl")
            worker = wf.Worker(engine, retention=False)
            with (
                _fsops.inject("open", errno.ENOSPC, match=journal),
                pytest.raises(StoreError, match="ENOSPC"),
            ):
                await asyncio.wait_for(worker.run(until_idle=True), 60)
    finally:
        await store.close()


async def test_running_out_of_open_files_in_a_claim_claims_fewer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """EMFILE met by a claim is no run's fault and no reason to stop: the worker drives what
    it holds, says once that ``ulimit -n`` is too low, and claims the rest later."""
    store = LocalStore(tmp_path / ".workflows")
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            runs = [(await wf.start(plain, i, detach=True)).id for i in range(4)]
            worker = wf.Worker(engine, retention=False, concurrency=10)
            with _fsops.inject("open", errno.EMFILE, match="journal.jsonl", after=1, times=3):
                await asyncio.wait_for(worker.run(until_idle=True), 60)
            for run_id in runs:
                assert (await wf.get_run(run_id).status()) is RunStatus.COMPLETED
            assert not list(worker.faults)
            said = [r.getMessage() for r in caplog.records if "ulimit -n" in r.getMessage()]
            assert len(said) == 1 and "EMFILE" in said[0], said
    finally:
        await store.close()


async def test_a_worker_says_at_start_that_ulimit_n_is_too_low_for_its_concurrency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _which: (64, 4096))
    store = LocalStore(tmp_path / ".workflows")
    engine = Engine(store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            await asyncio.wait_for(wf.Worker(engine, concurrency=100).run(until_idle=True), 60)
    finally:
        await store.close()
    said = [r.getMessage() for r in caplog.records if "ulimit -n" in r.getMessage()]
    assert said == [
        "`ulimit -n` 64 is too low for --concurrency 100; wf needs about 4 files per run (about "
        "464 in all): fewer runs are driven at once (raise it with `ulimit -n 464`)"
    ]


RECORD_FIELDS: dict[str, dict[str, Any]] = {
    "workflow null": {"workflow": None},
    "id of another run": {"id": "wrun_other"},
    "max_recoveries below 0": {"max_recoveries": -1},
    "retention a string": {"retention": "1s"},
}
"""A pending run's record with one field a reader relies on of the wrong kind or value."""


@pytest.mark.stores("local", "postgres", "redis")  # memory: objects, no stored data to edit
@pytest.mark.parametrize("kind", sorted(RECORD_FIELDS))
async def test_one_record_field_of_the_wrong_kind_stops_nothing_else(
    engine_store: Store, kind: str
) -> None:
    """The run is damaged: named by the worker (once) and by ``wf store verify``, never
    listed, never driven (a ``max_recoveries`` of -1 failed it as stalled at its first claim;
    another run's id made every save of it fail; a null workflow failed the batched writes of
    the healthy runs beside it on PostgreSQL and Redis); every healthy run completes."""
    from tests.store.helpers import edit_record

    with use_engine(Engine(engine_store, MockClock(), suspend_after=0)):
        healthy = [(await wf.start(plain, i, detach=True)).id for i in range(8)]
        victim = (await wf.start(plain, 7, detach=True)).id
    await edit_record(engine_store, victim, RECORD_FIELDS[kind])
    # The worker is another process: a local store's creator knows the journals it wrote.
    peer = LocalStore(engine_store.root) if isinstance(engine_store, LocalStore) else None
    engine = Engine(peer or engine_store, MockClock(), suspend_after=0)
    try:
        with use_engine(engine):
            worker = await drained(engine, healthy)
    finally:
        if peer is not None:
            await peer.close()
    assert [fault.item for fault in worker.faults] == [victim], list(worker.faults)
    problems = await verify(engine_store)
    assert any(victim in line for line in problems), problems
    listed = {r.id for r in await engine_store.list_runs(limit=100)}
    assert listed == set(healthy)
    with pytest.raises(wf.StoreCorrupted):
        await engine_store.get_run(victim)
