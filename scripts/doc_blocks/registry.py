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


@cache
def load_source(root: Path, source: str):
    """A source's text (a ``.json`` one parsed); a `UserError` naming the file when it is missing or not JSON."""
    try:
        text = (root / source).read_text()
        return json.loads(text) if source.endswith(".json") else text
    except OSError as err:
        raise UserError(f"{source}: cannot be read ({err.strerror or type(err).__name__})") from err
    except UnicodeDecodeError as err:
        raise UserError(f"{source}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    except json.JSONDecodeError as err:
        raise UserError(f"{source}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from err
