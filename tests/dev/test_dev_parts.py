"""The parts of ``wf dev`` in-process: configuration, ``wf init``, the watch plan and polling
choice, the check baseline, transactional reloads, and the line format."""

from __future__ import annotations

import asyncio
import io
import json
import shlex
import signal
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wf import UsageError
from wf.cli._app import build_app
from wf.dev._checking import Checker
from wf.dev._config import load_dev_config
from wf.dev._events import (
    Checked,
    Diverged,
    Drained,
    Ready,
    Reloaded,
    RunCrossed,
    RunEnded,
    RunStarted,
    Started,
    Stopped,
)
from wf.dev._lines import render, value
from wf.dev._modules import ProjectModules, ReloadOutcome
from wf.dev._state import DevState
from wf.dev._watch import Change, ChangeKind, _merge, choose_polling, watch_plan
from wf.engine._workflow import registered

# -- configuration and wf init ---------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def test_no_configuration_gives_the_defaults(tmp_path: Path) -> None:
    config = load_dev_config(tmp_path)
    assert config.source is None
    assert config.modules == [] and config.paths == []
    assert config.grace == 30.0 and config.poll is False


def test_the_environment_counts_without_a_configuration_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WF_DEV_GRACE", "3")
    assert load_dev_config(tmp_path).grace == 3.0
    monkeypatch.setenv("WF_DEV_GRACE", "nan")
    with pytest.raises(UsageError, match=r"WF_DEV_GRACE='nan': dev.grace must be a number >= 0"):
        load_dev_config(tmp_path)


def test_wf_toml_wins_over_pyproject_and_paths_are_relative_to_it(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.wf]\nmodules = ["other"]\n')
    write(
        tmp_path / "wf.toml",
        """
        modules = ["app.flows", "scripts/job.py"]
        paths = ["app"]

        [dev]
        run = "app.flows:hello"
        input = {name = "dev"}
        grace = 5
        poll = true
        """,
    )
    sub = tmp_path / "app"
    sub.mkdir()
    config = load_dev_config(sub)  # found by walking up
    assert config.source == tmp_path / "wf.toml"
    assert config.modules == ["app.flows", str((tmp_path / "scripts/job.py").resolve())]
    assert config.paths == [sub.resolve()]
    assert (config.run, config.input, config.has_input) == (
        "app.flows:hello",
        {"name": "dev"},
        True,
    )
    assert (config.grace, config.poll) == (5.0, True)


def test_pyproject_tool_wf(tmp_path: Path) -> None:
    write(
        tmp_path / "pyproject.toml",
        """
        [tool.wf]
        modules = ["flows"]

        [tool.wf.dev]
        concurrency = 4

        [tool.wf.check]
        ignore = ["WF1"]
        """,
    )
    config = load_dev_config(tmp_path)
    assert config.modules == ["flows"] and config.concurrency == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('modules = "flows"', "modules must be a list of strings"),
        ("[dev]\ngrace = -1", "grace must be a number"),
        ("[dev]\ngrace = nan", "grace must be a number (of seconds )?>= 0"),
        ("[dev]\ngrace = inf", "grace must be a number (of seconds )?>= 0"),
        ("[dev]\npoll = 1", "poll must be true or false"),
        ("[dev]\nrun = 3", "run must be a string"),
        ("[dev]\nreload = true", "unknown key 'reload'"),
        ("modules = [", "cannot read configuration"),
    ],
)
def test_bad_configuration_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "wf.toml", text + "\n")
    with pytest.raises(UsageError, match=message):
        load_dev_config(tmp_path)


def test_wf_init_writes_a_starter_and_refuses_to_overwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "pyproject.toml", '# my project\n[project]\nname = "shop"\n')
    write(tmp_path / "app" / "__init__.py", "")
    write(tmp_path / "app" / "flows.py", "import wf\n\n@wf.workflow\nasync def f() -> None: ...\n")
    write(tmp_path / "app" / "broken.py", "import wf\nimport no_such_dep\n@wf.workflow\n")
    write(tmp_path / "app" / "util.py", "X = 1\n")
    write(tmp_path / ".venv" / "lib" / "x.py", "@wf.workflow\n")
    runner = CliRunner()
    first = runner.invoke(build_app(), ["init"])
    assert first.exit_code == 0, first.output
    # A module that fails to import is never listed.
    assert "wrote [tool.wf] to pyproject.toml (modules: app.flows)" in first.stdout
    text = (tmp_path / "pyproject.toml").read_text()
    assert text.startswith('# my project\n[project]\nname = "shop"\n')  # the rest kept as is
    config = load_dev_config(tmp_path)
    assert config.modules == ["app.flows"]
    assert config.paths == [tmp_path.resolve()]
    assert config.source == tmp_path / "pyproject.toml"

    again = runner.invoke(build_app(), ["init"])
    assert again.exit_code == 2
    assert "has a [tool.wf] table already" in again.stderr
    assert (tmp_path / "pyproject.toml").read_text() == text


