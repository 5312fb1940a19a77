"""An upgrade of the PostgreSQL tables waits for the sessions of an older wf (``_users``).

An "older wf" is this code with the previous schema version (``_schema.VERSION`` lowered, its
last migration left out), as the other upgrade tests make it: it announces the version it
speaks as the previous release of this code would. The server is ``WF_TEST_POSTGRES_DSN``;
every test skips when it cannot be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg")

from psycopg.conninfo import make_conninfo  # noqa: E402

from tests.store import test_postgres  # noqa: E402
from tests.store.helpers import REPO  # noqa: E402
from tests.store.test_postgres import DSN, _schema_of_version, _version, make  # noqa: E402
from wf import StoreVersionError  # noqa: E402
from wf._exceptions import UpgradeInterrupted  # noqa: E402
from wf.store.postgres import PostgresStore  # noqa: E402
from wf.store.postgres import _schema as schema_module  # noqa: E402

pytestmark = pytest.mark.postgres

postgres_dsn = test_postgres.postgres_dsn  # the server, or a skip
schema = test_postgres.schema  # a schema of each test's own, dropped afterwards

OLDER = schema_module.VERSION - 1


@contextlib.contextmanager
def older_wf() -> Iterator[None]:
    """While in force, this code is the wf of the previous schema version."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema_module, "VERSION", OLDER)
        patch.setattr(schema_module, "MIGRATIONS", schema_module.MIGRATIONS[:-1])
        yield


