"""Workflows the HTTP tests start (by target ``tests.serve.flows:NAME``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os

import wf


@dataclasses.dataclass
class Approval:
    approved: bool
    by: str


@wf.step
async def add(a: int, b: int) -> int:
    return a + b


@wf.workflow
async def adder(a: int, b: int) -> int:
    return await add(a, b)


@wf.workflow
async def counter(n: int) -> int:
    """``n`` steps, one after another."""
    total = 0
    for i in range(n):
        total = await add(total, i)
    return total


@wf.step(max_retries=1, backoff=0.01)
def explode(message: str) -> None:
    raise ValueError(message)


@wf.workflow
async def failing(message: str) -> None:
    await explode(message)


@wf.workflow
async def wrong_output() -> int:
    return "<nope>"  # type: ignore[return-value]


@wf.workflow
async def sleeper(seconds: float) -> str:
    await wf.sleep(seconds)
    return "rested"


@wf.workflow
async def approval(order: str) -> str:
    hook = wf.create_hook(Approval, token=f"approve:{order}")
    decision = await hook.next()
    return f"{'approved' if decision.approved else 'rejected'} by {decision.by}"


@wf.step
async def write_lines(count: int, pause: float) -> None:
    async with wf.stream_writer() as writer:
        for i in range(count):
            await writer.write(f"line {i}\n".encode())
            if pause:
                await asyncio.sleep(pause)


@wf.workflow
async def streaming(count: int, pause: float = 0.0) -> int:
    await write_lines(count, pause)
    return count


@wf.step
async def write_decision(text: str) -> None:
    async with wf.stream_writer() as writer:
        await writer.write(f"{text}\n".encode())


@wf.workflow
async def streams_once_approved(order: str) -> str:
    hook = wf.create_hook(Approval, token=f"stream-approve:{order}")
    decision = await hook.next()
    await write_decision(f"approved by {decision.by}")
    return decision.by


@wf.workflow
async def static_webhook(token: str) -> dict[str, object]:
    hook = wf.create_webhook(Approval, token=token, respond=(200, {"ok": True}))
    first = await hook.next()
    return {"by": first.by}


@wf.workflow
async def manual_webhook(token: str) -> list[str]:
    hook = wf.create_webhook(dict, token=token, method="PUT")
    seen: list[str] = []
    for _ in range(2):
        request = await hook.request()
        body = request.json()
        seen.append(str(body["n"]))
        await request.respond(
            201,
            {"echo": body["n"], "q": request.query.get("x"), "all": request.query_all("x")},
            {"X-Wf": request.method},
        )
    return seen


@wf.workflow
async def slow_webhook(token: str, delay: float) -> str:
    hook = wf.create_webhook(dict, token=token, timeout=0.5)
    request = await hook.request()
    await wf.sleep(delay)
    await request.respond(200, "late")
    return str(request.json()["n"])


@wf.workflow
async def parent(n: int) -> list[str]:
    children = [await wf.start(sleeper, 3600.0) for _ in range(n)]
    return [str(await child.result()) for child in children]


@wf.workflow
async def webhook_url(token: str) -> str:
    hook = wf.create_webhook(dict, token=token)
    return hook.url


def pid() -> int:
    return os.getpid()


@wf.step
def chatty(name: str) -> str:
    import logging
    import sys

    print(f"hello {name} from a step")
    print("<b>not markup</b>", file=sys.stderr)
    logging.getLogger("tests.serve").warning("careful, %s", name)
    return name


@wf.workflow
async def talker(name: str) -> str:
    return await chatty(name)


@wf.step
def say(line: str) -> None:
    print(line)


@wf.workflow
async def talks_twice(token: str) -> str:
    """Prints in a step, waits for a hook, prints in another."""
    await chatty("first")
    hook = wf.create_hook(dict, token=token)
    await hook.next()
    await say("after the hook")
    return "done"


@wf.workflow
async def waits_on(token: str) -> object:
    """Waits for one payload on the hook ``token`` (any name a workflow may choose)."""
    hook = wf.create_hook(dict, token=token)
    return await hook.next()


@wf.step
async def write_named(name: str, text: str) -> None:
    async with wf.stream_writer(name) as writer:
        await writer.write(text.encode())


@wf.workflow
async def writes_stream(name: str) -> str:
    """Writes ``in NAME`` to the byte stream ``name`` (any name a workflow may choose)."""
    await write_named(name, f"in {name}")
    return name


@wf.workflow
async def page_webhook(token: str, headers: dict[str, str]) -> str:
    """Replies to its webhook's request with an HTML page and ``headers``."""
    hook = wf.create_webhook(dict, token=token)
    request = await hook.request()
    await request.respond(
        200, "<script>alert(1)</script>", {"content-type": "text/html", **headers}
    )
    return "replied"