def test_wf_dev_rejects_bad_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    missing = runner.invoke(build_app(), ["dev", "nowhere/flows.py"])
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    unknown = runner.invoke(build_app(), ["dev", "no_such_module_here"])
    assert unknown.exit_code == 2 and "no module named" in unknown.stderr
    bad_target = runner.invoke(build_app(), ["dev", "--run", "flows"])
    assert bad_target.exit_code == 2 and "invalid target" in bad_target.stderr
    lonely_input = runner.invoke(build_app(), ["dev", "--input", "1"])
    assert lonely_input.exit_code == 2 and "--input needs --run" in lonely_input.stderr


# -- watching --------------------------------------------------------------------------------


def test_polling_is_chosen_on_request_and_on_network_mounts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WF_DEV_POLL", raising=False)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nhost:/x {tmp_path} nfs4 rw 0 0\n")
    local = tmp_path.parent / "elsewhere"
    assert choose_polling([local], requested=False, mounts=str(mounts)).polling is False
    choice = choose_polling([tmp_path / "app"], requested=False, mounts=str(mounts))
    assert choice.polling and "nfs4" in choice.reason
    assert choose_polling([local], requested=True, mounts=str(mounts)).polling
    monkeypatch.setenv("WF_DEV_POLL", "1")
    assert "WF_DEV_POLL" in choose_polling([local], requested=False, mounts=str(mounts)).reason


def test_the_watch_plan_skips_stores_virtualenvs_and_caches(tmp_path: Path) -> None:
    for name in ("app", ".workflows", "__pycache__", "myenv", "data"):
        (tmp_path / name).mkdir()
    (tmp_path / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    store = tmp_path / "data"  # a store by another name (WF_DIR)
    flat, deep = watch_plan([tmp_path], ignore=[store])
    assert flat == [tmp_path.resolve()]
    assert deep == [(tmp_path / "app").resolve()]


def test_bursts_are_merged_per_file() -> None:
    a, b = Path("/p/a.py"), Path("/p/b.py")
    merged = _merge(
        [
            Change(ChangeKind.ADDED, a),
            Change(ChangeKind.MODIFIED, a),
            Change(ChangeKind.MODIFIED, b),
            Change(ChangeKind.DELETED, b),
        ]
    )
    assert merged == [Change(ChangeKind.ADDED, a), Change(ChangeKind.DELETED, b)]


# -- the check baseline ----------------------------------------------------------------------

CLOCK = """
import time
import wf

@wf.workflow
async def flow() -> float:
    return time.time()
"""


def test_known_findings_do_not_block_but_new_ones_and_syntax_errors_do(tmp_path: Path) -> None:
    path = write(tmp_path / "flows.py", CLOCK)
    checker = Checker(tmp_path)
    baseline = checker.check([path])
    assert len(baseline.result.findings) == 1 and len(baseline.new) == 1
    checker.accept(baseline)

    write(path, "# a comment moves the finding down\n" + CLOCK)
    moved = checker.check([path])
    assert moved.result.findings and not moved.new and not moved.blocking

    write(path, CLOCK + "\n\n@wf.workflow\nasync def other() -> float:\n    return time.time()\n")
    second = checker.check([path])
    assert len(second.new) == 1 and second.blocking

    write(path, CLOCK.replace("-> float:", "-> float"))
    broken = checker.check([path])
    assert broken.result.errors and broken.blocking


def test_a_symlink_loop_in_the_project_is_a_check_error_and_stops_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not loaded here, whatever module named "flows" an earlier test in this process loaded
    # (an in-process `wf run flows:...`): the reload below then retries every project file.
    monkeypatch.delitem(sys.modules, "flows", raising=False)
    write(tmp_path / "flows.py", CLOCK)
    loop = tmp_path / "loop.py"
    loop.symlink_to("loop.py")  # was: a RuntimeError out of the check, ending wf dev
    outcome = Checker(tmp_path).check([tmp_path, loop])
    [error] = outcome.result.errors
    assert (error.code, error.path) == ("read-error", str(loop))
    assert len(outcome.result.findings) == 1
    # A reload that sees it among the changed files does not fail on it (the runner is not
    # loaded, so every project file is one to retry).
    modules = ProjectModules([tmp_path], ["flows"])
    assert modules.affected([loop]) == [loop]
    assert modules.display(loop) == str(loop)


# -- transactional reloads -------------------------------------------------------------------


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """A uniquely named package in a project directory (the cwd); its modules are removed
    from ``sys.modules`` afterwards."""
    name = f"devpkg_{uuid.uuid4().hex[:8]}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    write(tmp_path / name / "__init__.py", "")
    write(tmp_path / name / "util.py", "def word() -> str:\n    return 'one'\n")
    write(
        tmp_path / name / "flows.py",
        f"""
        import wf
        from {name}.util import word

        @wf.workflow
        async def say() -> str:
            return word()

        @wf.workflow
        async def doomed() -> str:
            return "soon gone"
        """,
    )
    try:
        yield tmp_path / name, name
    finally:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]


