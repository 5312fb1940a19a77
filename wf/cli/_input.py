"""Reading JSON options (``--input``, ``--data``): inline, ``@path`` (a file) or ``-`` (stdin)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from wf._exceptions import UsageError, unreadable_json


def read_input(spec: str | None) -> Any:
    """The decoded JSON of ``--input`` (``None`` when absent). Raises ``UsageError``."""
    return read_json_option(spec, "--input")


def read_json_option(spec: str | None, option: str) -> Any:
    """The decoded JSON of a JSON-valued option: inline, ``@path`` (a file) or ``-`` (standard
    input); ``None`` when absent. Raises ``UsageError`` (exit 2) naming the option and problem."""
    if spec is None:
        return None
    if spec == "-":
        if sys.stdin is None:  # closed by the shell (`<&-`): Python leaves it None
            raise UsageError(f"{option} - reads standard input, which is closed")
        text, origin = sys.stdin.read(), "standard input"
    elif spec.startswith("@"):
        path = Path(spec[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {option} file {str(path)!r}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise UsageError(f"{option} file {str(path)!r} is not UTF-8 text") from None
        origin = f"file {str(path)!r}"
    else:
        text, origin = spec, option
    where = option if origin == option else f"{option} ({origin})"
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            + (_quote_hint(option, text) if origin == option else "")
        ) from None
    except (ValueError, RecursionError) as exc:
        # JSON that Python will not take: an integer beyond its digit limit, nesting too deep.
        raise UsageError(f"{where} cannot be read: {unreadable_json(exc)}") from None


def _quote_hint(option: str, text: str) -> str:
    """``--input world``: a string must be JSON, quoted inside the shell's quotes."""
    word = text.strip()
    if not word or word[0] in '{["-0123456789' or word in ("true", "false", "null"):
        return ""
    import shlex

    return f"; a string needs JSON quotes: {option} {shlex.quote(json.dumps(word))} (wf help input)"
