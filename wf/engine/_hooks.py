"""Hooks: a workflow waits for payloads from the outside world without holding a process.

``wf.create_hook(Payload, token=...)`` makes a local handle (its token is recorded, so a replay
sees the same one). The token is registered with the store (unique among live hooks, claimed
atomically) before the next step's code runs — a step may hand the token out, and its receiver
may answer before the step returns — or when the run suspends, and at the latest by
``await hook.next()``, which then waits: the run suspends. ``wf.resume_hook(token, payload)``
— from any process — validates the payload against the hook's type and posts it to the run's
inbox; the run's driver appends it to the journal (``hook_payload``), so payloads reach
``next()`` in arrival order on every replay. A payload ``next()`` refuses (it no longer fits the
type) is journaled (``hook_payload_refused``) and logged, never handed to the workflow. Tokens
are released when the run ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from wf._exceptions import HookError, InputValidationError, StoreCorrupted, UsageError
from wf.engine._codec import decode, encode
from wf.engine._context import RunContext, current_run, require_run
from wf.engine._current import current_engine
from wf.engine._features import Feature
from wf.engine._futures import OpCall, op_done, op_task
from wf.engine._inbox import apply_messages
from wf.engine._instruments import send
from wf.engine._run import Run
from wf.engine._signature import json_schema, unschemed, validate_value
from wf.store import Event, HookRecord, InboxMessage, RunRecord, WebhookDelivery
from wf.store._faults import named_place
from wf.store._limits import check_key, check_name, check_segment

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike

T = TypeVar("T")

log = logging.getLogger("wf")


def _type_ref(tp: Any) -> str | None:
    if tp is Any or not isinstance(tp, type):
        return None
    if tp.__module__ == "builtins":
        return tp.__qualname__
    if "<locals>" in tp.__qualname__:
        return None
    return f"{tp.__module__}:{tp.__qualname__}"


def _type_label(tp: Any) -> str:
    """``PlainPayload``; a generic alias as written (``list[PlainPayload]``)."""
    import typing

    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return tp.__qualname__
    return repr(tp).replace("typing.", "")


def _load_type(ref: str | None) -> Any:
    """The payload type a hook recorded, or ``Any`` if its module is not imported here (the
    sender then checks the recorded JSON schema): a stored reference never makes wf import a
    module of its choosing."""
    if not ref:
        return Any
    import builtins

    from wf.engine._codec import trusted_module

    try:
        if ":" not in ref:
            return getattr(builtins, ref)
        module, _, qualname = ref.partition(":")
        obj: Any = trusted_module(module)
        if obj is None:
            return Any
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    except Exception:
        return Any


class Hook(Generic[T]):
    """A workflow's handle on a hook. Iterate it (``async for p in hook``) for many payloads."""

    def __init__(self, ctx: RunContext, op: int, token: str, payload_type: Any) -> None:
        self._ctx = ctx
        self.op = op
        self.token = token
        self.payload_type = payload_type
        self.name = _type_label(payload_type)
        self._registered = False
        self._disposed = False
        # What the code that made the hook refuses beyond its type (wf.ai's approvals: a
        # decision naming no pending call): raises ValueError, and the payload is refused.
        self.refuse: Callable[[Any], None] | None = None
        # Registered before the next step's code runs (``register_pending``); a webhook made
        # from this hook takes its place here, with the schema it records.
        ctx.state(HookState).unregistered[op] = self
        ctx.outside_pending = True

    def __repr__(self) -> str:
        return f"<wf.Hook {self.token!r}>"

    async def _register(self) -> str | None:
        if self._registered:
            return None
        ctx = self._ctx
        record = HookRecord(
            token=self.token,
            run_id=ctx.run_id,
            op=self.op,
            schema=self._schema(),
            created_at=ctx.clock.now(),
        )
        await ctx.settle()  # a token others can see may come from results not yet durable
        releasing = ctx.state(HookState).releasing
        if releasing:
            # A hook disposed earlier may have held this token: its release must not come
            # after (and undo) this claim.
            await asyncio.gather(*releasing, return_exceptions=True)
        with ctx.storing():
            owner = await ctx.engine.store.register_hook(record)
        self._registered = owner is None
        pending = ctx.state(HookState).unregistered
        if pending.get(self.op) is self:
            del pending[self.op]  # a conflict is told by next() / get_conflict(), which ask again
        return owner

    def _schema(self) -> dict[str, Any]:
        """What the hook index records about the payloads this hook takes."""
        return {"type": _type_ref(self.payload_type), "json": json_schema(self.payload_type)}

    def next(self) -> Awaitable[T]:
        """Wait for the next payload (the run suspends while none is there)."""
        return self._take(whole=False)

    def _take(self, *, whole: bool) -> Awaitable[Any]:
        ctx = self._ctx
        op, history = ctx.begin_op("hook_next", self.name)
        if self._disposed:
            raise HookError(f"hook {self.token!r} was disposed")
        if history is None:
            ctx.write_soon({"type": "hook_waiting", "op": op, "name": self.name, "hook": self.op})
        return OpCall(lambda: op_task(self._next(op, whole)), run=ctx)

    def _accept(self, payloads: list[Any], index: int, whole: bool) -> Any:
        """The value ``next()`` gives for payload ``index``; raises to skip it."""
        value = decode(payloads[index])
        valid = validate_value(self.payload_type, value, where=f"payload of hook {self.token!r}")
        if self.refuse is not None:
            self.refuse(valid)
        return valid

    def _refuse(self, index: int, exc: Exception) -> None:
        """Record (once, replays find it) and log that payload ``index`` was refused: its
        sender was told it was delivered, so this is where anyone can see it went nowhere."""
        ctx = self._ctx
        refused = ctx.state(HookState).refused
        if (self.op, index) in refused:
            return
        refused.add((self.op, index))
        error = f"{type(exc).__name__}: {exc}"
        ctx.write_soon(
            {
                "type": "hook_payload_refused",
                "hook": self.op,
                "token": self.token,
                "index": index,
                "error": error,
            }
        )
        log.warning("run %s: hook %r refused a payload: %s", ctx.run_id, self.token, error)

    async def _next(self, op: int, whole: bool) -> Any:
        ctx = self._ctx
        while True:
            payloads = ctx.state(HookState).payloads.get(self.op, [])
            state = ctx.state(HookState)
            index = state.consumed.get(self.op, 0)
            while index < len(payloads):
                state.consumed[self.op] = index + 1
                try:
                    valid = self._accept(payloads, index, whole)
                except LookupError:  # a webhook's retried delivery: taken already
                    index += 1
                    continue
                except Exception as exc:  # InputValidationError, or one that no longer decodes
                    self._refuse(index, exc)  # an invalid payload never reaches the workflow
                    index += 1
                    continue
                times = state.payload_times.get(self.op, [])
                ctx.mark_done_at(times[index] if index < len(times) else ctx.clock.now(), op)
                return valid
            if not self._registered:
                owner = await self._register()
                if owner is not None:
                    raise HookError(f"hook token {self.token!r} is already used by run {owner}")
                # Once registered, a payload may arrive at any moment (even before the wait
                # below exists, from another run's step in this process): look again first.
                continue
            await ctx.wait(op, "hook", self.token, None, key=self.op)

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        return await self.next()

    def get_conflict(self) -> Awaitable[Run[Any] | None]:
        """Register the token without waiting: the run that already owns it, or None."""
        ctx = self._ctx
        op, history = ctx.begin_op("hook_conflict", self.name)
        if history is not None:
            owner = history.events[0].get("owner")
            return OpCall(lambda: op_done(Run(owner, ctx.engine) if owner else None), run=ctx)

        async def check() -> Run[Any] | None:
            owner = await self._register()
            await ctx.write(ctx.event("hook_conflict_checked", op=op, name=self.name, owner=owner))
            return Run(owner, ctx.engine) if owner else None

        return OpCall(lambda: op_task(check()), run=ctx)

    def dispose(self) -> None:
        """Release the token now (it is also released when the run ends)."""
        ctx = self._ctx
        op, history = ctx.begin_op("hook_dispose", self.name)
        if history is None:
            ctx.write_soon({"type": "hook_disposed", "op": op, "name": self.name, "hook": self.op})
        self._disposed = True
        ctx.state(HookState).tokens.pop(self.op, None)
        if ctx.state(HookState).held.get(self.token) == self.op:
            del ctx.state(HookState).held[self.token]
        ctx.state(HookState).unregistered.pop(self.op, None)
        releasing = ctx.state(HookState).releasing
        task = ctx.loop.create_task(ctx.engine.store.release_hook(self.token, ctx.run_id))
        releasing.add(task)
        task.add_done_callback(releasing.discard)

    async def __aenter__(self) -> Hook[T]:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._disposed:
            self.dispose()


