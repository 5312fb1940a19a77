"""The runs screen, driven by Textual's pilot: rows, filters, id search, paging, live updates."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from textual.widgets import DataTable, Input

from tests.cli.tui.conftest import SIZE, until
from tests.cli.tui.flows import fixed_id, ship
from wf import Engine
from wf.admin import LocalAdmin, RunPage
from wf.cli.tui._app import InspectApp
from wf.cli.tui._query import PAGE_SIZE
from wf.cli.tui._run import RunScreen
from wf.cli.tui._runs import RunsScreen
from wf.store import RunRecord, RunStatus
from wf.store.memory import MemoryStore


def table(app: InspectApp) -> DataTable[Any]:
    return app.screen.query_one("#runs", DataTable)


def column(app: InspectApp, name: str) -> list[str]:
    grid = table(app)
    index = list(grid.columns).index(name)  # type: ignore[arg-type]
    return [str(grid.get_row_at(i)[index]) for i in range(grid.row_count)]


async def test_runs_are_listed_newest_first_with_their_state(
    engine: Engine, runs: dict[str, str]
) -> None:
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        ids = column(app, "id")
        assert ids == sorted(runs.values(), reverse=True)
        by_id = dict(zip(ids, column(app, "status"), strict=True))
        assert by_id[runs["failed"]] == "failed"
        assert by_id[runs["hook"]] == "suspended"
        info = dict(zip(ids, column(app, "waiting on / error"), strict=True))
        assert info[runs["hook"]] == "hook 'approve:order-3'"
        assert info[runs["sleeping"]].startswith("wakes in 23h52m · sleep until 2027-01-16")
        assert info[runs["failed"]].startswith("tests.cli.tui.flows.CardDeclined: card declined")
        assert info[runs["pending"]] == "queued"
        await pilot.press("enter")  # the newest run
        assert isinstance(app.screen, RunScreen)
        assert app.screen.run_id == runs["running"]


async def test_filter_by_status_and_workflow_and_search_by_id(
    engine: Engine, runs: dict[str, str]
) -> None:
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("s")  # running
        assert sorted(column(app, "id")) == sorted([runs["orphan"], runs["running"]])
        await pilot.press("s", "s")  # suspended, then failed
        assert column(app, "id") == [runs["failed"]]
        await pilot.press("x", "f")
        assert isinstance(app.focused, Input)
        await pilot.press(*"ord")
        app.screen.query_one("#workflow", Input).value += "ers.remind"  # typing it all is slow
        await pilot.press("enter")
        assert set(column(app, "workflow")) == {"orders.remind"}
        assert len(column(app, "id")) == 3
        assert isinstance(app.focused, DataTable)
        await pilot.press("s")  # running: no remind run is
        assert column(app, "id") == []
        assert "no runs match" in str(app.screen.query_one("#bar").render())
        await pilot.press("x", "slash")
        # Search by id prefix, typed in lower case: the parent and its child match.
        await pilot.press(*runs["parent"][:6].lower())
        app.screen.query_one("#search", Input).value += runs["parent"][6:-2].lower()
        await pilot.pause()
        assert column(app, "id") == [runs["child"], runs["parent"]]
        await pilot.press("enter", "down", "enter")
        assert isinstance(app.screen, RunScreen) and app.screen.run_id == runs["parent"]


class CountingStore(MemoryStore):
    """Records every ``list_runs`` limit: the screen must never ask for everything."""

    def __init__(self) -> None:
        super().__init__()
        self.limits: list[int] = []

    async def list_runs(self, **kwargs: Any) -> list[RunRecord]:
        self.limits.append(kwargs.get("limit", 50))
        return await super().list_runs(**kwargs)


async def test_pages_are_read_with_before_and_never_load_all() -> None:
    store = CountingStore()
    start = 1_800_000_000.0
    for n in range(2 * PAGE_SIZE + 30):
        record = RunRecord(
            id=fixed_id(start + n, n), workflow="bulk", status=RunStatus.COMPLETED,
            created_at=start + n, updated_at=start + n + 1,
        )  # fmt: skip
        await store.create_run(record)
    app = InspectApp(Engine(store))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert len(column(app, "id")) == PAGE_SIZE
        assert column(app, "id")[0] == fixed_id(start + 2 * PAGE_SIZE + 29, 2 * PAGE_SIZE + 29)
        await pilot.press("]", "]")
        ids = column(app, "id")
        assert len(ids) == 30 and ids[-1] == fixed_id(start, 0)
        assert "page 3: runs 201–230" in str(app.screen.query_one("#bar").render())
        await pilot.press("]")  # no older page: stays
        assert len(column(app, "id")) == 30
        await pilot.press("[")
        assert column(app, "id")[0] == fixed_id(start + PAGE_SIZE + 29, PAGE_SIZE + 29)
    assert store.limits and max(store.limits) == PAGE_SIZE + 1


async def test_a_search_stopped_by_its_bound_says_so_and_searches_further(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The web UI's bounded search (wf.admin.list_runs), with the same words for where it stopped.
    from wf.admin import _read

    monkeypatch.setattr(_read, "SEARCH_BUDGET", 2)
    store = MemoryStore()
    start = 1_800_000_000.0
    ids = [fixed_id(start + n, n) for n in range(5)]
    for n, run_id in enumerate(ids):
        workflow = "needle" if n == 0 else "hay"
        record = RunRecord(
            id=run_id, workflow=workflow, status=RunStatus.COMPLETED,
            created_at=start + n, updated_at=start + n + 1,
        )  # fmt: skip
        await store.create_run(record)
    app = InspectApp(Engine(store))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        # Part of an id (a workflow's name, or a whole id, is found from an index at once).
        part = ids[0][5:15]  # its time: the random parts differ in one character only
        assert not any(part in other for other in ids[1:])
        app.screen.query_one("#search", Input).value = part
        await until(pilot, lambda: "searched" in str(app.screen.query_one("#bar").render()))
        assert column(app, "id") == []
        assert "searched 2 runs · ] search further" in str(app.screen.query_one("#bar").render())
        await pilot.press("escape", "]", "]")  # on from where each search stopped
        await until(pilot, lambda: column(app, "id") == [ids[0]])
        assert "search further" not in str(app.screen.query_one("#bar").render())


async def test_new_runs_appear_without_a_key_press(engine: Engine) -> None:
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert column(app, "id") == []
        run = await engine.start(ship, ("live",), {}, run_id=fixed_id(1_800_000_500.0, 1))
        await until(pilot, lambda: column(app, "id") == [run.id])
        await until(pilot, lambda: column(app, "status") == ["completed"])
        assert isinstance(app.screen, RunsScreen)


async def test_the_footer_shows_the_schedules_key(engine: Engine) -> None:
    from textual.widgets._footer import FooterKey

    from wf.cli.tui._schedules import SchedulesScreen

    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        await until(pilot, lambda: app.screen.query(FooterKey))
        shown = {(key.key, key.description) for key in app.screen.query(FooterKey)}
        assert ("S", "schedules") in shown
        await pilot.press("S")
        await until(pilot, lambda: isinstance(app.screen, SchedulesScreen))


class _OneDamaged(MemoryStore):
    """A store whose listings meet one damaged run (a memory store holds none of its own)."""

    async def list_runs(self, **filters: Any) -> list[RunRecord]:
        self.faults.note("run", "wrun_damaged", "runs/wrun_damaged", "not valid JSON")
        return await super().list_runs(**filters)


async def test_the_bar_says_a_damaged_run_is_not_listed() -> None:
    app = InspectApp(Engine(_OneDamaged()))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "damaged" in str(app.screen.query_one("#bar").render()))
        bar = str(app.screen.query_one("#bar").render())
        assert "1 damaged run not listed (wf store verify)" in bar


class _StrayEntries(MemoryStore):
    """A store whose listings meet one damaged run and three stray index entries."""

    async def list_runs(self, **filters: Any) -> list[RunRecord]:
        self.faults.note("run", "wrun_damaged", "runs/wrun_damaged", "not valid JSON")
        for n in range(3):
            self.faults.note("index entry", f"x{n}", f"index/b/x{n}", "not a wf index entry")
        return await super().list_runs(**filters)


async def test_the_bar_counts_stray_index_entries_apart_from_damaged_runs() -> None:
    """Stray index entries a listing passed over are no damaged runs: the bar said "4
    damaged runs not listed"."""
    app = InspectApp(Engine(_StrayEntries()))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "damaged" in str(app.screen.query_one("#bar").render()))
        bar = str(app.screen.query_one("#bar").render())
        assert "1 damaged run not listed, 3 damaged items passed over (wf store verify)" in bar


