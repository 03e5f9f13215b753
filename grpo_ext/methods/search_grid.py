"""scripts/search.py's grid: `--grid FIELD=V1,V2,...` axes parsed and checked, their settings and folder names, the
pick, and the flags `--train-args` may add.

Every check here keeps a search inside its `--out` and comparable: the fields that place, resume and checkpoint a
run are the search's own (`SEARCH_OWNED`), the task and base model are the config's (`CONFIG_OWNED`), and one value
is trained once however it is spelled. The protected fields are checked on what scripts/train.py's parser makes of
the flags (`check_settings`), never on how a flag is spelled: `--output-dir X`, `--output_dir=X` and a grid axis all
reach the same field. A setting becomes one folder under `--out` through `grpo_ext.run_folder.path_part`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shlex
from pathlib import Path

from grpo_ext.errors import UserError
from grpo_ext.run_folder import path_part

__all__ = [
    "CONFIG_OWNED",
    "SEARCH_MARKER",
    "SEARCH_OWNED",
    "check_settings",
    "is_search_folder",
    "check_train_args",
    "parse_grid",
    "pick",
    "pick_best",
    "settings_of",
    "slug_of",
]

# Written into --out by searches before `grpo_ext.run_folder.FOLDER_RECORD`: such a folder is a search's.
SEARCH_MARKER = ".grpo_ext_search.json"

# Where a run writes, what it continues and how it checkpoints: the search decides these (under --out), so neither
# a grid nor --train-args may change them (a grid of output_dir values would train outside --out, into folders it
# then reads; --overwrite_output_dir would clear a user's run there; a run without checkpoints could not resume).
# A second --config is refused by the training parser itself.
SEARCH_OWNED = (
    "output_dir",
    "resume_from_checkpoint",
    "overwrite_output_dir",
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
        if not FIELD_NAME.fullmatch(name):
            raise UserError(f"--grid: {name!r} is not a field name")
        if name in grid:
            raise UserError(f"--grid: field {name!r} given twice")
        for value in items:  # "--output_dir" as a value would be read as a flag by train.py's parser
            if value.startswith("--"):
                raise UserError(f"--grid {name}: value {value!r} may not start with '--'")
        if len(set(map(_same_value, items))) != len(items):
            raise UserError(f"--grid {name}: repeated value in {values!r}")
        grid[name] = items
    if not grid:
        raise UserError("--grid: give at least one FIELD=V1,V2,...")
    for setting in settings_of(grid):  # a setting is one folder under --out: never a path out of it
        path_part(slug_of(setting), f"--grid {slug_of(setting)[:60]}")
    return grid


def _same_value(value: str):
    """One spelling per value: `1e-4` and `0.0001` are the same learning rate (trained once, not twice)."""
    try:
        return float(value)
    except ValueError:
        return value.lower() if value.lower() in ("true", "false") else value


def check_train_args(text: str) -> list[str]:
    """`--train-args` as flags (what they set is checked with the grid's settings: `check_settings`)."""
    try:
        return shlex.split(text)
    except ValueError as err:  # unbalanced quotes
        raise UserError(f"--train-args: cannot split {text!r} into flags ({err})") from None


def settings_of(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    return [dict(zip(grid, combo, strict=True)) for combo in itertools.product(*grid.values())]


def slug_of(setting: dict[str, str]) -> str:
    return ",".join(f"{name}={value}" for name, value in setting.items())


def pick_best(slugs: list[str], scores: dict[str, float]) -> int:
    """The position in ``slugs`` (a grid, in order) of the highest validation score; ties go to the earlier setting.
    The one picker of the project: scripts/search.py's grid and the study's arms (grpo_ext.experiments.study) both
    pick with it."""
    return max(range(len(slugs)), key=lambda i: (scores[slugs[i]], -i))


def pick(settings: list[dict[str, str]], scores: dict[str, float]) -> dict[str, str]:
    """The setting with the highest validation score; ties go to the earlier one of the grid (`pick_best`)."""
    return settings[pick_best([slug_of(s) for s in settings], scores)]


#: Where `check_settings` parses a command that must not choose its output folder: any value that is not this one
#: is a flag that moved the run.
_OUTPUT_PLACEHOLDER = "<the search's run folder>"


def _parsed(config: str, flags: list[str], where: str) -> dict:
    """The fields scripts/train.py's parser makes of `--config config` and `flags` (every dataclass it fills, by field
    name), the run's folder left to the search."""
    import dataclasses

    from trl import ModelConfig

    from grpo_ext.cli import parse_trl_config
    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.script_args import TrainArguments

    argv = ["--config", config, "--output_dir", _OUTPUT_PLACEHOLDER, *flags]
    try:
        parsed = parse_trl_config((TrainArguments, GRPOExtConfig, ModelConfig), argv)
    except UserError as err:
        raise UserError(f"{where}: {err}") from None
    return {f.name: getattr(args, f.name) for args in parsed for f in dataclasses.fields(args)}


def _check_kept(fields: dict, config_fields: dict, protected: dict[str, str], where: str) -> None:
    for name, why in protected.items():
        if fields[name] != config_fields[name]:
            shown = "another folder" if name == "output_dir" else repr(fields[name])
            raise UserError(f"{where}: sets {name} to {shown} (the config's: {config_fields[name]!r}); {why}")


def check_settings(config: str, grid: dict[str, list[str]], train_args: list[str], seeding: list[str]) -> None:
    """Every setting's training command parsed as scripts/train.py parses it, before the first run trains: a field typo
    or a value out of range fails here, not after the earlier settings' runs; and neither `--train-args` nor a grid
    axis may change a protected field (`SEARCH_OWNED`, `CONFIG_OWNED`, and with `--search-seed` the seed), which is
    decided on the parsed values, so no spelling of a flag (`--output-dir`, `--output_dir=X`) gets past it."""
    protected = dict.fromkeys(SEARCH_OWNED, "the search sets it itself (runs go under --out, checkpointed to resume)")
    protected |= dict.fromkeys(CONFIG_OWNED, "every run is scored on the config's task and base: set it in the config")
    if seeding:
        protected["seed"] = "--search-seed sets every grid run's seed (and the test run keeps the config's)"
    config_fields = _parsed(config, [], "--config")
    _check_kept(_parsed(config, train_args, "--train-args"), config_fields, protected, "--train-args")
    for setting in settings_of(grid):
        flags = [a for name, value in setting.items() for a in (f"--{name}", value)]
        where = f"--grid {slug_of(setting)}"
        _check_kept(_parsed(config, [*train_args, *flags], where), config_fields, protected, where)
        _parsed(config, [*train_args, *seeding, *flags], where)  # the command as it will run


def is_search_folder(out: Path) -> bool:
    """Whether `out`, without `grpo_ext.run_folder.FOLDER_RECORD`, is an earlier search's (its marker, or a search.json
    of one): `grpo_ext.run_folder.OutputFolder` takes such a folder over; any other folder of files is refused."""
    if (out / SEARCH_MARKER).is_file():
        return True
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return {"grid", "pick"} <= json.loads((out / "search.json").read_text()).keys()
    return False
