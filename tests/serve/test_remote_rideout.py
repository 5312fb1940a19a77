"""Requests and follows over ``WF_URL`` cut by a restart after the server applied them
(``tests/serve/cutting_proxy.py`` in front of a real ``wf serve``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

import wf
import wf._remote
from tests.serve.conftest import Served, env_for, free_port, spawn_server, stop
from tests.serve.cutting_proxy import CuttingProxy
from wf._exceptions import ServerUnavailable
from wf._remote import configure_remote

FLOWS = "tests.serve.rideout_flows"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    running = spawn_server(env_for(tmp_path_factory.mktemp("rideout")))
    try:
        yield running
    finally:
        stop(running)


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    lines: list[str] = []
    monkeypatch.setattr(wf._remote, "say_outage", lines.append)
    return lines


@pytest.fixture
async def proxy(served: Served) -> AsyncIterator[CuttingProxy]:
    front = CuttingProxy(served.url, free_port())
    await front.listen()
    wf.configure(url=front.url)
    try:
        yield front
    finally:
        configure_remote(None)
        await front.close()


def _detail(served: Served, run_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(
        f"{served.url}/api/v1/runs/{run_id}", params={"events": "false"}, timeout=30
    ).json()
    return answer


async def _start(served: Served, run_id: str, target: str, **body: Any) -> None:
    made = await asyncio.to_thread(
        httpx.post,
        f"{served.url}/api/v1/runs",
        json={"target": f"{FLOWS}:{target}", "id": run_id, **body},
        timeout=30,  # the first start imports the flows: seconds on a loaded machine
    )
    assert made.status_code == 201, made.text


async def _until(served: Served, run_id: str, status: str) -> None:
    deadline = time.monotonic() + 30
    while (found := await asyncio.to_thread(_detail, served, run_id))["status"] != status:
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("how", ["run.wake_up", "admin.wake"])
async def test_a_wake_up_cut_by_a_restart_is_not_sent_again(
    served: Served, proxy: CuttingProxy, said: list[str], how: str
) -> None:
    """A wake-up ends the run's current sleeps: sent again after it was applied, it ended
    the next sleep too. It fails as other requests not safe to send twice do."""
    run_id = f"wake-{how}"
    await _start(served, run_id, "two_sleeps")
    await _until(served, run_id, "suspended")
    await wf.get_run(run_id).record()  # the server was reached
    proxy.cut(f"POST /api/v1/runs/{run_id}/wake", 1.0)
    with pytest.raises(ServerUnavailable, match="may have been done already"):
        if how == "run.wake_up":
            await wf.get_run(run_id).wake_up()
        else:
            async with wf.admin.connect() as admin:
                await admin.wake(run_id)
    await asyncio.sleep(2.0)  # a second wake-up would have reached the server by now
    detail = await asyncio.to_thread(_detail, served, run_id)
    assert detail["status"] == "suspended", detail  # in its second sleep
    assert [line for line in proxy.log if line.startswith("POST")] == [
        f"POST /api/v1/runs/{run_id}/wake?wait=false"
    ], proxy.log


async def test_a_watch_across_a_restart_the_run_ended_in_tells_the_outage_s_events(
    served: Served, proxy: CuttingProxy, said: list[str]
) -> None:
    """The run ends while the server is down: the reopened watch tells the events the run
    recorded meanwhile before the terminal one (it told the terminal one alone)."""
    await _start(served, "skip-1", "ticks", input=8)
    kinds: list[str] = []
    async for event in wf.get_run("skip-1").watch():
        kinds.append(event.kind)
        if kinds.count("progress") == 1:
            proxy.bounce_soon(4.0)  # down while the other 7 steps run (0.3 s each)
    assert kinds.count("progress") == 8, kinds
    assert kinds[-1] == "completed", kinds
    assert "answers again" in said[-1], said


async def test_a_quiet_watch_rides_out_a_second_restart(
    served: Served, proxy: CuttingProxy, said: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that tells no event (delayed): the server answering again resets the ride-out,
    so a second restart later than ``RIDE_OUT`` after the first is ridden out too (it
    raised at once)."""
    monkeypatch.setattr(wf._remote, "RIDE_OUT", 2.0)
    await _start(served, "quiet-1", "ticks", input=1, options={"delay": 3600})

    async def restarts() -> None:
        await asyncio.sleep(0.5)
        await proxy.bounce(0.5)
        await asyncio.sleep(3.0)  # answering, longer than RIDE_OUT
        await proxy.bounce(0.5)
        await asyncio.sleep(1.5)
        cancelled = await asyncio.to_thread(
            httpx.post, f"{served.url}/api/v1/runs/quiet-1/cancel", timeout=30
        )
        assert cancelled.status_code == 200, cancelled.text

    restarting = asyncio.create_task(restarts())
    kinds = [event.kind async for event in wf.get_run("quiet-1").watch()]
    await restarting
    assert kinds[-1] == "cancelled", kinds
    assert sum("answers again" in line for line in said) == 2, said


def test_a_cli_call_puts_the_ride_out_s_lines_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI says a ride-out on its stderr for its own call only: a program's follows after
    an in-process ``wf`` call log ``wf.remote`` warnings again (they went to stderr)."""
    from wf.cli._app import run_app

    monkeypatch.setenv("WF_URL", f"http://127.0.0.1:{free_port()}")
    # As a program finds it (an earlier test in this worker may have called the CLI otherwise).
    monkeypatch.setattr(wf._remote, "say_outage", None)
    assert run_app(["runs"]) == 3  # nobody answers
    assert wf._remote.say_outage is None


@pytest.mark.parametrize("how", ["run.cancel", "admin.cancel", "admin.remove_schedule"])
async def test_a_request_sent_again_after_it_was_done_says_it_was_done(
    served: Served, proxy: CuttingProxy, said: list[str], how: str
) -> None:
    """Applied, cut, and sent again after the restart, a cancel or a schedule's removal
    answers that nothing was left to do: the first send did it (it answered "had already
    ended" and "no schedule")."""
    run_id = f"again-{how}"
    await _start(served, run_id, "two_sleeps")
    await _until(served, run_id, "suspended")
    async with wf.admin.connect() as admin:
        if how == "run.cancel":
            proxy.cut(f"POST /api/v1/runs/{run_id}/cancel", 1.0)
            assert await wf.get_run(run_id).cancel() is True
        elif how == "admin.cancel":
            proxy.cut(f"POST /api/v1/runs/{run_id}/cancel", 1.0)
            [result] = await admin.cancel(run_id)
            assert result.sent, result
            assert result.status == "cancelled", result
        else:
            await admin.set_schedule(run_id, f"{FLOWS}:ticks", input=1, cron="0 * * * *")
            proxy.cut(f"DELETE /api/v1/schedules/{run_id}", 1.0)
            assert await admin.remove_schedule(run_id) is True
    assert any("was sent again after a restart; it had been done" in line for line in said), said