class _LateAnswer(LocalAdmin):
    """A client that, once ``armed``, holds the answer of its next listing (read already) until
    ``release`` is set: a response in flight from a slow server while newer ones are quick."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.armed = False
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def list_runs(self, **filters: Any) -> RunPage:
        page = await super().list_runs(**filters)
        if self.armed:
            self.armed = False
            self.held.set()
            await self.release.wait()
        return page


async def test_a_read_that_answers_late_never_covers_a_newer_one(
    engine: Engine, runs: dict[str, str]
) -> None:
    # The live loop reads on its own while keys start reads of their own: a read that began
    # before the filter changed, and answers after, must not draw every run under "running".
    client = _LateAnswer(engine)
    app = InspectApp(client)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: table(app).row_count == len(runs))
        client.armed = True
        await engine.start(ship, ("order-11",), {}, detach=True)  # a change: the live loop reads
        await until(pilot, client.held.is_set)
        await pilot.press("s")  # running
        running = sorted([runs["orphan"], runs["running"]])
        await until(pilot, lambda: sorted(column(app, "id")) == running)
        client.release.set()
        for _ in range(10):
            await pilot.pause(0.02)
        assert sorted(column(app, "id")) == running
        assert "status: running" in str(app.screen.query_one("#status-filter").render())