@overload
def create_hook(payload_type: type[T], *, token: str | None = None) -> Hook[T]: ...


@overload
def create_hook(payload_type: Any = Any, *, token: str | None = None) -> Hook[Any]: ...


def create_hook(payload_type: Any = Any, *, token: str | None = None) -> Hook[Any]:
    """Create a hook receiving payloads of ``payload_type`` (validated with pydantic).

    Without a ``token`` an unguessable one (192 random bits) is made; it is recorded, so replay
    gets the same one. The token is live (payloads sent to it are kept for ``next()``) before
    the run's next step runs its code or the run suspends, and at the latest at ``next()``.
    A token stays this run's until the hook is disposed or the run ends: a ``token`` the run
    still holds raises ``HookError`` (dispose of the first hook, or give another token).
    """
    ctx = require_run("wf.create_hook()")
    refused = unschemed(payload_type)
    if refused is not None:
        label, part = _type_label(payload_type), _type_label(refused)
        inside = "" if refused is payload_type else f" (in {label})"
        raise UsageError(
            f"wf.create_hook({label}): no payload can ever be validated into {part}{inside}: "
            "pydantic has no schema for it and wf cannot store one; use a dataclass, a "
            "TypedDict, a pydantic model or plain JSON types"
        )
    state = ctx.state(HookState)
    if token is not None and token in state.held:
        # Before the operation is begun, from what this drive's code did so far (created and
        # not disposed): a replay raises here again. The store would take the second claim for
        # the first (same run), and the first hook would get the second hook's payloads.
        raise HookError(
            f"hook token {token!r} is still held by this run's hook created at operation "
            f"{state.held[token]}: dispose() that hook first (or leave its 'async with'), "
            "or give this hook another token"
        )
    op, history = ctx.begin_op("hook", _type_label(payload_type))
    if history is not None:
        token = history.events[0]["token"]  # as recorded (an older wf checked less)
    else:
        token = secrets.token_urlsafe(24) if token is None else check_segment("a hook token", token)
        ctx.write_soon(
            {"type": "hook_created", "op": op, "name": _type_label(payload_type), "token": token}
        )
    assert token is not None
    state.tokens[op] = token
    state.held[token] = op
    return Hook(ctx, op, token, payload_type)


