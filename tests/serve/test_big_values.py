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

LOCAL = pytest.mark.parametrize("store_kind", ["local"], indirect=True)

SIZE = 3 * 1024 * 1024
SHOWN_VALUE = 64 * 1024  # docs/http.md: each value shown up to 64 KiB of its text


@LOCAL
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


@LOCAL
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


@LOCAL
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


class _Untouchable(list[Any]):
    """A big list that fails the test if anything walks or copies it."""

    def __iter__(self) -> Any:
        raise AssertionError("walked a container far past the bound")


def test_weighing_a_run_stops_at_the_bound_without_copying_a_big_value() -> None:
    """``heavy`` counts a container's length before walking it: a list of a million items is
    heavy at once, never copied nor walked; a small run is not heavy."""
    from wf.admin._read import heavy

    def detail(value: Any) -> Any:
        run = type("R", (), {"input": value, "output": None, "error": None})()
        return type("D", (), {"run": run, "events": []})()

    assert heavy(detail(_Untouchable(range(10**6))))
    assert heavy(detail({"k": [_Untouchable(range(10**6))]}))
    assert heavy(detail({str(i): i for i in range(10**6)}))
    assert not heavy(detail({"a": [1, 2, "x" * 100], "b": {"c": None}}))
    assert heavy(detail(["x" * 1000] * 100))


def test_a_journal_row_keeps_only_what_it_shows_of_a_wide_or_deep_value() -> None:
    """The start of an event kept for its journal row has one budget for the whole value: a
    wide nested list and a huge key are cut to about what the row shows, and its JSON starts
    as the whole value's does."""
    import json

    from wf.serve._html import SHOWN_LINE
    from wf.serve._run_page import _start_of

    wide = [list(range(1999)) for _ in range(1999)]
    key = {"k" * 10**6: 1, "other": 2}
    for value in (wide, key, {"a": "x" * 10**6}, [[["y" * 50] * 100] * 100]):
        start = json.dumps(_start_of(value), ensure_ascii=False)
        whole = json.dumps(value, ensure_ascii=False)
        assert len(start) < 4 * SHOWN_LINE
        assert start[:SHOWN_LINE] == whole[:SHOWN_LINE]
    small = {"a": [1, 2, {"b": "c"}], "d": "e"}
    assert _start_of(small) == small


@LOCAL
async def test_the_run_pages_links_to_a_whole_error_and_schema(api: Api) -> None:
    """A failed run's error, cut, links to the run's detail (which carries the record's
    error, whatever the run's end); a hook's big schema links to the hooks API."""
    run_id = await api.start("fails_big", SIZE)
    ended = await api.result(run_id)
    assert ended["status"] == "failed", str(ended)[:300]
    text = (await api.client.get(f"/runs/{run_id}")).text
    assert "cut:" in text
    assert f"/api/v1/runs/{run_id}/result" not in text, "a failed run's error only"
    assert f'/api/v1/runs/{run_id}/events"' not in text
    assert f"GET /api/v1/runs/{run_id}?events=false" in text
    # A hook whose payload schema is cut links to the hooks API, which carries it whole.
    waiting = await api.start("waits_wide", "wide-hook")
    await api.until(waiting, lambda d: d["hooks"])
    page = (await api.client.get(f"/runs/{waiting}")).text
    schema = page[page.index("payload schema") :]
    assert "cut:" in schema
    assert f"GET /api/v1/hooks?run={waiting}" in schema


@LOCAL
async def test_a_long_step_error_in_the_steps_table_says_it_is_cut(api: Api) -> None:
    """The steps table shows a step's error at most 2,000 characters, then ``…``."""
    run_id = await api.start("failing", "y" * 3000)
    assert (await api.result(run_id))["status"] == "failed"
    text = (await api.client.get(f"/runs/{run_id}")).text
    shown = "ValueError: " + "y" * (2000 - len("ValueError: "))
    assert shown + "…<" in text  # the cell
