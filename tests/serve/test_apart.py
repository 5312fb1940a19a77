"""A real ``wf serve`` and a run whose step ends its process: the server dies with the run's
first drive (in its process, as every first drive), never again: after that the run is driven
by child processes, whose deaths are the run's, until it ends or fails ``wf.RunStalled``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import wf
from tests.serve.conftest import Served, env_for, postgres_env, spawn_server, stop
from wf.admin import _engines as engines
from wf.cli._apart import CUT, DriveApart, main
from wf.testing import TestEngine

FLOWS = "tests.serve.dying_flows"


def first_drive_kills_the_server(env: dict[str, str], workflow: str, input_: object) -> str:
    """Start ``workflow`` through the API of a driving server; the server dies with the run's
    first drive. The run's id."""
    served = spawn_server(env)
    try:
        try:
            started = httpx.post(
                f"{served.url}/api/v1/runs",
                json={"target": f"{FLOWS}:{workflow}", "input": input_},
                timeout=30,
            )
        except httpx.RemoteProtocolError:
            # The drive began, and killed the server, before the answer was sent: the run was
            # durable before it was driven, so the store has it.
            assert served.proc.wait(timeout=30) == 7
            listed = subprocess.run(
                [sys.executable, "-m", "wf", "runs", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            (run,) = json.loads(listed.stdout)
            assert run["workflow"] == f"{FLOWS}:{workflow}"
            return str(run["id"])
        assert started.status_code == 201, started.text
        assert served.proc.wait(timeout=30) == 7
        run_id: str = started.json()["id"]
        return run_id
    finally:
        stop(served)


def result(served: Served, run_id: str, within: float) -> dict[str, object]:
    """The run's result once it ended, waited for at most ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        answer = httpx.get(
            f"{served.url}/api/v1/runs/{run_id}/result", params={"wait": 5}, timeout=30
        )
        if answer.status_code == 200:
            body: dict[str, object] = answer.json()
            return body
        assert answer.status_code == 202, answer.text
        assert served.proc.poll() is None, "the server died"
        assert time.monotonic() < deadline, f"run {run_id} did not end within {within} s"


@pytest.fixture(params=["local", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """A ``wf`` environment on a fresh local store or PostgreSQL schema."""
    if request.param == "local":
        return env_for(tmp_path)
    return postgres_env(tmp_path, request.getfixturevalue("pg_schema"))


def test_a_run_that_always_kills_its_driver_fails_stalled_and_the_server_stays_up(
    env: dict[str, str],
) -> None:
    env = {**env, "WF_MAX_RECOVERIES": "2"}
    run_id = first_drive_kills_the_server(env, "kills_its_process", None)
    served = spawn_server(env)
    try:
        # The server answers, and drives other runs, meanwhile.
        other = httpx.post(
            f"{served.url}/api/v1/runs",
            json={"target": "tests.serve.flows:adder", "input": [20, 22]},
            timeout=30,
        ).json()["id"]
        assert result(served, other, 60)["output"] == 42
        ended = result(served, run_id, 90)
        assert ended["status"] == "failed"
        error = ended["error"]
        assert isinstance(error, dict) and error["type"] == "wf.RunStalled"
        assert "died 2 times in a row in step 'end_process'" in error["message"]
        assert served.proc.poll() is None
        assert httpx.get(f"{served.url}/api/v1/runs", timeout=30).status_code == 200
    finally:
        code, err = stop(served)
    assert code == 0, err
    # Where the journal tells the step a death happened in depends on the store and its flushes.
    name = re.escape(f"{FLOWS}:kills_its_process")
    assert re.search(
        rf"run {run_id} \({name}\): its last driver died( during step 'end_process')?; "
        r"driving it in a process of its own, pid \d+ \(death limit 2\)",
        err,
    )
    # One line says each child's drive (the server's, with the child's pid), one its death.
    said = [line for line in err.splitlines() if f"run {run_id} ({FLOWS}:" in line]
    deaths = [
        line for line in err.splitlines() if "exited with code 7; this server goes on" in line
    ]
    assert len(said) == len(deaths) >= 1, err
    assert all(re.search(r"in a process of its own, pid \d+ ", line) for line in said), err
    assert "Traceback" not in err


def test_a_run_driven_apart_that_survives_ends_there(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    marker = tmp_path / "died-once"
    run_id = first_drive_kills_the_server(env, "kills_its_process_once", [str(marker)])
    assert marker.exists()
    served = spawn_server(env)
    try:
        assert result(served, run_id, 60) == {
            "id": run_id,
            "status": "completed",
            "output": "survived",
        }
        assert served.proc.poll() is None
    finally:
        code, err = stop(served)
    assert code == 0, err
    assert re.search(
        rf"run {run_id} \({FLOWS}:kills_its_process_once\): its last driver died"
        r"( during step 'end_process_once')?; driving it in "
        r"a process of its own, pid \d+ \(death limit 10\)",
        err,
    ), err
    assert "driving it again" not in err  # the child does not say it again
    assert "Traceback" not in err


def test_a_server_stopped_while_its_child_drives_a_long_step_counts_no_death(
    tmp_path: Path,
) -> None:
    """SIGTERM while a child drives: the child drains with the server, and once the grace is
    over abandons its step as the server does its own (the run is left due, suspended), rather
    than being killed first, which leaves the run as a death does (running)."""
    env = env_for(tmp_path)
    marker = tmp_path / "died-once"
    run_id = first_drive_kills_the_server(env, "kills_its_process_once_then_waits", [str(marker)])
    served = spawn_server(env, "--grace", "1")
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "died-once.waiting").exists():
            assert time.monotonic() < deadline, "the child never reached its step"
            time.sleep(0.05)
    finally:
        code, err = stop(served)
    assert code == 0, err
    served = spawn_server(env, "--no-worker")
    try:
        detail = httpx.get(f"{served.url}/api/v1/runs/{run_id}", timeout=30).json()
    finally:
        stop(served)
    assert detail["status"] == "suspended", (detail["status"], err)
    assert "Traceback" not in err


@wf.step
async def waits() -> None:
    await asyncio.Event().wait()  # until its driver is crashed


@wf.workflow(max_recoveries=2)
async def crashed() -> None:
    await waits()


class CutChild(DriveApart):
    """A child whose drive lost its store connection (it exits with ``CUT``)."""

    def command(self, run_id: str) -> list[str]:
        return [sys.executable, "-c", f"import sys; sys.exit({CUT})"]


@pytest.mark.timeout(60)
async def test_a_child_whose_drive_was_cut_did_not_die_and_its_cut_is_the_servers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server takes a child's cut drive as a cut drive of its own (``wf.StoreUnavailable``:
    driven again soon, no death of the run), not as a death of the run with a pause."""
    caplog.set_level(logging.INFO)
    async with TestEngine() as engine:
        run = await wf.start(crashed, detach=True)
        driving = engine.drive_soon(run.id)
        async with asyncio.timeout(10):
            while (await run.status()) is not wf.RunStatus.RUNNING:
                await asyncio.sleep(0.01)
        await engine.crash(run)
        assert driving.done()
        engine.drive_apart = CutChild(engine, log_format="text", grace=1.0)
        with pytest.raises(wf.StoreUnavailable, match="lost its lease or its store connection"):
            await engine.drive_soon(run.id)
    said = [r.getMessage() for r in caplog.records if run.id in r.getMessage()]
    assert len(said) == 1 and "driving it in a process of its own, pid " in said[0], said
    assert not [line for line in said if "this server goes on" in line]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("error", "code"),
    [
        (wf.StoreUnavailable("the store is out of reach"), CUT),
        (wf.LeaseLost("the lease was taken"), CUT),
        (wf.StoreError("the store is misconfigured"), 3),
    ],
)
def test_a_child_that_cannot_reach_its_store_exits_cut_and_a_misconfigured_one_fails(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: wf.StoreError,
    code: int,
) -> None:
    """A child whose store is out of reach while it opens it (before any drive) exits with
    ``CUT``, as a cut drive does: the server counts no death of the run. A store that is
    misconfigured is no outage: its error (exit 3) counts."""

    @contextlib.asynccontextmanager
    async def unreachable(on_drive_end: object) -> AsyncIterator[None]:
        raise error
        yield  # pragma: no cover

    monkeypatch.setattr(engines, "driving", unreachable)
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert main(["some-run", "text", "1.0"]) == code
    finally:
        for sig, handler in kept.items():  # the child's own, not this process's
            signal.signal(sig, handler)
    assert str(error) in capsys.readouterr().err


async def test_a_run_a_server_starts_is_driven_there_when_its_own_worker_claims_it_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start publishes the run before its creation returns (the local store's flush follows):
    the server's own worker may claim it in that window, under load. That drive is the run's
    first, by the process that created it: driven here, not handed to a process of its own
    as a run whose creator died (a child process per start, in a burst of starts)."""
    from tests.serve.flows import adder
    from wf import Engine
    from wf.store.local import LocalStore

    store = LocalStore(tmp_path / ".workflows")
    engine = Engine(store)
    apart: list[str] = []

    async def drive_apart(run_id: str, said: object) -> None:
        apart.append(run_id)

    engine.drive_apart = drive_apart
    claimed: list[asyncio.Task[object]] = []
    create = store.create_run

    async def create_run(record: wf.store.RunRecord, *args: object, **kwargs: object) -> bool:
        created: bool = await create(record, *args, **kwargs)  # type: ignore[arg-type]
        lease = await store.try_acquire(record.id)  # the worker's claim, in the window
        if lease is not None:
            claimed.append(engine.drive_soon(record.id, lease=lease))  # type: ignore[arg-type]
            await asyncio.sleep(0.2)  # the flush takes its time: the claim's drive begins
        return created

    monkeypatch.setattr(store, "create_run", create_run)
    try:
        run = await engine.start(adder, (1, 2), {})
        assert claimed, "the claim did not take the run"
        await asyncio.wait_for(asyncio.gather(*claimed), 20)
        assert apart == []
        assert await asyncio.wait_for(run.result(), 20) == 3
    finally:
        await store.close()
