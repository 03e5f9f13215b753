"""What made each finished run and evaluation of a study, so that a resumed study reuses only its own.

A study resumes into its `--out`: a run folder with weights and a training cost, an evaluation file, is taken as
done. That was true whatever made it: a `--quick` rehearsal's tiny runs resumed as the full study's, another
`--model`'s base scores, an evaluation at another `n`, `limit` or temperature, a method config edited since. Now
each run folder keeps the command that trained it (`study_run.json`: the runner's flags without the output folder or
the progress bar, the base model resolved, the sha256 of the method config) and each evaluation file the settings
it was drawn with (`study_evaluation.settings`). A finished one made otherwise is refused with one line naming the
folder and the first difference, never reused; a folder from before these records is taken as it is.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from grpo_ext.errors import UserError

__all__ = [
    "RUN_RECORD",
    "check_evaluation",
    "check_training",
    "evaluation_settings",
    "record_training",
    "training_record",
]

RUN_RECORD = "study_run.json"
#: Flags of a run's command that do not change what it trains (the folder: --out may be spelled another way).
_NEUTRAL = {"--output_dir": 1, "--disable_tqdm": 1}


def _model_identity(name: str) -> str:
    from grpo_ext.evaluation.models_given import model_identity

    try:
        return model_identity(name)
    except FileNotFoundError:
        return name


def training_record(argv: list[str], config_path: str | Path, base_identity: str | None = None) -> dict:
    """The command of a study run as recorded: its flags less the neutral ones, the base model resolved (or named by
    `base_identity`: a study's start, by its hash), the method config named by its file name (the clone it sits in
    is no part of the command), and the config's sha256."""
    flags, i = [], 0
    while i < len(argv):
        if argv[i] in _NEUTRAL:
            i += 1 + _NEUTRAL[argv[i]]
            continue
        value = argv[i]
        if i > 0 and argv[i - 1] == "--model_name_or_path":
            value = base_identity or _model_identity(value)
        flags.append(value)
        i += 1
    config = Path(config_path)
    digest = hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None
    return _comparable({"argv": flags, "config_sha256": digest})


def _comparable(record: dict) -> dict:
    """``record`` with its ``--config`` path cut to the file name: what the config says is its sha256, so the same
    study resumed from another clone (or a worktree) is the same command. Records written before this kept the path."""
    argv = list(record.get("argv") or [])
    for i in range(len(argv) - 1):
        if argv[i] == "--config":
            argv[i + 1] = Path(argv[i + 1]).name
    return {**record, "argv": argv}


def _first_difference(old: dict, new: dict) -> str:
    if old.get("config_sha256") != new.get("config_sha256"):
        return "its method config was edited since"
    old_argv, new_argv = old.get("argv") or [], new.get("argv") or []
    for a, b in zip(old_argv, new_argv, strict=False):
        if a != b:
            return f"{a!r} where this study has {b!r}"
    return f"flags {old_argv[len(new_argv) :] or new_argv[len(old_argv) :]} differ"


def check_training(folder: Path, record: dict) -> None:
    """A finished run in ``folder`` was trained by ``record``'s command (or before records were kept), else a
    `UserError`: a study never takes another command's run for its own."""
    path = Path(folder) / RUN_RECORD
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read the record of the run ({err})") from None
    old = _comparable(old)
    if old != record:
        raise UserError(
            f"{folder}: a finished run of another command ({_first_difference(old, record)}; e.g. a --quick "
            "rehearsal or another --model): a study never reuses it; use another --out, or remove that folder"
        )


def record_training(folder: Path, record: dict) -> None:
    """Write ``record`` into ``folder`` before the run starts (a killed run is then known to be of this command)."""
    from grpo_ext.io import atomic_write_json

    Path(folder).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(folder) / RUN_RECORD, record)


def evaluation_settings(
    model: str, params_key: str, task_id: str, limit: int | None, dtype, model_identity: str | None = None
) -> dict:
    """What an evaluation of a study was drawn with: the model (resolved, or named by `model_identity`), the sampling
    parameters' key (n, temperature, max_new_tokens, seed, stop), the task and split, the problem limit, the dtype."""
    model = model_identity or _model_identity(model)
    return {"model": model, "params": params_key, "task": task_id, "limit": limit, "dtype": dtype}


def check_evaluation(target: Path, settings: dict) -> None:
    """An evaluation file made with ``settings`` (or before they were recorded), else a `UserError` naming it."""
    try:
        result = json.loads(Path(target).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{target}: cannot read the evaluation ({err}); remove it to score again") from None
    old = (result.get("study_evaluation") or {}).get("settings")
    if old is None or old == settings:
        return
    what = next(key for key in settings if old.get(key) != settings[key])
    raise UserError(
        f"{target}: scored with another {what} ({old.get(what)!r}, this study: {settings[what]!r}): a study never "
        "reuses it; use another --out, or remove that file"
    )
