"""A real failover for the Redis store's tests: two throwaway ``redis-server`` processes, a
primary and its replica, behind a TCP proxy that stands for a DNS name (or a load balancer): a
connection stays on the server it reached, new ones go where the proxy points now.

``fail_over`` promotes the replica, demotes the old primary (``REPLICAOF`` the new one, or a
server that does not answer: a replica that hears none of the new primary's writes) and points
the proxy at the new primary. The connections open before stay on the old server, now a
replica, as they do behind a DNS name that moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

PORTS = range(6400, 6500)
"""Ports the throwaway servers may take (the test's Redis is elsewhere)."""

NOBODY = 1
"""A port nobody listens on (privileged, unused): the primary a demoted server that hears
nothing of the new primary replicates from (not a free port: another test's server may start
on it)."""


def require_redis_server() -> str:
    """The ``redis-server`` on PATH; the test is skipped without one."""
    found = shutil.which("redis-server")
    if found is None:
        why = "a real failover needs redis-server on PATH (two throwaway servers)"
        if os.environ.get("WF_REQUIRE_REDIS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return found


def _ports() -> list[int]:
    # Each pytest-xdist worker starts its scan elsewhere in the band (``gw3``: 30 ports on),
    # so that workers starting servers at the same moment seldom probe the same port.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    digits = "".join(c for c in worker if c.isdigit())
    start = (int(digits) * 10 if digits else 0) % len(PORTS)
    return [*PORTS[start:], *PORTS[:start]]


def _free_port(taken: set[int]) -> int:
    # A port nobody listens on now (another test process may take it meanwhile: the server's
    # start then fails and the next port is tried).
    for port in _ports():
        if port in taken:
            continue
        with socket.socket() as probe, contextlib.suppress(OSError):
            probe.bind(("127.0.0.1", port))
            return port
    raise RuntimeError("no free port in 6400-6499 for a throwaway redis-server")


class Server:
    """One throwaway ``redis-server`` (no persistence), stopped by ``stop``."""

    def __init__(self, binary: str, taken: set[int]) -> None:
        self._dir = tempfile.mkdtemp(prefix="wf-failover-")
        try:
            for _ in range(10):
                self.port = _free_port(taken)
                # Taken here whatever comes: a port another process won is not probed again.
                taken.add(self.port)
                self._process = subprocess.Popen(
                    [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", self._dir, "--logfile", ""],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                if self._wait_up():
                    return
                self._process.kill()
                self._process.wait(5)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        shutil.rmtree(self._dir, ignore_errors=True)
        raise RuntimeError("could not start a throwaway redis-server")

    def _wait_up(self) -> bool:
        """Whether this server answers on its port: the one answering must be this process
        (``INFO server``'s ``process_id``), not another test process's server that won the
        port while this one failed to bind it."""
        import redis

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            client = redis.Redis(port=self.port, socket_timeout=1, socket_connect_timeout=1)
            try:
                pid = int(client.info("server")["process_id"])
            except (redis.RedisError, OSError):
                time.sleep(0.01)
                continue
            finally:
                client.close()
            # Another process's server: this one is killed, the next port tried.
            return pid == self._process.pid
        return False

    def stop(self) -> None:
        self._process.kill()
        self._process.wait(5)
        shutil.rmtree(self._dir, ignore_errors=True)


class SwitchingProxy:
    """Passes each connection on to the server it points at when the connection is made."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/0"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            self._writers.discard(writer)
            self._tasks.discard(task)
            writer.close()
            return
        self._writers.add(up_writer)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()

        try:
            await asyncio.wait(
                [asyncio.create_task(pump(reader, up_writer)),
                 asyncio.create_task(pump(up_reader, writer))],
                return_when=asyncio.FIRST_COMPLETED,
            )  # fmt: skip
        finally:
            self._tasks.discard(task)
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()

    async def close(self) -> None:
        for w in list(self._writers):
            w.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()


class Pair:
    """A primary and its replica behind a ``SwitchingProxy`` (``url``)."""

    def __init__(self) -> None:
        binary = require_redis_server()
        taken: set[int] = set()
        self.primary = Server(binary, taken)
        try:
            self.replica = Server(binary, taken)
        except BaseException:
            self.primary.stop()
            raise
        self.proxy = SwitchingProxy(self.primary.port)
        self.url = ""

    async def start(self) -> None:
        import redis.asyncio as aioredis

        self.url = await self.proxy.start()
        replica = aioredis.Redis(port=self.replica.port)
        try:
            await replica.replicaof("127.0.0.1", self.primary.port)
            async with asyncio.timeout(10):
                while (await replica.info("replication")).get("master_link_status") != "up":
                    await asyncio.sleep(0.02)
        finally:
            await replica.aclose()

    async def fail_over(self, *, linked: bool = True) -> None:
        """Promote the replica, demote the primary (a replica of the new primary, or, not
        ``linked``, of a server that does not answer: it hears none of the new writes), and
        point the proxy at the new primary."""
        import redis.asyncio as aioredis

        old, new = self.primary, self.replica
        to_old, to_new = aioredis.Redis(port=old.port), aioredis.Redis(port=new.port)
        try:
            await to_new.replicaof("NO", "ONE")
            if linked:
                await to_old.replicaof("127.0.0.1", new.port)
            else:
                await to_old.replicaof("127.0.0.1", NOBODY)
        finally:
            await to_old.aclose()
            await to_new.aclose()
        self.primary, self.replica = new, old
        self.proxy.port = new.port

    async def close(self) -> None:
        await self.proxy.close()
        self.primary.stop()
        self.replica.stop()
