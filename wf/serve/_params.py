"""What comes in a URL or a body, checked before anything touches the store."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from wf._exceptions import UsageError, unreadable_json
from wf.serve._errors import ApiError
from wf.store import RunStatus
from wf.store._ids import validate_run_id
from wf.store._limits import check_name, shown

MAX_LIMIT = 500
STATUSES = tuple(status.value for status in RunStatus)


def run_id(request: Request) -> str:
    """The ``{id}`` of the URL, a well-formed run id (400 otherwise)."""
    raw = str(request.path_params["id"])
    try:
        return validate_run_id(raw)
    except UsageError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None


def token(request: Request) -> str:
    """The ``{token}`` of the URL: a hook token (``wf.store._limits.check_name``; 400 if not)."""
    return _name("a hook token", str(request.path_params["token"]))


def stream_name(request: Request) -> str:
    """The ``{name}`` of the URL: a stream name (``wf.store._limits.check_name``; 400 if not)."""
    return _name("a stream name", str(request.path_params["name"]))


def _name(what: str, raw: str) -> str:
    try:
        return check_name(what, raw)
    except UsageError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None


def integer(request: Request, name: str, default: int, low: int, high: int) -> int:
    """A whole-number query parameter within ``[low, high]``."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        if not raw.isascii():  # int() takes any script's digits ('٥') and full-width ones
            raise ValueError(raw)
        value = int(raw)
    except ValueError:
        raise ApiError(400, "bad_request", f"{name} must be a whole number") from None
    if not low <= value <= high:
        raise ApiError(400, "bad_request", f"{name} must be between {low} and {high}")
    return value


def number(request: Request, name: str, default: float, high: float) -> float:
    """A non-negative number query parameter, at most ``high``."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        if not raw.isascii():  # as ``integer``
            raise ValueError(raw)
        value = float(raw)
    except ValueError:
        raise ApiError(400, "bad_request", f"{name} must be a number of seconds") from None
    if not 0 <= value <= high:
        raise ApiError(400, "bad_request", f"{name} must be between 0 and {high:g}")
    return value


def flag(request: Request, name: str, default: bool) -> bool:
    """A boolean query parameter (``1``/``true``/``yes`` or ``0``/``false``/``no``)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise ApiError(400, "bad_request", f"{name} must be true or false")


def statuses(values: list[str]) -> list[str]:
    """Run statuses from a filter (400 for an unknown one)."""
    out = []
    for value in values:
        if not value:  # given, but empty: not "any status"
            raise ApiError(400, "bad_request", f"status '' is not one of {', '.join(STATUSES)}")
        for part in value.split(","):
            if part and part not in STATUSES:
                raise ApiError(
                    400, "bad_request", f"status {part!r} is not one of {', '.join(STATUSES)}"
                )
            if part:
                out.append(part)
    return out


def before(request: Request, *, form: bool = False) -> str | None:
    """The ``before`` cursor of a page (a run id; an empty one is a 400 unless ``form``: a
    web form's empty field)."""
    raw = request.query_params.get("before")
    if raw is None or (form and not raw):
        return None
    try:
        return validate_run_id(raw)
    except UsageError as exc:
        raise ApiError(400, "bad_request", f"before: {exc}") from None


def present_id(request: Request, name: str) -> str | None:
    """A run id given as query parameter ``name`` (None when absent; 400 when empty or not an
    id: an empty one is no "any run")."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        return validate_run_id(raw)
    except UsageError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None


def list_name(request: Request, name: str, *, form: bool = False) -> str | None:
    """A name a listing is filtered by (None when absent; 400 when empty, as ``wf.admin``
    and the CLI say: an empty filter is not "no filter"; unless ``form``: a web form's empty
    field is no filter)."""
    raw = request.query_params.get(name)
    return None if raw is None or (form and not raw) else _name(f"a {name}", raw)


def search(request: Request, names: tuple[str, ...] = ("search", "q")) -> str | None:
    """The ``search`` (or ``q``: the first of ``names`` given) of a listing (None when
    absent; 400 when empty or only white space, as every other filter: an empty search is not
    "every run"; 400 too when it
    holds a control character or a lone surrogate, which no id or name holds, and which a
    store may refuse to compare with: PostgreSQL's text cannot hold NUL)."""
    for name in names:
        raw = request.query_params.get(name)
        if raw is not None:
            if not raw.strip():
                raise ApiError(400, "bad_request", f"a {name} cannot be empty")
            return _name(f"a {name}", raw)
    return None


LIST_FILTERS = ("queue", "group", "deployment")
"""Query parameters of ``GET /api/v1/runs`` (and the runs page) naming a queue, a group key
or a deployment to list the runs of."""


def list_filters(request: Request, *, form: bool = False) -> dict[str, str]:
    """The ``queue``, ``group`` and ``deployment`` filters given (each a name as
    ``wf.store._limits.check_name`` takes it; 400 if not)."""
    found: dict[str, str] = {}
    for name in LIST_FILTERS:
        value = list_name(request, name, form=form)
        if value is not None:
            found[name] = value
    return found


class _KeyTwice(ValueError):
    """A JSON object that gives a key twice."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _KeyTwice(f"the key {shown(key)} is given twice")
            seen.add(key)
    return found


def loads(raw: str | bytes, *, unique: bool = True) -> Any:
    """JSON text as a value. With ``unique``, an object that gives a key twice is a
    ``ValueError``: Python's reader keeps the last, others the first, so such a body means one
    thing to a proxy or a client's check and another here."""
    return json.loads(raw, object_pairs_hook=_unique if unique else None)


async def json_body(request: Request, *, required: bool = True, unique_keys: bool = True) -> Any:
    """The request's JSON body (400 if it is not JSON, or, with ``unique_keys``, if an object
    in it gives a key twice; None when empty and not required)."""
    raw = await request.body()
    if not raw.strip():
        if required:
            raise ApiError(400, "bad_request", "the request needs a JSON body")
        return None
    try:
        return loads(raw, unique=unique_keys)
    except json.JSONDecodeError as exc:
        raise ApiError(400, "bad_request", f"the body is not valid JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:
        # Valid JSON that Python will not take: an integer beyond its digit limit, deep nesting,
        # a key given twice.
        said = f"the body cannot be read: {unreadable_json(exc)}"
        raise ApiError(400, "bad_request", said) from None


def _json_kind(value: Any) -> str:
    """What JSON value ``value`` is: an array, a string, a number, true, false or null."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "a number"


def body_object(body: Any, keys: frozenset[str]) -> dict[str, Any]:
    """A JSON body that is an object with none but ``keys`` among its fields (400 if not).

    Unknown fields are named as Python reprs, at most five, each cut short: a field name is
    anything a client sent, a newline or a megabyte of it included, and the answer is one line.
    """
    if not isinstance(body, dict):
        raise ApiError(
            400, "bad_request", f"the body must be a JSON object, not {_json_kind(body)}"
        )
    unknown = sorted(set(body) - keys)
    if unknown:
        listed = ", ".join(shown(name) for name in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise ApiError(400, "bad_request", f"unknown field(s): {listed}{more}")
    return dict(body)
