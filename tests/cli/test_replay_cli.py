"""``wf check --replay`` and ``wf inspect --replay``: stored journals replayed against code that
changed since the runs started — the check a user runs in CI before a deploy.

The workflow module is written into the project directory, a run of it is left suspended by a
real process, and then the module is edited as a deploy would.
"""

from __future__ import annotations

import json
import shutil
import signal

from tests.cli.conftest import Project

FLOW = """\
import wf


@wf.step
def first() -> str:
    return "a"


@wf.step
def second() -> str:
    return "b"


@wf.workflow
async def order() -> list[str]:
    a = await first()
    b = await second()
    await wf.sleep(600)
    return [a, b]


@wf.workflow
async def quick() -> str:
    return await first()
"""

REORDERED = FLOW.replace(
    "    a = await first()\n    b = await second()\n",
    "    b = await second()\n    a = await first()\n",
)
DIVERGING_LINE = FLOW.splitlines().index("    a = await first()") + 1  # where `second` now is


def write_flow(project: Project, source: str) -> None:
    (project.root / "shopflow.py").write_text(source)
    # A same-size rewrite within the same second passes Python's .pyc check (mtime in whole
    # seconds, size), so the bytecode an earlier process cached would shadow the edit.
    shutil.rmtree(project.root / "__pycache__", ignore_errors=True)


def setup_runs(project: Project) -> None:
    """Run ``quick`` to completion and leave ``order`` suspended in its 600 s sleep."""
    write_flow(project, FLOW)
    quick = project.wf("run", "shopflow.py:quick", "--id", "done", "-q")
    assert quick.returncode == 0, quick.stderr
    proc = project.spawn("run", "shopflow.py:order", "--id", "old", WF_SUSPEND_AFTER="0.1")
    project.wait_for(lambda: project.status("old") == "suspended")
    proc.send_signal(signal.SIGINT)  # leaves it suspended, as any crash would
    proc.communicate(timeout=30)


def check(project: Project, *args: str) -> tuple[int, str, str]:
    # Same-size edits within one second would let Python reuse the stale bytecode of the old
    # module; CI checks out fresh files, so bytecode caching is simply turned off here.
    done = project.wf("check", "--replay", *args, PYTHONDONTWRITEBYTECODE="1")
    return done.returncode, done.stdout, done.stderr


def test_reordered_steps_are_reported_and_reverting_fixes_it(project: Project) -> None:
    setup_runs(project)
    code, out, err = check(project)
    assert code == 0, out + err
    assert out.splitlines()[-1] == "2 runs replayed: 2 ok, 0 diverged, 0 error(s)"

    write_flow(project, REORDERED)
    code, out, err = check(project)
    assert code == 1
    lines = out.splitlines()
    assert "diverged  old  shopflow:order" in lines
    at = lines.index("diverged  old  shopflow:order")
    assert lines[at + 1] == (
        "  operation #0: recorded step 'first', current code calls step 'second'"
    )
    assert lines[at + 2] == f"  at shopflow.py:{DIVERGING_LINE}: b = await second()"
    assert any(line.startswith("ok        done  shopflow:quick") for line in lines)
    assert lines[-1] == "2 runs replayed: 1 ok, 1 diverged, 0 error(s)"
    assert "wf.patched" in err  # the hint says how to change code with runs in flight

    code, out, _ = check(project, "--json")
    assert code == 1
    report = json.loads(out)
    assert report["summary"] == {"runs": 2, "ok": 1, "diverged": 1, "error": 0}
    [old] = [r for r in report["runs"] if r["run_id"] == "old"]
    assert old["status"] == "diverged"
    divergence = old["divergence"]
    assert (divergence["index"], divergence["recorded"], divergence["current"]) == (
        0,
        "step 'first'",
        "step 'second'",
    )
    assert divergence["location"].endswith(f"shopflow.py:{DIVERGING_LINE}")
    assert divergence["source"] == "b = await second()"

    # Only the run that can still resume matters to a deploy; the completed one never replays.
    code, out, _ = check(project, "--unfinished", "old")
    assert code == 1
    assert out.splitlines()[-1] == "1 run replayed: 0 ok, 1 diverged, 0 error(s)"
    assert check(project, "done")[0] == 0

    inspect = project.wf("inspect", "old", "--json", "--replay", PYTHONDONTWRITEBYTECODE="1")
    data = json.loads(inspect.stdout)
    assert data["replays"]["status"] == "diverged"
    assert data["replays"]["divergence"]["index"] == 0
    recorded, current = data["deployment"]["recorded"], data["deployment"]["current"]
    assert recorded and current and recorded != current

    write_flow(project, FLOW)
    code, out, _ = check(project)
    assert code == 0
    assert out.splitlines()[-1] == "2 runs replayed: 2 ok, 0 diverged, 0 error(s)"
    data = json.loads(
        project.wf("inspect", "old", "--json", "--replay", PYTHONDONTWRITEBYTECODE="1").stdout
    )
    assert data["replays"]["status"] == "ok"
    assert data["deployment"]["recorded"] == data["deployment"]["current"]
    assert project.status("old") == "suspended"  # checking executed and wrote nothing


