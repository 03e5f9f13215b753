"""The docs cannot drift from their files: every rendered block equals what its JSON renders now (`make docs`), every
relative link in README.md and docs/ points at a file (and heading) that exists, and every number in the README's
headline results is in the file its line links (scripts/render_docs.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scripts import render_docs
from scripts.render_docs import BLOCK, RENDERERS, blocks, doc_files, render_text

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", doc_files(ROOT), ids=_id)
def test_every_rendered_block_is_what_its_json_renders(path):
    text = path.read_text()
    assert render_text(text) == text, f"{_id(path)} is stale: run `make docs`"


def test_every_renderer_is_used_by_a_doc_and_every_block_names_one():
    used = [name for path in doc_files(ROOT) for name in blocks(path.read_text())]
    assert set(used) <= set(RENDERERS), f"blocks without a renderer: {set(used) - set(RENDERERS)}"
    assert set(RENDERERS) <= set(used), f"renderers no doc uses: {set(RENDERERS) - set(used)}"


def test_a_block_is_rewritten_from_its_source_and_an_unknown_name_is_refused(tmp_path, monkeypatch):
    (tmp_path / "r.json").write_text(json.dumps({"x": 0.25}))
    monkeypatch.setitem(RENDERERS, "toy", (lambda r: f"x = {r['x']:.3f}", ("r.json",)))
    render_docs.load_source.cache_clear()
    doc = "before\n<!-- render: toy -->\nx = 9.999 (typed by hand)\n<!-- /render -->\nafter\n"
    out = render_text(doc, tmp_path)
    assert "x = 0.250\n\n*Rendered by `make docs` from `r.json`.*\n<!-- /render -->\nafter" in out
    assert render_text(out, tmp_path) == out  # idempotent
    with pytest.raises(KeyError, match="no renderer named 'nope'"):
        render_text("<!-- render: nope -->\n<!-- /render -->", tmp_path)
    render_docs.load_source.cache_clear()


def test_check_mode_lists_a_stale_block(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "r.json").write_text("{}")
    (tmp_path / "docs" / "a.md").write_text("<!-- render: toy -->\nold\n<!-- /render -->\n")
    monkeypatch.setitem(RENDERERS, "toy", (lambda r: "new", ("r.json",)))
    render_docs.load_source.cache_clear()
    assert render_docs.stale(tmp_path) == ["docs/a.md: toy"]
    render_docs.load_source.cache_clear()


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text, inside = [], False
    for line in path.read_text().split("\n"):
        if line.startswith("```"):
            inside = not inside
        elif not inside and line.startswith("#"):
            text.append(_slug(line.lstrip("#")))
    return set(text)


@pytest.mark.parametrize("path", MARKDOWN, ids=_id)
def test_every_relative_link_points_at_something(path):
    text = BLOCK.sub("", path.read_text())
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists() or anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert broken == [], f"{_id(path)}: links to nothing: {broken}"


def _numbers_in(value) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers_in(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers_in(v)]
    if isinstance(value, str):
        return [float(x.replace(",", "")) for x in re.findall(r"[-+]?\d[\d,]*\.?\d*", value)]
    return []


def _headlines() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Headline results", 1)[1].split("\n## ", 1)[0]
    return [item.replace("\n", " ") for item in re.split(r"\n- ", section)[1:]]


def test_the_readme_has_headlines_each_with_its_source():
    lines = _headlines()
    assert len(lines) >= 4
    for line in lines:
        assert any(t.endswith(".json") for t in LINK.findall(line)), f"a headline without its JSON: {line[:80]}"


@pytest.mark.parametrize("line", _headlines(), ids=lambda line: line[:40])
def test_every_number_in_a_headline_is_in_its_source_file(line):
    """A number written with d decimals is some value of the linked JSON rounded to d decimals (either sign, or x100
    for a share); integers must appear as they are. Link targets, model names and section numbers are not read."""
    sources = [t for t in LINK.findall(line) if t.endswith(".json")]
    values = [x for s in sources for x in _numbers_in(json.loads((ROOT / s).read_text()))]
    prose = LINK.sub(lambda m: m.group(0).split("](")[0], line)  # keep link texts, drop targets
    prose = re.sub(r"`[^`]*`|SmolLM2-135M-Instruct|pass\^?@?\d+|maj@\d+|pass\^\d+", " ", prose)
    prose = re.sub(r"\[[^\]]*\.json\]|\[docs/[^\]]*\]", " ", prose)
    missing = []
    for text in re.findall(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?![\w.])", prose):
        number = float(text.replace(",", ""))
        digits = len(text.split(".")[1]) if "." in text else 0
        if digits == 0 and number <= 12:
            continue  # small counts written in words' place (seeds, iterations) are checked by the docs' blocks
        if not any(round(v, digits) == round(abs(number), digits) or round(v, digits) == number for v in values):
            missing.append(text)
    assert missing == [], f"numbers not in {sources}: {missing}"
