"""``wf runs``: newest first, filters, JSON and the table."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.cli.conftest import Project


def make_runs(project: Project) -> dict[str, str]:
    ids = {}
    for name, args in [
        ("completed", ["tests.cli.flows:adder", "-i", "1"]),
        ("failed", ["tests.cli.flows:failing"]),
        ("pending", ["tests.cli.flows:adder", "-i", "2", "--detach"]),
    ]:
        result = project.cli("run", *args, "--json", "-q")
        ids[name] = json.loads(result.stdout)["run_id"]
    return ids


def listed(project: Project, *args: str) -> list[str]:
    result = project.cli("runs", "--json", *args)
    assert result.exit_code == 0, result.stderr
    return [run["id"] for run in json.loads(result.stdout)]


def test_runs_are_listed_newest_first_and_filtered(project: Project) -> None:
    ids = make_runs(project)
    assert listed(project) == [ids["pending"], ids["failed"], ids["completed"]]
    assert listed(project, "--status", "failed") == [ids["failed"]]
    assert listed(project, "-s", "failed", "-s", "completed") == [ids["failed"], ids["completed"]]
    assert listed(project, "--workflow", "tests.cli.flows:adder") == [
        ids["pending"],
        ids["completed"],
    ]
    assert listed(project, "--limit", "1") == [ids["pending"]]
    assert listed(project, "--workflow", "nothing") == []


def test_json_records_carry_status_and_values(project: Project) -> None:
    make_runs(project)
    runs = json.loads(project.cli("runs", "--json").stdout)
    assert {r["status"] for r in runs} == {"completed", "failed", "pending"}
    [done] = [r for r in runs if r["status"] == "completed"]
    assert done["output"] == 2
    assert done["workflow"] == "tests.cli.flows:adder"


def test_the_table_shows_every_run(project: Project) -> None:
    ids = make_runs(project)
    result = project.cli("runs")
    assert result.exit_code == 0
    for run_id in ids.values():
        assert run_id in result.stdout
    assert "FatalError: boom" in result.stdout


def test_an_empty_store_and_a_bad_status(project: Project) -> None:
    assert project.cli("runs").stdout.strip() == "no runs"
    assert json.loads(project.cli("runs", "--json").stdout) == []
    bad = project.cli("runs", "--status", "sleeping")
    assert bad.exit_code == 2
    assert "'sleeping' is not one of" in bad.stderr


def test_newest_first_means_created_last_whatever_the_ids(project: Project) -> None:
    # Caller-chosen ids against their sort order: the listing follows creation.
    for run_id in ("order-9", "my-order-1", "a-first-by-id"):
        result = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--id", run_id, "-q")
        assert result.exit_code == 0, result.stderr
    assert listed(project) == ["a-first-by-id", "my-order-1", "order-9"]
    assert listed(project, "-n", "1") == ["a-first-by-id"]
    newest = project.cli("inspect", "--json")  # no id: the run created last
    assert newest.exit_code == 0, newest.stderr
    assert json.loads(newest.stdout)["run"]["id"] == "a-first-by-id"


def test_runs_are_filtered_by_named_queue_finished_ones_too(project: Project) -> None:
    ids = make_runs(project)
    mail = project.cli("run", "tests.cli.flows:mailer", "-i", '"hi"', "--json", "-q")
    mail_id = json.loads(mail.stdout)["run_id"]
    assert json.loads(mail.stdout)["status"] == "completed"
    assert listed(project, "--queue", "mail") == [mail_id]
    assert listed(project, "--queue", "mail", "-s", "completed") == [mail_id]
    assert listed(project, "--queue", "other") == []
    assert listed(project, "--group", "nobody") == []
    assert listed(project, "--deployment", "v9") == []
    assert ids["failed"] not in listed(project, "--queue", "mail")


def test_a_damaged_run_is_named_on_stderr_and_the_others_listed(project: Project) -> None:
    ids = make_runs(project)
    for name in ("run.json", "journal.jsonl"):  # wherever its record lives
        path = project.store_dir / "runs" / ids["failed"] / name
        if path.exists():
            path.write_bytes(b"{not json\n")
    result = project.cli("runs", "--json")
    assert result.exit_code == 0, result.stderr
    assert [run["id"] for run in json.loads(result.stdout)] == [ids["pending"], ids["completed"]]
    [line] = result.stderr.splitlines()
    assert line.startswith(f"warning: run {ids['failed']} is damaged and not listed: ")
    assert "journal.jsonl: line 1 is not valid JSON" in line or "run.json" in line
    assert line.endswith("(`wf store verify` names every damaged item)")
    table = project.cli("runs")
    assert table.exit_code == 0 and ids["completed"] in table.stdout
    assert ids["failed"] not in table.stdout and ids["failed"] in table.stderr


def test_the_runs_of_a_lost_segment_are_one_warning_naming_the_segment(project: Project) -> None:
    """A packed run lives in its segment file, not in runs/<id>/ (which does not exist):
    a segment lost with its runs is one line, with their count, not one line each."""
    import asyncio
    import os

    from wf.store.local import LocalStore, _compact

    done = [
        json.loads(project.cli("run", "tests.cli.flows:adder", "-i", str(n), "--json", "-q").stdout)
        for n in range(4)
    ]

    async def pack() -> None:
        store = LocalStore(project.store_dir)
        assert store._open(create=False)
        _compact.compact(store, now=4e9, older_than=0.0, limit=100)
        await store.close()

    asyncio.run(pack())
    segment = project.store_dir / "segments" / "00000001.jsonl"
    os.remove(segment)
    result = project.cli("runs", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == []
    [line] = result.stderr.splitlines()
    assert line.startswith(f"warning: 4 runs in {segment} are damaged and not listed (")
    assert f"{segment}: missing (run " in line
    assert not any(str(project.store_dir / "runs" / run["run_id"]) in line for run in done)
    gc = project.cli("gc", "--older-than", "0s", "--json")
    assert gc.exit_code == 0 and len(gc.stderr.splitlines()) == 1
    assert {fault["where"] for fault in json.loads(gc.stdout)["damaged"]} == {str(segment)}


def test_runs_are_searched_as_the_api_and_the_web_ui_search(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--search``: ``wf.admin.list_runs``' search (a whole id, else a part of a workflow
    name, else a part of an id within a bound), its continuation given by ``--before``."""
    from wf.admin import _read

    ids = make_runs(project)
    assert listed(project, "--search", ids["failed"].upper()) == [ids["failed"]]
    assert listed(project, "--search", "ADDER") == [ids["pending"], ids["completed"]]
    assert listed(project, "--search", "adder", "-n", "1") == [ids["pending"]]
    assert listed(project, "--search", "adder", "--before", ids["pending"]) == [ids["completed"]]
    assert listed(project, "--search", "nothing at all") == []
    for empty in ("", "  "):
        refused = project.cli("runs", "--search", empty)
        assert (refused.exit_code, refused.stderr) == (2, "error: a search cannot be empty\n")
    # A part of an id reads runs within a bound: the line says how far, and where to go on.
    monkeypatch.setattr(_read, "SEARCH_BUDGET", 2)
    bounded = project.cli("runs", "--json", "--search", ids["completed"][-6:])
    assert json.loads(bounded.stdout) == []
    assert bounded.stderr == (
        "hint: searched 2 runs and stopped at the bound of one search; more may match: "
        f"add --before {ids['failed']} to search further\n"
    )
    further = listed(project, "--search", ids["completed"][-6:], "--before", ids["failed"])
    assert further == [ids["completed"]]