GATHERED = """\
import asyncio

import wf


@wf.step
def tagged(item: int, phase: str) -> str:
    return f"item{item}-{phase}"


async def branch(item: int) -> list[str]:
    return [await tagged(item, "first"), await tagged(item, "second")]


@wf.workflow
async def gathered() -> list[list[str]]:
    results = list(await asyncio.gather(*(branch(i) for i in range(3))))
    await wf.sleep(600)
    return results
"""


def test_a_gather_of_multi_step_branches_is_reported_with_its_own_hint(project: Project) -> None:
    """Unchanged code, yet the run cannot resume: replay would give a branch's second call
    another branch's id. Reported as diverged, with the way out (child runs), not wf.patched."""
    write_flow(project, GATHERED)
    proc = project.spawn("run", "shopflow.py:gathered", "--id", "g", WF_SUSPEND_AFTER="0.1")
    project.wait_for(lambda: project.status("g") == "suspended")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    code, out, err = check(project)
    assert code == 1
    assert "diverged  g  shopflow:gathered" in out.splitlines()
    assert "child run" in err
    assert "wf.patched" not in err


def test_a_workflow_that_no_longer_loads_is_an_error_and_exit_1(project: Project) -> None:
    setup_runs(project)
    (project.root / "shopflow.py").unlink()
    code, out, _ = check(project, "old")
    assert code == 1
    [line, summary] = out.splitlines()
    assert line.startswith("error     old  shopflow:order: ")
    assert "shopflow" in line
    assert summary == "1 run replayed: 0 ok, 0 diverged, 1 error(s)"


def test_a_damaged_journal_is_that_runs_error_and_the_others_are_replayed(
    project: Project,
) -> None:
    setup_runs(project)
    journal = project.store_dir / "runs" / "old" / "journal.jsonl"
    lines = journal.read_text().splitlines()
    lines[1] = '{"type": "step_completed", "op": 0, garbage'
    journal.write_text("\n".join(lines) + "\n")
    code, out, err = check(project)
    assert code == 1, err
    assert "ok        done  shopflow:quick  (1 operation(s) compared)" in out.splitlines()
    [damaged] = [line for line in out.splitlines() if line.startswith("error     old  ")]
    assert "journal.jsonl: line 2 is not valid JSON" in damaged
    assert out.splitlines()[-1] == "2 runs replayed: 1 ok, 0 diverged, 1 error(s)"
    code, out, err = check(project, "--json")
    assert code == 1, err
    data = json.loads(out)
    assert data["summary"] == {"runs": 2, "ok": 1, "diverged": 0, "error": 1}
    assert {r["run_id"]: r["status"] for r in data["runs"]} == {"done": "ok", "old": "error"}
    code, out, err = check(project, "--unfinished")
    assert (code, out.splitlines()[-1]) == (1, "1 run replayed: 0 ok, 0 diverged, 1 error(s)")


def test_inspect_without_replay_imports_nothing(project: Project) -> None:
    setup_runs(project)
    (project.root / "shopflow.py").unlink()  # importing it would fail
    data = project.gather("old")
    assert data["replays"] is None
    assert data["deployment"]["current"] is None
    assert len(data["deployment"]["recorded"]) == 12


