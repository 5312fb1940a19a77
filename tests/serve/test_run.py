"""``wf serve``'s listening socket (``wf.serve._run.bind_port``)."""

from __future__ import annotations

import asyncio
import socket

from wf.serve._run import bind_port


async def test_connections_it_accepts_send_each_answer_at_once() -> None:
    """Nagle's algorithm off on every connection, as asyncio sets it for a TCP socket: with it
    on, an answer written in two parts (uvicorn writes the head, then the body) waited for the
    client's delayed ACK, and every request after a kept connection's first took 40 ms."""
    sock = bind_port("127.0.0.1", 0)
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = writer.get_extra_info("socket")
        accepted.set_result(served.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(on_connection, sock=sock)
    try:
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        assert await asyncio.wait_for(accepted, 10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