@wf.step
async def spin(path: str) -> str:
    """An async step that blocks the event loop (no await) while ``path`` exists; it creates
    ``path.started`` first."""
    open(path + ".started", "w").close()
    while os.path.exists(path):
        pass
    return "spun"


@wf.workflow
async def spinning(path: str) -> str:
    return await spin(path)


@wf.workflow
async def webhook_made_with(options: dict[str, object]) -> str:
    """Creates a webhook with ``options``: what ``wf.create_webhook`` said of them."""
    try:
        wf.create_webhook(dict, **options)  # type: ignore[call-overload]
    except wf.UsageError as error:
        return f"UsageError: {error}"
    return "made"


@wf.workflow
async def twice_webhook(token: str) -> str:
    """Replies to its webhook's request twice: the second reply is refused."""
    hook = wf.create_webhook(dict, token=token)
    request = await hook.request()
    await request.respond(200, "first")
    try:
        await request.respond(200, "second")
    except wf.UsageError as error:
        return f"UsageError: {error}"
    return "replied twice"


@wf.step(max_retries=0)
async def answer_cut_off() -> None:
    async with wf.stream_writer() as writer:
        await writer.write("Half an")
        raise wf.FatalError("the provider hung up")


@wf.workflow
async def cut_off() -> None:
    await answer_cut_off()


@wf.step
async def tick(i: int, pause: float) -> int:
    await asyncio.sleep(pause)
    return i


@wf.workflow
async def ticking(count: int, pause: float) -> int:
    for i in range(count):
        await tick(i, pause)
    return count


@wf.workflow
async def napper(naps: int) -> str:
    for _ in range(naps):  # a wake-up ends one nap: the next begins
        await wf.sleep(3600)
    return "rested"


@wf.step
async def big_value(size: int) -> str:
    return "x" * size


@wf.workflow
async def big_output(size: int) -> str:
    """A run whose one step's result, and so its output, is ``size`` characters."""
    return await big_value(size)


@wf.step(name="step\u202eevil")
async def bidi_step(text: str) -> str:
    print(f"said {text}")
    return text


@wf.workflow(name="flow\u202edrow")
async def bidi_names(text: str) -> str:
    """A workflow and a step whose names carry a right-to-left override."""
    return await bidi_step(text)


@wf.workflow
async def fails_big(size: int) -> str:
    """A run that fails with a message of ``size`` control characters (the record keeps its
    start; each is six characters of JSON text)."""
    raise ValueError("\x01" * size)


WidePayload = dataclasses.make_dataclass(
    "WidePayload", [(f"field_{'w' * 40}_{i}", int) for i in range(2000)]
)
"""A hook payload whose JSON schema is well over 64 KiB of indented text."""


@wf.workflow
async def waits_wide(token: str) -> object:
    """Waits for one payload of ``WidePayload`` on the hook ``token``."""
    hook = wf.create_hook(WidePayload, token=token)
    return await hook.next()


@wf.workflow
async def hook_under_timeout(token: str) -> object:
    """Waits on the hook ``token`` for at most an hour: suspended with a wake-up time that
    no wake-up ends (only the hook's payload, or the deadline)."""
    hook = wf.create_hook(dict, token=token)
    async with wf.timeout(3600):
        return await hook.next()


@wf.workflow
async def echo(text: str) -> str:
    """Its input, as its output."""
    return text


