"""`make docs` rewrites docs in place: a mistyped marker, a doc that is a link, a doc that is not UTF-8 or a source
that fails halfway must stop it with one line naming the doc, before any doc is written."""

from __future__ import annotations

import pytest

from grpo_ext.errors import UserError
from scripts import render_docs

PROSE = "Prose a person wrote, which no build may delete.\n"


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout whose renderer `toy` reads r.json; its docs are written by each test."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "r.json").write_text('{"x": 0.25}')
    monkeypatch.setitem(render_docs.RENDERERS, "toy", (lambda r: f"x = {r['x']:.3f}", ("r.json",)))
    render_docs.load_source.cache_clear()
    yield tmp_path
    render_docs.load_source.cache_clear()


def _block(close: str = "<!-- /render -->", open_: str = "<!-- render: toy -->") -> str:
    return f"{open_}\nold\n{close}\n"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        # a typo in a close: the block pattern ran on to the next block's close, deleting the prose between
        (_block(close="<!- /render -->") + PROSE + _block(), r"docs/a\.md:3: not a block marker: '<!- /render -->'"),
        (_block(close="") + PROSE + _block(), r"docs/a\.md:5: a block opens before the block of line 1 is closed"),
        (_block(open_="<!-- render: compare.signal -->"), r"docs/a\.md:1: not a block marker"),  # never rendered
        (PROSE + "<!-- /render -->\n", r"docs/a\.md:2: <!-- /render --> closes no block"),
        (PROSE + "<!-- render: toy -->\nold\n", r"docs/a\.md:2: the block is never closed"),
    ],
    ids=["mistyped close", "missing close", "name the pattern skips", "close without open", "open without close"],
)
@pytest.mark.parametrize("check", [False, True], ids=["make docs", "--check"])
def test_a_malformed_marker_stops_the_build_naming_its_line(checkout, doc, message, check):
    (checkout / "docs" / "a.md").write_text(doc)
    with pytest.raises(UserError, match=message):
        render_docs.main(["--check"] if check else [], root=checkout)
    assert (checkout / "docs" / "a.md").read_text() == doc


def test_markers_in_a_fenced_example_are_not_blocks(checkout):
    doc = "How to:\n```\n<!-- render: <name> -->\n(output)\n<!-- /render -->\n```\n" + _block()
    (checkout / "docs" / "a.md").write_text(doc)
    assert render_docs.main([], root=checkout) == 0
    assert "<!-- render: <name> -->" in (checkout / "docs" / "a.md").read_text()
    assert "x = 0.250" in (checkout / "docs" / "a.md").read_text()


def test_a_doc_that_is_a_link_is_refused_and_its_target_untouched(checkout, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "notes.md"
    outside.write_text(_block())
    (checkout / "docs" / "a.md").symlink_to(outside)
    with pytest.raises(UserError, match=r"docs/a\.md: a symbolic link"):
        render_docs.main([], root=checkout)
    assert outside.read_text() == _block()


def test_a_doc_that_is_not_utf8_is_named(checkout):
    (checkout / "docs" / "a.md").write_bytes(b"caf\xe9\n" + _block().encode())
    with pytest.raises(UserError, match=r"docs/a\.md: not UTF-8"):
        render_docs.main([], root=checkout)


def test_a_failing_block_leaves_every_doc_as_it_was(checkout, monkeypatch):
    """docs/a.md renders, docs/b.md's source is junk: neither is written (a build is all its docs or none)."""
    (checkout / "bad.json").write_text("{junk")
    monkeypatch.setitem(render_docs.RENDERERS, "bad", (lambda r: "never", ("bad.json",)))
    (checkout / "docs" / "a.md").write_text(_block())
    (checkout / "docs" / "b.md").write_text(_block(open_="<!-- render: bad -->"))
    with pytest.raises(UserError, match=r"docs/b\.md: bad\.json: not valid JSON"):
        render_docs.main([], root=checkout)
    assert (checkout / "docs" / "a.md").read_text() == _block()
