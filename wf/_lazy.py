"""Names a package imports on first use (``wf``, ``wf.admin``, ``wf.testing``): importing the
package stays cheap, and each name comes from its private module when it is first asked for."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from typing import Any


def lazy_names(
    namespace: dict[str, Any],
    exports: Mapping[str, str],
    subpackages: Collection[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of the package whose ``globals()`` is
    ``namespace``: a name of ``exports`` (name → module) is imported from its module and kept
    in ``namespace`` (later look-ups skip ``__getattr__``); one of ``subpackages`` is that
    subpackage. Define them under ``if not TYPE_CHECKING:``, so that type checkers refuse a
    misspelled name (a module ``__getattr__`` would make them accept any)."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name in subpackages:
            return importlib.import_module(f"{package}.{name}")
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace["__all__"]))

    return __getattr__, __dir__
