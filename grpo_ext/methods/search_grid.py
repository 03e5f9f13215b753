"""scripts/search.py's grid: `--grid FIELD=V1,V2,...` axes parsed and checked, their settings and folder names, the
pick, and the flags `--train-args` may add.

Every check here keeps a search inside its `--out` and comparable: the fields that place, resume and checkpoint a
run are the search's own (`SEARCH_OWNED`), the task and base model are the config's (`CONFIG_OWNED`), a value is one
folder name (no path separator), and one value is trained once however it is spelled.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shlex
from pathlib import Path

from grpo_ext.errors import UserError

__all__ = [
    "CONFIG_OWNED",
    "SEARCH_MARKER",
    "SEARCH_OWNED",
    "check_out",
    "check_settings",
    "check_train_args",
    "parse_grid",
    "pick",
    "settings_of",
    "slug_of",
]

SEARCH_MARKER = ".grpo_ext_search.json"  # written into --out: the folder is a search's (its files may be replaced)

# Where a run writes, what it continues and how it checkpoints: the search decides these (under --out), so neither
# a grid nor --train-args may name them (a grid of output_dir values would train outside --out, into folders it
# then reads; a run without checkpoints could not resume).
SEARCH_OWNED = (
    "output_dir",
    "logging_dir",
    "resume_from_checkpoint",
    "overwrite_output_dir",
    "config",
    "save_strategy",
    "save_steps",
    "save_total_limit",
)
# What every run is scored and compared on: the config's task (the harness reads it from the config) and base model.
# A grid or --train-args that changed them would train on one task and score another (or compare with another base).
CONFIG_OWNED = ("task", "task_kwargs", "model_name_or_path")
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def parse_grid(specs: list[str]) -> dict[str, list[str]]:
    """``["learning_rate=1e-4,3e-4", ...]`` -> ``{"learning_rate": ["1e-4", "3e-4"], ...}`` (values kept as typed:
    the training parser converts them, and rejects what its field does not take)."""
    grid: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip().removeprefix("--")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not items:
            raise UserError(f"--grid: expected FIELD=V1,V2,... (e.g. learning_rate=1e-4,3e-4), got {spec!r}")
        if name in SEARCH_OWNED:
            raise UserError(f"--grid {name}: the search sets {name} itself (runs go under --out); not a grid field")
        if name in CONFIG_OWNED:
            raise UserError(f"--grid {name}: every run is scored on the config's task and base; set {name} there")
        if not FIELD_NAME.fullmatch(name):
            raise UserError(f"--grid: {name!r} is not a field name")
        if name in grid:
            raise UserError(f"--grid: field {name!r} given twice")
        for value in items:  # a value is part of a folder name under --out: it must stay one folder there
            if any(c in value for c in "/\\\0") or value.startswith("--"):
                raise UserError(f"--grid {name}: value {value!r} may not contain '/', '\\' or start with '--'")
        if len(set(map(_same_value, items))) != len(items):
            raise UserError(f"--grid {name}: repeated value in {values!r}")
        grid[name] = items
    if not grid:
        raise UserError("--grid: give at least one FIELD=V1,V2,...")
    longest = max(settings_of(grid), key=lambda setting: len(slug_of(setting).encode()))
    if len(slug_of(longest).encode()) > 200:  # a folder name (most file systems stop at 255 bytes)
        raise UserError(f"--grid: the setting {slug_of(longest)[:60]}... makes a folder name over 200 bytes")
    return grid


def _same_value(value: str):
    """One spelling per value: `1e-4` and `0.0001` are the same learning rate (trained once, not twice)."""
    try:
        return float(value)
    except ValueError:
        return value.lower() if value.lower() in ("true", "false") else value


def check_train_args(text: str) -> list[str]:
    """`--train-args` as flags, none of them one the search sets itself (`SEARCH_OWNED`)."""
    try:
        flags = shlex.split(text)
    except ValueError as err:  # unbalanced quotes
        raise UserError(f"--train-args: cannot split {text!r} into flags ({err})") from None
    for flag in flags:
        name = flag.removeprefix("--").partition("=")[0]
        if flag.startswith("--") and name in SEARCH_OWNED:
            raise UserError(f"--train-args: {flag}: the search sets {name} itself (runs go under --out)")
        if flag.startswith("--") and name in CONFIG_OWNED:
            raise UserError(f"--train-args: {flag}: every run is scored on the config's task and base; set it there")
    return flags


def settings_of(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    return [dict(zip(grid, combo, strict=True)) for combo in itertools.product(*grid.values())]


def slug_of(setting: dict[str, str]) -> str:
    return ",".join(f"{name}={value}" for name, value in setting.items())


def pick(settings: list[dict[str, str]], scores: dict[str, float]) -> dict[str, str]:
    """The setting with the highest validation score; ties go to the earlier one of the grid (the study's picker)."""
    from grpo_ext.methods.study.config import pick_best

    return settings[pick_best([slug_of(s) for s in settings], scores)]


def check_settings(config: str, grid: dict[str, list[str]], train_args: list[str], seeding: list[str]) -> None:
    """Every setting's training command parsed as scripts/train.py parses it (a field typo, a value out of range),
    before the first run trains: not a failure after the earlier settings' runs."""
    from trl import ModelConfig

    from grpo_ext.cli import parse_trl_config
    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.script_args import TrainArguments

    for setting in settings_of(grid):
        flags = [a for name, value in setting.items() for a in (f"--{name}", value)]
        argv = ["--config", config, "--output_dir", "unused", *train_args, *seeding, *flags]
        try:
            parse_trl_config((TrainArguments, GRPOExtConfig, ModelConfig), argv)
        except UserError as err:
            raise UserError(f"--grid {slug_of(setting)}: {err}") from None


def check_out(out: Path) -> None:
    """`--out` is new, empty, or an earlier search's (its marker, or a search.json of one): search.json / search.md
    would replace a user's files in any other folder."""
    from grpo_ext.run_folder import LOCK_FILE

    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"--out: {out} is not a folder")
    names = sorted(p.name for p in out.iterdir() if p.name != LOCK_FILE)
    if not names or SEARCH_MARKER in names:
        return
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a search from before the marker: its record
        if {"grid", "pick"} <= json.loads((out / "search.json").read_text()).keys():
            return
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    raise UserError(f"--out: {out} is not empty ({shown}) and holds no search; choose an empty or new folder")
