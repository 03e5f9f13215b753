"""File output shared by every report and checkpoint: atomic writes (a reader, or a crash, never sees a
half-written file), paths as results files record them, and matplotlib figures as PNG bytes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

__all__ = ["REPO_ROOT", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "figure_png", "portable_path"]

#: The repository (the folder holding the `grpo_ext` package): results files name paths inside it relative to it.
REPO_ROOT = Path(__file__).resolve().parents[1]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to a temporary file beside `path`, fsync it, then `os.replace` it onto `path`.

    The parent folder is created if needed. On any error the temporary file is removed and `path` is left as
    it was (the old content, or absent).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; a report is as readable as any file written
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


def atomic_write_json(path: str | os.PathLike, data, indent: int | None = 2) -> Path:
    """`atomic_write_bytes` for a JSON document (keys kept in insertion order, trailing newline)."""
    return atomic_write_text(path, json.dumps(data, indent=indent) + "\n")


def portable_path(path: str | os.PathLike, base: str | os.PathLike | None = None) -> str:
    """`path` as a results file records it: relative to `base` (the folder the results describe, e.g. a run's output
    folder) or else to the repository when it lies inside one of them, as a POSIX path; otherwise as given. A results
    file then reads the same on every machine, and names no user's home or temporary folder that is ours to choose.
    Strings that are not paths of this machine (a hub id such as `Qwen/Qwen2.5-1.5B`) are returned unchanged."""
    text = os.fspath(path)
    candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        if not candidate.exists():
            return text  # a hub id, or a relative path that already reads the same everywhere
        candidate = candidate.resolve()
    for root in ([Path(base).expanduser().resolve()] if base is not None else []) + [REPO_ROOT]:
        try:
            return candidate.resolve().relative_to(root).as_posix() or "."
        except ValueError:
            continue
    return text


def figure_png(fig, dpi: int | None = None) -> bytes:
    """A matplotlib figure as PNG bytes; the figure is closed (pyplot keeps every open figure alive)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return buffer.getvalue()


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it is to set it
    os.umask(mask)
    return mask
