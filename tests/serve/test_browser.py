"""The web UI in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

Without Chromium or Playwright these tests skip, saying why; ``WF_REQUIRE_BROWSER=1`` (set by
``.ci/run``) makes that a failure. Playwright's own browser downloads are never used: the
system's executable is (``WF_CHROMIUM`` names another).

The core flows run against a server on the local store and against one on PostgreSQL (a fresh
schema per test, dropped after it; without PostgreSQL those skip, saying why, and
``WF_REQUIRE_POSTGRES=1`` makes that a failure).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve.conftest import Served, env_for, postgres_env, spawn_server, stop


def _chromium() -> str:
    path = (
        os.environ.get("WF_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )
    reason = ""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "Playwright is not installed (pip install playwright)"
    if not reason and not path:
        reason = "no Chromium executable (apt-get install chromium, or set WF_CHROMIUM)"
    if reason:
        if os.environ.get("WF_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    assert path is not None
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium."""
    from playwright.sync_api import sync_playwright

    executable = _chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(params=["local", "postgres"])
def served_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The environment of a ``wf serve`` on a fresh local store or PostgreSQL schema."""
    if request.param == "local":
        return env_for(tmp_path)
    return postgres_env(tmp_path, request.getfixturevalue("pg_schema"))


@pytest.fixture
def server(served_env: dict[str, str]) -> Iterator[Served]:
    """A ``wf serve`` process on a fresh store (stopped before its schema is dropped)."""
    served = spawn_server(served_env)
    try:
        kind = "postgres" if "WF_POSTGRES_DSN" in served_env else "local"
        assert httpx.get(served.url + "/api/v1/store", timeout=30).json()["kind"] == kind
        yield served
    finally:
        stop(served)


def _start(served: Served, flow: str, input_: Any) -> str:
    body = {"target": f"tests.serve.flows:{flow}", "input": input_}
    response = httpx.post(served.url + "/api/v1/runs", json=body, timeout=30)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    return run_id


def _status(served: Served, run_id: str) -> str:
    status: str = httpx.get(f"{served.url}/api/v1/runs/{run_id}", timeout=30).json()["status"]
    return status


def _until(served: Served, run_id: str, status: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _status(served, run_id) != status:
        assert time.monotonic() < deadline, f"{run_id} never {status}"
        time.sleep(0.1)


def test_runs_list_filter_open_a_run_and_its_timeline(browser: Any, server: Served) -> None:
    done = _start(server, "adder", [1, 2])
    failed = _start(server, "failing", "kaboom")
    _until(server, done, "completed")
    _until(server, failed, "failed")
    page = browser.new_page()
    page.goto(server.url + "/")
    page.wait_for_selector(f'tr[data-id="{failed}"]')
    assert page.locator("table.runs tbody tr").count() == 2
    page.click('a.chip:has-text("failed")')
    page.wait_for_url(re.compile(r"/\?status=failed$"))
    page.wait_for_selector(f'tr[data-id="{failed}"]')
    assert page.locator(f'tr[data-id="{done}"]').count() == 0
    page.fill('input[name="q"]', "adder")
    page.select_option('select[name="status"]', "")
    page.click('button:has-text("Filter")')
    page.wait_for_selector(f'tr[data-id="{done}"]')
    assert page.locator(f'tr[data-id="{failed}"]').count() == 0
    page.goto(server.url + "/")
    page.click(f'a[href="/runs/{failed}"]')
    page.wait_for_selector(".timeline")
    assert page.locator(".tl-row").count() == 1
    assert page.locator(".tl-track .bar.warn").count() == 1  # attempt 1, retried
    assert page.locator(".tl-track .bar.bad").count() == 1  # attempt 2, failed
    assert "kaboom" in page.inner_text("#live-header")
    page.close()


def test_resume_a_hook_through_the_form(browser: Any, server: Served) -> None:
    run_id = _start(server, "approval", "web")
    _until(server, run_id, "suspended")
    page = browser.new_page()
    page.goto(f"{server.url}/runs/{run_id}")
    form = page.locator("form.hook")
    form.locator("textarea").fill('{"approved": "sure", "by": "me"}')
    form.locator("button").click()
    # Checked against the payload schema in the page before anything is sent.
    page.wait_for_selector("text=payload.approved should be boolean")
    assert _status(server, run_id) == "suspended"
    form.locator("textarea").fill('{"approved": true, "by": "browser"}')
    form.locator("button").click()
    page.wait_for_selector("text=Payload sent to hook approve:web")
    # The page follows the run live (server-sent events) to its end.
    page.wait_for_selector('#run-status[data-status="completed"]', timeout=30_000)
    result = httpx.get(f"{server.url}/api/v1/runs/{run_id}/result", timeout=30).json()
    assert result["output"] == "approved by browser"
    page.close()


def test_watch_a_stream_grow(browser: Any, server: Served) -> None:
    run_id = _start(server, "streaming", {"count": 25, "pause": 0.2})
    _until(server, run_id, "running")
    page = browser.new_page()
    page.goto(f"{server.url}/runs/{run_id}")
    text = page.locator(".stream .stream-text").first
    page.wait_for_function(
        "() => document.querySelector('.stream .stream-text')"
        " && document.querySelector('.stream .stream-text').textContent.length > 0",
        timeout=30_000,
    )
    early = text.inner_text()
    page.wait_for_function(
        "() => document.querySelector('.stream .stream-text').textContent.includes('line 24')",
        timeout=30_000,
    )
    assert early.count("line") < 25  # it grew while we watched
    page.locator('.stream button[data-view="hex"]').first.click()
    assert "6c 69 6e 65" in page.locator(".stream .stream-hex").first.inner_text()  # "line"
    page.close()


def test_a_stream_whose_writer_was_cut_off_is_shown_incomplete(
    browser: Any, server: Served
) -> None:
    run_id = _start(server, "cut_off", [])
    _until(server, run_id, "failed")
    page = browser.new_page()
    page.goto(f"{server.url}/runs/{run_id}")
    state = page.locator(".stream .stream-state").first
    page.wait_for_function(
        "() => document.querySelector('.stream.incomplete')", timeout=30_000
    )  # the body was cut off: the page asked the run how the stream stands
    assert (
        state.inner_text() == "1 chunk(s), incomplete: step 'answer_cut_off' was cut off writing it"
    )
    assert page.locator(".stream .stream-text").first.inner_text() == "Half an"
    page.close()


def test_cancel_a_run_with_its_button(browser: Any, server: Served) -> None:
    run_id = _start(server, "sleeper", 3600)
    _until(server, run_id, "suspended")
    page = browser.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{server.url}/runs/{run_id}")
    page.click('button:has-text("Cancel")')
    page.wait_for_selector("text=Cancellation requested.")
    page.wait_for_selector('#run-status[data-status="cancelled"]', timeout=30_000)
    assert _status(server, run_id) == "cancelled"
    page.close()


def test_a_change_before_the_page_listens_is_shown_at_once(browser: Any, tmp_path: Path) -> None:
    """The run changes between the page's render and its event stream's start (a cancel's
    redirect races the cancel): the stream's first event already says so, and the page fetches
    itself again at once, not at its 5 s timer for a waiting run."""
    served = spawn_server(env_for(tmp_path))
    try:
        run_id = _start(served, "sleeper", 3600)
        _until(served, run_id, "suspended")
        page = browser.new_page()
        held: list[Any] = []
        page.route("**/api/v1/events?*", lambda route: held.append(route))  # held until let go
        page.goto(f"{served.url}/runs/{run_id}")
        assert page.get_attribute("#run-status", "data-status") == "suspended"
        shown = time.monotonic()
        response = httpx.post(f"{served.url}/api/v1/runs/{run_id}/cancel", timeout=30)
        assert response.status_code < 300, response.text
        _until(served, run_id, "cancelled")
        deadline = time.monotonic() + 10
        while not held:
            assert time.monotonic() < deadline, "the page never opened its event stream"
            page.wait_for_timeout(20)
        held[0].continue_()
        page.wait_for_selector('#run-status[data-status="cancelled"]', timeout=10_000)
        assert time.monotonic() - shown < 4.5, "shown by the page's timer, not by the event"
        page.close()
    finally:
        stop(served)


def test_a_step_cut_short_by_cancelling_is_not_drawn_as_running(
    browser: Any, server: Served
) -> None:
    run_id = _start(server, "streaming", {"count": 10_000, "pause": 0.5})
    _until(server, run_id, "running")
    page = browser.new_page()
    page.goto(f"{server.url}/runs/{run_id}")
    page.wait_for_selector(".tl-track .bar.run")  # the step, running
    response = httpx.post(f"{server.url}/api/v1/runs/{run_id}/cancel", timeout=30)
    assert response.status_code < 300, response.text
    _until(server, run_id, "cancelled")
    page.goto(f"{server.url}/runs/{run_id}")
    page.wait_for_selector(".timeline")
    assert page.locator(".tl-track .bar.run").count() == 0
    assert page.locator(".tl-track .bar.mute").count() == 1
    assert "cancelled" in (page.locator(".tl-track .bar.mute").get_attribute("title") or "")
    assert "cancelled / interrupted" in page.inner_text(".legend")
    page.close()


def test_with_a_token_pages_ask_to_sign_in(browser: Any, tmp_path: Path) -> None:
    served = spawn_server(env_for(tmp_path), "--token", "browser-token")
    try:
        page = browser.new_page()
        page.goto(served.url + "/runs/wrun_00000000000000000000000000")
        page.wait_for_url(re.compile(r"/login\?next=/runs/"))
        page.fill('input[name="token"]', "wrong-token")
        page.click('button:has-text("Sign in")')
        page.wait_for_selector("text=That is not this server's token.")
        page.fill('input[name="token"]', "browser-token")
        page.click('button:has-text("Sign in")')
        page.wait_for_url("**/runs/wrun_00000000000000000000000000")
        assert "no run with id" in page.content()
        page.goto(served.url + "/")
        page.wait_for_selector("h1:has-text('Runs')")
        page.close()
    finally:
        stop(served)


def test_queues_schedules_and_step_logs_pages(browser: Any, served_env: dict[str, str]) -> None:
    # No worker: started runs stay queued, so the queues page has something to count.
    served = spawn_server(served_env, "--no-worker")
    try:
        queued = [_start(served, "adder", [i, 1]) for i in range(3)]
        made = served.wf(
            "schedule",
            "set",
            "nightly",
            "tests.serve.flows:adder",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Europe/Paris",
            "--input",
            "[1, 2]",
        )
        assert made.returncode == 0, made.stderr
        page = browser.new_page()
        page.goto(served.url + "/")
        page.click('header nav a:has-text("Queues")')
        page.wait_for_url("**/queues")
        row = page.locator('tr[data-workflow="tests.serve.flows:adder"]')
        assert row.locator("td.depth").inner_text() == "3"
        row.locator("a").click()  # to the runs it counts
        page.wait_for_selector(f'tr[data-id="{queued[0]}"]')
        page.click('header nav a:has-text("Schedules")')
        page.wait_for_url("**/schedules")
        schedule = page.locator('tr[data-id="nightly"]')
        assert "0 3 * * *" in schedule.inner_text()
        assert "tests.serve.flows:adder" in schedule.inner_text()
        # The next fire stays in the schedule's zone, labelled, after the script ran.
        assert re.search(r"\d{4}-\d\d-\d\d 03:00 CES?T", schedule.inner_text())
        title = schedule.locator("time[data-zoned]").first.get_attribute("title") or ""
        assert title.startswith("in "), title  # the script added how far ahead it is
        page.close()
    finally:
        stop(served)


def test_a_run_page_shows_its_step_logs(browser: Any, server: Served) -> None:
    run_id = _start(server, "talker", "browser")
    _until(server, run_id, "completed")
    page = browser.new_page()
    page.goto(f"{server.url}/runs/{run_id}")
    logs = page.locator("#live-logs")
    logs.locator("pre.log").first.wait_for()
    text = logs.inner_text()
    assert "chatty" in text and "hello browser from a step" in text
    assert "[stderr] <b>not markup</b>" in text  # shown as text, never as markup
    assert "[WARNING tests.serve] careful, browser" in text
    page.close()


_ATTACK = """<!doctype html><title>cat pictures</title><script>
async function attack() {
  const out = {};
  try {
    const body = JSON.stringify({target: "tests.serve.flows:adder", input: [1, 2]});
    const started = await fetch("/api/v1/runs",
                                {method: "POST", headers: {"content-type": "text/plain"}, body});
    out.post = [started.status, await started.text()];
  } catch (e) { out.post = [0, String(e)]; }
  try {
    const listed = await fetch("/api/v1/runs");
    out.list = [listed.status, await listed.text()];
  } catch (e) { out.list = [0, String(e)]; }
  try {
    const page = await fetch("/");
    out.page = [page.status, await page.text()];
  } catch (e) { out.page = [0, String(e)]; }
  return out;
}
</script>"""


def test_a_page_on_a_name_rebound_to_this_machine_gets_nothing(
    browser: Any, tmp_path: Path
) -> None:
    """DNS rebinding: ``evil.example`` first serves its page, then resolves to 127.0.0.1, so
    the page's same-origin requests reach ``wf serve``. They are answered 421 and start
    nothing. (Chromium resolves the name to 127.0.0.1 by ``--host-resolver-rules``; the page
    itself, which evil.example served before it was rebound, is given by Playwright.)"""
    served = spawn_server(env_for(tmp_path))
    try:
        port = served.url.rsplit(":", 1)[1]
        secret = _start(served, "adder", [20, 22])  # a run whose data the page must not read
        _until(served, secret, "completed")
        evil = f"http://evil.example:{port}/cats.html"
        # A Chromium of its own: the resolver rule is a launch option.
        chromium = browser.browser_type.launch(
            executable_path=_chromium(),
            args=[
                "--no-sandbox",
                "--disable-dev-shm-usage",
                "--host-resolver-rules=MAP evil.example 127.0.0.1",
                # As a browser without Private Network Access (Firefox, Safari) does: the
                # page's requests are sent; what stops them is wf serve.
                "--disable-features=BlockInsecurePrivateNetworkRequests,"
                "PrivateNetworkAccessSendPreflights,LocalNetworkAccessChecks",
            ],
        )
        try:
            page = chromium.new_page()
            page.route(evil, lambda route: route.fulfill(content_type="text/html", body=_ATTACK))
            page.goto(evil)
            seen = page.evaluate("attack()")
        finally:
            chromium.close()
        assert seen["post"][0] == 421, seen  # the request reached wf serve, which refused it
        assert seen["list"][0] == 421 and seen["page"][0] == 421, seen
        assert all(secret not in text and "adder" not in text for _, text in seen.values())
        runs = httpx.get(served.url + "/api/v1/runs", timeout=30).json()["runs"]
        assert [run["id"] for run in runs] == [secret]  # nothing was started
    finally:
        stop(served)


def test_a_live_run_page_refetches_at_most_about_once_a_second(
    browser: Any, tmp_path: Path
) -> None:
    # A run changing 20 times a second: the page follows it, without a fetch per change.
    served = spawn_server(env_for(tmp_path))
    try:
        run_id = _start(served, "ticking", {"count": 120, "pause": 0.05})
        _until(served, run_id, "running")
        page = browser.new_page()
        fetches: list[float] = []
        seen: list[str] = []
        page.on("request", lambda request: seen.append(f"{request.resource_type} {request.url}"))
        page.on(
            "request",
            lambda request: (
                fetches.append(time.monotonic())
                if request.url.endswith(f"/runs/{run_id}") and request.resource_type == "fetch"
                else None
            ),
        )
        page.goto(f"{served.url}/runs/{run_id}")
        page.wait_for_timeout(5000)  # (Playwright's events come in while it is called)
        assert 2 <= len(fetches) <= 7, (fetches, seen)
        page.close()
    finally:
        stop(served)
