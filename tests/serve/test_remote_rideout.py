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
