"""A small HTTP/1.1 proxy in front of a real ``wf serve`` that plays a restart cutting a
request: ``cut(prefix, down)`` lets the next request whose ``METHOD path`` starts with
``prefix`` be applied upstream (answered in full), then drops the client's connection
unanswered and stops listening for ``down`` seconds; ``bounce(down)`` stops listening (and
drops every connection) for ``down`` seconds."""

from __future__ import annotations

import asyncio
import contextlib

import httpx


class CuttingProxy:
    """The proxy on ``127.0.0.1:port``, forwarding to ``upstream`` (a ``wf serve`` URL)."""

    def __init__(self, upstream: str, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.server: asyncio.Server | None = None
        self.conns: set[asyncio.StreamWriter] = set()
        self.trigger: tuple[str, float] | None = None
        self.log: list[str] = []
        self.answered: list[str] = []  # the requests whose response head reached the client
        self.tasks: set[asyncio.Task[None]] = set()
        self.client = httpx.AsyncClient(base_url=upstream, timeout=None)

    def cut(self, prefix: str, down: float) -> None:
        self.trigger = (prefix, down)

    async def listen(self) -> None:
        self.server = await asyncio.start_server(
            self.handle, "127.0.0.1", self.port, reuse_address=True
        )

    async def shut(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in list(self.conns):
                writer.transport.abort()
            await self.server.wait_closed()
            self.server = None

    async def bounce(self, down: float) -> None:
        await self.shut()
        await asyncio.sleep(down)
        await self.listen()

    def bounce_soon(self, down: float) -> None:
        task = asyncio.get_running_loop().create_task(self.bounce(down))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await self.shut()
        await self.client.aclose()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.conns.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                self.log.append(f"{method} {target}")
                skip = ("host", "connection", "content-length")
                sent = {k: v for k, v in headers.items() if k not in skip}
                request = self.client.build_request(method, target, headers=sent, content=body)
                response = await self.client.send(request, stream=True)
                if self.trigger and f"{method} {target}".startswith(self.trigger[0]):
                    down = self.trigger[1]
                    self.trigger = None
                    await response.aread()
                    await response.aclose()
                    self.log.append(f"  applied upstream ({response.status_code}), cut")
                    writer.transport.abort()
                    self.bounce_soon(down)
                    return
                out = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}"]
                for key, value in response.headers.multi_items():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                        out.append(f"{key}: {value}")
                out.append("transfer-encoding: chunked")
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode())
                await writer.drain()
                self.answered.append(f"{method} {target}")
                async for chunk in response.aiter_raw():
                    if chunk:
                        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                await response.aclose()
        except (asyncio.IncompleteReadError, ConnectionError, httpx.HTTPError):
            pass
        finally:
            self.conns.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
