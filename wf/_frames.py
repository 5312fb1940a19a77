"""A byte stream's chunks kept apart on its HTTP body (``GET /api/v1/runs/{id}/streams/{name}
?framed=true``): each chunk is sent as its length (8 bytes, big-endian), then its bytes.

HTTP keeps no chunks apart by itself (its chunked encoding is cut by the server, which sends a
big chunk in pieces, and by the network), so a reader that needs the stream's own chunks (their
numbers: ``start``, the terminal UI's ``#3``, a chunk count) asks for this; the response then
carries ``WF-Stream-Framing: length``. Without it the body is the stream's bytes alone.
A ``start`` from the end (``-3``) of a stream open already is answered with the number of the
first chunk sent (``WF-Stream-Start``), so a reader cut off can ask again from the chunk it
reached.
"""

from __future__ import annotations

FRAMING_HEADER = "WF-Stream-Framing"
"""The response header that says a stream's body is framed, and how."""
FRAMING = "length"
"""Its value: each chunk is its length (``LENGTH`` bytes, big-endian), then its bytes."""
LENGTH = 8
START_HEADER = "WF-Stream-Start"
"""The response header that gives the number of the first chunk sent (of a ``start`` < 0)."""


def head(size: int) -> bytes:
    """What goes before a chunk of ``size`` bytes."""
    return size.to_bytes(LENGTH, "big")


class Unframer:
    """The chunks of a framed body, part by part as its pieces arrive: a chunk is never held
    whole here (a reader that needs it whole joins its parts: ``Chunks``)."""

    def __init__(self) -> None:
        self._head = bytearray()
        self._need: int | None = None

    def feed(self, piece: bytes) -> list[tuple[bytes, bool]]:
        """The parts of chunks ``piece`` carries, each with whether it ends its chunk (an
        empty chunk is the one part ``(b"", True)``)."""
        parts: list[tuple[bytes, bool]] = []
        at, size = 0, len(piece)
        while True:
            if self._need is None:
                take = min(LENGTH - len(self._head), size - at)
                self._head += piece[at : at + take]
                at += take
                if len(self._head) < LENGTH:
                    return parts
                self._need = int.from_bytes(self._head, "big")
                self._head.clear()
                if not self._need:
                    parts.append((b"", True))
                    self._need = None
                    continue
            if at >= size:
                return parts
            take = min(self._need, size - at)
            part = piece if take == size else piece[at : at + take]
            at += take
            self._need -= take
            ends = not self._need
            if ends:
                self._need = None
            parts.append((part, ends))

    @property
    def partial(self) -> bool:
        """Bytes of a chunk not whole yet came (a body that ends so was cut off)."""
        return self._need is not None or bool(self._head)


class Chunks:
    """Whole chunks from their parts (``Unframer.feed``'s)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def add(self, part: bytes, ends: bool) -> bytes | None:
        """The chunk ``part`` ends, whole; None while more of it is to come."""
        if not ends:
            self._parts.append(part)
            return None
        if not self._parts:
            return part
        self._parts.append(part)
        chunk = b"".join(self._parts)
        self._parts.clear()
        return chunk
