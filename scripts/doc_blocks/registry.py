"""The renderers' registry: which function renders a doc block of a given name, from which committed files, and the
cached reading of those files (a ``.json`` one parsed).

A family module of :mod:`scripts.doc_blocks` registers each renderer with :func:`renderer`; scripts/render_docs.py
finds the blocks in the docs and calls the renderers registered here. Kept apart from both so that a renderer and the
doc walker import the same registry and neither imports the other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

from grpo_ext.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
#: block name -> (the renderer ``f(*sources) -> markdown``, the paths of its sources from the repository root)
RENDERERS: dict[str, tuple[Callable[..., str], tuple[str, ...]]] = {}


def renderer(name: str, *sources: str):
    """Register ``f(*json_of_sources) -> markdown`` as block ``name`` (a ``.json`` source is parsed, others read)."""

    def register(f):
        if name in RENDERERS:
            raise ValueError(f"render block {name!r} registered twice")
        RENDERERS[name] = (f, sources)
        return f

    return register


class _NotFinite(str):
    """What the JSON parser makes of `NaN`, `Infinity` or `-Infinity` (Python's json reads them; they are no JSON)."""


def _not_finite(value, where: str = "") -> tuple[str, str] | None:
    """(key path, constant) of the first `_NotFinite` in a parsed source, or None."""
    if isinstance(value, _NotFinite):
        return where or "(the whole file)", str(value)
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _not_finite(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key)
        if found:
            return found
    return None


@cache
def load_source(root: Path, source: str):
    """A source's text (a ``.json`` one parsed); a `UserError` naming the file when it is missing or not JSON, and the
    file and key where it holds NaN or an infinity (Python's json reads them: a table printed "nan"). No committed
    source holds one; a measurement that may be missing is null, which each renderer prints as it documents."""
    try:
        text = (root / source).read_text()
        if not source.endswith(".json"):
            return text
        data = json.loads(text, parse_constant=_NotFinite)
        if found := _not_finite(data):
            raise UserError(f"{source}: {found[0]} is {found[1]}, not a number a doc prints; record null or a number")
        return data
    except OSError as err:
        raise UserError(f"{source}: cannot be read ({err.strerror or type(err).__name__})") from err
    except UnicodeDecodeError as err:
        raise UserError(f"{source}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    except json.JSONDecodeError as err:
        raise UserError(f"{source}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from err
