"""A framed stream body (``wf._frames``): each chunk's parts as they arrive, whatever pieces
the body comes in, and whole chunks from them."""

from __future__ import annotations

from wf import _frames


def test_chunks_come_whole_from_any_pieces() -> None:
    chunks = [b"", b"a", b"bc" * 40, b"\x00" * 9]
    body = b"".join(_frames.head(len(chunk)) + chunk for chunk in chunks)
    for size in (1, 3, 8, 9, 64, len(body)):
        frames, whole = _frames.Unframer(), _frames.Chunks()
        parts = [p for at in range(0, len(body), size) for p in frames.feed(body[at : at + size])]
        got = [chunk for part, ends in parts if (chunk := whole.add(part, ends)) is not None]
        assert got == chunks, size
        assert not frames.partial


def test_a_chunk_s_parts_come_as_its_pieces_arrive() -> None:
    frames = _frames.Unframer()
    assert frames.feed(_frames.head(5) + b"ab") == [(b"ab", False)]  # not held until whole
    assert frames.feed(b"c") == [(b"c", False)]
    assert frames.feed(b"de" + _frames.head(0) + _frames.head(1)) == [(b"de", True), (b"", True)]
    assert frames.feed(b"f") == [(b"f", True)]


def test_a_body_cut_inside_a_chunk_is_partial() -> None:
    frames = _frames.Unframer()
    assert frames.feed(_frames.head(5) + b"abc") == [(b"abc", False)]
    assert frames.partial
    inside_a_head = _frames.Unframer()
    assert inside_a_head.feed(b"\x00\x00") == [] and inside_a_head.partial
