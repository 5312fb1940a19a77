"""``wf schedule set|rm``, ``wf schedules``, a worker firing them, ``wf gc`` and ``wf store``."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import signal
import time
from zoneinfo import ZoneInfo

import pytest

from tests.cli.conftest import Project
from wf.store.local._layout import FORMAT

FLOW = "tests.cli.flows:adder"
_B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def fire_time(run_id: str) -> float:
    """The time in a generated run id (its first ten characters after ``wrun_``)."""
    millis = 0
    for char in run_id[5:15]:
        millis = millis * 32 + _B32.index(char)
    return millis / 1000


def test_schedule_set_list_replace_and_remove(project: Project) -> None:
    result = project.cli(
        "schedule", "set", "nightly", FLOW, "--cron", "0 3 * * *", "--tz", "Europe/Paris",
        "--input", '{"a": 2}',
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "next run" in result.stdout
    listed = json.loads(project.cli("schedules", "--json").stdout)
    assert [(s["id"], s["cron"], s["tz"], s["workflow"]) for s in listed] == [
        ("nightly", "0 3 * * *", "Europe/Paris", FLOW)
    ]
    assert listed[0]["next_run"] > time.time()  # --json keeps epoch seconds, like `wf runs`
    assert listed[0]["ended"] is False
    # Shown in the schedule's zone, labelled: next run: 2026-12-04 03:00 CET
    paris = dt.datetime.fromtimestamp(listed[0]["next_run"], ZoneInfo("Europe/Paris"))
    assert paris.strftime("%H:%M %Z") in ("03:00 CET", "03:00 CEST")
    shown = paris.strftime("%Y-%m-%d %H:%M %Z")
    assert f"next run: {shown}" in result.stdout
    assert shown in project.cli("schedules").stdout
    assert listed[0]["last_run_id"] is None and listed[0]["last_run_status"] is None
    again = project.cli("schedule", "set", "nightly", FLOW, "--cron", "0 4 * * *", "-i", "[5]")
    assert again.exit_code == 0, again.output
    listed = json.loads(project.cli("schedules", "--json").stdout)
    assert [(s["id"], s["cron"], s["tz"]) for s in listed] == [("nightly", "0 4 * * *", None)]
    table = project.cli("schedules")
    assert "nightly" in table.stdout and "0 4 * * *" in table.stdout
    assert project.cli("schedule", "rm", "nightly").exit_code == 0
    gone = project.cli("schedule", "rm", "nightly")
    assert gone.exit_code == 2 and "no schedule with id 'nightly'" in gone.stderr
    assert json.loads(project.cli("schedules", "--json").stdout) == []


def test_schedule_pause_and_resume(project: Project) -> None:
    made = project.cli("schedule", "set", "nightly", FLOW, "--cron", "0 3 * * *", "-i", "[1]")
    assert made.exit_code == 0, made.output
    paused = project.cli("schedule", "pause", "nightly")
    assert paused.exit_code == 0, paused.output
    assert paused.stdout.splitlines() == ["schedule nightly: paused", "next run: paused"]
    [row] = json.loads(project.cli("schedules", "--json").stdout)
    assert (row["paused"], row["next_run"]) == (True, None)
    assert "paused" in project.cli("schedules").stdout
    resumed = project.cli("schedule", "resume", "nightly")
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.startswith("schedule nightly: resumed\nnext run: 20")
    [row] = json.loads(project.cli("schedules", "--json").stdout)
    assert row["paused"] is False and row["next_run"] > time.time()
    for action in ("pause", "resume"):
        gone = project.cli("schedule", action, "nope")
        assert gone.exit_code == 2 and "no schedule with id 'nope'" in gone.stderr


def test_a_damaged_schedule_is_named_on_stderr_and_the_others_listed(project: Project) -> None:
    for schedule_id in ("broken", "nightly"):
        made = project.cli("schedule", "set", schedule_id, FLOW, "--cron", "0 3 * * *", "-i", "[1]")
        assert made.exit_code == 0, made.output
    [path] = [
        p for p in (project.store_dir / "schedules").glob("*.json") if b'"broken"' in p.read_bytes()
    ]
    path.write_bytes(b"{not json")
    result = project.cli("schedules", "--json")
    assert result.exit_code == 0, result.stderr
    assert [s["id"] for s in json.loads(result.stdout)] == ["nightly"]
    [line] = result.stderr.splitlines()
    assert line.startswith(f"warning: schedule file {path.name} is damaged and not listed: {path}")
    assert line.endswith("(`wf store verify` names every damaged item)")
    table = project.cli("schedules")
    assert table.exit_code == 0 and "nightly" in table.stdout and path.name in table.stderr


def test_damaged_schedules_are_named_once_by_verify_and_a_refused_cron_is_not_listed(
    project: Project,
) -> None:
    for schedule_id in ("garbage", "badcron", "nightly"):
        made = project.cli("schedule", "set", schedule_id, FLOW, "--cron", "0 3 * * *", "-i", "[1]")
        assert made.exit_code == 0, made.output
    files = {
        json.loads(p.read_bytes())["id"]: p
        for p in (project.store_dir / "schedules").glob("*.json")
    }
    files["garbage"].write_bytes(b"{not json")
    stored = json.loads(files["badcron"].read_bytes())
    files["badcron"].write_text(json.dumps({**stored, "cron": "99 * * * *"}))
    verify = project.wf("store", "verify")  # a process of its own: its log is said too
    assert verify.returncode == 1
    said = verify.stdout + verify.stderr
    assert said.count(files["garbage"].name) == 1, said
    assert said.count(files["badcron"].name) == 1, said
    # Listed as workers see it: skipped as damaged, named on stderr, the others listed.
    listed = project.cli("schedules", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert [s["id"] for s in json.loads(listed.stdout)] == ["nightly"]
    [line] = [x for x in listed.stderr.splitlines() if "badcron" in x]
    assert line.startswith(
        f"warning: schedule badcron is damaged and not listed: {files['badcron']}"
    )
    assert "cron: '99 * * * *' is not a valid cron expression" in line


def test_a_stored_input_of_another_shape_is_damage_named_by_schedules_and_verify(
    project: Project,
) -> None:
    for schedule_id in ("badinput", "nightly"):
        made = project.cli("schedule", "set", schedule_id, FLOW, "--cron", "0 3 * * *", "-i", "[1]")
        assert made.exit_code == 0, made.output
    [path] = [
        p
        for p in (project.store_dir / "schedules").glob("*.json")
        if json.loads(p.read_bytes())["id"] == "badinput"
    ]
    stored = json.loads(path.read_bytes())
    path.write_text(json.dumps({**stored, "input": {"args": 5, "kwargs": []}}))
    listed = project.cli("schedules", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert [s["id"] for s in json.loads(listed.stdout)] == ["nightly"]
    assert path.name in listed.stderr and "'args' of int, not list" in listed.stderr
    verify = project.cli("store", "verify")
    assert verify.exit_code == 1
    assert "'args' of int, not list" in verify.stdout + verify.stderr


def test_schedule_set_refuses_bad_fields_with_exit_2(project: Project) -> None:
    cases = [
        (["--cron", "61 * * * *"], "error: cron: '61 * * * *' is not a valid cron expression"),
        (["--cron", "* * * * *", "--tz", "Nowhere/City"], "error: tz: unknown time zone"),
        (["--cron", "* * * * *", "--input", '{"a": "x"}'], "parameter 'a'"),
        (["--cron", "* * * * *", "--catch-up", "twice"], "error: catch_up: 'twice'"),
    ]
    for extra, message in cases:
        result = project.cli("schedule", "set", "s", FLOW, *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.stderr, (extra, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
    missing = project.cli("schedule", "set", "s", "tests.cli.flows:nope", "--cron", "* * * * *")
    assert missing.exit_code == 2
    assert json.loads(project.cli("schedules", "--json").stdout) == []


def test_schedule_set_refuses_a_cron_that_never_fires_with_exit_2(project: Project) -> None:
    cases = [
        ("0 0 30 2 *", "error: cron: '0 0 30 2 *' never fires (no date matches it)"),
        (
            "34 15 3 12 * */30 2020",  # croniter's seconds and year fields: a series long past
            "error: cron: '34 15 3 12 * */30 2020' never fires again "
            "(its last time was 2020-12-03 15:34:30 UTC)",
        ),
    ]
    for cron, message in cases:
        result = project.cli("schedule", "set", "s", FLOW, "--cron", cron, "-i", "[1]")
        assert result.exit_code == 2, (cron, result.output)
        assert result.stderr.strip() == message
    assert json.loads(project.cli("schedules", "--json").stdout) == []


def _plant_an_ended_series(project: Project) -> float:
    """Register, on the fake clock, a series with two fires on 2020-06-01 (12:00:00 and
    12:00:30, croniter's seconds and year fields); the time of its last fire."""
    import wf
    from tests.cli.flows import adder
    from wf.store.local import LocalStore
    from wf.testing import MockClock

    start = dt.datetime(2020, 6, 1, 11, 59, tzinfo=dt.UTC).timestamp()

    async def plant() -> None:
        store = LocalStore(project.store_dir)
        try:
            async with wf.testing.engine(store, MockClock(start)):
                await wf.schedule("last", adder, cron="0 12 1 6 * */30 2020", input=[2, 3])
        finally:
            await store.close()

    asyncio.run(plant())
    return start + 90


def test_a_series_that_ended_is_listed_as_ended_and_workers_go_on(project: Project) -> None:
    last_fire = _plant_an_ended_series(project)
    other = project.cli("run", FLOW, "--input", "[4]", "--detach").stdout.strip()
    # Both fires are long past: the worker catches up the latest, records the end, and goes on.
    for _ in range(2):  # a second worker finds it ended: nothing computed, nothing started
        done = project.cli("worker", "--until-idle", "--quiet")
        assert done.exit_code == 0, done.output
    runs = {r["id"]: r for r in project.runs()}
    assert runs[other]["status"] == "completed"
    fired = [r for r in runs.values() if r["schedule_id"] == "last"]
    assert [r["status"] for r in fired] == ["completed"]
    (listed,) = json.loads(project.cli("schedules", "--json").stdout)
    assert (listed["ended"], listed["next_run"]) == (True, None)
    assert (listed["last_fire_at"], listed["last_run_id"]) == (last_fire, fired[0]["id"])
    table = project.cli("schedules").stdout
    row = next(line for line in table.splitlines() if line.startswith("last"))
    assert "ended" in row and "2020-06-01 12:00:30 UTC" in row
    again = project.cli(
        "schedule", "set", "last", FLOW, "--cron", "0 12 1 6 * */30 2020", "-i", "[1]"
    )
    assert again.exit_code == 2 and "never fires again" in again.stderr


def test_a_worker_fires_a_schedule_within_a_second(project: Project) -> None:
    every_second = "* * * * * *"  # croniter's sixth field: seconds
    assert (
        project.cli("schedule", "set", "s", FLOW, "--cron", every_second, "-i", "[1]").exit_code
        == 0
    )
    worker = project.spawn("worker", "--quiet")
    try:
        project.wait_for(lambda: len(project.runs()) >= 3, timeout=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    runs = [r for r in project.runs() if r["schedule_id"] == "s"]
    assert len(runs) >= 3
    # A fire's run id carries its fire time (milliseconds, like any run id's creation time):
    # the idle worker slept until that time and created the run at once.
    late = sorted(r["created_at"] - fire_time(r["id"]) for r in runs)
    assert late[len(late) // 2] < 1.0, late
    # SIGTERM drains: a fire's run in flight when it lands stops at its next durable operation
    # and is left resumable (suspended, or pending if it had not started), due for the next
    # worker, which finishes it.
    left = {r["status"] for r in runs}
    assert left <= {"completed", "pending", "suspended"}, left
    assert project.cli("worker", "--until-idle", "--quiet").exit_code == 0
    runs = [r for r in project.runs() if r["schedule_id"] == "s"]
    assert {r["status"] for r in runs} == {"completed"}
    listed = json.loads(project.cli("schedules", "--json").stdout)[0]
    assert listed["last_run_status"] == "completed"
    finished = [r for r in runs if r["status"] == "completed"]
    inspected = project.cli("inspect", finished[0]["id"])
    assert "started by schedule s" in inspected.stdout
    data = json.loads(project.cli("inspect", finished[0]["id"], "--json").stdout)
    assert data["schedule"] == {"id": "s", "cron": every_second, "tz": None, "exists": True}


def test_gc_deletes_finished_runs_and_inspect_says_so(project: Project) -> None:
    ids = []
    for n in range(3):
        result = project.cli("run", FLOW, "--input", f"[{n}]", "--json", "--quiet")
        assert result.exit_code == 0, result.output
        ids.append(json.loads(result.stdout)["run_id"])
    pending = project.cli("run", FLOW, "--input", "[9]", "--detach").stdout.strip()
    dry = json.loads(project.cli("gc", "--older-than", "0", "--dry-run", "--json").stdout)
    assert dry["dry_run"] and sorted(dry["runs"]) == sorted(ids)
    assert len(project.runs()) == 4
    assert json.loads(project.cli("gc", "--json").stdout)["deleted"] == 0  # no retention set
    done = json.loads(project.cli("gc", "--older-than", "0s", "--json").stdout)
    assert sorted(done["runs"]) == sorted(ids) and done["bytes"] > 0
    assert [r["id"] for r in project.runs()] == [pending]
    inspected = project.cli("inspect", ids[0])
    assert inspected.exit_code == 2
    assert f"run '{ids[0]}' was deleted by wf gc at" in inspected.stderr
    info = json.loads(project.cli("store", "info", "--json").stdout)
    assert info["runs"]["pending"] == 1 and info["runs"]["completed"] == 0
    assert info["tombstones"] == 3 and info["format"] == FORMAT and info["size_bytes"] is None
    assert "deleted:    3" in project.cli("store", "info").stdout
    bad = project.cli("gc", "--status", "running")
    assert bad.exit_code == 2 and "never deleted" in bad.stderr
    bad = project.cli("gc", "--older-than", "soon")
    assert bad.exit_code == 2 and "--older-than" in bad.stderr


def test_gc_says_what_it_deleted_when_compacting_after_it_fails(project: Project) -> None:
    """The deletions happened: a packing that fails after them is a warning, not the
    answer (exit 0; the next gc or worker packs again)."""
    import errno

    from wf.store.local import _fsops

    assert project.cli("run", FLOW, "-i", "[1]", "--json", "-q").exit_code == 0
    with _fsops.inject("open", errno.EIO, match="segments/lock"):
        done = project.cli("gc", "--older-than", "0s")
    assert done.exit_code == 0, done.output
    assert "deleted 1 run(s) of 1 finished" in done.stdout
    assert "warning: compacting the finished runs failed: cannot open " in done.stderr
    assert "segments/lock: [EIO]" in done.stderr
    assert project.runs() == []
    assert json.loads(project.cli("gc", "--json").stdout)["compact_failed"] is None


def test_gc_prunes_tombstones_over_30_days_old(project: Project) -> None:
    import asyncio
    import time

    from wf.store.local import LocalStore

    ids = []
    for n in range(2):
        result = project.cli("run", FLOW, "--input", f"[{n}]", "--json", "--quiet")
        ids.append(json.loads(result.stdout)["run_id"])

    async def delete() -> None:
        store = LocalStore(project.store_dir)
        long_ago = time.time() - 31 * 86400
        assert (await store.delete_runs([ids[0]], now=long_ago, reason="gc")).ids == [ids[0]]
        assert (await store.delete_runs([ids[1]], now=time.time(), reason="gc")).ids == [ids[1]]
        await store.close()

    asyncio.run(delete())
    dry = json.loads(project.cli("gc", "--dry-run", "--json").stdout)
    assert dry["tombstones_pruned"] == 0
    done = project.cli("gc")
    assert "1 tombstone(s) over 30 days old pruned" in done.stdout
    assert json.loads(project.cli("store", "info", "--json").stdout)["tombstones"] == 1
    assert "no run with id" in project.cli("inspect", ids[0]).stderr
    assert "was deleted by wf gc" in project.cli("inspect", ids[1]).stderr
    assert json.loads(project.cli("gc", "--json").stdout)["tombstones_pruned"] == 0


def test_gc_applies_retention_from_the_environment(project: Project) -> None:
    run_id = json.loads(project.cli("run", FLOW, "-i", "[1]", "--json", "-q").stdout)["run_id"]
    kept = project.wf("gc", "--json", WF_RETENTION="1h")
    assert json.loads(kept.stdout)["deleted"] == 0
    time.sleep(1.1)
    done = project.wf("gc", "--json", WF_RETENTION="1s")
    assert json.loads(done.stdout)["runs"] == [run_id]


def test_a_worker_applies_the_store_wide_retention_and_refuses_zero(project: Project) -> None:
    run_id = json.loads(project.cli("run", FLOW, "-i", "[1]", "--json", "-q").stdout)["run_id"]
    refused = project.wf("worker", "--until-idle", WF_RETENTION="0")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: retention (WF_RETENTION='0'): 0 would delete each run's result as soon as it ends, "
        "before anyone reads it; give one second or more (a workflow's retention=None keeps "
        "its runs forever)"
    ]
    assert [r["id"] for r in project.runs()] == [run_id]
    worker = project.spawn("worker", WF_RETENTION="1s")
    try:
        deadline = time.monotonic() + 20  # its first sweep comes a second after it starts
        while project.runs() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert project.runs() == []
    finally:
        worker.terminate()
        worker.communicate(timeout=30)


def test_store_verify_reports_and_changes_nothing(project: Project) -> None:
    run_id = json.loads(project.cli("run", FLOW, "-i", "[1]", "--json", "-q").stdout)["run_id"]
    ok = project.cli("store", "verify")
    assert ok.exit_code == 0 and "store ok" in ok.stdout
    journal = project.store_dir / "runs" / run_id / "journal.jsonl"
    journal.write_bytes(b'{"type": "run_started"\n' + journal.read_bytes())
    before = journal.read_bytes()
    bad = project.cli("store", "verify", "--json")
    assert bad.exit_code == 1
    report = json.loads(bad.stdout)
    assert not report["ok"] and any(str(journal) in line for line in report["problems"])
    assert journal.read_bytes() == before


def test_the_table_says_the_last_run_waits_for_a_gone_deployment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from wf.cli._schedules import _print_table

    row = {
        "id": "dep", "workflow": "flows:slow", "cron": "* * * * *", "tz": None,
        "next_run": 1_800_000_060.0, "last_fire_at": 1_800_000_000.0, "skipped": 3,
        "last_run_id": "wrun_01M94EYK505C8YX1CRZEXHR62A", "last_run_status": "suspended",
        "last_run_unserved": "v1", "ended": False, "paused": False,
        "last_skip_reason": "the previous run wrun_01M94EYK505C8YX1CRZEXHR62A was still going",
    }  # fmt: skip
    _print_table([row])
    said = " ".join(capsys.readouterr().out.split())
    assert "(waiting for a worker of deployment v1)" in said
    _print_table([{**row, "last_run_unserved": None}])
    assert "waiting for a worker" not in capsys.readouterr().out


def test_resuming_a_schedule_whose_stored_cron_is_damaged_names_the_damage(
    project: Project,
) -> None:
    from wf.store import Schedule
    from wf.store.local import LocalStore

    async def stored(damaged: Schedule | None = None) -> Schedule | None:
        store = LocalStore(project.store_dir)
        try:
            if damaged is not None:
                await store.save_schedule(damaged)
            return await store.get_schedule("bad")
        finally:
            await store.close()

    asyncio.run(stored(Schedule("bad", FLOW, "61 * * * *", paused=True)))
    resumed = project.cli("schedule", "resume", "bad")
    assert resumed.exit_code == 3, resumed.output
    [line] = resumed.stderr.splitlines()
    assert "schedule 'bad'" in line and "unexpected" not in line
    kept = asyncio.run(stored())
    assert kept is not None and kept.paused  # left as it was
