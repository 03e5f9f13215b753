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
from grpo_ext.io import atomic_write_text  # noqa: E402
from scripts.doc_blocks import RENDERERS, load_source, renderer  # noqa: E402  (importing it registers every renderer)

__all__ = ["BLOCK", "RENDERERS", "blocks", "check_markers", "doc_files", "load_source", "main", "read_doc",
           "render_block", "render_text", "rendered_body", "renderer", "stale"]  # fmt: skip

# The opening marker's line ends with LF or CRLF: a doc keeps its line endings (`rendered_body`).
BLOCK = re.compile(r"(<!-- render: (?P<name>[\w-]+) -->\r?\n)(?P<body>.*?)(<!-- /render -->)", re.DOTALL)
#: A line that looks like a block marker, well-formed or not (``<!- /render -->``, ``<!-- render: a.b -->``).
_MARKER_LIKE = re.compile(r"<!-+\s*/?\s*render\b")
_OPEN = re.compile(r"<!-- render: [\w-]+ -->")
_CLOSE = "<!-- /render -->"


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


def check_markers(text: str, where: str = "the doc") -> None:
    """Every block marker well-formed and every block closed before the next opens, else a `UserError` naming the
    line. A marker with a typo is not one to the block pattern: a mistyped close let its block run on to the next
    block's close, and the build replaced the prose between them (and the next opening marker) with a table. Markers
    inside a fenced code block are examples, not blocks."""
    open_line, fenced = None, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not _MARKER_LIKE.search(line):
            continue
        marker = line.strip()
        if _OPEN.fullmatch(marker):
            if open_line is not None:
                raise UserError(f"{where}:{number}: a block opens before the block of line {open_line} is closed")
            open_line = number
        elif marker == _CLOSE:
            if open_line is None:
                raise UserError(f"{where}:{number}: {_CLOSE} closes no block")
            open_line = None
        else:
            raise UserError(
                f"{where}:{number}: not a block marker: {marker!r} (expected a line `<!-- render: NAME -->`, NAME of "
                f"letters, digits, _ or -, or a line `{_CLOSE}`)"
            )
    if open_line is not None:
        raise UserError(f"{where}:{open_line}: the block is never closed ({_CLOSE})")


def rendered_body(match: re.Match, root: Path = ROOT) -> str:
    """The body block `match` renders to, in the line endings of its opening marker's line: a doc written with CRLF
    stays CRLF (renderers write LF; the doc was read as its bytes are, not with newlines translated)."""
    body = render_block(match.group("name"), root)
    return body.replace("\n", "\r\n") if match.group(1).endswith("\r\n") else body


def render_text(text: str, root: Path = ROOT) -> str:
    """The doc with every marked block's body replaced by its renderer's output (its markers checked first)."""
    check_markers(text)
    return BLOCK.sub(lambda m: m.group(1) + rendered_body(m, root) + m.group(4), text)


def blocks(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def doc_files(root: Path = ROOT) -> list[Path]:
    """The files that may hold blocks: the README, docs/, results/**/README.md, benchmarks/README.md; a `UserError`
    for one that is a symbolic link (the build would rewrite the file it points at, wherever that is)."""
    found = [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted((root / "results").rglob("README.md"))]
    found.append(root / "benchmarks" / "README.md")
    for path in found:
        if path.is_symlink():
            raise UserError(f"{path.relative_to(root)}: a symbolic link; make docs rewrites docs in place, not links")
    return [p for p in found if p.is_file()]


def read_doc(path: Path, root: Path = ROOT) -> str:
    """The doc's text (UTF-8), its block markers checked; a `UserError` naming it otherwise."""
    where = str(path.relative_to(root))
    try:
        text = path.read_bytes().decode("utf-8")  # line endings as written (read_text would make CRLF LF)
    except UnicodeDecodeError as err:
        raise UserError(f"{where}: not UTF-8 ({err.reason} at byte {err.start})") from None
    check_markers(text, where)
    return text


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
        text = read_doc(path, root)
        for m in BLOCK.finditer(text):
            rendered = _in_doc(path, root, rendered_body, m, root)
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
    rendered = []  # every doc rendered before any is written: a failure leaves no doc half-built
    for path in doc_files(root):
        text = read_doc(path, root)
        new = _in_doc(path, root, render_text, text, root)
        if new != text:
            rendered.append((path, new, blocks(text)))
    for path, new, names in rendered:
        atomic_write_text(path, new)
        print(f"rendered {path.relative_to(root)}: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(lambda argv: sys.exit(main(argv)))  # a missing or junk source, an unknown block: one line, exit 2