async def resume_hook(
    token: str, payload: Any, *, key: str | None = None, engine: EngineLike | None = None
) -> Run[Any]:
    """Deliver ``payload`` to the hook with ``token``; returns the run that owns it.

    Works whether the run is suspended or running in another process. An unknown or disposed
    token, or a payload that does not fit the hook's type, raises ``HookError``.

    ``key`` (an idempotency key, any name) makes a retry safe: a repeat with the same token and
    key, for at least a day (``DELIVERY_KEPT``), delivers nothing new and returns the same run, also
    once the run has ended. A caller whose call failed (``StoreUnavailable``,
    ``ServerUnavailable``) without knowing whether it was applied retries with the same key.
    """
    return (await resume_hook_sent(token, payload, key=key, engine=engine))[0]


async def resume_hook_sent(
    token: str, payload: Any, *, key: str | None = None, engine: EngineLike | None = None
) -> tuple[Run[Any], str | None]:
    """``resume_hook``, and the id of the inbox message that carried the payload (None for a
    keyed delivery): its run journals that id with the payload (``hook_payload``), so a sender
    can tell from the journal whether the run took it or refused it (``hook_payload_refused``)."""
    if current_run() is not None:
        raise UsageError("wf.resume_hook() is I/O: call it from a step, not from workflow code")
    check_name("a hook token", token)
    if key is not None:
        check_key(key)
    engine = engine or current_engine()
    if key is not None and (owner := await kept_resume(engine, token, key)) is not None:
        return owner, None
    hook = await engine.store.get_hook(token)
    if hook is None and await engine.quiet():
        # A test engine: the run may be just started, not yet at its ``create_hook``.
        hook = await engine.store.get_hook(token)
    if hook is None:
        raise no_live_hook(token)
    sent: list[str] = []
    run = await deliver(engine, hook, payload, key=key, sent=sent)
    return run, sent[0] if sent else None


def resume_id(token: str, key: str) -> str:
    """The id a keyed resume is kept under (``Store.post_once``): derived from the token and
    the key, apart from a webhook delivery's ids (``wf.serve._webhooks.delivery_id``)."""
    return hashlib.sha256(f"resume\0{token}\0{key}".encode()).hexdigest()[:32]


async def kept_resume(engine: EngineLike, token: str, key: str) -> Run[Any] | None:
    """The run a resume of ``token`` with ``key`` went to already (its repeat delivers
    nothing); None if there was none (or it is over a day old)."""
    kept = (await engine.store.get_deliveries([resume_id(token, key)])).get(resume_id(token, key))
    if kept is None or kept.token != token:
        return None
    return Run(kept.run_id, engine)


def no_live_hook(token: str) -> HookError:
    """The error for a token no live hook has (the HTTP API answers it as its 404)."""
    return HookError(
        f"no live hook with token {token!r} (unknown, disposed, its run ended, or not created "
        "yet: a run registers its hook when its code reaches it)"
    )