def test_reload_picks_up_dependencies_and_forgets_deleted_workflows(
    package: tuple[Path, str],
) -> None:
    folder, name = package
    modules = ProjectModules([Path.cwd()], [f"{name}.flows"])
    assert modules.load().ok
    old_flows = sys.modules[f"{name}.flows"]
    assert registered(f"{name}.flows:doomed") is not None

    write(folder / "util.py", "def word() -> str:\n    return 'two'\n")
    flows = (folder / "flows.py").read_text()
    write(folder / "flows.py", flows[: flows.index("@wf.workflow\nasync def doomed")])
    assert [p.name for p in modules.affected([folder / "util.py", folder / "x.py"])] == ["util.py"]
    outcome = modules.reload([folder / "util.py", folder / "flows.py"])
    assert outcome.ok, outcome.error
    assert outcome.modules[0] == f"{name}.flows"
    assert sys.modules[f"{name}.flows"] is not old_flows
    # A module that imported `word` by name sees the new one: everything was re-imported.
    assert sys.modules[f"{name}.flows"].word() == "two"
    assert registered(f"{name}.flows:doomed") is None
    assert registered(f"{name}.flows:say") is sys.modules[f"{name}.flows"].say


def test_the_modules_new_code_imports_first_are_found_without_importing_them(
    package: tuple[Path, str],
) -> None:
    folder, name = package
    modules = ProjectModules([Path.cwd()], [f"{name}.flows"])
    assert modules.load().ok
    write(folder / "sub" / "__init__.py", "from . import deep\n")
    write(folder / "sub" / "deep.py", "import json\nfrom ..leaf import x\n")
    write(folder / "leaf.py", "raise SystemExit('imported')\nx = 1\n")
    write(folder / "lazy.py", "raise SystemExit('imported')\n")
    write(folder / "dyn.py", "raise SystemExit('imported')\n")
    flows = (folder / "flows.py").read_text()
    write(
        folder / "flows.py",
        f"import importlib\nfrom {name} import sub\nfrom {name}.util import word as w\n"
        f"importlib.import_module('{name}.dyn')\n"
        f"def later():\n    import {name}.lazy\n" + flows,
    )
    found = modules.first_imports([folder / "flows.py"])
    # Through `from pkg import sub`, a relative `from . import deep` and `from ..leaf`; not
    # util (loaded already), not an import in a function body, not importlib's.
    assert sorted(p.relative_to(folder).as_posix() for p in found) == [
        "leaf.py",
        "sub/__init__.py",
        "sub/deep.py",
    ]
    assert f"{name}.leaf" not in sys.modules


def test_an_import_of_a_name_too_long_for_the_file_system_is_simply_not_found(
    package: tuple[Path, str],
) -> None:
    """``import aaaa…`` (a name longer than a file name may be) is not a project module: no
    ``OSError`` out of looking for its file."""
    folder, name = package
    modules = ProjectModules([Path.cwd()], [f"{name}.flows"])
    assert modules.load().ok
    write(folder / "flows.py", "import " + "a" * 300 + "\n")
    assert modules.first_imports([folder / "flows.py"]) == []


def test_a_runner_module_that_is_gone_is_found_before_any_drain(
    package: tuple[Path, str],
) -> None:
    folder, name = package
    modules = ProjectModules([Path.cwd()], [f"{name}.flows"])
    assert modules.load().ok
    assert modules.missing_runners() == []
    (folder / "flows.py").rename(folder / "renamed.py")
    assert modules.missing_runners() == [f"{name}.flows"]


