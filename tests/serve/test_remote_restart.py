"""``wf`` over ``WF_URL`` says what it says on the store here, and its follows ride out a
restart of the server (``wf._remote.RIDE_OUT``): ``wf run``'s wait, ``wf watch``, ``wf logs
-f``, ``wf cancel``'s wait."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serve.conftest import REPO, Served, env_for, free_port, spawn_server, stop


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = spawn_server(env_for(tmp_path))
    try:
        yield server
    finally:
        stop(server)


def _spawn(served: Served, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "wf", *args],
        cwd=REPO,
        env={**served.env, "WF_URL": served.url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _until(served: Served, run_id: str, status: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        found = httpx.get(f"{served.url}/api/v1/runs/{run_id}?events=false")
        if found.status_code == 200 and found.json()["status"] == status:
            return
        assert time.monotonic() < deadline, f"run {run_id} never {status}"
        time.sleep(0.05)


def _connections(port: int) -> int:
    """How many TCP connections to ``port`` on this machine are open (Linux's /proc)."""
    found = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                    found += 1
    return found


def test_a_remote_run_waiting_for_hooks_alone_returns_with_its_id(served: Served) -> None:
    # As `wf run` on the store here: the id on stdout, the command that finishes it, exit 0
    # (it waited in silence for ever).
    left = served.wf(
        "run", "tests.serve.flows:approval", "--input", '"rr1"', timeout=30, WF_URL=served.url
    )
    assert left.returncode == 0, left.stderr
    run_id = left.stdout.strip()
    assert run_id.startswith("wrun_")
    assert "waits for hook 'approve:rr1', which only the outside can deliver" in left.stderr
    assert "`wf hook resume approve:rr1 --data JSON`" in left.stderr
    assert "`wf run --wait`" in left.stderr
    as_json = served.wf(
        "run", "tests.serve.flows:approval", "--input", '"rr2"', "--json", "--id", "j2",
        timeout=30, WF_URL=served.url,
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stdout.strip() == '{"run_id": "j2", "status": "suspended", "output": null}'
    # --wait keeps waiting, as on the store here: the payload ends it.
    waiting = _spawn(
        served, "run", "tests.serve.flows:approval", "--input", '"rr3"', "--wait", "--id", "w3"
    )
    _until(served, "w3", "suspended")
    time.sleep(1.0)
    assert waiting.poll() is None
    payload = {"approved": True, "by": "ada"}
    assert httpx.post(f"{served.url}/api/v1/hooks/approve:rr3", json=payload).is_success
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err
    assert out.strip() == '"approved by ada"'


def test_ctrl_c_says_the_run_goes_on_on_the_server(served: Served) -> None:
    waiting = _spawn(served, "run", "tests.serve.flows:sleeper", "--input", "3600", "--id", "c1")
    _until(served, "c1", "suspended")
    time.sleep(0.5)
    waiting.send_signal(signal.SIGINT)
    _out, err = waiting.communicate(timeout=20)
    assert waiting.returncode == 130, err
    assert "interrupted: run c1 continues durably on the wf server" in err
    assert "`wf inspect c1`" in err


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc")
def test_remote_follows_ride_out_a_restart_of_the_server(tmp_path: Path) -> None:
    port = free_port()
    env = env_for(tmp_path)
    served = spawn_server(env, port=port)
    try:
        made = httpx.post(
            f"{served.url}/api/v1/runs",
            json={"target": "tests.serve.flows:ticking", "input": [80, 0.25], "id": "t1"},
        )
        assert made.status_code == 201, made.text
        streamed = httpx.post(
            f"{served.url}/api/v1/runs",
            json={"target": "tests.serve.flows:streaming", "input": [30, 0.2], "id": "s1"},
        )
        assert streamed.status_code == 201, streamed.text
        _until(served, "t1", "running")
        _until(served, "s1", "running")
        followers = {
            "stream": _spawn(served, "stream", "s1", "--follow"),
            "run": _spawn(served, "run", "tests.serve.flows:ticking", "--input", "[80, 0.25]",
                          "--id", "t1"),
            "watch": _spawn(served, "watch", "t1"),
            "logs": _spawn(served, "logs", "t1", "--follow"),
        }  # fmt: skip
        deadline = time.monotonic() + 60
        while _connections(port) < len(followers):  # each follows: a long poll or a feed
            assert time.monotonic() < deadline, "the followers never followed"
            assert all(p.poll() is None for p in followers.values())
            time.sleep(0.1)
        time.sleep(0.5)
        code, err = stop(served)  # a graceful stop: the running step finishes first
        assert code == 0, err
        time.sleep(1.0)  # nobody answers meanwhile
        served = spawn_server(env, port=port)
        answers = {name: p.communicate(timeout=60) for name, p in followers.items()}
    finally:
        stop(served)
    for name, proc in followers.items():
        out, err = answers[name]
        assert proc.returncode == 0, (name, out, err)
        assert "trying again for up to 300s" in err, (name, err)
        assert "answers again" in err, (name, err)
    assert answers["run"][0].strip() == "80"
    # Every line once, in order: read on from where the cut left it.
    assert answers["stream"][0] == "".join(f"line {i}\n" for i in range(30))
    assert "completed" in answers["watch"][0]
