"""The queues and schedules pages' and the step logs' HTML, rendered from given rows."""

from __future__ import annotations


def test_a_schedule_row_links_its_last_run_and_shows_its_error() -> None:
    from wf.serve._pages import schedules_table

    row = {
        "id": "s1",
        "workflow": "app:<job>",
        "cron": "*/5 * * * *",
        "tz": None,
        "next_run": 1_800_000_000.0,
        "last_fire_at": 1_799_999_700.0,
        "last_run_id": "wrun_01J0000000000000000000000A",
        "last_run_status": "failed",
        "skipped": 2,
        "last_skip_reason": "previous run still going",
        "last_error": "input <bad>",
    }
    html = schedules_table([row])
    assert '<a class="mono" href="/runs/wrun_01J0000000000000000000000A">' in html
    assert 'class="badge bad">failed</span>' in html
    assert "app:&lt;job&gt;" in html and "error: input &lt;bad&gt;" in html
    assert "2 <span" in html and "previous run still going" in html
    gone = schedules_table([{**row, "last_run_status": "deleted", "last_error": None}])
    assert "/runs/wrun_" not in gone and "deleted" in gone
    waiting = schedules_table([{**row, "last_run_status": "pending", "last_run_unserved": "v1"}])
    assert '<div class="warn-text">waiting for a worker of deployment v1</div>' in waiting
    assert "deployment v1" not in html


def test_schedule_times_are_in_the_schedules_zone_and_an_ended_series_says_so() -> None:
    from wf.serve._pages import schedules_table

    row = {
        "id": "paris",
        "workflow": "app:job",
        "cron": "30 2 * * *",
        "tz": "Europe/Paris",
        "next_run": 1_796_347_800.0,  # 2026-12-04 01:30 UTC
        "last_fire_at": 1_796_261_400.0,
        "ended": False,
    }
    html = schedules_table([row])
    # data-zoned: the script leaves the zoned text and only adds a tooltip.
    assert (
        '<time datetime="2026-12-04T01:30:00+00:00" data-zoned title="2026-12-04T01:30:00+00:00">'
        "2026-12-04 02:30 CET</time>"
    ) in html
    assert ">2026-12-03 02:30 CET</time>" in html
    ended = schedules_table([{**row, "tz": None, "ended": True, "next_run": None}])
    assert '<span class="dim ended">ended</span>' in ended
    assert ">2026-12-03 01:30 UTC</time>" in ended


def test_step_logs_are_grouped_per_attempt_and_bounded() -> None:
    from wf.serve._pages import logs_section

    entries = [
        {"ts": 1.0, "op": 0, "step": "fetch", "attempt": 1, "stream": "stdout", "text": "a\n"},
        {"ts": 2.0, "op": 0, "step": "fetch", "attempt": 2, "stream": "stdout", "text": "b\n"},
        {
            "ts": 3.0,
            "op": 1,
            "step": "save",
            "attempt": 1,
            "stream": "log",
            "text": "c",
            "level": "ERROR",
            "logger": "app",
        },
    ]
    html = logs_section("wrun_1", entries, 5)
    assert html.count('class="log-head"') == 3
    assert "The last 3 of 5 entries" in html and "wf logs wrun_1" in html
    assert '<span class="bad-text">[ERROR app]</span> c' in html
    assert "nothing" in logs_section("wrun_1", [], 0)


async def test_the_run_header_lists_the_recoveries_from_dead_drivers() -> None:
    import wf.testing
    from tests.engine.test_stalled import stall
    from wf.admin import explain, run_detail
    from wf.serve._run_page import header

    async with wf.testing.engine() as engine:
        run_id = await stall(engine)
        detail = await run_detail(engine.store, run_id)
    html = header(detail, explain(detail), "token")
    assert "recovered 2× from a dead driver" in html
    assert html.count('<li class="why recovery') == 2
    assert (
        "its driving process died in step &#x27;hang&#x27; (op 1), 2 time(s) in a row without "
        "progress; the run failed stalled</li>" in html
    )
    assert '<li class="why recovery error"><time' in html


