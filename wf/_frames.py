"""A byte stream's chunks kept apart on its HTTP body (``GET /api/v1/runs/{id}/streams/{name}
?framed=true``): each chunk is sent as its length (8 bytes, big-endian), then its bytes.

HTTP keeps no chunks apart by itself (its chunked encoding is cut by the server, which sends a
big chunk in pieces, and by the network), so a reader that needs the stream's own chunks (their
numbers: ``start``, the terminal UI's ``#3``, a chunk count) asks for this; the response then
carries ``WF-Stream-Framing: length``. Without it the body is the stream's bytes alone.
"""

from __future__ import annotations

FRAMING_HEADER = "WF-Stream-Framing"
"""The response header that says a stream's body is framed, and how."""
FRAMING = "length"
"""Its value: each chunk is its length (``LENGTH`` bytes, big-endian), then its bytes."""
LENGTH = 8


def head(size: int) -> bytes:
    """What goes before a chunk of ``size`` bytes."""
    return size.to_bytes(LENGTH, "big")


class Unframer:
    """The whole chunks of a framed body, from its pieces as they arrive."""

    def __init__(self) -> None:
        self._held = bytearray()
        self._need: int | None = None

    def feed(self, piece: bytes) -> list[bytes]:
        """The chunks ``piece`` completes (none while a chunk's bytes are still coming)."""
        self._held += piece
        done: list[bytes] = []
        while True:
            if self._need is None:
                if len(self._held) < LENGTH:
                    return done
                self._need = int.from_bytes(self._held[:LENGTH], "big")
                del self._held[:LENGTH]
            if len(self._held) < self._need:
                return done
            with memoryview(self._held) as held:  # one copy of a chunk, not two
                done.append(bytes(held[: self._need]))
            del self._held[: self._need]
            self._need = None

    @property
    def partial(self) -> bool:
        """Bytes of a chunk not whole yet are held (a body that ends so was cut off)."""
        return self._need is not None or bool(self._held)
