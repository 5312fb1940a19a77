"""The remote client's connections: kept and reused on an event loop, closed when the loop
ends or the client is configured away, and a server that went away between calls survived.

The server here is a small one in a thread that counts the connections it accepts and can
restart, or drop a request unanswered, on demand."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import wf
import wf.admin
from tests.serve.conftest import free_port
from wf._exceptions import ServerUnavailable

pytest.importorskip("httpx")

FLOW = "tests.serve.flows:adder"


class Counting:
    """An HTTP/1.1 server answering as a wf server would (``WF-API: 1``): ``POST /runs`` with
    a new id, ``GET /runs`` with no runs. ``accepted``: connections it took; ``open``: those
    not closed yet."""

    def __init__(self) -> None:
        self.port = free_port()
        self.accepted = 0
        self.open = 0
        self.drop_next = False  # close the connection of the next request without answering
        self.bounce_next: float | None = None  # that, and down for so many seconds (a restart)
        self.stall = False  # never answer
        self.hold = 0.0  # seconds to wait before answering
        self.heads: list[str] = []  # every request's head, as it came
        self.loop = asyncio.new_event_loop()
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.do(self.listen())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def do(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def listen(self) -> None:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", self.port)

    async def shut(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.close()
        await self.server.wait_closed()

    def restart(self) -> None:
        """Stop (closing every connection) and listen again on the same port."""
        self.do(self.shut())
        self.do(self.listen())

    async def bounce(self, down: float) -> None:
        """Stop (closing every connection), and listen again on the same port ``down``
        seconds later: a restart that cut a request."""
        await self.shut()
        await asyncio.sleep(down)
        await self.listen()

    def until_closed(self) -> int:
        """The connections still open once the client closed its own (within 5 s)."""
        deadline = time.monotonic() + 5
        while self.open and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.open

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open += 1
        self.writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head.decode())
                lines = head.decode().split("\r\n")
                method = lines[0].split()[0]
                size = 0
                for line in lines[1:]:
                    if line.lower().startswith("content-length:"):
                        size = int(line.split(":")[1])
                await reader.readexactly(size)
                if self.drop_next:
                    self.drop_next = False
                    return
                if self.bounce_next is not None:
                    down, self.bounce_next = self.bounce_next, None
                    self.loop.create_task(self.bounce(down))
                    return
                if self.stall:
                    await asyncio.Event().wait()
                await asyncio.sleep(self.hold)
                posted = {
                    "id": f"run-{self.accepted}",
                    "run_id": "run-1",
                    "sent": True,
                    "status": "running",
                }
                data = posted if method == "POST" else {"runs": []}
                body = json.dumps(data).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nWF-API: 1\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            self.writers.discard(writer)
            writer.close()

    def stop(self) -> None:
        self.do(self.shut())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def server() -> Iterator[Counting]:
    counting = Counting()
    try:
        yield counting
    finally:
        counting.stop()


@pytest.fixture
def configured(server: Counting) -> Iterator[Counting]:
    """This process configured to talk to ``server``."""
    wf.configure(url=server.url)
    try:
        yield server
    finally:
        wf.configure(url=server.url)  # closes the client's connections before the server goes
        from wf._remote import configure_remote

        configure_remote(None)


async def starts(count: int) -> list[str]:
    return [(await wf.start(FLOW, 1, b=2)).id for _ in range(count)]


def test_calls_on_one_loop_share_one_connection(configured: Counting) -> None:
    assert len(asyncio.run(starts(20))) == 20
    assert configured.accepted == 1


def test_wf_url_calls_on_one_loop_share_one_connection(
    server: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WF_URL", server.url)
    asyncio.run(starts(10))
    assert server.accepted == 1


async def test_concurrent_calls_keep_their_connections_for_the_next(
    configured: Counting,
) -> None:
    await asyncio.gather(*(starts(5) for _ in range(10)))
    assert configured.accepted <= 10


def test_each_asyncio_run_works_and_closes_its_connections_at_its_end(
    configured: Counting,
) -> None:
    gc.collect()  # earlier tests' garbage (their sockets) is not this test's to warn of
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert len(asyncio.run(starts(5))) == 5
            assert configured.until_closed() == 0
        gc.collect()
    assert configured.accepted == 3
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


async def test_a_client_configured_away_closes_its_connections(configured: Counting) -> None:
    await starts(3)
    assert configured.open == 1
    wf.configure(url=configured.url, token="another-token")
    await asyncio.sleep(0)  # the close runs as a task of this loop
    assert await asyncio.to_thread(configured.until_closed) == 0
    await starts(3)
    assert configured.accepted == 2


async def test_configuring_the_same_server_again_keeps_the_client(configured: Counting) -> None:
    await starts(2)
    wf.configure(url=configured.url)
    await asyncio.sleep(0)
    await starts(2)
    assert (configured.accepted, configured.open) == (1, 1)


@pytest.mark.parametrize("token", [None, "another-token"])
async def test_configuring_again_never_cuts_off_a_request_in_flight(
    configured: Counting, token: str | None
) -> None:
    await starts(1)
    configured.hold = 0.3
    in_flight = asyncio.ensure_future(starts(1))
    await asyncio.sleep(0.1)  # the request sent, its answer not yet come
    wf.configure(url=configured.url, token=token)
    await asyncio.sleep(0)
    assert len(await in_flight) == 1
    configured.hold = 0.0
    if token is not None:  # the client replaced is closed once its request ended
        assert await asyncio.to_thread(configured.until_closed) == 0


async def test_a_client_closed_before_its_request_left_is_replaced(
    configured: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf._remote import remote_client

    client = remote_client()
    assert client is not None
    session = client.session
    closed = await session()
    await closed.aclose()
    handed = [closed]  # closed as another thread's configure would, between get and send

    async def first_closed() -> Any:
        return handed.pop() if handed else await session()

    monkeypatch.setattr(client, "session", first_closed)
    assert len(await starts(1)) == 1
    assert not handed


async def test_a_server_restart_between_calls_is_survived(configured: Counting) -> None:
    await starts(2)
    configured.restart()
    assert len(await starts(2)) == 2
    async with wf.admin.connect() as admin:
        assert (await admin.list_runs()).runs == []
    assert configured.accepted == 2


async def test_a_connection_dropped_under_a_read_is_tried_again_once(
    configured: Counting,
) -> None:
    async with wf.admin.connect() as admin:
        await admin.list_runs()
        configured.drop_next = True
        assert (await admin.list_runs()).runs == []
    assert configured.accepted == 2


async def test_a_connection_dropped_under_a_start_is_server_unavailable(
    configured: Counting,
) -> None:
    await starts(1)
    configured.drop_next = True
    with pytest.raises(ServerUnavailable, match="cannot reach the wf server"):
        await starts(1)
    assert len(await starts(1)) == 1  # and the next goes on a new connection


async def test_a_connection_dropped_under_a_keyed_resume_is_tried_again_once(
    configured: Counting,
) -> None:
    """A resume with an idempotency key is safe to send again (the server delivers it once):
    a lost answer is a retry, not ``ServerUnavailable``."""
    await wf.resume_hook("tok", 1, key="k")
    configured.drop_next = True
    assert (await wf.resume_hook("tok", 1, key="k")).id == "run-1"
    keyed = [head for head in configured.heads if "idempotency-key: k\r\n" in head.lower()]
    assert len(keyed) == 3 and configured.accepted == 2
    configured.drop_next = True
    with pytest.raises(ServerUnavailable, match="cannot reach the wf server"):
        await wf.resume_hook("tok", 1)  # without a key: not sent again
    assert "idempotency-key" not in configured.heads[-1].lower()


async def test_a_request_safe_to_send_again_cut_by_a_restart_is_sent_once_it_answers(
    configured: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start with an id, a cancel: the same request twice does what it does once. Cut by a
    restart (the server down for a while), each is sent again once the server answers
    (``RIDE_OUT``); they failed as ``ServerUnavailable``, as a start without an id and a
    wake-up (a second would end the run's next sleep too) still do."""
    import wf._remote

    said: list[str] = []
    monkeypatch.setattr(wf._remote, "say_outage", said.append)
    await starts(1)
    run = wf.get_run("run-1")
    async with wf.admin.connect() as admin:
        sends: list[tuple[str, Any]] = [
            ("POST /api/v1/runs", lambda: wf.start(FLOW, 1, b=2, run_id="given-1")),
            ("POST /api/v1/runs/run-1/cancel", run.cancel),
            ("POST /api/v1/runs", lambda: admin.start(FLOW, [1, 2], run_id="given-2")),
            ("POST /api/v1/runs/run-1/cancel", lambda: admin.cancel("run-1")),
        ]
        for request, send in sends:
            configured.bounce_next = 0.3
            await asyncio.wait_for(send(), 30)
            heads = [head for head in configured.heads if head.startswith(request + "?")
                     or head.startswith(request + " ")]  # fmt: skip
            assert len(heads) >= 2, (request, configured.heads[-3:])
            assert len(said) == 2, said
            assert said[0].endswith("trying again for up to 300s"), said
            assert "answers again" in said[1], said
            said.clear()
        unsafe: list[Any] = [
            lambda: admin.start(FLOW, [1, 2]),  # no id: a second start is another run
            run.wake_up,  # a second ends the run's next sleep too
            lambda: admin.wake("run-1"),
        ]
        remote: Any = getattr(admin, "remote")  # noqa: B009 (the HttpAdmin's client)

        async def listed() -> Any:
            return await remote.call("GET", "/runs")

        for send in unsafe:
            configured.bounce_next = 0.3
            with pytest.raises(ServerUnavailable, match="may have been done already") as cut:
                await send()
            assert "cannot reach the wf server" in str(cut.value)
            await remote.riding_out(listed)  # the rest of the restart


async def test_a_result_rides_out_a_restart_no_longer_than_its_timeout(
    configured: Counting,
) -> None:
    await starts(1)
    configured.bounce_next = 20.0  # down longer than the result's timeout
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"did not finish within 1\.5 s") as late:
        await wf.get_run("run-1").result(timeout=1.5)
    assert isinstance(late.value.__cause__, ServerUnavailable), late.value.__cause__
    assert 1.4 < time.monotonic() - began < 5


async def test_configure_timeout_bounds_each_request(configured: Counting) -> None:
    wf.configure(url=configured.url, timeout=0.2)
    configured.stall = True
    with pytest.raises(ServerUnavailable, match=r"timed out after 0\.2 s"):
        await starts(1)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5", True])
def test_configure_timeout_must_be_seconds_above_0(bad: Any) -> None:
    with pytest.raises(wf.UsageError, match="timeout must be a number of seconds above 0"):
        wf.configure(url="http://127.0.0.1:1", timeout=bad)


def test_configure_timeout_needs_a_url() -> None:
    with pytest.raises(wf.UsageError, match=r"timeout=\.\.\.\) is the remote client's"):
        wf.configure(timeout=5)
