"""A TCP proxy to the test's Redis server that makes it refuse commands for a while, as a
server does when it is out of memory under ``maxmemory`` (``OOM``), a read-only replica
(``READONLY``), busy running someone else's long script (``BUSY``) or loading its data
(``LOADING``): the refused command is answered with the error and never reaches the server.

It relays one command at a time (a reply read whole before the next command is sent), so a
refusal never lands between a command and its answer; a connection that subscribes (pub/sub)
is passed on as it is from then on. Inside ``MULTI`` a refused command aborts the transaction,
as Redis does: its ``EXEC`` discards what was queued and answers ``EXECABORT``.
"""

from __future__ import annotations

import asyncio
import contextlib

WRITES = frozenset(
    b"EVAL EVALSHA FCALL SET SETNX INCR INCRBY HSET HSETNX HDEL HINCRBY DEL UNLINK ZADD ZREM "
    b"ZINCRBY SADD SREM RPUSH LPUSH LTRIM RENAME EXPIRE PEXPIRE GETDEL".split()
)
"""Commands refused when only writes are (``OOM``, ``READONLY``): every script call counts."""

SETUP = frozenset(b"CLIENT SELECT HELLO AUTH QUIT".split())
"""Commands a refusal of everything (``BUSY``, ``LOADING``) still lets through: a
connection's setup."""

SUBSCRIBING = frozenset(b"SUBSCRIBE PSUBSCRIBE SSUBSCRIBE".split())


def _request(buffer: bytearray) -> tuple[list[bytes], int] | None:
    """The first whole command in ``buffer`` (its words, the bytes it takes), or None."""
    end = buffer.find(b"\r\n")
    if end < 0:
        return None
    count, at, words = int(buffer[1:end]), end + 2, []
    for _ in range(count):
        end = buffer.find(b"\r\n", at)
        if end < 0:
            return None
        size = int(buffer[at + 1 : end])
        if len(buffer) < end + 2 + size + 2:
            return None
        words.append(bytes(buffer[end + 2 : end + 2 + size]))
        at = end + 2 + size + 2
    return words, at


async def _reply(reader: asyncio.StreamReader) -> bytes:
    """One whole reply (RESP2 or RESP3), as its bytes."""
    line = await reader.readuntil(b"\r\n")
    kind = line[:1]
    if kind in (b"$", b"=", b"!"):  # a bulk string, a verbatim string, a bulk error
        size = int(line[1:-2])
        return line if size < 0 else line + await reader.readexactly(size + 2)
    if kind in (b"*", b"~", b">", b"%", b"|"):  # an array, a set, a push; a map, attributes
        count = int(line[1:-2])
        out = line
        for _ in range(max(count, 0) * (2 if kind in (b"%", b"|") else 1)):
            out += await _reply(reader)
        if kind == b"|":  # attributes come before the reply they annotate
            out += await _reply(reader)
        return out
    return line


class RefusingProxy:
    """``refuse(error, writes_only)``: from now on the commands (writes only, or all but a
    connection's setup) are answered with ``-error``; ``refuse(None)``: passed on again.
    ``fail_over(error)``: a failover that moved the address to a new primary (a DNS name, a
    proxy): the connections open now stay on the old server, which refuses their writes with
    ``-error`` for good (a replica now), while new connections reach the primary.
    ``refused``: how many commands were refused so far."""

    def __init__(self, host: str, port: int, db: int = 0) -> None:
        self._upstream = (host, port)
        self._db = db
        self._server: asyncio.Server | None = None
        self._error: bytes | None = None
        self._writes_only = True
        self._demoted: set[int] = set()
        self._demoted_error = b""
        self.refused = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/{self._db}"

    def refuse(self, error: str | None, *, writes_only: bool = True) -> None:
        self._error = None if error is None else error.encode()
        self._writes_only = writes_only

    def fail_over(self, error: str) -> None:
        self._demoted = {id(task) for task in self._tasks}
        self._demoted_error = error.encode()

    def _refusal(self, name: bytes, connection: int) -> bytes | None:
        if connection in self._demoted and name in WRITES:
            return self._demoted_error
        if self._error is None:
            return None
        refused = name in WRITES if self._writes_only else name not in SETUP
        return self._error if refused else None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        self._writers.update((writer, up_writer))
        try:
            buffer = bytearray()
            in_multi = aborted = False
            while data := await reader.read(65536):
                buffer += data
                while (found := _request(buffer)) is not None:
                    words, used = found
                    request = bytes(buffer[:used])
                    del buffer[:used]
                    name = words[0].upper()
                    if name in SUBSCRIBING:
                        up_writer.write(request + bytes(buffer))
                        await self._pass_on(reader, writer, up_reader, up_writer)
                        return
                    refusal = self._refusal(name, id(task))
                    if refusal is not None and name not in (b"MULTI", b"EXEC", b"DISCARD"):
                        self.refused += 1
                        aborted = aborted or in_multi
                        writer.write(b"-" + refusal + b"\r\n")
                        continue
                    if name == b"MULTI":
                        in_multi, aborted = True, False
                    elif name in (b"EXEC", b"DISCARD"):
                        in_multi = False
                        if aborted and name == b"EXEC":
                            aborted = False
                            up_writer.write(b"*1\r\n$7\r\nDISCARD\r\n")
                            await _reply(up_reader)
                            writer.write(
                                b"-EXECABORT Transaction discarded because of previous errors.\r\n"
                            )
                            continue
                    up_writer.write(request)
                    writer.write(await _reply(up_reader))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()

    async def _pass_on(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()

        pumps = [
            asyncio.create_task(pump(reader, up_writer)),
            asyncio.create_task(pump(up_reader, writer)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pumps:
                p.cancel()

    async def close(self) -> None:
        # Each connection's reads end (its task is not cancelled: asyncio would report a
        # cancelled connection task as an error).
        for w in list(self._writers):
            w.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
