"""``wf gc``, ``wf store verify``, ``wf run``, ``wf runs`` and ``wf inspect`` over a local store
with damage in its own directories: each names the damaged item once and goes on with the rest."""

from __future__ import annotations

import json
import os
import shutil

from tests.cli.conftest import Project

FLOW = "tests.cli.flows:adder"


def _run(project: Project, n: int) -> str:
    result = project.cli("run", FLOW, "--input", f"[{n}]", "--json", "--quiet")
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["run_id"])


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning: ")]


def test_gc_counts_the_stray_entry_it_passed_over_among_the_damaged(project: Project) -> None:
    """A file where a bucket of ``by-status/completed`` belongs: gc passes over the runs it
    would list, with a warning naming the file, and counts it in ``damaged`` (``--json``)
    and in its summary line, as it counts a run it cannot read. It said the warning, on the
    ``wf.store`` logger, and reported no damage."""
    ids = [_run(project, n) for n in range(2)]
    tree = project.store_dir / "by-status" / "completed"
    [bucket] = list(tree.iterdir())
    shutil.move(bucket, project.root / "aside")
    bucket.write_bytes(b"someone's")
    dry = project.cli("gc", "--older-than", "0s", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    done = json.loads(dry.stdout)
    assert done["runs"] == [] and [d["where"] for d in done["damaged"]] == [str(bucket)]
    [warning] = _warnings(dry.stderr)
    assert f"{bucket}: not a wf index directory; skipped" in warning
    text = project.cli("gc", "--older-than", "0s")
    assert text.exit_code == 0, text.output
    assert len(_warnings(text.stderr)) == 1
    assert text.stdout.strip() == (
        "deleted 0 run(s) of 0 finished, 0 B reclaimed; 1 damaged item(s) left alone (named "
        "on stderr)"
    )
    assert bucket.read_bytes() == b"someone's"
    assert sorted(r["id"] for r in project.runs()) == sorted(ids)


def test_gc_deletes_a_child_whose_parents_children_entry_is_a_file(project: Project) -> None:
    """``children/<parent>`` a file: gc deletes the child, names the file once and counts it;
    the parent, whose children cannot be listed, is left alone and named. Deleting the child
    failed once it was renamed away: exit 3, its directory left in ``tmp/``."""
    result = project.cli("run", "tests.cli.flows:parent", "--input", '"x"', "--json", "-q")
    assert result.exit_code == 0, result.output
    parent = json.loads(result.stdout)["run_id"]
    kids = project.store_dir / "children" / parent
    shutil.rmtree(kids)
    kids.write_bytes(b"someone's")
    done = project.cli("gc", "--older-than", "0s", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["runs"] == [f"{parent}.0"]
    assert sorted((d["kind"], d["where"]) for d in report["damaged"]) == sorted(
        [("finished run", str(project.store_dir / "runs" / parent)), ("index entry", str(kids))]
    )
    assert len(_warnings(done.stderr)) == 2
    assert [n for n in os.listdir(project.store_dir / "tmp") if n.startswith("deleted.")] == []
    assert [r["id"] for r in project.runs()] == [parent]


def test_a_file_where_a_store_directory_belongs(project: Project) -> None:
    """``by-workflow`` a regular file: ``wf store verify`` names it in one line and checks the
    rest (exit 1, as for any damage; it stopped at once, exit 3). ``wf run`` fails with one
    line (exit 3) and leaves no run behind, nor the queue entry it wrote first (left for
    verify to remove five minutes later); ``wf runs`` and ``wf inspect`` of the other runs
    work."""
    run_id = _run(project, 1)
    path = project.store_dir / "by-workflow"
    shutil.rmtree(path)
    path.write_bytes(b"someone's")
    (project.store_dir / "queue" / "garbage").touch()  # the rest is checked
    said = [
        f"{path}: not a directory, where the store keeps its by-workflow/ (nothing there can be "
        "read or checked: move it out of the store and put the directory back)",
        f"{project.store_dir / 'queue' / 'garbage'}: not a queue entry (a name wf never makes; "
        "remove it)",
        "2 problem(s)",
    ]
    verify = project.cli("store", "verify")
    assert (verify.exit_code, verify.stdout.splitlines()) == (1, said)
    failed = project.wf("run", FLOW, "--input", "[2]")  # a process: all it says on stderr
    assert failed.returncode == 3
    assert failed.stderr.startswith("error: ") and len(failed.stderr.splitlines()) == 1
    assert str(path) in failed.stderr
    assert [n for n in os.listdir(project.store_dir / "tmp") if n != "names"] == []
    # Its queue entry, written first, is taken back (``garbage`` is the stray planted above).
    assert os.listdir(project.store_dir / "queue") == ["garbage"]
    assert [r["id"] for r in project.runs()] == [run_id]
    inspected = project.cli("inspect", run_id)
    assert inspected.exit_code == 0, inspected.output
    assert project.cli("store", "verify").stdout.splitlines() == said
    assert path.read_bytes() == b"someone's"


def test_many_stray_names_in_one_bucket_are_one_warning_line(project: Project) -> None:
    """Stray names in a workflow's bucket: ``wf runs -w`` lists the run and says a few strays
    a line each; many are one line, their count and the first three named (60,000 strays
    said 60,000 lines; ``wf store verify`` names each)."""
    run_id = _run(project, 1)
    [bucket] = {p.parent for p in (project.store_dir / "by-workflow").rglob(f"*+{run_id}")}
    few = [bucket / f"stray{i}" for i in range(3)]
    for path in few:
        path.write_bytes(b"")
    result = project.cli("runs", "-w", FLOW, "--json")
    assert result.exit_code == 0, result.stderr
    assert [r["id"] for r in json.loads(result.stdout)] == [run_id]
    assert len(_warnings(result.stderr)) == 3
    many = [bucket / f"stray{i}" for i in range(3, 40)]
    for path in many:
        path.write_bytes(b"")
    result = project.cli("runs", "-w", FLOW, "--json")
    assert result.exit_code == 0, result.stderr
    assert [r["id"] for r in json.loads(result.stdout)] == [run_id]
    [line] = _warnings(result.stderr)
    assert line.startswith(
        f"warning: 40 index entries in {bucket} are damaged and not listed (stray0, stray1, "
        "stray10, ...): not a wf index entry; skipped"
    )


def test_a_file_where_the_schedules_directory_belongs_is_named_once(project: Project) -> None:
    """``schedules`` a file: verify names it once and exits 1 (as docs/cli.md says), and
    ``wf schedules`` says it and lists none (exit 0). Both stopped with exit 3 and ``error:
    cannot list …/schedules``."""
    _run(project, 1)
    where = project.store_dir / "schedules"
    shutil.rmtree(where, ignore_errors=True)
    where.write_bytes(b"someone's")
    verify = project.cli("store", "verify")
    assert verify.exit_code == 1, verify.output
    assert "error:" not in verify.output
    assert [line for line in verify.output.splitlines() if str(where) in line] == [
        f"{where}: not a directory, where the store keeps its schedules/ (nothing there can be "
        "read or checked: move it out of the store and put the directory back)"
    ]
    listed = project.cli("schedules", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == []
    [warning] = _warnings(listed.stderr)
    assert str(where) in warning
    assert where.read_bytes() == b"someone's"


def test_a_file_where_tmp_belongs_is_named_by_verify_and_fails_no_read(project: Project) -> None:
    """``tmp`` a file: verify names it once and exits 1, ``wf runs`` lists the runs; a
    creation fails with one line naming it (exit 3). The store's opening (its sweep of
    ``tmp/``) stopped every command with exit 3."""
    run_id = _run(project, 1)
    where = project.store_dir / "tmp"
    shutil.rmtree(where)
    where.write_bytes(b"someone's")
    verify = project.cli("store", "verify")
    assert verify.exit_code == 1, verify.output
    assert "error:" not in verify.output
    assert [line for line in verify.output.splitlines() if str(where) in line] == [
        f"{where}: not a directory, where the store keeps its tmp/ (nothing there can be "
        "read or checked: move it out of the store and put the directory back)"
    ]
    assert [r["id"] for r in project.runs()] == [run_id]
    made = project.wf("run", FLOW, "--input", "[2]", "--json", "--quiet")  # all its stderr
    assert made.returncode == 3
    assert made.stderr.splitlines() == [f"error: {_NO_TMP.format(where=where)}"]
    assert where.read_bytes() == b"someone's"


_NO_TMP = (
    "{where}: not a directory, where the store keeps its tmp/ (runs can be neither created, "
    "deleted nor packed: move it out of the store and put the directory back)"
)


def test_a_file_where_tmp_belongs_stops_no_deletion_half_way(project: Project) -> None:
    """``tmp`` a file: ``wf gc`` names it once among the damaged items (exit 0), deletes and
    packs nothing and writes no tombstone; ``wf worker --until-idle`` drives the runs that
    need no ``tmp/`` and leaves the one whose child cannot be created due, naming ``tmp``
    (exit 1); nothing is left half written, and with ``tmp/`` back both finish. gc wrote the
    run's tombstone and then failed on the rename (exit 3), a tombstone of a run that
    existed; the worker skipped every run (``cannot open …/tmp/names``) as if each were
    damaged."""
    done = _run(project, 1)
    queued = project.cli("run", FLOW, "--input", "[2]", "--detach", "--quiet")
    assert queued.exit_code == 0, queued.output
    later = queued.stdout.strip()
    parented = project.cli("run", "tests.cli.flows:parent", "--input", '"x"', "-d", "-q")
    assert parented.exit_code == 0, parented.output
    parent = parented.stdout.strip()
    where = project.store_dir / "tmp"
    shutil.rmtree(where)
    where.write_bytes(b"someone's")
    no_tmp = _NO_TMP.format(where=where)

    gc = project.cli("gc", "--older-than", "0s", "--json")
    assert gc.exit_code == 0, gc.output
    report = json.loads(gc.stdout)
    assert report["runs"] == []
    assert [(d["kind"], d["where"]) for d in report["damaged"]] == [("store directory", str(where))]
    assert _warnings(gc.stderr) == [
        f"warning: store directory tmp is damaged and left alone: {no_tmp} (`wf store verify` "
        "names every damaged item)"
    ]
    assert list((project.store_dir / "tombstones").glob("*.jsonl")) == []

    worker = project.wf("worker", "--until-idle")
    assert worker.returncode == 1, worker.stderr
    assert f"{parent} error: StoreError: {no_tmp} (retried later)" in worker.stderr
    status = {r["id"]: r["status"] for r in project.runs()}
    assert status == {done: "completed", later: "completed", parent: "running"}
    verify = project.cli("store", "verify")
    assert verify.exit_code == 1 and len(verify.stdout.splitlines()) == 2, verify.output

    where.unlink()
    where.mkdir()
    assert project.cli("worker", "--until-idle").exit_code == 0
    assert {r["status"] for r in project.runs()} == {"completed"}
    gc = project.cli("gc", "--older-than", "0s", "--json")
    assert gc.exit_code == 0, gc.output
    assert len(json.loads(gc.stdout)["runs"]) == 4
    assert project.cli("store", "verify").stdout.splitlines() == ["store ok"]


def test_gc_says_a_damaged_bucket_its_compaction_meets_too_once(project: Project) -> None:
    """A file where a bucket of ``index/`` belongs: gc's deletions and its compaction both
    pass it over; it is one line and one damaged item. The compaction said it again on the
    store's log."""
    for n in range(2):
        _run(project, n)
    [bucket] = list((project.store_dir / "index").iterdir())
    shutil.move(bucket, project.root / "aside")
    bucket.write_bytes(b"someone's")
    done = project.wf("gc", "--older-than", "0s")  # a process: all it says on stderr
    assert done.returncode == 0, done.stderr
    [warning] = done.stderr.splitlines()
    assert f"{bucket}: not a wf index directory; skipped" in warning
    assert done.stdout.strip().endswith("; 1 damaged item(s) left alone (named on stderr)")
    assert bucket.read_bytes() == b"someone's"
