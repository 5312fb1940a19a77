"""An OpenAI-compatible HTTP server on 127.0.0.1 that plays recorded responses, in order.

Each POST to ``/v1/chat/completions`` takes the next ``Reply`` of the script: a status, headers
and either a JSON body or server-sent-event chunks (``data: {...}`` lines ending with ``data:
[DONE]``, as the OpenAI API streams). The requests it received are kept for the test to check.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclasses.dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] | None = None
    chunks: list[dict[str, Any]] | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 1_800_000_000,
        "model": "gpt-stub",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def text_stream(*pieces: str) -> Reply:
    """A streamed text answer, one chunk per piece."""
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"content": piece}) for piece in pieces]
    usage = {
        "prompt_tokens": 12,
        "completion_tokens": len(pieces),
        "total_tokens": 12 + len(pieces),
    }
    chunks.append(_chunk({}, "stop", usage=usage))
    return Reply(chunks=chunks)


def tool_call_stream(name: str, arguments: str, call_id: str = "call_1") -> Reply:
    """A streamed tool call, its arguments in two chunks."""
    half = len(arguments) // 2
    return Reply(
        chunks=[
            _chunk(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments[:half]},
                        }
                    ],
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}),
            _chunk({}, "tool_calls"),
        ]
    )


def text_reply(content: str) -> Reply:
    """A plain (not streamed) chat completion."""
    return Reply(
        body={
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 1_800_000_000,
            "model": "gpt-stub",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        }
    )


def error(status: int, message: str, code: str, **headers: str) -> Reply:
    """An API error, as OpenAI sends them."""
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return Reply(status=status, body=body, headers=headers)


class Stub:
    """The server's state: the script still to play and the requests received."""

    def __init__(self, script: list[Reply]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""


@contextmanager
def serve(script: list[Reply]) -> Iterator[Stub]:
    """Serve ``script`` on a free port of 127.0.0.1 for the block."""
    stub = Stub(script)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection; a body ends with it

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            stub.requests.append(
                {
                    "path": self.path,
                    "authorization": self.headers.get("authorization"),
                    "body": json.loads(self.rfile.read(length) or b"{}"),
                }
            )
            reply = stub.script.pop(0) if stub.script else error(500, "script over", "over")
            self.send_response(reply.status)
            for key, value in reply.headers.items():
                self.send_header(key, value)
            if reply.chunks is not None:
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for chunk in reply.chunks:
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
            else:
                data = json.dumps(reply.body).encode()
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stub.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
