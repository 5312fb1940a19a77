"""A run with a big value (a step's result of megabytes) cannot hold up ``wf serve``: its page
shows each value cut at ``SHOWN_VALUE``, and the page and the API's detail are built off the
event loop while other requests are answered. Recorded text on the run page shows its control
and bidi characters escaped, as the header does."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.serve.conftest import Api

pytestmark = pytest.mark.parametrize("store_kind", ["local"], indirect=True)

SIZE = 3 * 1024 * 1024
SHOWN_VALUE = 64 * 1024  # docs/http.md: each value shown up to 64 KiB of its text


async def test_a_big_value_is_cut_on_the_run_page_and_said_so(api: Api) -> None:
    run_id = await api.start("big_output", SIZE)
    assert (await api.result(run_id))["status"] == "completed"
    answer = await api.client.get(f"/runs/{run_id}")
    assert answer.status_code == 200
    # The output and the step's result, each cut: the page is bounded, far below one copy.
    assert len(answer.content) < 4 * SHOWN_VALUE + 200_000
    assert answer.text.count("x" * 1000) >= 2  # the start of each value is shown
    assert f"cut: {SIZE + 2:,} bytes" in answer.text  # the JSON text, quotes included
    assert f"/api/v1/runs/{run_id}/result" in answer.text
    assert f"/api/v1/runs/{run_id}/events?start=" in answer.text
    # A small value is shown whole, with no note.
    small = await api.start("adder", [1, 2])
    await api.result(small)
    assert "cut:" not in (await api.client.get(f"/runs/{small}")).text


@pytest.mark.parametrize("path", ["/runs/{id}", "/api/v1/runs/{id}"])
async def test_a_big_runs_page_is_built_while_other_requests_are_answered(
    api: Api, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A run with a big value (and a short journal) has its page or detail built in a thread:
    held there, the server answers a small request meanwhile."""
    from wf import admin
    from wf.serve import _run_page

    big = await api.start("big_output", SIZE)
    await api.result(big)
    small = await api.start("adder", [1, 2])
    await api.result(small)

    entered, release = threading.Event(), threading.Event()
    released: list[bool] = []

    def held(real: Any) -> Any:
        def build(detail: Any, *args: Any, **kwargs: Any) -> Any:
            if detail.run.id == big:
                entered.set()
                # On the loop, nothing else is answered until this gives up: bounded.
                released.append(release.wait(5))
            return real(detail, *args, **kwargs)

        return build

    if path.startswith("/runs"):
        monkeypatch.setattr(_run_page, "run_body", held(_run_page.run_body))
    else:
        monkeypatch.setattr(admin, "http_detail_json", held(admin.http_detail_json))
    page = asyncio.ensure_future(api.client.get(path.format(id=big)))
    assert await asyncio.to_thread(entered.wait, 10)
    other = await api.client.get(f"/api/v1/runs/{small}")
    release.set()
    assert other.status_code == 200 and other.json()["output"] == 3
    assert (await page).status_code == 200
    assert released[0] is True  # the small request was answered while the page was held


async def test_the_run_page_shows_recorded_names_escaped(api: Api) -> None:
    """A workflow's and a step's names with a right-to-left override show it as ``\\u202e``
    everywhere on the run page (journal rows and their tooltips, steps, timeline, results), as
    the header does; never the raw character."""
    run_id = await api.start("bidi_names", "t\u202ext\x1b[31m")
    await api.result(run_id)
    text = (await api.client.get(f"/runs/{run_id}")).text
    assert "flow\\u202edrow" in text and "step\\u202eevil" in text
    assert "said t\\u202ext\\x1b[31m" in text  # its log line
    assert "\u202e" not in text
    assert "\x1b" not in text