def test_a_failed_reload_puts_the_old_code_back(package: tuple[Path, str]) -> None:
    folder, name = package
    modules = ProjectModules([Path.cwd()], [f"{name}.flows"])
    assert modules.load().ok
    before = {m: sys.modules[m] for m in (name, f"{name}.util", f"{name}.flows")}
    say = registered(f"{name}.flows:say")

    write(folder / "util.py", "def word() -> str:\n    return 'two'\n\nraise ValueError('nope')\n")
    outcome = modules.reload([folder / "util.py"])
    assert not outcome.ok
    assert outcome.error == f"{name}/util.py:4: ValueError: nope"
    assert {m: sys.modules[m] for m in before} == before
    assert registered(f"{name}.flows:say") is say
    assert registered(f"{name}.flows:doomed") is not None


def test_a_reload_whose_import_never_returns_is_given_up_with_the_old_code_serving(
    package: tuple[Path, str],
) -> None:
    """The import is interrupted after ``import_wait`` seconds: given up, it names the line
    it hangs on, and the serving modules and workflows are back; nothing of it runs on, so a
    workflow it would have declared later is never registered, and the next reload works."""
    folder, name = package
    modules = ProjectModules([Path.cwd()], [f"{name}.flows"], import_wait=0.2)
    assert modules.load().ok
    before = {m: sys.modules[m] for m in (name, f"{name}.util", f"{name}.flows")}
    say = registered(f"{name}.flows:say")
    flows = (folder / "flows.py").read_text()
    write(
        folder / "flows.py",
        f"""
        import time
        import wf
        from {name}.util import word

        time.sleep(0.6)

        @wf.workflow
        async def say() -> str:
            return "late"
        """,
    )
    outcome = modules.reload([folder / "flows.py"])
    assert (outcome.ok, outcome.stuck) == (False, True)
    assert outcome.error is not None
    assert outcome.error.startswith(f"{name}/flows.py:5: the import has not returned after 0 s")
    assert {m: sys.modules[m] for m in before} == before
    assert registered(f"{name}.flows:say") is say
    time.sleep(0.8)  # past the import's own end, had it run on
    assert {m: sys.modules[m] for m in before} == before
    assert registered(f"{name}.flows:say") is say
    write(folder / "flows.py", flows)
    write(folder / "util.py", "def word() -> str:\n    return 'two'\n")
    assert modules.reload([folder / "flows.py"]).ok  # no lock left held: imports again
    assert sys.modules[f"{name}.util"].word() == "two"


def test_an_import_that_spins_is_given_up_and_the_wait_is_put_back(
    package: tuple[Path, str],
) -> None:
    """``while True`` swallowing ``Exception`` is interrupted too; the SIGALRM handler and
    the interval timer are the ones from before the import."""
    folder, name = package
    modules = ProjectModules([Path.cwd()], [f"{name}.flows"], import_wait=0.2)
    assert modules.load().ok
    write(
        folder / "util.py",
        "while True:\n    try:\n        pass\n    except Exception:\n        pass\n",
    )
    previous = signal.getsignal(signal.SIGALRM)
    timer = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's, maybe
    outcome = modules.reload([folder / "util.py"])
    assert outcome.stuck and outcome.error is not None
    assert outcome.error.startswith(f"{name}/util.py:"), outcome.error
    assert signal.getsignal(signal.SIGALRM) is previous
    left, every = signal.getitimer(signal.ITIMER_REAL)
    assert every == timer[1] and (left <= timer[0] - 0.2 if timer[0] else left == 0.0)


def test_a_timer_set_before_the_import_that_ends_during_it_still_fires(
    package: tuple[Path, str],
) -> None:
    """A one-shot timer set before a slow import (pytest-timeout's, say) that runs out while
    it runs is not lost: its handler runs once the import is done."""
    folder, name = package
    write(folder / "util.py", "import time\ntime.sleep(0.4)\n")
    modules = ProjectModules([Path.cwd()], [f"{name}.util"], import_wait=5)
    fired: list[int] = []
    outer = signal.getitimer(signal.ITIMER_REAL)
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    began = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        assert modules.load().ok
        deadline = time.monotonic() + 2
        while not fired and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer[0]:
            left = max(outer[0] - (time.monotonic() - began), 0.01)
            signal.setitimer(signal.ITIMER_REAL, left, outer[1])
    assert fired == [signal.SIGALRM]


