"""Facts about paths on this machine that every layer may ask (no layer of its own)."""

from __future__ import annotations

import os


def read_only(path: str) -> bool:
    """Whether the directory at ``path`` cannot be written (a read-only mount, no permission)."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    return not os.access(path, os.W_OK)
