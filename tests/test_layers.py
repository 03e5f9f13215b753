"""The house's floors: a module of `grpo_ext/` imports only from its own floor or the ones below (no arrow runs back
up, function-level imports included), every module has a floor, and the layout (docs/layout.md) names every module.

The floors are written here, lowest first, as docs/layout.md draws them; a new module is given its floor here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "grpo_ext"
LAYOUT_DOC = ROOT / "docs" / "layout.md"  # the layout drawn for readers (it left the README in issue 51)

#: Lowest first. A unit is a top-level module or a subpackage of grpo_ext (a subpackage's modules import each other
#: freely; that is its own business).
FLOORS: list[set[str]] = [
    {"__init__", "errors", "io", "report_format", "char_tokenizer", "workers"},
    {"real_model_fetch", "model_paths", "model_files", "prompt_fit", "stand_ins"},
    {"registration", "advantage_math", "advantages", "kl_control", "reasoning_steps", "batching"},
    {"checkpoints", "run_folder", "run_record"},
    {"tasks", "rewards"},
    {"sampler"},
    {"validation", "config_checks", "config", "cli", "script_args"},
    {"policy_loading", "memory_footprint", "qlora_base", "rollouts", "shared_prompt"},
    {"evaluation"},
    {"hub"},
    {"trainer", "trainer_state", "assembly"},
    {"methods", "iterative"},
]


def _module_name(path: Path, package_root: Path) -> str:
    parts = list(path.with_suffix("").relative_to(package_root.parent).parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Every module a source imports, anywhere in it (top level, functions, TYPE_CHECKING), relative ones resolved."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module
            if node.level:  # `from . import x` in a package's __init__ is relative to the package, elsewhere its parent
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from a import x`: x is a module of a, or a name a defines; either way the arrow goes to a (or a.x)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def unit_of(module: str, package: str = "grpo_ext") -> str | None:
    parts = module.split(".")
    if parts[0] != package:
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def arrows(package_root: Path) -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> the files that draw that arrow, between different units."""
    found: dict[tuple[str, str], list[str]] = {}
    known = units(package_root)
    for path in sorted(package_root.rglob("*.py")):
        module = _module_name(path, package_root)
        source_unit = unit_of(module, package_root.name)
        for imported in imported_modules(path.read_text(), module, path.name == "__init__.py"):
            target = unit_of(imported, package_root.name)
            if target is not None and target not in known:  # `from grpo_ext import name`: a name of its __init__
                target = "__init__"
            if target is not None and target != source_unit:
                found.setdefault((source_unit, target), []).append(str(path.relative_to(package_root.parent)))
    return found


def units(package_root: Path) -> set[str]:
    return {
        p.stem if p.is_file() else p.name
        for p in package_root.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }


def test_the_import_reader_on_a_hand_written_package(tmp_path):
    pkg = tmp_path / "grpo_ext"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("import os\n")
    (pkg / "sub" / "__init__.py").write_text("from . import inner\nfrom ..low import x\n")
    (pkg / "sub" / "inner.py").write_text("def f():\n    from grpo_ext.high import y\n    from .other import z\n")
    (pkg / "high.py").write_text("from grpo_ext import sub\nimport grpo_ext.low\n")
    assert arrows(pkg) == {
        ("sub", "low"): ["grpo_ext/sub/__init__.py"],
        ("sub", "high"): ["grpo_ext/sub/inner.py"],  # a function-level import is an arrow too
        ("high", "sub"): ["grpo_ext/high.py"],
        ("high", "low"): ["grpo_ext/high.py"],
    }
    assert units(pkg) == {"__init__", "low", "high", "sub"}


def test_every_module_has_a_floor_and_one_only():
    placed = [unit for floor in FLOORS for unit in floor]
    assert len(placed) == len(set(placed)), "a unit on two floors"
    assert units(PACKAGE) - set(placed) == set(), "give the new module a floor in FLOORS (and docs/layout.md)"
    assert set(placed) - units(PACKAGE) == set(), "a floor names a module that no longer exists"


def test_no_import_runs_back_up():
    floor_of = {unit: i for i, floor in enumerate(FLOORS) for unit in floor}
    upward = {
        f"{src} (floor {floor_of[src]}) -> {dst} (floor {floor_of[dst]}): {', '.join(files)}"
        for (src, dst), files in arrows(PACKAGE).items()
        if floor_of[dst] > floor_of[src]
    }
    assert upward == set()


@pytest.mark.parametrize("unit", sorted(u for floor in FLOORS for u in floor if u != "__init__"))
def test_the_readme_layout_names_every_module(unit):
    layout = LAYOUT_DOC.read_text().split("```", 2)[1]
    name = f"{unit}/" if (PACKAGE / unit).is_dir() else f"{unit}.py"
    assert re.search(rf"(^|\s){re.escape(name)}(\s|$)", layout, re.MULTILINE), f"docs/layout.md: {name} missing"


@pytest.mark.parametrize(
    "module",
    sorted(
        str(path.relative_to(PACKAGE).with_suffix(""))
        for path in PACKAGE.glob("*/**/*.py")
        if path.name not in ("__init__.py", "__main__.py") and "assets" not in path.parts
    ),
)
def test_the_readme_layout_names_every_module_of_a_subpackage(module):
    """A subpackage's line in the layout lists its modules by name (``tasks/  base, data, ...``): a new one is named."""
    layout = LAYOUT_DOC.read_text().split("```", 2)[1]
    name = Path(module).name
    assert re.search(rf"(?<![\w/.]){re.escape(name)}(?![\w.])", layout), f"docs/layout.md: {module} missing"


def test_the_study_core_imports_no_diagnostic():
    """grpo_ext/methods/study: the learning signal (signal/), the anatomy and the training dynamics import the study's
    core, never the other way; only the report imports them (the study package's doc)."""
    study = PACKAGE / "methods" / "study"
    diagnostics = ("grpo_ext.methods.study.signal", "grpo_ext.methods.study.anatomy", "grpo_ext.methods.study.dynamics")
    found = {
        path.name: sorted(
            m
            for m in imported_modules(path.read_text(), _module_name(path, PACKAGE), False)
            if m.startswith(diagnostics)
        )
        for path in sorted(study.glob("*.py"))
        if path.stem not in ("anatomy", "dynamics", "report")
    }
    assert {name: modules for name, modules in found.items() if modules} == {}