WEBHOOK_ENVELOPE = "__wf_webhook__"
"""The key of what a webhook's delivery posts (``wf.engine._webhooks.envelope``); a payload
given to ``wf.resume_hook``, ``wf hook resume`` or the hook API may not carry it."""


async def deliver(
    engine: EngineLike,
    hook: HookRecord,
    payload: Any,
    *,
    wrap: Any = None,
    key: str | None = None,
    sent: list[str] | None = None,
) -> Run[Any]:
    """Validate ``payload`` against the hook's type and post it to its run's inbox.

    ``wrap`` (a webhook's delivery) turns the validated payload into what is posted. With a
    ``key`` it is posted once (``Store.post_once``): a repeat returns the run it went to.
    Without one, the posted message's id is appended to ``sent`` (if given).
    """
    token = hook.token
    if wrap is None and isinstance(payload, dict) and WEBHOOK_ENVELOPE in payload:
        # A webhook reads such a payload as the HTTP request it came with: headers, method and
        # a delivery id (a stream name) only the server may record.
        raise HookError(
            f"a payload of hook {token!r} may not have the key {WEBHOOK_ENVELOPE!r}: it marks "
            "a request to a webhook's URL, which only the server records"
        )
    schema = hook.schema or {}
    payload_type = _load_type(schema.get("type"))
    try:
        payload = validate_value(payload_type, payload, where=f"payload of hook {token!r}")
    except InputValidationError as exc:
        raise HookError(str(exc)) from None
    if payload_type is Any and schema.get("type") and schema.get("json"):
        # The payload type cannot be imported here (another project directory, the CLI): check
        # the JSON schema the hook recorded, so the sender hears of a bad payload rather than
        # the run dropping it.
        _check_schema(token, schema["json"], payload)
    if wrap is not None:
        payload = wrap(payload)
    encoded = encode(payload, where=f"payload of hook {token!r}")
    # ``at``: when the payload reached the store, by the engine's clock; a ``select`` racing
    # the hook against a timer orders them by it, however late the run takes the payload in.
    data = {"token": token, "hook": hook.op, "payload": encoded, "at": engine.clock.now()}
    if engine.instrumented():
        send(engine.instruments, hook.run_id, "hook", data)  # before the post: it adds a trace
    if key is None:
        message = await engine.store.post(hook.run_id, "hook", data)
        if sent is not None:
            sent.append(message)
    else:
        kept = WebhookDelivery(resume_id(token, key), token, hook.run_id, "", None, data["at"])
        first = await engine.store.post_once(hook.run_id, "hook", data, kept)
        if first is not None:
            return Run(first.run_id, engine)  # a repeat: nothing posted
    ctx = engine.live.get(hook.run_id)
    if ctx is not None:
        await apply_messages(ctx, await engine.store.read_inbox(hook.run_id), live=True)
    return Run(hook.run_id, engine)


_FORMATS = {
    "date-time": "datetime:datetime",
    "date": "datetime:date",
    "time": "datetime:time",
    "duration": "datetime:timedelta",
    "uuid": "uuid:UUID",
    "ipv4": "ipaddress:IPv4Address",
    "ipv6": "ipaddress:IPv6Address",
}
"""The string formats pydantic writes into a JSON schema that it checks itself -> the type it
checks them as. A format is checked as pydantic does (lax: ``2026-01-01T00:00:00`` is a
date-time without RFC 3339's offset), so the sender refuses what the run would refuse."""


@functools.cache
def _format_checker() -> Any:
    import importlib

    import jsonschema
    from pydantic import TypeAdapter

    checker = jsonschema.FormatChecker(formats=())
    for name, ref in _FORMATS.items():
        module, _, attr = ref.partition(":")
        adapter: TypeAdapter[Any] = TypeAdapter(getattr(importlib.import_module(module), attr))

        def check(value: object, adapter: TypeAdapter[Any] = adapter) -> bool:
            if not isinstance(value, str):
                return True  # a format says nothing about other types
            adapter.validate_python(value)
            return True

        checker.checks(name, raises=(ValueError,))(check)
    return checker


def _check_schema(token: str, schema: dict[str, Any], payload: Any) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema, format_checker=_format_checker())
    error = jsonschema.exceptions.best_match(validator.iter_errors(payload))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "payload"
        raise HookError(f"payload of hook {token!r} is invalid at {where}: {error.message}")


