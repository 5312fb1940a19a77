"""``wf`` over ``WF_URL`` says what it says on the store here, and its follows ride out a
restart of the server (``wf._remote.RIDE_OUT``): ``wf run``'s wait, ``wf watch``, ``wf logs
-f``, ``wf cancel``'s wait."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
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


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_says_the_run_goes_on_on_the_server(
    served: Served, sig: signal.Signals
) -> None:
    # SIGTERM (a container's stop, `timeout`) as Ctrl-C: one line, exit 130, no traceback,
    # and the run is left running on the server.
    waiting = _spawn(served, "run", "tests.serve.flows:sleeper", "--input", "3600", "--id", "c1")
    _until(served, "c1", "suspended")
    time.sleep(0.5)
    waiting.send_signal(sig)
    _out, err = waiting.communicate(timeout=20)
    assert waiting.returncode == 130, err
    assert "interrupted: run c1 continues durably on the wf server" in err
    assert "`wf inspect c1`" in err
    assert "Traceback" not in err, err
    _until(served, "c1", "suspended")  # still there, not cancelled


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
        # The graceful stop lets the streaming step finish: on a loaded machine the followers
        # attach late, and the whole stream may be read before the outage (then its follower
        # has nothing to ride out: it ended at the stream's end, checked below).
        done_before = {name for name, p in followers.items() if p.poll() is not None}
        served = spawn_server(env, port=port)
        answers = {name: p.communicate(timeout=60) for name, p in followers.items()}
    finally:
        stop(served)
    assert done_before <= {"stream"}, done_before
    for name, proc in followers.items():
        out, err = answers[name]
        assert proc.returncode == 0, (name, out, err)
        if name in done_before:
            continue
        assert "trying again for up to 300s" in err, (name, err)
        assert "answers again" in err, (name, err)
    assert answers["run"][0].strip() == "80"
    # Every line once, in order: read on from where the cut left it.
    assert answers["stream"][0] == "".join(f"line {i}\n" for i in range(30))
    assert "completed" in answers["watch"][0]


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc")
def test_a_remote_run_s_result_and_watch_ride_out_a_restart_of_the_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wf.get_run(id).result()``, ``.watch()`` and ``.read_stream()`` over
    ``wf.configure(url=...)`` wait for a server that restarts, as the CLI's follows do (they
    raised ``ServerUnavailable``), said as warnings of the ``wf.remote`` logger."""
    import asyncio

    import wf
    import wf._remote
    from wf._remote import configure_remote

    monkeypatch.setattr(wf._remote, "say_outage", None)  # a program's: no CLI ran here

    port = free_port()
    env = env_for(tmp_path)
    servers = [spawn_server(env, port=port)]
    url = servers[0].url

    def restart() -> None:
        code, err = stop(servers[-1])  # a graceful stop: the running step finishes first
        assert code == 0, err
        time.sleep(1.0)  # nobody answers meanwhile
        servers.append(spawn_server(env, port=port))

    async def follow() -> tuple[object, list[wf.RunEvent], list[bytes]]:
        run = wf.get_run("p1")

        async def events() -> list[wf.RunEvent]:
            return [event async for event in run.watch()]

        async def chunks() -> list[bytes]:
            return [chunk async for chunk in wf.get_run("s1").read_stream()]

        result = asyncio.ensure_future(run.result(timeout=120))
        watched = asyncio.ensure_future(events())
        streamed = asyncio.ensure_future(chunks())
        deadline = time.monotonic() + 30
        while _connections(port) < 3:  # the result's long poll, the watch's feed, the stream
            assert time.monotonic() < deadline, "the remote run never followed"
            assert not result.done() and not watched.done()
            await asyncio.sleep(0.1)
        await asyncio.to_thread(restart)
        return (
            await asyncio.wait_for(result, 90),
            await asyncio.wait_for(watched, 90),
            await asyncio.wait_for(streamed, 90),
        )

    try:
        made = httpx.post(
            f"{url}/api/v1/runs",
            json={"target": "tests.serve.flows:ticking", "input": [40, 0.25], "id": "p1"},
            timeout=30,
        )
        assert made.status_code == 201, made.text
        made = httpx.post(
            f"{url}/api/v1/runs",
            json={"target": "tests.serve.flows:streaming", "input": [40, 0.2], "id": "s1"},
            timeout=30,
        )
        assert made.status_code == 201, made.text
        _until(servers[0], "p1", "running")
        _until(servers[0], "s1", "running")
        wf.configure(url=url)
        with caplog.at_level("WARNING", logger="wf.remote"):
            output, events, lines = asyncio.run(follow())
    finally:
        configure_remote(None)
        stop(servers[-1])
    assert output == 40
    assert events[-1].kind == "completed" and events[-1].output == 40
    # Every chunk once, in order: read on from where the restart cut the stream's body.
    assert lines == [f"line {i}\n".encode() for i in range(40)]
    told = [(e.kind, e.ts) for e in events]
    assert len(told) == len(set(told)), told  # a watch opened again goes on where it was
    said = [r.getMessage() for r in caplog.records if r.name == "wf.remote"]
    assert any("trying again for up to 300s" in line for line in said), said
    assert any("answers again" in line for line in said), said


def _cut_once(port: int) -> threading.Thread:
    """Listen on ``port`` (a server on its way down) for one request, read its head and
    drop the connection unanswered, then stop listening: a restart that cuts a request."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    listener.settimeout(30)

    def cut() -> None:
        try:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(10)
                head = b""
                while b"\r\n\r\n" not in head:
                    got = conn.recv(65536)
                    if not got:
                        break
                    head += got
        finally:
            listener.close()

    thread = threading.Thread(target=cut, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("cancel", "c9"), 0),
        (("run", "tests.serve.flows:echo", "--input", '"hi"', "--id", "e9"), 0),
        (("run", "tests.serve.flows:echo", "--input", '"hi"'), 3),
    ],
    ids=["cancel", "start with an id", "start without one"],
)
def test_a_request_cut_by_a_restart_is_sent_again_only_when_safe(
    tmp_path: Path, args: tuple[str, ...], code: int
) -> None:
    """A cancel and a start with a run id, cut by a restart, are sent again once the server
    answers (they exited 3); a start without an id is not (a second would be another run),
    and says it may have been done."""
    port = free_port()
    env = env_for(tmp_path)
    served = spawn_server(env, port=port)
    try:
        made = httpx.post(
            f"{served.url}/api/v1/runs",
            json={"target": "tests.serve.flows:sleeper", "input": 3600, "id": "c9"},
            timeout=30,  # the first start imports the flows: seconds on a loaded machine
        )
        assert made.status_code == 201, made.text
        _until(served, "c9", "suspended")
        stop(served)
        cutting = _cut_once(port)
        command = _spawn(served, *args)
        cutting.join(30)
        assert not cutting.is_alive(), "the command never sent its request"
        time.sleep(0.5)  # nobody answers meanwhile
        served = spawn_server(env, port=port)
        out, err = command.communicate(timeout=60)
    finally:
        stop(served)
    assert command.returncode == code, (out, err)
    if code == 0:
        assert "trying again for up to 300s" in err and "answers again" in err, err
    else:
        assert err.startswith("error: cannot reach the wf server at "), err
        assert "POST /runs may have been done already: it is not sent again" in err, err
    if args[0] == "run" and code == 0:
        assert out.strip() == '"hi"', (out, err)