def test_an_import_given_up_never_leaves_the_import_system_half_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given up at any moment (looks made very often here), the import is never interrupted
    inside importlib's own code: no import lock is left held (another thread's import would
    block for good) and nothing is swallowed by importlib's callbacks."""
    import _imp
    import importlib
    import importlib._bootstrap as bootstrap  # type: ignore[import-not-found]

    import wf.dev._modules as dev_modules

    name = f"heavy_{uuid.uuid4().hex[:8]}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(dev_modules, "_LOOK_EVERY", 0.0005)
    for i in range(200):
        write(tmp_path / name / f"m{i}.py", f"X = {i}\n")
    write(tmp_path / name / "__init__.py", "")
    write(
        tmp_path / f"{name}_all.py",
        f"import importlib\nfor i in range(200):\n    importlib.import_module(f'{name}.m{{i}}')\n",
    )
    swallowed: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", swallowed.append)
    deadline = time.monotonic() + 4
    trials = 0
    try:
        while time.monotonic() < deadline:
            for module in [m for m in sys.modules if m.startswith(name)]:
                del sys.modules[module]
            importlib.invalidate_caches()
            wait = 0.0005 * (trials % 16)
            ProjectModules([tmp_path], [f"{name}_all"], import_wait=wait).load()
            trials += 1
            assert not _imp.lock_held(), f"import lock left held (trial {trials})"
            locks = [(n, ref()) for n, ref in list(bootstrap._module_locks.items())]
            held = [n for n, lock in locks if lock is not None and lock.count]
            assert not held, held
        assert not swallowed, swallowed
    finally:
        while _imp.lock_held():
            _imp.release_lock()
        for module in [m for m in sys.modules if m.startswith(name)]:
            del sys.modules[module]


