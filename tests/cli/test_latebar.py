"""The progress bar of long store operations: on a terminal, after a delay, never otherwise."""

from __future__ import annotations

import io
from pathlib import Path

from tests.store.helpers import created, save
from wf.cli._latebar import LateBar
from wf.store import RunStatus
from wf.store.local import LocalStore


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_the_bar_shows_on_a_terminal_once_the_delay_has_passed() -> None:
    out = Terminal()
    with LateBar("verify: runs checked", stream=out, delay=0.0) as bar:
        bar(3, 10)
        bar(10, 10)
    assert "verify: runs checked" in out.getvalue()


def test_the_bar_stays_away_from_a_pipe_and_from_quick_operations() -> None:
    pipe, quick = io.StringIO(), Terminal()
    with LateBar("gc", stream=pipe, delay=0.0) as bar:
        bar(1, 2)
    with LateBar("gc", stream=quick, delay=3600.0) as bar:
        bar(1, 2)
    assert pipe.getvalue() == "" and quick.getvalue() == ""


async def test_verify_reports_its_progress_up_to_every_run(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / ".workflows")
    for _ in range(3):
        await save(store, await created(store), RunStatus.COMPLETED)
    seen: list[tuple[int, int]] = []
    assert await store.verify(on_progress=lambda done, total: seen.append((done, total))) == []
    assert seen[-1] == (3, 3) and all(done <= total for done, total in seen)
    await store.close()


async def test_gc_reports_the_finished_runs_it_looked_at(tmp_path: Path) -> None:
    from wf.admin import local

    store = LocalStore(tmp_path / ".workflows")
    for _ in range(3):
        await save(store, await created(store), RunStatus.COMPLETED)
    await created(store)  # pending: neither looked at nor counted
    seen: list[tuple[int, int]] = []
    async with local(store) as client:
        await client.gc(older_than="1s", dry_run=True, on_progress=lambda *p: seen.append(p))
    assert seen[-1] == (3, 3)
    await store.close()
