"""The environment's faults on the command line: undecodable argument bytes, a closed output
pipe, an optional extra that is not installed. Each is one line on stderr and exit 2."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import wf
from tests.cli.conftest import Project
from wf._extras import install_hint, missing_extra
from wf.cli import _registry

ADDER = "tests.cli.flows:adder"
CLOSED = "error: output closed before it was all written (broken pipe)\n"


def wf_bytes(project: Project, *args: str | bytes, **env: str) -> subprocess.CompletedProcess[str]:
    """``wf ARGS`` as a subprocess; an argument may be bytes, as a shell passes them."""
    return subprocess.run(
        [sys.executable, "-m", "wf", *args],
        cwd=project.root,
        env={**project.env, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


# -- undecodable arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [b"runs", b"--workflow", b"\xff"],
        [b"hook", b"resume", b"\xff", b"--data", b"1"],
        [b"schedule", b"rm", b"\xff"],
        [b"gc", b"--workflow", b"\xff"],
        [b"inspect", b"wrun_\xfe\xff", b"--json"],
        [b"run", ADDER.encode(), b"--id", b"a\xffb"],
    ],
    ids=["runs", "hook-resume", "schedule-rm", "gc", "inspect", "run-id"],
)
def test_an_argument_that_is_not_utf8_is_one_line_and_exit_2(
    project: Project, args: list[bytes]
) -> None:
    project.cli("run", ADDER, "-i", "[1]")  # a run to list: the listing must not be reached
    result = wf_bytes(project, *args)
    assert result.returncode == 2, result.stderr
    bad = next(a for a in args if b"\xff" in a)
    assert result.stderr == f"error: argument {repr(bad)[1:]} is not valid UTF-8\n"
    assert result.stdout == ""
    assert len(project.runs()) == 1  # `wf run --id` created nothing


@pytest.mark.parametrize("command", sorted({c.name for c in _registry.COMMANDS}))
def test_every_command_refuses_a_lone_surrogate_in_process(project: Project, command: str) -> None:
    # What the entry point gets from bytes that are not UTF-8; the check is the root group's,
    # so it holds for every command and for Typer's test runner too.
    result = project.cli(command, "\udcff")
    assert result.exit_code == 2
    assert result.stderr == "error: argument '\\xff' is not valid UTF-8\n"
    assert project.cli("runs", "--workflow", "\ud800").stderr == (
        "error: argument '\\ud800' is not valid UTF-8\n"
    )


# -- closed pipes ------------------------------------------------------------------------------


def closed_stdout(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    """``wf ARGS`` writing into a pipe whose reader has gone (``wf ARGS | head -c0``)."""
    read, write = os.pipe()
    os.close(read)  # before the child starts: its first write meets a closed pipe
    try:
        return subprocess.run(
            [sys.executable, "-m", "wf", *args],
            cwd=project.root,
            env=project.env,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize(
    ("target", "args"),
    [
        (ADDER, ["runs", "--json"]),
        (ADDER, ["runs"]),
        (ADDER, ["inspect", "RUN"]),
        (ADDER, ["inspect", "RUN", "--json"]),
        ("tests.cli.flows:child_flow", ["stream", "RUN"]),
        ("tests.cli.flows:child_flow", ["stream", "RUN", "--follow"]),
        ("tests.cli.log_flows:talkative", ["logs", "RUN"]),
        (ADDER, ["runs", "--help"]),
        (ADDER, ["--help"]),
        (ADDER, ["--version"]),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_a_closed_output_pipe_is_one_line_and_exit_2(
    project: Project, target: str, args: list[str]
) -> None:
    project.cli("run", target, "-i", '["hi"]' if "child" in target else "[1]")
    run_id = project.runs()[0]["id"]
    result = closed_stdout(project, *(run_id if a == "RUN" else a for a in args))
    assert result.returncode == 2, result.stderr
    assert result.stderr == CLOSED


def closed_streams(project: Project, redirect: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``wf ARGS`` with a standard stream the shell closed (``redirect``: ``>&-``, ``2>&-``,
    ``<&-``): Python starts with that ``sys.std*`` None."""
    return subprocess.run(
        ["sh", "-c", f'exec "$0" -m wf "$@" {redirect}', sys.executable, *args],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "args",
    [["runs"], ["runs", "--json"], ["--version"], ["--help"], ["inspect", "RUN"]],
    ids=" ".join,
)
def test_a_closed_stdout_is_a_closed_pipe(project: Project, args: list[str]) -> None:
    project.cli("run", ADDER, "-i", "[1]")
    run_id = project.runs()[0]["id"]
    result = closed_streams(project, ">&-", *(run_id if a == "RUN" else a for a in args))
    assert (result.returncode, result.stderr) == (2, CLOSED)


