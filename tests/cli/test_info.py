"""``wf info``, ``wf help``, the project found from a subdirectory, and targets that are wrong."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.conftest import Project


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


SHOP = """
import wf


@wf.step
def add(a: int, b: int) -> int:
    return a + b


@wf.workflow
async def order(a: int) -> int:
    return await add(a, 1)


@wf.workflow
async def refund(a: int) -> int:
    return a
"""


@pytest.fixture
def shop(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A project with a pyproject.toml holding [tool.wf], and no WF_DIR to lean on."""
    monkeypatch.delenv("WF_DIR")
    project.env.pop("WF_DIR")
    write(project.root / "pyproject.toml", "[tool.wf]\n")
    write(project.root / "shop.py", SHOP)
    (project.root / "sub" / "deeper").mkdir(parents=True)
    return project


def test_commands_in_a_subdirectory_use_the_projects_store(
    shop: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = shop.wf("run", "shop.py:order", "-i", "1", "-q")
    assert done.returncode == 0, done.stderr
    monkeypatch.chdir(shop.root / "sub" / "deeper")
    listed = shop.cli("runs", "--json")
    assert [r["workflow"] for r in json.loads(listed.stdout)] == ["shop:order"]
    info = shop.cli("info", "--json")
    data = json.loads(info.stdout)
    assert data["project"] == str(shop.root.resolve())
    assert data["store"] == str(shop.root.resolve() / ".workflows")
    assert data["config"] == str(shop.root.resolve() / "pyproject.toml")
    text = shop.cli("info").stdout
    assert re.search(r"^store\s+.*\.workflows$", text, re.M), text


def test_a_worker_started_in_a_subdirectory_imports_from_the_project_root(shop: Project) -> None:
    queued = shop.wf("run", "shop.py:order", "-i", "41", "--detach")
    assert queued.returncode == 0, queued.stderr
    assert "a worker picks it up" in queued.stderr
    sub = shop.root / "sub" / "deeper"
    done = subprocess.run(
        [sys.executable, "-m", "wf", "worker", "--until-idle"],
        cwd=sub,
        env=shop.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "shop:order completed" in done.stderr


def test_a_worker_that_cannot_import_a_run_says_so_and_fails_until_idle(shop: Project) -> None:
    queued = shop.wf("run", "shop.py:order", "-i", "1", "--detach", "-q")
    run_id = queued.stdout.strip()
    (shop.root / "shop.py").rename(shop.root / "moved.py")
    worker = shop.wf("worker", "--until-idle")
    assert worker.returncode == 1, worker.stderr
    assert f"ERROR {run_id}: cannot load its workflow here" in worker.stderr
    assert "could not be driven" in worker.stderr
    assert "start it in the project" in worker.stderr  # where the worker looked


def test_a_worker_that_meets_a_module_failing_its_import_does_not_say_where_to_start(
    shop: Project,
) -> None:
    """The module is found and raises: starting the worker elsewhere would not help."""
    queued = shop.wf("run", "shop.py:order", "-i", "1", "--detach", "-q")
    run_id = queued.stdout.strip()
    with (shop.root / "shop.py").open("a") as source:
        source.write("\nraise RuntimeError('broken at import')\n")
    worker = shop.wf("worker", "--until-idle")
    assert worker.returncode == 1, worker.stderr
    assert f"ERROR {run_id}: cannot load its workflow here: error while importing" in worker.stderr
    assert "RuntimeError: broken at import" in worker.stderr
    assert "start it in the project" not in worker.stderr


def test_worker_log_reports_the_whole_run_and_its_drives(shop: Project) -> None:
    write(
        shop.root / "nap.py",
        """
        import wf

        @wf.workflow
        async def nap() -> str:
            await wf.sleep(0.3)
            return "ok"
        """,
    )
    started = shop.wf("run", "nap.py:nap", "--detach", "-q")
    assert started.returncode == 0, started.stderr
    worker = shop.wf("worker", "--until-idle")
    assert worker.returncode == 0, worker.stderr
    assert re.search(r"nap:nap completed in \S+", worker.stderr), worker.stderr


def test_a_mistyped_target_suggests_and_lists_the_workflows(shop: Project) -> None:
    result = shop.cli("run", "shop.py:ordr")
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert "did you mean 'order'?" in line
    assert "(workflows in shop: order, refund)" in line
    bare = shop.cli("run", "shop.py")  # no ':attr': the file's workflows, how to name one
    assert bare.exit_code == 2
    assert "as 'shop.py:order' (workflows in shop: order, refund)" in bare.stderr
    step = shop.cli("run", "shop.py:add")
    assert step.exit_code == 2
    assert "not a workflow" in step.stderr and "workflows in shop: order, refund" in step.stderr


def test_wf_help_lists_topics_and_explains_each(project: Project) -> None:
    from wf.cli._topics import TOPICS

    listing = project.cli("help")
    assert listing.exit_code == 0
    for name in TOPICS:
        shown = project.cli("help", name)
        assert shown.exit_code == 0, name
        assert TOPICS[name][0] in shown.stdout
    rule = project.cli("help", "WF101")
    assert rule.exit_code == 0 and "wf.now()" in rule.stdout
    command = project.cli("help", "runs")
    assert command.exit_code == 0 and "--limit" in command.stdout
    wrong = project.cli("help", "nondeterminsm")
    assert wrong.exit_code == 2
    assert "did you mean 'nondeterminism'?" in wrong.stderr


def test_wf_help_check_with_a_rule_code_explains_the_rule(project: Project) -> None:
    # The `check` topic leads there: `wf help check WF504` is `wf help WF504`.
    shown = project.cli("help", "check", "WF504")
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout == project.cli("help", "WF504").stdout
    assert "wf help check WF101" in project.cli("help", "check").stdout
    wrong = project.cli("help", "check", "WF999")
    assert wrong.exit_code == 2 and "no help topic 'WF999'" in wrong.stderr


def test_every_help_topic_named_in_the_code_exists() -> None:
    from wf.cli._topics import find_topic

    root = Path(__file__).resolve().parents[2] / "wf"
    named = set()
    for path in root.rglob("*.py"):
        named |= set(re.findall(r"wf help ([a-zA-Z0-9-]+)\)", path.read_text()))
    assert named, "no hint names a help topic"
    missing = sorted(n for n in named - {"TOPIC"} if find_topic(n) is None)
    assert missing == []


@pytest.mark.parametrize(
    "table",
    [
        'retention = "forever"',
        'modules = "os"',
        "[tool.wf.worker]\nconcurrency = -3",
        'dir = "a\\u0000b"',
        'postgres_dsn = "garbage"',
    ],
)
def test_every_command_refuses_a_bad_table_alike_wf_info_too(
    project: Project, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project.root / "pyproject.toml").write_text(f"[tool.wf]\n{table}\n")
    monkeypatch.delenv("WF_DIR")  # the table's dir
    lines = set()
    for args in (["info"], ["runs"], ["run", "tests.cli.flows:adder", "-i", "[1]"]):
        result = project.cli(*args)
        assert result.exit_code == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and "unexpected" not in result.stderr, args
        lines.add(result.stderr)
    assert len(lines) == 1, lines


def test_wf_info_without_the_stores_extra_prints_the_configuration_and_names_it(
    project: Project,
) -> None:
    from tests.cli.test_untrusted_args import wf_bytes, without
    from wf._extras import install_hint

    dsn = "postgresql://postgres@127.0.0.1:1/none"
    for variable, module, extra, kind in (
        ("WF_POSTGRES_DSN", "psycopg", "postgres", "PostgreSQL"),
        ("WF_REDIS_URL", "redis", "redis", "Redis"),
    ):
        env = {variable: dsn if extra == "postgres" else "redis://127.0.0.1:1/0"}
        result = wf_bytes(project, "info", **env, **without(project, module))
        line = f"{module} is not installed: {install_hint(extra)} adds it"
        assert result.returncode == 2, result.stderr
        assert result.stderr == f"error: {line}\n"
        assert f"project  {project.root}" in result.stdout
        assert f"store    {kind} ({line})" in result.stdout
        assert f"(from {variable})" in result.stdout
        as_json = wf_bytes(project, "info", "--json", **env, **without(project, module))
        assert as_json.returncode == 2 and as_json.stderr == f"error: {line}\n"
        assert json.loads(as_json.stdout)["store"] == f"{kind} ({line})"


def test_wf_init_says_which_modules_it_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from wf.cli._app import build_app

    monkeypatch.chdir(tmp_path)
    write(tmp_path / "app" / "__init__.py", "")
    write(tmp_path / "app" / "flows.py", "import wf\n\n@wf.workflow\nasync def f() -> None: ...\n")
    write(tmp_path / "app" / "broken.py", "import wf\nimport no_such_dep\n@wf.workflow\n")
    result = CliRunner().invoke(build_app(), ["init"])
    assert result.exit_code == 0, result.output
    assert "(modules: app.flows)" in result.stdout
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: left out")]
    assert notes == [
        "note: left out app.broken: it does not import cleanly (python -c 'import app.broken' "
        "says why); add it to modules once it does"
    ]


def test_wf_init_in_a_subdirectory_of_a_project_does_not_start_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command finds the project from a subdirectory; `wf init` there wrote a second
    pyproject.toml, and the commands run there then used a store of their own."""
    from typer.testing import CliRunner

    from wf.cli._app import build_app

    write(tmp_path / "pyproject.toml", "[tool.wf]\nmodules = []\n")
    sub = tmp_path / "src" / "deeper"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    result = CliRunner().invoke(build_app(), ["init"])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: {tmp_path / 'pyproject.toml'} configures wf already, for this directory too "
        f"(the project is {tmp_path}); edit it by hand, or start a project of its own here with "
        "a pyproject.toml of its own (wf help config)\n"
    )
    assert not (sub / "pyproject.toml").exists()
    # A directory with a pyproject.toml of its own (a package of a monorepo) still gets one.
    write(sub / "pyproject.toml", '[project]\nname = "part"\n')
    assert CliRunner().invoke(build_app(), ["init"]).exit_code == 0


def test_wf_store_info_of_a_local_store_has_no_size_it_cannot_tell(shop: Project) -> None:
    """The local store's size would take a walk of every file: no ``size: ?`` line."""
    assert shop.wf("run", "shop.py:order", "-i", "1", "-q").returncode == 0
    text = shop.cli("store", "info").stdout
    assert re.search(r"^runs:\s+1 \(1 completed\)$", text, re.M), text
    assert "size" not in text, text
    assert json.loads(shop.cli("store", "info", "--json").stdout)["size_bytes"] is None
