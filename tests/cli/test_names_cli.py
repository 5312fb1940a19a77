"""Names and due times on the command line: a bad one is one line and exit 2 where it is given;
one computed inside a run fails that run once (exit 1), never ``StoreError ... (retried
later)``; a store that already holds a due time past year 9999 still lists and inspects."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from tests.cli.conftest import Project
from wf import encode
from wf.store import RunRecord
from wf.store._ids import new_run_id
from wf.store._limits import LATEST

FLOWS = "tests.cli.name_flows"
BAD = [
    # On the command line a lone surrogate is an undecodable argument, refused before any
    # command runs (the check of names refuses it in Python: tests/engine/test_names.py).
    pytest.param("\ud800", "not valid UTF-8", id="lone-surrogate"),
    pytest.param("a\x00b", "control character", id="nul"),
    pytest.param("tab\there", "control character", id="tab"),
    pytest.param("", "empty", id="empty"),
    pytest.param("t" * 513, "at most 512", id="over-long"),
]


def _one_error_line(result: object, fragment: str) -> None:
    stderr: str = result.stderr  # type: ignore[attr-defined]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert fragment in lines[0], stderr


@pytest.mark.parametrize(("bad", "fragment"), BAD)
def test_a_bad_name_given_on_the_command_line_is_exit_2(
    project: Project, bad: str, fragment: str
) -> None:
    for args in (
        ["hook", "resume", bad, "--data", "{}"],
        ["worker", "--queue", bad, "--until-idle"],
        ["run", f"{FLOWS}:hello", "--group", bad, "--detach"],
    ):
        result = project.cli(*args)
        assert result.exit_code == 2, (args, result.output)
        _one_error_line(result, fragment)
    run_id = project.cli("run", f"{FLOWS}:hello", "--quiet").stdout
    assert json.loads(run_id) == "hello"
    [listed] = project.runs()
    result = project.cli("stream", listed["id"], "--name", bad)
    assert result.exit_code == 2, result.output
    _one_error_line(result, fragment)


@pytest.mark.parametrize("bad", ["\ud800", "a\x00b", "nightly\n", "", "s" * 129])
def test_a_bad_schedule_id_is_exit_2(project: Project, bad: str) -> None:
    for args in (["schedule", "set", bad, f"{FLOWS}:hello", "--cron", "0 3 * * *"],
                 ["schedule", "rm", bad]):  # fmt: skip
        result = project.cli(*args)
        assert result.exit_code == 2, (args, result.output)
        _one_error_line(result, "not valid UTF-8" if bad == "\ud800" else "schedule id")


def test_an_undecodable_group_key_is_exit_2_not_3(project: Project) -> None:
    # A \xff byte arrives as the lone surrogate '\udcff' (surrogateescape).
    result = project.wf("run", f"{FLOWS}:hello", "--group", os.fsdecode(b"\xff"), "--detach")
    assert result.returncode == 2, result.stderr
    _one_error_line(result, "not valid UTF-8")
    assert project.runs() == []


@pytest.mark.parametrize(
    ("flow", "what"), [("hook_token", "hook token"), ("stream_name", "stream name")]
)
@pytest.mark.parametrize("bad", ['"\\ud800"', '"a\\u0000b"', json.dumps("x" * 600)])
def test_a_bad_name_computed_in_a_run_fails_it_once(
    project: Project, flow: str, what: str, bad: str
) -> None:
    result = project.wf("run", f"{FLOWS}:{flow}", "--input", bad)
    assert result.returncode == 1, result.stderr
    assert "wf.UsageError" in result.stderr and what in result.stderr, result.stderr
    assert "StoreError" not in result.stderr and "retried" not in result.stderr, result.stderr
    [listed] = project.runs()
    assert listed["status"] == "failed" and listed["attempt"] == 1
    worker = project.wf("worker", "--until-idle")
    assert worker.returncode == 0, worker.stderr
    assert "0 run(s) driven" in worker.stderr


def test_a_past_at_is_due_now(project: Project) -> None:
    result = project.cli(
        "run", f"{FLOWS}:hello", "--at", "2001-01-01T09:00:00+00:00", "--detach"
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    [listed] = project.runs()
    assert listed["status"] == "pending" and listed["wake_at"] is None
    assert project.cli("worker", "--until-idle").exit_code == 0
    assert [r["status"] for r in project.runs()] == ["completed"]


def _plant_far_due_run(project: Project) -> str:
    """A pending run due in year 10000, as an older wf wrote it: record, journal and a queue
    entry of 15 digits (older wf wrote the due time's milliseconds however long they were)."""
    from wf.store.local import LocalStore

    record = RunRecord(
        id=new_run_id(),
        workflow=f"{FLOWS}:hello",
        target=f"{FLOWS}:hello",
        input=encode({"args": [], "kwargs": {}}, where="input"),
        wake_at=LATEST + 30 * 86400,
    )

    async def plant() -> None:
        store = LocalStore(project.store_dir)
        try:
            assert await store.create_run(record)
        finally:
            await store.close()

    asyncio.run(plant())
    queue = project.store_dir / "queue"
    [entry] = [p for p in queue.iterdir() if p.name.endswith(record.id)]
    entry.rename(queue / f"{int(record.wake_at * 1000)}+{record.id}")
    return record.id


def test_a_stored_due_time_past_9999_still_lists_and_inspects(project: Project) -> None:
    run_id = _plant_far_due_run(project)
    listing = project.cli("runs")
    assert listing.exit_code == 0, listing.stderr
    assert run_id in listing.stdout and "after 9999-12-31" in listing.stdout
    [listed] = project.runs()
    assert listed["id"] == run_id and listed["wake_at"] > LATEST
    detail = project.cli("inspect", run_id, "--json")
    assert detail.exit_code == 0, detail.stderr
    assert json.loads(detail.stdout)["queue"]["held"]["reason"] == (
        "delayed: due at a time after 9999-12-31"
    )
    text = project.cli("inspect", run_id)
    assert text.exit_code == 0, text.stderr
    assert "after 9999-12-31" in text.stdout
