"""Issue 52's last adversarial pass, `make docs` (scripts/render_docs.py, through its `main`): a source JSON holding NaN
rendered "nan" into the docs, and a doc written with CRLF line endings came back LF. Each case failed before its fix.
The study's and the iterative loop's cases are beside their tests (tests/experiments/study/test_study_resume_junk.py,
tests/experiments/iterative/test_iterative_resume_junk.py)."""

from __future__ import annotations

import pytest

from grpo_ext.errors import UserError
from scripts import render_docs


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout whose renderer `toy` prints r.json's `rows[*].x` (its sources written by each test)."""
    (tmp_path / "docs").mkdir()
    table = lambda r: "\n".join(f"| {row['name']} | {row['x']:.3f} |" for row in r["rows"])  # noqa: E731
    monkeypatch.setitem(render_docs.RENDERERS, "toy", (table, ("r.json",)))
    render_docs.load_source.cache_clear()
    yield tmp_path
    render_docs.load_source.cache_clear()


BLOCK = "<!-- render: toy -->\nold\n<!-- /render -->\n"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("check", [False, True], ids=["make docs", "--check"])
def test_a_source_holding_nan_is_refused_naming_the_file_and_key(constant, check, checkout):
    (checkout / "r.json").write_text(f'{{"rows": [{{"name": "a", "x": 0.5}}, {{"name": "b", "x": {constant}}}]}}')
    doc = "Prose.\n" + BLOCK
    (checkout / "docs" / "a.md").write_text(doc)
    with pytest.raises(UserError, match=rf"docs/a\.md: r\.json: rows\[1\]\.x is {constant}, not a number"):
        render_docs.main(["--check"] if check else [], root=checkout)
    assert (checkout / "docs" / "a.md").read_text() == doc


def test_a_source_with_null_for_a_missing_number_still_reaches_its_renderer(checkout, monkeypatch):
    """Null is how a source says a number is missing (never refused as NaN is): the renderer prints it as it
    documents."""
    shown = lambda r: "\n".join(f"| {row['name']} | {'n/a' if row['x'] is None else row['x']} |" for row in r["rows"])  # noqa: E731
    monkeypatch.setitem(render_docs.RENDERERS, "toy", (shown, ("r.json",)))
    (checkout / "r.json").write_text('{"rows": [{"name": "a", "x": null}]}')
    (checkout / "docs" / "a.md").write_text(BLOCK)
    assert render_docs.main([], root=checkout) == 0
    assert "| a | n/a |" in (checkout / "docs" / "a.md").read_text()


@pytest.mark.parametrize("ending", ["\r\n", "\n"], ids=["CRLF", "LF"])
def test_a_doc_keeps_its_line_endings(ending, checkout):
    (checkout / "r.json").write_text('{"rows": [{"name": "a", "x": 0.25}, {"name": "b", "x": 0.5}]}')
    doc = ending.join(["# Title", "", "Prose a person wrote.", *BLOCK.splitlines(), "After.", ""])
    path = checkout / "docs" / "a.md"
    path.write_bytes(doc.encode())
    assert render_docs.main([], root=checkout) == 0
    written = path.read_bytes().decode()
    assert "| a | 0.250 |" + ending + "| b | 0.500 |" in written and "old" not in written
    assert written.count(ending) == written.count("\n")  # every line ends as the doc's did
    assert written.startswith(ending.join(["# Title", "", "Prose a person wrote.", ""]))
    assert written.endswith(ending.join(["<!-- /render -->", "After.", ""]))
    assert render_docs.main(["--check"], root=checkout) == 0  # and reads as up to date
