"""``wf inspect``: the JSON shape (documented in docs/cli.md) and the plain rendering."""

from __future__ import annotations

import asyncio
import json

from tests.cli.conftest import Project


def test_inspect_json_shape_of_a_retried_then_failed_run(project: Project) -> None:
    run_id = json.loads(project.cli("run", "tests.cli.flows:failing", "--json", "-q").stdout)[
        "run_id"
    ]
    result = project.cli("inspect", run_id, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {
        "run", "cancel_requested", "why", "explanation", "steps", "events", "errors", "hooks",
        "streams", "children", "parent", "races", "compensations", "deployment", "replays",
        "queue", "schedule", "recoveries", "driver_gone", "inbox", "damaged",
    }  # fmt: skip
    assert data["run"]["id"] == run_id
    assert data["run"]["status"] == "failed"
    assert data["why"].startswith("failed in step 'explode' after 1 attempt(s)")
    [step] = data["steps"]
    assert set(step) == {
        "op", "kind", "name", "status", "attempts", "started_at", "finished_at", "duration",
        "error", "retry_at", "until", "args", "spans",
    }  # fmt: skip
    assert step["args"] == {"args": ["boom"], "kwargs": {}}  # what the step was called with
    assert step["op"] == 0
    assert (step["kind"], step["name"], step["status"], step["attempts"]) == (
        "step",
        "explode",
        "failed",
        1,
    )
    assert step["error"] == {"type": "wf.FatalError", "message": "boom"}
    assert step["duration"] >= 0
    types = [e["type"] for e in data["events"]]
    assert types[0] == "run_started"
    assert types[-1] == "run_failed"
    assert [(e["name"], e["retried"]) for e in data["errors"]] == [
        ("explode", False),
        ("run", False),
    ]
    assert "Traceback" in data["errors"][0]["traceback"]
    assert data["hooks"] == []
    assert data["streams"] == {}
    assert data["children"] == []
    # The same reasons the web UI and the HTTP API give, as data; an ended run has no driver.
    assert data["explanation"]["reasons"][0]["kind"] == "failed"
    assert data["driver_gone"] is None and data["inbox"] == []
    assert [span["status"] for span in step["spans"]] == ["failed"]


def test_inspect_shows_retries_and_sleeps(project: Project) -> None:
    ran = project.cli("run", "tests.cli.flows:sleeper", "-i", "0.05", "--json", "-q")
    data = json.loads(project.cli("inspect", json.loads(ran.stdout)["run_id"], "--json").stdout)
    [sleep] = data["steps"]
    assert (sleep["kind"], sleep["status"]) == ("sleep", "done")
    assert sleep["until"] > sleep["started_at"]
    assert data["why"].startswith("completed in")


def test_inspect_renders_for_people(project: Project) -> None:
    run_id = json.loads(project.cli("run", "tests.cli.flows:failing", "--json", "-q").stdout)[
        "run_id"
    ]
    result = project.cli("inspect", run_id)
    assert result.exit_code == 0
    out = result.stdout
    assert run_id in out
    assert "failed in step 'explode'" in out
    assert "explode" in out
    assert "latest events" in out
    # Without an id: the newest run.
    assert run_id in project.cli("inspect").stdout


def test_inspect_unknown_run_exits_2(project: Project) -> None:
    result = project.cli("inspect", "wrun_nope")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: no run with id 'wrun_nope'"
    empty = project.cli("inspect")
    assert empty.exit_code == 2
    assert empty.stderr.strip() == "error: no runs in the store"


def test_inspect_shows_hooks(project: Project) -> None:
    import asyncio

    import wf
    from wf import Engine
    from wf.cli._store import open_store

    run_id = project.cli("run", "tests.cli.flows:approval", "--detach").stdout.strip()
    assert project.cli("worker", "--until-idle").exit_code == 0
    data = json.loads(project.cli("inspect", run_id, "--json").stdout)
    assert data["run"]["status"] == "suspended"
    assert data["why"] == "suspended: hook 'approve-me'; wakes when a message arrives"
    assert [(h["token"], h["run_id"]) for h in data["hooks"]] == [("approve-me", run_id)]
    [hook] = data["steps"]
    assert (hook["kind"], hook["name"], hook["status"]) == ("hook", "approve-me", "waiting")
    assert "approve-me" in project.cli("inspect", run_id).stdout

    async def resume() -> None:
        store = open_store()
        try:
            await wf.resume_hook("approve-me", "yes", engine=Engine(store))
        finally:
            await store.close()

    asyncio.run(resume())
    assert project.cli("worker", "--until-idle").exit_code == 0
    data = json.loads(project.cli("inspect", run_id, "--json").stdout)
    assert data["run"]["output"] == "yes"
    assert data["hooks"] == []
    [hook] = data["steps"]
    assert (hook["status"], hook["attempts"]) == ("received", 1)


def test_inspect_shows_children_and_streams(project: Project) -> None:
    ran = project.cli("run", "tests.cli.flows:parent", "-i", '"hi"', "--json", "-q")
    assert json.loads(ran.stdout)["output"] == "HI"
    parent = json.loads(project.cli("inspect", json.loads(ran.stdout)["run_id"], "--json").stdout)
    [child] = parent["children"]
    assert (child["workflow"], child["status"]) == ("tests.cli.flows:child_flow", "completed")
    [row] = parent["steps"]
    assert (row["kind"], row["name"], row["status"]) == ("child", child["id"], "completed")
    data = json.loads(project.cli("inspect", child["id"], "--json").stdout)
    assert data["run"]["parent_id"] == parent["run"]["id"]
    assert data["streams"] == {
        "default": {"chunks": 1, "closed": True, "complete": True, "cut_step": None}
    }


def test_inspect_shows_the_recoveries_of_a_stalled_run(project: Project) -> None:
    from tests.engine.test_stalled import stall
    from wf.store.local import LocalStore
    from wf.testing import TestEngine

    async def make() -> str:
        async with TestEngine(LocalStore(project.store_dir)) as engine:
            with engine.installed():
                return await stall(engine)

    run_id = asyncio.run(make())
    data = json.loads(project.cli("inspect", run_id, "--json").stdout)
    assert data["queue"]["max_recoveries"] == 2
    steps = [{"op": 1, "name": "hang"}]
    assert [(r["in_a_row"], r["steps"], r["stalled"]) for r in data["recoveries"]] == [
        (1, steps, False),
        (2, steps, True),
    ]
    assert data["why"].startswith("failed: wf.RunStalled: run ")
    text = project.cli("inspect", run_id).stdout
    assert (
        "its driving process died in step 'hang' (op 1), 1 time(s) in a row without "
        "progress; recovered" in text
    )
    assert "2 time(s) in a row without progress; the run failed stalled" in text
    # The journal's row of the recovery says it too.
    assert "run resumed: its driving process died in step 'hang' (op 1), 1 time(s)" in text


def test_inspect_journal_exports_a_run_that_wf_testing_replay_replays(project: Project) -> None:
    import wf
    import wf.testing
    from tests.cli import flows

    run_id = "export-me"
    assert project.cli("run", "tests.cli.flows:adder", "-i", "[2, 3]", "--id", run_id, "-q")
    result = project.cli("inspect", run_id, "--journal")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0]["record"]["id"] == run_id
    assert [e["type"] for e in lines[1:]][:: len(lines) - 2] == ["run_started", "run_completed"]
    exported = project.root / "adder.jsonl"
    exported.write_text(result.stdout)
    asyncio.run(wf.testing.replay(exported))  # the code that wrote it replays it

    @wf.workflow
    async def reordered(a: int, b: int = 1) -> int:
        await flows.work(a)  # a step before the one the run recorded
        return await flows.add(a, b)

    try:
        asyncio.run(wf.testing.replay(exported, reordered))
    except wf.NondeterminismError as exc:
        assert exc.index == 0
    else:
        raise AssertionError("a changed workflow replayed")


