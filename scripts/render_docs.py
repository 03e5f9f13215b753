"""`make docs`: every table of results or measurements in the docs, rendered from the committed JSON it reports.

A doc holds marked blocks::

    <!-- render: compare_signal -->
    (whatever the renderer wrote last time)
    <!-- /render -->

and ``python scripts/render_docs.py`` rewrites each block's body with what the renderer registered under that name
returns from its JSON files (``--check``: write nothing, list the stale blocks, exit 1). A renderer is a function
``f(*sources) -> str`` registered with ``renderer`` and the paths (from the repository root) of the files it reads;
the body ends with a line naming them. This script finds the blocks and checks them; the renderers live in
:mod:`scripts.doc_blocks`, one module per family of results. To add a block: write a renderer in its family's module,
put the markers in the doc, run ``make docs``; ``tests/test_docs.py`` fails when a block differs from what its files
render (stale numbers), names no renderer, or when a renderer is used by no doc.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python scripts/render_docs.py` puts scripts/ on the path, not the checkout
    sys.path.insert(0, str(ROOT))

from grpo_ext.errors import UserError  # noqa: E402
from scripts.doc_blocks import RENDERERS, load_source, renderer  # noqa: E402  (importing it registers every renderer)

__all__ = ["BLOCK", "RENDERERS", "blocks", "doc_files", "load_source", "main", "render_block", "render_text",
           "renderer", "stale"]  # fmt: skip

BLOCK = re.compile(r"(<!-- render: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /render -->)", re.DOTALL)


class UnknownRenderer(UserError, KeyError):
    """A block naming no registered renderer (a `UserError`: one line through `run_cli`; a `KeyError` as before)."""

    __str__ = UserError.__str__  # the message as written, not KeyError's quoted repr


def render_block(name: str, root: Path = ROOT) -> str:
    """Block ``name``'s body from its sources; a `UserError` naming the renderer and its files when one is missing,
    is not JSON, or does not hold what the renderer reads (a key, an entry or a type it expects)."""
    if name not in RENDERERS:
        raise UnknownRenderer(f"no renderer named {name!r} (scripts/render_docs.py: {', '.join(sorted(RENDERERS))})")
    f, sources = RENDERERS[name]
    data = [load_source(root, s) for s in sources]
    try:
        body = f(*data).strip("\n")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError) as err:
        if isinstance(err, UserError):
            raise
        what = f"{type(err).__name__}: {err}"
        raise UserError(f"render block {name!r}: {', '.join(sources)} do not hold what it reads ({what})") from err
    return f"{body}\n\n*Rendered by `make docs` from {', '.join(f'`{s}`' for s in sources)}.*\n"


def render_text(text: str, root: Path = ROOT) -> str:
    """The doc with every marked block's body replaced by its renderer's output."""
    return BLOCK.sub(lambda m: m.group(1) + render_block(m.group("name"), root) + m.group(4), text)


def blocks(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def doc_files(root: Path = ROOT) -> list[Path]:
    """The files that may hold blocks: the README, docs/, results/**/README.md, benchmarks/README.md."""
    found = [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted((root / "results").rglob("README.md"))]
    found.append(root / "benchmarks" / "README.md")
    return [p for p in found if p.is_file()]


def _in_doc(path: Path, root: Path, render, *args):
    """``render(*args)``, its `UserError` prefixed with the doc that holds the block (``docs/a.md: ...``)."""
    try:
        return render(*args)
    except UserError as err:
        kind = UnknownRenderer if isinstance(err, UnknownRenderer) else UserError
        raise kind(f"{path.relative_to(root)}: {err}") from err


def stale(root: Path = ROOT) -> list[str]:
    """``path: block`` for every block whose body differs from what its files render now."""
    out = []
    for path in doc_files(root):
        text = path.read_text()
        for m in BLOCK.finditer(text):
            rendered = _in_doc(path, root, render_block, m.group("name"), root)
            if m.group("body") != rendered:
                out.append(f"{path.relative_to(root)}: {m.group('name')}")
    return out


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; list stale blocks and exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        found = stale(root)
        print("\n".join(found) if found else "every rendered block is up to date")
        return 1 if found else 0
    for path in doc_files(root):
        text = path.read_text()
        new = _in_doc(path, root, render_text, text, root)
        if new != text:
            path.write_text(new)
            print(f"rendered {path.relative_to(root)}: {', '.join(blocks(text))}")
    return 0


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(lambda argv: sys.exit(main(argv)))  # a missing or junk source, an unknown block: one line, exit 2
