"""Atomic file writes: a reader (or a crash) never sees a half-written report."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to a temporary file beside `path`, fsync it, then `os.replace` it onto `path`.

    The parent folder is created if needed. On any error the temporary file is removed and `path` is left as
    it was (the old content, or absent).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """`atomic_write_bytes` for text (UTF-8 by default)."""
    return atomic_write_bytes(path, text.encode(encoding))
