"""A stream followed over ``WF_URL`` (``HttpAdmin.follow_stream``, what ``wf stream --follow``
reads) across a restart of the server: read on from the chunk it reached, never again from
its ``start``, and given up in one line when the server stays away."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

import wf
import wf._remote
from tests.serve import flows
from tests.serve.conftest import Api, free_port
from tests.serve.cutting_proxy import CuttingProxy
from wf._exceptions import ServerUnavailable
from wf._remote import RemoteClient, RemoteRun
from wf.admin._http import HttpAdmin


@pytest.fixture
async def proxy(live: Api, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[CuttingProxy]:
    """A proxy in front of the live server, whose ``bounce`` plays a restart; a follow tries
    again at once (no pause of 0.5 s) and says its outage to nobody."""
    monkeypatch.setattr(wf._remote, "RIDE_OUT_RETRY", (0.01, 0.05))
    monkeypatch.setattr(wf._remote, "say_outage", lambda line: None)
    front = CuttingProxy(str(live.client.base_url).rstrip("/"), free_port())
    await front.listen()
    try:
        yield front
    finally:
        await front.close()


async def _answered(proxy: CuttingProxy, run_id: str) -> None:
    """Return once the head of the answer to a stream request of the run reached the client:
    a server it reached, whose restart a follow rides out."""
    while not any(f"/runs/{run_id}/streams/" in line for line in proxy.answered):
        await asyncio.sleep(0.01)


def _starts(proxy: CuttingProxy, run_id: str) -> list[str]:
    """The ``start`` of each stream request the proxy forwarded."""
    asked = [line.split(" ")[1] for line in proxy.log if f"/runs/{run_id}/streams/" in line]
    return [urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)["start"][0] for path in asked]


def _reader(how: str, url: str, run_id: str, start: int = 0) -> AsyncIterator[bytes]:
    """The chunks of the run's default stream, followed over HTTP as ``how`` reads them:
    ``wf stream -f`` (``HttpAdmin.follow_stream``) or a program (``run.read_stream``)."""
    client = RemoteClient(url, timeout=30)
    if how == "admin":
        return HttpAdmin(client).follow_stream(run_id, start=start, follow=True)
    return client.run(run_id).read_stream(start=start)


@pytest.mark.parametrize("how", ["admin", "run"])
@pytest.mark.parametrize("start", [1, -2])
async def test_a_followed_stream_reads_on_from_the_chunk_it_reached_after_a_restart(
    live: Api, proxy: CuttingProxy, start: int, how: str
) -> None:
    """``wf stream -f`` and ``run.read_stream`` ride a restart out the same way (one
    implementation): ``run.read_stream`` raised the restart's ``ServerUnavailable``."""
    token = f"restart{start}{how}"
    gate = flows.STREAM_GATE[token] = asyncio.Event()
    first, then = ["a0", "a1", "a2"], ["b0", "b1"]
    run_id = await live.start("gated_stream", {"token": token, "first": first, "then": then})
    # The step wrote ``first`` and waits for the gate.
    await live.until(run_id, lambda d: d["stream_info"].get("default", {}).get("chunks") == 3)
    got: list[bytes] = []
    async with asyncio.timeout(30):
        async for chunk in _reader(how, proxy.url, run_id, start):
            got.append(chunk)
            if chunk == b"a2":  # every chunk written yet: the server restarts, the run goes on
                await proxy.bounce(0.2)
                gate.set()
    assert got == [b"a1", b"a2", b"b0", b"b1"]  # once each, in order
    assert _starts(proxy, run_id) == [str(start), "3"], proxy.log  # not from the start again