def test_a_closed_stdout_keeps_the_commands_own_error(project: Project) -> None:
    result = closed_streams(project, ">&-", "inspect", "nosuch")
    assert (result.returncode, result.stderr) == (2, "error: no run with id 'nosuch'\n")


@pytest.mark.parametrize(
    ("args", "state"),
    [(["-d"], "queued"), ([], "completed")],
    ids=["detach", "drive"],
)
def test_wf_run_into_a_closed_output_names_the_run_it_made(
    project: Project, args: list[str], state: str
) -> None:
    # The work is done and only the id or the result is lost: the line says which run it was,
    # so that a script that retries does not start another.
    for closed in (
        closed_streams(project, ">&-", "run", ADDER, "-q", "-i", "[1]", *args),
        closed_stdout(project, "run", ADDER, "-q", "-i", "[1]", *args),
    ):
        assert closed.returncode == 2, closed.stderr
        (run,) = [r for r in project.runs() if r["id"] in closed.stderr]
        assert closed.stderr == CLOSED.replace("\n", f": run {run['id']} is {state}\n")
    assert len(project.runs()) == 2


def test_a_closed_stderr_drops_the_messages_and_keeps_result_and_code(project: Project) -> None:
    ran = closed_streams(project, "2>&-", "run", ADDER, "-i", "[5]")
    assert (ran.returncode, ran.stdout) == (0, "6\n")
    assert closed_streams(project, "2>&-", "inspect", "nosuch").returncode == 2
    # Open for reading only, as a launcher script (pyenv's shim) leaves it: as good as closed.
    assert closed_streams(project, "2</dev/null", "inspect", "nosuch").returncode == 2
    assert closed_streams(project, ">&- 2>&-", "run", ADDER, "-i", "[5]").returncode == 2
    assert [r["status"] for r in project.runs()] == ["completed", "completed"]


def test_input_from_a_closed_stdin_is_a_usage_error(project: Project) -> None:
    result = closed_streams(project, "<&-", "run", ADDER, "-q", "-i", "-")
    assert result.returncode == 2
    assert result.stderr == "error: --input - reads standard input, which is closed\n"
    assert project.runs() == []


# -- missing extras ----------------------------------------------------------------------------


def without(project: Project, *modules: str) -> dict[str, str]:
    """An environment whose interpreter cannot import ``modules`` (as if never installed)."""
    site = project.root / "site-without"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        f"import sys\nfor name in {modules!r}:\n    sys.modules[name] = None\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(site), project.env["PYTHONPATH"]])}


POSTGRES = "postgresql://postgres@127.0.0.1:1/none"  # never reached: the import fails first


@pytest.mark.parametrize(
    ("args", "env", "module", "extra"),
    [
        (["info"], {"WF_POSTGRES_DSN": POSTGRES}, "psycopg", "postgres"),
        (["runs"], {"WF_POSTGRES_DSN": POSTGRES}, "psycopg", "postgres"),
        (["store", "verify"], {"WF_POSTGRES_DSN": POSTGRES}, "psycopg", "postgres"),
        (["serve", "--port", "0"], {}, "starlette", "serve"),
    ],
    ids=["info-postgres", "runs-postgres", "verify-postgres", "serve"],
)
def test_a_missing_extra_names_its_install_and_exits_2(
    project: Project, args: list[str], env: dict[str, str], module: str, extra: str
) -> None:
    result = wf_bytes(project, *args, **env, **without(project, module))
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"error: {module} is not installed: {install_hint(extra)} adds it\n"


