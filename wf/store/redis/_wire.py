"""Commands packed for the wire in one join: redis-py's connections, with a faster packer.

redis-py's ``pack_command`` builds a command's bytes by joining the buffer so far with each
argument in turn, which copies the command once per argument; a lease's write (a script call
of about twenty arguments) spent as much of a worker's time there as in the rest of the store.
``packed`` makes a connection class whose ``pack_command`` encodes the arguments once and joins
them once, sending the same bytes (large values still go as pieces of their own).
"""

from __future__ import annotations

from typing import Any

_CUTOFF = 6000
"""Arguments longer than this are sent as pieces of their own (as redis-py does), not copied."""


_MADE: dict[type[Any], type[Any]] = {}


def packed(base: type[Any]) -> type[Any]:
    """A subclass of the connection class ``base`` with the one-join ``pack_command``."""
    found = _MADE.get(base)
    if found is None:
        found = _MADE[base] = _packed(base)
    return found


def _packed(base: Any) -> type[Any]:
    class Packed(base):  # type: ignore[misc]
        def pack_command(self, *args: Any) -> list[Any]:
            first = args[0]
            if isinstance(first, str):
                args = (*first.encode().split(), *args[1:])
            elif b" " in first:
                args = (*first.split(), *args[1:])
            encode = self.encoder.encode
            parts: list[bytes] = [b"*%d\r\n" % len(args)]
            output: list[Any] = []
            for arg in args:
                if isinstance(arg, str):
                    arg = arg.encode()
                elif not isinstance(arg, bytes):
                    arg = encode(arg)
                if len(arg) > _CUTOFF or isinstance(arg, memoryview):
                    parts.append(b"$%d\r\n" % len(arg))
                    output.append(b"".join(parts))
                    output.append(arg)
                    parts = [b"\r\n"]
                else:
                    parts.append(b"$%d\r\n%b\r\n" % (len(arg), arg))
            output.append(b"".join(parts))
            return output

    Packed.__name__ = Packed.__qualname__ = "Packed" + base.__name__
    return Packed