async def _tables_of_the_older_wf(schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await _schema_of_version(conn, schema, OLDER)


def _older_store(schema: str, app: str) -> PostgresStore:
    """A process of the older wf: one query connection, named ``app`` in pg_stat_activity."""
    return PostgresStore(make_conninfo(DSN, application_name=app), schema=schema, pool_size=1)


async def _older_wf(schema: str) -> tuple[str, PostgresStore]:
    """The older wf's tables in ``schema`` and a process of it (not connected yet): its
    application name and its store."""
    await _tables_of_the_older_wf(schema)
    app = f"older-{uuid.uuid4().hex[:8]}"
    return app, _older_store(schema, app)


async def _said(caplog: pytest.LogCaptureFixture, words: str) -> str:
    """The first captured line holding ``words``, once one is (10 s at most)."""
    async with asyncio.timeout(10):
        while True:
            for record in caplog.records:
                if words in record.getMessage():
                    return record.getMessage()
            await asyncio.sleep(0.05)


async def test_an_upgrade_waits_for_an_older_wf_says_who_and_goes_on_once_it_ends(
    schema: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WF_POSTGRES_UPGRADE_WAIT", "0")  # one-shot commands' bound, not open()'s
    app, old = await _older_wf(schema)
    newer = make(schema)
    try:
        with older_wf():
            assert await old.list_runs() == []  # connected: its session speaks OLDER
        with caplog.at_level(logging.WARNING, logger="wf.store"):
            upgrade = asyncio.create_task(newer.open())  # a worker: waits without limit
            line = await _said(caplog, "of an older wf")
            assert "are in use by 1 session of an older wf: pid " in line
            assert f"(application {app!r}, schema version {OLDER})" in line
            assert f"upgrade from version {OLDER} to {OLDER + 1} waits until they end" in line
            await asyncio.sleep(1.0)  # two more tries
            assert not upgrade.done()
            assert await _version(schema) == str(OLDER)
            await old.close()  # the older wf's process ends
            async with asyncio.timeout(10):
                await upgrade
            assert "no older wf uses them any more" in await _said(caplog, "any more")
        assert await _version(schema) == str(OLDER + 1)
        assert await newer.list_runs() == []
    finally:
        await old.close()
        await newer.close()


async def test_an_older_wf_that_reconnects_after_the_upgrade_is_refused(schema: str) -> None:
    """A process of the older wf that had no connection open while the tables were upgraded
    (a server restart dropped them) is refused when it connects again, rather than going on
    with the tables it does not know."""
    app, old = await _older_wf(schema)
    try:
        with older_wf():
            assert await old.list_runs() == []
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                [app],
            )
        newer = make(schema)
        try:
            assert await newer.list_runs() == []  # nothing of the older wf connected: upgraded
        finally:
            await newer.close()
        assert await _version(schema) == str(OLDER + 1)
        with older_wf(), pytest.raises(StoreVersionError, match="upgraded them while this"):
            await old.list_runs()
    finally:
        await old.close()


def _cli(schema: str, tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    """``wf runs`` (a one-shot command) on the tables in ``schema``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    dsn = make_conninfo(DSN, options=f"-c search_path={schema}")
    environ.update(WF_POSTGRES_DSN=dsn, PYTHONPATH=REPO, **env)
    return subprocess.Popen(
        [sys.executable, "-m", "wf", "runs"],
        cwd=tmp_path,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_a_one_shot_command_gives_up_after_its_bound(schema: str, tmp_path: Path) -> None:
    app, old = await _older_wf(schema)
    try:
        with older_wf():
            assert await old.list_runs() == []
        started = time.monotonic()
        command = _cli(schema, tmp_path, WF_POSTGRES_UPGRADE_WAIT="1")
        _, err = await asyncio.to_thread(command.communicate, timeout=30)
        assert command.returncode == 3, err
        assert time.monotonic() - started < 20
        lines = err.strip().splitlines()
        assert "are in use by 1 session of an older wf" in lines[0], err
        assert lines[-1].startswith("error: wf's tables in PostgreSQL schema"), err
        assert f"were not upgraded from version {OLDER} to {OLDER + 1}: after 1 s" in lines[-1]
        assert "1 session of an older wf still uses them (pid " in lines[-1]
        assert f"application {app!r}" in lines[-1]
        assert await _version(schema) == str(OLDER)
    finally:
        await old.close()


def _line_with(stream: object, words: str, seconds: float) -> str:
    """Read ``stream`` (a pipe) until a line holds ``words``; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    read = ""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)  # type: ignore[arg-type]
        while time.monotonic() < deadline:
            if selector.select(timeout=max(deadline - time.monotonic(), 0)):
                line = stream.readline()  # type: ignore[attr-defined]
                read += line
                if words in line:
                    return line
                if not line:
                    break
    raise AssertionError(f"no line with {words!r} within {seconds} s: {read!r}")


async def test_sigterm_stops_a_waiting_upgrade_with_exit_130(schema: str, tmp_path: Path) -> None:
    _, old = await _older_wf(schema)
    try:
        with older_wf():
            assert await old.list_runs() == []
        command = _cli(schema, tmp_path)  # the default bound: a minute
        try:
            await asyncio.to_thread(_line_with, command.stderr, "of an older wf", 20)
            command.send_signal(signal.SIGTERM)
            _, err = await asyncio.to_thread(command.communicate, timeout=20)
        finally:
            if command.poll() is None:
                command.kill()
                command.wait()
        assert command.returncode == 130, err
        assert "error: SIGTERM: stopped waiting to upgrade wf's tables" in err
        assert "nothing was changed" in err
        assert await _version(schema) == str(OLDER)
    finally:
        await old.close()


@pytest.fixture
def other_schema(schema: str) -> Iterator[str]:
    """A second fresh schema, dropped afterwards (``schema`` is the first)."""
    name = f"{schema}_b"
    yield name
    test_postgres.drop_schema(name)


async def test_overlapping_waits_share_the_stop_signals_and_give_them_back(
    schema: str, other_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    original = signal.getsignal(signal.SIGINT)
    olds = [_older_store(name, f"older-{uuid.uuid4().hex[:8]}") for name in (schema, other_schema)]
    newers = [make(schema), make(other_schema)]
    try:
        for name, old in zip((schema, other_schema), olds, strict=True):
            await _tables_of_the_older_wf(name)
            with older_wf():
                assert await old.list_runs() == []
        with caplog.at_level(logging.WARNING, logger="wf.store"):
            first = asyncio.create_task(newers[0].open())
            await _said(caplog, f"schema {schema!r} are in use")
            second = asyncio.create_task(newers[1].open())
            await _said(caplog, f"schema {other_schema!r} are in use")
            await olds[0].close()  # the wait that began first ends first
            async with asyncio.timeout(10):
                await first
            # The second still waits, and a Ctrl-C still stops it.
            assert signal.getsignal(signal.SIGINT) != original
            signal.raise_signal(signal.SIGINT)
            with pytest.raises(UpgradeInterrupted, match="Ctrl-C: stopped waiting"):
                async with asyncio.timeout(10):
                    await second
        assert signal.getsignal(signal.SIGINT) == original
        assert await _version(other_schema) == str(OLDER)
    finally:
        for store in (*olds, *newers):
            await store.close()


async def test_a_wait_that_another_wf_ended_by_upgrading_says_so(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, old = await _older_wf(schema)
    newers = [make(schema), make(schema)]  # two processes of the newer wf
    try:
        with older_wf():
            assert await old.list_runs() == []
        with caplog.at_level(logging.WARNING, logger="wf.store"):
            opening = [asyncio.create_task(newer.open()) for newer in newers]
            async with asyncio.timeout(10):
                while sum("are in use" in r.getMessage() for r in caplog.records) < 2:
                    await asyncio.sleep(0.05)
            await old.close()
            async with asyncio.timeout(10):
                await asyncio.gather(*opening)
        lines = [r.getMessage() for r in caplog.records]
        assert sum(f"upgraded to version {OLDER + 1}" in line for line in lines) == 1, lines
        assert (
            sum(f"another wf upgraded them to version {OLDER + 1}" in line for line in lines) == 1
        )
        assert await _version(schema) == str(OLDER + 1)
    finally:
        await old.close()
        for newer in newers:
            await newer.close()
