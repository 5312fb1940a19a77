"""Following a run as it grows (``wf.admin._follow.Follower``: what ``wf run``'s live view is
fed; ``Run.watch()``): every event reaches the reader once, in order, and is read from the
store once.

Before, each refresh read the whole journal again, on every change of a run driven in the same
process: a 30,000-step ``wf run`` slowed to 20 ms a step and did not finish in ten minutes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import wf
from wf.admin._follow import Follower
from wf.engine._current import use_engine
from wf.store import RunRecord
from wf.store.local import LocalStore

STEPS = 300


@wf.step
async def add(x: int) -> int:
    return x + 1


@wf.workflow(name="follow:long")
async def long(n: int) -> int:
    x = 0
    for _ in range(n):
        x = await add(x)
    return x


class View:
    def __init__(self) -> None:
        self.new: list[dict[str, Any]] = []
        self.journal: list[dict[str, Any]] = []

    def update(
        self, record: RunRecord, journal: list[dict[str, Any]], new: list[dict[str, Any]]
    ) -> None:
        self.new += new
        self.journal = list(journal)


class Counted:
    """A local store whose ``read_journal`` calls are counted (``read``: the events each
    returned); ``real`` reads without counting."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store = LocalStore(tmp_path / ".workflows")
        self.real = self.store.read_journal
        self.read: list[int] = []

        async def counted(run_id: str, start: int = 0) -> list[dict[str, Any]]:
            found = await self.real(run_id, start)
            self.read.append(len(found))
            return found

        monkeypatch.setattr(self.store, "read_journal", counted)


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Counted:
    return Counted(tmp_path, monkeypatch)


@pytest.mark.timeout(60)
async def test_a_follower_reads_each_event_once_while_the_run_grows(counted: Counted) -> None:
    store, real, read = counted.store, counted.real, counted.read
    async with wf.Engine(store) as engine:
        with use_engine(engine):
            run = await wf.start(long, STEPS)  # driven by this process, as `wf run` does
            view = View()
            await asyncio.wait_for(Follower(store, run.id, view).follow(poll=0.05), 30)
            assert await run.result() == STEPS
    journal = await real(run.id)
    assert len(journal) > 2 * STEPS
    assert view.new == journal == view.journal  # every event once, in order
    assert sum(read) == len(journal)  # and each read from the store once
    assert len(read) > 1  # followed as it grew, not read once at the end


@pytest.mark.timeout(60)
async def test_watching_a_run_reads_each_event_once(counted: Counted) -> None:
    store, real, read = counted.store, counted.real, counted.read
    async with wf.Engine(store) as engine:
        with use_engine(engine):
            run = await wf.start(long, STEPS)
            kinds = [event.kind async for event in run.watch()]
    assert kinds[-1] == "completed"
    assert sum(read) <= len(await real(run.id))  # each read once (the outcome ends the watch)
    assert len(read) > 1
