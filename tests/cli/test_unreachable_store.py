"""A store address that nothing answers at, or that refuses what it is given, as a command
starts: one line naming the address (never its password) and exit 3 within seconds, for
``wf worker`` too (it waited the 300 s outage limit of a store that answered before).

The black hole is a local socket that is listened on and never accepted from: the kernel
completes the connection, and nothing ever answers on it, as at an address where packets are
dropped once the connection's own timeout is reached.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import REPO
from tests.engine.conftest import POSTGRES_DSN, REDIS_URL, require_server

REFUSED = 1  # nothing listens on port 1


@pytest.fixture
def black_hole() -> Iterator[int]:
    """The port of a socket that takes connections and never answers on them."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as server:
        yield server.getsockname()[1]


def _spawn(cwd: Path, args: list[str], **env: str) -> subprocess.Popen[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WF_DIR", "WF_POSTGRES_DSN", "WF_REDIS_URL", "PGCONNECT_TIMEOUT", "WF_DEBUG")
    }
    base["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [base.get("PYTHONPATH")])])
    return subprocess.Popen(
        [sys.executable, "-m", "wf", *args],
        cwd=cwd,
        env={**base, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ended(proc: subprocess.Popen[str], began: float) -> tuple[int, list[str], float]:
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"{proc.args} still runs after 60 s") from None
    return proc.returncode, err.splitlines(), time.monotonic() - began


@pytest.mark.timeout(90)
def test_an_address_nothing_answers_at_ends_every_command_within_seconds(
    tmp_path: Path, black_hole: int
) -> None:
    """Refused, or a black hole, on PostgreSQL and Redis: ``wf worker`` tries again for the
    10 s a server restarting may take, then exits 3 with the error as its last line; a
    one-shot command says it at its first try (its connection's timeout: ``PGCONNECT_TIMEOUT``
    here). All at once, to keep the test short."""
    pg = "postgresql://postgres:s3cret@127.0.0.1:{}/test"
    redis = "redis://:s3cret@127.0.0.1:{}/11"
    cases = {
        "worker, PostgreSQL refused": (["worker"], {"WF_POSTGRES_DSN": pg.format(REFUSED)}),
        "worker, Redis refused": (["worker"], {"WF_REDIS_URL": redis.format(REFUSED)}),
        "worker, PostgreSQL black hole": (["worker"], {"WF_POSTGRES_DSN": pg.format(black_hole)}),
        "worker, Redis black hole": (["worker"], {"WF_REDIS_URL": redis.format(black_hole)}),
        "runs, PostgreSQL black hole": (
            ["runs"],
            {"WF_POSTGRES_DSN": pg.format(black_hole), "PGCONNECT_TIMEOUT": "1"},
        ),
    }
    began = time.monotonic()
    procs = {name: _spawn(tmp_path, args, **env) for name, (args, env) in cases.items()}
    for name, proc in procs.items():
        code, lines, took = _ended(proc, began)
        assert code == 3, (name, lines)
        assert took < 45, (name, took)  # 300 s and more before
        assert lines and lines[-1].startswith("error: cannot "), (name, lines)
        assert "s3cret" not in "\n".join(lines), (name, lines)
        port = REFUSED if "refused" in name else black_hole
        kind = "PostgreSQL" if "PostgreSQL" in name else "Redis"
        where = (
            f"postgresql://postgres@127.0.0.1:{port}/test"
            if kind == "PostgreSQL"
            else f"redis://127.0.0.1:{port}/11"
        )
        assert f" {kind} at {where}: " in lines[-1], (name, lines)
        if name.startswith("worker"):
            assert lines[-1].endswith("(no answer in the 10s since the worker started)"), lines
            # Refused: said at once, then tried again; a black hole's try takes 10 s itself.
            assert len(lines) <= 2, (name, lines)
        else:
            assert lines[-1].endswith("connection timeout expired"), lines
            assert len(lines) == 1, lines


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_a_store_that_refuses_what_it_is_given_ends_the_worker_at_once(
    tmp_path: Path, kind: str
) -> None:
    """A database that does not exist, credentials the server refuses: no wait mends them."""
    require_server(kind)
    if kind == "postgres":
        env = {"WF_POSTGRES_DSN": POSTGRES_DSN.rsplit("/", 1)[0] + "/wf_no_such_database"}
        said = 'database "wf_no_such_database" does not exist'
    else:
        rest = REDIS_URL.split("://", 1)[1].rsplit("@", 1)[-1]
        env = {"WF_REDIS_URL": f"redis://wf_no_such_user:s3cret@{rest}"}
        said = "refused the credentials"
    began = time.monotonic()
    code, lines, took = _ended(_spawn(tmp_path, ["worker"], **env), began)
    assert code == 3, lines
    assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], lines
    assert "s3cret" not in lines[0]
    assert took < 30, took


@pytest.mark.timeout(60)
def test_a_pgconnect_timeout_that_is_no_number_is_bad_input(tmp_path: Path) -> None:
    """``PGCONNECT_TIMEOUT=abc`` is the user's input, said once as such (exit 2), not a
    failure of the store at every connection (exit 3)."""
    proc = _spawn(
        tmp_path,
        ["runs"],
        WF_POSTGRES_DSN="postgresql://postgres@127.0.0.1:1/test",
        PGCONNECT_TIMEOUT="abc",
    )
    code, lines, _ = _ended(proc, time.monotonic())
    assert code == 2, lines
    assert lines == ["error: invalid PGCONNECT_TIMEOUT='abc': a whole number of seconds"]
