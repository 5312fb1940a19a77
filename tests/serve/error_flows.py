"""A workflow whose error type the client process never imports (``test_remote``)."""

from __future__ import annotations

import wf


class CardDeclined(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@wf.workflow
async def declined(code: int) -> None:
    raise CardDeclined("card declined", code)