def test_usage_errors(project: Project) -> None:
    empty = project.cli("check", "--replay")
    assert empty.exit_code == 0
    assert empty.stdout.strip() == "0 runs replayed: 0 ok, 0 diverged, 0 error(s)"
    assert "hint: no runs to replay in" in empty.stderr
    unknown = project.cli("check", "--replay", "wrun_missing")
    assert unknown.exit_code == 2
    assert unknown.stderr.strip() == "error: no run with id 'wrun_missing'"
    mixed = project.cli("check", "--replay", "--select", "WF1")
    assert mixed.exit_code == 2
    assert "--select and --ignore" in mixed.stderr
    stray = project.cli("check", "--unfinished")
    assert stray.exit_code == 2
    assert "--unfinished and --deployment only apply to --replay" in stray.stderr


APPROVAL = """\
import dataclasses

import wf


@dataclasses.dataclass
class Approval:
    ok: bool


@wf.step
def first() -> str:
    return "a"


@wf.step
def second() -> str:
    return "b"


@wf.workflow
async def approve() -> list[str]:
    await wf.create_hook(Approval, token="approval").next()
    return [await first(), await second()]
"""

# A field added: the payload the run recorded no longer validates, so the code waits again.
APPROVAL_V2 = APPROVAL.replace("    ok: bool\n", "    ok: bool\n    by: str\n")


def test_a_replay_that_waits_before_the_journal_ends_is_an_error(project: Project) -> None:
    """Was: ``ok  appr  shopflow:approve  (4 operation(s) replayed)`` and exit 0, though the
    replay stopped at the hook after 2 and never compared the two steps recorded after it."""
    write_flow(project, APPROVAL)
    proc = project.spawn("run", "shopflow.py:approve", "--id", "appr", WF_SUSPEND_AFTER="0.1")
    project.wait_for(lambda: project.status("appr") == "suspended")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    sent = project.wf("hook", "resume", "approval", "--data", '{"ok": true}')
    assert sent.returncode == 0, sent.stderr
    worker = project.spawn("worker", "--poll", "0.2", WF_INBOX_POLL="0.05")
    try:
        project.wait_for(lambda: project.status("appr") == "completed")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert check(project, "appr")[0] == 0

    write_flow(project, APPROVAL_V2)
    code, out, err = check(project, "appr")
    assert code == 1, out + err
    [line, summary] = out.splitlines()
    assert line.startswith(
        "error     appr  shopflow:approve: replay stopped early, waiting on hook 'approval', "
        "after 2 of 4 recorded operation(s)"
    )
    assert summary == "1 run replayed: 0 ok, 0 diverged, 1 error(s)"
    code, out, _ = check(project, "appr", "--json")
    data = json.loads(out)
    assert code == 1 and data["summary"] == {"runs": 1, "ok": 0, "diverged": 0, "error": 1}
    [run] = data["runs"]
    assert (run["status"], run["ops_recorded"], run["ops_replayed"]) == ("error", 4, 2)


def test_a_named_run_too_damaged_to_read_is_shown_with_what_is_known(project: Project) -> None:
    """Was: ``error     old  : ...`` and ``"workflow": ""``: its ``run.json`` is damaged and
    the record cannot be rebuilt from a journal damaged at line 2, but the journal's first
    event still names the workflow."""
    setup_runs(project)
    (project.store_dir / "runs" / "old" / "run.json").write_text('{"id": "old", garbage')
    journal = project.store_dir / "runs" / "old" / "journal.jsonl"
    lines = journal.read_text().splitlines()
    lines[1] = '{"type": "step_completed", "op": 0, garbage'
    journal.write_text("\n".join(lines) + "\n")
    for args in (("old",), ()):
        code, out, err = check(project, *args)
        assert code == 1, err
        [damaged] = [line for line in out.splitlines() if line.startswith("error     old  ")]
        assert damaged.startswith("error     old  shopflow:order: "), damaged
        assert "journal.jsonl: line 2 is not valid JSON" in damaged
    code, out, _ = check(project, "old", "--json")
    [run] = json.loads(out)["runs"]
    assert (run["run_id"], run["workflow"], run["status"]) == ("old", "shopflow:order", "error")

    lines[0] = '{"type": "run_started", garbage'  # nothing left that names the workflow
    journal.write_text("\n".join(lines) + "\n")
    code, out, _ = check(project, "old")
    assert code == 1
    assert out.splitlines()[0].startswith("error     old  (workflow unknown): ")
    code, out, _ = check(project, "old", "--json")
    [run] = json.loads(out)["runs"]
    assert (run["run_id"], run["workflow"], run["status"]) == ("old", None, "error")
