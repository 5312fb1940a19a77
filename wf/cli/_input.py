"""Reading ``--input``: JSON given inline, as ``@path`` (a file) or ``-`` (standard input)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from wf._exceptions import UsageError


def read_input(spec: str | None) -> Any:
    """The decoded JSON of ``--input`` (``None`` when absent). Raises ``UsageError``."""
    if spec is None:
        return None
    if spec == "-":
        text, origin = sys.stdin.read(), "standard input"
    elif spec.startswith("@"):
        path = Path(spec[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read --input file {str(path)!r}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise UsageError(f"--input file {str(path)!r} is not UTF-8 text") from None
        origin = f"file {str(path)!r}"
    else:
        text, origin = spec, "--input"
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = "--input" if origin == "--input" else f"--input ({origin})"
        raise UsageError(
            f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except (ValueError, RecursionError) as exc:
        # JSON that Python will not take: an integer beyond its digit limit, nesting too deep.
        where = "--input" if origin == "--input" else f"--input ({origin})"
        raise UsageError(f"{where} cannot be read: {exc}") from None