def test_a_page_before_a_run_that_names_none_is_an_error(project: Project) -> None:
    """``--before`` an id no run has (a typo, a run of another store) says so and exits 2,
    as ``wf inspect`` does for it: "no runs" would read as an empty store."""
    ids = make_runs(project)
    for before in ("nope", "wrun_" + "0" * 26):
        for extra in ([], ["--json"], ["--search", "adder"], ["--status", "failed"]):
            refused = project.cli("runs", "--before", before, *extra)
            assert (refused.exit_code, refused.stdout) == (2, ""), extra
            assert refused.stderr == f"error: before: no run with id {before!r}\n", extra
    malformed = project.cli("runs", "--before", "../x")
    assert malformed.exit_code == 2 and malformed.stderr.startswith("error: before: invalid run id")
    # The oldest run has none before it: an empty page, not an error.
    assert listed(project, "--before", ids["completed"]) == []
    assert project.cli("runs", "--before", ids["completed"]).stdout == "no runs\n"
    # A run deleted since (its tombstone kept) still marks its place: no error.
    assert project.cli("gc", "--older-than", "0s").exit_code == 0
    assert listed(project, "--before", ids["failed"]) == []
    assert listed(project, "--before", ids["pending"]) == []


def test_gc_and_the_pages_pass_over_a_creation_cut_short_and_its_id_created_again(
    project: Project,
) -> None:
    """A power cut left run r1's journal without one complete line: no run. ``wf gc`` exited 2
    on it without its report; once r1 was started again, ``--before r1`` listed r1 and
    ``wf gc`` paged the same runs forever."""
    for run_id, value in (("r1", "1"), ("r2", "2")):
        result = project.cli("run", "tests.cli.flows:adder", "-i", value, "--id", run_id, "-q")
        assert result.exit_code == 0, result.stderr
    journal = project.store_dir / "runs" / "r1" / "journal.jsonl"
    os.truncate(journal, 100)
    gc = project.cli("gc", "--json")
    assert gc.exit_code == 0, gc.stderr
    assert json.loads(gc.stdout)["compact_failed"] is None
    assert listed(project) == ["r2"]
    again = project.cli("run", "tests.cli.flows:adder", "-i", "3", "--id", "r1", "-q")
    assert again.exit_code == 0, again.stderr
    assert listed(project) == ["r1", "r2"]
    assert listed(project, "--before", "r1") == ["r2"]
    assert listed(project, "--before", "r2") == []
    swept = project.cli("gc", "--older-than", "0s", "--json")
    assert swept.exit_code == 0, swept.stderr
    assert sorted(json.loads(swept.stdout)["runs"]) == ["r1", "r2"]