def test_an_import_given_up_inside_a_library_says_to_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted inside a library outside the project, the import may leave that library
    half loaded (modules it finished stay in ``sys.modules``): the error says to restart."""
    lib = f"extlib_{uuid.uuid4().hex[:8]}"
    project, site_dir = tmp_path / "proj", tmp_path / "site"
    write(site_dir / lib / "reg.py", "seen = set()\n")
    write(site_dir / lib / "__init__.py", "import time\nfrom . import reg\ntime.sleep(2)\n")
    write(project / "flows_lib.py", f"import {lib}\n")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(site_dir))
    monkeypatch.syspath_prepend(str(project))
    try:
        outcome = ProjectModules([project], ["flows_lib"], import_wait=0.2).load()
    finally:
        for module in [m for m in sys.modules if m.startswith((lib, "flows_lib"))]:
            del sys.modules[module]
    assert outcome.stuck and outcome.error is not None
    assert outcome.error.startswith("flows_lib.py:1: "), outcome.error
    assert f"may hold part of {lib}" in outcome.error
    assert "restart wf dev (Ctrl-C and start it again)" in outcome.error


def test_a_module_is_imported_on_the_loop_thread(package: tuple[Path, str]) -> None:
    """As by ``wf worker``: module-level objects bound to the thread that made them (an
    SQLite connection, ``threading.local``, the running event loop) serve the steps."""
    import contextvars
    import importlib

    folder, name = package
    mark: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")
    setattr(importlib.import_module(name), "mark", mark)  # noqa: B010
    write(
        folder / "util.py",
        f"""
        import asyncio, signal, sqlite3, sys, threading
        DB = sqlite3.connect(":memory:")
        LOOP = asyncio.get_running_loop()
        TASK = asyncio.get_running_loop().create_task(asyncio.sleep(0))
        MAIN = threading.current_thread() is threading.main_thread()
        signal.signal(signal.SIGUSR2, signal.getsignal(signal.SIGUSR2))
        MARK = sys.modules[{name!r}].mark.get()
        def word() -> str:
            return str(DB.execute("select 'two'").fetchone()[0])
        """,
    )

    async def main() -> tuple[object, ...]:
        mark.set("set")
        outcome = ProjectModules([Path.cwd()], [f"{name}.flows"]).load()
        assert outcome.ok, outcome.error
        util = sys.modules[f"{name}.util"]
        await util.TASK
        return util.LOOP is asyncio.get_running_loop(), util.MARK, util.MAIN, util.word()

    assert asyncio.run(main()) == (True, "set", True, "two")


def test_a_prepared_reload_serves_the_old_code_until_it_is_committed(
    package: tuple[Path, str],
) -> None:
    folder, name = package
    modules = ProjectModules([Path.cwd()], [f"{name}.flows"])
    assert modules.load().ok
    old_flows, say = sys.modules[f"{name}.flows"], registered(f"{name}.flows:say")

    write(folder / "util.py", "def word() -> str:\n    return 'two'\n")
    prepared = modules.prepare([folder / "util.py"])
    assert prepared.ok, prepared.error
    # Imported, but kept aside: the old modules and workflows still serve (during a drain).
    assert sys.modules[f"{name}.flows"] is old_flows
    assert registered(f"{name}.flows:say") is say
    modules.commit(prepared)
    new_flows = sys.modules[f"{name}.flows"]
    assert new_flows is not old_flows and new_flows.word() == "two"
    assert registered(f"{name}.flows:say") is new_flows.say


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("def word() -> str\n    return 'x'\n", "util.py:1: SyntaxError: expected ':'"),
        ("from os import no_such_name\n", "util.py:1: ImportError: cannot import name"),
        ("def word() -> str:\n    return 'x'\n\nword2()\n", "util.py:4: NameError: name"),
    ],
)
def test_a_prepared_reload_that_does_not_import_changes_nothing(
    package: tuple[Path, str], source: str, error: str
) -> None:
    folder, name = package
    modules = ProjectModules([Path.cwd()], [f"{name}.flows"])
    assert modules.load().ok
    before = {m: sys.modules[m] for m in (name, f"{name}.util", f"{name}.flows")}
    write(folder / "util.py", source)
    prepared = modules.prepare([folder / "util.py"])
    assert not prepared.ok
    assert prepared.error is not None and f"{name}/{error}" in prepared.error
    assert "\n" not in prepared.error
    assert {m: sys.modules[m] for m in before} == before
    assert registered(f"{name}.flows:doomed") is not None


def test_code_raising_keyboard_interrupt_at_import_is_an_import_error_not_a_ctrl_c(
    package: tuple[Path, str],
) -> None:
    folder, name = package
    modules = ProjectModules([Path.cwd()], [f"{name}.flows"])
    util = folder / "util.py"
    fine = util.read_text()

    def as_wf_dev_serves(call: Callable[[], ReloadOutcome]) -> ReloadOutcome:
        # wf dev takes SIGINT on its event loop, whose handler raises nothing: a
        # KeyboardInterrupt out of an import is the code's own (was: wf dev stopped, exit 130).
        async def go() -> ReloadOutcome:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGINT, lambda: None)
            try:
                return call()
            except KeyboardInterrupt:  # not left to end the test session
                pytest.fail("the KeyboardInterrupt the code raised stopped wf dev")
            finally:
                loop.remove_signal_handler(signal.SIGINT)

        return asyncio.run(go())

    write(util, "raise KeyboardInterrupt\n")
    first = as_wf_dev_serves(modules.load)
    assert (first.ok, first.error) == (False, f"{name}/util.py:1: KeyboardInterrupt")
    write(util, fine)
    assert as_wf_dev_serves(modules.load).ok
    before = {m: sys.modules[m] for m in (name, f"{name}.util", f"{name}.flows")}

    write(util, "raise KeyboardInterrupt\n")
    prepared = as_wf_dev_serves(lambda: modules.prepare([util]))
    assert (prepared.ok, prepared.error) == (False, f"{name}/util.py:1: KeyboardInterrupt")
    assert {m: sys.modules[m] for m in before} == before
    # Under Python's own SIGINT handler a KeyboardInterrupt may be a real Ctrl-C: it stops.
    with pytest.raises(KeyboardInterrupt):
        modules.prepare([util])


# -- events, lines, state ----------------------------------------------------------------------


def test_values_are_bare_words_or_json_strings() -> None:
    assert value("flows.py:12") == "flows.py:12"
    assert value(["a.py", "b.py"]) == "a.py,b.py"
    assert value("step 'one'") == "\"step 'one'\""
    assert value("") == '""'
    assert value(True) == "yes"


def test_lines_split_back_into_fields() -> None:
    event = Diverged("wrun_1", "flows:f", 2, "step 'a'", "step 'b'", "flows.py:9")
    (text,) = list(render(event))
    words = shlex.split(text)
    assert words[:2] == ["wf-dev", "diverged"]
    fields = dict(w.split("=", 1) for w in words[2:])
    assert fields["recorded"] == "step 'a'" and fields["location"] == "flows.py:9"
    ended = RunEnded("wrun_1", "flows:f", "completed", {"a": [1, 2]}, None, 0.01)
    (text,) = list(render(ended))
    fields = dict(w.split("=", 1) for w in shlex.split(text)[2:])
    assert json.loads(fields["output"]) == {"a": [1, 2]}
    assert fields["inspect"] == "wf inspect wrun_1"


def test_counters_are_since_the_last_reload() -> None:
    state = DevState()
    state.apply(Ready(1))
    state.apply(RunStarted("wrun_1"))
    state.apply(RunEnded("wrun_1", "f", "failed", None, {"message": "boom"}, 0.1))
    assert (state.counters.started, state.counters.failed) == (1, 1)
    assert state.recent[-1].detail == "boom"
    state.apply(Drained([], [], 0.0))
    state.apply(Reloaded(2, ["flows.py"], ["flows"], 0.2, {}, 0))
    assert state.generation == 2 and state.counters.started == 0
    assert "flows.py changed" in state.last_reload


def test_the_live_console_renders_every_event() -> None:
    from rich.console import Console

    from wf.check import Finding
    from wf.dev._live import LiveRenderer

    out = io.StringIO()
    live = LiveRenderer(Console(file=out, width=100, force_terminal=True))
    finding = Finding("flows.py", 3, 5, "WF101", "reads the clock", "use wf.now()")
    for event in [
        Started(["."], False, "file-system events", ".workflows", ["flows"], None),
        Ready(1),
        Checked(1, [finding], [finding], [], 0.01),
        RunStarted("wrun_1"),
        RunCrossed("wrun_1", "v1"),
        RunEnded("wrun_1", "flows:f", "completed", "x", None, 0.1),
        Diverged("wrun_2", "flows:g", 0, "step 'a'", "step 'b'", "flows.py:9"),
        Reloaded(2, ["flows.py"], ["flows"], 0.2, {}, 1),
        Stopped(2),
    ]:
        live(event)
    text = out.getvalue()
    assert "WF101" in text and "wrun_2 diverges" in text and "wf inspect wrun_1" in text
    assert "pinned to deployment v1" in text


def test_hostile_text_is_shown_visibly_on_the_console_and_in_lines() -> None:
    # A run's error and workflow name are anyone's: markup stays text, controls are shown.
    import re

    from rich.console import Console

    from wf.dev._live import LiveRenderer

    hostile = "[/] \x1b]0;pwned\x07 \x1b[2J safe\rEVIL \x9b31m \u202egnp"
    ended = RunEnded("wrun_1", "wf[/]name\u202e", "failed", None, {"message": hostile}, 0.1)
    out = io.StringIO()
    LiveRenderer(Console(file=out, width=300, force_terminal=False))(ended)
    raw = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")
    text = out.getvalue()
    assert r"[/] \x1b]0;pwned\x07 \x1b[2J safe\rEVIL \x9b31m \u202egnp" in text
    assert "wf[/]name\\u202e" in text and not raw.search(text)
    (line,) = render(ended)
    assert not raw.search(line)  # JSON escapes C0; C1 and bidi too, the same JSON string
    assert 'workflow="wf[/]name\\u202e"' in line


def test_known_findings_are_shown_once_and_later_only_new_ones() -> None:
    from rich.console import Console

    from wf.check import Finding
    from wf.dev._live import LiveRenderer

    known = Finding("flows.py", 3, 5, "WF101", "reads the clock", "use wf.now()")
    fresh = Finding("flows.py", 9, 5, "WF102", "draws random numbers", "use wf.random()")
    at_start = Checked(1, [known], [], [], 0.01, initial=True)
    refused = Checked(1, [known, fresh], [fresh], [], 0.01)
    assert sum("WF101" in text for text in render(at_start)) == 1
    lines = list(render(refused))
    assert any("WF102" in text for text in lines)
    assert not any("WF101" in text for text in lines)

    out = io.StringIO()
    live = LiveRenderer(Console(file=out, width=100, force_terminal=True))
    live(at_start)
    shown = out.getvalue()
    live(refused)
    later = out.getvalue()[len(shown) :]
    assert "WF101" in shown and "WF102" in later and "WF101" not in later


def test_a_reload_waiting_for_a_step_says_which_and_how_long() -> None:
    from rich.console import Console

    from wf.dev._events import DrainWaiting
    from wf.dev._live import LiveRenderer

    event = DrainWaiting(["step 'charge' of wrun_1"], 30.0)
    assert list(render(event)) == ["wf-dev waiting steps=\"step 'charge' of wrun_1\" grace=30.0"]
    out = io.StringIO()
    LiveRenderer(Console(file=out, width=200, force_terminal=False))(event)
    text = out.getvalue()
    assert "waiting for step 'charge' of wrun_1 to finish before reloading (at most 30s" in text


def test_a_waiting_reload_offers_a_restart_and_says_when_it_happened() -> None:
    from rich.console import Console

    from wf.dev._events import DrainWaiting, StepsRestarted
    from wf.dev._live import LiveRenderer

    waiting = DrainWaiting(["step 'charge' of wrun_1"], 30.0, [75.2], 11.0, "press r")
    (text,) = render(waiting)
    fields = dict(w.split("=", 1) for w in shlex.split(text)[2:])
    assert fields == {
        "steps": "step 'charge' of wrun_1",
        "running_ms": "75200",
        "waited_ms": "11000",
        "grace": "30.0",
        "restart": "press r",
    }
    assert list(render(StepsRestarted(["step 'charge' of wrun_1"]))) == [
        "wf-dev restarting steps=\"step 'charge' of wrun_1\""
    ]
    assert "reason=" in next(iter(render(StepsRestarted([]))))

    out = io.StringIO()
    live = LiveRenderer(Console(file=out, width=300, force_terminal=False))
    live(waiting)
    live(StepsRestarted(["step 'charge' of wrun_1"]))
    live(StepsRestarted([]))
    live.close()
    shown = out.getvalue()
    assert "step 'charge' of wrun_1 (running 1m15s)" in shown
    assert "waited 11s so far, at most 30s" in shown
    assert "press r to restart it now on the new code" in shown
    assert "restarting step 'charge' of wrun_1: abandoned now, it runs again" in shown
    assert "no reload is waiting for a step" in shown


def test_a_stop_waiting_for_a_step_says_stopping_not_reloading() -> None:
    from rich.console import Console

    from wf.dev._events import Drained, DrainWaiting, StepsRestarted, Stopped, Stopping
    from wf.dev._live import LiveRenderer

    out = io.StringIO()
    live = LiveRenderer(Console(file=out, width=300, force_terminal=False))
    live(Stopping("Ctrl-C: running steps finish first; press r or Ctrl-C again cuts them short"))
    live(DrainWaiting(["step 'charge' of wrun_1"], 30.0, [5.0], 1.0, "press r", stopping=True))
    live(StepsRestarted(["step 'charge' of wrun_1"], stopping=True))
    live(Drained([], ["wrun_1"], 1.2, stopping=True))
    live(Stopped(1))
    shown = out.getvalue()
    assert "stopping: Ctrl-C: running steps finish first; press r or Ctrl-C again" in shown
    assert "stopping: waiting for step 'charge' of wrun_1 (running 5s) to finish" in shown
    assert "press r or Ctrl-C again to cut it short now (it runs again on resume)" in shown
    assert "cutting short step 'charge' of wrun_1" in shown
    assert "1 run(s) had a step cut short" in shown
    assert "wf dev stopped" in shown
    assert "reloading" not in shown and "new code" not in shown


def test_a_runner_module_missing_at_start_is_named_not_an_importlib_frame(
    package: tuple[Path, str],
) -> None:
    folder, name = package
    (folder / "flows.py").unlink()
    outcome = ProjectModules([Path.cwd()], [f"{name}.flows"]).load()
    assert not outcome.ok
    assert outcome.error == f"runner module(s) {name}.flows not found"
    # A module the runner itself imports is still named where the runner imports it.
    write(folder / "flows.py", "import nosuchmod_here\n")
    outcome = ProjectModules([Path.cwd()], [f"{name}.flows"]).load()
    assert outcome.error == (
        f"{name}/flows.py:1: ModuleNotFoundError: No module named 'nosuchmod_here'"
    )


def _printed_kinds() -> set[str]:
    """Every kind ``wf dev --plain`` can print: the first argument of each ``line`` and
    ``_finding`` call in ``wf.dev._lines`` (``run-{status}``: each end a run can have), and
    the kind of an event no branch renders (``line(event.kind)``)."""
    import ast
    import inspect

    import wf.dev._events as events
    import wf.dev._lines as lines

    kinds: set[str] = set()
    ended = {"completed", "failed", "cancelled"}
    for node in ast.walk(ast.parse(inspect.getsource(lines))):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("line", "_finding")
            and node.args
        ):
            continue
        first = node.args[0]
        if isinstance(first, ast.JoinedStr):
            prefix = "".join(
                str(part.value) for part in first.values if isinstance(part, ast.Constant)
            )
            kinds |= {prefix + status for status in ended}
        else:
            kinds |= {
                c.value
                for c in ast.walk(first)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }
    source = inspect.getsource(lines)
    for _name, cls in inspect.getmembers(events, inspect.isclass):
        if (
            issubclass(cls, events.DevEvent)
            and cls not in (events.DevEvent, events.RunEnded)  # run-completed, ...: above
            and f'"{cls.kind}"' not in source
        ):
            kinds.add(cls.kind)  # printed by the fallback, line(event.kind)
    return kinds


def test_every_kind_wf_dev_prints_is_in_the_docs_table_and_only_those() -> None:
    """docs/dev.md's table of ``--plain`` kinds and the kinds the code prints are the same."""
    import re

    text = (Path(__file__).parents[2] / "docs" / "dev.md").read_text(encoding="utf-8")
    table = text.split("| kind | fields |", 1)[1].split("\n\n", 1)[0]
    documented = {
        kind
        for row in table.splitlines()[2:]
        for kind in re.findall(r"`([a-z-]+)`", row.split("|")[1])
    }
    assert _printed_kinds() == documented
