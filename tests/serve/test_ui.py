"""The web UI's pages and forms through httpx (the browser tests are in test_browser.py)."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import Api
from tests.store.helpers import damage_local_run, damage_local_schedule

pytestmark = pytest.mark.parametrize("store_kind", ["local"], indirect=True)


async def _page_with(api: Api, text: str, **query: str) -> str:
    """The runs page once it shows ``text`` (the local store's status index is updated just
    after a run's record)."""
    for _ in range(100):
        page: str = (await api.client.get("/", params=query)).text
        if text in page:
            return page
        await asyncio.sleep(0.1)
    raise AssertionError(f"{text} never listed with {query}")


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, "no CSRF field"
    return match[1]


async def test_the_runs_page_lists_filters_and_escapes(api: Api) -> None:
    done = await api.start("adder", [1, 2])
    failed = await api.start("failing", "<script>alert(1)</script>")
    await api.result(done)
    await api.result(failed)
    page = (await api.client.get("/")).text
    assert done in page and failed in page
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page
    only_failed = await _page_with(api, failed, status="failed")  # the index lags a little
    assert done not in only_failed
    searched = (await api.client.get("/", params={"q": "adder"})).text
    assert done in searched and failed not in searched
    # ``search``, the API's name for it, searches too (it was silently ignored).
    aliased = (await api.client.get("/", params={"search": "adder"})).text
    assert done in aliased and failed not in aliased
    bad = await api.client.get("/", params={"status": "sleepy"})
    assert bad.status_code == 400
    assert "content-security-policy" in bad.headers


async def test_the_runs_page_says_what_wf_runs_says_of_a_delayed_run(api: Api) -> None:
    from wf.admin._words import run_info

    run_id = await api.start("adder", [1, 2], options={"delay": 3600})
    record = await api.engine.store.get_run(run_id)
    page = await _page_with(api, run_id)
    assert run_info(record).startswith("due ")
    # The same words, the moment a <time> the script shows in the reader's local time (as the
    # created column), not the server's local time: the reader's zone may be another.
    from wf.admin._words import iso_time
    from wf.serve._html import when

    assert record.wake_at is not None
    assert f"due {when(record.wake_at)}</td>" in page
    assert f'title="due {iso_time(record.wake_at)}"' in page


async def test_the_run_page_shows_an_output_validation_error(api: Api) -> None:
    run_id = await api.start("wrong_output")
    await api.result(run_id)
    page = (await api.client.get(f"/runs/{run_id}")).text
    assert (
        '<li class="why error">Failed with error wf.OutputValidationError: output of workflow '
        "&#x27;tests.serve.flows:wrong_output&#x27;: Input should be a valid integer, unable to "
        "parse string as an integer (got &#x27;&lt;nope&gt;&#x27;)</li>"
    ) in page
    assert "<nope>" not in page  # the value is escaped everywhere


async def test_the_run_page_shows_the_timeline_with_retries(api: Api) -> None:
    run_id = await api.start("failing", "boom")
    await api.result(run_id)
    page = (await api.client.get(f"/runs/{run_id}")).text
    assert 'class="timeline"' in page
    assert page.count('class="bar warn" style=') == 1  # the first attempt, retried
    assert page.count('class="bar bad" style=') == 1  # the last one, failed
    assert 'class="bar gap" style=' in page  # the backoff between them
    assert "Retry" in page and "Cancel" not in page
    missing = await api.client.get("/runs/wrun_00000000000000000000000000")
    assert missing.status_code == 404


async def test_a_long_runs_page_shows_its_latest_operations_and_says_so(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf.serve import _run_page

    # A run of 30,000 steps made a 48 MB page: the page shows the latest, and says where the
    # rest is (here 4 operations of 12, 6 events of 26).
    monkeypatch.setattr(_run_page, "SHOWN_OPERATIONS", 4)
    monkeypatch.setattr(_run_page, "SHOWN_EVENTS", 6)
    run_id = await api.start("counter", 12)
    assert (await api.result(run_id))["output"] == sum(range(12))
    page = (await api.client.get(f"/runs/{run_id}")).text
    assert page.count('class="tl-row"') == 4
    assert "<td class='num'>11</td><td>step</td>" in page  # the last operation is shown
    assert "<td class='num'>7</td><td>step</td>" not in page  # the fifth from last is not
    assert "The latest 4 of 12 operations" in page
    assert "The latest 4 of 12 step results" in page
    assert re.search(r"The latest 6 of \d+ events", page)
    assert f"wf inspect {run_id} --json" in page
    # Each note links where the rest is: the journal paged, the operations in the detail.
    assert f"<a href='/api/v1/runs/{run_id}/events'>" in page
    assert f"<a href='/api/v1/runs/{run_id}?events=false'>" in page


async def test_actions_need_the_csrf_token(api: Api) -> None:
    run_id = await api.start("sleeper", 3600)
    await api.until(run_id, lambda d: d["status"] == "suspended")
    page = (await api.client.get(f"/runs/{run_id}")).text
    forged = await api.client.post(f"/runs/{run_id}/cancel", data={"csrf": "0" * 64})
    assert forged.status_code == 403
    assert (await api.client.get(f"/api/v1/runs/{run_id}")).json()["status"] == "suspended"
    cancelled = await api.client.post(f"/runs/{run_id}/cancel", data={"csrf": _csrf(page)})
    assert cancelled.status_code == 303
    assert "Cancellation+requested" in cancelled.headers["location"]
    await api.until(run_id, lambda d: d["status"] == "cancelled")
    unknown = await api.client.post(f"/runs/{run_id}/explode", data={"csrf": _csrf(page)})
    assert unknown.status_code == 404


async def test_the_hook_form_delivers_a_payload_or_says_why_not(api: Api) -> None:
    run_id = await api.start("approval", "form")
    await api.until(run_id, lambda d: d["hooks"])
    page = (await api.client.get(f"/runs/{run_id}")).text
    assert 'action="/hooks/approve%3Aform/resume"' in page  # the token, percent-encoded
    assert "&quot;approved&quot;" in page  # the payload schema, for the script to check
    csrf = _csrf(page)
    url = "/hooks/approve:form/resume"
    not_json = await api.client.post(url, data={"csrf": csrf, "run": run_id, "payload": "{"})
    assert "not+JSON" in not_json.headers["location"]
    too_deep = await api.client.post(
        url, data={"csrf": csrf, "run": run_id, "payload": "[" * 3000}
    )  # deeper than the parser goes: said on the page, as any payload that is not JSON
    assert too_deep.status_code == 303 and "not+JSON" in too_deep.headers["location"]
    invalid = await api.client.post(
        url, data={"csrf": csrf, "run": run_id, "payload": '{"approved": "maybe"}'}
    )
    shown = (await api.client.get(invalid.headers["location"])).text
    assert 'class="flash bad"' in shown and "approved" in shown
    sent = await api.client.post(
        url, data={"csrf": csrf, "run": run_id, "payload": '{"approved": true, "by": "web"}'}
    )
    assert "Payload+sent" in sent.headers["location"]
    assert (await api.result(run_id))["output"] == "approved by web"


async def test_static_files_and_a_missing_one(api: Api) -> None:
    css = await api.client.get("/static/app.css")
    assert css.headers["content-type"].startswith("text/css")
    js = await api.client.get("/static/app.js")
    assert "EventSource" in js.text
    assert (await api.client.get("/static/../../etc/passwd")).status_code == 404
    assert (await api.client.get("/static/other.js")).status_code == 404


async def test_the_run_page_shows_what_its_steps_printed_and_logged(api: Api) -> None:
    run_id = await api.start("talker", "ada")
    assert (await api.result(run_id))["output"] == "ada"
    page = (await api.client.get(f"/runs/{run_id}")).text
    logs = page[page.index('id="live-logs"') :]
    assert "chatty" in logs and "attempt 1" in logs
    assert "hello ada from a step" in logs
    assert "[stderr]</span> &lt;b&gt;not markup&lt;/b&gt;" in logs  # escaped, marked
    assert "[WARNING tests.serve]</span> careful, ada" in logs
    quiet = await api.start("adder", [1, 2])
    await api.result(quiet)
    assert "printed and logged nothing" in (await api.client.get(f"/runs/{quiet}")).text


async def test_the_queues_page_counts_due_runs_nobody_drives(store: Any) -> None:
    import httpx

    from wf import Engine
    from wf.serve import create_app

    app = create_app(Engine(store), drive=False)  # nothing drives: runs stay queued
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            empty = (await client.get("/queues")).text
            assert "Nothing is waiting" in empty
            assert '<a class="on" href="/queues">Queues</a>' in empty
            for flow, group in (("adder", None), ("adder", None), ("sleeper", "tenant-1")):
                body: dict[str, Any] = {
                    "target": f"tests.serve.flows:{flow}",
                    "input": [1, 2] if flow == "adder" else [1.0],
                }
                if group:
                    body["options"] = {"group": group}
                response = await client.post("/api/v1/runs", json=body)
                assert response.status_code == 201, response.text
            page = (await client.get("/queues")).text
    rows = dict(re.findall(r'data-workflow="([^"]+)" data-group="([^"]*)"', page))
    assert rows == {"tests.serve.flows:adder": "", "tests.serve.flows:sleeper": "tenant-1"}
    depths = re.findall(r'<td class="num depth">(\d+)</td>', page)
    assert depths == ["2", "1"]
    assert 'href="/?workflow=tests.serve.flows%3Aadder"' in page


async def test_the_schedules_page_lists_schedules(api: Api) -> None:
    import wf
    from tests.serve import flows
    from wf.engine._current import use_engine

    assert "No schedules" in (await api.client.get("/schedules")).text
    with use_engine(api.engine):
        await wf.schedule("nightly:adder", flows.adder, cron="0 3 * * *", input=[1, 2], tz="UTC")
    page = (await api.client.get("/schedules")).text
    assert 'data-id="nightly:adder"' in page
    assert "tests.serve.flows:adder" in page and "0 3 * * *" in page
    assert '<a class="on" href="/schedules">Schedules</a>' in page
    assert re.search(r"data-zoned [^>]*>\d{4}-\d\d-\d\d 03:00 UTC</time>", page)
    # A series that ended, as a worker leaves it: no next fire, listed as ended.
    from wf.store import Schedule

    ended = Schedule(
        "once", "tests.serve.flows:adder", "0 9 1 6 * 0 2020", tz="Europe/Paris", ended=True
    )
    ended.last_fire_at = 1_590_994_800.0  # 2020-06-01 07:00 UTC
    await api.engine.store.save_schedule(ended)
    page = (await api.client.get("/schedules")).text
    row = page[page.index('data-id="once"') :].split("</tr>")[0]
    assert '<span class="dim ended">ended</span>' in row
    assert ">2020-06-01 09:00 CEST</time>" in row


async def test_the_schedules_page_pauses_and_resumes_a_schedule(api: Api) -> None:
    import wf
    from tests.serve import flows
    from wf.engine._current import use_engine

    with use_engine(api.engine):
        await wf.schedule("nightly:adder", flows.adder, cron="0 3 * * *", input=[1, 2])
    page = (await api.client.get("/schedules")).text
    path = "/schedules/nightly%3Aadder/pause"
    assert f'action="{path}"' in page
    forged = await api.client.post(path, data={"csrf": "0" * 64})
    assert forged.status_code == 403
    paused = await api.client.post(path, data={"csrf": _csrf(page)})
    assert (paused.status_code, paused.headers["location"]) == (303, "/schedules")
    page = (await api.client.get("/schedules")).text
    row = page[page.index('data-id="nightly:adder"') :].split("</tr>")[0]
    assert '<span class="dim paused">paused</span>' in row
    assert 'action="/schedules/nightly%3Aadder/resume"' in row
    [state] = await api.engine.store.list_schedules()
    assert (state.paused, state.next_run) == (True, None)
    resumed = await api.client.post("/schedules/nightly%3Aadder/resume", data={"csrf": _csrf(page)})
    assert resumed.status_code == 303
    [state] = await api.engine.store.list_schedules()
    assert not state.paused and state.next_run is not None
    unknown = await api.client.post(
        "/schedules/nightly%3Aadder/explode", data={"csrf": _csrf(page)}
    )
    assert unknown.status_code == 404


async def test_the_schedules_page_names_a_damaged_schedule_and_lists_the_others(
    api: Api,
) -> None:
    import wf
    from tests.serve import flows
    from wf.engine._current import use_engine

    with use_engine(api.engine):
        for schedule_id in ("broken", "nightly"):
            await wf.schedule(schedule_id, flows.adder, cron="0 3 * * *", input=[1, 2])
    damage_local_schedule(api.engine.store, "broken")
    page = await api.client.get("/schedules")
    assert page.status_code == 200
    assert 'data-id="nightly"' in page.text and 'data-id="broken"' not in page.text
    assert "Left out of this page: 1 damaged schedule," in page.text
    name = os.path.basename(api.engine.store.schedule_location("broken"))
    assert f'<span class="mono">{name}</span>' in page.text
    listed = (await api.client.get("/api/v1/schedules")).json()
    assert [row["id"] for row in listed["schedules"]] == ["nightly"]
    assert [(f["kind"], f["item"]) for f in listed["damaged"]] == [("schedule file", name)]


async def test_a_search_stopped_by_its_bound_offers_to_search_further(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf.admin import _read

    monkeypatch.setattr(_read, "SEARCH_BUDGET", 2)
    ids = [await api.start("adder", {"a": i, "b": 0}) for i in range(4)]
    page = (await api.client.get("/", params={"q": "nomatch"})).text
    assert "Searched 2 runs." in page and "Search further »" in page
    assert f"before={ids[2]}" in page and "Older »" not in page
    plain = (await api.client.get("/")).text
    assert "Search further" not in plain


async def test_the_runs_page_lists_the_others_and_names_a_damaged_run(api: Api) -> None:
    ids = [await api.start("adder", [n, 1]) for n in range(2)]
    for run_id in ids:
        await api.result(run_id)
    damage_local_run(api.engine.store, ids[0])
    page = await api.client.get("/")
    assert page.status_code == 200
    assert ids[1] in page.text
    assert "Left out of this page: 1 damaged run" in page.text
    assert f'<span class="mono">{ids[0]}</span>' in page.text
    listed = (await api.client.get("/api/v1/runs")).json()
    assert [r["id"] for r in listed["runs"]] == [ids[1]]
    assert [(f["kind"], f["item"]) for f in listed["damaged"]] == [("run", ids[0])]
    # What the pages met is theirs to say: the server's worker takes none of it as its own.
    assert ids[0] not in api.engine.store.faults.of_kind("run")


async def test_a_damaged_runs_own_page_and_api_say_so_and_the_server_goes_on(api: Api) -> None:
    ids = [await api.start("adder", [n, 1]) for n in range(2)]
    for run_id in ids:
        await api.result(run_id)
    damage_local_run(api.engine.store, ids[0])
    page = await api.client.get(f"/runs/{ids[0]}")
    assert page.status_code == 500
    assert "This run cannot be read:" in page.text and "wf store verify" in page.text
    answer = await api.client.get(f"/api/v1/runs/{ids[0]}")
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert error["type"] == "store_damaged" and ids[0] in error["message"]
    assert (await api.client.get(f"/api/v1/runs/{ids[1]}")).status_code == 200
    # Only its step logs damaged: the run's page still shows.
    logs = Path(api.engine.store.run_location(ids[1])) / "logs.jsonl"
    logs.unlink(missing_ok=True)
    os.mkfifo(logs)
    shown = await api.client.get(f"/runs/{ids[1]}")
    assert shown.status_code == 200 and ids[1] in shown.text


async def test_a_long_runs_detail_is_worked_out_off_the_loop_and_is_the_same(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``OFF_LOOP_EVENTS`` journal events a run's detail is analysed, laid out and encoded
    in a thread (a 30,000-step run's took 0.7 s of the server's loop): the same answer."""
    from wf.admin import _read

    run_id = await api.start("counter", 12)
    await api.result(run_id)
    on_loop = (await api.client.get(f"/api/v1/runs/{run_id}")).json()
    page_on_loop = (await api.client.get(f"/runs/{run_id}")).text
    monkeypatch.setattr(_read, "OFF_LOOP_EVENTS", 0)
    off_loop = (await api.client.get(f"/api/v1/runs/{run_id}")).json()
    assert off_loop == on_loop and len(on_loop["steps"]) == 12
    assert (await api.client.get(f"/runs/{run_id}")).text == page_on_loop


# --------------------------------------------------------------------------------------------
# Names a workflow chose (hook tokens, stream names) in the page's URLs: where a browser goes.


def _followed(page_path: str, link: str) -> str:
    """The path (and query) a browser requests for ``link`` (an attribute's HTML text) on the
    page at ``page_path``: unescaped, resolved (dot segments too), its fragment dropped."""
    import html
    import urllib.parse

    from tests.serve.conftest import BASE

    absolute = urllib.parse.urljoin(BASE + page_path, html.unescape(link))
    parts = urllib.parse.urlsplit(urllib.parse.urldefrag(absolute).url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


async def _hook_form(api: Api, run_id: str) -> tuple[str, str]:
    """The hook form's action on the run's page, and its CSRF token."""
    await api.until(run_id, lambda d: d["hooks"])
    page = (await api.client.get(f"/runs/{run_id}")).text
    actions = re.findall(r'<form class="hook" method="post" action="([^"]*)"', page)
    assert len(actions) == 1, actions
    return actions[0], _csrf(page)


async def test_a_hook_token_cannot_aim_the_hook_form_at_another_run(api: Api) -> None:
    victim = await api.start("waits_on", "victim-hook")
    evil = await api.start("waits_on", f"../runs/{victim}/cancel#x")
    action, csrf = await _hook_form(api, evil)
    posted = await api.client.post(
        _followed(f"/runs/{evil}", action),
        data={"csrf": csrf, "run": evil, "payload": '{"ok": true}'},
    )
    assert posted.status_code == 303, posted.text
    assert (await api.result(evil))["output"] == {"ok": True}
    victim_run = (await api.client.get(f"/api/v1/runs/{victim}")).json()
    assert victim_run["status"] == "suspended"


@pytest.mark.parametrize("token", ["a/b", "what?x=1", "frag#ment", "100%25 sure", "é <b>"])
async def test_the_hook_form_reaches_a_hook_whatever_its_token(api: Api, token: str) -> None:
    run_id = await api.start("waits_on", token)
    action, csrf = await _hook_form(api, run_id)
    page_path = f"/runs/{run_id}"
    posted = await api.client.post(
        _followed(page_path, action), data={"csrf": csrf, "run": run_id, "payload": '{"n": 1}'}
    )
    assert posted.status_code == 303, posted.text
    assert "err=" not in posted.headers["location"], posted.headers["location"]
    assert (await api.result(run_id))["output"] == {"n": 1}


async def test_a_webhooks_address_on_the_run_page_reaches_it(api: Api) -> None:
    from wf.engine._webhooks import webhook_path

    run_id = await api.start("page_webhook", {"token": "a/b?c#d", "headers": {}})
    await api.until(run_id, lambda d: d["hooks"])
    page = (await api.client.get(f"/runs/{run_id}")).text
    shown = re.search(r"webhook · POST (/webhooks/\S+)</p>", page)
    assert shown is not None and shown[1] == webhook_path("a/b?c#d")
    reply = await api.client.post(_followed(f"/runs/{run_id}", shown[1]), json={})
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize("name", ["s?q=1#frag", "a/../../b", "100% <b>&", "..x/./y"])
async def test_a_streams_viewer_reads_its_own_stream_whatever_its_name(api: Api, name: str) -> None:
    run_id = await api.start("writes_stream", name)
    await api.result(run_id)
    page = (await api.client.get(f"/runs/{run_id}")).text
    sources = re.findall(r'<div class="stream" data-src="([^"]*)"', page)
    assert len(sources) == 1, sources
    # As static/app.js reads it: the source with its query appended.
    read = await api.client.get(_followed(f"/runs/{run_id}", sources[0] + "?start=0&follow=false"))
    assert read.status_code == 200, read.text
    assert read.content == f"in {name}".encode()


async def test_uvicorn_decodes_an_encoded_token_for_the_hook_forms_route(live: Api) -> None:
    """What the ASGI transport does above, a real server does too: ``%2F``, ``%23``, ``%3F``
    and ``%25`` in the hook form's action arrive as the token's own characters."""
    token = "a/b?c#d%e"
    run_id = await live.start("waits_on", token)
    action, csrf = await _hook_form(live, run_id)
    posted = await live.client.post(
        _followed(f"/runs/{run_id}", action),
        data={"csrf": csrf, "run": run_id, "payload": '{"n": 2}'},
    )
    assert posted.status_code == 303 and "err=" not in posted.headers["location"]
    assert (await live.result(run_id))["output"] == {"n": 2}


async def test_the_run_page_shows_only_the_messages_its_own_forms_redirect_with(
    api: Api,
) -> None:
    run_id = await api.start("sleeper", 3600)
    other = await api.start("sleeper", 3600)
    await api.until(run_id, lambda d: d["status"] == "suspended")
    lure = "Your session expired: sign in again at https://evil.example"
    for key in ("msg", "err"):
        page = (await api.client.get(f"/runs/{run_id}", params={key: lure})).text
        assert "evil.example" not in page and 'class="flash' not in page
    page = (await api.client.get(f"/runs/{run_id}")).text
    woken = await api.client.post(f"/runs/{run_id}/wake", data={"csrf": _csrf(page)})
    assert woken.status_code == 303
    location = woken.headers["location"]
    shown = (await api.client.get(location)).text
    assert '<div class="flash ok" role="status">Wake-up requested.</div>' in shown
    # The same message is not shown on another run's page, nor with other words.
    moved = (await api.client.get(location.replace(run_id, other))).text
    assert 'class="flash' not in moved
    changed = (await api.client.get(location.replace("Wake-up", "Pay-up"))).text
    assert 'class="flash' not in changed


async def test_the_runs_page_takes_several_statuses_as_the_api_does(api: Api) -> None:
    """``?status=failed&status=cancelled`` and ``?status=failed,cancelled`` list both, as
    ``GET /api/v1/runs`` and ``wf runs`` do; the form's empty fields are no filter."""
    done = await api.start("adder", [1, 2])
    failed = await api.start("failing", "boom")
    await api.result(done)
    await api.result(failed)
    await _page_with(api, failed, status="failed")  # the index lags a little
    repeated = (await api.client.get("/?status=failed&status=completed")).text
    assert done in repeated and failed in repeated
    listed = (await api.client.get("/?status=failed,completed")).text
    assert done in listed and failed in listed
    assert 'value="failed,completed" selected' in listed
    form = await api.client.get("/?status=&workflow=&queue=&group=&deployment=&q=")
    assert form.status_code == 200 and done in form.text and failed in form.text


async def test_a_long_runs_page_is_laid_out_off_the_loop(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's page costs about 50 µs a journal event to lay out: past ``OFF_LOOP_EVENTS``
    (a few ms' worth) in a thread, the same page."""
    import threading

    from wf.admin import _read
    from wf.serve import _run_page

    threads: list[bool] = []
    real = _run_page.run_body

    def recording(*args: Any, **kwargs: Any) -> str:
        threads.append(threading.current_thread() is threading.main_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(_run_page, "run_body", recording)
    run_id = await api.start("counter", 12)
    await api.result(run_id)
    monkeypatch.setattr(_read, "OFF_LOOP_EVENTS", 10**9)
    on_loop = (await api.client.get(f"/runs/{run_id}")).text
    monkeypatch.setattr(_read, "OFF_LOOP_EVENTS", 0)
    assert (await api.client.get(f"/runs/{run_id}")).text == on_loop
    assert threads == [True, False]


async def test_a_refused_request_of_the_web_ui_is_answered_with_a_page(api: Api) -> None:
    """A browser that posts a stale form or follows a bad link gets a page saying why (as the
    run page's own "not found" is), not the API's JSON; the API and webhooks still answer
    JSON."""
    run_id = await api.start("sleeper", 3600)
    await api.until(run_id, lambda d: d["status"] == "suspended")
    csrf = _csrf((await api.client.get(f"/runs/{run_id}")).text)
    evil = {"origin": "http://evil.example"}
    for answer, status, says in [
        (await api.client.post(f"/runs/{run_id}/cancel", data={"csrf": "0" * 64}), 403, "stale"),
        (await api.client.post(f"/runs/{run_id}/explode", data={"csrf": csrf}), 404, "explode"),
        (await api.client.get("/no/such/page"), 404, "Not Found"),
        (await api.client.put("/queues"), 405, "Method Not Allowed"),
        (await api.client.post("/logout", data={"csrf": csrf}, headers=evil), 403, "cross-site"),
        (await api.client.get("/static/<b>"), 404, "no such file"),
    ]:
        request = answer.request
        assert answer.status_code == status, (request.method, request.url, answer.text)
        assert answer.headers["content-type"].startswith("text/html"), answer.text
        assert answer.headers["x-frame-options"] == "DENY"
        assert "<!doctype html>" in answer.text and says in answer.text, answer.text
        assert "<b>" not in answer.text
    allowed = (await api.client.put("/queues")).headers["allow"]
    assert set(allowed.split(", ")) == {"GET", "HEAD"}, allowed
    assert (await api.client.get(f"/api/v1/runs/{run_id}")).json()["status"] == "suspended"
    for path in ["/api/v1/nowhere", "/webhooks/nothing-here", "/api"]:
        answer = await api.client.post(path, json={})
        assert answer.status_code in (404, 405), answer.text
        assert answer.json()["error"]["type"] in ("not_found", "method_not_allowed")


def test_the_damaged_notice_counts_stray_entries_apart_and_names_at_most_twenty(
    store_kind: str,
) -> None:
    """A page that left out one damaged run and passed over 30 stray index entries: counted
    apart, the first twenty named, the rest counted. It said "31 damaged runs" and named all
    (60,000 stray names: a page of 60,000 items)."""
    from wf.serve._html import damaged_notice
    from wf.store import Fault

    damaged = [Fault("run", "wrun_1", "runs/wrun_1", "not valid JSON")] + [
        Fault("index entry", f"x{n}", f"index/b/x{n}", "not a wf index entry") for n in range(30)
    ]
    notice = damaged_notice(damaged, "run", "whose record cannot be read")
    assert (
        "Left out of this page: 1 damaged run, whose record cannot be read; 30 other damaged "
        "items passed over." in notice
    )
    assert notice.count("<li>") == 21 and "<li>and 11 more</li>" in notice


async def test_the_run_page_names_a_hook_it_left_out(api: Api) -> None:
    """A hook of the run whose record cannot be read is left out of the run's page, and the
    page says so (``wf inspect`` said it on stderr, the API in ``damaged``; the page said
    nothing, as if the run waited for no hook)."""
    from wf.store.local import LocalStore

    if not isinstance(api.engine.store, LocalStore):
        pytest.skip("damages a hook's file")
    run_id = await api.start("approval", ["a"])
    for _ in range(200):
        if [h for h in await api.engine.store.list_hooks(run_id)]:
            break
        await asyncio.sleep(0.01)
    [found] = [
        p
        for p in (Path(api.engine.store.root) / "hooks").glob("*.json")
        if b"approve:a" in p.read_bytes()
    ]
    found.write_bytes(b"[1]")
    page = (await api.client.get(f"/runs/{run_id}")).text
    assert "Left out of this page: 1 damaged hook, whose record cannot be read." in page
    assert "not a hook record" in page


async def _streamed(api: Api) -> str:
    """A completed run of ``streaming`` whose ``default`` stream its driver has closed."""
    run_id = await api.start("streaming", [2])
    assert (await api.result(run_id))["output"] == 2
    for _ in range(200):  # its driver closes the stream after the outcome: wait for it
        if await api.engine.store.list_streams(run_id) == {"default": (2, True)}:
            break
        await asyncio.sleep(0.01)
    return run_id


async def test_the_run_page_names_a_stream_it_left_out(api: Api) -> None:
    """A stream of the run whose files cannot be read is left out of the run's page, which
    still shows and says so (the page failed whole, ``500 store_damaged``, as did the API's
    detail and ``wf inspect``)."""
    from wf.store.local import LocalStore
    from wf.store.local._layout import stream_key

    if not isinstance(api.engine.store, LocalStore):
        pytest.skip("damages a stream's file")
    run_id = await _streamed(api)
    run_dir = api.engine.store.run_location(run_id)
    os.remove(os.path.join(run_dir, stream_key("default") + ".idx"))
    os.mkdir(os.path.join(run_dir, stream_key("default") + ".idx"))
    answer = await api.client.get(f"/runs/{run_id}")
    assert answer.status_code == 200
    assert "Left out of this page: 1 damaged stream, whose files cannot be read." in answer.text
    assert "is a directory where a file belongs" in answer.text
    detail = await api.client.get(f"/api/v1/runs/{run_id}")
    assert detail.status_code == 200 and detail.json()["streams"] == []
    assert [f["kind"] for f in detail.json()["damaged"]] == ["stream"]
    assert "shown_as" not in detail.json()["damaged"][0]  # left out: shown under no name
    # What the page met is its own to say: the server's worker takes none of it as its own.
    assert not api.engine.store.faults.of_kind("stream")


async def test_the_run_page_says_a_stream_read_by_name_is_shown_not_left_out(api: Api) -> None:
    """A stream whose only damage is its name file is in the page's Streams, by the name its
    journal wrote: the page says so, and not that it was left out of the page."""
    from wf.store.local import LocalStore
    from wf.store.local._layout import stream_key

    if not isinstance(api.engine.store, LocalStore):
        pytest.skip("damages a stream's file")
    run_id = await _streamed(api)
    name_file = os.path.join(api.engine.store.run_location(run_id), stream_key("default"))
    with open(name_file + ".name", "wb") as file:
        file.write(b"other")  # the name of another stream
    answer = await api.client.get(f"/runs/{run_id}")
    assert answer.status_code == 200
    assert "Left out of this page" not in answer.text
    assert (
        "<p class='warn-text'>Stream <span class=\"mono\">default</span>: its name file is "
        f"damaged; shown by the name its journal wrote ({name_file}.name: names stream "
        "&#x27;other&#x27;, whose files are not these). <code>wf store verify</code> names "
        "every damaged item.</p>"
    ) in answer.text
    assert 'data-name="default"' in answer.text  # in the Streams card
    detail = (await api.client.get(f"/api/v1/runs/{run_id}")).json()
    assert [(f["kind"], f["shown_as"]) for f in detail["damaged"]] == [("stream", "default")]


async def test_a_step_log_line_of_the_wrong_shape_does_not_fail_the_run_page(api: Api) -> None:
    """A line of the run's step log whose time is no number (a stray write) made the run's
    page answer 500: it is skipped as any undecodable line is, and the page shows."""
    from wf.store.local import LocalStore

    if not isinstance(api.engine.store, LocalStore):
        pytest.skip("writes into a step log's file")
    run_id = await api.start("adder", [1, 2])
    assert (await api.result(run_id))["output"] == 3
    stray = b'{"ts": "nope", "op": 0, "step": "s", "attempt": 1, "stream": "stdout", "text": "x"}'
    with open(os.path.join(api.engine.store.run_location(run_id), "logs.jsonl"), "ab") as file:
        file.write(stray + b"\n")
    answer = await api.client.get(f"/runs/{run_id}")
    assert answer.status_code == 200


async def test_a_run_no_wake_up_applies_to_has_no_wake_button(api: Api) -> None:
    # Suspended on a hook under wf.timeout, the run has a wake-up time, but a wake-up ends
    # none of its waits (the admin API refuses it): no Wake button, and a wake posted all the
    # same flashes the refusal, not "Already ended.".
    run_id = await api.start("hook_under_timeout", "tmo-ui")
    detail = await api.until(run_id, lambda d: d["status"] == "suspended")
    assert detail["wake_at"] is not None
    page = (await api.client.get(f"/runs/{run_id}")).text
    assert f'action="/runs/{run_id}/cancel"' in page
    assert f'action="/runs/{run_id}/wake"' not in page
    woken = await api.client.post(f"/runs/{run_id}/wake", data={"csrf": _csrf(page)})
    assert woken.status_code == 303
    shown = (await api.client.get(woken.headers["location"])).text
    assert "Already ended." not in shown
    assert "has no sleep to end" in shown and "tmo-ui" in shown
    sleeping = await api.start("sleeper", 3600)
    await api.until(sleeping, lambda d: d["status"] == "suspended")
    page = (await api.client.get(f"/runs/{sleeping}")).text
    assert f'action="/runs/{sleeping}/wake"' in page
