"""The remote client: ``wf.start``, ``wf.get_run``, ``wf.resume_hook`` and the CLI over HTTP,
against a real ``wf serve`` (the local store, and PostgreSQL)."""

from __future__ import annotations

import json
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import wf
from tests.serve import flows
from tests.serve.conftest import DSN, Served, env_for, postgres_or_skip, spawn_server, stop
from tests.serve.flows import Approval

TOKEN = "remote-token-1"


@pytest.fixture(scope="module", params=["local", "postgres"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A ``wf serve --token`` on a fresh store, one per store for the module's tests (a
    server's start is about a second): each test starts runs of its own, with hook tokens of
    its own, and looks at those only."""
    tmp_path = tmp_path_factory.mktemp("served")
    schema = None
    if request.param == "local":
        env = env_for(tmp_path)
    else:
        import psycopg

        postgres_or_skip()
        schema = f"wf_test_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        options = urllib.parse.quote(f"-csearch_path={schema}")
        separator = "&" if "?" in DSN else "?"
        env = env_for(tmp_path, WF_POSTGRES_DSN=f"{DSN}{separator}options={options}")
    try:
        server = spawn_server(env, "--token", TOKEN)
        try:
            yield server
        finally:
            stop(server)
    finally:
        if schema is not None:
            with psycopg.connect(DSN, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '10s'")
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def remote(served: Served) -> Iterator[Served]:
    """This process configured to talk to ``served``."""
    wf.configure(url=served.url, token=TOKEN)
    try:
        yield served
    finally:
        from wf._remote import configure_remote

        configure_remote(None)


async def test_start_result_hooks_streams_and_control_over_http(remote: Served) -> None:
    run = await wf.start(flows.adder, 40, b=2)
    assert await run.result(timeout=30) == 42
    assert await run.status() == wf.RunStatus.COMPLETED
    same = wf.get_run(run.id)
    assert (await same.record()).workflow == "tests.serve.flows:adder"

    hooked = await wf.start(flows.approval, "remote")
    await hooked.settle(timeout=30)
    with pytest.raises(wf.HookError):
        await wf.resume_hook("approve:remote", {"approved": "?"})
    owner = await wf.resume_hook("approve:remote", Approval(True, "http"))
    assert owner.id == hooked.id
    assert await hooked.result(timeout=30) == "approved by http"

    streaming = await wf.start(flows.streaming, 3)
    chunks = [c async for c in streaming.read_stream()]
    assert chunks == [b"line 0\n", b"line 1\n", b"line 2\n"]

    failing = await wf.start(flows.failing, "remote boom")
    with pytest.raises(wf.RunFailed, match="remote boom"):
        await failing.result(timeout=30)

    sleeping = await wf.start("tests.serve.flows:sleeper", 3600.0)
    await sleeping.settle(timeout=30)
    assert await sleeping.cancel() is True
    with pytest.raises(wf.RunCancelled):
        await sleeping.result(timeout=30)
    with pytest.raises(wf.RunNotFound):
        await wf.get_run("wrun_00000000000000000000000000").status()


async def test_errors_come_back_as_data_the_same_shape_as_locally(remote: Served) -> None:
    # The error's module is the server's: this process never imports it, so the original
    # comes back as data (type name, message, fields), as a local reader that never imported
    # it gets it.
    assert "tests.serve.error_flows" not in sys.modules
    run = await wf.start("tests.serve.error_flows:declined", 51)
    with pytest.raises(wf.RunFailed) as failed:
        await run.result(timeout=30)
    error = failed.value
    assert (error.error_type, error.message, error.fields) == (
        "tests.serve.error_flows.CardDeclined",
        "card declined",
        {"code": 51},
    )
    assert isinstance(error.original, wf.StepFailed)
    assert error.original.fields == {"code": 51}
    assert error.traceback is not None and "CardDeclined" in error.traceback

    # Where the module is imported, the original is rebuilt and ``except`` works.
    failing = await wf.start(flows.failing, "typed boom")
    with pytest.raises(wf.RunFailed) as typed:
        await failing.result(timeout=30)
    assert isinstance(typed.value.original, ValueError)
    assert str(typed.value.original) == "typed boom"


async def test_options_of_a_start_travel_to_the_server(remote: Served) -> None:
    ref = wf.ref("tests.serve.flows:adder").with_options(priority=7, delay=3600)
    run = await wf.start(ref, 1, b=2)
    record = await run.record()
    assert (record.priority, record.status) == (7, wf.RunStatus.PENDING)
    assert record.wake_at is not None and record.wake_at > record.created_at + 3000


# The local store only: this checks the CLI's side of ``WF_URL`` (each command a process of its
# own, ~1 s each), which does not change with the server's store; the server's answers on
# PostgreSQL (start, result, hooks, streams, cancel) are checked on both stores by the tests
# above, from this process.
@pytest.mark.parametrize("served", ["local"], indirect=True)
def test_the_cli_talks_to_the_server_with_wf_url(served: Served) -> None:
    env = {"WF_URL": served.url, "WF_TOKEN": TOKEN, "WF_DIR": "/nonexistent/never-made"}
    started = served.wf("run", "tests.serve.flows:adder", "--input", "[1, 2]", "--detach", **env)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    done = served.wf("run", "tests.serve.flows:adder", "--input", "[5, 5]", **env)
    assert (done.returncode, done.stdout.strip()) == (0, "10"), done.stderr
    listed = served.wf("runs", "--json", **env)
    assert run_id in [r["id"] for r in json.loads(listed.stdout)]
    inspected = served.wf("inspect", run_id, "--json", **env)
    assert json.loads(inspected.stdout)["run"]["id"] == run_id
    hooked = served.wf("run", "tests.serve.flows:approval", "--input", '"cli"', "-d", **env)
    hooked_id = hooked.stdout.strip()
    for _ in range(300):
        state = json.loads(served.wf("inspect", hooked_id, "--json", **env).stdout)
        if state["hooks"]:
            break
    refused = served.wf("hook", "resume", "approve:cli", "--data", '{"bad": 1}', **env)
    assert refused.returncode == 2, refused.stderr
    data = '{"approved": false, "by": "cli"}'
    resumed = served.wf("hook", "resume", "approve:cli", "--data", data, "--wait", **env)
    assert (resumed.returncode, resumed.stdout.strip()) == (0, hooked_id), resumed.stderr
    streamed_id = served.wf(
        "run", "tests.serve.flows:streaming", "--input", "[2]", "-d", **env
    ).stdout.strip()
    streamed = served.wf("stream", streamed_id, "--follow", **env)
    assert streamed.stdout == "line 0\nline 1\n"
    sleeper = served.wf("run", "tests.serve.flows:sleeper", "--input", "3600", "-d", **env)
    cancelled = served.wf("cancel", sleeper.stdout.strip(), **env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancelled" in cancelled.stderr
    unknown = served.wf("cancel", "wrun_00000000000000000000000000", **env)
    assert unknown.returncode == 2
    assert "no run" in unknown.stderr
    bad_token = served.wf("runs", **{**env, "WF_TOKEN": "wrong"})
    assert bad_token.returncode != 0
    assert "401" in bad_token.stderr
    assert not Path("/nonexistent/never-made").exists()


@pytest.mark.parametrize("served", ["local"], indirect=True)
def test_a_payload_the_run_refuses_once_stored_is_exit_2_over_wf_url(served: Served) -> None:
    """As on the store here (tests/cli/test_hooks_cli.py): the hook's type is a local class,
    which nobody imports by name, so the server checks its JSON schema (no validator) and
    stores the payload; the run refuses it as it takes it in. It was exit 0 over ``WF_URL``:
    the server's answer did not name the message that carried the payload."""
    env = {"WF_URL": served.url, "WF_TOKEN": TOKEN}
    token = f"positive-{uuid.uuid4().hex[:8]}"
    started = served.wf("run", "tests.serve.flows:positive", "--input", json.dumps(token), **env)
    assert started.returncode == 0, started.stderr  # waits for its hook alone: back at once
    run_id = started.stdout.strip()
    refused = served.wf("hook", "resume", token, "--data", '{"n": -1}', **env)
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout.strip() == run_id  # stored: the run is named all the same
    line = refused.stderr.splitlines()[-1]
    assert line.startswith(f"error: run {run_id} refused the payload:"), refused.stderr
    assert "n must be >= 0" in line
    accepted = served.wf("hook", "resume", token, "--data", '{"n": 3}', **env)
    assert accepted.returncode == 0, accepted.stderr
    assert f"run {run_id}: completed" in accepted.stderr


async def test_a_stream_whose_writer_was_cut_off_is_said_incomplete_over_http(
    remote: Served,
) -> None:
    import httpx

    run = await wf.start(flows.cut_off)
    with pytest.raises(wf.RunFailed):
        await run.result(timeout=30)
    chunks: list[bytes] = []
    with pytest.raises(wf.StreamIncomplete) as cut:
        async for chunk in run.read_stream():
            chunks.append(chunk)
    assert (b"".join(chunks), cut.value.step) == (b"Half an", "answer_cut_off")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=remote.url, headers=headers, timeout=30) as client:
        detail = (await client.get(f"/api/v1/runs/{run.id}", params={"events": "false"})).json()
        assert detail["stream_info"]["default"] == {
            "chunks": 1, "closed": True, "complete": False, "cut_step": "answer_cut_off",
        }  # fmt: skip
        # The body ends without its last chunk: any HTTP client says it is incomplete.
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(f"/api/v1/runs/{run.id}/streams/default")


def test_configure_url_without_httpx_names_the_install_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A None in sys.modules stops the import, as if httpx were not installed.
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(wf.UsageError) as caught:
        wf.configure(url="http://127.0.0.1:1")
    assert str(caught.value) == "httpx is not installed: pip install 'wf-durable[serve]' adds it"


async def test_a_cut_off_stream_whose_name_file_is_damaged_is_said_incomplete_over_http(
    remote: Served,
) -> None:
    """The run's detail, which the remote reader asks once the body ended early, carries the
    stream its listing left out (found by the name the run's journal wrote): the remote reader
    and ``wf stream`` over ``WF_URL`` say it is incomplete, as they do locally, not that the
    server ended the stream early (exit 3)."""
    from wf.store.local._layout import stream_key

    if "WF_POSTGRES_DSN" in remote.env:
        pytest.skip("damages a stream's file")
    run = await wf.start(flows.cut_off)
    with pytest.raises(wf.RunFailed):
        await run.result(timeout=30)
    root = Path(remote.env["WF_DIR"])
    [name_file] = root.glob(f"runs/**/{run.id}/{stream_key('default')}.name")
    name_file.write_bytes(b"\xff\xfe")  # a name that is not UTF-8
    chunks: list[bytes] = []
    with pytest.raises(wf.StreamIncomplete) as cut:
        async for chunk in run.read_stream():
            chunks.append(chunk)
    assert (b"".join(chunks), cut.value.step) == (b"Half an", "answer_cut_off")
    env = {"WF_URL": remote.url, "WF_TOKEN": TOKEN}
    for follow in ("--follow", "--no-follow"):
        streamed = remote.wf("stream", run.id, follow, **env)
        assert (streamed.returncode, streamed.stdout) == (1, "Half an"), streamed.stderr
        assert "'default' is incomplete: step 'answer_cut_off' was cut off" in streamed.stderr
    # ``wf inspect`` over ``WF_URL`` says it is shown by name, as it does from the store.
    inspected = remote.wf("inspect", run.id, "--json", **env)
    assert inspected.returncode == 0, inspected.stderr
    assert inspected.stderr.startswith(
        "warning: stream 'default': its name file is damaged; shown by the name its journal "
        f"wrote: {name_file}: the stream's name is not UTF-8 ("
    )