def test_serve_without_uvicorn_names_the_extra(project: Project) -> None:
    result = wf_bytes(project, "serve", "--port", "0", **without(project, "uvicorn"))
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"error: wf serve needs its extra: {install_hint('serve')}\n"


def test_forced_tracing_without_opentelemetry_names_the_extra(project: Project) -> None:
    result = wf_bytes(
        project, "run", ADDER, "-i", "[1]", WF_OTEL="1", **without(project, "opentelemetry")
    )
    assert result.returncode == 2, result.stderr
    # One line, the install said once.
    assert result.stderr == f"error: WF_OTEL=1 needs OpenTelemetry: {install_hint('otel')}\n"


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["worker", "--until-idle"], {"WF_OTEL": "1"}),
        (["worker", "--until-idle"], {"WF_OTEL_METRICS": "1"}),
        (["run", ADDER, "-i", "[1]"], {"WF_OTEL_METRICS": "1"}),
        (["serve", "--port", "0"], {"WF_OTEL": "1"}),
        (["dev", "--plain"], {"WF_OTEL": "1"}),
    ],
    ids=["worker", "worker-metrics", "run-metrics", "serve", "dev"],
)
def test_a_worker_asked_for_opentelemetry_without_it_exits_2_at_start(
    project: Project, args: list[str], env: dict[str, str]
) -> None:
    # Not a worker that starts, fails every drive ("retried later") and exits 0.
    queued = project.wf("run", ADDER, "-i", "[1]", "--detach", "-q")
    assert queued.returncode == 0, queued.stderr
    result = subprocess.run(
        [sys.executable, "-m", "wf", *args],
        cwd=project.root,
        env={**project.env, **env, **without(project, "opentelemetry")},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    asked = "WF_OTEL=1" if "WF_OTEL" in env else "WF_OTEL_METRICS=1"
    assert result.stderr == f"error: {asked} needs OpenTelemetry: {install_hint('otel')}\n"


def test_only_a_module_that_is_not_there_is_a_missing_extra() -> None:
    assert missing_extra(ModuleNotFoundError("x", name="psycopg.pq")) == "postgres"
    assert missing_extra(ModuleNotFoundError("x", name="yaml")) is None
    assert missing_extra(ImportError("cannot import name 'x'", name="starlette")) is None
    assert install_hint("serve") == "pip install 'wf-durable[serve]'"


def test_install_hints_are_written_in_one_place() -> None:
    # The distribution's name will change: every message takes it from wf._extras.
    root = Path(wf.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        offenders += [
            f"{path.relative_to(root)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "pip install '" in node.value
            and id(node) not in docstrings
            and path.name != "_extras.py"
        ]
    assert not offenders


# -- Typer's public API only -------------------------------------------------------------------


def test_the_command_line_imports_no_private_module_of_typer_or_click() -> None:
    root = Path(wf.__file__).parent
    private = []
    for path in root.rglob("*.py"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if node.value.startswith(("typer.", "click.")) else []
            for name in names:
                top, *rest = name.split(".")
                if top in ("typer", "click") and any(p.startswith("_") for p in rest):
                    private.append(f"{path.relative_to(root)}: {name}")
    assert not private


# -- arguments too long to echo ------------------------------------------------------------------

LONG_ID = "a" * 10_000


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", LONG_ID],
        ["cancel", LONG_ID],
        ["wake", LONG_ID],
        ["logs", LONG_ID],
        ["watch", LONG_ID],
        ["retry", LONG_ID],
        ["stream", LONG_ID],
        ["hooks", "--run", LONG_ID],
        ["run", ADDER, "--input", "[1, 2]", "--id", LONG_ID],
    ],
    ids=lambda args: args[0] if args[0] != "hooks" else "hooks-run",
)
def test_a_run_id_too_long_says_its_length_not_its_text(project: Project, args: list[str]) -> None:
    result = project.cli(*args)
    assert result.exit_code == 2, result.stderr
    assert result.stderr == (
        "error: invalid run id: it is 10000 characters long; at most 128 are allowed\n"
    )