@dataclasses.dataclass
class HookState:
    """A run's hooks (``RunContext.state(HookState)``), rebuilt from its journal on replay."""

    payloads: dict[int, list[Any]] = dataclasses.field(default_factory=dict)
    """Hook op -> encoded payloads received, in arrival order."""
    payload_times: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    """Hook op -> when each payload reached the store (durable clock), as ``payloads``."""
    consumed: dict[int, int] = dataclasses.field(default_factory=dict)
    """Hook op -> payloads ``next()`` has handed out (or refused)."""
    tokens: dict[int, str] = dataclasses.field(default_factory=dict)
    """Hook op -> token, for the hooks still held (released when the run ends)."""
    refused: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    """(hook op, payload index) of each payload ``next()`` refused (journaled)."""
    held: dict[str, int] = dataclasses.field(default_factory=dict)
    """Token -> op of the hook holding it, as this drive's code has gone so far (created, not
    disposed): unlike ``tokens`` (which a replay reads from the whole journal at once), it
    tells ``create_hook`` the same on replay as when the code first ran."""
    unregistered: dict[int, Any] = dataclasses.field(default_factory=dict)
    """Hook op -> the ``Hook`` this drive created and has not registered yet."""
    releasing: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)
    """Releases ``dispose`` began and that have not ended: the run's outcome waits for them
    (``release_hooks``), so no disposed token is live once the run has ended."""


async def register_pending(ctx: RunContext) -> None:
    """Before a step's code runs (and before a child run starts, and when the run suspends):
    make the tokens of the hooks created so far live, so that the step (or child) may hand one
    out (a callback URL) and have its answer taken, however early it comes, and a sender may
    use one while the run sleeps. A token
    another run holds stays unregistered: ``next()`` tells the workflow."""
    pending = ctx.state(HookState).unregistered
    while pending:
        op = next(iter(pending))
        hook = pending[op]
        if hook._disposed or hook._registered:
            del pending[op]
            continue
        await hook._register()
        pending.pop(op, None)
    ctx.outside_pending = False


def _read_created(ctx: RunContext, event: Event) -> None:
    ctx.state(HookState).tokens[event["op"]] = event["token"]


def _read_payload(ctx: RunContext, event: Event) -> None:
    state = ctx.state(HookState)
    state.payloads.setdefault(event["hook"], []).append(event["payload"])
    at = float(event.get("at") or event.get("ts") or 0.0)
    state.payload_times.setdefault(event["hook"], []).append(at)


def _read_refused(ctx: RunContext, event: Event) -> None:
    ctx.state(HookState).refused.add((event["hook"], event["index"]))


def _payload_waiting(ctx: RunContext, hook_op: int) -> bool:
    state = ctx.state(HookState)
    return len(state.payloads.get(hook_op, ())) > state.consumed.get(hook_op, 0)


async def on_hook_message(ctx: RunContext, message: InboxMessage, live: bool) -> None:
    """Driver side: append a delivered payload to the journal and wake its ``next()``."""
    hook_op = int(message.data["hook"])
    event = ctx.event(
        "hook_payload",
        hook=hook_op,
        token=message.data.get("token"),
        payload=message.data.get("payload"),
        message=message.id,
    )
    event["at"] = float(message.data.get("at") or event["ts"])
    await ctx.write(event)
    _read_payload(ctx, event)
    ctx.resolve_waits(lambda w: w.kind == "hook" and w.key == hook_op)


async def release_hooks(ctx: RunContext, record: RunRecord) -> None:
    """Free every token the run holds (its outcome is recorded). A hook whose stored record is
    damaged is that hook's fault, not the run's: the run ends all the same, and the token stays
    held (``wf store verify`` names the record) until the damaged record is removed."""
    store = ctx.engine.store
    state = ctx.state(HookState)
    if state.releasing:
        # Disposed hooks' releases still under way: the run has not ended before they have.
        await asyncio.gather(*state.releasing, return_exceptions=True)
    for token in set(state.tokens.values()):
        try:
            await store.release_hook(token, ctx.run_id)
        except StoreCorrupted as exc:
            store.faults.note("hook", token, named_place(exc), exc)


def _hooks_to_release(state: HookState | None) -> bool:
    return state is not None and bool(state.tokens or state.releasing)


HOOK_FEATURE = Feature(
    "hooks",
    messages={"hook": on_hook_message},
    events={
        "hook_created": _read_created,
        "hook_payload": _read_payload,
        "hook_payload_refused": _read_refused,
    },
    waits={"hook": _payload_waiting},
    before_outside=register_pending,
    after_outcome=release_hooks,
    outcome_needed=lambda ctx, record: _hooks_to_release(ctx.made_state(HookState)),
)
"""Hooks as the kernel sees them (``wf.engine._features``)."""