@wf.workflow
async def positive(token: str) -> int:
    """Waits on the hook ``token`` for a ``Positive``, a class nobody imports by its name (it
    is local): a sender checks its JSON schema, which does not carry its validator, so the
    run refuses a negative ``n`` only as it takes the payload in."""
    import pydantic

    class Positive(pydantic.BaseModel):
        n: int

        @pydantic.field_validator("n")
        @classmethod
        def _positive(cls, value: int) -> int:
            if value < 0:
                raise ValueError("n must be >= 0")
            return value

    hook = wf.create_hook(Positive, token=token)
    return (await hook.next()).n


@wf.step
async def write_reply(stream: str, reply: bytes, more: int) -> None:
    async with wf.stream_writer(stream) as writer:
        await writer.write(reply)
        for _ in range(more):
            await writer.write(b"x" * (1 << 20))


@wf.workflow
async def flooding_webhook(token: str, body_bytes: int, more: int) -> str:
    """Writes its webhook's reply itself (a body of ``body_bytes``), then ``more`` MiB to the
    reply's stream: a reply stream as big as a run may make it."""
    hook = wf.create_webhook(dict, token=token)
    request = await hook.request()
    body = {"ok": True, "pad": "p" * body_bytes}
    reply = {"status": 200, "kind": "json", "body": json.dumps(body), "headers": {}}
    await write_reply(f"wf:webhook:{request.id}", json.dumps(reply).encode(), more)
    return "replied"


@wf.workflow
async def bad_reply_webhook(token: str, reply: str) -> str:
    """Writes ``reply`` as its webhook's reply itself: a first chunk that is no reply object."""
    hook = wf.create_webhook(dict, token=token)
    request = await hook.request()
    await write_reply(f"wf:webhook:{request.id}", reply.encode(), 0)
    return "replied"


@wf.workflow
async def respond_with(token: str, size: int) -> str:
    """Replies to its webhook's request with a text of ``size`` bytes: what ``respond`` says."""
    hook = wf.create_webhook(dict, token=token, timeout=1)
    request = await hook.request()
    try:
        await request.respond(200, "t" * size)
    except wf.UsageError as error:
        return f"UsageError: {error}"
    return "replied"


@wf.step
async def write_sized(sizes: list[int]) -> None:
    async with wf.stream_writer() as writer:
        for index, size in enumerate(sizes):
            await writer.write(bytes([65 + index]) * size)


@wf.workflow
async def sized_chunks(sizes: list[int]) -> int:
    """Writes a chunk of each of ``sizes`` bytes to the default stream (``A``s, ``B``s...)."""
    await write_sized(sizes)
    return len(sizes)


@wf.workflow
async def respond_then_wait(token: str, size: int, token2: str) -> str:
    """Replies with `size` bytes, then waits on a second hook (a run in flight)."""
    hook = wf.create_webhook(dict, token=token, timeout=5)
    request = await hook.request()
    await request.respond(200, "t" * size)
    second = wf.create_hook(dict, token=token2)
    await second.next()
    return "done"


STREAM_GATE: dict[str, asyncio.Event] = {}
"""The events ``gated_stream`` waits for, by its token (a test in this process sets them)."""


def numbered(size: int) -> bytes:
    """``size`` bytes of numbered lines (8 bytes each): a big chunk whose every byte is known."""
    lines = b"".join(b"%07d\n" % i for i in range(size // 8 + 1))
    return lines[:size]


@wf.step
async def write_gated(token: str, first: list[str], then: list[str], big: int) -> None:
    async with wf.stream_writer() as writer:
        for chunk in first:
            await writer.write(chunk.encode())
        if big:
            await writer.write(numbered(big))
        await STREAM_GATE.setdefault(token, asyncio.Event()).wait()
        for chunk in then:
            await writer.write(chunk.encode())


@wf.workflow
async def gated_stream(token: str, first: list[str], then: list[str], big: int = 0) -> int:
    """Writes the chunks ``first`` (and ``numbered(big)``, if ``big``), waits for
    ``STREAM_GATE[token]``, then writes ``then``."""
    await write_gated(token, first, then, big)
    return len(first) + len(then) + bool(big)
