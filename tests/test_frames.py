"""A framed stream body (``wf._frames``): whole chunks whatever pieces the body comes in."""

from __future__ import annotations

from wf import _frames


def test_chunks_come_whole_from_any_pieces() -> None:
    chunks = [b"", b"a", b"bc" * 40, b"\x00" * 9]
    body = b"".join(_frames.head(len(chunk)) + chunk for chunk in chunks)
    for size in (1, 3, 8, 9, 64, len(body)):
        frames = _frames.Unframer()
        got = [c for at in range(0, len(body), size) for c in frames.feed(body[at : at + size])]
        assert got == chunks, size
        assert not frames.partial


def test_a_body_cut_inside_a_chunk_is_partial() -> None:
    frames = _frames.Unframer()
    assert frames.feed(_frames.head(5) + b"abc") == []
    assert frames.partial
    inside_a_head = _frames.Unframer()
    assert inside_a_head.feed(b"\x00\x00") == [] and inside_a_head.partial