def test_a_damaged_stream_leaves_its_run_readable_and_is_named(project: Project) -> None:
    from wf.store.local._layout import stream_key

    ran = project.cli("run", "tests.cli.flows:parent", "-i", '"hi"', "--json", "-q")
    parent = json.loads(project.cli("inspect", json.loads(ran.stdout)["run_id"], "--json").stdout)
    [child] = parent["children"]
    [name_file] = project.store_dir.glob(f"runs/**/{child['id']}/{stream_key('default')}.name")
    before = project.cli("stream", child["id"])
    assert before.exit_code == 0 and before.stdout, before.stderr
    name_file.write_bytes(b"\xff\xfe")  # a name that is not UTF-8
    result = project.cli("inspect", child["id"], "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["run"]["status"] == "completed"
    # Found by the name its journal wrote (its chunk files are named by the name's key).
    assert data["streams"] == {
        "default": {"chunks": 1, "closed": True, "complete": True, "cut_step": None}
    }
    [fault] = data["damaged"]
    assert (fault["kind"], fault["where"]) == ("stream", str(name_file).removesuffix(".name"))
    assert fault["shown_as"] == "default"  # named, and shown all the same: not left out
    not_utf8 = "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"
    assert result.stderr == (
        "warning: stream 'default': its name file is damaged; shown by the name its journal "
        f"wrote: {name_file}: the stream's name is not UTF-8 ({not_utf8}) "
        "(`wf store verify` names every damaged item)\n"
    )
    # Asked for by name, it is read by its chunk files (named by the name's key), whole.
    streamed = project.cli("stream", child["id"])
    assert (streamed.exit_code, streamed.stdout, streamed.stderr) == (0, before.stdout, "")
    # Its index damaged too, it cannot be read: the store's error (exit 3), not one it lacks.
    index = name_file.with_suffix(".idx")
    index.unlink()
    index.mkdir()
    streamed = project.cli("stream", child["id"])
    assert streamed.exit_code == 3, streamed.stderr
    # Left out now, and said so: not shown.
    result = project.cli("inspect", child["id"], "--json")
    assert (result.exit_code, json.loads(result.stdout)["streams"]) == (0, {}), result.stderr
    assert result.stderr.startswith(
        f"warning: stream {child['id']}/{stream_key('default')} is damaged and not shown: "
    )
    assert "shown by the name" not in result.stderr
    assert streamed.stderr.startswith(
        f"error: run {child['id']} has no readable stream 'default': "
    )
    assert streamed.stderr.count("\n") == 1 and str(index) in streamed.stderr
