"""Every command's arguments, fuzzed: whatever a user types, wf answers with exit 0, 1 or 2 and
at most one ``error:`` line; never a traceback, never an "unexpected" error, and never a run
left due at a time no worker reaches (past 9999-12-31) or that breaks the listings.

The commands and their parameters are read from the Typer app itself, so a new command or
option is fuzzed without a change here. Each example runs in a fresh project directory (its own
store), in-process through Typer's test runner, as the other CLI tests do.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer.main
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.cli.conftest import Project
from wf.cli._app import build_app

ADDER = "tests.cli.flows:adder"

NOT_FUZZED = {("serve",), ("dev",)}
"""Servers: with arguments that parse, they serve until stopped. (``wf serve``'s own checks
are tested with its HTTP side.)"""
WAITING_FLAGS = {"--follow", "--wait"}
"""Flags that wait for a run to end: a fresh store has none, but they are not argument checks."""
FORCED = {("worker",): ["--until-idle"]}
ANSWER_WITHIN = 10.0
"""Seconds a command may take on a fresh store; more is a hang (the inputs are named)."""

LAST_DUE = dt.datetime(9999, 12, 31, tzinfo=dt.UTC).timestamp()

HOSTILE = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\udcff",
    "\ud800",
    "x" * 5000,
    "-1",
    "0",
    "-0",
    str(2**63),
    str(-(2**63) - 1),
    "9" * 40,
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "-inf",
    "99999999999d",
    "99999999999999999999",
    "-5m",
    "1e400s",
    "9999-12-31T23:59:59-14:00",
    "9999-12-31T23:59:59+00:00",
    "10000-01-01T00:00:00+00:00",
    "0001-01-01T00:00:00+14:00",
    "2026-13-45T00:00:00Z",
    "null",
    "[]",
    "{}",
    '"\\ud800"',
    '"\\u0000"',
    "[1e999]",
    "[" * 5000,
    ADDER,
    "../../../etc/passwd",
    "/dev/zero",
    "wrun_" + "Z" * 26,
    "0 0 30 2 *",
    "34 15 3 12 * */30 2026",
    "Not/A_Zone",
]

values = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=12),
    st.integers().map(str),
    st.floats().map(str),
    st.binary(max_size=6).map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.integers(0xD800, 0xDFFF).map(chr),
)


def _leaves(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name, sub in sorted(subcommands.items()):
            yield from _leaves(sub, (*path, name))
    elif path not in NOT_FUZZED:
        yield path, command


COMMANDS = list(_leaves(typer.main.get_command(build_app())))


@st.composite
def invocations(draw: st.DrawFn) -> list[str]:
    """A command and a hostile value for some of its parameters (all of its arguments)."""
    path, command = draw(st.sampled_from(COMMANDS))
    args = list(path)
    for param in command.params:
        opts = [o for o in param.opts if o.startswith("--")] or param.opts
        if param.name == "help" or WAITING_FLAGS & set(param.opts):
            continue
        if param.param_type_name == "argument":
            count = 1 if param.nargs == 1 else draw(st.integers(0, 2))
            if param.name == "target":  # a real workflow too, so the options are reached
                args += [draw(st.one_of(st.just(ADDER), values)) for _ in range(count)]
            else:
                args += [draw(values) for _ in range(count)]
        elif draw(st.booleans()):
            if getattr(param, "is_flag", False):
                args.append(opts[0])
            elif param.name == "input_" and draw(st.booleans()):
                args += [opts[0], "[1]"]
            else:
                args += [opts[0], draw(values)]
    return args + FORCED.get(path, [])


@settings(
    max_examples=int(os.environ.get("WF_FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a hang would be re-run many times
)
@given(args=invocations())
@example(args=["run", ADDER, "-i", "[1]", "--at", "9999-12-31T23:59:59-14:00", "--detach"])
@example(args=["run", ADDER, "-i", "[1]", "--delay", "99999999999d"])
@example(args=["run", ADDER, "-i", "[1]", "--delay", "-99999999999d"])
@example(args=["run", ADDER, "-i", "[1]", "--priority", str(2**64)])
@example(args=["run", ADDER, "-i", "[1]", "--id", "a\x00b", "--detach"])
@example(args=["run", ADDER, "-i", "[1]", "--group", "a\x00b", "--detach"])
@example(args=["run", ADDER, "-i", "[1]", "--group", "g" * 5000, "--detach"])
@example(args=["runs", "--limit", "-1"])
@example(args=["gc", "--older-than", "99999999999d"])
@example(args=["stream", "wrun_x", "--start", str(-(2**70))])
@example(args=["schedule", "set", "s", ADDER, "--cron", "0 0 30 2 *", "--input", "[1]"])
def test_any_arguments_get_an_answer_and_leave_no_run_due_forever(
    tmp_path: Path, args: list[str]
) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch, _inside(Path(scratch)):
        project = Project(Path(scratch))
        with _answer_within(ANSWER_WITHIN, args):
            result = project.cli(*args)
        shown = f"wf {args!r} -> {result.exit_code}: {result.stderr!r}"
        assert result.exit_code in (0, 1, 2), shown
        assert "Traceback" not in result.stdout + result.stderr, shown
        assert "unexpected" not in result.stderr, shown
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) <= 1, shown
        if result.exit_code == 2:
            assert len(errors) == 1, shown
        _assert_every_run_reachable(project, shown)


@contextlib.contextmanager
def _answer_within(seconds: float, args: list[str]) -> Iterator[None]:
    """Interrupt a command that hangs, naming its arguments; pytest-timeout's own alarm (the
    same signal) is put back after, with what was left of it."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"wf {args!r} did not answer within {seconds} s")

    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only; pytest-timeout still bounds the test
        return
    outer, _ = signal.getitimer(signal.ITIMER_REAL)
    previous = signal.signal(signal.SIGALRM, hung)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds if not outer else min(seconds, outer))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.01))


class _inside:
    """The example's own project directory: its store (``WF_DIR``) and working directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.saved: tuple[str, str | None] = ("", None)

    def __enter__(self) -> None:
        self.saved = (os.getcwd(), os.environ.get("WF_DIR"))
        os.chdir(self.root)
        os.environ["WF_DIR"] = str(self.root / ".workflows")  # Project's store_dir

    def __exit__(self, *exc: object) -> None:
        cwd, store = self.saved
        os.chdir(cwd)
        if store is None:
            os.environ.pop("WF_DIR", None)
        else:
            os.environ["WF_DIR"] = store


def _assert_every_run_reachable(project: Project, shown: str) -> None:
    """Every run the command left lists, inspects, and (if it waits) is due before year 10000."""
    listing = project.cli("runs", "--json", "--limit", "1000")
    assert listing.exit_code == 0, f"{shown}; then wf runs: {listing.stderr!r}"

    from wf.cli._store import open_store

    async def records() -> list[Any]:
        store = open_store()
        try:
            return await store.list_runs(limit=1000)
        finally:
            await store.close()

    for record in asyncio.run(records()):
        inspect = project.cli("inspect", record.id, "--json")
        assert inspect.exit_code == 0, f"{shown}; then wf inspect: {inspect.stderr!r}"
        if record.status.value in ("pending", "suspended") and record.wake_at is not None:
            assert math.isfinite(record.wake_at) and record.wake_at <= LAST_DUE, (
                f"{shown}: run {record.id} due at {record.wake_at}"
            )