async def test_the_run_header_shows_the_deployment_a_run_is_pinned_to() -> None:
    import wf.testing
    from tests.engine.test_deployments import leaf
    from wf.admin import explain, run_detail
    from wf.serve._run_page import header

    async with wf.testing.engine() as engine:
        engine.deployment = "release-<7>"
        run = await wf.start(leaf, "x", detach=True)
        detail = await run_detail(engine.store, run.id)
    html = header(detail, explain(detail), "token")
    assert 'deployment <span class="mono">release-&lt;7&gt;</span>' in html
    assert "waiting for a worker of deployment release-&lt;7&gt;" in html


def test_a_moment_in_a_sentence_is_a_time_and_its_distance() -> None:
    """ "Sleeping until <time>…</time> (in 50m51s).", never "until in 50m51s": the moment a
    ``<time>`` the script shows in the reader's local time, as every other time on the page
    (and the terminal UI and the CLI show theirs in local time), not a UTC text."""
    from wf.admin import Reason
    from wf.serve._run_page import reason_words

    now = 1_796_488_006.0  # 2026-12-05 16:26:46 UTC
    sleeping = reason_words(Reason(kind="sleeping", tone="wait", at=now + 3051), now)
    assert sleeping == (
        'Sleeping until <time datetime="2026-12-05T17:17:37.000+00:00" '
        'title="2026-12-05T17:17:37.000+00:00">2026-12-05 17:17:37 UTC</time> (in 50m51s).'
    )
    retrying = reason_words(
        Reason(kind="retrying", tone="warn", name="s", attempt=1, at=now + 3), now
    )
    assert retrying is not None and "16:26:49 UTC</time> (in 3.00s);" in retrying
    # Recorded text in a sentence: escaped, its control characters shown as the CLI shows them.
    hook = reason_words(Reason(kind="hook", tone="wait", name="k\n<b>\x1b[2J"), now)
    assert hook == "Waiting on hook `k\\n&lt;b&gt;\\x1b[2J`: send it a payload below."


def test_the_runs_table_shows_control_characters_as_the_cli_and_the_app_do() -> None:
    """A line break or an ESC in a workflow name or an error is shown as ``\\n``, ``\\x1b``
    in a cell and its title (as ``wf runs`` and the app show them), never as raw characters."""
    from wf.serve._runs_page import _row
    from wf.store import RunRecord, RunStatus

    error = {"type": "ValueError", "message": "a\n b\x1b[2J"}
    failed = RunRecord(
        id="wrun_x", workflow="w\nx\x1b]0;t\x07", status=RunStatus.FAILED, error=error
    )
    html = _row(failed, 0.0)
    assert "<td>w\\nx\\x1b]0;t\\x07</td>" in html
    assert 'title="ValueError: a\\n b\\x1b[2J">ValueError: a\\n b\\x1b[2J</td>' in html
    assert "\n" not in html and "\x1b" not in html and "\x07" not in html


def test_a_sleeping_runs_wait_in_the_runs_table_is_a_time_in_the_readers_zone() -> None:
    """``sleep until <time …>``: the moment shown by the script in the reader's local time,
    as the created column is; its title in ISO 8601, UTC (never the server's local time)."""
    from wf.serve._runs_page import _row
    from wf.store import RunRecord, RunStatus

    until = 1_796_532_017.0  # 2026-12-06 04:40:17 UTC
    waits = [{"kind": "sleep", "target": None, "until": until}]
    asleep = RunRecord(
        id="wrun_x", workflow="w", status=RunStatus.SUSPENDED, waiting_for=waits, wake_at=until
    )  # type: ignore[arg-type]
    html = _row(asleep, until - 60)
    assert 'title="sleep until 2026-12-06T04:40:17+00:00">sleep until <time datetime=' in html
    assert ">2026-12-06 04:40:17 UTC</time></td>" in html
