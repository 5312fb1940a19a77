"""A real ``wf serve`` process: binding rules, the API over TCP on the local store and on
PostgreSQL, a stream followed while a ``wf worker`` process writes it, SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.serve.conftest import REPO, env_for, postgres_env, spawn_server, stop
from wf._interrupts import BLOCKED_AFTER


def test_binding_another_address_without_a_token_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wf", "serve", "--host", "0.0.0.0"],
        cwd=REPO,
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--token" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".workflows").exists()


def test_a_port_it_cannot_listen_on_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    """A port another process listens on: the start line said it served there, uvicorn logged
    its bind error as a log line, and the server exited 3, as for a store failure."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        result = subprocess.run(
            [sys.executable, "-m", "wf", "serve", "--port", str(port)],
            cwd=REPO,
            env=env_for(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    ), result.stderr
    assert not (tmp_path / ".workflows").exists()


@pytest.fixture(params=["local", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """A ``wf`` environment on a fresh local store or PostgreSQL schema."""
    if request.param == "local":
        return env_for(tmp_path)
    return postgres_env(tmp_path, request.getfixturevalue("pg_schema"))


def test_the_api_over_tcp_with_a_token_and_sigterm(env: dict[str, str]) -> None:
    served = spawn_server(env, "--token", "t0ken-t0ken")
    try:
        client = httpx.Client(base_url=served.url, timeout=30)
        assert client.get("/api/v1/runs").status_code == 401
        auth = {"Authorization": "Bearer t0ken-t0ken"}
        started = client.post(
            "/api/v1/runs",
            json={"target": "tests.serve.flows:adder", "input": [20, 22]},
            headers=auth,
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        result = client.get(f"/api/v1/runs/{run_id}/result", params={"wait": 20}, headers=auth)
        assert result.json() == {"id": run_id, "status": "completed", "output": 42}
        assert client.get("/", headers=auth).status_code == 200
        assert client.get("/", follow_redirects=False).status_code == 303
        spec = client.get("/api/v1/openapi.json", headers=auth).json()
        assert spec["openapi"].startswith("3.")
    finally:
        code, err = stop(served)
    assert code == 0, err
    assert "wf serve stopped" in err


def test_a_stream_followed_while_a_worker_process_writes_it(env: dict[str, str]) -> None:
    served = spawn_server(env, "--no-worker")
    worker: subprocess.Popen[str] | None = None
    try:
        client = httpx.Client(base_url=served.url, timeout=60)
        started = client.post(
            "/api/v1/runs",
            json={"target": "tests.serve.flows:streaming", "input": {"count": 6, "pause": 0.2}},
        )
        run_id = started.json()["id"]
        assert client.get(f"/api/v1/runs/{run_id}").json()["status"] == "pending"
        worker = subprocess.Popen(
            [sys.executable, "-m", "wf", "worker", "--quiet"],
            cwd=REPO,
            env=served.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        arrivals: list[float] = []
        received = b""
        with client.stream("GET", f"/api/v1/runs/{run_id}/streams/default") as response:
            assert response.status_code == 200
            for chunk in response.iter_raw():
                arrivals.append(time.monotonic())
                received += chunk
        assert received == b"".join(f"line {i}\n".encode() for i in range(6))
        # Followed live: the chunks came over about a second, not all at the end.
        assert arrivals[-1] - arrivals[0] > 0.5
        result = client.get(f"/api/v1/runs/{run_id}/result", params={"wait": 20})
        assert result.json()["output"] == 6
    finally:
        if worker is not None:
            worker.terminate()
            worker.communicate(timeout=30)
        code, err = stop(served)
    assert code == 0, err


def test_sigterm_drains_a_run_in_flight(env: dict[str, str]) -> None:
    served = spawn_server(env)
    client = httpx.Client(base_url=served.url, timeout=30)
    started = client.post(
        "/api/v1/runs",
        json={"target": "tests.serve.flows:streaming", "input": {"count": 30, "pause": 0.1}},
    )
    run_id = started.json()["id"]
    deadline = time.monotonic() + 20
    while client.get(f"/api/v1/runs/{run_id}").json()["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    code, err = stop(served)
    assert code == 0, err
    # The running step finished, the run was left for the next worker, not failed.
    after = subprocess.run(
        [sys.executable, "-m", "wf", "inspect", run_id, "--json"],
        cwd=REPO,
        env=served.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert '"failed"' not in after.stdout.split('"steps"')[0]


def test_serve_options_come_from_the_configuration(tmp_path: Path) -> None:
    from tests.serve.conftest import free_port

    project = tmp_path / "proj"
    project.mkdir()
    env = env_for(tmp_path)
    # [tool.wf.serve] host: another address than loopback without a token is refused.
    (project / "pyproject.toml").write_text('[tool.wf.serve]\nhost = "0.0.0.0"\n')
    refused = subprocess.run(
        [sys.executable, "-m", "wf", "serve"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "binding 0.0.0.0" in refused.stderr

    # port and token from the table, the host from WF_SERVE_HOST (over the table's).
    port = free_port()
    (project / "pyproject.toml").write_text(
        f'[tool.wf.serve]\nhost = "0.0.0.0"\nport = {port}\ntoken = "t0ken-from-toml"\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "wf", "serve", "--no-worker"],
        cwd=project,
        env={**env, "WF_SERVE_HOST": "127.0.0.1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
            try:
                httpx.get(url + "/static/app.css", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "wf serve never answered"
                time.sleep(0.1)
        assert httpx.get(url + "/api/v1/runs", timeout=10).status_code == 401
        auth = {"Authorization": "Bearer t0ken-from-toml"}
        assert httpx.get(url + "/api/v1/runs", headers=auth, timeout=10).status_code == 200
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}" in err


def test_log_format_json_for_log_shippers(tmp_path: Path) -> None:
    import json

    served = spawn_server(env_for(tmp_path), "--log-format", "json")
    try:
        started = httpx.post(
            served.url + "/api/v1/runs",
            json={"target": "tests.serve.flows:adder", "input": [1, 2]},
            timeout=30,
        )
        run_id = started.json()["id"]
        result = httpx.get(
            f"{served.url}/api/v1/runs/{run_id}/result", params={"wait": 20}, timeout=30
        )
        assert result.json()["output"] == 3
    finally:
        code, err = stop(served)
    assert code == 0, err
    # Every line is one JSON object: the start, the run driven here, the drain, the stop.
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    assert lines[0]["url"] == served.url and lines[0]["drive"] is True
    [done] = [line for line in lines if line.get("run_id") == run_id]
    assert done["status"] == "completed" and done["workflow"] == "tests.serve.flows:adder"
    assert lines[-1]["message"] == "wf serve stopped"


def test_sigterm_stops_the_server_although_a_step_ignores_its_cancellation(
    tmp_path: Path,
) -> None:
    """After ``--grace`` the step is cancelled, ignores it, and is left running: the server
    still exits (it does not wait for that task while closing its event loop). The drive is
    waited for 0.5 s once cancelled, not 5 s (``tests.short_cancel_grace``)."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "deaf").touch()
    env = env_for(tmp_path, WF_TEST_LOG=str(log))
    served = spawn_server(env, "--grace", "0.2", module="tests.short_cancel_grace")
    try:
        client = httpx.Client(base_url=served.url, timeout=30)
        started = client.post("/api/v1/runs", json={"target": "tests.cli.flows:deaf_flow"})
        assert started.status_code == 201, started.text
        steps = log / "steps"
        deadline = time.monotonic() + 20
        while not (steps.exists() and "start deaf" in steps.read_text()):
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.05)
        code, err = stop(served)
        assert code == 0, err
        assert "ignored a cancellation" in steps.read_text()
        assert f"run {started.json()['id']} did not stop when cancelled" in err
    finally:
        (log / "deaf").unlink()


def test_a_second_sigterm_exits_while_a_step_blocks_the_event_loop(tmp_path: Path) -> None:
    """A step that never awaits blocks the loop (the server too): the first SIGTERM cannot
    drain, says so and how to leave; a second exits at once (130)."""
    spinning = tmp_path / "spin"
    spinning.touch()
    served = spawn_server(env_for(tmp_path))
    try:
        started = httpx.post(
            served.url + "/api/v1/runs",
            json={"target": "tests.serve.flows:spinning", "input": [str(spinning)]},
            timeout=30,
        )
        assert started.status_code == 201, started.text
        deadline = time.monotonic() + 20
        while not (tmp_path / "spin.started").exists():
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.05)
        served.proc.terminate()
        time.sleep(BLOCKED_AFTER + 1.0)
        served.proc.terminate()
        _out, err = served.proc.communicate(timeout=15)
    finally:
        spinning.unlink()
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.communicate()
    assert served.proc.returncode == 130, err
    assert "SIGTERM: the event loop is blocked in " in err
    assert "SIGTERM again: exiting now" in err and "Traceback" not in err


def test_port_0_serves_and_names_the_port_the_os_picked(tmp_path: Path) -> None:
    """``--port 0``: the start line and the webhooks' URLs name the port bound, not 0."""
    import json
    import queue
    import threading

    proc = subprocess.Popen(
        [sys.executable, "-m", "wf", "serve", "--port", "0", "--log-format", "json"],
        cwd=REPO,
        env=env_for(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    served = None
    try:
        assert proc.stderr is not None
        # Lines are read in a thread: a select on the pipe would miss lines already read
        # into the stream's buffer with the one before.
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()
        deadline = time.monotonic() + 30
        first: dict[str, str] = {}
        while "url" not in first:  # the start line
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("wf serve never said where it serves") from None
            first = json.loads(line)
        url = first["url"]
        assert not url.endswith(":0") and first["base_url"] == url, first
        from tests.serve.conftest import Served

        served = Served(proc, url, env_for(tmp_path))
        started = httpx.post(
            url + "/api/v1/runs",
            json={"target": "tests.serve.flows:webhook_url", "input": "p0"},
            timeout=30,
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        result = httpx.get(f"{url}/api/v1/runs/{run_id}/result", params={"wait": 20}, timeout=30)
        assert result.json()["output"] == url + "/webhooks/p0"
    finally:
        proc.terminate() if served is not None else proc.kill()
        code = proc.wait(timeout=30)
        if served is not None:
            left = []
            while not lines.empty():
                left.append(lines.get_nowait())
            assert code == 0, "".join(left)


def test_sigterm_answers_the_waits_in_flight(tmp_path: Path) -> None:
    # Clients waiting on ``?wait`` get their answer at SIGTERM: no waiter is cut off with a
    # traceback by uvicorn's shutdown.
    import threading

    served = spawn_server(env_for(tmp_path))
    client = httpx.Client(base_url=served.url, timeout=30)
    run_id = client.post(
        "/api/v1/runs", json={"target": "tests.serve.flows:napper", "input": [1000]}
    ).json()["id"]
    deadline = time.monotonic() + 20
    while client.get(f"/api/v1/runs/{run_id}").json()["status"] != "suspended":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    answers: list[int] = []

    def wake() -> None:
        with httpx.Client(base_url=served.url, timeout=30) as own:
            answers.append(own.post(f"/api/v1/runs/{run_id}/wake?wait=true").status_code)

    waiters = [threading.Thread(target=wake) for _ in range(5)]
    for waiter in waiters:
        waiter.start()
    time.sleep(1.0)
    code, err = stop(served)
    for waiter in waiters:
        waiter.join(10)
    assert code == 0, err
    assert answers == [200] * 5
    assert "Traceback" not in err and "Exception in ASGI" not in err, err
    assert "Cancel" not in err, err


@pytest.mark.parametrize(
    ("flow", "raised"),
    [("callback_exit", "SystemExit(4)"), ("task_interrupt", "KeyboardInterrupt")],
)
def test_code_in_a_run_raising_systemexit_or_keyboardinterrupt_does_not_end_the_server(
    tmp_path: Path, flow: str, raised: str
) -> None:
    """As for ``wf worker`` (``tests/cli/test_worker_exit.py``): raised outside the run's steps
    into the event loop, it ended ``wf serve`` with the code's exit status, or as if
    interrupted. The server says what and whose, and goes on serving and driving."""
    served = spawn_server(env_for(tmp_path))
    client = httpx.Client(base_url=served.url, timeout=30)
    try:
        started = client.post("/api/v1/runs", json={"target": f"tests.cli.exit_flows:{flow}"})
        assert started.status_code == 201, started.text
        answer = client.get(f"/api/v1/runs/{started.json()['id']}/result", params={"wait": 20})
        assert answer.json()["status"] == "completed", answer.text
        assert served.proc.poll() is None
        beside = client.post(
            "/api/v1/runs", json={"target": "tests.cli.exit_flows:beside", "input": 7}
        )
        done = client.get(f"/api/v1/runs/{beside.json()['id']}/result", params={"wait": 20})
        assert done.json()["status"] == "completed", done.text
    finally:
        code, err = stop(served)
    assert code == 0, err
    said = [line for line in err.splitlines() if raised in line]
    assert len(said) == 1 and "not a signal" in said[0], err
    assert "Traceback" not in err


def test_a_server_ended_by_an_error_does_not_wait_for_a_thread_a_step_left(
    tmp_path: Path,
) -> None:
    """As for ``wf worker``: the threads a step left were waited for only when the loop
    returned; a server ended with 1 (an exit no run owns) waited for them forever."""
    served = spawn_server(env_for(tmp_path), "--grace", "0.5")
    try:
        started = httpx.post(
            served.url + "/api/v1/runs",
            json={"target": "tests.cli.exit_flows:thread_then_exit"},
            timeout=30,
        )
        assert started.status_code == 201, started.text
        served.proc.wait(timeout=20)
    finally:
        code, err = stop(served)  # ended already, or the fault under test: killed
    assert code == 1, err
    said = [line for line in err.splitlines() if "'lib-pool'" in line]
    assert len(said) == 1 and "0.5 s" in said[0], err
    assert "SystemExit(5) raised by code on the event loop" in err