@pytest.mark.parametrize("how", ["admin", "run"])
async def test_a_followed_stream_gives_up_in_one_line_when_the_server_stays_away(
    live: Api, proxy: CuttingProxy, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setattr(wf._remote, "RIDE_OUT", 0.3)
    token = f"away{how}"
    flows.STREAM_GATE[token] = asyncio.Event()
    run_id = await live.start("gated_stream", {"token": token, "first": ["a0"], "then": []})
    got: list[bytes] = []
    with pytest.raises(ServerUnavailable) as away:
        async with asyncio.timeout(30):
            async for chunk in _reader(how, proxy.url, run_id):
                got.append(chunk)
                await proxy.shut()  # and never back
    flows.STREAM_GATE[token].set()
    assert got == [b"a0"]
    assert str(away.value).startswith(f"cannot reach the wf server at {proxy.url}: ")
    assert "\n" not in str(away.value)


async def test_bytes_in_parts_come_as_they_arrive_and_read_on_inside_a_chunk(
    live: Api, proxy: CuttingProxy
) -> None:
    """``whole=False`` (``wf stream``): a big chunk in the parts the server sends, never held
    whole; a restart that cut it halfway reads that chunk again, its bytes given once."""
    token = "parts"
    gate = flows.STREAM_GATE[token] = asyncio.Event()
    big = flows.numbered(1 << 20)
    run_id = await live.start(
        "gated_stream", {"token": token, "first": ["a0"], "then": ["b0"], "big": len(big)}
    )
    await live.until(run_id, lambda d: d["stream_info"].get("default", {}).get("chunks") == 2)
    admin = HttpAdmin(RemoteClient(proxy.url, timeout=30))
    got: list[bytes] = []
    async with asyncio.timeout(30):
        async for part in admin.follow_stream(run_id, follow=True, whole=False):
            got.append(part)
            if len(got) == 2:  # the first part of the big chunk: the server restarts
                assert 0 < len(part) < len(big)
                await proxy.bounce(0.2)
                gate.set()
    assert b"".join(got) == b"a0" + big + b"b0"
    assert max(map(len, got)) < len(big)
    assert _starts(proxy, run_id) == ["0", "1"], proxy.log  # the big chunk again, not a0


async def _followed_while(
    admin: HttpAdmin, run_id: str, start: int, meanwhile: Coroutine[Any, Any, None]
) -> list[bytes]:
    """Every chunk a follow of the run's stream from ``start`` reads while ``meanwhile`` (a
    restart of the server) runs beside it."""
    got: list[bytes] = []
    beside = asyncio.ensure_future(meanwhile)
    try:
        async with asyncio.timeout(30):
            async for chunk in admin.follow_stream(run_id, start=start, follow=True):
                got.append(chunk)
    finally:
        await beside
    return got


@pytest.mark.parametrize("start", [0, -1])
async def test_a_follow_that_received_nothing_yet_rides_out_a_restart(
    live: Api, proxy: CuttingProxy, start: int
) -> None:
    """``wf stream -f`` started before the step's first write (or a ``start`` from the end of
    a stream not written yet): a restart before any chunk came asks again from ``start`` (from
    the end: from the first chunk, which the server said it is)."""
    token = f"none{start}"
    gate = flows.STREAM_GATE[token] = asyncio.Event()
    then = ["b0", "b1"]
    run_id = await live.start("gated_stream", {"token": token, "first": [], "then": then})
    admin = HttpAdmin(RemoteClient(proxy.url, timeout=30))

    async def restart_once_asked() -> None:
        await _answered(proxy, run_id)
        await asyncio.sleep(0.05)  # the client took that head: the body is waited for
        await proxy.bounce(0.2)
        gate.set()

    got = await _followed_while(admin, run_id, start, restart_once_asked())
    assert got == [c.encode() for c in then]
    # Asked again from ``start``, or from the chunk the server said ``start`` from the end is.
    assert _starts(proxy, run_id)[:2] == [str(start), str(max(start, 0))], proxy.log


@pytest.mark.parametrize("start", [-1, -2])
async def test_a_start_from_the_end_of_a_stream_not_written_yet_is_its_first_chunk(
    live: Api, proxy: CuttingProxy, start: int
) -> None:
    """``wf stream -f --start -N`` before the stream's first write: the last N chunks there are
    when it starts, none, so every chunk written after. The server says so (``WF-Stream-Start:
    0``): chunks written while it restarts are read from the first, not as the last N of them
    (it asked again from ``-N``)."""
    token = f"empty{start}"
    gate = flows.STREAM_GATE[token] = asyncio.Event()
    then = ["b0", "b1", "b2"]
    run_id = await live.start("gated_stream", {"token": token, "first": [], "then": then})
    admin = HttpAdmin(RemoteClient(proxy.url, timeout=30))

    async def restart_once_asked() -> None:
        await _answered(proxy, run_id)
        await asyncio.sleep(0.05)  # the client took that head: the body is waited for
        await proxy.shut()
        gate.set()  # every chunk is written while the server is away
        await live.until(run_id, lambda d: d["status"] == "completed")
        await proxy.listen()

    got = await _followed_while(admin, run_id, start, restart_once_asked())
    assert got == [c.encode() for c in then]
    assert _starts(proxy, run_id)[:2] == [str(start), "0"], proxy.log


@wf.step(max_retries=0)
async def write_then_fail(count: int) -> None:
    async with wf.stream_writer() as writer:
        for i in range(count):
            await writer.write(flows.numbered(64 << 10) + b"|%d|" % i)
        raise wf.FatalError("the provider hung up")


@wf.workflow
async def many_then_cut(count: int) -> None:
    """Writes ``count`` chunks of 64 KiB, then its writer is cut off (the step fails)."""
    await write_then_fail(count)


flows.many_then_cut = many_then_cut  # type: ignore[attr-defined]


@pytest.mark.parametrize("whole", [True, False])
async def test_a_restart_while_reading_an_incomplete_stream_reads_on_to_its_end(
    live: Api, proxy: CuttingProxy, monkeypatch: pytest.MonkeyPatch, whole: bool
) -> None:
    """A stream whose writer was cut off, of a run that ended: a restart cutting its body
    halfway is no ``wf.StreamIncomplete`` yet (the server's own cut comes after its last
    chunk): the follow reads on, and the error comes after every chunk."""
    count = 40
    run_id = await live.start("many_then_cut", {"count": count})
    await live.until(run_id, lambda d: d["status"] == "failed")
    real = RemoteRun.stream_parts
    cuts = {"left": 1}

    async def parts(self: RemoteRun, *a: Any, **k: Any) -> AsyncIterator[tuple[bytes, Any]]:
        async for part, ends in real(self, *a, **k):
            yield part, ends
            if ends is False and cuts["left"]:  # inside the first chunk: the server restarts
                cuts["left"] -= 1
                await proxy.bounce(0.2)

    monkeypatch.setattr(RemoteRun, "stream_parts", parts)
    admin = HttpAdmin(RemoteClient(proxy.url, timeout=30))
    got: list[bytes] = []
    with pytest.raises(wf.StreamIncomplete):
        async with asyncio.timeout(30):
            async for chunk in admin.follow_stream(run_id, follow=True, whole=whole):
                got.append(chunk)
    marks = b"".join(got).count(b"|")
    assert marks == 2 * count  # every chunk, once
    assert len(_starts(proxy, run_id)) == 2, proxy.log


@pytest.mark.parametrize("whole", [True, False])
async def test_a_body_cut_at_the_same_byte_every_time_is_given_up(
    monkeypatch: pytest.MonkeyPatch, whole: bool
) -> None:
    """A chunk cut off at the same byte on every read (a proxy's size limit, say): each read
    answers, none gets further, and the follow gives up once ``RIDE_OUT`` passes without
    progress instead of reading forever."""
    monkeypatch.setattr(wf._remote, "RIDE_OUT", 0.3)
    monkeypatch.setattr(wf._remote, "RIDE_OUT_RETRY", (0.01, 0.05))
    monkeypatch.setattr(wf._remote, "say_outage", lambda line: None)
    reads = 0

    async def cut(self: RemoteRun, *a: Any, **k: Any) -> AsyncIterator[tuple[bytes, Any]]:
        nonlocal reads
        reads += 1
        yield b"the first half", False  # the chunk goes on, but the body ends here
        error = ServerUnavailable("the wf server ended the stream early")
        error.unreached = error.cut = True
        raise error

    monkeypatch.setattr(RemoteRun, "stream_parts", cut)
    admin = HttpAdmin(RemoteClient("http://127.0.0.1:9", timeout=5))
    got: list[bytes] = []
    with pytest.raises(ServerUnavailable):
        async with asyncio.timeout(10):
            async for chunk in admin.follow_stream("wrun-cut", follow=True, whole=whole):
                got.append(chunk)
    assert got == ([] if whole else [b"the first half"])  # given once, then nothing new
    assert reads > 2