READ_ONLY_CODE = """
import json, sys
from wf.cli import main
launched = []
if TERMINAL:  # as on a terminal, up to the app (which drives runs: it has an engine)
    import wf.cli._inspect, wf.cli.tui
    wf.cli._inspect._interactive = lambda: True
    wf.cli.tui.launch = launched.append
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
engine = sorted(m for m in sys.modules if m in HEAVY)
print(json.dumps({"code": code, "engine": engine, "launched": launched}))
"""


@pytest.mark.parametrize(
    "args",
    [
        ["runs"],
        ["runs", "--json"],
        ["inspect", "RUN", "--json"],
        ["inspect", "RUN"],
        ["inspect", "RUN", "--journal"],
        ["inspect", "RUN", "TERMINAL"],
    ],
    ids=" ".join,
)
def test_reading_the_local_store_builds_no_engine(project: Project, args: list[str]) -> None:
    # A listing or a run's detail only reads the store: the engine (its drivers, child runs,
    # hooks, streams) is a fifth of the command's start-up, and is loaded only by a command
    # that drives or controls runs. On a terminal, the run asked for is checked before the app
    # opens, without one either.
    ids = make_runs(project)
    heavy = ["wf._entry", "wf.engine._driver", "wf.engine._engine", "wf.engine._step"]
    terminal = "TERMINAL" in args
    code = f"HEAVY = {heavy!r}\nTERMINAL = {terminal!r}\n" + READ_ONLY_CODE
    args = [arg for arg in args if arg != "TERMINAL"]
    args = [ids["completed"] if arg == "RUN" else arg for arg in args]
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.splitlines()[-1])
    launched = [ids["completed"]] if terminal else []
    assert outcome == {"code": 0, "engine": [], "launched": launched}, done.stderr


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("WF_MAX_RECOVERIES", "abc", "WF_MAX_RECOVERIES"),
        ("WF_STEP_THREADS", "-1", "WF_STEP_THREADS"),
        ("WF_CONCURRENCY", "zz", "WF_CONCURRENCY"),
        ("WF_DEPLOYMENT", "", "WF_DEPLOYMENT"),
    ],
)
@pytest.mark.parametrize(
    "args",
    [["runs"], ["inspect", "RUN", "--json"], ["inspect", "RUN", "--journal"]],
    ids=" ".join,
)
def test_a_read_command_refuses_a_malformed_engine_setting_as_every_command_does(
    project: Project,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    said: str,
    args: list[str],
) -> None:
    # The read commands build no engine, yet the settings it would take are checked: a bad
    # WF_CONCURRENCY is said by wf runs as by wf run, not found later by a worker.
    run_id = make_runs(project)["completed"]
    monkeypatch.setenv(variable, value)
    result = project.cli(*[run_id if arg == "RUN" else arg for arg in args])
    assert result.exit_code == 2, result.stdout
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
